/* log.h - the event log's sub-databases: records, event ids, the time index, aggregates, log scans, the retention index (log.c; only engine/eventlog.c writes them).
 * The conventions of store.h hold for every function below. */
#ifndef MIC_STORE_LOG_H
#define MIC_STORE_LOG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "store.h"

/* ---- Log ---- */

/* Append 'r' (record format 3: with its CRC-32C). */
int mic_store_log_put(mic_txn *t, const struct mic_rec *r);
/* Fill 'r' for 'seq'; r->json is borrowed.  MIC_ENOTFOUND if absent,
 * MIC_ECORRUPT if the record fails its checksum or does not decode
 * (reported: see the conventions above). */
int mic_store_log_get(mic_txn *t, uint64_t seq, struct mic_rec *r);
/* Decode the log record 'val' ('len' bytes, stored under 'seq') into 'r'
 * (r->json points into 'val'), with no LMDB and no side effect: for the
 * store's readers, --verify and the fuzz target.  Returns MIC_OK,
 * MIC_ECORRUPT when its CRC-32C (the last 4 bytes) does not match the seq
 * and the bytes before it, or MIC_EIO when it is too short to hold a
 * header and a CRC, or its CRC matches but its record format is not 3. */
int mic_rec_decode(uint64_t seq, const void *val, size_t len, struct mic_rec *r);
/* Reads of a log record that failed mic_rec_decode since the process
 * started (GET /metrics: mic_store_corrupt_records_total). */
uint64_t mic_store_corrupt_reads(void);
/* Number of records in the log. */
int mic_store_log_count(mic_txn *t, uint64_t *n);

/* ---- Event ids ---- */

int mic_store_id_get(mic_txn *t, const char *id, size_t idlen, uint64_t *seq,
                     uint8_t digest[MIC_DIGEST_LEN]);
int mic_store_id_put(mic_txn *t, const char *id, size_t idlen, uint64_t seq,
                     const uint8_t digest[MIC_DIGEST_LEN]);

/* ---- Time index: (topic_id, created_at, event_id) -> seq ---- */

int mic_store_time_put(mic_txn *t, uint32_t topic_id, int64_t created_at_us,
                       const char *id, size_t idlen, uint64_t seq);
/* MIC_OK if the topic has at least one event, MIC_ENOTFOUND if none. */
int mic_store_time_any(mic_txn *t, uint32_t topic_id);
/* Call fn for up to 'max' entries of topic 'topic_id' in (created_at,
 * event_id) order from position (from_us, from_id) -- exclusive of it when
 * 'exclusive' -- while created_at <= to_us.  fn gets the entry's
 * created_at, event_id and seq; a nonzero return stops the walk and is
 * returned. */
int mic_store_time_scan(mic_txn *t, uint32_t topic_id, int64_t from_us,
                        const char *from_id, size_t from_idlen, int exclusive,
                        int64_t to_us, int max,
                        int (*fn)(void *arg, int64_t created_us, const char *id,
                                  size_t idlen, uint64_t seq),
                        void *arg);

/* ---- Aggregates ---- */

void mic_store_akey(const char *type, size_t tlen, const char *id,
                    size_t ilen, uint8_t akey[MIC_AKEY_LEN]);
int mic_store_agg_get(mic_txn *t, const uint8_t akey[MIC_AKEY_LEN],
                      struct mic_agg_rec *a);
int mic_store_agg_put(mic_txn *t, const uint8_t akey[MIC_AKEY_LEN],
                      const struct mic_agg_rec *a);
/* The seq stored at version 'v' of a versioned aggregate. */
int mic_store_aggidx_get_version(mic_txn *t, const uint8_t akey[MIC_AKEY_LEN],
                                 uint64_t v, uint64_t *seq);
/* Index record 'r' (which has an aggregate) under its order key: the
 * version, or (created_at, seq) for an unversioned aggregate. */
int mic_store_aggidx_put(mic_txn *t, const struct mic_rec *r);

/* ---- Log scans ---- */

/* Up to 'max' records with seq in [from, to], in seq order; calls fn for
 * each (r->json borrowed).  Stops early when fn returns nonzero.  A record
 * that fails its checksum is reported (see the conventions above), counts
 * towards 'max', and is passed over: fn never sees it, and the scan (a
 * backfill, a retention sweep: background work of the writer) goes on, so
 * one bad record cannot fail every batch. */
int mic_store_log_scan(mic_txn *t, uint64_t from, uint64_t to, int max,
                       int (*fn)(void *arg, const struct mic_rec *r),
                       void *arg, uint64_t *next);

/* Call fn with the seq of every event of aggregate 'akey', in aggregate
 * order, starting after order key (k1, k2) (0, 0 = from the first). */
int mic_store_aggidx_each(mic_txn *t, const uint8_t akey[MIC_AKEY_LEN],
                          int (*fn)(void *arg, uint64_t seq), void *arg);

/* Versions skipped by an admin: (akey, version). */
int mic_store_gapskip_put(mic_txn *t, const uint8_t akey[MIC_AKEY_LEN], uint64_t v);
int mic_store_gapskip_get(mic_txn *t, const uint8_t akey[MIC_AKEY_LEN], uint64_t v);

/* ---- Retention: (due µs, seq) -> kind, then the kind's fields ---- */

/* 1: remove event 'seq' (looked at again: a group still needed it);
 * 2: forget the id of removed event 'seq';
 * 3: remove the events of topic 'topic_id' with seq in [seq, last_seq]
 *    (one entry per topic and commit; each one when its own received_at +
 *    retention_s has passed; events of other topics in between are not
 *    its business). */
enum mic_expiry_kind { MIC_EXPIRE_EVENT = 1, MIC_EXPIRE_ID = 2, MIC_EXPIRE_RANGE = 3 };
struct mic_expiry {
    int64_t due;
    uint64_t seq;
    uint8_t kind;
    char id[128 + 1];      /* kinds 1 and 2: the event id, NUL-terminated */
    size_t idlen;
    uint32_t topic_id;     /* kind 3 */
    uint64_t last_seq;     /* kind 3 */
    uint64_t retention_s;  /* kind 3: the topic's retention when published */
};
/* Kinds 1 and 2.  Returns MIC_OK, MIC_EINVAL (idlen > 128) or a store
 * error. */
int mic_store_expiry_put(mic_txn *t, int64_t due, uint64_t seq, uint8_t kind,
                         const char *id, size_t idlen);
/* Kind 3 (e->kind, e->id are not read).  Returns MIC_OK or a store error. */
int mic_store_expiry_put_range(mic_txn *t, const struct mic_expiry *e);
/* MIC_OK also when there is no such entry. */
int mic_store_expiry_del(mic_txn *t, int64_t due, uint64_t seq);
/* The earliest entry into *e.  Returns MIC_OK, MIC_ENOTFOUND (none),
 * MIC_EIO (an entry of unknown shape) or a store error. */
int mic_store_expiry_first(mic_txn *t, struct mic_expiry *e);
/* The number of entries (for figures and tests).  Returns MIC_OK or a
 * store error. */
int mic_store_expiry_count(mic_txn *t, uint64_t *n);
int mic_store_log_del(mic_txn *t, uint64_t seq);
int mic_store_time_del(mic_txn *t, uint32_t topic_id, int64_t created_at_us,
                       const char *id, size_t idlen);
int mic_store_id_del(mic_txn *t, const char *id, size_t idlen);

#endif
