/* retention.h - removal of events past their topic's retention (and of
 * their remembered ids after dedupe_retain_s), with an NDJSON archive.
 * Writer thread. */
#ifndef MIC_RETENTION_H
#define MIC_RETENTION_H

#include "group.h"
#include "store.h"
#include "writer.h"

/* Schedule the removal of event 'r' (of topic 'tr', whose id is 'id',
 * idlen bytes) at its retention deadline.  Returns MIC_OK or a store
 * error (the batch then aborts). */
int mic_retention_schedule(struct mic_wctx *w, const struct mic_rec *r,
                           const struct mic_topic_rec *tr, const char *id,
                           size_t idlen);
/* Remove what came due (a bounded number per batch); *more is set when
 * more is due already.  Returns MIC_OK or a store error, or MIC_EIO when an
 * archive file cannot be written (nothing is removed then). */
int mic_retention_sweep(struct mic_wctx *w, mic_groups *g, int *more);
/* The next retention deadline (µs), 0 if none. */
int64_t mic_retention_next(struct mic_wctx *w);

#endif
