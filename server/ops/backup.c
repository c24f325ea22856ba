/* backup.c - online backups (backup.h).
 *
 * A backup's life: mic_backup_start makes the pipe and the ring and starts
 * the copy thread and the pump thread; the HTTP side drains the ring with
 * mic_backup_read; mic_backup_close ends its part.  The backup is freed
 * by whichever of the three (HTTP side, copy thread, pump thread) lets go
 * last ('refs').
 *
 * Per backup, 'lock' guards the ring (start, len), 'eof', the copy's
 * result, 'waiting', 'cancel' and 'ended'; the pump waits on 'space' while
 * the ring is full.  Only the pump writes into the free part of the ring
 * and only the reader reads from its filled part, so the bytes themselves
 * move without the lock; 'start' and 'len' change under it.
 *
 * Ownership of the descriptors: the pipe's read end is the pump's (it
 * closes it when it ends: that is what makes a copy whose reader went
 * away fail with EPIPE), the write end the copy thread's (closed when the
 * copy returned: the pump then reads the end of the stream).
 *
 * A stalled client: the pump waits for room in a full ring no longer than
 * 'stall_us' after the reader last took bytes (mic_backup_read); past it
 * the backup is 'stalled', and ends as a cancelled one does (the pump
 * closes the pipe, the copy fails with EPIPE and its read transaction is
 * released), while the reader answers FAILED from then on, so the body is
 * cut short.  A client that takes no bytes does not call the reader
 * either: its connection is cut by libmicrohttpd's timeout (routes.c sets
 * it to the stall timeout plus a second for a backup's connection).
 *
 * Globally, 'glock' guards the list of running backups (a backup is
 * running until both its threads ended), 'shutting' and the counters;
 * 'gdone' is signalled when a backup stops running. */
#define _GNU_SOURCE
#include "backup.h"

#include "core/buf.h"
#include "core/err.h"
#include "core/logger.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RING (1u << 20)
#define RATE_STEP (64u << 10)

/* The monotonic clock in µs: the pace of --backup-rate (the same clock
 * as the pump's timed waits; micd's own clock is for stored times). */
static int64_t mono_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

struct mic_backup {
    mic_store *store;
    void (*wake)(void *arg);
    void *wake_arg;
    int rfd, wfd;
    pthread_mutex_t lock;
    pthread_cond_t space;
    char *ring;
    size_t start, len;      /* the filled part: len bytes from start */
    int eof;                /* the pump read the end of the pipe (or failed) */
    int read_err;           /* ... because a read failed (errno) */
    int copy_done, copy_rc, copy_err; /* mic_store_copy_fd's result */
    int waiting;            /* the reader answered AGAIN: wake it */
    int cancel;             /* the HTTP side is gone, or micd stops */
    int stopping;           /* micd stops */
    int ended;              /* the reader was handed the whole copy */
    int stalled;            /* ended: no bytes taken for stall_us, the ring full */
    int refs;               /* HTTP side + threads still holding it */
    uint64_t rate;          /* bytes a second at most, 0 = no limit */
    uint64_t pumped;        /* bytes the pump has read so far */
    int64_t t0_us;          /* when the backup began (mono_us) */
    int64_t stall_us;       /* --backup-stall-timeout, 0: none */
    int64_t taken_us;       /* when the reader last took bytes (or t0_us) */
    /* under glock */
    int threads;            /* threads still running */
    struct mic_backup *next; /* in the list of running backups */
};

static pthread_mutex_t glock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gdone = PTHREAD_COND_INITIALIZER;
static struct mic_backup *running;
static int nrunning, shutting;
static uint64_t n_ok, n_gone, n_failed, n_stalled, n_refused, n_bytes;

static void unref(struct mic_backup *b)
{
    int last;

    pthread_mutex_lock(&b->lock);
    last = --b->refs == 0;
    pthread_mutex_unlock(&b->lock);
    if (!last)
        return;
    pthread_cond_destroy(&b->space);
    pthread_mutex_destroy(&b->lock);
    free(b->ring);
    free(b);
}

/* A thread of 'b' is done with the copy: when it is the last, 'b' no
 * longer runs (its slot is free).  The thread unrefs 'b' after. */
static void stop_running(struct mic_backup *b)
{
    pthread_mutex_lock(&glock);
    if (--b->threads == 0) {
        struct mic_backup **p = &running;
        while (*p && *p != b)
            p = &(*p)->next;
        if (*p)
            *p = b->next;
        nrunning--;
        pthread_cond_broadcast(&gdone);
    }
    pthread_mutex_unlock(&glock);
}

/* The timed waits of the pump: the monotonic time 'us' as a deadline. */
static void mono_deadline(int64_t us, struct timespec *ts)
{
    ts->tv_sec = (time_t)(us / 1000000);
    ts->tv_nsec = (long)(us % 1000000) * 1000;
}

/* Wake the reader if it waits.  With b->lock held. */
static void wake_reader(struct mic_backup *b)
{
    if (b->waiting && !b->cancel) {
        b->waiting = 0;
        b->wake(b->wake_arg);
    }
}

static void *copy_main(void *arg)
{
    struct mic_backup *b = arg;
    int err = 0, rc = mic_store_copy_fd(b->store, b->wfd, &err);

    pthread_mutex_lock(&b->lock);
    b->copy_done = 1;
    b->copy_rc = rc;
    b->copy_err = err;
    pthread_mutex_unlock(&b->lock);
    /* The read transaction is gone: this thread's part of the slot is
     * given back before the pump can read the end, so a client that has
     * the whole copy may start the next backup at once. */
    stop_running(b);
    close(b->wfd); /* the pump reads the end */
    unref(b);
    return NULL;
}

static void *pump_main(void *arg)
{
    struct mic_backup *b = arg;

    for (;;) {
        size_t at, room;
        ssize_t n;

        pthread_mutex_lock(&b->lock);
        /* A full ring: the reader takes the bytes, or the stall timeout
         * ends the backup ('taken_us' moves on with each take). */
        while (b->len == RING && !b->cancel) {
            struct timespec ts;

            if (!b->stall_us) {
                pthread_cond_wait(&b->space, &b->lock);
                continue;
            }
            if (mono_us() - b->taken_us >= b->stall_us) {
                b->stalled = 1;
                b->cancel = 1;
                break;
            }
            mono_deadline(b->taken_us + b->stall_us, &ts);
            pthread_cond_timedwait(&b->space, &b->lock, &ts);
        }
        /* --backup-rate: no byte before its time (a cancel wakes this). */
        while (b->rate && !b->cancel) {
            int64_t due = b->t0_us + (int64_t)((double)b->pumped * 1e6 / (double)b->rate);
            int64_t now = mono_us();
            struct timespec ts;

            if (now >= due)
                break;
            mono_deadline(due, &ts);
            pthread_cond_timedwait(&b->space, &b->lock, &ts);
        }
        if (b->cancel) {
            int stalled = b->stalled;

            pthread_mutex_unlock(&b->lock);
            if (stalled) {
                char secs[24];

                snprintf(secs, sizeof secs, "%lld", (long long)(b->stall_us / 1000000));
                mic_logger_write(MIC_LEVEL_WARN, NULL, "backup stalled: its client took no bytes for "
                        "--backup-stall-timeout; the copy ends, the body is cut short",
                        "seconds", secs, NULL);
            }
            break;
        }
        /* The free part after the filled one, up to the ring's end. */
        at = (b->start + b->len) % RING;
        room = at >= b->start ? RING - at : b->start - at;
        if (room > RING - b->len)
            room = RING - b->len;
        if (b->rate && room > RATE_STEP)
            room = RATE_STEP; /* paced in small steps, not a MiB at a time */
        pthread_mutex_unlock(&b->lock);

        n = read(b->rfd, b->ring + at, room);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int err = n < 0 ? errno : 0;
            /* The end (the copy has given its slot back) or a failed
             * read: the slot is free before the reader learns it. */
            close(b->rfd);
            stop_running(b);
            pthread_mutex_lock(&b->lock);
            b->eof = 1;
            b->read_err = err;
            wake_reader(b);
            pthread_mutex_unlock(&b->lock);
            unref(b);
            return NULL;
        }
        pthread_mutex_lock(&b->lock);
        b->len += (size_t)n;
        b->pumped += (uint64_t)n;
        wake_reader(b);
        pthread_mutex_unlock(&b->lock);
    }
    /* Cancelled (or stalled): a copy still writing now fails with EPIPE
     * and ends, and its read transaction with it. */
    close(b->rfd);
    stop_running(b);
    unref(b);
    return NULL;
}

int mic_backup_start(mic_backup **out, mic_store *s, uint64_t rate, int stall_s,
                     void (*wake)(void *arg), void *arg)
{
    struct mic_backup *b;
    pthread_attr_t attr;
    pthread_t t;
    int fds[2], rc;

    pthread_mutex_lock(&glock);
    rc = shutting ? MIC_ENOTREADY : nrunning >= MIC_BACKUPS_MAX ? MIC_ECONFLICT : MIC_OK;
    if (rc == MIC_OK)
        nrunning++; /* the slot is ours; given back below on failure */
    else if (rc == MIC_ECONFLICT)
        n_refused++;
    pthread_mutex_unlock(&glock);
    if (rc)
        return rc;
    if (!(b = calloc(1, sizeof *b)))
        goto fail_slot;
    if (!(b->ring = malloc(RING)))
        goto fail_free;
    if (pipe2(fds, O_CLOEXEC)) {
        mic_logger_write(MIC_LEVEL_ERROR, NULL, "backup: cannot make a pipe", "error", strerror(errno),
                NULL);
        rc = MIC_EIO;
        goto fail_free;
    }
    b->rfd = fds[0];
    b->wfd = fds[1];
    b->store = s;
    b->wake = wake;
    b->wake_arg = arg;
    b->rate = rate;
    b->t0_us = mono_us();
    b->taken_us = b->t0_us;
    b->stall_us = stall_s > 0 ? (int64_t)stall_s * 1000000 : 0;
    pthread_mutex_init(&b->lock, NULL);
    {
        pthread_condattr_t ca; /* timed waits (rate, stall) on the monotonic clock */

        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&b->space, &ca);
        pthread_condattr_destroy(&ca);
    }
    b->refs = 3;    /* HTTP side, copy thread, pump thread */
    b->threads = 2;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* The pump first: if the copy thread cannot be had, the pump reads
     * the end of the pipe (closed below) and ends by itself. */
    if (pthread_create(&t, &attr, pump_main, b)) {
        pthread_attr_destroy(&attr);
        close(b->rfd);
        close(b->wfd);
        pthread_cond_destroy(&b->space);
        pthread_mutex_destroy(&b->lock);
        goto fail_thread;
    }
    pthread_mutex_lock(&glock);
    b->next = running;
    running = b;
    pthread_mutex_unlock(&glock);
    if (pthread_create(&t, &attr, copy_main, b)) {
        pthread_attr_destroy(&attr);
        mic_logger_write(MIC_LEVEL_ERROR, NULL, "backup: cannot start a thread", NULL);
        pthread_mutex_lock(&b->lock);
        b->copy_done = 1;
        b->copy_rc = MIC_EIO;
        pthread_mutex_unlock(&b->lock);
        stop_running(b); /* the copy thread's part */
        close(b->wfd);
        unref(b);
        mic_backup_close(b);
        return MIC_EIO;
    }
    pthread_attr_destroy(&attr);
    mic_logger_write(MIC_LEVEL_INFO, NULL, "backup started", NULL);
    *out = b;
    return MIC_OK;
fail_thread:
    mic_logger_write(MIC_LEVEL_ERROR, NULL, "backup: cannot start a thread", NULL);
    rc = MIC_EIO;
fail_free:
    free(b->ring);
    free(b);
fail_slot:
    pthread_mutex_lock(&glock);
    nrunning--;
    pthread_cond_broadcast(&gdone);
    pthread_mutex_unlock(&glock);
    return rc ? rc : MIC_ENOMEM;
}

ssize_t mic_backup_read(mic_backup *b, char *buf, size_t max)
{
    ssize_t ret;

    pthread_mutex_lock(&b->lock);
    if (b->stopping || b->stalled) {
        ret = MIC_BACKUP_FAILED;
    } else if (b->len) {
        size_t n = b->len < max ? b->len : max, first = RING - b->start;

        if (first > n)
            first = n;
        /* The filled part is the reader's: the pump writes elsewhere. */
        memcpy(buf, b->ring + b->start, first);
        memcpy(buf + first, b->ring, n - first);
        b->start = (b->start + n) % RING;
        b->len -= n;
        b->taken_us = mono_us();
        pthread_cond_signal(&b->space);
        ret = (ssize_t)n;
    } else if (b->eof) {
        ret = b->copy_done && b->copy_rc == MIC_OK && !b->read_err ? MIC_BACKUP_END
                                                                     : MIC_BACKUP_FAILED;
        if (ret == MIC_BACKUP_END)
            b->ended = 1;
    } else {
        b->waiting = 1;
        ret = MIC_BACKUP_AGAIN;
    }
    pthread_mutex_unlock(&b->lock);
    if (ret > 0) {
        pthread_mutex_lock(&glock);
        n_bytes += (uint64_t)ret;
        pthread_mutex_unlock(&glock);
    }
    return ret;
}

void mic_backup_close(mic_backup *b)
{
    const char *result;
    uint64_t *counter;

    if (!b)
        return;
    pthread_mutex_lock(&b->lock);
    if (b->ended) {
        result = "ok";
        counter = &n_ok;
    } else if (b->stalled || (b->stall_us && b->len && mono_us() - b->taken_us >= b->stall_us)) {
        /* ... or its connection timed out first, the ring not yet full:
         * bytes were there, none taken for the timeout. */
        result = "stalled";
        counter = &n_stalled;
    } else if (b->stopping || (b->copy_done && b->copy_rc != MIC_OK) || b->read_err) {
        result = "failed";
        counter = &n_failed;
    } else {
        result = "client_gone";
        counter = &n_gone;
    }
    b->cancel = 1;
    b->waiting = 0;
    pthread_cond_broadcast(&b->space);
    pthread_mutex_unlock(&b->lock);
    pthread_mutex_lock(&glock);
    (*counter)++;
    pthread_mutex_unlock(&glock);
    mic_logger_write(!strcmp(result, "failed") || !strcmp(result, "stalled") ? MIC_LEVEL_WARN
                                                                     : MIC_LEVEL_INFO,
            NULL, "backup ended",
            "result", result, NULL);
    unref(b);
}

void mic_backups_shutdown(void)
{
    pthread_mutex_lock(&glock);
    shutting = 1;
    for (struct mic_backup *b = running; b; b = b->next) {
        pthread_mutex_lock(&b->lock);
        b->stopping = 1;
        wake_reader(b); /* it then answers FAILED */
        b->cancel = 1;
        pthread_cond_broadcast(&b->space);
        pthread_mutex_unlock(&b->lock);
    }
    /* The pumps stop and close their pipes, so the copies fail (EPIPE)
     * at their next write and end. */
    while (nrunning > 0)
        pthread_cond_wait(&gdone, &glock);
    pthread_mutex_unlock(&glock);
}

void mic_backup_metrics(struct mic_buf *out)
{
    uint64_t ok, gone, failed, stalled, refused, bytes;
    int nrun;

    pthread_mutex_lock(&glock);
    ok = n_ok;
    gone = n_gone;
    failed = n_failed;
    stalled = n_stalled;
    refused = n_refused;
    bytes = n_bytes;
    nrun = nrunning;
    pthread_mutex_unlock(&glock);
    mic_buf_printf(out,
        "# HELP mic_backups_total Backups (GET /v1/backup) by how they ended: ok (the whole "
        "copy was sent), client_gone (the client left first), failed (the copy failed, or "
        "micd stopped), stalled (the client took no bytes for --backup-stall-timeout: ended, "
        "its body cut short), refused (another backup was running: 409).\n"
        "# TYPE mic_backups_total counter\n"
        "mic_backups_total{result=\"ok\"} %llu\n"
        "mic_backups_total{result=\"client_gone\"} %llu\n"
        "mic_backups_total{result=\"failed\"} %llu\n"
        "mic_backups_total{result=\"stalled\"} %llu\n"
        "mic_backups_total{result=\"refused\"} %llu\n"
        "# HELP mic_backup_bytes_total Bytes of backups handed to the HTTP layer.\n"
        "# TYPE mic_backup_bytes_total counter\n"
        "mic_backup_bytes_total %llu\n"
        "# HELP mic_backups_running Backups whose copy or pump thread still runs (each holds "
        "an LMDB read transaction while its copy runs).\n"
        "# TYPE mic_backups_running gauge\n"
        "mic_backups_running %d\n",
        (unsigned long long)ok, (unsigned long long)gone, (unsigned long long)failed,
        (unsigned long long)stalled, (unsigned long long)refused, (unsigned long long)bytes, nrun);
}
