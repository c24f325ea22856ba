#!/bin/sh
# bench/claims.sh - consumer-side figures of micd (make bench-claims).
#
# One micd (--durability fsync) on 127.0.0.1, ephemeral port, temporary
# store; stopped by PID at the end.
#   W3  the work cycle: 100k events prefilled, 8 workers claiming up to 32
#       under a 30 s lease and acking each batch, until drained (3 runs,
#       median with min-max; duplicates and missing counted).
#   Claim cost against the backlog: claim p50/p99 (1 worker, max 1, claim
#       then ack, 2000 rounds) in a group holding 10k pending deliveries and
#       in one holding 1M (10M with BIG=1), in the same run.
# build/workers runs its raw driver (--driver raw, bench/workers.c): these
# figures are micd's, and libmic's own cost per claim (libcurl, jansson;
# make bench-workerloop) would lower W3 and dilute the p99 ratio.
set -eu
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
W3_EVENTS=${W3_EVENTS:-100000}
BIG_EVENTS=${BIG_EVENTS:-1000000}
[ "${BIG:-0}" = 1 ] && BIG_EVENTS=10000000
OUT=${OUT:-bench/last-claims.jsonl}
: > "$OUT"
. bench/lib.sh
start_micd --map-max 256G
group() { # name topic
    curl -sf -XPUT "$url/v1/groups/$1" -H 'Content-Type: application/json' \
        -d "{\"topics\":[\"$2\"]}" > /dev/null
}
fill() { # topic events
    ./build/loadgen --url "$url" --conns 8 --events "$2" --batch 1000 --topic "$1" \
        --max-seconds 600 > /dev/null 2>&1
}

n=0
while [ $n -lt "$RUNS" ]; do
    group "w3-$n" "w3-$n"
    fill "w3-$n" "$W3_EVENTS"
    ./build/workers --driver raw --url "$url" --group "w3-$n" --workers 8 --max 32 --expect "$W3_EVENTS" \
        --max-seconds 300 | sed 's/^{/{"workload":"W3",/' >> "$OUT"
    n=$((n + 1))
done

group small small
fill small 10000
group big big
fill big "$BIG_EVENTS"
./build/workers --driver raw --url "$url" --group small --workers 1 --max 1 --rounds 2000 \
    | sed 's/^{/{"workload":"claim-10k",/' >> "$OUT"
./build/workers --driver raw --url "$url" --group big --workers 1 --max 1 --rounds 2000 \
    | sed "s/^{/{\"workload\":\"claim-$BIG_EVENTS\",/" >> "$OUT"

python3 - "$OUT" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
w3 = [r for r in rows if r["workload"] == "W3"]
ev = sorted(r["events_per_s"] for r in w3)
print("| workload | figure |")
print("|---|---|")
print("| W3 work cycle: 8 workers, claim up to 32, 30 s lease, ack; 100k prefilled | %.0f ev/s median (%.0f-%.0f); duplicates %d, missing %d |" % (
    statistics.median(ev), ev[0], ev[-1], sum(r["duplicates"] for r in w3), sum(r["missing"] for r in w3)))
c = [r for r in rows if r["workload"].startswith("claim-")]
for r in c:
    print("| claim (max 1) with a backlog of %s pending | p50 %.3f ms, p99 %.3f ms |" % (
        r["workload"][6:], r["claim_p50_ms"], r["claim_p99_ms"]))
if len(c) == 2:
    print("| p99 ratio, large backlog / 10k | %.2fx |" % (c[1]["claim_p99_ms"] / c[0]["claim_p99_ms"]))
PY
