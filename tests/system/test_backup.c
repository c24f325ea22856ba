/* test_backup.c - GET /v1/backup and mic backup (issue 18, point 3) against
 * a real micd with API keys:
 *
 *   - a backup taken while threads publish (two topics) and claim and ack
 *     (an ordered group and an unordered one) through libmic is a
 *     consistent snapshot: a second micd started on a directory holding
 *     only the copy as data.mdb has every event whose publish was
 *     acknowledged before the backup was asked for, none published after
 *     its last byte arrived, every delivery acknowledged before it began
 *     dispatched, and group counters that add up to the events each group
 *     covers; micd --verify passes on the copy; the restored micd goes on
 *     (seq continues, claims work);
 *   - a consumer key gets 403 (JSON), no key 401: nothing is streamed;
 *   - a client that reads a few KiB and leaves: micd keeps serving, the
 *     backup's threads end (mic_backups_running back to 0, counted
 *     client_gone), no file appears in the store directory, and the next
 *     backup is whole;
 *   - a client that reads a few KiB and then stops reading, socket open,
 *     against --backup-stall-timeout 1: micd ends the backup (counted
 *     stalled, logged), the body cut short; the backup's threads end, the
 *     map grows again under writes, and the next backup is whole; a copy
 *     slower than its client (--backup-rate) is not a stall;
 *   - mic backup FILE ($MIC_CLI) writes a file a micd starts on, prints
 *     its progress line, and fails with a message on 403 leaving no file;
 *   - with --backup-rate the copy comes no faster than the rate, whole.
 *
 * Bounded: at most PUB_MAX publishes per thread, every wait a deadline. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "harness.h"
#include "claimkit.h"
#include "mic.h"
#include "procfx.h"
#include "storedir.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ADMIN_SECRET "test-backup-admin-secret"
#define CONSUMER_SECRET "test-backup-consumer-secret"
#define ADMIN_HDR "Authorization: Bearer " ADMIN_SECRET

static struct srv S;
static char keys_path[300], audit_path[300];

/* ---- Helpers ---- */

static int64_t mono_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void sha_hex(const char *secret, char out[65])
{
    unsigned char h[SHA256_DIGEST_LENGTH];

    SHA256((const unsigned char *)secret, strlen(secret), h);
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", h[i]);
}

/* An admin request to 's' with a JSON body (may be NULL); asserts 'want'
 * and returns the parsed body (NULL if none). */
static json_t *adm(const struct srv *s, const char *method, const char *path, const char *body,
                   long want)
{
    struct resp r;
    json_t *j;

    assert_int_equal(http(s, method, path, body ? "application/json" : NULL, body,
                          body ? strlen(body) : 0, ADMIN_HDR, &r), 0);
    if (r.status != want)
        fail_msg("%s %s: %ld, not %ld: %s", method, path, r.status, want, r.body);
    j = r.json ? json_incref(r.json) : NULL;
    resp_free(&r);
    return j;
}

static mic_client *client_for(const struct srv *s, const char *secret)
{
    const char *urls[] = {s->url};
    struct mic_client_opts o = {.urls = urls, .nurls = 1, .key = secret, .timeout_ms = 60000};
    mic_client *c = NULL;

    assert_int_equal(mic_client_new(&o, &c, NULL), 0);
    return c;
}

/* The value of "name{label}" (label "" for none) in s's /metrics, or -1. */
static double metric(const struct srv *s, const char *series)
{
    struct resp r;
    const char *p;
    double v = -1;
    size_t n = strlen(series);

    assert_int_equal(http(s, "GET", "/metrics", NULL, NULL, 0, ADMIN_HDR, &r), 0);
    assert_int_equal(r.status, 200);
    for (p = r.body; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (!strncmp(p, series, n) && p[n] == ' ') {
            v = strtod(p + n + 1, NULL);
            break;
        }
    resp_free(&r);
    return v;
}

static int backups_idle(void *arg)
{
    return metric(arg, "mic_backups_running") == 0;
}

/* Copy file 'from' to 'to' (mode 0600). */
static void copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    char buf[65536];
    ssize_t n;

    assert_true(in >= 0 && out >= 0);
    while ((n = read(in, buf, sizeof buf)) > 0)
        assert_int_equal(write(out, buf, (size_t)n), n);
    assert_int_equal(n, 0);
    close(in);
    assert_int_equal(close(out), 0);
}

/* The names in directory 'dir', sorted, joined with spaces (free it). */
static char *dir_names(const char *dir)
{
    struct dirent **list;
    int n = scandir(dir, &list, NULL, alphasort);
    size_t len = 1;
    char *out;

    assert_true(n >= 0);
    for (int i = 0; i < n; i++)
        len += strlen(list[i]->d_name) + 1;
    out = calloc(1, len);
    assert_non_null(out);
    for (int i = 0; i < n; i++) {
        strcat(out, list[i]->d_name);
        strcat(out, " ");
        free(list[i]);
    }
    free(list);
    return out;
}

/* A new empty directory for a restored store (a srv's dir: 256 bytes). */
static void new_dir(char *dir, size_t cap)
{
    snprintf(dir, cap, "/tmp/mic-test-restore-XXXXXX");
    assert_non_null(mkdtemp(dir));
}

/* ---- Setup ---- */

static int group_setup(void **state)
{
    const char *args[] = {"--keys", keys_path, "--audit-log", audit_path, NULL};
    char hex[65];
    FILE *f;

    (void)state;
    snprintf(keys_path, sizeof keys_path, "/tmp/mic-test-bkeys-%d", (int)getpid());
    snprintf(audit_path, sizeof audit_path, "/tmp/mic-test-baudit-%d", (int)getpid());
    unlink(audit_path);
    if (!(f = fopen(keys_path, "w")))
        return -1;
    sha_hex(ADMIN_SECRET, hex);
    fprintf(f, "ops admin %s *\n", hex);
    sha_hex(CONSUMER_SECRET, hex);
    fprintf(f, "worker consumer %s *\n", hex);
    fclose(f);
    return srv_start_shared(&S, args);
}

static int group_teardown(void **state)
{
    (void)state;
    unlink(keys_path);
    unlink(audit_path);
    return srv_stop_shared(&S);
}

/* ---- A backup under load is a consistent snapshot ---- */

#define PUBLISHERS 2
#define PUB_MAX 4000          /* publishes per thread, at most */
#define ACK_MAX 16000

struct pub_rec {
    char id[32];
    int topic;                /* 0: ta, 1: tb */
    int64_t sent_us, acked_us; /* acked_us 0: no 2xx */
};

struct ack_rec {
    int group;                /* 0: go (ordered), 1: gu (unordered) */
    char id[48];
    int64_t acked_us;
};

static const char *const group_names[2] = {"go", "gu"};

struct load {
    atomic_int stop;
    struct pub_rec pubs[PUBLISHERS][PUB_MAX];
    atomic_int npub[PUBLISHERS];     /* records complete */
    atomic_int nacked_pub;           /* publishes with a 2xx */
    struct ack_rec acks[ACK_MAX];
    atomic_int nack;
    atomic_int after_end;            /* publishes sent after t_end */
    _Atomic int64_t t_end;
    pthread_mutex_t ack_lock;
};

struct worker_arg {
    struct load *L;
    int i;
};

static void *publisher(void *arg)
{
    struct worker_arg *w = arg;
    struct load *L = w->L;
    mic_client *c = client_for(&S, ADMIN_SECRET);

    for (int k = 0; k < PUB_MAX && !atomic_load(&L->stop); k++) {
        struct pub_rec *p = &L->pubs[w->i][k];
        struct mic_publish_result res;
        json_t *ev;

        snprintf(p->id, sizeof p->id, "p%d-%d", w->i, k);
        p->topic = k % 2;
        ev = json_pack("{s:s, s:s, s:s, s:s, s:s, s:{s:i}}", "topic", p->topic ? "tb" : "ta",
                       "event_id", p->id, "event_type", "load", "aggregate_type", "acct",
                       "aggregate_id", k % 3 ? "a1" : "a2", "payload", "k", k);
        p->sent_us = mono_us();
        if (mic_publish(c, ev, &res) == 0 && res.ok) {
            p->acked_us = mono_us();
            atomic_fetch_add(&L->nacked_pub, 1);
        }
        json_decref(ev);
        {
            int64_t te = atomic_load(&L->t_end);
            if (te && p->sent_us > te)
                atomic_fetch_add(&L->after_end, 1);
        }
        atomic_store(&L->npub[w->i], k + 1);
    }
    mic_client_free(c);
    return NULL;
}

static void *claimer(void *arg)
{
    struct worker_arg *w = arg;
    struct load *L = w->L;
    mic_client *c = client_for(&S, ADMIN_SECRET);
    struct mic_claim_opts o = {.max = 20, .wait_s = 0.1, .worker = "loader"};

    while (!atomic_load(&L->stop)) {
        struct mic_claimed got = {0};
        struct mic_item_result res[20];
        const struct mic_leased *items[20];

        if (mic_claim(c, 0, group_names[w->i], &o, &got) == 0 && got.n) {
            for (size_t j = 0; j < got.n; j++)
                items[j] = &got.v[j];
            if (mic_ack(c, group_names[w->i], items, got.n, res) == 0) {
                int64_t now = mono_us();
                pthread_mutex_lock(&L->ack_lock);
                for (size_t j = 0; j < got.n; j++) {
                    int n = atomic_load(&L->nack);
                    if (res[j].status != MIC_ITEM_ACKED || n >= ACK_MAX)
                        continue;
                    L->acks[n].group = w->i;
                    snprintf(L->acks[n].id, sizeof L->acks[n].id, "%s", got.v[j].event_id);
                    L->acks[n].acked_us = now;
                    atomic_store(&L->nack, n + 1);
                }
                pthread_mutex_unlock(&L->ack_lock);
            }
        }
        mic_claimed_fini(&got);
    }
    mic_client_free(c);
    return NULL;
}

static int load_warm(void *arg)
{
    struct load *L = arg;

    return atomic_load(&L->nacked_pub) >= 300 && atomic_load(&L->nack) >= 100;
}

static int load_after(void *arg)
{
    struct load *L = arg;

    return atomic_load(&L->after_end) >= 2 * PUBLISHERS * 20 ||
           (atomic_load(&L->npub[0]) >= PUB_MAX && atomic_load(&L->npub[1]) >= PUB_MAX);
}

/* The event 'id' on 's': its JSON (new reference) or NULL for a 404. */
static json_t *event_on(const struct srv *s, const char *id)
{
    char path[128];
    struct resp r;
    json_t *j = NULL;

    snprintf(path, sizeof path, "/v1/events/%s", id);
    assert_int_equal(http(s, "GET", path, NULL, NULL, 0, NULL, &r), 0);
    if (r.status == 200)
        j = json_incref(r.json);
    else if (r.status != 404)
        fail_msg("GET %s: %ld %s", path, r.status, r.body);
    resp_free(&r);
    return j;
}

static const char *dlv_state(json_t *ev, const char *group)
{
    json_t *d;
    size_t i;

    json_array_foreach(json_object_get(ev, "deliveries"), i, d)
        if (!strcmp(json_string_value(json_object_get(d, "group")), group))
            return json_string_value(json_object_get(d, "state"));
    return "(none)";
}

static void backup_under_load(void **state)
{
    struct load *L = calloc(1, sizeof *L);
    struct worker_arg pa[PUBLISHERS], ca[2];
    pthread_t pt[PUBLISHERS], ct[2];
    struct srv R = {0};
    char copy[300], vdir[256], *out = NULL, *names, last_received[40] = "";
    mic_client *c;
    uint64_t bytes = 0;
    int64_t t_req, t_end, max_seq = 0;
    long found[2] = {0, 0}, checked_before = 0, checked_after = 0, checked_acks = 0;
    json_t *j;

    (void)state;
    assert_non_null(L);
    pthread_mutex_init(&L->ack_lock, NULL);
    json_decref(adm(&S, "PUT", "/v1/topics/ta", "{}", 201));
    json_decref(adm(&S, "PUT", "/v1/topics/tb", "{}", 201));
    json_decref(adm(&S, "PUT", "/v1/groups/go", "{\"topics\":[\"ta\"],\"ordered\":true}", 201));
    json_decref(adm(&S, "PUT", "/v1/groups/gu", "{\"topics\":[\"ta\",\"tb\"]}", 201));

    for (int i = 0; i < PUBLISHERS; i++) {
        pa[i] = (struct worker_arg){L, i};
        assert_int_equal(pthread_create(&pt[i], NULL, publisher, &pa[i]), 0);
    }
    for (int i = 0; i < 2; i++) {
        ca[i] = (struct worker_arg){L, i};
        assert_int_equal(pthread_create(&ct[i], NULL, claimer, &ca[i]), 0);
    }
    assert_true(await(load_warm, L, 60000));

    /* The backup, while the load runs. */
    new_dir(R.dir, sizeof R.dir);
    snprintf(copy, sizeof copy, "%s/data.mdb", R.dir);
    c = client_for(&S, ADMIN_SECRET);
    t_req = mono_us();
    if (mic_backup_file(c, 0, copy, NULL, NULL, &bytes)) {
        char why[700];
        fail_msg("backup: %s", mic_failure_text(mic_client_failure(c), why, sizeof why));
    }
    t_end = mono_us();
    atomic_store(&L->t_end, t_end);
    mic_client_free(c);
    assert_true(bytes > 0);
    /* Some publishes sent after the last byte, then the load stops. */
    assert_true(await(load_after, L, 60000));
    atomic_store(&L->stop, 1);
    for (int i = 0; i < PUBLISHERS; i++)
        pthread_join(pt[i], NULL);
    for (int i = 0; i < 2; i++)
        pthread_join(ct[i], NULL);

    /* The directory holds the copy alone (no .tmp left). */
    names = dir_names(R.dir);
    assert_string_equal(names, ". .. data.mdb ");
    free(names);

    /* micd --verify on the copy (a copy of it: verify makes its lock file). */
    new_dir(vdir, sizeof vdir);
    {
        char vcopy[300];
        snprintf(vcopy, sizeof vcopy, "%s/data.mdb", vdir);
        copy_file(copy, vcopy);
    }
    assert_int_equal(srv_verify(vdir, &out), 0);
    assert_non_null(out);
    assert_non_null(strstr(out, " 0 bad records"));
    assert_non_null(strstr(out, ": ok"));
    free(out);
    storedir_rm(vdir);

    /* A micd on the copy alone. */
    assert_int_equal(srv_start(&R, NULL), 0);
    for (int i = 0; i < PUBLISHERS; i++)
        for (int k = 0; k < atomic_load(&L->npub[i]); k++) {
            struct pub_rec *p = &L->pubs[i][k];
            int before = p->acked_us && p->acked_us < t_req, after = p->sent_us > t_end;

            j = event_on(&R, p->id);
            if (before && !j)
                fail_msg("%s: acknowledged before the backup was asked for, not in the copy",
                         p->id);
            if (after && j)
                fail_msg("%s: published after the backup's last byte, in the copy", p->id);
            checked_before += before;
            checked_after += after;
            if (j) {
                json_int_t seq = json_integer_value(json_object_get(json_object_get(j, "event"),
                                                                    "seq"));
                const char *rcv = json_string_value(
                    json_object_get(json_object_get(j, "event"), "received_at"));
                found[p->topic]++;
                if (seq > max_seq)
                    max_seq = seq;
                assert_non_null(rcv);
                if (strcmp(rcv, last_received) > 0)
                    snprintf(last_received, sizeof last_received, "%s", rcv);
            }
            json_decref(j);
        }
    assert_true(checked_before >= 300);
    assert_true(checked_after > 0);
    /* Every ack acknowledged before the backup began is dispatched there. */
    for (int n = 0; n < atomic_load(&L->nack); n++) {
        struct ack_rec *a = &L->acks[n];

        if (a->acked_us >= t_req)
            continue;
        j = event_on(&R, a->id);
        assert_non_null(j);
        if (strcmp(dlv_state(j, group_names[a->group]), "dispatched"))
            fail_msg("%s in %s: acked before the backup, %s in the copy", a->id,
                     group_names[a->group], dlv_state(j, group_names[a->group]));
        json_decref(j);
        checked_acks++;
    }
    assert_true(checked_acks >= 100);
    /* Each group's counters add up to the events it covers in the copy. */
    for (int g = 0; g < 2; g++) {
        json_t *st = stats_of(&R, "groups", "group", group_names[g]);
        long covers = g == 0 ? found[0] : found[0] + found[1];
        long sum = jint(st, "pending") + jint(st, "processing") + jint(st, "dlq") +
                   jint(st, "dispatched");

        if (sum != covers)
            fail_msg("group %s: pending+processing+dlq+dispatched = %ld, the copy holds %ld of "
                     "its events", group_names[g], sum, covers);
        assert_true(jint(st, "dispatched") > 0);
        json_decref(st);
    }
    /* The restored micd goes on: seq continues after the copy's last, and
     * its clock (meta "clock", in the copy) after the copy's times. */
    j = call(&R, "POST", "/v1/events",
             "{\"topic\":\"tb\",\"event_id\":\"after-restore\",\"payload\":{}}", 201);
    assert_true(jint(json_array_get(json_object_get(j, "results"), 0), "seq") > max_seq);
    json_decref(j);
    j = call(&R, "GET", "/v1/events/after-restore", NULL, 200);
    assert_true(strcmp(jstr(json_object_get(j, "event"), "received_at"), last_received) >= 0);
    json_decref(j);
    j = call(&R, "POST", "/v1/groups/gu/claim", "{\"max\":5}", 200);
    assert_true(json_array_size(dlvs(j)) > 0);
    json_decref(j);
    print_message("backup of %llu bytes; %ld events acked before it found, %ld sent after it "
                  "absent, %ld acks dispatched\n", (unsigned long long)bytes, checked_before,
                  checked_after, checked_acks);

    assert_int_equal(srv_stop(&R), 0);
    srv_cleanup(&R);
    pthread_mutex_destroy(&L->ack_lock);
    free(L);
}

/* ---- Who may take a backup ---- */

static void backup_needs_admin(void **state)
{
    struct resp r;
    char *log;

    (void)state;
    assert_int_equal(http(&S, "GET", "/v1/backup", NULL, NULL, 0,
                          "Authorization: Bearer " CONSUMER_SECRET, &r), 0);
    assert_int_equal(r.status, 403);
    assert_non_null(r.json);
    assert_string_equal(resp_error_code(&r), "forbidden");
    assert_non_null(strstr(r.body, "/v1/backup"));
    resp_free(&r);
    assert_int_equal(http(&S, "GET", "/v1/backup", NULL, NULL, 0, NULL, &r), 0);
    assert_int_equal(r.status, 401);
    assert_string_equal(resp_error_code(&r), "unauthorized");
    resp_free(&r);
    /* Both refusals and the admin's backups are in the audit log. */
    assert_non_null(log = file_read(audit_path));
    assert_non_null(strstr(log, "\"key_id\":\"worker\",\"remote\":\"127.0.0.1\","
                                "\"method\":\"GET\",\"path\":\"/v1/backup\",\"status\":403"));
    assert_non_null(strstr(log, "\"method\":\"GET\",\"path\":\"/v1/backup\",\"status\":401"));
    free(log);
}

/* ---- A client that leaves mid-stream ---- */

/* Publish about 'mib' MiB of events to topic 'big' of 's' (not in any
 * group). */
static void fill(const struct srv *s, int mib)
{
    static char payload[10 * 1024];
    char *body = malloc(110 * 1024 * 10);
    static int round;

    assert_non_null(body);
    memset(payload, 'x', sizeof payload - 1);
    payload[sizeof payload - 1] = 0;
    {
        struct resp r;

        assert_int_equal(http(s, "PUT", "/v1/topics/big", "application/json", "{}", 2,
                              ADMIN_HDR, &r), 0);
        assert_int_equal(r.status / 100, 2);
        resp_free(&r);
        round++;
    }
    for (int b = 0; b < mib; b++) {
        size_t len = 0;
        len += (size_t)sprintf(body + len, "{\"events\":[");
        for (int i = 0; i < 100; i++)
            len += (size_t)sprintf(body + len, "%s{\"topic\":\"big\",\"event_id\":\"big-%d-%d-%d\","
                                   "\"payload\":{\"s\":\"%s\"}}", i ? "," : "", round, b, i,
                                   payload);
        len += (size_t)sprintf(body + len, "]}");
        json_decref(adm(s, "POST", "/v1/events", body, 201));
    }
    free(body);
}

/* A raw client of GET /v1/backup with a small receive buffer that reads
 * the answer's first 'want' bytes (the status line 200 among them) and
 * then nothing more; returns its socket. */
static int backup_reader(const struct srv *s, size_t want)
{
    struct sockaddr_in sa = {0};
    char req[256], buf[4097];
    size_t got = 0;
    int fd, small = 8192;

    fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small), 0);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)s->port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    snprintf(req, sizeof req, "GET /v1/backup HTTP/1.1\r\nHost: 127.0.0.1\r\n%s\r\n\r\n",
             ADMIN_HDR);
    assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
    while (got < want) {
        ssize_t n = read(fd, buf, sizeof buf - 1);
        assert_true(n > 0);
        buf[n] = 0;
        if (got == 0)
            assert_non_null(strstr(buf, "HTTP/1.1 200"));
        got += (size_t)n;
    }
    return fd;
}

static void client_leaves(void **state)
{
    char *before, *after, *dir;
    double gone0, ok0;
    int fd;
    mic_client *c;
    uint64_t bytes = 0;

    (void)state;
    /* More store than every buffer between the copy and the client holds
     * (the ring, the pipe, libmicrohttpd's, the sockets'): the copy is
     * still running when the client leaves. */
    fill(&S, 24);
    dir = S.dir;
    before = dir_names(dir);
    gone0 = metric(&S, "mic_backups_total{result=\"client_gone\"}");
    ok0 = metric(&S, "mic_backups_total{result=\"ok\"}");
    assert_true(gone0 >= 0 && ok0 >= 0);

    fd = backup_reader(&S, 16384);
    close(fd);

    /* micd serves on; the backup's threads end (its read transaction with
     * its copy), counted as client_gone. */
    json_decref(adm(&S, "POST", "/v1/events",
                    "{\"topic\":\"big\",\"event_id\":\"after-leave\",\"payload\":{}}", 201));
    assert_true(await(backups_idle, &S, 30000));
    assert_true(metric(&S, "mic_backups_total{result=\"client_gone\"}") == gone0 + 1);
    after = dir_names(dir);
    assert_string_equal(before, after); /* no temporary file, ever */
    free(before);
    free(after);

    /* The next backup is whole. */
    {
        char path[300];
        struct srv R = {0};

        new_dir(R.dir, sizeof R.dir);
        snprintf(path, sizeof path, "%s/data.mdb", R.dir);
        c = client_for(&S, ADMIN_SECRET);
        assert_int_equal(mic_backup_file(c, 0, path, NULL, NULL, &bytes), 0);
        mic_client_free(c);
        assert_true(bytes > (uint64_t)20 << 20);
        assert_true(metric(&S, "mic_backups_total{result=\"ok\"}") == ok0 + 1);
        /* and the next one may start at once (no 409): its slot was free
         * before the last byte came */
        {
            int nul = open("/dev/null", O_WRONLY);
            c = client_for(&S, ADMIN_SECRET);
            assert_true(nul >= 0);
            if (mic_backup_fd(c, 0, nul, NULL, NULL, NULL)) {
                char why[700];
                fail_msg("second backup: %s",
                         mic_failure_text(mic_client_failure(c), why, sizeof why));
            }
            mic_client_free(c);
            close(nul);
        }
        assert_true(metric(&S, "mic_backup_bytes_total") >= (double)bytes);
        assert_int_equal(srv_start(&R, NULL), 0);
        json_decref(call(&R, "GET", "/v1/events/after-leave", NULL, 200));
        assert_int_equal(srv_stop(&R), 0);
        srv_cleanup(&R);
    }
}

/* ---- A client that stops reading ---- */

static int backup_stalled(void *arg)
{
    return metric(arg, "mic_backups_total{result=\"stalled\"}") >= 1;
}

/* A client that reads a few KiB of a backup and then stops reading (its
 * socket open, its receive buffer small) against a micd with
 * --backup-stall-timeout 1 (and an idle timeout far longer, so that the
 * stall timeout is what ends it): micd ends the backup, counted stalled
 * and logged; the rest of the body the client can still read ends without
 * the chunked body's last chunk; the copy's read transaction is gone (the
 * backup's threads end, and writes make the map grow again); the next
 * backup is whole. */
static void client_stalls(void **state)
{
    const char *args[] = {"--keys", keys_path, "--backup-stall-timeout", "1",
                          "--idle-timeout", "300", "--map-size", "32M", NULL};
    static const char last_chunk[] = "\r\n0\r\n\r\n";
    struct srv L = {0};
    struct timeval tv = {10, 0};
    char buf[4097], tail[sizeof last_chunk] = "";
    size_t got = 16384, tlen = sizeof last_chunk - 1;
    uint64_t rest = 0, bytes = 0;
    double map0, ok0;
    ssize_t n;
    int fd, grew = 0, nul, mib = 0;
    char *log;
    mic_client *c;

    (void)state;
    assert_int_equal(srv_start(&L, args), 0);
    /* More store than every buffer between the copy and the client. */
    fill(&L, 24);
    map0 = metric(&L, "mic_store_map_size_bytes");
    ok0 = metric(&L, "mic_backups_total{result=\"ok\"}");
    assert_true(map0 > 0 && ok0 >= 0);

    fd = backup_reader(&L, got);

    /* The client reads no more.  micd ends the backup as stalled, and its
     * threads end (the copy's read transaction with them). */
    if (!await(backup_stalled, &L, 20000))
        fail_msg("a backup whose client stopped reading was not ended as stalled within "
                 "20 s (--backup-stall-timeout 1): mic_backups_running %g",
                 metric(&L, "mic_backups_running"));
    assert_true(await(backups_idle, &L, 10000));
    assert_true(metric(&L, "mic_backups_total{result=\"client_gone\"}") == 0);
    assert_true(metric(&L, "mic_backups_total{result=\"failed\"}") == 0);
    assert_non_null(log = file_read(L.logpath));
    assert_non_null(strstr(log, "\"msg\":\"backup ended\",\"result\":\"stalled\""));
    free(log);

    /* What the client can still read ends (EOF or a reset, not the 10 s
     * receive timeout) without the last chunk: never a whole-looking copy. */
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    while ((n = read(fd, buf, sizeof buf - 1)) > 0) {
        rest += (uint64_t)n;
        if ((size_t)n >= tlen) {
            memcpy(tail, buf + n - (ssize_t)tlen, tlen);
        } else {
            memmove(tail, tail + n, tlen - (size_t)n);
            memcpy(tail + tlen - (size_t)n, buf, (size_t)n);
        }
    }
    if (!(n == 0 || (n < 0 && errno == ECONNRESET)))
        fail_msg("the stalled backup's connection did not end: read %zd (%s)", n,
                 n < 0 ? strerror(errno) : "");
    assert_false(rest >= tlen && memcmp(tail, last_chunk, tlen) == 0);
    close(fd);

    /* The store is free: writes that need a bigger map get it. */
    while (mib < 64 && !grew) {
        fill(&L, 1);
        mib++;
        grew = metric(&L, "mic_store_map_size_bytes") > map0;
    }
    if (!grew)
        fail_msg("the map did not grow past %.0f bytes after the stalled backup ended", map0);

    /* The next backup is whole. */
    nul = open("/dev/null", O_WRONLY);
    assert_true(nul >= 0);
    c = client_for(&L, ADMIN_SECRET);
    if (mic_backup_fd(c, 0, nul, NULL, NULL, &bytes)) {
        char why[700];
        fail_msg("backup after the stall: %s",
                 mic_failure_text(mic_client_failure(c), why, sizeof why));
    }
    mic_client_free(c);
    close(nul);
    assert_true(bytes > (uint64_t)24 << 20);
    assert_true(metric(&L, "mic_backups_total{result=\"ok\"}") == ok0 + 1);
    print_message("stalled backup: %zu bytes read, then %llu more once it ended (%s); the map "
                  "grew after %d MiB more; the next backup %llu bytes\n", got,
                  (unsigned long long)rest, n == 0 ? "EOF" : "reset", mib,
                  (unsigned long long)bytes);
    assert_int_equal(srv_stop(&L), 0);
    srv_cleanup(&L);
}

/* A copy slower than its client is no stall: with --backup-rate 20K the
 * connection waits (suspended) about 3.2 s between steps of 64 KiB, longer
 * than the stall timeout of 1 s and the connection's timeout of 2 s, and
 * the backup is whole (counted ok, never stalled).  The bytes, less the
 * first step, take at least bytes / rate: over at most bytes / 64 KiB - 1
 * waits, so one of them at least lasts 64 KiB / rate. */
static void slow_copy_not_stalled(void **state)
{
    const char *args[] = {"--keys", keys_path, "--backup-rate", "20K",
                          "--backup-stall-timeout", "1", NULL};
    struct srv L = {0};
    char *body = malloc(200 * 1024), pad[1501];
    size_t len = 0;
    uint64_t bytes = 0;
    int64_t t0, us;
    int nul;
    mic_client *c;

    (void)state;
    assert_non_null(body);
    memset(pad, 'p', sizeof pad - 1);
    pad[sizeof pad - 1] = 0;
    assert_int_equal(srv_start(&L, args), 0);
    len += (size_t)sprintf(body + len, "{\"events\":[");
    for (int i = 0; i < 80; i++)
        len += (size_t)sprintf(body + len, "%s{\"topic\":\"slow\",\"event_id\":\"slow-%d\","
                               "\"payload\":{\"s\":\"%s\"}}", i ? "," : "", i, pad);
    sprintf(body + len, "]}");
    json_decref(adm(&L, "POST", "/v1/events", body, 201));
    free(body);

    nul = open("/dev/null", O_WRONLY);
    assert_true(nul >= 0);
    c = client_for(&L, ADMIN_SECRET);
    t0 = mono_us();
    if (mic_backup_fd(c, 0, nul, NULL, NULL, &bytes)) {
        char why[700];
        fail_msg("slow backup: %s", mic_failure_text(mic_client_failure(c), why, sizeof why));
    }
    us = mono_us() - t0;
    mic_client_free(c);
    close(nul);
    print_message("slow backup: %llu bytes in %lld ms\n", (unsigned long long)bytes, (long long)(us / 1000));
    assert_true(bytes >= 3 * 65536);
    if ((double)us < (double)(bytes - 65536) / 20480 * 1e6)
        fail_msg("%llu bytes in %lld us: faster than 20 KiB/s", (unsigned long long)bytes,
                 (long long)us);
    assert_true(metric(&L, "mic_backups_total{result=\"ok\"}") == 1);
    assert_true(metric(&L, "mic_backups_total{result=\"stalled\"}") == 0);
    assert_int_equal(srv_stop(&L), 0);
    srv_cleanup(&L);
}

/* ---- --backup-rate ---- */

/* A micd with --backup-rate 1M hands a backup out no faster than that: its
 * bytes, less the pump's last step of 64 KiB, take at least bytes / rate
 * (a floor that load can only raise, never lower), and the copy is whole:
 * a micd started on it holds as many events. */
static void rate_limited(void **state)
{
    const char *args[] = {"--keys", keys_path, "--backup-rate", "1M", NULL};
    struct srv L = {0}, R = {0};
    char path[300];
    uint64_t bytes = 0;
    int64_t t0, us;
    json_int_t events;
    mic_client *c;
    json_t *st;

    (void)state;
    assert_int_equal(srv_start(&L, args), 0);
    fill(&L, 2);
    new_dir(R.dir, sizeof R.dir);
    snprintf(path, sizeof path, "%s/data.mdb", R.dir);
    c = client_for(&L, ADMIN_SECRET);
    t0 = mono_us();
    assert_int_equal(mic_backup_file(c, 0, path, NULL, NULL, &bytes), 0);
    us = mono_us() - t0;
    mic_client_free(c);
    assert_true(bytes > (uint64_t)2 << 20);
    if ((double)us < (double)(bytes - 65536) / (1 << 20) * 1e6)
        fail_msg("%llu bytes in %lld us: faster than 1 MiB/s", (unsigned long long)bytes,
                 (long long)us);
    st = adm(&L, "GET", "/v1/stats", NULL, 200);
    events = json_integer_value(json_object_get(json_object_get(st, "store"), "events"));
    json_decref(st);
    assert_true(events >= 200);
    assert_int_equal(srv_stop(&L), 0);
    srv_cleanup(&L);
    assert_int_equal(srv_start(&R, NULL), 0);
    st = call(&R, "GET", "/v1/stats", NULL, 200);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(st, "store"), "events")),
                     events);
    json_decref(st);
    assert_int_equal(srv_stop(&R), 0);
    srv_cleanup(&R);
}

/* ---- mic backup FILE ---- */

struct cli_run {
    int status;
    char *err;
};

static void run_cli(struct cli_run *r, const char *secret, const char *file)
{
    const char *cli = getenv("MIC_CLI") ? getenv("MIC_CLI") : "build/san/mic";
    char errpath[] = "/tmp/mic-test-backup-err-XXXXXX";
    int efd = mkstemp(errpath), status = 0;
    int64_t end = mono_ms() + 60000;
    pid_t pid, w;

    assert_true(efd >= 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int nul = open("/dev/null", O_RDWR);
        dup2(nul, 0);
        dup2(nul, 1);
        dup2(efd, 2);
        execl(cli, cli, "--url", S.url, "--key", secret, "backup", file, (char *)NULL);
        _exit(127);
    }
    close(efd);
    while ((w = waitpid(pid, &status, WNOHANG)) == 0 && mono_ms() < end) {
        struct timespec ts = {0, 10 * 1000000};
        nanosleep(&ts, NULL);
    }
    if (w == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        fail_msg("%s backup did not end within 60 s", cli);
    }
    r->status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (r->status == 127)
        fail_msg("cannot run %s (set MIC_CLI)", cli);
    r->err = file_read(errpath);
    unlink(errpath);
    assert_non_null(r->err);
}

static void cli_backup(void **state)
{
    struct srv R = {0};
    struct cli_run r;
    char file[300], tmp[310];
    struct stat st;

    (void)state;
    json_decref(adm(&S, "PUT", "/v1/topics/tcli", "{}", 201));
    json_decref(adm(&S, "POST", "/v1/events",
                    "{\"topic\":\"tcli\",\"event_id\":\"cli-1\",\"payload\":{}}", 201));
    new_dir(R.dir, sizeof R.dir);
    snprintf(file, sizeof file, "%s/data.mdb", R.dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", file);

    /* 403: a message, exit 1, no file and no .tmp. */
    run_cli(&r, CONSUMER_SECRET, file);
    if (r.status != 1 || !strstr(r.err, "mic: 403 forbidden"))
        fail_msg("exit %d, stderr: %s", r.status, r.err);
    assert_non_null(strstr(r.err, "no backup written"));
    free(r.err);
    assert_int_equal(stat(file, &st), -1);
    assert_int_equal(stat(tmp, &st), -1);

    /* An admin: the file, a progress line, no .tmp left. */
    run_cli(&r, ADMIN_SECRET, file);
    if (r.status != 0 || strncmp(r.err, "backup: ", 8) || !strstr(r.err, "/s) -> ") ||
        !strstr(r.err, file))
        fail_msg("exit %d, stderr: %s", r.status, r.err);
    assert_int_equal(strchr(r.err, '\n') - r.err + 1, (long)strlen(r.err)); /* one line */
    free(r.err);
    assert_int_equal(stat(file, &st), 0);
    assert_true(st.st_size > 0);
    assert_int_equal(stat(tmp, &st), -1);

    /* A micd starts on it and has the event. */
    assert_int_equal(srv_start(&R, NULL), 0);
    json_decref(call(&R, "GET", "/v1/events/cli-1", NULL, 200));
    assert_int_equal(srv_stop(&R), 0);
    srv_cleanup(&R);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(backup_under_load),
        cmocka_unit_test(backup_needs_admin),
        cmocka_unit_test(client_leaves),
        cmocka_unit_test(client_stalls),
        cmocka_unit_test(slow_copy_not_stalled),
        cmocka_unit_test(cli_backup),
        cmocka_unit_test(rate_limited),
    };

    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
