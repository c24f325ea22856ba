/* conns.h - the HTTP connections' deadlines and the connection limit's
 * policy (DESIGN section 7: slow clients never block others).
 *
 * libmicrohttpd's own idle timeout starts again at every byte, so a client
 * that sends one header byte every few seconds is never closed, and when
 * its connection limit is reached it refuses every new client, however
 * idle the connections holding the slots.  This module keeps, for every
 * open connection, when it last finished a request and whether one is in
 * progress, and closes (shutdown(2) of the socket, which libmicrohttpd
 * then notices and cleans up in its own thread):
 *
 * - a connection with no request in progress that has been waiting longer
 *   than the idle timeout for its next request head, bytes or no bytes;
 * - a connection whose request line arrived more than the head timeout
 *   ago without its headers being complete;
 * - a connection whose request head is complete but whose body has not
 *   all arrived within the head timeout plus one second for every
 *   MIC_CONNS_BODY_RATE bytes of it received (a body that stops, or
 *   trickles, would hold its slot until libmicrohttpd's idle timeout,
 *   which starts again at every byte, and such a connection is never
 *   chosen to make room);
 * - when a connection beyond 'soft_limit' opens, the connection that has
 *   been idle longest (none with a request in progress -- its body being
 *   read, with the writer, a suspended long-poll -- is ever chosen);
 * - a new connection from a client address that already has 'per_addr'
 *   open (--per-ip-connections, counted across every HTTP thread), at
 *   once.
 *
 * Every function may be called from any thread; none fails after
 * mic_conns_new.  A handle stays valid until mic_conns_close. */
#ifndef MIC_CONNS_H
#define MIC_CONNS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct mic_conns mic_conns;
typedef struct mic_conn mic_conn;

/* The slowest request body accepted, in bytes a second, on top of the
 * head timeout: a 16 MiB body may take the head timeout plus 256 s. */
#define MIC_CONNS_BODY_RATE 65536

/* Start the sweeper thread (it wakes every quarter of the shorter
 * timeout, at most every second).  MIC_OK with *out, or MIC_ENOMEM /
 * MIC_EIO (no thread). */
int mic_conns_new(mic_conns **out, int soft_limit, int per_addr, int idle_timeout_s,
                  int head_timeout_s);
/* Stop the sweeper and free everything (after the HTTP server stopped). */
void mic_conns_free(mic_conns *c);

/* A connection on socket 'fd' from 'from' (NULL or not IP: not counted
 * per address) opened: its handle, or NULL when out of memory (it is then
 * simply not tracked).  Over the soft limit, the longest-idle connection
 * is closed; over the per-address limit, this one. */
mic_conn *mic_conns_open(mic_conns *c, int fd, const struct sockaddr *from);
/* Its request line arrived (the head deadline starts). */
void mic_conns_head(mic_conns *c, mic_conn *k);
/* Its request head is complete and its body is being read: 'n' more
 * bytes of it arrived (0 at the head's end: the body deadline starts). */
void mic_conns_body(mic_conns *c, mic_conn *k, size_t n);
/* Its request is complete, body and all (busy 1: no deadline until it is
 * answered), or answered (busy 0: the idle deadline starts). */
void mic_conns_busy(mic_conns *c, mic_conn *k, int busy);
/* It closed: the handle is freed (NULL is ignored). */
void mic_conns_close(mic_conns *c, mic_conn *k);

/* Connections closed so far: for the idle, head or body deadline, to make
 * room under the soft limit, and over the per-address limit. */
struct mic_conns_stats {
    uint64_t idle_closed, head_closed, body_closed, evicted, per_addr_closed;
    int open;
};
void mic_conns_stats(mic_conns *c, struct mic_conns_stats *st);

#endif
