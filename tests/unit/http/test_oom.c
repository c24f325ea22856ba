/* test_oom.c - every out-of-memory branch of micd's request and file
 * parsers, reached in one test (the allocation hook of beanstalkd's
 * `falloc`, done at link time).
 *
 * The binary is linked with -Wl,--wrap=malloc,calloc,realloc,free,strdup,
 * strndup (Makefile: its own rule), so every allocation made by micd's
 * objects goes through the __wrap_ functions below.  jansson allocates
 * inside libjansson, but json.c installs its own allocator there
 * (json_set_alloc_funcs(arena_malloc, arena_free), whose blocks come from
 * malloc and go back through free): main() installs it before anything
 * runs and the test jansson_is_routed proves that jansson's allocations
 * are counted and can fail.  yajl's own allocations (libyajl, its default
 * allocator) are not failed: yajl 2 writes through the result of its
 * mallocs without checking it, so a failure there is yajl's crash, not a
 * branch of ours; the fast path's handling of yajl_alloc failing is the
 * same branch as its other failures (-1, MIC_ENOMEM).
 *
 * For each parser and a valid input: one run without failure (must answer
 * MIC_OK), then runs with allocation number N failing, N = 1, 2, ...
 * until a run makes no failing allocation.  Each run is a new thread, so
 * the per-thread caches (jdoc's document, the JSON arena's spare block)
 * start empty and are freed by their destructors when it ends: allocations
 * and frees made in the thread must then balance exactly, and the answer
 * must be MIC_ENOMEM with the "internal" error (500) -- never a client
 * error (400/422) for a body that is valid, never MIC_OK (no parser here
 * has a fallback, so a success after a failed allocation has lost
 * something), never a crash, never a leak (ASan's LeakSanitizer also
 * checks at exit).  The number of allocations failed is printed per
 * parser.
 *
 * Found and fixed with it: mic_json_load answered 400 invalid_json
 * ("malformed JSON at line -1", or a syntax error near a key) when jansson
 * ran out of memory, and accepted texts whose strings jansson's lexer had
 * cut short when it could not grow its buffer (json.c now notes a failed
 * allocation and answers MIC_ENOMEM); the keys file loader gave no reason
 * for MIC_ENOMEM. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "http/auth.h"
#include "engine/claim.h"
#include "core/config.h"
#include "core/err.h"
#include "core/json.h"
#include "engine/publish.h"
#include "engine/replay.h"
#include "store/store.h"
#include "store/log.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- The allocation hook ---- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
void __wrap_free(void *p);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);

/* Only the thread of a run counts and fails allocations. */
static _Thread_local int armed;
static atomic_long fail_at;    /* the allocation to fail (1, 2, ...), 0: none */
static atomic_long allocs;     /* allocations that succeeded in the run */
static atomic_long frees;      /* frees of non-NULL pointers in the run */
static atomic_long calls;      /* allocation calls in the run */
static atomic_int failed;      /* the run's failing allocation happened */

/* 1 if this allocation must fail. */
static int fail_now(void)
{
    long n;

    if (!armed)
        return 0;
    n = atomic_fetch_add(&calls, 1) + 1;
    if (n == atomic_load(&fail_at)) {
        atomic_store(&failed, 1);
        errno = ENOMEM;
        return 1;
    }
    return 0;
}

static void *counted(void *p)
{
    if (p && armed)
        atomic_fetch_add(&allocs, 1);
    return p;
}

void *__wrap_malloc(size_t n)
{
    return fail_now() ? NULL : counted(__real_malloc(n));
}

void *__wrap_calloc(size_t n, size_t size)
{
    return fail_now() ? NULL : counted(__real_calloc(n, size));
}

void *__wrap_realloc(void *p, size_t n)
{
    void *q;

    if (fail_now())
        return NULL;
    q = __real_realloc(p, n);
    if (!p)
        return counted(q);
    return q; /* the same block, moved or not */
}

void __wrap_free(void *p)
{
    if (p && armed)
        atomic_fetch_add(&frees, 1);
    __real_free(p);
}

char *__wrap_strdup(const char *s)
{
    return __wrap_strndup(s, strlen(s));
}

char *__wrap_strndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *p;

    if (fail_now() || !(p = counted(__real_malloc(len + 1))))
        return NULL;
    memcpy(p, s, len);
    p[len] = 0;
    return p;
}

/* ---- Runs ---- */

/* One parser call: returns its code; sets *why when the answer is not
 * what the parser promises (checked in the main thread: cmocka's asserts
 * may not jump from another thread). */
typedef int (*parse_fn)(const void *arg, const char **why);

struct run {
    parse_fn fn;
    const void *arg;
    int rc;
    const char *why;
};

static void *run_main(void *p)
{
    struct run *r = p;

    armed = 1;
    r->rc = r->fn(r->arg, &r->why);
    return NULL; /* armed still: the thread's key destructors count too */
}

/* Run fn in a new thread with allocation 'n' failing (0: none). */
static void run_once(struct run *r, long n)
{
    pthread_t t;

    atomic_store(&fail_at, n);
    atomic_store(&allocs, 0);
    atomic_store(&frees, 0);
    atomic_store(&calls, 0);
    atomic_store(&failed, 0);
    r->rc = -100;
    r->why = NULL;
    assert_int_equal(pthread_create(&t, NULL, run_main, r), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    atomic_store(&fail_at, 0);
}

#define MAX_SITES 100000

/* The whole sweep for one parser on one input; returns the number of
 * allocations failed. */
static long sweep(const char *name, parse_fn fn, const void *arg)
{
    struct run r = {fn, arg, 0, NULL};
    long n, clean;

    run_once(&r, 0);
    if (r.rc != MIC_OK || r.why)
        fail_msg("%s: without failures: rc %d (%s)", name, r.rc, r.why ? r.why : "");
    if (atomic_load(&allocs) != atomic_load(&frees))
        fail_msg("%s: without failures: %ld allocations, %ld frees", name,
                 atomic_load(&allocs), atomic_load(&frees));
    clean = atomic_load(&calls);
    for (n = 1; n <= MAX_SITES; n++) {
        run_once(&r, n);
        if (!atomic_load(&failed)) {
            /* past the last allocation: the run is the clean one */
            if (r.rc != MIC_OK)
                fail_msg("%s: a run past every allocation answered %d", name, r.rc);
            break;
        }
        if (r.why)
            fail_msg("%s: allocation %ld failing: %s (rc %d)", name, n, r.why, r.rc);
        /* No parser here has a fallback that may absorb a failure: one
         * that answers MIC_OK after an allocation failed has lost
         * something (jansson's lexer drops the bytes it cannot save). */
        if (r.rc != MIC_ENOMEM)
            fail_msg("%s: allocation %ld failing: rc %d (%s), want MIC_ENOMEM", name, n, r.rc,
                     mic_strerror(r.rc));
        if (atomic_load(&allocs) != atomic_load(&frees))
            fail_msg("%s: allocation %ld failing: %ld allocations, %ld frees (a leak)", name, n,
                     atomic_load(&allocs), atomic_load(&frees));
    }
    assert_true(n <= MAX_SITES);
    if (n == 1)
        printf("oom: %-24s   0 allocations: nothing to fail\n", name);
    else
        printf("oom: %-24s %3ld allocations failed one by one (of %ld in a clean run): each "
               "answered MIC_ENOMEM, nothing leaked\n", name, n - 1, clean);
    return n - 1;
}

/* ---- The parsers ---- */

static struct mic_config cfg;

#define WHY(cond, text)        \
    do {                       \
        if ((cond) && !*why)   \
            *why = (text);     \
    } while (0)

/* After a failure: the error the client sees is the server's. */
static void internal_only(int rc, const struct mic_error *err, const char **why)
{
    WHY(rc == MIC_ENOMEM && (!err->code || strcmp(err->code, "internal")),
        "MIC_ENOMEM without the \"internal\" error");
    WHY(rc != MIC_OK && rc != MIC_ENOMEM && err->code, err->message);
}

struct body {
    const char *text;
    int events;    /* publish: events in it */
    int kind;      /* claim: enum mic_claim_kind */
};

static int publish_parse(const void *arg, const char **why)
{
    const struct body *b = arg;
    struct mic_error err = {0};
    mic_publish *p = NULL;
    int rc = mic_publish_parse(b->text, strlen(b->text), &cfg, &p, &err);

    internal_only(rc, &err, why);
    if (rc == MIC_OK) {
        WHY(mic_publish_count(p) != b->events, "a different number of events");
        mic_publish_free(p);
    }
    return rc;
}

static int claim_parse(const void *arg, const char **why)
{
    const struct body *b = arg;
    struct mic_error err = {0};
    mic_claim *c = NULL;
    int rc = mic_claim_parse(b->kind, "workers", b->text, strlen(b->text), &cfg, &c, &err);

    internal_only(rc, &err, why);
    if (rc == MIC_OK)
        mic_claim_free(c);
    return rc;
}

static int range_parse(const void *arg, const char **why)
{
    const char *const *q = arg;
    struct mic_range_args a;
    struct mic_error err = {0};
    int rc = mic_range_args_parse(q[0], q[1], q[2], q[3], 1800000000000000LL, &a, &err);

    WHY(rc == MIC_OK && a.limit != 10, "limit");
    return rc;
}

static int config_parse(const void *arg, const char **why)
{
    struct mic_config c = cfg;
    char err[256] = "";
    int rc = mic_config_parse(&c, arg, strlen(arg), "oom.conf", err, sizeof err);

    WHY(rc == MIC_OK && c.max_batch != 50, "max-batch");
    WHY(rc == MIC_ENOMEM && !err[0], "no message");
    return rc;
}

static int config_load(const void *arg, const char **why)
{
    char *argv[] = {"micd", "--config", (char *)arg, NULL};
    struct mic_config c;
    char err[256] = "";
    int rc = mic_config_load(&c, 3, argv, err, sizeof err);

    WHY(rc == MIC_OK && c.max_batch != 50, "max-batch");
    WHY(rc != MIC_OK && !err[0], "no message");
    return rc;
}

static int keys_parse(const void *arg, const char **why)
{
    char w[256] = "";
    mic_keys *k = NULL;
    int rc = mic_keys_parse(arg, strlen(arg), &k, w, sizeof w);

    WHY(rc == MIC_OK && mic_keys_count(k) != 20, "a different number of keys");
    WHY(rc != MIC_OK && k != NULL, "a set handed out with an error");
    mic_keys_free(k);
    return rc;
}

static int keys_load(const void *arg, const char **why)
{
    char w[256] = "";
    mic_keys *k = NULL;
    int rc = mic_keys_load(arg, &k, w, sizeof w);

    WHY(rc == MIC_OK && mic_keys_count(k) != 20, "a different number of keys");
    WHY(rc != MIC_OK && !w[0], "no message");
    mic_keys_free(k);
    return rc;
}

static int record_decode(const void *arg, const char **why)
{
    struct mic_rec r;
    unsigned char v[64 + 20] = {2};

    (void)arg;
    memcpy(v + 56, "{\"event_id\":\"e-1\",\"topic\":\"t\"", 28);
    /* decoded, or refused (a record format with a checksum): either way
     * without allocating */
    WHY(mic_rec_decode(1, v, 56 + 28, &r) > 0, "a positive code");
    return MIC_OK;
}

static int jansson_load(const void *arg, const char **why)
{
    json_t *j = json_loads(arg, 0, NULL);

    if (!j)
        return MIC_ENOMEM; /* jansson's only failure on this text */
    WHY(!json_is_array(j), "not the array");
    json_decref(j);
    return MIC_OK;
}

/* ---- Tests ---- */

static const char single[] =
    "{\"event_id\":\"ord-1\",\"topic\":\"orders\",\"aggregate_type\":\"order\","
    "\"aggregate_id\":\"1\",\"aggregate_version\":1,\"created_at\":\"2026-01-01T00:00:00Z\","
    "\"headers\":{\"trace\":\"t-1\"},\"payload\":{\"b\":[1,2,{\"c\":null}],\"a\":\"x\"}}";
static const char batch[] =
    "{\"events\":[{\"topic\":\"orders\",\"aggregate_type\":\"o\",\"aggregate_id\":\"1\","
    "\"aggregate_version\":1,\"payload\":{\"n\":1}},"
    "{\"event_id\":\"e-2\",\"topic\":\"orders\",\"aggregate_type\":\"o\",\"aggregate_id\":\"1\","
    "\"aggregate_version\":2},"
    "{\"event_id\":\"e-2\",\"topic\":\"orders\",\"aggregate_type\":\"o\",\"aggregate_id\":\"1\","
    "\"aggregate_version\":2},"
    "{\"event_id\":\"e-3\",\"topic\":\"audit\",\"deliver_at\":\"2026-01-02T00:00:00Z\"}]}";
/* A surrogate escape: the jansson path (mic_json_load in an arena). */
static const char slow[] =
    "{\"topic\":\"t\",\"payload\":{\"s\":\"\\ud83d\\ude00\",\"z\":[true,false,1.5],\"a\":{}}}";

static void jansson_is_routed(void **state)
{
    struct run r = {jansson_load, "[1,{\"a\":\"b\",\"c\":[2,3]}]", 0, NULL};

    (void)state;
    run_once(&r, 0);
    assert_int_equal(r.rc, MIC_OK);
    assert_true(atomic_load(&allocs) > 0); /* jansson's values came through the hook */
    assert_int_equal(atomic_load(&allocs), atomic_load(&frees));
    run_once(&r, 1);
    assert_true(atomic_load(&failed));
    assert_int_equal(r.rc, MIC_ENOMEM);
    assert_true(sweep("jansson (json_loads)", jansson_load, r.arg) > 1);
}

static void publish_bodies(void **state)
{
    static const struct body one = {single, 1, 0}, many = {batch, 4, 0}, hard = {slow, 1, 0};

    (void)state;
    assert_true(sweep("publish (one event)", publish_parse, &one) > 3);
    assert_true(sweep("publish (batch of 4)", publish_parse, &many) > 3);
    assert_true(sweep("publish (jansson path)", publish_parse, &hard) > 3);
}

static void claim_bodies(void **state)
{
    static const struct body bodies[] = {
        {"{\"max\":10,\"lease_ttl_s\":30,\"wait_s\":0.5,\"worker\":\"w-1\"}", 0, MIC_CLAIM},
        {"", 0, MIC_CLAIM},
        {"{\"deliveries\":[{\"seq\":1,\"lease_token\":\"0123456789abcdef0123456789abcdef\"},"
         "{\"seq\":2,\"lease_token\":\"bad\"}]}", 0, MIC_ACK},
        {"{\"deliveries\":[{\"seq\":1,\"lease_token\":\"0123456789abcdef0123456789abcdef\","
         "\"retry_after_s\":5}],\"error\":\"timeout\",\"dead_letter\":false}", 0, MIC_NACK},
        {"{\"deliveries\":[{\"seq\":1,\"lease_token\":\"0123456789abcdef0123456789abcdef\"}],"
         "\"lease_ttl_s\":60}", 0, MIC_EXTEND},
        {"{\"seqs\":[1,2,3]}", 0, MIC_REQUEUE},
        {"{\"all\":true}", 0, MIC_REQUEUE},
        {"{\"seqs\":[4]}", 0, MIC_SKIP},
    };
    static const char *const names[] = {"claim", "claim (no body)", "ack", "nack", "extend",
                                        "requeue", "requeue all", "skip"};

    (void)state;
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++)
        assert_true(sweep(names[i], claim_parse, &bodies[i]) >= 1);
}

static void range_query(void **state)
{
    static const char *const q[4] = {"2026-01-01T00:00:00Z", "2026-02-01T00:00:00+01:00",
                                     "1767225600000000:e-1", "10"};

    (void)state;
    /* a pure function: nothing to fail */
    assert_int_equal(sweep("range query", range_parse, q), 0);
}

static void record_decoder(void **state)
{
    (void)state;
    assert_int_equal(sweep("record decoder", record_decode, NULL), 0);
}

struct files {
    char conf[64], keys[64];
    char *keytext;
};

static void write_file(char *path, const char *text)
{
    int fd;

    snprintf(path, 64, "/tmp/mic-test-oom-XXXXXX");
    assert_true((fd = mkstemp(path)) >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

static int files_setup(void **state)
{
    struct files *f = calloc(1, sizeof *f);
    size_t n = 0;

    if (!f || !(f->keytext = malloc(20 * 160)))
        return -1;
    /* 20 keys: the set grows 8 -> 16 -> 32 */
    for (int i = 0; i < 20; i++)
        n += (size_t)sprintf(f->keytext + n, "# key %d\nk%d %s %064d %s\n", i, i,
                             i % 2 ? "consumer" : "admin", i,
                             i % 2 ? "topic:orders.*,group:billing-*" : "*");
    write_file(f->conf, "# micd\nlisten = 127.0.0.1:0\nmax-batch = 50\nmap-size = 64M\n");
    write_file(f->keys, f->keytext);
    *state = f;
    return 0;
}

static int files_teardown(void **state)
{
    struct files *f = *state;

    unlink(f->conf);
    unlink(f->keys);
    free(f->keytext);
    free(f);
    return 0;
}

static void config_file(void **state)
{
    struct files *f = *state;

    assert_true(sweep("config (from memory)", config_parse,
                      "# micd\nlisten = 127.0.0.1:0\nmax-batch = 50\n") >= 1);
    assert_true(sweep("config (--config FILE)", config_load, f->conf) >= 1);
}

static void keys_file(void **state)
{
    struct files *f = *state;

    assert_true(sweep("keys (from memory)", keys_parse, f->keytext) >= 3);
    assert_true(sweep("keys (--keys FILE)", keys_load, f->keys) >= 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(jansson_is_routed),
        cmocka_unit_test(publish_bodies),
        cmocka_unit_test(claim_bodies),
        cmocka_unit_test(range_query),
        cmocka_unit_test(record_decoder),
        cmocka_unit_test_setup_teardown(config_file, files_setup, files_teardown),
        cmocka_unit_test_setup_teardown(keys_file, files_setup, files_teardown),
    };
    char *argv[] = {"micd", NULL};
    char err[256];
    struct mic_json_arena a;

    if (mic_config_load(&cfg, 1, argv, err, sizeof err))
        return fprintf(stderr, "defaults: %s\n", err), 1;
    /* json.c's allocator into jansson now, before any run (see the top) */
    mic_json_arena_begin(&a);
    mic_json_arena_end(&a);
    setvbuf(stdout, NULL, _IONBF, 0);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
