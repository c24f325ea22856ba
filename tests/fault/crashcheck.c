/* crashcheck.c - the crash cycles' checker: see crashcheck.h.
 *
 * How it works.  Every event id of the producers' log goes into a hash
 * table (open addressing).  The leases are sorted twice:
 *   - by (group, event, grant): each run of one event in one group gives
 *     delivered, duplicated, redeliveries, recovered, acked-then-redelivered
 *     and, where no aggregate check applies, two leases live at once on that
 *     delivery;
 *   - the ordered group's leases of events with an aggregate, by (aggregate,
 *     grant): order violations and two leases live at once on the aggregate.
 * Then every acknowledged event is looked for in each group and in the store
 * (lost, not terminal), and every stored event in the log (unexpected,
 * altered).  O(n log n) in the size of the log. */
#define _POSIX_C_SOURCE 200809L
#include "crashcheck.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define EXPLAIN_MAX 5   /* lines per kind of violation and group */

/* ---- Event id table ---- */

struct idtab {
    size_t cap;           /* power of two */
    int64_t *slot;        /* pub index + 1, 0 when free */
};

static uint64_t id_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;   /* FNV-1a */

    while (*s)
        h = (h ^ (unsigned char)*s++) * 1099511628211ull;
    return h;
}

static int idtab_init(struct idtab *t, const struct crashcheck_pub *pubs, size_t n)
{
    t->cap = 16;
    while (t->cap < 2 * n + 16)
        t->cap *= 2;
    if (!(t->slot = calloc(t->cap, sizeof *t->slot)))
        return -1;
    for (size_t i = 0; i < n; i++) {
        size_t k = id_hash(pubs[i].event_id) & (t->cap - 1);

        while (t->slot[k])
            k = (k + 1) & (t->cap - 1);
        t->slot[k] = (int64_t)i + 1;
    }
    return 0;
}

/* The index of the first pub with 'id', or -1. */
static int64_t idtab_find(const struct idtab *t, const struct crashcheck_pub *pubs, const char *id)
{
    size_t k = id_hash(id) & (t->cap - 1);

    while (t->slot[k]) {
        if (!strcmp(pubs[t->slot[k] - 1].event_id, id))
            return t->slot[k] - 1;
        k = (k + 1) & (t->cap - 1);
    }
    return -1;
}

/* ---- Sorting ---- */

struct ref {
    const struct crashcheck_lease *l;
    int64_t pub;          /* index into pubs, -1: nobody sent it */
    int agg;              /* the pub's aggregate, -1 none */
    int64_t order;
};

static int cmp_i64(int64_t a, int64_t b)
{
    return a < b ? -1 : a > b;
}

/* (group, pub, event id for unknown events, grant, token) */
static int by_delivery(const void *pa, const void *pb)
{
    const struct ref *a = pa, *b = pb;
    int c;

    if ((c = cmp_i64(a->l->group, b->l->group)) || (c = cmp_i64(a->pub, b->pub)))
        return c;
    if (a->pub < 0 && (c = strcmp(a->l->event_id, b->l->event_id)))
        return c;
    if ((c = cmp_i64(a->l->grant_us, b->l->grant_us)))
        return c;
    return strcmp(a->l->token, b->l->token);
}

/* (aggregate, grant, order, token) */
static int by_aggregate(const void *pa, const void *pb)
{
    const struct ref *a = pa, *b = pb;
    int c;

    if ((c = cmp_i64(a->agg, b->agg)) || (c = cmp_i64(a->l->grant_us, b->l->grant_us)) ||
        (c = cmp_i64(a->order, b->order)))
        return c;
    return strcmp(a->l->token, b->l->token);
}

/* The end of the interval in which a lease is certainly live. */
static int64_t live_end(const struct crashcheck_lease *l)
{
    int64_t end = l->expires_us;

    if (l->settle != CRASHCHECK_DROPPED && l->settle_send_us > 0 && l->settle_send_us < end)
        end = l->settle_send_us;
    return end;
}

/* ---- Explanations ---- */

enum { X_LOST, X_UNEXPECTED, X_ACKED_REDELIVERED, X_ORDER, X_DOUBLE, X_NOT_TERMINAL,
       X_STORE_UNEXPECTED, X_ALTERED, X_KINDS };

struct explain {
    FILE *f;
    int n[CRASHCHECK_GROUPS][X_KINDS];
};

static int explain_ok(struct explain *x, int group, int kind)
{
    return x->f && x->n[group][kind]++ < EXPLAIN_MAX;
}

static void lease_text(FILE *f, const char *what, const struct crashcheck_lease *l)
{
    fprintf(f, "  %s: seq %" PRId64 " event %s token %s grant %" PRId64 " expires %" PRId64
            " claim sent %" PRId64 " answered %" PRId64 " settle %d sent %" PRId64
            " answered %" PRId64 " result %d\n",
            what, l->seq, l->event_id, l->token, l->grant_us, l->expires_us, l->claim_send_us,
            l->claim_recv_us, (int)l->settle, l->settle_send_us, l->settle_recv_us,
            (int)l->result);
}

/* ---- The checks ---- */

/* One event's leases in one group, r[0..n) sorted by grant. */
static void check_delivery(const struct crashcheck_input *in, struct crashcheck_group *g,
                           const struct ref *r, size_t n, int per_delivery_leases,
                           struct explain *x)
{
    const struct crashcheck_pub *p = r[0].pub >= 0 ? &in->pubs[r[0].pub] : NULL;
    int group = r[0].l->group;
    size_t acked = n;
    int64_t max_end = INT64_MIN;
    size_t holder = 0;

    if (!p) {
        g->unexpected++;
        if (explain_ok(x, group, X_UNEXPECTED)) {
            fprintf(x->f, "%s: unexpected: handed out, never sent\n", crashcheck_group_name(group));
            lease_text(x->f, "lease", r[0].l);
        }
        return;
    }
    g->delivered++;
    if (n > 1) {
        g->duplicated++;
        g->redeliveries += (long)n - 1;
    }
    if (!p->acked)
        g->recovered++;
    for (size_t i = 0; i < n; i++)
        if (r[i].l->result == CRASHCHECK_R_ACKED) {
            acked = i;
            break;
        }
    for (size_t i = acked + 1; i < n; i++) {
        g->acked_then_redelivered++;
        if (explain_ok(x, group, X_ACKED_REDELIVERED)) {
            fprintf(x->f, "%s: acked then redelivered: event %s\n", crashcheck_group_name(group),
                    p->event_id);
            lease_text(x->f, "acked", r[acked].l);
            lease_text(x->f, "handed out again", r[i].l);
        }
    }
    if (!per_delivery_leases)
        return;
    for (size_t i = 0; i < n; i++) {
        if (r[i].l->grant_us < max_end) {
            g->double_leases++;
            if (explain_ok(x, group, X_DOUBLE)) {
                fprintf(x->f, "%s: two live leases on event %s\n", crashcheck_group_name(group),
                        p->event_id);
                lease_text(x->f, "first", r[holder].l);
                lease_text(x->f, "second", r[i].l);
            }
        }
        if (live_end(r[i].l) > max_end) {
            max_end = live_end(r[i].l);
            holder = i;
        }
    }
}

/* The ordered group's leases of one aggregate, r[0..n) sorted by grant. */
static void check_aggregate(const struct crashcheck_input *in, struct crashcheck_group *g,
                            const struct ref *r, size_t n, struct explain *x)
{
    int64_t max_order = 0, max_end = INT64_MIN;
    size_t top = 0, holder = 0;
    const char *gn = crashcheck_group_name(CRASHCHECK_ORDERED);

    (void)in;
    for (size_t i = 0; i < n; i++) {
        if (r[i].order < max_order) {
            g->order_violations++;
            if (explain_ok(x, CRASHCHECK_ORDERED, X_ORDER)) {
                fprintf(x->f, "%s: order: aggregate %d place %" PRId64 " handed out after place %"
                        PRId64 "\n", gn, r[i].agg, r[i].order, max_order);
                lease_text(x->f, "later event, earlier", r[top].l);
                lease_text(x->f, "earlier event, later", r[i].l);
            }
        }
        if (r[i].l->grant_us < max_end) {
            g->double_leases++;
            if (explain_ok(x, CRASHCHECK_ORDERED, X_DOUBLE)) {
                fprintf(x->f, "%s: two live leases on aggregate %d\n", gn, r[i].agg);
                lease_text(x->f, "first", r[holder].l);
                lease_text(x->f, "second", r[i].l);
            }
        }
        if (r[i].order > max_order) {
            max_order = r[i].order;
            top = i;
        }
        if (live_end(r[i].l) > max_end) {
            max_end = live_end(r[i].l);
            holder = i;
        }
    }
}

static void count_settles(struct crashcheck_report *rep, const struct crashcheck_lease *l)
{
    struct crashcheck_group *g = &rep->g[l->group];

    g->leases++;
    switch (l->settle) {
    case CRASHCHECK_DROPPED: g->dropped++; break;
    case CRASHCHECK_ACK: g->acks++; break;
    case CRASHCHECK_NACK: g->nacks++; break;
    }
    if (l->result == CRASHCHECK_R_UNKNOWN)
        g->settle_unknown++;
    else if (l->result == CRASHCHECK_R_LOST)
        g->lease_lost++;
}

int crashcheck_run(const struct crashcheck_input *in, struct crashcheck_report *rep, FILE *why)
{
    struct idtab t = {0, NULL};
    struct ref *r = NULL;
    unsigned char *seen = NULL;     /* per pub: bit g handed out in group g,
                                     * bit 2 in the range reads */
    struct explain x;
    size_t nr = 0;
    int rc = -1;

    memset(rep, 0, sizeof *rep);
    memset(&x, 0, sizeof x);
    x.f = why;
    if (idtab_init(&t, in->pubs, in->npubs) ||
        !(seen = calloc(in->npubs + 1, 1)) ||
        !(r = calloc(in->nleases + 1, sizeof *r)))
        goto out;

    /* Leases, per delivery. */
    for (size_t i = 0; i < in->nleases; i++) {
        const struct crashcheck_lease *l = &in->leases[i];

        if (l->group < 0 || l->group >= CRASHCHECK_GROUPS)
            continue;
        count_settles(rep, l);
        r[nr].l = l;
        r[nr].pub = idtab_find(&t, in->pubs, l->event_id);
        r[nr].agg = r[nr].pub >= 0 ? in->pubs[r[nr].pub].agg : -1;
        r[nr].order = r[nr].pub >= 0 ? in->pubs[r[nr].pub].order : 0;
        if (r[nr].pub >= 0)
            seen[r[nr].pub] |= (unsigned char)(1u << l->group);
        nr++;
    }
    qsort(r, nr, sizeof *r, by_delivery);
    for (size_t i = 0, j; i < nr; i = j) {
        int group = r[i].l->group;

        for (j = i + 1; j < nr && r[j].l->group == group && r[j].pub == r[i].pub &&
                        (r[i].pub >= 0 || !strcmp(r[j].l->event_id, r[i].l->event_id)); j++)
            ;
        /* Ordered group, event with an aggregate: its leases are checked
         * with its aggregate's below. */
        check_delivery(in, &rep->g[group], r + i, j - i,
                       !(group == CRASHCHECK_ORDERED && r[i].agg >= 0), &x);
    }

    /* Leases of the ordered group, per aggregate. */
    {
        size_t m = 0;

        for (size_t i = 0; i < nr; i++)
            if (r[i].l->group == CRASHCHECK_ORDERED && r[i].agg >= 0)
                r[m++] = r[i];
        qsort(r, m, sizeof *r, by_aggregate);
        for (size_t i = 0, j; i < m; i = j) {
            for (j = i + 1; j < m && r[j].agg == r[i].agg; j++)
                ;
            check_aggregate(in, &rep->g[CRASHCHECK_ORDERED], r + i, j - i, &x);
        }
    }

    /* The store's events. */
    if (in->stored) {
        for (size_t i = 0; i < in->nstored; i++) {
            const struct crashcheck_stored *s = &in->stored[i];
            int64_t p = idtab_find(&t, in->pubs, s->event_id);

            rep->stored++;
            if (p < 0) {
                rep->store_unexpected++;
                if (explain_ok(&x, 0, X_STORE_UNEXPECTED) && why)
                    fprintf(why, "store: unexpected event %s (nobody sent it)\n", s->event_id);
                continue;
            }
            seen[p] |= 4;
            if (!s->same) {
                rep->altered++;
                if (explain_ok(&x, 0, X_ALTERED) && why)
                    fprintf(why, "store: event %s is not stored as it was sent\n", s->event_id);
            }
        }
    }

    /* Every event, per group. */
    for (size_t i = 0; i < in->npubs; i++) {
        const struct crashcheck_pub *p = &in->pubs[i];
        int missing;

        if (idtab_find(&t, in->pubs, p->event_id) != (int64_t)i)
            continue;   /* the same id logged twice: counted once */
        for (int g = 0; g < CRASHCHECK_GROUPS; g++)
            rep->g[g].attempted++;
        if (!p->acked)
            continue;
        missing = p->lookup == 0 || (in->stored && !(seen[i] & 4));
        if (missing) {
            rep->store_missing++;
            if (why)
                fprintf(why, "store: acknowledged event %s (seq %" PRId64 ") is not stored%s\n",
                        p->event_id, p->seq, p->lookup == 0 ? " (lookup 404)" : "");
        }
        if (p->lookup == 1)
            rep->looked_up++;
        for (int g = 0; g < CRASHCHECK_GROUPS; g++) {
            struct crashcheck_group *gr = &rep->g[g];
            int handed = seen[i] & (1u << g);
            int no_delivery = p->lookup == 1 && !p->state[g];

            gr->published++;
            if (missing || !handed || no_delivery) {
                gr->lost++;
                if (explain_ok(&x, g, X_LOST))
                    fprintf(why, "%s: lost: acknowledged event %s (seq %" PRId64 ")%s%s%s\n",
                            crashcheck_group_name(g), p->event_id, p->seq,
                            missing ? ", not in the store" : "",
                            handed ? "" : ", never handed out",
                            no_delivery ? ", no delivery in the group" : "");
                continue;
            }
            if (p->lookup == 1 && p->state[g] == 'l')
                gr->dlq++;
            if (p->lookup == 1 && p->state[g] == 'p') {
                gr->not_terminal++;
                if (explain_ok(&x, g, X_NOT_TERMINAL))
                    fprintf(why, "%s: event %s still pending or processing after the drain\n",
                            crashcheck_group_name(g), p->event_id);
            }
        }
    }

    rep->valid = rep->store_unexpected == 0 && rep->altered == 0;
    for (int g = 0; g < CRASHCHECK_GROUPS; g++) {
        const struct crashcheck_group *gr = &rep->g[g];

        if (gr->lost || gr->unexpected || gr->acked_then_redelivered || gr->order_violations ||
            gr->double_leases || gr->not_terminal)
            rep->valid = 0;
    }
    rc = 0;
out:
    free(r);
    free(seen);
    free(t.slot);
    return rc;
}

/* ---- Output ---- */

const char *crashcheck_group_name(int group)
{
    return group == CRASHCHECK_ORDERED ? "ordered" : "unordered";
}

void crashcheck_print_table(const struct crashcheck_report *rep, FILE *f)
{
    fprintf(f, "%-10s %9s %9s %9s %5s %10s %10s %11s %9s %17s %10s %13s\n", "group", "attempted",
            "published", "delivered", "lost", "unexpected", "duplicated", "redelivered",
            "recovered", "acked-redelivered", "order-viol", "double-leases");
    for (int g = 0; g < CRASHCHECK_GROUPS; g++) {
        const struct crashcheck_group *x = &rep->g[g];
        char order[24] = "-";

        if (g == CRASHCHECK_ORDERED)
            snprintf(order, sizeof order, "%ld", x->order_violations);
        fprintf(f, "%-10s %9ld %9ld %9ld %5ld %10ld %10ld %11ld %9ld %17ld %10s %13ld\n",
                crashcheck_group_name(g), x->attempted, x->published, x->delivered, x->lost,
                x->unexpected, x->duplicated, x->redeliveries, x->recovered,
                x->acked_then_redelivered, order, x->double_leases);
    }
    for (int g = 0; g < CRASHCHECK_GROUPS; g++) {
        const struct crashcheck_group *x = &rep->g[g];

        fprintf(f, "%-10s leases %ld: acks %ld, nacks %ld, dropped %ld; settles unanswered %ld, "
                "lease_lost %ld; dlq %ld, not terminal %ld\n",
                crashcheck_group_name(g), x->leases, x->acks, x->nacks, x->dropped,
                x->settle_unknown, x->lease_lost, x->dlq, x->not_terminal);
    }
    fprintf(f, "store      %ld events read back, %ld acknowledged looked up by id; missing %ld, "
            "unexpected %ld, altered %ld\n",
            rep->stored, rep->looked_up, rep->store_missing, rep->store_unexpected, rep->altered);
    fprintf(f, "checker    %s\n", rep->valid ? "valid (0 lost, 0 unexpected, every must-be-zero figure 0)"
                                             : "INVALID");
}

void crashcheck_print_json(const struct crashcheck_report *rep, FILE *f)
{
    fprintf(f, "{\"valid\":%s,\"groups\":{", rep->valid ? "true" : "false");
    for (int g = 0; g < CRASHCHECK_GROUPS; g++) {
        const struct crashcheck_group *x = &rep->g[g];

        fprintf(f, "%s\"%s\":{\"attempted\":%ld,\"published\":%ld,\"delivered\":%ld,\"lost\":%ld,"
                "\"unexpected\":%ld,\"duplicated\":%ld,\"redeliveries\":%ld,\"recovered\":%ld,"
                "\"acked_then_redelivered\":%ld,\"order_violations\":%ld,\"double_leases\":%ld,"
                "\"not_terminal\":%ld,\"dlq\":%ld,\"leases\":%ld,\"acks\":%ld,\"nacks\":%ld,"
                "\"dropped\":%ld,\"settle_unknown\":%ld,\"lease_lost\":%ld}",
                g ? "," : "", crashcheck_group_name(g), x->attempted, x->published, x->delivered,
                x->lost, x->unexpected, x->duplicated, x->redeliveries, x->recovered,
                x->acked_then_redelivered, x->order_violations, x->double_leases, x->not_terminal,
                x->dlq, x->leases, x->acks, x->nacks, x->dropped, x->settle_unknown, x->lease_lost);
    }
    fprintf(f, "},\"store\":{\"stored\":%ld,\"looked_up\":%ld,\"missing\":%ld,\"unexpected\":%ld,"
            "\"altered\":%ld}}",
            rep->stored, rep->looked_up, rep->store_missing, rep->store_unexpected, rep->altered);
}
