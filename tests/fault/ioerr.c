/* ioerr.c - T3 of issue 16: I/O errors injected into a running micd.
 *
 * Each scenario starts the release micd ($MICD, default build/micd) on a
 * fresh store under build/fault/iofault.so with one fault rule, runs
 * publishers (and, where the scenario allows, a worker that acks) until
 * micd ends or the load's time is up, then checks what the contract says
 * (DESIGN section 1; server/main.c, "Fail-stop"):
 *
 *   a  fdatasync of a journal file fails with EIO under load
 *   b  the same with ENOSPC
 *   c  fdatasync of data.mdb (a checkpoint) fails with EIO
 *   f  a journal write (pwritev) fails with EIO
 *   h  the write of an LMDB meta page of data.mdb fails with EIO (LMDB
 *      then refuses every transaction: MDB_PANIC)
 *      -> micd exits 74 (EX_IOERR) by itself, its log says "fatal:
 *         storage failed", and the interposer saw no sync of the failed
 *         file after the failed call (no fsync retried and trusted)
 *   d  a data page write to data.mdb fails once with EIO
 *      -> that commit's publishes answer 500, micd keeps serving, later
 *         publishes answer 2xx, SIGTERM stops it with status 0
 *   e  data page writes to data.mdb fail with ENOSPC while a switch file
 *      exists
 *      -> 507 storage_full meanwhile, 2xx again once the switch is gone,
 *         no restart
 *   g  (every scenario) the interposer saw no msync call at all
 *
 * and in every scenario, what was acknowledged is durable, checked twice:
 * the store directory rebuilt from the recording as a power cut at its
 * end would leave it (tests/fault/powerkit.h: only successful syncs make
 * writes durable; the writes a failed sync covered never become durable,
 * whatever sync follows), synced writes only and then with unsynced ones
 * torn and reordered; then micd restarted on the real directory without
 * the interposer.  Each must hold every publish answered 2xx and keep
 * every acked delivery acked.  (The checker also prints how many 2xx
 * arrived after the failed call: replies of commits synced before it may
 * arrive later, so that count is a figure, not the test; the rebuild is.)
 *
 *   ioerr [--only LETTERS] [--seed N] [--keep]
 *   ioerr --dump LOG        print a recording, one line per record
 *
 * Exits 0 when every scenario passed. */
#define _GNU_SOURCE
#include "powerkit.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define EX_IOERR_STATUS 74

enum expect { FATAL, SURVIVE_500, SURVIVE_507 };

struct scenario {
    char letter;
    const char *what;
    const char *rule;     /* IOFAULT; "%s" is replaced by the switch file's path */
    enum expect expect;
    int worker;
};

static const struct scenario scenarios[] = {
    {'a', "journal fdatasync fails with EIO", "fdatasync:journal:60:EIO", FATAL, 1},
    {'b', "journal fdatasync fails with ENOSPC", "fdatasync:journal:60:ENOSPC", FATAL, 1},
    {'c', "data.mdb fdatasync (a checkpoint) fails with EIO", "fdatasync:data.mdb:3:EIO", FATAL,
     1},
    {'f', "journal write fails with EIO", "pwritev:journal:60:EIO", FATAL, 1},
    {'h', "data.mdb meta page write fails with EIO", "pwrite:data.mdb:40:EIO:maxoff=8192",
     FATAL, 1},
    {'d', "data.mdb page write fails once with EIO", "anywrite:data.mdb:200:EIO:minoff=8192",
     SURVIVE_500, 0},
    {'e', "data.mdb page writes fail with ENOSPC for a while",
     "anywrite:data.mdb:while=%s:ENOSPC:minoff=8192", SURVIVE_507, 0},
};

static const char *op_name(const struct iof_rec *r)
{
    static const char *n[] = {"?",    "name", "write", "trunc", "falloc",
                              "sync", "sfr",  "msync", "mark"};
    return r->op < sizeof n / sizeof n[0] ? n[r->op] : "?";
}

static int dump(const char *path)
{
    struct iof_log l;

    if (iof_log_load(&l, path))
        return 1;
    for (size_t i = 0; i < l.n; i++) {
        const struct iof_rec *r = l.rec[i];
        printf("%7zu %14llu %-6s %-10s off %10lld len %8lld aux %8llu err %3d%s%s%s\n", i,
               (unsigned long long)r->t_ns, op_name(r),
               r->file >= 0 && r->file < l.nfiles && l.name[r->file] ? l.name[r->file] : "-",
               (long long)r->off, (long long)r->len, (unsigned long long)r->aux, r->err,
               r->flags & IOF_F_INJECTED ? " injected" : "", r->flags & IOF_F_ZERO ? " zero" : "",
               r->flags & IOF_F_FSYNC ? " fsync" : "");
    }
    iof_log_free(&l);
    return 0;
}

/* The first injected failure in 'l': its index, or -1. */
static long first_injected(const struct iof_log *l)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->rec[i]->flags & IOF_F_INJECTED)
            return (long)i;
    return -1;
}

static size_t count_2xx_after(const struct pk_record *rec, uint64_t t)
{
    size_t n = 0;
    for (size_t i = 0; i < rec->n; i++)
        n += rec->a[i].kind == PK_PUB && rec->a[i].status >= 200 && rec->a[i].status < 300 &&
             rec->a[i].t_ns > t;
    return n;
}

static int run(const struct scenario *sc, const char *base, unsigned seed)
{
    const char *bin = pk_env("MICD", "build/micd");
    const char *check_bin = pk_env("MICD_CHECK", access("build/san/micd", X_OK) == 0
                                                     ? "build/san/micd" : bin);
    const char *so = pk_env("IOFAULT_SO", "build/fault/iofault.so");
    const char *args[] = {"--journal-size", "1M", "--log-level", "warn", NULL};
    char dir[200], iolog[250], sw[250], rule[600], sopath[512], cut[250];
    char env_pre[600], env_dir[500], env_log[500], env_rule[700];
    const char *env[5];
    struct pk_micd m;
    struct pk_record rec;
    struct pk_load_opts lo;
    struct iof_log l;
    struct pk_outcome o = {1, ""};
    long inj;
    size_t late = 0, later_syncs = 0, msyncs = 0;
    int status = -1, rc;

    snprintf(dir, sizeof dir, "%s/%c", base, sc->letter);
    snprintf(iolog, sizeof iolog, "%s/%c.io", base, sc->letter);
    snprintf(sw, sizeof sw, "%s/%c.switch", base, sc->letter);
    snprintf(cut, sizeof cut, "%s/%c.cut", base, sc->letter);
    {
        /* The rule with "%s" replaced by the switch file's path. */
        const char *at = strstr(sc->rule, "%s");
        if (at)
            snprintf(rule, sizeof rule, "%.*s%s%s", (int)(at - sc->rule), sc->rule, sw, at + 2);
        else
            snprintf(rule, sizeof rule, "%s", sc->rule);
    }
    if (mkdir(dir, 0700) || !realpath(so, sopath)) {
        fprintf(stderr, "ioerr: %s: %s\n", dir, strerror(errno));
        return 0;
    }
    snprintf(env_pre, sizeof env_pre, "LD_PRELOAD=%s", sopath);
    snprintf(env_dir, sizeof env_dir, "IOFAULT_DIR=%s", dir);
    snprintf(env_log, sizeof env_log, "IOFAULT_LOG=%s", iolog);
    snprintf(env_rule, sizeof env_rule, "IOFAULT=%s", rule);
    env[0] = env_pre;
    env[1] = env_dir;
    env[2] = env_log;
    env[3] = env_rule;
    env[4] = NULL;
    memset(&m, 0, sizeof m);
    snprintf(m.dir, sizeof m.dir, "%s", dir);
    pk_record_init(&rec);
    if ((rc = pk_micd_start(&m, bin, args, env, 30000)) != 0 || pk_setup(&m)) {
        pk_fail(&o, "micd under the interposer did not start and take its set-up (%d; log %s)", rc,
             m.logpath);
        pk_micd_kill(&m);
        goto report;
    }
    memset(&lo, 0, sizeof lo);
    lo.publishers = 3;
    lo.worker = sc->worker;
    lo.seed = seed;
    lo.m = &m;
    if (sc->expect == SURVIVE_507) {
        /* Before, during (the switch file exists), after. */
        FILE *f;
        lo.ms = 400;
        pk_load_run(&lo, &rec);
        size_t before = rec.pubs_2xx;
        if (!(f = fopen(sw, "w"))) {
            pk_fail(&o, "cannot create %s", sw);
            pk_micd_kill(&m);
            goto report;
        }
        fclose(f);
        lo.ms = 1500;
        lo.seed = seed + 1;
        pk_load_run(&lo, &rec);
        size_t during_507 = rec.n507, during_2xx = rec.pubs_2xx - before;
        unlink(sw);
        lo.ms = 1500;
        lo.seed = seed + 2;
        pk_load_run(&lo, &rec);
        printf("  e: before %zu 2xx; while full %zu answered 507, %zu 2xx; after %zu 2xx\n",
               before, during_507, during_2xx, rec.pubs_2xx - before - during_2xx);
        if (!before)
            pk_fail(&o, "no publish succeeded before the disk filled");
        if (!during_507)
            pk_fail(&o, "no publish answered 507 while the disk was full");
        if (rec.n507 + rec.pubs_2xx + rec.by_status[0] < rec.n - rec.acks_ok)
            pk_fail(&o, "answers other than 2xx and 507 (first: %ld %s)", rec.first_fail_status,
                 rec.first_fail_code);
        if (rec.pubs_2xx - before - during_2xx == 0)
            pk_fail(&o, "publishing did not work again once the disk had room");
    } else {
        /* A fatal failure ends the load when micd exits: the time is a bound. */
        lo.ms = sc->expect == FATAL ? 20000 : 2500;
        pk_load_run(&lo, &rec);
    }
    if (sc->expect == FATAL) {
        if (!pk_micd_wait(&m, 30000)) {
            pk_fail(&o, "micd still running after the failure");
            pk_micd_kill(&m);
        } else {
            status = WIFEXITED(m.status) ? WEXITSTATUS(m.status) : -1;
            if (status != EX_IOERR_STATUS)
                pk_fail(&o, "micd ended with %s %d, not exit status 74",
                     WIFSIGNALED(m.status) ? "signal" : "status",
                     WIFSIGNALED(m.status) ? WTERMSIG(m.status) : status);
            if (!pk_log_has(&m, "fatal: storage failed"))
                pk_fail(&o, "no \"fatal: storage failed\" line in %s", m.logpath);
        }
    } else {
        if (pk_micd_wait(&m, 0))
            pk_fail(&o, "micd ended (status %d) instead of serving on",
                 WIFEXITED(m.status) ? WEXITSTATUS(m.status) : -1);
        else if ((status = pk_micd_stop(&m)) != 0)
            pk_fail(&o, "SIGTERM: exit status %d", status);
        if (sc->expect == SURVIVE_500 && !rec.n500)
            pk_fail(&o, "no publish answered 500 for the failed commit");
        if (sc->expect == SURVIVE_500 && rec.pubs_fail != rec.n500)
            pk_fail(&o, "%zu publishes failed, %zu of them with 500 (first: %ld %s)", rec.pubs_fail,
                 rec.n500, rec.first_fail_status, rec.first_fail_code);
    }
    /* The recording: the injected failure, what came after it, msync. */
    if (iof_log_load(&l, iolog)) {
        pk_fail(&o, "cannot read the recording %s", iolog);
        goto report;
    }
    inj = first_injected(&l);
    if (inj < 0) {
        pk_fail(&o, "the rule never fired (%s)", rule);
    } else {
        const struct iof_rec *f = l.rec[inj];
        for (size_t i = (size_t)inj + 1; i < l.n; i++)
            later_syncs += l.rec[i]->op == IOF_SYNC && l.rec[i]->file == f->file;
        late = count_2xx_after(&rec, f->t_ns);
        if (sc->expect == FATAL && f->op == IOF_SYNC && later_syncs)
            pk_fail(&o, "%zu syncs of %s after the failed one (a retried fsync)", later_syncs,
                 l.name[f->file]);
        if (sc->expect == SURVIVE_500 && !count_2xx_after(&rec, l.rec[l.n - 1]->t_ns) &&
            !late)
            pk_fail(&o, "no publish answered 2xx after the failed write");
    }
    for (size_t i = 0; i < l.n; i++)
        msyncs += l.rec[i]->op == IOF_MSYNC;
    if (msyncs)
        pk_fail(&o, "g: %zu msync calls (micd should make none)", msyncs);
    /* Durable: rebuilt as a power cut at the end would leave it. */
    {
        struct pk_rebuild *b = pk_rebuild_new(&l);
        static const double ps[] = {0, 0.6};
        for (int v = 0; b && v < 2; v++) {
            struct pk_check c;
            size_t nu, na;
            if (pk_rebuild_cut(b, l.n, cut, ps[v], seed + (unsigned)v, &nu, &na)) {
                pk_fail(&o, "cannot rebuild the store");
                break;
            }
            pk_check_dir(check_bin, cut, &rec, UINT64_MAX, &c);
            printf("  %c: power cut at the end (unsynced %zu, applied %zu): %s acked %zu found "
                   "%zu lost %zu acks %zu%s%s\n",
                   sc->letter, nu, na, c.started ? "opened" : c.refused ? "REFUSED" : "CRASHED",
                   c.acked, c.found, c.lost, c.acks, c.why[0] ? " -- " : "", c.why);
            if (!pk_check_ok(&c, 0))
                pk_fail(&o, "after a power cut: %s", c.why[0] ? c.why : "refused to open");
        }
        if (!b)
            pk_fail(&o, "out of memory");
        pk_rebuild_free(b);
        pk_rmdir(cut);
    }
    /* Restarted on its own directory, without the interposer. */
    {
        struct pk_check c;
        pk_check_dir(check_bin, dir, &rec, UINT64_MAX, &c);
        printf("  %c: restart: %s acked %zu found %zu lost %zu acks %zu%s%s\n", sc->letter,
               c.started ? "opened" : c.refused ? "REFUSED" : "CRASHED", c.acked, c.found,
               c.lost, c.acks, c.why[0] ? " -- " : "", c.why);
        if (!pk_check_ok(&c, 0))
            pk_fail(&o, "after the restart: %s", c.why[0] ? c.why : "refused to open");
    }
    printf("  %c: failed call at record %ld of %zu (%s %s), %zu publishes 2xx (%zu received "
           "after the failed call), %zu not, %zu acks; later syncs of that file %zu; "
           "msync %zu; exit status %d\n",
           sc->letter, inj, l.n, inj >= 0 ? op_name(l.rec[inj]) : "-",
           inj >= 0 && l.rec[inj]->file >= 0 ? l.name[l.rec[inj]->file] : "-", rec.pubs_2xx,
           late, rec.pubs_fail, rec.acks_ok, later_syncs, msyncs, status);
    iof_log_free(&l);
report:
    printf("ioerr %c (%s; IOFAULT=%s): %s%s\n", sc->letter, sc->what, rule,
           o.ok ? "PASS" : "FAIL: ", o.why);
    pk_record_fini(&rec);
    return o.ok;
}

int main(int argc, char **argv)
{
    const char *only = NULL;
    unsigned seed = (unsigned)getpid();
    char base[] = "/tmp/ioerr-XXXXXX";
    int keep = 0, passed = 0, ran = 0;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dump") && i + 1 < argc)
            return dump(argv[i + 1]);
        if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = (unsigned)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--keep"))
            keep = 1;
        else {
            fprintf(stderr, "usage: ioerr [--only LETTERS] [--seed N] [--keep] | --dump LOG\n");
            return 2;
        }
    }
    if (!mkdtemp(base)) {
        perror("ioerr: mkdtemp");
        return 1;
    }
    printf("ioerr: seed %u, work in %s\n", seed, base);
    for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++) {
        if (only && !strchr(only, scenarios[i].letter))
            continue;
        ran++;
        passed += run(&scenarios[i], base, seed + (unsigned)i * 100);
    }
    printf("ioerr: %d of %d scenarios passed (g, no msync, checked in each)\n", passed, ran);
    if (passed != ran) {
        printf("ioerr: FAIL (seed %u; stores and recordings kept in %s)\n", seed, base);
        return 1;
    }
    if (!keep)
        pk_rmdir(base);
    return 0;
}
