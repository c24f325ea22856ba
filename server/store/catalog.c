/* catalog.c - the catalog: group, topic and replay run records (store.h
 * "Groups", "Topics", "Replay runs"). */
#define _GNU_SOURCE
#include "store.h"
#include "store_int.h"

#include "core/crc32c.h"
#include "core/digest.h"
#include "core/err.h"
#include "journal.h"
#include "core/logger.h"
#include "catalog.h"

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

/* ---- Groups ---- */


int mic_store_next_group_id(mic_txn *t, uint32_t *gid)
{
    return store_next_id(t, "next_group_id", gid);
}

static int group_decode(const MDB_val *v, struct mic_group_rec *g)
{
    const uint8_t *p = v->mv_data;

    if (v->mv_size < GROUP_HDR)
        return MIC_EIO;
    g->gid = get_u32(p);
    g->backfilling = p[4];
    g->backfill_next = get_u64(p + 5);
    g->backfill_end = get_u64(p + 13);
    g->config = (const char *)p + GROUP_HDR;
    g->config_len = v->mv_size - GROUP_HDR;
    return MIC_OK;
}

int mic_store_group_get(mic_txn *t, const char *name, size_t len,
                        struct mic_group_rec *g)
{
    MDB_val k = {len, (void *)name}, v;
    int rc = store_get(t, t->s->groups, &k, &v);

    return rc ? rc : group_decode(&v, g);
}

int mic_store_group_put(mic_txn *t, const char *name, size_t len,
                        const struct mic_group_rec *g)
{
    MDB_val k = {len, (void *)name}, v = {GROUP_HDR + g->config_len, NULL};
    uint8_t *p;
    int rc;

    if (store_fault_hook && (rc = store_fault_hook("groups")))
        return store_from_mdb(rc);
    if ((rc = mdb_put(t->txn, t->s->groups, &k, &v, MDB_RESERVE)))
        return store_from_mdb(rc);
    p = v.mv_data;
    put_u32(p, g->gid);
    p[4] = g->backfilling;
    put_u64(p + 5, g->backfill_next);
    put_u64(p + 13, g->backfill_end);
    memcpy(p + GROUP_HDR, g->config, g->config_len);
    return MIC_OK;
}

int mic_store_group_del(mic_txn *t, const char *name, size_t len)
{
    MDB_val k = {len, (void *)name};

    return store_from_mdb(mdb_del(t->txn, t->s->groups, &k, NULL));
}

int mic_store_group_each(mic_txn *t,
                         int (*fn)(void *arg, const char *name, size_t len,
                                   const struct mic_group_rec *g),
                         void *arg)
{
    MDB_cursor *c;
    MDB_val k, v;
    int rc, stop = 0;

    if ((rc = mdb_cursor_open(t->txn, t->s->groups, &c)))
        return store_from_mdb(rc);
    for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0 && !stop;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        struct mic_group_rec g;
        if (group_decode(&v, &g)) {
            rc = EIO;
            break;
        }
        stop = fn(arg, k.mv_data, k.mv_size, &g);
    }
    mdb_cursor_close(c);
    if (stop)
        return stop;
    return rc == MDB_NOTFOUND ? MIC_OK : store_from_mdb(rc);
}

int mic_store_drop_put(mic_txn *t, uint32_t gid)
{
    uint8_t kb[4];
    MDB_val k = {4, kb}, v = {0, NULL};

    put_u32(kb, gid);
    return store_put(t, t->s->drops, "drops", &k, &v, 0);
}

int mic_store_drop_first(mic_txn *t, uint32_t *gid)
{
    MDB_cursor *c;
    MDB_val k, v;
    int rc;

    if ((rc = mdb_cursor_open(t->txn, t->s->drops, &c)))
        return store_from_mdb(rc);
    rc = mdb_cursor_get(c, &k, &v, MDB_FIRST);
    if (rc == 0)
        *gid = get_u32(k.mv_data);
    mdb_cursor_close(c);
    return store_from_mdb(rc);
}

/* Delete up to *budget keys starting with the 4-byte 'prefix' in 'dbi'. */
static int purge_prefix(mic_txn *t, MDB_dbi dbi, const uint8_t *prefix,
                        int *budget, int *empty)
{
    MDB_cursor *c;
    MDB_val k = {4, (void *)prefix}, v;
    int rc;

    *empty = 0;
    if ((rc = mdb_cursor_open(t->txn, dbi, &c)))
        return store_from_mdb(rc);
    rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
    while (rc == 0 && *budget > 0 && k.mv_size >= 4 &&
           memcmp(k.mv_data, prefix, 4) == 0) {
        if ((rc = mdb_cursor_del(c, 0)))
            break;
        (*budget)--;
        rc = mdb_cursor_get(c, &k, &v, MDB_NEXT); /* after a delete: the next key */
    }
    if (rc == MDB_NOTFOUND || (rc == 0 && (k.mv_size < 4 || memcmp(k.mv_data, prefix, 4))))
        *empty = 1, rc = 0;
    mdb_cursor_close(c);
    return store_from_mdb(rc);
}

int mic_store_drop_step(mic_txn *t, uint32_t gid, int budget, int *finished)
{
    uint8_t prefix[4];
    MDB_val k = {4, prefix};
    int rc, e1 = 0, e2 = 0, e3 = 0, e4 = 0, e5 = 0, e6 = 0, e7 = 0;

    put_u32(prefix, gid);
    *finished = 0;
    if ((rc = purge_prefix(t, t->s->ready, prefix, &budget, &e1)) ||
        (rc = purge_prefix(t, t->s->dlq, prefix, &budget, &e2)) ||
        (rc = purge_prefix(t, t->s->aq, prefix, &budget, &e4)) ||
        (rc = purge_prefix(t, t->s->ags, prefix, &budget, &e5)) ||
        (rc = purge_prefix(t, t->s->unh, prefix, &budget, &e6)) ||
        (rc = purge_prefix(t, t->s->poison, prefix, &budget, &e7)) ||
        (rc = purge_prefix(t, t->s->dlv, prefix, &budget, &e3)))
        return rc;
    if (e1 && e2 && e3 && e4 && e5 && e6 && e7) {
        MDB_val gk = {4, prefix};
        int r2 = mdb_del(t->txn, t->s->gstat, &gk, NULL);
        if (r2 && r2 != MDB_NOTFOUND)
            return store_from_mdb(r2);
        *finished = 1;
        return store_from_mdb(mdb_del(t->txn, t->s->drops, &k, NULL));
    }
    return MIC_OK;
}

/* ---- Replay runs ---- */

int mic_store_run_get(mic_txn *t, const char *id, size_t len, const void **val,
                      size_t *vlen)
{
    MDB_val k = {len, (void *)id}, v;
    int rc = store_get(t, t->s->runs, &k, &v);

    if (rc == MIC_OK) {
        *val = v.mv_data;
        *vlen = v.mv_size;
    }
    return rc;
}

int mic_store_run_put(mic_txn *t, const char *id, size_t len, const void *val,
                      size_t vlen)
{
    MDB_val k = {len, (void *)id}, v = {vlen, (void *)val};

    return store_put(t, t->s->runs, "runs", &k, &v, 0);
}

int mic_store_run_del(mic_txn *t, const char *id, size_t len)
{
    MDB_val k = {len, (void *)id};

    return store_from_mdb(mdb_del(t->txn, t->s->runs, &k, NULL));
}

int mic_store_run_each(mic_txn *t,
                       int (*fn)(void *arg, const char *id, size_t len,
                                 const void *val, size_t vlen),
                       void *arg)
{
    MDB_cursor *c;
    MDB_val k, v;
    int rc, stop = 0;

    if ((rc = mdb_cursor_open(t->txn, t->s->runs, &c)))
        return store_from_mdb(rc);
    for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0 && !stop;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT))
        stop = fn(arg, k.mv_data, k.mv_size, v.mv_data, v.mv_size);
    mdb_cursor_close(c);
    if (stop)
        return stop;
    return rc == MDB_NOTFOUND ? MIC_OK : store_from_mdb(rc);
}

/* ---- Topics ---- */


static void topic_decode(const MDB_val *v, struct mic_topic_rec *tr)
{
    const uint8_t *p = v->mv_data;

    tr->id = get_u32(p);
    tr->require_versions = p[4];
    tr->retention_s = get_u64(p + 5);
    tr->max_payload_bytes = get_u64(p + 13);
    tr->dedupe_retain_s = get_u64(p + 21);
}

int mic_store_topic_get(mic_txn *t, const char *name, size_t len,
                        struct mic_topic_rec *tr)
{
    MDB_val k = {len, (void *)name}, v;
    int rc = store_get(t, t->s->topics, &k, &v);

    if (rc)
        return rc;
    if (v.mv_size < TOPIC_REC)
        return MIC_EIO;
    topic_decode(&v, tr);
    return MIC_OK;
}

int mic_store_topic_put(mic_txn *t, const char *name, size_t len,
                        const struct mic_topic_rec *tr)
{
    uint8_t vb[TOPIC_REC];
    MDB_val k = {len, (void *)name}, v = {sizeof vb, vb};

    put_u32(vb, tr->id);
    vb[4] = tr->require_versions;
    put_u64(vb + 5, tr->retention_s);
    put_u64(vb + 13, tr->max_payload_bytes);
    put_u64(vb + 21, tr->dedupe_retain_s);
    return store_put(t, t->s->topics, "topics", &k, &v, 0);
}

int mic_store_topic_del(mic_txn *t, const char *name, size_t len)
{
    MDB_val k = {len, (void *)name};
    int rc;

    if (store_fault_hook && (rc = store_fault_hook("topics")))
        return store_from_mdb(rc);
    return store_from_mdb(mdb_del(t->txn, t->s->topics, &k, NULL));
}

int mic_store_topic_each(mic_txn *t,
                         int (*fn)(void *arg, const char *name, size_t len,
                                   const struct mic_topic_rec *tr),
                         void *arg)
{
    MDB_cursor *c;
    MDB_val k, v;
    int rc, stop = 0;

    if ((rc = mdb_cursor_open(t->txn, t->s->topics, &c)))
        return store_from_mdb(rc);
    for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0 && !stop;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        struct mic_topic_rec tr;
        if (v.mv_size < TOPIC_REC) {
            rc = EIO;
            break;
        }
        topic_decode(&v, &tr);
        stop = fn(arg, k.mv_data, k.mv_size, &tr);
    }
    mdb_cursor_close(c);
    if (stop)
        return stop;
    return rc == MDB_NOTFOUND ? MIC_OK : store_from_mdb(rc);
}

