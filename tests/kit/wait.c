/* wait.c - awaiting a condition, pausing, reading a file, a free port
 * (wait.h). */
#define _GNU_SOURCE
#include "wait.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <stdint.h>
#include <unistd.h>

static int64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int await(int (*cond)(void *arg), void *arg, int ms)
{
    int64_t end = mono_ms() + ms;
    struct timespec ts = {0, 5 * 1000000};

    for (;;) {
        if (cond(arg))
            return 1;
        if (mono_ms() > end)
            return 0;
        nanosleep(&ts, NULL);
    }
}

int free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -1;

    if (fd < 0)
        return -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};

    nanosleep(&ts, NULL);
}

char *file_read(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *p = NULL, *q;
    size_t cap = 0, len = 0, got;

    if (!f)
        return NULL;
    do {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            if (!(q = realloc(p, cap))) {
                free(p);
                fclose(f);
                return NULL;
            }
            p = q;
        }
        got = fread(p + len, 1, cap - len - 1, f);
        len += got;
    } while (got);
    p[len] = 0;
    fclose(f);
    return p;
}
