/* harness.c - see harness.h. */
#define _GNU_SOURCE
#include "harness.h"
#include "procfx.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Servers still running when the test binary exits (a failed assertion
 * skips its test's srv_stop) are killed, so none outlives its test. */
#define LIVE_MAX 64
static pid_t live[LIVE_MAX];

static void kill_live(void)
{
    for (int i = 0; i < LIVE_MAX; i++)
        if (live[i] > 0) {
            kill(live[i], SIGKILL);
            waitpid(live[i], NULL, 0);
            live[i] = 0;
        }
}

static void track(pid_t pid, int on)
{
    static int registered;

    if (!registered) {
        atexit(kill_live);
        registered = 1;
    }
    for (int i = 0; i < LIVE_MAX; i++)
        if (on ? live[i] == 0 : live[i] == pid) {
            live[i] = on ? pid : 0;
            return;
        }
}

static const char *micd_path(void)
{
    const char *p = getenv("MICD");

    return p && *p ? p : "build/san/micd";
}

static int64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int await(int (*cond)(void *arg), void *arg, int ms)
{
    int64_t end = mono_ms() + ms;
    struct timespec ts = {0, 5 * 1000000};

    for (;;) {
        if (cond(arg))
            return 1;
        if (mono_ms() > end)
            return 0;
        nanosleep(&ts, NULL);
    }
}

static void build_argv(struct srv *s, const char *const *args, char *portfile,
                       const char **argv)
{
    int n = 0;

    argv[n++] = micd_path();
    argv[n++] = "--listen";
    argv[n++] = "127.0.0.1:0";
    argv[n++] = "--data";
    argv[n++] = s->dir;
    if (portfile) {
        argv[n++] = "--port-file";
        argv[n++] = portfile;
    }
    for (int i = 0; args && args[i] && n < 60; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
}

static pid_t spawn(struct srv *s, const char *const *args, char *portfile)
{
    const char *argv[64];
    pid_t pid;

    build_argv(s, args, portfile, argv);
    pid = fork();
    if (pid == 0) {
        int fd = open(s->logpath, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) {
            dup2(fd, 2);
            dup2(fd, 1);
            close(fd);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

struct port_wait {
    const char *path;
    pid_t pid;
    int port, dead;
};

static int port_ready(void *arg)
{
    struct port_wait *w = arg;
    FILE *f;
    int status;

    if (waitpid(w->pid, &status, WNOHANG) == w->pid) {
        w->dead = 1;
        return 1;
    }
    if (!(f = fopen(w->path, "r")))
        return 0;
    if (fscanf(f, "%d", &w->port) != 1)
        w->port = 0;
    fclose(f);
    return w->port > 0;
}

int srv_start(struct srv *s, const char *const *args)
{
    char portfile[300];
    struct port_wait w;
    struct resp r;

    if (!s->dir[0]) {
        snprintf(s->dir, sizeof s->dir, "/tmp/mic-test-XXXXXX");
        if (!mkdtemp(s->dir))
            return -1;
    }
    snprintf(s->logpath, sizeof s->logpath, "%s.log", s->dir);
    snprintf(portfile, sizeof portfile, "%s.port", s->dir);
    unlink(portfile);
    s->pid = spawn(s, args, portfile);
    if (s->pid < 0)
        return -1;
    track(s->pid, 1);
    w.path = portfile;
    w.pid = s->pid;
    w.port = 0;
    w.dead = 0;
    if (!await(port_ready, &w, 20000) || w.dead) {
        if (!w.dead)
            srv_kill9(s);
        else
            track(s->pid, 0);
        s->pid = 0;
        return -1;
    }
    unlink(portfile);
    s->port = w.port;
    snprintf(s->url, sizeof s->url, "%s://127.0.0.1:%d", s->cacert[0] ? "https" : "http",
             s->port);
    if (http(s, "GET", "/healthz", NULL, NULL, 0, NULL, &r) || r.status != 200) {
        resp_free(&r);
        srv_kill9(s);
        return -1;
    }
    resp_free(&r);
    return 0;
}

int srv_stop(struct srv *s)
{
    int status;

    if (s->pid <= 0)
        return -1;
    kill(s->pid, SIGTERM);
    if (waitpid(s->pid, &status, 0) != s->pid)
        return -1;
    track(s->pid, 0);
    s->pid = 0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void srv_kill9(struct srv *s)
{
    if (s->pid <= 0)
        return;
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    track(s->pid, 0);
    s->pid = 0;
}

void srv_cleanup(struct srv *s)
{
    if (!s->dir[0])
        return;
    procfx_rm_store(s->dir);
    unlink(s->logpath);
    s->dir[0] = 0;
}

int srv_run_expect_exit(struct srv *s, const char *const *args)
{
    int status;
    pid_t pid;

    snprintf(s->logpath, sizeof s->logpath, "%s.log", s->dir);
    pid = spawn(s, args, NULL);
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* ---- HTTP ---- */

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    struct resp *r = arg;
    size_t len = size * n;
    char *nb = realloc(r->body, r->len + len + 1);

    if (!nb)
        return 0;
    memcpy(nb + r->len, p, len);
    r->body = nb;
    r->len += len;
    r->body[r->len] = 0;
    return len;
}

static void header_value(const char *line, size_t len, const char *name,
                         char *out, size_t cap)
{
    size_t nl = strlen(name), vl;

    if (len <= nl + 1 || strncasecmp(line, name, nl) || line[nl] != ':')
        return;
    line += nl + 1;
    len -= nl + 1;
    while (len && *line == ' ') {
        line++;
        len--;
    }
    while (len && (line[len - 1] == '\r' || line[len - 1] == '\n'))
        len--;
    vl = len < cap - 1 ? len : cap - 1;
    memcpy(out, line, vl);
    out[vl] = 0;
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
    struct resp *r = arg;
    size_t len = size * n;

    header_value(p, len, "X-Request-Id", r->request_id, sizeof r->request_id);
    header_value(p, len, "Retry-After", r->retry_after, sizeof r->retry_after);
    return len;
}

static __thread CURL *curl_handle;

void http_thread_done(void)
{
    if (curl_handle)
        curl_easy_cleanup(curl_handle);
    curl_handle = NULL;
}

int http(const struct srv *s, const char *method, const char *path,
         const char *ctype, const char *body, size_t len, const char *hdr,
         struct resp *r)
{
    struct curl_slist *h = NULL;
    char url[1024], ct[128];
    CURLcode rc;

    memset(r, 0, sizeof *r);
    CURL *c = curl_handle;

    if (!c && !(c = curl_handle = curl_easy_init()))
        return -1;
    curl_easy_reset(c);
    snprintf(url, sizeof url, "%s%s", s->url, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CAINFO, s->cacert[0] ? s->cacert : NULL);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (strcmp(method, "HEAD") == 0)
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    }
    snprintf(ct, sizeof ct, "Content-Type: %s", ctype ? ctype : "");
    h = curl_slist_append(h, ct); /* "Content-Type:" alone removes it */
    h = curl_slist_append(h, "Expect:");
    if (hdr)
        h = curl_slist_append(h, hdr);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    rc = curl_easy_perform(c);
    curl_slist_free_all(h);
    if (rc != CURLE_OK)
        return -1;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    if (r->body)
        r->json = json_loadb(r->body, r->len, 0, NULL);
    return 0;
}

int http_json(const struct srv *s, const char *method, const char *path,
              const char *body, struct resp *r)
{
    return http(s, method, path, "application/json", body,
                body ? strlen(body) : 0, NULL, r);
}

void resp_free(struct resp *r)
{
    free(r->body);
    json_decref(r->json);
    memset(r, 0, sizeof *r);
}

const char *resp_error_code(const struct resp *r)
{
    json_t *c = json_object_get(json_object_get(r->json, "error"), "code");

    return json_is_string(c) ? json_string_value(c) : "";
}

int srv_start_shared(struct srv *s, const char *const *args)
{
    memset(s, 0, sizeof *s);
    return srv_start(s, args);
}

int srv_stop_shared(struct srv *s)
{
    int rc = srv_stop(s);

    srv_cleanup(s);
    http_thread_done();
    return rc == 0 ? 0 : -1;
}

char *file_read(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *p = NULL, *q;
    size_t cap = 0, len = 0, got;

    if (!f)
        return NULL;
    do {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            if (!(q = realloc(p, cap))) {
                free(p);
                fclose(f);
                return NULL;
            }
            p = q;
        }
        got = fread(p + len, 1, cap - len - 1, f);
        len += got;
    } while (got);
    p[len] = 0;
    fclose(f);
    return p;
}
