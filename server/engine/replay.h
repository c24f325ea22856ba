/* replay.h - history out of the live log: time-range reads of a topic (JSON
 * pages or a constant-memory NDJSON stream) and replay runs. */
#ifndef MIC_REPLAY_H
#define MIC_REPLAY_H

#include <stddef.h>
#include <sys/types.h>

#include "event.h"
#include "group.h"
#include "store/store.h"
#include "writer.h"

struct mic_buf;
struct mic_config;
struct mic_error;
typedef struct mic_range mic_range;
typedef struct mic_replay_op mic_replay_op;

/* The query arguments of a range read, parsed. */
struct mic_range_args {
    int64_t from_us, to_us;  /* inclusive bounds, µs since the epoch */
    char from_id[MIC_EVENT_ID_MAX + 1]; /* after=: the cursor's event_id */
    size_t from_idlen;
    int exclusive;           /* start after (from_us, from_id) */
    long limit;              /* a page's events, 1..1000 */
};

/* Parse the query arguments of GET /v1/topics/{topic}/events (each
 * NUL-terminated as libmicrohttpd decodes it, NULL when absent): from and
 * to are RFC 3339 times (defaults: the beginning, and 'now_us'), after a
 * page's "next" cursor "<created_at µs>:<event_id>" (it moves the start
 * past that event when it is not before 'from'), limit 1..1000 (default
 * 100).  A pure function: no store, no clock, no allocation
 * (tests/fuzz/fuzz_range.c).  Returns MIC_OK with 'a' filled, or MIC_EINVAL
 * with 'err' naming the argument ("limit" is checked first, then "from",
 * "to", "after"). */
int mic_range_args_parse(const char *from, const char *to, const char *after,
                         const char *limit, int64_t now_us, struct mic_range_args *a,
                         struct mic_error *err);

/* GET /v1/topics/{topic}/events?from=&to=&after=&limit= as one JSON page:
 * {"events":[...],"next":CURSOR|null} appended to 'out'.  NULL arguments
 * take defaults.  MIC_OK, or 'err' filled: MIC_ENOTFOUND (no such topic),
 * MIC_EINVAL (a bad argument, with its name), "internal" for the store. */
int mic_range_page(mic_store *s, const char *topic, const char *from,
                   const char *to, const char *after, const char *limit,
                   struct mic_buf *out, struct mic_error *err);

/* The same range as NDJSON, read piecewise in constant memory: open,
 * then mic_range_read until it returns 0, then close.  _open returns as
 * mic_range_page does, with *out the caller's until mic_range_close. */
int mic_range_open(mic_store *s, const char *topic, const char *from,
                   const char *to, const char *after, mic_range **out,
                   struct mic_error *err);
/* Copy up to 'max' bytes of the stream into 'buf'; returns the count,
 * 0 at the end, -1 on a store error (the stream is then cut). */
ssize_t mic_range_read(mic_range *r, char *buf, size_t max);
void mic_range_close(mic_range *r);

/* ---- Replay runs ---- */

/* POST /v1/replays, first part (any thread): validate the body, find the
 * topic and note the last seq committed now (the selection's end),
 * preparing the op; its selection is not made yet.  MIC_OK
 * with *out (the caller's: mic_replay_op_free); else 'err' filled:
 * MIC_EPARSE, MIC_EINVAL (a field, with its name; an effect run without
 * effects allow), MIC_ENOTFOUND (no such topic), MIC_ENOMEM, MIC_EIO. */
int mic_replay_create_parse(mic_store *s, const char *body, size_t len,
                            const struct mic_config *cfg, mic_replay_op **out,
                            struct mic_error *err);
/* Second part (any thread but the writer; micd: the selector's): select
 * the events of 'o' once -- count and digest of those with created_at in
 * its range and seq at most the one _parse noted, read in chunks, each in
 * a short read transaction of its own --
 * and finish the op, which is then ready for the writer
 * (mic_replay_op_base).  Returns MIC_OK, or MIC_ENOMEM, MIC_EIO, ... with
 * the error also what mic_replay_op_result answers. */
int mic_replay_select(mic_store *s, mic_replay_op *o);
/* Test hook: the selection of mic_replay_select reads 'chunk'
 * entries of the time index per read transaction (0: the default) and
 * calls fn(arg) (NULL: nothing) between two chunks, with no transaction
 * open.  Set it while no selection runs. */
void mic_replay_set_select_hook(int chunk, void (*fn)(void *arg), void *arg);
/* The pause after a chunk of a selection that took 'chunk_ns' of CPU, so
 * that the selection uses 'share' percent of one core at most:
 * chunk_ns * (100 - share) / share ns, 0 for a share of 100 or more (a
 * share below 1 counts as 1), and at most 100 ms. */
uint64_t mic_replay_select_pause_ns(uint64_t chunk_ns, int share);
/* The selector: one thread of its own, at a lower CPU priority, makes
 * the selections (mic_replay_select) in turn, so that none holds an HTTP
 * thread, each paced to 'share' percent of one core at most (1..100,
 * micd's --replay-select-share; 100: no pauses) by a pause after each
 * chunk (mic_replay_select_pause_ns; mic_replay_select itself does not
 * pause).  _submit queues 'o' (from mic_replay_create_parse; the caller's
 * still, untouched until done): done(o, rc, arg) is then called once, in
 * the selector's thread, with mic_replay_select's result.  It returns
 * MIC_OK, or MIC_ENOTREADY once stopping (done is not called).  _stop
 * ends the running selection at its next chunk and those queued before
 * they begin, each done() with MIC_ENOTREADY (answered as 503
 * not_ready), then joins the thread and frees 'sl' (NULL: nothing). */
typedef struct mic_selector mic_selector;
int mic_selector_start(mic_selector **out, mic_store *s, int share);
int mic_selector_submit(mic_selector *sl, mic_replay_op *o,
                        void (*done)(mic_replay_op *o, int rc, void *arg), void *arg);
void mic_selector_stop(mic_selector *sl);
/* DELETE /v1/replays/{run_id}: MIC_OK with *out, or MIC_ENOTFOUND for a
 * run id that cannot exist, MIC_ENOMEM. */
int mic_replay_delete_parse(const char *run_id, mic_replay_op **out,
                            struct mic_error *err);
/* The op to submit to the writer (embedded in 'o': valid while 'o' is). */
mic_op *mic_replay_op_base(mic_replay_op *o);
/* After done(): the body (POST) or nothing (DELETE), or the error
 * (MIC_ECONFLICT replay_exists, MIC_ENOTFOUND). */
int mic_replay_op_result(mic_replay_op *o, struct mic_buf *out,
                         struct mic_error *err);
void mic_replay_op_free(mic_replay_op *o);

/* GET /v1/replays/{run_id}: append the run's status (its description,
 * then dispatched, pending, dlq and state, from the run record and its
 * group's figures: a few seeks whatever the run's size) to 'out'.  Read
 * transaction, any thread.  Returns MIC_OK; MIC_ENOTFOUND (no such run)
 * or MIC_EIO (a record that does not decode, or the store) with 'err'
 * filled. */
int mic_replay_get(mic_store *s, const char *run_id, struct mic_buf *out,
                   struct mic_error *err);

/* GET /v1/replays: append {"replays":[...]} to 'out', each item what
 * mic_replay_get answers, in run_id order.  Returns MIC_OK, or MIC_EIO
 * with 'err' filled. */
int mic_replay_list(mic_store *s, struct mic_buf *out, struct mic_error *err);

/* Writer hook: add one chunk (RUN_CHUNK events) of the selection of a run
 * still selecting to its group, while mic_groups_selecting says one may
 * be.  Returns MIC_OK or a store error (the batch aborts). */
int mic_replay_background(mic_groups *g, struct mic_wctx *w);

/* Retention (writer thread), for any group 'gr' (nothing to do unless it
 * is a replay run's group).  mic_replay_holds sets *holds when event 'r'
 * (its id 'id', idlen bytes) belongs to the run's selection and the run
 * has not added it yet: the event is pending in the run and must stay.
 * mic_replay_removing is called before the event 'seq' is removed: a dead
 * letter of the run is then counted as lost, so the run's counts still add
 * up to its selection.  Both return MIC_OK or a store error (MIC_EIO,
 * MIC_ENOSPC, MIC_ENOMEM: the batch aborts). */
int mic_replay_holds(struct mic_wctx *w, const struct mic_group *gr, const struct mic_rec *r,
                     const char *id, size_t idlen, int *holds);
int mic_replay_removing(struct mic_wctx *w, const struct mic_group *gr, uint64_t seq);

#endif
