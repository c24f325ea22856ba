/* verify.h - micd --verify (verify.c).
 * The conventions of store.h hold for every function below. */
#ifndef MIC_STORE_VERIFY_H
#define MIC_STORE_VERIFY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "store.h"
#include "log.h"

/* ---- Verification (micd --verify) ---- */

struct mic_verify_report {
    uint64_t records;     /* log records read */
    uint64_t bad_records; /* of them: failing their checksum or not decoding,
                           * plus delivery records that do not decode */
    uint64_t entries;     /* index entries looked at */
    uint64_t dangling;    /* of them: pointing to no log record or no
                           * delivery */
    uint64_t replayed;    /* journal records replayed before the walk */
};

/* Walk the store in 'dir' (see proto/store-format.md, "Verification"):
 * every log record (checksum and decode), and every index entry that maps
 * to a seq (ids, time, dlv, ready, dlq, aq, ags, unh, poison, timers).
 * Writes one line per problem to 'out', then fills *rep (the caller prints
 * the summary).  Takes the store's lock and replays a journal a crash left
 * (as an open would: the only write it makes), then reads everything in
 * one read-only transaction.  Returns MIC_OK when the walk finished
 * (clean or not: see *rep), MIC_ENOTFOUND (no data.mdb in 'dir'),
 * MIC_EBUSY (a micd has the store open), MIC_EVERSION (not a store of
 * format 4, or its migration is unfinished: open it with micd first), or
 * MIC_EIO (logged). */
int mic_store_verify(const char *dir, FILE *out, struct mic_verify_report *rep);

#endif
