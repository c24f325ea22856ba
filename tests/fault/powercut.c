/* powercut.c - T2 of issue 16: power loss, simulated from a recording.
 *
 * One recording, many cuts.  micd (release build, $MICD, default
 * build/micd) runs under build/fault/iofault.so on a fresh store with a
 * small journal (--journal-size 1M, so that the run crosses journal
 * rotations and checkpoints) while publishers (single events, batches of
 * versioned aggregates, one aggregate resent until acknowledged) and a
 * worker that claims and acks on one group record every 2xx with its
 * CLOCK_MONOTONIC receive time; then micd is stopped.  Offline, K cut
 * points are drawn from the recording's log (a third anywhere, a third
 * just before a sync, a third just after one; the end is always one),
 * and for each the store directory is rebuilt as a power cut would leave
 * it (tests/fault/powerkit.h: what was synced, then a random part of
 * what was not, torn and reordered) and opened by $MICD_CHECK (default
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
 *   powercut [--cuts K] [--ms MS] [--events N] [--seed N] [--none-cuts K] [--keep]
 *
 * (--events: the publishers stop after about N events, default 3000,
 * which keeps the recording near 60 MB; --ms bounds the load's time.)
 *
 * Prints one line per cut and the totals; exits 0 when every cut passed,
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

struct totals {
    size_t cuts, acked, found, lost, events, refused, crashed, mismatched, unexpected,
        redelivered, acks, failed, verified, lossy_cuts, unavailable;
};

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

/* Record one run of the load under the interposer into base/NAME.log.
 * Returns 0 or -1. */
static int record(const char *base, const char *name, const char *durability, int ms,
                  int events, unsigned seed, struct pk_record *rec, char *logpath, size_t cap)
{
    const char *bin = pk_env("MICD", "build/micd");
    const char *so = pk_env("IOFAULT_SO", "build/fault/iofault.so");
    char env_pre[600], env_dir[600], env_log[600], sopath[512];
    const char *env[4], *args[] = {"--journal-size", "1M", "--durability", durability,
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

/* K cut points of 'l' (sorted; the end among them). */
static size_t *cut_points(const struct iof_log *l, size_t k, uint64_t *rs, int late_only)
{
    size_t *syncs = malloc((l->n + 1) * sizeof *syncs), ns = 0;
    size_t *p = malloc((k + 1) * sizeof *p);

    if (!syncs || !p) {
        free(syncs);
        free(p);
        return NULL;
    }
    for (size_t i = 0; i < l->n; i++)
        if (l->rec[i]->op == IOF_SYNC)
            syncs[ns++] = i;
    for (size_t i = 0; i < k; i++) {
        size_t lo = late_only ? l->n / 2 : 1;
        if (i == 0 || l->n < 2)
            p[i] = l->n;
        else if (i % 3 == 1 || !ns || late_only)
            p[i] = lo + (size_t)(pk_rnd(rs) % (l->n - lo + 1));
        else
            p[i] = syncs[pk_rnd(rs) % ns] + (i % 3 == 0 ? 1 : 0);
    }
    qsort(p, k, sizeof *p, cmp_size);
    free(syncs);
    return p;
}

/* Cut 'log' k times, checking each against 'rec'; adds to *t. */
static int cuts(const char *base, const struct iof_log *log, const struct pk_record *rec,
                size_t k, uint64_t *rs, int none, struct totals *t)
{
    const char *bin = pk_env("MICD_CHECK", access("build/san/micd", X_OK) == 0
                                               ? "build/san/micd" : pk_env("MICD", "build/micd"));
    static const double ps[] = {0, 0.3, 0.6, 0.95}, ps_none[] = {0, 0.5, 0.95};
    struct pk_rebuild *b = pk_rebuild_new(log);
    size_t *pts = cut_points(log, k, rs, none);
    char dir[600];
    int ok = 1;

    if (!b || !pts) {
        pk_rebuild_free(b);
        free(pts);
        return -1;
    }
    snprintf(dir, sizeof dir, "%s/cut", base);
    for (size_t i = 0; i < k; i++) {
        struct pk_check c;
        size_t nu, na;
        double up = none ? ps_none[i % 3] : ps[pk_rnd(rs) % 4];
        unsigned seed = (unsigned)pk_rnd(rs);
        uint64_t t_cut = pts[i] ? log->rec[pts[i] - 1]->t_ns : 0;

        if (pk_rebuild_cut(b, pts[i], dir, up, seed, &nu, &na)) {
            fprintf(stderr, "powercut: cannot rebuild the store at cut %zu\n", pts[i]);
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
        printf("  cut %3zu at record %7zu/%zu (unsynced %5zu, applied %5zu, p=%.2f seed %u): "
               "%s acked %zu found %zu lost %zu events %zu acks %zu%s%s\n",
               i + 1, pts[i], log->n, nu, na, up, seed,
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
    size_t k = 25, k_none = 6;
    int ms = 3000, events = 3000, keep = 0, failed = 0;
    unsigned seed = (unsigned)getpid();
    char base[] = "/tmp/powercut-XXXXXX", logpath[700];
    struct pk_record rec;
    struct iof_log log;
    struct totals t, tn;
    uint64_t rs;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cuts") && i + 1 < argc)
            k = (size_t)strtoul(argv[++i], NULL, 10);
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
            fprintf(stderr, "usage: powercut [--cuts K] [--none-cuts K] [--ms MS] [--events N] "
                            "[--seed N] [--keep]\n");
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
    printf("powercut: seed %u, %zu cuts, %d ms of load, work in %s\n", seed, k, ms, base);

    /* fsync: every cut must keep every acknowledgement. */
    memset(&t, 0, sizeof t);
    pk_record_init(&rec);
    if (record(base, "fsync", "fsync", ms, events, seed, &rec, logpath, sizeof logpath) ||
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
    if (cuts(base, &log, &rec, k, &rs, 0, &t))
        failed = 1;
    iof_log_free(&log);
    pk_record_fini(&rec);
    printf("powercut: fsync: %zu cuts, %zu acked publishes checked, %zu found, %zu lost, "
           "%zu mismatched, %zu unexpected, %zu acks checked, %zu redelivered, "
           "%zu refused opens (%zu acked publishes unavailable), %zu crashes, %zu verified, "
           "%zu cuts failed\n",
           t.cuts, t.acked, t.found, t.lost, t.mismatched, t.unexpected, t.acks,
           t.redelivered, t.refused, t.unavailable, t.crashed, t.verified, t.failed);

    /* none: the same cuts must lose something. */
    if (k_none) {
        memset(&tn, 0, sizeof tn);
        pk_record_init(&rec);
        if (record(base, "none", "none", ms / 2 > 500 ? ms / 2 : 500, events / 2, seed + 1, &rec, logpath,
                   sizeof logpath) ||
            iof_log_load(&log, logpath)) {
            pk_record_fini(&rec);
            printf("powercut: FAIL (the --durability none recording did not complete)\n");
            return 1;
        }
        log_figures(&log, "none log");
        cuts(base, &log, &rec, k_none, &rs, 1, &tn);
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
