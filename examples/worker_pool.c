/* worker_pool.c - a pool of handler threads on mic_worker_run (an example).
 *
 * DESIGN.  mic_worker_run does the work a worker pool needs and that is
 * easy to get wrong by hand: each of --threads threads long-polls claims
 * (of up to --max deliveries) from the group, runs the handler on each
 * delivery and acks or nacks it as the handler says; one more thread
 * extends the leases held, every third of the lease TTL, and fences a
 * handler whose lease was lost (mic_job_lease_lost).  SIGINT and SIGTERM
 * stop it cleanly (stop_on_signals): the handlers in flight finish and are
 * settled, the rest of their claims is given back at once.
 *
 * The handler here "handles" an event by counting it for its thread (a
 * real one would send the e-mail, call the payment API, ...).  It asks
 * mic_job_lease_lost before it commits its effect: once the lease is lost
 * another worker may hold the event, and nothing must be committed.  The
 * counters are one per thread, each written by its own thread only, and
 * read after mic_worker_run has joined the threads: no lock.
 *
 * --idle-exit S stops the pool when no delivery came for S seconds (for
 * scripts and tests); the long-poll wait is then capped at S, because the
 * loop looks at the idle time only when a claim comes back empty.
 *
 * Output: one JSON line on stdout, struct mic_worker_stats and the events
 * each thread handled:
 *   {"claimed","acked","retried","dead_lettered","lease_lost","extends",
 *    "claim_failures","handled":[per thread]}
 * Exit status: 0 when the loop ran, 1 when it could not start, 2 on a
 * usage error.
 *
 *   worker_pool --url http://127.0.0.1:8080 --group billing --threads 4 */
#define _GNU_SOURCE
#include "example.h"
#include "mic.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS_MAX 256

struct args {
    struct ex_conn conn;
    const char *group;
    int threads, max;
    double lease_ttl_s, wait_s, idle_exit_s;
};

/* What one handler thread did; padded so threads do not share a line. */
struct tally {
    long handled;
    char pad[64 - sizeof(long)];
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: worker_pool --group G [--url URL]... [--key SECRET] [--threads T]\n"
            "                   [--max M] [--lease-ttl S] [--wait S] [--idle-exit S]\n"
            "  --group G        the consumer group to work for (required)\n"
            "  --url URL        a micd node (repeat for several; default $MIC_URL or %s)\n"
            "  --key SECRET     API key (default $MIC_KEY)\n"
            "  --threads T      handler threads (default 4, at most %d)\n"
            "  --max M          deliveries per claim (default 10)\n"
            "  --lease-ttl S    lease of a claim in seconds (default 30)\n"
            "  --wait S         long-poll wait in seconds (default 20)\n"
            "  --idle-exit S    stop when no delivery came for S seconds (default: never)\n",
            DEFAULT_URL, THREADS_MAX);
}

static int parse(int argc, char **argv, struct args *a)
{
    static const struct option opts[] = {
        EX_CONN_OPTIONS,
        {"group", required_argument, NULL, 'g'},     {"threads", required_argument, NULL, 't'},
        {"max", required_argument, NULL, 'm'},       {"lease-ttl", required_argument, NULL, 'l'},
        {"wait", required_argument, NULL, 'w'},      {"idle-exit", required_argument, NULL, 'i'},
        {"help", no_argument, NULL, 'h'},            {NULL, 0, NULL, 0},
    };
    int ch, taken;
    double v;

    *a = (struct args){.threads = 4, .max = 10, .lease_ttl_s = 30, .wait_s = 20};
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if ((taken = ex_conn_option(&a->conn, ch, optarg, "worker_pool")) < 0)
            return EXIT_USAGE;
        if (taken)
            continue;
        switch (ch) {
        case 'g':
            a->group = optarg;
            break;
        case 't':
        case 'm':
            if ((v = ex_number(optarg, 1, ch == 't' ? THREADS_MAX : 1000)) < 0 || v != (int)v) {
                fprintf(stderr, "worker_pool: --%s takes an integer from 1 to %d\n",
                        ch == 't' ? "threads" : "max", ch == 't' ? THREADS_MAX : 1000);
                return EXIT_USAGE;
            }
            *(ch == 't' ? &a->threads : &a->max) = (int)v;
            break;
        case 'l':
        case 'w':
        case 'i':
            /* --wait 0 would be libmic's default (20), so it starts above 0. */
            if ((v = ex_number(optarg, ch == 'l' ? 1 : ch == 'w' ? 0.001 : 0,
                            ch == 'w' ? 60 : 43200)) < 0) {
                fprintf(stderr, "worker_pool: bad value for --%s: %s\n",
                        ch == 'l' ? "lease-ttl" : ch == 'w' ? "wait" : "idle-exit", optarg);
                return EXIT_USAGE;
            }
            *(ch == 'l' ? &a->lease_ttl_s : ch == 'w' ? &a->wait_s : &a->idle_exit_s) = v;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (optind < argc || !a->group) {
        fprintf(stderr, optind < argc ? "worker_pool: unexpected argument %s\n"
                                      : "worker_pool: give --group%s\n",
                optind < argc ? argv[optind] : "");
        return EXIT_USAGE;
    }
    ex_conn_defaults(&a->conn);
    return 0;
}

/* The handler: one delivery, on worker thread mic_job_thread(job). */
static enum mic_verdict handle(mic_job *job, const struct mic_leased *d, mic_client *c,
                               void *arg)
{
    struct tally *t = arg;

    (void)c;
    (void)d; /* d->event is the event; d->event_id, d->aggregate_id, ... its fields */
    /* The effect would go here.  Before committing it: is the lease still
     * ours?  If not, commit nothing (the verdict is then ignored). */
    if (mic_job_lease_lost(job))
        return MIC_RETRY;
    t[mic_job_thread(job)].handled++;
    return MIC_DONE;
}

int main(int argc, char **argv)
{
    struct args a;
    struct mic_worker_opts wo = {0};
    struct mic_worker_stats st = {0};
    struct tally *t;
    mic_client *c;
    char why[800];
    int rc;

    if ((rc = parse(argc, argv, &a)))
        return rc;
    if (ex_client(&a.conn, "worker_pool", &c))
        return EXIT_USAGE;
    if (!(t = calloc((size_t)a.threads, sizeof *t))) {
        fprintf(stderr, "worker_pool: out of memory\n");
        mic_client_free(c);
        return EXIT_FAIL;
    }
    wo.group = a.group;
    wo.threads = a.threads;
    wo.max = a.max;
    wo.lease_ttl_s = a.lease_ttl_s;
    /* The idle time is looked at when a claim comes back empty. */
    wo.wait_s = a.idle_exit_s > 0 && a.idle_exit_s < a.wait_s ? a.idle_exit_s : a.wait_s;
    wo.worker = "worker_pool";
    wo.handler = handle;
    wo.arg = t;
    wo.stop_on_signals = 1;
    wo.idle_exit_s = a.idle_exit_s;
    if (mic_worker_run(c, &wo, &st) && !st.refused) {
        fprintf(stderr, "worker_pool: the worker loop could not start\n");
        rc = EXIT_FAIL;
    } else {
        if (st.refused) {
            fprintf(stderr, "worker_pool: claims refused: %s\n",
                    mic_failure_text(&st.failure, why, sizeof why));
            rc = EXIT_FAIL;
        }
        printf("{\"claimed\":%ld,\"acked\":%ld,\"retried\":%ld,\"dead_lettered\":%ld,"
               "\"lease_lost\":%ld,\"extends\":%ld,\"claim_failures\":%ld,\"handled\":[",
               st.claimed, st.acked, st.retried, st.dead_lettered, st.lease_lost, st.extends,
               st.claim_failures);
        for (int i = 0; i < a.threads; i++)
            printf("%s%ld", i ? "," : "", t[i].handled);
        printf("]}\n");
    }
    free(t);
    mic_client_free(c);
    return rc;
}
