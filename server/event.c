/* event.c - validation of one published event (DESIGN sections 2 and 12).
 *
 * The content digest is SHA-256 over the object exactly as the client sent
 * it, serialised compactly with keys sorted at every level: defaults that
 * the server fills in are not part of it, a default the client wrote out
 * is.  The stored form is the client's object with created_at normalised
 * to UTC microseconds and event_id, schema_version and priority filled in;
 * the writer completes it with seq and received_at. */
#include "event.h"

#include "clock.h"
#include "err.h"

#include <openssl/rand.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STR_MAX 256
#define HEADERS_MAX 32
#define HEADER_KEY_MAX 64
#define HEADER_VAL_MAX 1024
#define FUTURE_MAX_US (300 * 1000000LL)

static int name_char(char c, int colon)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-' ||
           (colon && c == ':');
}

static int name_ok(const char *s, size_t len, size_t max, int colon)
{
    if (len == 0 || len > max)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!name_char(s[i], colon))
            return 0;
    return 1;
}

int mic_event_topic_ok(const char *s, size_t len)
{
    return name_ok(s, len, MIC_TOPIC_MAX, 1);
}

int mic_event_id_ok(const char *s, size_t len)
{
    return name_ok(s, len, MIC_EVENT_ID_MAX, 1);
}

void mic_event_uuid7(int64_t now_us, char out[37])
{
    uint8_t b[16];
    uint64_t ms = (uint64_t)(now_us / 1000);

    if (RAND_bytes(b, sizeof b) != 1)
        abort(); /* no randomness: nothing safe left to do */
    for (int i = 0; i < 6; i++)
        b[i] = (uint8_t)(ms >> (40 - 8 * i));
    b[6] = (uint8_t)(0x70 | (b[6] & 0x0f));
    b[8] = (uint8_t)(0x80 | (b[8] & 0x3f));
    snprintf(out, 37,
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9],
             b[10], b[11], b[12], b[13], b[14], b[15]);
}

/* ---- Field checks ---- */

#define BAD(field, ...) \
    mic_error_set(err, MIC_EINVAL, "invalid_event", field, __VA_ARGS__)

struct ctx {
    const char *path;
    struct mic_error *err;
    char field[128];
};

static const char *fname(struct ctx *c, const char *name)
{
    snprintf(c->field, sizeof c->field, "%s%s", c->path, name);
    return c->field;
}

/* A string field of 1..max bytes; *out stays NULL when absent. */
static int get_str(struct ctx *c, json_t *obj, const char *name, size_t max,
                   const char **out, size_t *len)
{
    struct mic_error *err = c->err;
    json_t *v = json_object_get(obj, name);

    *out = NULL;
    *len = 0;
    if (!v)
        return MIC_OK;
    if (!json_is_string(v))
        return BAD(fname(c, name), "%s must be a string", name);
    *len = json_string_length(v);
    if (*len == 0 || *len > max)
        return BAD(fname(c, name), "%s must be 1 to %zu bytes long", name, max);
    *out = json_string_value(v);
    if (strlen(*out) != *len)
        return BAD(fname(c, name), "%s must not contain NUL", name);
    return MIC_OK;
}

/* An integer field within [lo, hi]; returns 1 in *present when there. */
static int get_int(struct ctx *c, json_t *obj, const char *name,
                   json_int_t lo, json_int_t hi, json_int_t *out, int *present)
{
    struct mic_error *err = c->err;
    json_t *v = json_object_get(obj, name);

    *present = v != NULL;
    if (!v)
        return MIC_OK;
    if (!json_is_integer(v))
        return BAD(fname(c, name), "%s must be an integer", name);
    *out = json_integer_value(v);
    if (*out < lo || *out > hi)
        return BAD(fname(c, name), "%s must be between %lld and %lld", name,
                   (long long)lo, (long long)hi);
    return MIC_OK;
}

static int check_headers(struct ctx *c, json_t *h)
{
    struct mic_error *err = c->err;
    const char *k;
    json_t *v;

    if (!json_is_object(h))
        return BAD(fname(c, "headers"), "headers must be an object of strings");
    if (json_object_size(h) > HEADERS_MAX)
        return BAD(fname(c, "headers"), "at most %d headers", HEADERS_MAX);
    json_object_foreach(h, k, v) {
        char f[96];
        snprintf(f, sizeof f, "headers.%.64s", k);
        if (!name_ok(k, strlen(k), HEADER_KEY_MAX, 0))
            return BAD(fname(c, f), "header names are [A-Za-z0-9._-]{1,64}");
        if (!json_is_string(v))
            return BAD(fname(c, f), "header values must be strings");
        if (json_string_length(v) > HEADER_VAL_MAX)
            return BAD(fname(c, f), "header values are at most %d bytes",
                       HEADER_VAL_MAX);
    }
    return MIC_OK;
}

static const char *const known[] = {
    "event_id", "topic", "aggregate_type", "aggregate_id", "aggregate_version",
    "schema_version", "event_type", "correlation_id", "priority",
    "created_at", "headers", "payload", NULL,
};

static int check_known(struct ctx *c, json_t *obj)
{
    struct mic_error *err = c->err;
    const char *k;
    json_t *v;

    json_object_foreach(obj, k, v) {
        int ok = 0;
        for (int i = 0; known[i] && !ok; i++)
            ok = strcmp(k, known[i]) == 0;
        if (!ok) {
            char f[80];
            snprintf(f, sizeof f, "%.64s", k);
            return BAD(fname(c, f), "unknown field '%.64s'", k);
        }
    }
    return MIC_OK;
}

static int digest_of(json_t *obj, uint8_t out[MIC_DIGEST_LEN])
{
    size_t n = json_dumpb(obj, NULL, 0, JSON_COMPACT | JSON_SORT_KEYS);
    char stack[4096], *buf = n <= sizeof stack ? stack : malloc(n);

    if (!buf)
        return MIC_ENOMEM;
    json_dumpb(obj, buf, n, JSON_COMPACT | JSON_SORT_KEYS);
    SHA256((const unsigned char *)buf, n, out);
    if (buf != stack)
        free(buf);
    return MIC_OK;
}

/* ---- The event ---- */

int mic_event_parse(json_t *obj, int64_t now_us, const char *path,
                    struct mic_event *ev, struct mic_error *err)
{
    struct ctx c = {path, err, ""};
    const char *id, *topic, *atype, *aid, *s;
    size_t idlen, tlen, atlen, ailen, slen;
    json_int_t n;
    json_t *v, *copy;
    char tbuf[MIC_TIME_LEN + 1];
    int present, rc;

    memset(ev, 0, sizeof *ev);
    if (!json_is_object(obj))
        return BAD(path[0] ? fname(&c, "") : NULL, "an event must be a JSON object");
    if ((rc = check_known(&c, obj)) ||
        (rc = get_str(&c, obj, "event_id", MIC_EVENT_ID_MAX, &id, &idlen)) ||
        (rc = get_str(&c, obj, "topic", MIC_TOPIC_MAX, &topic, &tlen)) ||
        (rc = get_str(&c, obj, "aggregate_type", STR_MAX, &atype, &atlen)) ||
        (rc = get_str(&c, obj, "aggregate_id", STR_MAX, &aid, &ailen)) ||
        (rc = get_str(&c, obj, "event_type", STR_MAX, &s, &slen)) ||
        (rc = get_str(&c, obj, "correlation_id", STR_MAX, &s, &slen)))
        return rc;
    if (id && !mic_event_id_ok(id, idlen))
        return BAD(fname(&c, "event_id"), "event_id must match [A-Za-z0-9._:-]{1,128}");
    if (!topic)
        return BAD(fname(&c, "topic"), "topic is required");
    if (!mic_event_topic_ok(topic, tlen))
        return BAD(fname(&c, "topic"), "topic must match [A-Za-z0-9._:-]{1,200}");
    if (!atype != !aid)
        return BAD(fname(&c, atype ? "aggregate_id" : "aggregate_type"),
                   "aggregate_type and aggregate_id come together or not at all");
    if ((rc = get_int(&c, obj, "aggregate_version", 1, INT64_MAX, &n, &present)))
        return rc;
    if (present) {
        if (!atype)
            return BAD(fname(&c, "aggregate_version"),
                       "aggregate_version needs aggregate_type and aggregate_id");
        ev->has_version = 1;
        ev->version = (uint64_t)n;
    }
    if ((rc = get_int(&c, obj, "schema_version", 1, INT32_MAX, &n, &present)))
        return rc;
    if ((rc = get_int(&c, obj, "priority", 0, 255, &n, &present)))
        return rc;
    ev->priority = present ? (uint8_t)n : 0;
    ev->created_at_us = now_us;
    if ((v = json_object_get(obj, "created_at"))) {
        if (!json_is_string(v) ||
            mic_time_parse(json_string_value(v), json_string_length(v),
                           &ev->created_at_us))
            return BAD(fname(&c, "created_at"),
                       "created_at must be an RFC 3339 time with at most 6 fractional digits");
        if (ev->created_at_us > now_us + FUTURE_MAX_US)
            return BAD(fname(&c, "created_at"),
                       "created_at is more than 300 s in the future");
    }
    if ((v = json_object_get(obj, "headers")) && (rc = check_headers(&c, v)))
        return rc;
    if ((v = json_object_get(obj, "payload")))
        ev->payload_len = json_dumpb(v, NULL, 0, JSON_COMPACT | JSON_ENCODE_ANY);
    if (atype) {
        ev->has_agg = 1;
        mic_store_akey(atype, atlen, aid, ailen, ev->akey);
    }
    if ((rc = digest_of(obj, ev->digest)))
        return mic_error_set(err, rc, "internal", NULL, "out of memory");

    /* The stored form. */
    memcpy(ev->topic, topic, tlen + 1);
    ev->topiclen = tlen;
    if (id) {
        memcpy(ev->id, id, idlen + 1);
        ev->idlen = idlen;
    } else {
        mic_event_uuid7(now_us, ev->id);
        ev->idlen = strlen(ev->id);
    }
    if (!(copy = json_copy(obj)))
        return mic_error_set(err, MIC_ENOMEM, "internal", NULL, "out of memory");
    mic_time_format(ev->created_at_us, tbuf);
    if (json_object_set_new(copy, "event_id", json_stringn(ev->id, ev->idlen)) ||
        json_object_set_new(copy, "created_at", json_string(tbuf)) ||
        (!json_object_get(copy, "schema_version") &&
         json_object_set_new(copy, "schema_version", json_integer(1))) ||
        (!json_object_get(copy, "priority") &&
         json_object_set_new(copy, "priority", json_integer(0))) ||
        !(ev->json = json_dumps(copy, JSON_COMPACT))) {
        json_decref(copy);
        return mic_error_set(err, MIC_ENOMEM, "internal", NULL, "out of memory");
    }
    json_decref(copy);
    ev->json_len = strlen(ev->json) - 1; /* drop the closing brace */
    return MIC_OK;
}

void mic_event_fini(struct mic_event *ev)
{
    free(ev->json);
    ev->json = NULL;
}
