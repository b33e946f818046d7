/* test_it_http_url — `bfctl dashboard` never prints a stale address. A bfd
 * killed with SIGKILL cannot remove its $BF_HOME/http.url; when another
 * bfd (another BF_HOME, another token) then takes the port, that URL
 * answers 401. bfd removes the file at start (and writes it again only when
 * it serves), and bfctl asks the running bfd for its address: a bfd that
 * serves no dashboard, or none running, is said, not a dead URL printed.
 * No browser: the loopback ports and the files only. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "it_bfd.h"

static char g_dir[256], g_home[320], g_dir2[256], g_home2[320];
static pid_t g_bfd = -1, g_bfd2 = -1;

static void setup(void) {
    it_bfd_home(g_dir2, sizeof g_dir2, g_home2, sizeof g_home2, "/tmp/bf-url2-XXXXXX");
    it_bfd_home(g_dir, sizeof g_dir, g_home, sizeof g_home, "/tmp/bf-url-XXXXXX");
}

static void teardown(void) {
    it_stop(&g_bfd, SIGKILL);
    it_stop(&g_bfd2, SIGKILL);
    tmpdir_remove(g_dir);
    tmpdir_remove(g_dir2);
}

TestSuite(http_url, .init = setup, .fini = teardown, .timeout = 120);

/* A loopback port free now (bound, then closed). */
static int free_port(void) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(s >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    cr_assert_eq(bind(s, (struct sockaddr *)&sa, sizeof sa), 0);
    socklen_t len = sizeof sa;
    cr_assert_eq(getsockname(s, (struct sockaddr *)&sa, &len), 0);
    close(s);
    return ntohs(sa.sin_port);
}

/* bfd.yaml of home with http: as given. */
static void yaml(const char *home, const char *http) {
    char y[128];
    snprintf(y, sizeof y, "slots: 1\nhttp: %s\n", http);
    it_write_text(tmpdir_path(home, "bfd.yaml"), y, 0644);
}

Test(http_url, a_killed_bfds_url_is_not_printed) {
    int port = free_port();
    char addr[64], out[512], url[600];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    yaml(g_home, addr);
    g_bfd = it_bfd_start(g_dir, g_home);
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, "dashboard"), 0);
    snprintf(url, sizeof url, "http://%s/?token=", addr);
    cr_assert(!strncmp(out, url, strlen(url)), "%s", out);
    /* killed: its http.url stays; another home's bfd takes the port */
    it_stop(&g_bfd, SIGKILL);
    cr_assert_eq(access(tmpdir_path(g_home, "http.url"), F_OK), 0, "no stale http.url to test");
    yaml(g_home2, addr);
    setenv("BF_HOME", g_home2, 1);
    g_bfd2 = it_bfd_start(g_dir2, g_home2);
    /* the first home's bfd comes back without a dashboard */
    setenv("BF_HOME", g_home, 1);
    yaml(g_home, "off");
    g_bfd = it_bfd_start(g_dir, g_home);
    it_write_text(tmpdir_path(g_dir, "bfctl.err"), "", 0644);
    cr_assert_neq(it_bfctl(g_dir, out, sizeof out, "dashboard"), 0, "printed %s", out);
    char *err = it_slurp(tmpdir_path(g_dir, "bfctl.err"), NULL);
    cr_assert(strstr(err, "serves no dashboard"), "%s", err);
    free(err);
    cr_assert_neq(access(tmpdir_path(g_home, "http.url"), F_OK), 0, "http.url left in place");
    /* and with no bfd at all */
    it_stop(&g_bfd, SIGTERM);
    it_write_text(tmpdir_path(g_dir, "bfctl.err"), "", 0644);
    cr_assert_neq(it_bfctl(g_dir, out, sizeof out, "dashboard"), 0, "printed %s", out);
    err = it_slurp(tmpdir_path(g_dir, "bfctl.err"), NULL);
    cr_assert(strstr(err, "bfd is not running"), "%s", err);
    free(err);
}
