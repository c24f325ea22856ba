/* jdoc.h - a parsed JSON document for the publish path: parsed by yajl's
 * event parser into one array of nodes and one string pool, with jansson
 * (server/core/json.h) as the parser of record.
 *
 * mic_jdoc_parse accepts exactly what mic_json_load accepts (jansson with
 * JSON_REJECT_DUPLICATES, an object or array at the top, the same depth
 * limit) and answers its errors word for word: yajl parses first, and
 * whenever it refuses the text or the text holds something on which the
 * two could differ (a surrogate escape, a decoded NUL, a string that is
 * not valid UTF-8 by jansson's rules, an integer out of range, a real that
 * overflows, a number too long to convert here, a duplicate key), the text
 * is parsed again by jansson, which decides and whose tree is converted.
 * tests/unit/core/test_jdoc.c checks both paths against jansson over a generated
 * corpus (values, canonical text, accept/refuse).
 *
 * Nodes are numbered from 1 (0 is "none").  An object's members are its
 * children, each a value node carrying its key; they can be walked in the
 * document's order (mic_jdoc_first/next, what jansson's
 * json_object_foreach gives) or in key order (mic_jdoc_sfirst/snext, what
 * JSON_SORT_KEYS gives).  Strings are NUL-terminated in the pool and never
 * contain NUL.  Everything the document holds is valid until
 * mic_jdoc_fini.  A thread's first open document uses the thread's
 * buffers, kept for its next one (the next request); another one open at
 * the same time gets buffers of its own. */
#ifndef MIC_JDOC_H
#define MIC_JDOC_H

#include <stddef.h>
#include <stdint.h>

struct mic_buf;
struct mic_error;

enum mic_jtype { MIC_JOBJECT = 1, MIC_JARRAY, MIC_JSTRING, MIC_JINTEGER, MIC_JREAL,
                 MIC_JTRUE, MIC_JFALSE, MIC_JNULL };

typedef uint32_t mic_jv;
typedef struct mic_jdoc mic_jdoc;

/* Parse 'len' bytes of 'body' into a new document *out.  Returns MIC_OK,
 * MIC_EPARSE with 'err' as mic_json_load fills it ("invalid_json"), or
 * MIC_ENOMEM.  'jansson' is set to 1 when jansson parsed it (tests and
 * figures). */
int mic_jdoc_parse(const char *body, size_t len, int max_depth, mic_jdoc **out,
                   int *jansson, struct mic_error *err);
/* Tests only: parse with yajl alone (returns MIC_EPARSE with the message
 * "left to jansson" where the fast path would hand the text to jansson). */
int mic_jdoc_parse_yajl(const char *body, size_t len, int max_depth, mic_jdoc **out,
                        struct mic_error *err);
void mic_jdoc_fini(mic_jdoc *d);

mic_jv mic_jdoc_root(const mic_jdoc *d);
enum mic_jtype mic_jdoc_type(const mic_jdoc *d, mic_jv v);
/* Members of an object or elements of an array (0 for a scalar). */
size_t mic_jdoc_size(const mic_jdoc *d, mic_jv v);
/* The member of object 'obj' named 'key' (NUL-terminated), or 0. */
mic_jv mic_jdoc_get(const mic_jdoc *d, mic_jv obj, const char *key);
/* The i-th element of array 'arr' in order (0 past the end); walking an
 * array with first/next is cheaper. */
mic_jv mic_jdoc_at(const mic_jdoc *d, mic_jv arr, size_t i);
mic_jv mic_jdoc_first(const mic_jdoc *d, mic_jv v);
mic_jv mic_jdoc_next(const mic_jdoc *d, mic_jv v);
mic_jv mic_jdoc_sfirst(const mic_jdoc *d, mic_jv obj);
mic_jv mic_jdoc_snext(const mic_jdoc *d, mic_jv member);
/* The key of member 'v' (NULL for an element of an array). */
const char *mic_jdoc_key(const mic_jdoc *d, mic_jv v, size_t *len);
/* A string's bytes (NULL for another type). */
const char *mic_jdoc_str(const mic_jdoc *d, mic_jv v, size_t *len);
/* An integer's value (0 for another type; a real is not read back). */
int64_t mic_jdoc_int(const mic_jdoc *d, mic_jv v);

/* Append 'v' as json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS |
 * JSON_ENCODE_ANY) writes it: the canonical form under the stored digests
 * (proto/store-format.md).  Returns MIC_OK or MIC_ENOMEM (out->oom). */
int mic_jdoc_canonical(const mic_jdoc *d, mic_jv v, struct mic_buf *out);

#endif
