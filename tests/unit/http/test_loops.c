/* test_loops.c - the HTTP threads (server/http/loops.c) with a real
 * libmicrohttpd daemon on each (routes.c's mic_http_loop_ops): requests suspended in their handler and
 * handed back from another thread are answered after one kick, with one
 * wake per thread (not one per connection); quiesce closes the listening
 * socket while open connections are served on. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/err.h"
#include "http/loops.h"
#include "http/routes.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define NREQ 8

/* Requests suspended by the handler ("/wait"), in arrival order. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static struct parked {
    struct mic_resume res;
    mic_loop *loop;
} parked[NREQ];
static int nparked;

struct req {
    int suspended;
};

static enum MHD_Result handler(void *cls, struct MHD_Connection *conn, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_size, void **con_cls)
{
    struct req *r = *con_cls;
    struct MHD_Response *resp;
    enum MHD_Result ret;

    (void)cls, (void)method, (void)version, (void)upload, (void)upload_size;
    if (!r) {
        if (!(r = calloc(1, sizeof *r)))
            return MHD_NO;
        *con_cls = r;
        return MHD_YES;
    }
    if (!strcmp(url, "/wait") && !r->suspended) {
        r->suspended = 1;
        MHD_suspend_connection(conn);
        pthread_mutex_lock(&lock);
        if (nparked < NREQ) {
            parked[nparked].res.conn = conn;
            parked[nparked].loop = mic_loop_self();
            nparked++;
        }
        pthread_cond_broadcast(&cond);
        pthread_mutex_unlock(&lock);
        return MHD_YES;
    }
    resp = MHD_create_response_from_buffer(2, (void *)"ok", MHD_RESPMEM_PERSISTENT);
    ret = MHD_queue_response(conn, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ret;
}

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                      enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)conn, (void)toe;
    free(*con_cls);
    *con_cls = NULL;
}

static void *make(void *arg, int i, int fd)
{
    (void)arg, (void)i;
    return MHD_start_daemon(MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME, 0, NULL, NULL, handler,
                            NULL, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_END);
}

static struct mic_loop_ops ops;

static int start(mic_loops **ls, int n, int *port)
{
    struct sockaddr_in sa;

    mic_http_loop_ops(&ops, make);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    pthread_mutex_lock(&lock);
    nparked = 0;
    pthread_mutex_unlock(&lock);
    return mic_loops_start(ls, (struct sockaddr *)&sa, sizeof sa, n, 64, &ops, NULL, port);
}

static int dial(int port)
{
    struct sockaddr_in sa;
    struct timeval tv = {10, 0};
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
        close(fd);
        return -1;
    }
    return fd;
}

static void send_get(int fd, const char *path)
{
    char req[128];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", path);

    assert_int_equal(send(fd, req, (size_t)n, MSG_NOSIGNAL), n);
}

/* Read one response: 1 when it is a 200 with body "ok" (the whole of it
 * within 10 s), 0 otherwise. */
static int got_ok(int fd)
{
    char buf[1024];
    size_t len = 0;

    while (len < sizeof buf - 1) {
        ssize_t n = recv(fd, buf + len, sizeof buf - 1 - len, 0);
        if (n <= 0)
            return 0;
        len += (size_t)n;
        buf[len] = 0;
        if (strstr(buf, "\r\n\r\nok"))
            return strncmp(buf, "HTTP/1.1 200", 12) == 0;
    }
    return 0;
}

/* ---- Tests ---- */

static void handover_wakes_each_thread_once(void **state)
{
    mic_loops *ls;
    struct mic_loops_stats a, b;
    struct timespec until;
    int port, fds[NREQ], distinct = 0;

    (void)state;
    assert_int_equal(start(&ls, 2, &port), MIC_OK);
    for (int i = 0; i < NREQ; i++) {
        assert_true((fds[i] = dial(port)) >= 0);
        send_get(fds[i], "/wait");
    }
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 20;
    pthread_mutex_lock(&lock);
    while (nparked < NREQ && pthread_cond_timedwait(&cond, &lock, &until) == 0)
        ;
    assert_int_equal(nparked, NREQ);
    pthread_mutex_unlock(&lock);
    /* Nothing is answered while suspended. */
    for (int i = 0; i < NREQ; i++) {
        char c;
        assert_int_equal(recv(fds[i], &c, 1, MSG_DONTWAIT), -1);
        assert_int_equal(errno, EAGAIN);
    }
    mic_loops_stats(ls, &a);
    for (int i = 0; i < NREQ; i++) {
        int seen = 0;
        for (int k = 0; k < i; k++)
            seen |= parked[k].loop == parked[i].loop;
        distinct += !seen;
        assert_non_null(parked[i].loop);
        mic_loop_resume(parked[i].loop, &parked[i].res);
    }
    mic_loops_kick(ls);
    for (int i = 0; i < NREQ; i++)
        assert_true(got_ok(fds[i]));
    mic_loops_stats(ls, &b);
    assert_int_equal(b.resumes - a.resumes, NREQ);
    /* One eventfd write per thread that had any (fewer if a thread took
     * its list on a turn of its own), never one per connection. */
    assert_true(b.wakes - a.wakes <= (uint64_t)distinct);
    assert_true(distinct <= 2);
    /* Served on: the same connections take another request. */
    send_get(fds[0], "/now");
    assert_true(got_ok(fds[0]));
    for (int i = 0; i < NREQ; i++)
        close(fds[i]);
    mic_loops_stop(ls);
}

static void quiesce_closes_the_socket(void **state)
{
    mic_loops *ls;
    int port, open_fd, fd;

    (void)state;
    assert_int_equal(start(&ls, 2, &port), MIC_OK);
    assert_true((open_fd = dial(port)) >= 0);
    send_get(open_fd, "/now");
    assert_true(got_ok(open_fd));
    mic_loops_quiesce(ls);
    fd = dial(port);
    assert_int_equal(fd, -1);
    assert_int_equal(errno, ECONNREFUSED);
    send_get(open_fd, "/now");
    assert_true(got_ok(open_fd));
    close(open_fd);
    mic_loops_stop(ls);
}

static void busy_port_fails_cleanly(void **state)
{
    mic_loops *ls, *other = NULL;
    struct sockaddr_in sa;
    int port, port2 = 0;

    (void)state;
    assert_int_equal(start(&ls, 1, &port), MIC_OK);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(mic_loops_start(&other, (struct sockaddr *)&sa, sizeof sa, 2, 64, &ops, NULL,
                                     &port2),
                     MIC_EIO);
    assert_int_equal(errno, EADDRINUSE);
    assert_null(other);
    mic_loops_stop(ls);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(handover_wakes_each_thread_once),
        cmocka_unit_test(quiesce_closes_the_socket),
        cmocka_unit_test(busy_port_fails_cleanly),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
