/*
 * tests/kit/claimkit.c - request and claim helpers shared by the integration
 * tests of groups (test_groups.c, test_ordered.c).
 */
#define _POSIX_C_SOURCE 200809L

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "claimkit.h"

int64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One request with a JSON body (may be NULL); asserts the status and
 * returns the parsed body (the caller decrefs; NULL if none). */
json_t *call(const struct srv *s, const char *method, const char *path,
                    const char *body, long want)
{
    struct resp r;
    json_t *j;

    assert_int_equal(http_json(s, method, path, body, &r), 0);
    if (r.status != want)
        fprintf(stderr, "%s %s %s: want %ld, got %ld: %s\n", method, path,
                body ? body : "", want, r.status, r.body ? r.body : "");
    assert_int_equal(r.status, want);
    j = json_incref(r.json);
    resp_free(&r);
    return j;
}

json_int_t jint(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);

    if (!json_is_integer(v))
        fprintf(stderr, "no integer '%s'\n", k);
    assert_true(json_is_integer(v));
    return json_integer_value(v);
}

const char *jstr(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);

    if (!json_is_string(v))
        fprintf(stderr, "no string '%s'\n", k);
    assert_true(json_is_string(v));
    return json_string_value(v);
}

json_t *dlvs(json_t *r)
{
    return json_object_get(r, "deliveries");
}

json_t *dlv(json_t *r, size_t i)
{
    return json_array_get(dlvs(r), i);
}

json_t *item(json_int_t seq, const char *token)
{
    return json_pack("{s:I,s:s}", "seq", seq, "lease_token", token);
}

/* {"seq","lease_token"} for every delivery of a claim response. */
json_t *items_of(json_t *claim_resp)
{
    json_t *items = json_array(), *d;
    size_t i;

    json_array_foreach(dlvs(claim_resp), i, d)
        json_array_append_new(items, item(jint(d, "seq"), jstr(d, "lease_token")));
    return items;
}

/* POST .../{verb} with "deliveries": 'items' (stolen) plus the fields of
 * the JSON object 'extra' (may be NULL); returns the response. */
json_t *settle(const struct srv *s, const char *group, const char *verb,
                      json_t *items, const char *extra)
{
    json_t *body = extra ? json_loads(extra, 0, NULL) : json_object(), *r;
    char path[256], *txt;

    assert_non_null(body);
    json_object_set_new(body, "deliveries", items);
    txt = json_dumps(body, JSON_COMPACT);
    snprintf(path, sizeof path, "/v1/groups/%s/%s", group, verb);
    r = call(s, "POST", path, txt, 200);
    free(txt);
    json_decref(body);
    assert_true(json_is_array(json_object_get(r, "results")));
    return r;
}

json_t *result(json_t *r, size_t i)
{
    return json_array_get(json_object_get(r, "results"), i);
}

/* Assert that result 'i' is for 'seq' with 'status'. */
void expect_result(json_t *r, size_t i, json_int_t seq, const char *status)
{
    json_t *it = result(r, i);

    assert_non_null(it);
    assert_int_equal(jint(it, "seq"), seq);
    if (strcmp(jstr(it, "status"), status))
        fprintf(stderr, "result %zu (seq %lld): want %s, got %s\n", i, (long long)seq,
                status, jstr(it, "status"));
    assert_string_equal(jstr(it, "status"), status);
}

json_t *stats_of(const struct srv *s, const char *list, const char *key, const char *name)
{
    json_t *st = call(s, "GET", "/v1/stats", NULL, 200), *it, *found = NULL;
    size_t i;

    json_array_foreach(json_object_get(st, list), i, it)
        if (!strcmp(jstr(it, key), name))
            found = json_incref(it);
    json_decref(st);
    return found;
}
