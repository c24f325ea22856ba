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
 * This file is the only one that builds HTTP replies; status_of() is the
 * only place where an enum mic_err becomes an HTTP status. */
#define _GNU_SOURCE
#include "routes.h"

#include "buf.h"
#include "claim.h"
#include "clock.h"
#include "config.h"
#include "err.h"
#include "json.h"
#include "log.h"
#include "group.h"
#include "metrics.h"
#include "views.h"
#include "publish.h"
#include "replay.h"
#include "topic.h"

#include <microhttpd.h>
#include <netdb.h>
#include <openssl/rand.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

struct mic_http {
    struct MHD_Daemon *d;
    const struct mic_config *cfg;
    mic_store *store;
    mic_writer *writer;
    atomic_int inflight;   /* requests suspended on the writer */
    atomic_uint_fast64_t next_id;
    char id_prefix[9];
};

enum req_state { RS_NEW, RS_BODY, RS_WAITING, RS_DONE };
enum op_kind { OK_NONE, OK_PUBLISH, OK_TOPIC, OK_GROUP, OK_CLAIM, OK_GAP, OK_REPLAY };

struct req {
    mic_http *h;
    struct MHD_Connection *conn;
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
};

/* ---- Replies ---- */

static unsigned status_of(int err)
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
                      "the store reached its size limit; reads still work");
        break;
    default:
        mic_error_internal(e, err);
    }
}

static enum MHD_Result send_body(struct req *r, unsigned status,
                                 const char *ctype, char *body, size_t len)
{
    struct MHD_Response *resp;
    enum MHD_Result ret;

    resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    if (ctype)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    MHD_add_response_header(resp, "X-Request-Id", r->rid);
    if (status == MHD_HTTP_TOO_MANY_REQUESTS)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    ret = MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    mic_metrics_http(r->route, (int)status);
    if (mic_log_enabled(MIC_LOG_DEBUG)) {
        char st[8], us[24];
        snprintf(st, sizeof st, "%u", status);
        snprintf(us, sizeof us, "%lld", (long long)(mic_mono_us() - r->t0_us));
        mic_log(MIC_LOG_DEBUG, r->rid, "request", "status", st, "us", us, NULL);
    }
    return ret;
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
    unsigned status = status_of(e->err);

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
    if (status >= 500)
        mic_log(MIC_LOG_WARN, r->rid, "request failed", "code", e->code,
                "message", e->message, NULL);
    return send_buf(r, status, &b);
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

static void op_done(mic_op *op);

/* Suspend the connection, then hand the op to the writer. */
static enum MHD_Result submit(struct req *r, mic_op *op)
{
    int rc;

    r->op = op;
    op->done = op_done;
    op->owner = r;
    atomic_store(&r->state, RS_WAITING);
    atomic_fetch_add(&r->h->inflight, 1);
    MHD_suspend_connection(r->conn);
    if ((rc = mic_writer_submit(r->h->writer, op))) {
        r->submit_err = rc;
        atomic_store(&r->state, RS_DONE);
        atomic_fetch_sub(&r->h->inflight, 1);
        MHD_resume_connection(r->conn);
    }
    return MHD_YES;
}

static void op_done(mic_op *op)
{
    struct req *r = op->owner;
    mic_http *h = r->h;

    atomic_store(&r->state, RS_DONE);
    MHD_resume_connection(r->conn);
    atomic_fetch_sub(&h->inflight, 1);
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
    return submit(r, mic_publish_op(r->u.publish));
}

static enum MHD_Result h_event_get(struct req *r, const char **args)
{
    struct mic_error e;
    struct mic_buf b;

    mic_buf_init(&b);
    return answer(r, mic_publish_lookup(r->h->store, args[0], strlen(args[0]), &b, &e), &b, &e,
                  MHD_HTTP_OK);
}

static enum MHD_Result h_topic_list(struct req *r, const char **args)
{
    struct mic_error e;
    struct mic_buf b;

    (void)args;
    mic_buf_init(&b);
    return answer(r, mic_topic_list(r->h->store, &b, &e), &b, &e, MHD_HTTP_OK);
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
    return answer(r, mic_group_list(r->h->store, &b, &e), &b, &e, MHD_HTTP_OK);
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

/* Is the client of a parked long-poll still connected?  Writer thread. */
static int conn_alive(mic_op *op)
{
    struct req *r = op->owner;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    char c;
    ssize_t n;

    if (!ci)
        return 1;
    n = recv(ci->connect_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
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
        enum MHD_Result ret;
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
        MHD_add_response_header(resp, "X-Request-Id", r->rid);
        ret = MHD_queue_response(r->conn, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        mic_metrics_http(r->route, MHD_HTTP_OK);
        return ret;
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

static enum MHD_Result h_replay_post(struct req *r, const char **args)
{
    struct mic_error e;

    (void)args;
    if (!content_type_ok(r, &e) ||
        mic_replay_create_parse(r->h->store, r->body ? r->body : "", r->len, r->h->cfg,
                                &r->u.replay, &e))
        return send_error(r, &e);
    r->kind = OK_REPLAY;
    return submit(r, mic_replay_op_base(r->u.replay));
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
    if ((rc = mic_metrics_stats(r->h->store, &b)))
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
        return "store full: the last write did not fit in --map-max";
    if (max - used < max / 100)
        return "store map nearly full (less than 1% of --map-max left)";
    if (statvfs(h->cfg->data_dir, &vfs) == 0 &&
        (uint64_t)vfs.f_bavail * vfs.f_frsize < 64ull * 1024 * 1024)
        return "less than 64 MiB of disk left";
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
    if (mic_metrics_render(r->h->store, r->h->writer, &b)) {
        mic_buf_fini(&b);
        return MHD_NO;
    }
    p = mic_buf_steal(&b, &len);
    return send_body(r, MHD_HTTP_OK, "text/plain; version=0.0.4", p, len);
}

/* ---- Route table ---- */

struct route {
    const char *method;
    const char *path;  /* segments; "*" captures one */
    const char *name;  /* metrics label */
    handler_fn fn;
};

static const struct route routes[] = {
    {"POST", "/v1/events", "/v1/events", h_publish},
    {"GET", "/v1/events/*", "/v1/events/{id}", h_event_get},
    {"GET", "/v1/topics", "/v1/topics", h_topic_list},
    {"GET", "/v1/topics/*", "/v1/topics/{topic}", h_topic_get},
    {"GET", "/v1/topics/*/events", "/v1/topics/{topic}/events", h_range},
    {"PUT", "/v1/topics/*", "/v1/topics/{topic}", h_topic_put},
    {"DELETE", "/v1/topics/*", "/v1/topics/{topic}", h_topic_del},
    {"GET", "/v1/groups", "/v1/groups", h_group_list},
    {"GET", "/v1/groups/*", "/v1/groups/{group}", h_group_get},
    {"PUT", "/v1/groups/*", "/v1/groups/{group}", h_group_put},
    {"DELETE", "/v1/groups/*", "/v1/groups/{group}", h_group_del},
    {"POST", "/v1/groups/*/claim", "/v1/groups/{group}/claim", h_claim},
    {"POST", "/v1/groups/*/ack", "/v1/groups/{group}/ack", h_ack},
    {"POST", "/v1/groups/*/nack", "/v1/groups/{group}/nack", h_nack},
    {"POST", "/v1/groups/*/extend", "/v1/groups/{group}/extend", h_extend},
    {"GET", "/v1/groups/*/dlq", "/v1/groups/{group}/dlq", h_dlq_list},
    {"POST", "/v1/groups/*/dlq/requeue", "/v1/groups/{group}/dlq/requeue", h_requeue},
    {"POST", "/v1/groups/*/dlq/skip", "/v1/groups/{group}/dlq/skip", h_skip},
    {"GET", "/v1/groups/*/blocked", "/v1/groups/{group}/blocked", h_blocked},
    {"GET", "/v1/aggregates/*/*", "/v1/aggregates/{type}/{id}", h_aggregate},
    {"POST", "/v1/aggregates/*/*/gaps/*/skip", "/v1/aggregates/{type}/{id}/gaps/{version}/skip",
     h_gap_skip},
    {"POST", "/v1/replays", "/v1/replays", h_replay_post},
    {"GET", "/v1/replays", "/v1/replays", h_replay_list},
    {"GET", "/v1/replays/*", "/v1/replays/{run_id}", h_replay_get},
    {"DELETE", "/v1/replays/*", "/v1/replays/{run_id}", h_replay_del},
    {"GET", "/v1/stats", "/v1/stats", h_stats},
    {"GET", "/v1/groups/*/oldest", "/v1/groups/{group}/oldest", h_oldest},
    {"GET", "/healthz", "/healthz", h_healthz},
    {"GET", "/readyz", "/readyz", h_readyz},
    {"GET", "/metrics", "/metrics", h_metrics},
};
#define NROUTES (int)(sizeof routes / sizeof routes[0])
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

static enum MHD_Result dispatch(struct req *r, const char *url,
                                const char *method)
{
    const char *args[MAX_ARGS];
    char store[1024];
    struct mic_error e;
    int path_found = 0;

    for (int i = 0; i < NROUTES; i++) {
        if (!match(routes[i].path, url, args, store, sizeof store))
            continue;
        path_found = 1;
        r->route = i;
        if (strcmp(routes[i].method, method) == 0)
            return routes[i].fn(r, args);
    }
    r->route = ROUTE_UNKNOWN;
    if (path_found)
        mic_error_set(&e, MIC_EMETHOD, "method_not_allowed", NULL,
                      "%s is not allowed on %s", method, url);
    else
        mic_error_set(&e, MIC_ENOTFOUND, "not_found", NULL, "no route %s", url);
    return send_error(r, &e);
}

/* ---- libmicrohttpd callbacks ---- */

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
        snprintf(r->rid, sizeof r->rid, "%s-%llx", h->id_prefix,
                 (unsigned long long)atomic_fetch_add(&h->next_id, 1));
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

static enum MHD_Result handler(void *cls, struct MHD_Connection *conn,
                               const char *url, const char *method,
                               const char *version, const char *upload,
                               size_t *upload_size, void **con_cls)
{
    mic_http *h = cls;
    struct req *r = *con_cls;
    struct mic_error e;

    (void)version;
    if (!r) {
        const char *cl;
        if (!(r = calloc(1, sizeof *r)))
            return MHD_NO;
        r->h = h;
        r->conn = conn;
        r->route = ROUTE_UNKNOWN;
        r->t0_us = mic_mono_us();
        atomic_init(&r->state, RS_BODY);
        request_id(h, r);
        *con_cls = r;
        cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                         MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) <= h->cfg->max_body && strtoull(cl, NULL, 10) > 0) {
            /* Room for the whole body at once: no growing copies. */
            size_t want = (size_t)strtoull(cl, NULL, 10) + 1;
            if ((r->body = malloc(want)))
                r->cap = want;
        }
        if (cl && strtoull(cl, NULL, 10) > h->cfg->max_body) {
            mic_error_set(&e, MIC_ETOOBIG, "body_too_large", NULL,
                          "request bodies are at most %llu bytes",
                          (unsigned long long)h->cfg->max_body);
            atomic_store(&r->state, RS_DONE);
            r->too_big = 1;
            return send_error(r, &e);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
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
    switch (atomic_load(&r->state)) {
    case RS_DONE:
        if (r->too_big && !r->op)
            return MHD_YES; /* the 413 is already queued */
        return finish(r);
    case RS_WAITING:
        return MHD_YES; /* spurious: still with the writer */
    default:
        break;
    }
    if (r->too_big) {
        mic_error_set(&e, MIC_ETOOBIG, "body_too_large", NULL,
                      "request bodies are at most %llu bytes",
                      (unsigned long long)h->cfg->max_body);
        atomic_store(&r->state, RS_DONE);
        return send_error(r, &e);
    }
    atomic_store(&r->state, RS_NEW);
    return dispatch(r, url, method);
}

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                      enum MHD_RequestTerminationCode toe)
{
    struct req *r = *con_cls;

    (void)cls;
    (void)conn;
    (void)toe;
    if (!r)
        return;
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
    free(r->body);
    free(r);
    *con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];

    (void)cls;
    vsnprintf(msg, sizeof msg, fmt, ap);
    /* Printed by the 0.9.75 thread pool even when the logger comes first. */
    if (strncmp(msg, "MHD_OPTION_EXTERNAL_LOGGER is not the first", 43) == 0)
        return;
    msg[strcspn(msg, "\n")] = 0;
    mic_log(MIC_LOG_WARN, NULL, "libmicrohttpd", "detail", msg, NULL);
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

int mic_http_start(mic_http **out, const struct mic_config *cfg,
                   mic_store *s, mic_writer *w, int *port)
{
    mic_http *h = calloc(1, sizeof *h);
    struct sockaddr_storage ss;
    const union MHD_DaemonInfo *info;
    unsigned char rnd[4];
    unsigned flags;

    if (!h)
        return MIC_ENOMEM;
    if (parse_listen(cfg->listen, &ss)) {
        mic_log(MIC_LOG_ERROR, NULL, "cannot parse listen address", "listen",
                cfg->listen, NULL);
        free(h);
        return MIC_EINVAL;
    }
    h->cfg = cfg;
    h->store = s;
    h->writer = w;
    if (RAND_bytes(rnd, sizeof rnd) != 1)
        memset(rnd, 0, sizeof rnd);
    snprintf(h->id_prefix, sizeof h->id_prefix, "%02x%02x%02x%02x", rnd[0],
             rnd[1], rnd[2], rnd[3]);
    for (int i = 0; i < NROUTES; i++)
        route_names[i] = routes[i].name;
    route_names[ROUTE_UNKNOWN] = "unknown";
    mic_metrics_routes(route_names, NROUTES + 1);
    flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL |
            MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    h->d = MHD_start_daemon(
        flags, 0, NULL, NULL, handler, h,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)cfg->http_threads,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_connections,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)cfg->per_ip_connections,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->idle_timeout_s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)8 * 1024,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
        MHD_OPTION_NOTIFY_COMPLETED, completed, h,
        MHD_OPTION_END);
    if (!h->d) {
        mic_log(MIC_LOG_ERROR, NULL, "cannot listen", "listen", cfg->listen, NULL);
        free(h);
        return MIC_EIO;
    }
    info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    *port = info ? info->port : 0;
    *out = h;
    return MIC_OK;
}

void mic_http_quiesce(mic_http *h)
{
    MHD_socket fd = MHD_quiesce_daemon(h->d);

    if (fd != MHD_INVALID_SOCKET)
        close(fd);
}

void mic_http_drain(mic_http *h, int ms)
{
    struct timespec ts = {0, 5 * 1000000};
    int64_t end = mic_mono_ms() + ms;

    while (atomic_load(&h->inflight) > 0 && mic_mono_ms() < end)
        nanosleep(&ts, NULL);
    /* Give the polling threads a moment to write the replies just resumed. */
    nanosleep(&ts, NULL);
}

void mic_http_stop(mic_http *h)
{
    if (!h)
        return;
    MHD_stop_daemon(h->d);
    free(h);
}
