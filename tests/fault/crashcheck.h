/* crashcheck.h - the checker of the crash cycles (tests/fault/crashloop.c),
 * in the vocabulary of Jepsen's queue checker: it reads what every client
 * logged and says, per consumer group, what was lost, unexpected,
 * duplicated or recovered, and counts the violations of DESIGN section 1
 * and 3 that must never happen (an acked delivery handed out again, an
 * aggregate handed out out of order, two live leases on one aggregate).
 *
 * No false positives.  The checker only counts what the log proves:
 *   - a request that got no answer (micd killed mid-request) has an unknown
 *     outcome, never a failed one: an event whose publish never got a 2xx is
 *     "attempted", not "published"; if it shows up it is "recovered", if it
 *     does not, nothing is wrong;
 *   - an ack whose answer was lost is unknown: the delivery handed out again
 *     after it is a duplicate (allowed), not an acked-then-redelivered one;
 *   - server times are micd's (a grant is lease_expires_at minus the TTL of
 *     the claim, both written by micd's writer from CLOCK_REALTIME); client
 *     times are the same machine's CLOCK_REALTIME, taken before a request is
 *     sent and after its answer came back;
 *   - a lease is certainly live from its grant until the earlier of its
 *     expiry and the moment its holder sent the ack or nack for it (it may
 *     have ended sooner on micd, never later; a lease whose grant never
 *     reached the client is not in the log at all and counts for nothing).
 *
 * The checker owns nothing it is given; crashcheck_run only reads. */
#ifndef MIC_CRASHCHECK_H
#define MIC_CRASHCHECK_H

#include <stdint.h>
#include <stdio.h>

/* The two groups of the run. */
enum { CRASHCHECK_ORDERED = 0, CRASHCHECK_UNORDERED = 1, CRASHCHECK_GROUPS = 2 };

#define CRASHCHECK_ID_MAX 48     /* event ids of the run, NUL included */
#define CRASHCHECK_TOKEN_MAX 33  /* lease tokens: 32 hex digits + NUL */

/* One event as its producer knows it (one entry per event, whatever the
 * number of requests that carried it). */
struct crashcheck_pub {
    char event_id[CRASHCHECK_ID_MAX];
    int agg;              /* the aggregate's index (0..), -1 without aggregate */
    int64_t order;        /* its place in the aggregate: aggregate_version, or
                           * the producer's running index (1, 2, ...) for an
                           * unversioned aggregate; 0 without aggregate */
    int attempts;         /* requests that carried it (>= 1) */
    int acked;            /* 1: a request carrying it got a 2xx */
    int64_t seq;          /* micd's seq from that 2xx, 0 when none */
    /* What the store said after the drain (crashloop fills these):
     * 1 found by GET /v1/events/{id}, 0 answered 404, -1 not looked up. */
    int lookup;
    /* The state of its delivery in each group from that lookup: 'd'
     * dispatched, 'l' dlq, 's' skipped, 'p' pending or processing, 0 none. */
    char state[CRASHCHECK_GROUPS];
};

/* How a lease's holder settled it. */
enum crashcheck_settle {
    CRASHCHECK_DROPPED = 0,  /* never settled: left to expire */
    CRASHCHECK_ACK,
    CRASHCHECK_NACK,
};

/* What the ack or nack of a lease answered for it. */
enum crashcheck_result {
    CRASHCHECK_R_NONE = 0,   /* not settled (dropped) */
    CRASHCHECK_R_UNKNOWN,    /* no answer: micd died; it may have applied */
    CRASHCHECK_R_ACKED,
    CRASHCHECK_R_RETRYING,
    CRASHCHECK_R_DEAD,
    CRASHCHECK_R_LOST,       /* lease_lost */
    CRASHCHECK_R_NOTFOUND,
};

/* One delivery handed out to a worker by a claim whose answer arrived
 * (one entry per lease), and what became of it. */
struct crashcheck_lease {
    int group;                /* CRASHCHECK_ORDERED or _UNORDERED */
    int64_t seq;
    char event_id[CRASHCHECK_ID_MAX];
    char token[CRASHCHECK_TOKEN_MAX];
    int64_t grant_us;         /* micd: lease_expires_at - TTL */
    int64_t expires_us;       /* micd: lease_expires_at */
    int64_t claim_send_us, claim_recv_us;     /* client */
    enum crashcheck_settle settle;
    int64_t settle_send_us, settle_recv_us;   /* client; 0 when dropped */
    enum crashcheck_result result;
};

/* An event that a range read of the store returned after the drain. */
struct crashcheck_stored {
    char event_id[CRASHCHECK_ID_MAX];
    int same;             /* 1: every field the producer sent is stored as sent */
};

struct crashcheck_input {
    const struct crashcheck_pub *pubs;
    size_t npubs;
    const struct crashcheck_lease *leases;
    size_t nleases;
    const struct crashcheck_stored *stored;   /* may be NULL: not read */
    size_t nstored;
};

/* The figures of one group.  Must be 0 for a valid run: lost, unexpected,
 * acked_then_redelivered, order_violations, double_leases. */
struct crashcheck_group {
    long attempted;       /* events sent at least once */
    long published;       /* events acknowledged (2xx) */
    long delivered;       /* distinct events handed out at least once */
    long lost;            /* acknowledged, but never handed out in this group,
                           * not stored, or without a delivery in this group */
    long unexpected;      /* handed out, but nobody sent it */
    long duplicated;      /* events handed out more than once (allowed) */
    long redeliveries;    /* handouts after an event's first (allowed) */
    long recovered;       /* sent with an unknown outcome, handed out anyway */
    long acked_then_redelivered;  /* handouts after one answered "acked" */
    long order_violations;        /* ordered group: an event handed out after
                                   * a later one of its aggregate */
    long double_leases;   /* two certainly-live leases at once: on one
                           * aggregate (ordered), on one delivery (both) */
    long not_terminal;    /* acknowledged, stored, but its delivery in this
                           * group is not dispatched, dlq or skipped */
    long dlq;             /* its delivery is in the DLQ (reported) */
    /* What the workers did (reported, not judged). */
    long leases, acks, nacks, dropped, settle_unknown, lease_lost;
};

struct crashcheck_report {
    struct crashcheck_group g[CRASHCHECK_GROUPS];
    long stored;              /* events the range reads returned */
    long store_missing;       /* acknowledged, but not in the range reads or
                               * 404 to the lookup (counted in each group's lost) */
    long store_unexpected;    /* stored, but nobody sent it */
    long altered;             /* stored, but not with the fields sent */
    long looked_up;           /* acknowledged events looked up by id */
    int valid;                /* 1 when every must-be-zero figure is 0 */
};

/* Check 'in' and fill *rep.  When 'why' is not NULL, each kind of
 * violation is explained there, up to 5 lines per kind and group (event,
 * seq, tokens, times), so a failure can be investigated from the output.
 * Returns 0, or -1 when memory runs out (*rep is then not valid). */
int crashcheck_run(const struct crashcheck_input *in, struct crashcheck_report *rep, FILE *why);

/* The report as a table for a person (several lines) and as one JSON
 * object (no newline), into 'f'. */
void crashcheck_print_table(const struct crashcheck_report *rep, FILE *f);
void crashcheck_print_json(const struct crashcheck_report *rep, FILE *f);

/* "ordered" or "unordered". */
const char *crashcheck_group_name(int group);

#endif
