/* dlv.h - the delivery indexes (dlv.c; only engine/delivery.c calls them).
 * The conventions of store.h hold for every function below. */
#ifndef MIC_STORE_DLV_H
#define MIC_STORE_DLV_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "store.h"
#include "log.h"

/* ---- Deliveries ----
 *
 * The functions of this section and of "Ordered groups" and "Per-group
 * figures" below are the raw indexes of the delivery engine: only
 * server/engine/delivery.c calls them (make check fails otherwise), and they keep
 * no rule of their own -- the engine keeps the invariants between them. */

enum mic_dlv_state {
    MIC_DLV_PENDING = 1,
    MIC_DLV_PROCESSING = 2,
    MIC_DLV_DISPATCHED = 3,
    MIC_DLV_DLQ = 4,
    MIC_DLV_SKIPPED = 5,
};

#define MIC_TOKEN_LEN 16
#define MIC_WORKER_MAX 64
#define MIC_ERROR_MAX 1024

/* The state of one event in one group. */
struct mic_dlv {
    uint8_t state;             /* enum mic_dlv_state */
    uint8_t priority;
    uint8_t handed;            /* claimed at least once (kept across a requeue) */
    uint8_t versioned;         /* ord != 0: the aggregate carries versions */
    uint32_t attempts;         /* claims so far */
    int64_t created_at;        /* the event's, for the oldest-unhandled index */
    int64_t not_before;        /* PENDING: claimable from (µs), 0 = now */
    int64_t lease_expires;     /* PROCESSING: lease end (µs) */
    int64_t terminal_at;       /* DISPATCHED / DLQ / SKIPPED since (µs) */
    uint64_t ord;              /* ordered groups: the aggregate's ordinal, 0 = none */
    uint64_t k1;               /* ordered groups: order key (version or created_at) */
    uint64_t rank;             /* replay groups: the selection order, 0 = none
                                * (the ready set then goes by seq) */
    uint8_t token[MIC_TOKEN_LEN]; /* the last lease granted */
    uint8_t worker_len;
    char worker[MIC_WORKER_MAX + 1];
    uint16_t error_len;
    char last_error[MIC_ERROR_MAX + 1];
};

/* Fill 'd' (a copy, NUL-terminated strings).  MIC_ENOTFOUND if absent,
 * MIC_EIO for a record that does not decode. */
int mic_store_dlv_get(mic_txn *t, uint32_t gid, uint64_t seq, struct mic_dlv *d);
/* Write 'd' (one state of the three times is stored: not_before when
 * pending, lease_expires when processing, terminal_at when terminal). */
int mic_store_dlv_put(mic_txn *t, uint32_t gid, uint64_t seq,
                      const struct mic_dlv *d);
int mic_store_dlv_del(mic_txn *t, uint32_t gid, uint64_t seq);
/* Call fn with the state of every delivery of group 'gid', in seq order
 * (a walk over one group: tests and the migration only). */
int mic_store_dlv_each(mic_txn *t, uint32_t gid,
                       int (*fn)(void *arg, uint64_t seq, int state), void *arg);

/* The ready set of a group: (priority desc, rank or seq asc).  A delivery
 * with a rank (rank != 0) sorts by it and carries its seq in the entry.
 * _del answers MIC_ENOTFOUND when the entry is absent. */
int mic_store_ready_put(mic_txn *t, uint32_t gid, uint8_t prio, uint64_t rank, uint64_t seq);
int mic_store_ready_del(mic_txn *t, uint32_t gid, uint8_t prio, uint64_t rank, uint64_t seq);
/* Remove up to 'max' entries from the head of the ready set, storing their
 * seqs in order; *n receives how many. */
int mic_store_ready_pop(mic_txn *t, uint32_t gid, uint64_t *seqs, int max,
                        int *n);

/* Deadlines, all groups in one index: (due µs, gid, seq) -> kind. */
enum mic_timer_kind { MIC_TIMER_RETRY = 1, MIC_TIMER_LEASE = 2 };
int mic_store_timer_put(mic_txn *t, int64_t due, uint32_t gid, uint64_t seq,
                        uint8_t kind);
/* MIC_OK also when the timer is not there. */
int mic_store_timer_del(mic_txn *t, int64_t due, uint32_t gid, uint64_t seq);
/* The earliest deadline; MIC_ENOTFOUND if there is none. */
int mic_store_timer_first(mic_txn *t, int64_t *due, uint32_t *gid,
                          uint64_t *seq, uint8_t *kind);

/* Dead letters of a group, by seq (_del: MIC_OK also when absent). */
int mic_store_dlq_put(mic_txn *t, uint32_t gid, uint64_t seq);
int mic_store_dlq_del(mic_txn *t, uint32_t gid, uint64_t seq);
/* Up to 'max' dead-lettered seqs greater than 'after', in order. */
int mic_store_dlq_page(mic_txn *t, uint32_t gid, uint64_t after,
                       uint64_t *seqs, int max, int *n);

/* The unhandled index (gid, created_at, seq) and the poison index (same
 * key): 'on' puts the entry, else deletes it (MIC_OK when absent). */
int mic_store_unh_set(mic_txn *t, uint32_t gid, int64_t created_at, uint64_t seq, int on);
int mic_store_poison_set(mic_txn *t, uint32_t gid, int64_t created_at, uint64_t seq, int on);
/* The first entry of group 'gid' in the unhandled (poison == 0) or poison
 * index.  MIC_ENOTFOUND if none. */
int mic_store_oldest(mic_txn *t, uint32_t gid, int poison, int64_t *created_at,
                     uint64_t *seq);
/* Up to 'max' unhandled deliveries of 'gid' from the oldest. */
int mic_store_oldest_page(mic_txn *t, uint32_t gid, uint64_t *seqs, int max, int *n);

/* ---- Ordered groups: per-aggregate queues ----
 *
 * An aggregate's queue in an ordered group is the range (gid, ord, ...) of
 * 'aq', keyed by the aggregate's ordinal so that aggregates published
 * together are neighbours: (gid, ord, k1, seq) with k1 the version or the
 * created_at. */

int mic_store_aq_put(mic_txn *t, uint32_t gid, uint64_t ord, uint64_t k1, uint64_t seq);
/* MIC_ENOTFOUND if the entry is not there. */
int mic_store_aq_del(mic_txn *t, uint32_t gid, uint64_t ord, uint64_t k1, uint64_t seq);
/* MIC_OK if the entry is in the queue, MIC_ENOTFOUND if not. */
int mic_store_aq_has(mic_txn *t, uint32_t gid, uint64_t ord, uint64_t k1, uint64_t seq);
/* The first entry whose k1 is greater than 'after' (0: the first entry);
 * MIC_ENOTFOUND if there is none. */
int mic_store_aq_first(mic_txn *t, uint32_t gid, uint64_t ord, uint64_t after,
                       uint64_t *k1, uint64_t *seq);
/* The first two entries whose k1 is greater than 'after' (k1[i], seq[i]
 * for i < *n, *n being 1 or 2); MIC_ENOTFOUND if there is none. */
int mic_store_aq_first2(mic_txn *t, uint32_t gid, uint64_t ord, uint64_t after,
                        uint64_t k1[2], uint64_t seq[2], int *n);
/* Delete every entry whose k1 is at most 'upto'; *n (may be NULL) counts
 * them. */
int mic_store_aq_purge(mic_txn *t, uint32_t gid, uint64_t ord, uint64_t upto, int *n);

/* The state of an aggregate in an ordered group. */
struct mic_ags {
    uint64_t active;      /* seq of the head handed to workers, 0 = none */
    uint64_t missing;     /* parked: the version it waits for, 0 = none */
    int64_t since;        /* the head (or the parking) dates from (µs) */
    uint64_t waiting;     /* entries of the queue not yet released, head included */
    uint64_t pos;         /* versioned: entries with k1 <= pos are released
                           * (left in 'aq' until the queue empties) */
    uint8_t akey[MIC_AKEY_LEN];
};

int mic_store_ags_get(mic_txn *t, uint32_t gid, uint64_t ord, struct mic_ags *a);
int mic_store_ags_put(mic_txn *t, uint32_t gid, uint64_t ord, const struct mic_ags *a);
/* MIC_OK also when absent. */
int mic_store_ags_del(mic_txn *t, uint32_t gid, uint64_t ord);
/* Call fn for each aggregate with a queue in group 'gid', in ordinal
 * order, from the first ordinal greater than 'after'; stops when fn
 * returns nonzero and returns that value. */
int mic_store_ags_each(mic_txn *t, uint32_t gid, uint64_t after,
                       int (*fn)(void *arg, uint64_t ord, const struct mic_ags *a),
                       void *arg);

/* ---- Per-group figures: gid -> u64[MIC_GSTAT_N] ----
 * Kept by the delivery engine in the writer's memory and written once per
 * group and commit; the store only reads and writes the record. */
enum mic_gstat {
    MIC_GSTAT_GAP_PARKED = 0,  /* aggregates parked on a missing version */
    MIC_GSTAT_PENDING,         /* non-terminal, not leased */
    MIC_GSTAT_PROCESSING,      /* leased */
    MIC_GSTAT_DLQ,
    MIC_GSTAT_DISPATCHED,      /* total ever dispatched */
    MIC_GSTAT_REDELIVERIES,    /* total claims after a delivery's first */
    MIC_GSTAT_BLOCKED,         /* aggregates blocked by their head */
    MIC_GSTAT_SKIPPED,         /* total ever skipped */
    MIC_GSTAT_N = 8,
};
/* All counters of 'gid' (zeros if none). */
int mic_store_gstat_get(mic_txn *t, uint32_t gid, uint64_t out[MIC_GSTAT_N]);
int mic_store_gstat_put(mic_txn *t, uint32_t gid, const uint64_t in[MIC_GSTAT_N]);

/* Per-topic stored-event counts (retention decrements). */
int mic_store_topic_events_add(mic_txn *t, uint32_t topic_id, int64_t delta);
int mic_store_topic_events(mic_txn *t, uint32_t topic_id, uint64_t *n);

#endif
