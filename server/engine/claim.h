/* claim.h - the requests that move deliveries: claim, ack, nack, extend,
 * DLQ requeue and skip, gap skip (DESIGN sections 3, 4, 12).  Each is
 * parsed in a handler thread (_parse), applied in the writer thread as an
 * op (_op), answered from its results (_result) and freed (_free).  The
 * state changes themselves are the delivery engine's (delivery.h). */
#ifndef MIC_CLAIM_H
#define MIC_CLAIM_H

#include <stddef.h>
#include <stdint.h>

#include "group.h"
#include "writer.h"
#include "store/dlv.h"

struct mic_buf;
struct mic_config;
struct mic_error;
typedef struct mic_claim mic_claim;
typedef struct mic_gap_skip mic_gap_skip;

enum mic_claim_kind {
    MIC_CLAIM,      /* POST /v1/groups/{g}/claim */
    MIC_ACK,        /* POST .../ack */
    MIC_NACK,       /* POST .../nack */
    MIC_EXTEND,     /* POST .../extend */
    MIC_REQUEUE,    /* POST .../dlq/requeue */
    MIC_SKIP,       /* POST .../dlq/skip */
};

/* Parse a request of 'kind' for 'group' from 'body' (len bytes; empty is
 * allowed for a claim).  On success *out is the request (owned by the
 * caller: mic_claim_free) and MIC_OK is returned; else 'err' says why:
 * MIC_ENOTFOUND for a group name that cannot exist, MIC_EINVAL for a body
 * not of the documented shape (with the field), MIC_ENOMEM. */
int mic_claim_parse(int kind, const char *group, const char *body, size_t len,
                    const struct mic_config *cfg, mic_claim **out,
                    struct mic_error *err);
/* The op to submit to the writer (embedded in 'c': valid while 'c' is). */
mic_op *mic_claim_op(mic_claim *c);
/* After the op is done: the answer's JSON, appended to 'out' (a claim
 * reads its events from 's').  MIC_OK, or the request's error in 'err'
 * (MIC_ENOTFOUND: no such group; MIC_EIO for a store error). */
int mic_claim_result(mic_claim *c, mic_store *s, struct mic_buf *out,
                     struct mic_error *err);
void mic_claim_free(mic_claim *c);

/* ---- The sink relay's own requests (sink.c) ----
 * A claim, ack, nack or extend on a group with a NATS sink answers 409
 * group_has_sink (DESIGN section 13), unless marked internal here (after
 * _parse, before submitting): the relay's requests are the same ops as a
 * worker's.  After done(): _grants is how many deliveries a claim was
 * granted (0 on any error) and _grant gives grant 'i' (0-based): its seq,
 * its lease token (32 hex digits and a NUL) and the lease's end (wall µs);
 * _items is the number of items of an ack/nack/extend (0 on a request
 * error) and _item_status the outcome of item 'i' (enum
 * mic_delivery_status). */
void mic_claim_set_internal(mic_claim *c);
int mic_claim_grants(const mic_claim *c);
void mic_claim_grant(const mic_claim *c, int i, uint64_t *seq,
                     char token[2 * MIC_TOKEN_LEN + 1], int64_t *lease_expires_us);
int mic_claim_items(const mic_claim *c);
int mic_claim_item_status(const mic_claim *c, int i);

/* POST /v1/aggregates/{type}/{id}/gaps/{version}/skip, in the same four
 * steps.  _parse: MIC_ENOTFOUND for a name out of bounds, MIC_EINVAL for a
 * version that is not 1..2^63-1.  _result: MIC_ENOTFOUND (no aggregate),
 * MIC_EINVAL (unversioned, or not a missing version), MIC_ECONFLICT (the
 * version is stored). */
int mic_gap_skip_parse(const char *type, const char *id, const char *version,
                       mic_gap_skip **out, struct mic_error *err);
mic_op *mic_gap_skip_op(mic_gap_skip *g);
int mic_gap_skip_result(mic_gap_skip *g, struct mic_buf *out,
                        struct mic_error *err);
void mic_gap_skip_free(mic_gap_skip *g);

#endif
