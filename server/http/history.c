/* history.c - the in-memory ring behind GET /v1/stats/history (history.h).
 *
 * DESIGN: one ring of sample times (t[], 'n' points, the next written at
 * 'head') shared by every group; each tracked group owns a column of the
 * same length (backlog[], age[]), written at the same index, so a point's
 * time and its figures never disagree.  A column's point is "absent"
 * (backlog == ABSENT) when the group did not exist at that sample, and its
 * age is NaN when nothing waited.  Samples read the store in a read
 * transaction outside the mutex and then write one column entry per slot
 * under it, so a render never sees half a sample.  Slots are fixed
 * (MIC_HISTORY_GROUPS); a new group takes a free one or is counted as
 * untracked; a slot whose group has been absent for a whole ring is freed.
 *
 * The figures come from the delivery engine's read side, as /v1/stats's
 * (metrics.c): mic_delivery_figures and mic_delivery_oldest. */
#define _POSIX_C_SOURCE 200809L
#include "history.h"

#include "auth.h"
#include "core/buf.h"
#include "core/clock.h"
#include "engine/delivery.h"
#include "core/err.h"
#include "core/logger.h"
#include "store/catalog.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ABSENT UINT64_MAX

struct slot {
    char *name;                          /* NULL: free */
    size_t len;
    int absent_run;                      /* consecutive samples without it */
    uint64_t backlog[MIC_HISTORY_POINTS];
    float age[MIC_HISTORY_POINTS];       /* seconds; NaN: nothing waited */
};

struct mic_history {
    mic_store *store;
    pthread_mutex_t lock;                /* guards everything below */
    int64_t t[MIC_HISTORY_POINTS];       /* µs since the epoch */
    int head, n;
    int untracked;                       /* groups of the last sample not kept */
    struct slot *slots[MIC_HISTORY_GROUPS];
    /* The sampler thread. */
    pthread_mutex_t run_lock;
    pthread_cond_t run_cv;               /* monotonic (mic_cond_init_mono) */
    pthread_t thread;
    int running, stopping, interval_ms;
};

int mic_history_new(mic_history **out, mic_store *s)
{
    mic_history *h = calloc(1, sizeof *h);

    if (!h)
        return MIC_ENOMEM;
    h->store = s;
    if (pthread_mutex_init(&h->lock, NULL))
        goto fail_free;
    if (pthread_mutex_init(&h->run_lock, NULL))
        goto fail_lock;
    if (mic_cond_init_mono(&h->run_cv))
        goto fail_run_lock;
    *out = h;
    return MIC_OK;
fail_run_lock:
    pthread_mutex_destroy(&h->run_lock);
fail_lock:
    pthread_mutex_destroy(&h->lock);
fail_free:
    free(h);
    return MIC_ENOMEM;
}

void mic_history_free(mic_history *h)
{
    if (!h)
        return;
    mic_history_stop(h);
    for (int i = 0; i < MIC_HISTORY_GROUPS; i++)
        if (h->slots[i]) {
            free(h->slots[i]->name);
            free(h->slots[i]);
        }
    pthread_cond_destroy(&h->run_cv);
    pthread_mutex_destroy(&h->run_lock);
    pthread_mutex_destroy(&h->lock);
    free(h);
}

/* ---- Sampling ---- */

/* One group's figures at a sample (the name is copied out of LMDB). */
struct fig {
    char *name;
    size_t len;
    uint64_t backlog;
    float age;
};

struct gather {
    mic_txn *t;
    int64_t now;
    struct fig *f;
    int n, cap;
    int oom;
};

static int gather_group(void *arg, const char *name, size_t len, const struct mic_group_rec *g)
{
    struct gather *a = arg;
    uint64_t c[MIC_GSTAT_N], seq;
    int64_t at;
    struct fig *f;

    if (a->n == a->cap) {
        int cap = a->cap ? 2 * a->cap : 16;
        struct fig *p = realloc(a->f, (size_t)cap * sizeof *p);

        if (!p) {
            a->oom = 1;
            return 1;
        }
        a->f = p;
        a->cap = cap;
    }
    f = &a->f[a->n];
    if (!(f->name = strndup(name, len))) {
        a->oom = 1;
        return 1;
    }
    a->n++;
    f->len = len;
    mic_delivery_figures(a->t, g->gid, c);
    f->backlog = c[MIC_GSTAT_PENDING] + c[MIC_GSTAT_PROCESSING];
    f->age = mic_delivery_oldest(a->t, g->gid, 0, &at, &seq) == MIC_OK
                 ? (float)mic_age_s(a->now, at) : NAN;
    return 0;
}

/* The index of the slot of group 'name', or -1. */
static int slot_of(mic_history *h, const char *name, size_t len)
{
    for (int i = 0; i < MIC_HISTORY_GROUPS; i++)
        if (h->slots[i] && h->slots[i]->len == len && !memcmp(h->slots[i]->name, name, len))
            return i;
    return -1;
}

/* The index of a new slot for 'f' (its name is moved in), every earlier
 * point absent; -1 when all are taken or memory runs out. */
static int slot_new(mic_history *h, struct fig *f)
{
    for (int i = 0; i < MIC_HISTORY_GROUPS; i++)
        if (!h->slots[i]) {
            struct slot *s = malloc(sizeof *s);

            if (!s)
                return -1;
            s->name = f->name;
            s->len = f->len;
            f->name = NULL;
            s->absent_run = 0;
            for (int k = 0; k < MIC_HISTORY_POINTS; k++) {
                s->backlog[k] = ABSENT;
                s->age[k] = NAN;
            }
            h->slots[i] = s;
            return i;
        }
    return -1;
}

int mic_history_sample(mic_history *h)
{
    struct gather a;
    int rc, at, untracked = 0;
    char seen[MIC_HISTORY_GROUPS] = {0};

    memset(&a, 0, sizeof a);
    if ((rc = mic_txn_begin(h->store, 0, &a.t)))
        return rc;
    a.now = mic_now_us();
    mic_store_group_each(a.t, gather_group, &a);
    mic_txn_abort(a.t);
    if (a.oom) {
        rc = MIC_ENOMEM;
        goto done;
    }
    pthread_mutex_lock(&h->lock);
    at = h->head;
    h->t[at] = a.now;
    for (int i = 0; i < a.n; i++) {
        int k = slot_of(h, a.f[i].name, a.f[i].len);
        struct slot *s;

        if (k < 0 && (k = slot_new(h, &a.f[i])) < 0) {
            untracked++;
            continue;
        }
        s = h->slots[k];
        s->backlog[at] = a.f[i].backlog;
        s->age[at] = a.f[i].age;
        s->absent_run = 0;
        seen[k] = 1;
    }
    for (int k = 0; k < MIC_HISTORY_GROUPS; k++) {
        struct slot *s = h->slots[k];

        if (!s || seen[k])
            continue;
        s->backlog[at] = ABSENT;
        s->age[at] = NAN;
        if (++s->absent_run >= MIC_HISTORY_POINTS) { /* gone for a whole ring */
            free(s->name);
            free(s);
            h->slots[k] = NULL;
        }
    }
    h->head = (at + 1) % MIC_HISTORY_POINTS;
    if (h->n < MIC_HISTORY_POINTS)
        h->n++;
    h->untracked = untracked;
    pthread_mutex_unlock(&h->lock);
done:
    for (int i = 0; i < a.n; i++)
        free(a.f[i].name);
    free(a.f);
    return rc;
}

/* ---- The sampler thread ---- */

static void *sampler(void *arg)
{
    mic_history *h = arg;
    struct timespec ts;
    int rc;

    pthread_mutex_lock(&h->run_lock);
    while (!h->stopping) {
        pthread_mutex_unlock(&h->run_lock);
        if ((rc = mic_history_sample(h)))
            mic_logger_write(MIC_LEVEL_WARN, NULL, "history: sample skipped", "error", mic_strerror(rc),
                    NULL);
        pthread_mutex_lock(&h->run_lock);
        mic_mono_deadline(h->interval_ms, &ts);
        while (!h->stopping && pthread_cond_timedwait(&h->run_cv, &h->run_lock, &ts) == 0)
            ;
    }
    pthread_mutex_unlock(&h->run_lock);
    return NULL;
}

int mic_history_start(mic_history *h, int interval_ms)
{
    int rc = MIC_OK;

    pthread_mutex_lock(&h->run_lock);
    if (!h->running) {
        h->interval_ms = interval_ms > 0 ? interval_ms : MIC_HISTORY_INTERVAL_MS;
        h->stopping = 0;
        if (pthread_create(&h->thread, NULL, sampler, h))
            rc = MIC_ENOMEM;
        else
            h->running = 1;
    }
    pthread_mutex_unlock(&h->run_lock);
    return rc;
}

void mic_history_stop(mic_history *h)
{
    int join;

    pthread_mutex_lock(&h->run_lock);
    join = h->running;
    h->stopping = 1;
    pthread_cond_broadcast(&h->run_cv);
    pthread_mutex_unlock(&h->run_lock);
    if (join)
        pthread_join(h->thread, NULL);
    pthread_mutex_lock(&h->run_lock);
    h->running = 0;
    pthread_mutex_unlock(&h->run_lock);
}

/* ---- GET /v1/stats/history ---- */

static int by_name(const void *a, const void *b)
{
    const struct slot *x = *(struct slot *const *)a, *y = *(struct slot *const *)b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->name, y->name, n);

    return c ? c : (x->len > y->len) - (x->len < y->len);
}

int mic_history_render(mic_history *h, const struct mic_key *key, struct mic_buf *b)
{
    struct slot *list[MIC_HISTORY_GROUPS];
    int nl = 0, first;

    pthread_mutex_lock(&h->lock);
    first = (h->head - h->n + MIC_HISTORY_POINTS) % MIC_HISTORY_POINTS;
    mic_buf_printf(b, "{\"interval_s\":%d,\"points_max\":%d,\"groups_max\":%d,"
                      "\"groups_untracked\":%d,\"times\":[",
                   (h->interval_ms > 0 ? h->interval_ms : MIC_HISTORY_INTERVAL_MS) / 1000,
                   MIC_HISTORY_POINTS, MIC_HISTORY_GROUPS, h->untracked);
    for (int k = 0; k < h->n; k++) {
        if (k)
            mic_buf_add(b, ",", 1);
        mic_buf_json_time(b, h->t[(first + k) % MIC_HISTORY_POINTS]);
    }
    mic_buf_puts(b, "],\"groups\":[");
    for (int i = 0; i < MIC_HISTORY_GROUPS; i++)
        if (h->slots[i] && mic_key_lists(key, 1, h->slots[i]->name, h->slots[i]->len))
            list[nl++] = h->slots[i];
    qsort(list, (size_t)nl, sizeof list[0], by_name);
    for (int i = 0; i < nl; i++) {
        const struct slot *s = list[i];

        mic_buf_puts(b, i ? ",{\"group\":" : "{\"group\":");
        mic_buf_json_str(b, s->name, s->len);
        mic_buf_puts(b, ",\"backlog\":[");
        for (int k = 0; k < h->n; k++) {
            uint64_t v = s->backlog[(first + k) % MIC_HISTORY_POINTS];

            if (k)
                mic_buf_add(b, ",", 1);
            if (v == ABSENT)
                mic_buf_puts(b, "null");
            else
                mic_buf_printf(b, "%llu", (unsigned long long)v);
        }
        mic_buf_puts(b, "],\"oldest_unhandled_age_s\":[");
        for (int k = 0; k < h->n; k++) {
            float v = s->age[(first + k) % MIC_HISTORY_POINTS];

            if (k)
                mic_buf_add(b, ",", 1);
            if (isnan(v))
                mic_buf_puts(b, "null");
            else
                mic_buf_printf(b, "%.3f", (double)v);
        }
        mic_buf_puts(b, "]}");
    }
    pthread_mutex_unlock(&h->lock);
    mic_buf_puts(b, "]}");
    return b->oom ? MIC_ENOMEM : MIC_OK;
}
