/* publish.h - POST /v1/events: parse and validate in the handler thread,
 * apply in the writer (idempotency, versions, topics), report results. */
#ifndef MIC_PUBLISH_H
#define MIC_PUBLISH_H

#include <stddef.h>

#include "writer.h"

struct mic_config;
struct mic_error;
struct mic_buf;
struct mic_key;
typedef struct mic_publish mic_publish;

/* Parse a publish body (one event object, or {"events":[...]}) received
 * now.  Everything that can be checked without the store is checked here,
 * including repeated event ids and versions within a batch.  On success
 * stores a new request in *out (free with mic_publish_free).  Otherwise
 * fills 'err' and returns its code. */
int mic_publish_parse(const char *body, size_t len,
                      const struct mic_config *cfg, mic_publish **out,
                      struct mic_error *err);

/* The request's writer op; the caller sets op->done, then submits it. */
mic_op *mic_publish_op(mic_publish *p);

/* After done(): MIC_OK with the results body appended to 'out' and
 * *all_duplicates set, or the request's error with 'err' filled (nothing
 * was stored). */
int mic_publish_result(mic_publish *p, struct mic_buf *out,
                       int *all_duplicates, struct mic_error *err);

/* GET /v1/events/{id}: append {"event":...,"deliveries":[...]} to 'out'
 * (read transaction, any thread).  MIC_ENOTFOUND if there is no such
 * event, MIC_EFORBIDDEN if 'key' (NULL: no keys in use) does not cover
 * its topic. */
int mic_publish_lookup(mic_store *s, const char *id, size_t idlen, const struct mic_key *key,
                       struct mic_buf *out, struct mic_error *err);

/* The topic of event i (0 <= i < mic_publish_count(p)), NUL-terminated,
 * valid until mic_publish_free(p). */
const char *mic_publish_topic(const mic_publish *p, int i);

/* After done(): call fn with the counts of each run of events of one
 * topic (published, duplicates), or once for a request refused with a
 * conflict (with its first event's topic). */
void mic_publish_tally(const mic_publish *p,
                       void (*fn)(const char *topic, int published, int duplicate,
                                  int conflict));

/* Number of events in the request. */
int mic_publish_count(const mic_publish *p);

void mic_publish_free(mic_publish *p);

#endif
