/* test_fulldisk.c - a real full filesystem (issue 16, T4).
 *
 * micd runs with its store on a small filesystem mounted in a mount
 * namespace of its own (made in the child before micd is executed: the
 * rest of the machine never sees it): a 24 MiB tmpfs, and a 40 MiB ext4
 * image on a loop device.  Publishing past the free space must answer 507
 * storage_full (never 500), while reads, claims, acks, /v1/stats and
 * /readyz (which reports it) keep working; once room is made -- the tmpfs
 * remounted larger, or on ext4 the events removed by retention after they
 * were acked -- publishing works again, in the same process.  On ext4 the
 * store is then opened again by a new micd: every event it held is there
 * and a range read over them all succeeds.  Needs root (CAP_SYS_ADMIN),
 * as make test has, and a loop device for ext4: where the child cannot
 * mount (a container, say), each test fails with one line saying what it
 * needs and which step was refused.  Prints its figures. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <jansson.h>

#include "harness.h"
#include "claimkit.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#define BATCH 20
#define BLOB 2000
#define MAX_BATCHES 4000 /* 160 MB of events: far past either filesystem */

static char image[300]; /* the ext4 image of the ext4 test */

/* The write end of start_on's pipe (O_CLOEXEC: gone once micd is
 * executed), on which a mount hook in the child says why it failed. */
static int why_fd = -1;

/* In the child: a mount step failed.  One line to start_on (and micd's
 * log, the child's stderr) of what the test needs and why it cannot run
 * here; returns -1 (the child exits 126 without starting micd). */
static int cannot_mount(const char *needs, const char *step, const char *why)
{
    char line[700];
    int n = snprintf(line, sizeof line, "test_fulldisk needs %s to mount micd's store on a small "
                     "filesystem in a private mount namespace, and cannot here: %s: %s",
                     needs, step, why);

    if (n > 0 && (size_t)n >= sizeof line)
        n = (int)sizeof line - 1;
    fprintf(stderr, "%s\n", line);
    if (n > 0 && why_fd >= 0 && write(why_fd, line, (size_t)n) != (ssize_t)n)
        fprintf(stderr, "(that line could not be handed to the test: %s)\n", strerror(errno));
    return -1;
}

static int private_ns(void)
{
    if (unshare(CLONE_NEWNS))
        return cannot_mount("CAP_SYS_ADMIN", "unshare(CLONE_NEWNS)", strerror(errno));
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL))
        return cannot_mount("CAP_SYS_ADMIN", "making / private (mount MS_REC|MS_PRIVATE)",
                            strerror(errno));
    return 0;
}

static int mount_tmpfs(struct srv *s)
{
    if (private_ns())
        return -1;
    if (mount("tmpfs", s->dir, "tmpfs", 0, "size=24m,mode=0700"))
        return cannot_mount("CAP_SYS_ADMIN", "mount -t tmpfs -o size=24m", strerror(errno));
    return 0;
}

static int mount_ext4(struct srv *s)
{
    char cmd[700], why[300] = "";
    FILE *m;
    int rc;

    if (private_ns())
        return -1;
    snprintf(cmd, sizeof cmd, "mount -o loop '%s' '%s' 2>&1", image, s->dir);
    if (!(m = popen(cmd, "r")))
        return cannot_mount("CAP_SYS_ADMIN and a loop device", "running mount(8)",
                            strerror(errno));
    if (!fgets(why, sizeof why, m))
        why[0] = 0;
    if ((rc = pclose(m)) != 0) {
        why[strcspn(why, "\n")] = 0;
        if (!why[0])
            snprintf(why, sizeof why, "exit status %d",
                     rc > 0 && WIFEXITED(rc) ? WEXITSTATUS(rc) : -1);
        return cannot_mount("CAP_SYS_ADMIN and a loop device", "mount -o loop (ext4 image)",
                            why);
    }
    return 0;
}

/* Publish batch 'b' of 'n' events of 'blob' payload bytes (events
 * "PREFIX-b-0" ...) to 'topic'; returns the status and copies the error
 * code into 'code'. */
static long publish_to(struct srv *s, const char *topic, const char *prefix, int b, int n,
                       int blob_len, char *code, size_t cap)
{
    size_t len = 0, bcap = (size_t)n * ((size_t)blob_len + 200) + 64;
    char *body = malloc(bcap), *blob = malloc((size_t)blob_len + 1);
    struct resp r;
    long st;

    assert_non_null(body);
    assert_non_null(blob);
    memset(blob, 'x', (size_t)blob_len);
    blob[blob_len] = 0;
    len += (size_t)snprintf(body + len, bcap - len, "{\"events\":[");
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(body + len, bcap - len,
                                "%s{\"event_id\":\"%s-%d-%d\",\"topic\":\"%s\",\"payload\":{\"b\":\"%s\"}}",
                                i ? "," : "", prefix, b, i, topic, blob);
    len += (size_t)snprintf(body + len, bcap - len, "]}");
    assert_int_equal(http(s, "POST", "/v1/events", "application/json", body, len, NULL, &r), 0);
    st = r.status;
    snprintf(code, cap, "%s", resp_error_code(&r));
    resp_free(&r);
    free(blob);
    free(body);
    return st;
}

static long publish_n(struct srv *s, const char *prefix, int b, int n, int blob_len,
                      char *code, size_t cap)
{
    return publish_to(s, "t", prefix, b, n, blob_len, code, cap);
}

static long publish_batch(struct srv *s, const char *prefix, int b, char *code, size_t cap)
{
    return publish_n(s, prefix, b, BATCH, BLOB, code, cap);
}

struct fill {
    int stored_batches, refused;
};

/* Publish until the filesystem is full: every answer is 201 until the
 * first 507 storage_full; five more publishes get 507 as well. */
static void fill_up(struct srv *s, const char *prefix, struct fill *f)
{
    char code[64];
    long st = 0;
    int b;

    for (b = 0; b < MAX_BATCHES; b++) {
        st = publish_batch(s, prefix, b, code, sizeof code);
        if (st != 201)
            break;
    }
    if (st != 507)
        fprintf(stderr, "batch %d: status %ld, code %s\n", b, st, code);
    assert_int_equal(st, 507);
    assert_string_equal(code, "storage_full");
    f->stored_batches = b;
    for (int i = 0; i < 5; i++) {
        assert_int_equal(publish_batch(s, prefix, b + 1 + i, code, sizeof code), 507);
        assert_string_equal(code, "storage_full");
    }
    f->refused = 6;
}

/* What keeps working on a full store: /readyz reports it, reads of an
 * event and of a range, stats, a claim and the ack of what it granted.
 * Returns the number of deliveries claimed and acked. */
static int still_serving(struct srv *s, const char *first_id)
{
    char path[200];
    json_t *r, *c, *a, *items;
    size_t n;

    r = call(s, "GET", "/readyz", NULL, 503);
    assert_non_null(strstr(jstr(r, "reason"), "full"));
    json_decref(r);
    snprintf(path, sizeof path, "/v1/events/%s", first_id);
    r = call(s, "GET", path, NULL, 200);
    assert_string_equal(jstr(json_object_get(r, "event"), "event_id"), first_id);
    json_decref(r);
    r = call(s, "GET", "/v1/topics/t/events?limit=50", NULL, 200);
    assert_int_equal(json_array_size(json_object_get(r, "events")), 50);
    json_decref(r);
    json_decref(call(s, "GET", "/v1/stats", NULL, 200));
    c = call(s, "POST", "/v1/groups/g/claim", "{\"max\":10,\"lease_ttl_s\":60}", 200);
    n = json_array_size(dlvs(c));
    assert_int_equal(n, 10);
    items = items_of(c);
    a = settle(s, "g", "ack", items, NULL);
    for (size_t i = 0; i < n; i++)
        expect_result(a, i, jint(dlv(c, i), "seq"), "acked");
    json_decref(a);
    json_decref(c);
    return (int)n;
}

static int alive(struct srv *s)
{
    return s->pid > 0 && kill(s->pid, 0) == 0;
}

/* Start micd on a new store directory, mounted by 'mount' in the child.
 * When the child cannot mount it, the test fails with the child's line of
 * what it needs (cannot_mount), not a bare status. */
static void start_on(struct srv *s, int (*mount)(struct srv *s))
{
    char why[700];
    ssize_t n;
    int p[2], rc;

    snprintf(s->dir, sizeof s->dir, "/tmp/mic-full-XXXXXX");
    assert_non_null(mkdtemp(s->dir));
    s->before_exec = mount;
    assert_int_equal(pipe2(p, O_CLOEXEC), 0);
    why_fd = p[1];
    rc = srv_start(s, NULL);
    why_fd = -1;
    close(p[1]); /* the child's copy is gone too (exited, or micd executed) */
    n = read(p[0], why, sizeof why - 1);
    close(p[0]);
    if (rc == 0)
        return;
    why[n > 0 ? n : 0] = 0;
    srv_cleanup(s);
    if (mount == mount_ext4)
        unlink(image);
    if (n > 0)
        fail_msg("%s", why);
    fail_msg("micd did not start on its mounted store");
}

static void setup_resources(struct srv *s, const char *topic_body)
{
    json_decref(call(s, "PUT", "/v1/topics/t", topic_body, 201));
    json_decref(call(s, "PUT", "/v1/groups/g", "{\"topics\":[\"t\"]}", 201));
}

/* A 24 MiB tmpfs: full, still serving, remounted at 64 MiB, publishing
 * again without a restart. */
static void tmpfs_full_then_grown(void **state)
{
    struct srv s = {0};
    struct fill f;
    char cmd[400], code[64];
    int acked;
    long st;

    (void)state;
    start_on(&s, mount_tmpfs);
    setup_resources(&s, "{}");
    fill_up(&s, "tm", &f);
    acked = still_serving(&s, "tm-0-0");
    assert_true(alive(&s));

    snprintf(cmd, sizeof cmd, "nsenter -t %d -m mount -o remount,size=64m '%s'", (int)s.pid, s.dir);
    assert_int_equal(system(cmd), 0);
    st = publish_batch(&s, "tm-after", 0, code, sizeof code);
    assert_int_equal(st, 201);
    json_decref(call(&s, "GET", "/v1/events/tm-after-0-0", NULL, 200));
    assert_true(alive(&s));
    printf("tmpfs 24 MiB: %d events stored, then %d publishes answered 507 storage_full; "
           "%d claimed and acked while full; remounted at 64 MiB: publishing again, same process\n",
           f.stored_batches * BATCH, f.refused, acked);
    assert_int_equal(srv_stop(&s), 0);
    srv_cleanup(&s);
}

struct retry {
    struct srv *s;
    int b;
};

static int publishes_again(void *arg)
{
    struct retry *r = arg;
    char code[64];
    long st = publish_batch(r->s, "ex-after", r->b++, code, sizeof code);

    if (st != 201 && st != 507)
        fail_msg("publish while making room: status %ld (%s)", st, code);
    return st == 201;
}

static int only_new_batch_left(void *arg)
{
    json_t *st = stats_of(arg, "topics", "topic", "t");
    int done;

    assert_non_null(st);
    done = jint(st, "events") == BATCH;
    json_decref(st);
    return done;
}

/* Claim and ack everything group g holds; returns how many.  A claim
 * that needs more pages than the full filesystem's store has free gets
 * 507 storage_full, as a publish does: the worker asks for fewer. */
static int drain(struct srv *s, int *refused)
{
    int total = 0, max = 200;

    for (int round = 0; round < 10000; round++) {
        char body[80];
        struct resp r;
        json_t *c, *a;
        size_t n;

        snprintf(body, sizeof body, "{\"max\":%d,\"lease_ttl_s\":60}", max);
        assert_int_equal(http_json(s, "POST", "/v1/groups/g/claim", body, &r), 0);
        if (r.status == 507) {
            assert_string_equal(resp_error_code(&r), "storage_full");
            resp_free(&r);
            (*refused)++;
            if (max > 1)
                max /= 2;
            continue;
        }
        assert_int_equal(r.status, 200);
        c = json_incref(r.json);
        resp_free(&r);
        n = json_array_size(dlvs(c));
        if (n == 0) {
            json_decref(c);
            return total;
        }
        a = settle(s, "g", "ack", items_of(c), NULL);
        for (size_t i = 0; i < n; i++)
            expect_result(a, i, jint(dlv(c, i), "seq"), "acked");
        json_decref(a);
        json_decref(c);
        total += (int)n;
        if (max < 200)
            max *= 2;
    }
    fail_msg("group g not drained in 10000 claims");
    return total;
}

/* A 40 MiB ext4 image: full, still serving; the events acked and removed
 * by retention make the room; then a new micd opens the same store. */
static void ext4_full_then_retention(void **state)
{
    struct srv s = {0};
    struct fill f;
    struct retry rt;
    char cmd[700];
    json_t *st, *r;
    json_int_t events_before;
    int acked, drained, claims_refused = 0;

    (void)state;
    snprintf(image, sizeof image, "/tmp/mic-ext4-XXXXXX");
    {
        int fd = mkstemp(image);
        assert_true(fd >= 0);
        assert_int_equal(ftruncate(fd, 40 << 20), 0);
        close(fd);
    }
    /* -m 0: no blocks reserved for root (micd runs as root here) */
    snprintf(cmd, sizeof cmd, "mkfs.ext4 -q -F -m 0 '%s' > /dev/null 2>&1", image);
    assert_int_equal(system(cmd), 0);
    start_on(&s, mount_ext4);
    setup_resources(&s, "{\"retention_s\":1}");
    fill_up(&s, "ex", &f);
    acked = still_serving(&s, "ex-0-0");

    /* Make room: once acked, retention removes the events (a second
     * after they were received, or when it looks again). */
    drained = drain(&s, &claims_refused);
    rt.s = &s;
    rt.b = 0;
    assert_true(await(publishes_again, &rt, 120000));
    assert_true(alive(&s));
    /* Retention goes on until only the new batch (pending in g) is left. */
    assert_true(await(only_new_batch_left, &s, 120000));
    events_before = BATCH;

    /* Stop, mount the image again in a new namespace, open the store. */
    assert_int_equal(srv_stop(&s), 0);
    assert_int_equal(srv_start(&s, NULL), 0);
    st = stats_of(&s, "topics", "topic", "t");
    assert_non_null(st);
    assert_int_equal(jint(st, "events"), events_before);
    json_decref(st);
    for (int i = 0; i < BATCH; i++) {
        char path[100];
        snprintf(path, sizeof path, "/v1/events/ex-after-%d-%d", rt.b - 1, i);
        json_decref(call(&s, "GET", path, NULL, 200));
    }
    {
        char path[100];
        snprintf(path, sizeof path, "/v1/topics/t/events?limit=1000");
        r = call(&s, "GET", path, NULL, 200);
        assert_int_equal((json_int_t)json_array_size(json_object_get(r, "events")),
                         events_before < 1000 ? events_before : 1000);
        json_decref(r);
    }
    printf("ext4 40 MiB: %d events stored, then %d publishes answered 507 storage_full; "
           "%d claimed and acked while full, %d more drained (%d claims answered 507 and asked for "
           "fewer); retention made room after %d refused retries; reopened by a new micd: "
           "%lld events, all readable\n",
           f.stored_batches * BATCH, f.refused, acked, drained, claims_refused, rt.b - 1,
           (long long)events_before);
    assert_int_equal(srv_stop(&s), 0);
    srv_cleanup(&s);
    unlink(image);
}

static int fill_topic_removed(void *arg)
{
    json_t *st = stats_of(arg, "topics", "topic", "fill");
    int done;

    assert_non_null(st);
    done = jint(st, "events") == 0;
    json_decref(st);
    return done;
}

/* Leave about 'left' bytes free on the filesystem of 'dir' with a ballast
 * file; returns its path's descriptor-free name in 'path'. */
static void ballast(const char *dir, char *path, size_t cap, uint64_t left)
{
    struct statvfs v;
    uint64_t fr;
    int fd;

    assert_int_equal(statvfs(dir, &v), 0);
    fr = (uint64_t)v.f_bavail * v.f_frsize;
    snprintf(path, cap, "%s/ballast", dir);
    assert_true((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600)) >= 0);
    if (fr > left)
        assert_int_equal(posix_fallocate(fd, 0, (off_t)(fr - left)), 0);
    close(fd);
}

/* Issue 29, point 8: a 507 stores nothing.  A batch of 3.5 MB meets a
 * filesystem with about 1 MiB free while data.mdb has free pages enough
 * for it (events removed by retention before): LMDB's commit needs no new
 * space, the batch's journal record does, and there is none.  It is
 * answered 507 and nothing of it is stored -- not once room is made and
 * later commits are flushed, not after a restart; the same batch sent
 * again is then stored (201, not a duplicate).  The tmpfs is mounted in
 * this process's own mount namespace, so that micd restarts on it. */
static void tmpfs_refused_batch_not_stored(void **state)
{
    /* A small journal: each flush switches files (the probe of issue 29
     * saw 5 of 6 such 507s stored). */
    static const char *const args[] = {"--journal-size", "64K", NULL};
    struct srv s = {0};
    char code[64], path[100], refused[100], bal[300];
    long st = 0;
    int n = 700, blob = 5000, b;

    (void)state;
    snprintf(s.dir, sizeof s.dir, "/tmp/mic-full-XXXXXX");
    assert_non_null(mkdtemp(s.dir));
    if (mount_tmpfs(&s)) /* in this process: the line above says why */
        fail_msg("test_fulldisk cannot mount its tmpfs here (see the line above)");
    assert_int_equal(srv_start(&s, args), 0);
    setup_resources(&s, "{}");
    json_decref(call(&s, "PUT", "/v1/topics/fill", "{\"retention_s\":1}", 201));
    /* 6 MB of events in batches smaller than the big one (the journal's
     * files are not written ahead for a record that large), then removed:
     * data.mdb keeps their pages, free. */
    for (int b = 0; b < 12; b++)
        assert_int_equal(publish_to(&s, "fill", "fill", b, 100, blob, code, sizeof code), 201);
    for (int b = 0; b < 3; b++) /* what t already holds, acknowledged */
        assert_int_equal(publish_n(&s, "small", b, 5, 100, code, sizeof code), 201);
    json_decref(call(&s, "PUT", "/v1/topics/fill", "{\"retention_s\":1}", 200));
    assert_true(await(fill_topic_removed, &s, 120000));
    ballast(s.dir, bal, sizeof bal, 1 << 20);
    /* Whether the journal's files had room written ahead for 3.5 MB
     * depends on how earlier commits were grouped: a batch that fits is
     * stored (201, and there); a larger one is sent until one does not. */
    for (b = 0; b < 3; b++) {
        st = publish_n(&s, "big", b, n, blob, code, sizeof code);
        if (st != 201)
            break;
        snprintf(path, sizeof path, "/v1/events/big-%d-%d", b, n - 1);
        json_decref(call(&s, "GET", path, NULL, 200));
        n = 1000;
        blob = b == 0 ? 10000 : 14000;
    }
    assert_int_equal(st, 507);
    assert_string_equal(code, "storage_full");
    snprintf(refused, sizeof refused, "/v1/events/big-%d-0", b);
    json_decref(call(&s, "GET", refused, NULL, 404));
    assert_int_equal(unlink(bal), 0);
    /* More commits, flushed now that there is room: the refused batch
     * is still not there. */
    assert_int_equal(publish_n(&s, "small", 3, 5, 100, code, sizeof code), 201);
    json_decref(call(&s, "GET", refused, NULL, 404));
    assert_int_equal(srv_stop(&s), 0);
    assert_int_equal(srv_start(&s, args), 0);
    json_decref(call(&s, "GET", refused, NULL, 404));
    for (int b = 0; b < 4; b++) {
        snprintf(path, sizeof path, "/v1/events/small-%d-4", b);
        json_decref(call(&s, "GET", path, NULL, 200));
    }
    /* Room for the batch sent again, whatever its size. */
    assert_int_equal(mount("tmpfs", s.dir, "tmpfs", MS_REMOUNT, "size=96m,mode=0700"), 0);
    st = publish_n(&s, "big", b, n, blob, code, sizeof code);
    assert_int_equal(st, 201);
    snprintf(path, sizeof path, "/v1/events/big-%d-%d", b, n - 1);
    json_decref(call(&s, "GET", path, NULL, 200));
    printf("tmpfs 24 MiB with 1 MiB left, a batch of %d events of %d bytes into free pages: "
           "507, not stored (nor after more commits and a restart); sent again: %ld\n",
           n, blob, st);
    assert_int_equal(srv_stop(&s), 0);
    assert_int_equal(umount2(s.dir, MNT_DETACH), 0);
    srv_cleanup(&s);
}

/* A new store on a filesystem with no room: micd exits 3 and its log says
 * why. */
static void full_before_first_commit(void **state)
{
    struct srv s = {0};
    char bal[300], *log;
    int rc;

    (void)state;
    snprintf(s.dir, sizeof s.dir, "/tmp/mic-full-XXXXXX");
    assert_non_null(mkdtemp(s.dir));
    if (mount_tmpfs(&s)) /* in this process: the line above says why */
        fail_msg("test_fulldisk cannot mount its tmpfs here (see the line above)");
    ballast(s.dir, bal, sizeof bal, 0);
    rc = srv_run_expect_exit(&s, NULL);
    assert_non_null(log = file_read(s.logpath));
    if (rc != 3)
        fail_msg("micd on a full filesystem: exit %d (want 3): %s", rc, log);
    if (!strstr(log, "cannot open store"))
        fail_msg("micd exited 3 on a full filesystem without saying why: %s", log);
    free(log);
    assert_int_equal(unlink(bal), 0);
    assert_int_equal(umount2(s.dir, MNT_DETACH), 0);
    srv_cleanup(&s);
}

/* Batches of 2.5 MB (a journal record larger than the room micd keeps
 * written ahead): once one does not fit it is answered 507 and, since a
 * 507 stores nothing, sent again once room is made it is stored (201);
 * every batch acknowledged before is there. */
static void tmpfs_big_batches(void **state)
{
    struct srv s = {0};
    char cmd[400], code[64], path[100];
    long st = 0;
    int b, n = 500, blob = 5000;

    (void)state;
    start_on(&s, mount_tmpfs);
    setup_resources(&s, "{}");
    for (b = 0; b < 100; b++) {
        st = publish_n(&s, "big", b, n, blob, code, sizeof code);
        if (st != 201)
            break;
    }
    assert_int_equal(st, 507);
    assert_string_equal(code, "storage_full");
    assert_true(alive(&s));
    snprintf(path, sizeof path, "/v1/events/big-%d-0", b);
    json_decref(call(&s, "GET", path, NULL, 404));
    snprintf(cmd, sizeof cmd, "nsenter -t %d -m mount -o remount,size=96m '%s'", (int)s.pid, s.dir);
    assert_int_equal(system(cmd), 0);
    st = publish_n(&s, "big", b, n, blob, code, sizeof code);
    assert_int_equal(st, 201);
    for (int i = 0; i <= b; i++) {
        snprintf(path, sizeof path, "/v1/events/big-%d-%d", i, n - 1);
        json_decref(call(&s, "GET", path, NULL, 200));
    }
    printf("tmpfs 24 MiB, batches of %d events of %d bytes: %d stored, the next answered 507 "
           "and was not stored; after the remount, the same batch answered %ld\n", n, blob, b, st);
    assert_int_equal(srv_stop(&s), 0);
    srv_cleanup(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tmpfs_full_then_grown),
        cmocka_unit_test(ext4_full_then_retention),
        cmocka_unit_test(tmpfs_big_batches),
        cmocka_unit_test(tmpfs_refused_batch_not_stored),
        cmocka_unit_test(full_before_first_commit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
