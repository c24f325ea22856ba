/*
 * bench/peers/postgres.c - the PostgreSQL 15 peer of the side-by-side
 * benchmark (issue 7): an outbox table claimed with FOR UPDATE SKIP LOCKED.
 *
 * Owns: the outbox table of one run (created under a unique name, dropped
 * at the end), the SQL of each workload, the client-side checks
 * (duplicates, missing, order) and the fields the report line adds; the
 * command line, the threads, the latencies and the report line itself are
 * the skeleton's (driver.h). It talks to the server only through libpq, one
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
 * index. At --max-seconds (measured from the start of the program) or on
 * SIGINT/SIGTERM the skeleton's pool asks the run to stop and calls
 * cancel_worker, a PQcancel, on every connection of the phase.
 *
 * Exit 0 when the workload moved every event with no error, duplicate,
 * missing event or order violation; 1 otherwise; 2 on a bad argument.
 */

#define _GNU_SOURCE
#include <endian.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver.h"

#define PEER            "postgres"
#define COPY_CHUNK      10000           /* rows per COPY (one transaction) in a prefill */
#define COPY_FLUSH      (256 * 1024)    /* bytes buffered before PQputCopyData */
#define FETCH_ROWS      10000
#define LEASE           "30 seconds"
#define EMPTY_POLL_US   1000
#define LOG_BUDGET      30

enum workload { W1 = 1, W2, W3, W4, W5 };

/* d.target: the events the workload should move (W5: the window's rows);
 * d.lat per request, d.lat2 the acks of W3 and W4. */
struct run {
    struct drv d;                   /* first: the skeleton's */
    char table[40];
    atomic_long next;               /* next event number (W1, W2) */
    atomic_long done;               /* committed inserts, acked claims, rows read */
    atomic_long duplicates;
    atomic_long violations;
    atomic_long empty_claims;
    atomic_long lost_acks;          /* ack updated fewer rows than it named */
    atomic_long bytes;              /* W5: payload bytes read */
    int64_t id_lo, id_hi;           /* prefilled ids (W3..W5) */
    _Atomic unsigned char *seen;    /* per id: times claimed (W3, W4) or read (W5) */
    atomic_int *agg_last;           /* W4: last version processed per aggregate */
    char *win_lo, *win_hi;          /* W5: window bounds as SQL literals */
    PGconn *admin;                  /* main's connection: setup, checks, DROP */
    bool created;                   /* the table exists */
    struct worker *ws;              /* the connections of the timed phase */
    long nconn;
    double pre_secs;                /* the prefill's */
    char version[160], dura[320];
};

/* One connection of a phase, and the thread driving it. */
struct worker {
    struct drv_thread t;            /* first: the pool's */
    struct run *r;
    PGconn *c;
    PGcancel *cancel;
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

/* ---- Connections ---- */

/* Run one statement that returns no rows to speak of; 0 on success. */
static int db_exec(PGconn *c, const char *sql)
{
    PGresult *res = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(res);
    int rc = 0;

    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        drv_say("%.80s...: %s", sql, PQerrorMessage(c));
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
        drv_say("%s: %s", sql, PQerrorMessage(c));
    }
    PQclear(res);
    return rc;
}

static int db_prepare(PGconn *c, const char *name, const char *sql)
{
    PGresult *res = PQprepare(c, name, sql, 0, NULL);
    int rc = 0;

    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        drv_say("prepare %s: %s", name, PQerrorMessage(c));
        rc = -1;
    }
    PQclear(res);
    return rc;
}

static PGconn *db_open(const char *addr)
{
    PGconn *c = PQconnectdb(addr);

    if (PQstatus(c) != CONNECTION_OK) {
        drv_say("connect: %s", PQerrorMessage(c));
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

    switch (r->d.o.workload) {
    case W1:
    case W2:
        if (!(ins = insert_sql(r->table, r->d.o.workload == W1 ? 1 : r->d.o.batch)))
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
    if (drv_stop_reason())
        return;
    atomic_fetch_add(&w->r->d.errors, 1);
    if (drv_may_log())
        drv_say("%s: %s", what, PQerrorMessage(w->c));
}

/* The pool's hook once the run is stopping: cancel what 't' is running. */
static void cancel_worker(struct drv_thread *t)
{
    struct worker *w = (struct worker *)t;
    char err[256];

    PQcancel(w->cancel, err, sizeof err);
}

/* ---- Prefill (W3, W4, W5; not timed) ---- */

/* COPY r->d.target events into the table, COPY_CHUNK rows per transaction,
 * then VACUUM ANALYZE it. W4 rows carry aggregate n % A, version n / A + 1,
 * so the versions of each aggregate are inserted in order. */
static void prefill_main(struct drv_thread *th)
{
    struct worker *w = (struct worker *)th;
    struct run *r = w->r;
    size_t cap = COPY_FLUSH + r->d.ev_max + 64, len;
    char *buf = malloc(cap), sql[256];
    long n = 0, end, agg, ver;
    PGresult *res;

    if (!buf) {
        atomic_fetch_add(&r->d.errors, 1);
        goto out;
    }
    snprintf(sql, sizeof sql, "COPY %s (aggregate_id, version, payload) FROM STDIN", r->table);
    while (n < r->d.target && !drv_stop_reason()) {
        res = PQexec(w->c, sql);
        if (PQresultStatus(res) != PGRES_COPY_IN) {
            PQclear(res);
            worker_fail(w, "COPY");
            goto out;
        }
        PQclear(res);
        end = n + COPY_CHUNK < r->d.target ? n + COPY_CHUNK : r->d.target;
        len = 0;
        for (; n < end; n++) {
            char *p = buf + len;

            if (r->d.o.workload == W4) {
                agg = n % r->d.o.aggregates;
                ver = n / r->d.o.aggregates + 1;
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
            p += drv_event_put(&r->d, p, (uint64_t)n, agg, ver, 0);
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
    if (!drv_stop_reason() && db_execf(w->c, "VACUUM (ANALYZE) %s", r->table))
        atomic_fetch_add(&r->d.errors, 1);
out:
    free(buf);
}

/* ---- W1, W2: enqueue ---- */

/* Take events B at a time and INSERT each group in one transaction. */
static void insert_main(struct drv_thread *th)
{
    struct worker *w = (struct worker *)th;
    struct run *r = w->r;
    long b = r->d.o.workload == W1 ? 1 : r->d.o.batch, k, i, n0;
    char *buf = malloc((size_t)b * (r->d.ev_max + 1));
    const char **vals = calloc((size_t)b, sizeof *vals);
    char *sql;
    PGresult *res;
    uint64_t t;

    if (!buf || !vals) {
        atomic_fetch_add(&r->d.errors, 1);
        goto out;
    }
    while (!drv_stop_reason()) {
        n0 = atomic_fetch_add(&r->next, b);
        if (n0 >= r->d.target)
            break;
        k = r->d.target - n0 < b ? r->d.target - n0 : b;
        for (i = 0; i < k; i++) {
            char *p = buf + (size_t)i * (r->d.ev_max + 1);

            p[drv_event_put(&r->d, p, (uint64_t)(n0 + i), -1, -1, 0)] = '\0';
            vals[i] = p;
        }
        t = peer_now_ns();
        if (k == b) {
            res = PQexecPrepared(w->c, "ins", (int)k, vals, NULL, NULL, 0);
        } else {
            /* The short last batch: a one-off statement of its own size. */
            if (!(sql = insert_sql(r->table, k))) {
                atomic_fetch_add(&r->d.errors, 1);
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
        drv_lat_add(&r->d.lat, (double)(peer_now_ns() - t) / 1e6);
        atomic_fetch_add(&r->done, k);
    }
out:
    free(vals);
    free(buf);
}

/* ---- W3, W4: claim and acknowledge ---- */

/* Claim up to --max rows, check them, acknowledge them in one transaction;
 * until a claim is empty (W3) or every event is acked (W4). */
static void claim_main(struct drv_thread *th)
{
    struct worker *w = (struct worker *)th;
    struct run *r = w->r;
    bool ordered = r->d.o.workload == W4;
    char maxs[24], *ids = malloc((size_t)r->d.o.max * 21 + 3), *p;
    const char *param[1];
    PGresult *res;
    uint64_t t;
    int i, n;

    if (!ids) {
        atomic_fetch_add(&r->d.errors, 1);
        goto out;
    }
    snprintf(maxs, sizeof maxs, "%ld", r->d.o.max);
    while (!drv_stop_reason() && (!ordered || atomic_load(&r->done) < r->d.target)) {
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
        drv_lat_add(&r->d.lat, (double)(peer_now_ns() - t) / 1e6);
        p = ids;
        *p++ = '{';
        for (i = 0; i < n; i++) {
            int64_t id = get_i64(res, i, 0);

            if (id < r->id_lo || id > r->id_hi) {
                if (drv_may_log())
                    drv_say("claimed id %" PRId64 " outside the prefill", id);
                atomic_fetch_add(&r->d.errors, 1);
                continue;
            }
            if (atomic_fetch_add(&r->seen[id - r->id_lo], 1) > 0)
                atomic_fetch_add(&r->duplicates, 1);
            if (ordered) {
                long agg = strtol(PQgetvalue(res, i, 1) + 1, NULL, 10);
                int ver = get_i32(res, i, 2);

                /* The one worker holding the head of 'agg' moves its
                 * last processed version on by exactly one. */
                if (agg < 0 || agg >= r->d.o.aggregates ||
                    atomic_exchange(&r->agg_last[agg], ver) != ver - 1) {
                    atomic_fetch_add(&r->violations, 1);
                    if (drv_may_log())
                        drv_say("order: a%ld version %d out of turn", agg, ver);
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
        drv_lat_add(&r->d.lat2, (double)(peer_now_ns() - t) / 1e6);
        i = atoi(PQcmdTuples(res));
        PQclear(res);
        atomic_fetch_add(&r->done, i);
        if (i < n)
            atomic_fetch_add(&r->lost_acks, n - i);
    }
out:
    free(ids);
}

/* ---- W5: time-window read ---- */

/* Stream the window through a cursor, FETCH_ROWS at a time, in binary,
 * checking (created_at, id) order and counting each id. */
static void read_main(struct drv_thread *th)
{
    struct worker *w = (struct worker *)th;
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
    while (!drv_stop_reason()) {
        t = peer_now_ns();
        res = PQexecParams(w->c, sql, 0, NULL, NULL, NULL, NULL, 1);
        if (PQresultStatus(res) != PGRES_TUPLES_OK) {
            PQclear(res);
            worker_fail(w, "FETCH");
            goto out;
        }
        drv_lat_add(&r->d.lat, (double)(peer_now_ns() - t) / 1e6);
        n = PQntuples(res);
        for (i = 0; i < n; i++) {
            int64_t id = get_i64(res, i, 0), ts = get_i64(res, i, 1);

            if (ts < prev_ts || (ts == prev_ts && id <= prev_id))
                atomic_fetch_add(&r->violations, 1);
            prev_ts = ts;
            prev_id = id;
            if (id < r->id_lo || id > r->id_hi)
                atomic_fetch_add(&r->d.errors, 1);
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
        drv_say("%.80s: %s", sql, PQerrorMessage(c));
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
    if (v[2] != r->d.target || v[1] - v[0] + 1 != v[2]) {
        drv_say("prefill stored %lld rows, ids %lld..%lld, wanted %lld", v[2], v[0], v[1], r->d.target);
        return -1;
    }
    r->id_lo = v[0];
    r->id_hi = v[1];
    if (!(r->seen = calloc((size_t)(v[1] - v[0] + 1), sizeof *r->seen)))
        return -1;
    if (r->d.o.workload == W4 &&
        !(r->agg_last = calloc((size_t)r->d.o.aggregates, sizeof *r->agg_last)))
        return -1;
    if (r->d.o.workload != W5)
        return 0;
    snprintf(sql, sizeof sql,
             "SELECT lo + (hi - lo) * 0.45, lo + (hi - lo) * 0.55 FROM "
             "(SELECT min(created_at) lo, max(created_at) hi FROM %s) s", r->table);
    res = PQexec(c, sql);
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        drv_say("window: %s", PQerrorMessage(c));
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
    switch (r->d.o.workload) {
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
        if (!drv_stop_reason() && (unseen + v[1] != v[0] || atomic_load(&r->lost_acks))) {
            drv_say("table has %lld rows not done (%lld leased), client never claimed %lld, "
                "%ld acks lost", v[0], v[1], unseen, atomic_load(&r->lost_acks));
            return -1;
        }
        if (r->d.o.workload == W4 && !drv_stop_reason()) {
            for (i = 0; i < r->d.o.aggregates; i++)
                if (atomic_load(&r->agg_last[i]) != r->d.o.per_agg)
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
        r->d.target = (long)v[0];
        return 0;
    }
}

static const char *note(const struct run *r, char *buf, size_t cap)
{
    const struct drv_opts *o = &r->d.o;

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

/* The report's fields after the counts. */
static void fields(struct drv *d, enum drv_part part)
{
    struct run *r = (struct run *)d;
    char notebuf[1024];
    double ack_p50, ack_p99;

    if (part != DRV_PART_TAIL)
        return;
    drv_put_str("note", note(r, notebuf, sizeof notebuf));
    drv_put_long("target_events", d->target);
    drv_put_long("connections", r->nconn);
    drv_put_long("payload_bytes", d->o.payload_bytes);
    drv_put_long("errors", atomic_load(&d->errors));
    drv_put_bool("timed_out", drv_stop_reason() != 0);
    drv_put_str("table", r->table);
    if (d->o.workload == W2)
        drv_put_long("batch", d->o.batch);
    if (d->o.workload == W3 || d->o.workload == W4) {
        drv_lat_pct(&d->lat2, &ack_p50, &ack_p99);
        drv_put_ms("ack_p50_ms", ack_p50);
        drv_put_ms("ack_p99_ms", ack_p99);
        drv_put_long("claims", atomic_load(&d->lat.n));
        drv_put_long("empty_claims", atomic_load(&r->empty_claims));
        drv_put_long("max", d->o.max);
    }
    if (d->o.workload == W5) {
        drv_put_long("fetches", atomic_load(&d->lat.n));
        drv_put_long("payload_bytes_read", atomic_load(&r->bytes));
        drv_put_long("window_rows", r->win_lo ? d->target : 0);
    }
    if (d->o.workload >= W3)
        drv_put_num("prefill_seconds", r->pre_secs, 1);
}

/* ---- Open, run, close ---- */

/* The admin connection, what the server says of itself, the table. */
static int open_run(struct drv *d)
{
    struct run *r = (struct run *)d;

    d->version = r->version;
    d->durability = r->dura;
    snprintf(r->table, sizeof r->table, "outbox_%.16s", d->runid);
    if (!(r->admin = db_open(d->o.addr)))
        return DRV_ABORT;
    if (db_value(r->admin, "SELECT 'PostgreSQL ' || current_setting('server_version')",
                 r->version, sizeof r->version) ||
        durability(r->admin, r->dura, sizeof r->dura) || create_table(r->admin, r->table))
        return DRV_ABORT;
    r->created = true;
    return DRV_OK;
}

/* The counts of the report from the tallies; returns rc. */
static int tally(struct run *r, int rc)
{
    r->d.events = atomic_load(&r->done);
    r->d.disorder = atomic_load(&r->violations);
    return rc;
}

/* Every workload: the prefill (W3..W5, untimed, one connection), then the
 * timed phase on connections opened and prepared before it, then the
 * untimed checks against the table. */
static int run_workload(struct drv *d)
{
    struct run *r = (struct run *)d;
    int w = d->o.workload;
    void (*fn)(struct drv_thread *th) = w <= W2 ? insert_main : w <= W4 ? claim_main : read_main;
    struct worker loader = {.r = r};
    long i;

    if (w >= W3) {
        if (!(loader.c = db_open(d->o.addr)) || !(loader.cancel = PQgetCancel(loader.c))) {
            PQfinish(loader.c);
            return DRV_ABORT;
        }
        r->pre_secs = drv_threads_run(d, &loader, sizeof loader, 1, prefill_main, 0);
        PQfreeCancel(loader.cancel);
        PQfinish(loader.c);
        drv_say("prefill of %lld rows: %.1f s", d->target, r->pre_secs);
        if (atomic_load(&d->errors) || (!drv_stop_reason() && after_prefill(r, r->admin)))
            return DRV_ABORT;
        if (drv_stop_reason())
            return tally(r, DRV_FAILED);    /* --max-seconds or a signal during the prefill */
    }

    r->nconn = w <= W2 ? d->o.producers : w <= W4 ? d->o.workers : 1;
    if (!(r->ws = calloc((size_t)r->nconn, sizeof *r->ws)))
        return DRV_ABORT;
    for (i = 0; i < r->nconn; i++) {
        r->ws[i].r = r;
        if (!(r->ws[i].c = db_open(d->o.addr)) || !(r->ws[i].cancel = PQgetCancel(r->ws[i].c)) ||
            worker_prepare(r, r->ws[i].c))
            return DRV_ABORT;
    }
    drv_lat_init(&d->lat, d->o.events + 16);
    drv_lat_init(&d->lat2, w == W3 || w == W4 ? d->o.events + 16 : 0);
    if (!d->lat.ms || !d->lat2.ms)
        return DRV_ABORT;

    d->seconds = drv_threads_run(d, r->ws, sizeof *r->ws, r->nconn, fn, 0);
    for (i = 0; i < r->nconn; i++) {
        PQfreeCancel(r->ws[i].cancel);
        PQfinish(r->ws[i].c);
        r->ws[i].cancel = NULL;
        r->ws[i].c = NULL;
    }
    return tally(r, verify(r, r->admin, &d->dups, &d->missing) ? DRV_FAILED : DRV_OK);
}

/* The connections left, the table dropped (a failed DROP fails the run). */
static int close_run(struct drv *d)
{
    struct run *r = (struct run *)d;
    int rc = 0;
    long i;

    for (i = 0; r->ws && i < r->nconn; i++) {
        if (r->ws[i].cancel)
            PQfreeCancel(r->ws[i].cancel);
        if (r->ws[i].c)
            PQfinish(r->ws[i].c);
    }
    if (r->created && db_execf(r->admin, "DROP TABLE %s", r->table))
        rc = -1;
    PQfreemem(r->win_lo);
    PQfreemem(r->win_hi);
    PQfinish(r->admin);
    free(r->ws);
    free(r->seen);
    free(r->agg_last);
    return rc;
}

/* max_connections is 100: the phase's connections, the admin and the loader. */
static const struct drv_bound bounds[] = {
    {DRV_O_PRODUCERS, 1, 90},
    {DRV_O_WORKERS, 1, 90},
    {DRV_O_BATCH, 1, 10000},        /* W2's INSERT binds --batch parameters (65535 at most) */
    {DRV_O_MAX, 1, 10000},
    {DRV_O_PAYLOAD, 64, 1 << 20},
    {0, 0, 0},
};

static const struct drv_peer postgres_peer = {
    .name = PEER,
    .tag = "pg",
    .addr_arg = "CONNINFO",
    .addr_help = "libpq conninfo, e.g. \"host=127.0.0.1 port=5432 dbname=bench user=postgres\"",
    .help = "  W2: --batch rows per INSERT transaction; W5 FETCHes 10000 rows at a time.\n",
    .bounds = bounds,
    .log_budget = LOG_BUDGET,
    .fail_on = DRV_FAIL_ALL,
    .size = sizeof(struct run),
    .open = open_run,
    .run = {run_workload, run_workload, run_workload, run_workload, run_workload},
    .fields = fields,
    .close = close_run,
    .cancel = cancel_worker,
};

int main(int argc, char **argv)
{
    return drv_main(&postgres_peer, argc, argv);
}
