/* migrate.c - opening a store of an older format: from format 1 (one
 * write transaction, at open) and from format 3 (a checksum on every log
 * record, in bounded transactions with a resume key in meta). */
#define _GNU_SOURCE
#include "store.h"
#include "store_int.h"

#include "core/crc32c.h"
#include "core/digest.h"
#include "core/err.h"
#include "journal.h"
#include "core/logger.h"
#include "dlv.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- Migration from format 1 (one write transaction, at open) ----
 *
 * Format 2 keys the ordered groups' trees by an aggregate ordinal instead
 * of the aggregate's hash, stores a compact delivery record with the
 * aggregate's ordinal and order key, and keeps no blocked flag in 'ags'.
 * Steps: give every aggregate an ordinal (in key order), rewrite 'ags' and
 * 'aq' under the new keys, rewrite every delivery record (counting the
 * skipped ones, a figure format 2 adds).  Log records of
 * format 1 stay as they are here (rec_decode_old reads both); the
 * migration from format 3 then rewrites them all (below). */

/* A record of 'ags' or 'aq' as format 1 wrote it. */
struct mig_rec { uint8_t k[4 + MIC_AKEY_LEN + 16]; uint8_t v[33]; };

/* Remove every record of 'dbi' (keys of 'ksize' bytes, values of at least
 * 'vsize' bytes) into *out (malloc'd, *n of them; the caller frees). */
static int mig_take(MDB_txn *txn, MDB_dbi dbi, size_t ksize, size_t vsize,
                    struct mig_rec **out, size_t *n)
{
    struct mig_rec *recs = NULL;
    size_t cap = 0;
    MDB_cursor *c;
    MDB_val k, v;
    int rc;

    *n = 0;
    if ((rc = mdb_cursor_open(txn, dbi, &c)))
        return rc;
    for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &v, MDB_FIRST)) {
        if (k.mv_size != ksize || v.mv_size < vsize) {
            rc = MDB_CORRUPTED;
            break;
        }
        if (*n == cap) {
            size_t ncap = cap ? cap * 2 : 256;
            struct mig_rec *p = realloc(recs, ncap * sizeof *p);
            if (!p) {
                rc = ENOMEM;
                break;
            }
            recs = p;
            cap = ncap;
        }
        memcpy(recs[*n].k, k.mv_data, ksize);
        memcpy(recs[*n].v, v.mv_data, vsize);
        (*n)++;
        if ((rc = mdb_cursor_del(c, 0)))
            break;
    }
    mdb_cursor_close(c);
    *out = recs;
    return rc == MDB_NOTFOUND ? 0 : rc;
}

static int mig_ordinal(MDB_txn *txn, mic_store *s, const uint8_t *akey, uint64_t *ord)
{
    MDB_val k = {MIC_AKEY_LEN, (void *)akey}, v;
    int rc = mdb_get(txn, s->aggs, &k, &v);
    const uint8_t *p;
    size_t tl, il;

    if (rc)
        return rc;
    p = v.mv_data;
    if (v.mv_size < AGG_REC + 4)
        return MDB_CORRUPTED;
    tl = (size_t)(p[33] << 8 | p[34]);
    if (v.mv_size < AGG_REC + 4 + tl)
        return MDB_CORRUPTED;
    il = (size_t)(p[35 + tl] << 8 | p[36 + tl]);
    if (v.mv_size < AGG_REC + 4 + tl + il + 8)
        return MDB_CORRUPTED;
    *ord = get_u64(p + 37 + tl + il);
    return 0;
}

/* Format 2 counts skipped deliveries in gstat slot 7 (reserved before). */
static int mig_count_skip(MDB_txn *txn, mic_store *s, const uint8_t *gid)
{
    uint8_t vb[8 * MIC_GSTAT_N];
    MDB_val k = {4, (void *)gid}, v;
    int rc = mdb_get(txn, s->gstat, &k, &v);

    memset(vb, 0, sizeof vb);
    if (rc == 0)
        memcpy(vb, v.mv_data, v.mv_size < sizeof vb ? v.mv_size : sizeof vb);
    else if (rc != MDB_NOTFOUND)
        return rc;
    put_u64(vb + 8 * MIC_GSTAT_SKIPPED, get_u64(vb + 8 * MIC_GSTAT_SKIPPED) + 1);
    v.mv_size = sizeof vb;
    v.mv_data = vb;
    return mdb_put(txn, s->gstat, &k, &v, 0);
}

int store_migrate_1_to_2(mic_store *s, MDB_txn *txn)
{
    struct mig_rec *ags = NULL, *aq = NULL;
    size_t nags = 0, naq = 0;
    MDB_cursor *c = NULL;
    MDB_val k, v;
    int rc;

    /* 1. An ordinal for every aggregate. */
    if ((rc = mdb_cursor_open(txn, s->aggs, &c)))
        return rc;
    for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        uint8_t vb[AGG_REC + 4 + 2 * MIC_AGG_NAME_MAX + 8], kb[MIC_AKEY_LEN];
        uint64_t ord;
        MDB_val nv = {v.mv_size + 8, vb};
        if (v.mv_size > sizeof vb - 8 || k.mv_size != MIC_AKEY_LEN) {
            rc = MDB_CORRUPTED;
            break;
        }
        /* The key and value point into the page the put rewrites: copy. */
        memcpy(kb, k.mv_data, MIC_AKEY_LEN);
        k.mv_data = kb;
        memcpy(vb, v.mv_data, v.mv_size);
        if ((rc = store_next_ordinal(txn, s->meta, &ord)))
            break;
        put_u64(vb + v.mv_size, ord);
        if ((rc = mdb_cursor_put(c, &k, &nv, MDB_CURRENT)))
            break;
    }
    mdb_cursor_close(c);
    if (rc != MDB_NOTFOUND)
        return rc;
    /* 2. Collect 'ags' and 'aq' under their old keys, remove them. */
    if ((rc = mig_take(txn, s->ags, 4 + MIC_AKEY_LEN, 33, &ags, &nags)) ||
        (rc = mig_take(txn, s->aq, 4 + MIC_AKEY_LEN + 16, 8, &aq, &naq)))
        goto done;
    /* 3. Put them back under (gid, ordinal). */
    for (size_t i = 0; i < nags; i++) {
        uint8_t kb[12], vb[AGS_REC];
        MDB_val nk = {12, kb}, nv = {AGS_REC, vb};
        uint64_t ord;
        if ((rc = mig_ordinal(txn, s, ags[i].k + 4, &ord)))
            goto done;
        memcpy(kb, ags[i].k, 4);
        put_u64(kb + 4, ord);
        memcpy(vb, ags[i].v, 32); /* active, missing, since, waiting */
        put_u64(vb + 32, 0);      /* pos: format 1 deleted released entries */
        memcpy(vb + 40, ags[i].k + 4, MIC_AKEY_LEN);
        if ((rc = mdb_put(txn, s->ags, &nk, &nv, 0)))
            goto done;
    }
    for (size_t i = 0; i < naq; i++) {
        uint8_t kb[AQ_KEY];
        MDB_val nk = {AQ_KEY, kb}, nv = {0, NULL};
        uint64_t ord;
        if ((rc = mig_ordinal(txn, s, aq[i].k + 4, &ord)))
            goto done;
        /* format 1: gid, akey, k1, k2 -> seq; format 2 keys (gid, ord, k1, seq) */
        store_aq_key(kb, get_u32(aq[i].k), ord, get_u64(aq[i].k + 4 + MIC_AKEY_LEN), get_u64(aq[i].v));
        if ((rc = mdb_put(txn, s->aq, &nk, &nv, 0)))
            goto done;
    }
    /* 4. Every delivery record in the new layout. */
    if ((rc = mdb_cursor_open(txn, s->dlv, &c)))
        goto done;
    for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        const uint8_t *p = v.mv_data;
        uint8_t vb[DLV_HDR + DLV_ORD + DLV_RANK + MIC_WORKER_MAX + MIC_ERROR_MAX], lk[8], dk[12];
        MDB_val lkey = {8, lk}, lv, nv = {0, vb};
        struct mic_dlv d;
        struct mic_rec r;
        if (k.mv_size != 12 || v.mv_size < DLV_V1_HDR) {
            rc = MDB_CORRUPTED;
            break;
        }
        memset(&d, 0, sizeof d);
        d.state = p[0];
        d.priority = p[1];
        d.worker_len = p[2];
        d.attempts = get_u32(p + 4);
        d.not_before = (int64_t)get_u64(p + 8);
        d.lease_expires = (int64_t)get_u64(p + 16);
        d.terminal_at = (int64_t)get_u64(p + 24);
        memcpy(d.token, p + 32, MIC_TOKEN_LEN);
        d.error_len = (uint16_t)(p[48] << 8 | p[49]);
        d.handed = p[50];
        d.created_at = (int64_t)get_u64(p + 56);
        if (d.worker_len > MIC_WORKER_MAX || d.error_len > MIC_ERROR_MAX ||
            v.mv_size < (size_t)DLV_V1_HDR + d.worker_len + d.error_len) {
            rc = MDB_CORRUPTED;
            break;
        }
        memcpy(d.worker, p + DLV_V1_HDR, d.worker_len);
        memcpy(d.last_error, p + DLV_V1_HDR + d.worker_len, d.error_len);
        memcpy(dk, k.mv_data, 12); /* the put rewrites the page 'k' points into */
        k.mv_data = dk;
        memcpy(lk, dk + 4, 8);
        rc = mdb_get(txn, s->log, &lkey, &lv);
        if (rc == 0 && store_rec_decode_old(get_u64(lk), &lv, &r) == MIC_OK && r.has_agg) {
            if ((rc = mig_ordinal(txn, s, r.akey, &d.ord)))
                break;
            d.versioned = r.has_version;
            d.k1 = r.has_version ? r.version : (uint64_t)r.created_at_us;
        } else if (rc && rc != MDB_NOTFOUND) {
            break;
        }
        nv.mv_size = store_dlv_encode(vb, &d);
        if ((rc = mdb_cursor_put(c, &k, &nv, MDB_CURRENT)))
            break;
        if (d.state == MIC_DLV_SKIPPED && (rc = mig_count_skip(txn, s, dk)))
            break;
    }
    mdb_cursor_close(c);
    if (rc == MDB_NOTFOUND)
        rc = 0;
done:
    free(ags);
    free(aq);
    return rc;
}

/* ---- Migration from format 3: a checksum on every log record ----
 *
 * One pass over the log in seq order, MIGRATE_RECORDS records or
 * MIGRATE_BYTES bytes of records per write transaction (each committed and
 * made durable before the next: the journal holds one transaction's pages
 * in memory, so a bounded transaction bounds it): every record of record
 * format 1 or 2 is rewritten in format 3 (its header, deliver_at 0 for a
 * format-1 record, the JSON, the CRC).  meta "crc_next" holds the next seq
 * to rewrite; it is written with the format number in the transaction that
 * starts the migration, moved by each one, and deleted by the last, so an
 * open after a crash in the middle goes on where the last commit stopped.
 * A record that does not decode in the old formats is left as it is: from
 * then on it fails its checksum, and reads and --verify report it. */

#define MIGRATE_RECORDS 4096
#define MIGRATE_BYTES ((size_t)32 << 20)

/* One transaction of the pass: *converted counts the records it rewrote
 * (when it commits); *done once the log is all in format 3. */
static int migrate_log_chunk(mic_store *s, uint64_t *converted, int *done)
{
    MDB_val nk = {8, CRC_NEXT}, k, v;
    uint8_t *buf = NULL, nb[8], kb[8];
    size_t cap = 0, bytes = 0;
    uint64_t next, conv = 0;
    MDB_cursor *c = NULL;
    mic_txn *t;
    int rc, n = 0, mrc = MIC_OK;

    *done = 0;
    if ((mrc = mic_txn_begin(s, 1, &t)))
        return mrc;
    if ((rc = mdb_get(t->txn, s->meta, &nk, &v)))
        goto fail;
    if (v.mv_size != 8) {
        rc = MDB_CORRUPTED;
        goto fail;
    }
    next = get_u64(v.mv_data);
    if ((rc = mdb_cursor_open(t->txn, s->log, &c)))
        goto fail;
    for (;;) {
        struct mic_rec r;
        uint64_t seq;
        size_t need;
        put_u64(kb, next);
        k.mv_size = 8;
        k.mv_data = kb;
        if ((rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE))) {
            if (rc != MDB_NOTFOUND)
                goto fail;
            *done = 1;
            break;
        }
        if (n >= MIGRATE_RECORDS || bytes >= MIGRATE_BYTES)
            break;
        if (k.mv_size != 8) {
            rc = MDB_CORRUPTED;
            goto fail;
        }
        seq = get_u64(k.mv_data);
        next = seq + 1;
        n++;
        bytes += v.mv_size;
        if (store_rec_decode_old(seq, &v, &r) != MIC_OK) {
            char sq[24];
            snprintf(sq, sizeof sq, "%llu", (unsigned long long)seq);
            mic_logger_write(MIC_LEVEL_ERROR, NULL, "log record does not decode: left as it is",
                    "seq", sq, NULL);
            continue;
        }
        need = REC_HDR + r.json_len + REC_CRC;
        if (need > cap) {
            uint8_t *p = realloc(buf, need);
            if (!p) {
                rc = ENOMEM;
                goto fail;
            }
            buf = p;
            cap = need;
        }
        /* r.json points into the page the put rewrites: encode first. */
        store_rec_encode(buf, &r);
        k.mv_data = kb;
        put_u64(kb, seq);
        v.mv_size = need;
        v.mv_data = buf;
        if ((rc = mdb_put(t->txn, s->log, &k, &v, 0)))
            goto fail;
        conv++;
    }
    mdb_cursor_close(c);
    c = NULL;
    if (*done) {
        rc = mdb_del(t->txn, s->meta, &nk, NULL);
    } else {
        MDB_val nv = {8, nb};
        put_u64(nb, next);
        rc = mdb_put(t->txn, s->meta, &nk, &nv, 0);
    }
    if (rc)
        goto fail;
    free(buf);
    if ((mrc = mic_txn_commit(t)))
        return mrc;
    *converted += conv;
    return s->jnl ? mic_jnl_flush(s->jnl) : MIC_OK;
fail:
    if (c)
        mdb_cursor_close(c);
    free(buf);
    mic_txn_abort(t);
    return store_from_mdb(rc);
}

/* Run the pass to its end if one is under way (meta "crc_next"), growing
 * the map when a transaction needs it. */
int store_migrate_log(mic_store *s)
{
    MDB_val nk = {8, CRC_NEXT}, v;
    uint64_t converted = 0;
    mic_txn *t;
    int rc, done = 0, found;

    if ((rc = mic_txn_begin(s, 0, &t)))
        return rc;
    found = mdb_get(t->txn, s->meta, &nk, &v) == 0;
    mic_txn_abort(t);
    if (!found)
        return MIC_OK;
    while (!done) {
        rc = migrate_log_chunk(s, &converted, &done);
        if (rc == MIC_ENOSPC && mic_store_grow(s) == MIC_OK)
            continue;
        if (rc)
            return rc;
    }
    {
        char n[24];
        snprintf(n, sizeof n, "%llu", (unsigned long long)converted);
        mic_logger_write(MIC_LEVEL_INFO, NULL, "log records checksummed", "records", n, NULL);
    }
    return MIC_OK;
}

