/* test_group.c - the group registry (server/engine/group.[ch]) against a
 * real store and writer (tests/kit/procfx.h), with an injected clock:
 * a group created with nothing but its topics gets the defaults of DESIGN
 * section 2 (and a replay run's group the same ones), the fields fixed at
 * creation are refused on an update while the others apply at once, topic
 * patterns match exactly or by prefix (and the registry's cache of them
 * follows every change), a listing shows what a key's scopes cover, the
 * registry loads the same groups after a restart, and the background work
 * goes as group.h says: the backfill walks the log a chunk per batch,
 * keeping its position in the group record, an ordered group then releases
 * its heads, a replay run's group waits for its selection, and a deleted
 * group's keys go in chunks.
 *
 * The background work is driven through a registry of the test's own
 * (mic_groups_new on the procfx's store) with callbacks that record what
 * they are handed (struct mic_groups_work): the writer's registry never
 * hears of those groups, so nothing but the test moves them, one call of
 * mic_groups_background per batch (procfx_exec). */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/buf.h"
#include "core/err.h"
#include "core/key.h"
#include "engine/delivery.h"
#include "engine/group.h"
#include "engine/replay.h"
#include "procfx.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T0 PROCFX_T0
#define SEC PROCFX_SEC

/* What PUT {"topics":["t"]} stores for group "g" (DESIGN section 2's
 * defaults, rendered as GET shows them). */
#define DEFAULT_G                                                                           \
    "{\"name\":\"g\",\"topics\":[\"t\"],\"kind\":\"projection\",\"ordered\":false,"         \
    "\"max_attempts\":10,\"backoff\":{\"initial_ms\":1000,\"max_ms\":300000,\"multiplier\":2}," \
    "\"lease_ttl_s\":30,\"start\":\"all\",\"alert_oldest_unhandled_s\":null,"              \
    "\"dlq_policy\":\"release\"}"

/* ---- Helpers ---- */

/* PUT group 'name': returns the result (the parse's error, or the op's);
 * on success *json (may be NULL; the caller frees it) is the resource and
 * *created (may be NULL) is set. */
static int put(struct procfx *f, const char *name, const char *body, char **json, int *created,
               struct mic_error *e)
{
    struct mic_buf b;
    mic_group_op *o;
    int rc, c = 0;

    memset(e, 0, sizeof *e);
    if ((rc = mic_group_put_parse(name, body, strlen(body), &f->cfg, &o, e)))
        return rc;
    procfx_run(f, mic_group_op_base(o));
    mic_buf_init(&b);
    rc = mic_group_op_result(o, &b, &c, e);
    if (rc == MIC_OK && json)
        *json = strndup(b.p ? b.p : "", b.len);
    if (created)
        *created = c;
    mic_buf_fini(&b);
    mic_group_op_free(o);
    return rc;
}

/* GET /v1/groups/{name}: the resource (the caller frees it), or NULL for
 * not_found. */
static char *get(struct procfx *f, const char *name)
{
    struct mic_error e;
    struct mic_buf b;
    char *s = NULL;
    int rc;

    mic_buf_init(&b);
    rc = mic_group_get(f->store, name, &b, &e);
    assert_true(rc == MIC_OK || rc == MIC_ENOTFOUND);
    if (rc == MIC_OK)
        s = strndup(b.p, b.len);
    else
        assert_string_equal(e.code, "not_found");
    mic_buf_fini(&b);
    return s;
}

/* GET /v1/groups as key 'k' (NULL: no keys) sees it (the caller frees). */
static char *list(struct procfx *f, const struct mic_key *k)
{
    struct mic_error e;
    struct mic_buf b;
    char *s;

    mic_buf_init(&b);
    assert_int_equal(mic_group_list(f->store, k, &b, &e), MIC_OK);
    s = strndup(b.p, b.len);
    mic_buf_fini(&b);
    return s;
}

static void publish(struct procfx *f, const char *body)
{
    assert_int_equal(procfx_publish(f, body, NULL, NULL), MIC_OK);
}

/* Publish 'n' events, seq by seq: odd ones of topic "t", even ones "u". */
static void publish_alternating(struct procfx *f, int n)
{
    struct mic_buf b;

    for (int i = 0; i < n;) {
        mic_buf_init(&b);
        mic_buf_puts(&b, "{\"events\":[");
        for (int k = 0; k < 500 && i < n; k++, i++)
            mic_buf_printf(&b, "%s{\"topic\":\"%s\"}", k ? "," : "", i % 2 ? "u" : "t");
        mic_buf_puts(&b, "]}");
        assert_false(b.oom);
        publish(f, b.p);
        mic_buf_fini(&b);
    }
}

static uint64_t pending_of(struct procfx *f, const char *group)
{
    uint64_t fig[MIC_GSTAT_N];

    procfx_figures(f->store, group, fig);
    return fig[MIC_GSTAT_PENDING];
}

/* A log record as mic_group_fills and mic_group_takes look at it. */
static struct mic_rec rec_at(uint64_t seq, int64_t created_at_us)
{
    struct mic_rec r;

    memset(&r, 0, sizeof r);
    r.seq = seq;
    r.created_at_us = r.received_at_us = created_at_us;
    return r;
}

/* ---- Defaults ---- */

struct cfg_seen {
    const char *name;
    int found;
    struct mic_group_cfg c; /* copied scalars; topics/strings not kept */
    uint32_t gid;
    int backfilling;
};

static int look(struct mic_wctx *w, void *arg)
{
    struct cfg_seen *s = arg;
    struct mic_group *gr = mic_groups_find(w->groups, s->name, strlen(s->name));

    s->found = gr != NULL;
    if (gr) {
        s->c = *mic_group_config(gr);
        s->c.topics = NULL;
        s->c.replay_run = s->c.replay_fields = NULL;
        s->c.sink_url = s->c.sink_stream = s->c.sink_subject = NULL;
        s->gid = mic_group_id(gr);
        s->backfilling = mic_group_backfilling(gr);
        if (strcmp(mic_group_name(gr), s->name))
            s->found = -1;
    }
    return MIC_OK;
}

static struct cfg_seen registry_cfg(struct procfx *f, const char *name)
{
    struct cfg_seen s;

    memset(&s, 0, sizeof s);
    s.name = name;
    assert_int_equal(procfx_exec(f, look, &s), MIC_OK);
    assert_int_not_equal(s.found, -1); /* mic_group_name agrees */
    return s;
}

/* The one set of defaults: a PUT with topics only stores them, GET and the
 * registry agree, a second PUT of the same body is an update (created 0),
 * and a replay run's group gets the same retry settings. */
static void create_fills_the_defaults(void **state)
{
    struct procfx *f = *state;
    struct mic_error e;
    struct cfg_seen s;
    char *json, *again, *rj;
    json_t *plain, *run;
    mic_replay_op *o;
    int created;
    static const char *const same[] = {"max_attempts", "backoff", "lease_ttl_s",
                                       "alert_oldest_unhandled_s", "dlq_policy"};

    assert_int_equal(put(f, "g", "{\"topics\":[\"t\"]}", &json, &created, &e), MIC_OK);
    assert_int_equal(created, 1);
    assert_string_equal(json, DEFAULT_G);
    again = get(f, "g");
    assert_string_equal(again, DEFAULT_G);
    free(again);
    s = registry_cfg(f, "g");
    assert_int_equal(s.found, 1);
    assert_int_equal(s.c.max_attempts, 10);
    assert_int_equal(s.c.backoff_initial_ms, 1000);
    assert_int_equal(s.c.backoff_max_ms, 300000);
    assert_true(s.c.backoff_multiplier == 2.0);
    assert_int_equal(s.c.lease_ttl_s, 30);
    assert_int_equal(s.c.start, MIC_START_ALL);
    assert_int_equal(s.c.alert_s, -1);
    assert_int_equal(s.c.effect, 0);
    assert_int_equal(s.c.ordered, 0);
    assert_int_equal(s.c.dlq_hold, 0);
    assert_int_equal(s.backfilling, 0); /* an empty log: nothing to walk */
    /* The same body again: an update that changes nothing. */
    assert_int_equal(put(f, "g", "{\"topics\":[\"t\"]}", &again, &created, &e), MIC_OK);
    assert_int_equal(created, 0);
    assert_string_equal(again, json);
    free(again);

    /* A replay run's group (replay.c writes its configuration itself):
     * the same retry settings as a group made with the defaults. */
    publish(f, "{\"event_id\":\"e1\",\"topic\":\"t\"}");
    assert_int_equal(mic_replay_create_parse(f->store, "{\"topic\":\"t\",\"run_id\":\"r1\"}",
                                             strlen("{\"topic\":\"t\",\"run_id\":\"r1\"}"),
                                             &f->cfg, &o, &e),
                     MIC_OK);
    assert_int_equal(mic_replay_select(f->store, o), MIC_OK);
    procfx_run(f, mic_replay_op_base(o));
    mic_replay_op_free(o);
    rj = get(f, "replay.r1");
    assert_non_null(rj);
    plain = json_loads(json, 0, NULL);
    run = json_loads(rj, 0, NULL);
    assert_non_null(plain);
    assert_non_null(run);
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
        if (!json_equal(json_object_get(plain, same[i]), json_object_get(run, same[i])))
            fail_msg("a replay run's group has %s other than the defaults: %s", same[i], rj);
    json_decref(plain);
    json_decref(run);
    free(rj);
    free(json);
}

/* ---- Updates ---- */

/* topics, ordered, start and sink are fixed at creation: a PUT changing
 * one is refused 409 immutable_field naming it, and changes nothing; a
 * PUT changing only the others replaces them, in the registry at once. */
static void fixed_fields_refused_on_update(void **state)
{
    struct procfx *f = *state;
    static const struct {
        const char *body, *field;
    } refused[] = {
        {"{\"topics\":[\"t\"],\"start\":\"new\"}", "topics"},
        {"{\"topics\":[\"t\",\"u*\",\"v\"],\"start\":\"new\"}", "topics"},
        {"{\"topics\":[\"t\",\"u*\"],\"start\":\"new\",\"ordered\":true}", "ordered"},
        {"{\"topics\":[\"t\",\"u*\"],\"start\":\"all\"}", "start"},
        {"{\"topics\":[\"t\",\"u*\"],\"start\":\"2026-09-21T14:13:20Z\"}", "start"},
        {"{\"topics\":[\"t\",\"u*\"],\"start\":\"new\",\"sink\":{\"type\":\"nats\","
         "\"url\":\"nats://127.0.0.1:4222\",\"stream\":\"S\",\"subject\":\"a.{topic}\"}}",
         "sink"},
    };
    const char *base = "{\"topics\":[\"t\",\"u*\"],\"start\":\"new\"}";
    struct mic_error e;
    struct cfg_seen s;
    char *stored, *now, *json;
    int created;

    assert_int_equal(put(f, "g", base, NULL, &created, &e), MIC_OK);
    assert_int_equal(created, 1);
    stored = get(f, "g");
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        int rc = put(f, "g", refused[i].body, NULL, NULL, &e);
        if (rc != MIC_ECONFLICT || strcmp(e.code, "immutable_field") ||
            strcmp(e.field, refused[i].field))
            fail_msg("PUT %s: %d %s field '%s', expected 409 immutable_field on %s",
                     refused[i].body, rc, e.code ? e.code : "-", e.field, refused[i].field);
        now = get(f, "g");
        assert_string_equal(now, stored);
        free(now);
    }
    s = registry_cfg(f, "g");
    assert_int_equal(s.c.ordered, 0);
    assert_int_equal(s.c.start, MIC_START_NEW);

    /* The others change, and apply from the next batch on. */
    assert_int_equal(put(f, "g", "{\"topics\":[\"t\",\"u*\"],\"start\":\"new\",\"max_attempts\":3,"
                                 "\"lease_ttl_s\":5,\"kind\":\"effect\",\"dlq_policy\":\"hold\","
                                 "\"alert_oldest_unhandled_s\":60}",
                         &json, &created, &e),
                     MIC_OK);
    assert_int_equal(created, 0);
    now = get(f, "g");
    assert_string_equal(now, json);
    assert_non_null(strstr(now, "\"max_attempts\":3,"));
    free(now);
    free(json);
    s = registry_cfg(f, "g");
    assert_int_equal(s.c.max_attempts, 3);
    assert_int_equal(s.c.lease_ttl_s, 5);
    assert_int_equal(s.c.effect, 1);
    assert_int_equal(s.c.dlq_hold, 1);
    assert_int_equal(s.c.alert_s, 60);
    /* A PUT replaces the resource: what it leaves out is the default. */
    assert_int_equal(put(f, "g", base, NULL, NULL, &e), MIC_OK);
    s = registry_cfg(f, "g");
    assert_int_equal(s.c.max_attempts, 10);
    assert_int_equal(s.c.dlq_hold, 0);

    /* A start time is fixed to the microsecond. */
    assert_int_equal(put(f, "s", "{\"topics\":[\"t\"],\"start\":\"2026-09-21T14:13:20Z\"}", NULL,
                         &created, &e),
                     MIC_OK);
    assert_int_equal(put(f, "s", "{\"topics\":[\"t\"],\"start\":\"2026-09-21T14:13:20.000000Z\"}",
                         NULL, &created, &e),
                     MIC_OK);
    assert_int_equal(created, 0);
    assert_int_equal(put(f, "s", "{\"topics\":[\"t\"],\"start\":\"2026-09-21T14:13:20.000001Z\"}",
                         NULL, NULL, &e),
                     MIC_ECONFLICT);
    assert_string_equal(e.field, "start");
    s = registry_cfg(f, "s");
    assert_int_equal(s.c.start, MIC_START_TIME);
    assert_int_equal(s.c.start_us, T0);
    free(stored);
}

/* What a PUT body may not be: refused at parse with the field to blame. */
static void bad_bodies_name_their_field(void **state)
{
    struct procfx *f = *state;
    static const struct {
        const char *name, *body;
        int rc;
        const char *field;
    } bad[] = {
        {"g", "{\"topics\":[]}", MIC_EINVAL, "topics"},
        {"g", "{}", MIC_EINVAL, "topics"},
        {"g", "{\"topics\":[\"a*b\"]}", MIC_EINVAL, "topics[0]"},
        {"g", "{\"topics\":[\"t\",\"**\"]}", MIC_EINVAL, "topics[1]"},
        {"g", "{\"topics\":[\"t\"],\"colour\":1}", MIC_EINVAL, "colour"},
        {"g", "{\"topics\":[\"t\"],\"name\":\"h\"}", MIC_EINVAL, "name"},
        {"g", "{\"topics\":[\"t\"],\"max_attempts\":0}", MIC_EINVAL, "max_attempts"},
        {"g", "{\"topics\":[\"t\"],\"max_attempts\":1001}", MIC_EINVAL, "max_attempts"},
        {"g", "{\"topics\":[\"t\"],\"lease_ttl_s\":43201}", MIC_EINVAL, "lease_ttl_s"},
        {"g", "{\"topics\":[\"t\"],\"backoff\":{\"initial_ms\":10,\"max_ms\":9}}", MIC_EINVAL,
         "backoff.max_ms"},
        {"g", "{\"topics\":[\"t\"],\"backoff\":{\"multiplier\":0.5}}", MIC_EINVAL,
         "backoff.multiplier"},
        {"g", "{\"topics\":[\"t\"],\"start\":\"yesterday\"}", MIC_EINVAL, "start"},
        {"g", "{\"topics\":[\"t\"],\"kind\":\"both\"}", MIC_EINVAL, "kind"},
        {"g", "{\"topics\":[\"t\"],\"dlq_policy\":\"drop\"}", MIC_EINVAL, "dlq_policy"},
        {"g", "{\"topics\":[\"t\"],\"sink\":{\"type\":\"nats\",\"url\":\"http://x:1\","
              "\"stream\":\"S\",\"subject\":\"a\"}}",
         MIC_EINVAL, "sink.url"},
        {"replay.x", "{\"topics\":[\"t\"]}", MIC_EINVAL, "replay_run"},
        {"g", "{\"topics\":[\"t\"],\"replay_run\":\"x\"}", MIC_EINVAL, "replay_run"},
        {"g", "[1]", MIC_EINVAL, ""},
        {"g", "{\"topics\":", MIC_EPARSE, ""},
        {"a b", "{\"topics\":[\"t\"]}", MIC_ENOTFOUND, ""},
    };
    struct mic_error e;

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = put(f, bad[i].name, bad[i].body, NULL, NULL, &e);
        if (rc != bad[i].rc || strcmp(e.field, bad[i].field))
            fail_msg("PUT %s %s: %d field '%s', expected %d field '%s'", bad[i].name,
                     bad[i].body, rc, e.field, bad[i].rc, bad[i].field);
    }
    /* None of them stored anything. */
    assert_null(get(f, "g"));
}

/* ---- Topic patterns ---- */

struct subs {
    const char *const *topics; /* NULL-terminated */
    char got[16][128];         /* per topic: the subscribers' names, sorted, space-separated */
    int rc;
};

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int subscribers_of(struct mic_wctx *w, void *arg)
{
    struct subs *s = arg;

    s->rc = MIC_OK;
    for (int i = 0; s->topics[i]; i++) {
        struct mic_group *const *gs;
        const char *names[16];
        int n;

        s->got[i][0] = 0;
        if ((s->rc = mic_groups_subscribers(w->groups, s->topics[i], strlen(s->topics[i]), &gs,
                                            &n)))
            return MIC_OK;
        for (int k = 0; k < n && k < 16; k++)
            names[k] = mic_group_name(gs[k]);
        qsort(names, (size_t)n, sizeof names[0], cmp_str);
        for (int k = 0; k < n; k++) {
            strcat(s->got[i], k ? " " : "");
            strcat(s->got[i], names[k]);
        }
    }
    return MIC_OK;
}

static void expect_subscribers(struct procfx *f, const char *const *topics,
                               const char *const *want)
{
    struct subs s;

    memset(&s, 0, sizeof s);
    s.topics = topics;
    assert_int_equal(procfx_exec(f, subscribers_of, &s), MIC_OK);
    assert_int_equal(s.rc, MIC_OK);
    for (int i = 0; topics[i]; i++)
        if (strcmp(s.got[i], want[i]))
            fail_msg("subscribers of '%s': '%s', expected '%s'", topics[i], s.got[i], want[i]);
}

/* An exact name matches itself only (bytes, case included); a prefix
 * ending in '*' matches every topic that starts with it, the prefix itself
 * too; "*" matches everything.  The registry's per-topic cache follows a
 * group created or deleted later, and a publish fans out by the same
 * rule. */
static void topic_patterns_exact_and_prefix(void **state)
{
    struct procfx *f = *state;
    static const char *const topics[] = {"orders", "ord", "or",    "ordersx", "Orders",
                                         "billing", "billing.x", "ship.", "ship", NULL};
    static const char *const want[] = {"every exact prefix", "every prefix", "every",
                                       "every prefix", "every", "every two", "every",
                                       "every two", "every"};
    static const char *const created[] = {"every exact late prefix", "every prefix", "every",
                                          "every prefix", "every", "every two", "every",
                                          "every two", "every"};
    static const char *const after[] = {"every late prefix", "every prefix", "every",
                                        "every prefix", "every", "every two", "every",
                                        "every two", "every"};

    procfx_group(f, "exact", "{\"topics\":[\"orders\"]}");
    procfx_group(f, "prefix", "{\"topics\":[\"ord*\"]}");
    procfx_group(f, "every", "{\"topics\":[\"*\"]}");
    procfx_group(f, "two", "{\"topics\":[\"billing\",\"ship.*\"]}");
    expect_subscribers(f, topics, want);
    /* The answers above are cached: changes must show. */
    procfx_group(f, "late", "{\"topics\":[\"orders\"]}");
    expect_subscribers(f, topics, created);
    procfx_group_del(f, "exact");
    expect_subscribers(f, topics, after);
    /* Fan-out takes the same groups. */
    publish(f, "{\"event_id\":\"e1\",\"topic\":\"ord\"}");
    assert_int_equal(pending_of(f, "prefix"), 1);
    assert_int_equal(pending_of(f, "every"), 1);
    assert_int_equal(pending_of(f, "late"), 0);
    assert_int_equal(pending_of(f, "two"), 0);
}

/* ---- Listings ---- */

static struct mic_key key_with(const char *scopes)
{
    struct mic_key k;

    memset(&k, 0, sizeof k);
    snprintf(k.id, sizeof k.id, "k");
    snprintf(k.scopes, sizeof k.scopes, "%s", scopes);
    return k;
}

/* GET /v1/groups lists every group without keys, and with a key the
 * groups its group: scopes (or "*") cover, each as GET shows it, in name
 * order. */
static void listing_narrowed_by_scopes(void **state)
{
    struct procfx *f = *state;
    struct mic_key k;
    char *a, *b, *x, *l, want[4096];

    l = list(f, NULL);
    assert_string_equal(l, "{\"groups\":[]}");
    free(l);
    procfx_group(f, "ship.x", "{\"topics\":[\"s\"]}");
    procfx_group(f, "billing.b", "{\"topics\":[\"b\"],\"kind\":\"effect\"}");
    procfx_group(f, "billing.a", "{\"topics\":[\"b\"]}");
    a = get(f, "billing.a");
    b = get(f, "billing.b");
    x = get(f, "ship.x");

    snprintf(want, sizeof want, "{\"groups\":[%s,%s,%s]}", a, b, x);
    l = list(f, NULL);
    assert_string_equal(l, want);
    free(l);
    k = key_with("*");
    l = list(f, &k);
    assert_string_equal(l, want);
    free(l);

    snprintf(want, sizeof want, "{\"groups\":[%s,%s]}", a, b);
    k = key_with("group:billing.*");
    l = list(f, &k);
    assert_string_equal(l, want);
    free(l);

    snprintf(want, sizeof want, "{\"groups\":[%s,%s]}", a, x);
    k = key_with("topic:*,group:ship.x,group:billing.a");
    l = list(f, &k);
    assert_string_equal(l, want);
    free(l);

    k = key_with("topic:*"); /* topics only: no group */
    l = list(f, &k);
    assert_string_equal(l, "{\"groups\":[]}");
    free(l);
    k = key_with("group:billing"); /* a name, not a prefix */
    l = list(f, &k);
    assert_string_equal(l, "{\"groups\":[]}");
    free(l);
    free(a);
    free(b);
    free(x);
}

/* ---- Restart ---- */

struct census {
    int n;
    char names[8][32];
};

static int count_groups(struct mic_wctx *w, void *arg)
{
    struct census *c = arg;

    c->n = 0;
    for (struct mic_group *gr = mic_groups_first(w->groups); gr; gr = mic_groups_next(gr))
        if (c->n < 8)
            snprintf(c->names[c->n++], sizeof c->names[0], "%s", mic_group_name(gr));
    return MIC_OK;
}

/* Stopped and started on the same store, the registry holds the same
 * groups (not the deleted one) with the same ids and settings, fan-out
 * goes on, and a new group gets an id never used before. */
static void registry_loads_after_restart(void **state)
{
    struct procfx *f = *state;
    struct cfg_seen a0, a1, b0, b1, c0, n;
    struct census cs;
    char *ja, *jb, *j;

    procfx_group(f, "a", "{\"topics\":[\"t\"],\"ordered\":true,\"max_attempts\":3,"
                         "\"start\":\"new\",\"dlq_policy\":\"hold\","
                         "\"alert_oldest_unhandled_s\":60,"
                         "\"backoff\":{\"initial_ms\":5,\"max_ms\":50,\"multiplier\":1.5}}");
    procfx_group(f, "b", "{\"topics\":[\"x*\"],\"kind\":\"effect\",\"lease_ttl_s\":7}");
    procfx_group(f, "c", "{\"topics\":[\"t\"]}");
    c0 = registry_cfg(f, "c");
    procfx_group_del(f, "c");
    a0 = registry_cfg(f, "a");
    b0 = registry_cfg(f, "b");
    ja = get(f, "a");
    jb = get(f, "b");

    procfx_stop(f);
    assert_int_equal(procfx_start(f), 0);

    memset(&cs, 0, sizeof cs);
    assert_int_equal(procfx_exec(f, count_groups, &cs), MIC_OK);
    assert_int_equal(cs.n, 2);
    assert_true((!strcmp(cs.names[0], "a") && !strcmp(cs.names[1], "b")) ||
                (!strcmp(cs.names[0], "b") && !strcmp(cs.names[1], "a")));
    a1 = registry_cfg(f, "a");
    b1 = registry_cfg(f, "b");
    assert_int_equal(a1.found, 1);
    assert_int_equal(b1.found, 1);
    assert_int_equal(registry_cfg(f, "c").found, 0);
    assert_int_equal(a1.gid, a0.gid);
    assert_int_equal(b1.gid, b0.gid);
    assert_int_equal(a1.c.ordered, 1);
    assert_int_equal(a1.c.max_attempts, 3);
    assert_int_equal(a1.c.start, MIC_START_NEW);
    assert_int_equal(a1.c.dlq_hold, 1);
    assert_int_equal(a1.c.alert_s, 60);
    assert_int_equal(a1.c.backoff_initial_ms, 5);
    assert_int_equal(a1.c.backoff_max_ms, 50);
    assert_true(a1.c.backoff_multiplier == 1.5);
    assert_int_equal(b1.c.effect, 1);
    assert_int_equal(b1.c.lease_ttl_s, 7);
    j = get(f, "a");
    assert_string_equal(j, ja);
    free(j);
    j = get(f, "b");
    assert_string_equal(j, jb);
    free(j);
    assert_null(get(f, "c"));

    publish(f, "{\"event_id\":\"e1\",\"topic\":\"t\"}");
    publish(f, "{\"event_id\":\"e2\",\"topic\":\"xy\"}");
    assert_int_equal(pending_of(f, "a"), 1);
    assert_int_equal(pending_of(f, "b"), 1);
    procfx_group(f, "c", "{\"topics\":[\"t\"]}");
    n = registry_cfg(f, "c");
    assert_true(n.gid != c0.gid && n.gid != a0.gid && n.gid != b0.gid);
    free(ja);
    free(jb);
}

/* ---- Background work, on a registry of the test's own ---- */

#define MAX_ADDS 8192

/* What the work callbacks were handed. */
static struct {
    uint64_t adds[MAX_ADDS];
    char add_group[MAX_ADDS][8];
    int nadds;
    int releases;           /* release_heads calls */
    uint64_t release_cursor[8];
    int release_done_after; /* release_heads sets *done on this call */
    int drops;
    uint32_t drop_gid;
    int drop_budget;
} seen;

static int rec_add(struct mic_wctx *w, struct mic_group *gr, const struct mic_rec *r)
{
    (void)w;
    if (seen.nadds < MAX_ADDS) {
        snprintf(seen.add_group[seen.nadds], sizeof seen.add_group[0], "%s", mic_group_name(gr));
        seen.adds[seen.nadds] = r->seq;
    }
    seen.nadds++;
    return MIC_OK;
}

static int rec_release(struct mic_wctx *w, struct mic_group *gr, int max, uint64_t *cursor,
                       int *done)
{
    (void)w, (void)gr, (void)max;
    if (seen.releases < 8)
        seen.release_cursor[seen.releases] = *cursor;
    seen.releases++;
    *cursor += 7; /* the registry must hand it back next time */
    *done = seen.releases >= seen.release_done_after;
    return MIC_OK;
}

static int rec_drop(struct mic_wctx *w, uint32_t gid, int budget, int *finished)
{
    seen.drops++;
    seen.drop_gid = gid;
    seen.drop_budget = budget;
    return mic_delivery_drop_step(w, gid, budget, finished);
}

static const struct mic_groups_work rec_work = {rec_add, rec_release, rec_drop};

/* One batch's worth of the test's registry. */
struct mine {
    mic_groups *g;
    const char *create_name, *create_json; /* create this group first, if set */
    int selecting;
    struct mic_group *created;
    int created_rc;
    const char *delete_name;
    int mark_selected;   /* call mic_groups_selected on 'created' */
    int run_background;
    int rc;
    /* What the registry says afterwards. */
    int busy, backfilling, held, nwake;
    uint32_t wake0;
    int fills[8];        /* mic_group_fills of created for probe[i] */
    struct mic_rec probe[8];
    int nprobe;
};

static int mine_batch(struct mic_wctx *w, void *arg)
{
    struct mine *m = arg;

    m->rc = MIC_OK;
    if (m->create_name) {
        m->created_rc = mic_groups_create(m->g, w, m->create_name, m->create_json,
                                          strlen(m->create_json), m->selecting, &m->created);
        if (m->created_rc)
            return MIC_OK;
        m->create_name = NULL;
    }
    if (m->delete_name) {
        struct mic_group *gr = mic_groups_find(m->g, m->delete_name, strlen(m->delete_name));
        m->delete_name = NULL;
        m->created = NULL;
        if (!gr || (m->rc = mic_groups_delete(m->g, w, gr)))
            return m->rc ? m->rc : MIC_OK;
    }
    if (m->mark_selected && (m->rc = mic_groups_selected(m->g, w, m->created)))
        return m->rc;
    m->mark_selected = 0;
    if (m->run_background && (m->rc = mic_groups_background(m->g, w, &rec_work)))
        return m->rc;
    m->busy = mic_groups_busy(m->g);
    m->nwake = w->nwake;
    m->wake0 = w->nwake ? w->wake[0] : 0;
    if (m->created) {
        m->backfilling = mic_group_backfilling(m->created);
        m->held = mic_group_held(m->created);
        for (int i = 0; i < m->nprobe; i++)
            m->fills[i] = mic_group_fills(m->created, &m->probe[i]);
    }
    return MIC_OK;
}

/* A registry of the test's own over f's store, the callbacks' record
 * cleared (release_heads says done on call 'release_done_after'), and
 * group 'name' ('json') to create in the next batch. */
static void mine_open(struct procfx *f, struct mine *m, const char *name, const char *json,
                      int release_done_after)
{
    memset(&seen, 0, sizeof seen);
    seen.release_done_after = release_done_after;
    memset(m, 0, sizeof *m);
    assert_int_equal(mic_groups_new(&m->g, f->store), MIC_OK);
    m->create_name = name;
    m->create_json = json;
}

static void mine_run(struct procfx *f, struct mine *m)
{
    assert_int_equal(procfx_exec(f, mine_batch, m), MIC_OK);
    assert_int_equal(m->rc, MIC_OK);
}

/* A group made with start `all` on a log of 4,500 events (its topic's at
 * the odd seqs) walks it 2,000 records a batch: each call hands on the
 * group's events of the next chunk, in seq order, once each; the position
 * is stored in the group record (a registry loaded afresh sees it) and
 * mic_group_fills says which events the backfill has still to add; the
 * events stored after the group was made are not the backfill's. */
static void backfill_walks_the_log_in_chunks(void **state)
{
    struct procfx *f = *state;
    static const int per_call[] = {1000, 1000, 250};
    struct mine m;
    mic_groups *fresh;
    struct mic_group *gr;
    int total = 0;

    publish_alternating(f, 4500);
    mine_open(f, &m, "g", "{\"topics\":[\"t\"]}", 0);
    m.nprobe = 4;
    m.probe[0] = rec_at(1, T0);
    m.probe[1] = rec_at(2001, T0);
    m.probe[2] = rec_at(4500, T0);
    m.probe[3] = rec_at(4501, T0); /* after the group: fan-out's */
    mine_run(f, &m);
    assert_int_equal(m.created_rc, MIC_OK);
    assert_int_equal(seen.nadds, 0); /* nothing before the first chunk */
    assert_int_equal(m.backfilling, 1);
    assert_int_equal(m.busy, 1);
    assert_int_equal(m.fills[0], 1);
    assert_int_equal(m.fills[1], 1);
    assert_int_equal(m.fills[2], 1);
    assert_int_equal(m.fills[3], 0);

    m.run_background = 1;
    for (int call = 0; call < 3; call++) {
        int before = seen.nadds;

        mine_run(f, &m);
        if (seen.nadds - before != per_call[call])
            fail_msg("backfill call %d added %d events, expected %d", call + 1,
                     seen.nadds - before, per_call[call]);
        for (int i = before; i < seen.nadds; i++) {
            uint64_t want = 2 * (uint64_t)i + 1; /* the t events, in order */
            if (seen.adds[i] != want || strcmp(seen.add_group[i], "g"))
                fail_msg("add %d: %s seq %llu, expected g seq %llu", i, seen.add_group[i],
                         (unsigned long long)seen.adds[i], (unsigned long long)want);
        }
        total = seen.nadds;
        if (call == 0) {
            assert_int_equal(m.fills[0], 0); /* added */
            assert_int_equal(m.fills[1], 1); /* the next chunk's */
            assert_int_equal(m.backfilling, 1);
            /* The position is in the store: a registry loaded now (after a
             * restart, say) resumes at seq 2001. */
            assert_int_equal(mic_groups_new(&fresh, f->store), MIC_OK);
            gr = mic_groups_find(fresh, "g", 1);
            assert_non_null(gr);
            assert_int_equal(mic_group_backfilling(gr), 1);
            assert_int_equal(mic_group_fills(gr, &m.probe[0]), 0);
            assert_int_equal(mic_group_fills(gr, &m.probe[1]), 1);
            assert_int_equal(mic_groups_busy(fresh), 1);
            mic_groups_free(fresh);
        }
    }
    assert_int_equal(total, 2250);
    assert_int_equal(m.backfilling, 0);
    assert_int_equal(m.fills[2], 0);
    assert_int_equal(seen.releases, 0); /* not ordered: no heads to release */
    /* One more call finds nothing left, and the registry is idle. */
    mine_run(f, &m);
    assert_int_equal(seen.nadds, 2250);
    assert_int_equal(m.busy, 0);
    assert_int_equal(mic_groups_new(&fresh, f->store), MIC_OK);
    gr = mic_groups_find(fresh, "g", 1);
    assert_int_equal(mic_group_backfilling(gr), 0);
    assert_int_equal(mic_groups_busy(fresh), 0);
    mic_groups_free(fresh);
    mic_groups_free(m.g);
}

/* start `new` walks nothing; start at a time takes the events created at
 * or after it; a group whose topics hold no event skips the walk. */
static void backfill_follows_start(void **state)
{
    struct procfx *f = *state;
    struct mine m;
    struct mic_rec early = rec_at(1, T0 - 1), on = rec_at(2, T0), later = rec_at(3, T0 + SEC);

    publish(f, "{\"event_id\":\"a\",\"topic\":\"t\",\"created_at\":\"2026-09-21T14:13:19.999999Z\"}");
    publish(f, "{\"event_id\":\"b\",\"topic\":\"t\",\"created_at\":\"2026-09-21T14:13:20Z\"}");
    publish(f, "{\"event_id\":\"c\",\"topic\":\"t\",\"created_at\":\"2026-09-21T14:13:21Z\"}");
    mine_open(f, &m, "new", "{\"topics\":[\"t\"],\"start\":\"new\"}", 0);
    mine_run(f, &m);
    assert_int_equal(m.backfilling, 0);
    assert_int_equal(m.busy, 0);

    m.create_name = "empty";
    m.create_json = "{\"topics\":[\"nothing*\"]}";
    mine_run(f, &m);
    assert_int_equal(m.backfilling, 0); /* its topics hold no event */
    assert_int_equal(m.busy, 0);

    m.create_name = "from";
    m.create_json = "{\"topics\":[\"t\"],\"start\":\"2026-09-21T14:13:20Z\"}";
    m.nprobe = 3;
    m.probe[0] = early;
    m.probe[1] = on;
    m.probe[2] = later;
    mine_run(f, &m);
    assert_int_equal(m.backfilling, 1);
    assert_int_equal(m.fills[0], 0); /* before the start: never its */
    assert_int_equal(m.fills[1], 1);
    assert_int_equal(m.fills[2], 1);
    assert_int_equal(mic_group_takes(m.created, &early), 0);
    assert_int_equal(mic_group_takes(m.created, &on), 1);
    m.run_background = 1;
    mine_run(f, &m);
    assert_int_equal(seen.nadds, 2);
    assert_int_equal(seen.adds[0], 2);
    assert_int_equal(seen.adds[1], 3);
    assert_string_equal(seen.add_group[0], "from");
    mine_run(f, &m);
    assert_int_equal(m.busy, 0);
    assert_int_equal(seen.nadds, 2);
    mic_groups_free(m.g);
}

/* An ordered group's backfill ends with the release of its heads, a chunk
 * per batch from the cursor the last chunk left, until release_heads says
 * done; then the registry is idle. */
static void ordered_backfill_then_release(void **state)
{
    struct procfx *f = *state;
    struct mine m;

    publish_alternating(f, 100);
    mine_open(f, &m, "o", "{\"topics\":[\"t\"],\"ordered\":true}", 3);
    mine_run(f, &m);
    m.run_background = 1;
    mine_run(f, &m); /* the whole log in one chunk, then the first release */
    assert_int_equal(seen.nadds, 50);
    assert_int_equal(m.backfilling, 0);
    assert_int_equal(seen.releases, 1);
    assert_int_equal(m.busy, 1);
    mine_run(f, &m);
    mine_run(f, &m);
    assert_int_equal(seen.releases, 3);
    assert_int_equal(seen.release_cursor[0], 0);
    assert_int_equal(seen.release_cursor[1], 7);
    assert_int_equal(seen.release_cursor[2], 14);
    assert_int_equal(m.held, 0); /* not a replay run's: never held */
    mine_run(f, &m);
    assert_int_equal(seen.releases, 3);
    assert_int_equal(m.busy, 0);
    assert_int_equal(seen.nadds, 50);
    mic_groups_free(m.g);
}

/* A replay run's group ('selecting') gets no backfill of its own and no
 * live events; it is held until its selection is in and, ordered, its
 * heads are released; then its waiting claims are woken. */
static void selecting_group_waits_for_its_selection(void **state)
{
    struct procfx *f = *state;
    struct mine m;
    struct subs s;
    static const char *const t_only[] = {"t", NULL};

    publish_alternating(f, 10);
    mine_open(f, &m, "replay.x",
              "{\"topics\":[\"t\"],\"ordered\":true,\"replay_run\":\"x\"}", 1);
    m.selecting = 1;
    m.run_background = 1;
    mine_run(f, &m);
    assert_int_equal(m.created_rc, MIC_OK);
    assert_int_equal(m.held, 1);
    assert_int_equal(mic_groups_selecting(m.g), 1);
    assert_int_equal(seen.nadds, 0);
    mine_run(f, &m);
    assert_int_equal(seen.nadds, 0); /* its selection is another module's */
    assert_int_equal(seen.releases, 0);
    assert_int_equal(m.held, 1);
    {
        /* Not a subscriber of its topic (live events are not its), but a
         * holder of it (retention asks it). */
        struct mic_group *const *gs;
        int n;
        assert_int_equal(mic_groups_subscribers(m.g, "t", 1, &gs, &n), MIC_OK);
        assert_int_equal(n, 0);
        assert_int_equal(mic_groups_holders(m.g, "t", 1, &gs, &n), MIC_OK);
        assert_int_equal(n, 1);
        assert_ptr_equal(gs[0], m.created);
    }
    m.mark_selected = 1;
    m.run_background = 0;
    mine_run(f, &m);
    assert_int_equal(m.held, 1); /* its heads are not released yet */
    m.run_background = 1;
    mine_run(f, &m);
    assert_int_equal(seen.releases, 1);
    assert_int_equal(m.held, 0);
    assert_int_equal(m.nwake, 1); /* its waiting claims */
    assert_int_equal(m.wake0, mic_group_id(m.created));
    mic_groups_selecting_done(m.g);
    mine_run(f, &m);
    assert_int_equal(m.busy, 0);
    assert_int_equal(seen.nadds, 0);
    mic_groups_free(m.g);
    /* The writer's registry never heard of it. */
    memset(&s, 0, sizeof s);
    s.topics = t_only;
    assert_int_equal(procfx_exec(f, subscribers_of, &s), MIC_OK);
    assert_string_equal(s.got[0], "");
}

/* A deleted group is gone at once (its name free, a new group of that
 * name a new id) and its keys go in the background, in chunks of 4,000,
 * until none is left. */
static void deleted_group_dropped_in_background(void **state)
{
    struct procfx *f = *state;
    struct mine m;
    uint32_t old;

    mine_open(f, &m, "d", "{\"topics\":[\"t\"]}", 0);
    mine_run(f, &m);
    old = mic_group_id(m.created);
    assert_int_equal(m.busy, 0);
    m.delete_name = "d";
    mine_run(f, &m);
    assert_int_equal(m.busy, 1);
    assert_null(mic_groups_find(m.g, "d", 1));
    assert_null(get(f, "d"));
    assert_int_equal(m.nwake, 1); /* its waiting claims answer */
    assert_int_equal(m.wake0, old);
    m.run_background = 1;
    mine_run(f, &m);
    assert_int_equal(seen.drops, 1);
    assert_int_equal(seen.drop_gid, old);
    assert_int_equal(seen.drop_budget, 4000);
    assert_int_equal(m.busy, 0);
    mine_run(f, &m);
    assert_int_equal(seen.drops, 1);
    m.create_name = "d";
    mine_run(f, &m);
    assert_int_equal(m.created_rc, MIC_OK);
    assert_true(mic_group_id(m.created) != old);
    /* A name taken is refused. */
    m.create_name = "d";
    m.run_background = 0;
    assert_int_equal(procfx_exec(f, mine_batch, &m), MIC_OK);
    assert_int_equal(m.created_rc, MIC_ECONFLICT);
    mic_groups_free(m.g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(create_fills_the_defaults, procfx_setup, procfx_teardown),
        cmocka_unit_test_setup_teardown(fixed_fields_refused_on_update, procfx_setup,
                                        procfx_teardown),
        cmocka_unit_test_setup_teardown(bad_bodies_name_their_field, procfx_setup,
                                        procfx_teardown),
        cmocka_unit_test_setup_teardown(topic_patterns_exact_and_prefix, procfx_setup,
                                        procfx_teardown),
        cmocka_unit_test_setup_teardown(listing_narrowed_by_scopes, procfx_setup,
                                        procfx_teardown),
        cmocka_unit_test_setup_teardown(registry_loads_after_restart, procfx_setup,
                                        procfx_teardown),
        cmocka_unit_test_setup_teardown(backfill_walks_the_log_in_chunks, procfx_setup,
                                        procfx_teardown),
        cmocka_unit_test_setup_teardown(backfill_follows_start, procfx_setup, procfx_teardown),
        cmocka_unit_test_setup_teardown(ordered_backfill_then_release, procfx_setup,
                                        procfx_teardown),
        cmocka_unit_test_setup_teardown(selecting_group_waits_for_its_selection, procfx_setup,
                                        procfx_teardown),
        cmocka_unit_test_setup_teardown(deleted_group_dropped_in_background, procfx_setup,
                                        procfx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
