/* sink_watch.c - the JetStream side of bench/sink.sh (make bench-sink,
 * issue 17): what micd's NATS sink relays, as a consumer of the stream
 * sees it.
 *
 *   sink_watch --url nats://HOST:PORT --stream S --create SUBJECTS
 *       create stream S (file storage, 1 replica, Nats-Msg-Id duplicate
 *       window 2 min) over SUBJECTS, then exit
 *   sink_watch --url nats://HOST:PORT --stream S --subject SUBJ --count N
 *              [--max-seconds T]
 *       read the messages of SUBJ from the start of S with a push
 *       consumer until N distinct Nats-Msg-Id have arrived (or T
 *       seconds, default 300), then print one JSON line:
 *       {"messages","distinct","seconds","first_to_last_s",
 *        "latency_p50_ms","latency_p99_ms","order_violations"}
 *       where a message's latency is the time it reached this consumer
 *       minus its mic-created-at header (micd's stamp when the publish
 *       came in, when the publisher set no created_at), "seconds" runs from
 *       this program's start, and an order violation is a message whose
 *       mic-aggregate-version is not above the last one of its aggregate.
 *
 * Start it before the load: it then measures publish to JetStream to
 * consumer.  Exit status 0 when N distinct arrived, 1 otherwise. */
#define _GNU_SOURCE
#include <nats/nats.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int64_t wall_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* "2026-12-03T10:00:00.123456Z" -> µs since the epoch, or -1. */
static int64_t parse_time(const char *s)
{
    struct tm tm;
    int us = 0;
    char *end;

    memset(&tm, 0, sizeof tm);
    if (!s || !(end = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm)))
        return -1;
    if (*end == '.') {
        int digits = 0;
        for (end++; *end >= '0' && *end <= '9'; end++, digits++)
            if (digits < 6)
                us = us * 10 + (*end - '0');
        for (; digits < 6; digits++)
            us *= 10;
    }
    return (int64_t)timegm(&tm) * 1000000 + us;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The distinct ids seen: an open-addressing set of strdup'ed strings. */
struct idset {
    char **slot;
    size_t cap, n;
};

static uint64_t hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* 1 if 'id' was new, 0 if seen, -1 out of memory. */
static int idset_add(struct idset *s, const char *id)
{
    size_t i;

    if ((s->n + 1) * 2 > s->cap) {
        struct idset g = {calloc(s->cap ? s->cap * 2 : 1024, sizeof(char *)), s->cap ? s->cap * 2 : 1024, 0};
        if (!g.slot)
            return -1;
        for (i = 0; i < s->cap; i++)
            if (s->slot[i]) {
                size_t j = hash(s->slot[i]) & (g.cap - 1);
                while (g.slot[j])
                    j = (j + 1) & (g.cap - 1);
                g.slot[j] = s->slot[i];
                g.n++;
            }
        free(s->slot);
        *s = g;
    }
    for (i = hash(id) & (s->cap - 1); s->slot[i]; i = (i + 1) & (s->cap - 1))
        if (!strcmp(s->slot[i], id))
            return 0;
    if (!(s->slot[i] = strdup(id)))
        return -1;
    s->n++;
    return 1;
}

/* The last version seen per aggregate: the same set, values alongside. */
struct aggs {
    char **key;
    uint64_t *ver;
    size_t cap, n;
};

/* Returns 1 if 'v' is not above the last version of 'agg' (a violation). */
static int aggs_check(struct aggs *a, const char *agg, uint64_t v)
{
    size_t i;

    if ((a->n + 1) * 2 > a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 1024;
        struct aggs g = {calloc(cap, sizeof(char *)), calloc(cap, sizeof(uint64_t)), cap, 0};
        if (!g.key || !g.ver) {
            fprintf(stderr, "sink_watch: out of memory\n");
            exit(2);
        }
        for (i = 0; i < a->cap; i++)
            if (a->key[i]) {
                size_t j = hash(a->key[i]) & (cap - 1);
                while (g.key[j])
                    j = (j + 1) & (cap - 1);
                g.key[j] = a->key[i];
                g.ver[j] = a->ver[i];
                g.n++;
            }
        free(a->key);
        free(a->ver);
        *a = g;
    }
    for (i = hash(agg) & (a->cap - 1); a->key[i]; i = (i + 1) & (a->cap - 1))
        if (!strcmp(a->key[i], agg)) {
            int bad = v <= a->ver[i];
            if (v > a->ver[i])
                a->ver[i] = v;
            return bad;
        }
    a->key[i] = strdup(agg);
    a->ver[i] = v;
    a->n++;
    return 0;
}

static int create_stream(jsCtx *js, const char *stream, const char *subjects)
{
    jsStreamConfig cfg;
    jsErrCode jerr = 0;
    const char *subj[1] = {subjects};
    natsStatus s;

    jsStreamConfig_Init(&cfg);
    cfg.Name = stream;
    cfg.Subjects = subj;
    cfg.SubjectsLen = 1;
    cfg.Storage = js_FileStorage;
    cfg.Duplicates = (int64_t)120 * 1000000000; /* ns */
    s = js_AddStream(NULL, js, &cfg, NULL, &jerr);
    if (s != NATS_OK) {
        fprintf(stderr, "sink_watch: js_AddStream %s: %s (%d)\n", stream, natsStatus_GetText(s), (int)jerr);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *url = NULL, *stream = NULL, *create = NULL, *subject = NULL;
    long count = 0, max_s = 300;
    natsConnection *nc = NULL;
    natsSubscription *sub = NULL;
    jsCtx *js = NULL;
    jsSubOptions so;
    struct idset ids = {0};
    struct aggs ag = {0};
    int64_t t0 = wall_us(), first = 0, last = 0, *lat = NULL;
    long nlat = 0, msgs = 0, order_bad = 0;
    int rc = 1;

    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--url"))
            url = argv[i + 1];
        else if (!strcmp(argv[i], "--stream"))
            stream = argv[i + 1];
        else if (!strcmp(argv[i], "--create"))
            create = argv[i + 1];
        else if (!strcmp(argv[i], "--subject"))
            subject = argv[i + 1];
        else if (!strcmp(argv[i], "--count"))
            count = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--max-seconds"))
            max_s = atol(argv[i + 1]);
        else
            break;
    }
    if (!url || !stream || (!create && (!subject || count <= 0))) {
        fprintf(stderr, "usage: sink_watch --url URL --stream S (--create SUBJECTS | --subject SUBJ --count N "
                        "[--max-seconds T])\n");
        return 2;
    }
    if (natsConnection_ConnectTo(&nc, url) != NATS_OK || natsConnection_JetStream(&js, nc, NULL) != NATS_OK) {
        fprintf(stderr, "sink_watch: cannot connect to %s\n", url);
        return 2;
    }
    if (create) {
        rc = create_stream(js, stream, create);
        goto out;
    }
    if (!(lat = malloc((size_t)count * 2 * sizeof *lat)))
        goto out;
    jsSubOptions_Init(&so);
    so.Stream = stream;
    so.Config.DeliverPolicy = js_DeliverAll;
    so.Config.AckPolicy = js_AckNone;
    /* a push consumer: each message comes as soon as the stream has it
     * (a pull Fetch would add its own wait to the latency) */
    if (js_SubscribeSync(&sub, js, subject, NULL, &so, NULL) != NATS_OK) {
        fprintf(stderr, "sink_watch: cannot subscribe to %s on %s\n", subject, stream);
        goto out;
    }
    while ((long)ids.n < count && wall_us() - t0 < (int64_t)max_s * 1000000) {
        natsMsg *m = NULL;
        natsStatus s = natsSubscription_NextMsg(&m, sub, 500);
        int64_t now = wall_us(), c;
        const char *id = NULL, *at = NULL, *atype = NULL, *aid = NULL, *ver = NULL;

        if (s == NATS_TIMEOUT)
            continue;
        if (s != NATS_OK)
            break;
        natsMsgHeader_Get(m, "Nats-Msg-Id", &id);
        natsMsgHeader_Get(m, "mic-created-at", &at);
        natsMsgHeader_Get(m, "mic-aggregate-type", &atype);
        natsMsgHeader_Get(m, "mic-aggregate-id", &aid);
        natsMsgHeader_Get(m, "mic-aggregate-version", &ver);
        msgs++;
        if (!first)
            first = now;
        last = now;
        if (id && idset_add(&ids, id) == 1 && (c = parse_time(at)) > 0 && nlat < count * 2)
            lat[nlat++] = now - c;
        if (atype && aid && ver) {
            char key[512];
            snprintf(key, sizeof key, "%s\n%s", atype, aid);
            order_bad += aggs_check(&ag, key, strtoull(ver, NULL, 10));
        }
        natsMsg_Destroy(m);
    }
    qsort(lat, (size_t)nlat, sizeof *lat, cmp_i64);
    printf("{\"messages\":%ld,\"distinct\":%zu,\"seconds\":%.3f,\"first_to_last_s\":%.3f,"
           "\"latency_p50_ms\":%.2f,\"latency_p99_ms\":%.2f,\"order_violations\":%ld}\n",
           msgs, ids.n, (double)((last ? last : wall_us()) - t0) / 1e6, (double)(last - first) / 1e6,
           nlat ? (double)lat[nlat / 2] / 1000 : -1.0,
           nlat ? (double)lat[(nlat * 99) / 100 < nlat ? (nlat * 99) / 100 : nlat - 1] / 1000 : -1.0,
           order_bad);
    rc = (long)ids.n >= count ? 0 : 1;
out:
    free(lat);
    natsSubscription_Destroy(sub);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    return rc;
}
