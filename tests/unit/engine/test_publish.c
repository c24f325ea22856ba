/* test_publish.c - the publish module against a real store and writer,
 * with an injected clock: idempotency by digest, version rules, in-batch
 * repeats, topic rules, and that a refused request writes nothing. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/buf.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/err.h"
#include "engine/publish.h"
#include "store/store.h"
#include "store/log.h"
#include "engine/topic.h"
#include "procfx.h"
#include "engine/writer.h"
#include "storedir.h"

#include <jansson.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define T0 1790000000000000LL /* 2026-09-21T...Z in microseconds */

static int64_t fake_now = T0;
static int64_t fake_clock(void)
{
    return fake_now;
}

struct fx {
    char dir[64];
    struct mic_config cfg;
    mic_store *store;
    mic_writer *w;
    sem_t sem;
};

static void done(mic_op *op)
{
    sem_post(op->owner);
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    const char *argv[] = {"micd", "--durability", "none"};
    char err[128];

    snprintf(f->dir, sizeof f->dir, "/tmp/mic-pub-XXXXXX");
    if (!mkdtemp(f->dir) || mic_config_load(&f->cfg, 3, (char **)argv, err, sizeof err) ||
        mic_store_open(&f->store, f->dir, f->cfg.map_size, f->cfg.map_max, 1) ||
        mic_writer_start(&f->w, f->store, &f->cfg, NULL))
        return -1;
    sem_init(&f->sem, 0, 0);
    fake_now = T0;
    mic_clock_set(fake_clock);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    mic_clock_set(NULL);
    mic_writer_free(f->w);
    mic_store_close(f->store);
    sem_destroy(&f->sem);
    storedir_rm(f->dir);
    free(f);
    return 0;
}

/* Publish 'body'; returns the error code ("" on success) and fills
 * *results (a new reference) on success. */
static const char *pub(struct fx *f, const char *body, json_t **results, int *all_dup)
{
    static char code[64];
    struct mic_error e;
    struct mic_buf b;
    mic_publish *p;
    mic_op *op;
    int rc;

    memset(&e, 0, sizeof e);
    *results = NULL;
    if ((rc = mic_publish_parse(body, strlen(body), &f->cfg, &p, &e))) {
        snprintf(code, sizeof code, "%s", e.code);
        return code;
    }
    op = mic_publish_op(p);
    op->done = done;
    op->owner = &f->sem;
    assert_int_equal(mic_writer_submit(f->w, op), MIC_OK);
    sem_wait(&f->sem);
    assert_int_equal(op->result, MIC_OK);
    mic_buf_init(&b);
    rc = mic_publish_result(p, &b, all_dup, &e);
    code[0] = 0;
    if (rc)
        snprintf(code, sizeof code, "%s", e.code);
    else {
        json_t *root = json_loads(b.p, 0, NULL);
        *results = json_incref(json_object_get(root, "results"));
        json_decref(root);
    }
    mic_buf_fini(&b);
    mic_publish_free(p);
    return code;
}

/* Publish and expect success; returns the seq of item i. */
static uint64_t pub_ok(struct fx *f, const char *body, int expect_dup)
{
    json_t *res;
    int all_dup = -1;
    uint64_t seq;

    assert_string_equal(pub(f, body, &res, &all_dup), "");
    assert_int_equal(all_dup, expect_dup);
    seq = (uint64_t)json_integer_value(json_object_get(json_array_get(res, 0), "seq"));
    json_decref(res);
    return seq;
}

static uint64_t events(struct fx *f)
{
    mic_txn *t;
    uint64_t n;

    assert_int_equal(mic_txn_begin(f->store, 0, &t), MIC_OK);
    assert_int_equal(mic_store_log_count(t, &n), MIC_OK);
    mic_txn_abort(t);
    return n;
}

static void stored(struct fx *f, const char *id, json_t **ev)
{
    struct mic_error e;
    struct mic_buf b;

    mic_buf_init(&b);
    assert_int_equal(mic_publish_lookup(f->store, id, strlen(id), NULL, &b, &e), MIC_OK);
    *ev = json_loads(b.p, 0, NULL);
    assert_non_null(*ev);
    mic_buf_fini(&b);
}

/* ---- Tests ---- */

static void times_come_from_the_clock(void **state)
{
    struct fx *f = *state;
    json_t *ev;

    fake_now = T0 + 123456;
    pub_ok(f, "{\"event_id\":\"c1\",\"topic\":\"t\"}", 0);
    stored(f, "c1", &ev);
    assert_string_equal(json_string_value(json_object_get(json_object_get(ev, "event"), "created_at")),
                        "2026-09-21T14:13:20.123456Z");
    assert_string_equal(json_string_value(json_object_get(json_object_get(ev, "event"), "received_at")),
                        "2026-09-21T14:13:20.123456Z");
    json_decref(ev);
}

static void idempotent_by_digest(void **state)
{
    struct fx *f = *state;
    json_t *res;
    uint64_t s1, s2;
    int d;

    s1 = pub_ok(f, "{\"event_id\":\"i1\",\"topic\":\"t\",\"payload\":{\"b\":2,\"a\":1}}", 0);
    fake_now += 5000000; /* later: the default created_at differs, still a duplicate */
    s2 = pub_ok(f, "{\"topic\":\"t\",\"event_id\":\"i1\",\"payload\":{\"a\":1,\"b\":2}}", 1);
    assert_int_equal(s1, s2);
    assert_int_equal(events(f), 1);
    assert_string_equal(pub(f, "{\"event_id\":\"i1\",\"topic\":\"t\",\"payload\":{\"a\":1}}", &res, &d),
                        "event_id_conflict");
    assert_string_equal(pub(f, "{\"event_id\":\"i1\",\"topic\":\"t2\",\"payload\":{\"a\":1,\"b\":2}}", &res, &d),
                        "event_id_conflict");
    assert_int_equal(events(f), 1);
}

static void version_rules(void **state)
{
    struct fx *f = *state;
    json_t *res;
    int d;

#define AGG "\"topic\":\"t\",\"aggregate_type\":\"o\",\"aggregate_id\":\"a1\""
    pub_ok(f, "{\"event_id\":\"v3\"," AGG ",\"aggregate_version\":3}", 0);
    pub_ok(f, "{\"event_id\":\"v4\"," AGG ",\"aggregate_version\":4}", 0);
    assert_string_equal(pub(f, "{\"event_id\":\"v4b\"," AGG ",\"aggregate_version\":4}", &res, &d),
                        "version_conflict");
    assert_string_equal(pub(f, "{\"event_id\":\"v2\"," AGG ",\"aggregate_version\":2}", &res, &d),
                        "version_below_baseline");
    assert_string_equal(pub(f, "{\"event_id\":\"vn\"," AGG "}", &res, &d), "invalid_event");
    /* Repeating v4 with its own id is a duplicate, not a conflict. */
    pub_ok(f, "{\"event_id\":\"v4\"," AGG ",\"aggregate_version\":4}", 1);
    /* A gap is accepted (parking is the ordered group's business). */
    pub_ok(f, "{\"event_id\":\"v7\"," AGG ",\"aggregate_version\":7}", 0);
    assert_int_equal(events(f), 3);
#undef AGG
}

/* An aggregate_version of 2^63 or more (or below -2^63) is a 422 on that
 * field, with its path in a batch; a too-big integer elsewhere is still
 * malformed JSON for jansson (400 invalid_json); nothing is stored. */
static void version_too_big_for_jansson(void **state)
{
    struct fx *f = *state;
    struct mic_error e;
    mic_publish *p = NULL;
    const char *one = "{\"event_id\":\"big\",\"topic\":\"t\",\"aggregate_type\":\"o\","
                      "\"aggregate_id\":\"a\",\"aggregate_version\":9223372036854775808}";
    const char *batch = "{\"events\":[{\"event_id\":\"ok\",\"topic\":\"t\",\"aggregate_type\":\"o\","
                        "\"aggregate_id\":\"a\",\"aggregate_version\":1},{\"event_id\":\"neg\","
                        "\"topic\":\"t\",\"aggregate_type\":\"o\",\"aggregate_id\":\"a\","
                        "\"aggregate_version\":-99999999999999999999}]}";
    const char *payload = "{\"event_id\":\"p\",\"topic\":\"t\",\"payload\":{\"n\":99999999999999999999}}";

    memset(&e, 0, sizeof e);
    assert_int_equal(mic_publish_parse(one, strlen(one), &f->cfg, &p, &e), MIC_EINVAL);
    assert_string_equal(e.code, "invalid_event");
    assert_string_equal(e.field, "aggregate_version");
    assert_int_equal(mic_publish_parse(batch, strlen(batch), &f->cfg, &p, &e), MIC_EINVAL);
    assert_string_equal(e.field, "events[1].aggregate_version");
    assert_int_equal(mic_publish_parse(payload, strlen(payload), &f->cfg, &p, &e), MIC_EPARSE);
    assert_string_equal(e.code, "invalid_json");
    /* 2^63 - 1 itself is a version like any other. */
    pub_ok(f, "{\"event_id\":\"max\",\"topic\":\"t\",\"aggregate_type\":\"o\","
              "\"aggregate_id\":\"m\",\"aggregate_version\":9223372036854775807}", 0);
    assert_int_equal(events(f), 1);
}

static void batch_rules(void **state)
{
    struct fx *f = *state;
    json_t *res;
    int d;

#define AGG "\"topic\":\"t\",\"aggregate_type\":\"o\",\"aggregate_id\":\"b1\""
    /* In-batch: baseline from the first, the second below it. */
    assert_string_equal(pub(f, "{\"events\":[{\"event_id\":\"b5\"," AGG ",\"aggregate_version\":5},"
                               "{\"event_id\":\"b4\"," AGG ",\"aggregate_version\":4}]}", &res, &d),
                        "version_below_baseline");
    assert_string_equal(pub(f, "{\"events\":[{\"event_id\":\"b5\"," AGG ",\"aggregate_version\":5},"
                               "{\"event_id\":\"b5x\"," AGG ",\"aggregate_version\":5}]}", &res, &d),
                        "version_conflict");
    assert_int_equal(events(f), 0);
    assert_string_equal(pub(f, "{\"events\":[{\"event_id\":\"b5\"," AGG ",\"aggregate_version\":5},"
                               "{\"event_id\":\"b6\"," AGG ",\"aggregate_version\":6},"
                               "{\"event_id\":\"b5\"," AGG ",\"aggregate_version\":5}]}", &res, &d), "");
    assert_int_equal(d, 0);
    assert_true(json_is_false(json_object_get(json_array_get(res, 0), "duplicate")));
    assert_true(json_is_true(json_object_get(json_array_get(res, 2), "duplicate")));
    assert_int_equal(json_integer_value(json_object_get(json_array_get(res, 0), "seq")),
                     json_integer_value(json_object_get(json_array_get(res, 2), "seq")));
    json_decref(res);
    assert_int_equal(events(f), 2);
    /* A stored event repeated inside a batch with a new one. */
    assert_string_equal(pub(f, "{\"events\":[{\"event_id\":\"b6\"," AGG ",\"aggregate_version\":6},"
                               "{\"event_id\":\"b7\"," AGG ",\"aggregate_version\":7}]}", &res, &d), "");
    assert_true(json_is_true(json_object_get(json_array_get(res, 0), "duplicate")));
    assert_true(json_is_false(json_object_get(json_array_get(res, 1), "duplicate")));
    json_decref(res);
    assert_int_equal(events(f), 3);
#undef AGG
}

static void topic_rules(void **state)
{
    struct fx *f = *state;
    struct mic_error e;
    struct mic_buf b;
    mic_topic_op *t;
    json_t *res;
    int created, d;
    const char *body = "{\"require_versions\":true,\"max_payload_bytes\":8}";

    assert_int_equal(mic_topic_put_parse("strict", body, strlen(body), &f->cfg, &t, &e), MIC_OK);
    mic_topic_op_base(t)->done = done;
    mic_topic_op_base(t)->owner = &f->sem;
    assert_int_equal(mic_writer_submit(f->w, mic_topic_op_base(t)), MIC_OK);
    sem_wait(&f->sem);
    mic_buf_init(&b);
    assert_int_equal(mic_topic_op_result(t, &b, &created, &e), MIC_OK);
    assert_int_equal(created, 1);
    mic_buf_fini(&b);
    mic_topic_op_free(t);
    assert_string_equal(pub(f, "{\"topic\":\"strict\"}", &res, &d), "invalid_event");
    assert_string_equal(pub(f, "{\"topic\":\"strict\",\"aggregate_type\":\"o\",\"aggregate_id\":\"x\","
                               "\"aggregate_version\":1,\"payload\":\"123456789\"}", &res, &d),
                        "payload_too_large");
    pub_ok(f, "{\"topic\":\"strict\",\"aggregate_type\":\"o\",\"aggregate_id\":\"x\","
              "\"aggregate_version\":1,\"payload\":\"1234\"}", 0);
    assert_int_equal(events(f), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(times_come_from_the_clock, setup, teardown),
        cmocka_unit_test_setup_teardown(idempotent_by_digest, setup, teardown),
        cmocka_unit_test_setup_teardown(version_too_big_for_jansson, setup, teardown),
        cmocka_unit_test_setup_teardown(version_rules, setup, teardown),
        cmocka_unit_test_setup_teardown(batch_rules, setup, teardown),
        cmocka_unit_test_setup_teardown(topic_rules, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
