/* replay.c - time-range reads (DESIGN section 5).
 *
 * A topic's events are read from the time index (topic_id, created_at,
 * event_id) -> seq, so a range is one seek and then a walk in
 * (created_at, event_id) order; bounds are inclusive.  A page's cursor is
 * "<created_at µs>:<event_id>" of its last event.  The NDJSON stream keeps
 * only its position and at most one chunk (CHUNK bytes, or one event if it
 * is larger) in memory, and opens a short read transaction per chunk, so a
 * range of any size streams in constant memory without holding a snapshot
 * (or a map resize) for its whole duration. */
#define _POSIX_C_SOURCE 200809L
#include "replay.h"

#include "buf.h"
#include "clock.h"
#include "err.h"
#include "event.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK (64 * 1024)

struct range {
    uint32_t topic_id;
    int64_t from_us, to_us;
    char from_id[MIC_EVENT_ID_MAX + 1];
    size_t from_idlen;
    int exclusive;           /* start after (from_us, from_id) */
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

static int parse_range(mic_store *s, const char *topic, const char *from,
                       const char *to, const char *after, struct range *q,
                       struct mic_error *err)
{
    struct mic_topic_rec tr;
    mic_txn *t;
    int rc;

    memset(q, 0, sizeof q[0]);
    q->to_us = mic_now_us();
    if (from && mic_time_parse(from, strlen(from), &q->from_us))
        return BADREQ("from", "from is an RFC 3339 time");
    if (to && mic_time_parse(to, strlen(to), &q->to_us))
        return BADREQ("to", "to is an RFC 3339 time");
    if (after) {
        const char *colon = strchr(after, ':');
        char *end;
        long long us = strtoll(after, &end, 10);
        if (!colon || end != colon || us < 0 || !mic_event_id_ok(colon + 1, strlen(colon + 1)))
            return BADREQ("after", "after takes the next cursor of the previous page");
        if (us > q->from_us || (us == q->from_us)) {
            q->from_us = us;
            q->from_idlen = strlen(colon + 1);
            memcpy(q->from_id, colon + 1, q->from_idlen);
            q->exclusive = 1;
        }
    }
    if (!mic_event_topic_ok(topic, strlen(topic)))
        return mic_error_set(err, MIC_ENOTFOUND, "not_found", NULL, "no topic %s", topic);
    if ((rc = mic_txn_begin(s, 0, &t)))
        return mic_error_set(err, rc, "internal", NULL, "%s", mic_strerror(rc));
    rc = mic_store_topic_get(t, topic, strlen(topic), &tr);
    mic_txn_abort(t);
    if (rc == MIC_ENOTFOUND)
        return mic_error_set(err, rc, "not_found", NULL, "no topic %s", topic);
    if (rc)
        return mic_error_set(err, rc, "internal", NULL, "%s", mic_strerror(rc));
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
    long lim = 100;
    char *end;
    int rc;

    if (limit) {
        lim = strtol(limit, &end, 10);
        if (*end || lim < 1 || lim > 1000)
            return BADREQ("limit", "limit is 1 to 1000");
    }
    if ((rc = parse_range(s, topic, from, to, after, &q, err)))
        return rc;
    memset(&p, 0, sizeof p);
    p.out = out;
    p.limit = (int)lim;
    if ((rc = mic_txn_begin(s, 0, &p.t)))
        return mic_error_set(err, rc, "internal", NULL, "%s", mic_strerror(rc));
    mic_buf_puts(out, "{\"events\":[");
    rc = mic_store_time_scan(p.t, q.topic_id, q.from_us, q.from_id, q.from_idlen,
                             q.exclusive, q.to_us, p.limit + 1, page_one, &p);
    mic_txn_abort(p.t);
    if (rc == 1)
        rc = p.rc;
    if (rc)
        return mic_error_set(err, rc, "internal", NULL, "%s", mic_strerror(rc));
    if (p.more) {
        mic_buf_printf(out, "],\"next\":\"%lld:", (long long)p.last_us);
        mic_buf_add(out, p.last_id, p.last_idlen);
        mic_buf_puts(out, "\"}");
    } else {
        mic_buf_puts(out, "],\"next\":null}");
    }
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
        return mic_error_set(err, MIC_ENOMEM, "internal", NULL, "out of memory");
    if ((rc = parse_range(s, topic, from, to, after, &r->q, err))) {
        free(r);
        return rc;
    }
    r->s = s;
    mic_buf_init(&r->pending);
    *out = r;
    return MIC_OK;
}

struct fill {
    mic_txn *t;
    mic_range *r;
    int rc, full;
};

static int fill_one(void *arg, int64_t at, const char *id, size_t idlen, uint64_t seq)
{
    struct fill *f = arg;
    struct mic_range *r = f->r;
    struct mic_rec rec;

    if (r->pending.len >= CHUNK) {
        f->full = 1;
        return 1;
    }
    if ((f->rc = mic_store_log_get(f->t, seq, &rec)))
        return 1;
    mic_buf_add(&r->pending, rec.json, rec.json_len);
    mic_buf_add(&r->pending, "\n", 1);
    r->q.from_us = at;
    memcpy(r->q.from_id, id, idlen);
    r->q.from_idlen = idlen;
    r->q.exclusive = 1;
    return 0;
}

/* Read the next chunk of events into r->pending. */
static int refill(mic_range *r)
{
    struct fill f = {NULL, r, MIC_OK, 0};
    int rc;

    r->pending.len = 0;
    r->off = 0;
    if ((rc = mic_txn_begin(r->s, 0, &f.t)))
        return rc;
    rc = mic_store_time_scan(f.t, r->q.topic_id, r->q.from_us, r->q.from_id,
                             r->q.from_idlen, r->q.exclusive, r->q.to_us, 1 << 30,
                             fill_one, &f);
    mic_txn_abort(f.t);
    if (rc == 1)
        rc = f.rc;
    if (rc)
        return rc;
    if (!f.full)
        r->done = 1;
    return r->pending.oom ? MIC_ENOMEM : MIC_OK;
}

ssize_t mic_range_read(mic_range *r, char *buf, size_t max)
{
    size_t n;

    while (r->off == r->pending.len) {
        if (r->done)
            return 0;
        if (refill(r))
            return -1;
    }
    n = r->pending.len - r->off;
    if (n > max)
        n = max;
    memcpy(buf, r->pending.p + r->off, n);
    r->off += n;
    return (ssize_t)n;
}

void mic_range_close(mic_range *r)
{
    if (!r)
        return;
    mic_buf_fini(&r->pending);
    free(r);
}
