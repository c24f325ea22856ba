/* test_jdoc.c - the publish path's parser (server/core/jdoc.h) held to jansson,
 * the parser of record: over generated values written out three ways and
 * over a list of texts at the edges of JSON, mic_jdoc_parse accepts and
 * refuses exactly what mic_json_load does (with the same message), gives
 * the same values in the same member order, and writes the canonical text
 * jansson's JSON_COMPACT | JSON_SORT_KEYS dump writes; yajl's fast path,
 * whenever it accepts a text alone, agrees as well.  (This is the test of
 * the canonical text under the stored digests: jdoc writes it for every
 * publish.) */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/err.h"
#include "core/jdoc.h"
#include "jgen.h"
#include "core/json.h"

#define DEPTH 32

/* The document's value 'v' written back in document order, compact, as
 * json_dumps(JSON_COMPACT) writes jansson's tree: the member order and
 * every value, through the accessors. */
static void doc_order(const mic_jdoc *d, mic_jv v, struct mic_buf *b)
{
    size_t len;
    const char *s;

    switch (mic_jdoc_type(d, v)) {
    case MIC_JOBJECT:
    case MIC_JARRAY: {
        int obj = mic_jdoc_type(d, v) == MIC_JOBJECT;
        size_t n = 0;
        mic_buf_add(b, obj ? "{" : "[", 1);
        for (mic_jv m = mic_jdoc_first(d, v); m; m = mic_jdoc_next(d, m), n++) {
            if (n)
                mic_buf_add(b, ",", 1);
            if (obj) {
                s = mic_jdoc_key(d, m, &len);
                assert_non_null(s);
                mic_buf_json_str_upper(b, s, len);
                mic_buf_add(b, ":", 1);
            } else {
                assert_null(mic_jdoc_key(d, m, NULL));
                assert_int_equal(mic_jdoc_at(d, v, n), m);
            }
            doc_order(d, m, b);
        }
        assert_int_equal(n, mic_jdoc_size(d, v));
        mic_buf_add(b, obj ? "}" : "]", 1);
        break;
    }
    case MIC_JSTRING:
        s = mic_jdoc_str(d, v, &len);
        assert_int_equal(strlen(s), len);
        mic_buf_json_str_upper(b, s, len);
        break;
    default:
        mic_jdoc_canonical(d, v, b);
    }
}

static char *take(struct mic_buf *b)
{
    size_t n;

    mic_buf_add(b, "", 1);
    assert_false(b->oom);
    return mic_buf_steal(b, &n);
}

static char *canonical_of(const mic_jdoc *d)
{
    struct mic_buf b;

    mic_buf_init(&b);
    assert_int_equal(mic_jdoc_canonical(d, mic_jdoc_root(d), &b), MIC_OK);
    return take(&b);
}

static int fast_accepted;

/* 'text' (len bytes) through jansson and through both of jdoc's paths. */
static void expect_agree(const char *text, size_t len)
{
    struct mic_error je = {0}, de = {0}, ye = {0};
    json_t *j = NULL;
    mic_jdoc *d;
    int jrc = mic_json_load(text, len, DEPTH, &j, &je);
    int drc = mic_jdoc_parse(text, len, DEPTH, &d, NULL, &de);

    if ((jrc == MIC_OK) != (drc == MIC_OK))
        fail_msg("jansson %s, jdoc %s: %.*s", jrc ? "refuses" : "accepts",
                 drc ? "refuses" : "accepts", (int)(len > 300 ? 300 : len), text);
    if (jrc) {
        assert_int_equal(drc, MIC_EPARSE);
        assert_string_equal(de.code, je.code);
        assert_string_equal(de.message, je.message);
    } else {
        char *want_sorted = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
        char *want_order = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
        char *got_sorted = canonical_of(d), *got_order;
        struct mic_buf b;

        mic_buf_init(&b);
        doc_order(d, mic_jdoc_root(d), &b);
        got_order = take(&b);
        if (strcmp(want_sorted, got_sorted))
            fail_msg("canonical text differs:\n jansson: %s\n jdoc:    %s", want_sorted, got_sorted);
        if (strcmp(want_order, got_order))
            fail_msg("document order differs:\n jansson: %s\n jdoc:    %s", want_order, got_order);
        mic_jdoc_fini(d);
        free(got_sorted);
        free(got_order);
        /* The fast path alone: when it takes the text, the same answer. */
        if (mic_jdoc_parse_yajl(text, len, DEPTH, &d, &ye) == MIC_OK) {
            got_sorted = canonical_of(d);
            mic_jdoc_fini(d);
            if (strcmp(want_sorted, got_sorted))
                fail_msg("yajl's canonical text differs:\n jansson: %s\n yajl:    %s",
                         want_sorted, got_sorted);
            free(got_sorted);
            fast_accepted++;
        }
        free(want_sorted);
        free(want_order);
        json_decref(j);
        return;
    }
    /* Refused by jansson: the fast path must not have taken it alone. */
    if (mic_jdoc_parse_yajl(text, len, DEPTH, &d, &ye) == MIC_OK) {
        mic_jdoc_fini(d);
        fail_msg("yajl's fast path accepts what jansson refuses (%s): %.*s", je.message,
                 (int)(len > 300 ? 300 : len), text);
    }
}

static void expect_agree_str(const char *text)
{
    expect_agree(text, strlen(text));
}

/* Generated values, each in an array (the top must be a container),
 * written compact, indented, and with every non-ASCII character escaped
 * (surrogate pairs: the jansson path). */
static void generated_values_agree(void **state)
{
    static const size_t flags[] = {JSON_COMPACT, JSON_INDENT(2), JSON_COMPACT | JSON_ENSURE_ASCII};
    int n = 0;

    (void)state;
    jgen_seed(7);
    fast_accepted = 0;
    for (int i = 0; i < 3000; i++) {
        json_t *v = jgen_value(1), *top = json_array();
        json_array_append_new(top, v);
        for (size_t f = 0; f < sizeof flags / sizeof flags[0]; f++) {
            char *text = json_dumps(top, flags[f]);
            assert_non_null(text);
            expect_agree_str(text);
            free(text);
            n++;
        }
        json_decref(top);
    }
    /* Most texts must have gone the fast way, or this proves little. */
    if (fast_accepted < n / 2)
        fail_msg("only %d of %d texts took yajl's fast path", fast_accepted, n);
}

/* Texts at the edges: what both must refuse, what both must take. */
static void edge_texts_agree(void **state)
{
    static const char *const texts[] = {
        /* duplicates, at the top and deep down */
        "{\"a\":1,\"a\":2}", "{\"x\":{\"b\":1,\"c\":2,\"b\":3}}", "[{\"\":1,\"\":1}]",
        "{\"a\":1,\"A\":2,\"a\\u0000\":3}",
        /* surrogates: a pair, lone high, lone low, high then not low, reversed */
        "[\"\\ud83d\\ude00\"]", "[\"\\ud800\"]", "[\"\\udc00\"]", "[\"\\ud800\\u0041\"]",
        "[\"\\udc00\\ud800\"]", "[\"\\uD83D\\uDE00x\"]", "[\"\\ud800x\"]", "{\"\\ud800\":1}",
        /* NUL and control characters */
        "[\"a\\u0000b\"]", "{\"\\u0000\":1}", "[\"a\x01\"]", "[\"a\tb\"]", "[\"a\nb\"]",
        "[\"\\u001f\\u007f\\u0080\"]",
        /* UTF-8: overlong, surrogate encoded, past U+10FFFF, truncated, stray */
        "[\"\xc0\x80\"]", "[\"\xe0\x80\x80\"]", "[\"\xed\xa0\x80\"]", "[\"\xf4\x90\x80\x80\"]",
        "[\"\xc3\"]", "[\"\xe2\x82\"]", "[\"\x80\"]", "[\"\xf8\x88\x80\x80\x80\"]",
        "[\"\xef\xbf\xbf\xf4\x8f\xbf\xbf\"]", "[\"\xc2\x80\xdf\xbf\"]",
        /* numbers */
        "[01]", "[-]", "[1.]", "[.5]", "[1e]", "[1e+]", "[+1]", "[0x10]", "[-0]", "[-0.0]",
        "[9223372036854775807]", "[9223372036854775808]", "[-9223372036854775808]",
        "[-9223372036854775809]", "[1e400]", "[-1e400]", "[1e-400]", "[4.9e-324]",
        "[123456789012345678901234567890123456789012345678901234567890123456789]",
        "[0.000000000000000000000000000000000000000000000000000000000000000000001]",
        "[1E5]", "[1e-0]", "[2.5E+10]",
        /* literals and structure */
        "[tru]", "[nul]", "[NaN]", "[Infinity]", "[true,false,null]", "{} x", "{}{}", "[1,]",
        "[,1]", "{\"a\":1,}", "{\"a\"}", "{a:1}", "['a']", "/*c*/{}", "", "   ", "1", "\"s\"",
        "null", "\xef\xbb\xbf{}", "{\"a\":[]}", "[[],{},[[]],{\"\":{}}]", " \t\r\n[ 1 , 2 ]\n",
        "{\"events\":[{\"topic\":\"t\",\"payload\":{\"z\":1,\"a\":[1,2,{\"m\":null}]}}]}",
        /* as clients send them: escapes and pairs, every number form, nesting */
        "{\"b\":1,\"a\":{\"d\":[],\"c\":{}},\"\":null}",
        "[\"\\u00e9\\u20ac\\ud83d\\ude00\",\"\\u0001\\u001f\\u007f\",\"\\/\\\"\\\\\\b\\f\\n\\r\\t\"]",
        "[0,-0,1E5,1e-0,-0.0,0.0,1.5E+300,2.5e-10,9223372036854775807,-9223372036854775808]",
        "[1.0,10.0,1e21,1e22,0.1,0.30000000000000004,123.456e7,-1.5e-7,4.9e-324,1.7976931348623157E308]",
        "{\"k\":{\"k\":{\"k\":{\"k\":{\"k\":{\"k\":{\"k\":[[[[[[true,false]]]]]]}}}}}}}",
        "{\"a\\u00e9\":1,\"a\":2,\"ab\":3,\"A\":4,\"\\u00e9\":5,\"B\":6}",
        "[\"just a string\",42,-3.5,true,null]",
        /* after the value: an unterminated string (yajl waits for its end
         * and accepted these; found by tests/fuzz/fuzz_event.c), a partial
         * literal or number, whitespace */
        "{\"payload\":1}\"payload", "{\"a\":1}\"}", "[1] \"", "[1]\"\\", "{}\"\\u12",
        "[1]tru", "[1] 12", "[1]-", "{\"a\":1} \t\r\n", "[[]]\n",
        /* \v and \f: whitespace to yajl, not to JSON (found by fuzz_event) */
        "{\"a\":1,\v\"b\":2}", "[1\f]", "\v[1]", "[1]\f", "[\"a\vb\"]", "[\"a\fb\"]",
    };

    (void)state;
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        expect_agree_str(texts[i]);
    /* Only the given bytes are read: a NUL, then more, is past the end. */
    expect_agree("{}\0{", 2);
    expect_agree("[1]\0", 4);
}

/* The depth limit is checked first, in the same words, on both paths. */
static void depth_limit_agrees(void **state)
{
    char deep[200], ok[200];
    size_t n = 0, m = 0;

    (void)state;
    for (int i = 0; i < DEPTH + 1; i++)
        deep[n++] = '[';
    for (int i = 0; i < DEPTH + 1; i++)
        deep[n++] = ']';
    for (int i = 0; i < DEPTH; i++)
        ok[m++] = '[';
    for (int i = 0; i < DEPTH; i++)
        ok[m++] = ']';
    expect_agree(deep, n);
    expect_agree(ok, m);
}

/* Documents reuse the thread's buffers: a parse after fini sees none of
 * the one before, and two open at once do not share anything. */
static void documents_are_reused(void **state)
{
    struct mic_error e = {0};
    mic_jdoc *a, *b;
    char *c;

    (void)state;
    assert_int_equal(mic_jdoc_parse("{\"k\":[1,2,3]}", 13, DEPTH, &a, NULL, &e), MIC_OK);
    assert_int_equal(mic_jdoc_parse("{\"q\":[4]}", 9, DEPTH, &b, NULL, &e), MIC_OK);
    c = canonical_of(a);
    assert_string_equal(c, "{\"k\":[1,2,3]}");
    free(c);
    c = canonical_of(b);
    assert_string_equal(c, "{\"q\":[4]}");
    free(c);
    mic_jdoc_fini(b);
    mic_jdoc_fini(a);
    assert_int_equal(mic_jdoc_parse("{\"x\":\"y\"}", 9, DEPTH, &b, NULL, &e), MIC_OK);
    c = canonical_of(b);
    assert_string_equal(c, "{\"x\":\"y\"}");
    free(c);
    assert_int_equal(mic_jdoc_get(b, mic_jdoc_root(b), "k"), 0);
    assert_int_not_equal(mic_jdoc_get(b, mic_jdoc_root(b), "x"), 0);
    mic_jdoc_fini(b);
}

/* Where the fast path hands a text to jansson, the caller is told. */
static void jansson_decides_when_unsure(void **state)
{
    static const char *const to_jansson[] = {
        "[\"\\ud83d\\ude00\"]", "{\"a\":1,\"a\":1}", "[9223372036854775808]", "[1e999]", "7",
    };
    struct mic_error e = {0};
    mic_jdoc *d;
    int j = -1;

    (void)state;
    assert_int_equal(mic_jdoc_parse("{\"a\":[1.5,\"b\"]}", 15, DEPTH, &d, &j, &e), MIC_OK);
    assert_int_equal(j, 0);
    mic_jdoc_fini(d);
    for (size_t i = 0; i < sizeof to_jansson / sizeof to_jansson[0]; i++) {
        int rc = mic_jdoc_parse(to_jansson[i], strlen(to_jansson[i]), DEPTH, &d, &j, &e);
        assert_int_equal(j, 1);
        if (rc == MIC_OK)
            mic_jdoc_fini(d);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(generated_values_agree),
        cmocka_unit_test(edge_texts_agree),
        cmocka_unit_test(depth_limit_agrees),
        cmocka_unit_test(documents_are_reused),
        cmocka_unit_test(jansson_decides_when_unsure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
