/* test_scheduled.c - scheduled events (deliver_at, DESIGN sections 2 and
 * 12).  In-process against a real store and writer with an injected
 * clock (no sleeps): an event is not claimable before its deliver_at and
 * is at it; an ordered aggregate whose head is scheduled is blocked
 * (GET .../blocked reason scheduled, GET .../oldest reason scheduled with
 * deliver_at); idempotency covers deliver_at.  Against a real micd: a bad
 * or too-far deliver_at is a 422 naming the field, and stores nothing. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/buf.h"
#include "engine/claim.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/err.h"
#include "engine/group.h"
#include "harness.h"
#include "claimkit.h"
#include "procfx.h"
#include "engine/publish.h"
#include "engine/schedule.h"
#include "store/store.h"
#include "store/log.h"
#include "engine/views.h"
#include "engine/writer.h"

#include <jansson.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define T0 PROCFX_T0
#define SEC PROCFX_SEC


static void publish_ok(struct procfx *f, const char *body)
{
    assert_int_equal(procfx_publish(f, body, NULL, NULL), MIC_OK);
}

/* The event_ids of a claim of up to 10 in 'group', joined by spaces. */
static void claim_ids(struct procfx *f, const char *group, char *out, size_t n)
{
    json_t *j = procfx_call(f, MIC_CLAIM, group, "{\"max\":10}"), *d;
    size_t i, used = 0;

    out[0] = 0;
    json_array_foreach(json_object_get(j, "deliveries"), i, d)
        used += (size_t)snprintf(out + used, n - used, "%s%s", i ? " " : "",
                                 json_string_value(json_object_get(json_object_get(d, "event"),
                                                                   "event_id")));
    json_decref(j);
}

/* Ack the claimed delivery of event 'id' of a claim answer 'j' in 'group'. */
static void ack_first(struct procfx *f, const char *group, json_t *j)
{
    json_t *d = json_array_get(json_object_get(j, "deliveries"), 0), *r;
    char body[256];

    assert_non_null(d);
    snprintf(body, sizeof body, "{\"deliveries\":[{\"seq\":%lld,\"lease_token\":\"%s\"}]}",
             (long long)json_integer_value(json_object_get(d, "seq")),
             json_string_value(json_object_get(d, "lease_token")));
    r = procfx_call(f, MIC_ACK, group, body);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(r, "results"), 0), "status")),
                        "acked");
    json_decref(r);
}

static json_t *view(int rc, struct mic_buf *b)
{
    json_t *j;

    assert_int_equal(rc, MIC_OK);
    j = json_loadb(b->p, b->len, 0, NULL);
    assert_non_null(j);
    mic_buf_fini(b);
    return j;
}

static json_t *blocked(struct procfx *f, const char *group, const char *reason)
{
    struct mic_error e;
    struct mic_buf b;

    mic_buf_init(&b);
    return view(mic_views_blocked(f->store, group, reason, NULL, &b, &e), &b);
}

static json_t *oldest(struct procfx *f, const char *group)
{
    struct mic_error e;
    struct mic_buf b;

    mic_buf_init(&b);
    return view(mic_views_oldest(f->store, group, NULL, &b, &e), &b);
}

/* ---- In-process, injected clock ---- */

static void unordered_waits_for_deliver_at(void **state)
{
    struct procfx *f = *state;
    char got[256], body[256], when[MIC_TIME_LEN + 1];

    procfx_group(f, "g", "{\"topics\":[\"t\"]}");
    mic_time_format(T0 + 60 * SEC, when);
    snprintf(body, sizeof body, "{\"event_id\":\"later\",\"topic\":\"t\",\"deliver_at\":\"%s\"}", when);
    publish_ok(f, body);
    publish_ok(f, "{\"event_id\":\"now\",\"topic\":\"t\"}");
    /* A deliver_at in the past is deliverable at once. */
    publish_ok(f, "{\"event_id\":\"past\",\"topic\":\"t\",\"deliver_at\":\"2020-01-01T00:00:00Z\"}");
    claim_ids(f, "g", got, sizeof got);
    assert_string_equal(got, "now past");
    /* A group created later (backfill) waits for it too. */
    procfx_group(f, "late", "{\"topics\":[\"t\"]}");
    procfx_now = T0 + 60 * SEC - 1;
    claim_ids(f, "g", got, sizeof got);
    assert_string_equal(got, "");
    claim_ids(f, "late", got, sizeof got);
    assert_string_equal(got, "now past");
    /* At deliver_at it becomes claimable, in both groups. */
    procfx_now = T0 + 60 * SEC;
    claim_ids(f, "g", got, sizeof got);
    assert_string_equal(got, "later");
    claim_ids(f, "late", got, sizeof got);
    assert_string_equal(got, "later");
    claim_ids(f, "g", got, sizeof got);
    assert_string_equal(got, "");
}

static void ordered_head_scheduled_blocks_aggregate(void **state)
{
    struct procfx *f = *state;
    char got[256], body[512], when[MIC_TIME_LEN + 1];
    json_t *j, *a, *d, *c;

    procfx_group(f, "o", "{\"topics\":[\"t\"],\"ordered\":true}");
    mic_time_format(T0 + 120 * SEC, when);
    snprintf(body, sizeof body,
             "{\"events\":["
             "{\"event_id\":\"a1\",\"topic\":\"t\",\"aggregate_type\":\"acct\",\"aggregate_id\":\"1\","
             "\"aggregate_version\":1,\"deliver_at\":\"%s\"},"
             "{\"event_id\":\"a2\",\"topic\":\"t\",\"aggregate_type\":\"acct\",\"aggregate_id\":\"1\","
             "\"aggregate_version\":2},"
             "{\"event_id\":\"a3\",\"topic\":\"t\",\"aggregate_type\":\"acct\",\"aggregate_id\":\"1\","
             "\"aggregate_version\":3},"
             "{\"event_id\":\"b1\",\"topic\":\"t\",\"aggregate_type\":\"acct\",\"aggregate_id\":\"2\","
             "\"aggregate_version\":1}]}",
             when);
    publish_ok(f, body);
    /* Only the other aggregate goes: a1's successors wait behind it. */
    claim_ids(f, "o", got, sizeof got);
    assert_string_equal(got, "b1");

    j = blocked(f, "o", NULL);
    assert_int_equal(json_array_size(json_object_get(j, "aggregates")), 1);
    a = json_array_get(json_object_get(j, "aggregates"), 0);
    assert_string_equal(json_string_value(json_object_get(a, "aggregate_id")), "1");
    assert_string_equal(json_string_value(json_object_get(a, "reason")), "scheduled");
    assert_int_equal(json_integer_value(json_object_get(a, "head_seq")), 1);
    assert_int_equal(json_integer_value(json_object_get(a, "waiting")), 2);
    json_decref(j);
    j = blocked(f, "o", "scheduled");
    assert_int_equal(json_array_size(json_object_get(j, "aggregates")), 1);
    json_decref(j);
    j = blocked(f, "o", "retry");
    assert_int_equal(json_array_size(json_object_get(j, "aggregates")), 0);
    json_decref(j);

    j = oldest(f, "o");
    d = json_array_get(json_object_get(j, "deliveries"), 0);
    assert_string_equal(json_string_value(json_object_get(d, "event_id")), "a1");
    assert_string_equal(json_string_value(json_object_get(d, "state")), "pending");
    assert_string_equal(json_string_value(json_object_get(d, "reason")), "scheduled");
    assert_string_equal(json_string_value(json_object_get(d, "deliver_at")), when);
    d = json_array_get(json_object_get(j, "deliveries"), 1);
    assert_string_equal(json_string_value(json_object_get(d, "event_id")), "a2");
    assert_string_equal(json_string_value(json_object_get(d, "reason")), "behind_head");
    assert_int_equal(json_integer_value(json_object_get(d, "head_seq")), 1);
    json_decref(j);

    /* Just before: still nothing; at deliver_at the head goes, alone. */
    procfx_now = T0 + 120 * SEC - 1;
    claim_ids(f, "o", got, sizeof got);
    assert_string_equal(got, "");
    procfx_now = T0 + 120 * SEC;
    c = procfx_call(f, MIC_CLAIM, "o", "{\"max\":10}");
    assert_int_equal(json_array_size(json_object_get(c, "deliveries")), 1);
    assert_string_equal(json_string_value(json_object_get(json_object_get(
                            json_array_get(json_object_get(c, "deliveries"), 0), "event"),
                                                          "event_id")),
                        "a1");
    assert_string_equal(json_string_value(json_object_get(json_object_get(
                            json_array_get(json_object_get(c, "deliveries"), 0), "event"),
                                                          "deliver_at")),
                        when);
    j = blocked(f, "o", NULL);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(j, "aggregates"), 0), "reason")),
                        "lease");
    json_decref(j);
    ack_first(f, "o", c);
    json_decref(c);
    claim_ids(f, "o", got, sizeof got);
    assert_string_equal(got, "a2");
}

static void idempotency_covers_deliver_at(void **state)
{
    struct procfx *f = *state;
    const char *code;
    int dup;

    publish_ok(f, "{\"event_id\":\"e1\",\"topic\":\"t\",\"deliver_at\":\"2026-09-22T00:00:00Z\"}");
    /* The same content: a duplicate. */
    assert_int_equal(procfx_publish(f, "{\"deliver_at\":\"2026-09-22T00:00:00Z\",\"topic\":\"t\",\"event_id\":\"e1\"}",
                             &code, &dup), MIC_OK);
    assert_true(dup);
    /* Another deliver_at, or none: other content. */
    assert_int_equal(procfx_publish(f, "{\"event_id\":\"e1\",\"topic\":\"t\",\"deliver_at\":\"2026-09-22T00:00:01Z\"}",
                             &code, &dup), MIC_ECONFLICT);
    assert_string_equal(code, "event_id_conflict");
    assert_int_equal(procfx_publish(f, "{\"event_id\":\"e1\",\"topic\":\"t\"}", &code, &dup), MIC_ECONFLICT);
    assert_string_equal(code, "event_id_conflict");
    /* Within one batch too. */
    assert_int_equal(procfx_publish(f, "{\"events\":[{\"event_id\":\"e2\",\"topic\":\"t\",\"deliver_at\":\"2026-09-22T00:00:00Z\"},"
                                "{\"event_id\":\"e2\",\"topic\":\"t\",\"deliver_at\":\"2026-09-22T00:00:00Z\"}]}",
                             &code, &dup), MIC_OK);
    assert_false(dup);
}

static void idempotency_in_batch_conflict(void **state)
{
    struct procfx *f = *state;
    struct mic_error e;
    mic_publish *p;
    const char *body = "{\"events\":[{\"event_id\":\"e3\",\"topic\":\"t\",\"deliver_at\":\"2026-09-22T00:00:00Z\"},"
                       "{\"event_id\":\"e3\",\"topic\":\"t\",\"deliver_at\":\"2026-09-23T00:00:00Z\"}]}";

    (void)f;
    memset(&e, 0, sizeof e);
    assert_int_equal(mic_publish_parse(body, strlen(body), &f->cfg, &p, &e), MIC_ECONFLICT);
    assert_string_equal(e.code, "event_id_conflict");
    assert_string_equal(e.field, "events[1].event_id");
}

/* ---- Against micd ---- */

static int event_status(const struct srv *s, const char *id)
{
    struct resp r;
    char path[128];
    int st;

    snprintf(path, sizeof path, "/v1/events/%s", id);
    assert_int_equal(http_json(s, "GET", path, NULL, &r), 0);
    st = (int)r.status;
    resp_free(&r);
    return st;
}

static void expect_422(const struct srv *s, const char *body, const char *field)
{
    json_t *j = call(s, "POST", "/v1/events", body, 422), *e = json_object_get(j, "error");

    assert_string_equal(json_string_value(json_object_get(e, "code")), "invalid_event");
    assert_string_equal(json_string_value(json_object_get(e, "field")), field);
    assert_non_null(strstr(json_string_value(json_object_get(e, "message")), "deliver_at"));
    json_decref(j);
}

static void http_deliver_at(void **state)
{
    struct srv s;
    char body[512], when[MIC_TIME_LEN + 1];
    json_t *j, *ev, *d;

    (void)state;
    mic_clock_set(NULL);
    assert_int_equal(srv_start_shared(&s, NULL), 0);
    expect_422(&s, "{\"event_id\":\"bad1\",\"topic\":\"sched.t\",\"deliver_at\":\"next tuesday\"}",
               "deliver_at");
    expect_422(&s, "{\"event_id\":\"bad2\",\"topic\":\"sched.t\",\"deliver_at\":\"2026-09-29T08:00:00\"}",
               "deliver_at");
    /* Too far: 400 days ahead of now; in a batch, the item's path. */
    mic_time_format(mic_now_us() + 400 * 86400 * SEC, when);
    snprintf(body, sizeof body,
             "{\"events\":[{\"event_id\":\"bad3\",\"topic\":\"sched.t\"},"
             "{\"event_id\":\"bad4\",\"topic\":\"sched.t\",\"deliver_at\":\"%s\"}]}", when);
    expect_422(&s, body, "events[1].deliver_at");
    snprintf(body, sizeof body,
             "{\"events\":[{\"event_id\":\"bad5\",\"topic\":\"sched.t\"},"
             "{\"event_id\":\"bad6\",\"topic\":\"sched.t\",\"deliver_at\":7}]}");
    expect_422(&s, body, "events[1].deliver_at");
    /* Nothing was stored: no event, not even the topic. */
    assert_int_equal(event_status(&s, "bad1"), 404);
    assert_int_equal(event_status(&s, "bad3"), 404);
    assert_int_equal(event_status(&s, "bad5"), 404);
    json_decref(call(&s, "GET", "/v1/topics/sched.t", NULL, 404));

    /* A good one: stored normalised, scheduled in a group. */
    json_decref(call(&s, "PUT", "/v1/groups/sched.g", "{\"topics\":[\"sched.t\"]}", 201));
    json_decref(call(&s, "POST", "/v1/events",
                     "{\"event_id\":\"ok1\",\"topic\":\"sched.t\",\"deliver_at\":\"2099-01-01T01:00:00.5+01:00\"}",
                     422)); /* far ahead: refused */
    mic_time_format(mic_now_us() + 3600 * SEC, when);
    snprintf(body, sizeof body, "{\"event_id\":\"ok2\",\"topic\":\"sched.t\",\"deliver_at\":\"%s\"}", when);
    json_decref(call(&s, "POST", "/v1/events", body, 201));
    json_decref(call(&s, "POST", "/v1/events", body, 200)); /* a duplicate */
    j = call(&s, "GET", "/v1/events/ok2", NULL, 200);
    ev = json_object_get(j, "event");
    assert_string_equal(json_string_value(json_object_get(ev, "deliver_at")), when);
    d = json_array_get(json_object_get(j, "deliveries"), 0);
    assert_string_equal(json_string_value(json_object_get(d, "state")), "pending");
    assert_string_equal(json_string_value(json_object_get(d, "not_before")), when);
    json_decref(j);
    j = call(&s, "POST", "/v1/groups/sched.g/claim", "{\"max\":10}", 200);
    assert_int_equal(json_array_size(json_object_get(j, "deliveries")), 0);
    json_decref(j);
    j = call(&s, "GET", "/v1/groups/sched.g/oldest", NULL, 200);
    d = json_array_get(json_object_get(j, "deliveries"), 0);
    assert_string_equal(json_string_value(json_object_get(d, "reason")), "scheduled");
    assert_string_equal(json_string_value(json_object_get(d, "deliver_at")), when);
    json_decref(j);
    assert_int_equal(srv_stop_shared(&s), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(unordered_waits_for_deliver_at, procfx_setup, procfx_teardown),
        cmocka_unit_test_setup_teardown(ordered_head_scheduled_blocks_aggregate, procfx_setup, procfx_teardown),
        cmocka_unit_test_setup_teardown(idempotency_covers_deliver_at, procfx_setup, procfx_teardown),
        cmocka_unit_test_setup_teardown(idempotency_in_batch_conflict, procfx_setup, procfx_teardown),
        cmocka_unit_test(http_deliver_at),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
