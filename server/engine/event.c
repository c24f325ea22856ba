/* event.c - validation of one published event (DESIGN sections 2 and 12).
 *
 * The content digest is SHA-256 over the object exactly as the client sent
 * it, serialised compactly with keys sorted at every level: defaults that
 * the server fills in are not part of it, a default the client wrote out
 * is.  The stored form is the same canonical text with created_at
 * normalised to UTC microseconds and event_id, schema_version and priority
 * filled in; the writer completes it with seq and received_at.  A
 * deliver_at is part of the digest as sent and is stored normalised like
 * created_at, in its sorted place. */
#include "event.h"
#include "core/jdoc.h"

#include "core/buf.h"
#include "core/clock.h"
#include "core/digest.h"
#include "core/err.h"
#include "store/log.h"

#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STR_MAX 256
#define HEADERS_MAX 32
#define HEADER_KEY_MAX 64
#define HEADER_VAL_MAX 1024
#define FUTURE_MAX_US (300 * 1000000LL)
#define DELIVER_AT_MAX_US (365 * 86400 * 1000000LL)

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

int mic_event_stored_id(const char *json, size_t len, const char **id, size_t *idlen)
{
    static const char head[] = "{\"event_id\":\"";
    const char *q;

    if (len < sizeof head - 1 || memcmp(json, head, sizeof head - 1))
        return -1;
    json += sizeof head - 1;
    len -= sizeof head - 1;
    if (!(q = memchr(json, '"', len)) || !mic_event_id_ok(json, (size_t)(q - json)))
        return -1;
    *id = json;
    *idlen = (size_t)(q - json);
    return 0;
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

/* The known top-level fields, in the order of 'known' below. */
enum field { F_EVENT_ID, F_TOPIC, F_AGGREGATE_TYPE, F_AGGREGATE_ID, F_AGGREGATE_VERSION,
             F_SCHEMA_VERSION, F_EVENT_TYPE, F_CORRELATION_ID, F_PRIORITY, F_CREATED_AT,
             F_DELIVER_AT, F_HEADERS, F_PAYLOAD, NFIELDS };

/* Each field's name and length (in enum field's order). */
#define FIELD(name) {name, sizeof name - 1}
static const struct {
    const char *name;
    unsigned char len;
} known[NFIELDS] = {
    FIELD("event_id"), FIELD("topic"), FIELD("aggregate_type"), FIELD("aggregate_id"),
    FIELD("aggregate_version"), FIELD("schema_version"), FIELD("event_type"),
    FIELD("correlation_id"), FIELD("priority"), FIELD("created_at"), FIELD("deliver_at"),
    FIELD("headers"), FIELD("payload"),
};
#undef FIELD

struct ctx {
    const mic_jdoc *d;
    const char *path;
    struct mic_error *err;
    char field[128];
    mic_jv at[NFIELDS]; /* each known field's member, 0 when absent */
};

static const char *fname(struct ctx *c, const char *name)
{
    snprintf(c->field, sizeof c->field, "%s%s", c->path, name);
    return c->field;
}

/* A string field of 1..max bytes; *out stays NULL when absent. */
static int get_str(struct ctx *c, enum field f, size_t max, const char **out, size_t *len)
{
    struct mic_error *err = c->err;
    const char *name = known[f].name;
    mic_jv v = c->at[f];

    *out = NULL;
    *len = 0;
    if (!v)
        return MIC_OK;
    if (mic_jdoc_type(c->d, v) != MIC_JSTRING)
        return BAD(fname(c, name), "%s must be a string", name);
    *out = mic_jdoc_str(c->d, v, len);
    if (*len == 0 || *len > max) {
        *out = NULL;
        return BAD(fname(c, name), "%s must be 1 to %zu bytes long", name, max);
    }
    if (strlen(*out) != *len)
        return BAD(fname(c, name), "%s must not contain NUL", name);
    return MIC_OK;
}

/* An integer field within [lo, hi]; returns 1 in *present when there. */
static int get_int(struct ctx *c, enum field f, int64_t lo, int64_t hi, int64_t *out,
                   int *present)
{
    struct mic_error *err = c->err;
    const char *name = known[f].name;
    mic_jv v = c->at[f];

    *present = v != 0;
    if (!v)
        return MIC_OK;
    if (mic_jdoc_type(c->d, v) != MIC_JINTEGER)
        return BAD(fname(c, name), "%s must be an integer", name);
    *out = mic_jdoc_int(c->d, v);
    if (*out < lo || *out > hi)
        return BAD(fname(c, name), "%s must be between %lld and %lld", name,
                   (long long)lo, (long long)hi);
    return MIC_OK;
}

static int check_headers(struct ctx *c, mic_jv h)
{
    struct mic_error *err = c->err;

    if (mic_jdoc_type(c->d, h) != MIC_JOBJECT)
        return BAD(fname(c, "headers"), "headers must be an object of strings");
    if (mic_jdoc_size(c->d, h) > HEADERS_MAX)
        return BAD(fname(c, "headers"), "at most %d headers", HEADERS_MAX);
    for (mic_jv v = mic_jdoc_first(c->d, h); v; v = mic_jdoc_next(c->d, v)) {
        size_t klen, vlen;
        const char *k = mic_jdoc_key(c->d, v, &klen);
        int bad = !name_ok(k, klen, HEADER_KEY_MAX, 0) ? 1
                  : !mic_jdoc_str(c->d, v, &vlen)       ? 2
                  : vlen > HEADER_VAL_MAX               ? 3 : 0;
        char f[96];

        if (!bad)
            continue;
        /* The field's name is written only for the error. */
        snprintf(f, sizeof f, "headers.%.64s", k);
        if (bad == 1)
            return BAD(fname(c, f), "header names are [A-Za-z0-9._-]{1,64}");
        if (bad == 2)
            return BAD(fname(c, f), "header values must be strings");
        return BAD(fname(c, f), "header values are at most %d bytes", HEADER_VAL_MAX);
    }
    return MIC_OK;
}

/* Which known field 'k' names, or NFIELDS. */
static enum field field_of(const char *k, size_t n)
{
    for (int f = 0; f < NFIELDS; f++)
        if (known[f].len == n && known[f].name[0] == k[0] && !memcmp(known[f].name, k, n))
            return (enum field)f;
    return NFIELDS;
}

/* One pass over the members: each one is a known field (the first that is
 * not is the error), found again through c->at. */
static int check_known(struct ctx *c, mic_jv obj)
{
    struct mic_error *err = c->err;

    for (mic_jv v = mic_jdoc_first(c->d, obj); v; v = mic_jdoc_next(c->d, v)) {
        size_t klen;
        const char *k = mic_jdoc_key(c->d, v, &klen);
        enum field f = field_of(k, klen);
        if (f != NFIELDS) {
            c->at[f] = v;
        } else {
            char name[80];
            snprintf(name, sizeof name, "%.64s", k);
            return BAD(fname(c, name), "unknown field '%.64s'", k);
        }
    }
    return MIC_OK;
}

/* ---- Canonical form ----
 *
 * The top-level values are dumped once each (as jansson's compact dump with
 * keys sorted at every level writes them: mic_jdoc_canonical) in key order.  The concatenation {"k":v,...} is the
 * canonical text whose SHA-256 is the digest; the stored event reuses the
 * same bytes, minus created_at (normalised) plus the server's defaults. */

struct piece {
    enum field f;
    mic_jv value;
    size_t off, len; /* the value's bytes in the canonical text */
};

/* '"key":' of a known field (plain ASCII: nothing to escape). */
static void put_key(struct mic_buf *b, enum field f)
{
    size_t n = known[f].len;

    if (mic_buf_room(b, n + 3))
        return;
    b->p[b->len++] = '"';
    memcpy(b->p + b->len, known[f].name, n);
    b->len += n;
    b->p[b->len++] = '"';
    b->p[b->len++] = ':';
    b->p[b->len] = 0;
}

static int canonical(const struct ctx *c, mic_jv obj, struct mic_buf *canon,
                     struct piece *pieces, size_t *npieces)
{
    const mic_jdoc *d = c->d;
    size_t n = 0;

    mic_buf_add(canon, "{", 1);
    /* In key order (at most the known keys: checked before). */
    for (mic_jv v = mic_jdoc_sfirst(d, obj); v; v = mic_jdoc_snext(d, v), n++) {
        size_t slen;
        const char *str;
        int f = 0;
        if (n)
            mic_buf_add(canon, ",", 1);
        while (c->at[f] != v) /* check_known found every member's field */
            f++;
        pieces[n].f = (enum field)f;
        put_key(canon, pieces[n].f);
        pieces[n].value = v;
        pieces[n].off = canon->len;
        /* Scalars are written here; containers as jansson dumps them. */
        if ((str = mic_jdoc_str(d, v, &slen)))
            mic_buf_json_str(canon, str, slen);
        else if (mic_jdoc_type(d, v) == MIC_JINTEGER)
            mic_buf_i64(canon, mic_jdoc_int(d, v));
        else if (mic_jdoc_canonical(d, v, canon))
            return MIC_ENOMEM;
        pieces[n].len = canon->len - pieces[n].off;
    }
    mic_buf_add(canon, "}", 1);
    *npieces = n;
    return canon->oom ? MIC_ENOMEM : MIC_OK;
}

/* The stored form: every piece but created_at (deliver_at normalised),
 * then the server's fields; no closing brace (the writer appends seq and
 * received_at). */
static int stored_form(const struct ctx *c, struct mic_event *ev, const struct mic_buf *canon,
                       const struct piece *pieces, size_t n)
{
    struct mic_buf b;
    char t[MIC_TIME_LEN + 3];
    size_t len;

    mic_buf_init(&b);
    /* The canonical text, the id and the defaults: one allocation. */
    mic_buf_room(&b, canon->len + ev->idlen + 128);
    mic_buf_puts(&b, "{\"event_id\":");
    mic_buf_json_str(&b, ev->id, ev->idlen);
    for (size_t i = 0; i < n; i++) {
        if (pieces[i].f == F_CREATED_AT || pieces[i].f == F_EVENT_ID)
            continue;
        mic_buf_add(&b, ",", 1);
        put_key(&b, pieces[i].f);
        if (pieces[i].f == F_DELIVER_AT) {
            mic_time_format(ev->deliver_at_us, t);
            mic_buf_add(&b, "\"", 1);
            mic_buf_add(&b, t, MIC_TIME_LEN);
            mic_buf_add(&b, "\"", 1);
            continue;
        }
        mic_buf_add(&b, canon->p + pieces[i].off, pieces[i].len);
        if (pieces[i].f == F_PAYLOAD)
            ev->payload_len = pieces[i].len;
    }
    mic_buf_puts(&b, ",\"created_at\":");
    mic_time_format(ev->created_at_us, t);
    mic_buf_add(&b, "\"", 1);
    mic_buf_add(&b, t, MIC_TIME_LEN);
    mic_buf_add(&b, "\"", 1);
    if (!c->at[F_SCHEMA_VERSION])
        mic_buf_puts(&b, ",\"schema_version\":1");
    if (!c->at[F_PRIORITY])
        mic_buf_puts(&b, ",\"priority\":0");
    if (b.oom) {
        mic_buf_fini(&b);
        return MIC_ENOMEM;
    }
    ev->json = mic_buf_steal(&b, &len);
    ev->json_len = len;
    return MIC_OK;
}

/* ---- The event ---- */

int mic_event_parse(const mic_jdoc *d, mic_jv obj, int64_t now_us, const char *path,
                    struct mic_event *ev, struct mic_error *err)
{
    return mic_event_parse_at(d, obj, now_us, now_us, path, ev, err);
}

int mic_event_parse_at(const mic_jdoc *d, mic_jv obj, int64_t now_us, int64_t latest_us,
                       const char *path, struct mic_event *ev, struct mic_error *err)
{
    struct ctx c = {d, path, err, "", {0}};
    const char *id, *topic, *atype, *aid, *s;
    size_t idlen, tlen, atlen, ailen, slen;
    int64_t n;
    mic_jv v;
    struct piece pieces[16];
    struct mic_buf canon;
    size_t npieces;
    int present, rc;

    memset(ev, 0, sizeof *ev);
    if (mic_jdoc_type(d, obj) != MIC_JOBJECT)
        return BAD(path[0] ? fname(&c, "") : NULL, "an event must be a JSON object");
    if ((rc = check_known(&c, obj)) ||
        (rc = get_str(&c, F_EVENT_ID, MIC_EVENT_ID_MAX, &id, &idlen)) ||
        (rc = get_str(&c, F_TOPIC, MIC_TOPIC_MAX, &topic, &tlen)) ||
        (rc = get_str(&c, F_AGGREGATE_TYPE, STR_MAX, &atype, &atlen)) ||
        (rc = get_str(&c, F_AGGREGATE_ID, STR_MAX, &aid, &ailen)) ||
        (rc = get_str(&c, F_EVENT_TYPE, STR_MAX, &s, &slen)) ||
        (rc = get_str(&c, F_CORRELATION_ID, STR_MAX, &s, &slen)))
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
    if ((rc = get_int(&c, F_AGGREGATE_VERSION, 1, INT64_MAX, &n, &present)))
        return rc;
    if (present) {
        if (!atype)
            return BAD(fname(&c, "aggregate_version"),
                       "aggregate_version needs aggregate_type and aggregate_id");
        ev->has_version = 1;
        ev->version = (uint64_t)n;
    }
    if ((rc = get_int(&c, F_SCHEMA_VERSION, 1, INT32_MAX, &n, &present)))
        return rc;
    if ((rc = get_int(&c, F_PRIORITY, 0, 255, &n, &present)))
        return rc;
    ev->priority = present ? (uint8_t)n : 0;
    ev->created_at_us = now_us;
    if ((v = c.at[F_CREATED_AT])) {
        if (!(s = mic_jdoc_str(d, v, &slen)) || mic_time_parse(s, slen, &ev->created_at_us))
            return BAD(fname(&c, "created_at"),
                       "created_at must be an RFC 3339 time with at most 6 fractional digits");
        if (ev->created_at_us > (latest_us > now_us ? latest_us : now_us) + FUTURE_MAX_US)
            return BAD(fname(&c, "created_at"),
                       "created_at is more than 300 s in the future");
    }
    if ((v = c.at[F_DELIVER_AT])) {
        if (!(s = mic_jdoc_str(d, v, &slen)) || mic_time_parse(s, slen, &ev->deliver_at_us))
            return BAD(fname(&c, "deliver_at"),
                       "deliver_at must be an RFC 3339 time with at most 6 fractional digits");
        if (ev->deliver_at_us > now_us + DELIVER_AT_MAX_US)
            return BAD(fname(&c, "deliver_at"),
                       "deliver_at is more than 365 days ahead");
    }
    if ((v = c.at[F_HEADERS]) && (rc = check_headers(&c, v)))
        return rc;
    if (atype) {
        ev->has_agg = 1;
        mic_store_akey(atype, atlen, aid, ailen, ev->akey);
        memcpy(ev->atype, atype, atlen);
        memcpy(ev->aid, aid, ailen);
        ev->atlen = atlen;
        ev->ailen = ailen;
    }
    memcpy(ev->topic, topic, tlen + 1);
    ev->topiclen = tlen;
    if (id) {
        memcpy(ev->id, id, idlen + 1);
        ev->idlen = idlen;
    } else {
        mic_event_uuid7(now_us, ev->id);
        ev->idlen = strlen(ev->id);
    }
    mic_buf_init(&canon);
    mic_buf_room(&canon, 1024); /* most events: one allocation */
    if ((rc = canonical(&c, obj, &canon, pieces, &npieces)) == MIC_OK)
        rc = stored_form(&c, ev, &canon, pieces, npieces);
    if (rc == MIC_OK)
        mic_sha256(canon.p, canon.len, ev->digest);
    mic_buf_fini(&canon);
    if (rc)
        return mic_error_internal(err, MIC_ENOMEM);
    return MIC_OK;
}

void mic_event_fini(struct mic_event *ev)
{
    free(ev->json);
    ev->json = NULL;
}
