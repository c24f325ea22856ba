/* harness.h - integration test support: start a real micd on an ephemeral
 * port in a temporary directory, speak HTTP to it through libmic
 * (mic_request: one request, never retried), stop it
 * with SIGTERM or kill -9.  The binary is $MICD (default build/san/micd). */
#ifndef MIC_HARNESS_H
#define MIC_HARNESS_H

#include "wait.h"

#include <jansson.h>
#include <stddef.h>
#include <sys/types.h>

struct srv {
    pid_t pid;
    int port;
    char dir[256];     /* store directory (kept across restarts) */
    char url[64];      /* http://127.0.0.1:PORT (https:// with cacert) */
    char logpath[300];
    char cacert[256];  /* set before srv_start for a micd serving HTTPS: the
                        * PEM CA file http() checks it with */
    /* Optional, set before srv_start: run in the child just before micd
     * is executed (say, to mount its store in a namespace of its own); a
     * nonzero return makes the child exit with status 126. */
    int (*before_exec)(struct srv *s);
};

/* Start micd with the store in s->dir (a new temp dir if s->dir is empty)
 * and the extra flags 'args' (NULL-terminated, may be NULL).  Waits (up to
 * 20 s) until it listens and /healthz answers.  Returns 0 or -1. */
int srv_start(struct srv *s, const char *const *args);

/* SIGTERM and wait; returns micd's exit status, or -1. */
int srv_stop(struct srv *s);

/* SIGKILL and reap. */
void srv_kill9(struct srv *s);

/* Remove the store directory. */
void srv_cleanup(struct srv *s);

/* A test file's shared server, for its cmocka group setup and teardown:
 * start a fresh one with 'args' (may be NULL); stop it with SIGTERM (a
 * clean exit: no sanitizer report, no leak), remove its store and free
 * this thread's HTTP client.  Both return 0 or -1. */
int srv_start_shared(struct srv *s, const char *const *args);
int srv_stop_shared(struct srv *s);




/* Run micd with 'args' in the foreground on s->dir and return its exit
 * status (for start-up refusals). */
int srv_run_expect_exit(struct srv *s, const char *const *args);

/* Run `micd --verify dir` (issue 16, T6) and return its exit status (-1 if
 * it did not exit normally); its stdout goes to *out (NUL-terminated, free()
 * it; NULL if it could not be read). */
int srv_verify(const char *dir, char **out);

struct resp {
    long status;
    char *body;        /* NUL-terminated */
    size_t len;
    json_t *json;      /* parsed body, or NULL */
    char request_id[80];
    char retry_after[16];
};

/* One HTTP request to s->url + path.  'body' may be NULL; 'ctype' NULL
 * means no Content-Type header.  Extra header line 'hdr' may be NULL.
 * Returns 0 if an HTTP reply arrived (r->status set), -1 on transport
 * failure (r->status 0).  Free with resp_free. */
int http(const struct srv *s, const char *method, const char *path,
         const char *ctype, const char *body, size_t len, const char *hdr,
         struct resp *r);

/* Shorthands: JSON body (strlen), Content-Type application/json. */
int http_json(const struct srv *s, const char *method, const char *path,
              const char *body, struct resp *r);
void resp_free(struct resp *r);

/* Free this thread's libmic handle (call before a thread ends). */
void http_thread_done(void);

/* The error code of a {"error":{"code":...}} body, or "" */
const char *resp_error_code(const struct resp *r);


#endif
