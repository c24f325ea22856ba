/* routes.h - the HTTP server: libmicrohttpd handlers and the route table.
 * routes.c is the only file that builds HTTP replies, and the only place
 * where enum mic_err becomes an HTTP status. */
#ifndef MIC_ROUTES_H
#define MIC_ROUTES_H

#include "store.h"
#include "writer.h"

struct mic_config;
typedef struct mic_http mic_http;

/* Listen on cfg->listen and serve.  The bound port goes to *port.
 * Returns MIC_OK or MIC_EIO (logged). */
int mic_http_start(mic_http **out, const struct mic_config *cfg,
                   mic_store *s, mic_writer *w, int *port);

/* Stop accepting new connections; requests in flight continue. */
void mic_http_quiesce(mic_http *h);

/* Wait up to 'ms' for the requests in flight to be answered. */
void mic_http_drain(mic_http *h, int ms);

/* Close every connection and free the server.  Every suspended connection
 * must have been resumed (stop the writer first). */
void mic_http_stop(mic_http *h);

#endif
