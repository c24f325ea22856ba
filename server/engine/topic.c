/* topic.c - topic configuration (DESIGN sections 2 and 12 "Resources").
 *
 * A PUT replaces the configuration (absent fields take their defaults) and
 * answers 201 when it created the topic, 200 when it updated it.  A topic
 * that still holds events cannot be deleted (409 topic_not_empty). */
#include "topic.h"

#include "core/key.h"
#include "core/buf.h"
#include "core/config.h"
#include "core/err.h"
#include "event.h"
#include "group.h"
#include "core/json.h"
#include "store/catalog.h"
#include "store/log.h"

#include <stdlib.h>
#include <string.h>

#define DAY 86400ull
#define RETENTION_MAX (100 * 365 * DAY)
#define PAYLOAD_MAX (16ull * 1024 * 1024)

struct mic_topic_op {
    mic_op op; /* first */
    int del, created;
    char name[MIC_TOPIC_MAX + 1];
    size_t len;
    struct mic_topic_rec rec;
    struct mic_error err;
};

static void render(struct mic_buf *b, const char *name, size_t len,
                   const struct mic_topic_rec *tr)
{
    mic_buf_puts(b, "{\"name\":");
    mic_buf_json_str(b, name, len);
    mic_buf_printf(b,
                   ",\"retention_s\":%llu,\"max_payload_bytes\":%llu,"
                   "\"require_versions\":%s,\"dedupe_retain_s\":%llu}",
                   (unsigned long long)tr->retention_s,
                   (unsigned long long)tr->max_payload_bytes,
                   tr->require_versions ? "true" : "false",
                   (unsigned long long)tr->dedupe_retain_s);
}

static int name_check(const char *name, struct mic_error *err)
{
    if (!mic_event_topic_ok(name, strlen(name)))
        return mic_error_set(err, MIC_ENOTFOUND, "not_found", "topic",
                             "topic names match [A-Za-z0-9._:-]{1,200}");
    return MIC_OK;
}

/* ---- Writer ---- */

static int apply(mic_op *op, struct mic_wctx *w)
{
    mic_topic_op *t = (mic_topic_op *)op;
    struct mic_topic_rec old;
    int rc;

    t->err.err = MIC_OK;
    t->created = 0;
    rc = mic_store_topic_get(w->txn, t->name, t->len, &old);
    if (rc && rc != MIC_ENOTFOUND)
        return rc;
    if (t->del) {
        if (rc == MIC_ENOTFOUND) {
            mic_error_set(&t->err, MIC_ENOTFOUND, "not_found", NULL,
                          "no topic %s", t->name);
            return MIC_OK;
        }
        rc = mic_store_time_any(w->txn, old.id);
        if (rc == MIC_OK) {
            mic_error_set(&t->err, MIC_ECONFLICT, "topic_not_empty", NULL,
                          "topic %s still holds events", t->name);
            return MIC_OK;
        }
        if (rc != MIC_ENOTFOUND)
            return rc;
        return mic_store_topic_del(w->txn, t->name, t->len);
    }
    if (rc == MIC_ENOTFOUND) {
        if ((rc = mic_store_next_topic_id(w->txn, &t->rec.id)))
            return rc;
        t->created = 1;
    } else {
        t->rec.id = old.id;
    }
    if ((rc = mic_store_topic_put(w->txn, t->name, t->len, &t->rec)))
        return rc;
    /* The writer's map of topic names by id (retention's lookup). */
    return t->created && w->groups ? mic_groups_topic_named(w->groups, t->rec.id, t->name, t->len)
                                   : MIC_OK;
}

/* ---- Handler side ---- */

static int new_op(const char *name, mic_topic_op **out, struct mic_error *err)
{
    mic_topic_op *t;
    int rc;

    if ((rc = name_check(name, err)))
        return rc;
    if (!(t = calloc(1, sizeof *t)))
        return mic_error_internal(err, MIC_ENOMEM);
    t->op.apply = apply;
    t->len = strlen(name);
    memcpy(t->name, name, t->len + 1);
    *out = t;
    return MIC_OK;
}

static int get_uint(json_t *o, const char *k, uint64_t lo, uint64_t hi,
                    uint64_t *out, struct mic_error *err)
{
    json_t *v = json_object_get(o, k);

    if (!v)
        return MIC_OK;
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        (uint64_t)json_integer_value(v) < lo || (uint64_t)json_integer_value(v) > hi)
        return mic_error_set(err, MIC_EINVAL, "invalid_request", k,
                             "%s must be an integer from %llu to %llu", k,
                             (unsigned long long)lo, (unsigned long long)hi);
    *out = (uint64_t)json_integer_value(v);
    return MIC_OK;
}

int mic_topic_put_parse(const char *name, const char *body, size_t len,
                        const struct mic_config *cfg, mic_topic_op **out,
                        struct mic_error *err)
{
    mic_topic_op *t;
    json_t *o = NULL, *v;
    const char *k;
    int rc;

    if ((rc = new_op(name, &t, err)))
        return rc;
    t->rec.retention_s = 7 * DAY;
    t->rec.dedupe_retain_s = 7 * DAY;
    t->rec.max_payload_bytes = 1024 * 1024;
    if (len == 0) {
        *out = t;
        return MIC_OK;
    }
    if ((rc = mic_json_load(body, len, cfg->max_depth, &o, err)))
        goto fail;
    if (!json_is_object(o)) {
        rc = mic_error_set(err, MIC_EINVAL, "invalid_request", NULL,
                           "the body must be a JSON object");
        goto fail;
    }
    json_object_foreach(o, k, v) {
        if (strcmp(k, "name") == 0) {
            if (!json_is_string(v) || strcmp(json_string_value(v), name)) {
                rc = mic_error_set(err, MIC_EINVAL, "invalid_request", "name",
                                   "name must equal the topic in the path");
                goto fail;
            }
        } else if (strcmp(k, "retention_s") && strcmp(k, "max_payload_bytes") &&
                   strcmp(k, "require_versions") && strcmp(k, "dedupe_retain_s")) {
            rc = mic_error_set(err, MIC_EINVAL, "invalid_request", k,
                               "unknown field '%.64s'", k);
            goto fail;
        }
    }
    if ((rc = get_uint(o, "retention_s", 1, RETENTION_MAX, &t->rec.retention_s, err)) ||
        (rc = get_uint(o, "dedupe_retain_s", 0, RETENTION_MAX, &t->rec.dedupe_retain_s, err)) ||
        (rc = get_uint(o, "max_payload_bytes", 1, PAYLOAD_MAX, &t->rec.max_payload_bytes, err)))
        goto fail;
    if ((v = json_object_get(o, "require_versions"))) {
        if (!json_is_boolean(v)) {
            rc = mic_error_set(err, MIC_EINVAL, "invalid_request", "require_versions",
                               "require_versions must be true or false");
            goto fail;
        }
        t->rec.require_versions = json_is_true(v);
    }
    json_decref(o);
    *out = t;
    return MIC_OK;
fail:
    json_decref(o);
    free(t);
    return rc;
}

int mic_topic_del_parse(const char *name, mic_topic_op **out,
                        struct mic_error *err)
{
    int rc = new_op(name, out, err);

    if (rc == MIC_OK)
        (*out)->del = 1;
    return rc;
}

mic_op *mic_topic_op_base(mic_topic_op *t)
{
    return &t->op;
}

int mic_topic_op_result(mic_topic_op *t, struct mic_buf *out, int *created,
                        struct mic_error *err)
{
    if (t->err.err) {
        *err = t->err;
        return t->err.err;
    }
    *created = t->created;
    if (!t->del)
        render(out, t->name, t->len, &t->rec);
    return MIC_OK;
}

void mic_topic_op_free(mic_topic_op *t)
{
    free(t);
}

int mic_topic_get(mic_store *s, const char *name, struct mic_buf *out,
                  struct mic_error *err)
{
    struct mic_topic_rec tr;
    mic_txn *t;
    int rc;

    if ((rc = name_check(name, err)))
        return rc;
    if ((rc = mic_txn_begin(s, 0, &t)))
        return mic_error_internal(err, rc);
    rc = mic_store_topic_get(t, name, strlen(name), &tr);
    mic_txn_abort(t);
    if (rc == MIC_ENOTFOUND)
        return mic_error_set(err, rc, "not_found", NULL, "no topic %s", name);
    if (rc)
        return mic_error_internal(err, rc);
    render(out, name, strlen(name), &tr);
    return MIC_OK;
}

struct list_arg {
    struct mic_buf *b;
    const struct mic_key *key;
};

static int list_one(void *arg, const char *name, size_t len,
                    const struct mic_topic_rec *tr)
{
    struct list_arg *a = arg;
    struct mic_buf *b = a->b;

    if (!mic_key_lists(a->key, 0, name, len))
        return 0;
    if (b->len && b->p[b->len - 1] != '[')
        mic_buf_add(b, ",", 1);
    render(b, name, len, tr);
    return 0;
}

int mic_topic_list(mic_store *s, const struct mic_key *key, struct mic_buf *out,
                   struct mic_error *err)
{
    struct list_arg a = {out, key};
    mic_txn *t;
    int rc;

    if ((rc = mic_txn_begin(s, 0, &t)))
        return mic_error_internal(err, rc);
    mic_buf_puts(out, "{\"topics\":[");
    rc = mic_store_topic_each(t, list_one, &a);
    mic_txn_abort(t);
    if (rc)
        return mic_error_internal(err, rc);
    mic_buf_puts(out, "]}");
    return MIC_OK;
}
