/* procfx.c - the in-process micd of the unit tests (procfx.h). */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "procfx.h"

#include "core/buf.h"
#include "engine/claim.h"
#include "core/clock.h"
#include "core/err.h"
#include "engine/delivery.h"
#include "engine/publish.h"
#include "engine/topic.h"
#include "storedir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int64_t procfx_now;

static int64_t procfx_clock(void)
{
    return procfx_now;
}

int procfx_setup(void **state)
{
    struct procfx *f = calloc(1, sizeof *f);

    procfx_now = PROCFX_T0;
    mic_clock_set(procfx_clock);
    if (!f || procfx_open(f, "mic-procfx", 0, NULL)) {
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

int procfx_teardown(void **state)
{
    struct procfx *f = *state;

    procfx_close(f);
    mic_clock_set(NULL);
    free(f);
    return 0;
}

int procfx_start(struct procfx *f)
{
    struct mic_writer_hooks h;

    if (mic_store_open(&f->store, f->dir, f->cfg.map_size, f->cfg.map_max, 1))
        return -1;
    if (mic_groups_new(&f->groups, f->store) || mic_sched_new(&f->sched, f->groups)) {
        procfx_stop(f);
        return -1;
    }
    memset(&h, 0, sizeof h);
    mic_sched_hooks(f->sched, &h);
    if (mic_writer_start(&f->w, f->store, &f->cfg, &h)) {
        procfx_stop(f);
        return -1;
    }
    return 0;
}

void procfx_stop(struct procfx *f)
{
    mic_writer_free(f->w);
    mic_sched_free(f->sched);
    if (f->groups)
        mic_groups_free(f->groups);
    mic_store_close(f->store);
    f->w = NULL;
    f->sched = NULL;
    f->groups = NULL;
    f->store = NULL;
}

int procfx_open(struct procfx *f, const char *prefix, int argc, const char *const *argv)
{
    static const char *const dflt[] = {"micd", NULL};
    char err[256];

    memset(f, 0, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/%s-XXXXXX", prefix);
    if (!mkdtemp(f->dir))
        return -1;
    if (!argv) {
        argv = dflt;
        argc = 1;
    }
    if (mic_config_load(&f->cfg, argc, (char **)argv, err, sizeof err) || procfx_start(f)) {
        rmdir(f->dir);
        return -1;
    }
    sem_init(&f->sem, 0, 0);
    return 0;
}

void procfx_close(struct procfx *f)
{
    procfx_stop(f);
    sem_destroy(&f->sem);
    storedir_rm(f->dir);
}

static void done(mic_op *op)
{
    sem_post(op->owner);
}

int procfx_run_rc(struct procfx *f, mic_op *op)
{
    if (!op->done)
        op->done = done;
    op->owner = &f->sem;
    assert_int_equal(mic_writer_submit(f->w, op), MIC_OK);
    sem_wait(&f->sem);
    return op->result;
}

void procfx_run(struct procfx *f, mic_op *op)
{
    assert_int_equal(procfx_run_rc(f, op), MIC_OK);
}

struct exec_op {
    mic_op op; /* first */
    int (*fn)(struct mic_wctx *w, void *arg);
    void *arg;
};

static int exec_apply(mic_op *op, struct mic_wctx *w)
{
    struct exec_op *x = (struct exec_op *)op;

    return x->fn ? x->fn(w, x->arg) : MIC_OK;
}

int procfx_exec(struct procfx *f, int (*fn)(struct mic_wctx *w, void *arg), void *arg)
{
    struct exec_op x;

    memset(&x, 0, sizeof x);
    x.op.apply = exec_apply;
    x.fn = fn;
    x.arg = arg;
    return procfx_run_rc(f, &x.op);
}

void procfx_topic(struct procfx *f, const char *name, const char *body)
{
    struct mic_error e;
    struct mic_buf b;
    mic_topic_op *o;
    int created;

    assert_int_equal(mic_topic_put_parse(name, body, strlen(body), &f->cfg, &o, &e), MIC_OK);
    procfx_run(f, mic_topic_op_base(o));
    mic_buf_init(&b);
    assert_int_equal(mic_topic_op_result(o, &b, &created, &e), MIC_OK);
    mic_buf_fini(&b);
    mic_topic_op_free(o);
}

void procfx_group(struct procfx *f, const char *name, const char *body)
{
    struct mic_error e;
    struct mic_buf b;
    mic_group_op *o;
    int created;

    assert_int_equal(mic_group_put_parse(name, body, strlen(body), &f->cfg, &o, &e), MIC_OK);
    procfx_run(f, mic_group_op_base(o));
    mic_buf_init(&b);
    assert_int_equal(mic_group_op_result(o, &b, &created, &e), MIC_OK);
    mic_buf_fini(&b);
    mic_group_op_free(o);
}

void procfx_group_del(struct procfx *f, const char *name)
{
    struct mic_error e;
    struct mic_buf b;
    mic_group_op *o;
    int created;

    assert_int_equal(mic_group_del_parse(name, &o, &e), MIC_OK);
    procfx_run(f, mic_group_op_base(o));
    mic_buf_init(&b);
    assert_int_equal(mic_group_op_result(o, &b, &created, &e), MIC_OK);
    mic_buf_fini(&b);
    mic_group_op_free(o);
}

struct mic_dlv procfx_dlv(mic_store *s, const char *group, uint64_t seq)
{
    struct mic_dlv d;
    uint32_t gid;
    mic_txn *t;

    assert_int_equal(mic_txn_begin(s, 0, &t), MIC_OK);
    assert_int_equal(mic_group_gid(t, group, &gid), MIC_OK);
    assert_int_equal(mic_delivery_get(t, gid, seq, &d), MIC_OK);
    mic_txn_abort(t);
    return d;
}

void procfx_figures(mic_store *s, const char *group, uint64_t out[MIC_GSTAT_N])
{
    uint32_t gid;
    mic_txn *t;

    assert_int_equal(mic_txn_begin(s, 0, &t), MIC_OK);
    assert_int_equal(mic_group_gid(t, group, &gid), MIC_OK);
    assert_int_equal(mic_delivery_figures(t, gid, out), MIC_OK);
    mic_txn_abort(t);
}

int procfx_publish(struct procfx *f, const char *body, const char **code, int *dup)
{
    static char word[64];
    struct mic_error e;
    struct mic_buf b;
    mic_publish *p;
    int rc, d = 0;

    assert_int_equal(mic_publish_parse(body, strlen(body), &f->cfg, &p, &e), MIC_OK);
    procfx_run(f, mic_publish_op(p));
    mic_buf_init(&b);
    memset(&e, 0, sizeof e);
    rc = mic_publish_result(p, &b, &d, &e);
    snprintf(word, sizeof word, "%s", rc && e.code ? e.code : "");
    if (code)
        *code = word;
    if (dup)
        *dup = d;
    mic_buf_fini(&b);
    mic_publish_free(p);
    return rc;
}

json_t *procfx_call(struct procfx *f, int kind, const char *group, const char *body)
{
    struct mic_error e;
    struct mic_buf b;
    mic_claim *c;
    json_t *j;

    assert_int_equal(mic_claim_parse(kind, group, body, strlen(body), &f->cfg, &c, &e), MIC_OK);
    procfx_run(f, mic_claim_op(c));
    mic_buf_init(&b);
    assert_int_equal(mic_claim_result(c, f->store, &b, &e), MIC_OK);
    j = json_loadb(b.p, b.len, 0, NULL);
    assert_non_null(j);
    mic_buf_fini(&b);
    mic_claim_free(c);
    return j;
}

uint64_t procfx_count(mic_store *s, int (*fn)(mic_txn *t, uint64_t *n))
{
    mic_txn *t;
    uint64_t n = 0;

    assert_int_equal(mic_txn_begin(s, 0, &t), MIC_OK);
    assert_int_equal(fn(t, &n), MIC_OK);
    mic_txn_abort(t);
    return n;
}

int procfx_stored(mic_store *s, const char *id)
{
    struct mic_error e;
    struct mic_buf b;
    int rc;

    mic_buf_init(&b);
    rc = mic_publish_lookup(s, id, strlen(id), NULL, &b, &e);
    mic_buf_fini(&b);
    assert_true(rc == MIC_OK || rc == MIC_ENOTFOUND);
    return rc == MIC_OK;
}
