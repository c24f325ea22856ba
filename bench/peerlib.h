/*
 * bench/peerlib.h - helpers shared by the peer drivers bench/peer_*.c:
 * the clock, the stop flag, stderr messages, the benchmark event JSON,
 * nearest-rank percentiles, JSON strings and integer options.
 */
#ifndef PEERLIB_H
#define PEERLIB_H

#include <getopt.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* CLOCK_MONOTONIC in ns. */
uint64_t peer_now_ns(void);

/* Decimal digits of 'v' at 'p' (no NUL); returns how many. */
size_t peer_u64_put(char *p, uint64_t v);

/* Ask every thread to stop; the first 'why' wins (1 deadline, 2 signal). */
void peer_request_stop(int why);

/* Why the run was asked to stop, 0 while it goes on. */
int peer_stop_reason(void);

/* True once a stop was requested or 'deadline_ns' passed (then reason 1). */
bool peer_stopping(uint64_t deadline_ns);

/* Ignore SIGPIPE; SIGINT and SIGTERM request stop reason 2 and, with
 * 'interrupt', make blocking calls fail with EINTR instead of restarting. */
void peer_signals(bool interrupt);

/* Prefix stderr lines with "<prog>: " and allow 'budget' rate-limited ones. */
void peer_log_init(const char *prog, int budget);

/* One line to stderr, prefixed. */
void peer_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* True while error chatter is still allowed; says once when it runs out. */
bool peer_may_log(void);

/* Pieces of an event that drivers look for when they read one back. */
#define PEER_EV_AGG      "\"aggregate_type\":\"bench\",\"aggregate_id\":\"a"
#define PEER_EV_VER      "\"aggregate_version\":"
#define PEER_EV_PAYLOAD  "\"payload\":{\"seq\":"
#define PEER_EV_TS       ",\"ts_us\":"

/* The topic of the peers' events (MIC's load generator names its own). */
#define PEER_TOPIC "bench"

/* Upper bound of peer_event_put's output. */
size_t peer_event_max(size_t head_len, size_t topic_len, size_t payload_bytes);

/* The benchmark event, one shape for MIC and every peer: event 'n' as JSON
 * at 'out' (no NUL): 'head' ({"event_id":"<x>-), n, 'topic', type
 * bench.created, aggregate_id a<agg> when agg >= 0 and aggregate_version
 * 'ver' when also ver >= 0, payload seq n, ts_us when nonzero, padding up
 * to about 'payload_bytes'.  Returns its length. */
size_t peer_event_put(char *out, const char *head, size_t head_len, uint64_t n,
                      const char *topic, long agg, long ver, uint64_t ts_us,
                      size_t payload_bytes);

/* Index of the nearest-rank 'pct' percentile in n > 0 sorted values. */
size_t peer_rank(size_t n, unsigned pct);

/* Write 's' to 'f' as a JSON string. */
void peer_json_str(FILE *f, const char *s);

/* Parse all of 's' as an integer in [lo, hi] into *out; 0 or -1. */
int peer_num(const char *s, long lo, long hi, long *out);

/* Latencies in ms; slot i is written by whoever drew i from n (slots
 * beyond cap are dropped). */
struct peer_lat {
    double *ms;
    long cap;
    atomic_long n;
};

/* Room for 'cap' latencies (none when memory runs out). */
void peer_lat_init(struct peer_lat *l, long cap);

/* Record one latency in ms. */
void peer_lat_add(struct peer_lat *l, double ms);

/* Sort 'l' and give its nearest-rank p50 and p99; NAN when it is empty. */
void peer_lat_pct(struct peer_lat *l, double *p50, double *p99);

/* The fields every result line starts with; NAN latencies print null. */
struct peer_head {
    const char *peer, *version, *durability;
    int workload;
    long long events, dups, missing, disorder;
    double seconds, p50_ms, p99_ms;
};

/* Print '{"peer":..,"version":..,"durability":..,"workload":"Wn","events":..,
 * "seconds":..,"events_per_s":..,"p50_ms":..,"p99_ms":..,"duplicates":..,
 * "missing":..,"order_violations":..' (no closing brace) to stdout. */
void peer_head_print(const struct peer_head *h);

/* Print ',"name":<ms with 3 decimals>' to stdout, null when v is NAN. */
void peer_json_ms(const char *name, double v);

/* The common long options; getopt_long returns a P_* code for each. */
enum { P_ADDR = 'a', P_WORKLOAD = 'w', P_EVENTS = 'e', P_PRODUCERS = 'p', P_BATCH = 'b',
       P_WORKERS = 'k', P_MAX = 'm', P_AGGREGATES = 'A', P_PER_AGG = 'K', P_PAYLOAD = 'P',
       P_SECONDS = 's', P_HELP = 'h' };
extern const struct option peer_options[];

/* 1..5 for "W1".."W5" (or "w1".."w5"), 0 for anything else. */
int peer_workload(const char *s);

#endif
