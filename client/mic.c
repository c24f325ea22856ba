/* mic.c - the admin and worker command line of MIC (DESIGN sections 4, 6, 12).
 *
 * DESIGN
 *
 * One run is one command.  argv is parsed against two tables, the options
 * (opt_defs) and the commands (commands): each command names the options
 * it accepts and how many arguments it takes, so a misplaced option is a
 * usage error before anything is sent.  A command builds what it sends
 * with jansson and makes libmic's typed call for it (client/mic.h):
 * mic_publish / mic_publish_batch (retried on 429, 503 and no answer with
 * the same event ids), mic_claim_json and mic_settle_json (the options as
 * typed, so micd judges them), mic_admin_* for the rest.  libmic owns the
 * paths, the node each request goes to and the reading of error answers
 * (mic_response_failure).  The answer is printed either as a readable
 * table or, with --json, the server's JSON exactly as it came
 * (mic_client_answer; one answer per line); a result merged from several
 * nodes has no such answer and is printed as jansson writes it.
 *
 *   argv -> opts_parse -> command table -> cmd_<name> -> mic_* -> print
 *
 * Nodes.  --url (or $MIC_URL) takes one micd or several, comma-separated,
 * as libmic's handle holds them.  With several, each command does what
 * libmic does over nodes: publish routes each event to its node (an NDJSON
 * batch is split per node), stats, oldest and blocked merge every node's
 * answer (mic_admin_stats: counts summed, ages the oldest, alert if any),
 * topic and group create and delete go to every node, their show and list
 * and aggregate read the node libmic picks.  The commands whose state
 * lives on one node (claim, ack, nack, extend, dlq, replay, backup: a
 * SEQ:TOKEN, a DLQ cursor, a run) refuse several (one_node()).
 *
 * Invariants:
 *   - libmic is the only way to the server; the handle is made on first use
 *     (client()), so 'keys new' needs none.
 *   - fail_line() is the only place that turns a failure (struct
 *     mic_failure, text by mic_failure_text) into the one-line message (in
 *     cli.err) and an exit status.
 *   - stdout carries results only.  stderr carries at most one line: the
 *     error ("mic: 409 event_id_conflict: ... (field event_id)", or
 *     "mic: cannot reach URL: REASON"), or the summary of per-item
 *     failures.
 *   - Exit status: 0 success; 1 the server answered an error (4xx/5xx) or
 *     an item failed (lease_lost, not_found, not_in_dlq); 2 usage error or
 *     the server could not be reached (no HTTP answer).
 *   - Every command frees what it allocates before it returns; main frees
 *     the rest (ASan-clean).
 *
 * NDJSON publishing reads a file (or stdin) line by line and sends batches
 * of at most BATCH_EVENTS events and about BATCH_BYTES of input, each batch
 * atomic on the server.  Lines are checked (a JSON object each) before
 * their batch is sent; the first failure stops the run, and the message
 * says which lines were not published (the batches before them were).  An
 * event without event_id gets one from libmic before it is sent, so a
 * retried batch is a duplicate, never stored twice.  The run ends with one
 * summary line on stdout (published, duplicates, failed, elapsed), also
 * when it failed (before the error line); --verbose adds the per-event
 * table, --json prints the server's answers instead.
 *
 * Resources (topic, group, replay: create, show, list, delete) map to the
 * PUT/POST, GET and DELETE of DESIGN section 4.  A create sends --body
 * (a JSON object from a file or stdin, as is) with the fields of the
 * options given set over it; durations take s, m, h or d.  A create of a
 * topic or group that exists is a PUT: it replaces the config (the server
 * refuses a change of a field fixed at creation).
 *
 * --help lists every command with the first sentence of its help, wrapped
 * at whole words (print_summary): a help text's first sentence is its
 * summary, so it is written to stand alone.
 *
 * The server is the authority on values: the command line checks the
 * syntax of what it must put into JSON (integers, JSON payloads, SEQ:TOKEN)
 * and leaves bounds and names to the server, whose error it reports.
 */
#define _GNU_SOURCE
#include "http/auth.h"
#include "core/buf.h"
#include "mic.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PROG "mic"
#define EXIT_FAIL 1             /* the server answered an error, or an item failed */
#define EXIT_USAGE 2            /* usage error, or the server could not be reached */
#define DEFAULT_URL "http://127.0.0.1:8080"
#define BATCH_EVENTS 1000
#define BATCH_BYTES (8u << 20)  /* stays under the server's 16 MiB body limit */
#define CONNECT_TIMEOUT_MS 10000L
#define REQUEST_TIMEOUT_MS 120000L  /* plus --wait for a long-poll claim */
#define ERR_MAX 1024

/* ---- Options ---- */

/* Every option of every command; the command table says which apply. */
enum opt_id {
    O_URL, O_JSON, O_HELP, O_TOPIC, O_ID, O_AGGREGATE, O_VERSION, O_TYPE,
    O_PRIORITY, O_PAYLOAD, O_HEADER, O_MAX, O_WAIT, O_LEASE, O_WORKER,
    O_ERROR, O_RETRY_AFTER, O_LIMIT, O_AFTER, O_REASON, O_ALL, O_KEY, O_CACERT,
    O_ROLE, O_SCOPE, O_VERBOSE, O_BODY,
    /* topic create */
    O_RETENTION, O_MAX_PAYLOAD, O_REQUIRE_VERSIONS, O_DEDUPE_RETAIN,
    /* group create */
    O_TOPICS, O_KIND, O_ORDERED, O_MAX_ATTEMPTS, O_BACKOFF_INITIAL, O_BACKOFF_MAX,
    O_BACKOFF_MULT, O_START, O_ALERT, O_DLQ_POLICY, O_SINK_URL, O_SINK_STREAM,
    O_SINK_SUBJECT,
    /* replay create */
    O_FROM, O_TO, O_EFFECTS, O_TARGET_VERSION,
    O_COUNT
};

#define OPT(o) (UINT64_C(1) << (o))
_Static_assert(O_COUNT <= 64, "a command's options are bits of a uint64_t");
#define OPT_BASE 256
#define COMMON (OPT(O_URL) | OPT(O_JSON) | OPT(O_HELP) | OPT(O_KEY) | OPT(O_CACERT))
#define EVENT_OPTS (OPT(O_TOPIC) | OPT(O_ID) | OPT(O_AGGREGATE) | OPT(O_VERSION) | \
                    OPT(O_TYPE) | OPT(O_PRIORITY) | OPT(O_PAYLOAD) | OPT(O_HEADER))
#define TOPIC_OPTS (OPT(O_BODY) | OPT(O_RETENTION) | OPT(O_MAX_PAYLOAD) | \
                    OPT(O_REQUIRE_VERSIONS) | OPT(O_DEDUPE_RETAIN))
#define GROUP_OPTS (OPT(O_BODY) | OPT(O_TOPICS) | OPT(O_KIND) | OPT(O_ORDERED) | \
                    OPT(O_MAX_ATTEMPTS) | OPT(O_BACKOFF_INITIAL) | OPT(O_BACKOFF_MAX) | \
                    OPT(O_BACKOFF_MULT) | OPT(O_LEASE) | OPT(O_START) | OPT(O_ALERT) | \
                    OPT(O_DLQ_POLICY) | OPT(O_SINK_URL) | OPT(O_SINK_STREAM) | \
                    OPT(O_SINK_SUBJECT))
#define REPLAY_OPTS (OPT(O_BODY) | OPT(O_TOPIC) | OPT(O_FROM) | OPT(O_TO) | OPT(O_KIND) | \
                     OPT(O_EFFECTS) | OPT(O_TARGET_VERSION))

struct opt_def {
    const char *name;
    int has_arg;
};

static const struct opt_def opt_defs[O_COUNT] = {
    [O_URL] = {"url", 1},         [O_JSON] = {"json", 0},
    [O_HELP] = {"help", 0},       [O_TOPIC] = {"topic", 1},
    [O_ID] = {"id", 1},           [O_AGGREGATE] = {"aggregate", 1},
    [O_VERSION] = {"version", 1}, [O_TYPE] = {"type", 1},
    [O_PRIORITY] = {"priority", 1}, [O_PAYLOAD] = {"payload", 1},
    [O_HEADER] = {"header", 1},   [O_MAX] = {"max", 1},
    [O_WAIT] = {"wait", 1},       [O_LEASE] = {"lease", 1},
    [O_WORKER] = {"worker", 1},   [O_ERROR] = {"error", 1},
    [O_RETRY_AFTER] = {"retry-after", 1}, [O_LIMIT] = {"limit", 1},
    [O_AFTER] = {"after", 1},     [O_REASON] = {"reason", 1},
    [O_ALL] = {"all", 0},         [O_KEY] = {"key", 1},
    [O_CACERT] = {"cacert", 1},   [O_ROLE] = {"role", 1},
    [O_SCOPE] = {"scope", 1},     [O_VERBOSE] = {"verbose", 0},
    [O_BODY] = {"body", 1},
    [O_RETENTION] = {"retention", 1}, [O_MAX_PAYLOAD] = {"max-payload-bytes", 1},
    [O_REQUIRE_VERSIONS] = {"require-versions", 0},
    [O_DEDUPE_RETAIN] = {"dedupe-retain", 1},
    [O_TOPICS] = {"topics", 1},   [O_KIND] = {"kind", 1},
    [O_ORDERED] = {"ordered", 0}, [O_MAX_ATTEMPTS] = {"max-attempts", 1},
    [O_BACKOFF_INITIAL] = {"backoff-initial-ms", 1},
    [O_BACKOFF_MAX] = {"backoff-max-ms", 1},
    [O_BACKOFF_MULT] = {"backoff-multiplier", 1},
    [O_START] = {"start", 1},     [O_ALERT] = {"alert-oldest-unhandled", 1},
    [O_DLQ_POLICY] = {"dlq-policy", 1},
    [O_SINK_URL] = {"sink-nats", 1}, [O_SINK_STREAM] = {"sink-stream", 1},
    [O_SINK_SUBJECT] = {"sink-subject", 1},
    [O_FROM] = {"from", 1},       [O_TO] = {"to", 1},
    [O_EFFECTS] = {"effects", 1}, [O_TARGET_VERSION] = {"target-version", 1},
};

struct cli;

/* One row of the command table (at the end of the file). */
struct command {
    const char *name, *sub;       /* "dlq", "list"; sub NULL for one word */
    int (*fn)(struct cli *c);
    uint64_t opts;                /* accepted options besides COMMON (OPT bits) */
    int min_args, max_args;       /* max -1: any number */
    const char *synopsis;         /* after "mic " */
    const char *help;             /* what it does, its options and output */
};

/* One run's state.  'val' borrows from argv. */
struct cli {
    const char *url;              /* --url, else $MIC_URL, else DEFAULT_URL (borrowed) */
    char *urlbuf;                 /* a copy of url, split at its commas (owned) */
    const char **urls;            /* the nodes: pointers into urlbuf (owned array) */
    size_t nurls;
    int json;
    const char *val[O_COUNT];     /* each option's value (NULL: not given) */
    int given[O_COUNT];
    const char **headers;         /* every --header, in order (owned array) */
    int nheaders;
    const char **scopes;          /* every --scope, in order (owned array) */
    int nscopes;
    const char *key;              /* --key, else $MIC_KEY (borrowed), or NULL */
    const char **pos;             /* positional arguments (owned array) */
    int npos;
    const char **args;            /* the command's arguments: pos after its words */
    int nargs;
    const struct command *cmd;
    mic_client *mc;               /* made by client() on first use (owned) */
    char err[ERR_MAX];            /* the error line, without "mic: " */
};

/* ---- Small helpers ---- */

__attribute__((format(printf, 2, 3)))
static void set_err(struct cli *c, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
}

/* Print the error line (one line: control characters become spaces) and
 * return 'rc'. */
static int report(struct cli *c, int rc)
{
    for (char *p = c->err; *p; p++)
        if ((unsigned char)*p < 0x20)
            *p = ' ';
    fprintf(stderr, PROG ": %s\n", c->err);
    return rc;
}

__attribute__((format(printf, 2, 3)))
static int usage_error(struct cli *c, const char *fmt, ...)
{
    char msg[ERR_MAX - 64];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->cmd)
        set_err(c, "%s (see " PROG " %s%s%s --help)", msg, c->cmd->name, c->cmd->sub ? " " : "",
                c->cmd->sub ? c->cmd->sub : "");
    else
        set_err(c, "%s (see " PROG " --help)", msg);
    return report(c, EXIT_USAGE);
}

/* The clients share micd's growable buffer (server/core/buf.c); these two
 * report its out-of-memory flag as -1 so appends chain with ||. */
static int buf_add(struct mic_buf *b, const void *p, size_t n)
{
    mic_buf_add(b, p, n);
    return b->oom ? -1 : 0;
}

static int buf_puts(struct mic_buf *b, const char *s)
{
    return buf_add(b, s, strlen(s));
}

/* Parse a whole decimal integer in [lo, hi]; returns 0 or -1. */
static int parse_int(const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    long long v;

    if (!s || !*s)
        return -1;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* The integer value of option 'o' into *out (untouched when the option
 * is absent).  Returns 0, or EXIT_USAGE after the message. */
static int opt_int(struct cli *c, enum opt_id o, long long lo, long long *out)
{
    if (!c->val[o])
        return 0;
    if (parse_int(c->val[o], lo, INT64_MAX, out))
        return usage_error(c, "--%s takes an integer%s, not '%s'", opt_defs[o].name,
                           lo >= 0 ? " >= 0" : "", c->val[o]);
    return 0;
}

/* Set key 'k' of 'obj' to the integer of option 'o' when given. */
static int opt_int_field(struct cli *c, json_t *obj, enum opt_id o, const char *k, long long lo)
{
    long long v;
    int rc;

    if (!c->val[o])
        return 0;
    if ((rc = opt_int(c, o, lo, &v)))
        return rc;
    json_object_set_new(obj, k, json_integer(v));
    return 0;
}

static int oom(struct cli *c)
{
    set_err(c, "out of memory");
    return report(c, EXIT_FAIL);
}

/* ---- HTTP (libmic) ---- */

/* Put the line of failure 'f' into c->err: mic_failure_text's, with
 * 'note' (may be NULL) after the server's field and, for a 429, when to
 * retry.  Returns the exit status: EXIT_USAGE when no answer came or the
 * request could not be made as given (a bad URL), else EXIT_FAIL.  The
 * caller reports it. */
static int fail_line(struct cli *c, const struct mic_failure *f, const char *note)
{
    struct mic_failure g = *f;
    size_t len;

    if (note && g.kind == MIC_FAIL_SERVER && g.code[0] && g.field[0])
        snprintf(g.field, sizeof g.field, "%s%s", f->field, note);
    mic_failure_text(&g, c->err, sizeof c->err);
    len = strlen(c->err);
    if (g.status == 429 && g.retry_after_ms >= 0)
        snprintf(c->err + len, sizeof c->err - len, "; retry after %ld s",
                 g.retry_after_ms / 1000);
    return g.kind == MIC_FAIL_CONNECT || g.kind == MIC_FAIL_ARG ? EXIT_USAGE : EXIT_FAIL;
}

/* The libmic handle over c->urls, made on first use.  Returns 0, or the
 * exit status with c->err set (the caller reports it). */
static int client(struct cli *c)
{
    struct mic_client_opts o = {
        .urls = c->urls, .nurls = c->nurls, .key = c->key, .cafile = c->val[O_CACERT],
        .connect_timeout_ms = CONNECT_TIMEOUT_MS, .timeout_ms = REQUEST_TIMEOUT_MS,
        .user_agent = PROG,
    };
    struct mic_failure f;

    if (!c->mc && mic_client_new(&o, &c->mc, &f))
        return fail_line(c, &f, NULL);
    return 0;
}

/* A typed call failed: its line, reported; returns the exit status. */
static int call_failed(struct cli *c)
{
    return report(c, fail_line(c, mic_client_failure(c->mc), NULL));
}

/* A command whose state lives on one node (a lease, a DLQ cursor, a
 * replay run, a backup): 0 with one --url, else the usage error. */
static int one_node(struct cli *c)
{
    if (c->nurls <= 1)
        return 0;
    return usage_error(c, "%s%s%s talks to one node: give one --url, not %zu", c->cmd->name,
                       c->cmd->sub ? " " : "", c->cmd->sub ? c->cmd->sub : "", c->nurls);
}

/* The node of a call libmic can merge: node 0 with one --url (its answer
 * as it came), every node (-1: libmic's merge) with several. */
static int nodes(const struct cli *c)
{
    return c->nurls > 1 ? -1 : 0;
}

/* --json: the answer the last call read its result from, exactly as it
 * came (one line); a result merged from several nodes, which came as no
 * one answer, as jansson writes 'j' (reals to 15 digits, so micd's
 * decimals read the same). */
static int print_answer(struct cli *c, json_t *j)
{
    const struct mic_response *a = mic_client_answer(c->mc);
    char *txt;

    if (a->body) {
        if (!a->len)
            return 0;
        fwrite(a->body, 1, a->len, stdout);
        if (a->body[a->len - 1] != '\n')
            putchar('\n');
        return 0;
    }
    if (!j)
        return 0;
    if (!(txt = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(15))))
        return oom(c);
    printf("%s\n", txt);
    free(txt);
    return 0;
}

/* The end of a typed read: the failure reported, or 'j' printed with
 * 'show' (as it came with --json); 'j' is released.  Returns the exit
 * status. */
static int show_result(struct cli *c, int failed, json_t *j, int (*show)(struct cli *, json_t *))
{
    int rc = 0;

    if (failed)
        rc = call_failed(c);
    else if (c->json)
        rc = print_answer(c, j);
    else if (show(c, j))
        rc = oom(c);
    json_decref(j);
    return rc;
}

/* --limit as a typed call's 'limit': the integer as given (0 when absent:
 * the server's default).  A given 0, which libmic reads as that default,
 * and values beyond an int go as -1, which micd refuses as it refuses
 * them (422 "limit is 1 to 1000", field limit).  Returns 0, or
 * EXIT_USAGE after the message. */
static int opt_limit(struct cli *c, int *out)
{
    long long v = 0;
    int rc;

    *out = 0;
    if ((rc = opt_int(c, O_LIMIT, INT64_MIN, &v)) || !c->val[O_LIMIT])
        return rc;
    *out = v == 0 || v < INT_MIN || v > INT_MAX ? -1 : (int)v;
    return 0;
}

/* ---- Tables ---- */

/* Rows of text cells printed in aligned columns; the first row is the
 * header.  A failed allocation is remembered and reported at print. */
struct table {
    int ncols, oom;
    char **cells;
    size_t n, cap;
};

static void table_push(struct table *t, char *s)
{
    if (!s) {
        t->oom = 1;
        return;
    }
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 64;
        char **nc = realloc(t->cells, cap * sizeof *nc);

        if (!nc) {
            free(s);
            t->oom = 1;
            return;
        }
        t->cells = nc;
        t->cap = cap;
    }
    t->cells[t->n++] = s;
}

__attribute__((format(printf, 2, 3)))
static void table_cell(struct table *t, const char *fmt, ...)
{
    char *s = NULL;
    va_list ap;

    va_start(ap, fmt);
    if (vasprintf(&s, fmt, ap) < 0)
        s = NULL;
    va_end(ap);
    table_push(t, s);
}

static void table_init(struct table *t, int ncols, const char *const *head)
{
    memset(t, 0, sizeof *t);
    t->ncols = ncols;
    for (int i = 0; i < ncols; i++)
        table_cell(t, "%s", head[i]);
}

static size_t table_rows(const struct table *t)
{
    return t->n / (size_t)t->ncols - 1;
}

/* Print the rows (with the header unless 'no_header'); with no rows,
 * 'none' instead (when not NULL).  Returns 0, or -1 when a cell could not
 * be allocated. */
static int table_print(const struct table *t, int no_header, const char *none)
{
    size_t w[32] = {0};

    if (t->oom || t->ncols > 32)
        return -1;
    if (table_rows(t) == 0) {
        if (none)
            printf("%s\n", none);
        return 0;
    }
    for (size_t i = 0; i < t->n; i++) {
        size_t l = strlen(t->cells[i]);
        if (l > w[i % (size_t)t->ncols])
            w[i % (size_t)t->ncols] = l;
    }
    for (size_t i = no_header ? (size_t)t->ncols : 0; i < t->n; i++) {
        int col = (int)(i % (size_t)t->ncols);
        if (col == t->ncols - 1)
            printf("%s\n", t->cells[i]);
        else
            printf("%-*s  ", (int)w[col], t->cells[i]);
    }
    return 0;
}

static void table_fini(struct table *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->cells[i]);
    free(t->cells);
    memset(t, 0, sizeof *t);
}

/* 'v' as cell text: a string as it is, a number, true/false; "-" when
 * null or absent.  Returns 'buf' or the string's own storage. */
static const char *jtxt(json_t *v, char *buf, size_t cap)
{
    switch (json_typeof(v)) {
    case JSON_STRING:
        return json_string_value(v);
    case JSON_INTEGER:
        snprintf(buf, cap, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return buf;
    case JSON_REAL:
        snprintf(buf, cap, "%g", json_real_value(v));
        return buf;
    case JSON_TRUE:
        return "true";
    case JSON_FALSE:
        return "false";
    default:
        if (json_is_array(v) || json_is_object(v))
            return "...";
        return "-";
    }
}

static void table_json(struct table *t, json_t *v)
{
    char b[64];

    table_cell(t, "%s", v ? jtxt(v, b, sizeof b) : "-");
}

static json_t *get(json_t *o, const char *k)
{
    return json_object_get(o, k);
}

/* One cell per member keys[0..n) of 'o' (table_json of each), in order. */
static void table_members(struct table *t, json_t *o, const char *const *keys, size_t n)
{
    for (size_t i = 0; i < n; i++)
        table_json(t, get(o, keys[i]));
}

static const char *gets(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));

    return s ? s : "";
}

/* An age in seconds, for people: 4.2s, 42s, 3m12s, 2h05m, 3d04h; "-"
 * when null. */
static const char *age_txt(json_t *v, char *buf, size_t cap)
{
    double s;
    unsigned long long n;

    if (!json_is_number(v))
        return "-";
    s = json_number_value(v);
    if (!(s > 0))
        s = 0;
    n = (unsigned long long)s;
    if (s < 10)
        snprintf(buf, cap, "%.1fs", s);
    else if (n < 60)
        snprintf(buf, cap, "%llus", n);
    else if (n < 3600)
        snprintf(buf, cap, "%llum%02llus", n / 60, n % 60);
    else if (n < 86400)
        snprintf(buf, cap, "%lluh%02llum", n / 3600, n / 60 % 60);
    else
        snprintf(buf, cap, "%llud%02lluh", n / 86400, n / 3600 % 24);
    return buf;
}

static const char *bytes_txt(json_t *v, char *buf, size_t cap)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double b;
    int u = 0;

    if (!json_is_number(v))
        return "-";
    b = json_number_value(v);
    while (b >= 1024 && u < 5) {
        b /= 1024;
        u++;
    }
    snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
    return buf;
}

/* Every member of 'o' as "key: value" lines, nested objects flattened
 * ("backoff.initial_ms"), arrays of scalars joined by ", ". */
static void print_fields(json_t *o, const char *prefix)
{
    const char *k;
    json_t *v;
    char b[64];

    json_object_foreach(o, k, v) {
        if (json_is_object(v)) {
            char p[256];
            snprintf(p, sizeof p, "%s%s.", prefix, k);
            print_fields(v, p);
            continue;
        }
        printf("%s%s: ", prefix, k);
        if (json_is_array(v)) {
            size_t i;
            json_t *e;
            json_array_foreach(v, i, e)
                printf("%s%s", i ? ", " : "", jtxt(e, b, sizeof b));
            putchar('\n');
        } else {
            printf("%s\n", jtxt(v, b, sizeof b));
        }
    }
}

/* Per-item results (SEQ, STATUS, DETAIL) as a table, counting the items
 * whose status is not one of 'ok' (NULL-terminated). */
struct results {
    struct table t;
    const char *const *ok;
    size_t n, failed;
    char first[160];          /* "seq N STATUS" of the first failed */
};

static void results_init(struct results *r, const char *const *ok)
{
    static const char *const head[] = {"SEQ", "STATUS", "DETAIL"};

    memset(r, 0, sizeof *r);
    table_init(&r->t, 3, head);
    r->ok = ok;
}

/* One item; 'detail' may be NULL (an empty cell). */
static void results_add(struct results *r, json_int_t seq, const char *status,
                        const char *detail)
{
    int good = 0;

    for (int k = 0; r->ok[k]; k++)
        good |= !strcmp(status, r->ok[k]);
    if (!good && !r->failed++)
        snprintf(r->first, sizeof r->first, "seq %" JSON_INTEGER_FORMAT " %s", seq, status);
    r->n++;
    table_cell(&r->t, "%" JSON_INTEGER_FORMAT, seq);
    table_cell(&r->t, "%s", status);
    table_cell(&r->t, "%s", detail ? detail : "");
}

/* Print them (the answer as it came with --json) and release them.
 * Returns 0, or EXIT_FAIL after one line on stderr when an item failed. */
static int results_print(struct cli *c, struct results *r, const char *what)
{
    int rc = 0;

    if (c->json)
        rc = print_answer(c, NULL);
    else if (table_print(&r->t, 0, "(no results)"))
        rc = oom(c);
    table_fini(&r->t);
    if (!rc && r->failed) {
        set_err(c, "%s: %zu of %zu item%s failed (%s%s)", what, r->failed, r->n,
                r->n == 1 ? "" : "s", r->first, r->failed > 1 ? ", ..." : "");
        rc = report(c, EXIT_FAIL);
    }
    return rc;
}

/* The results of a DLQ requeue or skip, {"results":[{"seq","status"}]}. */
static int print_json_results(struct cli *c, json_t *ans, const char *what,
                              const char *const *ok)
{
    struct results r;
    json_t *it;
    size_t i;

    results_init(&r, ok);
    json_array_foreach(get(ans, "results"), i, it)
        results_add(&r, json_integer_value(get(it, "seq")), gets(it, "status"), NULL);
    return results_print(c, &r, what);
}

/* ---- publish ---- */

/* The event given by the options (--topic and the rest). */
static int event_from_opts(struct cli *c, json_t **out)
{
    json_t *ev = json_object(), *hdrs = NULL;
    json_error_t je;
    int rc = EXIT_USAGE;

    if (!ev)
        return oom(c);
    json_object_set_new(ev, "topic", json_string(c->val[O_TOPIC]));
    if (c->val[O_ID])
        json_object_set_new(ev, "event_id", json_string(c->val[O_ID]));
    if (c->val[O_AGGREGATE]) {
        const char *a = c->val[O_AGGREGATE], *slash = strchr(a, '/');

        if (!slash || slash == a || !slash[1]) {
            usage_error(c, "--aggregate takes TYPE/ID, not '%s'", a);
            goto fail;
        }
        json_object_set_new(ev, "aggregate_type", json_stringn(a, (size_t)(slash - a)));
        json_object_set_new(ev, "aggregate_id", json_string(slash + 1));
    }
    if (opt_int_field(c, ev, O_VERSION, "aggregate_version", INT64_MIN) ||
        opt_int_field(c, ev, O_PRIORITY, "priority", INT64_MIN))
        goto fail;
    if (c->val[O_TYPE])
        json_object_set_new(ev, "event_type", json_string(c->val[O_TYPE]));
    if (c->val[O_PAYLOAD]) {
        json_t *p = json_loads(c->val[O_PAYLOAD], JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);

        if (!p) {
            usage_error(c, "--payload is not JSON: %s", je.text);
            goto fail;
        }
        json_object_set_new(ev, "payload", p);
    }
    for (int i = 0; i < c->nheaders; i++) {
        const char *kv = c->headers[i], *eq = strchr(kv, '=');

        if (!eq || eq == kv) {
            usage_error(c, "--header takes KEY=VALUE, not '%s'", kv);
            goto fail;
        }
        if (!hdrs && (!(hdrs = json_object()) || json_object_set_new(ev, "headers", hdrs))) {
            rc = oom(c);
            goto fail;
        }
        if (json_object_setn_new(hdrs, kv, (size_t)(eq - kv), json_string(eq + 1))) {
            usage_error(c, "--header %s: not UTF-8", kv);
            goto fail;
        }
    }
    *out = ev;
    return 0;
fail:
    json_decref(ev);
    return rc;
}

/* Publish results as a table (header only before the first batch).  With
 * --json, micd's answer {"results":[{"event_id","seq","created_at",
 * "duplicate"}...]}: mic_publish_batch keeps no body, so it is rebuilt from
 * the results, in micd's member order (the same bytes for one node). */
static int show_published(struct cli *c, const struct mic_publish_result *res, size_t n,
                          int first_batch)
{
    static const char *const head[] = {"EVENT_ID", "SEQ", "RESULT"};
    struct table t;
    int rc;

    if (c->json) {
        json_t *arr = json_array(), *ans = arr ? json_pack("{s:o}", "results", arr) : NULL;
        char *txt = NULL;

        rc = !ans;
        for (size_t i = 0; !rc && i < n; i++)
            rc = json_array_append_new(arr, json_pack("{s:s,s:I,s:s,s:b}",
                                                      "event_id", res[i].event_id,
                                                      "seq", (json_int_t)res[i].seq,
                                                      "created_at", res[i].created_at,
                                                      "duplicate", res[i].duplicate));
        if (!rc && !(rc = !(txt = json_dumps(ans, JSON_COMPACT))))
            printf("%s\n", txt);
        free(txt);
        json_decref(ans);
        return rc ? oom(c) : 0;
    }
    table_init(&t, 3, head);
    for (size_t i = 0; i < n; i++) {
        table_cell(&t, "%s", res[i].event_id);
        table_cell(&t, "%" PRId64, res[i].seq);
        table_cell(&t, "%s", res[i].duplicate ? "duplicate" : "stored");
    }
    rc = table_print(&t, !first_batch, NULL);
    table_fini(&t);
    return rc ? oom(c) : 0;
}

/* An NDJSON run: the pending batch and the counts of the summary. */
struct ndjson {
    FILE *in;
    const char *src;            /* "stdin" or the file's name, for messages */
    json_t *events;             /* the pending batch */
    long line[BATCH_EVENTS];    /* the input line of each */
    size_t bytes;               /* its input bytes */
    long read;                  /* events read (lines not blank), the bad one included */
    long stored, duplicates;    /* of the batches accepted */
    int batches;
    struct timespec t0;
};

static long accepted(const struct ndjson *nd)
{
    return nd->stored + nd->duplicates;
}

/* The summary line on stdout (not with --json, whose stdout is the
 * server's answers): "published N, duplicates N, failed N, elapsed S s".
 * 'failed' counts the events read and not published; the run stops at the
 * first failure, so lines after it are neither read nor counted. */
static void ndjson_summary(const struct cli *c, const struct ndjson *nd)
{
    struct timespec t1;
    double s;

    if (c->json)
        return;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    s = (double)(t1.tv_sec - nd->t0.tv_sec) + (double)(t1.tv_nsec - nd->t0.tv_nsec) / 1e9;
    printf("published %ld, duplicates %ld, failed %ld, elapsed %.2f s\n", nd->stored,
           nd->duplicates, nd->read - accepted(nd), s);
}

/* Send the pending batch (mic_publish_batch: one atomic batch on the one
 * node, retried with the same event ids).  Returns 0 or the exit status
 * (c->err set, not reported: the caller prints the summary first). */
static int ndjson_flush(struct cli *c, struct ndjson *nd)
{
    size_t n = json_array_size(nd->events);
    json_t *evs[BATCH_EVENTS];
    struct mic_publish_result *res;
    int rc;

    if (!n)
        return 0;
    if ((rc = client(c)))
        return rc;
    if (!(res = calloc(n, sizeof *res))) {
        set_err(c, "out of memory");
        return EXIT_FAIL;
    }
    for (size_t i = 0; i < n; i++)
        evs[i] = json_array_get(nd->events, i);
    if (mic_publish_batch(c->mc, evs, n, res)) {
        const struct mic_failure *f = mic_client_failure(c->mc);
        long before = accepted(nd), part = 0;
        char note[300] = "";
        size_t len, idx;

        /* Over several nodes some parts may have been taken (failure
         * PARTIAL): count them, and report the first refused part's own
         * failure. */
        for (size_t i = n; i-- > 0;)
            if (res[i].ok) {
                nd->duplicates += res[i].duplicate != 0;
                nd->stored += res[i].duplicate == 0;
                part++;
            } else if (res[i].fail.kind != MIC_FAIL_NONE) {
                f = &res[i].fail;
            }
        /* Name the input line of the event the server's field points at. */
        if (sscanf(f->field, "events[%zu]", &idx) == 1 && idx < n)
            snprintf(note, sizeof note, ", %s line %ld", nd->src, nd->line[idx]);
        rc = fail_line(c, f, note);
        len = strlen(c->err);
        if (part)
            snprintf(c->err + len, sizeof c->err - len,
                     "; of %s lines %ld-%ld, the %ld event%s of the nodes that took their part "
                     "were published, the other %ld not", nd->src, nd->line[0], nd->line[n - 1],
                     part, part == 1 ? "" : "s", (long)n - part);
        else if (before)
            snprintf(c->err + len, sizeof c->err - len,
                     "; %s lines %ld-%ld were not published, the %ld event%s before them were",
                     nd->src, nd->line[0], nd->line[n - 1], before, before == 1 ? "" : "s");
        else if (rc == EXIT_FAIL)
            snprintf(c->err + len, sizeof c->err - len, "; nothing was published");
        free(res);
        return rc;
    }
    for (size_t i = 0; i < n; i++) {
        nd->duplicates += res[i].duplicate != 0;
        nd->stored += res[i].duplicate == 0;
    }
    rc = c->json || c->given[O_VERBOSE] ? show_published(c, res, n, nd->batches == 0) : 0;
    nd->batches++;
    json_array_clear(nd->events);
    nd->bytes = 0;
    free(res);
    return rc;
}

/* Read and send every event of nd->in.  Returns 0 or the exit status
 * (c->err set, not reported). */
static int ndjson_run(struct cli *c, struct ndjson *nd)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long lineno = 0;
    int rc = 0;

    while (!rc && (len = getline(&line, &cap, nd->in)) >= 0) {
        json_error_t je;
        json_t *ev;
        size_t n = (size_t)len, k;

        lineno++;
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            n--;
        for (k = 0; k < n && (line[k] == ' ' || line[k] == '\t'); k++)
            ;
        if (k == n)
            continue;
        nd->read++;
        if (!(ev = json_loadb(line, n, JSON_REJECT_DUPLICATES, &je)) || !json_is_object(ev)) {
            if (ev)
                set_err(c, "%s line %ld is not a JSON object", nd->src, lineno);
            else
                set_err(c, "%s line %ld is not JSON: %s", nd->src, lineno, je.text);
            json_decref(ev);
            if (accepted(nd))
                snprintf(c->err + strlen(c->err), sizeof c->err - strlen(c->err),
                         "; the %ld event%s before %s line %ld were published, nothing after",
                         accepted(nd), accepted(nd) == 1 ? "" : "s", nd->src,
                         json_array_size(nd->events) ? nd->line[0] : lineno);
            else
                snprintf(c->err + strlen(c->err), sizeof c->err - strlen(c->err),
                         "; nothing was published");
            rc = EXIT_USAGE;
            break;
        }
        if (json_array_size(nd->events) &&
            (json_array_size(nd->events) >= BATCH_EVENTS || nd->bytes + n > BATCH_BYTES) &&
            (rc = ndjson_flush(c, nd))) {
            json_decref(ev);
            break;
        }
        nd->line[json_array_size(nd->events)] = lineno;
        nd->bytes += n;
        if (json_array_append_new(nd->events, ev)) {
            set_err(c, "out of memory");
            rc = EXIT_FAIL;
            break;
        }
    }
    if (!rc && ferror(nd->in)) {
        set_err(c, "cannot read %s: %s", nd->src, strerror(errno));
        rc = EXIT_USAGE;
    }
    if (!rc && !nd->read) {
        set_err(c, "publish: no events %s %s (give --topic T to publish one from arguments)",
                nd->in == stdin ? "on" : "in", nd->src);
        free(line);
        return EXIT_USAGE; /* nothing to sum up */
    }
    if (!rc)
        rc = ndjson_flush(c, nd);
    free(line);
    ndjson_summary(c, nd);
    return rc;
}

/* NDJSON from 'file' ("-" or NULL: stdin): one event object per line,
 * blank lines ignored; a summary at the end. */
static int publish_ndjson(struct cli *c, const char *file)
{
    struct ndjson nd;
    int rc;

    memset(&nd, 0, sizeof nd);
    clock_gettime(CLOCK_MONOTONIC, &nd.t0);
    nd.in = stdin;
    nd.src = "stdin";
    if (file && strcmp(file, "-")) {
        if (!(nd.in = fopen(file, "r"))) {
            set_err(c, "publish: cannot open %s: %s", file, strerror(errno));
            return report(c, EXIT_USAGE);
        }
        nd.src = file;
    }
    if (!(nd.events = json_array())) {
        rc = oom(c);
        goto out;
    }
    if ((rc = ndjson_run(c, &nd))) {
        fflush(stdout); /* the summary before the error line */
        report(c, rc);
    }
out:
    json_decref(nd.events);
    if (nd.in != stdin)
        fclose(nd.in);
    return rc;
}

static int cmd_publish(struct cli *c)
{
    int from_file = c->nargs == 1;
    struct mic_publish_result res;
    json_t *ev = NULL;
    int rc;

    if (!c->val[O_TOPIC] && !from_file) {
        if (isatty(STDIN_FILENO))
            return usage_error(c, "publish needs --topic T, an NDJSON file, or NDJSON on stdin");
        from_file = 1;
    }
    if (from_file) {
        for (int o = 0; o < O_COUNT; o++)
            if (c->given[o] && (OPT(o) & EVENT_OPTS))
                return usage_error(c, "--%s does not go with NDJSON input "
                                   "(each line is a whole event)", opt_defs[o].name);
        return publish_ndjson(c, c->nargs ? c->args[0] : NULL);
    }
    if (c->given[O_VERBOSE])
        return usage_error(c, "--verbose goes with NDJSON input (one event prints its line)");
    if ((rc = event_from_opts(c, &ev)))
        return rc;
    if (!(rc = client(c)) && mic_publish(c->mc, ev, &res)) {
        struct mic_failure f = *mic_client_failure(c->mc);

        /* mic_publish sends a batch of one: name the field in the event. */
        if (!strncmp(f.field, "events[0].", 10))
            memmove(f.field, f.field + 10, strlen(f.field + 10) + 1);
        rc = fail_line(c, &f, NULL);
    }
    if (rc)
        report(c, rc);
    else
        rc = show_published(c, &res, 1, 1);
    json_decref(ev);
    return rc;
}

/* ---- Workers: claim, ack, nack, extend ---- */

/* A string cell of a typed result: as it is, "-" when absent. */
static const char *txt_or_dash(const char *s)
{
    return s && *s ? s : "-";
}

static int cmd_claim(struct cli *c)
{
    static const char *const head[] = {"SEQ", "LEASE_TOKEN", "ATTEMPT", "EVENT_ID", "TOPIC",
                                       "LEASE_EXPIRES_AT"};
    json_t *body;
    struct mic_claimed cl = {0};
    struct table t;
    int rc;

    if ((rc = one_node(c)))
        return rc;
    if (!(body = json_object()))
        return oom(c);
    if ((rc = opt_int_field(c, body, O_MAX, "max", INT64_MIN)) ||
        (rc = opt_int_field(c, body, O_LEASE, "lease_ttl_s", INT64_MIN)))
        goto out_body;
    if (c->val[O_WAIT]) {
        char *end;
        double w;

        errno = 0;
        w = strtod(c->val[O_WAIT], &end);
        if (errno || *end || !*c->val[O_WAIT] || !isfinite(w) || w < 0) {
            rc = usage_error(c, "--wait takes seconds (a number >= 0), not '%s'", c->val[O_WAIT]);
            goto out_body;
        }
        /* An integer when it is one; the server checks the bounds (and
         * libmic lengthens the request's timeout by the wait). */
        json_object_set_new(body, "wait_s", w < 1e9 && w == (double)(long long)w
                                                ? json_integer((json_int_t)w) : json_real(w));
    }
    if (c->val[O_WORKER])
        json_object_set_new(body, "worker", json_string(c->val[O_WORKER]));
    if ((rc = client(c))) {
        report(c, rc);
        goto out_body;
    }
    if (mic_claim_json(c->mc, 0, c->args[0], body, &cl)) {
        rc = call_failed(c);
        goto out_claim;
    }
    if (c->json) {
        rc = print_answer(c, cl.doc);
        goto out_claim;
    }
    table_init(&t, 6, head);
    for (size_t i = 0; i < cl.n; i++) {
        const struct mic_leased *d = &cl.v[i];

        table_cell(&t, "%" PRId64, d->seq);
        table_cell(&t, "%s", txt_or_dash(d->lease_token));
        table_cell(&t, "%d", d->attempt);
        table_cell(&t, "%s", txt_or_dash(d->event_id));
        table_cell(&t, "%s", txt_or_dash(d->topic));
        table_cell(&t, "%s", txt_or_dash(d->lease_expires_at));
    }
    if (table_print(&t, 0, "(nothing to claim)"))
        rc = oom(c);
    table_fini(&t);
out_claim:
    mic_claimed_fini(&cl);
out_body:
    json_decref(body);
    return rc;
}

/* The deliveries named by the SEQ:TOKEN arguments after the group, as
 * leases of node 0: *out (n of them, free() it).  Returns 0 or the exit
 * status (reported). */
static int leases_from_args(struct cli *c, struct mic_leased **out, size_t *n)
{
    struct mic_leased *v = calloc((size_t)c->nargs, sizeof *v);

    *out = NULL;
    *n = 0;
    if (!v)
        return oom(c);
    for (int i = 1; i < c->nargs; i++) {
        const char *a = c->args[i], *colon = strchr(a, ':');
        char seq[32];
        long long s;

        if (!colon || (size_t)(colon - a) >= sizeof seq || !colon[1]) {
            free(v);
            return usage_error(c, "'%s' is not SEQ:TOKEN (as claim printed them)", a);
        }
        memcpy(seq, a, (size_t)(colon - a));
        seq[colon - a] = 0;
        if (parse_int(seq, 1, INT64_MAX, &s)) {
            free(v);
            return usage_error(c, "'%s' is not SEQ:TOKEN (SEQ is a number >= 1)", a);
        }
        /* (A token longer than any claim's is not_found either way.) */
        v[*n].seq = s;
        snprintf(v[*n].lease_token, sizeof v[*n].lease_token, "%s", colon + 1);
        (*n)++;
    }
    *out = v;
    return 0;
}

/* ack, nack and extend: one request, one result per item. */
static int settle(struct cli *c, enum mic_settle_verb verb, const char *what,
                  const char *const *ok)
{
    json_t *fields = NULL;
    struct mic_leased *v = NULL, **items = NULL;
    struct mic_item_result *res = NULL;
    struct results r;
    size_t n = 0;
    int rc;

    if ((rc = one_node(c)) || (rc = leases_from_args(c, &v, &n)))
        return rc;
    if (!(fields = json_object()) || !(items = calloc(n, sizeof *items)) ||
        !(res = calloc(n, sizeof *res))) {
        rc = oom(c);
        goto out;
    }
    if ((rc = opt_int_field(c, fields, O_RETRY_AFTER, "retry_after_s", INT64_MIN)) ||
        (rc = opt_int_field(c, fields, O_LEASE, "lease_ttl_s", INT64_MIN)))
        goto out;
    if (c->val[O_ERROR])
        json_object_set_new(fields, "error", json_string(c->val[O_ERROR]));
    for (size_t i = 0; i < n; i++)
        items[i] = &v[i];
    if ((rc = client(c))) {
        report(c, rc);
        goto out;
    }
    if (mic_settle_json(c->mc, verb, c->args[0], (const struct mic_leased *const *)items, n,
                        fields, res)) {
        rc = call_failed(c);
        goto out;
    }
    results_init(&r, ok);
    for (size_t i = 0; i < n; i++) {
        char detail[64] = "";

        if (res[i].status == MIC_ITEM_RETRYING && res[i].time[0])
            snprintf(detail, sizeof detail, "not before %s", res[i].time);
        else if (res[i].status == MIC_ITEM_EXTENDED && res[i].time[0])
            snprintf(detail, sizeof detail, "lease expires at %s", res[i].time);
        results_add(&r, res[i].seq, mic_item_status_name(res[i].status), detail);
    }
    rc = results_print(c, &r, what);
out:
    free(res);
    free(items);
    free(v);
    json_decref(fields);
    return rc;
}

static int cmd_ack(struct cli *c)
{
    static const char *const ok[] = {"acked", NULL};

    return settle(c, MIC_SETTLE_ACK, "ack", ok);
}

static int cmd_nack(struct cli *c)
{
    static const char *const ok[] = {"retrying", "dead_lettered", NULL};

    return settle(c, MIC_SETTLE_NACK, "nack", ok);
}

static int cmd_extend(struct cli *c)
{
    static const char *const ok[] = {"extended", NULL};

    return settle(c, MIC_SETTLE_EXTEND, "extend", ok);
}

/* ---- Observability: stats, oldest, blocked ---- */

/* Does the group's topic list (exact names, or prefixes ending in '*')
 * cover 'topic'? */
static int group_covers(json_t *g, const char *topic)
{
    json_t *topics = get(g, "topics"), *p;
    size_t i;

    if (json_is_string(topics))
        return !strcmp(json_string_value(topics), topic);
    json_array_foreach(topics, i, p) {
        const char *s = json_string_value(p);
        size_t n = s ? strlen(s) : 0;

        if (n && s[n - 1] == '*' ? !strncmp(s, topic, n - 1) : s && !strcmp(s, topic))
            return 1;
    }
    return 0;
}

static int show_stats(struct cli *c, json_t *j)
{
    static const char *const ghead[] = {"GROUP", "PENDING", "PROCESSING", "DLQ", "DISPATCHED",
                                        "OLDEST", "POISON", "BLOCKED", "GAP_PARKED",
                                        "REDELIVERIES", "ALERT"};
    static const char *const thead[] = {"TOPIC", "EVENTS", "PUBLISHES", "DUPLICATES",
                                        "CONFLICTS"};
    const char *only = c->nargs ? c->args[0] : NULL;
    json_t *g, *tp, *st = get(j, "store"), *sel = NULL;
    struct table gt, tt;
    char b1[32], b2[32];
    size_t i;
    int rc = 0;

    table_init(&gt, 11, ghead);
    json_array_foreach(get(j, "groups"), i, g) {
        if (only && strcmp(gets(g, "group"), only))
            continue;
        sel = g;
        table_json(&gt, get(g, "group"));
        table_json(&gt, get(g, "pending"));
        table_json(&gt, get(g, "processing"));
        table_json(&gt, get(g, "dlq"));
        table_json(&gt, get(g, "dispatched"));
        table_cell(&gt, "%s", age_txt(get(g, "oldest_unhandled_age_s"), b1, sizeof b1));
        table_cell(&gt, "%s", age_txt(get(g, "poison_age_s"), b1, sizeof b1));
        table_json(&gt, get(g, "blocked_aggregates"));
        table_json(&gt, get(g, "gap_parked_aggregates"));
        table_json(&gt, get(g, "redeliveries"));
        table_cell(&gt, "%s", json_is_true(get(g, "alert")) ? "ALERT" : "");
    }
    table_init(&tt, 5, thead);
    json_array_foreach(get(j, "topics"), i, tp) {
        if (only && (!sel || !group_covers(sel, gets(tp, "topic"))))
            continue;
        table_json(&tt, get(tp, "topic"));
        table_json(&tt, get(tp, "events"));
        table_json(&tt, get(tp, "publishes"));
        table_json(&tt, get(tp, "duplicates"));
        table_json(&tt, get(tp, "conflicts"));
    }
    if (only && !sel) {
        set_err(c, "stats: no group named %s", only);
        rc = report(c, EXIT_FAIL);
        goto out;
    }
    if (table_print(&gt, 0, "(no groups)")) {
        rc = -1;
        goto out;
    }
    putchar('\n');
    if (table_print(&tt, 0, "(no topics)")) {
        rc = -1;
        goto out;
    }
    if (st) {
        double used = json_number_value(get(st, "map_used_bytes"));
        double size = json_number_value(get(st, "map_size_bytes"));
        char b3[32], on[48] = "";

        /* A merge over several nodes (mic_admin_stats) says how many. */
        if (json_integer_value(get(j, "nodes")) > 1)
            snprintf(on, sizeof on, " on %" JSON_INTEGER_FORMAT " nodes",
                     json_integer_value(get(j, "nodes")));
        printf("\nstore: %s used of a %s map (%.1f%%), %s events%s\n",
               bytes_txt(get(st, "map_used_bytes"), b1, sizeof b1),
               bytes_txt(get(st, "map_size_bytes"), b2, sizeof b2),
               size > 0 ? 100 * used / size : 0.0, jtxt(get(st, "events"), b3, sizeof b3), on);
    }
out:
    table_fini(&gt);
    table_fini(&tt);
    return rc;
}

/* With several nodes, mic_admin_stats merges them (counts summed, ages
 * the oldest, alert if any node's; "nodes" says how many). */
static int cmd_stats(struct cli *c)
{
    json_t *j = NULL;
    int rc;

    if ((rc = client(c)))
        return report(c, rc);
    if (mic_admin_stats(c->mc, nodes(c), &j))
        return call_failed(c);
    if (c->json)
        rc = print_answer(c, j);
    else if ((rc = show_stats(c, j)) < 0)
        rc = oom(c);
    json_decref(j);
    return rc;
}

/* Why an unhandled delivery waits, in words. */
static void why_txt(json_t *d, char *out, size_t cap)
{
    const char *r = gets(d, "reason");
    char b[64];

    if (!strcmp(r, "leased")) {
        if (get(d, "worker"))
            snprintf(out, cap, "leased by %s until %s", gets(d, "worker"),
                     gets(d, "lease_expires_at"));
        else
            snprintf(out, cap, "leased until %s", gets(d, "lease_expires_at"));
    } else if (!strcmp(r, "retry")) {
        if (*gets(d, "last_error"))
            snprintf(out, cap, "retry at %s after %s", gets(d, "not_before"),
                     gets(d, "last_error"));
        else
            snprintf(out, cap, "retry at %s", gets(d, "not_before"));
    } else if (!strcmp(r, "gap")) {
        snprintf(out, cap, "parked on missing version %s",
                 jtxt(get(d, "missing_version"), b, sizeof b));
    } else if (!strcmp(r, "behind_head")) {
        snprintf(out, cap, "behind head %s", jtxt(get(d, "head_seq"), b, sizeof b));
    } else {
        snprintf(out, cap, "%s", r);
    }
}

static int show_oldest(struct cli *c, json_t *j)
{
    static const char *const head[] = {"AGE", "SEQ", "EVENT_ID", "STATE", "WHY"};
    json_t *d;
    struct table t;
    char b[32], why[1400];
    size_t i;
    int rc;

    (void)c;
    printf("group %s: oldest unhandled %s\n", gets(j, "group"),
           json_is_number(get(j, "oldest_unhandled_age_s"))
               ? age_txt(get(j, "oldest_unhandled_age_s"), b, sizeof b) : "- (nothing waits)");
    table_init(&t, 5, head);
    json_array_foreach(get(j, "deliveries"), i, d) {
        why_txt(d, why, sizeof why);
        table_cell(&t, "%s", age_txt(get(d, "age_s"), b, sizeof b));
        table_json(&t, get(d, "seq"));
        table_json(&t, get(d, "event_id"));
        table_json(&t, get(d, "state"));
        table_cell(&t, "%s", why);
    }
    rc = table_print(&t, 0, NULL);
    table_fini(&t);
    return rc;
}

static int cmd_oldest(struct cli *c)
{
    json_t *j = NULL;
    int rc, limit;

    if ((rc = opt_limit(c, &limit)))
        return rc;
    if ((rc = client(c)))
        return report(c, rc);
    rc = mic_admin_oldest(c->mc, nodes(c), c->args[0], limit, &j);
    return show_result(c, rc, j, show_oldest);
}

static int show_blocked(struct cli *c, json_t *j)
{
    static const char *const head[] = {"AGGREGATE", "HEAD_SEQ", "REASON", "AGE", "WAITING",
                                       "SINCE", "DETAIL"};
    json_t *ag;
    struct table t;
    char b[32];
    size_t i;
    int rc;

    (void)c;
    table_init(&t, 7, head);
    json_array_foreach(get(j, "aggregates"), i, ag) {
        table_cell(&t, "%s/%s", gets(ag, "aggregate_type"), gets(ag, "aggregate_id"));
        table_json(&t, get(ag, "head_seq"));
        table_json(&t, get(ag, "reason"));
        table_cell(&t, "%s", age_txt(get(ag, "age_s"), b, sizeof b));
        table_json(&t, get(ag, "waiting"));
        table_json(&t, get(ag, "since"));
        if (get(ag, "missing_version"))
            table_cell(&t, "missing version %s", jtxt(get(ag, "missing_version"), b, sizeof b));
        else
            table_cell(&t, "%s", "");
    }
    rc = table_print(&t, 0, "(no blocked aggregates)");
    table_fini(&t);
    return rc;
}

static int cmd_blocked(struct cli *c)
{
    json_t *j = NULL;
    int rc, limit;

    if ((rc = opt_limit(c, &limit)))
        return rc;
    if ((rc = client(c)))
        return report(c, rc);
    rc = mic_admin_blocked_page(c->mc, nodes(c), c->args[0], c->val[O_REASON], limit, &j);
    return show_result(c, rc, j, show_blocked);
}

/* ---- The DLQ ---- */

static int show_dlq(struct cli *c, json_t *j)
{
    static const char *const head[] = {"SEQ", "EVENT_ID", "TOPIC", "ATTEMPTS",
                                       "DEAD_LETTERED_AT", "LAST_ERROR"};
    json_t *d;
    struct table t;
    size_t i;
    int rc;

    table_init(&t, 6, head);
    json_array_foreach(get(j, "deliveries"), i, d) {
        table_json(&t, get(d, "seq"));
        table_json(&t, get(get(d, "event"), "event_id"));
        table_json(&t, get(get(d, "event"), "topic"));
        table_json(&t, get(d, "attempts"));
        table_json(&t, get(d, "dead_lettered_at"));
        table_cell(&t, "%s", gets(d, "last_error"));
    }
    rc = table_print(&t, 0, "(the DLQ is empty)");
    if (!rc && json_is_string(get(j, "next")))
        printf("next page: " PROG " dlq list %s --after %s\n", c->args[0], gets(j, "next"));
    table_fini(&t);
    return rc;
}

static int cmd_dlq_list(struct cli *c)
{
    json_t *j = NULL;
    int rc, limit;

    if ((rc = one_node(c)) || (rc = opt_limit(c, &limit)))
        return rc;
    if ((rc = client(c)))
        return report(c, rc);
    rc = mic_admin_dlq(c->mc, 0, c->args[0], limit, c->val[O_AFTER], &j);
    return show_result(c, rc, j, show_dlq);
}

/* requeue and skip: {"seqs":[...]} from the arguments after the group,
 * or {"all":true}. */
static int dlq_act(struct cli *c, const char *verb, const char *const *ok)
{
    json_t *body = json_object(), *seqs = json_array(), *ans = NULL;
    int rc = 0;

    if (!body || !seqs) {
        json_decref(body);
        json_decref(seqs);
        return oom(c);
    }
    if ((rc = one_node(c)))
        goto out;
    if (c->given[O_ALL] && c->nargs > 1) {
        rc = usage_error(c, "dlq %s: give SEQ... or --all, not both", verb);
        goto out;
    }
    if (!c->given[O_ALL] && c->nargs < 2) {
        rc = usage_error(c, "dlq %s: give the SEQ of each delivery%s", verb,
                         strcmp(verb, "requeue") ? "" : " (or --all)");
        goto out;
    }
    for (int i = 1; i < c->nargs; i++) {
        long long v;

        if (parse_int(c->args[i], 1, INT64_MAX, &v)) {
            rc = usage_error(c, "dlq %s: '%s' is not a SEQ (a number >= 1)", verb, c->args[i]);
            goto out;
        }
        if (json_array_append_new(seqs, json_integer(v))) {
            rc = oom(c);
            goto out;
        }
    }
    if (c->given[O_ALL])
        json_object_set_new(body, "all", json_true());
    else
        json_object_set(body, "seqs", seqs);
    if ((rc = client(c))) {
        report(c, rc);
        goto out;
    }
    if (strcmp(verb, "requeue") ? mic_admin_dlq_skip(c->mc, 0, c->args[0], body, &ans)
                                : mic_admin_dlq_requeue(c->mc, 0, c->args[0], body, &ans)) {
        rc = call_failed(c);
    } else if (c->given[O_ALL]) {
        char b[32];

        if (c->json)
            rc = print_answer(c, ans);
        else
            printf("requeued %s\n", jtxt(get(ans, "requeued"), b, sizeof b));
    } else {
        rc = print_json_results(c, ans, verb, ok);
    }
out:
    json_decref(ans);
    json_decref(seqs);
    json_decref(body);
    return rc;
}

static int cmd_dlq_requeue(struct cli *c)
{
    static const char *const ok[] = {"requeued", NULL};

    return dlq_act(c, "requeue", ok);
}

static int cmd_dlq_skip(struct cli *c)
{
    static const char *const ok[] = {"skipped", NULL};

    return dlq_act(c, "skip", ok);
}

/* ---- Resources: topics, groups, aggregate ---- */

static int show_topics(struct cli *c, json_t *j)
{
    static const char *const head[] = {"NAME", "RETENTION_S", "MAX_PAYLOAD_BYTES",
                                       "REQUIRE_VERSIONS", "DEDUPE_RETAIN_S"};
    json_t *tp;
    struct table t;
    size_t i;
    int rc;

    if (c->nargs) {
        print_fields(j, "");
        return 0;
    }
    table_init(&t, 5, head);
    json_array_foreach(get(j, "topics"), i, tp) {
        static const char *const keys[] = {"name", "retention_s", "max_payload_bytes",
                                           "require_versions", "dedupe_retain_s"};

        table_members(&t, tp, keys, 5);
    }
    rc = table_print(&t, 0, "(no topics)");
    table_fini(&t);
    return rc;
}

static int show_groups(struct cli *c, json_t *j)
{
    static const char *const head[] = {"NAME", "TOPICS", "KIND", "ORDERED", "MAX_ATTEMPTS",
                                       "LEASE_TTL_S", "START", "DLQ_POLICY", "ALERT_S",
                                       "REPLAY_RUN"};
    json_t *g, *tp;
    struct table t;
    size_t i, k;
    int rc;

    if (c->nargs) {
        print_fields(j, "");
        return 0;
    }
    table_init(&t, 10, head);
    json_array_foreach(get(j, "groups"), i, g) {
        static const char *const keys[] = {"kind", "ordered", "max_attempts", "lease_ttl_s",
                                           "start", "dlq_policy", "alert_oldest_unhandled_s",
                                           "replay_run"};
        struct mic_buf topics = {0};
        char b[32];

        json_array_foreach(get(g, "topics"), k, tp)
            if ((k && buf_puts(&topics, ",")) || buf_puts(&topics, jtxt(tp, b, sizeof b)))
                t.oom = 1;
        table_json(&t, get(g, "name"));
        table_cell(&t, "%s", topics.p ? topics.p : "-");
        table_members(&t, g, keys, 8);
        mic_buf_fini(&topics);
    }
    rc = table_print(&t, 0, "(no groups)");
    table_fini(&t);
    return rc;
}

/* topics, topic list, topic show NAME (node 0, libmic's rule for reads). */
static int cmd_topics(struct cli *c)
{
    json_t *j = NULL;
    int rc;

    if ((rc = client(c)))
        return report(c, rc);
    rc = c->nargs ? mic_admin_topic_get(c->mc, c->args[0], &j) : mic_admin_topics(c->mc, &j);
    return show_result(c, rc, j, show_topics);
}

static int cmd_groups(struct cli *c)
{
    json_t *j = NULL;
    int rc;

    if ((rc = client(c)))
        return report(c, rc);
    rc = c->nargs ? mic_admin_group_get(c->mc, c->args[0], &j) : mic_admin_groups(c->mc, &j);
    return show_result(c, rc, j, show_groups);
}

static int show_aggregate(struct cli *c, json_t *j)
{
    static const char *const head[] = {"VERSION", "SEQ", "EVENT_ID", "TOPIC", "CREATED_AT",
                                       "GROUP", "STATE", "ATTEMPTS", "DETAIL"};
    json_t *e, *d;
    struct table t;
    char b1[32], b2[32], b3[32];
    size_t i, k;
    int rc;

    (void)c;
    if (json_is_true(get(j, "versioned")))
        printf("aggregate %s/%s: versions %s..%s, contiguous to %s\n",
               gets(j, "aggregate_type"), gets(j, "aggregate_id"),
               jtxt(get(j, "first_version"), b1, sizeof b1),
               jtxt(get(j, "last_version"), b2, sizeof b2),
               jtxt(get(j, "contiguous_to"), b3, sizeof b3));
    else
        printf("aggregate %s/%s: without versions\n", gets(j, "aggregate_type"),
               gets(j, "aggregate_id"));
    table_init(&t, 9, head);
    json_array_foreach(get(j, "events"), i, e) {
        json_t *ev = get(e, "event"), *dl = get(e, "deliveries");
        size_t n = json_array_size(dl);

        for (k = 0; k < (n ? n : 1); k++) {
            d = json_array_get(dl, k);
            static const char *const evk[] = {"aggregate_version", "seq", "event_id", "topic",
                                              "created_at"};
            static const char *const dk[] = {"group", "state", "attempts"};

            table_members(&t, ev, evk, 5);
            table_members(&t, d, dk, 3);
            if (get(d, "lease_expires_at"))
                table_cell(&t, "leased%s%s until %s", get(d, "worker") ? " by " : "",
                           gets(d, "worker"), gets(d, "lease_expires_at"));
            else if (get(d, "not_before"))
                table_cell(&t, "retry at %s%s%s", gets(d, "not_before"),
                           get(d, "last_error") ? " after " : "", gets(d, "last_error"));
            else if (get(d, "last_error"))
                table_cell(&t, "last error: %s", gets(d, "last_error"));
            else
                table_cell(&t, "%s", "");
        }
    }
    rc = table_print(&t, 0, "(no events)");
    if (!rc && json_is_true(get(j, "truncated")))
        printf("(only the first %zu events)\n", json_array_size(get(j, "events")));
    table_fini(&t);
    return rc;
}

/* On the node the aggregate routes to. */
static int cmd_aggregate(struct cli *c)
{
    json_t *j = NULL;
    int rc;

    if ((rc = client(c)))
        return report(c, rc);
    rc = mic_admin_aggregate(c->mc, c->args[0], c->args[1], &j);
    return show_result(c, rc, j, show_aggregate);
}

/* ---- Resources: topic, group and replay create, show, list, delete ---- */

/* A duration in whole seconds: an integer, or one with a unit s, m, h or
 * d ("90", "90s", "15m", "12h", "7d").  Returns 0 or -1. */
static int parse_duration(const char *s, long long *out)
{
    static const struct { char unit; long long mult; } units[] = {
        {'s', 1}, {'m', 60}, {'h', 3600}, {'d', 86400},
    };
    char num[32];
    size_t n = s ? strlen(s) : 0;
    long long mult = 1, v;

    if (!n || n >= sizeof num)
        return -1;
    memcpy(num, s, n + 1);
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (num[n - 1] == units[i].unit) {
            mult = units[i].mult;
            num[--n] = 0;
        }
    if (parse_int(num, 0, INT64_MAX / 86400, &v))
        return -1;
    *out = v * mult;
    return 0;
}

/* Set key 'k' of 'obj' to the duration of option 'o' (seconds) when
 * given; 'none_null': the word "none" sets null. */
static int opt_duration_field(struct cli *c, json_t *obj, enum opt_id o, const char *k,
                              int none_null)
{
    long long v;

    if (!c->val[o])
        return 0;
    if (none_null && !strcmp(c->val[o], "none"))
        return json_object_set_new(obj, k, json_null()) ? oom(c) : 0;
    if (parse_duration(c->val[o], &v))
        return usage_error(c, "--%s takes seconds, or a number with s, m, h or d (90, 15m, "
                           "12h, 7d)%s, not '%s'", opt_defs[o].name,
                           none_null ? " or none" : "", c->val[o]);
    return json_object_set_new(obj, k, json_integer(v)) ? oom(c) : 0;
}

/* Set key 'k' of 'obj' to the string of option 'o' when given. */
static int opt_str_field(struct cli *c, json_t *obj, enum opt_id o, const char *k)
{
    if (!c->val[o])
        return 0;
    if (json_object_set_new(obj, k, json_string(c->val[o])))
        return usage_error(c, "--%s: not UTF-8", opt_defs[o].name);
    return 0;
}

/* The request body: --body FILE ('-': stdin) as is, else {}.  The
 * options given then set their fields over it.  Returns 0 and *out (the
 * caller decrefs), or the exit status (reported). */
static int body_from(struct cli *c, json_t **out)
{
    const char *f = c->val[O_BODY];
    json_error_t je;
    json_t *b;

    if (!f)
        return (*out = json_object()) ? 0 : oom(c);
    b = strcmp(f, "-") ? json_load_file(f, JSON_REJECT_DUPLICATES, &je)
                       : json_loadf(stdin, JSON_REJECT_DUPLICATES, &je);
    if (!b)
        return usage_error(c, "--body %s: %s (line %d)", f, je.text, je.line);
    if (!json_is_object(b)) {
        json_decref(b);
        return usage_error(c, "--body %s: not a JSON object", f);
    }
    *out = b;
    return 0;
}

/* The object member 'k' of 'obj', made when absent; NULL after the
 * message (it is something else, or memory). */
static json_t *sub_object(struct cli *c, json_t *obj, const char *k)
{
    json_t *o = json_object_get(obj, k);

    if (json_is_object(o))
        return o;
    if (o) {
        usage_error(c, "--body: %s is not an object, and an option sets a member of it", k);
        return NULL;
    }
    if (!(o = json_object()) || json_object_set_new(obj, k, o)) {
        oom(c);
        return NULL;
    }
    return o;
}

/* The answer 'j' of a create (rc the call's): "created WHAT NAME" (201)
 * or "updated WHAT NAME" (200) and its fields, or with --json the answer
 * (node 0's when the create went to every node).  'j' is released. */
static int show_written(struct cli *c, int failed, json_t *j, const char *what,
                        const char *name_key)
{
    int rc = 0;

    if (failed) {
        rc = call_failed(c);
    } else if (c->json) {
        rc = print_answer(c, j);
    } else {
        printf("%s %s %s\n", mic_client_answer(c->mc)->status == 201 ? "created" : "updated",
               what, gets(j, name_key));
        print_fields(j, "  ");
    }
    json_decref(j);
    return rc;
}

/* PUT 'body' as the config of topic or group NAME (the command's first
 * argument) with 'put' (on every node) and print it as show_written does. */
static int put_resource(struct cli *c, int (*put)(mic_client *, const char *, json_t *, json_t **),
                        json_t *body, const char *what)
{
    json_t *j = NULL;
    int rc;

    if ((rc = client(c)))
        return report(c, rc);
    rc = put(c->mc, c->args[0], body, &j);
    return show_written(c, rc, j, what, "name");
}

/* Delete NAME with 'del'; prints "deleted WHAT NAME" (nothing with
 * --json: the 204 has no body). */
static int delete_resource(struct cli *c, int (*del)(mic_client *, const char *),
                           const char *what)
{
    int rc;

    if ((rc = client(c)))
        return report(c, rc);
    if (del(c->mc, c->args[0]))
        return call_failed(c);
    if (!c->json)
        printf("deleted %s %s\n", what, c->args[0]);
    return 0;
}

static int cmd_topic_create(struct cli *c)
{
    json_t *body = NULL;
    int rc;

    if ((rc = body_from(c, &body)))
        return rc;
    if ((rc = opt_duration_field(c, body, O_RETENTION, "retention_s", 0)) ||
        (rc = opt_int_field(c, body, O_MAX_PAYLOAD, "max_payload_bytes", INT64_MIN)) ||
        (rc = opt_duration_field(c, body, O_DEDUPE_RETAIN, "dedupe_retain_s", 0)))
        goto out;
    if (c->given[O_REQUIRE_VERSIONS])
        json_object_set_new(body, "require_versions", json_true());
    rc = put_resource(c, mic_admin_topic_put, body, "topic");
out:
    json_decref(body);
    return rc;
}

static int cmd_topic_delete(struct cli *c)
{
    return delete_resource(c, mic_admin_topic_delete, "topic");
}

/* --topics a,b,c as a JSON array (each item as written: the server
 * checks the names). */
static int topics_field(struct cli *c, json_t *body)
{
    const char *p = c->val[O_TOPICS];
    json_t *arr;

    if (!p)
        return 0;
    if (!(arr = json_array()) || json_object_set_new(body, "topics", arr))
        return oom(c);
    for (;;) {
        size_t n = strcspn(p, ",");

        if (!n)
            return usage_error(c, "--topics takes NAME[,NAME]..., not '%s'", c->val[O_TOPICS]);
        if (json_array_append_new(arr, json_stringn(p, n)))
            return usage_error(c, "--topics: not UTF-8");
        if (!p[n])
            return 0;
        p += n + 1;
    }
}

static int cmd_group_create(struct cli *c)
{
    json_t *body = NULL, *o;
    int rc;

    if ((rc = body_from(c, &body)))
        return rc;
    if ((rc = topics_field(c, body)) || (rc = opt_str_field(c, body, O_KIND, "kind")) ||
        (rc = opt_int_field(c, body, O_MAX_ATTEMPTS, "max_attempts", INT64_MIN)) ||
        (rc = opt_duration_field(c, body, O_LEASE, "lease_ttl_s", 0)) ||
        (rc = opt_str_field(c, body, O_START, "start")) ||
        (rc = opt_duration_field(c, body, O_ALERT, "alert_oldest_unhandled_s", 1)) ||
        (rc = opt_str_field(c, body, O_DLQ_POLICY, "dlq_policy")))
        goto out;
    if (c->given[O_ORDERED])
        json_object_set_new(body, "ordered", json_true());
    if (c->val[O_BACKOFF_INITIAL] || c->val[O_BACKOFF_MAX] || c->val[O_BACKOFF_MULT]) {
        if (!(o = sub_object(c, body, "backoff"))) {
            rc = EXIT_USAGE;
            goto out;
        }
        if ((rc = opt_int_field(c, o, O_BACKOFF_INITIAL, "initial_ms", INT64_MIN)) ||
            (rc = opt_int_field(c, o, O_BACKOFF_MAX, "max_ms", INT64_MIN)))
            goto out;
        if (c->val[O_BACKOFF_MULT]) {
            char *end;
            double m;

            errno = 0;
            m = strtod(c->val[O_BACKOFF_MULT], &end);
            if (errno || *end || !*c->val[O_BACKOFF_MULT] || !isfinite(m)) {
                rc = usage_error(c, "--backoff-multiplier takes a number, not '%s'",
                                 c->val[O_BACKOFF_MULT]);
                goto out;
            }
            json_object_set_new(o, "multiplier", json_real(m));
        }
    }
    if (c->val[O_SINK_URL] || c->val[O_SINK_STREAM] || c->val[O_SINK_SUBJECT]) {
        if (!(o = sub_object(c, body, "sink"))) {
            rc = EXIT_USAGE;
            goto out;
        }
        json_object_set_new(o, "type", json_string("nats"));
        if ((rc = opt_str_field(c, o, O_SINK_URL, "url")) ||
            (rc = opt_str_field(c, o, O_SINK_STREAM, "stream")) ||
            (rc = opt_str_field(c, o, O_SINK_SUBJECT, "subject")))
            goto out;
    }
    rc = put_resource(c, mic_admin_group_put, body, "group");
out:
    json_decref(body);
    return rc;
}

static int cmd_group_delete(struct cli *c)
{
    return delete_resource(c, mic_admin_group_delete, "group");
}

static int cmd_replay_create(struct cli *c)
{
    json_t *body = NULL, *j = NULL;
    long long v;
    int rc;

    if ((rc = one_node(c)) || (rc = body_from(c, &body)))
        return rc;
    if (c->nargs && json_object_set_new(body, "run_id", json_string(c->args[0]))) {
        rc = usage_error(c, "replay create: the run id is not UTF-8");
        goto out;
    }
    if ((rc = opt_str_field(c, body, O_TOPIC, "topic")) ||
        (rc = opt_str_field(c, body, O_FROM, "from")) ||
        (rc = opt_str_field(c, body, O_TO, "to")) ||
        (rc = opt_str_field(c, body, O_KIND, "kind")) ||
        (rc = opt_str_field(c, body, O_EFFECTS, "effects")))
        goto out;
    /* target_projection_version: an integer when it reads as one. */
    if (c->val[O_TARGET_VERSION] &&
        !parse_int(c->val[O_TARGET_VERSION], INT64_MIN, INT64_MAX, &v))
        json_object_set_new(body, "target_projection_version", json_integer(v));
    else if ((rc = opt_str_field(c, body, O_TARGET_VERSION, "target_projection_version")))
        goto out;
    if ((rc = client(c))) {
        report(c, rc);
        goto out;
    }
    rc = mic_admin_replay_create(c->mc, 0, body, &j);
    rc = show_written(c, rc, j, "replay run", "run_id");
out:
    json_decref(body);
    return rc;
}

static int show_replay(struct cli *c, json_t *j)
{
    (void)c;
    print_fields(j, "");
    return 0;
}

static int show_replays(struct cli *c, json_t *j)
{
    static const char *const head[] = {"RUN_ID", "TOPIC", "STATE", "SELECTED", "DISPATCHED",
                                       "PENDING", "DLQ", "FROM", "TO"};
    json_t *run;
    struct table t;
    size_t i;
    int rc;

    (void)c;
    table_init(&t, 9, head);
    json_array_foreach(get(j, "replays"), i, run) {
        static const char *const keys[] = {"run_id", "topic", "state", "selected",
                                           "dispatched", "pending", "dlq", "from", "to"};

        table_members(&t, run, keys, 9);
    }
    rc = table_print(&t, 0, "(no replay runs)");
    table_fini(&t);
    return rc;
}

static int cmd_replay_show(struct cli *c)
{
    json_t *j = NULL;
    int rc;

    if ((rc = one_node(c)))
        return rc;
    if ((rc = client(c)))
        return report(c, rc);
    rc = mic_admin_replay_get(c->mc, 0, c->args[0], &j);
    return show_result(c, rc, j, show_replay);
}

static int cmd_replay_list(struct cli *c)
{
    json_t *j = NULL;
    int rc;

    if ((rc = one_node(c)))
        return rc;
    if ((rc = client(c)))
        return report(c, rc);
    rc = mic_admin_replays(c->mc, 0, &j);
    return show_result(c, rc, j, show_replays);
}

/* mic_admin_replay_delete on node 0, in delete_resource's shape. */
static int replay_delete0(mic_client *mc, const char *run_id)
{
    return mic_admin_replay_delete(mc, 0, run_id);
}

static int cmd_replay_delete(struct cli *c)
{
    int rc;

    if ((rc = one_node(c)))
        return rc;
    return delete_resource(c, replay_delete0, "replay run");
}

/* ---- keys new (no server involved) ---- */

static int cmd_keys_new(struct cli *c)
{
    const char *id = c->val[O_ID], *role = c->val[O_ROLE];
    char secret[48], hex[65], why[200];
    struct mic_buf line = {0};
    mic_keys *k;
    int rc;

    if (!id || !role)
        return usage_error(c, "keys new needs --id ID and --role ROLE");
    if (buf_puts(&line, id) || buf_puts(&line, " ") || buf_puts(&line, role) ||
        buf_puts(&line, " ") || buf_puts(&line, "0000000000000000000000000000000000000000000000000000000000000000") ||
        buf_puts(&line, " ")) {
        free(line.p);
        return oom(c);
    }
    for (int i = 0; i < c->nscopes; i++)
        if ((i && buf_puts(&line, ",")) || buf_puts(&line, c->scopes[i])) {
            free(line.p);
            return oom(c);
        }
    if (!c->nscopes && buf_puts(&line, "*")) {
        free(line.p);
        return oom(c);
    }
    /* The line must be one micd accepts: the same parser checks it. */
    if ((rc = mic_keys_parse(line.p, line.len, &k, why, sizeof why))) {
        free(line.p);
        return usage_error(c, "keys new: %s", why + (strncmp(why, "line 1: ", 8) ? 0 : 8));
    }
    mic_keys_free(k);
    if (mic_keys_new_secret(secret, hex)) {
        free(line.p);
        set_err(c, "no random bytes for a secret");
        return report(c, EXIT_FAIL);
    }
    memcpy(line.p + strlen(id) + 1 + strlen(role) + 1, hex, 64);
    printf("%s\n", secret);
    fprintf(stderr, "%s\n", line.p);
    free(line.p);
    return 0;
}

/* ---- Backup ---- */

struct backup_progress {
    int tty;          /* stderr is a terminal: a line rewritten with \r */
    int64_t t0_ms, last_ms;
};

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void backup_line(const struct backup_progress *p, uint64_t bytes, const char *end)
{
    double s = (double)(now_ms() - p->t0_ms) / 1000.0;
    double mib = (double)bytes / (1024.0 * 1024.0);

    fprintf(stderr, "%sbackup: %.1f %s in %.1f s (%.1f MiB/s)%s", p->tty ? "\r" : "",
            bytes < (1u << 20) ? (double)bytes / 1024.0 : mib, bytes < (1u << 20) ? "KiB" : "MiB",
            s, s > 0 ? mib / s : 0.0, end);
    fflush(stderr);
}

static int backup_tick(uint64_t bytes, void *arg)
{
    struct backup_progress *p = arg;
    int64_t t = now_ms();

    if (p->tty && t - p->last_ms >= 200) {
        p->last_ms = t;
        backup_line(p, bytes, "");
    }
    return 0;
}

/* mic backup FILE: FILE.tmp, fsync, rename (libmic's mic_backup_file), or
 * stdout for '-'.  stderr: the progress line (rewritten on a terminal, one
 * final line otherwise), or the error. */
static int cmd_backup(struct cli *c)
{
    struct backup_progress p = {isatty(STDERR_FILENO), now_ms(), 0};
    const char *file = c->args[0];
    uint64_t bytes = 0;
    int rc, to_stdout = !strcmp(file, "-");

    if ((rc = one_node(c)))
        return rc;
    if (to_stdout && isatty(STDOUT_FILENO))
        return usage_error(c, "backup -: stdout is a terminal; redirect it, or give a FILE");
    if ((rc = client(c)))
        return report(c, rc);
    rc = to_stdout ? mic_backup_fd(c->mc, 0, STDOUT_FILENO, backup_tick, &p, &bytes)
                   : mic_backup_file(c->mc, 0, file, backup_tick, &p, &bytes);
    if (rc) {
        if (p.tty && p.last_ms)
            fputc('\n', stderr);
        rc = fail_line(c, mic_client_failure(c->mc), NULL);
        if (!to_stdout)
            snprintf(c->err + strlen(c->err), sizeof c->err - strlen(c->err),
                     " (no backup written to %s)", file);
        return report(c, rc);
    }
    if (to_stdout && fflush(stdout)) {
        set_err(c, "cannot write stdout: %s", strerror(errno));
        return report(c, EXIT_FAIL);
    }
    backup_line(&p, bytes, to_stdout ? "\n" : "");
    if (!to_stdout)
        fprintf(stderr, " -> %s\n", file);
    return 0;
}

/* ---- The command table ---- */

static const struct command commands[] = {
    {"publish", NULL, cmd_publish, EVENT_OPTS | OPT(O_VERBOSE), 0, 1,
     "publish --topic T [--id ID] [--aggregate TYPE/ID] [--version N]\n"
     "        [--type EVENT_TYPE] [--priority P] [--payload JSON] [--header K=V]...\n"
     "    or: mic publish [FILE | -] [--verbose]",
     "Publish one event from the options, or the NDJSON events of FILE or stdin.\n"
     "NDJSON is one event object per line (blank lines ignored), sent in atomic\n"
     "batches of up to 1000 events.  Stdin is read with '-', or when there is no\n"
     "--topic and no FILE and stdin is not a terminal.\n"
     "  --topic T            the event's topic (required for one event)\n"
     "  --id ID              event_id, the idempotency key (default: generated)\n"
     "  --aggregate TYPE/ID  aggregate_type and aggregate_id (split at the first '/')\n"
     "  --version N          aggregate_version\n"
     "  --type EVENT_TYPE    event_type\n"
     "  --priority P         0..255, higher first\n"
     "  --payload JSON       any JSON value\n"
     "  --header K=V         a header (repeatable)\n"
     "  -v, --verbose        NDJSON: also print EVENT_ID, SEQ and RESULT per event\n"
     "One event prints EVENT_ID, SEQ and RESULT (stored or duplicate; a duplicate\n"
     "is a success).  NDJSON prints one summary line at the end:\n"
     "  published 2500, duplicates 0, failed 0, elapsed 0.41 s\n"
     "(published: stored anew; failed: read but not published).  With --json,\n"
     "one server answer per line instead (one per batch).  The first refused\n"
     "batch or bad line stops the run: the message names its lines, and the\n"
     "batches before it are published."},
    {"claim", NULL, cmd_claim, OPT(O_MAX) | OPT(O_WAIT) | OPT(O_LEASE) | OPT(O_WORKER), 1, 1,
     "claim GROUP [--max N] [--wait S] [--lease S] [--worker W]",
     "Lease up to N deliveries of GROUP (default 1), long-polling up to S seconds\n"
     "(fractions allowed) when none is ready.\n"
     "  --max N      1..1000\n"
     "  --wait S     0..60 seconds (default 0: answer at once)\n"
     "  --lease S    lease length in seconds (default: the group's lease_ttl_s)\n"
     "  --worker W   the worker's name, recorded on the deliveries\n"
     "Prints SEQ, LEASE_TOKEN, ATTEMPT, EVENT_ID, TOPIC and LEASE_EXPIRES_AT; pass\n"
     "SEQ:LEASE_TOKEN to ack, nack and extend.  --json prints the events too."},
    {"ack", NULL, cmd_ack, 0, 2, -1,
     "ack GROUP SEQ:TOKEN...",
     "Mark leased deliveries done.  Prints SEQ and STATUS per item: acked, or\n"
     "lease_lost / not_found (then the exit status is 1)."},
    {"nack", NULL, cmd_nack, OPT(O_ERROR) | OPT(O_RETRY_AFTER), 2, -1,
     "nack GROUP SEQ:TOKEN... [--error TEXT] [--retry-after S]",
     "Give leased deliveries back, to be claimed again or dead-lettered.\n"
     "They are claimable again after the group's backoff, or after S seconds\n"
     "(0: at once); dead-lettered once they reached max_attempts.\n"
     "  --error TEXT       why the attempt failed (kept as last_error)\n"
     "  --retry-after S    0..86400 seconds, instead of the backoff\n"
     "Prints SEQ, STATUS (retrying, dead_lettered; lease_lost / not_found fail)\n"
     "and when a retrying delivery is claimable again."},
    {"extend", NULL, cmd_extend, OPT(O_LEASE), 2, -1,
     "extend GROUP SEQ:TOKEN... [--lease S]",
     "Extend leases to now + S seconds (default: the group's lease_ttl_s).\n"
     "Prints SEQ, STATUS (extended; lease_lost / not_found fail) and the new\n"
     "lease end."},
    {"stats", NULL, cmd_stats, 0, 0, 1,
     "stats [GROUP]",
     "The figures of every group and topic, and the store's map use.\n"
     "Per group: pending, processing, dlq, dispatched, the age of the oldest\n"
     "unhandled delivery, the poison age (oldest failed or dead-lettered event),\n"
     "blocked and gap-parked aggregates, redeliveries, and ALERT when the oldest\n"
     "unhandled age reached the group's alert_oldest_unhandled_s.  Per topic:\n"
     "events stored, publishes, duplicates, conflicts.  With GROUP: that group\n"
     "and the topics it subscribes to (--json: the whole answer).  Ages read\n"
     "42s, 3m12s, 2h05m, 3d04h.  With several --url nodes, their figures merged:\n"
     "counts summed, ages the oldest, ALERT if any node's, a group of one node\n"
     "with that node's figures (--json: libmic's merge, with \"nodes\")."},
    {"oldest", NULL, cmd_oldest, OPT(O_LIMIT), 1, 1,
     "oldest GROUP [--limit N]",
     "The oldest unhandled deliveries of GROUP (default 10), and why each waits.\n"
     "Oldest first: AGE, SEQ, EVENT_ID, STATE and WHY: ready, leased by W until\n"
     "T, retry at T after ERROR, parked on missing version V, or behind head SEQ."},
    {"blocked", NULL, cmd_blocked, OPT(O_REASON) | OPT(O_LIMIT), 1, 1,
     "blocked GROUP [--reason lease|retry|gap|dlq] [--limit N]",
     "The aggregates of an ordered group held back by their head.\n"
     "Prints AGGREGATE, HEAD_SEQ, REASON, AGE, WAITING (deliveries behind the\n"
     "head), SINCE, and the missing version of a gap."},
    {"dlq", "list", cmd_dlq_list, OPT(O_LIMIT) | OPT(O_AFTER), 1, 1,
     "dlq list GROUP [--limit N] [--after CURSOR]",
     "Dead-lettered deliveries in seq order, a page of N (default 100) at a time.\n"
     "Prints SEQ, EVENT_ID, TOPIC, ATTEMPTS, DEAD_LETTERED_AT, LAST_ERROR.  A\n"
     "full page ends with the command for the next one (--after CURSOR)."},
    {"dlq", "requeue", cmd_dlq_requeue, OPT(O_ALL), 1, -1,
     "dlq requeue GROUP (SEQ... | --all)",
     "Send dead-lettered deliveries back to pending with their attempts reset.\n"
     "Prints SEQ and STATUS per item (requeued; not_in_dlq / not_found fail), or\n"
     "with --all the number requeued."},
    {"dlq", "skip", cmd_dlq_skip, 0, 2, -1,
     "dlq skip GROUP SEQ...",
     "Give up on dead-lettered deliveries (terminal state skipped).\n"
     "A skip releases an aggregate held under dlq_policy hold.  Prints SEQ and\n"
     "STATUS per item (skipped; not_in_dlq / not_found fail)."},
    {"topic", "create", cmd_topic_create, TOPIC_OPTS, 1, 1,
     "topic create NAME [--retention D] [--max-payload-bytes N]\n"
     "        [--require-versions] [--dedupe-retain D] [--body FILE|-]",
     "Create topic NAME, or replace its config (PUT /v1/topics/NAME).\n"
     "Absent fields take their defaults.  D is seconds, or a number with s, m,\n"
     "h or d (90, 15m, 12h, 7d).\n"
     "  --retention D          retention_s: how long events are kept (default 7d)\n"
     "  --max-payload-bytes N  the largest payload accepted (default 1048576)\n"
     "  --require-versions     refuse events without aggregate_version\n"
     "  --dedupe-retain D      dedupe_retain_s: how long a removed event's id stays\n"
     "                         known (default 7d)\n"
     "  --body FILE|-          a JSON body to send (FILE, or stdin with '-'); the\n"
     "                         options above set their fields over it\n"
     "Prints 'created topic NAME' (or 'updated') and the topic's config."},
    {"topic", "show", cmd_topics, 0, 1, 1,
     "topic show NAME",
     "One topic's config, a field a line."},
    {"topic", "list", cmd_topics, 0, 0, 0,
     "topic list",
     "Every topic with its config, one a line."},
    {"topic", "delete", cmd_topic_delete, 0, 1, 1,
     "topic delete NAME",
     "Delete an empty topic.  A topic that still holds events is refused\n"
     "(409 topic_not_empty)."},
    {"group", "create", cmd_group_create, GROUP_OPTS, 1, 1,
     "group create NAME --topics T[,T]... [--ordered] [--kind K]\n"
     "        [--max-attempts N] [--lease D] [--start S] [--dlq-policy P]\n"
     "        [--alert-oldest-unhandled D] [--backoff-initial-ms MS]\n"
     "        [--backoff-max-ms MS] [--backoff-multiplier X] [--sink-nats URL\n"
     "        --sink-stream S --sink-subject T] [--body FILE|-]",
     "Create group NAME, or replace its config (PUT /v1/groups/NAME).\n"
     "Absent fields take their defaults; topics, ordered, start and the sink are\n"
     "fixed at creation.  D is seconds, or a number with s, m, h or d.\n"
     "  --topics T[,T]...           exact topic names, or prefixes ending in '*'\n"
     "  --ordered                   hand out each aggregate's events one at a time,\n"
     "                              in order\n"
     "  --kind K                    projection (default) or effect\n"
     "  --max-attempts N            claims before the DLQ, 1..1000 (default 10)\n"
     "  --lease D                   lease_ttl_s of a claim (default 30s, at most 12h)\n"
     "  --start S                   all (default), new, or an RFC 3339 time\n"
     "  --dlq-policy P              ordered groups: release (default) or hold\n"
     "  --alert-oldest-unhandled D  alert when the oldest unhandled delivery is\n"
     "                              that old (none: no alert, the default)\n"
     "  --backoff-initial-ms MS, --backoff-max-ms MS, --backoff-multiplier X\n"
     "                              the retry backoff (1000, 300000, 2)\n"
     "  --sink-nats URL --sink-stream S --sink-subject T\n"
     "                              relay the group to a NATS JetStream stream\n"
     "  --body FILE|-               a JSON body to send (FILE, or stdin with '-');\n"
     "                              the options above set their fields over it\n"
     "Prints 'created group NAME' (or 'updated') and the group's config."},
    {"group", "show", cmd_groups, 0, 1, 1,
     "group show NAME",
     "One group's config, a field a line (a sink group adds its sink_status)."},
    {"group", "list", cmd_groups, 0, 0, 0,
     "group list",
     "Every group with its config, one a line (replay runs' groups included)."},
    {"group", "delete", cmd_group_delete, 0, 1, 1,
     "group delete NAME",
     "Delete a group and all its deliveries.  Its workers' tokens then answer\n"
     "not_found."},
    {"replay", "create", cmd_replay_create, REPLAY_OPTS, 0, 1,
     "replay create [RUN_ID] --topic T [--from TIME] [--to TIME] [--kind K]\n"
     "        [--effects forbid|allow] [--target-version V] [--body FILE|-]",
     "Start a replay run: a topic's events in a time range, delivered again.\n"
     "The selection is fixed once and handed out through the run's own group\n"
     "replay.RUN_ID (POST /v1/replays); live groups are not touched.\n"
     "  RUN_ID              [A-Za-z0-9._-]{1,64} (default: generated)\n"
     "  --topic T           the topic to replay (it must exist)\n"
     "  --from TIME         inclusive lower bound on created_at, RFC 3339\n"
     "                      (default: the beginning)\n"
     "  --to TIME           inclusive upper bound (default: now)\n"
     "  --kind K            projection (default) or effect (needs --effects allow)\n"
     "  --effects E         forbid (default) or allow: may the consumer cause\n"
     "                      side effects\n"
     "  --target-version V  a tag passed on in every delivery (integer or text)\n"
     "  --body FILE|-       a JSON body to send; the options set their fields over it\n"
     "Prints 'created replay run RUN_ID', its group, the number of events\n"
     "selected and their digest.  Claim from the group like any other."},
    {"replay", "show", cmd_replay_show, 0, 1, 1,
     "replay show RUN_ID",
     "A replay run's progress: selected, dispatched, pending, dlq, its state\n"
     "(running or drained), its range and digest."},
    {"replay", "list", cmd_replay_list, 0, 0, 0,
     "replay list",
     "Every replay run with its state and counts."},
    {"replay", "delete", cmd_replay_delete, 0, 1, 1,
     "replay delete RUN_ID",
     "Remove a replay run and its group (live groups are not touched)."},
    {"topics", NULL, cmd_topics, 0, 0, 1,
     "topics [NAME]",
     "Every topic with its config, or one topic's config.\n"
     "The same as mic topic list and mic topic show NAME."},
    {"groups", NULL, cmd_groups, 0, 0, 1,
     "groups [NAME]",
     "Every group with its config, or one group's config.\n"
     "The same as mic group list and mic group show NAME."},
    {"aggregate", NULL, cmd_aggregate, 0, 2, 2,
     "aggregate TYPE ID",
     "An aggregate's events in aggregate order, each with its state in every group.\n"
     "Prints VERSION, SEQ, EVENT_ID, TOPIC, CREATED_AT, GROUP, STATE, ATTEMPTS\n"
     "and the lease or retry it waits for."},
    {"backup", NULL, cmd_backup, 0, 1, 1,
     "backup FILE",
     "Save a backup of the server's store (GET /v1/backup: an admin key): a\n"
     "consistent, compacted copy of its LMDB data.mdb taken while micd serves.\n"
     "It is written to FILE.tmp, synced, then renamed to FILE, so FILE exists\n"
     "only whole; FILE '-' writes to stdout.  stderr shows the bytes so far and\n"
     "the rate.  To restore: stop micd, empty its --data directory, copy FILE\n"
     "there as data.mdb, start micd."},
    {"keys", "new", cmd_keys_new, OPT(O_ID) | OPT(O_ROLE) | OPT(O_SCOPE), 0, 0,
     "keys new --id ID --role ROLE [--scope S]...",
     "A new API key for micd's --keys file (no server is asked).  Prints the\n"
     "secret (mic_ and 43 base64url characters of 32 random bytes) on stdout, and\n"
     "the file line that holds its SHA-256, ID ROLE SHA256 SCOPES, on stderr.\n"
     "  --id ID      the key's name, [A-Za-z0-9._-]{1,64} (logged and audited)\n"
     "  --role ROLE  producer, consumer, monitor or admin\n"
     "  --scope S    topic:GLOB or group:GLOB ('*' matches any run of characters),\n"
     "               repeatable; none: '*', every topic and group\n"
     "Give the secret to the client (mic --key, $MIC_KEY); append the line to the\n"
     "keys file and send micd SIGHUP."},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static const char common_help[] =
    "Options of every command (before or after it):\n"
    "  --url URL      the server (default $MIC_URL, else " DEFAULT_URL "), or\n"
    "                 several, URL,URL,...: publish routes each event to its node;\n"
    "                 stats, oldest and blocked merge every node's; topic and group\n"
    "                 create and delete go to every node; claim, ack, nack,\n"
    "                 extend, dlq, replay and backup take one URL\n"
    "  --key SECRET   the API key (default $MIC_KEY; none: no Authorization header)\n"
    "  --cacert FILE  PEM CA certificate(s) to check an https:// server with\n"
    "  --json         print the server's JSON answer as it came instead of a table\n"
    "  --help         help; mic COMMAND --help for one command\n";

static const char exit_help[] =
    "Exit status:\n"
    "  0  success\n"
    "  1  the server answered with an error (4xx/5xx), or an item failed (an ack\n"
    "     answered lease_lost or not_found, a requeue not_in_dlq, ...)\n"
    "  2  usage error, or the server could not be reached\n"
    "Errors are one line on stderr, with the server's status and error code:\n"
    "  mic: 422 invalid_request: max must be an integer from 1 to 1000 (field max)\n"
    "  mic: cannot reach " DEFAULT_URL ": Connection refused\n";

#define HELP_WIDTH 79
#define SUMMARY_INDENT 8

/* The first sentence of 'help' (up to a '.' that ends a word, or the
 * whole first paragraph), wrapped at HELP_WIDTH columns after an indent:
 * the overview never cuts a description in the middle of a sentence. */
static void print_summary(const char *help)
{
    size_t end = 0, col = SUMMARY_INDENT, i = 0;

    while (help[end] && !(help[end] == '.' && (!help[end + 1] || help[end + 1] == ' ' ||
                                               help[end + 1] == '\n')) &&
           !(help[end] == '\n' && (help[end + 1] == ' ' || help[end + 1] == '\n')))
        end++;
    if (help[end] == '.')
        end++;
    printf("%*s", SUMMARY_INDENT, "");
    while (i < end) {
        size_t w;

        while (i < end && (help[i] == ' ' || help[i] == '\n'))
            i++;
        for (w = 0; i + w < end && help[i + w] != ' ' && help[i + w] != '\n'; w++)
            ;
        if (!w)
            break;
        if (col > SUMMARY_INDENT && col + 1 + w > HELP_WIDTH) {
            printf("\n%*s", SUMMARY_INDENT, "");
            col = SUMMARY_INDENT;
        } else if (col > SUMMARY_INDENT) {
            putchar(' ');
            col++;
        }
        printf("%.*s", (int)w, help + i);
        col += w;
        i += w;
    }
    putchar('\n');
}

static void usage(void)
{
    fputs("usage: mic [--url URL] [--json] COMMAND [ARGS] [OPTIONS]\n"
          "\n"
          "The admin and worker command line of MIC, the outbox broker.\n"
          "\n"
          "Commands (mic COMMAND --help for one):\n", stdout);
    for (size_t i = 0; i < NCOMMANDS; i++) {
        printf("  mic %s\n", commands[i].synopsis);
        print_summary(commands[i].help);
    }
    printf("\n%s\n%s", common_help, exit_help);
}

/* Help for the commands named 'name' (and 'sub', when it names one of
 * them; else every one of 'name'). */
static void command_usage(const char *name, const char *sub)
{
    int first = 1, sub_known = 0;

    for (size_t i = 0; sub && i < NCOMMANDS; i++)
        sub_known |= !strcmp(commands[i].name, name) && commands[i].sub &&
                     !strcmp(commands[i].sub, sub);
    for (size_t i = 0; i < NCOMMANDS; i++) {
        const struct command *k = &commands[i];

        if (strcmp(k->name, name) || (sub_known && k->sub && strcmp(k->sub, sub)))
            continue;
        printf("%susage: mic %s\n\n%s\n", first ? "" : "\n", k->synopsis, k->help);
        first = 0;
    }
    printf("\n%s\n%s", common_help, exit_help);
}

/* ---- Arguments ---- */

/* Find the command named by the first positional words.  Returns it and
 * how many words it took, or NULL (message printed). */
static const struct command *find_command(struct cli *c, int *words)
{
    const char *name = c->pos[0], *sub = c->npos > 1 ? c->pos[1] : NULL;
    int known = 0;

    for (size_t i = 0; i < NCOMMANDS; i++) {
        const struct command *k = &commands[i];

        if (strcmp(k->name, name))
            continue;
        known = 1;
        if (!k->sub) {
            *words = 1;
            return k;
        }
        if (sub && !strcmp(k->sub, sub)) {
            *words = 2;
            return k;
        }
    }
    if (known) {
        struct mic_buf subs = {0};
        size_t k = 0, total = 0;

        /* "dlq: give list, requeue or skip": the table's words. */
        for (size_t i = 0; i < NCOMMANDS; i++)
            total += !strcmp(commands[i].name, name) && commands[i].sub;
        for (size_t i = 0; i < NCOMMANDS; i++) {
            if (strcmp(commands[i].name, name) || !commands[i].sub)
                continue;
            if (k++)
                buf_puts(&subs, k == total ? " or " : ", ");
            buf_puts(&subs, commands[i].sub);
        }
        usage_error(c, "%s: give %s", name, subs.p && !subs.oom ? subs.p : "a subcommand");
        mic_buf_fini(&subs);
    } else {
        usage_error(c, "unknown command '%s'", name);
    }
    return NULL;
}

/* c->url as the node list of the handle: "URL[,URL]...".  Returns 0, or
 * EXIT_USAGE after the message (an empty URL in the list); libmic judges
 * each URL and their number when the handle is made. */
static int urls_split(struct cli *c)
{
    size_t n = 1;
    char *p;

    for (const char *q = c->url; *q; q++)
        n += *q == ',';
    if (!(c->urlbuf = strdup(c->url)) || !(c->urls = calloc(n, sizeof *c->urls))) {
        oom(c);
        return EXIT_USAGE;
    }
    for (p = c->urlbuf; p; c->nurls++) {
        char *comma = strchr(p, ',');

        if (comma)
            *comma = 0;
        if (!*p)
            return usage_error(c, "--url: an empty URL in '%s' (give URL[,URL]...)", c->url);
        c->urls[c->nurls] = p;
        p = comma ? comma + 1 : NULL;
    }
    return 0;
}

/* Parse argv.  Returns 0 (c->cmd set), EXIT_USAGE (message printed), or
 * -1 after printing help. */
static int opts_parse(struct cli *c, int argc, char **argv)
{
    struct option long_opts[O_COUNT + 1];
    int ch, words = 0;

    if (!(c->headers = calloc((size_t)argc + 1, sizeof *c->headers)) ||
        !(c->scopes = calloc((size_t)argc + 1, sizeof *c->scopes)) ||
        !(c->pos = calloc((size_t)argc + 1, sizeof *c->pos))) {
        oom(c);
        return EXIT_USAGE;
    }
    for (int o = 0; o < O_COUNT; o++)
        long_opts[o] = (struct option){opt_defs[o].name,
                                       opt_defs[o].has_arg ? required_argument : no_argument,
                                       NULL, OPT_BASE + o};
    memset(&long_opts[O_COUNT], 0, sizeof long_opts[O_COUNT]);
    opterr = 0;
    /* "-": every non-option comes back in order as 1, whatever
     * POSIXLY_CORRECT says, so options may follow the command. */
    while ((ch = getopt_long(argc, argv, "-hv", long_opts, NULL)) != -1) {
        int o = ch - OPT_BASE;

        if (ch == 1) {
            c->pos[c->npos++] = optarg;
            continue;
        }
        if (ch == 'h') {
            o = O_HELP;
        } else if (ch == 'v') {
            o = O_VERBOSE;
        } else if (ch == '?' || o < 0 || o >= O_COUNT) {
            if (optopt >= OPT_BASE && optopt < OPT_BASE + O_COUNT)
                return usage_error(c, "--%s needs a value", opt_defs[optopt - OPT_BASE].name);
            return usage_error(c, "unknown option %s", argv[optind - 1]);
        }
        if (o == O_HEADER) {
            c->headers[c->nheaders++] = optarg;
        } else if (o == O_SCOPE) {
            c->scopes[c->nscopes++] = optarg;
        } else if (c->given[o] && opt_defs[o].has_arg) {
            return usage_error(c, "--%s given twice", opt_defs[o].name);
        }
        c->given[o]++;
        c->val[o] = opt_defs[o].has_arg ? optarg : "";
    }
    while (optind < argc)
        c->pos[c->npos++] = argv[optind++];
    if (c->given[O_HELP]) {
        if (c->npos) {
            for (size_t i = 0; i < NCOMMANDS; i++)
                if (!strcmp(commands[i].name, c->pos[0])) {
                    command_usage(c->pos[0], c->npos > 1 ? c->pos[1] : NULL);
                    return -1;
                }
        }
        usage();
        return -1;
    }
    if (!c->npos)
        return usage_error(c, "give a command");
    if (!(c->cmd = find_command(c, &words)))
        return EXIT_USAGE;
    for (int o = 0; o < O_COUNT; o++)
        if (c->given[o] && !(OPT(o) & (COMMON | c->cmd->opts)))
            return usage_error(c, "%s%s%s: --%s does not apply", c->cmd->name,
                               c->cmd->sub ? " " : "", c->cmd->sub ? c->cmd->sub : "",
                               opt_defs[o].name);
    c->args = c->pos + words;
    c->nargs = c->npos - words;
    if (c->nargs < c->cmd->min_args ||
        (c->cmd->max_args >= 0 && c->nargs > c->cmd->max_args))
        return usage_error(c, "wrong number of arguments: mic %.*s",
                           (int)strcspn(c->cmd->synopsis, "\n"), c->cmd->synopsis);
    for (int i = 0; i < c->nargs; i++)
        if (!c->args[i][0])
            return usage_error(c, "%s: an empty argument", c->cmd->name);
    c->json = c->given[O_JSON] > 0;
    c->key = c->val[O_KEY] && *c->val[O_KEY] ? c->val[O_KEY] : getenv("MIC_KEY");
    if (c->key && !*c->key)
        c->key = NULL;
    c->url = c->val[O_URL];
    if (!c->url || !*c->url)
        c->url = getenv("MIC_URL");
    if (!c->url || !*c->url)
        c->url = DEFAULT_URL;
    return urls_split(c);
}

/* ---- Main ---- */

int main(int argc, char **argv)
{
    struct cli c;
    int rc;

    memset(&c, 0, sizeof c);
    if ((rc = opts_parse(&c, argc, argv))) {
        rc = rc < 0 ? 0 : rc;
        goto out_args;
    }
    rc = c.cmd->fn(&c);
    if (fflush(stdout) && !rc) {
        set_err(&c, "cannot write to stdout: %s", strerror(errno));
        rc = report(&c, EXIT_FAIL);
    }
    mic_client_free(c.mc);
out_args:
    free(c.urls);
    free(c.urlbuf);
    free(c.headers);
    free(c.scopes);
    free(c.pos);
    return rc;
}
