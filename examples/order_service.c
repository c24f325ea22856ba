/* order_service.c - the application side of the transactional outbox (an
 * example, issue 15).
 *
 * DESIGN.  An order service that never talks to micd.  Each business
 * change -- an order placed, then updated -- is ONE transaction of its own
 * PostgreSQL: the row of table `orders` and the event, appended with
 * mic_outbox_append (proto/outbox.sql), commit together or not at all.  So
 * there is no dual write: an order that exists always has its event, and
 * an event never describes an order that was rolled back.  mic-relay
 * (client/mic-relay.c) then publishes the committed events to micd, and a
 * worker pool on an ordered group (worker_pool.c) handles each order's
 * events in version order.
 *
 * --fail-every M rolls back every M-th transaction after its append, as a
 * business rule refusing the change would: its order change and its event
 * vanish together, and its aggregate version is given back.
 *
 * Output: one JSON line on stdout,
 *   {"orders","committed","rolled_back","events"}
 * where "events" counts the events committed (what the relay will
 * publish).  Exit status: 0 done, 1 PostgreSQL failed (its message on
 * stderr), 2 usage error.
 *
 *   psql -1 -f proto/outbox.sql "$PG"          # once: the outbox schema
 *   order_service --pg "$PG" --orders 100 --updates 4 --fail-every 7 */
#define _GNU_SOURCE
#include <getopt.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_FAIL 1
#define EXIT_USAGE 2

struct args {
    const char *pg, *topic;
    long orders, updates, fail_every;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: order_service --pg CONNINFO [--topic T] [--orders N] [--updates U]\n"
            "                     [--fail-every M]\n"
            "  --pg CONNINFO    the application's PostgreSQL (proto/outbox.sql applied)\n"
            "  --topic T        the events' topic (default orders)\n"
            "  --orders N       orders to place (default 100)\n"
            "  --updates U      updates of each order after it is placed (default 4)\n"
            "  --fail-every M   roll back every M-th transaction (default 0: none)\n");
}

static int parse(int argc, char **argv, struct args *a)
{
    static const struct option opts[] = {
        {"pg", 1, NULL, 'p'},     {"topic", 1, NULL, 't'},      {"orders", 1, NULL, 'o'},
        {"updates", 1, NULL, 'u'}, {"fail-every", 1, NULL, 'f'}, {"help", 0, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int ch;

    *a = (struct args){.topic = "orders", .orders = 100, .updates = 4};
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        char *end;
        long v;

        switch (ch) {
        case 'p':
            a->pg = optarg;
            break;
        case 't':
            a->topic = optarg;
            break;
        case 'o':
        case 'u':
        case 'f':
            v = strtol(optarg, &end, 10);
            if (!*optarg || *end || v < 0 || v > 100000000) {
                fprintf(stderr, "order_service: bad number for --%s: %s\n",
                        ch == 'o' ? "orders" : ch == 'u' ? "updates" : "fail-every", optarg);
                return EXIT_USAGE;
            }
            *(ch == 'o' ? &a->orders : ch == 'u' ? &a->updates : &a->fail_every) = v;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (optind < argc || !a->pg) {
        fprintf(stderr, "order_service: give --pg CONNINFO\n");
        return EXIT_USAGE;
    }
    return 0;
}

/* Run 'sql' with the text parameters params[0..n); 0, or -1 with
 * PostgreSQL's message on stderr. */
static int exec(PGconn *db, const char *sql, int n, const char *const *params)
{
    PGresult *r = PQexecParams(db, sql, n, NULL, params, NULL, NULL, 0);
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;

    if (!ok)
        fprintf(stderr, "order_service: %s", PQerrorMessage(db));
    PQclear(r);
    return ok ? 0 : -1;
}

/* Change number 'k' of order 'id' (0: placed, then updates): the business
 * row and its event in one transaction, committed or (when 'fail') rolled
 * back after the append.  0, or -1 when PostgreSQL failed. */
static int change(PGconn *db, const struct args *a, const char *id, long k, int fail)
{
    char status[32], payload[128];
    const char *row[2] = {id, status};
    const char *ev[4] = {a->topic, id, k ? "order.updated" : "order.placed", payload};

    snprintf(status, sizeof status, k ? "updated-%ld" : "placed", k);
    snprintf(payload, sizeof payload, "{\"order\":\"%s\",\"status\":\"%s\"}", id, status);
    if (exec(db, "BEGIN", 0, NULL))
        return -1;
    if (exec(db,
             k ? "UPDATE orders SET status = $2, version = version + 1 WHERE id = $1"
               : "INSERT INTO orders (id, status, version) VALUES ($1, $2, 1)",
             2, row) ||
        exec(db, "SELECT * FROM mic_outbox_append($1, 'order', $2, $3, $4::jsonb)", 4, ev)) {
        exec(db, "ROLLBACK", 0, NULL);
        return -1;
    }
    return exec(db, fail ? "ROLLBACK" : "COMMIT", 0, NULL);
}

int main(int argc, char **argv)
{
    struct args a;
    PGconn *db;
    long tx = 0, committed = 0, rolled_back = 0;
    int rc;

    if ((rc = parse(argc, argv, &a)))
        return rc;
    db = PQconnectdb(a.pg);
    if (PQstatus(db) != CONNECTION_OK) {
        fprintf(stderr, "order_service: %s", PQerrorMessage(db));
        PQfinish(db);
        return EXIT_FAIL;
    }
    if (exec(db, "CREATE TABLE IF NOT EXISTS orders (id text PRIMARY KEY, status text NOT NULL, "
                 "version int NOT NULL)", 0, NULL))
        goto fail;
    /* Order by order: placed, then its updates, each its own transaction.
     * A placement rolled back leaves no order to update: its updates are
     * skipped. */
    for (long o = 0; o < a.orders; o++) {
        char id[32];
        int placed = 0;

        snprintf(id, sizeof id, "ord-%ld", o);
        for (long k = 0; k <= a.updates && (k == 0 || placed); k++) {
            int fail = a.fail_every > 0 && ++tx % a.fail_every == 0;

            if (change(db, &a, id, k, fail))
                goto fail;
            if (fail) {
                rolled_back++;
            } else {
                committed++;
                placed = 1;
            }
        }
    }
    printf("{\"orders\":%ld,\"committed\":%ld,\"rolled_back\":%ld,\"events\":%ld}\n", a.orders,
           committed, rolled_back, committed);
    PQfinish(db);
    return 0;
fail:
    PQfinish(db);
    return EXIT_FAIL;
}
