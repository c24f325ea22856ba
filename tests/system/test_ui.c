/* test_ui.c - the admin page (GET /ui, issue 18) in a real headless
 * Chromium (Debian's chromium, driven over the DevTools protocol by
 * puppeteer-core: tests/ui/drive.mjs), against a real micd with keys.
 *
 * micd runs with an admin key and a monitor key; the test sets up a topic,
 * an unordered group "billing" (max_attempts 1) holding one dispatched,
 * one claimed, one dead-lettered and one pending delivery, and an ordered
 * group "shipping" whose aggregate Order/A is blocked behind a leased
 * head.  Then, in the browser:
 *   - the page's files are served without a key, with a CSP and an ETag;
 *   - a monitor key sees every group's figures, equal to /v1/stats's, the
 *     blocked aggregate and the DLQ, and no requeue or skip button;
 *   - an admin key presses Requeue in the page: through the API, billing's
 *     DLQ is then empty and its pending count one more; a screenshot is
 *     saved (build/ui-admin.png);
 *   - the admin key is demoted to monitor (keys file + SIGHUP) while its
 *     page is open: pressing Requeue is refused by micd and the page shows
 *     micd's error message, and nothing changes.
 * Each run must have no console error, no failed request and no HTTP
 * error besides the one refusal.  drive.mjs's waits are puppeteer's
 * waitForSelector / waitForFunction (30 s each), never sleeps.
 *
 * Needs `make ui-deps` (chromium, node, tests/ui/node_modules); without
 * them the test fails and says so.  MIC_CHROMIUM overrides the browser's
 * path (default /usr/bin/chromium). */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <jansson.h>
#include <openssl/sha.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define ADMIN_SECRET "ui-test-admin-secret-5d1f0c"
#define MON_SECRET "ui-test-monitor-secret-91ab3e"
#define ADMIN_HDR "Authorization: Bearer " ADMIN_SECRET
#define MON_HDR "Authorization: Bearer " MON_SECRET

static struct srv S;
static char keys_path[300], chromium[300];

/* ---- Fixtures ---- */

static void sha_hex(const char *secret, char out[65])
{
    unsigned char h[SHA256_DIGEST_LENGTH];

    SHA256((const unsigned char *)secret, strlen(secret), h);
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", h[i]);
}

/* The keys file: ui-admin with 'admin_role', ui-mon a monitor. */
static int write_keys(const char *admin_role)
{
    char a[65], m[65];
    FILE *f = fopen(keys_path, "w");

    if (!f)
        return -1;
    sha_hex(ADMIN_SECRET, a);
    sha_hex(MON_SECRET, m);
    fprintf(f, "ui-admin %s %s *\nui-mon monitor %s *\n", admin_role, a, m);
    return fclose(f);
}

/* A request as the admin key; asserts the status; the parsed body
 * (json_decref it; NULL if none). */
static json_t *req(const char *method, const char *path, const char *body, long want)
{
    struct resp r;
    json_t *j;

    assert_int_equal(http(&S, method, path, body ? "application/json" : NULL, body,
                          body ? strlen(body) : 0, ADMIN_HDR, &r),
                     0);
    if (r.status != want)
        fail_msg("%s %s: %ld, want %ld: %s", method, path, r.status, want, r.body);
    j = r.json ? json_incref(r.json) : NULL;
    resp_free(&r);
    return j;
}

/* Claim one delivery of 'group' (lease 600 s, so it stays leased for the
 * whole test) and settle it with 'verb' ("ack", "nack") or leave it
 * leased (NULL).  Returns its seq. */
static json_int_t claim_one(const char *group, const char *verb)
{
    char path[128], body[256];
    json_t *c, *d;
    json_int_t seq;

    snprintf(path, sizeof path, "/v1/groups/%s/claim", group);
    c = req("POST", path, "{\"max\":1,\"lease_ttl_s\":600,\"worker\":\"worker-7\"}", 200);
    d = json_array_get(json_object_get(c, "deliveries"), 0);
    assert_non_null(d);
    seq = json_integer_value(json_object_get(d, "seq"));
    if (verb) {
        json_t *r;

        snprintf(path, sizeof path, "/v1/groups/%s/%s", group, verb);
        snprintf(body, sizeof body,
                 "{\"deliveries\":[{\"seq\":%lld,\"lease_token\":\"%s\"}]%s}", (long long)seq,
                 json_string_value(json_object_get(d, "lease_token")),
                 strcmp(verb, "nack") ? "" : ",\"error\":\"payment service answered 503\"");
        r = req("POST", path, body, 200);
        assert_string_equal(json_string_value(json_object_get(
                                json_array_get(json_object_get(r, "results"), 0), "status")),
                            strcmp(verb, "nack") ? "acked" : "dead_lettered");
        json_decref(r);
    }
    json_decref(c);
    return seq;
}

/* Figure 'field' of group 'group' in GET /v1/stats. */
static json_int_t figure(const char *group, const char *field)
{
    json_t *st = req("GET", "/v1/stats", NULL, 200), *g;
    json_int_t v = -1;
    size_t i;

    json_array_foreach(json_object_get(st, "groups"), i, g)
        if (!strcmp(json_string_value(json_object_get(g, "group")), group))
            v = json_integer_value(json_object_get(g, field));
    json_decref(st);
    assert_true(v >= 0);
    return v;
}

static int group_setup(void **state)
{
    const char *args[] = {"--keys", keys_path, NULL};
    struct stat st;
    json_t *j;

    (void)state;
    snprintf(chromium, sizeof chromium, "%s",
             getenv("MIC_CHROMIUM") ? getenv("MIC_CHROMIUM") : "/usr/bin/chromium");
    if (access(chromium, X_OK) || system("command -v node > /dev/null") ||
        stat("tests/ui/node_modules/puppeteer-core/package.json", &st)) {
        fprintf(stderr, "test_ui: needs %s, node and tests/ui/node_modules (make ui-deps)\n",
                chromium);
        return -1;
    }
    snprintf(keys_path, sizeof keys_path, "/tmp/mic-ui-keys-%d", (int)getpid());
    if (write_keys("admin") || srv_start_shared(&S, args))
        return -1;
    j = req("PUT", "/v1/topics/orders", "{}", 201);
    json_decref(j);
    j = req("PUT", "/v1/groups/billing", "{\"topics\":[\"orders\"],\"max_attempts\":1}", 201);
    json_decref(j);
    j = req("PUT", "/v1/groups/shipping", "{\"topics\":[\"orders\"],\"ordered\":true}", 201);
    json_decref(j);
    j = req("POST", "/v1/events",
            "{\"events\":["
            "{\"topic\":\"orders\",\"event_id\":\"order-1-created\",\"event_type\":\"OrderCreated\","
            "\"aggregate_type\":\"Order\",\"aggregate_id\":\"A\",\"aggregate_version\":1,\"payload\":{\"n\":1}},"
            "{\"topic\":\"orders\",\"event_id\":\"order-1-paid\",\"event_type\":\"OrderPaid\","
            "\"aggregate_type\":\"Order\",\"aggregate_id\":\"A\",\"aggregate_version\":2,\"payload\":{\"n\":2}},"
            "{\"topic\":\"orders\",\"event_id\":\"order-2-created\",\"event_type\":\"OrderCreated\","
            "\"aggregate_type\":\"Order\",\"aggregate_id\":\"B\",\"aggregate_version\":1,\"payload\":{\"n\":3}},"
            "{\"topic\":\"orders\",\"event_id\":\"audit-1\",\"payload\":{\"n\":4}}]}",
            201);
    json_decref(j);
    /* billing: seq 1 dispatched, seq 2 dead-lettered, seq 3 leased, seq 4
     * pending; shipping: Order/A's head (seq 1) leased, seq 2 behind it. */
    assert_int_equal(claim_one("billing", "ack"), 1);
    assert_int_equal(claim_one("billing", "nack"), 2);
    assert_int_equal(claim_one("billing", NULL), 3);
    assert_int_equal(claim_one("shipping", NULL), 1);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    unlink(keys_path);
    return srv_stop_shared(&S);
}

/* ---- The driver ---- */

/* Run drive.mjs with 'key', 'mode' and 'groups'; 'on_ready' (may be NULL)
 * runs when the driver prints {"ready":true}, and must create 'gofile'.
 * Returns the driver's report (json_decref it). */
static json_t *drive(const char *key, const char *mode, const char *groups, const char *shot,
                     const char *gofile, void (*on_ready)(void))
{
    char cmd[1200], *line = NULL;
    size_t cap = 0;
    json_t *report = NULL;
    FILE *p;

    snprintf(cmd, sizeof cmd,
             "exec node tests/ui/drive.mjs '%s' '%s' '%s' '%s' '%s' '%s' '%s' 2>> build/test_ui-drive.log",
             S.url, key, chromium, shot ? shot : "-", mode, groups, gofile ? gofile : "");
    p = popen(cmd, "r");
    assert_non_null(p);
    while (getline(&line, &cap, p) > 0) {
        json_t *j = json_loads(line, 0, NULL);

        if (!j)
            fail_msg("drive.mjs wrote a line that is not JSON: %s", line);
        if (json_is_true(json_object_get(j, "ready"))) {
            json_decref(j);
            assert_non_null(on_ready);
            on_ready();
            continue;
        }
        json_decref(report);
        report = j;
    }
    free(line);
    assert_int_equal(pclose(p), 0);
    assert_non_null(report);
    if (!json_is_true(json_object_get(report, "ok"))) {
        char *s = json_dumps(report, JSON_COMPACT);
        fail_msg("drive.mjs (%s) failed: %s", mode, s);
    }
    return report;
}

/* No console error, failed request or HTTP error in the report, except in
 * phase 'allowed_phase' (may be NULL): there only HTTP status 'allowed'
 * (the browser logs a failed fetch as a console error too). */
static void clean_run(json_t *rep, const char *allowed_phase, int allowed)
{
    json_t *e;
    size_t i;
    char want[64];

    snprintf(want, sizeof want, "status of %d", allowed);
    json_array_foreach(json_object_get(rep, "console"), i, e) {
        const char *ph = json_string_value(json_object_get(e, "phase"));
        const char *text = json_string_value(json_object_get(e, "text"));

        if (!allowed_phase || strcmp(ph, allowed_phase) || !strstr(text, want))
            fail_msg("console %s in phase %s: %s", json_string_value(json_object_get(e, "type")),
                     ph, text);
    }
    assert_int_equal(json_array_size(json_object_get(rep, "failed")), 0);
    json_array_foreach(json_object_get(rep, "http_errors"), i, e) {
        const char *ph = json_string_value(json_object_get(e, "phase"));

        if (!allowed_phase || strcmp(ph, allowed_phase) ||
            json_integer_value(json_object_get(e, "status")) != allowed)
            fail_msg("HTTP %lld in phase %s: %s",
                     (long long)json_integer_value(json_object_get(e, "status")), ph,
                     json_string_value(json_object_get(e, "url")));
    }
}

/* Every group's figures in the page equal GET /v1/stats's. */
static void figures_match_stats(json_t *rep)
{
    static const char *const groups[] = {"billing", "shipping"};
    static const struct { const char *page, *stats; } fields[] = {
        {"pending", "pending"}, {"processing", "processing"}, {"dlq", "dlq"},
        {"dispatched", "dispatched"}, {"blocked", "blocked_aggregates"},
    };

    for (size_t g = 0; g < 2; g++) {
        json_t *shown = json_object_get(json_object_get(rep, "groups"), groups[g]);

        assert_non_null(shown);
        for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++)
            if (json_integer_value(json_object_get(shown, fields[f].page)) !=
                figure(groups[g], fields[f].stats))
                fail_msg("%s %s: page %lld, /v1/stats %lld", groups[g], fields[f].page,
                         (long long)json_integer_value(json_object_get(shown, fields[f].page)),
                         (long long)figure(groups[g], fields[f].stats));
    }
}

static json_t *detail_of(json_t *rep, const char *group)
{
    json_t *d = json_object_get(json_object_get(rep, "detail"), group);

    assert_non_null(d);
    return d;
}

/* ---- Tests ---- */

/* The page's files: no key needed, the right types, a CSP that forbids
 * anything off-origin, an ETag that makes a 304. */
static void files_are_open(void **state)
{
    static const struct { const char *path, *type, *needle; } files[] = {
        {"/ui", "text/html", "<script src=\"/ui/app.js\""},
        {"/ui/", "text/html", "<link rel=\"stylesheet\" href=\"/ui/app.css\">"},
        {"/ui/app.js", "text/javascript", "/v1/whoami"},
        {"/ui/app.css", "text/css", "#groups"},
    };
    char cmd[512], *head;
    FILE *p;

    (void)state;
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        struct resp r;
        char etag[64] = "", line[512], *e;
        size_t n;

        assert_int_equal(http(&S, "GET", files[i].path, NULL, NULL, 0, NULL, &r), 0);
        assert_int_equal(r.status, 200);
        assert_non_null(strstr(r.body, files[i].needle));
        resp_free(&r);
        /* The headers, through curl (the harness keeps only the body). */
        snprintf(cmd, sizeof cmd, "curl -sS -D - -o /dev/null '%s%s'", S.url, files[i].path);
        assert_non_null(p = popen(cmd, "r"));
        head = calloc(1, 8192);
        n = fread(head, 1, 8191, p);
        assert_int_equal(pclose(p), 0);
        head[n] = 0;
        assert_non_null(strstr(head, "HTTP/1.1 200"));
        snprintf(line, sizeof line, "Content-Type: %s; charset=utf-8", files[i].type);
        assert_non_null(strstr(head, line));
        assert_non_null(strstr(head, "Content-Security-Policy: default-src 'none'; script-src "
                                     "'self'; style-src 'self';"));
        assert_non_null(strstr(head, "connect-src 'self'"));
        assert_non_null(strstr(head, "Cache-Control: no-cache"));
        assert_non_null(strstr(head, "X-Content-Type-Options: nosniff"));
        assert_null(strstr(head, "Set-Cookie"));
        assert_non_null(e = strstr(head, "ETag: \""));
        sscanf(e + 6, "%63[^\r\n]", etag);
        free(head);
        snprintf(line, sizeof line, "If-None-Match: %s", etag);
        assert_int_equal(http(&S, "GET", files[i].path, NULL, NULL, 0, line, &r), 0);
        assert_int_equal(r.status, 304);
        assert_int_equal(r.len, 0);
        resp_free(&r);
    }
    /* Not a file of the page: 404, as any unknown path with keys is 401. */
    {
        struct resp r;

        assert_int_equal(http(&S, "GET", "/ui/other.js", NULL, NULL, 0, NULL, &r), 0);
        assert_int_equal(r.status, 401);
        resp_free(&r);
    }
}

/* A monitor key: every figure, read-only. */
static void monitor_sees_read_only(void **state)
{
    json_t *rep, *b, *s;

    (void)state;
    rep = drive(MON_SECRET, "monitor", "billing,shipping", NULL, NULL, NULL);
    clean_run(rep, NULL, 0);
    assert_string_equal(json_string_value(json_object_get(rep, "role")), "monitor");
    assert_non_null(strstr(json_string_value(json_object_get(rep, "who")), "ui-mon"));
    figures_match_stats(rep);
    b = detail_of(rep, "billing");
    /* billing's dead-lettered seq 2 is listed, without any button. */
    assert_int_equal(json_array_size(json_object_get(b, "dlq_rows")), 1);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(b, "dlq_rows"), 0)), 2);
    assert_int_equal(json_integer_value(json_object_get(b, "requeue_buttons")), 0);
    assert_int_equal(json_integer_value(json_object_get(b, "skip_buttons")), 0);
    assert_true(json_integer_value(json_object_get(b, "chart_paths")) >= 1);
    /* shipping's blocked aggregate, by reason. */
    s = detail_of(rep, "shipping");
    assert_non_null(strstr(json_string_value(json_object_get(s, "blocked")), "lease: 1"));
    assert_int_equal(json_array_size(json_object_get(s, "blocked_rows")), 1);
    assert_non_null(strstr(json_string_value(json_array_get(json_object_get(s, "blocked_rows"), 0)),
                           "Order/A"));
    /* The oldest unhandled event and why it waits. */
    assert_non_null(strstr(json_string_value(json_object_get(
                               json_object_get(json_object_get(rep, "groups"), "shipping"), "why")),
                           "leased by worker-7"));
    assert_non_null(strstr(json_string_value(json_object_get(
                               json_object_get(json_object_get(rep, "groups"), "shipping"), "event")),
                           "order-1-created"));
    json_decref(rep);
}

/* An admin key presses Requeue: the delivery is pending again. */
static void admin_requeues_in_the_page(void **state)
{
    json_int_t pending = figure("billing", "pending");
    json_t *rep, *ev, *d;
    unsigned char sig[8];
    struct stat st;
    size_t i;
    FILE *f;

    (void)state;
    assert_int_equal(figure("billing", "dlq"), 1);
    unlink("build/ui-admin.png");
    rep = drive(ADMIN_SECRET, "admin", "billing,shipping", "build/ui-admin.png", NULL, NULL);
    clean_run(rep, NULL, 0);
    assert_string_equal(json_string_value(json_object_get(rep, "role")), "admin");
    assert_int_equal(json_integer_value(json_object_get(detail_of(rep, "billing"), "requeue_buttons")), 1);
    assert_non_null(strstr(json_string_value(json_object_get(rep, "notice")), "seq 2 requeued"));
    /* Through the API: out of the DLQ, pending again. */
    assert_int_equal(figure("billing", "dlq"), 0);
    assert_int_equal(figure("billing", "pending"), pending + 1);
    ev = req("GET", "/v1/events/order-1-paid", NULL, 200);
    json_array_foreach(json_object_get(ev, "deliveries"), i, d)
        if (!strcmp(json_string_value(json_object_get(d, "group")), "billing"))
            assert_string_equal(json_string_value(json_object_get(d, "state")), "pending");
    json_decref(ev);
    /* The page showed the new figures too. */
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(json_object_get(rep, "after"), "billing"), "dlq")),
                     0);
    /* The screenshot: a PNG of a real page (tens of KiB). */
    assert_int_equal(stat("build/ui-admin.png", &st), 0);
    assert_true(st.st_size > 20000);
    assert_non_null(f = fopen("build/ui-admin.png", "rb"));
    assert_int_equal(fread(sig, 1, 8, f), 8);
    fclose(f);
    assert_memory_equal(sig, "\x89PNG\r\n\x1a\n", 8);
    json_decref(rep);
}

static char gofile[300];

/* While the admin's page is open: demote its key to monitor (keys file and
 * SIGHUP), wait until micd says so, then let the driver press Requeue. */
static void demote_admin(void)
{
    int64_t end;
    FILE *f;

    assert_int_equal(write_keys("monitor"), 0);
    assert_int_equal(kill(S.pid, SIGHUP), 0);
    for (end = (int64_t)time(NULL) + 30;; ) {
        json_t *me = req("GET", "/v1/whoami", NULL, 200);
        int done = !strcmp(json_string_value(json_object_get(me, "role")), "monitor");
        struct timespec ts = {0, 20 * 1000000};

        json_decref(me);
        if (done)
            break;
        assert_true((int64_t)time(NULL) < end);
        nanosleep(&ts, NULL); /* polling the reload, bounded */
    }
    assert_non_null(f = fopen(gofile, "w"));
    fclose(f);
}

/* A refused action: the page shows micd's error message, nothing changes. */
static void refusal_shows_the_server_message(void **state)
{
    json_int_t dlq, pending;
    json_t *rep;
    const char *msg;

    (void)state;
    /* billing's seq 2 goes back to the DLQ (it was requeued above). */
    assert_int_equal(claim_one("billing", "nack"), 2);
    dlq = figure("billing", "dlq");
    pending = figure("billing", "pending");
    assert_int_equal(dlq, 1);
    snprintf(gofile, sizeof gofile, "/tmp/mic-ui-go-%d", (int)getpid());
    unlink(gofile);
    rep = drive(ADMIN_SECRET, "refuse", "billing", NULL, gofile, demote_admin);
    unlink(gofile);
    clean_run(rep, "refuse", 403);
    assert_int_equal(json_array_size(json_object_get(rep, "http_errors")), 1);
    msg = json_string_value(json_object_get(rep, "error"));
    assert_non_null(msg);
    /* micd's own message, as it answered it. */
    assert_non_null(strstr(msg, "key ui-admin (monitor) may not POST "
                                "/v1/groups/{group}/dlq/requeue"));
    assert_non_null(strstr(msg, "403 forbidden"));
    /* The page asked again who it is, and dropped the buttons. */
    assert_string_equal(json_string_value(json_object_get(rep, "role_after")), "monitor");
    assert_int_equal(figure("billing", "dlq"), dlq);
    assert_int_equal(figure("billing", "pending"), pending);
    json_decref(rep);
    assert_int_equal(write_keys("admin"), 0); /* as it was */
    assert_int_equal(kill(S.pid, SIGHUP), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(files_are_open),
        cmocka_unit_test(monitor_sees_read_only),
        cmocka_unit_test(admin_requeues_in_the_page),
        cmocka_unit_test(refusal_shows_the_server_message),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
