/* test_ordered.c - integration tests of ordered consumer groups against a
 * real micd (DESIGN sections 3, 4 and 12, server/order.c): only an
 * aggregate's head is claimable; a leased, retrying, gap-parked or (under
 * dlq_policy hold) dead-lettered head blocks only its own aggregate; the
 * blocked listing; versions parked on a gap until the missing version
 * arrives or an admin skips it; unversioned aggregates in (created_at, seq)
 * order with late events; two workers racing on one aggregate; kill -9
 * right after a 2xx; the aggregate view; and version order in a group
 * whose deliveries come from a backfill (start `all`).
 *
 * The seed's fault tests covered here: "Inject a relay crash immediately
 * after broker acknowledgment" (kill9_keeps_order), "Run two consumers
 * against the same event" (two_consumers_one_aggregate), "Introduce a
 * missing aggregate version and verify that later state cannot silently
 * advance past it" (gap_parks_aggregate).
 *
 * Tests share one server and use their own topics, groups and aggregates
 * (aggregates are global: their names carry the test's prefix); the kill -9
 * and backfill tests start servers of their own. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "harness.h"
#include "claimkit.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static struct srv S; /* shared server */

static int ordered_setup(void **state)
{
    (void)state;
    return srv_start_shared(&S, NULL);
}

static int ordered_teardown(void **state)
{
    (void)state;
    return srv_stop_shared(&S);
}

/* A test that needs a server of its own runs it in OWN; if the test fails
 * half-way, the teardown stops it. */
static struct srv OWN;

static int own_setup(void **state)
{
    (void)state;
    memset(&OWN, 0, sizeof OWN);
    return 0;
}

static int own_teardown(void **state)
{
    int rc = 0;

    (void)state;
    if (OWN.pid > 0)
        rc = srv_stop(&OWN);
    srv_cleanup(&OWN);
    return rc == 0 ? 0 : -1;
}

/* ---- Helpers (after tests/system/test_groups.c) ---- */

/* A request that must fail with 'status' and error code 'code'. */
static void expect_error(const struct srv *s, const char *method, const char *path,
                         const char *body, long status, const char *code)
{
    struct resp r;

    assert_int_equal(http_json(s, method, path, body, &r), 0);
    if (r.status != status || strcmp(resp_error_code(&r), code))
        fprintf(stderr, "%s %s %s: want %ld %s, got %ld: %s\n", method, path,
                body ? body : "", status, code, r.status, r.body ? r.body : "");
    assert_int_equal(r.status, status);
    assert_string_equal(resp_error_code(&r), code);
    resp_free(&r);
}

static void put_group(const struct srv *s, const char *name, const char *body)
{
    char path[256];
    json_t *g;

    snprintf(path, sizeof path, "/v1/groups/%s", name);
    g = call(s, "PUT", path, body, 201);
    assert_true(json_is_true(json_object_get(g, "ordered")));
    json_decref(g);
}

static json_t *publish(const struct srv *s, const char *body)
{
    return call(s, "POST", "/v1/events", body, 201);
}

/* The seq of publish result 'i'. */
static json_int_t pub_seq(json_t *r, size_t i)
{
    return jint(json_array_get(json_object_get(r, "results"), i), "seq");
}

/* Publish one event and return its seq. */
static json_int_t pub1(const struct srv *s, const char *body)
{
    json_t *p = publish(s, body);
    json_int_t seq;

    assert_int_equal(json_array_size(json_object_get(p, "results")), 1);
    seq = pub_seq(p, 0);
    json_decref(p);
    return seq;
}

/* POST a claim; returns the whole response ({"deliveries":[...]}). */
static json_t *claim(const struct srv *s, const char *group, const char *body)
{
    char path[256];
    json_t *r;

    snprintf(path, sizeof path, "/v1/groups/%s/claim", group);
    r = call(s, "POST", path, body, 200);
    assert_true(json_is_array(json_object_get(r, "deliveries")));
    return r;
}

static const char *dlv_id(json_t *d)
{
    return jstr(json_object_get(d, "event"), "event_id");
}

static json_int_t dlv_version(json_t *d)
{
    return jint(json_object_get(d, "event"), "aggregate_version");
}

/* Ack every delivery of a claim response; each must be acked. */
static void ack_all(const struct srv *s, const char *group, json_t *claim_resp)
{
    json_t *r = settle(s, group, "ack", items_of(claim_resp), NULL), *d;
    size_t i;

    assert_int_equal(json_array_size(json_object_get(r, "results")),
                     json_array_size(dlvs(claim_resp)));
    json_array_foreach(dlvs(claim_resp), i, d)
        expect_result(r, i, jint(d, "seq"), "acked");
    json_decref(r);
}

/* Nack one delivery; returns the response. */
static json_t *nack_one(const struct srv *s, const char *group, json_t *d, const char *extra)
{
    json_t *items = json_array();

    json_array_append_new(items, item(jint(d, "seq"), jstr(d, "lease_token")));
    return settle(s, group, "nack", items, extra);
}

/* Claim (max 10, so that a second delivery of an aggregate would show)
 * and assert exactly one delivery, of event 'id', attempt 'attempt'.
 * Returns the response. */
static json_t *claim_only(const struct srv *s, const char *group, const char *id,
                          int attempt)
{
    json_t *c = claim(s, group, "{\"max\":10,\"lease_ttl_s\":60}");

    if (json_array_size(dlvs(c)) != 1 || strcmp(dlv_id(dlv(c, 0)), id)) {
        char *t = json_dumps(c, JSON_COMPACT);
        fprintf(stderr, "claim on %s: want only %s, got %s\n", group, id, t);
        free(t);
    }
    assert_int_equal(json_array_size(dlvs(c)), 1);
    assert_string_equal(dlv_id(dlv(c, 0)), id);
    assert_int_equal(jint(dlv(c, 0), "attempt"), attempt);
    return c;
}

/* Claim and assert nothing comes. */
static void claim_none(const struct srv *s, const char *group)
{
    json_t *c = claim(s, group, "{\"max\":100}");

    if (json_array_size(dlvs(c))) {
        char *t = json_dumps(c, JSON_COMPACT);
        fprintf(stderr, "claim on %s: want nothing, got %s\n", group, t);
        free(t);
    }
    assert_int_equal(json_array_size(dlvs(c)), 0);
    json_decref(c);
}

/* Claim exactly 'id' (attempt 'attempt') and ack it. */
static void take(const struct srv *s, const char *group, const char *id, int attempt)
{
    json_t *c = claim_only(s, group, id, attempt);

    ack_all(s, group, c);
    json_decref(c);
}

/* GET .../blocked[?reason=]; returns the response. */
static json_t *blocked(const struct srv *s, const char *group, const char *reason)
{
    char path[256];
    json_t *r;

    if (reason)
        snprintf(path, sizeof path, "/v1/groups/%s/blocked?reason=%s", group, reason);
    else
        snprintf(path, sizeof path, "/v1/groups/%s/blocked", group);
    r = call(s, "GET", path, NULL, 200);
    assert_true(json_is_array(json_object_get(r, "aggregates")));
    return r;
}

/* The entry of aggregate (type, id) in a blocked listing, or NULL. */
static json_t *blocked_entry(json_t *b, const char *type, const char *id)
{
    json_t *a, *hit = NULL;
    size_t i;
    int n = 0;

    json_array_foreach(json_object_get(b, "aggregates"), i, a)
        if (!strcmp(jstr(a, "aggregate_type"), type) && !strcmp(jstr(a, "aggregate_id"), id)) {
            hit = a;
            n++;
        }
    assert_true(n <= 1);
    return hit;
}

static int is_time(const char *t)
{
    return strlen(t) == 27 && t[4] == '-' && t[10] == 'T' && t[19] == '.' && t[26] == 'Z';
}

/* Assert that (type, id) is listed in group's blocked?reason=why with
 * head 'head', 'waiting' behind it (and 'missing' for gaps, 0 = absent),
 * and in the unfiltered listing too, and under no other reason. */
static void expect_blocked(const struct srv *s, const char *group, const char *type,
                           const char *id, const char *why, json_int_t head,
                           json_int_t waiting, json_int_t missing)
{
    static const char *const reasons[] = {"lease", "retry", "gap", "dlq"};
    json_t *b = blocked(s, group, why), *e = blocked_entry(b, type, id), *all;

    if (!e) {
        char *t = json_dumps(b, JSON_COMPACT);
        fprintf(stderr, "%s/%s not in %s blocked?reason=%s: %s\n", type, id, group, why, t);
        free(t);
    }
    assert_non_null(e);
    assert_string_equal(jstr(e, "reason"), why);
    assert_int_equal(jint(e, "head_seq"), head);
    assert_int_equal(jint(e, "waiting"), waiting);
    assert_true(is_time(jstr(e, "since")));
    assert_true(json_is_number(json_object_get(e, "age_s")));
    assert_true(json_number_value(json_object_get(e, "age_s")) >= 0);
    if (missing)
        assert_int_equal(jint(e, "missing_version"), missing);
    else
        assert_null(json_object_get(e, "missing_version"));
    json_decref(b);
    all = blocked(s, group, NULL);
    e = blocked_entry(all, type, id);
    assert_non_null(e);
    assert_string_equal(jstr(e, "reason"), why);
    json_decref(all);
    for (size_t k = 0; k < sizeof reasons / sizeof *reasons; k++) {
        if (!strcmp(reasons[k], why))
            continue;
        b = blocked(s, group, reasons[k]);
        assert_null(blocked_entry(b, type, id));
        json_decref(b);
    }
}

/* Assert that (type, id) is in no blocked listing of 'group'. */
static void expect_not_blocked(const struct srv *s, const char *group, const char *type,
                               const char *id)
{
    json_t *b = blocked(s, group, NULL);

    if (blocked_entry(b, type, id)) {
        char *t = json_dumps(b, JSON_COMPACT);
        fprintf(stderr, "%s/%s blocked in %s: %s\n", type, id, group, t);
        free(t);
    }
    assert_null(blocked_entry(b, type, id));
    json_decref(b);
}

/* The state and attempts of event 'id' in 'group' (GET /v1/events/{id}). */
static void expect_state(const struct srv *s, const char *id, const char *group,
                         const char *state, int attempts)
{
    char path[256];
    json_t *r, *d;
    size_t i;
    int found = 0;

    snprintf(path, sizeof path, "/v1/events/%s", id);
    r = call(s, "GET", path, NULL, 200);
    json_array_foreach(json_object_get(r, "deliveries"), i, d) {
        if (strcmp(jstr(d, "group"), group))
            continue;
        found++;
        if (strcmp(jstr(d, "state"), state))
            fprintf(stderr, "%s in %s: want %s, got %s\n", id, group, state, jstr(d, "state"));
        assert_string_equal(jstr(d, "state"), state);
        if (attempts >= 0)
            assert_int_equal(jint(d, "attempts"), attempts);
    }
    json_decref(r);
    assert_int_equal(found, 1);
}

/* ---- 1. Only heads are claimable ---- */

static void only_heads_claimable(void **state)
{
    /* Selection order of the heads: (priority desc, seq asc). */
    static const char *const heads[] = {"oh-b1", "oh-f2", "oh-c1", "oh-a1", "oh-f1"};
    json_t *c, *d;
    size_t i;

    (void)state;
    put_group(&S, "oh.g", "{\"topics\":[\"oh.t\"],\"ordered\":true}");
    /* In seq order: a2 (priority 9) and c2 (4) are newer than their heads. */
    json_decref(publish(&S, "{\"events\":["
        "{\"event_id\":\"oh-a1\",\"topic\":\"oh.t\",\"aggregate_type\":\"oh\",\"aggregate_id\":\"A\",\"aggregate_version\":1},"
        "{\"event_id\":\"oh-b1\",\"topic\":\"oh.t\",\"aggregate_type\":\"oh\",\"aggregate_id\":\"B\",\"aggregate_version\":1,\"priority\":5},"
        "{\"event_id\":\"oh-c1\",\"topic\":\"oh.t\",\"aggregate_type\":\"oh\",\"aggregate_id\":\"C\",\"aggregate_version\":1,\"priority\":1},"
        "{\"event_id\":\"oh-b2\",\"topic\":\"oh.t\",\"aggregate_type\":\"oh\",\"aggregate_id\":\"B\",\"aggregate_version\":2},"
        "{\"event_id\":\"oh-a2\",\"topic\":\"oh.t\",\"aggregate_type\":\"oh\",\"aggregate_id\":\"A\",\"aggregate_version\":2,\"priority\":9},"
        "{\"event_id\":\"oh-c2\",\"topic\":\"oh.t\",\"aggregate_type\":\"oh\",\"aggregate_id\":\"C\",\"aggregate_version\":2,\"priority\":4},"
        "{\"event_id\":\"oh-f1\",\"topic\":\"oh.t\"},"
        "{\"event_id\":\"oh-a3\",\"topic\":\"oh.t\",\"aggregate_type\":\"oh\",\"aggregate_id\":\"A\",\"aggregate_version\":3,\"priority\":200},"
        "{\"event_id\":\"oh-b3\",\"topic\":\"oh.t\",\"aggregate_type\":\"oh\",\"aggregate_id\":\"B\",\"aggregate_version\":3},"
        "{\"event_id\":\"oh-c3\",\"topic\":\"oh.t\",\"aggregate_type\":\"oh\",\"aggregate_id\":\"C\",\"aggregate_version\":3},"
        "{\"event_id\":\"oh-f2\",\"topic\":\"oh.t\",\"priority\":3}]}"));

    /* Exactly the three heads and the two free events, in selection order. */
    c = claim(&S, "oh.g", "{\"max\":100,\"worker\":\"w-oh\"}");
    assert_int_equal(json_array_size(dlvs(c)), 5);
    json_array_foreach(dlvs(c), i, d) {
        assert_string_equal(dlv_id(d), heads[i]);
        assert_int_equal(jint(d, "attempt"), 1);
        assert_int_equal(strlen(jstr(d, "lease_token")), 32);
    }
    claim_none(&S, "oh.g"); /* heads leased: nothing behind them shows */

    /* Acking a head makes the next version claimable, and only it. */
    {
        json_t *one = json_pack("{s:[O]}", "deliveries", dlv(c, 3)); /* oh-a1 */
        ack_all(&S, "oh.g", one);
        json_decref(one);
    }
    {
        json_t *c2 = claim_only(&S, "oh.g", "oh-a2", 1);
        assert_int_equal(dlv_version(dlv(c2, 0)), 2);
        json_decref(c2);
    }
    claim_none(&S, "oh.g"); /* a3 (priority 200) waits behind a2 */

    /* Across aggregates ready heads go by (priority desc, seq asc): after
     * b1 and c1, c2 (priority 4) comes before the older b2 (0). */
    {
        json_t *two = json_pack("{s:[O,O]}", "deliveries", dlv(c, 0), dlv(c, 2));
        ack_all(&S, "oh.g", two);
        json_decref(two);
    }
    json_decref(c);
    c = claim(&S, "oh.g", "{\"max\":100}");
    assert_int_equal(json_array_size(dlvs(c)), 2);
    assert_string_equal(dlv_id(dlv(c, 0)), "oh-c2");
    assert_string_equal(dlv_id(dlv(c, 1)), "oh-b2");
    assert_true(jint(dlv(c, 1), "seq") < jint(dlv(c, 0), "seq"));
    ack_all(&S, "oh.g", c);
    json_decref(c);
    c = claim(&S, "oh.g", "{\"max\":100}");
    assert_int_equal(json_array_size(dlvs(c)), 2); /* b3 and c3; a3 still behind a2 */
    assert_string_equal(dlv_id(dlv(c, 0)), "oh-b3");
    assert_string_equal(dlv_id(dlv(c, 1)), "oh-c3");
    json_decref(c);
    expect_state(&S, "oh-a3", "oh.g", "pending", 0);
}

/* ---- 2. A retrying head blocks its successors ---- */

static void retrying_head_blocks(void **state)
{
    json_t *c, *r, *d;
    json_int_t s1;
    int64_t t_nack, el;

    (void)state;
    put_group(&S, "rt.g", "{\"topics\":[\"rt.t\"],\"ordered\":true}");
    s1 = pub1(&S, "{\"event_id\":\"rt-r1\",\"topic\":\"rt.t\",\"aggregate_type\":\"rt\","
                  "\"aggregate_id\":\"R\",\"aggregate_version\":1}");
    pub1(&S, "{\"event_id\":\"rt-r2\",\"topic\":\"rt.t\",\"aggregate_type\":\"rt\","
             "\"aggregate_id\":\"R\",\"aggregate_version\":2}");
    pub1(&S, "{\"event_id\":\"rt-r3\",\"topic\":\"rt.t\",\"aggregate_type\":\"rt\","
             "\"aggregate_id\":\"R\",\"aggregate_version\":3}");
    pub1(&S, "{\"event_id\":\"rt-o1\",\"topic\":\"rt.t\",\"aggregate_type\":\"rt\","
             "\"aggregate_id\":\"O\",\"aggregate_version\":1}");
    pub1(&S, "{\"event_id\":\"rt-o2\",\"topic\":\"rt.t\",\"aggregate_type\":\"rt\","
             "\"aggregate_id\":\"O\",\"aggregate_version\":2}");

    c = claim(&S, "rt.g", "{\"max\":10,\"worker\":\"w-rt\"}");
    assert_int_equal(json_array_size(dlvs(c)), 2);
    assert_string_equal(dlv_id(dlv(c, 0)), "rt-r1");
    assert_string_equal(dlv_id(dlv(c, 1)), "rt-o1");
    /* A leased head is listed with reason lease. */
    expect_blocked(&S, "rt.g", "rt", "R", "lease", s1, 2, 0);

    r = nack_one(&S, "rt.g", dlv(c, 0), "{\"error\":\"r1 failed\",\"retry_after_s\":2}");
    t_nack = mono_ms();
    expect_result(r, 0, s1, "retrying");
    assert_true(is_time(jstr(result(r, 0), "not_before")));
    json_decref(r);
    /* The other aggregate goes on: o1 acked, o2 comes; nothing of R does. */
    {
        json_t *o1 = json_pack("{s:[O]}", "deliveries", dlv(c, 1));
        ack_all(&S, "rt.g", o1);
        json_decref(o1);
    }
    json_decref(c);
    r = claim_only(&S, "rt.g", "rt-o2", 1);
    ack_all(&S, "rt.g", r);
    json_decref(r);
    claim_none(&S, "rt.g");
    expect_blocked(&S, "rt.g", "rt", "R", "retry", s1, 2, 0);
    expect_state(&S, "rt-r1", "rt.g", "pending", 1);
    expect_state(&S, "rt-r2", "rt.g", "pending", 0);

    /* A long-poll gets the same head, attempt 2, once it comes due (and
     * nothing of R before). */
    c = claim(&S, "rt.g", "{\"max\":10,\"wait_s\":10,\"worker\":\"w-rt\"}");
    el = mono_ms() - t_nack;
    assert_int_equal(json_array_size(dlvs(c)), 1);
    d = dlv(c, 0);
    assert_string_equal(dlv_id(d), "rt-r1");
    assert_int_equal(jint(d, "seq"), s1);
    assert_int_equal(jint(d, "attempt"), 2);
    if (el < 1500)
        fprintf(stderr, "retry came after %lld ms, want ~2000\n", (long long)el);
    assert_true(el >= 1500);
    assert_true(el < 8000);
    expect_blocked(&S, "rt.g", "rt", "R", "lease", s1, 2, 0);
    claim_none(&S, "rt.g");
    ack_all(&S, "rt.g", c);
    json_decref(c);
    /* Then the successors, one at a time, in order. */
    c = claim_only(&S, "rt.g", "rt-r2", 1);
    expect_blocked(&S, "rt.g", "rt", "R", "lease", jint(dlv(c, 0), "seq"), 1, 0);
    claim_none(&S, "rt.g");
    ack_all(&S, "rt.g", c);
    json_decref(c);
    /* The last one holds nothing back: not listed. */
    c = claim_only(&S, "rt.g", "rt-r3", 1);
    expect_not_blocked(&S, "rt.g", "rt", "R");
    ack_all(&S, "rt.g", c);
    json_decref(c);
    claim_none(&S, "rt.g");
    expect_error(&S, "GET", "/v1/groups/rt.g/blocked?reason=other", NULL, 422, "invalid_request");
    expect_error(&S, "GET", "/v1/groups/nope.g/blocked", NULL, 404, "not_found");
}

/* ---- 3. A missing version cannot be advanced past (seed fault test) ---- */

/* mic_group_gap_parked_aggregates{group="g"} from GET /metrics, or -1. */
static long gap_metric(const char *group)
{
    struct resp r;
    char key[256];
    const char *p;
    long v = -1;

    snprintf(key, sizeof key, "mic_group_gap_parked_aggregates{group=\"%s\"} ", group);
    assert_int_equal(http(&S, "GET", "/metrics", NULL, NULL, 0, NULL, &r), 0);
    if (r.body && (p = strstr(r.body, key)))
        v = strtol(p + strlen(key), NULL, 10);
    resp_free(&r);
    return v;
}

static void gap_parks_aggregate(void **state)
{
    json_t *c, *r, *agg;
    json_int_t s4, h3;

    (void)state;
    put_group(&S, "gp.g", "{\"topics\":[\"gp.t\"],\"ordered\":true}");
    pub1(&S, "{\"event_id\":\"gp-1\",\"topic\":\"gp.t\",\"aggregate_type\":\"gp\","
             "\"aggregate_id\":\"A\",\"aggregate_version\":1}");
    pub1(&S, "{\"event_id\":\"gp-2\",\"topic\":\"gp.t\",\"aggregate_type\":\"gp\","
             "\"aggregate_id\":\"A\",\"aggregate_version\":2}");
    s4 = pub1(&S, "{\"event_id\":\"gp-4\",\"topic\":\"gp.t\",\"aggregate_type\":\"gp\","
                  "\"aggregate_id\":\"A\",\"aggregate_version\":4}");
    pub1(&S, "{\"event_id\":\"gp-5\",\"topic\":\"gp.t\",\"aggregate_type\":\"gp\","
             "\"aggregate_id\":\"A\",\"aggregate_version\":5}");
    take(&S, "gp.g", "gp-1", 1);
    take(&S, "gp.g", "gp-2", 1);

    /* Nothing advances past the missing v3, not even after a wait. */
    claim_none(&S, "gp.g");
    c = claim(&S, "gp.g", "{\"max\":10,\"wait_s\":0.3}");
    assert_int_equal(json_array_size(dlvs(c)), 0);
    json_decref(c);
    expect_blocked(&S, "gp.g", "gp", "A", "gap", s4, 1, 3);
    assert_int_equal(gap_metric("gp.g"), 1); /* the group's figures count it */
    expect_state(&S, "gp-4", "gp.g", "pending", 0);
    expect_state(&S, "gp-5", "gp.g", "pending", 0);
    agg = call(&S, "GET", "/v1/aggregates/gp/A", NULL, 200);
    assert_int_equal(jint(agg, "contiguous_to"), 2);
    assert_int_equal(jint(agg, "last_version"), 5);
    json_decref(agg);

    /* v3 arrives: the aggregate is released, v3, v4, v5 come in order. */
    pub1(&S, "{\"event_id\":\"gp-3\",\"topic\":\"gp.t\",\"aggregate_type\":\"gp\","
             "\"aggregate_id\":\"A\",\"aggregate_version\":3}");
    assert_int_equal(gap_metric("gp.g"), 0);
    c = claim_only(&S, "gp.g", "gp-3", 1);
    assert_int_equal(dlv_version(dlv(c, 0)), 3);
    expect_blocked(&S, "gp.g", "gp", "A", "lease", jint(dlv(c, 0), "seq"), 2, 0);
    claim_none(&S, "gp.g");
    ack_all(&S, "gp.g", c);
    json_decref(c);
    take(&S, "gp.g", "gp-4", 1);
    take(&S, "gp.g", "gp-5", 1);
    claim_none(&S, "gp.g");
    expect_not_blocked(&S, "gp.g", "gp", "A");
    agg = call(&S, "GET", "/v1/aggregates/gp/A", NULL, 200);
    assert_int_equal(jint(agg, "contiguous_to"), 5);
    json_decref(agg);

    /* A second aggregate parks on v3 (v4 and v6 stored; v5 missing too). */
    pub1(&S, "{\"event_id\":\"gp-b1\",\"topic\":\"gp.t\",\"aggregate_type\":\"gp\","
             "\"aggregate_id\":\"B\",\"aggregate_version\":1}");
    pub1(&S, "{\"event_id\":\"gp-b2\",\"topic\":\"gp.t\",\"aggregate_type\":\"gp\","
             "\"aggregate_id\":\"B\",\"aggregate_version\":2}");
    pub1(&S, "{\"event_id\":\"gp-b4\",\"topic\":\"gp.t\",\"aggregate_type\":\"gp\","
             "\"aggregate_id\":\"B\",\"aggregate_version\":4}");
    pub1(&S, "{\"event_id\":\"gp-b6\",\"topic\":\"gp.t\",\"aggregate_type\":\"gp\","
             "\"aggregate_id\":\"B\",\"aggregate_version\":6}");
    take(&S, "gp.g", "gp-b1", 1);
    take(&S, "gp.g", "gp-b2", 1);
    claim_none(&S, "gp.g");
    h3 = 0;
    {
        json_t *b = blocked(&S, "gp.g", "gap"), *e = blocked_entry(b, "gp", "B");
        assert_non_null(e);
        assert_int_equal(jint(e, "missing_version"), 3);
        h3 = jint(e, "head_seq");
        json_decref(b);
    }
    expect_blocked(&S, "gp.g", "gp", "B", "gap", h3, 1, 3);

    /* Skip refusals change nothing. */
    expect_error(&S, "POST", "/v1/aggregates/gp/B/gaps/4/skip", NULL, 409, "version_conflict");
    expect_error(&S, "POST", "/v1/aggregates/gp/B/gaps/1/skip", NULL, 409, "version_conflict");
    expect_error(&S, "POST", "/v1/aggregates/gp/B/gaps/7/skip", NULL, 422, "invalid_request");
    expect_error(&S, "POST", "/v1/aggregates/gp/B/gaps/9/skip", NULL, 422, "invalid_request");
    expect_error(&S, "POST", "/v1/aggregates/gp/B/gaps/0/skip", NULL, 422, "invalid_request");
    expect_error(&S, "POST", "/v1/aggregates/gp/nope/gaps/3/skip", NULL, 404, "not_found");
    claim_none(&S, "gp.g");

    /* Skipping v3 releases v4, which then parks on v5. */
    r = call(&S, "POST", "/v1/aggregates/gp/B/gaps/3/skip", NULL, 200);
    assert_string_equal(jstr(r, "aggregate_type"), "gp");
    assert_string_equal(jstr(r, "aggregate_id"), "B");
    assert_int_equal(jint(r, "skipped_version"), 3);
    assert_true(json_is_true(json_object_get(r, "released")));
    json_decref(r);
    /* The skipped version is refused later; nothing was stored. */
    expect_error(&S, "POST", "/v1/events",
                 "{\"event_id\":\"gp-b3\",\"topic\":\"gp.t\",\"aggregate_type\":\"gp\","
                 "\"aggregate_id\":\"B\",\"aggregate_version\":3}", 409, "version_skipped");
    expect_error(&S, "GET", "/v1/events/gp-b3", NULL, 404, "not_found");
    c = claim_only(&S, "gp.g", "gp-b4", 1);
    claim_none(&S, "gp.g");
    ack_all(&S, "gp.g", c);
    json_decref(c);
    claim_none(&S, "gp.g");
    {
        json_t *b = blocked(&S, "gp.g", "gap"), *e = blocked_entry(b, "gp", "B");
        assert_non_null(e);
        assert_int_equal(jint(e, "missing_version"), 5);
        assert_int_equal(jint(e, "waiting"), 0);
        json_decref(b);
    }
    r = call(&S, "POST", "/v1/aggregates/gp/B/gaps/5/skip", NULL, 200);
    assert_int_equal(jint(r, "skipped_version"), 5);
    assert_true(json_is_true(json_object_get(r, "released")));
    json_decref(r);
    take(&S, "gp.g", "gp-b6", 1);
    claim_none(&S, "gp.g");
    expect_not_blocked(&S, "gp.g", "gp", "B");
    agg = call(&S, "GET", "/v1/aggregates/gp/B", NULL, 200);
    assert_int_equal(jint(agg, "contiguous_to"), 6);
    json_decref(agg);

    /* An aggregate whose first version is 5: below it is not a gap; a skip
     * while nothing is parked releases nothing, and order still holds. */
    pub1(&S, "{\"event_id\":\"gp-c5\",\"topic\":\"gp.t\",\"aggregate_type\":\"gp\","
             "\"aggregate_id\":\"C\",\"aggregate_version\":5}");
    pub1(&S, "{\"event_id\":\"gp-c7\",\"topic\":\"gp.t\",\"aggregate_type\":\"gp\","
             "\"aggregate_id\":\"C\",\"aggregate_version\":7}");
    expect_error(&S, "POST", "/v1/aggregates/gp/C/gaps/2/skip", NULL, 422, "invalid_request");
    expect_error(&S, "POST", "/v1/aggregates/gp/C/gaps/8/skip", NULL, 422, "invalid_request");
    expect_error(&S, "POST", "/v1/events",
                 "{\"event_id\":\"gp-c2\",\"topic\":\"gp.t\",\"aggregate_type\":\"gp\","
                 "\"aggregate_id\":\"C\",\"aggregate_version\":2}", 409, "version_below_baseline");
    r = call(&S, "POST", "/v1/aggregates/gp/C/gaps/6/skip", NULL, 200);
    assert_int_equal(jint(r, "skipped_version"), 6);
    assert_true(json_is_false(json_object_get(r, "released")));
    json_decref(r);
    take(&S, "gp.g", "gp-c5", 1);
    take(&S, "gp.g", "gp-c7", 1);
    claim_none(&S, "gp.g");
}

/* ---- 4. Two consumers on the same aggregate (seed fault test) ---- */

#define DUO_VERSIONS 50

struct duo {
    const struct srv *s;
    pthread_mutex_t mu;
    int holder;                  /* worker holding a delivery, or -1 */
    int acks[DUO_VERSIONS + 10]; /* versions, in the order acks were sent */
    int n_acks;
    int overlap, multi, errors, not_acked, foreign;
    int64_t deadline;
};

struct duo_worker {
    struct duo *duo;
    int id;
};

static void *duo_worker(void *arg)
{
    struct duo_worker *dw = arg;
    struct duo *du = dw->duo;
    char body[128];

    snprintf(body, sizeof body, "{\"max\":10,\"lease_ttl_s\":30,\"wait_s\":0.5,\"worker\":\"w%d\"}",
             dw->id);
    for (;;) {
        struct resp r, a;
        json_t *d, *ab;
        char *txt;
        int ver, done;

        pthread_mutex_lock(&du->mu);
        done = du->n_acks >= DUO_VERSIONS;
        pthread_mutex_unlock(&du->mu);
        if (done || mono_ms() > du->deadline)
            break;
        if (http_json(du->s, "POST", "/v1/groups/du.g/claim", body, &r) || r.status != 200) {
            pthread_mutex_lock(&du->mu);
            du->errors++;
            pthread_mutex_unlock(&du->mu);
            resp_free(&r);
            break;
        }
        if (json_array_size(json_object_get(r.json, "deliveries")) == 0) {
            resp_free(&r);
            continue;
        }
        d = json_array_get(json_object_get(r.json, "deliveries"), 0);
        ver = (int)json_integer_value(
            json_object_get(json_object_get(d, "event"), "aggregate_version"));
        pthread_mutex_lock(&du->mu);
        /* The claim's 200 came while the other still holds one: two
         * deliveries of the aggregate under lease at once. */
        if (du->holder >= 0 && du->holder != dw->id)
            du->overlap++;
        if (json_array_size(json_object_get(r.json, "deliveries")) != 1)
            du->multi++;
        if (strncmp(json_string_value(json_object_get(json_object_get(d, "event"), "event_id")),
                    "du-", 3))
            du->foreign++;
        du->holder = dw->id;
        pthread_mutex_unlock(&du->mu);

        /* Give up the hold before the ack is sent: the server may hand out
         * the next version as soon as it has the ack. */
        pthread_mutex_lock(&du->mu);
        if (du->n_acks < DUO_VERSIONS + 10)
            du->acks[du->n_acks] = ver;
        du->n_acks++;
        du->holder = -1;
        pthread_mutex_unlock(&du->mu);
        ab = json_pack("{s:[{s:O,s:O}]}", "deliveries", "seq", json_object_get(d, "seq"),
                       "lease_token", json_object_get(d, "lease_token"));
        txt = json_dumps(ab, JSON_COMPACT);
        json_decref(ab);
        if (http_json(du->s, "POST", "/v1/groups/du.g/ack", txt, &a) || a.status != 200) {
            pthread_mutex_lock(&du->mu);
            du->errors++;
            pthread_mutex_unlock(&du->mu);
        } else {
            json_t *res = json_array_get(json_object_get(a.json, "results"), 0);
            const char *st = json_string_value(json_object_get(res, "status"));
            if (!st || strcmp(st, "acked")) {
                pthread_mutex_lock(&du->mu);
                du->not_acked++;
                pthread_mutex_unlock(&du->mu);
            }
        }
        resp_free(&a);
        free(txt);
        resp_free(&r);
    }
    http_thread_done();
    return NULL;
}

static void two_consumers_one_aggregate(void **state)
{
    struct duo du;
    struct duo_worker w[2];
    pthread_t th[2];
    char *body = malloc(64 * 1024), *p;
    json_t *agg, *e;
    size_t i;
    int64_t t0;

    (void)state;
    memset(&du, 0, sizeof du);
    pthread_mutex_init(&du.mu, NULL);
    du.s = &S;
    du.holder = -1;
    put_group(&S, "du.g", "{\"topics\":[\"du.t\"],\"ordered\":true}");
    p = body + sprintf(body, "{\"events\":[");
    for (int v = 1; v <= DUO_VERSIONS; v++)
        p += sprintf(p, "%s{\"event_id\":\"du-%d\",\"topic\":\"du.t\",\"aggregate_type\":\"du\","
                        "\"aggregate_id\":\"X\",\"aggregate_version\":%d}",
                     v > 1 ? "," : "", v, v);
    strcpy(p, "]}");
    json_decref(publish(&S, body));
    free(body);

    t0 = mono_ms();
    du.deadline = t0 + 20000;
    for (int k = 0; k < 2; k++) {
        w[k].duo = &du;
        w[k].id = k;
        assert_int_equal(pthread_create(&th[k], NULL, duo_worker, &w[k]), 0);
    }
    for (int k = 0; k < 2; k++)
        pthread_join(th[k], NULL);
    pthread_mutex_destroy(&du.mu);
    printf("two consumers: %d acks in %lld ms, %d overlaps, %d multi, %d not acked, "
           "%d errors\n", du.n_acks, (long long)(mono_ms() - t0), du.overlap, du.multi,
           du.not_acked, du.errors);
    assert_int_equal(du.errors, 0);
    assert_int_equal(du.foreign, 0);
    assert_int_equal(du.overlap, 0);
    assert_int_equal(du.multi, 0);
    assert_int_equal(du.not_acked, 0);
    assert_int_equal(du.n_acks, DUO_VERSIONS);
    for (int k = 0; k < DUO_VERSIONS; k++) {
        if (du.acks[k] != k + 1)
            fprintf(stderr, "ack %d was version %d\n", k, du.acks[k]);
        assert_int_equal(du.acks[k], k + 1); /* strictly increasing 1..50 */
    }
    /* Each once, all dispatched at the first attempt. */
    agg = call(&S, "GET", "/v1/aggregates/du/X", NULL, 200);
    assert_int_equal(json_array_size(json_object_get(agg, "events")), DUO_VERSIONS);
    json_array_foreach(json_object_get(agg, "events"), i, e) {
        json_t *dl = json_array_get(json_object_get(e, "deliveries"), 0);
        assert_int_equal(jint(json_object_get(e, "event"), "aggregate_version"), (json_int_t)i + 1);
        assert_int_equal(json_array_size(json_object_get(e, "deliveries")), 1);
        assert_string_equal(jstr(dl, "group"), "du.g");
        assert_string_equal(jstr(dl, "state"), "dispatched");
        assert_int_equal(jint(dl, "attempts"), 1);
    }
    json_decref(agg);
    claim_none(&S, "du.g");
}

/* ---- 5. dlq_policy release vs hold ---- */

static void dlq_release_and_hold(void **state)
{
    json_t *c, *r, *b, *e, *page;
    json_int_t x1, y1;
    char body[128];

    (void)state;
    /* Both groups see the same events. */
    put_group(&S, "dr.g", "{\"topics\":[\"dq.t\"],\"ordered\":true,\"max_attempts\":1,"
                          "\"dlq_policy\":\"release\"}");
    put_group(&S, "dh.g", "{\"topics\":[\"dq.t\"],\"ordered\":true,\"max_attempts\":1,"
                          "\"dlq_policy\":\"hold\"}");
    {
        json_t *g = call(&S, "GET", "/v1/groups/dh.g", NULL, 200);
        assert_string_equal(jstr(g, "dlq_policy"), "hold");
        json_decref(g);
    }
    json_decref(publish(&S, "{\"events\":["
        "{\"event_id\":\"dq-x1\",\"topic\":\"dq.t\",\"aggregate_type\":\"dq\",\"aggregate_id\":\"X\",\"aggregate_version\":1},"
        "{\"event_id\":\"dq-x2\",\"topic\":\"dq.t\",\"aggregate_type\":\"dq\",\"aggregate_id\":\"X\",\"aggregate_version\":2},"
        "{\"event_id\":\"dq-x3\",\"topic\":\"dq.t\",\"aggregate_type\":\"dq\",\"aggregate_id\":\"X\",\"aggregate_version\":3},"
        "{\"event_id\":\"dq-y1\",\"topic\":\"dq.t\",\"aggregate_type\":\"dq\",\"aggregate_id\":\"Y\",\"aggregate_version\":1},"
        "{\"event_id\":\"dq-y2\",\"topic\":\"dq.t\",\"aggregate_type\":\"dq\",\"aggregate_id\":\"Y\",\"aggregate_version\":2}]}"));

    /* release: the dead head is terminal and the next version comes. */
    c = claim(&S, "dr.g", "{\"max\":10}");
    assert_int_equal(json_array_size(dlvs(c)), 2);
    assert_string_equal(dlv_id(dlv(c, 0)), "dq-x1");
    assert_string_equal(dlv_id(dlv(c, 1)), "dq-y1");
    x1 = jint(dlv(c, 0), "seq");
    r = nack_one(&S, "dr.g", dlv(c, 0), "{\"error\":\"x1 poison\"}");
    expect_result(r, 0, x1, "dead_lettered");
    json_decref(r);
    expect_state(&S, "dq-x1", "dr.g", "dlq", 1);
    page = call(&S, "GET", "/v1/groups/dr.g/dlq", NULL, 200);
    assert_int_equal(json_array_size(dlvs(page)), 1);
    assert_int_equal(jint(dlv(page, 0), "seq"), x1);
    assert_string_equal(jstr(dlv(page, 0), "last_error"), "x1 poison");
    json_decref(page);
    r = claim_only(&S, "dr.g", "dq-x2", 1); /* y2 still behind the leased y1 */
    ack_all(&S, "dr.g", r);
    json_decref(r);
    {
        json_t *one = json_pack("{s:[O]}", "deliveries", dlv(c, 1));
        ack_all(&S, "dr.g", one);
        json_decref(one);
    }
    json_decref(c);
    c = claim(&S, "dr.g", "{\"max\":10}");
    assert_int_equal(json_array_size(dlvs(c)), 2);
    assert_string_equal(dlv_id(dlv(c, 0)), "dq-x3");
    assert_string_equal(dlv_id(dlv(c, 1)), "dq-y2");
    ack_all(&S, "dr.g", c);
    json_decref(c);
    claim_none(&S, "dr.g");
    expect_not_blocked(&S, "dr.g", "dq", "X");
    expect_state(&S, "dq-x1", "dr.g", "dlq", 1);

    /* hold: the dead head keeps its aggregate quarantined. */
    c = claim(&S, "dh.g", "{\"max\":10}");
    assert_int_equal(json_array_size(dlvs(c)), 2);
    assert_string_equal(dlv_id(dlv(c, 0)), "dq-x1");
    assert_string_equal(dlv_id(dlv(c, 1)), "dq-y1");
    assert_int_equal(jint(dlv(c, 0), "seq"), x1);
    y1 = jint(dlv(c, 1), "seq");
    r = settle(&S, "dh.g", "nack", items_of(c), "{\"error\":\"poison\"}");
    expect_result(r, 0, x1, "dead_lettered");
    expect_result(r, 1, y1, "dead_lettered");
    json_decref(r);
    json_decref(c);
    claim_none(&S, "dh.g");
    expect_state(&S, "dq-x1", "dh.g", "dlq", 1);
    expect_state(&S, "dq-x2", "dh.g", "pending", 0);
    expect_blocked(&S, "dh.g", "dq", "X", "dlq", x1, 2, 0);
    expect_blocked(&S, "dh.g", "dq", "Y", "dlq", y1, 1, 0);
    page = call(&S, "GET", "/v1/groups/dh.g/dlq", NULL, 200);
    assert_int_equal(json_array_size(dlvs(page)), 2);
    json_decref(page);

    /* Requeue redrives the held head (attempt 1), then its successors in
     * order. */
    snprintf(body, sizeof body, "{\"seqs\":[%lld]}", (long long)x1);
    r = call(&S, "POST", "/v1/groups/dh.g/dlq/requeue", body, 200);
    expect_result(r, 0, x1, "requeued");
    json_decref(r);
    c = claim_only(&S, "dh.g", "dq-x1", 1);
    claim_none(&S, "dh.g");
    expect_blocked(&S, "dh.g", "dq", "X", "lease", x1, 2, 0);
    ack_all(&S, "dh.g", c);
    json_decref(c);
    take(&S, "dh.g", "dq-x2", 1);
    take(&S, "dh.g", "dq-x3", 1);
    claim_none(&S, "dh.g");
    expect_not_blocked(&S, "dh.g", "dq", "X");

    /* In the other aggregate, a skip of the held head releases the next. */
    b = blocked(&S, "dh.g", "dlq");
    e = blocked_entry(b, "dq", "Y");
    assert_non_null(e);
    json_decref(b);
    snprintf(body, sizeof body, "{\"seqs\":[%lld]}", (long long)y1);
    r = call(&S, "POST", "/v1/groups/dh.g/dlq/skip", body, 200);
    expect_result(r, 0, y1, "skipped");
    json_decref(r);
    expect_state(&S, "dq-y1", "dh.g", "skipped", 1);
    take(&S, "dh.g", "dq-y2", 1);
    claim_none(&S, "dh.g");
    expect_not_blocked(&S, "dh.g", "dq", "Y");
    page = call(&S, "GET", "/v1/groups/dh.g/dlq", NULL, 200);
    assert_int_equal(json_array_size(dlvs(page)), 0);
    json_decref(page);
}

/* ---- 6. Unversioned aggregates: (created_at, seq) ---- */

static void unversioned_created_at_order(void **state)
{
    json_t *c;
    json_int_t s10;

    (void)state;
    put_group(&S, "uv.g", "{\"topics\":[\"uv.t\"],\"ordered\":true}");
    /* T+2 arrives before T+1; nothing was claimed yet: T+1 goes first. */
    pub1(&S, "{\"event_id\":\"uv-t2\",\"topic\":\"uv.t\",\"aggregate_type\":\"uv\","
             "\"aggregate_id\":\"A\",\"created_at\":\"2025-06-01T10:00:02.000000Z\"}");
    pub1(&S, "{\"event_id\":\"uv-t1\",\"topic\":\"uv.t\",\"aggregate_type\":\"uv\","
             "\"aggregate_id\":\"A\",\"created_at\":\"2025-06-01T10:00:01.000000Z\"}");
    /* Same created_at: seq decides. */
    pub1(&S, "{\"event_id\":\"uv-t2b\",\"topic\":\"uv.t\",\"aggregate_type\":\"uv\","
             "\"aggregate_id\":\"A\",\"created_at\":\"2025-06-01T10:00:02.000000Z\"}");
    take(&S, "uv.g", "uv-t1", 1);
    take(&S, "uv.g", "uv-t2", 1);
    take(&S, "uv.g", "uv-t2b", 1);
    claim_none(&S, "uv.g");

    /* A late event older than the head already handed out waits for it. */
    s10 = pub1(&S, "{\"event_id\":\"uv-l10\",\"topic\":\"uv.t\",\"aggregate_type\":\"uv\","
                   "\"aggregate_id\":\"B\",\"created_at\":\"2025-06-01T10:00:10.000000Z\"}");
    pub1(&S, "{\"event_id\":\"uv-l20\",\"topic\":\"uv.t\",\"aggregate_type\":\"uv\","
             "\"aggregate_id\":\"B\",\"created_at\":\"2025-06-01T10:00:20.000000Z\"}");
    c = claim_only(&S, "uv.g", "uv-l10", 1);
    pub1(&S, "{\"event_id\":\"uv-l05\",\"topic\":\"uv.t\",\"aggregate_type\":\"uv\","
             "\"aggregate_id\":\"B\",\"created_at\":\"2025-06-01T10:00:05.000000Z\"}");
    claim_none(&S, "uv.g"); /* never two of one aggregate under lease */
    expect_state(&S, "uv-l05", "uv.g", "pending", 0);
    expect_blocked(&S, "uv.g", "uv", "B", "lease", s10, 2, 0);
    ack_all(&S, "uv.g", c);
    json_decref(c);
    take(&S, "uv.g", "uv-l05", 1);
    take(&S, "uv.g", "uv-l20", 1);
    claim_none(&S, "uv.g");
}

/* ---- 7. kill -9 right after a 2xx (seed fault test) ---- */

static void kill9_keeps_order(void **state)
{
    struct srv *s = &OWN;
    json_t *c, *r;
    json_int_t s1, s11;
    char body[8192], tok1[41], tok11[41], id[32], *p;

    (void)state;
    assert_int_equal(srv_start(s, NULL), 0);
    put_group(s, "k9.g", "{\"topics\":[\"k9.t\"],\"ordered\":true}");
    p = body + sprintf(body, "{\"events\":[");
    for (int v = 1; v <= 20; v++)
        p += sprintf(p, "%s{\"event_id\":\"k9-%d\",\"topic\":\"k9.t\",\"aggregate_type\":\"k9\","
                        "\"aggregate_id\":\"A\",\"aggregate_version\":%d}",
                     v > 1 ? "," : "", v, v);
    strcpy(p, "]}");
    json_decref(publish(s, body));

    /* kill -9 right after the claim's 200. */
    c = claim(s, "k9.g", "{\"max\":10,\"lease_ttl_s\":600,\"worker\":\"w-k9\"}");
    srv_kill9(s);
    assert_int_equal(json_array_size(dlvs(c)), 1);
    assert_string_equal(dlv_id(dlv(c, 0)), "k9-1");
    s1 = jint(dlv(c, 0), "seq");
    snprintf(tok1, sizeof tok1, "%s", jstr(dlv(c, 0), "lease_token"));
    json_decref(c);
    assert_int_equal(srv_start(s, NULL), 0); /* same s.dir */

    /* The lease is honoured: v1 stays the head, nothing else comes. */
    claim_none(s, "k9.g");
    expect_state(s, "k9-1", "k9.g", "processing", 1);
    {
        json_t *items = json_array();
        json_array_append_new(items, item(s1, tok1));
        r = settle(s, "k9.g", "ack", items, NULL);
    }
    expect_result(r, 0, s1, "acked");
    json_decref(r);

    /* Then one at a time, in order, none skipped. */
    for (int v = 2; v <= 10; v++) {
        snprintf(id, sizeof id, "k9-%d", v);
        c = claim_only(s, "k9.g", id, 1);
        assert_int_equal(dlv_version(dlv(c, 0)), v);
        claim_none(s, "k9.g");
        ack_all(s, "k9.g", c);
        json_decref(c);
    }
    /* v11 under lease; kill -9 right after the 201 of v21. */
    c = claim_only(s, "k9.g", "k9-11", 1);
    s11 = jint(dlv(c, 0), "seq");
    snprintf(tok11, sizeof tok11, "%s", jstr(dlv(c, 0), "lease_token"));
    json_decref(c);
    r = publish(s, "{\"event_id\":\"k9-21\",\"topic\":\"k9.t\",\"aggregate_type\":\"k9\","
                    "\"aggregate_id\":\"A\",\"aggregate_version\":21}");
    srv_kill9(s);
    assert_false(json_is_true(json_object_get(json_array_get(json_object_get(r, "results"), 0),
                                              "duplicate")));
    json_decref(r);
    assert_int_equal(srv_start(s, NULL), 0);

    json_decref(call(s, "GET", "/v1/events/k9-21", NULL, 200));
    claim_none(s, "k9.g");
    {
        json_t *items = json_array();
        json_array_append_new(items, item(s11, tok11));
        r = settle(s, "k9.g", "ack", items, NULL);
        expect_result(r, 0, s11, "acked");
        json_decref(r);
    }
    for (int v = 12; v <= 21; v++) {
        snprintf(id, sizeof id, "k9-%d", v);
        c = claim_only(s, "k9.g", id, 1);
        assert_int_equal(dlv_version(dlv(c, 0)), v);
        claim_none(s, "k9.g");
        ack_all(s, "k9.g", c);
        json_decref(c);
    }
    claim_none(s, "k9.g");
    for (int v = 1; v <= 21; v++) {
        snprintf(id, sizeof id, "k9-%d", v);
        expect_state(s, id, "k9.g", "dispatched", 1);
    }
    assert_int_equal(srv_stop(s), 0);
    srv_cleanup(s);
}

/* ---- 8. The aggregate view ---- */

/* The delivery of 'group' in an aggregate view event, or NULL. */
static json_t *view_dlv(json_t *ev, const char *group)
{
    json_t *d;
    size_t i;

    json_array_foreach(json_object_get(ev, "deliveries"), i, d)
        if (!strcmp(jstr(d, "group"), group))
            return d;
    return NULL;
}

static void aggregate_view(void **state)
{
    static const char *const ids[] = {"av-1", "av-2", "av-3"};
    static const char *const ord_state[] = {"dispatched", "processing", "pending"};
    static const char *const un_state[] = {"processing", "processing", "dispatched"};
    json_t *c, *v, *ev;
    size_t i;

    (void)state;
    put_group(&S, "av.o", "{\"topics\":[\"av.t\"],\"ordered\":true}");
    json_decref(call(&S, "PUT", "/v1/groups/av.u", "{\"topics\":[\"av.t\"]}", 201));
    /* v3 arrives before v2. */
    pub1(&S, "{\"event_id\":\"av-1\",\"topic\":\"av.t\",\"aggregate_type\":\"av\","
             "\"aggregate_id\":\"A\",\"aggregate_version\":1}");
    pub1(&S, "{\"event_id\":\"av-3\",\"topic\":\"av.t\",\"aggregate_type\":\"av\","
             "\"aggregate_id\":\"A\",\"aggregate_version\":3}");
    pub1(&S, "{\"event_id\":\"av-2\",\"topic\":\"av.t\",\"aggregate_type\":\"av\","
             "\"aggregate_id\":\"A\",\"aggregate_version\":2}");
    take(&S, "av.o", "av-1", 1);
    c = claim_only(&S, "av.o", "av-2", 1);
    json_decref(c);
    c = claim(&S, "av.u", "{\"max\":10}");
    assert_int_equal(json_array_size(dlvs(c)), 3);
    json_array_foreach(dlvs(c), i, ev)
        if (!strcmp(dlv_id(ev), "av-3")) {
            json_t *one = json_pack("{s:[O]}", "deliveries", ev);
            ack_all(&S, "av.u", one);
            json_decref(one);
        }
    json_decref(c);

    v = call(&S, "GET", "/v1/aggregates/av/A", NULL, 200);
    assert_string_equal(jstr(v, "aggregate_type"), "av");
    assert_string_equal(jstr(v, "aggregate_id"), "A");
    assert_true(json_is_true(json_object_get(v, "versioned")));
    assert_int_equal(jint(v, "first_version"), 1);
    assert_int_equal(jint(v, "last_version"), 3);
    assert_int_equal(jint(v, "contiguous_to"), 3);
    assert_true(json_is_false(json_object_get(v, "truncated")));
    assert_int_equal(json_array_size(json_object_get(v, "events")), 3);
    json_array_foreach(json_object_get(v, "events"), i, ev) {
        json_t *e = json_object_get(ev, "event"), *d;
        assert_string_equal(jstr(e, "event_id"), ids[i]); /* version order, not seq */
        assert_int_equal(jint(e, "aggregate_version"), (json_int_t)i + 1);
        assert_true(jint(e, "seq") > 0);
        assert_int_equal(json_array_size(json_object_get(ev, "deliveries")), 2);
        d = view_dlv(ev, "av.o");
        assert_non_null(d);
        assert_string_equal(jstr(d, "state"), ord_state[i]);
        assert_int_equal(jint(d, "attempts"), i < 2 ? 1 : 0);
        d = view_dlv(ev, "av.u");
        assert_non_null(d);
        assert_string_equal(jstr(d, "state"), un_state[i]);
        assert_int_equal(jint(d, "attempts"), 1);
    }
    json_decref(v);

    /* Unversioned: (created_at, seq) order, no version fields. */
    pub1(&S, "{\"event_id\":\"av-u9\",\"topic\":\"av.t\",\"aggregate_type\":\"av\","
             "\"aggregate_id\":\"U\",\"created_at\":\"2025-06-01T10:00:09.000000Z\"}");
    pub1(&S, "{\"event_id\":\"av-u1\",\"topic\":\"av.t\",\"aggregate_type\":\"av\","
             "\"aggregate_id\":\"U\",\"created_at\":\"2025-06-01T10:00:01.000000Z\"}");
    v = call(&S, "GET", "/v1/aggregates/av/U", NULL, 200);
    assert_true(json_is_false(json_object_get(v, "versioned")));
    assert_null(json_object_get(v, "first_version"));
    assert_int_equal(json_array_size(json_object_get(v, "events")), 2);
    assert_string_equal(jstr(json_object_get(json_array_get(json_object_get(v, "events"), 0),
                                             "event"), "event_id"), "av-u1");
    assert_string_equal(jstr(json_object_get(json_array_get(json_object_get(v, "events"), 1),
                                             "event"), "event_id"), "av-u9");
    json_decref(v);

    expect_error(&S, "GET", "/v1/aggregates/av/nope", NULL, 404, "not_found");
    expect_error(&S, "GET", "/v1/aggregates/nope/A", NULL, 404, "not_found");
}

/* ---- 9. Backfill keeps version order ---- */

/* A group created with start `all` gets the events stored before it by a
 * backfill that walks the log in seq order, a chunk per writer batch.  v3
 * was stored before v2 (seq order is not version order), and thousands of
 * other events lie between them, so the backfill brings v1 and v3 into the
 * group well before v2.  The aggregate is contiguous in the store (1..3),
 * but v3 must still not be handed out before v2. */
static void backfill_keeps_version_order(void **state)
{
    static const char *const args[] = {"--writer-delay-ms", "20", NULL};
    struct srv *s = &OWN;
    json_t *c;
    char *body = malloc(128 * 1000), *p;
    int got[3] = {0, 0, 0}, n = 0;
    int64_t end;

    (void)state;
    assert_int_equal(srv_start(s, args), 0);
    pub1(s, "{\"event_id\":\"bf-1\",\"topic\":\"bf.t\",\"aggregate_type\":\"bf\","
             "\"aggregate_id\":\"A\",\"aggregate_version\":1}");
    pub1(s, "{\"event_id\":\"bf-3\",\"topic\":\"bf.t\",\"aggregate_type\":\"bf\","
             "\"aggregate_id\":\"A\",\"aggregate_version\":3}");
    for (int b = 0; b < 40; b++) { /* 40,000 records: 20 backfill chunks */
        p = body + sprintf(body, "{\"events\":[");
        for (int i = 0; i < 1000; i++)
            p += sprintf(p, "%s{\"event_id\":\"bf-f%d\",\"topic\":\"bf.fill\"}", i ? "," : "",
                         b * 1000 + i);
        strcpy(p, "]}");
        json_decref(publish(s, body));
    }
    free(body);
    pub1(s, "{\"event_id\":\"bf-2\",\"topic\":\"bf.t\",\"aggregate_type\":\"bf\","
             "\"aggregate_id\":\"A\",\"aggregate_version\":2}");
    put_group(s, "bf.g", "{\"topics\":[\"bf.t\"],\"ordered\":true,\"start\":\"all\"}");

    /* Take and ack one at a time, as soon as each can be had (the
     * backfill of the 20 chunks takes some 400 ms with --writer-delay-ms
     * 20; the first three requests take some 100 ms). */
    end = mono_ms() + 20000;
    while (n < 3 && mono_ms() < end) {
        c = claim(s, "bf.g", "{\"max\":10,\"wait_s\":2}");
        assert_true(json_array_size(dlvs(c)) <= 1);
        if (json_array_size(dlvs(c)) == 1) {
            got[n++] = (int)dlv_version(dlv(c, 0));
            ack_all(s, "bf.g", c);
        }
        json_decref(c);
    }
    printf("backfill: versions handed out in the order %d, %d, %d\n", got[0], got[1], got[2]);
    assert_int_equal(n, 3);
    assert_int_equal(got[0], 1);
    assert_int_equal(got[1], 2); /* not v3 before v2 */
    assert_int_equal(got[2], 3);

    /* A group whose topics hold nothing has nothing to backfill: it must
     * not walk the 40,000 records (20 chunks, some 400 ms here) before its
     * first head can be picked.  Its first event is claimable at once. */
    put_group(s, "bf.e", "{\"topics\":[\"bf.empty\"],\"ordered\":true,\"start\":\"all\"}");
    pub1(s, "{\"event_id\":\"bf-e1\",\"topic\":\"bf.empty\",\"aggregate_type\":\"bf\","
             "\"aggregate_id\":\"E\",\"aggregate_version\":1}");
    c = claim(s, "bf.e", "{\"max\":10,\"wait_s\":0}");
    assert_int_equal(json_array_size(dlvs(c)), 1);
    assert_int_equal(dlv_version(dlv(c, 0)), 1);
    json_decref(c);
    assert_int_equal(srv_stop(s), 0);
    srv_cleanup(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(only_heads_claimable),
        cmocka_unit_test(retrying_head_blocks),
        cmocka_unit_test(gap_parks_aggregate),
        cmocka_unit_test(two_consumers_one_aggregate),
        cmocka_unit_test(dlq_release_and_hold),
        cmocka_unit_test(unversioned_created_at_order),
        cmocka_unit_test_setup_teardown(kill9_keeps_order, own_setup, own_teardown),
        cmocka_unit_test(aggregate_view),
        cmocka_unit_test_setup_teardown(backfill_keeps_version_order, own_setup, own_teardown),
    };
    return cmocka_run_group_tests(tests, ordered_setup, ordered_teardown);
}
