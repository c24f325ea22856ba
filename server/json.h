/* json.h - loading request bodies with jansson under MIC's limits. */
#ifndef MIC_JSON_H
#define MIC_JSON_H

#include <jansson.h>
#include <stddef.h>

struct mic_error;

/* Parse 'len' bytes of 'body' as one JSON value, rejecting duplicate keys
 * and nesting deeper than 'max_depth' (checked before jansson sees it, as
 * jansson's own limit is a compile-time 2048).  On success stores a new
 * reference in *out and returns MIC_OK; else MIC_EPARSE with 'err' filled
 * ("invalid_json"). */
int mic_json_load(const char *body, size_t len, int max_depth, json_t **out,
                  struct mic_error *err);

/* Nonzero if the Content-Type header value names JSON
 * ("application/json", parameters such as charset allowed). */
int mic_json_content_type_ok(const char *content_type);

#endif
