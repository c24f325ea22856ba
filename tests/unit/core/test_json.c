/* test_json.c - request body loading under limits (server/core/json.h) and the
 * response buffer's JSON helpers (server/core/buf.h). */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/err.h"
#include "core/json.h"

/* 'depth' nested arrays around 'inner' (free it). */
static char *nested(int depth, const char *inner)
{
    size_t n = strlen(inner), len = 2 * (size_t)depth + n;
    char *s = malloc(len + 1);

    assert_non_null(s);
    memset(s, '[', (size_t)depth);
    memcpy(s + depth, inner, n);
    memset(s + depth + n, ']', (size_t)depth);
    s[len] = 0;
    return s;
}

static int load(const char *body, int max_depth, json_t **out,
                struct mic_error *err)
{
    memset(err, 0, sizeof *err);
    *out = NULL;
    return mic_json_load(body, strlen(body), max_depth, out, err);
}

static void assert_ok(const char *body, int max_depth)
{
    struct mic_error err;
    json_t *j;

    if (load(body, max_depth, &j, &err) != MIC_OK)
        fail_msg("'%.80s' refused: %s", body, err.message);
    assert_non_null(j);
    json_decref(j);
}

static void assert_invalid(const char *body, int max_depth)
{
    struct mic_error err;
    json_t *j;
    int rc = load(body, max_depth, &j, &err);

    if (rc != MIC_EPARSE)
        fail_msg("'%.80s' gave %d, want MIC_EPARSE", body, rc);
    assert_null(j);
    assert_int_equal(err.err, MIC_EPARSE);
    assert_non_null(err.code);
    assert_string_equal(err.code, "invalid_json");
    assert_string_equal(err.field, "");
    assert_true(err.message[0] != 0);
}

/* ---- Depth ---- */

static void depth_limit(void **state)
{
    char *ok = nested(32, "1"), *deep = nested(33, "1");

    (void)state;
    assert_ok(ok, 32);
    assert_invalid(deep, 32);
    assert_ok(deep, 33);
    free(ok);
    free(deep);

    /* objects count like arrays */
    assert_ok("{\"a\":{\"b\":[1]}}", 3);
    assert_invalid("{\"a\":{\"b\":[1]}}", 2);
    assert_invalid("{\"a\":{\"b\":{}}}", 2);
    /* siblings do not add up */
    assert_ok("[[1],[2],{\"a\":[3]},[[]]]", 3);
    assert_invalid("[[1],[2],{\"a\":[3]},[[[]]]]", 3);
}

static void depth_message_names_limit(void **state)
{
    char *deep = nested(33, "");
    struct mic_error err;
    json_t *j;

    (void)state;
    assert_int_equal(load(deep, 32, &j, &err), MIC_EPARSE);
    assert_non_null(strstr(err.message, "32"));
    free(deep);
}

static void brackets_in_strings_do_not_count(void **state)
{
    char *s;

    (void)state;
    s = nested(32, "\"[[[[{{{{\"");
    assert_ok(s, 32);
    free(s);
    /* an escaped quote does not end the string */
    s = nested(32, "\"a\\\"[[[[{{{{\"");
    assert_ok(s, 32);
    free(s);
    /* an escaped backslash does end it before the quote */
    s = nested(32, "\"a\\\\\",\"[[[[[\"");
    assert_ok(s, 32);
    free(s);
    /* and real brackets after a string still count */
    s = nested(32, "\"]]]]\",[1]");
    assert_invalid(s, 32);
    free(s);
    assert_ok("{\"[[[[\":\"{{{{\"}", 1);
}

/* ---- Other rejections ---- */

static void duplicate_keys_rejected(void **state)
{
    (void)state;
    assert_invalid("{\"a\":1,\"a\":2}", 32);
    assert_invalid("{\"a\":1,\"a\":1}", 32);
    assert_invalid("{\"x\":{\"a\":1,\"b\":2,\"a\":3}}", 32);
    assert_invalid("[{\"k\":null,\"k\":null}]", 32);
    assert_ok("{\"a\":1,\"A\":2,\"b\":{\"a\":3}}", 32);
}

static void malformed_rejected(void **state)
{
    static const char *const bad[] = {
        "", " ", "{", "}", "[1,]", "{\"a\":}", "{\"a\" 1}", "{'a':1}",
        "{\"a\":1,}", "nul", "tru", "[1 2]", "{} x", "{}{}", "\"abc",
        "{\"a\":\"\\u0000\"}", "{\"a\":01}", "[NaN]", "{\"a\":\"\\x\"}",
        "[\"\xff\"]",
    };
    json_t *j;

    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_invalid(bad[i], 32);
    /* 'err' may be NULL */
    j = NULL;
    assert_int_equal(mic_json_load("{", 1, 32, &j, NULL), MIC_EPARSE);
    assert_null(j);
}

static void only_len_bytes_read(void **state)
{
    const char *body = "{\"a\":[1,2]}garbage";
    struct mic_error err = {0};
    json_t *j = NULL;

    (void)state;
    assert_int_equal(mic_json_load(body, 11, 32, &j, &err), MIC_OK);
    assert_true(json_is_array(json_object_get(j, "a")));
    assert_int_equal(json_array_size(json_object_get(j, "a")), 2);
    json_decref(j);
    assert_int_equal(mic_json_load(body, 10, 32, &j, &err), MIC_EPARSE);
}

static void scalars_and_values_load(void **state)
{
    struct mic_error err;
    json_t *j;

    (void)state;
    assert_int_equal(load("{\"topic\":\"t\",\"n\":[1,2.5,true,null]}", 32, &j, &err),
                     MIC_OK);
    assert_string_equal(json_string_value(json_object_get(j, "topic")), "t");
    assert_int_equal(json_array_size(json_object_get(j, "n")), 4);
    json_decref(j);
    assert_ok("[]", 32);
    assert_ok("{}", 1);
    assert_ok(" \n{\"a\" : \"\\u00e9\\n\"}\t", 32);
}

/* ---- Content type ---- */

static void content_type(void **state)
{
    (void)state;
    assert_true(mic_json_content_type_ok("application/json"));
    assert_true(mic_json_content_type_ok("application/json; charset=utf-8"));
    assert_true(mic_json_content_type_ok("application/json;charset=UTF-8"));
    assert_true(mic_json_content_type_ok("APPLICATION/JSON"));
    assert_true(mic_json_content_type_ok("Application/Json"));
    assert_false(mic_json_content_type_ok("application/jsonx"));
    assert_false(mic_json_content_type_ok("application/json-patch+json"));
    assert_false(mic_json_content_type_ok("application/jso"));
    assert_false(mic_json_content_type_ok(NULL));
    assert_false(mic_json_content_type_ok(""));
    assert_false(mic_json_content_type_ok("text/plain"));
    assert_false(mic_json_content_type_ok("text/json"));
    assert_false(mic_json_content_type_ok("application/x-ndjson"));
}

/* ---- Buffers ---- */

/* mic_buf_json_str of 'n' bytes of 's' must equal 'want' and decode back
 * to the same bytes. */
/* The page-size query argument: its default when absent, 1..1000 taken,
 * anything else refused as invalid_request on "limit". */
static void limit_arg(void **state)
{
    static const char *const bad[] = {"0", "1001", "-5", "abc", "5x", ""};
    struct mic_error e;
    long v = 0;

    (void)state;
    assert_int_equal(mic_limit_arg(NULL, 42, &v, &e), MIC_OK);
    assert_int_equal(v, 42);
    assert_int_equal(mic_limit_arg("1", 42, &v, &e), MIC_OK);
    assert_int_equal(v, 1);
    assert_int_equal(mic_limit_arg("1000", 42, &v, &e), MIC_OK);
    assert_int_equal(v, 1000);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        v = 7;
        memset(&e, 0, sizeof e);
        assert_int_equal(mic_limit_arg(bad[i], 42, &v, &e), MIC_EINVAL);
        assert_string_equal(e.code, "invalid_request");
        assert_string_equal(e.field, "limit");
        assert_int_equal(v, 7); /* untouched */
    }
}

/* A body's member names: all known passes; the first unknown one is
 * refused as invalid_request, named as the field and in the message. */
static void keys_known(void **state)
{
    static const char *const known[] = {"topic", "from", NULL};
    json_t *ok = json_pack("{s:s, s:s}", "topic", "t", "from", "x");
    json_t *bad = json_pack("{s:s, s:i}", "topic", "t", "form", 1);
    struct mic_error e;

    (void)state;
    assert_int_equal(mic_json_keys_known(ok, known, &e), MIC_OK);
    memset(&e, 0, sizeof e);
    assert_int_equal(mic_json_keys_known(bad, known, &e), MIC_EINVAL);
    assert_string_equal(e.code, "invalid_request");
    assert_string_equal(e.field, "form");
    assert_string_equal(e.message, "unknown field 'form'");
    json_decref(ok);
    json_decref(bad);
}

/* A member that is one of two words: absent leaves *out, each word sets
 * 0 or 1, anything else (another word, not a string) is refused. */
static void either_word(void **state)
{
    json_t *o = json_pack("{s:s, s:s, s:s, s:b}", "a", "effect", "b", "projection", "c", "other",
                          "d", 1);
    struct mic_error e;
    int v = 7;

    (void)state;
    assert_int_equal(mic_json_either(o, "none", "projection", "effect", &v, "why", &e), MIC_OK);
    assert_int_equal(v, 7);
    assert_int_equal(mic_json_either(o, "a", "projection", "effect", &v, "why", &e), MIC_OK);
    assert_int_equal(v, 1);
    assert_int_equal(mic_json_either(o, "b", "projection", "effect", &v, "why", &e), MIC_OK);
    assert_int_equal(v, 0);
    for (int i = 0; i < 2; i++) {
        v = 7;
        memset(&e, 0, sizeof e);
        assert_int_equal(mic_json_either(o, i ? "d" : "c", "projection", "effect", &v,
                                         "c is projection or effect", &e), MIC_EINVAL);
        assert_string_equal(e.code, "invalid_request");
        assert_string_equal(e.field, i ? "d" : "c");
        assert_string_equal(e.message, "c is projection or effect");
        assert_int_equal(v, 7);
    }
    json_decref(o);
}

static void assert_json_str(const char *s, size_t n, const char *want)
{
    struct mic_buf b;
    json_error_t jerr;
    json_t *j;

    mic_buf_init(&b);
    mic_buf_json_str(&b, s, n);
    assert_false(b.oom);
    assert_non_null(b.p);
    assert_int_equal(b.len, strlen(want));
    assert_memory_equal(b.p, want, b.len);
    assert_int_equal(b.p[b.len], 0);
    j = json_loadb(b.p, b.len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    if (!j)
        fail_msg("%s is not JSON: %s", b.p, jerr.text);
    assert_true(json_is_string(j));
    assert_int_equal(json_string_length(j), n);
    assert_memory_equal(json_string_value(j), s, n);
    json_decref(j);
    mic_buf_fini(&b);
    assert_null(b.p);
}

static void json_str_escapes(void **state)
{
    (void)state;
    assert_json_str("", 0, "\"\"");
    assert_json_str("plain", 5, "\"plain\"");
    assert_json_str("a\"b", 3, "\"a\\\"b\"");
    assert_json_str("a\\b", 3, "\"a\\\\b\"");
    assert_json_str("\"\\\"", 3, "\"\\\"\\\\\\\"\"");
    assert_json_str("l1\nl2\r\t\b\f", 9, "\"l1\\nl2\\r\\t\\b\\f\"");
    assert_json_str("\x01\x1f\x7f", 3, "\"\\u0001\\u001f\x7f\"");
    assert_json_str("a\0b", 3, "\"a\\u0000b\"");
    assert_json_str("caf\xc3\xa9 /", 7, "\"caf\xc3\xa9 /\"");
    /* only 'n' bytes are taken */
    assert_json_str("abc\"def", 3, "\"abc\"");
}

static void json_str_grows(void **state)
{
    char s[1000], *want = malloc(2 * sizeof s + 3), *w = want;

    (void)state;
    assert_non_null(want);
    *w++ = '"';
    for (size_t i = 0; i < sizeof s; i++) {
        s[i] = i % 3 == 0 ? '\n' : i % 3 == 1 ? '"' : 'x';
        if (s[i] == '\n') {
            memcpy(w, "\\n", 2);
            w += 2;
        } else if (s[i] == '"') {
            memcpy(w, "\\\"", 2);
            w += 2;
        } else {
            *w++ = 'x';
        }
    }
    *w++ = '"';
    *w = 0;
    assert_json_str(s, sizeof s, want);
    free(want);
}

static void json_str_appends(void **state)
{
    struct mic_buf b;

    (void)state;
    mic_buf_init(&b);
    mic_buf_puts(&b, "{\"k\":");
    mic_buf_json_str(&b, "v\"", 2);
    mic_buf_add(&b, "}", 1);
    assert_string_equal(b.p, "{\"k\":\"v\\\"\"}");
    assert_int_equal(b.len, strlen("{\"k\":\"v\\\"\"}"));
    mic_buf_fini(&b);
}

static void printf_grows_past_256(void **state)
{
    struct mic_buf b;
    char big[300], want[4096];
    size_t wl = 0;

    (void)state;
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = 0;
    mic_buf_init(&b);
    mic_buf_printf(&b, "%d:", 42);
    assert_string_equal(b.p, "42:");
    assert_int_equal(b.len, 3);
    mic_buf_printf(&b, "%s", big);
    assert_false(b.oom);
    assert_int_equal(b.len, 3 + 299);
    assert_true(b.cap > b.len);
    assert_memory_equal(b.p, "42:", 3);
    assert_memory_equal(b.p + 3, big, 299);
    assert_int_equal(b.p[b.len], 0);
    mic_buf_fini(&b);

    /* many small appends across several doublings */
    mic_buf_init(&b);
    for (int i = 0; i < 300; i++) {
        mic_buf_printf(&b, "%d,", i);
        wl += (size_t)snprintf(want + wl, sizeof want - wl, "%d,", i);
    }
    assert_int_equal(b.len, wl);
    assert_string_equal(b.p, want);
    assert_true(b.cap >= 1024);
    mic_buf_fini(&b);

    /* a format producing exactly 255 bytes fills the first 256 with its NUL */
    mic_buf_init(&b);
    mic_buf_printf(&b, "%.*s", 255, big);
    assert_int_equal(b.len, 255);
    assert_int_equal(b.cap, 256);
    assert_int_equal(b.p[255], 0);
    mic_buf_printf(&b, "%c", 'y');
    assert_int_equal(b.len, 256);
    assert_int_equal(b.cap, 512);
    assert_int_equal(b.p[255], 'y');
    assert_int_equal(b.p[256], 0);
    mic_buf_fini(&b);
}

static void steal_and_time(void **state)
{
    struct mic_buf b;
    size_t len = 0;
    char *p;

    (void)state;
    mic_buf_init(&b);
    mic_buf_json_time(&b, 1790668800LL * 1000000 + 7);
    assert_string_equal(b.p, "\"2026-09-29T08:00:00.000007Z\"");
    assert_int_equal(b.len, 29);
    p = mic_buf_steal(&b, &len);
    assert_int_equal(len, 29);
    assert_string_equal(p, "\"2026-09-29T08:00:00.000007Z\"");
    assert_null(b.p);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
    free(p);
    mic_buf_fini(&b);
}

/* mic_buf_read_file: the bytes and a NUL after them; a missing file,
 * one over the limit: the error, and the buffer as it was. */
static void read_file_into_buf(void **state)
{
    char path[] = "/tmp/mic-test-readfile-XXXXXX";
    int fd = mkstemp(path);
    struct mic_buf b;

    (void)state;
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "hello\nworld", 11), 11);
    close(fd);
    mic_buf_init(&b);
    mic_buf_add(&b, ">", 1);
    assert_int_equal(mic_buf_read_file(&b, path, 100), MIC_OK);
    assert_int_equal(b.len, 12);
    assert_string_equal(b.p, ">hello\nworld");
    assert_int_equal(mic_buf_read_file(&b, path, 10), MIC_ETOOBIG);
    assert_int_equal(b.len, 12);
    assert_string_equal(b.p, ">hello\nworld");
    unlink(path);
    assert_int_equal(mic_buf_read_file(&b, path, 100), MIC_EIO);
    assert_int_equal(b.len, 12);
    mic_buf_fini(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(depth_limit),
        cmocka_unit_test(read_file_into_buf),
        cmocka_unit_test(depth_message_names_limit),
        cmocka_unit_test(brackets_in_strings_do_not_count),
        cmocka_unit_test(duplicate_keys_rejected),
        cmocka_unit_test(malformed_rejected),
        cmocka_unit_test(only_len_bytes_read),
        cmocka_unit_test(scalars_and_values_load),
        cmocka_unit_test(content_type),
        cmocka_unit_test(limit_arg),
        cmocka_unit_test(keys_known),
        cmocka_unit_test(either_word),
        cmocka_unit_test(json_str_escapes),
        cmocka_unit_test(json_str_grows),
        cmocka_unit_test(json_str_appends),
        cmocka_unit_test(printf_grows_past_256),
        cmocka_unit_test(steal_and_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
