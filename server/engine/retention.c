/* retention.c - retention (DESIGN section 5 "Archive", issue 5).
 *
 * Publish schedules each event's removal at received_at + its topic's
 * retention_s in the `expiry` index (due, seq): one entry per topic and
 * commit, for the range of seqs the topic stored in it (kept in memory
 * during the batch with the change of the topic's event count, both
 * written before the commit); the writer seeks the first entry before each
 * batch, so the sweep is deadline-driven and never scans the log beyond
 * the seqs of a range that came due.  Each event of a range goes at its
 * own deadline: the rest of a range waits in an entry of its own.  An
 * event is removed only when its delivery is terminal
 * (dispatched, dead-lettered, skipped) in every group, no group's backfill
 * (start `all` or a time) has it still ahead (mic_group_fills: a comparison
 * with the backfill's position), and no replay run still adding its
 * selection has it ahead (mic_replay_holds: it is pending in that run);
 * otherwise it is looked at again one retention period later
 * (at most RECHECK_MAX_S).  Nothing is walked per removal: the event's
 * topic comes from the writer's map of topic names by id
 * (mic_groups_topic_find), and only the groups that can hold a delivery of
 * it are asked -- the live groups subscribed to its topic and the replay
 * groups over it (mic_groups_holders, cached per topic), or every group if
 * its topic is unknown.  Before the removal commits, the event's
 * stored JSON is appended to `<archive-dir>/<topic>.ndjson` and fsync'd (a
 * crash between the two can leave a line twice: consumers of archives
 * deduplicate by event_id).  The removal drops the log record, its time
 * index entry and its deliveries; its event id stays remembered, so a
 * resend is still a duplicate, until dedupe_retain_s later.  Aggregate
 * versions stay reserved for good. */
#define _POSIX_C_SOURCE 200809L
#include "retention.h"

#include "eventlog.h"

#include "core/config.h"
#include "delivery.h"
#include "core/err.h"
#include "event.h"
#include "core/logger.h"
#include "replay.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SWEEP_PER_BATCH 1000
#define RECHECK_MAX_S 60

/* Topics kept per batch; a batch with more writes the oldest at once. */
#define TOPICS_PER_BATCH 16

struct count {
    uint32_t topic_id;
    int64_t delta;
};

struct mic_retention {
    struct mic_expiry range[TOPICS_PER_BATCH]; /* kind 3 entries to write */
    int nrange;
    struct count count[TOPICS_PER_BATCH];      /* event count changes */
    int ncount;
};

int mic_retention_new(mic_retention **out)
{
    return (*out = calloc(1, sizeof **out)) ? MIC_OK : MIC_ENOMEM;
}

void mic_retention_free(mic_retention *rt)
{
    free(rt);
}

void mic_retention_reset(mic_retention *rt)
{
    if (rt)
        rt->nrange = rt->ncount = 0;
}

static int write_counts(struct mic_wctx *w, mic_retention *rt)
{
    int rc;

    for (int i = 0; i < rt->ncount; i++)
        if (rt->count[i].delta &&
            (rc = mic_eventlog_count(w->txn, rt->count[i].topic_id, rt->count[i].delta)))
            return rc;
    rt->ncount = 0;
    return MIC_OK;
}

static int write_ranges(struct mic_wctx *w, mic_retention *rt)
{
    int rc;

    for (int i = 0; i < rt->nrange; i++)
        if ((rc = mic_store_expiry_put_range(w->txn, &rt->range[i])))
            return rc;
    rt->nrange = 0;
    return MIC_OK;
}

/* Add 'delta' to the event count of topic 'topic_id'. */
static int count(struct mic_wctx *w, uint32_t topic_id, int64_t delta)
{
    mic_retention *rt = w->retention;
    int rc;

    if (!rt)
        return mic_eventlog_count(w->txn, topic_id, delta);
    for (int i = 0; i < rt->ncount; i++)
        if (rt->count[i].topic_id == topic_id) {
            rt->count[i].delta += delta;
            return MIC_OK;
        }
    if (rt->ncount == TOPICS_PER_BATCH && (rc = write_counts(w, rt)))
        return rc;
    rt->count[rt->ncount++] = (struct count){topic_id, delta};
    return MIC_OK;
}

static void range_start(struct mic_expiry *e, const struct mic_rec *r,
                        const struct mic_topic_rec *tr)
{
    memset(e, 0, sizeof *e);
    e->kind = MIC_EXPIRE_RANGE;
    e->due = r->received_at_us + (int64_t)tr->retention_s * 1000000;
    e->seq = e->last_seq = r->seq;
    e->topic_id = r->topic_id;
    e->retention_s = tr->retention_s;
}

int mic_retention_stored(struct mic_wctx *w, const struct mic_rec *r,
                         const struct mic_topic_rec *tr)
{
    mic_retention *rt = w->retention;
    struct mic_expiry one, *e;
    int rc;

    if ((rc = count(w, r->topic_id, 1)))
        return rc;
    if (!rt) {
        range_start(&one, r, tr);
        return mic_store_expiry_put_range(w->txn, &one);
    }
    for (int i = 0; i < rt->nrange; i++) {
        e = &rt->range[i];
        if (e->topic_id != r->topic_id)
            continue;
        if (e->retention_s == tr->retention_s && r->seq > e->last_seq) {
            e->last_seq = r->seq;
            return MIC_OK;
        }
        /* The topic's retention changed within the batch: the range so far
         * keeps the one its events were stored under. */
        if ((rc = mic_store_expiry_put_range(w->txn, e)))
            return rc;
        range_start(e, r, tr);
        return MIC_OK;
    }
    if (rt->nrange == TOPICS_PER_BATCH && (rc = write_ranges(w, rt)))
        return rc;
    range_start(&rt->range[rt->nrange++], r, tr);
    return MIC_OK;
}

int mic_retention_flush(struct mic_wctx *w)
{
    int rc;

    if (!w->retention)
        return MIC_OK;
    if ((rc = write_ranges(w, w->retention)))
        return rc;
    return write_counts(w, w->retention);
}

int64_t mic_retention_next(struct mic_wctx *w)
{
    struct mic_expiry e;

    return mic_store_expiry_first(w->txn, &e) == MIC_OK ? e.due : 0;
}

/* The archive files written during one sweep: all fsync'd before the
 * batch that removes their events commits. */
#define ARCHIVE_FILES 16

struct archive {
    int fd[ARCHIVE_FILES];
    char topic[ARCHIVE_FILES][MIC_TOPIC_MAX + 1];
    int n;
};

static int archive_sync(struct archive *a)
{
    int rc = MIC_OK;

    for (int i = 0; i < a->n; i++) {
        if (fsync(a->fd[i]))
            rc = MIC_EIO;
        close(a->fd[i]);
    }
    a->n = 0;
    return rc;
}

static int archive(struct mic_wctx *w, struct archive *a, const char *topic,
                   const char *json, size_t len)
{
    char path[1024];
    int i, fd;

    for (i = 0; i < a->n && strcmp(a->topic[i], topic); i++)
        ;
    if (i == a->n) {
        int fresh;
        if (a->n == ARCHIVE_FILES && archive_sync(a))
            return MIC_EIO;
        i = a->n;
        snprintf(path, sizeof path, "%s/%s.ndjson", w->cfg->archive_dir, topic);
        fresh = access(path, F_OK) != 0;
        if ((fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0640)) < 0)
            goto fail;
        if (fresh) { /* a new file: make its name durable too */
            int dfd = open(w->cfg->archive_dir, O_RDONLY | O_DIRECTORY);
            if (dfd >= 0) {
                fsync(dfd);
                close(dfd);
            }
        }
        a->fd[i] = fd;
        snprintf(a->topic[i], sizeof a->topic[i], "%s", topic);
        a->n++;
    }
    if (write(a->fd[i], json, len) != (ssize_t)len || write(a->fd[i], "\n", 1) != 1)
        goto fail;
    return MIC_OK;
fail:
    snprintf(path, sizeof path, "%s/%s.ndjson", w->cfg->archive_dir, topic);
    mic_logger_write(MIC_LEVEL_ERROR, NULL, "cannot write the archive", "path", path,
            "error", strerror(errno), NULL);
    return MIC_EIO;
}

/* The groups that can hold a delivery of an event: the holders of its
 * topic (mic_groups_holders), or every group when the topic is unknown. */
struct holders {
    struct mic_group *const *v;
    int n, all;
    struct mic_group *first;
};

static struct mic_group *holder(const struct holders *h, struct mic_group *prev, int i)
{
    if (h->all)
        return i ? mic_groups_next(prev) : h->first;
    return i < h->n ? h->v[i] : NULL;
}

/* Nonzero if event 'r' must stay for some group: a delivery not terminal,
 * a backfill or a replay run that has still to add it.  A store error goes
 * to *rc. */
static int busy_somewhere(struct mic_wctx *w, const struct holders *h, const struct mic_rec *r,
                          const char *id, size_t idlen, int *rc)
{
    struct mic_group *gr = NULL;

    for (int i = 0; (gr = holder(h, gr, i)); i++) {
        int busy, e = mic_delivery_busy(w, gr, r, &busy);
        if (!e && !busy)
            e = mic_replay_holds(w, gr, r, id, idlen, &busy);
        if (e) {
            *rc = e;
            return 1;
        }
        if (busy)
            return 1;
    }
    return 0;
}

/* Remove event 'r' (its id 'id', idlen bytes; r->json is read only before
 * the first write), due at 'due', unless a group still needs it: then it
 * is looked at again later.  The entry that scheduled it is deleted
 * already. */
static int remove_event(struct mic_wctx *w, mic_groups *g, int64_t due, const struct mic_rec *r,
                        const char *id, size_t idlen, struct archive *arch)
{
    char name[MIC_TOPIC_MAX + 1] = "";
    uint64_t dedupe_s = 7 * 86400, retention_s = 7 * 86400, seq = r->seq;
    uint32_t topic_id = r->topic_id;
    int64_t created_at_us = r->created_at_us;
    struct mic_topic_rec tr;
    struct holders h = {NULL, 0, 0, NULL};
    struct mic_group *gr = NULL;
    int rc = mic_groups_topic_find(g, w->txn, topic_id, name, &tr);

    if (rc == MIC_OK) {
        dedupe_s = tr.dedupe_retain_s;
        retention_s = tr.retention_s;
        rc = mic_groups_holders(g, name, strlen(name), &h.v, &h.n);
    } else if (rc == MIC_ENOTFOUND) {
        h.all = 1; /* no topic of that id: ask every group */
        h.first = mic_groups_first(g);
        rc = MIC_OK;
    }
    if (rc)
        return rc;
    if (busy_somewhere(w, &h, r, id, idlen, &rc)) {
        /* Look again later: after the topic's retention, at most a minute. */
        int64_t again = retention_s < RECHECK_MAX_S ? (int64_t)retention_s : RECHECK_MAX_S;
        if (rc)
            return rc;
        return mic_store_expiry_put(w->txn, w->now_us + (again ? again : 1) * 1000000LL, seq,
                                    MIC_EXPIRE_EVENT, id, idlen);
    }
    if (w->cfg->archive_dir[0] &&
        (rc = archive(w, arch, name[0] ? name : "unknown", r->json, r->json_len)))
        return rc;
    for (int i = 0; (gr = holder(&h, gr, i)); i++)
        if ((rc = mic_replay_removing(w, gr, seq)) || (rc = mic_delivery_remove(w, gr, seq)))
            return rc;
    if ((rc = mic_eventlog_remove(w->txn, seq, topic_id, created_at_us, id, idlen)) ||
        (rc = count(w, topic_id, -1)))
        return rc;
    return mic_store_expiry_put(w->txn, due + (int64_t)dedupe_s * 1000000, seq,
                                MIC_EXPIRE_ID, id, idlen);
}

/* remove_event for event 'seq' of a kind-1 entry (gone already: nothing
 * to do). */
static int remove_seq(struct mic_wctx *w, mic_groups *g, int64_t due, uint64_t seq,
                      const char *id, size_t idlen, struct archive *arch)
{
    struct mic_rec r;
    int rc = mic_store_log_get(w->txn, seq, &r);

    if (rc == MIC_ENOTFOUND || rc == MIC_ECORRUPT)
        return MIC_OK; /* corrupt: reported by the store, left for an admin */
    return rc ? rc : remove_event(w, g, due, &r, id, idlen, arch);
}

/* The first event of a range still in the log (mic_store_log_scan): its
 * record (json borrowed from the store, read before the next write) and a
 * copy of its id. */
struct found {
    int found, bad_id;
    struct mic_rec r;
    char id[MIC_EVENT_ID_MAX + 1];
    size_t idlen;
};

static int found_one(void *arg, const struct mic_rec *r)
{
    struct found *f = arg;
    const char *id;

    f->found = 1;
    f->r = *r;
    f->bad_id = mic_event_stored_id(r->json, r->json_len, &id, &f->idlen) != 0;
    if (!f->bad_id) {
        memcpy(f->id, id, f->idlen);
        f->id[f->idlen] = 0;
    }
    return 1;
}

/* The events of range 'e' (its entry already deleted), in seq order, each
 * at its own deadline; *n counts the records looked at.  What is not due
 * yet, or past the batch's share, goes back as a range of its own. */
static int sweep_range(struct mic_wctx *w, mic_groups *g, struct mic_expiry *e, int *n,
                       struct archive *arch)
{
    uint64_t from = e->seq, next;
    int rc;

    while (from <= e->last_seq) {
        struct found f = {0};
        int64_t own;

        if ((rc = mic_store_log_scan(w->txn, from, e->last_seq, 1, found_one, &f, &next)))
            return rc;
        if (!f.found)
            return MIC_OK; /* the rest of the range is gone already */
        from = f.r.seq + 1;
        if (f.r.topic_id != e->topic_id)
            continue; /* another topic's: its own range has it */
        own = f.r.received_at_us + (int64_t)e->retention_s * 1000000;
        if (own > w->now_us || *n >= SWEEP_PER_BATCH) {
            e->due = own > w->now_us ? own : w->now_us;
            e->seq = f.r.seq;
            return mic_store_expiry_put_range(w->txn, e);
        }
        (*n)++;
        if (f.bad_id) {
            char s[24];
            snprintf(s, sizeof s, "%llu", (unsigned long long)f.r.seq);
            mic_logger_write(MIC_LEVEL_ERROR, NULL, "stored event without a readable event_id: kept",
                    "seq", s, NULL);
            continue;
        }
        if ((rc = remove_event(w, g, own, &f.r, f.id, f.idlen, arch)))
            return rc;
    }
    return MIC_OK;
}

int mic_retention_sweep(struct mic_wctx *w, mic_groups *g, int *more)
{
    struct mic_expiry e;
    struct archive arch;
    int rc, n = 0;

    *more = 0;
    arch.n = 0;
    while ((rc = mic_store_expiry_first(w->txn, &e)) == MIC_OK && e.due <= w->now_us) {
        if (n >= SWEEP_PER_BATCH) {
            *more = 1;
            break;
        }
        if ((rc = mic_store_expiry_del(w->txn, e.due, e.seq)))
            break;
        if (e.kind == MIC_EXPIRE_RANGE) {
            rc = sweep_range(w, g, &e, &n, &arch);
        } else {
            n++;
            if (e.kind == MIC_EXPIRE_EVENT)
                rc = remove_seq(w, g, e.due, e.seq, e.id, e.idlen, &arch);
            else
                rc = mic_eventlog_forget_id(w->txn, e.id, e.idlen);
        }
        if (rc)
            break;
    }
    if (archive_sync(&arch) && (rc == MIC_OK || rc == MIC_ENOTFOUND))
        rc = MIC_EIO;
    return rc == MIC_ENOTFOUND ? MIC_OK : rc;
}
