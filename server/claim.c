/* claim.c - the delivery state machine (DESIGN sections 2, 3, 4, 12).
 *
 *   PENDING --claim--> PROCESSING --ack--> DISPATCHED
 *   PROCESSING --nack / lease expiry--> PENDING (not_before = now + backoff)
 *                                   or DLQ when attempts reached max_attempts
 *   DLQ --requeue--> PENDING (attempts 0)     DLQ --skip--> SKIPPED
 *
 * Invariants kept in every transaction, so that every step is a seek:
 *   PENDING, not_before == 0  <=>  in the ready set (gid, 255-prio, seq)
 *   PENDING, not_before  > 0  <=>  a RETRY timer at not_before
 *   PROCESSING                <=>  a LEASE timer at lease_expires
 *   DLQ                       <=>  in the group's DLQ index
 * Deadlines are not scanned for: the writer seeks the first timer before
 * each batch (before_batch) and sleeps until the next one (next_due).
 *
 * A lease token whose lease expired still works until another claim takes
 * the delivery (the record keeps the last token), unless the expiry
 * dead-lettered it; after that it answers lease_lost.  On the wire a token
 * is 40 hex digits: the group's id (4 bytes; a token of a deleted group
 * whose name was reused answers not_found) and 128 random bits.  A claim that finds
 * nothing and may wait parks in the writer on its group's id and is applied
 * again when that group gains ready deliveries, or answered empty at its
 * deadline; no thread waits. */
#define _DEFAULT_SOURCE
#include "claim.h"

#include "buf.h"
#include "clock.h"
#include "config.h"
#include "err.h"
#include "json.h"
#include "order.h"
#include "replay.h"
#include "retention.h"

#include <math.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ITEMS_MAX 1000
#define TIMERS_PER_BATCH 10000

enum item_status {
    ST_NONE, ST_ACKED, ST_RETRYING, ST_DEAD, ST_EXTENDED, ST_LOST,
    ST_NOTFOUND, ST_REQUEUED, ST_SKIPPED, ST_NOT_IN_DLQ,
};

static const char *const status_names[] = {
    "", "acked", "retrying", "dead_lettered", "extended", "lease_lost",
    "not_found", "requeued", "skipped", "not_in_dlq",
};

struct item {
    uint64_t seq;
    uint32_t gid;     /* the group incarnation the token was granted in */
    uint8_t token[MIC_TOKEN_LEN];
    int has_retry;
    uint32_t retry_after_s;
    int status;
    int64_t t;        /* not_before or lease_expires_at */
};

struct mic_claim {
    mic_op op; /* first */
    int kind;
    char group[MIC_GROUP_NAME_MAX + 1];
    size_t glen;
    /* claim */
    int max;
    uint32_t lease_ttl_s;   /* 0: the group's */
    int64_t deadline_ms;    /* long-poll end (monotonic), 0 = no wait */
    char worker[MIC_WORKER_MAX + 1];
    size_t worker_len;
    /* settle */
    struct item *items;
    int n, all;
    char *error;            /* nack's error text (malloc'd), or NULL */
    size_t error_len;
    int has_retry;
    uint32_t retry_after_s;
    uint64_t requeued;
    /* results: a claim's grants (the JSON is built by the caller, off the
     * writer thread, from these and the log) */
    uint64_t *seqs;
    uint32_t *attempts;
    uint8_t (*tokens)[MIC_TOKEN_LEN];
    int granted;
    uint32_t gid;
    char *replay;           /* a replay group's "replay" members, or NULL */
    int64_t lease_expires;
    struct mic_error err;
};

/* ---- Helpers ---- */

static uint64_t rng_state;

static uint64_t rng(void)
{
    uint64_t x = rng_state;

    if (!x && RAND_bytes((unsigned char *)&x, sizeof x) != 1)
        x = (uint64_t)mic_now_us();
    x |= 1;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

/* Full-jitter exponential backoff before attempt 'attempts' + 1, in µs. */
static int64_t backoff_us(const struct mic_group_cfg *c, uint32_t attempts)
{
    double cap = (double)c->backoff_initial_ms *
                 pow(c->backoff_multiplier, attempts > 0 ? attempts - 1 : 0);
    uint64_t ms;

    if (cap > (double)c->backoff_max_ms)
        cap = (double)c->backoff_max_ms;
    ms = (uint64_t)cap;
    return ms ? (int64_t)(rng() % (ms * 1000 + 1)) : 0;
}

static void hex(const uint8_t *b, size_t n, char *out)
{
    static const char d[] = "0123456789abcdef";

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = d[b[i] >> 4];
        out[2 * i + 1] = d[b[i] & 15];
    }
    out[2 * n] = 0;
}

static int unhex(const char *s, size_t len, uint8_t *out, size_t n)
{
    if (len != 2 * n)
        return -1;
    for (size_t i = 0; i < 2 * n; i++) {
        char c = s[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (v < 0)
            return -1;
        out[i / 2] = (uint8_t)(i % 2 ? out[i / 2] << 4 | v : v);
    }
    return 0;
}

static void set_error(struct mic_dlv *d, const char *e, size_t n)
{
    if (n > MIC_ERROR_MAX) {
        n = MIC_ERROR_MAX;
        while (n > 0 && ((unsigned char)e[n] & 0xC0) == 0x80)
            n--; /* cut on a UTF-8 character boundary */
    }
    memcpy(d->last_error, e, n);
    d->last_error[n] = 0;
    d->error_len = (uint16_t)n;
}

/* Take 'd' (PENDING or PROCESSING) out of its ready entry or timer. */
static int detach(struct mic_wctx *w, uint32_t gid, uint64_t seq,
                  const struct mic_dlv *d)
{
    if (d->state == MIC_DLV_PROCESSING)
        return mic_store_timer_del(w->txn, d->lease_expires, gid, seq);
    if (d->state == MIC_DLV_PENDING && d->not_before)
        return mic_store_timer_del(w->txn, d->not_before, gid, seq);
    if (d->state == MIC_DLV_PENDING) {
        int rc = mic_store_ready_del(w->txn, gid, d->priority, seq);
        return rc == MIC_ENOTFOUND ? MIC_OK : rc;
    }
    return MIC_OK;
}

/* In an ordered group, delivery 'seq' left its aggregate's queue (it is
 * dispatched, skipped, or dead-lettered under dlq_policy release). */
static int leave_queue(struct mic_wctx *w, const struct mic_group *gr, uint64_t seq)
{
    struct mic_rec r;
    int rc;

    if (!gr->cfg.ordered)
        return MIC_OK;
    if ((rc = mic_store_log_get(w->txn, seq, &r)))
        return rc == MIC_ENOTFOUND ? MIC_OK : rc;
    return r.has_agg ? mic_order_release(w, gr, &r) : MIC_OK;
}

/* 'd' failed an attempt (nack or expiry): back to PENDING after a backoff,
 * or to the DLQ.  'retry_us' < 0 means "the group's backoff". */
static int fail_attempt(struct mic_wctx *w, const struct mic_group *gr,
                        uint64_t seq, struct mic_dlv *d, int64_t retry_us,
                        int *dead)
{
    int rc;

    *dead = d->attempts >= gr->cfg.max_attempts;
    if (*dead) {
        d->state = MIC_DLV_DLQ;
        d->terminal_at = w->now_us;
        if ((rc = mic_store_dlq_put(w->txn, gr->gid, seq)) ||
            (rc = mic_store_dlv_put(w->txn, gr->gid, seq, d)))
            return rc;
        /* Under dlq_policy hold the dead letter keeps its aggregate's head. */
        return gr->cfg.dlq_hold ? mic_order_refresh(w, gr, seq) : leave_queue(w, gr, seq);
    }
    if (retry_us < 0)
        retry_us = backoff_us(&gr->cfg, d->attempts);
    d->state = MIC_DLV_PENDING;
    d->not_before = retry_us ? w->now_us + retry_us : 0;
    if ((rc = mic_store_dlv_put(w->txn, gr->gid, seq, d)))
        return rc;
    if (d->not_before)
        rc = mic_store_timer_put(w->txn, d->not_before, gr->gid, seq, MIC_TIMER_RETRY);
    else {
        mic_wctx_wake(w, gr->gid);
        rc = mic_store_ready_put(w->txn, gr->gid, d->priority, seq);
    }
    return rc ? rc : mic_order_refresh(w, gr, seq);
}

/* ---- Deadlines (writer hooks) ---- */

static int timers_left, sweep_left;

static int fire(struct mic_wctx *w, mic_groups *g, int64_t due, uint32_t gid,
                uint64_t seq, uint8_t kind)
{
    struct mic_group *gr = mic_groups_by_gid(g, gid);
    struct mic_dlv d;
    int rc, dead;

    if ((rc = mic_store_timer_del(w->txn, due, gid, seq)))
        return rc;
    if (!gr)
        return MIC_OK; /* the group was deleted */
    rc = mic_store_dlv_get(w->txn, gid, seq, &d);
    if (rc == MIC_ENOTFOUND)
        return MIC_OK;
    if (rc)
        return rc;
    if (kind == MIC_TIMER_RETRY && d.state == MIC_DLV_PENDING && d.not_before == due) {
        d.not_before = 0;
        if ((rc = mic_store_dlv_put(w->txn, gid, seq, &d)) ||
            (rc = mic_store_ready_put(w->txn, gid, d.priority, seq)) ||
            (rc = mic_order_refresh(w, gr, seq)))
            return rc;
        mic_wctx_wake(w, gid);
    } else if (kind == MIC_TIMER_LEASE && d.state == MIC_DLV_PROCESSING &&
               d.lease_expires == due) {
        static const char msg[] = "lease expired";
        set_error(&d, msg, sizeof msg - 1);
        return fail_attempt(w, gr, seq, &d, -1, &dead);
    }
    return MIC_OK;
}

static int before_batch(void *app, struct mic_wctx *w)
{
    mic_groups *g = app;
    int64_t due;
    uint32_t gid;
    uint64_t seq;
    uint8_t kind;
    int rc, n = 0;

    timers_left = 0;
    while ((rc = mic_store_timer_first(w->txn, &due, &gid, &seq, &kind)) == MIC_OK &&
           due <= w->now_us) {
        if (++n > TIMERS_PER_BATCH) {
            timers_left = 1;
            break;
        }
        if ((rc = fire(w, g, due, gid, seq, kind)))
            return rc;
    }
    if (rc != MIC_OK && rc != MIC_ENOTFOUND)
        return rc;
    if ((rc = mic_groups_background(g, w)) || (rc = mic_replay_background(g, w)))
        return rc;
    return mic_retention_sweep(w, g, &sweep_left);
}

static int64_t next_due(void *app, struct mic_wctx *w)
{
    int64_t due;
    uint32_t gid;
    uint64_t seq;
    uint8_t kind;

    int64_t ret;

    (void)app;
    if (mic_store_timer_first(w->txn, &due, &gid, &seq, &kind) != MIC_OK)
        due = 0;
    ret = mic_retention_next(w);
    return !due || (ret && ret < due) ? ret : due;
}

static int busy(void *app)
{
    return timers_left || sweep_left || mic_groups_busy(app) || mic_replay_busy();
}

static void aborted(void *app, mic_txn *read)
{
    mic_groups_reload(app, read);
}

void mic_claim_hooks(mic_groups *g, struct mic_writer_hooks *h)
{
    memset(h, 0, sizeof *h);
    h->app = g;
    h->before = before_batch;
    h->next_due = next_due;
    h->busy = busy;
    h->aborted = aborted;
}

/* ---- Apply ---- */

static int apply_claim(mic_claim *c, struct mic_wctx *w, struct mic_group *gr)
{
    int64_t ttl_us = (int64_t)(c->lease_ttl_s ? c->lease_ttl_s : gr->cfg.lease_ttl_s) * 1000000;
    int n, rc;

    c->granted = 0;
    c->gid = gr->gid;
    free(c->replay);
    c->replay = gr->cfg.replay_fields ? strdup(gr->cfg.replay_fields) : NULL;
    c->lease_expires = w->now_us + ttl_us;
    if (c->op.alive && !c->op.alive(&c->op))
        return MIC_OK; /* the client left: take nothing */
    if ((rc = mic_store_ready_pop(w->txn, gr->gid, c->seqs, c->max, &n)))
        return rc;
    if (n && RAND_bytes(c->tokens[0], n * MIC_TOKEN_LEN) != 1)
        return MIC_EIO;
    for (int i = 0; i < n; i++) {
        struct mic_dlv d;

        if ((rc = mic_store_dlv_get(w->txn, gr->gid, c->seqs[i], &d)))
            return rc == MIC_ENOTFOUND ? MIC_EIO : rc;
        d.state = MIC_DLV_PROCESSING;
        d.attempts++;
        d.handed = 1;
        d.not_before = 0;
        d.lease_expires = c->lease_expires;
        memcpy(d.token, c->tokens[i], MIC_TOKEN_LEN);
        memcpy(d.worker, c->worker, c->worker_len);
        d.worker[c->worker_len] = 0;
        d.worker_len = (uint8_t)c->worker_len;
        if ((rc = mic_store_dlv_put(w->txn, gr->gid, c->seqs[i], &d)) ||
            (rc = mic_store_timer_put(w->txn, d.lease_expires, gr->gid, c->seqs[i],
                                      MIC_TIMER_LEASE)) ||
            (rc = mic_order_refresh(w, gr, c->seqs[i])))
            return rc;
        c->attempts[i] = d.attempts;
    }
    c->granted = n;
    if (n == 0 && c->deadline_ms > mic_mono_ms()) {
        c->op.wait_key = gr->gid;
        c->op.wait_until_ms = c->deadline_ms;
    }
    return MIC_OK;
}

/* The token matches a lease that still counts: PROCESSING, or expired
 * back to PENDING and not claimed again since. */
static int holds(const struct mic_dlv *d, const struct item *it)
{
    return memcmp(d->token, it->token, MIC_TOKEN_LEN) == 0 && d->attempts > 0 &&
           (d->state == MIC_DLV_PROCESSING || d->state == MIC_DLV_PENDING);
}

static int settle_one(mic_claim *c, struct mic_wctx *w, struct mic_group *gr,
                      struct item *it)
{
    struct mic_dlv d;
    int rc = mic_store_dlv_get(w->txn, gr->gid, it->seq, &d), dead;

    if ((c->kind == MIC_ACK || c->kind == MIC_NACK || c->kind == MIC_EXTEND) &&
        it->gid != gr->gid)
        rc = MIC_ENOTFOUND; /* a token of a deleted group of the same name */
    if (rc == MIC_ENOTFOUND) {
        it->status = ST_NOTFOUND;
        return MIC_OK;
    }
    if (rc)
        return rc;
    switch (c->kind) {
    case MIC_ACK:
        if (d.state == MIC_DLV_DISPATCHED && !memcmp(d.token, it->token, MIC_TOKEN_LEN)) {
            it->status = ST_ACKED; /* acked twice: same answer */
            return MIC_OK;
        }
        if (!holds(&d, it)) {
            it->status = ST_LOST;
            return MIC_OK;
        }
        if ((rc = detach(w, gr->gid, it->seq, &d)))
            return rc;
        d.state = MIC_DLV_DISPATCHED;
        d.terminal_at = w->now_us;
        d.not_before = 0;
        it->status = ST_ACKED;
        if ((rc = mic_store_dlv_put(w->txn, gr->gid, it->seq, &d)))
            return rc;
        return leave_queue(w, gr, it->seq);
    case MIC_NACK:
        if (!holds(&d, it)) {
            it->status = ST_LOST;
            return MIC_OK;
        }
        if ((rc = detach(w, gr->gid, it->seq, &d)))
            return rc;
        set_error(&d, c->error ? c->error : "", c->error_len);
        rc = fail_attempt(w, gr, it->seq, &d,
                          it->has_retry ? (int64_t)it->retry_after_s * 1000000
                          : c->has_retry ? (int64_t)c->retry_after_s * 1000000 : -1,
                          &dead);
        it->status = dead ? ST_DEAD : ST_RETRYING;
        it->t = d.not_before ? d.not_before : w->now_us;
        return rc;
    case MIC_EXTEND:
        if (!holds(&d, it)) {
            it->status = ST_LOST;
            return MIC_OK;
        }
        if ((rc = detach(w, gr->gid, it->seq, &d)))
            return rc;
        d.state = MIC_DLV_PROCESSING;
        d.not_before = 0;
        d.lease_expires = w->now_us +
                          (int64_t)(c->lease_ttl_s ? c->lease_ttl_s : gr->cfg.lease_ttl_s) * 1000000;
        it->status = ST_EXTENDED;
        it->t = d.lease_expires;
        if ((rc = mic_store_dlv_put(w->txn, gr->gid, it->seq, &d)) ||
            (rc = mic_store_timer_put(w->txn, d.lease_expires, gr->gid, it->seq,
                                      MIC_TIMER_LEASE)))
            return rc;
        return mic_order_refresh(w, gr, it->seq);
    case MIC_REQUEUE:
    case MIC_SKIP:
        if (d.state != MIC_DLV_DLQ) {
            it->status = ST_NOT_IN_DLQ;
            return MIC_OK;
        }
        if ((rc = mic_store_dlq_del(w->txn, gr->gid, it->seq)))
            return rc;
        if (c->kind == MIC_SKIP) {
            d.state = MIC_DLV_SKIPPED;
            d.terminal_at = w->now_us;
            it->status = ST_SKIPPED;
            if ((rc = mic_store_dlv_put(w->txn, gr->gid, it->seq, &d)))
                return rc;
            return leave_queue(w, gr, it->seq); /* releases a held aggregate */
        }
        d.state = MIC_DLV_PENDING;
        d.attempts = 0;
        d.not_before = 0;
        d.terminal_at = 0;
        it->status = ST_REQUEUED;
        c->requeued++;
        if (gr->cfg.ordered) {
            struct mic_rec r;
            if ((rc = mic_store_log_get(w->txn, it->seq, &r)))
                return rc;
            if (r.has_agg)
                return mic_order_requeue(w, gr, &r, &d);
        }
        /* Without an aggregate: claimable at once. */
        if ((rc = mic_store_dlv_put(w->txn, gr->gid, it->seq, &d)))
            return rc;
        mic_wctx_wake(w, gr->gid);
        return mic_store_ready_put(w->txn, gr->gid, d.priority, it->seq);
    }
    return MIC_EIO;
}

static int requeue_all(mic_claim *c, struct mic_wctx *w, struct mic_group *gr)
{
    uint64_t seqs[256];
    int n, rc;

    do {
        if ((rc = mic_store_dlq_page(w->txn, gr->gid, 0, seqs, 256, &n)))
            return rc;
        for (int i = 0; i < n; i++) {
            struct item it = {.seq = seqs[i]};
            if ((rc = settle_one(c, w, gr, &it)))
                return rc;
        }
    } while (n == 256);
    return MIC_OK;
}

static int apply(mic_op *op, struct mic_wctx *w)
{
    mic_claim *c = (mic_claim *)op;
    struct mic_group *gr = mic_groups_find(w->app, c->group, c->glen);
    int rc;

    c->err.err = MIC_OK;
    c->requeued = 0;
    if (!gr) {
        mic_error_set(&c->err, MIC_ENOTFOUND, "not_found", NULL, "no group %s", c->group);
        return MIC_OK;
    }
    if (c->kind == MIC_CLAIM)
        return apply_claim(c, w, gr);
    if (c->all)
        return requeue_all(c, w, gr);
    for (int i = 0; i < c->n; i++)
        if ((rc = settle_one(c, w, gr, &c->items[i])))
            return rc;
    return MIC_OK;
}

/* ---- Parsing ---- */

#define BADREQ(field, ...) \
    mic_error_set(err, MIC_EINVAL, "invalid_request", field, __VA_ARGS__)

static int get_num(json_t *o, const char *k, double lo, double hi, int integer,
                   double *out, int *present, struct mic_error *err)
{
    json_t *v = json_object_get(o, k);

    *present = v != NULL;
    if (!v)
        return MIC_OK;
    if (!json_is_number(v) || (integer && !json_is_integer(v)) ||
        json_number_value(v) < lo || json_number_value(v) > hi)
        return BADREQ(k, "%s must be %s from %g to %g", k, integer ? "an integer" : "a number",
                      lo, hi);
    *out = json_number_value(v);
    return MIC_OK;
}

static int check_keys(json_t *o, const char *const *known, struct mic_error *err)
{
    const char *k;
    json_t *v;

    json_object_foreach(o, k, v) {
        int ok = 0;
        for (int i = 0; known[i] && !ok; i++)
            ok = !strcmp(k, known[i]);
        if (!ok)
            return BADREQ(k, "unknown field '%.64s'", k);
    }
    return MIC_OK;
}

static int parse_claim(mic_claim *c, json_t *o, struct mic_error *err)
{
    static const char *const known[] = {"max", "lease_ttl_s", "wait_s", "worker", NULL};
    double v = 1;
    json_t *wk;
    int present, rc;

    if ((rc = check_keys(o, known, err)) ||
        (rc = get_num(o, "max", 1, ITEMS_MAX, 1, &v, &present, err)))
        return rc;
    c->max = present ? (int)v : 1;
    if ((rc = get_num(o, "lease_ttl_s", 1, 43200, 1, &v, &present, err)))
        return rc;
    c->lease_ttl_s = present ? (uint32_t)v : 0;
    if ((rc = get_num(o, "wait_s", 0, 60, 0, &v, &present, err)))
        return rc;
    if (present && v > 0)
        c->deadline_ms = mic_mono_ms() + (int64_t)(v * 1000 + 0.5);
    if ((wk = json_object_get(o, "worker"))) {
        if (!json_is_string(wk) || json_string_length(wk) > MIC_WORKER_MAX)
            return BADREQ("worker", "worker is a string of at most %d bytes", MIC_WORKER_MAX);
        c->worker_len = json_string_length(wk);
        memcpy(c->worker, json_string_value(wk), c->worker_len);
    }
    return MIC_OK;
}

static int parse_settle(mic_claim *c, json_t *o, struct mic_error *err)
{
    static const char *const ack_keys[] = {"deliveries", NULL};
    static const char *const nack_keys[] = {"deliveries", "error", "retry_after_s", NULL};
    static const char *const ext_keys[] = {"deliveries", "lease_ttl_s", NULL};
    json_t *list = json_object_get(o, "deliveries"), *e;
    double v;
    int present, rc;

    if ((rc = check_keys(o, c->kind == MIC_ACK ? ack_keys
                             : c->kind == MIC_NACK ? nack_keys : ext_keys, err)))
        return rc;
    if (!json_is_array(list) || json_array_size(list) == 0 || json_array_size(list) > ITEMS_MAX)
        return BADREQ("deliveries", "deliveries is a list of 1 to %d {\"seq\",\"lease_token\"}",
                      ITEMS_MAX);
    if ((e = json_object_get(o, "error"))) {
        if (!json_is_string(e))
            return BADREQ("error", "error is a string");
        c->error_len = json_string_length(e);
        if (!(c->error = malloc(c->error_len + 1)))
            return mic_error_set(err, MIC_ENOMEM, "internal", NULL, "out of memory");
        if (c->error_len > MIC_ERROR_MAX) {
            c->error_len = MIC_ERROR_MAX;
            while (c->error_len > 0 &&
                   ((unsigned char)json_string_value(e)[c->error_len] & 0xC0) == 0x80)
                c->error_len--; /* cut on a UTF-8 character boundary */
        }
        memcpy(c->error, json_string_value(e), c->error_len);
    }
    if ((rc = get_num(o, "retry_after_s", 0, 86400, 1, &v, &present, err)))
        return rc;
    c->has_retry = present;
    c->retry_after_s = present ? (uint32_t)v : 0;
    if ((rc = get_num(o, "lease_ttl_s", 1, 43200, 1, &v, &present, err)))
        return rc;
    c->lease_ttl_s = present ? (uint32_t)v : 0;
    c->n = (int)json_array_size(list);
    if (!(c->items = calloc((size_t)c->n, sizeof *c->items)))
        return mic_error_set(err, MIC_ENOMEM, "internal", NULL, "out of memory");
    for (int i = 0; i < c->n; i++) {
        json_t *it = json_array_get(list, (size_t)i), *seq, *tok;
        uint8_t raw[4 + MIC_TOKEN_LEN];
        char f[48];

        snprintf(f, sizeof f, "deliveries[%d]", i);
        seq = json_object_get(it, "seq");
        tok = json_object_get(it, "lease_token");
        if (!json_is_object(it) || !json_is_integer(seq) || json_integer_value(seq) < 1)
            return BADREQ(f, "each delivery has an integer seq and its lease_token");
        if (!json_is_string(tok) ||
            unhex(json_string_value(tok), json_string_length(tok), raw, sizeof raw))
            return BADREQ(f, "lease_token is the %d hex digits a claim returned",
                          (int)(2 * sizeof raw));
        c->items[i].gid = (uint32_t)raw[0] << 24 | (uint32_t)raw[1] << 16 |
                          (uint32_t)raw[2] << 8 | raw[3];
        memcpy(c->items[i].token, raw + 4, MIC_TOKEN_LEN);
        c->items[i].seq = (uint64_t)json_integer_value(seq);
        if (c->kind == MIC_NACK &&
            (rc = get_num(it, "retry_after_s", 0, 86400, 1, &v, &present, err)))
            return rc;
        if (c->kind == MIC_NACK && present) {
            c->items[i].has_retry = 1;
            c->items[i].retry_after_s = (uint32_t)v;
        }
    }
    return MIC_OK;
}

static int parse_dlq(mic_claim *c, json_t *o, struct mic_error *err)
{
    static const char *const keys[] = {"seqs", "all", NULL};
    json_t *seqs = json_object_get(o, "seqs"), *all = json_object_get(o, "all");
    int rc;

    if ((rc = check_keys(o, keys, err)))
        return rc;
    if (c->kind == MIC_REQUEUE && all && !seqs) {
        if (!json_is_true(all))
            return BADREQ("all", "all must be true");
        c->all = 1;
        return MIC_OK;
    }
    if (all)
        return BADREQ("all", c->kind == MIC_SKIP ? "skip takes seqs" : "give seqs or all, not both");
    if (!json_is_array(seqs) || json_array_size(seqs) == 0 || json_array_size(seqs) > ITEMS_MAX)
        return BADREQ("seqs", "seqs is a list of 1 to %d seqs", ITEMS_MAX);
    c->n = (int)json_array_size(seqs);
    if (!(c->items = calloc((size_t)c->n, sizeof *c->items)))
        return mic_error_set(err, MIC_ENOMEM, "internal", NULL, "out of memory");
    for (int i = 0; i < c->n; i++) {
        json_t *s = json_array_get(seqs, (size_t)i);
        if (!json_is_integer(s) || json_integer_value(s) < 1) {
            char f[32];
            snprintf(f, sizeof f, "seqs[%d]", i);
            return BADREQ(f, "a seq is a positive integer");
        }
        c->items[i].seq = (uint64_t)json_integer_value(s);
    }
    return MIC_OK;
}

int mic_claim_parse(int kind, const char *group, const char *body, size_t len,
                    const struct mic_config *cfg, mic_claim **out,
                    struct mic_error *err)
{
    mic_claim *c;
    json_t *o = NULL;
    int rc;

    if (!mic_group_name_ok(group, strlen(group)))
        return mic_error_set(err, MIC_ENOTFOUND, "not_found", NULL, "no group %s", group);
    if (!(c = calloc(1, sizeof *c)))
        return mic_error_set(err, MIC_ENOMEM, "internal", NULL, "out of memory");
    c->op.apply = apply;
    c->kind = kind;
    c->glen = strlen(group);
    memcpy(c->group, group, c->glen + 1);
    c->max = 1;
    if (len == 0 && kind == MIC_CLAIM)
        goto grants;
    if ((rc = mic_json_load(body, len, cfg->max_depth, &o, err)))
        goto fail;
    if (!json_is_object(o)) {
        rc = BADREQ(NULL, "the body must be a JSON object");
        goto fail;
    }
    rc = kind == MIC_CLAIM ? parse_claim(c, o, err)
         : kind == MIC_REQUEUE || kind == MIC_SKIP ? parse_dlq(c, o, err)
         : parse_settle(c, o, err);
    if (rc)
        goto fail;
    json_decref(o);
    o = NULL;
grants:
    if (kind == MIC_CLAIM &&
        (!(c->seqs = calloc((size_t)c->max, sizeof *c->seqs)) ||
         !(c->attempts = calloc((size_t)c->max, sizeof *c->attempts)) ||
         !(c->tokens = calloc((size_t)c->max, sizeof *c->tokens)))) {
        rc = mic_error_set(err, MIC_ENOMEM, "internal", NULL, "out of memory");
        goto fail;
    }
    *out = c;
    return MIC_OK;
fail:
    json_decref(o);
    mic_claim_free(c);
    return rc;
}

mic_op *mic_claim_op(mic_claim *c)
{
    return &c->op;
}

/* A claim's answer: the grants with their events, read from the log. */
static int claim_json(mic_claim *c, mic_store *s, struct mic_buf *out,
                      struct mic_error *err)
{
    char t[MIC_TIME_LEN + 3], tok[2 * (4 + MIC_TOKEN_LEN) + 1];
    uint8_t raw[4 + MIC_TOKEN_LEN];
    mic_txn *txn;
    int rc = MIC_OK;

    mic_buf_puts(out, "{\"deliveries\":[");
    if (c->granted && (rc = mic_txn_begin(s, 0, &txn)))
        return mic_error_set(err, rc, "internal", NULL, "%s", mic_strerror(rc));
    t[0] = '"';
    mic_time_format(c->lease_expires, t + 1);
    t[MIC_TIME_LEN + 1] = '"';
    for (int i = 0; i < c->granted && rc == MIC_OK; i++) {
        struct mic_rec r;
        if ((rc = mic_store_log_get(txn, c->seqs[i], &r)))
            break;
        raw[0] = (uint8_t)(c->gid >> 24);
        raw[1] = (uint8_t)(c->gid >> 16);
        raw[2] = (uint8_t)(c->gid >> 8);
        raw[3] = (uint8_t)c->gid;
        memcpy(raw + 4, c->tokens[i], MIC_TOKEN_LEN);
        hex(raw, sizeof raw, tok);
        mic_buf_add(out, i ? ",{\"seq\":" : "{\"seq\":", i ? 8 : 7);
        mic_buf_i64(out, (int64_t)c->seqs[i]);
        mic_buf_puts(out, ",\"lease_token\":\"");
        mic_buf_add(out, tok, 2 * sizeof raw);
        mic_buf_puts(out, "\",\"attempt\":");
        mic_buf_i64(out, c->attempts[i]);
        mic_buf_puts(out, ",\"lease_expires_at\":");
        mic_buf_add(out, t, MIC_TIME_LEN + 2);
        mic_buf_puts(out, ",\"event\":");
        mic_buf_add(out, r.json, r.json_len);
        if (c->replay) {
            /* The stored form starts with {"event_id":"...". */
            const char *id = r.json + 13, *q = memchr(id, '"', r.json_len - 13);
            mic_buf_puts(out, ",\"replay\":{");
            mic_buf_puts(out, c->replay);
            mic_buf_puts(out, ",\"original_event_id\":");
            mic_buf_json_str(out, id, q ? (size_t)(q - id) : 0);
            mic_buf_add(out, "}", 1);
        }
        mic_buf_add(out, "}", 1);
    }
    if (c->granted)
        mic_txn_abort(txn);
    if (rc)
        return mic_error_set(err, rc, "internal", NULL, "%s", mic_strerror(rc));
    mic_buf_puts(out, "]}");
    return MIC_OK;
}

int mic_claim_result(mic_claim *c, mic_store *s, struct mic_buf *out,
                     struct mic_error *err)
{
    if (c->err.err) {
        *err = c->err;
        return c->err.err;
    }
    if (c->kind == MIC_CLAIM)
        return claim_json(c, s, out, err);
    if (c->all) {
        mic_buf_printf(out, "{\"requeued\":%llu}", (unsigned long long)c->requeued);
        return MIC_OK;
    }
    mic_buf_puts(out, "{\"results\":[");
    for (int i = 0; i < c->n; i++) {
        struct item *it = &c->items[i];
        mic_buf_add(out, i ? ",{\"seq\":" : "{\"seq\":", i ? 8 : 7);
        mic_buf_i64(out, (int64_t)it->seq);
        mic_buf_puts(out, ",\"status\":\"");
        mic_buf_puts(out, status_names[it->status]);
        mic_buf_add(out, "\"", 1);
        if (it->status == ST_RETRYING) {
            mic_buf_puts(out, ",\"not_before\":");
            mic_buf_json_time(out, it->t);
        } else if (it->status == ST_EXTENDED) {
            mic_buf_puts(out, ",\"lease_expires_at\":");
            mic_buf_json_time(out, it->t);
        }
        mic_buf_add(out, "}", 1);
    }
    mic_buf_puts(out, "]}");
    return MIC_OK;
}

void mic_claim_free(mic_claim *c)
{
    if (!c)
        return;
    free(c->replay);
    free(c->error);
    free(c->seqs);
    free(c->attempts);
    free(c->tokens);
    free(c->items);
    free(c);
}

/* ---- The DLQ, read side ---- */

int mic_claim_dlq_list(mic_store *s, const char *group, const char *after,
                       const char *limit, struct mic_buf *out,
                       struct mic_error *err)
{
    uint64_t seqs[1000], from = 0;
    long lim;
    uint32_t gid;
    mic_txn *t;
    char *end;
    int n, rc;

    if ((rc = mic_limit_arg(limit, 100, &lim, err)))
        return rc;
    if (after) {
        from = strtoull(after, &end, 10);
        if (*end || *after < '0' || *after > '9')
            return BADREQ("after", "after takes the next cursor of the previous page");
    }
    if ((rc = mic_group_read_begin(s, group, &t, err)))
        return rc;
    rc = mic_group_gid(t, group, &gid);
    if (rc == MIC_OK)
        rc = mic_store_dlq_page(t, gid, from, seqs, (int)lim, &n);
    if (rc == MIC_OK) {
        mic_buf_puts(out, "{\"deliveries\":[");
        for (int i = 0; i < n && rc == MIC_OK; i++) {
            struct mic_dlv d;
            struct mic_rec r;
            if ((rc = mic_store_dlv_get(t, gid, seqs[i], &d)) ||
                (rc = mic_store_log_get(t, seqs[i], &r)))
                break;
            mic_buf_printf(out, "%s{\"seq\":%llu,\"event\":", i ? "," : "",
                           (unsigned long long)seqs[i]);
            mic_buf_add(out, r.json, r.json_len);
            mic_buf_printf(out, ",\"attempts\":%u,\"last_error\":", d.attempts);
            mic_buf_json_str(out, d.last_error, d.error_len);
            mic_buf_puts(out, ",\"dead_lettered_at\":");
            mic_buf_json_time(out, d.terminal_at);
            mic_buf_add(out, "}", 1);
        }
        if (n == lim)
            mic_buf_printf(out, "],\"next\":\"%llu\"}", (unsigned long long)seqs[n - 1]);
        else
            mic_buf_puts(out, "],\"next\":null}");
    }
    return mic_group_read_end(t, rc, group, err);
}
