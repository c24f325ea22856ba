/* views.c - the read side of deliveries (views.h): what admins ask of a
 * group and of an aggregate (DESIGN sections 4, 6 and 12 "Blocked and
 * oldest", "DLQ", "Event lookup").  Every listing runs in one read
 * transaction of the handler thread and reads the delivery engine's
 * indexes only through delivery.h's read functions; each costs a seek plus
 * one step per item listed, whatever the backlog. */
#define _POSIX_C_SOURCE 200809L
#include "views.h"

#include "core/buf.h"
#include "core/clock.h"
#include "delivery.h"
#include "core/err.h"
#include "group.h"
#include "core/json.h"
#include "store/catalog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BADREQ(field, ...) \
    mic_error_set(err, MIC_EINVAL, "invalid_request", field, __VA_ARGS__)

/* ---- Blocked aggregates ---- */

struct blocked {
    mic_txn *t;
    uint32_t gid;
    const char *reason;  /* filter, or NULL */
    int limit, n;
    int64_t now;
    struct mic_buf *out;
    int rc;
};

static int blocked_one(void *arg, uint64_t ord, const struct mic_ags *a)
{
    struct blocked *b = arg;
    struct mic_agg_rec ag;
    struct mic_dlv d;
    const char *why = NULL;
    uint64_t head = a->active;

    if (a->missing) {
        struct mic_ags st;
        uint64_t first;
        why = "gap";
        if (mic_delivery_agg(b->t, b->gid, ord, &st, &first) == MIC_OK && first)
            head = first;
    } else if (a->active && mic_delivery_get(b->t, b->gid, a->active, &d) == MIC_OK) {
        if (d.state == MIC_DLV_PROCESSING)
            why = "lease";
        else if (mic_delivery_scheduled(&d))
            why = "scheduled";
        else if (d.state == MIC_DLV_PENDING && d.not_before)
            why = "retry";
        else if (d.state == MIC_DLV_DLQ)
            why = "dlq";
    }
    if (!why || (a->waiting < 2 && strcmp(why, "gap") && strcmp(why, "dlq")))
        return 0;
    if (b->reason && strcmp(b->reason, why))
        return 0;
    if ((b->rc = mic_store_agg_get(b->t, a->akey, &ag)))
        return 1;
    if (b->n++)
        mic_buf_add(b->out, ",", 1);
    mic_buf_puts(b->out, "{\"aggregate_type\":");
    mic_buf_json_str(b->out, ag.type, ag.tlen);
    mic_buf_puts(b->out, ",\"aggregate_id\":");
    mic_buf_json_str(b->out, ag.id, ag.ilen);
    mic_buf_printf(b->out, ",\"head_seq\":%llu,\"reason\":\"%s\",\"since\":",
                   (unsigned long long)head, why);
    mic_buf_json_time(b->out, a->since);
    mic_buf_printf(b->out, ",\"age_s\":%.3f,\"waiting\":%llu",
                   mic_age_s(b->now, a->since),
                   (unsigned long long)(a->waiting ? a->waiting - 1 : 0));
    if (a->missing)
        mic_buf_printf(b->out, ",\"missing_version\":%llu", (unsigned long long)a->missing);
    mic_buf_add(b->out, "}", 1);
    return b->n >= b->limit;
}

int mic_views_blocked(mic_store *s, const char *group, const char *reason,
                      const char *limit, struct mic_buf *out,
                      struct mic_error *err)
{
    struct blocked b;
    long lim;
    mic_txn *t;
    int rc;

    if (reason && strcmp(reason, "lease") && strcmp(reason, "retry") &&
        strcmp(reason, "scheduled") && strcmp(reason, "gap") && strcmp(reason, "dlq"))
        return mic_error_set(err, MIC_EINVAL, "invalid_request", "reason",
                             "reason is lease, retry, scheduled, gap or dlq");
    if ((rc = mic_limit_arg(limit, 100, &lim, err)))
        return rc;
    if ((rc = mic_group_read_begin(s, group, &t, err)))
        return rc;
    memset(&b, 0, sizeof b);
    b.t = t;
    b.reason = reason;
    b.limit = (int)lim;
    b.now = mic_now_us();
    b.out = out;
    rc = mic_group_gid(t, group, &b.gid);
    if (rc == MIC_OK) {
        mic_buf_puts(out, "{\"aggregates\":[");
        rc = mic_delivery_aggs_each(t, b.gid, blocked_one, &b);
        if (rc == 1)
            rc = b.rc;
        mic_buf_puts(out, "]}");
    }
    return mic_group_read_end(t, rc, group, err);
}

struct agg_view {
    mic_txn *t;
    struct mic_buf *out;
    int n, rc;
};

#define AGG_VIEW_MAX 1000

static int view_one(void *arg, uint64_t seq)
{
    struct agg_view *v = arg;
    struct mic_rec r;

    if (v->n == AGG_VIEW_MAX)
        return 1;
    if ((v->rc = mic_store_log_get(v->t, seq, &r)))
        return v->rc == MIC_ENOTFOUND ? (v->rc = 0) : 1; /* removed by retention */
    mic_buf_puts(v->out, v->n++ ? ",{\"event\":" : "{\"event\":");
    mic_buf_add(v->out, r.json, r.json_len);
    mic_buf_puts(v->out, ",\"deliveries\":[");
    if ((v->rc = mic_views_deliveries_json(v->t, seq, v->out)))
        return 1;
    mic_buf_puts(v->out, "]}");
    return 0;
}

int mic_views_aggregate(mic_store *s, const char *type, const char *id,
                        struct mic_buf *out, struct mic_error *err)
{
    uint8_t akey[MIC_AKEY_LEN];
    struct mic_agg_rec ag;
    struct agg_view v;
    mic_txn *t;
    int rc;

    if (strlen(type) > MIC_AGG_NAME_MAX || strlen(id) > MIC_AGG_NAME_MAX)
        return mic_error_set(err, MIC_ENOTFOUND, "not_found", NULL, "no such aggregate");
    mic_store_akey(type, strlen(type), id, strlen(id), akey);
    if ((rc = mic_txn_begin(s, 0, &t)))
        return mic_error_internal(err, rc);
    rc = mic_store_agg_get(t, akey, &ag);
    if (rc == MIC_OK) {
        mic_buf_puts(out, "{\"aggregate_type\":");
        mic_buf_json_str(out, ag.type, ag.tlen);
        mic_buf_puts(out, ",\"aggregate_id\":");
        mic_buf_json_str(out, ag.id, ag.ilen);
        mic_buf_printf(out, ",\"versioned\":%s", ag.versioned ? "true" : "false");
        if (ag.versioned)
            mic_buf_printf(out, ",\"first_version\":%llu,\"last_version\":%llu,"
                                "\"contiguous_to\":%llu",
                           (unsigned long long)ag.baseline, (unsigned long long)ag.max_version,
                           (unsigned long long)ag.contig);
        mic_buf_puts(out, ",\"events\":[");
        memset(&v, 0, sizeof v);
        v.t = t;
        v.out = out;
        rc = mic_store_aggidx_each(t, akey, view_one, &v);
        if (rc == 1)
            rc = v.rc;
        mic_buf_printf(out, "],\"truncated\":%s}", v.n == AGG_VIEW_MAX ? "true" : "false");
    }
    mic_txn_abort(t);
    if (rc == MIC_ENOTFOUND)
        return mic_error_set(err, rc, "not_found", NULL, "no such aggregate");
    if (rc)
        return mic_error_internal(err, rc);
    return MIC_OK;
}

/* ---- The oldest unhandled deliveries ---- */

/* Append why delivery 'seq' (state 'd', event 'r') waits in group 'gid'. */
static void why(mic_txn *t, uint32_t gid, uint64_t seq, const struct mic_dlv *d,
                struct mic_buf *out)
{
    struct mic_ags a;
    uint64_t first;

    if (d->state == MIC_DLV_PROCESSING) {
        mic_buf_puts(out, ",\"reason\":\"leased\",\"worker\":");
        mic_buf_json_str(out, d->worker, d->worker_len);
        mic_buf_puts(out, ",\"lease_expires_at\":");
        mic_buf_json_time(out, d->lease_expires);
        return;
    }
    if (d->ord && mic_delivery_agg(t, gid, d->ord, &a, &first) == MIC_OK &&
        a.active != seq) {
        if (a.missing && first == seq) {
            mic_buf_printf(out, ",\"reason\":\"gap\",\"missing_version\":%llu",
                           (unsigned long long)a.missing);
            return;
        }
        mic_buf_printf(out, ",\"reason\":\"behind_head\",\"head_seq\":%llu",
                       (unsigned long long)(a.active ? a.active : first));
        return;
    }
    if (mic_delivery_scheduled(d)) {
        mic_buf_puts(out, ",\"reason\":\"scheduled\",\"deliver_at\":");
        mic_buf_json_time(out, d->not_before);
        return;
    }
    if (d->not_before) {
        mic_buf_puts(out, ",\"reason\":\"retry\",\"not_before\":");
        mic_buf_json_time(out, d->not_before);
        mic_buf_puts(out, ",\"last_error\":");
        mic_buf_json_str(out, d->last_error, d->error_len);
        return;
    }
    mic_buf_puts(out, ",\"reason\":\"ready\"");
}

int mic_views_oldest(mic_store *s, const char *group, const char *limit,
                     struct mic_buf *out, struct mic_error *err)
{
    uint64_t seqs[1000];
    long lim;
    int64_t now = mic_now_us();
    uint32_t gid;
    mic_txn *t;
    int n = 0, rc;

    if ((rc = mic_limit_arg(limit, 10, &lim, err)))
        return rc;
    if ((rc = mic_group_read_begin(s, group, &t, err)))
        return rc;
    rc = mic_group_gid(t, group, &gid);
    if (rc == MIC_OK)
        rc = mic_delivery_oldest_page(t, gid, seqs, (int)lim, &n);
    if (rc == MIC_OK) {
        mic_buf_puts(out, "{\"group\":");
        mic_buf_json_str(out, group, strlen(group));
        mic_buf_puts(out, ",\"oldest_unhandled_age_s\":");
        mic_buf_puts(out, n ? "" : "null");
        for (int i = 0; i < n && rc == MIC_OK; i++) {
            struct mic_dlv d;
            struct mic_rec r;
            const char *id, *q;
            if ((rc = mic_delivery_get(t, gid, seqs[i], &d)) ||
                (rc = mic_store_log_get(t, seqs[i], &r)))
                break;
            if (i == 0)
                mic_buf_printf(out, "%.3f,\"deliveries\":[", mic_age_s(now, r.created_at_us));
            id = r.json + 13;
            q = memchr(id, '"', r.json_len - 13);
            mic_buf_printf(out, "%s{\"seq\":%llu,\"event_id\":", i ? "," : "",
                           (unsigned long long)seqs[i]);
            mic_buf_json_str(out, id, q ? (size_t)(q - id) : 0);
            mic_buf_puts(out, ",\"created_at\":");
            mic_buf_json_time(out, r.created_at_us);
            mic_buf_printf(out, ",\"age_s\":%.3f,\"state\":\"%s\",\"attempts\":%u",
                           mic_age_s(now, r.created_at_us), mic_dlv_state_name(d.state),
                           d.attempts);
            why(t, gid, seqs[i], &d, out);
            mic_buf_add(out, "}", 1);
        }
        mic_buf_puts(out, n ? "]}" : ",\"deliveries\":[]}");
    }
    return mic_group_read_end(t, rc, group, err);
}

/* ---- The DLQ ---- */

int mic_views_dlq(mic_store *s, const char *group, const char *after,
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
        rc = mic_delivery_dlq_page(t, gid, from, seqs, (int)lim, &n);
    if (rc == MIC_OK) {
        mic_buf_puts(out, "{\"deliveries\":[");
        for (int i = 0; i < n && rc == MIC_OK; i++) {
            struct mic_dlv d;
            struct mic_rec r;
            if ((rc = mic_delivery_get(t, gid, seqs[i], &d)))
                break;
            /* A record failing its checksum is listed without its event
             * (null): last_error says store_corrupt, and the admin can
             * skip it from here. */
            if ((rc = mic_store_log_get(t, seqs[i], &r)) && rc != MIC_ECORRUPT)
                break;
            mic_buf_printf(out, "%s{\"seq\":%llu,\"event\":", i ? "," : "",
                           (unsigned long long)seqs[i]);
            if (rc == MIC_ECORRUPT)
                mic_buf_puts(out, "null");
            else
                mic_buf_add(out, r.json, r.json_len);
            rc = MIC_OK;
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

/* ---- An event's deliveries ---- */

struct dlv_list {
    uint64_t seq;
    mic_txn *t;
    struct mic_buf *out;
};

static int dlv_one(void *arg, const char *name, size_t len,
                   const struct mic_group_rec *rec)
{
    struct dlv_list *l = arg;
    struct mic_dlv d;

    if (mic_delivery_get(l->t, rec->gid, l->seq, &d) != MIC_OK)
        return 0;
    if (l->out->len && l->out->p[l->out->len - 1] != '[')
        mic_buf_add(l->out, ",", 1);
    mic_buf_puts(l->out, "{\"group\":");
    mic_buf_json_str(l->out, name, len);
    mic_buf_printf(l->out, ",\"state\":\"%s\",\"attempts\":%u",
                   mic_dlv_state_name(d.state), d.attempts);
    if (d.state == MIC_DLV_PENDING && d.not_before) {
        mic_buf_puts(l->out, ",\"not_before\":");
        mic_buf_json_time(l->out, d.not_before);
    }
    if (d.state == MIC_DLV_PROCESSING) {
        mic_buf_puts(l->out, ",\"lease_expires_at\":");
        mic_buf_json_time(l->out, d.lease_expires);
    }
    if (d.worker_len) {
        mic_buf_puts(l->out, ",\"worker\":");
        mic_buf_json_str(l->out, d.worker, d.worker_len);
    }
    if (d.error_len) {
        mic_buf_puts(l->out, ",\"last_error\":");
        mic_buf_json_str(l->out, d.last_error, d.error_len);
    }
    mic_buf_add(l->out, "}", 1);
    return 0;
}

int mic_views_deliveries_json(mic_txn *t, uint64_t seq, struct mic_buf *out)
{
    struct dlv_list l = {seq, t, out};

    return mic_store_group_each(t, dlv_one, &l);
}
