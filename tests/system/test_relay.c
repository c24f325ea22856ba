/* test_relay.c - mic-relay (issue 15) against a real PostgreSQL (tests/
 * pgfx.c, proto/outbox.sql applied) and a real micd, the relay a child
 * process ($MIC_RELAY, default build/san/mic-relay) as an operator runs
 * it.
 *
 *   publishes_and_marks         every committed row reaches micd once and
 *                               is marked dispatched, with its event_id and
 *                               created_at kept;
 *   rollback_publishes_nothing  mic_outbox_append in a transaction that
 *                               rolls back: nothing reaches micd;
 *   relays_claim_disjoint_sets  two, then four relays at once: every row
 *                               published, none twice (micd counts no
 *                               duplicate) while every relay lives;
 *   ordered_four_relays         --preserve-aggregate-order, four relays,
 *                               200 aggregates (unversioned: the order is
 *                               the rows' (created_at, id)): each aggregate's
 *                               events reach micd in order (micd's seq, its
 *                               arrival order) and come out of an ordered
 *                               group in that order;
 *   poison_row_to_dlq           a row micd refuses (422) goes to dlq after
 *                               one attempt with micd's error in
 *                               last_error, and the rows behind it flow;
 *                               its /metrics (--metrics-listen) count them,
 *                               and its log is JSON lines;
 *   micd_down_then_back         rows appended while micd is down wait
 *                               (attempts counted, nothing lost) and flow
 *                               once it is back on the same port; an
 *                               aggregate's versions still reach micd in
 *                               order (a version overtaken by its successor
 *                               after a retry's backoff was refused for good:
 *                               409 version_below_baseline);
 *   crash_after_ack             the seed's relay crash right after micd's
 *                               answer: restarted, every row dispatched and
 *                               each event in micd's log once;
 *   lease_taken_over            a relay SIGSTOPped past its lease: another
 *                               takes the rows over, and the stale one's late
 *                               marking changes nothing;
 *   versions_of_one_aggregate_flow  sixty versions of one aggregate flow one
 *                               claim after the other, without waiting for
 *                               a NOTIFY between them;
 *   max_attempts_to_dlq         a publish that keeps failing ends in dlq
 *                               after --max-attempts, the failure kept;
 *   order_service_end_to_end    examples/order_service (some transactions
 *                               rolled back), the relay, examples/worker_pool
 *                               on an ordered group: exactly the committed
 *                               events are acked.
 *
 * TEST_FILTER=NAME (a cmocka glob) runs only the matching tests.
 *
 * Nothing sleeps: every wait is await() on a figure of PostgreSQL or micd,
 * with generous outer bounds. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "harness.h"
#include "claimkit.h"
#include "pgfx.h"

#include <fcntl.h>
#include <libpq-fe.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define WAIT_MS 90000
#define RELAYS_MAX 4

static struct srv S;
static struct pgfx P;
static PGconn *db;                 /* the test's own connection */
static pid_t relays[RELAYS_MAX];   /* children a failed assertion left behind */
static char logdir[64];

static const char *relay_path(void)
{
    const char *p = getenv("MIC_RELAY");

    return p && *p ? p : "build/san/mic-relay";
}

static int setup(void **state)
{
    static const char *const args[] = {"--no-auto-topics", NULL};

    (void)state;
    snprintf(logdir, sizeof logdir, "/tmp/mic-relay-XXXXXX");
    if (!mkdtemp(logdir) || pgfx_start(&P) || !(db = pgfx_connect(&P)) ||
        pgfx_apply_file(db, "proto/outbox.sql"))
        return -1;
    return srv_start_shared(&S, args);
}

static void relays_kill(void)
{
    for (int i = 0; i < RELAYS_MAX; i++)
        if (relays[i] > 0) {
            kill(relays[i], SIGKILL);
            waitpid(relays[i], NULL, 0);
            relays[i] = 0;
        }
}

/* After each test: a relay a failed assertion left running is killed. */
static int test_teardown(void **state)
{
    (void)state;
    relays_kill();
    return 0;
}

static int teardown(void **state)
{
    char p[128];
    int rc;

    (void)state;
    relays_kill();
    PQfinish(db);
    rc = srv_stop_shared(&S);
    pgfx_stop(&P);
    for (int i = 0; i < RELAYS_MAX; i++) {
        snprintf(p, sizeof p, "%s/relay-%d.log", logdir, i);
        unlink(p);
    }
    rmdir(logdir);
    return rc;
}

/* ---- PostgreSQL ---- */

static void sql(const char *q)
{
    PGresult *r = PQexec(db, q);

    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
        fail_msg("%s: %s", q, PQerrorMessage(db));
    PQclear(r);
}

/* The single number a query answers. */
static long sql_long(const char *q)
{
    PGresult *r = PQexec(db, q);
    long v;

    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
        fail_msg("%s: %s", q, PQerrorMessage(db));
    v = strtol(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return v;
}

/* A fresh outbox: rows and versions of the tests before removed. */
static void outbox_empty(void)
{
    sql("TRUNCATE mic_outbox, mic_outbox_versions");
}

struct count_of {
    const char *status;
    long want;
};

static int rows_are(void *arg)
{
    struct count_of *c = arg;
    char q[160];

    snprintf(q, sizeof q, "SELECT count(*) FROM mic_outbox WHERE status = '%s'", c->status);
    return sql_long(q) == c->want;
}

static void await_rows(const char *status, long n)
{
    struct count_of c = {status, n};

    if (!await(rows_are, &c, WAIT_MS)) {
        char q[160];

        PGresult *r = PQexec(db, "SELECT status, attempts, coalesce(round(extract(epoch FROM "
                                 "not_before - now()))::text, '-'), count(*), min(last_error) "
                                 "FROM mic_outbox GROUP BY 1, 2, 3 ORDER BY 1, 2, 3");

        for (int i = 0; PQresultStatus(r) == PGRES_TUPLES_OK && i < PQntuples(r) && i < 20; i++)
            fprintf(stderr, "  rows: %s attempts %s not_before in %s s: %s (%s)\n",
                    PQgetvalue(r, i, 0), PQgetvalue(r, i, 1), PQgetvalue(r, i, 2),
                    PQgetvalue(r, i, 3), PQgetvalue(r, i, 4));
        PQclear(r);
        snprintf(q, sizeof q, "SELECT count(*) FROM mic_outbox WHERE status = '%s'", status);
        fail_msg("%ld rows %s, not %ld", sql_long(q), status, n);
    }
}

/* ---- micd ---- */

static void topic_put(const char *topic)
{
    char path[128];

    snprintf(path, sizeof path, "/v1/topics/%s", topic);
    json_decref(call(&S, "PUT", path, "{}", 201));
}

/* Member 'k' of the entry of 'topic' in GET /v1/stats, -1 when none. */
static json_int_t topic_stat(const char *topic, const char *k)
{
    json_t *t = stats_of(&S, "topics", "topic", topic);
    json_int_t v = t ? jint(t, k) : -1;

    json_decref(t);
    return v;
}

/* ---- The relay ---- */

/* Start relay number 'i' with the common flags and 'extra' (NULL-ended). */
static void relay_start(int i, const char *to, const char *const *extra)
{
    const char *argv[40];
    char log[128];
    int n = 0;

    assert_true(i >= 0 && i < RELAYS_MAX && relays[i] == 0);
    argv[n++] = relay_path();
    argv[n++] = "--pg";
    argv[n++] = P.conninfo;
    argv[n++] = "--to";
    argv[n++] = to;
    argv[n++] = "--poll-ms";
    argv[n++] = "100";
    for (int k = 0; extra && extra[k]; k++)
        argv[n++] = extra[k];
    argv[n] = NULL;
    snprintf(log, sizeof log, "%s/relay-%d.log", logdir, i);
    relays[i] = fork();
    assert_true(relays[i] >= 0);
    if (relays[i] == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);

        if (fd >= 0) {
            dup2(fd, 2);
            dup2(fd, 1);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
}

/* SIGTERM relay 'i' and wait: it must exit 0 (a clean stop). */
static void relay_stop(int i)
{
    int status;

    assert_true(relays[i] > 0);
    assert_int_equal(kill(relays[i], SIGTERM), 0);
    assert_int_equal(waitpid(relays[i], &status, 0), relays[i]);
    relays[i] = 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        char log[128], *text;

        snprintf(log, sizeof log, "%s/relay-%d.log", logdir, i);
        text = file_read(log);
        fail_msg("relay %d stopped with status %d:\n%s", i, status, text ? text : "");
    }
}

/* ---- The relay's own figures and logs ---- */

/* Every line relay 'i' wrote is one JSON object with "time", "level" and
 * "msg"; returns the port of its "metrics listening" line, or 0. */
static int log_is_json_lines(int i)
{
    char path[128], *text, *line, *save = NULL;
    int port = 0, lines = 0;

    snprintf(path, sizeof path, "%s/relay-%d.log", logdir, i);
    assert_non_null(text = file_read(path));
    for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        json_t *j = json_loads(line, 0, NULL);

        if (!json_is_object(j))
            fail_msg("not a JSON line: %s", line);
        assert_true(json_is_string(json_object_get(j, "time")) &&
                    json_is_string(json_object_get(j, "level")) &&
                    json_is_string(json_object_get(j, "msg")));
        if (!strcmp(jstr(j, "msg"), "metrics listening"))
            port = (int)jint(j, "port");
        json_decref(j);
        lines++;
    }
    assert_true(lines > 0);
    free(text);
    return port;
}

/* Metric 'name' of relay 0's GET /metrics (its port from its log). */
static long relay_metric(const char *name)
{
    struct srv m;
    struct resp r;
    const char *p;
    long v = -1;

    memset(&m, 0, sizeof m);
    m.port = log_is_json_lines(0);
    assert_true(m.port > 0);
    snprintf(m.url, sizeof m.url, "http://127.0.0.1:%d", m.port);
    assert_int_equal(http(&m, "GET", "/metrics", NULL, NULL, 0, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    for (p = r.body; (p = strstr(p, name)); p++)
        if ((p == r.body || p[-1] == '\n') && p[strlen(name)] == ' ')
            v = strtol(p + strlen(name) + 1, NULL, 10);
    resp_free(&r);
    return v;
}

static int dlq_metric_is_one(void *arg)
{
    (void)arg;
    return relay_metric("mic_relay_dlq_rows") == 1;
}

/* ---- Tests ---- */

static void publishes_and_marks(void **state)
{
    json_t *ev;

    (void)state;
    outbox_empty();
    topic_put("rl.orders");
    sql("SELECT mic_outbox_append('rl.orders', 'rl.orders', 'o' || (g % 30), 'order.placed', "
        "jsonb_build_object('i', g)) FROM generate_series(1, 300) g");
    sql("SELECT mic_outbox_append('rl.orders', NULL, NULL, 'note', '{\"free\":true}', "
        "event_id => 'rl-free-1')");
    relay_start(0, S.url, NULL);
    await_rows("dispatched", 301);
    relay_stop(0);
    assert_int_equal(topic_stat("rl.orders", "events"), 301);
    assert_int_equal(topic_stat("rl.orders", "duplicates"), 0);
    assert_int_equal(sql_long("SELECT count(*) FROM mic_outbox WHERE dispatched_at IS NULL"), 0);
    /* The row's id and created_at are the event's. */
    ev = call(&S, "GET", "/v1/events/rl-free-1", NULL, 200);
    {
        PGresult *r = PQexec(db, "SELECT to_char(created_at AT TIME ZONE 'UTC', "
                                 "'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') FROM mic_outbox "
                                 "WHERE event_id = 'rl-free-1'");

        assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
        assert_string_equal(jstr(json_object_get(ev, "event"), "created_at"), PQgetvalue(r, 0, 0));
        PQclear(r);
    }
    json_decref(ev);
}

static void rollback_publishes_nothing(void **state)
{
    (void)state;
    outbox_empty();
    topic_put("rl.rb");
    sql("BEGIN");
    sql("SELECT mic_outbox_append('rl.rb', 'rl.rb', 'rb1', 'x', '{}', event_id => 'rl-rb-gone')");
    sql("ROLLBACK");
    sql("SELECT mic_outbox_append('rl.rb', 'rl.rb', 'rb1', 'x', '{}', event_id => 'rl-rb-kept')");
    relay_start(0, S.url, NULL);
    await_rows("dispatched", 1);
    relay_stop(0);
    json_decref(call(&S, "GET", "/v1/events/rl-rb-kept", NULL, 200));
    json_decref(call(&S, "GET", "/v1/events/rl-rb-gone", NULL, 404));
    assert_int_equal(topic_stat("rl.rb", "events"), 1);
    /* The rolled-back version was given back: the kept event is version 1. */
    assert_int_equal(sql_long("SELECT aggregate_version FROM mic_outbox WHERE event_id = 'rl-rb-kept'"),
                     1);
}

/* 'k' relays over 'n' rows: all published, none twice. */
static void disjoint(const char *topic, int k, long n)
{
    static const char *const small[] = {"--batch", "25", NULL};
    char q[256];

    outbox_empty();
    topic_put(topic);
    /* each test's aggregates its own (micd keeps versions per aggregate) */
    snprintf(q, sizeof q, "SELECT mic_outbox_append('%s', '%s', 'a' || (g %% 50), 'x', "
             "jsonb_build_object('i', g)) FROM generate_series(1, %ld) g", topic, topic, n);
    sql(q);
    for (int i = 0; i < k; i++)
        relay_start(i, S.url, small);
    await_rows("dispatched", n);
    for (int i = 0; i < k; i++)
        relay_stop(i);
    assert_int_equal(topic_stat(topic, "events"), n);
    assert_int_equal(topic_stat(topic, "duplicates"), 0);
}

static void relays_claim_disjoint_sets(void **state)
{
    (void)state;
    disjoint("rl.two", 2, 1000);
    disjoint("rl.four", 4, 2000);
}

/* Rows of aggregates without versions (inserted directly: created_at one
 * ms apart), so the order is (created_at, id) and only
 * --preserve-aggregate-order keeps it across four relays. */
static void ordered_four_relays(void **state)
{
    static const char *const ordered[] = {"--preserve-aggregate-order", "--batch", "3", NULL};
    char last[200][40];
    long handled = 0;

    (void)state;
    outbox_empty();
    topic_put("rl.ord");
    json_decref(call(&S, "PUT", "/v1/groups/rl.ord.g", "{\"topics\":[\"rl.ord\"],\"ordered\":true}",
                     201));
    /* an aggregate's five rows are consecutive: unordered relays with
     * small batches would publish them side by side */
    sql("INSERT INTO mic_outbox (event_id, topic, aggregate_type, aggregate_id, event_type, "
        "payload, created_at) SELECT 'ord-' || g, 'rl.ord', 'rl.ord', 'k' || ((g - 1) / 5), 'x', "
        "jsonb_build_object('i', g), timestamptz '2026-12-01 00:00:00+00' + g * interval '1 ms' "
        "FROM generate_series(1, 1000) g");
    for (int i = 0; i < 4; i++)
        relay_start(i, S.url, ordered);
    await_rows("dispatched", 1000);
    for (int i = 0; i < 4; i++)
        relay_stop(i);
    assert_int_equal(topic_stat("rl.ord", "events"), 1000);
    /* Arrival order (micd's seq) is the aggregate's order in every one. */
    for (int a = 0; a < 200; a++) {
        char path[64];
        json_t *r, *e;
        json_int_t last_seq = 0;
        size_t i;

        snprintf(path, sizeof path, "/v1/aggregates/rl.ord/k%d", a);
        r = call(&S, "GET", path, NULL, 200);
        assert_int_equal(json_array_size(json_object_get(r, "events")), 5);
        json_array_foreach(json_object_get(r, "events"), i, e) {
            json_t *ev = json_object_get(e, "event") ? json_object_get(e, "event") : e;
            json_int_t seq = jint(ev, "seq");

            assert_true(seq > last_seq);
            last_seq = seq;
        }
        json_decref(r);
    }
    /* And through an ordered group, each aggregate comes in that order. */
    memset(last, 0, sizeof last);
    for (int round = 0; handled < 1000; round++) {
        json_t *c = call(&S, "POST", "/v1/groups/rl.ord.g/claim", "{\"max\":300,\"wait_s\":1}", 200);
        json_t *d;
        size_t i;

        assert_true(round < 200);
        json_array_foreach(json_object_get(c, "deliveries"), i, d) {
            json_t *ev = json_object_get(d, "event");
            int a = atoi(jstr(ev, "aggregate_id") + 1);

            assert_true(a >= 0 && a < 200);
            assert_true(strcmp(jstr(ev, "created_at"), last[a]) > 0);
            snprintf(last[a], sizeof last[a], "%s", jstr(ev, "created_at"));
            handled++;
        }
        json_decref(settle(&S, "rl.ord.g", "ack", items_of(c), NULL));
        json_decref(c);
    }
    assert_int_equal(handled, 1000);
}

static void poison_row_to_dlq(void **state)
{
    static const char *const metrics[] = {"--metrics-listen", "127.0.0.1:0", NULL};

    (void)state;
    outbox_empty();
    topic_put("rl.p");
    sql("SELECT mic_outbox_append('rl.p', 'rl.p', 'p1', 'x', '{}', event_id => 'rl-p-1')");
    /* micd refuses this one for good: its topic name has a space. */
    sql("SELECT mic_outbox_append('rl bad', 'rl.p', 'p2', 'x', '{}', event_id => 'rl-p-bad')");
    sql("SELECT mic_outbox_append('rl.p', 'rl.p', 'p3', 'x', '{}', event_id => 'rl-p-3')");
    relay_start(0, S.url, metrics);
    await_rows("dispatched", 2);
    await_rows("dlq", 1);
    /* Its figures: 2 published, 1 failure, 1 dlq row, nothing pending. */
    assert_true(await(dlq_metric_is_one, NULL, WAIT_MS));
    assert_int_equal(relay_metric("mic_relay_published_total"), 2);
    assert_int_equal(relay_metric("mic_relay_publish_failures_total"), 1);
    assert_int_equal(relay_metric("mic_relay_oldest_pending_age_seconds"), 0);
    relay_stop(0);
    log_is_json_lines(0);
    assert_int_equal(sql_long("SELECT attempts FROM mic_outbox WHERE event_id = 'rl-p-bad'"), 1);
    assert_int_equal(sql_long("SELECT count(*) FROM mic_outbox WHERE event_id = 'rl-p-bad' "
                              "AND last_error LIKE '%422%' AND last_error LIKE '%topic%'"),
                     1);
    assert_int_equal(topic_stat("rl.p", "events"), 2);
}

/* The seed's "relay crash immediately after broker acknowledgment": the
 * relay SIGKILLs itself right after micd answered its first batch, before
 * marking it (--test-crash-after-publish).  Restarted, it takes the rows
 * back when their lease ends and publishes them again: micd answers
 * duplicates, and its log holds every event once. */
static void crash_after_ack(void **state)
{
    static const char *const crash[] = {"--batch", "10", "--lease-ttl", "2",
                                        "--test-crash-after-publish", NULL};
    int status;

    (void)state;
    outbox_empty();
    topic_put("rl.crash");
    sql("SELECT mic_outbox_append('rl.crash', 'rl.crash', 'c' || (g % 20), 'x', "
        "jsonb_build_object('i', g)) FROM generate_series(1, 40) g");
    relay_start(0, S.url, crash);
    assert_int_equal(waitpid(relays[0], &status, 0), relays[0]);
    relays[0] = 0;
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    /* micd has the first batch; the outbox still says processing. */
    assert_int_equal(topic_stat("rl.crash", "events"), 10);
    assert_int_equal(sql_long("SELECT count(*) FROM mic_outbox WHERE status = 'processing'"), 10);
    assert_int_equal(sql_long("SELECT count(*) FROM mic_outbox WHERE status = 'dispatched'"), 0);

    relay_start(0, S.url, NULL);
    await_rows("dispatched", 40);
    relay_stop(0);
    assert_int_equal(topic_stat("rl.crash", "events"), 40);
    assert_int_equal(topic_stat("rl.crash", "duplicates"), 10);
}

/* micd has answered the stale relay's publish: 10 duplicates. */
static int lease_duplicates(void *arg)
{
    (void)arg;
    return topic_stat("rl.lease", "duplicates") >= 10;
}

/* A lease that runs out while its relay is stopped (SIGSTOP between its
 * claim and its publish, --test-hold-ms) is taken over: another relay
 * publishes and marks the rows.  The stale relay, continued, publishes
 * them again (duplicates at micd) and its marking changes nothing: the
 * rows keep the second relay's dispatched_at. */
static void lease_taken_over(void **state)
{
    static const char *const slow[] = {"--lease-ttl", "2", "--test-hold-ms", "8000", NULL};
    char before[64], after[64];
    PGresult *r;

    (void)state;
    outbox_empty();
    topic_put("rl.lease");
    sql("SELECT mic_outbox_append('rl.lease', NULL, NULL, 'x', jsonb_build_object('i', g)) "
        "FROM generate_series(1, 10) g");
    relay_start(0, S.url, slow);
    await_rows("processing", 10);
    assert_int_equal(kill(relays[0], SIGSTOP), 0);
    relay_start(1, S.url, NULL);
    await_rows("dispatched", 10);
    relay_stop(1);
    assert_int_equal(topic_stat("rl.lease", "events"), 10);
    assert_int_equal(topic_stat("rl.lease", "duplicates"), 0);
    r = PQexec(db, "SELECT md5(string_agg(id || ':' || dispatched_at, ',' ORDER BY id)) FROM mic_outbox");
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    snprintf(before, sizeof before, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);

    /* The stale relay goes on: its publish is 10 duplicates at micd. */
    assert_int_equal(kill(relays[0], SIGCONT), 0);
    assert_true(await(lease_duplicates, NULL, WAIT_MS));
    relay_stop(0);   /* it has marked (nothing) by now, or does before it exits */
    r = PQexec(db, "SELECT md5(string_agg(id || ':' || dispatched_at, ',' ORDER BY id)) FROM mic_outbox");
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    snprintf(after, sizeof after, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    assert_string_equal(before, after);
    assert_int_equal(sql_long("SELECT count(*) FROM mic_outbox WHERE status = 'dispatched'"), 10);
    assert_int_equal(topic_stat("rl.lease", "events"), 10);
}

/* The example of issue 15 end to end: examples/order_service writes orders
 * and their events in its transactions (some rolled back), mic-relay
 * publishes what committed in aggregate order, and examples/worker_pool
 * works them off an ordered group: it acks exactly the events committed. */
static int run_child(const char *const *argv, char *out, size_t cap)
{
    int fds[2], status;
    ssize_t n, got = 0;
    pid_t pid;

    assert_int_equal(pipe(fds), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    while ((n = read(fds[0], out + got, cap - 1 - (size_t)got)) > 0)
        got += n;
    out[got] = 0;
    close(fds[0]);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void order_service_end_to_end(void **state)
{
    static const char *const ordered[] = {"--preserve-aggregate-order", NULL};
    const char *dir = getenv("MIC_EXAMPLES") ? getenv("MIC_EXAMPLES") : "build/san/examples";
    char svc[256], pool[256], out[1024];
    const char *svc_argv[] = {svc, "--pg", P.conninfo, "--topic", "rl.shop", "--orders", "30",
                              "--updates", "3", "--fail-every", "5", NULL};
    const char *pool_argv[] = {pool, "--url", S.url, "--group", "rl.shop.ship", "--threads", "2",
                               "--idle-exit", "1", NULL};
    json_t *j;
    json_int_t events;

    (void)state;
    outbox_empty();
    topic_put("rl.shop");
    json_decref(call(&S, "PUT", "/v1/groups/rl.shop.ship",
                     "{\"topics\":[\"rl.shop\"],\"ordered\":true}", 201));
    snprintf(svc, sizeof svc, "%s/order_service", dir);
    snprintf(pool, sizeof pool, "%s/worker_pool", dir);
    assert_int_equal(run_child(svc_argv, out, sizeof out), 0);
    assert_non_null(j = json_loads(out, 0, NULL));
    events = jint(j, "events");
    assert_true(jint(j, "rolled_back") > 0);
    assert_int_equal(events, jint(j, "committed"));
    assert_true(events > 30);
    json_decref(j);
    assert_int_equal(sql_long("SELECT count(*) FROM mic_outbox"), events);
    relay_start(0, S.url, ordered);
    await_rows("dispatched", events);
    relay_stop(0);
    assert_int_equal(topic_stat("rl.shop", "events"), events);
    assert_int_equal(run_child(pool_argv, out, sizeof out), 0);
    assert_non_null(j = json_loads(out, 0, NULL));
    assert_int_equal(jint(j, "acked"), events);
    assert_int_equal(jint(j, "retried") + jint(j, "dead_lettered") + jint(j, "lease_lost"), 0);
    json_decref(j);
    /* Every order's table row and its last event agree. */
    assert_int_equal(sql_long("SELECT count(*) FROM orders o WHERE o.version <> (SELECT "
                              "max(aggregate_version) FROM mic_outbox m WHERE m.aggregate_id = o.id)"),
                     0);
}

/* A publish that keeps failing (no micd at that address) ends in dlq after
 * --max-attempts claims, with the failure in last_error. */
static void max_attempts_to_dlq(void **state)
{
    static const char *const two[] = {"--max-attempts", "2", NULL};

    (void)state;
    outbox_empty();
    sql("SELECT mic_outbox_append('rl.none', NULL, NULL, 'x', '{}', event_id => 'rl-none-1')");
    relay_start(0, "http://127.0.0.1:1", two);
    await_rows("dlq", 1);
    relay_stop(0);
    assert_int_equal(sql_long("SELECT attempts FROM mic_outbox WHERE event_id = 'rl-none-1'"), 2);
    assert_int_equal(sql_long("SELECT count(*) FROM mic_outbox WHERE event_id = 'rl-none-1' "
                              "AND last_error LIKE '%cannot reach%'"),
                     1);
}

/* Sixty versions of one aggregate, appended at once: each waits for the
 * one before it (VERSIONED_SQL), so each claim finds one row; the relay
 * claims again at once after a non-empty claim instead of waiting for a
 * NOTIFY that will not come (--poll-ms 60000 here: a wait per row would
 * take an hour). */
static void versions_of_one_aggregate_flow(void **state)
{
    static const char *const slow_poll[] = {"--poll-ms", "60000", NULL};

    (void)state;
    outbox_empty();
    topic_put("rl.one");
    sql("SELECT mic_outbox_append('rl.one', 'rl.one', 'only', 'x', jsonb_build_object('i', g)) "
        "FROM generate_series(1, 60) g");
    relay_start(0, S.url, slow_poll);
    await_rows("dispatched", 60);
    relay_stop(0);
    assert_int_equal(topic_stat("rl.one", "events"), 60);
}

/* Some row has failed an attempt against the missing micd. */
static int attempted(void *arg)
{
    (void)arg;
    return sql_long("SELECT count(*) FROM mic_outbox WHERE attempts > 0 AND last_error IS NOT NULL") > 0;
}

static void micd_down_then_back(void **state)
{
    char listen[64], url[64];
    const char *args[] = {"--no-auto-topics", "--listen", listen, NULL};

    (void)state;
    outbox_empty();
    topic_put("rl.down");
    snprintf(listen, sizeof listen, "127.0.0.1:%d", S.port);
    snprintf(url, sizeof url, "%s", S.url);
    assert_int_equal(srv_stop(&S), 0);
    sql("SELECT mic_outbox_append('rl.down', 'rl.down', 'd' || (g % 5), 'x', '{}') "
        "FROM generate_series(1, 50) g");
    relay_start(0, url, NULL);
    /* It tries, fails, counts the attempt and backs off: nothing lost. */
    assert_true(await(attempted, NULL, WAIT_MS));
    assert_int_equal(waitpid(relays[0], NULL, WNOHANG), 0);   /* still running */
    assert_int_equal(sql_long("SELECT count(*) FROM mic_outbox WHERE status IN ('dispatched', 'dlq')"),
                     0);
    assert_int_equal(srv_start(&S, args), 0);
    assert_string_equal(S.url, url);
    await_rows("dispatched", 50);
    relay_stop(0);
    assert_int_equal(topic_stat("rl.down", "events"), 50);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        
        cmocka_unit_test_teardown(publishes_and_marks, test_teardown),
        cmocka_unit_test_teardown(rollback_publishes_nothing, test_teardown),
        cmocka_unit_test_teardown(relays_claim_disjoint_sets, test_teardown),
        cmocka_unit_test_teardown(ordered_four_relays, test_teardown),
        cmocka_unit_test_teardown(poison_row_to_dlq, test_teardown),
        cmocka_unit_test_teardown(micd_down_then_back, test_teardown),
        cmocka_unit_test_teardown(crash_after_ack, test_teardown),
        cmocka_unit_test_teardown(lease_taken_over, test_teardown),
        cmocka_unit_test_teardown(order_service_end_to_end, test_teardown),
        cmocka_unit_test_teardown(max_attempts_to_dlq, test_teardown),
        cmocka_unit_test_teardown(versions_of_one_aggregate_flow, test_teardown),
    };

    if (getenv("TEST_FILTER"))
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
