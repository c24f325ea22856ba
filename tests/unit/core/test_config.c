/* test_config.c - the settings table: defaults, flags, size suffixes,
 * bounds and the config file (server/core/config.h). */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"
#include "core/err.h"
#include "core/logger.h"

#define KiB 1024ull
#define MiB (1024ull * KiB)
#define GiB (1024ull * MiB)
#define TiB (1024ull * GiB)

#define ARGC(a) ((int)(sizeof(a) / sizeof((a)[0])))

struct fixture {
    struct mic_config c;
    char err[256];
    char path[64];  /* a config file, if the test wrote one */
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);

    if (!f)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    if (f->path[0])
        unlink(f->path);
    free(f);
    return 0;
}

/* Load with 'argv' and expect success. */
static void load_ok(struct fixture *f, int argc, char **argv)
{
    int rc;

    f->err[0] = 0;
    rc = mic_config_load(&f->c, argc, argv, f->err, sizeof f->err);
    if (rc != 0)
        fail_msg("rc %d: %s", rc, f->err);
}

/* Load with 'argv', expect MIC_EINVAL and a message containing 'needle'. */
static void load_bad(struct fixture *f, int argc, char **argv,
                     const char *needle)
{
    int rc;

    f->err[0] = 0;
    rc = mic_config_load(&f->c, argc, argv, f->err, sizeof f->err);
    if (rc != MIC_EINVAL)
        fail_msg("argv[1]=%s: rc %d, want MIC_EINVAL", argc > 1 ? argv[1] : "", rc);
    assert_true(f->err[0] != 0);
    if (!strstr(f->err, needle))
        fail_msg("message '%s' does not mention '%s'", f->err, needle);
}

/* One flag with one value, either as two words or as --flag=value. */
static void load_one(struct fixture *f, const char *flag, const char *value,
                     int equals, int want_ok)
{
    char a[600];
    char *argv[3] = {"micd", a, (char *)value};
    int argc = equals ? 2 : 3;

    if (equals)
        snprintf(a, sizeof a, "--%s=%s", flag, value);
    else
        snprintf(a, sizeof a, "--%s", flag);
    if (want_ok)
        load_ok(f, argc, argv);
    else
        load_bad(f, argc, argv, flag);
}

/* Write 'text' to a new temp file whose name goes to f->path. */
static void write_file(struct fixture *f, const char *text)
{
    int fd;

    snprintf(f->path, sizeof f->path, "/tmp/mic-test-conf-XXXXXX");
    fd = mkstemp(f->path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

/* ---- Defaults ---- */

static void defaults(void **state)
{
    struct fixture *f = *state;
    char *argv[] = {"micd"};

    load_ok(f, ARGC(argv), argv);
    assert_string_equal(f->c.listen, "127.0.0.1:8080");
    assert_string_equal(f->c.data_dir, "./var");
    assert_string_equal(f->c.port_file, "");
    assert_int_equal(f->c.max_body, 16 * MiB);
    assert_int_equal(f->c.max_batch, 1000);
    assert_int_equal(f->c.max_depth, 32);
    assert_int_equal(f->c.max_connections, 1024);
    assert_int_equal(f->c.per_ip_connections, 256);
    assert_int_equal(f->c.idle_timeout_s, 75);
    assert_int_equal(f->c.durability, MIC_DURABILITY_FSYNC);
    assert_int_equal(f->c.map_size, 1 * GiB);
    assert_int_equal(f->c.map_max, 64 * GiB);
    assert_int_equal(f->c.http_threads, 2);
    assert_int_equal(f->c.writer_queue, 65536);
    assert_int_equal(f->c.writer_batch, 4096);
    assert_int_equal(f->c.no_auto_topics, 0);
    assert_int_equal(f->c.log_level, MIC_LEVEL_INFO);
    assert_int_equal(f->c.replay_select_share, 25);

    /* argc 0 is the same */
    load_ok(f, 0, argv);
    assert_int_equal(f->c.max_batch, 1000);
}

/* ---- Flags ---- */

static void flag_forms(void **state)
{
    struct fixture *f = *state;
    char *argv[] = {"micd", "--listen", "0.0.0.0:9000", "--data=/srv/mic",
                    "--max-batch", "10", "--max-depth=8",
                    "--port-file", "/tmp/port", "--idle-timeout=1"};

    load_ok(f, ARGC(argv), argv);
    assert_string_equal(f->c.listen, "0.0.0.0:9000");
    assert_string_equal(f->c.data_dir, "/srv/mic");
    assert_string_equal(f->c.port_file, "/tmp/port");
    assert_int_equal(f->c.max_batch, 10);
    assert_int_equal(f->c.max_depth, 8);
    assert_int_equal(f->c.idle_timeout_s, 1);
    /* untouched settings keep their defaults */
    assert_int_equal(f->c.max_connections, 1024);

    load_one(f, "max-connections", "7", 0, 1);
    assert_int_equal(f->c.max_connections, 7);
    load_one(f, "max-connections", "8", 1, 1);
    assert_int_equal(f->c.max_connections, 8);
    load_one(f, "per-ip-connections", "3", 0, 1);
    assert_int_equal(f->c.per_ip_connections, 3);
    /* an empty value after '=' for a string */
    load_one(f, "port-file", "", 1, 1);
    assert_string_equal(f->c.port_file, "");
}

static void last_flag_wins(void **state)
{
    struct fixture *f = *state;
    char *argv[] = {"micd", "--max-batch", "5", "--max-batch=6"};

    load_ok(f, ARGC(argv), argv);
    assert_int_equal(f->c.max_batch, 6);
}

static void size_suffixes(void **state)
{
    struct fixture *f = *state;
    static const struct {
        const char *text;
        uint64_t bytes;
    } ok[] = {
        {"64M", 64 * MiB}, {"64m", 64 * MiB}, {"2G", 2 * GiB},
        {"1024K", 1 * MiB}, {"1048576", 1 * MiB}, {"1T", 1 * TiB},
        {"1024T", 1024 * TiB},
    };
    static const char *const bad[] = {"64MB", "1.5G", "M", "", "-1M", " 64M",
                                      "64 M", "64X", "1025T", "512K",
                                      "99999999999999999999", "20000000T"};

    (void)state;
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        load_one(f, "map-size", ok[i].text, i % 2, 1);
        if (f->c.map_size != ok[i].bytes)
            fail_msg("--map-size %s gave %llu", ok[i].text,
                     (unsigned long long)f->c.map_size);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        load_one(f, "map-size", bad[i], i % 2, 0);

    load_one(f, "max-body", "1K", 0, 1);
    assert_int_equal(f->c.max_body, 1024);
    load_one(f, "max-body", "1G", 1, 1);
    assert_int_equal(f->c.max_body, 1 * GiB);
    load_one(f, "max-body", "1023", 0, 0);
    load_one(f, "max-body", "2G", 0, 0);
    /* integer settings take no suffix */
    load_one(f, "max-batch", "1K", 0, 0);
}

static void map_max_follows_map_size(void **state)
{
    struct fixture *f = *state;
    char *argv[] = {"micd", "--map-size", "2G", "--map-max", "1G"};
    char *argv2[] = {"micd", "--map-size", "2M", "--map-max", "8M"};

    load_ok(f, ARGC(argv), argv);
    assert_int_equal(f->c.map_size, 2 * GiB);
    assert_int_equal(f->c.map_max, 2 * GiB);
    load_ok(f, ARGC(argv2), argv2);
    assert_int_equal(f->c.map_size, 2 * MiB);
    assert_int_equal(f->c.map_max, 8 * MiB);
}

static void out_of_range(void **state)
{
    struct fixture *f = *state;
    static const struct {
        const char *flag, *value;
    } bad[] = {
        {"max-batch", "0"}, {"max-batch", "100001"}, {"max-batch", "-1"},
        {"max-batch", "abc"}, {"max-batch", ""}, {"max-batch", "10x"},
        {"max-depth", "1"}, {"max-depth", "2001"},
        {"max-connections", "0"}, {"per-ip-connections", "1000001"},
        {"idle-timeout", "0"}, {"idle-timeout", "86401"},
        {"http-threads", "65"}, {"writer-queue", "0"}, {"writer-batch", "0"},
        {"max-batch", "4294967297"}, /* would wrap to 1 as an int */
        {"replay-select-share", "0"}, {"replay-select-share", "101"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        load_one(f, bad[i].flag, bad[i].value, 0, 0);
        load_one(f, bad[i].flag, bad[i].value, 1, 0);
    }
    /* and the bounds themselves are accepted */
    load_one(f, "max-batch", "1", 0, 1);
    assert_int_equal(f->c.max_batch, 1);
    load_one(f, "max-batch", "100000", 0, 1);
    assert_int_equal(f->c.max_batch, 100000);
    load_one(f, "max-depth", "2", 1, 1);
    assert_int_equal(f->c.max_depth, 2);
    load_one(f, "replay-select-share", "1", 0, 1);
    assert_int_equal(f->c.replay_select_share, 1);
    load_one(f, "replay-select-share", "100", 1, 1);
    assert_int_equal(f->c.replay_select_share, 100);
}

static void long_string_rejected(void **state)
{
    struct fixture *f = *state;
    char listen[129];

    memset(listen, 'a', 128);
    listen[128] = 0;
    load_one(f, "listen", listen, 0, 0);
    listen[127] = 0; /* 127 bytes plus NUL fits */
    load_one(f, "listen", listen, 1, 1);
    assert_int_equal(strlen(f->c.listen), 127);
}

static void unknown_and_stray_arguments(void **state)
{
    struct fixture *f = *state;
    char *a1[] = {"micd", "--bogus", "1"};
    char *a2[] = {"micd", "--bogus=1"};
    char *a3[] = {"micd", "stray"};
    char *a4[] = {"micd", "-l", "x"};
    char *a5[] = {"micd", "--listen"};
    char *a6[] = {"micd", "--max-batch", "5", "extra"};
    char *a7[] = {"micd", "--"};

    (void)state;
    load_bad(f, ARGC(a1), a1, "--bogus");
    load_bad(f, ARGC(a2), a2, "--bogus");
    load_bad(f, ARGC(a3), a3, "stray");
    load_bad(f, ARGC(a4), a4, "-l");
    load_bad(f, ARGC(a5), a5, "listen");
    load_bad(f, ARGC(a6), a6, "extra");
    load_bad(f, ARGC(a7), a7, "--");
}

static void boolean_flag(void **state)
{
    struct fixture *f = *state;
    char *a1[] = {"micd", "--no-auto-topics"};
    char *a2[] = {"micd", "--no-auto-topics=true"};
    char *a3[] = {"micd", "--no-auto-topics=0"};
    char *a4[] = {"micd", "--no-auto-topics=false"};
    char *a5[] = {"micd", "--no-auto-topics=yes"};
    char *a6[] = {"micd", "--no-auto-topics", "--max-batch", "3"};

    (void)state;
    load_ok(f, ARGC(a1), a1);
    assert_int_equal(f->c.no_auto_topics, 1);
    load_ok(f, ARGC(a2), a2);
    assert_int_equal(f->c.no_auto_topics, 1);
    load_ok(f, ARGC(a3), a3);
    assert_int_equal(f->c.no_auto_topics, 0);
    load_ok(f, ARGC(a4), a4);
    assert_int_equal(f->c.no_auto_topics, 0);
    load_bad(f, ARGC(a5), a5, "no-auto-topics");
    /* the flag takes no value word: the next flag is read as a flag */
    load_ok(f, ARGC(a6), a6);
    assert_int_equal(f->c.no_auto_topics, 1);
    assert_int_equal(f->c.max_batch, 3);
}

static void durability_and_log_level(void **state)
{
    struct fixture *f = *state;

    load_one(f, "durability", "none", 0, 1);
    assert_int_equal(f->c.durability, MIC_DURABILITY_NONE);
    load_one(f, "durability", "fsync", 1, 1);
    assert_int_equal(f->c.durability, MIC_DURABILITY_FSYNC);
    load_one(f, "durability", "NONE", 0, 0);
    load_one(f, "durability", "sometimes", 1, 0);
    load_one(f, "log-level", "debug", 0, 1);
    assert_int_equal(f->c.log_level, MIC_LEVEL_DEBUG);
    load_one(f, "log-level", "error", 1, 1);
    assert_int_equal(f->c.log_level, MIC_LEVEL_ERROR);
    load_one(f, "log-level", "loud", 0, 0);
    /* a refused line leaves the setting as it was (found by fuzz_config) */
    {
        struct mic_config c = f->c;
        char err[128];

        c.log_level = MIC_LEVEL_WARN;
        assert_int_equal(mic_config_parse(&c, "log-level = loud\n", 17, "mem", err, sizeof err),
                         MIC_EINVAL);
        assert_int_equal(c.log_level, MIC_LEVEL_WARN);
    }
}

/* ---- Config file ---- */

static void config_file(void **state)
{
    struct fixture *f = *state;
    char *argv[3] = {"micd", "--config", NULL};
    char eq[80];
    char *argv2[2] = {"micd", eq};

    write_file(f, "# MIC settings\n"
                  "\n"
                  "   \t\n"
                  "  listen = 0.0.0.0:7000\n"
                  "max-batch=50\n"
                  "\t# an indented comment\n"
                  "data   =   /srv/mic data  \n"
                  "durability = none\n"
                  "no-auto-topics = true\n"
                  "map-size = 128M\r\n"
                  "idle-timeout = 9");  /* no final newline */
    argv[2] = f->path;
    load_ok(f, ARGC(argv), argv);
    assert_string_equal(f->c.listen, "0.0.0.0:7000");
    assert_int_equal(f->c.max_batch, 50);
    assert_string_equal(f->c.data_dir, "/srv/mic data");
    assert_int_equal(f->c.durability, MIC_DURABILITY_NONE);
    assert_int_equal(f->c.no_auto_topics, 1);
    assert_int_equal(f->c.map_size, 128 * MiB);
    assert_int_equal(f->c.idle_timeout_s, 9);
    assert_int_equal(f->c.max_depth, 32); /* not in the file: default */

    snprintf(eq, sizeof eq, "--config=%s", f->path);
    load_ok(f, ARGC(argv2), argv2);
    assert_int_equal(f->c.max_batch, 50);
}

static void flags_override_file(void **state)
{
    struct fixture *f = *state;
    char *after[] = {"micd", "--config", NULL, "--max-batch", "7",
                     "--durability=fsync"};
    char *before[] = {"micd", "--max-batch=8", "--listen", "1.2.3.4:1",
                      "--config", NULL};

    write_file(f, "max-batch = 50\nlisten = 0.0.0.0:7000\ndurability = none\n"
                  "max-depth = 5\n");
    after[2] = before[5] = f->path;
    load_ok(f, ARGC(after), after);
    assert_int_equal(f->c.max_batch, 7);
    assert_int_equal(f->c.durability, MIC_DURABILITY_FSYNC);
    assert_string_equal(f->c.listen, "0.0.0.0:7000");
    assert_int_equal(f->c.max_depth, 5);

    /* a flag written before --config still wins */
    load_ok(f, ARGC(before), before);
    assert_int_equal(f->c.max_batch, 8);
    assert_string_equal(f->c.listen, "1.2.3.4:1");
    assert_int_equal(f->c.max_depth, 5);
}

static void bad_config_files(void **state)
{
    struct fixture *f = *state;
    static const struct {
        const char *text, *needle;
    } bad[] = {
        {"# ok\nbogus = 1\n", ":2: unknown setting 'bogus'"},
        {"listen 0.0.0.0:1\n", ":1: expected name = value"},
        {"max-batch = 0\n", "max-batch"},
        {"durability = maybe\n", "durability"},
    };
    char *argv[] = {"micd", "--config", NULL};
    char *missing[] = {"micd", "--config", "/nonexistent/mic.conf"};
    char *noarg[] = {"micd", "--config"};

    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file(f, bad[i].text);
        argv[2] = f->path;
        load_bad(f, ARGC(argv), argv, bad[i].needle);
        assert_non_null(strstr(f->err, bad[i].needle));
        unlink(f->path);
        f->path[0] = 0;
    }
    load_bad(f, ARGC(missing), missing, "/nonexistent/mic.conf");
    load_bad(f, ARGC(noarg), noarg, "--config");
}

/* A line longer than any line buffer is one line: a long comment that
 * ends in "name = value" sets nothing, a long value is refused whole, and
 * a NUL byte is refused with its line number. */
static void long_lines_and_nul(void **state)
{
    struct fixture *f = *state;
    char *argv[] = {"micd", "--config", NULL};
    size_t n = 5000;
    char *text = malloc(n + 64);

    assert_non_null(text);
    memset(text, 'x', n);
    text[0] = '#';
    strcpy(text + n, " listen = 0.0.0.0:1\nmax-batch = 9\n");
    write_file(f, text);
    argv[2] = f->path;
    load_ok(f, ARGC(argv), argv);
    assert_string_equal(f->c.listen, "127.0.0.1:8080");
    assert_int_equal(f->c.max_batch, 9);
    unlink(f->path);

    memcpy(text, "data = ", 7);
    strcpy(text + n, "\n");
    write_file(f, text);
    load_bad(f, ARGC(argv), argv, "invalid value for data");
    free(text);

    /* mic_config_parse straight from memory */
    {
        struct mic_config c;
        static const char nul[] = "max-batch = 3\nlisten = a\0b\n";
        char err[128];

        load_ok(f, 1, argv);
        c = f->c;
        assert_int_equal(mic_config_parse(&c, nul, sizeof nul - 1, "mem", err, sizeof err),
                         MIC_EINVAL);
        assert_string_equal(err, "mem:2: a NUL byte");
        assert_int_equal(mic_config_parse(&c, "max-depth = 7", 13, "mem", err, sizeof err),
                         MIC_OK);
        assert_int_equal(c.max_depth, 7);
        assert_int_equal(mic_config_parse(&c, "", 0, "mem", err, sizeof err), MIC_OK);
    }
}

/* ---- Help ---- */

static void help_is_flagged(void **state)
{
    struct fixture *f = *state;
    char *a1[] = {"micd", "--max-batch", "5", "--help"};
    char *a2[] = {"micd", "-h"};
    char *a3[] = {"micd", "--max-batch", "5"};
    int saved, null, h1, h2;

    fflush(stdout);
    saved = dup(STDOUT_FILENO);
    null = open("/dev/null", O_WRONLY);
    assert_true(saved >= 0 && null >= 0);
    dup2(null, STDOUT_FILENO);
    int r1 = mic_config_load(&f->c, ARGC(a1), a1, f->err, sizeof f->err);
    h1 = f->c.help;
    int r2 = mic_config_load(&f->c, ARGC(a2), a2, f->err, sizeof f->err);
    h2 = f->c.help;
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    close(null);
    assert_int_equal(r1, MIC_OK);
    assert_int_equal(r2, MIC_OK);
    assert_true(h1 && h2);
    assert_int_equal(mic_config_load(&f->c, ARGC(a3), a3, f->err, sizeof f->err), MIC_OK);
    assert_false(f->c.help);
}

static void usage_lists_every_flag(void **state)
{
    static const char *const flags[] = {
        "--listen", "--data", "--port-file", "--map-size", "--map-max",
        "--durability", "--max-body", "--max-batch", "--max-depth",
        "--max-connections", "--per-ip-connections", "--idle-timeout",
        "--http-threads", "--writer-queue", "--writer-batch",
        "--no-auto-topics", "--log-level", "--config", "--backup-stall-timeout",
        "--replay-select-share",
    };
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);

    (void)state;
    assert_non_null(m);
    mic_config_usage(m);
    fclose(m);
    assert_true(len > 0);
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (!strstr(text, flags[i]))
            fail_msg("usage does not mention %s", flags[i]);
    assert_non_null(strstr(text, "default: 127.0.0.1:8080"));
    assert_non_null(strstr(text, "default: 1000, range 1..100000"));
    assert_non_null(strstr(text, "default: 16M"));
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(defaults, setup, teardown),
        cmocka_unit_test_setup_teardown(flag_forms, setup, teardown),
        cmocka_unit_test_setup_teardown(last_flag_wins, setup, teardown),
        cmocka_unit_test_setup_teardown(size_suffixes, setup, teardown),
        cmocka_unit_test_setup_teardown(map_max_follows_map_size, setup, teardown),
        cmocka_unit_test_setup_teardown(out_of_range, setup, teardown),
        cmocka_unit_test_setup_teardown(long_string_rejected, setup, teardown),
        cmocka_unit_test_setup_teardown(unknown_and_stray_arguments, setup, teardown),
        cmocka_unit_test_setup_teardown(boolean_flag, setup, teardown),
        cmocka_unit_test_setup_teardown(durability_and_log_level, setup, teardown),
        cmocka_unit_test_setup_teardown(config_file, setup, teardown),
        cmocka_unit_test_setup_teardown(flags_override_file, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_config_files, setup, teardown),
        cmocka_unit_test_setup_teardown(long_lines_and_nul, setup, teardown),
        cmocka_unit_test_setup_teardown(help_is_flagged, setup, teardown),
        cmocka_unit_test_setup_teardown(usage_lists_every_flag, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
