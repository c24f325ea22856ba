/* jgen.h - random JSON values for the tests that hold micd's JSON code to
 * jansson's (tests/unit/core/test_json.c, tests/unit/core/test_jdoc.c): every escape class,
 * multi-byte UTF-8, integers at their limits, reals of every exponent,
 * deep and wide containers, empty ones.  Deterministic from the seed. */
#ifndef MIC_TEST_JGEN_H
#define MIC_TEST_JGEN_H

#include <jansson.h>
#include <stdint.h>

void jgen_seed(uint64_t seed);
uint64_t jgen_rnd(void);
/* A new value (the caller's reference) at nesting 'depth' (0 at the top). */
json_t *jgen_value(int depth);

#endif
