/* harness.c - see harness.h. */
#define _GNU_SOURCE
#include "harness.h"
#include "mic.h"
#include "storedir.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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
        if (s->before_exec && s->before_exec(s))
            _exit(126);
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
    storedir_rm(s->dir);
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

int srv_verify(const char *dir, char **out)
{
    char path[] = "/tmp/mic-test-verify-XXXXXX";
    int fd = mkstemp(path), status;
    pid_t pid;

    *out = NULL;
    if (fd < 0)
        return -1;
    pid = fork();
    if (pid == 0) {
        dup2(fd, 1);
        execl(micd_path(), micd_path(), "--verify", dir, (char *)NULL);
        _exit(127);
    }
    close(fd);
    if (pid < 0 || waitpid(pid, &status, 0) != pid) {
        unlink(path);
        return -1;
    }
    *out = file_read(path);
    unlink(path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* ---- HTTP (through libmic: mic_request, never retried) ---- */

/* This thread's libmic handle, made again when the server's URL or CA
 * file changes (a restart picks a new port). */
static __thread mic_client *client;
static __thread char client_url[64], client_ca[256];

void http_thread_done(void)
{
    mic_client_free(client);
    client = NULL;
}

static mic_client *client_for(const struct srv *s)
{
    struct mic_client_opts o = {0};
    const char *urls[1] = {s->url};

    if (client && !strcmp(client_url, s->url) && !strcmp(client_ca, s->cacert))
        return client;
    http_thread_done();
    o.urls = urls;
    o.nurls = 1;
    o.cafile = s->cacert[0] ? s->cacert : NULL;
    o.timeout_ms = 30000;
    if (mic_client_new(&o, &client, NULL))
        return NULL;
    snprintf(client_url, sizeof client_url, "%s", s->url);
    snprintf(client_ca, sizeof client_ca, "%s", s->cacert);
    return client;
}

int http(const struct srv *s, const char *method, const char *path,
         const char *ctype, const char *body, size_t len, const char *hdr,
         struct resp *r)
{
    const char *headers[2] = {hdr, NULL};
    struct mic_response mr;
    mic_client *c = client_for(s);

    memset(r, 0, sizeof *r);
    if (!c)
        return -1;
    if (mic_request(c, 0, method, path, ctype, body, len, hdr ? headers : NULL, &mr)) {
        mic_response_fini(&mr);
        return -1;
    }
    r->status = mr.status;
    r->body = mr.body;
    r->len = mr.len;
    r->json = mr.json;
    snprintf(r->request_id, sizeof r->request_id, "%s", mr.request_id);
    snprintf(r->retry_after, sizeof r->retry_after, "%s", mr.retry_after);
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



