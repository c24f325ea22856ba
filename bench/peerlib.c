/*
 * bench/peerlib.c - the benchmark event and the clock; see peerlib.h.
 */
#define _GNU_SOURCE
#include "peerlib.h"

#include <string.h>
#include <time.h>

#define NS_PER_S    1000000000ull

/* Pieces of one event object, as bench/loadgen.c builds them. */
#define EV_TOPIC    "\",\"topic\":\""
#define EV_TYPE     "\",\"event_type\":\"bench.created\","
#define EV_PAD      ",\"pad\":\""
#define EV_END      "\"}}"

uint64_t peer_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

size_t peer_u64_put(char *p, uint64_t v)
{
    char tmp[20];
    size_t n = 0, i;

    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (i = 0; i < n; i++)
        p[i] = tmp[n - 1 - i];
    return n;
}

size_t peer_event_max(size_t head_len, size_t topic_len, size_t payload_bytes)
{
    return head_len + 20 + sizeof EV_TOPIC + topic_len + sizeof EV_TYPE + sizeof PEER_EV_AGG +
           22 + sizeof PEER_EV_VER + 22 +
           sizeof PEER_EV_PAYLOAD + 20 + sizeof PEER_EV_TS + 20 + sizeof EV_PAD + sizeof EV_END +
           payload_bytes;
}

size_t peer_event_put(char *out, const char *head, size_t head_len, uint64_t n,
                      const char *topic, long agg, long ver, uint64_t ts_us,
                      size_t payload_bytes)
{
    size_t used, pad, topic_len = strlen(topic);
    char *p = out;

    memcpy(p, head, head_len);
    p += head_len;
    p += peer_u64_put(p, n);
    memcpy(p, EV_TOPIC, sizeof EV_TOPIC - 1);
    p += sizeof EV_TOPIC - 1;
    memcpy(p, topic, topic_len);
    p += topic_len;
    memcpy(p, EV_TYPE, sizeof EV_TYPE - 1);
    p += sizeof EV_TYPE - 1;
    if (agg >= 0) {
        memcpy(p, PEER_EV_AGG, sizeof PEER_EV_AGG - 1);
        p += sizeof PEER_EV_AGG - 1;
        p += peer_u64_put(p, (uint64_t)agg);
        *p++ = '"';
        *p++ = ',';
        if (ver >= 0) {
            memcpy(p, PEER_EV_VER, sizeof PEER_EV_VER - 1);
            p += sizeof PEER_EV_VER - 1;
            p += peer_u64_put(p, (uint64_t)ver);
            *p++ = ',';
        }
    }
    memcpy(p, PEER_EV_PAYLOAD, sizeof PEER_EV_PAYLOAD - 1);
    p += sizeof PEER_EV_PAYLOAD - 1;
    p += peer_u64_put(p, n);
    if (ts_us) {
        memcpy(p, PEER_EV_TS, sizeof PEER_EV_TS - 1);
        p += sizeof PEER_EV_TS - 1;
        p += peer_u64_put(p, ts_us);
    }
    memcpy(p, EV_PAD, sizeof EV_PAD - 1);
    p += sizeof EV_PAD - 1;
    used = (size_t)(p - out) + sizeof EV_END - 1;
    pad = payload_bytes > used ? payload_bytes - used : 0;
    memset(p, 'x', pad);
    p += pad;
    memcpy(p, EV_END, sizeof EV_END - 1);
    p += sizeof EV_END - 1;
    return (size_t)(p - out);
}
