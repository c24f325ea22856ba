/* buf.c - growable buffers (see buf.h). */
#define _POSIX_C_SOURCE 200809L
#include "buf.h"

#include "clock.h"
#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void mic_buf_init(struct mic_buf *b)
{
    memset(b, 0, sizeof *b);
}

void mic_buf_fini(struct mic_buf *b)
{
    free(b->p);
    mic_buf_init(b);
}

char *mic_buf_steal(struct mic_buf *b, size_t *len)
{
    char *p = b->p;

    *len = b->len;
    mic_buf_init(b);
    return p;
}

int mic_buf_room(struct mic_buf *b, size_t n)
{
    size_t cap;
    char *p;

    if (b->oom)
        return -1;
    if (b->len + n + 1 <= b->cap)
        return 0;
    cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1)
        cap *= 2;
    if (!(p = realloc(b->p, cap))) {
        b->oom = 1;
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

void mic_buf_add_slow(struct mic_buf *b, const void *p, size_t n)
{
    if (mic_buf_room(b, n))
        return;
    memcpy(b->p + b->len, p, n);
    b->len += n;
    b->p[b->len] = 0;
}

void mic_buf_puts(struct mic_buf *b, const char *s)
{
    mic_buf_add(b, s, strlen(s));
}

void mic_buf_printf(struct mic_buf *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || mic_buf_room(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* The length of the run at 's' (at most n) that needs no escape: bytes
 * from 0x20 up but '"' and '\\' (UTF-8 passes as it is), eight at a
 * time (a flagged word is then looked at byte by byte). */
static size_t plain_run(const unsigned char *s, size_t n)
{
    const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        uint64_t x, q, bs;
        memcpy(&x, s + i, 8);
        q = x ^ (ones * '"');
        bs = x ^ (ones * '\\');
        /* A byte below 0x20, or equal to '"' or '\\' (zero after the xor);
         * a word flagged without one is only looked at again. */
        if ((((x - ones * 0x20) & ~x) | ((q - ones) & ~q) | ((bs - ones) & ~bs)) & high)
            break;
    }
    for (; i < n; i++) {
        unsigned char c = s[i];
        if (c < 0x20 || c == '"' || c == '\\')
            break;
    }
    return i;
}

/* A JSON string with the short escapes and \u00XX, XX in 'hex' digits. */
static void json_str(struct mic_buf *b, const char *s, size_t n, const char *hex)
{
    size_t i = 0;

    if (mic_buf_room(b, n + 2))
        return;
    b->p[b->len++] = '"';
    for (;;) {
        size_t run = plain_run((const unsigned char *)s + i, n - i);
        unsigned char c;

        mic_buf_add(b, s + i, run);
        i += run;
        if (i == n)
            break;
        c = (unsigned char)s[i++];
        if (c == '"' || c == '\\' || c == '\n' || c == '\t' || c == '\r' ||
            c == '\b' || c == '\f') {
            /* The short escapes, as jansson writes them. */
            char e[2] = {'\\', c == '\n' ? 'n' : c == '\t' ? 't' : c == '\r' ? 'r'
                                 : c == '\b' ? 'b' : c == '\f' ? 'f' : (char)c};
            mic_buf_add(b, e, 2);
        } else {
            char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            mic_buf_add(b, e, 6);
        }
    }
    mic_buf_add(b, "\"", 1);
}

void mic_buf_json_str(struct mic_buf *b, const char *s, size_t n)
{
    json_str(b, s, n, "0123456789abcdef");
}

void mic_buf_json_str_upper(struct mic_buf *b, const char *s, size_t n)
{
    json_str(b, s, n, "0123456789ABCDEF");
}

size_t mic_fmt_u64(char *out, uint64_t v)
{
    char t[20], *p = t + sizeof t;
    size_t n;

    do {
        *--p = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    n = (size_t)(t + sizeof t - p);
    memcpy(out, p, n);
    return n;
}

void mic_buf_i64(struct mic_buf *b, int64_t v)
{
    char t[24];
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    size_t n = 0;

    if (v < 0)
        t[n++] = '-';
    n += mic_fmt_u64(t + n, u);
    mic_buf_add(b, t, n);
}

void mic_buf_json_time(struct mic_buf *b, int64_t us)
{
    char t[MIC_TIME_LEN + 3];

    t[0] = '"';
    mic_time_format(us, t + 1);
    t[MIC_TIME_LEN + 1] = '"';
    mic_buf_add(b, t, MIC_TIME_LEN + 2);
}

int mic_buf_read_file(struct mic_buf *b, const char *path, size_t max)
{
    FILE *f = fopen(path, "rb");
    size_t start = b->len;
    struct stat st;
    int rc = MIC_OK;

    if (!f)
        return MIC_EIO;
    if (fstat(fileno(f), &st) == 0 && st.st_size > 0 && (uint64_t)st.st_size <= max &&
        mic_buf_room(b, (size_t)st.st_size))
        rc = MIC_ENOMEM;
    while (rc == MIC_OK) {
        size_t room = b->cap > b->len + 1 ? b->cap - b->len - 1 : 0, got;

        if (room == 0) {
            int c = fgetc(f); /* at the end, or grow? */

            if (c == EOF)
                break;
            ungetc(c, f);
            if (mic_buf_room(b, 4096)) {
                rc = MIC_ENOMEM;
                break;
            }
            continue;
        }
        got = fread(b->p + b->len, 1, room, f);
        b->len += got;
        if (b->len - start > max)
            rc = MIC_ETOOBIG;
        else if (got == 0)
            break;
    }
    if (rc == MIC_OK && ferror(f))
        rc = MIC_EIO;
    fclose(f);
    if (rc) {
        b->len = start;
        b->oom = 0;
    }
    if (b->p)
        b->p[b->len] = 0;
    return rc;
}
