/* views.h - read-side listings of deliveries: blocked aggregates, the
 * oldest unhandled deliveries and why each waits, an aggregate's events,
 * a group's dead letters, an event's deliveries in every group.
 *
 * Each appends its JSON answer to 'out' and returns MIC_OK, or fills 'err'
 * and returns its code: MIC_ENOTFOUND (no such group or aggregate: 404),
 * MIC_EINVAL (a bad query argument, with the field: 422), MIC_EIO (the
 * store).  They open their own read transaction (handler threads). */
#ifndef MIC_VIEWS_H
#define MIC_VIEWS_H

#include <stdint.h>

#include "store/store.h"

struct mic_buf;
struct mic_error;

/* GET /v1/groups/{group}/blocked?reason=&limit= */
int mic_views_blocked(mic_store *s, const char *group, const char *reason,
                      const char *limit, struct mic_buf *out, struct mic_error *err);
/* GET /v1/groups/{group}/oldest?limit= */
int mic_views_oldest(mic_store *s, const char *group, const char *limit,
                     struct mic_buf *out, struct mic_error *err);
/* GET /v1/aggregates/{type}/{id} */
int mic_views_aggregate(mic_store *s, const char *type, const char *id,
                        struct mic_buf *out, struct mic_error *err);
/* GET /v1/groups/{group}/dlq?after=&limit= */
int mic_views_dlq(mic_store *s, const char *group, const char *after,
                  const char *limit, struct mic_buf *out, struct mic_error *err);
/* The delivery states of 'seq' in every group, appended to 'out' as the
 * elements of a JSON array (GET /v1/events/{id}), in read transaction 't'.
 * Returns MIC_OK or a store error. */
int mic_views_deliveries_json(mic_txn *t, uint64_t seq, struct mic_buf *out);

#endif
