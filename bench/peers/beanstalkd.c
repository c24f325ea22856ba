/*
 * bench/peers/beanstalkd.c - the beanstalkd driver of the side-by-side bench
 * (issue 7, bench/peers.py).
 *
 * Owns: the client side of beanstalkd's text protocol (spoken directly
 * over TCP, no library), the mapping of workloads W1..W5 onto tubes and
 * jobs, and the fields the report line adds; the command line, the
 * threads, the latencies and the report line itself are the skeleton's
 * (driver.h). Everything else (progress, errors) goes to stderr.
 *
 *   peer_beanstalkd --addr 127.0.0.1:11300 --workload W1|W2|W3|W4|W5 ...
 *
 * The server is expected to run as
 *   beanstalkd -l 127.0.0.1 -p PORT -b DIR -f 0
 * where -f 0 makes it fsync the binlog after every record it writes: a put
 * is answered INSERTED, and a delete DELETED, only after its record was
 * written and fsync()ed. Reservations are not logged.
 *
 * DESIGN
 * beanstalkd is one thread doing blocking fsyncs, so the client is never the
 * bottleneck and plain blocking sockets are enough: every producer and every
 * worker is a thread with one connection of its own. Commands are pipelined
 * where a workload takes more than one item per round trip: the commands are
 * built in the connection's out buffer, sent with one write, and the replies
 * read back in order (beanstalkd answers a connection's commands in order).
 *
 * The workloads, each in a fresh tube named pb.<runid>.<workload>[.g<i>]:
 *   W1  --producers connections, each one put at a time (closed loop);
 *       latency per put.
 *   W2  beanstalkd has no batch command: --producers connections pipeline
 *       windows of --batch puts and wait for all the INSERTED replies;
 *       latency per window. Each put is still logged and fsynced alone.
 *   W3  --events jobs put with TTR 30 (the lease), untimed; --workers
 *       workers then pipeline --max "reserve-with-timeout 0" (beanstalkd
 *       reserves one job per command) and pipeline a delete for each job
 *       they got, until stats-tube shows nothing ready, reserved or delayed.
 *       Latency per round of reserves. Duplicates and missing are counted by
 *       the seq in each body.
 *   W4  beanstalkd has no per-key order. Approximation: a static partition,
 *       one tube per worker, aggregate k in tube k mod --workers, each tube
 *       read by exactly one worker; jobs are put (untimed) with priority =
 *       aggregate version, so the tube's ready heap, ordered by (priority,
 *       id), hands out an aggregate's versions in order. The worker checks
 *       each aggregate's versions arrive one after the other.
 *   W5  beanstalkd has no time index and no range read, but `peek <id>`
 *       reads a job without consuming it, and ids grow with arrival. --events
 *       jobs are put (untimed) from one connection, so id order is the order
 *       of the timestamps in the bodies. Timed: the middle 10% of the
 *       timestamp span is located by binary search with peek, then read in
 *       id order with pipelined peeks (windows of --batch).
 *
 * Shared state: the stop flag (deadline, signal or failure), the event
 * counter that hands out event numbers, the seen[] byte per event (atomic
 * exchange, so a second delivery is a duplicate), the acked total and the
 * latency slots of d.lat (handed out by an atomic index). Each thread owns
 * its connection and tallies outright; W4's last version per aggregate is
 * only touched by the one worker that owns the aggregate.
 *
 * Exit 0 when every event went through, 1 on a protocol or connection
 * error, a timeout or a shortfall, 2 on a usage error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "driver.h"

#define PEER          "beanstalkd"
#define PUT_TTR       30            /* seconds: the lease of a reserved job */
#define PUT_PRI       1024          /* beanstalkd's customary default priority */
#define PREFILL_CONNS 4             /* connections that prefill W3 */
#define PREFILL_WIN   100           /* puts per pipelined window when prefilling */
#define IN_SLACK      8192          /* receive buffer beyond one job body */
#define MAX_LINE      512           /* longest reply line we accept */
#define IO_TIMEOUT_S  1             /* socket timeout, so a stop is seen */
#define DRAIN_WAIT_US 1000          /* pause when a round got nothing */
#define LOG_BUDGET    20

#define NS_PER_S      1000000000ull

#define DURABILITY "put and delete are answered only after their binlog record is written " \
                   "and fsync()ed (-b DIR -f 0); reservations are not logged"

enum workload { W1 = 1, W2, W3, W4, W5 };

/* Read-only once the threads start, except the atomics.  d.target is
 * --events, or in W5 the events of the window; d.lat the latency per put
 * or window (W1, W2) or per round of reserves (W3, W4). */
struct run {
    struct drv d;                   /* first: the skeleton's */
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char tube[64];                  /* pb.<runid>.<w> */
    char version[64];
    _Atomic uint64_t next_event;    /* shared event counter (W1, W2, W3 prefill) */
    _Atomic uint64_t acked;         /* events acknowledged by the server so far */
    atomic_uchar *seen;             /* W3, W4: one byte per event */
    uint64_t *last_version;         /* W4: per aggregate, owned by one worker */
};

/* One line to stderr, prefixed; quiet once LOG_BUDGET lines were said. */
#define say(...) do { if (drv_may_log()) drv_say(__VA_ARGS__); } while (0)

/* ---- Small helpers ---- */


static uint64_t wall_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* True once the run must end: a signal, the deadline, or a failure. */
static bool stopping(struct run *r)
{
    return drv_stopping(&r->d);
}

/* Record a failure: the run ends and the exit status is 1. */
static void fail(struct run *r)
{
    atomic_fetch_add(&r->d.errors, 1);
    drv_request_stop(3);
}

/* The decimal number right after 'key' in p[0..n); -1 if there is none. */
static int u64_after(const char *p, size_t n, const char *key, uint64_t *out)
{
    size_t kl = strlen(key);
    const char *k = memmem(p, n, key, kl), *end = p + n;
    uint64_t v = 0;
    const char *d;

    if (!k)
        return -1;
    d = k + kl;
    while (d < end && *d == ' ')
        d++;
    if (d >= end || *d < '0' || *d > '9')
        return -1;
    for (; d < end && *d >= '0' && *d <= '9'; d++)
        v = v * 10 + (uint64_t)(*d - '0');
    *out = v;
    return 0;
}

/* Parse a whole decimal option value; -1 if it is not one. */
static int opt_u64(const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v;

    if (!*s || *s == '-')
        return -1;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

/* ---- Connections and the text protocol ---- */

/* One blocking TCP connection. Received bytes are in[start..end); commands
 * being built are out[0..olen), sent together by conn_flush. A line or body
 * returned by conn_line/conn_body stays valid until the next read call. */
struct conn {
    int fd;
    char *in, *out;
    size_t cap, start, end;
    size_t ocap, olen;
};

/* Connect to the server. On success the connection owns its buffers until
 * conn_close. Returns 0, or -1 (logged). */
static int conn_open(struct conn *c, const struct run *r)
{
    struct timeval tv = {.tv_sec = IO_TIMEOUT_S};
    int one = 1;

    memset(c, 0, sizeof *c);
    c->cap = r->d.o.payload_bytes + 64 + IN_SLACK;
    c->ocap = 4096;
    c->in = malloc(c->cap);
    c->out = malloc(c->ocap);
    c->fd = socket(r->addr.ss_family, SOCK_STREAM, 0);
    if (!c->in || !c->out || c->fd < 0)
        goto fail;
    if (connect(c->fd, (const struct sockaddr *)&r->addr, r->addrlen)) {
        say("connect: %s", strerror(errno));
        goto fail;
    }
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    return 0;
fail:
    if (c->fd >= 0)
        close(c->fd);
    free(c->in);
    free(c->out);
    memset(c, 0, sizeof *c);
    c->fd = -1;
    return -1;
}

static void conn_close(struct conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    free(c->in);
    free(c->out);
    memset(c, 0, sizeof *c);
    c->fd = -1;
}

/* Make room for 'n' more bytes in the out buffer; -1 without memory. */
static int out_reserve(struct conn *c, size_t n)
{
    size_t cap = c->ocap;
    char *p;

    if (c->olen + n <= c->ocap)
        return 0;
    while (cap < c->olen + n)
        cap *= 2;
    if (!(p = realloc(c->out, cap)))
        return -1;
    c->out = p;
    c->ocap = cap;
    return 0;
}

static int out_printf(struct conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Append one formatted command to the out buffer. */
static int out_printf(struct conn *c, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || out_reserve(c, (size_t)n + 1))
        return -1;
    va_start(ap, fmt);
    vsnprintf(c->out + c->olen, (size_t)n + 1, fmt, ap);
    va_end(ap);
    c->olen += (size_t)n;
    return 0;
}

/* Send the out buffer whole; it is empty afterwards. */
static int conn_flush(struct conn *c, struct run *r)
{
    size_t off = 0;

    while (off < c->olen) {
        ssize_t n = send(c->fd, c->out + off, c->olen - off, MSG_NOSIGNAL);

        if (n > 0) {
            off += (size_t)n;
        } else if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (stopping(r))
                return -1;
        } else {
            say("send: %s", n ? strerror(errno) : "closed");
            return -1;
        }
    }
    c->olen = 0;
    return 0;
}

/* Receive more bytes, moving unread ones to the front first. */
static int conn_fill(struct conn *c, struct run *r)
{
    if (c->start) {
        memmove(c->in, c->in + c->start, c->end - c->start);
        c->end -= c->start;
        c->start = 0;
    }
    for (;;) {
        ssize_t n = recv(c->fd, c->in + c->end, c->cap - c->end, 0);

        if (n > 0) {
            c->end += (size_t)n;
            return 0;
        }
        if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (stopping(r))
                return -1;
            continue;
        }
        say("recv: %s", n ? strerror(errno) : "server closed the connection");
        return -1;
    }
}

/* Read one reply line; on success *line is NUL-terminated without CRLF. */
static int conn_line(struct conn *c, struct run *r, char **line)
{
    for (;;) {
        char *p = c->end > c->start ? memmem(c->in + c->start, c->end - c->start, "\r\n", 2) : NULL;

        if (p) {
            *p = '\0';
            *line = c->in + c->start;
            c->start = (size_t)(p - c->in) + 2;
            return 0;
        }
        if (c->end - c->start >= MAX_LINE) {
            say("reply line too long");
            return -1;
        }
        if (conn_fill(c, r))
            return -1;
    }
}

/* Read a body of 'n' bytes and its CRLF; *body points at it (not NUL-ended). */
static int conn_body(struct conn *c, struct run *r, size_t n, char **body)
{
    if (n + 2 > c->cap) {
        char *p;

        if (c->start) {
            memmove(c->in, c->in + c->start, c->end - c->start);
            c->end -= c->start;
            c->start = 0;
        }
        if (!(p = realloc(c->in, n + 2 + IN_SLACK)))
            return -1;
        c->in = p;
        c->cap = n + 2 + IN_SLACK;
    }
    while (c->end - c->start < n + 2)
        if (conn_fill(c, r))
            return -1;
    if (c->in[c->start + n] != '\r' || c->in[c->start + n + 1] != '\n') {
        say("body not followed by CRLF");
        return -1;
    }
    *body = c->in + c->start;
    c->start += n + 2;
    return 0;
}

/* Send one command line and read one reply line that must start with
 * 'want'; the reply is left in *reply. */
static int conn_cmd(struct conn *c, struct run *r, const char *cmd, const char *want, char **reply)
{
    char *line;

    if (out_printf(c, "%s\r\n", cmd) || conn_flush(c, r) || conn_line(c, r, &line))
        return -1;
    if (strncmp(line, want, strlen(want))) {
        say("%s: unexpected reply \"%.80s\"", cmd, line);
        return -1;
    }
    if (reply)
        *reply = line;
    return 0;
}

/* Send a stats-like command ("stats", "stats-tube T") and read its YAML
 * body into *yaml / *len (valid until the next read). */
static int conn_stats(struct conn *c, struct run *r, const char *cmd, char **yaml, size_t *len)
{
    char *line;
    uint64_t n;

    if (conn_cmd(c, r, cmd, "OK ", &line) || opt_u64(line + 3, &n) || conn_body(c, r, (size_t)n, yaml))
        return -1;
    *len = (size_t)n;
    return 0;
}

/* Point 'c' at tube 't' for puts. */
static int conn_use(struct conn *c, struct run *r, const char *t)
{
    char cmd[128];

    snprintf(cmd, sizeof cmd, "use %s", t);
    return conn_cmd(c, r, cmd, "USING ", NULL);
}

/* Make 'c' reserve from tube 't' only. */
static int conn_watch(struct conn *c, struct run *r, const char *t)
{
    char cmd[128];

    snprintf(cmd, sizeof cmd, "watch %s", t);
    if (conn_cmd(c, r, cmd, "WATCHING ", NULL))
        return -1;
    return strcmp(t, "default") ? conn_cmd(c, r, "ignore default", "WATCHING ", NULL) : 0;
}

/* ---- Event bodies ---- */

/* Write event number 'n' as one JSON object at 'out'; returns its length,
 * at most peer_event_max(). Like MIC's loadgen: W4 adds aggregate_id a<k> and
 * aggregate_version (event n is version n / A + 1 of aggregate n % A); a
 * nonzero 'ts_us' adds the wall-clock time it was made (W5). The padding
 * brings the object to about --payload-bytes. */
static size_t event_put(const struct run *r, char *out, uint64_t n, uint64_t ts_us)
{
    uint64_t a = (uint64_t)r->d.o.aggregates;
    long agg = r->d.o.workload == W4 ? (long)(n % a) : -1;

    return drv_event_put(&r->d, out, n, agg, (long)(n / a + 1), ts_us);
}

/* Append "put <pri> 0 <ttr> <bytes>" and the body of event 'n'. */
static int out_put(struct conn *c, const struct run *r, uint64_t n, uint32_t pri, uint64_t ts_us)
{
    char body[64 * 1024 + 1024];
    size_t len;

    if (r->d.ev_max > sizeof body)
        return -1;
    len = event_put(r, body, n, ts_us);
    if (out_printf(c, "put %" PRIu32 " 0 %d %zu\r\n", pri, PUT_TTR, len) || out_reserve(c, len + 2))
        return -1;
    memcpy(c->out + c->olen, body, len);
    c->olen += len;
    memcpy(c->out + c->olen, "\r\n", 2);
    c->olen += 2;
    return 0;
}

/* Read one put reply; stores the job id. */
static int read_inserted(struct conn *c, struct run *r, uint64_t *id)
{
    char *line;

    if (conn_line(c, r, &line))
        return -1;
    if (strncmp(line, "INSERTED ", 9) || opt_u64(line + 9, id)) {
        say("put: unexpected reply \"%.80s\"", line);
        return -1;
    }
    return 0;
}

/* ---- Producers (W1, W2 and every prefill) ---- */

/* One producer: a connection putting windows of 'window' events to 'tube'.
 * Events come from r->next_event, or for a W4 prefill (group >= 0) every
 * event n whose aggregate n % A is in tube group (n % A) % workers, in
 * increasing n. With 'ts' set (W5) each event's wall-clock stamp is stored
 * in ts[n], and ids[n] gets its job id.  A timed producer (W1, W2) records
 * the latency of each window in d.lat. */
struct producer {
    struct drv_thread t;        /* first: the pool's */
    char tube[96];
    unsigned window;
    int group;
    bool timed;
    uint64_t cursor, total;
    uint64_t *ts, *ids;
    uint64_t done;
};

/* Fill ns[] with up to 'max' event numbers for 'p'; returns how many. */
static unsigned take_events(struct producer *p, uint64_t *ns, unsigned max)
{
    struct run *r = (struct run *)p->t.d;
    uint64_t a = (uint64_t)r->d.o.aggregates, nw = (uint64_t)r->d.o.workers;
    unsigned k = 0;

    if (p->group < 0) {
        uint64_t first = atomic_fetch_add(&r->next_event, max);

        for (; k < max && first + k < p->total; k++)
            ns[k] = first + k;
        return k;
    }
    for (; k < max && p->cursor < p->total; p->cursor++)
        if ((p->cursor % a) % nw == (uint64_t)p->group)
            ns[k++] = p->cursor;
    return k;
}

static void producer_main(struct drv_thread *t)
{
    struct producer *p = (struct producer *)t;
    struct run *r = (struct run *)t->d;
    struct conn c;
    uint64_t *ns = malloc(p->window * sizeof *ns);
    unsigned k, i;

    if (!ns || conn_open(&c, r)) {
        free(ns);
        fail(r);
        return;
    }
    if (conn_use(&c, r, p->tube))
        goto fail;
    while (!stopping(r) && (k = take_events(p, ns, p->window))) {
        uint64_t t0, id;

        for (i = 0; i < k; i++) {
            uint64_t n = ns[i], ts = p->ts ? wall_us() : 0;
            uint32_t pri = r->d.o.workload == W4 ? (uint32_t)(n / (uint64_t)r->d.o.aggregates + 1)
                                                  : PUT_PRI;

            if (p->ts)
                p->ts[n] = ts;
            if (out_put(&c, r, n, pri, ts))
                goto fail;
        }
        t0 = peer_now_ns();
        if (conn_flush(&c, r))
            goto fail;
        for (i = 0; i < k; i++) {
            if (read_inserted(&c, r, &id))
                goto fail;
            if (p->ids)
                p->ids[ns[i]] = id;
        }
        if (p->timed)
            drv_lat_since(&r->d.lat, t0);
        p->done += k;
        atomic_fetch_add_explicit(&r->acked, k, memory_order_relaxed);
    }
    conn_close(&c);
    free(ns);
    return;
fail:
    if (!stopping(r))
        fail(r);
    conn_close(&c);
    free(ns);
}

/* Run producers to completion; returns the seconds they took. The caller
 * set up ps[0..n) (tube, window, group, timed, total). */
static double producers_run(struct run *r, struct producer *ps, unsigned n)
{
    return drv_threads_run(&r->d, ps, sizeof ps[0], n, producer_main, 0);
}

/* ---- Workers (W3, W4) ---- */

/* One worker: a connection watching one tube, reserving up to 'max' jobs a
 * round and deleting what it got, until the tube is drained. */
struct worker {
    struct drv_thread t;        /* first: the pool's */
    char tube[96];
    uint64_t acked, duplicates, disorder, rounds;
};

/* Set *drained when 'tube' holds nothing ready, reserved, delayed or
 * buried (stats-tube). Returns 0, or -1 on a protocol error. */
static int tube_drained(struct conn *c, struct run *r, const char *tube, bool *drained)
{
    static const char *const keys[] = {"current-jobs-ready:", "current-jobs-reserved:",
                                       "current-jobs-delayed:", "current-jobs-buried:"};
    char cmd[128], *yaml;
    size_t len, i;
    uint64_t v, sum = 0;

    snprintf(cmd, sizeof cmd, "stats-tube %s", tube);
    if (conn_stats(c, r, cmd, &yaml, &len))
        return -1;
    for (i = 0; i < sizeof keys / sizeof *keys; i++) {
        if (u64_after(yaml, len, keys[i], &v)) {
            say("stats-tube: no %s", keys[i]);
            return -1;
        }
        sum += v;
    }
    *drained = sum == 0;
    return 0;
}

/* Account one delivered body: duplicates by seq, W4 order by version. */
static int deliver(struct worker *w, const char *body, size_t len)
{
    struct run *r = (struct run *)w->t.d;
    uint64_t seq, agg, ver;

    if (u64_after(body, len, PEER_EV_PAYLOAD, &seq) || seq >= (uint64_t)r->d.o.events) {
        say("reserved a job that is not one of this run's events");
        return -1;
    }
    if (atomic_exchange_explicit(&r->seen[seq], 1, memory_order_relaxed))
        w->duplicates++;
    if (r->d.o.workload != W4)
        return 0;
    if (u64_after(body, len, PEER_EV_AGG, &agg) || u64_after(body, len, PEER_EV_VER, &ver) ||
        agg >= (uint64_t)r->d.o.aggregates) {
        say("W4 job without aggregate_id/aggregate_version");
        return -1;
    }
    if (r->last_version[agg] + 1 != ver)
        w->disorder++;
    if (ver > r->last_version[agg])
        r->last_version[agg] = ver;
    return 0;
}

static void worker_main(struct drv_thread *t)
{
    struct worker *w = (struct worker *)t;
    struct run *r = (struct run *)t->d;
    unsigned max = r->d.o.max, got, i;
    uint64_t *ids = malloc(max * sizeof *ids);
    struct conn c;

    if (!ids || conn_open(&c, r)) {
        free(ids);
        fail(r);
        return;
    }
    if (conn_watch(&c, r, w->tube))
        goto fail;
    while (!stopping(r)) {
        uint64_t t0, bytes;
        char *line, *body;

        for (i = 0; i < max; i++)
            if (out_printf(&c, "reserve-with-timeout 0\r\n"))
                goto fail;
        t0 = peer_now_ns();
        if (conn_flush(&c, r))
            goto fail;
        for (got = i = 0; i < max; i++) {
            if (conn_line(&c, r, &line))
                goto fail;
            if (!strncmp(line, "RESERVED ", 9)) {
                char *sp = strchr(line + 9, ' ');

                if (!sp) {
                    say("reserve: bad reply \"%.80s\"", line);
                    goto fail;
                }
                *sp = '\0';
                if (opt_u64(line + 9, &ids[got]) || opt_u64(sp + 1, &bytes) ||
                    conn_body(&c, r, (size_t)bytes, &body) || deliver(w, body, (size_t)bytes))
                    goto fail;
                got++;
            } else if (strcmp(line, "TIMED_OUT") && strcmp(line, "DEADLINE_SOON")) {
                say("reserve: unexpected reply \"%.80s\"", line);
                goto fail;
            }
        }
        if (!got) {
            bool drained;

            if (tube_drained(&c, r, w->tube, &drained))
                goto fail;
            if (drained)
                break;
            usleep(DRAIN_WAIT_US);   /* another worker still holds jobs */
            continue;
        }
        drv_lat_since(&r->d.lat, t0);
        w->rounds++;
        for (i = 0; i < got; i++)
            if (out_printf(&c, "delete %" PRIu64 "\r\n", ids[i]))
                goto fail;
        if (conn_flush(&c, r))
            goto fail;
        for (i = 0; i < got; i++) {
            if (conn_line(&c, r, &line))
                goto fail;
            if (strcmp(line, "DELETED")) {
                say("delete: unexpected reply \"%.80s\"", line);
                goto fail;
            }
        }
        w->acked += got;
        atomic_fetch_add_explicit(&r->acked, got, memory_order_relaxed);
    }
    conn_close(&c);
    free(ids);
    return;
fail:
    if (!stopping(r))
        fail(r);
    conn_close(&c);
    free(ids);
}

/* Run 'n' workers until their tubes drain; returns the seconds they took. */
static double workers_run(struct run *r, struct worker *ws, unsigned n)
{
    return drv_threads_run(&r->d, ws, sizeof ws[0], n, worker_main, 0);
}

/* ---- Report ---- */

/* How each workload maps onto beanstalkd, for the report. */
static const char *const notes[] = {
    NULL,
    "--producers connections (default 32) each send one put (TTR 30) to a fresh tube "
    "and wait for INSERTED; latency per put",
    "beanstalkd has no batch command: each producer connection pipelines a window of "
    "--batch puts in one write and waits for all their INSERTED replies (each put is "
    "still logged and fsynced alone); latency per window",
    "jobs prefilled untimed with TTR 30 (the lease); each worker pipelines --max "
    "reserve-with-timeout 0 (beanstalkd reserves one job per command) then a delete per "
    "job, until stats-tube shows the tube empty; latency per round of reserves; "
    "duplicates and missing by the seq in the body",
    "no per-key order in beanstalkd: static partition, one tube per worker (aggregate k "
    "in tube k mod workers) read by that worker alone, jobs put untimed with priority = "
    "version so the (priority, id) ready heap hands out each aggregate in version order; "
    "reserve/delete as W3; versions checked per aggregate; latency per round of reserves",
    "no time index or range read: jobs stored untimed from one connection (ids follow "
    "the body timestamps), then timed: the middle 10% of the timestamp span located by "
    "binary search with peek <id> and read in id order with pipelined peeks (windows of "
    "--batch), consuming nothing; no per-request latency",
};

/* The report's fields after the counts. */
static void fields(struct drv *d, enum drv_part part)
{
    if (part != DRV_PART_TAIL)
        return;
    drv_put_long("target_events", d->target);
    drv_put_bool("timed_out", drv_timed_out());
    drv_put_str("note", notes[d->o.workload]);
}

/* ---- Workloads ---- */

/* W1 and W2: --producers connections put --events jobs, 'window' at a time. */
static int run_put(struct run *r, unsigned window)
{
    unsigned n = (unsigned)r->d.o.producers, i;
    uint64_t events = (uint64_t)r->d.o.events;
    struct producer *ps = calloc(n, sizeof *ps);

    if (!ps)
        return -1;
    for (i = 0; i < n; i++) {
        snprintf(ps[i].tube, sizeof ps[i].tube, "%s", r->tube);
        ps[i].window = window;
        ps[i].group = -1;
        ps[i].timed = true;
        ps[i].total = events;
    }
    drv_lat_init(&r->d.lat, (long)(events / window) + n + 16);
    r->d.seconds = producers_run(r, ps, n);
    r->d.events = (long long)atomic_load(&r->acked);
    r->d.missing = (long long)events - r->d.events;
    free(ps);
    return 0;
}

/* W3 and W4: prefill (untimed), then drain with --workers workers. */
static int run_work(struct run *r)
{
    unsigned nw = (unsigned)r->d.o.workers, np = r->d.o.workload == W4 ? nw : PREFILL_CONNS, i;
    uint64_t events = (uint64_t)r->d.o.events, aggs = (uint64_t)r->d.o.aggregates;
    struct producer *ps = calloc(np, sizeof *ps);
    struct worker *ws = calloc(nw, sizeof *ws);
    uint64_t k, distinct = 0;
    double secs;
    int rc = -1;

    r->seen = calloc(events, sizeof *r->seen);
    if (r->d.o.workload == W4)
        r->last_version = calloc(aggs, sizeof *r->last_version);
    if (!ps || !ws || !r->seen || (r->d.o.workload == W4 && !r->last_version))
        goto out;
    for (i = 0; i < np; i++) {
        if (r->d.o.workload == W4)
            snprintf(ps[i].tube, sizeof ps[i].tube, "%s.g%u", r->tube, i);
        else
            snprintf(ps[i].tube, sizeof ps[i].tube, "%s", r->tube);
        ps[i].window = PREFILL_WIN;
        ps[i].group = r->d.o.workload == W4 ? (int)i : -1;
        ps[i].total = events;
    }
    secs = producers_run(r, ps, np);
    if (atomic_load(&r->d.errors) || stopping(r) || atomic_load(&r->acked) != events) {
        say("prefill failed or was cut short after %.1f s", secs);
        goto out;
    }
    say("prefilled %" PRIu64 " jobs in %.1f s (%.0f/s)", events, secs, events / secs);
    atomic_store(&r->acked, 0);
    for (i = 0; i < nw; i++) {
        if (r->d.o.workload == W4)
            snprintf(ws[i].tube, sizeof ws[i].tube, "%s.g%u", r->tube, i);
        else
            snprintf(ws[i].tube, sizeof ws[i].tube, "%s", r->tube);
    }
    drv_lat_init(&r->d.lat, (long)events + 4 * (long)nw + 16);
    r->d.seconds = workers_run(r, ws, nw);
    for (i = 0; i < nw; i++) {
        r->d.events += (long long)ws[i].acked;
        r->d.dups += (long long)ws[i].duplicates;
        r->d.disorder += (long long)ws[i].disorder;
    }
    for (k = 0; k < events; k++)
        distinct += atomic_load_explicit(&r->seen[k], memory_order_relaxed) != 0;
    r->d.missing = (long long)(events - distinct);
    if (r->d.o.workload == W4)
        for (k = 0; k < aggs; k++)
            if (r->last_version[k] != (uint64_t)r->d.o.per_agg)
                say("aggregate a%" PRIu64 " ended at version %" PRIu64, k, r->last_version[k]);
    rc = 0;
out:
    free(ps);
    free(ws);
    free(r->seen);
    free(r->last_version);
    r->seen = NULL;
    r->last_version = NULL;
    return rc;
}

/* Peek job 'id'; stores the seq and timestamp of its body. 1 if the job is
 * not one of this run's W5 events (or is gone), 0 on success, -1 on error. */
static int peek_one(struct conn *c, struct run *r, uint64_t id, uint64_t *seq, uint64_t *ts)
{
    char *line, *body, *sp;
    uint64_t bytes;

    if (conn_line(c, r, &line))
        return -1;
    if (!strcmp(line, "NOT_FOUND"))
        return 1;
    if (strncmp(line, "FOUND ", 6) || !(sp = strchr(line + 6, ' '))) {
        say("peek %" PRIu64 ": unexpected reply \"%.80s\"", id, line);
        return -1;
    }
    if (opt_u64(sp + 1, &bytes) || conn_body(c, r, (size_t)bytes, &body))
        return -1;
    if ((size_t)bytes < r->d.ev_head_len || memcmp(body, r->d.ev_head, r->d.ev_head_len) ||
        u64_after(body, (size_t)bytes, PEER_EV_PAYLOAD, seq) || u64_after(body, (size_t)bytes, PEER_EV_TS, ts))
        return 1;
    return 0;
}

/* First id in [lo, hi] whose job's timestamp is >= 'at' (hi + 1 if none),
 * by binary search with peek: ids grow with arrival, and one connection put
 * the jobs, so timestamps do not decrease with the id. */
static int find_id(struct conn *c, struct run *r, uint64_t lo, uint64_t hi, uint64_t at, uint64_t *out)
{
    uint64_t end = hi + 1;

    while (lo < end) {
        uint64_t mid = lo + (end - lo) / 2, seq, ts;
        int rc;

        if (out_printf(c, "peek %" PRIu64 "\r\n", mid) || conn_flush(c, r) ||
            (rc = peek_one(c, r, mid, &seq, &ts)) < 0)
            return -1;
        if (rc) {
            say("job %" PRIu64 " is not one of this run's (another client on the server?)", mid);
            return -1;
        }
        if (ts < at)
            lo = mid + 1;
        else
            end = mid;
    }
    *out = lo;
    return 0;
}

/* W5: put --events jobs from one connection (untimed), then read the middle
 * 10% of their timestamp span in id order with peek (timed). */
static int run_window(struct run *r)
{
    struct producer p = {0};
    uint64_t n = (uint64_t)r->d.o.events, *ts = calloc(n, sizeof *ts), *ids = calloc(n, sizeof *ids);
    uint64_t k, t_lo, t_hi, id_lo, id_hi, id, expect = 0, got, last_seq = 0, last_ts = 0;
    bool any = false;
    struct conn c = {.fd = -1};
    double secs;
    uint64_t t0;
    int rc = -1;

    if (!ts || !ids)
        goto out;
    snprintf(p.tube, sizeof p.tube, "%s", r->tube);
    p.window = (unsigned)r->d.o.batch;
    p.group = -1;
    p.total = n;
    p.ts = ts;
    p.ids = ids;
    secs = producers_run(r, &p, 1);
    if (atomic_load(&r->d.errors) || stopping(r) || p.done != n) {
        say("prefill failed or was cut short after %.1f s", secs);
        goto out;
    }
    say("stored %" PRIu64 " jobs in %.1f s (%.0f/s)", n, secs, n / secs);
    for (k = 1; k < n; k++) {
        if (ids[k] != ids[k - 1] + 1 || ts[k] < ts[k - 1]) {
            say("job ids are not consecutive (another client on the server?)");
            goto out;
        }
    }
    t_lo = ts[0] + (ts[n - 1] - ts[0]) * 45 / 100;
    t_hi = ts[0] + (ts[n - 1] - ts[0]) * 55 / 100;
    for (k = 0; k < n; k++)
        expect += ts[k] >= t_lo && ts[k] < t_hi;
    if (conn_open(&c, r))
        goto out;

    t0 = peer_now_ns();
    if (find_id(&c, r, ids[0], ids[n - 1], t_lo, &id_lo) ||
        find_id(&c, r, id_lo, ids[n - 1], t_hi, &id_hi))
        goto out;
    for (id = id_lo; id < id_hi && !stopping(r);) {
        uint64_t b = (uint64_t)r->d.o.batch, upto = id + b < id_hi ? id + b : id_hi, j, seq, t;
        int prc;

        for (j = id; j < upto; j++)
            if (out_printf(&c, "peek %" PRIu64 "\r\n", j))
                goto out;
        if (conn_flush(&c, r))
            goto out;
        for (j = id; j < upto; j++) {
            if ((prc = peek_one(&c, r, j, &seq, &t)) < 0)
                goto out;
            if (prc) {
                say("job %" PRIu64 " is not one of this run's", j);
                goto out;
            }
            if (any && seq == last_seq)
                r->d.dups++;
            else if (any && (seq < last_seq || t < last_ts))
                r->d.disorder++;
            last_seq = seq;
            last_ts = t;
            any = true;
            r->d.events++;
        }
        id = upto;
    }
    r->d.seconds = (double)(peer_now_ns() - t0) / NS_PER_S;
    got = (uint64_t)(r->d.events - r->d.dups);
    r->d.missing = expect > got ? (long long)(expect - got) : 0;
    say("window [%" PRIu64 ", %" PRIu64 ") us: ids %" PRIu64 "..%" PRIu64 ", %" PRIu64 " expected",
        t_lo, t_hi, id_lo, id_hi, expect);
    r->d.target = (long long)expect;   /* the target of a W5 run is the window */
    rc = 0;
out:
    if (c.fd >= 0)
        conn_close(&c);
    free(ts);
    free(ids);
    return rc;
}

/* The server's version from `stats`, without quotes, into out. */
static int server_version(struct run *r, char *out, size_t cap)
{
    struct conn c;
    char *yaml, *v;
    size_t len, n = 0;
    int rc = -1;

    if (conn_open(&c, r))
        return -1;
    if (conn_stats(&c, r, "stats", &yaml, &len))
        goto out;
    if (!(v = memmem(yaml, len, "\nversion:", 9))) {
        say("stats: no version");
        goto out;
    }
    for (v += 9; v < yaml + len && *v != '\n' && n + 1 < cap; v++)
        if (*v != ' ' && *v != '"' && *v != '\\')
            out[n++] = *v;
    out[n] = '\0';
    rc = 0;
out:
    conn_close(&c);
    return rc;
}

/* ---- Open, run, close ---- */

/* Resolve the address, name the tube, ask the server its version. */
static int open_run(struct drv *d)
{
    static const char *const wname[] = {"", "w1", "w2", "w3", "w4", "w5"};
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV}, *ai;
    struct run *r = (struct run *)d;
    char port[16];
    int rc;

    d->version = r->version;
    d->durability = DURABILITY;
    snprintf(port, sizeof port, "%d", d->o.port);
    if ((rc = getaddrinfo(d->o.host, port, &hints, &ai))) {
        say("cannot resolve %s: %s", d->o.host, gai_strerror(rc));
        return DRV_ABORT;
    }
    memcpy(&r->addr, ai->ai_addr, ai->ai_addrlen);
    r->addrlen = ai->ai_addrlen;
    freeaddrinfo(ai);
    snprintf(r->tube, sizeof r->tube, "pb.%s.%s", d->runid, wname[d->o.workload]);
    atomic_init(&r->next_event, 0);
    atomic_init(&r->acked, 0);
    if (server_version(r, r->version, sizeof r->version))
        return DRV_ABORT;
    say("run %s: W%d, tube %s, %ld events", d->runid, d->o.workload, r->tube, d->o.events);
    return DRV_OK;
}

static int run_w1(struct drv *d)
{
    return run_put((struct run *)d, 1) ? DRV_FAILED : DRV_OK;
}

static int run_w2(struct drv *d)
{
    return run_put((struct run *)d, (unsigned)d->o.batch) ? DRV_FAILED : DRV_OK;
}

static int run_w34(struct drv *d)
{
    return run_work((struct run *)d) ? DRV_FAILED : DRV_OK;
}

static int run_w5(struct drv *d)
{
    return run_window((struct run *)d) ? DRV_FAILED : DRV_OK;
}

/* Nothing to clean up on the server: each run has tubes of its own, and
 * beanstalkd drops an empty tube. */
static int close_run(struct drv *d)
{
    (void)d;
    return 0;
}

/* A job body is at most 64 KiB here (out_put). */
static const struct drv_bound bounds[] = {
    {DRV_O_PAYLOAD, 1, 60000},
    {0, 0, 0},
};

static const struct drv_peer beanstalkd_peer = {
    .name = PEER,
    .tag = "pb",
    .addr_arg = "HOST:PORT",
    .addr_help = "the beanstalkd",
    .help = "  W2: --batch puts pipelined per window; W5: --batch peeks pipelined per window.\n",
    .bounds = bounds,
    .w5_batch = 100,
    .log_budget = LOG_BUDGET + 1,   /* the run line of open_run goes through say too */
    .interrupt = true,
    .fail_on = DRV_FAIL_MISSING | DRV_FAIL_SHORT,
    .size = sizeof(struct run),
    .open = open_run,
    .run = {run_w1, run_w2, run_w34, run_w34, run_w5},
    .fields = fields,
    .close = close_run,
};

int main(int argc, char **argv)
{
    return drv_main(&beanstalkd_peer, argc, argv);
}
