/* loops.c - the HTTP threads and their event loops (loops.h).
 *
 * Each loop's 'lock' guards its list of resumes and 'signalled' (an
 * eventfd write is outstanding: the loop has not taken the list since).
 * The loop thread alone touches its daemon; 'stop' and 'quiesce' are read
 * by the loops at every turn, after the eventfd wakes them. */
#define _GNU_SOURCE
#include "loops.h"

#include "core/err.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

struct mic_loop {
    mic_loops *ls;
    void *d;
    pthread_t thread;
    int started;                /* the thread runs */
    int efd, epfd;
    pthread_mutex_t lock;
    struct mic_resume *list;    /* queued resumes, newest first */
    int signalled;
    int quiesced;               /* loop thread only */
};

struct mic_loops {
    int fd;                     /* the listening socket */
    int n;
    const struct mic_loop_ops *ops;
    mic_loop *loop;
    atomic_int stop, quiesce, nquiesced;
    atomic_uint_fast64_t wakes, resumes;
};

static _Thread_local mic_loop *self;

mic_loop *mic_loop_self(void)
{
    return self;
}

static void signal_loop(mic_loop *l)
{
    uint64_t one = 1;

    /* Only fails when the counter would overflow: it is then readable. */
    while (write(l->efd, &one, sizeof one) < 0 && errno == EINTR)
        ;
}

void mic_loop_resume(mic_loop *l, struct mic_resume *r)
{
    pthread_mutex_lock(&l->lock);
    r->next = l->list;
    l->list = r;
    pthread_mutex_unlock(&l->lock);
}

void mic_loops_kick(mic_loops *ls)
{
    for (int i = 0; i < ls->n; i++) {
        mic_loop *l = &ls->loop[i];
        int wake;

        pthread_mutex_lock(&l->lock);
        wake = l->list && !l->signalled;
        if (wake)
            l->signalled = 1;
        pthread_mutex_unlock(&l->lock);
        if (wake) {
            atomic_fetch_add(&ls->wakes, 1);
            signal_loop(l);
        }
    }
}

void mic_loops_stats(mic_loops *ls, struct mic_loops_stats *st)
{
    st->wakes = atomic_load(&ls->wakes);
    st->resumes = atomic_load(&ls->resumes);
}

/* Resume what was handed over (oldest first, as it was finished). */
static void resume_queued(mic_loop *l)
{
    struct mic_resume *list, *rev = NULL;

    pthread_mutex_lock(&l->lock);
    list = l->list;
    l->list = NULL;
    l->signalled = 0;
    pthread_mutex_unlock(&l->lock);
    while (list) {
        struct mic_resume *next = list->next;
        list->next = rev;
        rev = list;
        list = next;
    }
    while (rev) {
        struct mic_resume *next = rev->next;
        l->ls->ops->resume(rev->conn); /* the request is freed in run() only */
        atomic_fetch_add(&l->ls->resumes, 1);
        rev = next;
    }
}

static void *loop_main(void *arg)
{
    mic_loop *l = arg;
    mic_loops *ls = l->ls;

    self = l;
    while (!atomic_load(&ls->stop)) {
        struct epoll_event ev[2];
        int ms = ls->ops->timeout_ms(l->d), n;

        if (ms > 60000)
            ms = 60000;
        n = epoll_wait(l->epfd, ev, 2, ms);
        for (int i = 0; i < n; i++)
            if (ev[i].data.fd == l->efd) {
                uint64_t v;
                if (read(l->efd, &v, sizeof v) < 0 && errno != EAGAIN && errno != EINTR)
                    break;
            }
        if (atomic_load(&ls->quiesce) && !l->quiesced) {
            /* The socket is the loops' (closed once, by mic_loops_quiesce). */
            ls->ops->unlisten(l->d);
            l->quiesced = 1;
            atomic_fetch_add(&ls->nquiesced, 1);
        }
        resume_queued(l);
        ls->ops->run(l->d);
    }
    return NULL;
}

static int listen_on(const struct sockaddr *sa, socklen_t salen, int backlog)
{
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), on = 1, e;

    if (fd < 0)
        return -1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) ||
        (sa->sa_family == AF_INET6 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on)) ||
        bind(fd, sa, salen) || listen(fd, backlog)) {
        e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

static void free_loops(mic_loops *ls)
{
    for (int i = 0; i < ls->n; i++) {
        mic_loop *l = &ls->loop[i];

        if (l->d) {
            /* No thread runs it now: take back the socket, then stop
             * (stopping would close the shared socket). */
            if (!l->quiesced)
                ls->ops->unlisten(l->d);
            resume_queued(l);
            ls->ops->stop(l->d);
        }
        if (l->epfd >= 0)
            close(l->epfd);
        if (l->efd >= 0)
            close(l->efd);
        pthread_mutex_destroy(&l->lock);
    }
    if (ls->fd >= 0)
        close(ls->fd);
    free(ls->loop);
    free(ls);
}

static void join_loops(mic_loops *ls)
{
    atomic_store(&ls->stop, 1);
    for (int i = 0; i < ls->n; i++)
        if (ls->loop[i].started)
            signal_loop(&ls->loop[i]);
    for (int i = 0; i < ls->n; i++)
        if (ls->loop[i].started) {
            pthread_join(ls->loop[i].thread, NULL);
            ls->loop[i].started = 0;
        }
}

int mic_loops_start(mic_loops **out, const struct sockaddr *sa, socklen_t salen, int n,
                    int backlog, const struct mic_loop_ops *ops, void *arg, int *port)
{
    mic_loops *ls = calloc(1, sizeof *ls);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int e;

    if (!ls || !(ls->loop = calloc((size_t)n, sizeof *ls->loop))) {
        free(ls);
        return MIC_ENOMEM;
    }
    ls->n = n;
    ls->ops = ops;
    for (int i = 0; i < n; i++) {
        ls->loop[i].ls = ls;
        ls->loop[i].efd = ls->loop[i].epfd = -1;
        pthread_mutex_init(&ls->loop[i].lock, NULL);
    }
    if ((ls->fd = listen_on(sa, salen, backlog)) < 0 || getsockname(ls->fd, (struct sockaddr *)&ss, &sl))
        goto fail;
    *port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                           : ((struct sockaddr_in *)&ss)->sin_port);
    for (int i = 0; i < n; i++) {
        mic_loop *l = &ls->loop[i];
        struct epoll_event ev;
        int dfd;

        if (!(l->d = ops->make(arg, i, ls->fd)) || (dfd = ops->epoll_fd(l->d)) < 0 ||
            (l->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0 ||
            (l->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0)
            goto fail;
        memset(&ev, 0, sizeof ev);
        ev.events = EPOLLIN;
        ev.data.fd = dfd;
        if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, dfd, &ev))
            goto fail;
        ev.data.fd = l->efd;
        if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->efd, &ev))
            goto fail;
    }
    for (int i = 0; i < n; i++) {
        if ((errno = pthread_create(&ls->loop[i].thread, NULL, loop_main, &ls->loop[i])))
            goto fail;
        ls->loop[i].started = 1;
    }
    *out = ls;
    return MIC_OK;
fail:
    e = errno;
    join_loops(ls);
    free_loops(ls);
    errno = e;
    return MIC_EIO;
}

void mic_loops_quiesce(mic_loops *ls)
{
    struct timespec ts = {0, 1000000};

    if (atomic_exchange(&ls->quiesce, 1))
        return;
    for (int i = 0; i < ls->n; i++)
        signal_loop(&ls->loop[i]);
    for (int i = 0; i < 1000 * ls->n && atomic_load(&ls->nquiesced) < ls->n; i++)
        nanosleep(&ts, NULL);
    if (atomic_load(&ls->nquiesced) == ls->n) {
        close(ls->fd);
        ls->fd = -1;
    }
}

void mic_loops_stop(mic_loops *ls)
{
    if (!ls)
        return;
    join_loops(ls);
    free_loops(ls);
}
