/* config.h - micd's settings: one table (config.c) gives each its flag,
 * type, default, bounds and field.  Flags override the optional config
 * file (`--config FILE`, lines of `name = value`). */
#ifndef MIC_CONFIG_H
#define MIC_CONFIG_H

#include <stdint.h>
#include <stdio.h>

enum mic_durability { MIC_DURABILITY_FSYNC, MIC_DURABILITY_NONE };

struct mic_config {
    char listen[128];       /* HOST:PORT; port 0 picks a free one */
    char data_dir[512];
    char port_file[512];    /* if set, the bound port is written there */
    char archive_dir[512];  /* if set, events past retention are archived there */
    char keys[512];         /* API keys file (DESIGN section 13); empty: no keys */
    char tls_cert[512];     /* PEM certificate chain: HTTPS only */
    char tls_key[512];      /* PEM private key of tls_cert */
    char audit_log[512];    /* append an audit line per changing or refused request */
    uint64_t map_size;      /* initial LMDB map size, bytes */
    uint64_t map_max;       /* growth limit; MDB_MAP_FULL past it -> 507 */
    int durability;         /* enum mic_durability */
    uint64_t journal_size;  /* store journal: bytes per file before switching */
    uint64_t max_body;      /* request body bytes */
    uint64_t backup_rate;   /* GET /v1/backup: bytes a second at most, 0 = no limit */
    int max_batch;          /* events per publish */
    int max_depth;          /* JSON nesting */
    int max_connections;
    int per_ip_connections;
    int idle_timeout_s;
    int backup_stall_timeout_s; /* GET /v1/backup: no bytes taken this long -> ended */
    int head_timeout_s;     /* request line to complete headers */
    int http_threads;
    int writer_queue;       /* queued operations before 429 */
    int writer_batch;       /* operations per transaction at most */
    int writer_delay_ms;    /* test hook: pause before each batch */
    int replay_select_share; /* POST /v1/replays: percent of a core a selection uses at most */
    int no_auto_topics;
    int log_level;          /* enum mic_level */
    int help;               /* --help was given (the usage is printed) */
};

/* Fill 'c' with the defaults, then the config file named by --config (if
 * any), then the flags in argv.  Returns MIC_OK (c->help set when --help
 * was given: the usage is printed on stdout), or MIC_EINVAL with a
 * one-line message in 'err' (errlen bytes, NUL-terminated) for a bad flag,
 * value, file line or a file that cannot be read (or is over 1 MiB), or
 * MIC_ENOMEM (with a message). */
int mic_config_load(struct mic_config *c, int argc, char **argv,
                    char *err, size_t errlen);

/* Apply the text of a config file ('len' bytes, any bytes but NUL) to 'c',
 * on top of what 'c' holds: lines of `name = value` separated by LF (a CR
 * before it is trimmed, like spaces and tabs around names and values);
 * blank lines and lines whose first non-blank is '#' are skipped; a line
 * may be of any length.  'name' names the file in messages.  Returns
 * MIC_OK, MIC_EINVAL with a one-line message in 'err' ("NAME:LINE: ..."
 * for a line without '=', an unknown setting or a NUL byte; "invalid value
 * for SETTING: ..." for a bad value; 'c' then holds the lines before it),
 * or MIC_ENOMEM (one copy of the text is made, and freed). */
int mic_config_parse(struct mic_config *c, const char *text, size_t len, const char *name,
                     char *err, size_t errlen);

/* Print the flags with their defaults and bounds. */
void mic_config_usage(FILE *f);

#endif
