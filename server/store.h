/* store.h - the LMDB store: environment, sub-databases, key and record
 * encodings.  store.c is the only file that calls mdb_*.
 *
 * Write transactions are opened by the writer thread only (writer.c); read
 * transactions may be opened by any thread.  Every value handed out by a
 * getter is borrowed from LMDB and valid only until its transaction ends.
 * The on-disk format is described in proto/store-format.md; bump
 * MIC_STORE_FORMAT when it changes. */
#ifndef MIC_STORE_H
#define MIC_STORE_H

#include <stddef.h>
#include <stdint.h>

#define MIC_STORE_FORMAT 1
#define MIC_AKEY_LEN 16   /* aggregate key: SHA-256(type NUL id)[0..16) */
#define MIC_DIGEST_LEN 32 /* SHA-256 */

typedef struct mic_store mic_store;
typedef struct mic_txn mic_txn;

/* A log record: the indexable fields of one event plus its stored JSON. */
struct mic_rec {
    uint64_t seq;
    uint32_t topic_id;
    uint8_t priority;
    uint8_t has_agg, has_version;
    int64_t created_at_us, received_at_us;
    uint64_t version;              /* aggregate_version, 0 if none */
    uint8_t akey[MIC_AKEY_LEN];    /* zeros if no aggregate */
    const char *json;              /* the stored event, compact JSON */
    size_t json_len;
};

/* A topic's stored configuration. */
struct mic_topic_rec {
    uint32_t id;
    uint8_t require_versions;
    uint64_t retention_s;
    uint64_t max_payload_bytes;
    uint64_t dedupe_retain_s;
};

/* What the store knows about one aggregate. */
struct mic_agg_rec {
    uint8_t versioned;   /* the aggregate carries versions */
    uint64_t baseline;   /* first version seen */
    uint64_t max_version;
    uint64_t events;
};

/* ---- Environment ---- */

/* Open (creating if needed) the store in 'dir' with 'map_size' bytes of map
 * that may grow up to 'map_max'.  'nosync' skips fsync at commit (the
 * --durability none setting).  Returns MIC_EVERSION for a store of another
 * format version, MIC_EIO for other failures (logged). */
int mic_store_open(mic_store **out, const char *dir, uint64_t map_size,
                   uint64_t map_max, int nosync);
void mic_store_close(mic_store *s);

/* Double the map (up to its limit).  Waits until no read transaction is
 * open.  Writer thread only, with no write transaction open.  Returns
 * MIC_ENOSPC when the map is already at its limit. */
int mic_store_grow(mic_store *s);

/* Current map size, bytes in use, and the growth limit. */
void mic_store_usage(mic_store *s, uint64_t *map_size, uint64_t *used,
                     uint64_t *map_max);

/* Test hook: called before every write with the sub-database's name; a
 * nonzero return (an MDB or errno code) makes that write fail with it. */
void mic_store_set_fault(int (*hook)(const char *dbname));

/* ---- Transactions ---- */

/* Begin a read (write == 0) or write transaction. */
int mic_txn_begin(mic_store *s, int write, mic_txn **out);
/* Commit (syncing unless nosync) and free.  MIC_ENOSPC on a full disk. */
int mic_txn_commit(mic_txn *t);
void mic_txn_abort(mic_txn *t);

/* ---- Meta ---- */

/* The highest seq in the log, 0 if empty. */
int mic_store_last_seq(mic_txn *t, uint64_t *seq);
/* Allocate the next topic id. */
int mic_store_next_topic_id(mic_txn *t, uint32_t *id);

/* ---- Log ---- */

int mic_store_log_put(mic_txn *t, const struct mic_rec *r);
/* Fill 'r' for 'seq'; r->json is borrowed.  MIC_ENOTFOUND if absent. */
int mic_store_log_get(mic_txn *t, uint64_t seq, struct mic_rec *r);
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

/* ---- Topics ---- */

int mic_store_topic_get(mic_txn *t, const char *name, size_t len,
                        struct mic_topic_rec *tr);
int mic_store_topic_put(mic_txn *t, const char *name, size_t len,
                        const struct mic_topic_rec *tr);
int mic_store_topic_del(mic_txn *t, const char *name, size_t len);
/* Call fn for every topic in name order; stops early if fn returns
 * nonzero and returns that value. */
int mic_store_topic_each(mic_txn *t,
                         int (*fn)(void *arg, const char *name, size_t len,
                                   const struct mic_topic_rec *tr),
                         void *arg);

#endif
