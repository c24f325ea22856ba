/* powerkit.h - what tests/fault/powercut.c (T2, power loss) and
 * tests/fault/ioerr.c (T3, I/O errors) share: a micd process they start
 * themselves (optionally under build/fault/iofault.so), a load of
 * publishers and one acking worker that records every 2xx with its
 * CLOCK_MONOTONIC receive time, the rebuild of a store directory from an
 * iofault recording as a power cut would leave it, and the checker that
 * opens such a directory and compares it with what was acknowledged.
 *
 * The failure model of a rebuild (see tests/fault/README.md, "Power loss
 * and I/O errors"): the store files are rebuilt from an empty directory;
 * a write is durable once an fsync or fdatasync of its file that began
 * after it completed has succeeded (a write on an O_DSYNC descriptor is
 * durable by itself); ftruncate and fallocate are size changes made
 * durable the same way.  A failed sync makes durable nothing it covered,
 * and no later sync of that file does either (Linux drops the dirty pages
 * of a failed writeback: the PostgreSQL fsync lesson), so those writes
 * stay "maybe on disk" forever.  Every write not durable at the cut may
 * be lost, kept whole, or torn (a prefix, or some of its 512- or
 * 4096-byte sectors), in any order.  lock.mdb is not rebuilt (LMDB
 * rebuilds it at every first open).  A file exists once it was first
 * written before the cut (directory entries are taken as durable).
 *
 * Errors: functions return 0 or -1 and say why on stderr; the programs
 * decide what fails.  Nothing here sleeps where it can wait for a
 * condition: waits poll with a bounded deadline. */
#ifndef MIC_POWERKIT_H
#define MIC_POWERKIT_H

#include "iofault.h"

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- micd processes ---- */

struct pk_micd {
    pid_t pid;          /* 0 when not running */
    int port;
    int status;         /* wait status once it ended (valid when exited) */
    int exited;
    char dir[256];      /* store directory */
    char logpath[300];  /* its stdout and stderr (appended) */
    char url[64];
};

/* Start 'bin' on m->dir (which must be set) listening on 127.0.0.1:0,
 * with the extra flags 'args' (NULL-terminated, may be NULL) and the
 * extra environment strings 'env' ("NAME=VALUE", NULL-terminated, may be
 * NULL: only the child gets them).  Waits up to 'ms' for it to listen.
 * Returns 0 (listening: m->port, m->url), 1 (it ended first: m->status),
 * or -1 (it could not be started, or did not listen in time: killed). */
int pk_micd_start(struct pk_micd *m, const char *bin, const char *const *args,
                  const char *const *env, int ms);

/* Wait up to 'ms' for m to end by itself.  Returns 1 (ended: m->status),
 * 0 (still running). */
int pk_micd_wait(struct pk_micd *m, int ms);

/* SIGTERM, then wait up to 60 s (SIGKILL after that).  Returns its exit
 * status (0..255), or -1 when a signal ended it or it had to be killed. */
int pk_micd_stop(struct pk_micd *m);

/* SIGKILL and reap (for a test that gives up). */
void pk_micd_kill(struct pk_micd *m);

/* 1 when m's log contains 'text'. */
int pk_log_has(const struct pk_micd *m, const char *text);

/* "build/micd"-style paths from the environment, or the defaults. */
const char *pk_env(const char *name, const char *dflt);

/* ---- The load and what it was answered ---- */

enum pk_kind { PK_PUB = 1, PK_ACK };

struct pk_ans {
    int kind;
    char event_id[40];
    int64_t seq;        /* ack: the delivery's seq */
    uint64_t t_ns;      /* CLOCK_MONOTONIC when the answer was received */
    long status;        /* HTTP status (0: no answer) */
};

struct pk_record {
    struct pk_ans *a;   /* every answer, sorted by t_ns after pk_load_run */
    size_t n, cap;
    json_t *sent;       /* event_id -> the event object as sent (every attempt) */
    /* Figures. */
    size_t pubs_2xx, pubs_fail, acks_ok, claims;
    long first_fail_status;   /* the first non-2xx publish's status */
    char first_fail_code[64];
    size_t by_status[6];      /* publish answers by class: [0] none, [2] 2xx, [4], [5] */
    size_t n507, n500;
};

#define PK_TOPIC_A "pc.a"
#define PK_TOPIC_B "pc.b"
#define PK_GROUP "pc-work"

struct pk_load_opts {
    int ms;             /* how long to run (the load stops sooner once micd ends) */
    int publishers;     /* threads: 1 single unversioned, 2 batches of versioned
                         * aggregates, 3 single versioned (one aggregate a
                         * thread, resent until answered 2xx) */
    int worker;         /* 1: one thread claims and acks on PK_GROUP */
    unsigned seed;
    int max_events;     /* stop publishing after about this many (0: no limit) */
    const struct pk_micd *m;    /* its pid is watched: the load stops when it ends */
    const char *stop_path;      /* when set, the load also stops once this file exists */
};

/* Create the topics and PK_GROUP on m (must answer 2xx). */
int pk_setup(const struct pk_micd *m);

/* Run the load against m and fill *rec (pk_record_init first).  Returns 0
 * or -1 (a thread could not start). */
void pk_record_init(struct pk_record *rec);
void pk_record_fini(struct pk_record *rec);
int pk_load_run(const struct pk_load_opts *o, struct pk_record *rec);

/* ---- Rebuilding a store directory from a recording ---- */

struct pk_rebuild;

/* Prepare to rebuild from 'log'.  Returns NULL on memory. */
struct pk_rebuild *pk_rebuild_new(const struct iof_log *log);
void pk_rebuild_free(struct pk_rebuild *b);

/* Advance the durable state to cut point 'p' (records [0, p) happened;
 * p never goes back between calls), then write 'dir' (emptied first):
 * the durable state, then, for 'unsynced_p' > 0, each write not durable
 * at the cut applied with that probability in a random order, whole or
 * torn (random 'seed').  Returns 0 or -1. */
int pk_rebuild_cut(struct pk_rebuild *b, size_t p, const char *dir, double unsynced_p,
                   unsigned seed, size_t *n_unsynced, size_t *n_applied);

/* ---- Checking a rebuilt (or restarted) store ---- */

struct pk_check {
    /* Outcome of the start. */
    int started, refused, crashed;
    /* Publishes answered 2xx before the cut time, and how they were found. */
    size_t acked, found, lost, mismatched, unexpected;
    size_t unavailable;       /* acked, in a store micd refused to open */
    /* Acks answered before the cut: checked, still dispatched, redelivered. */
    size_t acks, ack_redelivered;
    size_t events_in_store;   /* events the range read returned */
    /* Events in the store whose every publish answer (at any time) was
     * 507: a refusal that stored them anyway.  Not part of pk_check_ok:
     * the programs that make a disk full judge it themselves. */
    size_t refused_stored;
    char refused_id[40];      /* the first of them */
    int range_error;          /* the range read failed (a 5xx) */
    int stop_status;          /* micd's exit status at SIGTERM */
    int verify_status;        /* micd --verify's exit status, -2 when not run */
    char why[256];            /* the first problem, for the report */
};

/* Start 'bin' (no interposer) on 'dir' and check it against 'rec' for
 * the answers received before 't_cut_ns' (UINT64_MAX: all).  Never fails
 * by itself: everything it saw is in *c. */
void pk_check_dir(const char *bin, const char *dir, const struct pk_record *rec,
                  uint64_t t_cut_ns, struct pk_check *c);

/* 1 when c shows no promise broken: it started (or refused cleanly when
 * 'refuse_ok'), nothing acked is lost, mismatched or unexpected, no acked
 * delivery handed out again, the range read worked, a clean stop, and
 * --verify (when run) passed. */
int pk_check_ok(const struct pk_check *c, int refuse_ok);

/* Remove a directory and everything in it. */
void pk_rmdir(const char *dir);

/* CLOCK_MONOTONIC in ns. */
uint64_t pk_now_ns(void);

/* xorshift64*: the programs' only randomness, seeded for reproduction
 * (*s 0 takes a fixed seed). */
uint64_t pk_rnd(uint64_t *s);

/* 1 when 'bin --help' mentions "--verify". */
int pk_has_verify(const char *bin);

/* A scenario's verdict: ok until the first pk_fail, whose message
 * (printf-style) it keeps; later failures are not recorded. */
struct pk_outcome {
    int ok;
    char why[400];
};
void pk_fail(struct pk_outcome *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
