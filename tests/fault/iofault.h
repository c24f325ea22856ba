/* iofault.h - the record format of iofault.so's log (tests/fault/iofault.c)
 * and a reader for it, shared by the programs that replay a recording
 * (tests/fault/powercut.c, tests/fault/ioerr.c).
 *
 * The log is a sequence of records, each a fixed 64-byte header in the
 * host's byte order followed by 'datalen' bytes and zeros up to a multiple
 * of 8 (the next header stays aligned).  Records are written in
 * the order of their 'seq' (0, 1, 2, ...: one counter and one mutex in the
 * interposer), and 't_ns' (CLOCK_MONOTONIC, the clock every process of
 * the machine shares) never decreases along it, so a time seen by another
 * process can be placed between two records.
 *
 *   IOF_NAME    file index 'file' is the store file named by the data (its
 *               path relative to the store directory, no NUL); written
 *               before the first record about that file
 *   IOF_WRITE   a write-like call: 'off' the file offset, 'len' the bytes
 *               the call wrote (its result), the bytes follow unless
 *               IOF_F_ZERO (all zero, not stored); 'aux' the variant
 *               (IOF_V_*).  A failed call has err != 0 and len 0
 *   IOF_TRUNC   ftruncate to 'off' bytes
 *   IOF_FALLOC  fallocate/posix_fallocate of ['off', 'off'+'len'), 'aux'
 *               its mode (0 for posix_fallocate)
 *   IOF_SYNC    fsync/fdatasync ('aux' = the seq the interposer's counter
 *               had when the call started: every record below it had
 *               completed before the sync began); a sync of every file
 *               (sync, syncfs) has file -1
 *   IOF_SFR     sync_file_range (not a durability point: no metadata, no
 *               device cache flush)
 *   IOF_MSYNC   msync of ['off', 'off'+'len') (an address; file -1)
 *   IOF_MARK    a mark rule created its file (the data: its path) for a
 *               call on 'file': just before that call (aux 0; the call's
 *               own record follows) or once it returned (aux 1)
 *
 * 'flags': IOF_F_INJECTED when the result is a failure the rules injected
 * (the real call was not made), IOF_F_DSYNC when the descriptor was opened
 * with O_DSYNC or O_SYNC (the write was durable when it returned),
 * IOF_F_FSYNC for an fsync (vs fdatasync). */
#ifndef MIC_IOFAULT_H
#define MIC_IOFAULT_H

#include <stddef.h>
#include <stdint.h>

#define IOF_MAGIC 0x52464f49u /* "IOFR" */

enum iof_op {
    IOF_NAME = 1,
    IOF_WRITE,
    IOF_TRUNC,
    IOF_FALLOC,
    IOF_SYNC,
    IOF_SFR,
    IOF_MSYNC,
    IOF_MARK,
};

enum iof_variant { IOF_V_WRITE = 0, IOF_V_PWRITE, IOF_V_WRITEV, IOF_V_PWRITEV };

#define IOF_F_ZERO 0x1
#define IOF_F_INJECTED 0x2
#define IOF_F_DSYNC 0x4
#define IOF_F_FSYNC 0x8

struct iof_rec {
    uint32_t magic;
    uint16_t op;
    uint16_t flags;
    int32_t file;
    int32_t err;
    uint64_t seq;
    uint64_t t_ns;
    int64_t off;
    int64_t len;
    uint64_t aux;
    uint64_t datalen;
};

_Static_assert(sizeof(struct iof_rec) == 64, "iof_rec is 64 bytes");

/* A log read whole into memory (iof_log_load): 'rec[i]' points at record
 * i's header (seq i), 'data(i)' at its bytes; file names by index. */
#define IOF_FILES_MAX 64
struct iof_log {
    unsigned char *map;
    size_t size;
    const struct iof_rec **rec;
    size_t n;
    char *name[IOF_FILES_MAX];
    int nfiles;
};

/* Map the log at 'path' and index it.  A torn last record (the process
 * died while writing it) is ignored.  Returns 0, or -1 with a message on
 * stderr (unreadable, a bad magic, seqs out of order).  Release with
 * iof_log_free. */
int iof_log_load(struct iof_log *l, const char *path);
void iof_log_free(struct iof_log *l);

static inline const unsigned char *iof_data(const struct iof_rec *r)
{
    return (const unsigned char *)(r + 1);
}

/* The file index named 'name' ("data.mdb"), or -1. */
int iof_log_file(const struct iof_log *l, const char *name);

#endif
