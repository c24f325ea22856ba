/* projection.c - a projection builder on libmic's consumer toolkit (an
 * example).
 *
 * DESIGN.  A projection is state rebuilt from events.  This one keeps, per
 * aggregate, how many events it applied and the last version, in its own
 * LMDB environment (--state DIR).  mic_consumer (kind MIC_PROJECTION) owns
 * that environment and, for each delivery, runs one write transaction
 * holding three things: the projection's change (apply() below), the
 * aggregate's checkpoint (the last version applied) and the marker that
 * the event was processed.  So a crash keeps all three or none, and a
 * redelivery (micd is at-least-once) finds the marker and is acked without
 * being applied twice.  The checkpoint also catches disorder: a version
 * ahead of checkpoint + 1 is a gap (nacked, retried later) and one at or
 * below it with an unknown event id is dead-lettered for a person to
 * look at.
 *
 * The deliveries come from a group through mic_worker_run, with libmic's
 * own handler mic_consumer_handler (threads, lease extension, fencing:
 * see worker_pool.c).  Give it an ordered group, or a replay run's group
 * (replay.<run_id>, always ordered), so each aggregate's versions come in
 * order; in an unordered group the gaps are retried until they close.
 *
 * Databases of the projection (besides libmic's mic.checkpoint and
 * mic.processed):
 *   summary  key  aggregate_type NUL aggregate_id
 *            val  struct summary: u64 count, u64 last_version (host order)
 *   applied  key  created_at TAB event_id      val  empty
 * 'applied' is the projection's proof of what it saw.  LMDB keeps keys in
 * byte order, and created_at has a fixed width (27 bytes, the form micd
 * stores), so walking 'applied' gives the events in (created_at, event_id)
 * order whatever order the deliveries came in: the replay digest is
 * SHA-256 over each key followed by LF (proto/replay-digest.md), the
 * digest micd reports for a replay run (POST /v1/replays, GET
 * /v1/replays/{id}).  Built from scratch on a run's group, equal digests
 * prove the projection saw exactly the run's selection.
 *
 * Output: one JSON line on stdout,
 *   {"applied","already","gaps","stale","failed","fenced"   (this run)
 *    "events","aggregates"  (rows of applied and summary: the whole state)
 *    "digest"               (over 'applied': the whole state)
 *    "worker":{struct mic_worker_stats}}
 * Exit status: 0 when the loop ran, 1 when it could not start or the
 * state could not be read, 2 on a usage error.
 *
 *   projection --url http://127.0.0.1:8080 --group orders.view --state ./orders-view */
#define _GNU_SOURCE
#include "example.h"
#include "mic.h"

#include <getopt.h>
#include <lmdb.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TIME_LEN 27   /* YYYY-MM-DDTHH:MM:SS.ffffffZ */

struct args {
    struct ex_conn conn;
    struct ex_loop loop;
    const char *state;
};

/* The projection's databases, opened once before the loop starts. */
struct proj {
    MDB_dbi summary, applied;
};

struct summary {
    uint64_t count, last_version;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: projection --group G --state DIR [--url URL]... [--key SECRET]\n"
            "                  [--threads T] [--max M] [--lease-ttl S] [--wait S] [--idle-exit S]\n"
            "  --group G        the group to build from (ordered, or replay.<run_id>)\n"
            "  --state DIR      the projection's LMDB directory (created if missing)\n"
            "  --url URL        a micd node (repeat for several; default $MIC_URL or %s)\n"
            "  --key SECRET     API key (default $MIC_KEY)\n" EX_LOOP_USAGE,
            DEFAULT_URL);
}

static int parse(int argc, char **argv, struct args *a)
{
    static const struct option opts[] = {
        EX_CONN_OPTIONS, EX_LOOP_OPTIONS, {"state", required_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0},
    };
    int ch, taken;

    *a = (struct args){.loop = EX_LOOP_DEFAULTS};
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if ((taken = ex_conn_option(&a->conn, ch, optarg, "projection")) < 0 ||
            (!taken && (taken = ex_loop_option(&a->loop, ch, optarg, "projection")) < 0))
            return EXIT_USAGE;
        if (taken)
            continue;
        if (ch == 's') {
            a->state = optarg;
            continue;
        }
        if (ch == 'h') {
            usage(stdout);
            exit(0);
        }
        usage(stderr);
        return EXIT_USAGE;
    }
    if (optind < argc) {
        fprintf(stderr, "projection: unexpected argument %s\n", argv[optind]);
        return EXIT_USAGE;
    }
    if (!a->loop.group || !a->state) {
        fprintf(stderr, "projection: give --group and --state\n");
        return EXIT_USAGE;
    }
    ex_conn_defaults(&a->conn);
    return 0;
}

/* ---- The projection ---- */

/* mic_apply_fn: the projection's change for one event, in the consumer's
 * transaction (libmic adds the checkpoint and the marker, and commits). */
static int apply(MDB_txn *txn, const struct mic_leased *d, json_t *event, void *arg,
                 char *err, size_t errcap)
{
    const struct proj *p = arg;
    const char *at = json_string_value(json_object_get(event, "created_at"));
    char kb[TIME_LEN + 1 + 128], ab[512];
    size_t il = strlen(d->event_id), tl, al;
    MDB_val key, val = {0, NULL};
    struct summary s = {0, 0};
    int rc;

    if (!at || strlen(at) != TIME_LEN || il > 128) {
        snprintf(err, errcap, "event %s: no created_at of the stored form", d->event_id);
        return -1;
    }
    memcpy(kb, at, TIME_LEN);
    kb[TIME_LEN] = '\t';
    memcpy(kb + TIME_LEN + 1, d->event_id, il);
    key = (MDB_val){TIME_LEN + 1 + il, kb};
    if ((rc = mdb_put(txn, p->applied, &key, &val, 0)))
        goto fail;
    if (!d->aggregate_type[0])
        return 0;   /* an event without an aggregate: nothing to summarise */
    tl = strlen(d->aggregate_type);
    al = strlen(d->aggregate_id);
    if (tl + 1 + al > sizeof ab || tl + 1 + al > 511) {
        snprintf(err, errcap, "aggregate key too long");
        return -1;
    }
    memcpy(ab, d->aggregate_type, tl);
    ab[tl] = 0;
    memcpy(ab + tl + 1, d->aggregate_id, al);
    key = (MDB_val){tl + 1 + al, ab};
    rc = mdb_get(txn, p->summary, &key, &val);
    if (rc == 0 && val.mv_size == sizeof s)
        memcpy(&s, val.mv_data, sizeof s);
    else if (rc != MDB_NOTFOUND && rc != 0)
        goto fail;
    s.count++;
    s.last_version = d->aggregate_version;
    val = (MDB_val){sizeof s, &s};
    if ((rc = mdb_put(txn, p->summary, &key, &val, 0)))
        goto fail;
    return 0;
fail:
    snprintf(err, errcap, "projection store: %s", mdb_strerror(rc));
    return -1;
}

/* Create the projection's databases (once, before any apply). */
static int proj_open(MDB_env *env, struct proj *p, char *err, size_t cap)
{
    MDB_txn *txn;
    int rc;

    if ((rc = mdb_txn_begin(env, NULL, 0, &txn)))
        goto fail;
    if ((rc = mdb_dbi_open(txn, "summary", MDB_CREATE, &p->summary)) ||
        (rc = mdb_dbi_open(txn, "applied", MDB_CREATE, &p->applied))) {
        mdb_txn_abort(txn);
        goto fail;
    }
    if ((rc = mdb_txn_commit(txn)))
        goto fail;
    return 0;
fail:
    snprintf(err, cap, "projection store: %s", mdb_strerror(rc));
    return -1;
}

/* The replay digest of everything applied (lowercase hex into hex[65])
 * and the row counts of both databases.  Returns 0 or -1. */
static int proj_digest(MDB_env *env, const struct proj *p, char hex[65], size_t *events,
                       size_t *aggregates)
{
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    MDB_txn *txn = NULL;
    MDB_cursor *cur = NULL;
    MDB_val key, val;
    MDB_stat st;
    int rc, ok = 0;

    *events = *aggregates = 0;
    if (!md || !EVP_DigestInit_ex(md, EVP_sha256(), NULL) ||
        mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) || mdb_cursor_open(txn, p->applied, &cur))
        goto out;
    for (rc = mdb_cursor_get(cur, &key, &val, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
        if (!EVP_DigestUpdate(md, key.mv_data, key.mv_size) || !EVP_DigestUpdate(md, "\n", 1))
            goto out;
        ++*events;
    }
    if (rc != MDB_NOTFOUND || mdb_stat(txn, p->summary, &st) || !EVP_DigestFinal_ex(md, out, &len))
        goto out;
    *aggregates = st.ms_entries;
    for (unsigned i = 0; i < len && i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", out[i]);
    ok = 1;
out:
    if (cur)
        mdb_cursor_close(cur);
    if (txn)
        mdb_txn_abort(txn);
    EVP_MD_CTX_free(md);
    return ok ? 0 : -1;
}

/* ---- Main ---- */

int main(int argc, char **argv)
{
    struct args a;
    struct proj p = {0, 0};
    struct mic_consumer_opts ko = {0};
    struct mic_worker_opts wo = {0};
    struct mic_worker_stats st = {0};
    struct mic_consumer_stats ks;
    mic_consumer *k = NULL;
    mic_client *c;
    char why[800], digest[65] = "";
    size_t events, aggregates;
    int rc;

    if ((rc = parse(argc, argv, &a)))
        return rc;
    if (ex_client(&a.conn, "projection", &c))
        return EXIT_USAGE;
    ko.path = a.state;
    ko.max_dbs = 2;     /* summary, applied */
    ko.kind = MIC_PROJECTION;
    ko.apply = apply;
    ko.arg = &p;
    rc = EXIT_FAIL;
    if (mic_consumer_open(&ko, &k, why, sizeof why) ||
        proj_open(mic_consumer_env(k), &p, why, sizeof why)) {
        fprintf(stderr, "projection: %s\n", why);
        goto out;
    }
    ex_loop_opts(&a.loop, "projection", &wo);
    wo.handler = mic_consumer_handler;
    wo.arg = k;
    if (mic_worker_run(c, &wo, &st)) {
        if (st.refused)
            fprintf(stderr, "projection: claims refused: %s\n",
                    mic_failure_text(&st.failure, why, sizeof why));
        else
            fprintf(stderr, "projection: the worker loop could not start\n");
        goto out;
    }
    if (proj_digest(mic_consumer_env(k), &p, digest, &events, &aggregates)) {
        fprintf(stderr, "projection: cannot read the projection's state\n");
        goto out;
    }
    mic_consumer_stats(k, &ks);
    printf("{\"applied\":%ld,\"already\":%ld,\"gaps\":%ld,\"stale\":%ld,\"failed\":%ld,"
           "\"fenced\":%ld,\"events\":%zu,\"aggregates\":%zu,\"digest\":\"%s\","
           "\"worker\":{\"claimed\":%ld,\"acked\":%ld,\"retried\":%ld,\"dead_lettered\":%ld,"
           "\"lease_lost\":%ld,\"extends\":%ld,\"claim_failures\":%ld}}\n",
           ks.applied, ks.already, ks.gaps, ks.stale, ks.failed, ks.fenced, events, aggregates,
           digest, st.claimed, st.acked, st.retried, st.dead_lettered, st.lease_lost,
           st.extends, st.claim_failures);
    rc = 0;
out:
    mic_consumer_close(k);
    mic_client_free(c);
    return rc;
}
