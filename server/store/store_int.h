/* store_int.h - what the files of server/store/ share and no other folder
 * sees (tests/check-layers.sh rule 2): the environment and transaction
 * structs, the key encodings (big-endian, so keys sort in numeric order)
 * and the helpers every sub-database's code writes and reads through.
 * The sub-databases and their layouts: store.c's header. */
#ifndef MIC_STORE_INT_H
#define MIC_STORE_INT_H

#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "journal.h"
#include "store.h"

#define REC_HDR 56    /* log record header, record formats 2 and 3 */
#define REC_HDR_V1 48 /* record format 1 (no deliver_at) */
#define REC_FMT 3     /* the record format store format 4 writes (and reads) */
#define REC_CRC 4     /* its trailer: CRC-32C of the seq and the bytes before */

/* Reads of the log that found a record failing its checksum or not
 * decoding, since the process started (all stores). */
extern _Atomic uint64_t store_corrupt_reads;

struct mic_store {
    MDB_env *env;
    MDB_dbi meta, log, ids, time, aggs, aggidx, topics;
    MDB_dbi groups, drops, dlv, ready, timers, dlq, aq, ags, gapskip, runs, expiry, gstat;
    MDB_dbi unh, poison, tstat;
    uint64_t map_size, map_max;
    int nosync;
    pthread_rwlock_t resize;
    mic_jnl *jnl;       /* durable stores: the redo journal (journal.h) */
    int jlock;          /* --durability none: the store lock, else -1 */
    _Atomic int disk_full; /* the last write transaction met a full
                            * filesystem (not the map's limit) */
    _Atomic int copying; /* mic_store_copy_fd calls running: no map growth */
};

struct mic_txn {
    MDB_txn *txn;
    mic_store *s;
    int write;
    MDB_cursor *logc;   /* read txns: mic_store_log_get's cursor, at log_seq */
    uint64_t log_seq;
    /* Write txns: the cursors the puts of ids, time and log go through.  A
     * put through a cursor that sits on the page the key belongs on skips
     * the descent from the root (LMDB's cursor_set; an append starts on the
     * last page), and a batch's ids and times mostly land next to the
     * previous ones. */
    MDB_cursor *idsc, *timec, *logw;
};

/* meta key present while the log is being rewritten in record format 3
 * (the migration from store format 3): u64, the next seq to rewrite. */
#define CRC_NEXT "crc_next"

/* Record and key sizes of the sub-databases (their layouts: store.c). */
#define AGG_REC 33
#define AGS_REC (40 + MIC_AKEY_LEN)
#define AQ_KEY 28 /* gid u32, ord u64, k1 u64, seq u64 */
#define DLV_HDR 42
#define DLV_ORD 16
#define DLV_RANK 8
#define DLV_V1_HDR 64
#define GROUP_HDR 21
#define TOPIC_REC 29

/* The test fault hook (mic_store_set_fault): consulted before every put. */
extern int (*store_fault_hook)(const char *dbname);

/* ---- Encodings ---- */

static inline void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline void put_u64(uint8_t *p, uint64_t v)
{
    put_u32(p, (uint32_t)(v >> 32));
    put_u32(p + 4, (uint32_t)v);
}

static inline uint64_t get_u64(const uint8_t *p)
{
    return (uint64_t)get_u32(p) << 32 | get_u32(p + 4);
}

/* ---- Helpers (store.c unless said) ----
 *
 * store_from_mdb: an MDB or errno code as a MIC_* code (logged when it is
 * not one of the expected ones; MDB_PANIC calls the fatal hook).
 * store_wrc: the same for a write transaction's code, noting a full
 * filesystem.  store_put / store_cput: a put (through the write txn's
 * cursor *c, opened on first use), with the test fault hook.  store_get:
 * a get.  store_entries: the entries of a sub-database.  The others are
 * named by the file that defines them. */
int store_cput(mic_txn *t, MDB_cursor **c, MDB_dbi dbi, const char *name, MDB_val *k,
                MDB_val *v, unsigned flags);
int store_entries(mic_txn *t, MDB_dbi dbi, uint64_t *n);
int store_from_mdb(int rc);
int store_get(mic_txn *t, MDB_dbi dbi, MDB_val *k, MDB_val *v);
int store_put(mic_txn *t, MDB_dbi dbi, const char *name, MDB_val *k,
               MDB_val *v, unsigned flags);
int store_next_id(mic_txn *t, const char *name, uint32_t *id);
int store_next_ordinal(MDB_txn *txn, MDB_dbi meta, uint64_t *ord);
int store_migrate_1_to_2(mic_store *s, MDB_txn *txn);
int store_migrate_log(mic_store *s);
/* Records of dlv.h and log.h that the migrations and --verify decode and
 * encode with dlv.c's and log.c's functions. */
struct mic_ags;
struct mic_dlv;
struct mic_rec;
void store_ags_decode(const uint8_t *p, struct mic_ags *a);
void store_aq_key(uint8_t *kb, uint32_t gid, uint64_t ord, uint64_t k1, uint64_t seq);
int store_dlv_decode(const MDB_val *v, struct mic_dlv *d);
size_t store_dlv_encode(uint8_t *vb, const struct mic_dlv *d);
int store_rec_decode_old(uint64_t seq, const MDB_val *v, struct mic_rec *r);
void store_rec_encode(uint8_t *p, const struct mic_rec *r);

#endif
