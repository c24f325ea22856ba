/* metrics.c - MIC's counters and their Prometheus exposition.
 *
 * HTTP replies are counted per (route, status) in a fixed table of relaxed
 * atomics; the writer's and the store's figures are read when rendered, so
 * a scrape costs the same whatever the backlog. */
#include "metrics.h"

#include "buf.h"
#include "err.h"

#include <stdatomic.h>
#include <stdint.h>

#define ROUTES_MAX 48

static const int statuses[] = {200, 201, 204, 400, 404, 405, 409, 413,
                               415, 422, 429, 500, 503, 507};
#define NSTATUS (int)(sizeof statuses / sizeof statuses[0])

static const char *const *route_names;
static int nroutes;
static atomic_uint_fast64_t http_count[ROUTES_MAX][NSTATUS];

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

struct gap_arg {
    mic_txn *t;
    struct mic_buf *b;
};

static int gap_line(void *arg, const char *name, size_t len, const struct mic_group_rec *g)
{
    struct gap_arg *a = arg;
    uint64_t c[MIC_GSTAT_N];

    if (mic_store_gstat_get(a->t, g->gid, c))
        return 0;
    mic_buf_puts(a->b, "mic_group_gap_parked_aggregates{group=");
    mic_buf_json_str(a->b, name, len);
    mic_buf_printf(a->b, "} %llu\n", (unsigned long long)c[MIC_GSTAT_GAP_PARKED]);
    return 0;
}

int mic_metrics_render(mic_store *s, mic_writer *w, struct mic_buf *b)
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
    histogram(b, "mic_writer_batch_size", "Operations per committed transaction.",
              batch_le, st.batch_hist, (double)st.ops);
    histogram(b, "mic_commit_seconds", "Time to commit (and fsync) a transaction.",
              commit_le, st.commit_us_hist, st.commit_seconds_sum);
    if (mic_txn_begin(s, 0, &t) == MIC_OK) {
        mic_buf_puts(b, "# HELP mic_group_gap_parked_aggregates Aggregates of an ordered group "
                        "parked on a missing version.\n"
                        "# TYPE mic_group_gap_parked_aggregates gauge\n");
        mic_store_group_each(t, gap_line, &(struct gap_arg){t, b});
        mic_txn_abort(t);
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
    return b->oom ? MIC_ENOMEM : MIC_OK;
}
