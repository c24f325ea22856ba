/* test_crashcheck.c - the crash cycles' checker (tests/fault/crashcheck.h)
 * on synthetic logs: it must be able to fail.
 *
 *   clean_log_is_valid: a log with every allowed oddity of a crash run (a
 *       publish without an answer whose event shows up anyway, an ack
 *       without an answer followed by a redelivery, a dropped lease expired
 *       and handed out again, a nack) is valid, each counted where it
 *       belongs (recovered, duplicated, redeliveries);
 *   each_violation_is_counted: the same log plus one lost event, one
 *       acked-then-redelivered delivery, one order violation and one double
 *       lease counts exactly one of each, in the right group, and is not
 *       valid;
 *   store_figures: an acknowledged event missing from the store is lost in
 *       both groups; a stored event nobody sent and one stored with other
 *       fields are counted; a lookup that says 404 is missing too;
 *   boundaries: a lease granted exactly when the previous one ends, or
 *       right after its holder sent the nack, is not a double lease; a
 *       re-grant of the same event (a retry) is not an order violation. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "crashcheck.h"

#include <stdio.h>
#include <string.h>

#define S 1000000LL   /* one second in µs */
#define T0 (1790000000LL * S)
#define TTL (2 * S)

struct log {
    struct crashcheck_pub pubs[64];
    struct crashcheck_lease leases[64];
    struct crashcheck_stored stored[64];
    size_t np, nl, ns;
};

static void pub(struct log *g, const char *id, int agg, int64_t order, int acked)
{
    struct crashcheck_pub *p = &g->pubs[g->np++];

    memset(p, 0, sizeof *p);
    snprintf(p->event_id, sizeof p->event_id, "%s", id);
    p->agg = agg;
    p->order = order;
    p->attempts = 1;
    p->acked = acked;
    p->seq = (int64_t)g->np;
    p->lookup = acked ? 1 : -1;
    p->state[0] = p->state[1] = acked ? 'd' : 0;
}

/* A lease of 'id' in 'group' granted at 'grant' (µs after T0), settled by
 * 'how' at 'settle' (µs after T0, ignored when dropped) with 'result'. */
static void lease(struct log *g, int group, const char *id, const char *token, int64_t grant,
                  enum crashcheck_settle how, int64_t settle, enum crashcheck_result result)
{
    struct crashcheck_lease *l = &g->leases[g->nl++];

    memset(l, 0, sizeof *l);
    l->group = group;
    for (size_t i = 0; i < g->np; i++)
        if (!strcmp(g->pubs[i].event_id, id))
            l->seq = g->pubs[i].seq;
    snprintf(l->event_id, sizeof l->event_id, "%s", id);
    snprintf(l->token, sizeof l->token, "%s", token);
    l->grant_us = T0 + grant;
    l->expires_us = T0 + grant + TTL;
    l->claim_send_us = T0 + grant - 1000;
    l->claim_recv_us = T0 + grant + 1000;
    l->settle = how;
    if (how != CRASHCHECK_DROPPED) {
        l->settle_send_us = T0 + settle;
        l->settle_recv_us = T0 + settle + 1000;
    }
    l->result = how == CRASHCHECK_DROPPED ? CRASHCHECK_R_NONE : result;
}

static void store_all(struct log *g)
{
    for (size_t i = 0; i < g->np; i++)
        if (g->pubs[i].acked || g->pubs[i].event_id[0] == 'r') {
            snprintf(g->stored[g->ns].event_id, sizeof g->stored[g->ns].event_id, "%s",
                     g->pubs[i].event_id);
            g->stored[g->ns++].same = 1;
        }
}

/* Both groups: aggregate 0 = a1, a2, a3 (versions 1..3); aggregate 1 = b1;
 * n1 without aggregate; r1 sent without an answer, stored anyway. */
static void clean_log(struct log *g)
{
    memset(g, 0, sizeof *g);
    pub(g, "a1", 0, 1, 1);
    pub(g, "a2", 0, 2, 1);
    pub(g, "a3", 0, 3, 1);
    pub(g, "b1", 1, 1, 1);
    pub(g, "n1", -1, 0, 1);
    pub(g, "r1", -1, 0, 0);
    g->pubs[5].lookup = -1;
    for (int grp = 0; grp < CRASHCHECK_GROUPS; grp++) {
        /* a1: acked at once.  a2: dropped, expires at 1.1 s + TTL, handed
         * out again after the expiry, nacked, handed out again, acked.
         * a3: its ack's answer is lost (micd killed): handed out again,
         * acked. */
        lease(g, grp, "a1", grp ? "u01" : "o01", 0, CRASHCHECK_ACK, 100000, CRASHCHECK_R_ACKED);
        lease(g, grp, "a2", grp ? "u02" : "o02", 1 * S + 100000, CRASHCHECK_DROPPED, 0, 0);
        lease(g, grp, "a2", grp ? "u03" : "o03", 3 * S + 200000, CRASHCHECK_NACK,
              3 * S + 300000, CRASHCHECK_R_RETRYING);
        lease(g, grp, "a2", grp ? "u04" : "o04", 3 * S + 400000, CRASHCHECK_ACK, 3 * S + 500000,
              CRASHCHECK_R_ACKED);
        lease(g, grp, "a3", grp ? "u05" : "o05", 4 * S, CRASHCHECK_ACK, 4 * S + 100000,
              CRASHCHECK_R_UNKNOWN);
        lease(g, grp, "a3", grp ? "u06" : "o06", 7 * S, CRASHCHECK_ACK, 7 * S + 100000,
              CRASHCHECK_R_ACKED);
        lease(g, grp, "b1", grp ? "u07" : "o07", 0, CRASHCHECK_ACK, 50000, CRASHCHECK_R_ACKED);
        lease(g, grp, "n1", grp ? "u08" : "o08", 0, CRASHCHECK_ACK, 50000, CRASHCHECK_R_ACKED);
        lease(g, grp, "r1", grp ? "u09" : "o09", 0, CRASHCHECK_ACK, 50000, CRASHCHECK_R_ACKED);
    }
    store_all(g);
}

static void run(struct log *g, struct crashcheck_report *rep)
{
    struct crashcheck_input in = {g->pubs, g->np, g->leases, g->nl, g->stored, g->ns};

    assert_int_equal(crashcheck_run(&in, rep, stdout), 0);
    crashcheck_print_table(rep, stdout);
    crashcheck_print_json(rep, stdout);
    printf("\n");
}

static void clean_log_is_valid(void **state)
{
    struct log g;
    struct crashcheck_report rep;

    (void)state;
    clean_log(&g);
    run(&g, &rep);
    assert_true(rep.valid);
    for (int grp = 0; grp < CRASHCHECK_GROUPS; grp++) {
        const struct crashcheck_group *x = &rep.g[grp];

        assert_int_equal(x->attempted, 6);
        assert_int_equal(x->published, 5);
        assert_int_equal(x->delivered, 6);
        assert_int_equal(x->lost, 0);
        assert_int_equal(x->unexpected, 0);
        assert_int_equal(x->duplicated, 2);       /* a2, a3 */
        assert_int_equal(x->redeliveries, 3);     /* a2 twice, a3 once */
        assert_int_equal(x->recovered, 1);        /* r1 */
        assert_int_equal(x->acked_then_redelivered, 0);
        assert_int_equal(x->order_violations, 0);
        assert_int_equal(x->double_leases, 0);
        assert_int_equal(x->leases, 9);
        assert_int_equal(x->acks, 7);
        assert_int_equal(x->nacks, 1);
        assert_int_equal(x->dropped, 1);
        assert_int_equal(x->settle_unknown, 1);
    }
    assert_int_equal(rep.stored, 6);
    assert_int_equal(rep.store_missing, 0);
    assert_int_equal(rep.store_unexpected, 0);
    assert_int_equal(rep.altered, 0);
}

static void each_violation_is_counted(void **state)
{
    struct log g;
    struct crashcheck_report rep;

    (void)state;
    clean_log(&g);
    /* Lost: l1 acknowledged and stored, never handed out in the unordered
     * group (the ordered group had it). */
    pub(&g, "l1", -1, 0, 1);
    lease(&g, CRASHCHECK_ORDERED, "l1", "o20", 0, CRASHCHECK_ACK, 10000, CRASHCHECK_R_ACKED);
    snprintf(g.stored[g.ns].event_id, sizeof g.stored[0].event_id, "l1");
    g.stored[g.ns++].same = 1;
    /* Acked then redelivered, unordered group: n1 was acked at 50 ms and is
     * handed out again at 9 s. */
    lease(&g, CRASHCHECK_UNORDERED, "n1", "u21", 9 * S, CRASHCHECK_ACK, 9 * S + 1000,
          CRASHCHECK_R_ACKED);
    /* Order violation, ordered group: c2 (version 2) handed out and acked,
     * then c1 (version 1).  Their leases do not overlap. */
    pub(&g, "c1", 2, 1, 1);
    pub(&g, "c2", 2, 2, 1);
    lease(&g, CRASHCHECK_ORDERED, "c2", "o22", 0, CRASHCHECK_ACK, 10000, CRASHCHECK_R_ACKED);
    lease(&g, CRASHCHECK_ORDERED, "c1", "o23", 1 * S, CRASHCHECK_ACK, 1 * S + 10000,
          CRASHCHECK_R_ACKED);
    lease(&g, CRASHCHECK_UNORDERED, "c1", "u22", 0, CRASHCHECK_ACK, 10000, CRASHCHECK_R_ACKED);
    lease(&g, CRASHCHECK_UNORDERED, "c2", "u23", 0, CRASHCHECK_ACK, 10000, CRASHCHECK_R_ACKED);
    /* Double lease, ordered group: d1 is granted at 0 and held until its
     * ack at 1.5 s; d2 of the same aggregate is granted at 1 s. */
    pub(&g, "d1", 3, 1, 1);
    pub(&g, "d2", 3, 2, 1);
    lease(&g, CRASHCHECK_ORDERED, "d1", "o24", 0, CRASHCHECK_ACK, 1500000, CRASHCHECK_R_ACKED);
    lease(&g, CRASHCHECK_ORDERED, "d2", "o25", 1 * S, CRASHCHECK_ACK, 2 * S, CRASHCHECK_R_ACKED);
    lease(&g, CRASHCHECK_UNORDERED, "d1", "u24", 0, CRASHCHECK_ACK, 10000, CRASHCHECK_R_ACKED);
    lease(&g, CRASHCHECK_UNORDERED, "d2", "u25", 0, CRASHCHECK_ACK, 10000, CRASHCHECK_R_ACKED);
    for (const char *const *id = (const char *const[]){"c1", "c2", "d1", "d2", NULL}; *id; id++) {
        snprintf(g.stored[g.ns].event_id, sizeof g.stored[0].event_id, "%s", *id);
        g.stored[g.ns++].same = 1;
    }
    run(&g, &rep);
    assert_false(rep.valid);
    assert_int_equal(rep.g[CRASHCHECK_ORDERED].lost, 0);
    assert_int_equal(rep.g[CRASHCHECK_UNORDERED].lost, 1);
    assert_int_equal(rep.g[CRASHCHECK_ORDERED].acked_then_redelivered, 0);
    assert_int_equal(rep.g[CRASHCHECK_UNORDERED].acked_then_redelivered, 1);
    assert_int_equal(rep.g[CRASHCHECK_ORDERED].order_violations, 1);
    assert_int_equal(rep.g[CRASHCHECK_UNORDERED].order_violations, 0);
    assert_int_equal(rep.g[CRASHCHECK_ORDERED].double_leases, 1);
    assert_int_equal(rep.g[CRASHCHECK_UNORDERED].double_leases, 0);
    for (int grp = 0; grp < CRASHCHECK_GROUPS; grp++)
        assert_int_equal(rep.g[grp].unexpected, 0);
    assert_int_equal(rep.store_missing, 0);
    assert_int_equal(rep.store_unexpected, 0);
}

static void store_figures(void **state)
{
    struct log g;
    struct crashcheck_report rep;

    (void)state;
    clean_log(&g);
    /* a1 is not in the range reads; b1's lookup answered 404. */
    for (size_t i = 0; i < g.ns; i++)
        if (!strcmp(g.stored[i].event_id, "a1"))
            snprintf(g.stored[i].event_id, sizeof g.stored[i].event_id, "x9");  /* nobody sent x9 */
    g.pubs[3].lookup = 0;
    g.stored[g.ns - 1].same = 0;   /* r1 stored with other fields */
    /* A delivery of an event nobody sent, in the ordered group. */
    lease(&g, CRASHCHECK_ORDERED, "zz", "o30", 0, CRASHCHECK_ACK, 10000, CRASHCHECK_R_ACKED);
    run(&g, &rep);
    assert_false(rep.valid);
    assert_int_equal(rep.store_missing, 2);
    assert_int_equal(rep.store_unexpected, 1);
    assert_int_equal(rep.altered, 1);
    assert_int_equal(rep.g[CRASHCHECK_ORDERED].lost, 2);
    assert_int_equal(rep.g[CRASHCHECK_UNORDERED].lost, 2);
    assert_int_equal(rep.g[CRASHCHECK_ORDERED].unexpected, 1);
    assert_int_equal(rep.g[CRASHCHECK_UNORDERED].unexpected, 0);
}

static void boundaries(void **state)
{
    struct log g;
    struct crashcheck_report rep;

    (void)state;
    memset(&g, 0, sizeof g);
    pub(&g, "e1", 0, 1, 1);
    pub(&g, "e2", 0, 2, 1);
    for (int grp = 0; grp < CRASHCHECK_GROUPS; grp++) {
        /* e1 dropped at 0; handed out again exactly at its expiry; nacked
         * at 2.5 s and handed out again at that very microsecond; acked. */
        lease(&g, grp, "e1", grp ? "u1" : "o1", 0, CRASHCHECK_DROPPED, 0, 0);
        lease(&g, grp, "e1", grp ? "u2" : "o2", TTL, CRASHCHECK_NACK, 2500000,
              CRASHCHECK_R_RETRYING);
        lease(&g, grp, "e1", grp ? "u3" : "o3", 2500000, CRASHCHECK_ACK, 2600000,
              CRASHCHECK_R_ACKED);
        /* e2 right after e1's ack was sent. */
        lease(&g, grp, "e2", grp ? "u4" : "o4", 2600000, CRASHCHECK_ACK, 2700000,
              CRASHCHECK_R_ACKED);
    }
    store_all(&g);
    run(&g, &rep);
    assert_true(rep.valid);
    for (int grp = 0; grp < CRASHCHECK_GROUPS; grp++) {
        assert_int_equal(rep.g[grp].double_leases, 0);
        assert_int_equal(rep.g[grp].order_violations, 0);
        assert_int_equal(rep.g[grp].redeliveries, 2);
    }
    /* One microsecond earlier is a double lease, in both groups (on the
     * aggregate in the ordered group, on the delivery in the other). */
    g.leases[1].grant_us--;
    g.leases[5].grant_us--;
    run(&g, &rep);
    assert_false(rep.valid);
    assert_int_equal(rep.g[CRASHCHECK_ORDERED].double_leases, 1);
    assert_int_equal(rep.g[CRASHCHECK_UNORDERED].double_leases, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(clean_log_is_valid),
        cmocka_unit_test(each_violation_is_counted),
        cmocka_unit_test(store_figures),
        cmocka_unit_test(boundaries),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
