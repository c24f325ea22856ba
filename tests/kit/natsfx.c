/* natsfx.c - a three-node NATS JetStream cluster on loopback, started and
 * stopped by PID, and the helpers that read its streams back (natsfx.h
 * says what each does and what it guarantees).
 *
 * Ports: six distinct loopback ports (a client and a cluster port per
 * node) picked at random between 10000 and the start of the kernel's
 * ephemeral range, each free when picked; they are never re-picked after
 * the first successful start, so a restarted node takes its old place in
 * the others' routes.  If a node exits during the first start (someone
 * took a port between the pick and the bind), the start is retried with
 * new ports, a bounded number of times. */
#define _GNU_SOURCE
#include "natsfx.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STOP_MS 10000
#define START_TRIES 4

/* ---- Time and processes ---- */

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};

    nanosleep(&ts, NULL);
}

int natsfx_find_exe(const char *name, const char *envvar, char *out, size_t cap)
{
    const char *env = getenv("PATH"), *set = getenv(envvar);
    char path[2048], *save = NULL, *dir;

    if (set && *set) {
        snprintf(out, cap, "%s", set);
        return access(out, X_OK) ? -1 : 0;
    }
    snprintf(path, sizeof path, "%s:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/bin", env ? env : "");
    for (dir = strtok_r(path, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
        snprintf(out, cap, "%s/%s", *dir ? dir : ".", name);
        if (access(out, X_OK) == 0)
            return 0;
    }
    return -1;
}

/* A loopback port below the ephemeral range, free now and not in
 * 'taken' (n entries); 0 if none was found. */
static int pick_port(unsigned *seed, const int *taken, int n)
{
    int lo = 32768, hi = 60999;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");

    if (f) {
        if (fscanf(f, "%d %d", &lo, &hi) != 2)
            lo = 32768;
        fclose(f);
    }
    if (lo <= 11000)
        return 0;
    for (int tries = 0; tries < 100; tries++) {
        int port = 10000 + (int)(rand_r(seed) % (unsigned)(lo - 10000)), dup = 0, fd, on = 1, ok;
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};

        for (int i = 0; i < n; i++)
            dup |= taken[i] == port;
        if (dup)
            continue;
        if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
            return 0;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
        ok = bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
        close(fd);
        if (ok)
            return port;
    }
    return 0;
}

/* Wait up to 'ms' for 'pid' to end: 1 if it did (reaped), else 0. */
static int reap_ms(pid_t pid, int ms)
{
    int64_t end = now_ms() + ms;

    for (;;) {
        pid_t got = waitpid(pid, NULL, WNOHANG);

        if (got == pid || (got < 0 && errno == ECHILD))
            return 1;
        if (now_ms() > end)
            return 0;
        nap_ms(5);
    }
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    remove(path);
    return 0;
}

/* ---- One node ---- */

static pid_t node_spawn(struct natsfx *c, int i)
{
    struct natsfx_node *n = &c->n[i];
    char port[16], cluster[64], routes[160];
    const char *argv[20];
    int a = 0, r = 0;
    pid_t parent = getpid(), pid;

    snprintf(port, sizeof port, "%d", n->port);
    snprintf(cluster, sizeof cluster, "nats://127.0.0.1:%d", n->cport);
    routes[0] = 0;
    for (int k = 0; k < NATSFX_NODES; k++)
        if (k != i)
            r += snprintf(routes + r, sizeof routes - (size_t)r, "%snats://127.0.0.1:%d", r ? "," : "",
                          c->n[k].cport);
    argv[a++] = c->exe;
    argv[a++] = "-a";
    argv[a++] = "127.0.0.1";
    argv[a++] = "-p";
    argv[a++] = port;
    argv[a++] = "-js";
    argv[a++] = "-sd";
    argv[a++] = n->dir;
    argv[a++] = "--cluster";
    argv[a++] = cluster;
    argv[a++] = "--routes";
    argv[a++] = routes;
    argv[a++] = "--cluster_name";
    argv[a++] = c->cluster;
    argv[a++] = "--server_name";
    argv[a++] = n->name;
    argv[a] = NULL;
    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        int in = open("/dev/null", O_RDONLY);
        int out = open(n->log, O_WRONLY | O_CREAT | O_APPEND, 0600);

        if (in < 0 || out < 0)
            _exit(126);
        /* Die with the test process; if it is already gone, do not start. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
            _exit(125);
        dup2(in, 0);
        dup2(out, 1);
        dup2(out, 2);
        setpgid(0, 0); /* a terminal's signals are not ours to pass on */
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

int natsfx_js_ready(const char *url)
{
    natsOptions *o = NULL;
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    jsAccountInfo *ai = NULL;
    jsOptions jo;
    int ok = 0;

    if (natsOptions_Create(&o) != NATS_OK)
        return 0;
    if (natsOptions_SetURL(o, url) == NATS_OK && natsOptions_SetTimeout(o, 1000) == NATS_OK &&
        natsOptions_SetAllowReconnect(o, false) == NATS_OK &&
        natsConnection_Connect(&nc, o) == NATS_OK && jsOptions_Init(&jo) == NATS_OK) {
        jo.Wait = 2000;
        if (natsConnection_JetStream(&js, nc, &jo) == NATS_OK &&
            js_GetAccountInfo(&ai, js, NULL, NULL) == NATS_OK)
            ok = 1;
    }
    jsAccountInfo_Destroy(ai);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    natsOptions_Destroy(o);
    return ok;
}

/* Wait until node i answers JetStream, or it exits, or 'ms' pass. */
static int node_wait(struct natsfx *c, int i, int64_t end)
{
    while (now_ms() < end) {
        if (!natsfx_alive(c, i))
            return -1;
        if (natsfx_js_ready(c->n[i].url))
            return 0;
        nap_ms(50);
    }
    return -1;
}

/* ---- The cluster ---- */

static void pick_all(struct natsfx *c)
{
    int taken[2 * NATSFX_NODES], n = 0;

    for (int i = 0; i < NATSFX_NODES; i++) {
        c->n[i].port = taken[n] = pick_port(&c->seed, taken, n);
        n++;
        c->n[i].cport = taken[n] = pick_port(&c->seed, taken, n);
        n++;
    }
    c->urls[0] = 0;
    for (int i = 0, r = 0; i < NATSFX_NODES; i++) {
        snprintf(c->n[i].url, sizeof c->n[i].url, "nats://127.0.0.1:%d", c->n[i].port);
        r += snprintf(c->urls + r, sizeof c->urls - (size_t)r, "%s%s", i ? "," : "", c->n[i].url);
    }
}

int natsfx_start(struct natsfx *c, int ms)
{
    int64_t end = now_ms() + ms;
    char base[sizeof c->base];

    memset(c, 0, sizeof *c);
    if (natsfx_find_exe("nats-server", "NATS_SERVER", c->exe, sizeof c->exe)) {
        fprintf(stderr, "natsfx: nats-server not found (Debian: apt-get install nats-server, "
                "or set NATS_SERVER)\n");
        return -1;
    }
    snprintf(c->base, sizeof c->base, "/tmp/natsfx-XXXXXX");
    if (!mkdtemp(c->base)) {
        fprintf(stderr, "natsfx: mkdtemp: %s\n", strerror(errno));
        c->base[0] = 0;
        return -1;
    }
    snprintf(base, sizeof base, "%s", c->base);
    c->seed = (unsigned)getpid() ^ (unsigned)now_ms();
    snprintf(c->cluster, sizeof c->cluster, "micfx%d", (int)getpid());
    for (int i = 0; i < NATSFX_NODES; i++) {
        struct natsfx_node *n = &c->n[i];

        n->name[0] = 'n';
        n->name[1] = (char)('1' + i);
        n->name[2] = 0;
        snprintf(n->dir, sizeof n->dir, "%s/n%d", base, i + 1);
        snprintf(n->log, sizeof n->log, "%s/n%d.log", base, i + 1);
        if (mkdir(n->dir, 0700)) {
            fprintf(stderr, "natsfx: mkdir %s: %s\n", n->dir, strerror(errno));
            goto fail;
        }
    }
    for (int tries = 0; tries < START_TRIES; tries++) {
        int up = 0;

        pick_all(c);
        for (int i = 0; i < NATSFX_NODES; i++) {
            if (!c->n[i].port || !c->n[i].cport) {
                fprintf(stderr, "natsfx: no free loopback port below the ephemeral range\n");
                goto fail;
            }
            if ((c->n[i].pid = node_spawn(c, i)) < 0) {
                c->n[i].pid = 0;
                fprintf(stderr, "natsfx: fork: %s\n", strerror(errno));
                goto fail;
            }
        }
        for (int i = 0; i < NATSFX_NODES; i++)
            up += node_wait(c, i, end) == 0;
        if (up == NATSFX_NODES)
            return 0;
        /* A node exited (a port taken since the pick?) or the time is up. */
        for (int i = 0; i < NATSFX_NODES; i++)
            natsfx_term(c, i);
        if (now_ms() >= end)
            break;
    }
    fprintf(stderr, "natsfx: the cluster did not become ready (logs in %s)\n", c->base);
fail:
    for (int i = 0; i < NATSFX_NODES; i++)
        natsfx_kill9(c, i);
    if (getenv("NATSFX_KEEP") == NULL && c->base[0])
        nftw(c->base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    c->base[0] = 0;
    return -1;
}

void natsfx_stop(struct natsfx *c)
{
    for (int i = 0; i < NATSFX_NODES; i++)
        natsfx_term(c, i);
    if (c->base[0] && getenv("NATSFX_KEEP") == NULL)
        nftw(c->base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    c->base[0] = 0;
}

int natsfx_alive(struct natsfx *c, int i)
{
    struct natsfx_node *n = &c->n[i];

    if (n->pid <= 0)
        return 0;
    if (waitpid(n->pid, NULL, WNOHANG) == n->pid) {
        n->pid = 0; /* it exited by itself: reaped now */
        return 0;
    }
    return 1;
}

int natsfx_kill9(struct natsfx *c, int i)
{
    struct natsfx_node *n = &c->n[i];

    if (n->pid <= 0)
        return -1;
    kill(n->pid, SIGKILL);
    waitpid(n->pid, NULL, 0);
    n->pid = 0;
    return 0;
}

int natsfx_term(struct natsfx *c, int i)
{
    struct natsfx_node *n = &c->n[i];

    if (n->pid <= 0)
        return -1;
    kill(n->pid, SIGTERM);
    if (!reap_ms(n->pid, STOP_MS)) {
        kill(n->pid, SIGKILL);
        waitpid(n->pid, NULL, 0);
    }
    n->pid = 0;
    return 0;
}

int natsfx_spawn(struct natsfx *c, int i)
{
    if (c->n[i].pid > 0) {
        fprintf(stderr, "natsfx: node %s is still running\n", c->n[i].name);
        return -1;
    }
    if ((c->n[i].pid = node_spawn(c, i)) < 0) {
        c->n[i].pid = 0;
        fprintf(stderr, "natsfx: fork: %s\n", strerror(errno));
        return -1;
    }
    return 0;
}

int natsfx_await_ready(struct natsfx *c, int ms)
{
    int64_t end = now_ms() + ms;

    for (int i = 0; i < NATSFX_NODES; i++)
        if (c->n[i].pid > 0 && node_wait(c, i, end)) {
            fprintf(stderr, "natsfx: node %s is not ready (log %s)\n", c->n[i].name, c->n[i].log);
            return -1;
        }
    return 0;
}

int natsfx_restart(struct natsfx *c, int i, int ms)
{
    if (natsfx_spawn(c, i))
        return -1;
    if (node_wait(c, i, now_ms() + ms)) {
        fprintf(stderr, "natsfx: node %s did not come back (log %s)\n", c->n[i].name, c->n[i].log);
        return -1;
    }
    return 0;
}

int natsfx_connect(struct natsfx *c, natsConnection **nc, jsCtx **js)
{
    const char *servers[NATSFX_NODES];
    natsOptions *o = NULL;
    jsOptions jo;
    natsStatus s;

    *nc = NULL;
    *js = NULL;
    for (int i = 0; i < NATSFX_NODES; i++)
        servers[i] = c->n[i].url;
    if ((s = natsOptions_Create(&o)) == NATS_OK &&
        (s = natsOptions_SetServers(o, servers, NATSFX_NODES)) == NATS_OK &&
        (s = natsOptions_SetTimeout(o, 2000)) == NATS_OK &&
        (s = natsOptions_SetMaxReconnect(o, -1)) == NATS_OK &&
        (s = natsOptions_SetReconnectWait(o, 100)) == NATS_OK &&
        (s = natsOptions_SetRetryOnFailedConnect(o, false, NULL, NULL)) == NATS_OK)
        s = natsConnection_Connect(nc, o);
    natsOptions_Destroy(o);
    if (s == NATS_OK && (s = jsOptions_Init(&jo)) == NATS_OK) {
        jo.Wait = 3000;
        s = natsConnection_JetStream(js, *nc, &jo);
    }
    if (s != NATS_OK) {
        fprintf(stderr, "natsfx: connect to %s: %s\n", c->urls, natsStatus_GetText(s));
        natsConnection_Destroy(*nc);
        *nc = NULL;
        return -1;
    }
    return 0;
}

/* ---- Streams ---- */

int natsfx_stream_add(struct natsfx *c, jsCtx *js, const char *name, const char *subject,
                      int replicas, int ms)
{
    const char *subjects[1] = {subject};
    int64_t end = now_ms() + ms;
    jsStreamConfig cfg;
    natsStatus s = NATS_ERR;
    jsErrCode jerr = 0;

    (void)c;
    jsStreamConfig_Init(&cfg);
    cfg.Name = name;
    cfg.Subjects = subjects;
    cfg.SubjectsLen = 1;
    cfg.Storage = js_FileStorage;
    cfg.Replicas = replicas;
    cfg.Duplicates = 10LL * 60 * 1000000000; /* ns: 10 minutes */
    while (now_ms() < end) {
        jsStreamInfo *si = NULL;

        jerr = 0;
        s = js_AddStream(&si, js, &cfg, NULL, &jerr);
        jsStreamInfo_Destroy(si);
        if (s == NATS_OK)
            break;
        nap_ms(100);
    }
    if (s != NATS_OK) {
        fprintf(stderr, "natsfx: add stream %s (R%d): %s (JetStream error %d)\n", name, replicas,
                natsStatus_GetText(s), (int)jerr);
        return -1;
    }
    return natsfx_stream_wait_healthy(js, name, replicas, (int)(end - now_ms() > 1000 ? end - now_ms() : 1000));
}

/* 1 if the stream has a leader and replicas-1 current, online followers. */
static int stream_healthy(jsCtx *js, const char *name, int replicas)
{
    jsStreamInfo *si = NULL;
    int ok = 0;

    if (js_GetStreamInfo(&si, js, name, NULL, NULL) != NATS_OK)
        return 0;
    if (si->Config && si->Config->Replicas == replicas &&
        ((replicas == 1) || (si->Cluster && si->Cluster->Leader && si->Cluster->Leader[0]))) {
        int cur = 0;

        for (int i = 0; si->Cluster && i < si->Cluster->ReplicasLen; i++)
            cur += si->Cluster->Replicas[i]->Current && !si->Cluster->Replicas[i]->Offline;
        ok = cur == replicas - 1;
    }
    jsStreamInfo_Destroy(si);
    return ok;
}

int natsfx_stream_wait_healthy(jsCtx *js, const char *name, int replicas, int ms)
{
    int64_t end = now_ms() + ms;

    while (!stream_healthy(js, name, replicas)) {
        if (now_ms() > end) {
            fprintf(stderr, "natsfx: stream %s: no leader with %d current replicas within %d ms\n",
                    name, replicas, ms);
            return -1;
        }
        nap_ms(50);
    }
    return 0;
}

int natsfx_stream_leader(struct natsfx *c, jsCtx *js, const char *name)
{
    jsStreamInfo *si = NULL;
    int at = -1;

    if (js_GetStreamInfo(&si, js, name, NULL, NULL) != NATS_OK)
        return -1;
    if (si->Cluster && si->Cluster->Leader)
        for (int i = 0; i < NATSFX_NODES; i++)
            if (strcmp(si->Cluster->Leader, c->n[i].name) == 0)
                at = i;
    jsStreamInfo_Destroy(si);
    return at;
}

int64_t natsfx_stream_msgs(jsCtx *js, const char *name)
{
    jsStreamInfo *si = NULL;
    int64_t n;

    if (js_GetStreamInfo(&si, js, name, NULL, NULL) != NATS_OK)
        return -1;
    n = (int64_t)si->State.Msgs;
    jsStreamInfo_Destroy(si);
    return n;
}

int64_t natsfx_stream_await(jsCtx *js, const char *name, int64_t want, int ms)
{
    int64_t end = now_ms() + ms, n = -1;

    for (;;) {
        int64_t got = natsfx_stream_msgs(js, name);

        if (got >= 0)
            n = got;
        if (n >= want || now_ms() > end)
            return n;
        nap_ms(50);
    }
}

int natsfx_stream_read(jsCtx *js, const char *name, const char *subject, int ms, json_t **out)
{
    int64_t end = now_ms() + ms, want;
    natsSubscription *sub = NULL;
    jsSubOptions so;
    jsErrCode jerr = 0;
    json_t *arr;
    natsStatus s;

    *out = NULL;
    if ((want = natsfx_stream_msgs(js, name)) < 0) {
        fprintf(stderr, "natsfx: read %s: no stream info\n", name);
        return -1;
    }
    if (!(arr = json_array()))
        return -1;
    jsSubOptions_Init(&so);
    so.Stream = name;
    so.Config.DeliverPolicy = js_DeliverAll;
    if ((s = js_PullSubscribe(&sub, js, subject, NULL, NULL, &so, &jerr)) != NATS_OK) {
        fprintf(stderr, "natsfx: read %s: pull subscribe: %s (%d)\n", name, natsStatus_GetText(s),
                (int)jerr);
        json_decref(arr);
        return -1;
    }
    while ((int64_t)json_array_size(arr) < want && now_ms() < end) {
        natsMsgList list = {0};
        int64_t left = want - (int64_t)json_array_size(arr);

        s = natsSubscription_Fetch(&list, sub, left > 256 ? 256 : (int)left, 2000, &jerr);
        if (s == NATS_TIMEOUT)
            continue;
        if (s != NATS_OK) {
            nap_ms(50); /* a leader change: the consumer comes back */
            continue;
        }
        for (int i = 0; i < list.Count; i++) {
            natsMsg *m = list.Msgs[i];
            jsMsgMetaData *meta = NULL;
            const char **keys = NULL;
            int nkeys = 0;
            json_t *h = json_object();

            if (natsMsgHeader_Keys(m, &keys, &nkeys) == NATS_OK)
                for (int k = 0; k < nkeys; k++) {
                    const char *v = NULL;

                    if (natsMsgHeader_Get(m, keys[k], &v) == NATS_OK && v)
                        json_object_set_new(h, keys[k], json_string(v));
                }
            free((void *)keys);
            natsMsg_GetMetaData(&meta, m);
            json_array_append_new(arr, json_pack("{s:I, s:s, s:s%, s:o}", "stream_seq",
                                                 (json_int_t)(meta ? meta->Sequence.Stream : 0),
                                                 "subject", natsMsg_GetSubject(m), "data",
                                                 natsMsg_GetData(m) ? natsMsg_GetData(m) : "",
                                                 (size_t)natsMsg_GetDataLength(m), "headers", h));
            jsMsgMetaData_Destroy(meta);
            natsMsg_Ack(m, NULL); /* or it comes again after AckWait */
        }
        natsMsgList_Destroy(&list);
    }
    natsSubscription_Unsubscribe(sub);
    natsSubscription_Destroy(sub);
    if ((int64_t)json_array_size(arr) < want) {
        fprintf(stderr, "natsfx: read %s: %zu of %lld messages within %d ms\n", name,
                json_array_size(arr), (long long)want, ms);
        json_decref(arr);
        return -1;
    }
    *out = arr;
    return 0;
}

const char *natsfx_hdr(json_t *m, const char *key)
{
    return json_string_value(json_object_get(json_object_get(m, "headers"), key));
}

void natsfx_count_ids(json_t *msgs, size_t *total, size_t *distinct, size_t *missing)
{
    json_t *seen = json_object(), *m;
    size_t i;

    *total = json_array_size(msgs);
    *missing = 0;
    json_array_foreach(msgs, i, m) {
        const char *id = natsfx_hdr(m, "Nats-Msg-Id");

        if (!id)
            (*missing)++;
        else
            json_object_set_new(seen, id, json_true());
    }
    *distinct = json_object_size(seen);
    json_decref(seen);
}
