/* topic.h - topic configuration: PUT/GET/DELETE /v1/topics/{topic} and
 * GET /v1/topics.  Writes go through the writer; reads use a read
 * transaction in the calling thread. */
#ifndef MIC_TOPIC_H
#define MIC_TOPIC_H

#include <stddef.h>

#include "store/store.h"
#include "writer.h"

struct mic_key;
struct mic_buf;
struct mic_config;
struct mic_error;
typedef struct mic_topic_op mic_topic_op;

/* A PUT of 'name' with 'body' (may be empty: all defaults).  On success
 * *out is the request (the caller's: mic_topic_op_free) and MIC_OK is
 * returned; else 'err' is filled and its code returned: MIC_ENOTFOUND for
 * a name that cannot exist, MIC_EPARSE for malformed JSON, MIC_EINVAL for a
 * field out of bounds (with the field), MIC_ENOMEM. */
int mic_topic_put_parse(const char *name, const char *body, size_t len,
                        const struct mic_config *cfg, mic_topic_op **out,
                        struct mic_error *err);
/* A DELETE of 'name'; errors as for a PUT. */
int mic_topic_del_parse(const char *name, mic_topic_op **out,
                        struct mic_error *err);
/* The op to submit to the writer (embedded in 't': valid while 't' is). */
mic_op *mic_topic_op_base(mic_topic_op *t);
/* After done(): MIC_OK with the topic appended to 'out' (PUT) and
 * *created set; or the error (404 unknown, 409 topic_not_empty). */
int mic_topic_op_result(mic_topic_op *t, struct mic_buf *out, int *created,
                        struct mic_error *err);
void mic_topic_op_free(mic_topic_op *t);

/* GET /v1/topics/{topic} and GET /v1/topics: append the resource (or
 * {"topics":[...]}) to 'out'.  MIC_OK, or 'err' filled: MIC_ENOTFOUND (no
 * such topic), MIC_EIO/MIC_ENOMEM ("internal").  Read transaction, any
 * thread. */
int mic_topic_get(mic_store *s, const char *name, struct mic_buf *out,
                  struct mic_error *err);
int mic_topic_list(mic_store *s, const struct mic_key *key, struct mic_buf *out,
                   struct mic_error *err);

#endif
