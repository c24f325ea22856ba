/* store.h - the LMDB store: environment, sub-databases, key and record
 * encodings.  store.c is the only file that calls mdb_*.
 *
 * Write transactions are opened by the writer thread only (writer.c); read
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
 *     config) is borrowed from LMDB: valid until the transaction ends or
 *     the next write to that sub-database in it, whichever comes first;
 *     copy it before.  Structs filled in (struct mic_dlv, mic_ags, ...) are
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

/* ---- Log ---- */

/* Append 'r' (record format 3: with its CRC-32C). */
int mic_store_log_put(mic_txn *t, const struct mic_rec *r);
/* Fill 'r' for 'seq'; r->json is borrowed.  MIC_ENOTFOUND if absent,
 * MIC_ECORRUPT if the record fails its checksum or does not decode
 * (reported: see the conventions above). */
int mic_store_log_get(mic_txn *t, uint64_t seq, struct mic_rec *r);
/* Decode the log record 'val' ('len' bytes, stored under 'seq') into 'r'
 * (r->json points into 'val'), with no LMDB and no side effect: for the
 * store's readers, --verify and the fuzz target.  Returns MIC_OK,
 * MIC_ECORRUPT when its CRC-32C (the last 4 bytes) does not match the seq
 * and the bytes before it, or MIC_EIO when it is too short to hold a
 * header and a CRC, or its CRC matches but its record format is not 3. */
int mic_rec_decode(uint64_t seq, const void *val, size_t len, struct mic_rec *r);
/* Reads of a log record that failed mic_rec_decode since the process
 * started (GET /metrics: mic_store_corrupt_records_total). */
uint64_t mic_store_corrupt_reads(void);
/* Number of records in the log. */
int mic_store_log_count(mic_txn *t, uint64_t *n);

/* ---- Event ids ---- */

int mic_store_id_get(mic_txn *t, const char *id, size_t idlen, uint64_t *seq,
                     uint8_t digest[MIC_DIGEST_LEN]);
int mic_store_id_put(mic_txn *t, const char *id, size_t idlen, uint64_t seq,
                     const uint8_t digest[MIC_DIGEST_LEN]);

/* ---- Time index: (topic_id, created_at, event_id) -> seq ---- */

int mic_store_time_put(mic_txn *t, uint32_t topic_id, int64_t created_at_us,
                       const char *id, size_t idlen, uint64_t seq);
/* MIC_OK if the topic has at least one event, MIC_ENOTFOUND if none. */
int mic_store_time_any(mic_txn *t, uint32_t topic_id);
/* Call fn for up to 'max' entries of topic 'topic_id' in (created_at,
 * event_id) order from position (from_us, from_id) -- exclusive of it when
 * 'exclusive' -- while created_at <= to_us.  fn gets the entry's
 * created_at, event_id and seq; a nonzero return stops the walk and is
 * returned. */
int mic_store_time_scan(mic_txn *t, uint32_t topic_id, int64_t from_us,
                        const char *from_id, size_t from_idlen, int exclusive,
                        int64_t to_us, int max,
                        int (*fn)(void *arg, int64_t created_us, const char *id,
                                  size_t idlen, uint64_t seq),
                        void *arg);

/* ---- Aggregates ---- */

void mic_store_akey(const char *type, size_t tlen, const char *id,
                    size_t ilen, uint8_t akey[MIC_AKEY_LEN]);
int mic_store_agg_get(mic_txn *t, const uint8_t akey[MIC_AKEY_LEN],
                      struct mic_agg_rec *a);
int mic_store_agg_put(mic_txn *t, const uint8_t akey[MIC_AKEY_LEN],
                      const struct mic_agg_rec *a);
/* The seq stored at version 'v' of a versioned aggregate. */
int mic_store_aggidx_get_version(mic_txn *t, const uint8_t akey[MIC_AKEY_LEN],
                                 uint64_t v, uint64_t *seq);
/* Index record 'r' (which has an aggregate) under its order key: the
 * version, or (created_at, seq) for an unversioned aggregate. */
int mic_store_aggidx_put(mic_txn *t, const struct mic_rec *r);

/* ---- Groups ---- */

/* A group's stored record: its id, backfill progress and configuration
 * (JSON text owned by group.c; borrowed from LMDB on get). */
struct mic_group_rec {
    uint32_t gid;
    uint8_t backfilling;     /* deliveries for older events still being made */
    uint64_t backfill_next;  /* next log seq to look at */
    uint64_t backfill_end;   /* last log seq to look at */
    const char *config;
    size_t config_len;
};

int mic_store_next_group_id(mic_txn *t, uint32_t *gid);
int mic_store_group_get(mic_txn *t, const char *name, size_t len,
                        struct mic_group_rec *g);
int mic_store_group_put(mic_txn *t, const char *name, size_t len,
                        const struct mic_group_rec *g);
int mic_store_group_del(mic_txn *t, const char *name, size_t len);
int mic_store_group_each(mic_txn *t,
                         int (*fn)(void *arg, const char *name, size_t len,
                                   const struct mic_group_rec *g),
                         void *arg);

/* Ids of deleted groups whose keys are still being removed. */
int mic_store_drop_put(mic_txn *t, uint32_t gid);
/* The first dropped group id, MIC_ENOTFOUND if none. */
int mic_store_drop_first(mic_txn *t, uint32_t *gid);
/* Delete up to 'budget' keys of group 'gid' (deliveries, ready set, DLQ);
 * when none are left, forget the drop and set *finished. */
int mic_store_drop_step(mic_txn *t, uint32_t gid, int budget, int *finished);

/* ---- Deliveries ----
 *
 * The functions of this section and of "Ordered groups" and "Per-group
 * figures" below are the raw indexes of the delivery engine: only
 * server/engine/delivery.c calls them (make check fails otherwise), and they keep
 * no rule of their own -- the engine keeps the invariants between them. */

enum mic_dlv_state {
    MIC_DLV_PENDING = 1,
    MIC_DLV_PROCESSING = 2,
    MIC_DLV_DISPATCHED = 3,
    MIC_DLV_DLQ = 4,
    MIC_DLV_SKIPPED = 5,
};

#define MIC_TOKEN_LEN 16
#define MIC_WORKER_MAX 64
#define MIC_ERROR_MAX 1024

/* The state of one event in one group. */
struct mic_dlv {
    uint8_t state;             /* enum mic_dlv_state */
    uint8_t priority;
    uint8_t handed;            /* claimed at least once (kept across a requeue) */
    uint8_t versioned;         /* ord != 0: the aggregate carries versions */
    uint32_t attempts;         /* claims so far */
    int64_t created_at;        /* the event's, for the oldest-unhandled index */
    int64_t not_before;        /* PENDING: claimable from (µs), 0 = now */
    int64_t lease_expires;     /* PROCESSING: lease end (µs) */
    int64_t terminal_at;       /* DISPATCHED / DLQ / SKIPPED since (µs) */
    uint64_t ord;              /* ordered groups: the aggregate's ordinal, 0 = none */
    uint64_t k1;               /* ordered groups: order key (version or created_at) */
    uint64_t rank;             /* replay groups: the selection order, 0 = none
                                * (the ready set then goes by seq) */
    uint8_t token[MIC_TOKEN_LEN]; /* the last lease granted */
    uint8_t worker_len;
    char worker[MIC_WORKER_MAX + 1];
    uint16_t error_len;
    char last_error[MIC_ERROR_MAX + 1];
};

/* Fill 'd' (a copy, NUL-terminated strings).  MIC_ENOTFOUND if absent,
 * MIC_EIO for a record that does not decode. */
int mic_store_dlv_get(mic_txn *t, uint32_t gid, uint64_t seq, struct mic_dlv *d);
/* Write 'd' (one state of the three times is stored: not_before when
 * pending, lease_expires when processing, terminal_at when terminal). */
int mic_store_dlv_put(mic_txn *t, uint32_t gid, uint64_t seq,
                      const struct mic_dlv *d);
int mic_store_dlv_del(mic_txn *t, uint32_t gid, uint64_t seq);
/* Call fn with the state of every delivery of group 'gid', in seq order
 * (a walk over one group: tests and the migration only). */
int mic_store_dlv_each(mic_txn *t, uint32_t gid,
                       int (*fn)(void *arg, uint64_t seq, int state), void *arg);

/* The ready set of a group: (priority desc, rank or seq asc).  A delivery
 * with a rank (rank != 0) sorts by it and carries its seq in the entry.
 * _del answers MIC_ENOTFOUND when the entry is absent. */
int mic_store_ready_put(mic_txn *t, uint32_t gid, uint8_t prio, uint64_t rank, uint64_t seq);
int mic_store_ready_del(mic_txn *t, uint32_t gid, uint8_t prio, uint64_t rank, uint64_t seq);
/* Remove up to 'max' entries from the head of the ready set, storing their
 * seqs in order; *n receives how many. */
int mic_store_ready_pop(mic_txn *t, uint32_t gid, uint64_t *seqs, int max,
                        int *n);

/* Deadlines, all groups in one index: (due µs, gid, seq) -> kind. */
enum mic_timer_kind { MIC_TIMER_RETRY = 1, MIC_TIMER_LEASE = 2 };
int mic_store_timer_put(mic_txn *t, int64_t due, uint32_t gid, uint64_t seq,
                        uint8_t kind);
/* MIC_OK also when the timer is not there. */
int mic_store_timer_del(mic_txn *t, int64_t due, uint32_t gid, uint64_t seq);
/* The earliest deadline; MIC_ENOTFOUND if there is none. */
int mic_store_timer_first(mic_txn *t, int64_t *due, uint32_t *gid,
                          uint64_t *seq, uint8_t *kind);

/* Dead letters of a group, by seq (_del: MIC_OK also when absent). */
int mic_store_dlq_put(mic_txn *t, uint32_t gid, uint64_t seq);
int mic_store_dlq_del(mic_txn *t, uint32_t gid, uint64_t seq);
/* Up to 'max' dead-lettered seqs greater than 'after', in order. */
int mic_store_dlq_page(mic_txn *t, uint32_t gid, uint64_t after,
                       uint64_t *seqs, int max, int *n);

/* The unhandled index (gid, created_at, seq) and the poison index (same
 * key): 'on' puts the entry, else deletes it (MIC_OK when absent). */
int mic_store_unh_set(mic_txn *t, uint32_t gid, int64_t created_at, uint64_t seq, int on);
int mic_store_poison_set(mic_txn *t, uint32_t gid, int64_t created_at, uint64_t seq, int on);
/* The first entry of group 'gid' in the unhandled (poison == 0) or poison
 * index.  MIC_ENOTFOUND if none. */
int mic_store_oldest(mic_txn *t, uint32_t gid, int poison, int64_t *created_at,
                     uint64_t *seq);
/* Up to 'max' unhandled deliveries of 'gid' from the oldest. */
int mic_store_oldest_page(mic_txn *t, uint32_t gid, uint64_t *seqs, int max, int *n);

/* ---- Log scans ---- */

/* Up to 'max' records with seq in [from, to], in seq order; calls fn for
 * each (r->json borrowed).  Stops early when fn returns nonzero.  A record
 * that fails its checksum is reported (see the conventions above), counts
 * towards 'max', and is passed over: fn never sees it, and the scan (a
 * backfill, a retention sweep: background work of the writer) goes on, so
 * one bad record cannot fail every batch. */
int mic_store_log_scan(mic_txn *t, uint64_t from, uint64_t to, int max,
                       int (*fn)(void *arg, const struct mic_rec *r),
                       void *arg, uint64_t *next);

/* Call fn with the seq of every event of aggregate 'akey', in aggregate
 * order, starting after order key (k1, k2) (0, 0 = from the first). */
int mic_store_aggidx_each(mic_txn *t, const uint8_t akey[MIC_AKEY_LEN],
                          int (*fn)(void *arg, uint64_t seq), void *arg);

/* Versions skipped by an admin: (akey, version). */
int mic_store_gapskip_put(mic_txn *t, const uint8_t akey[MIC_AKEY_LEN], uint64_t v);
int mic_store_gapskip_get(mic_txn *t, const uint8_t akey[MIC_AKEY_LEN], uint64_t v);

/* ---- Ordered groups: per-aggregate queues ----
 *
 * An aggregate's queue in an ordered group is the range (gid, ord, ...) of
 * 'aq', keyed by the aggregate's ordinal so that aggregates published
 * together are neighbours: (gid, ord, k1, seq) with k1 the version or the
 * created_at. */

int mic_store_aq_put(mic_txn *t, uint32_t gid, uint64_t ord, uint64_t k1, uint64_t seq);
/* MIC_ENOTFOUND if the entry is not there. */
int mic_store_aq_del(mic_txn *t, uint32_t gid, uint64_t ord, uint64_t k1, uint64_t seq);
/* MIC_OK if the entry is in the queue, MIC_ENOTFOUND if not. */
int mic_store_aq_has(mic_txn *t, uint32_t gid, uint64_t ord, uint64_t k1, uint64_t seq);
/* The first entry whose k1 is greater than 'after' (0: the first entry);
 * MIC_ENOTFOUND if there is none. */
int mic_store_aq_first(mic_txn *t, uint32_t gid, uint64_t ord, uint64_t after,
                       uint64_t *k1, uint64_t *seq);
/* The first two entries whose k1 is greater than 'after' (k1[i], seq[i]
 * for i < *n, *n being 1 or 2); MIC_ENOTFOUND if there is none. */
int mic_store_aq_first2(mic_txn *t, uint32_t gid, uint64_t ord, uint64_t after,
                        uint64_t k1[2], uint64_t seq[2], int *n);
/* Delete every entry whose k1 is at most 'upto'; *n (may be NULL) counts
 * them. */
int mic_store_aq_purge(mic_txn *t, uint32_t gid, uint64_t ord, uint64_t upto, int *n);

/* The state of an aggregate in an ordered group. */
struct mic_ags {
    uint64_t active;      /* seq of the head handed to workers, 0 = none */
    uint64_t missing;     /* parked: the version it waits for, 0 = none */
    int64_t since;        /* the head (or the parking) dates from (µs) */
    uint64_t waiting;     /* entries of the queue not yet released, head included */
    uint64_t pos;         /* versioned: entries with k1 <= pos are released
                           * (left in 'aq' until the queue empties) */
    uint8_t akey[MIC_AKEY_LEN];
};

int mic_store_ags_get(mic_txn *t, uint32_t gid, uint64_t ord, struct mic_ags *a);
int mic_store_ags_put(mic_txn *t, uint32_t gid, uint64_t ord, const struct mic_ags *a);
/* MIC_OK also when absent. */
int mic_store_ags_del(mic_txn *t, uint32_t gid, uint64_t ord);
/* Call fn for each aggregate with a queue in group 'gid', in ordinal
 * order, from the first ordinal greater than 'after'; stops when fn
 * returns nonzero and returns that value. */
int mic_store_ags_each(mic_txn *t, uint32_t gid, uint64_t after,
                       int (*fn)(void *arg, uint64_t ord, const struct mic_ags *a),
                       void *arg);

/* ---- Per-group figures: gid -> u64[MIC_GSTAT_N] ----
 * Kept by the delivery engine in the writer's memory and written once per
 * group and commit; the store only reads and writes the record. */
enum mic_gstat {
    MIC_GSTAT_GAP_PARKED = 0,  /* aggregates parked on a missing version */
    MIC_GSTAT_PENDING,         /* non-terminal, not leased */
    MIC_GSTAT_PROCESSING,      /* leased */
    MIC_GSTAT_DLQ,
    MIC_GSTAT_DISPATCHED,      /* total ever dispatched */
    MIC_GSTAT_REDELIVERIES,    /* total claims after a delivery's first */
    MIC_GSTAT_BLOCKED,         /* aggregates blocked by their head */
    MIC_GSTAT_SKIPPED,         /* total ever skipped */
    MIC_GSTAT_N = 8,
};
/* All counters of 'gid' (zeros if none). */
int mic_store_gstat_get(mic_txn *t, uint32_t gid, uint64_t out[MIC_GSTAT_N]);
int mic_store_gstat_put(mic_txn *t, uint32_t gid, const uint64_t in[MIC_GSTAT_N]);

/* Per-topic stored-event counts (retention decrements). */
int mic_store_topic_events_add(mic_txn *t, uint32_t topic_id, int64_t delta);
int mic_store_topic_events(mic_txn *t, uint32_t topic_id, uint64_t *n);

/* ---- Retention: (due µs, seq) -> kind, then the kind's fields ---- */

/* 1: remove event 'seq' (looked at again: a group still needed it);
 * 2: forget the id of removed event 'seq';
 * 3: remove the events of topic 'topic_id' with seq in [seq, last_seq]
 *    (one entry per topic and commit; each one when its own received_at +
 *    retention_s has passed; events of other topics in between are not
 *    its business). */
enum mic_expiry_kind { MIC_EXPIRE_EVENT = 1, MIC_EXPIRE_ID = 2, MIC_EXPIRE_RANGE = 3 };
struct mic_expiry {
    int64_t due;
    uint64_t seq;
    uint8_t kind;
    char id[128 + 1];      /* kinds 1 and 2: the event id, NUL-terminated */
    size_t idlen;
    uint32_t topic_id;     /* kind 3 */
    uint64_t last_seq;     /* kind 3 */
    uint64_t retention_s;  /* kind 3: the topic's retention when published */
};
/* Kinds 1 and 2.  Returns MIC_OK, MIC_EINVAL (idlen > 128) or a store
 * error. */
int mic_store_expiry_put(mic_txn *t, int64_t due, uint64_t seq, uint8_t kind,
                         const char *id, size_t idlen);
/* Kind 3 (e->kind, e->id are not read).  Returns MIC_OK or a store error. */
int mic_store_expiry_put_range(mic_txn *t, const struct mic_expiry *e);
/* MIC_OK also when there is no such entry. */
int mic_store_expiry_del(mic_txn *t, int64_t due, uint64_t seq);
/* The earliest entry into *e.  Returns MIC_OK, MIC_ENOTFOUND (none),
 * MIC_EIO (an entry of unknown shape) or a store error. */
int mic_store_expiry_first(mic_txn *t, struct mic_expiry *e);
/* The number of entries (for figures and tests).  Returns MIC_OK or a
 * store error. */
int mic_store_expiry_count(mic_txn *t, uint64_t *n);
int mic_store_log_del(mic_txn *t, uint64_t seq);
int mic_store_time_del(mic_txn *t, uint32_t topic_id, int64_t created_at_us,
                       const char *id, size_t idlen);
int mic_store_id_del(mic_txn *t, const char *id, size_t idlen);

/* ---- Replay runs: run_id -> record (replay.c owns its layout) ---- */

int mic_store_run_get(mic_txn *t, const char *id, size_t len, const void **val,
                      size_t *vlen);
int mic_store_run_put(mic_txn *t, const char *id, size_t len, const void *val,
                      size_t vlen);
int mic_store_run_del(mic_txn *t, const char *id, size_t len);
/* Call fn for every run in id order; stops when fn returns nonzero. */
int mic_store_run_each(mic_txn *t,
                       int (*fn)(void *arg, const char *id, size_t len,
                                 const void *val, size_t vlen),
                       void *arg);

/* ---- Verification (micd --verify) ---- */

struct mic_verify_report {
    uint64_t records;     /* log records read */
    uint64_t bad_records; /* of them: failing their checksum or not decoding,
                           * plus delivery records that do not decode */
    uint64_t entries;     /* index entries looked at */
    uint64_t dangling;    /* of them: pointing to no log record or no
                           * delivery */
    uint64_t replayed;    /* journal records replayed before the walk */
};

/* Walk the store in 'dir' (see proto/store-format.md, "Verification"):
 * every log record (checksum and decode), and every index entry that maps
 * to a seq (ids, time, dlv, ready, dlq, aq, ags, unh, poison, timers).
 * Writes one line per problem to 'out', then fills *rep (the caller prints
 * the summary).  Takes the store's lock and replays a journal a crash left
 * (as an open would: the only write it makes), then reads everything in
 * one read-only transaction.  Returns MIC_OK when the walk finished
 * (clean or not: see *rep), MIC_ENOTFOUND (no data.mdb in 'dir'),
 * MIC_EBUSY (a micd has the store open), MIC_EVERSION (not a store of
 * format 4, or its migration is unfinished: open it with micd first), or
 * MIC_EIO (logged). */
int mic_store_verify(const char *dir, FILE *out, struct mic_verify_report *rep);

/* ---- Topics ---- */

int mic_store_topic_get(mic_txn *t, const char *name, size_t len,
                        struct mic_topic_rec *tr);
int mic_store_topic_put(mic_txn *t, const char *name, size_t len,
                        const struct mic_topic_rec *tr);
int mic_store_topic_del(mic_txn *t, const char *name, size_t len);
/* Call fn for every topic in name order; stops early if fn returns
 * nonzero and returns that value. */
int mic_store_topic_each(mic_txn *t,
                         int (*fn)(void *arg, const char *name, size_t len,
                                   const struct mic_topic_rec *tr),
                         void *arg);

#endif
