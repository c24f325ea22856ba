/* test_outbox.c - proto/outbox.sql (DESIGN §14) on a real PostgreSQL
 * (tests/kit/pgfx.h): the file applies again and again and upgrades an older
 * table; mic_outbox_append gives each aggregate versions 1..N without gap
 * or duplicate under concurrent transactions, gives a rolled-back version
 * back, makes UUIDv7 ids that sort in append order; the trigger notifies
 * mic_outbox at commit only; bad input is refused by the table.
 *
 * One server for the whole file (group setup), proto/outbox.sql applied to
 * its schema public; the tests of the file itself work in schemas of their
 * own.  Each test uses its own aggregates, so their order does not matter.
 * Run from the repository's root (make check does). */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "pgfx.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define OUTBOX_SQL "proto/outbox.sql"

struct fx {
    struct pgfx pg;
    PGconn *c;  /* a session on schema public, where outbox.sql is applied */
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);

    if (!f)
        return -1;
    if (pgfx_start(&f->pg))
        goto fail_free;
    if (!(f->c = pgfx_connect(&f->pg)) || pgfx_apply_file(f->c, OUTBOX_SQL))
        goto fail_pg;
    *state = f;
    return 0;
fail_pg:
    PQfinish(f->c);
    pgfx_stop(&f->pg);
fail_free:
    free(f);
    return -1;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    int rc;

    if (!f)  /* cmocka tears down after a failed setup too */
        return 0;
    PQfinish(f->c);
    rc = pgfx_stop(&f->pg);
    free(f);
    return rc;
}

/* Each test's setup: the shared session out of any transaction a failed
 * test left open. */
static int reset(void **state)
{
    struct fx *f = *state;

    if (PQtransactionStatus(f->c) != PQTRANS_IDLE)
        return pgfx_exec(f->c, "ROLLBACK");
    return 0;
}

/* ---- Helpers ---- */

/* The one value of a one-row, one-column query (asserted), copied. */
static void q_text(PGconn *c, const char *sql, char *out, size_t len)
{
    PGresult *r = PQexec(c, sql);

    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        fail_msg("%s: %s", sql, PQerrorMessage(c));
    assert_int_equal(PQntuples(r), 1);
    assert_int_equal(PQnfields(r), 1);
    snprintf(out, len, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
}

static long long q_int(PGconn *c, const char *sql)
{
    char v[64];

    q_text(c, sql, v, sizeof v);
    assert_true(v[0] != '\0');
    return strtoll(v, NULL, 10);
}

static void exec_ok(PGconn *c, const char *sql)
{
    assert_int_equal(pgfx_exec(c, sql), 0);
}

/* SELECT * FROM mic_outbox_append(...) with the given arguments (NULL:
 * SQL NULL; event_type 'x.happened', payload {"n":1}).  Returns the result
 * (the caller's: PQclear) whatever its status. */
static PGresult *append_res(PGconn *c, const char *atype, const char *aid, const char *event_id)
{
    const char *p[6] = {"orders", atype, aid, "x.happened", "{\"n\":1}", event_id};

    return PQexecParams(c,
                        "SELECT event_id, aggregate_version FROM mic_outbox_append("
                        "$1, $2, $3, $4, $5::jsonb, NULL, 0::smallint, $6)",
                        6, NULL, p, NULL, NULL, 0);
}

/* An append that must succeed: returns its version (0 when it has none)
 * and copies its event_id into 'id' (may be NULL). */
static long long append(PGconn *c, const char *atype, const char *aid, const char *event_id,
                        char id[64])
{
    PGresult *r = append_res(c, atype, aid, event_id);
    long long v;

    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        fail_msg("mic_outbox_append: %s", PQerrorMessage(c));
    assert_int_equal(PQntuples(r), 1);
    if (id)
        snprintf(id, 64, "%s", PQgetvalue(r, 0, 0));
    v = PQgetisnull(r, 0, 1) ? 0 : strtoll(PQgetvalue(r, 0, 1), NULL, 10);
    PQclear(r);
    return v;
}

/* A new session whose search_path is a new schema 'schema' only. */
static PGconn *schema_session(struct fx *f, const char *schema)
{
    char sql[160];
    PGconn *c = pgfx_connect(&f->pg);

    assert_non_null(c);
    snprintf(sql, sizeof sql, "CREATE SCHEMA %s; SET search_path = %s", schema, schema);
    exec_ok(c, sql);
    return c;
}

/* What DESIGN §14 names, in the session's current schema, each once. */
static void assert_objects(PGconn *c)
{
    char cols[600];

    q_text(c,
           "SELECT string_agg(column_name::text, ',' ORDER BY column_name) FROM information_schema.columns"
           " WHERE table_schema = current_schema() AND table_name = 'mic_outbox'",
           cols, sizeof cols);
    assert_string_equal(cols, "aggregate_id,aggregate_type,aggregate_version,attempts,correlation_id,"
                              "created_at,dispatched_at,event_id,event_type,headers,id,last_error,"
                              "lease_expires_at,lease_token,not_before,payload,priority,schema_version,"
                              "status,topic");
    q_text(c,
           "SELECT string_agg(column_name::text, ',' ORDER BY ordinal_position) FROM information_schema.columns"
           " WHERE table_schema = current_schema() AND table_name = 'mic_outbox_versions'",
           cols, sizeof cols);
    assert_string_equal(cols, "aggregate_type,aggregate_id,last_version");
    /* the seed's index, whole (not partial), on exactly these columns */
    assert_int_equal(q_int(c,
        "SELECT count(*) FROM pg_index i WHERE i.indrelid = 'mic_outbox'::regclass AND i.indpred IS NULL"
        " AND (SELECT array_agg(a.attname::text ORDER BY k.n) FROM unnest(i.indkey) WITH ORDINALITY k(att, n)"
        "      JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.att)"
        "   = ARRAY['aggregate_type', 'aggregate_id', 'status', 'created_at', 'id']"), 1);
    /* unique (aggregate_type, aggregate_id, aggregate_version), the checks,
     * unique event_id */
    assert_int_equal(q_int(c,
        "SELECT count(*) FROM pg_constraint WHERE conrelid = 'mic_outbox'::regclass AND conname IN"
        " ('mic_outbox_status_check', 'mic_outbox_aggregate_check', 'mic_outbox_aggregate_version_key',"
        "  'mic_outbox_event_id_key')"), 4);
    assert_int_equal(q_int(c,
        "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'mic_outbox'::regclass AND NOT tgisinternal"
        " AND tgname = 'mic_outbox_notify' AND tgenabled = 'O'"), 1);
    assert_int_equal(q_int(c,
        "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'mic_outbox'::regclass AND NOT tgisinternal"), 1);
    assert_int_equal(q_int(c,
        "SELECT count(*) FROM pg_proc WHERE pronamespace = current_schema()::regnamespace"
        " AND proname = 'mic_outbox_append'"), 1);
    assert_int_equal(q_int(c,
        "SELECT count(*) FROM pg_proc WHERE oid = to_regprocedure("
        "'mic_outbox_append(text, text, text, text, jsonb, jsonb, smallint, text)')"
        " AND pronamespace = current_schema()::regnamespace"), 1);
}

/* ---- The file ---- */

/* Applied twice to an empty schema: no error, and every object once. */
static void file_applies_twice(void **state)
{
    struct fx *f = *state;
    PGconn *c = schema_session(f, "twice");

    assert_int_equal(pgfx_apply_file(c, OUTBOX_SQL), 0);
    assert_int_equal(pgfx_apply_file(c, OUTBOX_SQL), 0);
    assert_objects(c);
    /* and it works there */
    assert_int_equal(append(c, "order", "t1", NULL, NULL), 1);
    assert_int_equal(append(c, "order", "t1", NULL, NULL), 2);
    assert_int_equal(pgfx_apply_file(c, OUTBOX_SQL), 0);
    assert_int_equal(q_int(c, "SELECT count(*) FROM mic_outbox"), 2);
    assert_int_equal(append(c, "order", "t1", NULL, NULL), 3);
    PQfinish(c);
}

/* An older mic_outbox (id, event_id, topic, payload) with a row: the file
 * adds the missing columns with their defaults and keeps the row. */
static void file_upgrades_older_table(void **state)
{
    struct fx *f = *state;
    PGconn *c = schema_session(f, "legacy");
    char v[200];

    exec_ok(c, "CREATE TABLE mic_outbox (id bigserial PRIMARY KEY, event_id text NOT NULL UNIQUE,"
               " topic text NOT NULL, payload jsonb);"
               "INSERT INTO mic_outbox (event_id, topic, payload) VALUES ('old-1', 'orders', '{\"a\": 1}')");
    assert_int_equal(pgfx_apply_file(c, OUTBOX_SQL), 0);
    assert_objects(c);
    assert_int_equal(q_int(c, "SELECT count(*) FROM mic_outbox"), 1);
    q_text(c,
           "SELECT concat_ws('|', id, event_id, topic, payload::text, status, attempts, priority,"
           " schema_version, aggregate_type IS NULL AND aggregate_id IS NULL AND aggregate_version IS NULL,"
           " headers IS NULL AND not_before IS NULL AND lease_token IS NULL AND dispatched_at IS NULL,"
           " created_at > now() - interval '1 hour' AND created_at <= clock_timestamp())"
           " FROM mic_outbox",
           v, sizeof v);
    assert_string_equal(v, "1|old-1|orders|{\"a\": 1}|pending|0|0|1|t|t|t");
    /* the upgraded table takes appends, and its ids go on */
    assert_int_equal(append(c, "order", "l1", "new-1", NULL), 1);
    assert_int_equal(q_int(c, "SELECT id FROM mic_outbox WHERE event_id = 'new-1'"), 2);
    assert_int_equal(pgfx_apply_file(c, OUTBOX_SQL), 0);
    assert_int_equal(q_int(c, "SELECT count(*) FROM mic_outbox"), 2);
    PQfinish(c);
}

/* ---- Versions ---- */

#define CONC_THREADS 16
#define CONC_TXNS 2     /* transactions per thread */
#define CONC_APPENDS 4  /* appends per transaction */

struct conc {
    PGconn *c;
    pthread_barrier_t *start;
    atomic_int *running;
    long long v[CONC_TXNS][CONC_APPENDS];
    char err[300];
};

/* A thread: its transactions, each appending CONC_APPENDS events to the one
 * aggregate and holding its version lock a little (pg_sleep) so that the
 * others queue on it.  No cmocka assertions here (not the test's thread):
 * a failure is left in err. */
static void *conc_run(void *arg)
{
    struct conc *t = arg;
    PGresult *r = NULL;

    pthread_barrier_wait(t->start);
    for (int x = 0; x < CONC_TXNS; x++) {
        if (pgfx_exec(t->c, "BEGIN"))
            goto fail;
        for (int i = 0; i < CONC_APPENDS; i++) {
            r = append_res(t->c, "order", "conc", NULL);
            if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
                goto fail;
            t->v[x][i] = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
            PQclear(r);
            r = NULL;
            if (i == 0 && pgfx_exec(t->c, "SELECT pg_sleep(0.002)"))
                goto fail;
        }
        if (pgfx_exec(t->c, "COMMIT"))
            goto fail;
    }
    atomic_fetch_sub(t->running, 1);
    return NULL;
fail:
    snprintf(t->err, sizeof t->err, "%s", PQerrorMessage(t->c));
    PQclear(r);
    atomic_fetch_sub(t->running, 1);
    return NULL;
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;

    return (x > y) - (x < y);
}

/* 16 concurrent transactions on one aggregate: versions 1..N, no gap, no
 * duplicate, N the number of appends; each transaction's own versions are
 * consecutive (it held the aggregate's row from its first append on). */
static void concurrent_appends_number_without_gap(void **state)
{
    enum { N = CONC_THREADS * CONC_TXNS * CONC_APPENDS };
    struct fx *f = *state;
    static struct conc t[CONC_THREADS];
    pthread_t th[CONC_THREADS];
    pthread_barrier_t start;
    atomic_int running = CONC_THREADS;
    long long all[N], waiting = 0, w;
    PGresult *r;
    int n = 0;

    memset(t, 0, sizeof t);
    assert_int_equal(pthread_barrier_init(&start, NULL, CONC_THREADS + 1), 0);
    for (int i = 0; i < CONC_THREADS; i++) {
        t[i].c = pgfx_connect(&f->pg);
        assert_non_null(t[i].c);
        t[i].start = &start;
        t[i].running = &running;
        assert_int_equal(pthread_create(&th[i], NULL, conc_run, &t[i]), 0);
    }
    pthread_barrier_wait(&start);
    /* meanwhile: the most sessions seen waiting for a lock at once, to show
     * that the transactions really overlapped */
    while (atomic_load(&running) > 0) {
        w = q_int(f->c, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                        " AND datname = current_database()");
        if (w > waiting)
            waiting = w;
    }
    for (int i = 0; i < CONC_THREADS; i++) {
        pthread_join(th[i], NULL);
        PQfinish(t[i].c);
    }
    pthread_barrier_destroy(&start);
    for (int i = 0; i < CONC_THREADS; i++) {
        if (t[i].err[0])
            fail_msg("thread %d: %s", i, t[i].err);
        for (int x = 0; x < CONC_TXNS; x++)
            for (int k = 0; k < CONC_APPENDS; k++) {
                if (k)
                    assert_int_equal(t[i].v[x][k], t[i].v[x][k - 1] + 1);
                all[n++] = t[i].v[x][k];
            }
    }
    print_message("at most %lld sessions waited for the aggregate's lock at once\n", waiting);
    assert_true(waiting >= 2);
    qsort(all, N, sizeof all[0], cmp_ll);
    for (int i = 0; i < N; i++)
        assert_int_equal(all[i], i + 1);
    /* the table agrees */
    r = PQexec(f->c, "SELECT aggregate_version FROM mic_outbox WHERE aggregate_type = 'order'"
                     " AND aggregate_id = 'conc' ORDER BY aggregate_version");
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(r), N);
    for (int i = 0; i < N; i++)
        assert_int_equal(strtoll(PQgetvalue(r, i, 0), NULL, 10), i + 1);
    PQclear(r);
    assert_int_equal(q_int(f->c, "SELECT last_version FROM mic_outbox_versions"
                                 " WHERE aggregate_type = 'order' AND aggregate_id = 'conc'"), N);
}

/* A rolled-back append leaves no row and no used version: the next
 * committed append takes exactly the next one. */
static void rollback_gives_version_back(void **state)
{
    struct fx *f = *state;
    const char *last = "SELECT last_version FROM mic_outbox_versions"
                       " WHERE aggregate_type = 'order' AND aggregate_id = 'rb'";

    assert_int_equal(append(f->c, "order", "rb", NULL, NULL), 1);
    assert_int_equal(q_int(f->c, last), 1);
    exec_ok(f->c, "BEGIN");
    assert_int_equal(append(f->c, "order", "rb", "rb-rolled-back", NULL), 2);
    assert_int_equal(q_int(f->c, last), 2);
    exec_ok(f->c, "ROLLBACK");
    assert_int_equal(q_int(f->c, "SELECT count(*) FROM mic_outbox WHERE event_id = 'rb-rolled-back'"), 0);
    assert_int_equal(q_int(f->c, last), 1);
    assert_int_equal(append(f->c, "order", "rb", "rb-2", NULL), 2);
    assert_int_equal(q_int(f->c, last), 2);
    assert_int_equal(q_int(f->c, "SELECT aggregate_version FROM mic_outbox WHERE event_id = 'rb-2'"), 2);
    assert_int_equal(q_int(f->c, "SELECT count(*) FROM mic_outbox WHERE aggregate_type = 'order'"
                                 " AND aggregate_id = 'rb'"), 2);
}

/* ---- Ids ---- */

#define ID_RUN 50

/* Generated ids are UUIDv7 of now and sort in append order; a given
 * event_id is kept. */
static void ids_are_uuidv7_in_order(void **state)
{
    struct fx *f = *state;
    static char ids[ID_RUN][64];
    char id[64], sql[160], hex[13];
    struct timespec now;
    long long ms, now_ms;

    assert_int_equal(append(f->c, NULL, NULL, NULL, id), 0);
    clock_gettime(CLOCK_REALTIME, &now);
    now_ms = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    assert_int_equal(strlen(id), 36);
    for (int i = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23)
            assert_int_equal(id[i], '-');
        else
            assert_non_null(strchr("0123456789abcdef", id[i]));
    }
    assert_int_equal(id[14], '7');                 /* version */
    assert_non_null(strchr("89ab", id[19]));        /* RFC 9562 variant */
    memcpy(hex, id, 8);
    memcpy(hex + 8, id + 9, 4);
    hex[12] = '\0';
    ms = strtoll(hex, NULL, 16);
    assert_true(ms > now_ms - 60000 && ms <= now_ms + 60000);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM mic_outbox WHERE event_id = '%s'", id);
    assert_int_equal(q_int(f->c, sql), 1);
    /* successive appends, each committed on its own */
    for (int i = 0; i < ID_RUN; i++)
        append(f->c, i % 2 ? "order" : NULL, i % 2 ? "ids" : NULL, NULL, ids[i]);
    for (int i = 1; i < ID_RUN; i++)
        if (strcmp(ids[i - 1], ids[i]) >= 0)
            fail_msg("append %d got %s, after %s", i, ids[i], ids[i - 1]);
    /* and within one transaction */
    exec_ok(f->c, "BEGIN");
    for (int i = 0; i < ID_RUN; i++)
        append(f->c, NULL, NULL, NULL, ids[i]);
    exec_ok(f->c, "COMMIT");
    for (int i = 1; i < ID_RUN; i++)
        if (strcmp(ids[i - 1], ids[i]) >= 0)
            fail_msg("append %d of a transaction got %s, after %s", i, ids[i], ids[i - 1]);
    /* an explicit event_id is the event's */
    assert_int_equal(append(f->c, NULL, NULL, "explicit-1", id), 0);
    assert_string_equal(id, "explicit-1");
    assert_int_equal(append(f->c, "order", "explicit", "explicit-2", id), 1);
    assert_string_equal(id, "explicit-2");
    assert_int_equal(q_int(f->c, "SELECT count(*) FROM mic_outbox WHERE event_id IN ('explicit-1', 'explicit-2')"), 2);
}

/* ---- Notify ---- */

/* The next notification of 'c' (the caller's: PQfreemem), waiting on its
 * socket for up to 10 s; NULL if none came. */
static PGnotify *next_notify(PGconn *c)
{
    struct timespec t0, t;
    struct pollfd p = {PQsocket(c), POLLIN, 0};
    PGnotify *n;
    long left;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        assert_int_equal(PQconsumeInput(c), 1);
        if ((n = PQnotifies(c)))
            return n;
        clock_gettime(CLOCK_MONOTONIC, &t);
        left = 10000 - ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
        if (left <= 0)
            return NULL;
        assert_true(poll(&p, 1, (int)left) >= 0);
    }
}

/* Assert the next notification: channel mic_outbox, from 'from's session,
 * with payload 'extra'. */
static void expect_notify(PGconn *listener, PGconn *from, const char *extra)
{
    PGnotify *n = next_notify(listener);

    if (!n)
        fail_msg("no notification within 10 s (expected '%s')", extra);
    assert_string_equal(n->relname, "mic_outbox");
    assert_string_equal(n->extra, extra);
    assert_int_equal(n->be_pid, PQbackendPID(from));
    PQfreemem(n);
}

/* LISTEN mic_outbox hears an append when it commits, not before, and never
 * one that rolls back.  Notifications arrive in commit order, so a marker
 * NOTIFY committed after a step shows what that step sent, without a
 * sleep. */
static void notify_at_commit_only(void **state)
{
    struct fx *f = *state;
    PGconn *l = pgfx_connect(&f->pg), *a = pgfx_connect(&f->pg);

    assert_non_null(l);
    assert_non_null(a);
    exec_ok(l, "LISTEN mic_outbox");
    /* committed: heard at the commit, after a marker committed before it */
    exec_ok(a, "BEGIN");
    append(a, "order", "notify", NULL, NULL);
    exec_ok(f->c, "NOTIFY mic_outbox, 'before-commit'");
    exec_ok(a, "COMMIT");
    expect_notify(l, f->c, "before-commit");
    expect_notify(l, a, "");
    /* rolled back: the marker sent after it is the next thing heard */
    exec_ok(a, "BEGIN");
    append(a, "order", "notify", NULL, NULL);
    exec_ok(a, "ROLLBACK");
    exec_ok(a, "NOTIFY mic_outbox, 'after-rollback'");
    expect_notify(l, a, "after-rollback");
    /* an autocommit append is heard too, and once */
    append(a, "order", "notify", NULL, NULL);
    exec_ok(a, "NOTIFY mic_outbox, 'after-append'");
    expect_notify(l, a, "");
    expect_notify(l, a, "after-append");
    PQfinish(a);
    PQfinish(l);
}

/* ---- Bad input ---- */

/* An append that must fail: asserts its SQLSTATE and constraint. */
static void append_refused(PGconn *c, const char *atype, const char *aid, const char *event_id,
                           const char *sqlstate, const char *constraint)
{
    PGresult *r = append_res(c, atype, aid, event_id);
    const char *con = PQresultErrorField(r, PG_DIAG_CONSTRAINT_NAME);

    assert_int_equal(PQresultStatus(r), PGRES_FATAL_ERROR);
    print_message("refused: %s\n", PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY));
    assert_string_equal(PQresultErrorField(r, PG_DIAG_SQLSTATE), sqlstate);
    assert_non_null(con);
    assert_string_equal(con, constraint);
    assert_non_null(strstr(PQresultErrorMessage(r), constraint));
    PQclear(r);
}

/* An aggregate_type without aggregate_id (or the reverse) is refused by
 * the table's check and stores nothing; a duplicate event_id is refused by
 * its unique constraint and uses no version. */
static void bad_input_refused(void **state)
{
    struct fx *f = *state;
    long long rows = q_int(f->c, "SELECT count(*) FROM mic_outbox");
    const char *last = "SELECT last_version FROM mic_outbox_versions"
                       " WHERE aggregate_type = 'order' AND aggregate_id = 'dup'";

    append_refused(f->c, "badtype", NULL, "bad-1", "23514", "mic_outbox_aggregate_check");
    append_refused(f->c, NULL, "bad-id", "bad-2", "23514", "mic_outbox_aggregate_check");
    assert_int_equal(q_int(f->c, "SELECT count(*) FROM mic_outbox"), rows);
    assert_int_equal(q_int(f->c, "SELECT count(*) FROM mic_outbox WHERE event_id IN ('bad-1', 'bad-2')"), 0);
    assert_int_equal(q_int(f->c, "SELECT count(*) FROM mic_outbox_versions"
                                 " WHERE aggregate_type = 'badtype' OR aggregate_id = 'bad-id'"), 0);
    assert_int_equal(append(f->c, "order", "dup", "dup-1", NULL), 1);
    append_refused(f->c, "order", "dup", "dup-1", "23505", "mic_outbox_event_id_key");
    append_refused(f->c, NULL, NULL, "dup-1", "23505", "mic_outbox_event_id_key");
    assert_int_equal(q_int(f->c, "SELECT count(*) FROM mic_outbox WHERE event_id = 'dup-1'"), 1);
    assert_int_equal(q_int(f->c, last), 1);
    assert_int_equal(append(f->c, "order", "dup", "dup-2", NULL), 2);
    assert_int_equal(q_int(f->c, "SELECT count(*) FROM mic_outbox"), rows + 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(file_applies_twice, reset),
        cmocka_unit_test_setup(file_upgrades_older_table, reset),
        cmocka_unit_test_setup(concurrent_appends_number_without_gap, reset),
        cmocka_unit_test_setup(rollback_gives_version_back, reset),
        cmocka_unit_test_setup(ids_are_uuidv7_in_order, reset),
        cmocka_unit_test_setup(notify_at_commit_only, reset),
        cmocka_unit_test_setup(bad_input_refused, reset),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
