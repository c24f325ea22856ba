/* group.h - consumer groups: configuration (PUT/GET/DELETE /v1/groups),
 * the writer's registry of live groups (opaque: read through the
 * functions below), the subscribers of a topic, and the bounded chunks of
 * a group's background work (backfill of older events for `start`, the
 * release of an ordered group's heads after it, removal of a deleted
 * group's keys), which the caller carries out through the callbacks it
 * gives (struct mic_groups_work: the delivery engine's verbs).  This file
 * calls no delivery code. */
#ifndef MIC_GROUP_H
#define MIC_GROUP_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"
#include "writer.h"

struct mic_key;
struct mic_buf;
struct mic_config;
struct mic_error;

#define MIC_GROUP_NAME_MAX 200

enum mic_start { MIC_START_ALL, MIC_START_NEW, MIC_START_TIME };

/* A group's configuration. */
/* A group's defaults (DESIGN section 2), the one place they are written:
 * cfg_parse fills them in for absent fields, and replay.c's run groups
 * take them too. */
#define MIC_GROUP_MAX_ATTEMPTS 10
#define MIC_GROUP_BACKOFF_INITIAL_MS 1000
#define MIC_GROUP_BACKOFF_MAX_MS 300000
#define MIC_GROUP_BACKOFF_MULTIPLIER 2
#define MIC_GROUP_LEASE_TTL_S 30

struct mic_group_cfg {
    char **topics;          /* exact names, or prefixes ending in '*' */
    int ntopics;
    int effect;             /* kind: 0 projection, 1 effect */
    int ordered;
    int dlq_hold;           /* dlq_policy: 0 release, 1 hold */
    uint32_t max_attempts;
    uint64_t backoff_initial_ms, backoff_max_ms;
    double backoff_multiplier;
    uint32_t lease_ttl_s;
    int start;              /* enum mic_start */
    int64_t start_us;       /* MIC_START_TIME: created_at >= this */
    int64_t alert_s;        /* alert_oldest_unhandled_s, -1 = none */
    char *replay_run;       /* a replay run's group: its run id, else NULL */
    char *replay_fields;    /* its claims' "replay" members, JSON text without braces */
    /* A NATS sink (DESIGN section 13), relayed by micd itself (sink.c);
     * sink_url NULL: none.  Validated at PUT, fixed at creation. */
    char *sink_url;         /* nats://HOST:PORT[,nats://HOST:PORT...] */
    char *sink_stream;      /* [A-Za-z0-9_-]{1,64} */
    char *sink_subject;     /* tokens: literal or {topic} {event_type}
                             * {aggregate_type} {aggregate_id} */
};

/* A live group, as the writer knows it (opaque). */
struct mic_group;

typedef struct mic_group_op mic_group_op;

/* ---- The registry (writer thread) ---- */

/* Load the registry of the groups stored in 's' (borrowed: it must outlive
 * the registry).  Returns MIC_OK with *out (the caller's: mic_groups_free),
 * MIC_ENOMEM, or a store error. */
int mic_groups_new(mic_groups **out, mic_store *s);
void mic_groups_free(mic_groups *g);
/* The group called 'name' (len bytes) or with id 'gid', or NULL.  The
 * struct belongs to the registry: valid until the group is deleted or the
 * registry is reloaded (after an aborted batch), so never keep it past the
 * batch. */
struct mic_group *mic_groups_find(mic_groups *g, const char *name, size_t len);
struct mic_group *mic_groups_by_gid(mic_groups *g, uint32_t gid);
/* The first live group, and the one after 'gr', or NULL; same lifetime. */
struct mic_group *mic_groups_first(mic_groups *g);
struct mic_group *mic_groups_next(const struct mic_group *gr);
/* A group's id, name (NUL-terminated), configuration (owned by the
 * group: same lifetime), and whether it may not pick ordered heads yet
 * (older events or a replay selection still being added). */
uint32_t mic_group_id(const struct mic_group *gr);
const char *mic_group_name(const struct mic_group *gr);
const struct mic_group_cfg *mic_group_config(const struct mic_group *gr);
int mic_group_backfilling(const struct mic_group *gr);
/* Nonzero while a replay run's group still adds its selection or releases
 * its aggregates' heads: nothing of the run is handed out before all of
 * it can go in (created_at, event_id) order (an event without an
 * aggregate is ready as soon as it is added, its elders perhaps not yet).
 * Its waiting claims are woken when the release ends. */
int mic_group_held(const struct mic_group *gr);
/* Nonzero if a live event 'r' belongs in 'gr' by its start (`start` at a
 * time takes events created at or after it). */
int mic_group_takes(const struct mic_group *gr, const struct mic_rec *r);
/* Nonzero if the backfill of live group 'gr' (start `all` or a time) has
 * still to reach event 'r' and will add it: 'r' lies at or past the
 * backfill's position, within the log it walks, and 'gr' takes it.  The
 * topic is the caller's to match (retention asks the groups of r's topic;
 * of an unknown topic it asks every group, and a backfill then holds the
 * event until it has passed it).  Always 0 for a replay run's group
 * (mic_replay_holds).  One comparison: retention asks it for every event
 * it would remove (mic_delivery_busy). */
int mic_group_fills(const struct mic_group *gr, const struct mic_rec *r);
/* The live groups subscribed to 'topic' (replay groups excluded): *out
 * receives an array of *n groups, borrowed from the registry and valid
 * until the next call of this function or mic_groups_holders, or a change
 * of the registry.  Returns MIC_OK or MIC_ENOMEM. */
int mic_groups_subscribers(mic_groups *g, const char *topic, size_t tlen,
                           struct mic_group *const **out, int *n);
/* The groups that can hold a delivery of an event of 'topic' (retention):
 * the live groups subscribed to it, then the replay groups whose run is
 * over it.  Stores in *out an array of *n groups, borrowed from the
 * registry and valid until the next call of this function or of
 * mic_groups_subscribers, or a change of the registry.  Returns MIC_OK or
 * MIC_ENOMEM. */
int mic_groups_holders(mic_groups *g, const char *topic, size_t tlen,
                       struct mic_group *const **out, int *n);
/* The registry's map of topic names by id (writer thread).
 * mic_groups_topic_named records that topic 'id' is called 'name' (len
 * bytes): call it when a topic is created.  Returns MIC_OK, MIC_ENOMEM, or
 * MIC_EINVAL for id 0 or a name too long.
 * mic_groups_topic_find copies the name of topic 'id' (NUL-terminated)
 * into 'name' (MIC_TOPIC_MAX + 1 bytes) and its record into *tr, checked against the topics index of
 * 't' (the map is reloaded from it on a miss: it is never wrong).
 * Returns MIC_OK, MIC_ENOTFOUND when no topic has that id, or a store
 * error. */
int mic_groups_topic_named(mic_groups *g, uint32_t id, const char *name, size_t len);
int mic_groups_topic_find(mic_groups *g, mic_txn *t, uint32_t id, char *name,
                          struct mic_topic_rec *tr);
/* What a group's background work does to deliveries (the delivery
 * engine's verbs, given by the writer's schedule): add the delivery of a
 * record, release an ordered group's heads after its backfill, remove a
 * deleted group's keys.  Each returns MIC_OK or a store error. */
struct mic_groups_work {
    int (*add)(struct mic_wctx *w, struct mic_group *gr, const struct mic_rec *r);
    int (*release_heads)(struct mic_wctx *w, struct mic_group *gr, int max,
                         uint64_t *cursor, int *done);
    int (*drop_step)(struct mic_wctx *w, uint32_t gid, int budget, int *finished);
};
/* One bounded chunk of backfill, head release or removal of a deleted
 * group's keys, through 'work'.  Returns MIC_OK or a store error.  _busy is
 * nonzero while such work (or a replay selection) remains. */
int mic_groups_background(mic_groups *g, struct mic_wctx *w, const struct mic_groups_work *work);
int mic_groups_busy(mic_groups *g);
/* Set while a replay run's group is still 'selecting' (from its creation,
 * or from a load of the store that holds one) until
 * mic_groups_selecting_done: a replay run may still be adding its
 * selection (replay.c looks, a chunk per batch). */
int mic_groups_selecting(mic_groups *g);
void mic_groups_selecting_done(mic_groups *g);
/* Rebuild from the committed store ('read', a read transaction) after an
 * aborted batch; every struct mic_group handed out before is freed. */
void mic_groups_reload(mic_groups *g, mic_txn *read);

/* Create group 'name' from its resource JSON (as stored), in the writer
 * thread; 'selecting' marks a group whose deliveries another module adds
 * (a replay run): it gets no live events and no backfill of its own, and
 * an ordered one picks no head until mic_groups_selected.  MIC_ECONFLICT
 * if the name is taken. */
int mic_groups_create(mic_groups *g, struct mic_wctx *w, const char *name,
                      const char *json, size_t len, int selecting,
                      struct mic_group **out);
/* All deliveries of a 'selecting' group are in: heads may go.  Returns
 * MIC_OK or a store error. */
int mic_groups_selected(mic_groups *g, struct mic_wctx *w, struct mic_group *gr);
/* Delete group 'gr' (its keys go in the background; 'gr' is freed).
 * Returns MIC_OK or a store error. */
int mic_groups_delete(mic_groups *g, struct mic_wctx *w, struct mic_group *gr);

/* ---- Requests ----
 * PUT and DELETE /v1/groups/{group}: _parse in the handler thread (MIC_OK
 * with *out, the caller's until mic_group_op_free; else 'err' filled:
 * MIC_ENOTFOUND for a name that cannot exist, MIC_EPARSE, MIC_EINVAL with
 * the field, MIC_ENOMEM); _op_base is the op to submit (embedded, valid
 * while the request is); _result after done(): MIC_OK with the resource
 * appended to 'out' and *created set, or 'err' (MIC_ENOTFOUND,
 * MIC_ECONFLICT immutable_field). */

int mic_group_put_parse(const char *name, const char *body, size_t len,
                        const struct mic_config *cfg, mic_group_op **out,
                        struct mic_error *err);
int mic_group_del_parse(const char *name, mic_group_op **out,
                        struct mic_error *err);
mic_op *mic_group_op_base(mic_group_op *o);
int mic_group_op_result(mic_group_op *o, struct mic_buf *out, int *created,
                        struct mic_error *err);
void mic_group_op_free(mic_group_op *o);

/* GET /v1/groups/{group} and GET /v1/groups: the resource (or
 * {"groups":[...]}) appended to 'out'.  MIC_OK, or 'err' filled:
 * MIC_ENOTFOUND, or "internal" for a store error.  Any thread. */
int mic_group_get(mic_store *s, const char *name, struct mic_buf *out,
                  struct mic_error *err);
int mic_group_list(mic_store *s, const struct mic_key *key, struct mic_buf *out,
                   struct mic_error *err);
/* Read side of a group's resources and listings: check 'name' and open a
 * read transaction (else 'err' says not_found or internal); then end it,
 * turning the listing's 'rc' into the answer (MIC_ENOTFOUND: no group). */
int mic_group_read_begin(mic_store *s, const char *name, mic_txn **t,
                         struct mic_error *err);
int mic_group_read_end(mic_txn *t, int rc, const char *name, struct mic_error *err);
/* Read side: the id of group 'name' (read transaction 't').  MIC_OK,
 * MIC_ENOTFOUND, or a store error. */
int mic_group_gid(mic_txn *t, const char *name, uint32_t *gid);

/* The figures GET /v1/groups shows of a sink group's relay: 'fn' appends
 * the value of "sink_status" (a JSON object) for group 'name' (len bytes)
 * to 'out'; it runs in a handler thread, so it must be thread-safe.  Set
 * once at start (sink.c), before the HTTP server; without it a sink group
 * shows {"connected":false,"in_flight":0,"last_error":"no relay"}. */
void mic_group_on_sink_status(void (*fn)(void *arg, const char *name, size_t len,
                                         struct mic_buf *out),
                              void *arg);
/* Parse a stored group configuration (as GET shows it, without
 * sink_status) into *c (the caller's: mic_group_cfg_fini).  Any thread.
 * Returns MIC_OK, MIC_EIO for a text that is not one, MIC_ENOMEM. */
int mic_group_cfg_parse(const char *json, size_t len, const char *name,
                        struct mic_group_cfg *c);
void mic_group_cfg_fini(struct mic_group_cfg *c);

/* Nonzero if 'name' is a valid group name ([A-Za-z0-9._:-]{1,200}). */
int mic_group_name_ok(const char *name, size_t len);
/* The lowercase word for a delivery state ("pending", ...): a static
 * string, "unknown" for another value. */
const char *mic_dlv_state_name(int state);

#endif
