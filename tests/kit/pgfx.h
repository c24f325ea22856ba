/* pgfx.h - a real PostgreSQL for a test: a temporary cluster (initdb) in
 * /tmp/mic-pgfx-XXXXXX, its server on a free loopback port, one database,
 * and the libpq conninfo that reaches it.  For the tests of
 * proto/outbox.sql and of mic-relay (DESIGN §14).
 *
 * The server binaries are those of the newest /usr/lib/postgresql/N/bin
 * (Debian's postgresql package).  Run as root, initdb and the server run as
 * the OS user `postgres` (the child drops to it before exec, so the PID
 * pgfx keeps is the postmaster's own); otherwise as the current user.  The
 * server runs with fsync off: a crash of the machine loses the test's
 * data, nothing else.  It dies with the test process too (its parent-death
 * signal is SIGQUIT, PostgreSQL's immediate shutdown), so a test that
 * crashes leaves no server behind; only its directory stays in /tmp.
 * (That signal comes when the *thread* that called pgfx_start ends: call
 * it from one that outlives the server, such as cmocka's main thread.)
 *
 * Every function returns 0 or -1 (NULL for pgfx_connect) and writes the
 * reason on stderr (for the server, the tail of its log); none asserts, so
 * they serve cmocka's group setup and teardown as well as a test's body. */
#ifndef MIC_PGFX_H
#define MIC_PGFX_H

#include <libpq-fe.h>
#include <sys/types.h>

struct pgfx {
    pid_t pid;           /* the postmaster, 0 when none runs */
    int port;            /* its loopback TCP port */
    char dir[64];        /* the cluster's directory ("" when none) */
    char conninfo[160];  /* host=127.0.0.1 port=PORT dbname=mic user=postgres, and
                          * client_min_messages=warning (no NOTICEs such as
                          * "relation ... already exists, skipping" on stderr) */
};

/* Make a cluster in a new temporary directory, start its server on a free
 * port of 127.0.0.1 (also its socket directory), wait (up to 60 s) until it
 * accepts a session, and create the database `mic`; fills in *f.
 * Returns 0, or -1 with nothing left running and the directory removed. */
int pgfx_start(struct pgfx *f);

/* Stop the server pgfx_start started (SIGINT: fast shutdown, which ends
 * open sessions; SIGKILL if it has not exited within 30 s), reap it and
 * remove the directory.  Safe on a zeroed or already stopped *f.  Returns
 * 0, or -1 if the server did not exit cleanly (it is gone either way). */
int pgfx_stop(struct pgfx *f);

/* A new session on f's database (the caller's: PQfinish), or NULL. */
PGconn *pgfx_connect(const struct pgfx *f);

/* Run 'sql' (one or more statements, PQexec); 0 if it succeeded, or -1
 * with PostgreSQL's error message on stderr. */
int pgfx_exec(PGconn *c, const char *sql);

/* Read the SQL file 'path' and run all of it in one transaction of its
 * own (as psql -1 -f would): it applies entirely or not at all.  'c' must
 * not be inside a transaction.  Returns 0, or -1 with the file named and
 * PostgreSQL's error message on stderr. */
int pgfx_apply_file(PGconn *c, const char *path);

#endif
