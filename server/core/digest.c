/* digest.c - SHA-256 over a pre-fetched EVP_MD (see digest.h). */
#include "digest.h"

#include <openssl/evp.h>
#include <pthread.h>
#include <stdlib.h>

static EVP_MD *sha256;

static void fetch(void)
{
    sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
}

/* One context per thread, reused: EVP_Digest would allocate and free one
 * on every call.  (It is freed with the thread by its destructor.) */
static pthread_key_t ctx_key;

static void free_ctx(void *ctx)
{
    EVP_MD_CTX_free(ctx);
}

static void fetch(void);

static void init(void)
{
    fetch();
    pthread_key_create(&ctx_key, free_ctx);
}

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

void mic_sha256(const void *p, size_t n, uint8_t out[32])
{
    EVP_MD_CTX *ctx;

    pthread_once(&init_once, init);
    if (!(ctx = pthread_getspecific(ctx_key)) &&
        (!(ctx = EVP_MD_CTX_new()) || pthread_setspecific(ctx_key, ctx)))
        abort(); /* no memory for a context: nothing safe left to do */
    if (!sha256 || !EVP_DigestInit_ex2(ctx, sha256, NULL) || !EVP_DigestUpdate(ctx, p, n) ||
        !EVP_DigestFinal_ex(ctx, out, NULL))
        abort(); /* no SHA-256: nothing safe left to do */
}
