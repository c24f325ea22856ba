/* glob.c - the one glob of MIC's names (glob.h): '*' matches any run of
 * characters, every other byte itself.  Key scopes (key.c) and group
 * topic patterns use it. */
#include "glob.h"

int mic_glob_match(const char *pat, size_t plen, const char *s)
{
    size_t p = 0, star = (size_t)-1;
    const char *mark = NULL;

    while (*s) {
        if (p < plen && pat[p] == '*') {
            star = p++;
            mark = s;
        } else if (p < plen && pat[p] == *s) {
            p++;
            s++;
        } else if (star != (size_t)-1) {
            p = star + 1;
            s = ++mark;
        } else {
            return 0;
        }
    }
    while (p < plen && pat[p] == '*')
        p++;
    return p == plen;
}
