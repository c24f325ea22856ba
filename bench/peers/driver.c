/*
 * bench/peers/driver.c - the skeleton of the peer drivers; see driver.h.
 *
 * Sections: the options table and its parser, stopping and messages, the
 * thread pool, latencies, the report, drv_main.
 */
#define _GNU_SOURCE
#include "driver.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define NS_PER_MS   1000000ull
#define NS_PER_S    1000000000ull
#define WAIT_SLICE_MS 200           /* the pool looks at the deadline this often */
#define W5_MIN_EVENTS 10            /* the middle 10% of fewer is empty */
#define AGG_EVENTS_MAX 100000000L   /* W4: aggregates x per-aggregate */

/* ---- Options ---- */

/* One integer option: its name, what it is, where it goes, its default
 * (0: by workload, see usage) and bounds. */
static const struct opt_def {
    const char *name, *arg, *help;
    size_t off;
    long def, lo, hi;
} opt_defs[DRV_O_N] = {
    [DRV_O_EVENTS] = {"events", "N", NULL, offsetof(struct drv_opts, events), 0, 1, 100000000},
    [DRV_O_PRODUCERS] = {"producers", "N", "W1, W2: producer connections",
                         offsetof(struct drv_opts, producers), 32, 1, 1024},
    [DRV_O_BATCH] = {"batch", "N", NULL, offsetof(struct drv_opts, batch), 0, 1, 100000},
    [DRV_O_WORKERS] = {"workers", "N", "W3, W4: worker connections",
                       offsetof(struct drv_opts, workers), 8, 1, 1024},
    [DRV_O_MAX] = {"max", "N", "W3, W4: events per claim", offsetof(struct drv_opts, max), 32, 1,
                   100000},
    [DRV_O_AGGREGATES] = {"aggregates", "A", "W4: aggregates", offsetof(struct drv_opts, aggregates),
                          2000, 1, 10000000},
    [DRV_O_PER_AGG] = {"per-aggregate", "K", "W4: versions per aggregate",
                       offsetof(struct drv_opts, per_agg), 25, 1, 1000000},
    [DRV_O_PAYLOAD] = {"payload-bytes", "P", "event JSON size",
                       offsetof(struct drv_opts, payload_bytes), 300, 0, 1000000},
    [DRV_O_SECONDS] = {"max-seconds", "S", "stop the whole run after S seconds",
                       offsetof(struct drv_opts, max_seconds), 300, 1, 86400},
};

/* --events by workload (W4 has aggregates x per-aggregate). */
static const long events_def[6] = {0, 50000, 200000, 100000, 0, 1000000};

enum { OPT_ADDR = 256, OPT_WORKLOAD, OPT_HELP };

static long batch_def(const struct drv_peer *p, int w)
{
    return w == 1 ? 1 : w == 5 && p->w5_batch ? p->w5_batch : 100;
}

/* The bounds of option 'i' for peer 'p'. */
static void opt_bounds(const struct drv_peer *p, int i, long *lo, long *hi)
{
    const struct drv_bound *b;

    *lo = opt_defs[i].lo;
    *hi = opt_defs[i].hi;
    for (b = p->bounds; b && b->hi; b++)
        if ((int)b->opt == i) {
            *lo = b->lo;
            *hi = b->hi;
        }
}

static void usage(const struct drv_peer *p, FILE *f)
{
    long lo, hi;
    int i;

    fprintf(f,
            "usage: peer_%s --addr %s --workload W1|W2|W3|W4|W5 [--events N]\n"
            "       [--producers N] [--batch N] [--workers N] [--max N] [--aggregates A]\n"
            "       [--per-aggregate K] [--payload-bytes P] [--max-seconds S]\n"
            "  --addr %-17s %s\n"
            "  --workload W1..W5        the workload\n",
            p->name, p->addr_arg, p->addr_arg, p->addr_help);
    for (i = 0; i < DRV_O_N; i++) {
        const struct opt_def *o = &opt_defs[i];
        char flag[32];

        opt_bounds(p, i, &lo, &hi);
        snprintf(flag, sizeof flag, "--%s %s", o->name, o->arg);
        fprintf(f, "  %-24s ", flag);
        if (i == DRV_O_EVENTS)
            fprintf(f, "W1 %ld, W2 %ld, W3 %ld prefilled, W5 %ld stored\n"
                    "%27s(W4 moves aggregates x per-aggregate)", events_def[1], events_def[2],
                    events_def[3], events_def[5], "");
        else if (i == DRV_O_BATCH && p->w5_batch)
            fprintf(f, "W2: events per request (%ld; W1 %ld); W5: page (%ld)", batch_def(p, 2),
                    batch_def(p, 1), batch_def(p, 5));
        else if (i == DRV_O_BATCH)
            fprintf(f, "W2: events per request (%ld; W1 %ld)", batch_def(p, 2), batch_def(p, 1));
        else
            fprintf(f, "%s (%ld)", o->help, o->def);
        fprintf(f, " [%ld, %ld]\n", lo, hi);
    }
    fprintf(f, "%sPrints one JSON line; exit 0 on success, 1 on failure, 2 on a usage error.\n",
            p->help ? p->help : "");
}

/* Parse all of 's' as an integer in [lo, hi] into *out; 0 or -1. */
static int num_parse(const char *s, long lo, long hi, long *out)
{
    char *e;
    long v;

    errno = 0;
    v = strtol(s, &e, 10);
    if (errno || e == s || *e || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* HOST:PORT (after an optional "scheme://", HOST maybe in []) into o. */
static int addr_split(struct drv_opts *o)
{
    const char *a = strstr(o->addr, "://"), *colon;
    long port;
    size_t n;

    a = a ? a + 3 : o->addr;
    colon = strrchr(a, ':');
    if (!colon || colon == a || (n = (size_t)(colon - a)) >= sizeof o->host ||
        num_parse(colon + 1, 1, 65535, &port))
        return -1;
    if (n > 2 && a[0] == '[' && a[n - 1] == ']') {
        a++;
        n -= 2;
    }
    memcpy(o->host, a, n);
    o->host[n] = '\0';
    o->port = (int)port;
    return 0;
}

/* 1..5 for "W1".."W5" (or "w1".."w5"), 0 for anything else. */
static int workload_parse(const char *s)
{
    if (strlen(s) != 2 || (s[0] != 'W' && s[0] != 'w') || s[1] < '1' || s[1] > '5')
        return 0;
    return s[1] - '0';
}

/* Fill d->o from argv: 0, 1 after --help, -1 on a usage error (said). */
static int opts_parse(struct drv *d, int argc, char **argv)
{
    const struct drv_peer *p = d->peer;
    struct drv_opts *o = &d->o;
    struct option lopts[DRV_O_N + 4];
    bool given[DRV_O_N] = {false};
    long lo, hi, v;
    int i, ch;

    memset(o, 0, sizeof *o);
    for (i = 0; i < DRV_O_N; i++) {
        lopts[i] = (struct option){opt_defs[i].name, required_argument, NULL, i};
        *(long *)((char *)o + opt_defs[i].off) = opt_defs[i].def;
    }
    lopts[i++] = (struct option){"addr", required_argument, NULL, OPT_ADDR};
    lopts[i++] = (struct option){"workload", required_argument, NULL, OPT_WORKLOAD};
    lopts[i++] = (struct option){"help", no_argument, NULL, OPT_HELP};
    lopts[i] = (struct option){NULL, 0, NULL, 0};
    while ((ch = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
        if (ch == OPT_HELP) {
            usage(p, stdout);
            return 1;
        }
        if (ch == OPT_ADDR) {
            o->addr = optarg;
        } else if (ch == OPT_WORKLOAD) {
            if (!(o->workload = workload_parse(optarg))) {
                drv_say("--workload must be one of W1 W2 W3 W4 W5, not '%s'", optarg);
                return -1;
            }
        } else if (ch >= 0 && ch < DRV_O_N) {
            opt_bounds(p, ch, &lo, &hi);
            if (num_parse(optarg, lo, hi, &v)) {
                drv_say("--%s must be an integer in [%ld, %ld], not '%s'", opt_defs[ch].name,
                        lo, hi, optarg);
                return -1;
            }
            *(long *)((char *)o + opt_defs[ch].off) = v;
            given[ch] = true;
        } else {
            return -1;              /* getopt said why */
        }
    }
    if (optind < argc) {
        drv_say("unexpected argument '%s'", argv[optind]);
        return -1;
    }
    if (!o->addr || !o->workload) {
        drv_say("--addr and --workload are required");
        return -1;
    }
    if (!strcmp(p->addr_arg, "HOST:PORT") && addr_split(o)) {
        drv_say("--addr must be HOST:PORT, not '%s'", o->addr);
        return -1;
    }
    if (!given[DRV_O_BATCH])
        o->batch = batch_def(p, o->workload);
    if (o->workload == 4) {
        if (o->aggregates * o->per_agg > AGG_EVENTS_MAX) {
            drv_say("--aggregates x --per-aggregate is too large");
            return -1;
        }
        if (given[DRV_O_EVENTS] && o->events != o->aggregates * o->per_agg) {
            drv_say("W4 has --aggregates x --per-aggregate events");
            return -1;
        }
        o->events = o->aggregates * o->per_agg;
    } else if (!given[DRV_O_EVENTS]) {
        o->events = events_def[o->workload];
    }
    if (o->workload == 5 && o->events < W5_MIN_EVENTS) {
        drv_say("W5 needs at least %d events", W5_MIN_EVENTS);
        return -1;
    }
    return 0;
}

/* ---- Stopping and messages ---- */

/* Lock-free, so the signal handler may store it. */
static atomic_int stop_requested;
static atomic_int log_budget;
static char log_prog[64] = "peer";

void drv_request_stop(int why)
{
    int zero = 0;

    atomic_compare_exchange_strong(&stop_requested, &zero, why);
}

int drv_stop_reason(void)
{
    return atomic_load_explicit(&stop_requested, memory_order_relaxed);
}

bool drv_stopping(const struct drv *d)
{
    if (atomic_load_explicit(&stop_requested, memory_order_relaxed))
        return true;
    if (peer_now_ns() >= d->deadline_ns) {
        drv_request_stop(1);
        return true;
    }
    return false;
}

bool drv_timed_out(void)
{
    int why = drv_stop_reason();

    return why == 1 || why == 2;
}

static void on_signal(int sig)
{
    (void)sig;
    drv_request_stop(2);
}

/* Ignore SIGPIPE; SIGINT and SIGTERM request stop reason 2 and, with
 * 'interrupt', make blocking calls fail with EINTR instead of restarting. */
static void signals_init(bool interrupt)
{
    struct sigaction sa = {.sa_handler = on_signal};

    sigemptyset(&sa.sa_mask);
    sa.sa_flags = interrupt ? 0 : SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

void drv_say(const char *fmt, ...)
{
    char line[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s\n", log_prog, line);
}

bool drv_may_log(void)
{
    int left = atomic_fetch_sub_explicit(&log_budget, 1, memory_order_relaxed);

    if (left == 1)
        drv_say("(further error messages suppressed)");
    return left > 1;
}

/* ---- Threads ---- */

static void *pool_main(void *arg)
{
    struct drv_thread *t = arg;
    struct drv_pool *p = &t->d->pool;

    p->fn(t);
    drv_thread_ready(t);            /* a thread that ended before it was ready */
    t->end_ns = peer_now_ns();
    pthread_mutex_lock(&p->mu);
    p->left--;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

void drv_thread_ready(struct drv_thread *t)
{
    struct drv_pool *p = &t->d->pool;

    if (t->ready)
        return;
    t->ready = true;
    pthread_mutex_lock(&p->mu);
    p->ready++;
    pthread_cond_broadcast(&p->cv);
    while (!p->go)
        pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

static struct drv_thread *item(void *items, size_t size, long i)
{
    return (struct drv_thread *)((char *)items + (size_t)i * size);
}

double drv_threads_run(struct drv *d, void *items, size_t size, long n,
                       void (*fn)(struct drv_thread *t), unsigned flags)
{
    struct drv_pool *p = &d->pool;
    uint64_t t0, last = 0;
    long i, started = 0;
    void *own = NULL;
    char why[64];

    if (!items) {
        if (!(items = own = calloc((size_t)n, sizeof(struct drv_thread)))) {
            drv_say("out of memory");
            atomic_fetch_add(&d->errors, 1);
            drv_request_stop(3);
            return 0;
        }
        size = sizeof(struct drv_thread);
    }
    p->fn = fn;
    p->ready = 0;
    p->go = !(flags & DRV_READY_FIRST);
    t0 = peer_now_ns();
    for (i = 0; i < n; i++) {
        struct drv_thread *t = item(items, size, i);

        t->d = d;
        t->id = i;
        t->started = t->ready = false;
        t->end_ns = t0;
    }
    pthread_mutex_lock(&p->mu);
    p->left = 0;
    for (i = 0; i < n; i++) {
        struct drv_thread *t = item(items, size, i);
        int rc = pthread_create(&t->th, NULL, pool_main, t);

        if (rc) {
            strerror_r(rc, why, sizeof why);
            drv_say("cannot start a thread: %s", why);
            atomic_fetch_add(&d->errors, 1);
            drv_request_stop(3);
            break;
        }
        t->started = true;
        started++;
        p->left++;
    }
    if (!p->go) {
        while (p->ready < started)
            pthread_cond_wait(&p->cv, &p->mu);
        p->go = true;
        pthread_cond_broadcast(&p->cv);
        t0 = peer_now_ns();
    }
    while (p->left > 0) {
        uint64_t wake = peer_now_ns() + WAIT_SLICE_MS * NS_PER_MS;
        struct timespec ts = {.tv_sec = (time_t)(wake / NS_PER_S),
                              .tv_nsec = (long)(wake % NS_PER_S)};

        pthread_cond_timedwait(&p->cv, &p->mu, &ts);
        if (p->left == 0)
            break;
        if (peer_now_ns() >= d->deadline_ns)
            drv_request_stop(1);
        if (drv_stop_reason() && d->peer->cancel) {
            pthread_mutex_unlock(&p->mu);
            for (i = 0; i < n; i++)
                if (item(items, size, i)->started)
                    d->peer->cancel(item(items, size, i));
            pthread_mutex_lock(&p->mu);
        }
    }
    pthread_mutex_unlock(&p->mu);
    for (i = 0; i < n; i++) {
        struct drv_thread *t = item(items, size, i);

        if (!t->started)
            continue;
        pthread_join(t->th, NULL);
        if (t->end_ns > last)
            last = t->end_ns;
    }
    free(own);
    return last > t0 ? (double)(last - t0) / 1e9 : 0;
}

/* ---- Latencies ---- */

static int dbl_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* Index of the nearest-rank 'pct' percentile in n > 0 sorted values. */
static size_t rank(size_t n, unsigned pct)
{
    return (n * pct + 99) / 100 - 1;
}

void drv_lat_init(struct drv_lat *l, long cap)
{
    free(l->ms);
    if (cap < 1)
        cap = 1;
    l->ms = calloc((size_t)cap, sizeof *l->ms);
    l->cap = l->ms ? cap : 0;
    atomic_init(&l->n, 0);
}

void drv_lat_add(struct drv_lat *l, double ms)
{
    long i = atomic_fetch_add_explicit(&l->n, 1, memory_order_relaxed);

    if (i < l->cap)
        l->ms[i] = ms;
}

void drv_lat_since(struct drv_lat *l, uint64_t t0_ns)
{
    drv_lat_add(l, (double)(peer_now_ns() - t0_ns) / 1e6);
}

void drv_lat_pct(struct drv_lat *l, double *p50, double *p99)
{
    long n = atomic_load(&l->n);

    if (n > l->cap)
        n = l->cap;
    if (n <= 0) {
        *p50 = *p99 = NAN;
        return;
    }
    qsort(l->ms, (size_t)n, sizeof *l->ms, dbl_cmp);
    *p50 = l->ms[rank((size_t)n, 50)];
    *p99 = l->ms[rank((size_t)n, 99)];
}

/* ---- Events ---- */

size_t drv_event_put(const struct drv *d, char *out, uint64_t n, long agg, long ver,
                     uint64_t ts_us)
{
    return peer_event_put(out, d->ev_head, d->ev_head_len, n, PEER_TOPIC, agg, ver, ts_us,
                          (size_t)d->o.payload_bytes);
}

/* ---- Report ---- */

/* Write 's' to stdout as a JSON string. */
static void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;

        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

void drv_put_long(const char *name, long long v)
{
    printf(",\"%s\":%lld", name, v);
}

void drv_put_str(const char *name, const char *s)
{
    printf(",\"%s\":", name);
    json_str(s);
}

void drv_put_ms(const char *name, double v)
{
    if (isnan(v))
        printf(",\"%s\":null", name);
    else
        printf(",\"%s\":%.3f", name, v);
}

void drv_put_num(const char *name, double v, int decimals)
{
    printf(",\"%s\":%.*f", name, decimals, v);
}

void drv_put_bool(const char *name, bool v)
{
    printf(",\"%s\":%s", name, v ? "true" : "false");
}

/* The one JSON line on stdout (driver.h says its shape). */
static void report(struct drv *d)
{
    double p50, p99;

    drv_lat_pct(&d->lat, &p50, &p99);
    printf("{\"peer\":");
    json_str(d->peer->name);
    printf(",\"version\":");
    json_str(d->version ? d->version : "?");
    printf(",\"durability\":");
    json_str(d->durability ? d->durability : "?");
    printf(",\"workload\":\"W%d\"", d->o.workload);
    if (d->peer->fields)
        d->peer->fields(d, DRV_PART_HEAD);
    printf(",\"events\":%lld,\"seconds\":%.3f,\"events_per_s\":%.1f", d->events, d->seconds,
           d->seconds > 0 ? (double)d->events / d->seconds : 0.0);
    drv_put_ms("p50_ms", p50);
    drv_put_ms("p99_ms", p99);
    printf(",\"duplicates\":%lld,\"missing\":%lld,\"order_violations\":%lld", d->dups,
           d->missing, d->disorder);
    if (d->peer->fields)
        d->peer->fields(d, DRV_PART_TAIL);
    printf("}\n");
    fflush(stdout);
}

/* ---- Main ---- */

/* True when the run passed: open, run and close succeeded, no error, no
 * stop, and none of the tallies in peer->fail_on is off. */
static bool passed(const struct drv *d, int close_rc)
{
    unsigned f = d->peer->fail_on;

    if (d->rc != DRV_OK || close_rc || atomic_load(&d->errors) || drv_stop_reason())
        return false;
    return !((f & DRV_FAIL_DUPS) && d->dups) && !((f & DRV_FAIL_MISSING) && d->missing) &&
           !((f & DRV_FAIL_DISORDER) && d->disorder) &&
           !((f & DRV_FAIL_SHORT) && d->events != d->target);
}

/* A fresh run id: 8 random bytes in hex. */
static void runid_make(struct drv *d)
{
    unsigned char rnd[8];
    size_t i;

    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        uint64_t t = peer_now_ns() ^ ((uint64_t)getpid() << 32);

        memcpy(rnd, &t, sizeof rnd);
    }
    for (i = 0; i < sizeof rnd; i++)
        snprintf(d->runid + 2 * i, 3, "%02x", rnd[i]);
}

int drv_main(const struct drv_peer *peer, int argc, char **argv)
{
    pthread_condattr_t ca;
    struct drv *d;
    int rc, close_rc, status;

    snprintf(log_prog, sizeof log_prog, "peer_%s", peer->name);
    atomic_store(&log_budget, peer->log_budget);
    if (!(d = calloc(1, peer->size))) {
        drv_say("out of memory");
        return 1;
    }
    d->peer = peer;
    if ((rc = opts_parse(d, argc, argv))) {
        if (rc < 0)
            usage(peer, stderr);
        free(d);
        return rc < 0 ? 2 : 0;
    }
    signals_init(peer->interrupt);
    d->deadline_ns = peer_now_ns() + (uint64_t)d->o.max_seconds * NS_PER_S;
    runid_make(d);
    d->ev_head_len = (size_t)snprintf(d->ev_head, sizeof d->ev_head, "{\"event_id\":\"%s-%s-",
                                      peer->tag, d->runid);
    d->ev_max = peer_event_max(d->ev_head_len, sizeof PEER_TOPIC - 1, (size_t)d->o.payload_bytes);
    d->target = d->o.events;
    atomic_init(&d->errors, 0);
    pthread_mutex_init(&d->pool.mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&d->pool.cv, &ca);
    pthread_condattr_destroy(&ca);

    d->rc = peer->open(d);
    if (d->rc == DRV_OK)
        d->rc = peer->run[d->o.workload - 1](d);
    if (d->rc != DRV_ABORT)
        report(d);
    close_rc = peer->close(d);
    status = passed(d, close_rc) ? 0 : 1;

    free(d->lat.ms);
    free(d->lat2.ms);
    pthread_cond_destroy(&d->pool.cv);
    pthread_mutex_destroy(&d->pool.mu);
    free(d);
    return status;
}
