/* fullcut.c - a full disk at each boundary of the journal (issue 29,
 * point 9; tests/fault/README.md, "A full disk at the journal's
 * boundaries").
 *
 * Each scenario starts the release micd ($MICD, default build/micd) on a
 * fresh store with a small journal (--journal-size 256K: a switch every
 * few dozen commits) under build/fault/iofault.so, whose rules make the
 * filesystem "full" from one exact call on: a mark rule creates the
 * switch file when that call comes (iofault.c: mark=PATH, mark-after=PATH),
 * and while the switch file exists
 *
 *     anywrite:journal:while=SW:ENOSPC:extend        every write that would
 *                                                    make a journal file longer
 *     anywrite:data.mdb:while=SW:ENOSPC:minoff=META  every page write of data.mdb
 *
 * fail with ENOSPC (overwrites of a journal file's written room still
 * succeed, as on a real full filesystem; data.mdb's page writes all fail,
 * as in ioerr's scenario e, so that no commit slips through the full
 * period).  The boundaries:
 *
 *   s  switch: the new file's zero-ahead.  journal-1 got no room written
 *      at open (its zero-ahead refused, as on a disk full at start), and
 *      the disk fills exactly when the first switch into it writes that
 *      room (its second zero write).  Before it the load is one publisher,
 *      one request at a time, so that no other commit is in flight at the
 *      switch (the window of issue 29 point 1: nothing commits between the
 *      refused switch and the room coming back)
 *   h  switch: the header write.  Full from the first header write of a
 *      journal file once the set-up is done (a switch)
 *   r  the first record of a file: full from the next write of records at
 *      offset hdr_size of a journal file
 *   z  the zero-ahead of the active file: checkpoints take 3 s (a
 *      delay=3000 rule on data.mdb's fdatasync), so the active file grows
 *      past its first 2 MiB of room, and the disk fills at the first write
 *      ahead beyond it
 *   k  checkpoint start: full from the first sync_file_range of data.mdb
 *      after the next header write (the checkpoint that switch asked for)
 *   e  checkpoint end: full from the moment that checkpoint's fdatasync of
 *      data.mdb returned
 *
 * The rules take effect once the program has made the topics and the group
 * (a {GO} file: the boundary is the next one after the set-up; in rounds
 * 1, 2, 3 of h, r, k and e after 300, 600, 900 ms more of load, so that
 * later switches are taken too).
 * In each: publishers (and a worker that acks) run until the boundary
 * comes (the switch file appears; at most 20 s), publishers alone for
 * --full-ms while the disk is full (507s expected), then the switch file
 * is removed and one publisher sends --after-events single events (2xx
 * expected; few, so that micd is killed while the journal file in use at
 * the end of the full period may still be the active one).  micd is then
 * killed with SIGKILL, and
 *   (1) the store is rebuilt from the recording as power cuts would leave
 *       it (tests/fault/powerkit.h): once the disk had room again, just
 *       after the 2nd journal fdatasync and just before the next header
 *       write of a journal file, then at the end (synced writes only, and
 *       with unsynced ones torn and reordered); each opened by $MICD_CHECK
 *       (default build/san/micd) and checked against the publishes
 *       answered before the cut;
 *   (2) micd is restarted on the real directory.
 * Each must hold every publish answered 2xx with the fields sent, nothing
 * nobody sent, every ack answered still dispatched, a clean SIGTERM and
 * `micd --verify` exit 0; and no event whose every publish was answered
 * 507 may be in the store ("stored despite 507": a 507 means not stored,
 * DESIGN section 1; counted as a failure, printed apart from the lost
 * ones).  micd must not end by itself during the scenario (a full disk is
 * a 507, not a failure), and every publish must be answered 2xx or 507.
 *
 *   fullcut [--only LETTERS] [--rounds N] [--full-ms MS] [--after-events N]
 *           [--journal-size S] [--seed N] [--keep]
 *
 * --rounds N runs every scenario N times (each with its own seed).
 * Prints a line per step and scenario, the totals and one JSON line; exits
 * 0 when every scenario passed, 1 when not, 2 on a usage error.  Works in
 * /tmp/fullcut-XXXXXX, removed at the end unless --keep or a failure. */
#define _GNU_SOURCE
#include "powerkit.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define FULL_RULES                                 \
    "anywrite:journal:while={SW}:ENOSPC:extend;" \
    "anywrite:data.mdb:while={SW}:ENOSPC:minoff={META}"

struct scenario {
    char letter;
    const char *kind;     /* the boundary, for the figures */
    const char *what;
    const char *rules;    /* before FULL_RULES; {SW} {GO} {A} {HDR} {HDR1} {ROOM} {META}
                           * replaced ({GO} exists once the set-up is done) */
    int vary;             /* round i loads (i % 4) * 300 ms before {GO} is made */
    int serial;           /* before the boundary: one publisher, no worker */
};

static const struct scenario scenarios[] = {
    {'s', "switch (room)", "the disk fills when a switch writes the new file's room ahead",
     "anywrite:journal-1:1:ENOSPC:zero;anywrite:journal-1:while={GO}:mark={SW}:zero;", 0, 1},
    {'h', "switch (header)", "the disk fills at the header write of a switch",
     "anywrite:journal:while={GO}:mark={SW}:maxoff=1;", 1, 0},
    {'r', "first record", "the disk fills at the first record of a journal file",
     "anywrite:journal:while={GO}:mark={SW}:data:minoff={HDR}:maxoff={HDR1};", 1, 0},
    {'z', "zero-ahead", "checkpoints take 3 s; the disk fills when the active file, past "
     "its first room, is written ahead",
     "sync_file_range:data.mdb:1:mark={A};fdatasync:data.mdb:while={A}:delay=3000;"
     "anywrite:journal:while={GO}:mark={SW}:zero:minoff={ROOM};", 0, 0},
    {'k', "checkpoint start", "the disk fills when a checkpoint starts",
     "anywrite:journal:while={GO}:mark={A}:maxoff=1;"
     "sync_file_range:data.mdb:while={A}:mark={SW};", 1, 0},
    {'e', "checkpoint end", "the disk fills when a checkpoint's fdatasync returned",
     "anywrite:journal:while={GO}:mark={A}:maxoff=1;"
     "fdatasync:data.mdb:while={A}:mark-after={SW};", 1, 0},
};
#define NSCEN (sizeof scenarios / sizeof scenarios[0])

struct opts {
    int full_ms, after_events;
    const char *jsize;
};

/* Figures of one scenario run, and of all (summed). */
struct figs {
    size_t runs, passed;
    size_t before_2xx, before_507, full_507, full_2xx, after_2xx, after_507, other_fail;
    size_t inj_journal, inj_data;
    size_t acked, lost, mismatched, unexpected, redelivered, refused_stored;
    size_t bad_opens, bad_verify, micd_ended;
};

static void add(struct figs *t, const struct figs *f)
{
    size_t *a = (size_t *)t;
    const size_t *b = (const size_t *)f;
    for (size_t i = 0; i < sizeof *t / sizeof(size_t); i++)
        a[i] += b[i];
}

/* 'tmpl' with its {NAME}s replaced into out[cap]. */
static void expand(const char *tmpl, char *out, size_t cap, const char *sw, const char *go,
                   const char *aux, long hdr, long meta)
{
    size_t o = 0;

    for (const char *p = tmpl; *p && o + 1 < cap;) {
        char val[300];
        const char *v = NULL;
        size_t skip = 0;
        if (!strncmp(p, "{SW}", 4))
            v = sw, skip = 4;
        else if (!strncmp(p, "{A}", 3))
            v = aux, skip = 3;
        else if (!strncmp(p, "{GO}", 4))
            v = go, skip = 4;
        else if (!strncmp(p, "{HDR}", 5))
            snprintf(val, sizeof val, "%ld", hdr), v = val, skip = 5;
        else if (!strncmp(p, "{HDR1}", 6))
            snprintf(val, sizeof val, "%ld", hdr + 1), v = val, skip = 6;
        else if (!strncmp(p, "{ROOM}", 6))
            snprintf(val, sizeof val, "%ld", hdr + (2L << 20)), v = val, skip = 6;
        else if (!strncmp(p, "{META}", 6))
            snprintf(val, sizeof val, "%ld", meta), v = val, skip = 6;
        if (v) {
            o += (size_t)snprintf(out + o, cap - o, "%s", v);
            p += skip;
        } else {
            out[o++] = *p++;
        }
    }
    out[o < cap ? o : cap - 1] = 0;
}

/* Publishes answered 2xx and 507 (and neither) in rec since answer
 * 'from'; *first_other: the status of the first that was neither (0: no
 * answer), kept when set already. */
static void count_pubs(const struct pk_record *rec, size_t from, size_t *ok, size_t *n507,
                       size_t *other, long *first_other)
{
    *ok = *n507 = *other = 0;
    for (size_t i = from; i < rec->n; i++) {
        const struct pk_ans *a = &rec->a[i];
        if (a->kind != PK_PUB)
            continue;
        if (a->status >= 200 && a->status < 300)
            ++*ok;
        else if (a->status == 507)
            ++*n507;
        else if (!(*other)++ && *first_other < 0)
            *first_other = a->status;
    }
}

/* Run the load for 'ms' (until 'stop' exists, when given) with seed
 * 'seed'; returns the index of rec's first answer of this phase. */
static size_t phase(struct pk_micd *m, struct pk_record *rec, int ms, int publishers,
                    int worker, int max_events, unsigned seed, const char *stop)
{
    struct pk_load_opts lo;
    size_t from = rec->n;

    memset(&lo, 0, sizeof lo);
    lo.ms = ms;
    lo.max_events = max_events;
    lo.publishers = publishers;
    lo.worker = worker;
    lo.seed = seed;
    lo.m = m;
    lo.stop_path = stop;
    pk_load_run(&lo, rec);
    /* pk_load_run sorts every answer by time: this phase's are the newest. */
    return from;
}

/* Print what a check of a store found. */
static void check_line(const char *what, const struct pk_check *c)
{
    int r = c->refused_stored > 0;

    printf("    %s: %s acked %zu found %zu lost %zu mismatched %zu unexpected %zu acks %zu "
           "redelivered %zu; stored despite 507: %zu%s%s%s; verify %d%s%s\n",
           what, c->started ? "opened" : c->refused ? "REFUSED" : "CRASHED", c->acked, c->found,
           c->lost, c->mismatched, c->unexpected, c->acks, c->ack_redelivered, c->refused_stored,
           r ? " (first " : "", r ? c->refused_id : "", r ? ")" : "", c->verify_status,
           c->why[0] ? " -- " : "", c->why);
}

/* Add check c to the figures; a broken promise fails the run. */
static void take(struct figs *f, const struct pk_check *c, struct pk_outcome *o, const char *what)
{
    f->acked += c->acked;
    f->lost += c->lost;
    f->mismatched += c->mismatched;
    f->unexpected += c->unexpected;
    f->redelivered += c->ack_redelivered;
    f->refused_stored += c->refused_stored;
    f->bad_opens += !c->started;
    f->bad_verify += c->verify_status != 0 && c->verify_status != -2;
    if (!pk_check_ok(c, 0))
        pk_fail(o, "%s: %s", what, c->why[0] ? c->why : "refused to open");
    else if (c->refused_stored)
        pk_fail(o, "%s: %zu events answered only 507 are stored (first %s)", what,
             c->refused_stored, c->refused_id);
}

/* Run scenario sc once (its round 'round') in base; fills *f.  Returns 1
 * when it passed. */
static int run(const struct scenario *sc, int round, const char *base, unsigned seed,
               const struct opts *op, struct figs *f)
{
    const char *bin = pk_env("MICD", "build/micd");
    const char *check_bin = pk_env("MICD_CHECK", access("build/san/micd", X_OK) == 0
                                                     ? "build/san/micd" : bin);
    const char *so = pk_env("IOFAULT_SO", "build/fault/iofault.so");
    const char *args[] = {"--journal-size", op->jsize, "--log-level", "warn", NULL};
    long psize = sysconf(_SC_PAGESIZE), hdr = 4096 + 2 * psize;
    char dir[200], iolog[250], sw[250], go[250], aux[250], cut[250], tmpl[1200], rule[1600];
    char sopath[512], env_pre[600], env_dir[500], env_log[500], env_rule[1700];
    const char *env[5];
    struct pk_micd m;
    struct pk_record rec;
    struct iof_log l;
    struct pk_outcome o = {1, ""};
    struct stat sb;
    size_t from_full, from_after, x, y, z, cut_at[4], ncut = 0;
    long mark_at = -1, first_other = -1;
    uint64_t t_free = 0;

    memset(f, 0, sizeof *f);
    f->runs = 1;
    snprintf(dir, sizeof dir, "%s/%c%d", base, sc->letter, round);
    snprintf(iolog, sizeof iolog, "%s.io", dir);
    snprintf(sw, sizeof sw, "%s.full", dir);
    snprintf(go, sizeof go, "%s.go", dir);
    snprintf(aux, sizeof aux, "%s.armed", dir);
    snprintf(cut, sizeof cut, "%s.cut", dir);
    snprintf(tmpl, sizeof tmpl, "%s%s", sc->rules, FULL_RULES);
    expand(tmpl, rule, sizeof rule, sw, go, aux, hdr, 2 * psize);
    if (mkdir(dir, 0700) || !realpath(so, sopath)) {
        fprintf(stderr, "fullcut: %s: %s\n", dir, strerror(errno));
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
    printf("fullcut %c%d: %s (IOFAULT=%s)\n", sc->letter, round, sc->what, rule);
    if (pk_micd_start(&m, bin, args, env, 30000) != 0 || pk_setup(&m)) {
        pk_fail(&o, "micd under the interposer did not start and take its set-up (log %s)",
             m.logpath);
        pk_micd_kill(&m);
        goto report;
    }
    /* Before: (some load, then) the boundary may come, and the load runs
     * until it has made the disk full. */
    if (sc->vary && round % 4)
        phase(&m, &rec, (round % 4) * 300, 3, 1, 0, seed + 3, NULL);
    {
        FILE *g = fopen(go, "w");
        if (!g) {
            pk_fail(&o, "cannot create %s", go);
            pk_micd_kill(&m);
            goto report;
        }
        fclose(g);
    }
    phase(&m, &rec, 20000, sc->serial ? 1 : 3, !sc->serial, 0, seed, sw);
    if (stat(sw, &sb)) {
        pk_fail(&o, "the boundary never came (no %s after %zu publishes)", sw, rec.pubs_2xx);
        pk_micd_kill(&m);
        goto report;
    }
    /* A 507 may come already: the commit at the boundary, or one in flight. */
    count_pubs(&rec, 0, &f->before_2xx, &f->before_507, &y, &first_other);
    f->other_fail += y;
    /* Full: publishers alone. */
    from_full = phase(&m, &rec, op->full_ms, 3, 0, 0, seed + 1, NULL);
    count_pubs(&rec, from_full, &f->full_2xx, &f->full_507, &x, &first_other);
    f->other_fail += x;
    unlink(sw);
    t_free = pk_now_ns();
    /* Room again. */
    from_after = phase(&m, &rec, 20000, 1, 0, op->after_events, seed + 2, NULL);
    count_pubs(&rec, from_after, &f->after_2xx, &f->after_507, &z, &first_other);
    f->other_fail += z;
    printf("    publishes: before %zu 2xx, %zu 507; while full %zu 507, %zu 2xx; after %zu 2xx, "
           "%zu 507; %zu answered neither; %zu acks\n",
           f->before_2xx, f->before_507, f->full_507, f->full_2xx, f->after_2xx, f->after_507,
           f->other_fail, rec.acks_ok);
    if (pk_micd_wait(&m, 0)) {
        f->micd_ended = 1;
        pk_fail(&o, "micd ended by itself (status %d; log %s)",
             WIFEXITED(m.status) ? WEXITSTATUS(m.status) : -1, m.logpath);
    }
    if (!f->full_507)
        pk_fail(&o, "no publish answered 507 while the disk was full");
    if (!f->after_2xx)
        pk_fail(&o, "no publish answered 2xx once the disk had room");
    if (f->other_fail)
        pk_fail(&o, "%zu publishes answered neither 2xx nor 507 (the first: %ld)", f->other_fail,
             first_other);
    pk_micd_kill(&m);
    /* The recording: where the boundary was, what was refused. */
    if (iof_log_load(&l, iolog)) {
        pk_fail(&o, "cannot read the recording %s", iolog);
        goto report;
    }
    {
        int data = iof_log_file(&l, "data.mdb");
        for (size_t i = 0; i < l.n; i++) {
            const struct iof_rec *r = l.rec[i];
            if (r->op == IOF_MARK && mark_at < 0 && r->datalen == strlen(sw) &&
                !memcmp(iof_data(r), sw, r->datalen))
                mark_at = (long)i;
            if ((r->flags & IOF_F_INJECTED) && mark_at >= 0) {
                if (r->file == data)
                    f->inj_data++;
                else
                    f->inj_journal++;
            }
        }
        /* Once there was room again: a cut just after the 2nd journal
         * fdatasync (the commits of the first are acknowledged by then)
         * and one just before the next header write of a journal file
         * (the next switch: the longest the new file has been in use);
         * then two at the end. */
        size_t syncs = 0;
        for (size_t i = 0; i < l.n && ncut < 2; i++) {
            const struct iof_rec *r = l.rec[i];
            int jnl = r->file >= 0 && l.name[r->file] && !strncmp(l.name[r->file], "journal-", 8);
            if (!jnl || r->t_ns <= t_free)
                continue;
            if (r->op == IOF_SYNC && ++syncs == 2 && !ncut)
                cut_at[ncut++] = i + 1;
            else if (r->op == IOF_WRITE && r->off == 0 && !(r->flags & IOF_F_ZERO) && syncs &&
                     (!ncut || cut_at[ncut - 1] <= i))
                cut_at[ncut++] = i;
        }
        cut_at[ncut++] = l.n;
        cut_at[ncut++] = l.n;
        printf("    recording: %zu records; full from record %ld; ENOSPC injected: %zu journal "
               "writes, %zu data.mdb writes\n",
               l.n, mark_at, f->inj_journal, f->inj_data);
    }
    /* (1) Power cuts: once there was room again, and at the end. */
    {
        struct pk_rebuild *b = pk_rebuild_new(&l);
        for (size_t v = 0; b && v < ncut; v++) {
            struct pk_check c;
            size_t nu, na;
            double up = v + 1 == ncut ? 0.6 : 0;
            uint64_t t_cut = cut_at[v] < l.n ? l.rec[cut_at[v] - 1]->t_ns : UINT64_MAX;
            char what[120];
            if (pk_rebuild_cut(b, cut_at[v], cut, up, seed + (unsigned)v, &nu, &na)) {
                pk_fail(&o, "cannot rebuild the store");
                break;
            }
            pk_check_dir(check_bin, cut, &rec, t_cut, &c);
            snprintf(what, sizeof what, "power cut at record %zu%s (unsynced %zu, applied %zu)",
                     cut_at[v], cut_at[v] == l.n ? " (the end)" : "", nu, na);
            check_line(what, &c);
            take(f, &c, &o, "after a power cut");
        }
        if (!b)
            pk_fail(&o, "out of memory");
        pk_rebuild_free(b);
        pk_rmdir(cut);
    }
    iof_log_free(&l);
    /* (2) kill -9, then micd restarted on its own directory. */
    {
        struct pk_check c;
        pk_check_dir(check_bin, dir, &rec, UINT64_MAX, &c);
        check_line("kill -9 and restart", &c);
        take(f, &c, &o, "after kill -9 and a restart");
    }
report:
    printf("fullcut %c%d (%s): %s%s\n", sc->letter, round, sc->kind, o.ok ? "PASS" : "FAIL: ",
           o.why);
    pk_record_fini(&rec);
    f->passed = (size_t)o.ok;
    return o.ok;
}

int main(int argc, char **argv)
{
    const char *only = NULL;
    unsigned seed = (unsigned)getpid();
    char base[] = "/tmp/fullcut-XXXXXX";
    struct opts op = {800, 10, "256K"};
    struct figs per[NSCEN], all;
    int keep = 0, rounds = 1, passed = 0, ran = 0;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--full-ms") && i + 1 < argc)
            op.full_ms = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--after-events") && i + 1 < argc)
            op.after_events = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--journal-size") && i + 1 < argc)
            op.jsize = argv[++i];
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = (unsigned)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--keep"))
            keep = 1;
        else {
            fprintf(stderr, "usage: fullcut [--only LETTERS] [--rounds N] [--full-ms MS] "
                            "[--after-events N] [--journal-size S] [--seed N] [--keep]\n");
            return 2;
        }
    }
    if (rounds < 1 || op.full_ms < 100 || op.after_events < 1) {
        fprintf(stderr, "fullcut: --rounds and --after-events must be >= 1, --full-ms >= 100\n");
        return 2;
    }
    if (!mkdtemp(base)) {
        perror("fullcut: mkdtemp");
        return 1;
    }
    printf("fullcut: seed %u, %d round(s), --journal-size %s, full for %d ms, then %d events, "
           "work in %s\n", seed, rounds, op.jsize, op.full_ms, op.after_events, base);
    memset(per, 0, sizeof per);
    memset(&all, 0, sizeof all);
    for (int r = 0; r < rounds; r++)
        for (size_t i = 0; i < NSCEN; i++) {
            struct figs f;
            if (only && !strchr(only, scenarios[i].letter))
                continue;
            ran++;
            passed += run(&scenarios[i], r, base, seed + (unsigned)(r * 1000 + (int)i * 100), &op,
                          &f);
            add(&per[i], &f);
            add(&all, &f);
        }
    printf("fullcut: per boundary (runs passed/made; publishes before, 507 and 2xx while full, "
           "after; acked publishes checked, lost, stored despite 507):\n");
    for (size_t i = 0; i < NSCEN; i++) {
        const struct figs *f = &per[i];
        if (!f->runs)
            continue;
        printf("  %c %-17s %zu/%zu  %6zu %6zu %5zu %6zu  acked %7zu lost %5zu  stored despite "
               "507 %5zu  (ENOSPC: %zu journal, %zu data.mdb; bad opens %zu, verify failed %zu, "
               "micd ended %zu)\n",
               scenarios[i].letter, scenarios[i].kind, f->passed, f->runs, f->before_2xx,
               f->full_507, f->full_2xx, f->after_2xx, f->acked, f->lost, f->refused_stored,
               f->inj_journal, f->inj_data, f->bad_opens, f->bad_verify, f->micd_ended);
    }
    printf("{\"fullcut\":{\"seed\":%u,\"rounds\":%d,\"journal_size\":\"%s\",\"runs\":%d,"
           "\"passed\":%d,\"acked\":%zu,\"lost\":%zu,\"mismatched\":%zu,\"unexpected\":%zu,"
           "\"redelivered\":%zu,\"stored_despite_507\":%zu,\"full_507\":%zu,\"after_2xx\":%zu,"
           "\"bad_opens\":%zu,\"verify_failed\":%zu,\"micd_ended\":%zu,\"by_boundary\":{",
           seed, rounds, op.jsize, ran, passed, all.acked, all.lost, all.mismatched,
           all.unexpected, all.redelivered, all.refused_stored, all.full_507, all.after_2xx,
           all.bad_opens, all.bad_verify, all.micd_ended);
    for (size_t i = 0, first = 1; i < NSCEN; i++) {
        if (!per[i].runs)
            continue;
        printf("%s\"%c\":{\"runs\":%zu,\"passed\":%zu,\"lost\":%zu,\"stored_despite_507\":%zu}",
               first ? "" : ",", scenarios[i].letter, per[i].runs, per[i].passed, per[i].lost,
               per[i].refused_stored);
        first = 0;
    }
    printf("}}}\n");
    printf("fullcut: %d of %d runs passed\n", passed, ran);
    if (passed != ran) {
        printf("fullcut: FAIL (seed %u; stores, logs and recordings kept in %s)\n", seed, base);
        return 1;
    }
    if (!keep)
        pk_rmdir(base);
    printf("fullcut: PASS\n");
    return 0;
}
