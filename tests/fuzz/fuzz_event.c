/* fuzz_event.c - the body of POST /v1/events on its way to the writer:
 * mic_publish_parse (JSON limits, one event or a batch, each event's
 * fields, the in-batch rules), and below it the two things it rests on:
 *   - mic_jdoc_parse, the yajl fast path, must accept exactly what
 *     mic_json_load (jansson) accepts, and its canonical text must be
 *     jansson's json_dumps(JSON_COMPACT | JSON_SORT_KEYS) byte for byte
 *     (jdoc.h's promise; the digests of stored events depend on it);
 *   - mic_event_parse on a single event: its stored form, closed with '}',
 *     is a JSON object that begins with its event_id and holds its topic. */
#include "fuzz.h"

#include "core/buf.h"
#include "core/clock.h"
#include "core/err.h"
#include "engine/event.h"
#include "core/jdoc.h"
#include "core/json.h"
#include "engine/publish.h"

#include <jansson.h>
#include <string.h>

static struct mic_config cfg;

FUZZ_INIT(&cfg)

/* The fast path against the parser of record. */
static void check_jdoc(const char *body, size_t len)
{
    struct mic_error e1, e2;
    mic_jdoc *d = NULL;
    json_t *j = NULL;
    int r1 = mic_jdoc_parse(body, len, cfg.max_depth, &d, NULL, &e1);
    int r2 = mic_json_load(body, len, cfg.max_depth, &j, &e2);

    FUZZ_CHECK(r1 == MIC_OK || r1 == MIC_EPARSE);
    FUZZ_CHECK((r1 == MIC_OK) == (r2 == MIC_OK));
    if (r1 == MIC_EPARSE && r2 == MIC_EPARSE)
        FUZZ_CHECK(strcmp(e1.message, e2.message) == 0);
    if (r1 == MIC_OK && r2 == MIC_OK) {
        struct mic_buf b;
        char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);

        mic_buf_init(&b);
        FUZZ_CHECK(s != NULL);
        FUZZ_CHECK(mic_jdoc_canonical(d, mic_jdoc_root(d), &b) == MIC_OK);
        FUZZ_CHECK(b.len == strlen(s) && memcmp(b.p, s, b.len) == 0);
        mic_buf_fini(&b);
        free(s);
    }
    if (r1 == MIC_OK)
        mic_jdoc_fini(d);
    if (r2 == MIC_OK)
        json_decref(j);
}

/* One event object: its stored form. */
static void check_event(const char *body, size_t len)
{
    struct mic_error err;
    struct mic_event ev;
    mic_jdoc *d = NULL;
    mic_jv root;

    if (mic_jdoc_parse(body, len, cfg.max_depth, &d, NULL, &err))
        return;
    root = mic_jdoc_root(d);
    if (mic_jdoc_type(d, root) == MIC_JOBJECT &&
        mic_event_parse(d, root, mic_now_us(), "", &ev, &err) == MIC_OK) {
        struct mic_buf b;
        json_t *j, *topic;
        const char *id;
        size_t idlen;

        FUZZ_CHECK(mic_event_id_ok(ev.id, ev.idlen) && strlen(ev.id) == ev.idlen);
        FUZZ_CHECK(mic_event_topic_ok(ev.topic, ev.topiclen) && strlen(ev.topic) == ev.topiclen);
        FUZZ_CHECK(ev.json && ev.json_len > 0);
        FUZZ_CHECK(!ev.has_version || (ev.has_agg && ev.version >= 1 && ev.version < (1ull << 63)));
        FUZZ_CHECK(mic_event_stored_id(ev.json, ev.json_len, &id, &idlen) == 0);
        FUZZ_CHECK(idlen == ev.idlen && memcmp(id, ev.id, idlen) == 0);
        mic_buf_init(&b);
        mic_buf_add(&b, ev.json, ev.json_len);
        mic_buf_add(&b, "}", 1);
        FUZZ_CHECK(!b.oom);
        j = json_loadb(b.p, b.len, JSON_REJECT_DUPLICATES, NULL);
        FUZZ_CHECK(json_is_object(j));
        topic = json_object_get(j, "topic");
        FUZZ_CHECK(json_is_string(topic) && strcmp(json_string_value(topic), ev.topic) == 0);
        json_decref(j);
        mic_buf_fini(&b);
        mic_event_fini(&ev);
    } else {
        FUZZ_CHECK(mic_jdoc_type(d, root) != MIC_JOBJECT || err.code != NULL);
    }
    mic_jdoc_fini(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body = (const char *)data;
    struct mic_error err;
    mic_publish *p = NULL;
    int rc;

    memset(&err, 0, sizeof err);
    rc = mic_publish_parse(body, size, &cfg, &p, &err);
    if (rc == MIC_OK) {
        int n = mic_publish_count(p);

        FUZZ_CHECK(n >= 1 && n <= cfg.max_batch);
        for (int i = 0; i < n; i++)
            FUZZ_CHECK(mic_event_topic_ok(mic_publish_topic(p, i), strlen(mic_publish_topic(p, i))));
        mic_publish_free(p);
    } else {
        /* 400, 422, 413, 409 (a repeated event_id with other content) */
        FUZZ_CHECK(rc == MIC_EPARSE || rc == MIC_EINVAL || rc == MIC_ETOOBIG ||
                   rc == MIC_ECONFLICT);
        FUZZ_CHECK(err.err == rc && err.code != NULL && err.message[0] != 0);
    }
    check_jdoc(body, size);
    check_event(body, size);
    return 0;
}
