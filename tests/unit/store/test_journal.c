/* test_journal.c - the store journal (server/store/journal.h) against power
 * losses made on purpose.
 *
 * A child process opens a journaled store with small journal files (so
 * that files switch and checkpoints run), writes a deterministic series of
 * transactions (log records appended, some large enough for overflow
 * pages; event ids put, overwritten and deleted at random), syncs after
 * some of them, and records through the journal's test hooks every byte
 * it wrote to data.mdb, every checkpoint and every sync that returned.
 * Then it dies: after its last commit, in the middle of a journal write
 * (between the write and its fdatasync), or after commits it never synced.
 *
 * The parent builds what a disk could hold after a power loss at that
 * moment: data.mdb as it was when the store opened, plus every write a
 * finished checkpoint covered, plus a random subset of the later writes,
 * some of them torn at a 512-byte boundary; the journal's interrupted
 * write torn as well.  It opens the store (the journal replays) and checks
 * that the store holds exactly the state after some commit between the
 * last acknowledged one and the last one made: nothing acknowledged is
 * lost, nothing is half applied. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/crc32c.h"
#include "core/err.h"
#include "store/journal.h"
#include "procfx.h"
#include "store/store.h"
#include "store/log.h"
#include "store/verify.h"
#include "storedir.h"

#define KiB 1024ull
#define MiB (1024ull * KiB)
#define NIDS 400
#define NCOLD 300
#define MAXSEQ 20000

enum { EV_DATA = 1, EV_CK0, EV_CK1, EV_WRITTEN, EV_ACK };

/* ---- The workload: the same for the child and the parent's model ---- */

static uint64_t rng_state;

static uint32_t rnd(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

/* The model: which log seqs exist (with the step that wrote them) and
 * which event ids map to which value. */
struct model {
    uint64_t next_seq;
    uint32_t ids[NIDS];        /* 0 = absent, else the value written */
    uint32_t cold[NCOLD];      /* ids written at step 1 and at cold_step */
};

/* The step that rewrites the cold ids (0: none), and the steps after it
 * that append many log records: pages the cold ids used at step 1, long
 * out of the journal, are then freed and handed out again. */
static int cold_step;

static size_t log_json(uint64_t seq, char *buf, size_t cap)
{
    /* Most records are small; one in 16 spans several pages. */
    size_t len = (seq % 16 == 0) ? 5000 + seq % 3000 : 40 + seq % 200;
    if (len >= cap)
        len = cap - 1;
    for (size_t i = 0; i < len; i++)
        buf[i] = (char)('a' + (seq * 31 + i * 7) % 26);
    buf[len] = 0;
    return len;
}

/* Step 'step' against 'm'; with a transaction, also write it. */
static int run_step(struct model *m, int step, mic_txn *t)
{
    static char json[9000];
    int nlog, nid, rc;

    rng_state = (uint64_t)step * 0x9E3779B97F4A7C15ull + 12345;
    nlog = (int)(rnd() % (step % 23 == 0 ? 300 : 12));
    nid = (int)(rnd() % 30);
    if (cold_step && step > cold_step)
        nlog = 150;
    if (step == 1 || step == cold_step)
        for (int k = 0; k < NCOLD; k++) {
            char id[24];
            uint8_t dg[MIC_DIGEST_LEN];
            snprintf(id, sizeof id, "cold-%d", k);
            m->cold[k] = (uint32_t)step * 1000 + (uint32_t)k;
            memset(dg, (int)(m->cold[k] & 0xff), sizeof dg);
            if (t && (rc = mic_store_id_put(t, id, strlen(id), m->cold[k], dg)))
                return rc;
        }
    for (int i = 0; i < nlog && m->next_seq < MAXSEQ; i++) {
        struct mic_rec r;
        memset(&r, 0, sizeof r);
        r.seq = m->next_seq++;
        r.topic_id = 1;
        r.created_at_us = (int64_t)r.seq;
        r.json = json;
        r.json_len = log_json(r.seq, json, sizeof json);
        if (t && (rc = mic_store_log_put(t, &r)))
            return rc;
    }
    for (int i = 0; i < nid; i++) {
        uint32_t k = rnd() % NIDS, op = rnd() % 4;
        char id[24];
        uint8_t dg[MIC_DIGEST_LEN];
        snprintf(id, sizeof id, "id-%u", k);
        if (op == 0 && m->ids[k]) {
            m->ids[k] = 0;
            if (t && (rc = mic_store_id_del(t, id, strlen(id))))
                return rc;
        } else if (op != 0) {
            m->ids[k] = (uint32_t)step * 8 + op;
            memset(dg, (int)(m->ids[k] & 0xff), sizeof dg);
            if (t && (rc = mic_store_id_put(t, id, strlen(id), m->ids[k], dg)))
                return rc;
        }
    }
    return MIC_OK;
}

/* ---- The child ---- */

static int ev_fd = -1;
static pthread_mutex_t ev_lock = PTHREAD_MUTEX_INITIALIZER;
static int die_in_flush;

static void ev_write(int type, uint64_t a, uint64_t b, const void *data, size_t len)
{
    unsigned char h[24];

    memcpy(h, &type, 4);
    memcpy(h + 4, &a, 8);
    memcpy(h + 12, &b, 8);
    memcpy(h + 20, &len, 4);
    pthread_mutex_lock(&ev_lock);
    if (write(ev_fd, h, sizeof h) != (ssize_t)sizeof h ||
        (len && write(ev_fd, data, len) != (ssize_t)len))
        _exit(3);
    pthread_mutex_unlock(&ev_lock);
}

static void on_data(off_t off, const void *buf, size_t len)
{
    ev_write(EV_DATA, (uint64_t)off, 0, buf, len);
}

static void on_checkpoint(int phase)
{
    ev_write(phase ? EV_CK1 : EV_CK0, 0, 0, NULL, 0);
}

static void on_written(int file, off_t off, size_t len)
{
    ev_write(EV_WRITTEN, (uint64_t)file, (uint64_t)off, &len, sizeof len);
    if (die_in_flush)
        _exit(0);
}

static int copy_file(const char *from, const char *to)
{
    char buf[65536];
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ssize_t n;

    if (in < 0 || out < 0)
        return -1;
    while ((n = read(in, buf, sizeof buf)) > 0)
        if (write(out, buf, (size_t)n) != n)
            return -1;
    close(in);
    close(out);
    return (int)n;
}

static void child(const char *dir, int steps, int die_mode, uint64_t seed)
{
    char path[400], snap[400];
    struct mic_jnl_hooks h = {.on_data = on_data, .on_checkpoint = on_checkpoint, .on_written = on_written};
    static struct model m;
    mic_store *s;

    memset(&m, 0, sizeof m);
    m.next_seq = 1;
    mic_store_set_journal_size(96 * KiB);
    if (mic_store_open(&s, dir, 64 * MiB, 64 * MiB, 0))
        _exit(2);
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    snprintf(snap, sizeof snap, "%s/snap", dir);
    if (copy_file(path, snap))
        _exit(2);
    snprintf(path, sizeof path, "%s/events", dir);
    if ((ev_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600)) < 0)
        _exit(2);
    mic_jnl_set_hooks(&h);
    rng_state = seed;
    for (int step = 1; step <= steps; step++) {
        mic_txn *t;
        uint64_t keep = seed * 7919 + (uint64_t)step;
        if (mic_txn_begin(s, 1, &t) || run_step(&m, step, t) || mic_txn_commit(t))
            _exit(2);
        ev_write(EV_ACK, (uint64_t)step, 0, NULL, 0); /* committed, not yet durable */
        if (step == steps && die_mode == 1)
            die_in_flush = 1;
        if (die_mode == 2 && step >= cold_step)
            continue; /* the last commits are never synced here */
        if (keep % 3 != 0 || step == steps) {
            if (mic_store_sync(s))
                _exit(2);
            ev_write(EV_ACK, (uint64_t)step, 1, NULL, 0);
        }
    }
    _exit(0); /* a crash: no close, nothing more synced */
}

/* ---- The parent: a disk after a power loss ---- */

struct ev {
    int type;
    uint64_t a, b;
    size_t len;
    unsigned char *data;
};

static struct ev *read_events(const char *path, int *n)
{
    FILE *f = fopen(path, "rb");
    struct ev *v = NULL;
    int cap = 0;
    unsigned char h[24];

    *n = 0;
    assert_non_null(f);
    while (fread(h, 1, sizeof h, f) == sizeof h) {
        struct ev e;
        uint32_t len = 0;
        memcpy(&e.type, h, 4);
        memcpy(&e.a, h + 4, 8);
        memcpy(&e.b, h + 12, 8);
        memcpy(&len, h + 20, 4);
        e.len = len;
        e.data = len ? malloc(len) : NULL;
        if (len)
            assert_int_equal(fread(e.data, 1, len, f), len);
        if (*n == cap) {
            cap = cap ? cap * 2 : 1024;
            v = realloc(v, (size_t)cap * sizeof *v);
            assert_non_null(v);
        }
        v[(*n)++] = e;
    }
    fclose(f);
    return v;
}

/* Write what a power loss leaves of 'e' (a data write): all of it, none,
 * or its first sectors. */
static void maybe_apply(int fd, const struct ev *e, int durable)
{
    size_t len = e->len;

    if (!durable) {
        uint32_t r = rnd() % 4;
        if (r == 0)
            return;
        if (r == 1 && len > 512)
            len = 512 * (1 + rnd() % (uint32_t)(len / 512));
    }
    assert_int_equal(pwrite(fd, e->data, len, (off_t)e->a), (ssize_t)len);
}

/* Nonzero if ids PREFIX-0 .. PREFIX-(n-1) hold exactly 'want' (0: absent;
 * else the value, also in the digest's first byte). */
static int ids_match(mic_txn *t, const char *prefix, const uint32_t *want, int n)
{
    for (int k = 0; k < n; k++) {
        char id[24];
        uint64_t seq;
        uint8_t dg[MIC_DIGEST_LEN];
        int rc;
        snprintf(id, sizeof id, "%s-%d", prefix, k);
        rc = mic_store_id_get(t, id, strlen(id), &seq, dg);
        if (want[k] ? rc != MIC_OK || seq != want[k] || dg[0] != (want[k] & 0xff)
                    : rc != MIC_ENOTFOUND)
            return 0;
    }
    return 1;
}

static int compare(mic_store *s, const struct model *m, int *why)
{
    static char json[9000];
    mic_txn *t;
    uint64_t n;
    int rc = 1;

    assert_int_equal(mic_txn_begin(s, 0, &t), MIC_OK);
    assert_int_equal(mic_store_log_count(t, &n), MIC_OK);
    if (n != m->next_seq - 1) {
        *why = 1;
        goto out;
    }
    for (uint64_t seq = 1; seq < m->next_seq; seq++) {
        struct mic_rec r;
        size_t len = log_json(seq, json, sizeof json);
        if (mic_store_log_get(t, seq, &r) || r.json_len != len || memcmp(r.json, json, len)) {
            *why = 2;
            goto out;
        }
    }
    if (!ids_match(t, "id", m->ids, NIDS) || !ids_match(t, "cold", m->cold, NCOLD)) {
        *why = 3;
        goto out;
    }
    rc = 0;
out:
    mic_txn_abort(t);
    return rc;
}

static void power_loss_round(int round, int die_mode)
{
    char dir[64], path[400], snap[400];
    int status, nev, fd, acked = 0, committed = 0, matched = -1, why = 0;
    uint64_t replayed, next;
    int steps = 40 + round % 50, lockfd;
    struct ev *ev;
    static struct model m;
    mic_store *s;
    pid_t pid;

    snprintf(dir, sizeof dir, "/tmp/mic-test-journal-XXXXXX");
    assert_non_null(mkdtemp(dir));
    cold_step = die_mode == 2 ? steps - 6 : 0;
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        child(dir, steps, die_mode, (uint64_t)round);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);

    /* The disk: the snapshot, then the writes as a power loss leaves them. */
    snprintf(path, sizeof path, "%s/events", dir);
    ev = read_events(path, &nev);
    snprintf(snap, sizeof snap, "%s/snap", dir);
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    assert_int_equal(rename(snap, path), 0);
    fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    rng_state = (uint64_t)round * 104729 + 7;
    {
        int ck0 = -1, done_upto = 0; /* writes before index done_upto are durable */
        for (int i = 0; i < nev; i++) {
            if (ev[i].type == EV_CK0)
                ck0 = i;
            else if (ev[i].type == EV_CK1 && ck0 >= 0)
                done_upto = ck0;
        }
        for (int i = 0; i < nev; i++) {
            if (ev[i].type == EV_DATA)
                maybe_apply(fd, &ev[i], i < done_upto);
            else if (ev[i].type == EV_ACK && ev[i].b == 1)
                acked = (int)ev[i].a;
            else if (ev[i].type == EV_ACK)
                committed = (int)ev[i].a;
            else if (ev[i].type == EV_WRITTEN && die_mode == 1 && i == nev - 1) {
                /* The interrupted journal write: keep a prefix of it. */
                int jf;
                size_t len, keep;
                char jp[400];
                memcpy(&len, ev[i].data, sizeof len);
                keep = 512 * (rnd() % (uint32_t)(len / 512 + 1));
                snprintf(jp, sizeof jp, "%s/journal-%d", dir, (int)ev[i].a);
                jf = open(jp, O_RDWR);
                assert_true(jf >= 0);
                for (size_t at = keep; at < len; at += 512) {
                    static const char zeros[512];
                    size_t n = len - at < 512 ? len - at : 512;
                    assert_int_equal(pwrite(jf, zeros, n, (off_t)(ev[i].b + at)), (ssize_t)n);
                }
                close(jf);
            }
        }
    }
    close(fd);
    for (int i = 0; i < nev; i++)
        free(ev[i].data);
    free(ev);
    assert_true(committed >= acked);

    /* The journal replays; the store must be one of the states from the
     * last acknowledged commit on. */
    assert_int_equal(mic_jnl_recover(dir, &lockfd, &next, &replayed), MIC_OK);
    close(lockfd);
    assert_int_equal(mic_store_open(&s, dir, 64 * MiB, 64 * MiB, 1), MIC_OK);
    memset(&m, 0, sizeof m);
    m.next_seq = 1;
    for (int step = 1; step <= committed; step++) {
        assert_int_equal(run_step(&m, step, NULL), MIC_OK);
        if (step >= acked && matched < 0 && compare(s, &m, &why) == 0)
            matched = step;
    }
    if (acked == 0 && matched < 0) {
        memset(&m, 0, sizeof m);
        m.next_seq = 1;
        if (compare(s, &m, &why) == 0)
            matched = 0;
    }
    if (matched < 0)
        fail_msg("round %d (die mode %d): the store after the power loss is no state between "
                 "commit %d (acknowledged) and %d (last made); first difference: %s",
                 round, die_mode, acked, committed,
                 why == 1 ? "log record count" : why == 2 ? "a log record" : "an event id");
    mic_store_close(s);
    snprintf(path, sizeof path, "%s/events", dir);
    unlink(path);
    storedir_rm(dir);
}

/* The child dies after its last commit (synced or not). */
static void power_loss_after_commit(void **state)
{
    (void)state;
    for (int round = 0; round < 24; round++)
        power_loss_round(round, 0);
}

/* The child dies between the journal's write and its fdatasync. */
static void power_loss_in_journal_write(void **state)
{
    (void)state;
    for (int round = 100; round < 124; round++)
        power_loss_round(round, 1);
}

/* The child dies after seven commits it never synced, the first of them
 * rewriting ids last written at step 1 and the others appending enough to
 * take the pages that freed: the store must not be behind the last sync,
 * and the commits after it (made while the journal lagged) must not have
 * damaged it. */
static void power_loss_with_commits_ahead(void **state)
{
    (void)state;
    for (int round = 200; round < 224; round++)
        power_loss_round(round, 2);
}

/* ---- The lock, the clean close, rotation ---- */

static void one_process_at_a_time(void **state)
{
    char dir[64];
    mic_store *s, *s2;
    int st;
    pid_t pid;

    (void)state;
    snprintf(dir, sizeof dir, "/tmp/mic-test-journal-XXXXXX");
    assert_non_null(mkdtemp(dir));
    assert_int_equal(mic_store_open(&s, dir, 4 * MiB, 4 * MiB, 0), MIC_OK);
    pid = fork();
    if (pid == 0)
        _exit(mic_store_open(&s2, dir, 4 * MiB, 4 * MiB, 0) == MIC_EBUSY ? 0 : 1);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    mic_store_close(s);
    storedir_rm(dir);
}

/* Many commits through small journal files: the files switch, the
 * checkpoints free them, they stay bounded; a clean close leaves nothing
 * to replay, and everything is there after reopening. */
static void files_switch_and_stay_bounded(void **state)
{
    char dir[64], path[400];
    static struct model m;
    struct mic_jnl_stats st;
    struct stat sb;
    uint64_t next, replayed;
    mic_store *s;
    int why = 0, lockfd;

    (void)state;
    snprintf(dir, sizeof dir, "/tmp/mic-test-journal-XXXXXX");
    assert_non_null(mkdtemp(dir));
    mic_store_set_journal_size(128 * KiB);
    assert_int_equal(mic_store_open(&s, dir, 64 * MiB, 64 * MiB, 0), MIC_OK);
    cold_step = 0;
    memset(&m, 0, sizeof m);
    m.next_seq = 1;
    for (int step = 1; step <= 300; step++) {
        mic_txn *t;
        assert_int_equal(mic_txn_begin(s, 1, &t), MIC_OK);
        assert_int_equal(run_step(&m, step, t), MIC_OK);
        assert_int_equal(mic_txn_commit(t), MIC_OK);
        assert_int_equal(mic_store_sync(s), MIC_OK);
    }
    assert_int_equal(mic_store_journal_stats(s, &st), MIC_OK);
    assert_true(st.records >= 200); /* steps that wrote nothing have no record */
    assert_true(st.rotations >= 4);
    assert_true(st.checkpoints >= 1);
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/journal-%d", dir, i);
        assert_int_equal(stat(path, &sb), 0);
        /* the switch size plus what one late checkpoint let through */
        assert_true((uint64_t)sb.st_size <= 8 * MiB);
    }
    mic_store_close(s);
    assert_int_equal(mic_jnl_recover(dir, &lockfd, &next, &replayed), MIC_OK);
    close(lockfd);
    assert_int_equal(replayed, 0);
    assert_true(next > st.records);
    assert_int_equal(mic_store_open(&s, dir, 64 * MiB, 64 * MiB, 0), MIC_OK);
    assert_int_equal(compare(s, &m, &why), 0);
    mic_store_close(s);
    mic_store_set_journal_size(64 * MiB);
    storedir_rm(dir);
}

/* A store opened without fsync empties the journal first, so that a later
 * journaled open cannot replay old records over its writes. */
/* A branch or leaf page is journaled without the unused middle between
 * its node pointers and its nodes: small commits to a young store, whose
 * pages are mostly empty, journal far fewer bytes than they write to
 * data.mdb; the store reopens from the journal alone all the same (the
 * power-loss tests above replay such records over torn pages). */
static uint64_t data_bytes;

static void count_data(off_t off, const void *buf, size_t len)
{
    (void)off, (void)buf;
    data_bytes += len;
}

static void pages_go_without_their_gap(void **state)
{
    char dir[64];
    static struct model m;
    struct mic_jnl_stats st;
    struct mic_jnl_hooks h = {.on_data = count_data};
    mic_store *s;
    int why = 0;

    (void)state;
    snprintf(dir, sizeof dir, "/tmp/mic-test-journal-XXXXXX");
    assert_non_null(mkdtemp(dir));
    assert_int_equal(mic_store_open(&s, dir, 64 * MiB, 64 * MiB, 0), MIC_OK);
    cold_step = 0;
    memset(&m, 0, sizeof m);
    m.next_seq = 1;
    data_bytes = 0;
    mic_jnl_set_hooks(&h);
    for (int step = 1; step <= 20; step++) {
        mic_txn *t;
        assert_int_equal(mic_txn_begin(s, 1, &t), MIC_OK);
        assert_int_equal(run_step(&m, step, t), MIC_OK);
        assert_int_equal(mic_txn_commit(t), MIC_OK);
        assert_int_equal(mic_store_sync(s), MIC_OK);
    }
    mic_jnl_set_hooks(NULL);
    assert_int_equal(mic_store_journal_stats(s, &st), MIC_OK);
    assert_true(st.records >= 10);
    /* Headers and padding included, still well under half. */
    assert_true(data_bytes > 0);
    assert_true(st.bytes * 2 < data_bytes);
    mic_store_close(s);
    assert_int_equal(mic_store_open(&s, dir, 64 * MiB, 64 * MiB, 0), MIC_OK);
    assert_int_equal(compare(s, &m, &why), 0);
    mic_store_close(s);
    storedir_rm(dir);
}

static void nosync_open_empties_the_journal(void **state)
{
    char dir[64], path[400];
    struct stat sb;
    mic_store *s;
    mic_txn *t;
    uint64_t seq;
    uint8_t dg[MIC_DIGEST_LEN] = {0};

    (void)state;
    snprintf(dir, sizeof dir, "/tmp/mic-test-journal-XXXXXX");
    assert_non_null(mkdtemp(dir));
    assert_int_equal(mic_store_open(&s, dir, 4 * MiB, 4 * MiB, 0), MIC_OK);
    assert_int_equal(mic_txn_begin(s, 1, &t), MIC_OK);
    assert_int_equal(mic_store_id_put(t, "a", 1, 1, dg), MIC_OK);
    assert_int_equal(mic_txn_commit(t), MIC_OK);
    assert_int_equal(mic_store_sync(s), MIC_OK);
    mic_store_close(s);
    assert_int_equal(mic_store_open(&s, dir, 4 * MiB, 4 * MiB, 1), MIC_OK);
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/journal-%d", dir, i);
        assert_true(stat(path, &sb) != 0 || sb.st_size == 0);
    }
    assert_int_equal(mic_txn_begin(s, 1, &t), MIC_OK);
    assert_int_equal(mic_store_id_put(t, "a", 1, 2, dg), MIC_OK);
    assert_int_equal(mic_txn_commit(t), MIC_OK);
    mic_store_close(s);
    assert_int_equal(mic_store_open(&s, dir, 4 * MiB, 4 * MiB, 0), MIC_OK);
    assert_int_equal(mic_txn_begin(s, 0, &t), MIC_OK);
    assert_int_equal(mic_store_id_get(t, "a", 1, &seq, dg), MIC_OK);
    assert_int_equal(seq, 2);
    mic_txn_abort(t);
    mic_store_close(s);
    storedir_rm(dir);
}

/* A failed journal fdatasync is sticky: that sync answers MIC_EIO, and so
 * do every later sync and write transaction; the next open replays what
 * was durable (not the commit whose sync failed... which may or may not
 * have reached the disk: it was never acknowledged). */
static int fail_sync(void)
{
    return EIO;
}

static void failed_sync_is_sticky(void **state)
{
    char dir[64];
    struct mic_jnl_hooks h = {0};
    mic_store *s;
    mic_txn *t;
    uint64_t seq;
    uint8_t dg[MIC_DIGEST_LEN] = {0};

    (void)state;
    snprintf(dir, sizeof dir, "/tmp/mic-test-journal-XXXXXX");
    assert_non_null(mkdtemp(dir));
    assert_int_equal(mic_store_open(&s, dir, 4 * MiB, 4 * MiB, 0), MIC_OK);
    assert_int_equal(mic_txn_begin(s, 1, &t), MIC_OK);
    assert_int_equal(mic_store_id_put(t, "a", 1, 1, dg), MIC_OK);
    assert_int_equal(mic_txn_commit(t), MIC_OK);
    assert_int_equal(mic_store_sync(s), MIC_OK);
    assert_int_equal(mic_txn_begin(s, 1, &t), MIC_OK);
    assert_int_equal(mic_store_id_put(t, "b", 1, 2, dg), MIC_OK);
    assert_int_equal(mic_txn_commit(t), MIC_OK);
    h.fail_sync = fail_sync;
    mic_jnl_set_hooks(&h);
    assert_int_equal(mic_store_sync(s), MIC_EIO);
    mic_jnl_set_hooks(NULL);
    assert_int_equal(mic_store_sync(s), MIC_EIO);
    assert_int_equal(mic_txn_begin(s, 1, &t), MIC_EIO);
    mic_store_close(s);
    assert_int_equal(mic_store_open(&s, dir, 4 * MiB, 4 * MiB, 0), MIC_OK);
    assert_int_equal(mic_txn_begin(s, 0, &t), MIC_OK);
    assert_int_equal(mic_store_id_get(t, "a", 1, &seq, dg), MIC_OK);
    assert_int_equal(seq, 1);
    mic_txn_abort(t);
    mic_store_close(s);
    storedir_rm(dir);
}

/* ---- A full filesystem at a switch, uncaptured commits, bad records ---- */

static int no_room(int file)
{
    (void)file;
    return ENOSPC;
}

static void put_id(mic_store *s, const char *id, uint64_t v, int *commit_rc, int *sync_rc)
{
    uint8_t dg[MIC_DIGEST_LEN] = {0};
    mic_txn *t;

    assert_int_equal(mic_txn_begin(s, 1, &t), MIC_OK);
    assert_int_equal(mic_store_id_put(t, id, strlen(id), v, dg), MIC_OK);
    *commit_rc = mic_txn_commit(t);
    *sync_rc = *commit_rc ? *commit_rc : mic_store_sync(s);
}

/* Put log record 'seq', 8000 bytes of 'b'. */
static int put_big_log(mic_txn *t, uint64_t seq)
{
    static char json[8001];
    struct mic_rec r;

    memset(json, 'b', sizeof json - 1);
    memset(&r, 0, sizeof r);
    r.seq = seq;
    r.topic_id = 1;
    r.created_at_us = (int64_t)seq;
    r.json = json;
    r.json_len = sizeof json - 1;
    return mic_store_log_put(t, &r);
}

/* A commit of 'n' log records of 8000 bytes and the id 'id', synced;
 * with 'full', while the filesystem has no room for the journal to write
 * ahead.  Returns 1 when it was refused (in its commit or its sync). */
static int commit_logs(mic_store *s, const char *id, int n, int full)
{
    struct mic_jnl_hooks h = {.no_room = no_room};
    uint8_t dg[MIC_DIGEST_LEN] = {0};
    mic_txn *t;
    uint64_t seq;
    int rc;

    if (full)
        mic_jnl_set_hooks(&h);
    assert_int_equal(mic_txn_begin(s, 1, &t), MIC_OK);
    assert_int_equal(mic_store_last_seq(t, &seq), MIC_OK);
    for (int i = 0; i < n; i++)
        assert_int_equal(put_big_log(t, ++seq), MIC_OK);
    assert_int_equal(mic_store_id_put(t, id, strlen(id), 1, dg), MIC_OK);
    rc = mic_txn_commit(t);
    if (rc == MIC_OK)
        rc = mic_store_sync(s);
    mic_jnl_set_hooks(NULL);
    return rc != MIC_OK;
}

static int id_present(mic_store *s, const char *id)
{
    uint8_t dg[MIC_DIGEST_LEN];
    mic_txn *t;
    uint64_t seq;
    int rc;

    assert_int_equal(mic_txn_begin(s, 0, &t), MIC_OK);
    rc = mic_store_id_get(t, id, strlen(id), &seq, dg);
    mic_txn_abort(t);
    assert_true(rc == MIC_OK || rc == MIC_ENOTFOUND);
    return rc == MIC_OK;
}

static void check_verify(const char *dir)
{
    struct mic_verify_report rep;
    FILE *out = fopen("/dev/null", "w");

    assert_non_null(out);
    assert_int_equal(mic_store_verify(dir, out, &rep), MIC_OK);
    fclose(out);
}

/* Issue 29, point 1: a switch of journal files meets a full filesystem
 * (the big commit below, about 3.2 MB, takes journal-0 past its 4 MiB
 * and journal-1 has only 2 MiB written ahead); room is made again, 20
 * commits are acknowledged, and the process dies.  Every acknowledged
 * commit must be there after the replay; the big one must be there if it
 * was acknowledged (journal-0 had the room) and absent if it was refused
 * (point 8). */
static void switch_on_full_disk_keeps_acknowledged(void **state)
{
    char dir[64];
    mic_store *s;
    pid_t pid;
    int status;

    (void)state;
    snprintf(dir, sizeof dir, "/tmp/mic-test-journal-XXXXXX");
    assert_non_null(mkdtemp(dir));
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int c, y;
        char id[32];
        int refused;
        mic_store_set_journal_size(4 * MiB);
        if (mic_store_open(&s, dir, 64 * MiB, 64 * MiB, 0))
            _exit(2);
        for (int i = 0; i < 3; i++) {
            snprintf(id, sizeof id, "pre-%d", i);
            if (commit_logs(s, id, 60, 0))
                _exit(3);
        }
        refused = commit_logs(s, "big", 400, 1);
        for (int i = 0; i < 20; i++) {
            snprintf(id, sizeof id, "after-%d", i);
            put_id(s, id, (uint64_t)i + 100, &c, &y);
            if (c || y)
                _exit(5);
        }
        _exit(refused ? 0 : 1); /* a crash: every "after" commit was acknowledged */
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_true(WEXITSTATUS(status) <= 1);
    mic_store_set_journal_size(4 * MiB);
    assert_int_equal(mic_store_open(&s, dir, 64 * MiB, 64 * MiB, 0), MIC_OK);
    for (int i = 0; i < 3; i++) {
        char id[32];
        snprintf(id, sizeof id, "pre-%d", i);
        assert_true(id_present(s, id));
    }
    for (int i = 0; i < 20; i++) {
        char id[32];
        snprintf(id, sizeof id, "after-%d", i);
        if (!id_present(s, id))
            fail_msg("acknowledged commit %s lost after the replay", id);
    }
    assert_int_equal(id_present(s, "big"), WEXITSTATUS(status));
    printf("the big commit was %s\n", WEXITSTATUS(status) ? "acknowledged" : "refused");
    mic_store_close(s);
    mic_store_set_journal_size(64 * MiB);
    check_verify(dir);
    storedir_rm(dir);
}

/* Issue 29, point 8: a commit refused for want of journal room is not
 * stored later, when room comes back (here: a clean close after one more
 * commit). */
static void refused_commit_is_never_stored(void **state)
{
    char dir[64];
    mic_store *s;
    int c, y;

    (void)state;
    snprintf(dir, sizeof dir, "/tmp/mic-test-journal-XXXXXX");
    assert_non_null(mkdtemp(dir));
    mic_store_set_journal_size(128 * KiB);
    assert_int_equal(mic_store_open(&s, dir, 64 * MiB, 64 * MiB, 0), MIC_OK);
    put_id(s, "first", 1, &c, &y);
    assert_int_equal(c, MIC_OK);
    assert_int_equal(y, MIC_OK);
    assert_true(commit_logs(s, "big", 400, 1));
    assert_false(id_present(s, "big"));
    put_id(s, "second", 2, &c, &y);
    assert_int_equal(c, MIC_OK);
    assert_int_equal(y, MIC_OK);
    mic_store_close(s);
    assert_int_equal(mic_store_open(&s, dir, 64 * MiB, 64 * MiB, 0), MIC_OK);
    assert_true(id_present(s, "first"));
    assert_true(id_present(s, "second"));
    assert_false(id_present(s, "big"));
    mic_store_close(s);
    mic_store_set_journal_size(64 * MiB);
    storedir_rm(dir);
}

/* Issue 29, point 2: a commit that advanced LMDB's txnid while the
 * journal captured none of its writes fails the journal. */
static int skip_all(void)
{
    return 1;
}

static void uncaptured_commit_fails_the_journal(void **state)
{
    char dir[64];
    struct mic_jnl_hooks h = {.skip_capture = skip_all};
    mic_store *s;
    mic_txn *t;
    int c, y;

    (void)state;
    snprintf(dir, sizeof dir, "/tmp/mic-test-journal-XXXXXX");
    assert_non_null(mkdtemp(dir));
    assert_int_equal(mic_store_open(&s, dir, 4 * MiB, 4 * MiB, 0), MIC_OK);
    /* A transaction that changes nothing captures nothing, rightly. */
    assert_int_equal(mic_txn_begin(s, 1, &t), MIC_OK);
    assert_int_equal(mic_txn_commit(t), MIC_OK);
    put_id(s, "a", 1, &c, &y);
    assert_int_equal(y, MIC_OK);
    mic_jnl_set_hooks(&h);
    put_id(s, "b", 2, &c, &y);
    mic_jnl_set_hooks(NULL);
    assert_int_equal(c, MIC_EIO);
    assert_int_equal(mic_store_sync(s), MIC_EIO);
    assert_int_equal(mic_txn_begin(s, 1, &t), MIC_EIO);
    mic_store_close(s);
    storedir_rm(dir);
}

/* A store whose journal-0 holds 'n' synced commits and was never closed. */
static void crashed_store(char *dir, size_t cap, int n)
{
    pid_t pid;
    int status;

    snprintf(dir, cap, "/tmp/mic-test-journal-XXXXXX");
    assert_non_null(mkdtemp(dir));
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        mic_store *s;
        int c, y;
        if (mic_store_open(&s, dir, 4 * MiB, 4 * MiB, 0))
            _exit(2);
        for (int i = 0; i < n; i++) {
            char id[16];
            snprintf(id, sizeof id, "k%d", i);
            put_id(s, id, (uint64_t)i + 1, &c, &y);
            if (c || y)
                _exit(3);
        }
        _exit(0);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static unsigned char *read_journal(const char *dir, size_t *len)
{
    char path[200];
    struct stat sb;
    unsigned char *b;
    int fd;

    snprintf(path, sizeof path, "%s/journal-0", dir);
    assert_true((fd = open(path, O_RDONLY)) >= 0);
    assert_int_equal(fstat(fd, &sb), 0);
    *len = (size_t)sb.st_size;
    assert_non_null(b = malloc(*len));
    assert_int_equal(read(fd, b, *len), (ssize_t)*len);
    close(fd);
    return b;
}

static void write_journal(const char *dir, const unsigned char *b, size_t len)
{
    char path[200];
    int fd;

    snprintf(path, sizeof path, "%s/journal-0", dir);
    assert_true((fd = open(path, O_WRONLY)) >= 0);
    assert_int_equal(pwrite(fd, b, len, 0), (ssize_t)len);
    close(fd);
}

static uint64_t le64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static uint32_t le32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static void set_le64(unsigned char *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

static void set_le32(unsigned char *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

/* Issue 29, point 1, as the defect left a store: journal-0's chain ends
 * at record k-1, and records k... were written after journal-1's header
 * of a file that holds no chain (a switch whose header was never
 * written).  Recovery replays them after journal-0's chain: every commit
 * is there.  Records that do not go on from the chain (record k missing)
 * make it refuse the store instead of replaying without them. */
static void write_file(const char *dir, int i, const unsigned char *b, size_t len)
{
    char path[200];
    int fd;

    snprintf(path, sizeof path, "%s/journal-%d", dir, i);
    assert_true((fd = open(path, O_WRONLY | O_CREAT, 0600)) >= 0);
    assert_int_equal(pwrite(fd, b, len, 0), (ssize_t)len);
    close(fd);
}

static void recovery_replays_records_past_the_header(void **state)
{
    for (int round = 0; round < 2; round++) {
        char dir[64], path[200];
        unsigned char *b, *one;
        size_t len, hdr, at[40], end;
        uint64_t next, replayed;
        int lockfd, k = 5, n = 8, r;

        (void)state;
        crashed_store(dir, sizeof dir, n);
        b = read_journal(dir, &len);
        hdr = 4096 + 2 * (size_t)(b[12] | b[13] << 8 | b[14] << 16);
        /* The records' offsets (the store's own commits at open, then the
         * n puts), then the end of the chain. */
        at[0] = hdr;
        for (r = 0; at[r] + 40 <= len && le32(b + at[r]) == 0x4d4a5243u &&
                    le64(b + at[r] + 8) == le64(b + 16) + (uint64_t)r; r++) {
            assert_true(r + 1 < 40);
            at[r + 1] = at[r] + le64(b + at[r] + 24);
        }
        assert_true(r > k + 1);
        end = at[r];
        /* journal-1: its header as micd's open left it (no chain, floor =
         * journal-0's first record), then records k.. (round 1: k+1..). */
        snprintf(path, sizeof path, "%s/journal-1", dir);
        {
            size_t l1;
            unsigned char *h1;
            int fd = open(path, O_RDONLY);
            struct stat sb;
            assert_true(fd >= 0);
            assert_int_equal(fstat(fd, &sb), 0);
            l1 = (size_t)sb.st_size;
            assert_true(l1 >= hdr);
            assert_non_null(h1 = malloc(l1 > hdr + (end - at[k]) ? l1 : hdr + (end - at[k])));
            assert_int_equal(read(fd, h1, hdr), (ssize_t)hdr);
            close(fd);
            assert_int_equal(le64(h1 + 16), 0);
            one = h1;
        }
        memcpy(one + hdr, b + at[k + round], end - at[k + round]);
        write_file(dir, 1, one, hdr + (end - at[k + round]));
        memset(b + at[k], 0, end - at[k]); /* journal-0's chain ends at k-1 */
        write_journal(dir, b, len);
        if (round == 0) {
            mic_store *s;
            assert_int_equal(mic_jnl_recover(dir, &lockfd, &next, &replayed), MIC_OK);
            close(lockfd);
            assert_int_equal(replayed, (uint64_t)r);
            assert_int_equal(next, le64(b + 16) + (uint64_t)r);
            assert_int_equal(mic_store_open(&s, dir, 4 * MiB, 4 * MiB, 0), MIC_OK);
            for (int i = 0; i < n; i++) {
                char id[16];
                snprintf(id, sizeof id, "k%d", i);
                if (!id_present(s, id))
                    fail_msg("commit %s lost: the records after journal-1's header were not "
                             "replayed", id);
            }
            mic_store_close(s);
            check_verify(dir);
        } else {
            assert_int_equal(mic_jnl_recover(dir, &lockfd, &next, &replayed), MIC_EIO);
        }
        free(one);
        free(b);
        storedir_rm(dir);
    }
}

/* Issue 29, point 6: a record with a good CRC whose segment lies past the
 * pages the store uses, or whose segment count runs past its end, is
 * refused (data.mdb is not written at the offset, nothing is read past
 * the record). */
static void recovery_bounds_segments(void **state)
{
    for (int round = 0; round < 2; round++) {
        char dir[64], path[200];
        unsigned char *b;
        size_t len, hdr, r;
        uint64_t next, replayed, rlen, p;
        struct stat sb;
        int lockfd;

        (void)state;
        crashed_store(dir, sizeof dir, 1);
        b = read_journal(dir, &len);
        hdr = 4096 + 2 * (size_t)(b[12] | b[13] << 8 | b[14] << 16);
        r = hdr;
        rlen = le64(b + r + 24);
        assert_true(r + rlen <= len);
        if (round == 0) {
            /* The first segment outside the meta pages, moved to 1 TiB. */
            size_t meta_end = hdr - 4096;
            for (p = r + 40; le64(b + p) < meta_end; p += 16 + ((le64(b + p + 8) & 0xffffffffu) + 7) / 8 * 8)
                assert_true(p < r + rlen);
            set_le64(b + p, (uint64_t)1 << 40);
        } else {
            set_le32(b + r + 32, (uint32_t)(b[r + 32] | b[r + 33] << 8) + 1);
        }
        set_le32(b + r + 4, mic_crc32c(0, b + r + 8, (size_t)rlen - 8));
        write_journal(dir, b, len);
        assert_int_equal(mic_jnl_recover(dir, &lockfd, &next, &replayed), MIC_EIO);
        snprintf(path, sizeof path, "%s/data.mdb", dir);
        assert_int_equal(stat(path, &sb), 0);
        assert_true(sb.st_size < (off_t)1 << 30);
        free(b);
        storedir_rm(dir);
    }
}

/* Issue 30, point 4: the journal accepts the LMDB it was written for,
 * the one linked here, and refuses any other release (micd then exits 2:
 * server/main.c).  A store cannot be opened here with another LMDB, which
 * is linked in: the check itself is what is tested. */
static void lmdb_version_is_checked(void **state)
{
    int major, minor, patch;

    (void)state;
    mdb_version(&major, &minor, &patch);
    assert_int_equal(mic_jnl_lmdb_check(major, minor, patch), MIC_OK);
    assert_int_equal(mic_jnl_lmdb_check(major, minor, patch + 1), MIC_ELMDB);
    assert_int_equal(mic_jnl_lmdb_check(major, minor, patch - 1), MIC_ELMDB);
    assert_int_equal(mic_jnl_lmdb_check(major, minor + 1, patch), MIC_ELMDB);
    assert_int_equal(mic_jnl_lmdb_check(major + 1, minor, patch), MIC_ELMDB);
    assert_int_equal(mic_jnl_lmdb_check(1, 0, 0), MIC_ELMDB);
}

/* journal.h, invariant 6: a commit only overwrites pages that the two
 * states before it no longer use, so the writer may run one commit ahead
 * of the last durable one and no further.  A child makes state D durable
 * (ids lag-* written long before, their journal records checkpointed
 * away), then, unsynced: D+1 rewrites the lag-* ids (freeing their
 * pages), D+2 puts many new ids (taking every page freed before D+1) and,
 * in the second round, D+3 rewrites some (taking the pages D+1 freed: the
 * lag-* ids' pages of state D).  It dies there, without a flush.  After the
 * replay the store must be one whole state from D on, with every record
 * intact: a journal that let D+3 begin before D+2 was durable would have
 * left state D with pages that D+3 overwrote. */
#define LAG_IDS 5000
#define LAG_FILL 20000

static int lag_commit(mic_store *s, const char *prefix, int n, uint64_t v, int nlogs)
{
    uint8_t dg[MIC_DIGEST_LEN];
    mic_txn *t;
    uint64_t seq;
    int rc;

    memset(dg, (int)(v & 0xff), sizeof dg);
    if ((rc = mic_txn_begin(s, 1, &t)))
        return rc;
    for (int i = 0; i < n && rc == MIC_OK; i++) {
        char id[32];
        snprintf(id, sizeof id, "%s-%d", prefix, i);
        rc = mic_store_id_put(t, id, strlen(id), v, dg);
    }
    if (rc == MIC_OK)
        rc = mic_store_last_seq(t, &seq);
    for (int i = 0; i < nlogs && rc == MIC_OK; i++)
        rc = put_big_log(t, ++seq);
    if (rc) {
        mic_txn_abort(t);
        return rc;
    }
    return mic_txn_commit(t);
}

/* The value every id PREFIX-from .. PREFIX-(to-1) holds (its digest
 * too), 0 when none is there, -1 when they differ or one does not read
 * back. */
static int64_t lag_ids(mic_store *s, const char *prefix, int from, int to)
{
    int64_t v = -2;
    mic_txn *t;

    assert_int_equal(mic_txn_begin(s, 0, &t), MIC_OK);
    for (int i = from; i < to && v != -1; i++) {
        char id[32];
        uint8_t dg[MIC_DIGEST_LEN];
        uint64_t seq;
        int rc;
        snprintf(id, sizeof id, "%s-%d", prefix, i);
        rc = mic_store_id_get(t, id, strlen(id), &seq, dg);
        int64_t got = rc == MIC_ENOTFOUND ? 0 : rc == MIC_OK && dg[0] == (seq & 0xff) ? (int64_t)seq : -1;
        v = v == -2 || v == got ? got : -1;
    }
    mic_txn_abort(t);
    return v;
}

static void writer_stays_one_commit_ahead(void **state)
{
    (void)state;
    for (int ahead = 2; ahead <= 3; ahead++) {
        char dir[64];
        int status, found = -1;
        int64_t lag, fill, fill10;
        uint64_t nlog;
        mic_store *s;
        mic_txn *t;
        pid_t pid;

        snprintf(dir, sizeof dir, "/tmp/mic-test-journal-XXXXXX");
        assert_non_null(mkdtemp(dir));
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            struct mic_jnl_stats st;
            mic_store_set_journal_size(128 * KiB);
            if (mic_store_open(&s, dir, 64 * MiB, 64 * MiB, 0))
                _exit(2);
            if (lag_commit(s, "lag", LAG_IDS, 1, 0) || mic_store_sync(s))
                _exit(3);
            /* Until both files started again since: the lag-* ids' record
             * is checkpointed out of the journal. */
            do {
                if (lag_commit(s, "lag", 0, 0, 20) || mic_store_sync(s) ||
                    mic_store_journal_stats(s, &st))
                    _exit(3);
            } while (st.rotations < 3 && st.records < 2000);
            if (st.rotations < 3)
                _exit(4);
            if (lag_commit(s, "lag", LAG_IDS, 2, 0) || lag_commit(s, "fill", LAG_FILL, 3, 0))
                _exit(3);
            if (ahead == 3 && lag_commit(s, "fill", LAG_FILL / 10, 4, 0))
                _exit(3);
            _exit(0); /* a crash: the commits after D never flushed here */
        }
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
        assert_int_equal(mic_store_open(&s, dir, 64 * MiB, 64 * MiB, 0), MIC_OK);
        lag = lag_ids(s, "lag", 0, LAG_IDS);
        fill = lag_ids(s, "fill", LAG_FILL / 10, LAG_FILL);
        fill10 = lag_ids(s, "fill", 0, LAG_FILL / 10);
        assert_int_equal(mic_txn_begin(s, 0, &t), MIC_OK);
        assert_int_equal(mic_store_log_count(t, &nlog), MIC_OK);
        mic_txn_abort(t);
        /* D, D+1, D+2, or D+3 (whose ids rewrote D+2's first tenth) */
        if (lag == 1 && fill == 0 && fill10 == 0)
            found = 0;
        else if (lag == 2 && fill == 0 && fill10 == 0)
            found = 1;
        else if (lag == 2 && fill == 3 && fill10 == 3)
            found = 2;
        else if (lag == 2 && fill == 3 && fill10 == 4 && ahead == 3)
            found = 3;
        if (found < 0 || nlog == 0 || nlog % 20)
            fail_msg("%d commits made after D: the store after the crash is no committed state "
                     "from D on (lag-* ids %lld, fill-* ids %lld and %lld, %llu log records)",
                     ahead, (long long)lag, (long long)fill10, (long long)fill,
                     (unsigned long long)nlog);
        printf("%d commits made after D: the store is at D+%d\n", ahead, found);
        mic_store_close(s);
        check_verify(dir);
        storedir_rm(dir);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(power_loss_after_commit),
        cmocka_unit_test(power_loss_in_journal_write),
        cmocka_unit_test(power_loss_with_commits_ahead),
        cmocka_unit_test(one_process_at_a_time),
        cmocka_unit_test(files_switch_and_stay_bounded),
        cmocka_unit_test(pages_go_without_their_gap),
        cmocka_unit_test(nosync_open_empties_the_journal),
        cmocka_unit_test(failed_sync_is_sticky),
        cmocka_unit_test(switch_on_full_disk_keeps_acknowledged),
        cmocka_unit_test(refused_commit_is_never_stored),
        cmocka_unit_test(uncaptured_commit_fails_the_journal),
        cmocka_unit_test(recovery_replays_records_past_the_header),
        cmocka_unit_test(recovery_bounds_segments),
        cmocka_unit_test(lmdb_version_is_checked),
        cmocka_unit_test(writer_stays_one_commit_ahead),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
