/* order.h - ordered groups: one queue per aggregate in each ordered group,
 * only its head handed out, parking on version gaps; the gap skip, the
 * blocked listing and the aggregate view. */
#ifndef MIC_ORDER_H
#define MIC_ORDER_H

#include <stddef.h>
#include <stdint.h>

#include "group.h"
#include "store.h"
#include "writer.h"

struct mic_buf;
struct mic_config;
struct mic_error;
typedef struct mic_gap_skip mic_gap_skip;

/* ---- Writer thread ---- */

/* A new delivery of 'r' (which has an aggregate) in ordered group 'gr'. */
int mic_order_enqueue(struct mic_wctx *w, const struct mic_group *gr,
                      const struct mic_rec *r);
/* Delivery 'r' of ordered group 'gr' became terminal: it leaves its
 * aggregate's queue and the next event becomes the head. */
int mic_order_release(struct mic_wctx *w, const struct mic_group *gr,
                      const struct mic_rec *r);
/* A requeued dead letter 'r' of ordered group 'gr' (its delivery record
 * already PENDING in 'd', written here): if it still heads its aggregate
 * (it died under dlq_policy hold) it is claimable at once; if it left the
 * queue (release) it enters it again at its place. */
int mic_order_requeue(struct mic_wctx *w, const struct mic_group *gr,
                      const struct mic_rec *r, struct mic_dlv *d);
/* Delivery 'seq' of ordered group 'gr' changed state: if it heads its
 * aggregate, bring the aggregate's blocked flag (and the group's count) up
 * to date.  A no-op for other groups and deliveries. */
int mic_order_refresh(struct mic_wctx *w, const struct mic_group *gr, uint64_t seq);
/* Pick the head of aggregate 'akey' in 'gr' if it has none (used once a
 * backfill is complete). */
int mic_order_advance(struct mic_wctx *w, const struct mic_group *gr,
                      const uint8_t akey[MIC_AKEY_LEN]);
/* A versioned event of aggregate 'akey' was stored: move the aggregate's
 * contiguous watermark and release heads parked below it. */
int mic_order_version_stored(struct mic_wctx *w, mic_groups *g,
                             const uint8_t akey[MIC_AKEY_LEN]);

/* ---- POST /v1/aggregates/{type}/{id}/gaps/{version}/skip ---- */

int mic_gap_skip_parse(const char *type, const char *id, const char *version,
                       mic_gap_skip **out, struct mic_error *err);
mic_op *mic_gap_skip_op(mic_gap_skip *g);
int mic_gap_skip_result(mic_gap_skip *g, struct mic_buf *out,
                        struct mic_error *err);
void mic_gap_skip_free(mic_gap_skip *g);

/* ---- Reads ---- */

/* GET /v1/groups/{g}/blocked?reason=&limit= */
int mic_order_blocked(mic_store *s, const char *group, const char *reason,
                      const char *limit, struct mic_buf *out,
                      struct mic_error *err);
/* GET /v1/groups/{g}/oldest?limit= : the oldest unhandled deliveries and
 * why each waits. */
int mic_order_oldest(mic_store *s, const char *group, const char *limit,
                     struct mic_buf *out, struct mic_error *err);
/* GET /v1/aggregates/{type}/{id} */
int mic_order_aggregate(mic_store *s, const char *type, const char *id,
                        struct mic_buf *out, struct mic_error *err);

#endif
