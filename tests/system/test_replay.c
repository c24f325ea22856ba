/* test_replay.c - time-range reads and replay runs against a real micd:
 * inclusive bounds, ties on created_at ordered by event_id, cursor pages,
 * the NDJSON stream, and replay runs (selection fixed once, digest as
 * DESIGN section 12 defines it, replay metadata, effect runs refused,
 * aggregate order, (created_at, event_id) order across aggregates, live
 * state untouched, drained state, delete). */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/buf.h"
#include "harness.h"
#include "claimkit.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct srv S;

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

/* The event_ids of a page, joined by spaces, into 'out'. */
static void ids(json_t *page, char *out, size_t n)
{
    size_t i, used = 0;
    json_t *e;

    out[0] = 0;
    json_array_foreach(json_object_get(page, "events"), i, e)
        used += (size_t)snprintf(out + used, n - used, "%s%s", i ? " " : "",
                                 json_string_value(json_object_get(e, "event_id")));
}

static void publish_set(void)
{
    /* Ties on created_at in non-sorted arrival order; one before, one after. */
    json_decref(call(&S, "POST", "/v1/events",
                     "{\"events\":["
                     "{\"event_id\":\"t-c\",\"topic\":\"rr\",\"created_at\":\"2026-03-01T10:00:00Z\"},"
                     "{\"event_id\":\"t-a\",\"topic\":\"rr\",\"created_at\":\"2026-03-01T10:00:00Z\"},"
                     "{\"event_id\":\"t-b\",\"topic\":\"rr\",\"created_at\":\"2026-03-01T10:00:00Z\"},"
                     "{\"event_id\":\"t-0\",\"topic\":\"rr\",\"created_at\":\"2026-03-01T09:59:59.999999Z\"},"
                     "{\"event_id\":\"t-z\",\"topic\":\"rr\",\"created_at\":\"2026-03-01T11:00:00Z\"},"
                     "{\"event_id\":\"t-y\",\"topic\":\"rr\",\"created_at\":\"2026-03-01T11:00:00.000001Z\"},"
                     "{\"event_id\":\"t-m\",\"topic\":\"rr\",\"created_at\":\"2026-03-01T10:30:00Z\"}]}",
                     201));
}

static void range_bounds_and_ties(void **state)
{
    json_t *p;
    char got[256];

    (void)state;
    publish_set();
    p = call(&S, "GET", "/v1/topics/rr/events?from=2026-03-01T10:00:00Z&to=2026-03-01T11:00:00Z", NULL, 200);
    ids(p, got, sizeof got);
    assert_string_equal(got, "t-a t-b t-c t-m t-z"); /* both ends inclusive, ties by id */
    assert_true(json_is_null(json_object_get(p, "next")));
    json_decref(p);
    p = call(&S, "GET", "/v1/topics/rr/events", NULL, 200);
    ids(p, got, sizeof got);
    assert_string_equal(got, "t-0 t-a t-b t-c t-m t-z t-y");
    json_decref(p);
}

static void range_pages(void **state)
{
    char path[256], got[512] = "", part[256];
    json_t *p;
    int pages = 0;

    (void)state;
    snprintf(path, sizeof path, "/v1/topics/rr/events?limit=2");
    for (;;) {
        json_t *next;
        p = call(&S, "GET", path, NULL, 200);
        ids(p, part, sizeof part);
        strcat(got, got[0] ? " " : "");
        strcat(got, part);
        pages++;
        next = json_object_get(p, "next");
        if (json_is_null(next)) {
            json_decref(p);
            break;
        }
        snprintf(path, sizeof path, "/v1/topics/rr/events?limit=2&after=%s", json_string_value(next));
        json_decref(p);
        assert_true(pages < 10);
    }
    assert_int_equal(pages, 4);
    assert_string_equal(got, "t-0 t-a t-b t-c t-m t-z t-y");
    json_decref(call(&S, "GET", "/v1/topics/rr/events?limit=0", NULL, 422));
    json_decref(call(&S, "GET", "/v1/topics/rr/events?limit=1001", NULL, 422));
    json_decref(call(&S, "GET", "/v1/topics/rr/events?from=yesterday", NULL, 422));
    json_decref(call(&S, "GET", "/v1/topics/rr/events?after=garbage", NULL, 422));
    json_decref(call(&S, "GET", "/v1/topics/nope/events", NULL, 404));
}

static void range_ndjson(void **state)
{
    struct resp r;
    char *line, *save = NULL;
    int n = 0;
    const char *want[] = {"t-a", "t-b", "t-c", "t-m", "t-z"};

    (void)state;
    assert_int_equal(http(&S, "GET", "/v1/topics/rr/events?from=2026-03-01T10:00:00Z&to=2026-03-01T11:00:00Z",
                          NULL, NULL, 0, "Accept: application/x-ndjson", &r), 0);
    assert_int_equal(r.status, 200);
    assert_null(r.json); /* several JSON documents, not one */
    for (line = strtok_r(r.body, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        json_t *e = json_loads(line, 0, NULL);
        assert_non_null(e);
        assert_true(n < 5);
        assert_string_equal(json_string_value(json_object_get(e, "event_id")), want[n]);
        json_decref(e);
        n++;
    }
    assert_int_equal(n, 5);
    resp_free(&r);
}

/* Events larger than the HTTP library's 256 KiB buffer go out piecewise,
 * between small ones, and every line arrives whole and in order. */
static void range_ndjson_large(void **state)
{
    const size_t pad = 600 * 1024;
    const char *want[] = {"big-1", "big-2", "big-3", "big-4"};
    struct mic_buf b;
    struct resp r;
    char *line, *save = NULL;
    int n = 0;

    (void)state;
    mic_buf_init(&b);
    mic_buf_puts(&b, "{\"events\":[");
    for (int i = 0; i < 4; i++) {
        mic_buf_printf(&b, "%s{\"event_id\":\"%s\",\"topic\":\"big\","
                           "\"created_at\":\"2026-03-02T10:00:0%dZ\",\"payload\":{\"pad\":\"",
                       i ? "," : "", want[i], i);
        for (size_t k = 0; i % 2 == 0 && k < pad; k++)   /* big-1 and big-3 are large */
            mic_buf_add(&b, "x", 1);
        mic_buf_puts(&b, "\"}}");
    }
    mic_buf_puts(&b, "]}");
    assert_false(b.oom);
    json_decref(call(&S, "POST", "/v1/events", b.p, 201));
    mic_buf_fini(&b);
    assert_int_equal(http(&S, "GET", "/v1/topics/big/events?from=2026-03-02T00:00:00Z",
                          NULL, NULL, 0, "Accept: application/x-ndjson", &r), 0);
    assert_int_equal(r.status, 200);
    for (line = strtok_r(r.body, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        json_t *e = json_loads(line, 0, NULL);
        const char *p;

        assert_non_null(e);
        assert_true(n < 4);
        assert_string_equal(json_string_value(json_object_get(e, "event_id")), want[n]);
        p = json_string_value(json_object_get(json_object_get(e, "payload"), "pad"));
        assert_non_null(p);
        assert_int_equal(strlen(p), n % 2 == 0 ? pad : 0);
        json_decref(e);
        n++;
    }
    assert_int_equal(n, 4);
    resp_free(&r);
}

static void digest_of(const char *lines, char out[65])
{
    unsigned char md[32];

    EVP_Digest(lines, strlen(lines), md, NULL, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++)
        sprintf(out + 2 * i, "%02x", md[i]);
}

static void replay_run(void **state)
{
    json_t *run, *st, *c;
    char digest[65];
    size_t i;
    json_t *d;
    int n = 0, waited = 0;

    (void)state;
    /* A live group on the same topic: the run must not touch it. */
    json_decref(call(&S, "PUT", "/v1/groups/rr.live", "{\"topics\":[\"rr\"]}", 201));
    run = call(&S, "POST", "/v1/replays",
               "{\"topic\":\"rr\",\"from\":\"2026-03-01T10:00:00Z\",\"to\":\"2026-03-01T11:00:00Z\","
               "\"run_id\":\"rr-1\",\"target_projection_version\":\"v7\"}", 201);
    assert_string_equal(json_string_value(json_object_get(run, "group")), "replay.rr-1");
    assert_int_equal(json_integer_value(json_object_get(run, "selected")), 5);
    digest_of("2026-03-01T10:00:00.000000Z\tt-a\n2026-03-01T10:00:00.000000Z\tt-b\n"
              "2026-03-01T10:00:00.000000Z\tt-c\n2026-03-01T10:30:00.000000Z\tt-m\n"
              "2026-03-01T11:00:00.000000Z\tt-z\n", digest);
    assert_string_equal(json_string_value(json_object_get(run, "digest")), digest);
    json_decref(run);
    /* Published after the selection: not part of the run. */
    json_decref(call(&S, "POST", "/v1/events",
                     "{\"event_id\":\"t-late\",\"topic\":\"rr\",\"created_at\":\"2026-03-01T10:10:00Z\"}", 201));
    json_decref(call(&S, "POST", "/v1/replays", "{\"topic\":\"rr\",\"run_id\":\"rr-1\"}", 409));
    json_decref(call(&S, "POST", "/v1/replays", "{\"topic\":\"rr\",\"kind\":\"effect\"}", 422));
    json_decref(call(&S, "POST", "/v1/replays", "{\"topic\":\"nope\"}", 404));
    json_decref(call(&S, "POST", "/v1/replays", "{\"topic\":\"rr\",\"run_id\":\"bad id\"}", 422));
    /* Drain it; every delivery carries the replay metadata. */
    while (n < 5 && waited < 20) {
        c = call(&S, "POST", "/v1/groups/replay.rr-1/claim", "{\"max\":10,\"wait_s\":1}", 200);
        json_array_foreach(json_object_get(c, "deliveries"), i, d) {
            json_t *rp = json_object_get(d, "replay"), *items = json_array(), *it = json_object();
            char *body;
            assert_string_equal(json_string_value(json_object_get(rp, "batch_id")), "rr-1");
            assert_string_equal(json_string_value(json_object_get(rp, "effects")), "forbid");
            assert_string_equal(json_string_value(json_object_get(rp, "target_projection_version")), "v7");
            assert_string_equal(json_string_value(json_object_get(rp, "original_event_id")),
                                json_string_value(json_object_get(json_object_get(d, "event"), "event_id")));
            assert_string_not_equal(json_string_value(json_object_get(json_object_get(d, "event"), "event_id")),
                                    "t-late");
            json_object_set(it, "seq", json_object_get(d, "seq"));
            json_object_set(it, "lease_token", json_object_get(d, "lease_token"));
            json_array_append_new(items, it);
            {
                json_t *b = json_object();
                json_object_set_new(b, "deliveries", items);
                body = json_dumps(b, JSON_COMPACT);
                json_decref(b);
            }
            json_decref(call(&S, "POST", "/v1/groups/replay.rr-1/ack", body, 200));
            free(body);
            n++;
        }
        json_decref(c);
        waited++;
    }
    assert_int_equal(n, 5);
    st = call(&S, "GET", "/v1/replays/rr-1", NULL, 200);
    assert_int_equal(json_integer_value(json_object_get(st, "selected")), 5);
    assert_int_equal(json_integer_value(json_object_get(st, "dispatched")), 5);
    assert_int_equal(json_integer_value(json_object_get(st, "pending")), 0);
    assert_string_equal(json_string_value(json_object_get(st, "state")), "drained");
    assert_string_equal(json_string_value(json_object_get(st, "digest")), digest);
    assert_string_equal(json_string_value(json_object_get(st, "kind")), "projection");
    json_decref(st);
    /* The live group still has all 8 events pending: untouched. */
    c = call(&S, "POST", "/v1/groups/rr.live/claim", "{\"max\":100}", 200);
    assert_int_equal(json_array_size(json_object_get(c, "deliveries")), 8);
    json_decref(c);
    /* The run's group is listed with its run; it cannot be changed as a group. */
    st = call(&S, "GET", "/v1/groups/replay.rr-1", NULL, 200);
    assert_string_equal(json_string_value(json_object_get(st, "replay_run")), "rr-1");
    json_decref(st);
    json_decref(call(&S, "PUT", "/v1/groups/replay.rr-2", "{\"topics\":[\"rr\"]}", 422));
    json_decref(call(&S, "DELETE", "/v1/replays/rr-1", NULL, 204));
    json_decref(call(&S, "GET", "/v1/replays/rr-1", NULL, 404));
    json_decref(call(&S, "GET", "/v1/groups/replay.rr-1", NULL, 404));
}

static void replay_keeps_aggregate_order(void **state)
{
    json_t *c;

    (void)state;
    json_decref(call(&S, "POST", "/v1/events",
                     "{\"events\":["
                     "{\"event_id\":\"o-2\",\"topic\":\"ro\",\"aggregate_type\":\"a\",\"aggregate_id\":\"1\",\"aggregate_version\":1},"
                     "{\"event_id\":\"o-1\",\"topic\":\"ro\",\"aggregate_type\":\"a\",\"aggregate_id\":\"1\",\"aggregate_version\":2}]}",
                     201));
    json_decref(call(&S, "POST", "/v1/replays", "{\"topic\":\"ro\",\"run_id\":\"ro-1\",\"kind\":\"effect\",\"effects\":\"allow\"}", 201));
    c = call(&S, "POST", "/v1/groups/replay.ro-1/claim", "{\"max\":10,\"wait_s\":5}", 200);
    /* One at a time: version 1 first, though it sorts after by event_id. */
    assert_int_equal(json_array_size(json_object_get(c, "deliveries")), 1);
    assert_string_equal(json_string_value(json_object_get(json_object_get(
                            json_array_get(json_object_get(c, "deliveries"), 0), "event"), "event_id")), "o-2");
    assert_string_equal(json_string_value(json_object_get(json_object_get(
                            json_array_get(json_object_get(c, "deliveries"), 0), "replay"), "effects")), "allow");
    json_decref(c);
}

/* A run goes out in (created_at, event_id) order across aggregates and
 * without priority, whatever the arrival (seq) order and the events'
 * priorities: published newest first, with the newest at a high priority,
 * the run hands them out oldest first. */
static void replay_order_across_aggregates(void **state)
{
    static const char *const want[] = {"x-1", "x-2", "x-3", "x-4", "x-5"};
    json_t *c;
    size_t i;
    json_t *d;

    (void)state;
    json_decref(call(&S, "POST", "/v1/events",
                     "{\"events\":["
                     "{\"event_id\":\"x-5\",\"topic\":\"rx\",\"priority\":9,\"aggregate_type\":\"rxa\",\"aggregate_id\":\"5\",\"created_at\":\"2026-03-02T10:00:05Z\"},"
                     "{\"event_id\":\"x-4\",\"topic\":\"rx\",\"aggregate_type\":\"rxa\",\"aggregate_id\":\"4\",\"created_at\":\"2026-03-02T10:00:04Z\"},"
                     "{\"event_id\":\"x-3\",\"topic\":\"rx\",\"created_at\":\"2026-03-02T10:00:03Z\"},"
                     "{\"event_id\":\"x-2\",\"topic\":\"rx\",\"priority\":5,\"aggregate_type\":\"rxa\",\"aggregate_id\":\"2\",\"created_at\":\"2026-03-02T10:00:02Z\"},"
                     "{\"event_id\":\"x-1\",\"topic\":\"rx\",\"aggregate_type\":\"rxa\",\"aggregate_id\":\"1\",\"created_at\":\"2026-03-02T10:00:01Z\"}]}",
                     201));
    json_decref(call(&S, "POST", "/v1/replays", "{\"topic\":\"rx\",\"run_id\":\"rx-1\"}", 201));
    c = call(&S, "POST", "/v1/groups/replay.rx-1/claim", "{\"max\":10,\"wait_s\":5}", 200);
    assert_int_equal(json_array_size(json_object_get(c, "deliveries")), 5);
    json_array_foreach(json_object_get(c, "deliveries"), i, d)
        assert_string_equal(json_string_value(json_object_get(json_object_get(d, "event"), "event_id")),
                            want[i]);
    json_decref(c);
}

/* A run is handed out only once all of it can go in order.  2100 events
 * of as many aggregates, published newest first (so the aggregates'
 * ordinals, the order the release of heads walks, run against the run's
 * order), and one event without an aggregate, the newest of all: it is
 * ready the moment it is added, before any aggregate's head is released.
 * A claim waiting from the start must still get the oldest event first.
 * Before the fix, a claim that came between the fill and the end of the
 * release got the event without an aggregate, or the oldest of the first
 * 2000 heads released; --writer-delay-ms spreads the run's batches so the
 * claim lands in that window. */
static void replay_held_until_all_released(void **state)
{
    static const char *const args[] = {"--writer-delay-ms", "30", NULL};
    struct srv s2;
    struct resp r;
    char *body = malloc(200 * 1000 + 64), when[32];
    json_t *c, *d;
    int n;

    (void)state;
    assert_non_null(body);
    memset(&s2, 0, sizeof s2);
    assert_int_equal(srv_start(&s2, args), 0);
    for (int k = 0; k < 3; k++) {
        n = sprintf(body, "{\"events\":[");
        for (int i = k * 700; i < (k + 1) * 700; i++) {
            /* event i: created 2100 - i seconds after 10:00 */
            snprintf(when, sizeof when, "2026-03-03T%02d:%02d:%02dZ", 10 + (2100 - i) / 3600,
                     (2100 - i) / 60 % 60, (2100 - i) % 60);
            n += sprintf(body + n, "%s{\"event_id\":\"h-%d\",\"topic\":\"rh\",\"aggregate_type\":\"rh\","
                         "\"aggregate_id\":\"%d\",\"created_at\":\"%s\"}", i % 700 ? "," : "", i, i, when);
        }
        sprintf(body + n, "]}");
        json_decref(call(&s2, "POST", "/v1/events", body, 201));
    }
    json_decref(call(&s2, "POST", "/v1/events",
                     "{\"event_id\":\"h-free\",\"topic\":\"rh\",\"created_at\":\"2026-03-03T12:00:00Z\"}", 201));
    json_decref(call(&s2, "POST", "/v1/replays", "{\"topic\":\"rh\",\"run_id\":\"rh-1\"}", 201));
    c = call(&s2, "POST", "/v1/groups/replay.rh-1/claim", "{\"max\":3,\"wait_s\":30}", 200);
    assert_int_equal(json_array_size(json_object_get(c, "deliveries")), 3);
    for (int i = 0; i < 3; i++) {
        char want[16];

        d = json_array_get(json_object_get(c, "deliveries"), (size_t)i);
        snprintf(want, sizeof want, "h-%d", 2099 - i);   /* the oldest three */
        assert_string_equal(json_string_value(json_object_get(json_object_get(d, "event"), "event_id")),
                            want);
    }
    json_decref(c);
    assert_int_equal(http_json(&s2, "GET", "/v1/replays/rh-1", NULL, &r), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(json_integer_value(json_object_get(r.json, "selected")), 2101);
    resp_free(&r);
    free(body);
    assert_int_equal(srv_stop(&s2), 0);
    srv_cleanup(&s2);
}

/* GET /v1/replays/{run_id}, with the invariant selected = dispatched +
 * pending + dlq checked; returns the answer. */
static json_t *run_status(const char *run_id)
{
    char path[128];
    json_t *st;

    snprintf(path, sizeof path, "/v1/replays/%s", run_id);
    st = call(&S, "GET", path, NULL, 200);
    assert_int_equal(jint(st, "selected"),
                     jint(st, "dispatched") + jint(st, "pending") + jint(st, "dlq"));
    return st;
}

static void expect_counts(const char *run_id, json_int_t dispatched, json_int_t pending,
                          json_int_t dlq, const char *state)
{
    json_t *st = run_status(run_id);

    assert_int_equal(jint(st, "dispatched"), dispatched);
    assert_int_equal(jint(st, "pending"), pending);
    assert_int_equal(jint(st, "dlq"), dlq);
    assert_string_equal(jstr(st, "state"), state);
    json_decref(st);
}

struct group_pending {
    const char *group;
    json_int_t want;
};

/* The group's pending count in GET /v1/stats has reached 'want'. */
static int group_pending_is(void *arg)
{
    struct group_pending *g = arg;
    json_t *st = call(&S, "GET", "/v1/stats", NULL, 200), *it;
    size_t i;
    int ok = 0;

    json_array_foreach(json_object_get(st, "groups"), i, it)
        if (!strcmp(jstr(it, "group"), g->group))
            ok = jint(it, "pending") == g->want;
    json_decref(st);
    return ok;
}

/* A run over more events than one selection chunk (2000): its status adds
 * up from the moment it exists, while its deliveries are still being
 * added, and after. */
static void replay_counts_from_the_start(void **state)
{
    struct group_pending gp = {"replay.rc-1", 4500};
    struct mic_buf b;
    json_t *st;

    (void)state;
    for (int k = 0; k < 5; k++) {
        mic_buf_init(&b);
        mic_buf_puts(&b, "{\"events\":[");
        for (int i = 0; i < 900; i++)
            mic_buf_printf(&b, "%s{\"event_id\":\"rc-%d\",\"topic\":\"rc\"}", i ? "," : "",
                           k * 900 + i);
        mic_buf_puts(&b, "]}");
        json_decref(call(&S, "POST", "/v1/events", b.p, 201));
        mic_buf_fini(&b);
    }
    st = call(&S, "POST", "/v1/replays", "{\"topic\":\"rc\",\"run_id\":\"rc-1\"}", 201);
    assert_int_equal(jint(st, "selected"), 4500);
    json_decref(st);
    /* At once: everything pending, filled into the group or not. */
    expect_counts("rc-1", 0, 4500, 0, "running");
    /* Once every delivery is in the group: the same. */
    assert_true(await(group_pending_is, &gp, 20000));
    expect_counts("rc-1", 0, 4500, 0, "running");
    json_decref(call(&S, "DELETE", "/v1/replays/rc-1", NULL, 204));
}

/* Claim the one claimable delivery of 'group' and nack it at once, from
 * attempt 'first' until it is dead-lettered (10 attempts); returns its seq. */
static json_int_t dead_letter(const char *group, int first)
{
    char path[128];
    json_int_t seq = 0;

    snprintf(path, sizeof path, "/v1/groups/%s/claim", group);
    for (int attempt = first; attempt <= 10; attempt++) {
        json_t *c = call(&S, "POST", path, "{\"max\":1,\"wait_s\":5}", 200), *r;
        assert_int_equal(json_array_size(dlvs(c)), 1);
        seq = jint(dlv(c, 0), "seq");
        r = settle(&S, group, "nack", items_of(c), "{\"error\":\"boom\",\"retry_after_s\":0}");
        expect_result(r, 0, seq, attempt < 10 ? "retrying" : "dead_lettered");
        json_decref(r);
        json_decref(c);
    }
    return seq;
}

/* dispatched counts acks and skips, dlq the dead letters (a requeue puts
 * one back to pending); a run's deliveries show in the event lookup. */
static void replay_counts_follow_deliveries(void **state)
{
    json_t *c, *r, *ev, *d;
    json_int_t seq;
    char body[64];
    size_t i;
    int found = 0;

    (void)state;
    json_decref(call(&S, "POST", "/v1/events",
                     "{\"events\":[{\"event_id\":\"rd-1\",\"topic\":\"rd\"},"
                     "{\"event_id\":\"rd-2\",\"topic\":\"rd\"}]}", 201));
    json_decref(call(&S, "POST", "/v1/replays", "{\"topic\":\"rd\",\"run_id\":\"rd-1\"}", 201));
    /* rd-2 is acked; rd-1 goes to the DLQ. */
    c = call(&S, "POST", "/v1/groups/replay.rd-1/claim", "{\"max\":10,\"wait_s\":5}", 200);
    assert_int_equal(json_array_size(dlvs(c)), 2);
    for (i = 0; i < 2; i++)
        if (!strcmp(jstr(json_object_get(dlv(c, i), "event"), "event_id"), "rd-2")) {
            r = settle(&S, "replay.rd-1", "ack",
                       json_pack("[o]", item(jint(dlv(c, i), "seq"), jstr(dlv(c, i), "lease_token"))),
                       NULL);
            json_decref(r);
        } else {
            r = settle(&S, "replay.rd-1", "nack",
                       json_pack("[o]", item(jint(dlv(c, i), "seq"), jstr(dlv(c, i), "lease_token"))),
                       "{\"retry_after_s\":0}");
            json_decref(r);
        }
    json_decref(c);
    expect_counts("rd-1", 1, 1, 0, "running");
    seq = dead_letter("replay.rd-1", 2);
    expect_counts("rd-1", 1, 0, 1, "drained");
    /* A requeue makes it pending again; dead-lettered again, then skipped. */
    json_decref(call(&S, "POST", "/v1/groups/replay.rd-1/dlq/requeue", "{\"all\":true}", 200));
    expect_counts("rd-1", 1, 1, 0, "running");
    assert_int_equal(dead_letter("replay.rd-1", 1), seq);
    expect_counts("rd-1", 1, 0, 1, "drained");
    snprintf(body, sizeof body, "{\"seqs\":[%lld]}", (long long)seq);
    r = call(&S, "POST", "/v1/groups/replay.rd-1/dlq/skip", body, 200);
    expect_result(r, 0, seq, "skipped");
    json_decref(r);
    expect_counts("rd-1", 2, 0, 0, "drained");
    /* The run's deliveries are in the event lookup, like any group's. */
    ev = call(&S, "GET", "/v1/events/rd-1", NULL, 200);
    json_array_foreach(json_object_get(ev, "deliveries"), i, d)
        if (!strcmp(jstr(d, "group"), "replay.rd-1")) {
            found++;
            assert_string_equal(jstr(d, "state"), "skipped");
            assert_int_equal(jint(d, "attempts"), 10);
        }
    assert_int_equal(found, 1);
    json_decref(ev);
    ev = call(&S, "GET", "/v1/events/rd-2", NULL, 200);
    found = 0;
    json_array_foreach(json_object_get(ev, "deliveries"), i, d)
        if (!strcmp(jstr(d, "group"), "replay.rd-1")) {
            found++;
            assert_string_equal(jstr(d, "state"), "dispatched");
        }
    assert_int_equal(found, 1);
    json_decref(ev);
}

/* GET /v1/replays lists every run, in run_id order, each item exactly what
 * GET /v1/replays/{run_id} answers. */
static void replay_list(void **state)
{
    json_t *l, *it, *st;
    char path[128], prev[80] = "";
    size_t i;
    int a = 0, b = 0;

    (void)state;
    json_decref(call(&S, "POST", "/v1/replays", "{\"topic\":\"rr\",\"run_id\":\"ls-b\"}", 201));
    json_decref(call(&S, "POST", "/v1/replays",
                     "{\"topic\":\"ro\",\"run_id\":\"ls-a\",\"kind\":\"effect\",\"effects\":\"allow\"}", 201));
    l = call(&S, "GET", "/v1/replays", NULL, 200);
    assert_int_equal(json_object_size(l), 1);
    assert_true(json_array_size(json_object_get(l, "replays")) >= 2);
    json_array_foreach(json_object_get(l, "replays"), i, it) {
        const char *id = jstr(it, "run_id");

        assert_true(strcmp(prev, id) < 0);
        snprintf(prev, sizeof prev, "%s", id);
        a += !strcmp(id, "ls-a");
        b += !strcmp(id, "ls-b");
        snprintf(path, sizeof path, "/v1/replays/%s", id);
        st = call(&S, "GET", path, NULL, 200);
        if (!json_equal(st, it)) {
            char *x = json_dumps(it, JSON_SORT_KEYS), *y = json_dumps(st, JSON_SORT_KEYS);
            fprintf(stderr, "list item %s\n  != status %s\n", x, y);
            free(x);
            free(y);
        }
        assert_true(json_equal(st, it));
        json_decref(st);
    }
    assert_int_equal(a, 1);
    assert_int_equal(b, 1);
    json_decref(l);
    json_decref(call(&S, "PUT", "/v1/replays", "{}", 405));
    json_decref(call(&S, "DELETE", "/v1/replays/ls-a", NULL, 204));
    json_decref(call(&S, "DELETE", "/v1/replays/ls-b", NULL, 204));
    l = call(&S, "GET", "/v1/replays", NULL, 200);
    json_array_foreach(json_object_get(l, "replays"), i, it)
        assert_true(strcmp(jstr(it, "run_id"), "ls-a") && strcmp(jstr(it, "run_id"), "ls-b"));
    json_decref(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(range_bounds_and_ties),
        cmocka_unit_test(replay_held_until_all_released),
        cmocka_unit_test(range_pages),
        cmocka_unit_test(range_ndjson),
        cmocka_unit_test(range_ndjson_large),
        cmocka_unit_test(replay_run),
        cmocka_unit_test(replay_keeps_aggregate_order),
        cmocka_unit_test(replay_order_across_aggregates),
        cmocka_unit_test(replay_counts_from_the_start),
        cmocka_unit_test(replay_counts_follow_deliveries),
        cmocka_unit_test(replay_list),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
