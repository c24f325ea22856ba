/* catalog.h - the catalog: group, topic and replay run records (catalog.c).
 * The conventions of store.h hold for every function below. */
#ifndef MIC_STORE_CATALOG_H
#define MIC_STORE_CATALOG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "store.h"

/* ---- Groups ---- */

/* A group's stored record: its id, backfill progress and configuration
 * (JSON text owned by group.c; borrowed from LMDB on get). */
struct mic_group_rec {
    uint32_t gid;
    uint8_t backfilling;     /* deliveries for older events still being made */
    uint64_t backfill_next;  /* next log seq to look at */
    uint64_t backfill_end;   /* last log seq to look at */
    const char *config;
    size_t config_len;
};

int mic_store_next_group_id(mic_txn *t, uint32_t *gid);
int mic_store_group_get(mic_txn *t, const char *name, size_t len,
                        struct mic_group_rec *g);
int mic_store_group_put(mic_txn *t, const char *name, size_t len,
                        const struct mic_group_rec *g);
int mic_store_group_del(mic_txn *t, const char *name, size_t len);
int mic_store_group_each(mic_txn *t,
                         int (*fn)(void *arg, const char *name, size_t len,
                                   const struct mic_group_rec *g),
                         void *arg);

/* Ids of deleted groups whose keys are still being removed. */
int mic_store_drop_put(mic_txn *t, uint32_t gid);
/* The first dropped group id, MIC_ENOTFOUND if none. */
int mic_store_drop_first(mic_txn *t, uint32_t *gid);
/* Delete up to 'budget' keys of group 'gid' (deliveries, ready set, DLQ);
 * when none are left, forget the drop and set *finished. */
int mic_store_drop_step(mic_txn *t, uint32_t gid, int budget, int *finished);

/* ---- Replay runs: run_id -> record (replay.c owns its layout) ---- */

int mic_store_run_get(mic_txn *t, const char *id, size_t len, const void **val,
                      size_t *vlen);
int mic_store_run_put(mic_txn *t, const char *id, size_t len, const void *val,
                      size_t vlen);
int mic_store_run_del(mic_txn *t, const char *id, size_t len);
/* Call fn for every run in id order; stops when fn returns nonzero. */
int mic_store_run_each(mic_txn *t,
                       int (*fn)(void *arg, const char *id, size_t len,
                                 const void *val, size_t vlen),
                       void *arg);

/* ---- Topics ---- */

int mic_store_topic_get(mic_txn *t, const char *name, size_t len,
                        struct mic_topic_rec *tr);
int mic_store_topic_put(mic_txn *t, const char *name, size_t len,
                        const struct mic_topic_rec *tr);
int mic_store_topic_del(mic_txn *t, const char *name, size_t len);
/* Call fn for every topic in name order; stops early if fn returns
 * nonzero and returns that value. */
int mic_store_topic_each(mic_txn *t,
                         int (*fn)(void *arg, const char *name, size_t len,
                                   const struct mic_topic_rec *tr),
                         void *arg);

#endif
