/* test_retention.c - events past their topic's retention are removed by a
 * deadline-driven sweep once every delivery is terminal, appended to the
 * NDJSON archive first, and their ids stay remembered for dedupe_retain_s. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct srv S;
static char arch[300];

static long status_of(const char *method, const char *path, const char *body)
{
    struct resp r;
    long st;

    assert_int_equal(http_json(&S, method, path, body, &r), 0);
    st = r.status;
    resp_free(&r);
    return st;
}

static int gone(void *arg)
{
    char path[128];

    snprintf(path, sizeof path, "/v1/events/%s", (const char *)arg);
    return status_of("GET", path, NULL) == 404;
}

static int forgotten(void *arg)
{
    /* Publishing the same content again stores it anew once the id is forgotten. */
    return status_of("POST", "/v1/events", arg) == 201;
}

/* Count lines of 'file' in the archive naming event 'id'. */
static int archived(const char *file, const char *id)
{
    char path[400], line[8192], key[160];
    FILE *f;
    int n = 0;

    snprintf(path, sizeof path, "%s/%s", arch, file);
    snprintf(key, sizeof key, "{\"event_id\":\"%s\"", id);
    if (!(f = fopen(path, "r")))
        return 0;
    while (fgets(line, sizeof line, f))
        n += strncmp(line, key, strlen(key)) == 0;
    fclose(f);
    return n;
}

static void retention_and_archive(void **state)
{
    static const char *b = "{\"event_id\":\"ret-b\",\"topic\":\"ret.u\",\"payload\":{\"x\":1}}";
    char dir[64] = "/tmp/mic-arch-XXXXXX";
    const char *args[] = {"--archive-dir", NULL, NULL};
    struct resp r;
    json_t *d;
    char body[256];

    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(arch, sizeof arch, "%s", dir);
    args[1] = arch;
    memset(&S, 0, sizeof S);
    assert_int_equal(srv_start(&S, args), 0);
    assert_int_equal(status_of("PUT", "/v1/topics/ret.t", "{\"retention_s\":1}"), 201);
    assert_int_equal(status_of("PUT", "/v1/topics/ret.u", "{\"retention_s\":1,\"dedupe_retain_s\":1}"), 201);
    assert_int_equal(status_of("PUT", "/v1/groups/ret.g", "{\"topics\":[\"ret.t\"]}"), 201);
    assert_int_equal(status_of("POST", "/v1/events", "{\"event_id\":\"ret-a\",\"topic\":\"ret.t\"}"), 201);
    assert_int_equal(status_of("POST", "/v1/events", b), 201);

    /* B has no delivery to wait for: it goes, into the archive first. */
    assert_true(await(gone, "ret-b", 15000));
    assert_int_equal(archived("ret.u.ndjson", "ret-b"), 1);
    /* A's delivery is still pending: it stays (it was due first). */
    assert_int_equal(status_of("GET", "/v1/events/ret-a", NULL), 200);
    assert_int_equal(archived("ret.t.ndjson", "ret-a"), 0);
    /* B's id is remembered: the same content is a duplicate... */
    assert_int_equal(http_json(&S, "POST", "/v1/events", b, &r), 0);
    if (r.status == 200) {
        assert_true(json_is_true(json_object_get(json_array_get(json_object_get(r.json, "results"), 0),
                                                 "duplicate")));
    } else {
        /* ...unless dedupe_retain_s (1 s) already passed. */
        assert_int_equal(r.status, 201);
    }
    resp_free(&r);
    /* ...and forgotten after dedupe_retain_s: stored anew. */
    assert_true(await(forgotten, (void *)b, 15000));

    /* Ack A: it goes at its next look. */
    assert_int_equal(http_json(&S, "POST", "/v1/groups/ret.g/claim", "{\"max\":1}", &r), 0);
    d = json_array_get(json_object_get(r.json, "deliveries"), 0);
    assert_non_null(d);
    snprintf(body, sizeof body, "{\"deliveries\":[{\"seq\":%lld,\"lease_token\":\"%s\"}]}",
             (long long)json_integer_value(json_object_get(d, "seq")),
             json_string_value(json_object_get(d, "lease_token")));
    resp_free(&r);
    assert_int_equal(status_of("POST", "/v1/groups/ret.g/ack", body), 200);
    assert_true(await(gone, "ret-a", 15000));
    assert_int_equal(archived("ret.t.ndjson", "ret-a"), 1);
    /* The range read no longer has it. */
    assert_int_equal(http_json(&S, "GET", "/v1/topics/ret.t/events", NULL, &r), 0);
    assert_int_equal(json_array_size(json_object_get(r.json, "events")), 0);
    resp_free(&r);

    assert_int_equal(srv_stop(&S), 0);
    srv_cleanup(&S);
    {
        char p[400];
        snprintf(p, sizeof p, "%s/ret.t.ndjson", arch);
        unlink(p);
        snprintf(p, sizeof p, "%s/ret.u.ndjson", arch);
        unlink(p);
        rmdir(arch);
    }
    http_thread_done();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(retention_and_archive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
