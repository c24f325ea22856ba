/* test_deploy.c - deploy/ checked as far as this machine allows (issue 18,
 * point 4; deploy/README.md "What is tested").
 *
 *  1. deploy/Containerfile, statically: Debian 12 bases, a non-root USER,
 *     the store VOLUME, EXPOSE, STOPSIGNAL SIGTERM, a HEALTHCHECK and an
 *     ENTRYPOINT in exec form running the copied entrypoint, no ADD of a URL.
 *  2. deploy/entrypoint.sh run as the image runs it, with MIC_* variables
 *     pointed at $MICD, a temp store and an ephemeral loopback port: micd
 *     starts with the mapped flags, has the entrypoint's PID (exec), /readyz
 *     answers, the HEALTHCHECK command as written in the Containerfile
 *     succeeds (and fails once micd is gone), SIGTERM to that PID stops micd
 *     with status 0; a non-loopback MIC_LISTEN without keys is refused with a
 *     message naming MIC_KEYS and starts nothing; every micd flag has its
 *     MIC_* variable.  (The image itself is built and run by
 *     deploy/container-test.sh, which needs podman and Debian's archive: not
 *     part of make check.)
 *  3. deploy/micd.service: the hardening directives, and `systemd-analyze
 *     verify` of a copy whose ExecStart is $MICD prints no warning about it.
 *  4. deploy/prometheus/prometheus.yml: `promtool check config` (with the
 *     secret file where compose mounts it).
 *  5. deploy/compose.yaml and the Grafana provisioning files, read as YAML
 *     (Debian's python3-yaml turns them into JSON for jansson): the three
 *     services, micd built from the Containerfile with keys and the store
 *     volume, Prometheus mounting its rules and secret where prometheus.yml
 *     looks, Grafana mounting the provisioning and the dashboards where the
 *     provider reads them, and the data source uid the panels name.
 *  6. deploy/grafana/dashboards/mic.json: it loads, has what Grafana needs,
 *     every query parses as PromQL (promtool check rules), and every metric
 *     name in every query is exported by a live micd's /metrics (one with a
 *     topic, groups, events claimed, acked and nacked, a threshold, and a
 *     NATS sink group whose server is absent, so the labelled and the sink
 *     series exist).
 *
 * Run from the repository root: MICD=build/san/micd tests/run.sh
 * build/san/system/test_deploy.  Needs promtool (prometheus), systemd-analyze
 * (systemd), curl and /usr/bin/python3 with yaml (python3-yaml). */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "harness.h"
#include "claimkit.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define CONTAINERFILE "deploy/Containerfile"
#define ENTRYPOINT "deploy/entrypoint.sh"
#define UNIT "deploy/micd.service"
#define PROM_CONFIG "deploy/prometheus/prometheus.yml"
#define PROM_RULES "deploy/prometheus/alerts.yml"
#define COMPOSE "deploy/compose.yaml"
#define DATASOURCES "deploy/grafana/provisioning/datasources/prometheus.yaml"
#define PROVIDERS "deploy/grafana/provisioning/dashboards/mic.yaml"
#define DASHBOARD "deploy/grafana/dashboards/mic.json"
#define PYTHON "/usr/bin/python3"

/* ---- Helpers: files, processes ---- */

static const char *micd_path(void)
{
    const char *m = getenv("MICD");

    return m && *m ? m : "build/san/micd";
}

static char *must_read(const char *path)
{
    char *s = file_read(path);

    if (!s)
        fail_msg("cannot read %s (run the test from the repository root)", path);
    return s;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

static char *make_tmpdir(void)
{
    char *d = strdup("/tmp/mic-deploy-XXXXXX");

    assert_non_null(d);
    assert_non_null(mkdtemp(d));
    return d;
}

static void rm_tree(const char *dir)
{
    char cmd[512];

    if (dir && !strncmp(dir, "/tmp/mic-deploy-", 16) && !strchr(dir, '\'')) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            printf("could not remove %s\n", dir);
    }
}

/* The environment for a child: ours without any MIC_* variable, plus
 * 'extra' (NULL-terminated "NAME=VALUE" strings).  Free with free() on the
 * array only (the strings are borrowed). */
static char **child_env(const char *const *extra)
{
    size_t n = 0, k = 0, m = 0;
    char **env;

    while (environ[n])
        n++;
    while (extra && extra[m])
        m++;
    env = calloc(n + m + 1, sizeof *env);
    assert_non_null(env);
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "MIC_", 4))
            env[k++] = environ[i];
    for (size_t i = 0; i < m; i++)
        env[k++] = (char *)extra[i];
    env[k] = NULL;
    return env;
}

/* Start argv[0] (a path) with 'env'; its stdout and stderr go to the pipe
 * whose read end is stored in *out_fd (-1: not captured, they go to ours).
 * Returns the PID. */
static pid_t spawn(char *const argv[], char **env, int *out_fd)
{
    int p[2] = {-1, -1};
    pid_t pid;

    if (out_fd)
        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (out_fd) {
            dup2(p[1], 1);
            dup2(p[1], 2);
        }
        execve(argv[0], argv, env);
        _exit(127);
    }
    if (out_fd) {
        close(p[1]);
        *out_fd = p[0];
    }
    return pid;
}

/* Wait up to 'ms' for 'pid' to exit; SIGKILL it (ours) past the deadline.
 * Returns the wait status, or -1 if it had to be killed. */
static int reap(pid_t pid, int ms)
{
    int64_t end = mono_ms() + ms;
    int st;

    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);

        if (r == pid)
            return st;
        assert_true(r == 0);
        if (mono_ms() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        usleep(10 * 1000);
    }
}

/* Run argv (argv[0] a path) with 'extra' environment, up to 'ms'; its
 * stdout and stderr together go to *out (NUL-terminated, free() it).
 * Returns the exit status, or -1 if it did not exit by itself in time. */
static int run(char *const argv[], const char *const *extra, int ms, char **out)
{
    char **env = child_env(extra);
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);
    int fd, st;
    int64_t end = mono_ms() + ms;
    pid_t pid;

    assert_non_null(buf);
    pid = spawn(argv, env, &fd);
    free(env);
    for (;;) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int left = (int)(end - mono_ms());
        ssize_t n;

        if (left <= 0)
            break;
        if (poll(&pf, 1, left) <= 0)
            continue;
        if (len + 1024 > cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        n = read(fd, buf + len, cap - len - 1);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    buf[len] = 0;
    *out = buf;
    st = reap(pid, (int)(end - mono_ms() > 1000 ? end - mono_ms() : 1000));
    if (st == -1 || !WIFEXITED(st))
        return -1;
    return WEXITSTATUS(st);
}

/* An executable by name from PATH, or from /usr/bin and /usr/sbin. */
static int find_exe(const char *name, char *out, size_t len)
{
    const char *path = getenv("PATH");
    char dirs[4096];

    snprintf(dirs, sizeof dirs, "%s:/usr/bin:/usr/sbin:/bin", path ? path : "");
    for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(out, len, "%s/%s", d, name);
        if (access(out, X_OK) == 0)
            return 0;
    }
    return -1;
}

static void need_exe(const char *name, const char *pkg, char *out, size_t len)
{
    if (find_exe(name, out, len))
        fail_msg("%s not found: install Debian's %s (make deps peer-deps)", name, pkg);
}

/* ---- 1. The Containerfile ---- */

/* The instructions of a Containerfile: comments dropped, continuation
 * lines joined; one instruction per line of the result (free it). */
static char *instructions(const char *text)
{
    size_t n = strlen(text), k = 0;
    char *out = malloc(n + 2);
    int at_start = 1, comment = 0;

    assert_non_null(out);
    for (size_t i = 0; i < n; i++) {
        char c = text[i];

        if (at_start && (c == ' ' || c == '\t'))
            continue;
        if (at_start && c == '#')
            comment = 1;
        at_start = 0;
        if (c == '\n') {
            if (!comment)
                out[k++] = '\n';
            comment = 0;
            at_start = 1;
            continue;
        }
        if (comment)
            continue;
        if (c == '\\' && i + 1 < n && text[i + 1] == '\n') {
            i++; /* joined: the next line goes on this one */
            at_start = 1;
            out[k++] = ' ';
            continue;
        }
        out[k++] = c;
    }
    out[k] = 0;
    return out;
}

/* Each instruction line starting with keyword 'kw' (case-insensitive),
 * the text after it: fn(arg, text, textlen). Returns how many. */
static int each_instr(const char *ins, const char *kw,
                      void (*fn)(void *arg, const char *t, size_t len), void *arg)
{
    size_t kl = strlen(kw);
    int count = 0;

    for (const char *l = ins; *l; ) {
        const char *e = strchr(l, '\n');
        size_t len = e ? (size_t)(e - l) : strlen(l);

        if (len > kl && !strncasecmp(l, kw, kl) && isspace((unsigned char)l[kl])) {
            const char *t = l + kl;

            while (isspace((unsigned char)*t))
                t++;
            if (fn)
                fn(arg, t, len - (size_t)(t - l));
            count++;
        }
        l += len + (e != NULL);
    }
    return count;
}

static void check_from(void *arg, const char *t, size_t len)
{
    (void)arg;
    if (!((len >= 14 && !strncmp(t, "debian:12-slim", 14)) ||
          (len >= 13 && !strncmp(t, "debian:12 ", 10)) ||
          (len >= 16 && !strncmp(t, "debian:bookworm", 15))))
        fail_msg("Containerfile: FROM %.*s is not Debian 12", (int)len, t);
}

static void last_text(void *arg, const char *t, size_t len)
{
    snprintf(arg, 512, "%.*s", (int)len, t);
}

static void check_add(void *arg, const char *t, size_t len)
{
    (void)arg;
    if (memmem(t, len, "://", 3))
        fail_msg("Containerfile: ADD of a URL: %.*s", (int)len, t);
}

struct copy_find {
    const char *src;
    char dest[256];
};

/* COPY [--chown...] SRC... DEST: the DEST of the COPY whose sources
 * include 'src'. */
static void find_copy(void *arg, const char *t, size_t len)
{
    struct copy_find *cf = arg;
    char line[512], *w[16], *save = NULL;
    int n = 0;

    snprintf(line, sizeof line, "%.*s", (int)len, t);
    for (char *tok = strtok_r(line, " \t", &save); tok && n < 16; tok = strtok_r(NULL, " \t", &save))
        if (strncmp(tok, "--", 2))
            w[n++] = tok;
    for (int i = 0; i + 1 < n; i++)
        if (!strcmp(w[i], cf->src))
            snprintf(cf->dest, sizeof cf->dest, "%s", w[n - 1]);
}

/* The exec-form ["a", "b"] at 'p' as a NULL-terminated argv (strings and
 * array owned by the caller: free each, then the array); NULL if not. */
static char **exec_form(const char *p)
{
    json_error_t err;
    json_t *a = json_loads(p, JSON_DISABLE_EOF_CHECK, &err), *v;
    char **argv;
    size_t i;

    if (!json_is_array(a) || !json_array_size(a)) {
        json_decref(a);
        return NULL;
    }
    argv = calloc(json_array_size(a) + 1, sizeof *argv);
    assert_non_null(argv);
    json_array_foreach(a, i, v) {
        assert_true(json_is_string(v));
        argv[i] = strdup(json_string_value(v));
    }
    json_decref(a);
    return argv;
}

static void free_argv(char **argv)
{
    for (size_t i = 0; argv && argv[i]; i++)
        free(argv[i]);
    free(argv);
}

/* The HEALTHCHECK's command, with the image path of the entrypoint mapped
 * to deploy/entrypoint.sh; the caller frees (free_argv). */
static char **healthcheck_argv(void)
{
    char *text = must_read(CONTAINERFILE), *ins = instructions(text);
    char hc[512] = "", *cmd;
    struct copy_find cf = {.src = ENTRYPOINT};
    char **argv;

    assert_int_equal(each_instr(ins, "HEALTHCHECK", last_text, hc), 1);
    each_instr(ins, "COPY", find_copy, &cf);
    assert_true(cf.dest[0] == '/');
    cmd = strstr(hc, "CMD ");
    if (!cmd)
        fail_msg("Containerfile: HEALTHCHECK without CMD: %s", hc);
    argv = exec_form(cmd + 4);
    if (!argv)
        fail_msg("Containerfile: HEALTHCHECK CMD is not in exec form: %s", cmd + 4);
    if (!strcmp(argv[0], cf.dest)) {
        free(argv[0]);
        argv[0] = strdup(ENTRYPOINT);
    } else {
        fail_msg("HEALTHCHECK runs %s, not the entrypoint copied to %s", argv[0], cf.dest);
    }
    free(ins);
    free(text);
    return argv;
}

static void containerfile_static(void **state)
{
    char *text = must_read(CONTAINERFILE), *ins = instructions(text);
    char user[512] = "", vol[512] = "", ep[512] = "", stop[512] = "", expose[512] = "";
    struct copy_find cf = {.src = ENTRYPOINT};
    char **argv;

    (void)state;
    assert_true(each_instr(ins, "FROM", check_from, NULL) >= 2); /* build + runtime */
    each_instr(ins, "ADD", check_add, NULL);
    assert_true(each_instr(ins, "USER", last_text, user) >= 1);
    if (!strcmp(user, "root") || !strcmp(user, "0") || !strncmp(user, "0:", 2) ||
        !strncmp(user, "root:", 5))
        fail_msg("Containerfile: the last USER is root");
    assert_int_equal(each_instr(ins, "VOLUME", last_text, vol), 1);
    assert_non_null(strstr(vol, "/var/lib/mic"));
    assert_int_equal(each_instr(ins, "EXPOSE", last_text, expose), 1);
    assert_non_null(strstr(expose, "8080"));
    assert_int_equal(each_instr(ins, "STOPSIGNAL", last_text, stop), 1);
    assert_string_equal(stop, "SIGTERM");
    assert_int_equal(each_instr(ins, "ENTRYPOINT", last_text, ep), 1);
    each_instr(ins, "COPY", find_copy, &cf);
    assert_string_not_equal(cf.dest, "");
    argv = exec_form(ep);
    if (!argv) /* shell form: sh -c would be PID 1 and keep SIGTERM from micd */
        fail_msg("Containerfile: ENTRYPOINT must be in exec form: %s", ep);
    assert_string_equal(argv[0], cf.dest);
    free_argv(argv);
    free_argv(healthcheck_argv());
    /* The entrypoint hands its PID to micd. */
    free(text);
    text = must_read(ENTRYPOINT);
    assert_non_null(strstr(text, "exec \"$MICD\""));
    free(text);
    free(ins);
}

/* ---- 2. The entrypoint ---- */

static int port_file_ready(void *arg)
{
    struct stat st;

    return stat(arg, &st) == 0 && st.st_size > 0;
}

static int run_healthcheck(const char *const *env)
{
    char **argv = healthcheck_argv(), *out = NULL, *full[8] = {"/bin/sh"};
    int rc, i;

    for (i = 0; argv[i] && i < 6; i++)
        full[i + 1] = argv[i];
    full[i + 1] = NULL;
    rc = run(full, env, 30000, &out);
    printf("healthcheck (%s %s): exit %d%s%s", argv[0], argv[1] ? argv[1] : "", rc,
           *out ? ": " : "\n", out);
    free(out);
    free_argv(argv);
    return rc;
}

static pid_t ep_pid; /* the entrypoint's micd while entrypoint_runs_micd runs */

/* If the test failed midway, its micd is still running: stop it (ours, by
 * PID). */
static int ep_teardown(void **state)
{
    int st;

    (void)state;
    if (ep_pid > 0 && waitpid(ep_pid, &st, WNOHANG) == 0) {
        kill(ep_pid, SIGKILL);
        waitpid(ep_pid, &st, 0);
    }
    ep_pid = 0;
    http_thread_done();
    return 0;
}

static void entrypoint_runs_micd(void **state)
{
    char *dir = make_tmpdir(), data[300], portf[300], e_data[320], e_port[320], e_micd[PATH_MAX + 16];
    char exe[PATH_MAX], want[PATH_MAX], link[64], *argv[] = {"/bin/sh", ENTRYPOINT, NULL};
    const char *env[8];
    char **cenv;
    struct srv s = {0};
    struct resp r;
    ssize_t n;
    pid_t pid;
    int st, port;
    char *portbuf;

    (void)state;
    snprintf(data, sizeof data, "%s/store", dir);
    snprintf(portf, sizeof portf, "%s/port", dir);
    snprintf(e_data, sizeof e_data, "MIC_DATA=%s", data);
    snprintf(e_port, sizeof e_port, "MIC_PORT_FILE=%s", portf);
    assert_non_null(realpath(micd_path(), want));
    snprintf(e_micd, sizeof e_micd, "MIC_MICD=%s", want);
    env[0] = "MIC_LISTEN=127.0.0.1:0";
    env[1] = e_data;
    env[2] = e_port;
    env[3] = e_micd;
    env[4] = "MIC_MAP_MAX=2G";       /* seen below in /metrics */
    env[5] = "MIC_NO_AUTO_TOPICS=true"; /* seen below: an unknown topic is refused */
    env[6] = NULL;
    cenv = child_env(env);
    ep_pid = pid = spawn(argv, cenv, NULL);
    free(cenv);
    if (!await(port_file_ready, portf, 30000)) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        fail_msg("micd did not write its port file within 30 s");
    }

    /* exec: the entrypoint's PID is micd now. */
    snprintf(link, sizeof link, "/proc/%d/exe", (int)pid);
    n = readlink(link, exe, sizeof exe - 1);
    assert_true(n > 0);
    exe[n] = 0;
    assert_string_equal(exe, want);

    portbuf = file_read(portf);
    assert_non_null(portbuf);
    port = atoi(portbuf);
    free(portbuf);
    assert_true(port > 0 && port < 65536);
    s.port = port;
    snprintf(s.url, sizeof s.url, "http://127.0.0.1:%d", port);
    assert_int_equal(http(&s, "GET", "/readyz", NULL, NULL, 0, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    assert_string_equal(json_string_value(json_object_get(r.json, "status")), "ready");
    resp_free(&r);
    /* The mapped flags reached micd. */
    assert_int_equal(http(&s, "GET", "/metrics", NULL, NULL, 0, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\nmic_store_map_max_bytes 2147483648\n"));
    resp_free(&r);
    assert_int_equal(http_json(&s, "POST", "/v1/events",
                               "{\"topic\":\"never.created\",\"payload\":{}}", &r), 0);
    assert_int_equal(r.status / 100, 4);
    resp_free(&r);

    /* The HEALTHCHECK as the image runs it, with the same variables. */
    assert_int_equal(run_healthcheck(env), 0);

    /* SIGTERM to the PID the container engine knows: micd stops cleanly. */
    assert_int_equal(kill(pid, SIGTERM), 0);
    st = reap(pid, 60000);
    if (st == -1)
        fail_msg("micd did not stop within 60 s of SIGTERM");
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    ep_pid = 0;
    /* ... and the health check now says unhealthy. */
    assert_int_equal(run_healthcheck(env), 1);
    http_thread_done();
    rm_tree(dir);
    free(dir);
}

static void entrypoint_refuses_open_listen(void **state)
{
    char *dir = make_tmpdir(), e_data[320], e_micd[PATH_MAX + 16], want[PATH_MAX], *out;
    char *argv[] = {"/bin/sh", ENTRYPOINT, NULL};
    const char *env[4];
    struct stat st;
    int rc;

    (void)state;
    assert_non_null(realpath(micd_path(), want));
    snprintf(e_micd, sizeof e_micd, "MIC_MICD=%s", want);
    snprintf(e_data, sizeof e_data, "MIC_DATA=%s/store", dir);
    /* the image's default listen (no MIC_LISTEN), no MIC_KEYS */
    env[0] = e_data;
    env[1] = e_micd;
    env[2] = NULL;
    rc = run(argv, env, 30000, &out);
    printf("%s", out);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "refusing to start"));
    assert_non_null(strstr(out, "MIC_LISTEN=0.0.0.0:8080"));
    assert_non_null(strstr(out, "MIC_KEYS"));
    assert_non_null(strstr(out, "mic keys new"));
    free(out);
    /* micd never ran: no store was made. */
    snprintf(e_data, sizeof e_data, "%s/store", dir);
    assert_int_equal(stat(e_data, &st), -1);

    /* An explicit IPv6 wildcard, too. */
    env[2] = "MIC_LISTEN=[::]:0";
    env[3] = NULL;
    rc = run(argv, env, 30000, &out);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "MIC_KEYS"));
    free(out);
    rm_tree(dir);
    free(dir);
}

/* Every flag of `micd --help` has its MIC_* variable in the entrypoint
 * (the testing-only --writer-delay-ms excepted). */
static void entrypoint_maps_every_flag(void **state)
{
    char micd[PATH_MAX], *argv[] = {micd, "--help", NULL}, *out, *script, *list, *start, *end;
    int rc, flags = 0, missing = 0;

    (void)state;
    assert_non_null(realpath(micd_path(), micd));
    rc = run(argv, NULL, 30000, &out);
    assert_true(rc == 0 || rc == 2);
    script = must_read(ENTRYPOINT);
    /* FLAGS="a b\nc d": the names between spaces, newlines made spaces */
    start = strstr(script, "\nFLAGS=\"");
    assert_non_null(start);
    start += 8;
    end = strchr(start, '"');
    assert_non_null(end);
    assert_true(asprintf(&list, " %.*s ", (int)(end - start), start) > 0);
    for (char *c = list; *c; c++)
        if (*c == '\n')
            *c = ' ';
    for (const char *l = out; *l; ) {
        const char *e = strchr(l, '\n');
        size_t len = e ? (size_t)(e - l) : strlen(l);

        if (len > 4 && !strncmp(l, "  --", 4)) {
            char name[64], word[80];
            size_t k = 0;

            while (k < sizeof name - 1 && 4 + k < len && (isalnum((unsigned char)l[4 + k]) ||
                                                           l[4 + k] == '-'))
                k++;
            memcpy(name, l + 4, k);
            name[k] = 0;
            flags++;
            snprintf(word, sizeof word, " %s ", name);
            if (strcmp(name, "writer-delay-ms") && !strstr(list, word)) {
                printf("entrypoint.sh has no MIC_* variable for --%s\n", name);
                missing++;
            }
        }
        l += len + (e != NULL);
    }
    printf("micd --help lists %d flags\n", flags);
    assert_true(flags >= 20);
    assert_int_equal(missing, 0);
    free(list);
    free(script);
    free(out);
}

/* ---- 3. The systemd unit ---- */

static void unit_verifies(void **state)
{
    static const char *const need[] = {
        "\nNoNewPrivileges=true\n", "\nProtectSystem=strict\n", "\nProtectHome=true\n",
        "\nPrivateTmp=true\n", "\nProtectKernelTunables=true\n", "\nProtectControlGroups=true\n",
        "\nRestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX\n", "\nLockPersonality=true\n",
        "\nMemoryDenyWriteExecute=true\n", "\nSystemCallArchitectures=native\n",
        "\nCapabilityBoundingSet=\n", "\nUser=mic\n", "\nKillSignal=SIGTERM\n"};
    char sa[PATH_MAX], micd[PATH_MAX], *unit = must_read(UNIT), *dir = make_tmpdir();
    char path[300], *copy, *out, *rw, *argv[] = {sa, "verify", path, NULL};
    const char *exec = "ExecStart=/usr/local/bin/micd ", *at;
    int rc, warnings = 0;

    (void)state;
    need_exe("systemd-analyze", "systemd", sa, sizeof sa);
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (!strstr(unit, need[i]))
            fail_msg("%s lacks %.*s", UNIT, (int)strlen(need[i]) - 2, need[i] + 1);
    rw = strstr(unit, "\nReadWritePaths=");
    assert_non_null(rw);
    assert_non_null(strstr(rw, "/var/lib/mic"));
    at = strstr(unit, exec);
    assert_non_null(at);

    /* A copy running the built micd (verify checks the binary exists). */
    assert_non_null(realpath(micd_path(), micd));
    assert_true(asprintf(&copy, "%.*sExecStart=%s %s", (int)(at - unit), unit, micd,
                         at + strlen(exec)) > 0);
    snprintf(path, sizeof path, "%s/micd.service", dir);
    write_file(path, copy);
    rc = run(argv, NULL, 60000, &out);
    for (const char *l = out; *l; ) {
        const char *e = strchr(l, '\n');
        size_t len = e ? (size_t)(e - l) : strlen(l);

        if (len) {
            int ours = memmem(l, len, "micd.service", 12) != NULL;

            printf("systemd-analyze verify: %.*s%s\n", (int)len, l, ours ? "" : " (other unit)");
            warnings += ours;
        }
        l += len + (e != NULL);
    }
    assert_int_equal(rc, 0);
    assert_int_equal(warnings, 0);
    free(out);

    /* The check can fail: a misspelt directive is a warning about the unit. */
    free(copy);
    assert_true(asprintf(&copy, "[Service]\nExecStart=%s\nProtectSystem=strictt\n", micd) > 0);
    write_file(path, copy);
    rc = run(argv, NULL, 60000, &out);
    assert_non_null(strstr(out, "micd.service"));
    free(out);
    free(copy);
    free(unit);
    rm_tree(dir);
    free(dir);
}

/* ---- 4. prometheus.yml ---- */

static void copy_file(const char *from, const char *to)
{
    char *text = must_read(from);

    write_file(to, text);
    free(text);
}

static void prometheus_config(void **state)
{
    char promtool[PATH_MAX], *dir = make_tmpdir(), cfg[300], rules[300], sec[300], *out;
    char *argv[] = {promtool, "check", "config", cfg, NULL};
    int rc;

    (void)state;
    need_exe("promtool", "prometheus", promtool, sizeof promtool);
    snprintf(cfg, sizeof cfg, "%s/prometheus.yml", dir);
    snprintf(rules, sizeof rules, "%s/alerts.yml", dir);
    snprintf(sec, sizeof sec, "%s/secrets", dir);
    copy_file(PROM_CONFIG, cfg);
    copy_file(PROM_RULES, rules);
    assert_int_equal(mkdir(sec, 0700), 0);
    strcat(sec, "/prometheus.secret");
    write_file(sec, "mic_not_a_real_secret\n");
    rc = run(argv, NULL, 60000, &out);
    printf("%s", out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "SUCCESS"));
    assert_non_null(strstr(out, "alerts.yml")); /* the rules were loaded too */
    free(out);

    /* and it can fail: without the secret file compose mounts */
    assert_int_equal(unlink(sec), 0);
    rc = run(argv, NULL, 60000, &out);
    assert_int_not_equal(rc, 0);
    free(out);
    rm_tree(dir);
    free(dir);
}

/* ---- 5. compose.yaml and Grafana provisioning ---- */

/* A YAML file as JSON (through Debian's python3-yaml); a new reference. */
static json_t *yaml_load(const char *path)
{
    char *argv[] = {PYTHON, "-c",
                    "import json, sys, yaml\n"
                    "json.dump(yaml.safe_load(open(sys.argv[1])), sys.stdout)\n",
                    (char *)path, NULL};
    char *out;
    json_error_t err;
    json_t *j;
    int rc;

    if (access(PYTHON, X_OK))
        fail_msg("%s not found: install Debian's python3 and python3-yaml", PYTHON);
    rc = run(argv, NULL, 60000, &out);
    if (rc)
        fail_msg("%s did not load as YAML (python3-yaml installed?): %s", path, out);
    j = json_loads(out, 0, &err);
    if (!j)
        fail_msg("%s: %s", path, err.text);
    free(out);
    return j;
}

static const char *jpath_str(json_t *o, const char *a, const char *b)
{
    json_t *v = json_object_get(o, a);

    if (b)
        v = json_object_get(v, b);
    return json_string_value(v);
}

/* Does the compose service 's' mount something at 'target'?  Returns its
 * source ("" for none). */
static const char *mount_source(json_t *s, const char *target)
{
    json_t *v;
    size_t i;

    json_array_foreach(json_object_get(s, "volumes"), i, v) {
        const char *m = json_string_value(v), *c1, *c2;
        size_t tl = strlen(target);

        if (!m || !(c1 = strchr(m, ':')))
            continue;
        c2 = strchr(c1 + 1, ':');
        if ((c2 ? (size_t)(c2 - c1 - 1) : strlen(c1 + 1)) == tl && !strncmp(c1 + 1, target, tl)) {
            static char src[256];

            snprintf(src, sizeof src, "%.*s", (int)(c1 - m), m);
            return src;
        }
    }
    return "";
}

/* A bind source relative to deploy/ must exist there (secrets/ excepted:
 * the operator makes them, deploy/README.md). */
static void expect_source(const char *src)
{
    char path[300];
    struct stat st;

    assert_true(src[0] == '.' && src[1] == '/');
    if (!strncmp(src, "./secrets/", 10))
        return;
    snprintf(path, sizeof path, "deploy/%s", src + 2);
    if (stat(path, &st))
        fail_msg("compose.yaml mounts %s, which is not in deploy/", src);
}

static const char *DS_UID; /* the provisioned data source's uid (static storage) */

static void compose_and_provisioning(void **state)
{
    json_t *c = yaml_load(COMPOSE), *prom = yaml_load(PROM_CONFIG), *ds = yaml_load(DATASOURCES);
    json_t *prov = yaml_load(PROVIDERS), *svc, *micd, *p, *g, *env, *d;
    const char *cred, *src, *dash_path;
    char target[300];
    static char uid[128];

    (void)state;
    svc = json_object_get(c, "services");
    assert_int_equal(json_object_size(svc), 3);
    micd = json_object_get(svc, "micd");
    p = json_object_get(svc, "prometheus");
    g = json_object_get(svc, "grafana");
    assert_non_null(micd);
    assert_non_null(p);
    assert_non_null(g);

    /* micd: built from the Containerfile, keys, the store on a volume */
    assert_string_equal(jpath_str(micd, "build", "context"), "..");
    assert_string_equal(jpath_str(micd, "build", "dockerfile"), CONTAINERFILE);
    env = json_object_get(micd, "environment");
    assert_non_null(json_string_value(json_object_get(env, "MIC_KEYS")));
    src = mount_source(micd, json_string_value(json_object_get(env, "MIC_KEYS")));
    assert_string_not_equal(src, "");
    expect_source(src);
    src = mount_source(micd, "/var/lib/mic");
    assert_non_null(json_object_get(json_object_get(c, "volumes"), src)); /* a named volume */
    assert_string_equal(jpath_str(micd, "stop_signal", NULL), "SIGTERM");

    /* prometheus: its config, the rules and the secret where prometheus.yml
     * looks for them (relative to /etc/prometheus/prometheus.yml) */
    expect_source(src = mount_source(p, "/etc/prometheus/prometheus.yml"));
    assert_string_equal(src, "./prometheus/prometheus.yml");
    assert_string_equal(json_string_value(json_array_get(json_object_get(prom, "rule_files"), 0)),
                        "alerts.yml");
    expect_source(src = mount_source(p, "/etc/prometheus/alerts.yml"));
    assert_string_equal(src, "./prometheus/alerts.yml");
    d = json_array_get(json_object_get(prom, "scrape_configs"), 0);
    assert_string_equal(jpath_str(d, "job_name", NULL), "mic"); /* the rules' runbooks say job mic */
    cred = jpath_str(d, "authorization", "credentials_file");
    assert_non_null(cred);
    assert_true(cred[0] != '/');
    snprintf(target, sizeof target, "/etc/prometheus/%s", cred);
    expect_source(mount_source(p, target));
    assert_string_equal(json_string_value(json_array_get(
                            json_object_get(json_array_get(json_object_get(d, "static_configs"), 0),
                                            "targets"), 0)),
                        "micd:8080");

    /* grafana: provisioning, and the dashboards where the provider reads */
    expect_source(src = mount_source(g, "/etc/grafana/provisioning"));
    assert_string_equal(src, "./grafana/provisioning");
    dash_path = jpath_str(json_array_get(json_object_get(prov, "providers"), 0), "options", "path");
    assert_non_null(dash_path);
    expect_source(src = mount_source(g, dash_path));
    assert_string_equal(src, "./grafana/dashboards");
    d = json_array_get(json_object_get(ds, "datasources"), 0);
    assert_string_equal(jpath_str(d, "type", NULL), "prometheus");
    assert_string_equal(jpath_str(d, "url", NULL), "http://prometheus:9090");
    snprintf(uid, sizeof uid, "%s", jpath_str(d, "uid", NULL));
    assert_string_not_equal(uid, "");
    DS_UID = uid;
    json_decref(c);
    json_decref(prom);
    json_decref(ds);
    json_decref(prov);
}

/* ---- 6. The dashboard ---- */

/* The metric names of a PromQL expression: string literals, label
 * matchers {...}, ranges [...] and the label lists of by/without/on/
 * ignoring/group_left/group_right dropped; what remains is words, and a
 * word is a metric name unless a '(' follows it (a function or an
 * aggregation), it is a keyword or a number, or a '$' starts it (a Grafana
 * variable).  fn(name, arg) once per occurrence. */
static void promql_names(const char *expr, void (*fn)(const char *name, void *arg), void *arg)
{
    static const char *const kw[] = {"by", "without", "on", "ignoring", "group_left",
                                     "group_right", "bool", "and", "or", "unless", "offset",
                                     "inf", "nan", "atan2", NULL};
    size_t n = strlen(expr), k = 0;
    char *s = malloc(n + 1);

    assert_non_null(s);
    /* 1. strings, {...} and [...] become spaces */
    for (size_t i = 0; i < n; i++) {
        char c = expr[i];

        if (c == '"' || c == '\'' || c == '`') {
            char q = c;

            for (i++; i < n && expr[i] != q; i++)
                if (expr[i] == '\\' && q != '`')
                    i++;
            s[k++] = ' ';
        } else if (c == '{' || c == '[') {
            char close = c == '{' ? '}' : ']';

            for (i++; i < n && expr[i] != close; i++)
                if (expr[i] == '"' || expr[i] == '\'')
                    for (char q = expr[i++]; i < n && expr[i] != q; i++)
                        if (expr[i] == '\\')
                            i++;
            s[k++] = ' ';
        } else {
            s[k++] = c;
        }
    }
    s[k] = 0;
    /* 2. words */
    for (size_t i = 0; i < k; ) {
        char word[128];
        size_t w = 0, j;
        int dollar = i > 0 && s[i - 1] == '$';

        if (!(isalpha((unsigned char)s[i]) || s[i] == '_' || s[i] == ':')) {
            /* a number or duration: skip it whole (1e3, 0.99, 5m) */
            if (isdigit((unsigned char)s[i]) || s[i] == '.') {
                while (i < k && (isalnum((unsigned char)s[i]) || s[i] == '.'))
                    i++;
            } else {
                i++;
            }
            continue;
        }
        while (i < k && (isalnum((unsigned char)s[i]) || s[i] == '_' || s[i] == ':')) {
            if (w < sizeof word - 1)
                word[w++] = s[i];
            i++;
        }
        word[w] = 0;
        for (j = i; j < k && isspace((unsigned char)s[j]); j++)
            ;
        if (dollar)
            continue;
        {
            int is_kw = 0;

            for (int q = 0; kw[q]; q++)
                is_kw |= !strcasecmp(word, kw[q]);
            if (is_kw) {
                /* by (a, b): skip the label list */
                if (j < k && s[j] == '(' && strcasecmp(word, "and") && strcasecmp(word, "or") &&
                    strcasecmp(word, "unless") && strcasecmp(word, "bool")) {
                    while (j < k && s[j] != ')')
                        j++;
                    i = j + 1;
                }
                continue;
            }
        }
        if (j < k && s[j] == '(')
            continue; /* a function or aggregation */
        if ((!strncasecmp(s + j, "by", 2) && !isalnum((unsigned char)s[j + 2]) && s[j + 2] != '_') ||
            (!strncasecmp(s + j, "without", 7) && !isalnum((unsigned char)s[j + 7]) &&
             s[j + 7] != '_'))
            continue; /* sum by (...) (...): an aggregation */
        fn(word, arg);
    }
    free(s);
}

struct names {
    char list[64][96];
    int n;
};

static void add_name(const char *name, void *arg)
{
    struct names *ns = arg;

    for (int i = 0; i < ns->n; i++)
        if (!strcmp(ns->list[i], name))
            return;
    assert_true(ns->n < 64);
    snprintf(ns->list[ns->n++], sizeof ns->list[0], "%s", name);
}

/* The extractor on known expressions (it must neither miss a name nor
 * take a function, label or variable for one). */
static void promql_extractor(void **state)
{
    struct names ns = {.n = 0};

    (void)state;
    promql_names("histogram_quantile(0.99, sum by (le, group) (rate(mic_commit_seconds_bucket"
                 "{instance=~\"$instance\",route=~\"/v1/x{y}\"}[$__rate_interval])))"
                 " / on (group) group_left (topic) mic_group_dlq offset 5m"
                 " + sum without(code)(up) > bool 1e3 and ALERTS",
                 add_name, &ns);
    assert_int_equal(ns.n, 4);
    assert_string_equal(ns.list[0], "mic_commit_seconds_bucket");
    assert_string_equal(ns.list[1], "mic_group_dlq");
    assert_string_equal(ns.list[2], "up");
    assert_string_equal(ns.list[3], "ALERTS");
    ns.n = 0;
    promql_names("label_values(mic_group_pending{instance=~\"$instance\"}, group)", add_name, &ns);
    /* label_values' second argument is a label: callers pass only the
     * metric part (see dashboard_queries) */
    assert_true(ns.n >= 1);
    assert_string_equal(ns.list[0], "mic_group_pending");
}

static struct srv S;

/* A port on 127.0.0.1 with nothing listening (bound, then closed). */
static int closed_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), port;

    assert_true(fd >= 0);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static int dash_setup(void **state)
{
    (void)state;
    return srv_start_shared(&S, NULL);
}

static int dash_teardown(void **state)
{
    (void)state;
    return srv_stop_shared(&S);
}

/* A topic; groups dash.g (alert threshold 60 s) and dash.sink (a NATS sink
 * whose server is absent); three events: one acked, one nacked and claimed
 * again (a redelivery), one left pending. */
static void populate(void)
{
    char sink[256];
    json_t *r, *ack;

    json_decref(call(&S, "PUT", "/v1/topics/dash.t", "{}", 201));
    json_decref(call(&S, "PUT", "/v1/groups/dash.g",
                     "{\"topics\":[\"dash.t\"],\"alert_oldest_unhandled_s\":60}", 201));
    snprintf(sink, sizeof sink,
             "{\"topics\":[\"dash.t\"],\"sink\":{\"type\":\"nats\","
             "\"url\":\"nats://127.0.0.1:%d\",\"stream\":\"DASH\",\"subject\":\"dash.{topic}\"}}",
             closed_port());
    json_decref(call(&S, "PUT", "/v1/groups/dash.sink", sink, 201));
    json_decref(call(&S, "POST", "/v1/events",
                     "{\"events\":[{\"event_id\":\"d1\",\"topic\":\"dash.t\",\"payload\":{}},"
                     "{\"event_id\":\"d2\",\"topic\":\"dash.t\",\"payload\":{}},"
                     "{\"event_id\":\"d3\",\"topic\":\"dash.t\",\"payload\":{}}]}",
                     201));
    r = call(&S, "POST", "/v1/groups/dash.g/claim", "{\"max\":2}", 200);
    assert_int_equal(json_array_size(dlvs(r)), 2);
    ack = settle(&S, "dash.g", "ack",
                 json_pack("[o]", item(jint(dlv(r, 0), "seq"), jstr(dlv(r, 0), "lease_token"))),
                 NULL);
    expect_result(ack, 0, jint(dlv(r, 0), "seq"), "acked");
    json_decref(ack);
    ack = settle(&S, "dash.g", "nack",
                 json_pack("[o]", item(jint(dlv(r, 1), "seq"), jstr(dlv(r, 1), "lease_token"))),
                 "{\"error\":\"dashboard test\",\"retry_after_s\":0}");
    expect_result(ack, 0, jint(dlv(r, 1), "seq"), "retrying");
    json_decref(ack);
    json_decref(r);
    /* the nacked one again: a redelivery */
    r = call(&S, "POST", "/v1/groups/dash.g/claim", "{\"max\":1}", 200);
    assert_int_equal(json_array_size(dlvs(r)), 1);
    json_decref(r);
}

static int has_samples(const char *body, const char *name)
{
    size_t n = strlen(name);

    for (const char *l = body; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
        if (l[0] != '#' && !strncmp(l, name, n) && (l[n] == '{' || l[n] == ' '))
            return 1;
    return 0;
}

static int sink_series_ready(void *arg)
{
    struct resp r;
    int ok;

    (void)arg;
    if (http(&S, "GET", "/metrics", NULL, NULL, 0, NULL, &r) || r.status != 200) {
        resp_free(&r);
        return 0;
    }
    ok = has_samples(r.body, "mic_sink_connected") && has_samples(r.body, "mic_group_redeliveries_total");
    resp_free(&r);
    return ok;
}

struct dash_ctx {
    struct names names;
    FILE *rules;   /* every query as a recording rule, for promtool */
    int queries;
};

/* A Grafana query made PromQL: its variables replaced. */
static char *plain_query(const char *q)
{
    char *out = malloc(strlen(q) * 2 + 16), *o = out;

    assert_non_null(out);
    while (*q) {
        if (!strncmp(q, "$__rate_interval", 16)) {
            o += sprintf(o, "1m");
            q += 16;
        } else if (*q == '$') {
            o += sprintf(o, ".*");
            for (q++; isalnum((unsigned char)*q) || *q == '_'; q++)
                ;
        } else {
            *o++ = *q++;
        }
    }
    *o = 0;
    return out;
}

static void add_query(struct dash_ctx *dc, const char *expr, const char *where)
{
    char *plain = plain_query(expr);

    dc->queries++;
    promql_names(expr, add_name, &dc->names);
    fprintf(dc->rules, "      - record: dash:query_%d\n        # %s\n        expr: '%s'\n",
            dc->queries, where, plain);
    assert_null(strchr(plain, '\''));
    free(plain);
}

static void dashboard_queries(struct dash_ctx *dc, json_t *dash)
{
    json_t *p, *t, *v;
    size_t i, j;
    int panels = 0;

    assert_true(json_is_string(json_object_get(dash, "title")));
    assert_true(json_is_string(json_object_get(dash, "uid")));
    assert_true(json_is_integer(json_object_get(dash, "schemaVersion")));
    assert_true(json_array_size(json_object_get(dash, "panels")) >= 10);
    json_array_foreach(json_object_get(dash, "panels"), i, p) {
        const char *title = json_string_value(json_object_get(p, "title"));
        json_t *targets = json_object_get(p, "targets"), *grid = json_object_get(p, "gridPos");

        if (!title || !*title)
            fail_msg("panel %zu has no title", i);
        assert_true(json_is_string(json_object_get(p, "type")));
        assert_true(json_is_integer(json_object_get(p, "id")));
        assert_true(json_is_integer(json_object_get(grid, "w")) &&
                    json_is_integer(json_object_get(grid, "h")));
        if (!DS_UID || strcmp(jpath_str(p, "datasource", "uid") ? jpath_str(p, "datasource", "uid")
                                                                : "", DS_UID))
            fail_msg("panel \"%s\": datasource uid is not the provisioned %s", title,
                     DS_UID ? DS_UID : "(compose test did not run)");
        if (!json_array_size(targets))
            fail_msg("panel \"%s\" has no targets", title);
        json_array_foreach(targets, j, t) {
            const char *expr = json_string_value(json_object_get(t, "expr"));

            if (!expr || !*expr)
                fail_msg("panel \"%s\": target %zu has no expr", title, j);
            assert_true(json_is_string(json_object_get(t, "refId")));
            add_query(dc, expr, title);
        }
        panels++;
    }
    /* The template variables' queries: label_values(SELECTOR, label). */
    json_array_foreach(json_object_get(json_object_get(dash, "templating"), "list"), i, v) {
        const char *q = jpath_str(v, "query", "query");
        const char *open, *comma;
        char sel[256];

        if (!q)
            continue;
        open = strstr(q, "label_values(");
        assert_non_null(open);
        open += 13;
        comma = strrchr(open, ',');
        assert_non_null(comma);
        snprintf(sel, sizeof sel, "%.*s", (int)(comma - open), open);
        add_query(dc, sel, "templating");
    }
    printf("dashboard: %d panels, %d queries\n", panels, dc->queries);
}

static void dashboard_against_live_metrics(void **state)
{
    /* Series Prometheus makes itself: allowed though micd does not export
     * them (ALERTS: the state of the rules; up: the scrape). */
    static const char *const prometheus_own[] = {"ALERTS", "up"};
    static const char *const must[] = {
        "mic_group_oldest_unhandled_age_seconds", "mic_group_pending", "mic_group_processing",
        "mic_group_dlq", "mic_events_published_total", "mic_group_dispatched_total",
        "mic_group_redeliveries_total", "mic_group_alert", "mic_commit_seconds_bucket",
        "mic_writer_batch_size_bucket", "mic_store_map_used_bytes", "mic_store_map_max_bytes",
        "mic_http_requests_total", "mic_sink_connected"};
    json_error_t err;
    json_t *dash = json_load_file(DASHBOARD, 0, &err);
    struct dash_ctx dc = {.names = {.n = 0}};
    char promtool[PATH_MAX], *dir, rules[300], *out, *argv[] = {promtool, "check", "rules", rules, NULL};
    struct resp m;
    int bad = 0, mic = 0, rc;

    (void)state;
    if (!dash)
        fail_msg("%s does not load: line %d: %s", DASHBOARD, err.line, err.text);
    need_exe("promtool", "prometheus", promtool, sizeof promtool);
    if (!DS_UID) { /* run alone: read the provisioned uid here */
        json_t *ds = yaml_load(DATASOURCES);
        static char uid[128];

        snprintf(uid, sizeof uid, "%s",
                 jpath_str(json_array_get(json_object_get(ds, "datasources"), 0), "uid", NULL));
        DS_UID = uid;
        json_decref(ds);
    }
    dir = make_tmpdir();
    snprintf(rules, sizeof rules, "%s/dashboard-queries.yml", dir);
    dc.rules = fopen(rules, "w");
    assert_non_null(dc.rules);
    fprintf(dc.rules, "groups:\n  - name: dashboard\n    rules:\n");
    dashboard_queries(&dc, dash);
    assert_int_equal(fclose(dc.rules), 0);

    /* Every query parses as PromQL. */
    rc = run(argv, NULL, 60000, &out);
    if (rc)
        fail_msg("promtool check rules on the dashboard's queries: %s", out);
    free(out);

    /* Every name is in a live /metrics. */
    populate();
    if (!await(sink_series_ready, NULL, 30000))
        fail_msg("the sink group's series did not appear in /metrics within 30 s");
    assert_int_equal(http(&S, "GET", "/metrics", NULL, NULL, 0, NULL, &m), 0);
    assert_int_equal(m.status, 200);
    for (int i = 0; i < dc.names.n; i++) {
        const char *name = dc.names.list[i];
        size_t len = strlen(name);
        int own = 0;

        for (size_t k = 0; k < sizeof prometheus_own / sizeof prometheus_own[0]; k++)
            own |= !strcmp(name, prometheus_own[k]);
        if (own)
            continue;
        mic++;
        if (!has_samples(m.body, name)) {
            printf("the dashboard queries %s, which micd's /metrics does not export\n", name);
            bad++;
            continue;
        }
        /* name_bucket/_sum/_count: the family must be a histogram */
        for (const char *suf = "_bucket\0_sum\0_count\0"; *suf; suf += strlen(suf) + 1) {
            size_t sl = strlen(suf);
            char type[160];

            if (len > sl && !strcmp(name + len - sl, suf)) {
                snprintf(type, sizeof type, "# TYPE %.*s histogram\n", (int)(len - sl), name);
                if (!strstr(m.body, type)) {
                    printf("%s: %.*s is not a histogram in /metrics\n", name, (int)(len - sl), name);
                    bad++;
                }
            }
        }
    }
    for (size_t k = 0; k < sizeof must / sizeof must[0]; k++) {
        int found = 0;

        for (int i = 0; i < dc.names.n; i++)
            found |= !strcmp(dc.names.list[i], must[k]);
        if (!found) {
            printf("the dashboard has no panel on %s\n", must[k]);
            bad++;
        }
    }
    printf("dashboard: %d distinct micd metric names, each checked against /metrics\n", mic);
    fflush(stdout);
    assert_true(mic >= 20);
    assert_int_equal(bad, 0);
    resp_free(&m);
    json_decref(dash);
    rm_tree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest files[] = {
        cmocka_unit_test(containerfile_static),
        cmocka_unit_test(entrypoint_maps_every_flag),
        cmocka_unit_test(entrypoint_refuses_open_listen),
        cmocka_unit_test_teardown(entrypoint_runs_micd, ep_teardown),
        cmocka_unit_test(unit_verifies),
        cmocka_unit_test(prometheus_config),
        cmocka_unit_test(compose_and_provisioning),
        cmocka_unit_test(promql_extractor),
    };
    const struct CMUnitTest live[] = {
        cmocka_unit_test(dashboard_against_live_metrics),
    };
    int failed;

    signal(SIGPIPE, SIG_IGN);
    failed = cmocka_run_group_tests_name("deploy files", files, NULL, NULL);
    failed += cmocka_run_group_tests_name("dashboard against a live micd", live, dash_setup,
                                          dash_teardown);
    return failed ? 1 : 0;
}
