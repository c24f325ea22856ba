/* verify.c - micd --verify: every record and index of a store checked
 * against the others, read only (store.h "Verification"). */
#define _GNU_SOURCE
#include "store.h"
#include "store_int.h"

#include "core/crc32c.h"
#include "core/digest.h"
#include "core/err.h"
#include "journal.h"
#include "core/logger.h"
#include "log.h"
#include "verify.h"
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

/* ---- Verification (micd --verify) ----
 *
 * One read-only transaction over an environment opened with MDB_RDONLY and
 * MDB_NOLOCK (the store's own lock, taken by mic_jnl_recover, keeps micd
 * out meanwhile).  What "points nowhere" means per sub-database:
 *   ids     a seq with no log record, unless an expiry entry of kind 2
 *           still remembers that seq (retention removed the event and
 *           keeps its id for dedupe_retain_s);
 *   time    a seq with no log record;
 *   dlv     a seq with no log record (retention removes an event's
 *           deliveries with it), unless its group is being dropped;
 *   ready, dlq, aq, unh, poison, timers, ags (its head): a (gid, seq)
 *           with no delivery record, unless the group is being dropped.
 * aggidx is not checked for dangling entries: retention keeps an
 * aggregate's version index after removing its events (the versions an
 * aggregate had decide duplicates and gaps), so its entries pointing to
 * removed events are normal; only their shape is checked.  Keys or values
 * of the wrong size count as bad records. */

struct vfy {
    MDB_txn *txn;
    MDB_dbi log, dlv, drops;
    int has_dlv, has_drops;
    FILE *out;
    struct mic_verify_report *rep;
    uint64_t *forgot; /* seqs of expiry kind-2 entries, sorted */
    size_t nforgot;
    const struct vref *ref; /* v_ref's sub-database */
};

/* A sub-database whose keys hold a delivery's group id and seq at fixed
 * offsets (vlen -1: a value of any size). */
struct vref {
    const char *name;
    size_t klen;
    long vlen;
    size_t gid_off, seq_off;
};

/* 'n' bytes of a stored name, printable (corruption may have changed them). */
static void vname(FILE *out, const void *p, size_t n)
{
    const unsigned char *c = p;

    for (size_t i = 0; i < n && i < 128; i++)
        fputc(c[i] > 32 && c[i] < 127 && c[i] != '"' && c[i] != '\\' ? c[i] : '?', out);
}

static int vhas(MDB_txn *txn, MDB_dbi dbi, const void *key, size_t n)
{
    MDB_val k = {n, (void *)key}, v;

    return mdb_get(txn, dbi, &k, &v) == 0;
}

static int vlog_has(struct vfy *f, uint64_t seq)
{
    uint8_t kb[8];

    put_u64(kb, seq);
    return vhas(f->txn, f->log, kb, 8);
}

/* The delivery (gid, seq) exists, or its group is being dropped. */
static int vdlv_has(struct vfy *f, uint32_t gid, uint64_t seq)
{
    uint8_t kb[12];

    put_u32(kb, gid);
    put_u64(kb + 4, seq);
    if (f->has_drops && vhas(f->txn, f->drops, kb, 4))
        return 1;
    return f->has_dlv && vhas(f->txn, f->dlv, kb, 12);
}

static int vcmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

static int vforgot(struct vfy *f, uint64_t seq)
{
    return f->nforgot && bsearch(&seq, f->forgot, f->nforgot, sizeof seq, vcmp) != NULL;
}

/* Call fn for every entry of sub-database 'name' (absent: none). */
static int vwalk(struct vfy *f, const char *name,
                 void (*fn)(struct vfy *f, const MDB_val *k, const MDB_val *v))
{
    MDB_cursor *c;
    MDB_dbi dbi;
    MDB_val k, v;
    int rc = mdb_dbi_open(f->txn, name, 0, &dbi);

    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc || (rc = mdb_cursor_open(f->txn, dbi, &c)))
        return rc;
    for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT))
        fn(f, &k, &v);
    mdb_cursor_close(c);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

static void vbad_shape(struct vfy *f, const char *db, const MDB_val *k, const MDB_val *v)
{
    f->rep->bad_records++;
    fprintf(f->out, "bad record: %s key of %zu bytes, value of %zu bytes (wrong size)\n", db,
            k->mv_size, v->mv_size);
}

static void v_log(struct vfy *f, const MDB_val *k, const MDB_val *v)
{
    struct mic_rec r;
    uint64_t seq;
    int rc;

    f->rep->records++;
    if (k->mv_size != 8) {
        vbad_shape(f, "log", k, v);
        return;
    }
    seq = get_u64(k->mv_data);
    if ((rc = mic_rec_decode(seq, v->mv_data, v->mv_size, &r)) == MIC_OK)
        return;
    f->rep->bad_records++;
    fprintf(f->out, "bad record: log seq=%llu (%s)\n", (unsigned long long)seq,
            rc == MIC_ECORRUPT ? "checksum mismatch" : "does not decode");
}

static void v_expiry(struct vfy *f, const MDB_val *k, const MDB_val *v)
{
    if (k->mv_size == 16 && v->mv_size >= 1 && ((uint8_t *)v->mv_data)[0] == MIC_EXPIRE_ID) {
        uint64_t *p = f->forgot;
        if (f->nforgot % 1024 == 0 &&
            !(p = realloc(f->forgot, (f->nforgot + 1024) * sizeof *p)))
            return; /* out of memory: an id may then be reported */
        f->forgot = p;
        f->forgot[f->nforgot++] = get_u64((uint8_t *)k->mv_data + 8);
    }
}

static void v_ids(struct vfy *f, const MDB_val *k, const MDB_val *v)
{
    uint64_t seq;

    f->rep->entries++;
    if (v->mv_size != 8 + MIC_DIGEST_LEN || k->mv_size == 0) {
        vbad_shape(f, "ids", k, v);
        return;
    }
    seq = get_u64(v->mv_data);
    if (vlog_has(f, seq) || vforgot(f, seq))
        return;
    f->rep->dangling++;
    fprintf(f->out, "dangling: ids event_id=");
    vname(f->out, k->mv_data, k->mv_size);
    fprintf(f->out, " -> seq=%llu (no log record)\n", (unsigned long long)seq);
}

static void v_time(struct vfy *f, const MDB_val *k, const MDB_val *v)
{
    const uint8_t *p = k->mv_data;
    uint64_t seq;

    f->rep->entries++;
    if (v->mv_size != 8 || k->mv_size < 12) {
        vbad_shape(f, "time", k, v);
        return;
    }
    seq = get_u64(v->mv_data);
    if (vlog_has(f, seq))
        return;
    f->rep->dangling++;
    fprintf(f->out, "dangling: time topic_id=%u created_at_us=%lld event_id=", get_u32(p),
            (long long)get_u64(p + 4));
    vname(f->out, p + 12, k->mv_size - 12);
    fprintf(f->out, " -> seq=%llu (no log record)\n", (unsigned long long)seq);
}

static void v_aggidx(struct vfy *f, const MDB_val *k, const MDB_val *v)
{
    f->rep->entries++;
    if (v->mv_size != 8 || (k->mv_size != MIC_AKEY_LEN + 8 && k->mv_size != MIC_AKEY_LEN + 16))
        vbad_shape(f, "aggidx", k, v);
}

static void v_dlv(struct vfy *f, const MDB_val *k, const MDB_val *v)
{
    struct mic_dlv d;
    uint32_t gid;
    uint64_t seq;

    f->rep->entries++;
    if (k->mv_size != 12) {
        vbad_shape(f, "dlv", k, v);
        return;
    }
    gid = get_u32(k->mv_data);
    seq = get_u64((uint8_t *)k->mv_data + 4);
    if (store_dlv_decode(v, &d) != MIC_OK) {
        f->rep->bad_records++;
        fprintf(f->out, "bad record: dlv gid=%u seq=%llu (does not decode)\n", gid,
                (unsigned long long)seq);
    }
    if (vlog_has(f, seq) || (f->has_drops && vhas(f->txn, f->drops, k->mv_data, 4)))
        return;
    f->rep->dangling++;
    fprintf(f->out, "dangling: dlv gid=%u seq=%llu (no log record)\n", gid,
            (unsigned long long)seq);
}

/* An entry of a delivery index naming (gid, seq). */
static void v_dlv_ref(struct vfy *f, const char *db, uint32_t gid, uint64_t seq)
{
    if (vdlv_has(f, gid, seq))
        return;
    f->rep->dangling++;
    fprintf(f->out, "dangling: %s gid=%u seq=%llu (no delivery record)\n", db, gid,
            (unsigned long long)seq);
}

static void v_ready(struct vfy *f, const MDB_val *k, const MDB_val *v)
{
    f->rep->entries++;
    if (k->mv_size != 13 || (v->mv_size != 0 && v->mv_size != 8)) {
        vbad_shape(f, "ready", k, v);
        return;
    }
    v_dlv_ref(f, "ready", get_u32(k->mv_data),
              v->mv_size == 8 ? get_u64(v->mv_data) : get_u64((uint8_t *)k->mv_data + 5));
}

static const struct vref vrefs[] = {
    {"dlq", 12, -1, 0, 4},
    {"aq", AQ_KEY, -1, 0, 20},
    {"unh", 20, -1, 0, 12},
    {"poison", 20, -1, 0, 12},
    {"timers", 20, 1, 8, 12},
};

static void v_ref(struct vfy *f, const MDB_val *k, const MDB_val *v)
{
    const struct vref *d = f->ref;
    const uint8_t *p = k->mv_data;

    f->rep->entries++;
    if (k->mv_size != d->klen || (d->vlen >= 0 && v->mv_size != (size_t)d->vlen)) {
        vbad_shape(f, d->name, k, v);
        return;
    }
    v_dlv_ref(f, d->name, get_u32(p + d->gid_off), get_u64(p + d->seq_off));
}

static void v_ags(struct vfy *f, const MDB_val *k, const MDB_val *v)
{
    struct mic_ags a;

    f->rep->entries++;
    if (k->mv_size != 12 || v->mv_size < AGS_REC) {
        vbad_shape(f, "ags", k, v);
        return;
    }
    store_ags_decode(v->mv_data, &a);
    if (a.active)
        v_dlv_ref(f, "ags (head)", get_u32(k->mv_data), a.active);
}

int mic_store_verify(const char *dir, FILE *out, struct mic_verify_report *rep)
{
    struct vfy f = {.out = out, .rep = rep};
    MDB_env *env = NULL;
    MDB_dbi meta;
    MDB_val k = {6, "format"}, nk = {8, CRC_NEXT}, v;
    char path[4096];
    struct stat st;
    uint64_t next_seq;
    int rc = 0, mrc, lock = -1;

    memset(rep, 0, sizeof *rep);
    if ((size_t)snprintf(path, sizeof path, "%s/data.mdb", dir) >= sizeof path ||
        stat(path, &st) || !S_ISREG(st.st_mode))
        return MIC_ENOTFOUND;
    if ((mrc = mic_jnl_recover(dir, &lock, &next_seq, &rep->replayed)))
        return mrc;
    mrc = MIC_EIO;
    if ((rc = mdb_env_create(&env)) || (rc = mdb_env_set_maxdbs(env, 32)) ||
        (rc = mdb_env_open(env, dir, MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS, 0600)) ||
        (rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &f.txn)))
        goto done;
    if ((rc = mdb_dbi_open(f.txn, "meta", 0, &meta)) || (rc = mdb_get(f.txn, meta, &k, &v)))
        goto done;
    if (v.mv_size != 4 || get_u32(v.mv_data) != MIC_STORE_FORMAT ||
        mdb_get(f.txn, meta, &nk, &v) == 0) {
        mrc = MIC_EVERSION;
        goto done;
    }
    if ((rc = mdb_dbi_open(f.txn, "log", 0, &f.log)))
        goto done;
    f.has_dlv = mdb_dbi_open(f.txn, "dlv", 0, &f.dlv) == 0;
    f.has_drops = mdb_dbi_open(f.txn, "drops", 0, &f.drops) == 0;
    if ((rc = vwalk(&f, "expiry", v_expiry)))
        goto done;
    if (f.nforgot)
        qsort(f.forgot, f.nforgot, sizeof *f.forgot, vcmp);
    if ((rc = vwalk(&f, "log", v_log)) || (rc = vwalk(&f, "ids", v_ids)) ||
        (rc = vwalk(&f, "time", v_time)) || (rc = vwalk(&f, "aggidx", v_aggidx)) ||
        (rc = vwalk(&f, "dlv", v_dlv)) || (rc = vwalk(&f, "ready", v_ready)) ||
        (rc = vwalk(&f, "ags", v_ags)))
        goto done;
    for (size_t i = 0; i < sizeof vrefs / sizeof vrefs[0]; i++) {
        f.ref = &vrefs[i];
        if ((rc = vwalk(&f, vrefs[i].name, v_ref)))
            goto done;
    }
    mrc = MIC_OK;
done:
    if (rc)
        mic_logger_write(MIC_LEVEL_ERROR, NULL, "cannot verify the store", "dir", dir, "error",
                mdb_strerror(rc), NULL);
    if (f.txn)
        mdb_txn_abort(f.txn);
    if (env)
        mdb_env_close(env);
    free(f.forgot);
    close(lock);
    return mrc;
}

