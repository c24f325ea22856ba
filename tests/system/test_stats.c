/* test_stats.c - the admin figures against a real micd: per-group counts
 * (pending, processing, dlq, dispatched, redeliveries, blocked, gap-parked),
 * the oldest unhandled age (growing as time passes) and its event, poison
 * age, the alert flag, per-topic publishes/duplicates/conflicts/events,
 * GET .../oldest with why each delivery waits, and the same figures in
 * /metrics. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "harness.h"
#include "claimkit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct srv S;

static json_t *group_stats(const char *group)
{
    json_t *st = call(&S, "GET", "/v1/stats", NULL, 200), *g, *found = NULL;
    size_t i;

    json_array_foreach(json_object_get(st, "groups"), i, g)
        if (!strcmp(json_string_value(json_object_get(g, "group")), group))
            found = json_incref(g);
    json_decref(st);
    assert_non_null(found);
    return found;
}

static json_t *topic_stats(const char *topic)
{
    json_t *st = call(&S, "GET", "/v1/stats", NULL, 200), *t, *found = NULL;
    size_t i;

    json_array_foreach(json_object_get(st, "topics"), i, t)
        if (!strcmp(json_string_value(json_object_get(t, "topic")), topic))
            found = json_incref(t);
    assert_non_null(json_object_get(json_object_get(st, "store"), "map_used_bytes"));
    json_decref(st);
    assert_non_null(found);
    return found;
}

static long num(json_t *o, const char *k)
{
    return (long)json_integer_value(json_object_get(o, k));
}

/* The value of one metric line "name{label="v"} N" in /metrics, or -1. */
static double metric(const char *name, const char *label, const char *value)
{
    struct resp r;
    char key[256];
    const char *p;
    double v = -1;

    snprintf(key, sizeof key, "%s{%s=\"%s\"} ", name, label, value);
    assert_int_equal(http(&S, "GET", "/metrics", NULL, NULL, 0, NULL, &r), 0);
    if (r.body && (p = strstr(r.body, key)))
        v = strtod(p + strlen(key), NULL);
    resp_free(&r);
    return v;
}

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

static char tok[64];
static long seq_of_claim(const char *group, const char *body)
{
    json_t *c = call(&S, "POST", group, body, 200), *d = json_array_get(json_object_get(c, "deliveries"), 0);
    long seq;

    assert_non_null(d);
    seq = num(d, "seq");
    snprintf(tok, sizeof tok, "%s", json_string_value(json_object_get(d, "lease_token")));
    json_decref(c);
    return seq;
}

static void settle_one(const char *path, long seq, const char *extra)
{
    char body[256];

    snprintf(body, sizeof body, "{\"deliveries\":[{\"seq\":%ld,\"lease_token\":\"%s\"}]%s}", seq, tok,
             extra);
    json_decref(call(&S, "POST", path, body, 200));
}

struct age_wait {
    const char *group;
    double above;
};

static int age_grew(void *arg)
{
    struct age_wait *w = arg;
    json_t *g = group_stats(w->group);
    double a = json_real_value(json_object_get(g, "oldest_unhandled_age_s"));

    if (json_is_integer(json_object_get(g, "oldest_unhandled_age_s")))
        a = (double)json_integer_value(json_object_get(g, "oldest_unhandled_age_s"));
    json_decref(g);
    return a > w->above;
}

static void group_figures(void **state)
{
    json_t *g, *o, *d;
    double age0;
    long s1;
    struct age_wait w;

    (void)state;
    json_decref(call(&S, "PUT", "/v1/groups/st.g",
                     "{\"topics\":[\"st.t\"],\"max_attempts\":2,\"alert_oldest_unhandled_s\":3600,"
                     "\"backoff\":{\"initial_ms\":600000,\"max_ms\":600000,\"multiplier\":1}}", 201));
    g = group_stats("st.g");
    assert_int_equal(num(g, "pending"), 0);
    assert_true(json_is_null(json_object_get(g, "oldest_unhandled_age_s")));
    assert_true(json_is_null(json_object_get(g, "poison_age_s")));
    assert_true(json_is_false(json_object_get(g, "alert")));
    json_decref(g);
    json_decref(call(&S, "POST", "/v1/events",
                     "{\"events\":[{\"event_id\":\"st-1\",\"topic\":\"st.t\",\"created_at\":\"2026-01-01T00:00:00Z\"},"
                     "{\"event_id\":\"st-2\",\"topic\":\"st.t\"},{\"event_id\":\"st-3\",\"topic\":\"st.t\"}]}", 201));
    g = group_stats("st.g");
    assert_int_equal(num(g, "pending"), 3);
    assert_true(num(g, "oldest_unhandled_seq") >= 1);
    age0 = json_number_value(json_object_get(g, "oldest_unhandled_age_s"));
    assert_true(age0 > 86400); /* created_at in January */
    assert_true(json_is_true(json_object_get(g, "alert"))); /* older than 3600 s */
    json_decref(g);
    assert_int_equal(metric("mic_group_alert", "group", "st.g"), 1);
    assert_int_equal(metric("mic_group_pending", "group", "st.g"), 3);

    /* Claim the oldest: processing 1; nack it: pending again, poison age. */
    s1 = seq_of_claim("/v1/groups/st.g/claim", "{\"max\":1,\"worker\":\"w-st\"}");
    g = group_stats("st.g");
    assert_int_equal(num(g, "processing"), 1);
    assert_int_equal(num(g, "pending"), 2);
    json_decref(g);
    o = call(&S, "GET", "/v1/groups/st.g/oldest?limit=2", NULL, 200);
    d = json_array_get(json_object_get(o, "deliveries"), 0);
    assert_int_equal(num(d, "seq"), s1);
    assert_string_equal(json_string_value(json_object_get(d, "reason")), "leased");
    assert_string_equal(json_string_value(json_object_get(d, "worker")), "w-st");
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(o, "deliveries"), 1),
                                                          "reason")), "ready");
    json_decref(o);
    settle_one("/v1/groups/st.g/nack", s1, ",\"error\":\"smtp down\"");
    o = call(&S, "GET", "/v1/groups/st.g/oldest?limit=1", NULL, 200);
    d = json_array_get(json_object_get(o, "deliveries"), 0);
    assert_string_equal(json_string_value(json_object_get(d, "reason")), "retry");
    assert_string_equal(json_string_value(json_object_get(d, "last_error")), "smtp down");
    assert_non_null(json_object_get(d, "not_before"));
    json_decref(o);
    g = group_stats("st.g");
    assert_true(json_number_value(json_object_get(g, "poison_age_s")) > 86400);
    assert_int_equal(num(g, "pending"), 3);
    json_decref(g);

    /* Ack the others: dispatched 2; the oldest is still the retrying one. */
    for (int i = 0; i < 2; i++) {
        long s = seq_of_claim("/v1/groups/st.g/claim", "{\"max\":1}");
        settle_one("/v1/groups/st.g/ack", s, "");
    }
    g = group_stats("st.g");
    assert_int_equal(num(g, "dispatched"), 2);
    assert_int_equal(num(g, "pending"), 1);
    assert_int_equal(num(g, "oldest_unhandled_seq"), s1);
    json_decref(g);
    assert_int_equal(metric("mic_group_dispatched_total", "group", "st.g"), 2);

    /* The age grows as time passes. */
    w.group = "st.g";
    g = group_stats("st.g");
    w.above = json_number_value(json_object_get(g, "oldest_unhandled_age_s"));
    json_decref(g);
    assert_true(await(age_grew, &w, 5000));
}

static void dlq_redeliveries_and_topics(void **state)
{
    json_t *g, *t;
    long s;

    (void)state;
    json_decref(call(&S, "PUT", "/v1/groups/dq.g", "{\"topics\":[\"dq.t\"],\"max_attempts\":2,"
                                               "\"backoff\":{\"initial_ms\":0,\"max_ms\":0}}", 201));
    json_decref(call(&S, "POST", "/v1/events", "{\"event_id\":\"dq-1\",\"topic\":\"dq.t\"}", 201));
    json_decref(call(&S, "POST", "/v1/events", "{\"event_id\":\"dq-1\",\"topic\":\"dq.t\"}", 200));
    json_decref(call(&S, "POST", "/v1/events", "{\"event_id\":\"dq-1\",\"topic\":\"dq.t\",\"priority\":1}", 409));
    for (int i = 0; i < 2; i++) {
        s = seq_of_claim("/v1/groups/dq.g/claim", "{\"max\":1}");
        settle_one("/v1/groups/dq.g/nack", s, "");
    }
    g = group_stats("dq.g");
    assert_int_equal(num(g, "dlq"), 1);
    assert_int_equal(num(g, "pending"), 0);
    assert_int_equal(num(g, "redeliveries"), 1);
    assert_true(json_is_null(json_object_get(g, "oldest_unhandled_age_s"))); /* DLQ is terminal */
    assert_true(json_number_value(json_object_get(g, "poison_age_s")) >= 0);
    json_decref(g);
    assert_int_equal(metric("mic_group_dlq", "group", "dq.g"), 1);
    assert_int_equal(metric("mic_group_redeliveries_total", "group", "dq.g"), 1);
    t = topic_stats("dq.t");
    assert_int_equal(num(t, "events"), 1);
    assert_int_equal(num(t, "publishes"), 2);
    assert_int_equal(num(t, "duplicates"), 1);
    assert_int_equal(num(t, "conflicts"), 1);
    json_decref(t);
    assert_int_equal(metric("mic_events_published_total", "topic", "dq.t"), 1);
    assert_int_equal(metric("mic_publish_duplicates_total", "topic", "dq.t"), 1);
    assert_int_equal(metric("mic_publish_conflicts_total", "topic", "dq.t"), 1);
}

/* Aggregates listed by GET .../blocked: must match the stats' count. */
static int blocked_listed(const char *group)
{
    char path[128];
    json_t *b;
    int n;

    snprintf(path, sizeof path, "/v1/groups/%s/blocked?limit=1000", group);
    b = call(&S, "GET", path, NULL, 200);
    n = (int)json_array_size(json_object_get(b, "aggregates"));
    json_decref(b);
    return n;
}

static void ordered_figures(void **state)
{
    json_t *g, *o, *c, *d;
    size_t i;
    int gap = 0, behind = 0;

    (void)state;
    json_decref(call(&S, "PUT", "/v1/groups/of.g", "{\"topics\":[\"of.t\"],\"ordered\":true}", 201));
    json_decref(call(&S, "POST", "/v1/events",
                     "{\"events\":[{\"event_id\":\"of-1\",\"topic\":\"of.t\",\"aggregate_type\":\"o\",\"aggregate_id\":\"A\",\"aggregate_version\":1},"
                     "{\"event_id\":\"of-2\",\"topic\":\"of.t\",\"aggregate_type\":\"o\",\"aggregate_id\":\"A\",\"aggregate_version\":2},"
                     "{\"event_id\":\"of-5\",\"topic\":\"of.t\",\"aggregate_type\":\"o\",\"aggregate_id\":\"B\",\"aggregate_version\":5},"
                     "{\"event_id\":\"of-7\",\"topic\":\"of.t\",\"aggregate_type\":\"o\",\"aggregate_id\":\"B\",\"aggregate_version\":7}]}", 201));
    g = group_stats("of.g");
    assert_int_equal(num(g, "blocked_aggregates"), 0); /* both heads claimable */
    assert_int_equal(num(g, "gap_parked_aggregates"), 0);
    json_decref(g);
    assert_int_equal(blocked_listed("of.g"), 0);
    /* Both heads out: each holds its successor back. */
    c = call(&S, "POST", "/v1/groups/of.g/claim", "{\"max\":10}", 200);
    assert_int_equal(json_array_size(json_object_get(c, "deliveries")), 2);
    g = group_stats("of.g");
    assert_int_equal(num(g, "blocked_aggregates"), 2);
    json_decref(g);
    assert_int_equal(blocked_listed("of.g"), 2);
    /* Ack B's v5: B parks on the missing v6. */
    json_array_foreach(json_object_get(c, "deliveries"), i, d)
        if (!strcmp(json_string_value(json_object_get(json_object_get(d, "event"), "event_id")), "of-5")) {
            snprintf(tok, sizeof tok, "%s", json_string_value(json_object_get(d, "lease_token")));
            settle_one("/v1/groups/of.g/ack", num(d, "seq"), "");
        }
    json_decref(c);
    g = group_stats("of.g");
    assert_int_equal(num(g, "gap_parked_aggregates"), 1);
    assert_int_equal(num(g, "blocked_aggregates"), 2); /* A leased, B on a gap */
    assert_int_equal(blocked_listed("of.g"), 2);
    assert_int_equal(num(g, "processing"), 1);
    assert_int_equal(num(g, "dispatched"), 1);
    json_decref(g);
    assert_int_equal(metric("mic_group_gap_parked_aggregates", "group", "of.g"), 1);
    o = call(&S, "GET", "/v1/groups/of.g/oldest?limit=10", NULL, 200);
    json_array_foreach(json_object_get(o, "deliveries"), i, d) {
        const char *why = json_string_value(json_object_get(d, "reason"));
        if (!strcmp(why, "gap")) {
            gap++;
            assert_int_equal(num(d, "missing_version"), 6);
        }
        behind += !strcmp(why, "behind_head");
    }
    assert_int_equal(gap, 1);    /* of-7 waits for v6 */
    assert_int_equal(behind, 1); /* of-2 waits behind of-1 */
    json_decref(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(group_figures),
        cmocka_unit_test(dlq_redeliveries_and_topics),
        cmocka_unit_test(ordered_figures),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
