/* fuzz_config.c - the config file (`micd --config FILE`): mic_config_parse
 * (config.h) on the file's text, over micd's defaults, as mic_config_load
 * does after reading the file.  On success every string setting is
 * NUL-terminated inside its field and every number is within the bounds
 * of the settings table; on failure the answer is MIC_EINVAL with a
 * message. */
#include "fuzz.h"

#include "core/err.h"

#include <string.h>

static struct mic_config defaults;

FUZZ_INIT(&defaults)

#define TERMINATED(f) (memchr(c.f, 0, sizeof c.f) != NULL)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mic_config c = defaults;
    char err[256] = "";
    int rc = mic_config_parse(&c, (const char *)data, size, "fuzz.conf", err, sizeof err);

    FUZZ_CHECK(rc == MIC_OK || rc == MIC_EINVAL);
    FUZZ_CHECK(rc == MIC_OK || (err[0] && memchr(err, 0, sizeof err)));
    /* what a partly applied file left is in bounds too */
    FUZZ_CHECK(TERMINATED(listen) && TERMINATED(data_dir) && TERMINATED(port_file) &&
               TERMINATED(archive_dir) && TERMINATED(keys) && TERMINATED(tls_cert) &&
               TERMINATED(tls_key) && TERMINATED(audit_log));
    FUZZ_CHECK(c.map_size >= 1024 * 1024 && c.map_max >= 1024 * 1024);
    FUZZ_CHECK(c.journal_size >= 64 * 1024 && c.max_body >= 1024);
    FUZZ_CHECK(c.max_batch >= 1 && c.max_batch <= 100000);
    FUZZ_CHECK(c.max_depth >= 2 && c.max_depth <= 2000);
    FUZZ_CHECK(c.http_threads >= 1 && c.http_threads <= 64);
    FUZZ_CHECK(c.durability == MIC_DURABILITY_FSYNC || c.durability == MIC_DURABILITY_NONE);
    FUZZ_CHECK(c.no_auto_topics == 0 || c.no_auto_topics == 1);
    FUZZ_CHECK(c.log_level >= 0);
    return 0;
}
