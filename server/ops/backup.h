/* backup.h - online backups: GET /v1/backup streams a consistent,
 * compacted copy of the store (DESIGN section 13, "Backup") while micd
 * keeps serving.
 *
 * A backup is two threads of its own and a pipe, nothing on disk:
 *   - the copy thread runs mic_store_copy_fd (LMDB's compacting copy, one
 *     read transaction for the whole copy) into the pipe's write end;
 *   - the pump thread reads the pipe into a ring buffer in memory (1 MiB)
 *     and, when the HTTP side waits for bytes, calls its 'wake'.
 * The HTTP side (routes.c, a libmicrohttpd content reader in an HTTP
 * thread) takes bytes from the ring with mic_backup_read, which never
 * blocks: when the ring is empty it answers 0 and the caller suspends its
 * connection; 'wake' hands it back to its loop (loops.h), which resumes
 * it.  So no HTTP thread ever waits for the copy, and a reader callback
 * never returns 0 without a suspension (libmicrohttpd would call it again
 * at once: a spin).
 *
 * A client that goes away: the HTTP side calls mic_backup_close; the pump
 * stops and closes the pipe's read end; the copy's next write fails with
 * EPIPE (micd ignores SIGPIPE, and LMDB blocks it in its writing thread),
 * the copy ends and its read transaction is released.  Nothing was
 * written to disk, so nothing is left behind.
 *
 * At most MIC_BACKUPS_MAX backups run at a time, counted from the start
 * until the copy has returned (its read transaction is gone) and the pump
 * has read the end of the pipe or stopped -- before the HTTP side is
 * handed the end, so a client that has the whole copy may start the next
 * backup at once: another is refused with MIC_ECONFLICT (409
 * backup_running, proto/openapi.yaml).
 *
 * A client that stops reading: once it has taken no bytes for the stall
 * timeout while the ring is full (the copy waits for it), the backup ends
 * as stalled: the copy stops (EPIPE) and its read transaction is released,
 * its slot freed, and mic_backup_read answers MIC_BACKUP_FAILED, so the
 * body is cut short.  The caller closes such a connection, which the
 * reader is no longer called for (routes.c: libmicrohttpd's timeout).
 *
 * Threads: mic_backup_start, mic_backup_read and mic_backup_close from the
 * HTTP thread that serves the request; mic_backups_shutdown and
 * mic_backup_metrics from any thread.  Each backup's state is behind its
 * own mutex; the set of running backups and the counters behind one
 * global mutex. */
#ifndef MIC_BACKUP_H
#define MIC_BACKUP_H

#include "store/store.h"

#include <stdint.h>
#include <sys/types.h>

struct mic_buf;

#define MIC_BACKUPS_MAX 1

typedef struct mic_backup mic_backup;

/* Start a backup of 's', handed out at 'rate' bytes a second at most (0:
 * as fast as it comes; micd's --backup-rate): the pump reads the pipe no
 * faster, so the copy's writes block and LMDB's walk of the store slows
 * down with it.  'stall_s' (micd's --backup-stall-timeout; 0: none): the
 * backup ends as stalled when its reader took no bytes for that many
 * seconds while the ring was full.  'wake(arg)' is called (from the pump thread,
 * with the backup's lock held: it must only hand the connection over, as
 * mic_loop_resume and mic_loops_kick do) once after each
 * mic_backup_read that answered 0, when bytes or the end are there, or
 * when micd shuts down.
 * Returns MIC_OK with *out (the caller's: release it with
 * mic_backup_close); MIC_ECONFLICT when MIC_BACKUPS_MAX backups are
 * running; MIC_ENOTREADY after mic_backups_shutdown; MIC_ENOMEM; MIC_EIO
 * when no pipe or thread can be had (logged). */
int mic_backup_start(mic_backup **out, mic_store *s, uint64_t rate, int stall_s,
                     void (*wake)(void *arg), void *arg);

/* What mic_backup_read answers besides a count of bytes. */
#define MIC_BACKUP_AGAIN 0   /* nothing yet: 'wake' will be called */
#define MIC_BACKUP_END (-1)  /* the whole copy was handed out */
#define MIC_BACKUP_FAILED (-2) /* the copy failed (logged), it stalled or
                                * micd stops: the transfer must end
                                * incomplete */

/* Copy up to 'max' bytes of the backup into 'buf': the count (> 0), or
 * one of the three above.  Never blocks. */
ssize_t mic_backup_read(mic_backup *b, char *buf, size_t max);

/* The HTTP side is done with 'b' (the transfer ended, whole or not): the
 * copy is stopped if it still runs, and 'wake' is never called again.
 * 'b' is freed once its threads have ended too.  NULL is ignored. */
void mic_backup_close(mic_backup *b);

/* micd stops: refuse new backups, end every running one (their readers
 * answer MIC_BACKUP_FAILED; a waiting one is woken), and wait until
 * every backup thread has ended, so that no copy reads the store after
 * this returns.  Call before the HTTP threads stop (a woken connection
 * must be resumed before libmicrohttpd stops) and before the store
 * closes. */
void mic_backups_shutdown(void);

/* Append the backup families to a /metrics exposition:
 * mic_backups_total{result="ok|client_gone|failed|stalled|refused"},
 * mic_backup_bytes_total, mic_backups_running. */
void mic_backup_metrics(struct mic_buf *out);

#endif
