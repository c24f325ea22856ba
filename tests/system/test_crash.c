/* test_crash.c - kill -9 under load: 16 concurrent publishers (single
 * events and batches of 5) against a real micd; once enough events are
 * acknowledged, micd gets SIGKILL mid-load.  After a restart on the same
 * store, every event that got a 2xx must be there with exactly the fields
 * that were sent.  The counts are printed. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PUBLISHERS 16
#define ACK_TARGET 10000
#define MAX_PER_THREAD 20000

struct pub {
    int id;
    struct srv *s;
    char **acked;      /* the event objects (JSON text) that got a 2xx */
    int nacked, requests, failures;
};

static atomic_int total_acked;
static atomic_int stop_now;

static int make_event(char *buf, size_t cap, int t, int n, unsigned *seed)
{
    char blob[129];

    for (int i = 0; i < 128; i++)
        blob[i] = "0123456789abcdef"[rand_r(seed) % 16];
    blob[128] = 0;
    return snprintf(buf, cap,
                    "{\"event_id\":\"crash-%d-%d\",\"topic\":\"crash.t%d\","
                    "\"aggregate_type\":\"pub\",\"aggregate_id\":\"p%d\",\"aggregate_version\":%d,"
                    "\"headers\":{\"n\":\"%d\"},\"payload\":{\"t\":%d,\"n\":%d,\"blob\":\"%s\"}}",
                    t, n, t % 4, t, n + 1, n, t, n, blob);
}

static void *publisher(void *arg)
{
    struct pub *p = arg;
    unsigned seed = (unsigned)p->id * 7919u + 1;
    char *events[5], body[8192];
    int n = 0;

    while (!atomic_load(&stop_now) && n + 5 < MAX_PER_THREAD) {
        int k = (n % 20 == 0) ? 5 : 1, len = 0;
        struct resp r;

        for (int i = 0; i < k; i++) {
            char ev[1024];
            make_event(ev, sizeof ev, p->id, n + i, &seed);
            events[i] = strdup(ev);
        }
        if (k == 1) {
            len = snprintf(body, sizeof body, "%s", events[0]);
        } else {
            len = snprintf(body, sizeof body, "{\"events\":[");
            for (int i = 0; i < k; i++)
                len += snprintf(body + len, sizeof body - (size_t)len, "%s%s", i ? "," : "", events[i]);
            len += snprintf(body + len, sizeof body - (size_t)len, "]}");
        }
        p->requests++;
        if (http(p->s, "POST", "/v1/events", "application/json", body, (size_t)len, NULL, &r) == 0 &&
            (r.status == 201 || r.status == 200)) {
            for (int i = 0; i < k; i++)
                p->acked[p->nacked++] = events[i];
            atomic_fetch_add(&total_acked, k);
            n += k;
        } else {
            for (int i = 0; i < k; i++)
                free(events[i]);
            p->failures++;
            if (r.status == 0) { /* the server is gone */
                resp_free(&r);
                break;
            }
            n += k; /* a refused request: its ids are not reused */
        }
        resp_free(&r);
    }
    http_thread_done();
    return NULL;
}

static int enough_acked(void *arg)
{
    (void)arg;
    return atomic_load(&total_acked) >= ACK_TARGET;
}

static void kill9_keeps_every_acked_event(void **state)
{
    struct srv s;
    struct pub pubs[PUBLISHERS];
    pthread_t th[PUBLISHERS];
    int acked = 0, verified = 0, requests = 0;

    (void)state;
    memset(&s, 0, sizeof s);
    assert_int_equal(srv_start(&s, NULL), 0);
    for (int i = 0; i < PUBLISHERS; i++) {
        pubs[i] = (struct pub){.id = i, .s = &s};
        pubs[i].acked = calloc(MAX_PER_THREAD, sizeof(char *));
        assert_int_equal(pthread_create(&th[i], NULL, publisher, &pubs[i]), 0);
    }
    assert_true(await(enough_acked, NULL, 120000));
    srv_kill9(&s); /* mid-load: requests are in flight */
    atomic_store(&stop_now, 1);
    for (int i = 0; i < PUBLISHERS; i++)
        pthread_join(th[i], NULL);

    assert_int_equal(srv_start(&s, NULL), 0);
    for (int i = 0; i < PUBLISHERS; i++) {
        requests += pubs[i].requests;
        for (int j = 0; j < pubs[i].nacked; j++) {
            json_t *sent = json_loads(pubs[i].acked[j], 0, NULL), *stored, *v;
            const char *key;
            char path[160];
            struct resp r;

            assert_non_null(sent);
            snprintf(path, sizeof path, "/v1/events/%s",
                     json_string_value(json_object_get(sent, "event_id")));
            assert_int_equal(http_json(&s, "GET", path, NULL, &r), 0);
            if (r.status != 200)
                fprintf(stderr, "lost: %s\n", pubs[i].acked[j]);
            assert_int_equal(r.status, 200);
            stored = json_object_get(r.json, "event");
            json_object_foreach(sent, key, v)
                assert_true(json_equal(v, json_object_get(stored, key)));
            verified++;
            acked++;
            resp_free(&r);
            json_decref(sent);
            free(pubs[i].acked[j]);
        }
        free(pubs[i].acked);
    }
    printf("crash: %d publishers, %d requests, %d events acknowledged before kill -9, "
           "%d found after restart with every sent field identical, 0 lost\n",
           PUBLISHERS, requests, acked, verified);
    assert_int_equal(acked, verified);
    assert_true(acked >= ACK_TARGET);
    /* The restarted server still takes writes. */
    {
        struct resp r;
        assert_int_equal(http_json(&s, "POST", "/v1/events", "{\"topic\":\"crash.after\"}", &r), 0);
        assert_int_equal(r.status, 201);
        resp_free(&r);
    }
    assert_int_equal(srv_stop(&s), 0);
    srv_cleanup(&s);
    http_thread_done();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(kill9_keeps_every_acked_event),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
