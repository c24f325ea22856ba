/* jdoc.c - the publish path's JSON documents (jdoc.h).
 *
 * The fast path is yajl's event parser feeding a builder: a stack of open
 * containers, nodes appended in document order, strings copied into the
 * pool.  When an object closes, its members are sorted by key (bytes, as
 * strcmp orders jansson's NUL-free keys) to link the key order and to find
 * a duplicate.  Whatever the fast path is not sure to decide as jansson
 * does makes it give up (GIVE_UP); the text then goes to jansson and its
 * tree is copied into the same builder. */
#define _GNU_SOURCE
#include "jdoc.h"

#include "buf.h"
#include "err.h"
#include "json.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_parse.h>

struct node {
    uint8_t type, member;     /* member: a value of an object (has a key) */
    uint32_t next, snext;     /* siblings: document order, key order */
    uint32_t first, sfirst;   /* containers: first child in each order */
    uint32_t last, count;
    uint32_t key, klen;       /* members: the key in the pool */
    union {
        struct { uint32_t off, len; } s;
        int64_t i;
        double r;
    } u;
};

struct mic_jdoc {
    struct node *nodes;       /* nodes[0] unused */
    size_t n, cap;
    char *pool;
    size_t plen, pcap;
    uint32_t *stack;          /* open containers */
    size_t depth, scap;
    uint32_t *scratch;        /* an object's members while sorting */
    size_t sscap;
    int64_t pending_key;      /* pool offset of the key just read, -1 none */
    uint32_t pending_klen;
    int give_up, oom, busy;
    int own;                  /* a second document of the thread: freed at fini */
    int max_depth;            /* deepest nesting the fast path takes */
    yajl_handle yh;           /* the fast path's parser while it parses */
    size_t end;               /* bytes up to the end of the top value */
    size_t len;               /* the text's length */
};

/* The thread's document: its buffers are kept between requests and freed
 * when the thread ends. */
static pthread_key_t doc_key;
static pthread_once_t doc_once = PTHREAD_ONCE_INIT;

static void doc_free(void *p)
{
    mic_jdoc *d = p;

    free(d->nodes);
    free(d->pool);
    free(d->stack);
    free(d->scratch);
    free(d);
}

static void doc_key_make(void)
{
    pthread_key_create(&doc_key, doc_free);
}

/* ---- Building ---- */

static int pool_add(mic_jdoc *d, const void *s, size_t len, uint32_t *off)
{
    if (d->plen + len + 1 > d->pcap) {
        size_t cap = d->pcap ? d->pcap : 64 * 1024;
        char *p;
        while (cap < d->plen + len + 1)
            cap *= 2;
        if (cap > UINT32_MAX || !(p = realloc(d->pool, cap))) {
            d->oom = 1;
            return -1;
        }
        d->pool = p;
        d->pcap = cap;
    }
    memcpy(d->pool + d->plen, s, len);
    d->pool[d->plen + len] = 0;
    *off = (uint32_t)d->plen;
    d->plen += len + 1;
    return 0;
}

/* A new node of 'type' under the open container (with the pending key if
 * that is an object).  Returns its index, or 0 on failure. */
static uint32_t add_node(mic_jdoc *d, uint8_t type)
{
    struct node *x;
    uint32_t i;

    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 1024;
        struct node *p;
        if (cap > UINT32_MAX || !(p = realloc(d->nodes, cap * sizeof *p))) {
            d->oom = 1;
            return 0;
        }
        d->nodes = p;
        d->cap = cap;
    }
    i = (uint32_t)d->n++;
    x = &d->nodes[i];
    memset(x, 0, sizeof *x);
    x->type = type;
    if (d->depth) {
        struct node *parent = &d->nodes[d->stack[d->depth - 1]];
        if (parent->type == MIC_JOBJECT) {
            if (d->pending_key < 0) {
                d->give_up = 1;
                return 0;
            }
            x->key = (uint32_t)d->pending_key;
            x->klen = d->pending_klen;
            x->member = 1;
            d->pending_key = -1;
        }
        if (parent->last)
            d->nodes[parent->last].next = i;
        else
            parent->first = i;
        parent->last = i;
        parent->count++;
    }
    return i;
}

static int push(mic_jdoc *d, uint32_t i)
{
    if (d->depth == d->scap) {
        size_t cap = d->scap ? d->scap * 2 : 64;
        uint32_t *p = realloc(d->stack, cap * sizeof *p);
        if (!p) {
            d->oom = 1;
            return -1;
        }
        d->stack = p;
        d->scap = cap;
    }
    d->stack[d->depth++] = i;
    return 0;
}

static int member_cmp(const void *a, const void *b, void *arg)
{
    const mic_jdoc *d = arg;
    const struct node *x = &d->nodes[*(const uint32_t *)a];
    const struct node *y = &d->nodes[*(const uint32_t *)b];
    int c = memcmp(d->pool + x->key, d->pool + y->key, x->klen < y->klen ? x->klen : y->klen);

    return c ? c : (x->klen > y->klen) - (x->klen < y->klen);
}

/* Close the innermost container; an object gets its key order, and a
 * duplicate key makes the fast path give up (jansson names it). */
static int close_container(mic_jdoc *d)
{
    uint32_t i = d->stack[--d->depth], n, k = 0;
    struct node *o = &d->nodes[i];

    if (o->type != MIC_JOBJECT || o->count == 0)
        return 0;
    n = o->count;
    if (n > d->sscap) {
        uint32_t *p = realloc(d->scratch, (size_t)n * sizeof *p);
        if (!p) {
            d->oom = 1;
            return -1;
        }
        d->scratch = p;
        d->sscap = n;
    }
    for (uint32_t m = o->first; m; m = d->nodes[m].next)
        d->scratch[k++] = m;
    if (n > 1)
        qsort_r(d->scratch, n, sizeof *d->scratch, member_cmp, d);
    for (k = 0; k + 1 < n; k++) {
        const struct node *a = &d->nodes[d->scratch[k]], *b = &d->nodes[d->scratch[k + 1]];
        if (a->klen == b->klen && !memcmp(d->pool + a->key, d->pool + b->key, a->klen)) {
            d->give_up = 1;
            return -1;
        }
        d->nodes[d->scratch[k]].snext = d->scratch[k + 1];
    }
    d->nodes[d->scratch[n - 1]].snext = 0;
    d->nodes[i].sfirst = d->scratch[0];
    return 0;
}

/* jansson's UTF-8 rules (utf8_check_full): no overlong forms, no
 * surrogates, nothing past U+10FFFF; and no NUL (no JSON_ALLOW_NUL). */
static int utf8_ok(const unsigned char *s, size_t len)
{
    const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;

    for (size_t i = 0; i < len;) {
        unsigned c, n, v;
        uint64_t x;

        /* Eight ASCII bytes, none of them NUL, at a time. */
        if (i + 8 <= len && (memcpy(&x, s + i, 8), !((x | ((x - ones) & ~x)) & high))) {
            i += 8;
            continue;
        }
        c = s[i];
        if (c < 0x80) {
            if (!c)
                return 0;
            i++;
            continue;
        }
        if (c < 0xC2 || c > 0xF4)
            return 0;
        n = c < 0xE0 ? 1 : c < 0xF0 ? 2 : 3;
        if (i + n >= len)
            return 0;
        v = c & (0x3F >> n);
        for (unsigned k = 1; k <= n; k++) {
            unsigned b = s[i + k];
            if ((b & 0xC0) != 0x80)
                return 0;
            v = v << 6 | (b & 0x3F);
        }
        if ((n == 2 && v < 0x800) || (n == 3 && v < 0x10000) || v > 0x10FFFF ||
            (v >= 0xD800 && v <= 0xDFFF))
            return 0;
        i += n + 1;
    }
    return 1;
}

/* ---- The fast path: yajl's callbacks ---- */

/* A scalar node; 0 when the fast path cannot go on. */
static uint32_t y_scalar(mic_jdoc *d, uint8_t type)
{
    if (!d->depth) {
        d->give_up = 1; /* a scalar at the top: jansson words the error */
        return 0;
    }
    return add_node(d, type);
}

static int y_null(void *ctx)
{
    return y_scalar(ctx, MIC_JNULL) != 0;
}

static int y_bool(void *ctx, int b)
{
    return y_scalar(ctx, b ? MIC_JTRUE : MIC_JFALSE) != 0;
}

/* A number as jansson reads it: an integer when it has no '.', 'e' or 'E'
 * (strtoll; out of range is jansson's error), else a real (strtod; an
 * overflow is jansson's error, an underflow is not). */
static int y_number(void *ctx, const char *s, size_t len)
{
    mic_jdoc *d = ctx;
    char buf[64], *end;
    uint32_t i;

    if (len >= sizeof buf) {
        d->give_up = 1;
        return 0;
    }
    memcpy(buf, s, len);
    buf[len] = 0;
    if (!(i = y_scalar(d, MIC_JINTEGER)))
        return 0;
    errno = 0;
    if (!memchr(buf, '.', len) && !memchr(buf, 'e', len) && !memchr(buf, 'E', len)) {
        d->nodes[i].u.i = strtoll(buf, &end, 10);
        if (errno == ERANGE || *end) {
            d->give_up = 1;
            return 0;
        }
    } else {
        double r = strtod(buf, &end);
        if ((errno == ERANGE && (r == HUGE_VAL || r == -HUGE_VAL)) || *end) {
            d->give_up = 1;
            return 0;
        }
        d->nodes[i].type = MIC_JREAL;
        d->nodes[i].u.r = r;
    }
    return 1;
}

static int y_string(void *ctx, const unsigned char *s, size_t len)
{
    mic_jdoc *d = ctx;
    uint32_t i, off;

    if (!utf8_ok(s, len)) {
        d->give_up = 1;
        return 0;
    }
    if (!(i = y_scalar(d, MIC_JSTRING)) || pool_add(d, s, len, &off))
        return 0;
    d->nodes[i].u.s.off = off;
    d->nodes[i].u.s.len = (uint32_t)len;
    return 1;
}

static int y_key(void *ctx, const unsigned char *s, size_t len)
{
    mic_jdoc *d = ctx;
    uint32_t off;

    if (!utf8_ok(s, len)) {
        d->give_up = 1;
        return 0;
    }
    if (pool_add(d, s, len, &off))
        return 0;
    d->pending_key = off;
    d->pending_klen = (uint32_t)len;
    return 1;
}

static int y_open(mic_jdoc *d, uint8_t type)
{
    uint32_t i;

    if (d->depth >= (size_t)d->max_depth) {
        d->give_up = 1; /* jansson's path words the depth error */
        return 0;
    }
    i = add_node(d, type);

    return i && push(d, i) == 0;
}

static int y_start_map(void *ctx)
{
    return y_open(ctx, MIC_JOBJECT);
}

static int y_start_array(void *ctx)
{
    return y_open(ctx, MIC_JARRAY);
}

/* The end of the top-level value is noted (yajl's offset during a
 * callback is just past the token being handled): fast() checks that only
 * whitespace follows, since yajl accepts a text that goes on with an
 * unterminated string ({"a":1}"x), which jansson refuses. */
static int y_end(void *ctx)
{
    mic_jdoc *d = ctx;

    if (close_container(d))
        return 0;
    if (d->depth == 0)
        d->end = d->yh ? yajl_get_bytes_consumed(d->yh) : d->len;
    return 1;
}

static const yajl_callbacks y_callbacks = {
    y_null, y_bool, NULL, NULL, y_number, y_string,
    y_start_map, y_key, y_end, y_start_array, y_end,
};

/* ---- Documents ---- */

/* Empty 'd' for a parse, keeping its buffers. */
static void doc_reset(mic_jdoc *d)
{
    d->n = 1; /* node 0 is "none" */
    memset(&d->nodes[0], 0, sizeof d->nodes[0]);
    d->plen = 0;
    d->depth = 0;
    d->pending_key = -1;
    d->give_up = d->oom = 0;
}

static mic_jdoc *doc_begin(void)
{
    mic_jdoc *d;

    pthread_once(&doc_once, doc_key_make);
    if (!(d = pthread_getspecific(doc_key))) {
        if (!(d = calloc(1, sizeof *d)))
            return NULL;
        if (pthread_setspecific(doc_key, d)) {
            free(d);
            return NULL;
        }
    }
    if (d->busy) { /* a second one at the same time: its own buffers */
        if (!(d = calloc(1, sizeof *d)))
            return NULL;
        d->own = 1;
    }
    if (!d->cap && !(d->nodes = calloc((d->cap = 1024), sizeof *d->nodes))) {
        d->cap = 0;
        if (d->own)
            doc_free(d);
        return NULL;
    }
    d->busy = 1;
    doc_reset(d);
    return d;
}

void mic_jdoc_fini(mic_jdoc *d)
{
    if (!d)
        return;
    if (d->own) {
        doc_free(d);
        return;
    }
    /* Keep what a usual request needs; give back what a huge one took. */
    if (d->cap > ((size_t)1 << 20)) {
        free(d->nodes);
        d->nodes = NULL;
        d->cap = 0;
    }
    if (d->pcap > ((size_t)32 << 20)) {
        free(d->pool);
        d->pool = NULL;
        d->pcap = 0;
    }
    d->busy = 0;
}

/* Parse with yajl into 'd'.  Returns 1 on success, 0 when jansson must
 * decide, -1 when out of memory. */
static int fast(mic_jdoc *d, const char *body, size_t len)
{
    yajl_handle h;
    int ok;

    /* An escape of a UTF-16 surrogate: yajl decodes a lone one as '?', so
     * it is jansson's to judge (a real pair is rare enough). */
    for (const char *p = body, *end = body + len;
         (p = memchr(p, '\\', (size_t)(end - p))) && end - p >= 4; p += 2)
        if (p[1] == 'u' && (p[2] == 'd' || p[2] == 'D') &&
            ((p[3] >= '8' && p[3] <= '9') || (p[3] >= 'a' && p[3] <= 'f') ||
             (p[3] >= 'A' && p[3] <= 'F')))
            return 0;
    /* yajl's lexer takes \v and \f for whitespace, JSON does not (and a
     * raw one inside a string is refused by both): jansson's to judge. */
    if (memchr(body, '\v', len) || memchr(body, '\f', len))
        return 0;
    if (!(h = yajl_alloc(&y_callbacks, NULL, d)))
        return -1;
    d->yh = h;
    d->end = 0;
    d->len = len;
    ok = yajl_parse(h, (const unsigned char *)body, len) == yajl_status_ok;
    d->yh = NULL; /* a value closed while finishing ends the text */
    ok = ok && yajl_complete_parse(h) == yajl_status_ok;
    yajl_free(h);
    if (d->oom)
        return -1;
    if (!ok || d->give_up || d->depth || d->n < 2 || d->end == 0 || d->end > len)
        return 0;
    for (size_t i = d->end; i < len; i++)
        if (body[i] != ' ' && body[i] != '\t' && body[i] != '\n' && body[i] != '\r')
            return 0; /* something after the value: jansson words the error */
    return 1;
}

/* Copy jansson's value 'v' under the open container. */
static int from_jansson(mic_jdoc *d, json_t *v)
{
    uint32_t i, off;

    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *k;
        size_t klen;
        json_t *m;
        if (!(i = add_node(d, MIC_JOBJECT)) || push(d, i))
            return -1;
        json_object_keylen_foreach(v, k, klen, m) {
            if (pool_add(d, k, klen, &off))
                return -1;
            d->pending_key = off;
            d->pending_klen = (uint32_t)klen;
            if (from_jansson(d, m))
                return -1;
        }
        return close_container(d);
    }
    case JSON_ARRAY:
        if (!(i = add_node(d, MIC_JARRAY)) || push(d, i))
            return -1;
        for (size_t k = 0; k < json_array_size(v); k++)
            if (from_jansson(d, json_array_get(v, k)))
                return -1;
        return close_container(d);
    case JSON_STRING:
        if (!(i = add_node(d, MIC_JSTRING)) ||
            pool_add(d, json_string_value(v), json_string_length(v), &off))
            return -1;
        d->nodes[i].u.s.off = off;
        d->nodes[i].u.s.len = (uint32_t)json_string_length(v);
        return 0;
    case JSON_INTEGER:
        if (!(i = add_node(d, MIC_JINTEGER)))
            return -1;
        d->nodes[i].u.i = json_integer_value(v);
        return 0;
    case JSON_REAL:
        if (!(i = add_node(d, MIC_JREAL)))
            return -1;
        d->nodes[i].u.r = json_real_value(v);
        return 0;
    case JSON_TRUE:
        return add_node(d, MIC_JTRUE) ? 0 : -1;
    case JSON_FALSE:
        return add_node(d, MIC_JFALSE) ? 0 : -1;
    case JSON_NULL:
        return add_node(d, MIC_JNULL) ? 0 : -1;
    }
    return -1;
}

static int slow(mic_jdoc *d, const char *body, size_t len, int max_depth,
                struct mic_error *err)
{
    struct mic_json_arena arena;
    json_t *root;
    int rc;

    doc_reset(d); /* whatever the fast path built before it gave up */
    mic_json_arena_begin(&arena);
    if ((rc = mic_json_load(body, len, max_depth, &root, err)) == MIC_OK &&
        from_jansson(d, root))
        rc = mic_error_internal(err, MIC_ENOMEM);
    mic_json_arena_end(&arena);
    return rc;
}

enum { BOTH, YAJL_ONLY };

static int parse(const char *body, size_t len, int max_depth, int how, mic_jdoc **out,
                 int *jansson, struct mic_error *err)
{
    mic_jdoc *d = doc_begin();
    int rc = MIC_OK, f = 0;

    if (!d)
        return mic_error_internal(err, MIC_ENOMEM);
    if (jansson)
        *jansson = 0;
    /* Past the depth limit the fast path gives up, and mic_json_load
     * checks it first (its words). */
    d->max_depth = max_depth;
    if ((f = fast(d, body, len)) < 0) {
        rc = mic_error_internal(err, MIC_ENOMEM);
        goto fail;
    }
    if (f == 0) {
        if (how == YAJL_ONLY) {
            rc = mic_error_set(err, MIC_EPARSE, "invalid_json", NULL, "left to jansson");
            goto fail;
        }
        if (jansson)
            *jansson = 1;
        if ((rc = slow(d, body, len, max_depth, err)))
            goto fail;
    }
    *out = d;
    return MIC_OK;
fail:
    mic_jdoc_fini(d);
    return rc;
}

int mic_jdoc_parse(const char *body, size_t len, int max_depth, mic_jdoc **out,
                   int *jansson, struct mic_error *err)
{
    return parse(body, len, max_depth, BOTH, out, jansson, err);
}

int mic_jdoc_parse_yajl(const char *body, size_t len, int max_depth, mic_jdoc **out,
                        struct mic_error *err)
{
    return parse(body, len, max_depth, YAJL_ONLY, out, NULL, err);
}

/* ---- Reading ---- */

mic_jv mic_jdoc_root(const mic_jdoc *d)
{
    return d->n > 1 ? 1 : 0;
}

enum mic_jtype mic_jdoc_type(const mic_jdoc *d, mic_jv v)
{
    return (enum mic_jtype)d->nodes[v].type;
}

size_t mic_jdoc_size(const mic_jdoc *d, mic_jv v)
{
    return d->nodes[v].count;
}

mic_jv mic_jdoc_get(const mic_jdoc *d, mic_jv obj, const char *key)
{
    size_t len = strlen(key);

    if (!obj || d->nodes[obj].type != MIC_JOBJECT)
        return 0;
    for (uint32_t m = d->nodes[obj].first; m; m = d->nodes[m].next)
        if (d->nodes[m].klen == len && !memcmp(d->pool + d->nodes[m].key, key, len))
            return m;
    return 0;
}

mic_jv mic_jdoc_at(const mic_jdoc *d, mic_jv arr, size_t i)
{
    uint32_t m = arr ? d->nodes[arr].first : 0;

    while (m && i--)
        m = d->nodes[m].next;
    return m;
}

mic_jv mic_jdoc_first(const mic_jdoc *d, mic_jv v)
{
    return d->nodes[v].first;
}

mic_jv mic_jdoc_next(const mic_jdoc *d, mic_jv v)
{
    return d->nodes[v].next;
}

mic_jv mic_jdoc_sfirst(const mic_jdoc *d, mic_jv obj)
{
    return d->nodes[obj].sfirst;
}

mic_jv mic_jdoc_snext(const mic_jdoc *d, mic_jv member)
{
    return d->nodes[member].snext;
}

const char *mic_jdoc_key(const mic_jdoc *d, mic_jv v, size_t *len)
{
    if (!d->nodes[v].member)
        return NULL;
    if (len)
        *len = d->nodes[v].klen;
    return d->pool + d->nodes[v].key;
}

const char *mic_jdoc_str(const mic_jdoc *d, mic_jv v, size_t *len)
{
    if (d->nodes[v].type != MIC_JSTRING)
        return NULL;
    if (len)
        *len = d->nodes[v].u.s.len;
    return d->pool + d->nodes[v].u.s.off;
}

int64_t mic_jdoc_int(const mic_jdoc *d, mic_jv v)
{
    return d->nodes[v].type == MIC_JINTEGER ? d->nodes[v].u.i : 0;
}

/* ---- The canonical text ---- */

/* A real as jansson writes it (jsonp_dtostr, precision 17): "%.17g", a
 * ".0" when that looks like an integer, the exponent without '+' and
 * without leading zeros. */
static void put_real(struct mic_buf *out, double d)
{
    char b[64], e[64], *x;
    size_t n;

    snprintf(b, sizeof b, "%.17g", d);
    if (!strpbrk(b, ".eE")) {
        mic_buf_puts(out, b);
        mic_buf_puts(out, ".0");
        return;
    }
    if (!(x = strpbrk(b, "eE"))) {
        mic_buf_puts(out, b);
        return;
    }
    n = (size_t)(x - b) + 1;
    memcpy(e, b, n);
    x++;
    if (*x == '+')
        x++;
    else if (*x == '-')
        e[n++] = *x++;
    while (*x == '0' && x[1])
        x++;
    strcpy(e + n, x);
    mic_buf_puts(out, e);
}


static void canon(const mic_jdoc *d, mic_jv v, struct mic_buf *out)
{
    const struct node *x = &d->nodes[v];

    switch (x->type) {
    case MIC_JOBJECT:
        mic_buf_add(out, "{", 1);
        for (uint32_t m = x->sfirst; m; m = d->nodes[m].snext) {
            if (m != x->sfirst)
                mic_buf_add(out, ",", 1);
            mic_buf_json_str_upper(out, d->pool + d->nodes[m].key, d->nodes[m].klen);
            mic_buf_add(out, ":", 1);
            canon(d, m, out);
        }
        mic_buf_add(out, "}", 1);
        break;
    case MIC_JARRAY:
        mic_buf_add(out, "[", 1);
        for (uint32_t m = x->first; m; m = d->nodes[m].next) {
            if (m != x->first)
                mic_buf_add(out, ",", 1);
            canon(d, m, out);
        }
        mic_buf_add(out, "]", 1);
        break;
    case MIC_JSTRING:
        mic_buf_json_str_upper(out, d->pool + x->u.s.off, x->u.s.len);
        break;
    case MIC_JINTEGER:
        mic_buf_i64(out, x->u.i);
        break;
    case MIC_JREAL:
        put_real(out, x->u.r);
        break;
    case MIC_JTRUE:
        mic_buf_add(out, "true", 4);
        break;
    case MIC_JFALSE:
        mic_buf_add(out, "false", 5);
        break;
    case MIC_JNULL:
        mic_buf_add(out, "null", 4);
        break;
    }
}

int mic_jdoc_canonical(const mic_jdoc *d, mic_jv v, struct mic_buf *out)
{
    canon(d, v, out);
    return out->oom ? MIC_ENOMEM : MIC_OK;
}
