/* test_claim.c - the delivery state machine against a real store and
 * writer, with an injected clock (no sleeps): lease expiry, backoff,
 * dead-lettering, fencing by token, extend, requeue and skip.  Time moves
 * only when the test moves it; the writer fires due deadlines at the start
 * of the next batch. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/buf.h"
#include "engine/claim.h"
#include "core/clock.h"
#include "core/config.h"
#include "engine/delivery.h"
#include "core/err.h"
#include "engine/group.h"
#include "procfx.h"
#include "engine/publish.h"
#include "engine/schedule.h"
#include "store/store.h"
#include "store/log.h"
#include "store/dlv.h"
#include "engine/writer.h"

#include <errno.h>
#include <jansson.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define T0 PROCFX_T0
#define SEC PROCFX_SEC


static void publish(struct procfx *f, const char *body)
{
    assert_int_equal(procfx_publish(f, body, NULL, NULL), MIC_OK);
}

static int claimed(json_t *j)
{
    return (int)json_array_size(json_object_get(j, "deliveries"));
}

static json_t *delivery(json_t *j, size_t i)
{
    return json_array_get(json_object_get(j, "deliveries"), i);
}

static const char *status(json_t *j, size_t i)
{
    return json_string_value(json_object_get(json_array_get(json_object_get(j, "results"), i),
                                             "status"));
}

static void settle(char *out, size_t n, json_t *d)
{
    snprintf(out, n, "{\"deliveries\":[{\"seq\":%lld,\"lease_token\":\"%s\"}]}",
             (long long)json_integer_value(json_object_get(d, "seq")),
             json_string_value(json_object_get(d, "lease_token")));
}

static struct mic_dlv dlv_of(struct procfx *f, const char *group, uint64_t seq)
{
    struct mic_dlv d;
    mic_txn *t;
    uint32_t gid;

    assert_int_equal(mic_txn_begin(f->store, 0, &t), MIC_OK);
    assert_int_equal(mic_group_gid(t, group, &gid), MIC_OK);
    assert_int_equal(mic_delivery_get(t, gid, seq, &d), MIC_OK);
    mic_txn_abort(t);
    return d;
}

/* ---- Tests ---- */

static void lease_expiry_redelivers(void **state)
{
    struct procfx *f = *state;
    json_t *a, *b;
    char body[256];

    procfx_group(f, "g", "{\"topics\":[\"t\"],\"lease_ttl_s\":30,\"backoff\":{\"initial_ms\":0,\"max_ms\":0}}");
    publish(f, "{\"event_id\":\"e1\",\"topic\":\"t\"}");
    a = procfx_call(f, MIC_CLAIM, "g", "{\"max\":5}");
    assert_int_equal(claimed(a), 1);
    assert_int_equal(json_integer_value(json_object_get(delivery(a, 0), "attempt")), 1);
    b = procfx_call(f, MIC_CLAIM, "g", "{}");
    assert_int_equal(claimed(b), 0); /* leased: nobody else gets it */
    json_decref(b);
    procfx_now += 29 * SEC;
    b = procfx_call(f, MIC_CLAIM, "g", "{}");
    assert_int_equal(claimed(b), 0); /* not yet */
    json_decref(b);
    procfx_now += 2 * SEC;
    b = procfx_call(f, MIC_CLAIM, "g", "{}");
    assert_int_equal(claimed(b), 1); /* the lease ended: attempt 2 */
    assert_int_equal(json_integer_value(json_object_get(delivery(b, 0), "attempt")), 2);
    assert_string_not_equal(json_string_value(json_object_get(delivery(a, 0), "lease_token")),
                            json_string_value(json_object_get(delivery(b, 0), "lease_token")));
    /* The first holder is fenced off. */
    settle(body, sizeof body, delivery(a, 0));
    json_decref(b);
    b = procfx_call(f, MIC_ACK, "g", body);
    assert_string_equal(status(b, 0), "lease_lost");
    assert_int_equal(dlv_of(f, "g", 1).state, MIC_DLV_PROCESSING);
    json_decref(b);
    json_decref(a);
}

static void backoff_then_dlq(void **state)
{
    struct procfx *f = *state;
    json_t *a, *r;
    char body[256];
    struct mic_dlv d;

    procfx_group(f, "g", "{\"topics\":[\"t\"],\"max_attempts\":3,"
                       "\"backoff\":{\"initial_ms\":1000,\"max_ms\":4000,\"multiplier\":2}}");
    publish(f, "{\"event_id\":\"e1\",\"topic\":\"t\"}");
    for (int attempt = 1; attempt <= 3; attempt++) {
        a = procfx_call(f, MIC_CLAIM, "g", "{}");
        assert_int_equal(claimed(a), 1);
        assert_int_equal(json_integer_value(json_object_get(delivery(a, 0), "attempt")), attempt);
        snprintf(body, sizeof body, "{\"deliveries\":[{\"seq\":1,\"lease_token\":\"%s\"}],\"error\":\"e%d\"}",
                 json_string_value(json_object_get(delivery(a, 0), "lease_token")), attempt);
        r = procfx_call(f, MIC_NACK, "g", body);
        if (attempt < 3) {
            int64_t cap = 1000000LL << (attempt - 1); /* full jitter: [0, cap] */
            assert_string_equal(status(r, 0), "retrying");
            d = dlv_of(f, "g", 1);
            assert_int_equal(d.state, MIC_DLV_PENDING);
            assert_true(d.not_before == 0 || (d.not_before >= procfx_now && d.not_before <= procfx_now + cap));
            assert_string_equal(d.last_error, attempt == 1 ? "e1" : "e2");
            if (d.not_before > procfx_now + 1000) {
                json_t *none = procfx_call(f, MIC_CLAIM, "g", "{}");
                assert_int_equal(claimed(none), 0); /* waits for its retry time */
                json_decref(none);
            }
            procfx_now += cap + 1;
        } else {
            assert_string_equal(status(r, 0), "dead_lettered");
            d = dlv_of(f, "g", 1);
            assert_int_equal(d.state, MIC_DLV_DLQ);
            assert_int_equal(d.attempts, 3);
            assert_string_equal(d.last_error, "e3");
        }
        json_decref(r);
        json_decref(a);
    }
    a = procfx_call(f, MIC_CLAIM, "g", "{}");
    assert_int_equal(claimed(a), 0);
    json_decref(a);
    /* Requeue: attempts start again. */
    r = procfx_call(f, MIC_REQUEUE, "g", "{\"seqs\":[1,2]}");
    assert_string_equal(status(r, 0), "requeued");
    assert_string_equal(status(r, 1), "not_found");
    json_decref(r);
    a = procfx_call(f, MIC_CLAIM, "g", "{}");
    assert_int_equal(json_integer_value(json_object_get(delivery(a, 0), "attempt")), 1);
    json_decref(a);
    r = procfx_call(f, MIC_REQUEUE, "g", "{\"seqs\":[1]}");
    assert_string_equal(status(r, 0), "not_in_dlq");
    json_decref(r);
}

static void expiry_at_max_attempts_dead_letters(void **state)
{
    struct procfx *f = *state;
    json_t *a, *r;
    char body[256];

    procfx_group(f, "g", "{\"topics\":[\"t\"],\"max_attempts\":1,\"lease_ttl_s\":5}");
    publish(f, "{\"event_id\":\"e1\",\"topic\":\"t\"}");
    a = procfx_call(f, MIC_CLAIM, "g", "{}");
    assert_int_equal(claimed(a), 1);
    procfx_now += 6 * SEC;
    r = procfx_call(f, MIC_CLAIM, "g", "{}"); /* the batch fires the expiry first */
    assert_int_equal(claimed(r), 0);
    json_decref(r);
    assert_int_equal(dlv_of(f, "g", 1).state, MIC_DLV_DLQ);
    assert_string_equal(dlv_of(f, "g", 1).last_error, "lease expired");
    /* Dead-lettered by its expiry: the old token is lost. */
    settle(body, sizeof body, delivery(a, 0));
    r = procfx_call(f, MIC_ACK, "g", body);
    assert_string_equal(status(r, 0), "lease_lost");
    json_decref(r);
    r = procfx_call(f, MIC_SKIP, "g", "{\"seqs\":[1]}");
    assert_string_equal(status(r, 0), "skipped");
    json_decref(r);
    assert_int_equal(dlv_of(f, "g", 1).state, MIC_DLV_SKIPPED);
    json_decref(a);
}

static void expired_token_honoured_until_reclaimed(void **state)
{
    struct procfx *f = *state;
    json_t *a, *r;
    char body[256];

    procfx_group(f, "g", "{\"topics\":[\"t\"],\"lease_ttl_s\":5,\"backoff\":{\"initial_ms\":60000,\"max_ms\":60000,\"multiplier\":1}}");
    publish(f, "{\"event_id\":\"e1\",\"topic\":\"t\"}");
    publish(f, "{\"event_id\":\"e2\",\"topic\":\"t\"}");
    a = procfx_call(f, MIC_CLAIM, "g", "{\"max\":2}");
    assert_int_equal(claimed(a), 2);
    procfx_now += 6 * SEC;
    r = procfx_call(f, MIC_CLAIM, "g", "{}"); /* expiries fire; retries are 0..60 s away */
    json_decref(r);
    /* e1: the expired token still acks. */
    settle(body, sizeof body, delivery(a, 0));
    r = procfx_call(f, MIC_ACK, "g", body);
    assert_string_equal(status(r, 0), "acked");
    json_decref(r);
    assert_int_equal(dlv_of(f, "g", 1).state, MIC_DLV_DISPATCHED);
    /* Acking again answers the same. */
    r = procfx_call(f, MIC_ACK, "g", body);
    assert_string_equal(status(r, 0), "acked");
    json_decref(r);
    /* e2: extend revives the expired lease. */
    settle(body, sizeof body, delivery(a, 1));
    body[strlen(body) - 1] = 0;
    strcat(body, ",\"lease_ttl_s\":100}");
    r = procfx_call(f, MIC_EXTEND, "g", body);
    assert_string_equal(status(r, 0), "extended");
    json_decref(r);
    assert_int_equal(dlv_of(f, "g", 2).state, MIC_DLV_PROCESSING);
    assert_int_equal(dlv_of(f, "g", 2).lease_expires, procfx_now + 100 * SEC);
    procfx_now += 61 * SEC; /* past any retry time: still leased, not redelivered */
    r = procfx_call(f, MIC_CLAIM, "g", "{}");
    assert_int_equal(claimed(r), 0);
    json_decref(r);
    json_decref(a);
}

/* ---- A claim answered 507 grants nothing (issue 29, point 6) ---- */

static int dlv_no_room(const char *db)
{
    return strcmp(db, "dlv") == 0 ? ENOSPC : 0;
}

/* The token of claim answer 'a''s delivery 'i', decoded. */
static void token_of(json_t *a, size_t i, uint8_t out[MIC_TOKEN_LEN])
{
    const char *h = json_string_value(json_object_get(delivery(a, i), "lease_token"));

    assert_non_null(h);
    assert_int_equal(strlen(h), 2 * MIC_TOKEN_LEN);
    for (int k = 0; k < MIC_TOKEN_LEN; k++) {
        unsigned v;
        assert_int_equal(sscanf(h + 2 * k, "%2x", &v), 1);
        out[k] = (uint8_t)v;
    }
}

/* A claim whose commit finds no room (the map at its limit, the
 * filesystem full under LMDB, or -- since the journal keeps each record's
 * room before the commit -- no room for its journal record) is answered
 * 507 and changed nothing: the same deliveries are claimable at once,
 * attempts as before, e1 (whose earlier lease ran out) exactly as it was
 * (its old token, its worker), and the figures count no lease and no
 * redelivery.  (Before the journal kept the room, the sync could find
 * none after the commit: the claim was answered 507 with its leases
 * standing.) */
static void claim_answered_507_grants_nothing(void **state)
{
    struct procfx *f = *state;
    struct mic_error e;
    mic_claim *c;
    json_t *a, *b;
    uint8_t t1[MIC_TOKEN_LEN];
    uint64_t fig[MIC_GSTAT_N];
    struct mic_dlv d1, d2;
    mic_txn *t;
    uint32_t gid;
    const char *body = "{\"max\":10,\"worker\":\"lost\"}";

    procfx_group(f, "g", "{\"topics\":[\"t\"],\"lease_ttl_s\":5,\"backoff\":{\"initial_ms\":0,\"max_ms\":0}}");
    publish(f, "{\"event_id\":\"e1\",\"topic\":\"t\"}");
    a = procfx_call(f, MIC_CLAIM, "g", "{\"worker\":\"first\"}");
    assert_int_equal(claimed(a), 1);
    token_of(a, 0, t1);
    procfx_now += 6 * SEC; /* e1's lease runs out: pending, its token still good */
    publish(f, "{\"event_id\":\"e2\",\"topic\":\"t\"}");
    d1 = dlv_of(f, "g", 1);
    assert_int_equal(d1.state, MIC_DLV_PENDING);
    assert_int_equal(d1.attempts, 1);

    mic_store_set_fault(dlv_no_room);
    assert_int_equal(mic_claim_parse(MIC_CLAIM, "g", body, strlen(body), &f->cfg, &c, &e), MIC_OK);
    assert_int_equal(procfx_run_rc(f, mic_claim_op(c)), MIC_ENOSPC);
    mic_claim_free(c);
    mic_store_set_fault(NULL);
    d1 = dlv_of(f, "g", 1);
    d2 = dlv_of(f, "g", 2);
    if (d1.state != MIC_DLV_PENDING || d2.state != MIC_DLV_PENDING)
        fail_msg("after a claim answered 507: e1 attempts %u worker '%s', e2 attempts %u "
                 "worker '%s' (leases the client never got)",
                 d1.attempts, d1.worker, d2.attempts, d2.worker);
    assert_int_equal(d1.attempts, 1);
    assert_memory_equal(d1.token, t1, MIC_TOKEN_LEN);
    assert_string_equal(d1.worker, "first");
    assert_int_equal(d2.attempts, 0);
    assert_int_equal(d2.handed, 0);
    assert_int_equal(mic_txn_begin(f->store, 0, &t), MIC_OK);
    assert_int_equal(mic_group_gid(t, "g", &gid), MIC_OK);
    assert_int_equal(mic_delivery_figures(t, gid, fig), MIC_OK);
    mic_txn_abort(t);
    assert_int_equal(fig[MIC_GSTAT_PROCESSING], 0);
    assert_int_equal(fig[MIC_GSTAT_PENDING], 2);
    assert_int_equal(fig[MIC_GSTAT_REDELIVERIES], 0);
    b = procfx_call(f, MIC_CLAIM, "g", "{\"max\":10}");
    assert_int_equal(claimed(b), 2);
    assert_int_equal(json_integer_value(json_object_get(delivery(b, 0), "seq")), 1);
    assert_int_equal(json_integer_value(json_object_get(delivery(b, 0), "attempt")), 2);
    assert_int_equal(json_integer_value(json_object_get(delivery(b, 1), "seq")), 2);
    assert_int_equal(json_integer_value(json_object_get(delivery(b, 1), "attempt")), 1);
    json_decref(b);
    json_decref(a);
}

/* A nack ends the lease (DESIGN sections 2 and 12): the delivery waits
 * for its retry, and the nacking worker's token answers lease_lost to
 * extend, ack and nack, changing nothing.  Unlike an expired lease, which
 * its token may still settle or extend until another worker claims it. */
static void nack_ends_the_lease(void **state)
{
    struct procfx *f = *state;
    static const char *const verbs[] = {"extend", "ack", "nack"};
    const int kinds[] = {MIC_EXTEND, MIC_ACK, MIC_NACK};
    json_t *a, *b, *r;
    char body[256];
    struct mic_dlv d;

    procfx_group(f, "g", "{\"topics\":[\"t\"],\"lease_ttl_s\":30}");
    publish(f, "{\"event_id\":\"e1\",\"topic\":\"t\"}");
    /* Nacked with a retry a minute away: pending in its backoff. */
    a = procfx_call(f, MIC_CLAIM, "g", "{}");
    assert_int_equal(claimed(a), 1);
    settle(body, sizeof body, delivery(a, 0));
    body[strlen(body) - 1] = 0;
    strcat(body, ",\"retry_after_s\":60}");
    r = procfx_call(f, MIC_NACK, "g", body);
    assert_string_equal(status(r, 0), "retrying");
    json_decref(r);
    d = dlv_of(f, "g", 1);
    assert_int_equal(d.state, MIC_DLV_PENDING);
    assert_int_equal(d.not_before, procfx_now + 60 * SEC);
    for (int i = 0; i < 3; i++) {
        settle(body, sizeof body, delivery(a, 0));
        r = procfx_call(f, kinds[i], "g", body);
        if (strcmp(status(r, 0), "lease_lost"))
            fail_msg("%s with the token of a nacked lease (pending in its backoff): %s, "
                     "expected lease_lost", verbs[i], status(r, 0));
        json_decref(r);
        d = dlv_of(f, "g", 1);
        assert_int_equal(d.state, MIC_DLV_PENDING);
        assert_int_equal(d.not_before, procfx_now + 60 * SEC); /* the backoff stands */
        assert_int_equal(d.attempts, 1);
    }
    /* Its retry comes: the next claim gets it, attempt 2. */
    procfx_now += 61 * SEC;
    b = procfx_call(f, MIC_CLAIM, "g", "{}");
    assert_int_equal(claimed(b), 1);
    assert_int_equal(json_integer_value(json_object_get(delivery(b, 0), "attempt")), 2);
    json_decref(b);
    json_decref(a);
    /* Nacked to be claimable at once (retry_after_s 0): the old token
     * cannot take the ready delivery back either. */
    publish(f, "{\"event_id\":\"e2\",\"topic\":\"t\"}");
    a = procfx_call(f, MIC_CLAIM, "g", "{}");
    assert_int_equal(claimed(a), 1);
    assert_int_equal(json_integer_value(json_object_get(delivery(a, 0), "seq")), 2);
    settle(body, sizeof body, delivery(a, 0));
    body[strlen(body) - 1] = 0;
    strcat(body, ",\"retry_after_s\":0}");
    r = procfx_call(f, MIC_NACK, "g", body);
    assert_string_equal(status(r, 0), "retrying");
    json_decref(r);
    settle(body, sizeof body, delivery(a, 0));
    r = procfx_call(f, MIC_EXTEND, "g", body);
    assert_string_equal(status(r, 0), "lease_lost");
    json_decref(r);
    assert_int_equal(dlv_of(f, "g", 2).state, MIC_DLV_PENDING);
    b = procfx_call(f, MIC_CLAIM, "g", "{}");
    assert_int_equal(claimed(b), 1);
    assert_int_equal(json_integer_value(json_object_get(delivery(b, 0), "seq")), 2);
    json_decref(b);
    json_decref(a);
}

static void priority_then_seq(void **state)
{
    struct procfx *f = *state;
    json_t *a;

    procfx_group(f, "g", "{\"topics\":[\"t*\"]}");
    publish(f, "{\"event_id\":\"p0\",\"topic\":\"t1\"}");
    publish(f, "{\"event_id\":\"p5\",\"topic\":\"t2\",\"priority\":5}");
    publish(f, "{\"event_id\":\"p0b\",\"topic\":\"t1\"}");
    publish(f, "{\"event_id\":\"p9\",\"topic\":\"t1\",\"priority\":9}");
    publish(f, "{\"event_id\":\"x\",\"topic\":\"other\",\"priority\":9}");
    a = procfx_call(f, MIC_CLAIM, "g", "{\"max\":10}");
    assert_int_equal(claimed(a), 4);
    assert_int_equal(json_integer_value(json_object_get(delivery(a, 0), "seq")), 4);
    assert_int_equal(json_integer_value(json_object_get(delivery(a, 1), "seq")), 2);
    assert_int_equal(json_integer_value(json_object_get(delivery(a, 2), "seq")), 1);
    assert_int_equal(json_integer_value(json_object_get(delivery(a, 3), "seq")), 3);
    json_decref(a);
}

static void deadlines_fire_in_order(void **state)
{
    struct procfx *f = *state;
    json_t *a, *b;

    procfx_group(f, "g", "{\"topics\":[\"t\"],\"backoff\":{\"initial_ms\":0,\"max_ms\":0}}");
    publish(f, "{\"event_id\":\"e1\",\"topic\":\"t\"}");
    publish(f, "{\"event_id\":\"e2\",\"topic\":\"t\"}");
    publish(f, "{\"event_id\":\"e3\",\"topic\":\"t\"}");
    a = procfx_call(f, MIC_CLAIM, "g", "{\"lease_ttl_s\":10}");
    json_decref(a);
    a = procfx_call(f, MIC_CLAIM, "g", "{\"lease_ttl_s\":20}");
    json_decref(a);
    a = procfx_call(f, MIC_CLAIM, "g", "{\"lease_ttl_s\":30}");
    json_decref(a);
    procfx_now += 21 * SEC;
    b = procfx_call(f, MIC_CLAIM, "g", "{\"max\":10}");
    assert_int_equal(claimed(b), 2); /* seqs 1 and 2 expired, 3 still leased */
    assert_int_equal(json_integer_value(json_object_get(delivery(b, 0), "seq")), 1);
    assert_int_equal(json_integer_value(json_object_get(delivery(b, 1), "seq")), 2);
    assert_int_equal(dlv_of(f, "g", 3).state, MIC_DLV_PROCESSING);
    json_decref(b);
}

static void backfill_in_chunks(void **state)
{
    struct procfx *f = *state;
    json_t *a;
    char body[64];
    int total = 0;

    for (int i = 0; i < 5000; i++) { /* more than one backfill chunk */
        snprintf(body, sizeof body, "{\"topic\":\"%s\"}", i % 2 ? "t" : "u");
        publish(f, body);
    }
    procfx_group(f, "g", "{\"topics\":[\"t\"]}");
    procfx_group(f, "n", "{\"topics\":[\"t\"],\"start\":\"new\"}");
    publish(f, "{\"event_id\":\"after\",\"topic\":\"t\"}");
    for (int round = 0; round < 100 && total < 2501; round++) {
        a = procfx_call(f, MIC_CLAIM, "g", "{\"max\":1000}");
        total += claimed(a);
        json_decref(a);
    }
    assert_int_equal(total, 2501);
    a = procfx_call(f, MIC_CLAIM, "n", "{\"max\":1000}");
    assert_int_equal(claimed(a), 1);
    json_decref(a);
}

/* Two stores, each with its own registry, schedule and writer, in one
 * process: the writer-thread state (registry, the engine's figures and
 * jitter state, the schedule) is per writer, so neither sees the other's
 * groups, deliveries or figures. */
static void two_writers_one_process(void **state)
{
    struct procfx *a = *state, *b;
    json_t *c, *r;
    char body[256];
    mic_txn *t;
    uint32_t gid;
    uint64_t fig[MIC_GSTAT_N];

    assert_int_equal(procfx_setup((void **)&b), 0);
    procfx_group(a, "g", "{\"topics\":[\"t\"]}");
    procfx_group(b, "g", "{\"topics\":[\"t\"],\"max_attempts\":1}");
    publish(a, "{\"event_id\":\"a1\",\"topic\":\"t\"}");
    publish(a, "{\"event_id\":\"a2\",\"topic\":\"t\"}");
    publish(b, "{\"event_id\":\"b1\",\"topic\":\"t\"}");
    c = procfx_call(b, MIC_CLAIM, "g", "{\"max\":10}");
    assert_int_equal(claimed(c), 1);
    settle(body, sizeof body, delivery(c, 0));
    r = procfx_call(b, MIC_NACK, "g", body);
    assert_string_equal(status(r, 0), "dead_lettered"); /* b's max_attempts, not a's */
    json_decref(r);
    json_decref(c);
    c = procfx_call(a, MIC_CLAIM, "g", "{\"max\":10}");
    assert_int_equal(claimed(c), 2);
    json_decref(c);
    assert_int_equal(mic_txn_begin(a->store, 0, &t), MIC_OK);
    assert_int_equal(mic_group_gid(t, "g", &gid), MIC_OK);
    assert_int_equal(mic_delivery_figures(t, gid, fig), MIC_OK);
    mic_txn_abort(t);
    assert_int_equal(fig[MIC_GSTAT_PROCESSING], 2);
    assert_int_equal(fig[MIC_GSTAT_DLQ], 0);
    assert_int_equal(mic_txn_begin(b->store, 0, &t), MIC_OK);
    assert_int_equal(mic_group_gid(t, "g", &gid), MIC_OK);
    assert_int_equal(mic_delivery_figures(t, gid, fig), MIC_OK);
    mic_txn_abort(t);
    assert_int_equal(fig[MIC_GSTAT_PROCESSING], 0);
    assert_int_equal(fig[MIC_GSTAT_DLQ], 1);
    procfx_teardown((void **)&b); /* a's teardown follows */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(two_writers_one_process, procfx_setup, procfx_teardown),
        cmocka_unit_test_setup_teardown(lease_expiry_redelivers, procfx_setup, procfx_teardown),
        cmocka_unit_test_setup_teardown(backoff_then_dlq, procfx_setup, procfx_teardown),
        cmocka_unit_test_setup_teardown(expiry_at_max_attempts_dead_letters, procfx_setup, procfx_teardown),
        cmocka_unit_test_setup_teardown(expired_token_honoured_until_reclaimed, procfx_setup, procfx_teardown),
        cmocka_unit_test_setup_teardown(nack_ends_the_lease, procfx_setup, procfx_teardown),
        cmocka_unit_test_setup_teardown(priority_then_seq, procfx_setup, procfx_teardown),
        cmocka_unit_test_setup_teardown(deadlines_fire_in_order, procfx_setup, procfx_teardown),
        cmocka_unit_test_setup_teardown(backfill_in_chunks, procfx_setup, procfx_teardown),
        cmocka_unit_test_setup_teardown(claim_answered_507_grants_nothing, procfx_setup,
                                        procfx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
