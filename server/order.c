/* order.c - ordered groups (DESIGN section 3, seed "Per-aggregate ordering").
 *
 * In a group with `ordered: true`, every delivery of an event that has an
 * aggregate also sits in its aggregate's queue, `aq` (gid, akey, order
 * key), in aggregate order: by aggregate_version when the aggregate
 * carries versions, else by (created_at, seq).  Only the aggregate's head
 * is handed to workers: it is the one delivery of the aggregate that is in
 * the ready set, has a retry timer or is leased; the others are PENDING
 * with `queued` set and are in no index but `aq`.  So claims never see
 * blocked aggregates, and their cost does not depend on how many there are.
 *
 * The aggregate's state in the group, `ags`, names the active head, the
 * version it is parked on (0 if none), since when, and how many entries the
 * queue holds.  advance() is the one place that picks a head:
 *   - a head already handed out (leased, retrying, or dead-lettered under
 *     dlq_policy hold) keeps its place, even if an older event arrived late;
 *   - a head never handed out gives way to an event that sorts before it;
 *   - a versioned head may go only if every version from the aggregate's
 *     baseline up to its own is stored or skipped (the aggregate's `contig`
 *     watermark); otherwise the aggregate parks on the first missing one.
 * Terminal states (dispatched, skipped, dead-lettered under release) take
 * the delivery out of the queue (mic_order_release) and advance.
 *
 * A group created over existing events (start `all` or a time) picks no
 * head until its backfill is complete, since an event's predecessors may
 * sit later in the log; then group.c releases the heads of every waiting
 * aggregate, a chunk per batch (mic_order_advance). */
#define _POSIX_C_SOURCE 200809L
#include "order.h"

#include "buf.h"
#include "clock.h"
#include "err.h"
#include "event.h"
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Is the aggregate blocked by its head, as GET .../blocked lists it: parked
 * on a gap, held by a dead letter, or a leased or retrying head with at
 * least one event behind it?  Sets a->blocked. */
static int set_blocked(struct mic_wctx *w, uint32_t gid, struct mic_ags *a)
{
    struct mic_dlv d;
    int rc;

    a->blocked = 0;
    if (a->missing) {
        a->blocked = 1;
        return MIC_OK;
    }
    if (!a->active)
        return MIC_OK;
    rc = mic_store_dlv_get(w->txn, gid, a->active, &d);
    if (rc == MIC_ENOTFOUND)
        return MIC_OK;
    if (rc)
        return rc;
    if (d.state == MIC_DLV_DLQ)
        a->blocked = 1;
    else if (d.state == MIC_DLV_PROCESSING || (d.state == MIC_DLV_PENDING && d.not_before))
        a->blocked = a->waiting >= 2;
    return MIC_OK;
}

/* Write the aggregate's state with its blocked flag brought up to date. */
static int ags_save(struct mic_wctx *w, uint32_t gid, const uint8_t akey[MIC_AKEY_LEN],
                    struct mic_ags *a)
{
    int rc = set_blocked(w, gid, a);

    return rc ? rc : mic_store_ags_put(w->txn, gid, akey, a);
}

int mic_order_refresh(struct mic_wctx *w, const struct mic_group *gr, uint64_t seq)
{
    struct mic_ags a;
    struct mic_rec r;
    uint8_t was;
    int rc;

    if (!gr->cfg.ordered)
        return MIC_OK;
    if ((rc = mic_store_log_get(w->txn, seq, &r)))
        return rc == MIC_ENOTFOUND ? MIC_OK : rc;
    if (!r.has_agg)
        return MIC_OK;
    rc = mic_store_ags_get(w->txn, gr->gid, r.akey, &a);
    if (rc == MIC_ENOTFOUND || (rc == MIC_OK && a.active != seq))
        return MIC_OK;
    if (rc)
        return rc;
    was = a.blocked;
    if ((rc = set_blocked(w, gr->gid, &a)) || a.blocked == was)
        return rc;
    a.blocked = was; /* let the store see the change */
    return ags_save(w, gr->gid, r.akey, &a);
}

static void order_key(const struct mic_rec *r, struct mic_aq *e)
{
    e->k1 = r->has_version ? r->version : (uint64_t)r->created_at_us;
    e->k2 = r->seq;
    e->seq = r->seq;
}

/* Make the first event of the aggregate's queue its head, if it may be. */
static int advance(struct mic_wctx *w, const struct mic_group *gr,
                   const uint8_t akey[MIC_AKEY_LEN])
{
    struct mic_agg_rec ag;
    struct mic_ags a;
    struct mic_aq first;
    struct mic_dlv d;
    int rc;

    /* While older events are still being backfilled, an event's
     * predecessors may not have reached the queue yet: no head is picked
     * before the backfill is complete. */
    if (gr->backfilling)
        return MIC_OK;
    if ((rc = mic_store_ags_get(w->txn, gr->gid, akey, &a)))
        return rc == MIC_ENOTFOUND ? MIC_OK : rc;
    rc = mic_store_aq_first(w->txn, gr->gid, akey, &first);
    if (rc == MIC_ENOTFOUND) {
        if (a.missing && (rc = mic_store_gstat_add(w->txn, gr->gid, MIC_GSTAT_GAP_PARKED, -1)))
            return rc;
        return mic_store_ags_del(w->txn, gr->gid, akey);
    }
    if (rc)
        return rc;
    if (a.active == first.seq)
        return MIC_OK;
    if (a.active) {
        rc = mic_store_dlv_get(w->txn, gr->gid, a.active, &d);
        if (rc && rc != MIC_ENOTFOUND)
            return rc;
        if (rc == MIC_OK) {
            if (d.state == MIC_DLV_PROCESSING || d.state == MIC_DLV_DLQ || d.handed)
                return MIC_OK; /* handed out (even if requeued since): it keeps the head */
            /* Never handed out: an older event goes first. */
            if ((rc = mic_store_ready_del(w->txn, gr->gid, d.priority, a.active)) &&
                rc != MIC_ENOTFOUND)
                return rc;
            d.queued = 1;
            if ((rc = mic_store_dlv_put(w->txn, gr->gid, a.active, &d)))
                return rc;
        }
        a.active = 0;
    }
    if ((rc = mic_store_agg_get(w->txn, akey, &ag)))
        return rc;
    if (ag.versioned && first.k1 > ag.contig + 1) {
        if (a.missing != ag.contig + 1) {
            if (!a.missing &&
                (rc = mic_store_gstat_add(w->txn, gr->gid, MIC_GSTAT_GAP_PARKED, 1)))
                return rc;
            a.missing = ag.contig + 1;
            a.since = w->now_us;
        }
        return ags_save(w, gr->gid, akey, &a);
    }
    if ((rc = mic_store_dlv_get(w->txn, gr->gid, first.seq, &d)))
        return rc;
    d.queued = 0;
    if (d.state == MIC_DLV_PENDING) {
        if (d.not_before)
            rc = mic_store_timer_put(w->txn, d.not_before, gr->gid, first.seq, MIC_TIMER_RETRY);
        else
            rc = mic_store_ready_put(w->txn, gr->gid, d.priority, first.seq);
        if (rc)
            return rc;
        mic_wctx_wake(w, gr->gid);
    }
    if ((rc = mic_store_dlv_put(w->txn, gr->gid, first.seq, &d)))
        return rc;
    if (a.missing && (rc = mic_store_gstat_add(w->txn, gr->gid, MIC_GSTAT_GAP_PARKED, -1)))
        return rc;
    a.active = first.seq;
    a.missing = 0;
    a.since = w->now_us;
    return ags_save(w, gr->gid, akey, &a);
}

int mic_order_advance(struct mic_wctx *w, const struct mic_group *gr,
                      const uint8_t akey[MIC_AKEY_LEN])
{
    return advance(w, gr, akey);
}

/* Put 'r' in its aggregate's queue (its delivery is written by the caller
 * or here) and advance. */
static int join(struct mic_wctx *w, const struct mic_group *gr, const struct mic_rec *r)
{
    struct mic_ags a;
    struct mic_aq e;
    int rc;

    order_key(r, &e);
    if ((rc = mic_store_aq_put(w->txn, gr->gid, r->akey, &e)))
        return rc;
    rc = mic_store_ags_get(w->txn, gr->gid, r->akey, &a);
    if (rc == MIC_ENOTFOUND)
        memset(&a, 0, sizeof a);
    else if (rc)
        return rc;
    a.waiting++;
    if ((rc = ags_save(w, gr->gid, r->akey, &a)))
        return rc;
    return advance(w, gr, r->akey);
}

int mic_order_enqueue(struct mic_wctx *w, const struct mic_group *gr,
                      const struct mic_rec *r)
{
    struct mic_dlv d;
    int rc;

    memset(&d, 0, sizeof d);
    d.state = MIC_DLV_PENDING;
    d.priority = r->priority;
    d.queued = 1;
    d.created_at = r->created_at_us;
    if ((rc = mic_store_dlv_put(w->txn, gr->gid, r->seq, &d)))
        return rc;
    return join(w, gr, r);
}

int mic_order_requeue(struct mic_wctx *w, const struct mic_group *gr,
                      const struct mic_rec *r, struct mic_dlv *d)
{
    struct mic_ags a;
    struct mic_aq e;
    int rc;

    order_key(r, &e);
    rc = mic_store_aq_has(w->txn, gr->gid, r->akey, &e);
    if (rc == MIC_ENOTFOUND) {
        d->queued = 1;
        if ((rc = mic_store_dlv_put(w->txn, gr->gid, r->seq, d)))
            return rc;
        return join(w, gr, r);
    }
    if (rc)
        return rc;
    /* Still in the queue (held under dlq_policy hold): if it is the head,
     * it is claimable again at once, before its successors and before any
     * event that arrived late in front of it. */
    if ((rc = mic_store_ags_get(w->txn, gr->gid, r->akey, &a)))
        return rc;
    if (a.active != r->seq) {
        d->queued = 1;
        if ((rc = mic_store_dlv_put(w->txn, gr->gid, r->seq, d)))
            return rc;
        return advance(w, gr, r->akey);
    }
    d->queued = 0;
    if ((rc = mic_store_dlv_put(w->txn, gr->gid, r->seq, d)) ||
        (rc = mic_store_ready_put(w->txn, gr->gid, d->priority, r->seq)))
        return rc;
    mic_wctx_wake(w, gr->gid);
    return mic_order_refresh(w, gr, r->seq);
}

int mic_order_release(struct mic_wctx *w, const struct mic_group *gr,
                      const struct mic_rec *r)
{
    struct mic_ags a;
    struct mic_aq e;
    int rc;

    order_key(r, &e);
    if ((rc = mic_store_aq_del(w->txn, gr->gid, r->akey, &e)))
        return rc == MIC_ENOTFOUND ? MIC_OK : rc; /* not queued (released before) */
    rc = mic_store_ags_get(w->txn, gr->gid, r->akey, &a);
    if (rc == MIC_ENOTFOUND)
        return MIC_OK;
    if (rc)
        return rc;
    if (a.waiting)
        a.waiting--;
    if (a.active == r->seq)
        a.active = 0;
    if (a.waiting == 0) {
        if (a.missing && (rc = mic_store_gstat_add(w->txn, gr->gid, MIC_GSTAT_GAP_PARKED, -1)))
            return rc;
        return mic_store_ags_del(w->txn, gr->gid, r->akey);
    }
    if ((rc = ags_save(w, gr->gid, r->akey, &a)))
        return rc;
    return advance(w, gr, r->akey);
}

/* Move the aggregate's watermark over stored and skipped versions; heads
 * parked at or below it are released.  *released counts them. */
static int move_watermark(struct mic_wctx *w, mic_groups *g,
                          const uint8_t akey[MIC_AKEY_LEN], int *released)
{
    struct mic_agg_rec ag;
    uint64_t h, seq;
    int rc;

    *released = 0;
    if ((rc = mic_store_agg_get(w->txn, akey, &ag)))
        return rc == MIC_ENOTFOUND ? MIC_OK : rc;
    if (!ag.versioned)
        return MIC_OK;
    for (h = ag.contig;
         mic_store_aggidx_get_version(w->txn, akey, h + 1, &seq) == MIC_OK ||
         mic_store_gapskip_get(w->txn, akey, h + 1) == MIC_OK;
         h++)
        ;
    if (h == ag.contig)
        return MIC_OK;
    ag.contig = h;
    if ((rc = mic_store_agg_put(w->txn, akey, &ag)))
        return rc;
    for (struct mic_group *gr = mic_groups_first(g); gr; gr = gr->next) {
        struct mic_ags a;
        if (!gr->cfg.ordered)
            continue;
        rc = mic_store_ags_get(w->txn, gr->gid, akey, &a);
        if (rc == MIC_ENOTFOUND || (rc == MIC_OK && (!a.missing || a.missing > h)))
            continue;
        if (rc || (rc = advance(w, gr, akey)) ||
            (rc = mic_store_ags_get(w->txn, gr->gid, akey, &a)))
            return rc;
        *released += a.active != 0;
    }
    return MIC_OK;
}

int mic_order_version_stored(struct mic_wctx *w, mic_groups *g,
                             const uint8_t akey[MIC_AKEY_LEN])
{
    int released;

    return move_watermark(w, g, akey, &released);
}

/* ---- Gap skip ---- */

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
    uint64_t seq;
    int rc;

    s->err.err = MIC_OK;
    s->released = 0;
    rc = mic_store_agg_get(w->txn, s->akey, &ag);
    if (rc == MIC_ENOTFOUND) {
        mic_error_set(&s->err, MIC_ENOTFOUND, "not_found", NULL, "no such aggregate");
        return MIC_OK;
    }
    if (rc)
        return rc;
    if (!ag.versioned) {
        mic_error_set(&s->err, MIC_EINVAL, "invalid_request", "version",
                      "this aggregate carries no versions");
        return MIC_OK;
    }
    if (mic_store_gapskip_get(w->txn, s->akey, s->version) == MIC_OK)
        return MIC_OK; /* skipped before: nothing more to release */
    rc = mic_store_aggidx_get_version(w->txn, s->akey, s->version, &seq);
    if (rc == MIC_OK) {
        mic_error_set(&s->err, MIC_ECONFLICT, "version_conflict", "version",
                      "version %llu is stored (seq %llu): it is not missing",
                      (unsigned long long)s->version, (unsigned long long)seq);
        return MIC_OK;
    }
    if (rc != MIC_ENOTFOUND)
        return rc;
    if (s->version <= ag.baseline || s->version >= ag.max_version) {
        mic_error_set(&s->err, MIC_EINVAL, "invalid_request", "version",
                      "version %llu is not missing: missing versions lie between the "
                      "aggregate's first version %llu and its highest %llu",
                      (unsigned long long)s->version, (unsigned long long)ag.baseline,
                      (unsigned long long)ag.max_version);
        return MIC_OK;
    }
    if ((rc = mic_store_gapskip_put(w->txn, s->akey, s->version)))
        return rc;
    return move_watermark(w, w->app, s->akey, &s->released);
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
        return mic_error_set(err, MIC_ENOMEM, "internal", NULL, "out of memory");
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

/* ---- Reads ---- */

struct blocked {
    mic_txn *t;
    uint32_t gid;
    const char *reason;  /* filter, or NULL */
    int limit, n;
    int64_t now;
    struct mic_buf *out;
    int rc;
};

static int blocked_one(void *arg, const uint8_t akey[MIC_AKEY_LEN], const struct mic_ags *a)
{
    struct blocked *b = arg;
    struct mic_agg_rec ag;
    struct mic_dlv d;
    const char *why = NULL;
    uint64_t head = a->active;

    if (a->missing) {
        struct mic_aq first;
        why = "gap";
        if (mic_store_aq_first(b->t, b->gid, akey, &first) == MIC_OK)
            head = first.seq;
    } else if (a->active && mic_store_dlv_get(b->t, b->gid, a->active, &d) == MIC_OK) {
        if (d.state == MIC_DLV_PROCESSING)
            why = "lease";
        else if (d.state == MIC_DLV_PENDING && d.not_before)
            why = "retry";
        else if (d.state == MIC_DLV_DLQ)
            why = "dlq";
    }
    if (!why || (a->waiting < 2 && strcmp(why, "gap") && strcmp(why, "dlq")))
        return 0;
    if (b->reason && strcmp(b->reason, why))
        return 0;
    if ((b->rc = mic_store_agg_get(b->t, akey, &ag)))
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
                   (double)(b->now - a->since) / 1e6,
                   (unsigned long long)(a->waiting ? a->waiting - 1 : 0));
    if (a->missing)
        mic_buf_printf(b->out, ",\"missing_version\":%llu", (unsigned long long)a->missing);
    mic_buf_add(b->out, "}", 1);
    return b->n >= b->limit;
}

int mic_order_blocked(mic_store *s, const char *group, const char *reason,
                      const char *limit, struct mic_buf *out,
                      struct mic_error *err)
{
    struct blocked b;
    long lim;
    mic_txn *t;
    int rc;

    if (reason && strcmp(reason, "lease") && strcmp(reason, "retry") &&
        strcmp(reason, "gap") && strcmp(reason, "dlq"))
        return mic_error_set(err, MIC_EINVAL, "invalid_request", "reason",
                             "reason is lease, retry, gap or dlq");
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
        rc = mic_store_ags_each(t, b.gid, NULL, blocked_one, &b);
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
    if ((v->rc = mic_group_deliveries_json(v->t, seq, v->out)))
        return 1;
    mic_buf_puts(v->out, "]}");
    return 0;
}

int mic_order_aggregate(mic_store *s, const char *type, const char *id,
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
        return mic_error_set(err, rc, "internal", NULL, "%s", mic_strerror(rc));
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
        return mic_error_set(err, rc, "internal", NULL, "%s", mic_strerror(rc));
    return MIC_OK;
}

/* ---- The oldest unhandled deliveries ---- */

/* Append why delivery 'seq' (state 'd', event 'r') waits in group 'gid'. */
static void why(mic_txn *t, uint32_t gid, uint64_t seq, const struct mic_dlv *d,
                const struct mic_rec *r, struct mic_buf *out)
{
    struct mic_ags a;
    struct mic_aq first;

    if (d->state == MIC_DLV_PROCESSING) {
        mic_buf_puts(out, ",\"reason\":\"leased\",\"worker\":");
        mic_buf_json_str(out, d->worker, d->worker_len);
        mic_buf_puts(out, ",\"lease_expires_at\":");
        mic_buf_json_time(out, d->lease_expires);
        return;
    }
    if (d->not_before) {
        mic_buf_puts(out, ",\"reason\":\"retry\",\"not_before\":");
        mic_buf_json_time(out, d->not_before);
        mic_buf_puts(out, ",\"last_error\":");
        mic_buf_json_str(out, d->last_error, d->error_len);
        return;
    }
    if (d->queued && r->has_agg && mic_store_ags_get(t, gid, r->akey, &a) == MIC_OK) {
        int is_first = mic_store_aq_first(t, gid, r->akey, &first) == MIC_OK && first.seq == seq;
        if (a.missing && is_first) {
            mic_buf_printf(out, ",\"reason\":\"gap\",\"missing_version\":%llu",
                           (unsigned long long)a.missing);
            return;
        }
        mic_buf_printf(out, ",\"reason\":\"behind_head\",\"head_seq\":%llu",
                       (unsigned long long)(a.active ? a.active : first.seq));
        return;
    }
    mic_buf_puts(out, ",\"reason\":\"ready\"");
}

int mic_order_oldest(mic_store *s, const char *group, const char *limit,
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
        rc = mic_store_oldest_page(t, gid, seqs, (int)lim, &n);
    if (rc == MIC_OK) {
        mic_buf_puts(out, "{\"group\":");
        mic_buf_json_str(out, group, strlen(group));
        mic_buf_puts(out, ",\"oldest_unhandled_age_s\":");
        mic_buf_puts(out, n ? "" : "null");
        for (int i = 0; i < n && rc == MIC_OK; i++) {
            struct mic_dlv d;
            struct mic_rec r;
            const char *id, *q;
            if ((rc = mic_store_dlv_get(t, gid, seqs[i], &d)) ||
                (rc = mic_store_log_get(t, seqs[i], &r)))
                break;
            if (i == 0)
                mic_buf_printf(out, "%.3f,\"deliveries\":[", (double)(now - r.created_at_us) / 1e6);
            id = r.json + 13;
            q = memchr(id, '"', r.json_len - 13);
            mic_buf_printf(out, "%s{\"seq\":%llu,\"event_id\":", i ? "," : "",
                           (unsigned long long)seqs[i]);
            mic_buf_json_str(out, id, q ? (size_t)(q - id) : 0);
            mic_buf_puts(out, ",\"created_at\":");
            mic_buf_json_time(out, r.created_at_us);
            mic_buf_printf(out, ",\"age_s\":%.3f,\"state\":\"%s\",\"attempts\":%u",
                           (double)(now - r.created_at_us) / 1e6, mic_dlv_state_name(d.state),
                           d.attempts);
            why(t, gid, seqs[i], &d, &r, out);
            mic_buf_add(out, "}", 1);
        }
        mic_buf_puts(out, n ? "]}" : ",\"deliveries\":[]}");
    }
    return mic_group_read_end(t, rc, group, err);
}
