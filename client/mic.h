/* mic.h - libmic, the C client of MIC (the one HTTP/JSON client in this
 * repository: the mic CLI, mic-events-replay, the tests' harness and the
 * benchmarks' workers all go through it).
 *
 * What it gives:
 *   - a client handle over one micd or several (sharding: each publish goes
 *     to the node the rendezvous hash of (aggregate_type, aggregate_id)
 *     picks, or of event_id when the event has no aggregate);
 *   - publish of one event or a batch, retried on 429 (after Retry-After),
 *     503 and connection errors with the same event_id, so a retry is a
 *     duplicate, never a second event;
 *   - claim (long-poll), ack, nack, extend with per-item results;
 *   - the admin reads and writes as jansson objects;
 *   - a worker loop (mic_worker_run) that extends leases in the background
 *     and fences handlers whose lease was lost;
 *   - the consumer toolkit of the seed article (mic_consumer_*): a
 *     checkpoint per aggregate in the consumer's own LMDB, committed in the
 *     same transaction as the projection's change and the processed-event
 *     marker.
 *
 * Threads.  A mic_client is used by one thread at a time (it holds libcurl
 * easy handles and the last failure); give each thread its own with
 * mic_client_dup.  Different handles may be used concurrently.  The worker
 * loop dups the handle it is given, once per thread.
 *
 * Errors.  Every call that can fail returns 0 on success and -1 on failure,
 * and the failure is then described by mic_client_failure(c): what kind,
 * the HTTP status, and the server's error code, message and field when the
 * server answered one.  Per-item results (publish, ack, nack, extend) carry
 * their own status.
 *
 * Ownership.  Strings and JSON passed in are borrowed for the call unless a
 * function says it steals them.  json_t results are new references the
 * caller json_decref()s.  Structs filled by a call are released with the
 * _fini named beside it; pointers inside them stay valid until then.
 *
 * Link with `pkg-config --cflags --libs libmic` (libcurl, jansson, LMDB,
 * OpenSSL's libcrypto, pthreads). */
#ifndef MIC_CLIENT_H
#define MIC_CLIENT_H

#include <jansson.h>
#include <lmdb.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Handle ---- */

typedef struct mic_client mic_client;

struct mic_client_opts {
    const char *const *urls; /* nurls base URLs, "http://host:port" or
                              * "https://host:port" (no trailing path) */
    size_t nurls;            /* 1.. MIC_NODES_MAX */
    const char *key;         /* API secret sent as Authorization: Bearer, or NULL */
    const char *cafile;      /* PEM CA file for https://, NULL: the system's */
    long connect_timeout_ms; /* 0: 5000 */
    long timeout_ms;         /* a request's limit, 0: 30000; a long-poll
                              * claim gets its wait_s on top */
    int retries;             /* publish attempts after the first on 429, 503
                              * or no answer; 0: 5; negative: none */
    long retry_max_ms;       /* cap of one backoff sleep (and of a
                              * Retry-After honoured), 0: 5000 */
    const char *user_agent;  /* NULL: "libmic/1" */
};

#define MIC_NODES_MAX 64

/* What went wrong in the last failed call on a handle. */
enum mic_fail_kind {
    MIC_FAIL_NONE = 0,
    MIC_FAIL_SERVER,   /* the server answered a non-2xx: status, code, message, field */
    MIC_FAIL_CONNECT,  /* no answer: refused, reset, timeout, TLS (message says which) */
    MIC_FAIL_PROTO,    /* a 2xx whose body is not of the documented shape */
    MIC_FAIL_NOMEM,
    MIC_FAIL_ARG,      /* a bad argument (message says which) */
    MIC_FAIL_PARTIAL,  /* a batch over several nodes: some items failed (see
                        * each result's failure) */
    MIC_FAIL_STOPPED,  /* the transfer was cut by mic_client_stop */
    MIC_FAIL_IO,       /* a local file or descriptor could not be written
                        * (mic_backup_*: message says why) */
};

struct mic_failure {
    enum mic_fail_kind kind;
    long status;          /* HTTP status, 0 when no answer came */
    char code[64];        /* the server's error code ("invalid_event"), or "" */
    char message[512];    /* the server's message, or ours */
    char field[160];      /* the server's field, or "" */
    int node;             /* the node it came from, -1 if none */
    long retry_after_ms;  /* from a 429's Retry-After, -1 if none */
};

/* Create a handle.  Copies everything in 'o'.  Returns 0 and *out (free
 * with mic_client_free), or -1 with *out NULL and, when 'err' is not NULL,
 * *err filled (kind ARG for a bad URL or count, NOMEM). */
int mic_client_new(const struct mic_client_opts *o, mic_client **out, struct mic_failure *err);

/* A new handle with the settings of 'c' (for another thread).  Returns 0
 * and *out, or -1 (memory). */
int mic_client_dup(const mic_client *c, mic_client **out);

void mic_client_free(mic_client *c);

/* The last failure on 'c'; valid until the next call on 'c'. */
const struct mic_failure *mic_client_failure(const mic_client *c);

/* One line for a person: "409 version_conflict: ... (field x)", "cannot
 * reach http://...: Connection refused".  Written into buf (cap bytes,
 * NUL-terminated); returns buf. */
char *mic_failure_text(const struct mic_failure *f, char *buf, size_t cap);

size_t mic_client_nodes(const mic_client *c);
/* Node i's base URL; owned by 'c'. */
const char *mic_client_url(const mic_client *c, size_t node);

/* The node an aggregate (or, when agg_type is NULL, an event id) is routed
 * to: the rendezvous (highest random weight) hash over the node URLs, so
 * adding or removing a node moves only the keys it wins or held. */
size_t mic_client_route(const mic_client *c, const char *agg_type, const char *agg_id,
                        const char *event_id);

/* Ask every transfer in progress on 'c' to stop as soon as it can (a
 * long-poll ends at once with MIC_FAIL_STOPPED); async-signal-safe and
 * callable from any thread.  Stays in force until mic_client_resume. */
void mic_client_stop(mic_client *c);
void mic_client_resume(mic_client *c);

/* ---- Raw requests ---- */

struct mic_response {
    long status;            /* HTTP status (0 before an answer) */
    char *body;             /* NUL-terminated (malloc'd), "" when empty */
    size_t len;
    json_t *json;           /* the body parsed, or NULL */
    char request_id[80];    /* X-Request-Id, or "" */
    char retry_after[16];   /* Retry-After, or "" */
    char content_type[96];  /* Content-Type, or "" */
    char www_authenticate[96];
};

/* One HTTP request to node 'node' + 'path' ("/v1/stats?x=1").  'body' (len
 * bytes) may be NULL; 'ctype' NULL sends no Content-Type; 'headers' is a
 * NULL-terminated list of extra header lines or NULL ("Accept: x").  Any
 * answer fills *r (status included, 4xx and 5xx too) and returns 0; -1
 * when no answer came (failure CONNECT) or memory ran out.  Never retries.
 * Release *r with mic_response_fini in every case. */
int mic_request(mic_client *c, size_t node, const char *method, const char *path,
                const char *ctype, const void *body, size_t len,
                const char *const *headers, struct mic_response *r);
void mic_response_fini(struct mic_response *r);

/* The failure the answer 'r' (of node 'node', stored in f->node)
 * describes, into *f: for a non-2xx, kind SERVER with its status; code,
 * message and field from the server's {"error":{"code","message",
 * "field"}} (an answer without one gives the first line of its body, up
 * to 300 bytes, as the message, or "(no body)"); retry_after_ms from its
 * Retry-After (-1 when none).  Every call of libmic reads an error answer
 * this way; use it on what mic_request hands back.  Returns 1 when 'r' is
 * a failure (*f filled), 0 for a 2xx (*f cleared: kind NONE). */
int mic_response_failure(const struct mic_response *r, int node, struct mic_failure *f);

/* The answer the last call on 'c' read its result from: status, headers
 * and the body exactly as it came (json is NULL: the parsed value went to
 * the caller).  After a failure, the error answer that failed the call.
 * None (status 0, body NULL) when no answer came, after mic_request,
 * mic_stream, mic_stream_request and the backups (their answer goes to the
 * caller), and after a call whose result joins several answers: node < 0
 * over more than one node, a publish batch or a settlement sent as more
 * than one request.  A PUT or DELETE on every node (topics, groups) leaves
 * node 0's, the one *out holds.  Owned by 'c', never NULL; valid until
 * the next call on 'c'. */
const struct mic_response *mic_client_answer(const mic_client *c);

/* A JSON request: 'body' (borrowed, may be NULL) is sent as
 * application/json.  On a 2xx returns 0 and *out (when not NULL) the parsed
 * body (new reference; NULL for an empty body such as a 204).  Otherwise
 * -1: failure SERVER with the server's code, message and field (*out NULL),
 * CONNECT, PROTO (2xx not JSON), NOMEM.  Never retries. */
int mic_call(mic_client *c, size_t node, const char *method, const char *path,
             json_t *body, json_t **out);

/* Streamed GET: each chunk of the body is handed to 'fn' as it arrives
 * (fn returns 0 to go on, non-zero to stop: then failure STOPPED).  Only a
 * 2xx is streamed; an error answer is read whole and reported as SERVER.
 * 'accept' is the Accept header (NULL: application/json). */
int mic_stream(mic_client *c, size_t node, const char *path, const char *accept,
               int (*fn)(const char *p, size_t n, void *arg), void *arg);

/* mic_stream with any method and a request body: 'ctype', 'body' (len
 * bytes, may be NULL) and the extra header lines 'headers' (may be NULL;
 * an "Accept: ..." line among them is the Accept header) as for
 * mic_request.  The 2xx body goes to 'fn' chunk by chunk and an error
 * answer is reported as SERVER, as with mic_stream.  Never retries. */
int mic_stream_request(mic_client *c, size_t node, const char *method, const char *path,
                       const char *ctype, const void *body, size_t len,
                       const char *const *headers,
                       int (*fn)(const char *p, size_t n, void *arg), void *arg);

/* Percent-encode 's' as one path segment into buf (cap bytes).  Returns buf,
 * or NULL when it does not fit. */
char *mic_path_escape(const char *s, char *buf, size_t cap);

/* ---- Publish ---- */

struct mic_publish_result {
    char event_id[129];
    int64_t seq;            /* 0 when it failed */
    char created_at[32];
    int duplicate;          /* 1: already stored with the same content */
    int node;
    int ok;                 /* 1: stored or duplicate; 0: see 'fail' */
    struct mic_failure fail;
};

/* Publish one event (a JSON object of DESIGN §12's fields).  An event
 * without "event_id" gets a fresh random one set in 'event' (so the caller
 * sees it, and a retry sends the same id); the object is otherwise
 * unchanged.  Retries as mic_client_opts say.  Returns 0 with *res filled,
 * or -1 (failure on the handle, also copied into res->fail). */
int mic_publish(mic_client *c, json_t *event, struct mic_publish_result *res);

/* Publish n events (1..1000 per node after routing).  Events are split per
 * node (each node's part is one atomic batch) and sent in parallel;
 * res[i] (n of them, caller's array) says for events[i] which node took it
 * or why it failed.  Events without event_id get one, as above.  Returns 0
 * when every event is stored or a duplicate; -1 otherwise, failure kind
 * PARTIAL when some node succeeded, else that of the (first) node's failure.
 * A failure's field "events[k]..." names the caller's events[k] (micd's
 * index within the node's part, translated). */
int mic_publish_batch(mic_client *c, json_t *const *events, size_t n,
                      struct mic_publish_result *res);

/* A fresh event id: 32 lowercase hex characters of 16 random bytes
 * (OpenSSL RAND_bytes), NUL-terminated in out[33].  Returns 0 or -1. */
int mic_event_id_new(char out[33]);

/* ---- Claims and settlement ---- */

struct mic_claim_opts {
    int max;               /* 1..1000, 0: 1 */
    double lease_ttl_s;    /* 0: the group's; sent rounded up to whole seconds */
    double wait_s;         /* long-poll, 0..60 */
    const char *worker;    /* shown in oldest/lookup, or NULL */
};

struct mic_leased {
    int node;
    int64_t seq;
    char lease_token[96];
    int attempt;
    char lease_expires_at[32];
    json_t *event;         /* the event object (borrowed from the claim's doc) */
    json_t *replay;        /* the "replay" object of a replay group, else NULL */
    /* Fields of 'event' (pointers into it; "" or 0 when absent). */
    const char *event_id, *topic, *event_type, *aggregate_type, *aggregate_id;
    uint64_t aggregate_version;   /* 0: none */
    int schema_version;           /* 1 when absent */
    int effects_forbidden;        /* replay.effects == "forbid" */
};

struct mic_claimed {
    struct mic_leased *v;
    size_t n;
    json_t *doc;           /* the claim answer(s) the pointers point into */
};

/* Claim from 'group' on node 'node'.  Fills *out (release with
 * mic_claimed_fini, also after a failure); an empty claim is 0 with
 * out->n 0.  -1 on any failure (a 409 group_has_sink is SERVER). */
int mic_claim(mic_client *c, size_t node, const char *group, const struct mic_claim_opts *o,
              struct mic_claimed *out);
void mic_claimed_fini(struct mic_claimed *d);

/* mic_claim with the request as the caller wrote it: 'req' (borrowed; a
 * JSON object, or NULL for {}) is the claim's body as is, so micd judges
 * every member ("max", "lease_ttl_s", "wait_s", "worker": a bad one is
 * its 422 invalid_request, failure SERVER).  A "wait_s" number in 'req'
 * lengthens the timeout as mic_claim_opts' wait_s does.  Fills *out as
 * mic_claim (release it with mic_claimed_fini, also after a failure) and
 * returns as mic_claim; also -1 with failure ARG when 'req' is not an
 * object. */
int mic_claim_json(mic_client *c, size_t node, const char *group, json_t *req,
                   struct mic_claimed *out);

enum mic_item_status {
    MIC_ITEM_UNKNOWN = 0,  /* not answered (the node failed: see 'fail') */
    MIC_ITEM_ACKED,
    MIC_ITEM_RETRYING,
    MIC_ITEM_DEAD_LETTERED,
    MIC_ITEM_EXTENDED,
    MIC_ITEM_LEASE_LOST,
    MIC_ITEM_NOT_FOUND,
};

struct mic_item_result {
    int64_t seq;
    enum mic_item_status status;
    char time[32];         /* retrying: not_before; extended: lease_expires_at */
    struct mic_failure fail;   /* when status is UNKNOWN */
};

/* The settle options of a nack or an extend. */
struct mic_settle_opts {
    const char *error;     /* nack: the error text (NULL: none) */
    double retry_after_s;  /* nack: < 0 the group's backoff; 0 at once */
    int dead_letter;       /* nack: 1 straight to the DLQ */
    double lease_ttl_s;    /* extend: 0 the group's; rounded up to whole seconds */
};

/* Ack, nack or extend the n deliveries items[] (pointers; each carries its
 * node, seq and token) of 'group'.  res[] (n, caller's) gets one result per
 * item in order.  Items of several nodes are sent per node.  Returns 0 when
 * every node answered (whatever the per-item statuses), -1 otherwise
 * (those items UNKNOWN).  'o' may be NULL for defaults. */
int mic_ack(mic_client *c, const char *group, const struct mic_leased *const *items, size_t n,
            struct mic_item_result *res);
int mic_nack(mic_client *c, const char *group, const struct mic_leased *const *items, size_t n,
             const struct mic_settle_opts *o, struct mic_item_result *res);
int mic_extend(mic_client *c, const char *group, const struct mic_leased *const *items,
               size_t n, const struct mic_settle_opts *o, struct mic_item_result *res);

enum mic_settle_verb { MIC_SETTLE_ACK = 0, MIC_SETTLE_NACK, MIC_SETTLE_EXTEND };

/* mic_ack, mic_nack or mic_extend ('verb') with the options as the caller
 * wrote them: the members of 'fields' (borrowed; a JSON object, or NULL
 * for none: "error", "retry_after_s", "dead_letter", "lease_ttl_s") are
 * sent as they are beside "deliveries", so micd judges them (a bad one is
 * its 422 for the whole request: failure SERVER, every item UNKNOWN).
 * Each node's items go as one request (micd takes 1 to 1000).  res[] and
 * the return as for mic_ack; also -1 with failure ARG when 'verb' is not
 * one of the enum or 'fields' is not an object or holds "deliveries". */
int mic_settle_json(mic_client *c, enum mic_settle_verb verb, const char *group,
                    const struct mic_leased *const *items, size_t n, json_t *fields,
                    struct mic_item_result *res);

/* The wire word of a status ("acked", ...); static. */
const char *mic_item_status_name(enum mic_item_status s);

/* ---- Admin ----
 * Each returns 0 and *out (new reference) or -1 with *out NULL and the
 * failure on the handle (SERVER with micd's answer, CONNECT, PROTO for a
 * 2xx that is not JSON, NOMEM).  Resource names and query values are
 * escaped here, whatever their length (micd judges them).  'node' < 0
 * means: every node, merged as each says; a node that fails makes the
 * call fail.  A 'limit' of 0 is the server's default; any other value is
 * sent as it is (micd answers 422 for one outside 1..1000). */

/* GET /v1/stats; node < 0 merges every node: per group and per topic the
 * counts are summed, ages take the maximum, oldest_unhandled_seq the
 * oldest's, "alert" is true if any node's is; store figures summed; a node
 * that fails makes the call fail. */
int mic_admin_stats(mic_client *c, int node, json_t **out);
/* GET .../oldest?limit=N (limit 0: the server's, 10); node < 0: every
 * node's deliveries, each with "node", sorted by (created_at, seq) and cut
 * to limit (10 when 0); oldest_unhandled_age_s the maximum. */
int mic_admin_oldest(mic_client *c, int node, const char *group, int limit, json_t **out);
/* GET .../blocked[?reason=R]; node < 0: every node's aggregates (each with
 * "node").  'reason' NULL: every reason. */
int mic_admin_blocked(mic_client *c, int node, const char *group, const char *reason, json_t **out);
/* mic_admin_blocked with ?limit=N (up to N aggregates per node). */
int mic_admin_blocked_page(mic_client *c, int node, const char *group, const char *reason,
                           int limit, json_t **out);
/* GET .../dlq?limit=&after= on one node (cursors are per node). */
int mic_admin_dlq(mic_client *c, size_t node, const char *group, int limit, const char *after,
            json_t **out);
/* POST .../dlq/requeue or .../dlq/skip with 'body' ({"seqs":[...]} or
 * {"all":true}) on one node. */
int mic_admin_dlq_requeue(mic_client *c, size_t node, const char *group, json_t *body, json_t **out);
int mic_admin_dlq_skip(mic_client *c, size_t node, const char *group, json_t *body, json_t **out);
/* GET /v1/aggregates/{type}/{id} on the node the aggregate routes to. */
int mic_admin_aggregate(mic_client *c, const char *type, const char *id, json_t **out);
/* POST /v1/aggregates/{type}/{id}/gaps/{version}/skip on its node. */
int mic_admin_gap_skip(mic_client *c, const char *type, const char *id, uint64_t version,
                 json_t **out);
/* GET /v1/events/{event_id}: on every node until one has it (404 when
 * none has). */
int mic_admin_event(mic_client *c, const char *event_id, json_t **out);
/* Replay runs on one node: POST /v1/replays (body borrowed), GET one, GET
 * the list, DELETE one (out may be NULL). */
int mic_admin_replay_create(mic_client *c, size_t node, json_t *body, json_t **out);
int mic_admin_replay_get(mic_client *c, size_t node, const char *run_id, json_t **out);
int mic_admin_replays(mic_client *c, size_t node, json_t **out);
int mic_admin_replay_delete(mic_client *c, size_t node, const char *run_id);
/* Topics and groups: a PUT or DELETE goes to every node (a sharded setup
 * needs the same topics and groups everywhere; *out is node 0's answer);
 * a GET reads node 0. */
int mic_admin_topic_put(mic_client *c, const char *name, json_t *config, json_t **out);
int mic_admin_topic_get(mic_client *c, const char *name, json_t **out);
int mic_admin_topic_delete(mic_client *c, const char *name);
int mic_admin_topics(mic_client *c, json_t **out);
int mic_admin_group_put(mic_client *c, const char *name, json_t *config, json_t **out);
int mic_admin_group_get(mic_client *c, const char *name, json_t **out);
int mic_admin_group_delete(mic_client *c, const char *name);
int mic_admin_groups(mic_client *c, json_t **out);

/* ---- Worker loop ---- */

typedef struct mic_job mic_job;

/* What a handler decided. */
enum mic_verdict {
    MIC_DONE = 0,     /* ack */
    MIC_RETRY,        /* nack with the job's error text and retry hint */
    MIC_DEAD,         /* nack straight to the DLQ */
};

/* A handler runs one delivery on a worker thread.  'c' is that thread's
 * own handle (for calls the handler makes); the delivery is valid until
 * the handler returns.  Before committing an effect the handler should ask
 * mic_job_lease_lost: once it says 1, another worker may hold the event,
 * and the result must not be committed (return anything: nothing is
 * settled). */
typedef enum mic_verdict (*mic_handler_fn)(mic_job *job, const struct mic_leased *d,
                                           mic_client *c, void *arg);

/* 1 when an extend of this job's lease answered lease_lost or not_found
 * (the lease is fenced); callable from the handler at any time. */
int mic_job_lease_lost(const mic_job *job);
/* Set the nack's error text (copied, up to 1023 bytes) and retry hint
 * (< 0: the group's backoff) for a MIC_RETRY or MIC_DEAD verdict. */
void mic_job_fail(mic_job *job, double retry_after_s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The handler thread's index, 0..threads-1. */
int mic_job_thread(const mic_job *job);

struct mic_worker_opts {
    const char *group;
    int threads;              /* handler threads, 0: 1 */
    int max;                  /* deliveries per claim, 0: 1 */
    double lease_ttl_s;       /* 0: 30; extended every third of it */
    double wait_s;            /* long-poll, 0: 20 */
    const char *worker;       /* name shown by the server (thread index appended) */
    mic_handler_fn handler;
    void *arg;
    int stop_on_signals;      /* 1: SIGINT and SIGTERM stop the loop */
    long max_deliveries;      /* > 0: stop after this many settled in all */
    double idle_exit_s;       /* > 0: stop when no delivery came for this long */
};

struct mic_worker_stats {
    long claimed, acked, retried, dead_lettered;
    long lease_lost;          /* jobs whose lease was fenced */
    long extends;             /* extend calls made */
    long claim_failures;      /* claims that failed (retried after a pause) */
    int refused;              /* 1: the loop stopped because micd refused a
                               * claim for good (400, 401, 403, 404, 409 such
                               * as group_has_sink, 422): see 'failure' */
    struct mic_failure failure;   /* that refusal, when 'refused' */
};

typedef struct mic_worker mic_worker;

/* Run the loop until it is stopped (mic_worker_stop, a signal when
 * stop_on_signals, max_deliveries, idle_exit_s, or a claim micd refuses
 * for good): each thread long-polls claims (from every node of 'c' in
 * turn), runs the handler, and acks or nacks; one more thread extends the
 * leases held at a third of their TTL.  A claim that fails for a passing
 * reason (no answer, 429, 5xx) is tried again after a pause.  A stop lets
 * the handlers in flight finish and settles them.  'c' is only read
 * (dup'd per thread).  Fills *st when not NULL.  Returns 0, or -1 when it
 * could not start (memory, threads, bad options) or stopped on a refused
 * claim (st->refused, st->failure). */
int mic_worker_run(const mic_client *c, const struct mic_worker_opts *o,
                   struct mic_worker_stats *st);

/* The same loop on background threads: *out (free with mic_worker_join,
 * which waits for the loop to end).  Returns 0 or -1. */
int mic_worker_start(const mic_client *c, const struct mic_worker_opts *o, mic_worker **out);
/* Ask the loop to stop; any thread, async-signal-safe. */
void mic_worker_stop(mic_worker *w);
/* Wait for the loop to end, fill *st (may be NULL), free 'w'. */
void mic_worker_join(mic_worker *w, struct mic_worker_stats *st);

/* ---- Consumer toolkit ----
 * A consumer keeps, in its own LMDB environment: per aggregate the last
 * version applied (the checkpoint), per event id the marker that it was
 * processed.  mic_consumer_process applies a delivery and records both in
 * the same LMDB transaction as the projection's own writes, so a crash
 * leaves all three or none. */

typedef struct mic_consumer mic_consumer;

enum mic_consumer_kind {
    MIC_PROJECTION = 0,   /* rebuildable state: takes replay deliveries */
    MIC_EFFECTS,          /* external effects: refuses a replay delivery whose
                           * replay.effects is forbid (dead-lettered with a
                           * clear error) */
};

enum mic_outcome {
    MIC_APPLIED = 0,      /* v = c+1 (or no version): applied, checkpoint c+1 */
    MIC_ALREADY,          /* the event id was processed before: ack, no effect */
    MIC_GAP,              /* v > c+1: parked (nack with the retry hint) */
    MIC_STALE,            /* v <= c with an unknown event id: investigate
                           * (dead-lettered with the versions in the error) */
    MIC_REFUSED,          /* effects executor, replay with effects forbid */
    MIC_FAILED,           /* the apply function failed: nack, retried */
    MIC_FENCED,           /* the lease was lost before the commit: aborted */
};

/* The projection's change: write into 'txn' (the consumer's environment;
 * open your own databases with mdb_dbi_open in it).  'event' is the event
 * after the upcaster.  Return 0, or non-zero after writing a reason into
 * err (errcap bytes): the transaction is then aborted. */
typedef int (*mic_apply_fn)(MDB_txn *txn, const struct mic_leased *d, json_t *event,
                            void *arg, char *err, size_t errcap);

/* Bring an event of an older schema_version up to 'to' (the consumer's).
 * Return a new reference (or 'event' itself, json_incref'd), or NULL to
 * refuse (the delivery fails).  Called only when the event's
 * schema_version is lower than 'to'. */
typedef json_t *(*mic_upcast_fn)(json_t *event, int from, int to, void *arg);

struct mic_consumer_opts {
    const char *path;           /* LMDB directory (created if missing) */
    size_t map_size;            /* 0: 1 GiB */
    unsigned max_dbs;           /* databases the projection opens itself */
    enum mic_consumer_kind kind;
    mic_apply_fn apply;
    mic_upcast_fn upcast;       /* may be NULL */
    int schema_version;         /* the version apply() reads, 0: 1 */
    void *arg;
    double gap_retry_s;         /* retry hint of a parked delivery, 0: 1 */
};

struct mic_consumer_stats {
    long applied, already, gaps, stale, refused, failed, fenced;
};

/* Open (creating the directory and its databases; layout in
 * proto/consumer-store.md).  A directory is opened once per process
 * (LMDB's rule); several processes may share it.  Returns 0 and *out
 * (mic_consumer_close it), or -1 with a reason in err (errcap bytes): the
 * directory cannot be made, LMDB fails, or the store is of a format this
 * libmic does not read. */
int mic_consumer_open(const struct mic_consumer_opts *o, mic_consumer **out, char *err,
                      size_t errcap);
void mic_consumer_close(mic_consumer *k);
/* The consumer's environment (owned by it; valid until close): read the
 * projection with your own read transactions. */
MDB_env *mic_consumer_env(mic_consumer *k);

/* Decide and, for APPLIED, commit: the apply function's writes, the
 * checkpoint and the marker in one transaction.  'job' may be NULL (no
 * fencing); otherwise the commit is skipped (FENCED) if its lease was
 * lost.  *outcome says which rule held; 'why' (cap bytes) gets the error
 * text of a GAP, STALE, REFUSED or FAILED.  Returns 0, or -1 when LMDB
 * itself failed (text in 'why'). Thread-safe (LMDB serialises writers). */
int mic_consumer_process(mic_consumer *k, const struct mic_leased *d, const mic_job *job,
                         enum mic_outcome *outcome, char *why, size_t cap);

/* A mic_handler_fn: arg is the mic_consumer.  APPLIED and ALREADY ack;
 * GAP nacks with the gap retry hint; STALE and REFUSED dead-letter with
 * the reason; FAILED nacks (backoff). */
enum mic_verdict mic_consumer_handler(mic_job *job, const struct mic_leased *d, mic_client *c,
                                      void *arg);

/* The checkpoint of an aggregate (0 when none); returns 0 or -1. */
int mic_consumer_checkpoint(mic_consumer *k, const char *agg_type, const char *agg_id,
                            uint64_t *version);
/* Move the checkpoint of an aggregate over 'version' (which must be the
 * checkpoint + 1): the consumer's side of micd's gap skip (POST
 * .../gaps/{version}/skip), so the next version is applied.  Returns 0, or
 * -1 when 'version' is not the next one or LMDB failed. */
int mic_consumer_skip(mic_consumer *k, const char *agg_type, const char *agg_id, uint64_t version);
/* Counters since open. */
void mic_consumer_stats(mic_consumer *k, struct mic_consumer_stats *st);

/* ---- Backup (GET /v1/backup, an admin key) ---- */

/* Stream a backup of node 'node' into 'fd': a consistent, compacted copy
 * of its store (an LMDB data.mdb; a micd started on a directory holding
 * only that file, as data.mdb, serves the store as it was when the copy
 * began).  'progress' (may be NULL) is called after each piece written
 * with the bytes so far; a non-zero return stops the transfer (failure
 * STOPPED).  'fd' stays the caller's: it is written to, never synced or
 * closed.  On success returns 0 and *bytes (may be NULL) the size.
 * Otherwise -1, and what 'fd' received is not a usable copy: failure
 * SERVER (401 unauthorized, 403 forbidden: not an admin key, 409
 * backup_running: one backup at a time), CONNECT (no answer, or the
 * transfer ended before its last chunk: the server's copy failed or the
 * connection broke), IO (a write to 'fd' failed), STOPPED, NOMEM. */
int mic_backup_fd(mic_client *c, size_t node, int fd,
                  int (*progress)(uint64_t bytes, void *arg), void *arg, uint64_t *bytes);

/* mic_backup_fd into the file 'path' (mode 0600), so that 'path' exists
 * only whole: the copy goes to "path.tmp" (replaced if it exists), which
 * is fsync'd and then renamed to 'path' (replacing it), and the directory
 * fsync'd.  On failure "path.tmp" is removed and 'path' is left as it
 * was.  Returns as mic_backup_fd; IO also when the file cannot be made,
 * synced or renamed. */
int mic_backup_file(mic_client *c, size_t node, const char *path,
                    int (*progress)(uint64_t bytes, void *arg), void *arg, uint64_t *bytes);

#ifdef __cplusplus
}
#endif

#endif
