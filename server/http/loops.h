/* loops.h - the HTTP threads: one thread and one event loop for each HTTP
 * daemon, and the hand-over of finished requests.
 *
 * One listening socket (made here) is shared by 'n' daemons, each started
 * by the caller (routes.c: libmicrohttpd in external mode with epoll; this
 * file knows the daemon only through struct mic_loop_ops).  Each daemon
 * has a thread of ours that loops: one epoll_wait over the daemon's epoll
 * descriptor and the loop's own eventfd (at most the daemon's timeout),
 * then the resumes handed over since the last turn (ops->resume, which in
 * external mode makes no system call), then ops->run.  The daemon's
 * handlers and callbacks run in its thread.
 *
 * A request finished in another thread (the writer's sync stage) is handed
 * back with mic_loop_resume, which only links it into its loop's list, and
 * mic_loops_kick, which writes the eventfd of each loop that has anything
 * new: one write per loop for a whole writer batch, not one per
 * connection.
 *
 * Threads: mic_loops_start, mic_loops_quiesce and mic_loops_stop from one
 * controlling thread; mic_loop_resume and mic_loops_kick from any thread;
 * mic_loop_self from any. */
#ifndef MIC_LOOPS_H
#define MIC_LOOPS_H

#include <stdint.h>
#include <sys/socket.h>

typedef struct mic_loops mic_loops;
typedef struct mic_loop mic_loop;

/* A suspended connection to resume, embedded in the caller's request
 * state: it must stay valid until its loop resumed it (the caller frees
 * its request after its daemon reports it completed). */
struct mic_resume {
    struct mic_resume *next;
    void *conn;
};

/* What the loops do with a daemon, in its loop's thread ('d' is what
 * 'make' returned). */
struct mic_loop_ops {
    /* Start daemon 'i' (0 .. n-1) on 'listen_fd' (the loops keep owning
     * the socket): the daemon, or NULL on failure. */
    void *(*make)(void *arg, int i, int listen_fd);
    int (*epoll_fd)(void *d);      /* its epoll descriptor, -1 if none */
    int (*timeout_ms)(void *d);    /* the longest wait allowed now, -1 none */
    void (*run)(void *d);          /* serve what is ready, without waiting */
    void (*resume)(void *conn);    /* resume a suspended connection */
    void (*unlisten)(void *d);     /* let go of the listening socket */
    void (*stop)(void *d);         /* close its connections, free it */
};

/* Listen on 'sa' (backlog 'backlog') and start 'n' daemons with 'ops'
 * (kept by pointer: it must outlive the loops) and their threads.  MIC_OK with *out and the bound port in *port; MIC_EIO when the
 * socket cannot be had (errno kept, for the caller's log), a daemon does
 * not start or a thread cannot be made (nothing is left running);
 * MIC_ENOMEM. */
int mic_loops_start(mic_loops **out, const struct sockaddr *sa, socklen_t salen, int n,
                    int backlog, const struct mic_loop_ops *ops, void *arg, int *port);

/* The loop whose thread is calling, or NULL outside the HTTP threads. */
mic_loop *mic_loop_self(void);

/* Queue 'r' for resumption by loop 'l' (the loop that suspended it); it
 * happens after the next mic_loops_kick, or at the loop's next turn. */
void mic_loop_resume(mic_loop *l, struct mic_resume *r);

/* Wake every loop that has resumes queued and not yet signalled. */
void mic_loops_kick(mic_loops *ls);

/* Figures for /metrics: eventfd writes that woke a loop, and connections
 * resumed through the hand-over. */
struct mic_loops_stats {
    uint64_t wakes, resumes;
};
void mic_loops_stats(mic_loops *ls, struct mic_loops_stats *st);

/* Stop accepting connections (every daemon lets go of the listening
 * socket, which is then closed); open connections are served on.  Waits
 * for each loop to have done so (at most about a second each). */
void mic_loops_quiesce(mic_loops *ls);

/* Stop the threads, resume what is still queued, stop the daemons (which
 * closes every connection), close the socket, free everything.  NULL is
 * ignored. */
void mic_loops_stop(mic_loops *ls);

#endif
