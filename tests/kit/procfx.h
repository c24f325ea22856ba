/* procfx.h - an in-process micd for unit tests: a real store, group
 * registry, schedule and writer in a temporary directory, driven through
 * the same ops the HTTP handlers submit (no HTTP, no sleeps: tests move
 * the injected clock themselves, see mic_clock_set).
 *
 * Every function asserts (cmocka) what it needs; a failure ends the test. */
#ifndef MIC_PROCFX_H
#define MIC_PROCFX_H

#include <jansson.h>
#include <semaphore.h>

#include "core/config.h"
#include "engine/delivery.h"
#include "engine/group.h"
#include "engine/schedule.h"
#include "store/store.h"
#include "engine/writer.h"

struct procfx {
    char dir[64];
    struct mic_config cfg;
    mic_store *store;
    mic_groups *groups;
    mic_sched *sched;
    mic_writer *w;
    sem_t sem;
};

/* The injected wall clock of the tests that use procfx_setup: µs since
 * the epoch, moved by the tests themselves (PROCFX_T0 at each setup). */
#define PROCFX_T0 1790000000000000LL
#define PROCFX_SEC 1000000LL
extern int64_t procfx_now;

/* cmocka setup/teardown: the clock at PROCFX_T0 and installed, then a
 * procfx in *state (procfx_open with the defaults); teardown closes it,
 * restores the system clock and frees it. */
int procfx_setup(void **state);
int procfx_teardown(void **state);

/* Make a temporary store directory /tmp/PREFIX-XXXXXX, load the settings
 * from 'argv' (argc words, argv[0] "micd"; NULL: the defaults) and start
 * the store (opened without fsync), registry, schedule and writer.
 * Returns 0, or -1 (nothing is left running). */
int procfx_open(struct procfx *f, const char *prefix, int argc, const char *const *argv);
/* Stop everything and remove the store's files and directory. */
void procfx_close(struct procfx *f);
/* Stop, then start again on the same directory (a restart). */
void procfx_stop(struct procfx *f);
int procfx_start(struct procfx *f);

/* Submit 'op' (its done() is set here unless it has one) and wait for it:
 * _rc returns the op's result, procfx_run asserts MIC_OK. */
int procfx_run_rc(struct procfx *f, mic_op *op);
void procfx_run(struct procfx *f, mic_op *op);

/* Run fn(w, arg) in the writer thread, inside one batch's transaction
 * (as an op's apply: after the schedule's before hook, before the commit),
 * and wait until that batch is committed and synced: returns fn's result
 * (MIC_OK, or the error that failed the batch).  fn may run twice if the
 * batch is applied again (after MIC_ENOSPC), so it resets what it records.
 * It runs in another thread: it must not call cmocka's asserts (their
 * longjmp belongs to the test's thread); it records what it saw in 'arg'
 * and the test asserts afterwards.  fn NULL: an inert batch, which fires
 * the deadlines due at procfx_now and runs one chunk of background work. */
int procfx_exec(struct procfx *f, int (*fn)(struct mic_wctx *w, void *arg), void *arg);

/* PUT a topic or a group (asserts it is stored). */
void procfx_topic(struct procfx *f, const char *name, const char *body);
void procfx_group(struct procfx *f, const char *name, const char *body);
/* DELETE a group (asserts it is deleted). */
void procfx_group_del(struct procfx *f, const char *name);
/* Delivery 'seq' of group 'group' in 's' (asserts it exists), and the
 * group's committed figures (MIC_GSTAT_*), each read in a read
 * transaction of its own.  For any store, not only a procfx's. */
struct mic_dlv procfx_dlv(mic_store *s, const char *group, uint64_t seq);
void procfx_figures(mic_store *s, const char *group, uint64_t out[MIC_GSTAT_N]);
/* Publish 'body': returns the result's code (MIC_OK when stored or a
 * duplicate); *code (may be NULL) receives the error's code word, "" if
 * none (a static buffer, valid until the next call); *dup (may be NULL)
 * is set when every item was a duplicate. */
int procfx_publish(struct procfx *f, const char *body, const char **code, int *dup);
/* 1 if event 'id' is stored in 's' (GET /v1/events/{id} finds it), 0 if
 * not; asserts no other answer.  For any store, not only a procfx's. */
int procfx_stored(mic_store *s, const char *id);
/* A count read in a read transaction of 's' by 'fn' (mic_store_log_count,
 * mic_store_expiry_count, ...); fails the test on an error. */
uint64_t procfx_count(mic_store *s, int (*fn)(mic_txn *t, uint64_t *n));
/* A claim-family request (enum mic_claim_kind) on 'group': asserts it
 * succeeds and returns its parsed answer (the caller's: json_decref). */
json_t *procfx_call(struct procfx *f, int kind, const char *group, const char *body);

#endif
