/* test_seed.c - the seed article's four fault injections, through libmic,
 * against real micd processes, and sharding over three micd nodes.
 *
 * The seed (outbox-sequencing-and-replay-design) ends with four checks:
 *   "Inject a relay crash immediately after broker acknowledgment"
 *       producer_killed_after_ack: a producer process is SIGKILLed right
 *       after micd's 2xx, before it records the event as sent; restarted,
 *       it publishes its whole intent list again (same event ids) and the
 *       log holds every event once;
 *   "Run two consumers against the same event"
 *       two_consumers_apply_once: worker a claims an event and stalls past
 *       its lease, worker b takes it over and applies it; a's late attempt
 *       changes nothing (the processed marker, committed with the
 *       projection, says ALREADY; a fenced attempt aborts) and a's ack is
 *       lease_lost;
 *   "Replay an old schema into a new projection"
 *       old_schema_replayed_into_new_projection: schema 1 and 2 events
 *       consumed live by a schema-2 projection (upcaster) and, from a
 *       replay run, by a fresh one: the two tables are byte for byte
 *       equal; without the upcaster old events fail, never apply;
 *   "Introduce a missing aggregate version and verify that later state
 *    cannot silently advance past it"
 *       missing_version_stops_projection: v3 before v2 is a gap, again and
 *       again, the checkpoint and the table stay at v1 until v2 arrives;
 *       another aggregate's missing version is skipped on micd and in the
 *       consumer, and only then does it advance.
 * And the sharding test, sharded_over_three_nodes: 200 aggregates
 * over three nodes, each aggregate on exactly one node (the one
 * mic_client_route names) and delivered in version order by one worker
 * loop over all three; merged stats sum the nodes; with one node stopped,
 * the events routed to it fail with a per-event connection error naming
 * it, and the rest are stored.
 *
 * Nothing sleeps: each step waits for what it needs (a claim long-polls,
 * await() polls micd's figures) with generous outer bounds only. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "harness.h"
#include "claimkit.h"
#include "mic.h"

#include <lmdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NODES 3
#define WAIT_MS 60000          /* outer bound of any wait */

static struct srv S[NODES];
static char tmpdir[64];        /* the consumers' LMDB directories */

static int setup(void **state)
{
    static const char *const args[] = {"--no-auto-topics", NULL};

    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mic-seed-XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    memset(S, 0, sizeof S);
    return srv_start_shared(&S[0], args);
}

static void rm_env(const char *name)
{
    char p[160];

    snprintf(p, sizeof p, "%s/%s/data.mdb", tmpdir, name);
    unlink(p);
    snprintf(p, sizeof p, "%s/%s/lock.mdb", tmpdir, name);
    unlink(p);
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    rmdir(p);
}

static int teardown(void **state)
{
    static const char *const envs[] = {"once", "live", "rebuilt", "strict", "gaps", NULL};
    int rc = 0;

    (void)state;
    for (int i = NODES - 1; i >= 0; i--) {
        if (S[i].pid > 0 && srv_stop_shared(&S[i]))
            rc = -1;
        srv_cleanup(&S[i]);
    }
    for (int i = 0; envs[i]; i++)
        rm_env(envs[i]);
    rmdir(tmpdir);
    return rc;
}

/* ---- Helpers ---- */

/* A libmic handle on the given servers (n of them). */
static mic_client *client_on(struct srv *const *s, size_t n)
{
    const char *urls[NODES];
    struct mic_client_opts o = {0};
    struct mic_failure f;
    mic_client *c;

    for (size_t i = 0; i < n; i++)
        urls[i] = s[i]->url;
    o.urls = urls;
    o.nurls = n;
    o.connect_timeout_ms = 2000;
    assert_int_equal(mic_client_new(&o, &c, &f), 0);
    return c;
}

static mic_client *client1(void)
{
    struct srv *one[1] = {&S[0]};

    return client_on(one, 1);
}

/* PUT topic or group 'name' with JSON 'cfg' through libmic (every node). */
typedef int (*put_fn)(mic_client *c, const char *name, json_t *config, json_t **out);

static void put(mic_client *c, put_fn fn, const char *name, const char *cfg)
{
    json_t *body = json_loads(cfg, 0, NULL), *out = NULL;

    assert_non_null(body);
    assert_int_equal(fn(c, name, body, &out), 0);
    json_decref(out);
    json_decref(body);
}

#define put_topic(c, name, cfg) put(c, mic_admin_topic_put, name, cfg)
#define put_group(c, name, cfg) put(c, mic_admin_group_put, name, cfg)

/* The member 'key' (a number) of the entry named 'name' of stats list
 * 'list' ("topics" with key "topic", "groups" with key "group"), from
 * mic_admin_stats on 'node' (< 0: merged over every node). */
static json_int_t stat_of(mic_client *c, int node, const char *list, const char *name,
                          const char *member)
{
    const char *key = !strcmp(list, "topics") ? "topic" : "group";
    json_t *st, *it;
    json_int_t v = -1;
    size_t i;

    assert_int_equal(mic_admin_stats(c, node, &st), 0);
    json_array_foreach(json_object_get(st, list), i, it)
        if (!strcmp(json_string_value(json_object_get(it, key)), name))
            v = json_integer_value(json_object_get(it, member));
    json_decref(st);
    return v;
}

/* An event object: topic, aggregate (type "acct" unless NULL), version (0:
 * none), event id, schema version, payload (JSON text). */
static json_t *event_new(const char *topic, const char *agg, uint64_t version, const char *id,
                         int schema, const char *payload)
{
    json_t *ev = json_pack("{s:s, s:s, s:i, s:s}", "topic", topic, "event_id", id,
                           "schema_version", schema, "event_type", "acct.posted");

    assert_non_null(ev);
    if (agg) {
        json_object_set_new(ev, "aggregate_type", json_string("acct"));
        json_object_set_new(ev, "aggregate_id", json_string(agg));
    }
    if (version)
        json_object_set_new(ev, "aggregate_version", json_integer((json_int_t)version));
    json_object_set_new(ev, "payload", json_loads(payload, 0, NULL));
    return ev;
}

static void publish_one(mic_client *c, json_t *ev, int want_duplicate)
{
    struct mic_publish_result res;

    assert_int_equal(mic_publish(c, ev, &res), 0);
    assert_true(res.ok);
    assert_int_equal(res.duplicate, want_duplicate);
    json_decref(ev);
}

/* Claim up to 'max' from 'group' on node 0, waiting up to 'wait_s' for
 * the first; asserts the call worked. */
static void claim(mic_client *c, const char *group, int max, double wait_s, double ttl,
                  const char *worker, struct mic_claimed *out)
{
    struct mic_claim_opts o = {.max = max, .wait_s = wait_s, .lease_ttl_s = ttl,
                               .worker = worker};

    assert_int_equal(mic_claim(c, 0, group, &o, out), 0);
}

static enum mic_item_status settle1(mic_client *c, const char *group, const struct mic_leased *d,
                                    int ack, double retry_after_s, const char *error)
{
    const struct mic_leased *items[1] = {d};
    struct mic_settle_opts so = {.retry_after_s = retry_after_s, .error = error};
    struct mic_item_result r;

    if (ack)
        assert_int_equal(mic_ack(c, group, items, 1, &r), 0);
    else
        assert_int_equal(mic_nack(c, group, items, 1, &so, &r), 0);
    assert_int_equal(r.seq, d->seq);
    return r.status;
}

/* ---- A small projection: per account, the balance in cents ----
 *
 * Schema 2 events carry {"amount":{"cents":N,"currency":"EUR"}}; schema 1
 * carried {"amount_cents":N}.  The table 'balance' maps the account id to
 * an i64 (host order); 'effects' counts the applies committed. */

struct proj {
    MDB_dbi balance;
    int opened;
    long upcasts;        /* upcaster calls */
    long apply_calls;    /* apply() calls, committed or not */
    int stall;           /* two_consumers: make the next apply wait */
};

static int proj_dbi(MDB_txn *txn, struct proj *p)
{
    if (!p->opened) {
        if (mdb_dbi_open(txn, "balance", MDB_CREATE, &p->balance))
            return -1;
        p->opened = 1;
    }
    return 0;
}

static int apply_balance(MDB_txn *txn, const struct mic_leased *d, json_t *event, void *arg,
                         char *err, size_t errcap)
{
    struct proj *p = arg;
    json_t *cents = json_object_get(json_object_get(json_object_get(event, "payload"), "amount"),
                                    "cents");
    MDB_val key = {strlen(d->aggregate_id), (void *)d->aggregate_id}, val;
    int64_t bal = 0;

    p->apply_calls++;
    if (!json_is_integer(cents)) {
        snprintf(err, errcap, "event %s has no payload.amount.cents", d->event_id);
        return -1;
    }
    if (proj_dbi(txn, p)) {
        snprintf(err, errcap, "cannot open the balance table");
        return -1;
    }
    if (!mdb_get(txn, p->balance, &key, &val) && val.mv_size == sizeof bal)
        memcpy(&bal, val.mv_data, sizeof bal);
    bal += json_integer_value(cents);
    val.mv_data = &bal;
    val.mv_size = sizeof bal;
    return mdb_put(txn, p->balance, &key, &val, 0) ? -1 : 0;
}

/* Schema 1 -> 2: {"amount_cents":N} becomes {"amount":{"cents":N,"currency":"EUR"}}. */
static json_t *upcast_1_to_2(json_t *event, int from, int to, void *arg)
{
    struct proj *p = arg;
    json_t *out, *cents = json_object_get(json_object_get(event, "payload"), "amount_cents");

    p->upcasts++;
    if (from != 1 || to != 2 || !json_is_integer(cents))
        return NULL;
    out = json_deep_copy(event);
    json_object_set_new(out, "payload",
                        json_pack("{s:{s:O, s:s}}", "amount", "cents", cents, "currency", "EUR"));
    return out;
}

static mic_consumer *proj_open(const char *name, struct proj *p, enum mic_consumer_kind kind,
                               int with_upcaster)
{
    struct mic_consumer_opts o = {0};
    char path[160], err[256];
    mic_consumer *k;

    memset(p, 0, sizeof *p);
    rm_env(name);
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    o.path = path;
    o.map_size = 16u << 20;
    o.max_dbs = 2;
    o.kind = kind;
    o.apply = apply_balance;
    o.upcast = with_upcaster ? upcast_1_to_2 : NULL;
    o.schema_version = 2;
    o.arg = p;
    if (mic_consumer_open(&o, &k, err, sizeof err))
        fail_msg("mic_consumer_open: %s", err);
    return k;
}

/* The balance of 'acct' (0 when absent). */
static int64_t balance_of(mic_consumer *k, struct proj *p, const char *acct)
{
    MDB_txn *txn;
    MDB_val key = {strlen(acct), (void *)acct}, val;
    int64_t bal = 0;

    assert_int_equal(mdb_txn_begin(mic_consumer_env(k), NULL, MDB_RDONLY, &txn), 0);
    if (p->opened && !mdb_get(txn, p->balance, &key, &val) && val.mv_size == sizeof bal)
        memcpy(&bal, val.mv_data, sizeof bal);
    mdb_txn_abort(txn);
    return bal;
}

/* The whole balance table as "id=balance\n" lines, in key order (malloc'd). */
static char *table_dump(mic_consumer *k, struct proj *p)
{
    MDB_txn *txn;
    MDB_cursor *cur;
    MDB_val key, val;
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);

    assert_non_null(f);
    assert_true(p->opened);
    assert_int_equal(mdb_txn_begin(mic_consumer_env(k), NULL, MDB_RDONLY, &txn), 0);
    assert_int_equal(mdb_cursor_open(txn, p->balance, &cur), 0);
    while (!mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
        int64_t bal;

        memcpy(&bal, val.mv_data, sizeof bal);
        fprintf(f, "%.*s=%lld\n", (int)key.mv_size, (char *)key.mv_data, (long long)bal);
    }
    mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    fclose(f);
    return out;
}

/* Process one delivery with consumer 'k' (no fencing job); asserts LMDB
 * worked and returns the outcome. */
static enum mic_outcome process(mic_consumer *k, const struct mic_leased *d)
{
    char why[512];
    enum mic_outcome out;

    assert_int_equal(mic_consumer_process(k, d, NULL, &out, why, sizeof why), 0);
    return out;
}

/* ---- 1. A producer killed right after micd's acknowledgment ---- */

#define INTENTS 20
#define DIE_AFTER 7    /* the child dies right after this many acks */

/* The producer's intent list: what its own transaction committed (in an
 * outbox, the rows); each carries its event id from the start. */
static json_t *intent(int i)
{
    char id[64], payload[64];

    snprintf(id, sizeof id, "order-%d-created", i);
    snprintf(payload, sizeof payload, "{\"amount\":{\"cents\":%d}}", i);
    return event_new("seed.orders", NULL, 0, id, 2, payload);
}

/* Child: publish the intents not yet marked sent, marking each after its
 * ack in 'sent' (a file of one byte per intent); SIGKILL itself right
 * after the DIE_AFTER-th ack, before marking it. */
static void producer_child(const char *url, const char *sent, int die)
{
    const char *urls[1] = {url};
    struct mic_client_opts o = {.urls = urls, .nurls = 1};
    mic_client *c;
    char marks[INTENTS] = {0};
    FILE *f = fopen(sent, "r+b");
    int acks = 0;

    if (!f || mic_client_new(&o, &c, NULL))
        _exit(3);
    if (fread(marks, 1, INTENTS, f) != INTENTS)
        _exit(3);
    for (int i = 0; i < INTENTS; i++) {
        struct mic_publish_result res;
        json_t *ev;

        if (marks[i])
            continue;
        ev = intent(i);
        if (mic_publish(c, ev, &res) || !res.ok)
            _exit(4);
        json_decref(ev);
        if (die && ++acks == DIE_AFTER)
            raise(SIGKILL);   /* acknowledged by micd, not yet marked */
        marks[i] = 1;
        if (fseek(f, i, SEEK_SET) || fputc(1, f) == EOF || fflush(f))
            _exit(5);
    }
    fclose(f);
    mic_client_free(c);
    _exit(0);
}

static int run_producer(const char *sent, int die)
{
    int status;
    pid_t pid = fork();

    assert_true(pid >= 0);
    if (pid == 0)
        producer_child(S[0].url, sent, die);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

static void producer_killed_after_ack(void **state)
{
    mic_client *c = client1();
    char sent[128], zeros[INTENTS] = {0};
    FILE *f;
    int status;

    (void)state;
    put_topic(c, "seed.orders", "{}");
    snprintf(sent, sizeof sent, "%s/sent", tmpdir);
    f = fopen(sent, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(zeros, 1, INTENTS, f), INTENTS);
    fclose(f);

    status = run_producer(sent, 1);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    /* micd holds the DIE_AFTER events acked, the last of them unmarked. */
    assert_int_equal(stat_of(c, 0, "topics", "seed.orders", "events"), DIE_AFTER);

    status = run_producer(sent, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* Every intent is in the log once: the one acked before the crash
     * came again as a duplicate, never a second event. */
    assert_int_equal(stat_of(c, 0, "topics", "seed.orders", "events"), INTENTS);
    assert_int_equal(stat_of(c, 0, "topics", "seed.orders", "duplicates"), 1);
    for (int i = 0; i < INTENTS; i++) {
        char id[64];
        json_t *got;

        snprintf(id, sizeof id, "order-%d-created", i);
        assert_int_equal(mic_admin_event(c, id, &got), 0);
        json_decref(got);
    }
    unlink(sent);
    mic_client_free(c);
}

/* ---- 2. Two consumers against the same event ---- */

static void two_consumers_apply_once(void **state)
{
    mic_client *a = client1(), *b = client1();
    struct mic_claimed ca, cb, cnone;
    struct proj p;
    mic_consumer *k = proj_open("once", &p, MIC_PROJECTION, 0);
    struct mic_consumer_stats st;
    json_t *got;

    (void)state;
    put_topic(a, "seed.pay", "{}");
    put_group(a, "seed.pay.view", "{\"topics\":[\"seed.pay\"],\"lease_ttl_s\":1}");
    publish_one(a, event_new("seed.pay", "ac1", 1, "pay-1", 2, "{\"amount\":{\"cents\":250}}"), 0);

    /* a takes it and stalls past its 1 s lease. */
    claim(a, "seed.pay.view", 1, 10, 1, "a", &ca);
    assert_int_equal(ca.n, 1);
    /* b long-polls until the lease ends and micd hands it the same event. */
    for (int64_t end = mono_ms() + WAIT_MS;;) {
        claim(b, "seed.pay.view", 1, 5, 30, "b", &cb);
        if (cb.n)
            break;
        mic_claimed_fini(&cb);
        assert_true(mono_ms() < end);
    }
    assert_int_equal(cb.v[0].seq, ca.v[0].seq);
    assert_string_equal(cb.v[0].event_id, "pay-1");
    assert_int_equal(cb.v[0].attempt, 2);

    /* b applies it: the balance, the checkpoint and the marker commit
     * together, and b's ack is taken. */
    assert_int_equal(process(k, &cb.v[0]), MIC_APPLIED);
    assert_int_equal(settle1(b, "seed.pay.view", &cb.v[0], 1, 0, NULL), MIC_ITEM_ACKED);

    /* a wakes up and runs the same event: the marker says it was
     * processed, nothing is applied again, and a's ack is refused. */
    assert_int_equal(process(k, &ca.v[0]), MIC_ALREADY);
    assert_int_equal(settle1(a, "seed.pay.view", &ca.v[0], 1, 0, NULL), MIC_ITEM_LEASE_LOST);
    assert_int_equal(balance_of(k, &p, "ac1"), 250);
    assert_int_equal(p.apply_calls, 1);
    mic_consumer_stats(k, &st);
    assert_int_equal(st.applied, 1);
    assert_int_equal(st.already, 1);

    /* The event is dispatched once in micd, and nothing is left. */
    assert_int_equal(mic_admin_event(a, "pay-1", &got), 0);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(got, "deliveries"), 0), "state")),
                        "dispatched");
    json_decref(got);
    claim(a, "seed.pay.view", 10, 0, 30, "a", &cnone);
    assert_int_equal(cnone.n, 0);

    mic_claimed_fini(&cnone);
    mic_claimed_fini(&ca);
    mic_claimed_fini(&cb);
    mic_consumer_close(k);
    mic_client_free(a);
    mic_client_free(b);
}

/* ---- 3. An old schema replayed into a new projection ---- */

#define ACCTS 6
#define PER_ACCT 8

/* Drain 'group' into consumer 'k' with a worker loop of 3 threads
 * (mic_consumer_handler), until 'n' deliveries were settled. */
static void drain(mic_client *c, const char *group, mic_consumer *k, long n,
                  struct mic_worker_stats *st)
{
    struct mic_worker_opts o = {0};

    o.group = group;
    o.threads = 3;
    o.max = 4;
    o.wait_s = 1;
    o.worker = "seed";
    o.handler = mic_consumer_handler;
    o.arg = k;
    o.max_deliveries = n;
    assert_int_equal(mic_worker_run(c, &o, st), 0);
}

static int run_drained(void *arg)
{
    mic_client *c = arg;
    json_t *run;
    int done;

    assert_int_equal(mic_admin_replay_get(c, 0, "seed-rebuild", &run), 0);
    done = !strcmp(json_string_value(json_object_get(run, "state")), "drained");
    json_decref(run);
    return done;
}

static void old_schema_replayed_into_new_projection(void **state)
{
    mic_client *c = client1();
    struct proj pl, pr, ps;
    mic_consumer *live, *rebuilt, *strict;
    struct mic_worker_stats st;
    json_t *body, *run, *evs[ACCTS * PER_ACCT];
    struct mic_publish_result res[ACCTS * PER_ACCT];
    struct mic_claimed cl;
    char *t_live, *t_rebuilt;
    size_t n = 0;
    long old = 0;

    (void)state;
    put_topic(c, "seed.ledger", "{\"require_versions\":true}");
    put_group(c, "seed.ledger.view", "{\"topics\":[\"seed.ledger\"],\"ordered\":true}");
    put_group(c, "seed.ledger.strict", "{\"topics\":[\"seed.ledger\"],\"ordered\":true}");
    /* The first half of each account's history was written by the old
     * producer (schema 1), the rest by the new one (schema 2). */
    for (int v = 1; v <= PER_ACCT; v++)
        for (int a = 0; a < ACCTS; a++) {
            char acct[16], id[48], payload[96];
            int cents = 100 * a + 7 * v;

            snprintf(acct, sizeof acct, "led%d", a);
            snprintf(id, sizeof id, "ledger-%d-%d", a, v);
            if (v <= PER_ACCT / 2) {
                snprintf(payload, sizeof payload, "{\"amount_cents\":%d}", cents);
                evs[n++] = event_new("seed.ledger", acct, (uint64_t)v, id, 1, payload);
                old++;
            } else {
                snprintf(payload, sizeof payload,
                         "{\"amount\":{\"cents\":%d,\"currency\":\"EUR\"}}", cents);
                evs[n++] = event_new("seed.ledger", acct, (uint64_t)v, id, 2, payload);
            }
        }
    if (mic_publish_batch(c, evs, n, res)) {
        char text[700];

        fail_msg("publish: %s", mic_failure_text(mic_client_failure(c), text, sizeof text));
    }
    for (size_t i = 0; i < n; i++)
        json_decref(evs[i]);

    /* Live: the schema-2 projection reads old events through its
     * upcaster. */
    live = proj_open("live", &pl, MIC_PROJECTION, 1);
    drain(c, "seed.ledger.view", live, (long)n, &st);
    assert_int_equal(st.acked, (long)n);
    assert_int_equal(pl.upcasts, old);

    /* A replay run of the same range, into a fresh projection. */
    body = json_pack("{s:s, s:s}", "topic", "seed.ledger", "run_id", "seed-rebuild");
    assert_int_equal(mic_admin_replay_create(c, 0, body, &run), 0);
    assert_int_equal(json_integer_value(json_object_get(run, "selected")), (json_int_t)n);
    json_decref(run);
    json_decref(body);
    rebuilt = proj_open("rebuilt", &pr, MIC_PROJECTION, 1);
    drain(c, "replay.seed-rebuild", rebuilt, (long)n, &st);
    assert_int_equal(st.acked, (long)n);
    assert_int_equal(pr.upcasts, old);
    assert_true(await(run_drained, c, WAIT_MS));

    /* The same table, account by account. */
    t_live = table_dump(live, &pl);
    t_rebuilt = table_dump(rebuilt, &pr);
    assert_string_equal(t_live, t_rebuilt);
    for (int a = 0; a < ACCTS; a++) {
        char acct[16];
        int64_t want = 0;

        snprintf(acct, sizeof acct, "led%d", a);
        for (int v = 1; v <= PER_ACCT; v++)
            want += 100 * a + 7 * v;
        assert_int_equal(balance_of(live, &pl, acct), want);
    }

    /* Without an upcaster an old event fails (nacked), and nothing of it
     * is applied: the projection does not guess. */
    strict = proj_open("strict", &ps, MIC_PROJECTION, 0);
    claim(c, "seed.ledger.strict", 1, 5, 30, "strict", &cl);
    assert_int_equal(cl.n, 1);
    assert_int_equal(cl.v[0].schema_version, 1);
    assert_int_equal(process(strict, &cl.v[0]), MIC_FAILED);
    assert_int_equal(ps.apply_calls, 0);
    assert_int_equal(settle1(c, "seed.ledger.strict", &cl.v[0], 0, 0, "no upcaster"),
                     MIC_ITEM_RETRYING);
    mic_claimed_fini(&cl);

    free(t_live);
    free(t_rebuilt);
    mic_consumer_close(strict);
    mic_consumer_close(live);
    mic_consumer_close(rebuilt);
    assert_int_equal(mic_admin_replay_delete(c, 0, "seed-rebuild"), 0);
    mic_client_free(c);
}

/* ---- 4. A missing aggregate version ---- */

/* Claim everything ready in 'group' and run each delivery through 'k':
 * APPLIED and ALREADY are acked, a GAP is nacked to be claimable again at
 * once.  Returns how many were applied; counts gaps in *gaps. */
static int round_of(mic_client *c, const char *group, mic_consumer *k, int *gaps)
{
    struct mic_claimed cl;
    int applied = 0;

    claim(c, group, 100, 0, 30, "gaps", &cl);
    for (size_t i = 0; i < cl.n; i++) {
        enum mic_outcome o = process(k, &cl.v[i]);

        if (o == MIC_GAP) {
            (*gaps)++;
            assert_int_equal(settle1(c, group, &cl.v[i], 0, 0, "gap"), MIC_ITEM_RETRYING);
        } else {
            assert_true(o == MIC_APPLIED || o == MIC_ALREADY);
            applied += o == MIC_APPLIED;
            assert_int_equal(settle1(c, group, &cl.v[i], 1, 0, NULL), MIC_ITEM_ACKED);
        }
    }
    mic_claimed_fini(&cl);
    return applied;
}

static json_t *posting(const char *acct, uint64_t v, int cents)
{
    char id[48], payload[64];

    snprintf(id, sizeof id, "gap-%s-%llu", acct, (unsigned long long)v);
    snprintf(payload, sizeof payload, "{\"amount\":{\"cents\":%d}}", cents);
    return event_new("seed.gaps", acct, v, id, 2, payload);
}

static void missing_version_stops_projection(void **state)
{
    mic_client *c = client1();
    struct proj p;
    mic_consumer *k = proj_open("gaps", &p, MIC_PROJECTION, 0);
    uint64_t ck;
    int gaps = 0;
    json_t *skip;

    (void)state;
    put_topic(c, "seed.gaps", "{\"require_versions\":true}");
    /* An unordered group hands v3 out although v2 is missing: the
     * consumer's checkpoint is what stops it. */
    put_group(c, "seed.gaps.view", "{\"topics\":[\"seed.gaps\"]}");
    publish_one(c, posting("g1", 1, 10), 0);
    publish_one(c, posting("g1", 3, 1000), 0);
    publish_one(c, posting("g2", 1, 20), 0);
    publish_one(c, posting("g2", 3, 2000), 0);

    /* Round after round, v3 is a gap: checkpoints and balances stay at v1. */
    assert_int_equal(round_of(c, "seed.gaps.view", k, &gaps), 2);
    for (int r = 0; r < 3; r++)
        assert_int_equal(round_of(c, "seed.gaps.view", k, &gaps), 0);
    assert_int_equal(gaps, 8);
    assert_int_equal(mic_consumer_checkpoint(k, "acct", "g1", &ck), 0);
    assert_int_equal(ck, 1);
    assert_int_equal(mic_consumer_checkpoint(k, "acct", "g2", &ck), 0);
    assert_int_equal(ck, 1);
    assert_int_equal(balance_of(k, &p, "g1"), 10);
    assert_int_equal(balance_of(k, &p, "g2"), 20);
    /* The consumer cannot be told to jump either: a skip names the next
     * version only. */
    assert_int_equal(mic_consumer_skip(k, "acct", "g1", 3), -1);

    /* g1's v2 arrives: v2 then v3 are applied, in that order. */
    publish_one(c, posting("g1", 2, 100), 0);
    for (int r = 0; r < 4; r++)
        round_of(c, "seed.gaps.view", k, &gaps);
    assert_int_equal(mic_consumer_checkpoint(k, "acct", "g1", &ck), 0);
    assert_int_equal(ck, 3);
    assert_int_equal(balance_of(k, &p, "g1"), 1110);
    /* g2 is still held. */
    assert_int_equal(mic_consumer_checkpoint(k, "acct", "g2", &ck), 0);
    assert_int_equal(ck, 1);
    assert_int_equal(balance_of(k, &p, "g2"), 20);

    /* g2's v2 will never come: an admin skips it on micd (a late v2 is
     * then refused) and in the consumer; v3 applies. */
    assert_int_equal(mic_admin_gap_skip(c, "acct", "g2", 2, &skip), 0);
    json_decref(skip);
    assert_int_equal(mic_consumer_skip(k, "acct", "g2", 2), 0);
    assert_int_equal(round_of(c, "seed.gaps.view", k, &gaps), 1);
    assert_int_equal(mic_consumer_checkpoint(k, "acct", "g2", &ck), 0);
    assert_int_equal(ck, 3);
    assert_int_equal(balance_of(k, &p, "g2"), 2020);
    {
        struct mic_publish_result res;
        json_t *late = posting("g2", 2, 1);

        assert_int_equal(mic_publish(c, late, &res), -1);
        assert_int_equal(mic_client_failure(c)->status, 409);
        assert_string_equal(mic_client_failure(c)->code, "version_skipped");
        json_decref(late);
    }
    mic_consumer_close(k);
    mic_client_free(c);
}

/* ---- 5. Sharding over three nodes ---- */

#define AGGS 200
#define VERSIONS 5

struct order_check {
    pthread_mutex_t mu;
    uint64_t last[NODES][AGGS];   /* per node and aggregate: last version handled */
    long handled, violations;
};

static enum mic_verdict check_order(mic_job *job, const struct mic_leased *d, mic_client *c,
                                    void *arg)
{
    struct order_check *oc = arg;
    int a = atoi(d->aggregate_id + 1);

    (void)job;
    (void)c;
    pthread_mutex_lock(&oc->mu);
    if (a < 0 || a >= AGGS || d->node < 0 || d->node >= NODES ||
        d->aggregate_version != oc->last[d->node][a] + 1)
        oc->violations++;
    else
        oc->last[d->node][a] = d->aggregate_version;
    oc->handled++;
    pthread_mutex_unlock(&oc->mu);
    return MIC_DONE;
}

static void sharded_over_three_nodes(void **state)
{
    static const char *const args[] = {"--no-auto-topics", NULL};
    struct srv *all[NODES] = {&S[0], &S[1], &S[2]};
    json_t *evs[AGGS];
    struct mic_publish_result res[AGGS];
    struct mic_worker_opts wo = {0};
    struct mic_worker_stats st;
    struct order_check *oc = calloc(1, sizeof *oc);
    size_t per_node[NODES] = {0};
    mic_client *c;
    long failed = 0, stored = 0;
    int dead = 2;

    (void)state;
    assert_non_null(oc);
    pthread_mutex_init(&oc->mu, NULL);
    for (int i = 1; i < NODES; i++)
        assert_int_equal(srv_start(&S[i], args), 0);
    c = client_on(all, NODES);
    put_topic(c, "seed.shard", "{\"require_versions\":true}");
    put_group(c, "seed.shard.ordered", "{\"topics\":[\"seed.shard\"],\"ordered\":true}");
    for (int i = 0; i < NODES; i++) {
        json_t *g;

        assert_int_equal(mic_admin_group_get(c, "seed.shard.ordered", &g), 0);
        json_decref(g);
        json_decref(call(&S[i], "GET", "/v1/groups/seed.shard.ordered", NULL, 200));
    }

    /* Versions 1..5 of 200 aggregates, a batch per version: each batch is
     * split per node by the aggregate's rendezvous hash. */
    for (uint64_t v = 1; v <= VERSIONS; v++) {
        for (int a = 0; a < AGGS; a++) {
            char agg[16], id[48];

            snprintf(agg, sizeof agg, "s%d", a);
            snprintf(id, sizeof id, "shard-%d-%llu", a, (unsigned long long)v);
            evs[a] = event_new("seed.shard", agg, v, id, 2, "{}");
        }
        assert_int_equal(mic_publish_batch(c, evs, AGGS, res), 0);
        for (int a = 0; a < AGGS; a++) {
            char agg[16];

            snprintf(agg, sizeof agg, "s%d", a);
            assert_true(res[a].ok);
            assert_int_equal(res[a].node, (int)mic_client_route(c, "acct", agg, NULL));
            json_decref(evs[a]);
        }
    }
    /* Each aggregate is on exactly the node its hash names, and nowhere
     * else; every node holds some. */
    for (int a = 0; a < AGGS; a++) {
        char path[64], agg[16];
        size_t home;

        snprintf(agg, sizeof agg, "s%d", a);
        home = mic_client_route(c, "acct", agg, NULL);
        per_node[home]++;
        snprintf(path, sizeof path, "/v1/aggregates/acct/%s", agg);
        for (size_t i = 0; i < NODES; i++) {
            json_t *r = call(&S[i], "GET", path, NULL, i == home ? 200 : 404);

            if (i == home)
                assert_int_equal(json_array_size(json_object_get(r, "events")), VERSIONS);
            json_decref(r);
        }
    }
    for (int i = 0; i < NODES; i++) {
        assert_true(per_node[i] > 0);
        assert_int_equal(stat_of(c, i, "topics", "seed.shard", "events"),
                         (json_int_t)(per_node[i] * VERSIONS));
    }
    /* Merged stats sum the nodes. */
    assert_int_equal(stat_of(c, -1, "topics", "seed.shard", "events"), AGGS * VERSIONS);
    assert_int_equal(stat_of(c, -1, "groups", "seed.shard.ordered", "pending"),
                     AGGS * VERSIONS);

    /* One worker loop over the three nodes: every event once, each
     * aggregate in version order. */
    wo.group = "seed.shard.ordered";
    wo.threads = 3;
    wo.max = 32;
    wo.wait_s = 1;
    wo.handler = check_order;
    wo.arg = oc;
    wo.max_deliveries = AGGS * VERSIONS;
    assert_int_equal(mic_worker_run(c, &wo, &st), 0);
    assert_int_equal(st.acked, AGGS * VERSIONS);
    assert_int_equal(oc->handled, AGGS * VERSIONS);
    assert_int_equal(oc->violations, 0);
    for (int a = 0; a < AGGS; a++) {
        char agg[16];

        snprintf(agg, sizeof agg, "s%d", a);
        assert_int_equal(oc->last[mic_client_route(c, "acct", agg, NULL)][a], VERSIONS);
    }
    assert_int_equal(stat_of(c, -1, "groups", "seed.shard.ordered", "dispatched"),
                     AGGS * VERSIONS);

    /* Node 2 stops: its aggregates' next events fail, each with a
     * connection error naming node 2; the other nodes store theirs. */
    assert_int_equal(srv_stop(&S[dead]), 0);
    for (int a = 0; a < AGGS; a++) {
        char agg[16], id[48];

        snprintf(agg, sizeof agg, "s%d", a);
        snprintf(id, sizeof id, "shard-%d-%d", a, VERSIONS + 1);
        evs[a] = event_new("seed.shard", agg, VERSIONS + 1, id, 2, "{}");
    }
    {
        struct mic_client_opts o = {0};
        const char *urls[NODES] = {S[0].url, S[1].url, S[2].url};
        mic_client *fast;

        /* No retries: the failure is reported at once. */
        o.urls = urls;
        o.nurls = NODES;
        o.retries = -1;
        o.connect_timeout_ms = 2000;
        assert_int_equal(mic_client_new(&o, &fast, NULL), 0);
        assert_int_equal(mic_publish_batch(fast, evs, AGGS, res), -1);
        assert_int_equal(mic_client_failure(fast)->kind, MIC_FAIL_PARTIAL);
        mic_client_free(fast);
    }
    for (int a = 0; a < AGGS; a++) {
        char agg[16], text[700];

        snprintf(agg, sizeof agg, "s%d", a);
        if (mic_client_route(c, "acct", agg, NULL) == (size_t)dead) {
            assert_false(res[a].ok);
            assert_int_equal(res[a].node, dead);
            assert_int_equal(res[a].fail.kind, MIC_FAIL_CONNECT);
            mic_failure_text(&res[a].fail, text, sizeof text);
            assert_non_null(strstr(text, S[dead].url));
            failed++;
        } else {
            assert_true(res[a].ok);
            assert_int_equal(res[a].duplicate, 0);
            stored++;
        }
        json_decref(evs[a]);
    }
    assert_int_equal(failed, (long)per_node[dead]);
    assert_int_equal(stored, AGGS - (long)per_node[dead]);
    for (int i = 0; i < NODES; i++)
        if (i != dead)
            assert_int_equal(stat_of(c, i, "topics", "seed.shard", "events"),
                             (json_int_t)(per_node[i] * (VERSIONS + 1)));

    mic_client_free(c);
    pthread_mutex_destroy(&oc->mu);
    free(oc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(producer_killed_after_ack),
        cmocka_unit_test(two_consumers_apply_once),
        cmocka_unit_test(old_schema_replayed_into_new_projection),
        cmocka_unit_test(missing_version_stops_projection),
        cmocka_unit_test(sharded_over_three_nodes),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
