/* routes.c - libmicrohttpd handlers and the route table.
 *
 * A request's life: MHD calls handler() once with no body (we set up a
 * struct req), then with each piece of the body (we copy it, up to
 * --max-body), then once more with none left: we route it.  A read is
 * answered at once from a read transaction.  A write is parsed and
 * validated here, then the connection is suspended *before* its op is
 * handed to the writer (a resume that came before the suspend would be
 * lost); the writer's done() marks the request finished and resumes the
 * connection, and MHD calls handler() again, where the reply is built.
 *
 * This file is the only one that builds HTTP replies; mic_err_http_status()
 * is the only place where an enum mic_err becomes an HTTP status.
 *
 * Every answer goes through queue_reply(), which also writes the request's
 * log line (log_request: method, path, status, duration in us, the error
 * code, the key id when micd has keys) at info, as an access log would
 * (nginx users expect a line per request; --log-level warn drops them and
 * keeps the 5xx lines, logged at warn with the error's message).  Its
 * cost, measured: mic_logger_write of such a line to a file is about 1.1 us (300k
 * lines, one thread); single-event publishes with 32 connections ran
 * 9.6k/s with the lines and 10.2k/s without under the default fsync
 * durability (within the machine's noise, 7.9k-14.1k), and 38.5k/s
 * against 43.7k/s (-12%) with --durability none.  A 405 carries Allow:
 * the methods of the routes its path matches. */
#define _GNU_SOURCE
#include "routes.h"

#include "auth.h"
#include "ops/backup.h"
#include "core/buf.h"
#include "engine/claim.h"
#include "core/clock.h"
#include "conns.h"
#include "core/config.h"
#include "core/err.h"
#include "core/json.h"
#include "core/logger.h"
#include "loops.h"
#include "engine/group.h"
#include "history.h"
#include "metrics.h"
#include "engine/views.h"
#include "engine/publish.h"
#include "engine/replay.h"
#include "engine/topic.h"
#include "ui.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <limits.h>
#include <microhttpd.h>
#include <netdb.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <openssl/rand.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

struct mic_http {
    mic_loops *loops;      /* the HTTP threads (loops.h) */
    struct mic_loop_ops loop_ops;
    const struct mic_config *cfg;
    mic_store *store;
    mic_writer *writer;
    mic_selector *selector; /* POST /v1/replays' selections (replay.h) */
    atomic_int inflight;   /* requests suspended on the writer (or the selector) */
    atomic_uint_fast64_t next_id;
    char id_prefix[9];
    /* API keys (NULL: no --keys, every request allowed), swapped by
     * mic_http_set_keys under the write lock. */
    pthread_rwlock_t keys_lock;
    mic_keys *keys;
    int audit_fd;          /* --audit-log, or -1 */
    mic_conns *conns;      /* deadlines and the connection limits' policy */
    unsigned mhd_flags;    /* of every daemon (make_daemon) */
    char *tls_cert, *tls_key;
    /* GET /v1/stats/history's ring (mic_http_set_history), or NULL. */
    _Atomic(mic_history *) history;
};

/* libmicrohttpd's log lines so far (mhd_log), for /metrics. */
static atomic_uint_fast64_t mhd_complaints;

#define BODY_PREALLOC (64u * 1024)

/* RS_DEFER: a write of a half-closed client, submitted at the next turn
 * (submit). */
enum req_state { RS_NEW, RS_BODY, RS_DEFER, RS_WAITING, RS_DONE };
enum op_kind { OK_NONE, OK_PUBLISH, OK_TOPIC, OK_GROUP, OK_CLAIM, OK_GAP, OK_REPLAY };

struct req {
    mic_http *h;
    struct MHD_Connection *conn;
    mic_loop *loop;          /* the HTTP thread it runs in */
    struct mic_resume res;   /* its hand-over back to that thread */
    char rid[72];
    int route;
    atomic_int state;
    char *body;
    size_t len, cap;
    int too_big;
    int64_t t0_us;
    enum op_kind kind;
    union {
        mic_publish *publish;
        mic_topic_op *topic;
        mic_group_op *group;
        mic_claim *claim;
        mic_gap_skip *gap;
        mic_replay_op *replay;
    } u;
    mic_op *op;
    int submit_err;  /* writer refused the op (429 / 503) */
    unsigned status; /* of the answer queued, 0 before */
    char method[8];
    char path[256];  /* for the request log and the audit log, cut at 255 bytes */
    char code[48];   /* the error code answered, "" for a success (the request log) */
    char allow[40];  /* a 405's Allow header ("GET, PUT, DELETE"), or "" */
    int audited;     /* its audit line is written (when answered, or at the end) */
    int close;       /* answer with Connection: close */
    int complete;    /* the whole request arrived (conns told: busy) */
    int eof_at_request; /* the client had shut its write side down when
                         * its request was read (submit, conn_alive) */
    const char *uri_end; /* the request target's first NUL byte in libmicrohttpd's
                          * buffer, as uri_log saw it (request_line_cut) */
    /* The request's API key (NULL: not authenticated), inside 'keys', the
     * set it was found in, of which the request holds a reference (a
     * reload may replace the set meanwhile). */
    const struct mic_key *key;
    mic_keys *keys;
};

/* ---- Replies ---- */

unsigned mic_err_http_status(int err)
{
    switch (err) {
    case MIC_OK: return MHD_HTTP_OK;
    case MIC_EPARSE: return MHD_HTTP_BAD_REQUEST;
    case MIC_ENOTFOUND: return MHD_HTTP_NOT_FOUND;
    case MIC_EMETHOD: return MHD_HTTP_METHOD_NOT_ALLOWED;
    case MIC_ECONFLICT: return MHD_HTTP_CONFLICT;
    case MIC_ETOOBIG: return MHD_HTTP_CONTENT_TOO_LARGE;
    case MIC_EMEDIA: return MHD_HTTP_UNSUPPORTED_MEDIA_TYPE;
    case MIC_EINVAL: return MHD_HTTP_UNPROCESSABLE_CONTENT;
    case MIC_EBUSY: return MHD_HTTP_TOO_MANY_REQUESTS;
    case MIC_ENOTREADY: return MHD_HTTP_SERVICE_UNAVAILABLE;
    case MIC_ENOSPC: return MHD_HTTP_INSUFFICIENT_STORAGE;
    case MIC_EAUTH: return MHD_HTTP_UNAUTHORIZED;
    case MIC_EFORBIDDEN: return MHD_HTTP_FORBIDDEN;
    case MIC_ECORRUPT: return MHD_HTTP_INTERNAL_SERVER_ERROR; /* "store_corrupt" */
    }
    return MHD_HTTP_INTERNAL_SERVER_ERROR;
}

/* The client error for a failure that is not the request's own fault. */
static void server_error(struct mic_error *e, int err)
{
    switch (err) {
    case MIC_EBUSY:
        mic_error_set(e, err, "overloaded", NULL, "the writer queue is full; retry later");
        break;
    case MIC_ENOTREADY:
        mic_error_set(e, err, "not_ready", NULL, "the server is shutting down");
        break;
    case MIC_ENOSPC:
        mic_error_set(e, err, "storage_full", NULL,
                      "no room for this write: the disk or --map-max is full; "
                      "reads, claims and acks go on");
        break;
    default:
        mic_error_internal(e, err);
    }
}

static void audit(mic_http *h, struct req *r);
static int keys_in_use(mic_http *h);

/* The request's log line (DESIGN section 6, "structured logs with a
 * request id"): one per answered request, at info, or at warn with the
 * error's message for a 5xx:
 *
 *   {"ts":...,"level":"info","req":"a1b2c3d4-2f","msg":"request","method":"PUT",
 *    "path":"/v1/groups/g1","status":"422","us":"181","code":"invalid_request",
 *    "key":"ops-1"}
 *
 * "code" only for an error; "key" only when micd has keys: the key's id,
 * or "-" when the request was refused before one was known.  Values are
 * strings, as in every line of log.c.  --log-level warn keeps only the 5xx
 * lines.  Its cost: formatting into a stack buffer and one write(2) of the
 * line to stderr (not buffered), about 2 us a request (routes.c header). */
static void log_request(struct req *r, unsigned status, const char *message)
{
    int level = status >= 500 ? MIC_LEVEL_WARN : MIC_LEVEL_INFO;
    const char *kv[14] = {0};
    char st[8], us[24];
    int n = 0;

    if (!mic_logger_enabled(level))
        return;
    snprintf(st, sizeof st, "%u", status);
    snprintf(us, sizeof us, "%lld", (long long)(mic_mono_us() - r->t0_us));
    kv[n++] = "method";
    kv[n++] = r->method;
    kv[n++] = "path";
    kv[n++] = r->path;
    kv[n++] = "status";
    kv[n++] = st;
    kv[n++] = "us";
    kv[n++] = us;
    if (r->code[0]) {
        kv[n++] = "code";
        kv[n++] = r->code;
    }
    if (r->key) {
        kv[n++] = "key";
        kv[n++] = r->key->id;
    } else if (keys_in_use(r->h)) {
        kv[n++] = "key";
        kv[n++] = "-";
    }
    if (message) {
        kv[n++] = "message";
        kv[n++] = message;
    }
    /* The first NULL key ends the pairs. */
    mic_logger_write(level, r->rid, level == MIC_LEVEL_WARN ? "request failed" : "request", kv[0], kv[1],
            kv[2], kv[3], kv[4], kv[5], kv[6], kv[7], kv[8], kv[9], kv[10], kv[11], kv[12],
            kv[13], NULL);
}

/* Queue the answer and write its log lines.  'message': a 5xx's error
 * message for the log, else NULL. */
static enum MHD_Result send_reply(struct req *r, unsigned status, const char *ctype, char *body,
                                  size_t len, const char *message);

static enum MHD_Result send_body(struct req *r, unsigned status,
                                 const char *ctype, char *body, size_t len)
{
    return send_reply(r, status, ctype, body, len, NULL);
}

/* Queue 'resp' as the answer 'status' to 'r' (the response is destroyed
 * here): the headers every answer carries (request id; WWW-Authenticate on
 * 401, Allow on 405, Retry-After on 429, Connection: close when the
 * connection closes), then the audit line, the metric and the request log
 * line (with 'message', may be NULL).  Every answer micd builds goes out
 * through here, streamed ones (range reads, backups) included. */
static enum MHD_Result queue_reply(struct req *r, unsigned status, struct MHD_Response *resp,
                                   const char *message)
{
    enum MHD_Result ret;

    MHD_add_response_header(resp, "X-Request-Id", r->rid);
    if (status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED && r->allow[0])
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->allow);
    if (r->close)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    r->status = status;
    if (status == MHD_HTTP_TOO_MANY_REQUESTS)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    /* Logged before it is answered: a client that has the answer finds
     * the line. */
    audit(r->h, r);
    ret = MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    mic_metrics_http(r->route, (int)status);
    log_request(r, status, message);
    return ret;
}

static enum MHD_Result send_reply(struct req *r, unsigned status, const char *ctype, char *body,
                                  size_t len, const char *message)
{
    struct MHD_Response *resp;

    resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    if (ctype)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    return queue_reply(r, status, resp, message);
}

static enum MHD_Result send_buf(struct req *r, unsigned status,
                                struct mic_buf *b)
{
    size_t len;
    char *p;

    if (b->oom) {
        mic_buf_fini(b);
        return MHD_NO;
    }
    p = mic_buf_steal(b, &len);
    return send_body(r, status, "application/json", p, len);
}

static enum MHD_Result send_error(struct req *r, const struct mic_error *e)
{
    struct mic_buf b;
    unsigned status = mic_err_http_status(e->err);

    mic_buf_init(&b);
    mic_buf_puts(&b, "{\"error\":{\"code\":");
    mic_buf_json_str(&b, e->code, strlen(e->code));
    mic_buf_puts(&b, ",\"message\":");
    mic_buf_json_str(&b, e->message, strlen(e->message));
    if (e->field[0]) {
        mic_buf_puts(&b, ",\"field\":");
        mic_buf_json_str(&b, e->field, strlen(e->field));
    }
    mic_buf_puts(&b, "}}");
    snprintf(r->code, sizeof r->code, "%s", e->code);
    if (b.oom) {
        mic_buf_fini(&b);
        return MHD_NO;
    }
    {
        size_t len;
        char *p = mic_buf_steal(&b, &len);

        return send_reply(r, status, "application/json", p, len,
                          status >= 500 ? e->message : NULL);
    }
}

static enum MHD_Result send_empty(struct req *r, unsigned status)
{
    return send_body(r, status, NULL, NULL, 0);
}

/* Reply with 'b' and 'status' if 'rc' is MIC_OK, else with the error 'e'. */
static enum MHD_Result answer(struct req *r, int rc, struct mic_buf *b,
                              const struct mic_error *e, unsigned status)
{
    if (rc) {
        mic_buf_fini(b);
        return send_error(r, e);
    }
    if (status == MHD_HTTP_NO_CONTENT) {
        mic_buf_fini(b);
        return send_empty(r, status);
    }
    return send_buf(r, status, b);
}

/* ---- Writer ops ---- */

/* A peek at the client's side of connection 'conn': 1 while it may still
 * send (nothing or bytes waiting), 0 at the end of its input (it shut its
 * write side down, or closed), -1 on an error (reset: it is gone). */
static int conn_peek(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    char c;
    ssize_t n;

    if (!ci)
        return 1;
    n = recv(ci->connect_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)))
        return 1;
    return n == 0 ? 0 : -1;
}

static void op_done(mic_op *op);

/* Suspend the connection, then hand the op to the writer.
 *
 * A client may shut its write side down once its request is sent (a
 * half-close, HTTP/1.1 allows it).  libmicrohttpd 0.9.75 does not update
 * a connection's event-loop state while it is suspended, and marks it
 * readable when it resumes: a connection suspended in the same turn that
 * read its request still says "read", so on resuming it is read before
 * the handler is called again (unless the daemon's timeout pass happens
 * to visit it first), and on a half-closed one that read finds the end of
 * input and closes the connection with the answer unsent.  So the write
 * of a half-closed client is submitted one turn later: the handler
 * returns without an answer, the daemon moves the connection to "block"
 * (the whole request received, no answer yet) and calls the handler again
 * at once (the connection stays ready), which then suspends it in that
 * state and resumes it without a read. */
static enum MHD_Result submit(struct req *r, mic_op *op)
{
    int rc;

    r->op = op;
    if (atomic_load(&r->state) != RS_DEFER && (r->eof_at_request = conn_peek(r->conn) == 0)) {
        atomic_store(&r->state, RS_DEFER);
        return MHD_YES;
    }
    op->done = op_done;
    op->owner = r;
    atomic_store(&r->state, RS_WAITING);
    atomic_fetch_add(&r->h->inflight, 1);
    MHD_suspend_connection(r->conn);
    if ((rc = mic_writer_submit(r->h->writer, op))) {
        /* Refused (429, 503): answered on the loop's next turn (a resume
         * inside the handler would wait for the next network event). */
        r->submit_err = rc;
        atomic_store(&r->state, RS_DONE);
        atomic_fetch_sub(&r->h->inflight, 1);
        r->res.conn = r->conn;
        mic_loop_resume(r->loop, &r->res);
        mic_loops_kick(r->h->loops);
    }
    return MHD_YES;
}

/* The writer's sync stage (or the writer): queue the resume for the
 * request's HTTP thread; ops_finished wakes that thread once for them all. */
static void op_done(mic_op *op)
{
    struct req *r = op->owner;
    mic_http *h = r->h;

    atomic_store(&r->state, RS_DONE);
    r->res.conn = r->conn;
    mic_loop_resume(r->loop, &r->res);
    atomic_fetch_sub(&h->inflight, 1);
}

static void ops_finished(void *arg)
{
    mic_http *h = arg;

    mic_loops_kick(h->loops);
}

/* ---- Handlers ---- */

typedef enum MHD_Result (*handler_fn)(struct req *r, const char **args);

static enum MHD_Result finish_publish(struct req *r)
{
    struct mic_error e;
    struct mic_buf b;
    int all_dup = 0, rc;

    mic_publish_tally(r->u.publish, mic_metrics_topic);
    mic_buf_init(&b);
    rc = mic_publish_result(r->u.publish, &b, &all_dup, &e);
    return answer(r, rc, &b, &e, all_dup ? MHD_HTTP_OK : MHD_HTTP_CREATED);
}

static enum MHD_Result finish_topic(struct req *r, int del)
{
    struct mic_error e;
    struct mic_buf b;
    int created = 0, rc;

    mic_buf_init(&b);
    rc = mic_topic_op_result(r->u.topic, &b, &created, &e);
    return answer(r, rc, &b, &e, del ? MHD_HTTP_NO_CONTENT : created ? MHD_HTTP_CREATED : MHD_HTTP_OK);
}

static int content_type_ok(struct req *r, struct mic_error *e)
{
    const char *ct = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_TYPE);

    if (mic_json_content_type_ok(ct))
        return 1;
    mic_error_set(e, MIC_EMEDIA, "unsupported_media_type", NULL,
                  "Content-Type must be application/json");
    return 0;
}

static enum MHD_Result h_publish(struct req *r, const char **args)
{
    struct mic_error e;

    (void)args;
    if (!content_type_ok(r, &e) ||
        mic_publish_parse(r->body ? r->body : "", r->len, r->h->cfg,
                          &r->u.publish, &e))
        return send_error(r, &e);
    r->kind = OK_PUBLISH;
    /* Scopes: every event's topic, or nothing of the batch is stored. */
    for (int i = 0; r->key && i < mic_publish_count(r->u.publish); i++)
        if (!mic_key_covers_topic(r->key, mic_publish_topic(r->u.publish, i))) {
            mic_error_set(&e, MIC_EFORBIDDEN, "forbidden", NULL,
                          "key %s may not publish to topic %s", r->key->id,
                          mic_publish_topic(r->u.publish, i));
            return send_error(r, &e);
        }
    return submit(r, mic_publish_op(r->u.publish));
}

static enum MHD_Result h_event_get(struct req *r, const char **args)
{
    struct mic_error e;
    struct mic_buf b;

    mic_buf_init(&b);
    return answer(r, mic_publish_lookup(r->h->store, args[0], strlen(args[0]), r->key, &b, &e), &b, &e,
                  MHD_HTTP_OK);
}

static enum MHD_Result h_topic_list(struct req *r, const char **args)
{
    struct mic_error e;
    struct mic_buf b;

    (void)args;
    mic_buf_init(&b);
    return answer(r, mic_topic_list(r->h->store, r->key, &b, &e), &b, &e, MHD_HTTP_OK);
}

static enum MHD_Result h_topic_get(struct req *r, const char **args)
{
    struct mic_error e;
    struct mic_buf b;

    mic_buf_init(&b);
    return answer(r, mic_topic_get(r->h->store, args[0], &b, &e), &b, &e, MHD_HTTP_OK);
}

static enum MHD_Result h_topic_put(struct req *r, const char **args)
{
    struct mic_error e;

    if ((r->len && !content_type_ok(r, &e)) ||
        mic_topic_put_parse(args[0], r->body ? r->body : "", r->len,
                            r->h->cfg, &r->u.topic, &e))
        return send_error(r, &e);
    r->kind = OK_TOPIC;
    return submit(r, mic_topic_op_base(r->u.topic));
}

static enum MHD_Result h_topic_del(struct req *r, const char **args)
{
    struct mic_error e;

    if (mic_topic_del_parse(args[0], &r->u.topic, &e))
        return send_error(r, &e);
    r->kind = OK_TOPIC;
    return submit(r, mic_topic_op_base(r->u.topic));
}

static enum MHD_Result finish_group(struct req *r, int del)
{
    struct mic_error e;
    struct mic_buf b;
    int created = 0, rc;

    mic_buf_init(&b);
    rc = mic_group_op_result(r->u.group, &b, &created, &e);
    return answer(r, rc, &b, &e, del ? MHD_HTTP_NO_CONTENT : created ? MHD_HTTP_CREATED : MHD_HTTP_OK);
}

static enum MHD_Result finish_claim(struct req *r)
{
    struct mic_error e;
    struct mic_buf b;

    mic_buf_init(&b);
    return answer(r, mic_claim_result(r->u.claim, r->h->store, &b, &e), &b, &e, MHD_HTTP_OK);
}

static enum MHD_Result h_group_list(struct req *r, const char **args)
{
    struct mic_error e;
    struct mic_buf b;

    (void)args;
    mic_buf_init(&b);
    return answer(r, mic_group_list(r->h->store, r->key, &b, &e), &b, &e, MHD_HTTP_OK);
}

static enum MHD_Result h_group_get(struct req *r, const char **args)
{
    struct mic_error e;
    struct mic_buf b;

    mic_buf_init(&b);
    return answer(r, mic_group_get(r->h->store, args[0], &b, &e), &b, &e, MHD_HTTP_OK);
}

static enum MHD_Result h_group_put(struct req *r, const char **args)
{
    struct mic_error e;

    if (!content_type_ok(r, &e) ||
        mic_group_put_parse(args[0], r->body ? r->body : "", r->len, r->h->cfg,
                            &r->u.group, &e))
        return send_error(r, &e);
    r->kind = OK_GROUP;
    return submit(r, mic_group_op_base(r->u.group));
}

static enum MHD_Result h_group_del(struct req *r, const char **args)
{
    struct mic_error e;

    if (mic_group_del_parse(args[0], &r->u.group, &e))
        return send_error(r, &e);
    r->kind = OK_GROUP;
    return submit(r, mic_group_op_base(r->u.group));
}

/* Is the client of a parked long-poll still waiting?  Writer thread.  TCP
 * shows a client that shut its write side down (shutdown(SHUT_WR), which
 * HTTP/1.1 allows once the request is sent) and one that closed its socket
 * the same way: the end of its input.  A client whose input had ended
 * when its request was read half-closed after sending it, and waits for
 * the answer like any other; one whose input ended later, while it waited,
 * is taken to have left (a long-poll that gave up, a worker that died) and
 * is answered as it stands, so that no delivery is leased to it.  A reset
 * connection has left either way. */
static int conn_alive(mic_op *op)
{
    struct req *r = op->owner;
    int p = conn_peek(r->conn);

    return p > 0 || (p == 0 && r->eof_at_request);
}

static enum MHD_Result claim_like(struct req *r, const char *group, int kind)
{
    struct mic_error e;

    if ((r->len && !content_type_ok(r, &e)) ||
        mic_claim_parse(kind, group, r->body ? r->body : "", r->len, r->h->cfg,
                        &r->u.claim, &e))
        return send_error(r, &e);
    r->kind = OK_CLAIM;
    if (kind == MIC_CLAIM)
        mic_claim_op(r->u.claim)->alive = conn_alive;
    return submit(r, mic_claim_op(r->u.claim));
}

static enum MHD_Result h_claim(struct req *r, const char **args)
{
    return claim_like(r, args[0], MIC_CLAIM);
}

static enum MHD_Result h_ack(struct req *r, const char **args)
{
    return claim_like(r, args[0], MIC_ACK);
}

static enum MHD_Result h_nack(struct req *r, const char **args)
{
    return claim_like(r, args[0], MIC_NACK);
}

static enum MHD_Result h_extend(struct req *r, const char **args)
{
    return claim_like(r, args[0], MIC_EXTEND);
}

static enum MHD_Result h_requeue(struct req *r, const char **args)
{
    return claim_like(r, args[0], MIC_REQUEUE);
}

static enum MHD_Result h_skip(struct req *r, const char **args)
{
    return claim_like(r, args[0], MIC_SKIP);
}

static enum MHD_Result h_dlq_list(struct req *r, const char **args)
{
    struct mic_error e;
    struct mic_buf b;

    mic_buf_init(&b);
    return answer(r, mic_views_dlq(r->h->store, args[0],
                           MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "after"),
                           MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "limit"),
                           &b, &e), &b, &e, MHD_HTTP_OK);
}

static enum MHD_Result h_blocked(struct req *r, const char **args)
{
    struct mic_error e;
    struct mic_buf b;

    mic_buf_init(&b);
    return answer(r, mic_views_blocked(r->h->store, args[0],
                          MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "reason"),
                          MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "limit"),
                          &b, &e), &b, &e, MHD_HTTP_OK);
}

static enum MHD_Result h_aggregate(struct req *r, const char **args)
{
    struct mic_error e;
    struct mic_buf b;

    mic_buf_init(&b);
    return answer(r, mic_views_aggregate(r->h->store, args[0], args[1], &b, &e), &b, &e, MHD_HTTP_OK);
}

static enum MHD_Result h_gap_skip(struct req *r, const char **args)
{
    struct mic_error e;

    if (mic_gap_skip_parse(args[0], args[1], args[2], &r->u.gap, &e))
        return send_error(r, &e);
    r->kind = OK_GAP;
    return submit(r, mic_gap_skip_op(r->u.gap));
}

static enum MHD_Result finish_gap(struct req *r)
{
    struct mic_error e;
    struct mic_buf b;

    mic_buf_init(&b);
    return answer(r, mic_gap_skip_result(r->u.gap, &b, &e), &b, &e, MHD_HTTP_OK);
}

static ssize_t range_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    ssize_t n = mic_range_read(cls, buf, max);

    (void)pos;
    if (n == 0)
        return MHD_CONTENT_READER_END_OF_STREAM;
    if (n < 0)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    return n;
}

static void range_free(void *cls)
{
    mic_range_close(cls);
}

static enum MHD_Result h_range(struct req *r, const char **args)
{
    const char *accept = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_ACCEPT);
    const char *from = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "from");
    const char *to = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "to");
    const char *after = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "after");
    struct mic_error e;
    struct mic_buf b;

    if (accept && strstr(accept, "application/x-ndjson")) {
        struct MHD_Response *resp;
        mic_range *rg;

        if (mic_range_open(r->h->store, args[0], from, to, after, &rg, &e))
            return send_error(r, &e);
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 256 * 1024,
                                                 range_reader, rg, range_free);
        if (!resp) {
            mic_range_close(rg);
            return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/x-ndjson");
        return queue_reply(r, MHD_HTTP_OK, resp, NULL);
    }
    mic_buf_init(&b);
    if (mic_range_page(r->h->store, args[0], from, to, after,
                       MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "limit"),
                       &b, &e)) {
        mic_buf_fini(&b);
        return send_error(r, &e);
    }
    return send_buf(r, MHD_HTTP_OK, &b);
}

/* The selector's thread: the selection of 'o' is made (rc), so hand the
 * op to the writer, or answer what stopped it. */
static void replay_selected(mic_replay_op *o, int rc, void *arg)
{
    struct req *r = arg;

    (void)o;
    if (rc == MIC_OK && (rc = mic_writer_submit(r->h->writer, r->op)) == MIC_OK)
        return; /* op_done resumes it */
    if (rc == MIC_EBUSY || rc == MIC_ENOTREADY)
        r->submit_err = rc; /* else the op's error (mic_replay_op_result) */
    atomic_store(&r->state, RS_DONE);
    atomic_fetch_sub(&r->h->inflight, 1);
    r->res.conn = r->conn;
    mic_loop_resume(r->loop, &r->res);
    mic_loops_kick(r->h->loops);
}

/* POST /v1/replays: parsed here, selected in the selector's thread (the
 * connection suspended meanwhile, before the hand-over as in submit()),
 * then recorded by the writer. */
static enum MHD_Result h_replay_post(struct req *r, const char **args)
{
    struct mic_error e;
    int rc;

    (void)args;
    if (!content_type_ok(r, &e) ||
        mic_replay_create_parse(r->h->store, r->body ? r->body : "", r->len, r->h->cfg,
                                &r->u.replay, &e))
        return send_error(r, &e);
    r->kind = OK_REPLAY;
    r->op = mic_replay_op_base(r->u.replay);
    r->op->done = op_done;
    r->op->owner = r;
    atomic_store(&r->state, RS_WAITING);
    atomic_fetch_add(&r->h->inflight, 1);
    MHD_suspend_connection(r->conn);
    if ((rc = mic_selector_submit(r->h->selector, r->u.replay, replay_selected, r))) {
        r->submit_err = rc;
        atomic_store(&r->state, RS_DONE);
        atomic_fetch_sub(&r->h->inflight, 1);
        r->res.conn = r->conn;
        mic_loop_resume(r->loop, &r->res);
        mic_loops_kick(r->h->loops);
    }
    return MHD_YES;
}

static enum MHD_Result h_replay_del(struct req *r, const char **args)
{
    struct mic_error e;

    if (mic_replay_delete_parse(args[0], &r->u.replay, &e))
        return send_error(r, &e);
    r->kind = OK_REPLAY;
    return submit(r, mic_replay_op_base(r->u.replay));
}

static enum MHD_Result h_replay_list(struct req *r, const char **args)
{
    struct mic_error e;
    struct mic_buf b;

    (void)args;
    mic_buf_init(&b);
    return answer(r, mic_replay_list(r->h->store, &b, &e), &b, &e, MHD_HTTP_OK);
}

static enum MHD_Result h_replay_get(struct req *r, const char **args)
{
    struct mic_error e;
    struct mic_buf b;

    mic_buf_init(&b);
    return answer(r, mic_replay_get(r->h->store, args[0], &b, &e), &b, &e, MHD_HTTP_OK);
}

static enum MHD_Result finish_replay(struct req *r, int del)
{
    struct mic_error e;
    struct mic_buf b;

    mic_buf_init(&b);
    return answer(r, mic_replay_op_result(r->u.replay, &b, &e), &b, &e,
                  del ? MHD_HTTP_NO_CONTENT : MHD_HTTP_CREATED);
}

static enum MHD_Result h_stats(struct req *r, const char **args)
{
    struct mic_error e;
    struct mic_buf b;
    int rc;

    (void)args;
    mic_buf_init(&b);
    if ((rc = mic_metrics_stats(r->h->store, r->key, &b)))
        server_error(&e, rc);
    return answer(r, rc, &b, &e, MHD_HTTP_OK);
}

static enum MHD_Result h_oldest(struct req *r, const char **args)
{
    struct mic_error e;
    struct mic_buf b;

    mic_buf_init(&b);
    return answer(r, mic_views_oldest(r->h->store, args[0],
                                      MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "limit"),
                                      &b, &e),
                  &b, &e, MHD_HTTP_OK);
}

static enum MHD_Result h_healthz(struct req *r, const char **args)
{
    (void)args;
    return send_body(r, MHD_HTTP_OK, "application/json",
                     strdup("{\"status\":\"ok\"}"), 15);
}

static const char *not_ready_reason(mic_http *h)
{
    struct mic_writer_stats st;
    struct statvfs vfs;
    uint64_t size, used, max;

    mic_writer_stats(h->writer, &st);
    if (!st.alive)
        return "writer stopped";
    mic_store_usage(h->store, &size, &used, &max);
    if (st.full)
        return "storage_full: the last write found no room on the disk or in --map-max "
               "(publishes answer 507; reads, claims and acks go on)";
    if (max - used < max / 100)
        return "store map nearly full (less than 1% of --map-max left)";
    if (statvfs(h->cfg->data_dir, &vfs) == 0) {
        /* 64 MiB, or 5% of a filesystem smaller than 1.25 GiB */
        uint64_t total = (uint64_t)vfs.f_blocks * vfs.f_frsize, low = 64ull << 20;
        if (total / 20 < low)
            low = total / 20;
        if ((uint64_t)vfs.f_bavail * vfs.f_frsize < low)
            return "disk nearly full (less than 64 MiB, or 5% of a small filesystem, left)";
    }
    return NULL;
}

static enum MHD_Result h_readyz(struct req *r, const char **args)
{
    const char *why = not_ready_reason(r->h);
    struct mic_buf b;

    (void)args;
    mic_buf_init(&b);
    if (!why) {
        mic_buf_puts(&b, "{\"status\":\"ready\"}");
        return send_buf(r, MHD_HTTP_OK, &b);
    }
    mic_buf_puts(&b, "{\"status\":\"not_ready\",\"reason\":");
    mic_buf_json_str(&b, why, strlen(why));
    mic_buf_puts(&b, "}");
    return send_buf(r, MHD_HTTP_SERVICE_UNAVAILABLE, &b);
}

static enum MHD_Result h_metrics(struct req *r, const char **args)
{
    struct mic_buf b;
    size_t len;
    char *p;

    (void)args;
    mic_buf_init(&b);
    if (mic_metrics_render(r->h->store, r->h->writer, r->key, &b)) {
        mic_buf_fini(&b);
        return MHD_NO;
    }
    {
        struct mic_conns_stats cs;
        struct mic_loops_stats ls;

        mic_conns_stats(r->h->conns, &cs);
        mic_loops_stats(r->h->loops, &ls);
        mic_buf_printf(&b,
            "# HELP mic_http_connections Open HTTP connections.\n"
            "# TYPE mic_http_connections gauge\n"
            "mic_http_connections %d\n"
            "# HELP mic_http_connections_closed_total Connections micd closed: idle past the idle "
            "timeout, a request head past the head timeout, a request body past the head timeout "
            "(plus 1 s per 64 KiB of it), the longest idle when a client came over "
            "--max-connections, or a new one over --per-ip-connections.\n"
            "# TYPE mic_http_connections_closed_total counter\n"
            "mic_http_connections_closed_total{reason=\"idle\"} %llu\n"
            "mic_http_connections_closed_total{reason=\"head\"} %llu\n"
            "mic_http_connections_closed_total{reason=\"body\"} %llu\n"
            "mic_http_connections_closed_total{reason=\"evicted\"} %llu\n"
            "mic_http_connections_closed_total{reason=\"per_address\"} %llu\n"
            "# HELP mic_http_protocol_errors_total Complaints of libmicrohttpd about "
            "connections (malformed requests, resets); the log shows ten a minute at most.\n"
            "# TYPE mic_http_protocol_errors_total counter\n"
            "mic_http_protocol_errors_total %llu\n"
            "# HELP mic_http_resumes_total Requests handed back to the HTTP threads once the "
            "writer finished them (made durable).\n"
            "# TYPE mic_http_resumes_total counter\n"
            "mic_http_resumes_total %llu\n"
            "# HELP mic_http_wakes_total Wake-ups of an HTTP thread for such hand-overs (one "
            "per thread and writer batch at most).\n"
            "# TYPE mic_http_wakes_total counter\n"
            "mic_http_wakes_total %llu\n",
            cs.open, (unsigned long long)cs.idle_closed, (unsigned long long)cs.head_closed,
            (unsigned long long)cs.body_closed, (unsigned long long)cs.evicted,
            (unsigned long long)cs.per_addr_closed,
            (unsigned long long)atomic_load(&mhd_complaints), (unsigned long long)ls.resumes,
            (unsigned long long)ls.wakes);
    }
    mic_backup_metrics(&b);
    p = mic_buf_steal(&b, &len);
    return send_body(r, MHD_HTTP_OK, "text/plain; version=0.0.4", p, len);
}

/* ---- Backup (backup.h) ----
 *
 * The body comes from a content reader that never blocks: when the
 * backup's ring is empty it suspends the connection and returns 0; the
 * pump thread's backup_wake hands the connection back to its loop, which
 * resumes it.  That resume cannot come before the suspend: the loop runs
 * the resumes handed to it between rounds of its daemon, and the reader
 * runs inside a round.  No Content-Length: the compacted size is known
 * only at the end; a copy that fails after the 200 went out ends the
 * chunked body without its last chunk, so the client sees an incomplete
 * transfer, never a short file that looks whole.
 *
 * A client that stops reading (--backup-stall-timeout, backup.h): the
 * backup ends itself once the client took no bytes for the timeout; the
 * connection, which libmicrohttpd no longer hands to the reader (it cannot
 * send), gets the timeout plus a second as its own timeout (when shorter
 * than --idle-timeout), so that libmicrohttpd closes it then, without the
 * last chunk.  A backup's connection closes after it (Connection: close),
 * so that timeout never applies to a next request on it.  Suspended
 * connections (a copy slower than its client) are never timed out. */

struct backup_ctx {
    mic_backup *b;
    mic_http *h;
    mic_loop *loop;
    struct MHD_Connection *conn;
    struct mic_resume res;   /* valid until the response is freed */
};

static void backup_wake(void *arg)
{
    struct backup_ctx *k = arg;

    k->res.conn = k->conn;
    mic_loop_resume(k->loop, &k->res);
    mic_loops_kick(k->h->loops);
}

static ssize_t backup_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct backup_ctx *k = cls;
    ssize_t n = mic_backup_read(k->b, buf, max);

    (void)pos;
    if (n > 0)
        return n;
    if (n == MIC_BACKUP_AGAIN) {
        MHD_suspend_connection(k->conn);
        return 0;
    }
    return n == MIC_BACKUP_END ? MHD_CONTENT_READER_END_OF_STREAM
                               : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void backup_free(void *cls)
{
    struct backup_ctx *k = cls;

    mic_backup_close(k->b);
    free(k);
}

static enum MHD_Result h_backup(struct req *r, const char **args)
{
    struct backup_ctx *k = calloc(1, sizeof *k);
    struct MHD_Response *resp;
    struct mic_error e;
    char disp[96], stamp[32];
    time_t now = (time_t)(mic_now_us() / 1000000);
    struct tm tm;
    int rc;

    (void)args;
    if (!k)
        return MHD_NO;
    k->h = r->h;
    k->loop = r->loop;
    k->conn = r->conn;
    if ((rc = mic_backup_start(&k->b, r->h->store, r->h->cfg->backup_rate,
                               r->h->cfg->backup_stall_timeout_s, backup_wake, k))) {
        free(k);
        if (rc == MIC_ECONFLICT)
            mic_error_set(&e, rc, "backup_running", NULL,
                          "a backup is already running: one at a time; retry once it ended");
        else
            server_error(&e, rc);
        return send_error(r, &e);
    }
    resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 256 * 1024, backup_reader, k,
                                             backup_free);
    if (!resp) {
        backup_free(k);
        return MHD_NO;
    }
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
    snprintf(disp, sizeof disp, "attachment; filename=\"mic-backup-%s.mdb\"", stamp);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_DISPOSITION, disp);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (r->h->cfg->backup_stall_timeout_s < r->h->cfg->idle_timeout_s - 1)
        MHD_set_connection_option(r->conn, MHD_CONNECTION_OPTION_TIMEOUT,
                                  (unsigned)r->h->cfg->backup_stall_timeout_s + 1);
    r->close = 1;
    return queue_reply(r, MHD_HTTP_OK, resp, NULL);
}

/* ---- The admin page and its routes (issue 18; ui.h, history.h) ---- */

/* One embedded file of the page (ui.h): 200, or 304 when If-None-Match
 * names its ETag; never a key needed (the files hold no data). */
static enum MHD_Result send_ui(struct req *r, const char *path)
{
    const char *inm = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
                                                  MHD_HTTP_HEADER_IF_NONE_MATCH);
    struct MHD_Response *resp;
    struct mic_ui_file f;
    unsigned status;

    if (!mic_ui_find(path, &f))
        return MHD_NO; /* every route below names a file of ui.c's table */
    status = mic_ui_not_modified(inm, f.etag) ? MHD_HTTP_NOT_MODIFIED : MHD_HTTP_OK;
    resp = MHD_create_response_from_buffer(status == MHD_HTTP_OK ? f.len : 0, (void *)f.data,
                                           MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    if (status == MHD_HTTP_OK)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, f.content_type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, f.etag);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, MIC_UI_CACHE);
    MHD_add_response_header(resp, "Content-Security-Policy", MIC_UI_CSP);
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    return queue_reply(r, status, resp, NULL);
}

static enum MHD_Result h_ui(struct req *r, const char **args)
{
    (void)args;
    return send_ui(r, "/ui");
}

static enum MHD_Result h_ui_js(struct req *r, const char **args)
{
    (void)args;
    return send_ui(r, "/ui/app.js");
}

static enum MHD_Result h_ui_css(struct req *r, const char **args)
{
    (void)args;
    return send_ui(r, "/ui/app.css");
}

/* GET /v1/whoami: the key's id and role, {"key_id":null,"role":"admin"}
 * without keys (every request may do everything then). */
static enum MHD_Result h_whoami(struct req *r, const char **args)
{
    const char *role = r->key ? mic_role_name(r->key->role) : "admin";
    struct mic_buf b;

    (void)args;
    mic_buf_init(&b);
    mic_buf_puts(&b, "{\"key_id\":");
    if (r->key)
        mic_buf_json_str(&b, r->key->id, strlen(r->key->id));
    else
        mic_buf_puts(&b, "null");
    mic_buf_puts(&b, ",\"role\":");
    mic_buf_json_str(&b, role, strlen(role));
    mic_buf_puts(&b, "}");
    return send_buf(r, MHD_HTTP_OK, &b);
}

static enum MHD_Result h_history(struct req *r, const char **args)
{
    mic_history *hist = atomic_load(&r->h->history);
    struct mic_error e;
    struct mic_buf b;
    int rc;

    (void)args;
    mic_buf_init(&b);
    if (!hist)
        rc = mic_error_set(&e, MIC_ENOTREADY, "not_ready", NULL,
                           "this micd keeps no history (see its log)");
    else if ((rc = mic_history_render(hist, r->key, &b)))
        server_error(&e, rc);
    return answer(r, rc, &b, &e, MHD_HTTP_OK);
}

void mic_http_set_history(mic_http *h, mic_history *hist)
{
    atomic_store(&h->history, hist);
}

/* ---- Route table ---- */

#define SC_OPEN MIC_SCOPE_OPEN
#define SC_TOPIC MIC_SCOPE_TOPIC
#define SC_GROUP MIC_SCOPE_GROUP
#define SC_ALL MIC_SCOPE_ALL
#define SC_SELF MIC_SCOPE_SELF

struct route {
    const char *method;
    const char *path;  /* segments; "*" captures one */
    const char *name;  /* metrics label */
    handler_fn fn;
    int perm;          /* enum mic_perm: tests/system/test_auth.c fails on MIC_PERM_UNSET */
    int scope;         /* enum mic_scope */
};

#define R(m, p, n, f, perm, sc) {m, p, n, f, MIC_PERM_##perm, sc}
static const struct route routes[] = {
    R("POST", "/v1/events", "/v1/events", h_publish, PUBLISH, SC_SELF),
    R("GET", "/v1/events/*", "/v1/events/{id}", h_event_get, INSPECT, SC_SELF),
    R("GET", "/v1/topics", "/v1/topics", h_topic_list, TOPICS, SC_SELF),
    R("GET", "/v1/topics/*", "/v1/topics/{topic}", h_topic_get, TOPICS, SC_TOPIC),
    R("GET", "/v1/topics/*/events", "/v1/topics/{topic}/events", h_range, RANGE, SC_TOPIC),
    R("PUT", "/v1/topics/*", "/v1/topics/{topic}", h_topic_put, ADMIN, SC_TOPIC),
    R("DELETE", "/v1/topics/*", "/v1/topics/{topic}", h_topic_del, ADMIN, SC_TOPIC),
    R("GET", "/v1/groups", "/v1/groups", h_group_list, GROUPS, SC_SELF),
    R("GET", "/v1/groups/*", "/v1/groups/{group}", h_group_get, GROUPS, SC_GROUP),
    R("PUT", "/v1/groups/*", "/v1/groups/{group}", h_group_put, ADMIN, SC_GROUP),
    R("DELETE", "/v1/groups/*", "/v1/groups/{group}", h_group_del, ADMIN, SC_GROUP),
    R("POST", "/v1/groups/*/claim", "/v1/groups/{group}/claim", h_claim, CONSUME, SC_GROUP),
    R("POST", "/v1/groups/*/ack", "/v1/groups/{group}/ack", h_ack, CONSUME, SC_GROUP),
    R("POST", "/v1/groups/*/nack", "/v1/groups/{group}/nack", h_nack, CONSUME, SC_GROUP),
    R("POST", "/v1/groups/*/extend", "/v1/groups/{group}/extend", h_extend, CONSUME, SC_GROUP),
    R("GET", "/v1/groups/*/dlq", "/v1/groups/{group}/dlq", h_dlq_list, GROUPS, SC_GROUP),
    R("POST", "/v1/groups/*/dlq/requeue", "/v1/groups/{group}/dlq/requeue", h_requeue, ADMIN,
      SC_GROUP),
    R("POST", "/v1/groups/*/dlq/skip", "/v1/groups/{group}/dlq/skip", h_skip, ADMIN, SC_GROUP),
    R("GET", "/v1/groups/*/blocked", "/v1/groups/{group}/blocked", h_blocked, GROUPS, SC_GROUP),
    R("GET", "/v1/aggregates/*/*", "/v1/aggregates/{type}/{id}", h_aggregate, INSPECT, SC_ALL),
    R("POST", "/v1/aggregates/*/*/gaps/*/skip", "/v1/aggregates/{type}/{id}/gaps/{version}/skip",
      h_gap_skip, ADMIN, SC_ALL),
    R("POST", "/v1/replays", "/v1/replays", h_replay_post, ADMIN, SC_ALL),
    R("GET", "/v1/replays", "/v1/replays", h_replay_list, MONITOR, SC_ALL),
    R("GET", "/v1/replays/*", "/v1/replays/{run_id}", h_replay_get, MONITOR, SC_ALL),
    R("DELETE", "/v1/replays/*", "/v1/replays/{run_id}", h_replay_del, ADMIN, SC_ALL),
    R("GET", "/v1/stats", "/v1/stats", h_stats, MONITOR, SC_SELF),
    R("GET", "/v1/groups/*/oldest", "/v1/groups/{group}/oldest", h_oldest, GROUPS, SC_GROUP),
    R("GET", "/healthz", "/healthz", h_healthz, OPEN, SC_OPEN),
    R("GET", "/readyz", "/readyz", h_readyz, OPEN, SC_OPEN),
    R("GET", "/metrics", "/metrics", h_metrics, MONITOR, SC_SELF),
    R("GET", "/v1/backup", "/v1/backup", h_backup, ADMIN, SC_ALL),
    /* The admin page (issue 18): its files are open, its data is not. */
    R("GET", "/ui", "/ui", h_ui, OPEN, SC_OPEN),
    R("GET", "/ui/", "/ui/", h_ui, OPEN, SC_OPEN),
    R("GET", "/ui/app.js", "/ui/app.js", h_ui_js, OPEN, SC_OPEN),
    R("GET", "/ui/app.css", "/ui/app.css", h_ui_css, OPEN, SC_OPEN),
    R("GET", "/v1/whoami", "/v1/whoami", h_whoami, TOPICS, SC_SELF),
    R("GET", "/v1/stats/history", "/v1/stats/history", h_history, MONITOR, SC_SELF),
};
#undef R
#define NROUTES (int)(sizeof routes / sizeof routes[0])

int mic_http_route(int i, struct mic_route_info *out)
{
    if (i < 0 || i >= NROUTES)
        return 0;
    out->method = routes[i].method;
    out->name = routes[i].name;
    out->perm = routes[i].perm;
    out->scope = routes[i].scope;
    return 1;
}
#define ROUTE_UNKNOWN NROUTES
static const char *route_names[NROUTES + 1];

#define MAX_SEGS 8
#define MAX_ARGS 4

/* Match 'url' against 'pattern'; captured segments are copied into
 * 'store' and pointed to by args. */
static int match(const char *pattern, const char *url, const char **args,
                 char *store, size_t cap)
{
    int nargs = 0;
    size_t used = 0;

    while (*pattern && *url) {
        const char *pe, *ue;
        size_t pl, ul;

        if (*pattern != '/' || *url != '/')
            return 0;
        pattern++;
        url++;
        pe = strchrnul(pattern, '/');
        ue = strchrnul(url, '/');
        pl = (size_t)(pe - pattern);
        ul = (size_t)(ue - url);
        if (pl == 1 && *pattern == '*') {
            if (ul == 0 || nargs == MAX_ARGS || used + ul + 1 > cap)
                return 0;
            memcpy(store + used, url, ul);
            store[used + ul] = 0;
            args[nargs++] = store + used;
            used += ul + 1;
        } else if (pl != ul || memcmp(pattern, url, pl)) {
            return 0;
        }
        pattern = pe;
        url = ue;
    }
    return *pattern == 0 && *url == 0;
}

/* ---- Who may do what (DESIGN section 13) ---- */

#define SECRET_MAX 512

/* Authenticate the request: MIC_OK with r->key, or MIC_EAUTH with 'e'. */
static int authenticate(struct req *r, struct mic_error *e)
{
    const char *v = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
                                                MHD_HTTP_HEADER_AUTHORIZATION);
    const struct mic_key *k;
    size_t n;

    if (!v)
        return mic_error_set(e, MIC_EAUTH, "unauthorized", NULL,
                             "an API key is needed: Authorization: Bearer SECRET");
    if (strncasecmp(v, "Bearer ", 7) != 0)
        return mic_error_set(e, MIC_EAUTH, "unauthorized", NULL,
                             "the Authorization header is Bearer SECRET");
    v += 7;
    while (*v == ' ')
        v++;
    n = strlen(v);
    while (n > 0 && v[n - 1] == ' ')
        n--;
    if (n == 0 || n > SECRET_MAX)
        return mic_error_set(e, MIC_EAUTH, "unauthorized", NULL,
                             "the Authorization header is Bearer SECRET");
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)v[i] <= 0x20 || (unsigned char)v[i] >= 0x7f)
            return mic_error_set(e, MIC_EAUTH, "unauthorized", NULL,
                                 "the secret is printable ASCII without spaces");
    pthread_rwlock_rdlock(&r->h->keys_lock);
    if ((k = mic_keys_find(r->h->keys, v, n))) {
        r->key = k;
        r->keys = mic_keys_ref(r->h->keys); /* released in completed() */
    }
    pthread_rwlock_unlock(&r->h->keys_lock);
    if (!k)
        return mic_error_set(e, MIC_EAUTH, "unauthorized", NULL, "unknown API key");
    return MIC_OK;
}

/* Does the authenticated key allow route 'rt' with captured 'args'?
 * MIC_OK, or MIC_EFORBIDDEN with 'e'. */
static int authorize(struct req *r, const struct route *rt, const char **args,
                     struct mic_error *e)
{
    const char *role = mic_role_name(r->key->role);

    if (!mic_perm_allows(rt->perm, r->key->role))
        return mic_error_set(e, MIC_EFORBIDDEN, "forbidden", NULL,
                             "key %s (%s) may not %s %s", r->key->id, role, rt->method,
                             rt->name);
    switch (rt->scope) {
    case SC_TOPIC:
        if (!mic_key_covers_topic(r->key, args[0]))
            return mic_error_set(e, MIC_EFORBIDDEN, "forbidden", NULL,
                                 "key %s's scopes do not cover topic %s", r->key->id, args[0]);
        break;
    case SC_GROUP:
        if (!mic_key_covers_group(r->key, args[0]))
            return mic_error_set(e, MIC_EFORBIDDEN, "forbidden", NULL,
                                 "key %s's scopes do not cover group %s", r->key->id, args[0]);
        break;
    case SC_ALL:
        if (!mic_key_covers_all(r->key))
            return mic_error_set(e, MIC_EFORBIDDEN, "forbidden", NULL,
                                 "%s %s needs a key with scope *", rt->method, rt->name);
        break;
    }
    return MIC_OK;
}

static int keys_in_use(mic_http *h)
{
    int on;

    pthread_rwlock_rdlock(&h->keys_lock);
    on = h->keys != NULL;
    pthread_rwlock_unlock(&h->keys_lock);
    return on;
}

static enum MHD_Result dispatch(struct req *r, const char *url,
                                const char *method)
{
    const char *args[MAX_ARGS];
    char store[1024];
    struct mic_error e;
    int path_found = 0, guarded = keys_in_use(r->h);

    /* With keys, everything but the open routes needs a known key, before
     * anything about the path is told. */
    for (int i = 0; guarded && i < NROUTES; i++)
        if (routes[i].perm == MIC_PERM_OPEN &&
            match(routes[i].path, url, args, store, sizeof store))
            guarded = 0;
    if (guarded && authenticate(r, &e))
        return send_error(r, &e);
    for (int i = 0; i < NROUTES; i++) {
        if (!match(routes[i].path, url, args, store, sizeof store))
            continue;
        path_found = 1;
        r->route = i;
        if (strcmp(routes[i].method, method) != 0)
            continue;
        if (guarded && authorize(r, &routes[i], args, &e))
            return send_error(r, &e);
        return routes[i].fn(r, args);
    }
    r->route = ROUTE_UNKNOWN;
    if (path_found) {
        /* Allow: every method of the routes this path matches, in table
         * order (RFC 9110 section 15.5.6). */
        size_t n = 0;

        for (int i = 0; i < NROUTES; i++)
            if (match(routes[i].path, url, args, store, sizeof store) &&
                !strstr(r->allow, routes[i].method) &&
                n + strlen(routes[i].method) + 3 < sizeof r->allow)
                n += (size_t)snprintf(r->allow + n, sizeof r->allow - n, "%s%s", n ? ", " : "",
                                      routes[i].method);
        mic_error_set(&e, MIC_EMETHOD, "method_not_allowed", NULL,
                      "%s is not allowed on %.200s (allowed: %s)", method, url, r->allow);
    }
    else
        mic_error_set(&e, MIC_ENOTFOUND, "not_found", NULL, "no route %.200s%s", url,
                      strlen(url) > 200 ? "..." : "");
    return send_error(r, &e);
}

/* ---- libmicrohttpd callbacks ---- */

/* "<prefix>-<n in hex>" into 'out' (72 bytes; every request has one, so
 * not through snprintf). */
static void make_rid(char *out, const char *prefix, uint64_t n)
{
    static const char hex[] = "0123456789abcdef";
    char t[16];
    size_t k = 0, pl = strlen(prefix);

    do {
        t[k++] = hex[n & 15];
        n >>= 4;
    } while (n);
    memcpy(out, prefix, pl);
    out[pl++] = '-';
    while (k)
        out[pl++] = t[--k];
    out[pl] = 0;
}

static void request_id(mic_http *h, struct req *r)
{
    const char *v = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
                                                "X-Request-Id");
    size_t n = v ? strlen(v) : 0;
    int ok = n > 0 && n <= 64;

    for (size_t i = 0; ok && i < n; i++)
        ok = (v[i] >= 'a' && v[i] <= 'z') || (v[i] >= 'A' && v[i] <= 'Z') ||
             (v[i] >= '0' && v[i] <= '9') || v[i] == '.' || v[i] == '_' ||
             v[i] == '-';
    if (ok)
        memcpy(r->rid, v, n + 1);
    else
        make_rid(r->rid, h->id_prefix, (uint64_t)atomic_fetch_add(&h->next_id, 1));
}

static enum MHD_Result finish(struct req *r)
{
    struct mic_error e;

    if (r->submit_err) {
        server_error(&e, r->submit_err);
        return send_error(r, &e);
    }
    if (r->op->result) {
        server_error(&e, r->op->result);
        return send_error(r, &e);
    }
    switch (r->kind) {
    case OK_PUBLISH:
        return finish_publish(r);
    case OK_TOPIC:
        return finish_topic(r, strcmp(routes[r->route].method, "DELETE") == 0);
    case OK_GROUP:
        return finish_group(r, strcmp(routes[r->route].method, "DELETE") == 0);
    case OK_CLAIM:
        return finish_claim(r);
    case OK_GAP:
        return finish_gap(r);
    case OK_REPLAY:
        return finish_replay(r, strcmp(routes[r->route].method, "DELETE") == 0);
    case OK_NONE:
        break;
    }
    return MHD_NO;
}

/* The deadline tracker's handle of a connection (conns.h), or NULL. */
static mic_conn *conn_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

    return ci ? ci->socket_context : NULL;
}

struct framing {
    int lengths, chunked;
    char first[32];
    int differ;
};

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
    struct framing *f = cls;

    (void)kind;
    if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
        if (f->lengths++ == 0)
            snprintf(f->first, sizeof f->first, "%s", value ? value : "");
        else if (strcmp(f->first, value ? value : ""))
            f->differ = 1;
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
        f->chunked = 1;
    }
    return MHD_YES;
}

static int framing_ambiguous(struct MHD_Connection *conn)
{
    struct framing f = {0};

    MHD_get_connection_values(conn, MHD_HEADER_KIND, count_framing, &f);
    return f.differ || (f.chunked && f.lengths);
}

/* libmicrohttpd 0.9 hands the request line's method, target and version
 * over as C strings, each cut at the first NUL byte in it: unchecked,
 * "DELETE /v1/groups/a\0b" deletes group a and "PUT\0X /v1/topics/t" is a
 * PUT (the %00 of a percent-encoded target is unescape's concern).  A NUL
 * is never part of a valid request line (RFC 9112 section 3), so 1 here
 * refuses the line.  This reads 0.9's parse of the line, in place in its
 * buffer: "METHOD\0 [spaces]TARGET\0VERSION", the separators overwritten
 * with NULs, 'url' and 'version' pointing into it, and uri_log called on
 * the target before anything else in it changes (r->uri_end).  When the
 * pointers are not laid out so (no version: HTTP/0.9, which 0.9 refuses
 * itself; another libmicrohttpd), nothing is checked. */
static int request_line_cut(const struct req *r, const char *method, const char *url,
                            const char *version)
{
#if MHD_VERSION < 0x01000000
    uintptr_t m = (uintptr_t)method, u = (uintptr_t)url, v = (uintptr_t)version;
    const char *p;

    if (!(m < u && u < v && v - m < 65536))
        return 0;
    for (p = method + strlen(method) + 1; p < url && *p == ' '; p++)
        ;
    if (p != url)
        return 1; /* more method after a NUL */
    return r->uri_end && r->uri_end != version - 1;
#else
    (void)r;
    (void)method;
    (void)url;
    (void)version;
    return 0;
#endif
}

/* Refuse a request before its body (413, or 400 closing: nothing read in). */
static enum MHD_Result refuse_head(struct req *r, int close, struct mic_error *e)
{
    atomic_store(&r->state, RS_DONE);
    r->too_big = 1; /* no body is read into memory */
    r->close = close;
    return send_error(r, e);
}

/* Fill 'e' with the 413 of a body over --max-body. */
static void body_too_large(const mic_http *h, struct mic_error *e)
{
    mic_error_set(e, MIC_ETOOBIG, "body_too_large", NULL,
                  "request bodies are at most %llu bytes",
                  (unsigned long long)h->cfg->max_body);
}

/* The first call of a request (its head is complete): make its req (or
 * take uri_log's), refuse a bad line, framing or length, room for the body. */
static enum MHD_Result request_head(mic_http *h, struct MHD_Connection *conn, const char *url,
                                    const char *method, const char *version, void **con_cls)
{
    struct req *r = *con_cls;
    struct mic_error e;
    const char *cl;

    if (!r && !(r = calloc(1, sizeof *r)))
        return MHD_NO;
    r->h = h;
    r->conn = conn;
    r->loop = mic_loop_self();
    r->route = ROUTE_UNKNOWN;
    r->t0_us = mic_mono_us();
    atomic_init(&r->state, RS_BODY);
    request_id(h, r);
    *con_cls = r;
    snprintf(r->method, sizeof r->method, "%s", method);
    snprintf(r->path, sizeof r->path, "%.255s", url);
    /* The head is complete: the body deadline until the request is
     * (conns.h), refused here or not (libmicrohttpd may still read
     * the body it was sent to discard it). */
    mic_conns_body(h->conns, conn_of(conn), 0);
    if (request_line_cut(r, method, url, version)) {
        mic_error_set(&e, MIC_EPARSE, "bad_request", NULL,
                      "a NUL byte in the request line");
        return refuse_head(r, 1, &e);
    }
    if (framing_ambiguous(conn)) {
        /* Behind a proxy, two lengths (or a length and chunks) let
         * one side read a second request where the other sees a
         * body: refuse, and close. */
        mic_error_set(&e, MIC_EPARSE, "bad_request", NULL,
                      "two Content-Length headers that differ, or Transfer-Encoding "
                      "with Content-Length");
        return refuse_head(r, 1, &e);
    }
    cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) <= h->cfg->max_body && strtoull(cl, NULL, 10) > 0) {
        /* Room for a small body at once (no growing copies); a large
         * one grows as its bytes arrive, so a client that only claims
         * a size gets no memory for it. */
        size_t want = (size_t)strtoull(cl, NULL, 10) + 1;
        if (want > BODY_PREALLOC)
            want = BODY_PREALLOC;
        if ((r->body = malloc(want)))
            r->cap = want;
    }
    if (cl && strtoull(cl, NULL, 10) > h->cfg->max_body) {
        body_too_large(h, &e);
        return refuse_head(r, 0, &e);
    }
    return MHD_YES;
}

/* Append 'n' bytes of body to r->body (NUL-terminated), or only count
 * them past --max-body (r->too_big). */
static enum MHD_Result request_body(struct req *r, struct MHD_Connection *conn,
                                    const char *upload, size_t n)
{
    mic_http *h = r->h;

    mic_conns_body(h->conns, conn_of(conn), n);
    if (r->too_big || r->len + n > h->cfg->max_body) {
        r->too_big = 1;
        return MHD_YES;
    }
    if (r->len + n + 1 > r->cap) {
        size_t cap = r->cap ? r->cap : 256;
        char *p;
        while (cap < r->len + n + 1)
            cap *= 2;
        if (!(p = realloc(r->body, cap)))
            return MHD_NO;
        r->body = p;
        r->cap = cap;
    }
    memcpy(r->body + r->len, upload, n);
    r->len += n;
    r->body[r->len] = 0;
    return MHD_YES;
}

/* The request is all in (or called again while answered): dispatch it,
 * answer the 413 of a body too large, or go on where its state says. */
static enum MHD_Result request_complete(struct req *r, struct MHD_Connection *conn,
                                        const char *url, const char *method)
{
    mic_http *h = r->h;
    struct mic_error e;

    if (!r->complete) { /* all of it arrived: no deadline until answered */
        r->complete = 1;
        mic_conns_busy(h->conns, conn_of(conn), 1);
    }
    switch (atomic_load(&r->state)) {
    case RS_DONE:
        if (r->too_big && !r->op)
            return MHD_YES; /* the 413 is already queued */
        return finish(r);
    case RS_WAITING:
        return MHD_YES; /* spurious: still with the writer */
    case RS_DEFER:
        return submit(r, r->op); /* a half-closed client's, one turn later */
    default:
        break;
    }
    if (r->too_big) {
        body_too_large(h, &e);
        atomic_store(&r->state, RS_DONE);
        return send_error(r, &e);
    }
    atomic_store(&r->state, RS_NEW);
    return dispatch(r, url, method);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *conn,
                               const char *url, const char *method,
                               const char *version, const char *upload,
                               size_t *upload_size, void **con_cls)
{
    struct req *r = *con_cls;
    size_t n = *upload_size;

    if (!r || !r->h) /* its first call (r from uri_log, or NULL) */
        return request_head(cls, conn, url, method, version, con_cls);
    if (n) {
        *upload_size = 0;
        return request_body(r, conn, upload, n);
    }
    return request_complete(r, conn, url, method);
}

/* One audit line (DESIGN section 13) for a request that changes state, is
 * an admin's (GET /v1/backup), or was refused 401/403: no secret and no
 * payload goes in it. */
static void audit(mic_http *h, struct req *r)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    char remote[INET6_ADDRSTRLEN] = "", st[8];
    struct mic_buf b;

    if (r->audited)
        return;
    r->audited = 1;
    if (h->audit_fd < 0 || (r->status != MHD_HTTP_UNAUTHORIZED &&
                            r->status != MHD_HTTP_FORBIDDEN && (!strcmp(r->method, "GET") ||
                                                                !strcmp(r->method, "HEAD")) &&
                            !(r->route >= 0 && r->route < NROUTES &&
                              routes[r->route].perm == MIC_PERM_ADMIN)))
        return;
    if (ci && ci->client_addr) {
        const struct sockaddr *sa = ci->client_addr;
        if (sa->sa_family == AF_INET)
            inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, remote, sizeof remote);
        else if (sa->sa_family == AF_INET6)
            inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, remote,
                      sizeof remote);
    }
    mic_buf_init(&b);
    mic_buf_puts(&b, "{\"time\":");
    mic_buf_json_time(&b, mic_now_us());
    mic_buf_puts(&b, ",\"request_id\":");
    mic_buf_json_str(&b, r->rid, strlen(r->rid));
    mic_buf_puts(&b, ",\"key_id\":");
    if (r->key)
        mic_buf_json_str(&b, r->key->id, strlen(r->key->id));
    else
        mic_buf_puts(&b, "null");
    mic_buf_puts(&b, ",\"remote\":");
    mic_buf_json_str(&b, remote, strlen(remote));
    mic_buf_puts(&b, ",\"method\":");
    mic_buf_json_str(&b, r->method, strlen(r->method));
    mic_buf_puts(&b, ",\"path\":");
    mic_buf_json_str(&b, r->path, strlen(r->path));
    snprintf(st, sizeof st, "%u", r->status);
    mic_buf_puts(&b, ",\"status\":");
    mic_buf_puts(&b, r->status ? st : "null");
    mic_buf_puts(&b, "}\n");
    /* One write(2) of the whole line on an O_APPEND descriptor: lines of
     * concurrent requests never interleave. */
    if (!b.oom && write(h->audit_fd, b.p, b.len) != (ssize_t)b.len)
        mic_logger_write(MIC_LEVEL_WARN, r->rid, "cannot write the audit log", "error", strerror(errno), NULL);
    mic_buf_fini(&b);
}

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                      enum MHD_RequestTerminationCode toe)
{
    struct req *r = *con_cls;

    (void)toe;
    if (!r)
        return;
    if (!r->h) { /* uri_log's, never handled (the head never completed) */
        free(r);
        *con_cls = NULL;
        return;
    }
    audit(cls, r); /* one that was never answered (logged once) */
    mic_conns_busy(((mic_http *)cls)->conns, conn_of(conn), 0);
    switch (r->kind) {
    case OK_PUBLISH:
        mic_publish_free(r->u.publish);
        break;
    case OK_TOPIC:
        mic_topic_op_free(r->u.topic);
        break;
    case OK_GROUP:
        mic_group_op_free(r->u.group);
        break;
    case OK_CLAIM:
        mic_claim_free(r->u.claim);
        break;
    case OK_GAP:
        mic_gap_skip_free(r->u.gap);
        break;
    case OK_REPLAY:
        mic_replay_op_free(r->u.replay);
        break;
    case OK_NONE:
        break;
    }
    mic_keys_free(r->keys);
    free(r->body);
    free(r);
    *con_cls = NULL;
}

static void notify_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                              enum MHD_ConnectionNotificationCode code)
{
    mic_http *h = cls;

    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ai =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        *socket_context = ci ? mic_conns_open(h->conns, ci->connect_fd,
                                              ai ? ai->client_addr : NULL) : NULL;
    } else {
        mic_conns_close(h->conns, *socket_context);
        *socket_context = NULL;
    }
}

/* The request line arrived: its head deadline starts.  The value becomes
 * the request's first con_cls: a struct req that only knows where the
 * target's first NUL is (request_line_cut; NULL when out of memory, and
 * handler() makes one), which handler() fills in at its first call or
 * completed() frees. */
static void *uri_log(void *cls, const char *uri, struct MHD_Connection *conn)
{
    mic_http *h = cls;
    struct req *r = calloc(1, sizeof *r);

    mic_conns_head(h->conns, conn_of(conn));
    if (r && uri)
        r->uri_end = uri + strlen(uri);
    return r;
}

static int hexv(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Percent-decoding of the path and the query, in place, except %00: a
 * NUL would cut the name short (DELETE /v1/groups/zz%00x must not be
 * DELETE /v1/groups/zz), so it stays "%00", which no name allows. */
static size_t unescape(void *cls, struct MHD_Connection *conn, char *s)
{
    char *w = s;

    (void)cls;
    (void)conn;
    for (char *p = s; *p; p++) {
        int hi, lo;

        if (*p == '%' && (hi = hexv(p[1])) >= 0 && (lo = hexv(p[2])) >= 0 && (hi || lo)) {
            *w++ = (char)(hi << 4 | lo);
            p += 2;
        } else {
            *w++ = *p;
        }
    }
    *w = 0;
    return (size_t)(w - s);
}

/* libmicrohttpd's complaints about malformed connections: a few lines a
 * minute at most (a fuzzer would fill the log), each one counted
 * (mhd_complaints). */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static int64_t window_ms;
    static unsigned in_window, dropped;
    int64_t now = mic_mono_ms();
    unsigned drop_report = 0;
    int say;
    char msg[512];

    (void)cls;
    vsnprintf(msg, sizeof msg, fmt, ap);
    /* Printed by the 0.9.75 thread pool even when the logger comes first. */
    if (strncmp(msg, "MHD_OPTION_EXTERNAL_LOGGER is not the first", 43) == 0)
        return;
    msg[strcspn(msg, "\n")] = 0;
    atomic_fetch_add(&mhd_complaints, 1);
    pthread_mutex_lock(&lock);
    if (now - window_ms >= 60000) {
        drop_report = dropped;
        window_ms = now;
        in_window = dropped = 0;
    }
    say = in_window < 10;
    if (say)
        in_window++;
    else
        dropped++;
    pthread_mutex_unlock(&lock);
    if (drop_report) {
        char n[16];
        snprintf(n, sizeof n, "%u", drop_report);
        mic_logger_write(MIC_LEVEL_WARN, NULL, "libmicrohttpd: lines left out in the last minute",
                "count", n, NULL);
    }
    if (say)
        mic_logger_write(MIC_LEVEL_WARN, NULL, "libmicrohttpd", "detail", msg, NULL);
}

/* ---- Start and stop ---- */

static int parse_listen(const char *s, struct sockaddr_storage *ss)
{
    char host[128];
    const char *colon = strrchr(s, ':');
    struct addrinfo hints, *ai;
    size_t hl;
    int rc;

    if (!colon)
        return -1;
    hl = (size_t)(colon - s);
    if (hl >= sizeof host)
        return -1;
    memcpy(host, s, hl);
    host[hl] = 0;
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = 0;
    }
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
    if ((rc = getaddrinfo(host[0] ? host : NULL, colon + 1, &hints, &ai)))
        return -1;
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    freeaddrinfo(ai);
    return 0;
}

static const struct MHD_OptionItem no_options[] = {{MHD_OPTION_END, 0, NULL}};

static void free_http(mic_http *h)
{
    mic_selector_stop(h->selector);
    mic_conns_free(h->conns);
    if (h->audit_fd >= 0)
        close(h->audit_fd);
    if (h->tls_key)
        OPENSSL_cleanse(h->tls_key, strlen(h->tls_key));
    free(h->tls_key);
    free(h->tls_cert);
    mic_keys_free(h->keys);
    pthread_rwlock_destroy(&h->keys_lock);
    free(h);
}

int mic_http_listen_is_loopback(const char *listen)
{
    struct sockaddr_storage ss;

    if (parse_listen(listen, &ss))
        return -1;
    if (ss.ss_family == AF_INET)
        return (ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr) >> 24) == 127;
    if (ss.ss_family == AF_INET6) {
        const struct in6_addr *a = &((struct sockaddr_in6 *)&ss)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) ||
               (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return 0;
}

/* The PEM file at 'path' (at most 1 MiB), NUL-terminated: the caller's
 * (free it), or NULL with errno set. */
static char *read_file(const char *path, size_t *len)
{
    struct mic_buf b;
    int rc;

    mic_buf_init(&b);
    if ((rc = mic_buf_read_file(&b, path, (size_t)1 << 20))) {
        mic_buf_fini(&b);
        if (rc == MIC_ETOOBIG)
            errno = EFBIG;
        return NULL;
    }
    if (!b.p && !(b.p = calloc(1, 1))) /* an empty file: "" */
        return NULL;
    *len = b.len;
    return b.p;
}

int mic_http_tls_check(const char *cert_path, const char *key_path, char *why, size_t whylen)
{
    size_t clen = 0, klen = 0;
    char *cert = read_file(cert_path, &clen), *key = read_file(key_path, &klen);
    BIO *cb = NULL, *kb = NULL;
    X509 *x = NULL;
    EVP_PKEY *pk = NULL;
    int rc = MIC_EINVAL;

    if (!cert)
        snprintf(why, whylen, "cannot read the certificate %s: %s", cert_path, strerror(errno));
    else if (!key)
        snprintf(why, whylen, "cannot read the private key %s: %s", key_path, strerror(errno));
    else if (!(cb = BIO_new_mem_buf(cert, (int)clen)) || !(x = PEM_read_bio_X509(cb, NULL, NULL, NULL)))
        snprintf(why, whylen, "%s holds no PEM certificate", cert_path);
    else if (!(kb = BIO_new_mem_buf(key, (int)klen)) ||
             !(pk = PEM_read_bio_PrivateKey(kb, NULL, NULL, (void *)"")))
        snprintf(why, whylen, "%s holds no PEM private key (or it is encrypted)", key_path);
    else if (X509_check_private_key(x, pk) != 1)
        snprintf(why, whylen, "the private key %s does not match the certificate %s", key_path,
                 cert_path);
    else
        rc = MIC_OK;
    EVP_PKEY_free(pk);
    X509_free(x);
    BIO_free(kb);
    BIO_free(cb);
    if (key)
        OPENSSL_cleanse(key, klen);
    free(key);
    free(cert);
    return rc;
}

void mic_http_set_keys(mic_http *h, mic_keys *keys)
{
    mic_keys *old;

    pthread_rwlock_wrlock(&h->keys_lock);
    old = h->keys;
    h->keys = keys;
    pthread_rwlock_unlock(&h->keys_lock);
    mic_keys_free(old);
}

/* ---- libmicrohttpd under the HTTP threads (loops.h) ---- */

static int mhd_epoll_fd(void *d)
{
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_EPOLL_FD);

    return info ? info->epoll_fd : -1;
}

static int mhd_timeout_ms(void *d)
{
    MHD_UNSIGNED_LONG_LONG to;

    if (MHD_get_timeout(d, &to) != MHD_YES)
        return -1;
    return to > INT_MAX ? INT_MAX : (int)to;
}

static unsigned mhd_connections(void *d)
{
    const union MHD_DaemonInfo *info =
        MHD_get_daemon_info(d, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);

    return info ? info->num_connections : 0;
}

/* One round of the daemon.  A round that closed connections runs again:
 * libmicrohttpd cleans closed connections up at the end of a round and
 * puts the listening socket back into its epoll set (taken out at the
 * connection limit) only at the start of the next one, and nothing else
 * may come to wake this thread for that next one -- so connections
 * waiting to be accepted, whose arrival the closes made room for (a
 * connection over --max-connections evicting an idle one, conns.h), would
 * wait for an unrelated event. */
static void mhd_run(void *d)
{
    unsigned before = mhd_connections(d);

    MHD_run(d);
    if (mhd_connections(d) < before)
        MHD_run(d);
}

static void mhd_resume(void *conn)
{
    MHD_resume_connection(conn);
}

/* The socket is the loops' (closed once, by them). */
static void mhd_unlisten(void *d)
{
    (void)MHD_quiesce_daemon(d);
}

static void mhd_stop(void *d)
{
    MHD_stop_daemon(d);
}

void mic_http_loop_ops(struct mic_loop_ops *ops, void *(*make)(void *arg, int i, int listen_fd))
{
    ops->make = make;
    ops->epoll_fd = mhd_epoll_fd;
    ops->timeout_ms = mhd_timeout_ms;
    ops->run = mhd_run;
    ops->resume = mhd_resume;
    ops->unlisten = mhd_unlisten;
    ops->stop = mhd_stop;
}

/* Daemon 'i' of the HTTP threads (loops.h), on the shared socket 'fd'.
 * The connection limit is shared out as libmicrohttpd's thread pool does;
 * the per-address limit is conns.c's, across all of them. */
static void *make_daemon(void *arg, int i, int fd)
{
    mic_http *h = arg;
    const struct mic_config *cfg = h->cfg;
    /* Room above --max-connections: a new client is accepted, and the
     * longest-idle connection closed to make room (conns.h). */
    unsigned limit = (unsigned)cfg->max_connections +
                     (cfg->max_connections / 16 > 16 ? cfg->max_connections / 16 : 16);
    unsigned n = (unsigned)cfg->http_threads, share = limit / n + ((unsigned)i < limit % n);

    return MHD_start_daemon(
        h->mhd_flags, 0, NULL, NULL, handler, h,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h,
        /* TLS 1.2 or later (GnuTLS priority string); ignored without TLS. */
        h->tls_cert ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_ARRAY, h->tls_cert ? (void *)h->tls_cert : (void *)no_options,
        h->tls_cert ? MHD_OPTION_HTTPS_MEM_KEY : MHD_OPTION_ARRAY, h->tls_cert ? (void *)h->tls_key : (void *)no_options,
        h->tls_cert ? MHD_OPTION_HTTPS_PRIORITIES : MHD_OPTION_ARRAY,
        h->tls_cert ? (void *)"NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2" : (void *)no_options,
        MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
        MHD_OPTION_CONNECTION_LIMIT, share ? share : 1u,
        MHD_OPTION_NOTIFY_CONNECTION, notify_connection, h,
        MHD_OPTION_URI_LOG_CALLBACK, uri_log, h,
        MHD_OPTION_UNESCAPE_CALLBACK, unescape, h,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->idle_timeout_s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)8 * 1024,
        MHD_OPTION_NOTIFY_COMPLETED, completed, h,
        MHD_OPTION_END);
}

int mic_http_start(mic_http **out, const struct mic_config *cfg,
                   mic_store *s, mic_writer *w, mic_keys *keys, int *port)
{
    mic_http *h = calloc(1, sizeof *h);
    struct sockaddr_storage ss;
    unsigned char rnd[4];
    size_t len;

    if (!h) {
        mic_keys_free(keys);
        return MIC_ENOMEM;
    }
    pthread_rwlock_init(&h->keys_lock, NULL);
    h->keys = keys;
    h->audit_fd = -1;
    if (parse_listen(cfg->listen, &ss)) {
        mic_logger_write(MIC_LEVEL_ERROR, NULL, "cannot parse listen address", "listen",
                cfg->listen, NULL);
        goto fail;
    }
    if (cfg->audit_log[0] &&
        (h->audit_fd = open(cfg->audit_log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600)) < 0) {
        mic_logger_write(MIC_LEVEL_ERROR, NULL, "cannot open the audit log", "path", cfg->audit_log,
                "error", strerror(errno), NULL);
        goto fail;
    }
    if (cfg->tls_cert[0] && (!(h->tls_cert = read_file(cfg->tls_cert, &len)) ||
                             !(h->tls_key = read_file(cfg->tls_key, &len)))) {
        mic_logger_write(MIC_LEVEL_ERROR, NULL, "cannot read the TLS files", NULL);
        goto fail;
    }
    if (mic_conns_new(&h->conns, cfg->max_connections, cfg->per_ip_connections, cfg->idle_timeout_s,
                      cfg->head_timeout_s)) {
        mic_logger_write(MIC_LEVEL_ERROR, NULL, "cannot start the connection sweeper", NULL);
        goto fail;
    }
    h->cfg = cfg;
    h->store = s;
    h->writer = w;
    if (mic_selector_start(&h->selector, s, cfg->replay_select_share)) {
        mic_logger_write(MIC_LEVEL_ERROR, NULL, "cannot start the replay selector", NULL);
        goto fail;
    }
    if (RAND_bytes(rnd, sizeof rnd) != 1)
        memset(rnd, 0, sizeof rnd);
    snprintf(h->id_prefix, sizeof h->id_prefix, "%02x%02x%02x%02x", rnd[0],
             rnd[1], rnd[2], rnd[3]);
    for (int i = 0; i < NROUTES; i++)
        route_names[i] = routes[i].name;
    route_names[ROUTE_UNKNOWN] = "unknown";
    mic_metrics_routes(route_names, NROUTES + 1);
    h->mhd_flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (ss.ss_family == AF_INET6)
        h->mhd_flags |= MHD_USE_IPv6;
    if (h->tls_cert)
        h->mhd_flags |= MHD_USE_TLS;
    mic_writer_on_finished(w, ops_finished, h);
    mic_http_loop_ops(&h->loop_ops, make_daemon);
    if (mic_loops_start(&h->loops, (struct sockaddr *)&ss,
                        ss.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                 : sizeof(struct sockaddr_in),
                        cfg->http_threads, 1024, &h->loop_ops, h, port)) {
        mic_logger_write(MIC_LEVEL_ERROR, NULL, "cannot listen", "listen", cfg->listen,
                "error", strerror(errno), NULL);
        goto fail;
    }
    *out = h;
    return MIC_OK;
fail:
    free_http(h);
    return MIC_EIO;
}

void mic_http_quiesce(mic_http *h)
{
    mic_loops_quiesce(h->loops);
}

void mic_http_drain(mic_http *h, int ms)
{
    struct timespec ts = {0, 5 * 1000000};
    int64_t end = mic_mono_ms() + ms;

    if (!h)
        return;
    while (atomic_load(&h->inflight) > 0 && mic_mono_ms() < end)
        nanosleep(&ts, NULL);
    /* Give the polling threads a moment to write the replies just resumed. */
    nanosleep(&ts, NULL);
}

void mic_http_stop(mic_http *h)
{
    if (!h)
        return;
    /* Running backups end (their connections resumed) before the loops
     * stop libmicrohttpd, and their copies before the store closes; so
     * do replay selections. */
    mic_backups_shutdown();
    mic_selector_stop(h->selector);
    h->selector = NULL;
    mic_http_drain(h, 200); /* the 503s of the selections it ended go out */
    mic_loops_stop(h->loops);
    free_http(h);
}
