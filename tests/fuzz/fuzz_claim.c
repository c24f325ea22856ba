/* fuzz_claim.c - the body of POST /v1/groups/{g}/claim: mic_claim_parse
 * with MIC_CLAIM.  An empty body is a claim of one; anything else must be
 * a JSON object of max, lease_ttl_s, wait_s and worker within their
 * bounds (DESIGN section 12), else a clear error: 400 invalid_json or 422
 * invalid_request with the field. */
#include "fuzz.h"

#include "engine/claim.h"
#include "core/err.h"

#include <string.h>

static struct mic_config cfg;

FUZZ_INIT(&cfg)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mic_error err;
    mic_claim *c = NULL;
    int rc;

    memset(&err, 0, sizeof err);
    rc = mic_claim_parse(MIC_CLAIM, "workers", (const char *)data, size, &cfg, &c, &err);
    if (rc == MIC_OK) {
        FUZZ_CHECK(c != NULL && mic_claim_op(c) != NULL);
        mic_claim_free(c);
    } else {
        FUZZ_CHECK(rc == MIC_EPARSE || rc == MIC_EINVAL);
        FUZZ_CHECK(err.err == rc && err.code != NULL && err.message[0] != 0);
        FUZZ_CHECK(rc != MIC_EINVAL || strcmp(err.code, "invalid_request") == 0);
    }
    return 0;
}
