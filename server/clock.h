/* clock.h - time source and RFC 3339 text.
 *
 * Stored times are wall-clock microseconds since the Unix epoch; waits use
 * the monotonic clock.  Both sources can be replaced by tests
 * (mic_clock_set), so expiry and backoff tests never sleep. */
#ifndef MIC_CLOCK_H
#define MIC_CLOCK_H

#include <stddef.h>
#include <stdint.h>

/* Length of a formatted time, "2026-09-29T08:00:00.000000Z", without NUL. */
#define MIC_TIME_LEN 27

/* Wall-clock microseconds since the epoch. */
int64_t mic_now_us(void);

/* Monotonic milliseconds and microseconds (arbitrary origin). */
int64_t mic_mono_ms(void);
int64_t mic_mono_us(void);

/* Replace the wall clock (NULL restores the system clock).  For tests. */
void mic_clock_set(int64_t (*now_us)(void));

/* Parse an RFC 3339 date-time ("2026-09-29T08:00:00Z", at most 6
 * fractional digits, any offset) into microseconds since the epoch.
 * Returns MIC_OK, or MIC_EINVAL for anything else, including times before
 * 1970 or after 9999. */
int mic_time_parse(const char *s, size_t len, int64_t *out_us);

/* Write 'us' as "YYYY-MM-DDTHH:MM:SS.ffffffZ" plus a NUL into 'buf', which
 * holds at least MIC_TIME_LEN + 1 bytes.  Returns MIC_TIME_LEN. */
int mic_time_format(int64_t us, char *buf);

#endif
