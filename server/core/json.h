/* json.h - reading requests under MIC's limits: bodies with jansson, and
 * the page-size query argument. */
#ifndef MIC_JSON_H
#define MIC_JSON_H

#include <jansson.h>
#include <stddef.h>

struct mic_error;

/* Parse 'len' bytes of 'body' as one JSON value, rejecting duplicate keys
 * and nesting deeper than 'max_depth' (checked before jansson sees it, as
 * jansson's own limit is a compile-time 2048).  On success stores a new
 * reference in *out and returns MIC_OK; else MIC_EPARSE with 'err' filled
 * ("invalid_json"), or MIC_ENOMEM ("internal") when jansson ran out of
 * memory. */
int mic_json_load(const char *body, size_t len, int max_depth, json_t **out,
                  struct mic_error *err);


/* A per-thread arena for jansson's allocations while one request is
 * parsed: between mic_json_arena_begin and mic_json_arena_end, every
 * value jansson makes in this thread comes from a few large blocks
 * (bump-allocated, frees ignored), and mic_json_arena_end releases them
 * all at once -- no walk of the tree, no malloc/free per value; the
 * thread keeps its largest block (up to 8 MiB) for its next window, so a
 * busy thread neither allocates nor faults in pages per request.  Nothing made
 * in the window may be used after its end (json_decref is not needed and
 * does nothing useful); values made outside it are untouched, also when
 * freed inside it.  Windows do not nest.  begin returns MIC_OK, or
 * MIC_ENOMEM (no arena: the thread keeps using malloc, which is also
 * correct). */
struct mic_json_arena {
    struct arena_block *blocks;
    size_t used, cap;
};
int mic_json_arena_begin(struct mic_json_arena *a);
void mic_json_arena_end(struct mic_json_arena *a);

/* Nonzero if the Content-Type header value names JSON
 * ("application/json", parameters such as charset allowed). */
int mic_json_content_type_ok(const char *content_type);

/* The page size in the query argument 'arg', 'dflt' when it is NULL: 1 to
 * 1000 into *out and MIC_OK, else MIC_EINVAL with 'err' filled
 * ("invalid_request", field "limit"). */
int mic_limit_arg(const char *arg, long dflt, long *out, struct mic_error *err);

/* MIC_OK if every member of object 'o' is named in 'known' (NULL-ended),
 * else MIC_EINVAL with 'err' filled ("invalid_request", the first unknown
 * member as the field, "unknown field '...'"). */
int mic_json_keys_known(json_t *o, const char *const *known, struct mic_error *err);

/* Member 'k' of object 'o', when present, is the string 'off' (*out = 0)
 * or 'on' (*out = 1): MIC_OK; absent: MIC_OK, *out untouched; anything
 * else: MIC_EINVAL with 'err' filled ("invalid_request", field 'k', the
 * message 'why'). */
int mic_json_either(json_t *o, const char *k, const char *off, const char *on, int *out,
                    const char *why, struct mic_error *err);

#endif
