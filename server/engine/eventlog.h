/* eventlog.h - the event log's one writer: every change to the log, the
 * event ids, the time index, the topics' event counts and the aggregate
 * records goes through these verbs (eventlog.c says why; the store's
 * functions for them are called from nowhere else, tests/check-layers.sh
 * rule 7).  All run in the writer's transaction 't'.
 *
 * Errors: each returns MIC_OK or the store's error for the write that
 * failed (MIC_ENOSPC: the map or the filesystem is full; MIC_EIO;
 * MIC_ENOMEM); the transaction is then to be aborted, so nothing half
 * written stays.  Nothing here keeps a pointer past the call. */
#ifndef MIC_EVENTLOG_H
#define MIC_EVENTLOG_H

#include <stddef.h>
#include <stdint.h>

#include "event.h"
#include "store/store.h"

/* A new event: record 'r' (r->seq not used before, r->json its stored
 * JSON) into the log, its id 'id' (idlen bytes) with the digest of what
 * the client sent into the ids, and (r->topic_id, r->created_at_us, id)
 * into the time index. */
int mic_eventlog_append(mic_txn *t, const struct mic_rec *r, const char *id, size_t idlen,
                        const uint8_t digest[MIC_DIGEST_LEN]);

/* Remove event 'seq' (of topic 'topic_id', created at 'created_at_us',
 * id 'id') from the time index and the log.  Its id stays, so that the
 * same event_id is still answered as a duplicate, until
 * mic_eventlog_forget_id. */
int mic_eventlog_remove(mic_txn *t, uint64_t seq, uint32_t topic_id, int64_t created_at_us,
                        const char *id, size_t idlen);

/* Forget event id 'id' (its dedupe_retain_s ran out). */
int mic_eventlog_forget_id(mic_txn *t, const char *id, size_t idlen);

/* Add 'delta' (negative: removed) to the events topic 'topic_id' holds. */
int mic_eventlog_count(mic_txn *t, uint32_t topic_id, int64_t delta);

/* Event 'ev' (record 'r', just appended): index it under its aggregate
 * and update the aggregate's record (read again here: earlier events of
 * this batch may have changed it); sets r->ordinal.  The record holds no
 * count and, while the versions are contiguous, no last version
 * (mic_store_agg_get derives it from the index): an unversioned event,
 * or the next version of a contiguous aggregate, leaves it as it is, and
 * so does a version that fills a gap (the sweep of the watermark,
 * mic_delivery_version_stored, moves it).  A version already in the
 * index is MIC_EIO here (publish.c checked it before). */
int mic_eventlog_aggregate(mic_txn *t, const struct mic_event *ev, struct mic_rec *r);

/* The delivery engine moved the contiguous version watermark of aggregate
 * 'akey': store its record 'a' as read and changed (only a->contig). */
int mic_eventlog_watermark(mic_txn *t, const uint8_t akey[MIC_AKEY_LEN],
                           const struct mic_agg_rec *a);

#endif
