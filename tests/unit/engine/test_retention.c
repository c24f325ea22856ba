/* test_sweep.c - the retention sweep in-process, against a real store and
 * writer with an injected clock (no sleeps): the removal of an event finds
 * its topic by id (topics created by PUT, by publish, after a restart, and
 * after a batch that created a topic was aborted and its id reused) and
 * asks only the groups that can hold a delivery of it (exact and prefix
 * subscribers); the archive file is named after the right topic.
 *
 * Retention against a backfill (issue 29, point 4): a group created with
 * start "all" is filled in chunks, one per writer batch; retention that
 * comes due between two chunks keeps every event the backfill has still to
 * add, for an unordered group, an ordered one with versions and without
 * (none is gap-parked), and a replay run's group.  These run a quiet
 * writer: it runs a batch only for an op of the test, so each batch is one
 * backfill chunk, then one sweep, then the op, at the clock the test set. */
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
#include "core/err.h"
#include "engine/delivery.h"
#include "engine/group.h"
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
#include "storedir.h"

#include <errno.h>
#include <jansson.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define T0 1790000000000000LL
#define SEC 1000000LL
#define DAY (86400 * SEC)

static int64_t fake_now;
static int64_t fake_clock(void)
{
    return fake_now;
}

struct fx {
    mic_sched *sched;
    char dir[64], arch[64];
    struct mic_config cfg;
    mic_store *store;
    mic_groups *groups;
    mic_writer *w;
    sem_t sem;
    int quiet;  /* the writer runs no batch of its own (quiet_hooks) */
};

static void done(mic_op *op)
{
    sem_post(op->owner);
}

/* Submit 'op' and wait; returns its result. */
static int run_rc(struct fx *f, mic_op *op)
{
    op->done = done;
    op->owner = &f->sem;
    assert_int_equal(mic_writer_submit(f->w, op), MIC_OK);
    sem_wait(&f->sem);
    return op->result;
}

static void run(struct fx *f, mic_op *op)
{
    assert_int_equal(run_rc(f, op), MIC_OK);
}

/* The schedule's next_due hook, called by no_wakeup. */
static int64_t (*sched_next_due)(struct mic_sched *s, struct mic_wctx *w);

/* A quiet writer's hooks: the schedule's seek of the next deadline still
 * runs, but the writer is told of no deadline ahead and of no background
 * work left, so it never runs a batch of its own (a backfill chunk or a
 * sweep at a clock the test did not choose yet). */
static int64_t no_wakeup(struct mic_sched *s, struct mic_wctx *w)
{
    (void)sched_next_due(s, w);
    return 0;
}

static int never_busy(struct mic_sched *s)
{
    (void)s;
    return 0;
}

static int start(struct fx *f)
{
    struct mic_writer_hooks h;

    if (mic_store_open(&f->store, f->dir, f->cfg.map_size, f->cfg.map_max, 1) ||
        mic_groups_new(&f->groups, f->store) || mic_sched_new(&f->sched, f->groups))
        return -1;
    memset(&h, 0, sizeof h);
    mic_sched_hooks(f->sched, &h);
    if (f->quiet) {
        sched_next_due = h.next_due;
        h.next_due = no_wakeup;
        h.busy = never_busy;
    }
    return mic_writer_start(&f->w, f->store, &f->cfg, &h) ? -1 : 0;
}

static void stop(struct fx *f)
{
    mic_writer_free(f->w);
    mic_sched_free(f->sched);
    mic_groups_free(f->groups);
    mic_store_close(f->store);
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    const char *argv[] = {"micd", "--archive-dir", NULL};
    char err[128];

    fake_now = T0;
    mic_clock_set(fake_clock);
    snprintf(f->dir, sizeof f->dir, "/tmp/mic-sweep-XXXXXX");
    snprintf(f->arch, sizeof f->arch, "/tmp/mic-sweep-arch-XXXXXX");
    if (!mkdtemp(f->dir) || !mkdtemp(f->arch))
        return -1;
    argv[2] = f->arch;
    if (mic_config_load(&f->cfg, 3, (char **)argv, err, sizeof err) || start(f))
        return -1;
    sem_init(&f->sem, 0, 0);
    *state = f;
    return 0;
}

/* setup, with a quiet writer. */
static int setup_quiet(void **state)
{
    struct fx *f;

    if (setup(state))
        return -1;
    f = *state;
    stop(f);
    f->quiet = 1;
    return start(f);
}

static void rm_file(const char *dir, const char *name)
{
    char p[160];

    snprintf(p, sizeof p, "%s/%s", dir, name);
    unlink(p);
}

static int teardown(void **state)
{
    struct fx *f = *state;
    static const char *const files[] = {"keep.ndjson", "auto.ndjson", "real.ndjson",
                                        "ghost.ndjson", "unknown.ndjson"};

    stop(f);
    mic_clock_set(NULL);
    sem_destroy(&f->sem);
    storedir_rm(f->dir);
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        rm_file(f->arch, files[i]);
    rmdir(f->arch);
    free(f);
    return 0;
}

static void make_topic(struct fx *f, const char *name, const char *body)
{
    struct mic_error e;
    struct mic_buf b;
    mic_topic_op *o;
    int created;

    assert_int_equal(mic_topic_put_parse(name, body, strlen(body), &f->cfg, &o, &e), MIC_OK);
    run(f, mic_topic_op_base(o));
    mic_buf_init(&b);
    assert_int_equal(mic_topic_op_result(o, &b, &created, &e), MIC_OK);
    assert_true(created);
    mic_buf_fini(&b);
    mic_topic_op_free(o);
}

static void make_group(struct fx *f, const char *name, const char *body)
{
    struct mic_error e;
    struct mic_buf b;
    mic_group_op *o;
    int created;

    assert_int_equal(mic_group_put_parse(name, body, strlen(body), &f->cfg, &o, &e), MIC_OK);
    run(f, mic_group_op_base(o));
    mic_buf_init(&b);
    assert_int_equal(mic_group_op_result(o, &b, &created, &e), MIC_OK);
    mic_buf_fini(&b);
    mic_group_op_free(o);
}

/* Publish 'body' with store fault hook 'hook' (NULL: none) set while the
 * writer applies it; returns the writer's result, or the refusal's error
 * when the batch was refused. */
static int publish_hooked(struct fx *f, const char *body, int (*hook)(const char *db))
{
    struct mic_error e;
    struct mic_buf b;
    mic_publish *p;
    int rc, dup;

    assert_int_equal(mic_publish_parse(body, strlen(body), &f->cfg, &p, &e), MIC_OK);
    mic_store_set_fault(hook);
    rc = run_rc(f, mic_publish_op(p));
    mic_store_set_fault(NULL);
    if (rc == MIC_OK) {
        mic_buf_init(&b);
        rc = mic_publish_result(p, &b, &dup, &e);
        mic_buf_fini(&b);
    }
    mic_publish_free(p);
    return rc;
}

static int publish_rc(struct fx *f, const char *body)
{
    return publish_hooked(f, body, NULL);
}

/* Claim one delivery of 'group' and ack it. */
static void claim_ack(struct fx *f, const char *group)
{
    struct mic_error e;
    struct mic_buf b;
    mic_claim *c;
    json_t *j, *d;
    char body[256];

    assert_int_equal(mic_claim_parse(MIC_CLAIM, group, "{}", 2, &f->cfg, &c, &e), MIC_OK);
    run(f, mic_claim_op(c));
    mic_buf_init(&b);
    assert_int_equal(mic_claim_result(c, f->store, &b, &e), MIC_OK);
    j = json_loadb(b.p, b.len, 0, NULL);
    mic_buf_fini(&b);
    mic_claim_free(c);
    d = json_array_get(json_object_get(j, "deliveries"), 0);
    assert_non_null(d);
    snprintf(body, sizeof body, "{\"deliveries\":[{\"seq\":%lld,\"lease_token\":\"%s\"}]}",
             (long long)json_integer_value(json_object_get(d, "seq")),
             json_string_value(json_object_get(d, "lease_token")));
    json_decref(j);
    assert_int_equal(mic_claim_parse(MIC_ACK, group, body, strlen(body), &f->cfg, &c, &e), MIC_OK);
    run(f, mic_claim_op(c));
    mic_claim_free(c);
}

/* One batch of the writer (its sweep runs first): an empty claim. */
static void batch(struct fx *f)
{
    struct mic_error e;
    mic_claim *c;

    assert_int_equal(mic_claim_parse(MIC_CLAIM, "nobody", "{}", 2, &f->cfg, &c, &e), MIC_OK);
    run_rc(f, mic_claim_op(c));
    mic_claim_free(c);
}

/* Lines of archive file 'topic'.ndjson that hold event 'id'. */
static int archived(struct fx *f, const char *topic, const char *id)
{
    char path[160], line[4096], key[160];
    FILE *fp;
    int n = 0;

    snprintf(path, sizeof path, "%s/%s.ndjson", f->arch, topic);
    snprintf(key, sizeof key, "{\"event_id\":\"%s\"", id);
    if (!(fp = fopen(path, "r")))
        return 0;
    while (fgets(line, sizeof line, fp))
        n += strncmp(line, key, strlen(key)) == 0;
    fclose(fp);
    return n;
}

static int fail_log(const char *db)
{
    return strcmp(db, "log") == 0 ? EIO : 0;
}

static void sweep_finds_topic_and_holders(void **state)
{
    struct fx *f = *state;

    /* A topic made by PUT, one by publish; an exact, a prefix and an
     * unrelated group. */
    make_topic(f, "keep", "{\"retention_s\":10}");
    make_group(f, "g.keep", "{\"topics\":[\"keep\"]}");
    make_group(f, "g.prefix", "{\"topics\":[\"au*\"]}");
    make_group(f, "g.other", "{\"topics\":[\"zzz\"]}");
    assert_int_equal(publish_rc(f, "{\"event_id\":\"k1\",\"topic\":\"keep\"}"), MIC_OK);
    assert_int_equal(publish_rc(f, "{\"event_id\":\"a1\",\"topic\":\"auto\"}"), MIC_OK);
    /* A batch that creates topic "ghost" is aborted: its id goes to "real". */
    assert_int_equal(publish_hooked(f, "{\"event_id\":\"g1\",\"topic\":\"ghost\"}", fail_log),
                     MIC_EIO);
    assert_int_equal(publish_rc(f, "{\"event_id\":\"r1\",\"topic\":\"real\"}"), MIC_OK);

    /* Past every retention: r1 has no group and goes; k1 and a1 are pending
     * in their groups and stay. */
    fake_now += 8 * DAY;
    batch(f);
    assert_false(procfx_stored(f->store, "r1"));
    assert_int_equal(archived(f, "real", "r1"), 1);
    assert_int_equal(archived(f, "ghost", "r1"), 0);
    assert_true(procfx_stored(f->store, "k1"));
    assert_true(procfx_stored(f->store, "a1"));

    /* Handled: they go at their next look (at most a minute later). */
    claim_ack(f, "g.keep");
    claim_ack(f, "g.prefix");
    fake_now += 61 * SEC;
    batch(f);
    assert_false(procfx_stored(f->store, "k1"));
    assert_false(procfx_stored(f->store, "a1"));
    assert_int_equal(archived(f, "keep", "k1"), 1);
    assert_int_equal(archived(f, "auto", "a1"), 1);
}

static void sweep_after_restart(void **state)
{
    struct fx *f = *state;

    make_topic(f, "keep", "{\"retention_s\":10}");
    make_group(f, "g.keep", "{\"topics\":[\"keep\"]}");
    assert_int_equal(publish_rc(f, "{\"event_id\":\"k1\",\"topic\":\"keep\"}"), MIC_OK);
    assert_int_equal(publish_rc(f, "{\"event_id\":\"a1\",\"topic\":\"auto\"}"), MIC_OK);
    /* A new writer and registry over the same store. */
    stop(f);
    assert_int_equal(start(f), 0);
    fake_now += 8 * DAY;
    batch(f);
    assert_false(procfx_stored(f->store, "a1"));
    assert_int_equal(archived(f, "auto", "a1"), 1);
    assert_true(procfx_stored(f->store, "k1"));
    claim_ack(f, "g.keep");
    fake_now += 61 * SEC;
    batch(f);
    assert_false(procfx_stored(f->store, "k1"));
    assert_int_equal(archived(f, "keep", "k1"), 1);
}

/* Entries of `expiry` and the stored count of topic 'name'. */
static uint64_t expiry_entries(struct fx *f)
{
    return procfx_count(f->store, mic_store_expiry_count);
}

static uint64_t topic_count(struct fx *f, const char *name)
{
    struct mic_topic_rec tr;
    mic_txn *t;
    uint64_t n = 0;

    assert_int_equal(mic_txn_begin(f->store, 0, &t), MIC_OK);
    assert_int_equal(mic_store_topic_get(t, name, strlen(name), &tr), MIC_OK);
    assert_int_equal(mic_store_topic_events(t, tr.id, &n), MIC_OK);
    mic_txn_abort(t);
    return n;
}

/* A batch of 'n' events "<prefix><i>", topics taken in turn from 'topics'. */
static char *batch_body(const char *prefix, int n, const char *const *topics, int ntopics)
{
    struct mic_buf b;

    mic_buf_init(&b);
    mic_buf_puts(&b, "{\"events\":[");
    for (int i = 0; i < n; i++)
        mic_buf_printf(&b, "%s{\"event_id\":\"%s%d\",\"topic\":\"%s\"}", i ? "," : "", prefix, i,
                       topics[i % ntopics]);
    mic_buf_puts(&b, "]}");
    return b.p;
}

static void one_entry_per_topic_and_commit(void **state)
{
    static const char *const ab[] = {"keep", "real"};
    struct fx *f = *state;
    char *body = batch_body("e", 5, ab, 2), id[16];

    /* keep: e0, e2, e4 (10 s); real: e1, e3 (20 s), interleaved in one
     * commit: one expiry entry and one count write per topic. */
    make_topic(f, "keep", "{\"retention_s\":10}");
    make_topic(f, "real", "{\"retention_s\":20}");
    assert_int_equal(publish_rc(f, body), MIC_OK);
    free(body);
    assert_int_equal(expiry_entries(f), 2);
    assert_int_equal(topic_count(f, "keep"), 3);
    assert_int_equal(topic_count(f, "real"), 2);

    /* At 15 s: keep's three go (each remembered by id: three entries),
     * real's two are not touched though their seqs lie inside keep's range. */
    fake_now += 15 * SEC;
    batch(f);
    for (int i = 0; i < 5; i++) {
        snprintf(id, sizeof id, "e%d", i);
        assert_int_equal(procfx_stored(f->store, id), i % 2);
        assert_int_equal(archived(f, i % 2 ? "real" : "keep", id), !(i % 2));
    }
    assert_int_equal(topic_count(f, "keep"), 0);
    assert_int_equal(topic_count(f, "real"), 2);
    assert_int_equal(expiry_entries(f), 1 + 3);

    /* At 25 s, real's go too. */
    fake_now += 10 * SEC;
    batch(f);
    assert_false(procfx_stored(f->store, "e1"));
    assert_false(procfx_stored(f->store, "e3"));
    assert_int_equal(archived(f, "real", "e1"), 1);
    assert_int_equal(archived(f, "real", "e3"), 1);
    assert_int_equal(topic_count(f, "real"), 0);
    assert_int_equal(expiry_entries(f), 5);
}

/* A range longer than one batch's share of the sweep (1000) is finished by
 * the next batches, each event once.  A quiet writer: left to itself it
 * would run the next batches at once, and a slow test thread then read a
 * count of 0 instead of 1500. */
static void range_longer_than_a_sweep(void **state)
{
    static const char *const k[] = {"keep"};
    struct fx *f = *state;
    char *body;

    f->cfg.max_batch = 2500;
    body = batch_body("x", 2500, k, 1);
    make_topic(f, "keep", "{\"retention_s\":10}");
    assert_int_equal(publish_rc(f, body), MIC_OK);
    free(body);
    assert_int_equal(expiry_entries(f), 1);
    fake_now += 11 * SEC;
    batch(f);
    assert_int_equal(topic_count(f, "keep"), 1500);
    assert_false(procfx_stored(f->store, "x999"));
    assert_true(procfx_stored(f->store, "x1000"));
    /* 1000 ids to forget and the rest of the range. */
    assert_int_equal(expiry_entries(f), 1000 + 1);
    batch(f);
    batch(f);
    assert_int_equal(topic_count(f, "keep"), 0);
    assert_false(procfx_stored(f->store, "x2499"));
    assert_int_equal(archived(f, "keep", "x0"), 1);
    assert_int_equal(archived(f, "keep", "x2499"), 1);
    assert_int_equal(expiry_entries(f), 2500);
}

/* Puts per tree, counted through the store's fault hook (which fails none). */
static int puts_aggs, puts_expiry, puts_tstat;
static int count_puts(const char *db)
{
    puts_aggs += strcmp(db, "aggs") == 0;
    puts_expiry += strcmp(db, "expiry") == 0;
    puts_tstat += strcmp(db, "tstat") == 0;
    return 0;
}

static int publish_counted(struct fx *f, const char *body)
{
    puts_aggs = puts_expiry = puts_tstat = 0;
    return publish_hooked(f, body, count_puts);
}

#define AGG_EV(id, v) "{\"event_id\":\"" id "\",\"topic\":\"keep\",\"aggregate_type\":\"o\"," \
                      "\"aggregate_id\":\"1\",\"aggregate_version\":" #v "}"

/* The aggregate's record is written when the aggregate appears and when a
 * gap opens or closes, never for the next version of a contiguous one; a
 * commit writes one expiry entry and one count per topic. */
static void publish_writes_per_commit(void **state)
{
    struct fx *f = *state;

    make_topic(f, "keep", "{\"retention_s\":10}");
    assert_int_equal(publish_counted(f, "{\"events\":[" AGG_EV("v1", 1) "," AGG_EV("v2", 2) ","
                                        AGG_EV("v3", 3) "]}"), MIC_OK);
    assert_int_equal(puts_aggs, 1);
    assert_int_equal(puts_expiry, 1);
    assert_int_equal(puts_tstat, 1);
    assert_int_equal(publish_counted(f, "{\"events\":[" AGG_EV("v4", 4) "]}"), MIC_OK);
    assert_int_equal(puts_aggs, 0);
    /* 6 past a gap: the watermark (4) is written; 5 fills it: moved to 6. */
    assert_int_equal(publish_counted(f, "{\"events\":[" AGG_EV("v6", 6) "]}"), MIC_OK);
    assert_int_equal(puts_aggs, 1);
    assert_int_equal(publish_counted(f, "{\"events\":[" AGG_EV("v5", 5) "]}"), MIC_OK);
    assert_int_equal(puts_aggs, 1);
    assert_int_equal(publish_counted(f, "{\"events\":[" AGG_EV("v7", 7) "]}"), MIC_OK);
    assert_int_equal(puts_aggs, 0);
    assert_int_equal(topic_count(f, "keep"), 7);
    /* Still refused as before, writing nothing: a version taken already. */
    assert_int_not_equal(publish_counted(f, "{\"events\":[" AGG_EV("w7", 7) "]}"), MIC_OK);
    assert_int_equal(puts_aggs + puts_expiry + puts_tstat, 0);
    assert_int_equal(topic_count(f, "keep"), 7);
}

/* ---- Retention against a backfill ---- */

#define FILL_CHUNK 2000 /* records a backfill chunk or a run's chunk walks (group.c, replay.c) */

/* Publish 'n' events "<prefix><i>" to 'topic' in batches of at most 2000,
 * each with created_at 'at' (0: the clock's). */
static void publish_many(struct fx *f, const char *prefix, int n, const char *topic, int64_t at)
{
    char when[MIC_TIME_LEN + 1];

    f->cfg.max_batch = FILL_CHUNK;
    if (at)
        mic_time_format(at, when);
    for (int i = 0; i < n;) {
        struct mic_buf b;

        mic_buf_init(&b);
        mic_buf_puts(&b, "{\"events\":[");
        for (int k = 0; k < FILL_CHUNK && i < n; k++, i++) {
            mic_buf_printf(&b, "%s{\"event_id\":\"%s%05d\",\"topic\":\"%s\"", k ? "," : "",
                           prefix, i, topic);
            if (at)
                mic_buf_printf(&b, ",\"created_at\":\"%s\"", when);
            mic_buf_puts(&b, "}");
        }
        mic_buf_puts(&b, "]}");
        assert_false(b.oom);
        assert_int_equal(publish_rc(f, b.p), MIC_OK);
        mic_buf_fini(&b);
    }
}

/* The kinds of group the backfill tests run against. */
enum kind { UNORDERED, VERSIONED, UNVERSIONED };

#define NTARGET 6

/* The targets: k0..k5 on topic "keep" (retention 10 s), created 1 ms
 * apart; for the ordered kinds over two aggregates a and b in turn (k0, k2,
 * k4 are a's versions 1, 2, 3 or its events in created_at order). */
static void publish_targets(struct fx *f, enum kind kind)
{
    char when[MIC_TIME_LEN + 1];
    struct mic_buf b;

    mic_buf_init(&b);
    mic_buf_puts(&b, "{\"events\":[");
    for (int i = 0; i < NTARGET; i++) {
        mic_time_format(T0 - 100000 + i * 1000, when);
        mic_buf_printf(&b, "%s{\"event_id\":\"k%d\",\"topic\":\"keep\",\"created_at\":\"%s\"",
                       i ? "," : "", i, when);
        if (kind != UNORDERED)
            mic_buf_printf(&b, ",\"aggregate_type\":\"o\",\"aggregate_id\":\"%c\"",
                           i % 2 ? 'b' : 'a');
        if (kind == VERSIONED)
            mic_buf_printf(&b, ",\"aggregate_version\":%d", i / 2 + 1);
        mic_buf_puts(&b, "}");
    }
    mic_buf_puts(&b, "]}");
    assert_false(b.oom);
    assert_int_equal(publish_rc(f, b.p), MIC_OK);
    mic_buf_fini(&b);
}

/* The group record's backfill state (0 done, 1 adding, 2 releasing heads). */
static int fill_state(struct fx *f, const char *group)
{
    struct mic_group_rec rec;
    mic_txn *t;
    int st;

    assert_int_equal(mic_txn_begin(f->store, 0, &t), MIC_OK);
    assert_int_equal(mic_store_group_get(t, group, strlen(group), &rec), MIC_OK);
    st = rec.backfilling;
    mic_txn_abort(t);
    return st;
}

/* Batches until the group's backfill is done (heads released); at most 10. */
static void fill_finish(struct fx *f, const char *group)
{
    for (int i = 0; i < 10 && fill_state(f, group); i++)
        batch(f);
    assert_int_equal(fill_state(f, group), 0);
}

/* The group's committed figure 'field' (MIC_GSTAT_*). */
static uint64_t figure(struct fx *f, const char *group, int field)
{
    uint64_t fig[MIC_GSTAT_N];
    uint32_t gid;
    mic_txn *t;

    assert_int_equal(mic_txn_begin(f->store, 0, &t), MIC_OK);
    assert_int_equal(mic_group_gid(t, group, &gid), MIC_OK);
    assert_int_equal(mic_delivery_figures(t, gid, fig), MIC_OK);
    mic_txn_abort(t);
    return fig[field];
}

/* Claim and ack until 'group' hands out nothing more (at most 'max'
 * deliveries, 10 per claim); the event ids go to ids[] in claim order.
 * Returns how many. */
static int drain(struct fx *f, const char *group, char (*ids)[16], int max)
{
    struct mic_error e;
    struct mic_buf b;
    mic_claim *c;
    int n = 0;

    for (;;) {
        json_t *j, *d;
        size_t i, got;

        assert_int_equal(mic_claim_parse(MIC_CLAIM, group, "{\"max\":10}", 10, &f->cfg, &c, &e),
                         MIC_OK);
        run(f, mic_claim_op(c));
        mic_buf_init(&b);
        assert_int_equal(mic_claim_result(c, f->store, &b, &e), MIC_OK);
        j = json_loadb(b.p, b.len, 0, NULL);
        assert_non_null(j);
        mic_buf_fini(&b);
        mic_claim_free(c);
        got = json_array_size(json_object_get(j, "deliveries"));
        if (!got) {
            json_decref(j);
            return n;
        }
        json_array_foreach(json_object_get(j, "deliveries"), i, d) {
            char body[256];
            const char *id = json_string_value(json_object_get(json_object_get(d, "event"),
                                                               "event_id"));
            assert_non_null(id);
            assert_true(n < max);
            snprintf(ids[n++], 16, "%s", id);
            snprintf(body, sizeof body, "{\"deliveries\":[{\"seq\":%lld,\"lease_token\":\"%s\"}]}",
                     (long long)json_integer_value(json_object_get(d, "seq")),
                     json_string_value(json_object_get(d, "lease_token")));
            assert_int_equal(mic_claim_parse(MIC_ACK, group, body, strlen(body), &f->cfg, &c, &e),
                             MIC_OK);
            run(f, mic_claim_op(c));
            mic_claim_free(c);
        }
        json_decref(j);
    }
}

static int index_of(char (*ids)[16], int n, const char *id)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(ids[i], id))
            return i;
    return -1;
}

/* 'nfill' events of topic "fill" (no group of the test takes them, a long
 * retention) lie ahead of the targets in the log, so the backfill's first
 * chunks walk them only.  Retention comes due for the targets after the
 * group is created and before its backfill reaches them; with 'restart',
 * micd restarts between two such sweeps (the backfill's position comes
 * from the store).  Then the backfill finishes: the group gets every
 * target, an ordered one in its aggregates' order, none gap-parked; and
 * once they are handled retention removes them. */
static void backfill_holds(struct fx *f, enum kind kind, int nfill, int restart)
{
    char ids[NTARGET + 1][16], id[16];
    int n;

    make_topic(f, "keep", "{\"retention_s\":10}");
    publish_many(f, "f", nfill, "fill", 0);
    publish_targets(f, kind);
    fake_now += 5 * SEC;
    make_group(f, "g", kind == UNORDERED ? "{\"topics\":[\"keep\"],\"start\":\"all\"}"
                                         : "{\"topics\":[\"keep\"],\"start\":\"all\",\"ordered\":true}");
    assert_int_equal(fill_state(f, "g"), 1);

    /* Past the targets' retention: one chunk of the backfill (fill events
     * only), then the sweep. */
    fake_now += 6 * SEC;
    batch(f);
    assert_int_equal(fill_state(f, "g"), 1);
    for (int i = 0; i < NTARGET; i++) {
        snprintf(id, sizeof id, "k%d", i);
        if (!procfx_stored(f->store, id))
            fail_msg("%s removed by retention before the backfill of g reached it", id);
        assert_int_equal(archived(f, "keep", id), 0);
    }
    if (restart) {
        stop(f);
        assert_int_equal(start(f), 0);
        /* Their next look, after a restart, before the backfill reaches
         * them: still kept. */
        fake_now += 11 * SEC;
        batch(f);
        assert_int_equal(fill_state(f, "g"), 1);
        for (int i = 0; i < NTARGET; i++) {
            snprintf(id, sizeof id, "k%d", i);
            if (!procfx_stored(f->store, id))
                fail_msg("%s removed by retention after a restart, before the backfill of g "
                         "reached it", id);
        }
    }
    fill_finish(f, "g");
    assert_int_equal(topic_count(f, "keep"), NTARGET);
    assert_int_equal(figure(f, "g", MIC_GSTAT_PENDING), NTARGET);
    assert_int_equal(figure(f, "g", MIC_GSTAT_GAP_PARKED), 0);
    assert_int_equal(figure(f, "g", MIC_GSTAT_BLOCKED), 0);

    n = drain(f, "g", ids, NTARGET + 1);
    assert_int_equal(n, NTARGET);
    for (int i = 0; i < NTARGET; i++) {
        snprintf(id, sizeof id, "k%d", i);
        assert_true(index_of(ids, n, id) >= 0);
        if (kind != UNORDERED && i >= 2) {
            char prev[16];
            snprintf(prev, sizeof prev, "k%d", i - 2);
            assert_true(index_of(ids, n, prev) < index_of(ids, n, id));
        }
    }
    assert_int_equal(figure(f, "g", MIC_GSTAT_DISPATCHED), NTARGET);
    assert_int_equal(figure(f, "g", MIC_GSTAT_GAP_PARKED), 0);

    /* Handled: retention takes them at their next look. */
    fake_now += 61 * SEC;
    batch(f);
    for (int i = 0; i < NTARGET; i++) {
        snprintf(id, sizeof id, "k%d", i);
        assert_false(procfx_stored(f->store, id));
        assert_int_equal(archived(f, "keep", id), 1);
    }
    assert_int_equal(topic_count(f, "keep"), 0);
    assert_int_equal(topic_count(f, "fill"), (uint64_t)nfill);
}

static void backfill_holds_unordered(void **state)
{
    /* Two chunks of fill events, a restart between the two sweeps. */
    backfill_holds(*state, UNORDERED, 2 * FILL_CHUNK, 1);
}

static void backfill_holds_ordered_versions(void **state)
{
    backfill_holds(*state, VERSIONED, FILL_CHUNK, 0);
}

static void backfill_holds_ordered_no_versions(void **state)
{
    backfill_holds(*state, UNVERSIONED, FILL_CHUNK, 0);
}

/* A backfill holds only what it will add: a group whose start is after the
 * targets' created_at keeps none of them. */
static void backfill_holds_only_what_it_adds(void **state)
{
    struct fx *f = *state;
    char body[128], when[MIC_TIME_LEN + 1], id[16];

    make_topic(f, "keep", "{\"retention_s\":10}");
    publish_many(f, "f", FILL_CHUNK, "fill", 0);
    publish_targets(f, UNORDERED);
    fake_now += 5 * SEC;
    mic_time_format(T0, when); /* the targets were created before T0 */
    snprintf(body, sizeof body, "{\"topics\":[\"keep\"],\"start\":\"%s\"}", when);
    make_group(f, "g", body);
    assert_int_equal(fill_state(f, "g"), 1);
    fake_now += 6 * SEC;
    batch(f);
    assert_int_equal(fill_state(f, "g"), 1);
    for (int i = 0; i < NTARGET; i++) {
        snprintf(id, sizeof id, "k%d", i);
        assert_false(procfx_stored(f->store, id));
        assert_int_equal(archived(f, "keep", id), 1);
    }
    fill_finish(f, "g");
    assert_int_equal(figure(f, "g", MIC_GSTAT_PENDING), 0);
}

/* A replay run's group is filled by its run (replay.c), which holds what
 * it has still to add: the first chunk of its walk adds the fill events
 * (created before the targets, on the same topic), retention comes due for
 * all, and the run still gets every target. */
static void backfill_holds_replay_run(void **state)
{
    struct fx *f = *state;
    const char *body = "{\"topic\":\"keep\",\"run_id\":\"r1\"}";
    struct mic_error e;
    struct mic_buf b;
    mic_replay_op *o;
    json_t *j;
    mic_txn *t;
    uint32_t gid;
    char id[16];

    make_topic(f, "keep", "{\"retention_s\":10}");
    publish_many(f, "f", FILL_CHUNK, "keep", T0 - 200000);
    publish_targets(f, UNORDERED);
    fake_now += 5 * SEC;
    assert_int_equal(mic_replay_create_parse(f->store, body, strlen(body), &f->cfg, &o, &e),
                     MIC_OK);
    assert_int_equal(mic_replay_select(f->store, o), MIC_OK);
    run(f, mic_replay_op_base(o));
    mic_buf_init(&b);
    assert_int_equal(mic_replay_op_result(o, &b, &e), MIC_OK);
    mic_buf_fini(&b);
    mic_replay_op_free(o);
    assert_int_equal(fill_state(f, "replay.r1"), 1);

    fake_now += 6 * SEC;
    batch(f); /* the run's first chunk (the fill events), then the sweep */
    assert_int_equal(fill_state(f, "replay.r1"), 1);
    for (int i = 0; i < NTARGET; i++) {
        snprintf(id, sizeof id, "k%d", i);
        assert_true(procfx_stored(f->store, id));
    }
    fill_finish(f, "replay.r1");
    assert_int_equal(figure(f, "replay.r1", MIC_GSTAT_PENDING), FILL_CHUNK + NTARGET);
    assert_int_equal(figure(f, "replay.r1", MIC_GSTAT_GAP_PARKED), 0);
    assert_int_equal(mic_txn_begin(f->store, 0, &t), MIC_OK);
    assert_int_equal(mic_group_gid(t, "replay.r1", &gid), MIC_OK);
    for (int i = 0; i < NTARGET; i++) {
        struct mic_dlv d;
        snprintf(id, sizeof id, "k%d", i);
        assert_int_equal(mic_delivery_get(t, gid, FILL_CHUNK + 1 + (uint64_t)i, &d), MIC_OK);
        assert_int_equal(d.state, MIC_DLV_PENDING);
    }
    mic_txn_abort(t);
    mic_buf_init(&b);
    assert_int_equal(mic_replay_get(f->store, "r1", &b, &e), MIC_OK);
    j = json_loadb(b.p, b.len, 0, NULL);
    mic_buf_fini(&b);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "selected")), FILL_CHUNK + NTARGET);
    assert_int_equal(json_integer_value(json_object_get(j, "pending")), FILL_CHUNK + NTARGET);
    assert_int_equal(json_integer_value(json_object_get(j, "dlq")), 0);
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(sweep_finds_topic_and_holders, setup, teardown),
        cmocka_unit_test_setup_teardown(sweep_after_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(one_entry_per_topic_and_commit, setup, teardown),
        cmocka_unit_test_setup_teardown(range_longer_than_a_sweep, setup_quiet, teardown),
        cmocka_unit_test_setup_teardown(publish_writes_per_commit, setup, teardown),
        cmocka_unit_test_setup_teardown(backfill_holds_unordered, setup_quiet, teardown),
        cmocka_unit_test_setup_teardown(backfill_holds_ordered_versions, setup_quiet, teardown),
        cmocka_unit_test_setup_teardown(backfill_holds_ordered_no_versions, setup_quiet, teardown),
        cmocka_unit_test_setup_teardown(backfill_holds_only_what_it_adds, setup_quiet, teardown),
        cmocka_unit_test_setup_teardown(backfill_holds_replay_run, setup_quiet, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
