/* test_clock.c - RFC 3339 parsing and formatting, micd's clock (the model:
 * elapsed time, slew toward the wall clock, forward steps only when huge,
 * never backwards, a floor; and the process clock over injected sources),
 * the injectable clock of the other tests and the monotonic waits
 * (server/core/clock.h). */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "core/clock.h"
#include "core/err.h"

#define SEC 1000000LL
/* 2026-09-29T08:00:00Z */
#define T_2026 (1790668800LL * SEC)

static int parse(const char *s, int64_t *us)
{
    return mic_time_parse(s, strlen(s), us);
}

static void assert_parses(const char *s, int64_t want)
{
    int64_t us = -1;

    if (parse(s, &us) != MIC_OK)
        fail_msg("'%s' should parse", s);
    if (us != want)
        fail_msg("'%s' parsed to %lld, want %lld", s, (long long)us,
                 (long long)want);
}

static void assert_rejected(const char *s)
{
    int64_t us = 42;
    int rc = parse(s, &us);

    if (rc != MIC_EINVAL)
        fail_msg("'%s' gave %d, want MIC_EINVAL", s, rc);
    assert_int_equal(us, 42); /* the out-parameter is left alone */
}

/* ---- Parsing ---- */

static void parse_utc(void **state)
{
    (void)state;
    assert_parses("1970-01-01T00:00:00Z", 0);
    assert_parses("2026-09-29T08:00:00Z", T_2026);
    assert_parses("9999-12-31T23:59:59Z", 253402300799LL * SEC);
}

static void parse_offsets_normalised(void **state)
{
    (void)state;
    assert_parses("2026-09-29T10:00:00+02:00", T_2026);
    assert_parses("2026-09-29T02:30:00-05:30", T_2026);
    assert_parses("2026-09-29T08:00:00+00:00", T_2026);
    assert_parses("2026-09-29T08:00:00-00:00", T_2026);
    /* an offset that crosses midnight back into the previous day */
    assert_parses("2026-09-30T01:00:00+17:00", T_2026);
    /* and forward into the next one */
    assert_parses("2026-09-28T20:00:00-12:00", T_2026);
}

static void parse_lowercase_t_and_z(void **state)
{
    (void)state;
    assert_parses("2026-09-29t08:00:00z", T_2026);
    assert_parses("2026-09-29t08:00:00Z", T_2026);
    assert_parses("2026-09-29T08:00:00z", T_2026);
    assert_parses("2026-09-29t10:00:00+02:00", T_2026);
}

static void parse_fraction_padded(void **state)
{
    (void)state;
    assert_parses("2026-09-29T08:00:00.1Z", T_2026 + 100000);
    assert_parses("2026-09-29T08:00:00.12Z", T_2026 + 120000);
    assert_parses("2026-09-29T08:00:00.123Z", T_2026 + 123000);
    assert_parses("2026-09-29T08:00:00.1234Z", T_2026 + 123400);
    assert_parses("2026-09-29T08:00:00.12345Z", T_2026 + 123450);
    assert_parses("2026-09-29T08:00:00.123456Z", T_2026 + 123456);
    assert_parses("2026-09-29T08:00:00.000001Z", T_2026 + 1);
    assert_parses("2026-09-29T08:00:00.000000Z", T_2026);
    assert_parses("2026-09-29T10:00:00.5+02:00", T_2026 + 500000);
}

static void parse_seven_fraction_digits_rejected(void **state)
{
    (void)state;
    assert_rejected("2026-09-29T08:00:00.1234567Z");
    assert_rejected("2026-09-29T08:00:00.0000000Z");
    assert_rejected("2026-09-29T08:00:00.Z");  /* a dot needs digits */
}

static void parse_bad_dates_rejected(void **state)
{
    (void)state;
    assert_rejected("2026-02-30T00:00:00Z");  /* Feb 30 */
    assert_rejected("2026-04-31T00:00:00Z");  /* Apr 31 */
    assert_rejected("2026-13-01T00:00:00Z");  /* month 13 */
    assert_rejected("2026-00-01T00:00:00Z");  /* month 0 */
    assert_rejected("2026-01-00T00:00:00Z");  /* day 0 */
    assert_rejected("2026-01-32T00:00:00Z");
    assert_rejected("2026-09-29T24:00:00Z");  /* hour 24 */
    assert_rejected("2026-09-29T08:60:00Z");  /* minute 60 */
    assert_rejected("2026-09-29T08:00:60Z");  /* second 60 */
}

static void parse_bad_syntax_rejected(void **state)
{
    (void)state;
    assert_rejected("");
    assert_rejected("2026-09-29T08:00:00");       /* missing zone */
    assert_rejected("2026-09-29");                /* date only */
    assert_rejected("2026-09-29 08:00:00Z");      /* space separator */
    assert_rejected("2026-09-29T08:00Z");         /* no seconds */
    assert_rejected("2026-9-29T08:00:00Z");       /* one-digit month */
    assert_rejected("2026-09-29T08:00:00Zjunk");  /* trailing garbage */
    assert_rejected("2026-09-29T08:00:00Z ");
    assert_rejected("2026-09-29T08:00:00+02:00x");
    assert_rejected("2026-09-29T08:00:00+0200");  /* offset without colon */
    assert_rejected("2026-09-29T08:00:00+2:00");
    assert_rejected("2026-09-29T08:00:00+24:00"); /* offset hour 24 */
    assert_rejected("2026-09-29T08:00:00+02:60");
    assert_rejected("2026-09-29T08:00:00UTC");
    assert_rejected("x2026-09-29T08:00:00Z");
}

static void parse_pre_1970_rejected(void **state)
{
    (void)state;
    assert_rejected("1969-12-31T23:59:59Z");
    assert_rejected("0001-01-01T00:00:00Z");
    /* 1970 as written, but before the epoch once the offset applies */
    assert_rejected("1970-01-01T00:30:00+01:00");
    assert_parses("1970-01-01T01:00:00+01:00", 0);
}

static void parse_leap_years(void **state)
{
    (void)state;
    assert_parses("2024-02-29T00:00:00Z", 1709164800LL * SEC);
    assert_parses("2000-02-29T12:34:56Z", 951827696LL * SEC); /* /400 */
    assert_rejected("2023-02-29T00:00:00Z");
    assert_rejected("2100-02-29T00:00:00Z"); /* /100 but not /400 */
    assert_rejected("2024-02-30T00:00:00Z");
}

/* Only 'len' bytes are read: what follows is not trailing garbage. */
static void parse_respects_len(void **state)
{
    const char *s = "2026-09-29T08:00:00Zjunk";
    int64_t us = 0;

    (void)state;
    assert_int_equal(mic_time_parse(s, 20, &us), MIC_OK);
    assert_int_equal(us, T_2026);
    /* cut short inside the zone */
    assert_int_equal(mic_time_parse("2026-09-29T08:00:00+02:00", 24, &us),
                     MIC_EINVAL);
    /* cut short before the zone */
    assert_int_equal(mic_time_parse(s, 19, &us), MIC_EINVAL);
}

/* The contract rejects times after 9999; an offset can carry a time
 * written in 9999 into year 10000 UTC, which the formatter cannot show. */
static void parse_after_9999_rejected(void **state)
{
    int64_t us = 0;
    int rc;

    (void)state;
    rc = parse("9999-12-31T23:30:00-01:00", &us);
    if (rc == MIC_OK) {
        char buf[MIC_TIME_LEN + 1];
        mic_time_format(us, buf);
        fail_msg("9999-12-31T23:30:00-01:00 (year 10000 in UTC) was accepted "
                 "and formats as %s", buf);
    }
    assert_int_equal(rc, MIC_EINVAL);
}

/* ---- Formatting ---- */

static void format_exact_shape(void **state)
{
    char buf[MIC_TIME_LEN + 8];

    (void)state;
    memset(buf, 'X', sizeof buf);
    assert_int_equal(mic_time_format(T_2026, buf), MIC_TIME_LEN);
    assert_int_equal(MIC_TIME_LEN, 27);
    assert_int_equal(strlen(buf), 27);
    assert_string_equal(buf, "2026-09-29T08:00:00.000000Z");
    assert_int_equal(buf[MIC_TIME_LEN + 1], 'X'); /* no write past the NUL */

    mic_time_format(0, buf);
    assert_string_equal(buf, "1970-01-01T00:00:00.000000Z");
    mic_time_format(T_2026 + 1, buf);
    assert_string_equal(buf, "2026-09-29T08:00:00.000001Z");
    mic_time_format(T_2026 + 123456, buf);
    assert_string_equal(buf, "2026-09-29T08:00:00.123456Z");
    /* the next second, then back to the one before (the per-thread prefix
     * of the last second formatted must not leak into another) */
    mic_time_format(T_2026 + SEC + 5, buf);
    assert_string_equal(buf, "2026-09-29T08:00:01.000005Z");
    mic_time_format(T_2026 + 7, buf);
    assert_string_equal(buf, "2026-09-29T08:00:00.000007Z");
    mic_time_format(-1, buf);
    assert_string_equal(buf, "1969-12-31T23:59:59.999999Z");
    mic_time_format(-2, buf);
    assert_string_equal(buf, "1969-12-31T23:59:59.999998Z");
    mic_time_format(1709164800LL * SEC + 86399 * SEC + 999999, buf);
    assert_string_equal(buf, "2024-02-29T23:59:59.999999Z");
    mic_time_format(253402300799LL * SEC + 999999, buf);
    assert_string_equal(buf, "9999-12-31T23:59:59.999999Z");
}

static void round_trips(void **state)
{
    static const char *const texts[] = {
        "1970-01-01T00:00:00.000000Z",
        "1970-01-01T00:00:00.000001Z",
        "2000-02-29T12:34:56.789012Z",
        "2024-02-29T00:00:00.000000Z",
        "2024-12-31T23:59:59.999999Z",
        "2026-09-29T08:00:00.000000Z",
        "2038-01-19T03:14:08.000000Z",
        "9999-12-31T23:59:59.999999Z",
    };
    char buf[MIC_TIME_LEN + 1];
    int64_t us;

    (void)state;
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        assert_int_equal(parse(texts[i], &us), MIC_OK);
        assert_int_equal(mic_time_format(us, buf), MIC_TIME_LEN);
        assert_string_equal(buf, texts[i]);
    }
    /* numbers -> text -> numbers, a day at a time across leap years */
    for (int64_t t = 0; t < 40000LL * 86400 * SEC; t += 86400LL * SEC + 7777) {
        int64_t back = -1;
        mic_time_format(t, buf);
        assert_int_equal(mic_time_parse(buf, MIC_TIME_LEN, &back), MIC_OK);
        assert_int_equal(back, t);
    }
    /* an offset time comes back in UTC */
    assert_int_equal(parse("2026-09-29T02:30:00.25-05:30", &us), MIC_OK);
    mic_time_format(us, buf);
    assert_string_equal(buf, "2026-09-29T08:00:00.250000Z");
}

/* ---- The clock ---- */

static int64_t fake_now(void)
{
    return 1234567890123456LL;
}

static void clock_injectable(void **state)
{
    int64_t real;

    (void)state;
    mic_clock_set(fake_now);
    assert_int_equal(mic_now_us(), 1234567890123456LL);
    assert_int_equal(mic_now_us(), 1234567890123456LL);
    mic_clock_set(NULL);
    real = mic_now_us();
    assert_true(real != 1234567890123456LL);
    assert_true(real > 1577836800LL * SEC); /* after 2020-01-01 */
    assert_true(mic_now_us() >= real);
}

static void mono_clock_advances(void **state)
{
    int64_t a = mic_mono_us(), b = mic_mono_us(), m = mic_mono_ms();

    (void)state;
    assert_true(b >= a);
    /* the same clock in two units */
    assert_true(m >= a / 1000);
    assert_true(m <= mic_mono_us() / 1000);
}


/* ---- micd's clock: the model ---- */

#define MS 1000LL
#define HOUR (3600 * SEC)
#define T0 T_2026

/* Tick 'c' every 'step' µs of elapsed time for 'span' µs, with the wall
 * clock at elapsed + 'wall_off'; asserts it never goes back.  Returns the
 * elapsed time (from 'from') at which c->now first reached 'until' (-1 if
 * it did not). */
static int64_t run(struct mic_clock *c, int64_t *el, int64_t wall_off, int64_t step,
                   int64_t span, int64_t until)
{
    int64_t from = *el, reached = -1;

    for (int64_t t = step; t <= span; t += step) {
        int64_t before = c->now, now;
        *el = from + t;
        now = mic_clock_tick(c, *el + wall_off, *el);
        assert_true(now >= before);
        assert_int_equal(now, c->now);
        if (reached < 0 && until && now >= until)
            reached = t;
    }
    return reached;
}

static void model_follows_elapsed(void **state)
{
    struct mic_clock c;
    int64_t el = 5 * SEC;

    (void)state;
    mic_clock_init(&c, T0, el, 0);
    assert_int_equal(c.now, T0);
    run(&c, &el, T0 - 5 * SEC, 10 * MS, 10 * SEC, 0);
    assert_int_equal(c.now, T0 + 10 * SEC);
    assert_int_equal(c.steps, 0);
}

static void model_step_back_is_slewed(void **state)
{
    struct mic_clock c;
    int64_t el = 0, t0, lease, took;

    (void)state;
    mic_clock_init(&c, T0, el, 0);
    run(&c, &el, T0, 100 * MS, 10 * SEC, 0);
    t0 = c.now;
    /* The wall clock steps back an hour: micd's clock does not. */
    assert_true(mic_clock_tick(&c, T0 + el - HOUR, el) == t0);
    /* A 2 s lease from now ends after 2 s / 0.95 of elapsed time. */
    lease = t0 + 2 * SEC;
    took = run(&c, &el, T0 - HOUR, 1 * MS, 3 * SEC, lease);
    assert_true(took >= 2 * SEC && took <= 2 * SEC * 100 / 95 + MS);
    /* 5% slower: an hour is made up in 20 hours, then it follows. */
    run(&c, &el, T0 - HOUR, 10 * SEC, 20 * HOUR, 0);
    assert_int_equal(c.now, T0 + el - HOUR);
    run(&c, &el, T0 - HOUR, 10 * SEC, 60 * SEC, 0);
    assert_int_equal(c.now, T0 + el - HOUR);
    assert_int_equal(c.steps, 0);
}

static void model_step_forward_is_slewed(void **state)
{
    struct mic_clock c;
    int64_t el = 0, t0, took;

    (void)state;
    mic_clock_init(&c, T0, el, 0);
    run(&c, &el, T0, 100 * MS, 1 * SEC, 0);
    t0 = c.now;
    /* An hour forward: leases and retries do not all come due. */
    assert_int_equal(mic_clock_tick(&c, T0 + el + HOUR, el), t0);
    took = run(&c, &el, T0 + HOUR, 1 * MS, 5 * SEC, t0 + 3 * SEC);
    assert_true(took >= 3 * SEC * 100 / 105 && took <= 3 * SEC);
    /* The wall clock's stamps are reached at 5%: in about 20 hours. */
    run(&c, &el, T0 + HOUR, 10 * SEC, 19 * HOUR, 0);
    assert_true(c.now < T0 + el + HOUR);
    run(&c, &el, T0 + HOUR, 10 * SEC, 1 * HOUR + 60 * SEC, 0);
    assert_int_equal(c.now, T0 + el + HOUR);
    assert_int_equal(c.steps, 0);
}

static void model_huge_forward_steps(void **state)
{
    struct mic_clock c;
    int64_t el = 0;

    (void)state;
    mic_clock_init(&c, T0, el, 0);
    el = SEC;
    /* Just under a day ahead: slewed. */
    mic_clock_tick(&c, T0 + el + MIC_CLOCK_STEP_US, el);
    assert_int_equal(c.now, T0 + el + SEC / 20);
    assert_int_equal(c.steps, 0);
    el += SEC;
    /* More than a day ahead: followed at once. */
    mic_clock_tick(&c, T0 + el + MIC_CLOCK_STEP_US + HOUR, el);
    assert_int_equal(c.now, T0 + el + MIC_CLOCK_STEP_US + HOUR);
    assert_int_equal(c.steps, 1);
}

static void model_huge_back_never_backwards(void **state)
{
    struct mic_clock c;
    int64_t el = 0, t0;

    (void)state;
    mic_clock_init(&c, T0, el, 0);
    t0 = c.now;
    /* A week back: micd's clock keeps going, at 95%. */
    run(&c, &el, T0 - 7 * 24 * HOUR, 100 * MS, 100 * SEC, 0);
    assert_int_equal(c.now, t0 + 95 * SEC);
    assert_int_equal(c.steps, 0);
    assert_int_equal(c.wall_max, T0);
}

static void model_floor_and_old_readings(void **state)
{
    struct mic_clock c;
    int64_t el = 50 * SEC;

    (void)state;
    /* The store says micd reached T0 + 10 s; the wall clock says T0. */
    mic_clock_init(&c, T0, el, T0 + 10 * SEC);
    assert_int_equal(c.now, T0 + 10 * SEC);
    mic_clock_init(&c, T0 + 20 * SEC, el, T0 + 10 * SEC);
    assert_int_equal(c.now, T0 + 20 * SEC);
    mic_clock_init(&c, T0, el, T0 + 10 * SEC);
    /* An elapsed reading older than the last: no time passed. */
    assert_int_equal(mic_clock_tick(&c, T0 + 30 * SEC, el - SEC), T0 + 10 * SEC);
    assert_int_equal(c.elapsed, el);
    /* 10 s ahead of the wall clock: made up in 200 s. */
    run(&c, &el, T0 - el, 1 * SEC, 100 * SEC, 0);
    assert_int_equal(c.now, T0 + 100 * SEC + 5 * SEC);
    run(&c, &el, T0 - 50 * SEC, 1 * SEC, 100 * SEC, 0);
    assert_int_equal(c.now, T0 + el - 50 * SEC);
}

static void model_slew_does_not_depend_on_readings(void **state)
{
    struct mic_clock a, b;
    int64_t ea = 0, eb = 0;

    (void)state;
    mic_clock_init(&a, T0, 0, 0);
    mic_clock_init(&b, T0, 0, 0);
    run(&a, &ea, T0 - HOUR, 1 * MS, 60 * SEC, 0);
    run(&b, &eb, T0 - HOUR, 60 * SEC, 60 * SEC, 0);
    assert_int_equal(a.now, b.now);
    assert_int_equal(a.now, T0 + 57 * SEC);
    /* A small difference is closed at once. */
    mic_clock_init(&a, T0, 0, 0);
    assert_int_equal(mic_clock_tick(&a, T0 + SEC + 30 * MS, SEC), T0 + SEC + 30 * MS);
    assert_int_equal(mic_clock_tick(&a, T0 + 2 * SEC + 10 * MS, 2 * SEC), T0 + 2 * SEC + 10 * MS);
    /* A larger one by 5% of the elapsed time. */
    assert_int_equal(mic_clock_tick(&a, T0 + 2 * SEC, 3 * SEC), T0 + 3 * SEC + 10 * MS - 50 * MS);
}

/* ---- micd's clock: the process clock over injected sources ---- */

static int64_t src_wall, src_el;
static int64_t wall_src(void)
{
    return src_wall;
}
static int64_t el_src(void)
{
    return src_el;
}

static void process_clock_over_sources(void **state)
{
    struct mic_clock_stats st;
    int64_t t;

    (void)state;
    src_wall = T0;
    src_el = 7 * SEC;
    mic_clock_set_sources(wall_src, el_src);
    assert_int_equal(mic_now_us(), T0);
    src_wall += SEC;
    src_el += SEC;
    assert_int_equal(mic_now_us(), T0 + SEC);
    /* A step back: neither now nor latest goes back. */
    src_wall -= HOUR;
    assert_int_equal(mic_now_us(), T0 + SEC);
    assert_int_equal(mic_clock_latest_us(), T0 + SEC);
    mic_clock_stats(&st);
    assert_int_equal(st.offset_us, HOUR);
    src_wall += 10 * SEC;
    src_el += 10 * SEC;
    t = mic_now_us();
    assert_int_equal(t, T0 + SEC + 10 * SEC - SEC / 2);
    /* A step forward: latest follows the wall clock, now slews. */
    src_wall += 2 * HOUR;
    assert_int_equal(mic_now_us(), t);
    assert_int_equal(mic_clock_latest_us(), src_wall);
    mic_clock_stats(&st);
    assert_true(st.offset_us < 0);
    /* The floor only raises. */
    mic_clock_floor(t - SEC);
    assert_int_equal(mic_now_us(), t);
    mic_clock_floor(t + 5 * SEC);
    assert_int_equal(mic_now_us(), t + 5 * SEC);
    /* mic_clock_set still overrides everything exactly. */
    mic_clock_set(fake_now);
    assert_int_equal(mic_now_us(), 1234567890123456LL);
    assert_int_equal(mic_clock_latest_us(), 1234567890123456LL);
    mic_clock_set(NULL);
    /* New sources start a new clock. */
    src_wall = T0 + 3 * HOUR;
    mic_clock_set_sources(wall_src, el_src);
    assert_int_equal(mic_now_us(), T0 + 3 * HOUR);
    /* The system's sources again: a clock at the system wall clock. */
    mic_clock_set_sources(NULL, NULL);
    {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        t = mic_now_us() - ((int64_t)ts.tv_sec * SEC + ts.tv_nsec / 1000);
        assert_true(t > -60 * SEC && t < 60 * SEC);
    }
}

static void ages_are_never_negative(void **state)
{
    (void)state;
    assert_true(mic_age_s(T0 + 1500 * MS, T0) == 1.5);
    assert_true(mic_age_s(T0, T0) == 0.0);
    assert_true(mic_age_s(T0, T0 + HOUR) == 0.0);
}

static void mono_condition_times_out(void **state)
{
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv;
    struct timespec ts;
    int64_t t0 = mic_mono_ms();
    int rc;

    (void)state;
    assert_int_equal(mic_cond_init_mono(&cv), 0);
    pthread_mutex_lock(&m);
    mic_mono_deadline(20, &ts);
    do
        rc = pthread_cond_timedwait(&cv, &m, &ts);
    while (rc == 0);
    pthread_mutex_unlock(&m);
    assert_int_equal(rc, ETIMEDOUT);
    assert_true(mic_mono_ms() - t0 >= 20);
    pthread_cond_destroy(&cv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parse_utc),
        cmocka_unit_test(parse_offsets_normalised),
        cmocka_unit_test(parse_lowercase_t_and_z),
        cmocka_unit_test(parse_fraction_padded),
        cmocka_unit_test(parse_seven_fraction_digits_rejected),
        cmocka_unit_test(parse_bad_dates_rejected),
        cmocka_unit_test(parse_bad_syntax_rejected),
        cmocka_unit_test(parse_pre_1970_rejected),
        cmocka_unit_test(parse_leap_years),
        cmocka_unit_test(parse_respects_len),
        cmocka_unit_test(parse_after_9999_rejected),
        cmocka_unit_test(format_exact_shape),
        cmocka_unit_test(round_trips),
        cmocka_unit_test(clock_injectable),
        cmocka_unit_test(mono_clock_advances),
        cmocka_unit_test(model_follows_elapsed),
        cmocka_unit_test(model_step_back_is_slewed),
        cmocka_unit_test(model_step_forward_is_slewed),
        cmocka_unit_test(model_huge_forward_steps),
        cmocka_unit_test(model_huge_back_never_backwards),
        cmocka_unit_test(model_floor_and_old_readings),
        cmocka_unit_test(model_slew_does_not_depend_on_readings),
        cmocka_unit_test(process_clock_over_sources),
        cmocka_unit_test(ages_are_never_negative),
        cmocka_unit_test(mono_condition_times_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
