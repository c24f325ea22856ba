/* mic-relay.c - the outbox relay (DESIGN section 14): publishes the rows an
 * application committed to its own PostgreSQL table mic_outbox
 * (proto/outbox.sql) to micd, at least once, through libmic.
 *
 * DESIGN
 *
 * One loop, one batch at a time:
 *
 *   claim     one statement (its own short transaction): UPDATE ... WHERE id
 *             IN (SELECT ... ORDER BY priority DESC, id LIMIT --batch FOR
 *             UPDATE SKIP LOCKED) RETURNING the rows.  Claimable: 'pending'
 *             with not_before NULL or passed, or 'processing' whose lease
 *             expired.  The claimed rows become 'processing' with ONE fresh
 *             lease_token for the whole claim (gen_random_uuid(), evaluated
 *             once), lease_expires_at = now() + --lease-ttl, attempts + 1.
 *   publish   the rows as one mic_publish_batch, outside any transaction;
 *             each event keeps the row's event_id and created_at, so a
 *             re-publish is micd's duplicate, never a second event.
 *   finalize  one statement (data-modifying CTEs, so atomic) that applies
 *             every row's verdict, each only WHERE lease_token is still the
 *             claim's: a relay whose lease was taken over changes nothing.
 *
 * Verdicts:
 *   ok        stored or duplicate: 'dispatched', dispatched_at = now()
 *             (or the row is deleted with --delete-dispatched).
 *   dlq       micd refused the event for good (400, 409, 413 or 422 naming
 *             it), or the row cannot be turned into an event (headers or
 *             payload jansson cannot read): 'dlq' at once, last_error set.
 *   retry     no answer, 429, 5xx, or any other status (401, 403, 404, ...:
 *             things an operator fixes), after libmic's own retries:
 *             'pending' with not_before = now() + backoff and last_error
 *             set, or 'dlq' when attempts has reached --max-attempts.
 *   release   the relay is stopping and had not published the row (or a
 *             second signal cut the publish): 'pending', attempts - 1.
 *
 * attempts counts claims: the claim adds one (as micd counts a delivery's
 * claims).  A row is claimed, so counted, before each publish of it, so
 * after --max-attempts failed publishes its attempts equal --max-attempts
 * and that failure moves it to 'dlq'.  A lease that expired (a relay that
 * died) has used an attempt too; a release gives its attempt back.
 * Backoff after a failure: 1 s * 2^(attempts-1), at most 300 s, times a
 * uniform jitter in [0.5, 1] (random() in the finalize statement).
 *
 * A batch is atomic at micd (DESIGN section 4): one bad event refuses its
 * whole batch.  When the refusal names `events[k]...`, row k of that
 * node's part goes to 'dlq' and the others are published again at once,
 * within the same lease; when it names no event (413 body_too_large, 400
 * invalid_json) the remaining rows are published one by one.  So one
 * poison row never blocks the rows behind it.  (--batch is at most 1000,
 * libmic's batch size, so each node gets one part: its k-th event is the
 * k-th row, in claim order, that libmic routed to that node.)
 *
 * Versions: whatever the mode, a row with an aggregate_version is
 * claimable only when no lower version of its aggregate is 'pending' or
 * 'processing' (VERSIONED_SQL): micd refuses for good a version below the
 * first one it saw of an aggregate, so versions are published in order.
 *
 * --preserve-aggregate-order: a row is claimable only when no older
 * (created_at, id) row of its aggregate is 'pending' or 'processing' (the
 * seed's rule; a row without an aggregate heads itself).  So only heads are
 * claimed, at most one per aggregate per claim; a head under a live lease
 * or waiting for its not_before is not claimable and blocks its successors
 * (they fail the NOT EXISTS); 'dispatched' and 'dlq' release the next row.
 * Several relays: a successor becomes claimable only in a snapshot where
 * its head is terminal (or gone), and terminal rows never come back, so
 * two rows of one aggregate are never held at once; two relays racing for
 * the same head lock it once (SKIP LOCKED), and one that locks a row
 * another relay claimed and committed meanwhile re-checks it (READ
 * COMMITTED's re-check of the updated row) and finds a live lease.
 *
 * Wake-ups: LISTEN mic_outbox (the trigger's channel, whatever --table is)
 * on a second connection; the loop poll()s its socket and a self-pipe for
 * signals, with --poll-ms as the timeout (the polling fallback).  A claim
 * that found rows is followed by another at once (the rows it finished may
 * have released their successors: heads in ordered mode, lower versions in
 * any mode); only an empty claim waits.
 *
 * Failures: PostgreSQL or micd unreachable is logged and retried with a
 * pause (0.5 s doubling to 30 s, reset by a success), connections are
 * PQreset; never a crash.  A finalize that fails is retried the same way
 * (the lease may expire meanwhile: another relay then republishes, which
 * micd answers as duplicates).  libmic's request timeout is a quarter of
 * the lease (1..30 s) with 2 retries, so a publish ends before its lease.
 *
 * Stop: SIGTERM or SIGINT lets the batch in flight finish (publish and
 * finalize) or, when publishing had not started, releases it; then exit
 * 0.  A second signal cuts a publish in progress (its rows are released).
 *
 * Logs: one JSON line per batch and per error on stderr; never a payload,
 * a header value or the key.  Metrics (--metrics-listen): libmicrohttpd on
 * its own thread serves GET /metrics from figures the loop keeps.  The two
 * gauges come from one query the loop runs (never the metrics thread):
 * before each wait, and while busy at most once a second; it reads the
 * oldest live created_at (the partial claim index: cost grows with the
 * backlog) and counts the dlq rows (no index on status alone: a scan of the
 * table).  The age is computed at scrape time from that created_at, so it
 * keeps growing while the loop is away; the dlq count may be --poll-ms
 * old when idle.  mic_relay_published_total counts rows micd accepted
 * (stored or duplicate), mic_relay_publish_failures_total rows whose
 * publish in a claim ended in retry or dlq (a row's JSON that cannot be
 * read included).
 *
 * Exit status: 0 stopped by a signal, 1 could not start (metrics address,
 * libmic handle, memory) or rows left unfinalized at stop, 2 usage error.
 */
#define _GNU_SOURCE
#include "core/clock.h"
#include "mic.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <time.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define PROG "mic-relay"
#define EXIT_FAIL 1
#define EXIT_USAGE 2
#define CHANNEL "mic_outbox"      /* the trigger's NOTIFY channel */
#define PAUSE_MIN_MS 500
#define PAUSE_MAX_MS 30000
#define METRICS_EVERY_MS 1000
#define ERR_MAX 1024

/* ---- Settings ---- */

struct opts {
    const char *pg;
    const char *to[MIC_NODES_MAX];
    size_t nto;
    const char *key, *cacert, *table, *metrics_listen;
    long batch, lease_ttl, max_attempts, poll_ms;
    long ordered, delete_dispatched;
    long test_hold_ms, test_crash_after_publish;   /* testing only */
};

enum otype { O_STR, O_LIST, O_INT, O_FLAG };

struct setting {
    const char *name;
    enum otype type;
    const char *arg;      /* the value's name in --help */
    const char *def;      /* parsed like user input; NULL: none */
    long min, max;
    size_t off;
    const char *help;
};

#define F(field) offsetof(struct opts, field)

static const struct setting settings[] = {
    {"pg", O_STR, "CONNINFO", NULL, 0, 0, F(pg),
     "libpq connection string of the application's database\n"
     "(required)"},
    {"to", O_LIST, "URL", NULL, 0, 0, F(to),
     "micd base URL, http:// or https:// (required); repeat it for\n"
     "several nodes: libmic routes each event by its aggregate"},
    {"key", O_STR, "SECRET", NULL, 0, 0, F(key),
     "API key sent to micd (default: $MIC_KEY)"},
    {"cacert", O_STR, "FILE", NULL, 0, 0, F(cacert),
     "PEM CA certificate(s) for https:// nodes (default: the system's)"},
    {"table", O_STR, "NAME", "mic_outbox", 0, 0, F(table),
     "outbox table, NAME or SCHEMA.NAME (each quoted as an identifier)"},
    {"batch", O_INT, "N", "100", 1, 1000, F(batch),
     "most rows claimed and published at once"},
    {"lease-ttl", O_INT, "S", "30", 1, 86400, F(lease_ttl),
     "seconds a claim holds its rows (then they are claimable again)"},
    {"max-attempts", O_INT, "N", "10", 1, 1000000, F(max_attempts),
     "a row whose publish fails after this many claims goes to dlq"},
    {"preserve-aggregate-order", O_FLAG, NULL, NULL, 0, 0, F(ordered),
     "claim only the oldest pending or processing row of each aggregate"},
    {"delete-dispatched", O_FLAG, NULL, NULL, 0, 0, F(delete_dispatched),
     "delete published rows instead of marking them dispatched"},
    {"poll-ms", O_INT, "MS", "1000", 10, 3600000, F(poll_ms),
     "longest wait for a NOTIFY before polling the table"},
    {"metrics-listen", O_STR, "HOST:PORT", NULL, 0, 0, F(metrics_listen),
     "serve GET /metrics (Prometheus text) there; port 0: any (logged)"},
    {"test-hold-ms", O_INT, "MS", "0", 0, 600000, F(test_hold_ms),
     "testing only: wait this long between a claim and its publish"},
    {"test-crash-after-publish", O_FLAG, NULL, NULL, 0, 0, F(test_crash_after_publish),
     "testing only: SIGKILL itself right after micd answered a batch,\n"
     "before marking its rows (the seed's relay crash)"},
};

#define NSETTINGS (sizeof settings / sizeof settings[0])

/* ---- State ---- */

enum verdict { V_TODO = 0, V_OK, V_DLQ, V_RETRY, V_RELEASE };

static const char *const verdict_names[] = {"todo", "ok", "dlq", "retry", "release"};

struct row {
    long long id;
    int at;                  /* its row in the claim's PGresult */
    json_t *ev;              /* the event to publish, NULL when it has none */
    enum verdict v;
    int duplicate;
    char err[ERR_MAX];
};

struct batch {
    PGresult *res;           /* the claim's rows (the strings below point in) */
    struct row *rows;
    size_t n;
    const char *token;
};

struct relay {
    struct opts o;
    mic_client *mic;
    PGconn *db, *listen;
    char *sql_claim, *sql_finalize, *sql_metrics;
    struct MHD_Daemon *mhd;
    int64_t metrics_at_ms;
    long pause_ms;
};

/* Read by the metrics thread. */
static atomic_llong m_published, m_failures, m_dlq_rows, m_oldest_us;

static volatile sig_atomic_t g_stop;
static int g_pipe[2] = {-1, -1};
static mic_client *g_mic;

/* ---- Logs ---- */

/* One JSON line on stderr: time, level, msg, then the members packed from
 * 'fmt' (a jansson object format; NULL for none). */
static void logj(const char *level, const char *msg, const char *fmt, ...)
{
    char at[MIC_TIME_LEN + 1];
    json_t *j, *extra = NULL;
    char *txt;

    mic_time_format(mic_now_us(), at);
    j = json_pack("{s:s, s:s, s:s}", "time", at, "level", level, "msg", msg);
    if (!j)
        return;
    if (fmt) {
        va_list ap;

        va_start(ap, fmt);
        extra = json_vpack_ex(NULL, 0, fmt, ap);
        va_end(ap);
        if (extra)
            json_object_update(j, extra);
    }
    if ((txt = json_dumps(j, JSON_COMPACT))) {
        fprintf(stderr, "%s\n", txt);
        free(txt);
    }
    json_decref(extra);
    json_decref(j);
}

static void log_error(const char *msg, const char *error)
{
    logj("error", msg, "{s:s}", "error", error);
}

/* The first line of a libpq message, without its newline. */
static const char *pg_text(const char *s, char *buf, size_t cap)
{
    size_t n = strcspn(s ? s : "", "\n");

    snprintf(buf, cap, "%.*s", (int)(n < cap ? n : cap - 1), s ? s : "");
    return buf;
}

/* A failed statement's primary message (no DETAIL: it may quote values). */
static const char *pg_result_text(PGconn *db, PGresult *res, char *buf, size_t cap)
{
    const char *m = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;

    return pg_text(m ? m : PQerrorMessage(db), buf, cap);
}

/* ---- Signals and waiting ---- */

static void on_signal(int sig)
{
    int saved = errno;

    (void)sig;
    if (g_stop++ && g_mic)
        mic_client_stop(g_mic);   /* a second signal cuts the publish */
    if (write(g_pipe[1], "x", 1) < 0) {
        /* the pipe is full: a wake-up is already pending */
    }
    errno = saved;
}

static int signals_init(void)
{
    struct sigaction sa;

    if (pipe2(g_pipe, O_NONBLOCK | O_CLOEXEC))
        return -1;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTERM, &sa, NULL) || sigaction(SIGINT, &sa, NULL))
        return -1;
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

static void pipe_drain(void)
{
    char b[64];

    while (read(g_pipe[0], b, sizeof b) > 0) {
    }
}

/* Drop the notifications read so far; 1 when there was one. */
static int notifies_drain(PGconn *l)
{
    PGnotify *n;
    int got = 0;

    while ((n = PQnotifies(l))) {
        got = 1;
        PQfreemem(n);
    }
    return got;
}

/* Wait up to 'ms' for a NOTIFY on the listen connection (when there is
 * one and 'notify' is set) or a signal.  A broken listen connection is
 * closed (reopened by the loop). */
static void wait_for(struct relay *r, long ms, int notify)
{
    struct pollfd p[2] = {{.fd = g_pipe[0], .events = POLLIN}, {.fd = -1, .events = POLLIN}};
    int64_t until = mic_mono_ms() + ms;

    if (notify && r->listen) {
        if (!PQconsumeInput(r->listen))
            goto broken;
        if (notifies_drain(r->listen))
            return;
        p[1].fd = PQsocket(r->listen);
    }
    while (!g_stop) {
        int64_t left = until - mic_mono_ms();

        if (left <= 0)
            return;
        if (poll(p, 2, (int)left) < 0 && errno != EINTR)
            return;
        if (p[0].revents)
            pipe_drain();
        if (p[1].fd >= 0 && p[1].revents) {
            if (!PQconsumeInput(r->listen))
                goto broken;
            if (notifies_drain(r->listen))
                return;
        }
    }
    return;
broken: {
        char e[ERR_MAX];

        log_error("listen connection lost", pg_text(PQerrorMessage(r->listen), e, sizeof e));
        PQfinish(r->listen);
        r->listen = NULL;
    }
}

/* After a failure: wait the current pause, then double it. */
static void pause_after_failure(struct relay *r)
{
    wait_for(r, r->pause_ms, 0);
    r->pause_ms = r->pause_ms * 2 > PAUSE_MAX_MS ? PAUSE_MAX_MS : r->pause_ms * 2;
}

/* ---- PostgreSQL ---- */

/* libpq's notices (and the FATAL of a server shutting down) as log lines,
 * so that stderr stays JSON lines. */
static void on_notice(void *arg, const char *msg)
{
    char e[ERR_MAX];

    (void)arg;
    logj("warn", "PostgreSQL says", "{s:s}", "error", pg_text(msg, e, sizeof e));
}

static PGconn *pg_connect(const char *conninfo)
{
    const char *const keys[] = {"dbname", "fallback_application_name", NULL};
    const char *const vals[] = {conninfo, PROG, NULL};
    PGconn *c = PQconnectdbParams(keys, vals, 1);

    if (c)
        PQsetNoticeProcessor(c, on_notice, NULL);
    return c;
}

/* Make r->db usable: connect, or PQreset a broken connection.  Returns 0,
 * or -1 (logged). */
static int db_ready(struct relay *r)
{
    char e[ERR_MAX];

    if (r->db && PQstatus(r->db) == CONNECTION_OK)
        return 0;
    if (r->db)
        PQreset(r->db);
    else
        r->db = pg_connect(r->o.pg);
    if (!r->db) {
        log_error("cannot connect to PostgreSQL", "out of memory");
        return -1;
    }
    if (PQstatus(r->db) != CONNECTION_OK) {
        log_error("cannot connect to PostgreSQL", pg_text(PQerrorMessage(r->db), e, sizeof e));
        return -1;
    }
    logj("info", "connected to PostgreSQL", NULL);
    return 0;
}

/* Open the LISTEN connection when there is none; failures are logged and
 * leave the loop polling. */
static void listen_ready(struct relay *r)
{
    char e[ERR_MAX];
    PGresult *res;

    if (r->listen)
        return;
    r->listen = pg_connect(r->o.pg);
    if (!r->listen || PQstatus(r->listen) != CONNECTION_OK)
        goto fail;
    res = PQexec(r->listen, "LISTEN " CHANNEL);
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        PQclear(res);
        goto fail;
    }
    PQclear(res);
    if (PQsetnonblocking(r->listen, 1))
        goto fail;
    return;
fail:
    log_error("cannot LISTEN " CHANNEL " (polling every --poll-ms)",
              r->listen ? pg_text(PQerrorMessage(r->listen), e, sizeof e) : "out of memory");
    PQfinish(r->listen);
    r->listen = NULL;
}

/* The table name as SQL: each dot-separated part quoted with
 * PQescapeIdentifier.  Returns a malloc'd string or NULL. */
static char *table_sql(PGconn *db, const char *name)
{
    const char *dot = strchr(name, '.');
    char *a = NULL, *b = NULL, *out = NULL;

    if (!dot) {
        a = PQescapeIdentifier(db, name, strlen(name));
        out = a ? strdup(a) : NULL;
    } else {
        a = PQescapeIdentifier(db, name, (size_t)(dot - name));
        b = PQescapeIdentifier(db, dot + 1, strlen(dot + 1));
        if (a && b && asprintf(&out, "%s.%s", a, b) < 0)
            out = NULL;
    }
    PQfreemem(a);
    PQfreemem(b);
    return out;
}

/* The claim.  %1$s the table; the ordered clause is added with
 * --preserve-aggregate-order.  $1 lease seconds, $2 limit.  Claimable:
 * pending with not_before NULL or passed, or processing with an expired
 * lease; written as three ANDed terms (not an OR of two) so that the
 * planner walks the partial index mic_outbox_claim_idx (priority DESC, id)
 * in order and stops at the limit; the ordered clause's NOT EXISTS is an
 * index-only probe of mic_outbox_aggregate_idx (checked with EXPLAIN on
 * PostgreSQL 15). */
#define CLAIM_SQL \
    "UPDATE %1$s AS o SET status = 'processing', lease_token = (SELECT gen_random_uuid())," \
    " lease_expires_at = now() + make_interval(secs => $1::int), attempts = o.attempts + 1" \
    " WHERE o.id IN (SELECT c.id FROM %1$s AS c" \
    " WHERE c.status IN ('pending', 'processing')" \
    " AND (c.status = 'processing' OR c.not_before IS NULL OR c.not_before <= now())" \
    " AND (c.status = 'pending' OR c.lease_expires_at <= now())" \
    "%2$s" \
    " ORDER BY c.priority DESC, c.id LIMIT $2::int FOR UPDATE SKIP LOCKED)" \
    " RETURNING o.id, o.lease_token, o.event_id, o.topic, o.aggregate_type, o.aggregate_id," \
    " o.aggregate_version, o.schema_version, o.event_type, o.correlation_id, o.priority," \
    " o.headers::text, o.payload::text," \
    " to_char(o.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"

#define ORDERED_SQL \
    " AND (c.aggregate_type IS NULL OR NOT EXISTS (SELECT 1 FROM %1$s AS h" \
    " WHERE h.aggregate_type = c.aggregate_type AND h.aggregate_id = c.aggregate_id" \
    " AND h.status IN ('pending', 'processing')" \
    " AND (h.created_at, h.id) < (c.created_at, c.id)))"

/* Without --preserve-aggregate-order, a versioned row still waits for the
 * lower versions of its aggregate that are not yet published: micd takes
 * the first version it sees of an aggregate as its baseline and refuses a
 * lower one for good (409 version_below_baseline, DESIGN section 12), so a
 * version overtaken by its successor -- by another relay's batch, or by a
 * retry's backoff -- would be lost to the dlq. */
#define VERSIONED_SQL \
    " AND (c.aggregate_version IS NULL OR NOT EXISTS (SELECT 1 FROM %1$s AS h" \
    " WHERE h.aggregate_type = c.aggregate_type AND h.aggregate_id = c.aggregate_id" \
    " AND h.status IN ('pending', 'processing')" \
    " AND h.aggregate_version < c.aggregate_version))"

enum { C_ID, C_TOKEN, C_EVENT_ID, C_TOPIC, C_AGG_TYPE, C_AGG_ID, C_AGG_VERSION, C_SCHEMA,
       C_EVENT_TYPE, C_CORRELATION, C_PRIORITY, C_HEADERS, C_PAYLOAD, C_CREATED, C_NCOLS };

/* The finalize.  %1$s the table, %2$s the statement for 'ok' rows.  $1
 * the claim's token, $2 the verdicts [{"id","v","e"}], $3 --max-attempts.
 * Answers one row: dispatched, dlq, retry, released. */
#define FINALIZE_SQL \
    "WITH u AS (SELECT * FROM jsonb_to_recordset($2::jsonb) AS u(id bigint, v text, e text))," \
    " done AS (%2$s)," \
    " bad AS (UPDATE %1$s AS t SET" \
    " status = CASE WHEN u.v = 'dlq' OR t.attempts >= $3::int THEN 'dlq' ELSE 'pending' END," \
    " not_before = CASE WHEN u.v = 'retry' AND t.attempts < $3::int THEN now() +" \
    " make_interval(secs => least(300, 2 ^ (least(greatest(t.attempts, 1), 20) - 1))" \
    " * (0.5 + random() / 2)) END," \
    " last_error = u.e, lease_token = NULL, lease_expires_at = NULL" \
    " FROM u WHERE t.id = u.id AND u.v IN ('dlq', 'retry') AND t.lease_token = $1::uuid" \
    " RETURNING t.status)," \
    " rel AS (UPDATE %1$s AS t SET status = 'pending', attempts = greatest(t.attempts - 1, 0)," \
    " lease_token = NULL, lease_expires_at = NULL" \
    " FROM u WHERE t.id = u.id AND u.v = 'release' AND t.lease_token = $1::uuid" \
    " RETURNING t.id)" \
    " SELECT (SELECT count(*) FROM done), (SELECT count(*) FROM bad WHERE status = 'dlq')," \
    " (SELECT count(*) FROM bad WHERE status = 'pending'), (SELECT count(*) FROM rel)"

#define DONE_UPDATE_SQL \
    "UPDATE %1$s AS t SET status = 'dispatched', dispatched_at = now(), lease_token = NULL," \
    " lease_expires_at = NULL, not_before = NULL, last_error = NULL" \
    " FROM u WHERE t.id = u.id AND u.v = 'ok' AND t.lease_token = $1::uuid RETURNING t.id"

#define DONE_DELETE_SQL \
    "DELETE FROM %1$s AS t USING u WHERE t.id = u.id AND u.v = 'ok'" \
    " AND t.lease_token = $1::uuid RETURNING t.id"

/* The gauges' query: oldest live created_at (epoch microseconds, NULL when
 * none) and the dlq count. */
#define METRICS_SQL \
    "SELECT (SELECT (extract(epoch FROM min(created_at)) * 1000000)::bigint FROM %1$s" \
    " WHERE status IN ('pending', 'processing'))," \
    " (SELECT count(*) FROM %1$s WHERE status = 'dlq')"

/* Build the statements once a connection exists (PQescapeIdentifier needs
 * one).  Returns 0 or -1. */
static int sql_build(struct relay *r)
{
    char *t, *ord = NULL, *done = NULL;
    int rc = -1;

    if (r->sql_claim)
        return 0;
    if (!(t = table_sql(r->db, r->o.table)))
        return -1;
    if (asprintf(&ord, r->o.ordered ? ORDERED_SQL : VERSIONED_SQL, t) < 0) {
        ord = NULL;
        goto out;
    }
    if (asprintf(&done, r->o.delete_dispatched ? DONE_DELETE_SQL : DONE_UPDATE_SQL, t) < 0) {
        done = NULL;
        goto out;
    }
    if (asprintf(&r->sql_claim, CLAIM_SQL, t, ord) < 0)
        r->sql_claim = NULL;
    if (asprintf(&r->sql_finalize, FINALIZE_SQL, t, done) < 0)
        r->sql_finalize = NULL;
    if (asprintf(&r->sql_metrics, METRICS_SQL, t) < 0)
        r->sql_metrics = NULL;
    rc = r->sql_claim && r->sql_finalize && r->sql_metrics ? 0 : -1;
out:
    free(ord);
    free(done);
    free(t);
    return rc;
}

/* A statement failed: log it (a connection that broke is PQreset by the
 * next db_ready). */
static void db_failed(struct relay *r, const char *msg, PGresult *res)
{
    char e[ERR_MAX];

    log_error(msg, pg_result_text(r->db, res, e, sizeof e));
}

/* ---- Claim ---- */

static const char *col(PGresult *res, int i, int c)
{
    return PQgetisnull(res, i, c) ? NULL : PQgetvalue(res, i, c);
}

static int set_str(json_t *ev, const char *k, const char *v)
{
    return v ? json_object_set_new(ev, k, json_string(v)) : 0;
}

static int set_int(json_t *ev, const char *k, const char *v)
{
    return v ? json_object_set_new(ev, k, json_integer(strtoll(v, NULL, 10))) : 0;
}

/* Set the JSON column 'v' (jsonb text) as member 'k'.  Returns 0, or -1
 * with the reason in err. */
static int set_json(json_t *ev, const char *k, const char *v, char *err, size_t cap)
{
    json_error_t je;
    json_t *j;

    if (!v)
        return 0;
    if (!(j = json_loads(v, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je))) {
        snprintf(err, cap, "%s cannot be read: %s", k, je.text);
        return -1;
    }
    return json_object_set_new(ev, k, j) ? (snprintf(err, cap, "out of memory"), -1) : 0;
}

/* The event of claimed row i (DESIGN section 12's fields; NULL columns
 * left out, schema_version and priority always written, so every
 * re-publish of a row sends the same content).  Returns 0 and row->ev, or
 * -1 with row->err (the row cannot become an event: dlq). */
static int event_build(PGresult *res, int i, struct row *row)
{
    json_t *ev = json_object();

    if (!ev || set_str(ev, "event_id", col(res, i, C_EVENT_ID)) ||
        set_str(ev, "topic", col(res, i, C_TOPIC)) ||
        set_str(ev, "aggregate_type", col(res, i, C_AGG_TYPE)) ||
        set_str(ev, "aggregate_id", col(res, i, C_AGG_ID)) ||
        set_int(ev, "aggregate_version", col(res, i, C_AGG_VERSION)) ||
        set_int(ev, "schema_version", col(res, i, C_SCHEMA)) ||
        set_str(ev, "event_type", col(res, i, C_EVENT_TYPE)) ||
        set_str(ev, "correlation_id", col(res, i, C_CORRELATION)) ||
        set_int(ev, "priority", col(res, i, C_PRIORITY)) ||
        set_str(ev, "created_at", col(res, i, C_CREATED))) {
        snprintf(row->err, sizeof row->err, "out of memory");
        goto fail;
    }
    if (set_json(ev, "headers", col(res, i, C_HEADERS), row->err, sizeof row->err) ||
        set_json(ev, "payload", col(res, i, C_PAYLOAD), row->err, sizeof row->err))
        goto fail;
    row->ev = ev;
    return 0;
fail:
    json_decref(ev);
    return -1;
}

static void batch_fini(struct batch *b)
{
    for (size_t i = 0; i < b->n; i++)
        json_decref(b->rows[i].ev);
    free(b->rows);
    PQclear(b->res);
    memset(b, 0, sizeof *b);
}

static int row_cmp(const void *a, const void *b)
{
    const struct row *x = a, *y = b;

    return (x->id > y->id) - (x->id < y->id);
}

/* Claim up to --batch rows into *b.  Returns 0 (b->n may be 0) or -1
 * (logged).  Rows come sorted by id (the claim's order within a priority
 * is id order; micd's seq follows the batch's order). */
static int claim(struct relay *r, struct batch *b)
{
    char ttl[24], lim[24];
    const char *params[2] = {ttl, lim};
    int n;

    memset(b, 0, sizeof *b);
    snprintf(ttl, sizeof ttl, "%ld", r->o.lease_ttl);
    snprintf(lim, sizeof lim, "%ld", r->o.batch);
    b->res = PQexecParams(r->db, r->sql_claim, 2, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(b->res) != PGRES_TUPLES_OK || PQnfields(b->res) != C_NCOLS) {
        db_failed(r, "claim failed", b->res);
        PQclear(b->res);
        b->res = NULL;
        return -1;
    }
    if (!(n = PQntuples(b->res)))
        return 0;
    if (!(b->rows = calloc((size_t)n, sizeof *b->rows))) {
        log_error("claim failed", "out of memory");
        PQclear(b->res);
        b->res = NULL;
        return -1;   /* the rows' lease expires; they are claimed again */
    }
    b->n = (size_t)n;
    b->token = PQgetvalue(b->res, 0, C_TOKEN);
    for (int i = 0; i < n; i++) {
        struct row *row = &b->rows[i];

        row->id = strtoll(PQgetvalue(b->res, i, C_ID), NULL, 10);
        row->at = i;
        if (event_build(b->res, i, row))
            row->v = V_DLQ;
    }
    /* Priority order matters only between claims; within one batch micd
     * stores in the order given, and id order is the table's order. */
    qsort(b->rows, b->n, sizeof *b->rows, row_cmp);
    return 0;
}

/* ---- Publish ---- */

/* micd refused the event itself: it can never succeed. */
static int refused_for_good(const struct mic_failure *f)
{
    return f->kind == MIC_FAIL_SERVER &&
           (f->status == 400 || f->status == 409 || f->status == 413 || f->status == 422);
}

/* The k of a field "events[k]..." or -1. */
static long field_event(const char *field)
{
    char *end;
    long k;

    if (strncmp(field, "events[", 7))
        return -1;
    k = strtol(field + 7, &end, 10);
    return end != field + 7 && *end == ']' && k >= 0 ? k : -1;
}

/* Apply the results of one publish of the rows act[0..m) (res[] parallel;
 * with *singles set, each row was published alone).  Returns 1 when some
 * rows stay to be published again at once, else 0; sets *singles when a
 * refusal of several rows named none of them. */
static int results_apply(struct row *const *act, size_t m, struct mic_publish_result *res,
                         int *singles)
{
    int alone = *singles;

    int again = 0;

    for (size_t i = 0; i < m; i++) {
        struct row *row = act[i];
        const struct mic_failure *f = &res[i].fail;
        size_t part = 0, pos = 0;
        long k;

        if (row->v != V_TODO)
            continue;
        if (res[i].ok) {
            row->v = V_OK;
            row->duplicate = res[i].duplicate;
            continue;
        }
        mic_failure_text(f, row->err, sizeof row->err);
        if (f->kind == MIC_FAIL_STOPPED) {
            row->v = V_RELEASE;
            continue;
        }
        if (!refused_for_good(f)) {
            row->v = V_RETRY;
            continue;
        }
        /* The node's part: the rows this round sent to that node, in
         * order (all failed together); the refusal names its k-th event,
         * or none. */
        for (size_t j = 0; j < m && !alone; j++)
            if (!res[j].ok && res[j].node == res[i].node) {
                if (j < i)
                    pos++;
                part++;
            }
        k = field_event(f->field);
        if (alone || part == 1) {
            row->v = V_DLQ;
        } else if (k >= 0 && (size_t)k < part) {
            if ((size_t)k == pos)
                row->v = V_DLQ;
            else
                again = 1;   /* innocent: published again */
        } else {
            *singles = 1;
            again = 1;
        }
    }
    return again;
}

/* Publish the batch's rows that have an event, round after round until
 * each has a verdict.  Counts the failures (rows) in the metrics. */
static int publish(struct relay *r, struct batch *b)
{
    struct row **act = calloc(b->n, sizeof *act);
    json_t **evs = calloc(b->n, sizeof *evs);
    struct mic_publish_result *res = calloc(b->n, sizeof *res);
    int singles = 0, rc = -1;

    if (!act || !evs || !res)
        goto out;
    for (;;) {
        size_t m = 0;
        int again;

        for (size_t i = 0; i < b->n; i++)
            if (b->rows[i].v == V_TODO) {
                act[m] = &b->rows[i];
                evs[m++] = b->rows[i].ev;
            }
        if (!m)
            break;
        if (singles)
            for (size_t i = 0; i < m; i++)
                mic_publish_batch(r->mic, &evs[i], 1, &res[i]);
        else
            mic_publish_batch(r->mic, evs, m, res);
        again = results_apply(act, m, res, &singles);
        if (!again)
            break;
    }
    rc = 0;
out:
    free(act);
    free(evs);
    free(res);
    return rc;
}

/* ---- Finalize ---- */

struct tally {
    long long done, dlq, retry, released;
};

/* Apply every row's verdict in one statement, only where the claim's
 * token still holds.  Returns 0 and *t, or -1 (logged). */
static int finalize(struct relay *r, const struct batch *b, struct tally *t)
{
    json_t *arr = json_array();
    char *txt = NULL, max[24];
    const char *params[3];
    PGresult *res = NULL;
    int rc = -1;

    if (!arr)
        goto out;
    for (size_t i = 0; i < b->n; i++) {
        const struct row *row = &b->rows[i];
        json_t *it = json_pack("{s:I, s:s, s:s?}", "id", (json_int_t)row->id, "v",
                               verdict_names[row->v],
                               "e", row->v == V_DLQ || row->v == V_RETRY ? row->err : NULL);

        if (!it || json_array_append_new(arr, it))
            goto out;
    }
    if (!(txt = json_dumps(arr, JSON_COMPACT)))
        goto out;
    snprintf(max, sizeof max, "%ld", r->o.max_attempts);
    params[0] = b->token;
    params[1] = txt;
    params[2] = max;
    res = PQexecParams(r->db, r->sql_finalize, 3, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        db_failed(r, "finalize failed", res);
        goto out;
    }
    t->done = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    t->dlq = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
    t->retry = strtoll(PQgetvalue(res, 0, 2), NULL, 10);
    t->released = strtoll(PQgetvalue(res, 0, 3), NULL, 10);
    rc = 0;
out:
    if (rc && !res)
        log_error("finalize failed", "out of memory");
    PQclear(res);
    free(txt);
    json_decref(arr);
    return rc;
}

/* Finalize, retrying while the relay runs (the lease may lapse; then a
 * later claim republishes, as duplicates).  While stopping, three tries.
 * Returns 0, or -1 when it gave up. */
static int finalize_retried(struct relay *r, const struct batch *b, struct tally *t)
{
    for (int tries = 1;; tries++) {
        if (!db_ready(r) && !finalize(r, b, t))
            return 0;
        if (g_stop && tries >= 3) {
            logj("error", "gave up finalizing", "{s:i, s:s}", "rows", (int)b->n, "error",
                 "the rows stay processing until their lease expires, then are claimed and"
                 " republished (duplicates)");
            return -1;
        }
        if (g_stop)
            usleep(500 * 1000);
        else
            pause_after_failure(r);
    }
}

/* ---- Metrics ---- */

/* Read the gauges' figures from the table: before each wait ('force'),
 * and while busy at most once a second. */
static void gauges_refresh(struct relay *r, int force)
{
    int64_t now = mic_mono_ms();
    PGresult *res;

    if (!r->mhd || (!force && now - r->metrics_at_ms < METRICS_EVERY_MS))
        return;
    r->metrics_at_ms = now;
    res = PQexec(r->db, r->sql_metrics);
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
        atomic_store(&m_oldest_us,
                     PQgetisnull(res, 0, 0) ? 0 : strtoll(PQgetvalue(res, 0, 0), NULL, 10));
        atomic_store(&m_dlq_rows, strtoll(PQgetvalue(res, 0, 1), NULL, 10));
    } else {
        db_failed(r, "metrics query failed", res);
    }
    PQclear(res);
}

static enum MHD_Result metrics_answer(void *cls, struct MHD_Connection *conn, const char *url,
                                      const char *method, const char *version,
                                      const char *upload, size_t *upload_size, void **state)
{
    char body[1536];
    long long oldest = atomic_load(&m_oldest_us);
    double age = 0;
    unsigned status = MHD_HTTP_OK;
    struct MHD_Response *resp;
    enum MHD_Result ret;
    int n;

    (void)cls, (void)version, (void)upload, (void)upload_size, (void)state;
    if (oldest > 0) {
        age = (double)(mic_now_us() - oldest) / 1e6;
        if (age < 0)
            age = 0;
    }
    if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
        status = MHD_HTTP_METHOD_NOT_ALLOWED;
        n = snprintf(body, sizeof body, "GET /metrics\n");
    } else if (strcmp(url, "/metrics")) {
        status = MHD_HTTP_NOT_FOUND;
        n = snprintf(body, sizeof body, "GET /metrics\n");
    } else {
        n = snprintf(body, sizeof body,
            "# HELP mic_relay_oldest_pending_age_seconds Age of the oldest pending or processing"
            " row (0 when none).\n"
            "# TYPE mic_relay_oldest_pending_age_seconds gauge\n"
            "mic_relay_oldest_pending_age_seconds %.6f\n"
            "# HELP mic_relay_published_total Row publishes micd stored or answered as"
            " duplicates.\n"
            "# TYPE mic_relay_published_total counter\n"
            "mic_relay_published_total %lld\n"
            "# HELP mic_relay_publish_failures_total Row publishes that failed (to be retried"
            " or dead-lettered).\n"
            "# TYPE mic_relay_publish_failures_total counter\n"
            "mic_relay_publish_failures_total %lld\n"
            "# HELP mic_relay_dlq_rows Rows in status dlq.\n"
            "# TYPE mic_relay_dlq_rows gauge\n"
            "mic_relay_dlq_rows %lld\n",
            age, (long long)atomic_load(&m_published), (long long)atomic_load(&m_failures),
            (long long)atomic_load(&m_dlq_rows));
    }
    resp = MHD_create_response_from_buffer((size_t)n, body, MHD_RESPMEM_MUST_COPY);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, "Content-Type",
                            status == MHD_HTTP_OK ? "text/plain; version=0.0.4" : "text/plain");
    ret = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* Serve /metrics on HOST:PORT.  Returns 0 (r->mhd), or -1 (logged). */
static int metrics_start(struct relay *r)
{
    const char *spec = r->o.metrics_listen, *colon = strrchr(spec, ':');
    struct addrinfo hints = {.ai_flags = AI_PASSIVE | AI_NUMERICSERV, .ai_socktype = SOCK_STREAM};
    struct addrinfo *ai = NULL;
    const union MHD_DaemonInfo *info;
    char host[256];
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD;
    int rc;

    snprintf(host, sizeof host, "%.*s", (int)(colon - spec), spec);
    if (host[0] == '[' && host[strlen(host) - 1] == ']') {
        memmove(host, host + 1, strlen(host));
        host[strlen(host) - 1] = 0;
    }
    if ((rc = getaddrinfo(host, colon + 1, &hints, &ai))) {
        logj("error", "bad --metrics-listen", "{s:s, s:s}", "address", spec, "error",
             gai_strerror(rc));
        return -1;
    }
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    r->mhd = MHD_start_daemon(flags, 0, NULL, NULL, metrics_answer, r, MHD_OPTION_SOCK_ADDR,
                              ai->ai_addr, MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!r->mhd) {
        logj("error", "cannot listen for metrics", "{s:s}", "address", spec);
        return -1;
    }
    info = MHD_get_daemon_info(r->mhd, MHD_DAEMON_INFO_BIND_PORT);
    logj("info", "metrics listening", "{s:s, s:i}", "host", host, "port",
         info ? (int)info->port : -1);
    return 0;
}

/* ---- The loop ---- */

/* One claim, publish and finalize.  Returns the rows claimed, or -1 after
 * a failure (the caller pauses). */
static long step(struct relay *r, int *stop_failed)
{
    struct batch b;
    struct tally t = {0};
    int64_t t0 = mic_mono_ms();
    long dups = 0, failed = 0, ok = 0, n;

    if (claim(r, &b))
        return -1;
    if (!b.n) {
        batch_fini(&b);
        return 0;
    }
    if (r->o.test_hold_ms > 0 && !g_stop) {
        struct timespec ts = {r->o.test_hold_ms / 1000, (r->o.test_hold_ms % 1000) * 1000000L};

        nanosleep(&ts, NULL);   /* a signal ends it early */
    }
    if (g_stop) {
        for (size_t i = 0; i < b.n; i++)
            b.rows[i].v = V_RELEASE;
    } else if (publish(r, &b)) {
        log_error("publish failed", "out of memory");
        for (size_t i = 0; i < b.n; i++)
            if (b.rows[i].v == V_TODO)
                b.rows[i].v = V_RELEASE;
    }
    for (size_t i = 0; i < b.n; i++) {
        if (b.rows[i].v == V_DLQ)
            logj("warn", "refused for good", "{s:I, s:s, s:s}", "id", (json_int_t)b.rows[i].id,
                 "event_id", PQgetvalue(b.res, b.rows[i].at, C_EVENT_ID), "error", b.rows[i].err);
        ok += b.rows[i].v == V_OK;
        dups += b.rows[i].v == V_OK && b.rows[i].duplicate;
        failed += b.rows[i].v == V_RETRY;
        if (b.rows[i].v == V_RETRY || b.rows[i].v == V_DLQ)
            atomic_fetch_add(&m_failures, 1);
    }
    atomic_fetch_add(&m_published, ok);
    if (r->o.test_crash_after_publish && ok)
        raise(SIGKILL);   /* micd has them; the rows still say processing */
    if (finalize_retried(r, &b, &t)) {
        *stop_failed = 1;
        batch_fini(&b);
        return -1;
    }
    logj("info", g_stop && t.released ? "released" : "published",
         "{s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "rows", (json_int_t)b.n, "duplicates",
         (json_int_t)dups, "dlq", (json_int_t)t.dlq, "retry", (json_int_t)t.retry, "released",
         (json_int_t)t.released, "lease_lost",
         (json_int_t)(b.n - (size_t)(t.done + t.dlq + t.retry + t.released)), "ms",
         (json_int_t)(mic_mono_ms() - t0));
    /* Every published row failed for a passing reason (micd down): pause
     * the loop too, so the next rows do not burn their attempts at once. */
    if (failed && (size_t)failed == b.n) {
        for (size_t i = 0; i < b.n; i++)
            if (b.rows[i].v == V_RETRY) {
                log_error("micd unavailable", b.rows[i].err);
                break;
            }
        batch_fini(&b);
        return -1;
    }
    n = (long)b.n;
    batch_fini(&b);
    return n;
}

static int run(struct relay *r)
{
    int stop_failed = 0;

    r->pause_ms = PAUSE_MIN_MS;
    while (!g_stop && !stop_failed) {
        int idle;
        long n;

        if (db_ready(r) || sql_build(r)) {
            pause_after_failure(r);
            continue;
        }
        listen_ready(r);
        n = step(r, &stop_failed);
        if (n < 0) {
            pause_after_failure(r);
            continue;
        }
        r->pause_ms = PAUSE_MIN_MS;
        /* Claim again at once after any row: a full claim may have left
         * rows behind, and a row just finished may have made its
         * successor claimable (a head in ordered mode; the next version
         * in any mode, see VERSIONED_SQL).  Only an empty claim waits. */
        idle = n == 0;
        if (!db_ready(r))
            gauges_refresh(r, idle);
        if (idle)
            wait_for(r, r->o.poll_ms, 1);
    }
    logj("info", "stopped", NULL);
    return stop_failed ? EXIT_FAIL : 0;
}

/* ---- Options ---- */

static void usage(FILE *f)
{
    fputs("usage: " PROG " --pg CONNINFO --to URL [--to URL ...] [options]\n"
          "\n"
          "Publishes the rows of the transactional outbox table (proto/outbox.sql) to micd:\n"
          "claims pending rows under a lease (FOR UPDATE SKIP LOCKED), publishes them as one\n"
          "batch keeping event_id and created_at, then marks them dispatched (or dlq, or\n"
          "pending with backoff) where the lease is still its own.  Several may run at once.\n"
          "\n", f);
    for (size_t i = 0; i < NSETTINGS; i++) {
        const struct setting *s = &settings[i];
        char left[64];
        const char *h = s->help;

        char extra[96] = "";
        size_t n = 0;

        snprintf(left, sizeof left, "--%s%s%s", s->name, s->arg ? " " : "", s->arg ? s->arg : "");
        fprintf(f, "  %-28s ", left);
        while (*h) {
            n = strcspn(h, "\n");
            fprintf(f, "%.*s", (int)n, h);
            h += n;
            if (*h) {
                fprintf(f, "\n  %-28s ", "");
                h++;
            }
        }
        if (s->type == O_INT)
            snprintf(extra, sizeof extra, "(default %s; %ld..%ld)", s->def, s->min, s->max);
        else if (s->def)
            snprintf(extra, sizeof extra, "(default %s)", s->def);
        /* the default on the same line when it fits in 100 columns */
        if (*extra && 31 + n + 1 + strlen(extra) <= 100)
            fprintf(f, " %s", extra);
        else if (*extra)
            fprintf(f, "\n  %-28s %s", "", extra);
        fputc('\n', f);
    }
    fputs("  --help                       this text\n"
          "\n"
          "Logs: one JSON line per batch on stderr,\n"
          "  {\"time\",\"level\":\"info\",\"msg\":\"published\",\"rows\",\"duplicates\",\"dlq\",\"retry\",\n"
          "   \"released\",\"lease_lost\",\"ms\"}, and one per error {\"level\":\"error\",\"msg\",\"error\"}.\n"
          "Metrics (GET /metrics): mic_relay_oldest_pending_age_seconds, mic_relay_published_total,\n"
          "  mic_relay_publish_failures_total, mic_relay_dlq_rows.\n"
          "Exit status: 0 stopped by SIGTERM or SIGINT (the batch in flight finished or\n"
          "released), 1 could not start or rows were left unfinalized at stop, 2 usage error.\n",
          f);
}

/* Print "mic-relay: WHAT[ ARG] (see --help)" on stderr; returns
 * EXIT_USAGE.  'arg' may be NULL. */
static int usage_error(const char *what, const char *arg)
{
    fprintf(stderr, "%s: %s%s%s (see --help)\n", PROG, what, arg ? " " : "", arg ? arg : "");
    return EXIT_USAGE;
}

/* A bad value of setting 's': "--NAME VALUE: WHY" (the bounds for an
 * integer). */
static int setting_error(const struct setting *s, const char *v, const char *why)
{
    if (s->type == O_INT)
        fprintf(stderr, "%s: --%s %s: want an integer in %ld..%ld (see --help)\n", PROG, s->name,
                v, s->min, s->max);
    else
        fprintf(stderr, "%s: --%s '%s': %s (see --help)\n", PROG, s->name, v, why);
    return EXIT_USAGE;
}

/* Set setting 's' from 'v'.  Returns 0 or EXIT_USAGE (printed). */
static int setting_set(struct opts *o, const struct setting *s, const char *v)
{
    char *p = (char *)o + s->off, *end;
    long n;

    switch (s->type) {
    case O_STR:
        if (!*v)
            return setting_error(s, v, "empty value");
        *(const char **)p = v;
        return 0;
    case O_LIST:
        if (!*v)
            return setting_error(s, v, "empty value");
        if (o->nto >= MIC_NODES_MAX)
            return setting_error(s, v, "too many nodes (MIC_NODES_MAX)");
        o->to[o->nto++] = v;
        return 0;
    case O_INT:
        errno = 0;
        n = strtol(v, &end, 10);
        if (errno || end == v || *end || n < s->min || n > s->max)
            return setting_error(s, v, NULL);
        *(long *)p = n;
        return 0;
    case O_FLAG:
        *(long *)p = 1;
        return 0;
    }
    return EXIT_USAGE;
}

/* Parse argv into 'o'.  Returns 0, EXIT_USAGE (printed), or -1 after
 * --help. */
static int opts_parse(struct opts *o, int argc, char **argv)
{
    struct option lo[NSETTINGS + 2];
    int c, idx;

    memset(o, 0, sizeof *o);
    for (size_t i = 0; i < NSETTINGS; i++) {
        lo[i] = (struct option){settings[i].name,
                                settings[i].type == O_FLAG ? no_argument : required_argument,
                                NULL, (int)i + 256};
        if (settings[i].def && setting_set(o, &settings[i], settings[i].def))
            return EXIT_USAGE;
    }
    lo[NSETTINGS] = (struct option){"help", no_argument, NULL, 'h'};
    lo[NSETTINGS + 1] = (struct option){NULL, 0, NULL, 0};
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", lo, &idx)) != -1) {
        if (c == 'h') {
            usage(stdout);
            return -1;
        }
        if (c < 256 || c >= 256 + (int)NSETTINGS)
            return usage_error("unknown or incomplete option",
                               optind > 0 && optind <= argc ? argv[optind - 1] : "?");
        if (setting_set(o, &settings[c - 256], optarg))
            return EXIT_USAGE;
    }
    if (optind < argc)
        return usage_error("unexpected argument", argv[optind]);
    if (!o->pg)
        return usage_error("--pg CONNINFO is required", NULL);
    if (!o->nto)
        return usage_error("--to URL is required", NULL);
    if (!o->key && getenv("MIC_KEY") && *getenv("MIC_KEY"))
        o->key = getenv("MIC_KEY");
    if (o->table[0] == '.' || o->table[strlen(o->table) - 1] == '.' ||
        strchr(strchr(o->table, '.') ? strchr(o->table, '.') + 1 : "", '.'))
        return usage_error("--table must be NAME or SCHEMA.NAME", NULL);
    if (o->metrics_listen) {
        const char *colon = strrchr(o->metrics_listen, ':');

        if (!colon || colon == o->metrics_listen || !colon[1])
            return usage_error("--metrics-listen must be HOST:PORT", NULL);
    }
    return 0;
}

/* ---- Main ---- */

int main(int argc, char **argv)
{
    struct relay r;
    struct mic_failure err;
    long timeout;
    int rc = EXIT_FAIL;

    memset(&r, 0, sizeof r);
    if ((rc = opts_parse(&r.o, argc, argv)))
        return rc < 0 ? 0 : rc;
    rc = EXIT_FAIL;
    timeout = r.o.lease_ttl * 1000 / 4;
    timeout = timeout < 1000 ? 1000 : timeout > 30000 ? 30000 : timeout;
    if (mic_client_new(&(struct mic_client_opts){.urls = r.o.to, .nurls = r.o.nto,
                                                 .key = r.o.key, .cafile = r.o.cacert,
                                                 .connect_timeout_ms = timeout < 5000 ? timeout : 5000,
                                                 .timeout_ms = timeout, .retries = 2,
                                                 .retry_max_ms = 2000,
                                                 .user_agent = PROG "/1"},
                       &r.mic, &err)) {
        char e[ERR_MAX];

        log_error("cannot create the micd client", mic_failure_text(&err, e, sizeof e));
        return EXIT_USAGE;
    }
    g_mic = r.mic;
    if (signals_init()) {
        log_error("cannot set up signals", strerror(errno));
        goto out_mic;
    }
    if (r.o.metrics_listen && metrics_start(&r))
        goto out_mic;
    logj("info", "started", "{s:s, s:i, s:I, s:I, s:I, s:b, s:b, s:I}", "table", r.o.table,
         "nodes", (int)r.o.nto, "batch", (json_int_t)r.o.batch, "lease_ttl",
         (json_int_t)r.o.lease_ttl, "max_attempts", (json_int_t)r.o.max_attempts,
         "preserve_aggregate_order", (int)r.o.ordered, "delete_dispatched",
         (int)r.o.delete_dispatched, "poll_ms", (json_int_t)r.o.poll_ms);
    rc = run(&r);
    if (r.mhd)
        MHD_stop_daemon(r.mhd);
out_mic:
    g_mic = NULL;
    mic_client_free(r.mic);
    PQfinish(r.listen);
    PQfinish(r.db);
    free(r.sql_claim);
    free(r.sql_finalize);
    free(r.sql_metrics);
    return rc;
}
