/* libmic.c - the client handle, HTTP through libcurl, publish with retries
 * and routing, claims and settlement, the admin calls (see mic.h).
 *
 * DESIGN.  A handle holds one libcurl easy handle per node, made on first
 * use and kept, so each node's connection stays alive between requests
 * (curl_easy_reset keeps the connection cache).  Nothing here is shared
 * between handles except libcurl's global state, initialised once.  Every
 * request goes through one function (perform), which is where the API key,
 * the CA file, the timeouts, the stop flag and the answer's headers are
 * handled; every JSON call goes through call().  mic_response_failure is
 * the one place an error answer becomes a struct mic_failure (libmic's
 * calls and the mic CLI read errors through it), and call() keeps each
 * answer on the handle (mic_client_answer) so that a caller can show it
 * as it came.
 *
 * Publish retries keep the body as built, so every event keeps its
 * event_id: a retry after a lost answer is reported by micd as a duplicate,
 * never stored twice.  Only 429, 503 and "no answer" are retried; any other
 * answer is final. */
#define _GNU_SOURCE
#include "mic.h"
#include "core/buf.h"

#include <curl/curl.h>
#include <errno.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>

#define BATCH_MAX 1000

struct mic_client {
    size_t n;
    char **urls;
    uint64_t *salt;          /* per node: hash of its URL (rendezvous) */
    CURL **easy;             /* per node, lazily made */
    CURLM *multi;            /* drives every transfer (and keeps the
                              * connections alive between them) */
    char *key, *cafile, *ua;
    char *auth;              /* "Authorization: Bearer KEY" or NULL */
    long connect_ms, timeout_ms, retry_max_ms;
    int retries;
    atomic_int stop;
    struct mic_failure fail;
    struct mic_response last; /* mic_client_answer: the answer the last call
                               * read its result from (json always NULL) */
};

/* ---- Small things ---- */

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static void global_init(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void fail_clear(struct mic_failure *f)
{
    memset(f, 0, sizeof *f);
    f->node = -1;
    f->retry_after_ms = -1;
}

static void copy(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src ? src : "");
}

__attribute__((format(printf, 4, 5)))
static int failf(mic_client *c, enum mic_fail_kind kind, int node, const char *fmt, ...)
{
    va_list ap;

    fail_clear(&c->fail);
    c->fail.kind = kind;
    c->fail.node = node;
    va_start(ap, fmt);
    vsnprintf(c->fail.message, sizeof c->fail.message, fmt, ap);
    va_end(ap);
    return -1;
}

static int nomem(mic_client *c)
{
    return failf(c, MIC_FAIL_NOMEM, -1, "out of memory");
}

static int64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sleep 'ms' in slices, returning early (1) when the handle is stopped. */
static int nap(mic_client *c, long ms)
{
    int64_t end = mono_ms() + ms;

    while (!atomic_load(&c->stop)) {
        int64_t left = end - mono_ms();
        struct timespec ts;

        if (left <= 0)
            return 0;
        if (left > 50)
            left = 50;
        ts.tv_sec = 0;
        ts.tv_nsec = left * 1000000L;
        nanosleep(&ts, NULL);
    }
    return 1;
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

static uint64_t fnv(uint64_t h, const char *s)
{
    for (; s && *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}

char *mic_failure_text(const struct mic_failure *f, char *buf, size_t cap)
{
    if (f->kind == MIC_FAIL_SERVER && f->code[0]) {
        if (f->field[0])
            snprintf(buf, cap, "%ld %s: %s (field %s)", f->status, f->code, f->message, f->field);
        else
            snprintf(buf, cap, "%ld %s: %s", f->status, f->code, f->message);
    } else if (f->kind == MIC_FAIL_SERVER) {
        snprintf(buf, cap, "%ld %s", f->status, f->message);
    } else {
        snprintf(buf, cap, "%s", f->message[0] ? f->message : "no failure");
    }
    return buf;
}

/* ---- Handle ---- */

static int url_ok(const char *u)
{
    return u && (!strncmp(u, "http://", 7) || !strncmp(u, "https://", 8)) &&
           strlen(u) > 8 && strlen(u) < 1024;
}

int mic_client_new(const struct mic_client_opts *o, mic_client **out, struct mic_failure *err)
{
    mic_client *c;
    struct mic_failure tmp;

    *out = NULL;
    if (!err)
        err = &tmp;
    fail_clear(err);
    if (!o || o->nurls < 1 || o->nurls > MIC_NODES_MAX || !o->urls) {
        err->kind = MIC_FAIL_ARG;
        snprintf(err->message, sizeof err->message, "give 1 to %d micd URLs", MIC_NODES_MAX);
        return -1;
    }
    for (size_t i = 0; i < o->nurls; i++)
        if (!url_ok(o->urls[i])) {
            err->kind = MIC_FAIL_ARG;
            snprintf(err->message, sizeof err->message,
                     "not a micd URL (http://HOST:PORT or https://HOST:PORT): %.400s",
                     o->urls[i] ? o->urls[i] : "(null)");
            return -1;
        }
    pthread_once(&global_once, global_init);
    if (!(c = calloc(1, sizeof *c)))
        goto oom;
    c->n = o->nurls;
    if (!(c->urls = calloc(c->n, sizeof *c->urls)) || !(c->salt = calloc(c->n, sizeof *c->salt)) ||
        !(c->easy = calloc(c->n, sizeof *c->easy)))
        goto oom;
    for (size_t i = 0; i < c->n; i++) {
        size_t len = strlen(o->urls[i]);

        if (!(c->urls[i] = strdup(o->urls[i])))
            goto oom;
        while (len > 0 && c->urls[i][len - 1] == '/')
            c->urls[i][--len] = 0;
        c->salt[i] = mix64(fnv(0xcbf29ce484222325ULL, c->urls[i]));
    }
    if ((o->key && !(c->key = strdup(o->key))) || (o->cafile && !(c->cafile = strdup(o->cafile))) ||
        !(c->ua = strdup(o->user_agent ? o->user_agent : "libmic/1")))
        goto oom;
    if (c->key && asprintf(&c->auth, "Authorization: Bearer %s", c->key) < 0) {
        c->auth = NULL;
        goto oom;
    }
    c->connect_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 5000;
    c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 30000;
    c->retries = o->retries == 0 ? 5 : o->retries < 0 ? 0 : o->retries;
    c->retry_max_ms = o->retry_max_ms > 0 ? o->retry_max_ms : 5000;
    fail_clear(&c->fail);
    *out = c;
    return 0;
oom:
    mic_client_free(c);
    err->kind = MIC_FAIL_NOMEM;
    snprintf(err->message, sizeof err->message, "out of memory");
    return -1;
}

int mic_client_dup(const mic_client *c, mic_client **out)
{
    struct mic_client_opts o = {
        .urls = (const char *const *)c->urls, .nurls = c->n, .key = c->key, .cafile = c->cafile,
        .connect_timeout_ms = c->connect_ms, .timeout_ms = c->timeout_ms,
        .retries = c->retries ? c->retries : -1, .retry_max_ms = c->retry_max_ms,
        .user_agent = c->ua,
    };

    return mic_client_new(&o, out, NULL);
}

void mic_client_free(mic_client *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n; i++) {
        if (c->easy && c->easy[i])
            curl_easy_cleanup(c->easy[i]);
        if (c->urls)
            free(c->urls[i]);
    }
    curl_multi_cleanup(c->multi);   /* no easy handle is attached any more */
    mic_response_fini(&c->last);
    free(c->easy);
    free(c->urls);
    free(c->salt);
    free(c->key);
    free(c->cafile);
    free(c->ua);
    free(c->auth);
    free(c);
}

const struct mic_failure *mic_client_failure(const mic_client *c)
{
    return &c->fail;
}

size_t mic_client_nodes(const mic_client *c)
{
    return c->n;
}

const char *mic_client_url(const mic_client *c, size_t node)
{
    return node < c->n ? c->urls[node] : NULL;
}

size_t mic_client_route(const mic_client *c, const char *agg_type, const char *agg_id,
                        const char *event_id)
{
    uint64_t k, best = 0;
    size_t node = 0;

    if (c->n == 1)
        return 0;
    if (agg_type && agg_id)
        k = fnv(fnv(fnv(fnv(0xcbf29ce484222325ULL, "a\x1f"), agg_type), "\x1f"), agg_id);
    else
        k = fnv(fnv(0xcbf29ce484222325ULL, "e\x1f"), event_id ? event_id : "");
    for (size_t i = 0; i < c->n; i++) {
        uint64_t w = mix64(k ^ c->salt[i]);

        if (i == 0 || w > best) {
            best = w;
            node = i;
        }
    }
    return node;
}

void mic_client_stop(mic_client *c)
{
    atomic_store(&c->stop, 1);
}

void mic_client_resume(mic_client *c)
{
    atomic_store(&c->stop, 0);
}

/* A byte that stays as it is in a path segment or query value. */
static int plain(unsigned char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
           ch == '-' || ch == '.' || ch == '_' || ch == '~' || ch == ':';
}

static const char hexu[] = "0123456789ABCDEF";

char *mic_path_escape(const char *s, char *buf, size_t cap)
{
    size_t o = 0;

    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;

        if (o + (plain(ch) ? 1 : 3) >= cap)
            return NULL;
        if (plain(ch)) {
            buf[o++] = (char)ch;
        } else {
            buf[o++] = '%';
            buf[o++] = hexu[ch >> 4];
            buf[o++] = hexu[ch & 15];
        }
    }
    if (o >= cap)
        return NULL;
    buf[o] = 0;
    return buf;
}

/* ---- Paths ----
 * Built on the heap, so a name of any length reaches micd (which judges
 * it); each returns the path (free() it) or NULL after failure NOMEM. */

/* Append 's' percent-encoded as mic_path_escape does. */
static void buf_escape(struct mic_buf *b, const char *s)
{
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        char e[3] = {'%', hexu[ch >> 4], hexu[ch & 15]};

        if (plain(ch))
            mic_buf_add(b, s, 1);
        else
            mic_buf_add(b, e, 3);
    }
}

/* Append "?k=v", or "&k=v" after the first, 'v' escaped. */
static void buf_query(struct mic_buf *b, const char *k, const char *v)
{
    mic_buf_puts(b, b->p && strchr(b->p, '?') ? "&" : "?");
    mic_buf_puts(b, k);
    mic_buf_add(b, "=", 1);
    buf_escape(b, v);
}

/* The path in 'b' handed over, or NULL (failure NOMEM) when it ran out of
 * memory. */
static char *path_done(mic_client *c, struct mic_buf *b)
{
    size_t len;

    if (b->oom || !b->p) {
        mic_buf_fini(b);
        nomem(c);
        return NULL;
    }
    return mic_buf_steal(b, &len);
}

/* "/v1/<kind>/<name escaped><tail>" ('tail' may be NULL). */
static char *path_of(mic_client *c, const char *kind, const char *name, const char *tail)
{
    struct mic_buf b = {0};

    mic_buf_puts(&b, "/v1/");
    mic_buf_puts(&b, kind);
    mic_buf_add(&b, "/", 1);
    buf_escape(&b, name ? name : "");
    if (tail)
        mic_buf_puts(&b, tail);
    return path_done(c, &b);
}

/* "/v1/aggregates/<type>/<id><tail>", both escaped. */
static char *agg_path(mic_client *c, const char *type, const char *id, const char *tail)
{
    struct mic_buf b = {0};

    mic_buf_puts(&b, "/v1/aggregates/");
    buf_escape(&b, type ? type : "");
    mic_buf_add(&b, "/", 1);
    buf_escape(&b, id ? id : "");
    if (tail)
        mic_buf_puts(&b, tail);
    return path_done(c, &b);
}

/* ---- HTTP ---- */

struct sink {
    struct mic_buf b;      /* the body (server/core/buf.c, linked into libmic) */
    /* streaming */
    CURL *easy;
    int (*fn)(const char *p, size_t n, void *arg);
    void *arg;
    int stopped_by_fn;
    struct mic_response *r;
};

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    struct sink *s = arg;
    size_t len = size * n;

    if (s->fn) {
        long st = 0;

        curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &st);
        if (st >= 200 && st <= 299) {
            if (s->fn(p, len, s->arg)) {
                s->stopped_by_fn = 1;
                return 0;
            }
            return len;
        }
    }
    mic_buf_add(&s->b, p, len);
    return s->b.oom ? 0 : len;
}

static void header_value(const char *line, size_t len, const char *name, char *out, size_t cap)
{
    size_t nl = strlen(name);

    if (len <= nl || strncasecmp(line, name, nl) || line[nl] != ':')
        return;
    line += nl + 1;
    len -= nl + 1;
    while (len && (*line == ' ' || *line == '\t'))
        line++, len--;
    while (len && (line[len - 1] == '\r' || line[len - 1] == '\n' || line[len - 1] == ' '))
        len--;
    if (len >= cap)
        len = cap - 1;
    memcpy(out, line, len);
    out[len] = 0;
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
    struct mic_response *r = ((struct sink *)arg)->r;
    size_t len = size * n;

    if (len >= 5 && !strncmp(p, "HTTP/", 5)) { /* a new answer (after 100, a redirect) */
        r->request_id[0] = r->retry_after[0] = r->content_type[0] = r->www_authenticate[0] = 0;
        return len;
    }
    header_value(p, len, "X-Request-Id", r->request_id, sizeof r->request_id);
    header_value(p, len, "Retry-After", r->retry_after, sizeof r->retry_after);
    header_value(p, len, "Content-Type", r->content_type, sizeof r->content_type);
    header_value(p, len, "WWW-Authenticate", r->www_authenticate, sizeof r->www_authenticate);
    return len;
}

static int on_progress(void *arg, curl_off_t a, curl_off_t b, curl_off_t c2, curl_off_t d)
{
    (void)a, (void)b, (void)c2, (void)d;
    return atomic_load(&((mic_client *)arg)->stop) ? 1 : 0;
}

/* mic_client_answer's answer: none, or 'r' taken over (*r is left empty;
 * its parsed value is dropped, the caller has its own). */
static void answer_clear(mic_client *c)
{
    mic_response_fini(&c->last);
    memset(&c->last, 0, sizeof c->last);
}

static void answer_keep(mic_client *c, struct mic_response *r)
{
    answer_clear(c);
    c->last = *r;
    json_decref(c->last.json);
    c->last.json = NULL;
    memset(r, 0, sizeof *r);
}

const struct mic_response *mic_client_answer(const mic_client *c)
{
    return &c->last;
}

/* Stop latency: a transfer waiting for its answer looks at the stop flag
 * at least this often (libcurl's progress callback alone runs about once
 * a second while nothing arrives). */
#define STOP_POLL_MS 50

/* Run the transfer of 'e' on the handle's multi handle, waking every
 * STOP_POLL_MS to honour mic_client_stop.  Returns libcurl's result;
 * CURLE_ABORTED_BY_CALLBACK when stopped. */
static CURLcode drive(mic_client *c, CURL *e)
{
    CURLcode cc = CURLE_OK;
    CURLMsg *m;
    int running = 1, left;

    if (!c->multi && !(c->multi = curl_multi_init()))
        return CURLE_OUT_OF_MEMORY;
    if (curl_multi_add_handle(c->multi, e) != CURLM_OK)
        return CURLE_OUT_OF_MEMORY;
    while (running) {
        if (curl_multi_perform(c->multi, &running) != CURLM_OK) {
            cc = CURLE_OUT_OF_MEMORY;
            break;
        }
        if (!running)
            break;
        if (atomic_load(&c->stop)) {
            cc = CURLE_ABORTED_BY_CALLBACK;
            break;
        }
        if (curl_multi_poll(c->multi, NULL, 0, STOP_POLL_MS, NULL) != CURLM_OK) {
            cc = CURLE_OUT_OF_MEMORY;
            break;
        }
    }
    while (cc == CURLE_OK && (m = curl_multi_info_read(c->multi, &left)))
        if (m->msg == CURLMSG_DONE && m->easy_handle == e)
            cc = m->data.result;
    curl_multi_remove_handle(c->multi, e);
    return cc;
}

/* The one place a request is made.  'extra_ms' lengthens the timeout (a
 * long-poll's wait).  'fn' streams a 2xx body. */
static int perform(mic_client *c, size_t node, const char *method, const char *path,
                   const char *ctype, const void *body, size_t len, const char *const *headers,
                   long extra_ms, struct mic_response *r,
                   int (*fn)(const char *, size_t, void *), void *fnarg)
{
    char errbuf[CURL_ERROR_SIZE] = "", ct[128], *url = NULL;
    struct curl_slist *h = NULL, *h2;
    struct sink s = {0};   /* an empty mic_buf is all zeros */
    CURL *e;
    CURLcode cc;
    long oserr = 0;
    int rc = -1;

    memset(r, 0, sizeof *r);
    answer_clear(c);
    if (node >= c->n)
        return failf(c, MIC_FAIL_ARG, -1, "no node %zu (the handle has %zu)", node, c->n);
    if (!c->easy[node] && !(c->easy[node] = curl_easy_init()))
        return nomem(c);
    e = c->easy[node];
    if (asprintf(&url, "%s%s", c->urls[node], path) < 0)
        return nomem(c);
    if (!(h = curl_slist_append(NULL, "Expect:")))
        goto oom;
    /* "Content-Type:" alone keeps libcurl from adding its form type */
    snprintf(ct, sizeof ct, "Content-Type:%s%s", ctype ? " " : "", ctype ? ctype : "");
    if (!(h2 = curl_slist_append(h, ct)))
        goto oom;
    if (c->auth && !(h2 = curl_slist_append(h, c->auth)))
        goto oom;
    for (size_t i = 0; headers && headers[i]; i++)
        if (!(h2 = curl_slist_append(h, headers[i])))
            goto oom;
    curl_easy_reset(e);
    s.easy = e;
    s.fn = fn;
    s.arg = fnarg;
    s.r = r;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    if (c->cafile)
        curl_easy_setopt(e, CURLOPT_CAINFO, c->cafile);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, c->connect_ms);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, fn ? 0L : c->timeout_ms + extra_ms);
    curl_easy_setopt(e, CURLOPT_USERAGENT, c->ua);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, &s);
    curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(e, CURLOPT_XFERINFODATA, c);
    if (!strcmp(method, "HEAD"))
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    else if (strcmp(method, "GET") || body)
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method); /* a GET with a body stays a GET */
    if (body) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    } else if (!strcmp(method, "POST") || !strcmp(method, "PUT")) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)0);
    }
    cc = drive(c, e);
    if (s.b.oom)
        goto oom;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &r->status);
    if (cc == CURLE_WRITE_ERROR && s.stopped_by_fn) {
        failf(c, MIC_FAIL_STOPPED, (int)node, "stopped by the caller");
        goto out;
    }
    if (cc == CURLE_ABORTED_BY_CALLBACK) {
        failf(c, MIC_FAIL_STOPPED, (int)node, "stopped (mic_client_stop)");
        r->status = 0;
        goto out;
    }
    if (cc != CURLE_OK) {
        curl_easy_getinfo(e, CURLINFO_OS_ERRNO, &oserr);
        failf(c, MIC_FAIL_CONNECT, (int)node, "cannot reach %s: %s", c->urls[node],
              oserr ? strerror((int)oserr) : errbuf[0] ? errbuf : curl_easy_strerror(cc));
        r->status = 0;
        goto out;
    }
    mic_buf_add_slow(&s.b, "", 0); /* an empty body is "" */
    if (s.b.oom)
        goto oom;
    r->body = mic_buf_steal(&s.b, &r->len);
    if (r->len && (r->body[0] == '{' || r->body[0] == '['))
        r->json = json_loadb(r->body, r->len, 0, NULL);
    fail_clear(&c->fail);
    rc = 0;
    goto out;
oom:
    nomem(c);
out:
    mic_buf_fini(&s.b);
    curl_slist_free_all(h);
    free(url);
    return rc;
}

int mic_request(mic_client *c, size_t node, const char *method, const char *path,
                const char *ctype, const void *body, size_t len, const char *const *headers,
                struct mic_response *r)
{
    return perform(c, node, method, path, ctype, body, len, headers, 0, r, NULL, NULL);
}

void mic_response_fini(struct mic_response *r)
{
    free(r->body);
    json_decref(r->json);
    r->body = NULL;
    r->json = NULL;
    r->len = 0;
}

int mic_response_failure(const struct mic_response *r, int node, struct mic_failure *f)
{
    json_t *e = json_object_get(r->json, "error");
    const char *code = json_string_value(json_object_get(e, "code"));

    fail_clear(f);
    if (r->status >= 200 && r->status <= 299)
        return 0;
    f->kind = MIC_FAIL_SERVER;
    f->status = r->status;
    f->node = node;
    if (code) {
        copy(f->code, sizeof f->code, code);
        copy(f->message, sizeof f->message, json_string_value(json_object_get(e, "message")));
        copy(f->field, sizeof f->field, json_string_value(json_object_get(e, "field")));
    } else if (r->len) {
        size_t n = strcspn(r->body, "\r\n");

        snprintf(f->message, sizeof f->message, "%.*s", (int)(n > 300 ? 300 : n), r->body);
    } else {
        snprintf(f->message, sizeof f->message, "(no body)");
    }
    if (r->retry_after[0])
        f->retry_after_ms = strtol(r->retry_after, NULL, 10) * 1000;
    return 1;
}

/* Turn a non-2xx answer into the handle's failure; returns -1. */
static int server_failure(mic_client *c, size_t node, const struct mic_response *r)
{
    mic_response_failure(r, (int)node, &c->fail);
    return -1;
}

/* A JSON call with 'extra_ms' more time; *out the 2xx body. */
static int call(mic_client *c, size_t node, const char *method, const char *path, json_t *body,
                long extra_ms, json_t **out)
{
    struct mic_response r;
    char *txt = NULL;
    int rc;

    if (out)
        *out = NULL;
    if (body && !(txt = json_dumps(body, JSON_COMPACT)))
        return nomem(c);
    rc = perform(c, node, method, path, body ? "application/json" : NULL, txt,
                 txt ? strlen(txt) : 0, NULL, extra_ms, &r, NULL, NULL);
    free(txt);
    if (rc)
        return -1;
    if (r.status < 200 || r.status > 299) {
        server_failure(c, node, &r);
        answer_keep(c, &r);
        return -1;
    }
    if (r.len && !r.json) {
        failf(c, MIC_FAIL_PROTO, (int)node, "%s %s answered %ld with a body that is not JSON",
              method, path, r.status);
        c->fail.status = r.status;
        answer_keep(c, &r);
        return -1;
    }
    if (out) {
        *out = r.json;
        r.json = NULL;
    }
    answer_keep(c, &r);
    return 0;
}

int mic_call(mic_client *c, size_t node, const char *method, const char *path, json_t *body,
             json_t **out)
{
    return call(c, node, method, path, body, 0, out);
}

int mic_stream(mic_client *c, size_t node, const char *path, const char *accept,
               int (*fn)(const char *p, size_t n, void *arg), void *arg)
{
    char hdr[160];
    const char *h[] = {hdr, NULL};

    snprintf(hdr, sizeof hdr, "Accept: %s", accept ? accept : "application/json");
    return mic_stream_request(c, node, "GET", path, NULL, NULL, 0, h, fn, arg);
}

int mic_stream_request(mic_client *c, size_t node, const char *method, const char *path,
                       const char *ctype, const void *body, size_t len,
                       const char *const *headers,
                       int (*fn)(const char *p, size_t n, void *arg), void *arg)
{
    struct mic_response r;
    int rc = perform(c, node, method, path, ctype, body, len, headers, 0, &r, fn, arg);

    if (!rc && (r.status < 200 || r.status > 299)) {
        server_failure(c, node, &r);
        rc = -1;
    }
    mic_response_fini(&r);
    return rc;
}

/* ---- Publish ---- */

int mic_event_id_new(char out[33])
{
    static const char hexd[] = "0123456789abcdef";
    unsigned char b[16];

    if (RAND_bytes(b, sizeof b) != 1)
        return -1;
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hexd[b[i] >> 4];
        out[2 * i + 1] = hexd[b[i] & 15];
    }
    out[32] = 0;
    return 0;
}

static int ensure_id(mic_client *c, json_t *ev)
{
    char id[33];

    if (!json_is_object(ev))
        return failf(c, MIC_FAIL_ARG, -1, "an event is a JSON object");
    if (json_object_get(ev, "event_id"))
        return 0;
    if (mic_event_id_new(id) || json_object_set_new(ev, "event_id", json_string(id)))
        return nomem(c);
    return 0;
}

static size_t route_event(const mic_client *c, json_t *ev)
{
    return mic_client_route(c, json_string_value(json_object_get(ev, "aggregate_type")),
                            json_string_value(json_object_get(ev, "aggregate_id")),
                            json_string_value(json_object_get(ev, "event_id")));
}

/* Full-jitter backoff for attempt k (0-based): uniform in [d/2, d] with
 * d = min(cap, 50 ms * 2^k). */
static long backoff_ms(const mic_client *c, int k)
{
    long d = 50L << (k > 16 ? 16 : k);
    unsigned r = 0;

    if (d > c->retry_max_ms)
        d = c->retry_max_ms;
    RAND_bytes((unsigned char *)&r, sizeof r);
    return d / 2 + (long)(r % (unsigned)(d / 2 + 1));
}

/* POST /v1/events with the JSON text 'txt' to 'node', retrying 429, 503
 * and no answer.  *out the 2xx body. */
static int post_events(mic_client *c, size_t node, const char *txt, json_t **out)
{
    for (int k = 0;; k++) {
        struct mic_response r;
        long wait;
        int rc = perform(c, node, "POST", "/v1/events", "application/json", txt, strlen(txt),
                         NULL, 0, &r, NULL, NULL);

        if (!rc && r.status >= 200 && r.status <= 299) {
            if (!r.json) {
                failf(c, MIC_FAIL_PROTO, (int)node, "publish answered %ld without JSON",
                      r.status);
                c->fail.status = r.status;
                answer_keep(c, &r);
                return -1;
            }
            *out = r.json;
            r.json = NULL;
            answer_keep(c, &r);
            return 0;
        }
        if (!rc)
            server_failure(c, node, &r);
        answer_keep(c, &r);
        if (c->fail.kind == MIC_FAIL_NOMEM || c->fail.kind == MIC_FAIL_STOPPED ||
            (c->fail.kind == MIC_FAIL_SERVER && c->fail.status != 429 && c->fail.status != 503) ||
            k >= c->retries)
            return -1;
        wait = backoff_ms(c, k);
        if (c->fail.status == 429 && c->fail.retry_after_ms >= 0)
            wait = c->fail.retry_after_ms > c->retry_max_ms ? c->retry_max_ms
                                                            : c->fail.retry_after_ms;
        if (nap(c, wait))
            return failf(c, MIC_FAIL_STOPPED, (int)node, "stopped (mic_client_stop)");
    }
}

static void result_fill(struct mic_publish_result *res, json_t *it, int node)
{
    memset(res, 0, sizeof *res);
    fail_clear(&res->fail);
    copy(res->event_id, sizeof res->event_id, json_string_value(json_object_get(it, "event_id")));
    res->seq = json_integer_value(json_object_get(it, "seq"));
    copy(res->created_at, sizeof res->created_at,
         json_string_value(json_object_get(it, "created_at")));
    res->duplicate = json_is_true(json_object_get(it, "duplicate"));
    res->node = node;
    res->ok = 1;
}

static void result_failed(struct mic_publish_result *res, json_t *ev, const struct mic_failure *f,
                          int node)
{
    memset(res, 0, sizeof *res);
    copy(res->event_id, sizeof res->event_id, json_string_value(json_object_get(ev, "event_id")));
    res->node = node;
    res->fail = *f;
}

/* Publish the events idx[0..n) of 'events' (all routed to 'node', n <=
 * BATCH_MAX) as one batch. */
static int publish_part(mic_client *c, size_t node, json_t *const *events, const size_t *idx,
                        size_t n, struct mic_publish_result *res)
{
    json_t *body = json_object(), *arr = json_array(), *ans = NULL, *results;
    char *txt = NULL;
    int rc = -1;

    if (!body || !arr || json_object_set(body, "events", arr)) {
        nomem(c);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        if (json_array_append(arr, events[idx[i]])) {
            nomem(c);
            goto out;
        }
    if (!(txt = json_dumps(body, JSON_COMPACT))) {
        nomem(c);
        goto out;
    }
    if (post_events(c, node, txt, &ans))
        goto out;
    results = json_object_get(ans, "results");
    if (json_array_size(results) != n) {
        failf(c, MIC_FAIL_PROTO, (int)node, "publish answered %zu results for %zu events",
              json_array_size(results), n);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        result_fill(&res[idx[i]], json_array_get(results, i), (int)node);
    rc = 0;
out:
    if (rc) {
        size_t k;
        int at = 0;

        /* micd's "events[k]..." counts in this part: name the caller's. */
        if (sscanf(c->fail.field, "events[%zu]%n", &k, &at) == 1 && at > 0 && k < n) {
            char f[sizeof c->fail.field + 24];
            size_t len = (size_t)snprintf(f, sizeof f, "events[%zu]%s", idx[k],
                                          c->fail.field + at);

            if (len < sizeof c->fail.field)
                memcpy(c->fail.field, f, len + 1);
        }
        for (size_t i = 0; i < n; i++)
            result_failed(&res[idx[i]], events[idx[i]], &c->fail, (int)node);
    }
    free(txt);
    json_decref(ans);
    json_decref(arr);
    json_decref(body);
    return rc;
}

int mic_publish_batch(mic_client *c, json_t *const *events, size_t n,
                      struct mic_publish_result *res)
{
    size_t *idx, *node_of;
    struct mic_failure first;
    int failed = 0, okay = 0;

    fail_clear(&first);
    if (n == 0)
        return failf(c, MIC_FAIL_ARG, -1, "a batch holds at least one event");
    for (size_t i = 0; i < n; i++)
        if (ensure_id(c, events[i]))
            return -1;
    if (!(idx = malloc(n * sizeof *idx)) || !(node_of = malloc(n * sizeof *node_of))) {
        free(idx);
        return nomem(c);
    }
    for (size_t i = 0; i < n; i++)
        node_of[i] = route_event(c, events[i]);
    for (size_t node = 0; node < c->n; node++) {
        size_t m = 0;

        for (size_t i = 0; i < n; i++)
            if (node_of[i] == node)
                idx[m++] = i;
        for (size_t off = 0; off < m; off += BATCH_MAX) {
            size_t part = m - off > BATCH_MAX ? BATCH_MAX : m - off;

            if (publish_part(c, node, events, idx + off, part, res)) {
                if (!failed++)
                    first = c->fail;
            } else {
                okay++;
            }
        }
    }
    free(idx);
    free(node_of);
    if (failed + okay > 1)
        answer_clear(c);   /* the result joins several answers */
    if (!failed) {
        fail_clear(&c->fail);
        return 0;
    }
    c->fail = first;
    if (okay) {
        c->fail.kind = MIC_FAIL_PARTIAL;
        snprintf(c->fail.message, sizeof c->fail.message,
                 "%d of %d node batches failed; each event's result says why", failed,
                 failed + okay);
    }
    return -1;
}

int mic_publish(mic_client *c, json_t *event, struct mic_publish_result *res)
{
    return mic_publish_batch(c, &event, 1, res);
}

/* ---- Claims and settlement ---- */

static const char *sval(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));

    return s ? s : "";
}

/* micd takes a lease TTL in whole seconds (1..43200): round up. */
static json_int_t ttl_seconds(double s)
{
    json_int_t t = (json_int_t)s;

    if ((double)t < s)
        t++;
    return t < 1 ? 1 : t > 43200 ? 43200 : t;
}

static int leased_fill(struct mic_leased *d, json_t *j, int node)
{
    json_t *ev = json_object_get(j, "event"), *v;

    memset(d, 0, sizeof *d);
    if (!json_is_object(ev) || !json_is_integer(json_object_get(j, "seq")))
        return -1;
    d->node = node;
    d->seq = json_integer_value(json_object_get(j, "seq"));
    copy(d->lease_token, sizeof d->lease_token, sval(j, "lease_token"));
    d->attempt = (int)json_integer_value(json_object_get(j, "attempt"));
    copy(d->lease_expires_at, sizeof d->lease_expires_at, sval(j, "lease_expires_at"));
    d->event = ev;
    d->replay = json_object_get(j, "replay");
    d->event_id = sval(ev, "event_id");
    d->topic = sval(ev, "topic");
    d->event_type = sval(ev, "event_type");
    d->aggregate_type = sval(ev, "aggregate_type");
    d->aggregate_id = sval(ev, "aggregate_id");
    d->aggregate_version = (uint64_t)json_integer_value(json_object_get(ev, "aggregate_version"));
    v = json_object_get(ev, "schema_version");
    d->schema_version = json_is_integer(v) ? (int)json_integer_value(v) : 1;
    d->effects_forbidden = d->replay && !strcmp(sval(d->replay, "effects"), "forbid");
    return 0;
}

/* POST the claim 'body' to node 'node' (a long-poll: 'wait_s' more
 * time) and fill *out from the answer. */
static int claim_do(mic_client *c, size_t node, const char *group, json_t *body, double wait_s,
                    struct mic_claimed *out)
{
    json_t *ans = NULL, *list;
    char *path = path_of(c, "groups", group, "/claim");
    int rc;

    if (!path)
        return -1;
    rc = call(c, node, "POST", path, body, (long)(wait_s * 1000) + 1000, &ans);
    free(path);
    if (rc)
        return -1;
    list = json_object_get(ans, "deliveries");
    if (!json_is_array(list)) {
        json_decref(ans);
        return failf(c, MIC_FAIL_PROTO, (int)node, "a claim answered without deliveries");
    }
    out->doc = ans;
    if (!json_array_size(list))
        return 0;
    if (!(out->v = calloc(json_array_size(list), sizeof *out->v))) {
        mic_claimed_fini(out);
        return nomem(c);
    }
    for (size_t i = 0; i < json_array_size(list); i++)
        if (leased_fill(&out->v[out->n++], json_array_get(list, i), (int)node)) {
            mic_claimed_fini(out);
            return failf(c, MIC_FAIL_PROTO, (int)node, "a delivery without seq or event");
        }
    return 0;
}

int mic_claim(mic_client *c, size_t node, const char *group, const struct mic_claim_opts *o,
              struct mic_claimed *out)
{
    json_t *body = json_object();
    double wait = o && o->wait_s > 0 ? o->wait_s : 0;
    int rc;

    memset(out, 0, sizeof *out);
    if (!body)
        return nomem(c);
    if (json_object_set_new(body, "max", json_integer(o && o->max > 0 ? o->max : 1)) ||
        (o && o->lease_ttl_s > 0 &&
         json_object_set_new(body, "lease_ttl_s", json_integer(ttl_seconds(o->lease_ttl_s)))) ||
        (wait > 0 && json_object_set_new(body, "wait_s", json_real(wait))) ||
        (o && o->worker && json_object_set_new(body, "worker", json_string(o->worker)))) {
        json_decref(body);
        return nomem(c);
    }
    rc = claim_do(c, node, group, body, wait, out);
    json_decref(body);
    return rc;
}

int mic_claim_json(mic_client *c, size_t node, const char *group, json_t *req,
                   struct mic_claimed *out)
{
    json_t *empty = NULL, *w = json_object_get(req, "wait_s");
    double wait = json_is_number(w) ? json_number_value(w) : 0;
    int rc;

    memset(out, 0, sizeof *out);
    if (req && !json_is_object(req))
        return failf(c, MIC_FAIL_ARG, -1, "a claim's request is a JSON object");
    if (!req && !(req = empty = json_object()))
        return nomem(c);
    /* micd refuses a wait outside 0..60 s; the timeout only needs room
     * for one it could take. */
    if (!(wait >= 0 && wait < 1e6))
        wait = 0;
    rc = claim_do(c, node, group, req, wait, out);
    json_decref(empty);
    return rc;
}

void mic_claimed_fini(struct mic_claimed *d)
{
    free(d->v);
    json_decref(d->doc);
    memset(d, 0, sizeof *d);
}

static const char *const status_names[] = {
    [MIC_ITEM_UNKNOWN] = "unknown", [MIC_ITEM_ACKED] = "acked",
    [MIC_ITEM_RETRYING] = "retrying", [MIC_ITEM_DEAD_LETTERED] = "dead_lettered",
    [MIC_ITEM_EXTENDED] = "extended", [MIC_ITEM_LEASE_LOST] = "lease_lost",
    [MIC_ITEM_NOT_FOUND] = "not_found",
};

const char *mic_item_status_name(enum mic_item_status s)
{
    return (unsigned)s < sizeof status_names / sizeof *status_names ? status_names[s] : "unknown";
}

static enum mic_item_status status_of(const char *s)
{
    for (size_t i = 1; s && i < sizeof status_names / sizeof *status_names; i++)
        if (!strcmp(s, status_names[i]))
            return (enum mic_item_status)i;
    return MIC_ITEM_UNKNOWN;
}

/* Settle items[0..n) of 'group': per node, requests of "deliveries" with
 * the members of 'fields' (may be NULL) beside them; 'split' cuts each
 * node's items into requests of BATCH_MAX, else one request a node. */
static int settle(mic_client *c, enum mic_settle_verb verb, const char *group,
                  const struct mic_leased *const *items, size_t n, json_t *fields, int split,
                  struct mic_item_result *res)
{
    static const char *const words[] = {"ack", "nack", "extend"};
    char tail[16], *path;
    size_t *idx;
    int failed = 0, requests = 0;
    struct mic_failure first;

    fail_clear(&first);
    for (size_t i = 0; i < n; i++) {   /* every item UNKNOWN until answered */
        memset(&res[i], 0, sizeof res[i]);
        res[i].seq = items[i]->seq;
        fail_clear(&res[i].fail);
    }
    if ((unsigned)verb > MIC_SETTLE_EXTEND)
        return failf(c, MIC_FAIL_ARG, -1, "no settle verb %d", (int)verb);
    if (fields && (!json_is_object(fields) || json_object_get(fields, "deliveries")))
        return failf(c, MIC_FAIL_ARG, -1, "the settle fields are a JSON object without deliveries");
    snprintf(tail, sizeof tail, "/%s", words[verb]);
    if (!(path = path_of(c, "groups", group, tail)))
        return -1;
    if (!n) {
        free(path);
        return 0;
    }
    if (!(idx = malloc(n * sizeof *idx))) {
        free(path);
        return nomem(c);
    }
    for (size_t node = 0; node < c->n; node++) {
        json_t *body, *arr, *ans = NULL, *results;
        size_t m = 0, step;

        for (size_t i = 0; i < n; i++)
            if ((size_t)items[i]->node == node)
                idx[m++] = i;
        step = split ? BATCH_MAX : m;
        for (size_t off = 0; off < m; off += step) {
            size_t part = m - off > step ? step : m - off;
            int bad = 0;

            body = json_object();
            arr = json_array();
            bad = !body || !arr || json_object_set_new(body, "deliveries", arr);
            if (!body || !arr)
                json_decref(arr);
            for (size_t k = 0; !bad && k < part; k++) {
                const struct mic_leased *d = items[idx[off + k]];

                bad = json_array_append_new(arr, json_pack("{sIss}", "seq", (json_int_t)d->seq,
                                                           "lease_token", d->lease_token));
            }
            if (!bad && fields)
                bad = json_object_update(body, fields);
            requests++;
            if (bad)
                nomem(c);
            else if (!call(c, node, "POST", path, body, 0, &ans)) {
                results = json_object_get(ans, "results");
                if (json_array_size(results) != part)
                    failf(c, MIC_FAIL_PROTO, (int)node, "%s answered %zu results for %zu items",
                          words[verb], json_array_size(results), part);
                else
                    for (size_t k = 0; k < part; k++) {
                        json_t *it = json_array_get(results, k);
                        struct mic_item_result *r = &res[idx[off + k]];

                        r->status = status_of(json_string_value(json_object_get(it, "status")));
                        copy(r->time, sizeof r->time,
                             json_string_value(json_object_get(
                                 it, r->status == MIC_ITEM_RETRYING ? "not_before" : "lease_expires_at")));
                    }
            }
            json_decref(body);
            json_decref(ans);
            ans = NULL;
            if (c->fail.kind != MIC_FAIL_NONE) {
                if (!failed++)
                    first = c->fail;
                for (size_t k = 0; k < part; k++)
                    res[idx[off + k]].fail = c->fail;
            }
        }
    }
    free(idx);
    free(path);
    if (requests > 1)
        answer_clear(c);   /* the results join several answers */
    for (size_t i = 0; i < n; i++)
        if ((size_t)items[i]->node >= c->n) {
            failf(c, MIC_FAIL_ARG, items[i]->node, "a delivery of node %d, not of this handle",
                  items[i]->node);
            res[i].fail = c->fail;
            if (!failed++)
                first = c->fail;
        }
    c->fail = first;
    return failed ? -1 : 0;
}

/* No memory for a settlement's options: nothing sent, every item UNKNOWN. */
static int settle_nomem(mic_client *c, const struct mic_leased *const *items, size_t n,
                        struct mic_item_result *res)
{
    nomem(c);
    for (size_t i = 0; i < n; i++) {
        memset(&res[i], 0, sizeof res[i]);
        res[i].seq = items[i]->seq;
        res[i].fail = c->fail;
    }
    return -1;
}

int mic_ack(mic_client *c, const char *group, const struct mic_leased *const *items, size_t n,
            struct mic_item_result *res)
{
    return settle(c, MIC_SETTLE_ACK, group, items, n, NULL, 1, res);
}

int mic_nack(mic_client *c, const char *group, const struct mic_leased *const *items, size_t n,
             const struct mic_settle_opts *o, struct mic_item_result *res)
{
    struct mic_settle_opts def = {.retry_after_s = -1};
    json_t *f = json_object();
    int rc;

    if (!o)
        o = &def;
    if (!f || (o->error && json_object_set_new(f, "error", json_string(o->error))) ||
        (o->retry_after_s >= 0 &&
         json_object_set_new(f, "retry_after_s", json_integer((json_int_t)(o->retry_after_s + 0.5)))) ||
        (o->dead_letter && json_object_set_new(f, "dead_letter", json_true()))) {
        json_decref(f);
        return settle_nomem(c, items, n, res);
    }
    rc = settle(c, MIC_SETTLE_NACK, group, items, n, f, 1, res);
    json_decref(f);
    return rc;
}

int mic_extend(mic_client *c, const char *group, const struct mic_leased *const *items,
               size_t n, const struct mic_settle_opts *o, struct mic_item_result *res)
{
    json_t *f = json_object();
    int rc;

    if (!f || (o && o->lease_ttl_s > 0 &&
               json_object_set_new(f, "lease_ttl_s", json_integer(ttl_seconds(o->lease_ttl_s))))) {
        json_decref(f);
        return settle_nomem(c, items, n, res);
    }
    rc = settle(c, MIC_SETTLE_EXTEND, group, items, n, f, 1, res);
    json_decref(f);
    return rc;
}

int mic_settle_json(mic_client *c, enum mic_settle_verb verb, const char *group,
                    const struct mic_leased *const *items, size_t n, json_t *fields,
                    struct mic_item_result *res)
{
    return settle(c, verb, group, items, n, fields, 0, res);
}

/* ---- Admin ---- */

/* Sum b's numbers into a's (same keys); "_age_s" members and booleans take
 * the maximum / any; strings and everything else stay a's. */
static void merge_counts(json_t *a, json_t *b, int b_older)
{
    const char *k;
    json_t *vb;

    json_object_foreach(b, k, vb) {
        json_t *va = json_object_get(a, k);
        size_t kl = strlen(k);
        int age = kl > 6 && !strcmp(k + kl - 6, "_age_s");

        if (!va) {
            json_object_set(a, k, vb);
        } else if (!strcmp(k, "oldest_unhandled_seq")) {
            if (b_older)
                json_object_set(a, k, vb);
        } else if (age) {
            if (json_is_number(vb) && (!json_is_number(va) || json_number_value(vb) > json_number_value(va)))
                json_object_set(a, k, vb);
        } else if (json_is_integer(va) && json_is_integer(vb)) {
            json_object_set_new(a, k, json_integer(json_integer_value(va) + json_integer_value(vb)));
        } else if (json_is_boolean(va) && json_is_true(vb)) {
            json_object_set(a, k, json_true());
        }
    }
}

static void merge_named(json_t *dst, json_t *src, const char *key)
{
    size_t i, j;
    json_t *s, *d;

    json_array_foreach(src, i, s) {
        const char *name = json_string_value(json_object_get(s, key));
        int found = 0;

        json_array_foreach(dst, j, d) if (name && json_equal(json_object_get(d, key),
                                                           json_object_get(s, key))) {
            json_t *aa = json_object_get(d, "oldest_unhandled_age_s");
            json_t *ba = json_object_get(s, "oldest_unhandled_age_s");

            merge_counts(d, s, json_is_number(ba) &&
                                   (!json_is_number(aa) || json_number_value(ba) > json_number_value(aa)));
            found = 1;
            break;
        }
        if (!found)
            json_array_append(dst, s);
    }
}

int mic_admin_stats(mic_client *c, int node, json_t **out)
{
    json_t *acc = NULL;

    *out = NULL;
    if (node >= 0)
        return call(c, (size_t)node, "GET", "/v1/stats", NULL, 0, out);
    for (size_t i = 0; i < c->n; i++) {
        json_t *one;

        if (call(c, i, "GET", "/v1/stats", NULL, 0, &one)) {
            json_decref(acc);
            return -1;
        }
        if (!acc) {
            acc = one;
            continue;
        }
        merge_named(json_object_get(acc, "groups"), json_object_get(one, "groups"), "group");
        merge_named(json_object_get(acc, "topics"), json_object_get(one, "topics"), "topic");
        merge_counts(json_object_get(acc, "store"), json_object_get(one, "store"), 0);
        json_decref(one);
    }
    json_object_set_new(acc, "nodes", json_integer((json_int_t)c->n));
    if (c->n > 1)
        answer_clear(c);   /* the result joins several answers */
    *out = acc;
    return 0;
}

static int by_created(const void *a, const void *b)
{
    json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
    int d = strcmp(sval(x, "created_at"), sval(y, "created_at"));

    if (d)
        return d;
    if (json_integer_value(json_object_get(x, "node")) != json_integer_value(json_object_get(y, "node")))
        return json_integer_value(json_object_get(x, "node")) <
                       json_integer_value(json_object_get(y, "node")) ? -1 : 1;
    return json_integer_value(json_object_get(x, "seq")) < json_integer_value(json_object_get(y, "seq"))
               ? -1 : 1;
}

/* GET 'path' on every node, concatenating the arrays at 'key' (each item
 * gets "node"); *out is node 0's answer with the joined array. */
static int gather(mic_client *c, const char *path, const char *key, json_t **out)
{
    json_t *acc = NULL;

    for (size_t i = 0; i < c->n; i++) {
        json_t *one, *it;
        size_t k;

        if (call(c, i, "GET", path, NULL, 0, &one)) {
            json_decref(acc);
            return -1;
        }
        json_array_foreach(json_object_get(one, key), k, it)
            json_object_set_new(it, "node", json_integer((json_int_t)i));
        if (!acc) {
            acc = one;
        } else {
            json_array_extend(json_object_get(acc, key), json_object_get(one, key));
            merge_counts(acc, one, 0);
            json_decref(one);
        }
    }
    if (c->n > 1)
        answer_clear(c);   /* the result joins several answers */
    *out = acc;
    return 0;
}

/* The path of group 'group' with 'tail' and the query "limit" (when not
 * 0), "reason" and "after" (when not NULL). */
static char *group_path(mic_client *c, const char *group, const char *tail, int limit,
                        const char *reason, const char *after)
{
    struct mic_buf b = {0};
    char n[16];

    mic_buf_puts(&b, "/v1/groups/");
    buf_escape(&b, group ? group : "");
    mic_buf_puts(&b, tail);
    if (reason)
        buf_query(&b, "reason", reason);
    if (limit) {
        snprintf(n, sizeof n, "%d", limit);
        buf_query(&b, "limit", n);
    }
    if (after)
        buf_query(&b, "after", after);
    return path_done(c, &b);
}

/* GET 'path' (free()d here) on 'node', or gathered from every node at
 * 'key' when node < 0. */
static int get_at(mic_client *c, int node, char *path, const char *key, json_t **out)
{
    int rc;

    if (!path)
        return -1;
    rc = node >= 0 ? call(c, (size_t)node, "GET", path, NULL, 0, out) : gather(c, path, key, out);
    free(path);
    return rc;
}

/* 'method' 'path' (free()d here) with 'body' on one node. */
static int call_at(mic_client *c, size_t node, const char *method, char *path, json_t *body,
                   json_t **out)
{
    int rc;

    if (!path)
        return -1;
    rc = call(c, node, method, path, body, 0, out);
    free(path);
    return rc;
}

int mic_admin_oldest(mic_client *c, int node, const char *group, int limit, json_t **out)
{
    json_t *arr;
    size_t n;

    *out = NULL;
    if (get_at(c, node, group_path(c, group, "/oldest", limit, NULL, NULL), "deliveries", out))
        return -1;
    if (node >= 0)
        return 0;
    arr = json_object_get(*out, "deliveries");
    if ((n = json_array_size(arr)) > 1) {
        json_t **v = malloc(n * sizeof *v), *sorted = json_array();

        if (!v || !sorted) {
            free(v);
            json_decref(sorted);
            json_decref(*out);
            *out = NULL;
            return nomem(c);
        }
        for (size_t i = 0; i < n; i++)
            v[i] = json_array_get(arr, i);
        qsort(v, n, sizeof *v, by_created);
        for (size_t i = 0; i < n && i < (size_t)(limit > 0 ? limit : 10); i++)
            json_array_append(sorted, v[i]);
        free(v);
        json_object_set_new(*out, "deliveries", sorted);
    }
    return 0;
}

int mic_admin_blocked_page(mic_client *c, int node, const char *group, const char *reason,
                           int limit, json_t **out)
{
    *out = NULL;
    return get_at(c, node, group_path(c, group, "/blocked", limit, reason, NULL), "aggregates",
                  out);
}

int mic_admin_blocked(mic_client *c, int node, const char *group, const char *reason, json_t **out)
{
    return mic_admin_blocked_page(c, node, group, reason, 0, out);
}

int mic_admin_dlq(mic_client *c, size_t node, const char *group, int limit, const char *after,
                  json_t **out)
{
    *out = NULL;
    return call_at(c, node, "GET", group_path(c, group, "/dlq", limit, NULL, after), NULL, out);
}

int mic_admin_dlq_requeue(mic_client *c, size_t node, const char *group, json_t *body, json_t **out)
{
    if (out)
        *out = NULL;
    return call_at(c, node, "POST", path_of(c, "groups", group, "/dlq/requeue"), body, out);
}

int mic_admin_dlq_skip(mic_client *c, size_t node, const char *group, json_t *body, json_t **out)
{
    if (out)
        *out = NULL;
    return call_at(c, node, "POST", path_of(c, "groups", group, "/dlq/skip"), body, out);
}

int mic_admin_aggregate(mic_client *c, const char *type, const char *id, json_t **out)
{
    *out = NULL;
    return call_at(c, mic_client_route(c, type, id, NULL), "GET", agg_path(c, type, id, NULL),
                   NULL, out);
}

int mic_admin_gap_skip(mic_client *c, const char *type, const char *id, uint64_t version,
                       json_t **out)
{
    char tail[64];

    if (out)
        *out = NULL;
    snprintf(tail, sizeof tail, "/gaps/%llu/skip", (unsigned long long)version);
    return call_at(c, mic_client_route(c, type, id, NULL), "POST", agg_path(c, type, id, tail),
                   NULL, out);
}

int mic_admin_event(mic_client *c, const char *event_id, json_t **out)
{
    char *path;
    int rc = -1;

    *out = NULL;
    if (!(path = path_of(c, "events", event_id, NULL)))
        return -1;
    for (size_t i = 0; i < c->n; i++) {
        if (!(rc = call(c, i, "GET", path, NULL, 0, out))) {
            json_object_set_new(*out, "node", json_integer((json_int_t)i));
            break;
        }
        if (c->fail.status != 404)
            break;
    }
    free(path);
    return rc;
}

int mic_admin_replay_create(mic_client *c, size_t node, json_t *body, json_t **out)
{
    return call(c, node, "POST", "/v1/replays", body, 0, out);
}

int mic_admin_replay_get(mic_client *c, size_t node, const char *run_id, json_t **out)
{
    *out = NULL;
    return call_at(c, node, "GET", path_of(c, "replays", run_id, NULL), NULL, out);
}

int mic_admin_replays(mic_client *c, size_t node, json_t **out)
{
    return call(c, node, "GET", "/v1/replays", NULL, 0, out);
}

int mic_admin_replay_delete(mic_client *c, size_t node, const char *run_id)
{
    return call_at(c, node, "DELETE", path_of(c, "replays", run_id, NULL), NULL, NULL);
}

/* PUT or DELETE on every node; *out (may be NULL) node 0's answer, which
 * stays mic_client_answer's. */
static int on_all(mic_client *c, const char *method, const char *path, json_t *body, json_t **out)
{
    struct mic_response first = {0};

    if (out)
        *out = NULL;
    for (size_t i = 0; i < c->n; i++) {
        json_t *one = NULL;

        if (call(c, i, method, path, body, 0, &one)) {
            if (out) {
                json_decref(*out);
                *out = NULL;
            }
            mic_response_fini(&first);
            return -1;
        }
        if (out && i == 0)
            *out = one;
        else
            json_decref(one);
        if (i == 0 && c->n > 1) {   /* node 0's answer, kept aside */
            first = c->last;
            memset(&c->last, 0, sizeof c->last);
        }
    }
    if (c->n > 1)
        answer_keep(c, &first);
    return 0;
}

/* A topic or group ('kind' "topics" or "groups"): PUT and DELETE on every
 * node, GET on node 0. */
static int resource(mic_client *c, const char *kind, const char *name, const char *method,
                    json_t *body, json_t **out)
{
    char *path;
    int rc;

    if (out)
        *out = NULL;
    if (!(path = path_of(c, kind, name, NULL)))
        return -1;
    rc = strcmp(method, "GET") ? on_all(c, method, path, body, out)
                               : call(c, 0, "GET", path, NULL, 0, out);
    free(path);
    return rc;
}

int mic_admin_topic_put(mic_client *c, const char *name, json_t *config, json_t **out)
{
    return resource(c, "topics", name, "PUT", config, out);
}

int mic_admin_topic_get(mic_client *c, const char *name, json_t **out)
{
    return resource(c, "topics", name, "GET", NULL, out);
}

int mic_admin_topic_delete(mic_client *c, const char *name)
{
    return resource(c, "topics", name, "DELETE", NULL, NULL);
}

int mic_admin_topics(mic_client *c, json_t **out)
{
    return call(c, 0, "GET", "/v1/topics", NULL, 0, out);
}

int mic_admin_group_put(mic_client *c, const char *name, json_t *config, json_t **out)
{
    return resource(c, "groups", name, "PUT", config, out);
}

int mic_admin_group_get(mic_client *c, const char *name, json_t **out)
{
    return resource(c, "groups", name, "GET", NULL, out);
}

int mic_admin_group_delete(mic_client *c, const char *name)
{
    return resource(c, "groups", name, "DELETE", NULL, NULL);
}

int mic_admin_groups(mic_client *c, json_t **out)
{
    return call(c, 0, "GET", "/v1/groups", NULL, 0, out);
}

/* ---- Backup ---- */

struct backup_sink {
    int fd;
    uint64_t bytes;
    int err;     /* errno of a failed write, 0 */
    int (*progress)(uint64_t bytes, void *arg);
    void *arg;
};

static int backup_piece(const char *p, size_t n, void *arg)
{
    struct backup_sink *k = arg;

    while (n) {
        ssize_t w = write(k->fd, p, n);

        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            k->err = w < 0 ? errno : EIO;
            return 1;
        }
        p += w;
        n -= (size_t)w;
        k->bytes += (uint64_t)w;
    }
    return k->progress ? k->progress(k->bytes, k->arg) : 0;
}

int mic_backup_fd(mic_client *c, size_t node, int fd,
                  int (*progress)(uint64_t bytes, void *arg), void *arg, uint64_t *bytes)
{
    struct backup_sink k = {fd, 0, 0, progress, arg};
    int rc = mic_stream(c, node, "/v1/backup", "application/octet-stream", backup_piece, &k);

    if (rc && k.err)
        return failf(c, MIC_FAIL_IO, (int)node, "cannot write the backup: %s", strerror(k.err));
    if (rc)
        return -1;
    if (bytes)
        *bytes = k.bytes;
    return 0;
}

int mic_backup_file(mic_client *c, size_t node, const char *path,
                    int (*progress)(uint64_t bytes, void *arg), void *arg, uint64_t *bytes)
{
    char *tmp = NULL, *dir = NULL, *slash;
    int fd = -1, dfd, rc = -1;

    if (asprintf(&tmp, "%s.tmp", path) < 0 || !(dir = strdup(path))) {
        free(tmp);
        return nomem(c);
    }
    if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0) {
        failf(c, MIC_FAIL_IO, (int)node, "cannot create %s: %s", tmp, strerror(errno));
        goto out;
    }
    if (mic_backup_fd(c, node, fd, progress, arg, bytes))
        goto fail_tmp;
    if (fsync(fd)) {
        failf(c, MIC_FAIL_IO, (int)node, "cannot sync %s: %s", tmp, strerror(errno));
        goto fail_tmp;
    }
    if (close(fd)) {
        fd = -1;
        failf(c, MIC_FAIL_IO, (int)node, "cannot write %s: %s", tmp, strerror(errno));
        goto fail_tmp;
    }
    fd = -1;
    if (rename(tmp, path)) {
        failf(c, MIC_FAIL_IO, (int)node, "cannot rename %s to %s: %s", tmp, path,
              strerror(errno));
        goto fail_tmp;
    }
    /* The rename itself reaches the disk with its directory. */
    slash = strrchr(dir, '/');
    if (slash == dir)
        dir[1] = 0;
    else if (slash)
        *slash = 0;
    if ((dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
        if (fsync(dfd) && errno != EINVAL) {
            failf(c, MIC_FAIL_IO, (int)node, "cannot sync the directory of %s: %s", path,
                  strerror(errno));
            close(dfd);
            goto out;
        }
        close(dfd);
    }
    rc = 0;
    goto out;
fail_tmp:
    if (fd >= 0)
        close(fd);
    fd = -1;
    unlink(tmp);
out:
    if (fd >= 0)
        close(fd);
    free(tmp);
    free(dir);
    return rc;
}
