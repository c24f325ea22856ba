/* replay.h - history out of the live log: time-range reads of a topic (JSON
 * pages or a constant-memory NDJSON stream) and replay runs. */
#ifndef MIC_REPLAY_H
#define MIC_REPLAY_H

#include <stddef.h>
#include <sys/types.h>

#include "store.h"

struct mic_buf;
struct mic_error;
typedef struct mic_range mic_range;

/* GET /v1/topics/{topic}/events?from=&to=&after=&limit= as one JSON page:
 * {"events":[...],"next":CURSOR|null}.  NULL arguments take defaults. */
int mic_range_page(mic_store *s, const char *topic, const char *from,
                   const char *to, const char *after, const char *limit,
                   struct mic_buf *out, struct mic_error *err);

/* The same range as NDJSON, read piecewise in constant memory: open,
 * then mic_range_read until it returns 0, then close. */
int mic_range_open(mic_store *s, const char *topic, const char *from,
                   const char *to, const char *after, mic_range **out,
                   struct mic_error *err);
/* Copy up to 'max' bytes of the stream into 'buf'; returns the count,
 * 0 at the end, -1 on a store error (the stream is then cut). */
ssize_t mic_range_read(mic_range *r, char *buf, size_t max);
void mic_range_close(mic_range *r);

#endif
