/* example.h - what the three examples share: the flags that say which micd
 * to talk to (--url, repeated for several nodes, and --key, with $MIC_URL
 * and $MIC_KEY as defaults), a number flag's value, and making the libmic
 * handle from them.  Header-only (static functions), so each example is
 * still built from its own .c file and this header alone. */
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
static int ex_conn_option(struct ex_conn *c, int ch, const char *arg, const char *prog)
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
static void ex_conn_defaults(struct ex_conn *c)
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
static int ex_client(const struct ex_conn *c, const char *prog, mic_client **out)
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
static double ex_number(const char *s, double lo, double hi)
{
    char *end;
    double v = strtod(s, &end);

    return *s && !*end && v >= lo && v <= hi ? v : -1;
}

#endif
