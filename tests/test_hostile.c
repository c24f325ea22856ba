/* test_hostile.c - hostile HTTP clients against a real micd (issue 12
 * points 5 and 6): idle connections past the connection limit, a client
 * that sends its head one byte at a time, NUL bytes in names and in the
 * request line, an 8 KB URL,
 * ambiguous message framing, and the log under a flood of malformed
 * connections.  Raw sockets from 127.0.0.x: nothing leaves loopback. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "claimkit.h"

static struct srv S;

/* A string literal and its length (NUL bytes in it included). */
#define RAW(s) s, sizeof(s) - 1

/* A connection from 127.0.0.'host' to micd. */
static int dial(int host)
{
    struct sockaddr_in a, b;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    assert_true(fd >= 0);
    memset(&b, 0, sizeof b);
    b.sin_family = AF_INET;
    b.sin_addr.s_addr = htonl(0x7f000000u | (unsigned)host);
    assert_int_equal(bind(fd, (struct sockaddr *)&b, sizeof b), 0);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)S.port);
    a.sin_addr.s_addr = htonl(0x7f000001u);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    return fd;
}

static void send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return; /* the server closed it: the caller looks */
        p += w;
        n -= (size_t)w;
    }
}

/* Read the answer's status line (up to 'ms'); 0 if none came. */
static int status_line(int fd, int ms)
{
    char buf[4096];
    size_t got = 0;
    struct pollfd p = {fd, POLLIN, 0};

    while (got < sizeof buf - 1 && poll(&p, 1, ms) == 1) {
        ssize_t n = recv(fd, buf + got, sizeof buf - 1 - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
        buf[got] = 0;
        if (strstr(buf, "\r\n"))
            break;
    }
    buf[got] = 0;
    return got > 12 && !strncmp(buf, "HTTP/1.1 ", 9) ? atoi(buf + 9) : 0;
}

/* Has the server closed 'fd'?  (Data it sent first is read and dropped.) */
static int closed(void *arg)
{
    int fd = *(int *)arg;
    char c[256];
    ssize_t n = recv(fd, c, sizeof c, MSG_DONTWAIT);

    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* The value of sample line 'name' (with its labels) of /metrics, or -1. */
static long metric(const char *name)
{
    struct resp r;
    char want[200];
    const char *p;
    long v = -1;

    snprintf(want, sizeof want, "\n%s ", name);
    assert_int_equal(http(&S, "GET", "/metrics", NULL, NULL, 0, NULL, &r), 0);
    if ((p = strstr(r.body, want)))
        v = strtol(p + strlen(want), NULL, 10);
    resp_free(&r);
    return v;
}

static int group_setup(void **state)
{
    static const char *const args[] = {"--max-connections", "64", "--per-ip-connections", "40",
                                       "--idle-timeout", "3", "--head-timeout", "2", NULL};

    (void)state;
    return srv_start_shared(&S, args);
}

static int group_teardown(void **state)
{
    int rc;

    (void)state;
    rc = srv_stop(&S);
    if (rc) {
        char *log = file_read(S.logpath);
        fprintf(stderr, "micd exit %d; its log:\n%s\n", rc, log ? log : "(none)");
        free(log);
    }
    srv_cleanup(&S);
    http_thread_done();
    return rc ? -1 : 0;
}

/* 240 idle connections from 8 addresses (30 each, under the per-address
 * limit) against a limit of 64: a new client is still served, every time,
 * because the longest-idle connections are closed to make room.  On a
 * micd of its own whose idle timeout (10 min) is far past the client's
 * (30 s): the idle connections never go by themselves, so a new client is
 * served only if the evictions make room (they once did not until an
 * unrelated event woke the HTTP thread that had to accept it). */
static void idle_connections_make_room(void **state)
{
    static const char *const args[] = {"--max-connections", "64", "--per-ip-connections", "40",
                                       "--idle-timeout", "600", NULL};
    struct srv shared = S;
    int fds[240], n = 0, served = 0;

    (void)state;
    memset(&S, 0, sizeof S);
    assert_int_equal(srv_start(&S, args), 0);
    for (int host = 2; host < 10; host++)
        for (int i = 0; i < 30; i++) {
            int fd = dial(host);
            if (fd >= 0)
                fds[n++] = fd;
        }
    assert_true(n > 64);
    for (int i = 0; i < 30 && served == i; i++) { /* up to the first not served */
        struct resp r;

        if (http(&S, "GET", "/healthz", NULL, NULL, 0, NULL, &r) == 0 && r.status == 200)
            served++;
        resp_free(&r);
        http_thread_done(); /* a new connection each time */
    }
    assert_int_equal(served, 30);
    assert_true(metric("mic_http_connections_closed_total{reason=\"evicted\"}") > 0);
    for (int i = 0; i < n; i++)
        close(fds[i]);
    http_thread_done();
    assert_int_equal(srv_stop(&S), 0);
    srv_cleanup(&S);
    S = shared;
}

/* Past --per-ip-connections (40 here) from one address, the extra
 * connections are refused or closed at once. */
struct many {
    int fds[50], n, refused;
};

static int ten_shut(void *arg)
{
    struct many *m = arg;
    int shut = m->refused;

    for (int i = 0; i < m->n; i++)
        shut += closed(&m->fds[i]);
    return shut >= 10;
}

static void per_address_limit(void **state)
{
    struct many m = {.n = 0};

    (void)state;
    for (int i = 0; i < 50; i++) {
        int fd = dial(20);
        if (fd >= 0)
            m.fds[m.n++] = fd;
        else
            m.refused++;
    }
    assert_true(await(ten_shut, &m, 20000));
    for (int i = 0; i < m.n; i++)
        close(m.fds[i]);
}

/* A head sent one byte at a time is closed at the head deadline (the
 * request line came) or the idle deadline (it did not), while another
 * client is served meanwhile. */
static void slow_heads_are_closed(void **state)
{
    int with_line = dial(1), without = dial(1), rounds = 0;
    struct resp r;
    const char *line = "GET /healthz HTTP/1.1\r\n", *hdr = "X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

    (void)state;
    assert_true(with_line >= 0 && without >= 0);
    send_all(with_line, line, strlen(line));
    for (size_t i = 0; i < 200 && !(closed(&with_line) && closed(&without)); i++) {
        struct timespec ts = {0, 200 * 1000000};

        send_all(with_line, hdr + i % strlen(hdr), 1);
        send_all(without, line + i % 10, 1); /* never a whole line */
        if (i % 5 == 0) {
            assert_int_equal(http(&S, "GET", "/healthz", NULL, NULL, 0, NULL, &r), 0);
            assert_int_equal(r.status, 200);
            resp_free(&r);
            rounds++;
        }
        nanosleep(&ts, NULL);
    }
    /* 200 rounds of 200 ms is 40 s: far past both deadlines (2 s, 3 s). */
    assert_true(closed(&with_line));
    assert_true(closed(&without));
    assert_true(rounds > 1);
    assert_true(metric("mic_http_connections_closed_total{reason=\"head\"}") >= 1);
    assert_true(metric("mic_http_connections_closed_total{reason=\"idle\"}") >= 1);
    close(with_line);
    close(without);
}

/* A NUL (or any byte a name forbids) after percent-decoding is not cut
 * off: nothing named by the prefix is touched. */
static void nul_in_names(void **state)
{
    struct resp r;

    (void)state;
    assert_int_equal(http_json(&S, "PUT", "/v1/topics/zz", "{}", &r), 0);
    resp_free(&r);
    assert_int_equal(http_json(&S, "PUT", "/v1/groups/zz", "{\"topics\":[\"zz\"]}", &r), 0);
    assert_int_equal(r.status / 100, 2);
    resp_free(&r);
    assert_int_equal(http(&S, "DELETE", "/v1/groups/zz%00x", NULL, NULL, 0, NULL, &r), 0);
    assert_true(r.status == 404 || r.status == 422);
    resp_free(&r);
    assert_int_equal(http(&S, "GET", "/v1/groups/zz", NULL, NULL, 0, NULL, &r), 0);
    assert_int_equal(r.status, 200); /* still there */
    resp_free(&r);
    assert_int_equal(http_json(&S, "PUT", "/v1/topics/a%00b", "{}", &r), 0);
    assert_true(r.status == 404 || r.status == 422);
    resp_free(&r);
    assert_int_equal(http(&S, "GET", "/v1/topics/a", NULL, NULL, 0, NULL, &r), 0);
    assert_int_equal(r.status, 404); /* not created */
    resp_free(&r);
    assert_int_equal(http(&S, "DELETE", "/v1/topics/zz%2Fx", NULL, NULL, 0, NULL, &r), 0);
    assert_true(r.status == 404 || r.status == 422);
    resp_free(&r);
}

/* A raw NUL byte in the request line (not percent-encoded) is refused
 * with 400: libmicrohttpd 0.9 would cut the method or the target there,
 * so "DELETE /v1/groups/nulg\0x" deleted group nulg and "PUT\0X" was a
 * PUT (server/routes.c, request_line_cut). */
static void nul_in_request_line(void **state)
{
    static const struct {
        const char *req;
        size_t len;
    } lines[] = {
        {RAW("DELETE /v1/groups/nulg\0x HTTP/1.1\r\nHost: x\r\n\r\n")},
        {RAW("PUT /v1/topics/nult\0x HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Content-Length: 2\r\n\r\n{}")},
        {RAW("PUT\0X /v1/topics/nulm HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Content-Length: 2\r\n\r\n{}")},
        {RAW("DELETE /v1/groups/nulg?x=1\0y HTTP/1.1\r\nHost: x\r\n\r\n")},
        {RAW("DELETE /v1/groups/nulg\0HTTP/1.1 HTTP/1.1\r\nHost: x\r\n\r\n")},
    };
    struct resp r;

    (void)state;
    json_decref(call(&S, "PUT", "/v1/groups/nulg", "{\"topics\":[\"nul\"]}", 201));
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        int fd = dial(1);

        send_all(fd, lines[i].req, lines[i].len);
        assert_int_equal(status_line(fd, 10000), 400);
        close(fd);
    }
    json_decref(call(&S, "GET", "/v1/groups/nulg", NULL, 200)); /* still there */
    json_decref(call(&S, "GET", "/v1/topics/nult", NULL, 404));  /* not created */
    json_decref(call(&S, "GET", "/v1/topics/nulm", NULL, 404));
    /* The same requests without the NUL do what they say. */
    assert_int_equal(http(&S, "DELETE", "/v1/groups/nulg?x=1", NULL, NULL, 0, NULL, &r), 0);
    assert_int_equal(r.status, 204);
    resp_free(&r);
}

/* An 8 KB URL gets an HTTP answer (414, or a 404 whose body does not echo
 * it all). */
static void long_url_is_answered(void **state)
{
    size_t n = 8300;
    char *req = malloc(n + 64);
    int fd = dial(1), st;

    (void)state;
    assert_non_null(req);
    memcpy(req, "GET /v1/", 8);
    memset(req + 8, 'a', n - 8);
    strcpy(req + n, " HTTP/1.1\r\nHost: x\r\n\r\n");
    send_all(fd, req, strlen(req));
    st = status_line(fd, 10000);
    assert_true(st == 414 || st == 404 || st == 431);
    close(fd);
    free(req);
}

/* Two Content-Length headers that differ, or Transfer-Encoding with a
 * Content-Length: 400, and nothing is stored. */
static void ambiguous_framing(void **state)
{
    static const char *const reqs[] = {
        "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: 47\r\nContent-Length: 48\r\n\r\n"
        "{\"topic\":\"smug\",\"event_id\":\"s1\",\"payload\":{}}",
        "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\nContent-Length: 47\r\n\r\n"
        "2f\r\n{\"topic\":\"smug\",\"event_id\":\"s2\",\"payload\":{}}\r\n0\r\n\r\n",
    };
    struct resp r;

    (void)state;
    for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
        int fd = dial(1);

        send_all(fd, reqs[i], strlen(reqs[i]));
        assert_int_equal(status_line(fd, 10000), 400);
        close(fd);
    }
    assert_int_equal(http(&S, "GET", "/v1/events/s1", NULL, NULL, 0, NULL, &r), 0);
    assert_int_equal(r.status, 404);
    resp_free(&r);
    assert_int_equal(http(&S, "GET", "/v1/events/s2", NULL, NULL, 0, NULL, &r), 0);
    assert_int_equal(r.status, 404);
    resp_free(&r);
}

/* 300 malformed connections: counted in a metric, and the log gets a few
 * lines, not one per connection. */
static void malformed_flood_is_rate_limited(void **state)
{
    char *log;
    size_t before = 0, after = 0;
    long m0 = metric("mic_http_protocol_errors_total"), m1;

    (void)state;
    if ((log = file_read(S.logpath))) {
        for (char *p = log; (p = strstr(p, "libmicrohttpd")); p++)
            before++;
        free(log);
    }
    for (int i = 0; i < 300; i++) {
        int fd = dial(1);
        static const char junk[] = "GARBAGE\x01\x02 / HTTP/9.9\r\n\r\n";

        send_all(fd, junk, sizeof junk - 1);
        status_line(fd, 2000);
        close(fd);
    }
    m1 = metric("mic_http_protocol_errors_total");
    assert_non_null(log = file_read(S.logpath));
    for (char *p = log; (p = strstr(p, "libmicrohttpd")); p++)
        after++;
    free(log);
    assert_true(m1 > m0);
    assert_true(after - before <= 12);
}

/* A long-poll whose client hung up takes nothing when events arrive: the
 * writer asks a woken op whether its client is still there (writer.h,
 * alive) and finishes it unapplied, so the next claim gets the event. */
struct parked_n {
    long want;
};

static int parked_is(void *arg)
{
    return metric("mic_writer_parked") == ((struct parked_n *)arg)->want;
}

static void abandoned_long_poll_takes_nothing(void **state)
{
    static const char body[] = "{\"max\":1,\"wait_s\":20}";
    char req[300];
    struct parked_n zero = {0}, one = {1};
    struct resp r;
    int fd = dial(1);

    (void)state;
    assert_int_equal(http_json(&S, "PUT", "/v1/groups/lp", "{\"topics\":[\"lp\"]}", &r), 0);
    assert_int_equal(r.status / 100, 2);
    resp_free(&r);
    assert_true(await(parked_is, &zero, 20000));
    snprintf(req, sizeof req, "POST /v1/groups/lp/claim HTTP/1.1\r\nHost: x\r\n"
             "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
             sizeof body - 1, body);
    send_all(fd, req, strlen(req));
    assert_true(await(parked_is, &one, 20000));
    close(fd); /* the client is gone while its claim is parked */
    assert_int_equal(http_json(&S, "POST", "/v1/events",
                               "{\"topic\":\"lp\",\"event_id\":\"lp-1\",\"payload\":{}}", &r), 0);
    assert_int_equal(r.status, 201);
    resp_free(&r);
    assert_true(await(parked_is, &zero, 20000));
    assert_int_equal(http_json(&S, "POST", "/v1/groups/lp/claim", "{\"max\":1}", &r), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(json_array_size(json_object_get(r.json, "deliveries")), 1);
    resp_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(idle_connections_make_room),
        cmocka_unit_test(per_address_limit),
        cmocka_unit_test(slow_heads_are_closed),
        cmocka_unit_test(nul_in_names),
        cmocka_unit_test(nul_in_request_line),
        cmocka_unit_test(long_url_is_answered),
        cmocka_unit_test(ambiguous_framing),
        cmocka_unit_test(malformed_flood_is_rate_limited),
        cmocka_unit_test(abandoned_long_poll_takes_nothing),
    };

    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
