#!/bin/sh
# bench/relay.sh - the transactional outbox end to end (make bench-relay;
# issue 15): rows committed with mic_outbox_append, published to micd by
# build/mic-relay, against a poller that only marks them.
#
# One PostgreSQL (the newest installed, default settings: fsync and
# synchronous_commit on) in a temporary directory on 127.0.0.1, run as the
# postgres user when root, and one release micd (default durability: fsync)
# from bench/lib.sh; both are stopped by PID at the end, as are the relays.
# proto/outbox.sql is applied once.  Each run of a driver starts from a
# truncated outbox holding ROWS rows appended with mic_outbox_append (1,000
# aggregates, a topic and aggregate_type of its own, since micd keeps an
# aggregate's versions for good), then:
#   poller K   build/outbox_poller --workers K: K connections claim and mark
#              rows as mic-relay claims them (UPDATE ... FOR UPDATE SKIP
#              LOCKED, batches of 100) and publish nothing: the ceiling of
#              the database side.
#   relay K    K build/mic-relay processes (--batch 100, unordered);
#              "relay 4 ordered" adds --preserve-aggregate-order.  Timed by
#              build/outbox_poller --wait (no row pending or processing,
#              polled every 50 ms) from just before the relays start; then
#              the relays get SIGTERM, and micd's /v1/stats must show ROWS
#              events and no duplicate on the run's topic.
# The drivers take turns within a run (RUNS runs, the order rotating).
# Then the lag, for 1 and 4 relays: build/outbox_poller --produce appends
# RATE rows/s (default 500) for LAG_SECONDS s (default 10), each row its own
# committed transaction, on PRODUCERS connections (default 8), while the
# relays run; per event, lag = micd's received_at - its created_at (the
# row's, kept by the relay), read back from micd's NDJSON range read.
# Relay runs also record the CPU of the relays, micd and PostgreSQL and the
# WAL fsyncs.  Prints Markdown tables.
#   SMOKE=1   2,000 rows, 1 run, a 2 s lag run; exits 1 on any problem
#   ROWS=N RUNS=N RATE=N LAG_SECONDS=N DRIVERS="poller1 ... relay4o"
#   LAG_RELAYS="1 4" (empty: no lag runs)
# Raw lines (one JSON line per run) go to $OUT (default build/last-relay.jsonl).
set -eu
cd "$(dirname "$0")/.."
if [ "${SMOKE:-0}" = 1 ]; then
    ROWS=${ROWS:-2000} RUNS=${RUNS:-1} RATE=${RATE:-500} LAG_SECONDS=${LAG_SECONDS:-2}
else
    ROWS=${ROWS:-50000} RUNS=${RUNS:-3} RATE=${RATE:-500} LAG_SECONDS=${LAG_SECONDS:-10}
fi
DRIVERS=${DRIVERS:-poller1 poller2 poller4 relay1 relay2 relay4 relay4o}
PRODUCERS=${PRODUCERS:-8}
OUT=${OUT:-build/last-relay.jsonl}
mkdir -p "$(dirname "$OUT")"
: > "$OUT"
. bench/lib.sh

relays=""
pgpid=""
pgdir=$(mktemp -d /tmp/mic-relaybench-pg-XXXXXX)
cleanup() {
    for r in $relays; do kill "$r" 2>/dev/null || true; wait "$r" 2>/dev/null || true; done
    if [ -n "$pgpid" ]; then
        # the postmaster's own PID (the one started may be runuser's)
        pm=$(head -1 "$pgdir/data/postmaster.pid" 2>/dev/null || echo "$pgpid")
        kill -INT "$pm" 2>/dev/null || true
        wait "$pgpid" 2>/dev/null || true
    fi
    rm -rf "$pgdir"
    stop_micd
}

# ---- PostgreSQL, default settings ----
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
as_pg=""
if [ "$(id -u)" = 0 ]; then
    chown postgres "$pgdir"
    as_pg="runuser -u postgres --"
fi
start_micd
trap cleanup EXIT
trap 'exit 1' INT TERM
$as_pg "$pgbin/initdb" -D "$pgdir/data" -A trust -U postgres > "$pgdir/initdb.log" 2>&1 ||
    { cat "$pgdir/initdb.log" >&2; exit 1; }
pgport=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
$as_pg "$pgbin/postgres" -D "$pgdir/data" -p "$pgport" -k "$pgdir" \
    -c listen_addresses=127.0.0.1 > "$pgdir/postgres.log" 2>&1 &
pgpid=$!
i=0
until "$pgbin/pg_isready" -q -h 127.0.0.1 -p "$pgport"; do
    i=$((i + 1))
    [ $i -gt 600 ] && { echo "postgres did not start" >&2; cat "$pgdir/postgres.log" >&2; exit 1; }
    kill -0 "$pgpid" 2>/dev/null || { echo "postgres exited" >&2; cat "$pgdir/postgres.log" >&2; exit 1; }
    sleep 0.05
done
pg="host=127.0.0.1 port=$pgport dbname=postgres user=postgres"
sql() { PGOPTIONS='-c client_min_messages=warning' "$pgbin/psql" -X -q -v ON_ERROR_STOP=1 -At "$pg" "$@"; }
sql -1 -f proto/outbox.sql > /dev/null

# fill NAME: a truncated outbox with ROWS rows of topic and aggregate_type
# NAME (inserted 10,000 a statement), analyzed and checkpointed.
fill() {
    sql -c "TRUNCATE mic_outbox, mic_outbox_versions RESTART IDENTITY" > /dev/null
    a=1
    while [ "$a" -le "$ROWS" ]; do
        b=$((a + 9999))
        [ "$b" -gt "$ROWS" ] && b=$ROWS
        sql -c "SELECT count(*) FROM (SELECT mic_outbox_append('$1', '$1', 'a' || (g % 1000),
                'x', jsonb_build_object('i', g)) FROM generate_series($a, $b) g) s" > /dev/null
        a=$((b + 1))
    done
    sql -c "ANALYZE mic_outbox" -c "CHECKPOINT" > /dev/null
}

# start_relays K FLAG...: K relays in the background, PIDs in $relays.
start_relays() {
    k=$1
    shift
    relays=""
    j=0
    while [ "$j" -lt "$k" ]; do
        ./build/mic-relay --pg "$pg" --to "$url" "$@" 2> "$dir/relay-$j.log" &
        relays="$relays $!"
        j=$((j + 1))
    done
}

stop_relays() {
    for r in $relays; do
        kill "$r" 2>/dev/null || true
        wait "$r" || { echo "a relay exited with status $?" >&2; tail -3 "$dir"/relay-*.log >&2; exit 1; }
    done
    relays=""
}

# topic_stats NAME: micd's "events duplicates" for topic NAME.
topic_stats() {
    curl -sf "$url/v1/stats" | python3 -c '
import json, sys
t = [t for t in json.load(sys.stdin)["topics"] if t["topic"] == sys.argv[1]]
print(*(t and (t[0]["events"], t[0]["duplicates"]) or (0, 0)))' "$1"
}

# cpu_snap FILE: "pid ticks" (utime + stime) of micd, the relays and every
# PostgreSQL process, into FILE; cpu_json BEFORE AFTER: their CPU seconds
# between the two snapshots (a process absent from BEFORE counts whole),
# as JSON members.  pg_wal_syncs: WAL fsyncs so far (pg_stat_wal).
cpu_snap() {
    pm=$(head -1 "$pgdir/data/postmaster.pid")
    { echo "micd $pid"; for r in $relays; do echo "relay $r"; done
      echo "pg $pm"; for c in $(ps -o pid= --ppid "$pm"); do echo "pg $c"; done; } |
    while read -r who p; do
        t=$(awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null) && echo "$who $p $t"
    done > "$1"
}
cpu_json() {
    awk -v hz="$(getconf CLK_TCK)" 'NR == FNR { b[$2] = $3; next }
        { s[$1] += $3 - b[$2] }
        END { printf "\"micd_cpu_s\":%.2f,\"relay_cpu_s\":%.2f,\"pg_cpu_s\":%.2f,",
              s["micd"] / hz, s["relay"] / hz, s["pg"] / hz }' "$1" "$2"
}
pg_wal_syncs() { sql -c "SELECT wal_sync FROM pg_stat_wal"; }

# drive RUN DRIVER: one timed run, one JSON line into $OUT, with the CPU
# seconds of micd, the relays and PostgreSQL and the WAL fsyncs it took.
drive() {
    name="rb-$1-$2"
    fill "$name"
    case $2 in
    poller*)
        # (its backends are gone when it has finished: no CPU figures)
        w0=$(pg_wal_syncs)
        ./build/outbox_poller --pg "$pg" --workers "${2#poller}" --expect "$ROWS" \
            --max-seconds 300 > "$dir/r.json" || { cat "$dir/r.json" >&2; exit 1; }
        prof="\"wal_syncs\":$(($(pg_wal_syncs) - w0)),"
        sed "s/^{/{\"run\":$1,\"driver\":\"$2\",\"events\":null,\"duplicates\":null,$prof/" "$dir/r.json" >> "$OUT"
        return ;;
    relay*o) k=${2#relay}; k=${k%o}; set -- "$1" "$2" --preserve-aggregate-order ;;
    relay*) k=${2#relay}; set -- "$1" "$2" ;;
    esac
    rm -f "$dir/ready"
    ./build/outbox_poller --pg "$pg" --wait "$ROWS" --ready-file "$dir/ready" \
        --max-seconds 300 > "$dir/r.json" &
    waiter=$!
    i=0
    until [ -e "$dir/ready" ]; do
        i=$((i + 1))
        [ $i -gt 1000 ] && { echo "outbox_poller --wait did not start" >&2; exit 1; }
        sleep 0.01
    done
    run=$1 driver=$2
    shift 2
    w0=$(pg_wal_syncs)
    cpu_snap "$dir/cpu0"
    start_relays "$k" "$@"
    wait "$waiter" || { echo "$driver: rows left:" >&2; cat "$dir/r.json" >&2; tail -3 "$dir"/relay-*.log >&2; exit 1; }
    cpu_snap "$dir/cpu1"
    stop_relays
    prof="$(cpu_json "$dir/cpu0" "$dir/cpu1")\"wal_syncs\":$(($(pg_wal_syncs) - w0)),"
    set -- $(topic_stats "$name")
    sed "s/^{/{\"run\":$run,\"driver\":\"$driver\",\"events\":$1,\"duplicates\":$2,$prof/" "$dir/r.json" >> "$OUT"
}

n=0
while [ "$n" -lt "$RUNS" ]; do
    for d in $(rotated "$n" $DRIVERS); do
        drive "$n" "$d"
        tail -1 "$OUT" >&2
    done
    n=$((n + 1))
done

# lag K: RATE rows/s for LAG_SECONDS s appended while K relays publish them.
lag() {
    name="lag-$1"
    sql -c "TRUNCATE mic_outbox, mic_outbox_versions RESTART IDENTITY" -c "CHECKPOINT" > /dev/null
    start_relays "$1"
    ./build/outbox_poller --pg "$pg" --produce "$RATE" --seconds "$LAG_SECONDS" --workers "$PRODUCERS" \
        --topic "$name" --aggregate-type "$name" --max-seconds $((LAG_SECONDS * 3)) > "$dir/p.json" ||
        { echo "producer failed:" >&2; cat "$dir/p.json" >&2; exit 1; }
    ./build/outbox_poller --pg "$pg" --wait $((RATE * LAG_SECONDS)) --max-seconds 120 > /dev/null ||
        { echo "lag $1: rows left" >&2; exit 1; }
    stop_relays
    curl -sf -H 'Accept: application/x-ndjson' "$url/v1/topics/$name/events" > "$dir/lag.ndjson"
    python3 - "$dir/lag.ndjson" "$1" "$(cat "$dir/p.json")" >> "$OUT" <<'PY'
import datetime, json, sys
def us(t):
    d = datetime.datetime.strptime(t.rstrip("Z"), "%Y-%m-%dT%H:%M:%S.%f")
    return (d - datetime.datetime(1970, 1, 1)) // datetime.timedelta(microseconds=1)
lags = sorted((us(e["received_at"]) - us(e["created_at"])) / 1000.0
              for e in map(json.loads, open(sys.argv[1])))
p = json.loads(sys.argv[3])
q = lambda f: lags[min(len(lags) - 1, int(f * len(lags)))] if lags else None
print(json.dumps({"driver": "lag", "relays": int(sys.argv[2]), "events": len(lags),
                  "appended": p["appended"], "append_rows_per_s": p["rows_per_s"],
                  "p50_ms": q(0.5), "p99_ms": q(0.99), "max_ms": lags[-1] if lags else None,
                  "producer_most_behind_ms": p["most_behind_ms"]}))
PY
    tail -1 "$OUT" >&2
}
for k in ${LAG_RELAYS-1 4}; do
    lag "$k"
done

python3 - "$OUT" "$ROWS" "$RUNS" "$RATE" "$LAG_SECONDS" "$PRODUCERS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
n, runs, rate, secs, producers = map(int, sys.argv[2:7])
label = {"poller1": "poller, 1 worker (marks only)", "poller2": "poller, 2 workers",
         "poller4": "poller, 4 workers", "relay1": "mic-relay x1", "relay2": "mic-relay x2",
         "relay4": "mic-relay x4", "relay4o": "mic-relay x4, --preserve-aggregate-order"}
runs_ = [r for r in rows if r["driver"] != "lag"]
drivers = []
for r in runs_:
    if r["driver"] not in drivers:
        drivers.append(r["driver"])
print("%d rows a run (mic_outbox_append, 1,000 aggregates), batches of 100; %d run(s), "
      "drivers in turn; median (min-max).  CPU from /proc/PID/stat over the run (the "
      "PostgreSQL column: every process of the server, the waiter's backend included), "
      "cores busy = their sum / wall time; WAL fsyncs from pg_stat_wal." % (n, runs))
print()
print("| driver | rows/s | / poller x1 | events in micd / duplicates "
      "| CPU ms per 1,000 rows: relays / micd / PostgreSQL | cores busy | WAL fsyncs per 1,000 rows |")
print("|---|---|---|---|---|---|---|")
med = {}
problems = []
for d in drivers:
    rs = [r for r in runs_ if r["driver"] == d]
    v = sorted(r["rows_per_s"] for r in rs)
    med[d] = statistics.median(v)
    ev = "-" if rs[0]["events"] is None else "%s / %d" % (
        "/".join(str(r["events"]) for r in rs), sum(r["duplicates"] for r in rs))
    m = lambda f: "%.0f" % statistics.median(r[f] * 1000 / r["rows"] * 1000 for r in rs)
    cpu, busy = "-", "-"
    if "relay_cpu_s" in rs[0]:
        cpu = " / ".join(map(m, ("relay_cpu_s", "micd_cpu_s", "pg_cpu_s")))
        busy = "%.2f" % statistics.median(
            (r["relay_cpu_s"] + r["micd_cpu_s"] + r["pg_cpu_s"]) / r["seconds"] for r in rs)
    print("| %s | %.0f (%.0f-%.0f) | %s | %s | %s | %s | %.1f |" % (
          label.get(d, d), med[d], v[0], v[-1],
          "%.2fx" % (med[d] / med["poller1"]) if "poller1" in med else "-", ev, cpu, busy,
          statistics.median(r["wal_syncs"] * 1000.0 / r["rows"] for r in rs)))
    for r in rs:
        if r["rows"] != n or (r["events"] is not None and (r["events"] != n or r["duplicates"])):
            problems.append(r)
print()
print("Lag, commit -> stored in micd (received_at - created_at per event), %d rows/s "
      "asked for %d s, each its own transaction on %d connections:" % (rate, secs, producers))
print()
print("| relays | events | appended rows/s (achieved) | producer most behind its schedule, ms "
      "| lag p50 ms | lag p99 ms | max ms |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    if r["driver"] == "lag":
        print("| %d | %d | %.0f | %.0f | %.1f | %.1f | %.1f |" % (r["relays"], r["events"],
              r["append_rows_per_s"], r["producer_most_behind_ms"], r["p50_ms"], r["p99_ms"],
              r["max_ms"]))
        if r["events"] != r["appended"]:
            problems.append(r)
if problems:
    print("\nproblems: %s" % problems)
    sys.exit(1)
PY
