/* log.c - the event log's sub-databases (store.h "Log", "Event ids",
 * "Time index", "Aggregates", "Log scans", "Retention"): records, their
 * encoding and checksum, and the indexes over them.  Only
 * engine/eventlog.c writes them (tests/check-layers.sh rule 7). */
#define _GNU_SOURCE
#include "store.h"
#include "store_int.h"

#include "core/crc32c.h"
#include "core/digest.h"
#include "core/err.h"
#include "journal.h"
#include "core/logger.h"
#include "log.h"

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

/* Reads of the log that found a record failing its checksum or not
 * decoding, since the process started (all stores). */
_Atomic uint64_t store_corrupt_reads;

/* ---- Log ---- */

/* Record format 3 (store format 4): the header of format 2 with 3 in its
 * first byte, the JSON, then the CRC-32C of the seq (8 bytes, big-endian)
 * and of every byte of the record before the CRC, as a u32.  The seq is
 * covered so that a record read under another key fails too. */
static uint32_t rec_crc(uint64_t seq, const uint8_t *p, size_t n)
{
    uint8_t kb[8];

    put_u64(kb, seq);
    return mic_crc32c(mic_crc32c(0, kb, 8), p, n);
}

/* Encode 'r' in record format 3 into 'p' (REC_HDR + json_len + REC_CRC
 * bytes). */
void store_rec_encode(uint8_t *p, const struct mic_rec *r)
{
    p[0] = REC_FMT;
    p[1] = (uint8_t)((r->has_agg ? 1 : 0) | (r->has_version ? 2 : 0));
    p[2] = r->priority;
    p[3] = 0;
    put_u32(p + 4, r->topic_id);
    put_u64(p + 8, (uint64_t)r->created_at_us);
    put_u64(p + 16, (uint64_t)r->received_at_us);
    put_u64(p + 24, r->version);
    memcpy(p + 32, r->akey, MIC_AKEY_LEN);
    put_u64(p + 48, (uint64_t)r->deliver_at_us);
    memcpy(p + REC_HDR, r->json, r->json_len);
    put_u32(p + REC_HDR + r->json_len, rec_crc(r->seq, p, REC_HDR + r->json_len));
}

int mic_store_log_put(mic_txn *t, const struct mic_rec *r)
{
    uint8_t kb[8];
    MDB_val k = {8, kb}, v;
    int rc;

    put_u64(kb, r->seq);
    v.mv_size = REC_HDR + r->json_len + REC_CRC;
    v.mv_data = NULL;
    if ((rc = store_cput(t, &t->logw, t->s->log, "log", &k, &v, MDB_APPEND | MDB_RESERVE)))
        return rc;
    store_rec_encode(v.mv_data, r);
    return MIC_OK;
}

/* The header fields of a record of any record format whose header ends at
 * 'hdr' (48: format 1, without deliver_at). */
static void rec_fields(uint64_t seq, const uint8_t *p, size_t hdr, struct mic_rec *r)
{
    r->seq = seq;
    r->has_agg = p[1] & 1;
    r->has_version = (p[1] & 2) != 0;
    r->priority = p[2];
    r->topic_id = get_u32(p + 4);
    r->created_at_us = (int64_t)get_u64(p + 8);
    r->received_at_us = (int64_t)get_u64(p + 16);
    r->version = get_u64(p + 24);
    memcpy(r->akey, p + 32, MIC_AKEY_LEN);
    r->ordinal = 0;
    r->rank = 0;
    r->deliver_at_us = hdr >= REC_HDR ? (int64_t)get_u64(p + 48) : 0;
}

int mic_rec_decode(uint64_t seq, const void *val, size_t len, struct mic_rec *r)
{
    const uint8_t *p = val;

    if (len < REC_HDR + REC_CRC)
        return MIC_EIO;
    if (get_u32(p + len - REC_CRC) != rec_crc(seq, p, len - REC_CRC))
        return MIC_ECORRUPT;
    if (p[0] != REC_FMT)
        return MIC_EIO;
    rec_fields(seq, p, REC_HDR, r);
    r->json = (const char *)p + REC_HDR;
    r->json_len = len - REC_HDR - REC_CRC;
    return MIC_OK;
}

/* Decode a record of record format 1 or 2 (stores of format 1 to 3, no
 * checksum; the migrations only) into 'r' (json borrowed). */
int store_rec_decode_old(uint64_t seq, const MDB_val *v, struct mic_rec *r)
{
    const uint8_t *p = v->mv_data;
    size_t hdr;

    if (v->mv_size < REC_HDR_V1)
        return MIC_EIO;
    hdr = p[0] == 1 ? REC_HDR_V1 : REC_HDR;
    if (p[0] < 1 || p[0] > 2 || v->mv_size < hdr)
        return MIC_EIO;
    rec_fields(seq, p, hdr, r);
    r->json = (const char *)p + hdr;
    r->json_len = v->mv_size - hdr;
    return MIC_OK;
}

/* Report a log record that fails mic_rec_decode ('why' its answer): one
 * log line naming the seq, the counter behind
 * mic_store_corrupt_records_total, and the seq for the client's error
 * (mic_err_corrupt_note). */
static void corrupt_report(uint64_t seq, int why)
{
    char s[24];

    snprintf(s, sizeof s, "%llu", (unsigned long long)seq);
    atomic_fetch_add(&store_corrupt_reads, 1);
    mic_err_corrupt_note(seq);
    mic_logger_write(MIC_LEVEL_ERROR, NULL,
            why == MIC_ECORRUPT ? "stored log record fails its checksum: not served"
                                : "stored log record does not decode: not served",
            "seq", s, "action", "run micd --verify; restore the store, or skip the delivery",
            NULL);
}

/* mic_rec_decode for the readers of the log: a record that fails it is
 * reported and answers MIC_ECORRUPT (with its checksum on every record, a
 * record that does not decode is damage too). */
static int rec_read(uint64_t seq, const MDB_val *v, struct mic_rec *r)
{
    int rc = mic_rec_decode(seq, v->mv_data, v->mv_size, r);

    if (rc == MIC_OK)
        return MIC_OK;
    corrupt_report(seq, rc);
    return MIC_ECORRUPT;
}

uint64_t mic_store_corrupt_reads(void)
{
    return atomic_load(&store_corrupt_reads);
}

int mic_store_log_get(mic_txn *t, uint64_t seq, struct mic_rec *r)
{
    uint8_t kb[8];
    MDB_val k = {8, kb}, v;
    int rc;

    put_u64(kb, seq);
    if (t->write) {
        if ((rc = store_get(t, t->s->log, &k, &v)))
            return rc;
    } else {
        /* Readers walk the log mostly in seq order (a topic's time range,
         * a backfill): step the cursor when seq follows the last one read,
         * seek otherwise. */
        if (!t->logc && (rc = mdb_cursor_open(t->txn, t->s->log, &t->logc)))
            return store_from_mdb(rc);
        rc = MDB_NOTFOUND;
        if (t->log_seq && seq == t->log_seq + 1 &&
            (rc = mdb_cursor_get(t->logc, &k, &v, MDB_NEXT)) == 0 &&
            (k.mv_size != 8 || memcmp(k.mv_data, kb, 8)))
            rc = MDB_NOTFOUND;
        if (rc) {
            k.mv_size = 8;
            k.mv_data = kb;
            rc = mdb_cursor_get(t->logc, &k, &v, MDB_SET);
        }
        t->log_seq = rc ? 0 : seq;
        if (rc)
            return store_from_mdb(rc);
    }
    return rec_read(seq, &v, r);
}

int mic_store_log_count(mic_txn *t, uint64_t *n)
{
    return store_entries(t, t->s->log, n);
}

/* ---- Event ids ---- */

int mic_store_id_get(mic_txn *t, const char *id, size_t idlen, uint64_t *seq,
                     uint8_t digest[MIC_DIGEST_LEN])
{
    MDB_val k = {idlen, (void *)id}, v;
    int rc = store_get(t, t->s->ids, &k, &v);

    if (rc)
        return rc;
    if (v.mv_size != 8 + MIC_DIGEST_LEN)
        return MIC_EIO;
    *seq = get_u64(v.mv_data);
    memcpy(digest, (uint8_t *)v.mv_data + 8, MIC_DIGEST_LEN);
    return MIC_OK;
}

int mic_store_id_put(mic_txn *t, const char *id, size_t idlen, uint64_t seq,
                     const uint8_t digest[MIC_DIGEST_LEN])
{
    uint8_t vb[8 + MIC_DIGEST_LEN];
    MDB_val k = {idlen, (void *)id}, v = {sizeof vb, vb};

    put_u64(vb, seq);
    memcpy(vb + 8, digest, MIC_DIGEST_LEN);
    return store_cput(t, &t->idsc, t->s->ids, "ids", &k, &v, 0);
}

/* ---- Time index ---- */

int mic_store_time_put(mic_txn *t, uint32_t topic_id, int64_t created_at_us,
                       const char *id, size_t idlen, uint64_t seq)
{
    uint8_t kb[12 + 128], vb[8];
    MDB_val k = {12 + idlen, kb}, v = {8, vb};

    if (idlen > 128)
        return MIC_EINVAL;
    put_u32(kb, topic_id);
    put_u64(kb + 4, (uint64_t)created_at_us);
    memcpy(kb + 12, id, idlen);
    put_u64(vb, seq);
    return store_cput(t, &t->timec, t->s->time, "time", &k, &v, 0);
}

int mic_store_time_any(mic_txn *t, uint32_t topic_id)
{
    uint8_t kb[4];
    MDB_val k = {4, kb}, v;
    MDB_cursor *c;
    int rc;

    put_u32(kb, topic_id);
    if ((rc = mdb_cursor_open(t->txn, t->s->time, &c)))
        return store_from_mdb(rc);
    rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
    if (rc == 0)
        rc = k.mv_size >= 4 && get_u32(k.mv_data) == topic_id ? 0 : MDB_NOTFOUND;
    mdb_cursor_close(c);
    return store_from_mdb(rc);
}

int mic_store_time_scan(mic_txn *t, uint32_t topic_id, int64_t from_us,
                        const char *from_id, size_t from_idlen, int exclusive,
                        int64_t to_us, int max,
                        int (*fn)(void *arg, int64_t created_us, const char *id,
                                  size_t idlen, uint64_t seq),
                        void *arg)
{
    uint8_t kb[12 + 128];
    MDB_cursor *c;
    MDB_val k = {12 + from_idlen, kb}, v;
    int rc, n = 0, stop = 0;

    if (from_idlen > 128)
        return MIC_EINVAL;
    put_u32(kb, topic_id);
    put_u64(kb + 4, (uint64_t)from_us);
    memcpy(kb + 12, from_id, from_idlen);
    if ((rc = mdb_cursor_open(t->txn, t->s->time, &c)))
        return store_from_mdb(rc);
    rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
    if (rc == 0 && exclusive && k.mv_size == 12 + from_idlen &&
        !memcmp(k.mv_data, kb, 12 + from_idlen))
        rc = mdb_cursor_get(c, &k, &v, MDB_NEXT);
    for (; rc == 0 && n < max && !stop; rc = mdb_cursor_get(c, &k, &v, MDB_NEXT), n++) {
        const uint8_t *p = k.mv_data;
        int64_t at;
        if (k.mv_size < 12 || get_u32(p) != topic_id)
            break;
        at = (int64_t)get_u64(p + 4);
        if (at > to_us)
            break;
        stop = fn(arg, at, (const char *)p + 12, k.mv_size - 12, get_u64(v.mv_data));
    }
    mdb_cursor_close(c);
    if (stop)
        return stop;
    return rc == 0 || rc == MDB_NOTFOUND ? MIC_OK : store_from_mdb(rc);
}

/* ---- Aggregates ---- */

void mic_store_akey(const char *type, size_t tlen, const char *id,
                    size_t ilen, uint8_t akey[MIC_AKEY_LEN])
{
    uint8_t buf[2 * 1024 + 1], md[32];

    if (tlen + ilen + 1 > sizeof buf) /* callers validate; keep it safe */
        tlen = ilen = 0;
    memcpy(buf, type, tlen);
    buf[tlen] = 0;
    memcpy(buf + tlen + 1, id, ilen);
    mic_sha256(buf, tlen + 1 + ilen, md);
    memcpy(akey, md, MIC_AKEY_LEN);
}


/* The highest version in aggidx of versioned aggregate 'akey' into *ver (0
 * if none): one seek past the aggregate's keys and one step back. */
static int aggidx_last_version(mic_txn *t, const uint8_t akey[MIC_AKEY_LEN], uint64_t *ver)
{
    uint8_t kb[MIC_AKEY_LEN + 8];
    MDB_val k = {sizeof kb, kb}, v;
    MDB_cursor *c;
    int rc;

    *ver = 0;
    memcpy(kb, akey, MIC_AKEY_LEN);
    memset(kb + MIC_AKEY_LEN, 0xff, 8);
    if ((rc = mdb_cursor_open(t->txn, t->s->aggidx, &c)))
        return store_from_mdb(rc);
    rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
    rc = mdb_cursor_get(c, &k, &v, rc == MDB_NOTFOUND ? MDB_LAST : MDB_PREV);
    if (rc == 0 && k.mv_size == MIC_AKEY_LEN + 8 && !memcmp(k.mv_data, akey, MIC_AKEY_LEN))
        *ver = get_u64((uint8_t *)k.mv_data + MIC_AKEY_LEN);
    mdb_cursor_close(c);
    return rc == 0 || rc == MDB_NOTFOUND ? MIC_OK : store_from_mdb(rc);
}

int mic_store_agg_get(mic_txn *t, const uint8_t akey[MIC_AKEY_LEN],
                      struct mic_agg_rec *a)
{
    MDB_val k = {MIC_AKEY_LEN, (void *)akey}, v;
    const uint8_t *p;
    int rc = store_get(t, t->s->aggs, &k, &v);

    if (rc)
        return rc;
    if (v.mv_size < AGG_REC + 4)
        return MIC_EIO;
    p = v.mv_data;
    a->versioned = p[0];
    a->baseline = get_u64(p + 1);
    a->max_version = get_u64(p + 9);
    a->events = get_u64(p + 17);
    a->contig = get_u64(p + 25);
    a->tlen = (uint16_t)(p[33] << 8 | p[34]);
    if (a->tlen > MIC_AGG_NAME_MAX || v.mv_size < (size_t)AGG_REC + 4 + a->tlen)
        return MIC_EIO;
    memcpy(a->type, p + 35, a->tlen);
    a->type[a->tlen] = 0;
    p += 35 + a->tlen;
    a->ilen = (uint16_t)(p[0] << 8 | p[1]);
    if (a->ilen > MIC_AGG_NAME_MAX || v.mv_size < (size_t)AGG_REC + 4 + a->tlen + a->ilen)
        return MIC_EIO;
    memcpy(a->id, p + 2, a->ilen);
    a->id[a->ilen] = 0;
    /* Format 2 appends the ordinal; a format-1 record has none (0). */
    a->ordinal = v.mv_size >= (size_t)AGG_REC + 4 + a->tlen + a->ilen + 8
                 ? get_u64(p + 2 + a->ilen) : 0;
    a->contig_stored = a->contig;
    if (!a->versioned)
        return MIC_OK;
    /* Format 3: the last version is the index's, and a watermark of 0
     * means "contiguous to it" (records of format 2 hold both explicitly,
     * with the same values). */
    if ((rc = aggidx_last_version(t, akey, &a->max_version)))
        return rc;
    if (!a->contig)
        a->contig = a->max_version;
    return MIC_OK;
}

int mic_store_agg_put(mic_txn *t, const uint8_t akey[MIC_AKEY_LEN],
                      const struct mic_agg_rec *a)
{
    uint8_t vb[AGG_REC + 4 + 2 * MIC_AGG_NAME_MAX + 8];
    MDB_val k = {MIC_AKEY_LEN, (void *)akey}, v = {AGG_REC + 4 + a->tlen + a->ilen + 8, vb};

    vb[0] = a->versioned;
    put_u64(vb + 1, a->baseline);
    put_u64(vb + 9, a->max_version);
    put_u64(vb + 17, a->events);
    put_u64(vb + 25, a->versioned && a->contig == a->max_version ? 0 : a->contig);
    vb[33] = (uint8_t)(a->tlen >> 8);
    vb[34] = (uint8_t)a->tlen;
    memcpy(vb + 35, a->type, a->tlen);
    vb[35 + a->tlen] = (uint8_t)(a->ilen >> 8);
    vb[36 + a->tlen] = (uint8_t)a->ilen;
    memcpy(vb + 37 + a->tlen, a->id, a->ilen);
    put_u64(vb + 37 + a->tlen + a->ilen, a->ordinal);
    return store_put(t, t->s->aggs, "aggs", &k, &v, 0);
}

int mic_store_aggidx_get_version(mic_txn *t, const uint8_t akey[MIC_AKEY_LEN],
                                 uint64_t ver, uint64_t *seq)
{
    uint8_t kb[MIC_AKEY_LEN + 8];
    MDB_val k = {sizeof kb, kb}, v;
    int rc;

    memcpy(kb, akey, MIC_AKEY_LEN);
    put_u64(kb + MIC_AKEY_LEN, ver);
    if ((rc = store_get(t, t->s->aggidx, &k, &v)))
        return rc;
    *seq = get_u64(v.mv_data);
    return MIC_OK;
}

int mic_store_aggidx_put(mic_txn *t, const struct mic_rec *r)
{
    uint8_t kb[MIC_AKEY_LEN + 16], vb[8];
    MDB_val k = {MIC_AKEY_LEN + 8, kb}, v = {8, vb};

    memcpy(kb, r->akey, MIC_AKEY_LEN);
    if (r->has_version) {
        put_u64(kb + MIC_AKEY_LEN, r->version);
    } else {
        put_u64(kb + MIC_AKEY_LEN, (uint64_t)r->created_at_us);
        put_u64(kb + MIC_AKEY_LEN + 8, r->seq);
        k.mv_size += 8;
    }
    put_u64(vb, r->seq);
    return store_put(t, t->s->aggidx, "aggidx", &k, &v, MDB_NOOVERWRITE);
}

/* ---- Log scans ---- */

int mic_store_log_scan(mic_txn *t, uint64_t from, uint64_t to, int max,
                       int (*fn)(void *arg, const struct mic_rec *r),
                       void *arg, uint64_t *next)
{
    uint8_t kb[8];
    MDB_cursor *c;
    MDB_val k = {8, kb}, v;
    int rc, n = 0;

    *next = from;
    put_u64(kb, from);
    if ((rc = mdb_cursor_open(t->txn, t->s->log, &c)))
        return store_from_mdb(rc);
    for (rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE); rc == 0 && n < max;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT), n++) {
        uint64_t seq = get_u64(k.mv_data);
        struct mic_rec r;

        if (seq > to) {
            rc = MDB_NOTFOUND;
            break;
        }
        *next = seq + 1;
        if (rec_read(seq, &v, &r))
            continue; /* reported; passed over (store.h) */
        if (fn(arg, &r))
            break;
    }
    mdb_cursor_close(c);
    if (rc == MDB_NOTFOUND)
        *next = to + 1;
    return rc == MDB_NOTFOUND || rc == 0 ? MIC_OK : store_from_mdb(rc);
}

int mic_store_aggidx_each(mic_txn *t, const uint8_t akey[MIC_AKEY_LEN],
                          int (*fn)(void *arg, uint64_t seq), void *arg)
{
    MDB_cursor *c;
    MDB_val k = {MIC_AKEY_LEN, (void *)akey}, v;
    int rc, stop = 0;

    if ((rc = mdb_cursor_open(t->txn, t->s->aggidx, &c)))
        return store_from_mdb(rc);
    for (rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
         rc == 0 && !stop && k.mv_size > MIC_AKEY_LEN && !memcmp(k.mv_data, akey, MIC_AKEY_LEN);
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT))
        stop = fn(arg, get_u64(v.mv_data));
    mdb_cursor_close(c);
    if (stop)
        return stop;
    return rc == MDB_NOTFOUND || rc == 0 ? MIC_OK : store_from_mdb(rc);
}

int mic_store_gapskip_put(mic_txn *t, const uint8_t akey[MIC_AKEY_LEN], uint64_t ver)
{
    uint8_t kb[MIC_AKEY_LEN + 8];
    MDB_val k = {sizeof kb, kb}, v = {0, NULL};

    memcpy(kb, akey, MIC_AKEY_LEN);
    put_u64(kb + MIC_AKEY_LEN, ver);
    return store_put(t, t->s->gapskip, "gapskip", &k, &v, 0);
}

int mic_store_gapskip_get(mic_txn *t, const uint8_t akey[MIC_AKEY_LEN], uint64_t ver)
{
    uint8_t kb[MIC_AKEY_LEN + 8];
    MDB_val k = {sizeof kb, kb}, v;

    memcpy(kb, akey, MIC_AKEY_LEN);
    put_u64(kb + MIC_AKEY_LEN, ver);
    return store_get(t, t->s->gapskip, &k, &v);
}

/* ---- Retention ---- */

int mic_store_expiry_put(mic_txn *t, int64_t due, uint64_t seq, uint8_t kind,
                         const char *id, size_t idlen)
{
    uint8_t kb[16], vb[1 + 128];
    MDB_val k = {16, kb}, v = {1 + idlen, vb};

    if (idlen > 128)
        return MIC_EINVAL;
    put_u64(kb, (uint64_t)due);
    put_u64(kb + 8, seq);
    vb[0] = kind;
    memcpy(vb + 1, id, idlen);
    return store_put(t, t->s->expiry, "expiry", &k, &v, 0);
}

int mic_store_expiry_del(mic_txn *t, int64_t due, uint64_t seq)
{
    uint8_t kb[16];
    MDB_val k = {16, kb};
    int rc;

    put_u64(kb, (uint64_t)due);
    put_u64(kb + 8, seq);
    rc = mdb_del(t->txn, t->s->expiry, &k, NULL);
    return rc == MDB_NOTFOUND ? MIC_OK : store_from_mdb(rc);
}

int mic_store_expiry_put_range(mic_txn *t, const struct mic_expiry *e)
{
    uint8_t kb[16], vb[21];
    MDB_val k = {16, kb}, v = {21, vb};

    put_u64(kb, (uint64_t)e->due);
    put_u64(kb + 8, e->seq);
    vb[0] = MIC_EXPIRE_RANGE;
    put_u32(vb + 1, e->topic_id);
    put_u64(vb + 5, e->last_seq);
    put_u64(vb + 13, e->retention_s);
    return store_put(t, t->s->expiry, "expiry", &k, &v, 0);
}

int mic_store_expiry_first(mic_txn *t, struct mic_expiry *e)
{
    MDB_cursor *c;
    MDB_val k, v;
    int rc;

    if ((rc = mdb_cursor_open(t->txn, t->s->expiry, &c)))
        return store_from_mdb(rc);
    rc = mdb_cursor_get(c, &k, &v, MDB_FIRST);
    if (rc == 0 && (k.mv_size != 16 || v.mv_size < 1 || v.mv_size > 129))
        rc = EIO;
    if (rc == 0) {
        const uint8_t *p = v.mv_data;
        e->due = (int64_t)get_u64(k.mv_data);
        e->seq = get_u64((uint8_t *)k.mv_data + 8);
        e->kind = p[0];
        e->idlen = 0;
        e->id[0] = 0;
        if (e->kind == MIC_EXPIRE_RANGE) {
            if (v.mv_size != 21) {
                rc = EIO;
            } else {
                e->topic_id = get_u32(p + 1);
                e->last_seq = get_u64(p + 5);
                e->retention_s = get_u64(p + 13);
            }
        } else {
            e->idlen = v.mv_size - 1;
            memcpy(e->id, p + 1, e->idlen);
            e->id[e->idlen] = 0;
        }
    }
    mdb_cursor_close(c);
    return store_from_mdb(rc);
}

int mic_store_expiry_count(mic_txn *t, uint64_t *n)
{
    return store_entries(t, t->s->expiry, n);
}

int mic_store_log_del(mic_txn *t, uint64_t seq)
{
    uint8_t kb[8];
    MDB_val k = {8, kb};

    put_u64(kb, seq);
    return store_from_mdb(mdb_del(t->txn, t->s->log, &k, NULL));
}

int mic_store_time_del(mic_txn *t, uint32_t topic_id, int64_t created_at_us,
                       const char *id, size_t idlen)
{
    uint8_t kb[12 + 128];
    MDB_val k = {12 + idlen, kb};
    int rc;

    if (idlen > 128)
        return MIC_EINVAL;
    put_u32(kb, topic_id);
    put_u64(kb + 4, (uint64_t)created_at_us);
    memcpy(kb + 12, id, idlen);
    rc = mdb_del(t->txn, t->s->time, &k, NULL);
    return rc == MDB_NOTFOUND ? MIC_OK : store_from_mdb(rc);
}

int mic_store_id_del(mic_txn *t, const char *id, size_t idlen)
{
    MDB_val k = {idlen, (void *)id};
    int rc = mdb_del(t->txn, t->s->ids, &k, NULL);

    return rc == MDB_NOTFOUND ? MIC_OK : store_from_mdb(rc);
}

