/* history.h - the last hour of each group's backlog and oldest unhandled
 * age, kept in memory for the admin page's chart (GET /v1/stats/history).
 *
 * A sample reads, in one read transaction (never through the writer), the
 * figures /v1/stats shows: each group's backlog (pending + processing)
 * and its oldest unhandled age (now - created_at of its oldest
 * non-terminal delivery, null when nothing waits).  Samples go into a
 * fixed ring of MIC_HISTORY_POINTS points (360: one hour every 10 s); each
 * tracked group has one column of that ring.  Memory is bounded: at most
 * MIC_HISTORY_GROUPS groups (256) are tracked, about 12 bytes per point,
 * so at most about 1.1 MiB; groups beyond that are counted
 * ("groups_untracked") but not kept.  A group absent from a whole ring
 * (deleted an hour ago) gives its column back.  Nothing is stored: the
 * history starts empty at each start of micd.
 *
 * Threads: mic_history_sample and mic_history_render may run in any
 * threads at once (one mutex guards the ring; the store is read outside
 * it).  The sampler thread (mic_history_start) calls mic_history_sample
 * at once, then every interval. */
#ifndef MIC_HISTORY_H
#define MIC_HISTORY_H

#include "store/store.h"

struct mic_key;
struct mic_buf;

#define MIC_HISTORY_POINTS 360
#define MIC_HISTORY_GROUPS 256
#define MIC_HISTORY_INTERVAL_MS 10000

typedef struct mic_history mic_history;

/* A new, empty history reading 's' (borrowed: it must outlive the
 * history).  MIC_OK with *out (the caller's: mic_history_free), or
 * MIC_ENOMEM. */
int mic_history_new(mic_history **out, mic_store *s);

/* Stop its sampler if it runs, and free it (NULL is ignored). */
void mic_history_free(mic_history *h);

/* Take one sample now (mic_now_us, micd's clock: tests inject it).
 * Returns MIC_OK, or a store error (MIC_EIO, MIC_ENOMEM): then the ring
 * is unchanged. */
int mic_history_sample(mic_history *h);

/* Start the sampler thread: a sample at once, then one every
 * 'interval_ms' (MIC_HISTORY_INTERVAL_MS in micd) until
 * mic_history_stop; a failed sample is logged and skipped.  MIC_OK, or
 * MIC_ENOMEM when the thread cannot be made. */
int mic_history_start(mic_history *h, int interval_ms);

/* Stop the sampler thread and wait for it (no effect if none runs). */
void mic_history_stop(mic_history *h);

/* Append GET /v1/stats/history's JSON to 'out': only the groups 'key'
 * covers (NULL: all), oldest point first --
 *   {"interval_s","points_max","groups_max","groups_untracked",
 *    "times":[RFC 3339, ...],
 *    "groups":[{"group","backlog":[N|null,...],
 *               "oldest_unhandled_age_s":[S|null,...]}]}
 * each group's arrays as long as "times", null where the group did not
 * exist then (both) or nothing waited (the age); groups sorted by name.
 * Returns MIC_OK, or MIC_ENOMEM (out's oom flag is set). */
int mic_history_render(mic_history *h, const struct mic_key *key, struct mic_buf *out);

#endif
