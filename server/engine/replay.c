/* replay.c - time-range reads and replay runs (DESIGN section 5).
 *
 * A topic's events are read from the time index (topic_id, created_at,
 * event_id) -> seq, so a range is one seek and then a walk in
 * (created_at, event_id) order; bounds are inclusive.  A page's cursor is
 * "<created_at µs>:<event_id>" of its last event.  The NDJSON stream keeps
 * only its position in memory (plus one event when it is larger than the
 * HTTP library's buffer) and fills each buffer the library hands it in a
 * short read transaction, so a range of any size streams in constant memory
 * without holding a snapshot (or a map resize) for its whole duration; a
 * replay run's selection walks its range the same way (range_step). */
#define _GNU_SOURCE
#include "replay.h"

#include "core/buf.h"
#include "core/clock.h"
#include "core/config.h"
#include "delivery.h"
#include "core/err.h"
#include "event.h"
#include "core/json.h"
#include "store/catalog.h"

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct range {
    uint32_t topic_id;
    int64_t from_us, to_us;
    char from_id[MIC_EVENT_ID_MAX + 1];
    size_t from_idlen;
    int exclusive;           /* start after (from_us, from_id) */
    int limit;               /* a page's events at most */
};

struct mic_range {
    mic_store *s;
    struct range q;
    struct mic_buf pending;
    size_t off;
    int done;
};

#define BADREQ(field, ...) \
    mic_error_set(err, MIC_EINVAL, "invalid_request", field, __VA_ARGS__)

int mic_range_args_parse(const char *from, const char *to, const char *after,
                         const char *limit, int64_t now_us, struct mic_range_args *a,
                         struct mic_error *err)
{
    int rc;

    memset(a, 0, sizeof a[0]);
    a->to_us = now_us;
    if ((rc = mic_limit_arg(limit, 100, &a->limit, err)))
        return rc;
    if (from && mic_time_parse(from, strlen(from), &a->from_us))
        return BADREQ("from", "from is an RFC 3339 time");
    if (to && mic_time_parse(to, strlen(to), &a->to_us))
        return BADREQ("to", "to is an RFC 3339 time");
    if (after) {
        const char *colon = strchr(after, ':');
        char *end;
        long long us = strtoll(after, &end, 10);
        if (!colon || end != colon || us < 0 || !mic_event_id_ok(colon + 1, strlen(colon + 1)))
            return BADREQ("after", "after takes the next cursor of the previous page");
        if (us > a->from_us || (us == a->from_us)) {
            a->from_us = us;
            a->from_idlen = strlen(colon + 1);
            memcpy(a->from_id, colon + 1, a->from_idlen);
            a->exclusive = 1;
        }
    }
    return MIC_OK;
}

/* The arguments (mic_range_args_parse), then the topic (a read of the
 * topics index): fills 'q'. */
static int parse_range(mic_store *s, const char *topic, const char *from,
                       const char *to, const char *after, const char *limit,
                       struct range *q, struct mic_error *err)
{
    struct mic_range_args a;
    struct mic_topic_rec tr;
    mic_txn *t;
    int rc;

    /* "now": the later of micd's clock and the wall clock (clock.h) */
    if ((rc = mic_range_args_parse(from, to, after, limit, mic_clock_latest_us(), &a, err)))
        return rc;
    memset(q, 0, sizeof q[0]);
    q->from_us = a.from_us;
    q->to_us = a.to_us;
    memcpy(q->from_id, a.from_id, a.from_idlen);
    q->from_idlen = a.from_idlen;
    q->exclusive = a.exclusive;
    q->limit = (int)a.limit;
    if (!mic_event_topic_ok(topic, strlen(topic)))
        return mic_error_set(err, MIC_ENOTFOUND, "not_found", NULL, "no topic %s", topic);
    if ((rc = mic_txn_begin(s, 0, &t)))
        return mic_error_internal(err, rc);
    rc = mic_store_topic_get(t, topic, strlen(topic), &tr);
    mic_txn_abort(t);
    if (rc == MIC_ENOTFOUND)
        return mic_error_set(err, rc, "not_found", NULL, "no topic %s", topic);
    if (rc)
        return mic_error_internal(err, rc);
    q->topic_id = tr.id;
    return MIC_OK;
}

/* ---- Pages ---- */

struct page {
    mic_txn *t;
    struct mic_buf *out;
    int n, limit, more, rc;
    int64_t last_us;
    char last_id[MIC_EVENT_ID_MAX + 1];
    size_t last_idlen;
};

static int page_one(void *arg, int64_t at, const char *id, size_t idlen, uint64_t seq)
{
    struct page *p = arg;
    struct mic_rec r;

    if (p->n == p->limit) {
        p->more = 1;
        return 1;
    }
    if ((p->rc = mic_store_log_get(p->t, seq, &r)))
        return 1;
    if (p->n++)
        mic_buf_add(p->out, ",", 1);
    mic_buf_add(p->out, r.json, r.json_len);
    p->last_us = at;
    memcpy(p->last_id, id, idlen);
    p->last_idlen = idlen;
    return 0;
}

int mic_range_page(mic_store *s, const char *topic, const char *from,
                   const char *to, const char *after, const char *limit,
                   struct mic_buf *out, struct mic_error *err)
{
    struct range q;
    struct page p;
    int rc;

    if ((rc = parse_range(s, topic, from, to, after, limit, &q, err)))
        return rc;
    memset(&p, 0, sizeof p);
    p.out = out;
    p.limit = q.limit;
    if ((rc = mic_txn_begin(s, 0, &p.t)))
        return mic_error_internal(err, rc);
    mic_buf_puts(out, "{\"events\":[");
    rc = mic_store_time_scan(p.t, q.topic_id, q.from_us, q.from_id, q.from_idlen,
                             q.exclusive, q.to_us, p.limit + 1, page_one, &p);
    mic_txn_abort(p.t);
    if (rc == 1)
        rc = p.rc;
    if (rc)
        return mic_error_internal(err, rc);
    if (p.more) {
        mic_buf_printf(out, "],\"next\":\"%lld:", (long long)p.last_us);
        mic_buf_add(out, p.last_id, p.last_idlen);
        mic_buf_puts(out, "\"}");
    } else {
        mic_buf_puts(out, "],\"next\":null}");
    }
    return MIC_OK;
}

/* ---- Walking a range from its cursor ----
 *
 * A walk keeps only its position in its 'struct range' (from_us, from_id,
 * exclusive) and reads each step in a read transaction of its own, so it
 * holds no snapshot, and no map resize waits, between two steps.  The
 * NDJSON stream takes a step per buffer the HTTP library hands it; the
 * selection of a replay run takes steps of select_chunk entries. */

/* A step's callback answers, for each entry, one of these. */
enum { STEP_TAKE, STEP_STOP, STEP_TAKE_STOP };

/* Called for an entry of the walk in its step's transaction 't'. */
typedef int (*step_fn)(void *arg, mic_txn *t, int64_t at, const char *id, size_t idlen,
                       uint64_t seq);

struct step {
    mic_txn *t;
    struct range *q;
    step_fn fn;
    void *arg;
    int n, stopped;
};

/* Move the walk's start just past (at, id). */
static void advance(struct range *q, int64_t at, const char *id, size_t idlen)
{
    q->from_us = at;
    memcpy(q->from_id, id, idlen);
    q->from_idlen = idlen;
    q->exclusive = 1;
}

static int step_one(void *arg, int64_t at, const char *id, size_t idlen, uint64_t seq)
{
    struct step *st = arg;
    int rc = st->fn(st->arg, st->t, at, id, idlen, seq);

    st->n++;
    if (rc != STEP_STOP)
        advance(st->q, at, id, idlen);
    if (rc == STEP_TAKE)
        return 0;
    st->stopped = 1;
    return 1;
}

/* One step of the walk over 'q': fn for up to 'max' entries from its
 * cursor, in one read transaction of 's'; each entry fn takes (STEP_TAKE,
 * STEP_TAKE_STOP) moves the cursor past it, and STEP_STOP leaves it there.
 * *done is set when the range has no entry left (fn did not stop the
 * step and fewer than 'max' were seen).  Returns MIC_OK or the store's
 * error (fn reports its own through 'arg'). */
static int range_step(mic_store *s, struct range *q, int max, step_fn fn, void *arg,
                      int *done)
{
    struct step st = {NULL, q, fn, arg, 0, 0};
    int rc;

    if ((rc = mic_txn_begin(s, 0, &st.t)))
        return rc;
    rc = mic_store_time_scan(st.t, q->topic_id, q->from_us, q->from_id, q->from_idlen,
                             q->exclusive, q->to_us, max, step_one, &st);
    mic_txn_abort(st.t);
    if (rc && rc != 1)
        return rc;
    *done = !st.stopped && st.n < max;
    return MIC_OK;
}

/* ---- NDJSON stream ---- */

int mic_range_open(mic_store *s, const char *topic, const char *from,
                   const char *to, const char *after, mic_range **out,
                   struct mic_error *err)
{
    mic_range *r = calloc(1, sizeof *r);
    int rc;

    if (!r)
        return mic_error_internal(err, MIC_ENOMEM);
    if ((rc = parse_range(s, topic, from, to, after, NULL, &r->q, err))) {
        free(r);
        return rc;
    }
    r->s = s;
    mic_buf_init(&r->pending);
    *out = r;
    return MIC_OK;
}

struct fill {
    mic_range *r;
    char *buf;          /* the caller's buffer: events go straight in */
    size_t max, len;
    int rc;
};

static int fill_one(void *arg, mic_txn *t, int64_t at, const char *id, size_t idlen,
                    uint64_t seq)
{
    struct fill *f = arg;
    struct mic_rec rec;

    (void)at;
    (void)id;
    (void)idlen;
    if ((f->rc = mic_store_log_get(t, seq, &rec)))
        return STEP_STOP;
    if (rec.json_len + 1 > f->max - f->len) {
        if (f->len)             /* no room left: the next read starts here */
            return STEP_STOP;
        /* One event larger than the whole buffer: hand it out piecewise. */
        mic_buf_add(&f->r->pending, rec.json, rec.json_len);
        mic_buf_add(&f->r->pending, "\n", 1);
        return STEP_TAKE_STOP;
    }
    memcpy(f->buf + f->len, rec.json, rec.json_len);
    f->buf[f->len + rec.json_len] = '\n';
    f->len += rec.json_len + 1;
    return STEP_TAKE;
}

ssize_t mic_range_read(mic_range *r, char *buf, size_t max)
{
    struct fill f = {r, buf, max, 0, MIC_OK};
    int done = 0;

    if (r->off < r->pending.len) {      /* the rest of an oversized event */
        size_t n = r->pending.len - r->off;

        if (n > max)
            n = max;
        memcpy(buf, r->pending.p + r->off, n);
        r->off += n;
        return (ssize_t)n;
    }
    r->pending.len = r->off = 0;
    if (r->done || max == 0)
        return 0;
    if (range_step(r->s, &r->q, 1 << 30, fill_one, &f, &done) || f.rc || r->pending.oom)
        return -1;
    r->done = done;
    if (f.len)
        return (ssize_t)f.len;
    return r->pending.len ? mic_range_read(r, buf, max) : 0;
}

void mic_range_close(mic_range *r)
{
    if (!r)
        return;
    mic_buf_fini(&r->pending);
    free(r);
}

/* ---- Replay runs ----
 *
 * POST /v1/replays fixes the selection once: the topic's events with
 * created_at in [from, to] and seq at most the last seq committed when the
 * request is parsed (seq_max, read in the handler thread).  The selector's
 * thread (below) counts them and computes the digest (DESIGN section 12)
 * walking the time index SELECT_CHUNK entries per read transaction
 * (range_step, as the NDJSON stream does), so a selection of any size
 * holds no HTTP thread, no snapshot, and keeps no map growth waiting for
 * longer than one chunk.  seq_max, not the end of a transaction, fixes its
 * end: an event published into the range meanwhile has a larger seq and is
 * passed over wherever it falls; one retention removes before its chunk is
 * read is not selected (one it removes later is 'lost', below).
 * The writer then records the run and creates its group `replay.<run_id>`
 * (ordered, lease 30 s, 10 attempts, dlq_policy release), which takes no
 * live events; the deliveries are added RUN_CHUNK events per writer
 * batch, walking the time index from the run's cursor, so a large run does
 * not stall other requests.  When the walk is done, the group's heads are
 * released (ordered groups pick no head before all events are in).
 *
 * Status.  GET /v1/replays/{run_id} reads the run record and its group's
 * figures (a few seeks, whatever the run's size): every delivery of the
 * group is one of the run's selected events, so dispatched = dispatched +
 * skipped (totals), dlq = dead letters now + lost, and pending = selected
 * - dispatched - dlq, which counts the selected events not added yet too;
 * so selected = dispatched + pending + dlq from the moment the run exists.
 * 'lost' counts the selected events retention removed before they could be
 * dispatched: a dead letter removed (mic_replay_removing), or an event
 * removed between the selection and the run's record (the walk finds fewer
 * events than selected: 'added' tells).  Retention keeps every event a run
 * still has to add (mic_replay_holds), so the last case needs that race.
 *
 * Run record (`runs` value): a header, then the run's description as JSON
 * (what POST answers, plus from/to/kind/...) without its closing brace:
 *   0 u8 selecting, 1 u8 cursor id length, 2 u8 cursor exclusive,
 *   3 u8 layout (0: the first, 168-byte header; 1: RUN_HDR bytes),
 *   4 u32 topic_id, 8 u64 from µs, 16 u64 to µs, 24 u64 seq_max,
 *   32 u64 cursor µs, 40 cursor id (128 bytes),
 *   layout 1: 168 u64 selected, 176 u64 added (deliveries made so far),
 *   184 u64 lost.
 * A layout-0 record is read with 'selected' from its description, 'added'
 * unknown and 'lost' 0; the writer rewrites it in layout 1 when it changes
 * it. */

#define RUN_HDR_V0 168
#define RUN_HDR 192
#define RUN_CHUNK 2000
#define RUN_ID_MAX 64
#define ADDED_UNKNOWN UINT64_MAX

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

/* A run record, decoded. */
struct run {
    uint8_t selecting, cur_excl;
    uint32_t topic_id;
    int64_t from_us, to_us, cur_us;
    uint64_t seq_max, selected, added, lost;
    size_t cur_len;
    char cur_id[MIC_EVENT_ID_MAX + 1];
    const char *desc;   /* the description, borrowed from the record */
    size_t desc_len;
};

/* The "selected" member of a layout-0 description (the first one: no
 * string of the description can hold ,"selected": unescaped). */
static int desc_selected(const char *d, size_t n, uint64_t *out)
{
    static const char key[] = ",\"selected\":";
    size_t k = sizeof key - 1;

    for (size_t i = 0; i + k <= n; i++) {
        if (memcmp(d + i, key, k))
            continue;
        *out = 0;
        for (i += k; i < n && d[i] >= '0' && d[i] <= '9'; i++)
            *out = *out * 10 + (uint64_t)(d[i] - '0');
        return MIC_OK;
    }
    return MIC_EIO;
}

/* Decode 'val' (borrowed: r->desc points into it).  MIC_EIO if it is not
 * a run record. */
static int run_decode(const void *val, size_t vlen, struct run *r)
{
    const uint8_t *p = val;
    size_t hdr;

    memset(r, 0, sizeof *r);
    if (vlen < RUN_HDR_V0)
        return MIC_EIO;
    hdr = p[3] == 0 ? RUN_HDR_V0 : p[3] == 1 ? RUN_HDR : 0;
    if (!hdr || vlen < hdr || p[1] > MIC_EVENT_ID_MAX)
        return MIC_EIO;
    r->selecting = p[0];
    r->cur_len = p[1];
    r->cur_excl = p[2];
    r->topic_id = (uint32_t)p[4] << 24 | (uint32_t)p[5] << 16 | (uint32_t)p[6] << 8 | p[7];
    r->from_us = (int64_t)get64(p + 8);
    r->to_us = (int64_t)get64(p + 16);
    r->seq_max = get64(p + 24);
    r->cur_us = (int64_t)get64(p + 32);
    memcpy(r->cur_id, p + 40, r->cur_len);
    r->desc = (const char *)p + hdr;
    r->desc_len = vlen - hdr;
    if (hdr == RUN_HDR) {
        r->selected = get64(p + 168);
        r->added = get64(p + 176);
        r->lost = get64(p + 184);
        return MIC_OK;
    }
    r->added = ADDED_UNKNOWN;
    return desc_selected(r->desc, r->desc_len, &r->selected);
}

/* Encode 'r' in layout 1 into a new buffer (*out, free() it).  Returns
 * MIC_OK or MIC_ENOMEM. */
static int run_encode(const struct run *r, uint8_t **out, size_t *len)
{
    uint8_t *p = calloc(1, RUN_HDR + r->desc_len);

    if (!p)
        return MIC_ENOMEM;
    p[0] = r->selecting;
    p[1] = (uint8_t)r->cur_len;
    p[2] = r->cur_excl;
    p[3] = 1;
    p[4] = (uint8_t)(r->topic_id >> 24);
    p[5] = (uint8_t)(r->topic_id >> 16);
    p[6] = (uint8_t)(r->topic_id >> 8);
    p[7] = (uint8_t)r->topic_id;
    put64(p + 8, (uint64_t)r->from_us);
    put64(p + 16, (uint64_t)r->to_us);
    put64(p + 24, r->seq_max);
    put64(p + 32, (uint64_t)r->cur_us);
    memcpy(p + 40, r->cur_id, r->cur_len);
    put64(p + 168, r->selected);
    put64(p + 176, r->added);
    put64(p + 184, r->lost);
    if (r->desc_len)
        memcpy(p + RUN_HDR, r->desc, r->desc_len);
    *out = p;
    *len = RUN_HDR + r->desc_len;
    return MIC_OK;
}

/* Write 'r' back as run 'id' (writer thread). */
static int run_put(struct mic_wctx *w, const char *id, const struct run *r)
{
    uint8_t *p;
    size_t len;
    int rc = run_encode(r, &p, &len);

    if (rc)
        return rc;
    rc = mic_store_run_put(w->txn, id, strlen(id), p, len);
    free(p);
    return rc;
}

struct mic_replay_op {
    mic_op op; /* first */
    int del;
    char run_id[RUN_ID_MAX + 1];
    char *rec;          /* the run record to store */
    size_t rec_len;
    char *group_json;   /* the run's group resource */
    size_t group_len;
    struct mic_buf answer;
    struct mic_error err;
    /* POST: what mic_replay_create_parse found, for mic_replay_select */
    struct range q;
    uint64_t seq_max;   /* the last seq committed when it was parsed */
    char *topic, *tpv_txt;
    int effect, allow;
    /* in a selector's queue */
    struct mic_replay_op *next;
    void (*selected)(mic_replay_op *o, int rc, void *arg);
    void *selected_arg;
};

/* ---- The selection (handler thread) ---- */

#define SELECT_CHUNK 4096
#define SELECT_PAUSE_MAX_NS 100000000ull /* one pause at most (a chunk's CPU is far less) */

struct selection {
    EVP_MD_CTX *md;
    atomic_int *cancel;     /* nonzero: stop at the next chunk (may be NULL) */
    uint64_t seq_max, n;
    int share;              /* percent of a core at most (100: no pauses) */
    size_t len;             /* digest lines in 'lines', not hashed yet */
    char lines[8192];
};

static int select_chunk = SELECT_CHUNK;
static void (*select_hook)(void *arg);
static void *select_hook_arg;

void mic_replay_set_select_hook(int chunk, void (*fn)(void *arg), void *arg)
{
    select_chunk = chunk > 0 ? chunk : SELECT_CHUNK;
    select_hook = fn;
    select_hook_arg = arg;
}

uint64_t mic_replay_select_pause_ns(uint64_t chunk_ns, int share)
{
    uint64_t pause;

    if (share >= 100)
        return 0;
    if (share < 1)
        share = 1;
    if (chunk_ns > SELECT_PAUSE_MAX_NS) /* no overflow below */
        chunk_ns = SELECT_PAUSE_MAX_NS;
    pause = chunk_ns * (uint64_t)(100 - share) / (uint64_t)share;
    return pause < SELECT_PAUSE_MAX_NS ? pause : SELECT_PAUSE_MAX_NS;
}

/* The digest lines gathered so far into the digest: one call for many
 * lines (a call per 53-byte line cost a tenth of the selection). */
static void select_flush(struct selection *s)
{
    if (s->len)
        EVP_DigestUpdate(s->md, s->lines, s->len);
    s->len = 0;
}

static int select_one(void *arg, mic_txn *t, int64_t at, const char *id, size_t idlen,
                      uint64_t seq)
{
    struct selection *s = arg;
    char *line;

    (void)t;
    if (seq > s->seq_max)
        return STEP_TAKE; /* stored after the selection began: passed over */
    if (sizeof s->lines - s->len < MIC_TIME_LEN + 2 + MIC_EVENT_ID_MAX + 1)
        select_flush(s);
    line = s->lines + s->len;
    mic_time_format(at, line);
    line[MIC_TIME_LEN] = '\t';
    memcpy(line + MIC_TIME_LEN + 1, id, idlen);
    line[MIC_TIME_LEN + 1 + idlen] = '\n';
    s->len += MIC_TIME_LEN + 2 + idlen;
    s->n++;
    return STEP_TAKE;
}

/* This thread's CPU time in ns (0 if it cannot be read: no pauses). */
static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;

    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts))
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Sleep 'ns' (a signal cuts it short: the next chunk comes sooner). */
static void pause_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};

    (void)nanosleep(&ts, NULL);
}

/* Select range 'q' (a copy is walked; 'q' is left as it is) into 'sel'
 * (its digest begun, its seq_max and share set; the lines not hashed yet
 * are left in sel->lines): the time index is walked select_chunk entries
 * per read transaction, and after each chunk the thread sleeps
 * mic_replay_select_pause_ns(the chunk's CPU time, sel->share).  Returns
 * MIC_OK, the store's error, or MIC_ENOTREADY once *sel->cancel is set. */
static int select_range(mic_store *s, const struct range *q, struct selection *sel)
{
    struct range walk = *q;
    int rc = MIC_OK, done = 0;

    while (!rc) {
        uint64_t t0 = sel->share < 100 ? thread_cpu_ns() : 0, pause;

        if (sel->cancel && atomic_load(sel->cancel))
            return MIC_ENOTREADY;
        if ((rc = range_step(s, &walk, select_chunk, select_one, sel, &done)) || done)
            break;
        if (sel->share < 100 && t0 &&
            (pause = mic_replay_select_pause_ns(thread_cpu_ns() - t0, sel->share)))
            pause_ns(pause);
        if (select_hook)
            select_hook(select_hook_arg);
    }
    return rc;
}

static int run_id_ok(const char *s, size_t n)
{
    if (n == 0 || n > RUN_ID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '.' || s[i] == '_' || s[i] == '-'))
            return 0;
    return 1;
}

/* The body's topic, and its from and to (NULL when absent): borrowed from 'j'. */
static int create_range_fields(json_t *j, const char **topic, const char **from,
                               const char **to, struct mic_error *err)
{
    json_t *v = json_object_get(j, "topic");

    if (!json_is_string(v))
        return BADREQ("topic", "topic is required");
    *topic = json_string_value(v);
    if ((v = json_object_get(j, "from")) && !(*from = json_string_value(v)))
        return BADREQ("from", "from is an RFC 3339 time");
    if ((v = json_object_get(j, "to")) && !(*to = json_string_value(v)))
        return BADREQ("to", "to is an RFC 3339 time");
    return MIC_OK;
}

/* kind and effects into o->effect and o->allow (an effect run needs allow). */
static int create_kind(json_t *j, mic_replay_op *o, struct mic_error *err)
{
    int rc;

    if ((rc = mic_json_either(j, "kind", "projection", "effect", &o->effect,
                              "kind is projection or effect", err)) ||
        (rc = mic_json_either(j, "effects", "forbid", "allow", &o->allow,
                              "effects is forbid or allow", err)))
        return rc;
    if (o->effect && !o->allow)
        return BADREQ("effects", "a replay of kind effect re-runs external effects: "
                                 "it needs \"effects\":\"allow\"");
    return MIC_OK;
}

/* target_projection_version as JSON text into o->tpv_txt, 'topic' into o->topic. */
static int create_tpv(json_t *j, const char *topic, mic_replay_op *o, struct mic_error *err)
{
    json_t *tpv = json_object_get(j, "target_projection_version");

    if (tpv && !json_is_string(tpv) && !json_is_integer(tpv) && !json_is_null(tpv))
        return BADREQ("target_projection_version", "a string or an integer");
    o->tpv_txt = json_dumps(tpv ? tpv : json_null(), JSON_ENCODE_ANY | JSON_COMPACT);
    if (!o->tpv_txt || !(o->topic = strdup(topic)))
        return mic_error_internal(err, MIC_ENOMEM);
    return MIC_OK;
}

/* The body's run_id into o->run_id, or a random "r-" and 16 hex digits. */
static int create_run_id(json_t *j, mic_replay_op *o, struct mic_error *err)
{
    json_t *v = json_object_get(j, "run_id");
    unsigned char rnd[8];

    if (v) {
        if (!json_is_string(v) || !run_id_ok(json_string_value(v), json_string_length(v)))
            return BADREQ("run_id", "run_id matches [A-Za-z0-9._-]{1,64}");
        memcpy(o->run_id, json_string_value(v), json_string_length(v));
        return MIC_OK;
    }
    if (RAND_bytes(rnd, sizeof rnd) != 1)
        return mic_error_set(err, MIC_EIO, "internal", NULL, "no randomness");
    snprintf(o->run_id, sizeof o->run_id, "r-%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0],
             rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
    return MIC_OK;
}

/* The selection's end: the last seq stored now (selected later) into o->seq_max. */
static int create_seq_max(mic_store *s, mic_replay_op *o, struct mic_error *err)
{
    mic_txn *t;
    int rc;

    if ((rc = mic_txn_begin(s, 0, &t)))
        return mic_error_internal(err, rc);
    rc = mic_store_last_seq(t, &o->seq_max);
    mic_txn_abort(t);
    return rc ? mic_error_internal(err, rc) : MIC_OK;
}

int mic_replay_create_parse(mic_store *s, const char *body, size_t len,
                            const struct mic_config *cfg, mic_replay_op **out,
                            struct mic_error *err)
{
    static const char *const known[] = {"topic", "from", "to", "run_id", "kind",
                                        "target_projection_version", "effects", NULL};
    const char *topic = NULL, *from = NULL, *to = NULL;
    mic_replay_op *o = NULL;
    json_t *j = NULL;
    int rc;

    if ((rc = mic_json_load(body, len, cfg->max_depth, &j, err)))
        return rc;
    if (!json_is_object(j)) {
        rc = BADREQ(NULL, "the body must be a JSON object");
        goto fail;
    }
    if ((rc = mic_json_keys_known(j, known, err)) ||
        (rc = create_range_fields(j, &topic, &from, &to, err)))
        goto fail;
    if (!(o = calloc(1, sizeof *o))) {
        rc = mic_error_internal(err, MIC_ENOMEM);
        goto fail;
    }
    o->op.apply = NULL; /* set by mic_replay_op_base */
    mic_buf_init(&o->answer);
    if ((rc = create_kind(j, o, err)) || (rc = create_tpv(j, topic, o, err)) ||
        (rc = create_run_id(j, o, err)) ||
        (rc = parse_range(s, topic, from, to, NULL, NULL, &o->q, err)))
        goto fail;
    if (o->q.from_us > o->q.to_us) {
        rc = BADREQ("to", "to is before from");
        goto fail;
    }
    if ((rc = create_seq_max(s, o, err)))
        goto fail;
    json_decref(j);
    *out = o;
    return MIC_OK;
fail:
    json_decref(j);
    mic_replay_op_free(o);
    return rc;
}

/* mic_replay_select, stopped between two chunks once *cancel (may be
 * NULL) is nonzero: MIC_ENOTREADY. */
static int select_op(mic_store *s, mic_replay_op *o, atomic_int *cancel, int share)
{
    struct selection *sel = calloc(1, sizeof *sel);
    unsigned char md[32];
    char digest[65], tbuf[MIC_TIME_LEN + 1];
    struct mic_buf info, gj;
    const char *kind = o->effect ? "effect" : "projection";
    const char *effects = o->allow ? "allow" : "forbid";
    int rc;

    mic_buf_init(&info);
    mic_buf_init(&gj);
    /* The selection, once (in chunks: see "Replay runs" above). */
    if (!sel || !(sel->md = EVP_MD_CTX_new()) ||
        !EVP_DigestInit_ex(sel->md, EVP_sha256(), NULL)) {
        rc = MIC_ENOMEM;
        goto fail;
    }
    sel->cancel = cancel;
    sel->seq_max = o->seq_max;
    sel->share = share;
    if ((rc = select_range(s, &o->q, sel)))
        goto fail;
    select_flush(sel);
    EVP_DigestFinal_ex(sel->md, md, NULL);
    for (int i = 0; i < 32; i++)
        snprintf(digest + 2 * i, 3, "%02x", md[i]);
    /* The run's description. */
    mic_buf_puts(&info, "{\"run_id\":");
    mic_buf_json_str(&info, o->run_id, strlen(o->run_id));
    mic_buf_puts(&info, ",\"topic\":");
    mic_buf_json_str(&info, o->topic, strlen(o->topic));
    mic_time_format(o->q.from_us, tbuf);
    mic_buf_printf(&info, ",\"from\":\"%s\"", tbuf);
    mic_time_format(o->q.to_us, tbuf);
    mic_buf_printf(&info, ",\"to\":\"%s\",\"kind\":\"%s\",\"effects\":\"%s\","
                          "\"target_projection_version\":%s,\"group\":\"replay.%s\","
                          "\"selected\":%llu,\"digest\":\"%s\"",
                   tbuf, kind, effects, o->tpv_txt, o->run_id, (unsigned long long)sel->n,
                   digest);
    /* The record: header, then the description (without its closing brace). */
    if (info.oom) {
        rc = MIC_ENOMEM;
        goto fail;
    }
    {
        struct run r;
        uint8_t *p;

        memset(&r, 0, sizeof r);
        r.selecting = 1;
        r.topic_id = o->q.topic_id;
        r.from_us = r.cur_us = o->q.from_us;
        r.to_us = o->q.to_us;
        r.seq_max = sel->seq_max;
        r.selected = sel->n;
        r.desc = info.p;
        r.desc_len = info.len;
        if ((rc = run_encode(&r, &p, &o->rec_len)))
            goto fail;
        o->rec = (char *)p;
    }
    /* The run's group. */
    mic_buf_printf(&gj, "{\"name\":\"replay.%s\",\"topics\":[", o->run_id);
    mic_buf_json_str(&gj, o->topic, strlen(o->topic));
    /* The group's defaults (group.h), written out: the run's group is
     * stored as the resource it is. */
    mic_buf_printf(&gj, "],\"kind\":\"%s\",\"ordered\":true,\"max_attempts\":%d,"
                        "\"backoff\":{\"initial_ms\":%d,\"max_ms\":%d,\"multiplier\":%d},"
                        "\"lease_ttl_s\":%d,\"start\":\"all\",\"alert_oldest_unhandled_s\":null,"
                        "\"dlq_policy\":\"release\",\"replay_run\":\"%s\","
                        "\"replay\":{\"batch_id\":\"%s\",\"effects\":\"%s\","
                        "\"target_projection_version\":%s}}",
                   kind, MIC_GROUP_MAX_ATTEMPTS, MIC_GROUP_BACKOFF_INITIAL_MS,
                   MIC_GROUP_BACKOFF_MAX_MS, MIC_GROUP_BACKOFF_MULTIPLIER, MIC_GROUP_LEASE_TTL_S,
                   o->run_id, o->run_id, effects, o->tpv_txt);
    if (gj.oom) {
        rc = MIC_ENOMEM;
        goto fail;
    }
    o->group_json = mic_buf_steal(&gj, &o->group_len);
    mic_buf_printf(&o->answer, "{\"run_id\":\"%s\",\"group\":\"replay.%s\",\"selected\":%llu,"
                               "\"digest\":\"%s\",\"state\":\"running\"}",
                   o->run_id, o->run_id, (unsigned long long)sel->n, digest);
    if (o->answer.oom) {
        rc = MIC_ENOMEM;
        goto fail;
    }
    EVP_MD_CTX_free(sel->md);
    free(sel);
    mic_buf_fini(&info);
    return MIC_OK;
fail:
    if (sel)
        EVP_MD_CTX_free(sel->md);
    free(sel);
    mic_buf_fini(&info);
    mic_buf_fini(&gj);
    if (rc == MIC_ENOTREADY)
        mic_error_set(&o->err, rc, "not_ready", NULL, "the server is shutting down");
    else
        mic_error_internal(&o->err, rc);
    return rc;
}

int mic_replay_select(mic_store *s, mic_replay_op *o)
{
    return select_op(s, o, NULL, 100);
}

/* ---- The selector ----
 *
 * One thread takes the selections of POST /v1/replays in turn, so that
 * none ties up an HTTP thread (and every connection it serves) for its
 * length.  It runs at nice +10 against micd's other threads: on a busy
 * machine the publishes and claims go first and a selection takes longer.
 * It paces each selection to 'share' percent of one core at most
 * (select_range): a lower priority alone does not keep a CPU-bound thread
 * from costing the other threads' tails on a small machine (bench/
 * replaysel.sh), a CPU it leaves idle most of the time does.
 * 'lock' guards the queue (head, tail); 'stop' is set once, and read
 * between two chunks of the running selection; 'wake' is signalled when
 * an op is queued or 'stop' is set. */
struct mic_selector {
    mic_store *s;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    mic_replay_op *head, *tail;
    atomic_int stop;
    int share;              /* --replay-select-share */
};

static void *selector_main(void *arg)
{
    mic_selector *sl = arg;
    mic_replay_op *o;
    int rc;

    /* Linux: a thread's own nice value (setpriority(2), PRIO_PROCESS with
     * its thread id); a refusal leaves it as it is. */
    errno = 0;
    rc = getpriority(PRIO_PROCESS, 0);
    if (errno == 0 && rc < 10)
        (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), rc + 10);
    pthread_mutex_lock(&sl->lock);
    for (;;) {
        while (!sl->head && !atomic_load(&sl->stop))
            pthread_cond_wait(&sl->wake, &sl->lock);
        if (!(o = sl->head))
            break;
        if (!(sl->head = o->next))
            sl->tail = NULL;
        pthread_mutex_unlock(&sl->lock);
        rc = select_op(sl->s, o, &sl->stop, sl->share);
        o->selected(o, rc, o->selected_arg); /* 'o' may be gone after it */
        pthread_mutex_lock(&sl->lock);
    }
    pthread_mutex_unlock(&sl->lock);
    return NULL;
}

int mic_selector_start(mic_selector **out, mic_store *s, int share)
{
    mic_selector *sl = calloc(1, sizeof *sl);

    if (!sl)
        return MIC_ENOMEM;
    sl->s = s;
    sl->share = share;
    atomic_init(&sl->stop, 0);
    pthread_mutex_init(&sl->lock, NULL);
    pthread_cond_init(&sl->wake, NULL);
    if (pthread_create(&sl->thread, NULL, selector_main, sl)) {
        pthread_cond_destroy(&sl->wake);
        pthread_mutex_destroy(&sl->lock);
        free(sl);
        return MIC_EIO;
    }
    *out = sl;
    return MIC_OK;
}

int mic_selector_submit(mic_selector *sl, mic_replay_op *o,
                        void (*done)(mic_replay_op *o, int rc, void *arg), void *arg)
{
    pthread_mutex_lock(&sl->lock);
    if (atomic_load(&sl->stop)) {
        pthread_mutex_unlock(&sl->lock);
        return MIC_ENOTREADY;
    }
    o->next = NULL;
    o->selected = done;
    o->selected_arg = arg;
    if (sl->tail)
        sl->tail->next = o;
    else
        sl->head = o;
    sl->tail = o;
    pthread_cond_signal(&sl->wake);
    pthread_mutex_unlock(&sl->lock);
    return MIC_OK;
}

void mic_selector_stop(mic_selector *sl)
{
    if (!sl)
        return;
    pthread_mutex_lock(&sl->lock);
    atomic_store(&sl->stop, 1);
    pthread_cond_signal(&sl->wake);
    pthread_mutex_unlock(&sl->lock);
    pthread_join(sl->thread, NULL);
    pthread_cond_destroy(&sl->wake);
    pthread_mutex_destroy(&sl->lock);
    free(sl);
}

static int create_apply(mic_op *op, struct mic_wctx *w)
{
    mic_replay_op *o = (mic_replay_op *)op;
    char name[8 + RUN_ID_MAX + 1];
    struct mic_group *gr;
    const void *val;
    size_t vlen;
    int rc;

    o->err.err = MIC_OK;
    rc = mic_store_run_get(w->txn, o->run_id, strlen(o->run_id), &val, &vlen);
    snprintf(name, sizeof name, "replay.%s", o->run_id);
    if (rc == MIC_OK || mic_groups_find(w->groups, name, strlen(name))) {
        mic_error_set(&o->err, MIC_ECONFLICT, "replay_exists", "run_id",
                      "a replay run %s exists", o->run_id);
        return MIC_OK;
    }
    if (rc != MIC_ENOTFOUND)
        return rc;
    if ((rc = mic_groups_create(w->groups, w, name, o->group_json, o->group_len, 1, &gr)) ||
        (rc = mic_store_run_put(w->txn, o->run_id, strlen(o->run_id), o->rec, o->rec_len)))
        return rc == MIC_ECONFLICT ? MIC_EIO : rc;
    return MIC_OK;
}

static int delete_apply(mic_op *op, struct mic_wctx *w)
{
    mic_replay_op *o = (mic_replay_op *)op;
    char name[8 + RUN_ID_MAX + 1];
    struct mic_group *gr;
    const void *val;
    size_t vlen;
    int rc;

    o->err.err = MIC_OK;
    rc = mic_store_run_get(w->txn, o->run_id, strlen(o->run_id), &val, &vlen);
    if (rc == MIC_ENOTFOUND) {
        mic_error_set(&o->err, MIC_ENOTFOUND, "not_found", NULL, "no replay run %s", o->run_id);
        return MIC_OK;
    }
    if (rc || (rc = mic_store_run_del(w->txn, o->run_id, strlen(o->run_id))))
        return rc;
    snprintf(name, sizeof name, "replay.%s", o->run_id);
    if ((gr = mic_groups_find(w->groups, name, strlen(name))))
        return mic_groups_delete(w->groups, w, gr);
    return MIC_OK;
}

int mic_replay_delete_parse(const char *run_id, mic_replay_op **out,
                            struct mic_error *err)
{
    mic_replay_op *o;

    if (!run_id_ok(run_id, strlen(run_id)))
        return mic_error_set(err, MIC_ENOTFOUND, "not_found", NULL, "no replay run %s", run_id);
    if (!(o = calloc(1, sizeof *o)))
        return mic_error_internal(err, MIC_ENOMEM);
    o->del = 1;
    o->op.apply = delete_apply;
    mic_buf_init(&o->answer);
    memcpy(o->run_id, run_id, strlen(run_id));
    *out = o;
    return MIC_OK;
}

mic_op *mic_replay_op_base(mic_replay_op *o)
{
    if (!o->del)
        o->op.apply = create_apply;
    return &o->op;
}

int mic_replay_op_result(mic_replay_op *o, struct mic_buf *out, struct mic_error *err)
{
    if (o->err.err) {
        *err = o->err;
        return o->err.err;
    }
    if (!o->del)
        mic_buf_add(out, o->answer.p, o->answer.len);
    return MIC_OK;
}

void mic_replay_op_free(mic_replay_op *o)
{
    if (!o)
        return;
    free(o->rec);
    free(o->group_json);
    free(o->topic);
    free(o->tpv_txt);
    mic_buf_fini(&o->answer);
    free(o);
}

/* ---- Adding a run's selection (writer thread) ---- */

struct find_run {
    char id[RUN_ID_MAX + 1];
    uint8_t *rec;       /* a copy of the record (run.desc points into it) */
    struct run run;
};

static int find_selecting(void *arg, const char *id, size_t len, const void *val, size_t vlen)
{
    struct find_run *f = arg;
    struct run r;

    if (len > RUN_ID_MAX || run_decode(val, vlen, &r) || !r.selecting)
        return 0;
    if (!(f->rec = malloc(vlen)))
        return MIC_ENOMEM;
    memcpy(f->rec, val, vlen);
    if (run_decode(f->rec, vlen, &f->run))
        return MIC_EIO;
    memcpy(f->id, id, len);
    f->id[len] = 0;
    return 1;
}

struct add_chunk {
    struct mic_wctx *w;
    struct mic_group *gr;
    struct run *run;
    int n, rc;
};

static int add_one(void *arg, int64_t at, const char *id, size_t idlen, uint64_t seq)
{
    struct add_chunk *a = arg;
    struct run *run = a->run;
    struct mic_rec r;

    a->n++;
    run->cur_excl = 1; /* exclusive from now on */
    run->cur_us = at;
    run->cur_len = idlen;
    memcpy(run->cur_id, id, idlen);
    if (seq > run->seq_max)
        return 0; /* stored after the selection was fixed */
    if ((a->rc = mic_store_log_get(a->w->txn, seq, &r))) /* corrupt: reported, left out */
        return a->rc == MIC_ENOTFOUND || a->rc == MIC_ECORRUPT ? (a->rc = 0) : 1;
    /* Its rank in the selection: the run goes out in (created_at,
     * event_id) order across aggregates (a record of the first layout,
     * which does not count what it added, goes by seq). */
    r.rank = run->added != ADDED_UNKNOWN ? run->added + 1 : 0;
    if ((a->rc = mic_delivery_add(a->w, a->gr, &r)))
        return 1;
    if (run->added != ADDED_UNKNOWN)
        run->added++;
    return 0;
}

int mic_replay_background(mic_groups *g, struct mic_wctx *w)
{
    struct find_run f;
    struct add_chunk a;
    struct mic_group *gr;
    char name[8 + RUN_ID_MAX + 1];
    struct run *run = &f.run;
    int rc;

    if (!mic_groups_selecting(g))
        return MIC_OK;
    memset(&f, 0, sizeof f);
    rc = mic_store_run_each(w->txn, find_selecting, &f);
    if (rc == 0) {
        mic_groups_selecting_done(g);
        return MIC_OK;
    }
    if (rc != 1) {
        free(f.rec);
        return rc;
    }
    snprintf(name, sizeof name, "replay.%s", f.id);
    if (!(gr = mic_groups_find(g, name, strlen(name)))) {
        run->selecting = 0; /* its group is gone: nothing to add */
    } else {
        memset(&a, 0, sizeof a);
        a.w = w;
        a.gr = gr;
        a.run = run;
        rc = mic_store_time_scan(w->txn, run->topic_id, run->cur_us, run->cur_id,
                                 run->cur_len, run->cur_excl, run->to_us, RUN_CHUNK,
                                 add_one, &a);
        if (rc == 1)
            rc = a.rc;
        if (rc) {
            free(f.rec);
            return rc;
        }
        if (a.n < RUN_CHUNK) {
            run->selecting = 0; /* all in */
            /* Selected events gone before the run could add them (removed
             * between the selection and the run's record). */
            if (run->added != ADDED_UNKNOWN && run->added < run->selected)
                run->lost += run->selected - run->added;
            if ((rc = mic_groups_selected(g, w, gr))) {
                free(f.rec);
                return rc;
            }
        }
    }
    rc = run_put(w, f.id, run);
    free(f.rec);
    return rc;
}

/* ---- Retention (writer thread) ---- */

/* The run of replay group 'gr', decoded into *r from a record borrowed
 * from w->txn.  MIC_ENOTFOUND when 'gr' is not a replay group, its run is
 * gone, or its record does not decode (retention then treats the group as
 * any other, rather than failing every batch). */
static int run_of(struct mic_wctx *w, const struct mic_group *gr, struct run *r)
{
    const void *val;
    size_t vlen;
    int rc;

    if (!mic_group_config(gr)->replay_run)
        return MIC_ENOTFOUND;
    if ((rc = mic_store_run_get(w->txn, mic_group_config(gr)->replay_run, strlen(mic_group_config(gr)->replay_run),
                                &val, &vlen)))
        return rc;
    return run_decode(val, vlen, r) ? MIC_ENOTFOUND : MIC_OK;
}

/* (a_us, a) against (b_us, b) in the time index's order: created_at, then
 * the id's bytes (a shorter prefix first). */
static int pos_cmp(int64_t a_us, const char *a, size_t alen, int64_t b_us, const char *b,
                   size_t blen)
{
    int c;

    if (a_us != b_us)
        return a_us < b_us ? -1 : 1;
    if ((c = memcmp(a, b, alen < blen ? alen : blen)))
        return c;
    return alen < blen ? -1 : alen > blen;
}

int mic_replay_holds(struct mic_wctx *w, const struct mic_group *gr, const struct mic_rec *r,
                     const char *id, size_t idlen, int *holds)
{
    struct run run;
    int rc = run_of(w, gr, &run);

    *holds = 0;
    if (rc == MIC_ENOTFOUND)
        return MIC_OK;
    if (rc)
        return rc;
    if (!run.selecting || r->topic_id != run.topic_id || r->seq > run.seq_max ||
        r->created_at_us < run.from_us || r->created_at_us > run.to_us)
        return MIC_OK;
    /* Not walked yet: after the cursor (or at it, before the first chunk). */
    rc = pos_cmp(r->created_at_us, id, idlen, run.cur_us, run.cur_id, run.cur_len);
    *holds = run.cur_excl ? rc > 0 : rc >= 0;
    return MIC_OK;
}

int mic_replay_removing(struct mic_wctx *w, const struct mic_group *gr, uint64_t seq)
{
    struct mic_dlv d;
    struct run run;
    int rc;

    if (!mic_group_config(gr)->replay_run)
        return MIC_OK;
    rc = mic_delivery_get(w->txn, mic_group_id(gr), seq, &d);
    if (rc == MIC_ENOTFOUND || (rc == MIC_OK && d.state != MIC_DLV_DLQ))
        return MIC_OK;
    if (rc)
        return rc;
    rc = run_of(w, gr, &run);
    if (rc == MIC_ENOTFOUND)
        return MIC_OK;
    if (rc)
        return rc;
    run.lost++;
    return run_put(w, mic_group_config(gr)->replay_run, &run);
}

/* ---- GET /v1/replays, GET /v1/replays/{run_id} ---- */

/* Append the status of run 'id' (record 'val', borrowed from 't'). */
static int run_status(mic_txn *t, const char *id, size_t len, const void *val, size_t vlen,
                      struct mic_buf *out)
{
    uint64_t fig[MIC_GSTAT_N], dispatched, dlq, pending;
    char name[8 + RUN_ID_MAX + 1];
    struct run r;
    uint32_t gid;
    int rc;

    if (len > RUN_ID_MAX || (rc = run_decode(val, vlen, &r)))
        return MIC_EIO;
    memset(fig, 0, sizeof fig);
    snprintf(name, sizeof name, "replay.%.*s", (int)len, id);
    rc = mic_group_gid(t, name, &gid);
    if (rc == MIC_OK)
        rc = mic_delivery_figures(t, gid, fig);
    else if (rc == MIC_ENOTFOUND)
        rc = MIC_OK;
    if (rc)
        return rc;
    dispatched = fig[MIC_GSTAT_DISPATCHED] + fig[MIC_GSTAT_SKIPPED];
    dlq = fig[MIC_GSTAT_DLQ] + r.lost;
    pending = r.selected > dispatched + dlq ? r.selected - dispatched - dlq : 0;
    mic_buf_add(out, r.desc, r.desc_len);
    mic_buf_printf(out, ",\"dispatched\":%llu,\"pending\":%llu,\"dlq\":%llu,\"state\":\"%s\"}",
                   (unsigned long long)dispatched, (unsigned long long)pending,
                   (unsigned long long)dlq, r.selecting || pending ? "running" : "drained");
    return MIC_OK;
}

int mic_replay_get(mic_store *s, const char *run_id, struct mic_buf *out,
                   struct mic_error *err)
{
    const void *val;
    size_t vlen;
    mic_txn *t;
    int rc;

    if (!run_id_ok(run_id, strlen(run_id)))
        return mic_error_set(err, MIC_ENOTFOUND, "not_found", NULL, "no replay run %s", run_id);
    if ((rc = mic_txn_begin(s, 0, &t)))
        return mic_error_internal(err, rc);
    rc = mic_store_run_get(t, run_id, strlen(run_id), &val, &vlen);
    if (rc == MIC_OK)
        rc = run_status(t, run_id, strlen(run_id), val, vlen, out);
    mic_txn_abort(t);
    if (rc == MIC_ENOTFOUND)
        return mic_error_set(err, rc, "not_found", NULL, "no replay run %s", run_id);
    if (rc)
        return mic_error_internal(err, rc);
    return MIC_OK;
}

struct list {
    mic_txn *t;
    struct mic_buf *out;
    int n;
};

static int list_one(void *arg, const char *id, size_t len, const void *val, size_t vlen)
{
    struct list *l = arg;

    if (l->n++)
        mic_buf_add(l->out, ",", 1);
    return run_status(l->t, id, len, val, vlen, l->out);
}

int mic_replay_list(mic_store *s, struct mic_buf *out, struct mic_error *err)
{
    struct list l = {NULL, out, 0};
    int rc;

    if ((rc = mic_txn_begin(s, 0, &l.t)))
        return mic_error_internal(err, rc);
    mic_buf_puts(out, "{\"replays\":[");
    rc = mic_store_run_each(l.t, list_one, &l);
    mic_buf_puts(out, "]}");
    mic_txn_abort(l.t);
    if (rc)
        return mic_error_internal(err, rc);
    return MIC_OK;
}
