/* test_examples.c - the programs of examples/ against a real micd, as a
 * user runs them: each is a child process (the sanitizer builds, from
 * $MIC_EXAMPLES, default build/san/examples) whose one JSON line of
 * stdout is read back with jansson and checked against what micd says.
 *
 *   producer     stores every event (exit 0), refuses to go on when the
 *                topic is missing (exit 1, nothing stored), creates it with
 *                --create, and a second run is all duplicates;
 *   worker_pool  acks exactly N, and the group has nothing pending after;
 *                SIGTERM stops it cleanly (two nodes);
 *   projection   applies N, its replay digest is the one micd reports for
 *                a replay run over the same events, its checkpoint and its
 *                own summary hold each aggregate's last version; built again
 *                on the run's own group it proves the same selection.
 *
 * Each test starts its own micd (--no-auto-topics), since the producer's
 * aggregates order/o<k> are the same in every test.  Nothing sleeps: the
 * examples stop by themselves (--idle-exit) or on SIGTERM once micd's
 * figures say the work is done, and the test waits for them to exit.  An
 * example that exits non-zero (a sanitizer report, a leak) fails the
 * test. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "harness.h"
#include "claimkit.h"
#include "mic.h"

#include <fcntl.h>
#include <lmdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define N 1000                 /* events per producer run */
#define A 10                   /* aggregates order/o0 .. o9 */
#define CHILD_MS 60000         /* longest an example may run (they take seconds) */
#define TOPIC "ex.orders"

static struct srv S, S2;       /* S2: the second node of the sharded test */
static char tmpdir[64];        /* children's output, projection states */
static pid_t running;          /* a child a failed assertion left behind */

static const char *examples_dir(void)
{
    const char *d = getenv("MIC_EXAMPLES");

    return d && *d ? d : "build/san/examples";
}

/* Remove what the tests put in tmpdir (flat files and the LMDB states). */
static void tmp_clean(void)
{
    static const char *const names[] = {"stdout", "stderr", NULL};
    static const char *const states[] = {"view", "rebuild", NULL};
    char p[160];

    for (int i = 0; names[i]; i++) {
        snprintf(p, sizeof p, "%s/%s", tmpdir, names[i]);
        unlink(p);
    }
    for (int i = 0; states[i]; i++) {
        snprintf(p, sizeof p, "%s/%s/data.mdb", tmpdir, states[i]);
        unlink(p);
        snprintf(p, sizeof p, "%s/%s/lock.mdb", tmpdir, states[i]);
        unlink(p);
        snprintf(p, sizeof p, "%s/%s", tmpdir, states[i]);
        rmdir(p);
    }
    rmdir(tmpdir);
}

static int setup(void **state)
{
    static const char *const args[] = {"--no-auto-topics", NULL};

    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mic-examples-XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    memset(&S2, 0, sizeof S2);
    return srv_start_shared(&S, args);
}

static int teardown(void **state)
{
    int rc;

    (void)state;
    if (running > 0) {
        kill(running, SIGKILL);
        waitpid(running, NULL, 0);
        running = 0;
    }
    if (S2.pid > 0)
        srv_stop_shared(&S2);
    srv_cleanup(&S2);
    rc = srv_stop_shared(&S);
    tmp_clean();
    return rc;
}

/* ---- Running an example ---- */

struct child {
    pid_t pid;
    int status, done;
    char name[32];
};

static int child_done(void *arg)
{
    struct child *c = arg;

    if (!c->done && waitpid(c->pid, &c->status, WNOHANG) == c->pid)
        c->done = 1;
    return c->done;
}

/* Start example 'name' with 'argv' (NULL-ended, without the program),
 * stdout and stderr into tmpdir's files. */
static void child_start(struct child *c, const char *name, const char *const *argv)
{
    const char *args[64];
    char path[512], out[128], err[128];
    int n = 0;

    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    snprintf(path, sizeof path, "%s/%s", examples_dir(), name);
    snprintf(out, sizeof out, "%s/stdout", tmpdir);
    snprintf(err, sizeof err, "%s/stderr", tmpdir);
    args[n++] = path;
    for (int i = 0; argv[i]; i++) {
        assert_true(n < 62);
        args[n++] = argv[i];
    }
    args[n] = NULL;
    c->pid = fork();
    assert_true(c->pid >= 0);
    if (c->pid == 0) {
        int fi = open("/dev/null", O_RDONLY);
        int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);

        if (fi < 0 || fo < 0 || fe < 0)
            _exit(126);
        dup2(fi, 0);
        dup2(fo, 1);
        dup2(fe, 2);
        execv(args[0], (char *const *)args);
        _exit(127);
    }
    running = c->pid;
}

/* The child has run too long: SIGTERM (the workers then print their
 * figures: claim_failures says why nothing moved), SIGKILL if that is not
 * enough, show what it printed and fail the test with 'why'. */
static void child_abort(struct child *c, const char *why)
{
    char path[128], *text;

    kill(c->pid, SIGTERM);
    if (!await(child_done, c, 10000)) {
        kill(c->pid, SIGKILL);
        waitpid(c->pid, NULL, 0);
    }
    running = 0;
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", tmpdir, i ? "stderr" : "stdout");
        if ((text = file_read(path)))
            fprintf(stderr, "-- %s %s:\n%s--\n", c->name, i ? "stderr" : "stdout", text);
        free(text);
    }
    fail_msg("%s: %s", c->name, why);
}

/* Wait for the child to exit; its exit status is returned and its stdout's
 * JSON line is in *out (asserted to be one JSON object).  Its stderr is
 * shown when it is not empty. */
static int child_finish(struct child *c, json_t **out)
{
    char path[128], *text, *err;
    json_error_t je;
    int status;

    if (!await(child_done, c, CHILD_MS))
        child_abort(c, "did not end in time");
    running = 0;
    status = WIFEXITED(c->status) ? WEXITSTATUS(c->status) : -1;
    snprintf(path, sizeof path, "%s/stderr", tmpdir);
    err = file_read(path);
    assert_non_null(err);
    if (err[0])
        fprintf(stderr, "-- %s (exit %d) stderr:\n%s--\n", c->name, status, err);
    free(err);
    if (status == 126 || status == 127)
        fail_msg("cannot run %s/%s (set MIC_EXAMPLES)", examples_dir(), c->name);
    snprintf(path, sizeof path, "%s/stdout", tmpdir);
    text = file_read(path);
    assert_non_null(text);
    *out = json_loads(text, 0, &je);
    if (!json_is_object(*out))
        fprintf(stderr, "%s printed no JSON object: %s (%s)\n", c->name, text, je.text);
    free(text);
    assert_true(json_is_object(*out));
    return status;
}

/* Run an example to its end: exit status, and its JSON line in *out. */
static int run_example(const char *name, const char *const *argv, json_t **out)
{
    struct child c;

    child_start(&c, name, argv);
    return child_finish(&c, out);
}

/* ---- micd's side ---- */

/* PUT a resource ("topics" or "groups") on 's', created now. */
static void put(const struct srv *s, const char *kind, const char *name, const char *body)
{
    char path[256];

    snprintf(path, sizeof path, "/v1/%s/%s", kind, name);
    json_decref(call(s, "PUT", path, body, 201));
}

/* Produce N events of TOPIC on 'urls' (the --url arguments, NULL-ended):
 * asserts that every one was stored now. */
static void produce(const char *const *urls)
{
    const char *argv[32];
    json_t *out;
    int n = 0;

    for (int i = 0; urls[i]; i++) {
        argv[n++] = "--url";
        argv[n++] = urls[i];
    }
    argv[n++] = "--topic";
    argv[n++] = TOPIC;
    argv[n++] = "--aggregates";
    argv[n++] = "10";
    argv[n++] = "--events";
    argv[n++] = "1000";
    argv[n] = NULL;
    assert_int_equal(run_example("producer", argv, &out), 0);
    assert_int_equal(jint(out, "published"), N);
    assert_int_equal(jint(out, "duplicates"), 0);
    assert_int_equal(jint(out, "failed"), 0);
    json_decref(out);
}

/* ---- producer ---- */

static void producer_stores_every_event(void **state)
{
    const char *plain[] = {"--url", S.url, "--topic", TOPIC, "--aggregates", "10",
                           "--events", "1000", NULL};
    const char *create[] = {"--url", S.url, "--topic", TOPIC, "--aggregates", "10",
                            "--events", "1000", "--create", NULL};
    json_t *out, *t;

    (void)state;
    /* No topic, and micd creates none: the first batch fails, the run
     * stops, nothing is stored, exit 1. */
    assert_int_equal(run_example("producer", plain, &out), 1);
    assert_int_equal(jint(out, "published"), 0);
    assert_int_equal(jint(out, "failed"), N);
    json_decref(out);
    json_decref(call(&S, "GET", "/v1/topics/" TOPIC, NULL, 404));

    /* --create makes it (require_versions), then every event is stored. */
    assert_int_equal(run_example("producer", create, &out), 0);
    assert_int_equal(jint(out, "published"), N);
    assert_int_equal(jint(out, "duplicates"), 0);
    assert_int_equal(jint(out, "failed"), 0);
    assert_true(json_is_true(json_object_get(out, "topic_created")));
    json_decref(out);
    t = call(&S, "GET", "/v1/topics/" TOPIC, NULL, 200);
    assert_true(json_is_true(json_object_get(t, "require_versions")));
    json_decref(t);
    t = stats_of(&S, "topics", "topic", TOPIC);
    assert_non_null(t);
    assert_int_equal(jint(t, "events"), N);
    json_decref(t);

    /* The ids are derived from (aggregate, version): running it again is
     * all duplicates, still exit 0, nothing stored twice. */
    assert_int_equal(run_example("producer", create, &out), 0);
    assert_int_equal(jint(out, "published"), 0);
    assert_int_equal(jint(out, "duplicates"), N);
    assert_true(json_is_false(json_object_get(out, "topic_created")));
    json_decref(out);
    t = stats_of(&S, "topics", "topic", TOPIC);
    assert_int_equal(jint(t, "events"), N);
    assert_int_equal(jint(t, "duplicates"), N);
    json_decref(t);
}

/* ---- worker_pool ---- */

/* The worker's JSON line says it acked exactly 'n' and nothing else
 * happened; its threads handled 'n' in all. */
static void expect_pool(json_t *out, long n, int threads)
{
    json_t *h = json_object_get(out, "handled"), *v;
    json_int_t sum = 0;
    size_t i;

    assert_int_equal(jint(out, "claimed"), n);
    assert_int_equal(jint(out, "acked"), n);
    assert_int_equal(jint(out, "retried"), 0);
    assert_int_equal(jint(out, "dead_lettered"), 0);
    assert_int_equal(jint(out, "lease_lost"), 0);
    assert_int_equal(jint(out, "claim_failures"), 0);
    assert_int_equal(json_array_size(h), threads);
    json_array_foreach(h, i, v) {
        assert_true(json_is_integer(v));
        sum += json_integer_value(v);
    }
    assert_int_equal(sum, n);
}

/* The group on 's' has nothing left to do and dispatched 'n'. */
static void expect_drained(const struct srv *s, const char *group, long n)
{
    json_t *g = stats_of(s, "groups", "group", group);

    assert_non_null(g);
    assert_int_equal(jint(g, "pending"), 0);
    assert_int_equal(jint(g, "processing"), 0);
    assert_int_equal(jint(g, "dlq"), 0);
    assert_int_equal(jint(g, "dispatched"), n);
    assert_int_equal(jint(g, "redeliveries"), 0);
    json_decref(g);
}

static void worker_pool_acks_every_event(void **state)
{
    const char *urls[] = {S.url, NULL};
    const char *argv[] = {"--url", S.url, "--group", "ex.pool", "--threads", "4",
                          "--idle-exit", "1", NULL};
    json_t *out;

    (void)state;
    put(&S, "topics", TOPIC, "{\"require_versions\":true}");
    put(&S, "groups", "ex.pool", "{\"topics\":[\"" TOPIC "\"]}");
    produce(urls);
    assert_int_equal(run_example("worker_pool", argv, &out), 0);
    expect_pool(out, N, 4);
    json_decref(out);
    expect_drained(&S, "ex.pool", N);
}

/* Two nodes: the producer shards by aggregate, the pool claims from both,
 * and SIGTERM stops it once both groups are drained. */
struct two {
    const struct srv *s[2];
};

static int both_drained(void *arg)
{
    struct two *t = arg;
    json_int_t dispatched = 0, left = 0;

    for (int i = 0; i < 2; i++) {
        json_t *g = stats_of(t->s[i], "groups", "group", "ex.pool");

        if (!g)
            return 0;
        dispatched += jint(g, "dispatched");
        left += jint(g, "pending") + jint(g, "processing");
        json_decref(g);
    }
    return dispatched == N && left == 0;
}

static void worker_pool_two_nodes_and_sigterm(void **state)
{
    static const char *const args[] = {"--no-auto-topics", NULL};
    const char *urls[] = {S.url, S2.url, NULL};
    const char *argv[] = {"--url", S.url, "--url", S2.url, "--group", "ex.pool",
                          "--threads", "2", NULL};
    struct two both = {{&S, &S2}};
    json_int_t events[2];
    struct child c;
    json_t *out;

    (void)state;
    assert_int_equal(srv_start(&S2, args), 0);
    for (int i = 0; i < 2; i++) {
        put(both.s[i], "topics", TOPIC, "{\"require_versions\":true}");
        put(both.s[i], "groups", "ex.pool", "{\"topics\":[\"" TOPIC "\"]}");
    }
    produce(urls);
    /* Each aggregate lives on exactly one node, and both hold some. */
    for (int i = 0; i < 2; i++) {
        json_t *t = stats_of(both.s[i], "topics", "topic", TOPIC);

        assert_non_null(t);
        events[i] = jint(t, "events");
        json_decref(t);
    }
    assert_int_equal(events[0] + events[1], N);
    assert_true(events[0] > 0 && events[1] > 0);
    for (int k = 0; k < A; k++) {
        char path[64];
        struct resp r[2];

        snprintf(path, sizeof path, "/v1/aggregates/order/o%d", k);
        for (int i = 0; i < 2; i++)
            assert_int_equal(http_json(both.s[i], "GET", path, NULL, &r[i]), 0);
        assert_true((r[0].status == 200) != (r[1].status == 200));
        resp_free(&r[0]);
        resp_free(&r[1]);
    }

    /* No --idle-exit: it runs until SIGTERM, sent once micd says every
     * event was acked.  It settles what it holds and exits 0. */
    child_start(&c, "worker_pool", argv);
    if (!await(both_drained, &both, CHILD_MS))
        child_abort(&c, "the groups were not drained in time");
    assert_int_equal(kill(c.pid, SIGTERM), 0);
    assert_int_equal(child_finish(&c, &out), 0);
    expect_pool(out, N, 2);
    json_decref(out);
    expect_drained(&S, "ex.pool", events[0]);
    expect_drained(&S2, "ex.pool", events[1]);
    assert_int_equal(srv_stop_shared(&S2), 0);
}

/* ---- projection ---- */

static int no_apply(MDB_txn *txn, const struct mic_leased *d, json_t *event, void *arg,
                    char *err, size_t errcap)
{
    (void)txn, (void)d, (void)event, (void)arg;
    snprintf(err, errcap, "the test only reads");
    return -1;
}

/* The projection state in 'dir' holds, for each aggregate order/o<k>,
 * checkpoint = count = last version = micd's last_version. */
static void expect_state(const char *dir)
{
    struct mic_consumer_opts o = {.path = dir, .max_dbs = 2, .apply = no_apply};
    mic_consumer *k;
    char why[256];
    json_int_t total = 0;

    assert_int_equal(mic_consumer_open(&o, &k, why, sizeof why), 0);
    for (int i = 0; i < A; i++) {
        char id[16], path[64], kb[32];
        uint64_t ckpt, sum[2];   /* struct summary of projection.c: count, last_version */
        MDB_txn *txn;
        MDB_dbi summary;
        MDB_val key, val;
        json_t *agg;
        json_int_t last;

        snprintf(id, sizeof id, "o%d", i);
        snprintf(path, sizeof path, "/v1/aggregates/order/%s", id);
        agg = call(&S, "GET", path, NULL, 200);
        last = jint(agg, "last_version");
        json_decref(agg);
        /* libmic's checkpoint (its own read transaction: the consumer's
         * environment allows one per thread at a time). */
        assert_int_equal(mic_consumer_checkpoint(k, "order", id, &ckpt), 0);
        assert_int_equal(ckpt, last);
        /* The projection's own summary: key type NUL id. */
        memcpy(kb, "order", 6);
        memcpy(kb + 6, id, strlen(id));
        key = (MDB_val){6 + strlen(id), kb};
        assert_int_equal(mdb_txn_begin(mic_consumer_env(k), NULL, MDB_RDONLY, &txn), 0);
        assert_int_equal(mdb_dbi_open(txn, "summary", 0, &summary), 0);
        assert_int_equal(mdb_get(txn, summary, &key, &val), 0);
        assert_int_equal(val.mv_size, sizeof sum);
        memcpy(sum, val.mv_data, sizeof sum);
        mdb_txn_abort(txn);
        assert_int_equal(sum[0], last);
        assert_int_equal(sum[1], last);
        total += last;
    }
    assert_int_equal(total, N);
    mic_consumer_close(k);
}

/* The projection applied N events of A aggregates, every one once. */
static void expect_projection(json_t *out)
{
    assert_int_equal(jint(out, "applied"), N);
    assert_int_equal(jint(out, "already"), 0);
    assert_int_equal(jint(out, "gaps"), 0);
    assert_int_equal(jint(out, "stale"), 0);
    assert_int_equal(jint(out, "failed"), 0);
    assert_int_equal(jint(out, "events"), N);
    assert_int_equal(jint(out, "aggregates"), A);
    assert_int_equal(jint(json_object_get(out, "worker"), "acked"), N);
}

static void projection_digest_and_checkpoints(void **state)
{
    const char *urls[] = {S.url, NULL};
    char view[128], rebuild[128];
    const char *live[] = {"--url", S.url, "--group", "ex.view", "--state", view,
                          "--idle-exit", "1", NULL};
    const char *replay[] = {"--url", S.url, "--group", "replay.ex-rebuild", "--state",
                            rebuild, "--idle-exit", "1", NULL};
    json_t *out, *run;
    char digest[65];

    (void)state;
    snprintf(view, sizeof view, "%s/view", tmpdir);
    snprintf(rebuild, sizeof rebuild, "%s/rebuild", tmpdir);
    put(&S, "topics", TOPIC, "{\"require_versions\":true}");
    put(&S, "groups", "ex.view", "{\"topics\":[\"" TOPIC "\"],\"ordered\":true}");
    produce(urls);

    /* From the live ordered group. */
    assert_int_equal(run_example("projection", live, &out), 0);
    expect_projection(out);
    snprintf(digest, sizeof digest, "%s", jstr(out, "digest"));
    json_decref(out);
    expect_drained(&S, "ex.view", N);
    expect_state(view);

    /* micd's digest of the same events: a replay run over the topic's
     * whole history. */
    run = call(&S, "POST", "/v1/replays", "{\"topic\":\"" TOPIC "\",\"run_id\":\"ex-rebuild\"}",
               201);
    assert_int_equal(jint(run, "selected"), N);
    assert_string_equal(jstr(run, "digest"), digest);
    json_decref(run);

    /* Rebuilt from scratch on the run's group: the same digest, so the
     * projection saw exactly the run's selection, and the run is drained. */
    assert_int_equal(run_example("projection", replay, &out), 0);
    expect_projection(out);
    assert_string_equal(jstr(out, "digest"), digest);
    json_decref(out);
    expect_state(rebuild);
    run = call(&S, "GET", "/v1/replays/ex-rebuild", NULL, 200);
    assert_int_equal(jint(run, "dispatched"), N);
    assert_int_equal(jint(run, "pending"), 0);
    assert_int_equal(jint(run, "dlq"), 0);
    assert_string_equal(jstr(run, "state"), "drained");
    assert_string_equal(jstr(run, "digest"), digest);
    json_decref(run);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(producer_stores_every_event, setup, teardown),
        cmocka_unit_test_setup_teardown(worker_pool_acks_every_event, setup, teardown),
        cmocka_unit_test_setup_teardown(worker_pool_two_nodes_and_sigterm, setup, teardown),
        cmocka_unit_test_setup_teardown(projection_digest_and_checkpoints, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
