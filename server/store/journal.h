/* journal.h - the store's redo journal: one sequential write and one
 * fdatasync make a commit durable.
 *
 * LMDB runs with MDB_NOSYNC.  Its commits write their pages and meta page
 * into the OS cache through the functions below (deps/lmdb/ renames
 * LMDB's own pwrite, writev and lseek calls to them in a copy of
 * liblmdb.a), which also copy every byte written to data.mdb into the
 * commit's journal record.  mic_jnl_flush appends the sealed records to
 * the active journal file in one write and fdatasyncs that file alone:
 * the commit is then on disk, whatever of data.mdb the kernel has or has
 * not written back.  A checkpoint (one fdatasync of data.mdb, in a thread
 * of its own) frees a journal file; the two files take turns.  After a
 * crash or a power loss mic_jnl_recover rewrites, before LMDB opens
 * data.mdb, every page the journal holds, in commit order, and discards a
 * meta page newer than the last durable commit.  The file format is in
 * proto/store-format.md ("Journal").
 *
 * What the journal assumes of LMDB.  None of this is LMDB's API: it holds
 * for the versions mic_jnl_lmdb_check accepts (0.9.24, Debian 12's), and
 * a store is not opened with another (lmdb_version_is_checked).  After
 * each item, the tests that fail when it stops holding (in
 * tests/unit/store/test_journal.c unless named otherwise; make fault-power
 * runs tests/fault/powercut.c and ioerr.c, make fault-full fullcut.c).
 *
 * (1) LMDB writes data.mdb only with pwrite, and with lseek(SEEK_SET) then
 *     writev, on the descriptor mdb_env_get_fd gives: a commit's pages and
 *     a spilling transaction's (mdb_page_flush), a commit's meta page.
 *     Those are the three calls renamed; deps/lmdb/README.md says why
 *     LMDB's other calls (write, ftruncate, msync, fdatasync ...) write
 *     nothing the journal must hold.  A commit that moved LMDB's txnid
 *     with nothing captured fails the journal (mic_jnl_seal).
 *     Tests: deps/lmdb/check.sh (a call left unrenamed, a new import);
 *     uncaptured_commit_fails_the_journal.
 * (2) The environment is opened with MDB_NOSYNC and without MDB_WRITEMAP
 *     (store.c).  MDB_NOSYNC: a commit does not fdatasync data.mdb (the
 *     journal's fdatasync makes it durable), and LMDB writes the meta page
 *     through the descriptor of (1), not through me_mfd, its O_DSYNC
 *     second descriptor of data.mdb.  No MDB_WRITEMAP: data.mdb is mapped
 *     read-only and nothing reaches it through the map or msync.
 *     Tests: without MDB_NOSYNC every seal finds no meta page, with
 *     MDB_WRITEMAP nothing captured, so every journaled commit answers
 *     MIC_EIO: files_switch_and_stay_bounded, pages_go_without_their_gap
 *     and every test here that commits.
 * (3) The meta pages are pages 0 and 1.  After LMDB 0.9's 16-byte page
 *     header each holds an MDB_meta: mm_magic 0xBEEFC0DE at byte 16,
 *     mm_last_pg at 136, mm_txnid at 144 (journal.c: META_MAGIC_OFF,
 *     META_LAST_PG_OFF, META_TXNID_OFF).  A commit writes its meta page
 *     from mm_mapsize (byte 32) to the end of MDB_meta, in one segment
 *     that holds mm_last_pg and mm_txnid; recovery bounds a record's other
 *     segments by that mm_last_pg (rec_check).
 *     Tests: every open (mic_jnl_open reads both txnids); the power_loss_*
 *     tests, recovery_replays_records_past_the_header and make fault-power
 *     (recovery checks the replayed meta page; a wrong mm_last_pg refuses
 *     good records); recovery_bounds_segments (a segment past mm_last_pg
 *     must be refused).
 * (4) A commit of txnid T writes meta page T & 1, and LMDB opens the state
 *     of the meta page with the higher txnid.  Recovery checks that page
 *     T & 1 of the last commit replayed holds T and the other page no
 *     higher txnid (recover_check_meta).
 *     Tests: power_loss_after_commit, power_loss_in_journal_write,
 *     power_loss_with_commits_ahead, recovery_replays_records_past_the_header.
 * (5) A branch or leaf page starts with LMDB 0.9's header: u64 pgno, u16
 *     pad, u16 flags at byte 10 (P_BRANCH 0x01, P_LEAF 0x02, P_OVERFLOW
 *     0x04, P_META 0x08, P_LEAF2 0x20, P_SUBP 0x40), u16 lower at 12, u16
 *     upper at 14, 16 bytes in all; LMDB never reads the bytes between
 *     lower and upper, which the record leaves out (page_gap).
 *     Tests: pages_go_without_their_gap (the gap is found); the
 *     power_loss_* tests (a replay over torn pages that dropped bytes LMDB
 *     reads would not give a committed state).
 * (6) Commit T writes only pages that the states of commits T-1 and T-2
 *     do not use: LMDB reuses a page freed by commit F only when F is
 *     below the oldest snapshot in use, T-1 when no reader holds an older
 *     one (mdb_find_oldest).  So the writer may run one commit ahead of
 *     the last durable one (mic_jnl_begin lets it go no further), and a
 *     commit that never reached the journal only wrote pages that the
 *     durable state does not use.
 *     Tests: writer_stays_one_commit_ahead (made so that a writer let two
 *     commits ahead, or an LMDB reusing pages one commit sooner, leaves
 *     the durable state with pages a later commit overwrote).
 * (7) A page write LMDB sees fail (-1, or short) fails its commit before
 *     the meta page is written, so the commit changes nothing LMDB reads:
 *     the capture functions fail LMDB's write with ENOSPC when the journal
 *     has no room for it (capture_room, mic_jnl_begin).
 *     Tests: refused_commit_is_never_stored,
 *     switch_on_full_disk_keeps_acknowledged; make fault-power (ioerr's
 *     failed data.mdb writes) and make fault-full.
 *
 * Threads: the capture functions and mic_jnl_begin/seal/discard run in the
 * thread that holds LMDB's write transaction; mic_jnl_flush in any thread
 * (flushes are serialized); the checkpoint thread is the journal's own. */
#ifndef MIC_JOURNAL_H
#define MIC_JOURNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

typedef struct mic_jnl mic_jnl;

/* LMDB's pwrite and writev.  They write as the libc calls do and return
 * what they return; on a descriptor that belongs to an open journal's
 * data file they also capture what was written into the current record
 * (a capture that cannot allocate puts the journal in its failed state). */
ssize_t mic_jnl_pwrite(int fd, const void *buf, size_t n, off_t off);
ssize_t mic_jnl_writev(int fd, const struct iovec *iov, int cnt);
/* LMDB's lseek: as lseek(2), except that on a journaled data file a
 * SEEK_SET only records the position, where the next mic_jnl_writev
 * writes (with pwritev: the descriptor's offset does not move). */
off_t mic_jnl_lseek(int fd, off_t off, int whence);

/* Before LMDB opens a store: accept the LMDB version mdb_version() gives
 * only if the journal was written for it (the invariants above).  Returns
 * MIC_OK, or MIC_ELMDB (logged, one line naming the version and those
 * supported). */
int mic_jnl_lmdb_check(int major, int minor, int patch);

/* Before LMDB opens 'dir': take the store's lock (an exclusive flock of
 * dir/journal-0, created if missing) and replay the journal files of 'dir'
 * into data.mdb, then fdatasync it.  Sets *lock_fd to the locked
 * descriptor (the caller hands it to mic_jnl_open or mic_jnl_disable, or
 * closes it), *next_seq to the first record sequence number no journal
 * file there uses (1 for none) and *replayed to the number of records
 * rewritten.  Returns MIC_OK, MIC_EBUSY (another process has the store
 * open), MIC_EIO (a read, write or sync failed, or the replayed store does
 * not end at the journal's last commit: logged; *lock_fd is then -1), or
 * MIC_ENOMEM. */
int mic_jnl_recover(const char *dir, int *lock_fd, uint64_t *next_seq, uint64_t *replayed);

/* Start journaling the commits of an environment whose data.mdb is open
 * on 'data_fd' (LMDB's descriptor; it must stay open until mic_jnl_close)
 * and fully synced, page size 'psize'.  'lock_fd' is mic_jnl_recover's;
 * the journal owns it from here on, error or not.  'file_size' is the size
 * at which the journal switches files (a file grows past it when a
 * checkpoint is late).  Resets dir/journal-0 and dir/journal-1.  Returns
 * MIC_OK, MIC_EIO or MIC_ENOMEM. */
int mic_jnl_open(mic_jnl **out, const char *dir, int lock_fd, int data_fd,
                 unsigned psize, uint64_t file_size, uint64_t next_seq);

/* For a store opened without fsync (--durability none): empty both
 * journal files (after mic_jnl_recover), so that a later journaled open
 * does not replay them over newer writes.  'lock_fd' stays the caller's.
 * Returns MIC_OK or MIC_EIO. */
int mic_jnl_disable(const char *dir, int lock_fd);

/* Before a write transaction begins: make sure no more than one sealed
 * record is not yet durable (LMDB's reuse lag, invariant 6), flushing in
 * this thread if needed, and that the journal has room for the records
 * not yet durable and 1 MiB more (written ahead after the active file's
 * end, or after the other file's header).  Returns MIC_OK, MIC_ENOSPC (the filesystem is full: nothing
 * may be written now, nothing failed; a later call may succeed once room
 * is made) or MIC_EIO (the journal failed; nothing may be written).
 *
 * Room is kept, never assumed: while a transaction writes, a capture
 * whose record would outgrow the room written ahead makes the room first
 * or fails LMDB's write with ENOSPC, so that commit fails and changes
 * nothing (MIC_ENOSPC, 507: a refusal stores nothing).  A commit that
 * LMDB completed therefore always finds room at its flush. */
int mic_jnl_begin(mic_jnl *j);

/* After LMDB committed a transaction: 'txnid' is LMDB's last committed
 * txnid now (mdb_env_info's me_last_txnid).  The writes captured since
 * the last seal become the next record; a transaction that changed
 * nothing captured nothing and left 'txnid' as it was (no record).
 * Returns MIC_OK, or MIC_EIO when a capture failed, the commit wrote no
 * meta page, or 'txnid' advanced with nothing captured (LMDB wrote
 * through a call the journal does not see).  The journal is then failed:
 * the commit is in the OS cache but can never be made durable, so
 * nothing after it may be acknowledged. */
int mic_jnl_seal(mic_jnl *j, uint64_t txnid);

/* After a commit that failed: drop what was captured for it. */
void mic_jnl_discard(mic_jnl *j);

/* Write every sealed record and fdatasync the journal file.  Returns
 * MIC_OK when every record sealed before the call is durable, or MIC_EIO
 * when a write or sync failed now or before (sticky: after a failed fsync
 * the kernel may have dropped the pages, so nothing later can be
 * trusted).  Never MIC_ENOSPC: the room the records need was kept before
 * their commits (mic_jnl_begin); a filesystem that fails a write into
 * that room fails the journal. */
int mic_jnl_flush(mic_jnl *j);

/* Have fn(what, errno) called once, in the thread that saw it, when a
 * journal of this process fails (a write or fdatasync of a journal file,
 * the checkpoint's fdatasync of data.mdb, a capture without memory): micd
 * exits there (fail-stop, see server/main.c).  NULL: none (the journal
 * stays failed and every later call answers MIC_EIO).  Any thread. */
void mic_jnl_on_fail(void (*fn)(const char *what, int err));

/* Flush, checkpoint (fdatasync data.mdb) and reset both files so that the
 * next open replays nothing; then free.  Call after the last transaction,
 * before the environment closes.  A failed journal is closed without the
 * checkpoint and the reset (the next open replays what is durable). */
void mic_jnl_close(mic_jnl *j);

/* Figures for /metrics and the benchmarks. */
struct mic_jnl_stats {
    uint64_t flushes, records, bytes, checkpoints, rotations, late_checkpoints;
};
void mic_jnl_stats(mic_jnl *j, struct mic_jnl_stats *st);

/* Tests only: hooks called with what a power loss could keep or lose.
 * on_data: every captured write to data.mdb (in the committing thread);
 * on_checkpoint: phase 0 just before a checkpoint's fdatasync, 1 after it
 * succeeded; on_written: a flush wrote 'len' bytes at 'off' of journal
 * file 'file' and is about to fdatasync it (the hook may _exit to model a
 * crash before the sync); fail_sync: consulted instead of the flush's
 * fdatasync, a nonzero return (an errno code) is its failure; no_room:
 * consulted before zeros are written ahead in journal file 'file', a
 * nonzero return (ENOSPC) fails that write as a full filesystem would;
 * skip_capture: a nonzero return makes the capture of one LMDB write
 * record nothing (as if LMDB wrote through a call that is not renamed).
 * NULL members are not called. */
struct mic_jnl_hooks {
    void (*on_data)(off_t off, const void *buf, size_t len);
    void (*on_checkpoint)(int phase);
    void (*on_written)(int file, off_t off, size_t len);
    int (*fail_sync)(void);
    int (*no_room)(int file);
    int (*skip_capture)(void);
};
void mic_jnl_set_hooks(const struct mic_jnl_hooks *h);

#endif
