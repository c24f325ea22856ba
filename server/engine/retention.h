/* retention.h - removal of events past their topic's retention (and of
 * their remembered ids after dedupe_retain_s), with an NDJSON archive.
 * Writer thread. */
#ifndef MIC_RETENTION_H
#define MIC_RETENTION_H

#include "group.h"
#include "store/store.h"
#include "writer.h"

/* Retention's state during one batch: the events each topic stored in it
 * (one expiry entry per topic and commit) and the change of each topic's
 * event count (one write per topic and commit).  mic_retention_new returns
 * MIC_OK or MIC_ENOMEM; the schedule owns it and hands it to the writer
 * (mic_wctx.retention). */
int mic_retention_new(mic_retention **out);
void mic_retention_free(mic_retention *rt);
/* After an aborted batch: forget what it kept. */
void mic_retention_reset(mic_retention *rt);

/* Event 'r' of topic 'tr' was stored in this batch: schedule its removal
 * at its retention deadline (received_at + retention_s) and count it.
 * Kept in w->retention until mic_retention_flush (written at once when
 * w->retention is NULL).  Returns MIC_OK or a store error (the batch then
 * aborts). */
int mic_retention_stored(struct mic_wctx *w, const struct mic_rec *r,
                         const struct mic_topic_rec *tr);
/* Before the commit: write what the batch kept.  Returns MIC_OK or a
 * store error. */
int mic_retention_flush(struct mic_wctx *w);
/* Remove what came due (a bounded number per batch); *more is set when
 * more is due already.  Returns MIC_OK or a store error, or MIC_EIO when an
 * archive file cannot be written (nothing is removed then). */
int mic_retention_sweep(struct mic_wctx *w, mic_groups *g, int *more);
/* The next retention deadline (µs), 0 if none. */
int64_t mic_retention_next(struct mic_wctx *w);

#endif
