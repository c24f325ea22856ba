/* crc32c.c - CRC-32C (crc32c.h).
 *
 * The table path is slice-by-8: eight 256-entry tables, table[0] the
 * byte-at-a-time table of the reflected polynomial, table[k][b] the CRC of
 * byte b followed by k zero bytes, so eight input bytes cost eight lookups
 * and no loop-carried dependency between them.  The tables are computed
 * once at the first call (pthread_once).  On x86-64 with SSE4.2 the crc32
 * instruction does the same work eight bytes a cycle or so; the CPU is
 * asked once, and the function chosen is kept. */
#include "crc32c.h"

#include <pthread.h>
#include <string.h>

#define POLY 0x82F63B78u

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_init(void)
{
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int i = 0; i < 8; i++)
            c = c & 1 ? c >> 1 ^ POLY : c >> 1;
        table[0][b] = c;
    }
    for (uint32_t b = 0; b < 256; b++)
        for (int k = 1; k < 8; k++)
            table[k][b] = table[k - 1][b] >> 8 ^ table[0][table[k - 1][b] & 0xff];
}

static uint32_t sw(uint32_t crc, const uint8_t *p, size_t len)
{
    while (len && ((uintptr_t)p & 7)) {
        crc = crc >> 8 ^ table[0][(crc ^ *p++) & 0xff];
        len--;
    }
    while (len >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                             (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 |
                      (uint32_t)p[7] << 24;
        crc = table[7][lo & 0xff] ^ table[6][lo >> 8 & 0xff] ^ table[5][lo >> 16 & 0xff] ^
              table[4][lo >> 24] ^ table[3][hi & 0xff] ^ table[2][hi >> 8 & 0xff] ^
              table[1][hi >> 16 & 0xff] ^ table[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len--)
        crc = crc >> 8 ^ table[0][(crc ^ *p++) & 0xff];
    return crc;
}

uint32_t mic_crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&table_once, table_init);
    return ~sw(~crc, buf, len);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2"))) static uint32_t hw(uint32_t crc, const uint8_t *p, size_t len)
{
    uint64_t c = crc;

    while (len && ((uintptr_t)p & 7)) {
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
        len--;
    }
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
        p += 8;
        len -= 8;
    }
    while (len--)
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
    return (uint32_t)c;
}

static int use_hw = -1; /* -1: not asked yet */

uint32_t mic_crc32c(uint32_t crc, const void *buf, size_t len)
{
    int h = __atomic_load_n(&use_hw, __ATOMIC_RELAXED);

    if (h < 0) {
        __builtin_cpu_init();
        h = __builtin_cpu_supports("sse4.2") ? 1 : 0;
        __atomic_store_n(&use_hw, h, __ATOMIC_RELAXED);
    }
    if (h)
        return ~hw(~crc, buf, len);
    return mic_crc32c_sw(crc, buf, len);
}
#else
uint32_t mic_crc32c(uint32_t crc, const void *buf, size_t len)
{
    return mic_crc32c_sw(crc, buf, len);
}
#endif
