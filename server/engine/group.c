/* group.c - consumer groups (DESIGN sections 2, 4 and 12 "Resources").
 *
 * The configuration is stored as the resource's own JSON (what GET
 * answers) after the group record's header; the writer keeps a registry of
 * the live groups parsed from it.  The registry is writer-thread state: it
 * is changed only inside apply() and rebuilt from the store when a batch is
 * aborted (mic_groups_reload), so it always matches what is committed.
 *
 * Deliveries come from two places, both made by the delivery engine.
 * Fan-out: every event stored after a group exists gets a PENDING delivery
 * in each subscriber (mic_groups_subscribers: one cached topic lookup).
 * Backfill: a group created with start `all` or a time also covers the
 * events stored before it; this file walks the log in chunks of
 * BACKFILL_CHUNK records, one chunk per writer batch, so a large log never
 * stalls other requests, and hands each event to the caller's
 * mic_groups_work.add.  The registry keeps each backfill's position (the
 * group record's backfill_next and backfill_end), so that retention can
 * tell in one comparison whether the backfill has still to add an event
 * (mic_group_fills): such an event is kept until it is added.  Deleting a
 * group removes its record at once (its name is free again, its old tokens
 * answer not_found) and its keys in chunks of DROP_CHUNK
 * (mic_groups_work.drop_step).  The struct mic_group
 * is this file's: others read it through its accessors. */
#define _POSIX_C_SOURCE 200809L
#include "group.h"

#include "core/key.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/err.h"
#include "event.h"
#include "core/json.h"
#include "store/catalog.h"
#include "store/dlv.h"
#include "store/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BACKFILL_CHUNK 2000
#define DROP_CHUNK 4000
#define TOPICS_MAX 64
#define CACHE_SLOTS 64

/* The groups of one topic: the live subscribers [0, nlive), then the
 * replay groups whose run is over it [nlive, n). */
struct cache_slot {
    char topic[MIC_TOPIC_MAX + 1];
    uint64_t version;
    struct mic_group **groups;
    int nlive, n;
};

/* Topic names by id: open addressing, id 0 = free slot. */
struct topic_name {
    uint32_t id;
    char *name;
};

struct mic_group {
    char name[MIC_GROUP_NAME_MAX + 1];
    uint32_t gid;
    struct mic_group_cfg cfg;
    int backfilling;        /* older events still being added */
    uint64_t fill_next;     /* backfilling: the next log seq it looks at ... */
    uint64_t fill_end;      /* ... up to this one (the group record's) */
    int releasing;          /* ordered: backfill done, heads being released */
    uint64_t cursor;        /* releasing: ordinal of the last aggregate done */
    struct mic_group *next;
};

struct mic_groups {
    mic_store *store;
    struct mic_group *list;
    uint64_t version;       /* bumped on every change: invalidates 'cache' */
    struct cache_slot cache[CACHE_SLOTS];
    int backfilling, dropping;
    int selecting;          /* a replay run may still be selecting */
    struct topic_name *names; /* topic id -> name (retention) */
    size_t names_cap, names_n;
};

struct mic_group_op {
    mic_op op; /* first */
    int del, created;
    char name[MIC_GROUP_NAME_MAX + 1];
    size_t len;
    struct mic_group_cfg cfg;
    char *json;             /* the resource as stored */
    size_t json_len;
    struct mic_error err;
};

int mic_group_name_ok(const char *s, size_t len)
{
    return mic_event_topic_ok(s, len);
}

const char *mic_dlv_state_name(int state)
{
    switch (state) {
    case MIC_DLV_PENDING: return "pending";
    case MIC_DLV_PROCESSING: return "processing";
    case MIC_DLV_DISPATCHED: return "dispatched";
    case MIC_DLV_DLQ: return "dlq";
    case MIC_DLV_SKIPPED: return "skipped";
    }
    return "unknown";
}

/* ---- Configuration ---- */

static void cfg_fini(struct mic_group_cfg *c)
{
    for (int i = 0; i < c->ntopics; i++)
        free(c->topics[i]);
    free(c->topics);
    free(c->replay_run);
    free(c->replay_fields);
    free(c->sink_url);
    free(c->sink_stream);
    free(c->sink_subject);
    c->topics = NULL;
    c->ntopics = 0;
    c->replay_run = c->replay_fields = NULL;
    c->sink_url = c->sink_stream = c->sink_subject = NULL;
}

void mic_group_cfg_fini(struct mic_group_cfg *c)
{
    cfg_fini(c);
}

static int topic_pattern_ok(const char *s, size_t n)
{
    if (n >= 1 && s[n - 1] == '*')
        return n == 1 || mic_event_topic_ok(s, n - 1);
    return mic_event_topic_ok(s, n);
}

static int pattern_match(const char *pat, const char *topic, size_t tlen)
{
    size_t pl = strlen(pat);

    if (pl && pat[pl - 1] == '*')
        return tlen >= pl - 1 && memcmp(pat, topic, pl - 1) == 0;
    return pl == tlen && memcmp(pat, topic, tlen) == 0;
}

static int cfg_subscribes(const struct mic_group_cfg *c, const char *topic,
                          size_t tlen)
{
    for (int i = 0; i < c->ntopics; i++)
        if (pattern_match(c->topics[i], topic, tlen))
            return 1;
    return 0;
}

#define BADREQ(field, ...) \
    mic_error_set(err, MIC_EINVAL, "invalid_request", field, __VA_ARGS__)

static int get_uint(json_t *o, const char *k, uint64_t lo, uint64_t hi,
                    uint64_t *out, const char *field, struct mic_error *err)
{
    json_t *v = json_object_get(o, k);

    if (!v)
        return MIC_OK;
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        (uint64_t)json_integer_value(v) < lo || (uint64_t)json_integer_value(v) > hi)
        return BADREQ(field, "%s must be an integer from %llu to %llu", field,
                      (unsigned long long)lo, (unsigned long long)hi);
    *out = (uint64_t)json_integer_value(v);
    return MIC_OK;
}

/* ---- NATS sink ----
 * "sink":{"type":"nats","url":URL,"stream":S,"subject":TEMPLATE}: the url
 * is one nats://HOST:PORT or a comma-separated list of them (a cluster);
 * the stream [A-Za-z0-9_-]{1,64}; the subject's dot-separated tokens are
 * each a literal of printable ASCII other than '*', '>' and space, or one
 * of the four placeholders, never empty; at most 255 bytes. */

static int sink_url_ok(const char *s)
{
    int n_urls = 0; /* the relay takes at most 16 (server/relay/sink.c) */

    while (*s) {
        if (++n_urls > 16)
            return 0;
        const char *e = strchr(s, ','), *host, *colon;
        size_t n = e ? (size_t)(e - s) : strlen(s), hl;
        char *end;
        long port;

        if (n < 8 || strncmp(s, "nats://", 7))
            return 0;
        host = s + 7;
        colon = memchr(host, ':', n - 7);
        if (!colon || colon == host)
            return 0;
        hl = (size_t)(colon - host);
        for (size_t i = 0; i < hl; i++)
            if (!(host[i] >= 'a' && host[i] <= 'z') && !(host[i] >= 'A' && host[i] <= 'Z') &&
                !(host[i] >= '0' && host[i] <= '9') && !strchr(".-_", host[i]))
                return 0;
        if (colon[1] < '0' || colon[1] > '9')
            return 0;
        port = strtol(colon + 1, &end, 10);
        if (end != s + n || port < 1 || port > 65535)
            return 0;
        if (!e)
            return 1;
        s = e + 1;
    }
    return 0;
}

static int sink_stream_ok(const char *s, size_t n)
{
    if (n < 1 || n > 64)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!(s[i] >= 'a' && s[i] <= 'z') && !(s[i] >= 'A' && s[i] <= 'Z') &&
            !(s[i] >= '0' && s[i] <= '9') && s[i] != '_' && s[i] != '-')
            return 0;
    return 1;
}

static int sink_subject_ok(const char *s, size_t n)
{
    static const char *const ph[] = {"{topic}", "{event_type}", "{aggregate_type}",
                                     "{aggregate_id}", NULL};
    size_t i = 0;

    if (n < 1 || n > 255)
        return 0;
    while (i <= n) {
        size_t j = i;
        int ok = 0;
        while (j < n && s[j] != '.')
            j++;
        if (j == i)
            return 0; /* empty token */
        for (int k = 0; ph[k] && !ok; k++)
            ok = strlen(ph[k]) == j - i && !memcmp(ph[k], s + i, j - i);
        for (size_t k = i; k < j && !ok; k++)
            if (s[k] <= ' ' || s[k] > '~' || strchr("*>{}", s[k]))
                return 0;
        i = j + 1;
    }
    return 1;
}

static int sink_parse(json_t *v, struct mic_group_cfg *c, struct mic_error *err)
{
    json_t *t, *u, *st, *sub;
    const char *k;
    json_t *x;

    if (!json_is_object(v))
        return BADREQ("sink", "sink is {\"type\":\"nats\",\"url\",\"stream\",\"subject\"}");
    json_object_foreach(v, k, x)
        if (strcmp(k, "type") && strcmp(k, "url") && strcmp(k, "stream") && strcmp(k, "subject"))
            return BADREQ("sink", "unknown sink field '%.64s'", k);
    t = json_object_get(v, "type");
    u = json_object_get(v, "url");
    st = json_object_get(v, "stream");
    sub = json_object_get(v, "subject");
    if (!json_is_string(t) || strcmp(json_string_value(t), "nats"))
        return BADREQ("sink.type", "sink.type must be \"nats\"");
    if (!json_is_string(u) || json_string_length(u) > 1000 ||
        strlen(json_string_value(u)) != json_string_length(u) || !sink_url_ok(json_string_value(u)))
        return BADREQ("sink.url", "sink.url is nats://HOST:PORT, or a comma-separated list of at "
                      "most 16 of them (1,000 bytes in all)");
    if (!json_is_string(st) || !sink_stream_ok(json_string_value(st), json_string_length(st)))
        return BADREQ("sink.stream", "sink.stream is 1 to 64 of A-Z a-z 0-9 _ -");
    if (!json_is_string(sub) || !sink_subject_ok(json_string_value(sub), json_string_length(sub)))
        return BADREQ("sink.subject", "sink.subject is a NATS subject of at most 255 bytes whose "
                      "dot-separated tokens are literals (no * > { } or spaces) or one of {topic}, "
                      "{event_type}, {aggregate_type}, {aggregate_id}");
    if (!(c->sink_url = strdup(json_string_value(u))) ||
        !(c->sink_stream = strdup(json_string_value(st))) ||
        !(c->sink_subject = strdup(json_string_value(sub))))
        return mic_error_internal(err, MIC_ENOMEM);
    return MIC_OK;
}

static int str_same(const char *a, const char *b)
{
    return a == b || (a && b && !strcmp(a, b));
}

static int cfg_same_sink(const struct mic_group_cfg *a, const struct mic_group_cfg *b)
{
    return str_same(a->sink_url, b->sink_url) && str_same(a->sink_stream, b->sink_stream) &&
           str_same(a->sink_subject, b->sink_subject);
}

/* topics: 1 to TOPICS_MAX names or prefixes ending in *, copied into c->topics. */
static int cfg_topics(json_t *o, struct mic_group_cfg *c, struct mic_error *err)
{
    json_t *v = json_object_get(o, "topics");

    if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > TOPICS_MAX)
        return BADREQ("topics", "topics is a list of 1 to %d topic names or prefixes ending in *",
                      TOPICS_MAX);
    if (!(c->topics = calloc(json_array_size(v), sizeof *c->topics)))
        return mic_error_internal(err, MIC_ENOMEM);
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *t = json_array_get(v, i);
        char f[32];
        snprintf(f, sizeof f, "topics[%zu]", i);
        if (!json_is_string(t) || !topic_pattern_ok(json_string_value(t), json_string_length(t)))
            return BADREQ(f, "a topic name, or a prefix ending in *");
        if (!(c->topics[c->ntopics++] = strdup(json_string_value(t))))
            return mic_error_internal(err, MIC_ENOMEM);
    }
    return MIC_OK;
}

/* The three choices: kind, ordered and dlq_policy. */
static int cfg_modes(json_t *o, struct mic_group_cfg *c, struct mic_error *err)
{
    json_t *v;
    int rc;

    if ((rc = mic_json_either(o, "kind", "projection", "effect", &c->effect,
                              "kind is projection or effect", err)))
        return rc;
    if ((v = json_object_get(o, "ordered"))) {
        if (!json_is_boolean(v))
            return BADREQ("ordered", "ordered is true or false");
        c->ordered = json_is_true(v);
    }
    return mic_json_either(o, "dlq_policy", "release", "hold", &c->dlq_hold,
                           "dlq_policy is release or hold", err);
}

/* max_attempts, lease_ttl_s and backoff {initial_ms, max_ms, multiplier}. */
static int cfg_retries(json_t *o, struct mic_group_cfg *c, struct mic_error *err)
{
    json_t *b, *m, *v;
    const char *k;
    uint64_t n;
    int rc;

    n = c->max_attempts;
    if ((rc = get_uint(o, "max_attempts", 1, 1000, &n, "max_attempts", err)))
        return rc;
    c->max_attempts = (uint32_t)n;
    n = c->lease_ttl_s;
    if ((rc = get_uint(o, "lease_ttl_s", 1, 43200, &n, "lease_ttl_s", err)))
        return rc;
    c->lease_ttl_s = (uint32_t)n;
    if (!(b = json_object_get(o, "backoff")))
        return MIC_OK;
    if (!json_is_object(b))
        return BADREQ("backoff", "backoff is {\"initial_ms\",\"max_ms\",\"multiplier\"}");
    json_object_foreach(b, k, v)
        if (strcmp(k, "initial_ms") && strcmp(k, "max_ms") && strcmp(k, "multiplier"))
            return BADREQ("backoff", "unknown backoff field '%.64s'", k);
    if ((rc = get_uint(b, "initial_ms", 0, 86400000, &c->backoff_initial_ms,
                       "backoff.initial_ms", err)) ||
        (rc = get_uint(b, "max_ms", 0, 86400000, &c->backoff_max_ms,
                       "backoff.max_ms", err)))
        return rc;
    if ((m = json_object_get(b, "multiplier"))) {
        if (!json_is_number(m) || json_number_value(m) < 1 || json_number_value(m) > 100)
            return BADREQ("backoff.multiplier", "multiplier is a number from 1 to 100");
        c->backoff_multiplier = json_number_value(m);
    }
    if (c->backoff_max_ms < c->backoff_initial_ms)
        return BADREQ("backoff.max_ms", "max_ms must be at least initial_ms");
    return MIC_OK;
}

/* start: all, new or an RFC 3339 time, into c->start (and c->start_us). */
static int cfg_start(json_t *o, struct mic_group_cfg *c, struct mic_error *err)
{
    json_t *v = json_object_get(o, "start");
    const char *s;

    if (!v)
        return MIC_OK;
    s = json_is_string(v) ? json_string_value(v) : "";
    if (!strcmp(s, "all"))
        c->start = MIC_START_ALL;
    else if (!strcmp(s, "new"))
        c->start = MIC_START_NEW;
    else if (json_is_string(v) &&
             mic_time_parse(s, json_string_length(v), &c->start_us) == MIC_OK)
        c->start = MIC_START_TIME;
    else
        return BADREQ("start", "start is all, new, or an RFC 3339 time");
    return MIC_OK;
}

/* A replay run's group: replay_run, and the members of "replay" as text. */
static int cfg_replay(json_t *o, struct mic_group_cfg *c, struct mic_error *err)
{
    json_t *v = json_object_get(o, "replay_run"), *r;
    char *txt;

    if (!v || !json_is_string(v))
        return MIC_OK;
    r = json_object_get(o, "replay");
    txt = r ? json_dumps(r, JSON_COMPACT) : NULL;
    c->replay_run = strdup(json_string_value(v));
    if (txt && strlen(txt) >= 2) {
        txt[strlen(txt) - 1] = 0; /* drop the braces: members only */
        c->replay_fields = strdup(txt + 1);
    }
    free(txt);
    if (!c->replay_run)
        return mic_error_internal(err, MIC_ENOMEM);
    return MIC_OK;
}

/* Parse a group's JSON (a PUT body or the stored resource) into 'c'. */
static int cfg_parse(json_t *o, const char *name, struct mic_group_cfg *c,
                     struct mic_error *err)
{
    static const char *const known[] = {
        "name", "topics", "kind", "ordered", "max_attempts", "backoff",
        "lease_ttl_s", "start", "alert_oldest_unhandled_s", "dlq_policy",
        "replay_run", "replay", "sink", NULL};
    json_t *v;
    uint64_t n;
    int rc;

    memset(c, 0, sizeof *c);
    c->max_attempts = MIC_GROUP_MAX_ATTEMPTS;
    c->backoff_initial_ms = MIC_GROUP_BACKOFF_INITIAL_MS;
    c->backoff_max_ms = MIC_GROUP_BACKOFF_MAX_MS;
    c->backoff_multiplier = MIC_GROUP_BACKOFF_MULTIPLIER;
    c->lease_ttl_s = MIC_GROUP_LEASE_TTL_S;
    c->alert_s = -1;
    if (!json_is_object(o))
        return BADREQ(NULL, "the body must be a JSON object");
    if ((rc = mic_json_keys_known(o, known, err)))
        return rc;
    if ((v = json_object_get(o, "name")) &&
        (!json_is_string(v) || strcmp(json_string_value(v), name)))
        return BADREQ("name", "name must equal the group in the path");
    if ((rc = cfg_topics(o, c, err)) || (rc = cfg_modes(o, c, err)) ||
        (rc = cfg_retries(o, c, err)) || (rc = cfg_start(o, c, err)) ||
        (rc = cfg_replay(o, c, err)))
        return rc;
    if ((v = json_object_get(o, "alert_oldest_unhandled_s")) && !json_is_null(v)) {
        n = 0;
        if ((rc = get_uint(o, "alert_oldest_unhandled_s", 1, 100ull * 365 * 86400, &n,
                           "alert_oldest_unhandled_s", err)))
            return rc;
        c->alert_s = (int64_t)n;
    }
    if ((v = json_object_get(o, "sink")))
        return sink_parse(v, c, err);
    return MIC_OK;
}

/* Parse a stored configuration (written by cfg_render). */
static int cfg_from_json(const char *json, size_t len, const char *name,
                         struct mic_group_cfg *c)
{
    json_t *j = json_loadb(json, len, 0, NULL);
    struct mic_error e;
    int rc;

    if (!j)
        return MIC_EIO;
    rc = cfg_parse(j, name, c, &e);
    json_decref(j);
    if (rc)
        cfg_fini(c);
    return rc ? MIC_EIO : MIC_OK;
}

static void cfg_render(struct mic_buf *b, const char *name, size_t len,
                       const struct mic_group_cfg *c)
{
    mic_buf_puts(b, "{\"name\":");
    mic_buf_json_str(b, name, len);
    mic_buf_puts(b, ",\"topics\":[");
    for (int i = 0; i < c->ntopics; i++) {
        if (i)
            mic_buf_add(b, ",", 1);
        mic_buf_json_str(b, c->topics[i], strlen(c->topics[i]));
    }
    mic_buf_printf(b, "],\"kind\":\"%s\",\"ordered\":%s,\"max_attempts\":%u,"
                      "\"backoff\":{\"initial_ms\":%llu,\"max_ms\":%llu,\"multiplier\":%g},"
                      "\"lease_ttl_s\":%u,\"start\":",
                   c->effect ? "effect" : "projection", c->ordered ? "true" : "false",
                   c->max_attempts, (unsigned long long)c->backoff_initial_ms,
                   (unsigned long long)c->backoff_max_ms, c->backoff_multiplier,
                   c->lease_ttl_s);
    if (c->start == MIC_START_TIME)
        mic_buf_json_time(b, c->start_us);
    else
        mic_buf_puts(b, c->start == MIC_START_NEW ? "\"new\"" : "\"all\"");
    if (c->alert_s >= 0)
        mic_buf_printf(b, ",\"alert_oldest_unhandled_s\":%lld", (long long)c->alert_s);
    else
        mic_buf_puts(b, ",\"alert_oldest_unhandled_s\":null");
    mic_buf_printf(b, ",\"dlq_policy\":\"%s\"", c->dlq_hold ? "hold" : "release");
    if (c->sink_url) {
        mic_buf_puts(b, ",\"sink\":{\"type\":\"nats\",\"url\":");
        mic_buf_json_str(b, c->sink_url, strlen(c->sink_url));
        mic_buf_puts(b, ",\"stream\":");
        mic_buf_json_str(b, c->sink_stream, strlen(c->sink_stream));
        mic_buf_puts(b, ",\"subject\":");
        mic_buf_json_str(b, c->sink_subject, strlen(c->sink_subject));
        mic_buf_add(b, "}", 1);
    }
    mic_buf_add(b, "}", 1);
}

int mic_group_cfg_parse(const char *json, size_t len, const char *name,
                        struct mic_group_cfg *c)
{
    return cfg_from_json(json, len, name, c);
}

static int cfg_same_topics(const struct mic_group_cfg *a, const struct mic_group_cfg *b)
{
    if (a->ntopics != b->ntopics)
        return 0;
    for (int i = 0; i < a->ntopics; i++)
        if (strcmp(a->topics[i], b->topics[i]))
            return 0;
    return 1;
}

/* ---- Topic names by id ----
 *
 * Retention knows an event's topic by id only.  The writer keeps the name
 * of every topic it knows by id: loaded with the registry (at start and
 * after an aborted batch), told of each topic created (publish, PUT), and
 * checked at each use against the topics index (ids are never reused, a
 * name may be): a miss or a stale entry reloads the map from the
 * transaction, so the map is a cache that is never wrong. */

static void names_clear(mic_groups *g)
{
    for (size_t i = 0; i < g->names_cap; i++)
        free(g->names[i].name);
    free(g->names);
    g->names = NULL;
    g->names_cap = g->names_n = 0;
}

static size_t name_slot(const mic_groups *g, uint32_t id)
{
    size_t i = (id * 2654435761u) & (g->names_cap - 1);

    while (g->names[i].id && g->names[i].id != id)
        i = (i + 1) & (g->names_cap - 1);
    return i;
}

int mic_groups_topic_named(mic_groups *g, uint32_t id, const char *name, size_t len)
{
    size_t i;
    char *copy;

    if (!id || len > MIC_TOPIC_MAX)
        return MIC_EINVAL;
    if ((g->names_n + 1) * 2 > g->names_cap) {
        struct topic_name *old = g->names;
        size_t cap = g->names_cap ? g->names_cap * 2 : 64, ocap = g->names_cap;

        if (!(g->names = calloc(cap, sizeof *g->names))) {
            g->names = old;
            return MIC_ENOMEM;
        }
        g->names_cap = cap;
        for (size_t j = 0; j < ocap; j++)
            if (old[j].id)
                g->names[name_slot(g, old[j].id)] = old[j];
        free(old);
    }
    if (!(copy = malloc(len + 1)))
        return MIC_ENOMEM;
    memcpy(copy, name, len);
    copy[len] = 0;
    i = name_slot(g, id);
    if (g->names[i].id)
        free(g->names[i].name);
    else
        g->names_n++;
    g->names[i].id = id;
    g->names[i].name = copy;
    return MIC_OK;
}

static int name_load(void *arg, const char *name, size_t len, const struct mic_topic_rec *tr)
{
    return mic_groups_topic_named(arg, tr->id, name, len);
}

/* Rebuild the map from the topics index of 't'. */
static int names_load(mic_groups *g, mic_txn *t)
{
    names_clear(g);
    return mic_store_topic_each(t, name_load, g);
}

/* The cached name of topic 'id' if the topics index of 't' agrees. */
static int name_check(mic_groups *g, mic_txn *t, uint32_t id, char *name,
                      struct mic_topic_rec *tr)
{
    size_t i, len;
    int rc;

    if (!g->names_cap || !g->names[i = name_slot(g, id)].id)
        return MIC_ENOTFOUND;
    len = strlen(g->names[i].name);
    rc = mic_store_topic_get(t, g->names[i].name, len, tr);
    if (rc == MIC_OK && tr->id != id)
        rc = MIC_ENOTFOUND;
    if (rc == MIC_OK)
        memcpy(name, g->names[i].name, len + 1);
    return rc;
}

int mic_groups_topic_find(mic_groups *g, mic_txn *t, uint32_t id, char *name,
                          struct mic_topic_rec *tr)
{
    int rc = name_check(g, t, id, name, tr);

    if (rc != MIC_ENOTFOUND)
        return rc;
    if ((rc = names_load(g, t)))
        return rc;
    return name_check(g, t, id, name, tr);
}

/* ---- The registry ---- */

static void group_free(struct mic_group *gr)
{
    cfg_fini(&gr->cfg);
    free(gr);
}

static void clear(mic_groups *g)
{
    while (g->list) {
        struct mic_group *n = g->list->next;
        group_free(g->list);
        g->list = n;
    }
    for (int i = 0; i < CACHE_SLOTS; i++) {
        free(g->cache[i].groups);
        memset(&g->cache[i], 0, sizeof g->cache[i]);
    }
    g->backfilling = g->dropping = g->selecting = 0;
    g->version++;
    names_clear(g);
}

static int load_one(void *arg, const char *name, size_t len,
                    const struct mic_group_rec *rec)
{
    mic_groups *g = arg;
    struct mic_group *gr = calloc(1, sizeof *gr);

    if (!gr || len > MIC_GROUP_NAME_MAX)
        goto fail;
    memcpy(gr->name, name, len);
    gr->gid = rec->gid;
    if (cfg_from_json(rec->config, rec->config_len, gr->name, &gr->cfg))
        goto fail;
    gr->backfilling = rec->backfilling == 1;
    gr->releasing = rec->backfilling == 2;
    gr->fill_next = rec->backfill_next;
    gr->fill_end = rec->backfill_end;
    g->backfilling |= rec->backfilling != 0;
    /* A replay run's group still backfilling: its selection is not all in. */
    g->selecting |= gr->cfg.replay_run && rec->backfilling == 1;
    gr->next = g->list;
    g->list = gr;
    return 0;
fail:
    if (gr)
        group_free(gr);
    return MIC_EIO;
}

void mic_groups_reload(mic_groups *g, mic_txn *t)
{
    uint32_t gid;

    clear(g);
    mic_store_group_each(t, load_one, g);
    g->dropping = mic_store_drop_first(t, &gid) == MIC_OK;
    if (names_load(g, t))
        names_clear(g); /* out of memory: filled again at the next use */
}

int mic_groups_new(mic_groups **out, mic_store *s)
{
    mic_groups *g = calloc(1, sizeof *g);
    mic_txn *t;
    int rc;

    if (!g)
        return MIC_ENOMEM;
    g->store = s;
    if ((rc = mic_txn_begin(s, 0, &t))) {
        free(g);
        return rc;
    }
    mic_groups_reload(g, t);
    mic_txn_abort(t);
    *out = g;
    return MIC_OK;
}

void mic_groups_free(mic_groups *g)
{
    if (!g)
        return;
    clear(g);
    free(g);
}

struct mic_group *mic_groups_find(mic_groups *g, const char *name, size_t len)
{
    for (struct mic_group *gr = g->list; gr; gr = gr->next)
        if (strlen(gr->name) == len && !memcmp(gr->name, name, len))
            return gr;
    return NULL;
}

struct mic_group *mic_groups_first(mic_groups *g)
{
    return g->list;
}

struct mic_group *mic_groups_by_gid(mic_groups *g, uint32_t gid)
{
    for (struct mic_group *gr = g->list; gr; gr = gr->next)
        if (gr->gid == gid)
            return gr;
    return NULL;
}

int mic_groups_busy(mic_groups *g)
{
    return g->backfilling || g->dropping || g->selecting;
}

int mic_groups_selecting(mic_groups *g)
{
    return g->selecting;
}

void mic_groups_selecting_done(mic_groups *g)
{
    g->selecting = 0;
}

/* The groups of 'topic' (see struct cache_slot), through a small
 * direct-mapped cache.  NULL when out of memory. */
static struct cache_slot *subscribers(mic_groups *g, const char *topic, size_t tlen)
{
    uint64_t h = 1469598103934665603ull;
    struct cache_slot *c;
    int n = 0;

    for (size_t i = 0; i < tlen; i++)
        h = (h ^ (uint8_t)topic[i]) * 1099511628211ull;
    c = &g->cache[h % CACHE_SLOTS];
    if (c->version == g->version && strlen(c->topic) == tlen &&
        !memcmp(c->topic, topic, tlen))
        return c;
    free(c->groups);
    c->groups = NULL;
    c->nlive = c->n = 0;
    c->version = 0;
    for (struct mic_group *gr = g->list; gr; gr = gr->next)
        n += cfg_subscribes(&gr->cfg, topic, tlen);
    if (n && !(c->groups = malloc((size_t)n * sizeof *c->groups)))
        return NULL;
    for (int replay = 0; replay < 2; replay++) {
        for (struct mic_group *gr = g->list; gr; gr = gr->next)
            if (!gr->cfg.replay_run == !replay && cfg_subscribes(&gr->cfg, topic, tlen))
                c->groups[c->n++] = gr;
        if (!replay)
            c->nlive = c->n;
    }
    memcpy(c->topic, topic, tlen);
    c->topic[tlen] = 0;
    c->version = g->version;
    return c;
}

/* The cached groups of 'topic': the live ones, or with the replay groups. */
static int topic_groups(mic_groups *g, const char *topic, size_t tlen, int replays,
                        struct mic_group *const **out, int *n)
{
    struct cache_slot *c;

    *out = NULL;
    *n = 0;
    if (!g->list)
        return MIC_OK;
    if (!(c = subscribers(g, topic, tlen)))
        return MIC_ENOMEM;
    *out = c->groups;
    *n = replays ? c->n : c->nlive;
    return MIC_OK;
}

int mic_groups_subscribers(mic_groups *g, const char *topic, size_t tlen,
                           struct mic_group *const **out, int *n)
{
    return topic_groups(g, topic, tlen, 0, out, n);
}

int mic_group_takes(const struct mic_group *gr, const struct mic_rec *r)
{
    return gr->cfg.start != MIC_START_TIME || r->created_at_us >= gr->cfg.start_us;
}

struct mic_group *mic_groups_next(const struct mic_group *gr)
{
    return gr->next;
}

uint32_t mic_group_id(const struct mic_group *gr)
{
    return gr->gid;
}

const char *mic_group_name(const struct mic_group *gr)
{
    return gr->name;
}

const struct mic_group_cfg *mic_group_config(const struct mic_group *gr)
{
    return &gr->cfg;
}

int mic_group_backfilling(const struct mic_group *gr)
{
    return gr->backfilling;
}

int mic_group_fills(const struct mic_group *gr, const struct mic_rec *r)
{
    /* A replay run's group walks its run's selection instead
     * (mic_replay_holds). */
    return gr->backfilling && !gr->cfg.replay_run && r->seq >= gr->fill_next &&
           r->seq <= gr->fill_end && mic_group_takes(gr, r);
}

int mic_group_held(const struct mic_group *gr)
{
    return gr->cfg.replay_run && (gr->backfilling || gr->releasing);
}

int mic_groups_holders(mic_groups *g, const char *topic, size_t tlen,
                       struct mic_group *const **out, int *n)
{
    return topic_groups(g, topic, tlen, 1, out, n);
}

/* ---- Background work ---- */

struct backfill {
    struct mic_wctx *w;
    const struct mic_groups_work *work;
    struct mic_group *gr;
    uint32_t *ids;   /* topic ids the group subscribes to */
    int nids, cap, rc;
};

static int collect_topic(void *arg, const char *name, size_t len,
                         const struct mic_topic_rec *tr)
{
    struct backfill *b = arg;

    if (!cfg_subscribes(&b->gr->cfg, name, len))
        return 0;
    if (b->nids == b->cap) {
        int cap = b->cap ? b->cap * 2 : 16;
        uint32_t *p = realloc(b->ids, (size_t)cap * sizeof *p);
        if (!p)
            return MIC_ENOMEM;
        b->ids = p;
        b->cap = cap;
    }
    b->ids[b->nids++] = tr->id;
    return 0;
}

static int backfill_one(void *arg, const struct mic_rec *r)
{
    struct backfill *b = arg;
    int hit = 0;

    for (int i = 0; i < b->nids && !hit; i++)
        hit = b->ids[i] == r->topic_id;
    if (!hit || !mic_group_takes(b->gr, r))
        return 0;
    return (b->rc = b->work->add(b->w, b->gr, r)) != MIC_OK;
}

static int backfill_step(mic_groups *g, struct mic_wctx *w, const struct mic_groups_work *work)
{
    for (struct mic_group *gr = g->list; gr; gr = gr->next) {
        struct mic_group_rec rec;
        struct backfill b = {w, work, gr, NULL, 0, 0, MIC_OK};
        uint64_t next;
        int rc;

        if (!gr->backfilling || gr->cfg.replay_run)
            continue;
        if ((rc = mic_store_group_get(w->txn, gr->name, strlen(gr->name), &rec)))
            return rc;
        if ((rc = mic_store_topic_each(w->txn, collect_topic, &b)) ||
            (rc = mic_store_log_scan(w->txn, rec.backfill_next, rec.backfill_end,
                                     BACKFILL_CHUNK, backfill_one, &b, &next)) ||
            (rc = b.rc)) {
            free(b.ids);
            return rc;
        }
        free(b.ids);
        {
            /* The record is borrowed from LMDB: copy the config first. */
            struct mic_group_rec upd = rec;
            char *cfg = malloc(rec.config_len ? rec.config_len : 1);
            if (!cfg)
                return MIC_ENOMEM;
            memcpy(cfg, rec.config, rec.config_len);
            upd.config = cfg;
            upd.backfill_next = next;
            upd.backfilling = next <= rec.backfill_end ? 1 : gr->cfg.ordered ? 2 : 0;
            rc = mic_store_group_put(w->txn, gr->name, strlen(gr->name), &upd);
            free(cfg);
            if (rc)
                return rc;
            gr->backfilling = upd.backfilling == 1;
            gr->releasing = upd.backfilling == 2;
            gr->fill_next = next;
            gr->cursor = 0;
            g->backfilling = 1; /* look again next batch */
        }
        return MIC_OK; /* one chunk per batch */
    }
    return MIC_OK;
}

/* Set the group record's backfill state to 'state'. */
static int set_backfill_state(struct mic_wctx *w, struct mic_group *gr, uint8_t state)
{
    struct mic_group_rec rec, upd;
    char *cfg;
    int rc;

    if ((rc = mic_store_group_get(w->txn, gr->name, strlen(gr->name), &rec)))
        return rc;
    if (!(cfg = malloc(rec.config_len ? rec.config_len : 1)))
        return MIC_ENOMEM;
    memcpy(cfg, rec.config, rec.config_len);
    upd = rec;
    upd.config = cfg;
    upd.backfilling = state;
    rc = mic_store_group_put(w->txn, gr->name, strlen(gr->name), &upd);
    free(cfg);
    return rc;
}

/* An ordered group's backfill is complete: pick the heads of its waiting
 * aggregates, RELEASE_CHUNK per batch (idempotent: redone from the start
 * after a restart). */
static int release_step(mic_groups *g, struct mic_wctx *w, const struct mic_groups_work *work)
{
    enum { RELEASE_CHUNK = 2000 };
    for (struct mic_group *gr = g->list; gr; gr = gr->next) {
        int rc, done;

        if (!gr->releasing)
            continue;
        if ((rc = work->release_heads(w, gr, RELEASE_CHUNK, &gr->cursor, &done)))
            return rc;
        if (done) {
            if ((rc = set_backfill_state(w, gr, 0)))
                return rc;
            gr->releasing = 0;
            if (gr->cfg.replay_run) /* held until now (mic_group_held) */
                mic_wctx_wake(w, gr->gid);
        }
        g->backfilling = 1;
        return MIC_OK; /* one chunk per batch */
    }
    return MIC_OK;
}

int mic_groups_background(mic_groups *g, struct mic_wctx *w, const struct mic_groups_work *work)
{
    uint32_t gid;
    int rc, finished;

    if (g->backfilling) {
        g->backfilling = 0;
        if ((rc = backfill_step(g, w, work)) || (rc = release_step(g, w, work)))
            return rc;
    }
    if (!g->dropping)
        return MIC_OK;
    rc = mic_store_drop_first(w->txn, &gid);
    if (rc == MIC_ENOTFOUND) {
        g->dropping = 0;
        return MIC_OK;
    }
    if (rc || (rc = work->drop_step(w, gid, DROP_CHUNK, &finished)))
        return rc;
    if (finished)
        g->dropping = mic_store_drop_first(w->txn, &gid) == MIC_OK;
    return MIC_OK;
}

/* ---- PUT and DELETE ---- */

static int apply(mic_op *op, struct mic_wctx *w)
{
    mic_group_op *o = (mic_group_op *)op;
    mic_groups *g = w->groups;
    struct mic_group *old = mic_groups_find(g, o->name, o->len);
    struct mic_group_rec rec;
    struct mic_group *gr;
    int rc;

    o->err.err = MIC_OK;
    o->created = 0;
    if (o->del) {
        if (!old) {
            mic_error_set(&o->err, MIC_ENOTFOUND, "not_found", NULL, "no group %s", o->name);
            return MIC_OK;
        }
        if (old->cfg.replay_run) {
            mic_error_set(&o->err, MIC_EINVAL, "invalid_request", NULL,
                          "a replay run's group goes with DELETE /v1/replays/%s",
                          old->cfg.replay_run);
            return MIC_OK;
        }
        return mic_groups_delete(g, w, old);
    }
    if (old) {
        if (!cfg_same_topics(&old->cfg, &o->cfg) || old->cfg.ordered != o->cfg.ordered ||
            old->cfg.start != o->cfg.start ||
            (o->cfg.start == MIC_START_TIME && old->cfg.start_us != o->cfg.start_us) ||
            !cfg_same_sink(&old->cfg, &o->cfg)) {
            mic_error_set(&o->err, MIC_ECONFLICT, "immutable_field",
                          !cfg_same_topics(&old->cfg, &o->cfg) ? "topics"
                          : old->cfg.ordered != o->cfg.ordered ? "ordered"
                          : !cfg_same_sink(&old->cfg, &o->cfg) ? "sink" : "start",
                          "topics, ordered, start and sink are fixed when a group is created");
            return MIC_OK;
        }
        if ((rc = mic_store_group_get(w->txn, o->name, o->len, &rec)))
            return rc;
        rec.config = o->json;
        rec.config_len = o->json_len;
        if ((rc = mic_store_group_put(w->txn, o->name, o->len, &rec)))
            return rc;
        /* Apply the new settings from now on. */
        cfg_fini(&old->cfg);
        if ((rc = cfg_from_json(o->json, o->json_len, o->name, &old->cfg)))
            return rc;
        g->version++;
        return MIC_OK;
    }
    if ((rc = mic_groups_create(g, w, o->name, o->json, o->json_len, 0, &gr)))
        return rc;
    o->created = 1;
    return MIC_OK;
}

/* Set *empty when none of the topics 'gr' subscribes to holds an event
 * (the backfill would walk the whole log for nothing).  Returns MIC_OK or
 * a store error. */
static int topics_empty(struct mic_wctx *w, struct mic_group *gr, int *empty)
{
    struct backfill b = {w, NULL, gr, NULL, 0, 0, MIC_OK};
    uint64_t n = 0, sum = 0;
    int rc = mic_store_topic_each(w->txn, collect_topic, &b);

    for (int i = 0; !rc && i < b.nids && !sum; i++)
        if (!(rc = mic_store_topic_events(w->txn, b.ids[i], &n)))
            sum += n;
    free(b.ids);
    *empty = sum == 0;
    return rc;
}

int mic_groups_create(mic_groups *g, struct mic_wctx *w, const char *name,
                      const char *json, size_t len, int selecting,
                      struct mic_group **out)
{
    struct mic_group_rec rec;
    struct mic_group *gr;
    size_t nlen = strlen(name);
    int rc;

    if (mic_groups_find(g, name, nlen))
        return MIC_ECONFLICT;
    memset(&rec, 0, sizeof rec);
    if ((rc = mic_store_next_group_id(w->txn, &rec.gid)))
        return rc;
    if (!(gr = calloc(1, sizeof *gr)))
        return MIC_ENOMEM;
    memcpy(gr->name, name, nlen);
    if ((rc = cfg_from_json(json, len, gr->name, &gr->cfg))) {
        group_free(gr);
        return rc;
    }
    rec.backfill_end = w->next_seq - 1;
    rec.backfill_next = 1;
    rec.backfilling = selecting || (gr->cfg.start != MIC_START_NEW && rec.backfill_end >= 1);
    g->selecting |= selecting;
    if (rec.backfilling && !selecting) {
        int empty;
        if ((rc = topics_empty(w, gr, &empty))) {
            group_free(gr);
            return rc;
        }
        if (empty)
            rec.backfilling = 0; /* nothing stored in its topics: no log walk */
    }
    rec.config = json;
    rec.config_len = len;
    if ((rc = mic_store_group_put(w->txn, name, nlen, &rec))) {
        group_free(gr);
        return rc;
    }
    gr->gid = rec.gid;
    gr->backfilling = rec.backfilling;
    gr->fill_next = rec.backfill_next;
    gr->fill_end = rec.backfill_end;
    gr->next = g->list;
    g->list = gr;
    g->version++;
    g->backfilling |= rec.backfilling && !selecting;
    *out = gr;
    return MIC_OK;
}

int mic_groups_selected(mic_groups *g, struct mic_wctx *w, struct mic_group *gr)
{
    int rc = set_backfill_state(w, gr, gr->cfg.ordered ? 2 : 0);

    if (rc)
        return rc;
    gr->backfilling = 0;
    gr->releasing = gr->cfg.ordered;
    gr->cursor = 0;
    g->backfilling |= gr->releasing;
    return MIC_OK;
}

int mic_groups_delete(mic_groups *g, struct mic_wctx *w, struct mic_group *gr)
{
    struct mic_group **pp;
    int rc;

    if ((rc = mic_store_group_del(w->txn, gr->name, strlen(gr->name))) ||
        (rc = mic_store_drop_put(w->txn, gr->gid)))
        return rc;
    mic_wctx_wake(w, gr->gid);
    for (pp = &g->list; *pp != gr; pp = &(*pp)->next)
        ;
    *pp = gr->next;
    group_free(gr);
    g->version++;
    g->dropping = 1;
    return MIC_OK;
}

static int new_op(const char *name, mic_group_op **out, struct mic_error *err)
{
    mic_group_op *o;

    if (!mic_group_name_ok(name, strlen(name)))
        return mic_error_set(err, MIC_ENOTFOUND, "not_found", NULL,
                             "group names match [A-Za-z0-9._:-]{1,200}");
    if (!(o = calloc(1, sizeof *o)))
        return mic_error_internal(err, MIC_ENOMEM);
    o->op.apply = apply;
    o->len = strlen(name);
    memcpy(o->name, name, o->len + 1);
    *out = o;
    return MIC_OK;
}

int mic_group_put_parse(const char *name, const char *body, size_t len,
                        const struct mic_config *cfg, mic_group_op **out,
                        struct mic_error *err)
{
    mic_group_op *o;
    struct mic_buf b;
    json_t *j = NULL;
    int rc;

    if ((rc = new_op(name, &o, err)))
        return rc;
    if ((rc = mic_json_load(body, len, cfg->max_depth, &j, err)) ||
        (rc = cfg_parse(j, name, &o->cfg, err)))
        goto fail;
    if (json_object_get(j, "replay_run") || json_object_get(j, "replay") ||
        strncmp(name, "replay.", 7) == 0) {
        rc = BADREQ("replay_run", "replay groups are made by POST /v1/replays");
        goto fail;
    }
    json_decref(j);
    mic_buf_init(&b);
    cfg_render(&b, o->name, o->len, &o->cfg);
    if (b.oom) {
        mic_buf_fini(&b);
        mic_group_op_free(o);
        return mic_error_internal(err, MIC_ENOMEM);
    }
    o->json = mic_buf_steal(&b, &o->json_len);
    *out = o;
    return MIC_OK;
fail:
    json_decref(j);
    mic_group_op_free(o);
    return rc;
}

int mic_group_del_parse(const char *name, mic_group_op **out,
                        struct mic_error *err)
{
    int rc = new_op(name, out, err);

    if (rc == MIC_OK)
        (*out)->del = 1;
    return rc;
}

mic_op *mic_group_op_base(mic_group_op *o)
{
    return &o->op;
}

int mic_group_op_result(mic_group_op *o, struct mic_buf *out, int *created,
                        struct mic_error *err)
{
    if (o->err.err) {
        *err = o->err;
        return o->err.err;
    }
    *created = o->created;
    if (!o->del)
        mic_buf_add(out, o->json, o->json_len);
    return MIC_OK;
}

void mic_group_op_free(mic_group_op *o)
{
    if (!o)
        return;
    cfg_fini(&o->cfg);
    free(o->json);
    free(o);
}

/* ---- Reads ---- */

int mic_group_gid(mic_txn *t, const char *name, uint32_t *gid)
{
    struct mic_group_rec rec;
    int rc = mic_store_group_get(t, name, strlen(name), &rec);

    if (rc == MIC_OK)
        *gid = rec.gid;
    return rc;
}

int mic_group_read_begin(mic_store *s, const char *name, mic_txn **t,
                         struct mic_error *err)
{
    int rc;

    if (!mic_group_name_ok(name, strlen(name)))
        return mic_error_set(err, MIC_ENOTFOUND, "not_found", NULL, "no group %s", name);
    if ((rc = mic_txn_begin(s, 0, t)))
        return mic_error_internal(err, rc);
    return MIC_OK;
}

int mic_group_read_end(mic_txn *t, int rc, const char *name, struct mic_error *err)
{
    mic_txn_abort(t);
    if (rc == MIC_ENOTFOUND)
        return mic_error_set(err, rc, "not_found", NULL, "no group %s", name);
    if (rc)
        return mic_error_internal(err, rc);
    return MIC_OK;
}

static void (*sink_status_fn)(void *, const char *, size_t, struct mic_buf *);
static void *sink_status_arg;

void mic_group_on_sink_status(void (*fn)(void *arg, const char *name, size_t len,
                                         struct mic_buf *out),
                              void *arg)
{
    sink_status_arg = arg;
    sink_status_fn = fn;
}

/* A group's stored resource, with "sink_status" for a sink group (its
 * stored config renders "sink" last, and the sequence below cannot occur
 * inside a JSON string, where quotes are escaped). */
static void resource(struct mic_buf *b, const char *name, size_t len,
                     const char *config, size_t clen)
{
    static const char tag[] = ",\"sink\":{\"type\":";
    int sink = 0;

    for (size_t i = 0; !sink && i + sizeof tag - 1 <= clen; i++)
        sink = config[i] == ',' && !memcmp(config + i, tag, sizeof tag - 1);
    if (!sink || clen < 2 || config[clen - 1] != '}') {
        mic_buf_add(b, config, clen);
        return;
    }
    mic_buf_add(b, config, clen - 1);
    mic_buf_puts(b, ",\"sink_status\":");
    if (sink_status_fn)
        sink_status_fn(sink_status_arg, name, len, b);
    else
        mic_buf_puts(b, "{\"connected\":false,\"in_flight\":0,\"last_error\":\"no relay\"}");
    mic_buf_add(b, "}", 1);
}

int mic_group_get(mic_store *s, const char *name, struct mic_buf *out,
                  struct mic_error *err)
{
    struct mic_group_rec rec;
    mic_txn *t;
    int rc;

    if ((rc = mic_group_read_begin(s, name, &t, err)))
        return rc;
    rc = mic_store_group_get(t, name, strlen(name), &rec);
    if (rc == MIC_OK)
        resource(out, name, strlen(name), rec.config, rec.config_len);
    return mic_group_read_end(t, rc, name, err);
}

struct list_arg {
    struct mic_buf *b;
    const struct mic_key *key;
};

static int list_one(void *arg, const char *name, size_t len,
                    const struct mic_group_rec *rec)
{
    struct list_arg *a = arg;
    struct mic_buf *b = a->b;

    if (!mic_key_lists(a->key, 1, name, len))
        return 0;
    if (b->len && b->p[b->len - 1] != '[')
        mic_buf_add(b, ",", 1);
    resource(b, name, len, rec->config, rec->config_len);
    return 0;
}

int mic_group_list(mic_store *s, const struct mic_key *key, struct mic_buf *out,
                   struct mic_error *err)
{
    struct list_arg a = {out, key};
    mic_txn *t;
    int rc;

    if ((rc = mic_txn_begin(s, 0, &t)))
        return mic_error_internal(err, rc);
    mic_buf_puts(out, "{\"groups\":[");
    rc = mic_store_group_each(t, list_one, &a);
    mic_txn_abort(t);
    if (rc)
        return mic_error_internal(err, rc);
    mic_buf_puts(out, "]}");
    return MIC_OK;
}
