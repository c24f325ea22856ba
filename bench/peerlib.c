/*
 * bench/peerlib.c - helpers shared by the peer drivers; see peerlib.h.
 */
#define _GNU_SOURCE
#include "peerlib.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NS_PER_S    1000000000ull

/* Pieces of one event object, as bench/loadgen.c builds them. */
#define EV_TOPIC    "\",\"topic\":\""
#define EV_TYPE     "\",\"event_type\":\"bench.created\","
#define EV_PAD      ",\"pad\":\""
#define EV_END      "\"}}"

/* Lock-free, so the signal handler may store it. */
static atomic_int stop_requested;
static atomic_int log_budget;
static const char *log_prog = "peer";

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

void peer_request_stop(int why)
{
    int zero = 0;

    atomic_compare_exchange_strong(&stop_requested, &zero, why);
}

int peer_stop_reason(void)
{
    return atomic_load_explicit(&stop_requested, memory_order_relaxed);
}

bool peer_stopping(uint64_t deadline_ns)
{
    if (atomic_load_explicit(&stop_requested, memory_order_relaxed))
        return true;
    if (peer_now_ns() >= deadline_ns) {
        peer_request_stop(1);
        return true;
    }
    return false;
}

static void on_signal(int sig)
{
    (void)sig;
    peer_request_stop(2);
}

void peer_signals(bool interrupt)
{
    struct sigaction sa = {.sa_handler = on_signal};

    sigemptyset(&sa.sa_mask);
    sa.sa_flags = interrupt ? 0 : SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

void peer_log_init(const char *prog, int budget)
{
    log_prog = prog;
    atomic_store(&log_budget, budget);
}

void peer_say(const char *fmt, ...)
{
    char line[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s\n", log_prog, line);
}

bool peer_may_log(void)
{
    int left = atomic_fetch_sub_explicit(&log_budget, 1, memory_order_relaxed);

    if (left == 1)
        peer_say("(further error messages suppressed)");
    return left > 1;
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

static int dbl_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

size_t peer_rank(size_t n, unsigned pct)
{
    return (n * pct + 99) / 100 - 1;
}

void peer_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;

        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

int peer_num(const char *s, long lo, long hi, long *out)
{
    char *e;
    long v;

    errno = 0;
    v = strtol(s, &e, 10);
    if (errno || e == s || *e || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

void peer_lat_init(struct peer_lat *l, long cap)
{
    if (cap < 1)
        cap = 1;
    l->ms = calloc((size_t)cap, sizeof *l->ms);
    l->cap = l->ms ? cap : 0;
    atomic_init(&l->n, 0);
}

void peer_lat_add(struct peer_lat *l, double ms)
{
    long i = atomic_fetch_add_explicit(&l->n, 1, memory_order_relaxed);

    if (i < l->cap)
        l->ms[i] = ms;
}

void peer_lat_pct(struct peer_lat *l, double *p50, double *p99)
{
    long n = atomic_load(&l->n);

    if (n > l->cap)
        n = l->cap;
    if (n <= 0) {
        *p50 = *p99 = NAN;
        return;
    }
    qsort(l->ms, (size_t)n, sizeof *l->ms, dbl_cmp);
    *p50 = l->ms[peer_rank((size_t)n, 50)];
    *p99 = l->ms[peer_rank((size_t)n, 99)];
}

void peer_json_ms(const char *name, double v)
{
    if (isnan(v))
        printf(",\"%s\":null", name);
    else
        printf(",\"%s\":%.3f", name, v);
}

void peer_head_print(const struct peer_head *h)
{
    printf("{\"peer\":");
    peer_json_str(stdout, h->peer);
    printf(",\"version\":");
    peer_json_str(stdout, h->version);
    printf(",\"durability\":");
    peer_json_str(stdout, h->durability);
    printf(",\"workload\":\"W%d\",\"events\":%lld,\"seconds\":%.3f,\"events_per_s\":%.1f",
           h->workload, h->events, h->seconds,
           h->seconds > 0 ? (double)h->events / h->seconds : 0.0);
    peer_json_ms("p50_ms", h->p50_ms);
    peer_json_ms("p99_ms", h->p99_ms);
    printf(",\"duplicates\":%lld,\"missing\":%lld,\"order_violations\":%lld",
           h->dups, h->missing, h->disorder);
}

const struct option peer_options[] = {
    {"addr", required_argument, NULL, P_ADDR},
    {"workload", required_argument, NULL, P_WORKLOAD},
    {"events", required_argument, NULL, P_EVENTS},
    {"producers", required_argument, NULL, P_PRODUCERS},
    {"batch", required_argument, NULL, P_BATCH},
    {"workers", required_argument, NULL, P_WORKERS},
    {"max", required_argument, NULL, P_MAX},
    {"aggregates", required_argument, NULL, P_AGGREGATES},
    {"per-aggregate", required_argument, NULL, P_PER_AGG},
    {"payload-bytes", required_argument, NULL, P_PAYLOAD},
    {"max-seconds", required_argument, NULL, P_SECONDS},
    {"help", no_argument, NULL, P_HELP},
    {NULL, 0, NULL, 0},
};

int peer_workload(const char *s)
{
    if (strlen(s) != 2 || (s[0] != 'W' && s[0] != 'w') || s[1] < '1' || s[1] > '5')
        return 0;
    return s[1] - '0';
}
