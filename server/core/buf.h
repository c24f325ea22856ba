/* buf.h - a growable byte buffer for building response bodies.
 *
 * Appends never fail halfway: on allocation failure the buffer is marked
 * 'oom', later appends do nothing, and the caller checks 'oom' once. */
#ifndef MIC_BUF_H
#define MIC_BUF_H

#include <stddef.h>
#include <stdint.h>

struct mic_buf {
    char *p;
    size_t len, cap;
    int oom;
};

/* An empty buffer (no allocation yet); _fini frees what it holds. */
void mic_buf_init(struct mic_buf *b);
void mic_buf_fini(struct mic_buf *b);
/* Hand the bytes to the caller (free() them; NULL when empty or after an
 * allocation failure, see 'oom'); the buffer is reset. */
char *mic_buf_steal(struct mic_buf *b, size_t *len);

/* Make room for 'n' more bytes and the NUL after them: 0, or -1 when
 * memory ran out (then 'oom' is set).  Pre-sizing a buffer whose length
 * is known ahead saves the reallocations of growing it. */
int mic_buf_room(struct mic_buf *b, size_t n);

/* Append 'n' bytes (inline while they fit). */
void mic_buf_add_slow(struct mic_buf *b, const void *p, size_t n);
static inline void mic_buf_add(struct mic_buf *b, const void *p, size_t n)
{
    if (b->len + n < b->cap && n) {
        __builtin_memcpy(b->p + b->len, p, n);
        b->len += n;
        b->p[b->len] = 0;
    } else {
        mic_buf_add_slow(b, p, n);
    }
}
void mic_buf_puts(struct mic_buf *b, const char *s);
void mic_buf_printf(struct mic_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Append 's' (n bytes of UTF-8) as a JSON string, quotes included. */
void mic_buf_json_str(struct mic_buf *b, const char *s, size_t n);
/* The same with uppercase hex digits in \u00XX, as jansson's dump writes
 * them (mic_jdoc_canonical). */
void mic_buf_json_str_upper(struct mic_buf *b, const char *s, size_t n);
/* Append a decimal integer. */
void mic_buf_i64(struct mic_buf *b, int64_t v);
/* Write 'v' in decimal at 'out' (room for 20 bytes; no NUL): the length.
 * (The hot paths format numbers with this, not with printf.) */
size_t mic_fmt_u64(char *out, uint64_t v);
/* Append "YYYY-MM-DDTHH:MM:SS.ffffffZ" with quotes. */
void mic_buf_json_time(struct mic_buf *b, int64_t us);

/* Append the whole file at 'path', NUL-terminated after its last byte (not
 * counted in len).  The buffer is sized from the file's length first, so a
 * regular file is read into one allocation (no copies of a key left in
 * freed memory).  Returns MIC_OK; MIC_EIO when the file cannot be opened
 * or read (errno says why); MIC_ETOOBIG when it holds more than 'max'
 * bytes; MIC_ENOMEM.  On failure the buffer holds what it held before. */
int mic_buf_read_file(struct mic_buf *b, const char *path, size_t max);

#endif
