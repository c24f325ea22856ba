/*
 * bench/peers/postgres.c - the PostgreSQL 15 peer of the side-by-side
 * benchmark (issue 7): an outbox table claimed with FOR UPDATE SKIP LOCKED.
 *
 * Owns: the command line shared by every peer driver, the outbox table of
 * one run (created under a unique name, dropped at the end), the SQL of each
 * workload, the client-side checks (duplicates, missing, order) and the one
 * JSON line on stdout. It talks to the server only through libpq, one
 * blocking connection per thread, so it measures what a real client sees.
 *
 * DESIGN
 * One table per run, the same for every workload, as a deployed outbox that
 * offers what MIC offers (claims, ordered heads, time-range reads) needs it:
 *
 *   id bigserial PRIMARY KEY, created_at timestamptz DEFAULT clock_timestamp(),
 *   aggregate_id text, version int, status smallint (0 ready, 1 leased,
 *   2 done), lease_until timestamptz, attempts int, payload jsonb
 *   index (id) WHERE status = 0            the ready set, claimed in id order
 *   index (created_at, id)                 time-range reads (W5)
 *   index (aggregate_id, version) WHERE aggregate_id IS NOT NULL   heads (W4)
 *
 * Every statement runs in autocommit, so each INSERT, claim and ack is one
 * transaction that returns only after its COMMIT (durability is read back
 * from the server's settings and printed). Acked rows are kept with
 * status = 2, as MIC keeps dispatched events for replay.
 *
 *   W1  one INSERT per transaction from --producers connections.
 *   W2  one multi-row INSERT ... VALUES of --batch rows per transaction.
 *   W3  prefill by COPY (untimed), then --workers connections loop:
 *         UPDATE .. SET status = 1, lease_until = now() + 30 s
 *           WHERE id IN (SELECT id .. WHERE status = 0 ORDER BY id
 *                        LIMIT --max FOR UPDATE SKIP LOCKED) RETURNING id
 *         UPDATE .. SET status = 2 WHERE id = ANY(acked) AND status = 1
 *       until a claim comes back empty.
 *   W4  as W3, but a row is claimable only while no row of its aggregate
 *       with a lower version has status <> 2 (NOT EXISTS on the aggregate
 *       index): only the head of each aggregate is visible, so at most one
 *       event per aggregate is in flight. An empty claim waits 1 ms; the
 *       workers stop when every event is acked.
 *   W5  prefill by COPY (untimed), then one connection DECLAREs a cursor
 *       over the middle 10% of the created_at span, ORDER BY created_at, id,
 *       and FETCHes 10000 rows at a time in binary.
 *
 * Threads: main connects every connection and prepares its statements
 * before a phase starts, so neither is timed. A phase is N threads, each
 * owning one connection; the only shared state is atomics in struct run
 * (event counter, tallies, the per-id 'seen' counts, the per-aggregate last
 * version) and the latency arrays, whose slots are handed out by an atomic
 * index. Main waits for the phase in slices; at --max-seconds (measured
 * from the start of the program) or on SIGINT/SIGTERM it sets
 * stop_requested and sends PQcancel to every connection of the phase.
 *
 * Exit 0 when the workload moved every event with no error, duplicate,
 * missing event or order violation; 1 otherwise; 2 on a bad argument.
 */

#define _GNU_SOURCE
#include <endian.h>
#include <getopt.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "peerlib.h"

#define PEER            "postgres"
#define COPY_CHUNK      10000           /* rows per COPY (one transaction) in a prefill */
#define COPY_FLUSH      (256 * 1024)    /* bytes buffered before PQputCopyData */
#define FETCH_ROWS      10000
#define LEASE           "30 seconds"
#define WAIT_SLICE_MS   200
#define EMPTY_POLL_US   1000
#define LOG_BUDGET      30
#define NS_PER_MS       1000000ull
#define NS_PER_S        1000000000ull

enum workload { W1 = 1, W2, W3, W4, W5 };

struct opts {
    const char *addr;
    int workload;
    long events, producers, batch, workers, max, aggregates, per_agg;
    long payload_bytes, max_seconds;
};

struct run {
    struct opts o;
    char runid[17];
    char table[40];
    char ev_head[64];               /* {"event_id":"pg-<runid>- */
    size_t ev_head_len, ev_max;
    uint64_t deadline_ns;
    long target;                    /* events the workload should move */
    atomic_long next;               /* next event number (W1, W2) */
    atomic_long done;               /* committed inserts, acked claims, rows read */
    atomic_long errors;
    atomic_long duplicates;
    atomic_long violations;
    atomic_long empty_claims;
    atomic_long lost_acks;          /* ack updated fewer rows than it named */
    atomic_long bytes;              /* W5: payload bytes read */
    struct peer_lat lat, lat2;           /* per request; lat2: acks (W3, W4) */
    int64_t id_lo, id_hi;           /* prefilled ids (W3..W5) */
    _Atomic unsigned char *seen;    /* per id: times claimed (W3, W4) or read (W5) */
    atomic_int *agg_last;           /* W4: last version processed per aggregate */
    char *win_lo, *win_hi;          /* W5: window bounds as SQL literals */
    pthread_mutex_t mu;             /* guards 'left' */
    pthread_cond_t cv;
    int left;                       /* threads of the phase still running */
};

struct worker {
    struct run *r;
    PGconn *c;
    PGcancel *cancel;
    pthread_t th;
    uint64_t end_ns;
};

/* ---- Small helpers ---- */


static int64_t get_i64(const PGresult *res, int row, int col)
{
    uint64_t v;

    memcpy(&v, PQgetvalue(res, row, col), sizeof v);
    return (int64_t)be64toh(v);
}

static int32_t get_i32(const PGresult *res, int row, int col)
{
    uint32_t v;

    memcpy(&v, PQgetvalue(res, row, col), sizeof v);
    return (int32_t)be32toh(v);
}

/* ---- Events ---- */

/* The JSON of event 'n' at 'out' (no NUL), about --payload-bytes long;
 * aggregate 'agg' version 'ver' when agg >= 0. Returns its length, at most
 * r->ev_max. */
static size_t event_put(const struct run *r, char *out, uint64_t n, long agg, long ver)
{
    return peer_event_put(out, r->ev_head, r->ev_head_len, n, PEER_TOPIC, agg, ver, 0,
                          (size_t)r->o.payload_bytes);
}

/* ---- Connections ---- */

/* Run one statement that returns no rows to speak of; 0 on success. */
static int db_exec(PGconn *c, const char *sql)
{
    PGresult *res = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(res);
    int rc = 0;

    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        peer_say("%.80s...: %s", sql, PQerrorMessage(c));
        rc = -1;
    }
    PQclear(res);
    return rc;
}

static int db_execf(PGconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int db_execf(PGconn *c, const char *fmt, ...)
{
    char sql[2048];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    return db_exec(c, sql);
}

/* One text value of a one-row query into out[0..cap); 0 on success. */
static int db_value(PGconn *c, const char *sql, char *out, size_t cap)
{
    PGresult *res = PQexec(c, sql);
    int rc = -1;

    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 && !PQgetisnull(res, 0, 0)) {
        snprintf(out, cap, "%s", PQgetvalue(res, 0, 0));
        rc = 0;
    } else {
        peer_say("%s: %s", sql, PQerrorMessage(c));
    }
    PQclear(res);
    return rc;
}

static int db_prepare(PGconn *c, const char *name, const char *sql)
{
    PGresult *res = PQprepare(c, name, sql, 0, NULL);
    int rc = 0;

    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        peer_say("prepare %s: %s", name, PQerrorMessage(c));
        rc = -1;
    }
    PQclear(res);
    return rc;
}

static PGconn *db_open(const char *addr)
{
    PGconn *c = PQconnectdb(addr);

    if (PQstatus(c) != CONNECTION_OK) {
        peer_say("connect: %s", PQerrorMessage(c));
        PQfinish(c);
        return NULL;
    }
    if (db_exec(c, "SET application_name = 'peer_postgres'")) {
        PQfinish(c);
        return NULL;
    }
    return c;
}

/* The multi-row INSERT of 'n' rows into 'table'; caller frees. */
static char *insert_sql(const char *table, long n)
{
    size_t cap = 64 + strlen(table) + (size_t)n * 24;
    char *sql = malloc(cap), *p;
    long i;

    if (!sql)
        return NULL;
    p = sql + sprintf(sql, "INSERT INTO %s (payload) VALUES ", table);
    for (i = 1; i <= n; i++)
        p += sprintf(p, "%s($%ld::jsonb)", i > 1 ? "," : "", i);
    return sql;
}

/* Prepare what the workload's threads run on 'c'. */
static int worker_prepare(struct run *r, PGconn *c)
{
    char sql[1024];
    char *ins;
    int rc;

    switch (r->o.workload) {
    case W1:
    case W2:
        if (!(ins = insert_sql(r->table, r->o.workload == W1 ? 1 : r->o.batch)))
            return -1;
        rc = db_prepare(c, "ins", ins);
        free(ins);
        return rc;
    case W3:
        snprintf(sql, sizeof sql,
                 "UPDATE %s SET status = 1, lease_until = now() + interval '" LEASE "', "
                 "attempts = attempts + 1 WHERE id IN (SELECT id FROM %s WHERE status = 0 "
                 "ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED) RETURNING id",
                 r->table, r->table);
        break;
    case W4:
        snprintf(sql, sizeof sql,
                 "UPDATE %s SET status = 1, lease_until = now() + interval '" LEASE "', "
                 "attempts = attempts + 1 WHERE id IN (SELECT o.id FROM %s o WHERE o.status = 0 "
                 "AND NOT EXISTS (SELECT 1 FROM %s p WHERE p.aggregate_id = o.aggregate_id "
                 "AND p.version < o.version AND p.status <> 2) "
                 "ORDER BY o.id LIMIT $1 FOR UPDATE SKIP LOCKED) RETURNING id, aggregate_id, version",
                 r->table, r->table, r->table);
        break;
    default:
        return 0;
    }
    if (db_prepare(c, "claim", sql))
        return -1;
    snprintf(sql, sizeof sql,
             "UPDATE %s SET status = 2, lease_until = NULL WHERE id = ANY($1::bigint[]) AND status = 1",
             r->table);
    return db_prepare(c, "ack", sql);
}

/* Report a failed statement of a worker, unless the run is stopping
 * (then it is our own cancel). */
static void worker_fail(struct worker *w, const char *what)
{
    if (peer_stop_reason())
        return;
    atomic_fetch_add(&w->r->errors, 1);
    if (peer_may_log())
        peer_say("%s: %s", what, PQerrorMessage(w->c));
}

static void worker_done(struct worker *w)
{
    struct run *r = w->r;

    w->end_ns = peer_now_ns();
    pthread_mutex_lock(&r->mu);
    r->left--;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* ---- Phases ---- */

/* Run 'fn' on each of ws[0..n) in its own thread and wait for all of them,
 * cancelling their statements once the run is stopping. Stores the time
 * from starting the threads to the last one ending in *secs. */
static int phase_run(struct run *r, struct worker *ws, int n, void *(*fn)(void *), double *secs)
{
    uint64_t t0, last = 0;
    int i, started = 0, rc = 0;
    char err[256];

    r->left = n;
    t0 = peer_now_ns();
    for (i = 0; i < n; i++) {
        ws[i].end_ns = t0;
        if (pthread_create(&ws[i].th, NULL, fn, &ws[i])) {
            peer_say("pthread_create failed");
            peer_request_stop(1);
            rc = -1;
            break;
        }
        started++;
    }
    pthread_mutex_lock(&r->mu);
    r->left -= n - started;
    while (r->left > 0) {
        struct timespec ts;
        uint64_t wake = peer_now_ns() + WAIT_SLICE_MS * NS_PER_MS;

        ts.tv_sec = (time_t)(wake / NS_PER_S);
        ts.tv_nsec = (long)(wake % NS_PER_S);
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
        if (r->left == 0)
            break;
        if (peer_now_ns() >= r->deadline_ns)
            peer_request_stop(1);
        if (peer_stop_reason()) {
            pthread_mutex_unlock(&r->mu);
            for (i = 0; i < started; i++)
                PQcancel(ws[i].cancel, err, sizeof err);
            pthread_mutex_lock(&r->mu);
        }
    }
    pthread_mutex_unlock(&r->mu);
    for (i = 0; i < started; i++) {
        pthread_join(ws[i].th, NULL);
        if (ws[i].end_ns > last)
            last = ws[i].end_ns;
    }
    *secs = (double)(last - t0) / 1e9;
    return rc;
}

/* ---- Prefill (W3, W4, W5; not timed) ---- */

/* COPY r->target events into the table, COPY_CHUNK rows per transaction,
 * then VACUUM ANALYZE it. W4 rows carry aggregate n % A, version n / A + 1,
 * so the versions of each aggregate are inserted in order. */
static void *prefill_main(void *arg)
{
    struct worker *w = arg;
    struct run *r = w->r;
    size_t cap = COPY_FLUSH + r->ev_max + 64, len;
    char *buf = malloc(cap), sql[256];
    long n = 0, end, agg, ver;
    PGresult *res;

    if (!buf) {
        atomic_fetch_add(&r->errors, 1);
        goto out;
    }
    snprintf(sql, sizeof sql, "COPY %s (aggregate_id, version, payload) FROM STDIN", r->table);
    while (n < r->target && !peer_stop_reason()) {
        res = PQexec(w->c, sql);
        if (PQresultStatus(res) != PGRES_COPY_IN) {
            PQclear(res);
            worker_fail(w, "COPY");
            goto out;
        }
        PQclear(res);
        end = n + COPY_CHUNK < r->target ? n + COPY_CHUNK : r->target;
        len = 0;
        for (; n < end; n++) {
            char *p = buf + len;

            if (r->o.workload == W4) {
                agg = n % r->o.aggregates;
                ver = n / r->o.aggregates + 1;
                *p++ = 'a';
                p += peer_u64_put(p, (uint64_t)agg);
                *p++ = '\t';
                p += peer_u64_put(p, (uint64_t)ver);
                *p++ = '\t';
            } else {
                agg = ver = -1;
                memcpy(p, "\\N\t\\N\t", 6);
                p += 6;
            }
            p += event_put(r, p, (uint64_t)n, agg, ver);
            *p++ = '\n';
            len = (size_t)(p - buf);
            if (len >= COPY_FLUSH) {
                if (PQputCopyData(w->c, buf, (int)len) != 1)
                    break;
                len = 0;
            }
        }
        if ((len && PQputCopyData(w->c, buf, (int)len) != 1) || PQputCopyEnd(w->c, NULL) != 1) {
            worker_fail(w, "COPY data");
            goto out;
        }
        res = PQgetResult(w->c);
        if (PQresultStatus(res) != PGRES_COMMAND_OK) {
            PQclear(res);
            worker_fail(w, "COPY end");
            while ((res = PQgetResult(w->c)))
                PQclear(res);
            goto out;
        }
        PQclear(res);
        while ((res = PQgetResult(w->c)))
            PQclear(res);
    }
    if (!peer_stop_reason() && db_execf(w->c, "VACUUM (ANALYZE) %s", r->table))
        atomic_fetch_add(&r->errors, 1);
out:
    free(buf);
    worker_done(w);
    return NULL;
}

/* ---- W1, W2: enqueue ---- */

/* Take events B at a time and INSERT each group in one transaction. */
static void *insert_main(void *arg)
{
    struct worker *w = arg;
    struct run *r = w->r;
    long b = r->o.workload == W1 ? 1 : r->o.batch, k, i, n0;
    char *buf = malloc((size_t)b * (r->ev_max + 1));
    const char **vals = calloc((size_t)b, sizeof *vals);
    char *sql;
    PGresult *res;
    uint64_t t;

    if (!buf || !vals) {
        atomic_fetch_add(&r->errors, 1);
        goto out;
    }
    while (!peer_stop_reason()) {
        n0 = atomic_fetch_add(&r->next, b);
        if (n0 >= r->target)
            break;
        k = r->target - n0 < b ? r->target - n0 : b;
        for (i = 0; i < k; i++) {
            char *p = buf + (size_t)i * (r->ev_max + 1);

            p[event_put(r, p, (uint64_t)(n0 + i), -1, -1)] = '\0';
            vals[i] = p;
        }
        t = peer_now_ns();
        if (k == b) {
            res = PQexecPrepared(w->c, "ins", (int)k, vals, NULL, NULL, 0);
        } else {
            /* The short last batch: a one-off statement of its own size. */
            if (!(sql = insert_sql(r->table, k))) {
                atomic_fetch_add(&r->errors, 1);
                break;
            }
            res = PQexecParams(w->c, sql, (int)k, NULL, vals, NULL, NULL, 0);
            free(sql);
        }
        if (PQresultStatus(res) != PGRES_COMMAND_OK) {
            PQclear(res);
            worker_fail(w, "INSERT");
            break;
        }
        PQclear(res);
        peer_lat_add(&r->lat, (double)(peer_now_ns() - t) / 1e6);
        atomic_fetch_add(&r->done, k);
    }
out:
    free(vals);
    free(buf);
    worker_done(w);
    return NULL;
}

/* ---- W3, W4: claim and acknowledge ---- */

/* Claim up to --max rows, check them, acknowledge them in one transaction;
 * until a claim is empty (W3) or every event is acked (W4). */
static void *claim_main(void *arg)
{
    struct worker *w = arg;
    struct run *r = w->r;
    bool ordered = r->o.workload == W4;
    char maxs[24], *ids = malloc((size_t)r->o.max * 21 + 3), *p;
    const char *param[1];
    PGresult *res;
    uint64_t t;
    int i, n;

    if (!ids) {
        atomic_fetch_add(&r->errors, 1);
        goto out;
    }
    snprintf(maxs, sizeof maxs, "%ld", r->o.max);
    while (!peer_stop_reason() && (!ordered || atomic_load(&r->done) < r->target)) {
        param[0] = maxs;
        t = peer_now_ns();
        res = PQexecPrepared(w->c, "claim", 1, param, NULL, NULL, 1);
        if (PQresultStatus(res) != PGRES_TUPLES_OK) {
            PQclear(res);
            worker_fail(w, "claim");
            break;
        }
        if ((n = PQntuples(res)) == 0) {
            PQclear(res);
            atomic_fetch_add(&r->empty_claims, 1);
            if (!ordered)
                break;
            usleep(EMPTY_POLL_US);
            continue;
        }
        peer_lat_add(&r->lat, (double)(peer_now_ns() - t) / 1e6);
        p = ids;
        *p++ = '{';
        for (i = 0; i < n; i++) {
            int64_t id = get_i64(res, i, 0);

            if (id < r->id_lo || id > r->id_hi) {
                if (peer_may_log())
                    peer_say("claimed id %" PRId64 " outside the prefill", id);
                atomic_fetch_add(&r->errors, 1);
                continue;
            }
            if (atomic_fetch_add(&r->seen[id - r->id_lo], 1) > 0)
                atomic_fetch_add(&r->duplicates, 1);
            if (ordered) {
                long agg = strtol(PQgetvalue(res, i, 1) + 1, NULL, 10);
                int ver = get_i32(res, i, 2);

                /* The one worker holding the head of 'agg' moves its
                 * last processed version on by exactly one. */
                if (agg < 0 || agg >= r->o.aggregates ||
                    atomic_exchange(&r->agg_last[agg], ver) != ver - 1) {
                    atomic_fetch_add(&r->violations, 1);
                    if (peer_may_log())
                        peer_say("order: a%ld version %d out of turn", agg, ver);
                }
            }
            if (p > ids + 1)
                *p++ = ',';
            p += sprintf(p, "%" PRId64, id);
        }
        *p++ = '}';
        *p = '\0';
        PQclear(res);

        param[0] = ids;
        t = peer_now_ns();
        res = PQexecPrepared(w->c, "ack", 1, param, NULL, NULL, 0);
        if (PQresultStatus(res) != PGRES_COMMAND_OK) {
            PQclear(res);
            worker_fail(w, "ack");
            break;
        }
        peer_lat_add(&r->lat2, (double)(peer_now_ns() - t) / 1e6);
        i = atoi(PQcmdTuples(res));
        PQclear(res);
        atomic_fetch_add(&r->done, i);
        if (i < n)
            atomic_fetch_add(&r->lost_acks, n - i);
    }
out:
    free(ids);
    worker_done(w);
    return NULL;
}

/* ---- W5: time-window read ---- */

/* Stream the window through a cursor, FETCH_ROWS at a time, in binary,
 * checking (created_at, id) order and counting each id. */
static void *read_main(void *arg)
{
    struct worker *w = arg;
    struct run *r = w->r;
    char sql[1024];
    int64_t prev_ts = INT64_MIN, prev_id = INT64_MIN;
    PGresult *res;
    uint64_t t;
    long bytes = 0;
    int i, n;

    if (db_exec(w->c, "BEGIN READ ONLY"))
        goto fail;
    snprintf(sql, sizeof sql,
             "DECLARE win NO SCROLL CURSOR FOR SELECT id, created_at, payload FROM %s "
             "WHERE created_at >= %s AND created_at < %s ORDER BY created_at, id",
             r->table, r->win_lo, r->win_hi);
    if (db_exec(w->c, sql))
        goto fail;
    snprintf(sql, sizeof sql, "FETCH %d FROM win", FETCH_ROWS);
    while (!peer_stop_reason()) {
        t = peer_now_ns();
        res = PQexecParams(w->c, sql, 0, NULL, NULL, NULL, NULL, 1);
        if (PQresultStatus(res) != PGRES_TUPLES_OK) {
            PQclear(res);
            worker_fail(w, "FETCH");
            goto out;
        }
        peer_lat_add(&r->lat, (double)(peer_now_ns() - t) / 1e6);
        n = PQntuples(res);
        for (i = 0; i < n; i++) {
            int64_t id = get_i64(res, i, 0), ts = get_i64(res, i, 1);

            if (ts < prev_ts || (ts == prev_ts && id <= prev_id))
                atomic_fetch_add(&r->violations, 1);
            prev_ts = ts;
            prev_id = id;
            if (id < r->id_lo || id > r->id_hi)
                atomic_fetch_add(&r->errors, 1);
            else if (atomic_fetch_add(&r->seen[id - r->id_lo], 1) > 0)
                atomic_fetch_add(&r->duplicates, 1);
            bytes += PQgetlength(res, i, 2);
        }
        PQclear(res);
        atomic_fetch_add(&r->done, n);
        if (n == 0)
            break;
    }
    if (db_exec(w->c, "CLOSE win") || db_exec(w->c, "COMMIT"))
        goto fail;
    goto out;
fail:
    worker_fail(w, "read");
out:
    atomic_fetch_add(&r->bytes, bytes);
    worker_done(w);
    return NULL;
}

/* ---- Command line ---- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: peer_" PEER " --addr CONNINFO --workload W1|W2|W3|W4|W5 [--events N]\n"
            "       [--producers N] [--batch N] [--workers N] [--max N] [--aggregates A]\n"
            "       [--per-aggregate K] [--payload-bytes 300] [--max-seconds 300]\n"
            "  --addr          libpq conninfo, e.g. \"host=127.0.0.1 port=5432 dbname=bench user=postgres\"\n"
            "  --events        W1 50000, W2 200000, W3 100000 prefilled, W5 1000000 stored\n"
            "                  (W4 moves aggregates x per-aggregate events)\n"
            "  --producers     W1, W2: connections inserting (32)\n"
            "  --batch         W2: rows per INSERT transaction (100)\n"
            "  --workers       W3, W4: connections claiming (8)\n"
            "  --max           W3, W4: rows per claim (32)\n"
            "  --aggregates    W4: 2000;  --per-aggregate  W4: 25\n"
            "  --payload-bytes event JSON size (300);  --max-seconds  whole run (300)\n");
}

/* Fill 'o' from argv; 0, or 2 on a usage error, or -1 after --help. */
static int opts_parse(struct opts *o, int argc, char **argv)
{
    int ch;
    long *dst, lo, hi;

    memset(o, 0, sizeof *o);
    o->producers = 32;
    o->batch = 100;
    o->workers = 8;
    o->max = 32;
    o->aggregates = 2000;
    o->per_agg = 25;
    o->payload_bytes = 300;
    o->max_seconds = 300;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "", peer_options, NULL)) != -1) {
        lo = 1;
        switch (ch) {
        case P_ADDR:
            o->addr = optarg;
            continue;
        case P_WORKLOAD:
            if (!(o->workload = peer_workload(optarg))) {
                peer_say("--workload must be W1..W5");
                return 2;
            }
            continue;
        case P_HELP:
            usage(stdout);
            return -1;
        case P_EVENTS: dst = &o->events; hi = 100000000; break;
        case P_PRODUCERS: dst = &o->producers; hi = 90; break;
        case P_BATCH: dst = &o->batch; hi = 10000; break;
        case P_WORKERS: dst = &o->workers; hi = 90; break;
        case P_MAX: dst = &o->max; hi = 10000; break;
        case P_AGGREGATES: dst = &o->aggregates; hi = 10000000; break;
        case P_PER_AGG: dst = &o->per_agg; hi = 1000000; break;
        case P_PAYLOAD: dst = &o->payload_bytes; lo = 64; hi = 1 << 20; break;
        case P_SECONDS: dst = &o->max_seconds; hi = 86400; break;
        default:
            peer_say("unknown or incomplete option: %s", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
        if (peer_num(optarg, lo, hi, dst)) {
            peer_say("bad value for %s: %s (%ld..%ld)", argv[optind - 2], optarg, lo, hi);
            return 2;
        }
    }
    if (optind < argc || !o->addr || !o->workload) {
        usage(stderr);
        return 2;
    }
    if (!o->events) {
        static const long defaults[] = { 0, 50000, 200000, 100000, 0, 1000000 };

        o->events = defaults[o->workload];
    }
    if (o->workload == W4) {
        if (o->aggregates * o->per_agg > 100000000) {
            peer_say("--aggregates x --per-aggregate is too large");
            return 2;
        }
        o->events = o->aggregates * o->per_agg;
    }
    return 0;
}

/* ---- Setup, checks, report ---- */

/* "what is durable before the ack", from the server's own settings. */
static int durability(PGconn *c, char *out, size_t cap)
{
    char sc[32], fs[32], ws[32];

    if (db_value(c, "SHOW synchronous_commit", sc, sizeof sc) ||
        db_value(c, "SHOW fsync", fs, sizeof fs) ||
        db_value(c, "SHOW wal_sync_method", ws, sizeof ws))
        return -1;
    snprintf(out, cap,
             "synchronous_commit=%s, fsync=%s, wal_sync_method=%s, single node: %s", sc, fs, ws,
             strcmp(fs, "on") != 0 ? "WAL is not forced to disk (fsync off)"
             : strcmp(sc, "off") == 0 ? "COMMIT returns before its WAL is flushed"
             : "each COMMIT (insert, claim, ack) returns after its WAL record is flushed to disk");
    return 0;
}

static int create_table(PGconn *c, const char *t)
{
    return db_execf(c,
                    "CREATE TABLE %s (id bigserial PRIMARY KEY, "
                    "created_at timestamptz NOT NULL DEFAULT clock_timestamp(), "
                    "aggregate_id text, version int, status smallint NOT NULL DEFAULT 0, "
                    "lease_until timestamptz, attempts int NOT NULL DEFAULT 0, "
                    "payload jsonb NOT NULL)", t) ||
           db_execf(c, "CREATE INDEX %s_ready ON %s (id) WHERE status = 0", t, t) ||
           db_execf(c, "CREATE INDEX %s_time ON %s (created_at, id)", t, t) ||
           db_execf(c, "CREATE INDEX %s_agg ON %s (aggregate_id, version) "
                       "WHERE aggregate_id IS NOT NULL", t, t);
}

/* Integer results of a one-row query into v[0..n); 0 on success. */
static int db_longs(PGconn *c, const char *sql, long long *v, int n)
{
    PGresult *res = PQexec(c, sql);
    int i, rc = -1;

    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 && PQnfields(res) == n) {
        for (i = 0; i < n; i++)
            v[i] = PQgetisnull(res, 0, i) ? 0 : strtoll(PQgetvalue(res, 0, i), NULL, 10);
        rc = 0;
    } else {
        peer_say("%.80s: %s", sql, PQerrorMessage(c));
    }
    PQclear(res);
    return rc;
}

/* After the prefill: the id range, and for W5 the middle 10% window. */
static int after_prefill(struct run *r, PGconn *c)
{
    char sql[512];
    long long v[3];
    PGresult *res;

    snprintf(sql, sizeof sql, "SELECT min(id), max(id), count(*) FROM %s", r->table);
    if (db_longs(c, sql, v, 3))
        return -1;
    if (v[2] != r->target || v[1] - v[0] + 1 != v[2]) {
        peer_say("prefill stored %lld rows, ids %lld..%lld, wanted %ld", v[2], v[0], v[1], r->target);
        return -1;
    }
    r->id_lo = v[0];
    r->id_hi = v[1];
    if (!(r->seen = calloc((size_t)(v[1] - v[0] + 1), sizeof *r->seen)))
        return -1;
    if (r->o.workload == W4 &&
        !(r->agg_last = calloc((size_t)r->o.aggregates, sizeof *r->agg_last)))
        return -1;
    if (r->o.workload != W5)
        return 0;
    snprintf(sql, sizeof sql,
             "SELECT lo + (hi - lo) * 0.45, lo + (hi - lo) * 0.55 FROM "
             "(SELECT min(created_at) lo, max(created_at) hi FROM %s) s", r->table);
    res = PQexec(c, sql);
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        peer_say("window: %s", PQerrorMessage(c));
        PQclear(res);
        return -1;
    }
    r->win_lo = PQescapeLiteral(c, PQgetvalue(res, 0, 0), (size_t)PQgetlength(res, 0, 0));
    r->win_hi = PQescapeLiteral(c, PQgetvalue(res, 0, 1), (size_t)PQgetlength(res, 0, 1));
    PQclear(res);
    return r->win_lo && r->win_hi ? 0 : -1;
}

/* Untimed checks against the table; stores duplicates and missing. */
static int verify(struct run *r, PGconn *c, long long *dups, long long *missing)
{
    char sql[512];
    long long v[2], unseen = 0, i;

    *dups = atomic_load(&r->duplicates);
    *missing = 0;
    switch (r->o.workload) {
    case W1:
    case W2:
        /* Every committed INSERT is in the table exactly once. */
        snprintf(sql, sizeof sql,
                 "SELECT count(*), count(DISTINCT payload->>'event_id') FROM %s", r->table);
        if (db_longs(c, sql, v, 2))
            return -1;
        *dups = v[0] - v[1];
        *missing = atomic_load(&r->done) > v[1] ? atomic_load(&r->done) - v[1] : 0;
        return 0;
    case W3:
    case W4:
        /* missing: prefilled rows not acked. Unless the run was cut short,
         * the client's view (ids never claimed) must agree with the table's. */
        snprintf(sql, sizeof sql, "SELECT count(*) FILTER (WHERE status <> 2), "
                 "count(*) FILTER (WHERE status = 1) FROM %s", r->table);
        if (db_longs(c, sql, v, 2))
            return -1;
        *missing = v[0];
        for (i = 0; i <= r->id_hi - r->id_lo; i++)
            unseen += atomic_load(&r->seen[i]) == 0;
        if (!peer_stop_reason() && (unseen + v[1] != v[0] || atomic_load(&r->lost_acks))) {
            peer_say("table has %lld rows not done (%lld leased), client never claimed %lld, "
                "%ld acks lost", v[0], v[1], unseen, atomic_load(&r->lost_acks));
            return -1;
        }
        if (r->o.workload == W4 && !peer_stop_reason()) {
            for (i = 0; i < r->o.aggregates; i++)
                if (atomic_load(&r->agg_last[i]) != r->o.per_agg)
                    atomic_fetch_add(&r->violations, 1);
        }
        return 0;
    default:
        snprintf(sql, sizeof sql, "SELECT count(*) FROM %s WHERE created_at >= %s AND created_at < %s",
                 r->table, r->win_lo, r->win_hi);
        if (db_longs(c, sql, v, 1))
            return -1;
        for (i = 0; i <= r->id_hi - r->id_lo; i++)
            unseen += atomic_load(&r->seen[i]) != 0;
        *missing = v[0] > unseen ? v[0] - unseen : 0;
        r->target = (long)v[0];
        return 0;
    }
}

static const char *note(const struct run *r, char *buf, size_t cap)
{
    const struct opts *o = &r->o;

    switch (o->workload) {
    case W1:
        snprintf(buf, cap, "one prepared INSERT of a jsonb row per autocommit transaction from %ld "
                 "libpq connections (one thread each) into a fresh outbox table with PK(id), "
                 "partial index (id) WHERE status=0, (created_at,id) and (aggregate_id,version); "
                 "latency per INSERT+COMMIT", o->producers);
        break;
    case W2:
        snprintf(buf, cap, "one prepared multi-row INSERT ... VALUES of %ld jsonb rows per autocommit "
                 "transaction from %ld libpq connections into the same outbox table as W1; "
                 "latency per batch commit", o->batch, o->producers);
        break;
    case W3:
        snprintf(buf, cap, "%ld rows COPYed and VACUUM ANALYZEd untimed; %ld connections loop: "
                 "UPDATE SET status=1, lease_until=now()+30s WHERE id IN (SELECT id WHERE status=0 "
                 "ORDER BY id LIMIT %ld FOR UPDATE SKIP LOCKED) RETURNING id, then one UPDATE "
                 "SET status=2 WHERE id=ANY(acked) AND status=1, each autocommit, until a claim is "
                 "empty; p50/p99 per claim (ack latency separate); expired leases are not "
                 "re-offered (none expire in the run)", o->events, o->workers, o->max);
        break;
    case W4:
        snprintf(buf, cap, "no per-key order in PostgreSQL: approximated by claiming, with the W3 "
                 "claim (FOR UPDATE SKIP LOCKED, LIMIT %ld, status=2 ack), only rows with NOT EXISTS "
                 "a row of the same aggregate_id with lower version and status<>2 (index "
                 "(aggregate_id,version)), so only each aggregate's head is visible; %ld aggregates "
                 "x %ld COPYed in version order untimed, %ld connections, an empty claim sleeps 1 ms; "
                 "version order checked client-side per aggregate", o->max, o->aggregates,
                 o->per_agg, o->workers);
        break;
    default:
        snprintf(buf, cap, "%ld rows COPYed (created_at=clock_timestamp()) and VACUUM ANALYZEd "
                 "untimed; one connection DECLAREs a cursor over the index (created_at,id) for the "
                 "middle 10%% of the created_at span, ORDER BY created_at,id, FETCH %d in binary "
                 "with jsonb payload, order checked; p50/p99 per FETCH", o->events, FETCH_ROWS);
        break;
    }
    return buf;
}

/* ---- Main ---- */

int main(int argc, char **argv)
{
    static struct run run;
    struct run *r = &run;
    struct worker *ws = NULL, loader = { 0 };
    PGconn *admin = NULL;
    pthread_condattr_t ca;
    unsigned char rnd[8];
    char version[160], dura[320], notebuf[1024];
    struct peer_head head = { .peer = PEER, .version = version, .durability = dura };
    double secs = 0, pre_secs = 0, ack_p50, ack_p99;
    long long dups = 0, missing = 0;
    long nconn = 0, i, done, errors;
    int rc, failed = 0;
    bool created = false;

    peer_log_init("peer_" PEER, LOG_BUDGET);
    if ((rc = opts_parse(&r->o, argc, argv)))
        return rc < 0 ? 0 : rc;
    r->deadline_ns = peer_now_ns() + (uint64_t)r->o.max_seconds * NS_PER_S;
    r->target = r->o.events;
    peer_signals(false);
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);

    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        uint64_t x = peer_now_ns() ^ ((uint64_t)getpid() << 32);

        memcpy(rnd, &x, sizeof rnd);
    }
    for (i = 0; i < (long)sizeof rnd; i++)
        snprintf(r->runid + 2 * i, 3, "%02x", rnd[i]);
    snprintf(r->table, sizeof r->table, "outbox_%.16s", r->runid);
    r->ev_head_len = (size_t)snprintf(r->ev_head, sizeof r->ev_head, "{\"event_id\":\"pg-%s-", r->runid);
    r->ev_max = peer_event_max(r->ev_head_len, sizeof PEER_TOPIC - 1, (size_t)r->o.payload_bytes);

    if (!(admin = db_open(r->o.addr)))
        return 1;
    if (db_value(admin, "SELECT 'PostgreSQL ' || current_setting('server_version')",
                 version, sizeof version) ||
        durability(admin, dura, sizeof dura) || create_table(admin, r->table))
        goto fail;
    created = true;

    /* Prefill (W3..W5), untimed. */
    if (r->o.workload >= W3) {
        loader.r = r;
        if (!(loader.c = db_open(r->o.addr)) || !(loader.cancel = PQgetCancel(loader.c)))
            goto fail;
        if (phase_run(r, &loader, 1, prefill_main, &pre_secs))
            atomic_fetch_add(&r->errors, 1);
        PQfreeCancel(loader.cancel);
        PQfinish(loader.c);
        loader.cancel = NULL;
        loader.c = NULL;
        peer_say("prefill of %ld rows: %.1f s", r->target, pre_secs);
        if (atomic_load(&r->errors) || (!peer_stop_reason() && after_prefill(r, admin)))
            goto fail;
        if (peer_stop_reason())
            goto report; /* --max-seconds or a signal during the prefill */
    }

    nconn = r->o.workload <= W2 ? r->o.producers : r->o.workload <= W4 ? r->o.workers : 1;
    if (!(ws = calloc((size_t)nconn, sizeof *ws)))
        goto fail;
    for (i = 0; i < nconn; i++) {
        ws[i].r = r;
        if (!(ws[i].c = db_open(r->o.addr)) || !(ws[i].cancel = PQgetCancel(ws[i].c)) ||
            worker_prepare(r, ws[i].c))
            goto fail;
    }
    peer_lat_init(&r->lat, r->o.events + 16);
    peer_lat_init(&r->lat2, r->o.workload == W3 || r->o.workload == W4 ? r->o.events + 16 : 0);
    if (!r->lat.ms || !r->lat2.ms)
        goto fail;

    if (phase_run(r, ws, (int)nconn,
                  r->o.workload <= W2 ? insert_main : r->o.workload <= W4 ? claim_main : read_main,
                  &secs))
        atomic_fetch_add(&r->errors, 1);
    for (i = 0; i < nconn; i++) {
        PQfreeCancel(ws[i].cancel);
        PQfinish(ws[i].c);
        ws[i].cancel = NULL;
        ws[i].c = NULL;
    }
    if (verify(r, admin, &dups, &missing))
        failed = 1;

report:
    done = atomic_load(&r->done);
    errors = atomic_load(&r->errors);
    peer_lat_pct(&r->lat, &head.p50_ms, &head.p99_ms);
    head.workload = r->o.workload;
    head.events = done;
    head.seconds = secs;
    head.dups = dups;
    head.missing = missing;
    head.disorder = atomic_load(&r->violations);
    peer_head_print(&head);
    printf(",\"note\":");
    peer_json_str(stdout, note(r, notebuf, sizeof notebuf));
    printf(",\"target_events\":%ld,\"connections\":%ld,\"payload_bytes\":%ld,\"errors\":%ld,"
           "\"timed_out\":%s,\"table\":\"%s\"",
           r->target, nconn, r->o.payload_bytes, errors, peer_stop_reason() ? "true" : "false", r->table);
    if (r->o.workload == W2)
        printf(",\"batch\":%ld", r->o.batch);
    if (r->o.workload == W3 || r->o.workload == W4) {
        peer_lat_pct(&r->lat2, &ack_p50, &ack_p99);
        peer_json_ms("ack_p50_ms", ack_p50);
        peer_json_ms("ack_p99_ms", ack_p99);
        printf(",\"claims\":%ld,\"empty_claims\":%ld,\"max\":%ld",
               atomic_load(&r->lat.n), atomic_load(&r->empty_claims), r->o.max);
    }
    if (r->o.workload == W5)
        printf(",\"fetches\":%ld,\"payload_bytes_read\":%ld,\"window_rows\":%ld",
               atomic_load(&r->lat.n), atomic_load(&r->bytes), r->win_lo ? r->target : 0L);
    if (r->o.workload >= W3)
        printf(",\"prefill_seconds\":%.1f", pre_secs);
    printf("}\n");
    fflush(stdout);
    if (failed || errors || dups || missing || atomic_load(&r->violations) || peer_stop_reason() ||
        done != r->target)
        failed = 1;
    goto out;
fail:
    failed = 1;
out:
    if (loader.cancel)
        PQfreeCancel(loader.cancel);
    if (loader.c)
        PQfinish(loader.c);
    for (i = 0; ws && i < nconn; i++) {
        if (ws[i].cancel)
            PQfreeCancel(ws[i].cancel);
        if (ws[i].c)
            PQfinish(ws[i].c);
    }
    if (created && db_execf(admin, "DROP TABLE %s", r->table))
        failed = 1;
    PQfreemem(r->win_lo);
    PQfreemem(r->win_hi);
    PQfinish(admin);
    free(ws);
    free(r->seen);
    free(r->agg_last);
    free(r->lat.ms);
    free(r->lat2.ms);
    return failed;
}
