/* bench/peers/nats.c - the NATS JetStream driver of the side-by-side benchmark
 * (issue 7, bench/peers.py).
 *
 *   build/peer_nats --addr HOST:PORT --workload W1|W2|W3|W4|W5 [--events N]
 *       [--producers N] [--batch N] [--workers N] [--max N] [--aggregates A]
 *       [--per-aggregate K] [--payload-bytes 300] [--max-seconds S]
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
 * Threads share up to CONN_MAX connections (thread i uses connection
 * i % n); cnats connections are thread-safe.  Shared state is a few atomic
 * counters, the latency array (slots handed out by an atomic index), the
 * 'seen' byte per seq (atomic exchange) and the first error (one mutex).
 * In W4 last_version[k] is touched only by the worker owning partition k%W.
 * Every blocking call is bounded (WAIT_MS, FETCH_MS), and every loop checks
 * the deadline (--max-seconds from the start, prefill included).
 *
 * Output: one JSON line on stdout, also after a timeout or failure when
 * something was measured; errors on stderr.  Exit 0 when the workload
 * completed with no error, 1 otherwise, 2 on a usage error.
 */
#define _GNU_SOURCE
#include <nats/nats.h>

#include <errno.h>
#include <getopt.h>
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
#include <time.h>
#include <unistd.h>

#include "peerlib.h"

#define PROG "peer_nats"
#define EXIT_FAIL 1
#define EXIT_USAGE 2

#define CONN_MAX 4             /* connections shared by the threads */
#define WAIT_MS 5000           /* JetStream API calls and publish acks */
#define FETCH_MS 1000          /* one Fetch waits at most this long */
#define ACK_WAIT_NS (30LL * 1000000000)
#define PREFILL_THREADS 4
#define PREFILL_WINDOW 1000
#define EVENT_MAX (64 * 1024)
#define NS_PER_S 1000000000LL

#define DURABILITY "file storage, 1 replica: the PubAck is sent once the message is written " \
    "to the stream's block file (OS page cache), before any fsync; Debian's nats-server 2.9 " \
    "fsyncs the file store only on its background sync interval (no sync-always option), so " \
    "an OS crash or power loss can lose acknowledged events - less durable than the other " \
    "peers; consumer acks are not fsync'd either"

enum workload { W1 = 1, W2, W3, W4, W5 };

struct opts {
    const char *addr;
    enum workload w;
    long events, producers, batch, workers, max, aggregates, per_agg, payload_bytes;
    double max_seconds;
};

struct run {
    struct opts o;
    char url[300], version[80], runid[17];
    char ev_head[64];               /* {"event_id":"nats-<runid>- */
    size_t ev_head_len;
    char stream[40], prefix[40], subject[48];
    natsOptions *nopts;
    natsConnection *nc[CONN_MAX];
    int nconn;
    jsCtx *js;                      /* admin context on nc[0] */
    int64_t deadline;               /* CLOCK_MONOTONIC ns */
    atomic_int stop;                /* 1 = error or deadline */
    atomic_int timed_out;
    atomic_long next;               /* next event number to hand out */
    atomic_long done;               /* events acknowledged (first deliveries) */
    atomic_long dups, missing, disorder;
    atomic_llong end_ns;            /* when 'done' reached the target */
    long target;                    /* events the timed part must complete */
    struct peer_lat lat;
    atomic_uchar *seen;             /* W3/W4: deliveries per seq (saturating) */
    uint32_t *last_version;         /* W4: per aggregate */
    int64_t t0, t1;                 /* the timed part */
    pthread_mutex_t err_lock;
    char err[600];
};

struct worker {
    struct run *r;
    int index;
    pthread_t tid;
};

/* ---- Errors, time, latency ---- */

static int64_t wall_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

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
    atomic_store(&r->stop, 1);
    return -1;
}

static int nats_fail(struct run *r, const char *what, natsStatus s, jsErrCode jerr)
{
    natsStatus ls;
    const char *last = nats_GetLastError(&ls);

    return fail(r, "%s: %s (JetStream error %d)%s%s", what, natsStatus_GetText(s), (int)jerr,
                last && *last ? ": " : "", last && *last ? last : "");
}

/* True once the run must end: an error, or the deadline (recorded). */
static int stopping(struct run *r)
{
    if (atomic_load(&r->stop))
        return 1;
    if ((int64_t)peer_now_ns() > r->deadline) {
        atomic_store(&r->timed_out, 1);
        atomic_store(&r->stop, 1);
        return 1;
    }
    return 0;
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
 * peer_event_max(r->ev_head_len, sizeof PEER_TOPIC - 1, payload_bytes)
 * bytes; returns its length. */
static int event_put(const struct run *r, char *out, long n, long agg, long ver)
{
    return (int)peer_event_put(out, r->ev_head, r->ev_head_len, (uint64_t)n, PEER_TOPIC, agg,
                               ver, 0, (size_t)r->o.payload_bytes);
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
    if (r->o.w == W4) {
        *agg = n % r->o.aggregates;
        *ver = n / r->o.aggregates + 1;
        snprintf(out, cap, "%s.p%ld.a%ld", r->prefix, *agg % r->o.workers, *agg);
    } else {
        *agg = *ver = -1;
        snprintf(out, cap, "%s", r->subject);
    }
}

/* ---- Server and stream ---- */

static int split_addr(const char *addr, char *host, size_t hcap, char *port, size_t pcap)
{
    const char *a = strncmp(addr, "nats://", 7) ? addr : addr + 7;
    const char *colon = strrchr(a, ':');

    if (!colon || colon == a || !colon[1] || (size_t)(colon - a) >= hcap || strlen(colon + 1) >= pcap)
        return -1;
    memcpy(host, a, (size_t)(colon - a));
    host[colon - a] = 0;
    strcpy(port, colon + 1);
    return 0;
}

/* The server's version from the INFO line it sends on connect (cnats 3.4
 * does not expose it). */
static int server_version(struct run *r)
{
    char host[256], port[32], buf[4096], *v, *q;
    struct addrinfo hints, *ai = NULL;
    struct timeval tv = {5, 0};
    size_t len = 0;
    ssize_t n;
    int fd = -1, ret = -1;

    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    if (split_addr(r->o.addr, host, sizeof host, port, sizeof port) ||
        getaddrinfo(host, port, &hints, &ai))
        return fail(r, "cannot resolve %s", r->o.addr);
    if ((fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol)) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) ||
        connect(fd, ai->ai_addr, ai->ai_addrlen)) {
        fail(r, "cannot connect to %s: %s", r->o.addr, strerror(errno));
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
        fail(r, "%s did not answer with a NATS INFO line", r->o.addr);
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

static int threads_run(struct run *r, long n, void *(*fn)(void *))
{
    struct worker *w = calloc((size_t)n, sizeof *w);
    long started = 0;

    if (!w)
        return fail(r, "out of memory");
    for (; started < n; started++) {
        w[started].r = r;
        w[started].index = (int)started;
        if (pthread_create(&w[started].tid, NULL, fn, &w[started])) {
            fail(r, "cannot start a thread");
            break;
        }
    }
    for (long i = 0; i < started; i++)
        pthread_join(w[i].tid, NULL);
    free(w);
    return atomic_load(&r->stop) ? -1 : 0;
}

static void *w1_thread(void *arg)
{
    struct worker *w = arg;
    struct run *r = w->r;
    char *buf = malloc(EVENT_MAX), subj[96];
    jsCtx *js = NULL;
    jsPubOptions po;
    jsOptions jo;
    natsStatus s;
    long n, agg, ver;

    jsOptions_Init(&jo);
    jo.Wait = WAIT_MS;
    if (!buf || (s = natsConnection_JetStream(&js, r->nc[w->index % r->nconn], &jo)) != NATS_OK) {
        fail(r, "cannot create a JetStream context");
        goto out;
    }
    jsPubOptions_Init(&po);
    po.MaxWait = WAIT_MS;
    while (!stopping(r) && (n = atomic_fetch_add(&r->next, 1)) < r->o.events) {
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
        peer_lat_add(&r->lat, (double)((int64_t)peer_now_ns() - t) / 1e6);
        jsPubAck_Destroy(pa);
        done_add(r, 1);
    }
out:
    jsCtx_Destroy(js);
    free(buf);
    return NULL;
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
static void *async_thread(void *arg, long window, int timed)
{
    struct worker *w = arg;
    struct run *r = w->r;
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
    if (!buf || (s = natsConnection_JetStream(&js, r->nc[w->index % r->nconn], &jo)) != NATS_OK) {
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
        if (atomic_load(&r->stop))
            break;
        if (timed)
            peer_lat_add(&r->lat, (double)((int64_t)peer_now_ns() - t) / 1e6);
        done_add(r, cnt);
    }
out:
    jsCtx_Destroy(js);
    free(buf);
    return NULL;
}

static void *w2_thread(void *arg)
{
    struct worker *w = arg;

    return async_thread(arg, w->r->o.batch, 1);
}

static void *prefill_thread(void *arg)
{
    return async_thread(arg, PREFILL_WINDOW, 0);
}

/* Store events 0..n-1, untimed.  W4 uses one publisher so that every
 * aggregate's versions reach the stream in order. */
static int prefill(struct run *r, long n)
{
    int threads = r->o.w == W4 ? 1 : PREFILL_THREADS;

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
    cc.MaxAckPending = 4 * r->o.workers * r->o.max;
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

    if (seq < 0 || seq >= r->o.events) {
        fail(r, "a message without a valid seq: %.80s", data ? data : "");
        return 0;
    }
    if (atomic_exchange(&r->seen[seq], 1)) {
        atomic_fetch_add(&r->dups, 1);
        return 0;
    }
    if (r->o.w == W4) {
        long agg = field_num(data, len, "\"aggregate_id\":\"a");
        long ver = field_num(data, len, "\"aggregate_version\":");

        if (agg < 0 || agg >= r->o.aggregates || ver < 1) {
            fail(r, "a message without aggregate_id/aggregate_version: %.80s", data);
            return 0;
        }
        if ((uint32_t)ver != r->last_version[agg] + 1)
            atomic_fetch_add(&r->disorder, 1);
        r->last_version[agg] = (uint32_t)ver;
    }
    return 1;
}

static void *consume_thread(void *arg)
{
    struct worker *w = arg;
    struct run *r = w->r;
    natsSubscription *sub = NULL;
    jsCtx *js = NULL;
    jsSubOptions so;
    jsErrCode jerr = 0;
    jsOptions jo;
    natsStatus s;
    char durable[24], filter[64];
    long mine = 0, expect = r->target;

    if (r->o.w == W4) {
        snprintf(durable, sizeof durable, "p%d", w->index);
        snprintf(filter, sizeof filter, "%s.p%d.>", r->prefix, w->index);
        /* Aggregates k with k % workers == index, per_agg events each. */
        expect = (r->o.aggregates / r->o.workers +
                  (w->index < r->o.aggregates % r->o.workers)) * r->o.per_agg;
    } else {
        snprintf(durable, sizeof durable, "w3");
        snprintf(filter, sizeof filter, "%s", r->subject);
    }
    jsOptions_Init(&jo);
    jo.Wait = WAIT_MS;
    if ((s = natsConnection_JetStream(&js, r->nc[w->index % r->nconn], &jo)) != NATS_OK) {
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

        s = natsSubscription_Fetch(&list, sub, (int)r->o.max, FETCH_MS, &jerr);
        if (s == NATS_TIMEOUT)
            continue;
        if (s != NATS_OK) {
            nats_fail(r, "natsSubscription_Fetch", s, jerr);
            break;
        }
        if (list.Count > 0)
            peer_lat_add(&r->lat, (double)((int64_t)peer_now_ns() - t) / 1e6);
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
    return NULL;
}

static int run_consume(struct run *r)
{
    long n = r->o.events;

    if (!(r->seen = calloc((size_t)n, sizeof *r->seen)))
        return fail(r, "out of memory");
    if (r->o.w == W4 && !(r->last_version = calloc((size_t)r->o.aggregates, sizeof *r->last_version)))
        return fail(r, "out of memory");
    if (prefill(r, n))
        return -1;
    if (r->o.w == W4) {
        for (long p = 0; p < r->o.workers; p++) {
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
    threads_run(r, r->o.workers, consume_thread);
    r->t1 = atomic_load(&r->end_ns) ? atomic_load(&r->end_ns) : (int64_t)peer_now_ns();
    for (long i = 0; i < n; i++)
        if (!atomic_load(&r->seen[i]))
            atomic_fetch_add(&r->missing, 1);
    return atomic_load(&r->stop) ? -1 : 0;
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

    if (prefill(r, r->o.events) || stream_state(r, &st))
        return -1;
    if ((long)st.Msgs != r->o.events)
        return fail(r, "the stream holds %llu messages, not %ld", (unsigned long long)st.Msgs, r->o.events);
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
    so.Config.MaxRequestBatch = r->o.batch;
    if ((s = js_PullSubscribe(&sub, r->js, r->subject, NULL, NULL, &so, &jerr)) != NATS_OK)
        return nats_fail(r, "cannot create the time-window consumer", s, jerr);
    while (!done && !stopping(r)) {
        natsMsgList list = {NULL, 0};
        int64_t t = (int64_t)peer_now_ns();
        long fresh = 0;

        s = natsSubscription_Fetch(&list, sub, (int)r->o.batch, FETCH_MS, &jerr);
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
        peer_lat_add(&r->lat, (double)((int64_t)peer_now_ns() - t) / 1e6);
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
    if (atomic_load(&r->stop))
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

/* ---- Command line ---- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " --addr HOST:PORT --workload W1|W2|W3|W4|W5 [--events N]\n"
            "       [--producers N] [--batch N] [--workers N] [--max N] [--aggregates A]\n"
            "       [--per-aggregate K] [--payload-bytes 300] [--max-seconds S]\n"
            "defaults: W1 50000 events, 32 producers; W2 200000 events, batch 100, 32 producers;\n"
            "W3 100000 events prefilled, 8 workers, max 32; W4 2000 aggregates x 25, 8 workers,\n"
            "max 32; W5 1000000 events stored, middle 10%% read in pages of --batch 1000;\n"
            "--payload-bytes 300, --max-seconds 300.\n");
}

static int num_arg(const char *name, const char *s, long lo, long hi, long *out)
{
    if (peer_num(s, lo, hi, out)) {
        fprintf(stderr, PROG ": --%s wants an integer in [%ld, %ld], not '%s'\n", name, lo, hi, s);
        return -1;
    }
    return 0;
}

static int opts_parse(struct opts *o, int argc, char **argv)
{
    long events = -1, ms = 300;
    int c, rc = 0;

    memset(o, 0, sizeof *o);
    o->producers = o->batch = o->workers = o->max = o->aggregates = o->per_agg = -1;
    o->payload_bytes = 300;
    while ((c = getopt_long(argc, argv, "", peer_options, NULL)) != -1) {
        switch (c) {
        case P_ADDR:
            o->addr = optarg;
            break;
        case P_WORKLOAD:
            if (optarg[0] != 'W' || !(o->w = (enum workload)peer_workload(optarg))) {
                fprintf(stderr, PROG ": --workload wants W1..W5, not '%s'\n", optarg);
                return EXIT_USAGE;
            }
            break;
        case P_EVENTS:
            rc = num_arg("events", optarg, 1, 100000000, &events);
            break;
        case P_PRODUCERS:
            rc = num_arg("producers", optarg, 1, 1024, &o->producers);
            break;
        case P_BATCH:
            rc = num_arg("batch", optarg, 1, 100000, &o->batch);
            break;
        case P_WORKERS:
            rc = num_arg("workers", optarg, 1, 1024, &o->workers);
            break;
        case P_MAX:
            rc = num_arg("max", optarg, 1, 100000, &o->max);
            break;
        case P_AGGREGATES:
            rc = num_arg("aggregates", optarg, 1, 10000000, &o->aggregates);
            break;
        case P_PER_AGG:
            rc = num_arg("per-aggregate", optarg, 1, 1000000, &o->per_agg);
            break;
        case P_PAYLOAD:
            rc = num_arg("payload-bytes", optarg, 0, EVENT_MAX / 2, &o->payload_bytes);
            break;
        case P_SECONDS:
            rc = num_arg("max-seconds", optarg, 1, 86400, &ms);
            break;
        case P_HELP:
            usage(stdout);
            return -1;
        default:
            usage(stderr);
            return EXIT_USAGE;
        }
        if (rc)
            return EXIT_USAGE;
    }
    if (optind < argc) {
        fprintf(stderr, PROG ": unexpected argument '%s'\n", argv[optind]);
        return EXIT_USAGE;
    }
    if (!o->addr || !o->w) {
        usage(stderr);
        return EXIT_USAGE;
    }
    o->max_seconds = (double)ms;
#define DEF(field, v) do { if (o->field < 0) o->field = (v); } while (0)
    switch (o->w) {
    case W1:
        DEF(producers, 32);
        o->events = events > 0 ? events : 50000;
        break;
    case W2:
        DEF(producers, 32);
        DEF(batch, 100);
        o->events = events > 0 ? events : 200000;
        break;
    case W3:
        DEF(workers, 8);
        DEF(max, 32);
        o->events = events > 0 ? events : 100000;
        break;
    case W4:
        DEF(workers, 8);
        DEF(max, 32);
        DEF(aggregates, 2000);
        DEF(per_agg, 25);
        if (events > 0 && events != o->aggregates * o->per_agg) {
            fprintf(stderr, PROG ": W4 has --aggregates x --per-aggregate events\n");
            return EXIT_USAGE;
        }
        o->events = o->aggregates * o->per_agg;
        break;
    case W5:
        DEF(batch, 1000);
        o->events = events > 0 ? events : 1000000;
        if (o->events < 10) {
            fprintf(stderr, PROG ": W5 needs at least 10 events\n");
            return EXIT_USAGE;
        }
        break;
    }
#undef DEF
    return 0;
}

/* ---- Main ---- */

static const char *note_of(const struct run *r)
{
    static char note[600];
    const struct opts *o = &r->o;

    switch (o->w) {
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

static void report(struct run *r)
{
    static const char *const names[] = {"", "W1", "W2", "W3", "W4", "W5"};
    long events = atomic_load(&r->done);
    double secs = (double)(r->t1 - r->t0) / 1e9, p50, p99;

    printf("{\"peer\":\"nats\",\"version\":");
    peer_json_str(stdout, r->version);
    printf(",\"durability\":");
    peer_json_str(stdout, DURABILITY);
    printf(",\"workload\":\"%s\"", names[r->o.w]);
    switch (r->o.w) {
    case W1:
        printf(",\"producers\":%ld", r->o.producers);
        break;
    case W2:
        printf(",\"producers\":%ld,\"batch\":%ld", r->o.producers, r->o.batch);
        break;
    case W3:
        printf(",\"workers\":%ld,\"max\":%ld", r->o.workers, r->o.max);
        break;
    case W4:
        printf(",\"workers\":%ld,\"max\":%ld,\"aggregates\":%ld,\"per_aggregate\":%ld",
               r->o.workers, r->o.max, r->o.aggregates, r->o.per_agg);
        break;
    case W5:
        printf(",\"stored\":%ld,\"page\":%ld", r->o.events, r->o.batch);
        break;
    }
    printf(",\"payload_bytes\":%ld,\"events\":%ld,\"seconds\":%.3f,\"events_per_s\":%.1f",
           r->o.payload_bytes, events, secs, secs > 0 ? (double)events / secs : 0.0);
    peer_lat_pct(&r->lat, &p50, &p99);
    peer_json_ms("p50_ms", p50);
    peer_json_ms("p99_ms", p99);
    printf(",\"duplicates\":%ld,\"missing\":%ld,\"order_violations\":%ld,\"timed_out\":%s,\"note\":",
           atomic_load(&r->dups), atomic_load(&r->missing), atomic_load(&r->disorder),
           atomic_load(&r->timed_out) ? "true" : "false");
    peer_json_str(stdout, note_of(r));
    printf("}\n");
    fflush(stdout);
}

static int run_workload(struct run *r)
{
    switch (r->o.w) {
    case W1:
    case W2:
        r->target = r->o.events;
        r->t0 = (int64_t)peer_now_ns();
        threads_run(r, r->o.producers, r->o.w == W1 ? w1_thread : w2_thread);
        r->t1 = atomic_load(&r->end_ns) ? atomic_load(&r->end_ns) : (int64_t)peer_now_ns();
        if (!atomic_load(&r->stop))
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
    return atomic_load(&r->stop) ? -1 : 0;
}

int main(int argc, char **argv)
{
    struct run *r = calloc(1, sizeof *r);
    int rc, status = EXIT_FAIL, threads;
    unsigned long long id;

    if (!r) {
        fprintf(stderr, PROG ": out of memory\n");
        return EXIT_FAIL;
    }
    if ((rc = opts_parse(&r->o, argc, argv))) {
        free(r);
        return rc < 0 ? 0 : rc;
    }
    pthread_mutex_init(&r->err_lock, NULL);
    r->deadline = (int64_t)peer_now_ns() + (int64_t)(r->o.max_seconds * 1e9);
    id = (unsigned long long)wall_ns() ^ ((unsigned long long)getpid() << 40);
    snprintf(r->runid, sizeof r->runid, "%016llx", id);
    snprintf(r->stream, sizeof r->stream, "BENCH_%s", r->runid);
    snprintf(r->prefix, sizeof r->prefix, "bench.%s", r->runid);
    snprintf(r->subject, sizeof r->subject, "%s.ev", r->prefix);
    snprintf(r->url, sizeof r->url, "%s%s", strncmp(r->o.addr, "nats://", 7) ? "nats://" : "", r->o.addr);
    r->ev_head_len = (size_t)snprintf(r->ev_head, sizeof r->ev_head, "{\"event_id\":\"nats-%s-",
                                      r->runid);
    peer_lat_init(&r->lat, r->o.events + 1024);
    if (!r->lat.ms) {
        fail(r, "out of memory");
        goto out;
    }
    threads = r->o.w == W1 || r->o.w == W2 ? (int)r->o.producers
              : r->o.w == W5 ? PREFILL_THREADS : (int)r->o.workers;
    if (threads < PREFILL_THREADS && r->o.w != W1 && r->o.w != W2)
        threads = PREFILL_THREADS;
    if (server_version(r) || connect_all(r, threads < CONN_MAX ? threads : CONN_MAX))
        goto out;
    if (stream_create(r))
        goto out_conn;
    if (run_workload(r) == 0)
        status = 0;
    if (r->t1 > r->t0)
        report(r);
    js_DeleteStream(r->js, r->stream, NULL, NULL);
out_conn:
    jsCtx_Destroy(r->js);
    for (int i = 0; i < r->nconn; i++)
        natsConnection_Destroy(r->nc[i]);
    natsOptions_Destroy(r->nopts);
    nats_CloseAndWait(2000);
out:
    if (status)
        fprintf(stderr, PROG ": %s\n", atomic_load(&r->timed_out) && !r->err[0]
                ? "stopped by --max-seconds" : r->err[0] ? r->err : "failed");
    free(r->lat.ms);
    free(r->seen);
    free(r->last_version);
    pthread_mutex_destroy(&r->err_lock);
    free(r);
    return status;
}
