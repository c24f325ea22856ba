/* auth.c - API keys, roles and scopes (auth.h). */
#define _POSIX_C_SOURCE 200809L
#include "auth.h"

#include "core/buf.h"
#include "core/err.h"

#include <errno.h>
#include <stdatomic.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mic_keys {
    atomic_int refs;
    int n;
    struct mic_key *keys;
};

/* ---- Roles and permissions (DESIGN section 13's table) ---- */

int mic_perm_allows(int perm, int role)
{
    switch (perm) {
    case MIC_PERM_OPEN:
        return 1;
    case MIC_PERM_PUBLISH:
        return role == MIC_ROLE_PRODUCER || role == MIC_ROLE_ADMIN;
    case MIC_PERM_INSPECT:
    case MIC_PERM_MONITOR:
        return role == MIC_ROLE_MONITOR || role == MIC_ROLE_ADMIN;
    case MIC_PERM_TOPICS:
        return role != MIC_ROLE_NONE;
    case MIC_PERM_RANGE:
    case MIC_PERM_GROUPS:
        return role == MIC_ROLE_CONSUMER || role == MIC_ROLE_MONITOR || role == MIC_ROLE_ADMIN;
    case MIC_PERM_CONSUME:
        return role == MIC_ROLE_CONSUMER || role == MIC_ROLE_ADMIN;
    case MIC_PERM_ADMIN:
        return role == MIC_ROLE_ADMIN;
    }
    return 0; /* MIC_PERM_UNSET: nobody */
}

static const char *const role_names[] = {NULL, "producer", "consumer", "monitor", "admin"};

const char *mic_role_name(int role)
{
    return role > 0 && role <= MIC_ROLE_ADMIN ? role_names[role] : NULL;
}

int mic_role_parse(const char *s, size_t len)
{
    for (int r = MIC_ROLE_PRODUCER; r <= MIC_ROLE_ADMIN; r++)
        if (strlen(role_names[r]) == len && memcmp(role_names[r], s, len) == 0)
            return r;
    return MIC_ROLE_NONE;
}

/* ---- The keys file ---- */

static int idchar(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == '-';
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* One SCOPES field: "*" or topic:GLOB / group:GLOB items, comma-separated,
 * each GLOB of name characters and '*'.  NULL if good, else why not. */
static const char *check_scopes(const char *s, size_t len)
{
    size_t i = 0;

    if (len == 1 && s[0] == '*')
        return NULL;
    while (i < len) {
        size_t j = i, g;

        while (j < len && s[j] != ',')
            j++;
        if (j - i > 6 && memcmp(s + i, "topic:", 6) == 0)
            g = i + 6;
        else if (j - i > 6 && memcmp(s + i, "group:", 6) == 0)
            g = i + 6;
        else
            return "a scope is *, topic:GLOB or group:GLOB";
        for (; g < j; g++)
            if (!idchar(s[g]) && s[g] != '*')
                return "a glob has only name characters [A-Za-z0-9._-] and *";
        i = j + 1;
        if (j < len && i == len)
            return "a scope list does not end with a comma";
    }
    return NULL;
}

/* Split one line into its fields (at most 5 are looked at). */
static int fields(const char *l, size_t len, const char *f[5], size_t fl[5])
{
    int n = 0;
    size_t i = 0;

    while (i < len && n < 5) {
        while (i < len && (l[i] == ' ' || l[i] == '\t'))
            i++;
        if (i == len)
            break;
        f[n] = l + i;
        while (i < len && l[i] != ' ' && l[i] != '\t')
            i++;
        fl[n] = (size_t)(l + i - f[n]);
        n++;
    }
    return n;
}

static int parse_line(const char *l, size_t len, struct mic_key *k, const char **why)
{
    const char *f[5];
    size_t fl[5];
    int n = fields(l, len, f, fl);

    if (n != 4) {
        *why = "a line has four fields: ID ROLE SHA256 SCOPES";
        return -1;
    }
    if (fl[0] > MIC_KEY_ID_MAX) {
        *why = "the ID is longer than 64 characters";
        return -1;
    }
    for (size_t i = 0; i < fl[0]; i++)
        if (!idchar(f[0][i])) {
            *why = "the ID has only [A-Za-z0-9._-]";
            return -1;
        }
    if (!(k->role = mic_role_parse(f[1], fl[1]))) {
        *why = "the role is producer, consumer, monitor or admin";
        return -1;
    }
    if (fl[2] != 64) {
        *why = "the SHA256 field is 64 lowercase hex digits";
        return -1;
    }
    for (int i = 0; i < 32; i++) {
        int hi = hexval(f[2][2 * i]), lo = hexval(f[2][2 * i + 1]);
        if (hi < 0 || lo < 0) {
            *why = "the SHA256 field is 64 lowercase hex digits";
            return -1;
        }
        k->sha256[i] = (unsigned char)(hi << 4 | lo);
    }
    if (fl[3] > MIC_KEY_SCOPES_MAX) {
        *why = "the scopes are longer than 1024 characters";
        return -1;
    }
    if ((*why = check_scopes(f[3], fl[3])))
        return -1;
    memcpy(k->id, f[0], fl[0]);
    k->id[fl[0]] = 0;
    memcpy(k->scopes, f[3], fl[3]);
    k->scopes[fl[3]] = 0;
    return 0;
}

int mic_keys_parse(const char *text, size_t len, mic_keys **out, char *why, size_t whylen)
{
    mic_keys *k = calloc(1, sizeof *k);
    size_t i = 0;
    int line = 0, cap = 0;

    *out = NULL;
    if (!k) {
        snprintf(why, whylen, "no memory for the keys");
        return MIC_ENOMEM;
    }
    atomic_init(&k->refs, 1);
    while (i < len) {
        size_t e = i, b;
        const char *reason;
        struct mic_key key;

        while (e < len && text[e] != '\n')
            e++;
        line++;
        b = e;
        if (b > i && text[b - 1] == '\r')
            b--;
        while (i < b && (text[i] == ' ' || text[i] == '\t'))
            i++;
        if (i < b && text[i] != '#') {
            memset(&key, 0, sizeof key);
            for (size_t c = i; c < b; c++)
                if ((unsigned char)text[c] < 0x20 && text[c] != '\t') {
                    snprintf(why, whylen, "line %d: a control character", line);
                    goto bad;
                }
            if (parse_line(text + i, b - i, &key, &reason)) {
                snprintf(why, whylen, "line %d: %s", line, reason);
                goto bad;
            }
            for (int j = 0; j < k->n; j++)
                if (strcmp(k->keys[j].id, key.id) == 0) {
                    snprintf(why, whylen, "line %d: key %s is listed twice", line, key.id);
                    goto bad;
                }
            if (k->n == cap) {
                struct mic_key *nk = realloc(k->keys, (size_t)(cap ? cap * 2 : 8) * sizeof *nk);

                if (!nk) {
                    snprintf(why, whylen, "line %d: no memory for the keys", line);
                    mic_keys_free(k);
                    return MIC_ENOMEM;
                }
                k->keys = nk;
                cap = cap ? cap * 2 : 8;
            }
            k->keys[k->n++] = key;
        }
        i = e + 1;
    }
    *out = k;
    return MIC_OK;
bad:
    mic_keys_free(k);
    return MIC_EINVAL;
}

int mic_keys_load(const char *path, mic_keys **out, char *why, size_t whylen)
{
    struct mic_buf b;
    int rc;

    *out = NULL;
    mic_buf_init(&b);
    switch ((rc = mic_buf_read_file(&b, path, (size_t)16 << 20))) {
    case MIC_OK:
        rc = mic_keys_parse(b.p ? b.p : "", b.len, out, why, whylen);
        break;
    case MIC_ETOOBIG:
        snprintf(why, whylen, "%s is larger than 16 MiB", path);
        rc = MIC_EINVAL;
        break;
    case MIC_EIO:
        snprintf(why, whylen, "cannot read %s: %s", path, strerror(errno));
        break;
    default:
        snprintf(why, whylen, "no memory to read %s", path);
    }
    mic_buf_fini(&b);
    return rc;
}

mic_keys *mic_keys_ref(mic_keys *k)
{
    if (k)
        atomic_fetch_add(&k->refs, 1);
    return k;
}

void mic_keys_free(mic_keys *k)
{
    if (!k || atomic_fetch_sub(&k->refs, 1) > 1)
        return;
    if (k->keys)
        OPENSSL_cleanse(k->keys, (size_t)k->n * sizeof *k->keys);
    free(k->keys);
    free(k);
}

int mic_keys_count(const mic_keys *k)
{
    return k ? k->n : 0;
}

const struct mic_key *mic_keys_at(const mic_keys *k, int i)
{
    return k && i >= 0 && i < k->n ? &k->keys[i] : NULL;
}

const struct mic_key *mic_keys_find(const mic_keys *k, const char *secret, size_t len)
{
    unsigned char h[SHA256_DIGEST_LENGTH];
    const struct mic_key *found = NULL;

    if (!k)
        return NULL;
    SHA256((const unsigned char *)secret, len, h);
    for (int i = 0; i < k->n; i++) {
        /* Every hash is compared, and each comparison takes the same time
         * wherever the first difference is. */
        int eq = CRYPTO_memcmp(h, k->keys[i].sha256, sizeof h) == 0;
        if (eq && !found)
            found = &k->keys[i];
    }
    OPENSSL_cleanse(h, sizeof h);
    return found;
}

int mic_keys_new_secret(char *out, char *hex)
{
    unsigned char raw[32], h[SHA256_DIGEST_LENGTH];
    unsigned char b64[48];
    int n;

    if (RAND_bytes(raw, sizeof raw) != 1)
        return MIC_EIO;
    n = EVP_EncodeBlock(b64, raw, sizeof raw); /* 44 characters, one '=' */
    memcpy(out, "mic_", 4);
    for (int i = 0; i < n && b64[i] != '='; i++)
        out[4 + i] = b64[i] == '+' ? '-' : b64[i] == '/' ? '_' : (char)b64[i];
    out[4 + 43] = 0;
    SHA256((const unsigned char *)out, 47, h);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", h[i]);
    OPENSSL_cleanse(raw, sizeof raw);
    return MIC_OK;
}
