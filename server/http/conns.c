/* conns.c - connection deadlines and the limit's policy (conns.h).
 *
 * The open connections are a doubly linked list under one mutex, in the
 * order they became idle (the head is the longest idle; a connection that
 * starts a request leaves the list's idle part by moving to the tail with
 * busy set).  libmicrohttpd tells us a connection closed before it closes
 * its socket, and we shutdown(2) a socket only under the mutex, so the
 * descriptor we shut down is always the one we track.  The connections of
 * each client address are counted in a hash table of 'struct addr', under
 * the same mutex (the HTTP threads share it: a limit per daemon would be
 * the limit times the number of threads). */
#define _GNU_SOURCE
#include "conns.h"

#include "core/clock.h"
#include "core/err.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define ADDR_BUCKETS 1024

/* One client address (IPv4 as IPv4-mapped IPv6) and its open connections. */
struct addr {
    struct addr *next;
    unsigned char a[16];
    int n;
};

struct mic_conn {
    struct mic_conn *prev, *next;
    int fd;
    int busy;          /* a request head is complete and not yet answered */
    int closing;       /* shut down by us: not chosen again */
    int64_t idle_ms;   /* waiting for a request head since (monotonic) */
    int64_t head_ms;   /* its request line arrived at, 0: none yet */
    int64_t body_ms;   /* its head was complete at, with its body being read; 0: not */
    uint64_t body_bytes; /* of that body, received so far */
    struct addr *from; /* NULL: an address we do not count (not IP) */
};

struct mic_conns {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_t sweeper;
    int stop;
    struct mic_conn *head, *tail;
    int n, soft_limit, per_addr;
    struct addr *addrs[ADDR_BUCKETS];
    int64_t idle_ms, head_timeout_ms;
    struct mic_conns_stats st;
};

static void unlink_conn(mic_conns *c, struct mic_conn *k)
{
    if (k->prev)
        k->prev->next = k->next;
    else
        c->head = k->next;
    if (k->next)
        k->next->prev = k->prev;
    else
        c->tail = k->prev;
    k->prev = k->next = NULL;
}

static void append(mic_conns *c, struct mic_conn *k)
{
    k->prev = c->tail;
    k->next = NULL;
    if (c->tail)
        c->tail->next = k;
    else
        c->head = k;
    c->tail = k;
}

static void shut(struct mic_conn *k)
{
    k->closing = 1;
    shutdown(k->fd, SHUT_RDWR);
}

static void *sweep_main(void *arg)
{
    mic_conns *c = arg;
    int64_t period = c->head_timeout_ms < c->idle_ms ? c->head_timeout_ms : c->idle_ms;

    period /= 4;
    if (period > 1000)
        period = 1000;
    if (period < 50)
        period = 50;
    pthread_mutex_lock(&c->lock);
    while (!c->stop) {
        struct timespec ts;
        int64_t now = mic_mono_ms();

        for (struct mic_conn *k = c->head; k; k = k->next) {
            if (k->closing)
                continue;
            if (k->body_ms) {
                if (now - k->body_ms > c->head_timeout_ms +
                                       (int64_t)(k->body_bytes * 1000 / MIC_CONNS_BODY_RATE)) {
                    shut(k);
                    c->st.body_closed++;
                }
                continue;
            }
            if (k->busy)
                continue;
            if (k->head_ms && now - k->head_ms > c->head_timeout_ms) {
                shut(k);
                c->st.head_closed++;
            } else if (!k->head_ms && now - k->idle_ms > c->idle_ms) {
                shut(k);
                c->st.idle_closed++;
            }
        }
        mic_mono_deadline(period, &ts);
        pthread_cond_timedwait(&c->cond, &c->lock, &ts);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

int mic_conns_new(mic_conns **out, int soft_limit, int per_addr, int idle_timeout_s,
                  int head_timeout_s)
{
    mic_conns *c = calloc(1, sizeof *c);

    if (!c)
        return MIC_ENOMEM;
    pthread_mutex_init(&c->lock, NULL);
    mic_cond_init_mono(&c->cond);
    c->soft_limit = soft_limit;
    c->per_addr = per_addr;
    c->idle_ms = (int64_t)idle_timeout_s * 1000;
    c->head_timeout_ms = (int64_t)head_timeout_s * 1000;
    if (pthread_create(&c->sweeper, NULL, sweep_main, c)) {
        pthread_cond_destroy(&c->cond);
        pthread_mutex_destroy(&c->lock);
        free(c);
        return MIC_EIO;
    }
    *out = c;
    return MIC_OK;
}

void mic_conns_free(mic_conns *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    c->stop = 1;
    pthread_cond_signal(&c->cond);
    pthread_mutex_unlock(&c->lock);
    pthread_join(c->sweeper, NULL);
    while (c->head) {
        struct mic_conn *k = c->head;
        c->head = k->next;
        free(k);
    }
    for (int i = 0; i < ADDR_BUCKETS; i++)
        while (c->addrs[i]) {
            struct addr *a = c->addrs[i];
            c->addrs[i] = a->next;
            free(a);
        }
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* The 16 bytes of 'sa' (IPv4 mapped into IPv6); 0, or -1 if not IP. */
static int addr_key(const struct sockaddr *sa, unsigned char out[16])
{
    if (sa && sa->sa_family == AF_INET) {
        memset(out, 0, 10);
        out[10] = out[11] = 0xff;
        memcpy(out + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        return 0;
    }
    if (sa && sa->sa_family == AF_INET6) {
        memcpy(out, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
        return 0;
    }
    return -1;
}

/* The bucket of address 'key' (FNV-1a). */
static struct addr **addr_bucket(mic_conns *c, const unsigned char key[16])
{
    uint32_t hsh = 2166136261u;

    for (int i = 0; i < 16; i++)
        hsh = (hsh ^ key[i]) * 16777619u;
    return &c->addrs[hsh % ADDR_BUCKETS];
}

/* With c->lock held: count one more connection from 'sa'; its entry, or
 * NULL (not IP, or out of memory: not counted). */
static struct addr *addr_ref(mic_conns *c, const struct sockaddr *sa)
{
    unsigned char key[16];
    struct addr **b, *a;

    if (addr_key(sa, key))
        return NULL;
    b = addr_bucket(c, key);
    for (a = *b; a; a = a->next)
        if (!memcmp(a->a, key, 16))
            break;
    if (!a) {
        if (!(a = calloc(1, sizeof *a)))
            return NULL;
        memcpy(a->a, key, 16);
        a->next = *b;
        *b = a;
    }
    a->n++;
    return a;
}

/* With c->lock held: one connection of 'a' fewer (the entry goes with
 * the last). */
static void addr_unref(mic_conns *c, struct addr *a)
{
    struct addr **b;

    if (!a || --a->n > 0)
        return;
    for (b = addr_bucket(c, a->a); *b != a; b = &(*b)->next)
        ;
    *b = a->next;
    free(a);
}

mic_conn *mic_conns_open(mic_conns *c, int fd, const struct sockaddr *from)
{
    struct mic_conn *k = calloc(1, sizeof *k);

    if (!k)
        return NULL;
    k->fd = fd;
    k->idle_ms = mic_mono_ms();
    pthread_mutex_lock(&c->lock);
    k->from = addr_ref(c, from);
    if (k->from && k->from->n > c->per_addr) {
        /* Over the per-address limit: closed at once, never served. */
        shut(k);
        c->st.per_addr_closed++;
    } else if (c->n >= c->soft_limit) {
        /* The longest idle first: the list's head part is idle, in order. */
        for (struct mic_conn *v = c->head; v; v = v->next)
            if (!v->busy && !v->closing) {
                shut(v);
                c->st.evicted++;
                break;
            }
    }
    append(c, k);
    c->n++;
    pthread_mutex_unlock(&c->lock);
    return k;
}

void mic_conns_head(mic_conns *c, mic_conn *k)
{
    if (!k)
        return;
    pthread_mutex_lock(&c->lock);
    if (!k->head_ms)
        k->head_ms = mic_mono_ms();
    pthread_mutex_unlock(&c->lock);
}

void mic_conns_body(mic_conns *c, mic_conn *k, size_t n)
{
    if (!k)
        return;
    pthread_mutex_lock(&c->lock);
    if (!k->body_ms) {
        k->body_ms = mic_mono_ms();
        k->body_bytes = 0;
        k->busy = 1;
        k->head_ms = 0;
    }
    k->body_bytes += n;
    pthread_mutex_unlock(&c->lock);
}

void mic_conns_busy(mic_conns *c, mic_conn *k, int busy)
{
    if (!k)
        return;
    pthread_mutex_lock(&c->lock);
    k->busy = busy;
    k->head_ms = 0;
    k->body_ms = 0;
    if (!busy) {
        k->idle_ms = mic_mono_ms();
        unlink_conn(c, k); /* idle again: the most recently idle */
        append(c, k);
    }
    pthread_mutex_unlock(&c->lock);
}

void mic_conns_close(mic_conns *c, mic_conn *k)
{
    if (!k)
        return;
    pthread_mutex_lock(&c->lock);
    unlink_conn(c, k);
    addr_unref(c, k->from);
    c->n--;
    pthread_mutex_unlock(&c->lock);
    free(k);
}

void mic_conns_stats(mic_conns *c, struct mic_conns_stats *st)
{
    pthread_mutex_lock(&c->lock);
    *st = c->st;
    st->open = c->n;
    pthread_mutex_unlock(&c->lock);
}
