/* fuzz_record.c - the stored-record decoder: mic_rec_decode (store.h) on
 * arbitrary bytes as a log value (the record header of
 * proto/store-format.md, then the event's JSON).  It may refuse (MIC_EIO;
 * with checksums, MIC_ECORRUPT), never read past the value: on success
 * the JSON lies inside the value and ends where it ends, and the readers
 * that take the event_id back out of it (mic_event_stored_id) stay inside
 * it too.  Random bytes seldom carry a matching CRC-32C, so half the
 * inputs (first byte odd) get theirs computed and appended before the
 * decode: the fields after the check are fuzzed too, not only the check. */
#include "fuzz.h"

#include "core/crc32c.h"
#include "core/err.h"
#include "engine/event.h"
#include "store/store.h"
#include "store/log.h"

#include <string.h>

FUZZ_INIT(NULL)

#define SEQ 42

/* The CRC-32C a record of 'seq' carries: over the seq (big-endian) and
 * the bytes before it, stored big-endian (proto/store-format.md). */
static void put_crc(uint8_t *p, size_t n)
{
    static const uint8_t kb[8] = {0, 0, 0, 0, 0, 0, 0, SEQ};
    uint32_t c = mic_crc32c(mic_crc32c(0, kb, 8), p, n);

    p[n] = (uint8_t)(c >> 24);
    p[n + 1] = (uint8_t)(c >> 16);
    p[n + 2] = (uint8_t)(c >> 8);
    p[n + 3] = (uint8_t)c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mic_rec r;
    int fix = size > 0 && (data[0] & 1);
    size_t len = size - (size > 0) + (fix ? 4 : 0);
    /* A copy of exactly the value's bytes on the heap, so ASan sees any
     * read past the value (LMDB hands out values inside its map). */
    uint8_t *v = malloc(len ? len : 1);
    int rc;

    if (!v)
        return 0;
    if (size > 0)
        memcpy(v, data + 1, size - 1);
    if (fix)
        put_crc(v, size - 1);
    memset(&r, 0, sizeof r);
    rc = mic_rec_decode(SEQ, v, len, &r);
    if (rc == MIC_OK) {
        const char *id;
        size_t idlen;

        FUZZ_CHECK(r.seq == SEQ);
        /* the JSON lies inside the value, before its 4-byte CRC */
        FUZZ_CHECK(r.json >= (const char *)v && r.json + r.json_len + 4 == (const char *)v + len);
        FUZZ_CHECK(r.has_agg <= 1 && r.has_version <= 1);
        FUZZ_CHECK(r.ordinal == 0 && r.rank == 0);
        if (mic_event_stored_id(r.json, r.json_len, &id, &idlen) == 0) {
            FUZZ_CHECK(id > r.json && id + idlen < r.json + r.json_len);
            FUZZ_CHECK(mic_event_id_ok(id, idlen));
        }
    } else {
        FUZZ_CHECK(rc == MIC_EIO || rc == MIC_ECORRUPT);
        FUZZ_CHECK(!fix || rc == MIC_EIO || len < 4); /* a computed CRC matches */
    }
    free(v);
    return 0;
}
