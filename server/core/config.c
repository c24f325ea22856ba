/* config.c - the settings table (like redis's static_configs[]).
 *
 * Each row names a setting once: its flag, type, default, bounds, help and
 * the field of struct mic_config it fills.  Defaults are applied by parsing
 * the default text through the same path as user input, so `--help` prints
 * exactly what is used.
 *
 * The config file is read whole (at most CONFIG_FILE_MAX bytes) and parsed
 * from memory by mic_config_parse, which tests/fuzz/fuzz_config.c and
 * tests/unit/http/test_oom.c call directly: a line may be of any length (a long
 * comment is one comment, never split into a second line that would be
 * read as a setting), and a NUL byte is refused. */
#define _POSIX_C_SOURCE 200809L
#include "config.h"
#include "buf.h"
#include "err.h"

#include "logger.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

enum ctype { C_STR, C_INT, C_SIZE, C_FLAG, C_DURABILITY, C_LOGLEVEL };

struct setting {
    const char *name;
    enum ctype type;
    const char *def;
    uint64_t min, max;
    size_t off, len;
    const char *help;
};

#define F(field) offsetof(struct mic_config, field), sizeof(((struct mic_config *)0)->field)
#define KiB 1024ull
#define MiB (1024ull * KiB)
#define GiB (1024ull * MiB)
#define TiB (1024ull * GiB)
#define CONFIG_FILE_MAX (1024 * 1024)

static const struct setting settings[] = {
    {"listen", C_STR, "127.0.0.1:8080", 0, 0, F(listen),
     "address to listen on, HOST:PORT (port 0: any free port)"},
    {"data", C_STR, "./var", 0, 0, F(data_dir),
     "store directory (created if missing)"},
    {"port-file", C_STR, "", 0, 0, F(port_file),
     "write the bound port to this file once listening"},
    {"archive-dir", C_STR, "", 0, 0, F(archive_dir),
     "append events removed by retention to NDJSON files here (none: not kept)"},
    {"keys", C_STR, "", 0, 0, F(keys),
     "API keys file, lines of ID ROLE SHA256 SCOPES (none: loopback only, no checks)"},
    {"tls-cert", C_STR, "", 0, 0, F(tls_cert),
     "PEM certificate (chain) to serve HTTPS only, TLS 1.2 or later (with --tls-key)"},
    {"tls-key", C_STR, "", 0, 0, F(tls_key),
     "PEM private key of --tls-cert"},
    {"audit-log", C_STR, "", 0, 0, F(audit_log),
     "append one JSON line per request that changes state or is refused 401/403"},
    {"map-size", C_SIZE, "1G", 1 * MiB, 1024 * TiB, F(map_size),
     "initial LMDB map size (K, M, G, T suffixes)"},
    {"map-max", C_SIZE, "64G", 1 * MiB, 1024 * TiB, F(map_max),
     "largest the map may grow to; past it writes answer 507"},
    {"journal-size", C_SIZE, "64M", 64 * KiB, 64 * GiB, F(journal_size),
     "size at which the store journal switches files (two files; fsync mode only)"},
    {"durability", C_DURABILITY, "fsync", 0, 0, F(durability),
     "fsync: a 2xx is on disk; none: no fsync, a crash may lose the last commits"},
    {"max-body", C_SIZE, "16M", 1 * KiB, 1 * GiB, F(max_body),
     "largest request body"},
    {"max-batch", C_INT, "1000", 1, 100000, F(max_batch),
     "most events in one publish"},
    {"max-depth", C_INT, "32", 2, 2000, F(max_depth),
     "deepest JSON nesting accepted"},
    {"max-connections", C_INT, "1024", 1, 1000000, F(max_connections),
     "most open HTTP connections"},
    {"per-ip-connections", C_INT, "256", 1, 1000000, F(per_ip_connections),
     "most open HTTP connections from one address"},
    {"idle-timeout", C_INT, "75", 1, 86400, F(idle_timeout_s),
     "seconds a connection may wait for its next request, bytes or not (long-polls excepted)"},
    {"head-timeout", C_INT, "10", 1, 3600, F(head_timeout_s),
     "seconds from a request line to its last header before the connection is closed (and "
     "for its body, plus 1 s per 64 KiB)"},
    {"http-threads", C_INT, "2", 1, 64, F(http_threads),
     "HTTP threads: each runs a libmicrohttpd daemon on the shared socket"},
    {"writer-queue", C_INT, "65536", 1, 10000000, F(writer_queue),
     "queued write operations before requests answer 429"},
    {"writer-batch", C_INT, "4096", 1, 1000000, F(writer_batch),
     "most operations committed in one transaction"},
    {"writer-delay-ms", C_INT, "0", 0, 10000, F(writer_delay_ms),
     "testing only: pause this long before each batch (makes 429 reproducible)"},
    {"replay-select-share", C_INT, "25", 1, 100, F(replay_select_share),
     "POST /v1/replays: percent of one core a selection uses at most (it pauses after each "
     "chunk of the time index in proportion to the chunk's CPU time); 100: no pauses"},
    {"backup-rate", C_SIZE, "0", 0, 64 * GiB, F(backup_rate),
     "GET /v1/backup: bytes a second at most (K, M, G suffixes), 0 for no limit"},
    {"backup-stall-timeout", C_INT, "60", 1, 86400, F(backup_stall_timeout_s),
     "GET /v1/backup: seconds a client may take no bytes while the copy waits for it; then "
     "the backup ends, its body cut short"},
    {"no-auto-topics", C_FLAG, "0", 0, 1, F(no_auto_topics),
     "refuse events for topics not created with PUT /v1/topics/{topic}"},
    {"log-level", C_LOGLEVEL, "info", 0, 0, F(log_level),
     "debug (one line per request), info, warn or error"},
};

#define NSETTINGS (sizeof settings / sizeof settings[0])

static const struct setting *find(const char *name, size_t len)
{
    for (size_t i = 0; i < NSETTINGS; i++)
        if (strlen(settings[i].name) == len &&
            strncmp(settings[i].name, name, len) == 0)
            return &settings[i];
    return NULL;
}

static int parse_u64(const char *v, int suffixes, uint64_t *out)
{
    char *end;
    unsigned long long n;

    if (*v < '0' || *v > '9')
        return -1;
    errno = 0;
    n = strtoull(v, &end, 10);
    if (errno)
        return -1;
    if (suffixes && *end) {
        uint64_t mul = 1;
        switch (*end) {
        case 'k': case 'K': mul = KiB; break;
        case 'm': case 'M': mul = MiB; break;
        case 'g': case 'G': mul = GiB; break;
        case 't': case 'T': mul = TiB; break;
        default: return -1;
        }
        if (n > UINT64_MAX / mul)
            return -1;
        n *= mul;
        end++;
    }
    if (*end)
        return -1;
    *out = n;
    return 0;
}

static int apply(struct mic_config *c, const struct setting *s,
                 const char *v, char *err, size_t errlen)
{
    char *field = (char *)c + s->off;
    uint64_t n;

    switch (s->type) {
    case C_STR:
        if (strlen(v) >= s->len)
            goto bad;
        memcpy(field, v, strlen(v) + 1);
        return 0;
    case C_INT:
    case C_SIZE:
        if (parse_u64(v, s->type == C_SIZE, &n) || n < s->min || n > s->max)
            goto bad;
        if (s->type == C_INT)
            *(int *)field = (int)n;
        else
            *(uint64_t *)field = n;
        return 0;
    case C_FLAG:
        if (strcmp(v, "0") && strcmp(v, "1") && strcmp(v, "true") &&
            strcmp(v, "false"))
            goto bad;
        *(int *)field = v[0] == '1' || v[0] == 't';
        return 0;
    case C_DURABILITY:
        if (strcmp(v, "fsync") == 0)
            *(int *)field = MIC_DURABILITY_FSYNC;
        else if (strcmp(v, "none") == 0)
            *(int *)field = MIC_DURABILITY_NONE;
        else
            goto bad;
        return 0;
    case C_LOGLEVEL: {
        int level = mic_logger_level_parse(v);

        if (level < 0)
            goto bad; /* the field keeps its value */
        *(int *)field = level;
        return 0;
    }
    }
bad:
    snprintf(err, errlen, "invalid value for %s: '%s'", s->name, v);
    return -1;
}

static char *trim(char *s)
{
    char *e;

    while (*s == ' ' || *s == '\t')
        s++;
    e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' ||
                     e[-1] == '\r'))
        *--e = 0;
    return s;
}

/* One line of a config file (NUL-terminated, trimmed in place). */
static int parse_line(struct mic_config *c, char *line, const char *name, int lineno,
                      char *err, size_t errlen)
{
    char *p = trim(line), *eq, *k, *v;
    const struct setting *s;

    if (*p == 0 || *p == '#')
        return 0;
    if (!(eq = strchr(p, '='))) {
        snprintf(err, errlen, "%s:%d: expected name = value", name, lineno);
        return -1;
    }
    *eq = 0;
    k = trim(p);
    v = trim(eq + 1);
    if (!(s = find(k, strlen(k)))) {
        snprintf(err, errlen, "%s:%d: unknown setting '%.64s'", name, lineno, k);
        return -1;
    }
    return apply(c, s, v, err, errlen);
}

int mic_config_parse(struct mic_config *c, const char *text, size_t len, const char *name,
                     char *err, size_t errlen)
{
    char *copy, *p, *end;
    int lineno = 0, rc = MIC_OK;

    const char *nul = len ? memchr(text, 0, len) : NULL;

    if (nul) {
        for (const char *q = text; q < nul; q++)
            lineno += *q == '\n';
        snprintf(err, errlen, "%s:%d: a NUL byte", name, lineno + 1);
        return MIC_EINVAL;
    }
    if (!(copy = malloc(len + 1))) {
        snprintf(err, errlen, "no memory to read %s", name);
        return MIC_ENOMEM;
    }
    memcpy(copy, text, len);
    copy[len] = 0;
    for (p = copy, end = copy + len; p < end && rc == MIC_OK; p++) {
        char *nl = memchr(p, '\n', (size_t)(end - p));

        if (nl)
            *nl = 0;
        else
            nl = end;
        if (parse_line(c, p, name, ++lineno, err, errlen))
            rc = MIC_EINVAL;
        p = nl;
    }
    free(copy);
    return rc;
}

static int load_file(struct mic_config *c, const char *path, char *err,
                     size_t errlen)
{
    struct mic_buf b;
    int rc;

    mic_buf_init(&b);
    switch ((rc = mic_buf_read_file(&b, path, CONFIG_FILE_MAX))) {
    case MIC_OK:
        rc = mic_config_parse(c, b.p ? b.p : "", b.len, path, err, errlen);
        break;
    case MIC_ETOOBIG:
        snprintf(err, errlen, "config file %s is larger than 1 MiB", path);
        rc = MIC_EINVAL;
        break;
    case MIC_EIO:
        snprintf(err, errlen, "cannot open config file %s: %s", path, strerror(errno));
        break;
    default:
        snprintf(err, errlen, "no memory to read config file %s", path);
    }
    mic_buf_fini(&b);
    return rc;
}

int mic_config_load(struct mic_config *c, int argc, char **argv, char *err,
                    size_t errlen)
{
    int rc;

    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < NSETTINGS; i++)
        if (apply(c, &settings[i], settings[i].def, err, errlen))
            return MIC_EINVAL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 || strncmp(argv[i], "--config=", 9) == 0) {
            const char *path = argv[i][8] == '=' ? argv[i] + 9
                               : i + 1 < argc   ? argv[i + 1] : NULL;
            if (!path) {
                snprintf(err, errlen, "--config needs a file");
                return MIC_EINVAL;
            }
            if ((rc = load_file(c, path, err, errlen)))
                return rc == MIC_ENOMEM ? MIC_ENOMEM : MIC_EINVAL;
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *eq, *v;
        const struct setting *s;
        size_t nlen;

        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            mic_config_usage(stdout);
            c->help = 1;
            return MIC_OK;
        }
        if (strncmp(a, "--", 2) != 0) {
            snprintf(err, errlen, "unexpected argument '%s'", a);
            return MIC_EINVAL;
        }
        a += 2;
        eq = strchr(a, '=');
        nlen = eq ? (size_t)(eq - a) : strlen(a);
        if (nlen == 6 && strncmp(a, "config", 6) == 0) {
            if (!eq)
                i++;
            continue;
        }
        if (!(s = find(a, nlen))) {
            snprintf(err, errlen, "unknown flag '--%.*s' (see --help)", (int)nlen, a);
            return MIC_EINVAL;
        }
        if (eq)
            v = eq + 1;
        else if (s->type == C_FLAG)
            v = "1";
        else if (i + 1 < argc)
            v = argv[++i];
        else {
            snprintf(err, errlen, "--%s needs a value", s->name);
            return MIC_EINVAL;
        }
        if (apply(c, s, v, err, errlen))
            return MIC_EINVAL;
    }
    if (c->map_max < c->map_size)
        c->map_max = c->map_size;
    return 0;
}

void mic_config_usage(FILE *f)
{
    fprintf(f, "usage: micd [--config FILE] [--NAME VALUE]...\n\n"
               "MIC outbox broker. Settings (flags override the config file,\n"
               "whose lines read `NAME = VALUE`):\n\n");
    for (size_t i = 0; i < NSETTINGS; i++) {
        const struct setting *s = &settings[i];
        fprintf(f, "  --%-20s %s\n  %22s default: %s", s->name, s->help, "",
                s->type == C_FLAG ? "off" : *s->def ? s->def : "(none)");
        if (s->type == C_INT)
            fprintf(f, ", range %llu..%llu", (unsigned long long)s->min,
                    (unsigned long long)s->max);
        fputc('\n', f);
    }
}
