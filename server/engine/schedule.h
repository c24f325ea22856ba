/* schedule.h - the writer's schedule: what runs in every batch besides the
 * requests (due timers, group backfill and removal chunks, replay
 * selection chunks, retention sweeps, the group figures before commit).
 * A mic_sched is the writer's application context: it is only used from
 * the writer thread (through the hooks it fills in), so two writers, each
 * with its own mic_sched and registry, can run in one process. */
#ifndef MIC_SCHEDULE_H
#define MIC_SCHEDULE_H

#include "group.h"
#include "writer.h"

typedef struct mic_sched mic_sched;

/* A schedule over registry 'g' (borrowed: it must outlive the schedule),
 * with a delivery engine state of its own.  Returns MIC_OK or MIC_ENOMEM;
 * *out is freed with mic_sched_free (after the writer stopped). */
int mic_sched_new(mic_sched **out, mic_groups *g);
void mic_sched_free(mic_sched *s);

/* Fill 'h' with the hooks of 's' (for mic_writer_start). */
void mic_sched_hooks(mic_sched *s, struct mic_writer_hooks *h);

#endif
