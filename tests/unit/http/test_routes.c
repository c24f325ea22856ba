/* test_routes.c - the route table and the replies (server/http/routes.[ch]):
 * every enum mic_err value's HTTP status (mic_err_http_status, DESIGN
 * section 4's table), the table's own consistency (mic_http_route: each
 * route's scope names the path segment it checks), which addresses count
 * as loopback; then, with the server started in-process on an ephemeral
 * port of 127.0.0.1 over a procfx (tests/kit/procfx.h) and spoken to in
 * plain HTTP/1.1: path matching (captured segments, no empty ones, no
 * extra ones), a known path with another method (405 and its Allow
 * header), bodies past --max-body (413, by length or as they arrive),
 * Content-Type (415) and malformed JSON (400), each in the error shape of
 * DESIGN section 4 with an X-Request-Id.
 *
 * Who may call what (roles, scopes, every route x key) is
 * tests/system/test_auth.c's. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/err.h"
#include "core/logger.h"
#include "http/routes.h"
#include "procfx.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/* ---- Errors to statuses ---- */

/* Every value of enum mic_err, with its status: a value added to err.h
 * and not here fails below (its mic_strerror is not "unknown error"). */
static const struct {
    int err;
    unsigned status;
} statuses[] = {
    {MIC_OK, 200},          {MIC_ENOMEM, 500},    {MIC_EINVAL, 422},    {MIC_ENOTFOUND, 404},
    {MIC_ECONFLICT, 409},   {MIC_ENOSPC, 507},    {MIC_EIO, 500},       {MIC_EPARSE, 400},
    {MIC_ETOOBIG, 413},     {MIC_EMEDIA, 415},    {MIC_EBUSY, 429},     {MIC_ENOTREADY, 503},
    {MIC_EMETHOD, 405},     {MIC_EVERSION, 500},  {MIC_EAUTH, 401},     {MIC_EFORBIDDEN, 403},
    {MIC_ECORRUPT, 500},
    {MIC_ELMDB, 500}, /* at start only (exit 2): never an answer */
};

static void every_error_has_its_status(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof statuses / sizeof statuses[0]; i++)
        if (mic_err_http_status(statuses[i].err) != statuses[i].status)
            fail_msg("%s (%d): status %u, DESIGN section 4 says %u",
                     mic_strerror(statuses[i].err), statuses[i].err,
                     mic_err_http_status(statuses[i].err), statuses[i].status);
    /* No value of the enum is left out of the table above. */
    for (int err = -100; err <= 100; err++) {
        int listed = 0;
        for (size_t i = 0; i < sizeof statuses / sizeof statuses[0] && !listed; i++)
            listed = statuses[i].err == err;
        if (!listed && strcmp(mic_strerror(err), "unknown error"))
            fail_msg("enum mic_err value %d (%s) has no status in this test's table", err,
                     mic_strerror(err));
        if (!listed)
            assert_int_equal(mic_err_http_status(err), 500);
    }
}

/* ---- The route table ---- */

/* The first "{...}" segment of a route's name, or "" (static buffer). */
static const char *first_param(const char *name)
{
    static char p[64];
    const char *a = strchr(name, '{'), *b = a ? strchr(a, '}') : NULL;

    p[0] = 0;
    if (a && b && (size_t)(b - a) < sizeof p - 1)
        snprintf(p, sizeof p, "%.*s", (int)(b - a + 1), a);
    return p;
}

/* Each route is a known method on a path from the root, listed once; a
 * route checked against a topic or group scope has that name as its
 * first parameter (the one the check reads); an open route is open to
 * every key and checks no scope, and no other route is either. */
static void route_table_is_consistent(void **state)
{
    struct mic_route_info ri, rj;
    int n = 0;

    (void)state;
    for (int i = 0; mic_http_route(i, &ri); i++, n++) {
        assert_true(!strcmp(ri.method, "GET") || !strcmp(ri.method, "PUT") ||
                    !strcmp(ri.method, "POST") || !strcmp(ri.method, "DELETE"));
        assert_int_equal(ri.name[0], '/');
        for (int j = 0; j < i; j++) {
            assert_true(mic_http_route(j, &rj));
            if (!strcmp(ri.method, rj.method) && !strcmp(ri.name, rj.name))
                fail_msg("%s %s is listed twice (routes %d and %d)", ri.method, ri.name, j, i);
        }
        switch (ri.scope) {
        case MIC_SCOPE_TOPIC:
            if (strcmp(first_param(ri.name), "{topic}"))
                fail_msg("%s %s checks a topic scope on %s", ri.method, ri.name,
                         first_param(ri.name));
            break;
        case MIC_SCOPE_GROUP:
            if (strcmp(first_param(ri.name), "{group}"))
                fail_msg("%s %s checks a group scope on %s", ri.method, ri.name,
                         first_param(ri.name));
            break;
        }
        if ((ri.scope == MIC_SCOPE_OPEN) != (ri.perm == MIC_PERM_OPEN))
            fail_msg("%s %s: scope %d with permission %d", ri.method, ri.name, ri.scope,
                     ri.perm);
        /* A route naming a topic or a group checks it (or narrows itself). */
        if ((!strcmp(first_param(ri.name), "{topic}") && ri.scope != MIC_SCOPE_TOPIC) ||
            (!strcmp(first_param(ri.name), "{group}") && ri.scope != MIC_SCOPE_GROUP))
            fail_msg("%s %s names %s but checks scope %d", ri.method, ri.name,
                     first_param(ri.name), ri.scope);
    }
    assert_true(n >= 30);
    assert_false(mic_http_route(n, &ri));
    assert_false(mic_http_route(-1, &ri));
}

static void loopback_addresses(void **state)
{
    static const struct {
        const char *listen;
        int loopback;
    } cases[] = {
        {"127.0.0.1:8080", 1}, {"127.1.2.3:1", 1},    {"[::1]:8080", 1},
        {"0.0.0.0:8080", 0},   {"10.0.0.1:8080", 0},  {"[::]:8080", 0},   {"128.0.0.1:80", 0},
        {"127.0.0.1", -1},     {"", -1},
    };

    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (mic_http_listen_is_loopback(cases[i].listen) != cases[i].loopback)
            fail_msg("listen '%s': %d, expected %d", cases[i].listen,
                     mic_http_listen_is_loopback(cases[i].listen), cases[i].loopback);
}

/* ---- The server, in-process ---- */

struct srv {
    struct procfx f;
    mic_http *h;
    int port;
};

static int srv_setup(void **state)
{
    static const char *const argv[] = {"micd", "--listen", "127.0.0.1:0", "--max-body", "1K",
                                       "--http-threads", "1"};
    struct srv *s = calloc(1, sizeof *s);

    mic_logger_set_level(MIC_LEVEL_ERROR); /* no request lines */
    if (!s || procfx_open(&s->f, "mic-routes", 7, argv)) {
        free(s);
        return -1;
    }
    if (mic_http_start(&s->h, &s->f.cfg, s->f.store, s->f.w, NULL, &s->port)) {
        procfx_close(&s->f);
        free(s);
        return -1;
    }
    *state = s;
    return 0;
}

static int srv_teardown(void **state)
{
    struct srv *s = *state;

    mic_writer_stop(s->f.w); /* nothing is left suspended */
    mic_http_stop(s->h);
    procfx_close(&s->f);
    free(s);
    mic_logger_set_level(MIC_LEVEL_INFO);
    return 0;
}

/* One answer, parsed. */
struct reply {
    unsigned status;
    char head[4096]; /* the status line and the headers */
    char body[8192];
    json_t *json;    /* the body, when it is JSON (the caller's: reply_free) */
};

static void reply_free(struct reply *r)
{
    json_decref(r->json);
    r->json = NULL;
}

/* Header 'name' of 'r' (its value up to the line's end, static), or NULL. */
static const char *header(const struct reply *r, const char *name)
{
    static char v[256];
    size_t n = strlen(name);

    for (const char *l = strstr(r->head, "\r\n"); l && l[2]; l = strstr(l + 2, "\r\n")) {
        const char *h = l + 2, *e = strstr(h, "\r\n");
        if (!strncasecmp(h, name, n) && h[n] == ':') {
            h += n + 1;
            while (*h == ' ')
                h++;
            snprintf(v, sizeof v, "%.*s", e ? (int)(e - h) : (int)strlen(h), h);
            return v;
        }
    }
    return NULL;
}

/* Send the raw request 'req' (len bytes) to the server and read the whole
 * answer (it is sent with Connection: close); at most 10 s. */
static void exchange(struct srv *s, const char *req, size_t len, struct reply *r)
{
    struct sockaddr_in sa;
    struct timeval tv = {10, 0};
    char buf[16384];
    size_t got = 0;
    const char *sep;
    ssize_t k;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    memset(r, 0, sizeof *r);
    assert_true(fd >= 0);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)s->port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    for (size_t off = 0; off < len; off += (size_t)k)
        if ((k = send(fd, req + off, len - off, MSG_NOSIGNAL)) <= 0)
            break; /* the server may answer (and close) before the whole body */
    while (got < sizeof buf - 1 && (k = recv(fd, buf + got, sizeof buf - 1 - got, 0)) > 0)
        got += (size_t)k;
    close(fd);
    buf[got] = 0;
    sep = strstr(buf, "\r\n\r\n");
    if (!sep || sscanf(buf, "HTTP/1.1 %u", &r->status) != 1)
        fail_msg("no HTTP answer to %.60s...: '%.200s'", req, buf);
    snprintf(r->head, sizeof r->head, "%.*s", (int)(sep - buf + 2), buf);
    snprintf(r->body, sizeof r->body, "%s", sep + 4);
    r->json = json_loads(r->body, 0, NULL);
}

/* METHOD PATH with 'body' (NULL: none) of Content-Type 'ctype' (NULL: no
 * such header). */
static void request(struct srv *s, const char *method, const char *path, const char *ctype,
                    const char *body, struct reply *r)
{
    char req[4096];
    int n = snprintf(req, sizeof req, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n",
                     method, path);

    if (ctype)
        n += snprintf(req + n, sizeof req - n, "Content-Type: %s\r\n", ctype);
    if (body)
        n += snprintf(req + n, sizeof req - n, "Content-Length: %zu\r\n", strlen(body));
    n += snprintf(req + n, sizeof req - n, "\r\n%s", body ? body : "");
    assert_true(n < (int)sizeof req);
    exchange(s, req, (size_t)n, r);
}

/* Assert 'r' is the error answer 'status' with code 'code' (and, if
 * 'message' is set, a message starting with it). */
static void expect_error(const struct reply *r, unsigned status, const char *code,
                         const char *message)
{
    json_t *e = json_object_get(r->json, "error");
    const char *c = json_string_value(json_object_get(e, "code"));
    const char *m = json_string_value(json_object_get(e, "message"));

    if (r->status != status || !c || strcmp(c, code) ||
        (message && (!m || strncmp(m, message, strlen(message)))))
        fail_msg("answer %u %s, expected %u %s '%s'", r->status, r->body, status, code,
                 message ? message : "");
    assert_non_null(header(r, "X-Request-Id"));
    assert_non_null(strstr(header(r, "Content-Type"), "application/json"));
}

/* Paths are matched segment by segment: "*" takes one non-empty segment
 * (what the handler gets), nothing more or less matches. */
static void paths_match_by_segment(void **state)
{
    struct srv *s = *state;
    static const char *const no_route[] = {
        "/v1/nope", "/v1/groups/", "/v1/groups//claim", "/v1/groups/g1/claim/x",
        "/v1", "/v1/groups/g1/", "/V1/groups", "/v1/aggregates/a",
    };
    struct reply r;

    request(s, "PUT", "/v1/groups/g1", "application/json", "{\"topics\":[\"t\"]}", &r);
    assert_int_equal(r.status, 201);
    assert_string_equal(json_string_value(json_object_get(r.json, "name")), "g1");
    reply_free(&r);
    request(s, "GET", "/v1/groups/g1", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(json_string_value(json_object_get(r.json, "name")), "g1");
    reply_free(&r);
    /* The route matched; the handler found no such group. */
    request(s, "GET", "/v1/groups/g2", NULL, NULL, &r);
    expect_error(&r, 404, "not_found", "no group g2");
    reply_free(&r);
    /* Two captured segments. */
    request(s, "GET", "/v1/aggregates/acct/A", NULL, NULL, &r);
    expect_error(&r, 404, "not_found", "no such aggregate");
    reply_free(&r);
    for (size_t i = 0; i < sizeof no_route / sizeof no_route[0]; i++) {
        char want[256];
        snprintf(want, sizeof want, "no route %s", no_route[i]);
        request(s, "GET", no_route[i], NULL, NULL, &r);
        expect_error(&r, 404, "not_found", want);
        reply_free(&r);
    }
    request(s, "GET", "/healthz", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    reply_free(&r);
}

/* A path that exists with another method: 405 method_not_allowed, Allow
 * listing the methods of every route of that path in table order. */
static void other_method_is_405_with_allow(void **state)
{
    struct srv *s = *state;
    static const struct {
        const char *method, *path, *allow;
    } cases[] = {
        {"DELETE", "/v1/events", "POST"},
        {"PATCH", "/v1/groups/g1", "GET, PUT, DELETE"},
        {"POST", "/v1/topics/t", "GET, PUT, DELETE"},
        {"GET", "/v1/groups/g1/claim", "POST"},
        {"PUT", "/v1/groups", "GET"},
        {"POST", "/v1/replays/r1", "GET, DELETE"},
        {"DELETE", "/healthz", "GET"},
    };
    struct reply r;

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *allow;
        request(s, cases[i].method, cases[i].path, NULL, NULL, &r);
        expect_error(&r, 405, "method_not_allowed", NULL);
        allow = header(&r, "Allow");
        if (!allow || strcmp(allow, cases[i].allow))
            fail_msg("%s %s: Allow '%s', expected '%s'", cases[i].method, cases[i].path,
                     allow ? allow : "(none)", cases[i].allow);
        reply_free(&r);
    }
    /* Not on other answers. */
    request(s, "GET", "/v1/nope", NULL, NULL, &r);
    assert_null(header(&r, "Allow"));
    reply_free(&r);
}

/* Bodies: past --max-body (1 KiB here) 413 body_too_large, whether the
 * length is announced or the chunks only add up to it; a body that is not
 * application/json 415; one that is not JSON 400 invalid_json.  None of
 * them stores anything. */
static void bodies_are_checked(void **state)
{
    struct srv *s = *state;
    char big[1100], req[4096];
    struct reply r;
    int n;

    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    request(s, "POST", "/v1/events", "application/json", big, &r);
    expect_error(&r, 413, "body_too_large", "request bodies are at most 1024 bytes");
    reply_free(&r);
    /* Chunked: no length up front, 2 x 600 bytes. */
    n = snprintf(req, sizeof req,
                 "POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                 "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                 "258\r\n%.600s\r\n258\r\n%.600s\r\n0\r\n\r\n",
                 big, big);
    exchange(s, req, (size_t)n, &r);
    expect_error(&r, 413, "body_too_large", NULL);
    reply_free(&r);
    /* Exactly at the limit is read (and then judged as JSON). */
    big[1024] = 0;
    request(s, "POST", "/v1/events", "application/json", big, &r);
    expect_error(&r, 400, "invalid_json", NULL);
    reply_free(&r);

    request(s, "POST", "/v1/events", "text/plain", "{\"topic\":\"t\"}", &r);
    expect_error(&r, 415, "unsupported_media_type", NULL);
    reply_free(&r);
    request(s, "POST", "/v1/events", NULL, "{\"topic\":\"t\"}", &r);
    expect_error(&r, 415, "unsupported_media_type", NULL);
    reply_free(&r);
    request(s, "PUT", "/v1/groups/g1", "application/xml", "{\"topics\":[\"t\"]}", &r);
    expect_error(&r, 415, "unsupported_media_type", NULL);
    reply_free(&r);
    request(s, "POST", "/v1/events", "application/json; charset=utf-8", "{\"topic\":", &r);
    expect_error(&r, 400, "invalid_json", NULL);
    reply_free(&r);
    /* Nothing was stored by any of them. */
    assert_int_equal(procfx_count(s->f.store, mic_store_last_seq), 0);
    request(s, "GET", "/v1/groups/g1", NULL, NULL, &r);
    assert_int_equal(r.status, 404);
    reply_free(&r);
    /* The same publish, well formed, is stored. */
    request(s, "POST", "/v1/events", "application/json; charset=utf-8",
            "{\"event_id\":\"e1\",\"topic\":\"t\"}", &r);
    assert_int_equal(r.status, 201);
    reply_free(&r);
    assert_int_equal(procfx_count(s->f.store, mic_store_last_seq), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_error_has_its_status),
        cmocka_unit_test(route_table_is_consistent),
        cmocka_unit_test(loopback_addresses),
        cmocka_unit_test_setup_teardown(paths_match_by_segment, srv_setup, srv_teardown),
        cmocka_unit_test_setup_teardown(other_method_is_405_with_allow, srv_setup, srv_teardown),
        cmocka_unit_test_setup_teardown(bodies_are_checked, srv_setup, srv_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
