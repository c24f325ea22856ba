/* test_http.c - integration tests of the publish path against a real micd
 * on an ephemeral port: every status of DESIGN section 4 for publish and
 * topics, batch atomicity, idempotency, versions, restart, a refused store
 * format, and a full map (507) that still serves reads. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "harness.h"

#include <lmdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct srv S;  /* shared server: --max-body 1M */

static int group_setup(void **state)
{
    static const char *const args[] = {"--max-body", "1M", NULL};

    (void)state;
    return srv_start_shared(&S, args);
}

static int group_teardown(void **state)
{
    (void)state;
    return srv_stop_shared(&S);
}

/* POST 'body' to /v1/events, assert the status, return the response. */
static void publish(const char *body, long status, struct resp *r)
{
    assert_int_equal(http_json(&S, "POST", "/v1/events", body, r), 0);
    if (r->status != status)
        fprintf(stderr, "unexpected %ld: %s\n", r->status, r->body ? r->body : "");
    assert_int_equal(r->status, status);
}

static void expect_error(const char *body, long status, const char *code,
                         const char *field)
{
    struct resp r;
    json_t *f;

    publish(body, status, &r);
    assert_string_equal(resp_error_code(&r), code);
    f = json_object_get(json_object_get(r.json, "error"), "field");
    if (field)
        assert_string_equal(json_string_value(f), field);
    assert_true(json_is_string(json_object_get(json_object_get(r.json, "error"), "message")));
    resp_free(&r);
}

static long get_status(const char *path)
{
    struct resp r;
    long st;

    assert_int_equal(http_json(&S, "GET", path, NULL, &r), 0);
    st = r.status;
    resp_free(&r);
    return st;
}

static json_t *result(const struct resp *r, size_t i)
{
    return json_array_get(json_object_get(r->json, "results"), i);
}

/* ---- Health ---- */

static void health(void **state)
{
    struct resp r;

    (void)state;
    assert_int_equal(http_json(&S, "GET", "/healthz", NULL, &r), 0);
    assert_int_equal(r.status, 200);
    assert_string_equal(json_string_value(json_object_get(r.json, "status")), "ok");
    resp_free(&r);
    assert_int_equal(http_json(&S, "GET", "/readyz", NULL, &r), 0);
    assert_int_equal(r.status, 200);
    assert_string_equal(json_string_value(json_object_get(r.json, "status")), "ready");
    resp_free(&r);
}

static void unknown_route_and_method(void **state)
{
    struct resp r;

    (void)state;
    assert_int_equal(http_json(&S, "GET", "/v1/nothing", NULL, &r), 0);
    assert_int_equal(r.status, 404);
    assert_string_equal(resp_error_code(&r), "not_found");
    resp_free(&r);
    assert_int_equal(http_json(&S, "DELETE", "/v1/events", NULL, &r), 0);
    assert_int_equal(r.status, 405);
    assert_string_equal(resp_error_code(&r), "method_not_allowed");
    resp_free(&r);
}

static void request_id_echoed(void **state)
{
    struct resp r;

    (void)state;
    assert_int_equal(http(&S, "GET", "/healthz", NULL, NULL, 0,
                          "X-Request-Id: abc-123", &r), 0);
    assert_string_equal(r.request_id, "abc-123");
    resp_free(&r);
    assert_int_equal(http(&S, "GET", "/healthz", NULL, NULL, 0,
                          "X-Request-Id: bad id!", &r), 0);
    assert_true(strlen(r.request_id) > 0);
    assert_string_not_equal(r.request_id, "bad id!");
    resp_free(&r);
}

/* ---- Publish ---- */

static void publish_and_get(void **state)
{
    struct resp r, g;
    json_t *res, *ev;
    const char *created;

    (void)state;
    publish("{\"event_id\":\"pg-1\",\"topic\":\"t.pg\",\"event_type\":\"x.created\","
            "\"headers\":{\"h\":\"v\"},\"payload\":{\"n\":[1,2,{\"z\":null}]}}", 201, &r);
    res = result(&r, 0);
    assert_string_equal(json_string_value(json_object_get(res, "event_id")), "pg-1");
    assert_true(json_integer_value(json_object_get(res, "seq")) > 0);
    assert_true(json_is_false(json_object_get(res, "duplicate")));
    created = json_string_value(json_object_get(res, "created_at"));
    assert_int_equal(strlen(created), 27);
    assert_int_equal(created[26], 'Z');

    assert_int_equal(http_json(&S, "GET", "/v1/events/pg-1", NULL, &g), 0);
    assert_int_equal(g.status, 200);
    ev = json_object_get(g.json, "event");
    assert_int_equal(json_integer_value(json_object_get(ev, "seq")),
                     json_integer_value(json_object_get(res, "seq")));
    assert_string_equal(json_string_value(json_object_get(ev, "created_at")), created);
    assert_string_equal(json_string_value(json_object_get(ev, "topic")), "t.pg");
    assert_int_equal(json_integer_value(json_object_get(ev, "schema_version")), 1);
    assert_int_equal(json_integer_value(json_object_get(ev, "priority")), 0);
    assert_int_equal(strlen(json_string_value(json_object_get(ev, "received_at"))), 27);
    assert_string_equal(json_string_value(json_object_get(json_object_get(ev, "headers"), "h")), "v");
    {
        json_t *want = json_loads("{\"n\":[1,2,{\"z\":null}]}", 0, NULL);
        int same = json_equal(json_object_get(ev, "payload"), want);
        json_decref(want);
        assert_true(same);
    }
    assert_true(json_is_array(json_object_get(g.json, "deliveries")));
    resp_free(&g);
    resp_free(&r);
    assert_int_equal(get_status("/v1/events/no-such-event"), 404);
}

static void generated_id_and_created_at(void **state)
{
    struct resp r, g;
    const char *id;
    char path[128];

    (void)state;
    publish("{\"topic\":\"t.gen\",\"created_at\":\"2026-01-01T10:00:00.5+02:00\"}", 201, &r);
    id = json_string_value(json_object_get(result(&r, 0), "event_id"));
    assert_int_equal(strlen(id), 36);
    assert_int_equal(id[14], '7');
    assert_string_equal(json_string_value(json_object_get(result(&r, 0), "created_at")),
                        "2026-01-01T08:00:00.500000Z");
    snprintf(path, sizeof path, "/v1/events/%s", id);
    assert_int_equal(http_json(&S, "GET", path, NULL, &g), 0);
    assert_int_equal(g.status, 200);
    resp_free(&g);
    resp_free(&r);
}

static void duplicates(void **state)
{
    const char *body = "{\"event_id\":\"dup-1\",\"topic\":\"t.dup\",\"payload\":{\"a\":1}}";
    struct resp a, b;

    (void)state;
    publish(body, 201, &a);
    publish(body, 200, &b); /* no created_at sent: still the same content */
    assert_true(json_is_true(json_object_get(result(&b, 0), "duplicate")));
    assert_int_equal(json_integer_value(json_object_get(result(&a, 0), "seq")),
                     json_integer_value(json_object_get(result(&b, 0), "seq")));
    assert_string_equal(json_string_value(json_object_get(result(&a, 0), "created_at")),
                        json_string_value(json_object_get(result(&b, 0), "created_at")));
    resp_free(&a);
    resp_free(&b);
    /* Key order does not matter. */
    publish("{\"payload\":{\"a\":1},\"topic\":\"t.dup\",\"event_id\":\"dup-1\"}", 200, &b);
    resp_free(&b);
}

static void conflicts(void **state)
{
    struct resp g;

    (void)state;
    publish("{\"event_id\":\"cf-1\",\"topic\":\"t.cf\",\"payload\":{\"a\":1}}", 201, &g);
    resp_free(&g);
    expect_error("{\"event_id\":\"cf-1\",\"topic\":\"t.cf\",\"payload\":{\"a\":2}}", 409,
                 "event_id_conflict", "event_id");
    /* A default written out counts as content. */
    expect_error("{\"event_id\":\"cf-1\",\"topic\":\"t.cf\",\"payload\":{\"a\":1},\"priority\":0}",
                 409, "event_id_conflict", "event_id");
    assert_int_equal(http_json(&S, "GET", "/v1/events/cf-1", NULL, &g), 0);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(json_object_get(g.json, "event"), "payload"), "a")), 1);
    resp_free(&g);
}

static void malformed_and_media(void **state)
{
    char deep[200];
    struct resp r;
    int n = 0;

    (void)state;
    expect_error("{\"topic\":", 400, "invalid_json", NULL);
    expect_error("{\"topic\":\"a\",\"topic\":\"b\"}", 400, "invalid_json", NULL);
    n += sprintf(deep + n, "{\"topic\":\"t.deep\",\"payload\":");
    for (int i = 0; i < 32; i++)
        deep[n++] = '[';
    for (int i = 0; i < 32; i++)
        deep[n++] = ']';
    strcpy(deep + n, "}");
    expect_error(deep, 400, "invalid_json", NULL);
    assert_int_equal(http(&S, "POST", "/v1/events", NULL, "{\"topic\":\"t\"}", 13, NULL, &r), 0);
    assert_int_equal(r.status, 415);
    assert_string_equal(resp_error_code(&r), "unsupported_media_type");
    resp_free(&r);
    assert_int_equal(http(&S, "POST", "/v1/events", "text/plain", "{\"topic\":\"t\"}", 13, NULL, &r), 0);
    assert_int_equal(r.status, 415);
    resp_free(&r);
    assert_int_equal(http(&S, "POST", "/v1/events", "application/json; charset=utf-8",
                          "{\"topic\":\"t.cs\"}", 16, NULL, &r), 0);
    assert_int_equal(r.status, 201);
    resp_free(&r);
}

static void invalid_fields(void **state)
{
    (void)state;
    expect_error("[1]", 422, "invalid_event", NULL);
    expect_error("{\"payload\":1}", 422, "invalid_event", "topic");
    expect_error("{\"topic\":\"bad topic\"}", 422, "invalid_event", "topic");
    expect_error("{\"topic\":\"t\",\"nope\":1}", 422, "invalid_event", "nope");
    expect_error("{\"topic\":\"t\",\"event_id\":\"a/b\"}", 422, "invalid_event", "event_id");
    expect_error("{\"topic\":\"t\",\"aggregate_type\":\"o\"}", 422, "invalid_event", "aggregate_id");
    expect_error("{\"topic\":\"t\",\"aggregate_version\":3}", 422, "invalid_event", "aggregate_version");
    expect_error("{\"topic\":\"t\",\"aggregate_type\":\"o\",\"aggregate_id\":\"1\",\"aggregate_version\":0}",
                 422, "invalid_event", "aggregate_version");
    expect_error("{\"topic\":\"t\",\"priority\":256}", 422, "invalid_event", "priority");
    expect_error("{\"topic\":\"t\",\"priority\":\"1\"}", 422, "invalid_event", "priority");
    expect_error("{\"topic\":\"t\",\"created_at\":\"yesterday\"}", 422, "invalid_event", "created_at");
    expect_error("{\"topic\":\"t\",\"created_at\":\"2099-01-01T00:00:00Z\"}", 422, "invalid_event", "created_at");
    expect_error("{\"topic\":\"t\",\"headers\":{\"a\":1}}", 422, "invalid_event", "headers.a");
    expect_error("{\"topic\":\"t\",\"event_type\":\"\"}", 422, "invalid_event", "event_type");
    expect_error("{\"events\":[{\"topic\":\"t\"},{\"topic\":\"\"}]}", 422, "invalid_event", "events[1].topic");
    expect_error("{\"events\":[]}", 422, "invalid_event", "events");
    expect_error("{\"events\":[{\"topic\":\"t\"}],\"topic\":\"t\"}", 422, "invalid_event", "events");
    assert_int_equal(get_status("/v1/topics/bad%20topic"), 404);
}

static void too_large(void **state)
{
    struct resp r;
    size_t n = 1100 * 1024;
    char *big = malloc(n + 1), *p;

    (void)state;
    /* A body past --max-body (1 MiB here). */
    memset(big, ' ', n);
    big[n] = 0;
    memcpy(big, "{\"topic\":\"t.big\"}", 17);
    assert_int_equal(http(&S, "POST", "/v1/events", "application/json", big, n, NULL, &r), 0);
    assert_int_equal(r.status, 413);
    assert_string_equal(resp_error_code(&r), "body_too_large");
    resp_free(&r);
    /* 1001 events. */
    p = big;
    p += sprintf(p, "{\"events\":[");
    for (int i = 0; i < 1001; i++)
        p += sprintf(p, "%s{\"topic\":\"t.big\"}", i ? "," : "");
    strcpy(p, "]}");
    expect_error(big, 413, "batch_too_large", "events");
    free(big);
    /* A payload over the topic's limit. */
    assert_int_equal(http_json(&S, "PUT", "/v1/topics/t.small", "{\"max_payload_bytes\":10}", &r), 0);
    assert_int_equal(r.status, 201);
    resp_free(&r);
    expect_error("{\"topic\":\"t.small\",\"payload\":\"0123456789\"}", 413,
                 "payload_too_large", "payload");
    publish("{\"topic\":\"t.small\",\"payload\":\"01234567\"}", 201, &r);
    resp_free(&r);
}

static void batch_atomic(void **state)
{
    struct resp r;

    (void)state;
    publish("{\"event_id\":\"ba-0\",\"topic\":\"t.ba\",\"aggregate_type\":\"o\","
            "\"aggregate_id\":\"ba\",\"aggregate_version\":1}", 201, &r);
    resp_free(&r);
    /* The last event conflicts: none of the batch is stored. */
    expect_error("{\"events\":["
                 "{\"event_id\":\"ba-1\",\"topic\":\"t.ba\"},"
                 "{\"event_id\":\"ba-2\",\"topic\":\"t.ba\"},"
                 "{\"event_id\":\"ba-3\",\"topic\":\"t.ba\",\"aggregate_type\":\"o\","
                 "\"aggregate_id\":\"ba\",\"aggregate_version\":1}]}",
                 409, "version_conflict", "events[2].aggregate_version");
    assert_int_equal(get_status("/v1/events/ba-1"), 404);
    assert_int_equal(get_status("/v1/events/ba-2"), 404);
    assert_int_equal(get_status("/v1/events/ba-3"), 404);
    /* An invalid topic for a new topic name: nothing auto-created either. */
    expect_error("{\"events\":[{\"event_id\":\"ba-4\",\"topic\":\"t.ba.new\"},"
                 "{\"event_id\":\"ba-0\",\"topic\":\"t.ba\"}]}",
                 409, "event_id_conflict", "events[1].event_id");
    assert_int_equal(get_status("/v1/events/ba-4"), 404);
    assert_int_equal(get_status("/v1/topics/t.ba.new"), 404);
    /* The whole batch goes in together. */
    publish("{\"events\":[{\"event_id\":\"ba-5\",\"topic\":\"t.ba\"},"
            "{\"event_id\":\"ba-6\",\"topic\":\"t.ba\"}]}", 201, &r);
    assert_int_equal(json_integer_value(json_object_get(result(&r, 1), "seq")),
                     json_integer_value(json_object_get(result(&r, 0), "seq")) + 1);
    resp_free(&r);
}

static void batch_repeats(void **state)
{
    struct resp r;

    (void)state;
    publish("{\"events\":[{\"event_id\":\"br-1\",\"topic\":\"t.br\"},"
            "{\"event_id\":\"br-1\",\"topic\":\"t.br\"}]}", 201, &r);
    assert_true(json_is_false(json_object_get(result(&r, 0), "duplicate")));
    assert_true(json_is_true(json_object_get(result(&r, 1), "duplicate")));
    assert_int_equal(json_integer_value(json_object_get(result(&r, 0), "seq")),
                     json_integer_value(json_object_get(result(&r, 1), "seq")));
    resp_free(&r);
    expect_error("{\"events\":[{\"event_id\":\"br-2\",\"topic\":\"t.br\"},"
                 "{\"event_id\":\"br-2\",\"topic\":\"t.br\",\"priority\":3}]}",
                 409, "event_id_conflict", "events[1].event_id");
    assert_int_equal(get_status("/v1/events/br-2"), 404);
    /* All duplicates: 200. */
    publish("{\"events\":[{\"event_id\":\"br-1\",\"topic\":\"t.br\"}]}", 200, &r);
    resp_free(&r);
}

static void versions(void **state)
{
    struct resp r;

    (void)state;
    publish("{\"event_id\":\"v-5\",\"topic\":\"t.v\",\"aggregate_type\":\"o\","
            "\"aggregate_id\":\"v1\",\"aggregate_version\":5}", 201, &r);
    resp_free(&r);
    publish("{\"event_id\":\"v-6\",\"topic\":\"t.v\",\"aggregate_type\":\"o\","
            "\"aggregate_id\":\"v1\",\"aggregate_version\":6}", 201, &r);
    resp_free(&r);
    expect_error("{\"event_id\":\"v-6b\",\"topic\":\"t.v\",\"aggregate_type\":\"o\","
                 "\"aggregate_id\":\"v1\",\"aggregate_version\":6}",
                 409, "version_conflict", "aggregate_version");
    expect_error("{\"event_id\":\"v-4\",\"topic\":\"t.v\",\"aggregate_type\":\"o\","
                 "\"aggregate_id\":\"v1\",\"aggregate_version\":4}",
                 409, "version_below_baseline", "aggregate_version");
    expect_error("{\"event_id\":\"v-x\",\"topic\":\"t.v\",\"aggregate_type\":\"o\","
                 "\"aggregate_id\":\"v1\"}", 422, "invalid_event", "aggregate_version");
    /* Unversioned aggregate stays unversioned. */
    publish("{\"event_id\":\"u-1\",\"topic\":\"t.v\",\"aggregate_type\":\"o\","
            "\"aggregate_id\":\"u1\"}", 201, &r);
    resp_free(&r);
    expect_error("{\"event_id\":\"u-2\",\"topic\":\"t.v\",\"aggregate_type\":\"o\","
                 "\"aggregate_id\":\"u1\",\"aggregate_version\":1}", 422, "invalid_event",
                 "aggregate_version");
    /* Mixing inside one batch. */
    expect_error("{\"events\":[{\"topic\":\"t.v\",\"aggregate_type\":\"o\",\"aggregate_id\":\"m\"},"
                 "{\"topic\":\"t.v\",\"aggregate_type\":\"o\",\"aggregate_id\":\"m\",\"aggregate_version\":2}]}",
                 422, "invalid_event", "events[1].aggregate_version");
    /* A version gap is stored (ordered groups park on it later). */
    publish("{\"event_id\":\"v-9\",\"topic\":\"t.v\",\"aggregate_type\":\"o\","
            "\"aggregate_id\":\"v1\",\"aggregate_version\":9}", 201, &r);
    resp_free(&r);
    /* The same id and content again is a duplicate, not a version conflict. */
    publish("{\"event_id\":\"v-9\",\"topic\":\"t.v\",\"aggregate_type\":\"o\","
            "\"aggregate_id\":\"v1\",\"aggregate_version\":9}", 200, &r);
    resp_free(&r);
}

static void require_versions(void **state)
{
    struct resp r;

    (void)state;
    assert_int_equal(http_json(&S, "PUT", "/v1/topics/t.rv", "{\"require_versions\":true}", &r), 0);
    assert_int_equal(r.status, 201);
    resp_free(&r);
    expect_error("{\"topic\":\"t.rv\"}", 422, "invalid_event", "aggregate_version");
    publish("{\"topic\":\"t.rv\",\"aggregate_type\":\"o\",\"aggregate_id\":\"r\",\"aggregate_version\":1}",
            201, &r);
    resp_free(&r);
}

/* ---- Topics ---- */

static void topics(void **state)
{
    struct resp r;
    json_t *list;
    int found = 0;

    (void)state;
    assert_int_equal(http_json(&S, "PUT", "/v1/topics/t.top", "{\"retention_s\":60}", &r), 0);
    assert_int_equal(r.status, 201);
    assert_string_equal(json_string_value(json_object_get(r.json, "name")), "t.top");
    assert_int_equal(json_integer_value(json_object_get(r.json, "retention_s")), 60);
    resp_free(&r);
    /* A PUT replaces: absent fields take their defaults. */
    assert_int_equal(http_json(&S, "PUT", "/v1/topics/t.top", "{\"max_payload_bytes\":100}", &r), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(json_integer_value(json_object_get(r.json, "retention_s")), 604800);
    resp_free(&r);
    assert_int_equal(http_json(&S, "GET", "/v1/topics/t.top", NULL, &r), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(json_integer_value(json_object_get(r.json, "max_payload_bytes")), 100);
    resp_free(&r);
    assert_int_equal(http_json(&S, "GET", "/v1/topics", NULL, &r), 0);
    list = json_object_get(r.json, "topics");
    for (size_t i = 0; i < json_array_size(list); i++)
        found += strcmp(json_string_value(json_object_get(json_array_get(list, i), "name")),
                        "t.top") == 0;
    assert_int_equal(found, 1);
    resp_free(&r);
    assert_int_equal(http_json(&S, "PUT", "/v1/topics/t.top", "{\"retention_s\":-1}", &r), 0);
    assert_int_equal(r.status, 422);
    assert_string_equal(resp_error_code(&r), "invalid_request");
    resp_free(&r);
    assert_int_equal(http_json(&S, "PUT", "/v1/topics/t.top", "{\"colour\":1}", &r), 0);
    assert_int_equal(r.status, 422);
    resp_free(&r);
    assert_int_equal(http_json(&S, "DELETE", "/v1/topics/t.top", NULL, &r), 0);
    assert_int_equal(r.status, 204);
    resp_free(&r);
    assert_int_equal(get_status("/v1/topics/t.top"), 404);
    assert_int_equal(http_json(&S, "DELETE", "/v1/topics/t.top", NULL, &r), 0);
    assert_int_equal(r.status, 404);
    resp_free(&r);
    /* A topic with events cannot go. */
    publish("{\"topic\":\"t.full\"}", 201, &r);
    resp_free(&r);
    assert_int_equal(http_json(&S, "DELETE", "/v1/topics/t.full", NULL, &r), 0);
    assert_int_equal(r.status, 409);
    assert_string_equal(resp_error_code(&r), "topic_not_empty");
    resp_free(&r);
}

/* ---- Servers of their own ---- */

static void no_auto_topics(void **state)
{
    static const char *const args[] = {"--no-auto-topics", NULL};
    struct srv s;
    struct resp r;

    (void)state;
    memset(&s, 0, sizeof s);
    assert_int_equal(srv_start(&s, args), 0);
    assert_int_equal(http_json(&s, "POST", "/v1/events", "{\"topic\":\"nat\"}", &r), 0);
    assert_int_equal(r.status, 404);
    assert_string_equal(resp_error_code(&r), "topic_not_found");
    resp_free(&r);
    assert_int_equal(http_json(&s, "PUT", "/v1/topics/nat", "{}", &r), 0);
    assert_int_equal(r.status, 201);
    resp_free(&r);
    assert_int_equal(http_json(&s, "POST", "/v1/events", "{\"topic\":\"nat\"}", &r), 0);
    assert_int_equal(r.status, 201);
    resp_free(&r);
    assert_int_equal(srv_stop(&s), 0);
    srv_cleanup(&s);
}

static void restart_keeps_everything(void **state)
{
    struct srv s;
    struct resp r;
    char body[256], path[64];
    char *before[20];

    (void)state;
    memset(&s, 0, sizeof s);
    assert_int_equal(srv_start(&s, NULL), 0);
    assert_int_equal(http_json(&s, "PUT", "/v1/topics/rs", "{\"retention_s\":99}", &r), 0);
    resp_free(&r);
    for (int i = 0; i < 20; i++) {
        snprintf(body, sizeof body, "{\"event_id\":\"rs-%d\",\"topic\":\"rs\",\"aggregate_type\":\"a\","
                 "\"aggregate_id\":\"x\",\"aggregate_version\":%d,\"payload\":{\"i\":%d}}", i, i + 1, i);
        assert_int_equal(http_json(&s, "POST", "/v1/events", body, &r), 0);
        assert_int_equal(r.status, 201);
        resp_free(&r);
        snprintf(path, sizeof path, "/v1/events/rs-%d", i);
        assert_int_equal(http_json(&s, "GET", path, NULL, &r), 0);
        before[i] = strdup(r.body);
        resp_free(&r);
    }
    assert_int_equal(srv_stop(&s), 0); /* SIGTERM: clean exit */
    assert_int_equal(srv_start(&s, NULL), 0);
    for (int i = 0; i < 20; i++) {
        snprintf(path, sizeof path, "/v1/events/rs-%d", i);
        assert_int_equal(http_json(&s, "GET", path, NULL, &r), 0);
        assert_int_equal(r.status, 200);
        assert_string_equal(r.body, before[i]);
        resp_free(&r);
        free(before[i]);
    }
    assert_int_equal(http_json(&s, "GET", "/v1/topics/rs", NULL, &r), 0);
    assert_int_equal(json_integer_value(json_object_get(r.json, "retention_s")), 99);
    resp_free(&r);
    /* Versions and ids are remembered; seq continues. */
    assert_int_equal(http_json(&s, "POST", "/v1/events",
                               "{\"topic\":\"rs\",\"aggregate_type\":\"a\",\"aggregate_id\":\"x\","
                               "\"aggregate_version\":20}", &r), 0);
    assert_int_equal(r.status, 409);
    resp_free(&r);
    assert_int_equal(http_json(&s, "POST", "/v1/events", "{\"topic\":\"rs\"}", &r), 0);
    assert_int_equal(r.status, 201);
    assert_int_equal(json_integer_value(json_object_get(result(&r, 0), "seq")), 21);
    resp_free(&r);
    assert_int_equal(srv_stop(&s), 0);
    srv_cleanup(&s);
}

static void unknown_format_refused(void **state)
{
    struct srv s;
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    unsigned char v99[4] = {0, 0, 0, 99};
    MDB_val k = {6, "format"}, v = {4, v99};

    (void)state;
    memset(&s, 0, sizeof s);
    assert_int_equal(srv_start(&s, NULL), 0);
    assert_int_equal(srv_stop(&s), 0);
    assert_int_equal(mdb_env_create(&env), 0);
    mdb_env_set_maxdbs(env, 32);
    assert_int_equal(mdb_env_open(env, s.dir, 0, 0600), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, "meta", 0, &dbi), 0);
    assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
    assert_int_equal(srv_run_expect_exit(&s, NULL), 4);
    srv_cleanup(&s);
}

static void storage_full(void **state)
{
    static const char *const args[] = {"--map-size", "1M", "--map-max", "2M", NULL};
    struct srv s;
    struct resp r;
    char *body = malloc(200 * 1100 + 64), *p;
    int full = 0, stored = 0;

    (void)state;
    memset(&s, 0, sizeof s);
    assert_int_equal(srv_start(&s, args), 0);
    assert_int_equal(http_json(&s, "POST", "/v1/events", "{\"event_id\":\"sf-first\",\"topic\":\"sf\"}", &r), 0);
    assert_int_equal(r.status, 201);
    resp_free(&r);
    for (int round = 0; round < 100 && !full; round++) {
        p = body + sprintf(body, "{\"events\":[");
        for (int i = 0; i < 200; i++)
            p += sprintf(p, "%s{\"topic\":\"sf\",\"payload\":\"%01000d\"}", i ? "," : "", i);
        strcpy(p, "]}");
        assert_int_equal(http_json(&s, "POST", "/v1/events", body, &r), 0);
        if (r.status == 507) {
            full = 1;
            assert_string_equal(resp_error_code(&r), "storage_full");
        } else {
            assert_int_equal(r.status, 201);
            stored++;
        }
        resp_free(&r);
    }
    free(body);
    assert_true(full);
    assert_true(stored > 0); /* the map grew from 1M before it filled */
    /* Reads still work; a small write that fits still works or is 507. */
    assert_int_equal(http_json(&s, "GET", "/v1/events/sf-first", NULL, &r), 0);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    assert_int_equal(http_json(&s, "GET", "/healthz", NULL, &r), 0);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    assert_int_equal(http_json(&s, "GET", "/readyz", NULL, &r), 0);
    assert_int_equal(r.status, 503);
    assert_string_equal(json_string_value(json_object_get(r.json, "status")), "not_ready");
    resp_free(&r);
    /* And the store is intact after a restart. */
    assert_int_equal(srv_stop(&s), 0);
    assert_int_equal(srv_start(&s, args), 0);
    assert_int_equal(http_json(&s, "GET", "/v1/events/sf-first", NULL, &r), 0);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    assert_int_equal(srv_stop(&s), 0);
    srv_cleanup(&s);
}

struct shot {
    struct srv *s;
    int i;
    struct resp r;
};

static void *shoot(void *arg)
{
    struct shot *sh = arg;
    char body[96];

    snprintf(body, sizeof body, "{\"event_id\":\"ov-%d\",\"topic\":\"ov\"}", sh->i);
    http_json(sh->s, "POST", "/v1/events", body, &sh->r);
    http_thread_done();
    return NULL;
}

static void overloaded_429(void **state)
{
    /* One queued op at most, and the writer pauses 400 ms before each
     * batch: of three simultaneous publishes, at most two can be taken. */
    static const char *const args[] = {"--writer-queue", "1", "--writer-delay-ms", "400", NULL};
    struct srv s;
    struct shot shots[3];
    pthread_t th[3];
    int n201 = 0, n429 = 0;

    (void)state;
    memset(&s, 0, sizeof s);
    assert_int_equal(srv_start(&s, args), 0);
    for (int i = 0; i < 3; i++) {
        shots[i] = (struct shot){.s = &s, .i = i};
        assert_int_equal(pthread_create(&th[i], NULL, shoot, &shots[i]), 0);
    }
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 3; i++) {
        char path[64];
        struct resp g;

        snprintf(path, sizeof path, "/v1/events/ov-%d", i);
        assert_int_equal(http_json(&s, "GET", path, NULL, &g), 0);
        if (shots[i].r.status == 201) {
            n201++;
            assert_int_equal(g.status, 200);
        } else {
            assert_int_equal(shots[i].r.status, 429);
            assert_string_equal(resp_error_code(&shots[i].r), "overloaded");
            assert_string_equal(shots[i].r.retry_after, "1");
            assert_int_equal(g.status, 404); /* refused: nothing stored */
            n429++;
        }
        resp_free(&g);
        resp_free(&shots[i].r);
    }
    assert_true(n429 >= 1);
    assert_true(n201 >= 1);
    assert_int_equal(srv_stop(&s), 0);
    srv_cleanup(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(health),
        cmocka_unit_test(unknown_route_and_method),
        cmocka_unit_test(request_id_echoed),
        cmocka_unit_test(publish_and_get),
        cmocka_unit_test(generated_id_and_created_at),
        cmocka_unit_test(duplicates),
        cmocka_unit_test(conflicts),
        cmocka_unit_test(malformed_and_media),
        cmocka_unit_test(invalid_fields),
        cmocka_unit_test(too_large),
        cmocka_unit_test(batch_atomic),
        cmocka_unit_test(batch_repeats),
        cmocka_unit_test(versions),
        cmocka_unit_test(require_versions),
        cmocka_unit_test(topics),
        cmocka_unit_test(no_auto_topics),
        cmocka_unit_test(restart_keeps_everything),
        cmocka_unit_test(unknown_format_refused),
        cmocka_unit_test(storage_full),
        cmocka_unit_test(overloaded_429),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
