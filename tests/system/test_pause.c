/* test_pause.c - pauses and clock steps under a real micd (issue 16, T5).
 *
 * A paused micd (SIGSTOP past a lease's TTL, then SIGCONT) hands the
 * expired lease out again, and the old token is fenced off.  Under
 * libfaketime (Debian's faketime package) the wall clock of a running
 * micd is stepped back and forward by an hour, with the monotonic clock
 * left real (FAKETIME_DONT_FAKE_MONOTONIC): leases and retries keep their
 * length, created_at defaults and ages stay sane, events published after a
 * step show in a default range read, a client whose clock followed a
 * forward step can still publish with its created_at, and under repeated
 * steps no delivery is leased twice at once (nor an ordered aggregate) and
 * everything drains.
 *
 * The faked tests run the release build ($MICD_RELEASE, default build/micd:
 * LD_PRELOAD and AddressSanitizer do not mix), the pause test runs $MICD.
 * Every wait is bounded and polls its condition; the only time bounds
 * asserted are lower bounds ("not before its TTL", within micd's slew of
 * 5%) and upper bounds far from any load effect ("well under an hour").
 * A step is seen by micd at its next clock read (FAKETIME_NO_CACHE); the
 * tests check that it was through mic_clock_offset_seconds in /metrics. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/clock.h"
#include "core/err.h"
#include "harness.h"
#include "claimkit.h"

#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define SEC 1000000LL
#define GROUP_BODY "{\"topics\":[\"t\"],\"backoff\":{\"initial_ms\":0,\"max_ms\":0}}"

/* ---- Helpers ---- */

static int64_t time_of(json_t *o, const char *k)
{
    const char *s = jstr(o, k);
    int64_t us;

    assert_int_equal(mic_time_parse(s, strlen(s), &us), MIC_OK);
    return us;
}

/* The real wall clock (the test process is not under faketime). */
static int64_t wall_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * SEC + ts.tv_nsec / 1000;
}

static void setup_topic_group(const struct srv *s, const char *group, const char *body)
{
    json_decref(call(s, "PUT", "/v1/topics/t", "{}", 201));
    json_decref(call(s, "PUT", group, body, 201));
}

/* Publish one event (body as given); returns its created_at. */
static int64_t publish(const struct srv *s, const char *body)
{
    json_t *r = call(s, "POST", "/v1/events", body, 201);
    int64_t at = time_of(json_array_get(json_object_get(r, "results"), 0), "created_at");

    json_decref(r);
    return at;
}

static json_t *claim(const struct srv *s, const char *group, const char *body)
{
    char path[128];

    snprintf(path, sizeof path, "/v1/groups/%s/claim", group);
    return call(s, "POST", path, body, 200);
}

/* ack/extend/nack one (seq, token); returns the result's status (a static
 * copy) and, for 'extended'/'retrying', the time field into *at. */
static const char *settle1(const struct srv *s, const char *group, const char *verb,
                           json_int_t seq, const char *token, const char *extra, int64_t *at)
{
    static char st[32];
    json_t *r = settle(s, group, verb, json_pack("[o]", item(seq, token)), extra), *it;

    it = result(r, 0);
    assert_int_equal(jint(it, "seq"), seq);
    snprintf(st, sizeof st, "%s", jstr(it, "status"));
    if (at && !strcmp(st, "retrying"))
        *at = time_of(it, "not_before");
    if (at && !strcmp(st, "extended"))
        *at = time_of(it, "lease_expires_at");
    json_decref(r);
    return st;
}

/* One number of GET /metrics ("name value" line), asserted present. */
static double metric(const struct srv *s, const char *name)
{
    struct resp r;
    char key[128];
    const char *p;
    double v;

    assert_int_equal(http(s, "GET", "/metrics", NULL, NULL, 0, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    snprintf(key, sizeof key, "\n%s ", name);
    p = strstr(r.body, key);
    if (!p)
        fprintf(stderr, "no metric %s\n", name);
    assert_non_null(p);
    v = strtod(p + strlen(key), NULL);
    resp_free(&r);
    return v;
}

static json_t *group_stats(const struct srv *s, const char *group)
{
    json_t *g = stats_of(s, "groups", "group", group);

    assert_non_null(g);
    return g;
}

/* Stats of 'group': pending and processing 0, 'dispatched' as given. */
static void expect_drained(const struct srv *s, const char *group, json_int_t dispatched)
{
    json_t *g = group_stats(s, group);

    assert_int_equal(jint(g, "pending"), 0);
    assert_int_equal(jint(g, "processing"), 0);
    assert_int_equal(jint(g, "dispatched"), dispatched);
    json_decref(g);
}

/* Every age in GET .../oldest and the group's stats is >= 0. */
static void expect_sane_ages(const struct srv *s, const char *group, size_t want_listed)
{
    char path[128];
    json_t *r, *d, *g, *age;
    size_t i;

    snprintf(path, sizeof path, "/v1/groups/%s/oldest", group);
    r = call(s, "GET", path, NULL, 200);
    assert_int_equal(json_array_size(json_object_get(r, "deliveries")), want_listed);
    json_array_foreach(json_object_get(r, "deliveries"), i, d) {
        assert_true(json_is_number(json_object_get(d, "age_s")));
        if (json_number_value(json_object_get(d, "age_s")) < 0)
            fprintf(stderr, "seq %lld: age_s %f\n", (long long)jint(d, "seq"),
                    json_number_value(json_object_get(d, "age_s")));
        assert_true(json_number_value(json_object_get(d, "age_s")) >= 0);
    }
    age = json_object_get(r, "oldest_unhandled_age_s");
    assert_true(json_is_number(age) && json_number_value(age) >= 0);
    json_decref(r);
    g = group_stats(s, group);
    age = json_object_get(g, "oldest_unhandled_age_s");
    assert_true(json_is_number(age) && json_number_value(age) >= 0);
    json_decref(g);
}

/* 1 if the default range read of topic t lists event 'id'. */
static int range_lists(const struct srv *s, const char *id)
{
    json_t *r = call(s, "GET", "/v1/topics/t/events?limit=1000", NULL, 200), *e;
    size_t i;
    int found = 0;

    json_array_foreach(json_object_get(r, "events"), i, e)
        found |= !strcmp(jstr(e, "event_id"), id);
    json_decref(r);
    return found;
}

/* Claim on 'group' (long-polls of 1 s) until delivery 'seq' comes, for at
 * most 'ms'; other deliveries claimed meanwhile are acked.  Returns the
 * delivery (a new reference), or NULL when it did not come. */
static json_t *claim_until(const struct srv *s, const char *group, json_int_t seq,
                           const char *ttl, int ms)
{
    int64_t end = mono_ms() + ms;
    char body[128];

    snprintf(body, sizeof body, "{\"max\":10,\"lease_ttl_s\":%s,\"wait_s\":1}", ttl);
    while (mono_ms() < end) {
        json_t *c = claim(s, group, body), *d, *found = NULL;
        size_t i;

        json_array_foreach(dlvs(c), i, d) {
            if (jint(d, "seq") == seq)
                found = json_incref(d);
            else
                assert_string_equal(settle1(s, group, "ack", jint(d, "seq"),
                                            jstr(d, "lease_token"), NULL, NULL), "acked");
        }
        json_decref(c);
        if (found)
            return found;
    }
    return NULL;
}

static int64_t wait_until_ms;
static int mono_reached(void *arg)
{
    (void)arg;
    return mono_ms() >= wait_until_ms;
}

/* ---- libfaketime ---- */

struct faked {
    char rc[64];       /* FAKETIME_TIMESTAMP_FILE: the offset micd runs at */
};

static const char *faketime_lib(void)
{
    static const char *const cand[] = {
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/faketime/libfaketimeMT.so.1",
    };
    const char *env = getenv("MIC_FAKETIME_LIB");

    if (env && *env)
        return env;
    for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++)
        if (access(cand[i], R_OK) == 0)
            return cand[i];
    fprintf(stderr, "libfaketime not found: install Debian's faketime (make deps) "
                    "or set MIC_FAKETIME_LIB\n");
    return NULL;
}

/* Step micd's wall clock to real time + 'secs' (atomically: a rename). */
static void faked_offset(struct faked *f, long secs)
{
    char tmp[80];
    FILE *fp;

    snprintf(tmp, sizeof tmp, "%s.tmp", f->rc);
    assert_non_null(fp = fopen(tmp, "w"));
    fprintf(fp, "%+ld\n", secs);
    assert_int_equal(fclose(fp), 0);
    assert_int_equal(rename(tmp, f->rc), 0);
}

/* Start the release micd under libfaketime at offset 'secs' on s->dir
 * (a new store if empty). */
static void faked_run(struct srv *s, struct faked *f, long secs)
{
    const char *lib = faketime_lib(), *rel = getenv("MICD_RELEASE");
    char *micd = getenv("MICD") ? strdup(getenv("MICD")) : NULL;
    int rc;

    if (!rel || !*rel)
        rel = "build/micd";
    if (access(rel, X_OK))
        fprintf(stderr, "%s is missing: make build/micd (or set MICD_RELEASE)\n", rel);
    assert_int_equal(access(rel, X_OK), 0);
    assert_non_null(lib);
    faked_offset(f, secs);
    setenv("MICD", rel, 1);
    setenv("LD_PRELOAD", lib, 1);
    setenv("FAKETIME_TIMESTAMP_FILE", f->rc, 1);
    setenv("FAKETIME_NO_CACHE", "1", 1);
    setenv("FAKETIME_DONT_FAKE_MONOTONIC", "1", 1);
    rc = srv_start(s, NULL);
    unsetenv("LD_PRELOAD");
    unsetenv("FAKETIME_TIMESTAMP_FILE");
    unsetenv("FAKETIME_NO_CACHE");
    unsetenv("FAKETIME_DONT_FAKE_MONOTONIC");
    if (micd)
        setenv("MICD", micd, 1);
    else
        unsetenv("MICD");
    free(micd);
    assert_int_equal(rc, 0);
}

/* A new store, micd on it under libfaketime at offset 0. */
static void faked_start(struct srv *s, struct faked *f)
{
    int fd;

    snprintf(f->rc, sizeof f->rc, "/tmp/mic-faketime-XXXXXX");
    assert_true((fd = mkstemp(f->rc)) >= 0);
    close(fd);
    memset(s, 0, sizeof *s);
    faked_run(s, f, 0);
}

static void faked_stop(struct srv *s, struct faked *f)
{
    assert_int_equal(srv_stop(s), 0);
    srv_cleanup(s);
    unlink(f->rc);
}

/* Step the clock by 'secs' from where it is ('at': the offset now) and
 * check that micd saw it: its clock is then about -'secs' from the wall
 * clock plus what it was before (it does not follow a step). */
static void step(const struct srv *s, struct faked *f, long *at, long secs)
{
    double before = metric(s, "mic_clock_offset_seconds"), after;

    *at += secs;
    faked_offset(f, *at);
    after = metric(s, "mic_clock_offset_seconds");
    if (after - before > -secs + 60 || after - before < -secs - 60)
        fprintf(stderr, "step %+ld s: offset %.3f -> %.3f\n", secs, before, after);
    assert_true(after - before <= -secs + 60 && after - before >= -secs - 60);
}

/* ---- (i) SIGSTOP past a lease ---- */

static char proc_state(pid_t pid)
{
    char path[64], buf[512], *p;
    FILE *fp;
    size_t n;

    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    if (!(fp = fopen(path, "r")))
        return 0;
    n = fread(buf, 1, sizeof buf - 1, fp);
    fclose(fp);
    buf[n] = 0;
    p = strrchr(buf, ')');
    return p && p[1] == ' ' ? p[2] : 0;
}

static pid_t stopped_pid;
static int is_stopped(void *arg)
{
    (void)arg;
    return proc_state(stopped_pid) == 'T';
}

static void pause_past_lease(void **state)
{
    struct srv s;
    json_t *c, *d;
    char tok_a[80];
    json_int_t seq;
    int64_t la, t_claimed;

    (void)state;
    memset(&s, 0, sizeof s);
    assert_int_equal(srv_start(&s, NULL), 0);
    setup_topic_group(&s, "/v1/groups/g", GROUP_BODY);
    publish(&s, "{\"event_id\":\"p1\",\"topic\":\"t\"}");
    c = claim(&s, "g", "{\"max\":1,\"lease_ttl_s\":1}");
    t_claimed = mono_ms();
    assert_int_equal(json_array_size(dlvs(c)), 1);
    seq = jint(dlv(c, 0), "seq");
    snprintf(tok_a, sizeof tok_a, "%s", jstr(dlv(c, 0), "lease_token"));
    la = time_of(dlv(c, 0), "lease_expires_at");
    json_decref(c);

    /* Paused until the lease is 1.5 TTL gone (micd's clock runs at most
     * 5% slow while it slews, so 1.5 TTL covers it). */
    assert_int_equal(kill(s.pid, SIGSTOP), 0);
    stopped_pid = s.pid;
    assert_true(await(is_stopped, NULL, 10000));
    wait_until_ms = t_claimed + 1500;
    assert_true(await(mono_reached, NULL, 5000));
    assert_int_equal(proc_state(s.pid), 'T');
    assert_int_equal(kill(s.pid, SIGCONT), 0);

    /* The expired lease goes to a new claim (attempt 2)... */
    d = claim_until(&s, "g", seq, "30", 20000);
    assert_non_null(d);
    assert_int_equal(jint(d, "attempt"), 2);
    assert_string_not_equal(jstr(d, "lease_token"), tok_a);
    assert_true(time_of(d, "lease_expires_at") - 30 * SEC >= la);
    /* ...and the old token is fenced off, the new one acks. */
    assert_string_equal(settle1(&s, "g", "ack", seq, tok_a, NULL, NULL), "lease_lost");
    assert_string_equal(settle1(&s, "g", "extend", seq, tok_a, "{\"lease_ttl_s\":5}", NULL),
                        "lease_lost");
    assert_string_equal(settle1(&s, "g", "ack", seq, jstr(d, "lease_token"), NULL, NULL),
                        "acked");
    json_decref(d);
    expect_drained(&s, "g", 1);
    assert_int_equal(srv_stop(&s), 0);
    srv_cleanup(&s);
}

/* ---- (ii) the wall clock steps back an hour ---- */

static void step_back_keeps_leases_and_ages(void **state)
{
    struct srv s;
    struct faked f;
    json_t *c, *d;
    char tok_a[80];
    json_int_t seq;
    int64_t la, b0_at, b1_at, t0, elapsed;
    long at = 0;

    (void)state;
    faked_start(&s, &f);
    setup_topic_group(&s, "/v1/groups/g", GROUP_BODY);
    b0_at = publish(&s, "{\"event_id\":\"b0\",\"topic\":\"t\"}");
    t0 = mono_ms();
    c = claim(&s, "g", "{\"max\":1,\"lease_ttl_s\":2}");
    assert_int_equal(json_array_size(dlvs(c)), 1);
    seq = jint(dlv(c, 0), "seq");
    snprintf(tok_a, sizeof tok_a, "%s", jstr(dlv(c, 0), "lease_token"));
    la = time_of(dlv(c, 0), "lease_expires_at");
    json_decref(c);

    step(&s, &f, &at, -3600);

    /* Stamps do not go back, and stay close to the time before the step. */
    b1_at = publish(&s, "{\"event_id\":\"b1\",\"topic\":\"t\"}");
    assert_true(b1_at >= b0_at);
    assert_true(b1_at - b0_at < 60 * SEC);
    expect_sane_ages(&s, "g", 2);
    assert_true(range_lists(&s, "b0"));
    assert_true(range_lists(&s, "b1"));

    /* The 2 s lease ends after about 2 s, not an hour: claimable again
     * well within 30 s, and not before it ended. */
    d = claim_until(&s, "g", seq, "30", 30000);
    elapsed = mono_ms() - t0;
    assert_non_null(d);
    assert_true(time_of(d, "lease_expires_at") - 30 * SEC >= la);
    if (elapsed < 1900)
        fprintf(stderr, "re-claimed after %lld ms\n", (long long)elapsed);
    assert_true(elapsed >= 1900);
    assert_string_equal(settle1(&s, "g", "ack", seq, tok_a, NULL, NULL), "lease_lost");
    assert_string_equal(settle1(&s, "g", "extend", seq, tok_a, "{\"lease_ttl_s\":5}", NULL),
                        "lease_lost");
    assert_string_equal(settle1(&s, "g", "ack", seq, jstr(d, "lease_token"), NULL, NULL),
                        "acked");
    json_decref(d);
    expect_drained(&s, "g", 2);
    faked_stop(&s, &f);
}

/* ---- (iii) the wall clock steps forward an hour ---- */

static void step_forward_keeps_leases_and_retries(void **state)
{
    struct srv s;
    struct faked f;
    json_t *c, *d;
    char tok0[80], body[256], when[MIC_TIME_LEN + 1];
    json_int_t seq0, seq1;
    int64_t nb1 = 0, t_nack, elapsed;
    long at = 0;

    (void)state;
    faked_start(&s, &f);
    setup_topic_group(&s, "/v1/groups/g", GROUP_BODY);
    publish(&s, "{\"event_id\":\"f0\",\"topic\":\"t\"}");
    publish(&s, "{\"event_id\":\"f1\",\"topic\":\"t\"}");
    c = claim(&s, "g", "{\"max\":2,\"lease_ttl_s\":60}");
    assert_int_equal(json_array_size(dlvs(c)), 2);
    seq0 = jint(dlv(c, 0), "seq");
    seq1 = jint(dlv(c, 1), "seq");
    snprintf(tok0, sizeof tok0, "%s", jstr(dlv(c, 0), "lease_token"));
    t_nack = mono_ms();
    assert_string_equal(settle1(&s, "g", "nack", seq1, jstr(dlv(c, 1), "lease_token"),
                                "{\"retry_after_s\":3}", &nb1), "retrying");
    json_decref(c);

    step(&s, &f, &at, 3600);

    /* Neither the lease (60 s) nor the retry (3 s: due only if that much
     * time passed, whatever the load) came due with the step. */
    c = claim(&s, "g", "{\"max\":10,\"lease_ttl_s\":30}");
    elapsed = mono_ms() - t_nack;
    d = NULL;
    for (size_t i = 0; i < json_array_size(dlvs(c)); i++) {
        fprintf(stderr, "seq %lld claimed %lld ms after the nack, right after the step\n",
                (long long)jint(dlv(c, i), "seq"), (long long)elapsed);
        assert_int_equal(jint(dlv(c, i), "seq"), seq1);
        assert_true(elapsed >= 2850);
        d = json_incref(dlv(c, i));
    }
    json_decref(c);
    assert_string_equal(settle1(&s, "g", "ack", seq0, tok0, NULL, NULL), "acked");

    /* The retry comes after its 3 s (micd's clock may run 5% fast while
     * it catches up with the wall clock), well before the hour. */
    if (!d)
        d = claim_until(&s, "g", seq1, "30", 30000);
    elapsed = mono_ms() - t_nack;
    assert_non_null(d);
    assert_int_equal(jint(d, "attempt"), 2);
    assert_true(time_of(d, "lease_expires_at") - 30 * SEC >= nb1);
    if (elapsed < 2800)
        fprintf(stderr, "retried after %lld ms\n", (long long)elapsed);
    assert_true(elapsed >= 2800);
    assert_string_equal(settle1(&s, "g", "ack", seq1, jstr(d, "lease_token"), NULL, NULL),
                        "acked");
    json_decref(d);

    /* A producer whose clock followed the step sets created_at by it: not
     * "more than 300 s in the future", and its age is not negative. */
    mic_time_format(wall_us() + 3600 * SEC, when);
    snprintf(body, sizeof body, "{\"event_id\":\"f2\",\"topic\":\"t\",\"created_at\":\"%s\"}",
             when);
    publish(&s, body);
    expect_sane_ages(&s, "g", 1);
    c = claim(&s, "g", "{\"max\":10,\"lease_ttl_s\":30}");
    assert_int_equal(json_array_size(dlvs(c)), 1);
    assert_string_equal(settle1(&s, "g", "ack", jint(dlv(c, 0), "seq"),
                                jstr(dlv(c, 0), "lease_token"), NULL, NULL), "acked");
    json_decref(c);
    expect_drained(&s, "g", 3);
    faked_stop(&s, &f);
}

/* ---- (v) the wall clock set back while micd was down ---- */

static void restart_after_step_back(void **state)
{
    struct srv s;
    struct faked f;
    json_t *c, *d;
    char tok[80];
    json_int_t seq;
    int64_t la, r0_at, r1_at, t0;

    (void)state;
    faked_start(&s, &f);
    setup_topic_group(&s, "/v1/groups/g", GROUP_BODY);
    r0_at = publish(&s, "{\"event_id\":\"r0\",\"topic\":\"t\"}");
    c = claim(&s, "g", "{\"max\":1,\"lease_ttl_s\":3}");
    assert_int_equal(json_array_size(dlvs(c)), 1);
    seq = jint(dlv(c, 0), "seq");
    snprintf(tok, sizeof tok, "%s", jstr(dlv(c, 0), "lease_token"));
    la = time_of(dlv(c, 0), "lease_expires_at");
    json_decref(c);
    assert_int_equal(srv_stop(&s), 0);

    /* Back up an hour behind: micd goes on from where the store says it
     * was, not from the wall clock. */
    faked_run(&s, &f, -3600);
    t0 = mono_ms();
    assert_true(metric(&s, "mic_clock_offset_seconds") > 3500);
    r1_at = publish(&s, "{\"event_id\":\"r1\",\"topic\":\"t\"}");
    assert_true(r1_at >= r0_at);
    assert_true(r1_at - r0_at < 60 * SEC);
    expect_sane_ages(&s, "g", 2);
    assert_true(range_lists(&s, "r1"));
    /* The stored lease ends within its 3 s (some of which passed before
     * the restart), not an hour later. */
    d = claim_until(&s, "g", seq, "30", 30000);
    assert_non_null(d);
    assert_true(mono_ms() - t0 < 30000);
    assert_true(time_of(d, "lease_expires_at") - 30 * SEC >= la);
    assert_string_equal(settle1(&s, "g", "ack", seq, tok, NULL, NULL), "lease_lost");
    assert_string_equal(settle1(&s, "g", "ack", seq, jstr(d, "lease_token"), NULL, NULL),
                        "acked");
    json_decref(d);
    expect_drained(&s, "g", 2);
    faked_stop(&s, &f);
}

/* ---- (iv) steps back and forth: no double lease, nothing stuck ---- */

#define NEV 40
#define NAGG 8

struct lease {
    char token[80];
    int64_t granted, expires;  /* micd's clock */
    int64_t asked_ms;          /* mono_ms() before the claim that granted it */
    int live;                  /* granted, not acked */
    int acked;
    int grants;
};

/* A lease granted by a claim sent at 'asked' (mono ms) lasted until after
 * 'now' if another was granted then: it must have had 1 s, or 0.95 s
 * while micd's clock slews (necessary, not sufficient: load only makes the
 * span longer). */
static void expect_lasted(const struct lease *l, int64_t now, const char *what, long long seq)
{
    if (now - l->asked_ms < 950)
        fprintf(stderr, "%s %lld: a lease of 1 s superseded after %lld ms\n", what, seq,
                (long long)(now - l->asked_ms));
    assert_true(now - l->asked_ms >= 950);
}

struct book {
    const char *group;
    int ordered;
    struct lease l[NEV + 1];   /* by seq (seqs 1..NEV) */
    int acked;
};

/* Claim once on the book's group, check each grant, ack every other one
 * (the rest are left to expire, and acked when granted again). */
static void round_of(const struct srv *s, struct book *b, int wait)
{
    char body[128];
    json_t *c, *d;
    size_t i;

    int64_t asked = mono_ms(), got;

    snprintf(body, sizeof body, "{\"max\":10,\"lease_ttl_s\":1,\"wait_s\":%d}", wait);
    c = claim(s, b->group, body);
    got = mono_ms();
    json_array_foreach(dlvs(c), i, d) {
        json_int_t seq = jint(d, "seq");
        struct lease *l;
        int64_t exp = time_of(d, "lease_expires_at"), granted = exp - SEC;

        assert_true(seq >= 1 && seq <= NEV);
        l = &b->l[seq];
        assert_false(l->acked);            /* an acked delivery never comes back */
        if (l->live && granted < l->expires)
            fprintf(stderr, "%s seq %lld leased twice\n", b->group, (long long)seq);
        assert_false(l->live && granted < l->expires);
        if (l->live)
            expect_lasted(l, got, b->group, (long long)seq);
        if (b->ordered) {
            /* One live lease per aggregate: seq k is aggregate (k-1) % NAGG. */
            for (int k = 1; k <= NEV; k++)
                if (k != seq && (k - 1) % NAGG == (seq - 1) % NAGG && b->l[k].live) {
                    assert_true(granted >= b->l[k].expires);
                    expect_lasted(&b->l[k], got, "o aggregate of seq", (long long)seq);
                }
        }
        snprintf(l->token, sizeof l->token, "%s", jstr(d, "lease_token"));
        l->granted = granted;
        l->expires = exp;
        l->asked_ms = asked;
        l->live = 1;
        /* Every other first grant is left to expire; a second one acks. */
        if (i % 2 == 0 || l->grants++ > 0) {
            assert_string_equal(settle1(s, b->group, "ack", seq, l->token, NULL, NULL),
                                "acked");
            l->live = 0;
            l->acked = 1;
            b->acked++;
        }
    }
    json_decref(c);
}

static void steps_drain_without_double_leases(void **state)
{
    static const long steps[] = {-3600, 3600, 1800, -7200, 3600, 600, -600, 3600};
    static struct book u, o;
    struct srv s;
    struct faked f;
    char body[256];
    int64_t end;
    long at = 0;
    int r = 0;

    (void)state;
    memset(&u, 0, sizeof u);
    memset(&o, 0, sizeof o);
    u.group = "u";
    o.group = "o";
    o.ordered = 1;
    faked_start(&s, &f);
    setup_topic_group(&s, "/v1/groups/u",
                      "{\"topics\":[\"t\"],\"max_attempts\":1000,"
                      "\"backoff\":{\"initial_ms\":0,\"max_ms\":0}}");
    json_decref(call(&s, "PUT", "/v1/groups/o",
                     "{\"topics\":[\"t\"],\"ordered\":true,\"max_attempts\":1000,"
                     "\"backoff\":{\"initial_ms\":0,\"max_ms\":0}}", 201));
    for (int i = 0; i < NEV; i++) {
        snprintf(body, sizeof body, "{\"event_id\":\"d%d\",\"topic\":\"t\","
                 "\"aggregate_type\":\"acct\",\"aggregate_id\":\"a%d\"}", i, i % NAGG);
        publish(&s, body);
    }
    end = mono_ms() + 90000;
    while ((u.acked < NEV || o.acked < NEV || r < (int)(sizeof steps / sizeof steps[0])) &&
           mono_ms() < end) {
        if (r < (int)(sizeof steps / sizeof steps[0]))
            step(&s, &f, &at, steps[r]);
        r++;
        round_of(&s, &u, u.acked < NEV ? 1 : 0);
        round_of(&s, &o, o.acked < NEV ? 1 : 0);
    }
    if (u.acked < NEV || o.acked < NEV)
        fprintf(stderr, "after %d rounds: u %d, o %d of %d acked\n", r, u.acked, o.acked, NEV);
    assert_int_equal(u.acked, NEV);
    assert_int_equal(o.acked, NEV);
    assert_true(r >= (int)(sizeof steps / sizeof steps[0]));
    expect_drained(&s, "u", NEV);
    expect_drained(&s, "o", NEV);
    faked_stop(&s, &f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pause_past_lease),
        cmocka_unit_test(step_back_keeps_leases_and_ages),
        cmocka_unit_test(step_forward_keeps_leases_and_retries),
        cmocka_unit_test(steps_drain_without_double_leases),
        cmocka_unit_test(restart_after_step_back),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
