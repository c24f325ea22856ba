/* clock.c - micd's clock (clock.h: a monotonic-driven time that never
 * goes backwards and is slewed toward the system wall clock), the
 * monotonic clock and RFC 3339 parsing and formatting (UTC, microseconds).
 * Civil-date arithmetic uses Howard Hinnant's days-from-civil algorithm,
 * so no timezone state or locale is involved.
 *
 * One process-wide struct mic_clock, behind a mutex, backs mic_now_us:
 * its sources are read inside the lock, so the readings it is advanced
 * with come in order. */
#define _GNU_SOURCE
#include "clock.h"

#include "err.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

/* 10000-01-01T00:00:00Z: times are written with four-digit years. */
#define MAX_US (253402300800LL * 1000000)

/* ---- The model ---- */

void mic_clock_init(struct mic_clock *c, int64_t wall, int64_t elapsed, int64_t floor)
{
    memset(c, 0, sizeof *c);
    c->now = wall > floor ? wall : floor;
    c->elapsed = elapsed;
    c->wall = wall;
    c->wall_max = wall;
}

/* 'e' µs times MIC_CLOCK_SLEW_PPM / 10^6, without overflow for any e >= 0. */
static int64_t slew_of(int64_t e)
{
    return e / 1000000 * MIC_CLOCK_SLEW_PPM + e % 1000000 * MIC_CLOCK_SLEW_PPM / 1000000;
}

int64_t mic_clock_tick(struct mic_clock *c, int64_t wall, int64_t elapsed)
{
    int64_t e = elapsed - c->elapsed, next, gap, max;

    if (e < 0)
        e = 0;
    else
        c->elapsed = elapsed;
    next = c->now + e;
    gap = wall - next;
    if (gap > MIC_CLOCK_STEP_US) {
        next = wall;
        c->steps++;
    } else {
        max = slew_of(e);
        next += gap > max ? max : gap < -max ? -max : gap;
    }
    if (next > c->now)
        c->now = next;
    c->wall = wall;
    if (wall > c->wall_max)
        c->wall_max = wall;
    return c->now;
}

/* ---- The process's clock ---- */

static int64_t (*clock_fn)(void);
static int64_t (*wall_fn)(void), (*elapsed_fn)(void);
static pthread_mutex_t clock_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mic_clock clock_state;
static int clock_started;

static int64_t read_us(clockid_t id)
{
    struct timespec ts;

    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Advance the process's clock; the caller holds clock_lock. */
static void advance(void)
{
    int64_t wall = wall_fn ? wall_fn() : read_us(CLOCK_REALTIME);
    int64_t el = elapsed_fn ? elapsed_fn() : read_us(CLOCK_BOOTTIME);

    if (!clock_started) {
        mic_clock_init(&clock_state, wall, el, 0);
        clock_started = 1;
        return;
    }
    mic_clock_tick(&clock_state, wall, el);
}

int64_t mic_now_us(void)
{
    int64_t now;

    if (clock_fn)
        return clock_fn();
    pthread_mutex_lock(&clock_lock);
    advance();
    now = clock_state.now;
    pthread_mutex_unlock(&clock_lock);
    return now;
}

int64_t mic_clock_latest_us(void)
{
    int64_t t;

    if (clock_fn)
        return clock_fn();
    pthread_mutex_lock(&clock_lock);
    advance();
    t = clock_state.now > clock_state.wall_max ? clock_state.now : clock_state.wall_max;
    pthread_mutex_unlock(&clock_lock);
    return t;
}

void mic_clock_floor(int64_t floor_us)
{
    pthread_mutex_lock(&clock_lock);
    advance();
    if (floor_us > clock_state.now)
        clock_state.now = floor_us;
    pthread_mutex_unlock(&clock_lock);
}

void mic_clock_stats(struct mic_clock_stats *st)
{
    pthread_mutex_lock(&clock_lock);
    advance();
    st->offset_us = clock_fn ? clock_fn() - clock_state.wall : clock_state.now - clock_state.wall;
    st->steps = clock_state.steps;
    pthread_mutex_unlock(&clock_lock);
}

double mic_age_s(int64_t now_us, int64_t at_us)
{
    return now_us > at_us ? (double)(now_us - at_us) / 1e6 : 0.0;
}

int64_t mic_mono_ms(void)
{
    return read_us(CLOCK_MONOTONIC) / 1000;
}

int64_t mic_mono_us(void)
{
    return read_us(CLOCK_MONOTONIC);
}

int mic_cond_init_mono(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    int rc;

    if ((rc = pthread_condattr_init(&a)))
        return rc;
    if (!(rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC)))
        rc = pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
    return rc;
}

void mic_mono_deadline(int64_t ms, struct timespec *ts)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    if (ms < 0)
        ms = 0;
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000;
    if (ts->tv_nsec >= 1000000000) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000;
    }
}

void mic_clock_set(int64_t (*now_us)(void))
{
    clock_fn = now_us;
}

void mic_clock_set_sources(int64_t (*wall_us)(void), int64_t (*elapsed_us)(void))
{
    pthread_mutex_lock(&clock_lock);
    wall_fn = wall_us;
    elapsed_fn = elapsed_us;
    clock_started = 0;
    pthread_mutex_unlock(&clock_lock);
}

/* ---- Civil dates ---- */

static int64_t days_from_civil(int64_t y, int m, int d)
{
    int64_t era, yoe, doy, doe;

    y -= m <= 2;
    era = (y >= 0 ? y : y - 399) / 400;
    yoe = y - era * 400;
    doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int *y, int *m, int *d)
{
    int64_t era, doe, yoe, doy, mp;

    z += 719468;
    era = (z >= 0 ? z : z - 146096) / 146097;
    doe = z - era * 146097;
    yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = (int)(yoe + era * 400 + (*m <= 2));
}

static int days_in_month(int y, int m)
{
    static const int dim[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;

    return m == 2 ? 28 + leap : dim[m - 1];
}

/* Read exactly 'n' digits at s[*i]; returns -1 if they are not there. */
static int digits(const char *s, size_t len, size_t *i, int n)
{
    int v = 0;

    if (*i + (size_t)n > len)
        return -1;
    for (int k = 0; k < n; k++) {
        char c = s[*i + k];
        if (c < '0' || c > '9')
            return -1;
        v = v * 10 + (c - '0');
    }
    *i += n;
    return v;
}

static int expect(const char *s, size_t len, size_t *i, const char *set)
{
    if (*i >= len)
        return -1;
    for (; *set; set++)
        if (s[*i] == *set) {
            (*i)++;
            return 0;
        }
    return -1;
}

int mic_time_parse(const char *s, size_t len, int64_t *out_us)
{
    size_t i = 0;
    int y, mo, d, h, mi, se, frac = 0, off = 0;
    int64_t days, us;

    if ((y = digits(s, len, &i, 4)) < 0 || expect(s, len, &i, "-") ||
        (mo = digits(s, len, &i, 2)) < 0 || expect(s, len, &i, "-") ||
        (d = digits(s, len, &i, 2)) < 0 || expect(s, len, &i, "Tt") ||
        (h = digits(s, len, &i, 2)) < 0 || expect(s, len, &i, ":") ||
        (mi = digits(s, len, &i, 2)) < 0 || expect(s, len, &i, ":") ||
        (se = digits(s, len, &i, 2)) < 0)
        return MIC_EINVAL;
    if (i < len && s[i] == '.') {
        int n = 0;
        i++;
        while (i < len && s[i] >= '0' && s[i] <= '9') {
            if (++n > 6)
                return MIC_EINVAL;
            frac = frac * 10 + (s[i++] - '0');
        }
        if (n == 0)
            return MIC_EINVAL;
        while (n++ < 6)
            frac *= 10;
    }
    if (i < len && (s[i] == 'Z' || s[i] == 'z')) {
        i++;
    } else if (i < len && (s[i] == '+' || s[i] == '-')) {
        int sign = s[i++] == '-' ? -1 : 1, oh, om;
        if ((oh = digits(s, len, &i, 2)) < 0 || expect(s, len, &i, ":") ||
            (om = digits(s, len, &i, 2)) < 0 || oh > 23 || om > 59)
            return MIC_EINVAL;
        off = sign * (oh * 60 + om);
    } else {
        return MIC_EINVAL;
    }
    if (i != len || y < 1969 || mo < 1 || mo > 12 || d < 1 ||
        d > days_in_month(y, mo) || h > 23 || mi > 59 || se > 59)
        return MIC_EINVAL;
    days = days_from_civil(y, mo, d);
    us = ((days * 86400 + h * 3600 + mi * 60 + se) - (int64_t)off * 60) *
             1000000 + frac;
    if (us < 0 || us >= MAX_US)
        return MIC_EINVAL;
    *out_us = us;
    return MIC_OK;
}

static void put_digits(char *p, int v, int n)
{
    while (n--) {
        p[n] = (char)('0' + v % 10);
        v /= 10;
    }
}

/* The "YYYY-MM-DDTHH:MM:SS." of the second formatted last by this thread:
 * the events of a batch share their second, so most calls only write the
 * microseconds. */
static _Thread_local int64_t last_secs = INT64_MIN;
static _Thread_local char last_prefix[20];

int mic_time_format(int64_t us, char *buf)
{
    int64_t secs = us / 1000000, rem = us % 1000000, days, sod;
    int y, m, d;

    if (rem < 0) {
        rem += 1000000;
        secs--;
    }
    if (secs == last_secs) {
        memcpy(buf, last_prefix, sizeof last_prefix);
        put_digits(buf + 20, (int)rem, 6);
        buf[26] = 'Z';
        buf[27] = 0;
        return MIC_TIME_LEN;
    }
    days = secs / 86400;
    sod = secs % 86400;
    if (sod < 0) {
        sod += 86400;
        days--;
    }
    civil_from_days(days, &y, &m, &d);
    put_digits(buf, y % 10000, 4);
    buf[4] = '-';
    put_digits(buf + 5, m, 2);
    buf[7] = '-';
    put_digits(buf + 8, d, 2);
    buf[10] = 'T';
    put_digits(buf + 11, (int)(sod / 3600), 2);
    buf[13] = ':';
    put_digits(buf + 14, (int)(sod / 60 % 60), 2);
    buf[16] = ':';
    put_digits(buf + 17, (int)(sod % 60), 2);
    buf[19] = '.';
    memcpy(last_prefix, buf, sizeof last_prefix);
    last_secs = secs;
    put_digits(buf + 20, (int)rem, 6);
    buf[26] = 'Z';
    buf[27] = 0;
    return MIC_TIME_LEN;
}
