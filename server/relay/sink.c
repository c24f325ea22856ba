/* sink.c - micd's relay of groups with a NATS sink to JetStream (DESIGN
 * sections 10 and 13).  The only file that calls libnats (nats_*, js_*).
 *
 * DESIGN
 * A manager thread reads the stored groups every POLL_MS through a read
 * transaction (the writer's registry is never touched from here) and keeps
 * one relay per sink group: it starts one for a group that appeared and
 * stops the relay of a group that went (or was created again under another
 * id).  A relay is one thread that claims and settles, and NPUB publishers:
 *
 *   relay thread:  claim (internal op, through the writer, leases of the
 *                  group's lease_ttl_s) -> read each event from the store ->
 *                  build its message -> queue it for the publishers;
 *                  settle what the publishers finished (ack the PubAcked,
 *                  nack the failed with their error: the group's backoff and
 *                  max_attempts apply as to any nack); extend the leases of
 *                  queued or publishing messages that could outlive them.
 *   publishers:    js_PublishMsg with MaxWait PUB_WAIT_MS and ExpectStream,
 *                  one message at a time each: different deliveries go out
 *                  in parallel.
 *
 * Invariants.  Never more than WINDOW deliveries of a group between claim
 * and settle.  A delivery is acked only after its PubAck.  An ordered
 * group's claims hold at most one head per aggregate and the next version
 * of an aggregate is not handed out while its head is leased, so at most
 * one message per aggregate is in flight and aggregates go in parallel.
 * While the connection is down nothing is claimed (the backlog and the
 * oldest unhandled age grow, visible in /v1/stats and /metrics), what was
 * queued fails fast and is nacked, and cnats reconnects forever
 * (MaxReconnect -1).  Nothing here runs on the writer thread and the writer
 * never waits for NATS: a relay only submits ops and waits for their done().
 *
 * Subjects.  The template's placeholders take the event's field with every
 * character that would break a subject ('.', '*', '>', a space or a control
 * character) turned into '_'; a field that is absent or empty renders "_".
 *
 * Locks: the sink's 'mu' (the list of relays) before a relay's 'mu' (its
 * queue, figures and status).  No nats call is made holding either: cnats
 * runs the connection callbacks, which take a relay's 'mu', on its own
 * threads. */
#define _GNU_SOURCE
#include "sink.h"

#include "http/auth.h"
#include "core/buf.h"
#include "engine/claim.h"
#include "core/clock.h"
#include "core/config.h"
#include "engine/delivery.h"
#include "core/err.h"
#include "engine/group.h"
#include "core/logger.h"
#include "http/metrics.h"
#include "store/catalog.h"

#include <jansson.h>
#include <nats/nats.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WINDOW 256          /* deliveries between claim and settle, per group */
#define CLAIM_MAX 100       /* per claim */
#define NPUB 8              /* publishers per group */
#define PUB_WAIT_MS 3000    /* a PubAck later than this is a failure */
#define STOP_WAIT_MS 2000   /* shutdown: wait for PubAcks this long at most */
#define POLL_MS 200         /* the manager looks for sink groups this often */
#define NBUCKETS 12
#define STOPPING "micd stopped before publishing it"

static const double puback_le[NBUCKETS] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                           0.05, 0.1, 0.25, 0.5, 1, 2.5};

enum { J_QUEUED, J_BUSY, J_OK, J_FAIL };

struct job {
    struct job *qnext;      /* publishers' queue */
    struct job *next;       /* the relay's list of unsettled jobs */
    uint64_t seq;
    char token[2 * MIC_TOKEN_LEN + 1];
    int64_t lease_us;       /* the lease's end (wall µs) */
    natsMsg *msg;           /* NULL once published or failed */
    int state;
    char err[300];
};

struct relay {
    mic_sink *k;
    char name[MIC_GROUP_NAME_MAX + 1];
    uint32_t gid;
    char *url, *stream, *subject;
    uint32_t ttl_s;
    pthread_t thread, pub[NPUB];
    int npub;
    pthread_mutex_t mu;
    pthread_cond_t work;    /* publishers: a job or quit */
    pthread_cond_t done;    /* relay thread: a job finished, or stop */
    struct job *qhead, *qtail, *jobs;
    int in_flight;
    int stop, quit;
    natsConnection *nc;     /* set once connected, kept until the relay ends */
    jsCtx *js;
    int connected;
    int closed;             /* cnats ran our closed callback: no more come */
    char last_error[400];
    uint64_t published, failures, hist[NBUCKETS + 1];
    double puback_sum;
    int seen;               /* manager: still stored */
    struct relay *next;
};

struct mic_sink {
    mic_store *s;
    mic_writer *w;
    const struct mic_config *cfg;
    pthread_t mgr;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    int nats_used;
    struct relay *list;
};

/* ---- Small helpers ---- */

static void deadline_after(struct timespec *ts, int64_t ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static double mono_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Under r->mu. */
static void set_error(struct relay *r, const char *msg)
{
    snprintf(r->last_error, sizeof r->last_error, "%s", msg);
}

/* ---- Ops through the writer ---- */

struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
};

static void op_done(mic_op *op)
{
    struct waiter *wt = op->owner;

    pthread_mutex_lock(&wt->mu);
    wt->done = 1;
    pthread_cond_signal(&wt->cv);
    pthread_mutex_unlock(&wt->mu);
}

/* Parse 'body' as a request of 'kind' on r's group, mark it the relay's,
 * submit it and wait for its done().  MIC_OK with *out (the caller's:
 * mic_claim_free), or an error (the writer busy or stopping, the batch
 * failed, a body we built wrong). */
static int run_op(struct relay *r, int kind, struct mic_buf *body, mic_claim **out)
{
    struct waiter wt;
    struct mic_error e;
    mic_claim *c;
    mic_op *op;
    int rc;

    if (body->oom)
        return MIC_ENOMEM;
    if ((rc = mic_claim_parse(kind, r->name, body->p, body->len, r->k->cfg, &c, &e))) {
        mic_logger_write(MIC_LEVEL_ERROR, NULL, "sink: a request of the relay was refused", "group",
                r->name, "error", e.message, NULL);
        return rc;
    }
    mic_claim_set_internal(c);
    pthread_mutex_init(&wt.mu, NULL);
    pthread_cond_init(&wt.cv, NULL);
    wt.done = 0;
    op = mic_claim_op(c);
    op->done = op_done;
    op->owner = &wt;
    for (int tries = 0; (rc = mic_writer_submit(r->k->w, op)) == MIC_EBUSY && tries < 100; tries++) {
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL); /* the writer's queue is full: let it drain */
    }
    if (rc == MIC_OK) {
        pthread_mutex_lock(&wt.mu);
        while (!wt.done)
            pthread_cond_wait(&wt.cv, &wt.mu);
        pthread_mutex_unlock(&wt.mu);
        rc = op->result;
    }
    pthread_cond_destroy(&wt.cv);
    pthread_mutex_destroy(&wt.mu);
    if (rc) {
        mic_claim_free(c);
        return rc;
    }
    *out = c;
    return MIC_OK;
}

/* ---- Messages ---- */

static const char *field(json_t *ev, const char *k)
{
    json_t *v = json_object_get(ev, k);

    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* Append 'v' to the subject in 'b' as one token ("_" when absent). */
static void subject_value(struct mic_buf *b, const char *v)
{
    if (!v || !*v) {
        mic_buf_add(b, "_", 1);
        return;
    }
    for (; *v; v++) {
        unsigned char c = (unsigned char)*v;
        char o = c <= ' ' || c == 0x7f || c == '.' || c == '*' || c == '>' ? '_' : (char)c;
        mic_buf_add(b, &o, 1);
    }
}

static void render_subject(const char *tpl, json_t *ev, struct mic_buf *b)
{
    static const struct { const char *ph, *field; } map[] = {
        {"{topic}", "topic"}, {"{event_type}", "event_type"},
        {"{aggregate_type}", "aggregate_type"}, {"{aggregate_id}", "aggregate_id"}};

    while (*tpl) {
        const char *e = strchr(tpl, '.');
        size_t n = e ? (size_t)(e - tpl) : strlen(tpl);
        int done = 0;

        for (size_t i = 0; i < sizeof map / sizeof map[0] && !done; i++)
            if (strlen(map[i].ph) == n && !memcmp(map[i].ph, tpl, n)) {
                subject_value(b, field(ev, map[i].field));
                done = 1;
            }
        if (!done)
            mic_buf_add(b, tpl, n);
        if (!e)
            break;
        mic_buf_add(b, ".", 1);
        tpl = e + 1;
    }
    mic_buf_add(b, "", 1); /* NUL */
}

/* The message of stored event 'rec' (data: its JSON as a claim returns
 * it).  MIC_OK with *out, or an error with 'err' filled. */
static int build_msg(struct relay *r, const struct mic_rec *rec, natsMsg **out,
                     char *err, size_t errlen)
{
    json_t *ev = json_loadb(rec->json, rec->json_len, 0, NULL), *ver;
    struct mic_buf subj;
    natsMsg *m = NULL;
    natsStatus s;
    char num[32];
    const char *v;

    if (!ev) {
        snprintf(err, errlen, "sink: the stored event of seq %llu is not JSON",
                 (unsigned long long)rec->seq);
        return MIC_EIO;
    }
    mic_buf_init(&subj);
    render_subject(r->subject, ev, &subj);
    s = subj.oom ? NATS_NO_MEMORY
                 : natsMsg_Create(&m, subj.p, NULL, rec->json, (int)rec->json_len);
    snprintf(num, sizeof num, "%llu", (unsigned long long)rec->seq);
    if (s == NATS_OK && (v = field(ev, "event_id")))
        s = natsMsgHeader_Set(m, "Nats-Msg-Id", v);
    if (s == NATS_OK && (v = field(ev, "topic")))
        s = natsMsgHeader_Set(m, "mic-topic", v);
    if (s == NATS_OK)
        s = natsMsgHeader_Set(m, "mic-seq", num);
    if (s == NATS_OK && (v = field(ev, "event_type")))
        s = natsMsgHeader_Set(m, "mic-event-type", v);
    if (s == NATS_OK && (v = field(ev, "created_at")))
        s = natsMsgHeader_Set(m, "mic-created-at", v);
    if (s == NATS_OK && (v = field(ev, "aggregate_type")))
        s = natsMsgHeader_Set(m, "mic-aggregate-type", v);
    if (s == NATS_OK && (v = field(ev, "aggregate_id")))
        s = natsMsgHeader_Set(m, "mic-aggregate-id", v);
    if (s == NATS_OK && json_is_integer(ver = json_object_get(ev, "aggregate_version"))) {
        snprintf(num, sizeof num, "%lld", (long long)json_integer_value(ver));
        s = natsMsgHeader_Set(m, "mic-aggregate-version", num);
    }
    json_decref(ev);
    mic_buf_fini(&subj);
    if (s != NATS_OK) {
        natsMsg_Destroy(m);
        snprintf(err, errlen, "sink: cannot build the message of seq %llu: %s",
                 (unsigned long long)rec->seq, natsStatus_GetText(s));
        return MIC_ENOMEM;
    }
    *out = m;
    return MIC_OK;
}

/* ---- Publishers ---- */

static void *publisher_main(void *arg)
{
    struct relay *r = arg;

    for (;;) {
        jsPubAck *pa = NULL;
        jsErrCode jerr = 0;
        jsPubOptions po;
        natsStatus s = NATS_CONNECTION_DISCONNECTED;
        struct job *j;
        jsCtx *js;
        double t0, secs = 0;
        int up;

        pthread_mutex_lock(&r->mu);
        while (!r->quit && !r->qhead)
            pthread_cond_wait(&r->work, &r->mu);
        if (r->quit) {
            pthread_mutex_unlock(&r->mu);
            return NULL;
        }
        j = r->qhead;
        if (!(r->qhead = j->qnext))
            r->qtail = NULL;
        j->state = J_BUSY;
        js = r->js;
        up = r->connected;
        pthread_mutex_unlock(&r->mu);

        t0 = mono_s();
        if (up) {
            jsPubOptions_Init(&po);
            po.MaxWait = PUB_WAIT_MS;
            po.ExpectStream = r->stream;
            s = js_PublishMsg(&pa, js, j->msg, &po, &jerr);
            secs = mono_s() - t0;
        }
        pthread_mutex_lock(&r->mu);
        natsMsg_Destroy(j->msg);
        j->msg = NULL;
        if (s == NATS_OK) {
            int b = 0;
            while (b < NBUCKETS && secs > puback_le[b])
                b++;
            r->hist[b]++;
            r->puback_sum += secs;
            r->published++;
            /* a PubAck handled after the disconnected callback does not
             * wipe the error that says why the group waits */
            if (r->connected)
                r->last_error[0] = 0;
            j->state = J_OK;
        } else {
            if (!up)
                snprintf(j->err, sizeof j->err, "not connected to NATS at %s", r->url);
            else if (s == NATS_NO_RESPONDERS)
                snprintf(j->err, sizeof j->err, "no JetStream stream answered for stream %s "
                         "(no responders): does stream %s exist and take this subject?",
                         r->stream, r->stream);
            else if (s == NATS_TIMEOUT)
                snprintf(j->err, sizeof j->err, "no PubAck from stream %s within %d ms",
                         r->stream, PUB_WAIT_MS);
            else
                snprintf(j->err, sizeof j->err, "publish to stream %s failed: %s (%s, "
                         "JetStream error %d)", r->stream, natsStatus_GetText(s),
                         nats_GetLastError(NULL) ? nats_GetLastError(NULL) : "", (int)jerr);
            r->failures++;
            set_error(r, j->err);
            j->state = J_FAIL;
        }
        pthread_cond_signal(&r->done);
        pthread_mutex_unlock(&r->mu);
        jsPubAck_Destroy(pa);
    }
}

/* ---- Connection ---- */

static void on_disconnected(natsConnection *nc, void *closure)
{
    struct relay *r = closure;

    (void)nc;
    pthread_mutex_lock(&r->mu);
    r->connected = 0;
    snprintf(r->last_error, sizeof r->last_error,
             "disconnected from NATS at %s: reconnecting", r->url);
    pthread_mutex_unlock(&r->mu);
}

static void on_reconnected(natsConnection *nc, void *closure)
{
    struct relay *r = closure;

    (void)nc;
    pthread_mutex_lock(&r->mu);
    r->connected = 1;
    pthread_mutex_unlock(&r->mu);
}

/* cnats's last callback of a connection: after it returns nothing of
 * cnats touches the relay (relay_join waits for it before freeing). */
static void on_closed(natsConnection *nc, void *closure)
{
    struct relay *r = closure;

    (void)nc;
    pthread_mutex_lock(&r->mu);
    r->connected = 0;
    if (!r->last_error[0])
        snprintf(r->last_error, sizeof r->last_error, "connection to NATS at %s closed", r->url);
    r->closed = 1;
    pthread_cond_broadcast(&r->done);
    pthread_mutex_unlock(&r->mu);
}

/* Connect once; cnats then reconnects forever by itself.  Returns 0 when
 * connected. */
static int relay_connect(struct relay *r)
{
    natsOptions *o = NULL;
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    jsOptions jo;
    natsStatus s;
    char urls[1024], *sv[16], *save = NULL, *tok;
    int nsv = 0;

    /* A cluster's URLs, comma-separated: natsOptions_SetURL of cnats 3.4
     * does not take the list (every connect then fails with "No server
     * available"), natsOptions_SetServers does. */
    snprintf(urls, sizeof urls, "%s", r->url);
    for (tok = strtok_r(urls, ",", &save); tok && nsv < 16; tok = strtok_r(NULL, ",", &save))
        sv[nsv++] = tok;
    s = natsOptions_Create(&o);
    if (s == NATS_OK) s = natsOptions_SetServers(o, (const char **)sv, nsv);
    if (s == NATS_OK) s = natsOptions_SetTimeout(o, 1000);
    if (s == NATS_OK) s = natsOptions_SetMaxReconnect(o, -1);
    if (s == NATS_OK) s = natsOptions_SetReconnectWait(o, 250);
    if (s == NATS_OK) s = natsOptions_SetDisconnectedCB(o, on_disconnected, r);
    if (s == NATS_OK) s = natsOptions_SetReconnectedCB(o, on_reconnected, r);
    if (s == NATS_OK) s = natsOptions_SetClosedCB(o, on_closed, r);
    if (s == NATS_OK) {
        pthread_mutex_lock(&r->k->mu);
        r->k->nats_used = 1;
        pthread_mutex_unlock(&r->k->mu);
        s = natsConnection_Connect(&nc, o);
    }
    if (s == NATS_OK) {
        jsOptions_Init(&jo);
        jo.Wait = PUB_WAIT_MS;
        s = natsConnection_JetStream(&js, nc, &jo);
    }
    natsOptions_Destroy(o);
    pthread_mutex_lock(&r->mu);
    if (s == NATS_OK) {
        r->nc = nc;
        r->js = js;
        r->connected = 1;
    } else {
        snprintf(r->last_error, sizeof r->last_error, "cannot connect to NATS at %s: %s",
                 r->url, natsStatus_GetText(s));
    }
    pthread_mutex_unlock(&r->mu);
    if (s != NATS_OK) {
        natsConnection_Destroy(nc);
        return -1;
    }
    mic_logger_write(MIC_LEVEL_INFO, NULL, "sink: connected", "group", r->name, "url", r->url, NULL);
    return 0;
}

/* ---- The relay thread ---- */

/* Wait on r->done for at most 'ms' unless stopping (under r->mu). */
static void wait_done(struct relay *r, int64_t ms)
{
    struct timespec ts;

    deadline_after(&ts, ms);
    if (!r->stop)
        pthread_cond_timedwait(&r->done, &r->mu, &ts);
}

static void add_item(struct mic_buf *b, int first, uint64_t seq, const char *token)
{
    mic_buf_printf(b, "%s{\"seq\":%llu,\"lease_token\":\"%s\"}", first ? "" : ",",
                   (unsigned long long)seq, token);
}

/* Ack the published, nack the failed (one nack per error text). */
static void settle(struct relay *r)
{
    struct job *fin[WINDOW + 1];
    int n = 0;

    pthread_mutex_lock(&r->mu);
    for (struct job **pp = &r->jobs; *pp;) {
        struct job *j = *pp;
        if ((j->state == J_OK || j->state == J_FAIL) && n < WINDOW) {
            *pp = j->next;
            fin[n++] = j;
            r->in_flight--;
        } else {
            pp = &j->next;
        }
    }
    pthread_mutex_unlock(&r->mu);
    for (int i = 0; i < n; i++) {
        struct mic_buf b;
        const char *err = fin[i] ? fin[i]->err : NULL;
        int kind, m = 0;
        mic_claim *c;

        if (!fin[i])
            continue; /* settled with an earlier one */
        kind = fin[i]->state == J_OK ? MIC_ACK : MIC_NACK;
        mic_buf_init(&b);
        mic_buf_puts(&b, "{\"deliveries\":[");
        for (int k = i; k < n; k++)
            if (fin[k] && (fin[k]->state == J_OK ? MIC_ACK : MIC_NACK) == kind &&
                (kind == MIC_ACK || !strcmp(fin[k]->err, err)))
                add_item(&b, m++ == 0, fin[k]->seq, fin[k]->token);
        mic_buf_add(&b, "]", 1);
        if (kind == MIC_NACK) {
            mic_buf_puts(&b, ",\"error\":");
            mic_buf_json_str(&b, err, strlen(err));
            if (!strcmp(err, STOPPING))
                mic_buf_puts(&b, ",\"retry_after_s\":0");
        }
        mic_buf_add(&b, "}", 1);
        if (run_op(r, kind, &b, &c) == MIC_OK)
            mic_claim_free(c);
        else
            mic_logger_write(MIC_LEVEL_WARN, NULL, "sink: cannot settle deliveries (their leases will "
                    "expire)", "group", r->name, NULL);
        mic_buf_fini(&b);
        for (int k = n - 1; k >= i; k--)
            if (fin[k] && (fin[k]->state == J_OK ? MIC_ACK : MIC_NACK) == kind &&
                (kind == MIC_ACK || k == i || !strcmp(fin[k]->err, err))) {
                if (k != i) {
                    free(fin[k]);
                    fin[k] = NULL;
                }
            }
        free(fin[i]);
        fin[i] = NULL;
    }
}

/* Extend the leases of queued or publishing deliveries that would end
 * within a third of the TTL. */
static void extend_due(struct relay *r)
{
    int64_t now = mic_now_us(), ttl_us;
    struct mic_buf b;
    mic_claim *c;
    int n = 0;

    mic_buf_init(&b);
    mic_buf_puts(&b, "{\"deliveries\":[");
    pthread_mutex_lock(&r->mu);
    ttl_us = (int64_t)r->ttl_s * 1000000;
    for (struct job *j = r->jobs; j && n < 1000; j = j->next)
        if ((j->state == J_QUEUED || j->state == J_BUSY) && j->lease_us - now < ttl_us / 3) {
            add_item(&b, n++ == 0, j->seq, j->token);
            j->lease_us = now + ttl_us; /* what the extend sets, if it works */
        }
    pthread_mutex_unlock(&r->mu);
    mic_buf_printf(&b, "],\"lease_ttl_s\":%u}", (unsigned)(ttl_us / 1000000));
    if (n && run_op(r, MIC_EXTEND, &b, &c) == MIC_OK)
        mic_claim_free(c);
    mic_buf_fini(&b);
}

/* Claim up to 'max' and queue them.  Returns how many were claimed, or -1
 * on an error (the group gone, the writer stopping). */
static int claim_batch(struct relay *r, int max, int wait)
{
    struct mic_buf b;
    mic_claim *c;
    mic_txn *t = NULL;
    int n, rc;

    mic_buf_init(&b);
    mic_buf_printf(&b, "{\"max\":%d,\"worker\":\"micd-sink\"%s}", max,
                   wait ? ",\"wait_s\":0.5" : "");
    rc = run_op(r, MIC_CLAIM, &b, &c);
    mic_buf_fini(&b);
    if (rc)
        return -1;
    if ((n = mic_claim_grants(c)) == 0) {
        struct mic_error e;
        mic_buf_init(&b);
        rc = mic_claim_result(c, r->k->s, &b, &e); /* the group gone? */
        mic_buf_fini(&b);
        mic_claim_free(c);
        return rc ? -1 : 0;
    }
    if (mic_txn_begin(r->k->s, 0, &t)) {
        mic_claim_free(c);
        return -1; /* the leases expire */
    }
    for (int i = 0; i < n; i++) {
        struct job *j = calloc(1, sizeof *j);
        struct mic_rec rec;

        if (!j)
            break; /* the rest's leases expire */
        mic_claim_grant(c, i, &j->seq, j->token, &j->lease_us);
        j->state = J_QUEUED;
        if ((rc = mic_store_log_get(t, j->seq, &rec)))
            snprintf(j->err, sizeof j->err, "sink: cannot read the event of seq %llu: %s",
                     (unsigned long long)j->seq, mic_strerror(rc));
        else if (build_msg(r, &rec, &j->msg, j->err, sizeof j->err))
            rc = MIC_EIO;
        pthread_mutex_lock(&r->mu);
        j->next = r->jobs;
        r->jobs = j;
        r->in_flight++;
        if (rc) {
            j->state = J_FAIL;
            r->failures++;
            set_error(r, j->err);
        } else {
            if (r->qtail)
                r->qtail->qnext = j;
            else
                r->qhead = j;
            r->qtail = j;
            pthread_cond_signal(&r->work);
        }
        pthread_mutex_unlock(&r->mu);
    }
    if (t)
        mic_txn_abort(t);
    mic_claim_free(c);
    return n;
}

static void *relay_main(void *arg)
{
    struct relay *r = arg;
    int64_t backoff = 100;

    for (;;) {
        int stop, up, room, busy, n;

        pthread_mutex_lock(&r->mu);
        stop = r->stop;
        up = r->connected;
        pthread_mutex_unlock(&r->mu);
        if (stop)
            break;
        if (!r->nc) {
            if (relay_connect(r)) {
                pthread_mutex_lock(&r->mu);
                wait_done(r, backoff);
                pthread_mutex_unlock(&r->mu);
                backoff = backoff * 2 > 5000 ? 5000 : backoff * 2;
            }
            continue;
        }
        settle(r);
        extend_due(r);
        pthread_mutex_lock(&r->mu);
        room = WINDOW - r->in_flight;
        busy = r->in_flight > 0;
        pthread_mutex_unlock(&r->mu);
        n = 0;
        if (up && room > 0) {
            n = claim_batch(r, room < CLAIM_MAX ? room : CLAIM_MAX, !busy);
            if (n > 0)
                continue;
        }
        pthread_mutex_lock(&r->mu);
        if (n < 0) {
            wait_done(r, 200); /* the group gone (the manager stops us) or the writer busy */
        } else if (r->in_flight > 0 || !up) {
            int finished = 0;
            for (struct job *j = r->jobs; j && !finished; j = j->next)
                finished = j->state == J_OK || j->state == J_FAIL;
            if (!finished)
                wait_done(r, up ? 50 : 200);
        } else if (!up || room <= 0) {
            wait_done(r, 200);
        }
        pthread_mutex_unlock(&r->mu);
    }

    /* Stopping: hand back what no publisher took (a nack with no delay),
     * wait a bounded time for the PubAcks in flight, settle what finished;
     * the leases of what is still publishing then expire. */
    {
        struct timespec ts;
        int busy;

        deadline_after(&ts, STOP_WAIT_MS);
        pthread_mutex_lock(&r->mu);
        for (struct job *j = r->qhead; j; j = j->qnext) {
            j->state = J_FAIL; /* handed back at once, not left to expire */
            snprintf(j->err, sizeof j->err, "%s", STOPPING);
            natsMsg_Destroy(j->msg);
            j->msg = NULL;
        }
        r->qhead = r->qtail = NULL;
        for (;;) {
            busy = 0;
            for (struct job *j = r->jobs; j; j = j->next)
                busy |= j->state == J_BUSY;
            if (!busy || pthread_cond_timedwait(&r->done, &r->mu, &ts))
                break;
        }
        pthread_mutex_unlock(&r->mu);
        settle(r);
    }
    return NULL;
}

/* ---- Relays: start and stop ---- */

static void relay_free(struct relay *r)
{
    while (r->jobs) {
        struct job *j = r->jobs;
        r->jobs = j->next;
        natsMsg_Destroy(j->msg);
        free(j);
    }
    pthread_cond_destroy(&r->work);
    pthread_cond_destroy(&r->done);
    pthread_mutex_destroy(&r->mu);
    free(r->url);
    free(r->stream);
    free(r->subject);
    free(r);
}

static struct relay *relay_start(mic_sink *k, const char *name, uint32_t gid,
                                 const struct mic_group_cfg *c)
{
    struct relay *r = calloc(1, sizeof *r);

    if (!r)
        return NULL;
    r->k = k;
    snprintf(r->name, sizeof r->name, "%s", name);
    r->gid = gid;
    r->ttl_s = c->lease_ttl_s;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->work, NULL);
    pthread_cond_init(&r->done, NULL);
    if (!(r->url = strdup(c->sink_url)) || !(r->stream = strdup(c->sink_stream)) ||
        !(r->subject = strdup(c->sink_subject)))
        goto fail;
    for (r->npub = 0; r->npub < NPUB; r->npub++)
        if (pthread_create(&r->pub[r->npub], NULL, publisher_main, r))
            break;
    if (r->npub == 0 || pthread_create(&r->thread, NULL, relay_main, r))
        goto fail_pub;
    mic_logger_write(MIC_LEVEL_INFO, NULL, "sink: relaying", "group", name, "stream", r->stream, NULL);
    return r;
fail_pub:
    pthread_mutex_lock(&r->mu);
    r->quit = 1;
    pthread_cond_broadcast(&r->work);
    pthread_mutex_unlock(&r->mu);
    for (int i = 0; i < r->npub; i++)
        pthread_join(r->pub[i], NULL);
fail:
    mic_logger_write(MIC_LEVEL_ERROR, NULL, "sink: cannot start a relay", "group", name, NULL);
    relay_free(r);
    return NULL;
}

static void relay_signal_stop(struct relay *r)
{
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    pthread_cond_broadcast(&r->done);
    pthread_mutex_unlock(&r->mu);
}

/* Join a relay told to stop, close its connection, free it. */
static void relay_join(struct relay *r)
{
    pthread_join(r->thread, NULL);
    pthread_mutex_lock(&r->mu);
    r->quit = 1;
    pthread_cond_broadcast(&r->work);
    pthread_mutex_unlock(&r->mu);
    if (r->nc)
        natsConnection_Close(r->nc); /* ends a publish still waiting */
    for (int i = 0; i < r->npub; i++)
        pthread_join(r->pub[i], NULL);
    if (r->nc) {
        struct timespec ts;
        int closed;

        /* cnats calls back on a thread of its own, after the close: wait
         * for the last callback before freeing what it touches. */
        deadline_after(&ts, 5000);
        pthread_mutex_lock(&r->mu);
        while (!r->closed && !pthread_cond_timedwait(&r->done, &r->mu, &ts))
            ;
        closed = r->closed;
        pthread_mutex_unlock(&r->mu);
        jsCtx_Destroy(r->js);
        natsConnection_Destroy(r->nc);
        if (!closed) {
            mic_logger_write(MIC_LEVEL_WARN, NULL, "sink: NATS did not confirm the close; the relay's "
                    "memory is left", "group", r->name, NULL);
            return;
        }
    }
    relay_free(r);
}

/* ---- The manager ---- */

struct found {
    mic_sink *k;
    struct relay *start;    /* relays to start, linked by 'next' */
};

static int look_one(void *arg, const char *name, size_t len, const struct mic_group_rec *g)
{
    struct found *f = arg;
    struct mic_group_cfg c;
    struct relay *r;
    char nm[MIC_GROUP_NAME_MAX + 1];

    if (len > MIC_GROUP_NAME_MAX)
        return 0;
    memcpy(nm, name, len);
    nm[len] = 0;
    /* a cheap test first: most groups have no sink */
    if (!memmem(g->config, g->config_len, "\"sink\":{", 8))
        return 0;
    if (mic_group_cfg_parse(g->config, g->config_len, nm, &c))
        return 0;
    if (c.sink_url && !c.replay_run) {
        for (r = f->k->list; r; r = r->next)
            if (!strcmp(r->name, nm) && r->gid == g->gid)
                break;
        if (r) {
            pthread_mutex_lock(&r->mu);
            r->seen = 1;
            r->ttl_s = c.lease_ttl_s;
            pthread_mutex_unlock(&r->mu);
        } else if ((r = relay_start(f->k, nm, g->gid, &c))) {
            r->seen = 1;
            r->next = f->start;
            f->start = r;
        }
    }
    mic_group_cfg_fini(&c);
    return 0;
}

static void *manager_main(void *arg)
{
    mic_sink *k = arg;

    for (;;) {
        struct found f = {k, NULL};
        struct relay *gone = NULL, **pp;
        struct timespec ts;
        mic_txn *t;
        int stop;

        pthread_mutex_lock(&k->mu);
        stop = k->stop;
        pthread_mutex_unlock(&k->mu);
        if (stop)
            break;
        /* The list changes only in this thread: read it unlocked here. */
        for (struct relay *r = k->list; r; r = r->next)
            r->seen = 0;
        if (mic_txn_begin(k->s, 0, &t) == MIC_OK) {
            int rc = mic_store_group_each(t, look_one, &f);
            mic_txn_abort(t);
            if (rc) /* keep every relay: the read failed, not the groups */
                for (struct relay *r = k->list; r; r = r->next)
                    r->seen = 1;
        } else {
            for (struct relay *r = k->list; r; r = r->next)
                r->seen = 1;
        }
        pthread_mutex_lock(&k->mu);
        for (pp = &k->list; *pp;) {
            struct relay *r = *pp;
            if (!r->seen) {
                *pp = r->next;
                r->next = gone;
                gone = r;
            } else {
                pp = &r->next;
            }
        }
        while (f.start) {
            struct relay *r = f.start;
            f.start = r->next;
            r->next = k->list;
            k->list = r;
        }
        pthread_mutex_unlock(&k->mu);
        for (struct relay *r = gone; r; r = r->next)
            relay_signal_stop(r);
        while (gone) {
            struct relay *r = gone;
            gone = r->next;
            mic_logger_write(MIC_LEVEL_INFO, NULL, "sink: group gone, relay stopped", "group", r->name, NULL);
            relay_join(r);
        }
        pthread_mutex_lock(&k->mu);
        deadline_after(&ts, POLL_MS);
        if (!k->stop)
            pthread_cond_timedwait(&k->cv, &k->mu, &ts);
        pthread_mutex_unlock(&k->mu);
    }
    return NULL;
}

/* ---- Status and metrics (handler threads) ---- */

static void status_json(void *arg, const char *name, size_t len, struct mic_buf *out)
{
    mic_sink *k = arg;
    struct relay *r;

    pthread_mutex_lock(&k->mu);
    for (r = k->list; r; r = r->next)
        if (strlen(r->name) == len && !memcmp(r->name, name, len))
            break;
    if (!r) {
        pthread_mutex_unlock(&k->mu);
        mic_buf_puts(out, "{\"connected\":false,\"in_flight\":0,"
                          "\"last_error\":\"the relay has not started yet\"}");
        return;
    }
    pthread_mutex_lock(&r->mu);
    mic_buf_printf(out, "{\"connected\":%s,\"in_flight\":%d,\"last_error\":",
                   r->connected ? "true" : "false", r->in_flight);
    if (r->last_error[0])
        mic_buf_json_str(out, r->last_error, strlen(r->last_error));
    else
        mic_buf_puts(out, "null");
    mic_buf_add(out, "}", 1);
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_unlock(&k->mu);
}

static void metrics_render(void *arg, const struct mic_key *key, struct mic_buf *b)
{
    static const struct { const char *name, *type, *help; } fam[] = {
        {"mic_sink_published_total", "counter", "Messages a sink group's relay published "
         "and JetStream acknowledged (PubAck)."},
        {"mic_sink_failures_total", "counter", "Publishes of a sink group's relay that "
         "failed or timed out (each one nacked)."},
        {"mic_sink_in_flight", "gauge", "Deliveries of a sink group claimed by the relay "
         "and not yet settled."},
        {"mic_sink_connected", "gauge", "1 while a sink group's relay is connected to NATS."},
    };
    mic_sink *k = arg;

    pthread_mutex_lock(&k->mu);
    for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++) {
        mic_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", fam[f].name, fam[f].help,
                       fam[f].name, fam[f].type);
        for (struct relay *r = k->list; r; r = r->next) {
            unsigned long long v;
            if (!mic_key_lists(key, 1, r->name, strlen(r->name)))
                continue;
            pthread_mutex_lock(&r->mu);
            v = f == 0 ? r->published : f == 1 ? r->failures
                : f == 2 ? (unsigned long long)r->in_flight : (unsigned long long)r->connected;
            pthread_mutex_unlock(&r->mu);
            mic_buf_printf(b, "%s{group=\"%s\"} %llu\n", fam[f].name, r->name, v);
        }
    }
    mic_buf_puts(b, "# HELP mic_sink_puback_seconds Time from a sink group's publish to "
                    "JetStream's PubAck.\n# TYPE mic_sink_puback_seconds histogram\n");
    for (struct relay *r = k->list; r; r = r->next) {
        unsigned long long cum = 0;
        if (!mic_key_lists(key, 1, r->name, strlen(r->name)))
            continue;
        pthread_mutex_lock(&r->mu);
        for (int i = 0; i < NBUCKETS; i++) {
            cum += r->hist[i];
            mic_buf_printf(b, "mic_sink_puback_seconds_bucket{group=\"%s\",le=\"%g\"} %llu\n",
                           r->name, puback_le[i], cum);
        }
        cum += r->hist[NBUCKETS];
        mic_buf_printf(b, "mic_sink_puback_seconds_bucket{group=\"%s\",le=\"+Inf\"} %llu\n"
                          "mic_sink_puback_seconds_sum{group=\"%s\"} %.6f\n"
                          "mic_sink_puback_seconds_count{group=\"%s\"} %llu\n",
                       r->name, cum, r->name, r->puback_sum, r->name, cum);
        pthread_mutex_unlock(&r->mu);
    }
    pthread_mutex_unlock(&k->mu);
}

/* ---- Start and stop ---- */

int mic_sink_start(mic_sink **out, mic_store *s, mic_writer *w,
                   const struct mic_config *cfg)
{
    mic_sink *k = calloc(1, sizeof *k);

    if (!k)
        return MIC_ENOMEM;
    k->s = s;
    k->w = w;
    k->cfg = cfg;
    pthread_mutex_init(&k->mu, NULL);
    pthread_cond_init(&k->cv, NULL);
    if (pthread_create(&k->mgr, NULL, manager_main, k)) {
        pthread_cond_destroy(&k->cv);
        pthread_mutex_destroy(&k->mu);
        free(k);
        return MIC_ENOMEM;
    }
    mic_group_on_sink_status(status_json, k);
    mic_metrics_on_render(metrics_render, k);
    *out = k;
    return MIC_OK;
}

void mic_sink_stop(mic_sink *k)
{
    struct relay *list;

    if (!k)
        return;
    pthread_mutex_lock(&k->mu);
    k->stop = 1;
    pthread_cond_broadcast(&k->cv);
    pthread_mutex_unlock(&k->mu);
    pthread_join(k->mgr, NULL);
    pthread_mutex_lock(&k->mu);
    list = k->list;
    k->list = NULL;
    pthread_mutex_unlock(&k->mu);
    for (struct relay *r = list; r; r = r->next)
        relay_signal_stop(r); /* all at once: their waits overlap */
    while (list) {
        struct relay *r = list;
        list = r->next;
        relay_join(r);
    }
}

void mic_sink_free(mic_sink *k)
{
    if (!k)
        return;
    mic_group_on_sink_status(NULL, NULL);
    mic_metrics_on_render(NULL, NULL);
    if (k->nats_used)
        nats_CloseAndWait(2000);
    pthread_cond_destroy(&k->cv);
    pthread_mutex_destroy(&k->mu);
    free(k);
}
