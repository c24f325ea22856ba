/* store.c - the LMDB environment, its sub-databases and every key and
 * record encoding (see store.h; the format is in proto/store-format.md).
 *
 * All integers in keys and records are big-endian, so keys sort in numeric
 * order and every query is a cursor seek.  This file keeps no domain rule:
 * what a delivery's indexes mean, and which must change together, is the
 * delivery engine's (delivery.c).  Sub-databases of format 4:
 *
 *   meta    "format" -> u32, "next_topic_id" -> u32, "next_ordinal" -> u64,
 *           "clock" -> i64 (micd's clock, clock.h)
 *           "crc_next" -> u64 (only while the migration from format 3 runs)
 *   log     seq u64 -> record (56-byte header, stored event JSON, CRC-32C of
 *           the seq and the bytes before it: checked on every read, see
 *           "Log"; records of formats 1 to 3 are rewritten at open)
 *   ids     event_id -> seq u64, SHA-256 content digest
 *   time    topic_id u32, created_at u64, event_id -> seq u64
 *   aggs    akey -> aggregate record (with its ordinal)
 *   aggidx  akey, version u64 | akey, created_at u64, seq u64 -> seq u64
 *   topics  name -> topic record
 *   groups  name -> u32 gid, u8 backfilling, u64 next, u64 end, config JSON
 *   drops   gid u32 -> (empty): deleted groups whose keys are being removed
 *   dlv     gid u32, seq u64 -> delivery record
 *   ready   gid u32, 255 - priority u8, seq u64 -> (empty)
 *   timers  due u64, gid u32, seq u64 -> u8 kind (retry due, lease end)
 *   dlq     gid u32, seq u64 -> (empty)
 *   aq      gid u32, ordinal u64, k1 u64, seq u64 -> (empty) (ordered groups)
 *   ags     gid u32, ordinal u64 -> aggregate state in the group
 *   gapskip akey, version u64 -> (empty)
 *   runs    run_id -> replay run record (layout in replay.c)
 *   expiry  due u64, seq u64 -> u8 kind, then event_id (kinds 1, 2) or
 *           topic_id u32, last_seq u64, retention_s u64 (kind 3: a range)
 *   gstat   gid u32 -> u64 counters (gap-parked aggregates, ...)
 *   unh     gid u32, created_at u64, seq u64 -> (empty): non-terminal deliveries
 *   poison  gid u32, created_at u64, seq u64 -> (empty): DLQ, or failed once
 *   tstat   topic_id u32 -> u64 events stored
 *
 * Map growth: LMDB forbids mdb_env_set_mapsize while any transaction of
 * this process is open, so read transactions hold 'resize' shared and
 * mic_store_grow takes it exclusively (writer-preferring, so a stream of
 * readers cannot starve it). */
#define _GNU_SOURCE
#include "store.h"

#include "core/crc32c.h"
#include "core/digest.h"
#include "core/err.h"
#include "journal.h"
#include "core/logger.h"

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

#define REC_HDR 56    /* log record header, record formats 2 and 3 */
#define REC_HDR_V1 48 /* record format 1 (no deliver_at) */
#define REC_FMT 3     /* the record format store format 4 writes (and reads) */
#define REC_CRC 4     /* its trailer: CRC-32C of the seq and the bytes before */

/* Reads of the log that found a record failing its checksum or not
 * decoding, since the process started (all stores). */
static _Atomic uint64_t corrupt_reads;

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

static int (*fault_hook)(const char *dbname);
static void (*_Atomic fatal_hook)(const char *what, int err);
static int (*sync_fault_hook)(void);
static uint64_t journal_size = (uint64_t)64 << 20;

void mic_store_set_journal_size(uint64_t bytes)
{
    journal_size = bytes;
}

void mic_store_set_sync_fault(int (*hook)(void))
{
    sync_fault_hook = hook;
}

void mic_store_set_fault(int (*hook)(const char *dbname))
{
    fault_hook = hook;
}

/* ---- Encodings ---- */

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put_u64(uint8_t *p, uint64_t v)
{
    put_u32(p, (uint32_t)(v >> 32));
    put_u32(p + 4, (uint32_t)v);
}

static uint64_t get_u64(const uint8_t *p)
{
    return (uint64_t)get_u32(p) << 32 | get_u32(p + 4);
}

static int from_mdb(int rc)
{
    switch (rc) {
    case 0: return MIC_OK;
    case MDB_NOTFOUND: return MIC_ENOTFOUND;
    case MDB_KEYEXIST: return MIC_ECONFLICT;
    case MDB_MAP_FULL: return MIC_ENOSPC;
    case ENOSPC: return MIC_ENOSPC;
    case EDQUOT: return MIC_ENOSPC;
    case ENOMEM: return MIC_ENOMEM;
    }
    mic_logger_write(MIC_LEVEL_ERROR, NULL, "lmdb error", "error", mdb_strerror(rc), NULL);
    if (rc == MDB_PANIC) {
        /* A meta page write failed: LMDB takes no more transactions. */
        void (*fn)(const char *, int) = atomic_load(&fatal_hook);
        if (fn)
            fn("lmdb", EIO);
    }
    return MIC_EIO;
}

/* A write transaction's 'rc' (an MDB or errno code): note whether it met
 * a full filesystem, which a bigger map does not help (mic_store_grow). */
static int wrc(mic_txn *t, int rc)
{
    if (rc == ENOSPC || rc == EDQUOT)
        atomic_store(&t->s->disk_full, 1);
    return from_mdb(rc);
}

void mic_store_on_fatal(void (*fn)(const char *what, int err))
{
    atomic_store(&fatal_hook, fn);
    mic_jnl_on_fail(fn);
}

static int put(mic_txn *t, MDB_dbi dbi, const char *name, MDB_val *k,
               MDB_val *v, unsigned flags)
{
    int rc;

    if (fault_hook && (rc = fault_hook(name)))
        return wrc(t, rc);
    return wrc(t, mdb_put(t->txn, dbi, k, v, flags));
}

/* put() through the write txn's cursor '*c' on 'dbi' (opened on first use,
 * closed with the txn). */
static int cput(mic_txn *t, MDB_cursor **c, MDB_dbi dbi, const char *name, MDB_val *k,
                MDB_val *v, unsigned flags)
{
    int rc;

    if (fault_hook && (rc = fault_hook(name)))
        return wrc(t, rc);
    if (!*c && (rc = mdb_cursor_open(t->txn, dbi, c)))
        return from_mdb(rc);
    return wrc(t, mdb_cursor_put(*c, k, v, flags));
}

/* Entries of 'dbi' into *n. */
static int entries(mic_txn *t, MDB_dbi dbi, uint64_t *n)
{
    MDB_stat st;
    int rc = mdb_stat(t->txn, dbi, &st);

    if (rc)
        return from_mdb(rc);
    *n = st.ms_entries;
    return MIC_OK;
}

static void close_wcursors(mic_txn *t)
{
    if (t->idsc)
        mdb_cursor_close(t->idsc);
    if (t->timec)
        mdb_cursor_close(t->timec);
    if (t->logw)
        mdb_cursor_close(t->logw);
    t->idsc = t->timec = t->logw = NULL;
}

static int get(mic_txn *t, MDB_dbi dbi, MDB_val *k, MDB_val *v)
{
    return from_mdb(mdb_get(t->txn, dbi, k, v));
}

static int next_id(mic_txn *t, const char *name, uint32_t *id);
static int migrate_1_to_2(mic_store *s, MDB_txn *txn);
static int migrate_log(mic_store *s);

/* meta key present while the log is being rewritten in record format 3
 * (the migration from store format 3): u64, the next seq to rewrite. */
#define CRC_NEXT "crc_next"

/* ---- Environment ---- */

static int mkdirs(const char *dir)
{
    char path[1024];
    size_t n = strlen(dir);

    if (n == 0 || n >= sizeof path)
        return -1;
    memcpy(path, dir, n + 1);
    for (char *p = path + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(path, 0700) && errno != EEXIST)
                return -1;
            *p = '/';
        }
    if (mkdir(path, 0700) && errno != EEXIST)
        return -1;
    return 0;
}

/* Open the sub-databases and check (or write, or migrate) the format, in
 * one journaled write transaction made durable before the store is used.
 * Returns MIC_OK, MIC_EVERSION, or another error (logged). */
static int open_dbs(mic_store *s)
{
    MDB_txn *txn;
    mic_txn *t;
    MDB_val k = {6, "format"}, v;
    uint8_t buf[4];
    int rc, dead;

    mdb_reader_check(s->env, &dead);
    if ((rc = mic_txn_begin(s, 1, &t)))
        return rc;
    txn = t->txn;
    if ((rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &s->meta)) ||
        (rc = mdb_dbi_open(txn, "log", MDB_CREATE, &s->log)) ||
        (rc = mdb_dbi_open(txn, "ids", MDB_CREATE, &s->ids)) ||
        (rc = mdb_dbi_open(txn, "time", MDB_CREATE, &s->time)) ||
        (rc = mdb_dbi_open(txn, "aggs", MDB_CREATE, &s->aggs)) ||
        (rc = mdb_dbi_open(txn, "aggidx", MDB_CREATE, &s->aggidx)) ||
        (rc = mdb_dbi_open(txn, "topics", MDB_CREATE, &s->topics)) ||
        (rc = mdb_dbi_open(txn, "groups", MDB_CREATE, &s->groups)) ||
        (rc = mdb_dbi_open(txn, "drops", MDB_CREATE, &s->drops)) ||
        (rc = mdb_dbi_open(txn, "dlv", MDB_CREATE, &s->dlv)) ||
        (rc = mdb_dbi_open(txn, "ready", MDB_CREATE, &s->ready)) ||
        (rc = mdb_dbi_open(txn, "timers", MDB_CREATE, &s->timers)) ||
        (rc = mdb_dbi_open(txn, "dlq", MDB_CREATE, &s->dlq)) ||
        (rc = mdb_dbi_open(txn, "aq", MDB_CREATE, &s->aq)) ||
        (rc = mdb_dbi_open(txn, "ags", MDB_CREATE, &s->ags)) ||
        (rc = mdb_dbi_open(txn, "gapskip", MDB_CREATE, &s->gapskip)) ||
        (rc = mdb_dbi_open(txn, "runs", MDB_CREATE, &s->runs)) ||
        (rc = mdb_dbi_open(txn, "expiry", MDB_CREATE, &s->expiry)) ||
        (rc = mdb_dbi_open(txn, "gstat", MDB_CREATE, &s->gstat)) ||
        (rc = mdb_dbi_open(txn, "unh", MDB_CREATE, &s->unh)) ||
        (rc = mdb_dbi_open(txn, "poison", MDB_CREATE, &s->poison)) ||
        (rc = mdb_dbi_open(txn, "tstat", MDB_CREATE, &s->tstat)))
        goto fail;
    rc = mdb_get(txn, s->meta, &k, &v);
    if (rc == MDB_NOTFOUND) {
        put_u32(buf, MIC_STORE_FORMAT);
        v.mv_size = 4;
        v.mv_data = buf;
        if ((rc = mdb_put(txn, s->meta, &k, &v, 0)))
            goto fail;
    } else if (rc) {
        goto fail;
    } else if (v.mv_size == 4 && get_u32(v.mv_data) >= 1 && get_u32(v.mv_data) <= 3) {
        /* 2 to 3 rewrites nothing: format 3 adds a kind of `expiry` entry
         * (a range of events, kind 3); the entries of format 2 stay valid.
         * 3 to 4 checksums every log record: the number changes here, in
         * the transaction that starts it, so that a micd of format 3
         * refuses the store from now on, and the log is rewritten below
         * in bounded transactions (migrate_log). */
        uint32_t from = get_u32(v.mv_data);
        if (from == 1) {
            mic_logger_write(MIC_LEVEL_INFO, NULL, "migrating the store", "from", "1", "to", "2", NULL);
            if ((rc = migrate_1_to_2(s, txn)))
                goto fail;
        }
        if (from <= 2)
            mic_logger_write(MIC_LEVEL_INFO, NULL, "migrating the store", "from", "2", "to", "3", NULL);
        mic_logger_write(MIC_LEVEL_INFO, NULL, "migrating the store", "from", "3", "to", "4", NULL);
        put_u32(buf, MIC_STORE_FORMAT);
        v.mv_size = 4;
        v.mv_data = buf;
        if ((rc = mdb_put(txn, s->meta, &k, &v, 0)))
            goto fail;
        {
            uint8_t nb[8];
            MDB_val nk = {8, CRC_NEXT}, nv = {8, nb};
            put_u64(nb, 0);
            if ((rc = mdb_put(txn, s->meta, &nk, &nv, 0)))
                goto fail;
        }
    } else if (v.mv_size != 4 || get_u32(v.mv_data) != MIC_STORE_FORMAT) {
        char found[16];
        snprintf(found, sizeof found, "%u",
                 v.mv_size == 4 ? get_u32(v.mv_data) : 0u);
        mic_logger_write(MIC_LEVEL_ERROR, NULL, "store has an unknown format version",
                "found", found, NULL);
        mic_txn_abort(t);
        return MIC_EVERSION;
    }
    if ((rc = mic_txn_commit(t)))
        return rc;
    if (s->jnl && (rc = mic_jnl_flush(s->jnl)))
        return rc;
    return migrate_log(s);
fail:
    mic_txn_abort(t);
    return from_mdb(rc);
}

/* LMDB sizes lock.mdb with ftruncate and writes its reader table through
 * a shared map: on a full filesystem the first write to a page with no
 * block behind it is a SIGBUS, not an error.  So the file's blocks are
 * allocated first (LOCK_BYTES covers the 1024 readers' table), and a
 * filesystem without room for them is a clean MIC_ENOSPC (logged). */
#define LOCK_BYTES (128 * 1024)
static int lock_file_room(const char *dir)
{
    char path[PATH_MAX];
    int fd, rc;

    snprintf(path, sizeof path, "%s/lock.mdb", dir);
    if ((fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0) {
        rc = errno;
        goto fail;
    }
    rc = posix_fallocate(fd, 0, LOCK_BYTES);
    close(fd);
    if (rc == 0 || rc == EOPNOTSUPP || rc == EINVAL)
        return MIC_OK; /* a filesystem without fallocate: LMDB as it is */
fail:
    mic_logger_write(MIC_LEVEL_ERROR, NULL, "cannot open store", "dir", dir, "error",
            rc == ENOSPC || rc == EDQUOT ? "no room on the filesystem for lock.mdb"
                                         : strerror(rc), NULL);
    return rc == ENOSPC || rc == EDQUOT ? MIC_ENOSPC : MIC_EIO;
}

int mic_store_open(mic_store **out, const char *dir, uint64_t map_size,
                   uint64_t map_max, int nosync)
{
    mic_store *s;
    pthread_rwlockattr_t attr;
    uint64_t next_seq, replayed;
    int rc = 0, mic_rc = MIC_OK, jlock = -1, v[3]; /* rc: LMDB's; mic_rc: ours */

    /* The journal knows LMDB's files: only an LMDB it was written for. */
    mdb_version(&v[0], &v[1], &v[2]);
    if ((mic_rc = mic_jnl_lmdb_check(v[0], v[1], v[2])))
        return mic_rc;
    if (!(s = calloc(1, sizeof *s)))
        return MIC_ENOMEM;
    if (mkdirs(dir)) {
        mic_logger_write(MIC_LEVEL_ERROR, NULL, "cannot create data dir", "dir", dir,
                "error", strerror(errno), NULL);
        free(s);
        return MIC_EIO;
    }
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr,
                                  PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&s->resize, &attr);
    pthread_rwlockattr_destroy(&attr);
    s->map_size = map_size;
    s->map_max = map_max;
    s->nosync = nosync;
    s->jlock = -1;
    /* A journal left by a crash is replayed first, whatever the mode. */
    if ((mic_rc = mic_jnl_recover(dir, &jlock, &next_seq, &replayed)))
        goto fail_free;
    if ((mic_rc = lock_file_room(dir)))
        goto fail_free;
    if ((rc = mdb_env_create(&s->env)))
        goto fail_free;
    if ((rc = mdb_env_set_maxdbs(s->env, 32)) ||
        (rc = mdb_env_set_maxreaders(s->env, 1024)) ||
        (rc = mdb_env_set_mapsize(s->env, map_size)) ||
        (rc = mdb_env_open(s->env, dir, MDB_NOTLS | MDB_NORDAHEAD | MDB_NOSYNC, 0600)))
        goto fail_env;
    if (nosync) {
        if ((mic_rc = mic_jnl_disable(dir, jlock)))
            goto fail_env;
        s->jlock = jlock;
        jlock = -1;
    } else {
        MDB_stat st;
        int fd;
        /* The journal starts from a data.mdb that is on disk as it is. */
        if ((rc = mdb_env_sync(s->env, 1)) || (rc = mdb_env_get_fd(s->env, &fd)) ||
            (rc = mdb_env_stat(s->env, &st)))
            goto fail_env;
        mic_rc = mic_jnl_open(&s->jnl, dir, jlock, fd, st.ms_psize, journal_size, next_seq);
        jlock = -1; /* the journal's now, error or not */
        if (mic_rc)
            goto fail_env;
    }
    /* A migration may need more map than the store used (format 4 adds a
     * CRC to every log record). */
    while ((mic_rc = open_dbs(s)) == MIC_ENOSPC && mic_store_grow(s) == MIC_OK)
        ;
    if (mic_rc) {
        mic_logger_write(MIC_LEVEL_ERROR, NULL, "cannot open store", "dir", dir, "error",
                mic_rc == MIC_ENOSPC ? "no room: the filesystem or --map-max is full"
                                     : mic_strerror(mic_rc), NULL);
        goto fail_env;
    }
    *out = s;
    return MIC_OK;
fail_env:
    mic_jnl_close(s->jnl);
    mdb_env_close(s->env);
fail_free:
    if (jlock >= 0)
        close(jlock);
    if (s->jlock >= 0)
        close(s->jlock);
    pthread_rwlock_destroy(&s->resize);
    free(s);
    if (mic_rc) /* said where it happened */
        return mic_rc;
    mic_logger_write(MIC_LEVEL_ERROR, NULL, "cannot open store", "dir", dir, "error",
            mdb_strerror(rc), NULL);
    return rc == MDB_MAP_FULL || rc == ENOSPC ? MIC_ENOSPC : MIC_EIO;
}

void mic_store_close(mic_store *s)
{
    if (!s)
        return;
    mic_jnl_close(s->jnl);
    mdb_env_close(s->env);
    if (s->jlock >= 0)
        close(s->jlock);
    pthread_rwlock_destroy(&s->resize);
    free(s);
}

int mic_store_grow(mic_store *s)
{
    uint64_t next;
    int rc;

    if (s->map_size >= s->map_max || atomic_load(&s->disk_full))
        return MIC_ENOSPC;
    next = s->map_size * 2 > s->map_max ? s->map_max : s->map_size * 2;
    /* A copy (mic_store_copy_fd) holds 'resize' shared for its whole
     * length: waiting for it would queue every read transaction behind
     * this writer-preferring lock until the copy ends.  So no growth while
     * one runs; and a copy that began between the check and the lock is
     * found at the next check, 100 ms later at most. */
    for (;;) {
        struct timespec ts;

        if (atomic_load(&s->copying)) {
            mic_logger_write(MIC_LEVEL_WARN, NULL, "map full while a backup runs: it grows once the "
                    "backup ends", NULL);
            return MIC_ENOSPC;
        }
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        if (pthread_rwlock_timedwrlock(&s->resize, &ts) == 0)
            break;
    }
    rc = mdb_env_set_mapsize(s->env, next);
    if (rc == 0)
        s->map_size = next;
    pthread_rwlock_unlock(&s->resize);
    if (rc == 0) {
        char sz[32];
        snprintf(sz, sizeof sz, "%llu", (unsigned long long)next);
        mic_logger_write(MIC_LEVEL_INFO, NULL, "map grown", "map_size", sz, NULL);
    }
    return from_mdb(rc);
}

int mic_store_copy_fd(mic_store *s, int fd, int *oserr)
{
    int rc;

    *oserr = 0;
    /* Counted before the lock is taken: a grow that saw no copy holds the
     * lock a moment only; one that comes later finds the count. */
    atomic_fetch_add(&s->copying, 1);
    pthread_rwlock_rdlock(&s->resize);
    rc = mdb_env_copyfd2(s->env, fd, MDB_CP_COMPACT);
    pthread_rwlock_unlock(&s->resize);
    atomic_fetch_sub(&s->copying, 1);
    if (rc == 0)
        return MIC_OK;
    *oserr = rc;
    if (rc == ENOMEM)
        return MIC_ENOMEM;
    if (rc != EPIPE)
        mic_logger_write(MIC_LEVEL_ERROR, NULL, "store copy failed", "error", mdb_strerror(rc), NULL);
    return MIC_EIO;
}

void mic_store_usage(mic_store *s, uint64_t *map_size, uint64_t *used,
                     uint64_t *map_max)
{
    MDB_envinfo info;
    MDB_stat st;

    mdb_env_info(s->env, &info);
    mdb_env_stat(s->env, &st);
    *map_size = info.me_mapsize;
    *used = (uint64_t)(info.me_last_pgno + 1) * st.ms_psize;
    *map_max = s->map_max;
}

/* ---- Durability ----
 *
 * LMDB runs with MDB_NOSYNC: a commit only writes its pages and its meta
 * page into the OS cache.  Under --durability fsync the journal
 * (journal.h) has copied every byte of it, and mic_store_sync writes the
 * commits sealed since the last call to the journal file in one write and
 * one fdatasync: the commit is then durable, and a crash or power loss
 * before data.mdb itself reached the disk is repaired by the journal's
 * replay at the next open. */

int mic_store_sync(mic_store *s)
{
    int rc;

    if (sync_fault_hook && (rc = sync_fault_hook())) {
        mic_logger_write(MIC_LEVEL_ERROR, NULL, "fdatasync failed", "error", strerror(rc), NULL);
        return MIC_EIO;
    }
    if (!s->jnl)
        return MIC_OK;
    return mic_jnl_flush(s->jnl);
}

int mic_store_journal_stats(mic_store *s, struct mic_jnl_stats *st)
{
    if (!s->jnl)
        return MIC_ENOTFOUND;
    mic_jnl_stats(s->jnl, st);
    return MIC_OK;
}

/* ---- Transactions ---- */

int mic_txn_begin(mic_store *s, int write, mic_txn **out)
{
    mic_txn *t = malloc(sizeof *t);
    int rc;

    if (!t)
        return MIC_ENOMEM;
    t->s = s;
    t->write = write;
    t->logc = NULL;
    t->log_seq = 0;
    t->idsc = t->timec = t->logw = NULL;
    if (!write)
        pthread_rwlock_rdlock(&s->resize);
    rc = mdb_txn_begin(s->env, NULL, write ? 0 : MDB_RDONLY, &t->txn);
    if (rc) {
        if (!write)
            pthread_rwlock_unlock(&s->resize);
        free(t);
        return from_mdb(rc);
    }
    /* At most one commit may be ahead of the journal, and the journal
     * has room for this one (journal.h). */
    if (write && s->jnl && (rc = mic_jnl_begin(s->jnl))) {
        mdb_txn_abort(t->txn);
        free(t);
        if (rc == MIC_ENOSPC)
            atomic_store(&s->disk_full, 1);
        return rc == MIC_ENOSPC ? MIC_ENOSPC : MIC_EIO;
    }
    *out = t;
    return MIC_OK;
}

int mic_txn_commit(mic_txn *t)
{
    int rc;

    if (t->logc)
        mdb_cursor_close(t->logc);
    close_wcursors(t);
    if (t->write && t->s->jnl) {
        MDB_envinfo info;
        if ((rc = mdb_txn_commit(t->txn))) {
            mic_jnl_discard(t->s->jnl);
        } else {
            /* The txnid LMDB's meta page now carries: the journal checks
             * that a commit which advanced it was captured. */
            mdb_env_info(t->s->env, &info);
            if (mic_jnl_seal(t->s->jnl, (uint64_t)info.me_last_txnid)) {
                free(t);
                return MIC_EIO;
            }
        }
    } else {
        rc = mdb_txn_commit(t->txn);
    }

    if (!t->write) {
        pthread_rwlock_unlock(&t->s->resize);
    } else if (rc == 0) {
        atomic_store(&t->s->disk_full, 0);
    } else if (rc == ENOSPC || rc == EDQUOT) {
        atomic_store(&t->s->disk_full, 1);
    }
    free(t);
    return from_mdb(rc);
}

void mic_txn_abort(mic_txn *t)
{
    if (!t)
        return;
    if (t->logc)
        mdb_cursor_close(t->logc);
    close_wcursors(t);
    mdb_txn_abort(t->txn);
    if (t->write && t->s->jnl)
        mic_jnl_discard(t->s->jnl); /* pages it spilled: free ones */
    if (!t->write)
        pthread_rwlock_unlock(&t->s->resize);
    free(t);
}

/* ---- Meta ---- */

int mic_store_last_seq(mic_txn *t, uint64_t *seq)
{
    MDB_cursor *c;
    MDB_val k, v;
    int rc;

    if ((rc = mdb_cursor_open(t->txn, t->s->log, &c)))
        return from_mdb(rc);
    rc = mdb_cursor_get(c, &k, &v, MDB_LAST);
    mdb_cursor_close(c);
    if (rc == MDB_NOTFOUND) {
        *seq = 0;
        return MIC_OK;
    }
    if (rc)
        return from_mdb(rc);
    *seq = get_u64(k.mv_data);
    return MIC_OK;
}

int mic_store_next_topic_id(mic_txn *t, uint32_t *id)
{
    return next_id(t, "next_topic_id", id);
}

static int next_ordinal(MDB_txn *txn, MDB_dbi meta, uint64_t *ord)
{
    MDB_val k = {12, "next_ordinal"}, v;
    uint8_t buf[8];
    uint64_t next = 1;
    int rc = mdb_get(txn, meta, &k, &v);

    if (rc == 0 && v.mv_size == 8)
        next = get_u64(v.mv_data);
    else if (rc && rc != MDB_NOTFOUND)
        return rc;
    put_u64(buf, next + 1);
    v.mv_size = 8;
    v.mv_data = buf;
    if ((rc = mdb_put(txn, meta, &k, &v, 0)))
        return rc;
    *ord = next;
    return 0;
}

int mic_store_next_ordinal(mic_txn *t, uint64_t *ord)
{
    int rc;

    if (fault_hook && (rc = fault_hook("meta")))
        return from_mdb(rc);
    return from_mdb(next_ordinal(t->txn, t->s->meta, ord));
}

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
static void rec_encode(uint8_t *p, const struct mic_rec *r)
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
    if ((rc = cput(t, &t->logw, t->s->log, "log", &k, &v, MDB_APPEND | MDB_RESERVE)))
        return rc;
    rec_encode(v.mv_data, r);
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
static int rec_decode_old(uint64_t seq, const MDB_val *v, struct mic_rec *r)
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
    atomic_fetch_add(&corrupt_reads, 1);
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
    return atomic_load(&corrupt_reads);
}

int mic_store_log_get(mic_txn *t, uint64_t seq, struct mic_rec *r)
{
    uint8_t kb[8];
    MDB_val k = {8, kb}, v;
    int rc;

    put_u64(kb, seq);
    if (t->write) {
        if ((rc = get(t, t->s->log, &k, &v)))
            return rc;
    } else {
        /* Readers walk the log mostly in seq order (a topic's time range,
         * a backfill): step the cursor when seq follows the last one read,
         * seek otherwise. */
        if (!t->logc && (rc = mdb_cursor_open(t->txn, t->s->log, &t->logc)))
            return from_mdb(rc);
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
            return from_mdb(rc);
    }
    return rec_read(seq, &v, r);
}

int mic_store_log_count(mic_txn *t, uint64_t *n)
{
    return entries(t, t->s->log, n);
}

/* ---- Event ids ---- */

int mic_store_id_get(mic_txn *t, const char *id, size_t idlen, uint64_t *seq,
                     uint8_t digest[MIC_DIGEST_LEN])
{
    MDB_val k = {idlen, (void *)id}, v;
    int rc = get(t, t->s->ids, &k, &v);

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
    return cput(t, &t->idsc, t->s->ids, "ids", &k, &v, 0);
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
    return cput(t, &t->timec, t->s->time, "time", &k, &v, 0);
}

int mic_store_time_any(mic_txn *t, uint32_t topic_id)
{
    uint8_t kb[4];
    MDB_val k = {4, kb}, v;
    MDB_cursor *c;
    int rc;

    put_u32(kb, topic_id);
    if ((rc = mdb_cursor_open(t->txn, t->s->time, &c)))
        return from_mdb(rc);
    rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
    if (rc == 0)
        rc = k.mv_size >= 4 && get_u32(k.mv_data) == topic_id ? 0 : MDB_NOTFOUND;
    mdb_cursor_close(c);
    return from_mdb(rc);
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
        return from_mdb(rc);
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
    return rc == 0 || rc == MDB_NOTFOUND ? MIC_OK : from_mdb(rc);
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

#define AGG_REC 33

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
        return from_mdb(rc);
    rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
    rc = mdb_cursor_get(c, &k, &v, rc == MDB_NOTFOUND ? MDB_LAST : MDB_PREV);
    if (rc == 0 && k.mv_size == MIC_AKEY_LEN + 8 && !memcmp(k.mv_data, akey, MIC_AKEY_LEN))
        *ver = get_u64((uint8_t *)k.mv_data + MIC_AKEY_LEN);
    mdb_cursor_close(c);
    return rc == 0 || rc == MDB_NOTFOUND ? MIC_OK : from_mdb(rc);
}

int mic_store_agg_get(mic_txn *t, const uint8_t akey[MIC_AKEY_LEN],
                      struct mic_agg_rec *a)
{
    MDB_val k = {MIC_AKEY_LEN, (void *)akey}, v;
    const uint8_t *p;
    int rc = get(t, t->s->aggs, &k, &v);

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
    return put(t, t->s->aggs, "aggs", &k, &v, 0);
}

int mic_store_aggidx_get_version(mic_txn *t, const uint8_t akey[MIC_AKEY_LEN],
                                 uint64_t ver, uint64_t *seq)
{
    uint8_t kb[MIC_AKEY_LEN + 8];
    MDB_val k = {sizeof kb, kb}, v;
    int rc;

    memcpy(kb, akey, MIC_AKEY_LEN);
    put_u64(kb + MIC_AKEY_LEN, ver);
    if ((rc = get(t, t->s->aggidx, &k, &v)))
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
    return put(t, t->s->aggidx, "aggidx", &k, &v, MDB_NOOVERWRITE);
}

/* ---- Counters in meta ---- */

static int next_id(mic_txn *t, const char *name, uint32_t *id)
{
    MDB_val k = {strlen(name), (void *)name}, v;
    uint8_t buf[4];
    uint32_t next = 1;
    int rc = get(t, t->s->meta, &k, &v);

    if (rc == MIC_OK && v.mv_size == 4)
        next = get_u32(v.mv_data);
    else if (rc != MIC_ENOTFOUND && rc != MIC_OK)
        return rc;
    put_u32(buf, next + 1);
    v.mv_size = 4;
    v.mv_data = buf;
    if ((rc = put(t, t->s->meta, "meta", &k, &v, 0)))
        return rc;
    *id = next;
    return MIC_OK;
}

/* ---- micd's clock in meta ---- */

int mic_store_clock_get(mic_txn *t, int64_t *us)
{
    MDB_val k = {5, "clock"}, v;
    int rc = get(t, t->s->meta, &k, &v);

    *us = 0;
    if (rc == MIC_ENOTFOUND)
        return MIC_OK;
    if (rc)
        return rc;
    if (v.mv_size == 8)
        *us = (int64_t)get_u64(v.mv_data);
    return MIC_OK;
}

int mic_store_clock_put(mic_txn *t, int64_t us)
{
    MDB_val k = {5, "clock"}, v;
    uint8_t buf[8];

    put_u64(buf, (uint64_t)us);
    v.mv_size = 8;
    v.mv_data = buf;
    return put(t, t->s->meta, "meta", &k, &v, 0);
}

/* ---- Groups ---- */

#define GROUP_HDR 21

int mic_store_next_group_id(mic_txn *t, uint32_t *gid)
{
    return next_id(t, "next_group_id", gid);
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
    int rc = get(t, t->s->groups, &k, &v);

    return rc ? rc : group_decode(&v, g);
}

int mic_store_group_put(mic_txn *t, const char *name, size_t len,
                        const struct mic_group_rec *g)
{
    MDB_val k = {len, (void *)name}, v = {GROUP_HDR + g->config_len, NULL};
    uint8_t *p;
    int rc;

    if (fault_hook && (rc = fault_hook("groups")))
        return from_mdb(rc);
    if ((rc = mdb_put(t->txn, t->s->groups, &k, &v, MDB_RESERVE)))
        return from_mdb(rc);
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

    return from_mdb(mdb_del(t->txn, t->s->groups, &k, NULL));
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
        return from_mdb(rc);
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
    return rc == MDB_NOTFOUND ? MIC_OK : from_mdb(rc);
}

int mic_store_drop_put(mic_txn *t, uint32_t gid)
{
    uint8_t kb[4];
    MDB_val k = {4, kb}, v = {0, NULL};

    put_u32(kb, gid);
    return put(t, t->s->drops, "drops", &k, &v, 0);
}

int mic_store_drop_first(mic_txn *t, uint32_t *gid)
{
    MDB_cursor *c;
    MDB_val k, v;
    int rc;

    if ((rc = mdb_cursor_open(t->txn, t->s->drops, &c)))
        return from_mdb(rc);
    rc = mdb_cursor_get(c, &k, &v, MDB_FIRST);
    if (rc == 0)
        *gid = get_u32(k.mv_data);
    mdb_cursor_close(c);
    return from_mdb(rc);
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
        return from_mdb(rc);
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
    return from_mdb(rc);
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
            return from_mdb(r2);
        *finished = 1;
        return from_mdb(mdb_del(t->txn, t->s->drops, &k, NULL));
    }
    return MIC_OK;
}

/* ---- Deliveries ---- */

/* Delivery record, format 2 (proto/store-format.md):
 *   0 state, 1 priority, 2 flags (1 handed, 2 has ord/k1, 4 versioned,
 *   8 has rank), 3 worker length, 4 attempts u32, 8 the state's time u64
 *   (not_before, lease_expires or terminal_at), 16 created_at u64,
 *   24 token[16], 40 error length u16, [ord u64, k1 u64], [rank u64],
 *   then worker, error. */
#define DLV_HDR 42
#define DLV_ORD 16
#define DLV_RANK 8
#define DLV_V1_HDR 64

static int nonterminal_state(int st)
{
    return st == MIC_DLV_PENDING || st == MIC_DLV_PROCESSING;
}

static int dlv_decode(const MDB_val *v, struct mic_dlv *d)
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

static size_t dlv_encode(uint8_t *vb, const struct mic_dlv *d)
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
    if ((rc = get(t, t->s->dlv, &k, &v)))
        return rc;
    return dlv_decode(&v, d);
}

int mic_store_dlv_put(mic_txn *t, uint32_t gid, uint64_t seq,
                      const struct mic_dlv *d)
{
    uint8_t kb[12], vb[DLV_HDR + DLV_ORD + DLV_RANK + MIC_WORKER_MAX + MIC_ERROR_MAX];
    MDB_val k = {12, kb}, v = {0, vb};

    put_u32(kb, gid);
    put_u64(kb + 4, seq);
    v.mv_size = dlv_encode(vb, d);
    return put(t, t->s->dlv, "dlv", &k, &v, 0);
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
    return rc == MDB_NOTFOUND ? MIC_OK : from_mdb(rc);
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
        return put(t, dbi, name, &k, &v, 0);
    rc = mdb_del(t->txn, dbi, &k, NULL);
    return rc == MDB_NOTFOUND ? MIC_OK : from_mdb(rc);
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
        return from_mdb(rc);
    rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
    if (rc == 0 && (k.mv_size != 20 || get_u32(k.mv_data) != gid))
        rc = MDB_NOTFOUND;
    if (rc == 0) {
        *created_at = (int64_t)get_u64((uint8_t *)k.mv_data + 4);
        *seq = get_u64((uint8_t *)k.mv_data + 12);
    }
    mdb_cursor_close(c);
    return from_mdb(rc);
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
        return from_mdb(rc);
    for (rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
         rc == 0 && *n < max && k.mv_size == 20 && get_u32(k.mv_data) == gid;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT))
        seqs[(*n)++] = get_u64((uint8_t *)k.mv_data + 12);
    mdb_cursor_close(c);
    return rc == 0 || rc == MDB_NOTFOUND ? MIC_OK : from_mdb(rc);
}

int mic_store_topic_events_add(mic_txn *t, uint32_t topic_id, int64_t delta)
{
    uint8_t kb[4], vb[8];
    MDB_val k = {4, kb}, v;
    uint64_t n = 0;
    int rc;

    put_u32(kb, topic_id);
    rc = get(t, t->s->tstat, &k, &v);
    if (rc == MIC_OK && v.mv_size == 8)
        n = get_u64(v.mv_data);
    else if (rc && rc != MIC_ENOTFOUND)
        return rc;
    n = (int64_t)n + delta < 0 ? 0 : (uint64_t)((int64_t)n + delta);
    put_u64(vb, n);
    v.mv_size = 8;
    v.mv_data = vb;
    return put(t, t->s->tstat, "tstat", &k, &v, 0);
}

int mic_store_topic_events(mic_txn *t, uint32_t topic_id, uint64_t *n)
{
    uint8_t kb[4];
    MDB_val k = {4, kb}, v;
    int rc;

    put_u32(kb, topic_id);
    rc = get(t, t->s->tstat, &k, &v);
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
        return from_mdb(rc);
    for (rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
         rc == 0 && !stop && k.mv_size == 12 && get_u32(k.mv_data) == gid;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT))
        stop = fn(arg, get_u64((uint8_t *)k.mv_data + 4),
                  v.mv_size ? ((uint8_t *)v.mv_data)[0] : 0);
    mdb_cursor_close(c);
    if (stop)
        return stop;
    return rc == MDB_NOTFOUND || rc == 0 ? MIC_OK : from_mdb(rc);
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
    return put(t, t->s->ready, "ready", &k, &v, 0);
}

int mic_store_ready_del(mic_txn *t, uint32_t gid, uint8_t prio, uint64_t rank, uint64_t seq)
{
    uint8_t kb[13];
    MDB_val k = {13, kb};

    ready_key(kb, gid, prio, rank ? rank : seq);
    return from_mdb(mdb_del(t->txn, t->s->ready, &k, NULL));
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
    if (fault_hook && (rc = fault_hook("ready")))
        return from_mdb(rc);
    if ((rc = mdb_cursor_open(t->txn, t->s->ready, &c)))
        return from_mdb(rc);
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
    return rc == MDB_NOTFOUND || rc == 0 ? MIC_OK : from_mdb(rc);
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
    return put(t, t->s->timers, "timers", &k, &v, 0);
}

int mic_store_timer_del(mic_txn *t, int64_t due, uint32_t gid, uint64_t seq)
{
    uint8_t kb[20];
    MDB_val k = {20, kb};
    int rc;

    timer_key(kb, due, gid, seq);
    rc = mdb_del(t->txn, t->s->timers, &k, NULL);
    return rc == MDB_NOTFOUND ? MIC_OK : from_mdb(rc);
}

int mic_store_timer_first(mic_txn *t, int64_t *due, uint32_t *gid,
                          uint64_t *seq, uint8_t *kind)
{
    MDB_cursor *c;
    MDB_val k, v;
    int rc;

    if ((rc = mdb_cursor_open(t->txn, t->s->timers, &c)))
        return from_mdb(rc);
    rc = mdb_cursor_get(c, &k, &v, MDB_FIRST);
    if (rc == 0 && k.mv_size == 20) {
        *due = (int64_t)get_u64(k.mv_data);
        *gid = get_u32((uint8_t *)k.mv_data + 8);
        *seq = get_u64((uint8_t *)k.mv_data + 12);
        *kind = v.mv_size ? *(uint8_t *)v.mv_data : 0;
    }
    mdb_cursor_close(c);
    return from_mdb(rc);
}

int mic_store_dlq_put(mic_txn *t, uint32_t gid, uint64_t seq)
{
    uint8_t kb[12];
    MDB_val k = {12, kb}, v = {0, NULL};

    put_u32(kb, gid);
    put_u64(kb + 4, seq);
    return put(t, t->s->dlq, "dlq", &k, &v, 0);
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
        return from_mdb(rc);
    for (rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
         rc == 0 && *n < max && k.mv_size == 12 && get_u32(k.mv_data) == gid;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT))
        seqs[(*n)++] = get_u64((uint8_t *)k.mv_data + 4);
    mdb_cursor_close(c);
    return rc == MDB_NOTFOUND || rc == 0 ? MIC_OK : from_mdb(rc);
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
        return from_mdb(rc);
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
    return rc == MDB_NOTFOUND || rc == 0 ? MIC_OK : from_mdb(rc);
}

int mic_store_aggidx_each(mic_txn *t, const uint8_t akey[MIC_AKEY_LEN],
                          int (*fn)(void *arg, uint64_t seq), void *arg)
{
    MDB_cursor *c;
    MDB_val k = {MIC_AKEY_LEN, (void *)akey}, v;
    int rc, stop = 0;

    if ((rc = mdb_cursor_open(t->txn, t->s->aggidx, &c)))
        return from_mdb(rc);
    for (rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
         rc == 0 && !stop && k.mv_size > MIC_AKEY_LEN && !memcmp(k.mv_data, akey, MIC_AKEY_LEN);
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT))
        stop = fn(arg, get_u64(v.mv_data));
    mdb_cursor_close(c);
    if (stop)
        return stop;
    return rc == MDB_NOTFOUND || rc == 0 ? MIC_OK : from_mdb(rc);
}

int mic_store_gapskip_put(mic_txn *t, const uint8_t akey[MIC_AKEY_LEN], uint64_t ver)
{
    uint8_t kb[MIC_AKEY_LEN + 8];
    MDB_val k = {sizeof kb, kb}, v = {0, NULL};

    memcpy(kb, akey, MIC_AKEY_LEN);
    put_u64(kb + MIC_AKEY_LEN, ver);
    return put(t, t->s->gapskip, "gapskip", &k, &v, 0);
}

int mic_store_gapskip_get(mic_txn *t, const uint8_t akey[MIC_AKEY_LEN], uint64_t ver)
{
    uint8_t kb[MIC_AKEY_LEN + 8];
    MDB_val k = {sizeof kb, kb}, v;

    memcpy(kb, akey, MIC_AKEY_LEN);
    put_u64(kb + MIC_AKEY_LEN, ver);
    return get(t, t->s->gapskip, &k, &v);
}

/* ---- Ordered groups ---- */

#define AQ_KEY 28 /* gid u32, ord u64, k1 u64, seq u64 */

static void aq_key(uint8_t *kb, uint32_t gid, uint64_t ord, uint64_t k1, uint64_t seq)
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

    aq_key(kb, gid, ord, k1, seq);
    return put(t, t->s->aq, "aq", &k, &v, 0);
}

int mic_store_aq_del(mic_txn *t, uint32_t gid, uint64_t ord, uint64_t k1, uint64_t seq)
{
    uint8_t kb[AQ_KEY];
    MDB_val k = {AQ_KEY, kb};

    aq_key(kb, gid, ord, k1, seq);
    return from_mdb(mdb_del(t->txn, t->s->aq, &k, NULL));
}

int mic_store_aq_has(mic_txn *t, uint32_t gid, uint64_t ord, uint64_t k1, uint64_t seq)
{
    uint8_t kb[AQ_KEY];
    MDB_val k = {AQ_KEY, kb}, v;

    aq_key(kb, gid, ord, k1, seq);
    return get(t, t->s->aq, &k, &v);
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
    aq_key(kb, gid, ord, after ? after + 1 : 0, 0);
    if ((rc = mdb_cursor_open(t->txn, t->s->aq, &c)))
        return from_mdb(rc);
    for (rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
         rc == 0 && *n < max && k.mv_size == AQ_KEY && !memcmp(k.mv_data, kb, 12);
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        k1[*n] = get_u64((uint8_t *)k.mv_data + 12);
        seq[*n] = get_u64((uint8_t *)k.mv_data + 20);
        (*n)++;
    }
    mdb_cursor_close(c);
    if (rc && rc != MDB_NOTFOUND)
        return from_mdb(rc);
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

    aq_key(kb, gid, ord, 0, 0);
    if ((rc = mdb_cursor_open(t->txn, t->s->aq, &c)))
        return from_mdb(rc);
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
    return rc == MDB_NOTFOUND || rc == 0 ? MIC_OK : from_mdb(rc);
}

#define AGS_REC (40 + MIC_AKEY_LEN)

static void ags_decode(const uint8_t *p, struct mic_ags *a)
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
    if ((rc = get(t, t->s->ags, &k, &v)))
        return rc;
    if (v.mv_size < AGS_REC)
        return MIC_EIO;
    ags_decode(v.mv_data, a);
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
    return put(t, t->s->ags, "ags", &k, &v, 0);
}

int mic_store_ags_del(mic_txn *t, uint32_t gid, uint64_t ord)
{
    uint8_t kb[12];
    MDB_val k = {sizeof kb, kb};
    int rc;

    put_u32(kb, gid);
    put_u64(kb + 4, ord);
    rc = mdb_del(t->txn, t->s->ags, &k, NULL);
    return rc == MDB_NOTFOUND ? MIC_OK : from_mdb(rc);
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
        return from_mdb(rc);
    for (rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
         rc == 0 && !stop && k.mv_size == 12 && get_u32(k.mv_data) == gid;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        struct mic_ags a;
        if (v.mv_size < AGS_REC) {
            rc = EIO;
            break;
        }
        ags_decode(v.mv_data, &a);
        stop = fn(arg, get_u64((uint8_t *)k.mv_data + 4), &a);
    }
    mdb_cursor_close(c);
    if (stop)
        return stop;
    return rc == MDB_NOTFOUND || rc == 0 ? MIC_OK : from_mdb(rc);
}

/* ---- Per-group figures ---- */

int mic_store_gstat_get(mic_txn *t, uint32_t gid, uint64_t out[MIC_GSTAT_N])
{
    uint8_t kb[4];
    MDB_val k = {4, kb}, v;
    int rc;

    put_u32(kb, gid);
    memset(out, 0, MIC_GSTAT_N * sizeof *out);
    rc = get(t, t->s->gstat, &k, &v);
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
    return put(t, t->s->gstat, "gstat", &k, &v, 0);
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
    return put(t, t->s->expiry, "expiry", &k, &v, 0);
}

int mic_store_expiry_del(mic_txn *t, int64_t due, uint64_t seq)
{
    uint8_t kb[16];
    MDB_val k = {16, kb};
    int rc;

    put_u64(kb, (uint64_t)due);
    put_u64(kb + 8, seq);
    rc = mdb_del(t->txn, t->s->expiry, &k, NULL);
    return rc == MDB_NOTFOUND ? MIC_OK : from_mdb(rc);
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
    return put(t, t->s->expiry, "expiry", &k, &v, 0);
}

int mic_store_expiry_first(mic_txn *t, struct mic_expiry *e)
{
    MDB_cursor *c;
    MDB_val k, v;
    int rc;

    if ((rc = mdb_cursor_open(t->txn, t->s->expiry, &c)))
        return from_mdb(rc);
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
    return from_mdb(rc);
}

int mic_store_expiry_count(mic_txn *t, uint64_t *n)
{
    return entries(t, t->s->expiry, n);
}

int mic_store_log_del(mic_txn *t, uint64_t seq)
{
    uint8_t kb[8];
    MDB_val k = {8, kb};

    put_u64(kb, seq);
    return from_mdb(mdb_del(t->txn, t->s->log, &k, NULL));
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
    return rc == MDB_NOTFOUND ? MIC_OK : from_mdb(rc);
}

int mic_store_id_del(mic_txn *t, const char *id, size_t idlen)
{
    MDB_val k = {idlen, (void *)id};
    int rc = mdb_del(t->txn, t->s->ids, &k, NULL);

    return rc == MDB_NOTFOUND ? MIC_OK : from_mdb(rc);
}

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

static int migrate_1_to_2(mic_store *s, MDB_txn *txn)
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
        if ((rc = next_ordinal(txn, s->meta, &ord)))
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
        aq_key(kb, get_u32(aq[i].k), ord, get_u64(aq[i].k + 4 + MIC_AKEY_LEN), get_u64(aq[i].v));
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
        if (rc == 0 && rec_decode_old(get_u64(lk), &lv, &r) == MIC_OK && r.has_agg) {
            if ((rc = mig_ordinal(txn, s, r.akey, &d.ord)))
                break;
            d.versioned = r.has_version;
            d.k1 = r.has_version ? r.version : (uint64_t)r.created_at_us;
        } else if (rc && rc != MDB_NOTFOUND) {
            break;
        }
        nv.mv_size = dlv_encode(vb, &d);
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
        if (rec_decode_old(seq, &v, &r) != MIC_OK) {
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
        rec_encode(buf, &r);
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
    return from_mdb(rc);
}

/* Run the pass to its end if one is under way (meta "crc_next"), growing
 * the map when a transaction needs it. */
static int migrate_log(mic_store *s)
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

/* ---- Replay runs ---- */

int mic_store_run_get(mic_txn *t, const char *id, size_t len, const void **val,
                      size_t *vlen)
{
    MDB_val k = {len, (void *)id}, v;
    int rc = get(t, t->s->runs, &k, &v);

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

    return put(t, t->s->runs, "runs", &k, &v, 0);
}

int mic_store_run_del(mic_txn *t, const char *id, size_t len)
{
    MDB_val k = {len, (void *)id};

    return from_mdb(mdb_del(t->txn, t->s->runs, &k, NULL));
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
        return from_mdb(rc);
    for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0 && !stop;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT))
        stop = fn(arg, k.mv_data, k.mv_size, v.mv_data, v.mv_size);
    mdb_cursor_close(c);
    if (stop)
        return stop;
    return rc == MDB_NOTFOUND ? MIC_OK : from_mdb(rc);
}

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
    if (dlv_decode(v, &d) != MIC_OK) {
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
    ags_decode(v->mv_data, &a);
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

/* ---- Topics ---- */

#define TOPIC_REC 29

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
    int rc = get(t, t->s->topics, &k, &v);

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
    return put(t, t->s->topics, "topics", &k, &v, 0);
}

int mic_store_topic_del(mic_txn *t, const char *name, size_t len)
{
    MDB_val k = {len, (void *)name};
    int rc;

    if (fault_hook && (rc = fault_hook("topics")))
        return from_mdb(rc);
    return from_mdb(mdb_del(t->txn, t->s->topics, &k, NULL));
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
        return from_mdb(rc);
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
    return rc == MDB_NOTFOUND ? MIC_OK : from_mdb(rc);
}
