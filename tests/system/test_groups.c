/* test_groups.c - integration tests of consumer groups against a real micd
 * (DESIGN sections 2, 3, 4 and 12): group resources, `start`, claim order
 * and bounds, ack/nack/extend results, fencing by lease token, the DLQ,
 * long-polls (wake-up, timeout, a client that leaves, one that half-closes,
 * 1000 parked without a thread each), deletion, 8 concurrent workers
 * draining 20,000 events, and kill -9 with leases outstanding.
 *
 * Most tests share one server and use their own topic and group names; the
 * kill -9 and the 1000-long-poll tests start servers of their own. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "harness.h"
#include "claimkit.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static struct srv S; /* shared server */

static int group_setup(void **state)
{
    (void)state;
    return srv_start_shared(&S, NULL);
}

static int group_teardown(void **state)
{
    (void)state;
    return srv_stop_shared(&S);
}

/* ---- Helpers ---- */

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

    snprintf(path, sizeof path, "/v1/groups/%s", name);
    json_decref(call(s, "PUT", path, body, 201));
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

/* Ack one delivery and return its status word in 'out'. */
static void ack_one(const struct srv *s, const char *group, json_int_t seq,
                    const char *token, char *out, size_t cap)
{
    json_t *items = json_array(), *r;

    json_array_append_new(items, item(seq, token));
    r = settle(s, group, "ack", items, NULL);
    assert_int_equal(json_array_size(json_object_get(r, "results")), 1);
    assert_int_equal(jint(result(r, 0), "seq"), seq);
    snprintf(out, cap, "%s", jstr(result(r, 0), "status"));
    json_decref(r);
}

/* GET /v1/events/{id}: the delivery of 'group', copied into 'state' and
 * '*attempts'; returns 1 if the event has a delivery in that group. */
static int event_dlv(const struct srv *s, const char *id, const char *group,
                     char *state, size_t cap, int *attempts)
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
        snprintf(state, cap, "%s", jstr(d, "state"));
        *attempts = (int)jint(d, "attempts");
    }
    json_decref(r);
    assert_true(found <= 1);
    return found;
}

static void expect_state(const struct srv *s, const char *id, const char *group,
                         const char *state, int attempts)
{
    char st[32];
    int at = -1;

    assert_int_equal(event_dlv(s, id, group, st, sizeof st, &at), 1);
    assert_string_equal(st, state);
    if (attempts >= 0)
        assert_int_equal(at, attempts);
}

/* The value of mic_writer_parked in GET /metrics, or -1. */
static int metric_parked(const struct srv *s)
{
    struct resp r;
    const char *p;
    int n = -1;

    if (http(s, "GET", "/metrics", NULL, NULL, 0, NULL, &r) == 0 && r.status == 200 &&
        r.body && (p = strstr(r.body, "\nmic_writer_parked ")))
        n = atoi(p + strlen("\nmic_writer_parked "));
    resp_free(&r);
    return n;
}

struct parked_wait {
    const struct srv *s;
    int want;     /* >= want, or == want when exact */
    int exact;
};

static int parked_reached(void *arg)
{
    struct parked_wait *w = arg;
    int n = metric_parked(w->s);

    return w->exact ? n == w->want : n >= w->want;
}

/* A group with nothing in it, for await_parked's forced batch. */
static void ensure_nudge(const struct srv *s)
{
    struct resp r;

    assert_int_equal(http_json(s, "PUT", "/v1/groups/nudge.g",
                               "{\"topics\":[\"nudge.none\"],\"start\":\"new\"}", &r), 0);
    assert_true(r.status == 200 || r.status == 201);
    resp_free(&r);
}

/* Await mic_writer_parked reaching 'want' (>=, or == if 'exact') for up
 * to 'ms'.  Returns 1 if it did.  If it did not, one writer batch is forced
 * (an empty claim on 'nudge', a group with nothing in it) and the gauge
 * awaited again, so that the test can go on; the caller asserts the first
 * answer at its end. */
static int await_parked(const struct srv *s, int want, int exact, int ms,
                        const char *nudge)
{
    struct parked_wait pw = {s, want, exact};
    char path[256];

    if (await(parked_reached, &pw, ms))
        return 1;
    fprintf(stderr, "mic_writer_parked shows %d, want %s%d; forcing one writer batch\n",
            metric_parked(s), exact ? "" : ">= ", want);
    snprintf(path, sizeof path, "/v1/groups/%s/claim", nudge);
    json_decref(call(s, "POST", path, "{\"max\":1}", 200));
    if (await(parked_reached, &pw, 5000))
        fprintf(stderr, "mic_writer_parked now shows %d: it lagged by one writer batch\n",
                metric_parked(s));
    else
        fprintf(stderr, "mic_writer_parked still shows %d\n", metric_parked(s));
    return 0;
}

/* A lease token: 128 random bits as 32 lowercase hex digits. */
static int is_hex32(const char *t)
{
    if (strlen(t) != 32)
        return 0;
    for (int i = 0; i < 32; i++)
        if (!strchr("0123456789abcdef", t[i]))
            return 0;
    return 1;
}

static int is_time(const char *t)
{
    return strlen(t) == 27 && t[4] == '-' && t[10] == 'T' && t[19] == '.' && t[26] == 'Z';
}

/* ---- 1. Group resources ---- */

static void group_crud(void **state)
{
    json_t *r, *g, *b, *list, *it;
    size_t i;
    int found = 0;

    (void)state;
    r = call(&S, "PUT", "/v1/groups/crud.g",
             "{\"topics\":[\"crud.t\",\"crud.p.*\"],\"kind\":\"effect\",\"max_attempts\":3,"
             "\"backoff\":{\"initial_ms\":10,\"max_ms\":100,\"multiplier\":3},"
             "\"lease_ttl_s\":5,\"alert_oldest_unhandled_s\":60}", 201);
    assert_string_equal(jstr(r, "name"), "crud.g");
    assert_int_equal(json_array_size(json_object_get(r, "topics")), 2);
    assert_string_equal(json_string_value(json_array_get(json_object_get(r, "topics"), 0)), "crud.t");
    assert_string_equal(json_string_value(json_array_get(json_object_get(r, "topics"), 1)), "crud.p.*");
    assert_string_equal(jstr(r, "kind"), "effect");
    assert_true(json_is_false(json_object_get(r, "ordered")));
    assert_int_equal(jint(r, "max_attempts"), 3);
    b = json_object_get(r, "backoff");
    assert_int_equal(jint(b, "initial_ms"), 10);
    assert_int_equal(jint(b, "max_ms"), 100);
    assert_true(json_number_value(json_object_get(b, "multiplier")) == 3);
    assert_int_equal(jint(r, "lease_ttl_s"), 5);
    assert_string_equal(jstr(r, "start"), "all");
    assert_int_equal(jint(r, "alert_oldest_unhandled_s"), 60);
    assert_string_equal(jstr(r, "dlq_policy"), "release");
    json_decref(r);

    /* A PUT replaces the rest: absent fields take their defaults. */
    r = call(&S, "PUT", "/v1/groups/crud.g",
             "{\"topics\":[\"crud.t\",\"crud.p.*\"],\"max_attempts\":4}", 200);
    assert_string_equal(jstr(r, "name"), "crud.g");
    assert_int_equal(jint(r, "max_attempts"), 4);
    assert_string_equal(jstr(r, "kind"), "projection");
    assert_int_equal(jint(r, "lease_ttl_s"), 30);
    b = json_object_get(r, "backoff");
    assert_int_equal(jint(b, "initial_ms"), 1000);
    assert_int_equal(jint(b, "max_ms"), 300000);
    assert_true(json_number_value(json_object_get(b, "multiplier")) == 2);
    assert_true(json_is_null(json_object_get(r, "alert_oldest_unhandled_s")));
    assert_string_equal(jstr(r, "start"), "all");
    assert_string_equal(jstr(r, "dlq_policy"), "release");

    g = call(&S, "GET", "/v1/groups/crud.g", NULL, 200);
    assert_true(json_equal(g, r));
    json_decref(g);
    list = call(&S, "GET", "/v1/groups", NULL, 200);
    json_array_foreach(json_object_get(list, "groups"), i, it)
        if (!strcmp(jstr(it, "name"), "crud.g")) {
            found++;
            assert_true(json_equal(it, r));
        }
    assert_int_equal(found, 1);
    json_decref(list);

    /* Fixed at creation. */
    expect_error(&S, "PUT", "/v1/groups/crud.g", "{\"topics\":[\"crud.other\"]}", 409,
                 "immutable_field");
    expect_error(&S, "PUT", "/v1/groups/crud.g",
                 "{\"topics\":[\"crud.t\",\"crud.p.*\"],\"start\":\"new\"}", 409,
                 "immutable_field");
    /* Invalid fields. */
    expect_error(&S, "PUT", "/v1/groups/crud.g",
                 "{\"topics\":[\"crud.t\",\"crud.p.*\"],\"max_attempts\":0}", 422, "invalid_request");
    expect_error(&S, "PUT", "/v1/groups/crud.g",
                 "{\"topics\":[\"crud.t\",\"crud.p.*\"],\"lease_ttl_s\":43201}", 422, "invalid_request");
    expect_error(&S, "PUT", "/v1/groups/crud.g",
                 "{\"topics\":[\"crud.t\",\"crud.p.*\"],\"colour\":1}", 422, "invalid_request");
    expect_error(&S, "PUT", "/v1/groups/crud.g", "{\"topics\":[]}", 422, "invalid_request");
    expect_error(&S, "PUT", "/v1/groups/crud.g",
                 "{\"topics\":[\"crud.t\",\"crud.p.*\"],\"start\":\"yesterday\"}", 422,
                 "invalid_request");
    expect_error(&S, "PUT", "/v1/groups/crud.new", "{\"topics\":[]}", 422, "invalid_request");
    expect_error(&S, "PUT", "/v1/groups/crud.new", "{\"topics\":[\"x\"],\"start\":\"soon\"}", 422,
                 "invalid_request");
    /* A rejected request changed nothing. */
    g = call(&S, "GET", "/v1/groups/crud.g", NULL, 200);
    assert_true(json_equal(g, r));
    json_decref(g);
    expect_error(&S, "GET", "/v1/groups/crud.new", NULL, 404, "not_found");
    json_decref(r);

    r = call(&S, "DELETE", "/v1/groups/crud.g", NULL, 204);
    json_decref(r);
    expect_error(&S, "GET", "/v1/groups/crud.g", NULL, 404, "not_found");
    expect_error(&S, "POST", "/v1/groups/crud.g/claim", "{\"max\":1}", 404, "not_found");
    expect_error(&S, "POST", "/v1/groups/crud.g/ack",
                 "{\"deliveries\":[{\"seq\":1,\"lease_token\":\"0000000000000000000000000000000000000000\"}]}",
                 404, "not_found");
    expect_error(&S, "DELETE", "/v1/groups/crud.g", NULL, 404, "not_found");
    list = call(&S, "GET", "/v1/groups", NULL, 200);
    json_array_foreach(json_object_get(list, "groups"), i, it)
        assert_string_not_equal(jstr(it, "name"), "crud.g");
    json_decref(list);
}

/* ---- 2. start ---- */

/* Claim (max 100, long-polling) until 'want' deliveries came or 'ms'
 * passed; the event ids go to ids[] (strdup'ed), the count is returned. */
static int claim_ids(const struct srv *s, const char *group, int want, int ms,
                     char **ids, int cap)
{
    int64_t end = mono_ms() + ms;
    int n = 0;

    while (n < want && mono_ms() < end) {
        json_t *r = claim(s, group, "{\"max\":100,\"wait_s\":2}"), *d;
        size_t i;

        json_array_foreach(dlvs(r), i, d) {
            assert_true(n < cap);
            assert_int_equal(jint(d, "attempt"), 1);
            ids[n++] = strdup(jstr(json_object_get(d, "event"), "event_id"));
        }
        json_decref(r);
    }
    return n;
}

static int has_id(char **ids, int n, const char *id)
{
    int c = 0;

    for (int i = 0; i < n; i++)
        c += !strcmp(ids[i], id);
    return c;
}

static void free_ids(char **ids, int n)
{
    for (int i = 0; i < n; i++)
        free(ids[i]);
}

static void start_semantics(void **state)
{
    char *ids[32], body[512], st[32];
    json_t *r;
    int n, at;

    (void)state;
    /* start all: five older events come through the backfill. */
    for (int i = 0; i < 5; i++) {
        snprintf(body, sizeof body, "{\"event_id\":\"sa-%d\",\"topic\":\"sa.t\"}", i);
        json_decref(publish(&S, body));
    }
    put_group(&S, "sa.g", "{\"topics\":[\"sa.t\"],\"start\":\"all\"}");
    n = claim_ids(&S, "sa.g", 5, 10000, ids, 32);
    assert_int_equal(n, 5);
    for (int i = 0; i < 5; i++) {
        snprintf(body, sizeof body, "sa-%d", i);
        assert_int_equal(has_id(ids, n, body), 1);
    }
    free_ids(ids, n);
    json_decref(publish(&S, "{\"event_id\":\"sa-new\",\"topic\":\"sa.t\"}"));
    n = claim_ids(&S, "sa.g", 1, 5000, ids, 32);
    assert_int_equal(n, 1);
    assert_string_equal(ids[0], "sa-new");
    free_ids(ids, n);

    /* start new: only what comes after. */
    for (int i = 0; i < 3; i++) {
        snprintf(body, sizeof body, "{\"event_id\":\"sn-old-%d\",\"topic\":\"sn.t\"}", i);
        json_decref(publish(&S, body));
    }
    put_group(&S, "sn.g", "{\"topics\":[\"sn.t\"],\"start\":\"new\"}");
    json_decref(publish(&S, "{\"events\":[{\"event_id\":\"sn-new-0\",\"topic\":\"sn.t\"},"
                            "{\"event_id\":\"sn-new-1\",\"topic\":\"sn.t\"}]}"));
    r = claim(&S, "sn.g", "{\"max\":100}");
    assert_int_equal(json_array_size(dlvs(r)), 2);
    assert_string_equal(jstr(json_object_get(json_array_get(dlvs(r), 0), "event"), "event_id"),
                        "sn-new-0");
    assert_string_equal(jstr(json_object_get(json_array_get(dlvs(r), 1), "event"), "event_id"),
                        "sn-new-1");
    json_decref(r);
    assert_int_equal(event_dlv(&S, "sn-old-0", "sn.g", st, sizeof st, &at), 0);
    r = claim(&S, "sn.g", "{\"max\":100}");
    assert_int_equal(json_array_size(dlvs(r)), 0);
    json_decref(r);

    /* start = T: created_at >= T, inclusive, both through the backfill
     * (published before) and at publish (after). */
    json_decref(publish(&S, "{\"events\":["
        "{\"event_id\":\"st-before\",\"topic\":\"st.t\",\"created_at\":\"2026-06-01T11:59:59.999999Z\"},"
        "{\"event_id\":\"st-at\",\"topic\":\"st.t\",\"created_at\":\"2026-06-01T12:00:00Z\"},"
        "{\"event_id\":\"st-after\",\"topic\":\"st.t\",\"created_at\":\"2026-06-01T12:00:01Z\"}]}"));
    r = call(&S, "PUT", "/v1/groups/st.g",
             "{\"topics\":[\"st.t\"],\"start\":\"2026-06-01T14:00:00+02:00\"}", 201);
    assert_string_equal(jstr(r, "start"), "2026-06-01T12:00:00.000000Z");
    json_decref(r);
    json_decref(publish(&S, "{\"events\":["
        "{\"event_id\":\"st-late-before\",\"topic\":\"st.t\",\"created_at\":\"2026-06-01T11:00:00Z\"},"
        "{\"event_id\":\"st-late-at\",\"topic\":\"st.t\",\"created_at\":\"2026-06-01T12:00:00.000000Z\"}]}"));
    n = claim_ids(&S, "st.g", 3, 10000, ids, 32);
    assert_int_equal(n, 3);
    assert_int_equal(has_id(ids, n, "st-at"), 1);
    assert_int_equal(has_id(ids, n, "st-after"), 1);
    assert_int_equal(has_id(ids, n, "st-late-at"), 1);
    free_ids(ids, n);
    /* The backfill walks in seq order: past st-after it has judged
     * st-before, so these answers are final. */
    assert_int_equal(event_dlv(&S, "st-before", "st.g", st, sizeof st, &at), 0);
    assert_int_equal(event_dlv(&S, "st-late-before", "st.g", st, sizeof st, &at), 0);
    r = claim(&S, "st.g", "{\"max\":100}");
    assert_int_equal(json_array_size(dlvs(r)), 0);
    json_decref(r);
}

/* ---- 3. Claim order and bounds ---- */

static void claim_order_and_bounds(void **state)
{
    static const char *const want[] = {"co-d", "co-b", "co-e", "co-a", "co-c"};
    json_t *r, *p, *d;
    json_int_t seqs[5];
    size_t i;
    int k = 0;

    (void)state;
    put_group(&S, "co.g", "{\"topics\":[\"co.t\"]}");
    r = claim(&S, "co.g", "{\"max\":5}");
    assert_int_equal(json_array_size(dlvs(r)), 0);
    json_decref(r);
    {
        /* The exact empty answer, and an empty body means max 1. */
        struct resp e;
        json_t *exp = json_loads("{\"deliveries\":[]}", 0, NULL);
        assert_int_equal(http(&S, "POST", "/v1/groups/co.g/claim", NULL, NULL, 0, NULL, &e), 0);
        assert_int_equal(e.status, 200);
        assert_true(json_equal(e.json, exp));
        resp_free(&e);
        json_decref(exp);
    }
    p = publish(&S, "{\"events\":["
                    "{\"event_id\":\"co-a\",\"topic\":\"co.t\"},"
                    "{\"event_id\":\"co-b\",\"topic\":\"co.t\",\"priority\":5},"
                    "{\"event_id\":\"co-c\",\"topic\":\"co.t\",\"priority\":0},"
                    "{\"event_id\":\"co-d\",\"topic\":\"co.t\",\"priority\":9},"
                    "{\"event_id\":\"co-e\",\"topic\":\"co.t\",\"priority\":5}]}");
    for (int j = 0; j < 5; j++)
        seqs[j] = pub_seq(p, (size_t)j);
    json_decref(p);

    expect_error(&S, "POST", "/v1/groups/co.g/claim", "{\"max\":0}", 422, "invalid_request");
    expect_error(&S, "POST", "/v1/groups/co.g/claim", "{\"max\":1001}", 422, "invalid_request");
    expect_error(&S, "POST", "/v1/groups/co.g/claim", "{\"wait_s\":61}", 422, "invalid_request");
    expect_error(&S, "POST", "/v1/groups/co.g/claim", "{\"lease_ttl_s\":0}", 422, "invalid_request");
    expect_error(&S, "POST", "/v1/groups/co.g/claim", "{\"lease_ttl_s\":43201}", 422, "invalid_request");
    expect_error(&S, "POST", "/v1/groups/co.g/claim", "{\"maximum\":1}", 422, "invalid_request");
    expect_error(&S, "POST", "/v1/groups/co.g/claim", "{\"max\":", 400, "invalid_json");

    /* (priority desc, seq asc), max respected. */
    for (int round = 0; round < 2; round++) {
        r = claim(&S, "co.g", "{\"max\":3,\"worker\":\"w-co\"}");
        assert_int_equal(json_array_size(dlvs(r)), round == 0 ? 3 : 2);
        json_array_foreach(dlvs(r), i, d) {
            json_t *ev = json_object_get(d, "event");
            assert_string_equal(jstr(ev, "event_id"), want[k]);
            assert_int_equal(jint(ev, "seq"), jint(d, "seq"));
            assert_true(is_hex32(jstr(d, "lease_token")));
            assert_int_equal(jint(d, "attempt"), 1);
            assert_true(is_time(jstr(d, "lease_expires_at")));
            assert_string_equal(jstr(ev, "topic"), "co.t");
            k++;
        }
        json_decref(r);
    }
    assert_int_equal(k, 5);
    /* Seq order inside one priority: b before e, a before c. */
    assert_true(seqs[1] < seqs[4] && seqs[0] < seqs[2]);
    r = claim(&S, "co.g", "{\"max\":1000}");
    assert_int_equal(json_array_size(dlvs(r)), 0);
    json_decref(r);
    {
        char st[32];
        int at;
        assert_int_equal(event_dlv(&S, "co-d", "co.g", st, sizeof st, &at), 1);
        assert_string_equal(st, "processing");
        assert_int_equal(at, 1);
    }
}

/* ---- 4. ack, nack, extend ---- */

static void ack_nack_extend(void **state)
{
    json_t *p, *r, *c, *items;
    json_int_t sa, sb, sc, sd;
    char ta[41], tb[41], tc[41], td[41], exp1[32], zero[33];

    (void)state;
    put_group(&S, "an.g", "{\"topics\":[\"an.t\"],\"max_attempts\":2}");
    p = publish(&S, "{\"events\":[{\"event_id\":\"an-a\",\"topic\":\"an.t\"},"
                    "{\"event_id\":\"an-b\",\"topic\":\"an.t\"},"
                    "{\"event_id\":\"an-c\",\"topic\":\"an.t\"},"
                    "{\"event_id\":\"an-d\",\"topic\":\"an.t\"}]}");
    sa = pub_seq(p, 0);
    sb = pub_seq(p, 1);
    sc = pub_seq(p, 2);
    sd = pub_seq(p, 3);
    json_decref(p);
    c = claim(&S, "an.g", "{\"max\":4,\"lease_ttl_s\":5}");
    assert_int_equal(json_array_size(dlvs(c)), 4);
    snprintf(ta, sizeof ta, "%s", jstr(json_array_get(dlvs(c), 0), "lease_token"));
    snprintf(tb, sizeof tb, "%s", jstr(json_array_get(dlvs(c), 1), "lease_token"));
    snprintf(tc, sizeof tc, "%s", jstr(json_array_get(dlvs(c), 2), "lease_token"));
    snprintf(td, sizeof td, "%s", jstr(json_array_get(dlvs(c), 3), "lease_token"));
    assert_int_equal(jint(json_array_get(dlvs(c), 0), "seq"), sa);
    assert_int_equal(jint(json_array_get(dlvs(c), 3), "seq"), sd);
    snprintf(exp1, sizeof exp1, "%s", jstr(json_array_get(dlvs(c), 1), "lease_expires_at"));
    json_decref(c);
    /* A wrong token of the right form: zeros. */
    snprintf(zero, sizeof zero, "00000000000000000000000000000000");

    /* Per item, in request order; a token of the wrong form (too short,
     * not hex, upper case) is that item's not_found, never a 422. */
    items = json_array();
    json_array_append_new(items, item(999999999, ta));
    json_array_append_new(items, item(sa, ta));
    json_array_append_new(items, item(sb, zero));
    json_array_append_new(items, item(sb, "abc"));
    json_array_append_new(items, item(sb, "zz000000000000000000000000000000"));
    json_array_append_new(items, item(sb, "ABCDEF00000000000000000000000000"));
    r = settle(&S, "an.g", "ack", items, NULL);
    assert_int_equal(json_array_size(json_object_get(r, "results")), 6);
    expect_result(r, 0, 999999999, "not_found");
    expect_result(r, 1, sa, "acked");
    expect_result(r, 2, sb, "lease_lost");
    expect_result(r, 3, sb, "not_found");
    expect_result(r, 4, sb, "not_found");
    expect_result(r, 5, sb, "not_found");
    json_decref(r);
    expect_state(&S, "an-a", "an.g", "dispatched", 1);
    expect_state(&S, "an-b", "an.g", "processing", 1); /* the wrong token changed nothing */

    /* extend: a later lease_expires_at. */
    items = json_array();
    json_array_append_new(items, item(sb, tb));
    json_array_append_new(items, item(sc, zero));
    r = settle(&S, "an.g", "extend", items, "{\"lease_ttl_s\":600}");
    expect_result(r, 0, sb, "extended");
    assert_true(is_time(jstr(result(r, 0), "lease_expires_at")));
    assert_true(strcmp(jstr(result(r, 0), "lease_expires_at"), exp1) > 0);
    expect_result(r, 1, sc, "lease_lost");
    json_decref(r);

    /* nack with a delay: retrying with not_before, not claimable now. */
    items = json_array();
    json_array_append_new(items, item(sb, tb));
    r = settle(&S, "an.g", "nack", items, "{\"error\":\"later\",\"retry_after_s\":600}");
    expect_result(r, 0, sb, "retrying");
    assert_true(is_time(jstr(result(r, 0), "not_before")));
    json_decref(r);
    expect_state(&S, "an-b", "an.g", "pending", 1);

    /* nack with retry_after_s 0: claimable at once, attempt 2; the next
     * failure reaches max_attempts 2: dead_lettered. */
    items = json_array();
    json_array_append_new(items, item(sc, tc));
    r = settle(&S, "an.g", "nack", items, "{\"error\":\"boom\",\"retry_after_s\":0}");
    expect_result(r, 0, sc, "retrying");
    assert_true(is_time(jstr(result(r, 0), "not_before")));
    json_decref(r);
    c = claim(&S, "an.g", "{\"max\":10}");
    assert_int_equal(json_array_size(dlvs(c)), 1);
    assert_int_equal(jint(json_array_get(dlvs(c), 0), "seq"), sc);
    assert_int_equal(jint(json_array_get(dlvs(c), 0), "attempt"), 2);
    assert_string_not_equal(jstr(json_array_get(dlvs(c), 0), "lease_token"), tc);
    items = items_of(c);
    json_decref(c);
    r = settle(&S, "an.g", "nack", items, "{\"error\":\"boom again\"}");
    expect_result(r, 0, sc, "dead_lettered");
    json_decref(r);
    expect_state(&S, "an-c", "an.g", "dlq", 2);
    /* A dead-lettered delivery is no one's any more. */
    items = json_array();
    json_array_append_new(items, item(sc, tc));
    r = settle(&S, "an.g", "ack", items, NULL);
    expect_result(r, 0, sc, "lease_lost");
    json_decref(r);

    /* Bodies not of the documented shape (a token that is not a string, a
     * seq that is not an integer, no deliveries); a token string of the
     * wrong form is not one of them (above: not_found). */
    expect_error(&S, "POST", "/v1/groups/an.g/ack",
                 "{\"deliveries\":[{\"seq\":1,\"lease_token\":12}]}", 422, "invalid_request");
    expect_error(&S, "POST", "/v1/groups/an.g/ack",
                 "{\"deliveries\":[{\"seq\":\"1\",\"lease_token\":\"00000000000000000000000000000000\"}]}",
                 422, "invalid_request");
    expect_error(&S, "POST", "/v1/groups/an.g/ack", "{\"deliveries\":[]}", 422, "invalid_request");
    expect_error(&S, "POST", "/v1/groups/an.g/nack",
                 "{\"deliveries\":[{\"seq\":1,\"lease_token\":\"0000000000000000000000000000000000000000\"}],"
                 "\"retry_after_s\":86401}", 422, "invalid_request");
    expect_error(&S, "POST", "/v1/groups/an.g/nack",
                 "{\"deliveries\":[{\"seq\":1,\"lease_token\":\"0000000000000000000000000000000000000000\"}],"
                 "\"dead_letter\":1}", 422, "invalid_request");
    /* A refused request changed nothing: d still processing. */
    expect_state(&S, "an-d", "an.g", "processing", 1);
    /* dead_letter: the DLQ at the first attempt (max_attempts is 2). */
    items = json_array();
    json_array_append_new(items, item(sd, td));
    r = settle(&S, "an.g", "nack", items, "{\"error\":\"refused\",\"dead_letter\":true}");
    expect_result(r, 0, sd, "dead_lettered");
    json_decref(r);
    expect_state(&S, "an-d", "an.g", "dlq", 1);
}

/* ---- 5. Fencing ---- */

struct claimer {
    const struct srv *s;
    const char *group, *body;
    long status;
    char *reply;
    int64_t t_end;
};

static void *claim_thread(void *arg)
{
    struct claimer *c = arg;
    char path[256];
    struct resp r;

    snprintf(path, sizeof path, "/v1/groups/%s/claim", c->group);
    if (http_json(c->s, "POST", path, c->body, &r) == 0) {
        c->status = r.status;
        c->reply = r.body ? strdup(r.body) : NULL;
    }
    c->t_end = mono_ms();
    resp_free(&r);
    http_thread_done();
    return NULL;
}

struct state_wait {
    const struct srv *s;
    const char *id, *group, *state;
};

static int state_is(void *arg)
{
    struct state_wait *w = arg;
    char st[32];
    int at;

    return event_dlv(w->s, w->id, w->group, st, sizeof st, &at) && !strcmp(st, w->state);
}

static void fencing(void **state)
{
    json_t *p, *a, *b, *items, *r;
    json_int_t seq;
    char ta[41], tb[41], exp_b[32], st[32];

    (void)state;
    put_group(&S, "fe.g", "{\"topics\":[\"fe.t\"],\"backoff\":{\"initial_ms\":0,\"max_ms\":0}}");
    p = publish(&S, "{\"event_id\":\"fe-1\",\"topic\":\"fe.t\"}");
    seq = pub_seq(p, 0);
    json_decref(p);
    a = claim(&S, "fe.g", "{\"max\":1,\"lease_ttl_s\":1,\"worker\":\"A\"}");
    assert_int_equal(json_array_size(dlvs(a)), 1);
    assert_int_equal(jint(json_array_get(dlvs(a), 0), "seq"), seq);
    assert_int_equal(jint(json_array_get(dlvs(a), 0), "attempt"), 1);
    snprintf(ta, sizeof ta, "%s", jstr(json_array_get(dlvs(a), 0), "lease_token"));
    json_decref(a);
    /* B long-polls and gets it once A's lease expired. */
    b = claim(&S, "fe.g", "{\"max\":1,\"wait_s\":10,\"lease_ttl_s\":60,\"worker\":\"B\"}");
    assert_int_equal(json_array_size(dlvs(b)), 1);
    assert_int_equal(jint(json_array_get(dlvs(b), 0), "seq"), seq);
    assert_int_equal(jint(json_array_get(dlvs(b), 0), "attempt"), 2);
    snprintf(tb, sizeof tb, "%s", jstr(json_array_get(dlvs(b), 0), "lease_token"));
    snprintf(exp_b, sizeof exp_b, "%s", jstr(json_array_get(dlvs(b), 0), "lease_expires_at"));
    assert_string_not_equal(ta, tb);
    json_decref(b);

    /* Only one holds it: A's ack, nack and extend are lease_lost. */
    items = json_array();
    json_array_append_new(items, item(seq, ta));
    r = settle(&S, "fe.g", "ack", items, NULL);
    expect_result(r, 0, seq, "lease_lost");
    json_decref(r);
    items = json_array();
    json_array_append_new(items, item(seq, ta));
    r = settle(&S, "fe.g", "nack", items, "{\"error\":\"A failed\",\"retry_after_s\":0}");
    expect_result(r, 0, seq, "lease_lost");
    json_decref(r);
    items = json_array();
    json_array_append_new(items, item(seq, ta));
    r = settle(&S, "fe.g", "extend", items, "{\"lease_ttl_s\":600}");
    expect_result(r, 0, seq, "lease_lost");
    json_decref(r);
    /* ... and changed nothing: still B's, same lease, not claimable. */
    {
        json_t *ev = call(&S, "GET", "/v1/events/fe-1", NULL, 200), *d;
        size_t i;
        int seen = 0;
        json_array_foreach(json_object_get(ev, "deliveries"), i, d) {
            if (strcmp(jstr(d, "group"), "fe.g"))
                continue;
            seen++;
            assert_string_equal(jstr(d, "state"), "processing");
            assert_int_equal(jint(d, "attempts"), 2);
            assert_string_equal(jstr(d, "lease_expires_at"), exp_b);
            assert_string_equal(jstr(d, "worker"), "B");
        }
        assert_int_equal(seen, 1);
        json_decref(ev);
    }
    r = claim(&S, "fe.g", "{\"max\":10}");
    assert_int_equal(json_array_size(dlvs(r)), 0);
    json_decref(r);
    ack_one(&S, "fe.g", seq, tb, st, sizeof st);
    assert_string_equal(st, "acked");
    expect_state(&S, "fe-1", "fe.g", "dispatched", 2);

    /* An expired token nobody re-claimed still works. */
    put_group(&S, "fe2.g", "{\"topics\":[\"fe2.t\"],"
                           "\"backoff\":{\"initial_ms\":600000,\"max_ms\":600000}}");
    p = publish(&S, "{\"event_id\":\"fe2-1\",\"topic\":\"fe2.t\"}");
    seq = pub_seq(p, 0);
    json_decref(p);
    a = claim(&S, "fe2.g", "{\"lease_ttl_s\":1}");
    assert_int_equal(json_array_size(dlvs(a)), 1);
    snprintf(ta, sizeof ta, "%s", jstr(json_array_get(dlvs(a), 0), "lease_token"));
    json_decref(a);
    {
        struct state_wait w = {&S, "fe2-1", "fe2.g", "pending"};
        assert_true(await(state_is, &w, 10000));
    }
    expect_state(&S, "fe2-1", "fe2.g", "pending", 1);
    ack_one(&S, "fe2.g", seq, ta, st, sizeof st);
    assert_string_equal(st, "acked");
    expect_state(&S, "fe2-1", "fe2.g", "dispatched", 1);
}

/* ---- 6. DLQ ---- */

static void dlq(void **state)
{
    json_t *p, *c, *r, *page, *d;
    json_int_t seqs[5], seen[5];
    char body[256], path[256], next[64];
    size_t i;
    int n = 0;

    (void)state;
    put_group(&S, "dq.g", "{\"topics\":[\"dq.t\"],\"max_attempts\":1}");
    p = publish(&S, "{\"events\":[{\"event_id\":\"dq-0\",\"topic\":\"dq.t\"},"
                    "{\"event_id\":\"dq-1\",\"topic\":\"dq.t\"},"
                    "{\"event_id\":\"dq-2\",\"topic\":\"dq.t\"},"
                    "{\"event_id\":\"dq-3\",\"topic\":\"dq.t\"},"
                    "{\"event_id\":\"dq-4\",\"topic\":\"dq.t\"},"
                    "{\"event_id\":\"dq-5\",\"topic\":\"dq.t\"}]}");
    for (int k = 0; k < 5; k++)
        seqs[k] = pub_seq(p, (size_t)k);
    json_decref(p);
    c = claim(&S, "dq.g", "{\"max\":6}");
    assert_int_equal(json_array_size(dlvs(c)), 6);
    /* One nack per delivery, each with its own error text. */
    json_array_foreach(dlvs(c), i, d) {
        json_t *items;

        if (i == 5) /* dq-5 stays leased */
            break;
        items = json_array();
        json_array_append_new(items, item(jint(d, "seq"), jstr(d, "lease_token")));
        snprintf(body, sizeof body, "{\"error\":\"boom-%zu\"}", i);
        r = settle(&S, "dq.g", "nack", items, body);
        expect_result(r, 0, seqs[i], "dead_lettered");
        json_decref(r);
    }
    json_decref(c);
    expect_state(&S, "dq-0", "dq.g", "dlq", 1);

    /* Pages of 2: 2, 2, 1. */
    next[0] = 0;
    for (int pg = 0; pg < 3; pg++) {
        if (pg == 0)
            snprintf(path, sizeof path, "/v1/groups/dq.g/dlq?limit=2");
        else
            snprintf(path, sizeof path, "/v1/groups/dq.g/dlq?limit=2&after=%s", next);
        page = call(&S, "GET", path, NULL, 200);
        assert_int_equal(json_array_size(dlvs(page)), pg < 2 ? 2 : 1);
        json_array_foreach(dlvs(page), i, d) {
            json_t *ev = json_object_get(d, "event");
            int k;
            assert_true(n < 5);
            seen[n++] = jint(d, "seq");
            for (k = 0; k < 5 && seqs[k] != jint(d, "seq"); k++)
                ;
            assert_true(k < 5);
            assert_int_equal(jint(ev, "seq"), seqs[k]);
            snprintf(body, sizeof body, "dq-%d", k);
            assert_string_equal(jstr(ev, "event_id"), body);
            assert_int_equal(jint(d, "attempts"), 1);
            snprintf(body, sizeof body, "boom-%d", k);
            assert_string_equal(jstr(d, "last_error"), body);
            assert_true(is_time(jstr(d, "dead_lettered_at")));
        }
        if (pg < 2) {
            json_t *nx = json_object_get(page, "next");
            assert_true(json_is_string(nx));
            snprintf(next, sizeof next, "%s", json_string_value(nx));
        } else {
            assert_true(json_is_null(json_object_get(page, "next")));
        }
        json_decref(page);
    }
    assert_int_equal(n, 5);
    for (int k = 0; k < 5; k++)
        assert_int_equal(seen[k], seqs[k]); /* every one once, in seq order */
    expect_error(&S, "GET", "/v1/groups/dq.g/dlq?limit=0", NULL, 422, "invalid_request");
    expect_error(&S, "GET", "/v1/groups/nope.g/dlq", NULL, 404, "not_found");

    /* Requeue by seqs: requeued, not_in_dlq, not_found, in request order. */
    snprintf(body, sizeof body, "{\"seqs\":[%lld,%lld,999999999]}",
             (long long)seqs[0], (long long)seqs[0]);
    r = call(&S, "POST", "/v1/groups/dq.g/dlq/requeue", body, 200);
    expect_result(r, 0, seqs[0], "requeued");
    expect_result(r, 1, seqs[0], "not_in_dlq");
    expect_result(r, 2, 999999999, "not_found");
    json_decref(r);
    c = claim(&S, "dq.g", "{\"max\":10}");
    assert_int_equal(json_array_size(dlvs(c)), 1);
    assert_int_equal(jint(json_array_get(dlvs(c), 0), "seq"), seqs[0]);
    assert_int_equal(jint(json_array_get(dlvs(c), 0), "attempt"), 1);
    json_decref(settle(&S, "dq.g", "ack", items_of(c), NULL));
    json_decref(c);
    expect_state(&S, "dq-0", "dq.g", "dispatched", 1);

    /* Skip: terminal state skipped; a processing one is not_in_dlq. */
    {
        json_int_t s5;
        p = call(&S, "GET", "/v1/events/dq-5", NULL, 200);
        s5 = jint(json_object_get(p, "event"), "seq");
        json_decref(p);
        snprintf(body, sizeof body, "{\"seqs\":[%lld,%lld]}", (long long)seqs[1], (long long)s5);
        r = call(&S, "POST", "/v1/groups/dq.g/dlq/skip", body, 200);
        expect_result(r, 0, seqs[1], "skipped");
        expect_result(r, 1, s5, "not_in_dlq");
        json_decref(r);
    }
    expect_state(&S, "dq-1", "dq.g", "skipped", 1);
    expect_state(&S, "dq-5", "dq.g", "processing", 1);

    /* All: the three left. */
    r = call(&S, "POST", "/v1/groups/dq.g/dlq/requeue", "{\"all\":true}", 200);
    assert_int_equal(jint(r, "requeued"), 3);
    json_decref(r);
    page = call(&S, "GET", "/v1/groups/dq.g/dlq", NULL, 200);
    assert_int_equal(json_array_size(dlvs(page)), 0);
    assert_true(json_is_null(json_object_get(page, "next")));
    json_decref(page);
    c = claim(&S, "dq.g", "{\"max\":10}");
    assert_int_equal(json_array_size(dlvs(c)), 3);
    json_array_foreach(dlvs(c), i, d) {
        assert_int_equal(jint(d, "seq"), seqs[2 + i]);
        assert_int_equal(jint(d, "attempt"), 1);
    }
    json_decref(c);
    r = call(&S, "POST", "/v1/groups/dq.g/dlq/requeue", "{\"all\":true}", 200);
    assert_int_equal(jint(r, "requeued"), 0);
    json_decref(r);
    expect_error(&S, "POST", "/v1/groups/dq.g/dlq/requeue", "{\"seqs\":[]}", 422, "invalid_request");
    expect_error(&S, "POST", "/v1/groups/dq.g/dlq/skip", "{\"all\":true}", 422, "invalid_request");
}

/* ---- 9. Long-poll ---- */

static void long_poll(void **state)
{
    struct claimer c = {&S, "lp.g", "{\"max\":5,\"wait_s\":10}", 0, NULL, 0};
    pthread_t th;
    json_t *r;
    int64_t t_pub, t0, el;
    int gauge_up, gauge_down;

    (void)state;
    put_group(&S, "lp.g", "{\"topics\":[\"lp.t\"],\"start\":\"new\"}");
    ensure_nudge(&S);
    assert_int_equal(pthread_create(&th, NULL, claim_thread, &c), 0);
    gauge_up = await_parked(&S, 1, 0, 3000, "nudge.g");
    t_pub = mono_ms();
    json_decref(publish(&S, "{\"event_id\":\"lp-1\",\"topic\":\"lp.t\"}"));
    pthread_join(th, NULL);
    assert_int_equal(c.status, 200);
    assert_non_null(c.reply);
    r = json_loads(c.reply, 0, NULL);
    free(c.reply);
    assert_int_equal(json_array_size(dlvs(r)), 1);
    assert_string_equal(jstr(json_object_get(json_array_get(dlvs(r), 0), "event"), "event_id"),
                        "lp-1");
    json_decref(r);
    printf("long-poll: returned %lld ms after the publish\n", (long long)(c.t_end - t_pub));
    assert_true(c.t_end - t_pub < 3000);

    /* Nothing to take: empty after about wait_s. */
    t0 = mono_ms();
    r = claim(&S, "lp.g", "{\"wait_s\":1}");
    el = mono_ms() - t0;
    assert_int_equal(json_array_size(dlvs(r)), 0);
    json_decref(r);
    printf("long-poll: wait_s 1 with nothing to take answered after %lld ms\n", (long long)el);
    assert_true(el >= 900);
    assert_true(el < 5000);
    /* Fractions allowed. */
    t0 = mono_ms();
    r = claim(&S, "lp.g", "{\"wait_s\":0.3}");
    el = mono_ms() - t0;
    assert_int_equal(json_array_size(dlvs(r)), 0);
    json_decref(r);
    assert_true(el >= 250 && el < 3000);
    gauge_down = await_parked(&S, 0, 1, 3000, "nudge.g");
    /* GET /metrics counts a parked long-poll while it waits. */
    assert_true(gauge_up);
    assert_true(gauge_down);
}

/* ---- 11. A waiter that leaves ---- */

static void disconnected_waiter(void **state)
{
    static const char req_body[] = "{\"wait_s\":30,\"worker\":\"gone\"}";
    struct sockaddr_in sa;
    char req[512];
    json_t *r;
    int fd, len, base, gauge_up, gauge_down;

    (void)state;
    put_group(&S, "dc.g", "{\"topics\":[\"dc.t\"],\"start\":\"new\"}");
    ensure_nudge(&S);
    base = metric_parked(&S);
    assert_true(base >= 0);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)S.port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    len = snprintf(req, sizeof req,
                   "POST /v1/groups/dc.g/claim HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                   "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                   S.port, strlen(req_body), req_body);
    assert_int_equal(send(fd, req, (size_t)len, 0), len);
    gauge_up = await_parked(&S, base + 1, 0, 3000, "nudge.g"); /* it is parked */
    close(fd);
    json_decref(publish(&S, "{\"event_id\":\"dc-1\",\"topic\":\"dc.t\"}"));
    r = claim(&S, "dc.g", "{\"max\":10,\"wait_s\":3}");
    assert_int_equal(json_array_size(dlvs(r)), 1);
    assert_string_equal(jstr(json_object_get(json_array_get(dlvs(r), 0), "event"), "event_id"),
                        "dc-1");
    assert_int_equal(jint(json_array_get(dlvs(r), 0), "attempt"), 1);
    json_decref(settle(&S, "dc.g", "ack", items_of(r), NULL));
    json_decref(r);
    gauge_down = await_parked(&S, base, 1, 3000, "nudge.g");
    expect_state(&S, "dc-1", "dc.g", "dispatched", 1);
    assert_true(gauge_up);
    assert_true(gauge_down);
}

/* A waiter that half-closes: HTTP/1.1 lets a client shut its write side
 * down once its request is sent (shutdown(SHUT_WR)) and still read the
 * answer.  Its long-poll waits as any other and the delivery that comes
 * is handed to it, neither answered empty while the event goes to the
 * next claim, nor lost with the connection.  The request is corked, so
 * its last bytes and the FIN travel in one segment: micd reads the
 * request and the end of input together.  A server of its own with one
 * HTTP thread, and an idle keep-alive connection opened before, older in
 * libmicrohttpd's timeout list: then the resumed long-poll is not the
 * one its timeout pass visits, and libmicrohttpd reads it before calling
 * the handler unless micd saw to it (routes.c, submit). */
static int dial_local(int port)
{
    struct sockaddr_in sa;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    assert_true(fd >= 0);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

static void half_closed_waiter(void **state)
{
    static const char *const args[] = {"--http-threads", "1", NULL};
    static const char req_body[] = "{\"wait_s\":30,\"worker\":\"half\"}";
    struct timeval tv = {20, 0};
    struct srv s;
    char req[512], ans[8192], *body;
    json_t *j, *d;
    size_t got = 0;
    ssize_t n;
    int fd, idle, len, one = 1, gauge_up, gauge_down;

    (void)state;
    memset(&s, 0, sizeof s);
    assert_int_equal(srv_start(&s, args), 0);
    put_group(&s, "hc.g", "{\"topics\":[\"hc.t\"],\"start\":\"new\"}");
    ensure_nudge(&s);
    idle = dial_local(s.port); /* one request, then kept open and idle */
    len = snprintf(req, sizeof req, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", s.port);
    assert_int_equal(send(idle, req, (size_t)len, 0), len);
    assert_int_equal(setsockopt(idle, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    assert_true(recv(idle, ans, sizeof ans, 0) > 0);
    fd = dial_local(s.port);
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    assert_int_equal(setsockopt(fd, IPPROTO_TCP, TCP_CORK, &one, sizeof one), 0);
    len = snprintf(req, sizeof req,
                   "POST /v1/groups/hc.g/claim HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                   "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                   s.port, strlen(req_body), req_body);
    assert_int_equal(send(fd, req, (size_t)len, 0), len);
    assert_int_equal(shutdown(fd, SHUT_WR), 0); /* sends the corked request with the FIN */
    gauge_up = await_parked(&s, 1, 0, 3000, "nudge.g"); /* it waits */
    json_decref(publish(&s, "{\"event_id\":\"hc-1\",\"topic\":\"hc.t\"}"));
    /* The answer, then micd closes (the client sends no more requests). */
    while (got < sizeof ans - 1 && (n = recv(fd, ans + got, sizeof ans - 1 - got, 0)) > 0)
        got += (size_t)n;
    ans[got] = 0;
    close(fd);
    if (got == 0)
        fail_msg("the half-closed waiter's connection was closed with no answer");
    assert_memory_equal(ans, "HTTP/1.1 200", 12);
    assert_non_null(body = strstr(ans, "\r\n\r\n"));
    assert_non_null(j = json_loads(body + 4, 0, NULL));
    if (json_array_size(dlvs(j)) != 1)
        fail_msg("the half-closed waiter was answered %s", body + 4);
    d = json_array_get(dlvs(j), 0);
    assert_string_equal(jstr(json_object_get(d, "event"), "event_id"), "hc-1");
    assert_int_equal(jint(d, "attempt"), 1);
    json_decref(settle(&s, "hc.g", "ack", items_of(j), NULL));
    json_decref(j);
    expect_state(&s, "hc-1", "hc.g", "dispatched", 1);
    gauge_down = await_parked(&s, 0, 1, 3000, "nudge.g");
    close(idle);
    assert_true(gauge_up);
    assert_true(gauge_down);
    assert_int_equal(srv_stop(&s), 0);
    srv_cleanup(&s);
}

/* ---- 12. Deleting a group ---- */

static void delete_removes_deliveries(void **state)
{
    struct state_wait w = {&S, "dl-1", "dl.g", "pending"};
    json_t *p, *c, *ev, *d;
    json_int_t seq;
    char tok[41], st[32];
    size_t i;
    int at, seen;

    (void)state;
    put_group(&S, "dl.g", "{\"topics\":[\"dl.t\"]}");
    put_group(&S, "dl2.g", "{\"topics\":[\"dl.*\"]}");
    p = publish(&S, "{\"event_id\":\"dl-1\",\"topic\":\"dl.t\"}");
    seq = pub_seq(p, 0);
    json_decref(p);
    c = claim(&S, "dl.g", "{\"worker\":\"w-dl\"}");
    assert_int_equal(json_array_size(dlvs(c)), 1);
    snprintf(tok, sizeof tok, "%s", jstr(json_array_get(dlvs(c), 0), "lease_token"));
    json_decref(c);
    /* Deliveries per group. */
    ev = call(&S, "GET", "/v1/events/dl-1", NULL, 200);
    seen = 0;
    json_array_foreach(json_object_get(ev, "deliveries"), i, d) {
        if (!strcmp(jstr(d, "group"), "dl.g")) {
            assert_string_equal(jstr(d, "state"), "processing");
            assert_int_equal(jint(d, "attempts"), 1);
            assert_string_equal(jstr(d, "worker"), "w-dl");
            assert_true(is_time(jstr(d, "lease_expires_at")));
            seen |= 1;
        } else if (!strcmp(jstr(d, "group"), "dl2.g")) {
            assert_string_equal(jstr(d, "state"), "pending");
            assert_int_equal(jint(d, "attempts"), 0);
            seen |= 2;
        }
    }
    assert_int_equal(seen, 3);
    assert_int_equal(json_array_size(json_object_get(ev, "deliveries")), 2);
    json_decref(ev);

    json_decref(call(&S, "DELETE", "/v1/groups/dl.g", NULL, 204));
    assert_int_equal(event_dlv(&S, "dl-1", "dl.g", st, sizeof st, &at), 0);
    expect_state(&S, "dl-1", "dl2.g", "pending", 0);
    expect_error(&S, "POST", "/v1/groups/dl.g/claim", NULL, 404, "not_found");

    /* Re-created (start new): the old token is not_found. */
    put_group(&S, "dl.g", "{\"topics\":[\"dl.t\"],\"start\":\"new\"}");
    ack_one(&S, "dl.g", seq, tok, st, sizeof st);
    assert_string_equal(st, "not_found");
    assert_int_equal(event_dlv(&S, "dl-1", "dl.g", st, sizeof st, &at), 0);

    /* Re-created with start all: the event gets a new delivery through the
     * backfill; the old token still names the removed one: not_found. */
    json_decref(call(&S, "DELETE", "/v1/groups/dl.g", NULL, 204));
    put_group(&S, "dl.g", "{\"topics\":[\"dl.t\"]}");
    assert_true(await(state_is, &w, 10000));
    expect_state(&S, "dl-1", "dl.g", "pending", 0);
    ack_one(&S, "dl.g", seq, tok, st, sizeof st);
    assert_string_equal(st, "not_found");
    expect_state(&S, "dl-1", "dl.g", "pending", 0);
}

/* ---- 7. Eight workers, 20,000 events ---- */

#define DRAIN_EVENTS 20000
#define DRAIN_WORKERS 8

struct drain {
    const struct srv *s;
    json_int_t *seqs;       /* the published seqs, ascending */
    atomic_int *got;        /* deliveries received per seq */
    atomic_int received, foreign, not_acked, errors;
    int64_t deadline;
};

static int cmp_seq(const void *a, const void *b)
{
    json_int_t x = *(const json_int_t *)a, y = *(const json_int_t *)b;

    return x < y ? -1 : x > y;
}

static void *drain_worker(void *arg)
{
    struct drain *dr = arg;

    while (mono_ms() < dr->deadline) {
        struct resp r;
        json_t *list, *items, *body, *d;
        size_t i, n;
        char *txt;

        if (http_json(dr->s, "POST", "/v1/groups/dr.g/claim",
                      "{\"max\":32,\"lease_ttl_s\":30,\"wait_s\":0.2}", &r) || r.status != 200) {
            atomic_fetch_add(&dr->errors, 1);
            resp_free(&r);
            break;
        }
        list = json_object_get(r.json, "deliveries");
        n = json_array_size(list);
        if (n == 0) {
            resp_free(&r);
            if (atomic_load(&dr->received) >= DRAIN_EVENTS)
                break;
            continue;
        }
        items = json_array();
        json_array_foreach(list, i, d) {
            json_int_t seq = json_integer_value(json_object_get(d, "seq"));
            json_int_t *hit = bsearch(&seq, dr->seqs, DRAIN_EVENTS, sizeof seq, cmp_seq);
            if (hit)
                atomic_fetch_add(&dr->got[hit - dr->seqs], 1);
            else
                atomic_fetch_add(&dr->foreign, 1);
            atomic_fetch_add(&dr->received, 1);
            json_array_append_new(items, json_pack("{s:I,s:O}", "seq", seq, "lease_token",
                                                   json_object_get(d, "lease_token")));
        }
        body = json_pack("{s:o}", "deliveries", items);
        txt = json_dumps(body, JSON_COMPACT);
        json_decref(body);
        {
            struct resp a;
            if (http_json(dr->s, "POST", "/v1/groups/dr.g/ack", txt, &a) || a.status != 200 ||
                json_array_size(json_object_get(a.json, "results")) != n) {
                atomic_fetch_add(&dr->errors, 1);
            } else {
                json_t *res;
                json_array_foreach(json_object_get(a.json, "results"), i, res)
                    if (strcmp(json_string_value(json_object_get(res, "status")), "acked") ||
                        json_integer_value(json_object_get(res, "seq")) !=
                            json_integer_value(json_object_get(json_array_get(list, i), "seq")))
                        atomic_fetch_add(&dr->not_acked, 1);
            }
            resp_free(&a);
        }
        free(txt);
        resp_free(&r);
    }
    http_thread_done();
    return NULL;
}

static void eight_workers_drain(void **state)
{
    struct drain dr;
    pthread_t th[DRAIN_WORKERS];
    char *body = malloc(600 * 1000);
    int64_t t0;
    int once = 0;

    (void)state;
    memset(&dr, 0, sizeof dr);
    dr.s = &S;
    dr.seqs = calloc(DRAIN_EVENTS, sizeof *dr.seqs);
    dr.got = calloc(DRAIN_EVENTS, sizeof *dr.got);
    put_group(&S, "dr.g", "{\"topics\":[\"dr.t\"],\"start\":\"new\"}");
    for (int b = 0; b < DRAIN_EVENTS / 500; b++) {
        char *p = body + sprintf(body, "{\"events\":[");
        json_t *r;
        for (int i = 0; i < 500; i++)
            p += sprintf(p, "%s{\"event_id\":\"dr-%d\",\"topic\":\"dr.t\"}", i ? "," : "",
                         b * 500 + i);
        strcpy(p, "]}");
        r = publish(&S, body);
        assert_int_equal(json_array_size(json_object_get(r, "results")), 500);
        for (int i = 0; i < 500; i++)
            dr.seqs[b * 500 + i] = pub_seq(r, (size_t)i);
        json_decref(r);
    }
    free(body);
    qsort(dr.seqs, DRAIN_EVENTS, sizeof *dr.seqs, cmp_seq);
    for (int i = 1; i < DRAIN_EVENTS; i++)
        assert_true(dr.seqs[i] > dr.seqs[i - 1]);
    t0 = mono_ms();
    dr.deadline = t0 + 45000;
    for (int i = 0; i < DRAIN_WORKERS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, drain_worker, &dr), 0);
    for (int i = 0; i < DRAIN_WORKERS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < DRAIN_EVENTS; i++)
        once += atomic_load(&dr.got[i]) == 1;
    printf("drain: %d workers received %d deliveries of %d events in %lld ms; "
           "%d seqs exactly once, %d foreign, %d not acked, %d errors\n",
           DRAIN_WORKERS, atomic_load(&dr.received), DRAIN_EVENTS,
           (long long)(mono_ms() - t0), once, atomic_load(&dr.foreign),
           atomic_load(&dr.not_acked), atomic_load(&dr.errors));
    assert_int_equal(atomic_load(&dr.errors), 0);
    assert_int_equal(atomic_load(&dr.foreign), 0);
    assert_int_equal(atomic_load(&dr.not_acked), 0);
    assert_int_equal(once, DRAIN_EVENTS); /* none twice, none missed */
    assert_int_equal(atomic_load(&dr.received), DRAIN_EVENTS);
    free(dr.seqs);
    free(dr.got);
    expect_state(&S, "dr-0", "dr.g", "dispatched", 1);
    expect_state(&S, "dr-19999", "dr.g", "dispatched", 1);
    {
        json_t *r = claim(&S, "dr.g", "{\"max\":1000}");
        assert_int_equal(json_array_size(dlvs(r)), 0);
        json_decref(r);
    }
}

/* ---- 8. kill -9 with leases outstanding ---- */

#define K9 100

static int k9_index(const json_int_t *seqs, json_int_t seq)
{
    for (int i = 0; i < K9; i++)
        if (seqs[i] == seq)
            return i;
    return -1;
}

static void kill9_with_leases(void **state)
{
    struct srv s;
    json_t *p, *c, *d, *items, *r;
    json_int_t seqs[K9];
    char tok[K9][41], old_short[41], body[8192], st[32];
    int kind[K9];   /* 0 never claimed, 1 short lease, 2 long lease */
    int acks[K9], attempt2 = 0, at;
    json_int_t short_seq;
    int64_t end;
    size_t i;
    char *q;

    (void)state;
    memset(&s, 0, sizeof s);
    memset(kind, 0, sizeof kind);
    memset(acks, 0, sizeof acks);
    assert_int_equal(srv_start(&s, NULL), 0);
    put_group(&s, "k9.g", "{\"topics\":[\"k9.t\"],\"backoff\":{\"initial_ms\":0,\"max_ms\":0}}");
    q = body + sprintf(body, "{\"events\":[");
    for (int k = 0; k < K9; k++)
        q += sprintf(q, "%s{\"event_id\":\"k9-%d\",\"topic\":\"k9.t\"}", k ? "," : "", k);
    strcpy(q, "]}");
    p = publish(&s, body);
    for (int k = 0; k < K9; k++)
        seqs[k] = pub_seq(p, (size_t)k);
    json_decref(p);

    c = claim(&s, "k9.g", "{\"max\":50,\"lease_ttl_s\":2}");
    assert_int_equal(json_array_size(dlvs(c)), 50);
    json_array_foreach(dlvs(c), i, d) {
        int k = k9_index(seqs, jint(d, "seq"));
        assert_true(k >= 0 && kind[k] == 0);
        kind[k] = 1;
    }
    short_seq = jint(json_array_get(dlvs(c), 0), "seq");
    snprintf(old_short, sizeof old_short, "%s", jstr(json_array_get(dlvs(c), 0), "lease_token"));
    json_decref(c);
    c = claim(&s, "k9.g", "{\"max\":10,\"lease_ttl_s\":60}");
    assert_int_equal(json_array_size(dlvs(c)), 10);
    json_array_foreach(dlvs(c), i, d) {
        int k = k9_index(seqs, jint(d, "seq"));
        assert_true(k >= 0 && kind[k] == 0);
        kind[k] = 2;
        snprintf(tok[k], sizeof tok[k], "%s", jstr(d, "lease_token"));
    }
    json_decref(c);

    srv_kill9(&s);
    assert_int_equal(srv_start(&s, NULL), 0); /* same s.dir */

    /* The long leases are still honoured. */
    items = json_array();
    for (int k = 0; k < K9; k++)
        if (kind[k] == 2)
            json_array_append_new(items, item(seqs[k], tok[k]));
    r = settle(&s, "k9.g", "ack", items, NULL);
    assert_int_equal(json_array_size(json_object_get(r, "results")), 10);
    json_array_foreach(json_object_get(r, "results"), i, d) {
        int k = k9_index(seqs, jint(d, "seq"));
        assert_true(k >= 0 && kind[k] == 2);
        assert_string_equal(jstr(d, "status"), "acked");
        acks[k]++;
    }
    json_decref(r);

    /* The 40 never claimed come at once (and any short lease that already
     * expired, as attempt 2). */
    c = claim(&s, "k9.g", "{\"max\":100,\"lease_ttl_s\":60}");
    {
        int fresh = 0;
        json_array_foreach(dlvs(c), i, d) {
            int k = k9_index(seqs, jint(d, "seq"));
            assert_true(k >= 0);
            assert_true(kind[k] == 0 || kind[k] == 1);
            assert_int_equal(jint(d, "attempt"), kind[k] == 0 ? 1 : 2);
            if (kind[k] == 1) {
                kind[k] = 3; /* redelivered */
                attempt2++;
            } else {
                kind[k] = 4; /* claimed after the restart */
                fresh++;
            }
            snprintf(tok[k], sizeof tok[k], "%s", jstr(d, "lease_token"));
        }
        assert_int_equal(fresh, 40);
    }
    json_decref(c);
    /* The short leases expire: redelivered with attempt 2. */
    end = mono_ms() + 20000;
    while (attempt2 < 50 && mono_ms() < end) {
        c = claim(&s, "k9.g", "{\"max\":100,\"lease_ttl_s\":60,\"wait_s\":5}");
        json_array_foreach(dlvs(c), i, d) {
            int k = k9_index(seqs, jint(d, "seq"));
            assert_true(k >= 0 && kind[k] == 1);
            assert_int_equal(jint(d, "attempt"), 2);
            kind[k] = 3;
            attempt2++;
            snprintf(tok[k], sizeof tok[k], "%s", jstr(d, "lease_token"));
        }
        json_decref(c);
    }
    assert_int_equal(attempt2, 50);
    /* The first holder of a redelivered one is fenced off. */
    ack_one(&s, "k9.g", short_seq, old_short, st, sizeof st);
    assert_string_equal(st, "lease_lost");

    items = json_array();
    for (int k = 0; k < K9; k++)
        if (kind[k] == 3 || kind[k] == 4)
            json_array_append_new(items, item(seqs[k], tok[k]));
    assert_int_equal(json_array_size(items), 90);
    r = settle(&s, "k9.g", "ack", items, NULL);
    json_array_foreach(json_object_get(r, "results"), i, d) {
        int k = k9_index(seqs, jint(d, "seq"));
        assert_true(k >= 0);
        assert_string_equal(jstr(d, "status"), "acked");
        acks[k]++;
    }
    json_decref(r);
    for (int k = 0; k < K9; k++) {
        char id[32];
        assert_int_equal(acks[k], 1);
        snprintf(id, sizeof id, "k9-%d", k);
        assert_int_equal(event_dlv(&s, id, "k9.g", st, sizeof st, &at), 1);
        assert_string_equal(st, "dispatched");
        assert_int_equal(at, kind[k] == 3 ? 2 : 1);
    }
    c = claim(&s, "k9.g", "{\"max\":100}");
    assert_int_equal(json_array_size(dlvs(c)), 0);
    json_decref(c);
    printf("kill -9: 10 long leases honoured, 40 fresh, 50 redelivered with attempt 2, "
           "100 of 100 acked once, 0 lost\n");
    assert_int_equal(srv_stop(&s), 0);
    srv_cleanup(&s);
}

/* ---- 10. 1000 parked long-polls, no thread each ---- */

#define PARK 1000

/* The client side: one thread per long-poll, each a claim_thread through
 * the harness's per-thread libmic handle.  (What the test holds to one
 * thread count is micd's, not the client's.) */
struct parker {
    struct claimer c;
    atomic_int *finished;
};

static void *park_thread(void *arg)
{
    struct parker *p = arg;

    claim_thread(&p->c);
    atomic_fetch_add(p->finished, 1);
    return NULL;
}

static int count_tasks(pid_t pid)
{
    char path[64];
    struct dirent *e;
    DIR *d;
    int n = 0;

    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    if (!(d = opendir(path)))
        return -1;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

struct park_wait {
    const struct srv *s;
    atomic_int finished;
    int64_t next_check;
};

static int all_parked(void *arg)
{
    struct park_wait *w = arg;

    if (mono_ms() < w->next_check)
        return 0;
    w->next_check = mono_ms() + 100;
    return metric_parked(w->s) == PARK;
}

static int all_answered(void *arg)
{
    struct park_wait *w = arg;

    return atomic_load(&w->finished) == PARK;
}

static void thousand_parked(void **state)
{
    static const char *const args[] = {"--per-ip-connections", "2000",
                                       "--max-connections", "2000", NULL};
    static const char claim_body[] = "{\"wait_s\":30}";
    struct parker *pk = calloc(PARK, sizeof *pk);
    pthread_t *th = calloc(PARK, sizeof *th);
    struct park_wait w;
    struct rlimit rl;
    struct srv s;
    char *body = malloc(64 * 1024);
    json_int_t *seen = calloc(PARK, sizeof *seen);
    json_int_t pub[PARK];
    int tasks0, tasks1, dups = 0, gauge_ok, answered;

    (void)state;
    assert_non_null(pk);
    assert_non_null(th);
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 4096) {
        rl.rlim_cur = rl.rlim_max < 4096 ? rl.rlim_max : 4096;
        setrlimit(RLIMIT_NOFILE, &rl); /* for us and the micd we start */
    }
    memset(&s, 0, sizeof s);
    assert_int_equal(srv_start(&s, args), 0);
    put_group(&s, "pk.g", "{\"topics\":[\"pk.t\"],\"start\":\"new\"}");
    ensure_nudge(&s);
    tasks0 = count_tasks(s.pid);
    assert_true(tasks0 > 0);

    memset(&w, 0, sizeof w);
    w.s = &s;
    atomic_init(&w.finished, 0);
    for (int i = 0; i < PARK; i++) {
        pk[i].c.s = &s;
        pk[i].c.group = "pk.g";
        pk[i].c.body = claim_body;
        pk[i].finished = &w.finished;
        assert_int_equal(pthread_create(&th[i], NULL, park_thread, &pk[i]), 0);
    }
    gauge_ok = await(all_parked, &w, 10000);
    if (!gauge_ok) {
        fprintf(stderr, "mic_writer_parked shows %d, want %d; forcing one writer batch\n",
                metric_parked(&s), PARK);
        json_decref(call(&s, "POST", "/v1/groups/nudge.g/claim", NULL, 200));
        w.next_check = 0;
        assert_true(await(all_parked, &w, 20000));
        fprintf(stderr, "mic_writer_parked now shows %d\n", metric_parked(&s));
    }
    assert_int_equal(atomic_load(&w.finished), 0);
    tasks1 = count_tasks(s.pid);
    printf("parked: %d long-polls parked; micd threads before %d, with them %d\n",
           PARK, tasks0, tasks1);
    assert_int_equal(tasks1, tasks0);

    for (int b = 0; b < 2; b++) {
        char *p = body + sprintf(body, "{\"events\":[");
        json_t *r;
        for (int i = 0; i < 500; i++)
            p += sprintf(p, "%s{\"event_id\":\"pk-%d\",\"topic\":\"pk.t\"}", i ? "," : "",
                         b * 500 + i);
        strcpy(p, "]}");
        r = publish(&s, body);
        for (int i = 0; i < 500; i++)
            pub[b * 500 + i] = pub_seq(r, (size_t)i);
        json_decref(r);
    }
    answered = await(all_answered, &w, 30000);
    for (int i = 0; i < PARK; i++) /* each ends by the harness's request timeout */
        pthread_join(th[i], NULL);
    assert_true(answered);
    for (int i = 0; i < PARK; i++) {
        struct claimer *c = &pk[i].c;
        json_t *j;
        json_int_t seq;
        int k;

        assert_int_equal(c->status, 200);
        j = json_loads(c->reply ? c->reply : "", 0, NULL);
        assert_non_null(j);
        assert_int_equal(json_array_size(dlvs(j)), 1);
        seq = jint(json_array_get(dlvs(j), 0), "seq");
        json_decref(j);
        for (k = 0; k < PARK && pub[k] != seq; k++)
            ;
        assert_true(k < PARK);
        dups += seen[k] != 0;
        seen[k] = seq;
    }
    assert_int_equal(dups, 0);
    for (int k = 0; k < PARK; k++)
        assert_int_equal(seen[k], pub[k]);
    printf("parked: %d requests answered, each with exactly one delivery, no seq twice\n", PARK);
    for (int i = 0; i < PARK; i++)
        free(pk[i].c.reply);
    free(pk);
    free(th);
    free(seen);
    free(body);
    {
        int down = await_parked(&s, 0, 1, 3000, "nudge.g");
        assert_int_equal(srv_stop(&s), 0);
        srv_cleanup(&s);
        /* GET /metrics counted the 1000 parked long-polls by itself. */
        assert_true(gauge_ok);
        assert_true(down);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(group_crud),
        cmocka_unit_test(start_semantics),
        cmocka_unit_test(claim_order_and_bounds),
        cmocka_unit_test(ack_nack_extend),
        cmocka_unit_test(fencing),
        cmocka_unit_test(dlq),
        cmocka_unit_test(long_poll),
        cmocka_unit_test(disconnected_waiter),
        cmocka_unit_test(half_closed_waiter),
        cmocka_unit_test(delete_removes_deliveries),
        cmocka_unit_test(eight_workers_drain),
        cmocka_unit_test(kill9_with_leases),
        cmocka_unit_test(thousand_parked),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
