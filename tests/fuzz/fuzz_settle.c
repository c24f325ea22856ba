/* fuzz_settle.c - the bodies that settle deliveries (server/engine/claim.c):
 * every input is parsed as the body of ack, nack and extend
 * ({"deliveries":[{"seq","lease_token"}...], nack's error, retry_after_s
 * and dead_letter, extend's lease_ttl_s}) and of the DLQ's requeue and
 * skip ({"seqs":[...]} or {"all":true}).  A token of the wrong form is
 * the item's not_found later, never a parse error; the parse answers
 * MIC_OK, 400 invalid_json or 422 invalid_request, nothing else. */
#include "fuzz.h"

#include "engine/claim.h"
#include "core/err.h"

#include <string.h>

static struct mic_config cfg;

FUZZ_INIT(&cfg)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const int kinds[] = {MIC_ACK, MIC_NACK, MIC_EXTEND, MIC_REQUEUE, MIC_SKIP};

    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        struct mic_error err;
        mic_claim *c = NULL;
        int rc;

        memset(&err, 0, sizeof err);
        rc = mic_claim_parse(kinds[k], "workers", (const char *)data, size, &cfg, &c, &err);
        if (rc == MIC_OK) {
            FUZZ_CHECK(c != NULL && mic_claim_op(c) != NULL);
            mic_claim_free(c);
        } else {
            FUZZ_CHECK(rc == MIC_EPARSE || rc == MIC_EINVAL);
            FUZZ_CHECK(err.err == rc && err.code != NULL && err.message[0] != 0);
        }
    }
    return 0;
}
