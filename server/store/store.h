/* store.h - the LMDB store: the environment, transactions, durability and
 * meta (store.c); the event log's sub-databases are log.h's, the catalog
 * catalog.h's, the delivery indexes dlv.h's, --verify verify.h's.  Only
 * server/store/ calls mdb_* (tests/check-layers.sh rule 8).
 *
 * Write transactions are opened by the writer thread only (engine/writer.c); read
 * transactions may be opened by any thread.  The on-disk format is
 * described in proto/store-format.md; bump MIC_STORE_FORMAT when it changes.
 *
 * Conventions for every function below (a function says so where it
 * differs):
 *   - returns MIC_OK; a getter, seek or "first" returns MIC_ENOTFOUND when
 *     there is no such key; a put returns MIC_ENOSPC when the map (or the
 *     disk) is full, after which the writer aborts the batch; MIC_ENOMEM;
 *     MIC_EIO for any other LMDB failure or a record that does not decode
 *     (logged); a read of a log record that fails its checksum (or does
 *     not decode) answers MIC_ECORRUPT, and is reported once per read: a
 *     log line naming the seq, mic_store_corrupt_reads, and the seq for
 *     the client's error (err.h, mic_err_corrupt_note).  Its bytes are
 *     never handed out;
 *   - a delete of an absent key returns MIC_OK unless it says
 *     MIC_ENOTFOUND;
 *   - a pointer handed out (a record's json, a run record, a group's
 *     config) is borrowed from LMDB: in a read transaction, valid until
 *     it ends; in a write transaction, only until the next write of any
 *     kind in it (LMDB may spill dirty pages to make room, or copy a
 *     page on write, wherever the write lands), and until it ends at the
 *     latest; copy it before.  Structs filled in (struct mic_dlv, mic_ags, ...) are
 *     the caller's copies;
 *   - an iterator (_each, _scan) calls fn in key order and stops at the
 *     first nonzero return of fn, which it then returns. */
#ifndef MIC_STORE_H
#define MIC_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define MIC_STORE_FORMAT 4
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
    uint64_t ordinal;              /* the aggregate's ordinal; 0 = not known
                                    * (never stored in the log: publish sets
                                    * it, readers look it up in aggs) */
    int64_t deliver_at_us;         /* no group hands it out before; 0 = none */
    uint64_t rank;                 /* not stored: a replay run's selection
                                    * order for mic_delivery_add, 0 = none */
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

#define MIC_AGG_NAME_MAX 256

/* What the store knows about one aggregate. */
struct mic_agg_rec {
    uint8_t versioned;   /* the aggregate carries versions */
    uint64_t baseline;   /* first version seen */
    uint64_t max_version; /* read: the last version in aggidx (not stored) */
    uint64_t events;      /* format 2 counted them; kept as read, not counted */
    uint64_t contig;      /* every version from baseline to here is stored or
                           * skipped (read: max_version when the record says
                           * "contiguous to the last version") */
    uint64_t contig_stored; /* read: as stored, 0 = contiguous to the last
                             * version (so an in-order version changes
                             * nothing in the record) */
    uint64_t ordinal;    /* assigned in publish order (mic_store_next_ordinal) */
    uint16_t tlen, ilen; /* aggregate_type and aggregate_id */
    char type[MIC_AGG_NAME_MAX + 1];
    char id[MIC_AGG_NAME_MAX + 1];
};

/* ---- Environment ---- */

/* Open (creating if needed) the store in 'dir' with 'map_size' bytes of map
 * that may grow up to 'map_max'.  A journal left by a crash is replayed
 * first (journal.h).  'nosync' runs without the journal and without any
 * fsync (the --durability none setting).  One process at a time may have
 * a store open.  Returns MIC_EVERSION for a store of another format
 * version, MIC_EBUSY when another process has it open, MIC_EIO for other
 * failures (logged). */
int mic_store_open(mic_store **out, const char *dir, uint64_t map_size,
                   uint64_t map_max, int nosync);
void mic_store_close(mic_store *s);

/* Size at which the journal of stores opened from now on switches files
 * (default 64 MiB; --journal-size). */
void mic_store_set_journal_size(uint64_t bytes);

/* The journal's figures into *st: MIC_OK, or MIC_ENOTFOUND for a store
 * without one (nosync). */
struct mic_jnl_stats;
int mic_store_journal_stats(mic_store *s, struct mic_jnl_stats *st);

/* Double the map (up to its limit).  Waits until no read transaction is
 * open.  Writer thread only, with no write transaction open.  Returns
 * MIC_ENOSPC when the map is already at its limit, or when the last
 * write transaction failed on a full filesystem (a bigger map would not
 * help). */
int mic_store_grow(mic_store *s);

/* Have fn(what, errno) called once, in the thread that saw it, when the
 * store can no longer make anything durable: a failed write or fdatasync
 * of the journal, a failed checkpoint fdatasync of data.mdb (journal.h),
 * LMDB's MDB_PANIC after a failed meta page write.  micd exits there
 * (fail-stop); without it the store stays failed and every later sync
 * and write transaction answers MIC_EIO.  Call before the store opens. */
void mic_store_on_fatal(void (*fn)(const char *what, int err));

/* Write a consistent, compacted copy of the store to 'fd': an LMDB
 * data.mdb as of one read transaction (every batch committed before the
 * call, none committed after it began), free pages left out and pages
 * renumbered (mdb_env_copyfd2 with MDB_CP_COMPACT).  A micd started on a
 * directory holding only that file as data.mdb serves that state.
 *
 * Blocks until the whole copy is written or fails (any thread but the
 * writer).  LMDB takes its own read transaction for the whole copy, which
 * pins every page it sees: under load the store's file may grow while a
 * copy runs.  It writes with write(2) from a thread of its own in which
 * SIGPIPE is blocked, so a pipe whose reader went away fails the copy
 * with EPIPE.  'fd' stays the caller's (never closed here); nothing else
 * is written to disk.  While a copy runs the map does not grow:
 * mic_store_grow answers MIC_ENOSPC at once (a write that needs more map
 * answers 507 until the copy ends) rather than wait for the copy with
 * every other read transaction queued behind it.
 *
 * Returns MIC_OK; MIC_ENOMEM; MIC_EIO for anything else, with LMDB's or
 * the system's error code in *oserr (EPIPE: the reader of 'fd' went away;
 * MDB_INCOMPATIBLE: LMDB refuses to compact a store with leaked pages).
 * *oserr is 0 on success. */
int mic_store_copy_fd(mic_store *s, int fd, int *oserr);

/* Current map size, bytes in use, and the growth limit. */
void mic_store_usage(mic_store *s, uint64_t *map_size, uint64_t *used,
                     uint64_t *map_max);

/* Name of topic 'id' (a read of the topics index); for fan-out. */

/* Test hook: called before every write with the sub-database's name; a
 * nonzero return (an MDB or errno code) makes that write fail with it. */
void mic_store_set_fault(int (*hook)(const char *dbname));

/* Test hook: called at every mic_store_sync; a nonzero return (an errno
 * code) makes that sync fail with it. */
void mic_store_set_sync_fault(int (*hook)(void));

/* ---- Transactions ---- */

/* Begin a read (write == 0) or write transaction. */
int mic_txn_begin(mic_store *s, int write, mic_txn **out);
/* Begin: a write transaction waits, when needed, until no more than one
 * commit is ahead of the journal (MIC_EIO once the journal failed;
 * MIC_ENOSPC when the filesystem has no room for its journal record:
 * nothing was written).
 * Commit and free: the commit is visible to new transactions but durable
 * only after the next mic_store_sync.  MIC_ENOSPC on a full disk (the map,
 * the filesystem, or the journal's room for the commit's record: nothing
 * of the transaction is committed, so a 507 stored nothing), MIC_EIO
 * on another failure (nothing of the transaction is committed), or when
 * the journal could not take the commit (it is then visible but can never
 * be made durable: the journal is failed and every later sync and write
 * transaction answers MIC_EIO). */
int mic_txn_commit(mic_txn *t);
/* Make every commit so far durable: one write of the journal file and one
 * fdatasync (nothing with nosync).  Returns MIC_OK, or MIC_EIO when the
 * write or sync failed now or before (logged): what was committed since
 * the last good sync may then be lost, so the caller must not report it
 * durable.  Never MIC_ENOSPC: each commit's journal room was kept before
 * it committed (journal.h, mic_jnl_begin).  Any thread, also during a
 * write transaction. */
int mic_store_sync(mic_store *s);
void mic_txn_abort(mic_txn *t);

/* ---- Meta ---- */

/* The highest seq in the log, 0 if empty. */
int mic_store_last_seq(mic_txn *t, uint64_t *seq);
/* Allocate the next topic id. */
int mic_store_next_topic_id(mic_txn *t, uint32_t *id);
/* Allocate the next aggregate ordinal (1, 2, ...: publish order, so the
 * aggregates a batch settles are neighbours in the per-group trees). */
int mic_store_next_ordinal(mic_txn *t, uint64_t *ord);
/* micd's clock reading the store vouches for (meta "clock", i64 µs): no
 * time written before the last commit is later.  _get: MIC_OK with *us
 * (0 when the store has none), or an error.  _put: MIC_OK or an error. */
int mic_store_clock_get(mic_txn *t, int64_t *us);
int mic_store_clock_put(mic_txn *t, int64_t us);

#endif
