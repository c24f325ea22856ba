/* test_corrupt.c - checksummed log records and micd --verify (issue 16,
 * T6; proto/store-format.md, "Log record" and "Verification").
 *
 * Units: CRC-32C against its check value, the table and the SSE4.2 paths
 * against each other, and mic_rec_decode on every single-bit flip of a
 * record.
 *
 * A real micd: events are published and micd is stopped cleanly (its
 * journal then holds no chain, so nothing replays over data.mdb at the next
 * open: the test checks both journal headers); one byte inside one event's
 * payload is flipped in data.mdb, found by its unique payload string
 * (every copy of it: LMDB's copy-on-write may leave a stale copy in a free
 * page); micd starts again.  The event's lookup, a range read over it and
 * a resend of it answer 500 store_corrupt naming its seq; a claim that
 * would grant it hands out the others and dead-letters it (DLQ entry
 * without its event, last_error store_corrupt, skippable); the
 * other events are still served, publishes still work, the metric counts
 * the reads, micd's log has a line naming the seq, and micd --verify exits
 * 1 naming it.  --verify exits 0 on an intact store and 2 on no store or
 * on a store micd has open.
 *
 * An index entry that points nowhere is made with the store's own calls
 * (a log record deleted under its ids and time entries, a ready entry of a
 * delivery that does not exist): mic_store_verify and micd --verify report
 * each one. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/crc32c.h"
#include "core/err.h"
#include "harness.h"
#include "claimkit.h"
#include "procfx.h"
#include "store/store.h"
#include "store/log.h"
#include "store/dlv.h"
#include "store/verify.h"
#include "storedir.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MiB (1024ull * 1024)
#define BAD_PAYLOAD "flip-me-7f3a9c21e5"
/* the corrupt event, as published (a resend of it is a duplicate) */
#define C2_BODY "{\"event_id\":\"c-2\",\"topic\":\"cx\",\"created_at\":\"2026-05-01T10:00:01Z\"," \
                "\"payload\":{\"v\":\"" BAD_PAYLOAD "\"}}"

/* ---- Units: CRC-32C ---- */

static void crc32c_check_value(void **state)
{
    (void)state;
    assert_int_equal(mic_crc32c(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(mic_crc32c_sw(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(mic_crc32c(0, "", 0), 0);
    /* RFC 3720 B.4: 32 bytes of zeros, of 0xff */
    {
        uint8_t z[32];
        memset(z, 0, sizeof z);
        assert_int_equal(mic_crc32c(0, z, 32), 0x8A9136AAu);
        memset(z, 0xff, sizeof z);
        assert_int_equal(mic_crc32c(0, z, 32), 0x62A8AB43u);
    }
}

/* Both paths agree at every alignment and length up to 600 bytes, and a
 * CRC continued over two pieces equals the CRC of the whole. */
static void crc32c_paths_agree(void **state)
{
    uint8_t buf[640];
    unsigned seed = 12345;

    (void)state;
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (uint8_t)rand_r(&seed);
    for (size_t off = 0; off < 8; off++)
        for (size_t len = 0; len <= 600; len++) {
            uint32_t whole = mic_crc32c_sw(0, buf + off, len);
            assert_int_equal(mic_crc32c(0, buf + off, len), whole);
            assert_int_equal(mic_crc32c(mic_crc32c(0, buf + off, len / 3), buf + off + len / 3,
                                        len - len / 3), whole);
        }
}

/* ---- Units: the record decoder ---- */

struct ufx {
    char dir[64];
    mic_store *s;
};

static int unit_setup(void **state)
{
    struct ufx *f = calloc(1, sizeof *f);

    if (!f)
        return -1;
    snprintf(f->dir, sizeof f->dir, "/tmp/mic-test-corrupt-XXXXXX");
    if (!mkdtemp(f->dir) || mic_store_open(&f->s, f->dir, 16 * MiB, 64 * MiB, 1)) {
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int unit_teardown(void **state)
{
    struct ufx *f = *state;

    mic_store_close(f->s);
    storedir_rm(f->dir);
    free(f);
    return 0;
}

static void fill_rec(struct mic_rec *r, uint64_t seq, const char *json)
{
    memset(r, 0, sizeof *r);
    r->seq = seq;
    r->topic_id = 7;
    r->priority = 3;
    r->has_agg = 1;
    r->created_at_us = 1790668800LL * 1000000 + seq;
    r->received_at_us = 1790668801LL * 1000000 + seq;
    for (int i = 0; i < MIC_AKEY_LEN; i++)
        r->akey[i] = (uint8_t)(i + seq);
    r->json = json;
    r->json_len = strlen(json);
}

/* Copy the stored bytes of log record 'seq': a read hands back r.json
 * pointing into the stored value, whose 56-byte header is right before it
 * and whose 4-byte CRC right after the JSON. */
static void rec_bytes(struct ufx *f, uint64_t seq, uint8_t *out, size_t *len)
{
    struct mic_rec r;
    mic_txn *t;

    assert_int_equal(mic_txn_begin(f->s, 0, &t), MIC_OK);
    assert_int_equal(mic_store_log_get(t, seq, &r), MIC_OK);
    *len = 56 + r.json_len + 4;
    memcpy(out, r.json - 56, *len);
    mic_txn_abort(t);
}

static void decode_flags_every_bit_flip(void **state)
{
    struct ufx *f = *state;
    const char *json = "{\"event_id\":\"d-1\",\"payload\":{\"k\":\"v\"},\"topic\":\"t\"}";
    struct mic_rec r, back;
    uint8_t val[256];
    size_t len;
    mic_txn *t;

    fill_rec(&r, 42, json);
    assert_int_equal(mic_txn_begin(f->s, 1, &t), MIC_OK);
    assert_int_equal(mic_store_log_put(t, &r), MIC_OK);
    assert_int_equal(mic_txn_commit(t), MIC_OK);
    rec_bytes(f, 42, val, &len);
    assert_int_equal(len, 56 + strlen(json) + 4);

    assert_int_equal(mic_rec_decode(42, val, len, &back), MIC_OK);
    assert_int_equal(back.topic_id, 7);
    assert_int_equal(back.priority, 3);
    assert_int_equal(back.json_len, strlen(json));
    assert_memory_equal(back.json, json, strlen(json));
    /* the seq is covered: the same bytes under another key fail */
    assert_int_equal(mic_rec_decode(43, val, len, &back), MIC_ECORRUPT);
    /* every single-bit flip of every byte (CRC trailer included) */
    for (size_t i = 0; i < len; i++)
        for (int b = 0; b < 8; b++) {
            val[i] ^= (uint8_t)(1 << b);
            assert_int_equal(mic_rec_decode(42, val, len, &back), MIC_ECORRUPT);
            val[i] ^= (uint8_t)(1 << b);
        }
    /* cut short: a header and a CRC do not fit */
    assert_int_equal(mic_rec_decode(42, val, 59, &back), MIC_EIO);
    assert_int_equal(mic_rec_decode(42, val, 0, &back), MIC_EIO);
    /* a truncated record fails its CRC */
    assert_int_equal(mic_rec_decode(42, val, len - 1, &back), MIC_ECORRUPT);
    assert_int_equal(mic_rec_decode(42, val, len, &back), MIC_OK);
}

/* ---- Running micd --verify ---- */

/* micd --verify 'dir': its exit status (asserted normal), stdout in *out. */
static int run_verify(const char *dir, char **out)
{
    int rc = srv_verify(dir, out);

    assert_non_null(*out);
    assert_true(rc >= 0);
    return rc;
}

/* ---- Index entries that point nowhere (store calls) ---- */

static void verify_reports_dangling_entries(void **state)
{
    struct ufx *f = *state;
    struct mic_verify_report rep;
    uint8_t digest[MIC_DIGEST_LEN] = {1};
    struct mic_rec r;
    mic_txn *t;
    char *out;
    FILE *mem;
    char *text = NULL;
    size_t tlen = 0;

    assert_int_equal(mic_txn_begin(f->s, 1, &t), MIC_OK);
    for (uint64_t seq = 1; seq <= 3; seq++) {
        char id[16];
        snprintf(id, sizeof id, "dang-%llu", (unsigned long long)seq);
        fill_rec(&r, seq, "{\"x\":1}");
        assert_int_equal(mic_store_log_put(t, &r), MIC_OK);
        assert_int_equal(mic_store_id_put(t, id, strlen(id), seq, digest), MIC_OK);
        assert_int_equal(mic_store_time_put(t, 7, r.created_at_us, id, strlen(id), seq),
                         MIC_OK);
    }
    assert_int_equal(mic_txn_commit(t), MIC_OK);
    /* clean so far */
    mic_store_close(f->s);
    f->s = NULL;
    assert_int_equal(run_verify(f->dir, &out), 0);
    assert_non_null(strstr(out, "3 log records, 0 bad records; 6 index entries, 0 dangling: ok"));
    free(out);
    assert_int_equal(mic_store_open(&f->s, f->dir, 16 * MiB, 64 * MiB, 1), MIC_OK);

    /* seq 2's record goes, its ids and time entries stay; a ready entry
     * names a delivery (group 9, seq 3) that does not exist */
    assert_int_equal(mic_txn_begin(f->s, 1, &t), MIC_OK);
    assert_int_equal(mic_store_log_del(t, 2), MIC_OK);
    assert_int_equal(mic_store_ready_put(t, 9, 0, 0, 3), MIC_OK);
    assert_int_equal(mic_txn_commit(t), MIC_OK);
    mic_store_close(f->s);
    f->s = NULL;

    /* the function */
    assert_non_null(mem = open_memstream(&text, &tlen));
    assert_int_equal(mic_store_verify(f->dir, mem, &rep), MIC_OK);
    fclose(mem);
    assert_int_equal(rep.records, 2);
    assert_int_equal(rep.bad_records, 0);
    assert_int_equal(rep.dangling, 3);
    assert_non_null(strstr(text, "dangling: ids event_id=dang-2 -> seq=2 (no log record)"));
    assert_non_null(strstr(text, "dangling: time topic_id=7 created_at_us="));
    assert_non_null(strstr(text, "event_id=dang-2 -> seq=2 (no log record)"));
    assert_non_null(strstr(text, "dangling: ready gid=9 seq=3 (no delivery record)"));
    assert_null(strstr(text, "dang-1"));
    free(text);

    /* and micd --verify: exit 1, the same lines, the summary */
    assert_int_equal(run_verify(f->dir, &out), 1);
    assert_non_null(strstr(out, "dangling: ids event_id=dang-2 -> seq=2"));
    assert_non_null(strstr(out, "dangling: ready gid=9 seq=3"));
    assert_non_null(strstr(out, "2 log records, 0 bad records; 7 index entries, 3 dangling: CORRUPT"));
    free(out);
    assert_int_equal(mic_store_open(&f->s, f->dir, 16 * MiB, 64 * MiB, 1), MIC_OK);
}

/* No store, and a store that micd has open: exit 2, nothing created. */
static void verify_refuses_what_it_cannot_open(void **state)
{
    struct ufx *f = *state;
    char missing[128], *out;
    struct stat st;

    snprintf(missing, sizeof missing, "%s/none", f->dir);
    assert_int_equal(run_verify(missing, &out), 2);
    assert_non_null(strstr(out, "no store there"));
    free(out);
    assert_int_equal(stat(missing, &st), -1);
    /* f->s holds the store's lock, as a running micd does */
    assert_int_equal(run_verify(f->dir, &out), 2);
    assert_non_null(strstr(out, "a running micd has it open"));
    free(out);
}

/* ---- A real micd on a store with a flipped byte ---- */

struct cfx {
    struct srv s;
    uint64_t bad_seq;
    char bad_seq_text[32];
};

static int resp_ok(const struct srv *s, const char *method, const char *path,
                   const char *body, long want)
{
    struct resp r;
    int ok = http_json(s, method, path, body, &r) == 0 && r.status == want;

    if (!ok)
        fprintf(stderr, "%s %s: %ld %s\n", method, path, r.status, r.body ? r.body : "");
    resp_free(&r);
    return ok;
}

/* Both journal files say "no chain" (first_seq, u64 LE at offset 16, is 0):
 * the next open replays nothing over data.mdb. */
static int journal_empty(const char *dir)
{
    for (int i = 0; i < 2; i++) {
        char path[300];
        uint8_t h[24];
        uint64_t first = 0;
        int fd;
        snprintf(path, sizeof path, "%s/journal-%d", dir, i);
        if ((fd = open(path, O_RDONLY)) < 0)
            return 0;
        if (pread(fd, h, sizeof h, 0) != (ssize_t)sizeof h || memcmp(h, "MICJRNL1", 8)) {
            close(fd);
            return 0;
        }
        close(fd);
        for (int b = 7; b >= 0; b--)
            first = first << 8 | h[16 + b];
        if (first != 0)
            return 0;
    }
    return 1;
}

/* Flip one byte inside every copy of 'needle' in dir/data.mdb; the number
 * of copies. */
static int flip_in_file(const char *dir, const char *needle)
{
    char path[300];
    size_t n = strlen(needle);
    char *data;
    struct stat st;
    int fd, copies = 0;

    snprintf(path, sizeof path, "%s/data.mdb", dir);
    if ((fd = open(path, O_RDWR)) < 0 || fstat(fd, &st))
        return -1;
    data = malloc((size_t)st.st_size);
    if (!data || pread(fd, data, (size_t)st.st_size, 0) != st.st_size) {
        free(data);
        close(fd);
        return -1;
    }
    for (char *p = data; (p = memmem(p, (size_t)(data + st.st_size - p), needle, n)); p += n) {
        char c = (char)(p[3] ^ 0x01);
        if (pwrite(fd, &c, 1, p + 3 - data) != 1)
            copies = -1000;
        copies++;
    }
    free(data);
    if (fsync(fd))
        copies = -1;
    close(fd);
    return copies;
}

static double metric(const struct srv *s, const char *name)
{
    struct resp r;
    double v = -1;

    if (http(s, "GET", "/metrics", NULL, NULL, 0, NULL, &r) == 0 && r.status == 200) {
        char key[128];
        const char *p;
        snprintf(key, sizeof key, "\n%s ", name);
        if ((p = strstr(r.body, key)))
            v = strtod(p + strlen(key), NULL);
    }
    resp_free(&r);
    return v;
}

static int group_setup(void **state)
{
    struct cfx *f = calloc(1, sizeof *f);
    char *out = NULL;
    int copies, rc;

    if (!f)
        return -1;
    *state = f;
    if (srv_start(&f->s, NULL))
        return -1;
    if (!resp_ok(&f->s, "PUT", "/v1/topics/cx", "{}", 201) ||
        !resp_ok(&f->s, "PUT", "/v1/groups/cg", "{\"topics\":[\"cx\"]}", 201) ||
        !resp_ok(&f->s, "POST", "/v1/events",
                 "{\"events\":["
                 "{\"event_id\":\"c-1\",\"topic\":\"cx\",\"created_at\":\"2026-05-01T10:00:00Z\","
                 "\"payload\":{\"v\":\"first-payload\"}},"
                 "{\"event_id\":\"c-2\",\"topic\":\"cx\",\"created_at\":\"2026-05-01T10:00:01Z\","
                 "\"payload\":{\"v\":\"" BAD_PAYLOAD "\"}},"
                 "{\"event_id\":\"c-3\",\"topic\":\"cx\",\"created_at\":\"2026-05-01T10:00:02Z\","
                 "\"payload\":{\"v\":\"third-payload\"}}]}", 201))
        return -1;
    f->bad_seq = 2;
    snprintf(f->bad_seq_text, sizeof f->bad_seq_text, "seq %llu", (unsigned long long)f->bad_seq);
    if (srv_stop(&f->s) != 0 || !journal_empty(f->s.dir))
        return -1;
    /* intact: --verify exits 0 */
    rc = run_verify(f->s.dir, &out);
    if (rc != 0 || !strstr(out, "3 log records, 0 bad records") || !strstr(out, ": ok")) {
        fprintf(stderr, "verify of the intact store: %d %s\n", rc, out ? out : "");
        free(out);
        return -1;
    }
    free(out);
    copies = flip_in_file(f->s.dir, BAD_PAYLOAD);
    if (copies < 1) {
        fprintf(stderr, "payload not found in data.mdb (%d)\n", copies);
        return -1;
    }
    return srv_start(&f->s, NULL);
}

static int group_teardown(void **state)
{
    struct cfx *f = *state;

    if (!f)
        return 0;
    if (f->s.pid > 0 && srv_stop(&f->s) != 0)
        return -1;
    srv_cleanup(&f->s);
    http_thread_done();
    free(f);
    return 0;
}

/* {"error":{"code":"store_corrupt","message":"... seq 2 ..."}} */
static void assert_store_corrupt(const struct cfx *f, const struct resp *r)
{
    json_t *msg;

    if (r->status != 500)
        fprintf(stderr, "status %ld: %s\n", r->status, r->body);
    assert_int_equal(r->status, 500);
    assert_non_null(r->json);
    assert_string_equal(resp_error_code(r), "store_corrupt");
    msg = json_object_get(json_object_get(r->json, "error"), "message");
    assert_true(json_is_string(msg));
    assert_non_null(strstr(json_string_value(msg), f->bad_seq_text));
    /* never the bytes */
    assert_null(strstr(r->body, "flip-me"));
    assert_null(strstr(r->body, "fliq-me"));
}

static void lookup_answers_store_corrupt(void **state)
{
    struct cfx *f = *state;
    double before = metric(&f->s, "mic_store_corrupt_records_total");
    struct resp r;

    assert_true(before >= 0);
    assert_int_equal(http(&f->s, "GET", "/v1/events/c-2", NULL, NULL, 0, NULL, &r), 0);
    assert_store_corrupt(f, &r);
    resp_free(&r);
    /* the others are served */
    assert_int_equal(http(&f->s, "GET", "/v1/events/c-1", NULL, NULL, 0, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "first-payload"));
    resp_free(&r);
    assert_int_equal(http(&f->s, "GET", "/v1/events/c-3", NULL, NULL, 0, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "third-payload"));
    resp_free(&r);
    assert_true(metric(&f->s, "mic_store_corrupt_records_total") >= before + 1);
}

static void range_read_answers_store_corrupt(void **state)
{
    struct cfx *f = *state;
    double before = metric(&f->s, "mic_store_corrupt_records_total");
    struct resp r;
    int rc;

    /* a page over it */
    assert_int_equal(http(&f->s, "GET", "/v1/topics/cx/events", NULL, NULL, 0, NULL, &r), 0);
    assert_store_corrupt(f, &r);
    resp_free(&r);
    /* a page that ends before it, and one that starts after it */
    assert_int_equal(http(&f->s, "GET", "/v1/topics/cx/events?to=2026-05-01T10:00:00.5Z", NULL,
                          NULL, 0, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "first-payload"));
    resp_free(&r);
    assert_int_equal(http(&f->s, "GET", "/v1/topics/cx/events?from=2026-05-01T10:00:02Z", NULL,
                          NULL, 0, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "third-payload"));
    resp_free(&r);
    /* NDJSON: the stream, already 200, stops before the record: the
     * transfer ends incomplete (no last chunk) and never holds its bytes */
    rc = http(&f->s, "GET", "/v1/topics/cx/events", NULL, NULL, 0,
              "Accept: application/x-ndjson", &r);
    assert_int_not_equal(rc, 0);
    assert_true(r.body == NULL || (!strstr(r.body, "flip-me") && !strstr(r.body, "fliq-me")));
    resp_free(&r);
    assert_true(metric(&f->s, "mic_store_corrupt_records_total") >= before + 2);
}

static int stats_processing(const struct srv *s, const char *group, long *processing)
{
    struct resp r;
    json_t *g;
    size_t i;
    int found = 0;

    if (http(s, "GET", "/v1/stats", NULL, NULL, 0, NULL, &r) || r.status != 200 || !r.json) {
        resp_free(&r);
        return -1;
    }
    json_array_foreach(json_object_get(r.json, "groups"), i, g)
        if (!strcmp(json_string_value(json_object_get(g, "group")), group)) {
            *processing = (long)json_integer_value(json_object_get(g, "processing"));
            found = 1;
        }
    resp_free(&r);
    return found ? 0 : -1;
}

/* A claim that would grant the corrupt event hands out the others and
 * sends it to the DLQ instead (last_error store_corrupt, listed there
 * without its event), where it can be skipped: one bad record does not
 * stop the group.  The writer keeps working (a publish is stored). */
static void claim_dead_letters_it(void **state)
{
    struct cfx *f = *state;
    double before = metric(&f->s, "mic_store_corrupt_records_total");
    json_t *c, *a, *q, *d, *sk;
    long processing = -1;

    c = call(&f->s, "POST", "/v1/groups/cg/claim", "{\"max\":10}", 200);
    assert_int_equal(json_array_size(dlvs(c)), 2);
    assert_string_equal(jstr(json_object_get(dlv(c, 0), "event"), "event_id"), "c-1");
    assert_string_equal(jstr(json_object_get(dlv(c, 1), "event"), "event_id"), "c-3");
    assert_true(metric(&f->s, "mic_store_corrupt_records_total") > before);
    q = call(&f->s, "GET", "/v1/groups/cg/dlq", NULL, 200);
    assert_int_equal(json_array_size(json_object_get(q, "deliveries")), 1);
    d = json_array_get(json_object_get(q, "deliveries"), 0);
    assert_int_equal(jint(d, "seq"), (json_int_t)f->bad_seq);
    assert_true(json_is_null(json_object_get(d, "event")));
    assert_int_equal(strncmp(jstr(d, "last_error"), "store_corrupt", 13), 0);
    json_decref(q);
    sk = call(&f->s, "POST", "/v1/groups/cg/dlq/skip", "{\"seqs\":[2]}", 200);
    assert_string_equal(jstr(json_array_get(json_object_get(sk, "results"), 0), "status"), "skipped");
    json_decref(sk);
    a = settle(&f->s, "cg", "ack", items_of(c), NULL);
    expect_result(a, 0, 1, "acked");
    expect_result(a, 1, 3, "acked");
    json_decref(a);
    json_decref(c);
    assert_int_equal(stats_processing(&f->s, "cg", &processing), 0);
    assert_int_equal(processing, 0);
    assert_true(resp_ok(&f->s, "POST", "/v1/events",
                        "{\"event_id\":\"c-4\",\"topic\":\"cx\",\"payload\":{\"v\":\"fourth\"}}",
                        201));
    assert_true(resp_ok(&f->s, "GET", "/v1/events/c-4", NULL, 200));
}

/* Resends of the corrupt event (a duplicate reads its stored record),
 * sent while publishes run: the writer batches them together, and each
 * resend's failure must stay its own (writer.c applies the ops of a batch
 * that failed with MIC_ECORRUPT one transaction each): every publish is
 * stored (201), every resend answers 500 store_corrupt. */
#define PUBLISHERS 4
#define PUBLISHES 50

struct mixed {
    struct srv *s;
    int id;
    int ok, other;        /* publishes: 201 / anything else */
    int corrupt, wrong;   /* resends: store_corrupt / anything else */
    atomic_int *left;     /* publishers still running */
};

static void *publisher(void *arg)
{
    struct mixed *m = arg;

    for (int i = 0; i < PUBLISHES; i++) {
        char body[160];
        struct resp r;
        snprintf(body, sizeof body,
                 "{\"event_id\":\"mix-%d-%d\",\"topic\":\"cx\",\"payload\":{\"i\":%d}}",
                 m->id, i, i);
        if (http_json(m->s, "POST", "/v1/events", body, &r) == 0 && r.status == 201)
            m->ok++;
        else
            m->other++;
        resp_free(&r);
    }
    atomic_fetch_sub(m->left, 1);
    http_thread_done();
    return NULL;
}

static void *resender(void *arg)
{
    struct mixed *m = arg;

    do { /* at least once, however the threads are scheduled */
        struct resp r;
        if (http_json(m->s, "POST", "/v1/events", C2_BODY, &r) == 0 &&
            r.status == 500 && !strcmp(resp_error_code(&r), "store_corrupt"))
            m->corrupt++;
        else
            m->wrong++;
        resp_free(&r);
    } while (atomic_load(m->left) > 0);
    http_thread_done();
    return NULL;
}

static void corrupt_resend_fails_alone(void **state)
{
    struct cfx *f = *state;
    struct mixed m[PUBLISHERS + 2];
    pthread_t th[PUBLISHERS + 2];
    atomic_int left = PUBLISHERS;
    int ok = 0, other = 0, corrupt = 0, wrong = 0;
    long processing = -1;

    for (int i = 0; i < PUBLISHERS + 2; i++) {
        memset(&m[i], 0, sizeof m[i]);
        m[i].s = &f->s;
        m[i].id = i;
        m[i].left = &left;
        assert_int_equal(pthread_create(&th[i], NULL, i < PUBLISHERS ? publisher : resender,
                                        &m[i]), 0);
    }
    for (int i = 0; i < PUBLISHERS + 2; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        ok += m[i].ok;
        other += m[i].other;
        corrupt += m[i].corrupt;
        wrong += m[i].wrong;
    }
    printf("corrupt: %d publishes stored, %d failed; %d resends answered store_corrupt, "
           "%d otherwise\n", ok, other, corrupt, wrong);
    assert_int_equal(ok, PUBLISHERS * PUBLISHES);
    assert_int_equal(other, 0);
    assert_true(corrupt >= 1);
    assert_int_equal(wrong, 0);
    assert_int_equal(stats_processing(&f->s, "cg", &processing), 0);
    assert_int_equal(processing, 0);
}

static void log_names_the_seq(void **state)
{
    struct cfx *f = *state;
    char *log = file_read(f->s.logpath);

    assert_non_null(log);
    assert_non_null(strstr(log, "stored log record fails its checksum"));
    assert_non_null(strstr(log, "\"seq\":\"2\""));
    free(log);
}

/* micd --verify on the stopped store: exit 1, the bad record named. */
static void verify_names_the_bad_record(void **state)
{
    struct cfx *f = *state;
    char *out;

    assert_int_equal(srv_stop(&f->s), 0);
    f->s.pid = 0;
    assert_int_equal(run_verify(f->s.dir, &out), 1);
    assert_non_null(strstr(out, "bad record: log seq=2 (checksum mismatch)"));
    assert_non_null(strstr(out, " log records, 1 bad records;"));
    assert_non_null(strstr(out, "0 dangling: CORRUPT"));
    assert_null(strstr(out, "seq=1 "));
    free(out);
}

int main(void)
{
    const struct CMUnitTest units[] = {
        cmocka_unit_test(crc32c_check_value),
        cmocka_unit_test(crc32c_paths_agree),
        cmocka_unit_test_setup_teardown(decode_flags_every_bit_flip, unit_setup, unit_teardown),
        cmocka_unit_test_setup_teardown(verify_reports_dangling_entries, unit_setup,
                                        unit_teardown),
        cmocka_unit_test_setup_teardown(verify_refuses_what_it_cannot_open, unit_setup,
                                        unit_teardown),
    };
    const struct CMUnitTest served[] = {
        cmocka_unit_test(lookup_answers_store_corrupt),
        cmocka_unit_test(range_read_answers_store_corrupt),
        cmocka_unit_test(claim_dead_letters_it),
        cmocka_unit_test(corrupt_resend_fails_alone),
        cmocka_unit_test(log_names_the_seq),
        cmocka_unit_test(verify_names_the_bad_record),
    };
    int failed = cmocka_run_group_tests_name("units", units, NULL, NULL);

    return failed | cmocka_run_group_tests_name("served", served, group_setup, group_teardown);
}
