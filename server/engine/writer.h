/* writer.h - the writer thread: the only owner of LMDB write transactions.
 *
 * Handlers validate a request, embed a struct mic_op in their own state,
 * suspend their connection and submit the op.  The writer drains every
 * queued op into one transaction, commits once (one fsync for the batch:
 * group commit), then calls each op's done() with the outcome.  Nothing is
 * acknowledged before the commit that holds it returned. */
#ifndef MIC_WRITER_H
#define MIC_WRITER_H

#include <stdint.h>

#include "store/store.h"

struct mic_config;
struct mic_sched;
typedef struct mic_writer mic_writer;
typedef struct mic_op mic_op;
typedef struct mic_groups mic_groups;
typedef struct mic_delivery mic_delivery;
typedef struct mic_retention mic_retention;

/* What an op's apply() may use: the open write transaction, the time of
 * this batch, the seq counter (next seq to assign; apply advances it) and
 * the writer-owned registry of live groups given in the hooks (NULL when
 * the writer runs without one, as in some unit tests). */
struct mic_wctx {
    mic_txn *txn;
    int64_t now_us;
    uint64_t next_seq;
    const struct mic_config *cfg;
    mic_groups *groups;
    mic_delivery *engine;       /* the delivery engine's state (hooks) */
    mic_retention *retention;   /* retention's batch state (hooks); NULL:
                                 * retention writes at once */
    /* Keys whose parked ops retry after this batch (mic_wctx_wake). */
    uint32_t *wake;
    int nwake, wake_cap;
};

/* Ask for the ops parked on 'key' to be applied again once this batch is
 * committed (something they wait for became available). */
void mic_wctx_wake(struct mic_wctx *w, uint32_t key);

struct mic_op {
    /* Writer thread, inside the batch's transaction.  Returns MIC_OK when
     * the op finished, successfully or with its own client error recorded
     * in the op (having written nothing); or MIC_ENOSPC / MIC_EIO /
     * MIC_ENOMEM when the transaction must be aborted.  May be called
     * again for the same op after an abort, so it resets its own results
     * first. */
    int (*apply)(mic_op *op, struct mic_wctx *w);
    /* Writer thread or the sync stage, after the commit was made durable
     * (or the failure): 'result' is set.  Typically hands the suspended
     * connection back to be resumed (see mic_writer_on_finished).  Must
     * not touch the store; the op may be freed by another thread once
     * done() began. */
    void (*done)(mic_op *op);
    int result;  /* MIC_OK, or the error that made the batch fail */
    void *owner; /* the submitter's; the writer never touches it */
    /* Optional, submitter's: nonzero while the client still waits.
     * Called in the writer thread, only for a parked op that a batch woke
     * (never on an op's first apply): one whose client left is finished
     * as it stands, without being applied again. */
    int (*alive)(mic_op *op);
    /* Set by apply() to park the op instead of finishing it: it is applied
     * again after a batch that woke 'wait_key', and finished as it stands
     * at 'wait_until_ms' (monotonic).  0 = finish now. */
    uint32_t wait_key;
    int64_t wait_until_ms;
    /* Writer-private. */
    mic_op *next, *wnext, *wprev;
    int heap_pos;
};

/* The schedule's hooks, run by the writer thread (schedule.h makes them;
 * every member may be NULL). */
struct mic_writer_hooks {
    struct mic_sched *sched; /* handed to every hook */
    mic_groups *groups;      /* handed to apply() as w->groups */
    mic_delivery *engine;    /* handed to apply() as w->engine */
    mic_retention *retention; /* handed to apply() as w->retention */
    /* In each batch's transaction, before the ops: deadlines that came
     * due, background chunks.  Returns MIC_OK or an error that aborts. */
    int (*before)(struct mic_sched *s, struct mic_wctx *w);
    /* After the ops, before the commit: write what was kept in memory
     * during the batch.  Returns MIC_OK or an error that aborts. */
    int (*before_commit)(struct mic_sched *s, struct mic_wctx *w);
    /* Wall-clock µs of the earliest deadline still ahead, 0 if none;
     * called inside the transaction, after the ops. */
    int64_t (*next_due)(struct mic_sched *s, struct mic_wctx *w);
    /* Nonzero while background work remains (the writer keeps going). */
    int (*busy)(struct mic_sched *s);
    /* After an aborted transaction: drop state built on it ('read' is a
     * read transaction on the committed store). */
    void (*aborted)(struct mic_sched *s, mic_txn *read);
};

/* Writer figures for /metrics. */
struct mic_writer_stats {
    uint64_t commits, ops, committed_seq;
    uint64_t batch_hist[8];  /* ops per commit: <=1,2,4,16,64,256,1024,+Inf */
    uint64_t commit_us_hist[8]; /* <=100us,250us,500us,1ms,2.5ms,5ms,10ms,+Inf */
    double commit_seconds_sum;
    int alive;
    int full;  /* the last batch met a full map that could not grow */
    int parked; /* ops waiting (long-polls) */
    int gathering; /* 1 while the writer, its batch open, waits for more
                    * ops until the sync stage is free (tests await it) */
};

/* Start the writer over 's' with 'hooks' (may be NULL).  Returns MIC_OK
 * or an error. */
int mic_writer_start(mic_writer **out, mic_store *s,
                     const struct mic_config *cfg,
                     const struct mic_writer_hooks *hooks);

/* Queue 'op'.  Returns MIC_OK (done() will be called exactly once),
 * MIC_EBUSY when the queue is full, or MIC_ENOTREADY once stopping; in
 * both error cases done() is not called. */
int mic_writer_submit(mic_writer *w, mic_op *op);

/* Finish every queued op, finish every parked op as it stands, and stop
 * the thread; later submits answer MIC_ENOTREADY.  The writer stays
 * allocated until mic_writer_free. */
void mic_writer_stop(mic_writer *w);
void mic_writer_free(mic_writer *w);

void mic_writer_stats(mic_writer *w, struct mic_writer_stats *st);

/* Have fn(arg) called after each run of done() calls (a committed batch
 * made durable, the ops of a failed batch, parked ops that timed out), in
 * the thread that called them: the submitter hands its finished requests
 * on in one go (routes.c wakes each HTTP thread once a batch).  Any
 * thread, before the first submit whose done() relies on it. */
void mic_writer_on_finished(mic_writer *w, void (*fn)(void *arg), void *arg);

#endif
