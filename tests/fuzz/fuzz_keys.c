/* fuzz_keys.c - the API keys file (`micd --keys FILE`, DESIGN section 13):
 * mic_keys_parse (auth.h) on the file's text.  On success each key has a
 * valid id and role, ids are unique, and the scopes are ones the scope
 * matcher can walk (every key is asked about a topic, a group and "*"; a
 * secret is looked up); on failure
 * the answer is MIC_EINVAL with "line N: reason". */
#include "fuzz.h"

#include "http/auth.h"
#include "core/err.h"

#include <string.h>

FUZZ_INIT(NULL)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char why[256] = "";
    mic_keys *k = NULL;
    int rc = mic_keys_parse((const char *)data, size, &k, why, sizeof why);

    if (rc == MIC_OK) {
        int n = mic_keys_count(k);
        const struct mic_key *found;

        FUZZ_CHECK(k != NULL && n >= 0);
        for (int i = 0; i < n; i++) {
            const struct mic_key *key = mic_keys_at(k, i);
            size_t idlen;

            FUZZ_CHECK(key != NULL);
            idlen = strnlen(key->id, sizeof key->id);
            FUZZ_CHECK(idlen >= 1 && idlen <= MIC_KEY_ID_MAX);
            FUZZ_CHECK(strspn(key->id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                       "0123456789._-") == idlen);
            FUZZ_CHECK(mic_role_name(key->role) != NULL);
            FUZZ_CHECK(strnlen(key->scopes, sizeof key->scopes) <= MIC_KEY_SCOPES_MAX);
            FUZZ_CHECK(key->scopes[0] != 0);
            /* the matcher walks every scope list the parser lets in */
            (void)mic_key_covers_topic(key, "orders.created");
            (void)mic_key_covers_group(key, "billing-workers");
            /* "*" is a whole SCOPES field or not there at all */
            FUZZ_CHECK(mic_key_covers_all(key) == (strcmp(key->scopes, "*") == 0));
            FUZZ_CHECK(mic_key_lists(key, 1, "billing-workers", 15) ==
                       mic_key_covers_group(key, "billing-workers"));
            for (int j = 0; j < i; j++)
                FUZZ_CHECK(strcmp(mic_keys_at(k, j)->id, key->id) != 0);
        }
        FUZZ_CHECK(mic_keys_at(k, n) == NULL && mic_keys_at(k, -1) == NULL);
        found = mic_keys_find(k, "mic_not-a-secret", 16);
        (void)found;
        FUZZ_CHECK(mic_keys_ref(k) == k);
        mic_keys_free(k); /* the reference just taken */
        mic_keys_free(k);
    } else {
        FUZZ_CHECK(rc == MIC_EINVAL && k == NULL);
        FUZZ_CHECK(strncmp(why, "line ", 5) == 0);
    }
    return 0;
}
