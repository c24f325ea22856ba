/* err.c - descriptions of enum mic_err and the client error filler. */
#include "err.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

int mic_error_set(struct mic_error *e, int err, const char *code,
                  const char *field, const char *fmt, ...)
{
    va_list ap;

    if (!e)
        return err;
    e->err = err;
    e->code = code;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    snprintf(e->field, sizeof e->field, "%s", field ? field : "");
    return err;
}

/* The seq of the last corrupt record noted, in this thread and in any
 * thread (0: none). */
static _Thread_local unsigned long long corrupt_here;
static _Atomic unsigned long long corrupt_last;

void mic_err_corrupt_note(unsigned long long seq)
{
    corrupt_here = seq;
    atomic_store(&corrupt_last, seq);
}

int mic_error_internal(struct mic_error *e, int err)
{
    if (err == MIC_ECORRUPT) {
        unsigned long long seq = corrupt_here ? corrupt_here : atomic_load(&corrupt_last);
        corrupt_here = 0;
        if (seq)
            return mic_error_set(e, err, "store_corrupt", NULL,
                                 "the stored record of seq %llu fails its checksum: it is not "
                                 "served (run micd --verify; restore the store or skip the "
                                 "delivery)", seq);
        return mic_error_set(e, err, "store_corrupt", NULL,
                             "a stored record fails its checksum: it is not served");
    }
    return mic_error_set(e, err, "internal", NULL, "%s", mic_strerror(err));
}

const char *mic_strerror(int err)
{
    switch (err) {
    case MIC_OK: return "success";
    case MIC_ENOMEM: return "out of memory";
    case MIC_EINVAL: return "invalid argument";
    case MIC_ENOTFOUND: return "not found";
    case MIC_ECONFLICT: return "conflict";
    case MIC_ENOSPC: return "storage full";
    case MIC_EIO: return "input/output error";
    case MIC_EPARSE: return "malformed input";
    case MIC_ETOOBIG: return "too large";
    case MIC_EMEDIA: return "unsupported media type";
    case MIC_EBUSY: return "overloaded";
    case MIC_ENOTREADY: return "not ready";
    case MIC_EMETHOD: return "method not allowed";
    case MIC_EVERSION: return "unknown store format version";
    case MIC_EAUTH: return "unauthorized";
    case MIC_EFORBIDDEN: return "forbidden";
    case MIC_ECORRUPT: return "stored record corrupt (checksum mismatch)";
    case MIC_ELMDB: return "LMDB version not supported by the journal";
    }
    return "unknown error";
}
