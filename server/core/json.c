/* json.c - request parsing under limits (see json.h). */
#include "json.h"

#include "buf.h"
#include "err.h"

#include <pthread.h>
#include <stdio.h>
#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- The arena (json.h) ---- */

struct arena_block {
    struct arena_block *next;
    size_t cap;
    alignas(max_align_t) unsigned char data[];
};

#define ARENA_FIRST (64u * 1024)

static _Thread_local struct mic_json_arena *current;
/* Set when an allocation for jansson failed in this thread: jansson words
 * some of its out-of-memory failures as syntax errors ("string or '}'
 * expected" when it cannot copy a key), so mic_json_load asks here. */
static _Thread_local int alloc_failed;
/* The thread's largest block, kept from one request to the next so that a
 * busy handler thread allocates (and the kernel zeroes) nothing per request;
 * freed when the thread ends (spare_key's destructor). */
static _Thread_local struct arena_block *spare;
static pthread_key_t spare_key;
#define ARENA_KEEP (8u * 1024 * 1024)
static pthread_once_t funcs_once = PTHREAD_ONCE_INIT;

static int in_arena(const struct mic_json_arena *a, const void *p)
{
    for (const struct arena_block *b = a->blocks; b; b = b->next)
        if ((const unsigned char *)p >= b->data && (const unsigned char *)p < b->data + b->cap)
            return 1;
    return 0;
}

static void *arena_malloc(size_t n)
{
    struct mic_json_arena *a = current;
    size_t need = (n + alignof(max_align_t) - 1) & ~(alignof(max_align_t) - 1);

    if (!a) {
        void *p = malloc(n);

        alloc_failed |= !p;
        return p;
    }
    if (!a->blocks || a->used + need > a->cap) {
        size_t cap = a->blocks ? a->cap * 2 : ARENA_FIRST;
        struct arena_block *b;

        while (cap < need)
            cap *= 2;
        if (!(b = malloc(sizeof *b + cap))) {
            alloc_failed = 1;
            return NULL;
        }
        b->next = a->blocks;
        b->cap = cap;
        a->blocks = b;
        a->cap = cap;
        a->used = 0;
    }
    a->used += need;
    return a->blocks->data + a->used - need;
}

static void arena_free(void *p)
{
    struct mic_json_arena *a = current;

    if (p && (!a || !in_arena(a, p)))
        free(p);
}

static void install(void)
{
    json_set_alloc_funcs(arena_malloc, arena_free);
    pthread_key_create(&spare_key, free);
}

int mic_json_arena_begin(struct mic_json_arena *a)
{
    pthread_once(&funcs_once, install);
    a->blocks = spare;
    a->used = 0;
    a->cap = spare ? spare->cap : 0;
    if (spare)
        spare->next = NULL;
    spare = NULL;
    pthread_setspecific(spare_key, NULL);
    current = a;
    return MIC_OK;
}

void mic_json_arena_end(struct mic_json_arena *a)
{
    current = NULL;
    while (a->blocks) {
        struct arena_block *b = a->blocks;
        a->blocks = b->next;
        if (b->cap <= ARENA_KEEP && (!spare || b->cap > spare->cap)) {
            free(spare);
            spare = b;
            pthread_setspecific(spare_key, b);
        } else {
            free(b);
        }
    }
    a->used = a->cap = 0;
}

/* Deepest nesting of arrays and objects in 'p', strings skipped. */
static int depth_of(const char *p, size_t len, int limit)
{
    int depth = 0, in_str = 0;

    for (size_t i = 0; i < len; i++) {
        char c = p[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '{' || c == '[') {
            if (++depth > limit)
                return depth;
        } else if (c == '}' || c == ']') {
            depth--;
        }
    }
    return 0;
}

int mic_json_load(const char *body, size_t len, int max_depth, json_t **out,
                  struct mic_error *err)
{
    json_error_t jerr;
    json_t *j;

    if (depth_of(body, len, max_depth) > max_depth)
        return mic_error_set(err, MIC_EPARSE, "invalid_json", NULL,
                             "JSON nested deeper than %d levels", max_depth);
    pthread_once(&funcs_once, install); /* jansson allocates through us */
    alloc_failed = 0;
    j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    /* Out of memory is the server's failure, not the text's, whatever
     * error jansson reports then; and a parse during which an allocation
     * failed is not trusted even when jansson answers with a value: its
     * lexer drops the bytes it cannot save (lex_save ignores the failure
     * of strbuffer_append_byte), so a string or number read then may be
     * cut short (tests/unit/http/test_oom.c found it). */
    if (j && alloc_failed) {
        json_decref(j);
        j = NULL;
    }
    if (!j && (alloc_failed || json_error_code(&jerr) == json_error_out_of_memory))
        return mic_error_internal(err, MIC_ENOMEM);
    if (!j)
        return mic_error_set(err, MIC_EPARSE, "invalid_json", NULL,
                             "malformed JSON at line %d column %d: %s",
                             jerr.line, jerr.column, jerr.text);
    *out = j;
    return MIC_OK;
}

int mic_json_content_type_ok(const char *ct)
{
    size_t n = strlen("application/json");

    if (!ct || strncasecmp(ct, "application/json", n) != 0)
        return 0;
    return ct[n] == 0 || ct[n] == ';' || ct[n] == ' ';
}

int mic_limit_arg(const char *arg, long dflt, long *out, struct mic_error *err)
{
    char *end;
    long v = dflt;

    if (arg) {
        v = strtol(arg, &end, 10);
        if (*end || v < 1 || v > 1000)
            return mic_error_set(err, MIC_EINVAL, "invalid_request", "limit",
                                 "limit is 1 to 1000");
    }
    *out = v;
    return MIC_OK;
}

int mic_json_keys_known(json_t *o, const char *const *known, struct mic_error *err)
{
    const char *k;
    json_t *v;

    json_object_foreach(o, k, v) {
        int ok = 0;
        for (int i = 0; known[i] && !ok; i++)
            ok = !strcmp(k, known[i]);
        if (!ok)
            return mic_error_set(err, MIC_EINVAL, "invalid_request", k, "unknown field '%.64s'", k);
    }
    return MIC_OK;
}

int mic_json_either(json_t *o, const char *k, const char *off, const char *on, int *out,
                    const char *why, struct mic_error *err)
{
    json_t *v = json_object_get(o, k);

    if (!v)
        return MIC_OK;
    if (json_is_string(v) && !strcmp(json_string_value(v), on))
        *out = 1;
    else if (json_is_string(v) && !strcmp(json_string_value(v), off))
        *out = 0;
    else
        return mic_error_set(err, MIC_EINVAL, "invalid_request", k, "%s", why);
    return MIC_OK;
}
