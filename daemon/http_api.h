/* http_api — the read side of bfd's JSON API (docs/http.md): each GET under
 * /api/v1/ that the store answers, and the Server-Sent Events stream of a
 * job, read through the dashboard's own read-only SQLite connection. It
 * knows no HTTP library and no socket: http.c hands it a path, a way to
 * read the query's arguments, and the connection (under its mutex). */
#ifndef HTTP_API_H
#define HTTP_API_H

#include <jansson.h>
#include <sqlite3.h>
#include <stddef.h>

#define HTTP_API_MAX_LIMIT 10000 /* records in one page of a list */

/* A query argument by name (NULL when absent), from the request at cls. */
typedef const char *(*http_arg_fn)(void *cls, const char *key);

/* Answers GET path (below /api/v1/) from db. Returns the HTTP status: 200
 * with *out (owned by the caller: an array for a list, an object else) and,
 * for a list with more to read, the ?after= of the next page in next; 400
 * or 404 with the reason in err; 500 with the store's error. home is bfd's
 * folder (a trial's files are listed from home/trials/ID). */
unsigned http_api_get(sqlite3 *db, const char *home, const char *path, http_arg_fn arg, void *cls,
                      json_t **out, char *next, size_t nextlen, char *err, size_t errlen);

typedef struct http_stream http_stream;

/* A stream of job's state changes and of its trials' new points of metric
 * (NULL: none) from now on: trials running now from their latest point,
 * trials that start later from their first; or, given last_id (a
 * reconnect's Last-Event-ID, the id of a record this stream sent), from
 * just after that record, so nothing sent in the gap is lost. NULL when out of memory or db
 * fails (err says why). */
http_stream *http_stream_new(sqlite3 *db, long long job, const char *metric, const char *last_id,
                             char *err, size_t errlen);
/* What happened since the last call, as SSE text ("event: state" and
 * "event: points" records, the last with the stream's cursor as its id)
 * into buf (at most cap bytes, NUL-terminated);
 * returns its length (0: nothing new), or -1 with err when db fails. */
long http_stream_poll(http_stream *s, sqlite3 *db, char *buf, size_t cap, char *err, size_t errlen);
/* Frees; NULL is fine. */
void http_stream_free(http_stream **s);

#endif
