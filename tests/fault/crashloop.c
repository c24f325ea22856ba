/* crashloop.c - T1 of the fault suite (issue 16): crash cycles with a
 * Jepsen-style checker.
 *
 * One program drives a real micd through libmic:
 *   - micd runs on a store directory that is kept across restarts and a
 *     loopback port that is kept too (picked once, below the kernel's
 *     ephemeral range: see pick_port);
 *   - two topics (crash.a, crash.b) and two groups subscribed to both
 *     (crash.*): crash-ordered (ordered) and crash-unordered; lease TTL
 *     --ttl seconds (2), 1000 attempts, backoff 20..200 ms;
 *   - producer threads of three kinds: versioned aggregates (version v+1 is
 *     sent only once v is acknowledged), unversioned aggregates (the same
 *     rule with a running index in the payload), events without aggregate;
 *     single events and batches (at most one event per aggregate in one
 *     batch); a request without an answer is sent again, the same events
 *     with the same ids and bodies, until it is acknowledged or the
 *     producers are stopped;
 *   - worker threads, --workers per group: claim up to 5 with the TTL, ack
 *     about 80%, nack about 12% (at once or with the group's backoff), drop
 *     the rest (never settled: the lease expires);
 *   - every client logs each operation with its outcome, in memory for the
 *     checker and, with --log-dir, as NDJSON files (one per thread);
 *   - the killer (the main thread): --cycles times, after a uniform random
 *     --min-ms..--max-ms of load, SIGKILL micd, restart it on the same store
 *     and port and wait for /readyz (bounded);
 *   - after the last kill the producers stop; micd is started a last time,
 *     the workers drain both groups (GET /v1/stats: pending 0, processing 0,
 *     bounded), the store is read back (range reads of both topics, and
 *     every acknowledged event looked up by id), micd is stopped with
 *     SIGTERM (a clean exit, so a sanitizer build reports), and the checker
 *     (crashcheck.h) judges the logs.
 *
 * Output: the figures as a table and as one JSON line starting with
 * "crash-json: ".  Exit status 0 when the checker finds the run valid and
 * nothing else went wrong (every publish refused by micd, every lookup that
 * could not be made, every restart that failed, an unclean last exit fails
 * the run), 1 when not, 2 for a usage or set-up error.
 *
 * Waits are bounded and poll conditions: micd's port file and /readyz, a
 * restart's generation number (clients that lost their server wait for the
 * next one on a condition variable), the drain's figures.  The only
 * deliberate sleep is the random load time before each kill. */
#define _GNU_SOURCE
#include "crashcheck.h"
#include "core/clock.h"
#include "mic.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <search.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GROUP_ORDERED "crash-ordered"
#define GROUP_UNORDERED "crash-unordered"
#define AGGS_PER_PRODUCER 16
#define READY_MS 30000          /* micd listening and /readyz 200 */
#define STOP_MS 30000           /* micd's exit after SIGTERM */
#define LOOKUP_THREADS 4

struct opts {
    int cycles;
    const char *micd;
    char dir[256];
    int own_dir;              /* made here: removed at the end */
    int keep;
    unsigned seed;
    int min_ms, max_ms;
    int vprod, uprod, nprod;  /* producers of each kind */
    int workers;              /* per group */
    int ttl_s;
    int drain_s;
    long backlog;             /* producers pause above this many unhandled */
    const char *log_dir;
};

/* ---- Time ---- */

static int64_t wall_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};

    while (nanosleep(&ts, &ts) && errno == EINTR)
        ;
}

/* ---- Shared state ---- */

/* The server's generation: bumped (under mu, with a broadcast on cv) each
 * time a restarted micd answers /readyz.  A client whose request got no
 * answer waits for the next generation (bounded) before trying again. */
struct shared {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned gen;
    atomic_int stop_pub, stop_work;
    atomic_long unhandled;            /* from the last /v1/stats: the larger
                                       * pending + processing of the groups */
    atomic_long pub_requests, pub_unanswered, pub_5xx, pub_refused, pub_acked_events;
    atomic_long pub_dup_after_unanswered;   /* events a retry found stored: the
                                             * request without an answer had
                                             * been committed */
    atomic_long claims, claims_unanswered, claims_refused;
};

static unsigned gen_now(struct shared *sh)
{
    unsigned g;

    pthread_mutex_lock(&sh->mu);
    g = sh->gen;
    pthread_mutex_unlock(&sh->mu);
    return g;
}

static void gen_bump(struct shared *sh)
{
    pthread_mutex_lock(&sh->mu);
    sh->gen++;
    pthread_cond_broadcast(&sh->cv);
    pthread_mutex_unlock(&sh->mu);
}

/* Wait until the generation is no longer 'seen', at most 'ms'. */
static void gen_wait(struct shared *sh, unsigned seen, long ms)
{
    struct timespec dl;

    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += ms / 1000;
    dl.tv_nsec += (ms % 1000) * 1000000;
    if (dl.tv_nsec >= 1000000000) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&sh->mu);
    while (sh->gen == seen && !atomic_load(&sh->stop_work))
        if (pthread_cond_timedwait(&sh->cv, &sh->mu, &dl) == ETIMEDOUT)
            break;
    pthread_mutex_unlock(&sh->mu);
}

static FILE *log_open(const struct opts *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static FILE *log_open(const struct opts *o, const char *fmt, ...)
{
    char name[128], path[512];
    va_list ap;
    FILE *f;

    if (!o->log_dir)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    snprintf(path, sizeof path, "%s/%s", o->log_dir, name);
    if (!(f = fopen(path, "w")))
        fprintf(stderr, "crashloop: cannot write %s: %s\n", path, strerror(errno));
    return f;
}

static int client_new(const char *url, long timeout_ms, mic_client **out)
{
    const char *urls[1] = {url};
    struct mic_client_opts co = {
        .urls = urls, .nurls = 1, .connect_timeout_ms = 2000, .timeout_ms = timeout_ms,
        .retries = -1, .user_agent = "crashloop/1",
    };

    return mic_client_new(&co, out, NULL);
}

/* ---- micd ---- */

struct server {
    const char *micd;
    char dir[256], log[300], portfile[300], url[64];
    int port;
    pid_t pid;
};

/* A loopback port outside the kernel's ephemeral range (so that no client
 * connection's automatically bound local port, including one of our own
 * clients connecting while micd is down, which could connect to itself,
 * takes it between a kill and the restart), free at the time of the pick.
 * 0 when the range leaves no room below it (then micd picks, ephemeral). */
static int pick_port(unsigned *seed)
{
    int lo = 32768, hi = 60999;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");

    if (f) {
        if (fscanf(f, "%d %d", &lo, &hi) != 2)
            lo = 32768;
        fclose(f);
    }
    if (lo <= 11000)
        return 0;
    for (int tries = 0; tries < 50; tries++) {
        int port = 10000 + (int)(rand_r(seed) % (unsigned)(lo - 10000));
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), on = 1, ok;

        if (fd < 0)
            return 0;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
        ok = bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
        close(fd);
        if (ok)
            return port;
    }
    return 0;
}

static void server_spawn(struct server *s)
{
    char listen[40];
    const char *argv[] = {s->micd, "--listen", listen, "--data", s->dir, "--port-file",
                          s->portfile, NULL};
    pid_t pid;

    snprintf(listen, sizeof listen, "127.0.0.1:%d", s->port);
    unlink(s->portfile);
    pid = fork();
    if (pid == 0) {
        int fd = open(s->log, O_WRONLY | O_CREAT | O_APPEND, 0600);

        prctl(PR_SET_PDEATHSIG, SIGKILL);   /* never outlives the test */
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        close_range(3, ~0U, 0);             /* none of the clients' sockets */
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    s->pid = pid;
}

static void log_tail(const struct server *s)
{
    char cmd[400];

    snprintf(cmd, sizeof cmd, "tail -n 20 '%s' >&2", s->log);
    fprintf(stderr, "crashloop: micd's log (%s), last lines:\n", s->log);
    if (system(cmd) != 0)
        fprintf(stderr, "(cannot show it)\n");
}

/* Wait until micd has written its port file and /readyz answers 200.
 * Returns 0, or -1 when it exited (*exited set) or READY_MS passed. */
static int server_wait_ready(struct server *s, int *exited)
{
    int64_t end = mono_ms() + READY_MS;
    mic_client *c = NULL;
    int rc = -1;

    *exited = 0;
    while (mono_ms() < end) {
        int status, port = 0;
        FILE *f;

        if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
            *exited = 1;
            s->pid = 0;
            break;
        }
        if ((f = fopen(s->portfile, "r"))) {
            if (fscanf(f, "%d", &port) != 1)
                port = 0;
            fclose(f);
        }
        if (port > 0) {
            struct mic_response r;

            s->port = port;
            snprintf(s->url, sizeof s->url, "http://127.0.0.1:%d", port);
            if (!c && client_new(s->url, 2000, &c))
                break;
            if (mic_request(c, 0, "GET", "/readyz", NULL, NULL, 0, NULL, &r) == 0 &&
                r.status == 200) {
                mic_response_fini(&r);
                rc = 0;
                break;
            }
            mic_response_fini(&r);
        }
        sleep_ms(5);
    }
    mic_client_free(c);
    return rc;
}

static void server_kill9(struct server *s)
{
    if (s->pid <= 0)
        return;
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    s->pid = 0;
}

/* SIGTERM and wait (bounded: then SIGKILL).  Returns micd's exit status,
 * or -1 when it did not exit by itself or died of a signal. */
static int server_term(struct server *s)
{
    int64_t end = mono_ms() + STOP_MS;
    int status;

    if (s->pid <= 0)
        return -1;
    kill(s->pid, SIGTERM);
    while (mono_ms() < end) {
        if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
            s->pid = 0;
            return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        }
        sleep_ms(5);
    }
    server_kill9(s);
    return -1;
}

/* Start micd; the first start may try several ports. */
static int server_start(struct server *s, int first, unsigned *seed)
{
    for (int tries = 0; tries < (first ? 10 : 3); tries++) {
        int exited;

        if (first)
            s->port = pick_port(seed);
        server_spawn(s);
        if (s->pid < 0)
            return -1;
        if (!server_wait_ready(s, &exited))
            return 0;
        if (!exited) {
            server_kill9(s);
            break;
        }
        /* It exited at start (a port somebody took): try again. */
    }
    log_tail(s);
    return -1;
}

/* ---- Producers ---- */

struct producer {
    int id;
    char kind;                /* 'v' versioned, 'u' unversioned aggregate, 'n' none */
    const struct opts *o;
    struct shared *sh;
    const char *url;
    mic_client *c;
    unsigned seed;
    int64_t next[AGGS_PER_PRODUCER];   /* next place of each aggregate */
    long n;                   /* events made */
    struct crashcheck_pub *pubs;
    char **bodies;            /* the compact JSON sent, per pub */
    size_t npubs, cap;
    FILE *log;
    int failed;               /* set-up failed */
};

static int pub_add(struct producer *p, json_t *ev, int agg, int64_t order)
{
    struct crashcheck_pub *e;

    if (p->npubs == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 1024;
        void *a = realloc(p->pubs, cap * sizeof *p->pubs);

        if (!a)
            return -1;
        p->pubs = a;
        if (!(a = realloc(p->bodies, cap * sizeof *p->bodies)))
            return -1;
        p->bodies = a;
        p->cap = cap;
    }
    e = &p->pubs[p->npubs];
    memset(e, 0, sizeof *e);
    snprintf(e->event_id, sizeof e->event_id, "%s",
             json_string_value(json_object_get(ev, "event_id")));
    e->agg = agg;
    e->order = order;
    e->lookup = -1;
    if (!(p->bodies[p->npubs] = json_dumps(ev, JSON_COMPACT | JSON_SORT_KEYS)))
        return -1;
    p->npubs++;
    return 0;
}

/* One new event of producer 'p' (aggregate slot 'a', or -1). */
static json_t *make_event(struct producer *p, int a)
{
    char id[CRASHCHECK_ID_MAX], agg_id[32], pad[65];
    const char *topic = p->kind == 'v' ? "crash.a" : p->kind == 'u' ? "crash.b"
                        : (p->n % 2 ? "crash.a" : "crash.b");
    int padlen = (int)(rand_r(&p->seed) % 64);
    json_t *ev, *payload;

    for (int i = 0; i < padlen; i++)
        pad[i] = "abcdefghijklmnopqrstuvwxyz0123456789"[rand_r(&p->seed) % 36];
    pad[padlen] = 0;
    snprintf(id, sizeof id, "%c%d-%ld", p->kind, p->id, p->n);
    payload = json_pack("{s:i, s:I, s:s}", "p", p->id, "n", (json_int_t)p->n, "pad", pad);
    ev = json_pack("{s:s, s:s, s:s, s:o, s:{s:s}}", "event_id", id, "topic", topic, "event_type",
                   "crash", "payload", payload, "headers", "kind", p->kind == 'v' ? "versioned"
                   : p->kind == 'u' ? "unversioned" : "none");
    if (!ev)
        return NULL;
    if (a >= 0) {
        snprintf(agg_id, sizeof agg_id, "p%d-a%d", p->id, a);
        json_object_set_new(ev, "aggregate_type", json_string(p->kind == 'v' ? "crash-v" : "crash-u"));
        json_object_set_new(ev, "aggregate_id", json_string(agg_id));
        if (p->kind == 'v')
            json_object_set_new(ev, "aggregate_version", json_integer(p->next[a]));
        else
            json_object_set_new(payload, "place", json_integer(p->next[a]));
    }
    p->n++;
    return ev;
}

static void log_publish(struct producer *p, size_t first, size_t k, int64_t t0, int64_t t1,
                        const char *outcome, const struct mic_failure *f,
                        const struct mic_publish_result *res)
{
    if (!p->log)
        return;
    fprintf(p->log, "{\"op\":\"publish\",\"producer\":%d,\"send_us\":%" PRId64
            ",\"recv_us\":%" PRId64 ",\"outcome\":\"%s\",\"status\":%ld,\"events\":[",
            p->id, t0, t1, outcome, f ? f->status : 0L);
    for (size_t i = 0; i < k; i++) {
        const struct crashcheck_pub *e = &p->pubs[first + i];

        fprintf(p->log, "%s{\"event_id\":\"%s\",\"agg\":%d,\"place\":%" PRId64 ",\"seq\":%" PRId64
                ",\"duplicate\":%s}", i ? "," : "", e->event_id, e->agg, e->order,
                res ? res[i].seq : 0, res && res[i].duplicate ? "true" : "false");
    }
    fprintf(p->log, "]}\n");
}

/* Send the events pubs[first..first+k) (evs) until acknowledged, refused,
 * or the producers are stopped.  Returns 1 acknowledged, 0 not (unknown),
 * -1 refused. */
static int send_until_acked(struct producer *p, json_t **evs, size_t first, size_t k)
{
    struct mic_publish_result res[8];
    int unanswered = 0;

    for (;;) {
        unsigned g0 = gen_now(p->sh);
        int64_t t0, t1;
        const struct mic_failure *f;
        int rc;

        for (size_t i = 0; i < k; i++)
            p->pubs[first + i].attempts++;
        t0 = wall_us();
        rc = mic_publish_batch(p->c, evs, k, res);
        t1 = wall_us();
        atomic_fetch_add(&p->sh->pub_requests, 1);
        if (rc == 0) {
            for (size_t i = 0; i < k; i++) {
                p->pubs[first + i].acked = 1;
                p->pubs[first + i].seq = res[i].seq;
                if (unanswered && res[i].duplicate)
                    atomic_fetch_add(&p->sh->pub_dup_after_unanswered, 1);
            }
            atomic_fetch_add(&p->sh->pub_acked_events, (long)k);
            log_publish(p, first, k, t0, t1, "acked", NULL, res);
            return 1;
        }
        f = mic_client_failure(p->c);
        if (f->kind == MIC_FAIL_SERVER && f->status >= 400 && f->status < 500 && f->status != 429) {
            char text[700];

            atomic_fetch_add(&p->sh->pub_refused, 1);
            log_publish(p, first, k, t0, t1, "refused", f, NULL);
            fprintf(stderr, "crashloop: producer %d: publish of %s refused: %s\n", p->id,
                    p->pubs[first].event_id, mic_failure_text(f, text, sizeof text));
            return -1;
        }
        if (f->kind == MIC_FAIL_SERVER && f->status >= 500 && f->status != 503)
            atomic_fetch_add(&p->sh->pub_5xx, 1);
        atomic_fetch_add(&p->sh->pub_unanswered, 1);
        unanswered = 1;
        log_publish(p, first, k, t0, t1, "unknown", f, NULL);
        if (atomic_load(&p->sh->stop_pub))
            return 0;
        gen_wait(p->sh, g0, 200);
    }
}

static void *producer_main(void *arg)
{
    struct producer *p = arg;

    p->log = log_open(p->o, "producer-%d.ndjson", p->id);
    for (int a = 0; a < AGGS_PER_PRODUCER; a++)
        p->next[a] = 1;
    while (!atomic_load(&p->sh->stop_pub)) {
        json_t *evs[8];
        size_t k, first = p->npubs;
        int got;

        /* Keep the backlog bounded, so the drain stays short. */
        if (atomic_load(&p->sh->unhandled) > p->o->backlog) {
            gen_wait(p->sh, gen_now(p->sh), 20);
            continue;
        }
        k = rand_r(&p->seed) % 2 ? 1 : 2 + rand_r(&p->seed) % 3;
        if (p->kind == 'n') {
            for (size_t i = 0; i < k; i++)
                if (!(evs[i] = make_event(p, -1)) || pub_add(p, evs[i], -1, 0))
                    goto oom;
        } else {
            int start = (int)(rand_r(&p->seed) % AGGS_PER_PRODUCER);

            for (size_t i = 0; i < k; i++) {   /* k distinct aggregates */
                int a = (start + (int)i) % AGGS_PER_PRODUCER;

                if (!(evs[i] = make_event(p, a)) ||
                    pub_add(p, evs[i], p->id * AGGS_PER_PRODUCER + a, p->next[a]))
                    goto oom;
            }
        }
        got = send_until_acked(p, evs, first, k);
        if (got == 1 && p->kind != 'n')
            for (size_t i = 0; i < k; i++)
                p->next[(p->pubs[first + i].agg) % AGGS_PER_PRODUCER]++;
        for (size_t i = 0; i < k; i++)
            json_decref(evs[i]);
        if (got < 0)
            break;   /* refused: counted, the run fails */
        continue;
    oom:
        fprintf(stderr, "crashloop: producer %d: out of memory\n", p->id);
        p->failed = 1;
        break;
    }
    if (p->log)
        fclose(p->log);
    return NULL;
}

/* ---- Workers ---- */

#define LATE_MAX 16

struct worker {
    int id, group;
    const struct opts *o;
    struct shared *sh;
    mic_client *c;
    unsigned seed;
    struct crashcheck_lease *leases;
    size_t n, cap;
    FILE *log;
    int failed;
    /* Leases held past their expiry, acked late (by then another worker
     * may hold the delivery: the ack must then answer lease_lost). */
    struct mic_leased late[LATE_MAX];
    size_t late_at[LATE_MAX];       /* index of its record in leases */
    int64_t late_due_us[LATE_MAX];
    size_t nlate;
};

static const char *group_path_name(int g)
{
    return g == CRASHCHECK_ORDERED ? GROUP_ORDERED : GROUP_UNORDERED;
}

static enum crashcheck_result result_of(enum mic_item_status s)
{
    switch (s) {
    case MIC_ITEM_ACKED: return CRASHCHECK_R_ACKED;
    case MIC_ITEM_RETRYING: return CRASHCHECK_R_RETRYING;
    case MIC_ITEM_DEAD_LETTERED: return CRASHCHECK_R_DEAD;
    case MIC_ITEM_LEASE_LOST: return CRASHCHECK_R_LOST;
    case MIC_ITEM_NOT_FOUND: return CRASHCHECK_R_NOTFOUND;
    default: return CRASHCHECK_R_UNKNOWN;
    }
}

/* Ack (verb 'a') or nack ('n') the m leases items[] whose records are
 * leases[at[i]]. */
static void settle(struct worker *w, int verb, const struct mic_leased **items, const size_t *at,
                   size_t m)
{
    struct mic_item_result res[LATE_MAX];
    struct mic_settle_opts so = {.error = "crashloop nack", .retry_after_s = -1};
    int64_t t0, t1;

    if (!m)
        return;
    if (rand_r(&w->seed) % 2)
        so.retry_after_s = 0;
    t0 = wall_us();
    if (verb == 'a')
        mic_ack(w->c, group_path_name(w->group), items, m, res);
    else
        mic_nack(w->c, group_path_name(w->group), items, m, &so, res);
    t1 = wall_us();
    for (size_t i = 0; i < m; i++) {
        struct crashcheck_lease *l = &w->leases[at[i]];

        l->settle = verb == 'a' ? CRASHCHECK_ACK : CRASHCHECK_NACK;
        l->settle_send_us = t0;
        l->settle_recv_us = t1;
        l->result = res[i].seq == l->seq || res[i].status == MIC_ITEM_UNKNOWN
                    ? result_of(res[i].status) : CRASHCHECK_R_UNKNOWN;
        if (w->log)
            fprintf(w->log, "{\"op\":\"%s\",\"group\":\"%s\",\"seq\":%" PRId64 ",\"token\":\"%s\","
                    "\"send_us\":%" PRId64 ",\"recv_us\":%" PRId64 ",\"result\":\"%s\"}\n",
                    verb == 'a' ? "ack" : "nack", group_path_name(w->group), l->seq, l->token,
                    t0, t1, res[i].status == MIC_ITEM_UNKNOWN ? "unknown"
                                                              : mic_item_status_name(res[i].status));
    }
}

static int lease_add(struct worker *w, const struct mic_leased *d, int64_t t0, int64_t t1)
{
    struct crashcheck_lease *l;
    int64_t exp = 0;
    size_t tl;

    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 1024;
        void *a = realloc(w->leases, cap * sizeof *w->leases);

        if (!a)
            return -1;
        w->leases = a;
        w->cap = cap;
    }
    l = &w->leases[w->n++];
    memset(l, 0, sizeof *l);
    l->group = w->group;
    l->seq = d->seq;
    snprintf(l->event_id, sizeof l->event_id, "%s", d->event_id);
    tl = strnlen(d->lease_token, sizeof l->token - 1);   /* 32 hex digits */
    memcpy(l->token, d->lease_token, tl);
    l->token[tl] = 0;
    if (mic_time_parse(d->lease_expires_at, strlen(d->lease_expires_at), &exp))
        fprintf(stderr, "crashloop: unreadable lease_expires_at '%s'\n", d->lease_expires_at);
    l->expires_us = exp;
    l->grant_us = exp - (int64_t)w->o->ttl_s * 1000000;
    l->claim_send_us = t0;
    l->claim_recv_us = t1;
    if (w->log)
        fprintf(w->log, "{\"op\":\"claimed\",\"group\":\"%s\",\"seq\":%" PRId64 ",\"event_id\":\"%s\","
                "\"aggregate\":\"%s/%s\",\"version\":%" PRIu64 ",\"token\":\"%s\","
                "\"lease_expires_at\":\"%s\",\"attempt\":%d,\"send_us\":%" PRId64
                ",\"recv_us\":%" PRId64 "}\n",
                group_path_name(w->group), d->seq, d->event_id, d->aggregate_type,
                d->aggregate_id, d->aggregate_version, d->lease_token, d->lease_expires_at,
                d->attempt, t0, t1);
    return 0;
}

/* Ack the late leases that are due (all of them when 'all'); those still
 * held when the workers stop stay unsettled in the log (expired). */
static void settle_late(struct worker *w, int all)
{
    const struct mic_leased *items[LATE_MAX];
    size_t at[LATE_MAX], m = 0, keep = 0;
    int64_t now = wall_us();

    for (size_t i = 0; i < w->nlate; i++) {
        if (all || w->late_due_us[i] <= now) {
            items[m] = &w->late[i];
            at[m++] = w->late_at[i];
        }
    }
    settle(w, 'a', items, at, m);
    for (size_t i = 0; i < w->nlate; i++)
        if (!(all || w->late_due_us[i] <= now)) {
            w->late[keep] = w->late[i];
            w->late_at[keep] = w->late_at[i];
            w->late_due_us[keep++] = w->late_due_us[i];
        }
    w->nlate = keep;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    char name[32];

    snprintf(name, sizeof name, "crash-%s-%d", w->group ? "u" : "o", w->id);
    w->log = log_open(w->o, "worker-%s-%d.ndjson", w->group ? "unordered" : "ordered", w->id);
    while (!atomic_load(&w->sh->stop_work)) {
        struct mic_claim_opts co = {.max = 1 + (int)(rand_r(&w->seed) % 5),
                                    .lease_ttl_s = w->o->ttl_s, .wait_s = 0.5, .worker = name};
        struct mic_claimed cl = {0};
        const struct mic_leased *acks[8], *nacks[8];
        size_t ack_at[8], nack_at[8], na = 0, nn = 0;
        unsigned g0;
        int64_t t0, t1;
        int rc;

        settle_late(w, 0);
        g0 = gen_now(w->sh);
        t0 = wall_us();
        rc = mic_claim(w->c, 0, group_path_name(w->group), &co, &cl);

        t1 = wall_us();
        atomic_fetch_add(&w->sh->claims, 1);
        if (rc) {
            const struct mic_failure *f = mic_client_failure(w->c);

            mic_claimed_fini(&cl);
            if (f->kind == MIC_FAIL_STOPPED)
                break;
            if (f->kind == MIC_FAIL_SERVER && f->status >= 400 && f->status < 500 &&
                f->status != 429) {
                char text[700];

                atomic_fetch_add(&w->sh->claims_refused, 1);
                fprintf(stderr, "crashloop: claim refused: %s\n",
                        mic_failure_text(f, text, sizeof text));
            } else {
                atomic_fetch_add(&w->sh->claims_unanswered, 1);
            }
            if (w->log)
                fprintf(w->log, "{\"op\":\"claim\",\"group\":\"%s\",\"send_us\":%" PRId64
                        ",\"recv_us\":%" PRId64 ",\"outcome\":\"unknown\",\"status\":%ld}\n",
                        group_path_name(w->group), t0, t1, f->status);
            gen_wait(w->sh, g0, 200);
            continue;
        }
        for (size_t i = 0; i < cl.n && i < 8; i++) {
            /* Drops and late acks only under load: the drain stays short. */
            unsigned r = atomic_load(&w->sh->stop_pub) ? rand_r(&w->seed) % 90
                                                       : rand_r(&w->seed) % 100;

            if (lease_add(w, &cl.v[i], t0, t1)) {
                w->failed = 1;
                break;
            }
            if (r < 78) {
                acks[na] = &cl.v[i];
                ack_at[na++] = w->n - 1;
            } else if (r < 90) {
                nacks[nn] = &cl.v[i];
                nack_at[nn++] = w->n - 1;
            } else if (r < 94 && w->nlate < LATE_MAX) {
                struct mic_leased *d = &w->late[w->nlate];

                memset(d, 0, sizeof *d);
                d->node = 0;
                d->seq = cl.v[i].seq;
                memcpy(d->lease_token, cl.v[i].lease_token, sizeof d->lease_token);
                w->late_at[w->nlate] = w->n - 1;
                w->late_due_us[w->nlate++] = w->leases[w->n - 1].expires_us +
                                             (int64_t)(rand_r(&w->seed) % 1000) * 1000;
            }   /* else dropped: it expires */
        }
        settle(w, 'a', acks, ack_at, na);
        settle(w, 'n', nacks, nack_at, nn);
        mic_claimed_fini(&cl);
        if (w->failed)
            break;
    }
    if (w->log)
        fclose(w->log);
    return NULL;
}

/* ---- Reading the store back ---- */

/* The larger pending + processing of the two groups, or -1. */
static long unhandled_of(mic_client *c, long *pending, long *processing)
{
    json_t *st, *g;
    size_t i;
    long worst = 0;

    *pending = *processing = 0;
    if (mic_admin_stats(c, 0, &st))
        return -1;
    json_array_foreach(json_object_get(st, "groups"), i, g) {
        const char *name = json_string_value(json_object_get(g, "group"));
        long pe = (long)json_integer_value(json_object_get(g, "pending"));
        long pr = (long)json_integer_value(json_object_get(g, "processing"));

        if (!name || (strcmp(name, GROUP_ORDERED) && strcmp(name, GROUP_UNORDERED)))
            continue;
        *pending += pe;
        *processing += pr;
        if (pe + pr > worst)
            worst = pe + pr;
    }
    json_decref(st);
    return worst;
}

struct pubref {
    struct crashcheck_pub *pub;
    const char *body;
};

/* Range reads of 'topic': every stored event, compared with what was
 * sent (table 'h' from event id to pubref).  Appends to *stored. */
static int read_topic(mic_client *c, const char *topic, struct hsearch_data *h,
                      struct crashcheck_stored **stored, size_t *n, size_t *cap)
{
    char after[200] = "", path[400], esc[300];

    for (;;) {
        json_t *page, *ev, *next;
        size_t i;

        if (after[0]) {
            if (!mic_path_escape(after, esc, sizeof esc))
                return -1;
            snprintf(path, sizeof path, "/v1/topics/%s/events?limit=1000&after=%s", topic, esc);
        } else {
            snprintf(path, sizeof path, "/v1/topics/%s/events?limit=1000", topic);
        }
        if (mic_call(c, 0, "GET", path, NULL, &page))
            return -1;
        json_array_foreach(json_object_get(page, "events"), i, ev) {
            const char *id = json_string_value(json_object_get(ev, "event_id"));
            struct crashcheck_stored *s;
            ENTRY e = {.key = (char *)(id ? id : "")}, *found = NULL;

            if (*n == *cap) {
                size_t nc = *cap ? 2 * *cap : 4096;
                void *a = realloc(*stored, nc * sizeof **stored);

                if (!a) {
                    json_decref(page);
                    return -1;
                }
                *stored = a;
                *cap = nc;
            }
            s = &(*stored)[(*n)++];
            snprintf(s->event_id, sizeof s->event_id, "%s", id ? id : "");
            s->same = 0;
            if (hsearch_r(e, FIND, &found, h) && found) {
                struct pubref *pr = found->data;
                json_t *sent = json_loads(pr->body, 0, NULL), *v;
                const char *k;

                s->same = sent != NULL;
                json_object_foreach(sent, k, v)
                    if (!json_equal(v, json_object_get(ev, k)))
                        s->same = 0;
                json_decref(sent);
            }
        }
        next = json_object_get(page, "next");
        if (!json_is_string(next)) {
            json_decref(page);
            return 0;
        }
        snprintf(after, sizeof after, "%s", json_string_value(next));
        json_decref(page);
    }
}

struct lookup_job {
    const char *url;
    struct crashcheck_pub **pubs;   /* the acknowledged ones */
    size_t n;
    atomic_size_t next;
    atomic_long errors;
};

static void *lookup_main(void *arg)
{
    struct lookup_job *j = arg;
    mic_client *c;
    size_t i;

    if (client_new(j->url, 10000, &c)) {
        atomic_fetch_add(&j->errors, 1);
        return NULL;
    }
    while ((i = atomic_fetch_add(&j->next, 1)) < j->n) {
        struct crashcheck_pub *p = j->pubs[i];
        json_t *out = NULL, *d;
        size_t k;
        int tries;

        for (tries = 0; tries < 3; tries++) {
            if (!mic_admin_event(c, p->event_id, &out))
                break;
            if (mic_client_failure(c)->status == 404) {
                p->lookup = 0;
                break;
            }
        }
        if (tries == 3) {
            atomic_fetch_add(&j->errors, 1);
            continue;
        }
        if (!out)
            continue;
        p->lookup = 1;
        json_array_foreach(json_object_get(out, "deliveries"), k, d) {
            const char *g = json_string_value(json_object_get(d, "group"));
            const char *s = json_string_value(json_object_get(d, "state"));
            int gi = g && !strcmp(g, GROUP_ORDERED) ? CRASHCHECK_ORDERED
                     : g && !strcmp(g, GROUP_UNORDERED) ? CRASHCHECK_UNORDERED : -1;

            if (gi < 0 || !s)
                continue;
            p->state[gi] = !strcmp(s, "dispatched") ? 'd' : !strcmp(s, "dlq") ? 'l'
                           : !strcmp(s, "skipped") ? 's' : 'p';
        }
        json_decref(out);
    }
    mic_client_free(c);
    return NULL;
}

/* ---- Main ---- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: crashloop [--cycles N] [--micd PATH] [--dir DIR] [--seed S]\n"
            "                 [--min-ms MS] [--max-ms MS] [--ttl S] [--workers N]\n"
            "                 [--producers V,U,N] [--drain-s S] [--backlog N]\n"
            "                 [--log-dir DIR] [--keep]\n"
            "  --cycles N     SIGKILL and restart micd N times (20)\n"
            "  --micd PATH    the micd binary ($MICD, else build/san/micd)\n"
            "  --dir DIR      the store directory (default: a new /tmp/mic-crash-XXXXXX)\n"
            "  --min-ms/--max-ms  load time before each kill, uniform (200..1500)\n"
            "  --ttl S        lease TTL of every claim, whole seconds (2)\n"
            "  --workers N    worker threads per group (3)\n"
            "  --producers V,U,N  producers of versioned, unversioned-aggregate and\n"
            "                 aggregate-less events (2,2,2)\n"
            "  --drain-s S    bound of the final drain (180)\n"
            "  --backlog N    producers pause while a group has more unhandled (1000)\n"
            "  --log-dir DIR  write every client's log there (NDJSON, one file per thread)\n"
            "  --keep         keep the store directory\n");
}

static int parse(int argc, char **argv, struct opts *o)
{
    static const struct option lo[] = {
        {"cycles", 1, 0, 'c'}, {"micd", 1, 0, 'm'}, {"dir", 1, 0, 'd'}, {"seed", 1, 0, 's'},
        {"min-ms", 1, 0, 'a'}, {"max-ms", 1, 0, 'b'}, {"ttl", 1, 0, 't'}, {"workers", 1, 0, 'w'},
        {"producers", 1, 0, 'p'}, {"drain-s", 1, 0, 'D'}, {"backlog", 1, 0, 'B'},
        {"log-dir", 1, 0, 'l'}, {"keep", 0, 0, 'k'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0},
    };
    int ch;

    memset(o, 0, sizeof *o);
    o->cycles = 20;
    o->micd = getenv("MICD") && *getenv("MICD") ? getenv("MICD") : "build/san/micd";
    o->seed = (unsigned)(wall_us() ^ getpid());
    o->min_ms = 200;
    o->max_ms = 1500;
    o->ttl_s = 2;
    o->workers = 3;
    o->vprod = 2;
    o->uprod = 2;
    o->nprod = 2;
    o->drain_s = 180;
    o->backlog = 1000;
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (ch) {
        case 'c': o->cycles = atoi(optarg); break;
        case 'm': o->micd = optarg; break;
        case 'd': snprintf(o->dir, sizeof o->dir, "%s", optarg); break;
        case 's': o->seed = (unsigned)strtoul(optarg, NULL, 10); break;
        case 'a': o->min_ms = atoi(optarg); break;
        case 'b': o->max_ms = atoi(optarg); break;
        case 't': o->ttl_s = atoi(optarg); break;
        case 'w': o->workers = atoi(optarg); break;
        case 'p':
            if (sscanf(optarg, "%d,%d,%d", &o->vprod, &o->uprod, &o->nprod) != 3)
                return -1;
            break;
        case 'D': o->drain_s = atoi(optarg); break;
        case 'B': o->backlog = atol(optarg); break;
        case 'l': o->log_dir = optarg; break;
        case 'k': o->keep = 1; break;
        case 'h': usage(stdout); exit(0);
        default: return -1;
        }
    }
    if (optind != argc || o->cycles < 0 || o->min_ms < 0 || o->max_ms < o->min_ms ||
        o->ttl_s < 1 || o->workers < 1 || o->workers > 64 || o->vprod < 0 || o->uprod < 0 ||
        o->nprod < 0 || o->vprod + o->uprod + o->nprod < 1 || o->vprod + o->uprod + o->nprod > 64 ||
        o->drain_s < 1 || o->backlog < 1)
        return -1;
    return 0;
}

static void rm_store(const char *dir)
{
    static const char *const files[] = {"data.mdb", "lock.mdb", "journal-0", "journal-1"};
    char p[400];

    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    rmdir(dir);
}

static int setup_resources(mic_client *c, int ttl_s)
{
    static const char *const topics[] = {"crash.a", "crash.b"};
    json_t *out = NULL;

    for (int i = 0; i < 2; i++) {
        json_t *cfg = json_object();
        int rc = mic_admin_topic_put(c, topics[i], cfg, &out);

        json_decref(cfg);
        json_decref(out);
        if (rc)
            return -1;
    }
    for (int g = 0; g < CRASHCHECK_GROUPS; g++) {
        json_t *cfg = json_pack("{s:[s], s:b, s:i, s:{s:i, s:i}, s:i}", "topics", "crash.*",
                                "ordered", g == CRASHCHECK_ORDERED, "max_attempts", 1000,
                                "backoff", "initial_ms", 20, "max_ms", 200, "lease_ttl_s", ttl_s);
        int rc = mic_admin_group_put(c, group_path_name(g), cfg, &out);

        json_decref(cfg);
        json_decref(out);
        if (rc)
            return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o;
    struct shared sh;
    struct server srv;
    struct producer *prod = NULL;
    struct worker *work = NULL;
    pthread_t *pth = NULL, *wth = NULL;
    mic_client *ctl = NULL;
    FILE *klog = NULL;
    int np, nw, failures = 0, final_exit = -1, drained = 0;
    long restart_ms_max = 0, restart_ms_sum = 0, lookup_errors = 0, pending = 0, processing = 0;
    int64_t t_start = mono_ms(), t_load = 0, t_drain = 0;
    struct crashcheck_pub *pubs = NULL;
    struct crashcheck_lease *leases = NULL;
    struct crashcheck_stored *stored = NULL;
    size_t npubs = 0, nleases = 0, nstored = 0, cstored = 0;
    struct crashcheck_report rep;
    char text[700];
    unsigned kseed;     /* the killer's random numbers */

    if (parse(argc, argv, &o)) {
        usage(stderr);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    kseed = o.seed;
    if (access(o.micd, X_OK)) {
        fprintf(stderr, "crashloop: cannot run %s (set --micd or MICD)\n", o.micd);
        return 2;
    }
    if (o.log_dir) {   /* mkdir -p */
        char p[512];

        snprintf(p, sizeof p, "%s", o.log_dir);
        for (char *s = p + 1; *s; s++)
            if (*s == '/') {
                *s = 0;
                mkdir(p, 0755);
                *s = '/';
            }
        if (mkdir(p, 0755) && errno != EEXIST) {
            perror("crashloop: mkdir --log-dir");
            return 2;
        }
    }
    if (!o.dir[0]) {
        snprintf(o.dir, sizeof o.dir, "/tmp/mic-crash-XXXXXX");
        if (!mkdtemp(o.dir)) {
            perror("crashloop: mkdtemp");
            return 2;
        }
        o.own_dir = 1;
    } else if (mkdir(o.dir, 0700) && errno != EEXIST) {
        perror("crashloop: mkdir --dir");
        return 2;
    }
    memset(&sh, 0, sizeof sh);
    pthread_mutex_init(&sh.mu, NULL);
    pthread_cond_init(&sh.cv, NULL);
    memset(&srv, 0, sizeof srv);
    srv.micd = o.micd;
    snprintf(srv.dir, sizeof srv.dir, "%s", o.dir);
    snprintf(srv.log, sizeof srv.log, "%s.log", o.dir);
    snprintf(srv.portfile, sizeof srv.portfile, "%s.port", o.dir);
    unlink(srv.log);
    printf("crashloop: %d cycles, micd %s, store %s, seed %u, load %d..%d ms per cycle, "
           "lease TTL %d s\n", o.cycles, o.micd, o.dir, o.seed, o.min_ms, o.max_ms, o.ttl_s);
    fflush(stdout);
    if (server_start(&srv, 1, &kseed)) {
        fprintf(stderr, "crashloop: micd did not start (store %s, log %s)\n", o.dir, srv.log);
        return 2;
    }
    if (client_new(srv.url, 10000, &ctl) || setup_resources(ctl, o.ttl_s)) {
        fprintf(stderr, "crashloop: set-up failed: %s\n",
                ctl ? mic_failure_text(mic_client_failure(ctl), text, sizeof text) : "no client");
        server_kill9(&srv);
        return 2;
    }
    klog = log_open(&o, "killer.ndjson");

    /* Start the clients. */
    np = o.vprod + o.uprod + o.nprod;
    nw = 2 * o.workers;
    prod = calloc((size_t)np, sizeof *prod);
    work = calloc((size_t)nw, sizeof *work);
    pth = calloc((size_t)np, sizeof *pth);
    wth = calloc((size_t)nw, sizeof *wth);
    if (!prod || !work || !pth || !wth) {
        fprintf(stderr, "crashloop: out of memory\n");
        server_kill9(&srv);
        return 2;
    }
    for (int i = 0; i < nw; i++) {
        work[i] = (struct worker){.id = i / 2, .group = i % 2, .o = &o, .sh = &sh,
                                  .seed = o.seed * 31u + (unsigned)i * 7919u + 1};
        if (client_new(srv.url, 15000, &work[i].c) ||
            pthread_create(&wth[i], NULL, worker_main, &work[i])) {
            fprintf(stderr, "crashloop: cannot start worker %d\n", i);
            return 2;
        }
    }
    for (int i = 0; i < np; i++) {
        prod[i] = (struct producer){.id = i, .o = &o, .sh = &sh, .url = srv.url,
                                    .kind = i < o.vprod ? 'v' : i < o.vprod + o.uprod ? 'u' : 'n',
                                    .seed = o.seed * 17u + (unsigned)i * 104729u + 3};
        if (client_new(srv.url, 15000, &prod[i].c) ||
            pthread_create(&pth[i], NULL, producer_main, &prod[i])) {
            fprintf(stderr, "crashloop: cannot start producer %d\n", i);
            return 2;
        }
    }

    /* The killer. */
    t_load = mono_ms();
    for (int cycle = 1; cycle <= o.cycles; cycle++) {
        long load = o.min_ms + (long)(rand_r(&kseed) % (unsigned)(o.max_ms - o.min_ms + 1));
        int64_t kill_at = mono_ms() + load, t_kill, t_ready, left;
        long before = atomic_load(&sh.pub_acked_events);

        /* The load time, during which the backlog figure is refreshed for
         * the producers' throttle. */
        while (mono_ms() < kill_at) {
            long pe, pr, u = unhandled_of(ctl, &pe, &pr);

            if (u >= 0)
                atomic_store(&sh.unhandled, u);
            left = kill_at - mono_ms();
            if (left > 0)
                sleep_ms(left < 50 ? (long)left : 50);
        }
        t_kill = mono_ms();
        if (klog)
            fprintf(klog, "{\"op\":\"kill\",\"cycle\":%d,\"pid\":%d,\"at_us\":%" PRId64
                    ",\"load_ms\":%ld}\n", cycle, (int)srv.pid, wall_us(), load);
        server_kill9(&srv);
        if (cycle == o.cycles)
            atomic_store(&sh.stop_pub, 1);   /* the last kill ends the load */
        if (server_start(&srv, 0, &kseed)) {
            fprintf(stderr, "crashloop: cycle %d: micd did not come back on port %d\n", cycle,
                    srv.port);
            failures++;
            break;
        }
        t_ready = mono_ms();
        if (t_ready - t_kill > restart_ms_max)
            restart_ms_max = (long)(t_ready - t_kill);
        restart_ms_sum += (long)(t_ready - t_kill);
        if (klog)
            fprintf(klog, "{\"op\":\"ready\",\"cycle\":%d,\"pid\":%d,\"at_us\":%" PRId64
                    ",\"restart_ms\":%" PRId64 ",\"events_acked_in_cycle\":%ld}\n", cycle,
                    (int)srv.pid, wall_us(), t_ready - t_kill,
                    atomic_load(&sh.pub_acked_events) - before);
        gen_bump(&sh);
        if (o.cycles >= 50 && cycle % 50 == 0) {
            printf("crashloop: %d cycles, %ld events acknowledged\n", cycle,
                   atomic_load(&sh.pub_acked_events));
            fflush(stdout);
        }
    }
    atomic_store(&sh.stop_pub, 1);
    gen_bump(&sh);
    for (int i = 0; i < np; i++)
        pthread_join(pth[i], NULL);
    t_load = mono_ms() - t_load;

    /* The drain. */
    t_drain = mono_ms();
    if (!failures) {
        int64_t end = mono_ms() + (int64_t)o.drain_s * 1000;

        while (mono_ms() < end) {
            long u = unhandled_of(ctl, &pending, &processing);

            if (u == 0) {
                drained = 1;
                break;
            }
            sleep_ms(50);
        }
        if (!drained) {
            fprintf(stderr, "crashloop: the groups did not drain in %d s: pending %ld, "
                    "processing %ld\n", o.drain_s, pending, processing);
            failures++;
        }
    }
    atomic_store(&sh.stop_work, 1);
    gen_bump(&sh);
    for (int i = 0; i < nw; i++)
        mic_client_stop(work[i].c);
    for (int i = 0; i < nw; i++)
        pthread_join(wth[i], NULL);
    t_drain = mono_ms() - t_drain;

    /* Gather the logs. */
    for (int i = 0; i < np; i++)
        npubs += prod[i].npubs;
    for (int i = 0; i < nw; i++)
        nleases += work[i].n;
    pubs = calloc(npubs + 1, sizeof *pubs);
    leases = calloc(nleases + 1, sizeof *leases);
    {
        struct hsearch_data h;
        struct pubref *refs = calloc(npubs + 1, sizeof *refs);
        struct crashcheck_pub **acked = calloc(npubs + 1, sizeof *acked);
        size_t k = 0, na = 0;

        memset(&h, 0, sizeof h);
        if (!pubs || !leases || !refs || !acked || !hcreate_r(2 * npubs + 16, &h)) {
            fprintf(stderr, "crashloop: out of memory\n");
            server_kill9(&srv);
            return 2;
        }
        for (int i = 0; i < np; i++)
            for (size_t j = 0; j < prod[i].npubs; j++, k++) {
                ENTRY e, *found;

                pubs[k] = prod[i].pubs[j];
                refs[k] = (struct pubref){.pub = &pubs[k], .body = prod[i].bodies[j]};
                e.key = pubs[k].event_id;
                e.data = &refs[k];
                hsearch_r(e, ENTER, &found, &h);
                if (pubs[k].acked)
                    acked[na++] = &pubs[k];
            }
        k = 0;
        for (int i = 0; i < nw; i++)
            for (size_t j = 0; j < work[i].n; j++)
                leases[k++] = work[i].leases[j];

        /* The store, read back: range reads, then every acknowledged event
         * by id. */
        if (srv.pid > 0) {
            if (read_topic(ctl, "crash.a", &h, &stored, &nstored, &cstored) ||
                read_topic(ctl, "crash.b", &h, &stored, &nstored, &cstored)) {
                fprintf(stderr, "crashloop: range read failed: %s\n",
                        mic_failure_text(mic_client_failure(ctl), text, sizeof text));
                failures++;
            }
            {
                struct lookup_job j = {.url = srv.url, .pubs = acked, .n = na};
                pthread_t lt[LOOKUP_THREADS];

                for (int i = 0; i < LOOKUP_THREADS; i++)
                    pthread_create(&lt[i], NULL, lookup_main, &j);
                for (int i = 0; i < LOOKUP_THREADS; i++)
                    pthread_join(lt[i], NULL);
                lookup_errors = atomic_load(&j.errors);
            }
            final_exit = server_term(&srv);
            if (final_exit != 0) {
                fprintf(stderr, "crashloop: micd's last exit was not clean (status %d)\n",
                        final_exit);
                log_tail(&srv);
            }
        }
        hdestroy_r(&h);
        free(refs);
        free(acked);
    }

    /* The checker. */
    {
        struct crashcheck_input in = {.pubs = pubs, .npubs = npubs, .leases = leases,
                                      .nleases = nleases, .stored = stored, .nstored = nstored};
        long refused = atomic_load(&sh.pub_refused) + atomic_load(&sh.claims_refused);
        int ok;

        if (crashcheck_run(&in, &rep, stderr)) {
            fprintf(stderr, "crashloop: out of memory in the checker\n");
            return 2;
        }
        for (int i = 0; i < np; i++)
            failures += prod[i].failed;
        for (int i = 0; i < nw; i++)
            failures += work[i].failed;
        ok = rep.valid && !failures && !refused && !lookup_errors && final_exit == 0;
        printf("crash cycles: %d kills of micd (%s) under load, restarts %ld ms on average, "
               "%ld ms at most; load %.1f s, drain %.1f s, all %.1f s\n",
               o.cycles, o.micd, o.cycles ? restart_ms_sum / o.cycles : 0, restart_ms_max,
               (double)t_load / 1000, (double)t_drain / 1000,
               (double)(mono_ms() - t_start) / 1000);
        printf("clients: %d producers, %d workers per group; publish requests %ld (unanswered "
               "%ld, of which committed before the kill %ld events; 5xx %ld, refused %ld), claims %ld (unanswered %ld, refused %ld), lookups "
               "failed %ld\n",
               np, o.workers, atomic_load(&sh.pub_requests), atomic_load(&sh.pub_unanswered),
               atomic_load(&sh.pub_dup_after_unanswered), atomic_load(&sh.pub_5xx), atomic_load(&sh.pub_refused), atomic_load(&sh.claims),
               atomic_load(&sh.claims_unanswered), atomic_load(&sh.claims_refused), lookup_errors);
        crashcheck_print_table(&rep, stdout);
        printf("crash-json: {\"test\":\"fault-crash\",\"cycles\":%d,\"micd\":\"%s\",\"seed\":%u,"
               "\"seconds\":%.1f,\"load_s\":%.1f,\"drain_s\":%.1f,\"restart_ms_avg\":%ld,"
               "\"restart_ms_max\":%ld,\"publish_requests\":%ld,\"publish_unanswered\":%ld,"
               "\"publish_committed_unanswered\":%ld,\"publish_5xx\":%ld,\"publish_refused\":%ld,\"claims\":%ld,"
               "\"claims_unanswered\":%ld,\"claims_refused\":%ld,\"lookup_errors\":%ld,"
               "\"drained\":%s,\"final_exit\":%d,\"ok\":%s,\"check\":",
               o.cycles, o.micd, o.seed, (double)(mono_ms() - t_start) / 1000,
               (double)t_load / 1000, (double)t_drain / 1000,
               o.cycles ? restart_ms_sum / o.cycles : 0, restart_ms_max,
               atomic_load(&sh.pub_requests), atomic_load(&sh.pub_unanswered),
               atomic_load(&sh.pub_dup_after_unanswered),
               atomic_load(&sh.pub_5xx), atomic_load(&sh.pub_refused), atomic_load(&sh.claims),
               atomic_load(&sh.claims_unanswered), atomic_load(&sh.claims_refused), lookup_errors,
               drained ? "true" : "false", final_exit, ok ? "true" : "false");
        crashcheck_print_json(&rep, stdout);
        printf("}\n");
        printf("fault-crash: %s\n", ok ? "ok" : "FAILED");
        fflush(stdout);

        /* Tidy up. */
        if (klog)
            fclose(klog);
        mic_client_free(ctl);
        for (int i = 0; i < np; i++) {
            for (size_t j = 0; j < prod[i].npubs; j++)
                free(prod[i].bodies[j]);
            free(prod[i].bodies);
            free(prod[i].pubs);
            mic_client_free(prod[i].c);
        }
        for (int i = 0; i < nw; i++) {
            free(work[i].leases);
            mic_client_free(work[i].c);
        }
        free(prod);
        free(work);
        free(pth);
        free(wth);
        free(pubs);
        free(leases);
        free(stored);
        server_kill9(&srv);
        if (!o.keep && ok) {
            rm_store(o.dir);
            unlink(srv.log);
        } else {
            printf("crashloop: store kept in %s, micd's log in %s\n", o.dir, srv.log);
        }
        unlink(srv.portfile);
        pthread_mutex_destroy(&sh.mu);
        pthread_cond_destroy(&sh.cv);
        return ok ? 0 : 1;
    }
}
