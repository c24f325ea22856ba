/* iofault.c - an LD_PRELOAD interposer that records what a process writes
 * and syncs on the files of one directory, and injects I/O errors there
 * (built as build/fault/iofault.so; used by tests/fault/powercut.c and
 * tests/fault/ioerr.c against the release build/micd: a sanitizer build
 * wants its own runtime first in the preload order).
 *
 * Environment:
 *   IOFAULT_DIR   the directory whose files are watched (absolute; it
 *                 should exist when the process starts, so that it can be
 *                 made canonical with realpath).  Unset: nothing is
 *                 recorded or injected, every call passes through.
 *   IOFAULT_LOG   the log file (created, truncated).  Format and reader:
 *                 iofault.h.  Unset: nothing is recorded (rules still apply).
 *   IOFAULT       fault rules, separated by ';', each
 *                     OP:FILE:WHEN:ERR[:minoff=N][:maxoff=N][:extend][:zero|:data]
 *                 OP    write, pwrite (pwrite64), writev, pwritev
 *                       (pwritev64, pwritev2), ftruncate, fallocate
 *                       (posix_fallocate), fsync, fdatasync,
 *                       sync_file_range, msync; anywrite (every one of the
 *                       write-like calls), anysync (fsync and fdatasync)
 *                 FILE  a substring of the file's path relative to
 *                       IOFAULT_DIR ("journal" matches journal-0 and
 *                       journal-1, "data.mdb"), or "*" for any watched
 *                       file (msync has no file: only "*" matches it)
 *                 WHEN  N        the Nth matching call only (from 1)
 *                       N-M      the Nth to the Mth
 *                       after=N  every matching call after the first N
 *                       while=PATH  every matching call while PATH exists
 *                                (PATH without ':')
 *                 ERR   EIO, ENOSPC, EDQUOT, EROFS, or a number; or
 *                       mark=PATH (no failure: PATH is created just before
 *                       the call is made, so that a while=PATH rule listed
 *                       after this one applies to that very call) or
 *                       mark-after=PATH (PATH is created once the call
 *                       returned); a mark rule fires once, at the first
 *                       call its WHEN selects, and is logged (IOF_MARK);
 *                       or delay=MS (no failure: the call is made MS
 *                       milliseconds late, a slow disk)
 *                 minoff=N  only calls at file offset >= N match (pwrite,
 *                       pwritev, fallocate); maxoff=N: only calls at an
 *                       offset below N (the two may be given: "minoff=8192"
 *                       skips LMDB's meta pages, "maxoff=8192" picks them)
 *                 extend  only a call that makes the file longer matches
 *                       (a write or fallocate ending past the file's size,
 *                       an ftruncate to more than it): what a full
 *                       filesystem refuses, while overwrites still succeed
 *                 zero  only a write of zeros matches; data: only a write
 *                       with a nonzero byte (neither matches other calls)
 *                 e.g. "fdatasync:journal:7:EIO" (the 7th fdatasync of a
 *                 journal file fails with EIO),
 *                 "pwrite:data.mdb:after=200:ENOSPC",
 *                 "anywrite:journal:3:mark=/tmp/sw:maxoff=1;
 *                  anywrite:journal:while=/tmp/sw:ENOSPC:extend" (from the
 *                 third write at offset 0 of a journal file on, every
 *                 write that extends a journal file fails with ENOSPC,
 *                 until /tmp/sw is removed).
 *                 Each rule counts its own matching calls, over every
 *                 file it matches.  An injected failure does not make the
 *                 real call: it returns -1 with errno set, and is logged
 *                 with IOF_F_INJECTED.  Every later call on that file is
 *                 logged too, so a reader counts the calls made after the
 *                 first injected failure (a retried fsync shows there).
 *                 A malformed rule aborts the process at start-up.
 *
 * What is watched: write, pwrite, pwrite64, writev, pwritev, pwritev64,
 * pwritev2, ftruncate(64), fallocate(64), posix_fallocate(64), fsync,
 * fdatasync, sync_file_range, msync (every call, any address), sync and
 * syncfs (as a sync of every file).  A descriptor is mapped to its path
 * the first time one of these calls uses it (readlink of /proc/self/fd/N,
 * and fcntl F_GETFL for O_DSYNC/O_SYNC); close, dup2, dup3 and the open
 * family forget the mapping of the descriptor they free or return, so a
 * reused number is looked up again.  (A descriptor closed by libc itself,
 * as fclose does, is not seen: the files watched here are not stdio's.)
 *
 * Threads: one mutex orders the records; the log is written with the real
 * writev, inside the mutex, one record per call (nothing is buffered: a
 * process that exits at once, or is killed, leaves every record of the
 * calls it completed).  The descriptor table is read without the mutex
 * (atomics); lookups take it. */
#define _GNU_SOURCE
#include "iofault.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define FD_MAX 65536
#define FD_UNKNOWN 0
#define FD_OTHER -1
#define FD_DSYNC 0x10000
#define RULES_MAX 16

/* The real functions (dlsym RTLD_NEXT). */
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev64)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev2)(int, const struct iovec *, int, off_t, int);
static int (*real_ftruncate)(int, off_t);
static int (*real_ftruncate64)(int, off_t);
static int (*real_fallocate)(int, int, off_t, off_t);
static int (*real_fallocate64)(int, int, off_t, off_t);
static int (*real_posix_fallocate)(int, off_t, off_t);
static int (*real_posix_fallocate64)(int, off_t, off_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_sync_file_range)(int, off_t, off_t, unsigned int);
static int (*real_msync)(void *, size_t, int);
static void (*real_sync)(void);
static int (*real_syncfs)(int);
static int (*real_close)(int);
static int (*real_dup2)(int, int);
static int (*real_dup3)(int, int, int);
static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_openat64)(int, const char *, int, ...);
static int (*real_creat)(const char *, mode_t);
static int (*real_creat64)(const char *, mode_t);

enum kind {
    K_WRITE = 1 << 0, K_PWRITE = 1 << 1, K_WRITEV = 1 << 2, K_PWRITEV = 1 << 3,
    K_FTRUNCATE = 1 << 4, K_FALLOCATE = 1 << 5, K_FSYNC = 1 << 6, K_FDATASYNC = 1 << 7,
    K_SFR = 1 << 8, K_MSYNC = 1 << 9,
};
#define K_ANYWRITE (K_WRITE | K_PWRITE | K_WRITEV | K_PWRITEV | K_FTRUNCATE | K_FALLOCATE)

enum { MARK_NONE, MARK_BEFORE, MARK_AFTER };
enum { ZERO_ANY, ZERO_ONLY, DATA_ONLY };

struct rule {
    unsigned kinds;
    char file[64];          /* "" = any watched file */
    int any;                /* "*" */
    long from, to;          /* calls from..to (1-based, inclusive); to < 0: no end */
    char while_path[256];   /* active while this exists */
    long long minoff, maxoff;   /* maxoff 0: no bound */
    int extend;             /* only calls that make the file longer */
    int zero;               /* ZERO_* */
    int err;
    int mark;               /* MARK_*: create mark_path instead of failing */
    char mark_path[256];
    long delay_ms;          /* > 0: delay the call instead of failing it */
    int marked;             /* the mark rule fired (under 'lock') */
    long count;             /* matching calls so far (under 'lock') */
};

/* What inject() knows of a call beyond its kind, file and offset. */
struct callinfo {
    int fd;
    long long len;          /* bytes written, or the new size (ftruncate) */
    const struct iovec *iov;    /* the bytes of a write (NULL: not a write) */
    int cnt;
    int zero;               /* -1 not looked at yet, else all_zero() */
    long delay_ms;          /* set by inject(): sleep this long before the call */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static char dir[PATH_MAX];
static size_t dirlen;
static int active;          /* IOFAULT_DIR set */
static int logfd = -1;
static uint64_t next_seq;
static _Atomic int fdstate[FD_MAX];
static char *names[IOF_FILES_MAX];
static int nnames;
static struct rule rules[RULES_MAX];
static int nrules;

/* ---- Set-up ---- */

#define LOAD(name) (real_##name = dlsym(RTLD_NEXT, #name))

static void die(const char *what, const char *arg)
{
    static const char pre[] = "iofault: ";
    real_write(2, pre, sizeof pre - 1);
    real_write(2, what, strlen(what));
    real_write(2, arg, strlen(arg));
    real_write(2, "\n", 1);
    abort();
}

static int parse_err(const char *s)
{
    static const struct { const char *n; int e; } t[] = {
        {"EIO", EIO}, {"ENOSPC", ENOSPC}, {"EDQUOT", EDQUOT}, {"EROFS", EROFS},
    };
    char *end;
    long v;

    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(s, t[i].n))
            return t[i].e;
    v = strtol(s, &end, 10);
    return *s && !*end && v > 0 && v < 4096 ? (int)v : -1;
}

static unsigned parse_kinds(const char *s)
{
    static const struct { const char *n; unsigned k; } t[] = {
        {"write", K_WRITE}, {"pwrite", K_PWRITE}, {"writev", K_WRITEV},
        {"pwritev", K_PWRITEV}, {"ftruncate", K_FTRUNCATE}, {"fallocate", K_FALLOCATE},
        {"fsync", K_FSYNC}, {"fdatasync", K_FDATASYNC}, {"sync_file_range", K_SFR},
        {"msync", K_MSYNC}, {"anywrite", K_ANYWRITE}, {"anysync", K_FSYNC | K_FDATASYNC},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(s, t[i].n))
            return t[i].k;
    return 0;
}

/* One rule "OP:FILE:WHEN:ERR[:option]..." (modified in place). */
static void parse_rule(char *s)
{
    char *f[10] = {0}, *p = s, *end;
    struct rule *r;
    int n = 0;

    if (nrules == RULES_MAX)
        die("too many rules at ", s);
    r = &rules[nrules];
    memset(r, 0, sizeof *r);
    while (n < 10) {
        f[n++] = p;
        if (!(p = strchr(p, ':')))
            break;
        *p++ = 0;
    }
    if (n < 4 || n > 9 || p || !(r->kinds = parse_kinds(f[0])))
        die("bad rule (OP:FILE:WHEN:ERR[:minoff=N][:maxoff=N][:extend][:zero|:data]): ", s);
    if (!strcmp(f[1], "*"))
        r->any = 1;
    else if (!*f[1] || strlen(f[1]) >= sizeof r->file)
        die("bad FILE in rule: ", f[1]);
    else
        strcpy(r->file, f[1]);
    r->to = -1;
    if (!strncmp(f[2], "after=", 6)) {
        r->from = strtol(f[2] + 6, &end, 10) + 1;
        if (*end || r->from < 1 || !f[2][6])
            die("bad after=N: ", f[2]);
    } else if (!strncmp(f[2], "while=", 6)) {
        if (!f[2][6] || strlen(f[2] + 6) >= sizeof r->while_path)
            die("bad while=PATH: ", f[2]);
        strcpy(r->while_path, f[2] + 6);
        r->from = 1;
    } else {
        r->from = strtol(f[2], &end, 10);
        if (r->from < 1 || end == f[2])
            die("bad WHEN: ", f[2]);
        if (*end == '-' && end[1]) {
            r->to = strtol(end + 1, &end, 10);
            if (r->to < r->from)
                die("bad WHEN range: ", f[2]);
        } else if (*end == '-') {
            end++;
        } else {
            r->to = r->from;
        }
        if (*end)
            die("bad WHEN: ", f[2]);
    }
    if (!strncmp(f[3], "mark=", 5) || !strncmp(f[3], "mark-after=", 11)) {
        const char *path = strchr(f[3], '=') + 1;
        r->mark = f[3][4] == '=' ? MARK_BEFORE : MARK_AFTER;
        if (!*path || strlen(path) >= sizeof r->mark_path)
            die("bad mark=PATH: ", f[3]);
        strcpy(r->mark_path, path);
    } else if (!strncmp(f[3], "delay=", 6)) {
        r->delay_ms = strtol(f[3] + 6, &end, 10);
        if (*end || r->delay_ms < 1 || r->delay_ms > 600000)
            die("bad delay=MS: ", f[3]);
    } else if ((r->err = parse_err(f[3])) < 0) {
        die("bad ERR: ", f[3]);
    }
    for (int i = 4; i < n; i++) {
        long long *to = !strncmp(f[i], "minoff=", 7) ? &r->minoff
                      : !strncmp(f[i], "maxoff=", 7) ? &r->maxoff : NULL;
        if (!strcmp(f[i], "extend")) {
            r->extend = 1;
            continue;
        }
        if (!strcmp(f[i], "zero") || !strcmp(f[i], "data")) {
            r->zero = f[i][0] == 'z' ? ZERO_ONLY : DATA_ONLY;
            continue;
        }
        if (!to || !f[i][7])
            die("bad option: ", f[i]);
        *to = strtoll(f[i] + 7, &end, 10);
        if (*end || *to < 0)
            die("bad offset option: ", f[i]);
    }
    nrules++;
}

static void init(void)
{
    const char *d, *l, *rs;

    LOAD(write); LOAD(pwrite); LOAD(pwrite64); LOAD(writev); LOAD(pwritev);
    LOAD(pwritev64); LOAD(pwritev2); LOAD(ftruncate); LOAD(ftruncate64);
    LOAD(fallocate); LOAD(fallocate64); LOAD(posix_fallocate); LOAD(posix_fallocate64);
    LOAD(fsync); LOAD(fdatasync); LOAD(sync_file_range); LOAD(msync); LOAD(sync);
    LOAD(syncfs); LOAD(close); LOAD(dup2); LOAD(dup3); LOAD(open); LOAD(open64);
    LOAD(openat); LOAD(openat64); LOAD(creat); LOAD(creat64);
    if (!(d = getenv("IOFAULT_DIR")) || !*d)
        return;
    if (!realpath(d, dir)) {
        if (strlen(d) >= sizeof dir)
            die("IOFAULT_DIR too long: ", d);
        strcpy(dir, d);
    }
    dirlen = strlen(dir);
    while (dirlen > 1 && dir[dirlen - 1] == '/')
        dir[--dirlen] = 0;
    if ((l = getenv("IOFAULT_LOG")) && *l) {
        logfd = real_open(l, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
        if (logfd < 0)
            die("cannot open IOFAULT_LOG ", l);
        /* Out of the way of the low numbers the process expects to get. */
        int hi = fcntl(logfd, F_DUPFD_CLOEXEC, 900);
        if (hi >= 0) {
            real_close(logfd);
            logfd = hi;
        }
    }
    if ((rs = getenv("IOFAULT")) && *rs) {
        char *copy = strdup(rs), *save = NULL;
        if (!copy)
            die("out of memory", "");
        for (char *t = strtok_r(copy, ";", &save); t; t = strtok_r(NULL, ";", &save))
            if (*t)
                parse_rule(t);
        free(copy);
    }
    active = 1;
}

static inline void ready(void)
{
    pthread_once(&once, init);
}

__attribute__((constructor)) static void iofault_ctor(void)
{
    ready();
}

/* ---- The log (under 'lock') ---- */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void log_out(struct iovec *v, int n)
{
    size_t total = 0;

    for (int i = 0; i < n; i++)
        total += v[i].iov_len;
    while (total) {
        ssize_t w = real_writev(logfd, v, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die("cannot write the log", "");
        total -= (size_t)w;
        while (w > 0) {
            if ((size_t)w >= v->iov_len) {
                w -= (ssize_t)v->iov_len;
                v++;
                n--;
            } else {
                v->iov_base = (char *)v->iov_base + w;
                v->iov_len -= (size_t)w;
                w = 0;
            }
        }
    }
}

/* Append one record: 'h' (seq, time and magic filled here) and the first
 * h->datalen bytes of the 'cnt' buffers 'iov'.  Returns its seq. */
static uint64_t log_rec(struct iof_rec *h, const struct iovec *iov, int cnt)
{
    static const unsigned char pad[8];
    struct iovec small[18], *v = small;
    size_t left = h->datalen;
    int n = 1;

    h->magic = IOF_MAGIC;
    h->seq = next_seq++;
    h->t_ns = now_ns();
    if (logfd < 0)
        return h->seq;
    if (cnt + 2 > 18 && !(v = malloc((size_t)(cnt + 2) * sizeof *v)))
        die("out of memory", "");
    v[0].iov_base = h;
    v[0].iov_len = sizeof *h;
    for (int i = 0; i < cnt && left; i++) {
        size_t k = iov[i].iov_len < left ? iov[i].iov_len : left;
        v[n].iov_base = iov[i].iov_base;
        v[n++].iov_len = k;
        left -= k;
    }
    if (h->datalen % 8) { /* the next header stays 8-byte aligned */
        v[n].iov_base = (void *)pad;
        v[n++].iov_len = 8 - h->datalen % 8;
    }
    log_out(v, n);
    if (v != small)
        free(v);
    return h->seq;
}

/* ---- Descriptors ---- */

/* The file index of 'rel', logging its name the first time. */
static int name_index(const char *rel)
{
    struct iof_rec h;
    struct iovec v;

    for (int i = 0; i < nnames; i++)
        if (!strcmp(names[i], rel))
            return i;
    if (nnames == IOF_FILES_MAX || !(names[nnames] = strdup(rel)))
        return -1;
    memset(&h, 0, sizeof h);
    h.op = IOF_NAME;
    h.file = nnames;
    h.datalen = strlen(rel);
    v.iov_base = names[nnames];
    v.iov_len = h.datalen;
    log_rec(&h, &v, 1);
    return nnames++;
}

/* fd's state: FD_OTHER, or 1 + file index (| FD_DSYNC). */
static int fd_state(int fd)
{
    char link[64], path[PATH_MAX];
    ssize_t n;
    int st, fl, idx;

    if (!active || fd < 0 || fd >= FD_MAX)
        return FD_OTHER;
    if ((st = atomic_load_explicit(&fdstate[fd], memory_order_acquire)) != FD_UNKNOWN)
        return st;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    n = readlink(link, path, sizeof path - 1);
    st = FD_OTHER;
    if (n > 0) {
        path[n] = 0;
        if ((size_t)n > dirlen + 1 && !strncmp(path, dir, dirlen) && path[dirlen] == '/' &&
            !strstr(path, " (deleted)")) {
            pthread_mutex_lock(&lock);
            idx = name_index(path + dirlen + 1);
            pthread_mutex_unlock(&lock);
            fl = fcntl(fd, F_GETFL);
            if (idx >= 0)
                st = (1 + idx) | (fl >= 0 && (fl & (O_DSYNC | O_SYNC)) ? FD_DSYNC : 0);
        }
    }
    atomic_store_explicit(&fdstate[fd], st, memory_order_release);
    return st;
}

static void fd_forget(int fd)
{
    if (fd >= 0 && fd < FD_MAX)
        atomic_store_explicit(&fdstate[fd], FD_UNKNOWN, memory_order_release);
}

static inline int st_file(int st)
{
    return (st & 0xffff) - 1;
}

/* ---- Rules (under 'lock') ---- */

static int all_zero(const struct iovec *iov, int cnt, size_t len)
{
    for (int i = 0; i < cnt && len; i++) {
        const unsigned char *p = iov[i].iov_base;
        size_t k = iov[i].iov_len < len ? iov[i].iov_len : len;
        for (size_t j = 0; j < k; j++)
            if (p[j])
                return 0;
        len -= k;
    }
    return 1;
}

/* 1 when the call makes its file longer (see "extend"). */
static int extends(unsigned kind, long long off, const struct callinfo *ci)
{
    struct stat sb;

    if (!ci || ci->fd < 0 || fstat(ci->fd, &sb))
        return 0;
    if (kind == K_FTRUNCATE)
        return ci->len > (long long)sb.st_size;
    if (!(kind & K_ANYWRITE))
        return 0;
    return off + ci->len > (long long)sb.st_size;
}

/* Create rule r's mark file and log it (IOF_MARK, for the call on file
 * 'file'). */
static void mark_make(const struct rule *r, int file)
{
    struct iof_rec h;
    struct iovec v;
    int fd = real_open(r->mark_path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);

    if (fd < 0)
        die("cannot create the mark file ", r->mark_path);
    real_close(fd);
    memset(&h, 0, sizeof h);
    h.op = IOF_MARK;
    h.file = file;
    h.aux = r->mark == MARK_AFTER;
    h.datalen = strlen(r->mark_path);
    v.iov_base = (void *)r->mark_path;
    v.iov_len = h.datalen;
    log_rec(&h, &v, 1);
}

/* The errno to inject for this call, or 0.  The mark rules it selects
 * make their file now (mark=) or set their bit in *after (mark-after=:
 * marks_after makes them once the call returned). */
static int inject(unsigned kind, int file, long long off, struct callinfo *ci, unsigned *after)
{
    const char *name = file >= 0 ? names[file] : NULL;
    int err = 0;

    *after = 0;
    for (int i = 0; i < nrules; i++) {
        struct rule *r = &rules[i];
        struct stat sb;
        int on;
        if (!(r->kinds & kind) || off < r->minoff || (r->maxoff && off >= r->maxoff))
            continue;
        if (!r->any && (!name || !strstr(name, r->file)))
            continue;
        if (r->any && file < 0 && kind != K_MSYNC)
            continue;
        if (r->zero) {
            if (!ci || !ci->iov)
                continue;
            if (ci->zero < 0)
                ci->zero = all_zero(ci->iov, ci->cnt, (size_t)ci->len);
            if (ci->zero != (r->zero == ZERO_ONLY))
                continue;
        }
        if (r->extend && !extends(kind, off, ci))
            continue;
        r->count++;
        if (err && !r->mark && !r->delay_ms)
            continue;
        if (r->while_path[0])
            on = stat(r->while_path, &sb) == 0;
        else
            on = r->count >= r->from && (r->to < 0 || r->count <= r->to);
        if (!on)
            continue;
        if (r->delay_ms) {
            if (ci)
                ci->delay_ms += r->delay_ms;
        } else if (!r->mark) {
            err = r->err;
        } else if (!r->marked) {
            r->marked = 1;
            if (r->mark == MARK_BEFORE)
                mark_make(r, file);
            else
                *after |= 1u << i;
        }
    }
    return err;
}

/* Sleep ci->delay_ms (outside 'lock'). */
static void delay(const struct callinfo *ci)
{
    struct timespec ts = {ci->delay_ms / 1000, (ci->delay_ms % 1000) * 1000000L};

    while (ci->delay_ms > 0 && nanosleep(&ts, &ts) && errno == EINTR)
        ;
}

/* After the call: make the mark files inject() left in 'after'. */
static void marks_after(unsigned after, int file)
{
    if (!after)
        return;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nrules; i++)
        if (after & (1u << i))
            mark_make(&rules[i], file);
    pthread_mutex_unlock(&lock);
}

/* ---- Hooks ---- */


/* The real call behind a hook, with its arguments. */
struct call {
    int fd, cnt, flags, mode;
    const void *buf;
    size_t n;
    const struct iovec *iov;
    off_t off, len;
    ssize_t (*pw)(int, const void *, size_t, off_t);
    ssize_t (*pwv)(int, const struct iovec *, int, off_t);
    int (*tr)(int, off_t);
    int (*fa)(int, int, off_t, off_t);
    int (*pfa)(int, off_t, off_t);
    void *addr;
};

/* A write-like call of 'kind' on fd (state 'st') at 'off' (-1: the
 * descriptor's position) of the 'cnt' buffers 'iov'; 'real' makes the
 * real call.  Logs it and returns its result. */
static ssize_t do_write(int st, unsigned kind, int variant, const struct iovec *iov, int cnt,
                        off_t off, ssize_t (*real)(const struct call *), const struct call *c)
{
    struct iof_rec h;
    struct callinfo ci = {.fd = c->fd, .iov = iov, .cnt = cnt, .zero = -1};
    ssize_t r;
    unsigned after;
    int err, saved;

    for (int i = 0; i < cnt; i++)
        ci.len += (long long)iov[i].iov_len;
    memset(&h, 0, sizeof h);
    h.op = IOF_WRITE;
    h.file = st_file(st);
    h.aux = (uint64_t)variant;
    if (st & FD_DSYNC)
        h.flags |= IOF_F_DSYNC;
    pthread_mutex_lock(&lock);
    err = inject(kind, h.file, off >= 0 ? off : lseek(c->fd, 0, SEEK_CUR), &ci, &after);
    if (err) {
        h.flags |= IOF_F_INJECTED;
        h.err = err;
        h.off = off;
        log_rec(&h, NULL, 0);
        pthread_mutex_unlock(&lock);
        marks_after(after, h.file);
        errno = err;
        return -1;
    }
    pthread_mutex_unlock(&lock);
    delay(&ci);
    r = real(c);
    saved = errno;
    if (r < 0) {
        h.err = saved;
        h.off = off;
    } else {
        if (off < 0) {
            off_t end = lseek(c->fd, 0, SEEK_CUR);
            off = end >= r ? end - r : 0;
        }
        h.off = off;
        h.len = r;
        if (all_zero(iov, cnt, (size_t)r))
            h.flags |= IOF_F_ZERO;
        else
            h.datalen = (uint64_t)r;
    }
    pthread_mutex_lock(&lock);
    log_rec(&h, iov, cnt);
    pthread_mutex_unlock(&lock);
    marks_after(after, h.file);
    errno = saved;
    return r;
}

static ssize_t real_write_c(const struct call *c)
{
    return real_write(c->fd, c->buf, c->n);
}
static ssize_t real_pwrite_c(const struct call *c)
{
    return c->pw(c->fd, c->buf, c->n, c->off);
}
static ssize_t real_writev_c(const struct call *c)
{
    return real_writev(c->fd, c->iov, c->cnt);
}
static ssize_t real_pwritev_c(const struct call *c)
{
    return c->pwv(c->fd, c->iov, c->cnt, c->off);
}
static ssize_t real_pwritev2_c(const struct call *c)
{
    return real_pwritev2(c->fd, c->iov, c->cnt, c->off, c->flags);
}

ssize_t write(int fd, const void *buf, size_t n)
{
    struct call c = {.fd = fd, .buf = buf, .n = n};
    struct iovec v = {(void *)buf, n};
    int st;

    ready();
    if ((st = fd_state(fd)) == FD_OTHER)
        return real_write(fd, buf, n);
    return do_write(st, K_WRITE, IOF_V_WRITE, &v, 1, -1, real_write_c, &c);
}

static ssize_t pwrite_common(ssize_t (*fn)(int, const void *, size_t, off_t), int fd,
                             const void *buf, size_t n, off_t off)
{
    struct call c = {.fd = fd, .buf = buf, .n = n, .off = off, .pw = fn};
    struct iovec v = {(void *)buf, n};
    int st;

    if ((st = fd_state(fd)) == FD_OTHER)
        return fn(fd, buf, n, off);
    return do_write(st, K_PWRITE, IOF_V_PWRITE, &v, 1, off, real_pwrite_c, &c);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    ready();
    return pwrite_common(real_pwrite, fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    ready();
    return pwrite_common(real_pwrite64, fd, buf, n, off);
}

ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
    struct call c = {.fd = fd, .iov = iov, .cnt = cnt};
    int st;

    ready();
    if ((st = fd_state(fd)) == FD_OTHER)
        return real_writev(fd, iov, cnt);
    return do_write(st, K_WRITEV, IOF_V_WRITEV, iov, cnt, -1, real_writev_c, &c);
}

static ssize_t pwritev_common(ssize_t (*fn)(int, const struct iovec *, int, off_t), int fd,
                              const struct iovec *iov, int cnt, off_t off)
{
    struct call c = {.fd = fd, .iov = iov, .cnt = cnt, .off = off, .pwv = fn};
    int st;

    if ((st = fd_state(fd)) == FD_OTHER)
        return fn(fd, iov, cnt, off);
    return do_write(st, K_PWRITEV, IOF_V_PWRITEV, iov, cnt, off, real_pwritev_c, &c);
}

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
    ready();
    return pwritev_common(real_pwritev, fd, iov, cnt, off);
}

ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off_t off)
{
    ready();
    return pwritev_common(real_pwritev64, fd, iov, cnt, off);
}

ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
    struct call c = {.fd = fd, .iov = iov, .cnt = cnt, .off = off, .flags = flags};
    int st;

    ready();
    if ((st = fd_state(fd)) == FD_OTHER)
        return real_pwritev2(fd, iov, cnt, off, flags);
    return do_write(st, K_PWRITEV, IOF_V_PWRITEV, iov, cnt, off, real_pwritev2_c, &c);
}

/* A sync or a size change ('op') of file 'file' (-1: none or every file):
 * 'real' makes the real call, which returns 0 or -1 with errno set, or
 * (posix != 0) 0 or an error number.  'aux' is logged as given, except
 * for IOF_SYNC, whose aux is the counter at its start. */
static int do_call(int file, unsigned kind, int op, uint16_t flags, int64_t off, int64_t len,
                   uint64_t aux, int posix, int (*real)(const struct call *),
                   const struct call *c)
{
    struct iof_rec h;
    /* ftruncate logs its new size as 'off'; fallocate its range. */
    struct callinfo ci = {.fd = c ? c->fd : -1, .len = kind == K_FTRUNCATE ? off : len,
                          .zero = -1};
    unsigned after;
    int r, err, saved;

    memset(&h, 0, sizeof h);
    h.op = (uint16_t)op;
    h.file = file;
    h.flags = flags;
    h.off = off;
    h.len = len;
    h.aux = aux;
    pthread_mutex_lock(&lock);
    if (op == IOF_SYNC)
        h.aux = next_seq;
    err = inject(kind, file, kind == K_FALLOCATE ? off : 0, &ci, &after);
    if (err) {
        h.flags |= IOF_F_INJECTED;
        h.err = err;
        log_rec(&h, NULL, 0);
        pthread_mutex_unlock(&lock);
        marks_after(after, file);
        if (posix)
            return err;
        errno = err;
        return -1;
    }
    pthread_mutex_unlock(&lock);
    if (ci.delay_ms > 0) {
        delay(&ci);
        /* The sync starts now: what was written meanwhile is covered too. */
        pthread_mutex_lock(&lock);
        if (op == IOF_SYNC)
            h.aux = next_seq;
        pthread_mutex_unlock(&lock);
    }
    r = real(c);
    saved = errno;
    if (r)
        h.err = posix ? r : saved;
    pthread_mutex_lock(&lock);
    log_rec(&h, NULL, 0);
    pthread_mutex_unlock(&lock);
    marks_after(after, file);
    errno = saved;
    return r;
}

static int real_trunc_c(const struct call *c)
{
    return c->tr(c->fd, c->len);
}
static int real_falloc_c(const struct call *c)
{
    return c->fa(c->fd, c->mode, c->off, c->len);
}
static int real_pfalloc_c(const struct call *c)
{
    return c->pfa(c->fd, c->off, c->len);
}

static int trunc_common(int (*fn)(int, off_t), int fd, off_t len)
{
    struct call c = {.fd = fd, .len = len, .tr = fn};
    int st = fd_state(fd);

    if (st == FD_OTHER)
        return fn(fd, len);
    return do_call(st_file(st), K_FTRUNCATE, IOF_TRUNC, 0, len, 0, 0, 0, real_trunc_c, &c);
}

int ftruncate(int fd, off_t len)
{
    ready();
    return trunc_common(real_ftruncate, fd, len);
}

int ftruncate64(int fd, off_t len)
{
    ready();
    return trunc_common(real_ftruncate64, fd, len);
}

static int falloc_common(int (*fn)(int, int, off_t, off_t), int fd, int mode, off_t off,
                         off_t len)
{
    struct call c = {.fd = fd, .mode = mode, .off = off, .len = len, .fa = fn};
    int st = fd_state(fd);

    if (st == FD_OTHER)
        return fn(fd, mode, off, len);
    return do_call(st_file(st), K_FALLOCATE, IOF_FALLOC, 0, off, len, (uint64_t)mode, 0,
                   real_falloc_c, &c);
}

int fallocate(int fd, int mode, off_t off, off_t len)
{
    ready();
    return falloc_common(real_fallocate, fd, mode, off, len);
}

int fallocate64(int fd, int mode, off_t off, off_t len)
{
    ready();
    return falloc_common(real_fallocate64, fd, mode, off, len);
}

static int pfalloc_common(int (*fn)(int, off_t, off_t), int fd, off_t off, off_t len)
{
    struct call c = {.fd = fd, .off = off, .len = len, .pfa = fn};
    int st = fd_state(fd);

    if (st == FD_OTHER)
        return fn(fd, off, len);
    return do_call(st_file(st), K_FALLOCATE, IOF_FALLOC, 0, off, len, 0, 1, real_pfalloc_c,
                   &c);
}

int posix_fallocate(int fd, off_t off, off_t len)
{
    ready();
    return pfalloc_common(real_posix_fallocate, fd, off, len);
}

int posix_fallocate64(int fd, off_t off, off_t len)
{
    ready();
    return pfalloc_common(real_posix_fallocate64, fd, off, len);
}

static int real_fsync_c(const struct call *c)
{
    return real_fsync(c->fd);
}
static int real_fdatasync_c(const struct call *c)
{
    return real_fdatasync(c->fd);
}
static int real_sfr_c(const struct call *c)
{
    return real_sync_file_range(c->fd, c->off, c->len, (unsigned)c->flags);
}
static int real_msync_c(const struct call *c)
{
    return real_msync(c->addr, c->n, c->flags);
}
static int real_syncfs_c(const struct call *c)
{
    return real_syncfs(c->fd);
}
static int real_sync_c(const struct call *c)
{
    (void)c;
    real_sync();
    return 0;
}

int fsync(int fd)
{
    struct call c = {.fd = fd};
    int st;

    ready();
    if ((st = fd_state(fd)) == FD_OTHER)
        return real_fsync(fd);
    return do_call(st_file(st), K_FSYNC, IOF_SYNC, IOF_F_FSYNC, 0, 0, 0, 0, real_fsync_c, &c);
}

int fdatasync(int fd)
{
    struct call c = {.fd = fd};
    int st;

    ready();
    if ((st = fd_state(fd)) == FD_OTHER)
        return real_fdatasync(fd);
    return do_call(st_file(st), K_FDATASYNC, IOF_SYNC, 0, 0, 0, 0, 0, real_fdatasync_c, &c);
}

int sync_file_range(int fd, off_t off, off_t n, unsigned int flags)
{
    struct call c = {.fd = fd, .off = off, .len = n, .flags = (int)flags};
    int st;

    ready();
    if ((st = fd_state(fd)) == FD_OTHER)
        return real_sync_file_range(fd, off, n, flags);
    return do_call(st_file(st), K_SFR, IOF_SFR, 0, off, n, flags, 0, real_sfr_c, &c);
}

int msync(void *addr, size_t len, int flags)
{
    struct call c = {.addr = addr, .n = len, .flags = flags};

    ready();
    if (!active)
        return real_msync(addr, len, flags);
    return do_call(-1, K_MSYNC, IOF_MSYNC, 0, (int64_t)(uintptr_t)addr, (int64_t)len,
                   (uint64_t)flags, 0, real_msync_c, &c);
}

int syncfs(int fd)
{
    struct call c = {.fd = fd};

    ready();
    if (!active)
        return real_syncfs(fd);
    return do_call(-1, K_FSYNC, IOF_SYNC, IOF_F_FSYNC, 0, 0, 0, 0, real_syncfs_c, &c);
}

void sync(void)
{
    ready();
    if (!active) {
        real_sync();
        return;
    }
    do_call(-1, K_FSYNC, IOF_SYNC, IOF_F_FSYNC, 0, 0, 0, 0, real_sync_c, NULL);
}

/* ---- Descriptor life ---- */

int close(int fd)
{
    int r;

    ready();
    fd_forget(fd);
    r = real_close(fd);
    fd_forget(fd);
    return r;
}

int dup2(int old, int new)
{
    int r;

    ready();
    r = real_dup2(old, new);
    fd_forget(new);
    return r;
}

int dup3(int old, int new, int flags)
{
    int r;

    ready();
    r = real_dup3(old, new, flags);
    fd_forget(new);
    return r;
}

static mode_t open_mode(int flags, va_list ap)
{
    return (flags & O_CREAT) || (flags & __O_TMPFILE) == __O_TMPFILE ? va_arg(ap, mode_t) : 0;
}

/* open and its kin: the real call with the mode when there is one, then
 * whatever the descriptor number meant before is forgotten (its path is
 * looked up again at its first write). */
#define OPENER(name, real, params, args)        \
    int name params                             \
    {                                           \
        va_list ap;                             \
        mode_t m;                               \
        int fd;                                 \
                                                \
        ready();                                \
        va_start(ap, flags);                    \
        m = open_mode(flags, ap);               \
        va_end(ap);                             \
        fd = real args;                         \
        fd_forget(fd);                          \
        return fd;                              \
    }
OPENER(open, real_open, (const char *path, int flags, ...), (path, flags, m))
OPENER(open64, real_open64, (const char *path, int flags, ...), (path, flags, m))
OPENER(openat, real_openat, (int dfd, const char *path, int flags, ...), (dfd, path, flags, m))
OPENER(openat64, real_openat64, (int dfd, const char *path, int flags, ...), (dfd, path, flags, m))

int creat(const char *path, mode_t m)
{
    int fd;

    ready();
    fd = real_creat(path, m);
    fd_forget(fd);
    return fd;
}

int creat64(const char *path, mode_t m)
{
    int fd;

    ready();
    fd = real_creat64(path, m);
    fd_forget(fd);
    return fd;
}
