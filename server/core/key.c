/* key.c - what an API key may see (key.h): its scopes, matched against
 * topic and group names.  The keys file, roles and permissions are
 * http/auth.c's; this file only reads a struct mic_key, so that the
 * engine's listings can narrow by scope without calling up into HTTP. */
#include "key.h"

#include "glob.h"

#include <string.h>

/* Does one of the comma-separated scopes, "*" or of kind 'kind' ("topic",
 * "group"), match 'name'?  With kind NULL only "*" does. */
static int covers(const struct mic_key *k, const char *kind, const char *name)
{
    size_t klen = kind ? strlen(kind) : 0;
    const char *s = k->scopes;

    while (*s) {
        const char *e = strchr(s, ',');
        size_t n = e ? (size_t)(e - s) : strlen(s);

        if (n == 1 && s[0] == '*')
            return 1;
        if (kind && n > klen && memcmp(s, kind, klen) == 0 && s[klen] == ':' &&
            mic_glob_match(s + klen + 1, n - klen - 1, name))
            return 1;
        s += n;
        if (*s == ',')
            s++;
    }
    return 0;
}

int mic_key_covers_topic(const struct mic_key *k, const char *name)
{
    return covers(k, "topic", name);
}

int mic_key_covers_group(const struct mic_key *k, const char *name)
{
    return covers(k, "group", name);
}

int mic_key_covers_all(const struct mic_key *k)
{
    return covers(k, NULL, NULL);
}

int mic_key_lists(const struct mic_key *k, int group, const char *name, size_t len)
{
    char n[256];

    if (!k)
        return 1;
    if (len >= sizeof n)
        return 0;
    memcpy(n, name, len);
    n[len] = 0;
    return group ? mic_key_covers_group(k, n) : mic_key_covers_topic(k, n);
}
