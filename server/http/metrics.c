/* metrics.c - MIC's counters and their Prometheus exposition.
 *
 * HTTP replies are counted per (route, status) in a fixed table of relaxed
 * atomics; the writer's and the store's figures are read when rendered, so
 * a scrape costs the same whatever the backlog. */
#define _POSIX_C_SOURCE 200809L
#include "metrics.h"

#include "auth.h"
#include "core/buf.h"
#include "core/clock.h"
#include "engine/delivery.h"
#include "core/err.h"
#include "store/journal.h"
#include "store/catalog.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#define ROUTES_MAX 64

static const int statuses[] = {200, 201, 204, 304, 400, 401, 403, 404, 405, 409,
                               413, 415, 422, 429, 500, 503, 507};
#define NSTATUS (int)(sizeof statuses / sizeof statuses[0])

static const char *const *route_names;
static int nroutes;
static atomic_uint_fast64_t http_count[ROUTES_MAX][NSTATUS];

/* ---- Per-topic publish counters ---- */

#define TOPICS_MAX 1024

struct topic_count {
    char name[201];
    uint64_t published, duplicates, conflicts;
};

static pthread_mutex_t topic_lock = PTHREAD_MUTEX_INITIALIZER;
static struct topic_count topic_counts[TOPICS_MAX];
static int ntopic_counts;

void mic_metrics_topic(const char *topic, int published, int duplicate, int conflict)
{
    int i;

    pthread_mutex_lock(&topic_lock);
    for (i = 0; i < ntopic_counts && strcmp(topic_counts[i].name, topic); i++)
        ;
    if (i == ntopic_counts && ntopic_counts < TOPICS_MAX) {
        snprintf(topic_counts[i].name, sizeof topic_counts[i].name, "%s", topic);
        ntopic_counts++;
    }
    if (i < ntopic_counts) {
        topic_counts[i].published += (uint64_t)published;
        topic_counts[i].duplicates += (uint64_t)duplicate;
        topic_counts[i].conflicts += (uint64_t)conflict;
    }
    pthread_mutex_unlock(&topic_lock);
}

static struct topic_count topic_counted(const char *name, size_t len)
{
    struct topic_count c;

    memset(&c, 0, sizeof c);
    pthread_mutex_lock(&topic_lock);
    for (int i = 0; i < ntopic_counts; i++)
        if (strlen(topic_counts[i].name) == len && !memcmp(topic_counts[i].name, name, len))
            c = topic_counts[i];
    pthread_mutex_unlock(&topic_lock);
    return c;
}

/* ---- Per-group figures, read from the store ---- */

struct group_fig {
    const char *name;
    size_t len;
    uint32_t gid;
    json_t *cfg;            /* the group resource */
    uint64_t c[MIC_GSTAT_N];
    int has_oldest, has_poison;
    double oldest_age, poison_age;
    uint64_t oldest_seq;
    int64_t alert_s;
};

static int group_fig(mic_txn *t, const char *name, size_t len,
                     const struct mic_group_rec *g, int64_t now, struct group_fig *f)
{
    int64_t at;
    uint64_t seq;
    json_t *a;

    memset(f, 0, sizeof *f);
    f->name = name;
    f->len = len;
    f->gid = g->gid;
    f->cfg = json_loadb(g->config, g->config_len, 0, NULL);
    a = json_object_get(f->cfg, "alert_oldest_unhandled_s");
    f->alert_s = json_is_integer(a) ? json_integer_value(a) : -1;
    mic_delivery_figures(t, g->gid, f->c);
    if (mic_delivery_oldest(t, g->gid, 0, &at, &f->oldest_seq) == MIC_OK) {
        f->has_oldest = 1;
        f->oldest_age = mic_age_s(now, at);
    }
    if (mic_delivery_oldest(t, g->gid, 1, &at, &seq) == MIC_OK) {
        f->has_poison = 1;
        f->poison_age = mic_age_s(now, at);
    }
    return 0;
}

static int alerting(const struct group_fig *f)
{
    return f->alert_s >= 0 && f->has_oldest && f->oldest_age >= (double)f->alert_s;
}

struct fig_arg {
    mic_txn *t;
    const struct mic_key *key;
    struct mic_buf *b;
    int64_t now;
    int n;
};

static int stats_group(void *arg, const char *name, size_t len, const struct mic_group_rec *g)
{
    struct fig_arg *a = arg;
    struct group_fig f;
    char *topics;

    if (!mic_key_lists(a->key, 1, name, len))
        return 0;
    group_fig(a->t, name, len, g, a->now, &f);
    topics = json_dumps(json_object_get(f.cfg, "topics"), JSON_COMPACT | JSON_ENCODE_ANY);
    if (a->n++)
        mic_buf_add(a->b, ",", 1);
    mic_buf_puts(a->b, "{\"group\":");
    mic_buf_json_str(a->b, name, len);
    mic_buf_printf(a->b, ",\"topics\":%s,\"ordered\":%s,\"pending\":%llu,\"processing\":%llu,"
                         "\"dlq\":%llu,\"dispatched\":%llu,",
                   topics ? topics : "[]",
                   json_is_true(json_object_get(f.cfg, "ordered")) ? "true" : "false",
                   (unsigned long long)f.c[MIC_GSTAT_PENDING],
                   (unsigned long long)f.c[MIC_GSTAT_PROCESSING],
                   (unsigned long long)f.c[MIC_GSTAT_DLQ],
                   (unsigned long long)f.c[MIC_GSTAT_DISPATCHED]);
    if (f.has_oldest)
        mic_buf_printf(a->b, "\"oldest_unhandled_age_s\":%.3f,\"oldest_unhandled_seq\":%llu,",
                       f.oldest_age, (unsigned long long)f.oldest_seq);
    else
        mic_buf_puts(a->b, "\"oldest_unhandled_age_s\":null,\"oldest_unhandled_seq\":null,");
    if (f.has_poison)
        mic_buf_printf(a->b, "\"poison_age_s\":%.3f,", f.poison_age);
    else
        mic_buf_puts(a->b, "\"poison_age_s\":null,");
    mic_buf_printf(a->b, "\"blocked_aggregates\":%llu,\"gap_parked_aggregates\":%llu,"
                         "\"redeliveries\":%llu,\"alert\":%s}",
                   (unsigned long long)f.c[MIC_GSTAT_BLOCKED],
                   (unsigned long long)f.c[MIC_GSTAT_GAP_PARKED],
                   (unsigned long long)f.c[MIC_GSTAT_REDELIVERIES],
                   alerting(&f) ? "true" : "false");
    free(topics);
    json_decref(f.cfg);
    return 0;
}

static int stats_topic(void *arg, const char *name, size_t len, const struct mic_topic_rec *tr)
{
    struct fig_arg *a = arg;
    struct topic_count c;
    uint64_t events;

    if (!mic_key_lists(a->key, 0, name, len))
        return 0;
    c = topic_counted(name, len);
    mic_store_topic_events(a->t, tr->id, &events);
    if (a->n++)
        mic_buf_add(a->b, ",", 1);
    mic_buf_puts(a->b, "{\"topic\":");
    mic_buf_json_str(a->b, name, len);
    mic_buf_printf(a->b, ",\"events\":%llu,\"publishes\":%llu,\"duplicates\":%llu,"
                         "\"conflicts\":%llu}",
                   (unsigned long long)events,
                   (unsigned long long)(c.published + c.duplicates),
                   (unsigned long long)c.duplicates, (unsigned long long)c.conflicts);
    return 0;
}

int mic_metrics_stats(mic_store *s, const struct mic_key *key, struct mic_buf *b)
{
    struct fig_arg a;
    uint64_t size, used, max, events = 0;
    mic_txn *t;
    int rc;

    if ((rc = mic_txn_begin(s, 0, &t)))
        return rc;
    memset(&a, 0, sizeof a);
    a.t = t;
    a.key = key;
    a.b = b;
    a.now = mic_now_us();
    mic_buf_puts(b, "{\"groups\":[");
    mic_store_group_each(t, stats_group, &a);
    mic_buf_puts(b, "],\"topics\":[");
    a.n = 0;
    mic_store_topic_each(t, stats_topic, &a);
    mic_store_log_count(t, &events);
    mic_txn_abort(t);
    mic_store_usage(s, &size, &used, &max);
    mic_buf_printf(b, "],\"store\":{\"map_size_bytes\":%llu,\"map_used_bytes\":%llu,"
                      "\"map_max_bytes\":%llu,\"events\":%llu}}",
                   (unsigned long long)size, (unsigned long long)used,
                   (unsigned long long)max, (unsigned long long)events);
    return b->oom ? MIC_ENOMEM : MIC_OK;
}

/* ---- Prometheus families ---- */

static void label(struct mic_buf *b, const char *metric, const char *key,
                  const char *v, size_t len)
{
    mic_buf_puts(b, metric);
    mic_buf_printf(b, "{%s=", key);
    mic_buf_json_str(b, v, len);
    mic_buf_puts(b, "} ");
}

/* The figures of every group and topic, gathered once per scrape and then
 * printed family by family, as the exposition format wants. */
struct figs {
    mic_txn *t;
    const struct mic_key *key;
    int64_t now;
    struct group_fig *g;
    int ng, gcap;
    struct tfig {
        char name[201];
        struct topic_count c;
        uint64_t events;
    } *tp;
    int nt, tcap;
};

static int gather_group(void *arg, const char *name, size_t len, const struct mic_group_rec *g)
{
    struct figs *f = arg;

    if (!mic_key_lists(f->key, 1, name, len))
        return 0;
    if (f->ng == f->gcap) {
        int cap = f->gcap ? 2 * f->gcap : 16;
        struct group_fig *p = realloc(f->g, (size_t)cap * sizeof *p);
        if (!p)
            return 1;
        f->g = p;
        f->gcap = cap;
    }
    group_fig(f->t, name, len, g, f->now, &f->g[f->ng]);
    /* 'name' is borrowed from LMDB: keep our own copy. */
    f->g[f->ng].name = strndup(name, len);
    f->ng++;
    return 0;
}

static int gather_topic(void *arg, const char *name, size_t len, const struct mic_topic_rec *tr)
{
    struct figs *f = arg;
    struct tfig *t;

    if (!mic_key_lists(f->key, 0, name, len))
        return 0;
    if (f->nt == f->tcap) {
        int cap = f->tcap ? 2 * f->tcap : 16;
        struct tfig *p = realloc(f->tp, (size_t)cap * sizeof *p);
        if (!p)
            return 1;
        f->tp = p;
        f->tcap = cap;
    }
    t = &f->tp[f->nt++];
    snprintf(t->name, sizeof t->name, "%.*s", (int)len, name);
    t->c = topic_counted(name, len);
    mic_store_topic_events(f->t, tr->id, &t->events);
    return 0;
}

static void family(struct mic_buf *b, const char *metric, const char *type, const char *help)
{
    mic_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", metric, help, metric, type);
}

static void render_groups(struct mic_buf *b, const struct figs *f)
{
    static const struct { const char *metric, *type, *help; int field; } fams[] = {
        {"mic_group_pending", "gauge", "Deliveries not under lease and not terminal (retrying and parked included).", MIC_GSTAT_PENDING},
        {"mic_group_processing", "gauge", "Deliveries under lease.", MIC_GSTAT_PROCESSING},
        {"mic_group_dlq", "gauge", "Dead-lettered deliveries.", MIC_GSTAT_DLQ},
        {"mic_group_dispatched_total", "counter", "Deliveries acknowledged.", MIC_GSTAT_DISPATCHED},
        {"mic_group_redeliveries_total", "counter", "Claims of a delivery after its first.", MIC_GSTAT_REDELIVERIES},
        {"mic_group_blocked_aggregates", "gauge", "Aggregates of an ordered group holding back events.", MIC_GSTAT_BLOCKED},
        {"mic_group_gap_parked_aggregates", "gauge", "Aggregates of an ordered group parked on a missing version.", MIC_GSTAT_GAP_PARKED},
    };

    for (size_t k = 0; k < sizeof fams / sizeof fams[0]; k++) {
        family(b, fams[k].metric, fams[k].type, fams[k].help);
        for (int i = 0; i < f->ng; i++) {
            label(b, fams[k].metric, "group", f->g[i].name, strlen(f->g[i].name));
            mic_buf_printf(b, "%llu\n", (unsigned long long)f->g[i].c[fams[k].field]);
        }
    }
    family(b, "mic_group_oldest_unhandled_age_seconds", "gauge",
           "Age (from created_at) of the oldest non-terminal delivery, 0 if none.");
    for (int i = 0; i < f->ng; i++) {
        label(b, "mic_group_oldest_unhandled_age_seconds", "group", f->g[i].name, strlen(f->g[i].name));
        mic_buf_printf(b, "%.3f\n", f->g[i].has_oldest ? f->g[i].oldest_age : 0.0);
    }
    family(b, "mic_group_poison_age_seconds", "gauge",
           "Age of the oldest dead letter or failed-once delivery, 0 if none.");
    for (int i = 0; i < f->ng; i++) {
        label(b, "mic_group_poison_age_seconds", "group", f->g[i].name, strlen(f->g[i].name));
        mic_buf_printf(b, "%.3f\n", f->g[i].has_poison ? f->g[i].poison_age : 0.0);
    }
    family(b, "mic_group_alert", "gauge",
           "1 when the oldest unhandled age reached alert_oldest_unhandled_s.");
    for (int i = 0; i < f->ng; i++) {
        label(b, "mic_group_alert", "group", f->g[i].name, strlen(f->g[i].name));
        mic_buf_printf(b, "%d\n", alerting(&f->g[i]));
    }
    family(b, "mic_group_alert_threshold_seconds", "gauge", "The group's alert_oldest_unhandled_s.");
    for (int i = 0; i < f->ng; i++)
        if (f->g[i].alert_s >= 0) {
            label(b, "mic_group_alert_threshold_seconds", "group", f->g[i].name, strlen(f->g[i].name));
            mic_buf_printf(b, "%lld\n", (long long)f->g[i].alert_s);
        }
}

static void render_topics(struct mic_buf *b, const struct figs *f)
{
    family(b, "mic_events_published_total", "counter", "Events stored by publishes (duplicates excluded).");
    for (int i = 0; i < f->nt; i++) {
        label(b, "mic_events_published_total", "topic", f->tp[i].name, strlen(f->tp[i].name));
        mic_buf_printf(b, "%llu\n", (unsigned long long)f->tp[i].c.published);
    }
    family(b, "mic_publish_duplicates_total", "counter", "Publishes answered as duplicates.");
    for (int i = 0; i < f->nt; i++) {
        label(b, "mic_publish_duplicates_total", "topic", f->tp[i].name, strlen(f->tp[i].name));
        mic_buf_printf(b, "%llu\n", (unsigned long long)f->tp[i].c.duplicates);
    }
    family(b, "mic_publish_conflicts_total", "counter", "Publishes refused with a conflict.");
    for (int i = 0; i < f->nt; i++) {
        label(b, "mic_publish_conflicts_total", "topic", f->tp[i].name, strlen(f->tp[i].name));
        mic_buf_printf(b, "%llu\n", (unsigned long long)f->tp[i].c.conflicts);
    }
    family(b, "mic_topic_events", "gauge", "Events of the topic in the store.");
    for (int i = 0; i < f->nt; i++) {
        label(b, "mic_topic_events", "topic", f->tp[i].name, strlen(f->tp[i].name));
        mic_buf_printf(b, "%llu\n", (unsigned long long)f->tp[i].events);
    }
}

void mic_metrics_routes(const char *const *names, int n)
{
    route_names = names;
    nroutes = n < ROUTES_MAX ? n : ROUTES_MAX;
}

void mic_metrics_http(int route, int status)
{
    if (route < 0 || route >= nroutes)
        return;
    for (int i = 0; i < NSTATUS; i++)
        if (statuses[i] == status) {
            atomic_fetch_add_explicit(&http_count[route][i], 1,
                                      memory_order_relaxed);
            return;
        }
}

static void histogram(struct mic_buf *b, const char *name, const char *help,
                      const double *le, const uint64_t *counts, double sum)
{
    uint64_t cum = 0;

    mic_buf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (int i = 0; i < 7; i++) {
        cum += counts[i];
        mic_buf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, le[i],
                       (unsigned long long)cum);
    }
    cum += counts[7];
    mic_buf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n",
                   name, (unsigned long long)cum, name, sum, name,
                   (unsigned long long)cum);
}

static void (*extra_fn)(void *, const struct mic_key *, struct mic_buf *);
static void *extra_arg;

void mic_metrics_on_render(void (*fn)(void *arg, const struct mic_key *key,
                                      struct mic_buf *out),
                           void *arg)
{
    extra_arg = arg;
    extra_fn = fn;
}

int mic_metrics_render(mic_store *s, mic_writer *w, const struct mic_key *key,
                       struct mic_buf *b)
{
    static const double batch_le[] = {1, 2, 4, 16, 64, 256, 1024};
    static const double commit_le[] = {0.0001, 0.00025, 0.0005, 0.001,
                                       0.0025, 0.005, 0.01};
    struct mic_writer_stats st;
    uint64_t map_size, used, map_max, events = 0;
    mic_txn *t;

    mic_writer_stats(w, &st);
    mic_store_usage(s, &map_size, &used, &map_max);
    if (mic_txn_begin(s, 0, &t) == MIC_OK) {
        mic_store_log_count(t, &events);
        mic_txn_abort(t);
    }
    mic_buf_printf(b,
        "# HELP mic_writer_commits_total Write transactions committed.\n"
        "# TYPE mic_writer_commits_total counter\n"
        "mic_writer_commits_total %llu\n"
        "# HELP mic_writer_ops_total Write operations (requests) committed.\n"
        "# TYPE mic_writer_ops_total counter\n"
        "mic_writer_ops_total %llu\n"
        "# HELP mic_writer_committed_seq Highest seq committed.\n"
        "# TYPE mic_writer_committed_seq gauge\n"
        "mic_writer_committed_seq %llu\n"
        "# HELP mic_writer_parked Long-poll claims waiting (suspended connections).\n"
        "# TYPE mic_writer_parked gauge\n"
        "mic_writer_parked %d\n"
        "# HELP mic_store_events Events stored in the log.\n"
        "# TYPE mic_store_events gauge\n"
        "mic_store_events %llu\n"
        "# HELP mic_store_map_size_bytes Current LMDB map size.\n"
        "# TYPE mic_store_map_size_bytes gauge\n"
        "mic_store_map_size_bytes %llu\n"
        "# HELP mic_store_map_used_bytes Bytes of the map in use.\n"
        "# TYPE mic_store_map_used_bytes gauge\n"
        "mic_store_map_used_bytes %llu\n"
        "# HELP mic_store_map_max_bytes Growth limit of the map.\n"
        "# TYPE mic_store_map_max_bytes gauge\n"
        "mic_store_map_max_bytes %llu\n",
        (unsigned long long)st.commits, (unsigned long long)st.ops,
        (unsigned long long)st.committed_seq, st.parked, (unsigned long long)events,
        (unsigned long long)map_size, (unsigned long long)used,
        (unsigned long long)map_max);
    mic_buf_printf(b,
        "# HELP mic_store_corrupt_records_total Reads of a stored log record that failed "
        "its CRC-32C (or did not decode): answered 500 store_corrupt, never served; "
        "one record read twice counts twice.\n"
        "# TYPE mic_store_corrupt_records_total counter\n"
        "mic_store_corrupt_records_total %llu\n",
        (unsigned long long)mic_store_corrupt_reads());
    histogram(b, "mic_writer_batch_size", "Operations per committed transaction.",
              batch_le, st.batch_hist, (double)st.ops);
    histogram(b, "mic_commit_seconds", "Time to commit a transaction (into the OS cache "
              "and the journal's queue; the journal's fdatasync follows in the sync stage).",
              commit_le, st.commit_us_hist, st.commit_seconds_sum);
    {
        struct mic_jnl_stats js;
        if (mic_store_journal_stats(s, &js) == MIC_OK)
            mic_buf_printf(b,
                "# HELP mic_journal_syncs_total Journal writes, each followed by one fdatasync.\n"
                "# TYPE mic_journal_syncs_total counter\n"
                "mic_journal_syncs_total %llu\n"
                "# HELP mic_journal_records_total Commits written to the journal.\n"
                "# TYPE mic_journal_records_total counter\n"
                "mic_journal_records_total %llu\n"
                "# HELP mic_journal_bytes_total Bytes written to the journal.\n"
                "# TYPE mic_journal_bytes_total counter\n"
                "mic_journal_bytes_total %llu\n"
                "# HELP mic_journal_checkpoints_total fdatasyncs of data.mdb that freed a journal file.\n"
                "# TYPE mic_journal_checkpoints_total counter\n"
                "mic_journal_checkpoints_total %llu\n"
                "# HELP mic_journal_late_checkpoints_total Times a journal file grew past --journal-size because the other one was not checkpointed yet.\n"
                "# TYPE mic_journal_late_checkpoints_total counter\n"
                "mic_journal_late_checkpoints_total %llu\n",
                (unsigned long long)js.flushes, (unsigned long long)js.records,
                (unsigned long long)js.bytes, (unsigned long long)js.checkpoints,
                (unsigned long long)js.late_checkpoints);
    }
    {
        struct mic_clock_stats cs;
        mic_clock_stats(&cs);
        mic_buf_printf(b,
            "# HELP mic_clock_offset_seconds micd's clock minus the system wall clock "
            "(after a wall-clock step, slewed back toward 0 at 5%% of elapsed time).\n"
            "# TYPE mic_clock_offset_seconds gauge\n"
            "mic_clock_offset_seconds %.6f\n"
            "# HELP mic_clock_steps_total Times micd's clock stepped forward to a wall clock "
            "more than a day ahead.\n"
            "# TYPE mic_clock_steps_total counter\n"
            "mic_clock_steps_total %llu\n",
            (double)cs.offset_us / 1e6, (unsigned long long)cs.steps);
    }
    if (mic_txn_begin(s, 0, &t) == MIC_OK) {
        struct figs f;
        memset(&f, 0, sizeof f);
        f.t = t;
        f.key = key;
        f.now = mic_now_us();
        mic_store_group_each(t, gather_group, &f);
        mic_store_topic_each(t, gather_topic, &f);
        mic_txn_abort(t);
        render_groups(b, &f);
        render_topics(b, &f);
        for (int i = 0; i < f.ng; i++) {
            free((char *)f.g[i].name);
            json_decref(f.g[i].cfg);
        }
        free(f.g);
        free(f.tp);
    }
    mic_buf_puts(b, "# HELP mic_http_requests_total HTTP replies by route and status.\n"
                    "# TYPE mic_http_requests_total counter\n");
    for (int r = 0; r < nroutes; r++)
        for (int i = 0; i < NSTATUS; i++) {
            uint64_t n = atomic_load_explicit(&http_count[r][i], memory_order_relaxed);
            if (n)
                mic_buf_printf(b, "mic_http_requests_total{route=\"%s\",code=\"%d\"} %llu\n",
                               route_names[r], statuses[i], (unsigned long long)n);
        }
    if (extra_fn)
        extra_fn(extra_arg, key, b);
    return b->oom ? MIC_ENOMEM : MIC_OK;
}
