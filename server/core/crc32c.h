/* crc32c.h - CRC-32C (Castagnoli, polynomial 0x1EDC6F41, reflected
 * 0x82F63B78), the checksum of the store's log records
 * (proto/store-format.md, "Log record").
 *
 * mic_crc32c uses the SSE4.2 crc32 instruction when the CPU has it (checked
 * once, at the first call) and a slice-by-8 table otherwise; both give the
 * same value.  Thread-safe: the tables are constant. */
#ifndef MIC_CRC32C_H
#define MIC_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* The CRC-32C of 'len' bytes at 'buf' continued from 'crc' (0 to start;
 * the pre- and post-inversion are done inside, so a CRC of a+b equals
 * mic_crc32c(mic_crc32c(0, a), b)).  crc32c("123456789") = 0xE3069283. */
uint32_t mic_crc32c(uint32_t crc, const void *buf, size_t len);

/* The same with the table alone, whatever the CPU (for tests and the
 * benchmark that compares the two). */
uint32_t mic_crc32c_sw(uint32_t crc, const void *buf, size_t len);

#endif
