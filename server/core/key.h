/* key.h - an API key as the rest of micd sees it: its id, role and the
 * hash of its secret (http/auth.c reads them from the keys file), and
 * its scopes, "*" or "topic:GLOB,group:GLOB,..." (DESIGN section 13).
 * The functions below only read the key: nothing fails or allocates. */
#ifndef MIC_KEY_H
#define MIC_KEY_H

#include <stddef.h>

#define MIC_KEY_ID_MAX 64
#define MIC_KEY_SCOPES_MAX 1024

/* One key.  'scopes' is the file's SCOPES field as written ("*", or
 * "topic:GLOB,group:GLOB,..."); 'sha256' the hash of the secret. */
struct mic_key {
    char id[MIC_KEY_ID_MAX + 1];
    int role;
    unsigned char sha256[32];
    char scopes[MIC_KEY_SCOPES_MAX + 1];
};

/* Do the key's scopes cover topic 'name' (a topic: pattern or "*"), group
 * 'name' (a group: pattern or "*"), everything ("*")? */
int mic_key_covers_topic(const struct mic_key *k, const char *name);
int mic_key_covers_group(const struct mic_key *k, const char *name);
int mic_key_covers_all(const struct mic_key *k);

/* For listings: 1 if 'k' is NULL (no keys in use) or covers the topic
 * (group: 0) or group (group: 1) 'name' of len bytes (not NUL-terminated,
 * at most 255 bytes). */
int mic_key_lists(const struct mic_key *k, int group, const char *name, size_t len);

#endif
