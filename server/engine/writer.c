/* writer.c - the writer thread, its queue and its parked ops (writer.h).
 *
 * Shared state: the queue ('head', 'tail', 'queued', 'stopping') and the
 * statistics are guarded by 'lock'; 'cond' wakes the writer.  Everything
 * else belongs to the writer thread alone: 'next_seq', the transaction, the
 * parked ops (long-polls) and their wake-up structures.  Handlers never
 * touch parked ops; a client that went away is noticed through op->alive().
 *
 * A batch: take every queued op (up to --writer-batch) plus the parked ops
 * that were woken, begin one transaction, run hooks->before (deadlines that
 * came due, background chunks), apply each op; while the sync stage is
 * still making the commit before durable, apply the ops that arrive too,
 * GATHER at a time or all once the stage is done (they could not be
 * durable any sooner: one commit and one fdatasync for them all, and a
 * handful of arrivals a wake-up of the writer instead of one each); ask
 * hooks->next_due for the next deadline, commit once.  Then each op
 * either finishes (done()) or, if
 * apply() asked for it, is parked until a later batch wakes its key or its
 * own deadline passes.  The thread sleeps until the earliest of: new work,
 * the next stored deadline, the next parked op's deadline; idle after a
 * batch, it first hands freed memory back with malloc_trim (TRIM_MS).
 *
 * Durability: a commit only reaches the OS cache and the store journal's
 * queue (store.c, "Durability"), so the ops it finished go to the sync
 * stage, a thread of its own that writes every commit queued since its
 * last one to the journal with one fdatasync and only then calls their
 * done().  Meanwhile the writer already runs the next batch: the sync of
 * commit N overlaps batch N+1 (the store makes batch N+2 wait for it).
 * When no op is queued and the stage is idle, there is nothing to overlap:
 * the writer syncs the commit itself (settle), which saves the hand-over
 * and two thread wake-ups a commit; the ops that arrive meanwhile make the
 * next batch.  No op is answered before the sync that covers its commit
 * returned; a failed sync
 * answers its ops MIC_EIO and stops the writer (fail-stop: after a failed
 * fsync the kernel may have dropped the pages, so nothing later can be
 * trusted to be on disk; DESIGN section 1; micd itself exits then, see
 * mic_store_on_fatal).  A sync never finds the filesystem full: the
 * journal kept the room of each commit's record before the commit (a
 * commit that could not have it failed, with MIC_ENOSPC, below), so a 507
 * always means nothing was stored.  Parked ops, and ops whose batch
 * failed (it wrote nothing), are finished by the writer itself.
 *
 * When an op reports MIC_ENOSPC (the map or the filesystem is full) the
 * transaction is aborted, the map grown and the whole batch applied again;
 * when the map cannot grow any more, or the filesystem is what is full,
 * the ops are applied one transaction each, so that those needing no new
 * space (acks, claims, deletes: LMDB reuses the pages earlier commits
 * freed) still succeed and the others answer 507.
 * An op that met a stored record failing its checksum (MIC_ECORRUPT: a
 * claim that would grant it) is isolated the same way: it answers 500
 * store_corrupt having changed nothing, and the others go on. */
#define _GNU_SOURCE
#include "writer.h"

#include "core/clock.h"
#include "core/config.h"
#include "core/err.h"
#include "core/logger.h"

#include <errno.h>
#include <stdatomic.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BUCKETS 256
/* Ops queued during a sync that wake the writer to apply them (take_more). */
#define GATHER 8

struct mic_writer {
    mic_store *store;
    const struct mic_config *cfg;
    struct mic_writer_hooks hooks;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    mic_op *head, *tail;
    int queued, stopping;
    /* Set while the writer waits in take_more for the ops that arrive
     * during a sync: submits wake it once 'gather' of them are queued (or
     * the stage, when it is done), not one wake an op. */
    int gathering, gather;
    struct mic_writer_stats st;
    /* Writer thread only. */
    uint64_t next_seq;
    int64_t next_due_us;        /* earliest stored deadline, 0 = none */
    mic_op *bucket[BUCKETS];    /* parked ops by wait_key */
    mic_op **heap;              /* parked ops by wait_until_ms */
    int nheap, heap_cap;
    mic_op *woken;              /* to apply again in the next batch */
    int trim_pending;           /* batches ran since the last malloc_trim */
    int64_t trimmed_ms;         /* monotonic ms of the last malloc_trim */
    /* The sync stage: finished ops of committed batches, guarded by
     * 'slock'; 'scond' wakes the sync thread. */
    pthread_t sync_thread;
    pthread_mutex_t slock;
    pthread_cond_t scond;
    mic_op *shead, *stail;
    int sstop;
    int durable;                /* 0 with --durability none: no sync stage */
    /* Nonzero from the moment the writer hands the sync stage a commit
     * until the stage has nothing left: the batch being applied could not
     * be durable sooner, so it takes the ops that arrive meanwhile. */
    _Atomic int sbusy;
    /* mic_writer_on_finished's: called after each run of done() calls. */
    void (*_Atomic fin_fn)(void *arg);
    void *_Atomic fin_arg;
};

/* Once the queue is empty, give the memory a burst freed back to the
 * system (malloc keeps it otherwise), at most this often.  What LMDB keeps
 * for reuse (the dirty pages of its largest transaction) stays. */
#define TRIM_MS 1000

void mic_wctx_wake(struct mic_wctx *w, uint32_t key)
{
    for (int i = 0; i < w->nwake; i++)
        if (w->wake[i] == key)
            return;
    if (w->nwake == w->wake_cap) {
        int cap = w->wake_cap ? w->wake_cap * 2 : 16;
        uint32_t *p = realloc(w->wake, (size_t)cap * sizeof *p);
        if (!p)
            return; /* parked ops still finish at their deadline */
        w->wake = p;
        w->wake_cap = cap;
    }
    w->wake[w->nwake++] = key;
}

/* After a run of done() calls, in the thread that made them. */
static void finished(mic_writer *w)
{
    void (*fn)(void *) = atomic_load(&w->fin_fn);

    if (fn)
        fn(atomic_load(&w->fin_arg));
}

void mic_writer_on_finished(mic_writer *w, void (*fn)(void *arg), void *arg)
{
    atomic_store(&w->fin_arg, arg);
    atomic_store(&w->fin_fn, fn);
}

/* ---- Parked ops: a heap by deadline and lists by key ---- */

static void heap_swap(mic_writer *w, int a, int b)
{
    mic_op *t = w->heap[a];

    w->heap[a] = w->heap[b];
    w->heap[b] = t;
    w->heap[a]->heap_pos = a;
    w->heap[b]->heap_pos = b;
}

static void heap_up(mic_writer *w, int i)
{
    while (i > 0 && w->heap[(i - 1) / 2]->wait_until_ms > w->heap[i]->wait_until_ms) {
        heap_swap(w, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

static void heap_down(mic_writer *w, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < w->nheap && w->heap[l]->wait_until_ms < w->heap[m]->wait_until_ms)
            m = l;
        if (r < w->nheap && w->heap[r]->wait_until_ms < w->heap[m]->wait_until_ms)
            m = r;
        if (m == i)
            return;
        heap_swap(w, i, m);
        i = m;
    }
}

static int park(mic_writer *w, mic_op *op)
{
    mic_op **b = &w->bucket[op->wait_key % BUCKETS];

    if (w->nheap == w->heap_cap) {
        int cap = w->heap_cap ? w->heap_cap * 2 : 64;
        mic_op **h = realloc(w->heap, (size_t)cap * sizeof *h);
        if (!h)
            return -1;
        w->heap = h;
        w->heap_cap = cap;
    }
    op->heap_pos = w->nheap;
    w->heap[w->nheap++] = op;
    heap_up(w, op->heap_pos);
    op->wprev = NULL;
    op->wnext = *b;
    if (*b)
        (*b)->wprev = op;
    *b = op;
    return 0;
}

static void unpark(mic_writer *w, mic_op *op)
{
    int i = op->heap_pos;

    if (op->wprev)
        op->wprev->wnext = op->wnext;
    else
        w->bucket[op->wait_key % BUCKETS] = op->wnext;
    if (op->wnext)
        op->wnext->wprev = op->wprev;
    w->nheap--;
    if (i != w->nheap) {
        w->heap[i] = w->heap[w->nheap];
        w->heap[i]->heap_pos = i;
        heap_down(w, i);
        heap_up(w, i);
    }
}

/* Move the ops parked on 'key' to the woken list, oldest first. */
static void wake_key(mic_writer *w, uint32_t key)
{
    mic_op *op = w->bucket[key % BUCKETS], *next, *list = NULL;

    for (; op; op = next) {
        next = op->wnext;
        if (op->wait_key != key)
            continue;
        unpark(w, op);
        op->next = list;
        list = op;
    }
    /* Buckets hold the newest first, so 'list' is now oldest first;
     * pushing it onto 'woken' reverses it, and take_woken's pushing onto
     * the batch reverses it again: the oldest waiter is served first. */
    while (list) {
        next = list->next;
        list->next = w->woken;
        w->woken = list;
        list = next;
    }
}

/* ---- Batches ---- */

static void record(mic_writer *w, int nops, int64_t commit_us, uint64_t seq)
{
    static const int batch_le[] = {1, 2, 4, 16, 64, 256, 1024};
    static const int us_le[] = {100, 250, 500, 1000, 2500, 5000, 10000};
    int b = 0, c = 0;

    while (b < 7 && nops > batch_le[b])
        b++;
    while (c < 7 && commit_us > us_le[c])
        c++;
    pthread_mutex_lock(&w->lock);
    w->st.commits++;
    w->trim_pending = 1;
    w->st.ops += (uint64_t)nops;
    w->st.committed_seq = seq - 1;
    w->st.batch_hist[b]++;
    w->st.commit_us_hist[c]++;
    w->st.commit_seconds_sum += commit_us / 1e6;
    w->st.parked = w->nheap;
    pthread_mutex_unlock(&w->lock);
}

static void aborted(mic_writer *w)
{
    mic_txn *t;

    if (!w->hooks.aborted)
        return;
    if (mic_txn_begin(w->store, 0, &t) == MIC_OK) {
        w->hooks.aborted(w->hooks.sched, t);
        mic_txn_abort(t);
    }
}

/* With w->lock held: take up to 'max' ops off the queue, oldest first, as
 * a NULL-terminated list (NULL if the queue is empty); *n is set to the
 * number taken, *last to the last one. */
static mic_op *dequeue(mic_writer *w, int max, int *n, mic_op **last)
{
    mic_op *list = *last = w->head;

    *n = 0;
    if (!list)
        return NULL;
    for (*n = 1; (*last)->next && *n < max; (*n)++)
        *last = (*last)->next;
    w->head = (*last)->next;
    if (!w->head)
        w->tail = NULL;
    (*last)->next = NULL;
    w->queued -= *n;
    return list;
}

/* Take up to 'max' queued ops, waiting while fewer than w->gather are
 * queued and the sync stage is still busy; NULL when there is nothing to
 * take (the stage went idle, or stopping).  *n is set to the number
 * taken, *last to the last. */
static mic_op *take_more(mic_writer *w, int max, int *n, mic_op **last)
{
    mic_op *list;

    pthread_mutex_lock(&w->lock);
    w->gathering = 1;
    while (w->queued < w->gather && atomic_load(&w->sbusy) && !w->stopping)
        pthread_cond_wait(&w->cond, &w->lock);
    w->gathering = 0;
    list = dequeue(w, max, n, last);
    pthread_mutex_unlock(&w->lock);
    return list;
}

/* What an op or hook sees of the writer: the time now, settings, hooks' state. */
static void ctx_fill(mic_writer *w, struct mic_wctx *ctx)
{
    ctx->now_us = mic_now_us();
    ctx->cfg = w->cfg;
    ctx->groups = w->hooks.groups;
    ctx->engine = w->hooks.engine;
    ctx->retention = w->hooks.retention;
}

/* Apply '*list' in one transaction and commit.  With 'extend', while the
 * sync stage is still busy with the commit before, ops that arrive are
 * applied in this transaction too and appended to '*list' and '*nops'
 * (group commit: they could not be durable sooner).  Returns MIC_OK or
 * the error that aborted it; w->next_seq only moves on success.  'ctx'
 * collects the keys to wake. */
static int run_batch(mic_writer *w, mic_op **list, int *nops, int extend,
                     struct mic_wctx *ctx)
{
    int64_t t0, due = 0;
    mic_op *tail = NULL;
    int rc;

    if ((rc = mic_txn_begin(w->store, 1, &ctx->txn)))
        return rc;
    ctx_fill(w, ctx);
    ctx->next_seq = w->next_seq;
    if (w->hooks.before && (rc = w->hooks.before(w->hooks.sched, ctx)))
        goto fail;
    for (mic_op *op = *list; op; op = op->next) {
        op->wait_key = 0;
        if ((rc = op->apply(op, ctx)))
            goto fail;
        tail = op;
    }
    while (extend && w->durable && atomic_load(&w->sbusy) && *nops < w->cfg->writer_batch) {
        mic_op *last, *more;
        int n;
        if (!(more = take_more(w, w->cfg->writer_batch - *nops, &n, &last)))
            break;
        if (tail)
            tail->next = more;
        else
            *list = more;
        tail = last;
        *nops += n;
        /* They were sent after the batch began: what came due meanwhile
         * (a lease, a deliver_at) is done before them, at their time. */
        ctx->now_us = mic_now_us();
        if (w->hooks.before && (rc = w->hooks.before(w->hooks.sched, ctx)))
            goto fail;
        for (mic_op *op = more; op; op = op->next) {
            op->wait_key = 0;
            if ((rc = op->apply(op, ctx)))
                goto fail;
        }
    }
    if (w->hooks.before_commit && (rc = w->hooks.before_commit(w->hooks.sched, ctx)))
        goto fail;
    if (w->hooks.next_due)
        due = w->hooks.next_due(w->hooks.sched, ctx);
    t0 = mic_mono_us();
    if ((rc = mic_txn_commit(ctx->txn))) {
        ctx->txn = NULL;
        aborted(w);
        return rc;
    }
    ctx->txn = NULL;
    w->next_seq = ctx->next_seq;
    w->next_due_us = due;
    record(w, *nops, mic_mono_us() - t0, w->next_seq);
    return MIC_OK;
fail:
    mic_txn_abort(ctx->txn);
    ctx->txn = NULL;
    aborted(w);
    return rc;
}

/* ---- The sync stage ---- */

/* Make every commit so far durable, then finish 'list' (MIC_EIO for all
 * when the sync failed: the writer then stops taking ops). */
static void sync_and_finish(mic_writer *w, mic_op *list)
{
    int rc = mic_store_sync(w->store);

    if (rc) {
        pthread_mutex_lock(&w->lock);
        w->st.alive = 0; /* fail-stop: later submits answer not ready */
        pthread_mutex_unlock(&w->lock);
    }
    while (list) {
        mic_op *next = list->next;
        list->result = rc;
        list->done(list);
        list = next;
    }
    finished(w);
}

static void *sync_main(void *arg)
{
    mic_writer *w = arg;

    pthread_mutex_lock(&w->slock);
    for (;;) {
        mic_op *list;

        while (!w->shead && !w->sstop)
            pthread_cond_wait(&w->scond, &w->slock);
        if (!w->shead)
            break;
        list = w->shead;
        w->shead = w->stail = NULL;
        pthread_mutex_unlock(&w->slock);
        sync_and_finish(w, list);
        pthread_mutex_lock(&w->slock);
        if (!w->shead) {
            /* Idle: the writer commits what it holds. */
            atomic_store(&w->sbusy, 0);
            pthread_mutex_lock(&w->lock); /* the writer has checked sbusy, or waits */
            pthread_mutex_unlock(&w->lock);
            pthread_cond_signal(&w->cond);
        }
    }
    pthread_mutex_unlock(&w->slock);
    return NULL;
}

/* Hand the finished ops of a committed batch to the sync stage. */
static void to_sync(mic_writer *w, mic_op *list, mic_op *last)
{
    pthread_mutex_lock(&w->slock);
    if (w->stail)
        w->stail->next = list;
    else
        w->shead = list;
    w->stail = last;
    atomic_store(&w->sbusy, 1);
    pthread_mutex_unlock(&w->slock);
    pthread_cond_signal(&w->scond);
}

/* After the batch: park what asked for it, finish the rest (through the
 * sync stage when the batch committed). */
static void settle(mic_writer *w, mic_op *list, int result)
{
    int64_t now = mic_mono_ms();
    mic_op *fin = NULL, *fin_last = NULL;
    int direct = 0, waiting;

    while (list) {
        mic_op *next = list->next;
        if (result == MIC_OK && list->wait_key && list->wait_until_ms > now &&
            !w->stopping && park(w, list) == 0) {
            list = next;
            continue;
        }
        list->result = result;
        if (result == MIC_OK && w->durable) {
            list->next = NULL;
            if (fin_last)
                fin_last->next = list;
            else
                fin = list;
            fin_last = list;
        } else {
            list->done(list);
            direct = 1;
        }
        list = next;
    }
    if (direct)
        finished(w);
    if (!fin)
        return;
    pthread_mutex_lock(&w->lock);
    waiting = w->head != NULL;
    pthread_mutex_unlock(&w->lock);
    if (waiting || atomic_load(&w->sbusy)) {
        to_sync(w, fin, fin_last);
        return;
    }
    /* Nothing to overlap with: sync here, no hand-over. */
    sync_and_finish(w, fin);
}

static void set_full(mic_writer *w, int full)
{
    pthread_mutex_lock(&w->lock);
    w->st.full = full;
    w->st.parked = w->nheap;
    pthread_mutex_unlock(&w->lock);
}

static void process(mic_writer *w, mic_op *list, int nops, struct mic_wctx *ctx)
{
    int rc, full = 0;

    ctx->nwake = 0;
    while ((rc = run_batch(w, &list, &nops, 1, ctx)) == MIC_ENOSPC &&
           mic_store_grow(w->store) == MIC_OK)
        ;
    /* A full map, or an op that found a corrupt record (MIC_ECORRUPT: a
     * claim must not grant it), fails alone: the others get a
     * transaction each. */
    if ((rc != MIC_ENOSPC && rc != MIC_ECORRUPT) || nops <= 1) {
        set_full(w, rc == MIC_ENOSPC);
        settle(w, list, rc);
    } else {
        /* The map is at its limit: give each op its own chance. */
        while (list) {
            mic_op *next = list->next;
            int one = 1;
            list->next = NULL;
            rc = run_batch(w, &list, &one, 0, ctx);
            full |= rc == MIC_ENOSPC;
            settle(w, list, rc);
            list = next;
        }
        set_full(w, full);
    }
    for (int i = 0; i < ctx->nwake; i++)
        wake_key(w, ctx->wake[i]);
    pthread_mutex_lock(&w->lock);
    w->st.parked = w->nheap;
    pthread_mutex_unlock(&w->lock);
}

/* Finish parked ops whose deadline passed, or all of them. */
static void expire_parked(mic_writer *w, int all)
{
    int64_t now = mic_mono_ms();
    int any = 0;

    while (w->nheap > 0 && (all || w->heap[0]->wait_until_ms <= now)) {
        mic_op *op = w->heap[0];
        unpark(w, op);
        op->result = MIC_OK;
        op->done(op);
        any = 1;
    }
    if (any)
        finished(w);
}

/* Monotonic ms of the next thing to do without new work, or -1. */
static int64_t next_wakeup(mic_writer *w)
{
    int64_t t = -1;

    if (w->nheap > 0)
        t = w->heap[0]->wait_until_ms;
    if (w->next_due_us) {
        /* micd's clock runs at elapsed speed give or take its slew: a
         * wake-up that comes early finds nothing due and sleeps again.
         * Rounded up, so that it does not come a few µs early in a loop. */
        int64_t due = mic_mono_ms() + (w->next_due_us - mic_now_us() + 999) / 1000;
        if (due < mic_mono_ms())
            due = mic_mono_ms();
        if (t < 0 || due < t)
            t = due;
    }
    return t;
}

/* The deadlines already stored (leases and retries that came due while
 * micd was down, retention) set the first wake-up, in a read transaction:
 * no batch is needed to learn them. */
static void first_due(mic_writer *w, struct mic_wctx *ctx)
{
    if (!w->hooks.next_due || mic_txn_begin(w->store, 0, &ctx->txn) != MIC_OK)
        return;
    ctx_fill(w, ctx);
    w->next_due_us = w->hooks.next_due(w->hooks.sched, ctx);
    mic_txn_abort(ctx->txn);
    ctx->txn = NULL;
}

/* With w->lock held: sleep until there is work (queued, woken or busy
 * ops, or stopping) or a deadline came due, trimming the heap on the way. */
static void wait_for_work(mic_writer *w)
{
    while (!w->head && !w->stopping && !w->woken &&
           !(w->hooks.busy && w->hooks.busy(w->hooks.sched))) {
        int64_t until = next_wakeup(w), now = mic_mono_ms(), wake = until;
        struct timespec ts;

        if (until >= 0 && until <= now)
            return;
        if (w->trim_pending) {
            int64_t trim_at = w->trimmed_ms + TRIM_MS;

            if (trim_at <= now) {
                w->trim_pending = 0;
                w->trimmed_ms = now;
                pthread_mutex_unlock(&w->lock);
                malloc_trim(0);
                pthread_mutex_lock(&w->lock);
                continue;
            }
            if (wake < 0 || trim_at < wake)
                wake = trim_at;
        }
        if (wake < 0) {
            pthread_cond_wait(&w->cond, &w->lock);
            continue;
        }
        mic_mono_deadline(wake - now, &ts);
        if (pthread_cond_timedwait(&w->cond, &w->lock, &ts) == ETIMEDOUT && wake == until)
            return;     /* a deadline: run a batch */
    }
}

/* Put the woken parked ops in front of 'list' (*n counts them). */
static mic_op *take_woken(mic_writer *w, mic_op *list, int *n)
{
    int dead = 0;

    /* Woken parked ops go first: they have waited longest.  One whose
     * client went away is finished as it stands (an op that parked
     * took nothing), without being applied again; ops applied for the
     * first time are not asked (their client just sent them). */
    while (w->woken) {
        mic_op *op = w->woken;
        w->woken = op->next;
        if (op->alive && !op->alive(op)) {
            op->result = MIC_OK;
            op->done(op);
            dead = 1;
            continue;
        }
        op->next = list;
        list = op;
        (*n)++;
    }
    if (dead)
        finished(w);
    return list;
}

/* Stopping: answer every parked op as it stands, then end the sync stage
 * (it answers what it holds first). */
static void writer_drain(mic_writer *w)
{
    if (w->woken) {
        while (w->woken) {
            mic_op *op = w->woken;
            w->woken = op->next;
            op->result = MIC_OK;
            op->done(op);
        }
        finished(w);
    }
    expire_parked(w, 1);
    pthread_mutex_lock(&w->slock);
    w->sstop = 1;
    pthread_cond_signal(&w->scond);
    pthread_mutex_unlock(&w->slock);
    pthread_join(w->sync_thread, NULL);
}

static void *writer_main(void *arg)
{
    mic_writer *w = arg;
    struct mic_wctx ctx;

    memset(&ctx, 0, sizeof ctx);
    first_due(w, &ctx);
    pthread_mutex_lock(&w->lock);
    for (;;) {
        mic_op *list, *last = NULL;
        int n = 0;

        wait_for_work(w);
        if (w->stopping && !w->head)
            break;
        list = dequeue(w, w->cfg->writer_batch, &n, &last);
        pthread_mutex_unlock(&w->lock);

        expire_parked(w, 0);
        pthread_mutex_lock(&w->lock);
        w->st.parked = w->nheap;
        pthread_mutex_unlock(&w->lock);
        list = take_woken(w, list, &n);
        if (w->cfg->writer_delay_ms) {
            struct timespec ts = {w->cfg->writer_delay_ms / 1000,
                                  (long)(w->cfg->writer_delay_ms % 1000) * 1000000};
            nanosleep(&ts, NULL);
        }
        process(w, list, n, &ctx);
        pthread_mutex_lock(&w->lock);
    }
    pthread_mutex_unlock(&w->lock);
    writer_drain(w);
    free(ctx.wake);
    pthread_mutex_lock(&w->lock);
    w->st.alive = 0;
    w->st.parked = 0;
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

int mic_writer_start(mic_writer **out, mic_store *s,
                     const struct mic_config *cfg,
                     const struct mic_writer_hooks *hooks)
{
    mic_writer *w = calloc(1, sizeof *w);
    mic_txn *t;
    uint64_t last;
    int rc;

    if (!w)
        return MIC_ENOMEM;
    if ((rc = mic_txn_begin(s, 0, &t)))
        goto fail_free;
    rc = mic_store_last_seq(t, &last);
    mic_txn_abort(t);
    if (rc)
        goto fail_free;
    w->store = s;
    w->cfg = cfg;
    if (hooks)
        w->hooks = *hooks;
    w->next_seq = last + 1;
    w->st.committed_seq = last;
    w->st.alive = 1;
    w->durable = cfg->durability != MIC_DURABILITY_NONE;
    w->gather = cfg->writer_batch < GATHER ? cfg->writer_batch : GATHER;
    pthread_mutex_init(&w->lock, NULL);
    mic_cond_init_mono(&w->cond); /* its deadlines are monotonic */
    pthread_mutex_init(&w->slock, NULL);
    pthread_cond_init(&w->scond, NULL);
    if (pthread_create(&w->sync_thread, NULL, sync_main, w)) {
        rc = MIC_ENOMEM;
        goto fail_sync;
    }
    if (pthread_create(&w->thread, NULL, writer_main, w)) {
        pthread_mutex_lock(&w->slock);
        w->sstop = 1;
        pthread_cond_signal(&w->scond);
        pthread_mutex_unlock(&w->slock);
        pthread_join(w->sync_thread, NULL);
        rc = MIC_ENOMEM;
        goto fail_sync;
    }
    *out = w;
    return MIC_OK;
fail_sync:
    pthread_cond_destroy(&w->scond);
    pthread_mutex_destroy(&w->slock);
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
fail_free:
    free(w);
    return rc;
}

int mic_writer_submit(mic_writer *w, mic_op *op)
{
    int rc = MIC_OK, wake = 0;

    op->next = NULL;
    op->wait_key = 0;
    pthread_mutex_lock(&w->lock);
    if (w->stopping || !w->st.alive)
        rc = MIC_ENOTREADY;
    else if (w->queued >= w->cfg->writer_queue)
        rc = MIC_EBUSY;
    if (rc == MIC_OK) {
        if (w->tail)
            w->tail->next = op;
        else
            w->head = op;
        w->tail = op;
        w->queued++;
        /* Idle, the writer wants the first op; gathering the ops of a
         * batch while the sync stage is busy, a handful at once. */
        wake = w->gathering ? w->queued >= w->gather : w->queued == 1;
    }
    pthread_mutex_unlock(&w->lock);
    if (wake)
        pthread_cond_signal(&w->cond);
    return rc;
}

void mic_writer_stop(mic_writer *w)
{
    int joined;

    pthread_mutex_lock(&w->lock);
    joined = w->stopping;
    w->stopping = 1;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
    if (!joined)
        pthread_join(w->thread, NULL);
}

void mic_writer_free(mic_writer *w)
{
    if (!w)
        return;
    mic_writer_stop(w);
    pthread_cond_destroy(&w->scond);
    pthread_mutex_destroy(&w->slock);
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
    free(w->heap);
    free(w);
}

void mic_writer_stats(mic_writer *w, struct mic_writer_stats *st)
{
    pthread_mutex_lock(&w->lock);
    *st = w->st;
    st->gathering = w->gathering;
    pthread_mutex_unlock(&w->lock);
}
