/* publish.c - the publish path (DESIGN sections 2, 3 "Versions", 12).
 *
 * Handler thread (mic_publish_parse): JSON limits, each event's fields, and
 * the rules that need no store: a batch's size, an event_id repeated in the
 * batch (same digest: reported as a duplicate of the first; else 409), a
 * version repeated or a versioned/unversioned mix within one aggregate.
 *
 * Writer thread (apply): phase 1 reads only (event ids, topics, aggregate
 * records and versions) and may refuse the whole request; phase 2 writes.
 * So a refused request changes nothing, without nested transactions. */
#include "publish.h"

#include "core/key.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/err.h"
#include "event.h"
#include "eventlog.h"
#include "group.h"
#include "delivery.h"
#include "views.h"
#include "retention.h"

#include "core/jdoc.h"
#include "store/catalog.h"

#include <jansson.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOPIC_RETENTION_DEFAULT (7 * 86400)
#define TOPIC_PAYLOAD_DEFAULT (1024 * 1024)

struct item {
    struct mic_event ev;
    int dup_of;    /* earlier item with the same event_id, or -1 */
    int agg_prev;  /* earlier item of the same aggregate, or -1 */
    /* Set by the writer. */
    int duplicate;
    uint64_t seq;
    int64_t created_at_us;
    struct mic_agg_rec agg;  /* the aggregate after this event */
};

struct mic_publish {
    mic_op op; /* first: the writer hands it back */
    const struct mic_config *cfg;
    int n, batch;
    struct item *items;
    struct mic_error err;
    char *scratch;
    size_t scratch_cap;
    /* One-entry topic cache for the writer. */
    char topic[MIC_TOPIC_MAX + 1];
    struct mic_topic_rec topic_rec;
    int topic_known;
};

static const char *path_of(const mic_publish *p, int i, char *buf, size_t n,
                           const char *field)
{
    if (p->batch)
        snprintf(buf, n, "events[%d].%s", i, field);
    else
        snprintf(buf, n, "%s", field);
    return buf;
}

/* ---- In-batch rules (handler thread) ---- */

static uint64_t hash_bytes(const void *p, size_t n, uint64_t h)
{
    const uint8_t *b = p;

    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* Open-addressing table of item indexes (+1; 0 is empty). */
struct table {
    int *slot;
    size_t mask;
};

static int table_init(struct table *t, int n)
{
    size_t size = 16;

    while (size < (size_t)n * 2)
        size *= 2;
    t->mask = size - 1;
    return (t->slot = calloc(size, sizeof *t->slot)) ? 0 : -1;
}

static int batch_rules(mic_publish *p)
{
    struct table ids = {0}, aggs = {0}, vers = {0};
    char f[64];
    int rc = MIC_OK;

    if (p->n == 1) {
        p->items[0].dup_of = p->items[0].agg_prev = -1;
        return MIC_OK;
    }
    if (table_init(&ids, p->n) || table_init(&aggs, p->n) ||
        table_init(&vers, p->n)) {
        rc = mic_error_internal(&p->err, MIC_ENOMEM);
        goto out;
    }
    for (int i = 0; i < p->n && rc == MIC_OK; i++) {
        struct item *it = &p->items[i];
        struct mic_event *ev = &it->ev;
        size_t h;

        it->dup_of = it->agg_prev = -1;
        for (h = hash_bytes(ev->id, ev->idlen, 0xcbf29ce484222325ull) & ids.mask;
             ids.slot[h]; h = (h + 1) & ids.mask) {
            struct item *o = &p->items[ids.slot[h] - 1];
            if (o->ev.idlen == ev->idlen && !memcmp(o->ev.id, ev->id, ev->idlen))
                break;
        }
        if (ids.slot[h]) {
            struct item *o = &p->items[ids.slot[h] - 1];
            if (memcmp(o->ev.digest, ev->digest, MIC_DIGEST_LEN))
                rc = mic_error_set(&p->err, MIC_ECONFLICT, "event_id_conflict",
                                   path_of(p, i, f, sizeof f, "event_id"),
                                   "event_id %s appears twice in the batch with different content",
                                   ev->id);
            it->dup_of = ids.slot[h] - 1;
            continue;
        }
        ids.slot[h] = i + 1;
        if (!ev->has_agg)
            continue;
        for (h = hash_bytes(ev->akey, MIC_AKEY_LEN, 1) & aggs.mask;
             aggs.slot[h]; h = (h + 1) & aggs.mask)
            if (!memcmp(p->items[aggs.slot[h] - 1].ev.akey, ev->akey, MIC_AKEY_LEN))
                break;
        if (aggs.slot[h]) {
            struct item *o = &p->items[aggs.slot[h] - 1];
            it->agg_prev = aggs.slot[h] - 1;
            if (o->ev.has_version != ev->has_version) {
                rc = mic_error_set(&p->err, MIC_EINVAL, "invalid_event",
                                   path_of(p, i, f, sizeof f, "aggregate_version"),
                                   "an aggregate either always or never carries aggregate_version");
                continue;
            }
        }
        aggs.slot[h] = i + 1;
        if (!ev->has_version)
            continue;
        for (h = hash_bytes(&ev->version, 8, hash_bytes(ev->akey, MIC_AKEY_LEN, 2)) & vers.mask;
             vers.slot[h]; h = (h + 1) & vers.mask) {
            struct item *o = &p->items[vers.slot[h] - 1];
            if (o->ev.version == ev->version &&
                !memcmp(o->ev.akey, ev->akey, MIC_AKEY_LEN))
                break;
        }
        if (vers.slot[h])
            rc = mic_error_set(&p->err, MIC_ECONFLICT, "version_conflict",
                               path_of(p, i, f, sizeof f, "aggregate_version"),
                               "aggregate_version %llu appears twice in the batch",
                               (unsigned long long)ev->version);
        vers.slot[h] = i + 1;
    }
out:
    free(ids.slot);
    free(aggs.slot);
    free(vers.slot);
    return rc;
}

/* ---- Writer ---- */

/* Find 'name' (or its defaults if it does not exist yet, creating it when
 * 'create').  Returns MIC_OK, MIC_ENOTFOUND when topics are not
 * auto-created, or a store error. */
static int topic_resolve(mic_publish *p, struct mic_wctx *w,
                         const struct mic_event *ev, int create,
                         struct mic_topic_rec *tr)
{
    int rc;

    if (p->topic_known && strcmp(p->topic, ev->topic) == 0 &&
        (p->topic_rec.id || !create)) {
        *tr = p->topic_rec;
        return MIC_OK;
    }
    rc = mic_store_topic_get(w->txn, ev->topic, ev->topiclen, tr);
    if (rc == MIC_ENOTFOUND) {
        if (w->cfg->no_auto_topics)
            return MIC_ENOTFOUND;
        memset(tr, 0, sizeof *tr);
        tr->retention_s = TOPIC_RETENTION_DEFAULT;
        tr->dedupe_retain_s = TOPIC_RETENTION_DEFAULT;
        tr->max_payload_bytes = TOPIC_PAYLOAD_DEFAULT;
        if (create && ((rc = mic_store_next_topic_id(w->txn, &tr->id)) ||
                       (rc = mic_store_topic_put(w->txn, ev->topic,
                                                 ev->topiclen, tr)) ||
                       (w->groups && (rc = mic_groups_topic_named(w->groups, tr->id,
                                                                  ev->topic, ev->topiclen)))))
            return rc;
    } else if (rc) {
        return rc;
    }
    memcpy(p->topic, ev->topic, ev->topiclen + 1);
    p->topic_rec = *tr;
    p->topic_known = 1;
    return MIC_OK;
}

/* The aggregate as it stands before item i: the last earlier item of the
 * batch that is not a duplicate, else the store.  *exists = 0 if new. */
static int agg_before(mic_publish *p, struct mic_wctx *w, int i,
                      struct mic_agg_rec *a, int *exists)
{
    int j = p->items[i].agg_prev;
    int rc;

    while (j >= 0 && p->items[j].duplicate)
        j = p->items[j].agg_prev;
    if (j >= 0) {
        *a = p->items[j].agg;
        *exists = 1;
        return MIC_OK;
    }
    rc = mic_store_agg_get(w->txn, p->items[i].ev.akey, a);
    *exists = rc == MIC_OK;
    if (rc == MIC_ENOTFOUND) {
        memset(a, 0, sizeof *a);
        return MIC_OK;
    }
    return rc;
}

/* Phase 1, the event id: *seen = 1 if it was published before (item i
 * then a duplicate, or p->err filled when its content differs). */
static int check_id(mic_publish *p, struct mic_wctx *w, int i, int *seen)
{
    struct item *it = &p->items[i];
    struct mic_event *ev = &it->ev;
    uint8_t digest[MIC_DIGEST_LEN];
    struct mic_rec r;
    uint64_t seq;
    char f[64];
    int rc;

    rc = mic_store_id_get(w->txn, ev->id, ev->idlen, &seq, digest);
    *seen = rc == MIC_OK;
    if (rc == MIC_ENOTFOUND)
        return MIC_OK;
    if (rc)
        return rc;
    if (memcmp(digest, ev->digest, MIC_DIGEST_LEN)) {
        mic_error_set(&p->err, MIC_ECONFLICT, "event_id_conflict",
                      path_of(p, i, f, sizeof f, "event_id"),
                      "event_id %s was already published with other content",
                      ev->id);
        return MIC_OK;
    }
    it->duplicate = 1;
    it->seq = seq;
    rc = mic_store_log_get(w->txn, seq, &r);
    if (rc == MIC_OK)
        it->created_at_us = r.created_at_us;
    else if (rc == MIC_ENOTFOUND) /* removed by retention, id remembered */
        it->created_at_us = ev->created_at_us;
    else
        return rc;
    return MIC_OK;
}

/* Phase 1, the topic's rules: it exists (or is created on publish), the
 * payload fits, a version is there if required; else p->err filled. */
static int check_topic(mic_publish *p, struct mic_wctx *w, int i)
{
    struct mic_event *ev = &p->items[i].ev;
    struct mic_topic_rec tr;
    char f[64];
    int rc;

    rc = topic_resolve(p, w, ev, 0, &tr);
    if (rc == MIC_ENOTFOUND) {
        mic_error_set(&p->err, MIC_ENOTFOUND, "topic_not_found",
                      path_of(p, i, f, sizeof f, "topic"),
                      "topic %s does not exist (the server does not create topics on publish)",
                      ev->topic);
        return MIC_OK;
    }
    if (rc)
        return rc;
    if (ev->payload_len > tr.max_payload_bytes) {
        mic_error_set(&p->err, MIC_ETOOBIG, "payload_too_large",
                      path_of(p, i, f, sizeof f, "payload"),
                      "payload is %zu bytes, topic %s allows %llu", ev->payload_len,
                      ev->topic, (unsigned long long)tr.max_payload_bytes);
        return MIC_OK;
    }
    if (tr.require_versions && !ev->has_version) {
        mic_error_set(&p->err, MIC_EINVAL, "invalid_event",
                      path_of(p, i, f, sizeof f, "aggregate_version"),
                      "topic %s requires aggregate_version", ev->topic);
        return MIC_OK;
    }
    return MIC_OK;
}

/* Phase 1, item i's aggregate_version against aggregate 'a' (as it stands
 * before it; 'exists' 0 if new): not skipped, not below the baseline, not
 * taken (else p->err filled); a's baseline and max_version follow it. */
static int check_version(mic_publish *p, struct mic_wctx *w, int i, struct mic_agg_rec *a,
                         int exists)
{
    struct mic_event *ev = &p->items[i].ev;
    uint64_t seq;
    char f[64];
    int rc;

    if (exists && mic_store_gapskip_get(w->txn, ev->akey, ev->version) == MIC_OK) {
        mic_error_set(&p->err, MIC_ECONFLICT, "version_skipped",
                      path_of(p, i, f, sizeof f, "aggregate_version"),
                      "aggregate_version %llu was skipped by an admin and cannot arrive any more",
                      (unsigned long long)ev->version);
        return MIC_OK;
    }
    if (exists && ev->version < a->baseline) {
        mic_error_set(&p->err, MIC_ECONFLICT, "version_below_baseline",
                      path_of(p, i, f, sizeof f, "aggregate_version"),
                      "aggregate_version %llu is below the aggregate's first version %llu",
                      (unsigned long long)ev->version,
                      (unsigned long long)a->baseline);
        return MIC_OK;
    }
    rc = exists ? mic_store_aggidx_get_version(w->txn, ev->akey,
                                               ev->version, &seq)
                : MIC_ENOTFOUND;
    if (rc == MIC_OK) {
        mic_error_set(&p->err, MIC_ECONFLICT, "version_conflict",
                      path_of(p, i, f, sizeof f, "aggregate_version"),
                      "aggregate_version %llu is already taken by seq %llu",
                      (unsigned long long)ev->version,
                      (unsigned long long)seq);
        return MIC_OK;
    }
    if (rc != MIC_ENOTFOUND)
        return rc;
    if (!exists)
        a->baseline = ev->version;
    if (ev->version > a->max_version)
        a->max_version = ev->version;
    return MIC_OK;
}

/* Phase 1 for item i: reads only.  Returns MIC_OK (with p->err filled
 * when the request is refused) or a store error. */
static int check_item(mic_publish *p, struct mic_wctx *w, int i)
{
    struct item *it = &p->items[i];
    struct mic_event *ev = &it->ev;
    struct mic_agg_rec a;
    char f[64];
    int rc, exists, seen;

    if ((rc = check_id(p, w, i, &seen)) || seen)
        return rc;
    if ((rc = check_topic(p, w, i)) || p->err.err)
        return rc;
    if (!ev->has_agg)
        return MIC_OK;
    if ((rc = agg_before(p, w, i, &a, &exists)))
        return rc;
    if (exists && a.versioned != ev->has_version) {
        mic_error_set(&p->err, MIC_EINVAL, "invalid_event",
                      path_of(p, i, f, sizeof f, "aggregate_version"),
                      a.versioned ? "this aggregate carries versions: aggregate_version is required"
                                  : "this aggregate carries no versions: aggregate_version is not allowed");
        return MIC_OK;
    }
    if (!exists) {
        memcpy(a.type, ev->atype, ev->atlen);
        memcpy(a.id, ev->aid, ev->ailen);
        a.tlen = (uint16_t)ev->atlen;
        a.ilen = (uint16_t)ev->ailen;
    }
    if (ev->has_version && ((rc = check_version(p, w, i, &a, exists)) || p->err.err))
        return rc;
    a.versioned = ev->has_version;
    it->agg = a;
    return MIC_OK;
}

static int write_item(mic_publish *p, struct mic_wctx *w, struct item *it)
{
    struct mic_event *ev = &it->ev;
    struct mic_topic_rec tr;
    struct mic_rec r;
    size_t need = ev->json_len + 96;
    int rc, n;

    if ((rc = topic_resolve(p, w, ev, 1, &tr)))
        return rc == MIC_ENOTFOUND ? MIC_EIO : rc;
    if (need > p->scratch_cap) {
        char *s = realloc(p->scratch, need);
        if (!s)
            return MIC_ENOMEM;
        p->scratch = s;
        p->scratch_cap = need;
    }
    it->seq = w->next_seq++;
    it->created_at_us = ev->created_at_us;
    memcpy(p->scratch, ev->json, ev->json_len);
    memcpy(p->scratch + ev->json_len, ",\"seq\":", 7);
    n = 7 + (int)mic_fmt_u64(p->scratch + ev->json_len + 7, it->seq);
    memcpy(p->scratch + ev->json_len + n, ",\"received_at\":\"", 16);
    n += 16;
    n += mic_time_format(w->now_us, p->scratch + ev->json_len + n);
    memcpy(p->scratch + ev->json_len + n, "\"}", 2);
    memset(&r, 0, sizeof r);
    r.seq = it->seq;
    r.topic_id = tr.id;
    r.priority = ev->priority;
    r.has_agg = ev->has_agg;
    r.has_version = ev->has_version;
    r.created_at_us = ev->created_at_us;
    r.deliver_at_us = ev->deliver_at_us;
    r.received_at_us = w->now_us;
    r.version = ev->version;
    memcpy(r.akey, ev->akey, MIC_AKEY_LEN);
    r.json = p->scratch;
    r.json_len = ev->json_len + (size_t)n + 2;
    if ((rc = mic_eventlog_append(w->txn, &r, ev->id, ev->idlen, ev->digest)) ||
        (rc = mic_retention_stored(w, &r, &tr)))
        return rc;
    if (ev->has_agg && (rc = mic_eventlog_aggregate(w->txn, ev, &r)))
        return rc;
    if (w->groups && (rc = mic_delivery_fanout(w, ev->topic, ev->topiclen, &r)))
        return rc;
    if (w->groups && ev->has_version)
        return mic_delivery_version_stored(w, w->groups, ev->akey, NULL);
    return MIC_OK;
}

static int apply(mic_op *op, struct mic_wctx *w)
{
    mic_publish *p = (mic_publish *)op;
    int rc;

    p->err.err = MIC_OK;
    p->topic_known = 0;
    for (int i = 0; i < p->n; i++)
        p->items[i].duplicate = 0;
    for (int i = 0; i < p->n; i++) {
        if (p->items[i].dup_of >= 0)
            continue;
        if ((rc = check_item(p, w, i)))
            return rc;
        if (p->err.err)
            return MIC_OK; /* refused: nothing written */
    }
    for (int i = 0; i < p->n; i++) {
        struct item *it = &p->items[i];
        if (it->dup_of >= 0) {
            it->duplicate = 1;
            it->seq = p->items[it->dup_of].seq;
            it->created_at_us = p->items[it->dup_of].created_at_us;
        } else if (!it->duplicate && (rc = write_item(p, w, it))) {
            return rc;
        }
    }
    return MIC_OK;
}

/* ---- Handler side ---- */

/* 'body' failed to parse because a number is too big for an integer
 * (jansson: "too big integer"): if it is an event's aggregate_version,
 * that is the client's field error (422 on it, as for any version out of
 * range) rather than malformed JSON.  Read again with big integers as
 * reals, only to find the field: nothing of this parse is kept.  Returns
 * MIC_EINVAL with 'err' filled, or MIC_OK to keep the 400. */
static int version_too_big(const char *body, size_t len, struct mic_error *err)
{
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, NULL);
    json_t *events = root ? json_object_get(root, "events") : NULL;
    int rc = MIC_OK;

    for (size_t i = 0; root && i < (events ? json_array_size(events) : 1) && !rc; i++) {
        json_t *ev = events ? json_array_get(events, i) : root;
        json_t *v = json_object_get(ev, "aggregate_version");

        if (json_is_real(v) && (json_real_value(v) >= 9223372036854775807.0 ||
                                json_real_value(v) <= -9223372036854775808.0)) {
            char f[48];

            if (events)
                snprintf(f, sizeof f, "events[%zu].aggregate_version", i);
            else
                snprintf(f, sizeof f, "aggregate_version");
            rc = mic_error_set(err, MIC_EINVAL, "invalid_event", f,
                               "aggregate_version must be between 1 and %lld",
                               (long long)INT64_MAX);
        }
    }
    json_decref(root);
    return rc;
}

/* "events[i]." into 'out' (32 bytes): the field path of item i's errors
 * (without snprintf: it is written for every item of every batch). */
static void batch_path(char out[32], int i)
{
    char d[12];
    int n = 0, k = 0;

    do
        d[n++] = (char)('0' + i % 10);
    while ((i /= 10) && n < 11);
    memcpy(out, "events[", 7);
    k = 7;
    while (n)
        out[k++] = d[--n];
    memcpy(out + k, "].", 3);
}

int mic_publish_parse(const char *body, size_t len,
                      const struct mic_config *cfg, mic_publish **out,
                      struct mic_error *err)
{
    mic_publish *p = calloc(1, sizeof *p);
    mic_jdoc *d = NULL;
    mic_jv root, events = 0, ev;
    int64_t now = mic_now_us(), latest = mic_clock_latest_us();
    int rc;

    if (!p)
        return mic_error_internal(err, MIC_ENOMEM);
    p->cfg = cfg;
    p->op.apply = apply;
    /* yajl parses, jansson decides whatever yajl might decide otherwise
     * (jdoc.h); the document lives until the events are copied out. */
    if ((rc = mic_jdoc_parse(body, len, cfg->max_depth, &d, NULL, err))) {
        if (rc == MIC_EPARSE && strstr(err->message, "too big") && version_too_big(body, len, err))
            rc = MIC_EINVAL;
        goto fail;
    }
    root = mic_jdoc_root(d);
    if (mic_jdoc_type(d, root) != MIC_JOBJECT) {
        rc = mic_error_set(err, MIC_EINVAL, "invalid_event", NULL,
                           "the body must be an event object or {\"events\":[...]}");
        goto fail;
    }
    events = mic_jdoc_get(d, root, "events");
    if (events) {
        if (mic_jdoc_type(d, events) != MIC_JARRAY || mic_jdoc_size(d, root) != 1) {
            rc = mic_error_set(err, MIC_EINVAL, "invalid_event", "events",
                               "a batch is {\"events\":[...]} and nothing else");
            goto fail;
        }
        if (mic_jdoc_size(d, events) == 0) {
            rc = mic_error_set(err, MIC_EINVAL, "invalid_event", "events",
                               "a batch holds at least one event");
            goto fail;
        }
        if (mic_jdoc_size(d, events) > (size_t)cfg->max_batch) {
            rc = mic_error_set(err, MIC_ETOOBIG, "batch_too_large", "events",
                               "a batch holds at most %d events", cfg->max_batch);
            goto fail;
        }
        p->batch = 1;
        p->n = (int)mic_jdoc_size(d, events);
    } else {
        p->n = 1;
    }
    if (!(p->items = calloc((size_t)p->n, sizeof *p->items))) {
        rc = mic_error_internal(err, MIC_ENOMEM);
        goto fail;
    }
    ev = p->batch ? mic_jdoc_first(d, events) : root;
    for (int i = 0; i < p->n; i++, ev = mic_jdoc_next(d, ev)) {
        char path[32] = "";
        if (p->batch)
            batch_path(path, i);
        if ((rc = mic_event_parse_at(d, ev, now, latest, path, &p->items[i].ev, err)))
            goto fail;
    }
    mic_jdoc_fini(d);
    d = NULL;
    if ((rc = batch_rules(p))) {
        *err = p->err;
        goto fail;
    }
    *out = p;
    return MIC_OK;
fail:
    mic_jdoc_fini(d);
    mic_publish_free(p);
    return rc;
}

mic_op *mic_publish_op(mic_publish *p)
{
    return &p->op;
}

void mic_publish_tally(const mic_publish *p,
                       void (*fn)(const char *topic, int published, int duplicate,
                                  int conflict))
{
    if (p->err.err) {
        if (p->err.err == MIC_ECONFLICT && p->n > 0)
            fn(p->items[0].ev.topic, 0, 0, 1);
        return;
    }
    /* One call per run of events of one topic (a batch is mostly one),
     * not one per event: fn takes a lock. */
    for (int i = 0, pub = 0, dup = 0; i < p->n; i++) {
        pub += !p->items[i].duplicate;
        dup += p->items[i].duplicate;
        if (i + 1 == p->n || strcmp(p->items[i + 1].ev.topic, p->items[i].ev.topic)) {
            fn(p->items[i].ev.topic, pub, dup, 0);
            pub = dup = 0;
        }
    }
}

/* Does 'key' cover the topic of stored event 'json' (len bytes)? */
static int key_covers_event(const struct mic_key *key, const char *json, size_t len)
{
    json_t *o;
    int ok;

    if (!key || mic_key_covers_all(key))
        return 1;
    if (!(o = json_loadb(json, len, 0, NULL)))
        return 0;
    ok = json_is_string(json_object_get(o, "topic")) &&
         mic_key_covers_topic(key, json_string_value(json_object_get(o, "topic")));
    json_decref(o);
    return ok;
}

const char *mic_publish_topic(const mic_publish *p, int i)
{
    return p->items[i].ev.topic;
}

int mic_publish_lookup(mic_store *s, const char *id, size_t idlen, const struct mic_key *key,
                       struct mic_buf *out, struct mic_error *err)
{
    uint8_t digest[MIC_DIGEST_LEN];
    struct mic_rec r;
    mic_txn *t;
    uint64_t seq;
    int rc;

    if (!mic_event_id_ok(id, idlen))
        return mic_error_set(err, MIC_ENOTFOUND, "not_found", NULL,
                             "no event with that id");
    if ((rc = mic_txn_begin(s, 0, &t)))
        return mic_error_internal(err, rc);
    rc = mic_store_id_get(t, id, idlen, &seq, digest);
    if (rc == MIC_OK)
        rc = mic_store_log_get(t, seq, &r);
    if (rc == MIC_OK && !key_covers_event(key, r.json, r.json_len)) {
        mic_txn_abort(t);
        return mic_error_set(err, MIC_EFORBIDDEN, "forbidden", NULL,
                             "the key's scopes do not cover this event's topic");
    }
    if (rc == MIC_OK) {
        mic_buf_puts(out, "{\"event\":");
        mic_buf_add(out, r.json, r.json_len);
        mic_buf_puts(out, ",\"deliveries\":[");
        rc = mic_views_deliveries_json(t, seq, out);
        mic_buf_puts(out, "]}");
    }
    mic_txn_abort(t);
    if (rc == MIC_ENOTFOUND)
        return mic_error_set(err, rc, "not_found", NULL, "no event with id %.*s",
                             (int)idlen, id);
    if (rc)
        return mic_error_internal(err, rc);
    return MIC_OK;
}

int mic_publish_count(const mic_publish *p)
{
    return p->n;
}

int mic_publish_result(mic_publish *p, struct mic_buf *out,
                       int *all_duplicates, struct mic_error *err)
{
    if (p->err.err) {
        *err = p->err;
        return p->err.err;
    }
    *all_duplicates = 1;
    mic_buf_puts(out, "{\"results\":[");
    for (int i = 0; i < p->n; i++) {
        struct item *it = &p->items[i];
        if (i)
            mic_buf_add(out, ",", 1);
        mic_buf_puts(out, "{\"event_id\":");
        mic_buf_json_str(out, it->ev.id, it->ev.idlen);
        mic_buf_puts(out, ",\"seq\":");
        mic_buf_i64(out, (int64_t)it->seq);
        mic_buf_puts(out, ",\"created_at\":");
        mic_buf_json_time(out, it->created_at_us);
        mic_buf_puts(out, it->duplicate ? ",\"duplicate\":true}" : ",\"duplicate\":false}");
        if (!it->duplicate)
            *all_duplicates = 0;
    }
    mic_buf_puts(out, "]}");
    return MIC_OK;
}

void mic_publish_free(mic_publish *p)
{
    if (!p)
        return;
    for (int i = 0; p->items && i < p->n; i++)
        mic_event_fini(&p->items[i].ev);
    free(p->items);
    free(p->scratch);
    free(p);
}
