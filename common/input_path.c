/* input_path — see input_path.h. */
#include "common/input_path.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *input_path_kind(mode_t m) {
    if (S_ISREG(m)) return "a regular file";
    if (S_ISDIR(m)) return "a folder";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISLNK(m)) return "a symbolic link";
    return "a file of unknown kind";
}

/* "not found", naming the folder a relative path was looked up in (a
 * sweep's relative data path is read from the folder it was submitted
 * from, which the user may not have in mind). */
static void not_found(const char *path, char *why, size_t whylen) {
    char cwd[1024];
    if (path[0] != '/' && getcwd(cwd, sizeof cwd))
        snprintf(why, whylen, "not found (a relative path, looked up in %s)", cwd);
    else
        snprintf(why, whylen, "not found");
}

int input_path_check(const char *what, const char *path, int want, const char *expected,
                     int *is_dir, char *err, size_t errlen) {
    struct stat st;
    const char *sep = what ? ": " : "";
    if (!what) what = "";
    if (is_dir) *is_dir = 0;
    if (!expected)
        expected = want == INPUT_DIR    ? "a folder"
                   : want == INPUT_FILE ? "a regular file"
                                        : "a regular file or a folder";
    if (stat(path, &st) != 0) {
        char why[1100];
        if (errno == ENOENT)
            not_found(path, why, sizeof why);
        else
            snprintf(why, sizeof why, "%s", strerror(errno));
        snprintf(err, errlen, "%s%s%s: %s", what, sep, path, why);
        return -1;
    }
    int ok =
        (S_ISREG(st.st_mode) && (want & INPUT_FILE)) || (S_ISDIR(st.st_mode) && (want & INPUT_DIR));
    if (!ok) {
        snprintf(err, errlen, "%s%s%s is %s; expected %s", what, sep, path,
                 input_path_kind(st.st_mode), expected);
        return -1;
    }
    if (is_dir) *is_dir = S_ISDIR(st.st_mode);
    return 0;
}

int input_path_open_fd(const char *path, char *why, size_t whylen) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT)
            not_found(path, why, whylen);
        else
            snprintf(why, whylen, "%s", strerror(e));
        errno = e;
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        snprintf(why, whylen, "%s", strerror(e));
        close(fd);
        errno = e;
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(why, whylen, "is %s, not a regular file", input_path_kind(st.st_mode));
        close(fd);
        errno = EINVAL;
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        snprintf(why, whylen, "%s", strerror(e));
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

FILE *input_path_open(const char *path, char *why, size_t whylen) {
    int fd = input_path_open_fd(path, why, whylen);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        snprintf(why, whylen, "%s", strerror(e));
        close(fd);
        errno = e;
    }
    return f;
}
