/* sink.h - micd's relay of groups with a NATS sink to JetStream (DESIGN
 * sections 10 and 13).  The only file that calls libnats.  It runs on its
 * own threads, never the writer's: a manager that notices sink groups
 * created and deleted (it reads the stored groups every 200 ms through a
 * read transaction), and per sink group one relay thread that claims
 * through the writer (the same claim/ack/nack/extend ops as a worker's,
 * marked internal) and a small pool of publishers. */
#ifndef MIC_SINK_H
#define MIC_SINK_H

#include "store/store.h"
#include "engine/writer.h"

struct mic_config;
typedef struct mic_sink mic_sink;

/* Start the relay over 's' and 'w' (borrowed: they must outlive it) and
 * register its hooks (sink_status in GET /v1/groups, its /metrics
 * families).  Call before the HTTP server starts.  Returns MIC_OK with
 * *out (the caller's: mic_sink_stop, then mic_sink_free) or MIC_ENOMEM. */
int mic_sink_start(mic_sink **out, mic_store *s, mic_writer *w,
                   const struct mic_config *cfg);
/* Stop claiming, wait at most about 2 s for the PubAcks in flight, ack
 * what was acked, close the NATS connections and join the threads.  The
 * writer must still run.  Leases of what is left expire (at-least-once). */
void mic_sink_stop(mic_sink *k);
void mic_sink_free(mic_sink *k);

#endif
