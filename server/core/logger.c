/* log.c - JSON-lines logging to stderr (see log.h). */
#include "logger.h"

#include "clock.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int min_level = MIC_LEVEL_INFO;
static const char *const level_names[] = {"debug", "info", "warn", "error"};

void mic_logger_set_level(int level)
{
    min_level = level;
}

int mic_logger_level_parse(const char *name)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(name, level_names[i]) == 0)
            return i;
    return -1;
}

int mic_logger_enabled(int level)
{
    return level >= min_level;
}

/* Append 's' JSON-escaped to buf[*n..cap). Truncates silently. */
static void put_escaped(char *buf, size_t cap, size_t *n, const char *s)
{
    for (; *s && *n + 7 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            buf[(*n)++] = '\\';
            buf[(*n)++] = (char)c;
        } else if (c < 0x20) {
            *n += (size_t)snprintf(buf + *n, cap - *n, "\\u%04x", c);
        } else {
            buf[(*n)++] = (char)c;
        }
    }
}

static void put_raw(char *buf, size_t cap, size_t *n, const char *s)
{
    size_t l = strlen(s);

    if (*n + l >= cap)
        l = cap - *n - 1;
    memcpy(buf + *n, s, l);
    *n += l;
}

void mic_logger_write(int level, const char *req_id, const char *msg, ...)
{
    char line[4096], ts[MIC_TIME_LEN + 1];
    size_t n = 0, cap = sizeof line - 3;
    const char *k;
    va_list ap;

    if (level < min_level)
        return;
    mic_time_format(mic_now_us(), ts);
    put_raw(line, cap, &n, "{\"ts\":\"");
    put_raw(line, cap, &n, ts);
    put_raw(line, cap, &n, "\",\"level\":\"");
    put_raw(line, cap, &n, level_names[level]);
    if (req_id) {
        put_raw(line, cap, &n, "\",\"req\":\"");
        put_escaped(line, cap, &n, req_id);
    }
    put_raw(line, cap, &n, "\",\"msg\":\"");
    put_escaped(line, cap, &n, msg);
    put_raw(line, cap, &n, "\"");
    va_start(ap, msg);
    while ((k = va_arg(ap, const char *))) {
        const char *v = va_arg(ap, const char *);
        put_raw(line, cap, &n, ",\"");
        put_escaped(line, cap, &n, k);
        put_raw(line, cap, &n, "\":\"");
        put_escaped(line, cap, &n, v ? v : "");
        put_raw(line, cap, &n, "\"");
    }
    va_end(ap);
    line[n++] = '}';
    line[n++] = '\n';
    fwrite(line, 1, n, stderr);
}
