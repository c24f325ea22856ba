/* workers.c - a worker pool against micd, for benchmarks.
 *
 * Each of --workers threads keeps one HTTP/1.1 keep-alive connection and
 * loops: POST /v1/groups/G/claim {"max":M,"lease_ttl_s":30} then POST .../ack
 * with every delivery it got, until --expect deliveries were acked in all
 * (drain mode) or --rounds claims were made (latency mode, one delivery per
 * claim).  It counts duplicates (a seq handed out twice) and, with
 * --first-seq/--expect, missing seqs.  It stops by itself: at --expect, or
 * after --max-seconds.
 *
 *   workers --url http://127.0.0.1:PORT --group G --workers 8 --max 32 --expect 100000
 *   workers --url ... --group G --workers 1 --max 1 --rounds 2000
 *
 * An https:// URL speaks TLS (1.2 or later), checked against --cacert FILE
 * (default: the system's CAs); --key SECRET (or $MIC_KEY) is sent as
 * Authorization: Bearer.
 *
 * With --verify-order 1 (events from `loadgen --aggregates A --versions`),
 * every delivery's aggregate_version must be the one after the version last
 * taken for its aggregate; violations are counted.
 *
 * Prints one JSON line: {"workers","max","acked","claims","seconds",
 * "events_per_s","claim_p50_ms","claim_p99_ms","duplicates","missing",
 * "order_violations"}. */
#define _GNU_SOURCE
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

static char host[64] = "127.0.0.1", group[201];
static int port, nworkers = 8, maxc = 32, rounds;
static const char *key;       /* --key, else $MIC_KEY */
static const char *cacert;    /* --cacert */
static int https;
static char auth[560];        /* "Authorization: Bearer KEY\r\n" or "" */
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

struct conn {
    int fd;
    SSL *ssl;       /* https:// only */
    char *buf;
    size_t cap;
};

static SSL_CTX *tls; /* https:// URL */

static ssize_t io_write(struct conn *c, const void *p, size_t n)
{
    return c->ssl ? SSL_write(c->ssl, p, (int)n) : write(c->fd, p, n);
}

static ssize_t io_read(struct conn *c, void *p, size_t n)
{
    return c->ssl ? SSL_read(c->ssl, p, (int)n) : read(c->fd, p, n);
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
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

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

struct worker {
    int id;
    double *lat;
    int nlat, cap;
};

static void mark(uint64_t seq)
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
    pthread_mutex_unlock(&seen_lock);
}

static void *work(void *arg)
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
        if (w->nlat == w->cap) {
            w->cap = w->cap ? w->cap * 2 : 4096;
            w->lat = realloc(w->lat, (size_t)w->cap * sizeof *w->lat);
        }
        w->lat[w->nlat++] = (now_s() - a) * 1000;
        atomic_fetch_add(&claims, 1);
        len = (size_t)sprintf(ack, "{\"deliveries\":[");
        for (p = c.buf; (p = strstr(p, "{\"seq\":")); ) {
            uint64_t seq = strtoull(p + 7, &p, 10);
            char *t = strstr(p, "\"lease_token\":\""), *next;
            if (!t)
                break;
            t += 15;
            mark(seq);
            if (verify_order) {
                /* Within this delivery: aggregate a<k>, version v must
                 * follow the version taken last for a<k>. */
                char *a, *v;
                next = strstr(t, "{\"seq\":");
                a = strstr(t, "\"aggregate_id\":\"a");
                v = strstr(t, "\"aggregate_version\":");
                if (a && v && (!next || (a < next && v < next))) {
                    size_t k = strtoul(a + 17, NULL, 10);
                    uint64_t ver = strtoull(v + 20, NULL, 10);
                    pthread_mutex_lock(&seen_lock);
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
                    pthread_mutex_unlock(&seen_lock);
                }
            }
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
        if (atomic_fetch_add(&acked, n) + n >= expect && expect)
            atomic_store(&stop, 1);
        if (rounds && atomic_load(&claims) >= rounds)
            atomic_store(&stop, 1);
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

int main(int argc, char **argv)
{
    uint64_t first = 0;
    long missing = 0;
    double t0, secs;
    pthread_t *th;
    struct worker *ws;
    double *all;
    long nall = 0;

    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--url")) {
            if (sscanf(argv[i + 1], "http://%63[^:]:%d", host, &port) != 2 &&
                sscanf(argv[i + 1], "https://%63[^:]:%d", host, &port) != 2)
                return 2;
            https = !strncmp(argv[i + 1], "https://", 8);
        } else if (!strcmp(argv[i], "--cacert")) {
            cacert = argv[i + 1];
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
            first = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--max-seconds"))
            max_seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--verify-order"))
            verify_order = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--key"))
            key = argv[i + 1];
        else {
            fprintf(stderr, "usage: workers --url URL --group G [--workers N] [--max M] "
                            "[--expect N [--first-seq S]] [--rounds R] [--max-seconds S] [--verify-order 1]\n"
                            "               [--key SECRET (default $MIC_KEY)] [--cacert FILE]\n");
            return 2;
        }
    }
    if (!key && getenv("MIC_KEY") && *getenv("MIC_KEY"))
        key = getenv("MIC_KEY");
    if (key && (strlen(key) > 512 || strpbrk(key, " \r\n"))) {
        fprintf(stderr, "workers: --key: at most 512 characters, no spaces\n");
        return 2;
    }
    if (key)
        snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", key);
    if (https && (!(tls = SSL_CTX_new(TLS_client_method())) ||
                  !SSL_CTX_set_min_proto_version(tls, TLS1_2_VERSION) ||
                  (cacert ? SSL_CTX_load_verify_locations(tls, cacert, NULL)
                          : SSL_CTX_set_default_verify_paths(tls)) != 1)) {
        fprintf(stderr, "workers: cannot set up TLS\n");
        return 2;
    }
    if (tls)
        SSL_CTX_set_verify(tls, SSL_VERIFY_PEER, NULL);
    if (!port || !group[0] || (!expect && !rounds) || nworkers < 1 || maxc < 1) {
        fprintf(stderr, "workers: --url, --group and --expect or --rounds are required\n");
        return 2;
    }
    th = calloc((size_t)nworkers, sizeof *th);
    ws = calloc((size_t)nworkers, sizeof *ws);
    t0 = now_s();
    for (int i = 0; i < nworkers; i++) {
        ws[i].id = i;
        pthread_create(&th[i], NULL, work, &ws[i]);
    }
    for (int i = 0; i < nworkers; i++)
        pthread_join(th[i], NULL);
    secs = now_s() - t0;
    for (int i = 0; i < nworkers; i++)
        nall += ws[i].nlat;
    all = malloc((size_t)(nall ? nall : 1) * sizeof *all);
    nall = 0;
    for (int i = 0; i < nworkers; i++) {
        memcpy(all + nall, ws[i].lat, (size_t)ws[i].nlat * sizeof *all);
        nall += ws[i].nlat;
        free(ws[i].lat);
    }
    qsort(all, (size_t)nall, sizeof *all, cmp_d);
    if (first && expect)
        for (uint64_t s = first; s < first + (uint64_t)expect; s++)
            missing += s >= seen_len || !seen[s];
    printf("{\"workers\":%d,\"max\":%d,\"acked\":%ld,\"claims\":%ld,\"empty_claims\":%ld,"
           "\"seconds\":%.3f,\"events_per_s\":%.1f,\"claim_p50_ms\":%.3f,\"claim_p99_ms\":%.3f,"
           "\"duplicates\":%ld,\"missing\":%ld,\"order_violations\":%ld}\n",
           nworkers, maxc, atomic_load(&acked), atomic_load(&claims), atomic_load(&empties), secs,
           atomic_load(&acked) / secs, nall ? all[nall / 2] : 0, nall ? all[(nall * 99) / 100] : 0,
           atomic_load(&dups), missing, atomic_load(&disorder));
    free(all);
    free(last_version);
    free(th);
    free(ws);
    free(seen);
    return (expect && atomic_load(&acked) < expect) || atomic_load(&dups) ||
                   atomic_load(&disorder) ? 1 : 0;
}
