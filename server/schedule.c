/* schedule.c - the writer's schedule (schedule.h).
 *
 * Before the requests of each batch: fire the timers that came due (at
 * most TIMERS_PER_BATCH, the rest in the next batch), then one bounded
 * chunk of each kind of background work: a group's backfill or removal, a
 * replay run's selection, a retention sweep.  After the requests: the
 * delivery engine writes the figures it kept in memory, retention its
 * expiry entries and topic counts.  The writer then
 * sleeps until the earliest of the next timer and the next retention
 * deadline (next_due), unless busy() says a chunk is left.  After an
 * aborted batch the engine forgets the figures it kept and the registry is
 * rebuilt from the committed store.  The schedule owns the engine's state
 * (mic_delivery) and hands it to the writer with the registry. */
#include "schedule.h"

#include "delivery.h"
#include "err.h"
#include "replay.h"
#include "retention.h"

#include <stdlib.h>

#define TIMERS_PER_BATCH 10000

struct mic_sched {
    mic_groups *groups;
    mic_delivery *engine;
    mic_retention *retention;
    int timers_left;  /* due timers left for the next batch */
    int sweep_left;   /* retention work left for the next batch */
};

/* A group's background work, carried out by the delivery engine. */
static const struct mic_groups_work group_work = {
    mic_delivery_add, mic_delivery_release_heads, mic_delivery_drop_step,
};

static int before_batch(mic_sched *s, struct mic_wctx *w)
{
    int rc;

    if ((rc = mic_delivery_fire_due(w, s->groups, TIMERS_PER_BATCH, &s->timers_left)) ||
        (rc = mic_groups_background(s->groups, w, &group_work)) ||
        (rc = mic_replay_background(s->groups, w)))
        return rc;
    return mic_retention_sweep(w, s->groups, &s->sweep_left);
}

static int before_commit(mic_sched *s, struct mic_wctx *w)
{
    int rc = mic_delivery_flush(w);

    (void)s;
    return rc ? rc : mic_retention_flush(w);
}

static int64_t next_due(mic_sched *s, struct mic_wctx *w)
{
    int64_t due = mic_delivery_next_due(w), ret = mic_retention_next(w);

    (void)s;
    return !due || (ret && ret < due) ? ret : due;
}

static int busy(mic_sched *s)
{
    return s->timers_left || s->sweep_left || mic_groups_busy(s->groups);
}

static void aborted(mic_sched *s, mic_txn *read)
{
    mic_delivery_reset(s->engine);
    mic_retention_reset(s->retention);
    mic_groups_reload(s->groups, read);
}

int mic_sched_new(mic_sched **out, mic_groups *g)
{
    mic_sched *s = calloc(1, sizeof *s);

    if (!s)
        return MIC_ENOMEM;
    if (mic_delivery_new(&s->engine)) {
        free(s);
        return MIC_ENOMEM;
    }
    if (mic_retention_new(&s->retention)) {
        mic_delivery_free(s->engine);
        free(s);
        return MIC_ENOMEM;
    }
    s->groups = g;
    *out = s;
    return MIC_OK;
}

void mic_sched_free(mic_sched *s)
{
    if (!s)
        return;
    mic_delivery_free(s->engine);
    mic_retention_free(s->retention);
    free(s);
}

void mic_sched_hooks(mic_sched *s, struct mic_writer_hooks *h)
{
    h->sched = s;
    h->groups = s->groups;
    h->engine = s->engine;
    h->retention = s->retention;
    h->before = before_batch;
    h->before_commit = before_commit;
    h->next_due = next_due;
    h->busy = busy;
    h->aborted = aborted;
}
