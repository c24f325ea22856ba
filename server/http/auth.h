/* auth.h - API keys, roles and scopes (DESIGN sections 7 and 13).
 *
 * A keys file holds one key per line, `ID ROLE SHA256 SCOPES`: the secret
 * itself is never stored, only its SHA-256.  A request presents the secret
 * in `Authorization: Bearer SECRET`; mic_keys_find hashes it and compares
 * the hash with every key's in constant time.  What a route needs is an
 * enum mic_perm (routes.c's table gives each route one); which roles have
 * it is mic_perm_allows, the one place that decides (with the scopes of
 * the key, checked by the mic_key_covers_* functions).
 *
 * Errors: mic_keys_parse and mic_keys_load return MIC_OK, MIC_EINVAL (a bad
 * line: 'why' names it), MIC_EIO (the file cannot be read: 'why' says so)
 * or MIC_ENOMEM ('why' says so too).  Nothing else here fails. */
#ifndef MIC_AUTH_H
#define MIC_AUTH_H

#include <stddef.h>

#include "core/key.h"

enum mic_role { MIC_ROLE_NONE, MIC_ROLE_PRODUCER, MIC_ROLE_CONSUMER, MIC_ROLE_MONITOR,
                MIC_ROLE_ADMIN };

/* What a route needs (DESIGN section 13's table, one value per row). */
enum mic_perm {
    MIC_PERM_UNSET,      /* no entry: tests/system/test_auth.c fails on such a route */
    MIC_PERM_OPEN,       /* /healthz, /readyz: no key */
    MIC_PERM_PUBLISH,    /* POST /v1/events: producer, admin */
    MIC_PERM_INSPECT,    /* GET an event, an aggregate: monitor, admin */
    MIC_PERM_TOPICS,     /* GET /v1/topics, a topic, /v1/whoami: every role */
    MIC_PERM_RANGE,      /* GET a topic's events: consumer, monitor, admin */
    MIC_PERM_GROUPS,     /* GET groups, a group, its dlq, oldest, blocked:
                          * consumer, monitor, admin */
    MIC_PERM_CONSUME,    /* claim, ack, nack, extend: consumer, admin */
    MIC_PERM_MONITOR,    /* replay runs, stats, metrics, the UI: monitor, admin */
    MIC_PERM_ADMIN,      /* every PUT and DELETE, requeue, skip, gap skip,
                          * POST /v1/replays, backup: admin */
};

/* 1 if 'role' has 'perm' (MIC_PERM_OPEN: every role and none). */
int mic_perm_allows(int perm, int role);
/* The lowercase word of a role ("producer"), or NULL for another value;
 * mic_role_parse is the reverse (MIC_ROLE_NONE for an unknown word). */
const char *mic_role_name(int role);
int mic_role_parse(const char *s, size_t len);

typedef struct mic_keys mic_keys;

/* Parse a keys file's text (len bytes).  MIC_OK with *out (the caller's:
 * mic_keys_free; a file without keys gives an empty set), MIC_EINVAL with
 * "line N: reason" in 'why' (whylen bytes), MIC_ENOMEM (with a 'why'). */
int mic_keys_parse(const char *text, size_t len, mic_keys **out, char *why, size_t whylen);
/* Read and parse the file at 'path': as mic_keys_parse, plus MIC_EIO. */
int mic_keys_load(const char *path, mic_keys **out, char *why, size_t whylen);
/* Drop a reference (NULL is ignored): the set is freed with the last.
 * mic_keys_parse/_load return a set holding one; mic_keys_ref adds one
 * (any thread) and returns k.  A mic_key pointer from mic_keys_find stays
 * valid while its holder keeps a reference. */
void mic_keys_free(mic_keys *k);
mic_keys *mic_keys_ref(mic_keys *k);
/* How many keys 'k' holds. */
int mic_keys_count(const mic_keys *k);
/* The i-th key of 'k' in file order (0 <= i < mic_keys_count(k)), or
 * NULL out of range; valid while a reference to k is held. */
const struct mic_key *mic_keys_at(const mic_keys *k, int i);

/* The key whose secret is 'secret' (len bytes), or NULL.  Every key's
 * hash is compared, each in constant time, whichever matches.  The
 * pointer is valid while a reference to k is held. */
const struct mic_key *mic_keys_find(const mic_keys *k, const char *secret, size_t len);

/* A new secret for `mic keys new`: "mic_" and 43 base64url characters of
 * 32 random bytes, NUL-terminated in out (at least 48 bytes), and its
 * SHA-256 as 64 lowercase hex digits in hex (at least 65 bytes).  MIC_OK
 * or MIC_EIO (no randomness). */
int mic_keys_new_secret(char *out, char *hex);

#endif
