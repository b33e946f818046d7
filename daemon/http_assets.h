/* http_assets — the dashboard's files, embedded into bfd at build time:
 * daemon/web/ (the pages bf writes) and the Debian packages' dygraphs and
 * d3 (daemon/CMakeLists.txt finds them and generates http_assets.c). */
#ifndef HTTP_ASSETS_H
#define HTTP_ASSETS_H

#include <stddef.h>

typedef struct http_asset {
    const char *name; /* served at /static/NAME (index.html also at /) */
    const char *type; /* Content-Type */
    const unsigned char *data;
    size_t len;
} http_asset;

extern const http_asset http_assets[];
extern const size_t http_n_assets;

#endif
