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
 * (mic_delivery) and hands it to the writer with the registry.
 *
 * micd's clock across restarts: before a commit whose time (ctx->now_us)
 * reached the reading last stored in meta "clock", the schedule stores a
 * new one CLOCK_AHEAD_US later.  So no time a committed batch wrote (a
 * stamp, a lease's start) is later than the stored reading, and micd
 * starts its clock from it if the wall clock is behind (main.c,
 * mic_clock_floor): a wall clock set back while micd was down neither
 * stretches the stored leases and retries nor takes stamps back.  Under
 * load that is one small write every CLOCK_AHEAD_US. */
#include "schedule.h"

#include "delivery.h"
#include "core/err.h"
#include "replay.h"
#include "retention.h"
#include "store/store.h"
#include "store/log.h"

#include <stdlib.h>

#define TIMERS_PER_BATCH 10000
/* How far ahead of the batch's time the stored clock reading is put. */
#define CLOCK_AHEAD_US 100000

struct mic_sched {
    mic_groups *groups;
    mic_delivery *engine;
    mic_retention *retention;
    int timers_left;  /* due timers left for the next batch */
    int sweep_left;   /* retention work left for the next batch */
    int64_t clock_stored; /* meta "clock" as of the last commit (0: unknown) */
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

    if (rc || (rc = mic_retention_flush(w)))
        return rc;
    if (w->now_us >= s->clock_stored) {
        /* Committed with the batch, or forgotten (aborted) with it. */
        s->clock_stored = w->now_us + CLOCK_AHEAD_US;
        return mic_store_clock_put(w->txn, s->clock_stored);
    }
    return MIC_OK;
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
    s->clock_stored = 0; /* what this batch put is not there: put again */
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
