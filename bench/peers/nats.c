/* bench/peers/nats.c - the NATS JetStream driver of the side-by-side benchmark
 * (issue 7, bench/peers.py), on the skeleton of bench/peers/driver.h (the
 * command line, the threads, the latencies and the report line are its).
 *
 *   build/peer_nats --addr HOST:PORT --workload W1|W2|W3|W4|W5 [--events N] ...
 *
 * The server is started by the caller:
 *   nats-server -a 127.0.0.1 -p PORT -js -sd TMPDIR
 *
 * DESIGN
 *
 * Each run creates its own file-storage stream BENCH_<runid> (1 replica,
 * limits retention) with the subjects bench.<runid>.>, so a run starts
 * empty however many ran before on the same server, and deletes it at the
 * end (success or not).
 * Events are the JSON objects of bench/loadgen.c, padded to about
 * --payload-bytes:
 *
 *   {"event_id":"nats-<runid>-<n>","topic":"bench","event_type":"bench.created",
 *    ["aggregate_type":"bench","aggregate_id":"a<k>","aggregate_version":<v>,]
 *    "payload":{"seq":<n>,"pad":"xxx..."}}
 *
 * Workloads (what is timed is the part after "timed:"):
 *   W1  --producers threads, each with its own jsCtx; js_Publish of one
 *       event and wait for its PubAck.  timed: all publishes; latency per
 *       publish.
 *   W2  --producers threads, each with its own jsCtx: a window of --batch
 *       js_PublishAsync then js_PublishAsyncComplete.  timed: all windows;
 *       latency per window.
 *   W3  prefill (async, untimed) the stream; one durable pull
 *       consumer (AckExplicit, AckWait 30 s) bound by --workers threads,
 *       each looping natsSubscription_Fetch(--max), natsMsg_Ack for every
 *       message but the last and natsMsg_AckSync for the last, so a worker
 *       claims again only once the server confirmed its acks.  timed: until
 *       every seq was acked; latency per Fetch that returned messages.
 *   W4  as W3, but aggregate a<k> is published on bench.<runid>.p<k%W>.a<k>
 *       by one async publisher (versions in stream order) and worker w owns
 *       the durable pull consumer filtered to partition p<w>: JetStream has
 *       no per-key ordering, so order comes from each key having exactly one
 *       consumer and one worker (no rebalancing; a redelivery after AckWait
 *       could reorder).  Versions are checked per aggregate.
 *   W5  prefill --events (async, untimed), then the middle 10% of the
 *       stream's timestamp span [lo, hi]: an ephemeral pull consumer with
 *       DeliverByStartTime/OptStartTime = lo, AckNone, read in Fetch pages
 *       of --batch until the first message after hi.  timed: from creating
 *       the consumer to the end; latency per page.  Stream sequences must be
 *       consecutive (gaps count as missing), timestamps non-decreasing, and
 *       the message before the first one read must be older than lo.
 *
 * The skeleton's threads share up to CONN_MAX connections (thread i uses
 * connection i % n); cnats connections are thread-safe.  Shared state is a few atomic
 * counters, the latency array (slots handed out by an atomic index), the
 * 'seen' byte per seq (atomic exchange) and the first error (one mutex).
 * In W4 last_version[k] is touched only by the worker owning partition k%W.
 * Every blocking call is bounded (WAIT_MS, FETCH_MS), and every loop checks
 * the stop: the deadline (--max-seconds from the start, prefill included),
 * a signal or the first error.
 *
 * Output: one JSON line on stdout, also after a timeout or failure when
 * something was measured; errors on stderr.  Exit 0 when the workload
 * completed with no error, 1 otherwise, 2 on a usage error.
 */
#define _GNU_SOURCE
#include <nats/nats.h>

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "driver.h"

#define PROG "peer_nats"

#define CONN_MAX 4             /* connections shared by the threads */
#define WAIT_MS 5000           /* JetStream API calls and publish acks */
#define FETCH_MS 1000          /* one Fetch waits at most this long */
#define ACK_WAIT_NS (30LL * 1000000000)
#define PREFILL_THREADS 4
#define PREFILL_WINDOW 1000
#define EVENT_MAX (64 * 1024)

#define DURABILITY "file storage, 1 replica: the PubAck is sent once the message is written " \
    "to the stream's block file (OS page cache), before any fsync; Debian's nats-server 2.9 " \
    "fsyncs the file store only on its background sync interval (no sync-always option), so " \
    "an OS crash or power loss can lose acknowledged events - less durable than the other " \
    "peers; consumer acks are not fsync'd either"

enum workload { W1 = 1, W2, W3, W4, W5 };

/* The threads are the pool's bare ones: thread i uses connection
 * nc[i % nconn].  d.lat is the latency per publish, window or Fetch. */
struct run {
    struct drv d;                   /* first: the skeleton's */
    char url[300], version[80];
    char stream[40], prefix[40], subject[48];
    natsOptions *nopts;
    natsConnection *nc[CONN_MAX];
    int nconn;
    jsCtx *js;                      /* admin context on nc[0] */
    bool created;                   /* the stream exists */
    atomic_long next;               /* next event number to hand out */
    atomic_long done;               /* events acknowledged (first deliveries) */
    atomic_long dups, missing, disorder;
    atomic_llong end_ns;            /* when 'done' reached the target */
    long target;                    /* events the phase (prefill or timed) must complete */
    atomic_uchar *seen;             /* W3/W4: deliveries per seq (saturating) */
    uint32_t *last_version;         /* W4: per aggregate */
    int64_t t0, t1;                 /* the timed part */
    pthread_mutex_t err_lock;
    char err[600];
};

/* ---- Errors ---- */

/* Keep the first error, stop every thread; returns -1. */
__attribute__((format(printf, 2, 3)))
static int fail(struct run *r, const char *fmt, ...)
{
    va_list ap;

    pthread_mutex_lock(&r->err_lock);
    if (!r->err[0]) {
        va_start(ap, fmt);
        vsnprintf(r->err, sizeof r->err, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&r->err_lock);
    drv_request_stop(3);
    return -1;
}

static int nats_fail(struct run *r, const char *what, natsStatus s, jsErrCode jerr)
{
    natsStatus ls;
    const char *last = nats_GetLastError(&ls);

    return fail(r, "%s: %s (JetStream error %d)%s%s", what, natsStatus_GetText(s), (int)jerr,
                last && *last ? ": " : "", last && *last ? last : "");
}

/* True once the run must end: an error, a signal or the deadline. */
static int stopping(struct run *r)
{
    return drv_stopping(&r->d);
}

/* Note the end of the timed part when 'done' reaches the target. */
static void done_add(struct run *r, long n)
{
    long before = atomic_fetch_add(&r->done, n);

    if (before < r->target && before + n >= r->target)
        atomic_store(&r->end_ns, (int64_t)peer_now_ns());
}

/* ---- Events ---- */

/* Event 'n' (aggregate 'agg' version 'ver' when agg >= 0) at 'out', at most
 * peer_event_max(r->d.ev_head_len, sizeof PEER_TOPIC - 1, payload_bytes)
 * bytes; returns its length. */
static int event_put(const struct run *r, char *out, long n, long agg, long ver)
{
    return (int)drv_event_put(&r->d, out, (uint64_t)n, agg, ver, 0);
}

/* The number after "key" in data[0..len), or -1. */
static long field_num(const char *data, int len, const char *key)
{
    size_t klen = strlen(key);
    const char *p = memmem(data, (size_t)len, key, klen), *e = data + len;
    long v = 0;

    if (!p)
        return -1;
    p += klen;
    if (p >= e || *p < '0' || *p > '9')
        return -1;
    for (; p < e && *p >= '0' && *p <= '9'; p++)
        v = v * 10 + (*p - '0');
    return v;
}

/* The subject of event n: W4 puts aggregate k on partition k % workers. */
static void subject_of(const struct run *r, long n, char *out, size_t cap, long *agg, long *ver)
{
    if (r->d.o.workload == W4) {
        *agg = n % r->d.o.aggregates;
        *ver = n / r->d.o.aggregates + 1;
        snprintf(out, cap, "%s.p%ld.a%ld", r->prefix, *agg % r->d.o.workers, *agg);
    } else {
        *agg = *ver = -1;
        snprintf(out, cap, "%s", r->subject);
    }
}

/* ---- Server and stream ---- */

/* The server's version from the INFO line it sends on connect (cnats 3.4
 * does not expose it). */
static int server_version(struct run *r)
{
    char port[16], buf[4096], *v, *q;
    struct addrinfo hints, *ai = NULL;
    struct timeval tv = {5, 0};
    size_t len = 0;
    ssize_t n;
    int fd = -1, ret = -1;

    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    snprintf(port, sizeof port, "%d", r->d.o.port);
    if (getaddrinfo(r->d.o.host, port, &hints, &ai))
        return fail(r, "cannot resolve %s", r->d.o.addr);
    if ((fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol)) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) ||
        connect(fd, ai->ai_addr, ai->ai_addrlen)) {
        fail(r, "cannot connect to %s: %s", r->d.o.addr, strerror(errno));
        goto out;
    }
    while (len < sizeof buf - 1 && !memchr(buf, '\n', len)) {
        if ((n = read(fd, buf + len, sizeof buf - 1 - len)) <= 0)
            break;
        len += (size_t)n;
    }
    buf[len] = 0;
    if (strncmp(buf, "INFO ", 5) || !(v = strstr(buf, "\"version\":\"")) ||
        !(q = strchr(v += 11, '"')) || q - v > 40) {
        fail(r, "%s did not answer with a NATS INFO line", r->d.o.addr);
        goto out;
    }
    snprintf(r->version, sizeof r->version, "nats-server %.*s", (int)(q - v), v);
    ret = 0;
out:
    if (fd >= 0)
        close(fd);
    freeaddrinfo(ai);
    return ret;
}

static int connect_all(struct run *r, int n)
{
    jsOptions jo;
    natsStatus s;

    if ((s = natsOptions_Create(&r->nopts)) != NATS_OK ||
        (s = natsOptions_SetURL(r->nopts, r->url)) != NATS_OK ||
        (s = natsOptions_SetName(r->nopts, PROG)) != NATS_OK ||
        (s = natsOptions_SetTimeout(r->nopts, WAIT_MS)) != NATS_OK ||
        (s = natsOptions_SetAllowReconnect(r->nopts, false)) != NATS_OK)
        return nats_fail(r, "cannot set NATS options", s, 0);
    for (; r->nconn < n; r->nconn++)
        if ((s = natsConnection_Connect(&r->nc[r->nconn], r->nopts)) != NATS_OK)
            return nats_fail(r, "cannot connect to NATS", s, 0);
    jsOptions_Init(&jo);
    jo.Wait = WAIT_MS;
    if ((s = natsConnection_JetStream(&r->js, r->nc[0], &jo)) != NATS_OK)
        return nats_fail(r, "cannot use JetStream", s, 0);
    return 0;
}

static int stream_create(struct run *r)
{
    char subj[48];
    const char *subjects[] = {subj};
    jsStreamInfo *si = NULL;
    jsStreamConfig sc;
    jsErrCode jerr = 0;
    natsStatus s;

    snprintf(subj, sizeof subj, "%s.>", r->prefix);
    jsStreamConfig_Init(&sc);
    sc.Name = r->stream;
    sc.Subjects = subjects;
    sc.SubjectsLen = 1;
    sc.Storage = js_FileStorage;
    sc.Replicas = 1;
    /* Limits retention everywhere: events stay in the stream (as in MIC's log)
     * and a consumer keeps the ack state; a work-queue stream whose acks
     * delete messages measured slower here, 15x so in W4. */
    sc.Retention = js_LimitsPolicy;
    if ((s = js_AddStream(&si, r->js, &sc, NULL, &jerr)) != NATS_OK)
        return nats_fail(r, "cannot create the stream", s, jerr);
    jsStreamInfo_Destroy(si);
    return 0;
}

static int stream_state(struct run *r, jsStreamState *out)
{
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    natsStatus s;

    if ((s = js_GetStreamInfo(&si, r->js, r->stream, NULL, &jerr)) != NATS_OK)
        return nats_fail(r, "cannot read the stream info", s, jerr);
    *out = si->State;
    out->Subjects = NULL;
    out->Deleted = NULL;
    out->Lost = NULL;
    jsStreamInfo_Destroy(si);
    return 0;
}

/* After W1/W2: the stream must hold exactly the events acknowledged. */
static void stream_count(struct run *r)
{
    jsStreamState st;
    long n = atomic_load(&r->done);

    if (stream_state(r, &st))
        return;
    if ((long)st.Msgs < n)
        atomic_store(&r->missing, n - (long)st.Msgs);
    else
        atomic_store(&r->dups, (long)st.Msgs - n);
}

/* ---- Publishing ---- */

/* Run 'fn' on n of the pool's threads; -1 once the run is stopping. */
static int threads_run(struct run *r, long n, void (*fn)(struct drv_thread *t))
{
    drv_threads_run(&r->d, NULL, 0, n, fn, 0);
    return drv_stop_reason() ? -1 : 0;
}

static void w1_thread(struct drv_thread *w)
{
    struct run *r = (struct run *)w->d;
    char *buf = malloc(EVENT_MAX), subj[96];
    jsCtx *js = NULL;
    jsPubOptions po;
    jsOptions jo;
    natsStatus s;
    long n, agg, ver;

    jsOptions_Init(&jo);
    jo.Wait = WAIT_MS;
    if (!buf || (s = natsConnection_JetStream(&js, r->nc[w->id % r->nconn], &jo)) != NATS_OK) {
        fail(r, "cannot create a JetStream context");
        goto out;
    }
    jsPubOptions_Init(&po);
    po.MaxWait = WAIT_MS;
    while (!stopping(r) && (n = atomic_fetch_add(&r->next, 1)) < r->d.o.events) {
        jsPubAck *pa = NULL;
        jsErrCode jerr = 0;
        int len;
        int64_t t;

        subject_of(r, n, subj, sizeof subj, &agg, &ver);
        len = event_put(r, buf, n, agg, ver);
        t = (int64_t)peer_now_ns();
        s = js_Publish(&pa, js, subj, buf, len, &po, &jerr);
        if (s != NATS_OK) {
            nats_fail(r, "js_Publish", s, jerr);
            break;
        }
        drv_lat_add(&r->d.lat, (double)((int64_t)peer_now_ns() - t) / 1e6);
        jsPubAck_Destroy(pa);
        done_add(r, 1);
    }
out:
    jsCtx_Destroy(js);
    free(buf);
}

static void on_async_err(jsCtx *js, jsPubAckErr *pae, void *closure)
{
    struct run *r = closure;

    (void)js;
    fail(r, "asynchronous publish failed: %s (JetStream error %d) %s", natsStatus_GetText(pae->Err),
         (int)pae->ErrCode, pae->ErrText ? pae->ErrText : "");
}

/* Windows of 'window' async publishes, each completed before the next.
 * W2 (timed) records a latency per window; the prefills do not. */
static void async_thread(struct drv_thread *w, long window, int timed)
{
    struct run *r = (struct run *)w->d;
    char *buf = malloc(EVENT_MAX), subj[96];
    jsCtx *js = NULL;
    jsPubOptions po;
    jsOptions jo;
    natsStatus s;
    long n0, agg, ver;

    jsOptions_Init(&jo);
    jo.Wait = WAIT_MS;
    jo.PublishAsync.MaxPending = window;
    jo.PublishAsync.ErrHandler = on_async_err;
    jo.PublishAsync.ErrHandlerClosure = r;
    if (!buf || (s = natsConnection_JetStream(&js, r->nc[w->id % r->nconn], &jo)) != NATS_OK) {
        fail(r, "cannot create a JetStream context");
        goto out;
    }
    jsPubOptions_Init(&po);
    po.MaxWait = WAIT_MS;
    while (!stopping(r) && (n0 = atomic_fetch_add(&r->next, window)) < r->target) {
        long cnt = r->target - n0 < window ? r->target - n0 : window;
        int64_t t = (int64_t)peer_now_ns();

        for (long n = n0; n < n0 + cnt; n++) {
            int len;

            subject_of(r, n, subj, sizeof subj, &agg, &ver);
            len = event_put(r, buf, n, agg, ver);
            if ((s = js_PublishAsync(js, subj, buf, len, &po)) != NATS_OK) {
                nats_fail(r, "js_PublishAsync", s, 0);
                goto out;
            }
        }
        if ((s = js_PublishAsyncComplete(js, &po)) != NATS_OK) {
            nats_fail(r, "js_PublishAsyncComplete", s, 0);
            break;
        }
        if (drv_stop_reason())
            break;
        if (timed)
            drv_lat_add(&r->d.lat, (double)((int64_t)peer_now_ns() - t) / 1e6);
        done_add(r, cnt);
    }
out:
    jsCtx_Destroy(js);
    free(buf);
}

static void w2_thread(struct drv_thread *w)
{
    async_thread(w, w->d->o.batch, 1);
}

static void prefill_thread(struct drv_thread *w)
{
    async_thread(w, PREFILL_WINDOW, 0);
}

/* Store events 0..n-1, untimed.  W4 uses one publisher so that every
 * aggregate's versions reach the stream in order. */
static int prefill(struct run *r, long n)
{
    int threads = r->d.o.workload == W4 ? 1 : PREFILL_THREADS;

    r->target = n;
    atomic_store(&r->next, 0);
    atomic_store(&r->done, 0);
    if (threads_run(r, threads, prefill_thread))
        return -1;
    atomic_store(&r->next, 0);
    atomic_store(&r->done, 0);
    atomic_store(&r->end_ns, 0);
    return 0;
}

/* ---- Consuming (W3, W4) ---- */

static int consumer_create(struct run *r, const char *name, const char *filter)
{
    jsConsumerInfo *ci = NULL;
    jsConsumerConfig cc;
    jsErrCode jerr = 0;
    natsStatus s;

    jsConsumerConfig_Init(&cc);
    cc.Durable = name;
    cc.FilterSubject = filter;
    cc.AckPolicy = js_AckExplicit;
    cc.AckWait = ACK_WAIT_NS;
    cc.DeliverPolicy = js_DeliverAll;
    cc.MaxAckPending = 4 * r->d.o.workers * r->d.o.max;
    if ((s = js_AddConsumer(&ci, r->js, r->stream, &cc, NULL, &jerr)) != NATS_OK)
        return nats_fail(r, "cannot create the consumer", s, jerr);
    jsConsumerInfo_Destroy(ci);
    return 0;
}

/* One delivery: count it, and in W4 check its aggregate's version.
 * Returns 1 for a first delivery. */
static int delivered(struct run *r, natsMsg *m)
{
    const char *data = natsMsg_GetData(m);
    int len = natsMsg_GetDataLength(m);
    long seq = field_num(data, len, "\"seq\":");

    if (seq < 0 || seq >= r->d.o.events) {
        fail(r, "a message without a valid seq: %.80s", data ? data : "");
        return 0;
    }
    if (atomic_exchange(&r->seen[seq], 1)) {
        atomic_fetch_add(&r->dups, 1);
        return 0;
    }
    if (r->d.o.workload == W4) {
        long agg = field_num(data, len, "\"aggregate_id\":\"a");
        long ver = field_num(data, len, "\"aggregate_version\":");

        if (agg < 0 || agg >= r->d.o.aggregates || ver < 1) {
            fail(r, "a message without aggregate_id/aggregate_version: %.80s", data);
            return 0;
        }
        if ((uint32_t)ver != r->last_version[agg] + 1)
            atomic_fetch_add(&r->disorder, 1);
        r->last_version[agg] = (uint32_t)ver;
    }
    return 1;
}

static void consume_thread(struct drv_thread *w)
{
    struct run *r = (struct run *)w->d;
    natsSubscription *sub = NULL;
    jsCtx *js = NULL;
    jsSubOptions so;
    jsErrCode jerr = 0;
    jsOptions jo;
    natsStatus s;
    char durable[24], filter[64];
    long mine = 0, expect = r->target;

    if (r->d.o.workload == W4) {
        snprintf(durable, sizeof durable, "p%ld", w->id);
        snprintf(filter, sizeof filter, "%s.p%ld.>", r->prefix, w->id);
        /* Aggregates k with k % workers == index, per_agg events each. */
        expect = (r->d.o.aggregates / r->d.o.workers +
                  (w->id < r->d.o.aggregates % r->d.o.workers)) * r->d.o.per_agg;
    } else {
        snprintf(durable, sizeof durable, "w3");
        snprintf(filter, sizeof filter, "%s", r->subject);
    }
    jsOptions_Init(&jo);
    jo.Wait = WAIT_MS;
    if ((s = natsConnection_JetStream(&js, r->nc[w->id % r->nconn], &jo)) != NATS_OK) {
        nats_fail(r, "cannot create a JetStream context", s, 0);
        goto out;
    }
    jsSubOptions_Init(&so);
    so.Stream = r->stream;
    so.Consumer = durable;
    if ((s = js_PullSubscribe(&sub, js, filter, durable, NULL, &so, &jerr)) != NATS_OK) {
        nats_fail(r, "cannot bind to the pull consumer", s, jerr);
        goto out;
    }
    while (!stopping(r) && atomic_load(&r->done) < r->target && mine < expect) {
        natsMsgList list = {NULL, 0};
        int64_t t = (int64_t)peer_now_ns();
        long fresh = 0;

        s = natsSubscription_Fetch(&list, sub, (int)r->d.o.max, FETCH_MS, &jerr);
        if (s == NATS_TIMEOUT)
            continue;
        if (s != NATS_OK) {
            nats_fail(r, "natsSubscription_Fetch", s, jerr);
            break;
        }
        if (list.Count > 0)
            drv_lat_add(&r->d.lat, (double)((int64_t)peer_now_ns() - t) / 1e6);
        for (int i = 0; i < list.Count && s == NATS_OK; i++) {
            fresh += delivered(r, list.Msgs[i]);
            if (i < list.Count - 1)
                s = natsMsg_Ack(list.Msgs[i], NULL);
            else
                s = natsMsg_AckSync(list.Msgs[i], NULL, &jerr);
        }
        natsMsgList_Destroy(&list);
        if (s != NATS_OK) {
            nats_fail(r, "acknowledging", s, jerr);
            break;
        }
        mine += fresh;
        done_add(r, fresh);
    }
out:
    natsSubscription_Destroy(sub);
    jsCtx_Destroy(js);
}

static int run_consume(struct run *r)
{
    long n = r->d.o.events;

    if (!(r->seen = calloc((size_t)n, sizeof *r->seen)))
        return fail(r, "out of memory");
    if (r->d.o.workload == W4 && !(r->last_version = calloc((size_t)r->d.o.aggregates, sizeof *r->last_version)))
        return fail(r, "out of memory");
    if (prefill(r, n))
        return -1;
    if (r->d.o.workload == W4) {
        for (long p = 0; p < r->d.o.workers; p++) {
            char name[24], filter[64];

            snprintf(name, sizeof name, "p%ld", p);
            snprintf(filter, sizeof filter, "%s.p%ld.>", r->prefix, p);
            if (consumer_create(r, name, filter))
                return -1;
        }
    } else if (consumer_create(r, "w3", r->subject)) {
        return -1;
    }
    r->target = n;
    r->t0 = (int64_t)peer_now_ns();
    threads_run(r, r->d.o.workers, consume_thread);
    r->t1 = atomic_load(&r->end_ns) ? atomic_load(&r->end_ns) : (int64_t)peer_now_ns();
    for (long i = 0; i < n; i++)
        if (!atomic_load(&r->seen[i]))
            atomic_fetch_add(&r->missing, 1);
    return drv_stop_reason() ? -1 : 0;
}

/* ---- Time window (W5) ---- */

static int run_window(struct run *r)
{
    natsSubscription *sub = NULL;
    jsStreamState st;
    jsSubOptions so;
    jsErrCode jerr = 0;
    natsStatus s;
    int64_t lo, hi, span, prev_ts = 0;
    uint64_t prev_seq = 0, first_seq = 0;
    int done = 0, timeouts = 0;

    if (prefill(r, r->d.o.events) || stream_state(r, &st))
        return -1;
    if ((long)st.Msgs != r->d.o.events)
        return fail(r, "the stream holds %llu messages, not %ld", (unsigned long long)st.Msgs, r->d.o.events);
    span = st.LastTime - st.FirstTime;
    lo = st.FirstTime + span * 45 / 100;
    hi = st.FirstTime + span * 55 / 100;

    r->t0 = (int64_t)peer_now_ns();
    jsSubOptions_Init(&so);
    so.Stream = r->stream;
    so.Config.DeliverPolicy = js_DeliverByStartTime;
    so.Config.OptStartTime = lo;
    so.Config.AckPolicy = js_AckNone;
    so.Config.ReplayPolicy = js_ReplayInstant;
    so.Config.MaxRequestBatch = r->d.o.batch;
    if ((s = js_PullSubscribe(&sub, r->js, r->subject, NULL, NULL, &so, &jerr)) != NATS_OK)
        return nats_fail(r, "cannot create the time-window consumer", s, jerr);
    while (!done && !stopping(r)) {
        natsMsgList list = {NULL, 0};
        int64_t t = (int64_t)peer_now_ns();
        long fresh = 0;

        s = natsSubscription_Fetch(&list, sub, (int)r->d.o.batch, FETCH_MS, &jerr);
        if (s == NATS_TIMEOUT && prev_seq >= st.LastSeq)
            break;   /* the window ends at the stream's end */
        /* The stream is complete before the read starts, so a consumer that
         * stays silent for three fetches has nothing more to hand out (the
         * seq checks below count what it left out as missing). */
        if (s == NATS_TIMEOUT && ++timeouts >= 3)
            break;
        if (s == NATS_TIMEOUT)
            continue;
        timeouts = 0;
        if (s != NATS_OK) {
            nats_fail(r, "natsSubscription_Fetch", s, jerr);
            break;
        }
        drv_lat_add(&r->d.lat, (double)((int64_t)peer_now_ns() - t) / 1e6);
        for (int i = 0; i < list.Count && !done; i++) {
            jsMsgMetaData *md = NULL;

            if ((s = natsMsg_GetMetaData(&md, list.Msgs[i])) != NATS_OK) {
                nats_fail(r, "natsMsg_GetMetaData", s, 0);
                done = 1;
                break;
            }
            if (md->Timestamp > hi) {
                done = 1;
            } else {
                if (!first_seq)
                    first_seq = md->Sequence.Stream;
                if (md->Timestamp < lo || md->Timestamp < prev_ts ||
                    (prev_seq && md->Sequence.Stream <= prev_seq))
                    atomic_fetch_add(&r->disorder, 1);
                else if (prev_seq && md->Sequence.Stream > prev_seq + 1)
                    atomic_fetch_add(&r->missing, (long)(md->Sequence.Stream - prev_seq - 1));
                prev_seq = md->Sequence.Stream;
                prev_ts = md->Timestamp;
                fresh++;
            }
            jsMsgMetaData_Destroy(md);
        }
        natsMsgList_Destroy(&list);
        done_add(r, fresh);
    }
    r->t1 = (int64_t)peer_now_ns();
    natsSubscription_Unsubscribe(sub);
    natsSubscription_Destroy(sub);
    if (drv_stop_reason())
        return -1;
    /* The message just before the first one read must be older than lo. */
    if (first_seq > st.FirstSeq) {
        natsMsg *m = NULL;

        if ((s = js_GetMsg(&m, r->js, r->stream, first_seq - 1, NULL, &jerr)) != NATS_OK)
            return nats_fail(r, "js_GetMsg", s, jerr);
        if (natsMsg_GetTime(m) >= lo)
            atomic_fetch_add(&r->missing, 1);
        natsMsg_Destroy(m);
    }
    return 0;
}

/* ---- Report ---- */

static const char *note_of(const struct run *r)
{
    static char note[600];
    const struct drv_opts *o = &r->d.o;

    switch (o->workload) {
    case W1:
        snprintf(note, sizeof note, "%ld threads over %d shared connections each js_Publish one event "
                 "and wait for its PubAck; latency per publish", o->producers, r->nconn);
        break;
    case W2:
        snprintf(note, sizeof note, "%ld producers (own jsCtx, %d shared connections) each send a window "
                 "of %ld js_PublishAsync then wait for all PubAcks with js_PublishAsyncComplete; "
                 "latency per window", o->producers, r->nconn, o->batch);
        break;
    case W3:
        snprintf(note, sizeof note, "stream (limits retention) prefilled untimed; %ld workers share one "
                 "durable pull consumer (AckExplicit, AckWait 30 s), natsSubscription_Fetch(%ld) then natsMsg_Ack "
                 "per message and natsMsg_AckSync on the batch's last (server-confirmed acks before the "
                 "next claim), until drained; latency per Fetch; duplicates/missing by the payload's seq",
                 o->workers, o->max);
        break;
    case W4:
        snprintf(note, sizeof note, "no per-key order in JetStream, approximated by static partitioning: "
                 "aggregate a<k> is published (one publisher, untimed) on subject p<k%%%ld>.a<k> and "
                 "each of %ld workers owns the durable pull consumer of one "
                 "partition (AckExplicit, AckWait 30 s, Fetch(%ld), Ack + AckSync on the last), so "
                 "every key is read by one worker in stream order (no rebalancing; a redelivery could "
                 "reorder); versions verified per aggregate; latency per Fetch",
                 o->workers, o->workers, o->max);
        break;
    case W5:
        snprintf(note, sizeof note, "%ld events stored untimed (%d async publishers); the middle 10%% of "
                 "the stream's timestamp span read in order by an ephemeral pull consumer "
                 "(DeliverByStartTime with OptStartTime, AckNone) in Fetch pages of %ld until the first "
                 "message past the end time; latency per page; sequence gaps count as missing",
                 o->events, PREFILL_THREADS, o->batch);
        break;
    }
    return note;
}

/* The report's fields: what the workload ran with before the counts, then
 * timed_out and the note. */
static void fields(struct drv *d, enum drv_part part)
{
    struct run *r = (struct run *)d;
    const struct drv_opts *o = &d->o;

    if (part == DRV_PART_TAIL) {
        drv_put_bool("timed_out", drv_timed_out());
        drv_put_str("note", note_of(r));
        return;
    }
    switch (o->workload) {
    case W1:
        drv_put_long("producers", o->producers);
        break;
    case W2:
        drv_put_long("producers", o->producers);
        drv_put_long("batch", o->batch);
        break;
    case W3:
        drv_put_long("workers", o->workers);
        drv_put_long("max", o->max);
        break;
    case W4:
        drv_put_long("workers", o->workers);
        drv_put_long("max", o->max);
        drv_put_long("aggregates", o->aggregates);
        drv_put_long("per_aggregate", o->per_agg);
        break;
    case W5:
        drv_put_long("stored", o->events);
        drv_put_long("page", o->batch);
        break;
    }
    drv_put_long("payload_bytes", o->payload_bytes);
}

/* ---- Open, run, close ---- */

/* The names of this run, the connections and the stream. */
static int open_run(struct drv *d)
{
    struct run *r = (struct run *)d;
    int w = d->o.workload, threads;

    pthread_mutex_init(&r->err_lock, NULL);
    d->version = r->version;
    d->durability = DURABILITY;
    snprintf(r->stream, sizeof r->stream, "BENCH_%s", d->runid);
    snprintf(r->prefix, sizeof r->prefix, "bench.%s", d->runid);
    snprintf(r->subject, sizeof r->subject, "%s.ev", r->prefix);
    snprintf(r->url, sizeof r->url, "%s%s", strncmp(d->o.addr, "nats://", 7) ? "nats://" : "",
             d->o.addr);
    drv_lat_init(&d->lat, d->o.events + 1024);
    if (!d->lat.ms) {
        fail(r, "out of memory");
        return DRV_ABORT;
    }
    threads = w == W1 || w == W2 ? (int)d->o.producers
              : w == W5 ? PREFILL_THREADS : (int)d->o.workers;
    if (threads < PREFILL_THREADS && w != W1 && w != W2)
        threads = PREFILL_THREADS;
    if (server_version(r) || connect_all(r, threads < CONN_MAX ? threads : CONN_MAX) ||
        stream_create(r))
        return DRV_ABORT;
    r->created = true;
    return DRV_OK;
}

/* The workload; reported when something was timed. */
static int run_workload(struct drv *d)
{
    struct run *r = (struct run *)d;

    switch (d->o.workload) {
    case W1:
    case W2:
        r->target = d->o.events;
        r->t0 = (int64_t)peer_now_ns();
        threads_run(r, d->o.producers, d->o.workload == W1 ? w1_thread : w2_thread);
        r->t1 = atomic_load(&r->end_ns) ? atomic_load(&r->end_ns) : (int64_t)peer_now_ns();
        if (!drv_stop_reason())
            stream_count(r);
        break;
    case W3:
    case W4:
        run_consume(r);
        break;
    case W5:
        run_window(r);
        break;
    }
    d->events = atomic_load(&r->done);
    d->seconds = (double)(r->t1 - r->t0) / 1e9;
    d->dups = atomic_load(&r->dups);
    d->missing = atomic_load(&r->missing);
    d->disorder = atomic_load(&r->disorder);
    if (r->t1 <= r->t0)
        return DRV_ABORT;
    return drv_stop_reason() ? DRV_FAILED : DRV_OK;
}

/* The stream deleted (success or not), the connections closed, and the
 * reason of a failed run on stderr. */
static int close_run(struct drv *d)
{
    struct run *r = (struct run *)d;
    int why = drv_stop_reason();

    if (r->created)
        js_DeleteStream(r->js, r->stream, NULL, NULL);
    jsCtx_Destroy(r->js);
    for (int i = 0; i < r->nconn; i++)
        natsConnection_Destroy(r->nc[i]);
    if (r->nopts) {
        natsOptions_Destroy(r->nopts);
        nats_CloseAndWait(2000);
    }
    if (d->rc != DRV_OK || why)
        drv_say("%s", r->err[0] ? r->err : why == 1 ? "stopped by --max-seconds"
                : why == 2 ? "stopped by a signal" : "failed");
    free(r->seen);
    free(r->last_version);
    pthread_mutex_destroy(&r->err_lock);
    return 0;
}

static const struct drv_bound bounds[] = {
    {DRV_O_PAYLOAD, 0, EVENT_MAX / 2},
    {0, 0, 0},
};

static const struct drv_peer nats_peer = {
    .name = "nats",
    .tag = "nats",
    .addr_arg = "HOST:PORT",
    .addr_help = "the nats-server (nats://HOST:PORT also)",
    .help = "  W2: --batch async publishes per window; W5 reads Fetch pages of --batch.\n",
    .bounds = bounds,
    .w5_batch = 1000,
    .size = sizeof(struct run),
    .open = open_run,
    .run = {run_workload, run_workload, run_workload, run_workload, run_workload},
    .fields = fields,
    .close = close_run,
};

int main(int argc, char **argv)
{
    return drv_main(&nats_peer, argc, argv);
}
