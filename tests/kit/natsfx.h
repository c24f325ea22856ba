/* natsfx.h - a real three-node NATS JetStream cluster on loopback for the
 * tests of micd's NATS sink (issue 17, DESIGN sections 10, 11, 13).
 *
 * natsfx_start runs three `nats-server` processes (-js, cluster routes to
 * each other, one store directory each under a temporary directory), on
 * client and cluster ports picked once at random below the kernel's
 * ephemeral range and kept across restarts: a killed node comes back on
 * its own ports, so the others' routes and micd's server list stay right,
 * and no client socket's automatically bound local port can have taken
 * one in between (tests/fault/crashloop.c, pick_port).  Each child has
 * PR_SET_PDEATHSIG(SIGKILL): if the test process dies, the cluster dies
 * with it (the signal follows the thread that forked the node: start and
 * restart nodes from a thread that outlives the cluster, the main one).
 * Every process is stopped by its PID; every wait polls a
 * condition with a bound (no fixed sleeps).
 *
 * A missing nats-server is a failure (message on stderr), never a skip:
 * $NATS_SERVER, else `nats-server` on PATH or in the sbin directories.
 *
 * Functions return 0 on success and -1 on failure (with a line on stderr
 * saying why), except where said otherwise; none calls cmocka, so any test
 * (or a bench) can use them. */
#ifndef MIC_TEST_NATSFX_H
#define MIC_TEST_NATSFX_H

#include <jansson.h>
#include <nats/nats.h>
#include <stddef.h>
#include <sys/types.h>

#define NATSFX_NODES 3

struct natsfx_node {
    pid_t pid;         /* 0 while down */
    int port;          /* client port (kept across restarts) */
    int cport;         /* cluster (route) port (kept too) */
    char name[8];      /* --server_name: n1, n2, n3 */
    char dir[300];     /* -sd store directory (kept across restarts) */
    char log[320];     /* stdout + stderr, appended across restarts */
    char url[64];      /* nats://127.0.0.1:PORT */
};

struct natsfx {
    char base[256];    /* temporary directory holding the nodes' dirs */
    char exe[512];     /* the nats-server binary */
    char cluster[32];  /* --cluster_name */
    char urls[256];    /* the three client URLs, comma-separated (a sink's "url") */
    unsigned seed;     /* rand_r state for the port picks */
    struct natsfx_node n[NATSFX_NODES];
};

/* Pick ports, start the three nodes and wait (up to 'ms') until the
 * cluster has a JetStream meta leader (an account-info request answers
 * through every node).  On failure everything started is stopped and
 * removed.  'c' is zeroed here. */
int natsfx_start(struct natsfx *c, int ms);

/* Stop every running node (SIGTERM, then SIGKILL after a bound, by PID)
 * and remove the temporary directory.  Safe on a zeroed or stopped 'c'. */
void natsfx_stop(struct natsfx *c);

/* SIGKILL node 'i' by its PID and reap it.  Returns -1 if it was not
 * running. */
int natsfx_kill9(struct natsfx *c, int i);

/* Stop node 'i' with SIGTERM (SIGKILL after a bound), by PID. */
int natsfx_term(struct natsfx *c, int i);

/* Start node 'i' again (it must be down) on its own ports and store, and
 * wait (up to 'ms') until it answers a JetStream account-info request. */
int natsfx_restart(struct natsfx *c, int i, int ms);

/* Start node 'i' again (it must be down) on its own ports and store,
 * without waiting: to bring back several nodes at once (one node alone
 * has no JetStream quorum, so it cannot answer before the others). */
int natsfx_spawn(struct natsfx *c, int i);

/* Wait (up to 'ms') until every running node answers a JetStream
 * account-info request (which needs a meta leader). */
int natsfx_await_ready(struct natsfx *c, int ms);

/* 1 if node 'i' is running (its process has not exited), else 0. */
int natsfx_alive(struct natsfx *c, int i);

/* Connect to the cluster (all three URLs, reconnecting for as long as the
 * connection lives, 2 s timeouts) and make a JetStream context.  *nc and
 * *js are the caller's: jsCtx_Destroy, then natsConnection_Destroy. */
int natsfx_connect(struct natsfx *c, natsConnection **nc, jsCtx **js);

/* Create file-stored stream 'name' over 'subject' (e.g. "mic.a.>") with
 * 'replicas' replicas and a 10-minute Nats-Msg-Id duplicate window,
 * retrying (up to 'ms') while the cluster cannot place it yet (no meta
 * leader, a node still catching up); then wait until it has a leader and
 * every replica is current. */
int natsfx_stream_add(struct natsfx *c, jsCtx *js, const char *name, const char *subject,
                      int replicas, int ms);

/* Wait (up to 'ms') until stream 'name' has a leader and 'replicas' - 1
 * followers that are current and online. */
int natsfx_stream_wait_healthy(jsCtx *js, const char *name, int replicas, int ms);

/* The index (0..2) of the node leading stream 'name', or -1 if there is
 * none now (or the stream info cannot be read). */
int natsfx_stream_leader(struct natsfx *c, jsCtx *js, const char *name);

/* How many messages stream 'name' holds (State.Msgs), or -1. */
int64_t natsfx_stream_msgs(jsCtx *js, const char *name);

/* Wait (up to 'ms') until stream 'name' holds at least 'want' messages.
 * Returns the last count read (-1 if none could be read). */
int64_t natsfx_stream_await(jsCtx *js, const char *name, int64_t want, int ms);

/* Every message of stream 'name' (whose subjects are 'subject'), in stream
 * order, read with an ephemeral pull consumer (js_PullSubscribe +
 * natsSubscription_Fetch, each message acked) until as many as State.Msgs said when the read
 * began, bounded by 'ms'.  Stores in *out a new JSON array (the caller's:
 * json_decref) of objects {"stream_seq":N, "subject":S, "data":S,
 * "headers":{KEY:VALUE,...}} (a header's first value).  Returns -1 if the
 * stream cannot be read or not every message came within 'ms'. */
int natsfx_stream_read(jsCtx *js, const char *name, const char *subject, int ms, json_t **out);

/* Over messages as natsfx_stream_read returns them: *total is how many
 * there are, *distinct how many distinct Nats-Msg-Id values they carry,
 * *missing how many carry none. */
void natsfx_count_ids(json_t *msgs, size_t *total, size_t *distinct, size_t *missing);

/* The nats-server at 'url' answers a JetStream account-info request (one
 * connection to it alone, 1 s to connect, no reconnect): 1, else 0.  In a
 * cluster that needs a meta leader. */
int natsfx_js_ready(const char *url);

/* The full path of program 'name' into 'out': $envvar if set (it must be
 * executable), else the first on $PATH or in the sbin directories.
 * Returns 0, or -1 (out then holds the last path tried). */
int natsfx_find_exe(const char *name, const char *envvar, char *out, size_t cap);

/* Header 'key' of message 'm' (as natsfx_stream_read returns it), or NULL. */
const char *natsfx_hdr(json_t *m, const char *key);

#endif
