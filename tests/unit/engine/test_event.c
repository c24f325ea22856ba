/* test_event.c - validation, digest and stored form of one published event
 * (server/engine/event.h), on objects built with jansson, written out and read
 * back through the publish path's parser (server/core/jdoc.h). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "core/clock.h"
#include "core/err.h"
#include "engine/event.h"
#include "core/jdoc.h"
#include "store/store.h"
#include "store/log.h"

#define SEC 1000000LL
/* 2026-09-29T08:00:00Z */
#define NOW (1790668800LL * SEC)

static json_t *load(const char *text)
{
    json_error_t jerr;
    json_t *j = json_loads(text, JSON_ALLOW_NUL, &jerr);

    if (!j)
        fail_msg("bad test JSON %s: %s", text, jerr.text);
    return j;
}

/* mic_event_parse on 'obj' written out (keys in their order) and read back
 * as the publish path reads a body (server/core/jdoc.h). */
static int event_parse(json_t *obj, int64_t now, const char *path, struct mic_event *ev,
                       struct mic_error *err)
{
    char *text = json_dumps(obj, JSON_COMPACT | JSON_ENCODE_ANY);
    mic_jdoc *d;
    int rc;

    memset(ev, 0, sizeof *ev);
    assert_non_null(text);
    rc = mic_jdoc_parse(text, strlen(text), 32, &d, NULL, err);
    free(text);
    if (rc)
        return rc;
    rc = mic_event_parse(d, mic_jdoc_root(d), now, path, ev, err);
    mic_jdoc_fini(d);
    return rc;
}

/* 'text' is refused as JSON before any field is looked at. */
static void expect_not_json(const char *text)
{
    struct mic_error err = {0};
    mic_jdoc *d;

    assert_int_equal(mic_jdoc_parse(text, strlen(text), 32, &d, NULL, &err), MIC_EPARSE);
    assert_string_equal(err.code, "invalid_json");
}

/* A string of 'n' copies of 'c' (free it). */
static char *repeat(char c, size_t n)
{
    char *s = malloc(n + 1);

    assert_non_null(s);
    memset(s, c, n);
    s[n] = 0;
    return s;
}

/* Parse 'text' at NOW, expecting success. */
static void parse_ok(const char *text, int64_t now, struct mic_event *ev)
{
    struct mic_error err = {0};
    json_t *obj = load(text);
    int rc = event_parse(obj, now, "", ev, &err);

    json_decref(obj);
    if (rc != MIC_OK)
        fail_msg("%s: rc %d, field '%s': %s", text, rc, err.field, err.message);
}

/* The stored object: ev->json up to json_len, closed again. */
static json_t *stored(const struct mic_event *ev)
{
    const char *nul;
    json_error_t jerr;
    char *s;
    json_t *j;

    assert_non_null(ev->json);
    assert_true(ev->json_len > 0);
    if ((nul = memchr(ev->json, 0, ev->json_len)))
        fail_msg("stored form has a NUL byte at offset %d of %d: %s|%s",
                 (int)(nul - ev->json), (int)ev->json_len, ev->json, nul + 1);
    s = malloc(ev->json_len + 2);
    assert_non_null(s);
    memcpy(s, ev->json, ev->json_len);
    s[ev->json_len] = '}';
    s[ev->json_len + 1] = 0;
    j = json_loads(s, 0, &jerr);
    if (!j)
        fail_msg("stored form + '}' is not JSON (%s): %s", jerr.text, s);
    free(s);
    assert_true(json_is_object(j));
    return j;
}

static void assert_uuid7(const char *id, size_t len)
{
    assert_int_equal(len, 36);
    assert_int_equal(strlen(id), 36);
    for (int i = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23)
            assert_int_equal(id[i], '-');
        else if (!strchr("0123456789abcdef", id[i]))
            fail_msg("'%s': char %d is not lowercase hex", id, i);
    }
    assert_int_equal(id[14], '7');            /* version */
    assert_non_null(strchr("89ab", id[19]));  /* variant 10xx */
}

/* ---- Valid events ---- */

static void minimal_event(void **state)
{
    struct mic_event ev;
    json_t *j;
    char when[MIC_TIME_LEN + 1];

    (void)state;
    parse_ok("{\"topic\":\"orders\"}", NOW, &ev);
    assert_string_equal(ev.topic, "orders");
    assert_int_equal(ev.topiclen, 6);
    assert_int_equal(ev.created_at_us, NOW);
    assert_int_equal(ev.has_agg, 0);
    assert_int_equal(ev.has_version, 0);
    assert_int_equal(ev.priority, 0);
    assert_int_equal(ev.payload_len, 0);
    assert_uuid7(ev.id, ev.idlen);

    /* defaults are filled into the stored form */
    j = stored(&ev);
    mic_time_format(NOW, when);
    assert_string_equal(json_string_value(json_object_get(j, "topic")), "orders");
    assert_string_equal(json_string_value(json_object_get(j, "event_id")), ev.id);
    assert_string_equal(json_string_value(json_object_get(j, "created_at")), when);
    assert_true(json_is_integer(json_object_get(j, "schema_version")));
    assert_int_equal(json_integer_value(json_object_get(j, "schema_version")), 1);
    assert_true(json_is_integer(json_object_get(j, "priority")));
    assert_int_equal(json_integer_value(json_object_get(j, "priority")), 0);
    assert_int_equal(json_object_size(j), 5);
    json_decref(j);
    mic_event_fini(&ev);
    assert_null(ev.json);
}

static void full_event(void **state)
{
    struct mic_event ev;
    uint8_t akey[MIC_AKEY_LEN];
    json_t *j, *h;

    (void)state;
    parse_ok("{\"event_id\":\"evt-1:a.b_c\",\"topic\":\"orders.v1:eu\","
             "\"aggregate_type\":\"order\",\"aggregate_id\":\"o-42\","
             "\"aggregate_version\":5,\"schema_version\":3,"
             "\"event_type\":\"OrderPlaced\",\"correlation_id\":\"c-9\","
             "\"priority\":255,\"created_at\":\"2026-09-29T10:00:00.5+02:00\","
             "\"headers\":{\"trace.id\":\"abc\",\"x-y_z\":\"\"},"
             "\"payload\":{\"amount\":12,\"items\":[1,2]}}",
             NOW, &ev);
    assert_string_equal(ev.id, "evt-1:a.b_c");
    assert_int_equal(ev.idlen, 11);
    assert_string_equal(ev.topic, "orders.v1:eu");
    assert_int_equal(ev.has_agg, 1);
    assert_int_equal(ev.has_version, 1);
    assert_int_equal(ev.version, 5);
    assert_int_equal(ev.priority, 255);
    assert_int_equal(ev.created_at_us, NOW + 500000);
    mic_store_akey("order", 5, "o-42", 4, akey);
    assert_memory_equal(ev.akey, akey, MIC_AKEY_LEN);

    j = stored(&ev);
    /* created_at normalised to UTC with 6 digits; client values kept */
    assert_string_equal(json_string_value(json_object_get(j, "created_at")),
                        "2026-09-29T08:00:00.500000Z");
    assert_string_equal(json_string_value(json_object_get(j, "event_id")),
                        "evt-1:a.b_c");
    assert_int_equal(json_integer_value(json_object_get(j, "schema_version")), 3);
    assert_int_equal(json_integer_value(json_object_get(j, "priority")), 255);
    assert_int_equal(json_integer_value(json_object_get(j, "aggregate_version")), 5);
    h = json_object_get(j, "headers");
    assert_string_equal(json_string_value(json_object_get(h, "trace.id")), "abc");
    assert_int_equal(json_integer_value(
                         json_object_get(json_object_get(j, "payload"), "amount")),
                     12);
    json_decref(j);
    mic_event_fini(&ev);
}

static void parse_leaves_input_alone(void **state)
{
    struct mic_event ev;
    struct mic_error err = {0};
    json_t *obj = load("{\"topic\":\"t\"}");

    (void)state;
    assert_int_equal(event_parse(obj, NOW, "", &ev, &err), MIC_OK);
    assert_int_equal(json_object_size(obj), 1);
    assert_null(json_object_get(obj, "event_id"));
    json_decref(obj);
    mic_event_fini(&ev);
}

static void generated_uuid7(void **state)
{
    struct mic_event a, b;
    char id[37], ms_hex[13];

    (void)state;
    parse_ok("{\"topic\":\"t\"}", NOW, &a);
    parse_ok("{\"topic\":\"t\"}", NOW, &b);
    assert_uuid7(a.id, a.idlen);
    assert_uuid7(b.id, b.idlen);
    assert_string_not_equal(a.id, b.id);
    /* the first 48 bits are the millisecond time */
    snprintf(ms_hex, sizeof ms_hex, "%012llx", (unsigned long long)(NOW / 1000));
    assert_memory_equal(a.id, ms_hex, 8);
    assert_memory_equal(a.id + 9, ms_hex + 8, 4);
    mic_event_fini(&a);
    mic_event_fini(&b);

    for (int i = 0; i < 200; i++) {
        mic_event_uuid7(NOW + i * 1000, id);
        assert_uuid7(id, strlen(id));
    }
}

static void boundaries_accepted(void **state)
{
    struct mic_event ev;
    struct mic_error err = {0};
    char *s200 = repeat('t', 200), *s128 = repeat('e', 128),
         *s256 = repeat('a', 256), *v1024 = repeat('v', 1024),
         *k64 = repeat('k', 64);
    char when[MIC_TIME_LEN + 1];
    json_t *obj, *h;

    (void)state;
    obj = json_pack("{s:s, s:s, s:s, s:s, s:I, s:i, s:s, s:s}",
                    "topic", s200, "event_id", s128, "aggregate_type", s256,
                    "aggregate_id", s256, "aggregate_version",
                    (json_int_t)INT64_MAX, "priority", 0, "event_type", s256,
                    "correlation_id", s256);
    assert_non_null(obj);
    h = json_object();
    for (int i = 0; i < 31; i++) {
        char k[16];
        snprintf(k, sizeof k, "h%d", i);
        json_object_set_new(h, k, json_string("x"));
    }
    json_object_set_new(h, k64, json_string(v1024));
    json_object_set_new(obj, "headers", h);
    assert_int_equal(json_object_size(h), 32);
    /* exactly 300 s in the future is still accepted */
    mic_time_format(NOW + 300 * SEC, when);
    json_object_set_new(obj, "created_at", json_string(when));

    assert_int_equal(event_parse(obj, NOW, "", &ev, &err), MIC_OK);
    assert_int_equal(ev.topiclen, 200);
    assert_int_equal(ev.idlen, 128);
    assert_int_equal(ev.version, (uint64_t)INT64_MAX);
    assert_int_equal(ev.created_at_us, NOW + 300 * SEC);
    mic_event_fini(&ev);
    json_decref(obj);

    /* a time long past is fine (back-fill) */
    parse_ok("{\"topic\":\"t\",\"created_at\":\"1970-01-01T00:00:00Z\","
             "\"schema_version\":1,\"aggregate_type\":\"a\",\"aggregate_id\":\"b\","
             "\"aggregate_version\":1}", NOW, &ev);
    assert_int_equal(ev.created_at_us, 0);
    assert_int_equal(ev.version, 1);
    mic_event_fini(&ev);

    free(s200);
    free(s128);
    free(s256);
    free(v1024);
    free(k64);
}

/* ---- Invalid events ---- */

/* Parse 'obj' with path "" and "events[3].", expecting MIC_EINVAL on
 * 'field'.  Steals 'obj'. */
static void expect_bad_obj(json_t *obj, const char *field, const char *what)
{
    static const char *const paths[] = {"", "events[3]."};

    assert_non_null(obj);
    for (int i = 0; i < 2; i++) {
        struct mic_event ev;
        struct mic_error err;
        char want[256];
        int rc;

        memset(&err, 0, sizeof err);
        rc = event_parse(obj, NOW, paths[i], &ev, &err);
        mic_event_fini(&ev);
        snprintf(want, sizeof want, "%s%s", paths[i], field);
        if (rc != MIC_EINVAL)
            fail_msg("%s: rc %d, want MIC_EINVAL", what, rc);
        assert_int_equal(err.err, MIC_EINVAL);
        assert_non_null(err.code);
        assert_string_equal(err.code, "invalid_event");
        if (strcmp(err.field, want) != 0)
            fail_msg("%s: field '%s', want '%s'", what, err.field, want);
        assert_true(err.message[0] != 0);
    }
    json_decref(obj);
}

static void expect_bad(const char *text, const char *field)
{
    expect_bad_obj(load(text), field, text);
}

/* {"topic":"t", name: value}, value stolen. */
static json_t *with(const char *name, json_t *value)
{
    json_t *obj = load("{\"topic\":\"t\"}");

    assert_non_null(value);
    json_object_set_new(obj, name, value);
    return obj;
}

static void unknown_field(void **state)
{
    (void)state;
    expect_bad("{\"topic\":\"t\",\"bogus\":1}", "bogus");
    expect_bad("{\"topic\":\"t\",\"seq\":1}", "seq");
    expect_bad("{\"topic\":\"t\",\"received_at\":\"2026-09-29T08:00:00Z\"}",
               "received_at");
}

static void bad_topic(void **state)
{
    char *s201 = repeat('t', 201);

    (void)state;
    expect_bad("{}", "topic");
    expect_bad("{\"payload\":1}", "topic");
    expect_bad("{\"topic\":\"\"}", "topic");
    expect_bad("{\"topic\":\"a b\"}", "topic");
    expect_bad("{\"topic\":\"a/b\"}", "topic");
    expect_bad("{\"topic\":\"a*\"}", "topic");
    expect_bad("{\"topic\":\"caf\\u00e9\"}", "topic");
    expect_bad("{\"topic\":5}", "topic");
    expect_bad("{\"topic\":null}", "topic");
    expect_bad_obj(json_pack("{s:s}", "topic", s201), "topic", "201-char topic");
    free(s201);
}

static void bad_event_id(void **state)
{
    char *s129 = repeat('e', 129);

    (void)state;
    expect_bad_obj(with("event_id", json_string(s129)), "event_id",
                   "129-char event_id");
    expect_bad("{\"topic\":\"t\",\"event_id\":\"a b\"}", "event_id");
    expect_bad("{\"topic\":\"t\",\"event_id\":\"a/b\"}", "event_id");
    expect_bad("{\"topic\":\"t\",\"event_id\":\"a?b\"}", "event_id");
    expect_bad("{\"topic\":\"t\",\"event_id\":\"\"}", "event_id");
    expect_bad("{\"topic\":\"t\",\"event_id\":7}", "event_id");
    expect_not_json("{\"topic\":\"t\",\"event_id\":\"a\\u0000b\"}"); /* no JSON_ALLOW_NUL */
    free(s129);
}

static void bad_aggregate(void **state)
{
    char *s257 = repeat('a', 257);

    (void)state;
    expect_bad("{\"topic\":\"t\",\"aggregate_type\":\"order\"}", "aggregate_id");
    expect_bad("{\"topic\":\"t\",\"aggregate_id\":\"o-1\"}", "aggregate_type");
    expect_bad("{\"topic\":\"t\",\"aggregate_version\":1}", "aggregate_version");
    expect_bad("{\"topic\":\"t\",\"aggregate_type\":\"o\",\"aggregate_id\":\"1\","
               "\"aggregate_version\":0}", "aggregate_version");
    expect_bad("{\"topic\":\"t\",\"aggregate_type\":\"o\",\"aggregate_id\":\"1\","
               "\"aggregate_version\":-1}", "aggregate_version");
    expect_bad("{\"topic\":\"t\",\"aggregate_type\":\"o\",\"aggregate_id\":\"1\","
               "\"aggregate_version\":\"1\"}", "aggregate_version");
    expect_bad("{\"topic\":\"t\",\"aggregate_type\":\"o\",\"aggregate_id\":\"1\","
               "\"aggregate_version\":1.5}", "aggregate_version");
    expect_bad("{\"topic\":\"t\",\"aggregate_type\":\"\",\"aggregate_id\":\"1\"}",
               "aggregate_type");
    expect_bad_obj(json_pack("{s:s,s:s,s:s}", "topic", "t", "aggregate_type", s257,
                             "aggregate_id", "x"),
                   "aggregate_type", "257-byte aggregate_type");
    expect_bad_obj(json_pack("{s:s,s:s,s:s}", "topic", "t", "aggregate_type", "x",
                             "aggregate_id", s257),
                   "aggregate_id", "257-byte aggregate_id");
    free(s257);
}

static void bad_integers(void **state)
{
    (void)state;
    expect_bad("{\"topic\":\"t\",\"priority\":256}", "priority");
    expect_bad("{\"topic\":\"t\",\"priority\":-1}", "priority");
    expect_bad("{\"topic\":\"t\",\"priority\":\"1\"}", "priority");
    expect_bad("{\"topic\":\"t\",\"priority\":true}", "priority");
    expect_bad("{\"topic\":\"t\",\"schema_version\":0}", "schema_version");
    expect_bad("{\"topic\":\"t\",\"schema_version\":2147483648}", "schema_version");
    expect_bad("{\"topic\":\"t\",\"schema_version\":null}", "schema_version");
}

static void bad_created_at(void **state)
{
    char when[MIC_TIME_LEN + 1];

    (void)state;
    mic_time_format(NOW + 301 * SEC, when);
    expect_bad_obj(with("created_at", json_string(when)), "created_at",
                   "created_at 301 s ahead");
    mic_time_format(NOW + 300 * SEC + 1, when);
    expect_bad_obj(with("created_at", json_string(when)), "created_at",
                   "created_at 300.000001 s ahead");
    expect_bad("{\"topic\":\"t\",\"created_at\":\"2026-09-29T08:00:00\"}",
               "created_at");
    expect_bad("{\"topic\":\"t\",\"created_at\":\"2026-02-30T08:00:00Z\"}",
               "created_at");
    expect_bad("{\"topic\":\"t\",\"created_at\":\"1969-12-31T23:59:59Z\"}",
               "created_at");
    expect_bad("{\"topic\":\"t\",\"created_at\":1790668800}", "created_at");
    expect_bad("{\"topic\":\"t\",\"created_at\":\"\"}", "created_at");
}

static void deliver_at_accepted(void **state)
{
    struct mic_event ev;
    char when[MIC_TIME_LEN + 1], text[160];
    json_t *j;

    (void)state;
    /* normalised like created_at, in its sorted place; the rest unchanged */
    parse_ok("{\"topic\":\"t\",\"event_id\":\"e1\",\"deliver_at\":\"2026-09-29T10:00:00.25+02:00\","
             "\"payload\":1}", NOW, &ev);
    assert_int_equal(ev.deliver_at_us, NOW + 250000);
    assert_int_equal(ev.created_at_us, NOW);
    mic_time_format(NOW, when);
    snprintf(text, sizeof text,
             "{\"event_id\":\"e1\",\"deliver_at\":\"2026-09-29T08:00:00.250000Z\",\"payload\":1,"
             "\"topic\":\"t\",\"created_at\":\"%s\",\"schema_version\":1,\"priority\":0",
             when);
    assert_int_equal(ev.json_len, strlen(text));
    assert_memory_equal(ev.json, text, ev.json_len);
    mic_event_fini(&ev);

    /* in the past: allowed (deliverable at once) */
    parse_ok("{\"topic\":\"t\",\"deliver_at\":\"2001-01-01T00:00:00Z\"}", NOW, &ev);
    assert_int_equal(ev.deliver_at_us, 978307200LL * SEC);
    j = stored(&ev);
    assert_string_equal(json_string_value(json_object_get(j, "deliver_at")),
                        "2001-01-01T00:00:00.000000Z");
    json_decref(j);
    mic_event_fini(&ev);

    /* exactly 365 days ahead of the receive time is the limit */
    mic_time_format(NOW + 365 * 86400 * SEC, when);
    snprintf(text, sizeof text, "{\"topic\":\"t\",\"deliver_at\":\"%s\"}", when);
    parse_ok(text, NOW, &ev);
    assert_int_equal(ev.deliver_at_us, NOW + 365 * 86400 * SEC);
    mic_event_fini(&ev);

    /* absent: 0, and no member in the stored form */
    parse_ok("{\"topic\":\"t\"}", NOW, &ev);
    assert_int_equal(ev.deliver_at_us, 0);
    assert_null(strstr(ev.json, "deliver_at"));
    mic_event_fini(&ev);
}

static void bad_deliver_at(void **state)
{
    char when[MIC_TIME_LEN + 1];

    (void)state;
    mic_time_format(NOW + 365 * 86400 * SEC + 1, when);
    expect_bad_obj(with("deliver_at", json_string(when)), "deliver_at",
                   "deliver_at 365 days and 1 µs ahead");
    mic_time_format(NOW + 400 * 86400 * SEC, when);
    expect_bad_obj(with("deliver_at", json_string(when)), "deliver_at",
                   "deliver_at 400 days ahead");
    expect_bad("{\"topic\":\"t\",\"deliver_at\":\"2026-09-29T08:00:00\"}", "deliver_at");
    expect_bad("{\"topic\":\"t\",\"deliver_at\":\"2026-09-29 08:00:00Z\"}", "deliver_at");
    expect_bad("{\"topic\":\"t\",\"deliver_at\":\"2026-09-29T08:00:00.1234567Z\"}", "deliver_at");
    expect_bad("{\"topic\":\"t\",\"deliver_at\":\"tomorrow\"}", "deliver_at");
    expect_bad("{\"topic\":\"t\",\"deliver_at\":\"\"}", "deliver_at");
    expect_bad("{\"topic\":\"t\",\"deliver_at\":1790668800}", "deliver_at");
    expect_bad("{\"topic\":\"t\",\"deliver_at\":null}", "deliver_at");
}

static void bad_headers(void **state)
{
    json_t *h = json_object();
    char *v1025 = repeat('v', 1025), *k65 = repeat('k', 65);
    char field[128];

    (void)state;
    for (int i = 0; i < 33; i++) {
        char k[16];
        snprintf(k, sizeof k, "h%d", i);
        json_object_set_new(h, k, json_string("x"));
    }
    expect_bad_obj(with("headers", h), "headers", "33 headers");
    expect_bad("{\"topic\":\"t\",\"headers\":{\"bad key\":\"v\"}}",
               "headers.bad key");
    expect_bad("{\"topic\":\"t\",\"headers\":{\"a:b\":\"v\"}}", "headers.a:b");
    expect_bad("{\"topic\":\"t\",\"headers\":{\"\":\"v\"}}", "headers.");
    expect_bad("{\"topic\":\"t\",\"headers\":{\"k\":1}}", "headers.k");
    expect_bad("{\"topic\":\"t\",\"headers\":{\"k\":null}}", "headers.k");
    expect_bad("{\"topic\":\"t\",\"headers\":{\"k\":{\"a\":\"b\"}}}", "headers.k");
    expect_bad_obj(with("headers", json_pack("{s:s}", "k", v1025)), "headers.k",
                   "1025-byte header value");
    /* the key is cut to 64 characters in the field name */
    snprintf(field, sizeof field, "headers.%.64s", k65);
    expect_bad_obj(with("headers", json_pack("{s:s}", k65, "v")), field,
                   "65-char header key");
    expect_bad("{\"topic\":\"t\",\"headers\":[\"a\"]}", "headers");
    expect_bad("{\"topic\":\"t\",\"headers\":\"a:b\"}", "headers");
    free(v1025);
    free(k65);
}

static void bad_strings(void **state)
{
    char *s257 = repeat('c', 257);

    (void)state;
    expect_bad("{\"topic\":\"t\",\"event_type\":\"\"}", "event_type");
    expect_bad("{\"topic\":\"t\",\"event_type\":3}", "event_type");
    expect_not_json("{\"topic\":\"t\",\"event_type\":\"a\\u0000b\"}");
    expect_bad("{\"topic\":\"t\",\"correlation_id\":\"\"}", "correlation_id");
    expect_bad_obj(with("correlation_id", json_string(s257)), "correlation_id",
                   "257-byte correlation_id");
    free(s257);
}

static void not_an_object(void **state)
{
    struct mic_event ev;
    struct mic_error err = {0};
    json_t *arr = load("[{\"topic\":\"t\"}]");

    (void)state;
    assert_int_equal(event_parse(arr, NOW, "", &ev, &err), MIC_EINVAL);
    assert_string_equal(err.code, "invalid_event");
    mic_event_fini(&ev);
    json_decref(arr);
}

/* ---- Digest ---- */

static void digest_of(const char *text, int64_t now, uint8_t out[MIC_DIGEST_LEN])
{
    struct mic_event ev;

    parse_ok(text, now, &ev);
    memcpy(out, ev.digest, MIC_DIGEST_LEN);
    mic_event_fini(&ev);
}

static void digest_ignores_key_order(void **state)
{
    uint8_t a[MIC_DIGEST_LEN], b[MIC_DIGEST_LEN];

    (void)state;
    digest_of("{\"topic\":\"t\",\"event_id\":\"e1\",\"priority\":1,"
              "\"payload\":{\"b\":1,\"a\":{\"y\":[1,{\"q\":1,\"p\":2}],\"x\":2}}}",
              NOW, a);
    digest_of("{\"payload\":{\"a\":{\"x\":2,\"y\":[1,{\"p\":2,\"q\":1}]},\"b\":1},"
              "\"priority\":1,\"event_id\":\"e1\",\"topic\":\"t\"}",
              NOW, b);
    assert_memory_equal(a, b, MIC_DIGEST_LEN);
}

static void digest_counts_written_defaults(void **state)
{
    uint8_t a[MIC_DIGEST_LEN], b[MIC_DIGEST_LEN], c[MIC_DIGEST_LEN];

    (void)state;
    digest_of("{\"topic\":\"t\",\"event_id\":\"e1\",\"payload\":{\"n\":1}}", NOW, a);
    digest_of("{\"topic\":\"t\",\"event_id\":\"e1\",\"payload\":{\"n\":1},"
              "\"priority\":0}", NOW, b);
    digest_of("{\"topic\":\"t\",\"event_id\":\"e1\",\"payload\":{\"n\":1},"
              "\"schema_version\":1}", NOW, c);
    assert_memory_not_equal(a, b, MIC_DIGEST_LEN);
    assert_memory_not_equal(a, c, MIC_DIGEST_LEN);
    assert_memory_not_equal(b, c, MIC_DIGEST_LEN);
}

static void digest_covers_payload(void **state)
{
    uint8_t a[MIC_DIGEST_LEN], b[MIC_DIGEST_LEN], c[MIC_DIGEST_LEN];

    (void)state;
    digest_of("{\"topic\":\"t\",\"event_id\":\"e1\",\"payload\":{\"n\":1}}", NOW, a);
    digest_of("{\"topic\":\"t\",\"event_id\":\"e1\",\"payload\":{\"n\":2}}", NOW, b);
    digest_of("{\"topic\":\"t\",\"event_id\":\"e1\",\"payload\":{\"n\":\"1\"}}", NOW, c);
    assert_memory_not_equal(a, b, MIC_DIGEST_LEN);
    assert_memory_not_equal(a, c, MIC_DIGEST_LEN);
}

static void digest_excludes_filled_defaults(void **state)
{
    struct mic_event a, b;
    const char *text = "{\"topic\":\"t\",\"event_id\":\"e1\",\"payload\":[1]}";

    (void)state;
    parse_ok(text, NOW, &a);
    parse_ok(text, NOW + 5 * SEC, &b);
    assert_true(a.created_at_us != b.created_at_us);
    assert_memory_equal(a.digest, b.digest, MIC_DIGEST_LEN);
    mic_event_fini(&a);
    mic_event_fini(&b);

    /* a generated event_id is not part of the digest either */
    parse_ok("{\"topic\":\"t\"}", NOW, &a);
    parse_ok("{\"topic\":\"t\"}", NOW, &b);
    assert_string_not_equal(a.id, b.id);
    assert_memory_equal(a.digest, b.digest, MIC_DIGEST_LEN);
    mic_event_fini(&a);
    mic_event_fini(&b);

    /* a created_at the client wrote is */
    parse_ok("{\"topic\":\"t\",\"created_at\":\"2026-09-29T08:00:00Z\"}", NOW, &a);
    parse_ok("{\"topic\":\"t\",\"created_at\":\"2026-09-29T08:00:01Z\"}", NOW, &b);
    assert_memory_not_equal(a.digest, b.digest, MIC_DIGEST_LEN);
    mic_event_fini(&a);
    mic_event_fini(&b);
}

/* The digest is SHA-256 of the canonical text itself: compact, keys sorted
 * at every level, values as sent.  Pinned bytes, so that adding fields
 * (deliver_at) leaves the digest of every event that does not carry them
 * unchanged. */
static void assert_digest_of_text(const char *event, const char *canon)
{
    struct mic_event ev;
    unsigned char md[MIC_DIGEST_LEN];

    parse_ok(event, NOW, &ev);
    EVP_Digest(canon, strlen(canon), md, NULL, EVP_sha256(), NULL);
    if (memcmp(md, ev.digest, MIC_DIGEST_LEN))
        fail_msg("the digest of %s is not SHA-256 of %s", event, canon);
    mic_event_fini(&ev);
}

static void digest_is_sha256_of_canonical_text(void **state)
{
    (void)state;
    assert_digest_of_text(
        "{\"topic\":\"t\",\"event_id\":\"e1\",\"priority\":3,\"created_at\":\"2026-09-29T10:00:00+02:00\","
        "\"headers\":{\"z\":\"1\",\"a\":\"2\"},\"payload\":{\"b\":[1,{\"y\":1,\"x\":null}],\"a\":\"\\u00e9\"}}",
        "{\"created_at\":\"2026-09-29T10:00:00+02:00\",\"event_id\":\"e1\",\"headers\":{\"a\":\"2\",\"z\":\"1\"},"
        "\"payload\":{\"a\":\"\xc3\xa9\",\"b\":[1,{\"x\":null,\"y\":1}]},\"priority\":3,\"topic\":\"t\"}");
    /* deliver_at is covered as sent (not normalised), in its sorted place */
    assert_digest_of_text(
        "{\"topic\":\"t\",\"event_id\":\"e1\",\"deliver_at\":\"2026-09-29T10:00:00.5+02:00\"}",
        "{\"deliver_at\":\"2026-09-29T10:00:00.5+02:00\",\"event_id\":\"e1\",\"topic\":\"t\"}");
}

static void digest_covers_deliver_at(void **state)
{
    uint8_t a[MIC_DIGEST_LEN], b[MIC_DIGEST_LEN], c[MIC_DIGEST_LEN], d[MIC_DIGEST_LEN];

    (void)state;
    digest_of("{\"topic\":\"t\",\"event_id\":\"e1\"}", NOW, a);
    digest_of("{\"topic\":\"t\",\"event_id\":\"e1\",\"deliver_at\":\"2026-09-29T09:00:00Z\"}", NOW, b);
    digest_of("{\"topic\":\"t\",\"event_id\":\"e1\",\"deliver_at\":\"2026-09-29T09:00:01Z\"}", NOW, c);
    /* the same instant written otherwise is other content, as for created_at */
    digest_of("{\"topic\":\"t\",\"event_id\":\"e1\",\"deliver_at\":\"2026-09-29T11:00:00+02:00\"}", NOW, d);
    assert_memory_not_equal(a, b, MIC_DIGEST_LEN);
    assert_memory_not_equal(b, c, MIC_DIGEST_LEN);
    assert_memory_not_equal(b, d, MIC_DIGEST_LEN);
    /* a resend at another receive time is the same content */
    digest_of("{\"topic\":\"t\",\"event_id\":\"e1\",\"deliver_at\":\"2026-09-29T09:00:00Z\"}",
              NOW + 10 * SEC, c);
    assert_memory_equal(b, c, MIC_DIGEST_LEN);
}

/* ---- Payload size and aggregate key ---- */

static void assert_payload_len(const char *payload)
{
    char text[512];
    struct mic_event ev;
    json_t *p = load(payload);
    char *compact = json_dumps(p, JSON_COMPACT | JSON_ENCODE_ANY);

    assert_non_null(compact);
    snprintf(text, sizeof text, "{\"topic\":\"t\",\"payload\":%s}", payload);
    parse_ok(text, NOW, &ev);
    assert_int_equal(ev.payload_len, strlen(compact));
    mic_event_fini(&ev);
    free(compact);
    json_decref(p);
}

static void payload_len_is_compact_size(void **state)
{
    struct mic_event ev;

    (void)state;
    assert_payload_len("{ \"a\" : [ 1, 2, \"x\" ], \"b\" : { } }");
    assert_payload_len("[1,2,3]");
    parse_ok("{\"topic\":\"t\",\"payload\":{ \"a\" : [ 1, 2, \"x\" ] }}", NOW, &ev);
    assert_int_equal(ev.payload_len, strlen("{\"a\":[1,2,\"x\"]}"));
    mic_event_fini(&ev);
    parse_ok("{\"topic\":\"t\",\"payload\":\"hi\"}", NOW, &ev);
    assert_int_equal(ev.payload_len, 4);
    mic_event_fini(&ev);
    parse_ok("{\"topic\":\"t\",\"payload\":null}", NOW, &ev);
    assert_int_equal(ev.payload_len, 4);
    mic_event_fini(&ev);
    parse_ok("{\"topic\":\"t\"}", NOW, &ev);
    assert_int_equal(ev.payload_len, 0);
    mic_event_fini(&ev);
}

static void akey_matches_store(void **state)
{
    struct mic_event a, b;
    uint8_t want[MIC_AKEY_LEN];

    (void)state;
    parse_ok("{\"topic\":\"t\",\"aggregate_type\":\"ab\",\"aggregate_id\":\"c\"}",
             NOW, &a);
    parse_ok("{\"topic\":\"t\",\"aggregate_type\":\"a\",\"aggregate_id\":\"bc\"}",
             NOW, &b);
    assert_int_equal(a.has_agg, 1);
    assert_int_equal(a.has_version, 0);
    mic_store_akey("ab", 2, "c", 1, want);
    assert_memory_equal(a.akey, want, MIC_AKEY_LEN);
    mic_store_akey("a", 1, "bc", 2, want);
    assert_memory_equal(b.akey, want, MIC_AKEY_LEN);
    assert_memory_not_equal(a.akey, b.akey, MIC_AKEY_LEN);
    mic_event_fini(&a);
    mic_event_fini(&b);

    /* no aggregate: zeros */
    parse_ok("{\"topic\":\"t\"}", NOW, &a);
    memset(want, 0, sizeof want);
    assert_memory_equal(a.akey, want, MIC_AKEY_LEN);
    mic_event_fini(&a);
}

/* ---- Name checks ---- */

static void topic_and_id_names(void **state)
{
    char *s = repeat('x', 201);

    (void)state;
    assert_true(mic_event_topic_ok("a", 1));
    assert_true(mic_event_topic_ok("A-z_0.9:x", 9));
    assert_true(mic_event_topic_ok(s, 200));
    assert_false(mic_event_topic_ok(s, 201));
    assert_false(mic_event_topic_ok("", 0));
    assert_false(mic_event_topic_ok("a b", 3));
    assert_false(mic_event_topic_ok("a/b", 3));
    assert_false(mic_event_topic_ok("a*", 2));
    assert_false(mic_event_topic_ok("a\0b", 3));
    assert_false(mic_event_topic_ok("caf\xc3\xa9", 5));
    assert_true(mic_event_topic_ok("ab/c", 2)); /* only 'len' bytes count */

    assert_true(mic_event_id_ok("e", 1));
    assert_true(mic_event_id_ok("0190c3f0-aaaa-7bbb-8ccc-dddddddddddd", 36));
    assert_true(mic_event_id_ok("a:b.c_d-E", 9));
    assert_true(mic_event_id_ok(s, 128));
    assert_false(mic_event_id_ok(s, 129));
    assert_false(mic_event_id_ok("", 0));
    assert_false(mic_event_id_ok("a b", 3));
    assert_false(mic_event_id_ok("a/b", 3));
    assert_false(mic_event_id_ok("a%20", 4));
    assert_false(mic_event_id_ok("a#", 2));
    assert_false(mic_event_id_ok("a\0", 2));
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(minimal_event),
        cmocka_unit_test(full_event),
        cmocka_unit_test(parse_leaves_input_alone),
        cmocka_unit_test(generated_uuid7),
        cmocka_unit_test(boundaries_accepted),
        cmocka_unit_test(unknown_field),
        cmocka_unit_test(bad_topic),
        cmocka_unit_test(bad_event_id),
        cmocka_unit_test(bad_aggregate),
        cmocka_unit_test(bad_integers),
        cmocka_unit_test(bad_created_at),
        cmocka_unit_test(deliver_at_accepted),
        cmocka_unit_test(bad_deliver_at),
        cmocka_unit_test(bad_headers),
        cmocka_unit_test(bad_strings),
        cmocka_unit_test(not_an_object),
        cmocka_unit_test(digest_ignores_key_order),
        cmocka_unit_test(digest_counts_written_defaults),
        cmocka_unit_test(digest_covers_payload),
        cmocka_unit_test(digest_excludes_filled_defaults),
        cmocka_unit_test(digest_is_sha256_of_canonical_text),
        cmocka_unit_test(digest_covers_deliver_at),
        cmocka_unit_test(payload_len_is_compact_size),
        cmocka_unit_test(akey_matches_store),
        cmocka_unit_test(topic_and_id_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
