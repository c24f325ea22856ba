/* wait.h - awaiting a condition, pausing, reading a file, a free port:
 * what tests of every layer share (this file calls nothing of micd's or
 * libmic's, so a unit test links it whatever its layer). */
#ifndef MIC_WAIT_H
#define MIC_WAIT_H

/* A TCP port of 127.0.0.1 that was free a moment ago (bound, read back and
 * released: the kernel's pick), or -1 if no socket could be had. */
int free_port(void);

/* Sleep 'ms' milliseconds (where a test paces a poll of a condition). */
void nap_ms(int ms);

/* The whole file at 'path', NUL-terminated (free() it); NULL if it cannot
 * be opened or memory runs out. */
char *file_read(const char *path);

/* Wait up to 'ms' for cond(arg) to become true, polling every 5 ms. */
int await(int (*cond)(void *arg), void *arg, int ms);

#endif
