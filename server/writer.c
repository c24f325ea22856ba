/* writer.c - the writer thread and its queue (see writer.h).
 *
 * Shared state: the queue ('head', 'tail', 'queued', 'stopping') is guarded
 * by 'lock'; 'cond' wakes the writer.  Everything else ('next_seq', the
 * open transaction) belongs to the writer thread alone.  The statistics are
 * written by the writer under 'lock' too, so readers see a consistent set.
 *
 * A batch: take every queued op (up to --writer-batch), begin one
 * transaction, apply each op, commit once.  When an op reports MIC_ENOSPC
 * (the map is full) the transaction is aborted, the map grown and the whole
 * batch applied again; when the map cannot grow any more, the ops are
 * applied one transaction each, so that those needing no space (deletes)
 * still succeed and the others answer 507. */
#define _GNU_SOURCE
#include "writer.h"

#include "clock.h"
#include "config.h"
#include "err.h"
#include "log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct mic_writer {
    mic_store *store;
    const struct mic_config *cfg;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    mic_op *head, *tail;
    int queued, stopping;
    uint64_t next_seq;
    struct mic_writer_stats st;
};

static void finish(mic_op *list, int result)
{
    while (list) {
        mic_op *next = list->next;
        list->result = result;
        list->done(list);
        list = next;
    }
}

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
    w->st.ops += (uint64_t)nops;
    w->st.committed_seq = seq - 1;
    w->st.batch_hist[b]++;
    w->st.commit_us_hist[c]++;
    w->st.commit_seconds_sum += commit_us / 1e6;
    pthread_mutex_unlock(&w->lock);
}

/* Apply 'list' in one transaction and commit.  Returns MIC_OK or the error
 * that aborted it; w->next_seq only moves on success. */
static int run_batch(mic_writer *w, mic_op *list, int nops)
{
    struct mic_wctx ctx;
    int64_t t0;
    int rc;

    memset(&ctx, 0, sizeof ctx);
    if ((rc = mic_txn_begin(w->store, 1, &ctx.txn)))
        return rc;
    ctx.now_us = mic_now_us();
    ctx.next_seq = w->next_seq;
    ctx.cfg = w->cfg;
    for (mic_op *op = list; op; op = op->next)
        if ((rc = op->apply(op, &ctx))) {
            mic_txn_abort(ctx.txn);
            return rc;
        }
    t0 = mic_mono_us();
    rc = mic_txn_commit(ctx.txn);
    if (rc)
        return rc;
    w->next_seq = ctx.next_seq;
    record(w, nops, mic_mono_us() - t0, w->next_seq);
    return MIC_OK;
}

static void set_full(mic_writer *w, int full)
{
    pthread_mutex_lock(&w->lock);
    w->st.full = full;
    pthread_mutex_unlock(&w->lock);
}

static void process(mic_writer *w, mic_op *list, int nops)
{
    int rc, full = 0;

    while ((rc = run_batch(w, list, nops)) == MIC_ENOSPC &&
           mic_store_grow(w->store) == MIC_OK)
        ;
    if (rc != MIC_ENOSPC || nops == 1) {
        set_full(w, rc == MIC_ENOSPC);
        finish(list, rc);
        return;
    }
    /* The map is at its limit: give each op its own chance. */
    while (list) {
        mic_op *next = list->next;
        list->next = NULL;
        rc = run_batch(w, list, 1);
        full |= rc == MIC_ENOSPC;
        finish(list, rc);
        list = next;
    }
    set_full(w, full);
}

static void *writer_main(void *arg)
{
    mic_writer *w = arg;

    pthread_mutex_lock(&w->lock);
    for (;;) {
        mic_op *list, *last;
        int n = 0;

        while (!w->head && !w->stopping)
            pthread_cond_wait(&w->cond, &w->lock);
        if (!w->head)
            break;
        list = last = w->head;
        for (n = 1; last->next && n < w->cfg->writer_batch; n++)
            last = last->next;
        w->head = last->next;
        if (!w->head)
            w->tail = NULL;
        last->next = NULL;
        w->queued -= n;
        pthread_mutex_unlock(&w->lock);
        if (w->cfg->writer_delay_ms) {
            struct timespec ts = {w->cfg->writer_delay_ms / 1000,
                                  (long)(w->cfg->writer_delay_ms % 1000) * 1000000};
            nanosleep(&ts, NULL);
        }
        process(w, list, n);
        pthread_mutex_lock(&w->lock);
    }
    w->st.alive = 0;
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

int mic_writer_start(mic_writer **out, mic_store *s,
                     const struct mic_config *cfg)
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
    w->next_seq = last + 1;
    w->st.committed_seq = last;
    w->st.alive = 1;
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
    if (pthread_create(&w->thread, NULL, writer_main, w)) {
        rc = MIC_ENOMEM;
        goto fail_sync;
    }
    *out = w;
    return MIC_OK;
fail_sync:
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
fail_free:
    free(w);
    return rc;
}

int mic_writer_submit(mic_writer *w, mic_op *op)
{
    int rc = MIC_OK;

    op->next = NULL;
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
        if (w->queued++ == 0)
            pthread_cond_signal(&w->cond);
    }
    pthread_mutex_unlock(&w->lock);
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
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
    free(w);
}

void mic_writer_stats(mic_writer *w, struct mic_writer_stats *st)
{
    pthread_mutex_lock(&w->lock);
    *st = w->st;
    pthread_mutex_unlock(&w->lock);
}
