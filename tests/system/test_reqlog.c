/* test_reqlog.c - micd's request log lines and its 405 answers, against a
 * real micd (the harness) whose stderr is the file s->logpath.
 *
 * Every answered request writes one JSON line (server/http/routes.c,
 * log_request): "msg":"request" at info, "request failed" at warn for a
 * 5xx, with "req" (the request id), "method", "path", "status", "us",
 * "code" for an error and "key" when micd has keys.  The tests send their
 * own X-Request-Id, wait (bounded) for the line that carries it, and
 * check each field.  A 405 carries Allow with the path's methods.
 *
 * Requests go over a plain socket to 127.0.0.1 (the harness's http() takes
 * one extra header line; these need Authorization and X-Request-Id, and
 * the answer's Allow header). */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "harness.h"
#include "claimkit.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/sha.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define IO_MS 10000            /* longest one request may take */
#define LOG_MS 10000           /* longest a log line may take to appear */

static struct srv open_srv;    /* without --keys */
static struct srv keyed;       /* with --keys */
static char keys_path[320];

#define ADMIN_SECRET "reqlog-secret-admin"
#define CONSUMER_SECRET "reqlog-secret-consumer"

/* ---- Raw HTTP ---- */

struct answer {
    int status;
    char head[4096];           /* the status line and headers */
    char body[4096];
};

/* One request on a new connection (Connection: close), read to EOF. */
static void request(const struct srv *s, const char *method, const char *path,
                    const char *headers, const char *body, struct answer *a)
{
    struct sockaddr_in sa;
    char req[2048], buf[8192];
    size_t got = 0, blen = body ? strlen(body) : 0;
    int fd = socket(AF_INET, SOCK_STREAM, 0), n;
    struct timespec t0, t1;
    char *sep;

    memset(a, 0, sizeof *a);
    assert_true(fd >= 0);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)s->port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    n = snprintf(req, sizeof req,
                 "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s"
                 "%sContent-Length: %zu\r\n\r\n%s",
                 method, path, headers ? headers : "",
                 body ? "Content-Type: application/json\r\n" : "", blen, body ? body : "");
    assert_true(n > 0 && (size_t)n < sizeof req);
    assert_int_equal(send(fd, req, (size_t)n, MSG_NOSIGNAL), n);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        ssize_t r;

        clock_gettime(CLOCK_MONOTONIC, &t1);
        if ((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 > IO_MS)
            fail_msg("%s %s: no whole answer within %d ms", method, path, IO_MS);
        if (poll(&p, 1, 100) <= 0)
            continue;
        r = recv(fd, buf + got, sizeof buf - 1 - got, 0);
        assert_true(r >= 0);
        if (r == 0)
            break;
        got += (size_t)r;
        assert_true(got < sizeof buf - 1);
    }
    close(fd);
    buf[got] = 0;
    assert_non_null(sep = strstr(buf, "\r\n\r\n"));
    assert_true((size_t)(sep - buf) < sizeof a->head);
    memcpy(a->head, buf, (size_t)(sep - buf));
    snprintf(a->body, sizeof a->body, "%s", sep + 4);
    assert_int_equal(sscanf(buf, "HTTP/1.1 %d", &a->status), 1);
}

/* The value of header 'name' in a->head (case-insensitive), or NULL. */
static const char *header(const struct answer *a, const char *name, char *out, size_t cap)
{
    const char *p = a->head;
    size_t n = strlen(name);

    while ((p = strstr(p, "\r\n"))) {
        p += 2;
        if (!strncasecmp(p, name, n) && p[n] == ':') {
            const char *v = p + n + 1, *e;

            while (*v == ' ')
                v++;
            e = v + strcspn(v, "\r\n");
            snprintf(out, cap, "%.*s", (int)(e - v), v);
            return out;
        }
    }
    return NULL;
}

/* ---- The log ---- */

struct find {
    const struct srv *s;
    const char *rid;
    json_t *line;              /* the request line found (new reference) */
};

/* The log line with "req" == rid and a "msg" of a request's line. */
static int line_found(void *arg)
{
    struct find *f = arg;
    char *log = file_read(f->s->logpath), *p, *nl;

    if (!log)
        return 0;
    for (p = log; !f->line && *p; p = nl + 1) {
        json_t *j;
        const char *msg;

        nl = p + strcspn(p, "\n");
        if (!*nl)
            break; /* a line still being written */
        j = json_loadb(p, (size_t)(nl - p), 0, NULL);
        msg = json_string_value(json_object_get(j, "msg"));
        if (j && msg && (!strcmp(msg, "request") || !strcmp(msg, "request failed")) &&
            !strcmp(jstr(j, "req") ? jstr(j, "req") : "", f->rid))
            f->line = json_incref(j);
        json_decref(j);
    }
    free(log);
    return f->line != NULL;
}

/* Wait for the line of request 'rid' on 's' (a new reference). */
static json_t *log_line(const struct srv *s, const char *rid)
{
    struct find f = {s, rid, NULL};

    if (!await(line_found, &f, LOG_MS))
        fail_msg("no request line with req %s in %s within %d ms", rid, s->logpath, LOG_MS);
    return f.line;
}

/* Check the fields every request line has, and that 'key' and 'code'
 * are as given (NULL: absent). */
static void expect_line(json_t *j, const char *level, const char *method, const char *path,
                        int status, const char *code, const char *key)
{
    char st[8];
    const char *us = jstr(j, "us");
    char *end;

    snprintf(st, sizeof st, "%d", status);
    assert_string_equal(jstr(j, "level"), level);
    assert_string_equal(jstr(j, "method"), method);
    assert_string_equal(jstr(j, "path"), path);
    assert_string_equal(jstr(j, "status"), st);
    assert_non_null(us);
    assert_true(strtoll(us, &end, 10) >= 0 && *us && !*end);
    assert_non_null(jstr(j, "ts"));
    if (code)
        assert_string_equal(jstr(j, "code"), code);
    else
        assert_null(json_object_get(j, "code"));
    if (key)
        assert_string_equal(jstr(j, "key"), key);
    else
        assert_null(json_object_get(j, "key"));
}

/* ---- Setup ---- */

static void sha_hex(const char *secret, char out[65])
{
    unsigned char h[SHA256_DIGEST_LENGTH];

    SHA256((const unsigned char *)secret, strlen(secret), h);
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", h[i]);
}

static int group_setup(void **state)
{
    const char *const args[] = {"--keys", keys_path, NULL};
    char a[65], c[65];
    FILE *f;

    (void)state;
    snprintf(keys_path, sizeof keys_path, "/tmp/mic-reqlog-keys-%d", (int)getpid());
    sha_hex(ADMIN_SECRET, a);
    sha_hex(CONSUMER_SECRET, c);
    if (!(f = fopen(keys_path, "w")))
        return -1;
    fprintf(f, "ops-1 admin %s *\nworker-1 consumer %s group:g-*\n", a, c);
    fclose(f);
    memset(&open_srv, 0, sizeof open_srv);
    memset(&keyed, 0, sizeof keyed);
    if (srv_start_shared(&open_srv, NULL))
        return -1;
    return srv_start(&keyed, args);
}

static int group_teardown(void **state)
{
    int rc = 0;

    (void)state;
    if (srv_stop(&keyed))
        rc = -1;
    srv_cleanup(&keyed);
    if (srv_stop_shared(&open_srv))
        rc = -1;
    unlink(keys_path);
    return rc;
}

/* ---- Tests ---- */

/* Without keys: a 201 and a 422 each have their line, without "key";
 * the error's has its code. */
static void lines_without_keys(void **state)
{
    struct answer a;
    json_t *j;

    (void)state;
    request(&open_srv, "POST", "/v1/events", "X-Request-Id: rl-open-201\r\n",
            "{\"topic\":\"rl.t\",\"event_id\":\"rl-1\"}", &a);
    assert_int_equal(a.status, 201);
    j = log_line(&open_srv, "rl-open-201");
    expect_line(j, "info", "POST", "/v1/events", 201, NULL, NULL);
    assert_string_equal(jstr(j, "msg"), "request");
    json_decref(j);

    request(&open_srv, "PUT", "/v1/groups/rl.g", "X-Request-Id: rl-open-422\r\n",
            "{\"topics\":[\"rl.t\"],\"max_attempts\":0}", &a);
    assert_int_equal(a.status, 422);
    j = log_line(&open_srv, "rl-open-422");
    expect_line(j, "info", "PUT", "/v1/groups/rl.g", 422, "invalid_request", NULL);
    json_decref(j);

    request(&open_srv, "GET", "/v1/no/such/route", "X-Request-Id: rl-open-404\r\n", NULL, &a);
    assert_int_equal(a.status, 404);
    j = log_line(&open_srv, "rl-open-404");
    expect_line(j, "info", "GET", "/v1/no/such/route", 404, "not_found", NULL);
    json_decref(j);
}

/* Answers built outside the JSON path have their line too: a range read
 * streamed as NDJSON and a file of the admin page (queue_reply in
 * routes.c). */
static void streamed_and_page_lines(void **state)
{
    struct answer a;
    json_t *j;

    (void)state;
    request(&open_srv, "GET", "/v1/topics/rl.t/events",
            "X-Request-Id: rl-open-ndjson\r\nAccept: application/x-ndjson\r\n", NULL, &a);
    assert_int_equal(a.status, 200);
    j = log_line(&open_srv, "rl-open-ndjson");
    expect_line(j, "info", "GET", "/v1/topics/rl.t/events", 200, NULL, NULL);
    json_decref(j);

    request(&open_srv, "GET", "/ui", "X-Request-Id: rl-open-ui\r\n", NULL, &a);
    assert_int_equal(a.status, 200);
    j = log_line(&open_srv, "rl-open-ui");
    expect_line(j, "info", "GET", "/ui", 200, NULL, NULL);
    json_decref(j);
}

/* With keys: the key's id on a 201 and on a 422; "-" on a 401 (no key
 * known); the refused key's id on a 403. */
static void lines_with_keys(void **state)
{
    struct answer a;
    json_t *j;

    (void)state;
    request(&keyed, "PUT", "/v1/topics/rl.k",
            "Authorization: Bearer " ADMIN_SECRET "\r\nX-Request-Id: rl-key-201\r\n",
            "{\"retention_s\":60}", &a);
    assert_int_equal(a.status, 201);
    j = log_line(&keyed, "rl-key-201");
    expect_line(j, "info", "PUT", "/v1/topics/rl.k", 201, NULL, "ops-1");
    json_decref(j);

    request(&keyed, "POST", "/v1/events",
            "Authorization: Bearer " ADMIN_SECRET "\r\nX-Request-Id: rl-key-422\r\n",
            "{\"topic\":\"rl.k\",\"priority\":300}", &a);
    assert_int_equal(a.status, 422);
    j = log_line(&keyed, "rl-key-422");
    expect_line(j, "info", "POST", "/v1/events", 422, "invalid_event", "ops-1");
    json_decref(j);

    request(&keyed, "GET", "/v1/topics", "X-Request-Id: rl-key-401\r\n", NULL, &a);
    assert_int_equal(a.status, 401);
    j = log_line(&keyed, "rl-key-401");
    expect_line(j, "info", "GET", "/v1/topics", 401, "unauthorized", "-");
    json_decref(j);

    request(&keyed, "DELETE", "/v1/topics/rl.k",
            "Authorization: Bearer " CONSUMER_SECRET "\r\nX-Request-Id: rl-key-403\r\n", NULL,
            &a);
    assert_int_equal(a.status, 403);
    j = log_line(&keyed, "rl-key-403");
    expect_line(j, "info", "DELETE", "/v1/topics/rl.k", 403, "forbidden", "worker-1");
    json_decref(j);

    /* Nothing secret in the log: the secrets never appear. */
    {
        char *log = file_read(keyed.logpath);

        assert_non_null(log);
        assert_null(strstr(log, ADMIN_SECRET));
        assert_null(strstr(log, CONSUMER_SECRET));
        free(log);
    }
}

/* A 405 names the path's methods in Allow and in its message, is logged
 * with method_not_allowed, and changes nothing. */
static void method_not_allowed(void **state)
{
    static const struct {
        const char *method, *path, *allow;
    } cases[] = {
        {"POST", "/v1/groups/rl.g405", "GET, PUT, DELETE"},
        {"PATCH", "/v1/topics/rl.t", "GET, PUT, DELETE"},
        {"GET", "/v1/groups/rl.g405/claim", "POST"},
        {"DELETE", "/v1/events", "POST"},
        {"PUT", "/v1/replays", "POST, GET"},
        {"POST", "/v1/stats", "GET"},
    };
    char v[128], rid[32];
    struct answer a;
    json_t *j, *body;

    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char hdr[64];

        snprintf(rid, sizeof rid, "rl-405-%zu", i);
        snprintf(hdr, sizeof hdr, "X-Request-Id: %s\r\n", rid);
        request(&open_srv, cases[i].method, cases[i].path, hdr,
                strcmp(cases[i].method, "POST") && strcmp(cases[i].method, "PUT") &&
                        strcmp(cases[i].method, "PATCH") ? NULL : "{\"topics\":[\"x\"]}",
                &a);
        if (a.status != 405)
            fprintf(stderr, "%s %s: %d %s\n", cases[i].method, cases[i].path, a.status, a.body);
        assert_int_equal(a.status, 405);
        assert_non_null(header(&a, "Allow", v, sizeof v));
        assert_string_equal(v, cases[i].allow);
        assert_non_null(header(&a, "Content-Type", v, sizeof v));
        assert_string_equal(v, "application/json");
        assert_non_null(body = json_loads(a.body, 0, NULL));
        assert_string_equal(jstr(json_object_get(body, "error"), "code"), "method_not_allowed");
        assert_non_null(strstr(jstr(json_object_get(body, "error"), "message"), cases[i].allow));
        json_decref(body);
        j = log_line(&open_srv, rid);
        expect_line(j, "info", cases[i].method, cases[i].path, 405, "method_not_allowed", NULL);
        json_decref(j);
    }
    /* The POST on a group's path made no group; an unknown path is a 404
     * without Allow. */
    json_decref(call(&open_srv, "GET", "/v1/groups/rl.g405", NULL, 404));
    request(&open_srv, "POST", "/v1/nothing/here", NULL, NULL, &a);
    assert_int_equal(a.status, 404);
    assert_null(header(&a, "Allow", v, sizeof v));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lines_without_keys),
        cmocka_unit_test(streamed_and_page_lines),
        cmocka_unit_test(lines_with_keys),
        cmocka_unit_test(method_not_allowed),
    };

    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
