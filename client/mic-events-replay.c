/* mic-events-replay.c - the command-line replayer (DESIGN section 5).
 *
 * DESIGN
 *
 * One run reads one topic's events in an inclusive time range from one
 * source and hands each to one sink:
 *
 *   source                        sink
 *   --from-broker URL   (NDJSON)  --to-nats URL --nats-stream S (JetStream)
 *   --from-json FILE    (NDJSON)  --to-broker URL --to-topic T
 *   --from-clickhouse URL         --to-json FILE
 *                                 --to-clickhouse URL
 *                                 (none: a dry run)
 *
 * Pipeline: source -> lines -> parse_event -> deliver (order check, digest,
 * first/last, progress) -> sink_put -> sink_finish.  Invariants:
 *
 *   - Events reach the sink in strictly increasing (created_at, event_id)
 *     order (event_id compared bytewise, as LMDB and ClickHouse do).  An
 *     event equal in both to the one before is skipped and counted in
 *     "skipped" (an archive written twice); a streamed source that goes
 *     backwards is an error.  The JSON file source filters by topic and
 *     range and sorts in memory when the file is not already in order.
 *   - The broker and ClickHouse sources stream (libmic's
 *     mic_stream_request) split into lines: memory is one line plus one
 *     sink batch, whatever the range.  So does a JSON file already in
 *     order (checked by a first pass); an unordered one holds its
 *     selected lines.  A streamed source silent for two minutes fails.
 *   - The first error stops the run: what the sink acknowledged before it
 *     stays published, so a retry (same --batch-id) may redeliver that
 *     prefix; the sinks' ids make the redelivery a duplicate (JetStream's
 *     Nats-Msg-Id window, the broker's event_id idempotency).
 *
 * Every publication (NATS, broker) carries the headers x-replay: true,
 * x-replay-batch-id: B and x-original-event-id: ID; NATS messages also
 * carry Nats-Msg-Id: B:ID.  The NATS subject is the event's topic and the
 * payload the stored event JSON exactly as the source served it.  A broker
 * republication is the event's own fields (seq and received_at dropped)
 * with topic T, event_id "B:ID" (or "B:h.<sha256 hex of ID>" when that
 * would pass 128 characters), created_at kept and the three headers added
 * to the event's headers, in batches of at most 1000 events (and about
 * 8 MiB) published with mic_publish_batch (retried on 429, 503 and no
 * answer with the same ids).  The archive formats are in
 * proto/archive-format.md.
 *
 * Before anything is read, the NATS sink checks that --nats-stream exists
 * and takes the topic as a subject: when it does not, the error names the
 * stream, the subject and the way out in plain words (another stream that
 * takes the subject, or the `nats stream add` / `nats stream edit` line),
 * and nothing is published (exit 1).
 *
 * HTTP: every request (micd, and ClickHouse's HTTP interface) goes through
 * libmic (client/mic.h), the repository's one HTTP client; this file calls
 * no HTTP library itself.
 *
 * Output: on success one JSON object on stdout (see usage()); the batch
 * id on stderr at the start and a carriage-return progress line when
 * stderr is a terminal, both unless --quiet; on failure one line on stderr.
 * Exit status: 0 done, 1 source or publication error, 2 usage error.
 */
#define _GNU_SOURCE
#include "core/buf.h"
#include "core/clock.h"
#include "core/err.h"
#include "mic.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <nats/nats.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PROG "mic-events-replay"
#define EXIT_FAIL 1
#define EXIT_USAGE 2

#define TIME_LEN MIC_TIME_LEN  /* "2026-09-29T08:00:00.000000Z" */
#define ID_MAX 128
#define TOPIC_MAX 200
#define BATCH_ID_MAX 48
#define BATCH_EVENTS 1000
#define BATCH_BYTES (8u << 20)
#define CONNECT_MS 10000
#define REQUEST_MS 300000      /* a request's limit (a stream has none) */
#define STALL_S 120            /* a stream without a byte for this long fails */
#define BROKER_RETRIES 7       /* publish retries on 429, 503 or no answer:
                                * about 3 to 6 s of backoff in all */
#define NATS_WAIT_MS 5000
#define DEFAULT_TABLE "mic_events"
#define MAX_US (253402300800LL * 1000000)   /* 10000-01-01T00:00:00Z */

/* ClickHouse 18.16 settings for every request (DESIGN section 11). */
#define CH_PARAMS "date_time_input_format=best_effort" \
                  "&output_format_json_quote_64bit_integers=0" \
                  "&input_format_skip_unknown_fields=1&wait_end_of_query=1"

enum source { SRC_NONE, SRC_BROKER, SRC_JSON, SRC_CLICKHOUSE };
enum sink { SINK_NONE, SINK_NATS, SINK_BROKER, SINK_JSON, SINK_CLICKHOUSE };

static const char *const source_names[] = {"none", "broker", "json", "clickhouse"};
static const char *const sink_names[] = {"none", "nats", "broker", "json", "clickhouse"};

struct opts {
    enum source src;
    const char *src_arg;
    enum sink sink;
    const char *sink_arg;
    const char *table, *topic, *to_topic, *nats_stream;
    int64_t from_us, to_us;
    char from[TIME_LEN + 1], to[TIME_LEN + 1];
    char batch[BATCH_ID_MAX + 1];
    int quiet;
};

/* One event as read from the source.  'line' is borrowed from the reader
 * until deliver returns; 'obj' is owned (json_decref by the caller). */
struct event {
    const char *line;
    size_t len;
    json_t *obj;
    const char *id, *topic;
    int64_t at_us;
    char at[TIME_LEN + 1];
};

struct replay {
    struct opts *o;
    EVP_MD_CTX *sha;
    uint64_t read, selected, published, duplicates, skipped;
    int have_last;
    int64_t last_us;
    char last_id[ID_MAX + 1], last_at[TIME_LEN + 1];
    char first_id[ID_MAX + 1], first_at[TIME_LEN + 1];
    int tty;
    int64_t progress_ms;
    char err[1024];
    /* Sinks. */
    mic_client *out;           /* broker and ClickHouse sinks */
    int batch_n;               /* events pending in one of: */
    json_t *events[BATCH_EVENTS];  /* broker: the republications */
    size_t events_bytes;       /* broker: their JSON size */
    struct mic_buf batch;      /* ClickHouse: the rows, NDJSON */
    char *insert_path;         /* ClickHouse: the INSERT's request path */
    natsOptions *nopts;
    natsConnection *nc;
    jsCtx *js;
    FILE *jf;
    char *jtmp;
};

/* ---- Errors and small helpers ---- */

__attribute__((format(printf, 2, 3)))
static int fail(struct replay *r, const char *fmt, ...)
{
    va_list ap;

    if (r->err[0])
        return -1; /* keep the first error */
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
    return -1;
}

__attribute__((format(printf, 1, 2)))
static int usage_error(const char *fmt, ...)
{
    va_list ap;

    fputs(PROG ": ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(" (see --help)\n", stderr);
    return EXIT_USAGE;
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

static int64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int name_ok(const char *s, size_t max, int colon)
{
    size_t n = 0;

    for (; s[n]; n++) {
        char c = s[n];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
              (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-' ||
              (colon && c == ':')))
            return 0;
    }
    return n >= 1 && n <= max;
}

/* A ClickHouse table name: [A-Za-z_][A-Za-z0-9_]*, optionally db.table. */
static int table_ok(const char *s)
{
    int start = 1, parts = 1;

    for (; *s; s++) {
        int alpha = (*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_';
        if (*s == '.' && !start && parts == 1) {
            start = 1;
            parts++;
            continue;
        }
        if (!(alpha || (!start && *s >= '0' && *s <= '9')))
            return 0;
        start = 0;
    }
    return !start;
}

static void hex(const unsigned char *p, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = 0;
}

/* ---- Time ----
 * RFC 3339 parsing and formatting are the broker's own (server/core/clock.c,
 * linked in), so the tool and micd read and write times the same way. */

static int time_parse(const char *s, size_t len, int64_t *out)
{
    return mic_time_parse(s, len, out) == MIC_OK ? 0 : -1;
}

static void time_format(int64_t us, char *out)
{
    mic_time_format(us, out);
}

/* ---- HTTP (libmic) ----
 * Every request goes through libmic (client/mic.h), the repository's one
 * HTTP client: a handle per server the run talks to, one for the source
 * and one for the sink.  --key (or $MIC_KEY) is given to the broker
 * handles only, never to ClickHouse's; --cacert to every handle. */

static const char *g_key, *g_cacert;

/* A handle on the server at 'url' into *out, with the API key 'key' (or
 * NULL).  Returns 0, or -1 with the error set. */
static int client_open(struct replay *r, const char *url, const char *key, mic_client **out)
{
    const char *urls[1] = {url};
    struct mic_client_opts o = {
        .urls = urls, .nurls = 1, .key = key, .cafile = g_cacert,
        .connect_timeout_ms = CONNECT_MS, .timeout_ms = REQUEST_MS,
        .retries = BROKER_RETRIES, .user_agent = PROG,
    };
    struct mic_failure f;
    char msg[700];

    if (mic_client_new(&o, out, &f))
        return fail(r, "%s", mic_failure_text(&f, msg, sizeof msg));
    return 0;
}

/* The last failure on 'c', for a message. */
static const char *failure(const mic_client *c, char *buf, size_t cap)
{
    return mic_failure_text(mic_client_failure(c), buf, cap);
}

/* ---- Stall watchdog ----
 * A streamed source that sends no byte for STALL_S seconds is an error.
 * SIGALRM stops the source's handle (mic_client_stop is async-signal-safe),
 * which ends the transfer; the clock runs only while the tool waits for
 * the source, not while a chunk is being delivered to the sink. */

static mic_client *volatile g_stall_client;
static volatile sig_atomic_t g_stalled;

static void on_alarm(int sig)
{
    (void)sig;
    g_stalled = 1;
    if (g_stall_client)
        mic_client_stop(g_stall_client);
}

static void stall_watch(mic_client *c)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    g_stalled = 0;
    g_stall_client = c;
    alarm(STALL_S);
}

static void stall_unwatch(void)
{
    alarm(0);
    g_stall_client = NULL;
}

/* ---- Line splitting (streamed sources) ---- */

typedef int (*line_fn)(struct replay *r, const char *line, size_t len);

struct lines {
    struct replay *r;
    line_fn fn;
    struct mic_buf b;
    size_t scanned;   /* b.p[0..scanned) holds no '\n' */
};

static int lines_feed(struct lines *l, const char *p, size_t n)
{
    size_t start = 0;
    char *nl;

    if (n == 0)
        return 0;
    if (buf_add(&l->b, p, n))
        return fail(l->r, "out of memory");
    while ((nl = memchr(l->b.p + l->scanned, '\n', l->b.len - l->scanned))) {
        size_t end = (size_t)(nl - l->b.p), len = end - start;

        if (len && l->b.p[start + len - 1] == '\r')
            len--;
        if (len && l->fn(l->r, l->b.p + start, len))
            return -1;
        start = l->scanned = end + 1;
    }
    l->scanned = l->b.len;
    if (start) {
        memmove(l->b.p, l->b.p + start, l->b.len - start);
        l->b.len -= start;
        l->scanned -= start;
    }
    return 0;
}

/* libmic's stream callback: a chunk of the 2xx body, with the stall
 * clock stopped while its lines are handled.  Non-zero stops the
 * transfer (the line handler's error is set). */
static int on_chunk(const char *p, size_t n, void *arg)
{
    int rc;

    alarm(0);
    rc = lines_feed(arg, p, n);
    alarm(STALL_S);
    return rc ? 1 : 0;
}

/* A streamed GET (broker) or POST of 'post' (ClickHouse query) to 'path'
 * on 'c', whose 2xx body is split into lines for 'fn'; any other status
 * is an error with the server's message. */
static int stream_run(struct replay *r, mic_client *c, const char *what, const char *path,
                      const char *post, const char *accept, line_fn fn)
{
    char hdr[100], msg[700];
    const char *h[] = {hdr, NULL};
    const struct mic_failure *f = mic_client_failure(c);
    struct lines l;
    int rc;

    memset(&l, 0, sizeof l);
    l.r = r;
    l.fn = fn;
    snprintf(hdr, sizeof hdr, "Accept: %s", accept);
    stall_watch(c);
    rc = mic_stream_request(c, 0, post ? "POST" : "GET", path,
                            post ? "text/plain; charset=UTF-8" : NULL, post,
                            post ? strlen(post) : 0, h, on_chunk, &l);
    stall_unwatch();
    if (rc && !r->err[0]) { /* else the line handler's error is set */
        if (g_stalled)
            fail(r, "reading from %s stalled: no byte for %d s after %llu events", what,
                 STALL_S, (unsigned long long)r->read);
        else if (f->kind == MIC_FAIL_SERVER)
            fail(r, "%s answered %s", what, failure(c, msg, sizeof msg));
        else
            fail(r, "reading from %s failed after %llu events: %s", what,
                 (unsigned long long)r->read, failure(c, msg, sizeof msg));
    } else if (!rc && l.b.len) {
        rc = fail(r, "%s: the stream ended inside a line (cut short?)", what);
    }
    mic_buf_fini(&l.b);
    return rc ? -1 : 0;
}

/* ---- Events ---- */

static int parse_event(struct replay *r, const char *line, size_t len, struct event *ev)
{
    json_error_t je;
    json_t *v;
    const char *at;

    memset(ev, 0, sizeof *ev);
    ev->line = line;
    ev->len = len;
    r->read++;
    if (!(ev->obj = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je)))
        return fail(r, "event %llu of the source is not JSON: %s",
                    (unsigned long long)r->read, je.text);
    if (!json_is_object(ev->obj))
        return fail(r, "event %llu of the source is not a JSON object",
                    (unsigned long long)r->read);
    v = json_object_get(ev->obj, "event_id");
    ev->id = json_string_value(v);
    if (!ev->id || strlen(ev->id) != json_string_length(v) || !name_ok(ev->id, ID_MAX, 1))
        return fail(r, "event %llu of the source has no valid event_id",
                    (unsigned long long)r->read);
    v = json_object_get(ev->obj, "topic");
    ev->topic = json_string_value(v);
    if (!ev->topic || strlen(ev->topic) != json_string_length(v) ||
        !name_ok(ev->topic, TOPIC_MAX, 1))
        return fail(r, "event %s has no valid topic", ev->id);
    v = json_object_get(ev->obj, "created_at");
    if (!(at = json_string_value(v)) || time_parse(at, json_string_length(v), &ev->at_us))
        return fail(r, "event %s has no valid created_at", ev->id);
    time_format(ev->at_us, ev->at);
    return 0;
}

static int in_selection(const struct opts *o, const struct event *ev)
{
    return !strcmp(ev->topic, o->topic) && ev->at_us >= o->from_us && ev->at_us <= o->to_us;
}

static int key_cmp(int64_t a_us, const char *a_id, int64_t b_us, const char *b_id)
{
    if (a_us != b_us)
        return a_us < b_us ? -1 : 1;
    return strcmp(a_id, b_id);
}

static void progress(struct replay *r, int final)
{
    int64_t now;

    if (!r->tty)
        return;
    now = mono_ms();
    if (!final && now - r->progress_ms < 200)
        return;
    r->progress_ms = now;
    fprintf(stderr, "\r%llu selected, %llu published, %llu duplicates%s",
            (unsigned long long)r->selected, (unsigned long long)r->published,
            (unsigned long long)r->duplicates, final ? "\n" : "");
}

static int sink_put(struct replay *r, struct event *ev);

/* One selected event, in order: check the order, digest it, publish it. */
static int deliver(struct replay *r, struct event *ev)
{
    if (r->have_last) {
        int c = key_cmp(ev->at_us, ev->id, r->last_us, r->last_id);
        if (c == 0) {
            r->skipped++;
            return 0;
        }
        if (c < 0)
            return fail(r, "the source is out of (created_at, event_id) order: "
                        "%s %s after %s %s", ev->at, ev->id, r->last_at, r->last_id);
    }
    if (!r->have_last) {
        memcpy(r->first_at, ev->at, sizeof r->first_at);
        snprintf(r->first_id, sizeof r->first_id, "%s", ev->id);
    }
    r->have_last = 1;
    r->last_us = ev->at_us;
    memcpy(r->last_at, ev->at, sizeof r->last_at);
    snprintf(r->last_id, sizeof r->last_id, "%s", ev->id);
    r->selected++;
    if (!EVP_DigestUpdate(r->sha, ev->at, TIME_LEN) || !EVP_DigestUpdate(r->sha, "\t", 1) ||
        !EVP_DigestUpdate(r->sha, ev->id, strlen(ev->id)) || !EVP_DigestUpdate(r->sha, "\n", 1))
        return fail(r, "SHA-256 failed");
    if (sink_put(r, ev))
        return -1;
    progress(r, 0);
    return 0;
}

/* A line of a streamed source (broker NDJSON, or the event column of a
 * ClickHouse row): the source selected it, so anything else is an error. */
static int on_event_line(struct replay *r, const char *line, size_t len)
{
    struct event ev;
    int rc;

    if ((rc = parse_event(r, line, len, &ev)) == 0) {
        if (!in_selection(r->o, &ev))
            rc = fail(r, "the source returned event %s (%s, topic %s) outside the selection",
                      ev.id, ev.at, ev.topic);
        else
            rc = deliver(r, &ev);
    }
    json_decref(ev.obj);
    return rc;
}

/* ---- Sources ---- */

static int source_broker(struct replay *r)
{
    const struct opts *o = r->o;
    char path[TOPIC_MAX + 2 * TIME_LEN + 64];
    mic_client *c;
    int rc;

    if (client_open(r, o->src_arg, g_key, &c))
        return -1;
    /* The times are normalised (digits, '-', ':', '.', 'T', 'Z'), the topic
     * is [A-Za-z0-9._:-]: nothing to escape. */
    snprintf(path, sizeof path, "/v1/topics/%s/events?from=%s&to=%s", o->topic, o->from,
             o->to);
    rc = stream_run(r, c, "the broker", path, NULL, "application/x-ndjson", on_event_line);
    mic_client_free(c);
    return rc;
}

/* ClickHouse's HTTP interface is reached as a libmic handle on the URL's
 * scheme://host:port; the rest of the URL (a path, query parameters such
 * as user= or database=) goes into each request's path. */
static const char *url_rest(const char *url)
{
    const char *p = strstr(url, "://");

    p = p ? p + 3 : url;
    return p + strcspn(p, "/?");
}

static int ch_connect(struct replay *r, const char *url, mic_client **out)
{
    char *base = strndup(url, (size_t)(url_rest(url) - url));
    int rc;

    if (!base)
        return fail(r, "out of memory");
    rc = client_open(r, base, NULL, out); /* no key: it is micd's */
    free(base);
    return rc;
}

/* A request path on the ClickHouse server of 'url': the URL's own path
 * and parameters, CH_PARAMS and, when 'query' is set, the escaped query.
 * NULL when memory runs out. */
static char *ch_path(const char *url, const char *query)
{
    const char *rest = url_rest(url);
    size_t cap = query ? 3 * strlen(query) + 1 : 0;
    char *esc = cap ? malloc(cap) : NULL, *path;
    int n;

    if (cap && (!esc || !mic_path_escape(query, esc, cap))) {
        free(esc);
        return NULL;
    }
    n = asprintf(&path, "%s%s%s" CH_PARAMS "%s%s", *rest == '/' ? "" : "/", rest,
                 strchr(rest, '?') ? "&" : "?", esc ? "&query=" : "", esc ? esc : "");
    free(esc);
    return n < 0 ? NULL : path;
}

static int on_ch_row(struct replay *r, const char *line, size_t len)
{
    json_t *row = json_loadb(line, len, 0, NULL);
    json_t *ev = json_object_get(row, "event");
    int rc;

    if (!json_is_string(ev))
        rc = fail(r, "ClickHouse returned a row without an event column: %.*s",
                  (int)(len > 200 ? 200 : len), line);
    else
        rc = on_event_line(r, json_string_value(ev), json_string_length(ev));
    json_decref(row);
    return rc;
}

static int source_clickhouse(struct replay *r)
{
    const struct opts *o = r->o;
    char *path = NULL, *sql = NULL;
    mic_client *c;
    int rc = -1;

    if (ch_connect(r, o->src_arg, &c))
        return -1;
    if (!(path = ch_path(o->src_arg, NULL)))
        goto out;
    /* The topic is [A-Za-z0-9._:-] (checked), so it needs no escaping. */
    if (asprintf(&sql, "SELECT event FROM %s WHERE topic = '%s' AND created_at_us >= %lld "
                 "AND created_at_us <= %lld ORDER BY created_at_us, event_id "
                 "FORMAT JSONEachRow", o->table, o->topic, (long long)o->from_us,
                 (long long)o->to_us) < 0) {
        sql = NULL;
        goto out;
    }
    rc = stream_run(r, c, "ClickHouse", path, sql, "application/json", on_ch_row);
out:
    if (rc && !r->err[0])
        fail(r, "out of memory");
    free(sql);
    free(path);
    mic_client_free(c);
    return rc;
}

/* The JSON file source.  Pass 1 parses every line and checks whether the
 * selected events are in (created_at, event_id) order.  If they are (an
 * archive this tool wrote), pass 2 streams them in constant memory;
 * otherwise pass 2 keeps the selected lines and sorts them by
 * (created_at, event_id, position in the file) before delivering them. */
struct kept {
    char *line;
    size_t len;
    int64_t at_us;
    char *id;
    size_t pos;
};

static int kept_cmp(const void *a, const void *b)
{
    const struct kept *x = a, *y = b;
    int c = key_cmp(x->at_us, x->id, y->at_us, y->id);

    if (c)
        return c;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

struct file_read {
    FILE *f;
    char *line;
    size_t cap;
    uint64_t lineno;
    /* pass 1 */
    int sorted, have_prev;
    int64_t prev_us;
    char prev_id[ID_MAX + 1];
    /* pass 2, unsorted */
    struct kept *k;
    size_t n, kcap;
};

/* Keep a copy of a selected line (pass 2 of an unsorted file). */
static int file_keep(struct replay *r, struct file_read *jp, const struct event *ev)
{
    struct kept *nk;

    if (jp->n == jp->kcap) {
        jp->kcap = jp->kcap ? jp->kcap * 2 : 1024;
        if (!(nk = realloc(jp->k, jp->kcap * sizeof *nk)))
            return fail(r, "out of memory");
        jp->k = nk;
    }
    nk = &jp->k[jp->n];
    nk->line = strndup(ev->line, ev->len);
    nk->id = strdup(ev->id);
    if (!nk->line || !nk->id) {
        free(nk->line);
        free(nk->id);
        return fail(r, "out of memory");
    }
    nk->len = ev->len;
    nk->at_us = ev->at_us;
    nk->pos = jp->n++;
    return 0;
}

/* One pass over the file: 1 checks the order, 2 delivers (streaming when
 * the file is sorted, else keeping the lines). */
static int file_pass(struct replay *r, struct file_read *jp, int pass)
{
    ssize_t got;

    rewind(jp->f);
    jp->lineno = 0;
    r->read = 0;
    while ((got = getline(&jp->line, &jp->cap, jp->f)) >= 0) {
        size_t len = (size_t)got;
        struct event ev;
        int rc = 0;

        jp->lineno++;
        while (len && (jp->line[len - 1] == '\n' || jp->line[len - 1] == '\r'))
            len--;
        if (!len)
            continue;
        if (parse_event(r, jp->line, len, &ev)) {
            json_decref(ev.obj);
            snprintf(r->err + strlen(r->err), sizeof r->err - strlen(r->err),
                     " (%s line %llu)", r->o->src_arg, (unsigned long long)jp->lineno);
            return -1;
        }
        if (in_selection(r->o, &ev)) {
            if (pass == 1) {
                if (jp->have_prev && key_cmp(ev.at_us, ev.id, jp->prev_us, jp->prev_id) < 0)
                    jp->sorted = 0;
                jp->have_prev = 1;
                jp->prev_us = ev.at_us;
                snprintf(jp->prev_id, sizeof jp->prev_id, "%s", ev.id);
            } else if (jp->sorted) {
                rc = deliver(r, &ev);
            } else {
                rc = file_keep(r, jp, &ev);
            }
        }
        json_decref(ev.obj);
        if (rc)
            return rc;
    }
    if (ferror(jp->f))
        return fail(r, "reading %s: %s", r->o->src_arg, strerror(errno));
    return 0;
}

static int source_json(struct replay *r)
{
    struct file_read jp;
    int rc;

    memset(&jp, 0, sizeof jp);
    jp.sorted = 1;
    if (!(jp.f = fopen(r->o->src_arg, "r")))
        return fail(r, "cannot open %s: %s", r->o->src_arg, strerror(errno));
    if ((rc = file_pass(r, &jp, 1)) || (rc = file_pass(r, &jp, 2)))
        goto out;
    if (!jp.sorted) {
        uint64_t read = r->read;

        qsort(jp.k, jp.n, sizeof *jp.k, kept_cmp);
        for (size_t i = 0; i < jp.n && !rc; i++) {
            struct event ev;

            rc = parse_event(r, jp.k[i].line, jp.k[i].len, &ev) || deliver(r, &ev) ? -1 : 0;
            json_decref(ev.obj);
        }
        r->read = read; /* counted once, in the pass over the file */
    }
out:
    for (size_t i = 0; i < jp.n; i++) {
        free(jp.k[i].line);
        free(jp.k[i].id);
    }
    free(jp.k);
    free(jp.line);
    fclose(jp.f);
    return rc;
}

/* ---- Sink: NATS JetStream ---- */

static int nats_fail(struct replay *r, const char *what, natsStatus s, jsErrCode jerr)
{
    natsStatus ls;
    const char *last = nats_GetLastError(&ls);

    if (jerr)
        return fail(r, "%s: %s (JetStream error %d)%s%s", what, natsStatus_GetText(s),
                    (int)jerr, last && *last ? ": " : "", last && *last ? last : "");
    return fail(r, "%s: %s%s%s", what, natsStatus_GetText(s),
                last && *last ? ": " : "", last && *last ? last : "");
}

/* Does NATS subject 'subj' match the stream subject 'pat' ('*' one token,
 * '>' the rest, one token or more)? */
static int subject_matches(const char *pat, const char *subj)
{
    for (;;) {
        size_t pl = strcspn(pat, "."), sl = strcspn(subj, ".");

        if (pl == 1 && *pat == '>')
            return sl > 0;
        if (!(pl == 1 && *pat == '*') && (pl != sl || memcmp(pat, subj, pl)))
            return 0;
        if (!pat[pl] || !subj[sl])
            return !pat[pl] && !subj[sl];
        pat += pl + 1;
        subj += sl + 1;
    }
}

static int stream_takes(const jsStreamInfo *si, const char *subj)
{
    const jsStreamConfig *c = si ? si->Config : NULL;

    if (c && !c->SubjectsLen)
        return !strcmp(c->Name, subj); /* no subjects: the stream's name is its subject */
    for (int i = 0; c && i < c->SubjectsLen; i++)
        if (subject_matches(c->Subjects[i], subj))
            return 1;
    return 0;
}

/* The stream named by --nats-stream is missing: say so in plain words,
 * with the stream that does take the topic's subject if there is one,
 * else the command that makes it. */
static int stream_missing(struct replay *r)
{
    const struct opts *o = r->o;
    jsStreamInfoList *list = NULL;
    const char *other = NULL;
    int rc;

    if (js_Streams(&list, r->js, NULL, NULL) == NATS_OK)
        for (int i = 0; list && i < list->Count && !other; i++)
            if (stream_takes(list->List[i], o->topic))
                other = list->List[i]->Config->Name;
    if (other)
        rc = fail(r, "JetStream at %s has no stream %s; the events of topic %s go to subject "
                  "%s, which stream %s takes: pass --nats-stream %s", o->sink_arg,
                  o->nats_stream, o->topic, o->topic, other, other);
    else
        rc = fail(r, "JetStream at %s has no stream %s, and no stream takes subject %s (the "
                  "events of topic %s are published to it): create the stream first, e.g. "
                  "nats --server %s stream add %s --subjects '%s' --defaults", o->sink_arg,
                  o->nats_stream, o->topic, o->topic, o->sink_arg, o->nats_stream, o->topic);
    jsStreamInfoList_Destroy(list);
    return rc;
}

/* The stream exists but does not take the topic's subject. */
static int stream_elsewhere(struct replay *r, const jsStreamInfo *si)
{
    const struct opts *o = r->o;
    const jsStreamConfig *c = si->Config;
    char subjects[512] = "";
    size_t n = 0;

    for (int i = 0; i < c->SubjectsLen && n < sizeof subjects; i++)
        n += (size_t)snprintf(subjects + n, sizeof subjects - n, "%s%s", i ? "," : "",
                              c->Subjects[i]);
    return fail(r, "JetStream stream %s at %s does not take subject %s (its subjects: %s), "
                "where the events of topic %s are published: add it, e.g. nats --server %s "
                "stream edit %s --subjects '%s%s%s'", o->nats_stream, o->sink_arg, o->topic,
                subjects[0] ? subjects : "none", o->topic, o->sink_arg, o->nats_stream,
                subjects, subjects[0] ? "," : "", o->topic);
}

static int nats_open(struct replay *r)
{
    const struct opts *o = r->o;
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    jsOptions jo;
    natsStatus s;
    char what[300];

    snprintf(what, sizeof what, "cannot connect to NATS at %s", o->sink_arg);
    if ((s = natsOptions_Create(&r->nopts)) != NATS_OK ||
        (s = natsOptions_SetURL(r->nopts, o->sink_arg)) != NATS_OK ||
        (s = natsOptions_SetName(r->nopts, PROG)) != NATS_OK ||
        (s = natsOptions_SetTimeout(r->nopts, NATS_WAIT_MS)) != NATS_OK ||
        /* A lost connection fails the batch (a retry resumes it) rather
         * than parking publications behind a reconnect. */
        (s = natsOptions_SetAllowReconnect(r->nopts, false)) != NATS_OK ||
        (s = natsConnection_Connect(&r->nc, r->nopts)) != NATS_OK)
        return nats_fail(r, what, s, 0);
    jsOptions_Init(&jo);
    jo.Wait = NATS_WAIT_MS;
    if ((s = natsConnection_JetStream(&r->js, r->nc, &jo)) != NATS_OK)
        return nats_fail(r, "cannot use JetStream", s, 0);
    snprintf(what, sizeof what, "cannot read JetStream stream %s at %s", o->nats_stream,
             o->sink_arg);
    if ((s = js_GetStreamInfo(&si, r->js, o->nats_stream, NULL, &jerr)) != NATS_OK) {
        if (jerr == JSStreamNotFoundErr || s == NATS_NOT_FOUND)
            return stream_missing(r);
        return nats_fail(r, what, s, jerr);
    }
    /* Every event of the run is published to subject o->topic. */
    if (!stream_takes(si, o->topic)) {
        int rc = stream_elsewhere(r, si);

        jsStreamInfo_Destroy(si);
        return rc;
    }
    jsStreamInfo_Destroy(si);
    return 0;
}

static int nats_put(struct replay *r, const struct event *ev)
{
    char msgid[BATCH_ID_MAX + ID_MAX + 2], what[400];
    jsPubAck *pa = NULL;
    jsErrCode jerr = 0;
    jsPubOptions po;
    natsMsg *m = NULL;
    natsStatus s;

    snprintf(msgid, sizeof msgid, "%s:%s", r->o->batch, ev->id);
    if ((s = natsMsg_Create(&m, ev->topic, NULL, ev->line, (int)ev->len)) != NATS_OK ||
        (s = natsMsgHeader_Set(m, "x-replay", "true")) != NATS_OK ||
        (s = natsMsgHeader_Set(m, "x-replay-batch-id", r->o->batch)) != NATS_OK ||
        (s = natsMsgHeader_Set(m, "x-original-event-id", ev->id)) != NATS_OK ||
        (s = natsMsgHeader_Set(m, "Nats-Msg-Id", msgid)) != NATS_OK) {
        natsMsg_Destroy(m);
        snprintf(what, sizeof what, "cannot build the NATS message of event %s", ev->id);
        return nats_fail(r, what, s, 0);
    }
    jsPubOptions_Init(&po);
    po.ExpectStream = r->o->nats_stream;
    po.MaxWait = NATS_WAIT_MS;
    s = js_PublishMsg(&pa, r->js, m, &po, &jerr);
    natsMsg_Destroy(m);
    if (s == NATS_NO_RESPONDERS)
        return fail(r, "JetStream publication of event %s failed: no stream takes subject %s "
                    "any more (was stream %s removed or changed?)", ev->id, ev->topic,
                    r->o->nats_stream);
    if (s != NATS_OK) {
        snprintf(what, sizeof what, "JetStream publication of event %s to subject %s failed",
                 ev->id, ev->topic);
        return nats_fail(r, what, s, jerr);
    }
    if (pa->Duplicate)
        r->duplicates++;
    else
        r->published++;
    jsPubAck_Destroy(pa);
    return 0;
}

static void nats_close(struct replay *r)
{
    jsCtx_Destroy(r->js);
    natsConnection_Destroy(r->nc);
    natsOptions_Destroy(r->nopts);
    r->js = NULL;
    r->nc = NULL;
    r->nopts = NULL;
}

/* ---- Sink: broker ---- */

/* The republished event's id: "B:ID", or "B:h.<SHA-256 hex of ID>" when
 * that would pass ID_MAX characters (B is at most 48 long: 115 at most). */
static void republished_id(const char *batch, const char *id, char out[ID_MAX + 1])
{
    size_t bl = strlen(batch), il = strlen(id);
    unsigned char md[32];
    char hx[65];

    if (bl + 1 + il <= ID_MAX) {
        memcpy(out, batch, bl);
        out[bl] = ':';
        memcpy(out + bl + 1, id, il + 1);
        return;
    }
    EVP_Digest(id, il, md, NULL, EVP_sha256(), NULL);
    hex(md, sizeof md, hx);
    snprintf(out, ID_MAX + 1, "%s:h.%s", batch, hx);
}

/* The fields a publisher may send (DESIGN section 2); seq, received_at and
 * anything else the source carries are dropped. */
static const char *const own_fields[] = {
    "aggregate_type", "aggregate_id", "aggregate_version", "schema_version",
    "event_type", "correlation_id", "priority", "created_at", "payload", NULL,
};

static json_t *republished(const struct replay *r, const struct event *ev)
{
    json_t *o = json_object(), *h, *old = json_object_get(ev->obj, "headers");
    char id[ID_MAX + 1];
    int bad = !o;

    republished_id(r->o->batch, ev->id, id);
    for (int i = 0; own_fields[i] && !bad; i++) {
        json_t *v = json_object_get(ev->obj, own_fields[i]);
        if (v)
            bad = json_object_set(o, own_fields[i], v);
    }
    h = json_is_object(old) ? json_copy(old) : json_object();
    bad = bad || !h ||
          json_object_set_new(o, "event_id", json_string(id)) ||
          json_object_set_new(o, "topic", json_string(r->o->to_topic)) ||
          json_object_set_new(h, "x-replay", json_string("true")) ||
          json_object_set_new(h, "x-replay-batch-id", json_string(r->o->batch)) ||
          json_object_set_new(h, "x-original-event-id", json_string(ev->id)) ||
          json_object_set(o, "headers", h);
    json_decref(h);
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* Publish the pending republications as one batch through libmic, which
 * retries 429 (writer queue full), 503 and no answer with the same event
 * ids: the broker's idempotency makes a retried event a duplicate. */
static int broker_flush(struct replay *r)
{
    struct mic_publish_result *res;
    char msg[700];
    int n = r->batch_n, rc = 0;

    if (!n)
        return 0;
    if (!(res = calloc((size_t)n, sizeof *res)))
        return fail(r, "out of memory");
    if (mic_publish_batch(r->out, r->events, (size_t)n, res)) {
        rc = fail(r, "publishing a batch of %d events to the broker failed: %s", n,
                  failure(r->out, msg, sizeof msg));
    } else {
        for (int i = 0; i < n; i++) {
            if (res[i].duplicate)
                r->duplicates++;
            else
                r->published++;
        }
    }
    free(res);
    for (int i = 0; i < n; i++) {
        json_decref(r->events[i]);
        r->events[i] = NULL;
    }
    r->batch_n = 0;
    r->events_bytes = 0;
    return rc;
}

static int broker_put(struct replay *r, const struct event *ev)
{
    json_t *o = republished(r, ev);
    size_t size = o ? json_dumpb(o, NULL, 0, JSON_COMPACT) : 0;

    if (!size) {
        json_decref(o);
        return fail(r, "cannot build the republication of event %s", ev->id);
    }
    if (r->batch_n && r->events_bytes + size + 1 > BATCH_BYTES && broker_flush(r)) {
        json_decref(o);
        return -1;
    }
    r->events[r->batch_n++] = o;
    r->events_bytes += size + 1;
    return r->batch_n == BATCH_EVENTS ? broker_flush(r) : 0;
}

/* ---- Sink: NDJSON file ----
 * Written to FILE.tmp.PID and renamed over FILE when complete, so a
 * failed run leaves no half archive. */

static int file_open(struct replay *r)
{
    if (asprintf(&r->jtmp, "%s.tmp.%ld", r->o->sink_arg, (long)getpid()) < 0) {
        r->jtmp = NULL;
        return fail(r, "out of memory");
    }
    if (!(r->jf = fopen(r->jtmp, "w")))
        return fail(r, "cannot create %s: %s", r->jtmp, strerror(errno));
    return 0;
}

static int file_put(struct replay *r, const struct event *ev)
{
    if (fwrite(ev->line, 1, ev->len, r->jf) != ev->len || putc('\n', r->jf) == EOF)
        return fail(r, "writing %s: %s", r->jtmp, strerror(errno));
    r->published++;
    return 0;
}

static int file_finish(struct replay *r)
{
    FILE *f = r->jf;

    r->jf = NULL;
    if (fflush(f) || fsync(fileno(f))) {
        fail(r, "writing %s: %s", r->jtmp, strerror(errno));
        fclose(f);
        return -1;
    }
    if (fclose(f))
        return fail(r, "writing %s: %s", r->jtmp, strerror(errno));
    if (rename(r->jtmp, r->o->sink_arg))
        return fail(r, "cannot rename %s to %s: %s", r->jtmp, r->o->sink_arg, strerror(errno));
    free(r->jtmp);
    r->jtmp = NULL;
    return 0;
}

static void file_close(struct replay *r)
{
    if (r->jf)
        fclose(r->jf);
    if (r->jtmp)
        unlink(r->jtmp);
    free(r->jtmp);
    r->jf = NULL;
    r->jtmp = NULL;
}

/* ---- Sink: ClickHouse ---- */

/* POST 'body' (len bytes) to 'path' on the sink's ClickHouse; 'what'
 * names the statement in the error.  Anything but a 200 is an error that
 * quotes the first line of ClickHouse's answer. */
static int ch_exec(struct replay *r, const char *path, const char *body, size_t len,
                   const char *what)
{
    struct mic_response resp;
    char msg[700];
    size_t n;
    int rc = 0;

    if (mic_request(r->out, 0, "POST", path, "text/plain; charset=UTF-8", body, len, NULL,
                    &resp)) {
        rc = fail(r, "ClickHouse: %s failed: %s", what, failure(r->out, msg, sizeof msg));
    } else if (resp.status != 200) {
        n = strcspn(resp.body, "\r\n");
        rc = fail(r, "ClickHouse refused %s with %ld: %.*s", what, resp.status,
                  (int)(n > 300 ? 300 : n), n ? resp.body : "(empty answer)");
    }
    mic_response_fini(&resp);
    return rc;
}

static int ch_open(struct replay *r)
{
    char *path, *ddl = NULL;
    int rc;

    if (ch_connect(r, r->o->sink_arg, &r->out))
        return -1;
    if (!(path = ch_path(r->o->sink_arg, NULL)) ||
        asprintf(&ddl, "CREATE TABLE IF NOT EXISTS %s (topic String, "
                 "event_id String, created_at_us UInt64, created_at DateTime, "
                 "seq UInt64, event String) ENGINE = MergeTree "
                 "PARTITION BY toYYYYMM(created_at) "
                 "ORDER BY (topic, created_at_us, event_id)", r->o->table) < 0) {
        free(path);
        return fail(r, "out of memory");
    }
    rc = ch_exec(r, path, ddl, strlen(ddl), "CREATE TABLE");
    free(ddl);
    free(path);
    if (rc)
        return rc;
    if (asprintf(&ddl, "INSERT INTO %s FORMAT JSONEachRow", r->o->table) < 0)
        return fail(r, "out of memory");
    r->insert_path = ch_path(r->o->sink_arg, ddl);
    free(ddl);
    return r->insert_path ? 0 : fail(r, "out of memory");
}

static int ch_flush(struct replay *r)
{
    int rc;

    if (!r->batch_n)
        return 0;
    rc = ch_exec(r, r->insert_path, r->batch.p, r->batch.len, "an INSERT");
    if (rc)
        return rc;
    r->published += (uint64_t)r->batch_n;
    r->batch_n = 0;
    r->batch.len = 0;
    return 0;
}

static int ch_put(struct replay *r, const struct event *ev)
{
    json_int_t seq = json_integer_value(json_object_get(ev->obj, "seq"));
    int64_t secs = ev->at_us / 1000000;
    json_t *row;
    char *text;
    int rc;

    /* created_at (DateTime, for partitioning) holds 1970..2106 only. */
    if (secs > 4294967295LL)
        secs = 4294967295LL;
    row = json_pack("{s:s, s:s, s:I, s:I, s:I, s:s%}", "topic", ev->topic,
                    "event_id", ev->id, "created_at_us", (json_int_t)ev->at_us,
                    "created_at", (json_int_t)secs, "seq", seq < 0 ? (json_int_t)0 : seq,
                    "event", ev->line, ev->len);
    text = row ? json_dumps(row, JSON_COMPACT) : NULL;
    json_decref(row);
    if (!text)
        return fail(r, "cannot build the ClickHouse row of event %s", ev->id);
    rc = 0;
    if (r->batch_n && r->batch.len + strlen(text) + 1 > BATCH_BYTES)
        rc = ch_flush(r);
    if (!rc && (buf_puts(&r->batch, text) || buf_puts(&r->batch, "\n")))
        rc = fail(r, "out of memory");
    free(text);
    if (rc)
        return rc;
    if (++r->batch_n == BATCH_EVENTS)
        return ch_flush(r);
    return 0;
}

/* ---- Sinks ---- */

static int sink_open(struct replay *r)
{
    switch (r->o->sink) {
    case SINK_NATS:
        return nats_open(r);
    case SINK_BROKER:
        return client_open(r, r->o->sink_arg, g_key, &r->out);
    case SINK_CLICKHOUSE:
        return ch_open(r);
    case SINK_JSON:
        return file_open(r);
    case SINK_NONE:
        break;
    }
    return 0;
}

static int sink_put(struct replay *r, struct event *ev)
{
    switch (r->o->sink) {
    case SINK_NATS:
        return nats_put(r, ev);
    case SINK_BROKER:
        return broker_put(r, ev);
    case SINK_JSON:
        return file_put(r, ev);
    case SINK_CLICKHOUSE:
        return ch_put(r, ev);
    case SINK_NONE:
        break;
    }
    return 0;
}

/* Flush what is batched and commit (the JSON file's rename). */
static int sink_finish(struct replay *r)
{
    switch (r->o->sink) {
    case SINK_BROKER:
        return broker_flush(r);
    case SINK_CLICKHOUSE:
        return ch_flush(r);
    case SINK_JSON:
        return file_finish(r);
    case SINK_NATS:
    case SINK_NONE:
        break;
    }
    return 0;
}

static void sink_close(struct replay *r)
{
    nats_close(r);
    file_close(r);
    for (int i = 0; i < r->batch_n; i++)
        json_decref(r->events[i]); /* NULL for ClickHouse rows */
    r->batch_n = 0;
    mic_client_free(r->out);
    r->out = NULL;
    mic_buf_fini(&r->batch);
    free(r->insert_path);
    r->insert_path = NULL;
}

/* ---- Options ---- */

static void usage(FILE *f)
{
    fputs(
"usage: " PROG " SOURCE --topic T [--from RFC3339] [--to RFC3339] [SINK]\n"
"                         [--batch-id ID] [--quiet] [--key SECRET] [--cacert FILE]\n"
"\n"
"Replays one topic's events with from <= created_at <= to (both inclusive;\n"
"defaults: the whole history) in (created_at, event_id) order.\n"
"\n"
"SOURCE (one of):\n"
"  --from-broker URL        micd's range read (NDJSON stream)\n"
"  --from-json FILE         an NDJSON archive (filtered, sorted if needed)\n"
"  --from-clickhouse URL    a ClickHouse archive table (--clickhouse-table)\n"
"SINK (at most one; none = dry run):\n"
"  --to-nats URL --nats-stream S   JetStream; subject = the event's topic.  Stream S\n"
"                                  must exist and take that subject (else nothing is\n"
"                                  sent, and the error says how to make it, e.g.\n"
"                                  nats stream add S --subjects TOPIC --defaults)\n"
"  --to-broker URL --to-topic T    republish with event_id BATCH:ID\n"
"  --to-json FILE                  write an NDJSON archive\n"
"  --to-clickhouse URL             insert into a ClickHouse archive table\n"
"  --clickhouse-table T            table of --from/--to-clickhouse (" DEFAULT_TABLE ")\n"
"OTHER:\n"
"  --batch-id ID            x-replay-batch-id, [A-Za-z0-9._-]{1,48}; reuse the\n"
"                           id of a failed run to retry it (default: new random)\n"
"  --quiet                  no batch id and no progress on stderr\n"
"  --key SECRET             API key for --from-broker/--to-broker (default\n"
"                           $MIC_KEY; never sent to ClickHouse)\n"
"  --cacert FILE            PEM CA certificate(s) for https:// servers\n"
"\n"
"Every publication carries x-replay: true, x-replay-batch-id and\n"
"x-original-event-id (NATS also Nats-Msg-Id: BATCH:ID).\n"
"On success stdout gets one JSON object:\n"
"  {\"batch_id\",\"source\",\"sink\",\"topic\",\"from\",\"to\",\"read\",\"selected\",\n"
"   \"published\",\"duplicates\",\"skipped\",\"digest\",\"first\",\"last\"}\n"
"(digest: SHA-256 hex over \"created_at<TAB>event_id<LF>\" per selected event;\n"
"first/last: {\"created_at\",\"event_id\"} or null).\n"
"Exit status: 0 done, 1 source or publication error (one line on stderr;\n"
"a retry may redeliver the prefix), 2 usage error.\n", f);
}

enum {
    OPT_FROM_BROKER = 256, OPT_FROM_JSON, OPT_FROM_CH, OPT_TABLE, OPT_TOPIC,
    OPT_FROM, OPT_TO, OPT_TO_NATS, OPT_STREAM, OPT_TO_BROKER, OPT_TO_TOPIC,
    OPT_TO_JSON, OPT_TO_CH, OPT_BATCH, OPT_QUIET, OPT_HELP, OPT_KEY, OPT_CACERT,
};

static const struct option long_opts[] = {
    {"from-broker", required_argument, NULL, OPT_FROM_BROKER},
    {"from-json", required_argument, NULL, OPT_FROM_JSON},
    {"from-clickhouse", required_argument, NULL, OPT_FROM_CH},
    {"clickhouse-table", required_argument, NULL, OPT_TABLE},
    {"topic", required_argument, NULL, OPT_TOPIC},
    {"from", required_argument, NULL, OPT_FROM},
    {"to", required_argument, NULL, OPT_TO},
    {"to-nats", required_argument, NULL, OPT_TO_NATS},
    {"nats-stream", required_argument, NULL, OPT_STREAM},
    {"to-broker", required_argument, NULL, OPT_TO_BROKER},
    {"to-topic", required_argument, NULL, OPT_TO_TOPIC},
    {"to-json", required_argument, NULL, OPT_TO_JSON},
    {"to-clickhouse", required_argument, NULL, OPT_TO_CH},
    {"batch-id", required_argument, NULL, OPT_BATCH},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"key", required_argument, NULL, OPT_KEY},
    {"cacert", required_argument, NULL, OPT_CACERT},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

static int set_once(const char **slot, const char *v, const char *name)
{
    if (*slot)
        return usage_error("--%s given twice", name);
    *slot = v;
    return 0;
}

/* Parse argv into 'o'.  Returns 0, EXIT_USAGE (message printed), or -1
 * after --help. */
static int opts_parse(struct opts *o, int argc, char **argv)
{
    const char *from = NULL, *to = NULL, *batch = NULL;
    int c, idx;

    memset(o, 0, sizeof *o);
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", long_opts, &idx)) != -1) {
        int rc = 0;

        switch (c) {
        case OPT_FROM_BROKER:
        case OPT_FROM_JSON:
        case OPT_FROM_CH:
            if (o->src)
                return usage_error("give exactly one source");
            o->src = c == OPT_FROM_BROKER ? SRC_BROKER : c == OPT_FROM_JSON ? SRC_JSON
                                                                            : SRC_CLICKHOUSE;
            o->src_arg = optarg;
            break;
        case OPT_TO_NATS:
        case OPT_TO_BROKER:
        case OPT_TO_JSON:
        case OPT_TO_CH:
            if (o->sink)
                return usage_error("give at most one sink");
            o->sink = c == OPT_TO_NATS ? SINK_NATS : c == OPT_TO_BROKER ? SINK_BROKER
                      : c == OPT_TO_JSON ? SINK_JSON : SINK_CLICKHOUSE;
            o->sink_arg = optarg;
            break;
        case OPT_TABLE:
            rc = set_once(&o->table, optarg, "clickhouse-table");
            break;
        case OPT_TOPIC:
            rc = set_once(&o->topic, optarg, "topic");
            break;
        case OPT_FROM:
            rc = set_once(&from, optarg, "from");
            break;
        case OPT_TO:
            rc = set_once(&to, optarg, "to");
            break;
        case OPT_STREAM:
            rc = set_once(&o->nats_stream, optarg, "nats-stream");
            break;
        case OPT_TO_TOPIC:
            rc = set_once(&o->to_topic, optarg, "to-topic");
            break;
        case OPT_BATCH:
            rc = set_once(&batch, optarg, "batch-id");
            break;
        case OPT_QUIET:
            o->quiet = 1;
            break;
        case OPT_KEY:
            rc = set_once(&g_key, optarg, "key");
            break;
        case OPT_CACERT:
            rc = set_once(&g_cacert, optarg, "cacert");
            break;
        case OPT_HELP:
            usage(stdout);
            return -1;
        default:
            return usage_error("unknown or incomplete option %s",
                               optind > 0 && optind <= argc ? argv[optind - 1] : "?");
        }
        if (rc)
            return rc;
    }
    if (optind < argc)
        return usage_error("unexpected argument %s", argv[optind]);
    if (!o->src)
        return usage_error("give a source: --from-broker, --from-json or --from-clickhouse");
    if (!g_key && getenv("MIC_KEY") && *getenv("MIC_KEY"))
        g_key = getenv("MIC_KEY");
    if (!*o->src_arg || (o->sink && !*o->sink_arg))
        return usage_error("empty URL or file name");
    if (!o->topic || !name_ok(o->topic, TOPIC_MAX, 1))
        return usage_error("--topic T is required, T matching [A-Za-z0-9._:-]{1,200}");
    if ((o->sink == SINK_NATS) != (o->nats_stream != NULL))
        return usage_error("--to-nats and --nats-stream go together");
    if ((o->sink == SINK_BROKER) != (o->to_topic != NULL))
        return usage_error("--to-broker and --to-topic go together");
    if (o->to_topic && !name_ok(o->to_topic, TOPIC_MAX, 1))
        return usage_error("--to-topic must match [A-Za-z0-9._:-]{1,200}");
    /* Republishing into the topic being streamed would read its own
     * output back (the new events share the old created_at). */
    if (o->src == SRC_BROKER && o->to_topic && !strcmp(o->to_topic, o->topic))
        return usage_error("--to-topic must differ from --topic when reading from a broker");
    if (o->table && o->src != SRC_CLICKHOUSE && o->sink != SINK_CLICKHOUSE)
        return usage_error("--clickhouse-table needs --from-clickhouse or --to-clickhouse");
    if (!o->table)
        o->table = DEFAULT_TABLE;
    if (!table_ok(o->table))
        return usage_error("--clickhouse-table must be [db.]name with [A-Za-z0-9_]");
    if (o->src == SRC_CLICKHOUSE && o->sink == SINK_CLICKHOUSE &&
        !strcmp(o->src_arg, o->sink_arg))
        return usage_error("--from-clickhouse and --to-clickhouse name the same table");
    if (o->src == SRC_JSON && o->sink == SINK_JSON && !strcmp(o->src_arg, o->sink_arg))
        return usage_error("--from-json and --to-json name the same file");
    o->from_us = 0;
    o->to_us = MAX_US - 1;
    if (from && time_parse(from, strlen(from), &o->from_us))
        return usage_error("--from %s is not an RFC 3339 time (at most 6 fractional digits)", from);
    if (to && time_parse(to, strlen(to), &o->to_us))
        return usage_error("--to %s is not an RFC 3339 time (at most 6 fractional digits)", to);
    if (o->from_us > o->to_us)
        return usage_error("--from is after --to");
    time_format(o->from_us, o->from);
    time_format(o->to_us, o->to);
    if (batch) {
        if (!name_ok(batch, BATCH_ID_MAX, 0))
            return usage_error("--batch-id must match [A-Za-z0-9._-]{1,48}");
        snprintf(o->batch, sizeof o->batch, "%s", batch);
    } else {
        unsigned char rnd[8];
        char hx[17];

        if (RAND_bytes(rnd, sizeof rnd) != 1) {
            fprintf(stderr, PROG ": no randomness for a batch id\n");
            return EXIT_FAIL;
        }
        hex(rnd, sizeof rnd, hx);
        snprintf(o->batch, sizeof o->batch, "replay-%s", hx);
    }
    return 0;
}

/* ---- Main ---- */

static int summary(const struct replay *r, const char *digest)
{
    const struct opts *o = r->o;
    json_t *first = r->selected ? json_pack("{s:s, s:s}", "created_at", r->first_at,
                                            "event_id", r->first_id) : json_null();
    json_t *last = r->selected ? json_pack("{s:s, s:s}", "created_at", r->last_at,
                                           "event_id", r->last_id) : json_null();
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:s, s:o, s:o}",
                          "batch_id", o->batch, "source", source_names[o->src],
                          "sink", sink_names[o->sink], "topic", o->topic,
                          "from", o->from, "to", o->to,
                          "read", (json_int_t)r->read, "selected", (json_int_t)r->selected,
                          "published", (json_int_t)r->published,
                          "duplicates", (json_int_t)r->duplicates,
                          "skipped", (json_int_t)r->skipped, "digest", digest,
                          "first", first, "last", last);
    int rc;

    if (!j)
        return -1;
    rc = json_dumpf(j, stdout, JSON_COMPACT);
    json_decref(j);
    if (rc || putchar('\n') == EOF || fflush(stdout))
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    struct replay r;
    struct opts o;
    unsigned char md[32];
    unsigned int mdlen = 0;
    char digest[65];
    int rc, status = EXIT_FAIL;

    if ((rc = opts_parse(&o, argc, argv)))
        return rc < 0 ? 0 : rc;
    memset(&r, 0, sizeof r);
    r.o = &o;
    r.tty = !o.quiet && isatty(STDERR_FILENO);
    if (!(r.sha = EVP_MD_CTX_new()) || !EVP_DigestInit_ex(r.sha, EVP_sha256(), NULL)) {
        fprintf(stderr, PROG ": cannot initialise SHA-256\n");
        EVP_MD_CTX_free(r.sha);
        return EXIT_FAIL;
    }
    if (!o.quiet)
        fprintf(stderr, PROG ": batch id %s\n", o.batch);
    if (sink_open(&r))
        goto out_sink;
    switch (o.src) {
    case SRC_BROKER:
        rc = source_broker(&r);
        break;
    case SRC_JSON:
        rc = source_json(&r);
        break;
    case SRC_CLICKHOUSE:
    default:
        rc = source_clickhouse(&r);
        break;
    }
    if (rc || sink_finish(&r))
        goto out_sink;
    if (!EVP_DigestFinal_ex(r.sha, md, &mdlen)) {
        fail(&r, "SHA-256 failed");
        goto out_sink;
    }
    hex(md, mdlen, digest);
    progress(&r, 1);
    if (summary(&r, digest)) {
        fail(&r, "cannot write the summary to stdout");
        goto out_sink;
    }
    status = 0;
out_sink:
    sink_close(&r);
    /* Wait for libnats's own threads: exiting while one of them still
     * tears down a connection the server closed crashed the process
     * (test_replay_tool's nats_killed_mid_batch, once in about eight runs here). */
    if (o.sink == SINK_NATS)
        nats_CloseAndWait(5000);
    if (status) {
        if (r.tty)
            fputc('\n', stderr);
        fprintf(stderr, PROG ": %s (batch %s: %llu of %llu selected events delivered "
                "before the error; retry with --batch-id %s)\n",
                r.err[0] ? r.err : "failed", o.batch,
                (unsigned long long)(r.published + r.duplicates),
                (unsigned long long)r.selected, o.batch);
    }
    EVP_MD_CTX_free(r.sha);
    return status;
}
