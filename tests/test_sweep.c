/* test_sweep.c - the retention sweep in-process, against a real store and
 * writer with an injected clock (no sleeps): the removal of an event finds
 * its topic by id (topics created by PUT, by publish, after a restart, and
 * after a batch that created a topic was aborted and its id reused) and
 * asks only the groups that can hold a delivery of it (exact and prefix
 * subscribers); the archive file is named after the right topic. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "buf.h"
#include "claim.h"
#include "clock.h"
#include "config.h"
#include "err.h"
#include "group.h"
#include "procfx.h"
#include "publish.h"
#include "schedule.h"
#include "store.h"
#include "topic.h"
#include "writer.h"

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

static int start(struct fx *f)
{
    struct mic_writer_hooks h;

    if (mic_store_open(&f->store, f->dir, f->cfg.map_size, f->cfg.map_max, 1) ||
        mic_groups_new(&f->groups, f->store) || mic_sched_new(&f->sched, f->groups))
        return -1;
    memset(&h, 0, sizeof h);
    mic_sched_hooks(f->sched, &h);
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
    procfx_rm_store(f->dir);
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
 * the next batches, each event once. */
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(sweep_finds_topic_and_holders, setup, teardown),
        cmocka_unit_test_setup_teardown(sweep_after_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(one_entry_per_topic_and_commit, setup, teardown),
        cmocka_unit_test_setup_teardown(range_longer_than_a_sweep, setup, teardown),
        cmocka_unit_test_setup_teardown(publish_writes_per_commit, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
