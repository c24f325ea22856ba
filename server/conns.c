/* conns.c - connection deadlines and the limit's policy (conns.h).
 *
 * The open connections are a doubly linked list under one mutex, in the
 * order they became idle (the head is the longest idle; a connection that
 * starts a request leaves the list's idle part by moving to the tail with
 * busy set).  libmicrohttpd tells us a connection closed before it closes
 * its socket, and we shutdown(2) a socket only under the mutex, so the
 * descriptor we shut down is always the one we track. */
#define _GNU_SOURCE
#include "conns.h"

#include "clock.h"
#include "err.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

struct mic_conn {
    struct mic_conn *prev, *next;
    int fd;
    int busy;          /* a request head is complete and not yet answered */
    int closing;       /* shut down by us: not chosen again */
    int64_t idle_ms;   /* waiting for a request head since (monotonic) */
    int64_t head_ms;   /* its request line arrived at, 0: none yet */
};

struct mic_conns {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_t sweeper;
    int stop;
    struct mic_conn *head, *tail;
    int n, soft_limit;
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
            if (k->busy || k->closing)
                continue;
            if (k->head_ms && now - k->head_ms > c->head_timeout_ms) {
                shut(k);
                c->st.head_closed++;
            } else if (!k->head_ms && now - k->idle_ms > c->idle_ms) {
                shut(k);
                c->st.idle_closed++;
            }
        }
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += period / 1000;
        ts.tv_nsec += (long)(period % 1000) * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&c->cond, &c->lock, &ts);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

int mic_conns_new(mic_conns **out, int soft_limit, int idle_timeout_s, int head_timeout_s)
{
    mic_conns *c = calloc(1, sizeof *c);

    if (!c)
        return MIC_ENOMEM;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cond, NULL);
    c->soft_limit = soft_limit;
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
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

mic_conn *mic_conns_open(mic_conns *c, int fd)
{
    struct mic_conn *k = calloc(1, sizeof *k);

    if (!k)
        return NULL;
    k->fd = fd;
    k->idle_ms = mic_mono_ms();
    pthread_mutex_lock(&c->lock);
    if (c->n >= c->soft_limit) {
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

void mic_conns_busy(mic_conns *c, mic_conn *k, int busy)
{
    if (!k)
        return;
    pthread_mutex_lock(&c->lock);
    k->busy = busy;
    k->head_ms = 0;
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
