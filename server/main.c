/* main.c - micd: settings, signals, start and stop.
 *
 * Start: load settings, open the store (refusing an unknown format),
 * start the writer, then the HTTP server.  SIGTERM/SIGINT: stop accepting
 * connections, let in-flight requests reach the writer and be answered,
 * drain the writer (every queued op committed), stop HTTP, close the store.
 * SIGHUP reloads the keys file (--keys): a file that does not parse keeps
 * the keys in force, and the reason is logged.
 * A start-up failure logs and exits with its own code:
 *   2 bad settings (a bad keys file, TLS files that do not go together, a
 *     non-loopback address without --keys) or an LMDB library the store
 *     journal was not written for (journal.h, mic_jnl_lmdb_check), 3 store
 *     cannot open, 4 unknown store format, 5 the writer (or the sink relay)
 *     cannot start, 6 cannot listen; 74 later, when the storage fails
 *     (on_fatal).
 *
 * Testing only: when the environment variable MIC_TEST_CLOCK_US is set (a
 * decimal count of µs since the epoch), the wall clock starts at that value
 * and advances with the monotonic clock (mic_clock_set), so a store written
 * under a fixed clock reads back the same whenever the test runs, and a
 * restart with a later value makes the stored leases and retries come due.
 * A value that is not such a number is a bad setting (exit code 2).
 *
 * micd's clock (clock.h) starts from the later of the wall clock and the
 * reading stored in the store (clock_from_store).
 *
 * `micd --verify DIR` starts no server: it checks the store in DIR
 * (mic_store_verify: every log record's CRC-32C, every index entry that
 * maps to a seq), prints one line per problem and a summary line on
 * stdout, and exits 0 when the store is clean, 1 when anything is bad, 2
 * when the store cannot be opened (none there, micd has it open, another
 * format or an unfinished migration).  See proto/store-format.md,
 * "Verification". */
#define _POSIX_C_SOURCE 200809L
#include "core/clock.h"
#include "core/config.h"
#include "core/err.h"
#include "engine/group.h"
#include "http/history.h"
#include "core/logger.h"
#include "http/routes.h"
#include "engine/schedule.h"
#include "relay/sink.h"
#include "store/store.h"
#include "store/log.h"
#include "store/verify.h"
#include "engine/writer.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t stop_signal, reload_signal;

static void on_signal(int sig)
{
    if (sig == SIGHUP)
        reload_signal = 1;
    else
        stop_signal = sig;
}

/* Fail-stop (DESIGN section 1, "durable before acknowledged"): once the
 * store failed to make a commit durable (a failed fdatasync or write of
 * its journal, a failed checkpoint, LMDB's panic), nothing the kernel
 * still holds can be trusted to reach the disk, and retrying the fsync
 * would only report success for pages it may have dropped (PostgreSQL's
 * fsync lesson).  micd exits at once with status 74 (EX_IOERR), before
 * any request of an unsynced commit is answered; the next start replays
 * the journal, which holds exactly what was synced.  A supervisor
 * (deploy/: systemd Restart=on-failure) starts it again. */
#define EXIT_STORAGE_FAILED 74
static void on_fatal(const char *what, int err)
{
    mic_logger_write(MIC_LEVEL_ERROR, NULL, "fatal: storage failed, exiting", "what", what,
            "error", err ? strerror(err) : "-", NULL);
    _exit(EXIT_STORAGE_FAILED);
}

/* Load --keys: MIC_OK with *out (NULL without --keys), else logged. */
static int load_keys(const struct mic_config *cfg, mic_keys **out)
{
    char why[300], n[16];
    int rc;

    *out = NULL;
    if (!cfg->keys[0])
        return MIC_OK;
    if ((rc = mic_keys_load(cfg->keys, out, why, sizeof why))) {
        mic_logger_write(MIC_LEVEL_ERROR, NULL, "bad keys file", "path", cfg->keys, "reason", why, NULL);
        return rc;
    }
    snprintf(n, sizeof n, "%d", mic_keys_count(*out));
    mic_logger_write(MIC_LEVEL_INFO, NULL, "keys loaded", "path", cfg->keys, "keys", n, NULL);
    return MIC_OK;
}

/* ---- Test clock (MIC_TEST_CLOCK_US) ---- */

static int64_t test_clock_base_us, test_clock_mono_us;

static int64_t test_clock_now_us(void)
{
    return test_clock_base_us + (mic_mono_us() - test_clock_mono_us);
}

/* Install the test clock if MIC_TEST_CLOCK_US is set; -1 if it is invalid. */
static int test_clock_init(void)
{
    const char *v = getenv("MIC_TEST_CLOCK_US");
    char *end;
    long long n;

    if (!v)
        return 0;
    errno = 0;
    n = strtoll(v, &end, 10);
    if (*v < '0' || *v > '9' || *end || errno || n <= 0)
        return -1;
    test_clock_base_us = n;
    test_clock_mono_us = mic_mono_us();
    mic_clock_set(test_clock_now_us);
    return 0;
}

/* micd's clock starts no earlier than the reading the store vouches for
 * (schedule.c stores it): a wall clock set back while micd was down would
 * otherwise stretch the stored leases and retries and take stamps back.
 * A store that cannot be read here is left to the writer to report. */
static void clock_from_store(mic_store *store)
{
    int64_t stored = 0, wall;
    mic_txn *t;
    char ahead[32];

    if (mic_txn_begin(store, 0, &t))
        return;
    if (mic_store_clock_get(t, &stored))
        stored = 0;
    mic_txn_abort(t);
    wall = mic_now_us();
    mic_clock_floor(stored);
    if (stored > wall + 1000000) {
        snprintf(ahead, sizeof ahead, "%.3f", (double)(stored - wall) / 1e6);
        mic_logger_write(MIC_LEVEL_WARN, NULL, "the store's clock is ahead of the wall clock: micd's "
                "clock continues from the store's and slews toward the wall clock",
                "ahead_s", ahead, NULL);
    }
}

static int write_port_file(const char *path, int port)
{
    char tmp[600];
    FILE *f;

    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (!(f = fopen(tmp, "w")))
        return -1;
    fprintf(f, "%d\n", port);
    if (fclose(f))
        return -1;
    return rename(tmp, path);
}

/* micd --verify DIR: exit 0 clean, 1 anything bad, 2 cannot open. */
static int verify(const char *dir)
{
    struct mic_verify_report rep;
    int rc = mic_store_verify(dir, stdout, &rep);

    if (rc) {
        printf("verify: cannot check %s: %s\n", dir,
               rc == MIC_ENOTFOUND  ? "no store there (no data.mdb)"
               : rc == MIC_EBUSY    ? "a running micd has it open (stop it first)"
               : rc == MIC_EVERSION ? "not a store of format 4 with its migration done "
                                      "(open it once with this micd)"
                                    : mic_strerror(rc));
        return 2;
    }
    if (rep.replayed)
        printf("verify: replayed %llu journal records a crash left first\n",
               (unsigned long long)rep.replayed);
    printf("verify: %llu log records, %llu bad records; %llu index entries, %llu dangling: %s\n",
           (unsigned long long)rep.records, (unsigned long long)rep.bad_records,
           (unsigned long long)rep.entries, (unsigned long long)rep.dangling,
           rep.bad_records || rep.dangling ? "CORRUPT" : "ok");
    return rep.bad_records || rep.dangling ? 1 : 0;
}

/* ---- Start and stop ---- */

/* Exit codes of a start that fails (the header above lists them). */
#define EXIT_BAD_SETTINGS 2
#define EXIT_STORE 3
#define EXIT_STORE_FORMAT 4
#define EXIT_WRITER 5
#define EXIT_LISTEN 6
#define START (-1) /* settings: go on and start */

/* Load and check the settings (flags, --keys, TLS files, test clock):
 * START with *keys (NULL without --keys), or the exit code (0 after --help). */
static int settings(int argc, char **argv, struct mic_config *cfg, mic_keys **keys)
{
    char err[600];
    int rc = mic_config_load(cfg, argc, argv, err, sizeof err);

    *keys = NULL;
    if (rc == MIC_OK && cfg->help) {
        printf("\n  micd --verify DIR      check the store in DIR (every record's checksum, every\n"
               "                         index entry) and exit: 0 clean, 1 bad, 2 cannot open\n");
        return 0;
    }
    if (rc) {
        fprintf(stderr, "micd: %s\n", err);
        return EXIT_BAD_SETTINGS;
    }
    mic_logger_set_level(cfg->log_level);
    if (load_keys(cfg, keys))
        return EXIT_BAD_SETTINGS;
    if (!*keys && mic_http_listen_is_loopback(cfg->listen) == 0) {
        fprintf(stderr, "micd: refusing to listen on %s without --keys: only a loopback "
                "address may go unprotected\n", cfg->listen);
        return EXIT_BAD_SETTINGS;
    }
    if (!cfg->tls_cert[0] != !cfg->tls_key[0] ||
        (cfg->tls_cert[0] && mic_http_tls_check(cfg->tls_cert, cfg->tls_key, err, sizeof err))) {
        fprintf(stderr, "micd: %s\n", cfg->tls_cert[0] && cfg->tls_key[0] ? err
                : "--tls-cert and --tls-key go together");
        goto fail_keys;
    }
    if (test_clock_init()) {
        fprintf(stderr, "micd: MIC_TEST_CLOCK_US must be a decimal count of "
                "microseconds since the epoch\n");
        goto fail_keys;
    }
    return START;
fail_keys:
    mic_keys_free(*keys);
    *keys = NULL;
    return EXIT_BAD_SETTINGS;
}

/* Ignore SIGPIPE; block SIGTERM, SIGINT and SIGHUP (the mask before in *old). */
static void block_signals(sigset_t *old)
{
    sigset_t mask;

    signal(SIGPIPE, SIG_IGN);
    /* Every thread started from here on blocks SIGTERM and SIGINT, so
     * they reach the main thread, which waits for them in sigsuspend. */
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &mask, old);
}

/* Start the admin page's chart and hand it to 'http': NULL if it failed. */
static mic_history *history_start(mic_store *store, mic_http *http)
{
    mic_history *history = NULL;

    /* The admin page's chart (history.h): optional, so a failure to
     * start it is logged and micd serves without it (503 on its route). */
    if (mic_history_new(&history, store) || mic_history_start(history, MIC_HISTORY_INTERVAL_MS)) {
        mic_logger_write(MIC_LEVEL_WARN, NULL, "cannot start the stats history: GET /v1/stats/history "
                "answers 503", NULL);
        mic_history_free(history);
        history = NULL;
    }
    mic_http_set_history(http, history);
    return history;
}

/* Catch the signals, say where micd listens, write --port-file. */
static void announce(const struct mic_config *cfg, int port)
{
    struct sigaction sa;
    char portstr[16];

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    snprintf(portstr, sizeof portstr, "%d", port);
    mic_logger_write(MIC_LEVEL_INFO, NULL, "listening", "listen", cfg->listen, "port",
            portstr, "data", cfg->data_dir, "durability",
            cfg->durability == MIC_DURABILITY_NONE ? "none" : "fsync", NULL);
    if (cfg->port_file[0] && write_port_file(cfg->port_file, port))
        mic_logger_write(MIC_LEVEL_WARN, NULL, "cannot write port file", "path",
                cfg->port_file, NULL);
}

/* Wait for SIGTERM or SIGINT, reloading the keys on each SIGHUP. */
static void serve(const struct mic_config *cfg, mic_http *http, const sigset_t *old)
{
    mic_keys *keys;

    while (!stop_signal) {
        sigsuspend(old);
        if (reload_signal) {
            reload_signal = 0;
            if (!cfg->keys[0])
                mic_logger_write(MIC_LEVEL_WARN, NULL, "SIGHUP without --keys: nothing to reload", NULL);
            else if (load_keys(cfg, &keys))
                mic_logger_write(MIC_LEVEL_ERROR, NULL, "keys not reloaded: the keys in force stay",
                        "path", cfg->keys, NULL);
            else
                mic_http_set_keys(http, keys);
        }
    }
    mic_logger_write(MIC_LEVEL_INFO, NULL, "stopping", "signal",
            stop_signal == SIGTERM ? "SIGTERM" : "SIGINT", NULL);
}

/* Start in order (store, groups, schedule and writer, sink relay, HTTP),
 * serve until a signal, and stop through one ladder: a step that fails
 * jumps to the label that undoes the steps before it, in reverse. */
int main(int argc, char **argv)
{
    struct mic_config cfg;
    struct mic_writer_hooks hooks;
    mic_groups *groups;
    mic_sched *sched = NULL;
    mic_store *store;
    mic_writer *writer;
    mic_http *http = NULL;
    mic_history *history = NULL;
    mic_sink *sink;
    mic_keys *keys;
    sigset_t old;
    int rc, port, code;

    /* Request-sized blocks (a 100-event publish holds about 150 KiB of
     * parsed events) come from the heap and are reused, instead of an
     * mmap and munmap -- and the kernel zeroing pages -- per request; the
     * writer hands memory back with malloc_trim when idle. */
    mallopt(M_MMAP_THRESHOLD, 16 * 1024 * 1024);

    if (argc >= 2 && strcmp(argv[1], "--verify") == 0) {
        if (argc != 3) {
            fprintf(stderr, "micd: usage: micd --verify DIR\n");
            return EXIT_BAD_SETTINGS;
        }
        return verify(argv[2]);
    }
    if ((code = settings(argc, argv, &cfg, &keys)) != START)
        return code;
    block_signals(&old);

    mic_store_set_journal_size(cfg.journal_size);
    mic_store_on_fatal(on_fatal);
    if ((rc = mic_store_open(&store, cfg.data_dir, cfg.map_size, cfg.map_max,
                             cfg.durability == MIC_DURABILITY_NONE))) {
        code = rc == MIC_EVERSION ? EXIT_STORE_FORMAT
             : rc == MIC_ELMDB    ? EXIT_BAD_SETTINGS
                                  : EXIT_STORE;
        goto fail_store;
    }
    clock_from_store(store);
    if (mic_groups_new(&groups, store)) {
        mic_logger_write(MIC_LEVEL_ERROR, NULL, "cannot load the groups", NULL);
        code = EXIT_STORE;
        goto fail_groups;
    }
    memset(&hooks, 0, sizeof hooks);
    if (mic_sched_new(&sched, groups) == MIC_OK)
        mic_sched_hooks(sched, &hooks);
    if (!hooks.sched || mic_writer_start(&writer, store, &cfg, &hooks)) {
        mic_logger_write(MIC_LEVEL_ERROR, NULL, "cannot start the writer", NULL);
        code = EXIT_WRITER;
        goto fail_writer;
    }
    /* The relay of sink groups (its own threads; before the HTTP server,
     * whose GET /v1/groups and /metrics show its figures). */
    if (mic_sink_start(&sink, store, writer, &cfg)) {
        mic_logger_write(MIC_LEVEL_ERROR, NULL, "cannot start the sink relay", NULL);
        code = EXIT_WRITER;
        goto fail_sink;
    }
    /* 'keys' becomes the server's, also when it does not start. */
    rc = mic_http_start(&http, &cfg, store, writer, keys, &port);
    keys = NULL;
    if (rc) {
        code = EXIT_LISTEN;
        goto fail_http;
    }
    history = history_start(store, http);
    announce(&cfg, port);

    serve(&cfg, http, &old);
    mic_http_quiesce(http);
    mic_http_drain(http, 2000);
    code = 0;
fail_http:
    /* The relay stops claiming and settles what JetStream acknowledged
     * (at most about 2 s) while the writer still runs. */
    mic_sink_stop(sink);
    mic_writer_stop(writer);
    mic_http_drain(http, 1000); /* http NULL: returns at once */
    mic_http_stop(http);
    mic_history_free(history); /* after the server that renders it */
    mic_sink_free(sink);
fail_sink:
    mic_writer_free(writer);
fail_writer:
    mic_sched_free(sched);
    mic_groups_free(groups);
fail_groups:
    mic_store_close(store);
fail_store:
    mic_keys_free(keys);
    if (code == 0)
        mic_logger_write(MIC_LEVEL_INFO, NULL, "stopped", NULL);
    return code;
}
