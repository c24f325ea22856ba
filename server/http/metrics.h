/* metrics.h - counters and GET /metrics (Prometheus text format). */
#ifndef MIC_METRICS_H
#define MIC_METRICS_H

#include "store/store.h"
#include "engine/writer.h"

struct mic_key;
struct mic_buf;

/* Declare the route names counted by mic_metrics_http (index = route). */
void mic_metrics_routes(const char *const *names, int n);

/* Count one HTTP reply of 'status' on route 'route' (thread-safe). */
void mic_metrics_http(int route, int status);

/* Count one published event, duplicate or refused conflict on 'topic'
 * (in memory: these counters restart at zero with micd, as Prometheus
 * counters may). */
void mic_metrics_topic(const char *topic, int published, int duplicate, int conflict);

/* Append the exposition text for everything MIC counts to 'out' (read
 * transaction on 's', any thread).  Returns MIC_OK or a store error
 * (MIC_EIO, MIC_ENOMEM). */
int mic_metrics_render(mic_store *s, mic_writer *w, const struct mic_key *key,
                       struct mic_buf *out);

/* Have fn(arg, key, out) append more families to every exposition (the
 * sink relay's, sink.c), after MIC's own; 'key' narrows them as it does
 * the listings.  fn runs in handler threads: it must be thread-safe.  Set
 * once at start, before the HTTP server. */
void mic_metrics_on_render(void (*fn)(void *arg, const struct mic_key *key,
                                      struct mic_buf *out),
                           void *arg);

/* GET /v1/stats: per group, per topic and store figures as JSON appended
 * to 'out'.  Returns MIC_OK or a store error (MIC_EIO, MIC_ENOMEM). */
int mic_metrics_stats(mic_store *s, const struct mic_key *key, struct mic_buf *out);

#endif
