/* digest.h - SHA-256 with the algorithm fetched once (OpenSSL 3's one-shot
 * SHA256() looks the algorithm up again on every call). */
#ifndef MIC_DIGEST_H
#define MIC_DIGEST_H

#include <stddef.h>
#include <stdint.h>

/* out receives the 32-byte SHA-256 of p[0..n). */
void mic_sha256(const void *p, size_t n, uint8_t out[32]);

#endif
