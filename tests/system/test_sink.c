/* test_sink.c - sink groups and micd's built-in relay to NATS JetStream
 * (DESIGN sections 10 and 13, issue 17 points 1 and 2) against a real micd
 * (the harness) and ONE real nats-server with JetStream, started and
 * stopped by PID here: the sink's validation at PUT (one 422 per field),
 * its immutability (409), 409 group_has_sink for workers, 200 events of an
 * unordered group arriving once each with every header, an ordered group's
 * aggregates arriving in version order, nats-server down (status, backlog,
 * publishing still works) then back on the same store (everything arrives
 * once: distinct Nats-Msg-Id = messages), a stream that does not exist
 * (nacked, last_error names it), a group deleted at runtime, a lease
 * extended while its PubAck is late (nats-server frozen), /metrics
 * (promtool clean), and micd stopped with SIGTERM mid-relay and restarted
 * on its store (everything arrives, once).
 *
 * Streams are created with libnats (js_AddStream) and read back with
 * js_PullSubscribe + natsSubscription_Fetch.  Every wait is a bounded poll
 * of a condition. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "harness.h"
#include "natsfx.h"
#include "claimkit.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ftw.h>
#include <nats/nats.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define READY_MS 20000
#define ARRIVE_MS 60000  /* bound on a relay's delivery of a test's events */

static struct srv S;          /* micd */
static pid_t nats_pid;
static int nats_port;
static char nats_dir[256], nats_log[300], nats_url[64], tmpdir[64];
static natsConnection *nc;    /* the test's own connection (reconnects) */
static jsCtx *js;

/* ---- nats-server ---- */

static int nats_alive(void)
{
    int status;

    return nats_pid > 0 && waitpid(nats_pid, &status, WNOHANG) == 0;
}

/* Start nats-server -js on nats_port (chosen at the first start, kept
 * after) storing in nats_dir, and wait until JetStream answers. */
static int nats_start(void)
{
    char port[16];
    static char exe[512];
    int64_t end;
    pid_t pid;

    if (!exe[0] && natsfx_find_exe("nats-server", "NATS_SERVER", exe, sizeof exe)) {
        fprintf(stderr, "FAIL: nats-server not found (apt-get install nats-server, or set "
                "NATS_SERVER)\n");
        return -1;
    }
    if (!nats_port) {
        nats_port = free_port();
        snprintf(nats_url, sizeof nats_url, "nats://127.0.0.1:%d", nats_port);
    }
    snprintf(port, sizeof port, "%d", nats_port);
    if ((pid = fork()) == 0) {
        int in = open("/dev/null", O_RDONLY);
        int fo = open(nats_log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (in < 0 || fo < 0)
            _exit(126);
        dup2(in, 0);
        dup2(fo, 1);
        dup2(fo, 2);
        setpgid(0, 0);
        execl(exe, exe, "-a", "127.0.0.1", "-p", port, "-js", "-sd", nats_dir, (char *)NULL);
        _exit(127);
    }
    if (pid < 0)
        return -1;
    nats_pid = pid;
    for (end = mono_ms() + READY_MS; mono_ms() < end && nats_alive(); nap_ms(20))
        if (natsfx_js_ready(nats_url))
            return 0;
    fprintf(stderr, "FAIL: nats-server did not become ready (log %s)\n", nats_log);
    return -1;
}

/* SIGTERM our nats-server (by PID) and reap it; SIGKILL after 15 s. */
static void nats_stop(void)
{
    int64_t end = mono_ms() + 15000;
    int status;

    if (nats_pid <= 0)
        return;
    kill(nats_pid, SIGTERM);
    while (waitpid(nats_pid, &status, WNOHANG) == 0) {
        if (mono_ms() > end) {
            kill(nats_pid, SIGKILL);
            waitpid(nats_pid, &status, 0);
            break;
        }
        nap_ms(10);
    }
    nats_pid = 0;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    remove(path);
    return 0;
}

static int setup(void **state)
{
    natsOptions *o = NULL;

    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mic-sink-XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    snprintf(nats_dir, sizeof nats_dir, "%s/nats", tmpdir);
    snprintf(nats_log, sizeof nats_log, "%s/nats.log", tmpdir);
    if (mkdir(nats_dir, 0700) || nats_start())
        return -1;
    if (natsOptions_Create(&o) != NATS_OK || natsOptions_SetURL(o, nats_url) != NATS_OK ||
        natsOptions_SetMaxReconnect(o, -1) != NATS_OK ||
        natsOptions_SetReconnectWait(o, 100) != NATS_OK ||
        natsConnection_Connect(&nc, o) != NATS_OK ||
        natsConnection_JetStream(&js, nc, NULL) != NATS_OK) {
        natsOptions_Destroy(o);
        return -1;
    }
    natsOptions_Destroy(o);
    return srv_start_shared(&S, NULL);
}

static int teardown(void **state)
{
    int rc;

    (void)state;
    rc = srv_stop_shared(&S);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    nats_stop();
    nats_CloseAndWait(2000);
    nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}

/* ---- Helpers ---- */

static void make_stream(const char *name, const char *subject)
{
    const char *subjects[1] = {subject};
    jsStreamInfo *si = NULL;
    jsStreamConfig cfg;
    jsErrCode jerr = 0;

    jsStreamConfig_Init(&cfg);
    cfg.Name = name;
    cfg.Subjects = subjects;
    cfg.SubjectsLen = 1;
    cfg.Storage = js_FileStorage;
    cfg.Duplicates = 10LL * 60 * 1000000000; /* ns: 10 minutes */
    assert_int_equal(js_AddStream(&si, js, &cfg, NULL, &jerr), NATS_OK);
    jsStreamInfo_Destroy(si);
}

struct want_msgs {
    const char *stream;
    int64_t n;
};

static int has_msgs(void *arg)
{
    struct want_msgs *w = arg;

    return natsfx_stream_msgs(js, w->stream) >= w->n;
}

static void put_str(json_t *o, const char *k, const char *v)
{
    if (v)
        json_object_set_new(o, k, json_string(v));
}

/* The first 'want' messages of stream 'name' in stream order (it must hold
 * that many within 30 s), read with the cluster fixture's reader:
 * {"subject","data" (parsed), headers by name}. */
static json_t *read_stream(const char *name, const char *subject, int want)
{
    static const char *const hs[] = {"Nats-Msg-Id", "mic-topic", "mic-seq", "mic-event-type",
                                     "mic-created-at", "mic-aggregate-type", "mic-aggregate-id",
                                     "mic-aggregate-version", NULL};
    json_t *raw = NULL, *out = json_array();

    assert_true(natsfx_stream_await(js, name, want, 30000) >= want);
    assert_int_equal(natsfx_stream_read(js, name, subject, 30000, &raw), 0);
    assert_true((int)json_array_size(raw) >= want);
    for (int i = 0; i < want; i++) {
        json_t *m = json_array_get(raw, (size_t)i), *o = json_object();
        json_t *data = json_loads(json_string_value(json_object_get(m, "data")), 0, NULL);

        assert_non_null(data);
        json_object_set(o, "subject", json_object_get(m, "subject"));
        json_object_set_new(o, "data", data);
        for (int h = 0; hs[h]; h++)
            put_str(o, hs[h], natsfx_hdr(m, hs[h]));
        json_array_append_new(out, o);
    }
    json_decref(raw);
    return out;
}

/* The group's resource's sink_status. */
static json_t *sink_status(const char *group)
{
    char path[300];
    json_t *g, *st;

    snprintf(path, sizeof path, "/v1/groups/%s", group);
    g = call(&S, "GET", path, NULL, 200);
    st = json_incref(json_object_get(g, "sink_status"));
    json_decref(g);
    assert_non_null(st);
    return st;
}

static int status_is(const char *group, int connected, const char *err_part)
{
    json_t *st = sink_status(group);
    json_t *le = json_object_get(st, "last_error");
    int ok = json_is_true(json_object_get(st, "connected")) == connected &&
             (!err_part || (json_is_string(le) && strstr(json_string_value(le), err_part)));

    json_decref(st);
    return ok;
}

static const char *cond_group, *cond_err;
static int cond_connected;

static int status_cond(void *arg)
{
    (void)arg;
    return status_is(cond_group, cond_connected, cond_err);
}

static void await_status(const char *group, int connected, const char *err_part)
{
    cond_group = group;
    cond_connected = connected;
    cond_err = err_part;
    if (!await(status_cond, NULL, ARRIVE_MS)) {
        json_t *st = sink_status(group);
        char *t = json_dumps(st, 0);
        fail_msg("group %s: sink_status %s, want connected %d, last_error ~ %s", group, t,
                 connected, err_part ? err_part : "(any)");
        free(t);
    }
}

static void put_sink_group(const char *group, const char *topic, int ordered,
                           const char *stream, const char *subject, const char *extra)
{
    char path[300], body[1024];

    snprintf(path, sizeof path, "/v1/groups/%s", group);
    snprintf(body, sizeof body,
             "{\"topics\":[\"%s\"],\"ordered\":%s,\"sink\":{\"type\":\"nats\",\"url\":\"%s\","
             "\"stream\":\"%s\",\"subject\":\"%s\"}%s}",
             topic, ordered ? "true" : "false", nats_url, stream, subject, extra ? extra : "");
    json_decref(call(&S, "PUT", path, body, 201));
}

/* Publish 'n' events of 'topic' with ids PREFIX-FROM.. (no aggregate), in
 * batches of 50. */
static void publish_plain(const char *topic, const char *prefix, int from, int n)
{
    for (int i = 0; i < n;) {
        json_t *evs = json_array(), *body = json_object();
        char *txt;

        for (int k = 0; k < 50 && i < n; k++, i++) {
            char id[96];
            snprintf(id, sizeof id, "%s-%d", prefix, from + i);
            json_array_append_new(evs, json_pack("{s:s, s:s, s:s, s:{s:i}}", "event_id", id,
                                                 "topic", topic, "event_type", "thing.made",
                                                 "payload", "n", from + i));
        }
        json_object_set_new(body, "events", evs);
        txt = json_dumps(body, JSON_COMPACT);
        json_decref(call(&S, "POST", "/v1/events", txt, 201));
        free(txt);
        json_decref(body);
    }
}

static int64_t stats_num(const char *group, const char *k)
{
    json_t *g = stats_of(&S, "groups", "group", group);
    int64_t v;

    assert_non_null(g);
    v = json_integer_value(json_object_get(g, k));
    json_decref(g);
    return v;
}

/* ---- PUT: validation and immutability ---- */

static void expect_422(const char *body, const char *field)
{
    struct resp r;
    json_t *f;

    assert_int_equal(http_json(&S, "PUT", "/v1/groups/sv-bad", body, &r), 0);
    if (r.status != 422)
        fprintf(stderr, "%s: %ld %s\n", body, r.status, r.body ? r.body : "");
    assert_int_equal(r.status, 422);
    f = json_object_get(json_object_get(r.json, "error"), "field");
    assert_true(json_is_string(f));
    assert_string_equal(json_string_value(f), field);
    resp_free(&r);
}

static void test_put_validation(void **state)
{
    char body[600];
    static const struct { const char *sink, *field; } bad[] = {
        {"{\"type\":\"kafka\",\"url\":\"nats://127.0.0.1:4222\",\"stream\":\"S\",\"subject\":\"a\"}", "sink.type"},
        {"{\"url\":\"nats://127.0.0.1:4222\",\"stream\":\"S\",\"subject\":\"a\"}", "sink.type"},
        {"{\"type\":\"nats\",\"url\":\"http://127.0.0.1:4222\",\"stream\":\"S\",\"subject\":\"a\"}", "sink.url"},
        {"{\"type\":\"nats\",\"url\":\"nats://127.0.0.1\",\"stream\":\"S\",\"subject\":\"a\"}", "sink.url"},
        {"{\"type\":\"nats\",\"url\":\"nats://127.0.0.1:99999\",\"stream\":\"S\",\"subject\":\"a\"}", "sink.url"},
        {"{\"type\":\"nats\",\"url\":\"nats://a:1,\",\"stream\":\"S\",\"subject\":\"a\"}", "sink.url"},
        /* 17 servers: the relay takes at most 16 */
        {"{\"type\":\"nats\",\"url\":\"nats://h0:4222,nats://h1:4222,nats://h2:4222,nats://h3:4222,nats://h4:4222,nats://h5:4222,nats://h6:4222,nats://h7:4222,nats://h8:4222,nats://h9:4222,nats://h10:4222,nats://h11:4222,nats://h12:4222,nats://h13:4222,nats://h14:4222,nats://h15:4222,nats://h16:4222\",\"stream\":\"S\",\"subject\":\"a\"}", "sink.url"},
        {"{\"type\":\"nats\",\"url\":\"nats://a:1\",\"stream\":\"S.x\",\"subject\":\"a\"}", "sink.stream"},
        {"{\"type\":\"nats\",\"url\":\"nats://a:1\",\"stream\":\"\",\"subject\":\"a\"}", "sink.stream"},
        {"{\"type\":\"nats\",\"url\":\"nats://a:1\",\"stream\":\"S\",\"subject\":\"a.*\"}", "sink.subject"},
        {"{\"type\":\"nats\",\"url\":\"nats://a:1\",\"stream\":\"S\",\"subject\":\"a.>\"}", "sink.subject"},
        {"{\"type\":\"nats\",\"url\":\"nats://a:1\",\"stream\":\"S\",\"subject\":\"a..b\"}", "sink.subject"},
        {"{\"type\":\"nats\",\"url\":\"nats://a:1\",\"stream\":\"S\",\"subject\":\"a.{nope}\"}", "sink.subject"},
        {"{\"type\":\"nats\",\"url\":\"nats://a:1\",\"stream\":\"S\",\"subject\":\"\"}", "sink.subject"},
    };
    json_t *g;

    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(body, sizeof body, "{\"topics\":[\"sv.t\"],\"sink\":%s}", bad[i].sink);
        expect_422(body, bad[i].field);
    }
    /* nothing was made */
    json_decref(call(&S, "GET", "/v1/groups/sv-bad", NULL, 404));

    /* a good one (a cluster's url list), shown back with sink_status */
    json_decref(call(&S, "PUT", "/v1/groups/sv-ok",
                     "{\"topics\":[\"sv.t\"],\"sink\":{\"type\":\"nats\",\"url\":"
                     "\"nats://127.0.0.1:1,nats://localhost:2\",\"stream\":\"SV_1-x\","
                     "\"subject\":\"mic.{topic}.{event_type}.{aggregate_type}.{aggregate_id}.x\"}}",
                     201));
    g = call(&S, "GET", "/v1/groups/sv-ok", NULL, 200);
    assert_string_equal(jstr(json_object_get(g, "sink"), "type"), "nats");
    assert_string_equal(jstr(json_object_get(g, "sink"), "stream"), "SV_1-x");
    assert_true(json_is_object(json_object_get(g, "sink_status")));
    assert_true(json_is_boolean(json_object_get(json_object_get(g, "sink_status"), "connected")));
    assert_true(json_is_integer(json_object_get(json_object_get(g, "sink_status"), "in_flight")));
    json_decref(g);

    /* fixed at creation: changed or removed is 409 immutable_field "sink" */
    {
        struct resp r;
        static const char *const changes[] = {
            "{\"topics\":[\"sv.t\"],\"sink\":{\"type\":\"nats\",\"url\":"
            "\"nats://127.0.0.1:1,nats://localhost:2\",\"stream\":\"OTHER\","
            "\"subject\":\"mic.{topic}.{event_type}.{aggregate_type}.{aggregate_id}.x\"}}",
            "{\"topics\":[\"sv.t\"]}",
        };
        for (int i = 0; i < 2; i++) {
            assert_int_equal(http_json(&S, "PUT", "/v1/groups/sv-ok", changes[i], &r), 0);
            assert_int_equal(r.status, 409);
            assert_string_equal(resp_error_code(&r), "immutable_field");
            assert_string_equal(json_string_value(json_object_get(
                                    json_object_get(r.json, "error"), "field")), "sink");
            resp_free(&r);
        }
        /* and a group without a sink cannot gain one */
        json_decref(call(&S, "PUT", "/v1/groups/sv-plain", "{\"topics\":[\"sv.t\"]}", 201));
        assert_int_equal(http_json(&S, "PUT", "/v1/groups/sv-plain",
                                   "{\"topics\":[\"sv.t\"],\"sink\":{\"type\":\"nats\",\"url\":"
                                   "\"nats://a:1\",\"stream\":\"S\",\"subject\":\"a\"}}", &r), 0);
        assert_int_equal(r.status, 409);
        assert_string_equal(resp_error_code(&r), "immutable_field");
        resp_free(&r);
    }
    /* the same sink again is fine (other settings may change) */
    json_decref(call(&S, "PUT", "/v1/groups/sv-ok",
                     "{\"topics\":[\"sv.t\"],\"max_attempts\":3,\"sink\":{\"type\":\"nats\",\"url\":"
                     "\"nats://127.0.0.1:1,nats://localhost:2\",\"stream\":\"SV_1-x\","
                     "\"subject\":\"mic.{topic}.{event_type}.{aggregate_type}.{aggregate_id}.x\"}}",
                     200));
    json_decref(call(&S, "DELETE", "/v1/groups/sv-ok", NULL, 204));
    json_decref(call(&S, "DELETE", "/v1/groups/sv-plain", NULL, 204));
}

/* ---- Workers may not move a sink group's deliveries ---- */

static void test_group_has_sink(void **state)
{
    static const char *const verbs[] = {"claim", "ack", "nack", "extend"};
    const char *item = "{\"deliveries\":[{\"seq\":1,\"lease_token\":"
                       "\"00000000000000000000000000000000\"}]}";

    (void)state;
    /* a sink whose stream does not exist: nothing reaches JetStream */
    put_sink_group("hs", "hs.t", 0, "HS_NONE", "hs.{topic}", NULL);
    publish_plain("hs.t", "hs", 0, 2);
    for (int i = 0; i < 4; i++) {
        char path[64];
        struct resp r;

        snprintf(path, sizeof path, "/v1/groups/hs/%s", verbs[i]);
        assert_int_equal(http_json(&S, "POST", path, i ? item : "{\"max\":5}", &r), 0);
        assert_int_equal(r.status, 409);
        assert_string_equal(resp_error_code(&r), "group_has_sink");
        resp_free(&r);
    }
    json_decref(call(&S, "DELETE", "/v1/groups/hs", NULL, 204));
}

/* ---- 200 events of an unordered group ---- */

static void test_unordered(void **state)
{
    struct want_msgs w = {"UN", 200};
    json_t *msgs, *m, *ids = json_object();
    size_t i;

    (void)state;
    make_stream("UN", "un.>");
    put_sink_group("un", "un.t", 0, "UN", "un.{topic}.{event_type}.{aggregate_id}", NULL);
    publish_plain("un.t", "un", 0, 150);
    /* 50 with an aggregate: the aggregate headers */
    for (int k = 0; k < 50; k++) {
        char body[400];
        snprintf(body, sizeof body,
                 "{\"event_id\":\"un-agg-%d\",\"topic\":\"un.t\",\"event_type\":\"acct.opened\","
                 "\"aggregate_type\":\"acct\",\"aggregate_id\":\"a%d.x\",\"aggregate_version\":1,"
                 "\"payload\":{\"k\":%d}}", k, k, k);
        json_decref(call(&S, "POST", "/v1/events", body, 201));
    }
    assert_true(await(has_msgs, &w, ARRIVE_MS));
    msgs = read_stream("UN", "un.>", 200);
    json_array_foreach(msgs, i, m) {
        json_t *data = json_object_get(m, "data");
        const char *id = jstr(data, "event_id"), *agg = json_string_value(
                             json_object_get(data, "aggregate_id"));
        char subj[300], path[300];
        json_t *ev;

        assert_string_equal(jstr(m, "Nats-Msg-Id"), id);
        assert_null(json_object_get(ids, id)); /* once */
        json_object_set_new(ids, id, json_true());
        assert_string_equal(jstr(m, "mic-topic"), "un.t");
        assert_string_equal(jstr(m, "mic-event-type"), jstr(data, "event_type"));
        assert_string_equal(jstr(m, "mic-created-at"), jstr(data, "created_at"));
        assert_true(atoll(jstr(m, "mic-seq")) >= 1);
        /* the data is the event as micd returns it */
        snprintf(path, sizeof path, "/v1/events/%s", id);
        ev = call(&S, "GET", path, NULL, 200);
        assert_true(json_equal(json_object_get(ev, "event") ? json_object_get(ev, "event") : ev,
                               data));
        json_decref(ev);
        if (agg) {
            assert_string_equal(jstr(m, "mic-aggregate-type"), "acct");
            assert_string_equal(jstr(m, "mic-aggregate-id"), agg);
            assert_string_equal(jstr(m, "mic-aggregate-version"), "1");
        } else {
            assert_null(json_object_get(m, "mic-aggregate-type"));
            assert_null(json_object_get(m, "mic-aggregate-id"));
            assert_null(json_object_get(m, "mic-aggregate-version"));
        }
        /* each field's '.' becomes '_' in the subject; no aggregate: "_" */
        snprintf(subj, sizeof subj, "un.un_t.%s.%s",
                 agg ? "acct_opened" : "thing_made", agg ? agg : "_");
        for (char *p = subj + strlen("un.un_t.acct_opened."); agg && *p; p++)
            if (*p == '.')
                *p = '_';
        assert_string_equal(jstr(m, "subject"), subj);
    }
    assert_int_equal(json_object_size(ids), 200);
    assert_int_equal(natsfx_stream_msgs(js, "UN"), 200);
    /* all acked: nothing pending or processing */
    {
        int64_t end = mono_ms() + ARRIVE_MS;
        while ((stats_num("un", "pending") || stats_num("un", "processing")) && mono_ms() < end)
            nap_ms(20);
        assert_int_equal(stats_num("un", "pending"), 0);
        assert_int_equal(stats_num("un", "processing"), 0);
    }
    json_decref(ids);
    json_decref(msgs);
}

/* ---- An ordered group: 3 aggregates x 50 versions ---- */

static void test_ordered(void **state)
{
    struct want_msgs w = {"ORD", 150};
    json_t *msgs, *m;
    long last[3] = {0, 0, 0};
    size_t i;

    (void)state;
    make_stream("ORD", "ord.>");
    put_sink_group("ord", "ord.t", 1, "ORD", "ord.{aggregate_type}.{aggregate_id}", NULL);
    for (int v = 1; v <= 50; v++) {
        json_t *evs = json_array(), *body = json_object();
        char *txt;
        for (int a = 0; a < 3; a++) {
            char id[64], agg[16];
            snprintf(id, sizeof id, "ord-%d-%d", a, v);
            snprintf(agg, sizeof agg, "o%d", a);
            json_array_append_new(evs, json_pack("{s:s, s:s, s:s, s:s, s:s, s:i}", "event_id", id,
                                                 "topic", "ord.t", "event_type", "o.step",
                                                 "aggregate_type", "ordr", "aggregate_id", agg,
                                                 "aggregate_version", v));
        }
        json_object_set_new(body, "events", evs);
        txt = json_dumps(body, JSON_COMPACT);
        json_decref(call(&S, "POST", "/v1/events", txt, 201));
        free(txt);
        json_decref(body);
    }
    assert_true(await(has_msgs, &w, ARRIVE_MS));
    msgs = read_stream("ORD", "ord.>", 150);
    json_array_foreach(msgs, i, m) {
        const char *agg = jstr(m, "mic-aggregate-id");
        int a = agg[1] - '0';
        long v = atol(jstr(m, "mic-aggregate-version"));

        assert_true(a >= 0 && a < 3);
        assert_int_equal(v, last[a] + 1); /* in order, none twice, none missing */
        last[a] = v;
    }
    for (int a = 0; a < 3; a++)
        assert_int_equal(last[a], 50);
    assert_int_equal(natsfx_stream_msgs(js, "ORD"), 150);
    json_decref(msgs);
}

/* ---- nats-server down, then back ---- */

static int backlog_at_least_40(void *arg)
{
    (void)arg;
    return stats_num("dn", "pending") + stats_num("dn", "processing") >= 40;
}

static void test_nats_down(void **state)
{
    struct want_msgs w = {"DN", 20};
    json_t *msgs, *m, *ids = json_object();
    size_t i;

    (void)state;
    make_stream("DN", "dn.>");
    put_sink_group("dn", "dn.t", 0, "DN", "dn.{topic}", NULL);
    publish_plain("dn.t", "dn", 0, 20);
    assert_true(await(has_msgs, &w, ARRIVE_MS));
    await_status("dn", 1, NULL);

    nats_stop();
    await_status("dn", 0, ""); /* any last_error */
    /* publishing to micd still works, and the backlog grows */
    publish_plain("dn.t", "dn", 20, 40);
    assert_true(await(backlog_at_least_40, NULL, ARRIVE_MS));
    {
        json_t *g = stats_of(&S, "groups", "group", "dn");
        assert_true(json_is_number(json_object_get(g, "oldest_unhandled_age_s")));
        json_decref(g);
    }
    /* the other groups are not held up: publishing answers quickly above */

    /* back on the same port and store: everything arrives, once */
    assert_int_equal(nats_start(), 0);
    w.n = 60;
    assert_true(await(has_msgs, &w, ARRIVE_MS));
    await_status("dn", 1, NULL);
    msgs = read_stream("DN", "dn.>", 60);
    json_array_foreach(msgs, i, m)
        json_object_set_new(ids, jstr(m, "Nats-Msg-Id"), json_true());
    assert_int_equal(json_object_size(ids), 60);  /* distinct Nats-Msg-Id */
    assert_int_equal(natsfx_stream_msgs(js, "DN"), 60);      /* total messages */
    json_decref(ids);
    json_decref(msgs);
}

/* ---- A stream that does not exist ---- */

static int all_dead_lettered(void *arg)
{
    (void)arg;
    return stats_num("nx", "dlq") == 3;
}

static void test_no_stream(void **state)
{
    (void)state;
    put_sink_group("nx", "nx.t", 0, "NO_SUCH_STREAM", "nx.{topic}",
                   ",\"max_attempts\":2,\"backoff\":{\"initial_ms\":50,\"max_ms\":100}");
    publish_plain("nx.t", "nx", 0, 3);
    await_status("nx", 1, "NO_SUCH_STREAM");
    /* nacked with the group's backoff, then dead-lettered at max_attempts */
    assert_true(await(all_dead_lettered, NULL, ARRIVE_MS));
    {
        json_t *q = call(&S, "GET", "/v1/groups/nx/dlq", NULL, 200);
        json_t *d = json_array_get(json_object_get(q, "deliveries"), 0);
        assert_int_equal(jint(d, "attempts"), 2);
        assert_non_null(strstr(jstr(d, "last_error"), "NO_SUCH_STREAM"));
        json_decref(q);
    }
    {
        struct resp r;
        assert_int_equal(http(&S, "GET", "/metrics", NULL, NULL, 0, NULL, &r), 0);
        assert_non_null(strstr(r.body, "mic_sink_failures_total{group=\"nx\"} "));
        assert_null(strstr(r.body, "mic_sink_failures_total{group=\"nx\"} 0\n"));
        resp_free(&r);
    }
    json_decref(call(&S, "DELETE", "/v1/groups/nx", NULL, 204));
}

/* ---- /metrics ---- */

/* The value of the sample 'series' (name and labels) in 'body'; fails if
 * absent. */
static double metric_value(const char *body, const char *series)
{
    size_t n = strlen(series);

    for (const char *p = body; (p = strstr(p, series)); p += n)
        if ((p == body || p[-1] == '\n') && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    fail_msg("no sample %s in /metrics", series);
    return -1;
}

/* `promtool check metrics` on 'body': it must parse (exit 0, or 3 for lint
 * problems) and find no problem with a mic_sink_ family (the other
 * families are test_promtool's). */
static void promtool_clean(const char *body, size_t len)
{
    char in[300], out[300], *txt;
    const char *exe = getenv("PROMTOOL") ? getenv("PROMTOOL") : "promtool";
    int status;
    pid_t pid;
    FILE *f;

    snprintf(in, sizeof in, "%s/metrics.txt", tmpdir);
    snprintf(out, sizeof out, "%s/promtool.out", tmpdir);
    assert_non_null(f = fopen(in, "w"));
    assert_int_equal(fwrite(body, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
    if ((pid = fork()) == 0) {
        int fi = open(in, O_RDONLY), fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fi < 0 || fo < 0)
            _exit(126);
        dup2(fi, 0);
        dup2(fo, 1);
        dup2(fo, 2);
        execlp(exe, exe, "check", "metrics", (char *)NULL);
        _exit(127);
    }
    assert_true(pid > 0);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    txt = file_read(out);
    assert_non_null(txt);
    if (!WIFEXITED(status) || (WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 3) ||
        strstr(txt, "mic_sink"))
        fail_msg("promtool check metrics (exit %d; 127: promtool not found, apt-get install "
                 "prometheus or set PROMTOOL): %s", WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                 txt);
    free(txt);
}

static void test_metrics(void **state)
{
    static const char *const want[] = {
        "# TYPE mic_sink_published_total counter", "# TYPE mic_sink_failures_total counter",
        "# TYPE mic_sink_in_flight gauge", "# TYPE mic_sink_connected gauge",
        "# TYPE mic_sink_puback_seconds histogram",
        "mic_sink_connected{group=\"un\"} 1\n", "mic_sink_in_flight{group=\"un\"} 0\n", NULL};
    struct resp r;
    double pub, cnt, inf;

    (void)state;
    assert_int_equal(http(&S, "GET", "/metrics", NULL, NULL, 0, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    for (int i = 0; want[i]; i++) {
        if (!strstr(r.body, want[i]))
            fprintf(stderr, "missing in /metrics: %s\n", want[i]);
        assert_non_null(strstr(r.body, want[i]));
    }
    /* at least the 200 (a PubAck later than 3 s under load is a failure,
     * and the re-publish a duplicate JetStream drops: counted again) */
    pub = metric_value(r.body, "mic_sink_published_total{group=\"un\"}");
    cnt = metric_value(r.body, "mic_sink_puback_seconds_count{group=\"un\"}");
    inf = metric_value(r.body, "mic_sink_puback_seconds_bucket{group=\"un\",le=\"+Inf\"}");
    assert_true(pub >= 200);
    assert_true(cnt == pub && inf == pub);
    assert_true(metric_value(r.body, "mic_sink_puback_seconds_sum{group=\"un\"}") > 0);
    promtool_clean(r.body, r.len);
    resp_free(&r);
}

static int gone_from_metrics(void *arg)
{
    struct resp r;
    int gone;

    (void)arg;
    if (http(&S, "GET", "/metrics", NULL, NULL, 0, NULL, &r))
        return 0;
    gone = r.status == 200 && !strstr(r.body, "mic_sink_connected{group=\"ord\"}");
    resp_free(&r);
    return gone;
}

static void test_delete(void **state)
{
    (void)state;
    json_decref(call(&S, "DELETE", "/v1/groups/ord", NULL, 204));
    assert_true(await(gone_from_metrics, NULL, ARRIVE_MS));
}

/* ---- A PubAck slower than the lease: the relay extends it ---- */

static char first_lease[64];
static int reclaimed;

/* The lease end of event le-0's delivery in group le, into 'out' ("" when
 * not processing); sets 'reclaimed' once its attempts count is past 1 (the
 * lease ran out and the event was claimed again, where an extension keeps
 * the one claim). */
static void lease_of(char *out, size_t cap)
{
    json_t *ev = call(&S, "GET", "/v1/events/le-0", NULL, 200), *d;
    size_t i;

    out[0] = 0;
    json_array_foreach(json_object_get(ev, "deliveries"), i, d)
        if (!strcmp(jstr(d, "group"), "le")) {
            if (jint(d, "attempts") > 1)
                reclaimed = 1;
            if (!strcmp(jstr(d, "state"), "processing"))
                snprintf(out, cap, "%s", jstr(d, "lease_expires_at"));
        }
    json_decref(ev);
}

static int leased(void *arg)
{
    (void)arg;
    lease_of(first_lease, sizeof first_lease);
    return first_lease[0] != 0 || reclaimed;
}

static int lease_extended(void *arg)
{
    char now[64];

    (void)arg;
    lease_of(now, sizeof now);
    return (now[0] && strcmp(now, first_lease) > 0) /* same fixed-width UTC form */
           || reclaimed;
}

static void test_lease_extended(void **state)
{
    struct want_msgs w = {"LE", 1};
    int extended;

    (void)state;
    make_stream("LE", "le.>");
    put_sink_group("le", "le.t", 0, "LE", "le.{topic}", ",\"lease_ttl_s\":1");
    await_status("le", 1, NULL); /* connected before NATS freezes */
    /* nats-server frozen (our own PID): the publish waits for its PubAck
     * longer than the 1 s lease */
    assert_int_equal(kill(nats_pid, SIGSTOP), 0);
    publish_plain("le.t", "le", 0, 1);
    extended = await(leased, NULL, ARRIVE_MS) && await(lease_extended, NULL, ARRIVE_MS);
    assert_int_equal(kill(nats_pid, SIGCONT), 0);
    assert_false(reclaimed);
    assert_true(extended);
    /* once NATS answers again the event arrives, once */
    assert_true(await(has_msgs, &w, ARRIVE_MS));
    json_decref(read_stream("LE", "le.>", 1));
    json_decref(call(&S, "DELETE", "/v1/groups/le", NULL, 204));
}

/* ---- micd stopped (SIGTERM) mid-relay, then restarted on its store ---- */

static int some_msgs(void *arg)
{
    return natsfx_stream_msgs(js, arg) >= 1;
}

static void test_micd_restart(void **state)
{
    struct want_msgs w = {"RS", 400};
    json_t *msgs, *m, *ids = json_object();
    size_t i;

    (void)state;
    make_stream("RS", "rs.>");
    /* a short lease: what was publishing at the stop comes back soon */
    put_sink_group("rs", "rs.t", 0, "RS", "rs.{topic}", ",\"lease_ttl_s\":3");
    publish_plain("rs.t", "rs", 0, 400);
    assert_true(await(some_msgs, "RS", ARRIVE_MS));
    /* a clean stop while relaying: the relay stops claiming, settles what
     * JetStream acknowledged (bounded), then the writer stops */
    assert_int_equal(srv_stop(&S), 0);
    printf("stream RS held %lld of the 400 when micd stopped\n",
           (long long)natsfx_stream_msgs(js, "RS"));
    assert_int_equal(srv_start(&S, NULL), 0);
    assert_true(await(has_msgs, &w, ARRIVE_MS));
    msgs = read_stream("RS", "rs.>", 400);
    json_array_foreach(msgs, i, m)
        json_object_set_new(ids, jstr(m, "Nats-Msg-Id"), json_true());
    assert_int_equal(json_object_size(ids), 400);
    assert_int_equal(natsfx_stream_msgs(js, "RS"), 400);
    json_decref(ids);
    json_decref(msgs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_validation),
        cmocka_unit_test(test_group_has_sink),
        cmocka_unit_test(test_unordered),
        cmocka_unit_test(test_ordered),
        cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_delete),
        cmocka_unit_test(test_no_stream),
        cmocka_unit_test(test_lease_extended),
        cmocka_unit_test(test_nats_down),
        cmocka_unit_test(test_micd_restart),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
