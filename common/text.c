/* text.c — see text.h. */
#include "common/text.h"

#include <stdio.h>
#include <string.h>

int bf_utf8_at(const unsigned char *s, size_t n, unsigned *cp) {
    if (!n) return 0;
    unsigned c = s[0];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len || (size_t)len > n) return 0;
    unsigned v = len == 1 ? c : c & (0x7fu >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3fu);
    }
    static const unsigned least[5] = {0, 0, 0x80, 0x800, 0x10000}; /* no overlong forms */
    if (v < least[len] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
    *cp = v;
    return len;
}

char *bf_escape(const char *s, size_t n, char *out, size_t outlen) {
    const unsigned char *u = (const unsigned char *)s;
    size_t w = 0;
    if (!outlen) return out;
    for (size_t i = 0; i < n;) {
        char piece[8];
        size_t plen;
        unsigned cp;
        int len = bf_utf8_at(u + i, n - i, &cp);
        if (len > 1 || (len == 1 && cp >= 0x20 && cp != 0x7f)) {
            memcpy(piece, s + i, (size_t)len);
            plen = (size_t)len;
        } else {
            unsigned char c = u[i];
            len = 1;
            const char *named = c == '\n'   ? "\\n"
                                : c == '\t' ? "\\t"
                                : c == '\r' ? "\\r"
                                : c == 27   ? "\\e"
                                            : NULL;
            if (named)
                plen = (size_t)snprintf(piece, sizeof piece, "%s", named);
            else
                plen = (size_t)snprintf(piece, sizeof piece, "\\x%02X", c);
        }
        if (w + plen + 1 > outlen) break;
        memcpy(out + w, piece, plen);
        w += plen;
        i += (size_t)len;
    }
    out[w] = '\0';
    return out;
}
