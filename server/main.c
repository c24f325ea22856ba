/* main.c - micd: settings, signals, start and stop.
 *
 * Start: load settings, open the store (refusing an unknown format),
 * start the writer, then the HTTP server.  SIGTERM/SIGINT: stop accepting
 * connections, let in-flight requests reach the writer and be answered,
 * drain the writer (every queued op committed), stop HTTP, close the store.
 * A start-up failure logs and exits with its own code:
 *   2 bad settings, 3 store cannot open, 4 unknown store format,
 *   5 writer cannot start, 6 cannot listen.
 *
 * Testing only: when the environment variable MIC_TEST_CLOCK_US is set (a
 * decimal count of µs since the epoch), the wall clock starts at that value
 * and advances with the monotonic clock (mic_clock_set), so a store written
 * under a fixed clock reads back the same whenever the test runs, and a
 * restart with a later value makes the stored leases and retries come due.
 * A value that is not such a number is a bad setting (exit code 2). */
#define _POSIX_C_SOURCE 200809L
#include "clock.h"
#include "config.h"
#include "err.h"
#include "group.h"
#include "log.h"
#include "routes.h"
#include "schedule.h"
#include "store.h"
#include "writer.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
    stop_signal = sig;
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

int main(int argc, char **argv)
{
    struct mic_config cfg;
    struct mic_writer_hooks hooks;
    struct sigaction sa;
    mic_groups *groups;
    mic_sched *sched;
    mic_store *store;
    mic_writer *writer;
    mic_http *http;
    char err[256], portstr[16];
    sigset_t mask, old;
    int rc, port;

    rc = mic_config_load(&cfg, argc, argv, err, sizeof err);
    if (rc == MIC_OK && cfg.help)
        return 0;
    if (rc) {
        fprintf(stderr, "micd: %s\n", err);
        return 2;
    }
    mic_log_set_level(cfg.log_level);
    if (test_clock_init()) {
        fprintf(stderr, "micd: MIC_TEST_CLOCK_US must be a decimal count of "
                "microseconds since the epoch\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    /* Every thread started from here on blocks SIGTERM and SIGINT, so
     * they reach the main thread, which waits for them in sigsuspend. */
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    pthread_sigmask(SIG_BLOCK, &mask, &old);

    rc = mic_store_open(&store, cfg.data_dir, cfg.map_size, cfg.map_max,
                        cfg.durability == MIC_DURABILITY_NONE);
    if (rc == MIC_EVERSION)
        return 4;
    if (rc)
        return 3;
    if (mic_groups_new(&groups, store)) {
        mic_log(MIC_LOG_ERROR, NULL, "cannot load the groups", NULL);
        mic_store_close(store);
        return 3;
    }
    memset(&hooks, 0, sizeof hooks);
    if (mic_sched_new(&sched, groups) == MIC_OK)
        mic_sched_hooks(sched, &hooks);
    if (!hooks.sched || mic_writer_start(&writer, store, &cfg, &hooks)) {
        mic_log(MIC_LOG_ERROR, NULL, "cannot start the writer", NULL);
        mic_sched_free(hooks.sched);
        mic_groups_free(groups);
        mic_store_close(store);
        return 5;
    }
    if (mic_http_start(&http, &cfg, store, writer, &port)) {
        mic_writer_free(writer);
        mic_sched_free(sched);
        mic_groups_free(groups);
        mic_store_close(store);
        return 6;
    }
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    snprintf(portstr, sizeof portstr, "%d", port);
    mic_log(MIC_LOG_INFO, NULL, "listening", "listen", cfg.listen, "port",
            portstr, "data", cfg.data_dir, "durability",
            cfg.durability == MIC_DURABILITY_NONE ? "none" : "fsync", NULL);
    if (cfg.port_file[0] && write_port_file(cfg.port_file, port))
        mic_log(MIC_LOG_WARN, NULL, "cannot write port file", "path",
                cfg.port_file, NULL);

    while (!stop_signal)
        sigsuspend(&old);

    mic_log(MIC_LOG_INFO, NULL, "stopping", "signal",
            stop_signal == SIGTERM ? "SIGTERM" : "SIGINT", NULL);
    mic_http_quiesce(http);
    mic_http_drain(http, 2000);
    mic_writer_stop(writer);
    mic_http_drain(http, 1000);
    mic_http_stop(http);
    mic_writer_free(writer);
    mic_sched_free(sched);
    mic_groups_free(groups);
    mic_store_close(store);
    mic_log(MIC_LOG_INFO, NULL, "stopped", NULL);
    return 0;
}
