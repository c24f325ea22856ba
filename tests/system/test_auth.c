/* test_auth.c - API keys, roles, scopes, the audit log, reloads and TLS
 * (DESIGN sections 7 and 13), against a real micd.
 *
 * The matrix comes from the route table (mic_http_route): every route x
 * every role x a key covering everything / a key scoped to topic:t-* and
 * group:g-*, each on names inside and outside those scopes, plus no key,
 * an unknown key and malformed Authorization headers.  What each role may
 * do is written down here a second time (expect_roles below, DESIGN
 * section 13's table), so a route whose permission entry disagrees, or a
 * new route without an entry here, fails.  A refused request must answer
 * exactly 401 (with WWW-Authenticate: Bearer) or 403 and commit nothing
 * (mic_writer_ops_total unchanged); an allowed one must answer what the
 * same request answers with the admin key. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <openssl/sha.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/glob.h"
#include "http/auth.h"
#include "core/err.h"
#include "harness.h"
#include "http/routes.h"

static struct srv S;
static char keys_path[300], audit_path[300];

static const char *const roles[] = {"producer", "consumer", "monitor", "admin"};

/* DESIGN section 13's table: which roles may use each route. */
static const struct {
    const char *route; /* "METHOD template" */
    const char *roles;
} expect_roles[] = {
    {"POST /v1/events", "producer admin"},
    {"GET /v1/events/{id}", "monitor admin"},
    {"GET /v1/aggregates/{type}/{id}", "monitor admin"},
    {"GET /v1/topics", "producer consumer monitor admin"},
    {"GET /v1/topics/{topic}", "producer consumer monitor admin"},
    {"GET /v1/topics/{topic}/events", "consumer monitor admin"},
    {"GET /v1/groups", "consumer monitor admin"},
    {"GET /v1/groups/{group}", "consumer monitor admin"},
    {"POST /v1/groups/{group}/claim", "consumer admin"},
    {"POST /v1/groups/{group}/ack", "consumer admin"},
    {"POST /v1/groups/{group}/nack", "consumer admin"},
    {"POST /v1/groups/{group}/extend", "consumer admin"},
    {"GET /v1/groups/{group}/dlq", "consumer monitor admin"},
    {"GET /v1/groups/{group}/oldest", "consumer monitor admin"},
    {"GET /v1/groups/{group}/blocked", "consumer monitor admin"},
    {"GET /v1/replays/{run_id}", "monitor admin"},
    {"GET /v1/replays", "monitor admin"},
    {"GET /v1/stats", "monitor admin"},
    {"GET /metrics", "monitor admin"},
    {"PUT /v1/topics/{topic}", "admin"},
    {"DELETE /v1/topics/{topic}", "admin"},
    {"PUT /v1/groups/{group}", "admin"},
    {"DELETE /v1/groups/{group}", "admin"},
    {"POST /v1/groups/{group}/dlq/requeue", "admin"},
    {"POST /v1/groups/{group}/dlq/skip", "admin"},
    {"POST /v1/aggregates/{type}/{id}/gaps/{version}/skip", "admin"},
    {"POST /v1/replays", "admin"},
    {"DELETE /v1/replays/{run_id}", "admin"},
    {"GET /v1/backup", "admin"},
    {"GET /healthz", "open"},
    {"GET /readyz", "open"},
    /* The admin page (issue 18): its files hold no data and are open (a
     * browser cannot send a Bearer header when it navigates); every
     * figure it shows comes from the API with the key typed into it. */
    {"GET /ui", "open"},
    {"GET /ui/", "open"},
    {"GET /ui/app.js", "open"},
    {"GET /ui/app.css", "open"},
    {"GET /v1/whoami", "producer consumer monitor admin"},
    {"GET /v1/stats/history", "monitor admin"},
};
#define NEXPECT (sizeof expect_roles / sizeof expect_roles[0])

/* ---- Keys ---- */

static void sha_hex(const char *secret, char out[65])
{
    unsigned char h[SHA256_DIGEST_LENGTH];

    SHA256((const unsigned char *)secret, strlen(secret), h);
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", h[i]);
}

/* Secret of key ROLE-all (scope *) or ROLE-in (topic:t-*,group:g-*). */
static void secret_of(const char *role, int scoped, char *out, size_t n)
{
    snprintf(out, n, "test-secret-%s-%s", role, scoped ? "in" : "all");
}

static void write_keys(const char *extra)
{
    FILE *f = fopen(keys_path, "w");
    char sec[64], hex[65];

    assert_non_null(f);
    fprintf(f, "# test keys\n\n");
    for (int r = 0; r < 4; r++)
        for (int sc = 0; sc < 2; sc++) {
            secret_of(roles[r], sc, sec, sizeof sec);
            sha_hex(sec, hex);
            fprintf(f, "%s-%s %s %s %s\n", roles[r], sc ? "in" : "all", roles[r], hex,
                    sc ? "topic:t-*,group:g-*" : "*");
        }
    if (extra)
        fputs(extra, f);
    assert_int_equal(fclose(f), 0);
}

static char auth_hdr[4][2][128];

static const char *hdr_of(int role, int scoped)
{
    char sec[64];

    if (!auth_hdr[role][scoped][0]) {
        secret_of(roles[role], scoped, sec, sizeof sec);
        snprintf(auth_hdr[role][scoped], sizeof auth_hdr[role][scoped], "Authorization: Bearer %s",
                 sec);
    }
    return auth_hdr[role][scoped];
}

#define ADMIN hdr_of(3, 0)

static long call(const char *method, const char *path, const char *body, const char *hdr,
                 struct resp *r)
{
    assert_int_equal(http(&S, method, path, body ? "application/json" : NULL, body,
                          body ? strlen(body) : 0, hdr, r),
                     0);
    return r->status;
}

static long status_of(const char *method, const char *path, const char *body, const char *hdr)
{
    struct resp r;
    long st = call(method, path, body, hdr, &r);

    resp_free(&r);
    return st;
}

static unsigned long long writer_ops(void)
{
    struct resp r;
    const char *p;
    unsigned long long n;

    assert_int_equal(call("GET", "/metrics", NULL, ADMIN, &r), 200);
    p = strstr(r.body, "\nmic_writer_ops_total ");
    assert_non_null(p);
    n = strtoull(p + 22, NULL, 10);
    resp_free(&r);
    return n;
}

static int group_setup(void **state)
{
    static const char *const seed[][3] = {
        {"PUT", "/v1/topics/t-a", "{}"},
        {"PUT", "/v1/topics/x-b", "{}"},
        {"PUT", "/v1/groups/g-a", "{\"topics\":[\"t-a\"]}"},
        {"PUT", "/v1/groups/x-g", "{\"topics\":[\"x-b\"]}"},
        {"POST", "/v1/events", "{\"topic\":\"t-a\",\"event_id\":\"e1\",\"payload\":{}}"},
        {"POST", "/v1/events", "{\"topic\":\"x-b\",\"event_id\":\"e2\",\"payload\":{}}"},
    };
    const char *args[] = {"--keys", keys_path, "--audit-log", audit_path, NULL};

    (void)state;
    snprintf(keys_path, sizeof keys_path, "/tmp/mic-test-keys-%d", (int)getpid());
    snprintf(audit_path, sizeof audit_path, "/tmp/mic-test-audit-%d", (int)getpid());
    unlink(audit_path);
    write_keys(NULL);
    if (srv_start_shared(&S, args))
        return -1;
    /* Seed: topics t-a (in scope) and x-b (out), a group on each, one event
     * in each. */
    for (size_t i = 0; i < sizeof seed / sizeof seed[0]; i++)
        if (status_of(seed[i][0], seed[i][1], seed[i][2], ADMIN) / 100 != 2)
            return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    unlink(keys_path);
    unlink(audit_path);
    return srv_stop_shared(&S);
}

/* ---- The matrix ---- */

/* The concrete request for a route template: names inside (out == 0) or
 * outside the scoped keys' scopes, and a body that changes nothing when
 * the request is allowed (a duplicate, an invalid body, a missing name). */
static void concrete(const struct mic_route_info *ri, int out, char *path, size_t n,
                     const char **body)
{
    const char *t = out ? "x-b" : "t-a", *g = out ? "x-g" : "g-a";
    int del = !strcmp(ri->method, "DELETE");
    char *p = path;

    *body = NULL;
    for (const char *s = ri->name; *s && (size_t)(p - path) < n - 40;) {
        if (!strncmp(s, "{topic}", 7)) {
            p += sprintf(p, "%s", del ? (out ? "x-none" : "t-none") : t);
            s += 7;
        } else if (!strncmp(s, "{group}", 7)) {
            p += sprintf(p, "%s", del ? (out ? "x-none" : "g-none") : g);
            s += 7;
        } else if (!strncmp(s, "{type}", 6)) {
            p += sprintf(p, "Order");
            s += 6;
        } else if (!strncmp(s, "{id}", 4)) {
            p += sprintf(p, strstr(ri->name, "events") ? (out ? "e2" : "e1") : "1");
            s += 4;
        } else if (!strncmp(s, "{version}", 9)) {
            p += sprintf(p, "1");
            s += 9;
        } else if (!strncmp(s, "{run_id}", 8)) {
            p += sprintf(p, "r-none");
            s += 8;
        } else {
            *p++ = *s++;
        }
    }
    *p = 0;
    if (!strcmp(ri->method, "POST") && !strcmp(ri->name, "/v1/events"))
        *body = out ? "{\"topic\":\"x-b\",\"event_id\":\"e2\",\"payload\":{}}"
                    : "{\"topic\":\"t-a\",\"event_id\":\"e1\",\"payload\":{}}";
    else if (!strcmp(ri->method, "PUT") || !strcmp(ri->name, "/v1/replays"))
        *body = "[";  /* 400: not an object */
    else if (strstr(ri->name, "/claim"))
        *body = "{\"max\":0}";  /* 422 */
    else if (!strcmp(ri->method, "POST") && strstr(ri->name, "/v1/groups/"))
        *body = "{}";  /* ack, nack, extend, requeue, skip without items: 422 */
}

static int role_may(const struct mic_route_info *ri, int role, int *open)
{
    char key[160];

    snprintf(key, sizeof key, "%s %s", ri->method, ri->name);
    for (size_t i = 0; i < NEXPECT; i++)
        if (!strcmp(expect_roles[i].route, key)) {
            const char *w = strstr(expect_roles[i].roles, roles[role]);
            *open = !strcmp(expect_roles[i].roles, "open");
            return *open || w != NULL;
        }
    fail_msg("route %s has no entry in expect_roles", key);
    return 0;
}

/* Would a key scoped to topic:t-*,group:g-* be refused for the names of
 * variant 'out'?  From the template alone, not from the route table. */
static int scoped_refused(const struct mic_route_info *ri, int out)
{
    if (!strncmp(ri->name, "/v1/aggregates", 14) || !strncmp(ri->name, "/v1/replays", 11) ||
        !strcmp(ri->name, "/v1/backup"))
        return 1; /* neither a topic nor a group: needs the scope * */
    if (strstr(ri->name, "{topic}") || strstr(ri->name, "{group}") ||
        !strcmp(ri->name, "/v1/events/{id}") ||
        (!strcmp(ri->name, "/v1/events") && !strcmp(ri->method, "POST")))
        return out;
    return 0; /* listings: answered, narrowed */
}

static void expect_refused(const char *method, const char *path, const char *body,
                           const char *hdr, long want, const char *what)
{
    unsigned long long before = writer_ops();
    struct resp r;
    long st = call(method, path, body, hdr, &r);

    if (st != want)
        fail_msg("%s %s (%s): %ld, want %ld: %s", method, path, what, st, want, r.body);
    assert_string_equal(resp_error_code(&r), want == 401 ? "unauthorized" : "forbidden");
    if (want == 401)
        assert_non_null(strstr(r.body, "\"error\""));
    resp_free(&r);
    assert_int_equal(writer_ops(), before); /* nothing was committed */
}

static void route_table_has_permissions(void **state)
{
    struct mic_route_info ri;
    int n = 0;

    (void)state;
    for (int i = 0; mic_http_route(i, &ri); i++) {
        int open;

        n++;
        assert_int_not_equal(ri.perm, MIC_PERM_UNSET);
        role_may(&ri, 0, &open); /* fails when the route has no entry here */
        assert_int_equal(open, ri.perm == MIC_PERM_OPEN);
    }
    assert_int_equal(n, (int)NEXPECT);
}

static char long_header[700];

static void matrix(void **state)
{
    static const char *const bad_headers[] = {
        NULL,                                   /* no header */
        "Authorization: Bearer unknown-secret", /* not a key */
        "Authorization: Bearer",                /* no secret */
        "Authorization: Basic dGVzdDp0ZXN0",    /* another scheme */
        "Authorization: Bearer test-secret admin-all", /* a space in it */
        "Authorization: Bearer test-secret-\xc3\xa9",  /* not ASCII */
        "Authorization: Bearer test-secret-admin-al",  /* truncated */
        long_header,                             /* over-long */
    };
    struct mic_route_info ri;
    int cells = 0;

    (void)state;
    memcpy(long_header, "Authorization: Bearer ", 22);
    memset(long_header + 22, 'k', sizeof long_header - 23);
    for (int i = 0; mic_http_route(i, &ri); i++) {
        for (int out = 0; out < 2; out++) {
            char path[256];
            const char *body;
            long admin;
            int open;

            concrete(&ri, out, path, sizeof path, &body);
            admin = status_of(ri.method, path, body, ADMIN);
            assert_true(admin != 401 && admin != 403);
            role_may(&ri, 0, &open);
            for (size_t b = 0; b < sizeof bad_headers / sizeof bad_headers[0]; b++, cells++) {
                if (open)
                    assert_int_equal(status_of(ri.method, path, body, bad_headers[b]), admin);
                else
                    expect_refused(ri.method, path, body, bad_headers[b], 401, "bad header");
            }
            for (int role = 0; role < 4; role++)
                for (int scoped = 0; scoped < 2; scoped++, cells++) {
                    const char *h = hdr_of(role, scoped);
                    int may = role_may(&ri, role, &open);

                    if (!open && !may)
                        expect_refused(ri.method, path, body, h, 403, roles[role]);
                    else if (!open && scoped && scoped_refused(&ri, out))
                        expect_refused(ri.method, path, body, h, 403, "out of scope");
                    else if (status_of(ri.method, path, body, h) != admin)
                        fail_msg("%s %s as %s-%s: not the admin's %ld", ri.method, path,
                                 roles[role], scoped ? "in" : "all", admin);
                }
        }
    }
    assert_true(cells > 500);
}

/* Listings show only what the key's scopes cover. */
/* GET 'path' with 'hdr': 200, every string of 'in' in the body and none
 * of 'out' (NULL-terminated lists). */
static void listing(const char *path, const char *hdr, const char *const *in,
                    const char *const *out)
{
    struct resp r;

    assert_int_equal(call("GET", path, NULL, hdr, &r), 200);
    for (; in && *in; in++)
        if (!strstr(r.body, *in))
            fail_msg("GET %s: no %s in %s", path, *in, r.body);
    for (; out && *out; out++)
        if (strstr(r.body, *out))
            fail_msg("GET %s: %s shown: %s", path, *out, r.body);
    resp_free(&r);
}

static void listings_are_narrowed(void **state)
{
    struct resp r;

    (void)state;
    listing("/v1/topics", hdr_of(0, 1), (const char *[]){"\"t-a\"", NULL},
            (const char *[]){"\"x-b\"", NULL});
    listing("/v1/topics", hdr_of(0, 0), (const char *[]){"\"x-b\"", NULL}, NULL);
    listing("/v1/groups", hdr_of(1, 1), (const char *[]){"\"g-a\"", NULL},
            (const char *[]){"\"x-g\"", NULL});
    listing("/v1/stats", hdr_of(2, 1), (const char *[]){"\"g-a\"", "\"t-a\"", NULL},
            (const char *[]){"\"x-g\"", "\"x-b\"", NULL});
    /* Unlabelled families are kept. */
    listing("/metrics", hdr_of(2, 1),
            (const char *[]){"topic=\"t-a\"", "group=\"g-a\"", "mic_writer_ops_total", NULL},
            (const char *[]){"\"x-b\"", "\"x-g\"", NULL});
    /* A batch with one event outside the scopes stores none of it. */
    assert_int_equal(call("POST", "/v1/events",
                          "{\"events\":[{\"topic\":\"t-a\",\"event_id\":\"b1\",\"payload\":1},"
                          "{\"topic\":\"x-b\",\"event_id\":\"b2\",\"payload\":1}]}",
                          hdr_of(0, 1), &r),
                     403);
    resp_free(&r);
    assert_int_equal(status_of("GET", "/v1/events/b1", NULL, ADMIN), 404);
}

/* GET /v1/whoami names each key and its role (any valid key may ask);
 * without keys micd answers key_id null, role admin. */
static void whoami(void **state)
{
    struct srv open_srv;
    struct resp r;

    (void)state;
    for (int role = 0; role < 4; role++)
        for (int sc = 0; sc < 2; sc++) {
            char id[32];

            snprintf(id, sizeof id, "%s-%s", roles[role], sc ? "in" : "all");
            assert_int_equal(call("GET", "/v1/whoami", NULL, hdr_of(role, sc), &r), 200);
            assert_string_equal(json_string_value(json_object_get(r.json, "key_id")), id);
            assert_string_equal(json_string_value(json_object_get(r.json, "role")), roles[role]);
            resp_free(&r);
        }
    assert_int_equal(status_of("GET", "/v1/whoami", NULL, NULL), 401);
    assert_int_equal(status_of("GET", "/v1/whoami", NULL, "Authorization: Bearer nope"), 401);
    /* The page's files need no key, its figures do. */
    assert_int_equal(status_of("GET", "/ui", NULL, NULL), 200);
    assert_int_equal(status_of("GET", "/v1/stats/history", NULL, NULL), 401);
    assert_int_equal(status_of("GET", "/v1/stats/history", NULL, hdr_of(1, 0)), 403);

    memset(&open_srv, 0, sizeof open_srv);
    assert_int_equal(srv_start(&open_srv, NULL), 0);
    assert_int_equal(http(&open_srv, "GET", "/v1/whoami", NULL, NULL, 0, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    assert_true(json_is_null(json_object_get(r.json, "key_id")));
    assert_string_equal(json_string_value(json_object_get(r.json, "role")), "admin");
    resp_free(&r);
    assert_int_equal(srv_stop(&open_srv), 0);
    srv_cleanup(&open_srv);
}

/* Refusals are counted in mic_http_requests_total (the dashboard's HTTP
 * panel shows them): a 403 under its route; a 401 under route "unknown",
 * as micd tells nothing about the path before the key is known. */
static long refusal_count(const char *route, const char *code)
{
    char series[160];
    struct resp r;
    const char *p;
    long n = 0;

    snprintf(series, sizeof series, "mic_http_requests_total{route=\"%s\",code=\"%s\"} ", route,
             code);
    assert_int_equal(call("GET", "/metrics", NULL, hdr_of(3, 0), &r), 200);
    if ((p = strstr(r.body, series)))
        n = strtol(p + strlen(series), NULL, 10);
    resp_free(&r);
    return n;
}

static void refusals_counted(void **state)
{
    long u0 = refusal_count("unknown", "401"), f0 = refusal_count("/v1/stats", "403");

    (void)state;
    assert_int_equal(status_of("GET", "/v1/stats", NULL, NULL), 401);
    assert_int_equal(status_of("GET", "/v1/stats", NULL, hdr_of(0, 0)), 403);
    assert_int_equal(refusal_count("unknown", "401"), u0 + 1);
    assert_int_equal(refusal_count("/v1/stats", "403"), f0 + 1);
}

/* The audit log: one JSON line per changing or refused request, the
 * fields of DESIGN section 13, and no secret anywhere. */
static void audit_log(void **state)
{
    char *log, *line, *save = NULL, sec[64];
    int n401 = 0, n403 = 0, nput = 0;

    (void)state;
    /* One more of each, so the test does not depend on the others. */
    assert_int_equal(status_of("GET", "/v1/groups", NULL, NULL), 401);
    assert_int_equal(status_of("DELETE", "/v1/topics/t-a", NULL, hdr_of(0, 0)), 403);
    assert_int_equal(status_of("PUT", "/v1/topics/t-audit", "{}", ADMIN) / 100, 2);
    assert_non_null(log = file_read(audit_path));
    for (int r = 0; r < 4; r++)
        for (int sc = 0; sc < 2; sc++) {
            secret_of(roles[r], sc, sec, sizeof sec);
            assert_null(strstr(log, sec));
        }
    assert_null(strstr(log, "unknown-secret"));
    assert_null(strstr(log, "payload"));
    for (line = strtok_r(log, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        long st;

        assert_non_null(o);
        assert_int_equal(json_object_size(o), 7);
        assert_true(json_is_string(json_object_get(o, "time")));
        assert_true(json_is_string(json_object_get(o, "request_id")));
        assert_true(json_is_string(json_object_get(o, "remote")));
        assert_true(json_is_string(json_object_get(o, "method")));
        assert_true(json_is_string(json_object_get(o, "path")));
        st = (long)json_integer_value(json_object_get(o, "status"));
        if (st == 401) {
            n401++;
            assert_true(json_is_null(json_object_get(o, "key_id")));
        } else if (st == 403) {
            n403++;
            assert_true(json_is_string(json_object_get(o, "key_id")));
        } else if (strcmp(json_string_value(json_object_get(o, "path")), "/v1/backup")) {
            /* GETs are not audited, but for the admin's backup */
            assert_string_not_equal(json_string_value(json_object_get(o, "method")), "GET");
        }
        if (!strcmp(json_string_value(json_object_get(o, "path")), "/v1/topics/t-audit")) {
            nput++;
            assert_string_equal(json_string_value(json_object_get(o, "key_id")), "admin-all");
            assert_string_equal(json_string_value(json_object_get(o, "remote")), "127.0.0.1");
        }
        json_decref(o);
    }
    assert_true(n401 > 0);
    assert_true(n403 > 0);
    assert_int_equal(nput, 1);
    free(log);
}

/* SIGHUP reloads the keys; a bad file keeps the keys in force. */
struct log_wait {
    const char *needle;
};

static int log_has(void *arg)
{
    struct log_wait *w = arg;
    char *log = file_read(S.logpath);
    int found = log && strstr(log, w->needle);

    free(log);
    return found;
}

static int late_key_works(void *arg)
{
    (void)arg;
    return status_of("GET", "/v1/topics", NULL, "Authorization: Bearer a-late-secret") == 200;
}

static void reload(void **state)
{
    char hex[65], line[200];
    struct log_wait w = {"keys not reloaded"};

    (void)state;
    assert_int_equal(status_of("GET", "/v1/topics", NULL, "Authorization: Bearer a-late-secret"),
                     401);
    sha_hex("a-late-secret", hex);
    snprintf(line, sizeof line, "late producer %s topic:*\n", hex);
    write_keys(line);
    assert_int_equal(kill(S.pid, SIGHUP), 0);
    assert_true(await(late_key_works, NULL, 10000));
    /* A bad line: the keys in force stay, and the log says why. */
    write_keys("broken line\n");
    assert_int_equal(kill(S.pid, SIGHUP), 0);
    assert_true(await(log_has, &w, 10000));
    assert_int_equal(status_of("GET", "/v1/topics", NULL, "Authorization: Bearer a-late-secret"),
                     200);
    write_keys(NULL);
}

/* mic keys new prints a secret and the line that admits it; mic --key and
 * MIC_KEY send it. */
static void cli_keys(void **state)
{
    const char *cli = getenv("MIC_CLI") ? getenv("MIC_CLI") : "build/san/mic";
    char cmd[1200], secret[128] = "", line[400] = "", why[200], hex[65];
    const struct mic_key *k;
    mic_keys *keys;
    FILE *f;

    (void)state;
    snprintf(cmd, sizeof cmd, "%s keys new --id cli-1 --role consumer --scope group:g-* "
             "--scope topic:t-a 2> %s.line", cli, keys_path);
    assert_non_null(f = popen(cmd, "r"));
    assert_non_null(fgets(secret, sizeof secret, f));
    assert_int_equal(pclose(f), 0);
    secret[strcspn(secret, "\n")] = 0;
    assert_int_equal(strlen(secret), 47);
    snprintf(cmd, sizeof cmd, "%s.line", keys_path);
    assert_non_null(f = fopen(cmd, "r"));
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    unlink(cmd);
    assert_int_equal(mic_keys_parse(line, strlen(line), &keys, why, sizeof why), MIC_OK);
    assert_non_null(k = mic_keys_find(keys, secret, strlen(secret)));
    assert_string_equal(k->id, "cli-1");
    assert_int_equal(k->role, MIC_ROLE_CONSUMER);
    assert_string_equal(k->scopes, "group:g-*,topic:t-a");
    sha_hex(secret, hex);
    assert_non_null(strstr(line, hex));
    mic_keys_free(keys);
    /* A bad role is a usage error (2), and nothing is printed on stdout. */
    snprintf(cmd, sizeof cmd, "%s keys new --id x --role root > /dev/null 2>&1", cli);
    assert_int_equal(WEXITSTATUS(system(cmd)), 2);
    /* --key and MIC_KEY reach the server; without a key: 401, exit 1. */
    snprintf(cmd, sizeof cmd, "%s --url %s --key test-secret-monitor-all groups > /dev/null", cli,
             S.url);
    assert_int_equal(WEXITSTATUS(system(cmd)), 0);
    snprintf(cmd, sizeof cmd, "MIC_KEY=test-secret-monitor-all %s --url %s topics > /dev/null", cli,
             S.url);
    assert_int_equal(WEXITSTATUS(system(cmd)), 0);
    snprintf(cmd, sizeof cmd, "env -u MIC_KEY %s --url %s groups 2>&1 | grep -q 'mic: 401 unauthorized'",
             cli, S.url);
    assert_int_equal(WEXITSTATUS(system(cmd)), 0);
}

/* ---- Start-up refusals ---- */

static void refusals(void **state)
{
    struct srv s;
    char bad[300];
    FILE *f;

    (void)state;
    memset(&s, 0, sizeof s);
    snprintf(s.dir, sizeof s.dir, "/tmp/mic-test-auth-XXXXXX");
    assert_non_null(mkdtemp(s.dir));
    {
        const char *args[] = {"--listen", "0.0.0.0:0", NULL};
        assert_int_equal(srv_run_expect_exit(&s, args), 2);
    }
    {
        const char *args[] = {"--listen", "[::]:0", NULL};
        assert_int_equal(srv_run_expect_exit(&s, args), 2);
    }
    snprintf(bad, sizeof bad, "%s.keys", s.dir);
    assert_non_null(f = fopen(bad, "w"));
    fprintf(f, "ok admin %064d *\nbad-role boss %064d *\n", 0, 0);
    fclose(f);
    {
        const char *args[] = {"--keys", bad, NULL};
        char *log;
        assert_int_equal(srv_run_expect_exit(&s, args), 2);
        assert_non_null(log = file_read(s.logpath));
        assert_non_null(strstr(log, "line 2"));
        free(log);
    }
    {
        const char *args[] = {"--keys", "/nonexistent/keys", NULL};
        assert_int_equal(srv_run_expect_exit(&s, args), 2);
    }
    {
        const char *args[] = {"--tls-cert", bad, NULL};
        assert_int_equal(srv_run_expect_exit(&s, args), 2);
    }
    unlink(bad);
    srv_cleanup(&s);
}

/* ---- TLS ---- */

static int make_cert(const char *dir, const char *name)
{
    char cmd[1200];

    snprintf(cmd, sizeof cmd,
             "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=127.0.0.1 "
             "-addext subjectAltName=IP:127.0.0.1 -keyout %s/%s.key -out %s/%s.crt "
             "> /dev/null 2>&1",
             dir, name, dir, name);
    return system(cmd);
}

static void tls(void **state)
{
    char dir[] = "/tmp/mic-test-tls-XXXXXX", c1[200], k1[200], k2[200];
    struct srv s, plain;
    struct resp r;

    (void)state;
    assert_non_null(mkdtemp(dir));
    assert_int_equal(make_cert(dir, "one"), 0);
    assert_int_equal(make_cert(dir, "two"), 0);
    snprintf(c1, sizeof c1, "%s/one.crt", dir);
    snprintf(k1, sizeof k1, "%s/one.key", dir);
    snprintf(k2, sizeof k2, "%s/two.key", dir);
    memset(&s, 0, sizeof s);
    {
        /* A key that is not the certificate's: exit 2, nothing served. */
        const char *args[] = {"--tls-cert", c1, "--tls-key", k2, NULL};
        snprintf(s.dir, sizeof s.dir, "%s/store", dir);
        assert_int_equal(srv_run_expect_exit(&s, args), 2);
    }
    {
        const char *args[] = {"--tls-cert", c1, "--tls-key", k1, NULL};
        snprintf(s.cacert, sizeof s.cacert, "%s", c1);
        assert_int_equal(srv_start(&s, args), 0); /* /healthz over HTTPS */
    }
    assert_int_equal(strncmp(s.url, "https://", 8), 0);
    assert_int_equal(http_json(&s, "PUT", "/v1/topics/tls", "{}", &r), 0);
    assert_int_equal(r.status / 100, 2);
    resp_free(&r);
    /* Plain HTTP to the same port gets no HTTP answer. */
    plain = s;
    plain.cacert[0] = 0;
    snprintf(plain.url, sizeof plain.url, "http://127.0.0.1:%d", s.port);
    assert_true(http(&plain, "GET", "/healthz", NULL, NULL, 0, NULL, &r) != 0 || r.status != 200);
    resp_free(&r);
    /* The curl command line as a user runs it, and TLS 1.1 refused. */
    {
        char cmd[800];

        snprintf(cmd, sizeof cmd, "curl -sf --cacert %s %s/healthz > /dev/null", c1, s.url);
        assert_int_equal(system(cmd), 0);
        snprintf(cmd, sizeof cmd,
                 "curl -sf --tlsv1.0 --tls-max 1.1 --cacert %s %s/healthz > /dev/null 2>&1", c1,
                 s.url);
        assert_int_not_equal(system(cmd), 0);
    }
    /* The bench tools speak TLS too (their output is one JSON line). */
    {
        char cmd[800];

        assert_int_equal(http_json(&s, "PUT", "/v1/groups/tls-g", "{\"topics\":[\"tls\"]}", &r), 0);
        assert_int_equal(r.status / 100, 2);
        resp_free(&r);
        snprintf(cmd, sizeof cmd, "./build/loadgen --url %s --cacert %s --conns 2 --events 50 "
                 "--batch 5 --topic tls --max-seconds 60 2>/dev/null | grep -q '\"errors\":0'",
                 s.url, c1);
        assert_int_equal(system(cmd), 0);
        snprintf(cmd, sizeof cmd, "./build/workers --url %s --cacert %s --group tls-g --workers 2 "
                 "--expect 50 --max-seconds 60 | grep -q '\"acked\":50,'", s.url, c1);
        assert_int_equal(system(cmd), 0);
        /* Without the CA, the certificate is not trusted: nothing is sent. */
        snprintf(cmd, sizeof cmd, "./build/loadgen --url %s --conns 1 --events 5 --batch 5 "
                 "--topic tls --max-seconds 3 > /dev/null 2>&1", s.url);
        assert_int_not_equal(system(cmd), 0);
    }
    assert_int_equal(srv_stop(&s), 0);
    srv_cleanup(&s);
    {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        assert_int_equal(system(cmd), 0);
    }
}

/* ---- Unit: the keys file and globs ---- */

static void keys_file_lines(void **state)
{
    char why[200], hex[65];
    char text[800];
    mic_keys *k;
    const struct mic_key *key;

    (void)state;
    sha_hex("s3cret", hex);
    snprintf(text, sizeof text, "# comment\n\n  \t\nops admin %s *\r\nw1 consumer %s group:orders-*,topic:a\n",
             hex, hex);
    assert_int_equal(mic_keys_parse(text, strlen(text), &k, why, sizeof why), MIC_OK);
    assert_int_equal(mic_keys_count(k), 2);
    assert_non_null(key = mic_keys_find(k, "s3cret", 6));
    assert_string_equal(key->id, "ops"); /* the first of two equal hashes */
    assert_null(mic_keys_find(k, "s3cre", 5));
    assert_null(mic_keys_find(k, "s3cret ", 7));
    mic_keys_free(k);
    static const struct {
        const char *line, *why;
    } bad[] = {
        {"only three fields", "four fields"},
        {"a b c d e", "four fields"},
        {"id root 00 *", "the role"},
        {"id admin 00 *", "64 lowercase hex"},
        {"i/d admin " "0000000000000000000000000000000000000000000000000000000000000000 *", "the ID"},
        {"id admin " "000000000000000000000000000000000000000000000000000000000000000G *", "hex"},
        {"id admin " "0000000000000000000000000000000000000000000000000000000000000000 orders", "a scope"},
        {"id admin " "0000000000000000000000000000000000000000000000000000000000000000 topic:a/b", "a glob"},
        {"id admin " "0000000000000000000000000000000000000000000000000000000000000000 topic:a,", "comma"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(text, sizeof text, "x admin %s *\n%s\n", hex, bad[i].line);
        assert_int_equal(mic_keys_parse(text, strlen(text), &k, why, sizeof why), MIC_EINVAL);
        assert_null(k);
        assert_int_equal(strncmp(why, "line 2: ", 8), 0);
        if (!strstr(why, bad[i].why))
            fail_msg("'%s': %s", bad[i].line, why);
    }
    snprintf(text, sizeof text, "x admin %s *\nx monitor %s *\n", hex, hex);
    assert_int_equal(mic_keys_parse(text, strlen(text), &k, why, sizeof why), MIC_EINVAL);
    assert_non_null(strstr(why, "twice"));
}

static void globs_and_scopes(void **state)
{
    struct mic_key k;

    (void)state;
    assert_true(mic_glob_match("orders-*", 8, "orders-eu"));
    assert_true(mic_glob_match("orders-*", 8, "orders-"));
    assert_false(mic_glob_match("orders-*", 8, "order"));
    assert_true(mic_glob_match("*", 1, ""));
    assert_true(mic_glob_match("a*b*c", 5, "aXXbYYc"));
    assert_false(mic_glob_match("a*b*c", 5, "aXXbYY"));
    assert_true(mic_glob_match("exact", 5, "exact"));
    assert_false(mic_glob_match("exact", 5, "exactly"));
    memset(&k, 0, sizeof k);
    strcpy(k.scopes, "topic:orders*,group:billing");
    assert_true(mic_key_covers_topic(&k, "orders.eu"));
    assert_false(mic_key_covers_topic(&k, "billing"));
    assert_true(mic_key_covers_group(&k, "billing"));
    assert_false(mic_key_covers_group(&k, "orders"));
    assert_false(mic_key_covers_all(&k));
    strcpy(k.scopes, "*");
    assert_true(mic_key_covers_all(&k));
    assert_true(mic_key_covers_group(&k, "anything"));
    /* The table of DESIGN section 13, one role at a time. */
    assert_true(mic_perm_allows(MIC_PERM_PUBLISH, MIC_ROLE_PRODUCER));
    assert_false(mic_perm_allows(MIC_PERM_PUBLISH, MIC_ROLE_CONSUMER));
    assert_false(mic_perm_allows(MIC_PERM_CONSUME, MIC_ROLE_MONITOR));
    assert_true(mic_perm_allows(MIC_PERM_TOPICS, MIC_ROLE_PRODUCER));
    assert_false(mic_perm_allows(MIC_PERM_ADMIN, MIC_ROLE_MONITOR));
    assert_false(mic_perm_allows(MIC_PERM_UNSET, MIC_ROLE_ADMIN));
}

static void new_secret(void **state)
{
    char a[48], b[48], ha[65], hb[65], want[65];

    (void)state;
    assert_int_equal(mic_keys_new_secret(a, ha), MIC_OK);
    assert_int_equal(mic_keys_new_secret(b, hb), MIC_OK);
    assert_int_equal(strlen(a), 47);
    assert_int_equal(strncmp(a, "mic_", 4), 0);
    for (int i = 4; i < 47; i++)
        assert_true(strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", a[i]));
    assert_string_not_equal(a, b);
    sha_hex(a, want);
    assert_string_equal(ha, want);
}

int main(void)
{
    const struct CMUnitTest unit[] = {
        cmocka_unit_test(keys_file_lines),
        cmocka_unit_test(globs_and_scopes),
        cmocka_unit_test(new_secret),
        cmocka_unit_test(route_table_has_permissions),
    };
    const struct CMUnitTest served[] = {
        cmocka_unit_test(matrix),
        cmocka_unit_test(listings_are_narrowed),
        cmocka_unit_test(whoami),
        cmocka_unit_test(refusals_counted),
        cmocka_unit_test(audit_log),
        cmocka_unit_test(reload),
        cmocka_unit_test(cli_keys),
    };
    const struct CMUnitTest alone[] = {
        cmocka_unit_test(refusals),
        cmocka_unit_test(tls),
    };
    int failed = cmocka_run_group_tests(unit, NULL, NULL);

    failed += cmocka_run_group_tests(served, group_setup, group_teardown);
    failed += cmocka_run_group_tests(alone, NULL, NULL);
    return failed;
}
