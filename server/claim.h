/* claim.h - deliveries of a group: claim (with long-poll), ack, nack,
 * extend, lease expiry and retry deadlines, the dead-letter queue. */
#ifndef MIC_CLAIM_H
#define MIC_CLAIM_H

#include <stddef.h>

#include "group.h"
#include "writer.h"

struct mic_buf;
struct mic_config;
struct mic_error;
typedef struct mic_claim mic_claim;

enum mic_claim_kind {
    MIC_CLAIM,      /* POST /v1/groups/{g}/claim */
    MIC_ACK,        /* POST .../ack */
    MIC_NACK,       /* POST .../nack */
    MIC_EXTEND,     /* POST .../extend */
    MIC_REQUEUE,    /* POST .../dlq/requeue */
    MIC_SKIP,       /* POST .../dlq/skip */
};

/* Parse a request of 'kind' on group 'group' with 'body'.  Returns MIC_OK
 * with a new request in *out (free with mic_claim_free), or an error with
 * 'err' filled. */
int mic_claim_parse(int kind, const char *group, const char *body, size_t len,
                    const struct mic_config *cfg, mic_claim **out,
                    struct mic_error *err);
mic_op *mic_claim_op(mic_claim *c);
/* After done(): MIC_OK with the JSON body appended to 'out' (a claim
 * reads its events from 's' in a read transaction), or the error. */
int mic_claim_result(mic_claim *c, mic_store *s, struct mic_buf *out,
                     struct mic_error *err);
void mic_claim_free(mic_claim *c);

/* GET /v1/groups/{g}/dlq?after=&limit= (read transaction). */
int mic_claim_dlq_list(mic_store *s, const char *group, const char *after,
                       const char *limit, struct mic_buf *out,
                       struct mic_error *err);

/* The writer hooks for groups and deliveries over registry 'g'. */
void mic_claim_hooks(mic_groups *g, struct mic_writer_hooks *h);

#endif
