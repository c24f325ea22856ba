/* test_hostile.c - hostile HTTP clients against a real micd (issue 12
 * points 5 and 6): idle connections past the connection limit, a client
 * that sends its head one byte at a time, NUL bytes in names and in the
 * request line, an 8 KB URL, ambiguous message framing, and the log under
 * a flood of malformed connections; then all of them at once while a
 * legitimate producer and worker go on (issue 16 T8,
 * all_at_once_legit_traffic_served).  Raw sockets from 127.0.0.x: nothing
 * leaves loopback. */
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
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "claimkit.h"
#include "mic.h"

#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT 24
#endif

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

/* Request bodies that stop coming hold no slot for long: 80 connections
 * (micd's hard limit with --max-connections 64) send a head whose body
 * micd accepts (100 Continue), then a few bytes of it and nothing more.
 * Such a connection is never chosen to make room (its request is in
 * progress), and libmicrohttpd's own timeout is the idle one (10 min
 * here), so before the body deadline (conns.h) no other client was
 * served for those 10 minutes; now they are closed at the head deadline
 * (2 s) and a client is served meanwhile. */
static int all_shut(void *arg)
{
    struct many *m = arg;

    for (int i = 0; i < m->n; i++)
        if (!closed(&m->fds[i]))
            return 0;
    return 1;
}

static void stalled_bodies_are_closed(void **state)
{
    static const char *const args[] = {"--max-connections", "64", "--per-ip-connections", "40",
                                       "--idle-timeout", "600", "--head-timeout", "2", NULL};
    static const char head[] = "POST /v1/events HTTP/1.1\r\nHost: x\r\n"
                               "Content-Type: application/json\r\nContent-Length: 200\r\n"
                               "Expect: 100-continue\r\n\r\n";
    struct srv shared = S;
    struct many m[2] = {{.n = 0}, {.n = 0}};
    struct resp r;

    (void)state;
    memset(&S, 0, sizeof S);
    assert_int_equal(srv_start(&S, args), 0);
    for (int i = 0; i < 80; i++) {
        struct many *g = &m[i % 2];
        int fd = dial(30 + i % 2);

        assert_true(fd >= 0);
        send_all(fd, head, sizeof head - 1);
        assert_int_equal(status_line(fd, 20000), 100); /* its body is awaited */
        send_all(fd, "{\"topic\":", 9);
        g->fds[g->n++] = fd;
    }
    assert_int_equal(http(&S, "GET", "/healthz", NULL, NULL, 0, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    assert_true(await(all_shut, &m[0], 20000));
    assert_true(await(all_shut, &m[1], 20000));
    assert_true(metric("mic_http_connections_closed_total{reason=\"body\"}") >= 80);
    for (int g = 0; g < 2; g++)
        for (int i = 0; i < m[g].n; i++)
            close(m[g].fds[i]);
    http_thread_done();
    assert_int_equal(srv_stop(&S), 0);
    srv_cleanup(&S);
    S = shared;
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
 * PUT (server/http/routes.c, request_line_cut). */
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

/* ---- All at once (issue 16, T8) ---- */

/* On a micd with its default limits (1024 connections, 256 per address,
 * idle 75 s, head 10 s): 2,000 idle connections from 127.0.0.2-9 (250
 * each, under the per-address limit), 300 that send a request head a byte
 * at a time from 127.0.0.10-11, and two threads of malformed requests from
 * 127.0.0.20-23, each closed connection opened again; meanwhile a producer
 * publishes LEGIT_EVENTS events through libmic and a worker claims and
 * acks them.  Every legitimate request must succeed; no malformed one may
 * be answered other than 4xx (505 for an unknown HTTP version) or change
 * anything.  No latency is asserted (bench/hostile.py measures it). */
#define STORM_IDLE 2000
#define STORM_IDLE_HOSTS 8     /* 127.0.0.2-9 */
#define STORM_SLOW 300
#define STORM_FLOODERS 2       /* each from two of 127.0.0.20-23 */
#define LEGIT_EVENTS 500
#define LEGIT_DEADLINE_MS 90000

struct bad {
    const char *name;
    const char *req;
    size_t len;
    int cut;        /* the request is cut short: no answer is awaited */
    int version_ok; /* 505 is a right answer too */
};


static char deep_req[12000], big_header_req[17000], long_url_req[9500];

/* Malformed requests, each of which must be refused and change nothing
 * (group "decoy" on topic "decoy" is their target). */
static struct bad bads[] = {
    {"bad_json", RAW("POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     "Content-Length: 44\r\n\r\n"
                     "{\"topic\":\"decoy\",\"event_id\":\"f1\",\"payload\":{"), 0, 0},
    {"not_an_object", RAW("POST /v1/events HTTP/1.1\r\nHost: x\r\n"
                          "Content-Type: application/json\r\nContent-Length: 7\r\n\r\n[1,2,3]"), 0, 0},
    {"bad_event_id", RAW("POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         "Content-Length: 51\r\n\r\n{\"topic\":\"decoy\",\"event_id\":\"bad id!\",\"payload\":{}}"), 0, 0},
    {"nul_in_body", RAW("POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        "Content-Length: 47\r\n\r\n{\"topic\":\"decoy\",\"event_id\":\"f\0x\",\"payload\":{}}"), 0, 0},
    {"bad_utf8", RAW("POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     "Content-Length: 54\r\n\r\n{\"topic\":\"decoy\",\"event_id\":\"f2\",\"payload\":{\"a\":\"\xff\xfe\"}}"), 0, 0},
    {"deep_json", deep_req, 0, 0, 0},
    {"text_plain", RAW("POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
                       "Content-Length: 46\r\n\r\n{\"topic\":\"decoy\",\"event_id\":\"f3\",\"payload\":{}}"), 0, 0},
    {"batch_one_bad", RAW("POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          "Content-Length: 100\r\n\r\n[{\"topic\":\"decoy\",\"event_id\":\"ok1\",\"payload\":{}},"
                          "{\"topic\":\"decoy\",\"event_id\":\"bad id\",\"payload\":{}}]"), 0, 0},
    {"bad_method", RAW("BREW /v1/events HTTP/1.1\r\nHost: x\r\n\r\n"), 0, 0},
    {"control_in_method", RAW("P\x01T /v1/topics/decoy3 HTTP/1.1\r\nHost: x\r\n"
                              "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"), 0, 0},
    {"nul_in_method", RAW("PUT\0X /v1/topics/decoy4 HTTP/1.1\r\nHost: x\r\n"
                          "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"), 0, 0},
    {"nul_in_target_delete", RAW("DELETE /v1/groups/decoy\0x HTTP/1.1\r\nHost: x\r\n\r\n"), 0, 0},
    {"nul_in_target_put", RAW("PUT /v1/topics/decoy2\0x HTTP/1.1\r\nHost: x\r\n"
                              "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"), 0, 0},
    {"nul_in_header", RAW("GET /v1/nothing HTTP/1.1\r\nHost: x\0y\r\n\r\n"), 0, 0},
    {"two_lengths", RAW("POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        "Content-Length: 46\r\nContent-Length: 47\r\n\r\n"
                        "{\"topic\":\"decoy\",\"event_id\":\"s1\",\"payload\":{}}"), 0, 0},
    {"chunked_and_length", RAW("POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                               "Transfer-Encoding: chunked\r\nContent-Length: 46\r\n\r\n2e\r\n"
                               "{\"topic\":\"decoy\",\"event_id\":\"s2\",\"payload\":{}}\r\n0\r\n\r\n"), 0, 0},
    {"bad_chunk", RAW("POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      "Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"), 0, 0},
    {"huge_header", big_header_req, 0, 0, 0},
    {"long_url", long_url_req, 0, 0, 0},
    {"no_colon", RAW("GET /v1/nothing HTTP/1.1\r\nHost: x\r\nNoColonHere\r\n\r\n"), 0, 0},
    {"huge_length", RAW("POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        "Content-Length: 99999999999\r\n\r\n{"), 0, 0},
    {"negative_length", RAW("POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                            "Content-Length: -5\r\n\r\n{}"), 0, 0},
    {"claim_cut_json", RAW("POST /v1/groups/decoy/claim HTTP/1.1\r\nHost: x\r\n"
                           "Content-Type: application/json\r\nContent-Length: 8\r\n\r\n{\"max\":1"), 0, 0},
    {"claim_max_0", RAW("POST /v1/groups/decoy/claim HTTP/1.1\r\nHost: x\r\n"
                        "Content-Type: application/json\r\nContent-Length: 9\r\n\r\n{\"max\":0}"), 0, 0},
    {"ack_not_array", RAW("POST /v1/groups/decoy/ack HTTP/1.1\r\nHost: x\r\n"
                          "Content-Type: application/json\r\nContent-Length: 16\r\n\r\n{\"deliveries\":5}"), 0, 0},
    {"http_9_9", RAW("GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n"), 0, 1},
    {"truncated_body", RAW("POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           "Content-Length: 200\r\n\r\n{\"topic\":\"decoy\",\"event_id\":\"t1\""), 1, 0},
    {"truncated_head", RAW("POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Ty"), 1, 0},
};
#define NBADS (sizeof bads / sizeof bads[0])

static void bads_init(void)
{
    static const char deep_head[] = "{\"topic\":\"decoy\",\"event_id\":\"deep\",\"payload\":";
    size_t n;
    char *p;

    n = (size_t)snprintf(deep_req, sizeof deep_req,
                         "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         "Content-Length: %zu\r\n\r\n%s", sizeof deep_head - 1 + 2 * 5000 + 1, deep_head);
    p = deep_req + n;
    memset(p, '[', 5000);
    memset(p + 5000, ']', 5000);
    strcpy(p + 10000, "}");
    n = (size_t)snprintf(big_header_req, sizeof big_header_req, "GET /healthz HTTP/1.1\r\nX-Big: ");
    memset(big_header_req + n, 'b', 16000);
    strcpy(big_header_req + n + 16000, "\r\n\r\n");
    memcpy(long_url_req, "GET /v1/", 8);
    memset(long_url_req + 8, 'u', 9000);
    strcpy(long_url_req + 9008, " HTTP/1.1\r\nHost: x\r\n\r\n");
    for (size_t i = 0; i < NBADS; i++)
        if (!bads[i].len)
            bads[i].len = strlen(bads[i].req);
}

/* What the attackers and the legitimate clients saw (counted by their
 * threads; only the main thread asserts). */
struct storm {
    int port;
    atomic_int stop, idle_up, slow_up;
    atomic_long idle_reopened, slow_closed, slow_bytes;
    atomic_long flood_sent, flood_refused, flood_unanswered, flood_wrong;
    atomic_long refused_of[NBADS], wrong_of[NBADS];
    pthread_mutex_t lock;
    char wrong[256];      /* the first malformed request answered wrongly */
    /* the legitimate side */
    const char *url;
    atomic_long pub_ok, pub_failed, claims_ok, claims_failed, acked, ack_other;
    atomic_int pub_done;
    unsigned char seen[LEGIT_EVENTS]; /* deliveries of legit-i (worker only) */
    char legit_error[600];             /* the first failure of a legitimate call */
};

static void note(struct storm *s, char *dst, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void note(struct storm *s, char *dst, size_t cap, const char *fmt, ...)
{
    va_list ap;

    pthread_mutex_lock(&s->lock);
    if (!dst[0]) {
        va_start(ap, fmt);
        vsnprintf(dst, cap, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&s->lock);
}

/* A non-blocking connection from 127.0.0.'host' to micd, under way; -1
 * when no socket or address is to be had right now (tried again later). */
static int dial_nb(int port, int host)
{
    struct sockaddr_in a, b;
    int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

    if (fd < 0)
        return -1;
    /* The port is chosen at connect(2), per destination: reconnecting
     * all the time does not run out of ports to bind. */
    setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    memset(&b, 0, sizeof b);
    b.sin_family = AF_INET;
    b.sin_addr.s_addr = htonl(0x7f000000u | (unsigned)host);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(0x7f000001u);
    if (bind(fd, (struct sockaddr *)&b, sizeof b) ||
        (connect(fd, (struct sockaddr *)&a, sizeof a) && errno != EINPROGRESS)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Wait until monotonic time 'until_ms' unless asked to stop: the
 * attackers' pace (a round every so often), not a wait for a condition. */
static void pace(struct storm *s, int64_t until_ms)
{
    int64_t left;

    while (!atomic_load(&s->stop) && (left = until_ms - mono_ms()) > 0)
        poll(NULL, 0, left > 50 ? 50 : (int)left);
}

/* STORM_IDLE connections that send nothing; each one micd closes is
 * opened again at the next round (every 100 ms). */
static void *idle_main(void *arg)
{
    struct storm *s = arg;
    struct pollfd *p = calloc(STORM_IDLE, sizeof *p);

    if (!p)
        return NULL;
    for (int i = 0; i < STORM_IDLE; i++) {
        p[i].fd = dial_nb(s->port, 2 + i % STORM_IDLE_HOSTS);
        p[i].events = POLLIN | POLLRDHUP;
    }
    atomic_store(&s->idle_up, 1);
    while (!atomic_load(&s->stop)) {
        int64_t round = mono_ms();

        poll(p, STORM_IDLE, 100);
        for (int i = 0; i < STORM_IDLE; i++) {
            if (p[i].fd >= 0 && !(p[i].revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)))
                continue;
            if (p[i].fd >= 0) {
                if (!closed(&p[i].fd))
                    continue;
                close(p[i].fd);
                atomic_fetch_add(&s->idle_reopened, 1);
            }
            p[i].fd = dial_nb(s->port, 2 + i % STORM_IDLE_HOSTS);
            p[i].revents = 0;
        }
        pace(s, round + 100);
    }
    for (int i = 0; i < STORM_IDLE; i++)
        if (p[i].fd >= 0)
            close(p[i].fd);
    free(p);
    return NULL;
}

/* STORM_SLOW connections that send a request head one byte every 500 ms
 * (half of them send the request line at once, so the head deadline is
 * the one that applies), opened again when micd closes them. */
static void *slow_main(void *arg)
{
    static const char head[] = "POST /v1/events HTTP/1.1\r\nHost: x\r\n"
                               "Content-Type: application/json\r\nX-Slow: ";
    struct storm *s = arg;
    int fd[STORM_SLOW];
    size_t sent[STORM_SLOW];

    for (int i = 0; i < STORM_SLOW; i++) {
        fd[i] = dial_nb(s->port, 10 + i % 2);
        sent[i] = 0;
    }
    atomic_store(&s->slow_up, 1);
    while (!atomic_load(&s->stop)) {
        int64_t round = mono_ms();

        for (int i = 0; i < STORM_SLOW; i++) {
            size_t n = 1;
            const char *b;
            ssize_t w;

            if (fd[i] >= 0 && closed(&fd[i])) {
                close(fd[i]);
                fd[i] = -1;
                atomic_fetch_add(&s->slow_closed, 1);
            }
            if (fd[i] < 0) {
                fd[i] = dial_nb(s->port, 10 + i % 2);
                sent[i] = 0;
                continue;
            }
            if (sent[i] == 0 && i % 2 == 0)
                n = 26; /* "POST /v1/events HTTP/1.1\r\n" */
            b = sent[i] < sizeof head - 1 ? head + sent[i] : "s";
            if ((w = send(fd[i], b, n, MSG_NOSIGNAL | MSG_DONTWAIT)) > 0) {
                sent[i] += (size_t)w;
                atomic_fetch_add(&s->slow_bytes, w);
            }
        }
        pace(s, round + 500);
    }
    for (int i = 0; i < STORM_SLOW; i++)
        if (fd[i] >= 0)
            close(fd[i]);
    return NULL;
}

/* Send all of 'p' on non-blocking 'fd' within 'ms'; 0, or -1. */
static int send_within(int fd, const char *p, size_t n, int ms)
{
    int64_t end = mono_ms() + ms;

    while (n) {
        struct pollfd w = {fd, POLLOUT, 0};
        ssize_t k;
        int64_t left = end - mono_ms();

        if (left <= 0 || poll(&w, 1, (int)left) != 1)
            return -1;
        if ((k = send(fd, p, n, MSG_NOSIGNAL)) < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                continue;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* One malformed request on a new connection: its answer is classified. */
static void flood_one(struct storm *s, int host, size_t k)
{
    const struct bad *b = &bads[k];
    struct linger hard = {1, 0};
    int fd = dial_nb(s->port, host), st;

    if (fd < 0)
        return;
    atomic_fetch_add(&s->flood_sent, 1);
    if (send_within(fd, b->req, b->len, 10000)) {
        atomic_fetch_add(&s->flood_unanswered, 1);
    } else if (b->cut) {
        /* Cut short: the client goes a moment later, with a reset. */
        poll(NULL, 0, 100);
        atomic_fetch_add(&s->flood_unanswered, 1);
    } else if ((st = status_line(fd, 10000)) == 0) {
        atomic_fetch_add(&s->flood_unanswered, 1);
    } else if ((st >= 400 && st < 500) || (st == 505 && b->version_ok)) {
        atomic_fetch_add(&s->flood_refused, 1);
        atomic_fetch_add(&s->refused_of[k], 1);
    } else {
        atomic_fetch_add(&s->flood_wrong, 1);
        atomic_fetch_add(&s->wrong_of[k], 1);
        note(s, s->wrong, sizeof s->wrong, "%s answered %d", b->name, st);
    }
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
    close(fd);
}

struct flooder {
    struct storm *s;
    int id;
};

static void *flood_main(void *arg)
{
    struct flooder *f = arg;

    for (size_t i = (size_t)f->id; !atomic_load(&f->s->stop); i++)
        flood_one(f->s, 20 + 2 * f->id + (int)(i % 2), i % NBADS);
    return NULL;
}

/* A libmic handle for the legitimate clients: generous limits (a loaded
 * machine under attack is slow; the test asserts success, not speed). */
static mic_client *legit_client(const char *url)
{
    struct mic_client_opts o = {0};
    const char *urls[1] = {url};
    mic_client *c = NULL;

    o.urls = urls;
    o.nurls = 1;
    o.connect_timeout_ms = 30000;
    o.timeout_ms = 60000;
    if (mic_client_new(&o, &c, NULL))
        return NULL;
    return c;
}

static void legit_failed(struct storm *s, mic_client *c, const char *what)
{
    char text[512];

    note(s, s->legit_error, sizeof s->legit_error, "%s: %s", what,
         c ? mic_failure_text(mic_client_failure(c), text, sizeof text) : "no client");
}

/* The producer: LEGIT_EVENTS single-event publishes (libmic retries one
 * that got no answer with the same event_id, as any producer would). */
static void *producer_main(void *arg)
{
    struct storm *s = arg;
    mic_client *c = legit_client(s->url);

    for (int i = 0; c && i < LEGIT_EVENTS; i++) {
        struct mic_publish_result res;
        char id[32];
        json_t *ev;

        snprintf(id, sizeof id, "legit-%d", i);
        ev = json_pack("{s:s, s:s, s:s, s:{s:i}}", "topic", "legit", "event_id", id,
                       "event_type", "t", "payload", "i", i);
        if (ev && mic_publish(c, ev, &res) == 0 && res.ok)
            atomic_fetch_add(&s->pub_ok, 1);
        else {
            atomic_fetch_add(&s->pub_failed, 1);
            legit_failed(s, c, "publish");
        }
        json_decref(ev);
    }
    if (!c)
        legit_failed(s, NULL, "producer");
    atomic_store(&s->pub_done, 1);
    mic_client_free(c);
    return NULL;
}

/* The worker: long-poll claims of up to 50 and one ack of each claim's
 * deliveries, until every event is acked or the deadline. */
static void *worker_main(void *arg)
{
    struct storm *s = arg;
    mic_client *c = legit_client(s->url);
    int64_t end = mono_ms() + LEGIT_DEADLINE_MS;
    struct mic_claim_opts o = {.max = 50, .lease_ttl_s = 600, .wait_s = 1, .worker = "legit"};

    if (!c)
        legit_failed(s, NULL, "worker");
    while (c && atomic_load(&s->acked) < LEGIT_EVENTS && mono_ms() < end &&
           !(atomic_load(&s->pub_done) && atomic_load(&s->pub_failed))) {
        struct mic_claimed d = {0};
        const struct mic_leased *items[50];
        struct mic_item_result res[50];

        if (mic_claim(c, 0, "legit-g", &o, &d)) {
            atomic_fetch_add(&s->claims_failed, 1);
            legit_failed(s, c, "claim");
            mic_claimed_fini(&d);
            continue;
        }
        atomic_fetch_add(&s->claims_ok, 1);
        for (size_t i = 0; i < d.n; i++) {
            int k = -1;

            items[i] = &d.v[i];
            if (sscanf(d.v[i].event_id, "legit-%d", &k) == 1 && k >= 0 && k < LEGIT_EVENTS)
                s->seen[k]++;
        }
        if (d.n && mic_ack(c, "legit-g", items, d.n, res)) {
            atomic_fetch_add(&s->ack_other, (long)d.n);
            legit_failed(s, c, "ack");
        } else {
            for (size_t i = 0; i < d.n; i++)
                atomic_fetch_add(res[i].status == MIC_ITEM_ACKED ? &s->acked : &s->ack_other, 1);
        }
        mic_claimed_fini(&d);
    }
    mic_client_free(c);
    return NULL;
}

/* The value of sample line 'name' in /metrics text 'm', or -1. */
static long metric_in(const char *m, const char *name)
{
    char want[200];
    const char *p;

    snprintf(want, sizeof want, "\n%s ", name);
    return (p = strstr(m, want)) ? strtol(p + strlen(want), NULL, 10) : -1;
}

/* The sum of mic_http_requests_total lines with a 4xx code. */
static long answers_4xx(const char *m)
{
    long n = 0;

    for (const char *p = m; (p = strstr(p, "\nmic_http_requests_total{")); p++) {
        const char *code = strstr(p, "code=\"4"), *eol = strchr(p + 1, '\n');

        if (code && (!eol || code < eol))
            n += strtol(strchr(code, '}') + 2, NULL, 10);
    }
    return n;
}

static int few_connections(void *arg)
{
    (void)arg;
    return metric("mic_http_connections") >= 0 && metric("mic_http_connections") <= 4;
}

/* Every kind of malformed request expecting an answer got one. */
static int every_kind_answered(void *arg)
{
    struct storm *s = arg;

    for (size_t k = 0; k < NBADS; k++)
        if (!bads[k].cut && !atomic_load(&s->refused_of[k]) && !atomic_load(&s->wrong_of[k]))
            return 0;
    return 1;
}

/* micd holds about its limit of connections: read by a legitimate
 * client under attack (a failed read is counted, and asserted on). */
struct full_check {
    mic_client *c;
    long open, failed;
};

static int micd_full(void *arg)
{
    struct full_check *f = arg;
    struct mic_response mr = {0};
    int full = 0;

    if (mic_request(f->c, 0, "GET", "/metrics", NULL, NULL, 0, NULL, &mr) == 0 &&
        mr.status == 200) {
        f->open = metric_in(mr.body, "mic_http_connections");
        full = f->open >= 1000;
    } else {
        f->failed++;
    }
    mic_response_fini(&mr);
    return full;
}

/* micd closed some of the slow attackers' connections (evicted, or at
 * the head deadline), and some of the idle ones (evicted, or at the idle
 * timeout), as their threads saw. */
static int slow_were_closed(void *arg)
{
    return atomic_load(&((struct storm *)arg)->slow_closed) > 0;
}

static int idle_were_closed(void *arg)
{
    return atomic_load(&((struct storm *)arg)->idle_reopened) > 0;
}

/* How long the attack may go on for those closings: past micd's idle
 * timeout (75 s by default, the longest deadline that applies: the head
 * deadline is 10 s), plus the sweeper's round (1 s) and the attackers'
 * (500 ms), with margin.  They mostly come at once, by eviction while
 * micd is full; on a fast machine the rest of the attack may be over
 * before eviction reached the slow ones, which the deadlines then close. */
#define CLOSED_DEADLINE_MS 90000

static int attack_is_up(void *arg)
{
    struct storm *s = arg;

    return atomic_load(&s->idle_up) && atomic_load(&s->slow_up) &&
           atomic_load(&s->slow_bytes) >= STORM_SLOW && atomic_load(&s->flood_refused) > 0;
}

static void all_at_once_legit_traffic_served(void **state)
{
    struct srv shared = S;
    struct storm *st = calloc(1, sizeof *st);
    struct flooder fl[STORM_FLOODERS];
    pthread_t idle_t, slow_t, flood_t[STORM_FLOODERS], prod_t, work_t;
    struct rlimit rl;
    struct full_check full = {0};
    struct resp r;
    char *m;
    long evicted, heads, idle_closed, per_addr, proto, c4xx;
    int64_t t0, t_legit;
    json_t *j, *ack;

    (void)state;
    assert_non_null(st);
    /* 2,300 attacking sockets here, about 1,100 in micd (which inherits
     * the limit). */
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    /* Root (make test) may raise the hard limit too; anyone else needs
     * it at 8192 already.  Not a skip: without the sockets there is no
     * attack, and a test that did not run must not pass. */
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < 8192)
        rl.rlim_max = 8192;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < 8192)
        rl.rlim_cur = 8192;
    if (setrlimit(RLIMIT_NOFILE, &rl)) {
        free(st);
        fail_msg("RLIMIT_NOFILE cannot be raised to 8192 (%s): the attack needs 2,300 sockets",
                 strerror(errno));
    }
    bads_init();
    memset(&S, 0, sizeof S);
    assert_int_equal(srv_start(&S, NULL), 0); /* the default limits */
    json_decref(call(&S, "PUT", "/v1/topics/legit", "{}", 201));
    json_decref(call(&S, "PUT", "/v1/groups/legit-g", "{\"topics\":[\"legit\"]}", 201));
    json_decref(call(&S, "PUT", "/v1/topics/decoy", "{}", 201));
    json_decref(call(&S, "PUT", "/v1/groups/decoy", "{\"topics\":[\"decoy\"]}", 201));
    http_thread_done();

    pthread_mutex_init(&st->lock, NULL);
    st->port = S.port;
    st->url = S.url;
    t0 = mono_ms();
    assert_int_equal(pthread_create(&idle_t, NULL, idle_main, st), 0);
    assert_int_equal(pthread_create(&slow_t, NULL, slow_main, st), 0);
    for (int i = 0; i < STORM_FLOODERS; i++) {
        fl[i] = (struct flooder){st, i};
        assert_int_equal(pthread_create(&flood_t[i], NULL, flood_main, &fl[i]), 0);
    }
    /* The legitimate clients start once every attacker is at work. */
    assert_true(await(attack_is_up, st, 30000));
    t_legit = mono_ms();
    assert_int_equal(pthread_create(&prod_t, NULL, producer_main, st), 0);
    assert_int_equal(pthread_create(&work_t, NULL, worker_main, st), 0);
    pthread_join(prod_t, NULL);
    pthread_join(work_t, NULL);
    t_legit = mono_ms() - t_legit;

    /* Still under attack: micd is full (another legitimate client reads
     * it), and every kind of malformed request has been answered. */
    assert_non_null(full.c = legit_client(S.url));
    assert_true(await(micd_full, &full, 60000));
    mic_client_free(full.c);
    assert_true(await(every_kind_answered, st, 60000));
    /* ... and micd closed attackers' connections: awaited, not assumed
     * from how long the rest took (asserted again below). */
    if (!await(slow_were_closed, st, CLOSED_DEADLINE_MS))
        print_message("no slow connection closed by micd within %d ms\n", CLOSED_DEADLINE_MS);
    if (!await(idle_were_closed, st, CLOSED_DEADLINE_MS))
        print_message("no idle connection closed by micd within %d ms\n", CLOSED_DEADLINE_MS);

    atomic_store(&st->stop, 1);
    pthread_join(idle_t, NULL);
    pthread_join(slow_t, NULL);
    for (int i = 0; i < STORM_FLOODERS; i++)
        pthread_join(flood_t[i], NULL);

    print_message("T8 all at once: %lld ms of attack, legit part %lld ms: %ld/%d published, "
                  "%ld claims (%ld failed), %ld acked (%ld not); idle reopened %ld, slow closed "
                  "%ld, flood %ld sent, %ld refused, %ld unanswered, %ld wrong; %ld open under attack\n",
                  (long long)(mono_ms() - t0), (long long)t_legit, atomic_load(&st->pub_ok),
                  LEGIT_EVENTS, atomic_load(&st->claims_ok), atomic_load(&st->claims_failed),
                  atomic_load(&st->acked), atomic_load(&st->ack_other),
                  atomic_load(&st->idle_reopened), atomic_load(&st->slow_closed),
                  atomic_load(&st->flood_sent), atomic_load(&st->flood_refused),
                  atomic_load(&st->flood_unanswered), atomic_load(&st->flood_wrong), full.open);
    if (st->legit_error[0])
        print_message("first legitimate failure: %s\n", st->legit_error);
    if (st->wrong[0])
        print_message("first wrong answer: %s\n", st->wrong);
    for (size_t k = 0; k < NBADS; k++)
        if (atomic_load(&st->wrong_of[k]))
            print_message("%s: %ld answered wrongly\n", bads[k].name, atomic_load(&st->wrong_of[k]));

    /* Every legitimate request succeeded, each event delivered once. */
    assert_int_equal(atomic_load(&st->pub_ok), LEGIT_EVENTS);
    assert_int_equal(atomic_load(&st->pub_failed), 0);
    assert_int_equal(atomic_load(&st->claims_failed), 0);
    assert_true(atomic_load(&st->claims_ok) > 0);
    assert_int_equal(atomic_load(&st->acked), LEGIT_EVENTS);
    assert_int_equal(atomic_load(&st->ack_other), 0);
    for (int i = 0; i < LEGIT_EVENTS; i++)
        assert_int_equal(st->seen[i], 1);
    assert_int_equal(full.failed, 0);
    /* Every malformed request answered was refused (each kind that
     * expects an answer got one: awaited above). */
    assert_int_equal(atomic_load(&st->flood_wrong), 0);
    /* The attack was real: micd was full (awaited above), evicted idle
     * connections, closed the slow ones (evicted, or at the head
     * deadline), and counted the malformed ones. */
    assert_true(atomic_load(&st->slow_closed) > 0);
    assert_true(atomic_load(&st->idle_reopened) > 0);

    /* Afterwards: the attackers' slots are given back, micd is healthy,
     * and no malformed request changed anything. */
    assert_true(await(few_connections, NULL, 60000));
    assert_int_equal(http(&S, "GET", "/metrics", NULL, NULL, 0, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    m = r.body;
    evicted = metric_in(m, "mic_http_connections_closed_total{reason=\"evicted\"}");
    heads = metric_in(m, "mic_http_connections_closed_total{reason=\"head\"}");
    idle_closed = metric_in(m, "mic_http_connections_closed_total{reason=\"idle\"}");
    per_addr = metric_in(m, "mic_http_connections_closed_total{reason=\"per_address\"}");
    proto = metric_in(m, "mic_http_protocol_errors_total");
    c4xx = answers_4xx(m);
    print_message("T8 micd closed %ld evicted, %ld slow heads, %ld idle, %ld over the per-address "
                  "limit; %ld protocol errors, %ld 4xx answers\n",
                  evicted, heads, idle_closed, per_addr, proto, c4xx);
    assert_true(evicted > 0);
    assert_true(proto > 0);
    assert_true(c4xx > 0);
    resp_free(&r);
    json_decref(call(&S, "GET", "/healthz", NULL, 200));
    json_decref(call(&S, "GET", "/readyz", NULL, 200));
    j = stats_of(&S, "groups", "group", "legit-g");
    assert_int_equal(jint(j, "pending"), 0);
    assert_int_equal(jint(j, "processing"), 0);
    assert_int_equal(jint(j, "dispatched"), LEGIT_EVENTS);
    json_decref(j);
    j = stats_of(&S, "topics", "topic", "legit");
    assert_int_equal(jint(j, "events"), LEGIT_EVENTS);
    json_decref(j);
    j = stats_of(&S, "topics", "topic", "decoy");
    assert_int_equal(jint(j, "events"), 0);
    json_decref(j);
    json_decref(call(&S, "GET", "/v1/groups/decoy", NULL, 200));
    json_decref(call(&S, "GET", "/v1/topics/decoy2", NULL, 404));
    json_decref(call(&S, "GET", "/v1/topics/decoy3", NULL, 404));
    json_decref(call(&S, "GET", "/v1/topics/decoy4", NULL, 404));
    json_decref(call(&S, "GET", "/v1/events/ok1", NULL, 404));
    /* And it still publishes, hands out and acks. */
    json_decref(call(&S, "POST", "/v1/events",
                     "{\"topic\":\"legit\",\"event_id\":\"after\",\"payload\":{}}", 201));
    j = call(&S, "POST", "/v1/groups/legit-g/claim", "{\"max\":10}", 200);
    assert_int_equal(json_array_size(dlvs(j)), 1);
    assert_string_equal(jstr(json_object_get(dlv(j, 0), "event"), "event_id"), "after");
    ack = settle(&S, "legit-g", "ack", items_of(j), NULL);
    expect_result(ack, 0, jint(dlv(j, 0), "seq"), "acked");
    json_decref(ack);
    json_decref(j);

    http_thread_done();
    assert_int_equal(srv_stop(&S), 0);
    srv_cleanup(&S);
    S = shared;
    pthread_mutex_destroy(&st->lock);
    free(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(idle_connections_make_room),
        cmocka_unit_test(per_address_limit),
        cmocka_unit_test(slow_heads_are_closed),
        cmocka_unit_test(stalled_bodies_are_closed),
        cmocka_unit_test(nul_in_names),
        cmocka_unit_test(nul_in_request_line),
        cmocka_unit_test(long_url_is_answered),
        cmocka_unit_test(ambiguous_framing),
        cmocka_unit_test(malformed_flood_is_rate_limited),
        cmocka_unit_test(abandoned_long_poll_takes_nothing),
        cmocka_unit_test(all_at_once_legit_traffic_served),
    };

    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
