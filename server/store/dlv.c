/* dlv.c - the delivery indexes (store.h "Deliveries", the unhandled and
 * poison indexes, "Ordered groups", "Per-group figures"): their keys and
 * records.  What they mean and which change together is the delivery
 * engine's (engine/delivery.c, the only caller: tests/check-layers.sh
 * rule 6). */
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

/* ---- Deliveries ---- */

/* Delivery record, format 2 (proto/store-format.md):
 *   0 state, 1 priority, 2 flags (1 handed, 2 has ord/k1, 4 versioned,
 *   8 has rank), 3 worker length, 4 attempts u32, 8 the state's time u64
 *   (not_before, lease_expires or terminal_at), 16 created_at u64,
 *   24 token[16], 40 error length u16, [ord u64, k1 u64], [rank u64],
 *   then worker, error. */

static int nonterminal_state(int st)
{
    return st == MIC_DLV_PENDING || st == MIC_DLV_PROCESSING;
}

int store_dlv_decode(const MDB_val *v, struct mic_dlv *d)
{
    const uint8_t *p = v->mv_data;
    size_t h = DLV_HDR;
    int64_t tm;

    if (v->mv_size < DLV_HDR)
        return MIC_EIO;
    d->state = p[0];
    d->priority = p[1];
    d->handed = p[2] & 1;
    d->versioned = (p[2] & 4) != 0;
    d->worker_len = p[3];
    d->attempts = get_u32(p + 4);
    tm = (int64_t)get_u64(p + 8);
    d->created_at = (int64_t)get_u64(p + 16);
    memcpy(d->token, p + 24, MIC_TOKEN_LEN);
    d->error_len = (uint16_t)(p[40] << 8 | p[41]);
    d->ord = d->k1 = d->rank = 0;
    if (p[2] & 2) {
        if (v->mv_size < h + DLV_ORD)
            return MIC_EIO;
        d->ord = get_u64(p + h);
        d->k1 = get_u64(p + h + 8);
        h += DLV_ORD;
    }
    if (p[2] & 8) {
        if (v->mv_size < h + DLV_RANK)
            return MIC_EIO;
        d->rank = get_u64(p + h);
        h += DLV_RANK;
    }
    d->not_before = d->state == MIC_DLV_PENDING ? tm : 0;
    d->lease_expires = d->state == MIC_DLV_PROCESSING ? tm : 0;
    d->terminal_at = nonterminal_state(d->state) ? 0 : tm;
    if (d->worker_len > MIC_WORKER_MAX || d->error_len > MIC_ERROR_MAX ||
        v->mv_size < h + d->worker_len + d->error_len)
        return MIC_EIO;
    memcpy(d->worker, p + h, d->worker_len);
    d->worker[d->worker_len] = 0;
    memcpy(d->last_error, p + h + d->worker_len, d->error_len);
    d->last_error[d->error_len] = 0;
    return MIC_OK;
}

size_t store_dlv_encode(uint8_t *vb, const struct mic_dlv *d)
{
    size_t h = DLV_HDR;
    int64_t tm = d->state == MIC_DLV_PENDING ? d->not_before
                 : d->state == MIC_DLV_PROCESSING ? d->lease_expires : d->terminal_at;

    vb[0] = d->state;
    vb[1] = d->priority;
    vb[2] = (uint8_t)((d->handed ? 1 : 0) | (d->ord ? 2 : 0) | (d->versioned ? 4 : 0) |
                      (d->rank ? 8 : 0));
    vb[3] = d->worker_len;
    put_u32(vb + 4, d->attempts);
    put_u64(vb + 8, (uint64_t)tm);
    put_u64(vb + 16, (uint64_t)d->created_at);
    memcpy(vb + 24, d->token, MIC_TOKEN_LEN);
    vb[40] = (uint8_t)(d->error_len >> 8);
    vb[41] = (uint8_t)d->error_len;
    if (d->ord) {
        put_u64(vb + h, d->ord);
        put_u64(vb + h + 8, d->k1);
        h += DLV_ORD;
    }
    if (d->rank) {
        put_u64(vb + h, d->rank);
        h += DLV_RANK;
    }
    memcpy(vb + h, d->worker, d->worker_len);
    memcpy(vb + h + d->worker_len, d->last_error, d->error_len);
    return h + d->worker_len + d->error_len;
}

int mic_store_dlv_get(mic_txn *t, uint32_t gid, uint64_t seq, struct mic_dlv *d)
{
    uint8_t kb[12];
    MDB_val k = {12, kb}, v;
    int rc;

    put_u32(kb, gid);
    put_u64(kb + 4, seq);
    if ((rc = store_get(t, t->s->dlv, &k, &v)))
        return rc;
    return store_dlv_decode(&v, d);
}

int mic_store_dlv_put(mic_txn *t, uint32_t gid, uint64_t seq,
                      const struct mic_dlv *d)
{
    uint8_t kb[12], vb[DLV_HDR + DLV_ORD + DLV_RANK + MIC_WORKER_MAX + MIC_ERROR_MAX];
    MDB_val k = {12, kb}, v = {0, vb};

    put_u32(kb, gid);
    put_u64(kb + 4, seq);
    v.mv_size = store_dlv_encode(vb, d);
    return store_put(t, t->s->dlv, "dlv", &k, &v, 0);
}

/* Delete key (gid, seq) of 'dbi'; MIC_OK also when it is absent. */
static int del_gid_seq(mic_txn *t, MDB_dbi dbi, uint32_t gid, uint64_t seq)
{
    uint8_t kb[12];
    MDB_val k = {12, kb};
    int rc;

    put_u32(kb, gid);
    put_u64(kb + 4, seq);
    rc = mdb_del(t->txn, dbi, &k, NULL);
    return rc == MDB_NOTFOUND ? MIC_OK : store_from_mdb(rc);
}

int mic_store_dlv_del(mic_txn *t, uint32_t gid, uint64_t seq)
{
    return del_gid_seq(t, t->s->dlv, gid, seq);
}

/* ---- The unhandled and poison indexes ---- */

static int index_set(mic_txn *t, MDB_dbi dbi, const char *name, uint32_t gid,
                     int64_t at, uint64_t seq, int on)
{
    uint8_t kb[20];
    MDB_val k = {20, kb}, v = {0, NULL};
    int rc;

    put_u32(kb, gid);
    put_u64(kb + 4, (uint64_t)at);
    put_u64(kb + 12, seq);
    if (on)
        return store_put(t, dbi, name, &k, &v, 0);
    rc = mdb_del(t->txn, dbi, &k, NULL);
    return rc == MDB_NOTFOUND ? MIC_OK : store_from_mdb(rc);
}

int mic_store_unh_set(mic_txn *t, uint32_t gid, int64_t created_at, uint64_t seq, int on)
{
    return index_set(t, t->s->unh, "unh", gid, created_at, seq, on);
}

int mic_store_poison_set(mic_txn *t, uint32_t gid, int64_t created_at, uint64_t seq, int on)
{
    return index_set(t, t->s->poison, "poison", gid, created_at, seq, on);
}

int mic_store_oldest(mic_txn *t, uint32_t gid, int poison, int64_t *created_at,
                     uint64_t *seq)
{
    uint8_t kb[4];
    MDB_cursor *c;
    MDB_val k = {4, kb}, v;
    int rc;

    put_u32(kb, gid);
    if ((rc = mdb_cursor_open(t->txn, poison ? t->s->poison : t->s->unh, &c)))
        return store_from_mdb(rc);
    rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
    if (rc == 0 && (k.mv_size != 20 || get_u32(k.mv_data) != gid))
        rc = MDB_NOTFOUND;
    if (rc == 0) {
        *created_at = (int64_t)get_u64((uint8_t *)k.mv_data + 4);
        *seq = get_u64((uint8_t *)k.mv_data + 12);
    }
    mdb_cursor_close(c);
    return store_from_mdb(rc);
}

int mic_store_oldest_page(mic_txn *t, uint32_t gid, uint64_t *seqs, int max, int *n)
{
    uint8_t kb[4];
    MDB_cursor *c;
    MDB_val k = {4, kb}, v;
    int rc;

    *n = 0;
    put_u32(kb, gid);
    if ((rc = mdb_cursor_open(t->txn, t->s->unh, &c)))
        return store_from_mdb(rc);
    for (rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
         rc == 0 && *n < max && k.mv_size == 20 && get_u32(k.mv_data) == gid;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT))
        seqs[(*n)++] = get_u64((uint8_t *)k.mv_data + 12);
    mdb_cursor_close(c);
    return rc == 0 || rc == MDB_NOTFOUND ? MIC_OK : store_from_mdb(rc);
}

int mic_store_topic_events_add(mic_txn *t, uint32_t topic_id, int64_t delta)
{
    uint8_t kb[4], vb[8];
    MDB_val k = {4, kb}, v;
    uint64_t n = 0;
    int rc;

    put_u32(kb, topic_id);
    rc = store_get(t, t->s->tstat, &k, &v);
    if (rc == MIC_OK && v.mv_size == 8)
        n = get_u64(v.mv_data);
    else if (rc && rc != MIC_ENOTFOUND)
        return rc;
    n = (int64_t)n + delta < 0 ? 0 : (uint64_t)((int64_t)n + delta);
    put_u64(vb, n);
    v.mv_size = 8;
    v.mv_data = vb;
    return store_put(t, t->s->tstat, "tstat", &k, &v, 0);
}

int mic_store_topic_events(mic_txn *t, uint32_t topic_id, uint64_t *n)
{
    uint8_t kb[4];
    MDB_val k = {4, kb}, v;
    int rc;

    put_u32(kb, topic_id);
    rc = store_get(t, t->s->tstat, &k, &v);
    *n = rc == MIC_OK && v.mv_size == 8 ? get_u64(v.mv_data) : 0;
    return rc == MIC_ENOTFOUND ? MIC_OK : rc;
}

int mic_store_dlv_each(mic_txn *t, uint32_t gid,
                       int (*fn)(void *arg, uint64_t seq, int state), void *arg)
{
    uint8_t kb[4];
    MDB_cursor *c;
    MDB_val k = {4, kb}, v;
    int rc, stop = 0;

    put_u32(kb, gid);
    if ((rc = mdb_cursor_open(t->txn, t->s->dlv, &c)))
        return store_from_mdb(rc);
    for (rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
         rc == 0 && !stop && k.mv_size == 12 && get_u32(k.mv_data) == gid;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT))
        stop = fn(arg, get_u64((uint8_t *)k.mv_data + 4),
                  v.mv_size ? ((uint8_t *)v.mv_data)[0] : 0);
    mdb_cursor_close(c);
    if (stop)
        return stop;
    return rc == MDB_NOTFOUND || rc == 0 ? MIC_OK : store_from_mdb(rc);
}

static void ready_key(uint8_t kb[13], uint32_t gid, uint8_t prio, uint64_t pos)
{
    put_u32(kb, gid);
    kb[4] = (uint8_t)(255 - prio);
    put_u64(kb + 5, pos);
}

int mic_store_ready_put(mic_txn *t, uint32_t gid, uint8_t prio, uint64_t rank, uint64_t seq)
{
    uint8_t kb[13], vb[8];
    MDB_val k = {13, kb}, v = {0, NULL};

    ready_key(kb, gid, prio, rank ? rank : seq);
    if (rank) {
        put_u64(vb, seq);
        v.mv_size = 8;
        v.mv_data = vb;
    }
    return store_put(t, t->s->ready, "ready", &k, &v, 0);
}

int mic_store_ready_del(mic_txn *t, uint32_t gid, uint8_t prio, uint64_t rank, uint64_t seq)
{
    uint8_t kb[13];
    MDB_val k = {13, kb};

    ready_key(kb, gid, prio, rank ? rank : seq);
    return store_from_mdb(mdb_del(t->txn, t->s->ready, &k, NULL));
}

int mic_store_ready_pop(mic_txn *t, uint32_t gid, uint64_t *seqs, int max,
                        int *n)
{
    uint8_t prefix[4];
    MDB_cursor *c;
    MDB_val k = {4, prefix}, v;
    int rc;

    *n = 0;
    put_u32(prefix, gid);
    if (store_fault_hook && (rc = store_fault_hook("ready")))
        return store_from_mdb(rc);
    if ((rc = mdb_cursor_open(t->txn, t->s->ready, &c)))
        return store_from_mdb(rc);
    rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
    while (rc == 0 && *n < max && k.mv_size == 13 &&
           memcmp(k.mv_data, prefix, 4) == 0) {
        /* A ranked entry carries its seq as its value. */
        seqs[(*n)++] = v.mv_size == 8 ? get_u64(v.mv_data) : get_u64((uint8_t *)k.mv_data + 5);
        if ((rc = mdb_cursor_del(c, 0)))
            break;
        rc = mdb_cursor_get(c, &k, &v, MDB_NEXT); /* after a delete: the next key */
    }
    mdb_cursor_close(c);
    return rc == MDB_NOTFOUND || rc == 0 ? MIC_OK : store_from_mdb(rc);
}

static void timer_key(uint8_t kb[20], int64_t due, uint32_t gid, uint64_t seq)
{
    put_u64(kb, (uint64_t)due);
    put_u32(kb + 8, gid);
    put_u64(kb + 12, seq);
}

int mic_store_timer_put(mic_txn *t, int64_t due, uint32_t gid, uint64_t seq,
                        uint8_t kind)
{
    uint8_t kb[20];
    MDB_val k = {20, kb}, v = {1, &kind};

    timer_key(kb, due, gid, seq);
    return store_put(t, t->s->timers, "timers", &k, &v, 0);
}

int mic_store_timer_del(mic_txn *t, int64_t due, uint32_t gid, uint64_t seq)
{
    uint8_t kb[20];
    MDB_val k = {20, kb};
    int rc;

    timer_key(kb, due, gid, seq);
    rc = mdb_del(t->txn, t->s->timers, &k, NULL);
    return rc == MDB_NOTFOUND ? MIC_OK : store_from_mdb(rc);
}

int mic_store_timer_first(mic_txn *t, int64_t *due, uint32_t *gid,
                          uint64_t *seq, uint8_t *kind)
{
    MDB_cursor *c;
    MDB_val k, v;
    int rc;

    if ((rc = mdb_cursor_open(t->txn, t->s->timers, &c)))
        return store_from_mdb(rc);
    rc = mdb_cursor_get(c, &k, &v, MDB_FIRST);
    if (rc == 0 && k.mv_size == 20) {
        *due = (int64_t)get_u64(k.mv_data);
        *gid = get_u32((uint8_t *)k.mv_data + 8);
        *seq = get_u64((uint8_t *)k.mv_data + 12);
        *kind = v.mv_size ? *(uint8_t *)v.mv_data : 0;
    }
    mdb_cursor_close(c);
    return store_from_mdb(rc);
}

int mic_store_dlq_put(mic_txn *t, uint32_t gid, uint64_t seq)
{
    uint8_t kb[12];
    MDB_val k = {12, kb}, v = {0, NULL};

    put_u32(kb, gid);
    put_u64(kb + 4, seq);
    return store_put(t, t->s->dlq, "dlq", &k, &v, 0);
}

int mic_store_dlq_del(mic_txn *t, uint32_t gid, uint64_t seq)
{
    return del_gid_seq(t, t->s->dlq, gid, seq);
}

int mic_store_dlq_page(mic_txn *t, uint32_t gid, uint64_t after,
                       uint64_t *seqs, int max, int *n)
{
    uint8_t kb[12];
    MDB_cursor *c;
    MDB_val k = {12, kb}, v;
    int rc;

    *n = 0;
    put_u32(kb, gid);
    put_u64(kb + 4, after + 1);
    if (after == UINT64_MAX)
        return MIC_OK;
    if ((rc = mdb_cursor_open(t->txn, t->s->dlq, &c)))
        return store_from_mdb(rc);
    for (rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
         rc == 0 && *n < max && k.mv_size == 12 && get_u32(k.mv_data) == gid;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT))
        seqs[(*n)++] = get_u64((uint8_t *)k.mv_data + 4);
    mdb_cursor_close(c);
    return rc == MDB_NOTFOUND || rc == 0 ? MIC_OK : store_from_mdb(rc);
}

/* ---- Ordered groups ---- */


void store_aq_key(uint8_t *kb, uint32_t gid, uint64_t ord, uint64_t k1, uint64_t seq)
{
    put_u32(kb, gid);
    put_u64(kb + 4, ord);
    put_u64(kb + 12, k1);
    put_u64(kb + 20, seq);
}

int mic_store_aq_put(mic_txn *t, uint32_t gid, uint64_t ord, uint64_t k1, uint64_t seq)
{
    uint8_t kb[AQ_KEY];
    MDB_val k = {AQ_KEY, kb}, v = {0, NULL};

    store_aq_key(kb, gid, ord, k1, seq);
    return store_put(t, t->s->aq, "aq", &k, &v, 0);
}

int mic_store_aq_del(mic_txn *t, uint32_t gid, uint64_t ord, uint64_t k1, uint64_t seq)
{
    uint8_t kb[AQ_KEY];
    MDB_val k = {AQ_KEY, kb};

    store_aq_key(kb, gid, ord, k1, seq);
    return store_from_mdb(mdb_del(t->txn, t->s->aq, &k, NULL));
}

int mic_store_aq_has(mic_txn *t, uint32_t gid, uint64_t ord, uint64_t k1, uint64_t seq)
{
    uint8_t kb[AQ_KEY];
    MDB_val k = {AQ_KEY, kb}, v;

    store_aq_key(kb, gid, ord, k1, seq);
    return store_get(t, t->s->aq, &k, &v);
}

/* Up to 'max' entries whose k1 is greater than 'after' (0: from the
 * first), in order: k1[i], seq[i] for i < *n. */
static int aq_scan(mic_txn *t, uint32_t gid, uint64_t ord, uint64_t after, int max,
                   uint64_t *k1, uint64_t *seq, int *n)
{
    uint8_t kb[AQ_KEY];
    MDB_cursor *c;
    MDB_val k = {20, kb}, v;
    int rc;

    *n = 0;
    if (after == UINT64_MAX)
        return MIC_ENOTFOUND;
    store_aq_key(kb, gid, ord, after ? after + 1 : 0, 0);
    if ((rc = mdb_cursor_open(t->txn, t->s->aq, &c)))
        return store_from_mdb(rc);
    for (rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
         rc == 0 && *n < max && k.mv_size == AQ_KEY && !memcmp(k.mv_data, kb, 12);
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        k1[*n] = get_u64((uint8_t *)k.mv_data + 12);
        seq[*n] = get_u64((uint8_t *)k.mv_data + 20);
        (*n)++;
    }
    mdb_cursor_close(c);
    if (rc && rc != MDB_NOTFOUND)
        return store_from_mdb(rc);
    return *n ? MIC_OK : MIC_ENOTFOUND;
}

int mic_store_aq_first(mic_txn *t, uint32_t gid, uint64_t ord, uint64_t after,
                       uint64_t *k1, uint64_t *seq)
{
    int n;

    return aq_scan(t, gid, ord, after, 1, k1, seq, &n);
}

int mic_store_aq_first2(mic_txn *t, uint32_t gid, uint64_t ord, uint64_t after,
                        uint64_t k1[2], uint64_t seq[2], int *n)
{
    return aq_scan(t, gid, ord, after, 2, k1, seq, n);
}

int mic_store_aq_purge(mic_txn *t, uint32_t gid, uint64_t ord, uint64_t upto, int *n)
{
    uint8_t kb[AQ_KEY];
    MDB_cursor *c;
    MDB_val k = {12, kb}, v;
    int rc, count = 0;

    store_aq_key(kb, gid, ord, 0, 0);
    if ((rc = mdb_cursor_open(t->txn, t->s->aq, &c)))
        return store_from_mdb(rc);
    rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
    while (rc == 0 && k.mv_size == AQ_KEY && !memcmp(k.mv_data, kb, 12) &&
           get_u64((uint8_t *)k.mv_data + 12) <= upto) {
        if ((rc = mdb_cursor_del(c, 0)))
            break;
        count++;
        rc = mdb_cursor_get(c, &k, &v, MDB_NEXT); /* after a delete: the next key */
    }
    mdb_cursor_close(c);
    if (n)
        *n = count;
    return rc == MDB_NOTFOUND || rc == 0 ? MIC_OK : store_from_mdb(rc);
}


void store_ags_decode(const uint8_t *p, struct mic_ags *a)
{
    a->active = get_u64(p);
    a->missing = get_u64(p + 8);
    a->since = (int64_t)get_u64(p + 16);
    a->waiting = get_u64(p + 24);
    a->pos = get_u64(p + 32);
    memcpy(a->akey, p + 40, MIC_AKEY_LEN);
}

int mic_store_ags_get(mic_txn *t, uint32_t gid, uint64_t ord, struct mic_ags *a)
{
    uint8_t kb[12];
    MDB_val k = {sizeof kb, kb}, v;
    int rc;

    put_u32(kb, gid);
    put_u64(kb + 4, ord);
    if ((rc = store_get(t, t->s->ags, &k, &v)))
        return rc;
    if (v.mv_size < AGS_REC)
        return MIC_EIO;
    store_ags_decode(v.mv_data, a);
    return MIC_OK;
}

int mic_store_ags_put(mic_txn *t, uint32_t gid, uint64_t ord, const struct mic_ags *a)
{
    uint8_t kb[12], vb[AGS_REC];
    MDB_val k = {sizeof kb, kb}, v = {AGS_REC, vb};

    put_u32(kb, gid);
    put_u64(kb + 4, ord);
    put_u64(vb, a->active);
    put_u64(vb + 8, a->missing);
    put_u64(vb + 16, (uint64_t)a->since);
    put_u64(vb + 24, a->waiting);
    put_u64(vb + 32, a->pos);
    memcpy(vb + 40, a->akey, MIC_AKEY_LEN);
    return store_put(t, t->s->ags, "ags", &k, &v, 0);
}

int mic_store_ags_del(mic_txn *t, uint32_t gid, uint64_t ord)
{
    uint8_t kb[12];
    MDB_val k = {sizeof kb, kb};
    int rc;

    put_u32(kb, gid);
    put_u64(kb + 4, ord);
    rc = mdb_del(t->txn, t->s->ags, &k, NULL);
    return rc == MDB_NOTFOUND ? MIC_OK : store_from_mdb(rc);
}

int mic_store_ags_each(mic_txn *t, uint32_t gid, uint64_t after,
                       int (*fn)(void *arg, uint64_t ord, const struct mic_ags *a),
                       void *arg)
{
    uint8_t kb[12];
    MDB_cursor *c;
    MDB_val k = {12, kb}, v;
    int rc, stop = 0;

    if (after == UINT64_MAX)
        return MIC_OK;
    put_u32(kb, gid);
    put_u64(kb + 4, after + 1);
    if ((rc = mdb_cursor_open(t->txn, t->s->ags, &c)))
        return store_from_mdb(rc);
    for (rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
         rc == 0 && !stop && k.mv_size == 12 && get_u32(k.mv_data) == gid;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        struct mic_ags a;
        if (v.mv_size < AGS_REC) {
            rc = EIO;
            break;
        }
        store_ags_decode(v.mv_data, &a);
        stop = fn(arg, get_u64((uint8_t *)k.mv_data + 4), &a);
    }
    mdb_cursor_close(c);
    if (stop)
        return stop;
    return rc == MDB_NOTFOUND || rc == 0 ? MIC_OK : store_from_mdb(rc);
}

/* ---- Per-group figures ---- */

int mic_store_gstat_get(mic_txn *t, uint32_t gid, uint64_t out[MIC_GSTAT_N])
{
    uint8_t kb[4];
    MDB_val k = {4, kb}, v;
    int rc;

    put_u32(kb, gid);
    memset(out, 0, MIC_GSTAT_N * sizeof *out);
    rc = store_get(t, t->s->gstat, &k, &v);
    if (rc == MIC_ENOTFOUND)
        return MIC_OK;
    if (rc)
        return rc;
    for (int i = 0; i < MIC_GSTAT_N && (size_t)(8 * i + 8) <= v.mv_size; i++)
        out[i] = get_u64((uint8_t *)v.mv_data + 8 * i);
    return MIC_OK;
}

int mic_store_gstat_put(mic_txn *t, uint32_t gid, const uint64_t in[MIC_GSTAT_N])
{
    uint8_t kb[4], vb[8 * MIC_GSTAT_N];
    MDB_val k = {4, kb}, v = {sizeof vb, vb};

    put_u32(kb, gid);
    for (int i = 0; i < MIC_GSTAT_N; i++)
        put_u64(vb + 8 * i, in[i]);
    return store_put(t, t->s->gstat, "gstat", &k, &v, 0);
}

