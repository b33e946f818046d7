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

/* Serves on addr ("IPV4:PORT"): reads or makes home/http.token (0600),
 * writes the URL to home/http.url, opens home/bf.db read-only and ctl_ep
 * (the control socket) for actions; pr (borrowed, may be NULL) is rendered
 * at /metrics. An address other than loopback is refused unless insecure.
 * Returns 0, or -1 with a message naming the address and the reason. */
int http_start(const char *addr, int insecure, const char *home, const char *ctl_ep, prom *pr,
               http **out, char *err, size_t errlen);
/* The dashboard's address, "http://IPV4:PORT/" (h's; "" when h is NULL). */
const char *http_url(const http *h);
/* Ends the streams, stops the threads, removes home/http.url and frees.
 * NULL is fine. */
void http_stop(http **h);

#endif
