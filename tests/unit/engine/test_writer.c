/* test_writer.c - the writer thread: group commit (ops queued while a
 * batch runs are committed together), the queue bound (MIC_EBUSY), a full
 * map (grow and retry; at the limit each op alone), a batch that takes
 * the ops arriving while the sync stage is busy, a failing write that
 * aborts its batch, a failing sync that answers its ops MIC_EIO and stops
 * the writer (fail-stop), draining on stop, and a commit that readers see
 * while its journal record is not yet synced (visible before durable). */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/clock.h"
#include "core/config.h"
#include "core/err.h"
#include "store/journal.h"
#include "store/store.h"
#include "store/log.h"
#include "procfx.h"
#include "engine/writer.h"
#include "storedir.h"

#include <errno.h>
#include <lmdb.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct fx {
    char dir[64];
    struct mic_config cfg;
    mic_store *store;
    mic_writer *w;
};

struct top {
    mic_op op;
    size_t bytes;         /* size of the log record it writes */
    int block;            /* wait on 'gate' inside apply */
    int applied;
    int64_t now_us;       /* the batch's clock when it was applied */
    sem_t *done;
};

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static int gate_open, gate_entered;

static sem_t *applied_sem; /* posted at every apply when set */
static pthread_t applied_by, synced_by; /* the threads of the last apply and sync hook */

static int apply(mic_op *op, struct mic_wctx *w)
{
    struct top *t = (struct top *)op;
    struct mic_rec r;
    char *json;
    int rc;

    t->applied++;
    t->now_us = w->now_us;
    applied_by = pthread_self();
    if (applied_sem)
        sem_post(applied_sem);
    if (t->block) {
        pthread_mutex_lock(&gate_lock);
        gate_entered = 1;
        pthread_cond_broadcast(&gate_cond);
        while (!gate_open)
            pthread_cond_wait(&gate_cond, &gate_lock);
        pthread_mutex_unlock(&gate_lock);
    }
    if (!(json = calloc(1, t->bytes + 1)))
        return MIC_ENOMEM;
    memset(json, 'x', t->bytes);
    memset(&r, 0, sizeof r);
    r.seq = w->next_seq++;
    r.json = json;
    r.json_len = t->bytes;
    rc = mic_store_log_put(w->txn, &r);
    free(json);
    return rc;
}

static void done(mic_op *op)
{
    sem_post(((struct top *)op)->done);
}

static void top_init(struct top *t, size_t bytes, sem_t *sem)
{
    memset(t, 0, sizeof *t);
    t->op.apply = apply;
    t->op.done = done;
    t->bytes = bytes;
    t->done = sem;
}

static int fx_open(struct fx *f, const char *const *extra)
{
    const char *argv[16] = {"micd"};
    char err[256];
    int n = 1;

    for (int i = 0; extra && extra[i]; i++)
        argv[n++] = extra[i];
    snprintf(f->dir, sizeof f->dir, "/tmp/mic-writer-XXXXXX");
    if (!mkdtemp(f->dir) ||
        mic_config_load(&f->cfg, n, (char **)argv, err, sizeof err))
        return -1;
    if (mic_store_open(&f->store, f->dir, f->cfg.map_size, f->cfg.map_max, 1))
        return -1;
    return mic_writer_start(&f->w, f->store, &f->cfg, NULL);
}

static void fx_close(struct fx *f)
{
    mic_writer_free(f->w);
    mic_store_close(f->store);
    storedir_rm(f->dir);
}

static void gate_reset(void)
{
    gate_open = gate_entered = 0;
}

static void gate_wait_entered(void)
{
    pthread_mutex_lock(&gate_lock);
    while (!gate_entered)
        pthread_cond_wait(&gate_cond, &gate_lock);
    pthread_mutex_unlock(&gate_lock);
}

static void gate_release(void)
{
    pthread_mutex_lock(&gate_lock);
    gate_open = 1;
    pthread_cond_broadcast(&gate_cond);
    pthread_mutex_unlock(&gate_lock);
}

static uint64_t log_count(struct fx *f)
{
    return procfx_count(f->store, mic_store_log_count);
}

/* ---- Tests ---- */

static void group_commit(void **state)
{
    struct fx f;
    struct top first, ops[50];
    struct mic_writer_stats st;
    sem_t sem;

    (void)state;
    assert_int_equal(fx_open(&f, NULL), 0);
    sem_init(&sem, 0, 0);
    gate_reset();
    top_init(&first, 10, &sem);
    first.block = 1;
    assert_int_equal(mic_writer_submit(f.w, &first.op), MIC_OK);
    gate_wait_entered(); /* the writer is inside the first batch */
    for (int i = 0; i < 50; i++) {
        top_init(&ops[i], 10, &sem);
        assert_int_equal(mic_writer_submit(f.w, &ops[i].op), MIC_OK);
    }
    gate_release();
    for (int i = 0; i < 51; i++)
        sem_wait(&sem);
    mic_writer_stats(f.w, &st);
    assert_int_equal(st.commits, 2);      /* 1 + one batch of 50 */
    assert_int_equal(st.ops, 51);
    assert_int_equal(st.committed_seq, 51);
    assert_int_equal(st.batch_hist[4], 1); /* 50 ops: the <=64 bucket */
    for (int i = 0; i < 50; i++)
        assert_int_equal(ops[i].op.result, MIC_OK);
    assert_int_equal(log_count(&f), 51);
    sem_destroy(&sem);
    fx_close(&f);
}

/* mic_writer_on_finished's hook comes after each run of done() calls, not
 * after each op: one batch of 50 is one call (routes.c wakes an HTTP
 * thread once per call), and no call comes before the done() it follows. */
static atomic_int fin_dones, fin_calls, fin_empty;
static int fin_seen;

static void counted_done(mic_op *op)
{
    atomic_fetch_add(&fin_dones, 1);
    done(op);
}

static void on_finished(void *arg)
{
    int n = atomic_load(&fin_dones);

    (void)arg;
    if (n == fin_seen) /* the sync stage's thread alone calls it here */
        atomic_fetch_add(&fin_empty, 1);
    fin_seen = n;
    atomic_fetch_add(&fin_calls, 1);
}

static void finished_once_per_batch(void **state)
{
    struct fx f;
    struct top first, ops[50];
    struct mic_writer_stats st;
    sem_t sem;
    int calls;

    (void)state;
    assert_int_equal(fx_open(&f, NULL), 0);
    mic_writer_on_finished(f.w, on_finished, NULL);
    sem_init(&sem, 0, 0);
    gate_reset();
    top_init(&first, 10, &sem);
    first.block = 1;
    first.op.done = counted_done;
    assert_int_equal(mic_writer_submit(f.w, &first.op), MIC_OK);
    gate_wait_entered();
    for (int i = 0; i < 50; i++) {
        top_init(&ops[i], 10, &sem);
        ops[i].op.done = counted_done;
        assert_int_equal(mic_writer_submit(f.w, &ops[i].op), MIC_OK);
    }
    gate_release();
    for (int i = 0; i < 51; i++)
        sem_wait(&sem);
    mic_writer_stop(f.w); /* joins the sync stage: its last call is made */
    mic_writer_stats(f.w, &st);
    calls = atomic_load(&fin_calls);
    assert_int_equal(st.commits, 2);
    /* One call for each run of the sync stage (it may take both commits
     * in one), none without a done() before it, one after the last. */
    assert_true(calls >= 1 && calls <= 2);
    assert_int_equal(atomic_load(&fin_empty), 0);
    assert_int_equal(fin_seen, 51);
    sem_destroy(&sem);
    fx_close(&f);
}

/* While the sync stage still makes the commit before durable, the batch
 * being applied takes the ops that arrive (they could not be durable
 * sooner), eight at a time (one wake of the writer for a handful of
 * arrivals), and commits once the stage is free: one commit for them all,
 * none answered before its own sync. */
#define GATHERED 8
static pthread_mutex_t sync_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sync_cond = PTHREAD_COND_INITIALIZER;
static int sync_entered, sync_open;

static int sync_gate(void)
{
    synced_by = pthread_self();
    pthread_mutex_lock(&sync_lock);
    sync_entered++;
    pthread_cond_broadcast(&sync_cond);
    while (!sync_open)
        pthread_cond_wait(&sync_cond, &sync_lock);
    pthread_mutex_unlock(&sync_lock);
    return 0;
}

static void commit_waits_for_the_sync_stage(void **state)
{
    static const char *const args[] = {"--durability", "fsync", NULL};
    struct fx f;
    struct top a, a2, b[GATHERED], c;
    struct mic_writer_stats st;
    sem_t done_sem, app;
    int64_t sent_us;

    (void)state;
    sem_init(&done_sem, 0, 0);
    sem_init(&app, 0, 0);
    sync_entered = sync_open = 0;
    mic_store_set_sync_fault(sync_gate);
    assert_int_equal(fx_open(&f, args), 0);
    applied_sem = &app;
    gate_reset();
    top_init(&a, 10, &done_sem);
    a.block = 1;
    assert_int_equal(mic_writer_submit(f.w, &a.op), MIC_OK);
    gate_wait_entered();
    top_init(&a2, 10, &done_sem); /* waiting when a commits: a's sync is handed over */
    assert_int_equal(mic_writer_submit(f.w, &a2.op), MIC_OK);
    gate_release();
    pthread_mutex_lock(&sync_lock);
    while (!sync_entered) /* a is committed; its sync is held */
        pthread_cond_wait(&sync_cond, &sync_lock);
    pthread_mutex_unlock(&sync_lock);
    sem_wait(&app);
    sem_wait(&app); /* a, then a2 in the next transaction, left open */
    assert_false(pthread_equal(synced_by, applied_by)); /* the sync stage's thread */
    sent_us = mic_now_us();
    for (int i = 0; i < GATHERED; i++) {
        if (i == GATHERED - 1) /* seven queued: not applied one by one */
            assert_int_equal(sem_trywait(&app), -1);
        top_init(&b[i], 10, &done_sem);
        assert_int_equal(mic_writer_submit(f.w, &b[i].op), MIC_OK);
    }
    for (int i = 0; i < GATHERED; i++)
        sem_wait(&app); /* the eighth woke the writer: all applied, the transaction open */
    mic_writer_stats(f.w, &st);
    assert_int_equal(st.commits, 1);
    assert_int_equal(sem_trywait(&done_sem), -1); /* nothing answered yet */
    top_init(&c, 10, &done_sem); /* one more: taken when the stage is free */
    assert_int_equal(mic_writer_submit(f.w, &c.op), MIC_OK);
    /* The writer, done applying the eight, waits for more (c alone does
     * not wake it); only then is the stage let go, so c joins the open
     * batch.  Let go sooner, the writer may find the stage free before it
     * looks for c, and commit without it (correct, but another test). */
    while (mic_writer_stats(f.w, &st), !st.gathering)
        sched_yield();
    pthread_mutex_lock(&sync_lock);
    sync_open = 1;
    pthread_cond_broadcast(&sync_cond);
    pthread_mutex_unlock(&sync_lock);
    for (int i = 0; i < GATHERED + 3; i++)
        sem_wait(&done_sem);
    mic_writer_stats(f.w, &st);
    assert_int_equal(st.commits, 2);       /* a, then a2, the eight and c together */
    assert_int_equal(st.ops, GATHERED + 3);
    assert_int_equal(st.batch_hist[3], 1); /* 10 ops: the <=16 bucket */
    assert_int_equal(a.op.result, MIC_OK);
    assert_int_equal(a2.op.result, MIC_OK);
    assert_true(a2.now_us < sent_us);
    for (int i = 0; i < GATHERED; i++) {
        assert_int_equal(b[i].op.result, MIC_OK);
        assert_int_equal(b[i].applied, 1);
        /* Applied at their time, not at the time the batch began. */
        assert_true(b[i].now_us >= sent_us);
    }
    assert_int_equal(c.op.result, MIC_OK);
    assert_int_equal(c.applied, 1);
    assert_int_equal(log_count(&f), GATHERED + 3);
    applied_sem = NULL;
    mic_store_set_sync_fault(NULL);
    fx_close(&f);
    sem_destroy(&app);
    sem_destroy(&done_sem);
}

/* A commit with no op waiting behind it is synced by the writer itself
 * (nothing to overlap: no hand-over, no wake-up of the sync stage), and
 * still answered only after its sync. */
static void sync_inline_when_idle(void **state)
{
    static const char *const args[] = {"--durability", "fsync", NULL};
    struct fx f;
    struct top a;
    sem_t done_sem;

    (void)state;
    sem_init(&done_sem, 0, 0);
    sync_entered = 0;
    sync_open = 1; /* the hook only records its thread */
    mic_store_set_sync_fault(sync_gate);
    assert_int_equal(fx_open(&f, args), 0);
    top_init(&a, 10, &done_sem);
    assert_int_equal(mic_writer_submit(f.w, &a.op), MIC_OK);
    sem_wait(&done_sem);
    assert_int_equal(a.op.result, MIC_OK);
    assert_int_equal(sync_entered, 1); /* answered after its sync */
    assert_true(pthread_equal(synced_by, applied_by));
    mic_store_set_sync_fault(NULL);
    fx_close(&f);
    sem_destroy(&done_sem);
}

static void queue_bound(void **state)
{
    static const char *const args[] = {"--writer-queue", "4", NULL};
    struct fx f;
    struct top first, ops[5];
    sem_t sem;

    (void)state;
    assert_int_equal(fx_open(&f, args), 0);
    sem_init(&sem, 0, 0);
    gate_reset();
    top_init(&first, 10, &sem);
    first.block = 1;
    assert_int_equal(mic_writer_submit(f.w, &first.op), MIC_OK);
    gate_wait_entered();
    for (int i = 0; i < 4; i++) {
        top_init(&ops[i], 10, &sem);
        assert_int_equal(mic_writer_submit(f.w, &ops[i].op), MIC_OK);
    }
    top_init(&ops[4], 10, &sem);
    assert_int_equal(mic_writer_submit(f.w, &ops[4].op), MIC_EBUSY);
    gate_release();
    for (int i = 0; i < 5; i++)
        sem_wait(&sem);
    assert_int_equal(ops[4].applied, 0); /* refused: never applied */
    sem_destroy(&sem);
    fx_close(&f);
}

static void map_full_grows_then_refuses(void **state)
{
    static const char *const args[] = {"--map-size", "1M", "--map-max", "4M", NULL};
    struct fx f;
    struct top grow, big, small;
    struct mic_writer_stats st;
    uint64_t size, used, max;
    sem_t sem;

    (void)state;
    assert_int_equal(fx_open(&f, args), 0);
    sem_init(&sem, 0, 0);
    /* 1.5 MiB does not fit in 1 MiB: the writer grows the map and retries. */
    top_init(&grow, 1536 * 1024, &sem);
    assert_int_equal(mic_writer_submit(f.w, &grow.op), MIC_OK);
    sem_wait(&sem);
    assert_int_equal(grow.op.result, MIC_OK);
    assert_true(grow.applied >= 2);
    mic_store_usage(f.store, &size, &used, &max);
    assert_true(size > 1024 * 1024);
    /* 8 MiB never fits; a small op in the same batch still commits. */
    gate_reset();
    top_init(&big, 8 * 1024 * 1024, &sem);
    top_init(&small, 100, &sem);
    big.block = 1;
    assert_int_equal(mic_writer_submit(f.w, &big.op), MIC_OK);
    gate_wait_entered();
    gate_release();
    sem_wait(&sem);
    assert_int_equal(big.op.result, MIC_ENOSPC);
    mic_writer_stats(f.w, &st);
    assert_int_equal(st.full, 1);
    assert_int_equal(mic_writer_submit(f.w, &small.op), MIC_OK);
    sem_wait(&sem);
    assert_int_equal(small.op.result, MIC_OK);
    mic_writer_stats(f.w, &st);
    assert_int_equal(st.full, 0);
    assert_int_equal(log_count(&f), 2);
    mic_store_usage(f.store, &size, &used, &max);
    assert_int_equal(size, 4 * 1024 * 1024);
    sem_destroy(&sem);
    fx_close(&f);
}

static void mixed_batch_at_limit(void **state)
{
    static const char *const args[] = {"--map-size", "1M", "--map-max", "1M", NULL};
    struct fx f;
    struct top first, big, small;
    sem_t sem;

    (void)state;
    assert_int_equal(fx_open(&f, args), 0);
    sem_init(&sem, 0, 0);
    gate_reset();
    top_init(&first, 10, &sem);
    first.block = 1;
    assert_int_equal(mic_writer_submit(f.w, &first.op), MIC_OK);
    gate_wait_entered();
    top_init(&big, 2 * 1024 * 1024, &sem);
    top_init(&small, 10, &sem);
    assert_int_equal(mic_writer_submit(f.w, &big.op), MIC_OK);
    assert_int_equal(mic_writer_submit(f.w, &small.op), MIC_OK);
    gate_release();
    for (int i = 0; i < 3; i++)
        sem_wait(&sem);
    assert_int_equal(first.op.result, MIC_OK);
    assert_int_equal(big.op.result, MIC_ENOSPC);
    assert_int_equal(small.op.result, MIC_OK); /* the batch split, one op each */
    assert_int_equal(log_count(&f), 2);
    sem_destroy(&sem);
    fx_close(&f);
}

static int fail_log(const char *db)
{
    return strcmp(db, "log") == 0 ? EIO : 0;
}

static void failed_write_aborts_batch(void **state)
{
    struct fx f;
    struct top a, b;
    sem_t sem;

    (void)state;
    assert_int_equal(fx_open(&f, NULL), 0);
    sem_init(&sem, 0, 0);
    mic_store_set_fault(fail_log);
    top_init(&a, 10, &sem);
    assert_int_equal(mic_writer_submit(f.w, &a.op), MIC_OK);
    sem_wait(&sem);
    mic_store_set_fault(NULL);
    assert_int_equal(a.op.result, MIC_EIO);
    assert_int_equal(log_count(&f), 0);
    top_init(&b, 10, &sem);
    assert_int_equal(mic_writer_submit(f.w, &b.op), MIC_OK);
    sem_wait(&sem);
    assert_int_equal(b.op.result, MIC_OK);
    assert_int_equal(log_count(&f), 1);
    sem_destroy(&sem);
    fx_close(&f);
}

static void stop_drains_queue(void **state)
{
    struct fx f;
    struct top first, ops[20], late;
    sem_t sem;

    (void)state;
    assert_int_equal(fx_open(&f, NULL), 0);
    sem_init(&sem, 0, 0);
    gate_reset();
    top_init(&first, 10, &sem);
    first.block = 1;
    assert_int_equal(mic_writer_submit(f.w, &first.op), MIC_OK);
    gate_wait_entered();
    for (int i = 0; i < 20; i++) {
        top_init(&ops[i], 10, &sem);
        assert_int_equal(mic_writer_submit(f.w, &ops[i].op), MIC_OK);
    }
    gate_release();
    mic_writer_stop(f.w); /* returns once everything queued is committed */
    for (int i = 0; i < 21; i++)
        assert_int_equal(sem_trywait(&sem), 0);
    for (int i = 0; i < 20; i++)
        assert_int_equal(ops[i].op.result, MIC_OK);
    top_init(&late, 10, &sem);
    assert_int_equal(mic_writer_submit(f.w, &late.op), MIC_ENOTREADY);
    assert_int_equal(log_count(&f), 21);
    sem_destroy(&sem);
    fx_close(&f);
}

static int sync_fails(void)
{
    return EIO;
}

/* A commit whose sync fails is never answered MIC_OK, and the writer
 * takes nothing more (after a failed fsync nothing it writes can be
 * trusted to reach the disk). */
static void failed_sync_stops(void **state)
{
    struct fx f;
    struct mic_writer_stats st;
    struct top a, b, c;
    sem_t sem;

    (void)state;
    sem_init(&sem, 0, 0);
    assert_int_equal(fx_open(&f, NULL), 0);
    top_init(&a, 100, &sem);
    assert_int_equal(mic_writer_submit(f.w, &a.op), MIC_OK);
    sem_wait(&sem);
    assert_int_equal(a.op.result, MIC_OK);
    mic_store_set_sync_fault(sync_fails);
    top_init(&b, 100, &sem);
    assert_int_equal(mic_writer_submit(f.w, &b.op), MIC_OK);
    sem_wait(&sem);
    mic_store_set_sync_fault(NULL);
    assert_int_equal(b.applied, 1);
    assert_int_equal(b.op.result, MIC_EIO);
    mic_writer_stats(f.w, &st);
    assert_int_equal(st.alive, 0);
    top_init(&c, 100, &sem);
    assert_int_equal(mic_writer_submit(f.w, &c.op), MIC_ENOTREADY);
    fx_close(&f);
    sem_destroy(&sem);
}

/* Visible before durable (DESIGN section 1): a commit is in LMDB, so
 * every read transaction begun after it sees it, while the journal still
 * writes and fdatasyncs its record; its op is answered only once that
 * sync returned.  The journal's on_written hook holds the first flush
 * between its write and its fdatasync. */
static pthread_mutex_t held_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t held_cond = PTHREAD_COND_INITIALIZER;
static int held_armed, held_entered, held_open;

static void held_written(int file, off_t off, size_t len)
{
    (void)file;
    (void)off;
    (void)len;
    pthread_mutex_lock(&held_lock);
    if (held_armed) {
        held_armed = 0;
        held_entered = 1;
        pthread_cond_broadcast(&held_cond);
        while (!held_open)
            pthread_cond_wait(&held_cond, &held_lock);
    }
    pthread_mutex_unlock(&held_lock);
}

static void visible_before_durable(void **state)
{
    static const struct mic_jnl_hooks hooks = {.on_written = held_written};
    const char *argv[] = {"micd"};
    char err[256];
    struct fx f;
    struct top a;
    struct mic_rec r;
    mic_txn *t;
    uint64_t last;
    sem_t sem;

    (void)state;
    snprintf(f.dir, sizeof f.dir, "/tmp/mic-writer-XXXXXX");
    assert_non_null(mkdtemp(f.dir));
    assert_int_equal(mic_config_load(&f.cfg, 1, (char **)argv, err, sizeof err), 0);
    /* A journaled store (nosync 0): commits are durable only once synced. */
    assert_int_equal(mic_store_open(&f.store, f.dir, f.cfg.map_size, f.cfg.map_max, 0), MIC_OK);
    assert_int_equal(mic_writer_start(&f.w, f.store, &f.cfg, NULL), MIC_OK);
    sem_init(&sem, 0, 0);
    held_armed = 1;
    held_entered = held_open = 0;
    mic_jnl_set_hooks(&hooks);
    top_init(&a, 10, &sem);
    assert_int_equal(mic_writer_submit(f.w, &a.op), MIC_OK);
    pthread_mutex_lock(&held_lock);
    while (!held_entered) /* committed; its record written, not yet synced */
        pthread_cond_wait(&held_cond, &held_lock);
    pthread_mutex_unlock(&held_lock);
    assert_int_equal(mic_txn_begin(f.store, 0, &t), MIC_OK);
    assert_int_equal(mic_store_last_seq(t, &last), MIC_OK);
    assert_int_equal(last, 1);
    assert_int_equal(mic_store_log_get(t, 1, &r), MIC_OK); /* a reader sees it */
    assert_int_equal(r.json_len, 10);
    mic_txn_abort(t);
    assert_int_equal(sem_trywait(&sem), -1); /* its writer has no answer */
    assert_int_equal(a.applied, 1);
    pthread_mutex_lock(&held_lock);
    held_open = 1;
    pthread_cond_broadcast(&held_cond);
    pthread_mutex_unlock(&held_lock);
    sem_wait(&sem);
    assert_int_equal(a.op.result, MIC_OK); /* answered after the fdatasync */
    mic_jnl_set_hooks(NULL);
    sem_destroy(&sem);
    fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(failed_sync_stops),
        cmocka_unit_test(group_commit),
        cmocka_unit_test(finished_once_per_batch),
        cmocka_unit_test(commit_waits_for_the_sync_stage),
        cmocka_unit_test(sync_inline_when_idle),
        cmocka_unit_test(queue_bound),
        cmocka_unit_test(map_full_grows_then_refuses),
        cmocka_unit_test(mixed_batch_at_limit),
        cmocka_unit_test(failed_write_aborts_batch),
        cmocka_unit_test(stop_drains_queue),
        cmocka_unit_test(visible_before_durable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
