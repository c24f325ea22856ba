/*
 * bench/peerlib.h - what bench/loadgen.c and the peer drivers
 * (bench/peers/, on their skeleton bench/peers/driver.h) share: the
 * benchmark event JSON, one shape for MIC and every peer, and the clock.
 */
#ifndef PEERLIB_H
#define PEERLIB_H

#include <stddef.h>
#include <stdint.h>

/* CLOCK_MONOTONIC in ns. */
uint64_t peer_now_ns(void);

/* Decimal digits of 'v' at 'p' (no NUL); returns how many. */
size_t peer_u64_put(char *p, uint64_t v);

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

#endif
