/* rangeread.c - one time-range read from micd as an NDJSON stream, timed
 * inside the process (W5 of bench/peers.py and bench/range.sh).
 *
 *   rangeread --url http://127.0.0.1:PORT --topic T --from ISO --to ISO
 *
 * GET /v1/topics/T/events?from=..&to=.. with Accept: application/x-ndjson
 * through libmic (mic_stream), reading the body as it arrives.  The clock runs from
 * just before the request to the last byte, like the peer drivers' W5
 * (no process start-up in the figure).  Each line is checked: its
 * created_at lies in [from, to] and is not before the previous line's
 * (the stream's order is (created_at, event_id)); an event_id equal to the
 * previous one counts as a duplicate.
 *
 * Prints one JSON line: {"events","bytes","seconds","events_per_s",
 * "disorder","duplicates","out_of_window","status"}.  Exit 0 when the read
 * answered 200 with no disorder, duplicate or event out of the window. */
#define _GNU_SOURCE
#include "mic.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FIELD_MAX 128

struct reader {
    const char *from, *to;            /* ISO-8601 bounds, same format as created_at */
    char *line;                       /* a line split across two callbacks */
    size_t len, cap;
    char prev_at[FIELD_MAX], prev_id[FIELD_MAX];
    long events, disorder, dups, outside;
    unsigned long long bytes;
    int failed;
};

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The string value of "key" in line p[0..n) into out (cut at FIELD_MAX-1);
 * -1 when it is not there. */
static int field(const char *p, size_t n, const char *key, char *out)
{
    size_t kl = strlen(key);
    const char *k = memmem(p, n, key, kl), *end;

    if (!k)
        return -1;
    k += kl;
    end = memchr(k, '"', (size_t)(p + n - k));
    if (!end)
        return -1;
    n = (size_t)(end - k) < FIELD_MAX - 1 ? (size_t)(end - k) : FIELD_MAX - 1;
    memcpy(out, k, n);
    out[n] = '\0';
    return 0;
}

/* created_at is fixed-width RFC 3339 UTC with microseconds, so byte order
 * is time order. */
static void check_line(struct reader *r, const char *p, size_t n)
{
    char at[FIELD_MAX], id[FIELD_MAX];

    r->events++;
    if (field(p, n, "\"created_at\":\"", at) || field(p, n, "\"event_id\":\"", id)) {
        r->failed = 1;
        return;
    }
    if (strcmp(at, r->from) < 0 || strcmp(at, r->to) > 0)
        r->outside++;
    if (r->events > 1) {
        int c = strcmp(at, r->prev_at);

        if (c == 0 && strcmp(id, r->prev_id) == 0)
            r->dups++;
        else if (c < 0 || (c == 0 && strcmp(id, r->prev_id) < 0))
            r->disorder++;
    }
    memcpy(r->prev_at, at, sizeof at);
    memcpy(r->prev_id, id, sizeof id);
}

/* mic_stream's chunk callback: split into lines and check each.  Returns
 * 0 to go on, 1 (the transfer stops) when memory runs out. */
static int on_body(const char *p, size_t n, void *arg)
{
    struct reader *r = arg;
    size_t i = 0;

    r->bytes += n;
    while (i < n) {
        const char *nl = memchr(p + i, '\n', n - i);
        size_t take = nl ? (size_t)(nl - (p + i)) : n - i;

        if (r->len || !nl) {        /* join with the piece kept from before */
            if (r->len + take > r->cap) {
                size_t cap = (r->len + take) * 2;
                char *q = realloc(r->line, cap);

                if (!q) {
                    r->failed = 1;
                    return 1;       /* stops the transfer */
                }
                r->line = q;
                r->cap = cap;
            }
            memcpy(r->line + r->len, p + i, take);
            r->len += take;
            if (nl) {
                check_line(r, r->line, r->len);
                r->len = 0;
            }
        } else {
            check_line(r, p + i, take);
        }
        i += take + (nl ? 1 : 0);
    }
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: rangeread --url http(s)://HOST:PORT --topic T --from ISO --to ISO\n"
               "                 [--key SECRET (default $MIC_KEY)] [--cacert FILE]\n"
               "Reads the topic's events with created_at in [from, to] as NDJSON and prints\n"
               "one JSON line with the count, the rate and the order checks.\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"url", 1, NULL, 'u'}, {"topic", 1, NULL, 't'}, {"from", 1, NULL, 'f'},
        {"to", 1, NULL, 'o'}, {"help", 0, NULL, 'h'}, {"key", 1, NULL, 'k'},
        {"cacert", 1, NULL, 'c'}, {NULL, 0, NULL, 0}};
    const char *url = NULL, *topic = NULL, *key = getenv("MIC_KEY"), *cacert = NULL;
    struct reader r;
    struct mic_client_opts mo = {0};
    struct mic_failure f;
    mic_client *c;
    char *q, et[640], text[800];
    long status = 200;
    double t0, secs;
    int ch;

    memset(&r, 0, sizeof r);
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 'u': url = optarg; break;
        case 't': topic = optarg; break;
        case 'f': r.from = optarg; break;
        case 'o': r.to = optarg; break;
        case 'k': key = optarg; break;
        case 'c': cacert = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!url || !topic || !r.from || !r.to || optind != argc) {
        usage(stderr);
        return 2;
    }
    mo.urls = &url;
    mo.nurls = 1;
    mo.key = key && *key ? key : NULL;
    mo.cafile = cacert;
    if (mic_client_new(&mo, &c, &f)) {
        fprintf(stderr, "rangeread: %s\n", mic_failure_text(&f, text, sizeof text));
        return 2;
    }
    if (!mic_path_escape(topic, et, sizeof et) ||
        asprintf(&q, "/v1/topics/%s/events?from=%s&to=%s", et, r.from, r.to) < 0)
        return 1;
    t0 = now_s();
    if (mic_stream(c, 0, q, "application/x-ndjson", on_body, &r)) {
        const struct mic_failure *e = mic_client_failure(c);

        fprintf(stderr, "rangeread: %s\n", mic_failure_text(e, text, sizeof text));
        status = e->status;
        r.failed = 1;
    }
    secs = now_s() - t0;
    if (r.len)                      /* a last line without its newline */
        r.failed = 1;
    printf("{\"events\":%ld,\"bytes\":%llu,\"seconds\":%.6f,\"events_per_s\":%.0f,"
           "\"disorder\":%ld,\"duplicates\":%ld,\"out_of_window\":%ld,\"status\":%ld}\n",
           r.events, r.bytes, secs, secs > 0 ? r.events / secs : 0.0, r.disorder, r.dups,
           r.outside, status);
    mic_client_free(c);
    free(q);
    free(r.line);
    return r.failed || status != 200 || r.disorder || r.dups || r.outside ? 1 : 0;
}
