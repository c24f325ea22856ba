/* workers.c - a worker pool against micd, for benchmarks.
 *
 * Owns: the command line of the bench workers, the counting every driver
 * shares (seqs seen, duplicates, missing, per-aggregate order, claim
 * latencies) and the one JSON line of the report.  Three drivers do the
 * claiming and acking (--driver):
 *
 *   libmic  (default) each of --workers threads has its own mic_client
 *           (client/mic.h, mic_client_dup of one made in main) and loops
 *           mic_claim {"max":M,"lease_ttl_s":30} then one mic_ack of every
 *           delivery it got: what an application on libmic does by hand.
 *           Its claim latency is mic_claim's, the answer's parse included.
 *   loop    mic_worker_run's loop (mic_worker_start, --workers handler
 *           threads, --max per claim, 30 s lease, background extension):
 *           the handler counts and checks each delivery and returns
 *           MIC_DONE, so the loop acks it (one ack per delivery, as the loop
 *           settles each job when its handler returns).  It stops after
 *           --expect settled deliveries (max_deliveries) or --max-seconds.
 *           It does not say when a claim was sent, so claims, empty_claims
 *           and the claim latencies are null, and --rounds is refused.  On
 *           stderr it says when the --expect'th delivery was handled and
 *           when the loop ended (its stop has a cost of its own;
 *           bench/workerloop.sh reads the line).
 *   raw     the bench's own HTTP/1.1 over one keep-alive socket per thread
 *           (OpenSSL for https://), the same claim and one ack per claim
 *           batch.  It is NOT a client of the repository: it is kept as the
 *           baseline that shows what libmic and its loop cost on top of the
 *           server (make bench-workerloop, bench/workerloop.sh).
 *
 * Modes: drain (--expect N: stop when N deliveries were acked in all) and
 * latency (--rounds R: stop after R claims; use --max 1).  Every driver
 * counts duplicates (a seq handed out twice) and, with --first-seq/--expect,
 * missing seqs.  It stops by itself: at --expect, --rounds or after
 * --max-seconds.
 *
 *   workers --url http://127.0.0.1:PORT --group G --workers 8 --max 32 --expect 100000
 *   workers --url ... --group G --workers 1 --max 1 --rounds 2000
 *   workers --driver raw|libmic|loop ...
 *
 * An https:// URL speaks TLS (1.2 or later), checked against --cacert FILE
 * (default: the system's CAs); --key SECRET (or $MIC_KEY) is sent as
 * Authorization: Bearer.
 *
 * With --verify-order 1 (events from `loadgen --aggregates A --versions`),
 * every delivery's aggregate_version must be the one after the version last
 * taken for its aggregate; violations are counted.
 *
 * Prints one JSON line: {"driver","workers","max","acked","claims",
 * "empty_claims","seconds","events_per_s","claim_p50_ms","claim_p99_ms",
 * "duplicates","missing","order_violations"}.  Exit 1 when fewer than
 * --expect were acked, or on a duplicate or an order violation.  --lat-log
 * FILE also writes each claim's "START_NS LATENCY_US" line to FILE
 * (START_NS: CLOCK_MONOTONIC when it was sent; not with --driver loop). */
#define _GNU_SOURCE
#include "mic.h"

#include <arpa/inet.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum driver { D_LIBMIC, D_LOOP, D_RAW };
static const char *const driver_names[] = {"libmic", "loop", "raw"};

static enum driver driver = D_LIBMIC;
static char url[300];
static char host[64] = "127.0.0.1", group[201];
static int port, nworkers = 8, maxc = 32, rounds;
static const char *key;       /* --key, else $MIC_KEY */
static const char *cacert;    /* --cacert */
static const char *lat_log;   /* --lat-log */
static int https;
static long expect;
static double max_seconds = 300;
static atomic_long acked, claims, dups, empties, disorder;
static int verify_order;
static uint64_t *last_version;   /* per aggregate "a<k>": last version taken */
static size_t naggs;
static atomic_int stop;
static uint8_t *seen;
static size_t seen_len;
static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ---- Counting (every driver) ---- */

struct worker {
    int id;
    double *lat, *at;       /* ms; when each was sent (s, CLOCK_MONOTONIC) */
    int nlat, cap;
};

static void lat_add(struct worker *w, double at, double ms)
{
    if (w->nlat == w->cap) {
        w->cap = w->cap ? w->cap * 2 : 4096;
        w->lat = realloc(w->lat, (size_t)w->cap * sizeof *w->lat);
        w->at = realloc(w->at, (size_t)w->cap * sizeof *w->at);
    }
    w->at[w->nlat] = at;
    w->lat[w->nlat++] = ms;
}

/* Seq 'seq' was delivered: a second time is a duplicate.  With
 * --verify-order, 'agg' (the aggregate id, "a<k>" from loadgen, or NULL) and
 * 'ver' (its aggregate_version) must follow the version taken last for it. */
static void take(uint64_t seq, const char *agg, uint64_t ver)
{
    pthread_mutex_lock(&seen_lock);
    if (seq >= seen_len) {
        size_t n = seen_len ? seen_len : 1 << 20;
        while (n <= seq)
            n *= 2;
        seen = realloc(seen, n);
        memset(seen + seen_len, 0, n - seen_len);
        seen_len = n;
    }
    if (seen[seq]++)
        atomic_fetch_add(&dups, 1);
    if (verify_order && agg && agg[0] == 'a' && ver) {
        size_t k = strtoul(agg + 1, NULL, 10);

        if (k >= naggs) {
            size_t n = naggs ? naggs : 1024;
            while (n <= k)
                n *= 2;
            last_version = realloc(last_version, n * sizeof *last_version);
            memset(last_version + naggs, 0, (n - naggs) * sizeof *last_version);
            naggs = n;
        }
        if (last_version[k] + 1 != ver)
            atomic_fetch_add(&disorder, 1);
        last_version[k] = ver;
    }
    pthread_mutex_unlock(&seen_lock);
}

/* n deliveries of one claim were acked: stop at --expect or --rounds. */
static void acked_batch(int n)
{
    if (atomic_fetch_add(&acked, n) + n >= expect && expect)
        atomic_store(&stop, 1);
    if (rounds && atomic_load(&claims) >= rounds)
        atomic_store(&stop, 1);
}

/* ---- Driver raw: the bench's own HTTP/1.1 ---- */

static char auth[560];        /* "Authorization: Bearer KEY\r\n" or "" */
static SSL_CTX *tls;          /* https:// URL */

struct conn {
    int fd;
    SSL *ssl;       /* https:// only */
    char *buf;
    size_t cap;
};

static ssize_t io_write(struct conn *c, const void *p, size_t n)
{
    return c->ssl ? SSL_write(c->ssl, p, (int)n) : write(c->fd, p, n);
}

static ssize_t io_read(struct conn *c, void *p, size_t n)
{
    return c->ssl ? SSL_read(c->ssl, p, (int)n) : read(c->fd, p, n);
}

static int conn_open(struct conn *c)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int one = 1;

    inet_pton(AF_INET, host, &a.sin_addr);
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&a, sizeof a))
        return -1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (tls) {
        if (!(c->ssl = SSL_new(tls)) || !SSL_set_fd(c->ssl, c->fd) ||
            !X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), host) ||
            SSL_connect(c->ssl) != 1) {
            fprintf(stderr, "workers: TLS handshake with %s failed\n", host);
            return -1;
        }
    }
    return 0;
}

/* POST 'body' to 'path'; the response body is left in c->buf (NUL-ended).
 * Returns the status, or -1. */
static int post(struct conn *c, const char *path, const char *body, size_t blen)
{
    char head[1200];
    size_t got = 0, hdr_end = 0, clen = 0;
    int n = snprintf(head, sizeof head,
                     "POST %s HTTP/1.1\r\nHost: %s\r\n%sContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n", path, host, auth, blen);

    if (io_write(c, head, (size_t)n) != n || io_write(c, body, blen) != (ssize_t)blen)
        return -1;
    for (;;) {
        ssize_t r;
        if (got + 4096 > c->cap) {
            c->cap = c->cap ? c->cap * 2 : 65536;
            c->buf = realloc(c->buf, c->cap + 1);
        }
        r = io_read(c, c->buf + got, c->cap - got);
        if (r <= 0)
            return -1;
        got += (size_t)r;
        c->buf[got] = 0;
        if (!hdr_end) {
            char *e = strstr(c->buf, "\r\n\r\n"), *cl;
            if (!e)
                continue;
            hdr_end = (size_t)(e - c->buf) + 4;
            cl = strcasestr(c->buf, "Content-Length:");
            clen = cl && cl < e ? strtoul(cl + 15, NULL, 10) : 0;
        }
        if (got >= hdr_end + clen)
            break;
    }
    {
        int status = atoi(c->buf + 9);
        memmove(c->buf, c->buf + hdr_end, clen);
        c->buf[clen] = 0;
        return status;
    }
}

static int raw_setup(void)
{
    if (key)
        snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", key);
    if (https && (!(tls = SSL_CTX_new(TLS_client_method())) ||
                  !SSL_CTX_set_min_proto_version(tls, TLS1_2_VERSION) ||
                  (cacert ? SSL_CTX_load_verify_locations(tls, cacert, NULL)
                          : SSL_CTX_set_default_verify_paths(tls)) != 1)) {
        fprintf(stderr, "workers: cannot set up TLS\n");
        return -1;
    }
    if (tls)
        SSL_CTX_set_verify(tls, SSL_VERIFY_PEER, NULL);
    return 0;
}

static void *raw_work(void *arg)
{
    struct worker *w = arg;
    struct conn c = {0};
    char cpath[300], apath[300], claim[128];
    char *ack = malloc(64 + (size_t)maxc * 96);
    double t0 = now_s();

    snprintf(cpath, sizeof cpath, "/v1/groups/%s/claim", group);
    snprintf(apath, sizeof apath, "/v1/groups/%s/ack", group);
    snprintf(claim, sizeof claim, "{\"max\":%d,\"lease_ttl_s\":30,\"worker\":\"w%d\"}", maxc, w->id);
    if (conn_open(&c))
        goto out;
    while (!atomic_load(&stop) && now_s() - t0 < max_seconds) {
        double a = now_s();
        int st = post(&c, cpath, claim, strlen(claim)), n = 0;
        size_t len;
        char *p;

        if (st != 200) {
            fprintf(stderr, "claim: status %d\n", st);
            break;
        }
        lat_add(w, a, (now_s() - a) * 1000);
        atomic_fetch_add(&claims, 1);
        len = (size_t)sprintf(ack, "{\"deliveries\":[");
        for (p = c.buf; (p = strstr(p, "{\"seq\":")); ) {
            uint64_t seq = strtoull(p + 7, &p, 10), ver = 0;
            char *t = strstr(p, "\"lease_token\":\""), *next, *ag = NULL, *v;
            if (!t)
                break;
            t += 15;
            if (verify_order) {
                /* Within this delivery: aggregate a<k>, version v. */
                next = strstr(t, "{\"seq\":");
                ag = strstr(t, "\"aggregate_id\":\"");
                v = strstr(t, "\"aggregate_version\":");
                if (ag && v && (!next || (ag < next && v < next))) {
                    ag += 16;
                    ver = strtoull(v + 20, NULL, 10);
                } else {
                    ag = NULL;
                }
            }
            take(seq, ag, ver);
            len += (size_t)sprintf(ack + len, "%s{\"seq\":%llu,\"lease_token\":\"%.*s\"}",
                                   n ? "," : "", (unsigned long long)seq,
                                   (int)strcspn(t, "\""), t);
            n++;
            p = t;
        }
        len += (size_t)sprintf(ack + len, "]}");
        if (n == 0) {
            atomic_fetch_add(&empties, 1);
            if (expect && atomic_load(&acked) >= expect)
                break;
            continue;
        }
        if (post(&c, apath, ack, len) != 200 || strstr(c.buf, "lease_lost")) {
            fprintf(stderr, "ack failed: %.200s\n", c.buf);
            break;
        }
        acked_batch(n);
    }
out:
    if (c.ssl)
        SSL_free(c.ssl);
    if (c.fd > 0)
        close(c.fd);
    free(c.buf);
    free(ack);
    return NULL;
}

/* ---- Driver libmic: mic_claim and mic_ack by hand ---- */

static mic_client *proto;     /* main's handle, dup'd per thread (libmic, loop) */

static void *libmic_work(void *arg)
{
    struct worker *w = arg;
    mic_client *c = NULL;
    const struct mic_leased **items = calloc((size_t)maxc, sizeof *items);
    struct mic_item_result *res = calloc((size_t)maxc, sizeof *res);
    char name[32], why[800];
    double t0 = now_s();

    snprintf(name, sizeof name, "w%d", w->id);
    if (!items || !res || mic_client_dup(proto, &c)) {
        fprintf(stderr, "workers: out of memory\n");
        goto out;
    }
    while (!atomic_load(&stop) && now_s() - t0 < max_seconds) {
        struct mic_claim_opts co = {.max = maxc, .lease_ttl_s = 30, .worker = name};
        struct mic_claimed cl;
        double a = now_s();
        size_t i;

        if (mic_claim(c, 0, group, &co, &cl)) {
            mic_claimed_fini(&cl);
            fprintf(stderr, "claim: %s\n",
                    mic_failure_text(mic_client_failure(c), why, sizeof why));
            break;
        }
        lat_add(w, a, (now_s() - a) * 1000);
        atomic_fetch_add(&claims, 1);
        if (cl.n > (size_t)maxc) {
            fprintf(stderr, "claim: %zu deliveries for max %d\n", cl.n, maxc);
            mic_claimed_fini(&cl);
            break;
        }
        if (cl.n == 0) {
            mic_claimed_fini(&cl);
            atomic_fetch_add(&empties, 1);
            if (expect && atomic_load(&acked) >= expect)
                break;
            continue;
        }
        for (i = 0; i < cl.n; i++) {
            take((uint64_t)cl.v[i].seq, cl.v[i].aggregate_id, cl.v[i].aggregate_version);
            items[i] = &cl.v[i];
        }
        if (mic_ack(c, group, items, cl.n, res)) {
            fprintf(stderr, "ack failed: %s\n",
                    mic_failure_text(mic_client_failure(c), why, sizeof why));
            mic_claimed_fini(&cl);
            break;
        }
        for (i = 0; i < cl.n && res[i].status == MIC_ITEM_ACKED; i++)
            ;
        if (i < cl.n) {
            fprintf(stderr, "ack failed: seq %lld %s\n", (long long)res[i].seq,
                    mic_item_status_name(res[i].status));
            mic_claimed_fini(&cl);
            break;
        }
        acked_batch((int)cl.n);
        mic_claimed_fini(&cl);
    }
out:
    mic_client_free(c);
    free(items);
    free(res);
    return NULL;
}

/* ---- Driver loop: mic_worker_start ---- */

static mic_worker *_Atomic loop_w;   /* set once started; read by the handler */
static double loop_t0;
static atomic_long handled;
static _Atomic double loop_last;     /* when the --expect'th delivery was handled */

/* The loop's handler: count and check the delivery, ack it.  Past
 * --max-seconds it stops the loop (the handler runs on the loop's threads,
 * which all end before mic_worker_join frees the loop). */
static enum mic_verdict loop_handle(mic_job *job, const struct mic_leased *d, mic_client *c,
                                    void *arg)
{
    mic_worker *lw;

    (void)job, (void)c, (void)arg;
    take((uint64_t)d->seq, d->aggregate_id, d->aggregate_version);
    if (atomic_fetch_add(&handled, 1) + 1 == expect)
        atomic_store(&loop_last, now_s());
    if (now_s() - loop_t0 >= max_seconds && (lw = atomic_load(&loop_w)))
        mic_worker_stop(lw);
    return MIC_DONE;
}

/* Run the loop until --expect deliveries were settled (max_deliveries), a
 * delivery is handled past --max-seconds, or none came for --max-seconds
 * (idle_exit_s; the loop looks at it when a long-poll comes back empty,
 * so the wait is capped at --max-seconds).  Stores the loop's acks in
 * 'acked'.  Returns 0, or -1 when it could not start or micd refused its
 * claims. */
static int loop_run(void)
{
    struct mic_worker_opts o = {.group = group, .threads = nworkers, .max = maxc,
                                .lease_ttl_s = 30, .wait_s = max_seconds < 20 ? max_seconds : 20,
                                .worker = "w", .handler = loop_handle, .max_deliveries = expect,
                                .idle_exit_s = max_seconds};
    struct mic_worker_stats st;
    mic_worker *lw;
    char why[800];

    loop_t0 = now_s();
    if (mic_worker_start(proto, &o, &lw)) {
        fprintf(stderr, "workers: the worker loop did not start\n");
        return -1;
    }
    atomic_store(&loop_w, lw);
    mic_worker_join(lw, &st);
    atomic_store(&acked, st.acked);
    if (atomic_load(&loop_last) > 0)   /* the stop's own time, for the reader */
        fprintf(stderr, "workers: loop: the last delivery was handled after %.3f s, the loop "
                "ended after %.3f s\n", atomic_load(&loop_last) - loop_t0, now_s() - loop_t0);
    if (st.lease_lost || st.retried || st.dead_lettered || st.claim_failures)
        fprintf(stderr, "workers: loop: %ld lease(s) lost, %ld retried, %ld dead-lettered, "
                "%ld claim failure(s)\n", st.lease_lost, st.retried, st.dead_lettered,
                st.claim_failures);
    if (st.refused) {
        fprintf(stderr, "claim: %s\n", mic_failure_text(&st.failure, why, sizeof why));
        return -1;
    }
    return 0;
}

/* ---- Main ---- */

static void usage(void)
{
    fprintf(stderr,
            "usage: workers --url URL --group G [--driver libmic|loop|raw] [--workers N] [--max M]\n"
            "               [--expect N [--first-seq S]] [--rounds R] [--max-seconds S] [--verify-order 1]\n"
            "               [--key SECRET (default $MIC_KEY)] [--cacert FILE] [--lat-log FILE]\n");
}

static int options(int argc, char **argv, uint64_t *first)
{
    int i;

    for (i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--url")) {
            if (sscanf(argv[i + 1], "http://%63[^:]:%d", host, &port) != 2 &&
                sscanf(argv[i + 1], "https://%63[^:]:%d", host, &port) != 2)
                return 2;
            https = !strncmp(argv[i + 1], "https://", 8);
            snprintf(url, sizeof url, "%s", argv[i + 1]);
            if (url[0] && url[strlen(url) - 1] == '/')
                url[strlen(url) - 1] = 0;
        } else if (!strcmp(argv[i], "--driver")) {
            for (driver = 0; driver < 3 && strcmp(argv[i + 1], driver_names[driver]); driver++)
                ;
            if (driver == 3)
                return 2;
        } else if (!strcmp(argv[i], "--cacert")) {
            cacert = argv[i + 1];
        } else if (!strcmp(argv[i], "--lat-log")) {
            lat_log = argv[i + 1];
        } else if (!strcmp(argv[i], "--group"))
            snprintf(group, sizeof group, "%s", argv[i + 1]);
        else if (!strcmp(argv[i], "--workers"))
            nworkers = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--max"))
            maxc = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--expect"))
            expect = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--rounds"))
            rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--first-seq"))
            *first = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--max-seconds"))
            max_seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--verify-order"))
            verify_order = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--key"))
            key = argv[i + 1];
        else
            return 2;
    }
    if (i < argc)
        return 2;
    if (!key && getenv("MIC_KEY") && *getenv("MIC_KEY"))
        key = getenv("MIC_KEY");
    if (key && (strlen(key) > 512 || strpbrk(key, " \r\n"))) {
        fprintf(stderr, "workers: --key: at most 512 characters, no spaces\n");
        return 2;
    }
    if (!port || !group[0] || (!expect && !rounds) || nworkers < 1 || maxc < 1 || maxc > 1000) {
        fprintf(stderr, "workers: --url, --group and --expect or --rounds are required\n");
        return 2;
    }
    if (driver == D_LOOP && (rounds || !expect)) {
        fprintf(stderr, "workers: --driver loop drains (--expect): the loop does not say when "
                        "it claims, so it has no claim latency (--rounds)\n");
        return 2;
    }
    return 0;
}

/* The handle the libmic and loop drivers dup. */
static int client_setup(void)
{
    const char *urls[1] = {url};
    struct mic_client_opts o = {.urls = urls, .nurls = 1, .key = key, .cafile = cacert,
                                .user_agent = "mic-bench-workers"};
    struct mic_failure f;
    char why[800];

    if (mic_client_new(&o, &proto, &f)) {
        fprintf(stderr, "workers: %s\n", mic_failure_text(&f, why, sizeof why));
        return -1;
    }
    return 0;
}

/* Print "name":value, or null when the driver does not measure it. */
static void put(const char *name, int have, int prec, double v)
{
    printf(",\"%s\":", name);
    if (have)
        printf("%.*f", prec, v);
    else
        printf("null");
}

int main(int argc, char **argv)
{
    uint64_t first = 0;
    long missing = 0;
    double t0, secs, p50 = 0, p99 = 0;
    pthread_t *th;
    struct worker *ws;
    double *all;
    long nall = 0;
    int failed = 0, counted;

    if (options(argc, argv, &first)) {
        usage();
        return 2;
    }
    counted = driver != D_LOOP;
    if (driver == D_RAW ? raw_setup() : client_setup())
        return 2;
    th = calloc((size_t)nworkers, sizeof *th);
    ws = calloc((size_t)nworkers, sizeof *ws);
    t0 = now_s();
    if (driver == D_LOOP) {
        failed = loop_run() != 0;
    } else {
        for (int i = 0; i < nworkers; i++) {
            ws[i].id = i;
            pthread_create(&th[i], NULL, driver == D_RAW ? raw_work : libmic_work, &ws[i]);
        }
        for (int i = 0; i < nworkers; i++)
            pthread_join(th[i], NULL);
    }
    secs = now_s() - t0;
    for (int i = 0; i < nworkers; i++)
        nall += ws[i].nlat;
    all = malloc((size_t)(nall ? nall : 1) * sizeof *all);
    nall = 0;
    if (lat_log) {
        FILE *f = fopen(lat_log, "w");

        for (int i = 0; f && i < nworkers; i++)
            for (int j = 0; j < ws[i].nlat; j++)
                fprintf(f, "%.0f %.0f\n", ws[i].at[j] * 1e9, ws[i].lat[j] * 1000);
        if (!f || ferror(f) | fclose(f)) {
            fprintf(stderr, "workers: cannot write %s\n", lat_log);
            failed = 1;
        }
    }
    for (int i = 0; i < nworkers; i++) {
        memcpy(all + nall, ws[i].lat, (size_t)ws[i].nlat * sizeof *all);
        nall += ws[i].nlat;
        free(ws[i].lat);
        free(ws[i].at);
    }
    qsort(all, (size_t)nall, sizeof *all, cmp_d);
    if (nall) {
        p50 = all[nall / 2];
        p99 = all[(nall * 99) / 100];
    }
    if (first && expect)
        for (uint64_t s = first; s < first + (uint64_t)expect; s++)
            missing += s >= seen_len || !seen[s];
    printf("{\"driver\":\"%s\",\"workers\":%d,\"max\":%d,\"acked\":%ld", driver_names[driver],
           nworkers, maxc, atomic_load(&acked));
    put("claims", counted, 0, (double)atomic_load(&claims));
    put("empty_claims", counted, 0, (double)atomic_load(&empties));
    printf(",\"seconds\":%.3f,\"events_per_s\":%.1f", secs, atomic_load(&acked) / secs);
    put("claim_p50_ms", counted, 3, p50);
    put("claim_p99_ms", counted, 3, p99);
    printf(",\"duplicates\":%ld,\"missing\":%ld,\"order_violations\":%ld}\n",
           atomic_load(&dups), missing, atomic_load(&disorder));
    free(all);
    free(last_version);
    free(th);
    free(ws);
    free(seen);
    mic_client_free(proto);
    if (tls)
        SSL_CTX_free(tls);
    return failed || (expect && atomic_load(&acked) < expect) || atomic_load(&dups) ||
                   atomic_load(&disorder) ? 1 : 0;
}
