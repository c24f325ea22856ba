/* gen_records.c - the seed corpus of fuzz_record: stored log records made
 * by micd's own code, not by hand.
 *
 *   build/fuzz/gen_records DIR
 *
 * Each sample publish body below goes through mic_jdoc_parse and
 * mic_event_parse (the stored form), is completed with seq and received_at
 * as publish.c's writer does, and is written by mic_store_log_put into a
 * store in a temporary directory.  The store is closed, opened again with
 * plain LMDB read-only, and each value of the `log` sub-database is
 * written in fuzz_record's input form (a selector byte, then the value):
 * DIR/rec-<seq> without its CRC, which the target computes for its own
 * seq (odd selector), and DIR/rec-<seq>-as-stored as it is on disk; a
 * record of format 1 (48-byte header, no CRC, proto/store-format.md) is
 * made from the first by dropping deliver_at.  The temporary store is removed.  `make fuzz-seeds` runs it
 * into tests/fuzz/corpus/record (rerun after a record format change). */
#define _POSIX_C_SOURCE 200809L
#include "core/buf.h"
#include "core/clock.h"
#include "core/err.h"
#include "engine/event.h"
#include "core/jdoc.h"
#include "store/store.h"
#include "store/log.h"

#include <dirent.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const bodies[] = {
    "{\"topic\":\"orders\"}",
    "{\"event_id\":\"ord-1001\",\"topic\":\"orders.created\",\"aggregate_type\":\"order\","
    "\"aggregate_id\":\"1001\",\"aggregate_version\":3,\"event_type\":\"OrderCreated\","
    "\"priority\":5,\"created_at\":\"2026-09-29T08:00:00.123456Z\",\"headers\":{\"trace\":\"x\"},"
    "\"payload\":{\"total\":12.5,\"items\":[{\"sku\":\"A-1\",\"qty\":2}]}}",
    "{\"event_id\":\"c-9.1\",\"topic\":\"carts\",\"aggregate_type\":\"cart\",\"aggregate_id\":\"c-9\","
    "\"payload\":\"caf\\u00e9\"}",
    "{\"event_id\":\"later\",\"topic\":\"mail\",\"deliver_at\":\"2026-10-01T00:00:00+02:00\","
    "\"payload\":[1,2,3]}",
    "{\"event_id\":\"e:with:colons\",\"topic\":\"t\",\"payload\":null}",
};

static char tmp[] = "/tmp/mic-gen-records-XXXXXX";

static void rm_store(const char *dir);

/* Report, remove the temporary store, fail. */
static int die(const char *what, int rc)
{
    fprintf(stderr, "gen_records: %s: %d\n", what, rc);
    rm_store(tmp);
    return 1;
}

static void put_file(const char *dir, const char *name, const void *p, size_t n)
{
    char path[1024];
    FILE *f;

    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (!(f = fopen(path, "wb")) || fwrite(p, 1, n, f) != n || fclose(f)) {
        perror(path);
        exit(1);
    }
}

static void rm_store(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[1024];

    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    if (d)
        closedir(d);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    int64_t now = 1800000000000000LL; /* 2027-01-15, fixed: the seeds repeat */
    mic_store *s;
    mic_txn *t;
    MDB_env *env;
    MDB_txn *rt;
    MDB_dbi dbi;
    MDB_cursor *c;
    MDB_val k, v;
    int rc, n = 0;

    if (argc != 2)
        return fprintf(stderr, "usage: gen_records DIR\n"), 2;
    if (!mkdtemp(tmp))
        return perror("mkdtemp"), 1;
    if ((rc = mic_store_open(&s, tmp, 8 << 20, 8 << 20, 1)))
        return die("mic_store_open", rc);
    if ((rc = mic_txn_begin(s, 1, &t)))
        return die("mic_txn_begin", rc);
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        struct mic_error err;
        struct mic_event ev;
        struct mic_rec r;
        struct mic_buf b;
        char at[MIC_TIME_LEN + 1];
        mic_jdoc *d;

        if (mic_jdoc_parse(bodies[i], strlen(bodies[i]), 32, &d, NULL, &err) ||
            mic_event_parse(d, mic_jdoc_root(d), now, "", &ev, &err))
            return die(err.message, (int)i);
        mic_jdoc_fini(d);
        mic_buf_init(&b);
        mic_time_format(now + 1000, at);
        mic_buf_add(&b, ev.json, ev.json_len);
        mic_buf_printf(&b, ",\"seq\":%zu,\"received_at\":\"%s\"}", i + 1, at);
        memset(&r, 0, sizeof r);
        r.seq = i + 1;
        r.topic_id = (uint32_t)(i % 3 + 1);
        r.priority = ev.priority;
        r.has_agg = ev.has_agg;
        r.has_version = ev.has_version;
        r.created_at_us = ev.created_at_us;
        r.deliver_at_us = ev.deliver_at_us;
        r.received_at_us = now + 1000;
        r.version = ev.version;
        memcpy(r.akey, ev.akey, MIC_AKEY_LEN);
        r.json = b.p;
        r.json_len = b.len;
        if (b.oom || (rc = mic_store_log_put(t, &r)))
            return die("mic_store_log_put", rc);
        mic_buf_fini(&b);
        mic_event_fini(&ev);
    }
    if ((rc = mic_txn_commit(t)))
        return die("mic_txn_commit", rc);
    mic_store_close(s);

    /* The bytes as stored, through LMDB itself. */
    if ((rc = mdb_env_create(&env)) || (rc = mdb_env_set_maxdbs(env, 64)) ||
        (rc = mdb_env_open(env, tmp, MDB_RDONLY, 0600)) ||
        (rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &rt)) ||
        (rc = mdb_dbi_open(rt, "log", 0, &dbi)) || (rc = mdb_cursor_open(rt, dbi, &c)))
        return die(mdb_strerror(rc), rc);
    while ((rc = mdb_cursor_get(c, &k, &v, n ? MDB_NEXT : MDB_FIRST)) == 0) {
        char name[32];
        unsigned long long seq = 0;

        for (size_t i = 0; i < k.mv_size; i++)
            seq = seq << 8 | ((const unsigned char *)k.mv_data)[i];
        unsigned char *in = malloc(v.mv_size + 1);

        if (!in)
            return die("malloc", 0);
        snprintf(name, sizeof name, "rec-%llu", seq);
        /* fuzz_record's input: a selector byte, then the value; an odd
         * selector has the target append the CRC itself (for its seq),
         * so the record goes without its own 4 bytes of CRC */
        in[0] = 1;
        memcpy(in + 1, v.mv_data, v.mv_size - 4);
        put_file(argv[1], name, in, v.mv_size - 3);
        in[0] = 0; /* and as stored: its CRC covers another seq */
        memcpy(in + 1, v.mv_data, v.mv_size);
        snprintf(name, sizeof name, "rec-%llu-as-stored", seq);
        put_file(argv[1], name, in, v.mv_size + 1);
        free(in);
        if (n++ == 0 && v.mv_size > 60) { /* format 1: no deliver_at, no CRC */
            unsigned char *old = malloc(v.mv_size - 8);

            if (!old)
                return die("malloc", 0);
            old[0] = 1;
            memcpy(old + 1, v.mv_data, 48);
            memcpy(old + 49, (const unsigned char *)v.mv_data + 56, v.mv_size - 60);
            old[1] = 1;
            put_file(argv[1], "rec-format1", old, v.mv_size - 11);
            free(old);
        }
    }
    mdb_cursor_close(c);
    mdb_txn_abort(rt);
    mdb_env_close(env);
    rm_store(tmp);
    printf("gen_records: %d records (and one of format 1) in %s\n", n, argv[1]);
    return n > 0 ? 0 : 1;
}
