/*
 * bench/peers/driver.h - the skeleton every peer driver of bench/peers.py
 * runs on.
 *
 * Owns what the drivers share: the command line (one table of options and
 * the --help made from it), the run id and the head of the benchmark
 * event, the stop flag (--max-seconds, SIGINT/SIGTERM or a failure), the
 * thread pool, stderr messages, the latency collections, the one JSON line
 * on stdout and the exit status.  A driver, bench/peers/NAME.c built as
 * build/peer_NAME, is one struct drv_peer: how to open and close its
 * server, one callback per workload W1..W5 and the fields its report line
 * adds; its header comment says how each workload maps onto the peer.
 *
 * A run (drv_main):
 *   options (exit 2 on a usage error, 0 after --help), signals, the
 *   deadline (--max-seconds from the start), the run id and event head
 *   -> peer->open: connect, the version and durability, what the run uses
 *   -> peer->run[W - 1]: the workload; it fills the result of struct drv
 *   -> the report line, unless open or run returned DRV_ABORT
 *   -> peer->close, always (it copes with a partial open)
 *   -> exit 0 when the run passed (drv_main says when), 1 otherwise.
 *
 * The report line, the one thing bench/peers.py reads:
 *   {"peer":..,"version":..,"durability":..,"workload":"Wn"  [head fields]
 *    ,"events":..,"seconds":..,"events_per_s":..,"p50_ms":..,"p99_ms":..,
 *    "duplicates":..,"missing":..,"order_violations":..  [tail fields]}
 * where the bracketed parts are the driver's (peer->fields), written with
 * drv_put_*; p50_ms and p99_ms are those of d->lat, null when it is empty.
 *
 * Threads: drv_threads_run is the only place threads start; each item
 * handed to it begins with a struct drv_thread.  What the threads share is
 * the driver's business (atomics, one byte per event, the latency slots).
 */
#ifndef DRIVER_H
#define DRIVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "peerlib.h"

/* ---- Options ---- */

/* The integer options, in the order of --help. */
enum drv_opt {
    DRV_O_EVENTS, DRV_O_PRODUCERS, DRV_O_BATCH, DRV_O_WORKERS, DRV_O_MAX,
    DRV_O_AGGREGATES, DRV_O_PER_AGG, DRV_O_PAYLOAD, DRV_O_SECONDS, DRV_O_N
};

/* The command line, after defaults and checks. */
struct drv_opts {
    const char *addr;               /* --addr as given */
    char host[256];                 /* with a HOST:PORT peer: HOST (no []) */
    int port;                       /* and PORT */
    int workload;                   /* 1..5 */
    long events;                    /* W4: aggregates x per_agg */
    long producers, batch, workers, max, aggregates, per_agg, payload_bytes, max_seconds;
};

/* A driver's own bounds for one option (the server's limits). */
struct drv_bound {
    enum drv_opt opt;
    long lo, hi;
};

/* ---- Latencies ---- */

/* Latencies in ms; slot i is written by whoever drew i from n (slots
 * beyond cap are dropped). */
struct drv_lat {
    double *ms;
    long cap;
    atomic_long n;
};

/* Room for 'cap' latencies (none when memory runs out: then ms is NULL),
 * replacing what 'l' held.  drv_main frees d->lat and d->lat2. */
void drv_lat_init(struct drv_lat *l, long cap);

/* Record one latency in ms. */
void drv_lat_add(struct drv_lat *l, double ms);

/* Record the time from 't0_ns' (peer_now_ns) to now. */
void drv_lat_since(struct drv_lat *l, uint64_t t0_ns);

/* Sort 'l' and give its nearest-rank p50 and p99; NAN when it is empty. */
void drv_lat_pct(struct drv_lat *l, double *p50, double *p99);

/* ---- The driver ---- */

struct drv;
struct drv_thread;

/* What open and run return. */
enum {
    DRV_OK = 0,
    DRV_FAILED = 1,                 /* the run failed: report it, exit 1 */
    DRV_ABORT = 2                   /* nothing worth a report: exit 1 */
};

/* The tallies that fail a run (besides an error, a stop, or a failed
 * open, run or close). */
enum {
    DRV_FAIL_DUPS = 1, DRV_FAIL_MISSING = 2, DRV_FAIL_DISORDER = 4,
    DRV_FAIL_SHORT = 8,             /* events != target */
    DRV_FAIL_ALL = 15
};

/* Where peer->fields is writing: after "workload", or after the counts. */
enum drv_part { DRV_PART_HEAD, DRV_PART_TAIL };

struct drv_peer {
    const char *name;               /* "redis": the report's peer, program peer_redis */
    const char *tag;                /* event ids are "<tag>-<runid>-<n>" */
    const char *addr_arg;           /* "HOST:PORT" (split into o.host, o.port) or another */
    const char *addr_help;          /* what --addr is, one line */
    const char *help;               /* lines after the options in --help, each ending in \n */
    const struct drv_bound *bounds; /* its own bounds, or NULL; ends with hi == 0 */
    long w5_batch;                  /* --batch's default in W5 (0: 100) */
    int log_budget;                 /* error lines drv_may_log allows */
    bool interrupt;                 /* signals make blocking calls fail with EINTR */
    unsigned fail_on;               /* DRV_FAIL_* */
    size_t size;                    /* of its state, which begins with struct drv */
    int (*open)(struct drv *d);
    int (*run[5])(struct drv *d);   /* W1..W5 */
    void (*fields)(struct drv *d, enum drv_part part);
    int (*close)(struct drv *d);    /* nonzero fails the run */
    void (*cancel)(struct drv_thread *t);   /* or NULL: wake a thread when stopping */
};

/* The pool's state (drv_threads_run's; nothing else touches it). */
struct drv_pool {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    long left, ready;
    bool go;
    void (*fn)(struct drv_thread *t);
};

/* The state of a run; the driver's state begins with it, so a callback
 * casts its struct drv * to its own type. */
struct drv {
    const struct drv_peer *peer;
    struct drv_opts o;
    char runid[17];                 /* 16 hex digits, new for every run */
    char ev_head[64];               /* {"event_id":"<tag>-<runid>- */
    size_t ev_head_len, ev_max;     /* ev_max: the longest event drv_event_put writes */
    uint64_t deadline_ns;           /* peer_now_ns() at --max-seconds */
    const char *version, *durability;   /* the report's ("?" while NULL), the driver's storage */
    struct drv_lat lat;             /* per request: the report's p50 and p99 */
    struct drv_lat lat2;            /* the driver's second kind (acks), if any */
    /* The result, filled by the workload. */
    long long events, target, dups, missing, disorder;
    double seconds;
    atomic_long errors;
    int rc;                         /* what open, then run, returned */
    struct drv_pool pool;
};

/* Run the driver 'peer' with the command line (driver.h's header says
 * the steps).  Returns the exit status: 0 when the run passed, or after
 * --help; 1 when it failed (open, run or close failed, an error was
 * counted, the run was stopped, a tally of peer->fail_on is off, or memory
 * ran out); 2 on a usage error (said on stderr with the usage). */
int drv_main(const struct drv_peer *peer, int argc, char **argv);

/* ---- Threads ---- */

/* The head of every item handed to drv_threads_run. */
struct drv_thread {
    struct drv *d;
    long id;                        /* 0..n-1 */
    pthread_t th;                   /* the pool's */
    bool started, ready;
    uint64_t end_ns;
};

/* drv_threads_run's flags. */
enum {
    DRV_READY_FIRST = 1             /* the clock starts once every thread is ready */
};

/* Run fn on n threads, thread i on the item at items + i * size (each
 * begins with a struct drv_thread, filled here), and wait for all of them;
 * at the deadline the run is asked to stop, and once it stops
 * peer->cancel, if any, is called on each thread every 200 ms.  Returns
 * the seconds from the start (with DRV_READY_FIRST: from the moment every
 * thread called drv_thread_ready or ended) to the end of the last thread.
 * With items NULL the threads get bare struct drv_threads of the pool's.
 * A thread that cannot start is an error and stops the run. */
double drv_threads_run(struct drv *d, void *items, size_t size, long n,
                       void (*fn)(struct drv_thread *t), unsigned flags);

/* Say that 't' is set up (connected), and with DRV_READY_FIRST wait until
 * every thread is; once per thread, later calls do nothing. */
void drv_thread_ready(struct drv_thread *t);

/* ---- Stopping ---- */

/* Ask every thread to stop; the first 'why' wins (1 deadline, 2 signal,
 * 3 failure). */
void drv_request_stop(int why);

/* Why the run was asked to stop, 0 while it goes on. */
int drv_stop_reason(void);

/* True once a stop was requested or the deadline passed (then reason 1). */
bool drv_stopping(const struct drv *d);

/* True when the run was stopped by the deadline or a signal. */
bool drv_timed_out(void);

/* ---- Messages ---- */

/* One line to stderr, prefixed "peer_<name>: ". */
void drv_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* True while error lines are still allowed (peer->log_budget); says once
 * when they run out. */
bool drv_may_log(void);

/* ---- Events ---- */

/* The benchmark event 'n' of this run at 'out' (at most d->ev_max bytes,
 * no NUL): peer_event_put with d's head, PEER_TOPIC and --payload-bytes.
 * Returns its length. */
size_t drv_event_put(const struct drv *d, char *out, uint64_t n, long agg, long ver,
                     uint64_t ts_us);

/* ---- Report fields (in peer->fields) ---- */

/* ',"name":v' on stdout. */
void drv_put_long(const char *name, long long v);

/* ',"name":<s as a JSON string>'. */
void drv_put_str(const char *name, const char *s);

/* ',"name":<v with 3 decimals>', or null when v is NAN. */
void drv_put_ms(const char *name, double v);

/* ',"name":<v with 'decimals' decimals>'. */
void drv_put_num(const char *name, double v, int decimals);

/* ',"name":true' or false. */
void drv_put_bool(const char *name, bool v);

#endif
