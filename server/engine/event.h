/* event.h - one published event: validation of the client's JSON object,
 * its canonical content digest and its stored form. */
#ifndef MIC_EVENT_H
#define MIC_EVENT_H

#include <stddef.h>
#include <stdint.h>

#include "core/jdoc.h"
#include "store/store.h"

struct mic_error;

#define MIC_EVENT_ID_MAX 128
#define MIC_TOPIC_MAX 200

/* A validated event, ready for the writer.  'json' holds the stored event
 * without its closing brace; the writer appends seq and received_at. */
struct mic_event {
    char id[MIC_EVENT_ID_MAX + 1];
    size_t idlen;
    char topic[MIC_TOPIC_MAX + 1];
    size_t topiclen;
    int64_t created_at_us;
    int64_t deliver_at_us;  /* no group hands it out before; 0 = none */
    uint8_t has_agg, has_version, priority;
    uint64_t version;
    uint8_t akey[MIC_AKEY_LEN];
    char atype[MIC_AGG_NAME_MAX + 1], aid[MIC_AGG_NAME_MAX + 1];
    size_t atlen, ailen;
    uint8_t digest[MIC_DIGEST_LEN];
    size_t payload_len;  /* compact JSON size of the payload, 0 if none */
    char *json;          /* malloc'd, freed by mic_event_fini */
    size_t json_len;
};

/* Validate the value 'obj' of document 'd' as an event received at
 * 'now_us' (the default created_at; deliver_at may be at most 365 days
 * after it) and fill 'ev' (which owns its copies: 'd' may go afterwards).
 * 'path' prefixes field names in errors ("events[3]." or "").  Returns
 * MIC_OK, or MIC_EINVAL / MIC_ENOMEM with 'err' filled. */
int mic_event_parse(const mic_jdoc *d, mic_jv obj, int64_t now_us, const char *path,
                    struct mic_event *ev, struct mic_error *err);
/* mic_event_parse, with created_at allowed up to 300 s after 'latest_us'
 * (mic_clock_latest_us: the wall clock may be ahead of micd's clock, and a
 * client's created_at with it) instead of 'now_us'. */
int mic_event_parse_at(const mic_jdoc *d, mic_jv obj, int64_t now_us, int64_t latest_us,
                       const char *path, struct mic_event *ev, struct mic_error *err);
void mic_event_fini(struct mic_event *ev);

/* Nonzero if 's' is a valid topic name ([A-Za-z0-9._:-]{1,200}). */
int mic_event_topic_ok(const char *s, size_t len);
/* Nonzero if 's' is a valid event id ([A-Za-z0-9._:-]{1,128}). */
int mic_event_id_ok(const char *s, size_t len);
/* The event_id of an event in its stored form (mic_rec.json: it begins
 * with {"event_id":"...").  Sets *id (pointing into 'json', valid as long
 * as 'json' is) and *idlen; returns 0, or -1 when 'json' does not begin
 * with a well-formed event_id. */
int mic_event_stored_id(const char *json, size_t len, const char **id, size_t *idlen);

/* Write a new UUIDv7 for time 'now_us' (36 chars plus NUL) into 'out'. */
void mic_event_uuid7(int64_t now_us, char out[37]);

#endif
