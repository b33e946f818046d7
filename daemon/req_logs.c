/* req_logs.c — the logs request: a chunk (at most LOG_CHUNK bytes) of a
 * trial's log file from an offset, made valid UTF-8 for JSON. It reads
 * only $BF_HOME/logs/TRIAL.log of a trial the store knows, never a path
 * from the request. log_tail_json gives the last lines of that file (what
 * `show tTRIAL` prints of a failed trial). */
#include "daemon/req.h"

#include "common/input_path.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#define LOG_CHUNK 65536
#define LOG_TAIL_MAX 8192 /* bytes read for log_tail_json */

/* Keeps valid UTF-8 (JSON strings must be): replaces other bytes, and NUL,
 * by '?'. */
static void utf8_fix(char *buf, long long got) {
    for (long long i = 0; i < got;) {
        unsigned char c = (unsigned char)buf[i];
        int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        int ok = len > 0 && i + len <= got;
        for (int k = 1; ok && k < len; k++) ok = ((unsigned char)buf[i + k] >> 6) == 2;
        if (ok && c == 0) ok = 0;
        if (!ok) {
            buf[i++] = '?';
            continue;
        }
        i += len;
    }
}

void req_logs(bfd *d, void *s, proto_msg *m) {
    char ferr[512];
    long long id, off, max;
    FIELD(proto_get_int(m->body, "trial", 1, 1, PROTO_MAX_INT, 0, &id, ferr, sizeof ferr));
    FIELD(proto_get_int(m->body, "offset", 0, 0, PROTO_MAX_INT, 0, &off, ferr, sizeof ferr));
    FIELD(proto_get_int(m->body, "max", 0, 1, LOG_CHUNK, LOG_CHUNK, &max, ferr, sizeof ferr));
    int64_t job;
    if (get_trial_job(d, s, m, id, &job)) return;
    char path[1300];
    snprintf(path, sizeof path, "%s/logs/%lld.log", d->o->home, id);
    static char buf[LOG_CHUNK + 1];
    long long size = 0, got = 0;
    /* the worker writes this folder: a FIFO put there must not block the
     * loop in open(), nor a device be read */
    char why[256];
    int fd = input_path_open_fd(path, why, sizeof why);
    if (fd < 0 && errno != ENOENT) {
        reply_err(d, s, m, PROTO_E_STATE, "logs: %s %s", path, why);
        return;
    }
    if (fd >= 0) {
        struct stat sb;
        if (fstat(fd, &sb) == 0) size = sb.st_size;
        if (off < size) {
            ssize_t r = pread(fd, buf, (size_t)max, (off_t)off);
            if (r > 0) got = r;
        }
        close(fd);
    }
    utf8_fix(buf, got);
    json_t *data = json_stringn(buf, (size_t)got);
    if (!data) data = json_string("");
    json_t *b = json_pack("{s:I, s:s, s:I, s:I, s:I, s:o}", "trial", (json_int_t)id, "path", path,
                          "offset", (json_int_t)off, "next", (json_int_t)(off + got), "size",
                          (json_int_t)size, "data", data);
    reply(d, s, m, "logs", b);
    json_decref(b);
}

json_t *log_tail_json(bfd *d, long long id, int lines) {
    char path[1300];
    snprintf(path, sizeof path, "%s/logs/%lld.log", d->o->home, id);
    static char buf[LOG_TAIL_MAX + 1];
    long long got = 0;
    char why[256];
    int fd = input_path_open_fd(path, why, sizeof why);
    if (fd < 0) return NULL;
    struct stat sb;
    if (fstat(fd, &sb) == 0) {
        off_t from = sb.st_size > LOG_TAIL_MAX ? sb.st_size - LOG_TAIL_MAX : 0;
        ssize_t r = pread(fd, buf, LOG_TAIL_MAX, from);
        if (r > 0) got = r;
    }
    close(fd);
    while (got > 0 && buf[got - 1] == '\n') got--; /* the last line's end */
    long long start = got;
    for (int n = 0; start > 0; start--)
        if (buf[start - 1] == '\n' && ++n == lines) break;
    /* a cut UTF-8 sequence at the start becomes '?' */
    utf8_fix(buf + start, got - start);
    json_t *t = json_stringn(buf + start, (size_t)(got - start));
    return t ? t : json_string("");
}
