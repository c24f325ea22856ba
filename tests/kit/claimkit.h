/* claimkit.h - request and claim helpers for the group integration tests.
 * Include after <cmocka.h>, <jansson.h> and "harness.h"; each helper
 * asserts with cmocka. */
#ifndef MIC_TEST_CLAIMKIT_H
#define MIC_TEST_CLAIMKIT_H

/* CLOCK_MONOTONIC in ms. */
int64_t mono_ms(void);
/* One request with a JSON body (may be NULL); asserts the status and
 * returns the parsed body (the caller decrefs; NULL if none). */
json_t *call(const struct srv *s, const char *method, const char *path,
             const char *body, long want);
/* Member 'k' of 'o', asserted to be an integer / a string. */
json_int_t jint(json_t *o, const char *k);
const char *jstr(json_t *o, const char *k);
/* The "deliveries" of a claim response, and its i-th one. */
json_t *dlvs(json_t *r);
json_t *dlv(json_t *r, size_t i);
/* {"seq","lease_token"} of one delivery, and of every delivery of a claim
 * response. */
json_t *item(json_int_t seq, const char *token);
json_t *items_of(json_t *claim_resp);
/* POST .../{verb} with "deliveries": 'items' (stolen) plus the fields of
 * the JSON object 'extra' (may be NULL); returns the response. */
json_t *settle(const struct srv *s, const char *group, const char *verb,
               json_t *items, const char *extra);
/* Result 'i' of an ack/nack/extend response; assert it is for 'seq' with
 * 'status'. */
json_t *result(json_t *r, size_t i);
void expect_result(json_t *r, size_t i, json_int_t seq, const char *status);
/* The entry of 'name' in the "groups" (key "group") or "topics" (key
 * "topic") of GET /v1/stats on 's' (a new reference), or NULL. */
json_t *stats_of(const struct srv *s, const char *list, const char *key, const char *name);

#endif
