/* mic_consumer.c - the consumer toolkit of libmic (mic_consumer_*, see
 * mic.h): the seed article's "make consumer state advancement atomic".
 *
 * DESIGN.  The consumer's LMDB environment holds, beside the projection's
 * own databases:
 *   mic.checkpoint  key  aggregate_type NUL aggregate_id
 *                   val  u64 (host order): the last version applied
 *   mic.processed   key  event_id
 *                   val  u64 version (0: none), then i64 wall-clock µs of
 *                        the commit
 * mic_consumer_process runs one write transaction per delivery: it reads
 * the marker and the checkpoint, decides (the rules below), calls the
 * projection's apply() with the same transaction, writes the checkpoint
 * and the marker, and commits.  So after a crash the projection, the
 * checkpoint and the marker are all there or none is, and a redelivery
 * (at-least-once) of a committed event finds its marker: acked, not
 * applied twice.
 *
 * Rules, for a delivery with version v of an aggregate whose checkpoint
 * is c (an aggregate never seen has c = 0; mic_consumer_skip moves c over
 * a version skipped on micd):
 *   event id processed before  -> ALREADY (ack, no effect)
 *   v = c + 1                  -> apply, checkpoint v
 *   v > c + 1                  -> GAP: park (nack with the retry hint)
 *   v <= c, unknown event id   -> STALE: an error to investigate
 *                                 (dead-lettered with both versions)
 * An event without a version (no aggregate, or unversioned) is applied
 * once, by its marker alone.  An effect executor (MIC_EFFECTS) refuses a
 * replay delivery whose effects are forbidden before anything else.
 *
 * "mic.format" in the unnamed database holds the store's format (u32, 1);
 * a store of another format is refused at open (proto/consumer-store.md).
 *
 * The processed markers are never removed here: they are what makes a
 * redelivery harmless, and they cost one key per event. */
#define _GNU_SOURCE
#include "mic.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

struct mic_consumer {
    struct mic_consumer_opts o;
    MDB_env *env;
    MDB_dbi ckpt, seen;
    atomic_long applied, already, gaps, stale, refused, failed, fenced;
};

/* The store's format (proto/consumer-store.md), under "mic.format" in
 * the unnamed database: written when absent (a new store, or one made
 * before the key existed, which is format 1 too). */
#define CONSUMER_FORMAT 1u

static int format_check(MDB_txn *txn)
{
    MDB_dbi main;
    MDB_val key = {10, (void *)"mic.format"}, val;
    uint32_t f = CONSUMER_FORMAT;
    int rc;

    if ((rc = mdb_dbi_open(txn, NULL, 0, &main)))
        return rc;
    rc = mdb_get(txn, main, &key, &val);
    if (rc == MDB_NOTFOUND) {
        val.mv_data = &f;
        val.mv_size = sizeof f;
        return mdb_put(txn, main, &key, &val, 0);
    }
    if (rc)
        return rc;
    if (val.mv_size != sizeof f || memcmp(val.mv_data, &f, sizeof f))
        return MDB_INCOMPATIBLE;
    return 0;
}

int mic_consumer_open(const struct mic_consumer_opts *o, mic_consumer **out, char *err,
                      size_t errcap)
{
    mic_consumer *k;
    MDB_txn *txn;
    int rc;

    *out = NULL;
    if (!o || !o->path || !o->apply) {
        snprintf(err, errcap, "a consumer needs a path and an apply function");
        return -1;
    }
    if (mkdir(o->path, 0700) && errno != EEXIST) {
        snprintf(err, errcap, "%s: %s", o->path, strerror(errno));
        return -1;
    }
    if (!(k = calloc(1, sizeof *k))) {
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    k->o = *o;
    k->o.path = NULL;
    if (!k->o.schema_version)
        k->o.schema_version = 1;
    if (k->o.gap_retry_s <= 0)
        k->o.gap_retry_s = 1;
    if ((rc = mdb_env_create(&k->env)) ||
        (rc = mdb_env_set_mapsize(k->env, o->map_size ? o->map_size : (size_t)1 << 30)) ||
        (rc = mdb_env_set_maxdbs(k->env, o->max_dbs + 2)) ||
        (rc = mdb_env_open(k->env, o->path, 0, 0600)))
        goto fail;
    if ((rc = mdb_txn_begin(k->env, NULL, 0, &txn)))
        goto fail;
    if ((rc = mdb_dbi_open(txn, "mic.checkpoint", MDB_CREATE, &k->ckpt)) ||
        (rc = mdb_dbi_open(txn, "mic.processed", MDB_CREATE, &k->seen)) ||
        (rc = format_check(txn))) {
        mdb_txn_abort(txn);
        if (rc == MDB_INCOMPATIBLE) {
            snprintf(err, errcap, "%s: a consumer store of another format (this libmic reads "
                     "format %u)", o->path, (unsigned)CONSUMER_FORMAT);
            goto fail_msg;
        }
        goto fail;
    }
    if ((rc = mdb_txn_commit(txn)))
        goto fail;
    *out = k;
    return 0;
fail:
    snprintf(err, errcap, "%s: %s", o->path, mdb_strerror(rc));
fail_msg:
    if (k->env)
        mdb_env_close(k->env);
    free(k);
    return -1;
}

void mic_consumer_close(mic_consumer *k)
{
    if (!k)
        return;
    mdb_env_close(k->env);
    free(k);
}

MDB_env *mic_consumer_env(mic_consumer *k)
{
    return k->env;
}

/* The checkpoint key: type NUL id, in buf. */
static int agg_key(const char *type, const char *id, char *buf, size_t cap, MDB_val *key)
{
    size_t tl = strlen(type), il = strlen(id);

    if (tl + 1 + il > cap || tl + 1 + il > 511)
        return -1;
    memcpy(buf, type, tl);
    buf[tl] = 0;
    memcpy(buf + tl + 1, id, il);
    key->mv_data = buf;
    key->mv_size = tl + 1 + il;
    return 0;
}

static int get_u64(MDB_txn *txn, MDB_dbi dbi, MDB_val *key, uint64_t *v)
{
    MDB_val val;
    int rc = mdb_get(txn, dbi, key, &val);

    *v = 0;
    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc)
        return rc;
    if (val.mv_size >= sizeof *v)
        memcpy(v, val.mv_data, sizeof *v);
    return 0;
}

int mic_consumer_checkpoint(mic_consumer *k, const char *agg_type, const char *agg_id,
                            uint64_t *version)
{
    char kb[512];
    MDB_val key;
    MDB_txn *txn;
    int rc;

    *version = 0;
    if (agg_key(agg_type, agg_id, kb, sizeof kb, &key) ||
        mdb_txn_begin(k->env, NULL, MDB_RDONLY, &txn))
        return -1;
    rc = get_u64(txn, k->ckpt, &key, version);
    mdb_txn_abort(txn);
    return rc ? -1 : 0;
}

int mic_consumer_skip(mic_consumer *k, const char *agg_type, const char *agg_id, uint64_t version)
{
    char kb[512];
    MDB_val key, val;
    MDB_txn *txn;
    uint64_t c;
    int rc;

    if (agg_key(agg_type, agg_id, kb, sizeof kb, &key) || mdb_txn_begin(k->env, NULL, 0, &txn))
        return -1;
    if ((rc = get_u64(txn, k->ckpt, &key, &c)) || version != c + 1) {
        mdb_txn_abort(txn);
        return -1;
    }
    val.mv_data = &version;
    val.mv_size = sizeof version;
    if (mdb_put(txn, k->ckpt, &key, &val, 0)) {
        mdb_txn_abort(txn);
        return -1;
    }
    return mdb_txn_commit(txn) ? -1 : 0;
}

static int64_t wall_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int mic_consumer_process(mic_consumer *k, const struct mic_leased *d, const mic_job *job,
                         enum mic_outcome *outcome, char *why, size_t cap)
{
    char kb[512];
    MDB_val key, idkey = {strlen(d->event_id), (void *)d->event_id}, val;
    MDB_txn *txn;
    json_t *ev = NULL;
    uint64_t c = 0, v = d->aggregate_version;
    int versioned = v > 0 && d->aggregate_type[0], rc;
    unsigned char marker[16];
    int64_t now;

    why[0] = 0;
    if (k->o.kind == MIC_EFFECTS && d->effects_forbidden) {
        *outcome = MIC_REFUSED;
        atomic_fetch_add(&k->refused, 1);
        snprintf(why, cap, "replay run %s forbids effects: this consumer executes external "
                 "effects and takes no such delivery (event %s)",
                 json_string_value(json_object_get(d->replay, "batch_id"))
                     ? json_string_value(json_object_get(d->replay, "batch_id")) : "?",
                 d->event_id);
        return 0;
    }
    if (!d->event_id[0] || idkey.mv_size > 511) {
        *outcome = MIC_FAILED;
        atomic_fetch_add(&k->failed, 1);
        snprintf(why, cap, "a delivery without a usable event_id");
        return 0;
    }
    if (versioned && agg_key(d->aggregate_type, d->aggregate_id, kb, sizeof kb, &key)) {
        *outcome = MIC_FAILED;
        atomic_fetch_add(&k->failed, 1);
        snprintf(why, cap, "aggregate key too long for the checkpoint");
        return 0;
    }
    if ((rc = mdb_txn_begin(k->env, NULL, 0, &txn)))
        goto lmdb;
    rc = mdb_get(txn, k->seen, &idkey, &val);
    if (rc == 0) {
        mdb_txn_abort(txn);
        *outcome = MIC_ALREADY;
        atomic_fetch_add(&k->already, 1);
        return 0;
    }
    if (rc != MDB_NOTFOUND)
        goto lmdb_txn;
    if (versioned) {
        if ((rc = get_u64(txn, k->ckpt, &key, &c)))
            goto lmdb_txn;
        if (v > c + 1) {
            mdb_txn_abort(txn);
            *outcome = MIC_GAP;
            atomic_fetch_add(&k->gaps, 1);
            snprintf(why, cap, "gap: %s/%s version %llu waits for version %llu (checkpoint %llu)",
                     d->aggregate_type, d->aggregate_id, (unsigned long long)v,
                     (unsigned long long)(c + 1), (unsigned long long)c);
            return 0;
        }
        if (v <= c) {
            mdb_txn_abort(txn);
            *outcome = MIC_STALE;
            atomic_fetch_add(&k->stale, 1);
            snprintf(why, cap, "stale: %s/%s version %llu is at or below checkpoint %llu but "
                     "event %s was never processed: investigate",
                     d->aggregate_type, d->aggregate_id, (unsigned long long)v,
                     (unsigned long long)c, d->event_id);
            return 0;
        }
    }
    if (d->schema_version < k->o.schema_version) {
        if (!k->o.upcast ||
            !(ev = k->o.upcast(d->event, d->schema_version, k->o.schema_version, k->o.arg))) {
            mdb_txn_abort(txn);
            *outcome = MIC_FAILED;
            atomic_fetch_add(&k->failed, 1);
            snprintf(why, cap, "no upcaster from schema_version %d to %d", d->schema_version,
                     k->o.schema_version);
            return 0;
        }
    } else {
        ev = json_incref(d->event);
    }
    if (k->o.apply(txn, d, ev, k->o.arg, why, cap)) {
        json_decref(ev);
        mdb_txn_abort(txn);
        *outcome = MIC_FAILED;
        atomic_fetch_add(&k->failed, 1);
        if (!why[0])
            snprintf(why, cap, "apply failed");
        return 0;
    }
    json_decref(ev);
    now = wall_us();
    memcpy(marker, &v, 8);
    memcpy(marker + 8, &now, 8);
    val.mv_data = marker;
    val.mv_size = sizeof marker;
    if ((rc = mdb_put(txn, k->seen, &idkey, &val, 0)))
        goto lmdb_txn;
    if (versioned) {
        val.mv_data = &v;
        val.mv_size = sizeof v;
        if ((rc = mdb_put(txn, k->ckpt, &key, &val, 0)))
            goto lmdb_txn;
    }
    /* Fencing: a lease lost while apply ran means another worker may be
     * applying the same event; commit nothing. */
    if (job && mic_job_lease_lost(job)) {
        mdb_txn_abort(txn);
        *outcome = MIC_FENCED;
        atomic_fetch_add(&k->fenced, 1);
        snprintf(why, cap, "lease lost before the commit");
        return 0;
    }
    if ((rc = mdb_txn_commit(txn)))
        goto lmdb;
    *outcome = MIC_APPLIED;
    atomic_fetch_add(&k->applied, 1);
    return 0;
lmdb_txn:
    mdb_txn_abort(txn);
lmdb:
    snprintf(why, cap, "consumer store: %s", mdb_strerror(rc));
    return -1;
}

enum mic_verdict mic_consumer_handler(mic_job *job, const struct mic_leased *d, mic_client *c,
                                      void *arg)
{
    mic_consumer *k = arg;
    enum mic_outcome out;
    char why[1024];

    (void)c;
    if (mic_consumer_process(k, d, job, &out, why, sizeof why)) {
        mic_job_fail(job, -1, "%s", why);
        return MIC_RETRY;
    }
    switch (out) {
    case MIC_APPLIED:
    case MIC_ALREADY:
    case MIC_FENCED:
        return MIC_DONE;
    case MIC_GAP:
        mic_job_fail(job, k->o.gap_retry_s, "%s", why);
        return MIC_RETRY;
    case MIC_STALE:
    case MIC_REFUSED:
        mic_job_fail(job, -1, "%s", why);
        return MIC_DEAD;
    case MIC_FAILED:
    default:
        mic_job_fail(job, -1, "%s", why);
        return MIC_RETRY;
    }
}

void mic_consumer_stats(mic_consumer *k, struct mic_consumer_stats *st)
{
    st->applied = atomic_load(&k->applied);
    st->already = atomic_load(&k->already);
    st->gaps = atomic_load(&k->gaps);
    st->stale = atomic_load(&k->stale);
    st->refused = atomic_load(&k->refused);
    st->failed = atomic_load(&k->failed);
    st->fenced = atomic_load(&k->fenced);
}
