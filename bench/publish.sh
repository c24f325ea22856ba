#!/bin/sh
# bench/publish.sh - durable publish throughput of micd (make bench).
#
# Starts build/micd (--durability fsync, the default) on 127.0.0.1 with an
# ephemeral port and a temporary store, runs build/loadgen three times per
# workload and prints the median (with min-max), then stops micd by PID.
# In the same run, the reference peer: redis-server with a stream
# (appendonly yes, appendfsync always: durable per write) driven by
# redis-benchmark's XADD with the same ~300-byte event, so the figures are
# ratios measured side by side on the same machine.
#   W1  single-event publishes, 64 connections (Redis: 64 clients)
#   W2  batches of 100 events, 16 connections (Redis: pipelines of 100)
# Environment: EVENTS1 (default 150000), EVENTS2 (default 400000), RUNS (3).
# Output: a Markdown table on stdout; raw loadgen lines in $OUT (default
# bench/last-publish.jsonl).
set -eu
cd "$(dirname "$0")/.."
EVENTS1=${EVENTS1:-150000}
EVENTS2=${EVENTS2:-400000}
RUNS=${RUNS:-3}
OUT=${OUT:-bench/last-publish.jsonl}
dir=$(mktemp -d /tmp/mic-bench-XXXXXX)
: > "$OUT"

./build/micd --listen 127.0.0.1:0 --data "$dir/store" --port-file "$dir/port" 2> "$dir/micd.log" &
pid=$!
rpid=""
cleanup() {
    for p in $pid $rpid; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    rm -rf "$dir"
}
trap cleanup EXIT
i=0
while [ ! -s "$dir/port" ]; do
    i=$((i + 1))
    [ $i -gt 200 ] && { echo "micd did not start" >&2; cat "$dir/micd.log" >&2; exit 1; }
    kill -0 $pid 2>/dev/null || { echo "micd exited" >&2; cat "$dir/micd.log" >&2; exit 1; }
    sleep 0.05
done
url=http://127.0.0.1:$(cat "$dir/port")

run() { # name conns events batch
    n=0
    while [ $n -lt "$RUNS" ]; do
        ./build/loadgen --url "$url" --conns "$2" --events "$3" --batch "$4" --max-seconds 120 \
            2>/dev/null | sed "s/^{/{\"workload\":\"$1\",/" >> "$OUT"
        n=$((n + 1))
    done
}
run W1 64 "$EVENTS1" 1
run W2 16 "$EVENTS2" 100

kill $pid; wait $pid || true

# The peer: Redis Streams, durable per write.
if command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null; then
    rport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    mkdir -p "$dir/redis"
    redis-server --port "$rport" --bind 127.0.0.1 --dir "$dir/redis" --appendonly yes \
        --appendfsync always --save '' --daemonize no > "$dir/redis.log" 2>&1 &
    rpid=$!
    i=0
    until redis-cli -p "$rport" ping >/dev/null 2>&1; do
        i=$((i + 1)); [ $i -gt 200 ] && { echo "redis did not start" >&2; exit 1; }; sleep 0.05
    done
    payload=$(python3 -c 'print("{\"event_id\":\"lg-0\",\"topic\":\"bench\",\"event_type\":\"bench.created\",\"payload\":{\"pad\":\"" + "x" * 210 + "\"}}")')
    rbench() { # workload clients events pipeline
        n=0
        while [ $n -lt "$RUNS" ]; do
            redis-benchmark -p "$rport" -c "$2" -n "$3" -P "$4" --csv XADD bench '*' event "$payload" |
                tail -n 1 | python3 -c "import sys,json; r=[x.strip().strip(chr(34)) for x in sys.stdin.read().strip().rsplit(',', 7)]; print(json.dumps({'workload':'$1','peer':'redis','events_per_s':float(r[1]),'p50_ms':float(r[4]),'p99_ms':float(r[6])}))" >> "$OUT"
            n=$((n + 1))
        done
    }
    rbench W1 64 "$EVENTS1" 1
    rbench W2 16 "$EVENTS2" 100
    redis_version=$(redis-server --version | sed 's/.*v=\([0-9.]*\).*/\1/')
    kill $rpid; wait $rpid 2>/dev/null || true
else
    redis_version=""
    echo "redis-server not installed: no peer figures (make bench installs it)" >&2
fi

python3 - "$OUT" "$redis_version" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def med(ws):
    ev = sorted(r["events_per_s"] for r in ws)
    return statistics.median(ev), ev[0], ev[-1], sorted(ws, key=lambda r: r["events_per_s"])[len(ws) // 2]
print("| workload | MIC ev/s median (min-max) | p50 / p99 ms | events per commit | Redis Streams ev/s median (min-max) | p50 / p99 ms | MIC / Redis |")
print("|---|---|---|---|---|---|---|")
for w, label in (("W1", "single event, 64 conns"), ("W2", "batch of 100, 16 conns")):
    m = [r for r in rows if r["workload"] == w and "peer" not in r]
    p = [r for r in rows if r["workload"] == w and r.get("peer") == "redis"]
    if not m:
        continue
    mm, mlo, mhi, mr = med(m)
    cells = ["%s %s" % (w, label), "%.0f (%.0f-%.0f)" % (mm, mlo, mhi),
             "%.2f / %.2f" % (mr["p50_ms"], mr["p99_ms"]), "%.1f" % (mr["events_per_commit"] or 0)]
    if p:
        pm, plo, phi, pr = med(p)
        cells += ["%.0f (%.0f-%.0f)" % (pm, plo, phi), "%.2f / %.2f" % (pr["p50_ms"], pr["p99_ms"]),
                  "%.2fx" % (mm / pm)]
    else:
        cells += ["-", "-", "-"]
    print("| " + " | ".join(cells) + " |")
errors = sum(r.get("errors", 0) for r in rows)
print()
print("MIC: --durability fsync (fsync before every reply), %d errors. Redis %s: appendonly yes, appendfsync always." % (errors, sys.argv[2] or "(not run)"))
PY
