/* input_path — a path read from outside (a config key, a command-line
 * argument), checked to be what the reader expects before it is opened, so
 * a FIFO or a device never blocks a reader in open() and a refusal says what
 * the path is ("a FIFO", "a character device"). Every loader of the worker
 * opens its files through here. Functions return a status and write a
 * message into the caller's buffer; they never print. */
#ifndef BF_INPUT_PATH_H
#define BF_INPUT_PATH_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a file of mode m is, with its article: "a regular file", "a folder",
 * "a FIFO", "a character device", "a block device", "a socket", "a symbolic
 * link", "a file of unknown kind". */
const char *input_path_kind(mode_t m);

/* What input_path_check accepts. */
enum { INPUT_FILE = 1, INPUT_DIR = 2 };

/* Checks path (without opening it) is a regular file (want INPUT_FILE), a
 * folder (INPUT_DIR) or either (INPUT_FILE | INPUT_DIR). Returns 0 (*is_dir,
 * nullable, says which), or -1 with "WHAT: PATH is a FIFO; expected
 * EXPECTED" / "WHAT: PATH: not found" (what: the key or argument it came
 * from, nullable; expected: "a TSV file", nullable). */
int input_path_check(const char *what, const char *path, int want, const char *expected,
                     int *is_dir, char *err, size_t errlen);

/* Opens path for reading ("rb") when it is a regular file: opened with
 * O_NONBLOCK (a FIFO or a device does not block), checked with fstat, then
 * set blocking again. Returns the stream, or NULL with why[] set to the
 * reason without the path ("not found", with the folder a relative path
 * was looked up in, "Permission denied", "is a FIFO, not
 * a regular file") and errno set (ENOENT, EACCES, ...; EINVAL for a file that
 * is not regular). */
FILE *input_path_open(const char *path, char *why, size_t whylen);

/* The same as a file descriptor (O_RDONLY | O_CLOEXEC, blocking), or -1. */
int input_path_open_fd(const char *path, char *why, size_t whylen);

#ifdef __cplusplus
}
#endif
#endif
