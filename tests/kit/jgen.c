/* jgen.c - random JSON values for the differential tests (jgen.h). */
#include "jgen.h"

#include <stdio.h>
#include <string.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

void jgen_seed(uint64_t seed)
{
    rng_state = seed ? seed : 0x9e3779b97f4a7c15ull;
}

uint64_t jgen_rnd(void)
{
    uint64_t x = rng_state;

    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

/* Pieces of strings: every escape class jansson knows, multi-byte UTF-8
 * (2, 3 and 4 bytes, U+2028), '/', DEL. */
static const char *const str_bits[] = {
    "a", "Z", "0", " ", "\"", "\\", "/", "\x01", "\x1f", "\x7f", "\b", "\f", "\n", "\r", "\t",
    "\xc3\xa9", "\xe2\x80\xa8", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "{", "}", "[", "]", ":", ",",
};
static const char *const key_bits[] = {"a", "ab", "A", "b", "", "\xc3\xa9", "a\xc3\xa9", "z", "_", "aa"};

static json_t *gen_string(void)
{
    char s[64];
    size_t n = 0;
    int parts = (int)(jgen_rnd() % 8);

    for (int i = 0; i < parts; i++) {
        const char *b = str_bits[jgen_rnd() % (sizeof str_bits / sizeof str_bits[0])];
        if (n + strlen(b) < sizeof s) {
            memcpy(s + n, b, strlen(b));
            n += strlen(b);
        }
    }
    return json_stringn(s, n);
}

static json_t *gen_real(void)
{
    static const double fixed[] = {0.0, -0.0, 1.0, -1.0, 0.1, 1e300, -1e-300, 5e-324, 1e21, 1e-7,
                                   123456789012345678.0, 2.5e-10, 1.7976931348623157e308, 100.0, 3.14159};
    uint64_t bits;
    double d;

    if (jgen_rnd() % 2)
        return json_real(fixed[jgen_rnd() % (sizeof fixed / sizeof fixed[0])]);
    do {
        bits = jgen_rnd();
        memcpy(&d, &bits, sizeof d);
    } while (d != d || d - d != 0); /* finite only: JSON has no NaN or inf */
    return json_real(d);
}

json_t *jgen_value(int depth)
{
    switch (jgen_rnd() % (depth > 5 ? 6 : 9)) {
    case 0: return json_null();
    case 1: return json_boolean(jgen_rnd() % 2);
    case 2: {
        static const json_int_t fixed[] = {0, 1, -1, INT64_MAX, INT64_MIN, 1000000, -42};
        return json_integer(jgen_rnd() % 2 ? fixed[jgen_rnd() % 7] : (json_int_t)jgen_rnd());
    }
    case 3: return gen_real();
    case 4:
    case 5: return gen_string();
    case 6: {
        json_t *a = json_array();
        int n = jgen_rnd() % 10 == 0 ? 100 : (int)(jgen_rnd() % 5);
        for (int i = 0; i < n; i++)
            json_array_append_new(a, jgen_value(depth + 1));
        return a;
    }
    default: {
        json_t *o = json_object();
        int n = jgen_rnd() % 10 == 0 ? 60 : (int)(jgen_rnd() % 6);
        for (int i = 0; i < n; i++) {
            char k[32];
            snprintf(k, sizeof k, "%s%s%d", key_bits[jgen_rnd() % 10], key_bits[jgen_rnd() % 10],
                     (int)(jgen_rnd() % 3));
            json_object_set_new(o, k, jgen_value(depth + 1));
        }
        return o;
    }
    }
}

