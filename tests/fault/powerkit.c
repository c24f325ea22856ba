/* powerkit.c - see powerkit.h. */
#define _GNU_SOURCE
#include "powerkit.h"

#include "mic.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

uint64_t pk_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

const char *pk_env(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v && *v ? v : dflt;
}

uint64_t pk_rnd(uint64_t *s)
{
    uint64_t x = *s ? *s : 0x9e3779b97f4a7c15ull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* ---- The log ---- */

int iof_log_load(struct iof_log *l, const char *path)
{
    struct stat st;
    size_t off = 0, cap = 0;
    int fd;

    memset(l, 0, sizeof *l);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 || fstat(fd, &st)) {
        fprintf(stderr, "powerkit: cannot read %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    l->size = (size_t)st.st_size;
    if (l->size) {
        l->map = mmap(NULL, l->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (l->map == MAP_FAILED) {
            close(fd);
            l->map = NULL;
            fprintf(stderr, "powerkit: cannot map %s\n", path);
            return -1;
        }
    }
    close(fd);
    while (off + sizeof(struct iof_rec) <= l->size) {
        const struct iof_rec *r = (const struct iof_rec *)(l->map + off);
        size_t step = sizeof *r + ((r->datalen + 7) & ~(uint64_t)7);
        if (r->magic != IOF_MAGIC || r->seq != l->n) {
            fprintf(stderr, "powerkit: %s: record %zu at %zu is not a record\n", path, l->n, off);
            iof_log_free(l);
            return -1;
        }
        if (off + step > l->size)
            break; /* torn by an exit mid-write */
        if (l->n == cap) {
            const struct iof_rec **nr;
            cap = cap ? cap * 2 : 4096;
            if (!(nr = realloc(l->rec, cap * sizeof *nr))) {
                iof_log_free(l);
                return -1;
            }
            l->rec = nr;
        }
        l->rec[l->n++] = r;
        if (r->op == IOF_NAME && r->file >= 0 && r->file < IOF_FILES_MAX) {
            l->name[r->file] = strndup((const char *)iof_data(r), (size_t)r->datalen);
            if (r->file >= l->nfiles)
                l->nfiles = r->file + 1;
        }
        off += step;
    }
    return 0;
}

void iof_log_free(struct iof_log *l)
{
    if (l->map)
        munmap(l->map, l->size);
    free(l->rec);
    for (int i = 0; i < IOF_FILES_MAX; i++)
        free(l->name[i]);
    memset(l, 0, sizeof *l);
}

int iof_log_file(const struct iof_log *l, const char *name)
{
    for (int i = 0; i < l->nfiles; i++)
        if (l->name[i] && !strcmp(l->name[i], name))
            return i;
    return -1;
}

/* ---- micd processes ---- */

static int port_read(const char *path)
{
    FILE *f = fopen(path, "r");
    int port = 0;

    if (!f)
        return 0;
    if (fscanf(f, "%d", &port) != 1)
        port = 0;
    fclose(f);
    return port;
}

int pk_micd_start(struct pk_micd *m, const char *bin, const char *const *args,
                  const char *const *env, int ms)
{
    char portfile[320];
    const char *argv[48];
    uint64_t end;
    int n = 0;

    m->pid = 0;
    m->port = 0;
    m->exited = 0;
    m->status = 0;
    if (!m->logpath[0])
        snprintf(m->logpath, sizeof m->logpath, "%s.log", m->dir);
    snprintf(portfile, sizeof portfile, "%s.port", m->dir);
    unlink(portfile);
    argv[n++] = bin;
    argv[n++] = "--listen";
    argv[n++] = "127.0.0.1:0";
    argv[n++] = "--data";
    argv[n++] = m->dir;
    argv[n++] = "--port-file";
    argv[n++] = portfile;
    for (int i = 0; args && args[i] && n < 46; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    if ((m->pid = fork()) < 0) {
        m->pid = 0;
        return -1;
    }
    if (m->pid == 0) {
        int fd = open(m->logpath, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        for (int i = 0; env && env[i]; i++)
            putenv((char *)env[i]);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    end = pk_now_ns() + (uint64_t)ms * 1000000u;
    for (;;) {
        if (pk_micd_wait(m, 0))
            return 1;
        if ((m->port = port_read(portfile)) > 0)
            break;
        if (pk_now_ns() > end) {
            fprintf(stderr, "powerkit: %s did not listen within %d ms\n", bin, ms);
            pk_micd_kill(m);
            return -1;
        }
        nap_ms(5);
    }
    unlink(portfile);
    snprintf(m->url, sizeof m->url, "http://127.0.0.1:%d", m->port);
    return 0;
}

int pk_micd_wait(struct pk_micd *m, int ms)
{
    uint64_t end = pk_now_ns() + (uint64_t)ms * 1000000u;

    if (m->exited)
        return 1;
    if (m->pid <= 0)
        return 1;
    for (;;) {
        int st;
        pid_t r = waitpid(m->pid, &st, WNOHANG);
        if (r == m->pid) {
            m->status = st;
            m->exited = 1;
            m->pid = 0;
            return 1;
        }
        if (pk_now_ns() >= end)
            return 0;
        nap_ms(2);
    }
}

int pk_micd_stop(struct pk_micd *m)
{
    if (!m->exited && m->pid > 0) {
        kill(m->pid, SIGTERM);
        if (!pk_micd_wait(m, 60000)) {
            fprintf(stderr, "powerkit: micd did not stop within 60 s of SIGTERM\n");
            pk_micd_kill(m);
            return -1;
        }
    }
    return WIFEXITED(m->status) ? WEXITSTATUS(m->status) : -1;
}

void pk_micd_kill(struct pk_micd *m)
{
    if (!m->exited && m->pid > 0) {
        kill(m->pid, SIGKILL);
        waitpid(m->pid, &m->status, 0);
        m->exited = 1;
        m->pid = 0;
    }
}

int pk_log_has(const struct pk_micd *m, const char *text)
{
    FILE *f = fopen(m->logpath, "r");
    char line[4096];
    int found = 0;

    if (!f)
        return 0;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, text) != NULL;
    fclose(f);
    return found;
}

int pk_has_verify(const char *bin)
{
    char cmd[600];
    FILE *p;
    char line[512];
    int found = 0;

    snprintf(cmd, sizeof cmd, "'%s' --help 2>&1", bin);
    if (!(p = popen(cmd, "r")))
        return 0;
    while (fgets(line, sizeof line, p))
        found |= strstr(line, "--verify") != NULL;
    pclose(p);
    return found;
}

void pk_rmdir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[600];

    if (d) {
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
                if (e->d_type == DT_DIR)
                    pk_rmdir(path);
                else
                    unlink(path);
            }
        closedir(d);
    }
    rmdir(dir);
}

/* ---- The load ---- */

static mic_client *client_for(const char *url)
{
    const char *urls[1] = {url};
    struct mic_client_opts o;
    mic_client *c = NULL;

    memset(&o, 0, sizeof o);
    o.urls = urls;
    o.nurls = 1;
    o.retries = -1;         /* every answer is recorded as it came */
    o.timeout_ms = 60000;
    o.connect_timeout_ms = 5000;
    if (mic_client_new(&o, &c, NULL))
        return NULL;
    return c;
}

static int put(mic_client *c, const char *path, const char *body)
{
    json_t *b = json_loads(body, 0, NULL), *out = NULL;
    int rc = mic_call(c, 0, "PUT", path, b, &out);

    json_decref(b);
    json_decref(out);
    return rc;
}

int pk_setup(const struct pk_micd *m)
{
    mic_client *c = client_for(m->url);
    int rc;

    if (!c)
        return -1;
    rc = put(c, "/v1/topics/" PK_TOPIC_A, "{}") || put(c, "/v1/topics/" PK_TOPIC_B, "{}") ||
         put(c, "/v1/groups/" PK_GROUP,
             "{\"topics\":[\"" PK_TOPIC_A "\",\"" PK_TOPIC_B "\"],\"ordered\":false}");
    if (rc) {
        char buf[600];
        fprintf(stderr, "powerkit: setup: %s\n",
                mic_failure_text(mic_client_failure(c), buf, sizeof buf));
    }
    mic_client_free(c);
    return rc ? -1 : 0;
}

void pk_record_init(struct pk_record *rec)
{
    memset(rec, 0, sizeof *rec);
    rec->sent = json_object();
}

void pk_record_fini(struct pk_record *rec)
{
    free(rec->a);
    json_decref(rec->sent);
    memset(rec, 0, sizeof *rec);
}

struct load {
    const struct pk_load_opts *o;
    struct pk_record *rec;
    pthread_mutex_t lock;
    atomic_int stop;
    atomic_int published;
};

static void ans_add(struct load *L, int kind, const char *id, int64_t seq, uint64_t t,
                    long status, json_t *ev)
{
    struct pk_record *r = L->rec;

    pthread_mutex_lock(&L->lock);
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 4096;
        struct pk_ans *na = realloc(r->a, cap * sizeof *na);
        if (!na) {
            pthread_mutex_unlock(&L->lock);
            return;
        }
        r->a = na;
        r->cap = cap;
    }
    struct pk_ans *a = &r->a[r->n++];
    memset(a, 0, sizeof *a);
    a->kind = kind;
    snprintf(a->event_id, sizeof a->event_id, "%s", id);
    a->seq = seq;
    a->t_ns = t;
    a->status = status;
    if (kind == PK_PUB) {
        if (ev)
            json_object_set(r->sent, id, ev);
        r->by_status[status / 100 < 6 ? status / 100 : 5]++;
        if (status >= 200 && status < 300) {
            r->pubs_2xx++;
        } else {
            r->pubs_fail++;
            if (status == 507)
                r->n507++;
            if (status == 500)
                r->n500++;
        }
    } else if (kind == PK_ACK) {
        r->acks_ok++;
    }
    pthread_mutex_unlock(&L->lock);
}

static void note_fail(struct load *L, mic_client *c)
{
    const struct mic_failure *f = mic_client_failure(c);

    pthread_mutex_lock(&L->lock);
    if (!L->rec->first_fail_status && f->status) {
        L->rec->first_fail_status = f->status;
        snprintf(L->rec->first_fail_code, sizeof L->rec->first_fail_code, "%s", f->code);
    }
    pthread_mutex_unlock(&L->lock);
}

static json_t *event_new(const char *id, const char *topic, const char *type, uint64_t *rs,
                         const char *agg, uint64_t version)
{
    char pad[65];
    int n = (int)(pk_rnd(rs) % 64);

    for (int i = 0; i < n; i++)
        pad[i] = "abcdefghijklmnopqrstuvwxyz0123456789"[pk_rnd(rs) % 36];
    pad[n] = 0;
    json_t *e = json_pack("{s:s, s:s, s:s, s:{s:s}, s:{s:s, s:I}}", "event_id", id, "topic", topic,
                          "event_type", type, "headers", "src", "powercut", "payload", "pad", pad,
                          "r", (json_int_t)(pk_rnd(rs) % 1000000));
    if (e && agg) {
        json_object_set_new(e, "aggregate_type", json_string("acct"));
        json_object_set_new(e, "aggregate_id", json_string(agg));
        json_object_set_new(e, "aggregate_version", json_integer((json_int_t)version));
    }
    return e;
}

static long status_of(mic_client *c, int rc)
{
    return rc == 0 ? 201 : mic_client_failure(c)->status;
}

static int pub_more(struct load *L, int k)
{
    return !atomic_load(&L->stop) &&
           (!L->o->max_events || atomic_fetch_add(&L->published, k) < L->o->max_events);
}

/* Publisher 1: single events, no aggregate. */
static void pub_single(struct load *L, mic_client *c, uint64_t rs, int t)
{
    char id[40];

    for (int i = 0; pub_more(L, 1); i++) {
        struct mic_publish_result res;
        snprintf(id, sizeof id, "s%u-%d-%d", L->o->seed, t, i);
        json_t *e = event_new(id, PK_TOPIC_A, "single", &rs, NULL, 0);
        int rc = mic_publish(c, e, &res);
        uint64_t now = pk_now_ns();
        if (rc)
            note_fail(L, c);
        ans_add(L, PK_PUB, id, res.seq, now, status_of(c, rc), e);
        json_decref(e);
    }
}

/* Publisher 2: batches of 2..30 events over 3 fresh aggregates, versions
 * from 1 in each. */
static void pub_batch(struct load *L, mic_client *c, uint64_t rs, int t)
{
    char id[40], agg[3][40];

    for (int i = 0;; i++) {
        size_t n = 2 + pk_rnd(&rs) % 29;
        json_t *ev[30];
        struct mic_publish_result res[30];
        uint64_t ver[3] = {0, 0, 0};

        if (!pub_more(L, (int)n))
            break;
        for (int a = 0; a < 3; a++)
            snprintf(agg[a], sizeof agg[a], "b%u-%d-%d-%d", L->o->seed, t, i, a);
        for (size_t k = 0; k < n; k++) {
            int a = (int)(pk_rnd(&rs) % 3);
            snprintf(id, sizeof id, "b%u-%d-%d-%zu", L->o->seed, t, i, k);
            ev[k] = event_new(id, PK_TOPIC_B, "batched", &rs, agg[a], ++ver[a]);
        }
        int rc = mic_publish_batch(c, ev, n, res);
        uint64_t now = pk_now_ns();
        if (rc)
            note_fail(L, c);
        for (size_t k = 0; k < n; k++) {
            const char *eid = json_string_value(json_object_get(ev[k], "event_id"));
            ans_add(L, PK_PUB, eid, res[k].seq, now,
                    res[k].ok ? 201 : res[k].fail.status, ev[k]);
            json_decref(ev[k]);
        }
    }
}

/* Publisher 3: one aggregate, versions 1, 2, ...; a version not answered
 * 2xx is sent again (same id, same content) until it is. */
static void pub_versioned(struct load *L, mic_client *c, uint64_t rs, int t)
{
    char id[40], agg[40];
    uint64_t v = 1;
    json_t *e = NULL;

    snprintf(agg, sizeof agg, "v%u-%d", L->o->seed, t);
    while (!atomic_load(&L->stop)) {
        struct mic_publish_result res;
        if (!e) {
            if (!pub_more(L, 1))
                break;
            snprintf(id, sizeof id, "v%u-%d-%llu", L->o->seed, t, (unsigned long long)v);
            e = event_new(id, PK_TOPIC_B, "versioned", &rs, agg, v);
        }
        int rc = mic_publish(c, e, &res);
        uint64_t now = pk_now_ns();
        if (rc)
            note_fail(L, c);
        ans_add(L, PK_PUB, id, res.seq, now, status_of(c, rc), e);
        if (rc == 0) {
            json_decref(e);
            e = NULL;
            v++;
        } else if (!mic_client_failure(c)->status) {
            nap_ms(2); /* no answer: micd is gone or busy; the loop's stop decides */
        }
    }
    json_decref(e);
}

static void work(struct load *L, mic_client *c)
{
    while (!atomic_load(&L->stop)) {
        struct mic_claim_opts co = {.max = 100, .lease_ttl_s = 120, .wait_s = 0.1,
                                    .worker = "pc-worker"};
        struct mic_claimed d = {0};
        if (mic_claim(c, 0, PK_GROUP, &co, &d)) {
            mic_claimed_fini(&d);
            if (!mic_client_failure(c)->status)
                nap_ms(2);
            continue;
        }
        if (d.n) {
            const struct mic_leased *items[1000];
            struct mic_item_result res[1000];
            for (size_t i = 0; i < d.n; i++)
                items[i] = &d.v[i];
            int rc = mic_ack(c, PK_GROUP, items, d.n, res);
            uint64_t now = pk_now_ns();
            pthread_mutex_lock(&L->lock);
            L->rec->claims++;
            pthread_mutex_unlock(&L->lock);
            for (size_t i = 0; rc == 0 && i < d.n; i++)
                if (res[i].status == MIC_ITEM_ACKED)
                    ans_add(L, PK_ACK, d.v[i].event_id, d.v[i].seq, now, 200, NULL);
        }
        mic_claimed_fini(&d);
    }
}

struct thr {
    struct load *L;
    int role, idx;
    pthread_t t;
};

static void *thr_main(void *arg)
{
    struct thr *t = arg;
    mic_client *c = client_for(t->L->o->m->url);
    uint64_t rs = ((uint64_t)t->L->o->seed << 8) ^ (uint64_t)(t->idx + 1) * 0x9e3779b9u;

    if (!c)
        return NULL;
    switch (t->role) {
    case 1: pub_single(t->L, c, rs, t->idx); break;
    case 2: pub_batch(t->L, c, rs, t->idx); break;
    case 3: pub_versioned(t->L, c, rs, t->idx); break;
    default: work(t->L, c); break;
    }
    mic_client_free(c);
    return NULL;
}

static int ans_cmp(const void *a, const void *b)
{
    const struct pk_ans *x = a, *y = b;
    return x->t_ns < y->t_ns ? -1 : x->t_ns > y->t_ns;
}

int pk_load_run(const struct pk_load_opts *o, struct pk_record *rec)
{
    struct load L;
    struct thr th[8];
    int n = 0, rc = 0;
    uint64_t end = pk_now_ns() + (uint64_t)o->ms * 1000000u;

    memset(&L, 0, sizeof L);
    L.o = o;
    L.rec = rec;
    pthread_mutex_init(&L.lock, NULL);
    for (int i = 0; i < o->publishers && i < 6; i++)
        th[n++] = (struct thr){&L, 1 + i % 3, i, 0};
    if (o->worker)
        th[n++] = (struct thr){&L, 0, 7, 0};
    for (int i = 0; i < n; i++)
        if (pthread_create(&th[i].t, NULL, thr_main, &th[i])) {
            atomic_store(&L.stop, 1);
            for (int k = 0; k < i; k++)
                pthread_join(th[k].t, NULL);
            pthread_mutex_destroy(&L.lock);
            return -1;
        }
    while (pk_now_ns() < end) {
        struct stat sb;
        if (pk_micd_wait((struct pk_micd *)o->m, 10))
            break;
        if (o->stop_path && stat(o->stop_path, &sb) == 0)
            break;
        if (o->max_events && atomic_load(&L.published) >= o->max_events &&
            !o->worker)
            break;
    }
    atomic_store(&L.stop, 1);
    for (int i = 0; i < n; i++)
        pthread_join(th[i].t, NULL);
    pthread_mutex_destroy(&L.lock);
    if (rec->n)
        qsort(rec->a, rec->n, sizeof *rec->a, ans_cmp);
    return rc;
}

/* ---- Rebuild ---- */

struct fimg {
    unsigned char *buf;
    size_t size, cap;
    int exists;
};

struct pk_rebuild {
    const struct iof_log *log;
    size_t pos;
    struct fimg img[IOF_FILES_MAX];
    size_t *pend, npend, cappend;   /* not durable yet (in log order) */
    unsigned char *dropped;         /* per record: covered by a failed sync */
};

struct pk_rebuild *pk_rebuild_new(const struct iof_log *log)
{
    struct pk_rebuild *b = calloc(1, sizeof *b);

    if (!b)
        return NULL;
    b->log = log;
    if (!(b->dropped = calloc(log->n ? log->n : 1, 1))) {
        free(b);
        return NULL;
    }
    return b;
}

void pk_rebuild_free(struct pk_rebuild *b)
{
    if (!b)
        return;
    for (int i = 0; i < IOF_FILES_MAX; i++)
        free(b->img[i].buf);
    free(b->pend);
    free(b->dropped);
    free(b);
}

static int img_size(struct fimg *f, size_t size)
{
    if (size > f->cap) {
        size_t cap = f->cap ? f->cap : 1 << 20;
        unsigned char *nb;
        while (cap < size)
            cap *= 2;
        if (!(nb = realloc(f->buf, cap)))
            return -1;
        memset(nb + f->cap, 0, cap - f->cap);
        f->buf = nb;
        f->cap = cap;
    }
    if (size < f->size)
        memset(f->buf + size, 0, f->size - size);
    f->size = size;
    return 0;
}

/* Apply record r (a write or a size change) to image f. */
static int img_apply(struct fimg *f, const struct iof_rec *r)
{
    size_t off = (size_t)r->off, len = (size_t)r->len;

    switch (r->op) {
    case IOF_WRITE:
        if (off + len > f->size && img_size(f, off + len))
            return -1;
        if (r->flags & IOF_F_ZERO)
            memset(f->buf + off, 0, len);
        else
            memcpy(f->buf + off, iof_data(r), len);
        return 0;
    case IOF_TRUNC:
        return img_size(f, (size_t)r->off);
    case IOF_FALLOC:
        if ((r->aux & (0x02 | 0x10)) && off < f->size) /* PUNCH_HOLE, ZERO_RANGE */
            memset(f->buf + off, 0, (off + len > f->size ? f->size : off + len) - off);
        if (!(r->aux & 0x01) && off + len > f->size) /* not KEEP_SIZE */
            return img_size(f, off + len);
        return 0;
    }
    return 0;
}

static int is_change(const struct iof_rec *r)
{
    return (r->op == IOF_WRITE || r->op == IOF_TRUNC || r->op == IOF_FALLOC) && !r->err &&
           r->file >= 0 && r->file < IOF_FILES_MAX;
}

/* Process record i: the durable state after it. */
static int step(struct pk_rebuild *b, size_t i)
{
    const struct iof_rec *r = b->log->rec[i];

    if (r->op == IOF_NAME && r->file >= 0 && r->file < IOF_FILES_MAX) {
        b->img[r->file].exists = 1;
        return 0;
    }
    if (is_change(r)) {
        if (r->flags & IOF_F_DSYNC)
            return img_apply(&b->img[r->file], r);
        if (b->npend == b->cappend) {
            size_t cap = b->cappend ? b->cappend * 2 : 4096;
            size_t *np = realloc(b->pend, cap * sizeof *np);
            if (!np)
                return -1;
            b->pend = np;
            b->cappend = cap;
        }
        b->pend[b->npend++] = i;
        return 0;
    }
    if (r->op == IOF_SYNC) {
        size_t keep = 0;
        for (size_t k = 0; k < b->npend; k++) {
            size_t j = b->pend[k];
            const struct iof_rec *w = b->log->rec[j];
            int covered = j < r->aux && (r->file < 0 || w->file == r->file);
            if (covered && r->err)
                b->dropped[j] = 1;
            if (covered && !r->err && !b->dropped[j]) {
                if (img_apply(&b->img[w->file], w))
                    return -1;
            } else {
                b->pend[keep++] = j;
            }
        }
        b->npend = keep;
    }
    return 0;
}

static int write_full(int fd, const unsigned char *p, size_t n, off_t off)
{
    while (n) {
        ssize_t w = pwrite(fd, p, n, off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
        off += w;
    }
    return 0;
}

static const unsigned char zeros[65536];

/* Write bytes [a, b) of record r's data (zeros when IOF_F_ZERO) at its
 * offset + a into fd. */
static int put_range(int fd, const struct iof_rec *r, size_t a, size_t b)
{
    while (a < b) {
        size_t n = b - a;
        const unsigned char *src;
        if (r->flags & IOF_F_ZERO) {
            if (n > sizeof zeros)
                n = sizeof zeros;
            src = zeros;
        } else {
            src = iof_data(r) + a;
        }
        if (write_full(fd, src, n, (off_t)(r->off + (int64_t)a)))
            return -1;
        a += n;
    }
    return 0;
}

/* Apply a write that was not durable: whole, a prefix, or some sectors. */
static int apply_torn(int fd, const struct iof_rec *r, uint64_t *rs)
{
    size_t len = (size_t)r->len;
    unsigned mode = (unsigned)(pk_rnd(rs) % 100);

    if (r->op == IOF_TRUNC)
        return ftruncate(fd, (off_t)r->off);
    if (r->op == IOF_FALLOC) {
        struct stat st;
        if (fstat(fd, &st))
            return -1;
        if (!(r->aux & 0x01) && r->off + r->len > st.st_size &&
            ftruncate(fd, (off_t)(r->off + r->len)))
            return -1;
        if (r->aux & (0x02 | 0x10)) {
            struct iof_rec z = *r;
            z.flags |= IOF_F_ZERO;
            return put_range(fd, &z, 0, (size_t)r->len);
        }
        return 0;
    }
    if (!len)
        return 0;
    if (mode < 55)
        return put_range(fd, r, 0, len);
    if (mode < 70)
        return put_range(fd, r, 0, (size_t)(pk_rnd(rs) % len));
    size_t sec = mode < 85 ? 4096 : 512;
    size_t start = (size_t)r->off;
    for (size_t a = 0; a < len;) {
        size_t b = ((start + a) / sec + 1) * sec - start;
        if (b > len)
            b = len;
        if ((pk_rnd(rs) & 1) && put_range(fd, r, a, b))
            return -1;
        a = b;
    }
    return 0;
}

int pk_rebuild_cut(struct pk_rebuild *b, size_t p, const char *dir, double unsynced_p,
                   unsigned seed, size_t *n_unsynced, size_t *n_applied)
{
    const struct iof_log *l = b->log;
    char path[600];
    int fds[IOF_FILES_MAX];
    uint64_t rs = (uint64_t)seed * 0x9e3779b97f4a7c15ull + 1;
    size_t *cand = NULL, nc = 0;
    int rc = -1;

    *n_unsynced = *n_applied = 0;
    if (p > l->n)
        p = l->n;
    for (; b->pos < p; b->pos++)
        if (step(b, b->pos))
            return -1;
    for (int i = 0; i < IOF_FILES_MAX; i++)
        fds[i] = -1;
    pk_rmdir(dir);
    if (mkdir(dir, 0700))
        return -1;
    for (int i = 0; i < l->nfiles; i++) {
        if (!b->img[i].exists || !l->name[i] || !strcmp(l->name[i], "lock.mdb") ||
            strchr(l->name[i], '/'))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, l->name[i]);
        if ((fds[i] = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0 ||
            write_full(fds[i], b->img[i].buf, b->img[i].size, 0) ||
            ftruncate(fds[i], (off_t)b->img[i].size))
            goto out;
    }
    if (b->npend && !(cand = malloc(b->npend * sizeof *cand)))
        goto out;
    for (size_t k = 0; k < b->npend; k++)
        if (b->pend[k] < p && fds[l->rec[b->pend[k]]->file] >= 0)
            cand[nc++] = b->pend[k];
    *n_unsynced = nc;
    if (unsynced_p > 0) {
        size_t keep = 0;
        for (size_t k = 0; k < nc; k++)
            if ((double)(pk_rnd(&rs) % 1000000) / 1e6 < unsynced_p)
                cand[keep++] = cand[k];
        for (size_t k = keep; k > 1; k--) {
            size_t j = (size_t)(pk_rnd(&rs) % k);
            size_t t = cand[k - 1];
            cand[k - 1] = cand[j];
            cand[j] = t;
        }
        for (size_t k = 0; k < keep; k++) {
            const struct iof_rec *r = l->rec[cand[k]];
            if (apply_torn(fds[r->file], r, &rs))
                goto out;
        }
        *n_applied = keep;
    }
    rc = 0;
out:
    free(cand);
    for (int i = 0; i < IOF_FILES_MAX; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    return rc;
}

/* ---- Checking a store ---- */

static void why(struct pk_check *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void why(struct pk_check *c, const char *fmt, ...)
{
    va_list ap;

    if (c->why[0])
        return;
    va_start(ap, fmt);
    vsnprintf(c->why, sizeof c->why, fmt, ap);
    va_end(ap);
}

/* Every event of 'topic' by a paged range read into 'into' (id -> event).
 * Returns 0, 1 (the topic does not exist), or -1 (an error answer). */
static int range_all(mic_client *c, const char *topic, json_t *into, struct pk_check *chk)
{
    char path[512], after[256] = "";

    for (int pages = 0; pages < 10000; pages++) {
        json_t *out = NULL, *ev, *next;
        size_t i;

        snprintf(path, sizeof path, "/v1/topics/%s/events?limit=1000%s%s", topic,
                 after[0] ? "&after=" : "", after);
        if (mic_call(c, 0, "GET", path, NULL, &out)) {
            const struct mic_failure *f = mic_client_failure(c);
            if (f->status == 404 && pages == 0)
                return 1;
            why(chk, "range read of %s: %ld %s %s", topic, f->status, f->code, f->message);
            return -1;
        }
        json_array_foreach(json_object_get(out, "events"), i, ev) {
            const char *id = json_string_value(json_object_get(ev, "event_id"));
            if (id)
                json_object_set(into, id, ev);
        }
        next = json_object_get(out, "next");
        if (!json_is_string(next)) {
            json_decref(out);
            return 0;
        }
        if (!mic_path_escape(json_string_value(next), after, sizeof after)) {
            json_decref(out);
            return -1;
        }
        json_decref(out);
    }
    return -1;
}

/* 1 when every field of 'sent' is in 'stored' with the same value. */
static int same_fields(json_t *sent, json_t *stored)
{
    const char *k;
    json_t *v;

    if (!json_is_object(stored))
        return 0;
    json_object_foreach(sent, k, v)
        if (!json_equal(v, json_object_get(stored, k)))
            return 0;
    return 1;
}

/* GET /v1/events/{id}: 200 -> *out (caller's), 404 -> NULL and 0, else -1. */
static int lookup(mic_client *c, const char *id, json_t **out)
{
    char path[300], esc[200];

    *out = NULL;
    snprintf(path, sizeof path, "/v1/events/%s", mic_path_escape(id, esc, sizeof esc));
    if (mic_call(c, 0, "GET", path, NULL, out) == 0)
        return 0;
    return mic_client_failure(c)->status == 404 ? 0 : -1;
}

static const char *group_state(json_t *doc)
{
    json_t *d;
    size_t i;

    json_array_foreach(json_object_get(doc, "deliveries"), i, d)
        if (!strcmp(json_string_value(json_object_get(d, "group")) ?: "", PK_GROUP))
            return json_string_value(json_object_get(d, "state"));
    return NULL;
}

#define LOOKUP_SAMPLE 60

void pk_check_dir(const char *bin, const char *dir, const struct pk_record *rec,
                  uint64_t t_cut_ns, struct pk_check *c)
{
    static const char *const env[] = {
        "ASAN_OPTIONS=abort_on_error=1:detect_leaks=0",
        "UBSAN_OPTIONS=abort_on_error=1:print_stacktrace=1", NULL};
    static const char *const args[] = {"--log-level", "warn", NULL};
    struct pk_micd m;
    mic_client *cl = NULL;
    json_t *stored = json_object(), *acked_ids = json_object();
    uint64_t rs = t_cut_ns ^ 0x5bd1e995u;
    size_t nacked = 0;
    int rc;

    memset(c, 0, sizeof *c);
    c->verify_status = -2;
    memset(&m, 0, sizeof m);
    snprintf(m.dir, sizeof m.dir, "%s", dir);
    snprintf(m.logpath, sizeof m.logpath, "%s.log", dir);
    unlink(m.logpath);
    /* What was acknowledged before the cut (counted whatever happens). */
    for (size_t i = 0; i < rec->n && rec->a[i].t_ns < t_cut_ns; i++)
        if (rec->a[i].kind == PK_PUB && rec->a[i].status >= 200 && rec->a[i].status < 300 &&
            !json_object_get(acked_ids, rec->a[i].event_id)) {
            json_object_set_new(acked_ids, rec->a[i].event_id, json_true());
            nacked++;
        }
    json_object_clear(acked_ids);
    c->acked = nacked;
    rc = pk_micd_start(&m, bin, args, env, 60000);
    if (rc != 0) {
        c->unavailable = nacked;
        if (rc == 1 && WIFEXITED(m.status) && WEXITSTATUS(m.status) != 0 &&
            !pk_log_has(&m, "Sanitizer") && !pk_log_has(&m, "runtime error")) {
            c->refused = 1;
            if (!pk_log_has(&m, "\"level\"") && !pk_log_has(&m, "error"))
                why(c, "refused to start (status %d) without a log line", WEXITSTATUS(m.status));
        } else {
            c->crashed = 1;
            why(c, "start: %s", rc < 0 ? "did not listen"
                : WIFSIGNALED(m.status) ? strsignal(WTERMSIG(m.status))
                : "exited without listening (or a sanitizer report)");
        }
        goto out;
    }
    c->started = 1;
    if (!(cl = client_for(m.url))) {
        why(c, "no client");
        c->range_error = 1;
        goto stop;
    }
    /* Every event, through the range reads. */
    if (range_all(cl, PK_TOPIC_A, stored, c) < 0 || range_all(cl, PK_TOPIC_B, stored, c) < 0)
        c->range_error = 1;
    c->events_in_store = json_object_size(stored);
    {
        const char *k;
        json_t *v, *answers = json_object();
        /* Per event id, the kinds of answers its publishes got: 1 a 2xx,
         * 2 a 507, 4 anything else (no answer included). */
        for (size_t i = 0; answers && i < rec->n; i++) {
            const struct pk_ans *a = &rec->a[i];
            json_int_t bits;
            if (a->kind != PK_PUB)
                continue;
            bits = json_integer_value(json_object_get(answers, a->event_id));
            bits |= a->status >= 200 && a->status < 300 ? 1 : a->status == 507 ? 2 : 4;
            json_object_set_new(answers, a->event_id, json_integer(bits));
        }
        json_object_foreach(stored, k, v) {
            if (!json_object_get(rec->sent, k)) {
                c->unexpected++;
                why(c, "unexpected event %s", k);
            } else if (json_integer_value(json_object_get(answers, k)) == 2) {
                if (!c->refused_stored++)
                    snprintf(c->refused_id, sizeof c->refused_id, "%s", k);
            }
        }
        json_decref(answers);
    }
    /* Publishes answered 2xx before the cut. */
    c->acked = 0;
    for (size_t i = 0, k = 0; i < rec->n && rec->a[i].t_ns < t_cut_ns; i++) {
        const struct pk_ans *a = &rec->a[i];
        json_t *sent, *got, *doc = NULL;
        if (a->kind != PK_PUB || a->status < 200 || a->status >= 300)
            continue;
        if (json_object_get(acked_ids, a->event_id))
            continue; /* a resend answered 2xx again */
        json_object_set_new(acked_ids, a->event_id, json_true());
        k++;
        c->acked++;
        sent = json_object_get(rec->sent, a->event_id);
        got = json_object_get(stored, a->event_id);
        if (!got) {
            c->lost++;
            why(c, "lost: %s (answered %ld)", a->event_id, a->status);
            continue;
        }
        c->found++;
        if (!same_fields(sent, got)) {
            c->mismatched++;
            why(c, "range read of %s differs from what was sent", a->event_id);
            continue;
        }
        /* The lookup by id: the newest ones and a random sample. */
        if (k + LOOKUP_SAMPLE / 2 <= nacked && pk_rnd(&rs) % (nacked + 1) >= LOOKUP_SAMPLE / 2)
            continue;
        if (lookup(cl, a->event_id, &doc) || !doc ||
            !same_fields(sent, json_object_get(doc, "event"))) {
            c->mismatched++;
            why(c, "GET /v1/events/%s: %s", a->event_id, doc ? "differs" : "not found");
        }
        json_decref(doc);
    }
    /* Acks answered before the cut: still dispatched, never handed out again. */
    {
        json_t *acks = json_object();
        for (size_t i = 0; i < rec->n && rec->a[i].t_ns < t_cut_ns; i++) {
            const struct pk_ans *a = &rec->a[i];
            json_t *doc = NULL;
            const char *st;
            if (a->kind != PK_ACK || json_object_get(acks, a->event_id))
                continue;
            json_object_set_new(acks, a->event_id, json_true());
            c->acks++;
            if (pk_rnd(&rs) % 4 && c->acks > 100)
                continue; /* a lookup for a quarter of them past the first 100 */
            if (lookup(cl, a->event_id, &doc) || !doc) {
                c->ack_redelivered++;
                why(c, "acked %s: its event is gone", a->event_id);
            } else if (!(st = group_state(doc)) || strcmp(st, "dispatched")) {
                c->ack_redelivered++;
                why(c, "acked %s is %s again", a->event_id, st ? st : "(no delivery)");
            }
            json_decref(doc);
        }
        for (int round = 0; round < 100; round++) {
            struct mic_claim_opts co = {.max = 1000, .lease_ttl_s = 600, .wait_s = 0};
            struct mic_claimed d = {0};
            if (mic_claim(cl, 0, PK_GROUP, &co, &d)) {
                if (mic_client_failure(cl)->status != 404) {
                    c->range_error = 1;
                    why(c, "claim after the cut: %ld %s", mic_client_failure(cl)->status,
                        mic_client_failure(cl)->code);
                }
                mic_claimed_fini(&d);
                break;
            }
            for (size_t i = 0; i < d.n; i++)
                if (json_object_get(acks, d.v[i].event_id)) {
                    c->ack_redelivered++;
                    why(c, "acked %s handed out again", d.v[i].event_id);
                }
            size_t got = d.n;
            mic_claimed_fini(&d);
            if (!got)
                break;
        }
        json_decref(acks);
    }
stop:
    mic_client_free(cl);
    c->stop_status = pk_micd_stop(&m);
    if (c->stop_status != 0)
        why(c, "micd stopped with status %d", c->stop_status);
    if (pk_has_verify(bin)) {
        char cmd[800];
        snprintf(cmd, sizeof cmd, "'%s' --verify '%s' >> '%s' 2>&1", bin, dir, m.logpath);
        int st = system(cmd);
        c->verify_status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        if (c->verify_status)
            why(c, "micd --verify: status %d", c->verify_status);
    }
out:
    json_decref(stored);
    json_decref(acked_ids);
}

int pk_check_ok(const struct pk_check *c, int refuse_ok)
{
    if (c->crashed || (c->refused && !refuse_ok))
        return 0;
    if (c->refused)
        return 1;
    return !c->lost && !c->mismatched && !c->unexpected && !c->ack_redelivered &&
           !c->range_error && c->stop_status == 0 && c->verify_status <= 0 &&
           c->verify_status != -1;
}

void pk_fail(struct pk_outcome *o, const char *fmt, ...)
{
    va_list ap;

    if (!o->ok)
        return;
    o->ok = 0;
    va_start(ap, fmt);
    vsnprintf(o->why, sizeof o->why, fmt, ap);
    va_end(ap);
}
