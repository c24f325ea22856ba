/* journal.h - the store's redo journal: one sequential write and one
 * fdatasync make a commit durable.
 *
 * LMDB runs with MDB_NOSYNC.  Its commits write their pages and meta page
 * into the OS cache through the functions below (the Makefile renames
 * LMDB's own pwrite, writev and lseek calls to them in a copy of
 * liblmdb.a), which
 * also copy every byte written to data.mdb into the commit's journal
 * record.  mic_jnl_flush appends the sealed records to the active journal
 * file in one write and fdatasyncs that file alone: the commit is then on
 * disk, whatever of data.mdb the kernel has or has not written back.  A
 * checkpoint (one fdatasync of data.mdb, in a thread of its own) frees a
 * journal file; the two files take turns.  After a crash or a power loss
 * mic_jnl_recover rewrites, before LMDB opens data.mdb, every page the
 * journal holds, in commit order, and discards a meta page newer than the
 * last durable commit.  The file format is in proto/store-format.md
 * ("Journal").
 *
 * Why this is safe with LMDB's page reuse: a commit only overwrites pages
 * that the last two commits before it no longer use, so the writer may run
 * one commit ahead of the last durable one (mic_jnl_begin enforces it) and
 * a commit that never reached the journal only wrote pages the durable
 * state does not use.
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
 * record is not yet durable, flushing in this thread if needed, and that
 * the journal has room for the records not yet durable and 1 MiB more
 * (written ahead after the active file's end, or after the other file's
 * header).  Returns MIC_OK, MIC_ENOSPC (the filesystem is full: nothing
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
