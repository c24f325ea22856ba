/* example.h - what the three examples share: the flags that say which micd
 * to talk to (--url, repeated for several nodes, and --key, with $MIC_URL
 * and $MIC_KEY as defaults), a number flag's value, making the libmic
 * handle from them, and the worker loop's flags (--group, --threads, ...).
 * Header-only (static inline functions), so each example is still built
 * from its own .c file and this header alone. */
#ifndef MIC_EXAMPLE_H
#define MIC_EXAMPLE_H

#include "mic.h"

#include <stdio.h>
#include <stdlib.h>

#define EXIT_FAIL 1
#define EXIT_USAGE 2
#define DEFAULT_URL "http://127.0.0.1:8080"

/* The nodes and the key, as the flags gave them (pointers into argv or the
 * environment). */
struct ex_conn {
    const char *urls[MIC_NODES_MAX];
    size_t nurls;
    const char *key;
};

/* The getopt_long entries of --url ('u') and --key ('k'). */
#define EX_CONN_OPTIONS {"url", 1, NULL, 'u'}, {"key", 1, NULL, 'k'}

/* Take option 'ch' (with 'arg') if it is --url or --key.  Returns 1 when
 * taken, 0 when it is another option, -1 (after a message naming 'prog')
 * when there are too many --url. */
static inline int ex_conn_option(struct ex_conn *c, int ch, const char *arg, const char *prog)
{
    if (ch == 'k') {
        c->key = arg;
        return 1;
    }
    if (ch != 'u')
        return 0;
    if (c->nurls == MIC_NODES_MAX) {
        fprintf(stderr, "%s: at most %d --url\n", prog, MIC_NODES_MAX);
        return -1;
    }
    c->urls[c->nurls++] = arg;
    return 1;
}

/* After the flags: no --url is $MIC_URL, else DEFAULT_URL; no --key is
 * $MIC_KEY when set. */
static inline void ex_conn_defaults(struct ex_conn *c)
{
    const char *env;

    if (!c->nurls) {
        env = getenv("MIC_URL");
        c->urls[c->nurls++] = env && *env ? env : DEFAULT_URL;
    }
    env = getenv("MIC_KEY");
    if (!c->key && env && *env)
        c->key = env;
}

/* The libmic handle on those nodes (*out, mic_client_free it).  Returns 0,
 * or -1 after a message naming 'prog' (a URL libmic does not take). */
static inline int ex_client(const struct ex_conn *c, const char *prog, mic_client **out)
{
    struct mic_client_opts o = {0};
    struct mic_failure f;
    char text[700];

    o.urls = c->urls;
    o.nurls = c->nurls;
    o.key = c->key;
    if (mic_client_new(&o, out, &f)) {
        fprintf(stderr, "%s: %s\n", prog, mic_failure_text(&f, text, sizeof text));
        return -1;
    }
    return 0;
}

/* A number flag value in [lo, hi], or -1. */
static inline double ex_number(const char *s, double lo, double hi)
{
    char *end;
    double v = strtod(s, &end);

    return *s && !*end && v >= lo && v <= hi ? v : -1;
}

/* ---- The worker loop's flags (worker_pool, projection) ---- */

#define EX_THREADS_MAX 256

/* --group, --threads, --max, --lease-ttl, --wait, --idle-exit. */
struct ex_loop {
    const char *group;
    int threads, max;
    double lease_ttl_s, wait_s, idle_exit_s;
};

#define EX_LOOP_DEFAULTS {NULL, 4, 10, 30, 20, 0}
#define EX_LOOP_OPTIONS                                                                   \
    {"group", 1, NULL, 'g'}, {"threads", 1, NULL, 't'}, {"max", 1, NULL, 'm'},            \
        {"lease-ttl", 1, NULL, 'l'}, {"wait", 1, NULL, 'w'}, {"idle-exit", 1, NULL, 'i'}
#define EX_LOOP_USAGE                                                                     \
    "  --threads T      handler threads (default 4, at most 256)\n"                        \
    "  --max M          deliveries per claim (default 10)\n"                               \
    "  --lease-ttl S    lease of a claim in seconds (default 30)\n"                        \
    "  --wait S         long-poll wait in seconds (default 20)\n"                          \
    "  --idle-exit S    stop when no delivery came for S seconds (default: never)\n"

/* Take option 'ch' if it is one of the loop's: 1 when taken, 0 when it is
 * another, -1 (after a message naming 'prog') for a bad value. */
static inline int ex_loop_option(struct ex_loop *l, int ch, const char *arg, const char *prog)
{
    double v;

    switch (ch) {
    case 'g':
        l->group = arg;
        return 1;
    case 't':
    case 'm':
        if ((v = ex_number(arg, 1, ch == 't' ? EX_THREADS_MAX : 1000)) < 0 || v != (int)v) {
            fprintf(stderr, "%s: --%s takes an integer from 1 to %d\n", prog,
                    ch == 't' ? "threads" : "max", ch == 't' ? EX_THREADS_MAX : 1000);
            return -1;
        }
        *(ch == 't' ? &l->threads : &l->max) = (int)v;
        return 1;
    case 'l':
    case 'w':
    case 'i':
        /* --wait 0 would be libmic's default (20), so it starts above 0. */
        if ((v = ex_number(arg, ch == 'l' ? 1 : ch == 'w' ? 0.001 : 0,
                           ch == 'w' ? 60 : 43200)) < 0) {
            fprintf(stderr, "%s: bad value for --%s: %s\n", prog,
                    ch == 'l' ? "lease-ttl" : ch == 'w' ? "wait" : "idle-exit", arg);
            return -1;
        }
        *(ch == 'l' ? &l->lease_ttl_s : ch == 'w' ? &l->wait_s : &l->idle_exit_s) = v;
        return 1;
    default:
        return 0;
    }
}

/* The worker loop's options from the flags: stopped by SIGINT/SIGTERM, or
 * by --idle-exit (looked at when a claim comes back empty, so the
 * long-poll is no longer than it). */
static inline void ex_loop_opts(const struct ex_loop *l, const char *worker, struct mic_worker_opts *o)
{
    o->group = l->group;
    o->threads = l->threads;
    o->max = l->max;
    o->lease_ttl_s = l->lease_ttl_s;
    o->wait_s = l->idle_exit_s > 0 && l->idle_exit_s < l->wait_s ? l->idle_exit_s : l->wait_s;
    o->worker = worker;
    o->stop_on_signals = 1;
    o->idle_exit_s = l->idle_exit_s;
}

#endif
