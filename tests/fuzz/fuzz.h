/* fuzz.h - what the libFuzzer targets in tests/fuzz/ share.
 *
 * Each fuzz_<target>.c defines LLVMFuzzerTestOneInput for one parser of
 * micd (README.md in this directory lists them) and links micd's objects
 * built with clang -fsanitize=fuzzer-no-link,address,undefined (Makefile:
 * build/fuzz/obj/).  A target checks more than "no crash": FUZZ_CHECK
 * states what the parser promises in its header (its return codes, the
 * bounds of what it fills in), and a broken promise aborts, which libFuzzer
 * reports as a crash with the input saved under build/fuzz/artifacts/.
 * Every target frees what the parser handed it (LeakSanitizer is on), and
 * none writes a file. */
#ifndef MIC_FUZZ_H
#define MIC_FUZZ_H

#define _POSIX_C_SOURCE 200809L /* strnlen; fuzz.h comes first in each target */

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/config.h"
#include "core/logger.h"

#define FUZZ_CHECK(cond)                                                           \
    do {                                                                           \
        if (!(cond)) {                                                             \
            fprintf(stderr, "%s:%d: broken promise: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                               \
        }                                                                          \
    } while (0)

/* micd's defaults (no flags, no config file), as mic_config_load fills
 * them: the limits (max_depth, max_batch) the parsers take from it. */
static inline void fuzz_config_defaults(struct mic_config *cfg)
{
    char *argv[] = {"micd", NULL};
    char err[256];

    if (mic_config_load(cfg, 1, argv, err, sizeof err)) {
        fprintf(stderr, "fuzz: defaults: %s\n", err);
        abort();
    }
}

/* Define LLVMFuzzerInitialize: micd's log quiet below errors and, when
 * 'cfg' is not NULL, micd's default settings in *cfg (fuzz_config_defaults). */
#define FUZZ_INIT(cfg)                                    \
    int LLVMFuzzerInitialize(int *argc, char ***argv)    \
    {                                                     \
        struct mic_config *cfg_ = (cfg);                  \
        (void)argc;                                       \
        (void)argv;                                       \
        if (cfg_)                                         \
            fuzz_config_defaults(cfg_);                   \
        mic_logger_set_level(mic_logger_level_parse("error"));  \
        return 0;                                         \
    }

#endif
