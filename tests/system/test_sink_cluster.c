/* test_sink_cluster.c - micd's NATS sink (issue 17, DESIGN sections 10 and
 * 13 "NATS sink") against a real three-node JetStream cluster
 * (tests/kit/natsfx.h: three nats-server processes with cluster routes on
 * loopback ports, started and stopped by PID) and a real micd (harness.h).
 *
 *   cluster_fixture      the fixture itself: the cluster has a meta leader,
 *                        a stream has 3 current replicas, Nats-Msg-Id
 *                        dedupes, the stream leader killed with SIGKILL
 *                        and restarted loses nothing, the read-back sees
 *                        every message with its headers.  Needs no sink.
 *   (a) unordered_once   every event of an unordered sink group (500)
 *                        arrives in the stream exactly once, with the
 *                        headers and subject of section 13 (a placeholder
 *                        renders its field with '.', '*', '>', spaces and
 *                        control characters turned into '_', as
 *                        server/relay/sink.c documents);
 *   (b) ordered_order    an ordered group's 5 aggregates x 40 versions
 *                        arrive in aggregate order per aggregate;
 *   (c) nats_node_kill   the stream's leader killed (SIGKILL) mid-relay,
 *                        more events published while it is down, then
 *                        restarted: nothing lost, nothing duplicated
 *                        (count by Nats-Msg-Id == total == published);
 *   (d) micd_kill        micd killed (SIGKILL) mid-relay and restarted on
 *                        the same store: nothing lost, nothing duplicated
 *                        in the stream (the duplicate window absorbs the
 *                        re-publish of deliveries leased at the kill);
 *   (e) nats_all_down    all three nodes stopped while publishing goes on:
 *                        the group's backlog and oldest-unhandled age grow
 *                        (/v1/stats, /metrics), mic_group_alert turns 1,
 *                        sink_status.connected is false; then all three
 *                        back: the backlog drains, the alert flag clears,
 *                        nothing lost or duplicated.  The alert rule on
 *                        that flag is checked with promtool by
 *                        test_promtool (deploy/prometheus/alerts_sink_test.yml,
 *                        series of the same shape).
 *
 * Each scenario has its own stream (R3) and subject space, its own group
 * and topic.  Every wait polls a condition with a bound; nothing sleeps a
 * fixed time to let something happen.  A missing nats-server fails the
 * group setup (nothing is skipped).  A micd without sink groups (before
 * issue 17 points 1-2) fails each scenario at once with a message saying
 * so, from the sink_status check after the group's PUT. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "harness.h"
#include "claimkit.h"
#include "natsfx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CLUSTER_MS 60000   /* the cluster up, a node back */
#define STREAM_MS 30000    /* a stream placed with 3 current replicas */
#ifndef DRAIN_MS   /* a group's backlog relayed (ASan micd, loaded machine) */
#define DRAIN_MS 120000
#endif
#define READ_MS 60000      /* a stream read back */
#define STATE_MS 60000     /* a status or metric reaches a value */

static struct srv S;
static struct natsfx C;
static natsConnection *nc;
static jsCtx *js;
static int started;  /* the group setup succeeded */

/* ---- Setup ---- */

static int group_setup(void **state)
{
    (void)state;
    if (natsfx_start(&C, CLUSTER_MS)) {
        fprintf(stderr, "FAIL: the NATS cluster did not start\n");
        return -1;
    }
    if (natsfx_connect(&C, &nc, &js)) {
        natsfx_stop(&C);
        return -1;
    }
    if (srv_start_shared(&S, NULL)) {
        jsCtx_Destroy(js);
        natsConnection_Destroy(nc);
        natsfx_stop(&C);
        return -1;
    }
    started = 1;
    return 0;
}

static int group_teardown(void **state)
{
    int rc;

    (void)state;
    if (!started) /* the setup failed and cleaned up after itself */
        return 0;
    rc = srv_stop_shared(&S);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    natsfx_stop(&C);
    nats_CloseAndWait(5000);
    return rc;
}

/* ---- micd helpers ---- */

/* The value of the sample `name{group="g"}` in the /metrics text 'body',
 * or -1 if absent. */
static double metric_of(const char *body, const char *name, const char *group)
{
    char key[256];
    const char *p;

    snprintf(key, sizeof key, "%s{group=\"%s\"} ", name, group);
    return body && (p = strstr(body, key)) ? strtod(p + strlen(key), NULL) : -1;
}

/* The same, scraped now. */
static double metric(const char *name, const char *group)
{
    struct resp r;
    double v;

    assert_int_equal(http(&S, "GET", "/metrics", NULL, NULL, 0, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    v = metric_of(r.body, name, group);
    resp_free(&r);
    return v;
}

static double jnum(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);

    return json_is_number(v) ? json_number_value(v) : -1;
}

struct sink_want {
    const char *group;
    int connected;     /* 1, 0 */
};

static int sink_connected_is(void *arg);

/* PUT group 'g' on 'topic' relayed to 'stream' with subject 'tmpl'; 'extra'
 * adds config fields (",\"ordered\":true" or ""); then check micd knows
 * sinks (GET shows sink_status) and that the relay connects, else fail
 * saying why. */
static void put_sink_group(const char *g, const char *topic, const char *stream, const char *tmpl,
                           const char *extra)
{
    char path[128], body[1024];
    json_t *r, *st;

    snprintf(path, sizeof path, "/v1/groups/%s", g);
    snprintf(body, sizeof body,
             "{\"topics\":[\"%s\"],\"sink\":{\"type\":\"nats\",\"url\":\"%s\",\"stream\":\"%s\","
             "\"subject\":\"%s\"}%s}",
             topic, C.urls, stream, tmpl, extra);
    {
        struct resp pr;

        assert_int_equal(http_json(&S, "PUT", path, body, &pr), 0);
        if (pr.status == 422 && strcmp(resp_error_code(&pr), "invalid_request") == 0 &&
            pr.body && strstr(pr.body, "'sink'")) {
            resp_free(&pr);
            fail_msg("micd has no NATS sink groups yet (PUT %s: unknown field 'sink'; issue 17 "
                     "points 1-2 are not in this build)", path);
        }
        if (pr.status != 201)
            fail_msg("PUT %s: want 201, got %ld: %s", path, pr.status, pr.body ? pr.body : "");
        resp_free(&pr);
    }
    r = call(&S, "GET", path, NULL, 200);
    st = json_object_get(r, "sink_status");
    if (!json_is_object(st)) {
        json_decref(r);
        fail_msg("micd has no NATS sink groups yet (GET %s shows no sink_status: issue 17 "
                 "points 1-2 not in this build)", path);
    }
    json_decref(r);
    /* The relay connects to the cluster (else say why not, at once). */
    {
        struct sink_want up = {g, 1};

        if (!await(sink_connected_is, &up, STATE_MS)) {
            char *txt;

            r = call(&S, "GET", path, NULL, 200);
            txt = json_dumps(json_object_get(r, "sink_status"), JSON_COMPACT);
            print_error("GET %s: sink_status %s\n", path, txt ? txt : "?");
            free(txt);
            json_decref(r);
            fail_msg("group %s's relay did not connect to %s within %d ms", g, C.urls, STATE_MS);
        }
    }
}

/* Publish 'n' events (ids PREFIX-FROM .. PREFIX-(FROM+n-1)) to 'topic' in
 * batches of up to 100; every third has an aggregate (type "acct", id
 * "a<k%7>", no version) so that both header shapes are seen. */
static void publish_plain(const char *topic, const char *prefix, int from, int n)
{
    for (int i = from; i < from + n;) {
        json_t *evs = json_array(), *body;
        char *txt;

        for (int k = 0; k < 100 && i < from + n; k++, i++) {
            char id[96], agg[16];
            json_t *e;

            snprintf(id, sizeof id, "%s-%d", prefix, i);
            e = json_pack("{s:s, s:s, s:s, s:{s:i}}", "event_id", id, "topic", topic, "event_type",
                          i % 2 ? "order.placed" : "order.paid", "payload", "n", i);
            if (i % 3 == 0) {
                snprintf(agg, sizeof agg, "a%d", i % 7);
                json_object_set_new(e, "aggregate_type", json_string("acct"));
                json_object_set_new(e, "aggregate_id", json_string(agg));
            }
            json_array_append_new(evs, e);
        }
        body = json_pack("{s:o}", "events", evs);
        txt = json_dumps(body, JSON_COMPACT);
        json_decref(call(&S, "POST", "/v1/events", txt, 201));
        free(txt);
        json_decref(body);
    }
}

struct drained {
    const char *group;
};

/* The group has nothing pending or processing (GET /v1/stats). */
static int group_drained(void *arg)
{
    struct drained *d = arg;
    json_t *g = stats_of(&S, "groups", "group", d->group);
    int ok = g && jnum(g, "pending") == 0 && jnum(g, "processing") == 0;

    json_decref(g);
    return ok;
}

static void await_drained(const char *group)
{
    struct drained d = {group};

    if (!await(group_drained, &d, DRAIN_MS))
        fail_msg("group %s did not drain within %d ms", group, DRAIN_MS);
}

/* Wait until 'stream' holds 'want' messages; on a timeout, fail showing
 * the sink_status of 'group' (why micd does not relay). */
static void await_stream(const char *stream, const char *group, int64_t want)
{
    int64_t got = natsfx_stream_await(js, stream, want, DRAIN_MS);

    if (got < want) {
        char path[128];
        struct resp r;

        snprintf(path, sizeof path, "/v1/groups/%s", group);
        if (http(&S, "GET", path, NULL, NULL, 0, NULL, &r) == 0)
            print_error("GET %s: %s\n", path, r.body ? r.body : "");
        resp_free(&r);
        fail_msg("stream %s holds %lld of %lld messages after %d ms", stream, (long long)got,
                 (long long)want, DRAIN_MS);
    }
}

/* Read 'stream' back and assert it holds exactly the ids PREFIX-0 ..
 * PREFIX-(n-1), each once.  Returns the messages (the caller's). */
static json_t *read_exactly(const char *stream, const char *subject, const char *prefix, int n)
{
    json_t *msgs = NULL, *seen = json_object(), *m;
    size_t total, distinct, missing, i;

    assert_int_equal(natsfx_stream_read(js, stream, subject, READ_MS, &msgs), 0);
    natsfx_count_ids(msgs, &total, &distinct, &missing);
    assert_int_equal(missing, 0);
    assert_int_equal(distinct, total); /* nothing duplicated */
    assert_int_equal(total, (size_t)n); /* nothing lost, nothing extra */
    json_array_foreach(msgs, i, m) {
        const char *id = natsfx_hdr(m, "Nats-Msg-Id");
        size_t plen = strlen(prefix);

        assert_non_null(id);
        assert_memory_equal(id, prefix, plen);
        assert_int_equal(id[plen], '-');
        json_object_set_new(seen, id, json_true());
    }
    for (int k = 0; k < n; k++) {
        char id[96];

        snprintf(id, sizeof id, "%s-%d", prefix, k);
        if (!json_object_get(seen, id))
            fail_msg("event %s is not in stream %s", id, stream);
    }
    json_decref(seen);
    return msgs;
}

static int sink_connected_is(void *arg)
{
    struct sink_want *w = arg;
    char path[128];
    json_t *r, *st;
    int ok;

    snprintf(path, sizeof path, "/v1/groups/%s", w->group);
    r = call(&S, "GET", path, NULL, 200);
    st = json_object_get(r, "sink_status");
    ok = json_is_boolean(json_object_get(st, "connected")) &&
         json_is_true(json_object_get(st, "connected")) == (w->connected == 1);
    json_decref(r);
    return ok;
}

struct metric_want {
    const char *name, *group;
    double at_least, at_most;
};

static int metric_in(void *arg)
{
    struct metric_want *w = arg;
    double v = metric(w->name, w->group);

    return v >= w->at_least && v <= w->at_most;
}

static void await_metric(const char *name, const char *group, double lo, double hi)
{
    struct metric_want w = {name, group, lo, hi};

    if (!await(metric_in, &w, STATE_MS))
        fail_msg("%s{group=\"%s\"} = %g, not in [%g, %g] within %d ms", name, group,
                 metric(name, group), lo, hi, STATE_MS);
}

/* ---- The fixture ---- */

static void cluster_fixture(void **state)
{
    json_t *msgs, *m;
    size_t total, distinct, missing, i;
    int leader;

    (void)state;
    assert_int_equal(natsfx_stream_add(&C, js, "FX", "fx.>", 3, STREAM_MS), 0);
    leader = natsfx_stream_leader(&C, js, "FX");
    assert_true(leader >= 0 && leader < NATSFX_NODES);

    /* 60 publishes, 50 distinct ids: the duplicate window keeps 50. */
    for (int k = 0; k < 60; k++) {
        natsMsg *msg = NULL;
        jsPubAck *pa = NULL;
        char subj[32], id[32], data[32];

        snprintf(subj, sizeof subj, "fx.s%d", k % 5);
        snprintf(id, sizeof id, "fx-%d", k % 50);
        snprintf(data, sizeof data, "{\"k\":%d}", k % 50);
        assert_int_equal(natsMsg_Create(&msg, subj, NULL, data, (int)strlen(data)), NATS_OK);
        assert_int_equal(natsMsgHeader_Set(msg, "Nats-Msg-Id", id), NATS_OK);
        assert_int_equal(natsMsgHeader_Set(msg, "mic-topic", "fx"), NATS_OK);
        assert_int_equal(js_PublishMsg(&pa, js, msg, NULL, NULL), NATS_OK);
        assert_int_equal(pa->Duplicate, k >= 50);
        jsPubAck_Destroy(pa);
        natsMsg_Destroy(msg);
    }
    assert_int_equal(natsfx_stream_msgs(js, "FX"), 50);

    /* The leader killed: the two others elect one and take publishes. */
    assert_int_equal(natsfx_kill9(&C, leader), 0);
    assert_false(natsfx_alive(&C, leader));
    for (int k = 50; k < 80; k++) {
        natsMsg *msg = NULL;
        jsPubAck *pa = NULL;
        char id[32];
        int64_t end = mono_ms() + STREAM_MS;
        natsStatus s;

        snprintf(id, sizeof id, "fx-%d", k);
        assert_int_equal(natsMsg_Create(&msg, "fx.after", NULL, "{}", 2), NATS_OK);
        assert_int_equal(natsMsgHeader_Set(msg, "Nats-Msg-Id", id), NATS_OK);
        /* Retried with the same id until a PubAck (a new leader may take
         * a moment): the duplicate window makes the retry safe. */
        while ((s = js_PublishMsg(&pa, js, msg, NULL, NULL)) != NATS_OK && mono_ms() < end)
            nanosleep(&(struct timespec){0, 20000000}, NULL); /* a pause between retries */
        assert_int_equal(s, NATS_OK);
        jsPubAck_Destroy(pa);
        natsMsg_Destroy(msg);
    }
    leader = natsfx_stream_leader(&C, js, "FX");
    assert_true(leader >= 0 && natsfx_alive(&C, leader));

    /* Every node back: the stream is whole on 3 current replicas. */
    for (int i2 = 0; i2 < NATSFX_NODES; i2++)
        if (!natsfx_alive(&C, i2))
            assert_int_equal(natsfx_restart(&C, i2, CLUSTER_MS), 0);
    assert_int_equal(natsfx_stream_wait_healthy(js, "FX", 3, STREAM_MS), 0);
    assert_int_equal(natsfx_stream_read(js, "FX", "fx.>", READ_MS, &msgs), 0);
    natsfx_count_ids(msgs, &total, &distinct, &missing);
    assert_int_equal(total, 80);
    assert_int_equal(distinct, 80);
    assert_int_equal(missing, 0);
    json_array_foreach(msgs, i, m) {
        char id[32];

        assert_int_equal(json_integer_value(json_object_get(m, "stream_seq")), (json_int_t)i + 1);
        snprintf(id, sizeof id, "fx-%zu", i);
        assert_string_equal(natsfx_hdr(m, "Nats-Msg-Id"), id);
        if (i < 50)
            assert_string_equal(natsfx_hdr(m, "mic-topic"), "fx");
    }
    json_decref(msgs);
}

/* ---- (a) every event once, with its headers ---- */

static void unordered_once(void **state)
{
    json_t *msgs, *m, *r;
    size_t i;
    const int n = 500;

    (void)state;
    assert_int_equal(natsfx_stream_add(&C, js, "SA", "mic.a.>", 3, STREAM_MS), 0);
    put_sink_group("sa.g", "sa.t", "SA", "mic.a.{topic}.{event_type}", "");
    /* A worker's claim on a sink group is refused. */
    r = call(&S, "POST", "/v1/groups/sa.g/claim", "{\"max\":1}", 409);
    assert_string_equal(jstr(json_object_get(r, "error"), "code"), "group_has_sink");
    json_decref(r);

    publish_plain("sa.t", "sa", 0, n);
    await_stream("SA", "sa.g", n);
    await_drained("sa.g");
    msgs = read_exactly("SA", "mic.a.>", "sa", n);
    json_array_foreach(msgs, i, m) {
        const char *id = natsfx_hdr(m, "Nats-Msg-Id");
        int k = atoi(id + 3);
        char path[128], subj[96];
        json_t *ev, *got, *stored;

        /* The data is the event JSON as a claim returns it. */
        ev = json_loads(json_string_value(json_object_get(m, "data")), 0, NULL);
        assert_non_null(ev);
        assert_string_equal(jstr(ev, "event_id"), id);
        assert_string_equal(jstr(ev, "topic"), "sa.t");
        assert_int_equal(jint(json_object_get(ev, "payload"), "n"), k);
        snprintf(path, sizeof path, "/v1/events/%s", id);
        got = call(&S, "GET", path, NULL, 200);
        stored = json_object_get(got, "event");
        if (json_object_get(ev, "seq"))
            assert_int_equal(jint(ev, "seq"), jint(stored, "seq"));

        /* A placeholder's '.' becomes '_' (it would split the token). */
        snprintf(subj, sizeof subj, "mic.a.sa_t.%s", k % 2 ? "order_placed" : "order_paid");
        assert_string_equal(jstr(m, "subject"), subj);
        assert_string_equal(natsfx_hdr(m, "mic-topic"), "sa.t");
        assert_string_equal(natsfx_hdr(m, "mic-event-type"), k % 2 ? "order.placed" : "order.paid");
        assert_int_equal(strtoll(natsfx_hdr(m, "mic-seq"), NULL, 10), jint(stored, "seq"));
        assert_non_null(natsfx_hdr(m, "mic-created-at"));
        assert_true(natsfx_hdr(m, "mic-created-at")[0] != 0);
        if (k % 3 == 0) {
            char agg[16];

            snprintf(agg, sizeof agg, "a%d", k % 7);
            assert_string_equal(natsfx_hdr(m, "mic-aggregate-type"), "acct");
            assert_string_equal(natsfx_hdr(m, "mic-aggregate-id"), agg);
        } else {
            assert_null(natsfx_hdr(m, "mic-aggregate-type"));
            assert_null(natsfx_hdr(m, "mic-aggregate-id"));
        }
        assert_null(natsfx_hdr(m, "mic-aggregate-version"));
        json_decref(ev);
        json_decref(got);
    }
    json_decref(msgs);

    /* The figures: all published, none in flight, connected. */
    await_metric("mic_sink_published_total", "sa.g", n, 1e18);
    await_metric("mic_sink_in_flight", "sa.g", 0, 0);
    await_metric("mic_sink_connected", "sa.g", 1, 1);
    assert_true(metric("mic_sink_failures_total", "sa.g") >= 0);
    r = call(&S, "GET", "/v1/groups/sa.g", NULL, 200);
    assert_true(json_is_true(json_object_get(json_object_get(r, "sink_status"), "connected")));
    assert_int_equal(jint(json_object_get(r, "sink_status"), "in_flight"), 0);
    assert_true(json_is_null(json_object_get(json_object_get(r, "sink_status"), "last_error")));
    json_decref(r);
}

/* ---- (b) aggregate order ---- */

static void ordered_order(void **state)
{
    const int naggs = 5, nver = 40;
    int next[5] = {1, 1, 1, 1, 1};
    json_t *msgs, *m;
    size_t i;

    (void)state;
    assert_int_equal(natsfx_stream_add(&C, js, "SB", "mic.b.>", 3, STREAM_MS), 0);
    put_sink_group("sb.g", "sb.t", "SB", "mic.b.{aggregate_type}.{aggregate_id}",
                   ",\"ordered\":true");
    /* Versions interleaved across aggregates, 20 events a request. */
    for (int v = 1; v <= nver; v += 4) {
        json_t *evs = json_array(), *body;
        char *txt;

        for (int a = 0; a < naggs; a++)
            for (int d = 0; d < 4; d++) {
                char id[64], agg[16];

                snprintf(id, sizeof id, "sb-%d", a * nver + v + d - 1);
                snprintf(agg, sizeof agg, "o%d", a);
                json_array_append_new(evs, json_pack("{s:s, s:s, s:s, s:s, s:s, s:i, s:{s:i}}",
                                                     "event_id", id, "topic", "sb.t", "event_type",
                                                     "step", "aggregate_type", "ord",
                                                     "aggregate_id", agg, "aggregate_version",
                                                     v + d, "payload", "v", v + d));
            }
        body = json_pack("{s:o}", "events", evs);
        txt = json_dumps(body, JSON_COMPACT);
        json_decref(call(&S, "POST", "/v1/events", txt, 201));
        free(txt);
        json_decref(body);
    }
    await_stream("SB", "sb.g", naggs * nver);
    await_drained("sb.g");
    msgs = read_exactly("SB", "mic.b.>", "sb", naggs * nver);
    /* In stream order, each aggregate's versions come 1, 2, ..., 40. */
    json_array_foreach(msgs, i, m) {
        const char *aid = natsfx_hdr(m, "mic-aggregate-id");
        int a, v;
        char subj[64];

        assert_non_null(aid);
        a = atoi(aid + 1);
        assert_true(a >= 0 && a < naggs);
        v = atoi(natsfx_hdr(m, "mic-aggregate-version"));
        if (v != next[a])
            fail_msg("aggregate o%d: version %d at stream seq %lld, expected %d", a, v,
                     (long long)json_integer_value(json_object_get(m, "stream_seq")), next[a]);
        next[a]++;
        assert_string_equal(natsfx_hdr(m, "mic-aggregate-type"), "ord");
        snprintf(subj, sizeof subj, "mic.b.ord.o%d", a);
        assert_string_equal(jstr(m, "subject"), subj);
    }
    for (int a = 0; a < naggs; a++)
        assert_int_equal(next[a], nver + 1);
    json_decref(msgs);
}

/* ---- (c) a NATS node killed mid-relay ---- */

static void nats_node_kill(void **state)
{
    int victim;
    json_t *msgs;
    int64_t at_kill;

    (void)state;
    assert_int_equal(natsfx_stream_add(&C, js, "SC", "mic.c.>", 3, STREAM_MS), 0);
    put_sink_group("sc.g", "sc.t", "SC", "mic.c.{topic}",
                   ",\"backoff\":{\"initial_ms\":50,\"max_ms\":500,\"multiplier\":2},"
                   "\"max_attempts\":1000");
    publish_plain("sc.t", "sc", 0, 300);
    /* The relay has begun: kill the stream's leader (any node if none is
     * known at this instant). */
    await_stream("SC", "sc.g", 1);
    victim = natsfx_stream_leader(&C, js, "SC");
    if (victim < 0)
        victim = 0;
    at_kill = natsfx_stream_msgs(js, "SC");
    assert_int_equal(natsfx_kill9(&C, victim), 0);
    /* Publishing goes on while it is down. */
    publish_plain("sc.t", "sc", 300, 300);
    await_stream("SC", "sc.g", 600);
    await_drained("sc.g");
    assert_int_equal(natsfx_restart(&C, victim, CLUSTER_MS), 0);
    assert_int_equal(natsfx_stream_wait_healthy(js, "SC", 3, STREAM_MS), 0);
    msgs = read_exactly("SC", "mic.c.>", "sc", 600);
    json_decref(msgs);
    await_metric("mic_sink_connected", "sc.g", 1, 1);
    print_message("stream leader n%d killed with %lld of 600 events in the stream\n", victim + 1,
                  (long long)at_kill);
}

/* ---- (d) micd killed mid-relay ---- */

static void micd_kill(void **state)
{
    json_t *msgs;
    int64_t at_kill;

    (void)state;
    assert_int_equal(natsfx_stream_add(&C, js, "SD", "mic.d.>", 3, STREAM_MS), 0);
    put_sink_group("sd.g", "sd.t", "SD", "mic.d.{topic}",
                   ",\"lease_ttl_s\":2,\"backoff\":{\"initial_ms\":50,\"max_ms\":500,\"multiplier\":2},"
                   "\"max_attempts\":1000");
    publish_plain("sd.t", "sd", 0, 400);
    await_stream("SD", "sd.g", 1);
    srv_kill9(&S);
    at_kill = natsfx_stream_msgs(js, "SD");
    assert_int_equal(srv_start(&S, NULL), 0);
    publish_plain("sd.t", "sd", 400, 100);
    await_stream("SD", "sd.g", 500);
    await_drained("sd.g");
    msgs = read_exactly("SD", "mic.d.>", "sd", 500);
    json_decref(msgs);
    print_message("micd killed with %lld of 500 events in the stream\n", (long long)at_kill);
}

/* ---- (e) every NATS node down, then back ---- */

/* The group's alert figures as scraped during (e), at most one sample
 * every 250 ms: they show the shape deploy/prometheus/alerts_sink_test.yml
 * gives its series (the flag raised once the age reaches the threshold,
 * cleared with the age back to 0 or absent once drained), and are printed
 * so that the rule test's series can be compared with real ones. */
#define REC_MAX 2000
static struct {
    int n;
    int64_t t0, last;
    double t[REC_MAX], age[REC_MAX], alert[REC_MAX];
} rec;

static void rec_sample(const char *group)
{
    int64_t now = mono_ms();
    struct resp r;

    if (rec.n == REC_MAX || (rec.n && now - rec.last < 250))
        return;
    rec.last = now;
    /* Both from one scrape, so that they describe one instant. */
    assert_int_equal(http(&S, "GET", "/metrics", NULL, NULL, 0, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    rec.t[rec.n] = (double)(now - rec.t0) / 1000.0;
    rec.age[rec.n] = metric_of(r.body, "mic_group_oldest_unhandled_age_seconds", group);
    rec.alert[rec.n] = metric_of(r.body, "mic_group_alert", group);
    resp_free(&r);
    rec.n++;
}

struct rec_wait {
    const char *group;
    double alert;  /* wait until mic_group_alert is this */
};

static int rec_alert_is(void *arg)
{
    struct rec_wait *w = arg;

    rec_sample(w->group);
    return metric("mic_group_alert", w->group) == w->alert;
}

static void rec_await_alert(const char *group, double alert)
{
    struct rec_wait w = {group, alert};

    if (!await(rec_alert_is, &w, STATE_MS))
        fail_msg("mic_group_alert{group=\"%s\"} did not become %g within %d ms", group, alert,
                 STATE_MS);
    rec.last = 0;
    rec_sample(group); /* the sample that met the condition */
}

/* Print the recorded series and check their shape: 0, then 1 with the age
 * at least 'threshold', then 0 with the age under it (or absent). */
static void rec_check(double threshold)
{
    int phase = 0;

    print_message("scraped during (e): t_s age_s alert\n");
    for (int i = 0; i < rec.n; i++) {
        print_message("  %.2f %g %g\n", rec.t[i], rec.age[i], rec.alert[i]);
        if (phase == 0 && rec.alert[i] == 1)
            phase = 1;
        else if (phase == 1 && rec.alert[i] == 0)
            phase = 2;
        if (rec.alert[i] == 1) /* (0.1 s: the two may be read a moment apart) */
            assert_true(rec.age[i] >= threshold - 0.1);
        else if (phase == 2)
            assert_true(rec.age[i] < threshold);
        assert_true(rec.alert[i] == 0 || rec.alert[i] == 1);
    }
    assert_int_equal(phase, 2);
}

static void nats_all_down(void **state)
{
    struct sink_want down = {"se.g", 0}, up = {"se.g", 1};
    json_t *msgs, *g;
    double age_lo;

    (void)state;
    assert_int_equal(natsfx_stream_add(&C, js, "SE", "mic.e.>", 3, STREAM_MS), 0);
    put_sink_group("se.g", "se.t", "SE", "mic.e.{topic}",
                   ",\"alert_oldest_unhandled_s\":2,\"max_attempts\":1000,"
                   "\"backoff\":{\"initial_ms\":50,\"max_ms\":500,\"multiplier\":2}");
    publish_plain("se.t", "se", 0, 100);
    await_stream("SE", "se.g", 100);
    await_drained("se.g");
    await_metric("mic_group_alert", "se.g", 0, 0);

    memset(&rec, 0, sizeof rec);
    rec.t0 = mono_ms();
    rec_sample("se.g");
    for (int i = 0; i < NATSFX_NODES; i++)
        assert_int_equal(natsfx_term(&C, i), 0);
    if (!await(sink_connected_is, &down, STATE_MS))
        fail_msg("sink_status.connected did not turn false with every NATS node down");
    await_metric("mic_sink_connected", "se.g", 0, 0);
    /* Publishing still works; the group's backlog and age grow. */
    publish_plain("se.t", "se", 100, 150);
    g = stats_of(&S, "groups", "group", "se.g");
    assert_non_null(g);
    assert_true(jnum(g, "pending") + jnum(g, "processing") >= 150);
    age_lo = jnum(g, "oldest_unhandled_age_s");
    assert_true(age_lo >= 0);
    json_decref(g);
    /* Past the group's threshold (2 s): the alert flag is raised. */
    rec_await_alert("se.g", 1);
    assert_true(metric("mic_group_oldest_unhandled_age_seconds", "se.g") >= 2);
    publish_plain("se.t", "se", 250, 50);
    g = stats_of(&S, "groups", "group", "se.g");
    assert_true(jnum(g, "pending") + jnum(g, "processing") >= 200);
    assert_true(jnum(g, "oldest_unhandled_age_s") >= 2);
    assert_true(jnum(g, "oldest_unhandled_age_s") > age_lo); /* it grew */
    json_decref(g);

    /* Back: the backlog drains and the flag clears. */
    for (int i = 0; i < NATSFX_NODES; i++)
        assert_int_equal(natsfx_spawn(&C, i), 0);
    assert_int_equal(natsfx_await_ready(&C, CLUSTER_MS), 0);
    assert_int_equal(natsfx_stream_wait_healthy(js, "SE", 3, STREAM_MS), 0);
    if (!await(sink_connected_is, &up, STATE_MS))
        fail_msg("sink_status.connected did not turn true with the NATS nodes back");
    await_stream("SE", "se.g", 300);
    await_drained("se.g");
    rec_await_alert("se.g", 0);
    rec_check(2);
    msgs = read_exactly("SE", "mic.e.>", "se", 300);
    json_decref(msgs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cluster_fixture),
        cmocka_unit_test(unordered_once),
        cmocka_unit_test(ordered_order),
        cmocka_unit_test(nats_node_kill),
        cmocka_unit_test(micd_kill),
        cmocka_unit_test(nats_all_down),
    };

    if (getenv("TEST_FILTER")) /* e.g. TEST_FILTER=cluster_fixture */
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
