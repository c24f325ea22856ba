/* journal.c - the store's redo journal (journal.h; format in
 * proto/store-format.md, "Journal").
 *
 * State and who may touch it:
 *   cur, cap_failed, sealed_txnid
 *                            the committing thread (LMDB's write lock)
 *   qhead/qtail, spare, sealed_seq, st
 *                            qlock
 *   f[].off/zeroed/first_seq/hdr_seq, active, shadow, shadow_txnid
 *                            flush_lock (held for a whole flush)
 *   f[].free, ck_*           ck_lock
 *   durable_seq, failed, guard
 *                            atomics, written under flush_lock (failed also
 *                            by the checkpoint thread)
 *   pending                  atomic: added to at a seal, taken from by the
 *                            flush that made those records durable
 *
 * A record is what one commit wrote to data.mdb, byte for byte, in write
 * order: replaying it over an older data.mdb gives the pages the commit
 * left.  Records are only ever appended to the active file; a file is
 * restarted from its header only once a checkpoint made every page its
 * records hold durable in data.mdb itself. */
#define _GNU_SOURCE
#include "journal.h"

#include "core/crc32c.h"
#include "core/err.h"
#include "core/logger.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define HDR_FIELDS 4096u     /* the header's fixed part; the meta pages follow */
#define REC_HDR 40u
#define SEG_HDR 16u
#define REC_MAGIC 0x4d4a5243u
#define JNL_VERSION 1u
#define FILE_MAGIC "MICJRNL1"
/* LMDB 0.9's meta page (journal.h, invariant 3): page header (16 bytes),
 * then MDB_meta, whose mm_magic is at 0, mm_last_pg at 120 and mm_txnid
 * at 128 (after mm_version, mm_address, mm_mapsize, two MDB_db of 48
 * bytes and mm_last_pg). */
#define MDB_META_MAGIC 0xBEEFC0DEu
#define META_MAGIC_OFF 16
#define META_LAST_PG_OFF 136
#define META_TXNID_OFF 144
/* LMDB 0.9's page flags and header size (mdb.c: P_BRANCH ...; journal.h,
 * invariant 5). */
#define MDB_P_BRANCH 0x01u
#define MDB_P_LEAF 0x02u
#define MDB_P_OVERFLOW 0x04u
#define MDB_P_META 0x08u
#define MDB_P_LEAF2 0x20u
#define MDB_P_SUBP 0x40u
#define MDB_PAGEHDRSZ 16u
#define ZERO_STEP_MIN (1u << 20)
#define ZERO_STEP_MAX (16u << 20)
#define MAX_REGISTERED 16
#define MAX_RECORD ((uint64_t)1 << 40)
/* Journal room a write transaction must find before it begins (zeroed
 * past the active file's end, or in the other file): when the filesystem
 * cannot give it, the transaction is refused (MIC_ENOSPC) before it
 * writes anything.  A commit whose record is larger than this may still
 * meet a full filesystem at its flush (journal.h). */
#define HEADROOM ((uint64_t)1 << 20)

struct rec {
    struct rec *next;
    unsigned char *buf;
    size_t len, cap;
    uint64_t seq, txnid;
    uint32_t nseg;
    int has_meta;
};

struct jfile {
    int fd;
    uint64_t off;       /* where the next record goes */
    uint64_t zeroed;    /* bytes below this were written before: no size change */
    uint64_t first_seq;
    uint64_t hdr_seq;   /* the first_seq its header on disk names */
    int free;           /* every record checkpointed: may be restarted */
};

struct mic_jnl {
    int data_fd;
    unsigned psize;
    uint64_t hdr_size, file_size;
    struct jfile f[2];
    int active;
    struct rec *cur;
    int cap_failed;
    off_t pos;          /* LMDB's write position on data_fd (mic_jnl_lseek) */
    pthread_mutex_t qlock;
    struct rec *qhead, *qtail, *spare;
    int nspare;
    uint64_t sealed_seq;
    uint64_t sealed_txnid; /* LMDB's txnid at the last seal (or at open) */
    /* Room accounting (see reserve()): 'pending' is the length of every
     * sealed record not yet durable (queued or being flushed); 'guard' is
     * the room written ahead that they, and the record being captured,
     * are sure to find: the larger of the active file's zeroed room past
     * its end and the other file's zeroed room past its header. */
    _Atomic uint64_t pending;
    _Atomic uint64_t guard;
    struct mic_jnl_stats st;
    pthread_mutex_t flush_lock;
    unsigned char *shadow, *hdrbuf;
    uint64_t shadow_txnid;
    _Atomic uint64_t durable_seq;
    _Atomic int failed;
    pthread_mutex_t ck_lock;
    pthread_cond_t ck_cond;
    pthread_t ck_thread;
    int ck_want, ck_busy, ck_stop;
};

static struct mic_jnl_hooks hooks;

void mic_jnl_set_hooks(const struct mic_jnl_hooks *h)
{
    if (h)
        hooks = *h;
    else
        memset(&hooks, 0, sizeof hooks);
}

/* ---- Little-endian fields ---- */

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* ---- Full reads and writes ---- */

static int pread_full(int fd, void *buf, size_t n, off_t off)
{
    while (n) {
        ssize_t r = pread(fd, buf, n, off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        buf = (char *)buf + r;
        n -= (size_t)r;
        off += r;
    }
    return 0;
}

static int pwrite_full(int fd, const void *buf, size_t n, off_t off)
{
    while (n) {
        ssize_t r = pwrite(fd, buf, n, off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0)
            errno = EIO;
        if (r <= 0)
            return -1;
        buf = (const char *)buf + r;
        n -= (size_t)r;
        off += r;
    }
    return 0;
}

/* Write 'cnt' buffers back to back at 'off'; the iovec array is consumed. */
static int pwritev_full(int fd, struct iovec *iov, int cnt, off_t off)
{
    while (cnt > 0) {
        int n = cnt > IOV_MAX ? IOV_MAX : cnt;
        ssize_t r = pwritev(fd, iov, n, off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0)
            errno = EIO;
        if (r <= 0)
            return -1;
        off += r;
        while (r > 0 && cnt > 0) {
            if ((size_t)r >= iov->iov_len) {
                r -= (ssize_t)iov->iov_len;
                iov++;
                cnt--;
            } else {
                iov->iov_base = (char *)iov->iov_base + r;
                iov->iov_len -= (size_t)r;
                r = 0;
            }
        }
    }
    return 0;
}

/* ---- The registry: which descriptors are journaled data files ---- */

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int reg_fd[MAX_REGISTERED];        /* fd + 1; 0 = free */
static mic_jnl *_Atomic reg_jnl[MAX_REGISTERED];

static int reg_add(mic_jnl *j)
{
    int rc = -1;

    pthread_mutex_lock(&reg_lock);
    for (int i = 0; i < MAX_REGISTERED; i++)
        if (atomic_load(&reg_fd[i]) == 0) {
            atomic_store(&reg_jnl[i], j);
            atomic_store(&reg_fd[i], j->data_fd + 1);
            rc = 0;
            break;
        }
    pthread_mutex_unlock(&reg_lock);
    return rc;
}

static void reg_del(mic_jnl *j)
{
    pthread_mutex_lock(&reg_lock);
    for (int i = 0; i < MAX_REGISTERED; i++)
        if (atomic_load(&reg_jnl[i]) == j) {
            atomic_store(&reg_fd[i], 0);
            atomic_store(&reg_jnl[i], NULL);
        }
    pthread_mutex_unlock(&reg_lock);
}

static mic_jnl *reg_find(int fd)
{
    for (int i = 0; i < MAX_REGISTERED; i++)
        if (atomic_load(&reg_fd[i]) == fd + 1)
            return atomic_load(&reg_jnl[i]);
    return NULL;
}

/* ---- Capture (the committing thread) ---- */

static void (*_Atomic on_fail)(const char *what, int err);

void mic_jnl_on_fail(void (*fn)(const char *what, int err))
{
    atomic_store(&on_fail, fn);
}

static void fail(mic_jnl *j, const char *what, int err)
{
    void (*fn)(const char *, int);

    if (atomic_exchange(&j->failed, 1))
        return;
    mic_logger_write(MIC_LEVEL_ERROR, NULL, "journal failed: nothing more is acknowledged",
            "what", what, "error", err ? strerror(err) : "-", NULL);
    if ((fn = atomic_load(&on_fail)))
        fn(what, err);
}

/* The filesystem has no room (as opposed to a failed device). */
static int no_space(int err)
{
    return err == ENOSPC || err == EDQUOT;
}

static struct rec *rec_take(mic_jnl *j)
{
    struct rec *r;

    pthread_mutex_lock(&j->qlock);
    r = j->spare;
    if (r) {
        j->spare = r->next;
        j->nspare--;
    }
    pthread_mutex_unlock(&j->qlock);
    if (!r)
        r = calloc(1, sizeof *r);
    if (r) {
        r->next = NULL;
        r->len = REC_HDR;
        r->nseg = 0;
        r->has_meta = 0;
    }
    return r;
}

static void rec_give(mic_jnl *j, struct rec *r)
{
    pthread_mutex_lock(&j->qlock);
    if (j->nspare < 4 && r->cap <= ((size_t)8 << 20)) {
        r->next = j->spare;
        j->spare = r;
        j->nspare++;
        r = NULL;
    }
    pthread_mutex_unlock(&j->qlock);
    if (r) {
        free(r->buf);
        free(r);
    }
}

/* Append one segment: 'n' bytes of 'src' written at 'off' of data.mdb. */
static void seg_add(mic_jnl *j, uint64_t off, const unsigned char *src, size_t n)
{
    size_t need = SEG_HDR + ((n + 7) & ~(size_t)7);
    struct rec *r;
    unsigned char *p;

    if (j->cap_failed)
        return;
    if (!j->cur && !(j->cur = rec_take(j)))
        goto oom;
    r = j->cur;
    if (r->len + need > r->cap) {
        size_t cap = r->cap ? r->cap : 64 * 1024;
        unsigned char *b;
        while (cap < r->len + need)
            cap *= 2;
        if (!(b = realloc(r->buf, cap)))
            goto oom;
        r->buf = b;
        r->cap = cap;
    }
    p = r->buf + r->len;
    put64(p, off);
    put32(p + 8, (uint32_t)n);
    put32(p + 12, 0);
    memcpy(p + SEG_HDR, src, n);
    memset(p + SEG_HDR + n, 0, need - SEG_HDR - n);
    r->len += need;
    r->nseg++;
    if (off < 2 * (uint64_t)j->psize)
        r->has_meta = 1;
    return;
oom:
    j->cap_failed = 1;
}

/* The unused middle of a branch or leaf page: [*lo, *hi) between its node
 * pointers and its nodes, which LMDB never reads (LMDB 0.9's page header:
 * u64 pgno, u16 pad, u16 flags, u16 lower, u16 upper; journal.h,
 * invariant 5).  0 when 'pg' is
 * another kind of page (overflow, meta, LEAF2: keys packed past 'lower')
 * or its bounds do not make sense: it is then kept whole. */
static int page_gap(const unsigned char *pg, unsigned psize, unsigned *lo, unsigned *hi)
{
    unsigned flags = pg[10] | (unsigned)pg[11] << 8;
    unsigned lower = pg[12] | (unsigned)pg[13] << 8, upper = pg[14] | (unsigned)pg[15] << 8;

    if (!(flags & (MDB_P_BRANCH | MDB_P_LEAF)) ||
        (flags & (MDB_P_OVERFLOW | MDB_P_META | MDB_P_LEAF2 | MDB_P_SUBP)) ||
        lower < MDB_PAGEHDRSZ || upper > psize || lower >= upper)
        return 0;
    *lo = lower;
    *hi = upper;
    return 1;
}

/* A write of 'total' bytes at 'off' (LMDB writes one page, or one run of
 * overflow pages, an iovec): each branch or leaf page goes into the record
 * without its unused middle (its two used ends, two segments), the rest
 * as written.  Replay leaves what data.mdb held in a gap. */
static void capture(mic_jnl *j, off_t off, const struct iovec *iov, int cnt, size_t total)
{
    uint64_t o = (uint64_t)off;

    if (hooks.skip_capture && hooks.skip_capture())
        return;
    for (size_t left = total; left && cnt > 0; iov++, cnt--) {
        size_t n = iov->iov_len < left ? iov->iov_len : left;
        const unsigned char *b = iov->iov_base;
        unsigned lo, hi;

        if (hooks.on_data)
            hooks.on_data((off_t)o, b, n);
        if (n == j->psize && o % j->psize == 0 && page_gap(b, j->psize, &lo, &hi)) {
            seg_add(j, o, b, lo);
            seg_add(j, o + hi, b + hi, j->psize - hi);
        } else {
            seg_add(j, o, b, n);
        }
        o += n;
        left -= n;
    }
}

static int capture_room(mic_jnl *j, uint64_t off, size_t n);

/* LMDB takes a short write for an I/O error (EIO); a full filesystem
 * first gives a short write, then ENOSPC on the rest.  On a journaled
 * data file the writes below go on to the end, so that LMDB sees the
 * full count, or -1 with the errno of what stopped them (a commit that
 * did not fit is then MIC_ENOSPC, not an I/O error). */
ssize_t mic_jnl_pwrite(int fd, const void *buf, size_t n, off_t off)
{
    mic_jnl *j = reg_find(fd);
    ssize_t r;
    int rc;

    if (!j)
        return pwrite(fd, buf, n, off);
    if ((rc = capture_room(j, (uint64_t)off, n))) {
        errno = rc == MIC_ENOSPC ? ENOSPC : EIO;
        return -1;
    }
    if (pwrite_full(fd, buf, n, off))
        return -1;
    r = (ssize_t)n;
    if (r > 0) {
        struct iovec v = {(void *)buf, (size_t)r};
        capture(j, off, &v, 1, (size_t)r);
    }
    return r;
}

/* LMDB writes a run of pages as lseek(SEEK_SET) then writev.  On a data
 * file the position is kept here instead (no system call) and the run
 * goes out as one pwritev at it; the descriptor's own offset is not used
 * by anything else. */
off_t mic_jnl_lseek(int fd, off_t off, int whence)
{
    mic_jnl *j = reg_find(fd);
    off_t r;

    if (j && whence == SEEK_SET && off >= 0) {
        j->pos = off;
        return off;
    }
    r = lseek(fd, off, whence);
    if (j)
        j->pos = r;
    return r;
}

ssize_t mic_jnl_writev(int fd, const struct iovec *iov, int cnt)
{
    mic_jnl *j = reg_find(fd);
    ssize_t r;

    if (!j)
        return writev(fd, iov, cnt);
    if (j->pos < 0 && (j->pos = lseek(fd, 0, SEEK_CUR)) < 0) {
        j->cap_failed = 1;
        return -1;
    }
    {
        struct iovec left[IOV_MAX];
        size_t total = 0;
        if (cnt > IOV_MAX) {
            errno = EINVAL;
            return -1;
        }
        for (int i = 0; i < cnt; i++) {
            left[i] = iov[i];
            total += iov[i].iov_len;
        }
        if ((r = capture_room(j, (uint64_t)j->pos, total))) {
            errno = r == MIC_ENOSPC ? ENOSPC : EIO;
            return -1;
        }
        if (pwritev_full(fd, left, cnt, j->pos))
            return -1;
        r = (ssize_t)total;
    }
    if (r > 0) {
        capture(j, j->pos, iov, cnt, (size_t)r);
        j->pos += r;
    }
    return r;
}

/* ---- Headers ---- */

/* A header: its chain starts at 'first_seq' (0: the file holds no chain),
 * and no record of either file has a sequence number from 'floor' on. */
static size_t hdr_fill(mic_jnl *j, unsigned char *h, uint64_t first_seq, uint64_t floor)
{
    uint32_t crc;

    memset(h, 0, HDR_FIELDS);
    memcpy(h, FILE_MAGIC, 8);
    put32(h + 8, JNL_VERSION);
    put32(h + 12, j->psize);
    put64(h + 16, first_seq);
    put64(h + 24, j->shadow_txnid);
    put64(h + 40, floor);
    memcpy(h + HDR_FIELDS, j->shadow, 2 * (size_t)j->psize);
    crc = mic_crc32c(0, h, 32);
    crc = mic_crc32c(crc, h + 36, j->hdr_size - 36);
    put32(h + 32, crc);
    return j->hdr_size;
}

/* Write zeros up to past 'need' so that the records that follow do not
 * change the file's size (an fdatasync that must also commit a new size
 * costs a journal commit of the filesystem as well).  'exact': no more
 * than 'need' (rounded up to 4 KiB), for a filesystem short of room.
 * Returns 0, or -1 with errno. */
static int zero_ahead(mic_jnl *j, struct jfile *f, uint64_t need, int exact)
{
    static const unsigned char zeros[64 * 1024];
    uint64_t step = f->zeroed < ZERO_STEP_MIN ? ZERO_STEP_MIN
                  : f->zeroed > ZERO_STEP_MAX ? ZERO_STEP_MAX : f->zeroed;
    uint64_t to = need > f->zeroed + step ? need : f->zeroed + step;

    if (exact)
        to = (need + 4095) & ~(uint64_t)4095;
    else
        to = (to + ZERO_STEP_MIN - 1) & ~(uint64_t)(ZERO_STEP_MIN - 1);
    if (to > f->zeroed && hooks.no_room && (errno = hooks.no_room((int)(f - j->f))))
        return -1;
    for (uint64_t at = f->zeroed; at < to;) {
        size_t n = to - at < sizeof zeros ? (size_t)(to - at) : sizeof zeros;
        if (pwrite_full(f->fd, zeros, n, (off_t)at))
            return -1;
        at += n;
    }
    if (to > f->zeroed)
        f->zeroed = to;
    return 0;
}

/* Zeroed room for 'need' bytes from 'at' in file 'f': MIC_OK, MIC_ENOSPC
 * when the filesystem has none (nothing failed: errno ENOSPC or EDQUOT),
 * MIC_EIO (errno) for any other failure.  Under flush_lock. */
static int room_at(mic_jnl *j, struct jfile *f, uint64_t at, uint64_t need)
{
    if (at + need <= f->zeroed)
        return MIC_OK;
    if (zero_ahead(j, f, at + need, 0) == 0)
        return MIC_OK;
    if (!no_space(errno))
        return MIC_EIO;
    if (zero_ahead(j, f, at + need, 1) == 0)
        return MIC_OK;
    return no_space(errno) ? MIC_ENOSPC : MIC_EIO;
}

/* Recompute 'guard' from the files' positions.  Under flush_lock. */
static void guard_update(mic_jnl *j)
{
    const struct jfile *a = &j->f[j->active], *o = &j->f[!j->active];
    uint64_t ra = a->zeroed > a->off ? a->zeroed - a->off : 0;
    uint64_t ro = o->zeroed > j->hdr_size ? o->zeroed - j->hdr_size : 0;

    atomic_store(&j->guard, ra > ro ? ra : ro);
}

/* Make sure the sealed records not yet durable plus 'extra' bytes will
 * find room written ahead when they are flushed: all of them after the
 * active file's end, or all of them after the other file's header (the
 * flush switches to it, waiting for its checkpoint if need be).  This is
 * what makes a full filesystem a refusal before a commit, never after:
 * mic_jnl_begin asks for HEADROOM, and a capture whose record would
 * outgrow the room fails LMDB's write with ENOSPC, so its commit fails
 * and changes nothing (journal.h).  Returns MIC_OK, MIC_ENOSPC or
 * MIC_EIO (the journal failed). */
static int reserve(mic_jnl *j, uint64_t extra)
{
    uint64_t need;
    int rc;

    if (atomic_load(&j->pending) + extra <= atomic_load(&j->guard))
        return MIC_OK;
    pthread_mutex_lock(&j->flush_lock);
    need = atomic_load(&j->pending) + extra;
    if (atomic_load(&j->failed)) {
        rc = MIC_EIO;
    } else if (need <= atomic_load(&j->guard)) {
        rc = MIC_OK;
    } else {
        struct jfile *f = &j->f[j->active];
        if ((rc = room_at(j, f, f->off, need)) == MIC_EIO)
            fail(j, "journal write", errno);
        guard_update(j);
        if (rc == MIC_ENOSPC && need <= atomic_load(&j->guard))
            rc = MIC_OK;
    }
    pthread_mutex_unlock(&j->flush_lock);
    return rc;
}

/* Room for a capture of 'n' bytes at 'off' of data.mdb (the record it
 * grows, with the commit's meta page still to come).  A meta page write
 * is not checked: the room for it was kept when its pages were. */
static int capture_room(mic_jnl *j, uint64_t off, size_t n)
{
    uint64_t cur = j->cur ? j->cur->len : REC_HDR;
    uint64_t segs = (uint64_t)n / j->psize + 1;

    if (off < 2 * (uint64_t)j->psize)
        return MIC_OK;
    return reserve(j, cur + n + segs * (2 * SEG_HDR + 16) + 2 * (SEG_HDR + j->psize));
}

/* Switch to the other file, which its checkpoint has made free, and have
 * the one left checkpointed.  'first_seq' is the first record it will
 * hold; its header is written by the flush that writes that record.  When
 * the other file is not free yet: with 'wait', wait for its checkpoint
 * (returns -1 if the journal failed meanwhile), else return -1 (and count
 * a late checkpoint).  Under flush_lock; the caller has made sure the
 * other file has room for what it will write there. */
static int rotate(mic_jnl *j, uint64_t first_seq, int wait)
{
    struct jfile *f = &j->f[j->active], *o = &j->f[!j->active];
    int ofree;

    pthread_mutex_lock(&j->ck_lock);
    while (wait && !o->free && !atomic_load(&j->failed))
        pthread_cond_wait(&j->ck_cond, &j->ck_lock);
    ofree = o->free && !atomic_load(&j->failed);
    if (ofree) {
        f->free = 0;
        j->ck_want = j->active;
        pthread_cond_signal(&j->ck_cond);
    }
    pthread_mutex_unlock(&j->ck_lock);
    if (!ofree) {
        pthread_mutex_lock(&j->qlock);
        j->st.late_checkpoints++;
        pthread_mutex_unlock(&j->qlock);
        return -1;
    }
    j->active = !j->active;
    o->first_seq = first_seq;
    o->off = j->hdr_size;
    return 0;
}

/* Pick the file the flush of 'total' bytes starting at record 'first'
 * writes to, switching files when the active one is past its size and
 * the other is free and has the room, or when only the other has room.
 * Nothing is switched before the room is there (a switch that then found
 * no room left the new file without its header: issue 29).  Returns
 * MIC_OK (j->active is the file), MIC_ENOSPC, or MIC_EIO (errno).  Under
 * flush_lock. */
static int place(mic_jnl *j, uint64_t first, uint64_t total, int *rotated)
{
    struct jfile *f = &j->f[j->active], *o = &j->f[!j->active];
    int rc;

    *rotated = 0;
    if (f->off > j->hdr_size && f->off + total > j->file_size) {
        int ofree;
        pthread_mutex_lock(&j->ck_lock);
        ofree = o->free;
        pthread_mutex_unlock(&j->ck_lock);
        if (ofree && (rc = room_at(j, o, j->hdr_size, total)) != MIC_ENOSPC) {
            if (rc)
                return rc;
            if (rotate(j, first, 0) == 0) {
                *rotated = 1;
                return MIC_OK;
            }
        } else if (!ofree) {
            pthread_mutex_lock(&j->qlock);
            j->st.late_checkpoints++;
            pthread_mutex_unlock(&j->qlock);
        }
    }
    if ((rc = room_at(j, f, f->off, total)) != MIC_ENOSPC)
        return rc;
    /* A full filesystem: the other file has the room written already. */
    if (o->zeroed >= j->hdr_size + total && rotate(j, first, 1) == 0) {
        *rotated = 1;
        return MIC_OK;
    }
    return MIC_ENOSPC;
}

/* ---- Flush ---- */

static void shadow_apply(mic_jnl *j, const struct rec *r)
{
    const unsigned char *p = r->buf + REC_HDR;
    uint64_t meta_end = 2 * (uint64_t)j->psize;

    for (uint32_t i = 0; i < r->nseg; i++) {
        uint64_t off = get64(p);
        uint32_t len = get32(p + 8);
        if (off < meta_end) {
            uint64_t n = off + len > meta_end ? meta_end - off : len;
            memcpy(j->shadow + off, p + SEG_HDR, (size_t)n);
        }
        p += SEG_HDR + ((len + 7) & ~(uint32_t)7);
    }
    j->shadow_txnid = r->txnid;
}

static int flush_locked(mic_jnl *j)
{
    struct rec *list, *r;
    struct iovec *iov = NULL, one;
    struct jfile *f;
    uint64_t total = 0, last_seq = 0;
    int n = 0, rotated = 0, rc = MIC_EIO;

    if (atomic_load(&j->failed))
        return MIC_EIO;
    pthread_mutex_lock(&j->qlock);
    list = j->qhead;
    j->qhead = j->qtail = NULL;
    pthread_mutex_unlock(&j->qlock);
    if (!list)
        return MIC_OK;
    for (r = list; r; r = r->next) {
        put32(r->buf + 4, mic_crc32c(0, r->buf + 8, r->len - 8));
        total += r->len;
        last_seq = r->seq;
        n++;
    }
    rc = place(j, list->seq, total, &rotated);
    f = &j->f[j->active];
    if (rc) {
        /* mic_jnl_begin and the captures kept the room these records
         * need (reserve()): a filesystem that has none now took back
         * space it had given (a copy-on-write one), or a write failed.
         * Their commits are in LMDB but can never be made durable. */
        fail(j, rc == MIC_ENOSPC ? "journal write: no room in the space written ahead"
                                 : "journal write", rc == MIC_ENOSPC ? ENOSPC : errno);
        rc = MIC_EIO;
        goto out;
    }
    rc = MIC_EIO;
    /* A file that holds no record yet gets the header of the chain its
     * first record starts, in the same write and sync as that record. */
    if (f->off == j->hdr_size && f->hdr_seq != list->seq) {
        hdr_fill(j, j->hdrbuf, list->seq, list->seq);
        if (pwrite_full(f->fd, j->hdrbuf, j->hdr_size, 0)) {
            fail(j, "journal write", errno);
            goto out;
        }
        f->first_seq = f->hdr_seq = list->seq;
    }
    if (n == 1) {
        iov = &one;
    } else if (!(iov = malloc((size_t)n * sizeof *iov))) {
        fail(j, "journal write", ENOMEM);
        goto out;
    }
    n = 0;
    for (r = list; r; r = r->next)
        iov[n++] = (struct iovec){r->buf, r->len};
    if (pwritev_full(f->fd, iov, n, (off_t)f->off)) {
        fail(j, "journal write", errno);
        goto out;
    }
    if (hooks.on_written)
        hooks.on_written((int)(f - j->f), (off_t)f->off, (size_t)total);
    if (hooks.fail_sync && (errno = hooks.fail_sync())) {
        fail(j, "journal fdatasync", errno);
        goto out;
    }
    if (fdatasync(f->fd)) {
        fail(j, "journal fdatasync", errno);
        goto out;
    }
    f->off += total;
    atomic_fetch_sub(&j->pending, total);
    guard_update(j);
    for (r = list; r; r = r->next)
        shadow_apply(j, r);
    atomic_store(&j->durable_seq, last_seq);
    pthread_mutex_lock(&j->qlock);
    j->st.flushes++;
    j->st.records += (uint64_t)n;
    j->st.bytes += total;
    j->st.rotations += (uint64_t)rotated;
    pthread_mutex_unlock(&j->qlock);
    rc = MIC_OK;
out:
    if (iov != &one)
        free(iov);
    while (list) {
        r = list->next;
        rec_give(j, list);
        list = r;
    }
    return rc;
}

int mic_jnl_flush(mic_jnl *j)
{
    int rc;

    pthread_mutex_lock(&j->flush_lock);
    rc = flush_locked(j);
    pthread_mutex_unlock(&j->flush_lock);
    return rc;
}

int mic_jnl_begin(mic_jnl *j)
{
    uint64_t sealed;
    int rc = MIC_OK;

    if (j->cur && j->cur->nseg)
        mic_jnl_discard(j);
    if (atomic_load(&j->failed))
        return MIC_EIO;
    pthread_mutex_lock(&j->qlock);
    sealed = j->sealed_seq;
    pthread_mutex_unlock(&j->qlock);
    if (sealed > atomic_load(&j->durable_seq) + 1) {
        /* Wait for a flush in progress; flush here only if none covered it. */
        pthread_mutex_lock(&j->flush_lock);
        if (sealed > atomic_load(&j->durable_seq) + 1)
            rc = flush_locked(j);
        pthread_mutex_unlock(&j->flush_lock);
        if (rc)
            return rc;
    }
    /* Room for the records still to be flushed and HEADROOM more, written
     * now if need be, or found in the other file. */
    return reserve(j, HEADROOM);
}

int mic_jnl_seal(mic_jnl *j, uint64_t txnid)
{
    struct rec *r = j->cur;

    if (j->cap_failed) {
        mic_jnl_discard(j);
        fail(j, "journal capture", ENOMEM);
        return MIC_EIO;
    }
    if (!r || !r->nseg) {
        /* A commit that wrote nothing leaves LMDB's txnid where it was;
         * one that advanced it wrote pages the journal never saw (a call
         * of LMDB's that the renaming missed): nothing it wrote can be
         * made durable, so nothing may be acknowledged from here on. */
        if (txnid == j->sealed_txnid)
            return MIC_OK;
        mic_jnl_discard(j);
        fail(j, "a commit's writes were not captured", 0);
        return MIC_EIO;
    }
    if (!r->has_meta) {
        mic_jnl_discard(j);
        fail(j, "a commit wrote no meta page", 0);
        return MIC_EIO;
    }
    j->cur = NULL;
    r->txnid = txnid;
    j->sealed_txnid = txnid;
    memset(r->buf, 0, REC_HDR);
    put32(r->buf, REC_MAGIC);
    put64(r->buf + 16, txnid);
    put64(r->buf + 24, r->len);
    put32(r->buf + 32, r->nseg);
    pthread_mutex_lock(&j->qlock);
    r->seq = ++j->sealed_seq;
    atomic_fetch_add(&j->pending, r->len);
    put64(r->buf + 8, r->seq);
    if (j->qtail)
        j->qtail->next = r;
    else
        j->qhead = r;
    j->qtail = r;
    pthread_mutex_unlock(&j->qlock);
    return MIC_OK;
}

void mic_jnl_discard(mic_jnl *j)
{
    j->cap_failed = 0;
    if (j->cur) {
        j->cur->len = REC_HDR;
        j->cur->nseg = 0;
        j->cur->has_meta = 0;
    }
}

/* ---- Checkpoints ---- */

/* Write data.mdb's dirty pages back a chunk at a time, each waited for,
 * before the checkpoint's fdatasync: the device queue then never holds
 * more than a chunk of them ahead of a journal write, whose fdatasync a
 * commit waits for.  Errors are left to the fdatasync that follows. */
#define WRITEBACK_CHUNK (1u << 20)
static void writeback(int fd)
{
    struct stat st;

    if (fstat(fd, &st))
        return;
    for (off_t at = 0; at < st.st_size; at += WRITEBACK_CHUNK)
        if (sync_file_range(fd, at, WRITEBACK_CHUNK, SYNC_FILE_RANGE_WAIT_BEFORE |
                                                     SYNC_FILE_RANGE_WRITE |
                                                     SYNC_FILE_RANGE_WAIT_AFTER))
            return;
}

static void *ck_main(void *arg)
{
    mic_jnl *j = arg;

    pthread_mutex_lock(&j->ck_lock);
    for (;;) {
        int idx, rc;

        while (j->ck_want < 0 && !j->ck_stop)
            pthread_cond_wait(&j->ck_cond, &j->ck_lock);
        if (j->ck_want < 0)
            break;
        idx = j->ck_want;
        j->ck_want = -1;
        j->ck_busy = 1;
        pthread_mutex_unlock(&j->ck_lock);
        if (hooks.on_checkpoint)
            hooks.on_checkpoint(0);
        writeback(j->data_fd);
        rc = fdatasync(j->data_fd);
        if (rc)
            fail(j, "checkpoint fdatasync of data.mdb", errno);
        else if (hooks.on_checkpoint)
            hooks.on_checkpoint(1);
        pthread_mutex_lock(&j->ck_lock);
        j->ck_busy = 0;
        if (!rc) {
            j->f[idx].free = 1;
            pthread_mutex_lock(&j->qlock);
            j->st.checkpoints++;
            pthread_mutex_unlock(&j->qlock);
        }
        pthread_cond_broadcast(&j->ck_cond);
    }
    pthread_mutex_unlock(&j->ck_lock);
    return NULL;
}

void mic_jnl_stats(mic_jnl *j, struct mic_jnl_stats *st)
{
    pthread_mutex_lock(&j->qlock);
    *st = j->st;
    pthread_mutex_unlock(&j->qlock);
}

/* ---- Open and close ---- */

static int meta_txnid(const unsigned char *page, uint64_t *txnid)
{
    if (get32(page + META_MAGIC_OFF) != MDB_META_MAGIC)
        return -1;
    *txnid = get64(page + META_TXNID_OFF);
    return 0;
}

static int open_file(const char *dir, int i)
{
    char path[PATH_MAX];

    snprintf(path, sizeof path, "%s/journal-%d", dir, i);
    return open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
}

/* Write file i's header (hdr_fill's arguments) and fdatasync it.
 * Returns 0, or -1 with errno set. */
static int hdr_write(mic_jnl *j, int i, uint64_t first_seq, uint64_t floor)
{
    hdr_fill(j, j->hdrbuf, first_seq, floor);
    return pwrite_full(j->f[i].fd, j->hdrbuf, j->hdr_size, 0) || fdatasync(j->f[i].fd) ? -1 : 0;
}

static void recs_free(struct rec *r)
{
    while (r) {
        struct rec *n = r->next;
        free(r->buf);
        free(r);
        r = n;
    }
}

/* Close the files and free everything: what open set up and close leaves. */
static void jnl_free(mic_jnl *j)
{
    for (int i = 0; i < 2; i++)
        if (j->f[i].fd >= 0)
            close(j->f[i].fd);
    recs_free(j->spare);
    recs_free(j->cur);
    recs_free(j->qhead);
    free(j->shadow);
    free(j->hdrbuf);
    pthread_cond_destroy(&j->ck_cond);
    pthread_mutex_destroy(&j->ck_lock);
    pthread_mutex_destroy(&j->flush_lock);
    pthread_mutex_destroy(&j->qlock);
    free(j);
}

int mic_jnl_open(mic_jnl **out, const char *dir, int lock_fd, int data_fd,
                 unsigned psize, uint64_t file_size, uint64_t next_seq)
{
    mic_jnl *j = calloc(1, sizeof *j);
    uint64_t t0 = 0, t1 = 0;
    int rc = MIC_EIO;

    if (!j) {
        close(lock_fd);
        return MIC_ENOMEM;
    }
    j->data_fd = data_fd;
    j->psize = psize;
    j->hdr_size = HDR_FIELDS + 2 * (uint64_t)psize;
    j->file_size = file_size < j->hdr_size + 64 * 1024 ? j->hdr_size + 64 * 1024 : file_size;
    j->f[0].fd = lock_fd;
    j->f[1].fd = -1;
    j->pos = -1;
    j->ck_want = -1;
    pthread_mutex_init(&j->qlock, NULL);
    pthread_mutex_init(&j->flush_lock, NULL);
    pthread_mutex_init(&j->ck_lock, NULL);
    pthread_cond_init(&j->ck_cond, NULL);
    if (!(j->shadow = malloc(2 * (size_t)psize)) || !(j->hdrbuf = malloc(j->hdr_size))) {
        rc = MIC_ENOMEM;
        goto fail;
    }
    for (int i = 0; i < 2; i++) {
        struct stat st;
        if ((i == 1 && (j->f[i].fd = open_file(dir, i)) < 0) || fstat(j->f[i].fd, &st))
            goto fail_errno;
        j->f[i].zeroed = (uint64_t)st.st_size;
    }
    if (pread_full(data_fd, j->shadow, 2 * (size_t)psize, 0) ||
        meta_txnid(j->shadow, &t0) || meta_txnid(j->shadow + psize, &t1)) {
        mic_logger_write(MIC_LEVEL_ERROR, NULL, "journal: cannot read data.mdb's meta pages", "dir", dir, NULL);
        goto fail;
    }
    j->shadow_txnid = j->sealed_txnid = t0 > t1 ? t0 : t1;
    /* File 0 starts at next_seq over the synced store; file 1 is empty. */
    for (int i = 0; i < 2; i++) {
        if (hdr_write(j, i, i == 0 ? next_seq : 0, next_seq))
            goto fail_errno;
        if (j->f[i].zeroed < j->hdr_size)
            j->f[i].zeroed = j->hdr_size;
        j->f[i].off = j->hdr_size;
        /* Each file's first 2 * HEADROOM written now, so that a
         * filesystem that fills up later still leaves the journal room to
         * go on (acks, claims, deletes), switching files as each fills; a
         * filesystem already full only gets a warning. */
        if (zero_ahead(j, &j->f[i], j->hdr_size + 2 * HEADROOM, 1)) {
            if (!no_space(errno))
                goto fail_errno;
            mic_logger_write(MIC_LEVEL_WARN, NULL, "journal: no room to write its files ahead", "dir", dir, NULL);
        }
    }
    j->f[0].first_seq = j->f[0].hdr_seq = next_seq;
    guard_update(j);
    j->f[1].free = 1;
    j->sealed_seq = next_seq - 1;
    atomic_store(&j->durable_seq, next_seq - 1);
    if (reg_add(j)) {
        mic_logger_write(MIC_LEVEL_ERROR, NULL, "journal: too many stores open in this process", NULL);
        goto fail;
    }
    if (pthread_create(&j->ck_thread, NULL, ck_main, j)) {
        reg_del(j);
        rc = MIC_ENOMEM;
        goto fail;
    }
    *out = j;
    return MIC_OK;
fail_errno:
    mic_logger_write(MIC_LEVEL_ERROR, NULL, "journal: cannot set up its files", "dir", dir,
            "error", strerror(errno), NULL);
fail:
    jnl_free(j);
    return rc;
}

void mic_jnl_close(mic_jnl *j)
{
    int ok;

    if (!j)
        return;
    ok = mic_jnl_flush(j) == MIC_OK;
    pthread_mutex_lock(&j->ck_lock);
    j->ck_stop = 1;
    pthread_cond_signal(&j->ck_cond);
    pthread_mutex_unlock(&j->ck_lock);
    pthread_join(j->ck_thread, NULL);
    reg_del(j);
    if (ok && !atomic_load(&j->failed) && fdatasync(j->data_fd) == 0) {
        /* Everything is in data.mdb: neither file holds a chain, so the
         * next open rewrites nothing (not even the meta pages: a tool may
         * have written data.mdb meanwhile). */
        uint64_t next = atomic_load(&j->durable_seq) + 1;
        for (int i = 0; i < 2 && hdr_write(j, i, 0, next) == 0; i++)
            ;
    }
    jnl_free(j);
}

/* ---- The LMDB it was written for ---- */

/* The versions of LMDB whose files and calls are as journal.h's
 * invariants say.  One is added once deps/lmdb/README.md's review holds
 * for it ("When Debian's LMDB changes") and test_journal and make
 * fault-power pass with it. */
static const int lmdb_versions[][3] = {
    {0, 9, 24}, /* Debian 12's liblmdb-dev 0.9.24-1 */
};

int mic_jnl_lmdb_check(int major, int minor, int patch)
{
    char have[48], want[128];
    size_t n = 0, nv = sizeof lmdb_versions / sizeof lmdb_versions[0];

    want[0] = 0;
    for (size_t i = 0; i < nv; i++) {
        const int *v = lmdb_versions[i];
        if (v[0] == major && v[1] == minor && v[2] == patch)
            return MIC_OK;
        if (n < sizeof want)
            n += (size_t)snprintf(want + n, sizeof want - n, "%s%d.%d.%d", i ? ", " : "", v[0], v[1], v[2]);
    }
    snprintf(have, sizeof have, "%d.%d.%d", major, minor, patch);
    mic_logger_write(MIC_LEVEL_ERROR, NULL, "LMDB is not a version the store journal was written for "
            "(refusing to open the store)", "lmdb", have, "supported", want, NULL);
    return MIC_ELMDB;
}

/* ---- Recovery ---- */

struct scan {
    int valid;
    unsigned psize;
    uint64_t hdr_size, size, first_seq, base_txnid, floor;
    unsigned char *base;        /* 2 * psize: the meta pages at first_seq */
    uint64_t nrec, last_seq, last_txnid;
    uint64_t stray;             /* a record past the chain (0: none) ... */
    uint64_t stray_off;         /* ... at this offset */
};

/* Read the record at 'off' of a file of 'size' bytes into *buf (grown as
 * needed).  Returns 1 for a whole record with a good CRC (its length in
 * *len, its sequence number in *seq), 0 when there is none there (the
 * end of a chain: a torn or never written record, or other bytes), -1
 * when a read or an allocation failed. */
static int rec_read(int fd, uint64_t off, uint64_t size, unsigned char **buf, size_t *cap,
                    uint64_t *len, uint64_t *seq)
{
    unsigned char rh[REC_HDR];

    if (off + REC_HDR > size)
        return 0;
    if (pread_full(fd, rh, REC_HDR, (off_t)off))
        return -1;
    *len = get64(rh + 24);
    *seq = get64(rh + 8);
    if (get32(rh) != REC_MAGIC || *len < REC_HDR || *len > MAX_RECORD || off + *len > size)
        return 0;
    if (*len > *cap) {
        unsigned char *b = realloc(*buf, (size_t)*len);
        if (!b)
            return -1;
        *buf = b;
        *cap = (size_t)*len;
    }
    if (pread_full(fd, *buf, (size_t)*len, (off_t)off))
        return -1;
    return mic_crc32c(0, *buf + 8, (size_t)*len - 8) == get32(rh + 4);
}

/* Check that record 'b' of 'len' bytes parses: each of its segments lies
 * inside the record, the commit's meta page is among them, and every
 * other segment lies inside the pages that meta page says the store uses
 * (below (mm_last_pg + 1) * psize).  Returns 0, or -1 (logged). */
static int rec_check(const unsigned char *b, uint64_t len, unsigned psize)
{
    uint32_t nseg = get32(b + 32);
    uint64_t p, end = 0, meta_end = 2 * (uint64_t)psize;
    int pass;

    for (pass = 0; pass < 2; pass++) {
        p = REC_HDR;
        for (uint32_t i = 0; i < nseg; i++) {
            uint64_t soff, slen;
            if (p + SEG_HDR > len)
                goto bad;
            soff = get64(b + p);
            slen = get32(b + p + 8);
            if (slen > len - p - SEG_HDR || soff > UINT64_MAX - slen)
                goto bad;
            if (pass == 0 && soff < meta_end) {
                /* LMDB 0.9 writes a meta page from mm_mapsize on: the
                 * segment holds mm_last_pg (journal.h, invariant 3). */
                uint64_t pg = soff / psize * psize;
                if (soff + slen > pg + psize)
                    goto bad;
                if (soff <= pg + META_LAST_PG_OFF && soff + slen >= pg + META_TXNID_OFF)
                    end = (get64(b + p + SEG_HDR + (pg + META_LAST_PG_OFF - soff)) + 1) * psize;
            } else if (pass == 1 && soff >= meta_end && soff + slen > end) {
                goto bad;
            }
            p += SEG_HDR + ((slen + 7) & ~(uint64_t)7);
        }
        if (pass == 0 && !end)
            goto bad;
    }
    return 0;
bad:
    mic_logger_write(MIC_LEVEL_ERROR, NULL, "journal: a record with a good checksum does not parse", NULL);
    errno = EBADMSG;
    return -1;
}

/* Walk the chain of records of file 'fd' from offset 'off', where record
 * 'expect' should be, then 'expect' + 1 ... (each whole, with a good CRC),
 * writing each one's segments to data_fd unless data_fd < 0; adds to
 * s->nrec and sets s->last_seq and s->last_txnid.  Where the chain ends, a
 * whole record with a sequence number past it sets s->stray and
 * s->stray_off (no earlier use of the file can have left one there: a
 * file's old records all come before its header's chain).  Returns 0, or
 * -1 when a read or write failed or a record with a good CRC does not
 * parse. */
static int scan_chain(int fd, struct scan *s, uint64_t off, uint64_t expect, int data_fd,
                      unsigned char **buf, size_t *cap)
{
    uint64_t len, seq;
    int rc;

    while ((rc = rec_read(fd, off, s->size, buf, cap, &len, &seq)) == 1 && seq == expect) {
        const unsigned char *b = *buf;
        if (rec_check(b, len, s->psize))
            return -1;
        if (data_fd >= 0)
            for (uint64_t p = REC_HDR, n = get32(b + 32); n; n--) {
                uint64_t soff = get64(b + p);
                uint32_t slen = get32(b + p + 8);
                if (pwrite_full(data_fd, b + p + SEG_HDR, slen, (off_t)soff))
                    return -1;
                p += SEG_HDR + ((slen + 7) & ~(uint64_t)7);
            }
        s->nrec++;
        s->last_seq = expect;
        s->last_txnid = get64(b + 16);
        expect++;
        off += len;
    }
    if (rc < 0)
        return -1;
    if (rc == 1 && seq > expect) {
        s->stray = seq;
        s->stray_off = off;
    }
    return 0;
}

/* Read and check file fd's header, then walk its chain (scan_chain): from
 * first_seq, or, in a file that holds no chain, only the check for a
 * record from the header's floor on at its start (s->stray).  Returns 0,
 * or -1 as scan_chain. */
static int scan_file(int fd, struct scan *s, int data_fd, unsigned char **buf, size_t *cap)
{
    unsigned char h[HDR_FIELDS];
    struct stat st;
    uint32_t crc;

    memset(s, 0, sizeof *s);
    if (fstat(fd, &st))
        return -1;
    s->size = (uint64_t)st.st_size;
    if (s->size < HDR_FIELDS || pread_full(fd, h, HDR_FIELDS, 0))
        return 0;
    s->psize = get32(h + 12);
    if (memcmp(h, FILE_MAGIC, 8) || get32(h + 8) != JNL_VERSION ||
        s->psize < 512 || s->psize > 65536 || (s->psize & (s->psize - 1)))
        return 0;
    s->hdr_size = HDR_FIELDS + 2 * (uint64_t)s->psize;
    if (s->size < s->hdr_size)
        return 0;
    if (!(s->base = malloc(2 * (size_t)s->psize)))
        return -1;
    if (pread_full(fd, s->base, 2 * (size_t)s->psize, HDR_FIELDS))
        return -1;
    crc = mic_crc32c(0, h, 32);
    crc = mic_crc32c(crc, h + 36, HDR_FIELDS - 36);
    crc = mic_crc32c(crc, s->base, 2 * (size_t)s->psize);
    if (crc != get32(h + 32))
        return 0;
    s->valid = 1;
    s->first_seq = get64(h + 16);
    s->base_txnid = get64(h + 24);
    s->floor = get64(h + 40);
    if (data_fd >= 0 && s->first_seq &&
        pwrite_full(data_fd, s->base, 2 * (size_t)s->psize, 0))
        return -1;
    if (s->first_seq)
        return scan_chain(fd, s, s->hdr_size, s->first_seq, data_fd, buf, cap);
    {
        uint64_t len, seq;
        int rc = rec_read(fd, s->hdr_size, s->size, buf, cap, &len, &seq);
        if (rc < 0)
            return -1;
        if (rc == 1 && seq >= s->floor) {
            s->stray = seq;
            s->stray_off = s->hdr_size;
        }
    }
    return 0;
}

/* A stray run (scan_chain) that recovery may replay: it is in file 'i',
 * at the start of the file (its header's write never became durable, or
 * was never made), and it goes on from the last record of 'newest', the
 * chain that is replayed last.  Such records were written after that
 * chain, in order, by a switch to file 'i'; acknowledged or not, they
 * hold whole commits that follow it. */
static int stray_follows(const struct scan *s, int i, int newest)
{
    uint64_t next = s[newest].nrec ? s[newest].last_seq + 1 : s[newest].first_seq;

    return i != newest && s[i].stray && s[i].nrec == 0 && s[i].stray_off == s[i].hdr_size &&
           s[i].psize == s[newest].psize && s[i].stray == next;
}

/* What recovery holds while it runs: the journal files (fd[0] is the
 * locked journal-0), the scan of each and of a stray run (see
 * stray_follows), the file replayed last ('newest', -1: none holds a
 * chain), the file of the stray run replayed after it ('strayf', -1:
 * none), the highest sequence number seen ('top') and data.mdb. */
struct recovery {
    const char *dir;
    int fd[2], data_fd, newest, strayf;
    struct scan s[2], run;
    uint64_t top;
    unsigned char *buf;         /* a record read (rec_read), 'cap' bytes */
    size_t cap;
};

/* A read, write or sync of recovery failed (errno): logged. */
static int recover_io(const struct recovery *r)
{
    mic_logger_write(MIC_LEVEL_ERROR, NULL, "journal recovery failed", "dir", r->dir,
            "error", strerror(errno), NULL);
    return MIC_EIO;
}

/* Open dir/journal-0 (created if missing) and take the store's lock, an
 * exclusive flock of it.  MIC_OK, MIC_EBUSY (another process holds it) or
 * MIC_EIO; logged. */
static int recover_lock(struct recovery *r)
{
    if ((r->fd[0] = open_file(r->dir, 0)) < 0)
        return recover_io(r);
    if (flock(r->fd[0], LOCK_EX | LOCK_NB)) {
        if (errno != EWOULDBLOCK)
            return recover_io(r);
        mic_logger_write(MIC_LEVEL_ERROR, NULL, "another process has the store open", "dir", r->dir, NULL);
        return MIC_EBUSY;
    }
    return MIC_OK;
}

/* Scan both files without writing anything: their headers and chains, the
 * highest sequence number any of them uses, the file whose chain starts
 * last.  MIC_OK or MIC_EIO (logged). */
static int recover_scan(struct recovery *r)
{
    char path[PATH_MAX];

    for (int i = 0; i < 2; i++) {
        struct scan *s = &r->s[i];
        snprintf(path, sizeof path, "%s/journal-%d", r->dir, i);
        if (i == 1 && (r->fd[i] = open(path, O_RDONLY | O_CLOEXEC)) < 0 && errno != ENOENT)
            return recover_io(r);
        if (r->fd[i] >= 0 && scan_file(r->fd[i], s, -1, &r->buf, &r->cap))
            return recover_io(r);
        if (!s->valid)
            continue;
        if (s->first_seq > r->top)
            r->top = s->first_seq;
        if (s->floor > r->top + 1)
            r->top = s->floor - 1;
        if (s->nrec && s->last_seq > r->top)
            r->top = s->last_seq;
        if (s->first_seq && (r->newest < 0 || s->first_seq > r->s[r->newest].first_seq))
            r->newest = i;
    }
    return MIC_OK;
}

/* Records past a file's chain: a run that goes on from the newest chain is
 * replayed after it (a switch whose header write never became durable,
 * or, before issue 29's fix, was never made): it is scanned here and
 * becomes r->strayf.  Any other would be dropped silently by the replay,
 * and may hold acknowledged commits, so the store is refused.  MIC_OK or
 * MIC_EIO (logged). */
static int recover_strays(struct recovery *r)
{
    char path[PATH_MAX], n[32];

    for (int i = 0; i < 2; i++) {
        const struct scan *s = &r->s[i];
        if (!s->stray)
            continue;
        if (r->newest >= 0 && stray_follows(r->s, i, r->newest) && r->strayf < 0) {
            r->strayf = i;
            r->run.size = s->size;
            r->run.psize = s->psize;
            if (scan_chain(r->fd[i], &r->run, s->stray_off, s->stray, -1, &r->buf, &r->cap))
                return recover_io(r);
            if (r->run.last_seq > r->top)
                r->top = r->run.last_seq;
            continue;
        }
        snprintf(n, sizeof n, "%llu", (unsigned long long)s->stray);
        snprintf(path, sizeof path, "journal-%d", i);
        mic_logger_write(MIC_LEVEL_ERROR, NULL, "journal: a file holds records that follow no chain "
                "(refusing to open the store)", "dir", r->dir, "file", path, "seq", n, NULL);
        return MIC_EIO;
    }
    return MIC_OK;
}

/* Open data.mdb for the replay.  MIC_OK with r->data_fd -1 when there is
 * none (a journal alone is ignored, with a warning), or MIC_EIO (logged). */
static int recover_open_data(struct recovery *r)
{
    char path[PATH_MAX];

    snprintf(path, sizeof path, "%s/data.mdb", r->dir);
    if ((r->data_fd = open(path, O_RDWR | O_CLOEXEC)) >= 0)
        return MIC_OK;
    if (errno != ENOENT)
        return recover_io(r);
    mic_logger_write(MIC_LEVEL_WARN, NULL, "journal without data.mdb: ignored", "dir", r->dir, NULL);
    return MIC_OK;
}

/* Nonzero if file 'older' holds a chain that ends just before the chain of
 * file 'newest' starts, at the same page size: it is replayed first. */
static int leads_into(const struct scan *s, int older, int newest)
{
    return s[older].valid && s[older].first_seq && s[older].nrec &&
           s[older].last_seq + 1 == s[newest].first_seq && s[older].psize == s[newest].psize;
}

/* Rewrite into data.mdb, in commit order, the base meta pages and records
 * of the older file when it leads into the newest, then the newest's,
 * then the stray run that goes on from it; adds the records rewritten to
 * *replayed and sets *last_txnid to the txnid of the last commit
 * replayed.  MIC_OK or MIC_EIO (logged). */
static int recover_replay(struct recovery *r, uint64_t *replayed, uint64_t *last_txnid)
{
    const struct scan *nw = &r->s[r->newest];
    int older = leads_into(r->s, !r->newest, r->newest) ? !r->newest : -1;

    for (int pass = 0; pass < 2; pass++) {
        int i = pass == 0 ? older : r->newest;
        if (i < 0)
            continue;
        free(r->s[i].base);
        if (scan_file(r->fd[i], &r->s[i], r->data_fd, &r->buf, &r->cap))
            return recover_io(r);
        *replayed += r->s[i].nrec;
    }
    *last_txnid = nw->nrec ? nw->last_txnid : nw->base_txnid;
    if (r->strayf >= 0) {
        char path[PATH_MAX], n[32];
        const struct scan *s = &r->s[r->strayf];
        uint64_t found = r->run.nrec;
        r->run.nrec = 0;
        if (scan_chain(r->fd[r->strayf], &r->run, s->stray_off, s->stray, r->data_fd, &r->buf, &r->cap))
            return recover_io(r);
        if (r->run.nrec != found) {
            errno = EIO; /* the file changed under recovery */
            return recover_io(r);
        }
        *replayed += r->run.nrec;
        *last_txnid = r->run.last_txnid;
        snprintf(n, sizeof n, "%llu", (unsigned long long)r->run.nrec);
        snprintf(path, sizeof path, "journal-%d", r->strayf);
        mic_logger_write(MIC_LEVEL_WARN, NULL, "journal: replayed records written after a header that "
                "does not lead to them", "file", path, "records", n, NULL);
    }
    return MIC_OK;
}

/* Check data.mdb's meta pages after the replay: the one of txnid 'last'
 * (LMDB picks it by its parity, journal.h invariant 4) holds it, and the
 * other none newer.  MIC_OK, MIC_ENOMEM, or MIC_EIO (logged). */
static int recover_check_meta(struct recovery *r, uint64_t last)
{
    unsigned psize = r->s[r->newest].psize;
    unsigned char *meta = malloc(2 * (size_t)psize);
    uint64_t t;
    int rc = MIC_EIO;

    if (!meta)
        return MIC_ENOMEM;
    if (pread_full(r->data_fd, meta, 2 * (size_t)psize, 0)) {
        rc = recover_io(r);
        goto out;
    }
    if (meta_txnid(meta + (last & 1) * psize, &t) || t != last) {
        mic_logger_write(MIC_LEVEL_ERROR, NULL, "journal: the replayed store does not end at the "
                "journal's last commit (refusing to open it)", "dir", r->dir, NULL);
        goto out;
    }
    /* The base pages put both meta pages back to the file's first commit
     * and every record after it rewrote its own: a meta page newer than
     * the last durable commit (one that never reached the journal) cannot
     * be left.  Checked all the same, since LMDB would open it. */
    if (meta_txnid(meta + (!(last & 1)) * psize, &t) || t > last) {
        mic_logger_write(MIC_LEVEL_ERROR, NULL, "journal: a meta page of data.mdb is newer than the "
                "journal's last commit (refusing to open it)", "dir", r->dir, NULL);
        goto out;
    }
    rc = MIC_OK;
out:
    free(meta);
    return rc;
}

int mic_jnl_recover(const char *dir, int *lock_fd, uint64_t *next_seq, uint64_t *replayed)
{
    struct recovery r = {.dir = dir, .fd = {-1, -1}, .data_fd = -1, .newest = -1, .strayf = -1};
    uint64_t last;
    int rc;

    *lock_fd = -1;
    *next_seq = 1;
    *replayed = 0;
    if ((rc = recover_lock(&r)) || (rc = recover_scan(&r)) || (rc = recover_strays(&r)))
        goto out;
    *next_seq = r.top + 1;
    if (r.newest < 0)
        goto out; /* no chain: nothing to replay */
    if ((rc = recover_open_data(&r)) || r.data_fd < 0)
        goto out;
    if ((rc = recover_replay(&r, replayed, &last)) || (rc = recover_check_meta(&r, last)))
        goto out;
    if (fdatasync(r.data_fd)) {
        rc = recover_io(&r);
        goto out;
    }
    if (*replayed) {
        char n[32];
        snprintf(n, sizeof n, "%llu", (unsigned long long)*replayed);
        mic_logger_write(MIC_LEVEL_INFO, NULL, "journal replayed", "records", n, NULL);
    }
out:
    if (rc == MIC_OK) {
        *lock_fd = r.fd[0];
        r.fd[0] = -1;
    }
    for (int i = 0; i < 2; i++) {
        free(r.s[i].base);
        if (r.fd[i] >= 0)
            close(r.fd[i]);
    }
    if (r.data_fd >= 0)
        close(r.data_fd);
    free(r.buf);
    return rc;
}

int mic_jnl_disable(const char *dir, int lock_fd)
{
    char path[PATH_MAX];
    int fd;

    snprintf(path, sizeof path, "%s/journal-1", dir);
    if ((fd = open(path, O_RDWR | O_CLOEXEC)) >= 0) {
        int bad = ftruncate(fd, 0) || fsync(fd);
        close(fd);
        if (bad)
            goto io;
    } else if (errno != ENOENT) {
        goto io;
    }
    if (ftruncate(lock_fd, 0) || fsync(lock_fd))
        goto io;
    return MIC_OK;
io:
    mic_logger_write(MIC_LEVEL_ERROR, NULL, "journal: cannot empty its files", "dir", dir,
            "error", strerror(errno), NULL);
    return MIC_EIO;
}
