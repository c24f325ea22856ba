#!/bin/sh
# bench/backup.sh - the online backup (GET /v1/backup, `mic backup FILE`)
# under publish load (make bench-backup).
#
# Starts build/micd (defaults: --durability fsync) with a temporary store,
# fills it with FILL events (batches of 100), then, RUNS times each and in
# alternation:
#   quiet   a backup with nothing else running, written to a file and
#           fsync'd (mic backup FILE): its size and MiB/s;
#   load    W1-like single-event publishes (32 connections, LOAD events)
#           with no backup: events/s and p99;
#   backup  the same publishes while `mic backup -` streams one backup
#           after another to /dev/null until the publishes end (micd's
#           side of a copy that goes to another machine): events/s and p99
#           under a backup, and the backups' MiB/s under load.
# Then micd is restarted on the same store with --backup-rate RATE
# (default 50M) and the backup case is run again: what a capped backup
# leaves the publishes.
# The restored copy is checked too: a micd started on a directory holding
# only the last quiet backup's file answers /readyz and holds at least FILL
# events (GET /v1/stats, store.events).
# Environment: FILL (default 200000), LOAD (default 40000), RUNS (3), RATE,
# SMOKE=1 (FILL 5000, LOAD 2000, RUNS 1).  Output: a Markdown table on
# stdout; raw lines in $OUT (default bench/last-backup.jsonl).
set -eu
cd "$(dirname "$0")/.."
. bench/lib.sh
if [ "${SMOKE:-0}" = 1 ]; then FILL=${FILL:-5000}; LOAD=${LOAD:-2000}; RUNS=${RUNS:-1}; fi
FILL=${FILL:-200000}
LOAD=${LOAD:-40000}
RUNS=${RUNS:-3}
RATE=${RATE:-50M}
OUT=${OUT:-bench/last-backup.jsonl}
: > "$OUT"

start_micd
rpid=""
stop_all() {
    [ -n "$rpid" ] && { kill "$rpid" 2>/dev/null || true; wait "$rpid" 2>/dev/null || true; }
    stop_micd
}
trap stop_all EXIT

./build/loadgen --url "$url" --conns 16 --events "$FILL" --batch 100 --topic fill \
    --max-seconds 300 > "$dir/fill.json"

# One backup to FILE, written and fsync'd there (mic backup FILE), or with
# FILE "-" streamed to /dev/null (what micd's side costs, as when the copy
# goes to another machine): prints {"bytes":N,"seconds":S}.
backup_once() {
    t0=$(date +%s.%N)
    if [ "$1" = - ]; then
        bytes=$(./build/mic --url "$url" backup - 2> "$dir/backup.err" | wc -c) ||
            { cat "$dir/backup.err" >&2; exit 1; }
        grep -q '^backup: ' "$dir/backup.err" || { cat "$dir/backup.err" >&2; exit 1; }
    else
        ./build/mic --url "$url" backup "$1" 2> "$dir/backup.err" ||
            { cat "$dir/backup.err" >&2; exit 1; }
        bytes=$(stat -c %s "$1")
    fi
    t1=$(date +%s.%N)
    printf '{"bytes":%s,"seconds":%s}\n' "$bytes" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')"
}

# publish [&]: LOAD single-event publishes on 32 connections, the result
# in $dir/load.json.
publish() {
    ./build/loadgen --url "$url" --conns 32 --events "$LOAD" --batch 1 --topic load \
        --max-seconds 120 > "$dir/load.json"
}

# under_backups FIELDS: the publishes while `mic backup -` runs one backup
# after another until they end; appends {FIELDS,"publish":...,"backups":[...]}.
under_backups() {
    publish &
    lpid=$!
    : > "$dir/backups.jsonl"
    while kill -0 "$lpid" 2>/dev/null; do
        backup_once - >> "$dir/backups.jsonl"
    done
    wait "$lpid"
    printf '{%s,"publish":%s,"backups":[%s]}\n' "$1" "$(cat "$dir/load.json")" \
        "$(paste -sd, "$dir/backups.jsonl")" >> "$OUT"
}

for r in $(seq 1 "$RUNS"); do
    printf '{"run":%s,"case":"quiet","backup":%s}\n' "$r" "$(backup_once "$dir/b.mdb")" >> "$OUT"
    publish
    printf '{"run":%s,"case":"load","publish":%s}\n' "$r" "$(cat "$dir/load.json")" >> "$OUT"
    under_backups "\"run\":$r,\"case\":\"backup\""
done

# The same store under --backup-rate RATE: micd restarted on it with the
# cap, then RUNS times the publishes while capped backups run back to back.
kill "$pid"; wait "$pid" 2>/dev/null || true
rm -f "$dir/port"
./build/micd --listen 127.0.0.1:0 --data "$dir/store" --port-file "$dir/port" \
    --backup-rate "$RATE" 2>> "$dir/micd.log" &
pid=$!
await_port "$dir/port" "$pid" "$dir/micd.log"
url=http://127.0.0.1:$(cat "$dir/port")
for r in $(seq 1 "$RUNS"); do
    under_backups "\"run\":$r,\"case\":\"capped\",\"rate\":\"$RATE\""
done

# The last copy, restored: a micd on a directory holding only that file.
mkdir "$dir/restored"
cp "$dir/b.mdb" "$dir/restored/data.mdb"
./build/micd --listen 127.0.0.1:0 --data "$dir/restored" --port-file "$dir/rport" \
    2> "$dir/restored.log" &
rpid=$!
await_port "$dir/rport" "$rpid" "$dir/restored.log"
events=$(curl -sf "http://127.0.0.1:$(cat "$dir/rport")/v1/stats" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["store"]["events"])')
[ "$events" -ge "$FILL" ] || { echo "restored copy holds $events events, fewer than $FILL" >&2; exit 1; }
printf '{"case":"restored","events":%s}\n' "$events" >> "$OUT"

python3 - "$OUT" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(xs):
    xs = sorted(xs)
    return statistics.median(xs), xs[0], xs[-1]
def fmt(v, unit="", nd=1):
    m, lo, hi = v
    return f"{m:,.{nd}f}{unit} ({lo:,.{nd}f}-{hi:,.{nd}f})"
mib = lambda b: b["bytes"] / 1048576 / max(b["seconds"], 1e-9)
quiet = [r["backup"] for r in rows if r.get("case") == "quiet"]
load = [r["publish"] for r in rows if r.get("case") == "load"]
under = [r for r in rows if r.get("case") == "backup"]
ub = [b for r in under for b in r["backups"]]
restored = [r for r in rows if r.get("case") == "restored"][0]
print("| what | median (min-max) |")
print("|---|---|")
print(f"| backup size | {fmt(med([b['bytes'] / 1048576 for b in quiet]), ' MiB')} |")
print(f"| backup to a file (fsync'd), nothing else running | {fmt(med([mib(b) for b in quiet]), ' MiB/s')} |")
print(f"| backup streamed to /dev/null, under the publishes | {fmt(med([mib(b) for b in ub]), ' MiB/s')} ({len(ub)} backups) |")
print(f"| single-event publishes, 32 connections, no backup | {fmt(med([p['events_per_s'] for p in load]), ' ev/s', 0)}, p99 {fmt(med([p['p99_ms'] for p in load]), ' ms', 2)} |")
print(f"| the same while backups run back to back | {fmt(med([r['publish']['events_per_s'] for r in under]), ' ev/s', 0)}, p99 {fmt(med([r['publish']['p99_ms'] for r in under]), ' ms', 2)} |")
capped = [r for r in rows if r.get("case") == "capped"]
cb = [b for r in capped for b in r["backups"]]
if capped:
    rate = capped[0]["rate"]
    print(f"| backup streamed under the publishes, `--backup-rate {rate}` | {fmt(med([mib(b) for b in cb]), ' MiB/s')} ({len(cb)} backups) |")
    print(f"| the publishes while capped backups run back to back | {fmt(med([r['publish']['events_per_s'] for r in capped]), ' ev/s', 0)}, p99 {fmt(med([r['publish']['p99_ms'] for r in capped]), ' ms', 2)} |")
print(f"| the last backup restored | a micd on it holds {restored['events']:,} events |")
EOF
