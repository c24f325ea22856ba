/* err.h - MIC's error codes.
 *
 * Every function that can fail returns one of these (MIC_OK is 0) and passes
 * results back through out-parameters.  A failure that a client caused also
 * fills a struct mic_error with the wire code ("invalid_event"), a message
 * and the offending field; routes.c turns the enum into an HTTP status, in
 * one place (its status_of). */
#ifndef MIC_ERR_H
#define MIC_ERR_H

enum mic_err {
    MIC_OK = 0,
    MIC_ENOMEM = -1,     /* 500 */
    MIC_EINVAL = -2,     /* 422: a field breaks a rule */
    MIC_ENOTFOUND = -3,  /* 404 */
    MIC_ECONFLICT = -4,  /* 409 */
    MIC_ENOSPC = -5,     /* 507: the map reached its growth limit */
    MIC_EIO = -6,        /* 500 */
    MIC_EPARSE = -7,     /* 400: malformed JSON */
    MIC_ETOOBIG = -8,    /* 413 */
    MIC_EMEDIA = -9,     /* 415 */
    MIC_EBUSY = -10,     /* 429: writer queue full */
    MIC_ENOTREADY = -11, /* 503 */
    MIC_EMETHOD = -12,   /* 405 */
    MIC_EVERSION = -13,  /* store of an unknown format version */
    MIC_EAUTH = -14,     /* 401: no API key, or not a known one */
    MIC_EFORBIDDEN = -15, /* 403: the key's role or scopes do not allow it */
    MIC_ECORRUPT = -16,  /* 500 "store_corrupt": a stored log record fails its
                          * checksum or does not decode (never served) */
    MIC_ELMDB = -17,     /* the LMDB linked is not a version the store
                          * journal was written for (journal.h; micd exits 2) */
};

/* A client-facing error: 'code' is a static wire string, 'message' and
 * 'field' are copied in.  'err' is the enum value that picks the status. */
struct mic_error {
    int err;
    const char *code;
    char message[256];
    char field[128];
};

/* Fill 'e' (may be NULL) and return 'err', so callers can write
 * `return mic_error_set(e, MIC_EINVAL, "invalid_event", "topic", "...")`.
 * 'field' may be NULL. */
int mic_error_set(struct mic_error *e, int err, const char *code,
                  const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* The one answer to a failure the client did not cause (the store, memory):
 * fills 'e' (may be NULL) with code "internal" and mic_strerror(err) as the
 * message, and returns 'err'.  For MIC_ECORRUPT the code is
 * "store_corrupt" and the message names the record's seq (see
 * mic_err_corrupt_note). */
int mic_error_internal(struct mic_error *e, int err);

/* The store found the log record at 'seq' corrupt (store.c calls it where
 * it detects one).  The next mic_error_internal(e, MIC_ECORRUPT) names that
 * seq: the one noted in the calling thread if any (a read in a handler),
 * else the last one noted by any thread (a write, detected in the writer
 * thread: the seq of the last corrupt record found, which is that write's
 * unless two corrupt records are hit at once). */
void mic_err_corrupt_note(unsigned long long seq);

/* A short English description of an enum mic_err value; a static string. */
const char *mic_strerror(int err);

#endif
