/* test_migrate.c - a store written by format-1 micd opens, and answers
 * exactly as it did (issue 11 item 4).
 *
 * tests/fixtures/store-v1/ (see its README.md) holds data.mdb, a store
 * written by format-1 micd through tests/fixtures/make-store-v1.sh, and
 * expected/: the answers that micd gave to GET requests on it at the test
 * clock T1 (expected/index.txt: a "clock_us T1" line, then "STATUS PATH
 * FILE" per request), plus leases.txt, the leases still held in it with
 * their tokens.  Each test copies data.mdb into a fresh directory and
 * starts the harness's micd ($MICD, default build/san/micd) on it with
 * MIC_TEST_CLOCK_US (server/main.c) at T1, so stored deadlines compare with
 * the same clock as when the answers were captured.  Today the store is in
 * the current format and nothing migrates; once the format changes, the
 * first open migrates it, and these tests prove that changed nothing a
 * client can see.
 *
 * Answers are compared as JSON values (json_equal: key order is free), with
 * the status, after normalising only what depends on the real time elapsed
 * since micd started or on the physical layout of the file:
 *   - "age_s" (oldest, blocked), "oldest_unhandled_age_s" (oldest, stats)
 *     and "poison_age_s" (stats) are now - a stored time, and "now" is T1
 *     plus the seconds micd has been running, which differ between the
 *     capture and the test (both micds start at T1, so by a few seconds;
 *     the ages themselves are hours): when both are numbers within
 *     AGE_SLACK_S of each other the actual one is replaced by the expected
 *     one (null must still match null, and a number far off is a mismatch);
 *   - "map_used_bytes" (stats "store") counts the pages in use: the
 *     capture ran on the store before mdb_copy -c compacted it, and a
 *     migration rewrites pages, so any positive integer is accepted.
 * Nothing else is normalised: every stored time (received_at,
 * lease_expires_at, not_before, dead_lettered_at, since) must come back to
 * the microsecond, and the stats' "alert" too (the fixture's thresholds,
 * 60 s, 1 h and 10 years, are far from its ages).  A mismatch prints the path, the expected and the actual
 * answer, and every request is tried before the test fails.
 *
 * The tests: the fixture answers as captured; after a restart on the same
 * directory (the migration, if any, ran once) it answers the same again;
 * the store keeps working (leases taken before are settled with their old
 * tokens, new claims, acks and publishes move the stats as they should,
 * remembered ids, versions and skipped gaps are still enforced); and the
 * stored retention deadlines still fire (at T1 + 3 h, fx.keep's events are
 * removed and their ids remembered).  A missing fixture, a micd that does
 * not start or does not answer, is a failure, never a skip. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "harness.h"
#include "claimkit.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIXTURE "tests/fixtures/store-v1"
#define AGE_SLACK_S 60.0
#define ENTRIES_MAX 1024
/* The fixture's index lists this many requests at least (137 today). */
#define ENTRIES_MIN 100
#define T1_TO_T2_US (3 * 3600 * INT64_C(1000000))

struct entry {
    long status;
    char path[512];
    char file[256];
};

struct fixture {
    int64_t clock_us;
    struct entry e[ENTRIES_MAX];
    int n;
};

static struct fixture FX;
static struct srv S;

/* ---- The fixture ---- */

static int fixture_load(struct fixture *fx)
{
    char *text = file_read(FIXTURE "/expected/index.txt"), *line, *save = NULL;

    memset(fx, 0, sizeof *fx);
    if (!text) {
        fprintf(stderr, "no fixture at %s (run the tests from the repo root)\n", FIXTURE);
        return -1;
    }
    for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        struct entry *e = &fx->e[fx->n];
        long long us;

        if (line[0] == '#' || line[0] == 0)
            continue;
        if (sscanf(line, "clock_us %lld", &us) == 1) {
            fx->clock_us = us;
            continue;
        }
        if (fx->n == ENTRIES_MAX ||
            sscanf(line, "%ld %511s %255s", &e->status, e->path, e->file) != 3) {
            fprintf(stderr, "bad index line: %s\n", line);
            free(text);
            return -1;
        }
        fx->n++;
    }
    free(text);
    return fx->clock_us > 0 && fx->n >= ENTRIES_MIN ? 0 : -1;
}

static int group_setup(void **state)
{
    (void)state;
    return fixture_load(&FX);
}

/* Copy the fixture's data.mdb into a new temp dir, the store of s. */
static void store_copy(struct srv *s)
{
    char path[400], buf[65536];
    FILE *in, *out;
    size_t n, total = 0;

    memset(s, 0, sizeof *s);
    snprintf(s->dir, sizeof s->dir, "/tmp/mic-migrate-XXXXXX");
    assert_non_null(mkdtemp(s->dir));
    snprintf(path, sizeof path, "%s/data.mdb", s->dir);
    in = fopen(FIXTURE "/data.mdb", "rb");
    if (!in)
        fprintf(stderr, "no fixture store %s/data.mdb\n", FIXTURE);
    assert_non_null(in);
    out = fopen(path, "wb");
    assert_non_null(out);
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) {
        assert_int_equal(fwrite(buf, 1, n, out), n);
        total += n;
    }
    assert_int_equal(ferror(in), 0);
    fclose(in);
    assert_int_equal(fclose(out), 0);
    assert_true(total > 0);
}

/* Start micd on s's store with the test clock at 'clock_us'. */
static void start_at(struct srv *s, int64_t clock_us)
{
    char v[32];

    snprintf(v, sizeof v, "%" PRId64, clock_us);
    assert_int_equal(setenv("MIC_TEST_CLOCK_US", v, 1), 0);
    assert_int_equal(srv_start(s, NULL), 0);
    unsetenv("MIC_TEST_CLOCK_US");
}

static int test_teardown(void **state)
{
    int rc = 0;

    (void)state;
    unsetenv("MIC_TEST_CLOCK_US");
    if (S.pid > 0)
        rc = srv_stop(&S);
    srv_cleanup(&S);
    http_thread_done();
    return rc == 0 ? 0 : -1;
}

/* ---- Comparing answers ---- */

static int is_age(const char *k)
{
    return !strcmp(k, "age_s") || !strcmp(k, "oldest_unhandled_age_s") ||
           !strcmp(k, "poison_age_s");
}

/* Make 'act' take 'exp''s values where they may differ (the header
 * comment says which); everything else is left for json_equal. */
static void normalise(json_t *exp, json_t *act)
{
    const char *k;
    json_t *av, *ev;
    void *tmp;

    if (json_is_object(exp) && json_is_object(act)) {
        json_object_foreach_safe(act, tmp, k, av) {
            if (!(ev = json_object_get(exp, k)))
                continue;
            if (is_age(k) && json_is_number(ev) && json_is_number(av)) {
                if (fabs(json_number_value(ev) - json_number_value(av)) <= AGE_SLACK_S)
                    json_object_set(act, k, ev);
            } else if (!strcmp(k, "map_used_bytes") && json_is_integer(ev) &&
                       json_is_integer(av)) {
                if (json_integer_value(av) > 0)
                    json_object_set(act, k, ev);
            } else {
                normalise(ev, av);
            }
        }
    } else if (json_is_array(exp) && json_is_array(act)) {
        for (size_t i = 0; i < json_array_size(exp) && i < json_array_size(act); i++)
            normalise(json_array_get(exp, i), json_array_get(act, i));
    }
}

/* GET every request of the index; returns the number of mismatches, each
 * printed. */
static int compare_all(const struct srv *s)
{
    char path[600];
    int bad = 0;

    for (int i = 0; i < FX.n; i++) {
        const struct entry *e = &FX.e[i];
        json_error_t jerr;
        json_t *exp = NULL;
        struct resp r;
        char *text;

        snprintf(path, sizeof path, "%s/expected/%s", FIXTURE, e->file);
        if (!(text = file_read(path)) || !(exp = json_loads(text, 0, &jerr))) {
            fprintf(stderr, "GET %s: cannot read %s\n", e->path, path);
            free(text);
            bad++;
            continue;
        }
        if (http(s, "GET", e->path, NULL, NULL, 0, NULL, &r)) {
            fprintf(stderr, "GET %s: no answer\n", e->path);
            json_decref(exp);
            free(text);
            bad++;
            continue;
        }
        if (r.json)
            normalise(exp, r.json);
        if (r.status != e->status || !r.json || !json_equal(exp, r.json)) {
            text[strcspn(text, "\n")] = 0;
            fprintf(stderr, "GET %s: mismatch\n  expected %ld %s\n  actual   %ld %s\n",
                    e->path, e->status, text, r.status, r.body ? r.body : "");
            bad++;
        }
        json_decref(exp);
        free(text);
        resp_free(&r);
    }
    return bad;
}

/* ---- Helpers ---- */

/* The lease on 'event_id' noted in leases.txt: its group, seq and token. */
static void lease_of(const char *event_id, char *group, json_int_t *seq, char *token)
{
    char *text = file_read(FIXTURE "/leases.txt"), *line, *save = NULL;
    char g[128], t[80], ev[160];
    long long sq;
    int found = 0;

    assert_non_null(text);
    for (line = strtok_r(text, "\n", &save); line && !found; line = strtok_r(NULL, "\n", &save))
        if (line[0] != '#' && sscanf(line, "%127s %lld %79s %159s", g, &sq, t, ev) == 4 &&
            !strcmp(ev, event_id)) {
            strcpy(group, g);
            strcpy(token, t);
            *seq = sq;
            found = 1;
        }
    free(text);
    if (!found)
        fprintf(stderr, "no lease on %s in %s/leases.txt\n", event_id, FIXTURE);
    assert_true(found);
}

/* Ack the fixture's lease on 'event_id'; assert the item's status. */
static void ack_old_lease(const char *event_id, const char *status)
{
    char group[128], token[80];
    json_int_t seq;
    json_t *r;

    lease_of(event_id, group, &seq, token);
    r = settle(&S, group, "ack", json_pack("[o]", item(seq, token)), NULL);
    expect_result(r, 0, seq, status);
    json_decref(r);
}

/* The stats entry of 'group', member 'k'. */
static json_int_t gstat(const char *group, const char *k)
{
    json_t *g = stats_of(&S, "groups", "group", group);
    json_int_t v = g ? jint(g, k) : -1;

    json_decref(g);
    if (v < 0)
        fprintf(stderr, "no stats of %s.%s\n", group, k);
    assert_true(v >= 0);
    return v;
}

static json_int_t tstat(const char *topic, const char *k)
{
    json_t *st = call(&S, "GET", "/v1/stats", NULL, 200), *t;
    json_int_t v = -1;
    size_t i;

    json_array_foreach(json_object_get(st, "topics"), i, t)
        if (!strcmp(jstr(t, "topic"), topic))
            v = jint(t, k);
    json_decref(st);
    assert_true(v >= 0);
    return v;
}

/* The state of 'event_id''s delivery in 'group'. */
static char *dlv_state(const char *event_id, const char *group, char *out, size_t cap)
{
    char path[300];
    json_t *r, *d;
    size_t i;

    snprintf(path, sizeof path, "/v1/events/%s", event_id);
    r = call(&S, "GET", path, NULL, 200);
    out[0] = 0;
    json_array_foreach(json_object_get(r, "deliveries"), i, d)
        if (!strcmp(jstr(d, "group"), group))
            snprintf(out, cap, "%s", jstr(d, "state"));
    json_decref(r);
    return out;
}

/* Claim one delivery from 'group'; assert it is of 'event_id', and return
 * the claim response. */
static json_t *claim_one(const char *group, const char *event_id)
{
    char path[300];
    json_t *r;

    snprintf(path, sizeof path, "/v1/groups/%s/claim", group);
    r = call(&S, "POST", path, "{\"max\":1,\"lease_ttl_s\":60,\"worker\":\"w-after\"}", 200);
    assert_int_equal(json_array_size(dlvs(r)), 1);
    assert_string_equal(jstr(json_object_get(dlv(r, 0), "event"), "event_id"), event_id);
    return r;
}

static void ack_claim(const char *group, json_t *claim)
{
    json_int_t seq = jint(dlv(claim, 0), "seq");
    json_t *r = settle(&S, group, "ack", items_of(claim), NULL);

    expect_result(r, 0, seq, "acked");
    json_decref(r);
}

/* A publish that must answer 'status' (and 'code' unless NULL). */
static void publish_expect(const char *body, long status, const char *code)
{
    struct resp r;

    assert_int_equal(http_json(&S, "POST", "/v1/events", body, &r), 0);
    if (r.status != status)
        fprintf(stderr, "publish %s: %ld %s\n", body, r.status, r.body ? r.body : "");
    assert_int_equal(r.status, status);
    if (code)
        assert_string_equal(resp_error_code(&r), code);
    if (status == 200)
        assert_true(json_is_true(json_object_get(
            json_array_get(json_object_get(r.json, "results"), 0), "duplicate")));
    resp_free(&r);
}

/* ---- Tests ---- */

/* The fixture opens and every listing answers as format-1 micd did. */
static void answers_as_captured(void **state)
{
    (void)state;
    store_copy(&S);
    start_at(&S, FX.clock_us);
    assert_int_equal(compare_all(&S), 0);
}

/* A second start on the same directory answers the same again. */
static void restart_answers_again(void **state)
{
    (void)state;
    store_copy(&S);
    start_at(&S, FX.clock_us);
    assert_int_equal(compare_all(&S), 0);
    assert_int_equal(srv_stop(&S), 0);
    start_at(&S, FX.clock_us);
    assert_int_equal(compare_all(&S), 0);
}

/* Claims, acks, publishes and the stored leases, ids and versions work on
 * the opened store.  The figures are the fixture's (make-store-v1.sh). */
static void store_keeps_working(void **state)
{
    char st[32];
    json_t *c;

    (void)state;
    store_copy(&S);
    start_at(&S, FX.clock_us);

    /* Unordered fx-work: 7 pending, 2 leased (job-02, job-07), 2 dead, 1
     * done.  A claim takes the highest priority first: job-09 (9). */
    assert_int_equal(gstat("fx-work", "pending"), 7);
    assert_int_equal(gstat("fx-work", "processing"), 2);
    assert_int_equal(gstat("fx-work", "dlq"), 2);
    assert_int_equal(gstat("fx-work", "dispatched"), 1);
    c = claim_one("fx-work", "job-09");
    assert_int_equal(gstat("fx-work", "pending"), 6);
    assert_int_equal(gstat("fx-work", "processing"), 3);
    ack_claim("fx-work", c);
    json_decref(c);
    assert_int_equal(gstat("fx-work", "processing"), 2);
    assert_int_equal(gstat("fx-work", "dispatched"), 2);
    assert_string_equal(dlv_state("job-09", "fx-work", st, sizeof st), "dispatched");

    /* Leases granted before: a live one acks with its token; so does an
     * expired one nobody claimed since (job-03, pending again). */
    ack_old_lease("job-02", "acked");
    ack_old_lease("job-03", "acked");
    assert_int_equal(gstat("fx-work", "processing"), 1);
    assert_int_equal(gstat("fx-work", "pending"), 5);
    assert_int_equal(gstat("fx-work", "dispatched"), 4);

    /* Ordered fx-hold: acking L5's leased head releases the aggregate. */
    assert_int_equal(gstat("fx-hold", "blocked_aggregates"), 3);
    ack_old_lease("led-L5-1", "acked");
    assert_int_equal(gstat("fx-hold", "blocked_aggregates"), 2);

    /* Ordered fx-rel: n2 (priority 3) first, then A3's v3 (oldest ready). */
    c = claim_one("fx-rel", "ord-n2");
    ack_claim("fx-rel", c);
    json_decref(c);
    c = claim_one("fx-rel", "ord-A3-3");
    ack_claim("fx-rel", c);
    json_decref(c);
    assert_int_equal(gstat("fx-rel", "dispatched"), 6);

    /* A new event fans out to fx-work. */
    json_decref(call(&S, "POST", "/v1/events",
                     "{\"event_id\":\"job-13\",\"topic\":\"fx.jobs\",\"payload\":{\"job\":\"13\"}}", 201));
    assert_int_equal(gstat("fx-work", "pending"), 6);
    assert_int_equal(tstat("fx.jobs", "events"), 13);

    /* Remembered ids: a stored event's and a removed one's (fx.ttl, in the
     * dedupe window), with the content make-store-v1.sh sent. */
    publish_expect("{\"event_id\":\"job-01\",\"topic\":\"fx.jobs\",\"created_at\":\"2026-10-31T11:01:00Z\","
                   "\"event_type\":\"job.run\",\"payload\":{\"job\":\"01\"}}", 200, NULL);
    publish_expect("{\"event_id\":\"ttl-1\",\"topic\":\"fx.ttl\",\"created_at\":\"2026-10-31T20:00:01Z\","
                   "\"payload\":{\"k\":\"ttl-1\"}}", 200, NULL);
    publish_expect("{\"event_id\":\"ttl-1\",\"topic\":\"fx.ttl\",\"payload\":{\"k\":\"other\"}}",
                   409, "event_id_conflict");

    /* Versions: taken, skipped, below the baseline; a gap filled. */
    publish_expect("{\"event_id\":\"ord-A2-1b\",\"topic\":\"fx.orders\",\"aggregate_type\":\"order\","
                   "\"aggregate_id\":\"A2\",\"aggregate_version\":1,\"payload\":{}}", 409, "version_conflict");
    publish_expect("{\"event_id\":\"ord-A3-2\",\"topic\":\"fx.orders\",\"aggregate_type\":\"order\","
                   "\"aggregate_id\":\"A3\",\"aggregate_version\":2,\"payload\":{}}", 409, "version_skipped");
    publish_expect("{\"event_id\":\"ord-A7-2\",\"topic\":\"fx.orders\",\"aggregate_type\":\"order\","
                   "\"aggregate_id\":\"A7\",\"aggregate_version\":2,\"payload\":{}}", 409,
                   "version_below_baseline");
    assert_int_equal(gstat("fx-rel", "gap_parked_aggregates"), 1);
    json_decref(call(&S, "POST", "/v1/events",
                     "{\"event_id\":\"ord-A2-3\",\"topic\":\"fx.orders\",\"aggregate_type\":\"order\","
                     "\"aggregate_id\":\"A2\",\"aggregate_version\":3,\"payload\":{}}", 201));
    assert_int_equal(gstat("fx-rel", "gap_parked_aggregates"), 0);
}

struct gone {
    const char *path;
};

static int answers_404(void *arg)
{
    const struct gone *g = arg;
    struct resp r;
    int yes;

    yes = http_json(&S, "GET", g->path, NULL, &r) == 0 && r.status == 404;
    resp_free(&r);
    return yes;
}

/* Later, the retention deadlines stored at T0 fire: at T1 + 3 h (T0 + 9 h)
 * fx.keep's events (kept 8 h) are removed and their ids still remembered;
 * the 12-hour leases have not expired. */
static void retention_deadlines_still_fire(void **state)
{
    struct gone k1 = {"/v1/events/keep-1"}, k2 = {"/v1/events/keep-2"};
    char st[32];

    (void)state;
    store_copy(&S);
    start_at(&S, FX.clock_us);
    assert_int_equal(tstat("fx.keep", "events"), 2);
    json_decref(call(&S, "GET", "/v1/events/keep-1", NULL, 200));
    assert_int_equal(srv_stop(&S), 0);

    start_at(&S, FX.clock_us + T1_TO_T2_US);
    assert_true(await(answers_404, &k1, 10000));
    assert_true(await(answers_404, &k2, 10000));
    assert_int_equal(tstat("fx.keep", "events"), 0);
    publish_expect("{\"event_id\":\"keep-1\",\"topic\":\"fx.keep\",\"created_at\":\"2026-10-31T21:00:01Z\","
                   "\"payload\":{\"k\":\"keep-1\"}}", 200, NULL);
    assert_string_equal(dlv_state("job-02", "fx-work", st, sizeof st), "processing");
    assert_string_equal(dlv_state("ord-A1-1", "fx-rel", st, sizeof st), "processing");
}

/* The migrated store -- and again after its retention deadlines fired --
 * passes micd --verify: every log record has its CRC, and no index entry
 * points nowhere (ids of removed events are remembered through their
 * expiry entries, the dropped group's keys are exempt). */
static void migrated_store_verifies(void **state)
{
    struct gone k2 = {"/v1/events/keep-2"};
    char *out;

    (void)state;
    store_copy(&S);
    start_at(&S, FX.clock_us);
    assert_int_equal(srv_stop(&S), 0);
    assert_int_equal(srv_verify(S.dir, &out), 0);
    assert_non_null(out);
    assert_non_null(strstr(out, " 0 bad records; "));
    assert_non_null(strstr(out, " 0 dangling: ok"));
    free(out);

    start_at(&S, FX.clock_us + T1_TO_T2_US);
    assert_true(await(answers_404, &k2, 10000));
    assert_int_equal(srv_stop(&S), 0);
    assert_int_equal(srv_verify(S.dir, &out), 0);
    assert_non_null(out);
    assert_non_null(strstr(out, " 0 dangling: ok"));
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(answers_as_captured, test_teardown),
        cmocka_unit_test_teardown(restart_answers_again, test_teardown),
        cmocka_unit_test_teardown(store_keeps_working, test_teardown),
        cmocka_unit_test_teardown(retention_deadlines_still_fire, test_teardown),
        cmocka_unit_test_teardown(migrated_store_verifies, test_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, NULL);
}
