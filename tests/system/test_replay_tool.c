/* test_replay_tool.c - integration tests of mic-events-replay (DESIGN
 * section 5) against a real micd (the harness), a real nats-server with
 * JetStream and a real clickhouse-server.
 *
 * The group setup starts the three servers once, each on a free loopback
 * port in a temporary directory of its own (ClickHouse with a minimal
 * config written here), and waits for each by polling with a bounded
 * timeout.  A missing server binary or tool fails the setup with a
 * message: nothing is skipped.  Servers are stopped by PID (SIGTERM, then
 * SIGKILL after a bound) and their directories removed.  Each test uses
 * its own topics, streams and tables.  The kill test starts a nats-server
 * of its own.
 *
 * The tool is $MIC_REPLAY (default build/mic-events-replay), run as a
 * child process with stdout and stderr captured in files; micd is $MICD
 * (default build/san/micd). */
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
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <nats/nats.h>
#include <netinet/in.h>
#include <openssl/evp.h>
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
#define STOP_MS 15000
#define TOOL_MS 60000

/* A server process of ours: nats-server or clickhouse-server. */
struct proc {
    pid_t pid;
    int port;
    char dir[256];
    char log[300];
    char url[64];
};

static struct srv B;            /* micd */
static struct proc N;           /* nats-server */
static struct proc C;           /* clickhouse-server */
static struct srv CH;           /* C's HTTP interface, for the harness's http() */
static struct proc N3;          /* the nats-server the kill test kills */
static pid_t bg_tool;           /* the tool that test runs in the background */
static natsConnection *nc;
static jsCtx *js;
static char tool[512], tmpdir[64];

/* ---- Processes ---- */

/* fork + exec 'argv' with stdout to 'out' and stderr to 'err' (files,
 * truncated; NULL = /dev/null), stdin from /dev/null. */
static pid_t spawn(const char *const *argv, const char *out, const char *err)
{
    pid_t pid = fork();

    if (pid == 0) {
        int in = open("/dev/null", O_RDONLY);
        int fo = open(out ? out : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int fe = open(err ? err : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0600);

        if (in < 0 || fo < 0 || fe < 0)
            _exit(126);
        dup2(in, 0);
        dup2(fo, 1);
        dup2(fe, 2);
        setpgid(0, 0); /* a terminal's signals are not ours to pass on */
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* Wait up to 'ms' for 'pid'; returns its wait status, or -1 if it is still
 * running (it is then left alone). */
static int wait_ms(pid_t pid, int ms)
{
    int64_t end = mono_ms() + ms;
    int status;

    for (;;) {
        pid_t got = waitpid(pid, &status, WNOHANG);
        if (got == pid)
            return status;
        if (got < 0 || mono_ms() > end)
            return -1;
        nap_ms(5);
    }
}

/* SIGTERM, then SIGKILL if it has not ended within STOP_MS. */
static void proc_stop(struct proc *p)
{
    if (p->pid <= 0)
        return;
    kill(p->pid, SIGTERM);
    if (wait_ms(p->pid, STOP_MS) == -1) {
        kill(p->pid, SIGKILL);
        waitpid(p->pid, NULL, 0);
    }
    p->pid = 0;
}

static void proc_kill9(struct proc *p)
{
    if (p->pid <= 0)
        return;
    kill(p->pid, SIGKILL);
    waitpid(p->pid, NULL, 0);
    p->pid = 0;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    remove(path);
    return 0;
}

static void rm_tree(const char *dir)
{
    if (dir[0])
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static int alive(const struct proc *p)
{
    int status;

    return waitpid(p->pid, &status, WNOHANG) == 0;
}

/* ---- nats-server ---- */

/* Connect to p (bounded), with no reconnect: a killed server is gone. */
static natsStatus nats_connect(const struct proc *p, natsConnection **out)
{
    natsOptions *o = NULL;
    natsStatus s;

    if ((s = natsOptions_Create(&o)) == NATS_OK &&
        (s = natsOptions_SetURL(o, p->url)) == NATS_OK &&
        (s = natsOptions_SetTimeout(o, 2000)) == NATS_OK &&
        (s = natsOptions_SetAllowReconnect(o, false)) == NATS_OK)
        s = natsConnection_Connect(out, o);
    natsOptions_Destroy(o);
    return s;
}

/* Start nats-server with JetStream on a free port, storing in p->dir (a
 * new temp dir if empty), and wait until JetStream answers. */
static int nats_start(struct proc *p)
{
    char exe[512], port[16];
    const char *argv[12];
    natsConnection *c = NULL;
    jsCtx *j = NULL;
    jsAccountInfo *ai = NULL;
    int64_t end;
    int ok = 0;

    if (natsfx_find_exe("nats-server", "NATS_SERVER", exe, sizeof exe)) {
        fprintf(stderr, "FAIL: nats-server not found (apt-get install nats-server, "
                "or set NATS_SERVER)\n");
        return -1;
    }
    if (!p->dir[0]) {
        snprintf(p->dir, sizeof p->dir, "%s/nats-XXXXXX", tmpdir);
        if (!mkdtemp(p->dir))
            return -1;
    }
    snprintf(p->log, sizeof p->log, "%s.log", p->dir);
    p->port = free_port();
    snprintf(port, sizeof port, "%d", p->port);
    snprintf(p->url, sizeof p->url, "nats://127.0.0.1:%d", p->port);
    argv[0] = exe;
    argv[1] = "-a";
    argv[2] = "127.0.0.1";
    argv[3] = "-p";
    argv[4] = port;
    argv[5] = "-js";
    argv[6] = "-sd";
    argv[7] = p->dir;
    argv[8] = NULL;
    if ((p->pid = spawn(argv, p->log, p->log)) < 0)
        return -1;
    for (end = mono_ms() + READY_MS; !ok && mono_ms() < end && alive(p); nap_ms(20)) {
        if (nats_connect(p, &c) != NATS_OK)
            continue;
        if (natsConnection_JetStream(&j, c, NULL) == NATS_OK &&
            js_GetAccountInfo(&ai, j, NULL, NULL) == NATS_OK)
            ok = 1;
        jsAccountInfo_Destroy(ai);
        ai = NULL;
        jsCtx_Destroy(j);
        j = NULL;
        natsConnection_Destroy(c);
        c = NULL;
    }
    if (!ok) {
        fprintf(stderr, "FAIL: nats-server did not become ready (log %s)\n", p->log);
        proc_kill9(p);
        return -1;
    }
    return 0;
}

static void make_stream(jsCtx *j, const char *name, const char *subject)
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
    assert_int_equal(js_AddStream(&si, j, &cfg, NULL, &jerr), NATS_OK);
    jsStreamInfo_Destroy(si);
}

/* The first 'want' messages of stream 'name' in stream order (it must hold
 * that many within 20 s), read with the cluster fixture's reader, as JSON
 * objects {"subject","data","x-replay","x-replay-batch-id",
 * "x-original-event-id","Nats-Msg-Id"} (a missing header as ""). */
static json_t *read_stream(const char *name, const char *subject, int want)
{
    static const char *const hs[] = {"x-replay", "x-replay-batch-id", "x-original-event-id",
                                     "Nats-Msg-Id", NULL};
    json_t *raw = NULL, *out = json_array();

    assert_true(natsfx_stream_await(js, name, want, 20000) >= want);
    assert_int_equal(natsfx_stream_read(js, name, subject, 20000, &raw), 0);
    assert_true((int)json_array_size(raw) >= want);
    for (int i = 0; i < want; i++) {
        json_t *m = json_array_get(raw, (size_t)i), *o = json_object();

        json_object_set(o, "subject", json_object_get(m, "subject"));
        json_object_set(o, "data", json_object_get(m, "data"));
        for (int h = 0; hs[h]; h++) {
            const char *v = natsfx_hdr(m, hs[h]);

            json_object_set_new(o, hs[h], json_string(v ? v : ""));
        }
        json_array_append_new(out, o);
    }
    json_decref(raw);
    return out;
}

/* ---- clickhouse-server ---- */

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    int rc;

    if (!f)
        return -1;
    rc = fputs(text, f) < 0;
    return fclose(f) || rc ? -1 : 0;
}

static int ch_ping(void *arg)
{
    struct resp r;
    int ok;

    (void)arg;
    if (!alive(&C))
        return 1;
    ok = http(&CH, "GET", "/ping", NULL, NULL, 0, NULL, &r) == 0 && r.status == 200;
    resp_free(&r);
    return ok;
}

/* Start clickhouse-server with a config of its own in C.dir: loopback,
 * one free HTTP port (no TCP or interserver port), UTC, small caches. */
static int ch_start(void)
{
    char exe[512], path[400], cfgarg[420], conf[4096];
    const char *argv[4];

    if (natsfx_find_exe("clickhouse-server", "CLICKHOUSE_SERVER", exe, sizeof exe)) {
        fprintf(stderr, "FAIL: clickhouse-server not found (apt-get install "
                "clickhouse-server clickhouse-client, or set CLICKHOUSE_SERVER)\n");
        return -1;
    }
    snprintf(C.dir, sizeof C.dir, "%s/ch-XXXXXX", tmpdir);
    if (!mkdtemp(C.dir))
        return -1;
    snprintf(C.log, sizeof C.log, "%s/stderr.log", C.dir);
    C.port = free_port();
    snprintf(C.url, sizeof C.url, "http://127.0.0.1:%d", C.port);
    snprintf(conf, sizeof conf,
             "<?xml version=\"1.0\"?>\n<yandex>\n"
             "  <logger><level>warning</level><log>%1$s/server.log</log>"
             "<errorlog>%1$s/server.err.log</errorlog><size>10M</size><count>1</count></logger>\n"
             "  <http_port>%2$d</http_port>\n"
             "  <listen_host>127.0.0.1</listen_host>\n"
             "  <path>%1$s/data/</path>\n"
             "  <tmp_path>%1$s/tmp/</tmp_path>\n"
             "  <user_files_path>%1$s/user_files/</user_files_path>\n"
             "  <format_schema_path>%1$s/format_schemas/</format_schema_path>\n"
             "  <users_config>%1$s/users.xml</users_config>\n"
             "  <default_profile>default</default_profile>\n"
             "  <default_database>default</default_database>\n"
             "  <timezone>UTC</timezone>\n"
             "  <mark_cache_size>67108864</mark_cache_size>\n"
             "  <uncompressed_cache_size>67108864</uncompressed_cache_size>\n"
             "  <max_concurrent_queries>20</max_concurrent_queries>\n"
             "  <mlock_executable>false</mlock_executable>\n"
             "</yandex>\n", C.dir, C.port);
    snprintf(path, sizeof path, "%s/config.xml", C.dir);
    if (write_file(path, conf))
        return -1;
    snprintf(path, sizeof path, "%s/users.xml", C.dir);
    if (write_file(path,
                   "<?xml version=\"1.0\"?>\n<yandex>\n"
                   "  <profiles><default><max_memory_usage>1000000000</max_memory_usage>"
                   "</default></profiles>\n"
                   "  <users><default><password></password><networks><ip>127.0.0.1</ip>"
                   "</networks><profile>default</profile><quota>default</quota>"
                   "</default></users>\n"
                   "  <quotas><default></default></quotas>\n"
                   "</yandex>\n"))
        return -1;
    snprintf(cfgarg, sizeof cfgarg, "--config-file=%s/config.xml", C.dir);
    argv[0] = exe;
    argv[1] = cfgarg;
    argv[2] = NULL;
    if ((C.pid = spawn(argv, C.log, C.log)) < 0)
        return -1;
    memset(&CH, 0, sizeof CH);
    snprintf(CH.url, sizeof CH.url, "%s", C.url);
    if (!await(ch_ping, NULL, READY_MS) || !alive(&C)) {
        fprintf(stderr, "FAIL: clickhouse-server did not become ready (logs in %s)\n", C.dir);
        proc_kill9(&C);
        return -1;
    }
    return 0;
}

/* One ClickHouse query; returns the body (caller frees) and asserts 200. */
static char *ch_query(const char *sql)
{
    struct resp r;
    char *body;

    assert_int_equal(http(&CH, "POST", "/?wait_end_of_query=1", "text/plain", sql,
                          strlen(sql), NULL, &r), 0);
    if (r.status != 200)
        fprintf(stderr, "%s: %ld %s\n", sql, r.status, r.body ? r.body : "");
    assert_int_equal(r.status, 200);
    body = strdup(r.body ? r.body : "");
    resp_free(&r);
    return body;
}

/* ---- The tool ---- */

struct run {
    int status;        /* exit status, or -1 */
    char *out, *err;
    json_t *sum;       /* the summary (stdout's JSON), or NULL */
};

/* The tool's output file, "" when there is none. */
static char *slurp(const char *path)
{
    char *p = file_read(path);

    return p ? p : strdup("");
}

static pid_t tool_spawn(const char *const *args, const char *out, const char *err)
{
    const char *argv[40];
    int n = 0;

    argv[n++] = tool;
    for (int i = 0; args[i] && n < 39; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    return spawn(argv, out, err);
}

static void tool_collect(struct run *r, pid_t pid, int ms, const char *out, const char *err)
{
    int st = wait_ms(pid, ms);

    if (st == -1) {
        char *said;

        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        said = slurp(err);
        fail_msg("mic-events-replay did not end within %d ms; its stderr: %s", ms,
                 said ? said : "(none)");
    }
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    r->out = slurp(out);
    r->err = slurp(err);
    r->sum = json_loads(r->out, JSON_DISABLE_EOF_CHECK, NULL);
    unlink(out);
    unlink(err);
}

static void run_toolv(struct run *r, const char *const *args)
{
    char out[300], err[300];

    memset(r, 0, sizeof *r);
    snprintf(out, sizeof out, "%s/tool.out", tmpdir);
    snprintf(err, sizeof err, "%s/tool.err", tmpdir);
    tool_collect(r, tool_spawn(args, out, err), TOOL_MS, out, err);
}

#define RUN(r, ...) run_toolv((r), (const char *const[]){__VA_ARGS__, NULL})

static void run_free(struct run *r)
{
    free(r->out);
    free(r->err);
    json_decref(r->sum);
    memset(r, 0, sizeof *r);
}

/* Assert a successful run and return its summary (borrowed). */
static json_t *ok(const struct run *r)
{
    if (r->status != 0 || !r->sum)
        fprintf(stderr, "tool exit %d\nstdout: %s\nstderr: %s\n", r->status, r->out, r->err);
    assert_int_equal(r->status, 0);
    assert_non_null(r->sum);
    return r->sum;
}

static json_int_t num(const json_t *sum, const char *k)
{
    json_t *v = json_object_get(sum, k);

    assert_true(json_is_integer(v));
    return json_integer_value(v);
}

static const char *str(const json_t *o, const char *k)
{
    const char *v = json_string_value(json_object_get(o, k));

    assert_non_null(v);
    return v;
}

/* ---- Broker helpers ---- */

/* Publish 'events' (a JSON array, stolen) in batches of 1000. */
static void publish(json_t *events)
{
    size_t n = json_array_size(events);

    for (size_t i = 0; i < n; i += 1000) {
        json_t *batch = json_array();
        struct resp r;
        char *body;

        for (size_t k = i; k < n && k < i + 1000; k++)
            json_array_append(batch, json_array_get(events, k));
        batch = json_pack("{s:o}", "events", batch);
        body = json_dumps(batch, JSON_COMPACT);
        json_decref(batch);
        assert_non_null(body);
        assert_int_equal(http_json(&B, "POST", "/v1/events", body, &r), 0);
        if (r.status != 201)
            fprintf(stderr, "publish: %ld %s\n", r.status, r.body);
        assert_int_equal(r.status, 201);
        resp_free(&r);
        free(body);
    }
    json_decref(events);
}

/* 'n' events of 'topic': created_at steps by one second every three
 * events (ties), ids in an order unrelated to arrival, a payload and a
 * header. */
static void publish_n(const char *topic, int n, const char *prefix)
{
    json_t *a = json_array();
    int64_t base = 1790668800; /* 2026-09-29T08:00:00Z */

    for (int i = 0; i < n; i++) {
        char id[64], at[40];
        time_t t = (time_t)(base + i / 3);
        struct tm tm;

        gmtime_r(&t, &tm);
        strftime(at, sizeof at, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(at + strlen(at), sizeof at - strlen(at), ".%06dZ", (i * 37) % 1000);
        snprintf(id, sizeof id, "%s-%05d", prefix, (int)(((long)i * 7919) % 100003));
        json_array_append_new(a, json_pack("{s:s, s:s, s:s, s:{s:i, s:s}, s:{s:s}}",
                                           "event_id", id, "topic", topic,
                                           "created_at", at, "payload", "i", i,
                                           "s", "h\xc3\xa9llo \"q\"\n",
                                           "headers", "origin", "test"));
    }
    publish(a);
}

/* The broker's NDJSON range read of 'topic', one string per line. */
static json_t *broker_lines(const char *topic)
{
    json_t *lines = json_array();
    char path[300];
    struct resp r;
    char *p, *nl;

    snprintf(path, sizeof path, "/v1/topics/%s/events", topic);
    assert_int_equal(http(&B, "GET", path, NULL, NULL, 0, "Accept: application/x-ndjson", &r), 0);
    assert_int_equal(r.status, 200);
    for (p = r.body ? r.body : ""; *p && (nl = strchr(p, '\n')); p = nl + 1)
        json_array_append_new(lines, json_stringn(p, (size_t)(nl - p)));
    assert_string_equal(p, ""); /* every line ends with LF */
    resp_free(&r);
    return lines;
}

/* The DESIGN section 12 digest of a list of event JSON texts (or of
 * objects with a "data" text); also asserts (created_at, event_id) order. */
static void digest_of(json_t *lines, char out[65])
{
    static const char hx[] = "0123456789abcdef";
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    unsigned char md[32];
    unsigned int len = 0;
    char prev[300] = "";
    size_t i;
    json_t *v;

    EVP_DigestInit_ex(c, EVP_sha256(), NULL);
    json_array_foreach(lines, i, v) {
        json_t *text = json_is_string(v) ? v : json_object_get(v, "data");
        json_t *e = json_loads(json_string_value(text), 0, NULL);
        const char *at = str(e, "created_at"), *id = str(e, "event_id");
        char key[300];

        assert_int_equal(strlen(at), 27);
        snprintf(key, sizeof key, "%s\t%s", at, id);
        assert_true(strcmp(prev, key) < 0);
        memcpy(prev, key, sizeof prev);
        EVP_DigestUpdate(c, at, strlen(at));
        EVP_DigestUpdate(c, "\t", 1);
        EVP_DigestUpdate(c, id, strlen(id));
        EVP_DigestUpdate(c, "\n", 1);
        json_decref(e);
    }
    EVP_DigestFinal_ex(c, md, &len);
    EVP_MD_CTX_free(c);
    for (unsigned k = 0; k < 32; k++) {
        out[2 * k] = hx[md[k] >> 4];
        out[2 * k + 1] = hx[md[k] & 15];
    }
    out[64] = 0;
}

/* Lines of a file, one string each. */
static json_t *file_lines(const char *path)
{
    char *text = slurp(path), *p, *nl;
    json_t *lines = json_array();

    for (p = text; *p && (nl = strchr(p, '\n')); p = nl + 1)
        json_array_append_new(lines, json_stringn(p, (size_t)(nl - p)));
    assert_string_equal(p, "");
    free(text);
    return lines;
}

/* ---- Setup ---- */

/* Stop whatever runs and remove the temporary directories. */
static int stop_all(void)
{
    int rc = 0;

    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    js = NULL;
    nc = NULL;
    if (bg_tool > 0) {
        kill(bg_tool, SIGKILL);
        waitpid(bg_tool, NULL, 0);
        bg_tool = 0;
    }
    proc_stop(&N3);
    proc_stop(&N);
    proc_stop(&C);
    if (B.pid > 0)
        rc = srv_stop(&B);
    srv_cleanup(&B);
    rm_tree(N.dir);
    if (N.log[0])
        unlink(N.log);
    rm_tree(tmpdir);
    http_thread_done();
    return rc;
}

static int group_setup(void **state)
{
    const char *t = getenv("MIC_REPLAY");

    (void)state;
    memset(&B, 0, sizeof B);
    memset(&N, 0, sizeof N);
    memset(&C, 0, sizeof C);
    snprintf(tool, sizeof tool, "%s", t && *t ? t : "build/mic-events-replay");
    if (access(tool, X_OK)) {
        fprintf(stderr, "FAIL: %s is missing (make build/mic-events-replay, or set MIC_REPLAY)\n",
                tool);
        return -1;
    }
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mic-replay-XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    if (srv_start(&B, NULL)) {
        fprintf(stderr, "FAIL: micd did not start (%s)\n", B.logpath);
        goto fail;
    }
    if (nats_start(&N) || ch_start())
        goto fail;
    if (nats_connect(&N, &nc) != NATS_OK || natsConnection_JetStream(&js, nc, NULL) != NATS_OK) {
        fprintf(stderr, "FAIL: cannot connect to nats-server\n");
        goto fail;
    }
    return 0;
fail:
    stop_all();
    nats_CloseAndWait(2000);
    return -1;
}

static int group_teardown(void **state)
{
    int rc;

    (void)state;
    rc = stop_all();
    nats_CloseAndWait(2000);
    return rc == 0 ? 0 : -1;
}

/* ---- Tests ---- */

/* 1. Every message in the JetStream stream, in (created_at, event_id)
 * order, subject = topic, payload = the stored event, four headers. */
static void nats_headers_and_order(void **state)
{
    json_t *lines, *msgs, *m;
    struct run r;
    char want[300];
    size_t i;

    (void)state;
    publish_n("t1.orders", 60, "o");
    lines = broker_lines("t1.orders");
    assert_int_equal(json_array_size(lines), 60);
    make_stream(js, "S1", "t1.>");
    RUN(&r, "--from-broker", B.url, "--topic", "t1.orders", "--to-nats", N.url,
        "--nats-stream", "S1", "--batch-id", "b1");
    ok(&r);
    assert_int_equal(num(r.sum, "selected"), 60);
    assert_int_equal(num(r.sum, "published"), 60);
    assert_int_equal(num(r.sum, "duplicates"), 0);
    assert_string_equal(str(r.sum, "batch_id"), "b1");
    run_free(&r);
    msgs = read_stream("S1", "t1.>", 60);
    json_array_foreach(msgs, i, m) {
        json_t *e = json_loads(json_string_value(json_array_get(lines, i)), 0, NULL);
        const char *id = str(e, "event_id");

        assert_string_equal(str(m, "subject"), "t1.orders");
        assert_string_equal(str(m, "data"), json_string_value(json_array_get(lines, i)));
        assert_string_equal(str(m, "x-replay"), "true");
        assert_string_equal(str(m, "x-replay-batch-id"), "b1");
        assert_string_equal(str(m, "x-original-event-id"), id);
        snprintf(want, sizeof want, "b1:%s", id);
        assert_string_equal(str(m, "Nats-Msg-Id"), want);
        json_decref(e);
    }
    {
        char d1[65], d2[65];
        digest_of(lines, d1); /* also asserts the broker's order */
        digest_of(msgs, d2);
        assert_string_equal(d1, d2);
    }
    json_decref(msgs);
    json_decref(lines);
}

/* 2. The same --batch-id again adds nothing; another batch id does. */
static void nats_retry_deduplicated(void **state)
{
    struct run r;

    (void)state;
    assert_int_equal(natsfx_stream_msgs(js, "S1"), 60);
    RUN(&r, "--from-broker", B.url, "--topic", "t1.orders", "--to-nats", N.url,
        "--nats-stream", "S1", "--batch-id", "b1", "--quiet");
    ok(&r);
    assert_int_equal(num(r.sum, "selected"), 60);
    assert_int_equal(num(r.sum, "published"), 0);
    assert_int_equal(num(r.sum, "duplicates"), 60);
    assert_string_equal(r.err, ""); /* --quiet */
    run_free(&r);
    assert_int_equal(natsfx_stream_msgs(js, "S1"), 60);
    RUN(&r, "--from-broker", B.url, "--topic", "t1.orders", "--to-nats", N.url,
        "--nats-stream", "S1", "--batch-id", "b2", "--quiet");
    ok(&r);
    assert_int_equal(num(r.sum, "published"), 60);
    run_free(&r);
    assert_int_equal(natsfx_stream_msgs(js, "S1"), 120);
}

/* 3. nats-server killed mid-batch: the tool exits 1 with a message; a
 * retry with the same batch id on the restarted server completes the
 * stream without duplicates. */
struct stream_watch {
    jsCtx *j;
    pid_t tool;
    int64_t min;
};

static int stream_reached(void *arg)
{
    struct stream_watch *w = arg;
    int status;

    if (waitpid(w->tool, &status, WNOHANG) == w->tool) {
        w->tool = -1; /* ended too early */
        return 1;
    }
    return natsfx_stream_msgs(w->j, "S3") >= w->min;
}

static void nats_killed_mid_batch(void **state)
{
    enum { COUNT = 20000 };
    struct proc *n3 = &N3;
    natsConnection *c = NULL;
    jsCtx *j = NULL;
    char out[300], err[300];
    struct stream_watch w;
    struct run r;
    int64_t before;
    pid_t pid;

    (void)state;
    publish_n("t3.bulk", COUNT, "k");
    memset(n3, 0, sizeof *n3);
    assert_int_equal(nats_start(n3), 0);
    assert_int_equal(nats_connect(n3, &c), NATS_OK);
    assert_int_equal(natsConnection_JetStream(&j, c, NULL), NATS_OK);
    make_stream(j, "S3", "t3.>");
    snprintf(out, sizeof out, "%s/kill.out", tmpdir);
    snprintf(err, sizeof err, "%s/kill.err", tmpdir);
    pid = tool_spawn((const char *const[]){"--from-broker", B.url, "--topic", "t3.bulk",
                                           "--to-nats", n3->url, "--nats-stream", "S3",
                                           "--batch-id", "k1", NULL}, out, err);
    assert_true(pid > 0);
    bg_tool = pid;
    w.j = j;
    w.tool = pid;
    w.min = 100;
    assert_true(await(stream_reached, &w, 20000));
    assert_true(w.tool == pid); /* still running: the batch is not done */
    before = natsfx_stream_msgs(j, "S3");
    jsCtx_Destroy(j);
    natsConnection_Destroy(c);
    proc_kill9(n3);
    memset(&r, 0, sizeof r);
    tool_collect(&r, pid, 30000, out, err);
    bg_tool = 0;
    fprintf(stderr, "    killed nats-server after %lld of %d messages; tool said: %s",
            (long long)before, COUNT, r.err);
    assert_int_equal(r.status, 1);
    assert_null(r.sum);
    assert_non_null(strstr(r.err, "mic-events-replay: "));
    assert_non_null(strstr(r.err, "--batch-id k1"));
    run_free(&r);

    /* The same store on a new port: the retry redelivers the prefix,
     * which JetStream drops as duplicates. */
    assert_int_equal(nats_start(n3), 0);
    assert_int_equal(nats_connect(n3, &c), NATS_OK);
    assert_int_equal(natsConnection_JetStream(&j, c, NULL), NATS_OK);
    before = natsfx_stream_msgs(j, "S3");
    assert_true(before > 0 && before < COUNT); /* unflushed writes may be lost */
    RUN(&r, "--from-broker", B.url, "--topic", "t3.bulk", "--to-nats", n3->url,
        "--nats-stream", "S3", "--batch-id", "k1", "--quiet");
    ok(&r);
    assert_int_equal(num(r.sum, "selected"), COUNT);
    assert_int_equal(num(r.sum, "published") + num(r.sum, "duplicates"), COUNT);
    assert_int_equal(num(r.sum, "duplicates"), before);
    run_free(&r);
    assert_int_equal(natsfx_stream_msgs(j, "S3"), COUNT);
    jsCtx_Destroy(j);
    natsConnection_Destroy(c);
    proc_stop(n3);
    rm_tree(n3->dir);
    unlink(n3->log);
    memset(n3, 0, sizeof *n3);
}

/* 4. broker -> ClickHouse -> JSON file -> NATS: the same digest at every
 * stage, the archive file byte-identical to the broker's NDJSON. */
static void round_trip_keeps_digest(void **state)
{
    json_t *lines, *flines, *msgs;
    char want[65], got[65], file[300];
    char *text;
    struct run r;

    (void)state;
    publish_n("t4.rt", 250, "r");
    lines = broker_lines("t4.rt");
    digest_of(lines, want);
    snprintf(file, sizeof file, "%s/t4.ndjson", tmpdir);

    RUN(&r, "--from-broker", B.url, "--topic", "t4.rt");
    ok(&r);
    assert_string_equal(str(r.sum, "sink"), "none");
    assert_int_equal(num(r.sum, "selected"), 250);
    assert_string_equal(str(r.sum, "digest"), want);
    run_free(&r);

    RUN(&r, "--from-broker", B.url, "--topic", "t4.rt", "--to-clickhouse", C.url,
        "--clickhouse-table", "rt4");
    ok(&r);
    assert_int_equal(num(r.sum, "published"), 250);
    assert_string_equal(str(r.sum, "digest"), want);
    run_free(&r);
    text = ch_query("SELECT count(), sum(seq > 0), min(created_at_us) > 0 FROM rt4");
    assert_string_equal(text, "250\t250\t1\n");
    free(text);
    text = ch_query("SELECT name, type FROM system.columns WHERE table = 'rt4' "
                    "AND database = currentDatabase() FORMAT TSV");
    assert_string_equal(text, "topic\tString\nevent_id\tString\ncreated_at_us\tUInt64\n"
                              "created_at\tDateTime\nseq\tUInt64\nevent\tString\n");
    free(text);

    RUN(&r, "--from-clickhouse", C.url, "--clickhouse-table", "rt4", "--topic", "t4.rt");
    ok(&r);
    assert_int_equal(num(r.sum, "selected"), 250);
    assert_string_equal(str(r.sum, "digest"), want);
    run_free(&r);

    RUN(&r, "--from-clickhouse", C.url, "--clickhouse-table", "rt4", "--topic", "t4.rt",
        "--to-json", file);
    ok(&r);
    assert_string_equal(str(r.sum, "digest"), want);
    run_free(&r);
    flines = file_lines(file);
    assert_true(json_equal(flines, lines)); /* exactly as the broker serves them */
    json_decref(flines);

    RUN(&r, "--from-json", file, "--topic", "t4.rt");
    ok(&r);
    assert_string_equal(str(r.sum, "digest"), want);
    run_free(&r);

    make_stream(js, "S4", "t4.>");
    RUN(&r, "--from-json", file, "--topic", "t4.rt", "--to-nats", N.url, "--nats-stream", "S4");
    ok(&r);
    assert_int_equal(num(r.sum, "published"), 250);
    assert_string_equal(str(r.sum, "digest"), want);
    run_free(&r);
    msgs = read_stream("S4", "t4.>", 250);
    digest_of(msgs, got);
    assert_string_equal(got, want);
    json_decref(msgs);
    json_decref(lines);
}

/* 5. Inclusive bounds and ties on created_at ordered by event_id, from
 * the broker, a shuffled JSON file and ClickHouse. */
static void range_bounds_and_ties(void **state)
{
    static const char *const expect[] = {
        "at-from", "tie-0", "tie-B", "tie-a", "tie-b", "tie-c", "at-to",
    };
    json_t *ev = json_array(), *sel = json_array(), *all, *lines;
    char want[65], file[300], shuffled[300];
    const char *from = "2026-09-29T08:00:00Z", *to = "2026-09-29T10:00:00.000000Z";
    struct run r;
    size_t i;
    json_t *v;
    FILE *f;

    (void)state;
#define EV(id, at) json_array_append_new(ev, json_pack("{s:s, s:s, s:s, s:{s:s}}", \
        "event_id", id, "topic", "t5.range", "created_at", at, "payload", "id", id))
    EV("x-before", "2026-09-29T07:59:59.999999Z");
    EV("tie-c", "2026-09-29T09:00:00Z");
    EV("at-to", "2026-09-29T10:00:00Z");
    EV("tie-a", "2026-09-29T09:00:00.000000Z");
    EV("x-after", "2026-09-29T10:00:00.000001Z");
    EV("tie-b", "2026-09-29T09:00:00Z");
    EV("at-from", "2026-09-29T08:00:00.000000Z");
    EV("tie-0", "2026-09-29T11:00:00+02:00");  /* 09:00Z too */
    EV("tie-B", "2026-09-29T09:00:00Z");
#undef EV
    publish(ev);
    all = broker_lines("t5.range");
    assert_int_equal(json_array_size(all), 9);
    json_array_foreach(all, i, v) {
        json_t *e = json_loads(json_string_value(v), 0, NULL);
        const char *id = str(e, "event_id");
        if (strncmp(id, "x-", 2))
            json_array_append(sel, v);
        json_decref(e);
    }
    assert_int_equal(json_array_size(sel), 7);
    json_array_foreach(sel, i, v) {
        json_t *e = json_loads(json_string_value(v), 0, NULL);
        assert_string_equal(str(e, "event_id"), expect[i]);
        json_decref(e);
    }
    digest_of(sel, want);

    /* Broker, both bounds inclusive; --from with an offset, same instant. */
    snprintf(file, sizeof file, "%s/t5.ndjson", tmpdir);
    RUN(&r, "--from-broker", B.url, "--topic", "t5.range", "--from", from, "--to", to,
        "--to-json", file);
    ok(&r);
    assert_int_equal(num(r.sum, "selected"), 7);
    assert_string_equal(str(r.sum, "digest"), want);
    assert_string_equal(str(json_object_get(r.sum, "first"), "event_id"), "at-from");
    assert_string_equal(str(json_object_get(r.sum, "first"), "created_at"),
                        "2026-09-29T08:00:00.000000Z");
    assert_string_equal(str(json_object_get(r.sum, "last"), "event_id"), "at-to");
    assert_string_equal(str(r.sum, "from"), "2026-09-29T08:00:00.000000Z");
    assert_string_equal(str(r.sum, "to"), "2026-09-29T10:00:00.000000Z");
    run_free(&r);
    lines = file_lines(file);
    assert_true(json_equal(lines, sel));
    json_decref(lines);
    RUN(&r, "--from-broker", B.url, "--topic", "t5.range", "--from",
        "2026-09-29T10:00:00+02:00", "--to", "2026-09-29T09:59:59.999999Z");
    ok(&r);
    assert_int_equal(num(r.sum, "selected"), 6); /* at-to is now outside */
    run_free(&r);

    /* A JSON file out of order, with another topic and a repeated line. */
    snprintf(shuffled, sizeof shuffled, "%s/t5-shuffled.ndjson", tmpdir);
    f = fopen(shuffled, "w");
    assert_non_null(f);
    for (size_t k = 0; k < 9; k++) /* a permutation of 0..8 */
        fprintf(f, "%s\n", json_string_value(json_array_get(all, (k * 4 + 3) % 9)));
    fprintf(f, "{\"event_id\":\"other\",\"topic\":\"t5.other\","
               "\"created_at\":\"2026-09-29T09:00:00.000000Z\"}\n\n");
    fprintf(f, "%s\n", json_string_value(json_array_get(all, 4)));
    fclose(f);
    RUN(&r, "--from-json", shuffled, "--topic", "t5.range", "--from", from, "--to", to);
    ok(&r);
    assert_int_equal(num(r.sum, "read"), 11);
    assert_int_equal(num(r.sum, "selected"), 7);
    assert_int_equal(num(r.sum, "skipped"), 1);
    assert_string_equal(str(r.sum, "digest"), want);
    run_free(&r);

    /* ClickHouse: archive the whole topic, then select the range. */
    RUN(&r, "--from-broker", B.url, "--topic", "t5.range", "--to-clickhouse", C.url);
    ok(&r);
    assert_int_equal(num(r.sum, "published"), 9);
    run_free(&r);
    RUN(&r, "--from-clickhouse", C.url, "--topic", "t5.range", "--from", from, "--to", to);
    ok(&r);
    assert_int_equal(num(r.sum, "selected"), 7);
    assert_string_equal(str(r.sum, "digest"), want);
    run_free(&r);

    json_decref(all);
    json_decref(sel);
}

/* 6. --to-broker: new ids "B:ID", created_at and payload kept, the replay
 * headers added; in batches (1500 events: two); a second run with the
 * same batch id only finds duplicates. */
static void to_broker_republishes(void **state)
{
    json_t *src, *copy, *v;
    struct run r;
    size_t i;

    (void)state;
    publish_n("t6.src", 1500, "s");
    src = broker_lines("t6.src");
    RUN(&r, "--from-broker", B.url, "--topic", "t6.src", "--to-broker", B.url,
        "--to-topic", "t6.copy", "--batch-id", "rb1");
    ok(&r);
    assert_int_equal(num(r.sum, "selected"), 1500);
    assert_int_equal(num(r.sum, "published"), 1500);
    assert_int_equal(num(r.sum, "duplicates"), 0);
    run_free(&r);
    copy = broker_lines("t6.copy");
    assert_int_equal(json_array_size(copy), 1500);
    json_array_foreach(copy, i, v) {
        json_t *e = json_loads(json_string_value(v), 0, NULL);
        json_t *o = json_loads(json_string_value(json_array_get(src, i)), 0, NULL);
        json_t *h = json_object_get(e, "headers");
        char want[200];

        snprintf(want, sizeof want, "rb1:%s", str(o, "event_id"));
        assert_string_equal(str(e, "event_id"), want);
        assert_string_equal(str(e, "topic"), "t6.copy");
        assert_string_equal(str(e, "created_at"), str(o, "created_at"));
        assert_true(json_equal(json_object_get(e, "payload"), json_object_get(o, "payload")));
        assert_string_equal(str(h, "x-replay"), "true");
        assert_string_equal(str(h, "x-replay-batch-id"), "rb1");
        assert_string_equal(str(h, "x-original-event-id"), str(o, "event_id"));
        assert_string_equal(str(h, "origin"), "test");
        assert_int_equal(json_object_size(h), 4);
        json_decref(e);
        json_decref(o);
    }
    RUN(&r, "--from-broker", B.url, "--topic", "t6.src", "--to-broker", B.url,
        "--to-topic", "t6.copy", "--batch-id", "rb1");
    ok(&r);
    assert_int_equal(num(r.sum, "published"), 0);
    assert_int_equal(num(r.sum, "duplicates"), 1500);
    run_free(&r);
    json_decref(copy);
    copy = broker_lines("t6.copy");
    assert_int_equal(json_array_size(copy), 1500);
    json_decref(copy);
    json_decref(src);
}

/* 8. A missing stream is explained in plain words, exit 1, nothing
 * published: no stream of that name and none for the topic's subject (the
 * `nats stream add` line to make it), no stream of that name but another
 * takes the subject (pass that one), a stream that does not take the
 * subject (the `nats stream edit` line).  Following the advice works. */
static void nats_missing_stream(void **state)
{
    struct run r;
    json_t *sum;

    (void)state;
    publish_n("t9.lost", 6, "l");
    make_stream(js, "S9", "t9x.>");

    RUN(&r, "--from-broker", B.url, "--topic", "t9.lost", "--to-nats", N.url,
        "--nats-stream", "S9NEW", "--quiet");
    if (r.status != 1)
        fprintf(stderr, "exit %d, stderr: %s\n", r.status, r.err);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "has no stream S9NEW, and no stream takes subject t9.lost"));
    assert_non_null(strstr(r.err, "stream add S9NEW --subjects 't9.lost' --defaults"));
    assert_non_null(strstr(r.err, N.url));
    assert_true(strchr(r.err, '\n') == r.err + strlen(r.err) - 1); /* one line */
    run_free(&r);
    assert_int_equal(natsfx_stream_msgs(js, "S9NEW"), -1); /* nothing made */

    /* The name is wrong but S1 (t1.>) takes t1.orders: say so. */
    RUN(&r, "--from-broker", B.url, "--topic", "t1.orders", "--to-nats", N.url,
        "--nats-stream", "S1X", "--quiet");
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "has no stream S1X"));
    assert_non_null(strstr(r.err, "which stream S1 takes: pass --nats-stream S1"));
    run_free(&r);

    /* S9 exists but takes t9x.>, not t9.lost: nothing is published. */
    RUN(&r, "--from-broker", B.url, "--topic", "t9.lost", "--to-nats", N.url,
        "--nats-stream", "S9", "--quiet");
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "stream S9 at "));
    assert_non_null(strstr(r.err, "does not take subject t9.lost (its subjects: t9x.>)"));
    assert_non_null(strstr(r.err, "stream edit S9 --subjects 't9x.>,t9.lost'"));
    run_free(&r);
    assert_int_equal(natsfx_stream_msgs(js, "S9"), 0);

    /* Made as the first message said: the replay goes through. */
    make_stream(js, "S9NEW", "t9.lost");
    RUN(&r, "--from-broker", B.url, "--topic", "t9.lost", "--to-nats", N.url,
        "--nats-stream", "S9NEW", "--quiet");
    sum = ok(&r);
    assert_int_equal(num(sum, "published"), 6);
    run_free(&r);
    assert_int_equal(natsfx_stream_msgs(js, "S9NEW"), 6);
}

/* 7. Exit statuses: 2 for usage errors, 1 for a source error, 0 and an
 * empty selection for a range with nothing in it. */
static void usage_and_errors(void **state)
{
    char missing[300];
    struct run r;

    (void)state;
    RUN(&r, "--topic", "t");
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "source"));
    run_free(&r);
    RUN(&r, "--from-broker", B.url, "--topic", "t1.orders", "--to-json", "/tmp/x",
        "--to-nats", N.url);
    assert_int_equal(r.status, 2);
    run_free(&r);
    RUN(&r, "--from-broker", B.url, "--topic", "t1.orders", "--to-nats", N.url);
    assert_int_equal(r.status, 2);
    run_free(&r);
    RUN(&r, "--from-broker", B.url, "--topic", "t1.orders", "--from", "yesterday");
    assert_int_equal(r.status, 2);
    run_free(&r);
    RUN(&r, "--from-broker", B.url, "--topic", "t1.orders", "--batch-id", "a b");
    assert_int_equal(r.status, 2);
    run_free(&r);
    RUN(&r, "--from-broker", B.url, "--topic", "t1.orders", "--to-broker", B.url,
        "--to-topic", "t1.orders");
    assert_int_equal(r.status, 2);
    run_free(&r);
    RUN(&r, "--help");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "--from-clickhouse"));
    run_free(&r);

    RUN(&r, "--from-broker", B.url, "--topic", "no.such.topic", "--quiet");
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "404"));
    run_free(&r);
    snprintf(missing, sizeof missing, "%s/missing.ndjson", tmpdir);
    RUN(&r, "--from-json", missing, "--topic", "t", "--quiet");
    assert_int_equal(r.status, 1);
    run_free(&r);
    RUN(&r, "--from-broker", B.url, "--topic", "t1.orders", "--to-nats", N.url,
        "--nats-stream", "NO_SUCH_STREAM", "--quiet");
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "NO_SUCH_STREAM"));
    run_free(&r);

    RUN(&r, "--from-broker", B.url, "--topic", "t1.orders", "--from", "2000-01-01T00:00:00Z",
        "--to", "2000-01-02T00:00:00Z");
    ok(&r);
    assert_int_equal(num(r.sum, "selected"), 0);
    assert_true(json_is_null(json_object_get(r.sum, "first")));
    assert_string_equal(str(r.sum, "digest"),
                        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    run_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(nats_headers_and_order),
        cmocka_unit_test(nats_retry_deduplicated),
        cmocka_unit_test(nats_killed_mid_batch),
        cmocka_unit_test(round_trip_keeps_digest),
        cmocka_unit_test(range_bounds_and_ties),
        cmocka_unit_test(to_broker_republishes),
        cmocka_unit_test(usage_and_errors),
        cmocka_unit_test(nats_missing_stream),
    };

    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
