/* delivery.c - the delivery engine (delivery.h; DESIGN sections 2, 3, 8, 12).
 *
 * DESIGN.  Every change of a delivery goes through dput(), which also moves
 * the group's figures (in memory, struct mic_delivery_fig) and the
 * unhandled and poison indexes; so no transition can forget them.  The
 * invariants kept in every transaction, so that each step is a seek:
 *   PENDING, not_before == 0, not queued  <=>  in the ready set
 *   PENDING, not_before  > 0, not queued  <=>  a RETRY timer at not_before
 *   PROCESSING                            <=>  a LEASE timer at lease_expires
 *   DLQ                                   <=>  in the group's DLQ index
 *   non-terminal                          <=>  in the unhandled index
 *   DLQ, or failed once and non-terminal  <=>  in the poison index
 * A timer whose delivery moved on is dropped when it comes due.
 *
 * Ordered groups (DESIGN section 3).  A delivery of an event that has an
 * aggregate sits in its aggregate's queue, aq (gid, ordinal, k1, seq), k1
 * being the version or the created_at; only the head -- ags.active -- is in
 * the ready set, has a timer or a lease.  The others are "queued": PENDING
 * and in no other index (this is derived, not stored).  The ordinal is the
 * aggregate's number in publish order, so the aggregates one batch settles
 * share the leaves of aq and ags.  advance() is the one place that picks a
 * head:
 *   - a head already handed out (leased, retrying, dead-lettered under
 *     dlq_policy hold, or requeued after a claim) keeps its place, even if
 *     an older event arrived late;
 *   - a head never handed out gives way to an event that sorts before it;
 *   - a versioned head may go only if every version from the aggregate's
 *     baseline up to its own is stored or skipped (the aggregate's contig
 *     watermark); otherwise the aggregate parks on the first missing one.
 * A versioned aggregate's released entries are not deleted one by one: the
 * state's 'pos' moves over them (they are all at the front of the queue,
 * since no version can arrive below a released one), and they are purged
 * together when the queue empties -- so an ack writes no queue page.  The
 * one exception, a dead letter released under dlq_policy release and then
 * requeued, purges them first.  Unversioned aggregates delete on release.
 *
 * Blocked aggregates (GET .../blocked, the figure) are not flagged in the
 * store: whether an aggregate is blocked is computed from its state and its
 * head before and after each change (agg_load / agg_store), and only the
 * count moves.
 *
 * A replay run's deliveries carry their rank in the run's selection
 * ((created_at, event_id) order): the ready set hands them out by rank
 * instead of (priority, seq), so a run goes in selection order across
 * aggregates (DESIGN section 5).
 *
 * Lease tokens are 128 random bits.  A token that does not match the
 * delivery's last one (or whose lease a nack ended: the nack clears the
 * stored token) answers lease_lost, or not_found when the delivery
 * was never leased in this group (a token of a deleted group whose name was
 * reused); the group's identity is the gid the delivery is stored under. */
#define _DEFAULT_SOURCE
#include "delivery.h"

#include "eventlog.h"

#include "core/clock.h"
#include "core/err.h"
#include "group.h"
#include "store/catalog.h"

#include <math.h>
#include <openssl/rand.h>
#include <stdlib.h>
#include <string.h>

static const char *const status_names[] = {
    "", "acked", "retrying", "dead_lettered", "extended", "lease_lost",
    "not_found", "requeued", "skipped", "not_in_dlq",
};

const char *mic_delivery_status_name(int status)
{
    return status > 0 && status <= MIC_DS_NOT_IN_DLQ ? status_names[status] : "";
}

/* ---- Engine state and figures ---- */

struct fig {
    uint32_t gid;
    uint8_t dirty;
    uint64_t c[MIC_GSTAT_N];
};

struct mic_delivery {
    struct fig *figs;   /* the groups touched since the last reset */
    int nfigs, cap;
    int last;           /* index of the last one used */
    uint64_t rng;       /* the backoff jitter's xorshift state */
};

int mic_delivery_new(mic_delivery **out)
{
    mic_delivery *e = calloc(1, sizeof *e);

    if (!e)
        return MIC_ENOMEM;
    *out = e;
    return MIC_OK;
}

void mic_delivery_free(mic_delivery *e)
{
    if (!e)
        return;
    free(e->figs);
    free(e);
}

void mic_delivery_reset(mic_delivery *e)
{
    e->nfigs = 0;
    e->last = 0;
}

/* The figures of group 'gid', loaded from the store at the first use
 * since the last reset. */
static int fig_of(struct mic_wctx *w, uint32_t gid, struct fig **out)
{
    mic_delivery *e = w->engine;
    struct fig *f;
    int rc;

    if (e->last < e->nfigs && e->figs[e->last].gid == gid) {
        *out = &e->figs[e->last];
        return MIC_OK;
    }
    for (int i = 0; i < e->nfigs; i++)
        if (e->figs[i].gid == gid) {
            e->last = i;
            *out = &e->figs[i];
            return MIC_OK;
        }
    if (e->nfigs == e->cap) {
        int cap = e->cap ? e->cap * 2 : 16;
        struct fig *p = realloc(e->figs, (size_t)cap * sizeof *p);
        if (!p)
            return MIC_ENOMEM;
        e->figs = p;
        e->cap = cap;
    }
    f = &e->figs[e->nfigs];
    memset(f, 0, sizeof *f);
    f->gid = gid;
    if ((rc = mic_store_gstat_get(w->txn, gid, f->c)))
        return rc;
    e->last = e->nfigs++;
    *out = f;
    return MIC_OK;
}

static void fig_add(struct fig *f, int field, int64_t delta)
{
    int64_t n = (int64_t)f->c[field] + delta;

    f->c[field] = n < 0 ? 0 : (uint64_t)n;
    f->dirty = 1;
}

int mic_delivery_flush(struct mic_wctx *w)
{
    mic_delivery *e = w->engine;
    int rc;

    for (int i = 0; i < e->nfigs; i++) {
        struct fig *f = &e->figs[i];
        if (!f->dirty)
            continue;
        f->dirty = 0;
        if (!w->groups || !mic_groups_by_gid(w->groups, f->gid))
            continue; /* deleted in this batch: its keys go with it */
        if ((rc = mic_store_gstat_put(w->txn, f->gid, f->c)))
            return rc;
    }
    return MIC_OK;
}

static int nonterminal(const struct mic_dlv *d)
{
    return d && (d->state == MIC_DLV_PENDING || d->state == MIC_DLV_PROCESSING);
}

/* Dead-lettered, or failed at least once and not terminal. */
static int poisoned(const struct mic_dlv *d)
{
    return d && (d->state == MIC_DLV_DLQ ||
                 (d->state == MIC_DLV_PENDING && d->attempts >= 1) ||
                 (d->state == MIC_DLV_PROCESSING && d->attempts > 1));
}

static int gauge_of(int state)
{
    switch (state) {
    case MIC_DLV_PENDING: return MIC_GSTAT_PENDING;
    case MIC_DLV_PROCESSING: return MIC_GSTAT_PROCESSING;
    case MIC_DLV_DLQ: return MIC_GSTAT_DLQ;
    }
    return -1;
}

/* Delivery 'seq' goes from 'old' to 'd' (either NULL: created, removed):
 * the figures, the unhandled and poison indexes, then the record. */
static int dput(struct mic_wctx *w, struct mic_group *gr, uint64_t seq,
                const struct mic_dlv *old, const struct mic_dlv *d)
{
    int os = old ? old->state : 0, ns = d ? d->state : 0, rc;
    int64_t at = d ? d->created_at : old->created_at;
    uint32_t gid = mic_group_id(gr);
    struct fig *f;

    if ((rc = fig_of(w, gid, &f)))
        return rc;
    if (os != ns) {
        if (gauge_of(os) >= 0)
            fig_add(f, gauge_of(os), -1);
        if (gauge_of(ns) >= 0)
            fig_add(f, gauge_of(ns), 1);
        if (ns == MIC_DLV_DISPATCHED)
            fig_add(f, MIC_GSTAT_DISPATCHED, 1);
        if (ns == MIC_DLV_SKIPPED)
            fig_add(f, MIC_GSTAT_SKIPPED, 1);
    }
    if (d && d->attempts > 1 && d->attempts > (old ? old->attempts : 0))
        fig_add(f, MIC_GSTAT_REDELIVERIES, 1);
    if (nonterminal(old) != nonterminal(d) &&
        (rc = mic_store_unh_set(w->txn, gid, at, seq, nonterminal(d))))
        return rc;
    if (poisoned(old) != poisoned(d) &&
        (rc = mic_store_poison_set(w->txn, gid, at, seq, poisoned(d))))
        return rc;
    return d ? mic_store_dlv_put(w->txn, gid, seq, d)
             : mic_store_dlv_del(w->txn, gid, seq);
}

/* ---- Helpers ---- */

static uint64_t rng(mic_delivery *e)
{
    uint64_t x = e->rng;

    if (!x && RAND_bytes((unsigned char *)&x, sizeof x) != 1)
        x = (uint64_t)mic_now_us();
    x |= 1;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return e->rng = x;
}

/* Full-jitter exponential backoff before attempt 'attempts' + 1, in µs. */
static int64_t backoff_us(mic_delivery *e, const struct mic_group_cfg *c, uint32_t attempts)
{
    double cap = (double)c->backoff_initial_ms *
                 pow(c->backoff_multiplier, attempts > 0 ? attempts - 1 : 0);
    uint64_t ms;

    if (cap > (double)c->backoff_max_ms)
        cap = (double)c->backoff_max_ms;
    ms = (uint64_t)cap;
    return ms ? (int64_t)(rng(e) % (ms * 1000 + 1)) : 0;
}

static void set_error(struct mic_dlv *d, const char *e, size_t n)
{
    if (n > MIC_ERROR_MAX) {
        n = MIC_ERROR_MAX;
        while (n > 0 && ((unsigned char)e[n] & 0xC0) == 0x80)
            n--; /* cut on a UTF-8 character boundary */
    }
    if (n)
        memcpy(d->last_error, e, n);
    d->last_error[n] = 0;
    d->error_len = (uint16_t)n;
}

static int ordered(const struct mic_group *gr, const struct mic_dlv *d)
{
    return mic_group_config(gr)->ordered && d->ord;
}

/* Take 'd' (PENDING or PROCESSING, not queued) out of its ready entry or
 * timer. */
static int detach(struct mic_wctx *w, uint32_t gid, uint64_t seq, const struct mic_dlv *d)
{
    int rc;

    if (d->state == MIC_DLV_PROCESSING)
        return mic_store_timer_del(w->txn, d->lease_expires, gid, seq);
    if (d->state == MIC_DLV_PENDING && d->not_before)
        return mic_store_timer_del(w->txn, d->not_before, gid, seq);
    if (d->state == MIC_DLV_PENDING) {
        rc = mic_store_ready_del(w->txn, gid, d->rank ? 0 : d->priority, d->rank, seq);
        return rc == MIC_ENOTFOUND ? MIC_OK : rc;
    }
    return MIC_OK;
}

/* PENDING 'd' (not queued) waits in the ready set or for its timer. */
static int attach(struct mic_wctx *w, uint32_t gid, uint64_t seq, const struct mic_dlv *d)
{
    if (d->not_before)
        return mic_store_timer_put(w->txn, d->not_before, gid, seq, MIC_TIMER_RETRY);
    mic_wctx_wake(w, gid);
    return mic_store_ready_put(w->txn, gid, d->rank ? 0 : d->priority, d->rank, seq);
}

/* ---- Ordered groups: an aggregate's state across one change ---- */

struct agg {
    uint64_t ord;
    struct mic_ags a, orig;
    int found;
    int was_blocked;
    uint64_t head_seq;      /* advance() picked this head ... */
    struct mic_dlv head;    /* ... whose record is this (0: none) */
    uint64_t next_k1, next_seq; /* leave(): the entry after the released one */
    int next_known;         /* 1: next_* is the first entry after pos (0 seq: none) */
};

/* Is the aggregate blocked by its head (as GET .../blocked lists it)?  The
 * head's record is 'known' when its seq is 'kseq', else read. */
static int blocked_now(struct mic_wctx *w, const struct mic_group *gr, const struct mic_ags *a,
                       uint64_t kseq, const struct mic_dlv *known, int *b)
{
    struct mic_dlv d;
    const struct mic_dlv *h = NULL;
    int rc;

    *b = 0;
    if (a->missing) {
        *b = 1;
        return MIC_OK;
    }
    if (!a->active)
        return MIC_OK;
    if (known && kseq == a->active) {
        h = known;
    } else {
        rc = mic_store_dlv_get(w->txn, mic_group_id(gr), a->active, &d);
        if (rc == MIC_ENOTFOUND)
            return MIC_OK;
        if (rc)
            return rc;
        h = &d;
    }
    if (h->state == MIC_DLV_DLQ)
        *b = 1;
    else if (h->state == MIC_DLV_PROCESSING || (h->state == MIC_DLV_PENDING && h->not_before))
        *b = a->waiting >= 2;
    return MIC_OK;
}

static int agg_load(struct mic_wctx *w, const struct mic_group *gr, uint64_t ord,
                    const uint8_t *akey, uint64_t kseq, const struct mic_dlv *known,
                    struct agg *g)
{
    int rc = mic_store_ags_get(w->txn, mic_group_id(gr), ord, &g->a);

    g->ord = ord;
    g->was_blocked = 0;
    g->head_seq = 0;
    g->next_known = 0;
    g->found = rc == MIC_OK;
    if (rc == MIC_ENOTFOUND) {
        memset(&g->a, 0, sizeof g->a);
        if (akey)
            memcpy(g->a.akey, akey, MIC_AKEY_LEN);
        g->orig = g->a;
        return MIC_OK;
    }
    if (rc)
        return rc;
    g->orig = g->a;
    return blocked_now(w, gr, &g->a, kseq, known, &g->was_blocked);
}

/* Write the aggregate's state back (or remove it with the released entries
 * still in its queue, once nothing waits), moving the blocked and
 * gap-parked counts by what changed. */
static int agg_store(struct mic_wctx *w, struct mic_group *gr, struct agg *g,
                     uint64_t kseq, const struct mic_dlv *known)
{
    int now = 0, rc;
    int gone = g->a.waiting == 0;
    struct fig *f;

    if (g->head_seq && g->head_seq == g->a.active && kseq != g->head_seq) {
        kseq = g->head_seq; /* the head advance() just picked: no read */
        known = &g->head;
    }
    if (!gone && (rc = blocked_now(w, gr, &g->a, kseq, known, &now)))
        return rc;
    if ((rc = fig_of(w, mic_group_id(gr), &f)))
        return rc;
    if (now != g->was_blocked)
        fig_add(f, MIC_GSTAT_BLOCKED, now ? 1 : -1);
    if ((!gone && g->a.missing) != (g->found && g->orig.missing != 0))
        fig_add(f, MIC_GSTAT_GAP_PARKED, !gone && g->a.missing ? 1 : -1);
    if (gone) {
        if (!g->found)
            return MIC_OK;
        if (g->a.pos && (rc = mic_store_aq_purge(w->txn, mic_group_id(gr), g->ord, g->a.pos, NULL)))
            return rc;
        return mic_store_ags_del(w->txn, mic_group_id(gr), g->ord);
    }
    if (g->found && !memcmp(&g->a, &g->orig, sizeof g->a))
        return MIC_OK;
    return mic_store_ags_put(w->txn, mic_group_id(gr), g->ord, &g->a);
}

/* Make the first unreleased entry of the aggregate's queue its head, if it
 * may be (see the header comment). */
static int advance(struct mic_wctx *w, const struct mic_group *gr, struct agg *g)
{
    struct mic_agg_rec ag;
    struct mic_dlv d;
    uint64_t k1, seq;
    int rc;

    /* While older events are still being added, an event's predecessors
     * may not be in the queue yet: no head is picked before that is done. */
    if (mic_group_backfilling(gr))
        return MIC_OK;
    if (g->next_known) {
        g->next_known = 0; /* leave() already read the next entry */
        if (!g->next_seq)
            return MIC_OK;
        k1 = g->next_k1;
        seq = g->next_seq;
    } else {
        rc = mic_store_aq_first(w->txn, mic_group_id(gr), g->ord, g->a.pos, &k1, &seq);
        if (rc == MIC_ENOTFOUND)
            return MIC_OK;
        if (rc)
            return rc;
    }
    if (g->a.active == seq)
        return MIC_OK;
    if (g->a.active) {
        rc = mic_store_dlv_get(w->txn, mic_group_id(gr), g->a.active, &d);
        if (rc && rc != MIC_ENOTFOUND)
            return rc;
        if (rc == MIC_OK) {
            if (d.state == MIC_DLV_PROCESSING || d.state == MIC_DLV_DLQ || d.handed)
                return MIC_OK; /* handed out (even if requeued since): it keeps the head */
            /* Never handed out: an older event goes first. */
            if (d.state == MIC_DLV_PENDING && (rc = detach(w, mic_group_id(gr), g->a.active, &d)))
                return rc;
        }
        g->a.active = 0;
    }
    if ((rc = mic_store_agg_get(w->txn, g->a.akey, &ag)))
        return rc;
    if (ag.versioned && k1 > ag.contig + 1) {
        if (g->a.missing != ag.contig + 1) {
            g->a.missing = ag.contig + 1;
            g->a.since = w->now_us;
        }
        return MIC_OK;
    }
    if ((rc = mic_store_dlv_get(w->txn, mic_group_id(gr), seq, &d)))
        return rc;
    if (d.state == MIC_DLV_PENDING && (rc = attach(w, mic_group_id(gr), seq, &d)))
        return rc;
    g->head_seq = seq;
    g->head = d;
    g->a.active = seq;
    g->a.missing = 0;
    g->a.since = w->now_us;
    return MIC_OK;
}

/* Put delivery 'seq' (state 'd') in its aggregate's queue. */
static int join(struct mic_wctx *w, struct mic_group *gr, uint64_t seq,
                const struct mic_dlv *d, const uint8_t *akey)
{
    struct agg g;
    int rc;

    if ((rc = agg_load(w, gr, d->ord, akey, 0, NULL, &g)))
        return rc;
    if (d->versioned && g.a.pos && d->k1 <= g.a.pos) {
        /* A released dead letter comes back: drop the released entries
         * first, so that 'pos' can start again from the front. */
        if ((rc = mic_store_aq_purge(w->txn, mic_group_id(gr), d->ord, g.a.pos, NULL)))
            return rc;
        g.a.pos = 0;
    }
    if ((rc = mic_store_aq_put(w->txn, mic_group_id(gr), d->ord, d->k1, seq)))
        return rc;
    g.a.waiting++;
    if ((rc = advance(w, gr, &g)))
        return rc;
    return agg_store(w, gr, &g, 0, NULL);
}

/* Delivery 'seq' (now 'd', terminal) leaves its aggregate's queue; 'g' was
 * loaded before its state changed.  Then the next head is picked. */
static int leave(struct mic_wctx *w, struct mic_group *gr, uint64_t seq,
                 const struct mic_dlv *d, struct agg *g)
{
    uint64_t k1, first;
    int rc;

    if (!g->found)
        return MIC_OK;
    if (d->versioned && d->k1 <= g->a.pos)
        return agg_store(w, gr, g, seq, d); /* released before (a dead letter) */
    rc = MIC_ENOTFOUND;
    if (d->versioned) {
        uint64_t k[2], sq[2];
        int n;
        rc = mic_store_aq_first2(w->txn, mic_group_id(gr), g->ord, g->a.pos, k, sq, &n);
        if (rc == MIC_OK) {
            k1 = k[0];
            first = sq[0];
            /* What advance() will seek next, after the new position. */
            g->next_known = first == seq;
            g->next_k1 = n > 1 ? k[1] : 0;
            g->next_seq = n > 1 ? sq[1] : 0;
        }
    }
    if (rc && rc != MIC_ENOTFOUND)
        return rc;
    if (rc == MIC_OK && first == seq) {
        g->a.pos = k1; /* released at the front: left for the purge */
    } else {
        rc = mic_store_aq_del(w->txn, mic_group_id(gr), g->ord, d->k1, seq);
        if (rc == MIC_ENOTFOUND)
            return agg_store(w, gr, g, seq, d); /* not queued (released before) */
        if (rc)
            return rc;
    }
    if (g->a.waiting)
        g->a.waiting--;
    if (g->a.active == seq)
        g->a.active = 0;
    if (g->a.waiting && (rc = advance(w, gr, g)))
        return rc;
    return agg_store(w, gr, g, seq, d);
}

/* A head's own state changed ('old' -> 'd'); its aggregate's queue did
 * not: only the blocked count may move. */
static int refresh(struct mic_wctx *w, struct mic_group *gr, uint64_t seq,
                   const struct mic_dlv *old, const struct mic_dlv *d)
{
    struct agg g;
    int rc;

    if (!ordered(gr, d))
        return MIC_OK;
    if ((rc = agg_load(w, gr, d->ord, NULL, seq, old, &g)))
        return rc;
    if (!g.found)
        return MIC_OK;
    return agg_store(w, gr, &g, seq, d);
}

/* ---- Add ---- */

int mic_delivery_add(struct mic_wctx *w, struct mic_group *gr, const struct mic_rec *r)
{
    struct mic_dlv d;
    int rc;

    memset(&d, 0, sizeof d);
    d.state = MIC_DLV_PENDING;
    d.priority = r->priority;
    d.created_at = r->created_at_us;
    d.not_before = r->deliver_at_us > w->now_us ? r->deliver_at_us : 0;
    d.rank = r->rank;
    if (mic_group_config(gr)->ordered && r->has_agg) {
        d.ord = r->ordinal;
        if (!d.ord) {
            struct mic_agg_rec ag;
            if ((rc = mic_store_agg_get(w->txn, r->akey, &ag)))
                return rc == MIC_ENOTFOUND ? MIC_EIO : rc;
            d.ord = ag.ordinal;
        }
        if (!d.ord)
            return MIC_EIO;
        d.versioned = r->has_version;
        d.k1 = r->has_version ? r->version : (uint64_t)r->created_at_us;
        if ((rc = dput(w, gr, r->seq, NULL, &d)))
            return rc;
        return join(w, gr, r->seq, &d, r->akey);
    }
    if ((rc = dput(w, gr, r->seq, NULL, &d)))
        return rc;
    return attach(w, mic_group_id(gr), r->seq, &d);
}

int mic_delivery_fanout(struct mic_wctx *w, const char *topic, size_t tlen,
                        const struct mic_rec *r)
{
    struct mic_group *const *v;
    int n, rc;

    if (!w->groups)
        return MIC_OK;
    if ((rc = mic_groups_subscribers(w->groups, topic, tlen, &v, &n)))
        return rc;
    for (int i = 0; i < n; i++)
        if (mic_group_takes(v[i], r) && (rc = mic_delivery_add(w, v[i], r)))
            return rc;
    return MIC_OK;
}

/* ---- Grant ---- */

int mic_delivery_grant(struct mic_wctx *w, struct mic_group *gr, int max, int64_t ttl_us,
                       const char *worker, size_t wlen, uint64_t *seqs,
                       uint32_t *attempts, uint8_t (*tokens)[MIC_TOKEN_LEN], int *n)
{
    int got, rc;

    *n = 0;
    if (mic_group_held(gr))
        return MIC_OK; /* a replay run not yet all in order */
    if (wlen > MIC_WORKER_MAX)
        wlen = MIC_WORKER_MAX;
    if ((rc = mic_store_ready_pop(w->txn, mic_group_id(gr), seqs, max, &got)))
        return rc;
    if (got && RAND_bytes(tokens[0], got * MIC_TOKEN_LEN) != 1)
        return MIC_EIO;
    for (int i = 0; i < got; i++) {
        struct mic_dlv d, old;

        if ((rc = mic_store_dlv_get(w->txn, mic_group_id(gr), seqs[i], &d)))
            return rc == MIC_ENOTFOUND ? MIC_EIO : rc;
        old = d;
        d.state = MIC_DLV_PROCESSING;
        d.attempts++;
        d.handed = 1;
        d.not_before = 0;
        d.lease_expires = w->now_us + ttl_us;
        memcpy(d.token, tokens[i], MIC_TOKEN_LEN);
        memcpy(d.worker, worker, wlen);
        d.worker[wlen] = 0;
        d.worker_len = (uint8_t)wlen;
        if ((rc = dput(w, gr, seqs[i], &old, &d)) ||
            (rc = mic_store_timer_put(w->txn, d.lease_expires, mic_group_id(gr), seqs[i],
                                      MIC_TIMER_LEASE)) ||
            (rc = refresh(w, gr, seqs[i], &old, &d)))
            return rc;
        attempts[i] = d.attempts;
    }
    *n = got;
    return MIC_OK;
}

/* ---- Settle ---- */

/* A nack ends its lease for good: the stored token is cleared (all zero),
 * which no presented token matches (holds). */
static const uint8_t no_token[MIC_TOKEN_LEN];

/* The token matches a lease that still counts: PROCESSING, or expired back
 * to PENDING and not claimed again since (nor nacked: a nack clears it). */
static int holds(const struct mic_dlv *d, const uint8_t *token)
{
    return memcmp(d->token, token, MIC_TOKEN_LEN) == 0 &&
           memcmp(d->token, no_token, MIC_TOKEN_LEN) != 0 && d->attempts > 0 &&
           (d->state == MIC_DLV_PROCESSING || d->state == MIC_DLV_PENDING);
}

/* Read delivery 'seq' for a settle with 'token': MIC_OK with *status NONE
 * when the lease holds, else *status says why not. */
static int lookup(struct mic_wctx *w, struct mic_group *gr, uint64_t seq,
                  const uint8_t *token, struct mic_dlv *d, int *status)
{
    int rc;

    *status = MIC_DS_NOTFOUND;
    if (!token)
        return MIC_OK;
    rc = mic_store_dlv_get(w->txn, mic_group_id(gr), seq, d);
    if (rc == MIC_ENOTFOUND)
        return MIC_OK;
    if (rc)
        return rc;
    if (d->attempts == 0 && !d->handed)
        return MIC_OK; /* never leased in this group */
    *status = holds(d, token) ? MIC_DS_NONE : MIC_DS_LOST;
    return MIC_OK;
}

/* A terminal change of 'seq' from 'old' to 'd' in an ordered group or not:
 * write it and release its aggregate's queue. */
static int finish(struct mic_wctx *w, struct mic_group *gr, uint64_t seq,
                  const struct mic_dlv *old, const struct mic_dlv *d, int keep_head)
{
    struct agg g;
    int rc;

    if (!ordered(gr, d))
        return dput(w, gr, seq, old, d);
    if ((rc = agg_load(w, gr, d->ord, NULL, seq, old, &g)) ||
        (rc = dput(w, gr, seq, old, d)))
        return rc;
    if (keep_head)
        return g.found ? agg_store(w, gr, &g, seq, d) : MIC_OK;
    return leave(w, gr, seq, d, &g);
}

int mic_delivery_ack(struct mic_wctx *w, struct mic_group *gr, uint64_t seq,
                     const uint8_t *token, int *status)
{
    struct mic_dlv d, old;
    int rc;

    if ((rc = lookup(w, gr, seq, token, &d, status)))
        return rc;
    if (*status == MIC_DS_LOST && d.state == MIC_DLV_DISPATCHED &&
        !memcmp(d.token, token, MIC_TOKEN_LEN)) {
        *status = MIC_DS_ACKED; /* acked twice: same answer */
        return MIC_OK;
    }
    if (*status != MIC_DS_NONE)
        return MIC_OK;
    if ((rc = detach(w, mic_group_id(gr), seq, &d)))
        return rc;
    old = d;
    d.state = MIC_DLV_DISPATCHED;
    d.terminal_at = w->now_us;
    d.not_before = d.lease_expires = 0;
    *status = MIC_DS_ACKED;
    return finish(w, gr, seq, &old, &d, 0);
}

/* 'd' (its timer or ready entry already detached) failed an attempt: back
 * to PENDING after a backoff, or to the DLQ.  retry_us < 0: the group's
 * backoff. */
static int fail(struct mic_wctx *w, struct mic_group *gr, uint64_t seq,
                const struct mic_dlv *old, struct mic_dlv *d, int64_t retry_us, int final,
                int *dead)
{
    int rc;

    *dead = final || d->attempts >= mic_group_config(gr)->max_attempts;
    d->lease_expires = 0;
    if (*dead) {
        d->state = MIC_DLV_DLQ;
        d->not_before = 0;
        d->terminal_at = w->now_us;
        if ((rc = mic_store_dlq_put(w->txn, mic_group_id(gr), seq)))
            return rc;
        /* Under dlq_policy hold the dead letter keeps its aggregate's head. */
        return finish(w, gr, seq, old, d, mic_group_config(gr)->dlq_hold);
    }
    if (retry_us < 0)
        retry_us = backoff_us(w->engine, mic_group_config(gr), d->attempts);
    d->state = MIC_DLV_PENDING;
    d->not_before = retry_us ? w->now_us + retry_us : 0;
    if ((rc = dput(w, gr, seq, old, d)) || (rc = attach(w, mic_group_id(gr), seq, d)))
        return rc;
    return refresh(w, gr, seq, old, d);
}

int mic_delivery_nack(struct mic_wctx *w, struct mic_group *gr, uint64_t seq,
                      const uint8_t *token, const char *error, size_t elen,
                      int64_t retry_us, int dead_letter, int *status, int64_t *t)
{
    struct mic_dlv d, old;
    int rc, dead;

    if ((rc = lookup(w, gr, seq, token, &d, status)) || *status != MIC_DS_NONE)
        return rc;
    if ((rc = detach(w, mic_group_id(gr), seq, &d)))
        return rc;
    old = d;
    set_error(&d, error ? error : "", error ? elen : 0);
    /* The worker gave the lease up: its token is dead from here on, for
     * extend, ack and nack alike (unlike a lease that ran out). */
    memset(d.token, 0, MIC_TOKEN_LEN);
    if ((rc = fail(w, gr, seq, &old, &d, retry_us, dead_letter, &dead)))
        return rc;
    *status = dead ? MIC_DS_DEAD : MIC_DS_RETRYING;
    *t = d.not_before ? d.not_before : w->now_us;
    return MIC_OK;
}

int mic_delivery_extend(struct mic_wctx *w, struct mic_group *gr, uint64_t seq,
                        const uint8_t *token, int64_t ttl_us, int *status, int64_t *t)
{
    struct mic_dlv d, old;
    int rc;

    if ((rc = lookup(w, gr, seq, token, &d, status)) || *status != MIC_DS_NONE)
        return rc;
    if ((rc = detach(w, mic_group_id(gr), seq, &d)))
        return rc;
    old = d;
    d.state = MIC_DLV_PROCESSING;
    d.not_before = 0;
    d.lease_expires = w->now_us + ttl_us;
    *status = MIC_DS_EXTENDED;
    *t = d.lease_expires;
    if ((rc = dput(w, gr, seq, &old, &d)) ||
        (rc = mic_store_timer_put(w->txn, d.lease_expires, mic_group_id(gr), seq, MIC_TIMER_LEASE)))
        return rc;
    return refresh(w, gr, seq, &old, &d);
}

/* ---- Dead letters ---- */

/* Take dead letter 'seq' out of the DLQ index into *d: MIC_OK with
 * *status NONE, or *status NOTFOUND / NOT_IN_DLQ (nothing changed). */
static int undead(struct mic_wctx *w, struct mic_group *gr, uint64_t seq, struct mic_dlv *d,
                  int *status)
{
    int rc = mic_store_dlv_get(w->txn, mic_group_id(gr), seq, d);

    *status = MIC_DS_NOTFOUND;
    if (rc == MIC_ENOTFOUND)
        return MIC_OK;
    if (rc)
        return rc;
    *status = MIC_DS_NOT_IN_DLQ;
    if (d->state != MIC_DLV_DLQ)
        return MIC_OK;
    *status = MIC_DS_NONE;
    return mic_store_dlq_del(w->txn, mic_group_id(gr), seq);
}

int mic_delivery_skip(struct mic_wctx *w, struct mic_group *gr, uint64_t seq, int *status)
{
    struct mic_dlv d, old;
    int rc;

    if ((rc = undead(w, gr, seq, &d, status)) || *status != MIC_DS_NONE)
        return rc;
    old = d;
    d.state = MIC_DLV_SKIPPED;
    d.terminal_at = w->now_us;
    *status = MIC_DS_SKIPPED;
    return finish(w, gr, seq, &old, &d, 0); /* releases a held aggregate */
}

int mic_delivery_requeue(struct mic_wctx *w, struct mic_group *gr, uint64_t seq, int *status)
{
    struct mic_dlv d, old;
    struct agg g;
    int rc, queued;

    if ((rc = undead(w, gr, seq, &d, status)) || *status != MIC_DS_NONE)
        return rc;
    old = d;
    d.state = MIC_DLV_PENDING;
    d.attempts = 0;
    d.not_before = 0;
    d.terminal_at = 0;
    *status = MIC_DS_REQUEUED;
    if (!ordered(gr, &d)) {
        if ((rc = dput(w, gr, seq, &old, &d)))
            return rc;
        return attach(w, mic_group_id(gr), seq, &d);
    }
    if ((rc = agg_load(w, gr, d.ord, NULL, seq, &old, &g)))
        return rc;
    /* Still in the queue (held under dlq_policy hold)? */
    rc = mic_store_aq_has(w->txn, mic_group_id(gr), d.ord, d.k1, seq);
    if (rc && rc != MIC_ENOTFOUND)
        return rc;
    queued = rc == MIC_OK && g.found && !(d.versioned && d.k1 <= g.a.pos);
    if ((rc = dput(w, gr, seq, &old, &d)))
        return rc;
    if (!queued) {
        struct mic_rec r;
        if (g.found)
            return join(w, gr, seq, &d, g.a.akey);
        /* The queue emptied since: the aggregate's key is in the log. */
        if ((rc = mic_store_log_get(w->txn, seq, &r)))
            return rc;
        return join(w, gr, seq, &d, r.akey);
    }
    if (g.a.active != seq) {
        if ((rc = advance(w, gr, &g)))
            return rc;
        return agg_store(w, gr, &g, seq, &d);
    }
    /* The held head: claimable again at once, before its successors and
     * before any event that arrived late in front of it. */
    if ((rc = attach(w, mic_group_id(gr), seq, &d)))
        return rc;
    return agg_store(w, gr, &g, seq, &d);
}

int mic_delivery_requeue_all(struct mic_wctx *w, struct mic_group *gr, uint64_t *n)
{
    uint64_t seqs[256];
    int got, rc, st;

    *n = 0;
    do {
        if ((rc = mic_store_dlq_page(w->txn, mic_group_id(gr), 0, seqs, 256, &got)))
            return rc;
        for (int i = 0; i < got; i++) {
            if ((rc = mic_delivery_requeue(w, gr, seqs[i], &st)))
                return rc;
            *n += st == MIC_DS_REQUEUED;
        }
    } while (got == 256);
    return MIC_OK;
}

/* ---- Deadlines ---- */

static int fire(struct mic_wctx *w, mic_groups *g, int64_t due, uint32_t gid,
                uint64_t seq, uint8_t kind)
{
    struct mic_group *gr = mic_groups_by_gid(g, gid);
    struct mic_dlv d, old;
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
    old = d;
    if (kind == MIC_TIMER_RETRY && d.state == MIC_DLV_PENDING && d.not_before == due) {
        d.not_before = 0;
        if ((rc = dput(w, gr, seq, &old, &d)) || (rc = attach(w, gid, seq, &d)))
            return rc;
        return refresh(w, gr, seq, &old, &d);
    }
    if (kind == MIC_TIMER_LEASE && d.state == MIC_DLV_PROCESSING && d.lease_expires == due) {
        static const char msg[] = "lease expired";
        set_error(&d, msg, sizeof msg - 1);
        return fail(w, gr, seq, &old, &d, -1, 0, &dead);
    }
    return MIC_OK;
}

int mic_delivery_fire_due(struct mic_wctx *w, mic_groups *g, int budget, int *more)
{
    int64_t due;
    uint32_t gid;
    uint64_t seq;
    uint8_t kind;
    int rc, n = 0;

    *more = 0;
    while ((rc = mic_store_timer_first(w->txn, &due, &gid, &seq, &kind)) == MIC_OK &&
           due <= w->now_us) {
        if (++n > budget) {
            *more = 1;
            return MIC_OK;
        }
        if ((rc = fire(w, g, due, gid, seq, kind)))
            return rc;
    }
    return rc == MIC_ENOTFOUND ? MIC_OK : rc;
}

int64_t mic_delivery_next_due(struct mic_wctx *w)
{
    int64_t due;
    uint32_t gid;
    uint64_t seq;
    uint8_t kind;

    return mic_store_timer_first(w->txn, &due, &gid, &seq, &kind) == MIC_OK ? due : 0;
}

/* ---- Heads after a backfill ---- */

struct collect {
    uint64_t *ords;
    int n, max;
};

static int collect_one(void *arg, uint64_t ord, const struct mic_ags *a)
{
    struct collect *c = arg;

    (void)a;
    c->ords[c->n++] = ord;
    return c->n == c->max;
}

int mic_delivery_release_heads(struct mic_wctx *w, struct mic_group *gr, int max,
                               uint64_t *cursor, int *done)
{
    struct collect c = {NULL, 0, max};
    int rc;

    *done = 0;
    if (!(c.ords = malloc((size_t)max * sizeof *c.ords)))
        return MIC_ENOMEM;
    rc = mic_store_ags_each(w->txn, mic_group_id(gr), *cursor, collect_one, &c);
    if (rc == 1)
        rc = MIC_OK;
    for (int i = 0; i < c.n && rc == MIC_OK; i++) {
        struct agg g;
        if ((rc = agg_load(w, gr, c.ords[i], NULL, 0, NULL, &g)) ||
            (rc = advance(w, gr, &g)) ||
            (rc = agg_store(w, gr, &g, 0, NULL)))
            break;
    }
    if (rc == MIC_OK && c.n)
        *cursor = c.ords[c.n - 1];
    *done = rc == MIC_OK && c.n < max;
    free(c.ords);
    return rc;
}

/* ---- Versions ---- */

int mic_delivery_version_stored(struct mic_wctx *w, mic_groups *g,
                                const uint8_t akey[MIC_AKEY_LEN], int *released)
{
    struct mic_agg_rec ag;
    uint64_t h, seq;
    int rc;

    if (released)
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
    if ((rc = mic_eventlog_watermark(w->txn, akey, &ag)))
        return rc;
    for (struct mic_group *gr = mic_groups_first(g); gr; gr = mic_groups_next(gr)) {
        struct agg s;
        if (!mic_group_config(gr)->ordered)
            continue;
        rc = mic_store_ags_get(w->txn, mic_group_id(gr), ag.ordinal, &s.a);
        if (rc == MIC_ENOTFOUND || (rc == MIC_OK && (!s.a.missing || s.a.missing > h)))
            continue;
        if (rc || (rc = agg_load(w, gr, ag.ordinal, NULL, 0, NULL, &s)) ||
            (rc = advance(w, gr, &s)) || (rc = agg_store(w, gr, &s, 0, NULL)))
            return rc;
        if (released)
            *released += s.a.active != 0;
    }
    return MIC_OK;
}

int mic_delivery_gap_skip(struct mic_wctx *w, mic_groups *g, const uint8_t akey[MIC_AKEY_LEN],
                          uint64_t v, int *outcome, uint64_t *stored_seq, int *released)
{
    struct mic_agg_rec ag;
    int rc = mic_store_agg_get(w->txn, akey, &ag);

    *released = 0;
    *outcome = MIC_GAP_NO_AGGREGATE;
    if (rc == MIC_ENOTFOUND)
        return MIC_OK;
    if (rc)
        return rc;
    *outcome = MIC_GAP_UNVERSIONED;
    if (!ag.versioned)
        return MIC_OK;
    *outcome = MIC_GAP_SKIPPED;
    if (mic_store_gapskip_get(w->txn, akey, v) == MIC_OK)
        return MIC_OK; /* skipped before: nothing more to release */
    rc = mic_store_aggidx_get_version(w->txn, akey, v, stored_seq);
    if (rc == MIC_OK) {
        *outcome = MIC_GAP_STORED;
        return MIC_OK;
    }
    if (rc != MIC_ENOTFOUND)
        return rc;
    if (v <= ag.baseline || v >= ag.max_version) {
        *outcome = MIC_GAP_OUT_OF_RANGE;
        return MIC_OK;
    }
    if ((rc = mic_store_gapskip_put(w->txn, akey, v)))
        return rc;
    return mic_delivery_version_stored(w, g, akey, released);
}

/* ---- Retention and removal ---- */

int mic_delivery_busy(struct mic_wctx *w, struct mic_group *gr, const struct mic_rec *r,
                      int *busy)
{
    struct mic_dlv d;
    int rc = mic_store_dlv_get(w->txn, mic_group_id(gr), r->seq, &d);

    *busy = rc == MIC_OK ? nonterminal(&d) : rc == MIC_ENOTFOUND && mic_group_fills(gr, r);
    return rc == MIC_ENOTFOUND ? MIC_OK : rc;
}

int mic_delivery_remove(struct mic_wctx *w, struct mic_group *gr, uint64_t seq)
{
    struct mic_dlv d;
    struct agg g;
    int rc = mic_store_dlv_get(w->txn, mic_group_id(gr), seq, &d);

    if (rc == MIC_ENOTFOUND)
        return MIC_OK;
    if (rc)
        return rc;
    if (d.state == MIC_DLV_DLQ && (rc = mic_store_dlq_del(w->txn, mic_group_id(gr), seq)))
        return rc;
    if (ordered(gr, &d)) {
        if ((rc = agg_load(w, gr, d.ord, NULL, seq, &d, &g)))
            return rc;
        if (g.found && !(d.versioned && d.k1 <= g.a.pos)) {
            /* Still queued (a dead letter held as its aggregate's head). */
            d.state = d.state == MIC_DLV_DLQ ? MIC_DLV_SKIPPED : d.state;
            if ((rc = leave(w, gr, seq, &d, &g)))
                return rc;
        } else {
            /* A released entry may still sit at the front of its queue. */
            rc = mic_store_aq_del(w->txn, mic_group_id(gr), d.ord, d.k1, seq);
            if (rc && rc != MIC_ENOTFOUND)
                return rc;
        }
        if ((rc = mic_store_dlv_get(w->txn, mic_group_id(gr), seq, &d)))
            return rc;
    }
    return dput(w, gr, seq, &d, NULL);
}

int mic_delivery_drop_step(struct mic_wctx *w, uint32_t gid, int budget, int *finished)
{
    return mic_store_drop_step(w->txn, gid, budget, finished);
}

/* ---- Read side ---- */

int mic_delivery_get(mic_txn *t, uint32_t gid, uint64_t seq, struct mic_dlv *d)
{
    return mic_store_dlv_get(t, gid, seq, d);
}

int mic_delivery_figures(mic_txn *t, uint32_t gid, uint64_t out[MIC_GSTAT_N])
{
    return mic_store_gstat_get(t, gid, out);
}

int mic_delivery_oldest(mic_txn *t, uint32_t gid, int poison, int64_t *created_at,
                        uint64_t *seq)
{
    return mic_store_oldest(t, gid, poison, created_at, seq);
}

int mic_delivery_oldest_page(mic_txn *t, uint32_t gid, uint64_t *seqs, int max, int *n)
{
    return mic_store_oldest_page(t, gid, seqs, max, n);
}

int mic_delivery_dlq_page(mic_txn *t, uint32_t gid, uint64_t after, uint64_t *seqs,
                          int max, int *n)
{
    return mic_store_dlq_page(t, gid, after, seqs, max, n);
}

int mic_delivery_agg(mic_txn *t, uint32_t gid, uint64_t ord, struct mic_ags *a,
                     uint64_t *first_seq)
{
    uint64_t k1;
    int rc = mic_store_ags_get(t, gid, ord, a);

    *first_seq = 0;
    if (rc)
        return rc;
    rc = mic_store_aq_first(t, gid, ord, a->pos, &k1, first_seq);
    return rc == MIC_ENOTFOUND ? MIC_OK : rc;
}

int mic_delivery_aggs_each(mic_txn *t, uint32_t gid,
                           int (*fn)(void *arg, uint64_t ord, const struct mic_ags *a),
                           void *arg)
{
    return mic_store_ags_each(t, gid, 0, fn, arg);
}

int mic_delivery_scheduled(const struct mic_dlv *d)
{
    return d->state == MIC_DLV_PENDING && d->not_before && d->attempts == 0;
}
