/* test_schedule.c - the writer's schedule (server/engine/schedule.[ch])
 * against a real store and writer (tests/kit/procfx.h), the clock
 * injected and moved by the test only: the next due time the schedule
 * reports is the earliest of the stored deadlines (lease ends, retries,
 * deliver_at, retention), each deadline fires at its time and not a
 * microsecond before, the earliest fire first when more are due than a
 * batch takes (the rest the next batch, busy meanwhile), the deadlines
 * stored before a restart fire after it, and the clock reading stored for
 * the next start stays ahead of every committed batch, also after an
 * aborted one.
 *
 * The hooks are read from mic_sched_hooks and called inside a batch
 * (procfx_exec), where the writer calls them. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/buf.h"
#include "core/err.h"
#include "engine/claim.h"
#include "engine/delivery.h"
#include "engine/group.h"
#include "engine/schedule.h"
#include "procfx.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T0 PROCFX_T0
#define SEC PROCFX_SEC
/* The retention deadline of events published at T0 to a topic made on
 * first use (retention_s 7 days). */
#define RETAINED (T0 + 7 * 86400 * SEC)

/* ---- Helpers ---- */

static void publish(struct procfx *f, const char *body)
{
    assert_int_equal(procfx_publish(f, body, NULL, NULL), MIC_OK);
}

static int claimed(json_t *j)
{
    return (int)json_array_size(json_object_get(j, "deliveries"));
}

/* Claim from 'group' with 'body': how many were handed out. */
static int claim_n(struct procfx *f, const char *group, const char *body)
{
    json_t *a = procfx_call(f, MIC_CLAIM, group, body);
    int n = claimed(a);

    json_decref(a);
    return n;
}

/* Claim one delivery of 'group' and settle it with 'kind' and the extra
 * members 'extra' ("" or ",\"retry_after_s\":5"); returns its seq. */
static uint64_t claim_settle(struct procfx *f, const char *group, const char *claim_body,
                             int kind, const char *extra)
{
    json_t *a = procfx_call(f, MIC_CLAIM, group, claim_body), *d, *r;
    char body[256];
    uint64_t seq;

    assert_int_equal(claimed(a), 1);
    d = json_array_get(json_object_get(a, "deliveries"), 0);
    seq = (uint64_t)json_integer_value(json_object_get(d, "seq"));
    if (kind >= 0) {
        snprintf(body, sizeof body, "{\"deliveries\":[{\"seq\":%llu,\"lease_token\":\"%s\"}]%s}",
                 (unsigned long long)seq, json_string_value(json_object_get(d, "lease_token")),
                 extra);
        r = procfx_call(f, kind, group, body);
        json_decref(r);
    }
    json_decref(a);
    return seq;
}

/* Settle delivery 'seq' of 'group' with 'kind' under the token stored
 * for it (its current lease), with the extra members 'extra'. */
static void settle_stored(struct procfx *f, const char *group, uint64_t seq, int kind,
                          const char *extra)
{
    struct mic_dlv d = procfx_dlv(f->store, group, seq);
    char tok[2 * MIC_TOKEN_LEN + 1], body[256];

    for (int i = 0; i < MIC_TOKEN_LEN; i++)
        snprintf(tok + 2 * i, 3, "%02x", d.token[i]);
    snprintf(body, sizeof body, "{\"deliveries\":[{\"seq\":%llu,\"lease_token\":\"%s\"}]%s}",
             (unsigned long long)seq, tok, extra);
    json_decref(procfx_call(f, kind, group, body));
}

/* What the schedule's hooks answer inside a batch. */
struct probe {
    struct mic_writer_hooks h;
    int64_t next_due, now;
    int busy;
    /* Optional: the state of delivery 'seq' of group 'gid' in the batch. */
    uint32_t gid;
    uint64_t seqs[2];
    int states[2];
};

static int probe_batch(struct mic_wctx *w, void *arg)
{
    struct probe *p = arg;

    p->now = w->now_us;
    p->next_due = p->h.next_due(p->h.sched, w);
    p->busy = p->h.busy(p->h.sched);
    for (int i = 0; i < 2; i++) {
        struct mic_dlv d;
        p->states[i] = -1;
        if (p->seqs[i] && mic_delivery_get(w->txn, p->gid, p->seqs[i], &d) == MIC_OK)
            p->states[i] = d.state;
    }
    return MIC_OK;
}

static struct probe probe(struct procfx *f)
{
    struct probe p;

    memset(&p, 0, sizeof p);
    mic_sched_hooks(f->sched, &p.h);
    assert_int_equal(procfx_exec(f, probe_batch, &p), MIC_OK);
    assert_int_equal(p.now, procfx_now);
    return p;
}

static int64_t next_due(struct procfx *f)
{
    return probe(f).next_due;
}

static void expect_due(struct procfx *f, int64_t want, const char *what)
{
    int64_t got = next_due(f);

    if (got != want)
        fail_msg("next due after %s: T0%+.6f s, expected T0%+.6f s", what,
                 got ? (double)(got - T0) / SEC : -1e9, want ? (double)(want - T0) / SEC : -1e9);
}

/* ---- Next due ---- */

/* Each step stores or removes a deadline; the schedule's next due is the
 * earliest one left, whatever its kind, and 0 with none. */
static void next_due_is_the_earliest_deadline(void **state)
{
    struct procfx *f = *state;
    uint64_t s2;

    expect_due(f, 0, "nothing stored");
    procfx_topic(f, "t", "{\"retention_s\":3600}");
    procfx_group(f, "g", "{\"topics\":[\"t\"],\"lease_ttl_s\":30}");
    expect_due(f, 0, "a topic and a group");
    publish(f, "{\"event_id\":\"e1\",\"topic\":\"t\",\"deliver_at\":\"2026-09-21T14:15:00Z\"}");
    expect_due(f, T0 + 100 * SEC, "a deliver_at 100 s away (retention at 3600 s)");
    publish(f, "{\"event_id\":\"e2\",\"topic\":\"t\"}");
    s2 = claim_settle(f, "g", "{}", -1, "");
    expect_due(f, T0 + 30 * SEC, "a lease of 30 s");
    settle_stored(f, "g", s2, MIC_NACK, ",\"retry_after_s\":50");
    expect_due(f, T0 + 50 * SEC, "a nack's retry 50 s away (its lease gone)");
    procfx_now = T0 + 50 * SEC;
    expect_due(f, T0 + 100 * SEC, "the retry fired");
    s2 = claim_settle(f, "g", "{\"lease_ttl_s\":10}", MIC_ACK, "");
    assert_int_equal(procfx_dlv(f->store, "g", s2).state, MIC_DLV_DISPATCHED);
    expect_due(f, T0 + 100 * SEC, "an ack (its lease gone)");
    procfx_now = T0 + 100 * SEC;
    expect_due(f, T0 + 3600 * SEC, "the deliver_at fired: retention is left");
}

/* ---- Nothing fires early ---- */

/* A lease ends at its deadline: at 1 µs before the delivery is still
 * leased, at the deadline it is not (and attempt 2 can be claimed). */
static void lease_ends_at_its_deadline(void **state)
{
    struct procfx *f = *state;
    struct probe p;
    uint64_t seq;

    procfx_group(f, "g", "{\"topics\":[\"t\"],\"backoff\":{\"initial_ms\":0,\"max_ms\":0}}");
    publish(f, "{\"event_id\":\"e1\",\"topic\":\"t\"}");
    seq = claim_settle(f, "g", "{\"lease_ttl_s\":10}", -1, "");
    assert_int_equal(procfx_dlv(f->store, "g", seq).lease_expires, T0 + 10 * SEC);
    procfx_now = T0 + 10 * SEC - 1;
    p = probe(f);
    assert_int_equal(p.next_due, T0 + 10 * SEC);
    assert_int_equal(procfx_dlv(f->store, "g", seq).state, MIC_DLV_PROCESSING);
    assert_int_equal(claim_n(f, "g", "{}"), 0);
    procfx_now = T0 + 10 * SEC;
    p = probe(f);
    assert_int_equal(p.next_due, RETAINED); /* no retry timer: backoff 0 */
    assert_int_equal(procfx_dlv(f->store, "g", seq).state, MIC_DLV_PENDING);
    assert_int_equal(procfx_dlv(f->store, "g", seq).attempts, 1);
    assert_int_equal(claim_n(f, "g", "{}"), 1);
}

/* A nack's retry comes at its not_before, not before. */
static void retry_comes_at_its_time(void **state)
{
    struct procfx *f = *state;
    uint64_t seq;

    procfx_group(f, "g", "{\"topics\":[\"t\"]}");
    publish(f, "{\"event_id\":\"e1\",\"topic\":\"t\"}");
    seq = claim_settle(f, "g", "{}", MIC_NACK, ",\"retry_after_s\":5");
    assert_int_equal(procfx_dlv(f->store, "g", seq).not_before, T0 + 5 * SEC);
    expect_due(f, T0 + 5 * SEC, "a retry 5 s away");
    procfx_now = T0 + 5 * SEC - 1;
    assert_int_equal(claim_n(f, "g", "{}"), 0);
    procfx_now = T0 + 5 * SEC;
    assert_int_equal(claim_n(f, "g", "{}"), 1);
    assert_int_equal(procfx_dlv(f->store, "g", seq).attempts, 2);
}

/* An event with deliver_at is handed out from that time on. */
static void deliver_at_is_kept(void **state)
{
    struct procfx *f = *state;

    procfx_group(f, "g", "{\"topics\":[\"t\"]}");
    publish(f, "{\"event_id\":\"e1\",\"topic\":\"t\",\"deliver_at\":\"2026-09-21T14:13:40Z\"}");
    publish(f, "{\"event_id\":\"e2\",\"topic\":\"t\",\"deliver_at\":\"2026-09-21T14:13:30Z\"}");
    expect_due(f, T0 + 10 * SEC, "two deliver_at, 10 and 20 s away");
    procfx_now = T0 + 10 * SEC - 1;
    assert_int_equal(claim_n(f, "g", "{\"max\":10}"), 0);
    procfx_now = T0 + 10 * SEC;
    assert_int_equal(claim_n(f, "g", "{\"max\":10}"), 1); /* e2 only */
    expect_due(f, T0 + 20 * SEC, "e2 handed out");
    procfx_now = T0 + 20 * SEC - 1;
    assert_int_equal(claim_n(f, "g", "{\"max\":10}"), 0);
    procfx_now = T0 + 20 * SEC;
    assert_int_equal(claim_n(f, "g", "{\"max\":10}"), 1);
}

/* An event past its topic's retention (and handled by every group: none
 * here) is removed at received_at + retention_s, not before. */
static void retention_removes_at_its_deadline(void **state)
{
    struct procfx *f = *state;

    procfx_topic(f, "r", "{\"retention_s\":60}");
    publish(f, "{\"event_id\":\"e1\",\"topic\":\"r\"}");
    expect_due(f, T0 + 60 * SEC, "an event with 60 s of retention");
    /* A lease that ends later does not hide it. */
    procfx_group(f, "g", "{\"topics\":[\"t\"]}");
    publish(f, "{\"event_id\":\"e2\",\"topic\":\"t\"}");
    assert_int_equal(claim_n(f, "g", "{\"lease_ttl_s\":120}"), 1);
    expect_due(f, T0 + 60 * SEC, "a lease of 120 s");
    procfx_now = T0 + 60 * SEC - 1;
    assert_int_equal(next_due(f), T0 + 60 * SEC);
    assert_true(procfx_stored(f->store, "e1"));
    procfx_now = T0 + 60 * SEC;
    assert_int_equal(next_due(f), T0 + 120 * SEC); /* the lease's, now */
    assert_false(procfx_stored(f->store, "e1"));
    assert_true(procfx_stored(f->store, "e2"));
}

/* ---- Order and the batch's budget ---- */

/* More deadlines due than a batch fires (10,000): the earliest go first,
 * the batch reports work left (busy: the writer runs the next batch at
 * once) and the next batch fires the rest. */
static void earliest_fire_first_budget_per_batch(void **state)
{
    struct procfx *f = *state;
    struct mic_buf b;
    struct probe p;
    uint32_t gid;
    mic_txn *t;
    int n = 0;

    procfx_group(f, "g", "{\"topics\":[\"t\"],\"backoff\":{\"initial_ms\":0,\"max_ms\":0}}");
    for (int i = 0; i < 10001;) {
        mic_buf_init(&b);
        mic_buf_puts(&b, "{\"events\":[");
        for (int k = 0; k < 1000 && i < 10001; k++, i++)
            mic_buf_printf(&b, "%s{\"topic\":\"t\"}", k ? "," : "");
        mic_buf_puts(&b, "]}");
        publish(f, b.p);
        mic_buf_fini(&b);
    }
    /* seq 1 leased the longest (3700 s), the 10,000 others for 3600 s:
     * their deadlines are the earliest. */
    assert_int_equal(claim_n(f, "g", "{\"max\":1,\"lease_ttl_s\":3700}"), 1);
    while (n < 10000)
        n += claim_n(f, "g", "{\"max\":1000,\"lease_ttl_s\":3600}");
    assert_int_equal(n, 10000);
    assert_int_equal(mic_txn_begin(f->store, 0, &t), MIC_OK);
    assert_int_equal(mic_group_gid(t, "g", &gid), MIC_OK);
    mic_txn_abort(t);

    procfx_now = T0 + 3700 * SEC; /* all 10,001 due */
    memset(&p, 0, sizeof p);
    mic_sched_hooks(f->sched, &p.h);
    p.gid = gid;
    p.seqs[0] = 1;
    p.seqs[1] = 10001;
    assert_int_equal(procfx_exec(f, probe_batch, &p), MIC_OK);
    assert_int_equal(p.states[0], MIC_DLV_PROCESSING); /* the latest: next batch */
    assert_int_equal(p.states[1], MIC_DLV_PENDING);
    assert_int_equal(p.busy, 1);
    assert_int_equal(p.next_due, T0 + 3700 * SEC);
    p = probe(f);
    assert_int_equal(p.busy, 0);
    assert_int_equal(p.next_due, RETAINED);
    assert_int_equal(procfx_dlv(f->store, "g", 1).state, MIC_DLV_PENDING);
}

/* ---- Restarts ---- */

/* Deadlines stored before a stop fire after the start, at their time. */
static void deadlines_survive_a_restart(void **state)
{
    struct procfx *f = *state;
    uint64_t seq;

    procfx_group(f, "g", "{\"topics\":[\"t\"],\"backoff\":{\"initial_ms\":0,\"max_ms\":0}}");
    publish(f, "{\"event_id\":\"e1\",\"topic\":\"t\"}");
    seq = claim_settle(f, "g", "{\"lease_ttl_s\":10}", -1, "");
    procfx_stop(f);
    procfx_now = T0 + 10 * SEC - 1;
    assert_int_equal(procfx_start(f), 0);
    assert_int_equal(next_due(f), T0 + 10 * SEC);
    assert_int_equal(procfx_dlv(f->store, "g", seq).state, MIC_DLV_PROCESSING);
    procfx_stop(f);
    procfx_now = T0 + 10 * SEC;
    assert_int_equal(procfx_start(f), 0);
    assert_int_equal(next_due(f), RETAINED); /* the first batch fired it */
    assert_int_equal(procfx_dlv(f->store, "g", seq).state, MIC_DLV_PENDING);
}

/* ---- The stored clock reading ---- */

static int64_t stored_clock(struct procfx *f)
{
    int64_t us = 0;
    mic_txn *t;

    assert_int_equal(mic_txn_begin(f->store, 0, &t), MIC_OK);
    assert_int_equal(mic_store_clock_get(t, &us), MIC_OK);
    mic_txn_abort(t);
    return us;
}

static int meta_full(const char *db)
{
    return strcmp(db, "meta") == 0 ? ENOSPC : 0;
}

/* Every committed batch's time is below the reading stored in meta
 * "clock" (micd starts its clock from it): a batch that reaches the
 * reading stores one 100 ms ahead, the others write nothing; a batch
 * aborted after it moved the reading in memory leaves the next one to
 * store it again. */
static void clock_reading_stays_ahead(void **state)
{
    struct procfx *f = *state;
    const int64_t ahead = 100000;
    int rc;

    (void)probe(f);
    assert_int_equal(stored_clock(f), T0 + ahead);
    procfx_now = T0 + ahead - 1;
    (void)probe(f);
    assert_int_equal(stored_clock(f), T0 + ahead); /* still ahead: not written */
    procfx_now = T0 + ahead;
    (void)probe(f);
    assert_int_equal(stored_clock(f), T0 + 2 * ahead);

    /* A batch that fails as it stores the reading (no room) ... */
    procfx_now = T0 + 2 * ahead;
    mic_store_set_fault(meta_full);
    rc = procfx_exec(f, NULL, NULL);
    mic_store_set_fault(NULL);
    assert_int_equal(rc, MIC_ENOSPC);
    assert_int_equal(stored_clock(f), T0 + 2 * ahead); /* nothing committed */
    /* ... leaves the next batch, at the same time, to store it. */
    (void)probe(f);
    assert_int_equal(stored_clock(f), T0 + 3 * ahead);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(next_due_is_the_earliest_deadline, procfx_setup,
                                        procfx_teardown),
        cmocka_unit_test_setup_teardown(lease_ends_at_its_deadline, procfx_setup,
                                        procfx_teardown),
        cmocka_unit_test_setup_teardown(retry_comes_at_its_time, procfx_setup, procfx_teardown),
        cmocka_unit_test_setup_teardown(deliver_at_is_kept, procfx_setup, procfx_teardown),
        cmocka_unit_test_setup_teardown(retention_removes_at_its_deadline, procfx_setup,
                                        procfx_teardown),
        cmocka_unit_test_setup_teardown(earliest_fire_first_budget_per_batch, procfx_setup,
                                        procfx_teardown),
        cmocka_unit_test_setup_teardown(deadlines_survive_a_restart, procfx_setup,
                                        procfx_teardown),
        cmocka_unit_test_setup_teardown(clock_reading_stays_ahead, procfx_setup,
                                        procfx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
