/* test_libmic.c - libmic (client/mic.h) against a real micd: every call of
 * the contract, as a program linking libmic makes it.
 *
 *   handle     argument errors, dup, urls, rendezvous routing;
 *   publish    event ids set in the caller's object, duplicates, conflicts
 *              and field errors copied into struct mic_failure, batches;
 *   retries    429 under a writer queue of 1 (--writer-queue 1
 *              --writer-delay-ms), a stub listener that answers 503, 429,
 *              a 2xx that is not JSON, resets or never answers (micd
 *              answers 503 to a publish only while it shuts down, which no
 *              test can time), a port with nothing listening, a micd that
 *              comes up during the retries, a lost answer after kill -9 (a
 *              duplicate, never a second event), timeouts;
 *   claims     long-poll (awaited until micd has parked it), ack, nack,
 *              extend, wrong tokens, lease_lost, per-item results over two
 *              nodes;
 *   admin      stats merged over two nodes, oldest, blocked, DLQ, gaps,
 *              event lookup, replays, topics and groups on every node;
 *   stream     NDJSON range reads, stopped by the callback, error answers;
 *   stop       mic_client_stop cuts a long-poll and a retrying publish,
 *              mic_client_resume;
 *   TLS, keys  CA file, no CA, Bearer key, no key;
 *   worker     mic_worker_* (exactly once, retry text, DLQ, lease
 *              extension, fencing, two nodes, stop, limits, SIGTERM,
 *              refusal);
 *   consumer   mic_consumer_* rules (deliveries filled by hand, see
 *              leased_make), a real replay delivery from micd,
 *              mic_consumer_handler in the loop, fencing before commit.
 *
 * A lease is "taken over" deterministically by deleting the group and
 * making it again (DESIGN 12: old tokens are then not_found), not by
 * racing a lease expiry against the loop's extender.
 *
 * Most tests share one micd (group setup) with names of their own; the
 * ones that need flags, a restart or a second node start their own.
 * Nothing sleeps on a guess: conditions are awaited, and time bounds are
 * outer limits only. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "harness.h"
#include "claimkit.h"
#include "mic.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define WAIT_MS 30000          /* outer limit of every await */

static struct srv S;           /* the shared micd */

/* ---- Helpers ---- */

/* A handle over the servers s[0..n) ('retries' as mic_client_opts). */
static mic_client *client_of(const struct srv *const *s, size_t n, int retries)
{
    const char *urls[4];
    struct mic_client_opts o = {0};
    struct mic_failure f;
    mic_client *c;

    assert_true(n <= 4);
    for (size_t i = 0; i < n; i++)
        urls[i] = s[i]->url;
    o.urls = urls;
    o.nurls = n;
    o.cafile = s[0]->cacert[0] ? s[0]->cacert : NULL;
    o.retries = retries;
    o.retry_max_ms = 200;
    assert_int_equal(mic_client_new(&o, &c, &f), 0);
    return c;
}

static mic_client *client1(const struct srv *s)
{
    const struct srv *v[1] = {s};

    return client_of(v, 1, 0);
}

/* An event of 'topic' (payload {"n":n}); with an aggregate agg_type/'agg'
 * when 'agg' is not NULL, version 'ver' when > 0. */
static json_t *event(const char *topic, const char *agg, json_int_t ver, json_int_t n)
{
    json_t *e = json_pack("{sss{sI}}", "topic", topic, "payload", "n", n);

    assert_non_null(e);
    if (agg) {
        json_object_set_new(e, "aggregate_type", json_string("agg"));
        json_object_set_new(e, "aggregate_id", json_string(agg));
    }
    if (ver > 0)
        json_object_set_new(e, "aggregate_version", json_integer(ver));
    return e;
}

/* n events of 'topic' on the aggregates agg/PREFIX0.. (version 1 each,
 * payload n = i) into ev[] (the caller decrefs them). */
static void events_over_aggregates(json_t **ev, int n, const char *topic, const char *prefix)
{
    for (int i = 0; i < n; i++) {
        char agg[32];

        snprintf(agg, sizeof agg, "%s%d", prefix, i);
        ev[i] = event(topic, agg, 1, i);
    }
}

/* Publish 'e' (stolen); asserts it is stored; returns its seq. */
static int64_t publish_ok(mic_client *c, json_t *e, char *id_out)
{
    struct mic_publish_result r;

    assert_int_equal(mic_publish(c, e, &r), 0);
    assert_int_equal(r.ok, 1);
    assert_true(r.seq > 0);
    if (id_out)
        snprintf(id_out, 129, "%s", r.event_id);
    json_decref(e);
    return r.seq;
}

/* Topic 'topic' and group 'group' on it (on every node of 'c'); 'extra'
 * (may be NULL) is more of the group's config as JSON text. */
static void make_group(mic_client *c, const char *topic, const char *group, const char *extra)
{
    json_t *cfg = extra ? json_loads(extra, 0, NULL) : json_object(), *out = NULL;
    json_t *empty = json_object();

    assert_non_null(cfg);
    assert_int_equal(mic_admin_topic_put(c, topic, empty, &out), 0);
    assert_string_equal(jstr(out, "name"), topic);
    json_decref(out);
    json_decref(empty);
    json_object_set_new(cfg, "topics", json_pack("[s]", topic));
    assert_int_equal(mic_admin_group_put(c, group, cfg, &out), 0);
    assert_string_equal(jstr(out, "name"), group);
    json_decref(out);
    json_decref(cfg);
}

/* Assert the last failure of 'c'. */
static void expect_fail(mic_client *c, enum mic_fail_kind kind, long status, const char *code)
{
    const struct mic_failure *f = mic_client_failure(c);

    assert_int_equal(f->kind, kind);
    assert_int_equal(f->status, status);
    if (code)
        assert_string_equal(f->code, code);
}

/* Claim exactly one delivery from 'group' on node 'node' (fini *cl). */
static struct mic_leased *claim_one(mic_client *c, size_t node, const char *group, double ttl,
                                    double wait, struct mic_claimed *cl)
{
    struct mic_claim_opts o = {.max = 1, .lease_ttl_s = ttl, .wait_s = wait, .worker = "t"};

    assert_int_equal(mic_claim(c, node, group, &o, cl), 0);
    assert_int_equal(cl->n, 1);
    return &cl->v[0];
}

/* Settle one delivery; returns its status. */
enum verb { ACK, NACK, EXTEND };
static enum mic_item_status settle1(mic_client *c, const char *group, const struct mic_leased *d,
                                    enum verb v, const struct mic_settle_opts *o, char *time_out)
{
    const struct mic_leased *items[1] = {d};
    struct mic_item_result r;

    assert_int_equal(v == ACK ? mic_ack(c, group, items, 1, &r)
                     : v == NACK ? mic_nack(c, group, items, 1, o, &r)
                                 : mic_extend(c, group, items, 1, o, &r),
                     0);
    assert_int_equal(r.seq, d->seq);
    if (time_out)
        snprintf(time_out, 32, "%s", r.time);
    return r.status;
}

/* The item named 'name' (member 'key') of the array 'list'. */
static json_t *named(json_t *list, const char *key, const char *name)
{
    size_t i;
    json_t *it;

    json_array_foreach(list, i, it) if (!strcmp(json_string_value(json_object_get(it, key)) ?: "",
                                                name)) return it;
    return NULL;
}

/* A count of topic 'topic' ("events", ...) or, when 'group', of that group
 * in /v1/stats of node 'node' (-1: merged). */
static json_int_t stat_of(mic_client *c, int node, int group, const char *name, const char *key)
{
    json_t *st, *it;
    json_int_t v;

    assert_int_equal(mic_admin_stats(c, node, &st), 0);
    it = named(json_object_get(st, group ? "groups" : "topics"), group ? "group" : "topic", name);
    v = it ? jint(it, key) : 0;
    json_decref(st);
    return v;
}

/* The delivery of event 'id' in 'group' (GET /v1/events/{id}): member
 * 'key' as a new string (free it), or NULL. */
static char *event_field(mic_client *c, const char *id, const char *group, const char *key)
{
    json_t *ev, *d;
    char *s = NULL;

    if (mic_admin_event(c, id, &ev))
        return NULL;
    d = named(json_object_get(ev, "deliveries"), "group", group);
    if (d && json_is_string(json_object_get(d, key)))
        s = strdup(json_string_value(json_object_get(d, key)));
    else if (d && json_is_integer(json_object_get(d, key)))
        assert_true(asprintf(&s, "%lld", (long long)json_integer_value(json_object_get(d, key))) > 0);
    json_decref(ev);
    return s;
}

/* Assert that event_field(...) is 'want'. */
static void expect_field(mic_client *c, const char *id, const char *group, const char *key,
                         const char *want)
{
    char *v = event_field(c, id, group, key);

    assert_non_null(v);
    assert_string_equal(v, want);
    free(v);
}

static void rm_lmdb_dir(const char *dir)
{
    char p[300];

    snprintf(p, sizeof p, "%s/data.mdb", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/lock.mdb", dir);
    unlink(p);
    rmdir(dir);
}

/* ---- Stub listener (for what micd cannot be made to do on demand) ---- */

struct stub {
    int fd, port;
    const char *answer;    /* read the request and answer this status line,
                            * headers and body (an empty line ends the
                            * headers); "": never answer (hold the
                            * connection until the client closes it); NULL:
                            * reset the connection */
    int limit;             /* connections to take, then close the listener */
    atomic_int accepts;
    pthread_t th;
};

/* Read one request (headers and Content-Length bytes) from 'fd'. */
static void read_request(int fd)
{
    char buf[8192];
    size_t got = 0;
    char *end;
    long clen = 0;

    while (got < sizeof buf - 1) {
        ssize_t n = read(fd, buf + got, sizeof buf - 1 - got);

        if (n <= 0)
            return;
        got += (size_t)n;
        buf[got] = 0;
        if ((end = strstr(buf, "\r\n\r\n"))) {
            char *cl = strcasestr(buf, "Content-Length:");

            if (cl)
                clen = strtol(cl + 15, NULL, 10);
            if ((long)(got - (size_t)(end + 4 - buf)) >= clen)
                return;
        }
    }
}

static void *stub_main(void *arg)
{
    struct stub *s = arg;
    char ans[512];
    int alen = 0;

    if (s->answer && *s->answer) {
        const char *body = strstr(s->answer, "\n\n") + 2;

        alen = snprintf(ans, sizeof ans, "HTTP/1.1 %.*sContent-Length: %zu\r\n"
                        "Connection: close\r\n\r\n%s", (int)(body - 1 - s->answer),
                        s->answer, strlen(body), body);
    }

    while (atomic_load(&s->accepts) < s->limit) {
        int c = accept(s->fd, NULL, NULL);

        if (c < 0)
            break;
        atomic_fetch_add(&s->accepts, 1);
        if (s->answer && !*s->answer) {
            char b;

            read_request(c);
            while (read(c, &b, 1) > 0)
                ;
        } else if (s->answer) {
            read_request(c);
            if (write(c, ans, (size_t)alen) != alen)
                break;
            shutdown(c, SHUT_WR);
        } else {
            struct linger l = {1, 0}; /* close with a reset: no answer */

            setsockopt(c, SOL_SOCKET, SO_LINGER, &l, sizeof l);
        }
        close(c);
    }
    close(s->fd);
    s->fd = -1;
    return NULL;
}

static void stub_start(struct stub *s, const char *answer, int limit)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;

    memset(s, 0, sizeof *s);
    s->answer = answer;
    s->limit = limit;
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(s->fd >= 0);
    assert_int_equal(bind(s->fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(s->fd, 16), 0);
    assert_int_equal(getsockname(s->fd, (struct sockaddr *)&a, &len), 0);
    s->port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&s->th, NULL, stub_main, s), 0);
}

/* A handle on the stub's port. */
static mic_client *stub_client(const struct stub *st, int retries)
{
    struct srv fake;

    memset(&fake, 0, sizeof fake);
    snprintf(fake.url, sizeof fake.url, "http://127.0.0.1:%d", st->port);
    {
        const struct srv *v[1] = {&fake};
        return client_of(v, 1, retries);
    }
}

/* ---- Handle ---- */

static void handle_args_and_routing(void **state)
{
    const char *bad[] = {"ftp://127.0.0.1:1"};
    const char *many[MIC_NODES_MAX + 1];
    const char *three[] = {"http://10.0.0.1:8080", "http://10.0.0.2:8080/", "https://10.0.0.3:8443",
                           "http://10.0.0.4:8080"};
    struct mic_client_opts o = {0};
    struct mic_failure f;
    mic_client *c = (mic_client *)1, *c3, *c4, *d;
    size_t per[3] = {0}, moved = 0;
    json_t *h = NULL;

    (void)state;
    assert_int_equal(mic_client_new(&o, &c, &f), -1); /* no URL */
    assert_null(c);
    assert_int_equal(f.kind, MIC_FAIL_ARG);
    o.urls = bad;
    o.nurls = 1;
    assert_int_equal(mic_client_new(&o, &c, &f), -1);
    assert_int_equal(f.kind, MIC_FAIL_ARG);
    assert_non_null(strstr(f.message, "ftp://127.0.0.1:1"));
    for (int i = 0; i <= MIC_NODES_MAX; i++)
        many[i] = "http://127.0.0.1:1";
    o.urls = many;
    o.nurls = MIC_NODES_MAX + 1;
    assert_int_equal(mic_client_new(&o, &c, &f), -1);
    assert_int_equal(f.kind, MIC_FAIL_ARG);
    o.nurls = MIC_NODES_MAX;
    assert_int_equal(mic_client_new(&o, &c, NULL), 0);
    assert_int_equal(mic_client_nodes(c), MIC_NODES_MAX);
    mic_client_free(c);

    /* URLs kept (a trailing slash dropped); routing deterministic, spread,
     * and a fourth node only takes keys (rendezvous). */
    o.urls = three;
    o.nurls = 3;
    assert_int_equal(mic_client_new(&o, &c3, &f), 0);
    o.nurls = 4;
    assert_int_equal(mic_client_new(&o, &c4, &f), 0);
    assert_int_equal(mic_client_nodes(c3), 3);
    assert_string_equal(mic_client_url(c3, 1), "http://10.0.0.2:8080");
    assert_string_equal(mic_client_url(c3, 2), "https://10.0.0.3:8443");
    assert_null(mic_client_url(c3, 3));
    assert_int_equal(mic_client_dup(c3, &d), 0);
    assert_int_equal(mic_client_nodes(d), 3);
    for (int i = 0; i < 600; i++) {
        char id[32];
        size_t n3, n4;

        snprintf(id, sizeof id, "o-%d", i);
        n3 = mic_client_route(c3, "order", id, NULL);
        assert_true(n3 < 3);
        assert_int_equal(n3, mic_client_route(c3, "order", id, "ignored"));
        assert_int_equal(n3, mic_client_route(d, "order", id, NULL));
        per[n3]++;
        n4 = mic_client_route(c4, "order", id, NULL);
        if (n4 != n3) {
            assert_int_equal(n4, 3); /* moved only to the new node */
            moved++;
        }
        assert_int_equal(mic_client_route(c3, NULL, NULL, id), mic_client_route(c3, NULL, NULL, id));
    }
    for (int i = 0; i < 3; i++)
        assert_true(per[i] > 100); /* 200 each on average */
    {   /* path segments and event ids */
        char b[16], id1[33], id2[33];

        assert_string_equal(mic_path_escape("a b/c:d", b, sizeof b), "a%20b%2Fc:d");
        assert_non_null(mic_path_escape("abc", b, 4));
        assert_null(mic_path_escape("abcd", b, 4));
        assert_null(mic_path_escape("a/", b, 4));
        assert_int_equal(mic_event_id_new(id1), 0);
        assert_int_equal(mic_event_id_new(id2), 0);
        assert_int_equal(strspn(id1, "0123456789abcdef"), 32);
        assert_int_equal(strlen(id1), 32);
        assert_string_not_equal(id1, id2);
    }
    assert_true(moved > 60 && moved < 300); /* a quarter (150) on average */
    mic_client_free(d);
    mic_client_free(c3);
    mic_client_free(c4);

    /* A dup talks to micd like its original; a node the handle does not
     * have is an ARG failure. */
    c = client1(&S);
    assert_int_equal(mic_client_dup(c, &d), 0);
    {
        struct mic_response r;

        assert_int_equal(mic_request(c, 1, "GET", "/healthz", NULL, NULL, 0, NULL, &r), -1);
        expect_fail(c, MIC_FAIL_ARG, 0, NULL);
        mic_response_fini(&r);
        assert_int_equal(mic_request(c, 0, "GET", "/healthz", NULL, NULL, 0, NULL, &r), 0);
        assert_int_equal(r.status, 200);
        assert_true(r.request_id[0] != 0);
        assert_non_null(strstr(r.content_type, "application/json"));
        mic_response_fini(&r);
    }
    mic_client_free(c);
    assert_string_equal(mic_client_url(d, 0), S.url);
    assert_int_equal(mic_call(d, 0, "GET", "/healthz", NULL, &h), 0);
    assert_string_equal(jstr(h, "status"), "ok");
    json_decref(h);
    mic_client_free(d);
}

/* ---- Publish ---- */

static void publish_ids_duplicates_conflicts(void **state)
{
    mic_client *c = client1(&S);
    json_t *e = event("lm.pub", NULL, 0, 1), *bad;
    json_t *batch[5];
    struct mic_publish_result r, r2, rs[5];
    const struct mic_failure *f;
    char text[1024];
    const char *id;

    (void)state;
    assert_int_equal(mic_publish(c, e, &r), 0);
    id = json_string_value(json_object_get(e, "event_id"));
    assert_non_null(id);
    assert_int_equal(strlen(id), 32);
    assert_int_equal(strspn(id, "0123456789abcdef"), 32);
    assert_string_equal(r.event_id, id);
    assert_int_equal(r.ok, 1);
    assert_int_equal(r.duplicate, 0);
    assert_int_equal(r.node, 0);
    assert_true(r.seq > 0);
    assert_true(r.created_at[0] != 0);

    /* The same object again: a duplicate with the same seq. */
    assert_int_equal(mic_publish(c, e, &r2), 0);
    assert_int_equal(r2.duplicate, 1);
    assert_int_equal(r2.seq, r.seq);
    assert_string_equal(r2.event_id, id);

    /* Another payload under the same id: 409 event_id_conflict. */
    json_object_set_new(e, "payload", json_pack("{si}", "n", 2));
    assert_int_equal(mic_publish(c, e, &r2), -1);
    expect_fail(c, MIC_FAIL_SERVER, 409, "event_id_conflict");
    assert_int_equal(r2.ok, 0);
    assert_int_equal(r2.fail.status, 409);
    assert_string_equal(r2.event_id, id);
    json_decref(e);

    /* A bad field: 422 with the code and the field. */
    bad = event("lm.pub", "a1", 0, 1);
    json_object_set_new(bad, "aggregate_version", json_string("x"));
    assert_int_equal(mic_publish(c, bad, &r2), -1);
    f = mic_client_failure(c);
    assert_int_equal(f->kind, MIC_FAIL_SERVER);
    assert_int_equal(f->status, 422);
    assert_true(f->code[0] != 0);
    assert_non_null(strstr(f->field, "aggregate_version"));
    assert_int_equal(f->node, 0);
    assert_string_equal(r2.fail.field, f->field);
    mic_failure_text(f, text, sizeof text);
    assert_int_equal(strncmp(text, "422 ", 4), 0);
    assert_non_null(strstr(text, f->code));
    assert_non_null(strstr(text, "(field "));
    json_decref(bad);

    /* Not an object, or an empty batch: ARG, nothing sent. */
    bad = json_array();
    assert_int_equal(mic_publish(c, bad, &r2), -1);
    expect_fail(c, MIC_FAIL_ARG, 0, NULL);
    json_decref(bad);
    assert_int_equal(mic_publish_batch(c, batch, 0, rs), -1);
    expect_fail(c, MIC_FAIL_ARG, 0, NULL);

    /* A batch: results in order, seqs increasing. */
    for (int i = 0; i < 5; i++)
        batch[i] = event("lm.pub", "b1", i + 1, i);
    assert_int_equal(mic_publish_batch(c, batch, 5, rs), 0);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(rs[i].ok, 1);
        assert_int_equal(rs[i].duplicate, 0);
        assert_string_equal(rs[i].event_id, json_string_value(json_object_get(batch[i], "event_id")));
        if (i)
            assert_true(rs[i].seq > rs[i - 1].seq);
        json_decref(batch[i]);
    }
    assert_true(rs[0].seq > r.seq);
    mic_client_free(c);
}

/* A batch over two nodes, one with nothing listening: the events routed
 * to the live node are stored, the others fail with CONNECT (PARTIAL);
 * the same for an ack of deliveries of both nodes. */
static void publish_batch_partial(void **state)
{
    struct srv dead;
    const struct srv *v[2] = {&S, &dead};
    mic_client *c, *n0 = client1(&S);
    json_t *ev[12];
    struct mic_publish_result r[12];
    int ok = 0, down = 0;
    int port = free_port();

    (void)state;
    assert_true(port > 0);
    memset(&dead, 0, sizeof dead);
    snprintf(dead.url, sizeof dead.url, "http://127.0.0.1:%d", port);
    c = client_of(v, 2, -1);
    events_over_aggregates(ev, 12, "lm.part", "p");
    assert_int_equal(mic_publish_batch(c, ev, 12, r), -1);
    expect_fail(c, MIC_FAIL_PARTIAL, 0, NULL);
    for (int i = 0; i < 12; i++) {
        assert_string_equal(r[i].event_id, json_string_value(json_object_get(ev[i], "event_id")));
        if (r[i].node == 0) {
            assert_int_equal(r[i].ok, 1);
            assert_true(r[i].seq > 0);
            ok++;
        } else {
            assert_int_equal(r[i].node, 1);
            assert_int_equal(r[i].ok, 0);
            assert_int_equal(r[i].fail.kind, MIC_FAIL_CONNECT);
            down++;
        }
        json_decref(ev[i]);
    }
    assert_true(ok > 0 && down > 0);
    assert_int_equal(stat_of(n0, 0, 0, "lm.part", "events"), ok);

    /* Settling items of both nodes: node 0's are answered, node 1's are
     * UNKNOWN with its failure; an item of no node of the handle too. */
    {
        struct mic_claimed cl;
        struct mic_leased *d, other, stray;
        const struct mic_leased *items[3];
        struct mic_item_result res[3];

        make_group(n0, "lm.part", "lm.part.g", NULL);
        d = claim_one(c, 0, "lm.part.g", 30, 10, &cl);
        other = *d;
        other.node = 1;
        stray = *d;
        stray.node = 7;
        items[0] = &other;
        items[1] = d;
        items[2] = &stray;
        assert_int_equal(mic_ack(c, "lm.part.g", items, 3, res), -1);
        assert_int_equal(mic_client_failure(c)->kind, MIC_FAIL_CONNECT);
        assert_int_equal(res[0].status, MIC_ITEM_UNKNOWN);
        assert_int_equal(res[0].fail.kind, MIC_FAIL_CONNECT);
        assert_int_equal(res[0].fail.node, 1);
        assert_int_equal(res[1].status, MIC_ITEM_ACKED);
        assert_int_equal(res[1].fail.kind, MIC_FAIL_NONE);
        assert_int_equal(res[2].status, MIC_ITEM_UNKNOWN);
        assert_int_equal(res[2].fail.kind, MIC_FAIL_ARG);
        mic_claimed_fini(&cl);
    }
    mic_client_free(c);
    mic_client_free(n0);
}

/* ---- Retries ---- */

struct pressure {
    struct srv *s;
    atomic_int *stop;
    int published, failed;
    char why[600];         /* the first failure */
};

/* Publish events until told to stop, at least 5, retrying 429s after 5 ms
 * (not micd's Retry-After of 1 s: the pressure stays on). */
static void *press(void *arg)
{
    struct pressure *p = arg;
    const char *urls[1] = {p->s->url};
    struct mic_client_opts o = {.urls = urls, .nurls = 1, .retries = 1000, .retry_max_ms = 5};
    mic_client *c;

    if (mic_client_new(&o, &c, NULL)) {
        p->failed++;
        return NULL;
    }

    while (p->published < 5 || !atomic_load(p->stop)) {
        json_t *e = event("lm.r429", NULL, 0, p->published);
        struct mic_publish_result r;

        if (mic_publish(c, e, &r) || !r.ok || r.duplicate) {
            if (!p->failed++)
                mic_failure_text(&r.fail, p->why, sizeof p->why);
        } else {
            p->published++;
        }
        json_decref(e);
    }
    mic_client_free(c);
    http_thread_done();
    return NULL;
}

/* The sum of the /metrics samples whose line starts with 'name' and holds
 * 'label' (may be NULL); -1 when /metrics does not answer. */
static long metric(mic_client *c, const char *name, const char *label)
{
    struct mic_response r;
    long n = 0;
    const char *p;

    if (mic_request(c, 0, "GET", "/metrics", NULL, NULL, 0, NULL, &r) || r.status != 200) {
        mic_response_fini(&r);
        return -1;
    }
    for (p = r.body; (p = strstr(p, name)); p++) {
        const char *eol = strchr(p, '\n'), *l;

        if ((p == r.body || p[-1] == '\n') && eol &&
            (!label || ((l = strstr(p, label)) && l < eol)))
            n += strtol((const char *)memrchr(p, ' ', (size_t)(eol - p)) + 1, NULL, 10);
    }
    mic_response_fini(&r);
    return n;
}

static long count_429(mic_client *c)
{
    return metric(c, "mic_http_requests_total{", "code=\"429\"");
}

struct parked {
    const struct srv *s;
    long more_than;
};

/* More long-poll claims are parked in micd than w->more_than. */
static int parked_above(void *arg)
{
    struct parked *w = arg;
    mic_client *c = client1(w->s);
    long n = metric(c, "mic_writer_parked ", NULL);

    mic_client_free(c);
    return n > w->more_than;
}

struct seen429 {
    mic_client *c;
    long min;
};

static int enough_429(void *arg)
{
    struct seen429 *w = arg;

    return count_429(w->c) >= w->min;
}

static void retries_under_429(void **state)
{
    static const char *const args[] = {"--writer-queue", "1", "--writer-delay-ms", "50", NULL};
    struct srv s;
    struct pressure p[3];
    pthread_t th[3];
    atomic_int stop = 0;
    const struct srv *v[1] = {&s};
    mic_client *once, *c;
    int mine = 0, got429 = 0, total;
    struct seen429 w;

    (void)state;
    memset(&s, 0, sizeof s);
    assert_int_equal(srv_start(&s, args), 0);
    once = client_of(v, 1, -1);
    c = client1(&s);
    for (int i = 0; i < 3; i++) {
        p[i] = (struct pressure){.s = &s, .stop = &stop};
        assert_int_equal(pthread_create(&th[i], NULL, press, &p[i]), 0);
    }
    /* Without retries a 429 surfaces as it is (Retry-After included). */
    for (int i = 0; i < 2000 && !got429; i++) {
        json_t *e = event("lm.r429", NULL, 0, 1000 + i);
        struct mic_publish_result r;

        if (mic_publish(once, e, &r) == 0) {
            mine++;
        } else {
            const struct mic_failure *f = mic_client_failure(once);

            assert_int_equal(f->kind, MIC_FAIL_SERVER);
            assert_int_equal(f->status, 429);
            assert_string_equal(f->code, "overloaded");
            assert_true(f->retry_after_ms >= 0);
            assert_int_equal(r.fail.status, 429);
            got429 = 1;
        }
        json_decref(e);
    }
    assert_true(got429);
    /* The publishers met 429s too (one more than ours) and went on. */
    w = (struct seen429){c, 2};
    assert_true(await(enough_429, &w, WAIT_MS));
    atomic_store(&stop, 1);
    total = mine;
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        if (p[i].failed)
            fail_msg("publisher %d: %d failed, first: %s", i, p[i].failed, p[i].why);
        total += p[i].published;
    }
    /* Every event stored exactly once. */
    assert_int_equal(stat_of(c, 0, 0, "lm.r429", "events"), total);
    assert_int_equal(stat_of(c, 0, 0, "lm.r429", "duplicates"), 0);
    mic_client_free(once);
    mic_client_free(c);
    assert_int_equal(srv_stop(&s), 0);
    srv_cleanup(&s);
}

/* 503 and no answer are retried: 'retries' more attempts, then the last
 * failure; a 429's Retry-After is read; a 2xx that is not JSON is PROTO,
 * not retried (a stub listener gives the answers and counts attempts). */
static void retries_503_and_reset(void **state)
{
    struct stub st;
    mic_client *c, *d;
    json_t *e, *out = (json_t *)1;
    struct mic_publish_result r;

    (void)state;
    stub_start(&st, "503 Service Unavailable\r\nContent-Type: application/json\r\n\n"
               "{\"error\":{\"code\":\"not_ready\",\"message\":\"stub\"}}", 3);
    c = stub_client(&st, 2);
    e = event("lm.stub", NULL, 0, 1);
    assert_int_equal(mic_publish(c, e, &r), -1);
    expect_fail(c, MIC_FAIL_SERVER, 503, "not_ready");
    pthread_join(st.th, NULL);
    assert_int_equal(atomic_load(&st.accepts), 3);
    mic_client_free(c);

    stub_start(&st, "429 Too Many Requests\r\nRetry-After: 7\r\n\n", 1);
    c = stub_client(&st, -1);
    assert_int_equal(mic_publish(c, e, &r), -1);
    expect_fail(c, MIC_FAIL_SERVER, 429, "");
    assert_int_equal(mic_client_failure(c)->retry_after_ms, 7000);
    assert_string_equal(mic_client_failure(c)->message, "(no body)");
    pthread_join(st.th, NULL);
    mic_client_free(c);

    stub_start(&st, "201 Created\r\nContent-Type: text/plain\r\n\nstored, honest", 2);
    c = stub_client(&st, 3);
    assert_int_equal(mic_publish(c, e, &r), -1);
    expect_fail(c, MIC_FAIL_PROTO, 201, ""); /* an answer came: its status */
    assert_int_equal(r.fail.status, 201);
    assert_int_equal(atomic_load(&st.accepts), 1); /* not retried */
    assert_int_equal(mic_call(c, 0, "GET", "/v1/stats", NULL, &out), -1);
    expect_fail(c, MIC_FAIL_PROTO, 201, "");
    assert_null(out);
    pthread_join(st.th, NULL);
    mic_client_free(c);

    /* Resets, through a dup (which keeps the retries): 1 + 3 attempts. */
    stub_start(&st, NULL, 4);
    c = stub_client(&st, 3);
    assert_int_equal(mic_client_dup(c, &d), 0);
    mic_client_free(c);
    assert_int_equal(mic_publish(d, e, &r), -1);
    expect_fail(d, MIC_FAIL_CONNECT, 0, "");
    pthread_join(st.th, NULL);
    assert_int_equal(atomic_load(&st.accepts), 4);
    mic_client_free(d);
    json_decref(e);
}

struct bg_publish {
    mic_client *c;
    json_t *e;
    int rc;
    struct mic_publish_result r;
};

static void *bg_publish_main(void *arg)
{
    struct bg_publish *b = arg;

    b->rc = mic_publish(b->c, b->e, &b->r);
    return NULL;
}

static int two_accepts(void *arg)
{
    return atomic_load(&((struct stub *)arg)->accepts) >= 2;
}

/* mic_client_stop ends a publish that is retrying (between attempts or
 * in one) with STOPPED. */
static void stop_cuts_retries(void **state)
{
    struct stub st;
    struct bg_publish b = {0};
    pthread_t th;

    (void)state;
    stub_start(&st, NULL, 1000000);
    b.c = stub_client(&st, 1000000);
    b.e = event("lm.stopretry", NULL, 0, 1);
    assert_int_equal(pthread_create(&th, NULL, bg_publish_main, &b), 0);
    assert_true(await(two_accepts, &st, WAIT_MS)); /* retrying */
    mic_client_stop(b.c);
    pthread_join(th, NULL);
    assert_int_equal(b.rc, -1);
    assert_int_equal(mic_client_failure(b.c)->kind, MIC_FAIL_STOPPED);
    assert_int_equal(b.r.fail.kind, MIC_FAIL_STOPPED);
    shutdown(st.fd, SHUT_RDWR); /* ends the stub's accept */
    pthread_join(st.th, NULL);
    mic_client_free(b.c);
    json_decref(b.e);
}

/* timeout_ms ends a request that gets no answer (CONNECT, "timed out");
 * a long-poll claim gets its wait_s on top (checked from below only: a
 * timer never fires early). */
static void timeouts(void **state)
{
    struct stub st;
    struct mic_client_opts o = {0};
    char url[64];
    const char *urls[1] = {url};
    struct mic_claim_opts co = {.wait_s = 1};
    struct mic_claimed cl;
    mic_client *c;
    json_t *out;
    int64_t t0;

    (void)state;
    stub_start(&st, "", 2);
    snprintf(url, sizeof url, "http://127.0.0.1:%d", st.port);
    o.urls = urls;
    o.nurls = 1;
    o.timeout_ms = 300;
    o.retries = -1;
    assert_int_equal(mic_client_new(&o, &c, NULL), 0);
    assert_int_equal(mic_call(c, 0, "GET", "/v1/stats", NULL, &out), -1);
    expect_fail(c, MIC_FAIL_CONNECT, 0, NULL);
    assert_non_null(strcasestr(mic_client_failure(c)->message, "timed out"));
    t0 = mono_ms();
    assert_int_equal(mic_claim(c, 0, "g", &co, &cl), -1);
    assert_true(mono_ms() - t0 >= 1300); /* 300 ms + the 1 s wait (libmic adds 1 s) */
    expect_fail(c, MIC_FAIL_CONNECT, 0, NULL);
    mic_claimed_fini(&cl);
    mic_client_free(c);
    pthread_join(st.th, NULL);
}

static void connect_refused(void **state)
{
    struct mic_client_opts o = {0};
    char url[64];
    const char *urls[1] = {url};
    mic_client *c;
    json_t *e = event("lm.refused", NULL, 0, 1);
    struct mic_publish_result r;
    int64_t t0;
    int port = free_port();

    (void)state;
    assert_true(port > 0);
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    o.urls = urls;
    o.nurls = 1;
    o.retries = -1;
    o.connect_timeout_ms = 5000;
    assert_int_equal(mic_client_new(&o, &c, NULL), 0);
    t0 = mono_ms();
    assert_int_equal(mic_publish(c, e, &r), -1);
    assert_true(mono_ms() - t0 < 5000);
    expect_fail(c, MIC_FAIL_CONNECT, 0, "");
    assert_non_null(strstr(mic_client_failure(c)->message, url));
    assert_int_equal(r.ok, 0);
    assert_int_equal(r.fail.kind, MIC_FAIL_CONNECT);
    json_decref(e);
    mic_client_free(c);
}

/* The first attempt gets no answer (the stub resets it); micd then comes
 * up on that port and a retry stores the event, once. */
static void publish_while_server_comes_up(void **state)
{
    struct stub st;
    struct srv s;
    char listen[64];
    const char *args[] = {"--listen", listen, NULL};
    struct bg_publish b = {0};
    pthread_t th;
    mic_client *c;

    (void)state;
    stub_start(&st, NULL, 1);
    b.c = stub_client(&st, 300);
    b.e = event("lm.up", NULL, 0, 1);
    assert_int_equal(pthread_create(&th, NULL, bg_publish_main, &b), 0);
    pthread_join(st.th, NULL); /* the first attempt was reset */
    assert_int_equal(atomic_load(&st.accepts), 1);
    memset(&s, 0, sizeof s);
    snprintf(listen, sizeof listen, "127.0.0.1:%d", st.port);
    assert_int_equal(srv_start(&s, args), 0);
    assert_int_equal(s.port, st.port);
    pthread_join(th, NULL);
    assert_int_equal(b.rc, 0);
    assert_int_equal(b.r.ok, 1);
    assert_int_equal(b.r.duplicate, 0);
    c = client1(&s);
    assert_int_equal(stat_of(c, 0, 0, "lm.up", "events"), 1);
    mic_client_free(c);
    mic_client_free(b.c);
    json_decref(b.e);
    assert_int_equal(srv_stop(&s), 0);
    srv_cleanup(&s);
}

/* An answer lost with micd (kill -9 after the 2xx): publishing the same
 * object again is a duplicate with the same seq, never a second event. */
static void lost_answer_is_duplicate(void **state)
{
    struct srv s;
    mic_client *c;
    json_t *e = event("lm.lost", "l1", 1, 1);
    struct mic_publish_result r1, r2;

    (void)state;
    memset(&s, 0, sizeof s);
    assert_int_equal(srv_start(&s, NULL), 0);
    c = client1(&s);
    assert_int_equal(mic_publish(c, e, &r1), 0);
    mic_client_free(c);
    srv_kill9(&s);
    assert_int_equal(srv_start(&s, NULL), 0); /* same store, new port */
    c = client1(&s);
    assert_int_equal(mic_publish(c, e, &r2), 0);
    assert_int_equal(r2.duplicate, 1);
    assert_int_equal(r2.seq, r1.seq);
    assert_string_equal(r2.event_id, r1.event_id);
    assert_int_equal(stat_of(c, 0, 0, "lm.lost", "events"), 1);
    json_decref(e);
    mic_client_free(c);
    assert_int_equal(srv_stop(&s), 0);
    srv_cleanup(&s);
}

/* ---- Claims and settlement ---- */

/* A long-poll claim on a thread of its own. */
struct bg_claim {
    mic_client *c;
    const char *group;
    double wait_s;
    int rc;
    struct mic_failure f;
    struct mic_claimed cl;     /* the caller's: mic_claimed_fini */
};

static void *bg_claim_main(void *arg)
{
    struct bg_claim *b = arg;
    struct mic_claim_opts o = {.wait_s = b->wait_s};

    b->rc = mic_claim(b->c, 0, b->group, &o, &b->cl);
    b->f = *mic_client_failure(b->c);
    return NULL;
}

/* Start a long-poll claim on 'group' of S and wait until micd has parked
 * it (mic_writer_parked went up). */
static void bg_claim_start(struct bg_claim *b, pthread_t *th, mic_client *c, const char *group)
{
    struct parked w = {.s = &S};
    mic_client *m = client1(&S);

    w.more_than = metric(m, "mic_writer_parked ", NULL);
    mic_client_free(m);
    assert_true(w.more_than >= 0);
    memset(b, 0, sizeof *b);
    b->c = c;
    b->group = group;
    b->wait_s = 60;
    assert_int_equal(pthread_create(th, NULL, bg_claim_main, b), 0);
    assert_true(await(parked_above, &w, WAIT_MS));
}

/* A claim parked on an empty group returns the event published meanwhile
 * (the claim waits up to 60 s; the test does not time it). */
static void claim_long_poll(void **state)
{
    mic_client *c = client1(&S), *pc = client1(&S);
    struct bg_claim b;
    struct mic_leased *d;
    pthread_t th;
    char id[129];

    (void)state;
    make_group(c, "lm.lp", "lm.lp.g", NULL);
    bg_claim_start(&b, &th, c, "lm.lp.g");
    publish_ok(pc, event("lm.lp", NULL, 0, 7), id);
    pthread_join(th, NULL);
    assert_int_equal(b.rc, 0);
    assert_int_equal(b.cl.n, 1);
    d = &b.cl.v[0];
    assert_string_equal(d->event_id, id);
    assert_string_equal(d->topic, "lm.lp");
    assert_int_equal(d->attempt, 1);
    assert_int_equal(d->node, 0);
    assert_int_equal(strlen(d->lease_token), 32);
    assert_true(d->lease_expires_at[0] != 0);
    assert_int_equal(d->schema_version, 1);
    assert_null(d->replay);
    assert_int_equal(settle1(c, "lm.lp.g", d, ACK, NULL, NULL), MIC_ITEM_ACKED);
    mic_claimed_fini(&b.cl);
    mic_client_free(pc);
    mic_client_free(c);
}

static void ack_nack_extend(void **state)
{
    mic_client *c = client1(&S);
    struct mic_claimed cl;
    struct mic_leased *d, wrong;
    struct mic_settle_opts later = {.error = "later", .retry_after_s = 60};
    struct mic_settle_opts now = {.error = "now", .retry_after_s = 0};
    struct mic_settle_opts dead = {.error = "dead", .retry_after_s = -1, .dead_letter = 1};
    struct mic_settle_opts ext = {.lease_ttl_s = 600};
    char t[32], id[129];
    json_t *dlq;

    (void)state;
    make_group(c, "lm.settle", "lm.settle.g", NULL);
    publish_ok(c, event("lm.settle", NULL, 0, 1), NULL);
    publish_ok(c, event("lm.settle", NULL, 0, 2), id);

    /* ack; a second ack with the same token answers acked again (micd's
     * rule: an ack is idempotent for its own lease); a nack or an extend
     * of the acked delivery is lease_lost (DESIGN 12: the token no longer
     * holds a lease). */
    d = claim_one(c, 0, "lm.settle.g", 30, 0, &cl);
    assert_int_equal(settle1(c, "lm.settle.g", d, ACK, NULL, NULL), MIC_ITEM_ACKED);
    assert_int_equal(settle1(c, "lm.settle.g", d, ACK, NULL, NULL), MIC_ITEM_ACKED);
    assert_int_equal(settle1(c, "lm.settle.g", d, EXTEND, NULL, NULL), MIC_ITEM_LEASE_LOST);
    assert_int_equal(settle1(c, "lm.settle.g", d, NACK, &now, NULL), MIC_ITEM_LEASE_LOST);
    assert_string_equal(mic_item_status_name(MIC_ITEM_LEASE_LOST), "lease_lost");
    mic_claimed_fini(&cl);

    /* extend: a later lease_expires_at. */
    d = claim_one(c, 0, "lm.settle.g", 2, 0, &cl);
    assert_string_equal(d->event_id, id);
    assert_int_equal(settle1(c, "lm.settle.g", d, EXTEND, &ext, t), MIC_ITEM_EXTENDED);
    assert_true(strcmp(t, d->lease_expires_at) > 0);
    /* Wrong tokens (DESIGN 12): one not of the token's form, or a seq
     * with no delivery, is not_found; a well-formed token that is not the
     * lease's is lease_lost. */
    wrong = *d;
    snprintf(wrong.lease_token, sizeof wrong.lease_token, "not-a-token");
    assert_int_equal(settle1(c, "lm.settle.g", &wrong, ACK, NULL, NULL), MIC_ITEM_NOT_FOUND);
    wrong = *d;
    wrong.seq = d->seq + 1000000;
    assert_int_equal(settle1(c, "lm.settle.g", &wrong, ACK, NULL, NULL), MIC_ITEM_NOT_FOUND);
    wrong = *d;
    snprintf(wrong.lease_token, sizeof wrong.lease_token, "0123456789abcdef0123456789abcdef");
    assert_int_equal(settle1(c, "lm.settle.g", &wrong, ACK, NULL, NULL), MIC_ITEM_LEASE_LOST);

    /* nack: retrying with not_before; its error shows in the lookup. */
    assert_int_equal(settle1(c, "lm.settle.g", d, NACK, &later, t), MIC_ITEM_RETRYING);
    assert_true(t[0] != 0);
    expect_field(c, id, "lm.settle.g", "last_error", "later");
    expect_field(c, id, "lm.settle.g", "not_before", t);
    mic_claimed_fini(&cl);
    assert_int_equal(mic_claim(c, 0, "lm.settle.g", NULL, &cl), 0);
    assert_int_equal(cl.n, 0); /* not before a minute */
    mic_claimed_fini(&cl);
    {
        json_t *out = NULL;

        assert_int_equal(mic_admin_oldest(c, 0, "lm.settle.g", 0, &out), 0);
        assert_string_equal(jstr(dlv(out, 0), "reason"), "retry");
        assert_string_equal(jstr(dlv(out, 0), "last_error"), "later");
        json_decref(out);
    }
    /* retry_after_s 0: claimable again (the claim long-polls: micd may
     * make it ready on the writer's next turn), attempt 2; dead_letter:
     * DLQ.  The same for the successor a dead-lettered head releases and a
     * requeued delivery below, and for a group that backfills. */
    publish_ok(c, event("lm.settle", NULL, 0, 3), id);
    d = claim_one(c, 0, "lm.settle.g", 30, 0, &cl);
    assert_string_equal(d->event_id, id);
    assert_int_equal(settle1(c, "lm.settle.g", d, NACK, &now, NULL), MIC_ITEM_RETRYING);
    mic_claimed_fini(&cl);
    d = claim_one(c, 0, "lm.settle.g", 30, 10, &cl);
    assert_string_equal(d->event_id, id);
    assert_int_equal(d->attempt, 2);
    assert_int_equal(settle1(c, "lm.settle.g", d, NACK, &dead, NULL), MIC_ITEM_DEAD_LETTERED);
    mic_claimed_fini(&cl);
    assert_int_equal(mic_admin_dlq(c, 0, "lm.settle.g", 10, NULL, &dlq), 0);
    assert_int_equal(json_array_size(json_object_get(dlq, "deliveries")), 1);
    assert_string_equal(jstr(dlv(dlq, 0), "last_error"), "dead");
    json_decref(dlq);
    mic_client_free(c);
}

static void lease_lost_after_reclaim(void **state)
{
    mic_client *c = client1(&S);
    struct mic_claimed cl1, cl2;
    struct mic_leased *d1, *d2;

    (void)state;
    make_group(c, "lm.lost2", "lm.lost2.g", "{\"backoff\":{\"initial_ms\":1,\"max_ms\":1}}");
    publish_ok(c, event("lm.lost2", NULL, 0, 1), NULL);
    d1 = claim_one(c, 0, "lm.lost2.g", 1, 0, &cl1);
    /* Claimable again once the 1 s lease has expired: the long-poll
     * returns it. */
    d2 = claim_one(c, 0, "lm.lost2.g", 30, 20, &cl2);
    assert_int_equal(d2->seq, d1->seq);
    assert_int_equal(d2->attempt, 2);
    assert_int_equal(settle1(c, "lm.lost2.g", d1, ACK, NULL, NULL), MIC_ITEM_LEASE_LOST);
    assert_int_equal(settle1(c, "lm.lost2.g", d1, EXTEND, NULL, NULL), MIC_ITEM_LEASE_LOST);
    assert_int_equal(settle1(c, "lm.lost2.g", d2, ACK, NULL, NULL), MIC_ITEM_ACKED);
    mic_claimed_fini(&cl1);
    mic_claimed_fini(&cl2);

    /* An unknown group: 404 in the failure. */
    assert_int_equal(mic_claim(c, 0, "lm.nosuch", NULL, &cl1), -1);
    expect_fail(c, MIC_FAIL_SERVER, 404, "not_found");
    assert_int_equal(cl1.n, 0);
    mic_claimed_fini(&cl1);
    mic_client_free(c);
}

/* ---- Admin ---- */

static void admin_two_nodes(void **state)
{
    struct srv s2;
    const struct srv *v[2] = {&S, &s2};
    mic_client *c, *n0, *n1;
    json_t *ev[20], *out, *one;
    struct mic_publish_result r[20];
    json_int_t on[2] = {0, 0};
    size_t k;
    json_t *it;

    (void)state;
    memset(&s2, 0, sizeof s2);
    assert_int_equal(srv_start(&s2, NULL), 0);
    c = client_of(v, 2, 0);
    n0 = client1(&S);
    n1 = client1(&s2);

    /* A put goes to every node. */
    make_group(c, "lm.two", "lm.two.g", "{\"max_attempts\":3}");
    assert_int_equal(mic_call(n0, 0, "GET", "/v1/groups/lm.two.g", NULL, &one), 0);
    assert_int_equal(jint(one, "max_attempts"), 3);
    json_decref(one);
    assert_int_equal(mic_call(n1, 0, "GET", "/v1/groups/lm.two.g", NULL, &one), 0);
    assert_int_equal(jint(one, "max_attempts"), 3);
    json_decref(one);
    assert_int_equal(mic_call(n1, 0, "GET", "/v1/topics/lm.two", NULL, &one), 0);
    json_decref(one);
    assert_int_equal(mic_admin_group_get(c, "lm.two.g", &out), 0);
    assert_string_equal(jstr(out, "name"), "lm.two.g");
    json_decref(out);
    assert_int_equal(mic_admin_topic_get(c, "lm.two", &out), 0);
    assert_string_equal(jstr(out, "name"), "lm.two");
    json_decref(out);
    assert_int_equal(mic_admin_groups(c, &out), 0);
    assert_non_null(named(json_object_get(out, "groups"), "name", "lm.two.g"));
    json_decref(out);
    assert_int_equal(mic_admin_topics(c, &out), 0);
    assert_non_null(named(json_object_get(out, "topics"), "name", "lm.two"));
    json_decref(out);

    /* A batch split over the nodes; stats per node and merged. */
    events_over_aggregates(ev, 20, "lm.two", "t");
    assert_int_equal(mic_publish_batch(c, ev, 20, r), 0);
    for (int i = 0; i < 20; i++) {
        assert_int_equal(r[i].ok, 1);
        assert_int_equal(r[i].node, (int)mic_client_route(c, "agg", json_string_value(json_object_get(
                                                                     ev[i], "aggregate_id")), NULL));
        on[r[i].node]++;
    }
    assert_true(on[0] > 0 && on[1] > 0);
    assert_int_equal(stat_of(c, 0, 0, "lm.two", "events"), on[0]);
    assert_int_equal(stat_of(c, 1, 0, "lm.two", "events"), on[1]);
    assert_int_equal(stat_of(c, -1, 0, "lm.two", "events"), 20);
    assert_int_equal(stat_of(c, -1, 1, "lm.two.g", "pending"), 20);
    {   /* ages: the merged one is the older node's (read after both) */
        double age[2];

        for (int i = 0; i < 2; i++) {
            assert_int_equal(mic_admin_stats(c, i, &one), 0);
            age[i] = json_number_value(json_object_get(
                named(json_object_get(one, "groups"), "group", "lm.two.g"), "oldest_unhandled_age_s"));
            json_decref(one);
        }
        assert_int_equal(mic_admin_stats(c, -1, &one), 0);
        assert_true(json_number_value(json_object_get(
                        named(json_object_get(one, "groups"), "group", "lm.two.g"),
                        "oldest_unhandled_age_s")) >= (age[0] > age[1] ? age[0] : age[1]));
        json_decref(one);
    }
    assert_int_equal(mic_admin_stats(c, -1, &out), 0);
    assert_int_equal(jint(out, "nodes"), 2);
    json_decref(out);

    /* oldest over both nodes: each with its node, sorted, cut to limit. */
    assert_int_equal(mic_admin_oldest(c, -1, "lm.two.g", 25, &out), 0);
    assert_int_equal(json_array_size(json_object_get(out, "deliveries")), 20);
    json_array_foreach(json_object_get(out, "deliveries"), k, it) {
        assert_true(json_is_integer(json_object_get(it, "node")));
        if (k)
            assert_true(strcmp(jstr(json_array_get(json_object_get(out, "deliveries"), k - 1),
                                    "created_at"), jstr(it, "created_at")) <= 0);
    }
    json_decref(out);
    assert_int_equal(mic_admin_oldest(c, -1, "lm.two.g", 5, &out), 0);
    assert_int_equal(json_array_size(json_object_get(out, "deliveries")), 5);
    json_decref(out);
    assert_int_equal(mic_admin_oldest(c, 1, "lm.two.g", 0, &out), 0);
    assert_int_equal(json_array_size(json_object_get(out, "deliveries")), on[1] < 10 ? on[1] : 10);
    json_decref(out);

    /* The event on whichever node holds it; 404 when none does. */
    for (int i = 0; i < 20; i++)
        if (r[i].node == 1) {
            assert_int_equal(mic_admin_event(c, r[i].event_id, &out), 0);
            assert_int_equal(jint(out, "node"), 1);
            assert_int_equal(jint(json_object_get(out, "event"), "seq"), r[i].seq);
            json_decref(out);
            /* its aggregate, on the node it routes to */
            assert_int_equal(mic_admin_aggregate(c, "agg", json_string_value(json_object_get(
                                                              ev[i], "aggregate_id")), &out),
                             0);
            assert_int_equal(json_array_size(json_object_get(out, "events")), 1);
            json_decref(out);
            break;
        }
    assert_int_equal(mic_admin_event(c, "lm-no-such-event", &out), -1);
    expect_fail(c, MIC_FAIL_SERVER, 404, NULL);
    assert_null(out);
    for (int i = 0; i < 20; i++)
        json_decref(ev[i]);

    /* A delete goes to every node. */
    assert_int_equal(mic_admin_group_delete(c, "lm.two.g"), 0);
    assert_int_equal(mic_call(n1, 0, "GET", "/v1/groups/lm.two.g", NULL, &one), -1);
    expect_fail(n1, MIC_FAIL_SERVER, 404, NULL);
    assert_int_equal(mic_call(n0, 0, "GET", "/v1/groups/lm.two.g", NULL, &one), -1);
    expect_fail(n0, MIC_FAIL_SERVER, 404, NULL);
    assert_int_equal(mic_admin_group_get(c, "lm.two.g", &out), -1);
    assert_null(out);
    /* a topic with events is not deleted: 409 topic_not_empty */
    assert_int_equal(mic_admin_topic_delete(c, "lm.two"), -1);
    expect_fail(c, MIC_FAIL_SERVER, 409, "topic_not_empty");
    one = json_object();
    assert_int_equal(mic_admin_topic_put(c, "lm.empty", one, NULL), 0);
    json_decref(one);
    assert_int_equal(mic_admin_topic_delete(c, "lm.empty"), 0);
    assert_int_equal(mic_call(n1, 0, "GET", "/v1/topics/lm.empty", NULL, &one), -1);
    expect_fail(n1, MIC_FAIL_SERVER, 404, NULL);

    mic_client_free(n0);
    mic_client_free(n1);
    mic_client_free(c);
    assert_int_equal(srv_stop(&s2), 0);
    srv_cleanup(&s2);
}

/* The calls the mic CLI is built on: an error answer read by
 * mic_response_failure, the last answer as it came (mic_client_answer),
 * claims and settlements whose options go as written (micd judges them),
 * blocked with a page size and an escaped reason; over two nodes a merge
 * has no one answer, a PUT on both keeps node 0's, and a refused event's
 * field names the caller's index. */
static void admin_json_calls(void **state)
{
    struct srv s2;
    const struct srv *v[2] = {&S, &s2};
    struct mic_response r = {0};
    struct mic_failure f;
    struct mic_claimed cl = {0};
    struct mic_item_result res[2];
    const struct mic_leased *items[2];
    const struct mic_response *a;
    mic_client *c, *c2;
    json_t *out = NULL, *req, *ev[24], *empty;
    struct mic_publish_result pr[24];
    char *raw, agg_field[64];
    size_t len;
    int bad = -1, seen0 = 0;

    (void)state;
    /* mic_response_failure on answers as mic_request hands them back. */
    r.status = 409;
    r.json = json_loads("{\"error\":{\"code\":\"version_conflict\",\"message\":\"m\","
                        "\"field\":\"f\"}}", 0, NULL);
    snprintf(r.retry_after, sizeof r.retry_after, "3");
    assert_int_equal(mic_response_failure(&r, 2, &f), 1);
    assert_int_equal(f.kind, MIC_FAIL_SERVER);
    assert_int_equal(f.status, 409);
    assert_int_equal(f.node, 2);
    assert_string_equal(f.code, "version_conflict");
    assert_string_equal(f.message, "m");
    assert_string_equal(f.field, "f");
    assert_int_equal(f.retry_after_ms, 3000);
    json_decref(r.json);
    memset(&r, 0, sizeof r);
    r.status = 502;
    r.body = "bad gateway\r\nmore";
    r.len = strlen(r.body);
    assert_int_equal(mic_response_failure(&r, 0, &f), 1);
    assert_string_equal(f.code, "");
    assert_string_equal(f.message, "bad gateway");
    assert_int_equal(f.retry_after_ms, -1);
    r.len = 0;
    assert_int_equal(mic_response_failure(&r, 0, &f), 1);
    assert_string_equal(f.message, "(no body)");
    r.status = 204;
    assert_int_equal(mic_response_failure(&r, 0, &f), 0);
    assert_int_equal(f.kind, MIC_FAIL_NONE);

    c = client1(&S);
    make_group(c, "lm.json", "lm.json.g", "{\"ordered\":true}");
    /* The answer as it came: the bytes mic_request reads. */
    assert_int_equal(mic_admin_topics(c, &out), 0);
    a = mic_client_answer(c);
    assert_int_equal(a->status, 200);
    assert_non_null(a->body);
    assert_null(a->json);
    raw = strndup(a->body, a->len);
    len = a->len;
    json_decref(out);
    assert_int_equal(mic_request(c, 0, "GET", "/v1/topics", NULL, NULL, 0, NULL, &r), 0);
    assert_int_equal(r.len, len);
    assert_memory_equal(r.body, raw, len);
    mic_response_fini(&r);
    free(raw);
    assert_null(mic_client_answer(c)->body); /* mic_request's answer is the caller's */
    assert_int_equal(mic_admin_group_get(c, "lm.json.nosuch", &out), -1);
    assert_null(out);
    assert_int_equal(mic_client_answer(c)->status, 404);
    assert_non_null(strstr(mic_client_answer(c)->body, "not_found"));

    /* A claim as written: micd's bound, then a claim of two. */
    publish_ok(c, event("lm.json", "lmj.a1", 1, 1), NULL);
    publish_ok(c, event("lm.json", "lmj.a2", 1, 2), NULL);
    req = json_pack("{si}", "max", 0);
    assert_int_equal(mic_claim_json(c, 0, "lm.json.g", req, &cl), -1);
    expect_fail(c, MIC_FAIL_SERVER, 422, "invalid_request");
    assert_string_equal(mic_client_failure(c)->field, "max");
    mic_claimed_fini(&cl);
    json_decref(req);
    req = json_integer(1);
    assert_int_equal(mic_claim_json(c, 0, "lm.json.g", req, &cl), -1);
    expect_fail(c, MIC_FAIL_ARG, 0, NULL);
    mic_claimed_fini(&cl);
    json_decref(req);
    req = json_pack("{sisi}", "max", 2, "wait_s", 1);
    assert_int_equal(mic_claim_json(c, 0, "lm.json.g", req, &cl), 0);
    json_decref(req);
    assert_int_equal(cl.n, 2);
    assert_int_equal(mic_client_answer(c)->status, 200);
    assert_non_null(strstr(mic_client_answer(c)->body, cl.v[0].lease_token));
    items[0] = &cl.v[0];
    items[1] = &cl.v[1];

    /* Settlements as written: a nack whose retry_after_s micd refuses
     * (mic_nack would have left it out), an extend, an ack. */
    req = json_pack("{si}", "retry_after_s", -5);
    assert_int_equal(mic_settle_json(c, MIC_SETTLE_NACK, "lm.json.g", items, 2, req, res), -1);
    expect_fail(c, MIC_FAIL_SERVER, 422, "invalid_request");
    assert_string_equal(mic_client_failure(c)->field, "retry_after_s");
    assert_int_equal(res[0].status, MIC_ITEM_UNKNOWN);
    json_decref(req);
    req = json_pack("{s[]}", "deliveries");
    assert_int_equal(mic_settle_json(c, MIC_SETTLE_ACK, "lm.json.g", items, 2, req, res), -1);
    expect_fail(c, MIC_FAIL_ARG, 0, NULL);
    json_decref(req);
    req = json_pack("{si}", "lease_ttl_s", 600);
    assert_int_equal(mic_settle_json(c, MIC_SETTLE_EXTEND, "lm.json.g", items, 2, req, res), 0);
    json_decref(req);
    assert_int_equal(res[0].status, MIC_ITEM_EXTENDED);
    assert_true(res[1].time[0] != 0);
    assert_non_null(strstr(mic_client_answer(c)->body, "\"extended\""));
    assert_int_equal(mic_settle_json(c, MIC_SETTLE_ACK, "lm.json.g", items, 2, NULL, res), 0);
    assert_int_equal(res[0].status, MIC_ITEM_ACKED);
    assert_int_equal(res[1].status, MIC_ITEM_ACKED);
    assert_int_equal(res[1].seq, cl.v[1].seq);
    mic_claimed_fini(&cl);

    /* blocked: a page size micd judges, a reason escaped. */
    assert_int_equal(mic_admin_blocked_page(c, 0, "lm.json.g", NULL, 5, &out), 0);
    assert_true(json_is_array(json_object_get(out, "aggregates")));
    json_decref(out);
    assert_int_equal(mic_admin_blocked_page(c, 0, "lm.json.g", NULL, -1, &out), -1);
    expect_fail(c, MIC_FAIL_SERVER, 422, "invalid_request");
    assert_string_equal(mic_client_failure(c)->field, "limit");
    assert_int_equal(mic_admin_blocked(c, 0, "lm.json.g", "a b&c", &out), -1);
    expect_fail(c, MIC_FAIL_SERVER, 422, "invalid_request");
    assert_string_equal(mic_client_failure(c)->field, "reason");
    assert_int_equal(mic_admin_oldest(c, 0, "lm.json.g", -2, &out), -1);
    assert_string_equal(mic_client_failure(c)->field, "limit");

    /* Two nodes. */
    memset(&s2, 0, sizeof s2);
    assert_int_equal(srv_start(&s2, NULL), 0);
    c2 = client_of(v, 2, 0);
    empty = json_object();
    assert_int_equal(mic_admin_topic_put(c2, "lm.json2", empty, &out), 0);
    json_decref(empty);
    json_decref(out);
    assert_int_equal(mic_client_answer(c2)->status, 201);   /* node 0's, kept */
    assert_non_null(strstr(mic_client_answer(c2)->body, "lm.json2"));
    assert_int_equal(mic_admin_stats(c2, -1, &out), 0);
    assert_null(mic_client_answer(c2)->body);               /* a merge: no one answer */
    assert_int_equal(mic_client_answer(c2)->status, 0);
    json_decref(out);
    assert_int_equal(mic_admin_stats(c2, 1, &out), 0);
    assert_int_equal(mic_client_answer(c2)->status, 200);
    json_decref(out);
    /* A refused event that is not first in its node's part: the field
     * names its index in the caller's batch. */
    for (int i = 0; i < 24; i++) {
        char agg[32];

        snprintf(agg, sizeof agg, "lmj.k%d", i);
        ev[i] = event("lm.json2", agg, 0, i);
        if (mic_client_route(c2, "agg", agg, NULL) == 0)
            seen0 = 1;
        else if (seen0 && bad < 0)
            bad = i;   /* node 1's, after one of node 0's: its index there is lower */
    }
    assert_true(bad > 0);
    json_object_set_new(ev[bad], "priority", json_integer(999));
    assert_int_equal(mic_publish_batch(c2, ev, 24, pr), -1);
    expect_fail(c2, MIC_FAIL_PARTIAL, 422, "invalid_event");
    snprintf(agg_field, sizeof agg_field, "events[%d].priority", bad);
    assert_string_equal(pr[bad].fail.field, agg_field);
    assert_string_equal(mic_client_failure(c2)->field, agg_field);
    for (int i = 0; i < 24; i++)
        json_decref(ev[i]);
    mic_client_free(c2);
    assert_int_equal(srv_stop(&s2), 0);
    srv_cleanup(&s2);
    mic_client_free(c);
}


/* blocked (a leased head holds its successor), DLQ requeue and skip, gap
 * skip, on one node. */
static void admin_blocked_dlq_gaps(void **state)
{
    mic_client *c = client1(&S);
    struct mic_claimed cl;
    struct mic_leased *d;
    struct mic_settle_opts dead = {.error = "poison", .retry_after_s = -1, .dead_letter = 1};
    int64_t s1, s2;
    json_t *out, *a, *body;
    struct mic_publish_result r;
    json_t *e;

    (void)state;
    make_group(c, "lm.blk", "lm.blk.g", "{\"ordered\":true}");
    s1 = publish_ok(c, event("lm.blk", "k1", 1, 1), NULL);
    s2 = publish_ok(c, event("lm.blk", "k1", 2, 2), NULL);
    d = claim_one(c, 0, "lm.blk.g", 30, 0, &cl);
    assert_int_equal(d->seq, s1);
    assert_int_equal(d->aggregate_version, 1);
    assert_string_equal(d->aggregate_type, "agg");
    assert_string_equal(d->aggregate_id, "k1");
    for (int node = 0; node >= -1; node--) {
        assert_int_equal(mic_admin_blocked(c, node, "lm.blk.g", NULL, &out), 0);
        a = named(json_object_get(out, "aggregates"), "aggregate_id", "k1");
        assert_non_null(a);
        assert_string_equal(jstr(a, "reason"), "lease");
        assert_int_equal(jint(a, "head_seq"), s1);
        assert_int_equal(jint(a, "waiting"), 1);
        if (node < 0)
            assert_int_equal(jint(a, "node"), 0);
        json_decref(out);
    }
    assert_int_equal(mic_admin_blocked(c, 0, "lm.blk.g", "gap", &out), 0);
    assert_null(named(json_object_get(out, "aggregates"), "aggregate_id", "k1"));
    json_decref(out);

    /* Both to the DLQ (release policy: the head's DLQ frees the next). */
    assert_int_equal(settle1(c, "lm.blk.g", d, NACK, &dead, NULL), MIC_ITEM_DEAD_LETTERED);
    mic_claimed_fini(&cl);
    d = claim_one(c, 0, "lm.blk.g", 30, 10, &cl);
    assert_int_equal(d->seq, s2);
    assert_int_equal(settle1(c, "lm.blk.g", d, NACK, &dead, NULL), MIC_ITEM_DEAD_LETTERED);
    mic_claimed_fini(&cl);
    assert_int_equal(mic_admin_dlq(c, 0, "lm.blk.g", 1, NULL, &out), 0);
    assert_int_equal(json_array_size(json_object_get(out, "deliveries")), 1);
    assert_int_equal(jint(dlv(out, 0), "seq"), s1);
    assert_string_equal(jstr(dlv(out, 0), "last_error"), "poison");
    {   /* the next page, from the cursor */
        char *next = strdup(jstr(out, "next"));
        json_t *p2;

        assert_int_equal(mic_admin_dlq(c, 0, "lm.blk.g", 10, next, &p2), 0);
        assert_int_equal(json_array_size(json_object_get(p2, "deliveries")), 1);
        assert_int_equal(jint(dlv(p2, 0), "seq"), s2);
        json_decref(p2);
        free(next);
    }
    json_decref(out);
    body = json_pack("{s[I]}", "seqs", (json_int_t)s1);
    assert_int_equal(mic_admin_dlq_requeue(c, 0, "lm.blk.g", body, &out), 0);
    assert_string_equal(jstr(result(out, 0), "status"), "requeued");
    json_decref(out);
    json_decref(body);
    body = json_pack("{s[II]}", "seqs", (json_int_t)s2, (json_int_t)s1);
    assert_int_equal(mic_admin_dlq_skip(c, 0, "lm.blk.g", body, &out), 0);
    expect_result(out, 0, s2, "skipped");
    expect_result(out, 1, s1, "not_in_dlq");
    json_decref(out);
    json_decref(body);
    d = claim_one(c, 0, "lm.blk.g", 30, 10, &cl); /* the requeued one */
    assert_int_equal(d->seq, s1);
    assert_int_equal(settle1(c, "lm.blk.g", d, ACK, NULL, NULL), MIC_ITEM_ACKED);
    mic_claimed_fini(&cl);
    assert_int_equal(mic_admin_dlq(c, 0, "lm.blk.g", 0, NULL, &out), 0);
    assert_int_equal(json_array_size(json_object_get(out, "deliveries")), 0);
    json_decref(out);

    /* A gap: version 2 skipped on micd, then refused when it comes. */
    publish_ok(c, event("lm.blk", "k2", 1, 1), NULL);
    publish_ok(c, event("lm.blk", "k2", 3, 3), NULL);
    assert_int_equal(mic_admin_aggregate(c, "agg", "k2", &out), 0);
    assert_int_equal(json_array_size(json_object_get(out, "events")), 2);
    json_decref(out);
    assert_int_equal(mic_admin_gap_skip(c, "agg", "k2", 2, &out), 0);
    assert_int_equal(jint(out, "skipped_version"), 2);
    assert_true(json_is_boolean(json_object_get(out, "released")));
    json_decref(out);
    e = event("lm.blk", "k2", 2, 2);
    assert_int_equal(mic_publish(c, e, &r), -1);
    expect_fail(c, MIC_FAIL_SERVER, 409, "version_skipped");
    json_decref(e);
    assert_int_equal(mic_admin_gap_skip(c, "agg", "no-such", 2, &out), -1);
    expect_fail(c, MIC_FAIL_SERVER, 404, NULL);
    mic_client_free(c);
}

static void admin_replays(void **state)
{
    mic_client *c = client1(&S);
    json_t *body, *out;

    (void)state;
    for (int i = 0; i < 3; i++)
        publish_ok(c, event("lm.rep", NULL, 0, i), NULL);
    body = json_pack("{ssss}", "topic", "lm.rep", "run_id", "lm-run");
    assert_int_equal(mic_admin_replay_create(c, 0, body, &out), 0);
    assert_string_equal(jstr(out, "run_id"), "lm-run");
    assert_int_equal(jint(out, "selected"), 3);
    json_decref(out);
    json_decref(body);
    assert_int_equal(mic_admin_replay_get(c, 0, "lm-run", &out), 0);
    assert_string_equal(jstr(out, "topic"), "lm.rep");
    assert_string_equal(jstr(out, "effects"), "forbid");
    assert_int_equal(jint(out, "pending"), 3);
    json_decref(out);
    assert_int_equal(mic_admin_replays(c, 0, &out), 0);
    assert_non_null(named(json_object_get(out, "replays"), "run_id", "lm-run"));
    json_decref(out);
    assert_int_equal(mic_admin_replay_delete(c, 0, "lm-run"), 0);
    assert_int_equal(mic_admin_replay_get(c, 0, "lm-run", &out), -1);
    expect_fail(c, MIC_FAIL_SERVER, 404, NULL);
    assert_null(out);
    assert_int_equal(mic_admin_replay_delete(c, 0, "lm-run"), -1);
    expect_fail(c, MIC_FAIL_SERVER, 404, NULL);
    mic_client_free(c);
}

/* ---- Streams ---- */

struct lines {
    char buf[16384];
    size_t len;
    int calls, stop_at;
};

static int collect(const char *p, size_t n, void *arg)
{
    struct lines *l = arg;

    l->calls++;
    if (l->stop_at && l->calls >= l->stop_at)
        return 1;
    assert_true(l->len + n < sizeof l->buf);
    memcpy(l->buf + l->len, p, n);
    l->len += n;
    l->buf[l->len] = 0;
    return 0;
}

static void stream_ndjson(void **state)
{
    mic_client *c = client1(&S);
    struct lines l;
    char ids[5][129], *line, *save;
    int n = 0;

    (void)state;
    for (int i = 0; i < 5; i++)
        publish_ok(c, event("lm.nd", NULL, 0, i), ids[i]);
    memset(&l, 0, sizeof l);
    assert_int_equal(mic_stream(c, 0, "/v1/topics/lm.nd/events", "application/x-ndjson",
                                collect, &l), 0);
    for (line = strtok_r(l.buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save), n++) {
        json_t *e = json_loads(line, 0, NULL);
        int found = 0;

        assert_non_null(e);
        for (int i = 0; i < 5; i++)
            found += !strcmp(jstr(e, "event_id"), ids[i]);
        assert_int_equal(found, 1);
        json_decref(e);
    }
    assert_int_equal(n, 5);

    /* The callback stops it. */
    memset(&l, 0, sizeof l);
    l.stop_at = 1;
    assert_int_equal(mic_stream(c, 0, "/v1/topics/lm.nd/events", "application/x-ndjson",
                                collect, &l), -1);
    expect_fail(c, MIC_FAIL_STOPPED, 0, NULL);
    assert_int_equal(l.calls, 1);

    /* An error answer is SERVER, never handed to the callback. */
    memset(&l, 0, sizeof l);
    assert_int_equal(mic_stream(c, 0, "/v1/topics/lm.nd/events?limit=0", NULL, collect, &l), -1);
    expect_fail(c, MIC_FAIL_SERVER, 422, NULL);
    assert_int_equal(l.calls, 0);
    mic_client_free(c);
}

/* ---- Stop ---- */

static void stop_cuts_long_poll(void **state)
{
    mic_client *c = client1(&S);
    struct bg_claim b;
    struct mic_claimed cl;
    pthread_t th;
    struct mic_publish_result r;
    json_t *e;

    (void)state;
    make_group(c, "lm.stop", "lm.stop.g", NULL);
    bg_claim_start(&b, &th, c, "lm.stop.g");
    mic_client_stop(c);
    pthread_join(th, NULL);
    assert_int_equal(b.rc, -1);
    assert_int_equal(b.f.kind, MIC_FAIL_STOPPED);
    assert_int_equal(b.cl.n, 0);
    mic_claimed_fini(&b.cl);
    /* Stopped stays in force until resumed: a publish is cut too (it may
     * have reached micd: publishing it again after the resume is safe). */
    e = event("lm.stop", NULL, 0, 1);
    assert_int_equal(mic_publish(c, e, &r), -1);
    expect_fail(c, MIC_FAIL_STOPPED, 0, NULL);
    mic_client_resume(c);
    assert_int_equal(mic_publish(c, e, &r), 0);
    assert_int_equal(r.ok, 1);
    json_decref(e);
    assert_int_equal(mic_claim(c, 0, "lm.stop.g", NULL, &cl), 0);
    assert_int_equal(cl.n, 1);
    mic_claimed_fini(&cl);
    mic_client_free(c);
}

/* ---- TLS and keys ---- */

static void tls_and_keys(void **state)
{
    char dir[] = "/tmp/mic-libmic-tls-XXXXXX", crt[200], key[200], keys[200], cmd[1200];
    unsigned char h[SHA256_DIGEST_LENGTH];
    const char *secret = "libmic-test-secret";
    const char *args[] = {"--tls-cert", crt, "--tls-key", key, "--keys", keys, NULL};
    const char *urls[1];
    struct mic_client_opts o = {0};
    struct srv s;
    mic_client *c;
    json_t *out, *cfg = json_object();
    FILE *f;

    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(crt, sizeof crt, "%s/ca.crt", dir);
    snprintf(key, sizeof key, "%s/ca.key", dir);
    snprintf(keys, sizeof keys, "%s/keys", dir);
    /* One self-signed certificate for 127.0.0.1: the server's and its CA. */
    snprintf(cmd, sizeof cmd,
             "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=127.0.0.1 "
             "-addext subjectAltName=IP:127.0.0.1 -keyout %s -out %s > /dev/null 2>&1",
             key, crt);
    assert_int_equal(system(cmd), 0);
    SHA256((const unsigned char *)secret, strlen(secret), h);
    assert_non_null(f = fopen(keys, "w"));
    fprintf(f, "lm admin ");
    for (int i = 0; i < 32; i++)
        fprintf(f, "%02x", h[i]);
    fprintf(f, " *\n");
    assert_int_equal(fclose(f), 0);
    memset(&s, 0, sizeof s);
    snprintf(s.cacert, sizeof s.cacert, "%s", crt);
    assert_int_equal(srv_start(&s, args), 0);
    assert_int_equal(strncmp(s.url, "https://", 8), 0);
    urls[0] = s.url;
    o.urls = urls;
    o.nurls = 1;
    o.retries = -1;

    /* CA file and key: works. */
    o.cafile = crt;
    o.key = secret;
    assert_int_equal(mic_client_new(&o, &c, NULL), 0);
    assert_int_equal(mic_admin_topic_put(c, "lm.tls", cfg, &out), 0);
    json_decref(out);
    publish_ok(c, event("lm.tls", NULL, 0, 1), NULL);
    mic_client_free(c);

    /* The system's CAs do not know it: CONNECT, about the certificate. */
    o.cafile = NULL;
    assert_int_equal(mic_client_new(&o, &c, NULL), 0);
    assert_int_equal(mic_admin_topic_get(c, "lm.tls", &out), -1);
    expect_fail(c, MIC_FAIL_CONNECT, 0, NULL);
    assert_non_null(strcasestr(mic_client_failure(c)->message, "certificate"));
    mic_client_free(c);

    /* No key: 401 unauthorized; a wrong one too. */
    o.cafile = crt;
    o.key = NULL;
    assert_int_equal(mic_client_new(&o, &c, NULL), 0);
    assert_int_equal(mic_admin_topic_get(c, "lm.tls", &out), -1);
    expect_fail(c, MIC_FAIL_SERVER, 401, "unauthorized");
    mic_client_free(c);
    o.key = "not-the-secret";
    assert_int_equal(mic_client_new(&o, &c, NULL), 0);
    assert_int_equal(mic_admin_stats(c, 0, &out), -1);
    expect_fail(c, MIC_FAIL_SERVER, 401, "unauthorized");
    mic_client_free(c);

    json_decref(cfg);
    assert_int_equal(srv_stop(&s), 0);
    srv_cleanup(&s);
    http_thread_done();
    unlink(crt);
    unlink(key);
    unlink(keys);
    assert_int_equal(rmdir(dir), 0);
}

/* ---- Worker loop ---- */

struct wctx {
    atomic_int count[64];      /* handler calls per payload n */
    atomic_int on_node[2];     /* handler calls per node */
    atomic_int calls, in_handler, release, saw_lost;
    atomic_int bad;            /* what the handler found wrong (no cmocka
                                * assertion off the test's thread) */
    mic_worker *_Atomic w;     /* for the handler that stops its loop */
    int64_t seq;               /* the delivery the handler holds */
};

static int64_t payload_n(const struct mic_leased *d)
{
    return json_integer_value(json_object_get(json_object_get(d->event, "payload"), "n"));
}

static int flag_set(void *arg)
{
    return atomic_load((atomic_int *)arg) != 0;
}

static int worker_known(void *arg)
{
    return atomic_load(&((struct wctx *)arg)->w) != NULL;
}

/* Counts the call; the topic says what to do. */
static enum mic_verdict handler(mic_job *job, const struct mic_leased *d, mic_client *c, void *arg)
{
    struct wctx *x = arg;
    int64_t n = payload_n(d);

    if (!c || mic_job_thread(job) < 0 || mic_job_thread(job) >= 3 || mic_job_lease_lost(job))
        atomic_fetch_add(&x->bad, 1);
    atomic_fetch_add(&x->calls, 1);
    if (d->node >= 0 && d->node < 2)
        atomic_fetch_add(&x->on_node[d->node], 1);
    if (n >= 0 && n < 64)
        atomic_fetch_add(&x->count[n], 1);
    if (!strcmp(d->topic, "lm.w.fail")) {
        if (n == 0) {
            mic_job_fail(job, 0, "boom");
            return MIC_RETRY;
        }
        mic_job_fail(job, -1, "dead %d", (int)n);
        return MIC_DEAD;
    }
    if (!strcmp(d->topic, "lm.w.ext")) {
        x->seq = d->seq;
        atomic_store(&x->in_handler, 1);
        if (!await(flag_set, &x->release, WAIT_MS) || mic_job_lease_lost(job))
            atomic_fetch_add(&x->bad, 1);
    }
    if (!strcmp(d->topic, "lm.w.fence")) {
        x->seq = d->seq;
        atomic_store(&x->in_handler, 1);
        /* until the extender finds the lease taken over */
        atomic_store(&x->saw_lost, await((int (*)(void *))mic_job_lease_lost, job, WAIT_MS));
    }
    if (!strcmp(d->topic, "lm.w.stop")) {
        /* the rest of the claim is given back */
        if (await(worker_known, x, WAIT_MS))
            mic_worker_stop(atomic_load(&x->w));
        else
            atomic_fetch_add(&x->bad, 1);
    }
    return MIC_DONE;
}

static mic_worker *worker_on(mic_client *c, const char *group, int threads, double ttl,
                             struct wctx *x)
{
    struct mic_worker_opts o = {.group = group, .threads = threads, .lease_ttl_s = ttl,
                                .wait_s = 1, .worker = "lmw", .handler = handler, .arg = x};
    mic_worker *w;

    assert_int_equal(mic_worker_start(c, &o, &w), 0);
    return w;
}

struct gstat {
    mic_client *c;
    int node;
    const char *group, *key;
    json_int_t want;
};

static int gstat_is(void *arg)
{
    struct gstat *g = arg;

    return stat_of(g->c, g->node, 1, g->group, g->key) == g->want;
}

/* Wait until the group's stat 'key' on 'node' (-1: merged) is 'want'. */
static void await_gstat_on(mic_client *c, int node, const char *group, const char *key,
                           json_int_t want)
{
    struct gstat g = {c, node, group, key, want};

    assert_true(await(gstat_is, &g, WAIT_MS));
}

static void await_gstat(mic_client *c, const char *group, const char *key, json_int_t want)
{
    await_gstat_on(c, 0, group, key, want);
}

/* A handler context made fresh, topic and group 'topic'/'group', and n
 * events published (payload n = 0..n-1); returns a handle on S. */
static mic_client *worker_fixture(struct wctx *x, const char *topic, const char *group, int n)
{
    mic_client *c = client1(&S);

    memset(x, 0, sizeof *x);
    make_group(c, topic, group, NULL);
    for (int i = 0; i < n; i++)
        publish_ok(c, event(topic, NULL, 0, i), NULL);
    return c;
}

static void worker_exactly_once(void **state)
{
    mic_client *c;
    static struct wctx x;
    struct mic_worker_stats st;
    mic_worker *w;

    (void)state;
    c = worker_fixture(&x, "lm.w.once", "lm.w.once.g", 40);
    w = worker_on(c, "lm.w.once.g", 3, 30, &x);
    await_gstat(c, "lm.w.once.g", "dispatched", 40);
    mic_worker_stop(w);
    mic_worker_join(w, &st);
    assert_int_equal(atomic_load(&x.bad), 0);
    assert_int_equal(st.acked, 40);
    assert_int_equal(st.claimed, 40);
    assert_int_equal(st.retried + st.dead_lettered + st.lease_lost + st.refused, 0);
    assert_int_equal(atomic_load(&x.calls), 40);
    for (int i = 0; i < 40; i++)
        assert_int_equal(atomic_load(&x.count[i]), 1);
    assert_int_equal(stat_of(c, 0, 1, "lm.w.once.g", "pending"), 0);
    assert_int_equal(stat_of(c, 0, 1, "lm.w.once.g", "processing"), 0);
    mic_client_free(c);
}

/* The successes of a claim are acked together: 20 events waiting, one
 * thread claiming up to 20, a handler that returns at once -- far fewer ack
 * requests than deliveries (one per delivery was the loop's first cut). */
static void worker_acks_a_claim_together(void **state)
{
    mic_client *c;
    static struct wctx x;
    struct mic_worker_stats st;
    struct mic_worker_opts o = {.group = "lm.w.acks.g", .threads = 1, .max = 20, .wait_s = 1,
                                .worker = "lmw", .handler = handler, .arg = &x};
    const char *route = "route=\"/v1/groups/{group}/ack\"";
    long before, after;
    mic_worker *w;

    (void)state;
    c = worker_fixture(&x, "lm.w.acks", "lm.w.acks.g", 20);
    before = metric(c, "mic_http_requests_total{", route);
    assert_true(before >= 0);
    assert_int_equal(mic_worker_start(c, &o, &w), 0);
    await_gstat(c, "lm.w.acks.g", "dispatched", 20);
    mic_worker_stop(w);
    mic_worker_join(w, &st);
    after = metric(c, "mic_http_requests_total{", route);
    assert_int_equal(st.acked, 20);
    assert_int_equal(atomic_load(&x.calls), 20);
    assert_true(after - before >= 1);
    assert_true(after - before < 20);
    mic_client_free(c);
}

static void worker_retry_and_dead(void **state)
{
    mic_client *c = client1(&S);
    static struct wctx x;
    struct mic_worker_stats st;
    mic_worker *w;
    char id0[129], id1[129];

    (void)state;
    memset(&x, 0, sizeof x);
    make_group(c, "lm.w.fail", "lm.w.fail.g", "{\"max_attempts\":2}");
    publish_ok(c, event("lm.w.fail", NULL, 0, 0), id0);
    publish_ok(c, event("lm.w.fail", NULL, 0, 1), id1);
    w = worker_on(c, "lm.w.fail.g", 1, 30, &x);
    await_gstat(c, "lm.w.fail.g", "dlq", 2);
    mic_worker_stop(w);
    mic_worker_join(w, &st);
    assert_int_equal(atomic_load(&x.bad), 0);
    /* n 0: retried at once with its text, then to the DLQ (2 attempts);
     * n 1: dead-lettered at its first. */
    assert_int_equal(atomic_load(&x.count[0]), 2);
    assert_int_equal(atomic_load(&x.count[1]), 1);
    assert_int_equal(st.retried, 1);
    assert_int_equal(st.dead_lettered, 2);
    assert_int_equal(st.acked, 0);
    expect_field(c, id0, "lm.w.fail.g", "last_error", "boom");
    expect_field(c, id0, "lm.w.fail.g", "attempts", "2");
    expect_field(c, id1, "lm.w.fail.g", "last_error", "dead 1");
    expect_field(c, id1, "lm.w.fail.g", "state", "dlq");
    mic_client_free(c);
}

struct later_than {
    mic_client *c;
    const char *id, *group;
    char t[64];
};

/* The event's lease_expires_at moved past w->t (then w->t is the new one). */
static int lease_moved(void *arg)
{
    struct later_than *w = arg;
    char *s = event_field(w->c, w->id, w->group, "lease_expires_at");
    int moved = s && strcmp(s, w->t) > 0;

    if (moved)
        snprintf(w->t, sizeof w->t, "%s", s);
    free(s);
    return moved;
}

static void worker_extends_lease(void **state)
{
    mic_client *c;
    static struct wctx x;
    struct mic_worker_stats st;
    struct mic_claimed cl;
    mic_worker *w;
    char id[129], *s;
    struct later_than lt = {.id = id, .group = "lm.w.ext.g"};

    (void)state;
    c = lt.c = worker_fixture(&x, "lm.w.ext", "lm.w.ext.g", 0);
    publish_ok(c, event("lm.w.ext", NULL, 0, 0), id);
    w = worker_on(c, "lm.w.ext.g", 1, 2, &x);
    assert_true(await(flag_set, &x.in_handler, WAIT_MS));
    s = event_field(c, id, "lm.w.ext.g", "lease_expires_at");
    assert_non_null(s);
    snprintf(lt.t, sizeof lt.t, "%s", s);
    free(s);
    /* Two extends, each moving the lease forward, past the first TTL. */
    assert_true(await(lease_moved, &lt, WAIT_MS));
    assert_true(await(lease_moved, &lt, WAIT_MS));
    assert_int_equal(mic_claim(c, 0, "lm.w.ext.g", NULL, &cl), 0);
    assert_int_equal(cl.n, 0); /* still held: nobody else gets it */
    mic_claimed_fini(&cl);
    atomic_store(&x.release, 1);
    await_gstat(c, "lm.w.ext.g", "dispatched", 1);
    mic_worker_stop(w);
    mic_worker_join(w, &st);
    assert_int_equal(atomic_load(&x.bad), 0);
    assert_true(st.extends >= 2);
    assert_int_equal(st.acked, 1);
    assert_int_equal(st.lease_lost, 0);
    assert_int_equal(atomic_load(&x.calls), 1);
    expect_field(c, id, "lm.w.ext.g", "attempts", "1");
    mic_client_free(c);
}

/* The lease is taken over while the handler runs: the group is deleted and
 * made again (its deliveries come anew; old tokens are not_found), the
 * test claims the same seq, the extender fences the job, and the loop
 * settles nothing for it. */
static void worker_fencing(void **state)
{
    mic_client *c;
    static struct wctx x;
    struct mic_worker_stats st;
    struct mic_claimed cl;
    struct mic_leased *d;
    mic_worker *w;

    (void)state;
    c = worker_fixture(&x, "lm.w.fence", "lm.w.fence.g", 1);
    w = worker_on(c, "lm.w.fence.g", 1, 3, &x);
    assert_true(await(flag_set, &x.in_handler, WAIT_MS));
    assert_int_equal(mic_admin_group_delete(c, "lm.w.fence.g"), 0);
    make_group(c, "lm.w.fence", "lm.w.fence.g", NULL);
    d = claim_one(c, 0, "lm.w.fence.g", 60, 10, &cl);
    assert_int_equal(d->seq, x.seq);
    mic_worker_stop(w);
    mic_worker_join(w, &st);
    assert_int_equal(atomic_load(&x.bad), 0);
    assert_int_equal(atomic_load(&x.saw_lost), 1);
    assert_true(st.lease_lost >= 1);
    assert_int_equal(st.acked, 0);
    assert_int_equal(atomic_load(&x.calls), 1);
    assert_int_equal(settle1(c, "lm.w.fence.g", d, ACK, NULL, NULL), MIC_ITEM_ACKED);
    mic_claimed_fini(&cl);
    mic_client_free(c);
}

/* One handler thread over two nodes visits both (long-polling only after
 * a round found nothing) and handles every event once. */
static void worker_two_nodes(void **state)
{
    struct srv s2;
    const struct srv *v[2] = {&S, &s2};
    static struct wctx x;
    struct mic_worker_stats st;
    struct mic_publish_result r[20];
    json_t *ev[20];
    int on[2] = {0, 0};
    mic_client *c;
    mic_worker *w;

    (void)state;
    memset(&x, 0, sizeof x);
    memset(&s2, 0, sizeof s2);
    assert_int_equal(srv_start(&s2, NULL), 0);
    c = client_of(v, 2, 0);
    make_group(c, "lm.w.two", "lm.w.two.g", NULL);
    events_over_aggregates(ev, 20, "lm.w.two", "w");
    assert_int_equal(mic_publish_batch(c, ev, 20, r), 0);
    for (int i = 0; i < 20; i++) {
        on[r[i].node]++;
        json_decref(ev[i]);
    }
    w = worker_on(c, "lm.w.two.g", 1, 30, &x);
    await_gstat_on(c, -1, "lm.w.two.g", "dispatched", 20);
    mic_worker_stop(w);
    mic_worker_join(w, &st);
    assert_int_equal(atomic_load(&x.bad), 0);
    assert_int_equal(st.acked, 20);
    assert_int_equal(atomic_load(&x.on_node[0]), on[0]);
    assert_int_equal(atomic_load(&x.on_node[1]), on[1]);
    for (int i = 0; i < 20; i++)
        assert_int_equal(atomic_load(&x.count[i]), 1);
    mic_client_free(c);
    assert_int_equal(srv_stop(&s2), 0);
    srv_cleanup(&s2);
}

/* A stop while a claim of 5 is in hand: the handler in flight is acked,
 * the 4 others are given back at once (nack, retry_after_s 0). */
static void worker_stop_gives_back(void **state)
{
    mic_client *c;
    static struct wctx x;
    struct mic_worker_opts o = {.group = "lm.w.stop.g", .threads = 1, .max = 5, .wait_s = 1,
                                .handler = handler, .arg = &x};
    struct mic_worker_stats st;
    struct mic_claim_opts co = {.max = 10};
    struct mic_claimed cl;
    mic_worker *w;

    (void)state;
    c = worker_fixture(&x, "lm.w.stop", "lm.w.stop.g", 5);
    assert_int_equal(mic_worker_start(c, &o, &w), 0);
    atomic_store(&x.w, w);
    mic_worker_join(w, &st);
    assert_int_equal(atomic_load(&x.bad), 0);
    assert_int_equal(st.claimed, 5);
    assert_int_equal(st.acked, 1);
    assert_int_equal(atomic_load(&x.calls), 1);
    assert_int_equal(stat_of(c, 0, 1, "lm.w.stop.g", "processing"), 0);
    assert_int_equal(mic_claim(c, 0, "lm.w.stop.g", &co, &cl), 0);
    assert_int_equal(cl.n, 4);
    for (size_t i = 0; i < cl.n; i++) {
        assert_int_equal(cl.v[i].attempt, 2);
        expect_field(c, cl.v[i].event_id, "lm.w.stop.g", "last_error", "worker stopping");
    }
    mic_claimed_fini(&cl);
    mic_client_free(c);
}

/* mic_worker_run stops by itself after max_deliveries, or when idle. */
static void worker_run_limits(void **state)
{
    mic_client *c;
    static struct wctx x;
    struct mic_worker_opts o = {.group = "lm.w.lim.g", .threads = 1, .wait_s = 0.2,
                                .handler = handler, .arg = &x, .max_deliveries = 2};
    struct mic_worker_stats st;

    (void)state;
    c = worker_fixture(&x, "lm.w.lim", "lm.w.lim.g", 3);
    assert_int_equal(mic_worker_run(c, &o, &st), 0);
    assert_int_equal(st.acked, 2);
    assert_int_equal(st.refused, 0);
    o.max_deliveries = 0;
    o.idle_exit_s = 0.3;
    assert_int_equal(mic_worker_run(c, &o, &st), 0);
    assert_int_equal(st.acked, 1);
    assert_int_equal(atomic_load(&x.calls), 3);
    assert_int_equal(atomic_load(&x.bad), 0);
    assert_int_equal(stat_of(c, 0, 1, "lm.w.lim.g", "dispatched"), 3);
    mic_client_free(c);
}

/* stop_on_signals: SIGTERM stops the loop, and join puts the previous
 * SIGTERM and SIGINT dispositions back.  (idle_exit_s is only the outer
 * limit if the signal did nothing: the loop must end well before it.) */
static void worker_signal_stop(void **state)
{
    mic_client *c;
    static struct wctx x;
    struct mic_worker_opts o = {.group = "lm.w.sig.g", .threads = 2, .wait_s = 10,
                                .handler = handler, .arg = &x, .stop_on_signals = 1,
                                .idle_exit_s = 50};
    struct sigaction before_term, before_int, now;
    struct parked p = {.s = &S};
    struct mic_worker_stats st;
    mic_worker *w;
    int64_t t0;

    (void)state;
    c = worker_fixture(&x, "lm.w.sig", "lm.w.sig.g", 0);
    assert_int_equal(sigaction(SIGTERM, NULL, &before_term), 0);
    assert_int_equal(sigaction(SIGINT, NULL, &before_int), 0);
    p.more_than = metric(c, "mic_writer_parked ", NULL);
    assert_int_equal(mic_worker_start(c, &o, &w), 0);
    assert_true(await(parked_above, &p, WAIT_MS)); /* a long-poll in flight */
    assert_int_equal(sigaction(SIGTERM, NULL, &now), 0);
    assert_true(now.sa_handler != before_term.sa_handler);
    t0 = mono_ms();
    assert_int_equal(kill(getpid(), SIGTERM), 0);
    mic_worker_join(w, &st);
    assert_true(mono_ms() - t0 < 40000);
    assert_int_equal(st.refused, 0);
    assert_int_equal(st.claimed, 0);
    assert_int_equal(sigaction(SIGTERM, NULL, &now), 0);
    assert_true(now.sa_handler == before_term.sa_handler);
    assert_int_equal(sigaction(SIGINT, NULL, &now), 0);
    assert_true(now.sa_handler == before_int.sa_handler);
    mic_client_free(c);
}

static void worker_refused(void **state)
{
    mic_client *c = client1(&S);
    static struct wctx x;
    struct mic_worker_opts o = {.group = "lm.w.nosuch", .threads = 2, .wait_s = 1,
                                .handler = handler, .arg = &x};
    struct mic_worker_opts bad = o;
    struct mic_worker_stats st;
    mic_worker *w;

    (void)state;
    memset(&st, 0, sizeof st);
    assert_int_equal(mic_worker_run(c, &o, &st), -1);
    assert_int_equal(st.refused, 1);
    assert_int_equal(st.failure.kind, MIC_FAIL_SERVER);
    assert_int_equal(st.failure.status, 404);
    assert_int_equal(st.claimed, 0);
    bad.handler = NULL;
    assert_int_equal(mic_worker_start(c, &bad, &w), -1);
    assert_null(w);
    mic_client_free(c);
}

/* ---- Consumer toolkit ---- */

struct cctx {
    int calls, fail, upcasts, from, to, saw_up;
    /* consumer_fenced: the job in the handler, the wait for its fencing */
    mic_job *_Atomic job;
    atomic_int in_apply, fenced_seen;
    mic_consumer *k;
};

static int apply(MDB_txn *txn, const struct mic_leased *d, json_t *ev, void *arg, char *err,
                 size_t cap)
{
    struct cctx *x = arg;
    MDB_dbi dbi;
    MDB_val k = {strlen(d->event_id), (void *)d->event_id}, v = {1, (void *)"1"};

    x->calls++;
    x->saw_up = json_is_true(json_object_get(ev, "up"));
    if (atomic_load(&x->job)) { /* hold the commit until the lease is lost */
        atomic_store(&x->in_apply, 1);
        atomic_store(&x->fenced_seen,
                     await((int (*)(void *))mic_job_lease_lost, atomic_load(&x->job), WAIT_MS));
    }
    assert_int_equal(mdb_dbi_open(txn, "proj", MDB_CREATE, &dbi), 0);
    assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
    if (x->fail) {
        snprintf(err, cap, "apply refused");
        return 1;
    }
    return 0;
}

static json_t *upcast(json_t *ev, int from, int to, void *arg)
{
    struct cctx *x = arg;
    json_t *up = json_deep_copy(ev);

    x->upcasts++;
    x->from = from;
    x->to = to;
    json_object_set_new(up, "up", json_true());
    return up;
}

/* 1 if the projection holds event 'id'. */
static int proj_has(mic_consumer *k, const char *id)
{
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_val key = {strlen(id), (void *)id}, v;
    int rc;

    assert_int_equal(mdb_txn_begin(mic_consumer_env(k), NULL, MDB_RDONLY, &txn), 0);
    rc = mdb_dbi_open(txn, "proj", 0, &dbi) == 0 && mdb_get(txn, dbi, &key, &v) == 0;
    mdb_txn_abort(txn);
    return rc;
}

/* A delivery filled by hand from 'ev' (kept by the caller), as mic_claim
 * fills one. */
static void leased_make(struct mic_leased *d, json_t *ev)
{
    json_t *sv = json_object_get(ev, "schema_version");

    memset(d, 0, sizeof *d);
    d->seq = 1;
    d->attempt = 1;
    d->event = ev;
    d->event_id = json_string_value(json_object_get(ev, "event_id"));
    d->topic = json_string_value(json_object_get(ev, "topic"));
    d->event_type = "";
    d->aggregate_type = json_string_value(json_object_get(ev, "aggregate_type")) ?: "";
    d->aggregate_id = json_string_value(json_object_get(ev, "aggregate_id")) ?: "";
    d->aggregate_version = (uint64_t)json_integer_value(json_object_get(ev, "aggregate_version"));
    d->schema_version = sv ? (int)json_integer_value(sv) : 1;
}

/* Process event 'id' (aggregate agg/o1 version 'ver', 0: none) of
 * schema 'schema'; returns the outcome. */
static enum mic_outcome process(mic_consumer *k, const char *id, json_int_t ver, int schema,
                                char *why, size_t cap)
{
    json_t *ev = event("lm.cons", ver ? "o1" : NULL, ver, ver);
    struct mic_leased d;
    enum mic_outcome out;

    json_object_set_new(ev, "event_id", json_string(id));
    json_object_set_new(ev, "schema_version", json_integer(schema));
    leased_make(&d, ev);
    assert_int_equal(mic_consumer_process(k, &d, NULL, &out, why, cap), 0);
    json_decref(ev);
    return out;
}

static uint64_t ckpt(mic_consumer *k)
{
    uint64_t v = 99;

    assert_int_equal(mic_consumer_checkpoint(k, "agg", "o1", &v), 0);
    return v;
}

static mic_consumer *consumer_open(char *base, char *path, size_t cap, enum mic_consumer_kind kind,
                                   int schema, struct cctx *x)
{
    struct mic_consumer_opts o = {.path = path, .max_dbs = 1, .kind = kind, .apply = apply,
                                  .upcast = upcast, .schema_version = schema, .arg = x,
                                  .map_size = 16 << 20, .gap_retry_s = 600};
    mic_consumer *k;
    char err[256];

    assert_non_null(mkdtemp(base));
    snprintf(path, cap, "%s/state", base);
    assert_int_equal(mic_consumer_open(&o, &k, err, sizeof err), 0);
    return k;
}

static void consumer_close(mic_consumer *k, const char *base, const char *path)
{
    mic_consumer_close(k);
    rm_lmdb_dir(path);
    assert_int_equal(rmdir(base), 0);
}

/* The rules on deliveries filled by hand (leased_make): no micd needed. */
static void consumer_rules(void **state)
{
    char base[] = "/tmp/mic-libmic-cons-XXXXXX", path[64], why[512];
    struct cctx x = {0};
    struct mic_consumer_stats st;
    mic_consumer *k = consumer_open(base, path, sizeof path, MIC_PROJECTION, 2, &x);

    (void)state;
    {   /* refusals: no apply; a directory that cannot be made */
        struct mic_consumer_opts bad = {.path = path};
        mic_consumer *none;
        char err[256];

        assert_int_equal(mic_consumer_open(&bad, &none, err, sizeof err), -1);
        assert_null(none);
        bad.apply = apply;
        bad.path = "/nonexistent-mic-dir/state";
        assert_int_equal(mic_consumer_open(&bad, &none, err, sizeof err), -1);
        assert_non_null(strstr(err, "/nonexistent-mic-dir/state"));
    }
    assert_int_equal(ckpt(k), 0);
    assert_int_equal(process(k, "e1", 1, 2, why, sizeof why), MIC_APPLIED);
    assert_int_equal(ckpt(k), 1);
    assert_int_equal(x.calls, 1);
    assert_true(proj_has(k, "e1"));
    /* the same event again: no second apply */
    assert_int_equal(process(k, "e1", 1, 2, why, sizeof why), MIC_ALREADY);
    assert_int_equal(x.calls, 1);
    /* a gap: parked, nothing moves (and no upcast of a parked one) */
    assert_int_equal(process(k, "e3", 3, 1, why, sizeof why), MIC_GAP);
    assert_non_null(strstr(why, "gap"));
    assert_int_equal(ckpt(k), 1);
    assert_int_equal(x.upcasts, 0);
    /* an old version under an unknown id */
    assert_int_equal(process(k, "e1b", 1, 2, why, sizeof why), MIC_STALE);
    assert_non_null(strstr(why, "e1b"));
    assert_false(proj_has(k, "e1b"));
    /* a failed apply commits nothing, not even its own write */
    x.fail = 1;
    assert_int_equal(process(k, "e2", 2, 2, why, sizeof why), MIC_FAILED);
    assert_string_equal(why, "apply refused");
    assert_int_equal(ckpt(k), 1);
    assert_false(proj_has(k, "e2"));
    x.fail = 0;
    assert_int_equal(process(k, "e2", 2, 2, why, sizeof why), MIC_APPLIED); /* no marker */
    assert_int_equal(ckpt(k), 2);
    /* an older schema goes through the upcaster */
    assert_int_equal(process(k, "e3", 3, 1, why, sizeof why), MIC_APPLIED);
    assert_int_equal(x.upcasts, 1);
    assert_int_equal(x.from, 1);
    assert_int_equal(x.to, 2);
    assert_true(x.saw_up);
    assert_int_equal(ckpt(k), 3);
    assert_int_equal(process(k, "e5", 5, 2, why, sizeof why), MIC_GAP);
    /* skip moves over a missing version, only the next one */
    assert_int_equal(mic_consumer_skip(k, "agg", "o1", 5), -1);
    assert_int_equal(ckpt(k), 3);
    assert_int_equal(mic_consumer_skip(k, "agg", "o1", 4), 0);
    assert_int_equal(ckpt(k), 4);
    assert_int_equal(process(k, "e5", 5, 2, why, sizeof why), MIC_APPLIED);
    assert_int_equal(ckpt(k), 5);
    /* no version: once, by its marker */
    assert_int_equal(process(k, "u1", 0, 2, why, sizeof why), MIC_APPLIED);
    assert_int_equal(process(k, "u1", 0, 2, why, sizeof why), MIC_ALREADY);
    mic_consumer_stats(k, &st);
    assert_int_equal(st.applied, 5);
    assert_int_equal(st.already, 2);
    assert_int_equal(st.gaps, 2);
    assert_int_equal(st.stale, 1);
    assert_int_equal(st.failed, 1);
    assert_int_equal(st.refused + st.fenced, 0);
    consumer_close(k, base, path);
}

/* Write 'f' as the consumer store's format key in 'path' (closed), as a
 * libmic of another format would. */
static void format_put(const char *path, uint32_t f)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi main;
    MDB_val key = {10, (void *)"mic.format"}, val = {sizeof f, &f};

    assert_int_equal(mdb_env_create(&env), 0);
    assert_int_equal(mdb_env_set_maxdbs(env, 4), 0);
    assert_int_equal(mdb_env_open(env, path, 0, 0600), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, NULL, 0, &main), 0);
    assert_int_equal(mdb_put(txn, main, &key, &val, 0), 0);
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
}

/* The store's format key (proto/consumer-store.md): written at the first
 * open, kept by a reopen, and a store of another format is refused with a
 * reason naming the directory, its state untouched. */
static void consumer_store_format(void **state)
{
    char base[] = "/tmp/mic-libmic-cons-XXXXXX", path[64], why[512], err[512];
    struct cctx x = {0};
    struct mic_consumer_opts o = {.max_dbs = 1, .apply = apply, .map_size = 16 << 20};
    mic_consumer *k = consumer_open(base, path, sizeof path, MIC_PROJECTION, 2, &x), *again;
    MDB_txn *txn;
    MDB_dbi main;
    MDB_val key = {10, (void *)"mic.format"}, val;
    uint32_t f;

    (void)state;
    assert_int_equal(process(k, "f1", 1, 2, why, sizeof why), MIC_APPLIED);
    assert_int_equal(mdb_txn_begin(mic_consumer_env(k), NULL, MDB_RDONLY, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, NULL, 0, &main), 0);
    assert_int_equal(mdb_get(txn, main, &key, &val), 0);
    assert_int_equal(val.mv_size, sizeof f);
    memcpy(&f, val.mv_data, sizeof f);
    assert_int_equal(f, 1);
    mdb_txn_abort(txn);
    mic_consumer_close(k);

    /* Reopened: the same store, its checkpoint kept. */
    o.path = path;
    assert_int_equal(mic_consumer_open(&o, &again, err, sizeof err), 0);
    assert_int_equal(ckpt(again), 1);
    mic_consumer_close(again);

    /* Another format (as a future libmic would write it): refused. */
    format_put(path, 2);
    assert_int_equal(mic_consumer_open(&o, &again, err, sizeof err), -1);
    assert_null(again);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "format"));

    /* Put back, it opens again with its state. */
    format_put(path, 1);
    assert_int_equal(mic_consumer_open(&o, &again, err, sizeof err), 0);
    assert_int_equal(ckpt(again), 1);
    consumer_close(again, base, path);
}

/* A real replay delivery (effects forbid) from micd: an effects executor
 * refuses it, a projection applies it. */
static void consumer_replay_delivery(void **state)
{
    char b1[] = "/tmp/mic-libmic-cons-XXXXXX", b2[] = "/tmp/mic-libmic-cons-XXXXXX";
    char p1[64], p2[64], why[512];
    struct cctx x1 = {0}, x2 = {0};
    mic_client *c = client1(&S);
    mic_consumer *eff, *proj;
    struct mic_claimed cl;
    struct mic_leased *d;
    enum mic_outcome out;
    json_t *body, *ans;

    (void)state;
    publish_ok(c, event("lm.crep", "r1", 1, 1), NULL);
    body = json_pack("{ssss}", "topic", "lm.crep", "run_id", "lm-crep");
    assert_int_equal(mic_admin_replay_create(c, 0, body, &ans), 0);
    json_decref(ans);
    json_decref(body);
    d = claim_one(c, 0, "replay.lm-crep", 30, 20, &cl); /* once the run's group is filled */
    assert_non_null(d->replay);
    assert_int_equal(d->effects_forbidden, 1);
    assert_int_equal(d->aggregate_version, 1);

    eff = consumer_open(b1, p1, sizeof p1, MIC_EFFECTS, 1, &x1);
    assert_int_equal(mic_consumer_process(eff, d, NULL, &out, why, sizeof why), 0);
    assert_int_equal(out, MIC_REFUSED);
    assert_non_null(strstr(why, "lm-crep"));
    assert_int_equal(x1.calls, 0);
    proj = consumer_open(b2, p2, sizeof p2, MIC_PROJECTION, 1, &x2);
    assert_int_equal(mic_consumer_process(proj, d, NULL, &out, why, sizeof why), 0);
    assert_int_equal(out, MIC_APPLIED);
    assert_int_equal(x2.calls, 1);
    assert_int_equal(mic_consumer_checkpoint(proj, "agg", "r1", &(uint64_t){0}), 0);
    assert_int_equal(settle1(c, "replay.lm-crep", d, ACK, NULL, NULL), MIC_ITEM_ACKED);
    mic_claimed_fini(&cl);
    consumer_close(eff, b1, p1);
    consumer_close(proj, b2, p2);
    assert_int_equal(mic_admin_replay_delete(c, 0, "lm-crep"), 0);
    mic_client_free(c);
}

struct await_field {
    mic_client *c;
    const char *id, *group, *key, *has;
};

/* The event's delivery field w->key holds w->has. */
static int field_has(void *arg)
{
    struct await_field *w = arg;
    char *v = event_field(w->c, w->id, w->group, w->key);
    int yes = v && strstr(v, w->has);

    free(v);
    return yes;
}

/* mic_consumer_handler in the worker loop: APPLIED acks; a GAP is nacked
 * with its reason and the gap retry hint; a STALE one is dead-lettered
 * (c3's checkpoint was moved over version 1 with mic_consumer_skip, so
 * micd's c3 v1 comes in at the checkpoint under an unknown id). */
static void consumer_in_worker(void **state)
{
    char base[] = "/tmp/mic-libmic-cons-XXXXXX", path[64], gap[129], stale[129];
    struct cctx x = {0};
    mic_client *c = client1(&S);
    mic_consumer *k = consumer_open(base, path, sizeof path, MIC_PROJECTION, 1, &x);
    struct mic_worker_opts o = {.group = "lm.cw.g", .threads = 1, .wait_s = 1,
                                .handler = mic_consumer_handler, .arg = k};
    struct mic_worker_stats st;
    struct await_field gw = {c, gap, "lm.cw.g", "last_error", "gap"};
    mic_worker *w;
    uint64_t v;
    char *s1;

    (void)state;
    assert_int_equal(mic_consumer_skip(k, "agg", "c3", 1), 0);
    make_group(c, "lm.cw", "lm.cw.g", NULL);
    publish_ok(c, event("lm.cw", "c1", 1, 1), NULL);
    publish_ok(c, event("lm.cw", "c2", 2, 2), gap); /* micd's baseline, the consumer's gap */
    publish_ok(c, event("lm.cw", "c3", 1, 3), stale);
    assert_int_equal(mic_worker_start(c, &o, &w), 0);
    await_gstat(c, "lm.cw.g", "dispatched", 1);
    await_gstat(c, "lm.cw.g", "dlq", 1);
    assert_true(await(field_has, &gw, WAIT_MS));
    mic_worker_stop(w);
    mic_worker_join(w, &st);
    assert_int_equal(st.acked, 1);
    assert_int_equal(st.dead_lettered, 1);
    assert_true(st.retried >= 1);
    s1 = event_field(c, stale, "lm.cw.g", "last_error");
    assert_non_null(strstr(s1, "stale"));
    free(s1);
    expect_field(c, gap, "lm.cw.g", "state", "pending"); /* parked for gap_retry_s */
    expect_field(c, gap, "lm.cw.g", "attempts", "1");
    assert_int_equal(mic_consumer_checkpoint(k, "agg", "c1", &v), 0);
    assert_int_equal(v, 1);
    assert_int_equal(mic_consumer_checkpoint(k, "agg", "c2", &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(x.calls, 1);
    consumer_close(k, base, path);
    mic_client_free(c);
}

/* Runs mic_consumer_handler with the job where apply() can see it. */
static enum mic_verdict fencing_handler(mic_job *job, const struct mic_leased *d, mic_client *c,
                                        void *arg)
{
    struct cctx *x = arg;
    enum mic_verdict v;

    atomic_store(&x->job, job);
    v = mic_consumer_handler(job, d, c, x->k);
    atomic_store(&x->job, NULL);
    return v;
}

/* The lease is lost while apply() runs (the group is deleted and made
 * again, as in worker_fencing): the commit is skipped (FENCED), nothing is
 * settled, and the delivery the test claims instead is applied. */
static void consumer_fenced(void **state)
{
    char base[] = "/tmp/mic-libmic-cons-XXXXXX", path[64], why[256];
    struct cctx x = {0};
    mic_client *c = client1(&S);
    struct mic_worker_opts o = {.group = "lm.cf.g", .threads = 1, .wait_s = 1,
                                .lease_ttl_s = 3, .handler = fencing_handler, .arg = &x};
    struct mic_worker_stats st;
    struct mic_consumer_stats cs;
    struct mic_claimed cl;
    struct mic_leased *d;
    enum mic_outcome out;
    mic_worker *w;
    uint64_t v;
    int64_t seq;

    (void)state;
    x.k = consumer_open(base, path, sizeof path, MIC_PROJECTION, 1, &x);
    make_group(c, "lm.cf", "lm.cf.g", NULL);
    seq = publish_ok(c, event("lm.cf", "f1", 1, 1), NULL);
    assert_int_equal(mic_worker_start(c, &o, &w), 0);
    assert_true(await(flag_set, &x.in_apply, WAIT_MS));
    assert_int_equal(mic_admin_group_delete(c, "lm.cf.g"), 0);
    make_group(c, "lm.cf", "lm.cf.g", NULL);
    d = claim_one(c, 0, "lm.cf.g", 60, 10, &cl);
    assert_int_equal(d->seq, seq);
    mic_worker_stop(w);
    mic_worker_join(w, &st);
    assert_int_equal(atomic_load(&x.fenced_seen), 1);
    assert_true(st.lease_lost >= 1);
    assert_int_equal(st.acked, 0);
    mic_consumer_stats(x.k, &cs);
    assert_int_equal(cs.fenced, 1);
    assert_int_equal(cs.applied, 0);
    assert_int_equal(mic_consumer_checkpoint(x.k, "agg", "f1", &v), 0);
    assert_int_equal(v, 0);
    assert_false(proj_has(x.k, d->event_id));
    /* The test's own delivery: not processed before, so applied now. */
    assert_int_equal(mic_consumer_process(x.k, d, NULL, &out, why, sizeof why), 0);
    assert_int_equal(out, MIC_APPLIED);
    assert_int_equal(settle1(c, "lm.cf.g", d, ACK, NULL, NULL), MIC_ITEM_ACKED);
    mic_claimed_fini(&cl);
    consumer_close(x.k, base, path);
    mic_client_free(c);
}

/* ---- Main ---- */

static int group_setup(void **state)
{
    (void)state;
    return srv_start_shared(&S, NULL);
}

static int group_teardown(void **state)
{
    (void)state;
    return srv_stop_shared(&S);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(handle_args_and_routing),
        cmocka_unit_test(publish_ids_duplicates_conflicts),
        cmocka_unit_test(publish_batch_partial),
        cmocka_unit_test(retries_under_429),
        cmocka_unit_test(retries_503_and_reset),
        cmocka_unit_test(stop_cuts_retries),
        cmocka_unit_test(timeouts),
        cmocka_unit_test(connect_refused),
        cmocka_unit_test(publish_while_server_comes_up),
        cmocka_unit_test(lost_answer_is_duplicate),
        cmocka_unit_test(claim_long_poll),
        cmocka_unit_test(ack_nack_extend),
        cmocka_unit_test(lease_lost_after_reclaim),
        cmocka_unit_test(admin_two_nodes),
        cmocka_unit_test(admin_json_calls),
        cmocka_unit_test(admin_blocked_dlq_gaps),
        cmocka_unit_test(admin_replays),
        cmocka_unit_test(stream_ndjson),
        cmocka_unit_test(stop_cuts_long_poll),
        cmocka_unit_test(tls_and_keys),
        cmocka_unit_test(worker_exactly_once),
        cmocka_unit_test(worker_acks_a_claim_together),
        cmocka_unit_test(worker_retry_and_dead),
        cmocka_unit_test(worker_extends_lease),
        cmocka_unit_test(worker_fencing),
        cmocka_unit_test(worker_two_nodes),
        cmocka_unit_test(worker_stop_gives_back),
        cmocka_unit_test(worker_run_limits),
        cmocka_unit_test(worker_signal_stop),
        cmocka_unit_test(worker_refused),
        cmocka_unit_test(consumer_rules),
        cmocka_unit_test(consumer_store_format),
        cmocka_unit_test(consumer_replay_delivery),
        cmocka_unit_test(consumer_in_worker),
        cmocka_unit_test(consumer_fenced),
    };

    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
