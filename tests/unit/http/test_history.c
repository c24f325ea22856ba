/* test_history.c - the ring behind GET /v1/stats/history (server/http/history.h),
 * in process against a real store and writer (tests/kit/procfx.h) with an
 * injected clock: no sleeps, every time exact.
 *
 * A sample holds each group's backlog (pending + processing) and oldest
 * unhandled age as /v1/stats computes them; the ring keeps the last 360
 * points, oldest first; a group created later is null before it existed;
 * a deleted group's column goes after a whole ring; at most 256 groups are
 * kept, the others counted; a key's scopes narrow the groups shown; the
 * sampler thread samples by itself and stops. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "http/auth.h"
#include "core/buf.h"
#include "engine/claim.h"
#include "core/clock.h"
#include "core/err.h"
#include "engine/group.h"
#include "http/history.h"
#include "procfx.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define T0 PROCFX_T0
#define SEC PROCFX_SEC

/* The history's JSON for 'key' (NULL: every group), parsed (json_decref). */
static json_t *render(mic_history *h, const struct mic_key *key)
{
    struct mic_buf b;
    json_error_t je;
    json_t *j;

    mic_buf_init(&b);
    assert_int_equal(mic_history_render(h, key, &b), MIC_OK);
    j = json_loadb(b.p, b.len, 0, &je);
    if (!j)
        fail_msg("not JSON (%s): %.*s", je.text, (int)b.len, b.p);
    mic_buf_fini(&b);
    return j;
}

/* Group 'name' of a rendered history, or NULL. */
static json_t *group_of(json_t *j, const char *name)
{
    json_t *g;
    size_t i;

    json_array_foreach(json_object_get(j, "groups"), i, g)
        if (!strcmp(json_string_value(json_object_get(g, "group")), name))
            return g;
    return NULL;
}

/* Point 'i' of series 'field' of group 'name' (negative i: from the end). */
static json_t *point(json_t *j, const char *name, const char *field, int i)
{
    json_t *g = group_of(j, name), *a;

    assert_non_null(g);
    a = json_object_get(g, field);
    assert_int_equal(json_array_size(a), json_array_size(json_object_get(j, "times")));
    return json_array_get(a, i < 0 ? json_array_size(a) + (size_t)i : (size_t)i);
}

static void sample_at(mic_history *h, int64_t t)
{
    procfx_now = t;
    assert_int_equal(mic_history_sample(h), MIC_OK);
}

/* Backlog and age follow claims and acks, at the injected times. */
static void figures_follow_the_store(void **state)
{
    struct procfx *f = *state;
    mic_history *h;
    json_t *j, *c, *d, *r;
    char body[256], t[MIC_TIME_LEN + 1];

    assert_int_equal(mic_history_new(&h, f->store), MIC_OK);
    j = render(h, NULL);
    assert_int_equal(json_array_size(json_object_get(j, "times")), 0);
    assert_int_equal(json_array_size(json_object_get(j, "groups")), 0);
    assert_int_equal(json_integer_value(json_object_get(j, "interval_s")), 10);
    assert_int_equal(json_integer_value(json_object_get(j, "points_max")), 360);
    assert_int_equal(json_integer_value(json_object_get(j, "groups_max")), 256);
    json_decref(j);

    procfx_topic(f, "t", "{}");
    procfx_group(f, "g", "{\"topics\":[\"t\"]}");
    sample_at(h, T0);
    assert_int_equal(procfx_publish(f, "{\"events\":[{\"topic\":\"t\",\"event_id\":\"a\",\"payload\":1},"
                                       "{\"topic\":\"t\",\"event_id\":\"b\",\"payload\":2}]}",
                                    NULL, NULL),
                     MIC_OK);
    sample_at(h, T0 + 5 * SEC);
    c = procfx_call(f, MIC_CLAIM, "g", "{\"max\":1,\"lease_ttl_s\":60}");
    sample_at(h, T0 + 6 * SEC); /* one processing, one pending: still 2 */
    d = json_array_get(json_object_get(c, "deliveries"), 0);
    snprintf(body, sizeof body, "{\"deliveries\":[{\"seq\":%lld,\"lease_token\":\"%s\"}]}",
             (long long)json_integer_value(json_object_get(d, "seq")),
             json_string_value(json_object_get(d, "lease_token")));
    r = procfx_call(f, MIC_ACK, "g", body);
    json_decref(r);
    json_decref(c);
    sample_at(h, T0 + 16 * SEC);

    j = render(h, NULL);
    assert_int_equal(json_array_size(json_object_get(j, "times")), 4);
    mic_time_format(T0, t);
    assert_string_equal(json_string_value(json_array_get(json_object_get(j, "times"), 0)), t);
    mic_time_format(T0 + 16 * SEC, t);
    assert_string_equal(json_string_value(json_array_get(json_object_get(j, "times"), 3)), t);
    assert_int_equal(json_integer_value(point(j, "g", "backlog", 0)), 0);
    assert_true(json_is_null(point(j, "g", "oldest_unhandled_age_s", 0))); /* nothing waited */
    assert_int_equal(json_integer_value(point(j, "g", "backlog", 1)), 2);
    assert_float_equal(json_number_value(point(j, "g", "oldest_unhandled_age_s", 1)), 5.0, 0.001);
    assert_int_equal(json_integer_value(point(j, "g", "backlog", 2)), 2);
    assert_int_equal(json_integer_value(point(j, "g", "backlog", 3)), 1);
    assert_float_equal(json_number_value(point(j, "g", "oldest_unhandled_age_s", 3)), 16.0, 0.001);
    assert_int_equal(json_integer_value(json_object_get(j, "groups_untracked")), 0);
    json_decref(j);
    mic_history_free(h);
}

/* 365 samples: the ring keeps the last 360, oldest first; a group made
 * after the first samples is null before it existed; a deleted one is
 * null from then on and gone once absent for a whole ring. */
static void ring_wraps_and_forgets(void **state)
{
    struct procfx *f = *state;
    char t[MIC_TIME_LEN + 1];
    mic_history *h;
    json_t *j;

    assert_int_equal(mic_history_new(&h, f->store), MIC_OK);
    procfx_topic(f, "t", "{}");
    procfx_group(f, "old", "{\"topics\":[\"t\"]}");
    for (int i = 0; i < 3; i++)
        sample_at(h, T0 + i * 10 * SEC);
    procfx_group(f, "new", "{\"topics\":[\"t\"]}");
    for (int i = 3; i < 5; i++)
        sample_at(h, T0 + i * 10 * SEC);
    j = render(h, NULL);
    for (int i = 0; i < 3; i++) { /* before it existed */
        assert_true(json_is_null(point(j, "new", "backlog", i)));
        assert_true(json_is_null(point(j, "new", "oldest_unhandled_age_s", i)));
        assert_int_equal(json_integer_value(point(j, "old", "backlog", i)), 0);
    }
    assert_int_equal(json_integer_value(point(j, "new", "backlog", 3)), 0);
    json_decref(j);
    for (int i = 5; i < 365; i++)
        sample_at(h, T0 + i * 10 * SEC);
    j = render(h, NULL);
    assert_int_equal(json_array_size(json_object_get(j, "times")), 360);
    mic_time_format(T0 + 5 * 10 * SEC, t);
    assert_string_equal(json_string_value(json_array_get(json_object_get(j, "times"), 0)), t);
    mic_time_format(T0 + 364 * 10 * SEC, t);
    assert_string_equal(json_string_value(json_array_get(json_object_get(j, "times"), 359)), t);
    /* "new" existed from the 4th sample on: all 360 kept points have it. */
    assert_int_equal(json_integer_value(point(j, "new", "backlog", 0)), 0);
    json_decref(j);

    /* A fresh history: a group deleted after its first sample. */
    mic_history_free(h);
    assert_int_equal(mic_history_new(&h, f->store), MIC_OK);
    procfx_group(f, "later", "{\"topics\":[\"t\"]}");
    sample_at(h, T0 + 400 * 10 * SEC);
    procfx_group_del(f, "later");
    sample_at(h, T0 + 401 * 10 * SEC);
    j = render(h, NULL);
    assert_int_equal(json_integer_value(point(j, "later", "backlog", 0)), 0);
    assert_true(json_is_null(point(j, "later", "backlog", 1))); /* deleted */
    assert_true(json_is_null(point(j, "later", "oldest_unhandled_age_s", 1)));
    json_decref(j);
    for (int i = 2; i < 360; i++)
        sample_at(h, T0 + (400 + i) * 10 * SEC);
    j = render(h, NULL);
    assert_non_null(group_of(j, "later")); /* absent 359 samples: kept */
    json_decref(j);
    sample_at(h, T0 + 760 * 10 * SEC);
    j = render(h, NULL);
    assert_null(group_of(j, "later")); /* absent a whole ring: gone */
    assert_non_null(group_of(j, "old"));
    json_decref(j);
    mic_history_free(h);
}

/* At most 256 groups are kept; the others are counted, not shown. */
static void groups_are_capped(void **state)
{
    struct procfx *f = *state;
    mic_history *h;
    char name[16];
    json_t *j;

    procfx_topic(f, "t", "{}");
    for (int i = 0; i < MIC_HISTORY_GROUPS + 3; i++) {
        snprintf(name, sizeof name, "g%03d", i);
        procfx_group(f, name, "{\"topics\":[\"t\"]}");
    }
    assert_int_equal(mic_history_new(&h, f->store), MIC_OK);
    sample_at(h, T0);
    j = render(h, NULL);
    assert_int_equal(json_array_size(json_object_get(j, "groups")), MIC_HISTORY_GROUPS);
    assert_int_equal(json_integer_value(json_object_get(j, "groups_untracked")), 3);
    /* Sorted by name. */
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(j, "groups"), 0), "group")),
                        "g000");
    json_decref(j);
    mic_history_free(h);
}

/* A key scoped to group:a-* sees only those groups' columns. */
static void scopes_narrow(void **state)
{
    static const char keys[] =
        "mon monitor 0000000000000000000000000000000000000000000000000000000000000000 group:a-*\n";
    struct procfx *f = *state;
    const struct mic_key *k;
    mic_keys *ks;
    mic_history *h;
    char why[128];
    json_t *j;

    assert_int_equal(mic_keys_parse(keys, strlen(keys), &ks, why, sizeof why), MIC_OK);
    k = mic_keys_at(ks, 0);
    procfx_topic(f, "t", "{}");
    procfx_group(f, "a-1", "{\"topics\":[\"t\"]}");
    procfx_group(f, "b-1", "{\"topics\":[\"t\"]}");
    assert_int_equal(mic_history_new(&h, f->store), MIC_OK);
    sample_at(h, T0);
    j = render(h, k);
    assert_non_null(group_of(j, "a-1"));
    assert_null(group_of(j, "b-1"));
    json_decref(j);
    j = render(h, NULL);
    assert_non_null(group_of(j, "b-1"));
    json_decref(j);
    mic_history_free(h);
    mic_keys_free(ks);
}

static int has_points(mic_history *h, size_t n)
{
    json_t *j = render(h, NULL);
    int ok = json_array_size(json_object_get(j, "times")) >= n;

    json_decref(j);
    return ok;
}

/* The sampler thread samples at once and then every interval, by itself,
 * and stops when asked (its samples awaited with a deadline, not slept). */
static void sampler_runs_and_stops(void **state)
{
    struct procfx *f = *state;
    struct timespec ts = {0, 5 * 1000000};
    mic_history *h;
    int64_t end;
    size_t n;
    json_t *j;

    procfx_topic(f, "t", "{}");
    procfx_group(f, "g", "{\"topics\":[\"t\"]}");
    assert_int_equal(mic_history_new(&h, f->store), MIC_OK);
    assert_int_equal(mic_history_start(h, 20), MIC_OK);
    end = mic_mono_ms() + 20000;
    while (!has_points(h, 3) && mic_mono_ms() < end)
        nanosleep(&ts, NULL); /* polling the condition, bounded */
    assert_true(has_points(h, 3));
    mic_history_stop(h);
    j = render(h, NULL);
    n = json_array_size(json_object_get(j, "times"));
    assert_non_null(group_of(j, "g"));
    json_decref(j);
    j = render(h, NULL); /* stopped: no more samples */
    assert_int_equal(json_array_size(json_object_get(j, "times")), n);
    json_decref(j);
    mic_history_stop(h); /* twice is harmless */
    mic_history_free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(figures_follow_the_store, procfx_setup, procfx_teardown),
        cmocka_unit_test_setup_teardown(ring_wraps_and_forgets, procfx_setup, procfx_teardown),
        cmocka_unit_test_setup_teardown(groups_are_capped, procfx_setup, procfx_teardown),
        cmocka_unit_test_setup_teardown(scopes_narrow, procfx_setup, procfx_teardown),
        cmocka_unit_test_setup_teardown(sampler_runs_and_stops, procfx_setup, procfx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
