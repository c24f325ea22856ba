/* eventlog.c - the event log's one writer (eventlog.h).
 *
 * The store keeps the log (seq -> record), the event ids (id -> seq and
 * the digest of what the client sent), the time index (topic, created_at,
 * id -> seq), the topics' event counts and the aggregate records with
 * their version index.  These must change together: an event is in all
 * of its indexes or in none, an aggregate's record agrees with its
 * index.  So every write to them is one of the verbs below, which
 * publish.c (appending) and retention.c (removing) call, and the
 * delivery engine for the one field of an aggregate record it moves (the
 * contiguous version watermark); tests/check-layers.sh (rule 7) keeps any
 * other file from writing them.  Reads stay the store's (store.h). */
#include "eventlog.h"

#include "core/err.h"
#include "store/dlv.h"
#include "store/log.h"

#include <string.h>

int mic_eventlog_append(mic_txn *t, const struct mic_rec *r, const char *id, size_t idlen,
                        const uint8_t digest[MIC_DIGEST_LEN])
{
    int rc;

    if ((rc = mic_store_log_put(t, r)) || (rc = mic_store_id_put(t, id, idlen, r->seq, digest)) ||
        (rc = mic_store_time_put(t, r->topic_id, r->created_at_us, id, idlen, r->seq)))
        return rc;
    return MIC_OK;
}

int mic_eventlog_remove(mic_txn *t, uint64_t seq, uint32_t topic_id, int64_t created_at_us,
                        const char *id, size_t idlen)
{
    int rc;

    if ((rc = mic_store_time_del(t, topic_id, created_at_us, id, idlen)))
        return rc;
    return mic_store_log_del(t, seq);
}

int mic_eventlog_forget_id(mic_txn *t, const char *id, size_t idlen)
{
    return mic_store_id_del(t, id, idlen);
}

int mic_eventlog_count(mic_txn *t, uint32_t topic_id, int64_t delta)
{
    return mic_store_topic_events_add(t, topic_id, delta);
}

int mic_eventlog_watermark(mic_txn *t, const uint8_t akey[MIC_AKEY_LEN],
                           const struct mic_agg_rec *a)
{
    return mic_store_agg_put(t, akey, a);
}

int mic_eventlog_aggregate(mic_txn *t, const struct mic_event *ev, struct mic_rec *r)
{
    struct mic_agg_rec a;
    int rc = mic_store_agg_get(t, ev->akey, &a);

    if (rc == MIC_ENOTFOUND) {
        memset(&a, 0, sizeof a);
        if ((rc = mic_store_next_ordinal(t, &a.ordinal)))
            return rc;
        a.versioned = ev->has_version;
        a.baseline = a.contig = ev->version;
        memcpy(a.type, ev->atype, ev->atlen);
        memcpy(a.id, ev->aid, ev->ailen);
        a.tlen = (uint16_t)ev->atlen;
        a.ilen = (uint16_t)ev->ailen;
    } else if (rc) {
        return rc;
    } else if (!(a.versioned && ev->has_version && a.contig_stored == 0 &&
                 ev->version > a.max_version + 1)) {
        /* Nothing in the record changes; only a version past a gap that
         * opens here makes the watermark explicit (below). */
        r->ordinal = a.ordinal;
        rc = mic_store_aggidx_put(t, r);
        return rc == MIC_ECONFLICT ? MIC_EIO : rc;
    }
    if (ev->version > a.max_version)
        a.max_version = ev->version;
    r->ordinal = a.ordinal;
    if ((rc = mic_store_aggidx_put(t, r)))
        return rc == MIC_ECONFLICT ? MIC_EIO : rc;
    return mic_store_agg_put(t, ev->akey, &a);
}

