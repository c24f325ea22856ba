/* json.c - request parsing under limits (see json.h). */
#include "json.h"

#include "err.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

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
    j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
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
