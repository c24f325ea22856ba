/*
 * bench/peers/redis.c - the Redis Streams peer of the side-by-side benchmark
 * (issue 7), driven with hiredis.
 *
 * Owns: the mapping of the workloads W1..W5 onto Redis Streams and
 * consumer groups, their correctness counting and the fields the report
 * line adds; the command line, the threads, the latencies and the report
 * line itself are the skeleton's (driver.h).
 *
 *   peer_redis --addr 127.0.0.1:6390 --workload W1 [--events N] ...
 *
 * The server is started by the caller, e.g.
 *   redis-server --port P --bind 127.0.0.1 --dir TMP --appendonly yes
 *       --appendfsync always --save '' --daemonize no
 * and the report states what CONFIG GET says about appendonly/appendfsync.
 *
 * MAPPING
 *   W1  --producers threads, one connection each, one synchronous
 *       XADD <stream> * e <json> per event; latency per XADD.
 *   W2  the same with pipelines of --batch XADD (no MULTI/EXEC: every XADD
 *       is durable on its own; a batch is acknowledged when its last reply
 *       arrives); latency per pipeline.
 *   W3  one stream with a consumer group, prefilled untimed; --workers
 *       threads loop XREADGROUP COUNT --max ... > then one XACK with all the
 *       ids they got.  The 30 s lease is the pending-entries list plus
 *       XAUTOCLAIM min-idle 30000, which a worker tries once when it runs
 *       dry; it never hands anything back here (no worker dies).
 *   W4  one stream and one consumer group per aggregate (Redis has no
 *       per-key order inside a stream).  Worker w owns the aggregates with
 *       k % workers == w and claims with one XREADGROUP COUNT 1 over up to
 *       --max of its streams (one head per aggregate, as MIC's ordered
 *       claim), then pipelines one XACK per stream; the next version of an
 *       aggregate is read only after the previous one was acknowledged.
 *       Versions are checked per aggregate.
 *   W5  --events XADD with explicit ids <unix ms>-<seq> taken from the
 *       producer's CLOCK_REALTIME (one connection, pipelines of 1000,
 *       untimed), then the middle 10% of the id time span read with XRANGE
 *       in pages of 1000, the next page starting after the last id ("(id");
 *       latency per page.
 *
 * DESIGN
 * Threads, one blocking hiredis connection each; they connect first and
 * then wait for each other (DRV_READY_FIRST), so the clock starts when
 * every connection is up and stops when the last thread ends.  Shared state is
 * only atomics: the work dispenser run.next, the counters, the latency
 * arrays (each slot written by one thread, index from an atomic counter)
 * and run.seen, one byte per event number, bumped atomically on every
 * delivery (the second bump of a byte is a duplicate).  An event's number
 * is recovered from its JSON (event_id "rd-<runid>-<n>"), never from the
 * stream id.  Every key carries the run id, so each run starts empty; the
 * keys are UNLINKed at the end, untimed.
 *
 * The whole run (prefill included) stops by itself at --max-seconds; a
 * stopped run is reported with "timed_out":true and exits 1.
 * Exit 0 when every event was handled with no error, duplicate, missing
 * event or order violation; 1 otherwise; 2 on a usage error.
 */
#define _GNU_SOURCE
#include <hiredis/hiredis.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "driver.h"

#define FILL_PIPE      1000     /* XADDs per pipeline when prefilling */
#define PAGE           1000     /* XRANGE page size in W5 */
#define LEASE_MS       "30000"  /* the 30 s lease, as XAUTOCLAIM min-idle */
#define CONNECT_S      5
#define IO_TIMEOUT_S   30       /* a reply slower than this is an error */
#define KEY_MAX        96

/* ---- Run state ---- */

/* d.lat is the request latency, d.lat2 the ack latency of W3 and W4. */
struct run {
    struct drv d;               /* first: the skeleton's */
    char key[KEY_MAX];          /* the stream (W1, W2, W3, W5) or key prefix (W4) */
    char (*akeys)[KEY_MAX];     /* W4: one stream per aggregate */
    long total;                 /* events the workload handles */
    atomic_long next;           /* work dispenser */
    atomic_long done, dups, disorder, claims;
    _Atomic unsigned char *seen;
    long *last_version;         /* W4: per aggregate, written by its owner only */
    uint64_t *ts;               /* W5: id milliseconds of event n */
    uint64_t w5_ms, w5_seq;     /* W5: last id handed out */
    redisContext *c0;           /* main's connection: setup, checks, cleanup */
    bool described;             /* the server answered INFO: the keys get cleaned up */
    long unacked;               /* W3, W4: pending entries left, -1 unknown */
    char version[64], dur[256];
    char extra[512];            /* the workload's ,"name":value pairs */
    char error[256];
};

/* ---- Small helpers ---- */


static uint64_t realtime_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static double ms_between(uint64_t a, uint64_t b)
{
    return (double)(b - a) / 1e6;
}

/* The decimal number at p; -1 when there is none. */
static long dec_at(const char *p)
{
    long v = 0;

    if (*p < '0' || *p > '9')
        return -1;
    while (*p >= '0' && *p <= '9')
        v = v * 10 + (*p++ - '0');
    return v;
}

/* ---- Events ---- */

/* The event number in a stored event, -1 if it is not one of this run's. */
static long event_seq(const struct run *r, const redisReply *v)
{
    if (!v || v->type != REDIS_REPLY_STRING || v->len <= r->d.ev_head_len ||
        memcmp(v->str, r->d.ev_head, r->d.ev_head_len))
        return -1;
    return dec_at(v->str + r->d.ev_head_len);
}

/* Count the delivery of event n: a second delivery is a duplicate, a
 * number out of range an error. */
static void event_seen(struct run *r, long n)
{
    if (n < 0 || n >= r->total) {
        atomic_fetch_add(&r->d.errors, 1);
        return;
    }
    if (atomic_fetch_add_explicit(&r->seen[n], 1, memory_order_relaxed))
        atomic_fetch_add(&r->dups, 1);
}

static long events_missing(const struct run *r)
{
    long n, miss = 0;

    for (n = 0; n < r->total; n++)
        miss += r->seen[n] == 0;
    return miss;
}

/* ---- Connections ---- */

/* A new connection, or NULL (said why). */
static redisContext *conn_open(const struct run *r)
{
    struct timeval ct = {CONNECT_S, 0}, io = {IO_TIMEOUT_S, 0};
    redisContext *c = redisConnectWithTimeout(r->d.o.host, r->d.o.port, ct);

    if (!c || c->err) {
        drv_say("connect %s:%d: %s", r->d.o.host, r->d.o.port, c ? c->errstr : "out of memory");
        if (c)
            redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, io);
    return c;
}

/* True when 'rp' is a reply of type 'type'; otherwise says why with 'what'
 * (a lost connection or an error reply). */
static bool reply_is(redisContext *c, const redisReply *rp, int type, const char *what)
{
    if (!rp) {
        drv_say("%s: %s", what, c->errstr[0] ? c->errstr : "no reply");
        return false;
    }
    if (rp->type == REDIS_REPLY_ERROR) {
        drv_say("%s: %s", what, rp->str);
        return false;
    }
    if (rp->type != type) {
        drv_say("%s: unexpected reply type %d", what, rp->type);
        return false;
    }
    return true;
}

/* Run one command given as argv; returns the reply (caller frees) or NULL
 * after saying why, when it is not of 'type'. */
static redisReply *command(redisContext *c, int type, const char *what, int argc,
                           const char **argv)
{
    redisReply *rp = redisCommandArgv(c, argc, argv, NULL);

    if (!reply_is(c, rp, type, what)) {
        if (rp)
            freeReplyObject(rp);
        return NULL;
    }
    return rp;
}

/* Server version and durability settings into 'version' and 'dur'. */
static int server_describe(redisContext *c, char *version, size_t vlen, char *dur, size_t dlen)
{
    const char *info[] = {"INFO", "server"};
    const char *ga[] = {"CONFIG", "GET", "appendonly"};
    const char *gf[] = {"CONFIG", "GET", "appendfsync"};
    char aof[16] = "?", fsync[16] = "?";
    redisReply *rp;
    const char *p;

    if (!(rp = command(c, REDIS_REPLY_STRING, "INFO server", 2, info)))
        return -1;
    p = strstr(rp->str, "redis_version:");
    snprintf(version, vlen, "%.*s", p ? (int)strcspn(p + 14, "\r\n") : 1, p ? p + 14 : "?");
    freeReplyObject(rp);
    if ((rp = command(c, REDIS_REPLY_ARRAY, "CONFIG GET appendonly", 3, ga))) {
        if (rp->elements == 2)
            snprintf(aof, sizeof aof, "%s", rp->element[1]->str);
        freeReplyObject(rp);
    }
    if ((rp = command(c, REDIS_REPLY_ARRAY, "CONFIG GET appendfsync", 3, gf))) {
        if (rp->elements == 2)
            snprintf(fsync, sizeof fsync, "%s", rp->element[1]->str);
        freeReplyObject(rp);
    }
    if (!strcmp(aof, "yes") && !strcmp(fsync, "always"))
        snprintf(dur, dlen, "appendonly yes, appendfsync always: every write command "
                 "(XADD, XREADGROUP's delivery, XACK) is appended and fsynced to the AOF "
                 "before its reply is sent");
    else
        snprintf(dur, dlen, "appendonly %s, appendfsync %s: writes are NOT fsynced "
                 "before the reply", aof, fsync);
    return 0;
}

/* ---- Prefill (untimed) ---- */

/* One XADD of a prefill: make() fills key, id ("*" or explicit) and ev. */
struct fill_item {
    const char *key;
    char id[48];
    char *ev;
    size_t evlen;
};

typedef void (*fill_make)(struct run *r, long i, struct fill_item *it);

/* XADD events 0..count-1 as make() describes them, in pipelines of
 * FILL_PIPE on connection 'c'.  Returns 0, or -1 (said why). */
static int fill(struct run *r, redisContext *c, long count, fill_make make)
{
    struct fill_item *it = calloc(FILL_PIPE, sizeof *it);
    char *evbuf = malloc((size_t)FILL_PIPE * r->d.ev_max);
    uint64_t t0 = peer_now_ns();
    long i = 0, j, m;
    int rc = -1;

    if (!it || !evbuf)
        goto out;
    for (j = 0; j < FILL_PIPE; j++)
        it[j].ev = evbuf + (size_t)j * r->d.ev_max;
    while (i < count) {
        if (drv_stopping(&r->d))
            goto out;
        m = count - i < FILL_PIPE ? count - i : FILL_PIPE;
        for (j = 0; j < m; j++) {
            const char *argv[5] = {"XADD", NULL, it[j].id, "e", it[j].ev};
            size_t argl[5] = {4, 0, 0, 1, 0};

            make(r, i + j, &it[j]);
            argv[1] = it[j].key;
            argl[1] = strlen(it[j].key);
            argl[2] = strlen(it[j].id);
            argl[4] = it[j].evlen;
            redisAppendCommandArgv(c, 5, argv, argl);
        }
        for (j = 0; j < m; j++) {
            redisReply *rp = NULL;
            bool ok;

            redisGetReply(c, (void **)&rp);
            ok = reply_is(c, rp, REDIS_REPLY_STRING, "prefill XADD");
            if (rp)
                freeReplyObject(rp);
            if (!ok)
                goto out;
        }
        i += m;
    }
    drv_say("prefilled %ld events in %.1f s", count, ms_between(t0, peer_now_ns()) / 1e3);
    rc = 0;
out:
    free(evbuf);
    free(it);
    return rc;
}

/* W3: event i into the one stream. */
static void make_plain(struct run *r, long i, struct fill_item *it)
{
    it->key = r->key;
    strcpy(it->id, "*");
    it->evlen = drv_event_put(&r->d, it->ev, (uint64_t)i, -1, 0, 0);
}

/* W4: event i is version i / A + 1 of aggregate i % A, in that aggregate's
 * stream, so each stream receives its versions in order. */
static void make_ordered(struct run *r, long i, struct fill_item *it)
{
    long a = r->d.o.aggregates, k = i % a;

    it->key = r->akeys[k];
    strcpy(it->id, "*");
    it->evlen = drv_event_put(&r->d, it->ev, (uint64_t)i, k, i / a + 1, 0);
}

/* W5: event i with the explicit id <producer clock ms>-<seq>, strictly
 * increasing; its milliseconds are kept in r->ts[i]. */
static void make_timed(struct run *r, long i, struct fill_item *it)
{
    uint64_t ms = realtime_ms();

    if (ms <= r->w5_ms && i > 0) {
        ms = r->w5_ms;
        r->w5_seq++;
    } else {
        r->w5_seq = 0;
    }
    r->w5_ms = ms;
    r->ts[i] = ms;
    it->key = r->key;
    snprintf(it->id, sizeof it->id, "%llu-%llu", (unsigned long long)ms,
             (unsigned long long)r->w5_seq);
    it->evlen = drv_event_put(&r->d, it->ev, (uint64_t)i, -1, 0, 0);
}

/* ---- Threads ---- */

/* Connect, then wait for the others; NULL (counted as an error) when the
 * connection failed. */
static redisContext *thread_start(struct drv_thread *t)
{
    struct run *r = (struct run *)t->d;
    redisContext *c = conn_open(r);

    if (!c)
        atomic_fetch_add(&r->d.errors, 1);
    drv_thread_ready(t);
    return c;
}

/* Run 'fn' on n threads that each connect first (thread_start); returns the
 * seconds from the moment all were connected to the end of the last one. */
static double threads_run(struct run *r, long n, void (*fn)(struct drv_thread *t))
{
    return drv_threads_run(&r->d, NULL, 0, n, fn, DRV_READY_FIRST);
}

/* ---- W1, W2: durable enqueue ---- */

static void producer_main(struct drv_thread *w)
{
    struct run *r = (struct run *)w->d;
    long batch = r->d.o.batch, first, m, j, ok;
    char *buf = malloc((size_t)batch * r->d.ev_max);
    redisContext *c = thread_start(w);
    uint64_t t0;

    if (!c || !buf)
        goto out;
    while (!drv_stopping(&r->d)) {
        first = atomic_fetch_add(&r->next, batch);
        if (first >= r->total)
            break;
        m = r->total - first < batch ? r->total - first : batch;
        t0 = peer_now_ns();
        for (j = 0; j < m; j++) {
            char *ev = buf + (size_t)j * r->d.ev_max;
            const char *argv[5] = {"XADD", r->key, "*", "e", ev};
            size_t argl[5] = {4, strlen(r->key), 1, 1, 0};

            argl[4] = drv_event_put(&r->d, ev, (uint64_t)(first + j), -1, 0, 0);
            redisAppendCommandArgv(c, 5, argv, argl);
        }
        for (ok = 0, j = 0; j < m; j++) {
            redisReply *rp = NULL;

            redisGetReply(c, (void **)&rp);
            if (reply_is(c, rp, REDIS_REPLY_STRING, "XADD"))
                ok++;
            if (rp)
                freeReplyObject(rp);
            else
                break;          /* the connection is gone */
        }
        drv_lat_add(&r->d.lat, ms_between(t0, peer_now_ns()));
        atomic_fetch_add(&r->done, ok);
        if (ok < m) {
            atomic_fetch_add(&r->d.errors, m - ok);
            break;
        }
    }
out:
    if (c)
        redisFree(c);
    free(buf);
}

static int run_enqueue(struct run *r, redisContext *c0)
{
    const char *xlen[] = {"XLEN", r->key};
    redisReply *rp;
    long stored = -1;

    r->total = r->d.target = r->d.o.events;
    drv_lat_init(&r->d.lat, r->total / r->d.o.batch + 1);
    r->d.seconds = threads_run(r, r->d.o.producers, producer_main);
    r->d.events = atomic_load(&r->done);
    if ((rp = command(c0, REDIS_REPLY_INTEGER, "XLEN", 2, xlen))) {
        stored = rp->integer;
        freeReplyObject(rp);
    }
    /* Every acknowledged XADD must be in the stream exactly once. */
    if (stored >= 0) {
        r->d.missing = stored < r->d.events ? r->d.events - stored : 0;
        r->d.dups = stored > r->d.events ? stored - r->d.events : 0;
    }
    snprintf(r->extra, sizeof r->extra,
             ",\"producers\":%ld,\"batch\":%ld,\"requests\":%ld,\"stored\":%ld",
             r->d.o.producers, r->d.o.batch, atomic_load(&r->d.lat.n), stored);
    return stored >= 0 ? 0 : -1;
}

/* ---- W3: work cycle ---- */

/* Count the entries of one stream's part of an XREADGROUP/XAUTOCLAIM
 * reply and put their ids into ids[*n...]. */
static void take_entries(struct run *r, const redisReply *ents, const char **ids,
                         size_t *idl, long *n)
{
    size_t i;

    for (i = 0; i < ents->elements; i++) {
        const redisReply *e = ents->element[i], *f;

        if (e->type != REDIS_REPLY_ARRAY || e->elements < 2 ||
            e->element[0]->type != REDIS_REPLY_STRING) {
            atomic_fetch_add(&r->d.errors, 1);
            continue;
        }
        f = e->element[1];
        if (f->type != REDIS_REPLY_ARRAY || f->elements < 2)
            atomic_fetch_add(&r->d.errors, 1);     /* deleted under us */
        else
            event_seen(r, event_seq(r, f->element[1]));
        ids[*n] = e->element[0]->str;
        idl[*n] = e->element[0]->len;
        (*n)++;
    }
}

static void cycle_main(struct drv_thread *w)
{
    struct run *r = (struct run *)w->d;
    long max = r->d.o.max, n;
    char consumer[32], count[24];
    const char **ids = malloc((size_t)(max + 3) * sizeof *ids);
    size_t *idl = malloc((size_t)(max + 3) * sizeof *idl);
    redisContext *c = thread_start(w);

    snprintf(consumer, sizeof consumer, "w%ld", w->id);
    snprintf(count, sizeof count, "%ld", max);
    if (!c || !ids || !idl)
        goto out;
    while (!drv_stopping(&r->d)) {
        const char *rd[] = {"XREADGROUP", "GROUP", "g", consumer, "COUNT", count,
                            "STREAMS", r->key, ">"};
        const char *ac[] = {"XAUTOCLAIM", r->key, "g", consumer, LEASE_MS, "0-0",
                            "COUNT", count};
        redisReply *rp;
        uint64_t t0 = peer_now_ns(), t1;
        size_t k;

        rp = redisCommandArgv(c, 9, rd, NULL);
        t1 = peer_now_ns();
        if (!rp || rp->type == REDIS_REPLY_ERROR ||
            (rp->type != REDIS_REPLY_NIL && rp->type != REDIS_REPLY_ARRAY)) {
            reply_is(c, rp, REDIS_REPLY_ARRAY, "XREADGROUP");
            atomic_fetch_add(&r->d.errors, 1);
            if (rp)
                freeReplyObject(rp);
            break;
        }
        n = 0;
        if (rp->type == REDIS_REPLY_ARRAY) {
            drv_lat_add(&r->d.lat, ms_between(t0, t1));
            atomic_fetch_add(&r->claims, 1);
            for (k = 0; k < rp->elements; k++) {
                const redisReply *s = rp->element[k];

                if (s->type == REDIS_REPLY_ARRAY && s->elements == 2 &&
                    s->element[1]->type == REDIS_REPLY_ARRAY)
                    take_entries(r, s->element[1], ids + 3, idl + 3, &n);
            }
        } else {
            /* Ran dry: take back what others leased more than 30 s ago
             * (the lease of the issue); nothing here ever is. */
            freeReplyObject(rp);
            rp = command(c, REDIS_REPLY_ARRAY, "XAUTOCLAIM", 8, ac);
            if (!rp) {
                atomic_fetch_add(&r->d.errors, 1);
                break;
            }
            if (rp->elements >= 2 && rp->element[1]->type == REDIS_REPLY_ARRAY)
                take_entries(r, rp->element[1], ids + 3, idl + 3, &n);
            if (n == 0) {
                freeReplyObject(rp);
                break;
            }
        }
        if (n > 0) {
            redisReply *ack;

            ids[0] = "XACK";
            idl[0] = 4;
            ids[1] = r->key;
            idl[1] = strlen(r->key);
            ids[2] = "g";
            idl[2] = 1;
            t0 = peer_now_ns();
            ack = redisCommandArgv(c, (int)n + 3, ids, idl);
            drv_lat_add(&r->d.lat2, ms_between(t0, peer_now_ns()));
            if (reply_is(c, ack, REDIS_REPLY_INTEGER, "XACK")) {
                atomic_fetch_add(&r->done, ack->integer);
                if (ack->integer != n)
                    atomic_fetch_add(&r->d.errors, n - ack->integer);
            } else {
                atomic_fetch_add(&r->d.errors, 1);
            }
            if (ack)
                freeReplyObject(ack);
            else
                n = -1;
        }
        freeReplyObject(rp);
        if (n < 0)
            break;
    }
out:
    if (c)
        redisFree(c);
    free(ids);
    free(idl);
}

/* Pending (delivered, unacknowledged) entries of group g on 'key', or -1. */
static long pending(redisContext *c, const char *key)
{
    const char *argv[] = {"XPENDING", key, "g"};
    redisReply *rp = command(c, REDIS_REPLY_ARRAY, "XPENDING", 3, argv);
    long n = -1;

    if (rp && rp->elements >= 1 && rp->element[0]->type == REDIS_REPLY_INTEGER)
        n = rp->element[0]->integer;
    if (rp)
        freeReplyObject(rp);
    return n;
}

static int run_cycle(struct run *r, redisContext *c0)
{
    const char *mk[] = {"XGROUP", "CREATE", r->key, "g", "0", "MKSTREAM"};
    redisReply *rp;

    r->total = r->d.target = r->d.o.events;
    if (!(r->seen = calloc((size_t)r->total + 1, 1)))
        return -1;
    if (!(rp = command(c0, REDIS_REPLY_STATUS, "XGROUP CREATE", 6, mk)))
        return -1;
    freeReplyObject(rp);
    if (fill(r, c0, r->total, make_plain))
        return -1;
    drv_lat_init(&r->d.lat, r->total + 4 * r->d.o.workers + 16);
    drv_lat_init(&r->d.lat2, r->total + 4 * r->d.o.workers + 16);
    r->d.seconds = threads_run(r, r->d.o.workers, cycle_main);
    r->d.events = atomic_load(&r->done);
    r->d.missing = events_missing(r);
    r->unacked = pending(c0, r->key);
    snprintf(r->extra, sizeof r->extra,
             ",\"workers\":%ld,\"max\":%ld,\"claims\":%ld,\"prefilled\":%ld",
             r->d.o.workers, r->d.o.max, atomic_load(&r->claims), r->total);
    return 0;
}

/* ---- W4: ordered, one stream per aggregate ---- */

/* The aggregate of a W4 key "<prefix>:a<k>", or -1. */
static long key_agg(const struct run *r, const redisReply *k)
{
    size_t pl = strlen(r->key);

    if (k->type != REDIS_REPLY_STRING || k->len < pl + 3 || memcmp(k->str, r->key, pl) ||
        k->str[pl] != ':' || k->str[pl + 1] != 'a')
        return -1;
    return dec_at(k->str + pl + 2);
}

/* Check one delivery from aggregate k's stream: the event must belong to
 * aggregate k and be the version after the last one taken. */
static void ordered_check(struct run *r, long k, const redisReply *v)
{
    const char *p;
    long ver, agg;

    event_seen(r, event_seq(r, v));
    if (!v || v->type != REDIS_REPLY_STRING ||
        !(p = strstr(v->str, "\"aggregate_id\":\"a")) ||
        (agg = dec_at(p + 17)) < 0 || !(p = strstr(v->str, PEER_EV_VER)) ||
        (ver = dec_at(p + sizeof PEER_EV_VER - 1)) < 0) {
        atomic_fetch_add(&r->d.errors, 1);
        return;
    }
    if (agg != k || ver != r->last_version[k] + 1)
        atomic_fetch_add(&r->disorder, 1);
    r->last_version[k] = ver;
}

static void ordered_main(struct drv_thread *w)
{
    struct run *r = (struct run *)w->d;
    long nw = r->d.o.workers, max = r->d.o.max, nact = 0, m, j, k, got;
    long *act = malloc((size_t)(r->d.o.aggregates / nw + 2) * sizeof *act);
    long *tmp = malloc((size_t)(r->d.o.aggregates / nw + 2) * sizeof *tmp);
    long *pick = malloc((size_t)max * sizeof *pick);
    bool *hit = malloc((size_t)max * sizeof *hit);
    const char **argv = malloc((size_t)(7 + 2 * max) * sizeof *argv);
    char consumer[32];
    redisContext *c = thread_start(w);

    snprintf(consumer, sizeof consumer, "w%ld", w->id);
    if (!c || !act || !tmp || !pick || !hit || !argv)
        goto out;
    for (k = w->id; k < r->d.o.aggregates; k += nw)
        act[nact++] = k;
    argv[0] = "XREADGROUP";
    argv[1] = "GROUP";
    argv[2] = "g";
    argv[3] = consumer;
    argv[4] = "COUNT";
    argv[5] = "1";
    argv[6] = "STREAMS";
    while (nact > 0 && !drv_stopping(&r->d)) {
        redisReply *rp;
        uint64_t t0, t1;
        size_t s;
        long nt = 0;

        /* The first m ready aggregates of the round robin, one head each. */
        m = nact < max ? nact : max;
        for (j = 0; j < m; j++) {
            pick[j] = act[j];
            hit[j] = false;
            argv[7 + j] = r->akeys[act[j]];
            argv[7 + m + j] = ">";
        }
        t0 = peer_now_ns();
        rp = redisCommandArgv(c, (int)(7 + 2 * m), argv, NULL);
        t1 = peer_now_ns();
        if (!rp || rp->type == REDIS_REPLY_ERROR ||
            (rp->type != REDIS_REPLY_NIL && rp->type != REDIS_REPLY_ARRAY)) {
            reply_is(c, rp, REDIS_REPLY_ARRAY, "XREADGROUP");
            atomic_fetch_add(&r->d.errors, 1);
            if (rp)
                freeReplyObject(rp);
            break;
        }
        got = 0;
        if (rp->type == REDIS_REPLY_ARRAY) {
            drv_lat_add(&r->d.lat, ms_between(t0, t1));
            atomic_fetch_add(&r->claims, 1);
            /* Each stream in the reply has exactly one entry (COUNT 1):
             * check it and pipeline its XACK. */
            for (s = 0; s < rp->elements; s++) {
                const redisReply *st = rp->element[s], *e, *f;
                const char *ack[4] = {"XACK", NULL, "g", NULL};
                size_t ackl[4] = {4, 0, 1, 0};

                if (st->type != REDIS_REPLY_ARRAY || st->elements != 2 ||
                    (k = key_agg(r, st->element[0])) < 0 || k % nw != w->id ||
                    st->element[1]->type != REDIS_REPLY_ARRAY ||
                    st->element[1]->elements != 1) {
                    atomic_fetch_add(&r->d.errors, 1);
                    continue;
                }
                for (j = 0; j < m; j++)
                    if (pick[j] == k)
                        hit[j] = true;
                e = st->element[1]->element[0];
                if (e->type != REDIS_REPLY_ARRAY || e->elements < 2 ||
                    e->element[0]->type != REDIS_REPLY_STRING) {
                    atomic_fetch_add(&r->d.errors, 1);
                    continue;
                }
                f = e->element[1];
                ordered_check(r, k, f->type == REDIS_REPLY_ARRAY && f->elements >= 2 ?
                                  f->element[1] : NULL);
                ack[1] = st->element[0]->str;
                ackl[1] = st->element[0]->len;
                ack[3] = e->element[0]->str;
                ackl[3] = e->element[0]->len;
                redisAppendCommandArgv(c, 4, ack, ackl);
                got++;
            }
        }
        freeReplyObject(rp);
        t0 = peer_now_ns();
        for (j = 0; j < got; j++) {
            redisReply *ack = NULL;

            redisGetReply(c, (void **)&ack);
            if (reply_is(c, ack, REDIS_REPLY_INTEGER, "XACK") && ack->integer == 1)
                atomic_fetch_add(&r->done, 1);
            else
                atomic_fetch_add(&r->d.errors, 1);
            if (!ack)
                goto out;
            freeReplyObject(ack);
        }
        if (got)
            drv_lat_add(&r->d.lat2, ms_between(t0, peer_now_ns()));
        /* A stream absent from the reply has nothing left (the prefill is
         * over): drop it.  The others go to the back of the round robin. */
        for (j = m; j < nact; j++)
            tmp[nt++] = act[j];
        for (j = 0; j < m; j++)
            if (hit[j])
                tmp[nt++] = pick[j];
        memcpy(act, tmp, (size_t)nt * sizeof *act);
        nact = nt;
    }
out:
    if (c)
        redisFree(c);
    free(act);
    free(tmp);
    free(pick);
    free(hit);
    free(argv);
}

static int run_ordered(struct run *r, redisContext *c0)
{
    long a = r->d.o.aggregates, k, unacked = 0;

    r->total = r->d.target = a * r->d.o.per_agg;
    r->seen = calloc((size_t)r->total + 1, 1);
    r->last_version = calloc((size_t)a, sizeof *r->last_version);
    if (!r->seen || !r->last_version)
        return -1;
    for (k = 0; k < a; k++) {
        const char *mk[] = {"XGROUP", "CREATE", r->akeys[k], "g", "0", "MKSTREAM"};

        redisAppendCommandArgv(c0, 6, mk, NULL);
    }
    for (k = 0; k < a; k++) {
        redisReply *rp = NULL;
        bool ok;

        redisGetReply(c0, (void **)&rp);
        ok = reply_is(c0, rp, REDIS_REPLY_STATUS, "XGROUP CREATE");
        if (rp)
            freeReplyObject(rp);
        if (!ok)
            return -1;
    }
    if (fill(r, c0, r->total, make_ordered))
        return -1;
    drv_lat_init(&r->d.lat, r->total + 4 * r->d.o.workers + 16);
    drv_lat_init(&r->d.lat2, r->total + 4 * r->d.o.workers + 16);
    r->d.seconds = threads_run(r, r->d.o.workers, ordered_main);
    r->d.events = atomic_load(&r->done);
    r->d.disorder = atomic_load(&r->disorder);
    r->d.missing = events_missing(r);
    for (k = 0; k < a; k++) {
        long p = pending(c0, r->akeys[k]);

        if (p < 0) {
            unacked = -1;
            break;
        }
        unacked += p;
    }
    r->unacked = unacked;
    snprintf(r->extra, sizeof r->extra,
             ",\"workers\":%ld,\"max\":%ld,\"aggregates\":%ld,\"per_aggregate\":%ld,"
             "\"claims\":%ld", r->d.o.workers, r->d.o.max, a, r->d.o.per_agg,
             atomic_load(&r->claims));
    return unacked >= 0 ? 0 : -1;
}

/* ---- W5: time window ---- */

static int run_window(struct run *r, redisContext *c0)
{
    char start[64], end[32];
    const char *xlen[] = {"XLEN", r->key};
    const char *argv[] = {"XRANGE", r->key, start, end, "COUNT", "1000"};
    uint64_t lo, hi, t0, t1, f0, f1;
    long n, first = -1, last = -1, expect = 0, got = 0, prev = -1, pages = 0, stored = -1;
    redisReply *rp;
    bool more = true;

    r->total = r->d.o.events;
    r->ts = malloc((size_t)r->total * sizeof *r->ts);
    if (!r->ts || r->total < 1)
        return -1;
    f0 = peer_now_ns();
    if (fill(r, c0, r->total, make_timed))
        return -1;
    f1 = peer_now_ns();
    if ((rp = command(c0, REDIS_REPLY_INTEGER, "XLEN", 2, xlen))) {
        stored = rp->integer;
        freeReplyObject(rp);
    }
    if (stored != r->total) {
        drv_say("stored %ld events, expected %ld", stored, r->total);
        return -1;
    }
    /* The middle 10% of the span of the ids' milliseconds; ids are in
     * event order, so the window holds the events first..last. */
    lo = r->ts[0] + (r->ts[r->total - 1] - r->ts[0]) * 45 / 100;
    hi = r->ts[0] + (r->ts[r->total - 1] - r->ts[0]) * 55 / 100;
    for (n = 0; n < r->total; n++)
        if (r->ts[n] >= lo && r->ts[n] <= hi) {
            if (first < 0)
                first = n;
            last = n;
            expect++;
        }
    snprintf(start, sizeof start, "%llu-0", (unsigned long long)lo);
    snprintf(end, sizeof end, "%llu", (unsigned long long)hi);   /* up to hi-<max seq> */
    drv_lat_init(&r->d.lat, expect / PAGE + 2);
    t0 = peer_now_ns();
    while (more && !drv_stopping(&r->d)) {
        uint64_t q0 = peer_now_ns();
        size_t i;

        if (!(rp = command(c0, REDIS_REPLY_ARRAY, "XRANGE", 6, argv))) {
            atomic_fetch_add(&r->d.errors, 1);
            break;
        }
        drv_lat_add(&r->d.lat, ms_between(q0, peer_now_ns()));
        pages++;
        for (i = 0; i < rp->elements; i++) {
            const redisReply *e = rp->element[i], *f;

            if (e->type != REDIS_REPLY_ARRAY || e->elements < 2 ||
                e->element[0]->type != REDIS_REPLY_STRING ||
                (f = e->element[1])->type != REDIS_REPLY_ARRAY || f->elements < 2 ||
                (n = event_seq(r, f->element[1])) < 0) {
                atomic_fetch_add(&r->d.errors, 1);
                continue;
            }
            /* In order means each event is the one after the previous. */
            if (n == prev)
                atomic_fetch_add(&r->dups, 1);
            else if (n < prev || n < first || n > last)
                atomic_fetch_add(&r->disorder, 1);
            else
                got++;
            prev = n;
        }
        more = rp->elements == PAGE;
        if (more) {
            const redisReply *id = rp->element[PAGE - 1]->element[0];

            snprintf(start, sizeof start, "(%.*s", (int)id->len, id->str);
        }
        freeReplyObject(rp);
    }
    t1 = peer_now_ns();
    r->d.seconds = (double)(t1 - t0) / 1e9;
    r->d.events = got + atomic_load(&r->dups) + atomic_load(&r->disorder);
    r->d.target = expect;
    r->d.missing = expect > got ? expect - got : 0;
    r->d.disorder = atomic_load(&r->disorder);
    snprintf(r->extra, sizeof r->extra,
             ",\"stored\":%ld,\"window_events\":%ld,\"window_ms\":%llu,\"pages\":%ld,"
             "\"prefill_seconds\":%.3f", stored, expect, (unsigned long long)(hi - lo),
             pages, ms_between(f0, f1) / 1e3);
    return 0;
}

/* ---- Report ---- */

/* How workload r->d.o.workload maps onto Redis, in one sentence. */
static void run_note(const struct run *r, char *note, size_t cap)
{
    const struct drv_opts *o = &r->d.o;

    switch (o->workload) {
    case 1:
    case 2:
        if (o->batch == 1)
            snprintf(note, cap,
                     "%ld threads, one hiredis connection each, one synchronous "
                     "XADD <stream> * e <json> per event (auto id) into one stream; "
                     "latency per XADD round trip", o->producers);
        else
            snprintf(note, cap,
                     "%ld threads, one hiredis connection each, pipelines of %ld "
                     "XADD <stream> * e <json> into one stream (no MULTI/EXEC: each "
                     "XADD is durable on its own and the batch counts as acknowledged "
                     "when its last reply arrives); latency per pipeline",
                     o->producers, o->batch);
        break;
    case 3:
        snprintf(note, cap,
                 "%ld events XADDed untimed into one stream with a consumer group "
                 "(XGROUP CREATE ... 0); %ld threads loop XREADGROUP GROUP g <worker> "
                 "COUNT %ld STREAMS <s> > then one XACK of all ids received; the 30 s "
                 "lease is the pending-entries list plus XAUTOCLAIM min-idle 30000, "
                 "tried when a worker runs dry and never triggered here (no worker "
                 "fails); p50/p99 per XREADGROUP", o->events, o->workers, o->max);
        break;
    case 4:
        snprintf(note, cap,
                 "per-key order approximated by one stream + consumer group per "
                 "aggregate (%ld streams, %ld versions each, XADDed untimed); worker w "
                 "of %ld owns the aggregates k %% %ld == w and claims with one "
                 "XREADGROUP COUNT 1 over up to %ld of its streams (one head per "
                 "aggregate), then pipelines one XACK per stream, so a version is read "
                 "only after the previous one was acked; versions verified per "
                 "aggregate; p50/p99 per XREADGROUP",
                 o->aggregates, o->per_agg, o->workers, o->workers, o->max);
        break;
    case 5:
        snprintf(note, cap,
                 "%ld events XADDed untimed into one stream with explicit ids "
                 "<unix ms>-<seq> from the producer's clock (one connection, pipelines "
                 "of %d), then the middle 10%% of the id time span read in id order "
                 "with XRANGE <lo>-0 <hi> COUNT %d, each next page from (<last id>; "
                 "order checked by event number; p50/p99 per page",
                 o->events, FILL_PIPE, PAGE);
        break;
    }
}

/* The report's fields after the counts. */
static void fields(struct drv *d, enum drv_part part)
{
    struct run *r = (struct run *)d;
    char note[768];
    double p50, p99;

    if (part != DRV_PART_TAIL)
        return;
    if (d->o.workload == 3 || d->o.workload == 4) {
        drv_lat_pct(&d->lat2, &p50, &p99);
        drv_put_ms("ack_p50_ms", p50);
        drv_put_ms("ack_p99_ms", p99);
        drv_put_long("unacked", r->unacked);
    }
    fputs(r->extra, stdout);
    drv_put_long("payload_bytes", d->o.payload_bytes);
    drv_put_long("errors", atomic_load(&d->errors));
    drv_put_bool("timed_out", drv_stop_reason() != 0);
    drv_put_str("runid", d->runid);
    if (r->error[0])
        drv_put_str("error", r->error);
    run_note(r, note, sizeof note);
    drv_put_str("note", note);
}

/* ---- Setup and cleanup ---- */

/* The keys of this run, main's connection and what the server says of
 * its version and durability. */
static int open_run(struct drv *d)
{
    struct run *r = (struct run *)d;
    long k;

    strcpy(r->version, "?");
    strcpy(r->dur, "?");
    d->version = r->version;
    d->durability = r->dur;
    r->unacked = -1;
    snprintf(r->key, sizeof r->key, "peer-redis:%s", d->runid);
    if (d->o.workload == 4) {
        if (!(r->akeys = calloc((size_t)d->o.aggregates, sizeof *r->akeys))) {
            snprintf(r->error, sizeof r->error, "out of memory");
            return DRV_FAILED;
        }
        for (k = 0; k < d->o.aggregates; k++)
            snprintf(r->akeys[k], sizeof r->akeys[k], "%.48s:a%ld", r->key, k);
    }
    if (!(r->c0 = conn_open(r))) {
        snprintf(r->error, sizeof r->error, "cannot connect to %.200s:%d", d->o.host, d->o.port);
        return DRV_FAILED;
    }
    if (server_describe(r->c0, r->version, sizeof r->version, r->dur, sizeof r->dur)) {
        snprintf(r->error, sizeof r->error, "cannot query the server");
        return DRV_FAILED;
    }
    r->described = true;
    return DRV_OK;
}

/* What every workload's end has in common: the duplicates counted on
 * delivery, and why a failed one failed. */
static int finish(struct run *r, int rc)
{
    r->d.dups += atomic_load(&r->dups);
    if (rc && !r->error[0])
        snprintf(r->error, sizeof r->error, "%s",
                 drv_stop_reason() ? "stopped (--max-seconds or a signal) before "
                 "the workload finished" : "setup or check failed (see stderr)");
    return rc ? DRV_FAILED : DRV_OK;
}

static int run_w12(struct drv *d)
{
    struct run *r = (struct run *)d;

    return finish(r, run_enqueue(r, r->c0));
}

static int run_w3(struct drv *d)
{
    struct run *r = (struct run *)d;

    return finish(r, run_cycle(r, r->c0));
}

static int run_w4(struct drv *d)
{
    struct run *r = (struct run *)d;

    return finish(r, run_ordered(r, r->c0));
}

static int run_w5(struct drv *d)
{
    struct run *r = (struct run *)d;

    return finish(r, run_window(r, r->c0));
}

/* UNLINK this run's keys (untimed) so repeated runs do not pile up. */
static void run_cleanup(struct run *r, redisContext *c)
{
    long k, n = r->d.o.workload == 4 ? r->d.o.aggregates : 1;

    for (k = 0; k < n; k++) {
        const char *argv[] = {"UNLINK", r->d.o.workload == 4 ? r->akeys[k] : r->key};

        redisAppendCommandArgv(c, 2, argv, NULL);
    }
    for (k = 0; k < n; k++) {
        redisReply *rp = NULL;

        if (redisGetReply(c, (void **)&rp) != REDIS_OK)
            break;
        freeReplyObject(rp);
    }
}

static int close_run(struct drv *d)
{
    struct run *r = (struct run *)d;

    if (r->described)
        run_cleanup(r, r->c0);
    if (r->c0)
        redisFree(r->c0);
    free(r->akeys);
    free(r->seen);
    free(r->last_version);
    free(r->ts);
    return 0;
}

static const struct drv_bound bounds[] = {
    {DRV_O_MAX, 1, 10000},
    {0, 0, 0},
};

static const struct drv_peer redis_peer = {
    .name = "redis",
    .tag = "rd",
    .addr_arg = "HOST:PORT",
    .addr_help = "the redis-server",
    .help = "  W1, W2: --batch XADDs per pipeline; W4: one stream per aggregate.\n",
    .bounds = bounds,
    .fail_on = DRV_FAIL_ALL,
    .size = sizeof(struct run),
    .open = open_run,
    .run = {run_w12, run_w12, run_w3, run_w4, run_w5},
    .fields = fields,
    .close = close_run,
};

int main(int argc, char **argv)
{
    return drv_main(&redis_peer, argc, argv);
}
