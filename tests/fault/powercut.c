/* powercut.c - T2 of issue 16: power loss, simulated from a recording.
 *
 * One recording, many cuts.  micd (release build, $MICD, default
 * build/micd) runs under build/fault/iofault.so on a fresh store with a
 * small journal (--journal-size 64K, the smallest micd takes, so that the
 * run crosses a few hundred journal switches and checkpoints) while
 * publishers (single events, batches of versioned aggregates, one
 * aggregate resent until acknowledged) and a worker that claims and acks
 * on one group record every 2xx with its CLOCK_MONOTONIC receive time;
 * then micd is stopped.  Offline, K cut points are drawn from the
 * recording's log (a third anywhere, a third just before a sync, a third
 * just after one; the end is always one), and KB more are placed exactly
 * at the journal's boundaries found in it (find_bounds: just before and
 * just after each header write -- a switch or another one --, each first
 * record of a file, each checkpoint's start and end, each zero-ahead; the
 * kinds and sides taken in turn when there are more than KB).  For each
 * cut the store directory is rebuilt as a power cut would leave it
 * (tests/fault/powerkit.h: what was synced, then a random part of what
 * was not, torn and reordered) and opened by $MICD_CHECK (default
 * build/san/micd when present: the sanitizers watch the recovery), with
 * no interposer.  A cut passes when micd refuses the store cleanly (a
 * nonzero exit and a log line, never a signal) or starts and: every
 * publish answered 2xx before the cut is there with the fields sent
 * (range reads over everything, GET /v1/events/{id} for a sample), no
 * event nobody published appears, every ack answered before the cut is
 * still dispatched and is not handed out by a claim of the group, a
 * SIGTERM stops it with status 0, and `micd --verify DIR` (when micd has
 * it) exits 0.
 *
 * Then the proof that the test can fail: the same load recorded with
 * --durability none, cut the same way, must lose acknowledged publishes
 * in at least one cut (it does nearly always: nothing is ever synced).
 *
 *   powercut [--cuts K] [--boundary-cuts KB] [--journal-size S] [--ms MS]
 *            [--events N] [--seed N] [--none-cuts K] [--keep]
 *
 * (--boundary-cuts: default 24; --journal-size: default 64K.)
 * (--events: the publishers stop after about N events, default 3000,
 * which keeps the recording near 60 MB; --ms bounds the load's time.)
 *
 * Prints one line per cut, the totals (boundary cuts passed and made by
 * kind) and one JSON line; exits 0 when every cut passed, the recording
 * crossed a switch, a first record and a checkpoint (with KB > 0),
 * the --durability none run lost something, and micd made no msync
 * call.  Everything lives in a /tmp/powercut-XXXXXX directory, removed at
 * the end unless --keep (or a failure: then it is kept and named). */
#define _GNU_SOURCE
#include "powerkit.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- Boundaries of the journal in a recording ---- */

/* The kinds of boundary a cut is placed at (just before, or just after,
 * the call that makes it). */
enum bkind { B_SWITCH, B_HEADER, B_FIRST, B_CK_START, B_CK_END, B_ZERO, B_KINDS };
static const char *const bk_name[B_KINDS] = {
    "switch", "other header write", "first record", "checkpoint start", "checkpoint end",
    "zero-ahead"};
static const char *const bk_key[B_KINDS] = {
    "switch", "header", "first_record", "checkpoint_start", "checkpoint_end", "zero_ahead"};

/* A cut: records [0, p) happened.  'kind' -1 for a random or sync cut,
 * else a boundary (B_*) and its 'side' (0 just before it, 1 just after). */
struct cut {
    size_t p;
    int kind, side;
};

static int cmp_cut(const void *a, const void *b)
{
    const struct cut *x = a, *y = b;
    return x->p < y->p ? -1 : x->p > y->p;
}

struct bounds {
    struct cut *v;
    size_t n, cap;
    size_t found[B_KINDS];  /* boundaries of each kind in the recording */
};

static int bound_add(struct bounds *b, int kind, size_t at, size_t after)
{
    if (b->n + 2 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        struct cut *nv = realloc(b->v, cap * sizeof *nv);
        if (!nv)
            return -1;
        b->v = nv;
        b->cap = cap;
    }
    b->v[b->n++] = (struct cut){at, kind, 0};
    b->v[b->n++] = (struct cut){after, kind, 1};
    b->found[kind]++;
    return 0;
}

static uint64_t le_get(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* Every journal boundary of 'l' (store-format.md, "Journal"), each as a
 * cut just before and one just after the call that makes it:
 *   header write   a write at offset 0 of journal-N (its bytes begin with
 *                  the file magic); a switch when it names a chain
 *                  (first_seq > 0) and is not that file's first header
 *                  (the open's), else an "other" one (open, close)
 *   first record   a write of records at offset hdr_size of journal-N
 *                  (hdr_size = 4096 + 2 * the page size in the header)
 *   zero-ahead     a run of adjacent zero writes to journal-N: before its
 *                  first write, after its last
 *   checkpoint     start: the first sync_file_range of data.mdb since its
 *                  last fdatasync; end: that fdatasync (a data.mdb sync
 *                  with no sync_file_range before it is an end only)
 * Returns 0 or -1 (memory). */
static int find_bounds(const struct iof_log *l, struct bounds *b)
{
    int jf[2] = {iof_log_file(l, "journal-0"), iof_log_file(l, "journal-1")};
    int data = iof_log_file(l, "data.mdb"), in_ck = 0;
    size_t headers[2] = {0, 0}, zfirst[2] = {0, 0}, zlast[2] = {0, 0};
    int64_t zend[2] = {-1, -1}, hdr_size = -1;

    memset(b, 0, sizeof *b);
    for (size_t i = 0; i <= l->n; i++) {
        const struct iof_rec *r = i < l->n ? l->rec[i] : NULL;
        int f = !r ? -1 : r->file == jf[0] && jf[0] >= 0 ? 0 : r->file == jf[1] && jf[1] >= 0 ? 1 : -1;

        /* A zero-ahead run ends at any other record of its file (or the end). */
        for (int k = 0; k < 2; k++)
            if (zend[k] >= 0 && (!r || (f == k && !(r->op == IOF_WRITE && !r->err &&
                                                    (r->flags & IOF_F_ZERO) && r->off == zend[k])))) {
                if (bound_add(b, B_ZERO, zfirst[k], zlast[k] + 1))
                    return -1;
                zend[k] = -1;
            }
        if (!r)
            break;
        if (f >= 0 && r->op == IOF_WRITE && !r->err && r->len > 0) {
            const unsigned char *d = iof_data(r);
            if (r->flags & IOF_F_ZERO) {
                if (zend[f] < 0)
                    zfirst[f] = i;
                zlast[f] = i;
                zend[f] = r->off + r->len;
            } else if (r->off == 0 && r->datalen >= 24 && !memcmp(d, "MICJRNL1", 8)) {
                uint64_t psize = le_get(d + 12, 4), first_seq = le_get(d + 16, 8);
                hdr_size = 4096 + 2 * (int64_t)psize;
                if (bound_add(b, first_seq && headers[f] ? B_SWITCH : B_HEADER, i, i + 1))
                    return -1;
                headers[f]++;
            } else if (r->off == hdr_size && bound_add(b, B_FIRST, i, i + 1)) {
                return -1;
            }
        } else if (data >= 0 && r->file == data && (r->op == IOF_SFR || r->op == IOF_SYNC)) {
            if (r->op == IOF_SFR && !in_ck) {
                in_ck = 1;
                if (bound_add(b, B_CK_START, i, i + 1))
                    return -1;
            }
            if (r->op == IOF_SYNC) {
                in_ck = 0;
                if (bound_add(b, B_CK_END, i, i + 1))
                    return -1;
            }
        }
    }
    return 0;
}

/* 'k' of the boundary cuts of b into out[] (all of them when there are
 * no more): the kinds and sides in turn, each a random one of its own not
 * taken yet.  Returns how many were taken. */
static size_t pick_bounds(const struct bounds *b, size_t k, uint64_t *rs, struct cut *out)
{
    size_t *idx[B_KINDS * 2], cnt[B_KINDS * 2] = {0}, taken = 0;
    int any = 1;

    if (k >= b->n) {
        memcpy(out, b->v, b->n * sizeof *out);
        return b->n;
    }
    for (int s = 0; s < B_KINDS * 2; s++)
        if (!(idx[s] = malloc((b->n + 1) * sizeof *idx[s]))) {
            for (int t = 0; t < s; t++)
                free(idx[t]);
            return 0;
        }
    for (size_t i = 0; i < b->n; i++) {
        int s = b->v[i].kind * 2 + b->v[i].side;
        idx[s][cnt[s]++] = i;
    }
    while (taken < k && any) {
        any = 0;
        for (int s = 0; s < B_KINDS * 2 && taken < k; s++) {
            if (!cnt[s])
                continue;
            size_t j = (size_t)(pk_rnd(rs) % cnt[s]);
            out[taken++] = b->v[idx[s][j]];
            idx[s][j] = idx[s][--cnt[s]];
            any = 1;
        }
    }
    for (int s = 0; s < B_KINDS * 2; s++)
        free(idx[s]);
    return taken;
}

/* ---- Cuts ---- */

struct totals {
    size_t cuts, acked, found, lost, events, refused, crashed, mismatched, unexpected,
        redelivered, acks, failed, verified, lossy_cuts, unavailable;
    size_t b_made[B_KINDS][2], b_passed[B_KINDS][2];
};

/* Record one run of the load under the interposer into base/NAME.log.
 * Returns 0 or -1. */
static int record(const char *base, const char *name, const char *durability,
                  const char *journal_size, int ms, int events, unsigned seed,
                  struct pk_record *rec, char *logpath, size_t cap)
{
    const char *bin = pk_env("MICD", "build/micd");
    const char *so = pk_env("IOFAULT_SO", "build/fault/iofault.so");
    char env_pre[600], env_dir[600], env_log[600], sopath[512];
    const char *env[4], *args[] = {"--journal-size", journal_size, "--durability", durability,
                                   "--log-level", "warn", NULL};
    struct pk_micd m;
    struct pk_load_opts o;
    int rc, st;

    memset(&m, 0, sizeof m);
    snprintf(m.dir, sizeof m.dir, "%s/%s", base, name);
    snprintf(logpath, cap, "%s/%s.io", base, name);
    if (mkdir(m.dir, 0700) || !realpath(so, sopath)) {
        fprintf(stderr, "powercut: %s: %s\n", !realpath(so, sopath) ? so : m.dir,
                strerror(errno));
        return -1;
    }
    snprintf(env_pre, sizeof env_pre, "LD_PRELOAD=%s", sopath);
    snprintf(env_dir, sizeof env_dir, "IOFAULT_DIR=%s", m.dir);
    snprintf(env_log, sizeof env_log, "IOFAULT_LOG=%s", logpath);
    env[0] = env_pre;
    env[1] = env_dir;
    env[2] = env_log;
    env[3] = NULL;
    if ((rc = pk_micd_start(&m, bin, args, env, 30000)) != 0) {
        fprintf(stderr, "powercut: %s under the interposer did not start (%d); log %s\n", bin,
                rc, m.logpath);
        return -1;
    }
    if (pk_setup(&m)) {
        pk_micd_kill(&m);
        return -1;
    }
    memset(&o, 0, sizeof o);
    o.ms = ms;
    o.publishers = 3;
    o.worker = 1;
    o.seed = seed;
    o.max_events = events;
    o.m = &m;
    if (pk_load_run(&o, rec)) {
        pk_micd_kill(&m);
        return -1;
    }
    if ((st = pk_micd_stop(&m)) != 0) {
        fprintf(stderr, "powercut: the recorded micd stopped with status %d (log %s)\n", st,
                m.logpath);
        return -1;
    }
    return 0;
}

/* Figures of a log; returns the number of msync calls in it. */
static size_t log_figures(const struct iof_log *l, const char *what)
{
    size_t writes = 0, syncs = 0, msyncs = 0, bytes = 0, data_syncs = 0, truncs = 0;
    int data = iof_log_file(l, "data.mdb");

    for (size_t i = 0; i < l->n; i++) {
        const struct iof_rec *r = l->rec[i];
        if (r->op == IOF_WRITE) {
            writes++;
            bytes += (size_t)r->len;
        } else if (r->op == IOF_SYNC) {
            syncs++;
            data_syncs += r->file == data;
        } else if (r->op == IOF_MSYNC) {
            msyncs++;
        } else if (r->op == IOF_TRUNC || r->op == IOF_FALLOC) {
            truncs++;
        }
    }
    printf("powercut: %s: %zu records, %zu writes (%.1f MB), %zu syncs (%zu of data.mdb), "
           "%zu size changes, %zu msync\n",
           what, l->n, writes, (double)bytes / 1e6, syncs, data_syncs, truncs, msyncs);
    return msyncs;
}

static size_t acked_pubs(const struct pk_record *rec)
{
    size_t n = 0;
    for (size_t i = 0; i < rec->n; i++)
        n += rec->a[i].kind == PK_PUB && rec->a[i].status >= 200 && rec->a[i].status < 300;
    return n;
}

/* K random cut points of 'l' into p[] (the end among them): a third
 * anywhere, a third just before a sync, a third just after one. */
static void cut_points(const struct iof_log *l, size_t k, uint64_t *rs, int late_only,
                       size_t *syncs, struct cut *p)
{
    size_t ns = 0;

    for (size_t i = 0; i < l->n; i++)
        if (l->rec[i]->op == IOF_SYNC)
            syncs[ns++] = i;
    for (size_t i = 0; i < k; i++) {
        size_t lo = late_only ? l->n / 2 : 1;
        p[i].kind = -1;
        p[i].side = 0;
        if (i == 0 || l->n < 2)
            p[i].p = l->n;
        else if (i % 3 == 1 || !ns || late_only)
            p[i].p = lo + (size_t)(pk_rnd(rs) % (l->n - lo + 1));
        else
            p[i].p = syncs[pk_rnd(rs) % ns] + (i % 3 == 0 ? 1 : 0);
    }
}

/* Cut 'log' k times at random and kb times at its journal's boundaries
 * ('bd', NULL for none), checking each against 'rec'; adds to *t. */
static int cuts(const char *base, const struct iof_log *log, const struct pk_record *rec,
                size_t k, const struct bounds *bd, size_t kb, uint64_t *rs, int none,
                struct totals *t)
{
    const char *bin = pk_env("MICD_CHECK", access("build/san/micd", X_OK) == 0
                                               ? "build/san/micd" : pk_env("MICD", "build/micd"));
    static const double ps[] = {0, 0.3, 0.6, 0.95}, ps_none[] = {0, 0.5, 0.95};
    struct pk_rebuild *b = pk_rebuild_new(log);
    struct cut *pts = malloc((k + kb + 1) * sizeof *pts);
    size_t *syncs = malloc((log->n + 1) * sizeof *syncs), n;
    char dir[600];
    int ok = 1;

    if (!b || !pts || !syncs) {
        pk_rebuild_free(b);
        free(pts);
        free(syncs);
        return -1;
    }
    cut_points(log, k, rs, none, syncs, pts);
    free(syncs);
    n = k + (bd ? pick_bounds(bd, kb, rs, pts + k) : 0);
    qsort(pts, n, sizeof *pts, cmp_cut);
    snprintf(dir, sizeof dir, "%s/cut", base);
    for (size_t i = 0; i < n; i++) {
        struct pk_check c;
        size_t nu, na;
        double up = none ? ps_none[i % 3] : ps[pk_rnd(rs) % 4];
        unsigned seed = (unsigned)pk_rnd(rs);
        uint64_t t_cut = pts[i].p ? log->rec[pts[i].p - 1]->t_ns : 0;
        char label[64] = "";

        if (pts[i].kind >= 0)
            snprintf(label, sizeof label, " [%s %s]", pts[i].side ? "after" : "before",
                     bk_name[pts[i].kind]);
        if (pk_rebuild_cut(b, pts[i].p, dir, up, seed, &nu, &na)) {
            fprintf(stderr, "powercut: cannot rebuild the store at cut %zu\n", pts[i].p);
            ok = 0;
            break;
        }
        pk_check_dir(bin, dir, rec, t_cut, &c);
        t->cuts++;
        t->acked += c.acked;
        t->found += c.found;
        t->lost += c.lost;
        t->events += c.events_in_store;
        t->refused += (size_t)c.refused;
        t->crashed += (size_t)c.crashed;
        t->mismatched += c.mismatched;
        t->unexpected += c.unexpected;
        t->redelivered += c.ack_redelivered;
        t->acks += c.acks;
        t->verified += c.verify_status == 0;
        t->lossy_cuts += c.lost > 0;
        t->unavailable += c.unavailable;
        int pass = none || pk_check_ok(&c, 1);
        if (pts[i].kind >= 0) {
            t->b_made[pts[i].kind][pts[i].side]++;
            t->b_passed[pts[i].kind][pts[i].side] += (size_t)pass;
        }
        printf("  cut %3zu at record %7zu/%zu%s (unsynced %5zu, applied %5zu, p=%.2f seed %u): "
               "%s acked %zu found %zu lost %zu events %zu acks %zu%s%s\n",
               i + 1, pts[i].p, log->n, label, nu, na, up, seed,
               c.refused ? "REFUSED" : c.crashed ? "CRASHED" : "opened",
               c.acked, c.found, c.lost, c.events_in_store, c.acks, pass ? "" : "  FAIL: ",
               pass ? "" : c.why);
        if (!pass) {
            ok = 0;
            t->failed++;
            /* Keep this store for the reproduction, then go on. */
            char keep[700];
            snprintf(keep, sizeof keep, "%s/failed-cut-%zu", base, i + 1);
            if (rename(dir, keep) == 0)
                printf("  (the store of this cut is kept in %s)\n", keep);
        }
    }
    pk_rmdir(dir);
    pk_rebuild_free(b);
    free(pts);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    size_t k = 25, k_none = 6, kb = 24;
    const char *jsize = "64K";
    int ms = 3000, events = 3000, keep = 0, failed = 0;
    struct bounds bd;
    unsigned seed = (unsigned)getpid();
    char base[] = "/tmp/powercut-XXXXXX", logpath[700];
    struct pk_record rec;
    struct iof_log log;
    struct totals t, tn;
    uint64_t rs;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cuts") && i + 1 < argc)
            k = (size_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--boundary-cuts") && i + 1 < argc)
            kb = (size_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--journal-size") && i + 1 < argc)
            jsize = argv[++i];
        else if (!strcmp(argv[i], "--none-cuts") && i + 1 < argc)
            k_none = (size_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--ms") && i + 1 < argc)
            ms = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--events") && i + 1 < argc)
            events = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = (unsigned)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--keep"))
            keep = 1;
        else {
            fprintf(stderr, "usage: powercut [--cuts K] [--boundary-cuts K] [--journal-size S] "
                            "[--none-cuts K] [--ms MS] [--events N] [--seed N] [--keep]\n");
            return 2;
        }
    }
    if (!k || ms < 100) {
        fprintf(stderr, "powercut: --cuts must be > 0 and --ms >= 100\n");
        return 2;
    }
    if (!mkdtemp(base)) {
        perror("powercut: mkdtemp");
        return 1;
    }
    rs = (uint64_t)seed * 2654435761u + 7;
    printf("powercut: seed %u, %zu cuts + %zu at journal boundaries, --journal-size %s, "
           "%d ms of load, work in %s\n", seed, k, kb, jsize, ms, base);

    /* fsync: every cut must keep every acknowledgement. */
    memset(&t, 0, sizeof t);
    pk_record_init(&rec);
    if (record(base, "fsync", "fsync", jsize, ms, events, seed, &rec, logpath, sizeof logpath) ||
        iof_log_load(&log, logpath)) {
        pk_record_fini(&rec);
        printf("powercut: FAIL (the recording did not complete; kept %s)\n", base);
        return 1;
    }
    printf("powercut: recorded %zu publishes answered 2xx, %zu not, %zu acks, %zu claims\n",
           acked_pubs(&rec), rec.pubs_fail, rec.acks_ok, rec.claims);
    if (log_figures(&log, "fsync log")) {
        printf("powercut: FAIL: micd called msync (it should never: LMDB runs without "
               "MDB_WRITEMAP)\n");
        failed = 1;
    }
    if (acked_pubs(&rec) < 100 || rec.acks_ok < 10) {
        printf("powercut: FAIL: the load did too little to test anything\n");
        failed = 1;
    }
    if (find_bounds(&log, &bd)) {
        printf("powercut: FAIL: out of memory\n");
        return 1;
    }
    printf("powercut: journal boundaries in the recording:");
    for (int b = 0; b < B_KINDS; b++)
        printf(" %zu %s%s", bd.found[b], bk_name[b], b + 1 < B_KINDS ? "," : "\n");
    if (kb && (!bd.found[B_SWITCH] || !bd.found[B_FIRST] || !bd.found[B_CK_START] ||
               !bd.found[B_CK_END])) {
        printf("powercut: FAIL: the recording crossed no switch, first record or checkpoint "
               "(too little load for --journal-size %s)\n", jsize);
        failed = 1;
    }
    if (cuts(base, &log, &rec, k, &bd, kb, &rs, 0, &t))
        failed = 1;
    free(bd.v);
    iof_log_free(&log);
    pk_record_fini(&rec);
    printf("powercut: fsync: %zu cuts, %zu acked publishes checked, %zu found, %zu lost, "
           "%zu mismatched, %zu unexpected, %zu acks checked, %zu redelivered, "
           "%zu refused opens (%zu acked publishes unavailable), %zu crashes, %zu verified, "
           "%zu cuts failed\n",
           t.cuts, t.acked, t.found, t.lost, t.mismatched, t.unexpected, t.acks,
           t.redelivered, t.refused, t.unavailable, t.crashed, t.verified, t.failed);
    if (kb) {
        printf("powercut: boundary cuts (passed/made, before + after):");
        for (int b = 0; b < B_KINDS; b++)
            printf(" %s %zu/%zu + %zu/%zu%s", bk_name[b], t.b_passed[b][0], t.b_made[b][0],
                   t.b_passed[b][1], t.b_made[b][1], b + 1 < B_KINDS ? "," : "\n");
    }
    printf("{\"powercut\":{\"seed\":%u,\"journal_size\":\"%s\",\"cuts\":%zu,\"acked\":%zu,"
           "\"lost\":%zu,\"mismatched\":%zu,\"unexpected\":%zu,\"redelivered\":%zu,"
           "\"refused\":%zu,\"crashed\":%zu,\"failed\":%zu,\"boundary\":{",
           seed, jsize, t.cuts, t.acked, t.lost, t.mismatched, t.unexpected, t.redelivered,
           t.refused, t.crashed, t.failed);
    for (int b = 0; b < B_KINDS; b++)
        printf("\"%s\":{\"found\":%zu,\"made\":%zu,\"passed\":%zu}%s", bk_key[b], bd.found[b],
               t.b_made[b][0] + t.b_made[b][1], t.b_passed[b][0] + t.b_passed[b][1],
               b + 1 < B_KINDS ? "," : "");
    printf("}}}\n");

    /* none: the same cuts must lose something. */
    if (k_none) {
        memset(&tn, 0, sizeof tn);
        pk_record_init(&rec);
        if (record(base, "none", "none", jsize, ms / 2 > 500 ? ms / 2 : 500, events / 2,
                   seed + 1, &rec, logpath, sizeof logpath) ||
            iof_log_load(&log, logpath)) {
            pk_record_fini(&rec);
            printf("powercut: FAIL (the --durability none recording did not complete)\n");
            return 1;
        }
        log_figures(&log, "none log");
        cuts(base, &log, &rec, k_none, NULL, 0, &rs, 1, &tn);
        iof_log_free(&log);
        pk_record_fini(&rec);
        printf("powercut: --durability none: %zu cuts, %zu acked publishes checked, %zu lost "
               "in %zu cuts, %zu refused opens (%zu acked publishes unavailable), %zu crashes\n",
               tn.cuts, tn.acked, tn.lost, tn.lossy_cuts, tn.refused, tn.unavailable, tn.crashed);
        if (!tn.lost) {
            printf("powercut: FAIL: --durability none lost nothing: this test cannot fail\n");
            failed = 1;
        }
    }
    if (failed) {
        printf("powercut: FAIL (seed %u; stores and logs kept in %s)\n", seed, base);
        return 1;
    }
    if (!keep)
        pk_rmdir(base);
    printf("powercut: PASS\n");
    return 0;
}
