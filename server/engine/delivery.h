/* delivery.h - the delivery engine: the one owner of a delivery's life
 * (DESIGN sections 2, 3 and 8) and of every index it touches.
 *
 *   PENDING --grant--> PROCESSING --ack--> DISPATCHED
 *   PROCESSING --fail (nack, lease expiry)--> PENDING after a backoff, or DLQ
 *   DLQ --requeue--> PENDING (attempts 0)     DLQ --skip--> SKIPPED
 *
 * The indexes behind the verbs (store.h "Deliveries", "Ordered groups",
 * "Per-group figures"): the delivery records, the ready sets, the timers
 * (retry, schedule and lease deadlines), the DLQ, the unhandled and poison
 * indexes, ordered groups' aggregate queues and states, and the group
 * figures.  No other file calls those store functions (make check greps for
 * it); the write verbs run in the writer thread, inside its transaction
 * (struct mic_wctx), and the read functions at the end of this header take
 * any read transaction.
 *
 * Errors: every function returns MIC_OK, or an error of the store (MIC_EIO,
 * MIC_ENOSPC, MIC_ENOMEM) after which the writer aborts the batch.  What a
 * request did to one delivery (acked, lease_lost, ...) is not an error: it
 * comes back in *status.  Nothing returned points into the store. */
#ifndef MIC_DELIVERY_H
#define MIC_DELIVERY_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"
#include "store/dlv.h"
#include "writer.h"

struct mic_group;
typedef struct mic_groups mic_groups;
typedef struct mic_delivery mic_delivery;

/* The engine's own state (writer thread): each group's figures, loaded
 * from the store at the first change in a batch, written once per group
 * by mic_delivery_flush before the commit, and forgotten by
 * mic_delivery_reset after an aborted batch (so they are read again from
 * the committed store); the backoff jitter's generator.  The writer hands
 * it to every verb as w->engine. */
typedef struct mic_delivery mic_delivery;

/* A new engine state.  Returns MIC_OK with *out (the caller's:
 * mic_delivery_free) or MIC_ENOMEM. */
int mic_delivery_new(mic_delivery **out);
void mic_delivery_free(mic_delivery *e);
/* Forget the figures kept in memory (after an aborted batch). */
void mic_delivery_reset(mic_delivery *e);

/* What a verb did to one delivery. */
enum mic_delivery_status {
    MIC_DS_NONE, MIC_DS_ACKED, MIC_DS_RETRYING, MIC_DS_DEAD, MIC_DS_EXTENDED,
    MIC_DS_LOST, MIC_DS_NOTFOUND, MIC_DS_REQUEUED, MIC_DS_SKIPPED, MIC_DS_NOT_IN_DLQ,
};

/* The lowercase word of a status ("acked", ...), as the API answers it. */
const char *mic_delivery_status_name(int status);

/* ---- Writer-thread verbs (w->engine must be set) ---- */

/* A new PENDING delivery of record 'r' (of topic 'topic', tlen bytes) in
 * every live group of w->groups that subscribes to it and takes it by its
 * start (fan-out at publish). */
int mic_delivery_fanout(struct mic_wctx *w, const char *topic, size_t tlen,
                        const struct mic_rec *r);

/* A new PENDING delivery of record 'r' in 'gr' (fan-out, backfill, replay
 * selection): in an ordered group, in its aggregate's queue; else ready at
 * once, or at r->deliver_at_us.  r->ordinal may be 0 (looked up). */
int mic_delivery_add(struct mic_wctx *w, struct mic_group *gr, const struct mic_rec *r);

/* Lease up to 'max' ready deliveries of 'gr' to 'worker' (wlen bytes) for
 * 'ttl_us'.  Fills seqs[i], attempts[i] and tokens[i] (fresh random
 * bits) and *n; the lease ends at w->now_us + ttl_us. */
int mic_delivery_grant(struct mic_wctx *w, struct mic_group *gr, int max, int64_t ttl_us,
                       const char *worker, size_t wlen, uint64_t *seqs,
                       uint32_t *attempts, uint8_t (*tokens)[MIC_TOKEN_LEN], int *n);

/* Settle delivery 'seq' under the lease 'token' (NULL: a token of the
 * wrong form, always MIC_DS_NOTFOUND).  *status: ack -> ACKED, LOST,
 * NOTFOUND; nack -> RETRYING (*t = not_before), DEAD, LOST, NOTFOUND;
 * extend -> EXTENDED (*t = lease end), LOST, NOTFOUND.  'retry_us' < 0
 * means the group's backoff; 'error' (elen bytes, cut to MIC_ERROR_MAX on
 * a UTF-8 boundary) becomes the delivery's last error.  A nack with
 * 'dead_letter' set goes to the DLQ (DEAD) whatever its attempts: the
 * worker knows no retry can succeed.  A lease that ran out still counts
 * for its token until the delivery is claimed again; a nack ends it: the
 * token answers LOST from then on. */
int mic_delivery_ack(struct mic_wctx *w, struct mic_group *gr, uint64_t seq,
                     const uint8_t *token, int *status);
int mic_delivery_nack(struct mic_wctx *w, struct mic_group *gr, uint64_t seq,
                      const uint8_t *token, const char *error, size_t elen,
                      int64_t retry_us, int dead_letter, int *status, int64_t *t);
int mic_delivery_extend(struct mic_wctx *w, struct mic_group *gr, uint64_t seq,
                        const uint8_t *token, int64_t ttl_us, int *status, int64_t *t);

/* Admin: a dead letter back to PENDING with attempts 0 (REQUEUED), or to
 * SKIPPED (releasing an aggregate held by it); NOT_IN_DLQ or NOTFOUND
 * otherwise.  _requeue_all requeues every dead letter, *n counts them. */
int mic_delivery_requeue(struct mic_wctx *w, struct mic_group *gr, uint64_t seq, int *status);
int mic_delivery_skip(struct mic_wctx *w, struct mic_group *gr, uint64_t seq, int *status);
int mic_delivery_requeue_all(struct mic_wctx *w, struct mic_group *gr, uint64_t *n);

/* Fire the deadlines due at w->now_us (retries and schedules become
 * ready, expired leases fail), at most 'budget'; *more is set when some
 * are left. */
int mic_delivery_fire_due(struct mic_wctx *w, mic_groups *g, int budget, int *more);
/* Wall-clock µs of the earliest deadline, 0 if none. */
int64_t mic_delivery_next_due(struct mic_wctx *w);

/* Ordered group 'gr' may pick heads now (its backfill or selection is
 * complete): advance up to 'max' aggregates with an ordinal greater than
 * *cursor, moving *cursor; *done is set when none is left. */
int mic_delivery_release_heads(struct mic_wctx *w, struct mic_group *gr, int max,
                               uint64_t *cursor, int *done);

/* A version of aggregate 'akey' was stored: move its watermark over stored
 * and skipped versions and release the heads parked below it, in every
 * ordered group; *released (may be NULL) counts them. */
int mic_delivery_version_stored(struct mic_wctx *w, mic_groups *g,
                                const uint8_t akey[MIC_AKEY_LEN], int *released);

/* Admin skip of missing version 'v' of aggregate 'akey' (all groups). */
enum mic_gap_outcome {
    MIC_GAP_SKIPPED,        /* recorded (or skipped before) */
    MIC_GAP_NO_AGGREGATE,   /* no such aggregate */
    MIC_GAP_UNVERSIONED,    /* it carries no versions */
    MIC_GAP_STORED,         /* v is stored: *stored_seq */
    MIC_GAP_OUT_OF_RANGE,   /* v is not between its first and highest versions */
};
int mic_delivery_gap_skip(struct mic_wctx *w, mic_groups *g, const uint8_t akey[MIC_AKEY_LEN],
                          uint64_t v, int *outcome, uint64_t *stored_seq, int *released);

/* Retention: *busy = 1 when event 'r' has a non-terminal delivery in
 * 'gr', or none yet and the backfill of 'gr' has still to add it
 * (mic_group_fills): a backfill holds what it has not reached.  'gr' is
 * one of the groups of r's topic (mic_groups_holders) or any group when
 * that topic is unknown.  Returns MIC_OK or a store error; one seek. */
int mic_delivery_busy(struct mic_wctx *w, struct mic_group *gr, const struct mic_rec *r,
                      int *busy);
/* Retention: forget the (terminal) delivery of 'seq' in 'gr', if any. */
int mic_delivery_remove(struct mic_wctx *w, struct mic_group *gr, uint64_t seq);

/* Remove up to 'budget' keys of deleted group 'gid'; *finished when none
 * is left (its drop record is then gone). */
int mic_delivery_drop_step(struct mic_wctx *w, uint32_t gid, int budget, int *finished);

/* Write the figures of every live group changed in this batch (before
 * the commit). */
int mic_delivery_flush(struct mic_wctx *w);

/* ---- Read side (any transaction) ---- */

/* Delivery 'seq' of group 'gid' (a copy).  MIC_ENOTFOUND if none. */
int mic_delivery_get(mic_txn *t, uint32_t gid, uint64_t seq, struct mic_dlv *d);
/* The committed figures of 'gid' (zeros if none). */
int mic_delivery_figures(mic_txn *t, uint32_t gid, uint64_t out[MIC_GSTAT_N]);
/* The oldest unhandled delivery (poison 0) or the oldest poison one
 * (poison 1) by (created_at, seq); MIC_ENOTFOUND if none. */
int mic_delivery_oldest(mic_txn *t, uint32_t gid, int poison, int64_t *created_at,
                        uint64_t *seq);
/* Up to 'max' unhandled seqs from the oldest; *n receives how many. */
int mic_delivery_oldest_page(mic_txn *t, uint32_t gid, uint64_t *seqs, int max, int *n);
/* Up to 'max' dead-lettered seqs after 'after'. */
int mic_delivery_dlq_page(mic_txn *t, uint32_t gid, uint64_t after, uint64_t *seqs,
                          int max, int *n);
/* An ordered group's aggregate 'ord': its state, MIC_ENOTFOUND if it has
 * no queue; and the first unreleased entry of its queue (seq), if any. */
int mic_delivery_agg(mic_txn *t, uint32_t gid, uint64_t ord, struct mic_ags *a,
                     uint64_t *first_seq);
/* Call fn for every aggregate with a queue in ordered group 'gid', in
 * ordinal order; stops when fn returns nonzero (and returns that). */
int mic_delivery_aggs_each(mic_txn *t, uint32_t gid,
                           int (*fn)(void *arg, uint64_t ord, const struct mic_ags *a),
                           void *arg);
/* Nonzero if 'd' is PENDING waiting for its scheduled time (deliver_at)
 * rather than for a retry. */
int mic_delivery_scheduled(const struct mic_dlv *d);

#endif
