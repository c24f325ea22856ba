/* clock.h - micd's clock, the monotonic clock and RFC 3339 text.
 *
 * Stored times are microseconds since the Unix epoch read from micd's
 * clock (mic_now_us), not from the system wall clock directly: micd's
 * clock advances with the elapsed-time clock (CLOCK_BOOTTIME: monotonic,
 * and it counts a suspended machine's sleep), never goes backwards, and is
 * pulled toward the system wall clock at a bounded rate (slew, at most
 * MIC_CLOCK_SLEW_PPM) when the two differ.  So a stored deadline (a lease's
 * end, a retry's not_before: now + a duration) lasts its duration give or
 * take 5% whatever the wall clock does, stamps (created_at defaults,
 * received_at) never go back, and they stay within the slew's reach of
 * the wall clock.  Only a wall clock more than MIC_CLOCK_STEP_US ahead of
 * micd's makes it step forward (a clock that was badly wrong and got
 * fixed); it never steps back.  Across restarts micd starts from the
 * later of the wall clock and the time the store says it reached
 * (mic_clock_floor).  Waits use the monotonic clock (mic_mono_*).  The
 * README's "Time" paragraph says what this means for users.
 *
 * Tests replace the whole clock with a function of their own
 * (mic_clock_set: mic_now_us then returns exactly its values), or only its
 * sources (mic_clock_set_sources), or drive the model itself
 * (struct mic_clock: mic_clock_init, mic_clock_tick). */
#ifndef MIC_CLOCK_H
#define MIC_CLOCK_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Length of a formatted time, "2026-09-29T08:00:00.000000Z", without NUL. */
#define MIC_TIME_LEN 27

/* The slew: while micd's clock and the wall clock differ, micd's clock
 * runs at most this many parts per million faster or slower than elapsed
 * time (50,000: 5%, an hour's difference is made up in 20 hours, a
 * second's in 20 seconds). */
#define MIC_CLOCK_SLEW_PPM 50000
/* A wall clock further ahead than this (one day) is followed at once. */
#define MIC_CLOCK_STEP_US (86400LL * 1000000)

/* micd's clock: microseconds since the epoch (see above).  Any thread. */
int64_t mic_now_us(void);

/* The latest time known: the later of mic_now_us() and the latest system
 * wall-clock time seen; never goes backwards.  An inclusive upper bound
 * for what clients may stamp (the "created_at in the future" check, the
 * default end of a range read), so that a client whose clock followed a
 * wall-clock step forward is not refused while micd's clock catches up. */
int64_t mic_clock_latest_us(void);

/* Raise micd's clock to 'floor_us' if it is behind (at start: the time
 * the store says micd reached before); never lowers it.  No effect under
 * mic_clock_set. */
void mic_clock_floor(int64_t floor_us);

/* What /metrics shows of micd's clock. */
struct mic_clock_stats {
    int64_t offset_us;  /* micd's clock minus the system wall clock, now */
    uint64_t steps;     /* forward steps taken (MIC_CLOCK_STEP_US) */
};
void mic_clock_stats(struct mic_clock_stats *st);

/* Seconds from 'at_us' to 'now_us', 0 when 'at_us' is later (a created_at
 * a client set ahead of micd's clock): the ages of stats and views. */
double mic_age_s(int64_t now_us, int64_t at_us);

/* Monotonic milliseconds and microseconds (arbitrary origin), for waits. */
int64_t mic_mono_ms(void);
int64_t mic_mono_us(void);

/* Initialise 'cv' to time its waits by CLOCK_MONOTONIC, so that a
 * wall-clock step neither stretches nor cuts them.  Returns
 * pthread_cond_init's code. */
int mic_cond_init_mono(pthread_cond_t *cv);
/* Into *ts: the CLOCK_MONOTONIC time 'ms' from now, the deadline for a
 * pthread_cond_timedwait on a condition made by mic_cond_init_mono. */
void mic_mono_deadline(int64_t ms, struct timespec *ts);

/* Replace micd's clock by 'now_us' (NULL restores it).  For tests: every
 * mic_now_us and mic_clock_latest_us then returns now_us(). */
void mic_clock_set(int64_t (*now_us)(void));

/* Replace the sources micd's clock reads: the system wall clock and the
 * elapsed-time clock, both in µs (NULL: the system's).  The clock starts
 * again from the wall source at its next reading.  For tests. */
void mic_clock_set_sources(int64_t (*wall_us)(void), int64_t (*elapsed_us)(void));

/* ---- The model (mic_now_us runs one of these behind a mutex) ---- */

struct mic_clock {
    int64_t now;       /* the last time returned, µs since the epoch */
    int64_t elapsed;   /* the elapsed-time reading it was taken at */
    int64_t wall;      /* the wall-clock reading it was taken at */
    int64_t wall_max;  /* the latest wall-clock reading seen */
    uint64_t steps;    /* forward steps taken */
};

/* Start 'c' at wall time 'wall', or at 'floor' if that is later (0: no
 * floor), with elapsed-time reading 'elapsed'. */
void mic_clock_init(struct mic_clock *c, int64_t wall, int64_t elapsed, int64_t floor);

/* Advance 'c' to the readings 'wall' and 'elapsed' and return its time:
 * the last one plus the elapsed time since, plus or minus at most
 * MIC_CLOCK_SLEW_PPM of it toward 'wall', or 'wall' itself when that is
 * more than MIC_CLOCK_STEP_US ahead.  Never less than the last time (an
 * elapsed reading older than the last is taken as no time elapsed). */
int64_t mic_clock_tick(struct mic_clock *c, int64_t wall, int64_t elapsed);

/* Parse an RFC 3339 date-time ("2026-09-29T08:00:00Z", at most 6
 * fractional digits, any offset) into microseconds since the epoch.
 * Returns MIC_OK, or MIC_EINVAL for anything else, including times before
 * 1970 or after 9999. */
int mic_time_parse(const char *s, size_t len, int64_t *out_us);

/* Write 'us' as "YYYY-MM-DDTHH:MM:SS.ffffffZ" plus a NUL into 'buf', which
 * holds at least MIC_TIME_LEN + 1 bytes.  Returns MIC_TIME_LEN. */
int mic_time_format(int64_t us, char *buf);

#endif
