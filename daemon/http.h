/* http — bfd's dashboard server (docs/http.md): the pages, the JSON API
 * under /api/v1/ with its Server-Sent Events, and /metrics, served by
 * libmicrohttpd with a thread per connection.
 *
 * Every request carries the token of $BF_HOME/http.token (a cookie, an
 * Authorization: Bearer header or ?token=); actions are POSTs from the same
 * origin. The server threads never touch the loop's store handle or its
 * sockets: they read bf.db through a read-only SQLite connection of their
 * own (WAL lets them read while the loop writes), and an action or a live
 * question (status, logs) goes to the loop as the request bfctl would send,
 * over a DEALER of their own on the control socket. */
#ifndef HTTP_H
#define HTTP_H

#include <stddef.h>

#include "daemon/prom.h"

typedef struct http http;

#define HTTP_TLS_PEM_MAX 65536 /* bytes of a certificate or key file */

/* Where and how the dashboard listens (bfd.yaml's http keys). */
typedef struct http_listen {
    const char *addr;     /* "IPV4:PORT" */
    int insecure;         /* serve an address other than loopback without TLS */
    const char *tls_cert; /* PEM certificate (chain) file: HTTPS; NULL or "": plain HTTP */
    const char *tls_key;  /* PEM private key file of tls_cert (both or neither) */
} http_listen;

/* Serves on l->addr, over TLS when l names a certificate and key (read
 * here, each at most HTTP_TLS_PEM_MAX bytes): reads or makes
 * home/http.token (0600), writes the URL to home/http.url, opens home/bf.db
 * read-only and ctl_ep (the control socket) for actions; pr (borrowed, may
 * be NULL) is rendered at /metrics. An address other than loopback is
 * refused without TLS unless l->insecure. Returns 0, or -1 with a message
 * naming the address or file and the reason. */
int http_start(const http_listen *l, const char *home, const char *ctl_ep, prom *pr, http **out,
               char *err, size_t errlen);
/* The dashboard's address, "http://IPV4:PORT/" or "https://IPV4:PORT/"
 * (h's; "" when h is NULL). */
const char *http_url(const http *h);
/* Ends the streams, stops the threads, removes home/http.url and frees.
 * NULL is fine. */
void http_stop(http **h);

#endif
