/* routes.h - the HTTP server: libmicrohttpd handlers and the route table.
 * routes.c is the only file that builds HTTP replies, and the only place
 * where enum mic_err becomes an HTTP status. */
#ifndef MIC_ROUTES_H
#define MIC_ROUTES_H

#include "store/store.h"
#include "engine/writer.h"

#include "auth.h"
#include "history.h"
#include "loops.h"

struct mic_config;
typedef struct mic_http mic_http;

/* Listen on cfg->listen and serve (HTTPS only when cfg->tls_cert is set;
 * check the pair first with mic_http_tls_check).  'keys' (NULL: no keys,
 * every request allowed) becomes the server's, freed by mic_http_stop or
 * a later mic_http_set_keys, also when this fails.  The bound port goes
 * to *port.  Returns MIC_OK or MIC_EIO (logged: the address, the audit
 * log or the TLS files). */
int mic_http_start(mic_http **out, const struct mic_config *cfg,
                   mic_store *s, mic_writer *w, mic_keys *keys, int *port);

/* Replace the API keys (SIGHUP): requests already authenticated keep the
 * key they were checked with.  'keys' becomes the server's; the old set
 * is freed.  Any thread. */
void mic_http_set_keys(mic_http *h, mic_keys *keys);

/* What a route's key must cover besides its role's permission (auth.h):
 * TOPIC / GROUP the topic or group named by its first path segment; ALL
 * every name (the scope "*"): the route names neither, or several; SELF
 * the handler narrows what it serves (listings show only what the key
 * covers, a publish checks each event's topic, an event its topic). */
enum mic_scope { MIC_SCOPE_OPEN, MIC_SCOPE_TOPIC, MIC_SCOPE_GROUP, MIC_SCOPE_ALL,
                 MIC_SCOPE_SELF };

/* Serve GET /v1/stats/history from 'hist' (borrowed: it must outlive
 * the server; until this is called the route answers 503).  Any thread. */
void mic_http_set_history(mic_http *h, mic_history *hist);

/* Route i of the route table (tests/system/test_auth.c builds its matrix from
 * it): 1 with *out filled (static strings: 'name' is the path template,
 * "/v1/groups/{group}/claim"), 0 past the last route. */
struct mic_route_info {
    const char *method, *name;
    int perm;   /* enum mic_perm */
    int scope;  /* enum mic_scope */
};
int mic_http_route(int i, struct mic_route_info *out);

/* The HTTP status of enum mic_err value 'err' (DESIGN section 4's table):
 * 200 for MIC_OK, 500 for the errors a client did not cause (MIC_ENOMEM,
 * MIC_EIO, MIC_EVERSION, MIC_ECORRUPT) and for a value that is not one.
 * The one place where an error becomes a status (tests/unit/http/test_routes.c
 * checks every value). */
unsigned mic_err_http_status(int err);

/* 1 if HOST:PORT 'listen' names a loopback address (127.0.0.0/8, ::1),
 * 0 for another one (the wildcard included), -1 if it does not parse. */
int mic_http_listen_is_loopback(const char *listen);

/* Can micd serve HTTPS with these PEM files?  MIC_OK, or MIC_EINVAL with
 * the reason in 'why' (a file cannot be read, holds no certificate or
 * key, or the key does not match the certificate). */
int mic_http_tls_check(const char *cert_path, const char *key_path, char *why, size_t whylen);

/* Fill 'ops' with libmicrohttpd's side of the HTTP threads (loops.h: a
 * daemon started by 'make' in external mode with MHD_USE_EPOLL and
 * MHD_ALLOW_SUSPEND_RESUME on the socket it is given with
 * MHD_OPTION_LISTEN_SOCKET).  mic_http_start uses it; so do the tests. */
void mic_http_loop_ops(struct mic_loop_ops *ops, void *(*make)(void *arg, int i, int listen_fd));

/* Stop accepting new connections; requests in flight continue. */
void mic_http_quiesce(mic_http *h);

/* Wait up to 'ms' for the requests in flight to be answered ('h' NULL:
 * returns at once, as mic_http_stop does, for main's cleanup ladder). */
void mic_http_drain(mic_http *h, int ms);

/* Close every connection and free the server.  Every suspended connection
 * must have been resumed (stop the writer first). */
void mic_http_stop(mic_http *h);

#endif
