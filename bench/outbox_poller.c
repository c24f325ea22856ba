/* outbox_poller.c - the database side of the outbox relay benchmark
 * (bench/relay.sh, issue 15), libpq only.  Three modes, each printing one
 * JSON line on stdout:
 *
 *   --workers N --expect ROWS   the ceiling of the database side: N threads,
 *       each on its own connection, claim and mark rows the way mic-relay
 *       claims them (UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP
 *       LOCKED) RETURNING id, one statement, its own transaction) but
 *       publish nothing.  A thread stops when a claim comes back empty once
 *       ROWS rows were marked in all.  The time runs from the start of the
 *       first claim to the end of the claim that reached ROWS.
 *   --wait ROWS   waits until no row is 'pending' or 'processing' (the
 *       first entry of the partial claim index), polling every 50 ms, then
 *       counts the 'dispatched' rows; the time runs from its connection,
 *       after which it creates --ready-file (bench/relay.sh starts the
 *       relays then).
 *   --produce RATE --seconds S   appends RATE rows a second for S seconds
 *       with mic_outbox_append, each row its own committed transaction, on
 *       --workers connections (RATE / N each, paced on a fixed schedule,
 *       so a late append does not lower the rate that follows).
 *
 * Every loop is bounded by --max-seconds.  Exit 0 when the count was
 * reached (or all rows appended), 1 otherwise, 2 on a usage error.
 */
#define _GNU_SOURCE
#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WORKERS_MAX 64
#define WAIT_POLL_MS 50

static struct {
    const char *pg, *topic, *aggregate_type, *ready_file;
    long workers, batch, expect, wait, rate, seconds, max_seconds;
} opt = {.topic = "relay", .aggregate_type = "acct", .workers = 1, .batch = 100,
         .max_seconds = 300};

static atomic_long marked, appended, behind_max_us, failed;
static double t_start, t_done, deadline;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_until(double t)
{
    double d = t - now_s();
    if (d > 0) {
        struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

static PGconn *connect_db(void)
{
    PGconn *c = PQconnectdb(opt.pg);
    if (PQstatus(c) != CONNECTION_OK) {
        fprintf(stderr, "outbox_poller: connect: %s", PQerrorMessage(c));
        PQfinish(c);
        return NULL;
    }
    return c;
}

/* ---- --workers: claim and mark, publish nothing ---- */

static const char CLAIM_SQL[] =
    "UPDATE mic_outbox SET status = 'dispatched', dispatched_at = now() "
    "WHERE id IN (SELECT id FROM mic_outbox WHERE status = 'pending' "
    "ORDER BY priority DESC, id LIMIT $1 FOR UPDATE SKIP LOCKED) RETURNING id";

static void *poll_thread(void *arg)
{
    PGconn *c = arg;
    char batch[24];
    const char *params[1] = {batch};

    snprintf(batch, sizeof batch, "%ld", opt.batch);
    while (now_s() < deadline) {
        PGresult *r = PQexecParams(c, CLAIM_SQL, 1, NULL, params, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
            fprintf(stderr, "outbox_poller: claim: %s", PQerrorMessage(c));
            PQclear(r);
            atomic_fetch_add(&failed, 1);
            return NULL;
        }
        long n = PQntuples(r);
        PQclear(r);
        if (n) {
            long total = atomic_fetch_add(&marked, n) + n;
            if (total >= opt.expect && total - n < opt.expect)
                t_done = now_s();
        } else if (atomic_load(&marked) >= opt.expect) {
            return NULL;
        }
    }
    return NULL;
}

/* ---- --produce: appends at a fixed rate ---- */

static const char APPEND_SQL[] =
    "SELECT mic_outbox_append($1, $2, 'a' || ($3::bigint % 1000), 'x', "
    "jsonb_build_object('i', $3::bigint))";

struct producer {
    PGconn *c;
    long k;             /* this thread's index: it appends rows k, k+N, ... */
};

static void *produce_thread(void *arg)
{
    struct producer *p = arg;
    long total = opt.rate * opt.seconds;
    double every = (double)opt.workers / (double)opt.rate;
    char i[24];
    const char *params[3] = {opt.topic, opt.aggregate_type, i};

    for (long g = p->k, j = 0; g < total; g += opt.workers, j++) {
        double due = t_start + (double)j * every;
        double late = now_s() - due;
        if (late > 0) {
            long us = (long)(late * 1e6), m = atomic_load(&behind_max_us);
            while (us > m && !atomic_compare_exchange_weak(&behind_max_us, &m, us))
                ;
        }
        sleep_until(due);
        if (now_s() > deadline)
            break;
        snprintf(i, sizeof i, "%ld", g);
        PGresult *r = PQexecParams(p->c, APPEND_SQL, 3, NULL, params, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
            fprintf(stderr, "outbox_poller: append: %s", PQerrorMessage(p->c));
            PQclear(r);
            atomic_fetch_add(&failed, 1);
            return NULL;
        }
        PQclear(r);
        atomic_fetch_add(&appended, 1);
    }
    return NULL;
}

/* ---- --wait: until nothing is left to publish ---- */

static long count(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    long n = -1;
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
        n = atol(PQgetvalue(r, 0, 0));
    else
        fprintf(stderr, "outbox_poller: count: %s", PQerrorMessage(c));
    PQclear(r);
    return n;
}

static int run_wait(void)
{
    PGconn *c = connect_db();
    long left = -1, done = -1;

    if (!c)
        return 1;
    t_start = now_s();
    deadline = t_start + (double)opt.max_seconds;
    if (opt.ready_file) {
        FILE *f = fopen(opt.ready_file, "w");
        if (f)
            fclose(f);
    }
    while (now_s() < deadline) {
        /* whether one is left, not how many: a count would walk the
         * whole partial index every 50 ms, PostgreSQL CPU charged to the
         * relays' runs */
        left = count(c, "SELECT count(*) FROM (SELECT 1 FROM mic_outbox "
                        "WHERE status IN ('pending', 'processing') LIMIT 1) s");
        if (left == 0)
            break;
        if (left < 0)
            break;
        usleep(WAIT_POLL_MS * 1000);
    }
    t_done = now_s();
    if (left == 0)
        done = count(c, "SELECT count(*) FROM mic_outbox WHERE status = 'dispatched'");
    PQfinish(c);
    double s = t_done - t_start;
    printf("{\"mode\":\"wait\",\"rows\":%ld,\"any_left\":%ld,\"seconds\":%.3f,\"rows_per_s\":%.1f}\n",
           done, left, s, done > 0 ? (double)done / s : 0.0);
    return left == 0 && done >= opt.wait ? 0 : 1;
}

static int run_threads(void *(*fn)(void *))
{
    PGconn *conns[WORKERS_MAX];
    struct producer prod[WORKERS_MAX];
    pthread_t th[WORKERS_MAX];
    long n = 0;
    int rc = 0;

    for (; n < opt.workers; n++)
        if (!(conns[n] = connect_db())) {
            rc = 1;
            goto out;
        }
    t_start = now_s();
    deadline = t_start + (double)opt.max_seconds;
    for (long k = 0; k < n; k++) {
        prod[k] = (struct producer){conns[k], k};
        void *arg = fn == produce_thread ? (void *)&prod[k] : (void *)conns[k];
        if (pthread_create(&th[k], NULL, fn, arg)) {
            fprintf(stderr, "outbox_poller: pthread_create failed\n");
            opt.workers = k;
            rc = 1;
            break;
        }
    }
    for (long k = 0; k < opt.workers; k++)
        pthread_join(th[k], NULL);
out:
    while (n > 0)
        PQfinish(conns[--n]);
    return rc;
}

static void usage(FILE *f)
{
    fprintf(f,
        "usage: outbox_poller --pg CONNINFO MODE [options]\n"
        "modes:\n"
        "  --workers N --expect ROWS      claim and mark ROWS rows with N connections\n"
        "  --wait ROWS [--ready-file F]   wait until no row is pending or processing\n"
        "  --produce RATE --seconds S     append RATE rows/s for S s (each its own\n"
        "                                 transaction) on --workers connections\n"
        "options: --batch N (100), --topic T (relay), --aggregate-type A (acct),\n"
        "         --max-seconds S (300)\n");
}

int main(int argc, char **argv)
{
    static const struct { const char *name; long *l; const char **s; } flags[] = {
        {"--pg", NULL, &opt.pg}, {"--topic", NULL, &opt.topic},
        {"--aggregate-type", NULL, &opt.aggregate_type}, {"--ready-file", NULL, &opt.ready_file},
        {"--workers", &opt.workers, NULL}, {"--batch", &opt.batch, NULL},
        {"--expect", &opt.expect, NULL}, {"--wait", &opt.wait, NULL},
        {"--produce", &opt.rate, NULL}, {"--seconds", &opt.seconds, NULL},
        {"--max-seconds", &opt.max_seconds, NULL},
    };
    for (int i = 1; i < argc; i++) {
        size_t k = 0;
        if (!strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        while (k < sizeof flags / sizeof flags[0] && strcmp(argv[i], flags[k].name))
            k++;
        if (k == sizeof flags / sizeof flags[0] || i + 1 == argc) {
            usage(stderr);
            return 2;
        }
        i++;
        if (flags[k].s)
            *flags[k].s = argv[i];
        else if ((*flags[k].l = atol(argv[i])) <= 0) {
            fprintf(stderr, "outbox_poller: %s wants a positive number\n", flags[k].name);
            return 2;
        }
    }
    if (!opt.pg || opt.workers > WORKERS_MAX || opt.batch > 10000 ||
        (!opt.expect + !opt.wait + !opt.rate) != 2 || (opt.rate && !opt.seconds)) {
        usage(stderr);
        return 2;
    }
    if (opt.wait)
        return run_wait();
    if (opt.rate) {
        int rc = run_threads(produce_thread);
        double s = now_s() - t_start;
        long n = atomic_load(&appended);
        printf("{\"mode\":\"produce\",\"workers\":%ld,\"appended\":%ld,\"seconds\":%.3f,"
               "\"rows_per_s\":%.1f,\"target_per_s\":%ld,\"most_behind_ms\":%.1f}\n",
               opt.workers, n, s, (double)n / s, opt.rate,
               (double)atomic_load(&behind_max_us) / 1000.0);
        return rc || atomic_load(&failed) || n != opt.rate * opt.seconds;
    }
    int rc = run_threads(poll_thread);
    long n = atomic_load(&marked);
    double s = (t_done > 0 ? t_done : now_s()) - t_start;
    printf("{\"mode\":\"poller\",\"workers\":%ld,\"batch\":%ld,\"rows\":%ld,\"seconds\":%.3f,"
           "\"rows_per_s\":%.1f}\n", opt.workers, opt.batch, n, s, (double)n / s);
    return rc || atomic_load(&failed) || n != opt.expect;
}
