/* pgfx.c - a real PostgreSQL for a test (pgfx.h): the cluster's directory,
 * initdb and the postmaster as child processes of the test, the wait for
 * its first session, the database, and the stop.
 *
 * Children are forked and exec'd directly (no shell, no runuser: runuser
 * stays as the parent of what it runs, so its PID is not the server's and
 * a signal to it is not PostgreSQL's).  A child run as root drops to the
 * `postgres` user itself, then asks for SIGQUIT when the test process
 * dies (set after the drop, which would clear it), then execs.  The
 * children's output goes to DIR/initdb.log and DIR/postgres.log; a failure
 * prints the tail of the log concerned. */
#define _GNU_SOURCE
#include "pgfx.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PGFX_READY_MS 60000  /* how long the server may take to accept a session */
#define PGFX_STOP_MS  30000  /* how long a fast shutdown may take before SIGKILL */

/* ---- Processes ---- */

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) && errno == EINTR)
        ;
}

static long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* Who the children run as: the `postgres` user when we are root. */
struct runas {
    int drop;
    uid_t uid;
    gid_t gid;
};

static int runas_get(struct runas *r)
{
    struct passwd *pw;

    memset(r, 0, sizeof *r);
    if (geteuid() != 0)
        return 0;
    if (!(pw = getpwnam("postgres"))) {
        fprintf(stderr, "pgfx: running as root, and there is no user postgres to run PostgreSQL as\n");
        return -1;
    }
    r->drop = 1;
    r->uid = pw->pw_uid;
    r->gid = pw->pw_gid;
    return 0;
}

/* Fork and exec argv[0] (a full path) as r's user in 'dir', its stdout and
 * stderr appended to 'log'.  Returns the child's PID, or -1. */
static pid_t spawn(const struct runas *r, const char *dir, const char *log, char *const argv[])
{
    pid_t ppid = getpid();
    pid_t pid;
    int fd;

    if ((fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) < 0) {
        fprintf(stderr, "pgfx: %s: %s\n", log, strerror(errno));
        return -1;
    }
    pid = fork();
    if (pid < 0) {
        fprintf(stderr, "pgfx: fork: %s\n", strerror(errno));
        close(fd);
        return -1;
    }
    if (pid == 0) {
        /* the child: only async-signal-safe calls until exec */
        if (dup2(fd, 1) < 0 || dup2(fd, 2) < 0 || chdir(dir))
            _exit(126);
        if (r->drop && (setgroups(1, &r->gid) || setgid(r->gid) || setuid(r->uid)))
            _exit(126);
        if (prctl(PR_SET_PDEATHSIG, SIGQUIT) || getppid() != ppid)
            _exit(126);
        execv(argv[0], argv);
        _exit(127);
    }
    close(fd);
    return pid;
}

/* Wait up to 'ms' for 'pid' to exit.  Returns 0 and its status in *st, or
 * -1 if it is still running. */
static int reap_within(pid_t pid, long ms, int *st)
{
    long end = now_ms() + ms;
    pid_t w;

    for (;;) {
        w = waitpid(pid, st, WNOHANG);
        if (w == pid || (w < 0 && errno != EINTR))
            return 0;
        if (now_ms() >= end)
            return -1;
        nap_ms(10);
    }
}

/* Print the last lines (about 2 KiB) of 'path' on stderr. */
static void log_tail(const char *path)
{
    char buf[2048];
    size_t n;
    FILE *fp = fopen(path, "r");
    long size;

    if (!fp)
        return;
    if (!fseek(fp, 0, SEEK_END) && (size = ftell(fp)) > (long)sizeof buf - 1)
        fseek(fp, size - (long)(sizeof buf - 1), SEEK_SET);
    else
        rewind(fp);
    n = fread(buf, 1, sizeof buf - 1, fp);
    buf[n] = '\0';
    fclose(fp);
    fprintf(stderr, "pgfx: the end of %s:\n%s\n", path, buf);
}

/* ---- The cluster's files ---- */

/* The newest /usr/lib/postgresql/N/bin holding a postgres binary. */
static int find_bindir(char *out, size_t len)
{
    DIR *d = opendir("/usr/lib/postgresql");
    struct dirent *e;
    char path[300];
    long best = -1;

    if (!d) {
        fprintf(stderr, "pgfx: /usr/lib/postgresql: %s (is Debian's postgresql installed?)\n",
                strerror(errno));
        return -1;
    }
    while ((e = readdir(d))) {
        char *end;
        long v = strtol(e->d_name, &end, 10);

        if (end == e->d_name || v <= best)
            continue;
        snprintf(path, sizeof path, "/usr/lib/postgresql/%s/bin/postgres", e->d_name);
        if (access(path, X_OK))
            continue;
        best = v;
        snprintf(out, len, "/usr/lib/postgresql/%s/bin", e->d_name);
    }
    closedir(d);
    if (best < 0) {
        fprintf(stderr, "pgfx: no /usr/lib/postgresql/N/bin/postgres\n");
        return -1;
    }
    return 0;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    if (remove(path))
        fprintf(stderr, "pgfx: remove %s: %s\n", path, strerror(errno));
    return 0;
}

static void rm_tree(const char *dir)
{
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* A port of 127.0.0.1 that was free a moment ago (the kernel's pick). */
static int free_port(void)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int port = -1;

    if (s < 0)
        return -1;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (!bind(s, (struct sockaddr *)&a, sizeof a) && !getsockname(s, (struct sockaddr *)&a, &len))
        port = ntohs(a.sin_port);
    close(s);
    return port;
}

/* ---- Start and stop ---- */

static int run_initdb(const struct pgfx *f, const struct runas *r, const char *bindir)
{
    char prog[320], data[96], log[96];
    char *argv[] = {prog, "-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8",
                    "--no-locale", "--no-sync", "--no-instructions", NULL};
    pid_t pid;
    int st = 0;

    snprintf(prog, sizeof prog, "%s/initdb", bindir);
    snprintf(data, sizeof data, "%s/data", f->dir);
    snprintf(log, sizeof log, "%s/initdb.log", f->dir);
    if ((pid = spawn(r, f->dir, log, argv)) < 0)
        return -1;
    if (reap_within(pid, PGFX_READY_MS, &st)) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        fprintf(stderr, "pgfx: initdb did not finish within %d s\n", PGFX_READY_MS / 1000);
        goto fail;
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st)) {
        fprintf(stderr, "pgfx: initdb failed (status %d)\n", st);
        goto fail;
    }
    return 0;
fail:
    log_tail(log);
    return -1;
}

/* Start the postmaster on a free port and wait until it accepts a session.
 * Returns 0 (f->pid, f->port set), 1 if it exited early (perhaps the port
 * was taken meanwhile: worth another try), or -1. */
static int run_server(struct pgfx *f, const struct runas *r, const char *bindir)
{
    char prog[320], data[96], log[96], port[16], ping[160];
    char *argv[] = {prog, "-D", data, "-p", port, "-k", f->dir, "-c", "listen_addresses=127.0.0.1",
                    "-c", "fsync=off", NULL};
    long end = now_ms() + PGFX_READY_MS;
    int st = 0;

    if ((f->port = free_port()) < 0) {
        fprintf(stderr, "pgfx: no free port on 127.0.0.1: %s\n", strerror(errno));
        return -1;
    }
    snprintf(prog, sizeof prog, "%s/postgres", bindir);
    snprintf(data, sizeof data, "%s/data", f->dir);
    snprintf(log, sizeof log, "%s/postgres.log", f->dir);
    snprintf(port, sizeof port, "%d", f->port);
    if ((f->pid = spawn(r, f->dir, log, argv)) < 0) {
        f->pid = 0;
        return -1;
    }
    /* The port opens while the server still refuses sessions ("the database
     * system is starting up"): wait for PQPING_OK, a session it would accept. */
    snprintf(ping, sizeof ping, "host=127.0.0.1 port=%d dbname=postgres user=postgres connect_timeout=5",
             f->port);
    while (PQping(ping) != PQPING_OK) {
        if (waitpid(f->pid, &st, WNOHANG) == f->pid) {
            fprintf(stderr, "pgfx: postgres exited while starting (status %d)\n", st);
            log_tail(log);
            f->pid = 0;
            return 1;
        }
        if (now_ms() >= end) {
            fprintf(stderr, "pgfx: postgres did not accept a session within %d s\n", PGFX_READY_MS / 1000);
            log_tail(log);
            return -1;
        }
        nap_ms(20);
    }
    return 0;
}

static int create_db(struct pgfx *f)
{
    char admin[160];
    PGconn *c;
    int rc;

    snprintf(admin, sizeof admin, "host=127.0.0.1 port=%d dbname=postgres user=postgres", f->port);
    c = PQconnectdb(admin);
    if (PQstatus(c) != CONNECTION_OK) {
        fprintf(stderr, "pgfx: connect %s: %s", admin, PQerrorMessage(c));
        PQfinish(c);
        return -1;
    }
    rc = pgfx_exec(c, "CREATE DATABASE mic");
    PQfinish(c);
    snprintf(f->conninfo, sizeof f->conninfo,
             "host=127.0.0.1 port=%d dbname=mic user=postgres options='-c client_min_messages=warning'",
             f->port);
    return rc;
}

int pgfx_start(struct pgfx *f)
{
    char bindir[300];
    struct runas r;
    int rc = 1;

    memset(f, 0, sizeof *f);
    if (find_bindir(bindir, sizeof bindir) || runas_get(&r))
        return -1;
    snprintf(f->dir, sizeof f->dir, "/tmp/mic-pgfx-XXXXXX");
    if (!mkdtemp(f->dir)) {
        fprintf(stderr, "pgfx: mkdtemp %s: %s\n", f->dir, strerror(errno));
        f->dir[0] = '\0';
        return -1;
    }
    if (r.drop && chown(f->dir, r.uid, r.gid)) {
        fprintf(stderr, "pgfx: chown %s to postgres: %s\n", f->dir, strerror(errno));
        goto fail;
    }
    if (run_initdb(f, &r, bindir))
        goto fail;
    for (int tries = 0; rc == 1 && tries < 3; tries++)
        rc = run_server(f, &r, bindir);
    if (rc || create_db(f))
        goto fail;
    return 0;
fail:
    pgfx_stop(f);
    return -1;
}

int pgfx_stop(struct pgfx *f)
{
    int rc = 0, st = 0;

    if (f->pid > 0) {
        if (kill(f->pid, SIGINT) == 0 && reap_within(f->pid, PGFX_STOP_MS, &st)) {
            fprintf(stderr, "pgfx: postgres (pid %d) ignored a fast shutdown for %d s: SIGKILL\n",
                    (int)f->pid, PGFX_STOP_MS / 1000);
            kill(f->pid, SIGKILL);
            waitpid(f->pid, &st, 0);
            rc = -1;
        } else if (!WIFEXITED(st) || WEXITSTATUS(st)) {
            fprintf(stderr, "pgfx: postgres (pid %d) stopped with status %d\n", (int)f->pid, st);
            rc = -1;
        }
        f->pid = 0;
    }
    if (f->dir[0]) {
        rm_tree(f->dir);
        f->dir[0] = '\0';
    }
    return rc;
}

/* ---- Sessions ---- */

PGconn *pgfx_connect(const struct pgfx *f)
{
    PGconn *c = PQconnectdb(f->conninfo);

    if (PQstatus(c) != CONNECTION_OK) {
        fprintf(stderr, "pgfx: connect %s: %s", f->conninfo, PQerrorMessage(c));
        PQfinish(c);
        return NULL;
    }
    return c;
}

int pgfx_exec(PGconn *c, const char *sql)
{
    PGresult *res = PQexec(c, sql);
    ExecStatusType s = PQresultStatus(res);
    int rc = 0;

    if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) {
        fprintf(stderr, "pgfx: %.200s: %s", sql, PQerrorMessage(c));
        rc = -1;
    }
    PQclear(res);
    return rc;
}

int pgfx_apply_file(PGconn *c, const char *path)
{
    FILE *fp = fopen(path, "rb");
    char *sql = NULL;
    long size;
    PGresult *res = NULL;
    int rc = -1;

    if (!fp) {
        fprintf(stderr, "pgfx: %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (fseek(fp, 0, SEEK_END) || (size = ftell(fp)) < 0 || fseek(fp, 0, SEEK_SET)) {
        fprintf(stderr, "pgfx: %s: %s\n", path, strerror(errno));
        goto out_file;
    }
    if (!(sql = malloc((size_t)size + 1)))
        goto out_file;
    if (fread(sql, 1, (size_t)size, fp) != (size_t)size) {
        fprintf(stderr, "pgfx: %s: short read\n", path);
        goto out_sql;
    }
    sql[size] = '\0';
    if (pgfx_exec(c, "BEGIN"))
        goto out_sql;
    res = PQexec(c, sql);
    if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK) {
        fprintf(stderr, "pgfx: applying %s: %s", path, PQerrorMessage(c));
        pgfx_exec(c, "ROLLBACK");
        goto out_res;
    }
    if (pgfx_exec(c, "COMMIT"))
        goto out_res;
    rc = 0;
out_res:
    PQclear(res);
out_sql:
    free(sql);
out_file:
    fclose(fp);
    return rc;
}
