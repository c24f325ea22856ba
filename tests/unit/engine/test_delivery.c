/* test_delivery.c - the delivery engine (server/engine/delivery.[ch]):
 * its verbs called directly (the tests after the seeds: grant, ack,
 * extend, nack, the DLQ's requeue and skip, and the words of their
 * statuses), then a model-based randomized test of ordered consumer
 * groups through the claim requests.
 *
 * Each seeded test runs one fixed seed (1 to 32): a few thousand random steps
 * against ONE ordered group (max_attempts 3, lease 10 s, backoff up to 2 s,
 * dlq_policy release or hold) over six aggregates (three versioned, three
 * not) and events without an aggregate, through the real store, writer and
 * group registry in-process, with an injected clock (as tests/unit/engine/test_claim.c).
 * Steps: publish (version gaps, gap fills, late created_at, priorities),
 * claim, ack, nack, stale and reused tokens, lease expiry, small clock
 * moves, requeue all, DLQ skip, gap skip, restart of store + writer.
 *
 * The test keeps a reference model in plain C arrays: the state, attempts,
 * retry time, lease and last token of every delivery, and per aggregate its
 * versions and the one event handed out (DESIGN sections 2, 3 and 12).
 * From it each claim's answer is predicted exactly: the claimable set is the
 * events without aggregate that are ready, plus each aggregate's head when
 * ready (the event handed out and not yet released, else the first
 * non-terminal event in aggregate order, unless it sits past a missing
 * version; a dead letter requeued under dlq_policy release that becomes
 * the head again counts as handed out: stick_heads), taken by (priority
 * desc, seq asc).  A nack ends its lease: that token answers lease_lost
 * from then on, while an expired lease's token works until a new claim.  Before the exact comparison
 * every grant is checked against the invariants one by one, so a failure
 * names the rule it breaks:
 *   1. never two deliveries of one aggregate under lease at once;
 *   2. acks go in aggregate order (versions never pass a missing one);
 *   3. nothing is claimed past a version gap;
 *   4. under dlq_policy hold a dead-lettered head blocks its aggregate, a
 *      requeued head is the next one claimed, a skip releases the next; under
 *      release a dead letter blocks nothing;
 *   5. at the end, after filling every gap and draining as good workers,
 *      every event is dispatched or skipped.
 * After every step the deliveries it touched are read back from the store
 * (state, attempts, retry time, lease, token), and all of them every 50
 * steps, after each restart and at the end.
 *
 * Two directed tests follow the seeds: they pin down the one divergence the
 * seeds found (seed 6, step 1244: a held head requeued from the DLQ loses
 * its place to an older late event when anything is published to its
 * aggregate before the next claim).
 *
 * Runs are reproducible: the test's choices come from a xorshift generator
 * seeded per seed, and the group's backoff starts at 0 ms so that the
 * server's jitter never decides anything (see MODEL_JITTER in run_seed).
 *
 * The clock moves only when the test moves it; after a move the test either
 * runs an inert op so that the writer's batch fires due deadlines, or (when
 * the group's backoff is 0, so the outcome is known) lets the next real op's
 * batch fire them first.
 *
 * Runs do not depend on thread timing either: the writer runs a batch only
 * for an op of the test, which submits one at a time and waits for its
 * done(), so nothing changes the store while the test reads it, predicts or
 * moves the clock.  The writer's own wake-ups are what could break that: it
 * sleeps until the next stored deadline and would fire it in a batch of its
 * own as soon as it saw the moved clock (after a deferred move, before the
 * model fires it at the next op; seed 8 once failed so at step 1050 on a
 * loaded machine).  So the test hands the writer a next_due hook that runs
 * the registry's but reports no deadline (no_wakeup); nothing else wakes it
 * here (claims never wait, the group is created on an empty store so there
 * is no backfill, and retention and dedupe expiries lie days past the
 * clock's end), and every reconcile checks that each commit held one op
 * (check_quiet).  A failure prints the seed, the step, the last operations
 * and the model's open deliveries. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/buf.h"
#include "engine/claim.h"
#include "core/clock.h"
#include "core/config.h"
#include "engine/delivery.h"
#include "core/err.h"
#include "engine/group.h"
#include "engine/views.h"
#include "engine/publish.h"
#include "engine/schedule.h"
#include "store/store.h"
#include "store/log.h"
#include "store/dlv.h"
#include "procfx.h"
#include "engine/writer.h"
#include "storedir.h"

#include <jansson.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define T0 1790000000000000LL
#define SEC 1000000LL
#define MS 1000LL

#define STEPS 4000
#define NAGG 6          /* aggregates 0..2 carry versions, 3..5 do not */
#define NVERSIONED 3
#define MAXEV 4096
#define MAXV 1024
#define MAXSTALE 1024
#define LEASE_TTL_S 10
#define MAX_ATTEMPTS 3
#define BACKOFF_MAX_MS 2000
#define TOKLEN 32       /* 128 bits, in hex */
#define LOGN 400
#define GROUP "g"

static _Atomic int64_t fake_now;

static int64_t fake_clock(void)
{
    return atomic_load(&fake_now);
}

static int64_t now(void)
{
    return atomic_load(&fake_now);
}

/* ---- The model ---- */

struct mev {
    uint64_t seq;
    char id[32];
    int agg;                /* -1: no aggregate */
    uint64_t version;       /* versioned aggregates */
    int64_t created;        /* unversioned aggregates: created_at, µs */
    int prio;
    int state;              /* MIC_DLV_* */
    uint32_t attempts;
    int64_t not_before;     /* PENDING: 0 = ready */
    int64_t lease_exp;      /* PROCESSING */
    int nb_unknown;         /* the server drew a backoff: read it back */
    int64_t nb_from, nb_cap;
    char token[TOKLEN + 1]; /* the last lease granted, "" if none */
    int nacked;             /* that lease ended by a nack: its token is dead */
    int handed;             /* claimed at least once (kept across a requeue) */
    int ever_terminal;      /* was dispatched, dead-lettered or skipped */
    int requeued;           /* came back from the DLQ at least once */
    int dirty;
    int pub_step, out_step; /* published at; handed out (as head) at */
};

struct magg {
    int versioned;
    char type[4], id[16];
    int nev;
    uint64_t baseline, maxv;
    uint8_t vstate[MAXV];   /* 0 never seen, 1 stored, 2 gap-skipped */
    int vidx[MAXV];
    int64_t last_created;
    int head_out;           /* event handed out and not yet released, or -1 */
    uint64_t last_acked;    /* versioned: last version acked in order */
};

struct stale {
    uint64_t seq;
    char tok[TOKLEN + 1];
};

struct stats {
    int steps, published, late, fills, gaps_made, refused;
    int claims, granted, acks, nacks, token_tests, lost;
    int expiries, dead, requeued, dlq_skips, gap_skips, released, restarts;
    /* how often the interesting situations came up */
    int c_parked, c_held, c_retry, c_late_behind, c_late_first, c_expired_ack;
    int c_hold_requeue, c_requeue_behind, c_requeued_late;
};

struct fx {
    mic_sched *sched;
    char dir[64];
    struct mic_config cfg;
    mic_store *store;
    mic_groups *groups;
    mic_writer *w;
    sem_t sem;
    json_t *j;              /* the answer being looked at (freed on failure) */
    /* run */
    unsigned seed;
    int hold, init_ms;
    uint64_t rng;
    int step;
    struct stats st;
    /* model */
    struct mev *ev;
    int nev;
    int by_seq[MAXEV + 1];
    struct magg agg[NAGG];
    struct stale stale[MAXSTALE];
    int nstale;
    int dirtyl[MAXEV];
    int ndirty;
    /* diagnostics */
    char what[200];
    char log[LOGN][200];
    int logstep[LOGN], nlog;
    int finished;
    int directed;           /* a directed test: no model to print */
};

static const char *sname(int s)
{
    switch (s) {
    case MIC_DLV_PENDING: return "pending";
    case MIC_DLV_PROCESSING: return "processing";
    case MIC_DLV_DISPATCHED: return "dispatched";
    case MIC_DLV_DLQ: return "dlq";
    case MIC_DLV_SKIPPED: return "skipped";
    }
    return "?";
}

static void failf(struct fx *f, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void failf(struct fx *f, int line, const char *fmt, ...)
{
    char m[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    if (f->directed)
        fail_msg("[%s] (test_model.c:%d): %s", f->what, line, m);
    fail_msg("seed %u step %d [%s] (test_model.c:%d): %s", f->seed, f->step, f->what, line, m);
}

#define CHECK(f, c, ...)                          \
    do {                                          \
        if (!(c))                                 \
            failf((f), __LINE__, __VA_ARGS__);    \
    } while (0)

/* Name the operation under way (and keep the last few for a failure). */
static void note(struct fx *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void note(struct fx *f, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(f->what, sizeof f->what, fmt, ap);
    va_end(ap);
    snprintf(f->log[f->nlog % LOGN], sizeof f->log[0], "%s", f->what);
    f->logstep[f->nlog % LOGN] = f->step;
    f->nlog++;
}

static uint64_t xs(struct fx *f)
{
    uint64_t x = f->rng;

    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return f->rng = x;
}

static int rnd(struct fx *f, int n)
{
    return (int)(xs(f) % (uint64_t)n);
}

static void dirty(struct fx *f, int i)
{
    if (!f->ev[i].dirty) {
        f->ev[i].dirty = 1;
        f->dirtyl[f->ndirty++] = i;
    }
}

static int nonterminal(const struct mev *e)
{
    return e->state == MIC_DLV_PENDING || e->state == MIC_DLV_PROCESSING;
}

/* Aggregate order: by version, else by (created_at, seq). */
static int key_less(const struct mev *a, const struct mev *b)
{
    uint64_t ka = a->version ? a->version : (uint64_t)a->created;
    uint64_t kb = b->version ? b->version : (uint64_t)b->created;

    return ka < kb || (ka == kb && a->seq < b->seq);
}

/* Highest version such that every version from the baseline to it is
 * stored or skipped. */
static uint64_t contig(const struct magg *A)
{
    uint64_t v = A->baseline;

    while (v + 1 < MAXV && A->vstate[v + 1])
        v++;
    return v;
}

static int missing(const struct magg *A, uint64_t *out)
{
    int n = 0;

    for (uint64_t v = A->baseline + 1; A->maxv && v < A->maxv; v++)
        if (!A->vstate[v])
            out[n++] = v;
    return n;
}

static int agg_of(struct fx *f, uint64_t seq)
{
    return seq && seq <= MAXEV && f->by_seq[seq] >= 0 ? f->ev[f->by_seq[seq]].agg : -2;
}

/* The first non-terminal event of aggregate 'a' in aggregate order, or -1. */
static int first_open(struct fx *f, int a)
{
    int m = -1;

    for (int i = 0; i < f->nev; i++) {
        struct mev *e = &f->ev[i];
        if (e->agg != a || !nonterminal(e))
            continue;
        if (m < 0 || key_less(e, &f->ev[m]))
            m = i;
    }
    return m;
}

/* The event of aggregate 'a' that may be handed out next (ignoring its
 * retry time), or -1 when none may: the one handed out and not released,
 * else the first open one unless it sits past a missing version. */
static int head_of(struct fx *f, int a)
{
    struct magg *A = &f->agg[a];
    int m;

    if (A->head_out >= 0)
        return A->head_out;
    if ((m = first_open(f, a)) < 0)
        return -1;
    if (A->versioned && f->ev[m].version > contig(A))
        return -1;
    return m;
}

static int parked(struct fx *f, int a)
{
    struct magg *A = &f->agg[a];
    int m;

    if (!A->versioned || A->head_out >= 0 || (m = first_open(f, a)) < 0)
        return 0;
    return f->ev[m].version > contig(A);
}

static int ready(struct fx *f, int i)
{
    struct mev *e = &f->ev[i];

    if (e->state != MIC_DLV_PENDING)
        return 0;
    CHECK(f, !e->nb_unknown, "model: seq %llu has an unknown retry time at a claim",
          (unsigned long long)e->seq);
    return e->not_before == 0 || e->not_before <= now();
}

/* What a claim of 'max' must hand out, in order; returns how many. */
static int expect_claim(struct fx *f, int max, int *out)
{
    static int cand[MAXEV];
    int n = 0, k = 0;

    for (int i = 0; i < f->nev; i++)
        if (f->ev[i].agg < 0 && ready(f, i))
            cand[n++] = i;
    for (int a = 0; a < NAGG; a++) {
        int h = head_of(f, a);
        if (h >= 0 && ready(f, h))
            cand[n++] = h;
    }
    while (k < max && k < n) {
        int b = k;
        for (int i = k + 1; i < n; i++) {
            struct mev *x = &f->ev[cand[i]], *y = &f->ev[cand[b]];
            if (x->prio > y->prio || (x->prio == y->prio && x->seq < y->seq))
                b = i;
        }
        int t = cand[k];
        cand[k] = cand[b];
        cand[b] = t;
        out[k] = cand[k];
        k++;
    }
    return k;
}

static void stale_push(struct fx *f, uint64_t seq, const char *tok)
{
    struct stale *s = &f->stale[f->nstale++ % MAXSTALE];

    s->seq = seq;
    snprintf(s->tok, sizeof s->tok, "%s", tok);
}

static int64_t backoff_cap_us(struct fx *f, uint32_t attempts)
{
    int64_t cap = f->init_ms;

    for (uint32_t a = 1; a < attempts && cap < BACKOFF_MAX_MS; a++)
        cap *= 2;
    if (cap > BACKOFF_MAX_MS)
        cap = BACKOFF_MAX_MS;
    return cap * MS;
}

/* Delivery 'i' failed an attempt (nack or lease expiry). 'retry_us' < 0:
 * the group's backoff. */
static void fail_attempt(struct fx *f, int i, int64_t retry_us)
{
    struct mev *e = &f->ev[i];
    struct magg *A = e->agg >= 0 ? &f->agg[e->agg] : NULL;

    CHECK(f, !A || A->head_out == i, "model: failing seq %llu that is not its aggregate's head",
          (unsigned long long)e->seq);
    e->lease_exp = 0;
    e->nb_unknown = 0;
    if (e->attempts >= MAX_ATTEMPTS) {
        e->state = MIC_DLV_DLQ;
        e->not_before = 0;
        e->ever_terminal = 1;
        f->st.dead++;
        if (A && !f->hold)
            A->head_out = -1; /* release: the next event follows */
    } else {
        e->state = MIC_DLV_PENDING;
        if (retry_us >= 0) {
            e->not_before = retry_us ? now() + retry_us : 0;
        } else if (f->init_ms == 0) {
            e->not_before = 0;
        } else {
            e->nb_unknown = 1;
            e->nb_from = now();
            e->nb_cap = backoff_cap_us(f, e->attempts);
        }
    }
    dirty(f, i);
}

/* The batch of every op first fires the deadlines that came due. */
/* The engine picks an aggregate's head whenever its queue changes (an
 * event joins or leaves it); a head it picks that was handed out before
 * (a dead letter requeued under dlq_policy release) keeps its place from
 * then on, even if an older event arrives late (DESIGN section 3,
 * delivery.c "advance"): it counts as handed out already. */
static void stick_heads(struct fx *f)
{
    for (int a = 0; a < NAGG; a++) {
        int h = f->agg[a].head_out < 0 ? head_of(f, a) : -1;
        if (h >= 0 && f->ev[h].handed && f->ev[h].state == MIC_DLV_PENDING)
            f->agg[a].head_out = h;
    }
}

static void apply_due(struct fx *f)
{
    int64_t t = now();

    for (int i = 0; i < f->nev; i++) {
        struct mev *e = &f->ev[i];
        if (e->state == MIC_DLV_PROCESSING && e->lease_exp <= t) {
            f->st.expiries++;
            fail_attempt(f, i, -1);
        } else if (e->state == MIC_DLV_PENDING && e->not_before && e->not_before <= t) {
            e->not_before = 0;
            dirty(f, i);
        }
    }
    stick_heads(f);
}

/* Invariant 2, checked at each ack of event 'i'. */
static void check_ack_order(struct fx *f, int i)
{
    struct mev *e = &f->ev[i];
    struct magg *A;

    if (e->agg < 0)
        return;
    A = &f->agg[e->agg];
    if (A->versioned) {
        for (uint64_t u = A->baseline; u < e->version; u++) {
            CHECK(f, A->vstate[u] != 0,
                  "inv2: aggregate %s/%s acked version %llu (seq %llu) past missing version %llu",
                  A->type, A->id, (unsigned long long)e->version, (unsigned long long)e->seq,
                  (unsigned long long)u);
            if (A->vstate[u] == 1) {
                struct mev *x = &f->ev[A->vidx[u]];
                CHECK(f, x->ever_terminal,
                      "inv2: aggregate %s/%s acked version %llu (seq %llu) while version %llu "
                      "(seq %llu, %s) was never dispatched, dead-lettered or skipped",
                      A->type, A->id, (unsigned long long)e->version,
                      (unsigned long long)e->seq, (unsigned long long)u,
                      (unsigned long long)x->seq, sname(x->state));
            }
        }
        /* A dead letter requeued under release goes back behind the head
         * out now, so it may be acked after later versions. */
        if (f->hold || !e->requeued) {
            CHECK(f, e->version > A->last_acked,
                  "inv2: aggregate %s/%s acked version %llu (seq %llu) after version %llu",
                  A->type, A->id, (unsigned long long)e->version, (unsigned long long)e->seq,
                  (unsigned long long)A->last_acked);
            A->last_acked = e->version;
        }
    } else {
        for (int k = 0; k < f->nev; k++) {
            struct mev *x = &f->ev[k];
            if (k == i || x->agg != e->agg || !key_less(x, e) || x->pub_step >= e->out_step)
                continue;
            CHECK(f, x->ever_terminal,
                  "inv2: aggregate %s/%s acked seq %llu while seq %llu (%s), older and already "
                  "queued when seq %llu was handed out, was never dispatched, dead-lettered or "
                  "skipped", A->type, A->id, (unsigned long long)e->seq,
                  (unsigned long long)x->seq, sname(x->state), (unsigned long long)e->seq);
        }
    }
}

/* ---- Store, writer and registry ---- */

/* The schedule's next_due hook (mic_sched_hooks), called by no_wakeup. */
static int64_t (*sched_next_due)(struct mic_sched *s, struct mic_wctx *w);

/* The writer's next_due hook here: the registry's seek still runs in every
 * batch, but the writer is told of no deadline ahead, so it never runs a
 * batch of its own to fire one.  Left to itself it would: it turns the
 * distance to the next deadline on the injected clock into a monotonic
 * sleep and reads the injected clock again whenever it decides how long to
 * sleep (after each batch, at each wake-up), so a clock move made while it
 * was still finishing the last op's batch, or before it woke up, had it
 * fire the deadline at once in a batch of its own, which committed before
 * or after the test's next read depending on thread timing (seed 8, step
 * 1050: a full reconcile right after a deferred "clock +11 s" read a lease
 * expired that the model, firing deadlines at the next op, still held). */
static int64_t no_wakeup(struct mic_sched *s, struct mic_wctx *w)
{
    (void)sched_next_due(s, w);
    return 0;
}

static void done(mic_op *op)
{
    sem_post(op->owner);
}

static void run(struct fx *f, mic_op *op)
{
    op->done = done;
    op->owner = &f->sem;
    assert_int_equal(mic_writer_submit(f->w, op), MIC_OK);
    sem_wait(&f->sem);
    assert_int_equal(op->result, MIC_OK);
}

static void open_all(struct fx *f)
{
    struct mic_writer_hooks h;

    assert_int_equal(mic_store_open(&f->store, f->dir, f->cfg.map_size, f->cfg.map_max, 1),
                     MIC_OK);
    assert_int_equal(mic_groups_new(&f->groups, f->store), MIC_OK);
    memset(&h, 0, sizeof h);
    assert_int_equal(mic_sched_new(&f->sched, f->groups), MIC_OK);
    mic_sched_hooks(f->sched, &h);
    sched_next_due = h.next_due;
    h.next_due = no_wakeup;
    assert_int_equal(mic_writer_start(&f->w, f->store, &f->cfg, &h), MIC_OK);
}

/* Every commit of this writer held exactly one of the test's ops (they go
 * one at a time): the writer ran no batch of its own. */
static void check_quiet(struct fx *f)
{
    struct mic_writer_stats st;

    mic_writer_stats(f->w, &st);
    CHECK(f, st.commits == st.ops,
          "test: the writer committed %llu batches for %llu ops: it ran batches of its own",
          (unsigned long long)st.commits, (unsigned long long)st.ops);
}

static void close_all(struct fx *f)
{
    if (f->w) {
        mic_writer_stop(f->w);
        mic_writer_free(f->w);
    }
    mic_sched_free(f->sched);
    f->sched = NULL;
    if (f->groups)
        mic_groups_free(f->groups);
    if (f->store)
        mic_store_close(f->store);
    f->w = NULL;
    f->groups = NULL;
    f->store = NULL;
}

static void drop(struct fx *f)
{
    json_decref(f->j);
    f->j = NULL;
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    const char *argv[] = {"micd"};
    char err[128];

    if (!f || !(f->ev = calloc(MAXEV, sizeof *f->ev)))
        return -1;
    atomic_store(&fake_now, T0);
    mic_clock_set(fake_clock);
    snprintf(f->dir, sizeof f->dir, "/tmp/mic-model-XXXXXX");
    if (!mkdtemp(f->dir) || mic_config_load(&f->cfg, 1, (char **)argv, err, sizeof err))
        return -1;
    sem_init(&f->sem, 0, 0);
    open_all(f);
    *state = f;
    return 0;
}

static void dump_model(struct fx *f)
{
    fprintf(stderr, "  last operations:\n");
    for (int k = f->nlog > LOGN ? f->nlog - LOGN : 0; k < f->nlog; k++)
        fprintf(stderr, "    step %d: %s\n", f->logstep[k % LOGN], f->log[k % LOGN]);
    fprintf(stderr, "  model at the failure (open and dead-lettered deliveries):\n");
    for (int a = -1; a < NAGG; a++) {
        struct magg *A = a >= 0 ? &f->agg[a] : NULL;
        if (A && A->versioned)
            fprintf(stderr, "    aggregate %s/%s: versions %llu..%llu, contiguous to %llu, "
                            "head out seq %lld\n", A->type, A->id,
                    (unsigned long long)A->baseline, (unsigned long long)A->maxv,
                    (unsigned long long)contig(A),
                    A->head_out >= 0 ? (long long)f->ev[A->head_out].seq : -1LL);
        else if (A)
            fprintf(stderr, "    aggregate %s/%s: head out seq %lld\n", A->type, A->id,
                    A->head_out >= 0 ? (long long)f->ev[A->head_out].seq : -1LL);
        else
            fprintf(stderr, "    no aggregate:\n");
        for (int i = 0; i < f->nev; i++) {
            struct mev *e = &f->ev[i];
            if (e->agg != a || !(nonterminal(e) || e->state == MIC_DLV_DLQ))
                continue;
            char k[48] = "";
            if (e->version)
                snprintf(k, sizeof k, " v%llu", (unsigned long long)e->version);
            else if (a >= 0)
                snprintf(k, sizeof k, " created+%lldms",
                         (long long)((e->created - (T0 - 86400 * SEC)) / MS));
            fprintf(stderr, "      seq %llu %s%s prio %d %s attempts %u not_before %+lldms%s%s\n",
                    (unsigned long long)e->seq, e->id, k, e->prio,
                    sname(e->state), e->attempts,
                    e->not_before ? (long long)((e->not_before - now()) / MS) : 0LL,
                    e->requeued ? " requeued" : "", e->nb_unknown ? " (retry unknown)" : "");
        }
    }
}

static int teardown(void **state)
{
    struct fx *f = *state;
    if (!f->finished && !f->directed) {
        fprintf(stderr, "FAILED: seed %u (dlq_policy %s, backoff initial_ms %d) at step %d\n",
                f->seed, f->hold ? "hold" : "release", f->init_ms, f->step);
        dump_model(f);
    }
    drop(f);
    close_all(f);
    mic_clock_set(NULL);
    sem_destroy(&f->sem);
    storedir_rm(f->dir);
    free(f->ev);
    free(f);
    return 0;
}

static void make_group(struct fx *f, const char *body)
{
    struct mic_error e;
    struct mic_buf b;
    mic_group_op *o;
    int created;

    assert_int_equal(mic_group_put_parse(GROUP, body, strlen(body), &f->cfg, &o, &e), MIC_OK);
    run(f, mic_group_op_base(o));
    mic_buf_init(&b);
    assert_int_equal(mic_group_op_result(o, &b, &created, &e), MIC_OK);
    mic_buf_fini(&b);
    mic_group_op_free(o);
}

/* Run a claim-family request; the parsed answer is left in f->j. */
static json_t *call(struct fx *f, int kind, const char *body)
{
    struct mic_error e;
    struct mic_buf b;
    mic_claim *c;

    drop(f);
    assert_int_equal(mic_claim_parse(kind, GROUP, body, strlen(body), &f->cfg, &c, &e), MIC_OK);
    run(f, mic_claim_op(c));
    mic_buf_init(&b);
    assert_int_equal(mic_claim_result(c, f->store, &b, &e), MIC_OK);
    f->j = json_loadb(b.p, b.len, 0, NULL);
    assert_non_null(f->j);
    mic_buf_fini(&b);
    mic_claim_free(c);
    return f->j;
}

/* Read back deliveries (all of them, or those the last step touched) and
 * compare with the model. */
static void reconcile(struct fx *f, int all)
{
    int held[NAGG] = {0};
    mic_txn *t;
    uint32_t gid;
    int n = all ? f->nev : f->ndirty;

    check_quiet(f);
    assert_int_equal(mic_txn_begin(f->store, 0, &t), MIC_OK);
    if (mic_group_gid(t, GROUP, &gid) != MIC_OK) {
        mic_txn_abort(t);
        fail_msg("no group");
    }
    for (int k = 0; k < n; k++) {
        int i = all ? k : f->dirtyl[k];
        struct mev *e = &f->ev[i];
        struct mic_dlv d;
        char hexd[2 * MIC_TOKEN_LEN + 1];
        int rc = mic_delivery_get(t, gid, e->seq, &d);

        if (rc != MIC_OK)
            mic_txn_abort(t);
        CHECK(f, rc == MIC_OK, "seq %llu: no delivery (%d)", (unsigned long long)e->seq, rc);
        if (d.state != e->state || d.attempts != e->attempts)
            mic_txn_abort(t);
        CHECK(f, d.state == e->state, "seq %llu (%s): state %s, the model says %s",
              (unsigned long long)e->seq, e->id, sname(d.state), sname(e->state));
        CHECK(f, d.attempts == e->attempts, "seq %llu: %u attempts, the model says %u",
              (unsigned long long)e->seq, d.attempts, e->attempts);
        if (e->state == MIC_DLV_PENDING && e->nb_unknown) {
            int ok = d.not_before == 0 ||
                     (d.not_before > e->nb_from && d.not_before <= e->nb_from + e->nb_cap);
            if (!ok)
                mic_txn_abort(t);
            CHECK(f, ok, "seq %llu: retry at %+lld ms, outside the backoff (0, %lld ms]",
                  (unsigned long long)e->seq, (long long)((d.not_before - e->nb_from) / MS),
                  (long long)(e->nb_cap / MS));
            e->not_before = d.not_before;
            e->nb_unknown = 0;
        } else if (e->state == MIC_DLV_PENDING && d.not_before != e->not_before) {
            mic_txn_abort(t);
            CHECK(f, 0, "seq %llu: not_before %+lld ms, the model says %+lld ms",
                  (unsigned long long)e->seq,
                  d.not_before ? (long long)((d.not_before - now()) / MS) : 0LL,
                  e->not_before ? (long long)((e->not_before - now()) / MS) : 0LL);
        }
        if (e->state == MIC_DLV_PROCESSING) {
            static const char hx[] = "0123456789abcdef";
            for (int b = 0; b < MIC_TOKEN_LEN; b++) {
                hexd[2 * b] = hx[d.token[b] >> 4];
                hexd[2 * b + 1] = hx[d.token[b] & 15];
            }
            hexd[2 * MIC_TOKEN_LEN] = 0;
            if (d.lease_expires != e->lease_exp || strcmp(hexd, e->token))
                mic_txn_abort(t);
            CHECK(f, d.lease_expires == e->lease_exp, "seq %llu: lease ends %+lld ms, model %+lld ms",
                  (unsigned long long)e->seq, (long long)((d.lease_expires - now()) / MS),
                  (long long)((e->lease_exp - now()) / MS));
            CHECK(f, !strcmp(hexd, e->token), "seq %llu: the stored token is not the last one granted",
                  (unsigned long long)e->seq);
            if (e->agg >= 0)
                held[e->agg]++;
        }
        e->dirty = 0;
    }
    mic_txn_abort(t);
    if (!all)
        f->ndirty = 0;
    for (int a = 0; all && a < NAGG; a++)
        CHECK(f, held[a] <= 1, "inv1: %d deliveries of aggregate %s/%s under lease in the store",
              held[a], f->agg[a].type, f->agg[a].id);
}

/* Every op: the batch fires due deadlines first (model), then the op; the
 * deliveries touched are read back after.  Only the ops' batches fire
 * deadlines (no_wakeup). */
static void begin(struct fx *f)
{
    apply_due(f);
}

static void end(struct fx *f)
{
    stick_heads(f);
    drop(f);
    reconcile(f, 0);
}

/* An op that changes nothing: its batch fires the deadlines. */
static void tick(struct fx *f)
{
    begin(f);
    call(f, MIC_ACK, "{\"deliveries\":[{\"seq\":999999,\"lease_token\":"
                     "\"0000000000000000000000000000000000000000\"}]}");
    CHECK(f, !strcmp(json_string_value(json_object_get(
                         json_array_get(json_object_get(f->j, "results"), 0), "status")),
                     "not_found"),
          "tick: an unknown seq did not answer not_found");
    end(f);
}

/* ---- Steps ---- */

/* Publish an event of aggregate 'a' (-1: none).  Returns its index. */
static int publish_event(struct fx *f, int a, uint64_t v, int64_t created, int prio)
{
    struct magg *A = a >= 0 ? &f->agg[a] : NULL;
    char body[512], ts[MIC_TIME_LEN + 1], id[32];
    struct mic_error e;
    struct mic_buf b;
    mic_publish *p;
    int dup, i = f->nev, n;
    json_t *j, *r;
    uint64_t seq;

    CHECK(f, f->nev < MAXEV, "test: too many events");
    snprintf(id, sizeof id, "m%u-%d", f->seed, f->nev);
    n = snprintf(body, sizeof body, "{\"event_id\":\"%s\",\"topic\":\"t\"", id);
    if (A) {
        n += snprintf(body + n, sizeof body - n, ",\"aggregate_type\":\"%s\",\"aggregate_id\":\"%s\"",
                      A->type, A->id);
        if (A->versioned) {
            n += snprintf(body + n, sizeof body - n, ",\"aggregate_version\":%llu",
                          (unsigned long long)v);
        } else {
            mic_time_format(created, ts);
            n += snprintf(body + n, sizeof body - n, ",\"created_at\":\"%s\"", ts);
        }
    }
    if (prio)
        n += snprintf(body + n, sizeof body - n, ",\"priority\":%d", prio);
    snprintf(body + n, sizeof body - n, ",\"payload\":{\"n\":%d}}", f->nev);
    begin(f);
    assert_int_equal(mic_publish_parse(body, strlen(body), &f->cfg, &p, &e), MIC_OK);
    run(f, mic_publish_op(p));
    mic_buf_init(&b);
    if (mic_publish_result(p, &b, &dup, &e) != MIC_OK) {
        mic_buf_fini(&b);
        mic_publish_free(p);
        CHECK(f, 0, "publish %s refused: %s %s", body, e.code, e.message);
    }
    j = json_loadb(b.p, b.len, 0, NULL);
    mic_buf_fini(&b);
    mic_publish_free(p);
    assert_non_null(j);
    r = json_array_get(json_object_get(j, "results"), 0);
    seq = (uint64_t)json_integer_value(json_object_get(r, "seq"));
    dup = json_is_true(json_object_get(r, "duplicate"));
    json_decref(j);
    CHECK(f, !dup && seq >= 1 && seq <= MAXEV && f->by_seq[seq] < 0,
          "publish %s: seq %llu duplicate %d", id, (unsigned long long)seq, dup);
    if (A && !A->versioned && created < A->last_created) {
        if (A->head_out >= 0 && created < f->ev[A->head_out].created)
            f->st.c_late_behind++;
        else if (A->head_out < 0 && first_open(f, a) >= 0 &&
                 created < f->ev[first_open(f, a)].created)
            f->st.c_late_first++;
        if (A->head_out >= 0 && f->ev[A->head_out].requeued && f->ev[A->head_out].attempts == 0)
            f->st.c_requeued_late++;
    }
    struct mev *ev = &f->ev[i];
    memset(ev, 0, sizeof *ev);
    ev->seq = seq;
    snprintf(ev->id, sizeof ev->id, "%s", id);
    ev->agg = a;
    ev->version = A && A->versioned ? v : 0;
    ev->created = A && !A->versioned ? created : 0;
    ev->prio = prio;
    ev->state = MIC_DLV_PENDING;
    ev->pub_step = f->step;
    f->by_seq[seq] = i;
    f->nev++;
    if (A) {
        A->nev++;
        if (A->versioned) {
            if (!A->maxv)
                A->baseline = v;
            if (v > A->maxv)
                A->maxv = v;
            A->vstate[v] = 1;
            A->vidx[v] = i;
        }
    }
    f->st.published++;
    dirty(f, i);
    end(f);
    return i;
}

/* A publish that the server must refuse with 'code' (nothing changes). */
static void publish_refused(struct fx *f, int a, uint64_t v, const char *code)
{
    struct magg *A = &f->agg[a];
    char body[256];
    struct mic_error e;
    struct mic_buf b;
    mic_publish *p;
    int dup, rc;

    snprintf(body, sizeof body, "{\"event_id\":\"x%u-%d\",\"topic\":\"t\",\"aggregate_type\":\"%s\","
                                "\"aggregate_id\":\"%s\",\"aggregate_version\":%llu}",
             f->seed, f->step, A->type, A->id, (unsigned long long)v);
    begin(f);
    assert_int_equal(mic_publish_parse(body, strlen(body), &f->cfg, &p, &e), MIC_OK);
    run(f, mic_publish_op(p));
    mic_buf_init(&b);
    rc = mic_publish_result(p, &b, &dup, &e);
    mic_buf_fini(&b);
    mic_publish_free(p);
    CHECK(f, rc == MIC_ECONFLICT && !strcmp(e.code, code), "publish of %s/%s v%llu: %d %s, expected %s",
          A->type, A->id, (unsigned long long)v, rc, rc ? e.code : "stored", code);
    f->st.refused++;
    end(f);
}

static void op_publish(struct fx *f)
{
    uint64_t miss[MAXV];
    int a = rnd(f, 100) < 15 ? -1 : rnd(f, NAGG);
    int prio = rnd(f, 100) < 30 ? 1 + rnd(f, 5) : 0;
    struct magg *A = a >= 0 ? &f->agg[a] : NULL;
    uint64_t v = 0;
    int64_t created = 0;

    if (A && A->versioned && A->maxv > MAXV - 8)
        A = NULL, a = -1; /* enough versions for one run */
    if (A && A->versioned) {
        int nm = missing(A, miss);
        if (!A->maxv) {
            v = 1 + (uint64_t)rnd(f, 3);
        } else if (nm && rnd(f, 4) == 0) {
            v = miss[rnd(f, nm)];
            f->st.fills++;
        } else if (rnd(f, 100) < 3) {
            /* A version skipped earlier can never arrive. */
            for (uint64_t u = A->baseline; u < A->maxv; u++)
                if (A->vstate[u] == 2) {
                    note(f, "publish %s/%s v%llu (skipped before)", A->type, A->id,
                         (unsigned long long)u);
                    publish_refused(f, a, u, "version_skipped");
                    return;
                }
            v = A->maxv + 1;
        } else {
            v = A->maxv + 1;
            if (rnd(f, 100) < 12) {
                v++; /* leaves a gap */
                f->st.gaps_made++;
            }
        }
        note(f, "publish %s/%s v%llu prio %d", A->type, A->id, (unsigned long long)v, prio);
    } else if (A) {
        if (A->nev && rnd(f, 100) < 15) {
            created = A->last_created - rnd(f, 500) * MS; /* arrives late */
            f->st.late++;
        } else {
            created = A->last_created + (1 + rnd(f, 1000)) * MS;
            A->last_created = created;
        }
        note(f, "publish %s/%s created+%lldms%s prio %d", A->type, A->id,
             (long long)((created - (T0 - 86400 * SEC)) / MS),
             created < A->last_created ? " (late)" : "", prio);
    } else {
        note(f, "publish (no aggregate) prio %d", prio);
    }
    publish_event(f, a, v, created, prio);
}

/* Count the blocked situations a claim meets. */
static void coverage_at_claim(struct fx *f)
{
    int parked_any = 0, held = 0, retry = 0;

    for (int a = 0; a < NAGG; a++) {
        struct magg *A = &f->agg[a];
        int open = 0;
        for (int i = 0; i < f->nev; i++)
            open += f->ev[i].agg == a && nonterminal(&f->ev[i]) && i != A->head_out;
        parked_any |= parked(f, a);
        if (A->head_out >= 0 && open) {
            struct mev *h = &f->ev[A->head_out];
            held |= h->state == MIC_DLV_DLQ;
            retry |= h->state == MIC_DLV_PENDING && h->not_before > now();
        }
    }
    f->st.c_parked += parked_any;
    f->st.c_held += held;
    f->st.c_retry += retry;
}

/* Claim up to 'max'; checks every grant; returns how many. */
static int op_claim(struct fx *f, int max)
{
    static int want_idx[MAXEV];
    char body[96];
    int nexp, n, worker = rnd(f, 4);

    note(f, "claim max %d worker w%d", max, worker);
    begin(f);
    nexp = expect_claim(f, max, want_idx);
    coverage_at_claim(f);
    snprintf(body, sizeof body, "{\"max\":%d,\"worker\":\"w%d\"}", max, worker);
    call(f, MIC_CLAIM, body);
    json_t *list = json_object_get(f->j, "deliveries");
    n = (int)json_array_size(list);
    f->st.claims++;
    f->st.granted += n;
    for (int k = 0; k < n; k++) {
        json_t *d = json_array_get(list, (size_t)k);
        uint64_t seq = (uint64_t)json_integer_value(json_object_get(d, "seq"));
        const char *tok = json_string_value(json_object_get(d, "lease_token"));
        int attempt = (int)json_integer_value(json_object_get(d, "attempt"));
        int i, a;
        struct mev *e;
        struct magg *A;

        CHECK(f, agg_of(f, seq) != -2, "claim: unknown seq %llu", (unsigned long long)seq);
        i = f->by_seq[seq];
        e = &f->ev[i];
        a = e->agg;
        A = a >= 0 ? &f->agg[a] : NULL;
        CHECK(f, tok && strlen(tok) == TOKLEN, "claim: bad token");
        CHECK(f, e->state == MIC_DLV_PENDING, "claim handed out seq %llu, which is %s",
              (unsigned long long)seq, sname(e->state));
        CHECK(f, ready(f, i), "claim handed out seq %llu %lld ms before its retry time",
              (unsigned long long)seq, (long long)((e->not_before - now()) / MS));
        if (A) {
            for (int x = 0; x < f->nev; x++)
                CHECK(f, x == i || f->ev[x].agg != a || f->ev[x].state != MIC_DLV_PROCESSING,
                      "inv1: claim handed out seq %llu of aggregate %s/%s while seq %llu of it "
                      "is under lease", (unsigned long long)seq, A->type, A->id,
                      (unsigned long long)f->ev[x].seq);
            if (A->versioned)
                CHECK(f, e->version <= contig(A),
                      "inv3: claim handed out %s/%s v%llu (seq %llu) past missing version %llu",
                      A->type, A->id, (unsigned long long)e->version, (unsigned long long)seq,
                      (unsigned long long)contig(A) + 1);
            for (int x = 0; f->hold && x < f->nev; x++)
                CHECK(f, f->ev[x].agg != a || f->ev[x].state != MIC_DLV_DLQ,
                      "inv4: claim handed out seq %llu of %s/%s while its head seq %llu is "
                      "dead-lettered (dlq_policy hold)", (unsigned long long)seq, A->type, A->id,
                      (unsigned long long)f->ev[x].seq);
            if (A->head_out >= 0) {
                struct mev *h = &f->ev[A->head_out];
                CHECK(f, A->head_out == i,
                      "%s: claim handed out seq %llu of %s/%s while seq %llu (%s, attempts %u%s) "
                      "was handed out before and not released",
                      h->requeued && h->attempts == 0 ? "inv4" : "order", (unsigned long long)seq,
                      A->type, A->id, (unsigned long long)h->seq, sname(h->state), h->attempts,
                      h->requeued && h->attempts == 0 ? ", requeued from the DLQ" : "");
            } else {
                int m = first_open(f, a);
                CHECK(f, m == i, "order: claim handed out seq %llu of %s/%s, but seq %llu sorts "
                                 "before it and is %s", (unsigned long long)seq, A->type, A->id,
                      (unsigned long long)f->ev[m].seq, sname(f->ev[m].state));
            }
        }
        CHECK(f, attempt == (int)e->attempts + 1, "claim: seq %llu attempt %d, model %u",
              (unsigned long long)seq, attempt, e->attempts + 1);
        /* Granted: update the model before the next grant is checked. */
        if (e->token[0])
            stale_push(f, seq, e->token);
        snprintf(e->token, sizeof e->token, "%s", tok);
        e->nacked = 0;
        e->handed = 1;
        e->state = MIC_DLV_PROCESSING;
        e->attempts++;
        e->not_before = 0;
        e->lease_exp = now() + LEASE_TTL_S * SEC;
        if (A && A->head_out < 0) {
            A->head_out = i;
            e->out_step = f->step;
        }
        dirty(f, i);
    }
    if (n != nexp) {
        char want[512] = "", got[512] = "";
        int wl = 0, gl = 0;
        for (int k = 0; k < nexp && wl < 480; k++)
            wl += snprintf(want + wl, sizeof want - wl, " %llu", (unsigned long long)f->ev[want_idx[k]].seq);
        for (int k = 0; k < n && gl < 480; k++)
            gl += snprintf(got + gl, sizeof got - gl, " %lld",
                           (long long)json_integer_value(json_object_get(json_array_get(list, (size_t)k), "seq")));
        CHECK(f, 0, "claim of %d handed out [%s ] but the claimable heads by (priority, seq) are [%s ]",
              max, got, want);
    }
    for (int k = 0; k < n; k++) {
        uint64_t seq = (uint64_t)json_integer_value(json_object_get(json_array_get(list, (size_t)k), "seq"));
        CHECK(f, f->ev[want_idx[k]].seq == seq,
              "claim of %d: grant %d is seq %llu, expected seq %llu (priority desc, seq asc over "
              "the claimable heads)", max, k, (unsigned long long)seq,
              (unsigned long long)f->ev[want_idx[k]].seq);
    }
    end(f);
    return n;
}

/* The answer an ack or nack of delivery 'i' with 'tok' must get. */
static const char *expect_settle(struct fx *f, int kind, int i, const char *tok)
{
    struct mev *e = &f->ev[i];
    int latest = e->token[0] && !strcmp(tok, e->token);

    if (latest && e->nacked)
        return "lease_lost"; /* a nack ended that lease */
    if (kind == MIC_ACK && e->state == MIC_DLV_DISPATCHED && latest)
        return "acked"; /* acked twice: the same answer */
    if (latest && e->attempts > 0 &&
        (e->state == MIC_DLV_PENDING || e->state == MIC_DLV_PROCESSING))
        return kind == MIC_ACK ? "acked" : e->attempts >= MAX_ATTEMPTS ? "dead_lettered" : "retrying";
    return "lease_lost";
}

/* Ack or nack items (idx[k], toks[k]) in one request; 'retry_s' < 0: no
 * retry_after_s. */
static void settle(struct fx *f, int kind, int n, const int *idx, char (*toks)[TOKLEN + 1],
                   int retry_s)
{
    static const char *want[1000];
    char *body = malloc((size_t)n * 128 + 128);
    int len;
    json_t *res;

    assert_non_null(body);
    begin(f);
    len = sprintf(body, "{\"deliveries\":[");
    for (int k = 0; k < n; k++) {
        len += sprintf(body + len, "%s{\"seq\":%llu,\"lease_token\":\"%s\"}", k ? "," : "",
                       (unsigned long long)f->ev[idx[k]].seq, toks[k]);
        want[k] = expect_settle(f, kind, idx[k], toks[k]);
    }
    len += sprintf(body + len, "]");
    if (kind == MIC_NACK)
        len += sprintf(body + len, ",\"error\":\"model\"");
    if (retry_s >= 0)
        len += sprintf(body + len, ",\"retry_after_s\":%d", retry_s);
    sprintf(body + len, "}");
    call(f, kind, body);
    free(body);
    res = json_object_get(f->j, "results");
    CHECK(f, (int)json_array_size(res) == n, "settle: %zu results for %d items", json_array_size(res), n);
    for (int k = 0; k < n; k++) {
        int i = idx[k];
        struct mev *e = &f->ev[i];
        const char *got = json_string_value(json_object_get(json_array_get(res, (size_t)k), "status"));
        CHECK(f, got && !strcmp(got, want[k]), "%s of seq %llu (%s, attempts %u, %s token): %s, expected %s",
              kind == MIC_ACK ? "ack" : "nack", (unsigned long long)e->seq, sname(e->state),
              e->attempts, !strcmp(toks[k], e->token) ? "its last" : "an old", got ? got : "?", want[k]);
        if (!strcmp(want[k], "lease_lost")) {
            f->st.lost++;
        } else if (kind == MIC_ACK && e->state != MIC_DLV_DISPATCHED) {
            check_ack_order(f, i);
            f->st.c_expired_ack += e->state == MIC_DLV_PENDING;
            e->state = MIC_DLV_DISPATCHED;
            e->ever_terminal = 1;
            e->not_before = 0;
            e->lease_exp = 0;
            if (e->agg >= 0) {
                CHECK(f, f->agg[e->agg].head_out == i, "model: acked seq %llu is not its head",
                      (unsigned long long)e->seq);
                f->agg[e->agg].head_out = -1;
            }
            f->st.acks++;
        } else if (kind == MIC_NACK) {
            fail_attempt(f, i, retry_s >= 0 ? retry_s * SEC : -1);
            /* A nack ends the lease: its token answers lease_lost from now
             * on (an expired lease's token still counts). */
            e->nacked = 1;
            f->st.nacks++;
        }
        dirty(f, i);
    }
    end(f);
}

static int pick_held(struct fx *f, int expired)
{
    static int c[MAXEV];
    int n = 0;

    for (int i = 0; i < f->nev; i++) {
        struct mev *e = &f->ev[i];
        if (expired ? e->state == MIC_DLV_PENDING && e->attempts > 0 && e->token[0] && !e->nacked
                    : e->state == MIC_DLV_PROCESSING)
            c[n++] = i;
    }
    return n ? c[rnd(f, n)] : -1;
}

static void op_settle(struct fx *f, int kind)
{
    char tok[1][TOKLEN + 1];
    int i = rnd(f, 10) < 8 ? pick_held(f, 0) : -1, retry = -1;

    if (i < 0)
        i = pick_held(f, 1); /* an expired lease nobody took over: its token still works */
    if (i < 0)
        i = pick_held(f, 0);
    if (i < 0) {
        op_claim(f, 1 + rnd(f, 5));
        return;
    }
    if (kind == MIC_NACK) {
        int r = rnd(f, 10);
        retry = r < 4 ? -1 : r < 8 ? 0 : 1 + rnd(f, 2);
    }
    snprintf(tok[0], sizeof tok[0], "%s", f->ev[i].token);
    note(f, "%s seq %llu (%s, attempts %u) retry_after_s %d", kind == MIC_ACK ? "ack" : "nack",
         (unsigned long long)f->ev[i].seq, sname(f->ev[i].state), f->ev[i].attempts, retry);
    settle(f, kind, 1, &i, tok, retry);
}

/* An ack or nack with an old token (must answer lease_lost and change
 * nothing), or with the last token of any delivery. */
static void op_token(struct fx *f)
{
    char tok[1][TOKLEN + 1];
    int kind = rnd(f, 3) ? MIC_ACK : MIC_NACK, i = -1;

    if (f->nstale && rnd(f, 2)) {
        struct stale *s = &f->stale[rnd(f, f->nstale < MAXSTALE ? f->nstale : MAXSTALE)];
        i = f->by_seq[s->seq];
        snprintf(tok[0], sizeof tok[0], "%s", s->tok);
        note(f, "%s seq %llu with an old token", kind == MIC_ACK ? "ack" : "nack",
             (unsigned long long)s->seq);
    } else {
        for (int tries = 0; tries < 20 && i < 0; tries++) {
            int k = f->nev ? rnd(f, f->nev) : -1;
            if (k >= 0 && f->ev[k].token[0])
                i = k;
        }
        if (i < 0) {
            op_claim(f, 1 + rnd(f, 5));
            return;
        }
        snprintf(tok[0], sizeof tok[0], "%s", f->ev[i].token);
        note(f, "%s seq %llu (%s, attempts %u) with its last token", kind == MIC_ACK ? "ack" : "nack",
             (unsigned long long)f->ev[i].seq, sname(f->ev[i].state), f->ev[i].attempts);
    }
    f->st.token_tests++;
    settle(f, kind, 1, &i, tok, kind == MIC_NACK ? 0 : -1);
}

/* Move the clock; then an inert op fires the deadlines, or (backoff 0: the
 * outcome is known) the next op's batch does.  Either way no batch runs in
 * between (no_wakeup), so the store keeps the state of the last op until
 * then, whatever the threads' timing. */
static void advance(struct fx *f, int64_t dt, int may_defer)
{
    atomic_fetch_add(&fake_now, dt);
    if (may_defer && f->init_ms == 0 && rnd(f, 2))
        return;
    tick(f);
}

static void op_requeue_all(struct fx *f)
{
    int n = 0;
    json_t *r;

    note(f, "dlq requeue all");
    begin(f);
    for (int i = 0; i < f->nev; i++)
        n += f->ev[i].state == MIC_DLV_DLQ;
    call(f, MIC_REQUEUE, "{\"all\":true}");
    r = json_object_get(f->j, "requeued");
    CHECK(f, json_is_integer(r) && json_integer_value(r) == n, "requeue all: %lld requeued, the DLQ held %d",
          (long long)json_integer_value(r), n);
    for (int i = 0; i < f->nev; i++) {
        struct mev *e = &f->ev[i];
        if (e->state != MIC_DLV_DLQ)
            continue;
        if (e->agg >= 0 && f->hold)
            CHECK(f, f->agg[e->agg].head_out == i, "model: held dead letter is not the head");
        if (e->agg >= 0 && f->hold)
            f->st.c_hold_requeue++;
        else if (e->agg >= 0 && f->agg[e->agg].head_out >= 0)
            f->st.c_requeue_behind++;
        e->state = MIC_DLV_PENDING;
        e->attempts = 0;
        e->not_before = 0;
        e->requeued = 1;
        dirty(f, i);
        stick_heads(f); /* the engine requeues them one by one, in seq order */
    }
    f->st.requeued += n;
    end(f);
}

static void op_dlq_skip(struct fx *f)
{
    static int c[MAXEV];
    char body[64];
    int n = 0, i, dlq;
    const char *st;

    for (int k = 0; k < f->nev; k++)
        if (f->ev[k].state == MIC_DLV_DLQ)
            c[n++] = k;
    if (n && rnd(f, 10) < 8)
        i = c[rnd(f, n)];
    else if (f->nev)
        i = rnd(f, f->nev);
    else
        return;
    note(f, "dlq skip seq %llu (%s)", (unsigned long long)f->ev[i].seq, sname(f->ev[i].state));
    begin(f);
    dlq = f->ev[i].state == MIC_DLV_DLQ; /* after the deadlines this batch fires */
    snprintf(body, sizeof body, "{\"seqs\":[%llu]}", (unsigned long long)f->ev[i].seq);
    call(f, MIC_SKIP, body);
    st = json_string_value(json_object_get(json_array_get(json_object_get(f->j, "results"), 0), "status"));
    CHECK(f, st && !strcmp(st, dlq ? "skipped" : "not_in_dlq"), "dlq skip of seq %llu (%s): %s",
          (unsigned long long)f->ev[i].seq, sname(f->ev[i].state), st ? st : "?");
    if (dlq) {
        struct mev *e = &f->ev[i];
        e->state = MIC_DLV_SKIPPED;
        if (e->agg >= 0 && f->hold) {
            CHECK(f, f->agg[e->agg].head_out == i, "model: held dead letter is not the head");
            f->agg[e->agg].head_out = -1;
        }
        f->st.dlq_skips++;
        dirty(f, i);
    }
    end(f);
}

/* POST /v1/aggregates/{type}/{id}/gaps/{version}/skip. */
static void gap_skip(struct fx *f, int a, uint64_t v)
{
    struct magg *A = &f->agg[a];
    int before, expect, rc;
    char vs[24];
    struct mic_error e;
    struct mic_buf b;
    mic_gap_skip *g;
    json_t *j;

    note(f, "gap skip %s/%s v%llu%s", A->type, A->id, (unsigned long long)v,
         A->vstate[v] == 2 ? " (again)" : "");
    begin(f);
    before = parked(f, a);
    if (A->vstate[v] == 0) {
        A->vstate[v] = 2;
        expect = before && !parked(f, a);
        f->st.gap_skips++;
        f->st.released += expect;
    } else {
        expect = 0; /* skipped before: nothing more to release */
    }
    snprintf(vs, sizeof vs, "%llu", (unsigned long long)v);
    assert_int_equal(mic_gap_skip_parse(A->type, A->id, vs, &g, &e), MIC_OK);
    run(f, mic_gap_skip_op(g));
    mic_buf_init(&b);
    rc = mic_gap_skip_result(g, &b, &e);
    j = rc ? NULL : json_loadb(b.p, b.len, 0, NULL);
    mic_buf_fini(&b);
    mic_gap_skip_free(g);
    CHECK(f, rc == MIC_OK, "gap skip of %s/%s v%llu: %s %s", A->type, A->id, (unsigned long long)v,
          e.code, e.message);
    f->j = j;
    CHECK(f, j && json_integer_value(json_object_get(j, "skipped_version")) == (json_int_t)v,
          "gap skip: wrong answer");
    CHECK(f, json_is_true(json_object_get(j, "released")) == expect,
          "gap skip of %s/%s v%llu answered released:%s, the model says %s (parked before: %d)",
          A->type, A->id, (unsigned long long)v,
          json_is_true(json_object_get(j, "released")) ? "true" : "false",
          expect ? "true" : "false", before);
    end(f);
}

static int op_gap_skip(struct fx *f)
{
    uint64_t miss[MAXV];
    int cand[NVERSIONED], n = 0;

    for (int a = 0; a < NVERSIONED; a++)
        if (missing(&f->agg[a], miss))
            cand[n++] = a;
    if (!n)
        return 0;
    int a = cand[rnd(f, n)];
    int nm = missing(&f->agg[a], miss);
    uint64_t v = miss[rnd(f, nm)];
    if (rnd(f, 10) == 0)
        for (uint64_t u = f->agg[a].baseline; u < f->agg[a].maxv; u++)
            if (f->agg[a].vstate[u] == 2) {
                v = u; /* again: answers released:false */
                break;
            }
    gap_skip(f, a, v);
    return 1;
}

static void op_restart(struct fx *f)
{
    note(f, "restart");
    close_all(f);
    open_all(f);
    f->st.restarts++;
    tick(f); /* the first batch fires what came due */
    reconcile(f, 1);
}

/* ---- Termination ---- */

static void ack_all_held(struct fx *f)
{
    static int idx[100];
    static char toks[100][TOKLEN + 1];
    int n = 0;

    for (int i = 0; i <= f->nev; i++) {
        if (n == 100 || (i == f->nev && n)) {
            note(f, "drain: ack %d held deliveries", n);
            settle(f, MIC_ACK, n, idx, toks, -1);
            n = 0;
        }
        if (i == f->nev)
            break;
        struct mev *e = &f->ev[i];
        if (e->attempts > 0 && e->token[0] && !e->nacked &&
            (e->state == MIC_DLV_PROCESSING || e->state == MIC_DLV_PENDING)) {
            idx[n] = i;
            snprintf(toks[n], sizeof toks[n], "%s", e->token);
            n++;
        }
    }
}

static void check_lookup(struct fx *f, int i)
{
    struct mev *e = &f->ev[i];
    struct mic_error err;
    struct mic_buf b;
    json_t *d;
    int rc;

    mic_buf_init(&b);
    rc = mic_publish_lookup(f->store, e->id, strlen(e->id), NULL, &b, &err);
    drop(f);
    f->j = rc ? NULL : json_loadb(b.p, b.len, 0, NULL);
    mic_buf_fini(&b);
    CHECK(f, f->j, "lookup of %s failed", e->id);
    d = json_array_get(json_object_get(f->j, "deliveries"), 0);
    const char *g = json_string_value(json_object_get(d, "group"));
    const char *st = json_string_value(json_object_get(d, "state"));
    CHECK(f, g && st && !strcmp(g, GROUP) && !strcmp(st, sname(e->state)),
          "lookup of %s (seq %llu): state %s, the model says %s", e->id, (unsigned long long)e->seq,
          st ? st : "(none)", sname(e->state));
    drop(f);
}

static void finish(struct fx *f)
{
    uint64_t miss[MAXV];
    struct mic_error err;
    struct mic_buf b;

    /* Fill every gap: publish the missing versions or skip them. */
    for (int a = 0; a < NVERSIONED; a++) {
        int nm;
        while ((nm = missing(&f->agg[a], miss)) > 0) {
            f->step++;
            if (rnd(f, 2)) {
                note(f, "end: publish %s/%s v%llu", f->agg[a].type, f->agg[a].id,
                     (unsigned long long)miss[0]);
                f->st.fills++;
                publish_event(f, a, miss[0], 0, 0);
            } else {
                gap_skip(f, a, miss[0]);
            }
        }
    }
    /* Good workers until nothing is left, clearing the DLQ as they go. */
    for (int round = 0;; round++) {
        int open = 0, dlq = 0;
        CHECK(f, round < 50, "end: the group does not drain");
        f->step++;
        ack_all_held(f);
        for (;;) {
            f->step++;
            if (op_claim(f, 100) == 0)
                break;
            ack_all_held(f);
        }
        for (int i = 0; i < f->nev; i++) {
            open += nonterminal(&f->ev[i]);
            dlq += f->ev[i].state == MIC_DLV_DLQ;
        }
        if (!open && !dlq)
            break;
        if (dlq)
            op_requeue_all(f);
        note(f, "end: clock +12 s");
        advance(f, (LEASE_TTL_S + 2) * SEC, 0);
    }
    /* Invariant 5: everything was dispatched or skipped. */
    note(f, "end: final check");
    reconcile(f, 1);
    for (int i = 0; i < f->nev; i++) {
        CHECK(f, f->ev[i].state == MIC_DLV_DISPATCHED || f->ev[i].state == MIC_DLV_SKIPPED,
              "inv5: seq %llu ends %s", (unsigned long long)f->ev[i].seq, sname(f->ev[i].state));
        check_lookup(f, i);
    }
    for (int a = 0; a < NAGG; a++) {
        CHECK(f, f->agg[a].head_out < 0, "inv5: aggregate %d keeps a head", a);
        if (f->agg[a].versioned)
            for (uint64_t v = f->agg[a].baseline; v <= f->agg[a].maxv; v++)
                CHECK(f, f->agg[a].vstate[v], "inv5: %s/%s v%llu neither stored nor skipped",
                      f->agg[a].type, f->agg[a].id, (unsigned long long)v);
    }
    /* Nothing is listed as blocked any more. */
    mic_buf_init(&b);
    assert_int_equal(mic_views_blocked(f->store, GROUP, NULL, NULL, &b, &err), MIC_OK);
    f->j = json_loadb(b.p, b.len, 0, NULL);
    mic_buf_fini(&b);
    CHECK(f, f->j && json_array_size(json_object_get(f->j, "aggregates")) == 0,
          "end: the blocked listing is not empty");
    drop(f);
}

/* ---- One seed ---- */

static void run_seed(void **state, unsigned seed)
{
    struct fx *f = *state;
    char body[256];
    struct timespec t0, t1;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    f->seed = seed;
    f->hold = seed % 2 == 0;
    /* Backoff initial_ms 0: retries wait only when a nack asks for it, and
     * every run of a seed is the same.  MODEL_JITTER=1 gives every other
     * pair of seeds initial_ms 250: the server then draws the backoff
     * (full jitter, its own random source), the test reads it back and
     * checks its range, and runs no longer repeat exactly. */
    f->init_ms = getenv("MODEL_JITTER") && (seed - 1) / 2 % 2 ? 250 : 0;
    f->rng = (uint64_t)seed * 0x9E3779B97F4A7C15ULL | 1;
    for (int k = 0; k <= MAXEV; k++)
        f->by_seq[k] = -1;
    for (int a = 0; a < NAGG; a++) {
        struct magg *A = &f->agg[a];
        A->versioned = a < NVERSIONED;
        snprintf(A->type, sizeof A->type, "%s", A->versioned ? "V" : "U");
        snprintf(A->id, sizeof A->id, "a%d", a);
        A->head_out = -1;
        A->last_created = T0 - 86400 * SEC + a * SEC;
    }
    snprintf(body, sizeof body,
             "{\"topics\":[\"t\"],\"ordered\":true,\"max_attempts\":%d,\"lease_ttl_s\":%d,"
             "\"backoff\":{\"initial_ms\":%d,\"max_ms\":%d},\"dlq_policy\":\"%s\"}",
             MAX_ATTEMPTS, LEASE_TTL_S, f->init_ms, BACKOFF_MAX_MS, f->hold ? "hold" : "release");
    note(f, "create group %s", body);
    make_group(f, body);

    for (f->step = 1; f->step <= STEPS; f->step++) {
        int r = rnd(f, 1000);
        f->st.steps++;
        /* Alternate filling phases and draining phases, so that aggregates
         * both pile up and run dry (and reach their gaps). */
        if (f->step / 250 % 2 && r < 300)
            r = r < 60 ? r : 300 + rnd(f, 400); /* drain: fewer publishes, more claims and acks */
        if (r < 300) {
            op_publish(f);
        } else if (r < 520) {
            op_claim(f, 1 + rnd(f, 5));
        } else if (r < 700) {
            op_settle(f, MIC_ACK);
        } else if (r < 770) {
            op_settle(f, MIC_NACK);
        } else if (r < 810) {
            op_token(f);
        } else if (r < 840) {
            note(f, "clock +%d s (leases expire)", LEASE_TTL_S + 1);
            advance(f, (LEASE_TTL_S + 1) * SEC, 1);
        } else if (r < 900) {
            int64_t dt = (1 + rnd(f, 2500)) * MS;
            note(f, "clock +%lld ms", (long long)(dt / MS));
            advance(f, dt, 1);
        } else if (r < 925) {
            op_requeue_all(f);
        } else if (r < 950) {
            op_dlq_skip(f);
        } else if (r < 985) {
            if (!op_gap_skip(f))
                op_publish(f);
        } else if (r < 990) {
            op_restart(f);
        } else {
            op_claim(f, 1 + rnd(f, 5));
        }
        if (f->step % 50 == 0)
            reconcile(f, 1);

    }
    f->step = STEPS;
    finish(f);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("seed %u (dlq_policy %s, backoff initial_ms %d): %d steps, %d events published "
           "(%d late, %d gaps made, %d filled, %d refused), %d claims granting %d, %d acks, "
           "%d nacks, %d token checks (%d lease_lost), %d lease expiries, %d dead letters, "
           "%d requeued, %d dlq skips, %d gap skips (%d released), %d restarts; %.2f s\n",
           seed, f->hold ? "hold" : "release", f->init_ms, f->st.steps, f->st.published,
           f->st.late, f->st.gaps_made, f->st.fills, f->st.refused, f->st.claims,
           f->st.granted, f->st.acks, f->st.nacks, f->st.token_tests, f->st.lost,
           f->st.expiries, f->st.dead, f->st.requeued, f->st.dlq_skips, f->st.gap_skips,
           f->st.released, f->st.restarts,
           (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
    printf("  seen: %d claims meeting a parked aggregate, %d a held dead letter, %d a retrying "
           "head; %d late events behind a head out, %d before a head not yet out; %d acks of an "
           "expired lease; %d held heads requeued, %d dead letters requeued behind a head out, "
           "%d late events behind a requeued head\n",
           f->st.c_parked, f->st.c_held, f->st.c_retry, f->st.c_late_behind, f->st.c_late_first,
           f->st.c_expired_ack, f->st.c_hold_requeue, f->st.c_requeue_behind, f->st.c_requeued_late);
    fflush(stdout);
    f->finished = 1;
}

/* ---- Directed: a requeued held head under dlq_policy hold ----
 *
 * Found by seed 6: an unversioned aggregate's head is dead-lettered and
 * held; an older event arrives late behind it; the DLQ is requeued.  The
 * requeued head must be the next one claimed (DESIGN section 2: "a requeue
 * redrives it and its successors in order"; section 3: a late event becomes
 * the head only when the head handed out is done).  Without a publish in
 * between it is; the second test shows that any publish to the aggregate
 * between the requeue and the claim hands the head to the late event. */

static uint64_t raw_publish(struct fx *f, const char *body)
{
    struct mic_error e;
    struct mic_buf b;
    mic_publish *p;
    uint64_t seq;
    int dup;

    assert_int_equal(mic_publish_parse(body, strlen(body), &f->cfg, &p, &e), MIC_OK);
    run(f, mic_publish_op(p));
    mic_buf_init(&b);
    assert_int_equal(mic_publish_result(p, &b, &dup, &e), MIC_OK);
    drop(f);
    f->j = json_loadb(b.p, b.len, 0, NULL);
    mic_buf_fini(&b);
    mic_publish_free(p);
    assert_non_null(f->j);
    seq = (uint64_t)json_integer_value(json_object_get(json_array_get(json_object_get(f->j, "results"), 0), "seq"));
    drop(f);
    return seq;
}

static uint64_t claim_one(struct fx *f, char *tok, size_t toklen)
{
    json_t *d;
    uint64_t seq;

    call(f, MIC_CLAIM, "{\"max\":10}");
    if (json_array_size(json_object_get(f->j, "deliveries")) == 0) {
        drop(f);
        return 0;
    }
    assert_int_equal(json_array_size(json_object_get(f->j, "deliveries")), 1);
    d = json_array_get(json_object_get(f->j, "deliveries"), 0);
    seq = (uint64_t)json_integer_value(json_object_get(d, "seq"));
    if (tok)
        snprintf(tok, toklen, "%s", json_string_value(json_object_get(d, "lease_token")));
    drop(f);
    return seq;
}

static void requeued_held_head(struct fx *f, int publish_between)
{
    char tok[TOKLEN + 1], body[256];
    uint64_t head, late;

    f->directed = 1;
    note(f, "directed: requeued held head%s", publish_between ? ", publish in between" : "");
    make_group(f, "{\"topics\":[\"t\"],\"ordered\":true,\"max_attempts\":1,"
                  "\"dlq_policy\":\"hold\",\"backoff\":{\"initial_ms\":0,\"max_ms\":0}}");
    head = raw_publish(f, "{\"event_id\":\"h\",\"topic\":\"t\",\"aggregate_type\":\"U\","
                          "\"aggregate_id\":\"x\",\"created_at\":\"2026-09-01T00:00:10Z\"}");
    assert_int_equal(claim_one(f, tok, sizeof tok), head);
    snprintf(body, sizeof body, "{\"deliveries\":[{\"seq\":%llu,\"lease_token\":\"%s\"}]}",
             (unsigned long long)head, tok);
    call(f, MIC_NACK, body);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(f->j, "results"), 0), "status")),
                        "dead_lettered");
    /* Older, arriving late: it waits behind the held head. */
    late = raw_publish(f, "{\"event_id\":\"late\",\"topic\":\"t\",\"aggregate_type\":\"U\","
                          "\"aggregate_id\":\"x\",\"created_at\":\"2026-09-01T00:00:05Z\"}");
    assert_int_equal(claim_one(f, NULL, 0), 0);
    call(f, MIC_REQUEUE, "{\"all\":true}");
    assert_int_equal(json_integer_value(json_object_get(f->j, "requeued")), 1);
    drop(f);
    if (publish_between) /* a newer event: it sorts after both */
        raw_publish(f, "{\"event_id\":\"new\",\"topic\":\"t\",\"aggregate_type\":\"U\","
                       "\"aggregate_id\":\"x\",\"created_at\":\"2026-09-01T00:00:20Z\"}");
    uint64_t got = claim_one(f, NULL, 0);
    CHECK(f, got == head,
          "after requeue of the held head seq %llu, the claim handed out seq %llu (the late "
          "event is seq %llu)", (unsigned long long)head, (unsigned long long)got,
          (unsigned long long)late);
    f->finished = 1;
}

static void hold_requeued_head_is_next(void **state)
{
    requeued_held_head(*state, 0);
}

static void hold_requeued_head_is_next_after_a_publish(void **state)
{
    requeued_held_head(*state, 1);
}

/* ---- The verbs, called directly ----
 * Each test below calls the engine's writer-thread verbs itself, inside a
 * batch of a procfx (procfx_exec), and checks what each answers and what
 * it leaves in the store: the seeds above reach them only through the
 * claim requests. */

#define VMAX 4

/* One batch's calls and what they answered (filled in the writer thread). */
struct verbs {
    const char *group;
    int step;               /* which script to run */
    int rc;
    /* grant */
    int max, n;
    int64_t ttl_us;
    uint64_t seqs[VMAX];
    uint32_t attempts[VMAX];
    uint8_t tokens[VMAX][MIC_TOKEN_LEN];
    /* settle: per call, the status and time answered */
    int st[8];
    int64_t t[8];
    uint64_t nreq;
    const char *error;
    size_t elen;
};

/* Each call runs only while the ones before it succeeded. */
#define CALL(x) (void)(rc || (rc = (x)))

static int verbs_batch(struct mic_wctx *w, void *arg)
{
    struct verbs *v = arg;
    struct mic_group *gr = mic_groups_find(w->groups, v->group, strlen(v->group));
    uint8_t wrong[MIC_TOKEN_LEN];
    int rc = MIC_OK;

    v->rc = MIC_ENOTFOUND;
    if (!gr)
        return MIC_OK;
    memset(v->st, 0, sizeof v->st);
    memset(v->t, 0, sizeof v->t);
    switch (v->step) {
    case 0: /* grant */
        CALL(mic_delivery_grant(w, gr, v->max, v->ttl_us, "w1", 2, v->seqs, v->attempts,
                                v->tokens, &v->n));
        break;
    case 1: /* ack and extend: wrong token, unknown seq, no token, then right */
        memcpy(wrong, v->tokens[0], MIC_TOKEN_LEN);
        wrong[0] ^= 1;
        CALL(mic_delivery_ack(w, gr, v->seqs[0], wrong, &v->st[0]));
        CALL(mic_delivery_ack(w, gr, 99, v->tokens[0], &v->st[1]));
        CALL(mic_delivery_ack(w, gr, v->seqs[0], NULL, &v->st[2]));
        CALL(mic_delivery_extend(w, gr, v->seqs[1], v->tokens[1], 60 * SEC, &v->st[3],
                                 &v->t[3]));
        CALL(mic_delivery_ack(w, gr, v->seqs[0], v->tokens[0], &v->st[4]));
        CALL(mic_delivery_ack(w, gr, v->seqs[0], v->tokens[0], &v->st[5]));
        CALL(mic_delivery_extend(w, gr, v->seqs[0], v->tokens[0], 60 * SEC, &v->st[6],
                                 &v->t[6]));
        break;
    case 2: /* nack with a retry time, then the same token again */
        CALL(mic_delivery_nack(w, gr, v->seqs[0], v->tokens[0], v->error, v->elen, 7 * SEC, 0,
                               &v->st[0], &v->t[0]));
        CALL(mic_delivery_ack(w, gr, v->seqs[0], v->tokens[0], &v->st[1]));
        CALL(mic_delivery_nack(w, gr, v->seqs[0], v->tokens[0], "x", 1, 0, 0, &v->st[2],
                               &v->t[2]));
        CALL(mic_delivery_extend(w, gr, v->seqs[0], v->tokens[0], SEC, &v->st[3], &v->t[3]));
        break;
    case 3: /* nack at the last attempt (the group's backoff); dead_letter */
        CALL(mic_delivery_nack(w, gr, v->seqs[0], v->tokens[0], v->error, v->elen, -1, 0,
                               &v->st[0], &v->t[0]));
        CALL(mic_delivery_nack(w, gr, v->seqs[1], v->tokens[1], "poison", 6, -1, 1, &v->st[1],
                               &v->t[1]));
        break;
    case 4: /* the admin verbs */
        CALL(mic_delivery_requeue(w, gr, v->seqs[0], &v->st[0]));
        CALL(mic_delivery_requeue(w, gr, v->seqs[0], &v->st[1]));
        CALL(mic_delivery_requeue(w, gr, 99, &v->st[2]));
        CALL(mic_delivery_skip(w, gr, v->seqs[1], &v->st[3]));
        CALL(mic_delivery_skip(w, gr, v->seqs[1], &v->st[4]));
        CALL(mic_delivery_requeue_all(w, gr, &v->nreq));
        break;
    }
    v->rc = rc;
    return rc;
}

static void verbs_run(struct procfx *f, struct verbs *v, int step)
{
    v->step = step;
    assert_int_equal(procfx_exec(f, verbs_batch, v), MIC_OK);
    assert_int_equal(v->rc, MIC_OK);
}

static struct mic_dlv verbs_dlv(struct procfx *f, const char *group, uint64_t seq,
                                uint64_t fig[MIC_GSTAT_N])
{
    if (fig)
        procfx_figures(f->store, group, fig);
    return procfx_dlv(f->store, group, seq);
}

/* grant leases the ready deliveries by priority, then seq, each with a
 * fresh token; ack settles only under that token (a wrong one: LOST, an
 * unknown seq or no token: NOTFOUND), and again answers ACKED; extend
 * moves the lease's end, and after an ack answers LOST. */
static void verbs_grant_ack_extend(void **state)
{
    struct procfx *f = *state;
    struct verbs v;
    struct mic_dlv d;
    uint64_t fig[MIC_GSTAT_N];

    procfx_group(f, "g", "{\"topics\":[\"t\"]}");
    assert_int_equal(procfx_publish(f, "{\"event_id\":\"e1\",\"topic\":\"t\"}", NULL, NULL), MIC_OK);
    assert_int_equal(procfx_publish(f, "{\"event_id\":\"e2\",\"topic\":\"t\"}", NULL, NULL), MIC_OK);
    assert_int_equal(procfx_publish(f, "{\"event_id\":\"e3\",\"topic\":\"t\",\"priority\":5}",
                                    NULL, NULL),
                     MIC_OK);
    memset(&v, 0, sizeof v);
    v.group = "g";
    v.max = 2;
    v.ttl_us = 5 * SEC;
    verbs_run(f, &v, 0);
    assert_int_equal(v.n, 2);
    assert_int_equal(v.seqs[0], 3); /* priority 5 first */
    assert_int_equal(v.seqs[1], 1);
    assert_int_equal(v.attempts[0], 1);
    assert_int_equal(v.attempts[1], 1);
    assert_memory_not_equal(v.tokens[0], v.tokens[1], MIC_TOKEN_LEN);
    d = verbs_dlv(f, "g", 3, fig);
    assert_int_equal(d.state, MIC_DLV_PROCESSING);
    assert_int_equal(d.lease_expires, PROCFX_T0 + 5 * SEC);
    assert_int_equal(d.attempts, 1);
    assert_memory_equal(d.token, v.tokens[0], MIC_TOKEN_LEN);
    assert_string_equal(d.worker, "w1");
    assert_int_equal(fig[MIC_GSTAT_PROCESSING], 2);
    assert_int_equal(fig[MIC_GSTAT_PENDING], 1);

    procfx_now += SEC;
    verbs_run(f, &v, 1);
    assert_int_equal(v.st[0], MIC_DS_LOST);
    assert_int_equal(v.st[1], MIC_DS_NOTFOUND);
    assert_int_equal(v.st[2], MIC_DS_NOTFOUND);
    assert_int_equal(v.st[3], MIC_DS_EXTENDED);
    assert_int_equal(v.t[3], procfx_now + 60 * SEC);
    assert_int_equal(v.st[4], MIC_DS_ACKED);
    assert_int_equal(v.st[5], MIC_DS_ACKED);
    assert_int_equal(v.st[6], MIC_DS_LOST);
    assert_int_equal(verbs_dlv(f, "g", 3, NULL).state, MIC_DLV_DISPATCHED);
    d = verbs_dlv(f, "g", 1, fig);
    assert_int_equal(d.state, MIC_DLV_PROCESSING);
    assert_int_equal(d.lease_expires, procfx_now + 60 * SEC);
    assert_int_equal(fig[MIC_GSTAT_PROCESSING], 1);
    assert_int_equal(fig[MIC_GSTAT_PENDING], 1);
    assert_int_equal(fig[MIC_GSTAT_DISPATCHED], 1);
}

/* nack with a retry time: RETRYING at now + that time, the error kept (cut
 * to MIC_ERROR_MAX bytes on a UTF-8 boundary), and the lease ended: the
 * token answers LOST to ack, nack and extend.  At the last attempt a nack
 * dead-letters (the group's backoff asked: no retry), and so does one with
 * dead_letter set at any attempt.  requeue brings a dead letter back
 * (attempts 0), skip ends one; each answers NOT_IN_DLQ or NOTFOUND for
 * others; requeue_all counts what it requeued. */
static void verbs_nack_dead_letter_requeue(void **state)
{
    struct procfx *f = *state;
    struct verbs v;
    struct mic_dlv d;
    uint64_t fig[MIC_GSTAT_N];
    char err[MIC_ERROR_MAX + 2];

    procfx_group(f, "g", "{\"topics\":[\"t\"],\"max_attempts\":2,"
                       "\"backoff\":{\"initial_ms\":0,\"max_ms\":0}}");
    for (int i = 0; i < 3; i++) {
        char body[64];
        snprintf(body, sizeof body, "{\"event_id\":\"e%d\",\"topic\":\"t\"}", i + 1);
        assert_int_equal(procfx_publish(f, body, NULL, NULL), MIC_OK);
    }
    memset(&v, 0, sizeof v);
    v.group = "g";
    v.max = 1;
    v.ttl_us = 30 * SEC;
    verbs_run(f, &v, 0);
    assert_int_equal(v.seqs[0], 1);
    /* 1023 bytes of 'a', then a 2-byte character across the limit: cut
     * before it. */
    memset(err, 'a', MIC_ERROR_MAX - 1);
    memcpy(err + MIC_ERROR_MAX - 1, "\xc3\xa9", 2);
    v.error = err;
    v.elen = MIC_ERROR_MAX + 1;
    verbs_run(f, &v, 2);
    assert_int_equal(v.st[0], MIC_DS_RETRYING);
    assert_int_equal(v.t[0], PROCFX_T0 + 7 * SEC);
    assert_int_equal(v.st[1], MIC_DS_LOST);
    assert_int_equal(v.st[2], MIC_DS_LOST);
    assert_int_equal(v.st[3], MIC_DS_LOST);
    d = verbs_dlv(f, "g", 1, fig);
    assert_int_equal(d.state, MIC_DLV_PENDING);
    assert_int_equal(d.not_before, PROCFX_T0 + 7 * SEC);
    assert_int_equal(d.error_len, MIC_ERROR_MAX - 1);
    assert_int_equal(strlen(d.last_error), MIC_ERROR_MAX - 1);
    assert_int_equal(fig[MIC_GSTAT_PENDING], 3);

    procfx_now = PROCFX_T0 + 7 * SEC; /* its retry: claimable again, with the others */
    v.max = 2;
    verbs_run(f, &v, 0);
    assert_int_equal(v.n, 2);
    assert_int_equal(v.seqs[0], 1);
    assert_int_equal(v.attempts[0], 2);
    assert_int_equal(v.seqs[1], 2);
    assert_int_equal(v.attempts[1], 1);
    /* 1022 bytes of 'a', a 2-byte character that ends at the limit, one
     * more byte: the character is kept. */
    memset(err, 'a', MIC_ERROR_MAX - 2);
    memcpy(err + MIC_ERROR_MAX - 2, "\xc3\xa9" "b", 3);
    v.elen = MIC_ERROR_MAX + 1;
    verbs_run(f, &v, 3);
    assert_int_equal(v.st[0], MIC_DS_DEAD); /* attempt 2 of 2 */
    assert_int_equal(v.st[1], MIC_DS_DEAD); /* dead_letter at attempt 1 */
    d = verbs_dlv(f, "g", 1, NULL);
    assert_int_equal(d.error_len, MIC_ERROR_MAX);
    assert_memory_equal(d.last_error + MIC_ERROR_MAX - 2, "\xc3\xa9", 3); /* and its NUL */
    d = verbs_dlv(f, "g", 2, fig);
    assert_int_equal(d.state, MIC_DLV_DLQ);
    assert_string_equal(d.last_error, "poison");
    assert_int_equal(d.terminal_at, procfx_now);
    assert_int_equal(fig[MIC_GSTAT_DLQ], 2);
    assert_int_equal(fig[MIC_GSTAT_PENDING], 1);

    v.seqs[0] = 1;
    v.seqs[1] = 2;
    verbs_run(f, &v, 4);
    assert_int_equal(v.st[0], MIC_DS_REQUEUED);
    assert_int_equal(v.st[1], MIC_DS_NOT_IN_DLQ);
    assert_int_equal(v.st[2], MIC_DS_NOTFOUND);
    assert_int_equal(v.st[3], MIC_DS_SKIPPED);
    assert_int_equal(v.st[4], MIC_DS_NOT_IN_DLQ);
    assert_int_equal(v.nreq, 0); /* nothing left in the DLQ */
    d = verbs_dlv(f, "g", 1, fig);
    assert_int_equal(d.state, MIC_DLV_PENDING);
    assert_int_equal(d.attempts, 0);
    assert_int_equal(verbs_dlv(f, "g", 2, NULL).state, MIC_DLV_SKIPPED);
    assert_int_equal(fig[MIC_GSTAT_DLQ], 0);
    assert_int_equal(fig[MIC_GSTAT_PENDING], 2);
    assert_int_equal(fig[MIC_GSTAT_SKIPPED], 1);
}

/* The API's words for what a verb did (DESIGN section 4). */
static void verbs_status_words(void **state)
{
    static const char *const words[] = {"", "acked", "retrying", "dead_lettered", "extended",
                                        "lease_lost", "not_found", "requeued", "skipped",
                                        "not_in_dlq"};

    (void)state;
    for (int s = MIC_DS_NONE; s <= MIC_DS_NOT_IN_DLQ; s++)
        assert_string_equal(mic_delivery_status_name(s), words[s]);
    assert_string_equal(mic_delivery_status_name(MIC_DS_NOT_IN_DLQ + 1), "");
    assert_string_equal(mic_delivery_status_name(-1), "");
}

#define SEED_TEST(n)                            \
    static void model_seed_##n(void **state)    \
    {                                           \
        run_seed(state, n);                     \
    }
SEED_TEST(1)
SEED_TEST(2)
SEED_TEST(3)
SEED_TEST(4)
SEED_TEST(5)
SEED_TEST(6)
SEED_TEST(7)
SEED_TEST(8)
SEED_TEST(9)
SEED_TEST(10)
SEED_TEST(11)
SEED_TEST(12)
SEED_TEST(13)
SEED_TEST(14)
SEED_TEST(15)
SEED_TEST(16)
SEED_TEST(17)
SEED_TEST(18)
SEED_TEST(19)
SEED_TEST(20)
SEED_TEST(21)
SEED_TEST(22)
SEED_TEST(23)
SEED_TEST(24)
SEED_TEST(25)
SEED_TEST(26)
SEED_TEST(27)
SEED_TEST(28)
SEED_TEST(29)
SEED_TEST(30)
SEED_TEST(31)
SEED_TEST(32)

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(model_seed_1, setup, teardown),
        cmocka_unit_test_setup_teardown(model_seed_2, setup, teardown),
        cmocka_unit_test_setup_teardown(model_seed_3, setup, teardown),
        cmocka_unit_test_setup_teardown(model_seed_4, setup, teardown),
        cmocka_unit_test_setup_teardown(model_seed_5, setup, teardown),
        cmocka_unit_test_setup_teardown(model_seed_6, setup, teardown),
        cmocka_unit_test_setup_teardown(model_seed_7, setup, teardown),
        cmocka_unit_test_setup_teardown(model_seed_8, setup, teardown),
        cmocka_unit_test_setup_teardown(model_seed_9, setup, teardown),
        cmocka_unit_test_setup_teardown(model_seed_10, setup, teardown),
        cmocka_unit_test_setup_teardown(model_seed_11, setup, teardown),
        cmocka_unit_test_setup_teardown(model_seed_12, setup, teardown),
        cmocka_unit_test_setup_teardown(model_seed_13, setup, teardown),
        cmocka_unit_test_setup_teardown(model_seed_14, setup, teardown),
        cmocka_unit_test_setup_teardown(model_seed_15, setup, teardown),
        cmocka_unit_test_setup_teardown(model_seed_16, setup, teardown),
        cmocka_unit_test_setup_teardown(model_seed_17, setup, teardown),
        cmocka_unit_test_setup_teardown(model_seed_18, setup, teardown),
        cmocka_unit_test_setup_teardown(model_seed_19, setup, teardown),
        cmocka_unit_test_setup_teardown(model_seed_20, setup, teardown),
        cmocka_unit_test_setup_teardown(model_seed_21, setup, teardown),
        cmocka_unit_test_setup_teardown(model_seed_22, setup, teardown),
        cmocka_unit_test_setup_teardown(model_seed_23, setup, teardown),
        cmocka_unit_test_setup_teardown(model_seed_24, setup, teardown),
        cmocka_unit_test_setup_teardown(model_seed_25, setup, teardown),
        cmocka_unit_test_setup_teardown(model_seed_26, setup, teardown),
        cmocka_unit_test_setup_teardown(model_seed_27, setup, teardown),
        cmocka_unit_test_setup_teardown(model_seed_28, setup, teardown),
        cmocka_unit_test_setup_teardown(model_seed_29, setup, teardown),
        cmocka_unit_test_setup_teardown(model_seed_30, setup, teardown),
        cmocka_unit_test_setup_teardown(model_seed_31, setup, teardown),
        cmocka_unit_test_setup_teardown(model_seed_32, setup, teardown),
        cmocka_unit_test_setup_teardown(hold_requeued_head_is_next, setup, teardown),
        cmocka_unit_test_setup_teardown(hold_requeued_head_is_next_after_a_publish, setup, teardown),
        cmocka_unit_test_setup_teardown(verbs_grant_ack_extend, procfx_setup, procfx_teardown),
        cmocka_unit_test_setup_teardown(verbs_nack_dead_letter_requeue, procfx_setup,
                                        procfx_teardown),
        cmocka_unit_test(verbs_status_words),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
