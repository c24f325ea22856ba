/* glob.h - matching a name against a pattern with '*' (key scopes,
 * group topic patterns).  Nothing here fails or allocates. */
#ifndef MIC_GLOB_H
#define MIC_GLOB_H

#include <stddef.h>

/* Does glob 'pat' (plen bytes; '*' matches any run of characters, every
 * other byte itself) match all of 's' (NUL-terminated)?  1 or 0. */
int mic_glob_match(const char *pat, size_t plen, const char *s);

#endif
