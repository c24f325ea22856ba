/* producer.c - publish a run of versioned events with libmic (an example).
 *
 * DESIGN.  The events belong to aggregates "order"/"o0" .. "order"/"o<A-1>":
 * event i (0 <= i < N) is version i / A + 1 of aggregate "o<i % A>", so
 * every aggregate gets versions 1, 2, 3, ... with no gap, interleaved with
 * the others as an application's writes would be.  Its event_id is derived
 * from what it is (TOPIC:o<k>:<version>), never random: running the
 * producer again, or libmic retrying a batch whose answer was lost, sends
 * the same ids, and micd reports duplicates instead of storing twice.
 *
 * The events go out with mic_publish_batch, 100 at a time.  With several
 * --url, libmic routes each event to the node its aggregate hashes to
 * (rendezvous hashing), so an aggregate's versions all land on one node.
 * A batch is atomic per node.  The first batch that fails stops the run:
 * with versions, publishing past a failed batch would leave gaps that
 * ordered consumers park on.
 *
 * Output: one JSON line on stdout,
 *   {"published":P,"duplicates":D,"failed":F,"topic_created":bool}
 * with P + D + F = N (F counts every event not stored, sent or not), and
 * the reason of a failure on stderr.  Exit status: 0 when every event is
 * stored (published now or a duplicate of an earlier run), 1 otherwise,
 * 2 on a usage error.
 *
 *   producer --url http://127.0.0.1:8080 --topic orders --create --aggregates 10 --events 1000 */
#define _GNU_SOURCE
#include "example.h"
#include "mic.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCH 100

struct args {
    struct ex_conn conn;
    const char *topic;
    long aggregates, events;
    int create;
};

struct counts {
    long published, duplicates, failed;
    int topic_created;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: producer [--url URL]... [--key SECRET] [--topic T] [--create]\n"
            "                [--aggregates A] [--events N]\n"
            "  --url URL        a micd node (repeat for several; default $MIC_URL or %s)\n"
            "  --key SECRET     API key (default $MIC_KEY)\n"
            "  --topic T        topic to publish to (default orders)\n"
            "  --create         create the topic (require_versions) if it does not exist\n"
            "  --aggregates A   aggregates order/o0..o<A-1> (default 10)\n"
            "  --events N       events in all (default 1000)\n",
            DEFAULT_URL);
}

static int parse(int argc, char **argv, struct args *a)
{
    static const struct option opts[] = {
        EX_CONN_OPTIONS,
        {"topic", required_argument, NULL, 't'},   {"create", no_argument, NULL, 'c'},
        {"aggregates", required_argument, NULL, 'a'},
        {"events", required_argument, NULL, 'n'},  {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int ch, taken;
    double v;

    *a = (struct args){.topic = "orders", .aggregates = 10, .events = 1000};
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if ((taken = ex_conn_option(&a->conn, ch, optarg, "producer")) < 0)
            return EXIT_USAGE;
        if (taken)
            continue;
        switch (ch) {
        case 't':
            a->topic = optarg;
            break;
        case 'c':
            a->create = 1;
            break;
        case 'a':
        case 'n':
            if ((v = ex_number(optarg, 1, 1e15)) < 0 || v != (long)v) {
                fprintf(stderr, "producer: --%s takes a positive integer\n",
                        ch == 'a' ? "aggregates" : "events");
                return EXIT_USAGE;
            }
            *(ch == 'a' ? &a->aggregates : &a->events) = (long)v;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "producer: unexpected argument %s\n", argv[optind]);
        return EXIT_USAGE;
    }
    ex_conn_defaults(&a->conn);
    /* TOPIC:o<k>:<version> must fit an event_id (128 bytes). */
    if (strlen(a->topic) > 80) {
        fprintf(stderr, "producer: a topic of at most 80 bytes, for the event ids\n");
        return EXIT_USAGE;
    }
    return 0;
}

/* Create the topic unless node 0 has it.  Returns 0 or -1 (reason on
 * stderr). */
static int topic_ensure(mic_client *c, const char *topic, int *created)
{
    char why[800];
    json_t *got = NULL, *config;
    int rc;

    *created = 0;
    if (!mic_admin_topic_get(c, topic, &got)) {
        json_decref(got);
        return 0;
    }
    if (mic_client_failure(c)->status != 404) {
        fprintf(stderr, "producer: topic %s: %s\n", topic,
                mic_failure_text(mic_client_failure(c), why, sizeof why));
        return -1;
    }
    /* Every event of this producer carries a version: have micd refuse
     * one that does not. */
    if (!(config = json_pack("{sb}", "require_versions", 1)))
        return -1;
    rc = mic_admin_topic_put(c, topic, config, NULL);
    json_decref(config);
    if (rc) {
        fprintf(stderr, "producer: create topic %s: %s\n", topic,
                mic_failure_text(mic_client_failure(c), why, sizeof why));
        return -1;
    }
    *created = 1;
    return 0;
}

/* Event i of the run (a new reference, or NULL). */
static json_t *event_new(const struct args *a, long i)
{
    long k = i % a->aggregates, v = i / a->aggregates + 1;
    char id[129], agg[32];

    snprintf(agg, sizeof agg, "o%ld", k);
    snprintf(id, sizeof id, "%s:%s:%ld", a->topic, agg, v);
    return json_pack("{ss ss ss ss sI ss s{sssI}}", "event_id", id, "topic", a->topic,
                     "aggregate_type", "order", "aggregate_id", agg,
                     "aggregate_version", (json_int_t)v,
                     "event_type", v == 1 ? "order.created" : "order.updated",
                     "payload", "order", agg, "version", (json_int_t)v);
}

/* Publish events [from, from + n) as one mic_publish_batch; adds to *k.
 * Returns 0 when every event was stored, -1 otherwise. */
static int batch_send(mic_client *c, const struct args *a, long from, size_t n,
                      struct counts *k)
{
    json_t *ev[BATCH] = {0};
    struct mic_publish_result res[BATCH];
    char why[800];
    size_t built = 0;
    int rc = -1;

    for (; built < n; built++)
        if (!(ev[built] = event_new(a, from + (long)built))) {
            fprintf(stderr, "producer: out of memory\n");
            goto out;
        }
    rc = mic_publish_batch(c, ev, n, res);
    for (size_t i = 0; i < n; i++) {
        if (!res[i].ok) {
            if (k->failed++ == 0) /* the first reason is enough */
                fprintf(stderr, "producer: %s: %s\n", res[i].event_id,
                        mic_failure_text(&res[i].fail, why, sizeof why));
        } else if (res[i].duplicate) {
            k->duplicates++;
        } else {
            k->published++;
        }
    }
out:
    for (size_t i = 0; i < built; i++)
        json_decref(ev[i]);
    return rc;
}

int main(int argc, char **argv)
{
    struct args a;
    struct counts k = {0};
    mic_client *c;
    long sent = 0;
    int rc;

    if ((rc = parse(argc, argv, &a)))
        return rc;
    if (ex_client(&a.conn, "producer", &c))
        return EXIT_USAGE;
    rc = a.create ? topic_ensure(c, a.topic, &k.topic_created) : 0;
    while (!rc && sent < a.events) {
        size_t n = a.events - sent > BATCH ? BATCH : (size_t)(a.events - sent);

        rc = batch_send(c, &a, sent, n, &k);
        sent += (long)n;
    }
    /* Whatever was not stored failed, sent or not. */
    k.failed = a.events - k.published - k.duplicates;
    printf("{\"published\":%ld,\"duplicates\":%ld,\"failed\":%ld,\"topic_created\":%s}\n",
           k.published, k.duplicates, k.failed, k.topic_created ? "true" : "false");
    mic_client_free(c);
    return k.failed ? EXIT_FAIL : 0;
}
