/* fuzz_record.c - the stored-record decoder: mic_rec_decode (store.h) on
 * arbitrary bytes as a log value (the record header of
 * proto/store-format.md, then the event's JSON).  It may refuse (MIC_EIO;
 * with checksums, MIC_ECORRUPT), never read past the value: on success
 * the JSON lies inside the value and ends where it ends, and the readers
 * that take the event_id back out of it (mic_event_stored_id) stay inside
 * it too. */
#include "fuzz.h"

#include "err.h"
#include "event.h"
#include "store.h"

#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    mic_log_set_level(mic_log_level_parse("error"));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mic_rec r;
    /* A copy of exactly 'size' bytes on the heap, so ASan sees any read
     * past the value (LMDB hands out values inside its map). */
    uint8_t *v = malloc(size ? size : 1);
    int rc;

    if (!v)
        return 0;
    memcpy(v, data, size);
    memset(&r, 0, sizeof r);
    rc = mic_rec_decode(42, v, size, &r);
    if (rc == MIC_OK) {
        const char *id;
        size_t idlen;

        FUZZ_CHECK(r.seq == 42);
        FUZZ_CHECK(r.json >= (const char *)v && r.json + r.json_len == (const char *)v + size);
        FUZZ_CHECK(r.has_agg <= 1 && r.has_version <= 1);
        FUZZ_CHECK(r.ordinal == 0 && r.rank == 0);
        if (mic_event_stored_id(r.json, r.json_len, &id, &idlen) == 0) {
            FUZZ_CHECK(id > r.json && id + idlen < r.json + r.json_len);
            FUZZ_CHECK(mic_event_id_ok(id, idlen));
        }
    } else {
        FUZZ_CHECK(rc < 0); /* MIC_EIO (and, with checksums, MIC_ECORRUPT) */
    }
    free(v);
    return 0;
}
