/* log.h - structured logs: one JSON object per line on stderr.
 *
 *   {"ts":"2026-...Z","level":"info","req":"r-00a1","msg":"listening","port":"8080"}
 *
 * Safe to call from any thread; a line is written with one stdio call. */
#ifndef MIC_LOGGER_H
#define MIC_LOGGER_H

enum mic_level { MIC_LEVEL_DEBUG, MIC_LEVEL_INFO, MIC_LEVEL_WARN, MIC_LEVEL_ERROR };

/* Lines below 'level' are dropped. */
void mic_logger_set_level(int level);

/* Parse "debug", "info", "warn" or "error"; returns -1 for anything else. */
int mic_logger_level_parse(const char *name);

/* Nonzero if a line at 'level' would be written. */
int mic_logger_enabled(int level);

/* Log 'msg' with an optional request id (NULL for none) and then pairs of
 * string arguments "key", "value", ..., ended by NULL.  Values are escaped. */
void mic_logger_write(int level, const char *req_id, const char *msg, ...);

#endif
