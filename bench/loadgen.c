/*
 * bench/loadgen.c - closed-loop HTTP/1.1 load generator for POST /v1/events.
 *
 * Owns: the command line of the load generator, the client side of HTTP/1.1
 * (request framing, response parsing with Content-Length, chunked and
 * read-until-close bodies), latency collection,
 * the GET /metrics snapshot before and after the run, and the one-line JSON
 * report on stdout. The JSON shape of a benchmark event is bench/peerlib.c's,
 * the one the peer drivers send.  It talks to the broker only over TCP, so
 * it measures what a real client sees.
 *
 * WHY NOT LIBMIC for the load.  libmic (client/mic.h) is the repository's
 * HTTP/JSON client, and this file keeps its own HTTP/1.1 on purpose: what W1
 * and W2 measure is many concurrent keep-alive connections per thread
 * (--conns spread over --threads epoll loops, one request in flight on
 * each) and each request's latency from its first byte written to its last
 * byte read.  libmic's calls block, one request at a time per handle and
 * thread (libcurl easy handles), so 32 connections would take 32 threads
 * on a 2-core machine, and its per-request work (libcurl, building and
 * parsing JSON with jansson) would be counted as the broker's latency.  The
 * side requests outside the measured load (GET /metrics before and after
 * the run) do go through libmic (metrics_fetch), over https too.
 *
 * DESIGN
 * N keep-alive connections are split across K threads. Each thread owns its
 * connections, its epoll set, its latency array and its tally outright, so
 * the hot path takes no locks. The only shared state is:
 *   - run->next_event: an atomic counter that hands out event numbers B at a
 *     time; each number is handed out exactly once, so "events" in the report
 *     never exceeds --events;
 *   - stop_requested: set by the deadline (--max-seconds) or SIGINT/SIGTERM;
 *   - run->lock/cond/threads_done: how the main thread learns a worker ended,
 *     and worker->progress, which only its worker writes.
 *
 * A connection is a small state machine with one request in flight at most
 * (no pipelining):
 *
 *   IDLE --take work--> CONNECTING --> SENDING --> RECEIVING --response--+
 *     ^                                   ^                               |
 *     +----------- next request ----------+-------------------------------+
 *   429            --> WAITING (Retry-After if <= 1 s, else 50 ms) --> SENDING
 *   lost/closed    --> reconnect at once (or after a backoff when the
 *                      connection never produced a response) --> SENDING
 *   no work / stop --> DONE
 *
 * A resend (429 or reconnect) sends the very same bytes, so event ids do not
 * change and the broker's idempotency makes a resend after a lost response
 * harmless. Requests are built in a per-connection buffer allocated once:
 * the body is written after a reserved gap and the header is copied in front
 * of it, so there is no per-request allocation and no second copy.
 *
 * Sockets are nonblocking with TCP_NODELAY and are registered once, edge
 * triggered, for IN|OUT|RDHUP; epoll_ctl is called only on (re)connect. A
 * read loop stops at EAGAIN or at a short read: Linux queues a new edge for
 * every arrival, so a short read means the socket was drained.
 *
 * Invariants: w->active counts the worker's connections that are not DONE;
 * w->waiting counts those in WAITING; c->fd >= 0 only while the connection
 * is registered in w->epfd (closing the fd removes it).
 *
 * REPORT (one JSON line on stdout; everything else goes to stderr)
 *   events, requests   events acknowledged 200/201; final responses of any
 *                      status (a 429 is not final: it is retried and counted
 *                      in retried_429 only)
 *   errors             final responses other than 200/201, plus malformed
 *                      responses (also in proto_errors)
 *   seconds            from starting the workers to the last one ending
 *   p50/p90/p99/max_ms latency of final responses, first byte written to
 *                      last byte read, nearest-rank; null when there are none
 *   events_per_commit  events / delta mic_writer_commits_total, and
 *   requests_per_commit  delta mic_writer_ops_total / delta commits, from
 *                      GET /metrics before and after (through libmic); null
 *                      when unavailable
 *   status             final responses per HTTP status
 *   extras: commits, ops (the deltas), threads, payload_bytes, aggregates,
 *   target_events, proto_errors, timed_out (stopped by --max-seconds or a
 *   signal), runid.
 * --lat-log FILE also writes every final response's "START_NS LATENCY_US"
 * line to FILE (START_NS: CLOCK_MONOTONIC when its first byte was written),
 * so that a script can take the latencies of a moment (bench/replaysel.sh:
 * those of the requests that began while a selection ran).
 * Exit 0 when events == --events and errors == 0, 1 otherwise, 2 on a bad
 * argument.
 */

#define _GNU_SOURCE
#include "peerlib.h"
#include "mic.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define RBUF_INIT        16384          /* per-connection receive buffer */
#define RBUF_MAX         (256 * 1024)   /* it never needs to hold more than a head */
#define MAX_HEAD         (64 * 1024)    /* longest response head we accept */
#define MAX_LINE         4096           /* longest chunk-size or trailer line */
#define HDR_RESERVE      1024           /* room in front of a body for the request head */
#define KEY_MAX          512            /* --key / MIC_KEY, at most */
#define MAX_STATUS       600
#define EPOLL_BATCH      256
#define MAX_WAIT_MS      200            /* epoll_wait cap, so a stop is seen quickly */
#define RETRY_429_MS     50
#define BACKOFF_MIN_MS   10
#define BACKOFF_MAX_MS   500
#define PROGRESS_S       5
#define METRICS_BUDGET_S 3              /* whole /metrics fetch */
#define SNIPPET          256            /* bytes of an error body kept for stderr */
#define LOG_BUDGET       30             /* stderr lines about errors before we go quiet */

#define NS_PER_MS        1000000ull
#define NS_PER_S         1000000000ull

#define BATCH_OPEN  "{\"events\":["

/* 1 = deadline, 2 = signal. Lock-free, so the signal handler may store it. */
static atomic_int stop_requested;
static atomic_int log_budget = LOG_BUDGET;

/* ---- Small helpers ---- */

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* One line to stderr, prefixed. */
static void say(const char *fmt, ...)
{
    char line[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "loadgen: %s\n", line);
}

/* True while error chatter on stderr is still allowed; says so once when
 * the budget runs out. */
static bool may_log(void)
{
    int left;

    if (atomic_load_explicit(&log_budget, memory_order_relaxed) <= 0)
        return false;
    left = atomic_fetch_sub_explicit(&log_budget, 1, memory_order_relaxed);

    if (left == 1)
        say("(further error messages suppressed)");
    return left > 1;
}

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

static bool stopping(void)
{
    return atomic_load_explicit(&stop_requested, memory_order_relaxed) != 0;
}

static void request_stop(int why)
{
    int zero = 0;

    atomic_compare_exchange_strong(&stop_requested, &zero, why);
}

static void on_signal(int sig)
{
    (void)sig;
    request_stop(2);
}

/* Parse all of p[0..n) as a decimal number; -1 if it is not one. */
static int dec_parse(const char *p, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    size_t i;

    if (n == 0 || n > 18)
        return -1;
    for (i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        v = v * 10 + (uint64_t)(p[i] - '0');
    }
    *out = v;
    return 0;
}

/* Case-insensitive: does p[0..n) contain 'tok'? */
static bool ci_contains(const char *p, size_t n, const char *tok)
{
    size_t tl = strlen(tok), i;

    for (i = 0; i + tl <= n; i++)
        if (strncasecmp(p + i, tok, tl) == 0)
            return true;
    return false;
}

static bool ci_equal(const char *p, size_t n, const char *name)
{
    return strlen(name) == n && strncasecmp(p, name, n) == 0;
}

/* ---- Buffers ---- */

/* Receive buffer: unread bytes are buf[pos..len). */
struct rbuf {
    char *buf;
    size_t cap, len, pos;
};

static int rbuf_init(struct rbuf *b, size_t cap)
{
    b->buf = malloc(cap);
    if (!b->buf)
        return -1;
    b->cap = cap;
    b->len = b->pos = 0;
    return 0;
}

static void rbuf_fini(struct rbuf *b)
{
    free(b->buf);
    b->buf = NULL;
}

/* Make room for at least one more byte, keeping the unread bytes.
 * Returns -1 when the buffer is full of unread bytes at RBUF_MAX. */
static int rbuf_room(struct rbuf *b)
{
    char *nb;

    if (b->pos == b->len)
        b->pos = b->len = 0;
    if (b->len < b->cap)
        return 0;
    if (b->pos > 0) {
        memmove(b->buf, b->buf + b->pos, b->len - b->pos);
        b->len -= b->pos;
        b->pos = 0;
        return 0;
    }
    if (b->cap >= RBUF_MAX || !(nb = realloc(b->buf, b->cap * 2)))
        return -1;
    b->buf = nb;
    b->cap *= 2;
    return 0;
}

/* Where a response body goes: at most 'limit' bytes (and 'cap', the size
 * of 'buf') are kept, the rest is dropped. */
struct sink {
    char *buf;
    size_t len, cap, limit;
};

static void sink_put(struct sink *s, const char *p, size_t n)
{
    if (!s || n == 0 || s->len >= s->limit)
        return;
    if (n > s->limit - s->len)
        n = s->limit - s->len;
    if (s->len + n > s->cap)
        n = s->cap - s->len;
    if (n == 0)
        return;
    memcpy(s->buf + s->len, p, n);
    s->len += n;
}

/* ---- Response parser ---- */

enum rp_phase {
    RP_HEAD,         /* waiting for the blank line that ends the head */
    RP_BODY_LEN,     /* Content-Length body, 'remaining' bytes to go */
    RP_BODY_EOF,     /* no length: the body ends when the server closes */
    RP_CHUNK_SIZE,   /* waiting for a chunk-size line */
    RP_CHUNK_DATA,   /* inside a chunk, 'remaining' bytes to go */
    RP_CHUNK_END,    /* the CRLF after a chunk's data */
    RP_TRAILER,      /* trailer lines after the last chunk, up to a blank one */
    RP_DONE
};

enum { FEED_MORE, FEED_DONE, FEED_BAD };

struct resp {
    enum rp_phase phase;
    int status;
    bool close_after;     /* the server will close, or we must */
    int retry_after_ms;   /* Retry-After when present and <= 1 s, else -1 */
    uint64_t remaining;
    size_t scan;          /* head bytes already searched for CRLFCRLF */
    struct sink *body;    /* may be NULL */
};

static void resp_reset(struct resp *r)
{
    r->phase = RP_HEAD;
    r->status = 0;
    r->close_after = false;
    r->retry_after_ms = -1;
    r->remaining = 0;
    r->scan = 0;
    if (r->body)
        r->body->len = 0;
}

/* Parse a complete head p[0..n) (ending in CRLFCRLF) and pick the body mode. */
static int head_parse(struct resp *r, const char *p, size_t n)
{
    const char *end = p + n, *line, *eol;
    bool http10, chunked = false, have_len = false, keep_alive = false, close = false;
    uint64_t len = 0;
    int status, retry_ms = -1;

    if (n < 16 || memcmp(p, "HTTP/1.", 7) != 0 || (p[7] != '0' && p[7] != '1') ||
        p[8] != ' ' || p[9] < '1' || p[9] > '5' || p[10] < '0' || p[10] > '9' ||
        p[11] < '0' || p[11] > '9')
        return -1;
    status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
    http10 = p[7] == '0';

    line = memchr(p, '\n', n);
    for (line = line ? line + 1 : end; line < end; line = eol + 1) {
        const char *colon, *v;
        size_t ll, nl, vl;

        if (!(eol = memchr(line, '\n', (size_t)(end - line))))
            break;
        ll = (size_t)(eol - line);
        if (ll && line[ll - 1] == '\r')
            ll--;
        if (ll == 0)
            break;
        if (!(colon = memchr(line, ':', ll)))
            continue;
        nl = (size_t)(colon - line);
        v = colon + 1;
        vl = ll - nl - 1;
        while (vl && (*v == ' ' || *v == '\t'))
            v++, vl--;
        while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
            vl--;
        if (ci_equal(line, nl, "content-length")) {
            if (dec_parse(v, vl, &len))
                return -1;
            have_len = true;
        } else if (ci_equal(line, nl, "transfer-encoding")) {
            chunked = chunked || ci_contains(v, vl, "chunked");
        } else if (ci_equal(line, nl, "connection")) {
            close = close || ci_contains(v, vl, "close");
            keep_alive = keep_alive || ci_contains(v, vl, "keep-alive");
        } else if (ci_equal(line, nl, "retry-after")) {
            uint64_t s;

            if (dec_parse(v, vl, &s) == 0 && s <= 1)
                retry_ms = (int)s * 1000;
        }
    }

    r->status = status;
    r->close_after = close || (http10 && !keep_alive);
    r->retry_after_ms = retry_ms;
    if (status < 200) {
        r->phase = RP_HEAD;        /* interim response; the final one follows */
    } else if (status == 204 || status == 304) {
        r->phase = RP_DONE;
    } else if (chunked) {
        r->phase = RP_CHUNK_SIZE;
    } else if (have_len) {
        r->remaining = len;
        r->phase = len ? RP_BODY_LEN : RP_DONE;
    } else {
        r->phase = RP_BODY_EOF;
        r->close_after = true;
    }
    return 0;
}

/* Parse a chunk-size line p[0..n) (without its '\n'). */
static int chunk_size_parse(const char *p, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    size_t i;

    for (i = 0; i < n; i++) {
        int d;

        if (p[i] >= '0' && p[i] <= '9')
            d = p[i] - '0';
        else if (p[i] >= 'a' && p[i] <= 'f')
            d = p[i] - 'a' + 10;
        else if (p[i] >= 'A' && p[i] <= 'F')
            d = p[i] - 'A' + 10;
        else
            break;
        if (i >= 15)
            return -1;
        v = v * 16 + (uint64_t)d;
    }
    if (i == 0)
        return -1;
    *out = v;  /* the rest (extensions, CR) is ignored */
    return 0;
}

/* Feed buf[0..len) to the parser. Stores in *used how many bytes it consumed
 * (unconsumed bytes must be offered again, with more appended). Returns
 * FEED_DONE when the response is complete, FEED_MORE when it needs more, and
 * FEED_BAD on a protocol error. */
static int resp_feed(struct resp *r, const char *buf, size_t len, size_t *used)
{
    size_t pos = 0;

    for (;;) {
        const char *p = buf + pos, *nl;
        size_t avail = len - pos, take;

        switch (r->phase) {
        case RP_HEAD: {
            const char *end = NULL;

            if (avail >= 4)
                end = memmem(p + r->scan, avail - r->scan, "\r\n\r\n", 4);
            if (!end) {
                if (avail > MAX_HEAD)
                    return FEED_BAD;
                r->scan = avail >= 3 ? avail - 3 : 0;
                goto more;
            }
            r->scan = 0;
            take = (size_t)(end - p) + 4;
            if (head_parse(r, p, take))
                return FEED_BAD;
            pos += take;
            break;
        }
        case RP_BODY_LEN:
        case RP_CHUNK_DATA:
            take = avail < r->remaining ? avail : (size_t)r->remaining;
            sink_put(r->body, p, take);
            pos += take;
            r->remaining -= take;
            if (r->remaining)
                goto more;
            r->phase = r->phase == RP_BODY_LEN ? RP_DONE : RP_CHUNK_END;
            break;
        case RP_BODY_EOF:
            sink_put(r->body, p, avail);
            pos += avail;
            goto more;
        case RP_CHUNK_SIZE:
            if (!(nl = memchr(p, '\n', avail))) {
                if (avail > MAX_LINE)
                    return FEED_BAD;
                goto more;
            }
            if (chunk_size_parse(p, (size_t)(nl - p), &r->remaining))
                return FEED_BAD;
            pos += (size_t)(nl - p) + 1;
            r->phase = r->remaining ? RP_CHUNK_DATA : RP_TRAILER;
            break;
        case RP_CHUNK_END:
            if (avail == 0 || (avail == 1 && p[0] == '\r'))
                goto more;
            if (p[0] == '\n')
                pos += 1;
            else if (p[0] == '\r' && p[1] == '\n')
                pos += 2;
            else
                return FEED_BAD;
            r->phase = RP_CHUNK_SIZE;
            break;
        case RP_TRAILER:
            if (!(nl = memchr(p, '\n', avail))) {
                if (avail > MAX_LINE)
                    return FEED_BAD;
                goto more;
            }
            if (nl == p || (nl == p + 1 && p[0] == '\r'))
                r->phase = RP_DONE;
            pos += (size_t)(nl - p) + 1;
            break;
        case RP_DONE:
            *used = pos;
            return FEED_DONE;
        }
    }
more:
    *used = pos;
    return FEED_MORE;
}

/* ---- Run-wide settings ---- */

struct options {
    const char *url;
    unsigned conns;
    uint64_t events;
    unsigned batch;
    const char *topic;
    size_t payload_bytes;
    unsigned threads;
    double max_seconds;
    uint64_t aggregates;
    bool versions;
    uint64_t agg_offset;
    const char *key;        /* API key (--key, else $MIC_KEY), or NULL */
    const char *cacert;     /* --cacert: PEM CA file for an https:// URL */
    const char *lat_log;    /* --lat-log: "START_NS LATENCY_US" lines, or NULL */
};

/* Read-only once the workers start, except the atomics and the done trio. */
struct run {
    struct options opt;
    char host[256], port[8], authority[300];
    char auth[KEY_MAX + 32];    /* "Authorization: Bearer KEY\r\n" or "" */
    SSL_CTX *tls;               /* https:// URL: every connection speaks TLS */
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char runid[17];
    char ev_head[64];           /* {"event_id":"lg-<runid>- */
    size_t ev_head_len;
    size_t req_cap;             /* bytes of one connection's request buffer */
    uint64_t deadline_ns;
    _Atomic uint64_t next_event;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    unsigned threads_done;
};

struct tally {
    uint64_t events_ok, requests, errors, proto_errors, retried_429, reconnects;
    uint64_t status[MAX_STATUS];
};

enum conn_state { C_IDLE, C_CONNECTING, C_HANDSHAKE, C_SENDING, C_RECEIVING, C_WAITING, C_DONE };

struct worker;

struct conn {
    struct worker *w;
    int fd;
    SSL *ssl;                /* https: the connection's TLS session */
    enum conn_state state;
    bool connected_before;   /* a later connect counts as a reconnect */
    bool productive;         /* this fd has carried a complete response */
    unsigned fail_streak;    /* consecutive connections without a response */
    char *req;               /* request bytes are req[req_start .. req_start+req_len) */
    size_t req_start, req_len, req_off;
    uint64_t first_event;
    unsigned nev;
    uint64_t t_start, wake_at;
    struct rbuf in;
    struct resp rp;
    struct sink snip;
    char snip_buf[SNIPPET];
};

struct worker {
    struct run *run;
    pthread_t thread;
    bool started;
    int epfd;
    struct conn *conns;
    unsigned nconns, active, waiting;
    uint32_t *lat;           /* microseconds, one per final response */
    uint64_t *lat_at;        /* --lat-log: each one's start (ns), else NULL */
    size_t nlat, lat_cap;
    struct tally t;
    _Atomic uint64_t progress;  /* t.events_ok, for the main thread */
    uint64_t end_ns;
};

/* ---- Request bodies ---- */

/* Write event number 'n' as one JSON object at 'out' (the peers' shape,
 * bench/peerlib.c, with this run's topic); returns its length, at most
 * event_max(r). The payload pads the object to about --payload-bytes. */
static size_t event_put(const struct run *r, char *out, uint64_t n)
{
    long agg = -1, ver = -1;

    if (r->opt.aggregates) {
        agg = (long)(n % r->opt.aggregates + r->opt.agg_offset);
        if (r->opt.versions) /* event n is version n / A + 1 of aggregate n % A */
            ver = (long)(n / r->opt.aggregates + 1);
    }
    return peer_event_put(out, r->ev_head, r->ev_head_len, n, r->opt.topic, agg, ver, 0,
                          r->opt.payload_bytes);
}

/* Upper bound of event_put's output. */
static size_t event_max(const struct run *r)
{
    return peer_event_max(r->ev_head_len, strlen(r->opt.topic), r->opt.payload_bytes);
}

/* Build the request for events first .. first+n-1 into c->req. */
static void conn_build(struct conn *c, uint64_t first, unsigned n)
{
    const struct run *r = c->w->run;
    char *body = c->req + HDR_RESERVE, *p = body, head[HDR_RESERVE];
    size_t blen;
    unsigned i;
    int hl;

    if (r->opt.batch > 1) {
        memcpy(p, BATCH_OPEN, sizeof BATCH_OPEN - 1);
        p += sizeof BATCH_OPEN - 1;
    }
    for (i = 0; i < n; i++) {
        if (i)
            *p++ = ',';
        p += event_put(r, p, first + i);
    }
    if (r->opt.batch > 1) {
        *p++ = ']';
        *p++ = '}';
    }
    blen = (size_t)(p - body);
    hl = snprintf(head, sizeof head,
                  "POST /v1/events HTTP/1.1\r\nHost: %s\r\n%s"
                  "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                  r->authority, r->auth, blen);
    /* authority is at most 299 bytes and auth 543, so the head always fits */
    memcpy(body - hl, head, (size_t)hl);
    c->req_start = HDR_RESERVE - (size_t)hl;
    c->req_len = (size_t)hl + blen;
    c->req_off = 0;
    c->first_event = first;
    c->nev = n;
}

/* ---- Connections ---- */

static void conn_send(struct conn *c);
static void conn_next(struct conn *c);

/* send(2) and recv(2), or their TLS forms: the same returns, with errno
 * EAGAIN when TLS waits for the socket either way (both directions are
 * in the epoll set, edge-triggered, so any event retries). */
static ssize_t io_send(struct conn *c, const void *p, size_t n)
{
    int k, e;

    if (!c->ssl)
        return send(c->fd, p, n, MSG_NOSIGNAL);
    ERR_clear_error();
    if ((k = SSL_write(c->ssl, p, (int)(n > INT32_MAX ? INT32_MAX : n))) > 0)
        return k;
    e = SSL_get_error(c->ssl, k);
    errno = e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE ? EAGAIN : EIO;
    return -1;
}

static ssize_t io_recv(struct conn *c, void *p, size_t n)
{
    int k, e;

    if (!c->ssl)
        return recv(c->fd, p, n, 0);
    for (;;) {
        char peek;

        ERR_clear_error();
        if ((k = SSL_read(c->ssl, p, (int)(n > INT32_MAX ? INT32_MAX : n))) > 0)
            return k;
        e = SSL_get_error(c->ssl, k);
        /* A record that was no data (a session ticket) may have come with
         * the data behind it: read on while the socket has bytes, or the
         * edge-triggered epoll would never say so again. */
        if (e != SSL_ERROR_WANT_READ || recv(c->fd, &peek, 1, MSG_PEEK | MSG_DONTWAIT) != 1)
            break;
    }
    if (e == SSL_ERROR_ZERO_RETURN)
        return 0;
    errno = e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE ? EAGAIN : EIO;
    return -1;
}

static void conn_close(struct conn *c)
{
    if (c->ssl)
        SSL_free(c->ssl);
    c->ssl = NULL;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->productive = false;
}

/* Forget any half-read response before (re)sending the current request. */
static void conn_rewind(struct conn *c)
{
    c->req_off = 0;
    c->in.pos = c->in.len = 0;
    resp_reset(&c->rp);
}

static void conn_finish(struct conn *c)
{
    if (c->state == C_WAITING)
        c->w->waiting--;
    conn_close(c);
    if (c->state != C_DONE)
        c->w->active--;
    c->state = C_DONE;
}

/* Park the connection for 'ms'; worker_timers resends when due. */
static void conn_wait(struct conn *c, unsigned ms)
{
    conn_rewind(c);
    c->wake_at = now_ns() + (uint64_t)ms * NS_PER_MS;
    c->state = C_WAITING;
    c->w->waiting++;
}

/* The connection failed or the server closed it before the response was
 * complete: reconnect and resend the same request. */
static void conn_lost(struct conn *c, const char *why)
{
    bool productive = c->productive;
    unsigned ms;

    conn_close(c);
    conn_rewind(c);
    if (may_log())
        say("connection lost (%s), reconnecting", why);
    if (stopping()) {
        conn_finish(c);
        return;
    }
    if (productive) {
        c->fail_streak = 0;
        c->state = C_IDLE;
        conn_send(c);
        return;
    }
    /* never got a response on that connection: back off, do not spin */
    ms = BACKOFF_MIN_MS << (c->fail_streak < 6 ? c->fail_streak : 6);
    if (ms > BACKOFF_MAX_MS)
        ms = BACKOFF_MAX_MS;
    c->fail_streak++;
    conn_wait(c, ms);
}

static void conn_connect(struct conn *c)
{
    struct worker *w = c->w;
    struct epoll_event ev;
    int one = 1, fd;

    if (c->connected_before)
        w->t.reconnects++;
    c->connected_before = true;
    fd = socket(w->run->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        conn_lost(c, strerror(errno));
        return;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->fd = fd;
    if (connect(fd, (const struct sockaddr *)&w->run->addr, w->run->addrlen) &&
        errno != EINPROGRESS) {
        conn_lost(c, strerror(errno));
        return;
    }
    /* registered after connect(): an unconnected socket would report HUP */
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    ev.data.ptr = c;
    if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev)) {
        conn_lost(c, strerror(errno));
        return;
    }
    c->state = C_CONNECTING;  /* EPOLLOUT says when; then conn_connected */
}

static void conn_handshake(struct conn *c)
{
    int k, e;

    ERR_clear_error();
    if ((k = SSL_do_handshake(c->ssl)) == 1) {
        c->state = C_IDLE;
        conn_send(c);
        return;
    }
    e = SSL_get_error(c->ssl, k);
    if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
        char why[160];

        ERR_error_string_n(ERR_get_error(), why, sizeof why);
        conn_lost(c, why);
    }
}

static void conn_connected(struct conn *c)
{
    int err = 0;
    socklen_t len = sizeof err;

    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err) {
        conn_lost(c, strerror(err));
        return;
    }
    if (c->w->run->tls) {
        const struct run *r = c->w->run;

        if (!(c->ssl = SSL_new(r->tls)) || !SSL_set_fd(c->ssl, c->fd)) {
            conn_lost(c, "cannot start TLS");
            return;
        }
        /* The certificate must name the URL's host (an IP or a DNS name). */
        if (!X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), r->host))
            SSL_set1_host(c->ssl, r->host);
        SSL_set_tlsext_host_name(c->ssl, r->host);
        SSL_set_connect_state(c->ssl);
        c->state = C_HANDSHAKE;
        conn_handshake(c);
        return;
    }
    c->state = C_IDLE;
    conn_send(c);
}

/* Send (the rest of) the current request, connecting first if needed. */
static void conn_send(struct conn *c)
{
    if (c->fd < 0) {
        conn_connect(c);
        return;
    }
    c->state = C_SENDING;
    while (c->req_off < c->req_len) {
        ssize_t n;

        if (c->req_off == 0)
            c->t_start = now_ns();
        n = io_send(c, c->req + c->req_start + c->req_off, c->req_len - c->req_off);
        if (n > 0) {
            c->req_off += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;  /* EPOLLOUT resumes */
        } else {
            conn_lost(c, n < 0 ? strerror(errno) : "send returned 0");
            return;
        }
    }
    c->state = C_RECEIVING;
}

static void lat_add(struct worker *w, uint64_t at, uint64_t ns)
{
    uint64_t us = (ns + 500) / 1000;

    if (w->nlat == w->lat_cap) {
        size_t nc = w->lat_cap ? w->lat_cap * 2 : 4096;
        uint32_t *nl = realloc(w->lat, nc * sizeof *nl);

        if (!nl)
            return;  /* a lost sample beats a crash */
        w->lat = nl;
        if (w->lat_at) {
            uint64_t *na = realloc(w->lat_at, nc * sizeof *na);

            if (!na)
                return; /* the same: lat keeps its room, lat_cap its value */
            w->lat_at = na;
        }
        w->lat_cap = nc;
    }
    if (w->lat_at)
        w->lat_at[w->nlat] = at;
    w->lat[w->nlat++] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

/* A complete response arrived for the request in flight. */
static void conn_on_response(struct conn *c)
{
    struct worker *w = c->w;
    uint64_t now = now_ns();
    int st = c->rp.status;

    c->productive = true;
    c->fail_streak = 0;
    /* an answer before the request was fully sent leaves the stream unusable */
    if (c->rp.close_after || c->state == C_SENDING)
        conn_close(c);
    if (st == 429) {
        w->t.retried_429++;
        conn_wait(c, c->rp.retry_after_ms >= 0 ? (unsigned)c->rp.retry_after_ms
                                               : RETRY_429_MS);
        return;
    }
    lat_add(w, c->t_start, now - c->t_start);
    w->t.requests++;
    w->t.status[st]++;
    if (st == 200 || st == 201) {
        w->t.events_ok += c->nev;
        atomic_store_explicit(&w->progress, w->t.events_ok, memory_order_relaxed);
    } else {
        w->t.errors++;
        if (may_log())
            say("HTTP %d for events %" PRIu64 "..%" PRIu64 ": %.*s", st, c->first_event,
                c->first_event + c->nev - 1, (int)c->snip.len, c->snip.buf);
    }
    c->state = C_IDLE;
    conn_next(c);
}

/* A response we cannot parse: count it, drop the connection, move on. */
static void conn_proto_error(struct conn *c)
{
    struct worker *w = c->w;

    w->t.errors++;
    w->t.proto_errors++;
    w->t.requests++;
    if (may_log())
        say("malformed response for events %" PRIu64 "..; dropping the connection",
            c->first_event);
    conn_close(c);
    c->state = C_IDLE;
    conn_next(c);
}

static void conn_read(struct conn *c)
{
    struct rbuf *b = &c->in;

    for (;;) {
        size_t space, used = 0;  /* resp_feed leaves it unset on FEED_BAD */
        ssize_t n;
        int rc;

        if (rbuf_room(b)) {
            conn_proto_error(c);
            return;
        }
        space = b->cap - b->len;
        n = io_recv(c, b->buf + b->len, space);
        if (n > 0) {
            b->len += (size_t)n;
            rc = resp_feed(&c->rp, b->buf + b->pos, b->len - b->pos, &used);
            b->pos += used;
            if (rc == FEED_DONE) {
                b->pos = b->len = 0;  /* nothing may follow: no pipelining */
                conn_on_response(c);
                return;
            }
            if (rc == FEED_BAD) {
                conn_proto_error(c);
                return;
            }
            /* Drained: the next arrival raises a new edge.  Not so with
             * TLS, which reads one record at a time: read on until the
             * socket itself says EAGAIN. */
            if ((size_t)n < space && !c->ssl)
                return;
        } else if (n == 0) {
            if (c->rp.phase == RP_BODY_EOF) {
                c->rp.phase = RP_DONE;
                conn_on_response(c);
            } else {
                conn_lost(c, "closed by server");
            }
            return;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            return;
        } else if (errno != EINTR) {
            conn_lost(c, strerror(errno));
            return;
        }
    }
}

/* Take the next B event numbers and send them, or finish when none are left. */
static void conn_next(struct conn *c)
{
    struct run *r = c->w->run;
    uint64_t first, n;

    if (stopping()) {
        conn_finish(c);
        return;
    }
    first = atomic_fetch_add_explicit(&r->next_event, r->opt.batch, memory_order_relaxed);
    if (first >= r->opt.events) {
        conn_finish(c);
        return;
    }
    n = r->opt.events - first;
    if (n > r->opt.batch)
        n = r->opt.batch;
    conn_build(c, first, (unsigned)n);
    conn_rewind(c);
    conn_send(c);
}

static void conn_on_event(struct conn *c, uint32_t ev)
{
    const uint32_t readable = EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR;

    switch (c->state) {
    case C_CONNECTING:
        if (ev & (EPOLLOUT | EPOLLHUP | EPOLLERR))
            conn_connected(c);
        break;
    case C_HANDSHAKE:
        conn_handshake(c);
        break;
    case C_SENDING:
        if (ev & EPOLLOUT)
            conn_send(c);
        /* the server may answer (and close) before taking the whole body */
        if ((c->state == C_SENDING || c->state == C_RECEIVING) && (ev & readable))
            conn_read(c);
        break;
    case C_RECEIVING:
        if (ev & readable)
            conn_read(c);
        break;
    case C_WAITING:
        if (ev & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
            conn_close(c);  /* the resend reconnects */
        break;
    case C_IDLE:
    case C_DONE:
        break;
    }
}

/* ---- Workers ---- */

/* Resend for every WAITING connection that is due; returns the earliest
 * wake time of those still waiting (UINT64_MAX if none). */
static uint64_t worker_timers(struct worker *w, uint64_t now)
{
    uint64_t next = UINT64_MAX;
    unsigned i;

    for (i = 0; i < w->nconns && w->waiting; i++) {
        struct conn *c = &w->conns[i];

        if (c->state != C_WAITING)
            continue;
        if (c->wake_at <= now) {
            w->waiting--;
            c->state = C_IDLE;
            conn_rewind(c);
            conn_send(c);
        }
        if (c->state == C_WAITING && c->wake_at < next)
            next = c->wake_at;
    }
    return next;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct run *r = w->run;
    struct epoll_event evs[EPOLL_BATCH];
    unsigned i;

    for (i = 0; i < w->nconns; i++)
        conn_next(&w->conns[i]);
    while (w->active > 0) {
        uint64_t now = now_ns(), next = r->deadline_ns, wait_ms;
        int n, k;

        if (now >= r->deadline_ns)
            request_stop(1);
        if (stopping())
            break;
        if (w->waiting) {
            uint64_t t = worker_timers(w, now);

            if (t < next)
                next = t;
            if (w->active == 0)
                break;
        }
        wait_ms = next <= now ? 0 : (next - now + NS_PER_MS - 1) / NS_PER_MS;
        if (wait_ms > MAX_WAIT_MS)
            wait_ms = MAX_WAIT_MS;
        n = epoll_wait(w->epfd, evs, EPOLL_BATCH, (int)wait_ms);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            say("epoll_wait: %s", strerror(errno));
            request_stop(1);
            break;
        }
        for (k = 0; k < n; k++)
            conn_on_event(evs[k].data.ptr, evs[k].events);
    }
    for (i = 0; i < w->nconns; i++)
        conn_close(&w->conns[i]);
    w->end_ns = now_ns();
    pthread_mutex_lock(&r->lock);
    r->threads_done++;
    pthread_cond_signal(&r->cond);
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

/* Set up worker 'w' with 'nconns' connections. Undone by worker_fini. */
static int worker_init(struct worker *w, struct run *r, unsigned nconns, size_t lat_hint)
{
    unsigned i;

    memset(w, 0, sizeof *w);
    w->run = r;
    w->nconns = nconns;
    w->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (w->epfd < 0)
        goto fail;
    if (!(w->conns = calloc(nconns, sizeof *w->conns)))
        goto fail_epoll;
    for (i = 0; i < nconns; i++) {
        struct conn *c = &w->conns[i];

        c->w = w;
        c->fd = -1;
        c->snip.buf = c->snip_buf;
        c->snip.cap = c->snip.limit = sizeof c->snip_buf;
        c->rp.body = &c->snip;
        if (!(c->req = malloc(r->req_cap)))
            goto fail_conns;
        if (rbuf_init(&c->in, RBUF_INIT)) {
            free(c->req);
            goto fail_conns;
        }
    }
    w->active = nconns;
    w->lat_cap = lat_hint;
    if (!(w->lat = malloc(w->lat_cap * sizeof *w->lat)))
        goto fail_conns;
    if (r->opt.lat_log && !(w->lat_at = malloc(w->lat_cap * sizeof *w->lat_at))) {
        free(w->lat);
        goto fail_conns;
    }
    return 0;
fail_conns:
    while (i-- > 0) {
        rbuf_fini(&w->conns[i].in);
        free(w->conns[i].req);
    }
    free(w->conns);
fail_epoll:
    close(w->epfd);
fail:
    return -1;
}

static void worker_fini(struct worker *w)
{
    unsigned i;

    for (i = 0; i < w->nconns; i++) {
        conn_close(&w->conns[i]);
        rbuf_fini(&w->conns[i].in);
        free(w->conns[i].req);
    }
    free(w->conns);
    free(w->lat);
    free(w->lat_at);
    close(w->epfd);
}

/* ---- GET /metrics ---- */

struct metrics {
    bool have_commits, have_ops;
    double commits, ops;
};

/* If line l[0..n) is "<name> <value>" or "<name>{labels} <value>", add the
 * value to *sum. */
static void metrics_line(const char *l, size_t n, const char *name, double *sum, bool *have)
{
    size_t nl = strlen(name), i = nl, k = 0;
    char tok[64], *e;
    double v;

    if (n <= nl || memcmp(l, name, nl) != 0)
        return;
    if (l[i] == '{') {
        const char *cb = memchr(l + i, '}', n - i);

        if (!cb)
            return;
        i = (size_t)(cb - l) + 1;
    } else if (l[i] != ' ' && l[i] != '\t') {
        return;
    }
    while (i < n && (l[i] == ' ' || l[i] == '\t'))
        i++;
    while (i < n && k < sizeof tok - 1 && l[i] != ' ' && l[i] != '\t' && l[i] != '\r')
        tok[k++] = l[i++];
    tok[k] = '\0';
    v = strtod(tok, &e);
    if (k == 0 || *e)
        return;
    *sum += v;
    *have = true;
}

static void metrics_parse(const char *s, size_t n, struct metrics *m)
{
    const char *end = s + n;

    while (s < end) {
        const char *eol = memchr(s, '\n', (size_t)(end - s));

        if (!eol)
            eol = end;
        if (*s != '#') {
            metrics_line(s, (size_t)(eol - s), "mic_writer_commits_total", &m->commits,
                         &m->have_commits);
            metrics_line(s, (size_t)(eol - s), "mic_writer_ops_total", &m->ops, &m->have_ops);
        }
        s = eol < end ? eol + 1 : end;
    }
}

/* Fetch GET /metrics through libmic on 'mc' (a blocking side request,
 * outside the measured load) and fill *m.  Returns 0, or -1 with a message
 * on stderr; *m then reports nothing. */
static int metrics_fetch(mic_client *mc, struct metrics *m)
{
    static const char *const accept[] = {"Accept: text/plain", NULL};
    struct mic_response rp;
    char why[600];
    int rc = -1;

    memset(m, 0, sizeof *m);
    if (mic_request(mc, 0, "GET", "/metrics", NULL, NULL, 0, accept, &rp))
        mic_failure_text(mic_client_failure(mc), why, sizeof why);
    else if (rp.status != 200)
        snprintf(why, sizeof why, "HTTP %ld", rp.status);
    else if ((metrics_parse(rp.body, rp.len, m), 1))
        rc = 0;
    mic_response_fini(&rp);
    if (rc)
        say("GET /metrics: %s (per-commit figures will be null)", why);
    return rc;
}

/* The handle metrics_fetch uses: the --url, --key and --cacert of the run,
 * a METRICS_BUDGET_S limit.  Returns NULL (said on stderr) when it cannot
 * be made. */
static mic_client *metrics_client(const struct run *r)
{
    char base[sizeof r->authority + 16], why[600];
    const char *urls[1] = {base};
    struct mic_client_opts o = {.urls = urls, .nurls = 1, .key = r->opt.key,
                                .cafile = r->opt.cacert, .connect_timeout_ms = 1000,
                                .timeout_ms = METRICS_BUDGET_S * 1000,
                                .user_agent = "mic-bench-loadgen"};
    struct mic_failure f;
    mic_client *mc;

    snprintf(base, sizeof base, "%s://%s", r->tls ? "https" : "http", r->authority);
    if (mic_client_new(&o, &mc, &f)) {
        say("GET /metrics: %s (per-commit figures will be null)",
            mic_failure_text(&f, why, sizeof why));
        return NULL;
    }
    return mc;
}

/* ---- Command line ---- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: loadgen --url http(s)://HOST:PORT --conns N --events TOTAL --batch B\n"
            "               [--topic T] [--payload-bytes P] [--threads K]\n"
            "               [--max-seconds S] [--aggregates A]\n"
            "\n"
            "  --url URL            broker base URL, http://HOST:PORT (required)\n"
            "  --conns N            keep-alive connections, 1..10000 (required)\n"
            "  --events TOTAL       events to publish in all (required)\n"
            "  --batch B            events per POST /v1/events, 1..100000 (required)\n"
            "  --topic T            topic (default bench)\n"
            "  --payload-bytes P    approximate JSON size of one event (default 300)\n"
            "  --threads K          threads, each with its own epoll loop (default 2)\n"
            "  --max-seconds S      stop after S seconds whatever happens (default 120)\n"
            "  --aggregates A       spread events over A aggregates, 0 = none (default 0)\n"
            "  --versions           with --aggregates: event n is aggregate_version n/A+1 of\n"
            "                       aggregate n%%A (publish with --conns 1 to keep versions in order)\n"
            "  --agg-offset K       number aggregates from K (default 0)\n"
            "  --key SECRET         API key sent as Authorization: Bearer (default $MIC_KEY)\n"
            "  --cacert FILE        PEM CA certificate(s) for an https:// URL (default: the\n"
            "                       system's)\n"
            "  --lat-log FILE       write \"START_NS LATENCY_US\" of every final response to\n"
            "                       FILE (START_NS: CLOCK_MONOTONIC at its first byte)\n"
            "\n"
            "Prints one JSON line on stdout. Exit 0 when every event was published\n"
            "without error, 1 otherwise, 2 on a bad argument.\n");
}

static int u64_arg(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    unsigned long long v;
    char *e;

    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    v = strtoull(s, &e, 10);
    if (errno || *e || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

static bool topic_valid(const char *t)
{
    size_t n = strlen(t), i;

    if (n < 1 || n > 200)
        return false;
    for (i = 0; i < n; i++) {
        char ch = t[i];

        if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '_' || ch == ':' || ch == '-'))
            return false;
    }
    return true;
}

enum { OPT_URL = 256, OPT_CONNS, OPT_EVENTS, OPT_BATCH, OPT_TOPIC, OPT_PAYLOAD,
       OPT_THREADS, OPT_MAXSEC, OPT_AGGS, OPT_VERSIONS, OPT_AGGOFF, OPT_KEY, OPT_CACERT,
       OPT_LATLOG, OPT_HELP };

/* Fill *o from argv. Returns 0, 1 for --help, or -1 after saying why. */
static int options_parse(struct options *o, int argc, char **argv)
{
    static const struct option longopts[] = {
        { "url", required_argument, NULL, OPT_URL },
        { "conns", required_argument, NULL, OPT_CONNS },
        { "events", required_argument, NULL, OPT_EVENTS },
        { "batch", required_argument, NULL, OPT_BATCH },
        { "topic", required_argument, NULL, OPT_TOPIC },
        { "payload-bytes", required_argument, NULL, OPT_PAYLOAD },
        { "threads", required_argument, NULL, OPT_THREADS },
        { "max-seconds", required_argument, NULL, OPT_MAXSEC },
        { "aggregates", required_argument, NULL, OPT_AGGS },
        { "versions", no_argument, NULL, OPT_VERSIONS },
        { "agg-offset", required_argument, NULL, OPT_AGGOFF },
        { "key", required_argument, NULL, OPT_KEY },
        { "cacert", required_argument, NULL, OPT_CACERT },
        { "lat-log", required_argument, NULL, OPT_LATLOG },
        { "help", no_argument, NULL, OPT_HELP },
        { NULL, 0, NULL, 0 },
    };
    bool have_conns = false, have_events = false, have_batch = false;
    uint64_t v;
    char *e;
    int ch, idx = -1;

    memset(o, 0, sizeof *o);
    o->topic = "bench";
    o->payload_bytes = 300;
    o->threads = 2;
    o->max_seconds = 120;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "", longopts, &idx)) != -1) {
        switch (ch) {
        case OPT_URL:
            o->url = optarg;
            break;
        case OPT_CONNS:
            if (u64_arg(optarg, 1, 10000, &v))
                goto bad;
            o->conns = (unsigned)v;
            have_conns = true;
            break;
        case OPT_EVENTS:
            if (u64_arg(optarg, 1, 1000000000000ull, &v))
                goto bad;
            o->events = v;
            have_events = true;
            break;
        case OPT_BATCH:
            if (u64_arg(optarg, 1, 100000, &v))
                goto bad;
            o->batch = (unsigned)v;
            have_batch = true;
            break;
        case OPT_TOPIC:
            if (!topic_valid(optarg)) {
                say("--topic must match ^[A-Za-z0-9._:-]{1,200}$");
                return -1;
            }
            o->topic = optarg;
            break;
        case OPT_PAYLOAD:
            if (u64_arg(optarg, 0, 16u << 20, &v))
                goto bad;
            o->payload_bytes = (size_t)v;
            break;
        case OPT_THREADS:
            if (u64_arg(optarg, 1, 256, &v))
                goto bad;
            o->threads = (unsigned)v;
            break;
        case OPT_MAXSEC:
            errno = 0;
            o->max_seconds = strtod(optarg, &e);
            if (errno || *e || e == optarg || !isfinite(o->max_seconds) ||
                o->max_seconds <= 0 || o->max_seconds > 86400 * 7)
                goto bad;
            break;
        case OPT_AGGS:
            if (u64_arg(optarg, 0, UINT32_MAX, &v))
                goto bad;
            o->aggregates = v;
            break;
        case OPT_VERSIONS:
            o->versions = true;
            break;
        case OPT_AGGOFF:
            if (u64_arg(optarg, 0, UINT32_MAX, &v))
                goto bad;
            o->agg_offset = v;
            break;
        case OPT_KEY:
            o->key = optarg;
            break;
        case OPT_CACERT:
            o->cacert = optarg;
            break;
        case OPT_LATLOG:
            o->lat_log = optarg;
            break;
        case OPT_HELP:
            return 1;
        default:
            say("unknown option or missing value: %s", argv[optind - 1]);
            return -1;
        }
        idx = -1;
    }
    if (optind < argc) {
        say("unexpected argument: %s", argv[optind]);
        return -1;
    }
    if (!o->url || !have_conns || !have_events || !have_batch) {
        say("--url, --conns, --events and --batch are required");
        return -1;
    }
    if (!o->key && getenv("MIC_KEY") && *getenv("MIC_KEY"))
        o->key = getenv("MIC_KEY");
    if (o->key && (strlen(o->key) > KEY_MAX || strpbrk(o->key, " \r\n"))) {
        say("--key: at most %d characters, no spaces", KEY_MAX);
        return -1;
    }
    if (o->threads > o->conns)
        o->threads = o->conns;
    return 0;
bad:
    say("bad value for --%s: %s", idx >= 0 ? longopts[idx].name : "?", optarg);
    return -1;
}

/* Split "http://HOST[:PORT][/]" into r->host, r->port and r->authority. */
static int url_parse(struct run *r, const char *url)
{
    const char *p, *h, *he, *pt = NULL, *end;
    size_t hl, pl;

    size_t skip = strncmp(url, "https://", 8) == 0 ? 8 : 7;

    if (skip == 7 && strncmp(url, "http://", 7) != 0)
        return -1;
    p = h = url + skip;
    if (*p == '[') {
        if (!(he = strchr(p, ']')))
            return -1;
        h = p + 1;
        p = he + 1;
    } else {
        p += strcspn(p, ":/");
        he = p;
    }
    if (*p == ':') {
        pt = ++p;
        p += strspn(p, "0123456789");
    }
    end = p;
    if (*p != '\0' && strcmp(p, "/") != 0)
        return -1;
    hl = (size_t)(he - h);
    pl = pt ? (size_t)(end - pt) : 0;
    if (hl == 0 || hl >= sizeof r->host || (pt && (pl == 0 || pl > 5)))
        return -1;
    memcpy(r->host, h, hl);
    r->host[hl] = '\0';
    if (pt) {
        memcpy(r->port, pt, pl);
        r->port[pl] = '\0';
    } else {
        strcpy(r->port, skip == 8 ? "443" : "80");
    }
    if ((size_t)(end - (url + skip)) >= sizeof r->authority)
        return -1;
    memcpy(r->authority, url + skip, (size_t)(end - (url + skip)));
    r->authority[end - (url + skip)] = '\0';
    if (skip == 8) {
        if (!(r->tls = SSL_CTX_new(TLS_client_method())) ||
            !SSL_CTX_set_min_proto_version(r->tls, TLS1_2_VERSION) ||
            (r->opt.cacert ? SSL_CTX_load_verify_locations(r->tls, r->opt.cacert, NULL)
                           : SSL_CTX_set_default_verify_paths(r->tls)) != 1) {
            say("cannot set up TLS%s%s", r->opt.cacert ? " with " : "",
                r->opt.cacert ? r->opt.cacert : "");
            return -1;
        }
        SSL_CTX_set_verify(r->tls, SSL_VERIFY_PEER, NULL);
    }
    if (r->opt.key)
        snprintf(r->auth, sizeof r->auth, "Authorization: Bearer %s\r\n", r->opt.key);
    return 0;
}

/* Resolve the URL, pick the run id and precompute the event pieces. */
static int run_init(struct run *r)
{
    struct addrinfo hints, *ai;
    unsigned char rnd[8];
    size_t i;
    int rc;

    if (url_parse(r, r->opt.url)) {
        say("--url must look like http://HOST:PORT");
        return 2;
    }
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    if ((rc = getaddrinfo(r->host, r->port, &hints, &ai))) {
        say("cannot resolve %s: %s", r->host, gai_strerror(rc));
        return 1;
    }
    memcpy(&r->addr, ai->ai_addr, ai->ai_addrlen);
    r->addrlen = ai->ai_addrlen;
    freeaddrinfo(ai);

    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        uint64_t x = now_ns() ^ ((uint64_t)getpid() << 32);

        memcpy(rnd, &x, sizeof rnd);
    }
    for (i = 0; i < sizeof rnd; i++)
        snprintf(r->runid + 2 * i, 3, "%02x", rnd[i]);

    r->ev_head_len = (size_t)snprintf(r->ev_head, sizeof r->ev_head,
                                      "{\"event_id\":\"lg-%s-", r->runid);
    r->req_cap = HDR_RESERVE + sizeof BATCH_OPEN + 2 + (size_t)r->opt.batch * (event_max(r) + 1);
    atomic_init(&r->next_event, 0);
    return 0;
}

/* ---- Report ---- */

static int u32_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted v[0..n), in milliseconds. */
static double pct_ms(const uint32_t *v, size_t n, double p)
{
    size_t rank = (size_t)ceil(p * (double)n);

    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return v[rank - 1] / 1000.0;
}

/* ,"key":v with 'prec' decimals, or ,"key":null when !have. */
/* --lat-log: every worker's "START_NS LATENCY_US" lines into 'path'. */
static int lat_log_write(const char *path, const struct worker *ws, unsigned k)
{
    FILE *f = fopen(path, "w");
    int bad;

    if (!f)
        return -1;
    for (unsigned i = 0; i < k; i++)
        for (size_t j = 0; j < ws[i].nlat; j++)
            fprintf(f, "%" PRIu64 " %" PRIu32 "\n", ws[i].lat_at[j], ws[i].lat[j]);
    bad = ferror(f);
    return fclose(f) || bad ? -1 : 0;
}

static void put_num(const char *key, bool have, double v, int prec)
{
    if (have)
        printf(",\"%s\":%.*f", key, prec, v);
    else
        printf(",\"%s\":null", key);
}

struct result {
    struct tally t;
    double seconds;
    uint32_t *lat;
    size_t nlat;
    struct metrics before, after;
};

static void report(const struct run *r, const struct result *res)
{
    const struct tally *t = &res->t;
    double dc = res->after.commits - res->before.commits;
    double dops = res->after.ops - res->before.ops;
    bool have_c = res->before.have_commits && res->after.have_commits && dc >= 0;
    bool have_o = res->before.have_ops && res->after.have_ops && dops >= 0;
    bool have_lat = res->nlat > 0;
    double secs = res->seconds > 0 ? res->seconds : 1e-9;
    bool first = true;
    int s;

    printf("{\"conns\":%u,\"batch\":%u,\"events\":%" PRIu64 ",\"requests\":%" PRIu64
           ",\"errors\":%" PRIu64 ",\"seconds\":%.3f,\"events_per_s\":%.1f,"
           "\"requests_per_s\":%.1f",
           r->opt.conns, r->opt.batch, t->events_ok, t->requests, t->errors, res->seconds,
           (double)t->events_ok / secs, (double)t->requests / secs);
    put_num("p50_ms", have_lat, have_lat ? pct_ms(res->lat, res->nlat, 0.50) : 0, 3);
    put_num("p90_ms", have_lat, have_lat ? pct_ms(res->lat, res->nlat, 0.90) : 0, 3);
    put_num("p99_ms", have_lat, have_lat ? pct_ms(res->lat, res->nlat, 0.99) : 0, 3);
    put_num("max_ms", have_lat, have_lat ? res->lat[res->nlat - 1] / 1000.0 : 0, 3);
    put_num("events_per_commit", have_c && dc > 0, dc > 0 ? (double)t->events_ok / dc : 0, 2);
    put_num("requests_per_commit", have_c && have_o && dc > 0, dc > 0 ? dops / dc : 0, 2);
    printf(",\"retried_429\":%" PRIu64 ",\"reconnects\":%" PRIu64 ",\"status\":{",
           t->retried_429, t->reconnects);
    for (s = 0; s < MAX_STATUS; s++) {
        if (!t->status[s])
            continue;
        printf("%s\"%d\":%" PRIu64, first ? "" : ",", s, t->status[s]);
        first = false;
    }
    printf("}");
    put_num("commits", have_c, dc, 0);
    put_num("ops", have_o, dops, 0);
    printf(",\"threads\":%u,\"payload_bytes\":%zu,\"aggregates\":%" PRIu64
           ",\"target_events\":%" PRIu64 ",\"proto_errors\":%" PRIu64
           ",\"timed_out\":%s,\"runid\":\"%s\"}\n",
           r->opt.threads, r->opt.payload_bytes, r->opt.aggregates, r->opt.events,
           t->proto_errors, atomic_load(&stop_requested) ? "true" : "false", r->runid);
    fflush(stdout);
}

/* ---- Main ---- */

/* Start the workers, wait for them (saying how far along they are every
 * PROGRESS_S on stderr), and merge their tallies and latencies into *res. */
static int load_run(struct run *r, struct result *res)
{
    unsigned k = r->opt.threads, i;
    uint64_t expect = (r->opt.events + r->opt.batch - 1) / r->opt.batch, start, end = 0;
    struct worker *ws;
    pthread_condattr_t ca;
    size_t hint, n;
    int rc = -1;

    hint = (size_t)(expect / k + 64);
    if (hint > (1u << 20))
        hint = 1u << 20;
    if (pthread_condattr_init(&ca) || pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) ||
        pthread_cond_init(&r->cond, &ca)) {
        say("cannot set up a condition variable");
        return -1;
    }
    pthread_condattr_destroy(&ca);
    if (pthread_mutex_init(&r->lock, NULL))
        goto fail_cond;
    if (!(ws = calloc(k, sizeof *ws)))
        goto fail_lock;
    for (i = 0; i < k; i++) {
        unsigned nc = r->opt.conns / k + (i < r->opt.conns % k);

        if (worker_init(&ws[i], r, nc, hint)) {
            say("out of memory setting up %u connections", r->opt.conns);
            goto fail_workers;
        }
    }

    start = now_ns();
    r->deadline_ns = start + (uint64_t)(r->opt.max_seconds * (double)NS_PER_S);
    for (i = 0; i < k; i++) {
        if (pthread_create(&ws[i].thread, NULL, worker_main, &ws[i])) {
            say("cannot start thread %u", i);
            request_stop(1);
            /* count the missing ones as done so the wait below ends */
            pthread_mutex_lock(&r->lock);
            r->threads_done += k - i;
            pthread_mutex_unlock(&r->lock);
            break;
        }
        ws[i].started = true;
    }

    pthread_mutex_lock(&r->lock);
    while (r->threads_done < k) {
        struct timespec ts;
        uint64_t at = now_ns() + PROGRESS_S * NS_PER_S;

        ts.tv_sec = (time_t)(at / NS_PER_S);
        ts.tv_nsec = (long)(at % NS_PER_S);
        if (pthread_cond_timedwait(&r->cond, &r->lock, &ts) == ETIMEDOUT) {
            uint64_t sent = 0;

            for (i = 0; i < k; i++)
                sent += atomic_load_explicit(&ws[i].progress, memory_order_relaxed);
            say("%" PRIu64 "/%" PRIu64 " events after %.1f s", sent, r->opt.events,
                (double)(now_ns() - start) / NS_PER_S);
        }
    }
    pthread_mutex_unlock(&r->lock);

    memset(&res->t, 0, sizeof res->t);
    for (i = 0, n = 0; i < k; i++) {
        struct tally *t = &ws[i].t;
        int s;

        if (ws[i].started)
            pthread_join(ws[i].thread, NULL);
        if (ws[i].end_ns > end)
            end = ws[i].end_ns;
        res->t.events_ok += t->events_ok;
        res->t.requests += t->requests;
        res->t.errors += t->errors;
        res->t.proto_errors += t->proto_errors;
        res->t.retried_429 += t->retried_429;
        res->t.reconnects += t->reconnects;
        for (s = 0; s < MAX_STATUS; s++)
            res->t.status[s] += t->status[s];
        n += ws[i].nlat;
    }
    res->seconds = (double)((end > start ? end : now_ns()) - start) / NS_PER_S;
    res->nlat = 0;
    if (n && !(res->lat = malloc(n * sizeof *res->lat))) {
        say("out of memory merging latencies");
        goto fail_workers;
    }
    for (i = 0; i < k; i++) {
        if (ws[i].nlat)
            memcpy(res->lat + res->nlat, ws[i].lat, ws[i].nlat * sizeof *res->lat);
        res->nlat += ws[i].nlat;
    }
    if (r->opt.lat_log && lat_log_write(r->opt.lat_log, ws, k)) {
        say("cannot write %s", r->opt.lat_log);
        free(res->lat);
        res->lat = NULL;
        goto fail_workers;
    }
    if (res->nlat)
        qsort(res->lat, res->nlat, sizeof *res->lat, u32_cmp);
    rc = 0;
    i = k;
fail_workers:
    while (i-- > 0)
        worker_fini(&ws[i]);
    free(ws);
fail_lock:
    pthread_mutex_destroy(&r->lock);
fail_cond:
    pthread_cond_destroy(&r->cond);
    return rc;
}

int main(int argc, char **argv)
{
    static struct run r;
    struct result res;
    struct sigaction sa;
    mic_client *mc;
    int rc;

    rc = options_parse(&r.opt, argc, argv);
    if (rc == 1) {
        usage(stdout);
        return 0;
    }
    if (rc) {
        usage(stderr);
        return 2;
    }
    if ((rc = run_init(&r))) {
        if (rc == 2)
            usage(stderr);
        return rc;
    }

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    memset(&res, 0, sizeof res);
    mc = metrics_client(&r);
    rc = mc ? metrics_fetch(mc, &res.before) : -1;
    say("run %s: %" PRIu64 " events, batch %u, %u conns on %u threads to %s",
        r.runid, r.opt.events, r.opt.batch, r.opt.conns, r.opt.threads, r.authority);
    if (load_run(&r, &res)) {
        mic_client_free(mc);
        return 1;
    }
    if (rc == 0)  /* a delta needs both ends */
        metrics_fetch(mc, &res.after);
    mic_client_free(mc);
    report(&r, &res);
    if (res.t.events_ok < r.opt.events)
        say("only %" PRIu64 " of %" PRIu64 " events were published%s", res.t.events_ok,
            r.opt.events, atomic_load(&stop_requested) == 1 ? " before the deadline" : "");
    rc = res.t.errors == 0 && res.t.events_ok == r.opt.events ? 0 : 1;
    free(res.lat);
    return rc;
}
