/* bench_parse.c - the handler-side cost of one publish: parse and validate
 * a batch body N times (mic_publish_parse), no HTTP, no store.  Meant for
 * `valgrind --tool=callgrind` (repeatable instruction counts) and for a
 * quick ns/event figure:
 *
 *   build/bench_parse [BATCH] [ROUNDS]
 */
#define _GNU_SOURCE
#include "core/config.h"
#include "core/err.h"
#include "engine/publish.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char *make_body(int batch, size_t *len)
{
    size_t cap = (size_t)batch * 512 + 64, n = 0;
    char *b = malloc(cap);

    n += (size_t)sprintf(b + n, "{\"events\":[");
    for (int i = 0; i < batch; i++)
        n += (size_t)sprintf(b + n,
                             "%s{\"event_id\":\"bench-%d\",\"topic\":\"bench\",\"event_type\":\"bench.created\","
                             "\"aggregate_type\":\"order\",\"aggregate_id\":\"o%d\","
                             "\"payload\":{\"n\":%d,\"customer\":\"c-1234\",\"items\":[1,2,3],"
                             "\"note\":\"%0120d\"}}",
                             i ? "," : "", i, i % 50, i, i);
    n += (size_t)sprintf(b + n, "]}");
    *len = n;
    return b;
}

int main(int argc, char **argv)
{
    int batch = argc > 1 ? atoi(argv[1]) : 100, rounds = argc > 2 ? atoi(argv[2]) : 200;
    const char *cargv[] = {"micd"};
    struct mic_config cfg;
    struct mic_error e;
    struct timespec a, b;
    char err[128];
    size_t len;
    char *body;

    if (mic_config_load(&cfg, 1, (char **)cargv, err, sizeof err))
        return 2;
    body = make_body(batch, &len);
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int r = 0; r < rounds; r++) {
        mic_publish *p;
        if (mic_publish_parse(body, len, &cfg, &p, &e)) {
            fprintf(stderr, "parse failed: %s\n", e.message);
            return 1;
        }
        mic_publish_free(p);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("{\"batch\":%d,\"rounds\":%d,\"body_bytes\":%zu,\"ns_per_event\":%.0f}\n", batch, rounds, len,
           ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / ((double)batch * rounds));
    free(body);
    return 0;
}
