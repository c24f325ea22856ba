/* test_store.c - the LMDB store (server/store/store.h) against a fresh temp dir:
 * format version, every sub-database's put/get, map growth and the write
 * fault hook. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <lmdb.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/err.h"
#include "procfx.h"
#include "store/store.h"
#include "store/log.h"
#include "store/catalog.h"
#include "store/verify.h"
#include "storedir.h"

#define KiB 1024ull
#define MiB (1024ull * KiB)

struct fixture {
    char dir[64];
    mic_store *s;
};

static int setup_dir(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);

    if (!f)
        return -1;
    snprintf(f->dir, sizeof f->dir, "/tmp/mic-test-store-XXXXXX");
    if (!mkdtemp(f->dir)) {
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

/* A temp dir with an open store (16 MiB map, up to 64 MiB, no fsync). */
static int setup(void **state)
{
    struct fixture *f;

    if (setup_dir(state))
        return -1;
    f = *state;
    if (mic_store_open(&f->s, f->dir, 16 * MiB, 64 * MiB, 1) != MIC_OK) {
        storedir_rm(f->dir);
        free(f);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    mic_store_set_fault(NULL);
    mic_store_close(f->s);
    storedir_rm(f->dir);
    free(f);
    return 0;
}

static mic_txn *begin(struct fixture *f, int write)
{
    mic_txn *t = NULL;

    assert_int_equal(mic_txn_begin(f->s, write, &t), MIC_OK);
    assert_non_null(t);
    return t;
}

/* ---- Environment and format ---- */

static void open_close(void **state)
{
    struct fixture *f = *state;
    uint64_t size, used, max;
    char p[128];
    struct stat st;

    mic_store_usage(f->s, &size, &used, &max);
    assert_int_equal(size, 16 * MiB);
    assert_int_equal(max, 64 * MiB);
    assert_true(used > 0 && used <= size);
    snprintf(p, sizeof p, "%s/data.mdb", f->dir);
    assert_int_equal(stat(p, &st), 0);

    mic_store_close(f->s);
    f->s = NULL;
    mic_store_close(NULL); /* a no-op */
    /* reopening an existing store, with fsync this time */
    assert_int_equal(mic_store_open(&f->s, f->dir, 16 * MiB, 64 * MiB, 0), MIC_OK);
    assert_non_null(f->s);
}

static void open_creates_nested_dirs(void **state)
{
    struct fixture *f = *state;
    char nested[128], mid[128];
    mic_store *s = NULL;

    snprintf(mid, sizeof mid, "%s/a", f->dir);
    snprintf(nested, sizeof nested, "%s/a/b", f->dir);
    assert_int_equal(mic_store_open(&s, nested, 1 * MiB, 1 * MiB, 1), MIC_OK);
    mic_store_close(s);
    storedir_rm(nested);
    assert_int_equal(rmdir(mid), 0);
}

static void open_fails_on_a_file(void **state)
{
    struct fixture *f = *state;
    char file[128], under[160];
    mic_store *s = NULL;
    FILE *fp;

    snprintf(file, sizeof file, "%s/plain", f->dir);
    snprintf(under, sizeof under, "%s/sub", file);
    fp = fopen(file, "w");
    assert_non_null(fp);
    fclose(fp);
    assert_int_equal(mic_store_open(&s, under, 1 * MiB, 1 * MiB, 1), MIC_EIO);
    assert_null(s);
    unlink(file);
}

/* Open the env in 'dir' with LMDB itself. */
static MDB_env *raw_open(const char *dir)
{
    MDB_env *env;

    assert_int_equal(mdb_env_create(&env), 0);
    assert_int_equal(mdb_env_set_maxdbs(env, 32), 0);
    assert_int_equal(mdb_env_open(env, dir, 0, 0600), 0);
    return env;
}

/* Read meta "format" with LMDB itself into 'out' (up to 8 bytes). */
static size_t raw_get_format(const char *dir, uint8_t *out)
{
    MDB_env *env = raw_open(dir);
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_val k = {6, "format"}, v;
    size_t n;

    assert_int_equal(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, "meta", 0, &dbi), 0);
    assert_int_equal(mdb_get(txn, dbi, &k, &v), 0);
    n = v.mv_size;
    assert_true(n <= 8);
    memcpy(out, v.mv_data, n);
    mdb_txn_abort(txn);
    mdb_env_close(env);
    return n;
}

/* Write meta "format" = 'val' (n bytes) with LMDB itself. */
static void raw_put_format(const char *dir, const void *val, size_t n)
{
    MDB_env *env = raw_open(dir);
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_val k = {6, "format"}, v = {n, (void *)val};

    assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, "meta", MDB_CREATE, &dbi), 0);
    assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
}

static void format_version_written(void **state)
{
    struct fixture *f = *state;
    uint8_t fmt[8];

    mic_store_close(f->s);
    f->s = NULL;
    assert_int_equal(raw_get_format(f->dir, fmt), 4);
    assert_int_equal(fmt[0], (MIC_STORE_FORMAT >> 24) & 0xff);
    assert_int_equal(fmt[1], (MIC_STORE_FORMAT >> 16) & 0xff);
    assert_int_equal(fmt[2], (MIC_STORE_FORMAT >> 8) & 0xff);
    assert_int_equal(fmt[3], MIC_STORE_FORMAT & 0xff);
}

static void other_format_refused(void **state)
{
    struct fixture *f = *state;
    static const uint8_t v99[4] = {0, 0, 0, 99};
    uint8_t fmt[8];
    mic_store *s = NULL;

    /* a store that never saw micd, with format 99 */
    raw_put_format(f->dir, v99, 4);
    assert_int_equal(mic_store_open(&s, f->dir, 1 * MiB, 1 * MiB, 1),
                     MIC_EVERSION);
    assert_null(s);
    /* refusing it leaves it as it was, and refuses it again */
    assert_int_equal(raw_get_format(f->dir, fmt), 4);
    assert_memory_equal(fmt, v99, 4);
    assert_int_equal(mic_store_open(&s, f->dir, 1 * MiB, 1 * MiB, 1),
                     MIC_EVERSION);
    assert_null(s);
}

/* A store of format 2 opens as format 4: nothing to rewrite from 2 to 3
 * (store-format.md, "Migration from version 2"), and an empty log to
 * checksum from 3 to 4. */
static void format_2_migrates(void **state)
{
    struct fixture *f = *state;
    static const uint8_t v2[4] = {0, 0, 0, 2};
    uint8_t fmt[8];
    mic_store *s = NULL;

    raw_put_format(f->dir, v2, 4);
    assert_int_equal(mic_store_open(&s, f->dir, 1 * MiB, 1 * MiB, 1), MIC_OK);
    mic_store_close(s);
    assert_int_equal(raw_get_format(f->dir, fmt), 4);
    assert_int_equal(fmt[3], 4);
    assert_int_equal(MIC_STORE_FORMAT, 4);
}

/* ---- Migration from format 3: every log record gets its CRC ---- */

#define MIG_N 9000 /* records: three of the migration's transactions (4096 each) */

/* Record 'seq' of the migration tests: its fields follow from seq, and so
 * does its JSON (an empty one every 1000th). */
static void mig_rec(struct mic_rec *r, uint64_t seq, char *json, size_t cap)
{
    memset(r, 0, sizeof *r);
    r->seq = seq;
    r->topic_id = (uint32_t)(seq % 5 + 1);
    r->priority = (uint8_t)(seq % 7);
    r->has_agg = seq % 2;
    r->has_version = seq % 4 == 1;
    r->version = r->has_version ? seq : 0;
    r->created_at_us = 1790668800LL * 1000000 + (int64_t)seq;
    r->received_at_us = r->created_at_us + 17;
    r->deliver_at_us = seq % 3 ? 0 : r->created_at_us + 1000;
    for (int i = 0; i < MIC_AKEY_LEN; i++)
        r->akey[i] = r->has_agg ? (uint8_t)(seq >> (i % 8)) : 0;
    json[0] = 0;
    if (seq % 1000)
        snprintf(json, cap, "{\"event_id\":\"m-%llu\",\"pad\":\"%0*d\"}",
                 (unsigned long long)seq, (int)(seq % 300), 0);
    r->json = json;
    r->json_len = strlen(json);
}

/* Write records 1..MIG_N with the store, then turn the store into one of
 * format 3 with LMDB itself: every record with seq >= 'from' loses its CRC
 * and becomes record format 2, or format 1 (its header ends at 48,
 * without deliver_at, which is 0 for those) when seq % 6 == 1; and seq
 * MIG_N + 1 is 10 bytes that decode in no format.  'from' == 1: meta
 * "format" = 3; else the format stays 4 and "crc_next" = 'from', as a
 * migration that stopped there leaves them. */
static void mig_make_v3(struct fixture *f, uint64_t from)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi log, meta;
    uint8_t fmt[4] = {0, 0, 0, 3}, kb[8], nb[8], *buf = malloc(1024);
    char json[512];
    mic_txn *t = begin(f, 1);

    assert_non_null(buf);
    for (uint64_t seq = 1; seq <= MIG_N; seq++) {
        struct mic_rec r;
        mig_rec(&r, seq, json, sizeof json);
        assert_int_equal(mic_store_log_put(t, &r), MIC_OK);
    }
    assert_int_equal(mic_txn_commit(t), MIC_OK);
    mic_store_close(f->s);
    f->s = NULL;

    env = raw_open(f->dir);
    assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, "log", 0, &log), 0);
    assert_int_equal(mdb_dbi_open(txn, "meta", 0, &meta), 0);
    for (uint64_t seq = from; seq <= MIG_N; seq++) {
        MDB_val k = {8, kb}, v;
        size_t n;
        for (int i = 0; i < 8; i++)
            kb[i] = (uint8_t)(seq >> (56 - 8 * i));
        assert_int_equal(mdb_get(txn, log, &k, &v), 0);
        n = v.mv_size - 4; /* without the CRC */
        assert_true(n <= 1024);
        memcpy(buf, v.mv_data, n);
        assert_int_equal(buf[0], 3);
        buf[0] = 2;
        if (seq % 6 == 1) { /* format 1: the header ends at 48 */
            buf[0] = 1;
            memmove(buf + 48, buf + 56, n - 56);
            n -= 8;
        }
        v.mv_size = n;
        v.mv_data = buf;
        assert_int_equal(mdb_put(txn, log, &k, &v, 0), 0);
    }
    {
        MDB_val k = {8, kb}, v = {10, "not-a-rec!"};
        for (int i = 0; i < 8; i++)
            kb[i] = (uint8_t)((uint64_t)(MIG_N + 1) >> (56 - 8 * i));
        assert_int_equal(mdb_put(txn, log, &k, &v, 0), 0);
    }
    if (from == 1) {
        MDB_val k = {6, "format"}, v = {4, fmt};
        assert_int_equal(mdb_put(txn, meta, &k, &v, 0), 0);
    } else {
        MDB_val k = {8, "crc_next"}, v = {8, nb};
        for (int i = 0; i < 8; i++)
            nb[i] = (uint8_t)(from >> (56 - 8 * i));
        assert_int_equal(mdb_put(txn, meta, &k, &v, 0), 0);
    }
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
    free(buf);
}

/* mdb_get's answer for meta "crc_next" (0: there, MDB_NOTFOUND: not). */
static int raw_get_crc_next(const char *dir)
{
    MDB_env *env = raw_open(dir);
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_val k = {8, "crc_next"}, v;
    int rc;

    assert_int_equal(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, "meta", 0, &dbi), 0);
    rc = mdb_get(txn, dbi, &k, &v);
    mdb_txn_abort(txn);
    mdb_env_close(env);
    return rc;
}

/* After the migration: format 4, no "crc_next", every record reads back
 * as written, the undecodable one answers MIC_ECORRUPT, and --verify's
 * walk finds exactly that one. */
static void mig_check(struct fixture *f)
{
    struct mic_verify_report rep;
    uint8_t fmt[8];
    char json[512];
    mic_txn *t;
    FILE *devnull;

    assert_int_equal(mic_store_open(&f->s, f->dir, 1 * MiB, 64 * MiB, 0), MIC_OK);
    t = begin(f, 0);
    for (uint64_t seq = 1; seq <= MIG_N; seq++) {
        struct mic_rec want, got;
        mig_rec(&want, seq, json, sizeof json);
        assert_int_equal(mic_store_log_get(t, seq, &got), MIC_OK);
        assert_int_equal(got.topic_id, want.topic_id);
        assert_int_equal(got.priority, want.priority);
        assert_int_equal(got.has_agg, want.has_agg);
        assert_int_equal(got.has_version, want.has_version);
        assert_int_equal(got.version, want.version);
        assert_int_equal(got.created_at_us, want.created_at_us);
        assert_int_equal(got.received_at_us, want.received_at_us);
        assert_int_equal(got.deliver_at_us, want.deliver_at_us);
        assert_memory_equal(got.akey, want.akey, MIC_AKEY_LEN);
        assert_int_equal(got.json_len, want.json_len);
        assert_memory_equal(got.json, want.json, want.json_len);
    }
    {
        struct mic_rec got;
        assert_int_equal(mic_store_log_get(t, MIG_N + 1, &got), MIC_ECORRUPT);
    }
    mic_txn_abort(t);
    mic_store_close(f->s);
    f->s = NULL;
    assert_int_equal(raw_get_format(f->dir, fmt), 4);
    assert_int_equal(fmt[3], 4);
    assert_int_equal(raw_get_crc_next(f->dir), MDB_NOTFOUND);
    assert_non_null(devnull = fopen("/dev/null", "w"));
    assert_int_equal(mic_store_verify(f->dir, devnull, &rep), MIC_OK);
    fclose(devnull);
    assert_int_equal(rep.records, MIG_N + 1);
    assert_int_equal(rep.bad_records, 1);
    /* the migration ran once: opening again rewrites nothing */
    assert_int_equal(mic_store_open(&f->s, f->dir, 1 * MiB, 64 * MiB, 0), MIC_OK);
}

static void format_3_migrates_log(void **state)
{
    struct fixture *f = *state;
    uint8_t fmt[8];

    mig_make_v3(f, 1);
    assert_int_equal(raw_get_format(f->dir, fmt), 4);
    assert_int_equal(fmt[3], 3);
    /* the map starts small: the migration grows it as it needs */
    mig_check(f);
}

/* A migration that stopped after its first transactions goes on where the
 * last commit left "crc_next". */
static void format_3_migration_resumes(void **state)
{
    struct fixture *f = *state;

    mig_make_v3(f, 5001);
    mig_check(f);
}

static void malformed_format_refused(void **state)
{
    struct fixture *f = *state;
    static const uint8_t v1_short[2] = {0, 1};
    mic_store *s = NULL;

    raw_put_format(f->dir, v1_short, 2);
    assert_int_equal(mic_store_open(&s, f->dir, 1 * MiB, 1 * MiB, 1),
                     MIC_EVERSION);
    assert_null(s);
}

/* ---- Log ---- */

static void fill_rec(struct mic_rec *r, uint64_t seq, const char *json)
{
    memset(r, 0, sizeof *r);
    r->seq = seq;
    r->topic_id = 0x01020304;
    r->priority = 200;
    r->has_agg = 1;
    r->has_version = 1;
    r->created_at_us = 1790668800LL * 1000000 + 123456;
    r->received_at_us = 1790668801LL * 1000000 + 654321;
    r->version = (1ull << 62) + 5;
    for (int i = 0; i < MIC_AKEY_LEN; i++)
        r->akey[i] = (uint8_t)(0xa0 + i);
    r->json = json;
    r->json_len = strlen(json);
}

static void log_round_trip(void **state)
{
    struct fixture *f = *state;
    const char *j1 = "{\"event_id\":\"e1\",\"topic\":\"orders\",\"payload\":{\"a\":1}";
    struct mic_rec a, b, got;
    uint64_t seq = 99, n = 99;
    mic_txn *t = begin(f, 1);

    assert_int_equal(mic_store_last_seq(t, &seq), MIC_OK);
    assert_int_equal(seq, 0);
    assert_int_equal(mic_store_log_count(t, &n), MIC_OK);
    assert_int_equal(n, 0);

    fill_rec(&a, 1, j1);
    memset(&b, 0, sizeof b);  /* no aggregate, no version, priority 0 */
    b.seq = 2;
    b.topic_id = 9;
    b.created_at_us = 5;
    b.received_at_us = 6;
    b.json = "{\"x\":\"\\u0000\"";
    b.json_len = strlen(b.json);
    assert_int_equal(mic_store_log_put(t, &a), MIC_OK);
    assert_int_equal(mic_store_log_put(t, &b), MIC_OK);
    assert_int_equal(mic_txn_commit(t), MIC_OK);

    t = begin(f, 0);
    memset(&got, 0x55, sizeof got);
    assert_int_equal(mic_store_log_get(t, 1, &got), MIC_OK);
    assert_int_equal(got.seq, 1);
    assert_int_equal(got.topic_id, 0x01020304);
    assert_int_equal(got.priority, 200);
    assert_int_equal(got.has_agg, 1);
    assert_int_equal(got.has_version, 1);
    assert_int_equal(got.created_at_us, a.created_at_us);
    assert_int_equal(got.received_at_us, a.received_at_us);
    assert_int_equal(got.version, a.version);
    assert_memory_equal(got.akey, a.akey, MIC_AKEY_LEN);
    assert_int_equal(got.json_len, strlen(j1));
    assert_memory_equal(got.json, j1, strlen(j1));

    memset(&got, 0x55, sizeof got);
    assert_int_equal(mic_store_log_get(t, 2, &got), MIC_OK);
    assert_int_equal(got.seq, 2);
    assert_int_equal(got.topic_id, 9);
    assert_int_equal(got.priority, 0);
    assert_int_equal(got.has_agg, 0);
    assert_int_equal(got.has_version, 0);
    assert_int_equal(got.created_at_us, 5);
    assert_int_equal(got.received_at_us, 6);
    assert_int_equal(got.version, 0);
    assert_int_equal(got.json_len, b.json_len);
    assert_memory_equal(got.json, b.json, b.json_len);

    assert_int_equal(mic_store_log_get(t, 3, &got), MIC_ENOTFOUND);
    assert_int_equal(mic_store_log_get(t, 0, &got), MIC_ENOTFOUND);
    assert_int_equal(mic_store_last_seq(t, &seq), MIC_OK);
    assert_int_equal(seq, 2);
    assert_int_equal(mic_store_log_count(t, &n), MIC_OK);
    assert_int_equal(n, 2);
    mic_txn_abort(t);
}

static void log_seq_order(void **state)
{
    struct fixture *f = *state;
    static const uint64_t seqs[] = {1, 2, 255, 256, 65536, 1ull << 32,
                                    (1ull << 56) + 1};
    struct mic_rec r;
    uint64_t last = 0;
    mic_txn *t = begin(f, 1);

    /* log keys are appended, so they must sort numerically */
    for (size_t i = 0; i < sizeof seqs / sizeof seqs[0]; i++) {
        fill_rec(&r, seqs[i], "{");
        assert_int_equal(mic_store_log_put(t, &r), MIC_OK);
    }
    assert_int_equal(mic_store_last_seq(t, &last), MIC_OK);
    assert_int_equal(last, (1ull << 56) + 1);
    assert_int_equal(mic_txn_commit(t), MIC_OK);

    /* a seq below the last one is not appended */
    t = begin(f, 1);
    fill_rec(&r, 300, "{");
    assert_int_equal(mic_store_log_put(t, &r), MIC_ECONFLICT);
    mic_txn_abort(t);

    t = begin(f, 0);
    for (size_t i = 0; i < sizeof seqs / sizeof seqs[0]; i++) {
        assert_int_equal(mic_store_log_get(t, seqs[i], &r), MIC_OK);
        assert_int_equal(r.seq, seqs[i]);
    }
    assert_int_equal(mic_store_log_get(t, 300, &r), MIC_ENOTFOUND);
    mic_txn_abort(t);
}

static void uncommitted_is_invisible(void **state)
{
    struct fixture *f = *state;
    struct mic_rec r;
    uint64_t seq = 1;
    mic_txn *w = begin(f, 1), *rd;

    fill_rec(&r, 1, "{");
    assert_int_equal(mic_store_log_put(w, &r), MIC_OK);
    rd = begin(f, 0);
    assert_int_equal(mic_store_log_get(rd, 1, &r), MIC_ENOTFOUND);
    assert_int_equal(mic_store_last_seq(rd, &seq), MIC_OK);
    assert_int_equal(seq, 0);
    mic_txn_abort(rd);
    mic_txn_abort(w);

    rd = begin(f, 0);
    assert_int_equal(mic_store_log_get(rd, 1, &r), MIC_ENOTFOUND);
    mic_txn_abort(rd);
    mic_txn_abort(NULL); /* a no-op */
}

static void data_survives_reopen(void **state)
{
    struct fixture *f = *state;
    struct mic_rec r;
    struct mic_topic_rec tr = {.id = 3, .retention_s = 60};
    mic_txn *t = begin(f, 1);

    fill_rec(&r, 7, "{\"k\":1");
    assert_int_equal(mic_store_log_put(t, &r), MIC_OK);
    assert_int_equal(mic_store_topic_put(t, "t", 1, &tr), MIC_OK);
    assert_int_equal(mic_txn_commit(t), MIC_OK);
    mic_store_close(f->s);
    f->s = NULL;

    assert_int_equal(mic_store_open(&f->s, f->dir, 16 * MiB, 64 * MiB, 0), MIC_OK);
    t = begin(f, 0);
    memset(&r, 0, sizeof r);
    memset(&tr, 0, sizeof tr);
    assert_int_equal(mic_store_log_get(t, 7, &r), MIC_OK);
    assert_int_equal(r.json_len, 6);
    assert_memory_equal(r.json, "{\"k\":1", 6);
    assert_int_equal(mic_store_topic_get(t, "t", 1, &tr), MIC_OK);
    assert_int_equal(tr.id, 3);
    assert_int_equal(tr.retention_s, 60);
    mic_txn_abort(t);
}

/* ---- Event ids ---- */

static void ids_round_trip(void **state)
{
    struct fixture *f = *state;
    uint8_t d1[MIC_DIGEST_LEN], d2[MIC_DIGEST_LEN], got[MIC_DIGEST_LEN];
    uint64_t seq = 0;
    mic_txn *t = begin(f, 1);

    for (int i = 0; i < MIC_DIGEST_LEN; i++) {
        d1[i] = (uint8_t)i;
        d2[i] = (uint8_t)(255 - i);
    }
    assert_int_equal(mic_store_id_put(t, "evt-1", 5, 5, d1), MIC_OK);
    assert_int_equal(mic_store_id_put(t, "evt-10", 6, (1ull << 40) + 3, d2), MIC_OK);
    assert_int_equal(mic_txn_commit(t), MIC_OK);

    t = begin(f, 0);
    assert_int_equal(mic_store_id_get(t, "evt-1", 5, &seq, got), MIC_OK);
    assert_int_equal(seq, 5);
    assert_memory_equal(got, d1, MIC_DIGEST_LEN);
    assert_int_equal(mic_store_id_get(t, "evt-10", 6, &seq, got), MIC_OK);
    assert_int_equal(seq, (1ull << 40) + 3);
    assert_memory_equal(got, d2, MIC_DIGEST_LEN);
    /* only 'idlen' bytes are the key */
    assert_int_equal(mic_store_id_get(t, "evt-10", 5, &seq, got), MIC_OK);
    assert_int_equal(seq, 5);
    assert_int_equal(mic_store_id_get(t, "evt-2", 5, &seq, got), MIC_ENOTFOUND);
    assert_int_equal(mic_store_id_get(t, "evt", 3, &seq, got), MIC_ENOTFOUND);
    mic_txn_abort(t);
}

/* Puts of ids go through a cursor the write txn keeps: puts, gets and
 * deletes interleaved in one txn (page splits included: 3000 keys) leave
 * exactly the keys put and not deleted, before and after the commit. */
static void ids_interleaved_in_one_txn(void **state)
{
    struct fixture *f = *state;
    uint8_t d[MIC_DIGEST_LEN] = {0}, got[MIC_DIGEST_LEN];
    uint64_t seq;
    char id[32];
    mic_txn *t = begin(f, 1);

    for (int i = 0; i < 3000; i++) {
        /* ascending, then a key far before, as ids of several clients */
        int n = snprintf(id, sizeof id, "%c-%05d", i % 3 ? 'm' : 'a', i);
        assert_int_equal(mic_store_id_put(t, id, (size_t)n, (uint64_t)i + 1, d), MIC_OK);
        if (i % 7 == 0) {
            n = snprintf(id, sizeof id, "%c-%05d", i % 3 ? 'm' : 'a', i);
            assert_int_equal(mic_store_id_del(t, id, (size_t)n), MIC_OK);
        }
        if (i % 11 == 0 && i > 0) {
            n = snprintf(id, sizeof id, "%c-%05d", (i - 1) % 3 ? 'm' : 'a', i - 1);
            assert_int_equal(mic_store_id_get(t, id, (size_t)n, &seq, got),
                             (i - 1) % 7 ? MIC_OK : MIC_ENOTFOUND);
        }
    }
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < 3000; i++) {
            int n = snprintf(id, sizeof id, "%c-%05d", i % 3 ? 'm' : 'a', i);
            int rc = mic_store_id_get(t, id, (size_t)n, &seq, got);
            assert_int_equal(rc, i % 7 ? MIC_OK : MIC_ENOTFOUND);
            if (rc == MIC_OK)
                assert_int_equal(seq, (uint64_t)i + 1);
        }
        if (pass == 0) {
            assert_int_equal(mic_txn_commit(t), MIC_OK);
            t = begin(f, 0);
        }
    }
    mic_txn_abort(t);
}

/* ---- Time index ---- */

static void time_index(void **state)
{
    struct fixture *f = *state;
    char id129[129];
    mic_txn *t = begin(f, 1);

    assert_int_equal(mic_store_time_any(t, 3), MIC_ENOTFOUND);
    assert_int_equal(mic_store_time_put(t, 3, 1000, "e1", 2, 1), MIC_OK);
    assert_int_equal(mic_store_time_put(t, 3, 999, "e0", 2, 2), MIC_OK);
    assert_int_equal(mic_store_time_put(t, 256, 5, "e2", 2, 3), MIC_OK);
    memset(id129, 'x', sizeof id129);
    assert_int_equal(mic_store_time_put(t, 3, 1, id129, 129, 4), MIC_EINVAL);
    assert_int_equal(mic_store_time_put(t, 3, 1, id129, 128, 4), MIC_OK);
    assert_int_equal(mic_txn_commit(t), MIC_OK);

    t = begin(f, 0);
    assert_int_equal(mic_store_time_any(t, 3), MIC_OK);
    assert_int_equal(mic_store_time_any(t, 256), MIC_OK);
    assert_int_equal(mic_store_time_any(t, 4), MIC_ENOTFOUND);
    assert_int_equal(mic_store_time_any(t, 2), MIC_ENOTFOUND);
    assert_int_equal(mic_store_time_any(t, 0), MIC_ENOTFOUND);
    assert_int_equal(mic_store_time_any(t, 255), MIC_ENOTFOUND);
    assert_int_equal(mic_store_time_any(t, 257), MIC_ENOTFOUND);
    assert_int_equal(mic_store_time_any(t, 0x03000000), MIC_ENOTFOUND);
    assert_int_equal(mic_store_time_any(t, UINT32_MAX), MIC_ENOTFOUND);
    mic_txn_abort(t);
}

/* ---- Aggregates ---- */

static void akey_of_type_and_id(void **state)
{
    uint8_t a[MIC_AKEY_LEN], b[MIC_AKEY_LEN], c[MIC_AKEY_LEN],
        md[SHA256_DIGEST_LENGTH];

    (void)state;
    mic_store_akey("ab", 2, "c", 1, a);
    mic_store_akey("a", 1, "bc", 2, b);
    mic_store_akey("ab", 2, "c", 1, c);
    assert_memory_not_equal(a, b, MIC_AKEY_LEN);
    assert_memory_equal(a, c, MIC_AKEY_LEN);
    SHA256((const unsigned char *)"ab\0c", 4, md);
    assert_memory_equal(a, md, MIC_AKEY_LEN);
    /* only the given lengths count */
    mic_store_akey("abX", 2, "cY", 1, c);
    assert_memory_equal(a, c, MIC_AKEY_LEN);
}

static void aggregates_round_trip(void **state)
{
    struct fixture *f = *state;
    struct mic_agg_rec in = {.versioned = 1, .baseline = 3, .contig = 3,
                             .max_version = 3, .events = 7, .ordinal = 5},
                       out;
    uint8_t k1[MIC_AKEY_LEN], k2[MIC_AKEY_LEN];
    struct mic_rec r;
    mic_txn *t = begin(f, 1);

    mic_store_akey("order", 5, "o-1", 3, k1);
    mic_store_akey("order", 5, "o-2", 3, k2);
    assert_int_equal(mic_store_agg_get(t, k1, &out), MIC_ENOTFOUND);
    fill_rec(&r, 10, "{");
    memcpy(r.akey, k1, MIC_AKEY_LEN);
    r.has_agg = r.has_version = 1;
    r.version = 3;
    assert_int_equal(mic_store_aggidx_put(t, &r), MIC_OK);
    assert_int_equal(mic_store_agg_put(t, k1, &in), MIC_OK);
    assert_int_equal(mic_txn_commit(t), MIC_OK);

    t = begin(f, 0);
    memset(&out, 0, sizeof out);
    assert_int_equal(mic_store_agg_get(t, k1, &out), MIC_OK);
    assert_int_equal(out.versioned, 1);
    assert_int_equal(out.baseline, 3);
    assert_int_equal(out.max_version, 3);
    assert_int_equal(out.contig, 3);
    assert_int_equal(out.contig_stored, 0); /* contiguous: stored as 0 */
    assert_int_equal(out.events, 7);
    assert_int_equal(out.ordinal, 5);
    assert_int_equal(mic_store_agg_get(t, k2, &out), MIC_ENOTFOUND);
    mic_txn_abort(t);

    /* The next versions change nothing stored: the last version is the
     * index's, and the watermark follows it. */
    t = begin(f, 1);
    for (uint64_t v = 4; v <= 6; v++) {
        r.seq = 10 + v;
        r.version = v;
        assert_int_equal(mic_store_aggidx_put(t, &r), MIC_OK);
    }
    assert_int_equal(mic_store_agg_get(t, k1, &out), MIC_OK);
    assert_int_equal(out.max_version, 6);
    assert_int_equal(out.contig, 6);
    /* Past a gap (a version far above 7), the watermark is written explicitly. */
    r.seq = 30;
    r.version = (1ull << 60) + 9;
    assert_int_equal(mic_store_aggidx_put(t, &r), MIC_OK);
    out.max_version = r.version;
    assert_int_equal(mic_store_agg_put(t, k1, &out), MIC_OK);
    assert_int_equal(mic_store_agg_get(t, k1, &out), MIC_OK);
    assert_int_equal(out.max_version, (1ull << 60) + 9);
    assert_int_equal(out.contig, 6);
    assert_int_equal(out.contig_stored, 6);
    /* An aggregate of another key does not lend it its versions. */
    r.seq = 40;
    r.version = (1ull << 61);
    memcpy(r.akey, k2, MIC_AKEY_LEN);
    assert_int_equal(mic_store_aggidx_put(t, &r), MIC_OK);
    assert_int_equal(mic_store_agg_get(t, k1, &out), MIC_OK);
    assert_int_equal(out.max_version, (1ull << 60) + 9);
    mic_txn_abort(t);

    /* a put replaces */
    t = begin(f, 1);
    in.versioned = 0;
    in.events = 8;
    assert_int_equal(mic_store_agg_put(t, k1, &in), MIC_OK);
    assert_int_equal(mic_store_agg_get(t, k1, &out), MIC_OK);
    assert_int_equal(out.versioned, 0);
    assert_int_equal(out.events, 8);
    mic_txn_abort(t);
}

static void aggidx_versions(void **state)
{
    struct fixture *f = *state;
    struct mic_rec r;
    uint64_t seq = 0;
    mic_txn *t = begin(f, 1);

    fill_rec(&r, 10, "{");
    r.version = 4;
    assert_int_equal(mic_store_aggidx_put(t, &r), MIC_OK);
    r.seq = 12;
    r.version = 5;
    assert_int_equal(mic_store_aggidx_put(t, &r), MIC_OK);
    assert_int_equal(mic_txn_commit(t), MIC_OK);

    t = begin(f, 0);
    assert_int_equal(mic_store_aggidx_get_version(t, r.akey, 4, &seq), MIC_OK);
    assert_int_equal(seq, 10);
    assert_int_equal(mic_store_aggidx_get_version(t, r.akey, 5, &seq), MIC_OK);
    assert_int_equal(seq, 12);
    assert_int_equal(mic_store_aggidx_get_version(t, r.akey, 6, &seq),
                     MIC_ENOTFOUND);
    assert_int_equal(mic_store_aggidx_get_version(t, r.akey, 3, &seq),
                     MIC_ENOTFOUND);
    mic_txn_abort(t);

    /* the same versioned key twice is a conflict, and keeps the first */
    t = begin(f, 1);
    r.seq = 13;
    r.version = 4;
    assert_int_equal(mic_store_aggidx_put(t, &r), MIC_ECONFLICT);
    assert_int_equal(mic_store_aggidx_get_version(t, r.akey, 4, &seq), MIC_OK);
    assert_int_equal(seq, 10);
    /* the transaction is still usable after the conflict */
    r.version = 6;
    assert_int_equal(mic_store_aggidx_put(t, &r), MIC_OK);
    assert_int_equal(mic_txn_commit(t), MIC_OK);

    t = begin(f, 0);
    assert_int_equal(mic_store_aggidx_get_version(t, r.akey, 6, &seq), MIC_OK);
    assert_int_equal(seq, 13);
    mic_txn_abort(t);
}

static void aggidx_unversioned(void **state)
{
    struct fixture *f = *state;
    struct mic_rec r;
    uint64_t seq = 0;
    mic_txn *t = begin(f, 1);

    fill_rec(&r, 20, "{");
    r.has_version = 0;
    r.version = 0;
    r.created_at_us = 4;
    assert_int_equal(mic_store_aggidx_put(t, &r), MIC_OK);
    /* same time, another seq: a separate entry */
    r.seq = 21;
    assert_int_equal(mic_store_aggidx_put(t, &r), MIC_OK);
    /* the same (created_at, seq) again */
    assert_int_equal(mic_store_aggidx_put(t, &r), MIC_ECONFLICT);
    /* unversioned entries are not found as versions */
    assert_int_equal(mic_store_aggidx_get_version(t, r.akey, 4, &seq),
                     MIC_ENOTFOUND);
    assert_int_equal(mic_store_aggidx_get_version(t, r.akey, 0, &seq),
                     MIC_ENOTFOUND);
    /* and a version equal to an unversioned created_at does not collide */
    r.has_version = 1;
    r.version = 4;
    r.seq = 22;
    assert_int_equal(mic_store_aggidx_put(t, &r), MIC_OK);
    assert_int_equal(mic_store_aggidx_get_version(t, r.akey, 4, &seq), MIC_OK);
    assert_int_equal(seq, 22);
    assert_int_equal(mic_txn_commit(t), MIC_OK);
}

/* ---- Topics ---- */

struct seen {
    int n, stop_after;
    char names[8][16];
    struct mic_topic_rec recs[8];
};

static int collect(void *arg, const char *name, size_t len,
                   const struct mic_topic_rec *tr)
{
    struct seen *s = arg;

    assert_true(s->n < 8);
    assert_true(len < sizeof s->names[0]);
    memcpy(s->names[s->n], name, len);
    s->names[s->n][len] = 0;
    s->recs[s->n] = *tr;
    s->n++;
    return s->stop_after && s->n == s->stop_after ? 7 : 0;
}

static void topics(void **state)
{
    struct fixture *f = *state;
    static const char *const put_order[] = {"orders", "zeta", "alpha",
                                            "orders2", "mid", "Zulu"};
    static const char *const name_order[] = {"Zulu", "alpha", "mid", "orders",
                                             "orders2", "zeta"};
    struct mic_topic_rec tr, got;
    struct seen seen;
    mic_txn *t = begin(f, 1);

    memset(&seen, 0, sizeof seen);
    assert_int_equal(mic_store_topic_each(t, collect, &seen), MIC_OK);
    assert_int_equal(seen.n, 0);
    for (uint32_t i = 0; i < 6; i++) {
        tr.id = i + 1;
        tr.require_versions = (uint8_t)(i & 1);
        tr.retention_s = 604800 + i;
        tr.max_payload_bytes = (1ull << 20) + i;
        tr.dedupe_retain_s = (1ull << 35) + i;
        assert_int_equal(mic_store_topic_put(t, put_order[i],
                                             strlen(put_order[i]), &tr),
                         MIC_OK);
    }
    assert_int_equal(mic_txn_commit(t), MIC_OK);

    t = begin(f, 0);
    memset(&got, 0, sizeof got);
    assert_int_equal(mic_store_topic_get(t, "alpha", 5, &got), MIC_OK);
    assert_int_equal(got.id, 3);
    assert_int_equal(got.require_versions, 0);
    assert_int_equal(got.retention_s, 604802);
    assert_int_equal(got.max_payload_bytes, (1ull << 20) + 2);
    assert_int_equal(got.dedupe_retain_s, (1ull << 35) + 2);
    assert_int_equal(mic_store_topic_get(t, "zeta", 4, &got), MIC_OK);
    assert_int_equal(got.id, 2);
    assert_int_equal(got.require_versions, 1);
    assert_int_equal(mic_store_topic_get(t, "order", 5, &got), MIC_ENOTFOUND);
    assert_int_equal(mic_store_topic_get(t, "ALPHA", 5, &got), MIC_ENOTFOUND);

    memset(&seen, 0, sizeof seen);
    assert_int_equal(mic_store_topic_each(t, collect, &seen), MIC_OK);
    assert_int_equal(seen.n, 6);
    for (int i = 0; i < 6; i++)
        assert_string_equal(seen.names[i], name_order[i]);
    assert_int_equal(seen.recs[3].id, 1); /* "orders" */
    assert_int_equal(seen.recs[3].retention_s, 604800);

    /* a nonzero return stops the walk and is returned */
    memset(&seen, 0, sizeof seen);
    seen.stop_after = 2;
    assert_int_equal(mic_store_topic_each(t, collect, &seen), 7);
    assert_int_equal(seen.n, 2);
    mic_txn_abort(t);

    t = begin(f, 1);
    assert_int_equal(mic_store_topic_del(t, "mid", 3), MIC_OK);
    assert_int_equal(mic_store_topic_get(t, "mid", 3, &got), MIC_ENOTFOUND);
    assert_int_equal(mic_store_topic_del(t, "mid", 3), MIC_ENOTFOUND);
    /* a put replaces */
    tr.id = 99;
    assert_int_equal(mic_store_topic_put(t, "zeta", 4, &tr), MIC_OK);
    assert_int_equal(mic_txn_commit(t), MIC_OK);

    t = begin(f, 0);
    memset(&seen, 0, sizeof seen);
    assert_int_equal(mic_store_topic_each(t, collect, &seen), MIC_OK);
    assert_int_equal(seen.n, 5);
    assert_string_equal(seen.names[2], "orders");
    assert_string_equal(seen.names[4], "zeta");
    assert_int_equal(seen.recs[4].id, 99);
    mic_txn_abort(t);
}

static void next_topic_id(void **state)
{
    struct fixture *f = *state;
    uint32_t id = 0;
    mic_txn *t = begin(f, 1);

    assert_int_equal(mic_store_next_topic_id(t, &id), MIC_OK);
    assert_int_equal(id, 1);
    assert_int_equal(mic_store_next_topic_id(t, &id), MIC_OK);
    assert_int_equal(id, 2);
    assert_int_equal(mic_txn_commit(t), MIC_OK);

    t = begin(f, 1);
    assert_int_equal(mic_store_next_topic_id(t, &id), MIC_OK);
    assert_int_equal(id, 3);
    mic_txn_abort(t); /* an aborted allocation is not used up */

    t = begin(f, 1);
    assert_int_equal(mic_store_next_topic_id(t, &id), MIC_OK);
    assert_int_equal(id, 3);
    assert_int_equal(mic_store_next_topic_id(t, &id), MIC_OK);
    assert_int_equal(id, 4);
    assert_int_equal(mic_txn_commit(t), MIC_OK);
}

/* ---- Map growth ---- */

static int setup_small(void **state)
{
    struct fixture *f;

    if (setup_dir(state))
        return -1;
    f = *state;
    if (mic_store_open(&f->s, f->dir, 1 * MiB, 4 * MiB, 1) != MIC_OK) {
        storedir_rm(f->dir);
        free(f);
        return -1;
    }
    return 0;
}

/* Put record 'seq' (64 KiB of JSON) in its own write transaction.
 * Returns the put's code; commits when it succeeded. */
static int put_big(struct fixture *f, uint64_t seq, const char *json)
{
    struct mic_rec r;
    mic_txn *t = begin(f, 1);
    int rc;

    fill_rec(&r, seq, json);
    rc = mic_store_log_put(t, &r);
    if (rc != MIC_OK) {
        mic_txn_abort(t);
        return rc;
    }
    assert_int_equal(mic_txn_commit(t), MIC_OK);
    return MIC_OK;
}

static void map_grows_to_limit(void **state)
{
    struct fixture *f = *state;
    char *json = malloc(64 * KiB + 1);
    uint64_t seq = 1, size, used, max, last = 0;
    int rc, grows = 0;
    mic_txn *t;

    assert_non_null(json);
    memset(json, 'p', 64 * KiB);
    json[0] = '{';
    json[64 * KiB] = 0;

    /* fill the first 1 MiB */
    while ((rc = put_big(f, seq, json)) == MIC_OK)
        seq++;
    assert_int_equal(rc, MIC_ENOSPC);
    assert_true(seq > 2);
    assert_true(seq < 17); /* 16 records of 64 KiB cannot fit in 1 MiB */

    /* grow, and the same put now succeeds */
    assert_int_equal(mic_store_grow(f->s), MIC_OK);
    grows++;
    mic_store_usage(f->s, &size, &used, &max);
    assert_int_equal(size, 2 * MiB);
    assert_int_equal(max, 4 * MiB);
    assert_int_equal(put_big(f, seq, json), MIC_OK);
    seq++;

    /* keep going until growth stops at the limit */
    for (;;) {
        rc = put_big(f, seq, json);
        if (rc == MIC_OK) {
            seq++;
            continue;
        }
        assert_int_equal(rc, MIC_ENOSPC);
        rc = mic_store_grow(f->s);
        if (rc != MIC_OK)
            break;
        grows++;
        assert_true(grows <= 2);
    }
    assert_int_equal(rc, MIC_ENOSPC);
    assert_int_equal(grows, 2); /* 1 -> 2 -> 4 MiB */
    mic_store_usage(f->s, &size, &used, &max);
    assert_int_equal(size, 4 * MiB);
    assert_true(used <= size);
    assert_true(seq > 32); /* the last 2 MiB held at least 16 more */
    /* still full, still at the limit */
    assert_int_equal(put_big(f, seq, json), MIC_ENOSPC);
    assert_int_equal(mic_store_grow(f->s), MIC_ENOSPC);

    /* everything stored is readable */
    t = begin(f, 0);
    assert_int_equal(mic_store_last_seq(t, &last), MIC_OK);
    assert_int_equal(last, seq - 1);
    for (uint64_t i = 1; i < seq; i++) {
        struct mic_rec r;
        assert_int_equal(mic_store_log_get(t, i, &r), MIC_OK);
        assert_int_equal(r.json_len, 64 * KiB);
        assert_int_equal(r.json[64 * KiB - 1], 'p');
    }
    mic_txn_abort(t);
    free(json);
}

static void grow_survives_reopen(void **state)
{
    struct fixture *f = *state;
    char *json = malloc(64 * KiB + 1);
    uint64_t seq = 1, size, used, max;
    mic_txn *t;
    struct mic_rec r;

    assert_non_null(json);
    memset(json, 'q', 64 * KiB);
    json[64 * KiB] = 0;
    assert_int_equal(mic_store_grow(f->s), MIC_OK);
    assert_int_equal(mic_store_grow(f->s), MIC_OK);
    while (seq < 40 && put_big(f, seq, json) == MIC_OK)
        seq++;
    assert_true(seq > 20); /* more than 1 MiB went in */
    mic_store_close(f->s);
    f->s = NULL;

    /* reopened with the small initial size, the data is all there */
    assert_int_equal(mic_store_open(&f->s, f->dir, 1 * MiB, 4 * MiB, 1), MIC_OK);
    mic_store_usage(f->s, &size, &used, &max);
    assert_true(size >= used);
    t = begin(f, 0);
    assert_int_equal(mic_store_log_get(t, seq - 1, &r), MIC_OK);
    assert_int_equal(r.json_len, 64 * KiB);
    mic_txn_abort(t);
    free(json);
}

/* ---- Fault hook ---- */

static const char *fault_db;
static int fault_code;
static int fault_calls;

static int fault(const char *dbname)
{
    fault_calls++;
    return strcmp(dbname, fault_db) == 0 ? fault_code : 0;
}

static void fault_hook(void **state)
{
    struct fixture *f = *state;
    uint8_t d[MIC_DIGEST_LEN] = {1, 2, 3};
    uint64_t seq;
    struct mic_topic_rec tr = {.id = 1};
    struct mic_rec r;
    mic_txn *t = begin(f, 1);

    fault_db = "ids";
    fault_code = MDB_MAP_FULL;
    fault_calls = 0;
    mic_store_set_fault(fault);
    assert_int_equal(mic_store_id_put(t, "e1", 2, 1, d), MIC_ENOSPC);
    assert_true(fault_calls > 0);
    /* other sub-databases still take writes */
    assert_int_equal(mic_store_topic_put(t, "t", 1, &tr), MIC_OK);
    fill_rec(&r, 1, "{");
    assert_int_equal(mic_store_log_put(t, &r), MIC_OK);

    fault_code = ENOSPC;
    assert_int_equal(mic_store_id_put(t, "e1", 2, 1, d), MIC_ENOSPC);
    fault_code = EIO;
    assert_int_equal(mic_store_id_put(t, "e1", 2, 1, d), MIC_EIO);

    fault_db = "topics";
    fault_code = MDB_MAP_FULL;
    assert_int_equal(mic_store_topic_put(t, "u", 1, &tr), MIC_ENOSPC);
    assert_int_equal(mic_store_topic_del(t, "t", 1), MIC_ENOSPC);
    fault_db = "log";
    fill_rec(&r, 2, "{");
    assert_int_equal(mic_store_log_put(t, &r), MIC_ENOSPC);
    fault_db = "aggidx";
    assert_int_equal(mic_store_aggidx_put(t, &r), MIC_ENOSPC);
    fault_db = "time";
    assert_int_equal(mic_store_time_put(t, 1, 1, "e", 1, 1), MIC_ENOSPC);
    fault_db = "aggs";
    assert_int_equal(mic_store_agg_put(t, r.akey, &(struct mic_agg_rec){0}),
                     MIC_ENOSPC);
    fault_db = "meta";
    assert_int_equal(mic_store_next_topic_id(t, &(uint32_t){0}), MIC_ENOSPC);

    /* reset: writes go through again */
    mic_store_set_fault(NULL);
    fault_calls = 0;
    assert_int_equal(mic_store_id_put(t, "e1", 2, 1, d), MIC_OK);
    assert_int_equal(fault_calls, 0);
    assert_int_equal(mic_txn_commit(t), MIC_OK);

    t = begin(f, 0);
    assert_int_equal(mic_store_id_get(t, "e1", 2, &seq, d), MIC_OK);
    assert_int_equal(seq, 1);
    assert_int_equal(mic_store_topic_get(t, "t", 1, &tr), MIC_OK);
    mic_txn_abort(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(open_close, setup, teardown),
        cmocka_unit_test_setup_teardown(open_creates_nested_dirs, setup, teardown),
        cmocka_unit_test_setup_teardown(open_fails_on_a_file, setup, teardown),
        cmocka_unit_test_setup_teardown(format_version_written, setup, teardown),
        cmocka_unit_test_setup_teardown(other_format_refused, setup_dir, teardown),
        cmocka_unit_test_setup_teardown(malformed_format_refused, setup_dir, teardown),
        cmocka_unit_test_setup_teardown(format_2_migrates, setup_dir, teardown),
        cmocka_unit_test_setup_teardown(format_3_migrates_log, setup, teardown),
        cmocka_unit_test_setup_teardown(format_3_migration_resumes, setup, teardown),
        cmocka_unit_test_setup_teardown(log_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(log_seq_order, setup, teardown),
        cmocka_unit_test_setup_teardown(uncommitted_is_invisible, setup, teardown),
        cmocka_unit_test_setup_teardown(data_survives_reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(ids_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(ids_interleaved_in_one_txn, setup, teardown),
        cmocka_unit_test_setup_teardown(time_index, setup, teardown),
        cmocka_unit_test(akey_of_type_and_id),
        cmocka_unit_test_setup_teardown(aggregates_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(aggidx_versions, setup, teardown),
        cmocka_unit_test_setup_teardown(aggidx_unversioned, setup, teardown),
        cmocka_unit_test_setup_teardown(topics, setup, teardown),
        cmocka_unit_test_setup_teardown(next_topic_id, setup, teardown),
        cmocka_unit_test_setup_teardown(map_grows_to_limit, setup_small, teardown),
        cmocka_unit_test_setup_teardown(grow_survives_reopen, setup_small, teardown),
        cmocka_unit_test_setup_teardown(fault_hook, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
