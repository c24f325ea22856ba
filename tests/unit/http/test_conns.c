/* test_conns.c - the connection policy (server/http/conns.c): the per-address
 * limit counted across every HTTP thread (the third connection of an
 * address with a limit of two is shut at once, a slot freed by a close is
 * taken again, addresses are counted apart, IPv4 and IPv6 alike), and the
 * soft limit closing the longest idle.  Sockets are socketpairs: a
 * connection the policy shuts reads end-of-file on its other end. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "http/conns.h"
#include "core/err.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct pair {
    int ours, peer;
};

static void pair_open(struct pair *p)
{
    int sv[2];

    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    p->ours = sv[0];
    p->peer = sv[1];
}

static void pair_close(struct pair *p)
{
    close(p->ours);
    close(p->peer);
}

/* 1 when the policy shut our end (the peer reads end-of-file). */
static int was_shut(const struct pair *p)
{
    char c;
    ssize_t n = recv(p->peer, &c, 1, MSG_DONTWAIT);

    if (n == 0)
        return 1;
    assert_int_equal(n, -1);
    assert_int_equal(errno, EAGAIN);
    return 0;
}

static struct sockaddr_in v4(const char *a)
{
    struct sockaddr_in sa;

    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    assert_int_equal(inet_pton(AF_INET, a, &sa.sin_addr), 1);
    return sa;
}

static void per_address_limit(void **state)
{
    mic_conns *c;
    struct mic_conns_stats st;
    struct pair p[6];
    mic_conn *k[6];
    struct sockaddr_in a = v4("10.0.0.1"), b = v4("10.0.0.2");
    struct sockaddr_in6 a6;

    (void)state;
    memset(&a6, 0, sizeof a6);
    a6.sin6_family = AF_INET6;
    assert_int_equal(inet_pton(AF_INET6, "2001:db8::1", &a6.sin6_addr), 1);
    assert_int_equal(mic_conns_new(&c, 100, 2, 60, 60), MIC_OK);
    for (int i = 0; i < 6; i++)
        pair_open(&p[i]);
    k[0] = mic_conns_open(c, p[0].ours, (struct sockaddr *)&a);
    k[1] = mic_conns_open(c, p[1].ours, (struct sockaddr *)&a);
    k[2] = mic_conns_open(c, p[2].ours, (struct sockaddr *)&a); /* the third: shut */
    k[3] = mic_conns_open(c, p[3].ours, (struct sockaddr *)&b);
    k[4] = mic_conns_open(c, p[4].ours, (struct sockaddr *)&a6);
    k[5] = mic_conns_open(c, p[5].ours, NULL); /* not IP: not counted */
    for (int i = 0; i < 6; i++)
        assert_non_null(k[i]);
    assert_false(was_shut(&p[0]));
    assert_false(was_shut(&p[1]));
    assert_true(was_shut(&p[2]));
    assert_false(was_shut(&p[3]));
    assert_false(was_shut(&p[4]));
    assert_false(was_shut(&p[5]));
    mic_conns_stats(c, &st);
    assert_int_equal(st.per_addr_closed, 1);
    assert_int_equal(st.evicted, 0);
    assert_int_equal(st.open, 6);
    /* The shut one and one more close: the address has a slot again. */
    mic_conns_close(c, k[2]);
    mic_conns_close(c, k[0]);
    pair_close(&p[2]);
    pair_close(&p[0]);
    pair_open(&p[0]);
    pair_open(&p[2]);
    k[0] = mic_conns_open(c, p[0].ours, (struct sockaddr *)&a);
    assert_false(was_shut(&p[0]));
    k[2] = mic_conns_open(c, p[2].ours, (struct sockaddr *)&a);
    assert_true(was_shut(&p[2]));
    mic_conns_stats(c, &st);
    assert_int_equal(st.per_addr_closed, 2);
    for (int i = 0; i < 6; i++) {
        mic_conns_close(c, k[i]);
        pair_close(&p[i]);
    }
    mic_conns_stats(c, &st);
    assert_int_equal(st.open, 0);
    mic_conns_free(c);
}

static void soft_limit_closes_the_longest_idle(void **state)
{
    mic_conns *c;
    struct mic_conns_stats st;
    struct pair p[4];
    mic_conn *k[4];
    struct sockaddr_in a = v4("10.0.0.3");

    (void)state;
    assert_int_equal(mic_conns_new(&c, 3, 100, 60, 60), MIC_OK);
    for (int i = 0; i < 4; i++)
        pair_open(&p[i]);
    for (int i = 0; i < 3; i++)
        k[i] = mic_conns_open(c, p[i].ours, (struct sockaddr *)&a);
    mic_conns_busy(c, k[0], 1); /* a request in progress: never chosen */
    k[3] = mic_conns_open(c, p[3].ours, (struct sockaddr *)&a);
    assert_false(was_shut(&p[0]));
    assert_true(was_shut(&p[1]));  /* the longest idle of the others */
    assert_false(was_shut(&p[2]));
    assert_false(was_shut(&p[3]));
    mic_conns_stats(c, &st);
    assert_int_equal(st.evicted, 1);
    assert_int_equal(st.per_addr_closed, 0);
    for (int i = 0; i < 4; i++) {
        mic_conns_close(c, k[i]);
        pair_close(&p[i]);
    }
    mic_conns_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(per_address_limit),
        cmocka_unit_test(soft_limit_closes_the_longest_idle),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
