/* fuzz_range.c - the query string of GET /v1/topics/{topic}/events:
 * mic_range_args_parse (replay.h) on the arguments from, to, after and
 * limit.  The input is the query string as a client writes it
 * ("from=...&limit=10"); like libmicrohttpd, the harness splits it at '&'
 * and '=', decodes %XX and '+', and hands over the first value of each
 * name as a C string (a decoded NUL ends it).  Checked on success: limit
 * in 1..1000, a cursor's event_id valid and at most 128 bytes, a start
 * never before 'from', and from/to written back as RFC 3339 read as the
 * same microsecond. */
#include "fuzz.h"

#include "core/clock.h"
#include "core/err.h"
#include "engine/event.h"
#include "engine/replay.h"

#include <string.h>

#define NOW_US 1790000000000000LL /* 2026-09-21: fixed, so runs repeat */

FUZZ_INIT(NULL)

static int hexv(int c)
{
    return c >= '0' && c <= '9' ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Decode n bytes of s (%XX, '+') into out (n + 1 bytes), NUL-terminated. */
static void unescape(const char *s, size_t n, char *out)
{
    size_t o = 0;

    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%' && i + 2 < n + 0 && hexv(s[i + 1]) >= 0 && hexv(s[i + 2]) >= 0) {
            out[o++] = (char)(hexv(s[i + 1]) << 4 | hexv(s[i + 2]));
            i += 2;
        } else {
            out[o++] = s[i] == '+' ? ' ' : s[i];
        }
    }
    out[o] = 0;
}

static void round_trip(int64_t us)
{
    char t[MIC_TIME_LEN + 1];
    int64_t back = -1;

    FUZZ_CHECK(mic_time_format(us, t) == MIC_TIME_LEN && strlen(t) == MIC_TIME_LEN);
    FUZZ_CHECK(mic_time_parse(t, MIC_TIME_LEN, &back) == MIC_OK && back == us);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const names[4] = {"from", "to", "after", "limit"};
    const char *q = (const char *)data, *end = q + size;
    char *copy = malloc(size + 1), *vals[4] = {NULL, NULL, NULL, NULL};
    struct mic_range_args a;
    struct mic_error err;
    int rc;

    if (!copy)
        return 0;
    /* Decoded names and values go into 'copy' one after another; no
     * decoding makes a string longer. */
    char *w = copy;
    while (q <= end) {
        const char *amp = memchr(q, '&', (size_t)(end - q)), *eq;
        size_t n = (size_t)((amp ? amp : end) - q);
        char name[16];

        eq = memchr(q, '=', n);
        if (eq && (size_t)(eq - q) < sizeof name) {
            unescape(q, (size_t)(eq - q), name);
            for (int i = 0; i < 4; i++)
                if (!vals[i] && strcmp(name, names[i]) == 0) {
                    unescape(eq + 1, n - (size_t)(eq - q) - 1, w);
                    vals[i] = w;
                    w += strlen(w) + 1;
                }
        }
        if (!amp)
            break;
        q = amp + 1;
    }
    memset(&err, 0, sizeof err);
    rc = mic_range_args_parse(vals[0], vals[1], vals[2], vals[3], NOW_US, &a, &err);
    if (rc == MIC_OK) {
        FUZZ_CHECK(a.limit >= 1 && a.limit <= 1000);
        FUZZ_CHECK(vals[3] || a.limit == 100);
        FUZZ_CHECK(a.from_idlen <= MIC_EVENT_ID_MAX);
        FUZZ_CHECK(!a.exclusive || mic_event_id_ok(a.from_id, a.from_idlen));
        FUZZ_CHECK(a.exclusive == (vals[2] != NULL && a.from_idlen > 0));
        FUZZ_CHECK(vals[1] || a.to_us == NOW_US);
        FUZZ_CHECK(a.from_us >= 0);
        if (vals[1])
            round_trip(a.to_us);
        if (vals[0]) {
            struct mic_range_args b;

            /* the start is 'from' or a cursor after it */
            FUZZ_CHECK(mic_range_args_parse(vals[0], NULL, NULL, NULL, NOW_US, &b, &err) == MIC_OK);
            round_trip(b.from_us);
            FUZZ_CHECK(a.from_us >= b.from_us);
        }
    } else {
        FUZZ_CHECK(rc == MIC_EINVAL && err.err == rc && err.code && err.field[0]);
    }
    free(copy);
    return 0;
}
