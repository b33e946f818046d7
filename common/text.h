/* text — showing text that came from outside (a sweep file, a request) in
 * a message: control bytes and bytes that are not UTF-8 are written as
 * escapes, so a name holding ESC or a newline cannot drive the terminal a
 * message is printed on, and a character outside ASCII is shown whole,
 * never as one byte of it. */
#ifndef BF_TEXT_H
#define BF_TEXT_H

#include <stddef.h>

/* The length (1-4) of the valid UTF-8 sequence at s[0..n-1] and its code
 * point in *cp; 0 when s does not start one (a stray or overlong byte, a
 * surrogate, a sequence cut short). */
int bf_utf8_at(const unsigned char *s, size_t n, unsigned *cp);

/* s[0..n-1] into out (outlen bytes, NUL-terminated, cut at a whole
 * escape): valid UTF-8 and printable ASCII as they are, newline, tab,
 * carriage return and ESC as \n \t \r \e, other control bytes and bytes
 * that are not UTF-8 as \xNN. Returns out. */
char *bf_escape(const char *s, size_t n, char *out, size_t outlen);

#endif
