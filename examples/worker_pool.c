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


struct args {
    struct ex_conn conn;
    struct ex_loop loop;
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
            "  --key SECRET     API key (default $MIC_KEY)\n" EX_LOOP_USAGE,
            DEFAULT_URL);
}

static int parse(int argc, char **argv, struct args *a)
{
    static const struct option opts[] = {
        EX_CONN_OPTIONS, EX_LOOP_OPTIONS, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0},
    };
    int ch, taken;

    *a = (struct args){.loop = EX_LOOP_DEFAULTS};
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if ((taken = ex_conn_option(&a->conn, ch, optarg, "worker_pool")) < 0 ||
            (!taken && (taken = ex_loop_option(&a->loop, ch, optarg, "worker_pool")) < 0))
            return EXIT_USAGE;
        if (taken)
            continue;
        if (ch == 'h') {
            usage(stdout);
            exit(0);
        }
        usage(stderr);
        return EXIT_USAGE;
    }
    if (optind < argc || !a->loop.group) {
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
    if (!(t = calloc((size_t)a.loop.threads, sizeof *t))) {
        fprintf(stderr, "worker_pool: out of memory\n");
        mic_client_free(c);
        return EXIT_FAIL;
    }
    ex_loop_opts(&a.loop, "worker_pool", &wo);
    wo.handler = handle;
    wo.arg = t;
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
        for (int i = 0; i < a.loop.threads; i++)
            printf("%s%ld", i ? "," : "", t[i].handled);
        printf("]}\n");
    }
    free(t);
    mic_client_free(c);
    return rc;
}
