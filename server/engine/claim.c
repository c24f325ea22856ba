/* claim.c - claim, ack, nack, extend, DLQ requeue/skip and gap-skip
 * requests (DESIGN sections 3, 4 and 12): parse the body in the handler
 * thread, apply it in the writer thread through the delivery engine's verbs
 * (delivery.h), and write the answer.  This file touches no index itself.
 *
 * On the wire a lease token is 32 lowercase hex digits (128 random bits).
 * A token granted by a micd of store format 1 (40 hex digits: the group's
 * id, then the 128 bits) is still honoured after the upgrade, in the group
 * whose id it carries.  An item whose token is any other string is that
 * item's not_found; 422 is only for a body that is not of the documented
 * shape.  A claim that finds
 * nothing and may wait parks in the writer on its group's id and is applied
 * again when that group gains ready deliveries, or answered empty at its
 * deadline; no thread waits. */
#define _DEFAULT_SOURCE
#include "claim.h"

#include "core/buf.h"
#include "core/clock.h"
#include "core/config.h"
#include "delivery.h"
#include "core/err.h"
#include "event.h"
#include "core/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ITEMS_MAX 1000

struct item {
    uint64_t seq;
    int token_ok;     /* the token is of the right form */
    int legacy;       /* a format-1 token: valid only in group 'gid' */
    uint32_t gid;
    uint8_t token[MIC_TOKEN_LEN];
    int has_retry;
    uint32_t retry_after_s;
    int status;       /* enum mic_delivery_status */
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
    int dead_letter;        /* nack: straight to the DLQ */
    uint64_t requeued;
    /* results: a claim's grants (the JSON is built by the caller, off the
     * writer thread, from these and the log) */
    uint64_t *seqs;
    uint32_t *attempts;
    uint8_t (*tokens)[MIC_TOKEN_LEN];
    int granted;
    char *replay;           /* a replay group's "replay" members, or NULL */
    int64_t lease_expires;
    int internal;           /* the sink relay's own: no group_has_sink check */
    struct mic_error err;
};

/* ---- Apply (writer thread) ---- */

static void hex(const uint8_t *b, size_t n, char *out)
{
    static const char d[] = "0123456789abcdef";

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = d[b[i] >> 4];
        out[2 * i + 1] = d[b[i] & 15];
    }
    out[2 * n] = 0;
}

/* 0 if 's' is exactly 2n lowercase hex digits (decoded into 'out'). */
static int unhex(const char *s, size_t len, uint8_t *out, size_t n)
{
    if (len != 2 * n)
        return -1;
    for (size_t i = 0; i < 2 * n; i++) {
        char c = s[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0)
            return -1;
        out[i / 2] = (uint8_t)(i % 2 ? out[i / 2] << 4 | v : v);
    }
    return 0;
}

static int apply_claim(mic_claim *c, struct mic_wctx *w, struct mic_group *gr)
{
    int64_t ttl_us = (int64_t)(c->lease_ttl_s ? c->lease_ttl_s : mic_group_config(gr)->lease_ttl_s) * 1000000;
    int rc;

    c->granted = 0;
    free(c->replay);
    c->replay = mic_group_config(gr)->replay_fields ? strdup(mic_group_config(gr)->replay_fields) : NULL;
    c->lease_expires = w->now_us + ttl_us;
    if ((rc = mic_delivery_grant(w, gr, c->max, ttl_us, c->worker, c->worker_len, c->seqs,
                                 c->attempts, c->tokens, &c->granted)))
        return rc;
    /* An event whose stored record fails its checksum is never handed out:
     * its delivery goes straight to the DLQ with last_error
     * "store_corrupt: ..." (the read was logged and counted in
     * mic_store_corrupt_records_total), where an admin finds it (its
     * lookup answers 500 store_corrupt) and skips it, or requeues it once
     * the store is restored; the claim goes on with the others, so one
     * corrupt record does not stop a group. */
    for (int i = 0; i < c->granted;) {
        static const char why[] = "store_corrupt: the stored event fails its checksum";
        struct mic_rec r;
        int64_t t;
        int st;

        if (mic_store_log_get(w->txn, c->seqs[i], &r) != MIC_ECORRUPT) {
            i++;
            continue;
        }
        if ((rc = mic_delivery_nack(w, gr, c->seqs[i], c->tokens[i], why, sizeof why - 1, -1, 1,
                                    &st, &t)))
            return rc;
        c->granted--;
        memmove(&c->seqs[i], &c->seqs[i + 1], (size_t)(c->granted - i) * sizeof c->seqs[0]);
        memmove(&c->attempts[i], &c->attempts[i + 1], (size_t)(c->granted - i) * sizeof c->attempts[0]);
        memmove(&c->tokens[i], &c->tokens[i + 1], (size_t)(c->granted - i) * sizeof c->tokens[0]);
    }
    if (c->granted == 0 && c->deadline_ms > mic_mono_ms()) {
        c->op.wait_key = mic_group_id(gr);
        c->op.wait_until_ms = c->deadline_ms;
    }
    return MIC_OK;
}

static int settle_one(mic_claim *c, struct mic_wctx *w, struct mic_group *gr,
                      struct item *it)
{
    const uint8_t *tok = it->token_ok && (!it->legacy || it->gid == mic_group_id(gr)) ? it->token : NULL;
    int64_t ttl_us = (int64_t)(c->lease_ttl_s ? c->lease_ttl_s : mic_group_config(gr)->lease_ttl_s) * 1000000;
    int64_t retry_us = it->has_retry ? (int64_t)it->retry_after_s * 1000000
                       : c->has_retry ? (int64_t)c->retry_after_s * 1000000 : -1;

    switch (c->kind) {
    case MIC_ACK:
        return mic_delivery_ack(w, gr, it->seq, tok, &it->status);
    case MIC_NACK:
        return mic_delivery_nack(w, gr, it->seq, tok, c->error, c->error_len, retry_us,
                                 c->dead_letter, &it->status, &it->t);
    case MIC_EXTEND:
        return mic_delivery_extend(w, gr, it->seq, tok, ttl_us, &it->status, &it->t);
    case MIC_REQUEUE:
        return mic_delivery_requeue(w, gr, it->seq, &it->status);
    case MIC_SKIP:
        return mic_delivery_skip(w, gr, it->seq, &it->status);
    }
    return MIC_EIO;
}

static int apply(mic_op *op, struct mic_wctx *w)
{
    mic_claim *c = (mic_claim *)op;
    struct mic_group *gr = mic_groups_find(w->groups, c->group, c->glen);
    int rc;

    c->err.err = MIC_OK;
    c->requeued = 0;
    if (!gr) {
        mic_error_set(&c->err, MIC_ENOTFOUND, "not_found", NULL, "no group %s", c->group);
        return MIC_OK;
    }
    /* A sink group's deliveries are micd's relay's to move (sink.c). */
    if (mic_group_config(gr)->sink_url && !c->internal && c->kind != MIC_REQUEUE &&
        c->kind != MIC_SKIP) {
        mic_error_set(&c->err, MIC_ECONFLICT, "group_has_sink", NULL,
                      "group %s has a NATS sink: micd relays it itself, workers may not "
                      "claim, ack, nack or extend its deliveries", c->group);
        return MIC_OK;
    }
    if (c->kind == MIC_CLAIM)
        return apply_claim(c, w, gr);
    if (c->all)
        return mic_delivery_requeue_all(w, gr, &c->requeued);
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

static int parse_claim(mic_claim *c, json_t *o, struct mic_error *err)
{
    static const char *const known[] = {"max", "lease_ttl_s", "wait_s", "worker", NULL};
    double v = 1;
    json_t *wk;
    int present, rc;

    if ((rc = mic_json_keys_known(o, known, err)) ||
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
    static const char *const nack_keys[] = {"deliveries", "error", "retry_after_s",
                                            "dead_letter", NULL};
    static const char *const ext_keys[] = {"deliveries", "lease_ttl_s", NULL};
    json_t *list = json_object_get(o, "deliveries"), *e;
    double v;
    int present, rc;

    if ((rc = mic_json_keys_known(o, c->kind == MIC_ACK ? ack_keys
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
            return mic_error_internal(err, MIC_ENOMEM);
        if (c->error_len > MIC_ERROR_MAX) {
            c->error_len = MIC_ERROR_MAX;
            while (c->error_len > 0 &&
                   ((unsigned char)json_string_value(e)[c->error_len] & 0xC0) == 0x80)
                c->error_len--; /* cut on a UTF-8 character boundary */
        }
        memcpy(c->error, json_string_value(e), c->error_len);
    }
    if ((e = json_object_get(o, "dead_letter"))) {
        if (!json_is_boolean(e))
            return BADREQ("dead_letter", "dead_letter is true or false");
        c->dead_letter = json_is_true(e);
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
        return mic_error_internal(err, MIC_ENOMEM);
    for (int i = 0; i < c->n; i++) {
        json_t *it = json_array_get(list, (size_t)i), *seq, *tok;
        char f[48];

        snprintf(f, sizeof f, "deliveries[%d]", i);
        seq = json_object_get(it, "seq");
        tok = json_object_get(it, "lease_token");
        if (!json_is_object(it) || !json_is_integer(seq) || json_integer_value(seq) < 1)
            return BADREQ(f, "each delivery has an integer seq and its lease_token");
        if (!json_is_string(tok))
            return BADREQ(f, "lease_token is the string a claim returned");
        /* A token of the wrong form is this item's not_found. */
        c->items[i].token_ok = !unhex(json_string_value(tok), json_string_length(tok),
                                      c->items[i].token, MIC_TOKEN_LEN);
        if (!c->items[i].token_ok && json_string_length(tok) == 8 + 2 * MIC_TOKEN_LEN) {
            uint8_t raw[4 + MIC_TOKEN_LEN];
            if (!unhex(json_string_value(tok), json_string_length(tok), raw, sizeof raw)) {
                c->items[i].token_ok = c->items[i].legacy = 1;
                c->items[i].gid = (uint32_t)raw[0] << 24 | (uint32_t)raw[1] << 16 |
                                  (uint32_t)raw[2] << 8 | raw[3];
                memcpy(c->items[i].token, raw + 4, MIC_TOKEN_LEN);
            }
        }
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

    if ((rc = mic_json_keys_known(o, keys, err)))
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
        return mic_error_internal(err, MIC_ENOMEM);
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
        return mic_error_internal(err, MIC_ENOMEM);
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
        rc = mic_error_internal(err, MIC_ENOMEM);
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

void mic_claim_set_internal(mic_claim *c)
{
    c->internal = 1;
}

int mic_claim_grants(const mic_claim *c)
{
    return c->err.err ? 0 : c->kind == MIC_CLAIM ? c->granted : 0;
}

void mic_claim_grant(const mic_claim *c, int i, uint64_t *seq,
                     char token[2 * MIC_TOKEN_LEN + 1], int64_t *lease_expires_us)
{
    *seq = c->seqs[i];
    hex(c->tokens[i], MIC_TOKEN_LEN, token);
    *lease_expires_us = c->lease_expires;
}

int mic_claim_items(const mic_claim *c)
{
    return c->err.err ? 0 : c->n;
}

int mic_claim_item_status(const mic_claim *c, int i)
{
    return c->items[i].status;
}

/* A claim's answer: the grants with their events, read from the log. */
static int claim_json(mic_claim *c, mic_store *s, struct mic_buf *out,
                      struct mic_error *err)
{
    char t[MIC_TIME_LEN + 3], tok[2 * MIC_TOKEN_LEN + 1];
    mic_txn *txn;
    int rc = MIC_OK;

    mic_buf_puts(out, "{\"deliveries\":[");
    if (c->granted && (rc = mic_txn_begin(s, 0, &txn)))
        return mic_error_internal(err, rc);
    t[0] = '"';
    mic_time_format(c->lease_expires, t + 1);
    t[MIC_TIME_LEN + 1] = '"';
    for (int i = 0; i < c->granted && rc == MIC_OK; i++) {
        struct mic_rec r;
        if ((rc = mic_store_log_get(txn, c->seqs[i], &r)))
            break;
        hex(c->tokens[i], MIC_TOKEN_LEN, tok);
        mic_buf_add(out, i ? ",{\"seq\":" : "{\"seq\":", i ? 8 : 7);
        mic_buf_i64(out, (int64_t)c->seqs[i]);
        mic_buf_puts(out, ",\"lease_token\":\"");
        mic_buf_add(out, tok, 2 * MIC_TOKEN_LEN);
        mic_buf_puts(out, "\",\"attempt\":");
        mic_buf_i64(out, c->attempts[i]);
        mic_buf_puts(out, ",\"lease_expires_at\":");
        mic_buf_add(out, t, MIC_TIME_LEN + 2);
        mic_buf_puts(out, ",\"event\":");
        mic_buf_add(out, r.json, r.json_len);
        if (c->replay) {
            const char *id = "";
            size_t idlen = 0; /* as they are when the stored form has none */
            (void)mic_event_stored_id(r.json, r.json_len, &id, &idlen);
            mic_buf_puts(out, ",\"replay\":{");
            mic_buf_puts(out, c->replay);
            mic_buf_puts(out, ",\"original_event_id\":");
            mic_buf_json_str(out, id, idlen);
            mic_buf_add(out, "}", 1);
        }
        mic_buf_add(out, "}", 1);
    }
    if (c->granted)
        mic_txn_abort(txn);
    if (rc)
        return mic_error_internal(err, rc);
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
        mic_buf_puts(out, mic_delivery_status_name(it->status));
        mic_buf_add(out, "\"", 1);
        if (it->status == MIC_DS_RETRYING) {
            mic_buf_puts(out, ",\"not_before\":");
            mic_buf_json_time(out, it->t);
        } else if (it->status == MIC_DS_EXTENDED) {
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

/* ---- Gap skip: POST /v1/aggregates/{type}/{id}/gaps/{version}/skip ---- */

struct mic_gap_skip {
    mic_op op; /* first */
    char type[MIC_AGG_NAME_MAX + 1], id[MIC_AGG_NAME_MAX + 1];
    uint8_t akey[MIC_AKEY_LEN];
    uint64_t version;
    int released;
    struct mic_error err;
};

static int skip_apply(mic_op *op, struct mic_wctx *w)
{
    mic_gap_skip *s = (mic_gap_skip *)op;
    struct mic_agg_rec ag;
    uint64_t seq = 0;
    int rc, outcome;

    s->err.err = MIC_OK;
    s->released = 0;
    if ((rc = mic_delivery_gap_skip(w, w->groups, s->akey, s->version, &outcome, &seq,
                                    &s->released)))
        return rc;
    switch (outcome) {
    case MIC_GAP_NO_AGGREGATE:
        mic_error_set(&s->err, MIC_ENOTFOUND, "not_found", NULL, "no such aggregate");
        break;
    case MIC_GAP_UNVERSIONED:
        mic_error_set(&s->err, MIC_EINVAL, "invalid_request", "version",
                      "this aggregate carries no versions");
        break;
    case MIC_GAP_STORED:
        mic_error_set(&s->err, MIC_ECONFLICT, "version_conflict", "version",
                      "version %llu is stored (seq %llu): it is not missing",
                      (unsigned long long)s->version, (unsigned long long)seq);
        break;
    case MIC_GAP_OUT_OF_RANGE:
        if ((rc = mic_store_agg_get(w->txn, s->akey, &ag)))
            return rc;
        mic_error_set(&s->err, MIC_EINVAL, "invalid_request", "version",
                      "version %llu is not missing: missing versions lie between the "
                      "aggregate's first version %llu and its highest %llu",
                      (unsigned long long)s->version, (unsigned long long)ag.baseline,
                      (unsigned long long)ag.max_version);
        break;
    }
    return MIC_OK;
}

int mic_gap_skip_parse(const char *type, const char *id, const char *version,
                       mic_gap_skip **out, struct mic_error *err)
{
    size_t tl = strlen(type), il = strlen(id);
    unsigned long long v;
    mic_gap_skip *s;
    char *end;

    if (!tl || tl > MIC_AGG_NAME_MAX || !il || il > MIC_AGG_NAME_MAX)
        return mic_error_set(err, MIC_ENOTFOUND, "not_found", NULL, "no such aggregate");
    v = strtoull(version, &end, 10);
    if (*end || *version < '1' || *version > '9' || v >= (1ull << 63))
        return mic_error_set(err, MIC_EINVAL, "invalid_request", "version",
                             "the version is an integer from 1 to 2^63-1");
    if (!(s = calloc(1, sizeof *s)))
        return mic_error_internal(err, MIC_ENOMEM);
    s->op.apply = skip_apply;
    memcpy(s->type, type, tl);
    memcpy(s->id, id, il);
    mic_store_akey(type, tl, id, il, s->akey);
    s->version = v;
    *out = s;
    return MIC_OK;
}

mic_op *mic_gap_skip_op(mic_gap_skip *s)
{
    return &s->op;
}

int mic_gap_skip_result(mic_gap_skip *s, struct mic_buf *out, struct mic_error *err)
{
    if (s->err.err) {
        *err = s->err;
        return s->err.err;
    }
    mic_buf_puts(out, "{\"aggregate_type\":");
    mic_buf_json_str(out, s->type, strlen(s->type));
    mic_buf_puts(out, ",\"aggregate_id\":");
    mic_buf_json_str(out, s->id, strlen(s->id));
    mic_buf_printf(out, ",\"skipped_version\":%llu,\"released\":%s}",
                   (unsigned long long)s->version, s->released ? "true" : "false");
    return MIC_OK;
}

void mic_gap_skip_free(mic_gap_skip *s)
{
    free(s);
}
