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
#include "store_int.h"

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

int (*store_fault_hook)(const char *dbname);
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
    store_fault_hook = hook;
}

/* ---- Encodings ---- */





int store_from_mdb(int rc)
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
    return store_from_mdb(rc);
}

void mic_store_on_fatal(void (*fn)(const char *what, int err))
{
    atomic_store(&fatal_hook, fn);
    mic_jnl_on_fail(fn);
}

int store_put(mic_txn *t, MDB_dbi dbi, const char *name, MDB_val *k,
               MDB_val *v, unsigned flags)
{
    int rc;

    if (store_fault_hook && (rc = store_fault_hook(name)))
        return wrc(t, rc);
    return wrc(t, mdb_put(t->txn, dbi, k, v, flags));
}

/* store_put() through the write txn's cursor '*c' on 'dbi' (opened on first use,
 * closed with the txn). */
int store_cput(mic_txn *t, MDB_cursor **c, MDB_dbi dbi, const char *name, MDB_val *k,
                MDB_val *v, unsigned flags)
{
    int rc;

    if (store_fault_hook && (rc = store_fault_hook(name)))
        return wrc(t, rc);
    if (!*c && (rc = mdb_cursor_open(t->txn, dbi, c)))
        return store_from_mdb(rc);
    return wrc(t, mdb_cursor_put(*c, k, v, flags));
}

/* Entries of 'dbi' into *n. */
int store_entries(mic_txn *t, MDB_dbi dbi, uint64_t *n)
{
    MDB_stat st;
    int rc = mdb_stat(t->txn, dbi, &st);

    if (rc)
        return store_from_mdb(rc);
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

int store_get(mic_txn *t, MDB_dbi dbi, MDB_val *k, MDB_val *v)
{
    return store_from_mdb(mdb_get(t->txn, dbi, k, v));
}



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
            if ((rc = store_migrate_1_to_2(s, txn)))
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
    return store_migrate_log(s);
fail:
    mic_txn_abort(t);
    return store_from_mdb(rc);
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
    return store_from_mdb(rc);
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
        return store_from_mdb(rc);
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
    return store_from_mdb(rc);
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
        return store_from_mdb(rc);
    rc = mdb_cursor_get(c, &k, &v, MDB_LAST);
    mdb_cursor_close(c);
    if (rc == MDB_NOTFOUND) {
        *seq = 0;
        return MIC_OK;
    }
    if (rc)
        return store_from_mdb(rc);
    *seq = get_u64(k.mv_data);
    return MIC_OK;
}

int mic_store_next_topic_id(mic_txn *t, uint32_t *id)
{
    return store_next_id(t, "next_topic_id", id);
}

int store_next_ordinal(MDB_txn *txn, MDB_dbi meta, uint64_t *ord)
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

    if (store_fault_hook && (rc = store_fault_hook("meta")))
        return store_from_mdb(rc);
    return store_from_mdb(store_next_ordinal(t->txn, t->s->meta, ord));
}

/* ---- Counters in meta ---- */

int store_next_id(mic_txn *t, const char *name, uint32_t *id)
{
    MDB_val k = {strlen(name), (void *)name}, v;
    uint8_t buf[4];
    uint32_t next = 1;
    int rc = store_get(t, t->s->meta, &k, &v);

    if (rc == MIC_OK && v.mv_size == 4)
        next = get_u32(v.mv_data);
    else if (rc != MIC_ENOTFOUND && rc != MIC_OK)
        return rc;
    put_u32(buf, next + 1);
    v.mv_size = 4;
    v.mv_data = buf;
    if ((rc = store_put(t, t->s->meta, "meta", &k, &v, 0)))
        return rc;
    *id = next;
    return MIC_OK;
}

/* ---- micd's clock in meta ---- */

int mic_store_clock_get(mic_txn *t, int64_t *us)
{
    MDB_val k = {5, "clock"}, v;
    int rc = store_get(t, t->s->meta, &k, &v);

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
    return store_put(t, t->s->meta, "meta", &k, &v, 0);
}

