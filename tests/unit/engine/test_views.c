/* test_views.c - the read-side views (server/engine/views.[ch]): the exact
 * JSON each one builds for prepared states, against a real store and
 * writer (tests/kit/procfx.h) with the clock injected, so every time and
 * age in the answers is known: the oldest unhandled deliveries of a group
 * and why each waits (leased, retry, scheduled, ready; in an ordered
 * group behind_head and gap), the blocked aggregates of an ordered group
 * (a leased head, a retrying head, a gap, a dead letter held under
 * dlq_policy hold; filtered by reason, cut at a limit), a group's dead
 * letters page by page, an aggregate's events, and an event's deliveries
 * in every group; and the refusals (no group, a bad limit, reason or
 * cursor). */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/buf.h"
#include "core/err.h"
#include "engine/claim.h"
#include "engine/delivery.h"
#include "engine/group.h"
#include "engine/publish.h"
#include "engine/views.h"
#include "procfx.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T0 PROCFX_T0
#define SEC PROCFX_SEC

/* T0 and the times after it that the answers show. */
#define AT_0 "\"2026-09-21T14:13:20.000000Z\""
#define AT_10 "\"2026-09-21T14:13:30.000000Z\""
#define AT_20 "\"2026-09-21T14:13:40.000000Z\""
#define AT_30 "\"2026-09-21T14:13:50.000000Z\""
#define AT_60 "\"2026-09-21T14:14:20.000000Z\""
#define AT_100 "\"2026-09-21T14:15:00.000000Z\""

/* ---- Helpers ---- */

static void publish(struct procfx *f, const char *body)
{
    assert_int_equal(procfx_publish(f, body, NULL, NULL), MIC_OK);
}

/* Claim up to 'max' of 'group' as 'worker': the answer (json_decref). */
static json_t *claim(struct procfx *f, const char *group, int max, const char *worker)
{
    char body[128];

    snprintf(body, sizeof body, "{\"max\":%d,\"worker\":\"%s\"}", max, worker);
    return procfx_call(f, MIC_CLAIM, group, body);
}

/* Settle delivery i of claim answer 'a' with 'kind' and the members
 * 'extra' ("" or ",\"error\":\"x\""); returns the item's status word. */
static void settle(struct procfx *f, const char *group, json_t *a, size_t i, int kind,
                   const char *extra, const char *want)
{
    json_t *d = json_array_get(json_object_get(a, "deliveries"), i), *r;
    char body[512];

    assert_non_null(d);
    snprintf(body, sizeof body, "{\"deliveries\":[{\"seq\":%lld,\"lease_token\":\"%s\"}]%s}",
             (long long)json_integer_value(json_object_get(d, "seq")),
             json_string_value(json_object_get(d, "lease_token")), extra);
    r = procfx_call(f, kind, group, body);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(r, "results"), 0), "status")),
                        want);
    json_decref(r);
}

static long long seq_at(json_t *a, size_t i)
{
    return json_integer_value(json_object_get(json_array_get(json_object_get(a, "deliveries"), i),
                                              "seq"));
}

/* Compare a view's answer with what it must be, byte for byte. */
static void expect_json(const char *what, int rc, const struct mic_buf *b, const char *want)
{
    if (rc != MIC_OK)
        fail_msg("%s: error %d", what, rc);
    if (b->len != strlen(want) || memcmp(b->p, want, b->len))
        fail_msg("%s:\n   got %.*s\n  want %s", what, (int)b->len, b->p, want);
}

/* The stored JSON of event 'id', as GET /v1/events/{id} shows it (the
 * caller frees it). */
static char *stored_event(struct procfx *f, const char *id)
{
    static const char head[] = "{\"event\":", tail[] = ",\"deliveries\":[";
    struct mic_error e;
    struct mic_buf b;
    const char *end;
    char *s;

    mic_buf_init(&b);
    assert_int_equal(mic_publish_lookup(f->store, id, strlen(id), NULL, &b, &e), MIC_OK);
    mic_buf_add(&b, "", 1);
    assert_memory_equal(b.p, head, sizeof head - 1);
    end = strstr(b.p, tail);
    assert_non_null(end);
    s = strndup(b.p + sizeof head - 1, (size_t)(end - b.p) - (sizeof head - 1));
    mic_buf_fini(&b);
    return s;
}

/* ---- Oldest ---- */

/* An unordered group: e1 leased, e2 retrying after a nack, e3 scheduled,
 * e4 ready; 10 s later. */
static void oldest_says_why_each_waits(void **state)
{
    struct procfx *f = *state;
    struct mic_error e;
    struct mic_buf b;
    json_t *a;
    int rc;

    procfx_group(f, "g", "{\"topics\":[\"t\"],\"lease_ttl_s\":30}");
    procfx_group(f, "idle", "{\"topics\":[\"none\"]}");
    publish(f, "{\"event_id\":\"e1\",\"topic\":\"t\"}");
    publish(f, "{\"event_id\":\"e2\",\"topic\":\"t\"}");
    publish(f, "{\"event_id\":\"e3\",\"topic\":\"t\",\"deliver_at\":\"2026-09-21T14:15:00Z\"}");
    publish(f, "{\"event_id\":\"e4\",\"topic\":\"t\"}");
    a = claim(f, "g", 2, "w1");
    assert_int_equal(seq_at(a, 0), 1);
    assert_int_equal(seq_at(a, 1), 2);
    settle(f, "g", a, 1, MIC_NACK, ",\"error\":\"boom\",\"retry_after_s\":60", "retrying");
    json_decref(a);
    procfx_now = T0 + 10 * SEC;

    mic_buf_init(&b);
    rc = mic_views_oldest(f->store, "g", NULL, &b, &e);
    expect_json("oldest", rc, &b,
                "{\"group\":\"g\",\"oldest_unhandled_age_s\":10.000,\"deliveries\":["
                "{\"seq\":1,\"event_id\":\"e1\",\"created_at\":" AT_0 ",\"age_s\":10.000,"
                "\"state\":\"processing\",\"attempts\":1,\"reason\":\"leased\",\"worker\":\"w1\","
                "\"lease_expires_at\":" AT_30 "},"
                "{\"seq\":2,\"event_id\":\"e2\",\"created_at\":" AT_0 ",\"age_s\":10.000,"
                "\"state\":\"pending\",\"attempts\":1,\"reason\":\"retry\",\"not_before\":" AT_60
                ",\"last_error\":\"boom\"},"
                "{\"seq\":3,\"event_id\":\"e3\",\"created_at\":" AT_0 ",\"age_s\":10.000,"
                "\"state\":\"pending\",\"attempts\":0,\"reason\":\"scheduled\",\"deliver_at\":" AT_100
                "},"
                "{\"seq\":4,\"event_id\":\"e4\",\"created_at\":" AT_0 ",\"age_s\":10.000,"
                "\"state\":\"pending\",\"attempts\":0,\"reason\":\"ready\"}]}");
    mic_buf_fini(&b);

    mic_buf_init(&b);
    rc = mic_views_oldest(f->store, "g", "1", &b, &e);
    expect_json("oldest?limit=1", rc, &b,
                "{\"group\":\"g\",\"oldest_unhandled_age_s\":10.000,\"deliveries\":["
                "{\"seq\":1,\"event_id\":\"e1\",\"created_at\":" AT_0 ",\"age_s\":10.000,"
                "\"state\":\"processing\",\"attempts\":1,\"reason\":\"leased\",\"worker\":\"w1\","
                "\"lease_expires_at\":" AT_30 "}]}");
    mic_buf_fini(&b);

    mic_buf_init(&b);
    rc = mic_views_oldest(f->store, "idle", NULL, &b, &e);
    expect_json("oldest of an idle group", rc, &b,
                "{\"group\":\"idle\",\"oldest_unhandled_age_s\":null,\"deliveries\":[]}");
    mic_buf_fini(&b);
}

/* The refusals every view shares: no such group (404), a bad limit (422
 * on field limit); nothing is appended to the answer. */
static void views_refuse_what_is_not_there(void **state)
{
    struct procfx *f = *state;
    static const char *const limits[] = {"0", "1001", "x", "", "-1"};
    struct mic_error e;
    struct mic_buf b;

    procfx_group(f, "g", "{\"topics\":[\"t\"],\"ordered\":true}");
    mic_buf_init(&b);
    memset(&e, 0, sizeof e);
    assert_int_equal(mic_views_oldest(f->store, "nope", NULL, &b, &e), MIC_ENOTFOUND);
    assert_string_equal(e.code, "not_found");
    assert_int_equal(mic_views_blocked(f->store, "nope", NULL, NULL, &b, &e), MIC_ENOTFOUND);
    assert_int_equal(mic_views_dlq(f->store, "nope", NULL, NULL, &b, &e), MIC_ENOTFOUND);
    assert_int_equal(mic_views_oldest(f->store, "bad name", NULL, &b, &e), MIC_ENOTFOUND);
    assert_int_equal(mic_views_aggregate(f->store, "acct", "nobody", &b, &e), MIC_ENOTFOUND);
    assert_string_equal(e.code, "not_found");
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
        memset(&e, 0, sizeof e);
        assert_int_equal(mic_views_oldest(f->store, "g", limits[i], &b, &e), MIC_EINVAL);
        assert_string_equal(e.field, "limit");
        assert_int_equal(mic_views_blocked(f->store, "g", NULL, limits[i], &b, &e), MIC_EINVAL);
        assert_int_equal(mic_views_dlq(f->store, "g", NULL, limits[i], &b, &e), MIC_EINVAL);
    }
    memset(&e, 0, sizeof e);
    assert_int_equal(mic_views_blocked(f->store, "g", "stuck", NULL, &b, &e), MIC_EINVAL);
    assert_string_equal(e.field, "reason");
    memset(&e, 0, sizeof e);
    assert_int_equal(mic_views_dlq(f->store, "g", "x1", NULL, &b, &e), MIC_EINVAL);
    assert_string_equal(e.field, "after");
    assert_int_equal(mic_views_dlq(f->store, "g", "-1", NULL, &b, &e), MIC_EINVAL);
    assert_int_equal(b.len, 0);
    mic_buf_fini(&b);
}

/* ---- Ordered groups: blocked and oldest ---- */

#define EV(id, agg, v)                                                                          \
    "{\"event_id\":\"" id "\",\"topic\":\"t\",\"aggregate_type\":\"acct\",\"aggregate_id\":\"" agg \
    "\",\"aggregate_version\":" #v "}"

/* Ordered group "o" (dlq_policy hold, max_attempts 2), seqs 1 to 10:
 *   A: A1 leased (seq 1), A2 and A3 behind it
 *   B: B1 nacked, retrying in 60 s (seq 4), B2 behind it
 *   C: C1 acked, C3 stored, version 2 missing: a gap (seq 7)
 *   D: D1 dead-lettered (held), D2 behind it
 *   E: E1 leased, nothing behind it (not blocking anyone)
 * claimed, settled at T0 and looked at 10 s later. */
static void prepare_ordered(struct procfx *f)
{
    json_t *a;

    procfx_group(f, "o", "{\"topics\":[\"t\"],\"ordered\":true,\"dlq_policy\":\"hold\","
                         "\"max_attempts\":2,\"lease_ttl_s\":30}");
    publish(f, "{\"events\":[" EV("A1", "A", 1) "," EV("A2", "A", 2) "," EV("A3", "A", 3) ","
               EV("B1", "B", 1) "," EV("B2", "B", 2) "," EV("C1", "C", 1) "," EV("C3", "C", 3) ","
               EV("D1", "D", 1) "," EV("D2", "D", 2) "," EV("E1", "E", 1) "]}");
    a = claim(f, "o", 10, "w1");
    assert_int_equal(json_array_size(json_object_get(a, "deliveries")), 5);
    assert_int_equal(seq_at(a, 0), 1);
    assert_int_equal(seq_at(a, 1), 4);
    assert_int_equal(seq_at(a, 2), 6);
    assert_int_equal(seq_at(a, 3), 8);
    assert_int_equal(seq_at(a, 4), 10);
    settle(f, "o", a, 1, MIC_NACK, ",\"error\":\"later\",\"retry_after_s\":60", "retrying");
    settle(f, "o", a, 2, MIC_ACK, "", "acked");
    settle(f, "o", a, 3, MIC_NACK, ",\"error\":\"bad\",\"dead_letter\":true", "dead_lettered");
    json_decref(a);
    procfx_now = T0 + 10 * SEC;
}

static void blocked_lists_held_aggregates(void **state)
{
    struct procfx *f = *state;
    struct mic_error e;
    struct mic_buf b;
    int rc;

    prepare_ordered(f);
#define BLK_A                                                                                 \
    "{\"aggregate_type\":\"acct\",\"aggregate_id\":\"A\",\"head_seq\":1,\"reason\":\"lease\","  \
    "\"since\":" AT_0 ",\"age_s\":10.000,\"waiting\":2}"
#define BLK_B                                                                                 \
    "{\"aggregate_type\":\"acct\",\"aggregate_id\":\"B\",\"head_seq\":4,\"reason\":\"retry\","  \
    "\"since\":" AT_0 ",\"age_s\":10.000,\"waiting\":1}"
#define BLK_C                                                                                 \
    "{\"aggregate_type\":\"acct\",\"aggregate_id\":\"C\",\"head_seq\":7,\"reason\":\"gap\","    \
    "\"since\":" AT_0 ",\"age_s\":10.000,\"waiting\":0,\"missing_version\":2}"
#define BLK_D                                                                                 \
    "{\"aggregate_type\":\"acct\",\"aggregate_id\":\"D\",\"head_seq\":8,\"reason\":\"dlq\","    \
    "\"since\":" AT_0 ",\"age_s\":10.000,\"waiting\":1}"
    mic_buf_init(&b);
    rc = mic_views_blocked(f->store, "o", NULL, NULL, &b, &e);
    expect_json("blocked", rc, &b,
                "{\"aggregates\":[" BLK_A "," BLK_B "," BLK_C "," BLK_D "]}");
    mic_buf_fini(&b);
    static const struct {
        const char *reason, *want;
    } by[] = {
        {"lease", "{\"aggregates\":[" BLK_A "]}"},
        {"retry", "{\"aggregates\":[" BLK_B "]}"},
        {"gap", "{\"aggregates\":[" BLK_C "]}"},
        {"dlq", "{\"aggregates\":[" BLK_D "]}"},
        {"scheduled", "{\"aggregates\":[]}"},
    };
    for (size_t i = 0; i < sizeof by / sizeof by[0]; i++) {
        mic_buf_init(&b);
        rc = mic_views_blocked(f->store, "o", by[i].reason, NULL, &b, &e);
        expect_json(by[i].reason, rc, &b, by[i].want);
        mic_buf_fini(&b);
    }
    mic_buf_init(&b);
    rc = mic_views_blocked(f->store, "o", NULL, "2", &b, &e);
    expect_json("blocked?limit=2", rc, &b, "{\"aggregates\":[" BLK_A "," BLK_B "]}");
    mic_buf_fini(&b);
}

static void oldest_in_an_ordered_group(void **state)
{
    struct procfx *f = *state;
    struct mic_error e;
    struct mic_buf b;
    int rc;

    prepare_ordered(f);
#define OLD(seq, id, st, att) \
    "{\"seq\":" #seq ",\"event_id\":\"" id "\",\"created_at\":" AT_0 ",\"age_s\":10.000," \
    "\"state\":\"" st "\",\"attempts\":" #att
    mic_buf_init(&b);
    rc = mic_views_oldest(f->store, "o", "100", &b, &e);
    expect_json("oldest of an ordered group", rc, &b,
                "{\"group\":\"o\",\"oldest_unhandled_age_s\":10.000,\"deliveries\":["
                OLD(1, "A1", "processing", 1) ",\"reason\":\"leased\",\"worker\":\"w1\","
                "\"lease_expires_at\":" AT_30 "},"
                OLD(2, "A2", "pending", 0) ",\"reason\":\"behind_head\",\"head_seq\":1},"
                OLD(3, "A3", "pending", 0) ",\"reason\":\"behind_head\",\"head_seq\":1},"
                OLD(4, "B1", "pending", 1) ",\"reason\":\"retry\",\"not_before\":" AT_60
                ",\"last_error\":\"later\"},"
                OLD(5, "B2", "pending", 0) ",\"reason\":\"behind_head\",\"head_seq\":4},"
                OLD(7, "C3", "pending", 0) ",\"reason\":\"gap\",\"missing_version\":2},"
                OLD(9, "D2", "pending", 0) ",\"reason\":\"behind_head\",\"head_seq\":8},"
                OLD(10, "E1", "processing", 1) ",\"reason\":\"leased\",\"worker\":\"w1\","
                "\"lease_expires_at\":" AT_30 "}]}");
    mic_buf_fini(&b);
}

/* ---- Dead letters ---- */

static void dlq_pages_with_a_cursor(void **state)
{
    struct procfx *f = *state;
    struct mic_error e;
    struct mic_buf b;
    char *x1, *x2, *x3, want[4096];
    json_t *a;
    int rc;

    procfx_group(f, "d", "{\"topics\":[\"t\"],\"max_attempts\":1}");
    publish(f, "{\"event_id\":\"x1\",\"topic\":\"t\"}");
    publish(f, "{\"event_id\":\"x2\",\"topic\":\"t\"}");
    publish(f, "{\"event_id\":\"x3\",\"topic\":\"t\"}");
    publish(f, "{\"event_id\":\"ok\",\"topic\":\"t\"}");
    a = claim(f, "d", 4, "w"); /* leased for 30 s */
    procfx_now = T0 + 10 * SEC;
    settle(f, "d", a, 0, MIC_NACK, ",\"error\":\"one\"", "dead_lettered");
    procfx_now = T0 + 20 * SEC;
    settle(f, "d", a, 2, MIC_NACK, ",\"error\":\"three \\\"quoted\\\"\"", "dead_lettered");
    settle(f, "d", a, 1, MIC_NACK, "", "dead_lettered");
    settle(f, "d", a, 3, MIC_ACK, "", "acked");
    json_decref(a);
    x1 = stored_event(f, "x1");
    x2 = stored_event(f, "x2");
    x3 = stored_event(f, "x3");

    mic_buf_init(&b);
    rc = mic_views_dlq(f->store, "d", NULL, NULL, &b, &e);
    snprintf(want, sizeof want,
             "{\"deliveries\":["
             "{\"seq\":1,\"event\":%s,\"attempts\":1,\"last_error\":\"one\",\"dead_lettered_at\":" AT_10 "},"
             "{\"seq\":2,\"event\":%s,\"attempts\":1,\"last_error\":\"\",\"dead_lettered_at\":" AT_20 "},"
             "{\"seq\":3,\"event\":%s,\"attempts\":1,\"last_error\":\"three \\\"quoted\\\"\","
             "\"dead_lettered_at\":" AT_20 "}],\"next\":null}",
             x1, x2, x3);
    expect_json("dlq", rc, &b, want);
    mic_buf_fini(&b);

    /* A full page gives the cursor of its last item; the next page starts
     * after it. */
    mic_buf_init(&b);
    rc = mic_views_dlq(f->store, "d", NULL, "2", &b, &e);
    snprintf(want, sizeof want,
             "{\"deliveries\":["
             "{\"seq\":1,\"event\":%s,\"attempts\":1,\"last_error\":\"one\",\"dead_lettered_at\":" AT_10 "},"
             "{\"seq\":2,\"event\":%s,\"attempts\":1,\"last_error\":\"\",\"dead_lettered_at\":" AT_20 "}],"
             "\"next\":\"2\"}",
             x1, x2);
    expect_json("dlq?limit=2", rc, &b, want);
    mic_buf_fini(&b);
    mic_buf_init(&b);
    rc = mic_views_dlq(f->store, "d", "2", "2", &b, &e);
    snprintf(want, sizeof want,
             "{\"deliveries\":["
             "{\"seq\":3,\"event\":%s,\"attempts\":1,\"last_error\":\"three \\\"quoted\\\"\","
             "\"dead_lettered_at\":" AT_20 "}],\"next\":null}",
             x3);
    expect_json("dlq?after=2&limit=2", rc, &b, want);
    mic_buf_fini(&b);
    mic_buf_init(&b);
    rc = mic_views_dlq(f->store, "d", "3", NULL, &b, &e);
    expect_json("dlq?after=3", rc, &b, "{\"deliveries\":[],\"next\":null}");
    mic_buf_fini(&b);
    free(x1);
    free(x2);
    free(x3);
}

/* ---- An event in every group, an aggregate ---- */

struct dlv_json {
    uint64_t seq;
    struct mic_buf *out;
    int rc;
};

/* GET /v1/events/{id}'s deliveries: one element per group that has one,
 * in group name order, with what its state shows. */
static void event_deliveries_in_every_group(void **state)
{
    struct procfx *f = *state;
    struct mic_buf b;
    json_t *a;
    mic_txn *t;
    int rc;

    procfx_group(f, "g1", "{\"topics\":[\"t\"],\"lease_ttl_s\":30}");
    procfx_group(f, "g2", "{\"topics\":[\"t\"]}");
    procfx_group(f, "g3", "{\"topics\":[\"t\"]}");
    procfx_group(f, "g0", "{\"topics\":[\"other\"]}");
    publish(f, "{\"event_id\":\"e1\",\"topic\":\"t\"}");
    procfx_group(f, "g4", "{\"topics\":[\"t\"],\"start\":\"new\"}"); /* none for e1 */
    a = claim(f, "g1", 1, "w1");
    json_decref(a);
    a = claim(f, "g2", 1, "w2");
    settle(f, "g2", a, 0, MIC_NACK, ",\"error\":\"boom\",\"retry_after_s\":60", "retrying");
    json_decref(a);
    a = claim(f, "g3", 1, "w3");
    settle(f, "g3", a, 0, MIC_ACK, "", "acked");
    json_decref(a);

    mic_buf_init(&b);
    mic_buf_puts(&b, "[");
    assert_int_equal(mic_txn_begin(f->store, 0, &t), MIC_OK);
    rc = mic_views_deliveries_json(t, 1, &b);
    mic_txn_abort(t);
    mic_buf_puts(&b, "]");
    expect_json("deliveries of e1", rc, &b,
                "[{\"group\":\"g1\",\"state\":\"processing\",\"attempts\":1,"
                "\"lease_expires_at\":" AT_30 ",\"worker\":\"w1\"},"
                "{\"group\":\"g2\",\"state\":\"pending\",\"attempts\":1,\"not_before\":" AT_60
                ",\"worker\":\"w2\",\"last_error\":\"boom\"},"
                "{\"group\":\"g3\",\"state\":\"dispatched\",\"attempts\":1,\"worker\":\"w3\"}]");
    mic_buf_fini(&b);
    /* A seq no group has: nothing. */
    mic_buf_init(&b);
    assert_int_equal(mic_txn_begin(f->store, 0, &t), MIC_OK);
    assert_int_equal(mic_views_deliveries_json(t, 99, &b), MIC_OK);
    mic_txn_abort(t);
    assert_int_equal(b.len, 0);
    mic_buf_fini(&b);
}

/* GET /v1/aggregates/{type}/{id}: its versions, then each event with its
 * deliveries, in aggregate order. */
static void aggregate_lists_its_events(void **state)
{
    struct procfx *f = *state;
    struct mic_error e;
    struct mic_buf b;
    char *c1, *c3, want[4096];
    int rc;

    prepare_ordered(f);
    c1 = stored_event(f, "C1");
    c3 = stored_event(f, "C3");
    mic_buf_init(&b);
    rc = mic_views_aggregate(f->store, "acct", "C", &b, &e);
    snprintf(want, sizeof want,
             "{\"aggregate_type\":\"acct\",\"aggregate_id\":\"C\",\"versioned\":true,"
             "\"first_version\":1,\"last_version\":3,\"contiguous_to\":1,\"events\":["
             "{\"event\":%s,\"deliveries\":[{\"group\":\"o\",\"state\":\"dispatched\","
             "\"attempts\":1,\"worker\":\"w1\"}]},"
             "{\"event\":%s,\"deliveries\":[{\"group\":\"o\",\"state\":\"pending\","
             "\"attempts\":0}]}],\"truncated\":false}",
             c1, c3);
    expect_json("aggregate acct/C", rc, &b, want);
    mic_buf_fini(&b);
    free(c1);
    free(c3);
    /* An aggregate without versions. */
    publish(f, "{\"event_id\":\"u1\",\"topic\":\"u\",\"aggregate_type\":\"cart\",\"aggregate_id\":\"9\"}");
    c1 = stored_event(f, "u1");
    mic_buf_init(&b);
    rc = mic_views_aggregate(f->store, "cart", "9", &b, &e);
    snprintf(want, sizeof want,
             "{\"aggregate_type\":\"cart\",\"aggregate_id\":\"9\",\"versioned\":false,"
             "\"events\":[{\"event\":%s,\"deliveries\":[]}],\"truncated\":false}",
             c1);
    expect_json("aggregate cart/9", rc, &b, want);
    mic_buf_fini(&b);
    free(c1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(oldest_says_why_each_waits, procfx_setup,
                                        procfx_teardown),
        cmocka_unit_test_setup_teardown(views_refuse_what_is_not_there, procfx_setup,
                                        procfx_teardown),
        cmocka_unit_test_setup_teardown(blocked_lists_held_aggregates, procfx_setup,
                                        procfx_teardown),
        cmocka_unit_test_setup_teardown(oldest_in_an_ordered_group, procfx_setup,
                                        procfx_teardown),
        cmocka_unit_test_setup_teardown(dlq_pages_with_a_cursor, procfx_setup, procfx_teardown),
        cmocka_unit_test_setup_teardown(event_deliveries_in_every_group, procfx_setup,
                                        procfx_teardown),
        cmocka_unit_test_setup_teardown(aggregate_lists_its_events, procfx_setup,
                                        procfx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
