/* loops.h - the HTTP threads: libmicrohttpd daemons in external mode, one
 * thread and one event loop each, and the hand-over of finished requests.
 *
 * One listening socket (made here) is shared by 'n' libmicrohttpd daemons,
 * each started by the caller's 'make' with MHD_USE_EPOLL and no internal
 * thread of libmicrohttpd's.  Each daemon has a thread of ours that loops:
 * one epoll_wait over the daemon's epoll descriptor and the loop's own
 * eventfd (at most libmicrohttpd's timeout), then the resumes handed over
 * since the last turn (MHD_resume_connection, which in external mode makes
 * no system call), then MHD_run.  The handlers and every libmicrohttpd
 * callback of a daemon run in its thread.
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

struct MHD_Daemon;
struct MHD_Connection;
typedef struct mic_loops mic_loops;
typedef struct mic_loop mic_loop;

/* A suspended connection to resume, embedded in the caller's request
 * state: it must stay valid until its loop resumed it (the caller frees
 * its request after libmicrohttpd reports it completed). */
struct mic_resume {
    struct mic_resume *next;
    struct MHD_Connection *conn;
};

/* Starts daemon 'i' (0 .. n-1) on 'listen_fd' (pass it with
 * MHD_OPTION_LISTEN_SOCKET; the loops keep owning it) in external mode
 * with MHD_USE_EPOLL and MHD_ALLOW_SUSPEND_RESUME; NULL on failure. */
typedef struct MHD_Daemon *(*mic_loop_make)(void *arg, int i, int listen_fd);

/* Listen on 'sa' (backlog 'backlog') and start 'n' daemons and their
 * threads.  MIC_OK with *out and the bound port in *port; MIC_EIO when the
 * socket cannot be had (errno kept, for the caller's log), a daemon does
 * not start or a thread cannot be made (nothing is left running);
 * MIC_ENOMEM. */
int mic_loops_start(mic_loops **out, const struct sockaddr *sa, socklen_t salen, int n,
                    int backlog, mic_loop_make make, void *arg, int *port);

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
