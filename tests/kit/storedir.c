/* storedir.c - removing a store directory (storedir.h). */
#include "storedir.h"

#include <stdio.h>
#include <unistd.h>

void storedir_rm(const char *dir)
{
    static const char *const files[] = {"data.mdb", "lock.mdb", "journal-0", "journal-1"};
    char p[400];

    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    rmdir(dir);
}
