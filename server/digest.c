/* digest.c - SHA-256 over a pre-fetched EVP_MD (see digest.h). */
#include "digest.h"

#include <openssl/evp.h>
#include <pthread.h>
#include <stdlib.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static EVP_MD *sha256;

static void fetch(void)
{
    sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
}

void mic_sha256(const void *p, size_t n, uint8_t out[32])
{
    pthread_once(&once, fetch);
    if (!sha256 || !EVP_Digest(p, n, out, NULL, sha256, NULL))
        abort(); /* no SHA-256: nothing safe left to do */
}
