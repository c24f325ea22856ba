#!/bin/sh
# bench/ordered.sh - ordered groups (make bench-ordered).
#
# One micd (--durability fsync) on 127.0.0.1, ephemeral port, temporary
# store; stopped by PID at the end.
#   W4  2000 aggregates x 25 versioned events, an ordered group, 8 workers
#       claiming up to 32 and acking; the workers check that every
#       aggregate's versions arrive one after the other (3 runs, median).
#   Claim cost and blocked aggregates, in one run: claim p50/p99 (max 1,
#       claim then ack, 2000 rounds) in an ordered group holding 100k
#       aggregates whose heads are leased (their successors blocked) plus
#       100k ready ones, against an ordered group with 100k ready aggregates
#       and none blocked, and against an ordered backlog of 1M events
#       (100k aggregates x 10 versions).
# build/workers runs its raw driver (--driver raw), as in bench/claims.sh:
# the figures are micd's, not libmic's.
set -eu
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
OUT=${OUT:-bench/last-ordered.jsonl}
N_AGG=${N_AGG:-100000}
: > "$OUT"
. bench/lib.sh
start_micd --map-max 256G
group() { # name topics-json
    curl -sf -XPUT "$url/v1/groups/$1" -H 'Content-Type: application/json' \
        -d "{\"topics\":$2,\"ordered\":true}" > /dev/null
}
fill() { # topic events aggregates offset
    ./build/loadgen --url "$url" --conns 1 --events "$2" --batch 1000 --topic "$1" \
        --aggregates "$3" --agg-offset "$4" --versions --max-seconds 900 > /dev/null 2>&1
}

n=0
while [ $n -lt "$RUNS" ]; do
    group "w4-$n" "[\"w4-$n\"]"
    fill "w4-$n" 50000 2000 $((n * 2000))
    ./build/workers --driver raw --url "$url" --group "w4-$n" --workers 8 --max 32 --expect 50000 \
        --verify-order 1 --max-seconds 300 | sed 's/^{/{"workload":"W4",/' >> "$OUT"
    n=$((n + 1))
done

# 100k aggregates with 2 versions whose heads get leased, 100k ready ones.
group blocked '["ob","or"]'
fill ob $((2 * N_AGG)) "$N_AGG" 1000000
fill or "$N_AGG" "$N_AGG" 2000000
k=0
while [ $k -lt $((N_AGG / 1000)) ]; do
    curl -sf -XPOST "$url/v1/groups/blocked/claim" -H 'Content-Type: application/json' \
        -d '{"max":1000,"lease_ttl_s":3600}' > /dev/null
    k=$((k + 1))
done
group clear '["oc"]'
fill oc "$N_AGG" "$N_AGG" 3000000
group deep '["od"]'
fill od $((10 * N_AGG)) "$N_AGG" 4000000

for g in clear blocked deep; do
    ./build/workers --driver raw --url "$url" --group "$g" --workers 1 --max 1 --rounds 2000 \
        | sed "s/^{/{\"workload\":\"claim-$g\",/" >> "$OUT"
done
blocked=$(curl -sf "$url/v1/groups/blocked/blocked?reason=lease&limit=1000" | python3 -c \
    'import json,sys; print(len(json.load(sys.stdin)["aggregates"]))')

python3 - "$OUT" "$blocked" "$N_AGG" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
w4 = [r for r in rows if r["workload"] == "W4"]
ev = sorted(r["events_per_s"] for r in w4)
n = int(sys.argv[3])
print("| workload | figure |")
print("|---|---|")
print("| W4 ordered: 2000 aggregates x 25 versions, 8 workers, claim up to 32, ack | %.0f ev/s median (%.0f-%.0f); order violations %d, duplicates %d |" % (
    statistics.median(ev), ev[0], ev[-1], sum(r["order_violations"] for r in w4),
    sum(r["duplicates"] for r in w4)))
c = {r["workload"]: r for r in rows if r["workload"].startswith("claim-")}
label = {"claim-clear": "%dk ready aggregates, none blocked" % (n // 1000),
         "claim-blocked": "%dk heads leased (successors blocked) + %dk ready" % (n // 1000, n // 1000),
         "claim-deep": "ordered backlog of %dM events (%dk aggregates x 10)" % (n * 10 // 1000000, n // 1000)}
for k in ("claim-clear", "claim-blocked", "claim-deep"):
    if k in c:
        print("| claim p50 / p99 (max 1), %s | %.3f / %.3f ms |" % (label[k], c[k]["claim_p50_ms"], c[k]["claim_p99_ms"]))
if "claim-clear" in c and "claim-blocked" in c:
    print("| p99 ratio, blocked / none blocked | %.2fx |" % (c["claim-blocked"]["claim_p99_ms"] / c["claim-clear"]["claim_p99_ms"]))
print()
print("(first page of GET .../blocked?reason=lease listed %s aggregates)" % sys.argv[2])
PY
