/* test_runs.c - replay runs' status in-process, against a real store and
 * writer with an injected clock (no sleeps): the status comes from the run
 * record and its group's counters, and still adds up to the selection
 * when retention removes what it may -- a dead letter of the run, or an
 * event removed between the selection and the run's record -- while an
 * event a run has still to add is kept.  A run record of the first layout
 * (168-byte header) is still read, and listed (mic_replay_list).  A
 * selection read in chunks lets the map grow between two of them, and
 * events published meanwhile into its range stay out of it; the selector
 * thread makes selections and, stopping, ends the running one between two
 * chunks and refuses the rest. */
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
#include "core/digest.h"
#include "core/err.h"
#include "engine/group.h"
#include "wait.h"
#include "procfx.h"
#include "engine/publish.h"
#include "engine/replay.h"
#include "engine/schedule.h"
#include "store/store.h"
#include "store/log.h"
#include "store/catalog.h"
#include "store/dlv.h"
#include "engine/topic.h"
#include "engine/writer.h"

#include <jansson.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
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

/* Record a replay run prepared by create_parse; 'on_done' (may be NULL)
 * runs in the writer thread right after the run's batch committed. */
static void record_run(struct procfx *f, mic_replay_op *o, void (*on_done)(mic_op *))
{
    struct mic_error e;
    struct mic_buf b;
    mic_op *op = mic_replay_op_base(o);

    op->done = on_done;
    procfx_run(f, op);
    mic_buf_init(&b);
    assert_int_equal(mic_replay_op_result(o, &b, &e), MIC_OK);
    mic_buf_fini(&b);
    mic_replay_op_free(o);
}

static mic_replay_op *prepare_run(struct procfx *f, const char *body)
{
    struct mic_error e;
    mic_replay_op *o;

    assert_int_equal(mic_replay_create_parse(f->store, body, strlen(body), &f->cfg, &o, &e), MIC_OK);
    assert_int_equal(mic_replay_select(f->store, o), MIC_OK);
    return o;
}

/* The run's status; asserts selected = dispatched + pending + dlq. */
static json_t *status(struct procfx *f, const char *run_id)
{
    struct mic_error e;
    struct mic_buf b;
    json_t *j;

    mic_buf_init(&b);
    assert_int_equal(mic_replay_get(f->store, run_id, &b, &e), MIC_OK);
    j = json_loadb(b.p, b.len, 0, NULL);
    assert_non_null(j);
    mic_buf_fini(&b);
    assert_int_equal(json_integer_value(json_object_get(j, "selected")),
                     json_integer_value(json_object_get(j, "dispatched")) +
                         json_integer_value(json_object_get(j, "pending")) +
                         json_integer_value(json_object_get(j, "dlq")));
    return j;
}

static void expect_counts(struct procfx *f, const char *run_id, json_int_t dispatched,
                          json_int_t pending, json_int_t dlq, const char *state)
{
    json_t *j = status(f, run_id);

    assert_int_equal(json_integer_value(json_object_get(j, "dispatched")), dispatched);
    assert_int_equal(json_integer_value(json_object_get(j, "pending")), pending);
    assert_int_equal(json_integer_value(json_object_get(j, "dlq")), dlq);
    assert_string_equal(json_string_value(json_object_get(j, "state")), state);
    json_decref(j);
}

static int noop_apply(mic_op *op, struct mic_wctx *w)
{
    (void)op;
    (void)w;
    return MIC_OK;
}

/* One writer batch (retention sweeps, selection chunks run first). */
static void batch(struct procfx *f)
{
    mic_op op;

    memset(&op, 0, sizeof op);
    op.apply = noop_apply;
    procfx_run(f, &op);
}

struct pending_of {
    struct procfx *f;
    const char *group;
    uint64_t want;
};

/* The group's committed pending figure is 'want' (its selection is in). */
static int pending_is(void *arg)
{
    struct pending_of *p = arg;
    uint64_t fig[MIC_GSTAT_N];
    uint32_t gid;
    mic_txn *t;
    int ok;

    assert_int_equal(mic_txn_begin(p->f->store, 0, &t), MIC_OK);
    ok = mic_group_gid(t, p->group, &gid) == MIC_OK &&
         mic_delivery_figures(t, gid, fig) == MIC_OK && fig[MIC_GSTAT_PENDING] == p->want;
    mic_txn_abort(t);
    return ok;
}

struct state_of {
    struct procfx *f;
    const char *run_id, *want;
};

static int state_is(void *arg)
{
    struct state_of *s = arg;
    json_t *j = status(s->f, s->run_id);
    int ok = !strcmp(json_string_value(json_object_get(j, "state")), s->want);

    json_decref(j);
    return ok;
}

/* Claim up to 'max' of 'group', through as many batches as its heads take
 * to be released (at most 100); returns the answer. */
static json_t *claim_some(struct procfx *f, const char *group, int max)
{
    char body[32];
    json_t *c = NULL;

    snprintf(body, sizeof body, "{\"max\":%d}", max);
    for (int i = 0; i < 100; i++) {
        c = procfx_call(f, MIC_CLAIM, group, body);
        if (json_array_size(json_object_get(c, "deliveries")))
            return c;
        json_decref(c);
    }
    fail_msg("nothing to claim in %s", group);
    return NULL;
}

/* Settle delivery 'd' (a claimed one) with 'kind'. */
static void settle_one(struct procfx *f, int kind, const char *group, json_t *d)
{
    char body[256];

    snprintf(body, sizeof body,
             "{\"deliveries\":[{\"seq\":%lld,\"lease_token\":\"%s\"}]%s}",
             (long long)json_integer_value(json_object_get(d, "seq")),
             json_string_value(json_object_get(d, "lease_token")),
             kind == MIC_NACK ? ",\"retry_after_s\":0" : "");
    json_decref(procfx_call(f, kind, group, body));
}

/* ---- Tests ---- */

/* A dead letter of the run whose event retention removes stays counted in
 * dlq: the run drains instead of waiting for it forever. */
static void removed_dead_letter_stays_counted(void **state)
{
    struct procfx *f = *state;
    struct pending_of p = {f, "replay.r1", 2};
    json_t *c, *d;
    size_t i;

    procfx_topic(f, "t", "{\"retention_s\":1}");
    publish(f, "{\"event_id\":\"e1\",\"topic\":\"t\"}");
    publish(f, "{\"event_id\":\"e2\",\"topic\":\"t\"}");
    record_run(f, prepare_run(f, "{\"topic\":\"t\",\"run_id\":\"r1\"}"), NULL);
    assert_true(await(pending_is, &p, 10000));
    expect_counts(f, "r1", 0, 2, 0, "running");
    /* e1 is acked, e2 dead-lettered (10 attempts, retried at once). */
    for (int attempt = 1; attempt <= 10; attempt++) {
        c = claim_some(f, "replay.r1", 2);
        assert_int_equal(json_array_size(json_object_get(c, "deliveries")), attempt == 1 ? 2 : 1);
        json_array_foreach(json_object_get(c, "deliveries"), i, d) {
            const char *id = json_string_value(json_object_get(json_object_get(d, "event"),
                                                               "event_id"));
            settle_one(f, strcmp(id, "e1") ? MIC_NACK : MIC_ACK, "replay.r1", d);
        }
        json_decref(c);
    }
    expect_counts(f, "r1", 1, 0, 1, "drained");
    /* Past retention: both go (terminal in every group). */
    procfx_now += 2 * SEC;
    batch(f);
    assert_false(procfx_stored(f->store, "e1"));
    assert_false(procfx_stored(f->store, "e2"));
    expect_counts(f, "r1", 1, 0, 1, "drained");
}

static void advance_clock(mic_op *op)
{
    procfx_now += 2 * SEC; /* before the next batch: its sweep sees all due */
    sem_post(op->owner);
}

/* A run keeps the events it has still to add: retention, due for all of
 * them right after the run is recorded, removes none of its selection. */
static void run_keeps_what_it_has_not_added(void **state)
{
    struct procfx *f = *state;
    struct pending_of p = {f, "replay.big", 5000};
    struct mic_buf b;
    uint64_t n;
    mic_txn *t;
    char when[MIC_TIME_LEN + 1];

    procfx_topic(f, "t", "{\"retention_s\":1}");
    /* created_at falls as seq rises: the selection walk (created_at order)
     * reaches last the events retention looks at first (received order). */
    for (int k = 0; k < 5; k++) {
        mic_buf_init(&b);
        mic_buf_puts(&b, "{\"events\":[");
        for (int i = 0; i < 1000; i++) {
            int ix = k * 1000 + i;
            mic_time_format(T0 - (int64_t)(ix + 1) * 1000, when);
            mic_buf_printf(&b, "%s{\"event_id\":\"e%d\",\"topic\":\"t\",\"created_at\":\"%s\"}",
                           i ? "," : "", ix, when);
        }
        mic_buf_puts(&b, "]}");
        assert_false(b.oom);
        publish(f, b.p);
        mic_buf_fini(&b);
    }
    record_run(f, prepare_run(f, "{\"topic\":\"t\",\"run_id\":\"big\"}"), advance_clock);
    expect_counts(f, "big", 0, 5000, 0, "running");
    assert_true(await(pending_is, &p, 20000));
    batch(f);
    assert_int_equal(mic_txn_begin(f->store, 0, &t), MIC_OK);
    assert_int_equal(mic_store_log_count(t, &n), MIC_OK);
    mic_txn_abort(t);
    assert_int_equal(n, 5000);
    assert_true(procfx_stored(f->store, "e0"));
    expect_counts(f, "big", 0, 5000, 0, "running");
}

/* Selected events removed between the selection (handler) and the run's
 * record (writer) are counted lost (in dlq) when the walk ends. */
static void removed_before_the_record_is_lost(void **state)
{
    struct procfx *f = *state;
    struct state_of s = {f, "late", "drained"};
    mic_replay_op *o;

    procfx_topic(f, "t", "{\"retention_s\":1}");
    publish(f, "{\"event_id\":\"e1\",\"topic\":\"t\"}");
    publish(f, "{\"event_id\":\"e2\",\"topic\":\"t\"}");
    o = prepare_run(f, "{\"topic\":\"t\",\"run_id\":\"late\"}");
    procfx_now += 2 * SEC;
    batch(f); /* e1 and e2 go: no group holds them yet */
    assert_false(procfx_stored(f->store, "e1"));
    assert_false(procfx_stored(f->store, "e2"));
    record_run(f, o, NULL);
    assert_true(await(state_is, &s, 10000));
    expect_counts(f, "late", 0, 0, 2, "drained");
}

struct put_run {
    mic_op op; /* first */
    const char *id;
    const void *val;
    size_t len;
};

static int put_run_apply(mic_op *op, struct mic_wctx *w)
{
    struct put_run *p = (struct put_run *)op;

    return mic_store_run_put(w->txn, p->id, strlen(p->id), p->val, p->len);
}

/* A record of the first layout (168-byte header, byte 3 zero) answers the
 * same status. */
static void first_layout_record_is_read(void **state)
{
    struct procfx *f = *state;
    struct put_run p;
    json_t *before, *after, *c;
    const void *val;
    uint8_t *old;
    size_t vlen, olen;
    mic_txn *t;

    publish(f, "{\"event_id\":\"e1\",\"topic\":\"t\"}");
    publish(f, "{\"event_id\":\"e2\",\"topic\":\"t\"}");
    record_run(f, prepare_run(f, "{\"topic\":\"t\",\"run_id\":\"old\"}"), NULL);
    /* Ack one. */
    c = claim_some(f, "replay.old", 1);
    settle_one(f, MIC_ACK, "replay.old", json_array_get(json_object_get(c, "deliveries"), 0));
    json_decref(c);
    before = status(f, "old");
    assert_int_equal(json_integer_value(json_object_get(before, "dispatched")), 1);
    assert_int_equal(json_integer_value(json_object_get(before, "pending")), 1);

    assert_int_equal(mic_txn_begin(f->store, 0, &t), MIC_OK);
    assert_int_equal(mic_store_run_get(t, "old", 3, &val, &vlen), MIC_OK);
    assert_true(vlen > 192);
    assert_int_equal(((const uint8_t *)val)[3], 1);
    olen = vlen - 192 + 168;
    old = malloc(olen);
    assert_non_null(old);
    memcpy(old, val, 168);
    memcpy(old + 168, (const uint8_t *)val + 192, vlen - 192);
    mic_txn_abort(t);
    old[3] = 0;
    memset(&p, 0, sizeof p);
    p.op.apply = put_run_apply;
    p.id = "old";
    p.val = old;
    p.len = olen;
    procfx_run(f, &p.op);
    free(old);

    after = status(f, "old");
    assert_true(json_equal(before, after));
    /* The listing answers the same. */
    {
        struct mic_error e;
        struct mic_buf b;
        json_t *l;

        mic_buf_init(&b);
        assert_int_equal(mic_replay_list(f->store, &b, &e), MIC_OK);
        l = json_loadb(b.p, b.len, 0, NULL);
        mic_buf_fini(&b);
        assert_int_equal(json_array_size(json_object_get(l, "replays")), 1);
        assert_true(json_equal(json_array_get(json_object_get(l, "replays"), 0), after));
        json_decref(l);
    }
    json_decref(before);
    json_decref(after);
}

/* No run: an empty list. */
static void no_runs_list(void **state)
{
    struct procfx *f = *state;
    struct mic_error e;
    struct mic_buf b;

    mic_buf_init(&b);
    assert_int_equal(mic_replay_list(f->store, &b, &e), MIC_OK);
    assert_int_equal(b.len, strlen("{\"replays\":[]}"));
    assert_memory_equal(b.p, "{\"replays\":[]}", b.len);
    mic_buf_fini(&b);
}

/* ---- A selection read in chunks ---- */

#define SEL_EVENTS 3000
#define SEL_CHUNK 500
#define SEL_BASE (T0 - 10 * SEC)
#define SEL_WAIT_MS 10000

/* What the hook between two chunks of the selection did. */
struct grow {
    struct procfx *f;
    int calls;
    int answered;           /* publishes answered while the selection ran */
    uint64_t map_before, map_after;
    mic_publish *late;      /* a publish not answered in SEL_WAIT_MS */
    atomic_int done;
};

static void grow_done(mic_op *op)
{
    atomic_store((atomic_int *)op->owner, 1);
}

static int grow_answered(void *arg)
{
    return atomic_load((atomic_int *)arg);
}

static uint64_t map_size(mic_store *s)
{
    uint64_t size, used, max;

    mic_store_usage(s, &size, &used, &max);
    return size;
}

/* Between the first two chunks: publish batches of 100 events of 4 KB
 * into the selection's range until the map has grown (64 batches at
 * most), each awaited for SEL_WAIT_MS.  Asserts nothing (a read
 * transaction may be open): the test checks what it recorded. */
static void grow_between_chunks(void *arg)
{
    struct grow *g = arg;
    struct mic_error e;
    struct mic_buf b;
    char when[MIC_TIME_LEN + 1], pad[4097];
    mic_publish *p;
    mic_op *op;

    if (g->calls++)
        return;
    memset(pad, 'x', sizeof pad - 1);
    pad[sizeof pad - 1] = 0;
    g->map_before = map_size(g->f->store);
    for (int k = 0; k < 64 && map_size(g->f->store) == g->map_before; k++) {
        mic_buf_init(&b);
        mic_buf_puts(&b, "{\"events\":[");
        for (int i = 0; i < 100; i++) {
            int ix = k * 100 + i;
            /* At the created_at of a selected event, after it (h > e). */
            mic_time_format(SEL_BASE + (int64_t)(ix % (SEL_EVENTS / 3)) * 1000, when);
            mic_buf_printf(&b, "%s{\"event_id\":\"h%05d\",\"topic\":\"t\",\"created_at\":\"%s\","
                               "\"payload\":{\"pad\":\"%s\"}}", i ? "," : "", ix, when, pad);
        }
        mic_buf_puts(&b, "]}");
        if (b.oom || mic_publish_parse(b.p, b.len, &g->f->cfg, &p, &e)) {
            mic_buf_fini(&b);
            return;
        }
        mic_buf_fini(&b);
        op = mic_publish_op(p);
        op->done = grow_done;
        op->owner = &g->done;
        atomic_store(&g->done, 0);
        if (mic_writer_submit(g->f->w, op)) {
            mic_publish_free(p);
            return;
        }
        if (!await(grow_answered, &g->done, SEL_WAIT_MS)) {
            g->late = p; /* still queued: the test waits for it */
            return;
        }
        if (op->result == MIC_OK)
            g->answered++;
        mic_publish_free(p);
    }
    g->map_after = map_size(g->f->store);
}

/* A selection in chunks: a map growth between two of them goes through
 * (the publishes that need it are answered while the selection runs), the
 * events they add to its range are not selected, and count and digest
 * are those of the events stored when it was asked for. */
static void selection_lets_the_map_grow(void **state)
{
    static const char *const argv[] = {"micd", "--map-size", "1M", "--map-max", "1G", NULL};
    struct procfx *f = *state;
    struct pending_of p = {f, "replay.sel", SEL_EVENTS};
    struct grow g;
    struct mic_error e;
    struct mic_buf b, lines;
    mic_replay_op *o;
    json_t *j;
    uint8_t md[32];
    char when[MIC_TIME_LEN + 1], hex[65];
    const char *body = "{\"topic\":\"t\",\"run_id\":\"sel\"}";
    int rc;

    procfx_close(f);
    assert_int_equal(procfx_open(f, "mic-runs", 5, argv), 0);
    /* Three events per created_at, so chunks end inside a run of equal
     * created_at too; the digest's lines, in the time index's order. */
    mic_buf_init(&lines);
    for (int k = 0; k < SEL_EVENTS / 500; k++) {
        mic_buf_init(&b);
        mic_buf_puts(&b, "{\"events\":[");
        for (int i = 0; i < 500; i++) {
            int ix = k * 500 + i;
            mic_time_format(SEL_BASE + (int64_t)(ix / 3) * 1000, when);
            mic_buf_printf(&b, "%s{\"event_id\":\"e%05d\",\"topic\":\"t\",\"created_at\":\"%s\"}",
                           i ? "," : "", ix, when);
            mic_buf_printf(&lines, "%s\te%05d\n", when, ix);
        }
        mic_buf_puts(&b, "]}");
        assert_false(b.oom);
        publish(f, b.p);
        mic_buf_fini(&b);
    }
    assert_false(lines.oom);
    mic_sha256(lines.p, lines.len, md);
    mic_buf_fini(&lines);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);

    memset(&g, 0, sizeof g);
    g.f = f;
    assert_int_equal(mic_replay_create_parse(f->store, body, strlen(body), &f->cfg, &o, &e),
                     MIC_OK);
    mic_replay_set_select_hook(SEL_CHUNK, grow_between_chunks, &g);
    rc = mic_replay_select(f->store, o);
    mic_replay_set_select_hook(0, NULL, NULL);
    if (g.late) { /* answered once the selection let go of the map */
        while (!atomic_load(&g.done))
            assert_true(await(grow_answered, &g.done, 60000));
        mic_publish_free(g.late);
        mic_replay_op_free(o);
        fail_msg("a publish needing map growth was not answered in %d ms while the "
                 "selection ran (%d answered before it, map %llu bytes)", SEL_WAIT_MS,
                 g.answered, (unsigned long long)g.map_before);
    }
    assert_int_equal(rc, MIC_OK);
    assert_true(g.calls >= SEL_EVENTS / SEL_CHUNK - 1);
    assert_true(g.answered > 0);
    assert_true(g.map_after > g.map_before);

    /* The answer: the events stored when the run was asked for, no other. */
    {
        mic_op *op = mic_replay_op_base(o);

        op->done = NULL;
        procfx_run(f, op);
    }
    mic_buf_init(&b);
    assert_int_equal(mic_replay_op_result(o, &b, &e), MIC_OK);
    j = json_loadb(b.p, b.len, 0, NULL);
    mic_buf_fini(&b);
    mic_replay_op_free(o);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "selected")), SEL_EVENTS);
    assert_string_equal(json_string_value(json_object_get(j, "digest")), hex);
    json_decref(j);
    /* The walk adds those, and none of the events published meanwhile. */
    assert_true(await(pending_is, &p, 20000));
    expect_counts(f, "sel", 0, SEL_EVENTS, 0, "running");
}

/* ---- The selector ---- */

/* The pause after a chunk keeps a selection at 'share' percent of a core:
 * chunk / (chunk + pause) is the share, for every share and a few chunk
 * times (no clock: the pause is computed, not slept). */
static void select_pause_keeps_the_share(void **state)
{
    static const uint64_t chunks[] = {1, 1000, 270000, 1000000, 7000000};

    (void)state;
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        uint64_t ns = chunks[c];

        assert_int_equal(mic_replay_select_pause_ns(ns, 100), 0);
        assert_int_equal(mic_replay_select_pause_ns(ns, 250), 0);
        for (int share = 1; share < 100; share++) {
            uint64_t p = mic_replay_select_pause_ns(ns, share);

            if (ns * (uint64_t)(100 - share) >= 100000000ull * (uint64_t)share) {
                assert_int_equal(p, 100000000); /* bounded: 100 ms */
                continue;
            }
            /* p = ns (100 - share) / share, rounded down: the share is
             * met from above, by less than one ns of pause */
            assert_true(ns * 100 < (ns + p + 1) * (uint64_t)share);
            assert_true(ns * 100 >= (ns + p) * (uint64_t)share);
            /* a lower share pauses longer */
            assert_true(p >= mic_replay_select_pause_ns(ns, share + 1));
        }
        /* below 1: as 1 */
        assert_int_equal(mic_replay_select_pause_ns(ns, 0), mic_replay_select_pause_ns(ns, 1));
        assert_int_equal(mic_replay_select_pause_ns(ns, -5), mic_replay_select_pause_ns(ns, 1));
    }
    assert_int_equal(mic_replay_select_pause_ns(0, 25), 0);
    assert_int_equal(mic_replay_select_pause_ns(1000000, 25), 3000000);
    /* bounded: 100 ms at most, whatever the chunk took */
    assert_int_equal(mic_replay_select_pause_ns(1000000, 1), 99000000);
    assert_int_equal(mic_replay_select_pause_ns(2000000, 1), 100000000);
    assert_int_equal(mic_replay_select_pause_ns(UINT64_MAX, 50), 100000000);
}

/* A selection's done(): its result, once. */
struct picked {
    atomic_int calls, rc;
};

static void on_selected(mic_replay_op *o, int rc, void *arg)
{
    struct picked *p = arg;

    (void)o;
    atomic_store(&p->rc, rc);
    atomic_fetch_add(&p->calls, 1);
}

static int picked_once(void *arg)
{
    return atomic_load(&((struct picked *)arg)->calls) == 1;
}

/* The hook holds the selection at its first chunk's end until released. */
struct hold {
    atomic_int held, release;
};

static int is_set(void *arg)
{
    return atomic_load((atomic_int *)arg);
}

static void hold_selection(void *arg)
{
    struct hold *h = arg;

    if (atomic_exchange(&h->held, 1))
        return;
    (void)await(is_set, &h->release, 30000); /* the test fails if it is not released */
}

static void *stop_selector(void *arg)
{
    mic_selector_stop(arg);
    return NULL;
}

struct refused {
    struct procfx *f;
    mic_selector *sl;
    mic_replay_op *queued[64];
    struct picked picked[64];
    int n;
};

/* Submit one more run: true once the selector refuses it (stopping). */
static int submit_refused(void *arg)
{
    struct refused *r = arg;
    struct mic_error e;
    const char *body = "{\"topic\":\"t\"}";
    mic_replay_op *o;
    int rc;

    if (r->n == 64 ||
        mic_replay_create_parse(r->f->store, body, strlen(body), &r->f->cfg, &o, &e))
        return 0;
    rc = mic_selector_submit(r->sl, o, on_selected, &r->picked[r->n]);
    if (rc == MIC_OK) {
        r->queued[r->n++] = o;
        return 0;
    }
    mic_replay_op_free(o);
    return rc == MIC_ENOTREADY;
}

/* A selection is made in the selector's thread (done() once, with its
 * result: the op is then ready for the writer).  Stopping ends the
 * selection that runs at its next chunk, and those queued before they
 * begin, each answered MIC_ENOTREADY "not_ready"; a later submit is
 * refused. */
static void selector_selects_and_stops(void **state)
{
    struct procfx *f = *state;
    static struct refused r;
    struct picked first, running;
    struct hold h;
    struct mic_error e;
    struct mic_buf b;
    mic_selector *sl;
    mic_replay_op *o, *o2;
    pthread_t stopper;
    json_t *j;
    const char *body = "{\"topic\":\"t\",\"run_id\":\"one\"}";

    mic_buf_init(&b);
    mic_buf_puts(&b, "{\"events\":[");
    for (int i = 0; i < 1000; i++)
        mic_buf_printf(&b, "%s{\"event_id\":\"e%04d\",\"topic\":\"t\"}", i ? "," : "", i);
    mic_buf_puts(&b, "]}");
    assert_false(b.oom);
    publish(f, b.p);
    mic_buf_fini(&b);
    assert_int_equal(mic_selector_start(&sl, f->store, f->cfg.replay_select_share), MIC_OK);

    memset(&first, 0, sizeof first);
    assert_int_equal(mic_replay_create_parse(f->store, body, strlen(body), &f->cfg, &o, &e), MIC_OK);
    assert_int_equal(mic_selector_submit(sl, o, on_selected, &first), MIC_OK);
    assert_true(await(picked_once, &first, 20000));
    assert_int_equal(atomic_load(&first.rc), MIC_OK);
    procfx_run(f, mic_replay_op_base(o));
    mic_buf_init(&b);
    assert_int_equal(mic_replay_op_result(o, &b, &e), MIC_OK);
    j = json_loadb(b.p, b.len, 0, NULL);
    mic_buf_fini(&b);
    mic_replay_op_free(o);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "selected")), 1000);
    json_decref(j);

    /* One selection held between two chunks, then the selector stops. */
    memset(&h, 0, sizeof h);
    memset(&running, 0, sizeof running);
    memset(&r, 0, sizeof r);
    r.f = f;
    r.sl = sl;
    mic_replay_set_select_hook(100, hold_selection, &h);
    body = "{\"topic\":\"t\",\"run_id\":\"two\"}";
    assert_int_equal(mic_replay_create_parse(f->store, body, strlen(body), &f->cfg, &o2, &e), MIC_OK);
    assert_int_equal(mic_selector_submit(sl, o2, on_selected, &running), MIC_OK);
    assert_true(await(is_set, &h.held, 20000));
    assert_int_equal(pthread_create(&stopper, NULL, stop_selector, sl), 0);
    /* Until the stop is seen, what is submitted queues behind the held one. */
    assert_true(await(submit_refused, &r, 20000));
    atomic_store(&h.release, 1);
    assert_int_equal(pthread_join(stopper, NULL), 0);
    mic_replay_set_select_hook(0, NULL, NULL);

    assert_int_equal(atomic_load(&running.calls), 1);
    assert_int_equal(atomic_load(&running.rc), MIC_ENOTREADY);
    mic_buf_init(&b);
    assert_int_equal(mic_replay_op_result(o2, &b, &e), MIC_ENOTREADY);
    assert_string_equal(e.code, "not_ready");
    mic_buf_fini(&b);
    mic_replay_op_free(o2);
    for (int i = 0; i < r.n; i++) {
        assert_int_equal(atomic_load(&r.picked[i].calls), 1);
        assert_int_equal(atomic_load(&r.picked[i].rc), MIC_ENOTREADY);
        mic_replay_op_free(r.queued[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(removed_dead_letter_stays_counted, procfx_setup, procfx_teardown),
        cmocka_unit_test_setup_teardown(run_keeps_what_it_has_not_added, procfx_setup, procfx_teardown),
        cmocka_unit_test_setup_teardown(removed_before_the_record_is_lost, procfx_setup, procfx_teardown),
        cmocka_unit_test_setup_teardown(first_layout_record_is_read, procfx_setup, procfx_teardown),
        cmocka_unit_test_setup_teardown(no_runs_list, procfx_setup, procfx_teardown),
        cmocka_unit_test_setup_teardown(selection_lets_the_map_grow, procfx_setup, procfx_teardown),
        cmocka_unit_test_setup_teardown(selector_selects_and_stops, procfx_setup, procfx_teardown),
        cmocka_unit_test(select_pause_keeps_the_share),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
