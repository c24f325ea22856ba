/* mic_worker.c - the worker loop of libmic (mic_worker_run, see mic.h).
 *
 * DESIGN.  N handler threads and one extender thread.  Each handler thread
 * has two handles of its own: one for claims (the one a stop cuts short,
 * so a long-poll ends at once) and one for settlement and for the handler
 * (never cut, so the deliveries in flight are still acked or nacked after
 * a stop).  A thread claims up to 'max' deliveries, publishes them in its
 * slot (under the slot's mutex) and runs the handler on each in turn.  A
 * failure verdict is nacked at once; successes are acked together, one
 * request for those of a claim that finished within ACK_HOLD_MS of the
 * first one waiting (the extender keeps their leases meanwhile), so a
 * claim of 32 quick jobs costs one ack, not 32.
 *
 * The extender wakes every sixth of the lease TTL and, for each slot whose
 * lease was last renewed a third of the TTL ago or more, extends the
 * deliveries still unsettled (copies of seq, token and node: it never holds
 * a slot's mutex during a request).  An answer lease_lost or not_found
 * marks that job fenced: the handler sees it through mic_job_lease_lost,
 * and the loop settles nothing for it (the lease is someone else's).
 *
 * Stop: mic_worker_stop (or SIGINT/SIGTERM with stop_on_signals) sets the
 * flag and cuts the claim handles' transfers.  Each thread finishes the
 * handler in flight, settles it, nacks the rest of its claim with
 * retry_after_s 0 (claimable by another worker at once) and ends.  A claim
 * cut in flight may have been granted by micd: its leases simply expire,
 * and the deliveries come again (at-least-once). */
#define _GNU_SOURCE
#include "mic.h"

#include "core/clock.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A job whose handler said DONE is acked together with the next ones of
 * its claim, but never held longer than this: fast handlers cost one ack
 * request per claim, slow ones one each. */
#define ACK_HOLD_MS 20

struct mic_job {
    mic_worker *w;
    int thread;
    const struct mic_leased *d;
    atomic_int lost;
    atomic_int done;      /* settled or given up: no more extends */
    char error[1024];
    double retry_after_s;
};

struct slot {
    pthread_mutex_t mu;
    struct mic_job *jobs;   /* the current claim's, or NULL */
    size_t n;
    uint64_t gen;           /* bumped per claim */
    int64_t renewed_ms;     /* claim or last extend */
    mic_client *claim_c, *work_c;
    pthread_t th;
    int started;
    mic_worker *w;
    int index;
};

struct mic_worker {
    struct mic_worker_opts o;
    char *group, *worker;
    mic_client *ext_c;
    struct slot *slots;
    int nthreads;
    pthread_t ext;
    int ext_started;
    atomic_int stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* the extender's sleep */
    atomic_long claimed, acked, retried, dead, lost, extends, claim_failures, settled;
    atomic_llong last_seen_ms;
    pthread_mutex_t fail_mu;
    int refused;            /* under fail_mu: a claim refused for good */
    struct mic_failure failure;
};

static int64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int mic_job_lease_lost(const mic_job *job)
{
    return atomic_load(&((mic_job *)job)->lost);
}

void mic_job_fail(mic_job *job, double retry_after_s, const char *fmt, ...)
{
    va_list ap;

    job->retry_after_s = retry_after_s;
    va_start(ap, fmt);
    vsnprintf(job->error, sizeof job->error, fmt, ap);
    va_end(ap);
}

int mic_job_thread(const mic_job *job)
{
    return job->thread;
}

void mic_worker_stop(mic_worker *w)
{
    atomic_store(&w->stop, 1);
    for (int i = 0; i < w->nthreads; i++)
        if (w->slots[i].claim_c)
            mic_client_stop(w->slots[i].claim_c);
}

/* Wake the extender (not async-signal-safe: only from threads). */
static void wake(mic_worker *w)
{
    pthread_mutex_lock(&w->mu);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* ---- Signals ---- */

static mic_worker *_Atomic sig_target;
static struct sigaction old_int, old_term;

static void on_signal(int sig)
{
    mic_worker *w = atomic_load(&sig_target);

    (void)sig;
    if (w)
        mic_worker_stop(w);
}

/* ---- Handler threads ---- */

/* A claim refused by micd for a reason no retry changes: a bad request,
 * a key without the right, no such group, a sink group. */
static int refused_for_good(const struct mic_failure *f)
{
    return f->kind == MIC_FAIL_SERVER &&
           (f->status == 400 || f->status == 401 || f->status == 403 || f->status == 404 ||
            f->status == 409 || f->status == 422);
}

/* Count one settle's answer for job 'j'.  An unanswered item (the call
 * failed: UNKNOWN) leaves the lease to expire: the delivery comes again
 * (at-least-once). */
static void count_result(mic_worker *w, struct mic_job *j, const struct mic_item_result *res)
{
    switch (res->status) {
    case MIC_ITEM_LEASE_LOST:
    case MIC_ITEM_NOT_FOUND:
        atomic_store(&j->lost, 1);
        atomic_fetch_add(&w->lost, 1);
        break;
    case MIC_ITEM_ACKED:
        atomic_fetch_add(&w->acked, 1);
        break;
    case MIC_ITEM_DEAD_LETTERED:
        atomic_fetch_add(&w->dead, 1);
        break;
    case MIC_ITEM_RETRYING:
        atomic_fetch_add(&w->retried, 1);
        break;
    default:
        break;
    }
}

/* One more delivery settled (or given up); the loop stops at
 * max_deliveries. */
static void count_settled(mic_worker *w, long n)
{
    if (w->o.max_deliveries > 0 &&
        atomic_fetch_add(&w->settled, n) + n >= w->o.max_deliveries)
        mic_worker_stop(w);
}

/* Nack job 'j' (verdict RETRY or DEAD) or, when its lease was lost, count
 * it; marks it done. */
static void settle_fail(struct slot *s, struct mic_job *j, enum mic_verdict v)
{
    mic_worker *w = s->w;
    const struct mic_leased *items[1] = {j->d};
    struct mic_settle_opts so = {.error = j->error[0] ? j->error : NULL,
                                 .retry_after_s = j->retry_after_s,
                                 .dead_letter = v == MIC_DEAD};
    struct mic_item_result res;

    if (atomic_load(&j->lost)) {
        atomic_fetch_add(&w->lost, 1);
    } else {
        mic_nack(s->work_c, w->group, items, 1, &so, &res);   /* res says it all */
        count_result(w, j, &res);
    }
    atomic_store(&j->done, 1);
    count_settled(w, 1);
}

/* The acks a thread holds back to send as one request: the jobs whose
 * handler said DONE, still unsettled (the extender keeps their leases). */
struct acks {
    struct mic_job **jobs;
    const struct mic_leased **items;
    struct mic_item_result *res;
    size_t n;
    int64_t first_ms;       /* when the oldest was added */
};

/* Ack every held job in one request (those fenced meanwhile are only
 * counted), mark them done. */
static void acks_flush(struct slot *s, struct acks *a)
{
    mic_worker *w = s->w;
    size_t n = 0;

    if (!a->n)
        return;
    for (size_t i = 0; i < a->n; i++)
        if (atomic_load(&a->jobs[i]->lost))
            atomic_fetch_add(&w->lost, 1);
        else
            a->jobs[n++] = a->jobs[i];
    for (size_t i = 0; i < n; i++)
        a->items[i] = a->jobs[i]->d;
    if (n)
        mic_ack(s->work_c, w->group, a->items, n, a->res);   /* per item: res */
    for (size_t i = 0; i < n; i++)
        count_result(w, a->jobs[i], &a->res[i]);
    for (size_t i = 0; i < a->n; i++)
        atomic_store(&a->jobs[i]->done, 1);
    count_settled(w, (long)a->n);
    a->n = 0;
}

/* Give back the jobs of this claim the thread will not run (stop). */
static void release_rest(struct slot *s, size_t from)
{
    const struct mic_leased **items;
    struct mic_item_result *res;
    size_t n = 0;
    struct mic_settle_opts so = {.error = "worker stopping", .retry_after_s = 0};

    if (from >= s->n || !(items = calloc(s->n - from, sizeof *items)))
        return;
    if (!(res = calloc(s->n - from, sizeof *res))) {
        free(items);
        return;
    }
    for (size_t i = from; i < s->n; i++)
        if (!atomic_load(&s->jobs[i].lost))
            items[n++] = s->jobs[i].d;
    if (n)
        mic_nack(s->work_c, s->w->group, items, n, &so, res);
    free(items);
    free(res);
}

static void *thread_main(void *arg)
{
    struct slot *s = arg;
    mic_worker *w = s->w;
    size_t nodes = mic_client_nodes(s->claim_c), turn = (size_t)s->index % nodes;
    char name[300];
    /* With at least as many threads as nodes each thread stays on one node
     * and long-polls it; otherwise it visits every node, long-polling only
     * after a round found nothing. */
    int pinned = (size_t)w->nthreads >= nodes;
    size_t empty_round = 0;

    snprintf(name, sizeof name, "%s-%d", w->worker, s->index);
    while (!atomic_load(&w->stop)) {
        struct mic_claimed cl;
        double wait = w->o.wait_s;
        struct mic_claim_opts co;
        size_t node = pinned ? (size_t)s->index % nodes : turn;

        if (!pinned && empty_round + 1 < nodes)
            wait = 0;
        co = (struct mic_claim_opts){.max = w->o.max, .lease_ttl_s = w->o.lease_ttl_s,
                                     .wait_s = wait, .worker = name};
        if (mic_claim(s->claim_c, node, w->group, &co, &cl)) {
            mic_claimed_fini(&cl);
            if (mic_client_failure(s->claim_c)->kind == MIC_FAIL_STOPPED)
                break;
            atomic_fetch_add(&w->claim_failures, 1);
            if (refused_for_good(mic_client_failure(s->claim_c))) {
                pthread_mutex_lock(&w->fail_mu);
                if (!w->refused) {
                    w->refused = 1;
                    w->failure = *mic_client_failure(s->claim_c);
                }
                pthread_mutex_unlock(&w->fail_mu);
                mic_worker_stop(w);
                break;
            }
            for (int k = 0; k < 10 && !atomic_load(&w->stop); k++) {
                struct timespec ts = {0, 50 * 1000000L};
                nanosleep(&ts, NULL);
            }
            turn = (turn + 1) % nodes;
            continue;
        }
        if (!pinned)
            turn = (turn + 1) % nodes;
        if (cl.n == 0) {
            empty_round = pinned ? 0 : empty_round + 1 >= nodes ? 0 : empty_round + 1;
            mic_claimed_fini(&cl);
            if (w->o.idle_exit_s > 0 &&
                mono_ms() - atomic_load(&w->last_seen_ms) > (int64_t)(w->o.idle_exit_s * 1000))
                mic_worker_stop(w);
            continue;
        }
        empty_round = 0;
        atomic_store(&w->last_seen_ms, mono_ms());
        atomic_fetch_add(&w->claimed, (long)cl.n);
        {
            struct mic_job *jobs = calloc(cl.n, sizeof *jobs);
            struct acks a = {calloc(cl.n, sizeof *a.jobs), calloc(cl.n, sizeof *a.items),
                             calloc(cl.n, sizeof *a.res), 0, 0};
            size_t i;

            if (!jobs || !a.jobs || !a.items || !a.res) {
                free(jobs);
                free(a.jobs);
                free(a.items);
                free(a.res);
                mic_claimed_fini(&cl);
                continue;   /* the leases expire; the deliveries come again */
            }
            for (i = 0; i < cl.n; i++) {
                jobs[i].w = w;
                jobs[i].thread = s->index;
                jobs[i].d = &cl.v[i];
                jobs[i].retry_after_s = -1;
            }
            pthread_mutex_lock(&s->mu);
            s->jobs = jobs;
            s->n = cl.n;
            s->gen++;
            s->renewed_ms = mono_ms();
            pthread_mutex_unlock(&s->mu);
            for (i = 0; i < cl.n; i++) {
                enum mic_verdict v;

                if (atomic_load(&w->stop))
                    break;
                if (atomic_load(&jobs[i].lost)) {
                    atomic_fetch_add(&w->lost, 1);
                    atomic_store(&jobs[i].done, 1);
                    count_settled(w, 1);
                    continue;
                }
                v = w->o.handler(&jobs[i], jobs[i].d, s->work_c, w->o.arg);
                if (v == MIC_DONE && !atomic_load(&jobs[i].lost)) {
                    if (!a.n)
                        a.first_ms = mono_ms();
                    a.jobs[a.n++] = &jobs[i];
                } else if (v == MIC_DONE) {
                    atomic_fetch_add(&w->lost, 1);
                    atomic_store(&jobs[i].done, 1);
                    count_settled(w, 1);
                } else {
                    settle_fail(s, &jobs[i], v);
                }
                if (a.n && mono_ms() - a.first_ms >= ACK_HOLD_MS)
                    acks_flush(s, &a);
            }
            acks_flush(s, &a);
            if (i < cl.n)
                release_rest(s, i);
            pthread_mutex_lock(&s->mu);
            s->jobs = NULL;
            s->n = 0;
            pthread_mutex_unlock(&s->mu);
            free(jobs);
            free(a.jobs);
            free(a.items);
            free(a.res);
        }
        mic_claimed_fini(&cl);
    }
    wake(w);
    return NULL;
}

/* ---- Extender ---- */

static void extend_slot(mic_worker *w, struct slot *s, int64_t period_ms)
{
    struct mic_leased *copies = NULL;
    const struct mic_leased **items = NULL;
    struct mic_item_result *res = NULL;
    size_t n = 0;
    uint64_t gen;
    struct mic_settle_opts so = {.lease_ttl_s = w->o.lease_ttl_s};

    pthread_mutex_lock(&s->mu);
    gen = s->gen;
    if (s->n && mono_ms() - s->renewed_ms >= period_ms &&
        (copies = calloc(s->n, sizeof *copies)) && (items = calloc(s->n, sizeof *items)) &&
        (res = calloc(s->n, sizeof *res))) {
        for (size_t i = 0; i < s->n; i++)
            if (!atomic_load(&s->jobs[i].done) && !atomic_load(&s->jobs[i].lost)) {
                copies[n] = *s->jobs[i].d;
                copies[n].event = copies[n].replay = NULL;
                items[n] = &copies[n];
                n++;
            }
    }
    pthread_mutex_unlock(&s->mu);
    if (n) {
        int rc = mic_extend(w->ext_c, w->group, items, n, &so, res);

        atomic_fetch_add(&w->extends, 1);
        pthread_mutex_lock(&s->mu);
        if (s->gen == gen) {
            if (rc == 0)
                s->renewed_ms = mono_ms();
            for (size_t k = 0; k < n; k++)
                if (res[k].status == MIC_ITEM_LEASE_LOST || res[k].status == MIC_ITEM_NOT_FOUND)
                    for (size_t i = 0; i < s->n; i++)
                        if (s->jobs[i].d->seq == items[k]->seq && s->jobs[i].d->node == items[k]->node)
                            atomic_store(&s->jobs[i].lost, 1);
        }
        pthread_mutex_unlock(&s->mu);
    }
    free(copies);
    free(items);
    free(res);
}

/* The threads have all ended (mic_worker_join says so). */
static int all_ended(mic_worker *w)
{
    return atomic_load(&w->stop) == 2;
}

static void *extender_main(void *arg)
{
    mic_worker *w = arg;
    int64_t period = (int64_t)(w->o.lease_ttl_s * 1000 / 3);
    int64_t tick = period / 2 > 10 ? period / 2 : 10;

    for (;;) {
        struct timespec ts;

        pthread_mutex_lock(&w->mu);
        if (!all_ended(w)) {
            /* on the monotonic clock: a wall-clock step neither
             * stretches nor cuts the extender's period */
            mic_mono_deadline(tick, &ts);
            pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        }
        pthread_mutex_unlock(&w->mu);
        /* After a stop the handlers in flight still get their leases
         * extended until their threads end (join stops this thread). */
        if (all_ended(w))
            break;
        for (int i = 0; i < w->nthreads; i++)
            extend_slot(w, &w->slots[i], period);
    }
    return NULL;
}

/* ---- Start and join ---- */

static void worker_free(mic_worker *w)
{
    if (!w)
        return;
    for (int i = 0; w->slots && i < w->nthreads; i++) {
        mic_client_free(w->slots[i].claim_c);
        mic_client_free(w->slots[i].work_c);
        pthread_mutex_destroy(&w->slots[i].mu);
    }
    free(w->slots);
    mic_client_free(w->ext_c);
    pthread_mutex_destroy(&w->mu);
    pthread_mutex_destroy(&w->fail_mu);
    pthread_cond_destroy(&w->cv);
    free(w->group);
    free(w->worker);
    free(w);
}

int mic_worker_start(const mic_client *c, const struct mic_worker_opts *o, mic_worker **out)
{
    mic_worker *w;

    *out = NULL;
    if (!o || !o->group || !o->handler || o->threads < 0 || o->threads > 1024 || o->max < 0 ||
        o->max > 1000 || o->wait_s < 0 || o->wait_s > 60 || o->lease_ttl_s < 0)
        return -1;
    if (!(w = calloc(1, sizeof *w)))
        return -1;
    pthread_mutex_init(&w->mu, NULL);
    pthread_mutex_init(&w->fail_mu, NULL);
    mic_cond_init_mono(&w->cv);
    w->o = *o;
    w->o.threads = o->threads ? o->threads : 1;
    w->o.max = o->max ? o->max : 1;
    w->o.lease_ttl_s = o->lease_ttl_s > 0 ? o->lease_ttl_s : 30;
    w->o.wait_s = o->wait_s > 0 ? o->wait_s : 20;
    w->nthreads = w->o.threads;
    atomic_store(&w->last_seen_ms, mono_ms());
    if (!(w->group = strdup(o->group)) || !(w->worker = strdup(o->worker ? o->worker : "libmic")) ||
        !(w->slots = calloc((size_t)w->nthreads, sizeof *w->slots)) || mic_client_dup(c, &w->ext_c))
        goto fail;
    for (int i = 0; i < w->nthreads; i++) {
        struct slot *s = &w->slots[i];

        pthread_mutex_init(&s->mu, NULL);
        s->w = w;
        s->index = i;
        if (mic_client_dup(c, &s->claim_c) || mic_client_dup(c, &s->work_c))
            goto fail;
    }
    if (o->stop_on_signals) {
        struct sigaction sa;

        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        atomic_store(&sig_target, w);
        sigaction(SIGINT, &sa, &old_int);
        sigaction(SIGTERM, &sa, &old_term);
    }
    if (pthread_create(&w->ext, NULL, extender_main, w))
        goto fail_sig;
    w->ext_started = 1;
    for (int i = 0; i < w->nthreads; i++) {
        if (pthread_create(&w->slots[i].th, NULL, thread_main, &w->slots[i])) {
            mic_worker_stop(w);
            mic_worker_join(w, NULL);
            return -1;
        }
        w->slots[i].started = 1;
    }
    *out = w;
    return 0;
fail_sig:
    if (o->stop_on_signals) {
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGTERM, &old_term, NULL);
        atomic_store(&sig_target, NULL);
    }
fail:
    worker_free(w);
    return -1;
}

void mic_worker_join(mic_worker *w, struct mic_worker_stats *st)
{
    for (int i = 0; i < w->nthreads; i++)
        if (w->slots[i].started)
            pthread_join(w->slots[i].th, NULL);
    if (w->ext_started) {
        atomic_store(&w->stop, 2);
        wake(w);
        pthread_join(w->ext, NULL);
    }
    if (w->o.stop_on_signals && atomic_load(&sig_target) == w) {
        atomic_store(&sig_target, NULL);
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGTERM, &old_term, NULL);
    }
    if (st) {
        st->claimed = atomic_load(&w->claimed);
        st->acked = atomic_load(&w->acked);
        st->retried = atomic_load(&w->retried);
        st->dead_lettered = atomic_load(&w->dead);
        st->lease_lost = atomic_load(&w->lost);
        st->extends = atomic_load(&w->extends);
        st->claim_failures = atomic_load(&w->claim_failures);
        st->refused = w->refused;
        st->failure = w->failure;
    }
    worker_free(w);
}

int mic_worker_run(const mic_client *c, const struct mic_worker_opts *o,
                   struct mic_worker_stats *st)
{
    mic_worker *w;

    struct mic_worker_stats mine;

    if (mic_worker_start(c, o, &w))
        return -1;
    mic_worker_join(w, st ? st : &mine);
    return (st ? st : &mine)->refused ? -1 : 0;
}
