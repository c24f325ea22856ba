#!/bin/sh
# bench/workerloop.sh - what libmic and its worker loop cost on W3, against
# the bench's raw HTTP driver (make bench-workerloop; issue 14).
#
# One release micd (--durability fsync) on 127.0.0.1, ephemeral port,
# temporary store, stopped by PID at the end (bench/lib.sh).  W3 as
# bench/peers.py runs it: a fresh group on its own topic, EVENTS events
# (about 300 bytes each) published by build/loadgen (8 connections, batches
# of 1000), then drained by build/workers: 8 workers, claim up to 32, 30 s
# lease, ack.  For each of RUNS runs every driver gets its own fresh backlog,
# the drivers taking turns (the order rotates from run to run, so no driver
# always comes first on a fresher store):
#   raw     the bench's own keep-alive HTTP/1.1, one ack per claim batch
#   libmic  mic_claim + mic_ack (libcurl, jansson), one ack per claim batch
#   loop    mic_worker_run, the handler returns MIC_DONE (the loop acks each
#           delivery on its own)
# Prints a Markdown table: events/s per driver, median (min-max) of the
# runs, claim p50/p99 where the driver measures it, and the ratios to raw;
# for the loop also events/s up to the last delivery handled (its stop, a
# long-poll cut short, takes time of its own).
#   SMOKE=1   1,000 events, 1 run; exits 1 on any problem (make check)
#   EVENTS=N, RUNS=N, DRIVERS="raw libmic loop"
# Raw lines (one JSON line per drain) go to $OUT (default
# build/last-workerloop.jsonl).
set -eu
cd "$(dirname "$0")/.."
if [ "${SMOKE:-0}" = 1 ]; then
    EVENTS=${EVENTS:-1000} RUNS=${RUNS:-1}
else
    EVENTS=${EVENTS:-100000} RUNS=${RUNS:-3}
fi
DRIVERS=${DRIVERS:-raw libmic loop}
OUT=${OUT:-build/last-workerloop.jsonl}
mkdir -p "$(dirname "$OUT")"
: > "$OUT"
. bench/lib.sh
start_micd --map-max 256G --max-connections 20000 --per-ip-connections 20000

# drain RUN DRIVER: a fresh W3 backlog, drained by that driver.
drain() {
    g="w3-$1-$2"
    curl -sf -XPUT "$url/v1/groups/$g" -H 'Content-Type: application/json' \
        -d "{\"topics\":[\"$g\"]}" > /dev/null
    ./build/loadgen --url "$url" --conns 8 --events "$EVENTS" --batch 1000 --topic "$g" \
        --max-seconds 600 > /dev/null 2> "$dir/loadgen.log" ||
        { echo "loadgen failed:" >&2; tail -5 "$dir/loadgen.log" >&2; exit 1; }
    ./build/workers --driver "$2" --url "$url" --group "$g" --workers 8 --max 32 \
        --expect "$EVENTS" --max-seconds 300 > "$dir/w.json" 2> "$dir/w.log" ||
        { echo "workers --driver $2 failed:" >&2; cat "$dir/w.json" "$dir/w.log" >&2; exit 1; }
    # the loop says on stderr when it handled the last delivery: its stop
    # (cutting the other threads' long-polls) comes after that
    last=$(sed -n 's/.*last delivery was handled after \([0-9.]*\) s.*/\1/p' "$dir/w.log")
    sed "s/^{/{\"run\":$1,\"last_handled_s\":${last:-null},/" "$dir/w.json" >> "$OUT"
}

n=0
while [ "$n" -lt "$RUNS" ]; do
    # this run's order: the driver list rotated by n
    for d in $(rotated "$n" $DRIVERS); do
        drain "$n" "$d"
    done
    n=$((n + 1))
done

python3 - "$OUT" "$EVENTS" "$RUNS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
events, runs = int(sys.argv[2]), int(sys.argv[3])
drivers = []
for r in rows:
    if r["driver"] not in drivers:
        drivers.append(r["driver"])
med = {}
print("W3 drained by build/workers: %d events a run, 8 workers, claim up to 32, 30 s lease, ack; "
      "%d run(s), drivers in turn; median (min-max)." % (events, runs))
print()
print("| driver | events/s | / raw | claim p50 / p99 ms (median) | duplicates / missing |")
print("|---|---|---|---|---|")
for d in drivers:
    rs = [r for r in rows if r["driver"] == d]
    ev = sorted(r["events_per_s"] for r in rs)
    med[d] = statistics.median(ev)
    lat = "%.3f / %.3f" % (statistics.median(r["claim_p50_ms"] for r in rs),
                           statistics.median(r["claim_p99_ms"] for r in rs)) \
        if rs[0]["claim_p50_ms"] is not None else "- (not measured)"
    print("| %s | %.0f (%.0f-%.0f) | %s | %s | %d / %d |" % (
        d, med[d], ev[0], ev[-1], "%.2fx" % (med[d] / med["raw"]) if "raw" in med else "-", lat,
        sum(r["duplicates"] for r in rs), sum(r["missing"] for r in rs)))
    if rs[0]["last_handled_s"] is not None:
        ev = sorted(events / r["last_handled_s"] for r in rs)
        stop = statistics.median(r["seconds"] - r["last_handled_s"] for r in rs)
        print("| %s, to the last delivery handled (the stop took %.2f s more) | %.0f (%.0f-%.0f) | %s | | |" % (
            d, stop, statistics.median(ev), ev[0], ev[-1],
            "%.2fx" % (statistics.median(ev) / med["raw"]) if "raw" in med else "-"))
bad = [r for r in rows if r["acked"] < events or r["duplicates"]]
if bad:
    print("\nproblems: %s" % bad)
    sys.exit(1)
PY
