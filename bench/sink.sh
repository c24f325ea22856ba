#!/bin/sh
# bench/sink.sh - micd's NATS sink (make bench-sink; issue 17): events/s
# from a publish to micd to the message in a JetStream stream, through a
# sink group, unordered and ordered, next to JetStream alone; and the
# latency from micd's receipt of an event (its created_at stamp) to the
# moment a consumer of the stream sees it.
#
# One nats-server with JetStream (file storage, in a temporary directory)
# and one release micd (default durability: fsync; bench/lib.sh), both on
# 127.0.0.1, stopped by PID at the end.  build/sink_watch creates stream
# MICBENCH over micsink.> and, started before each load, reads the run's
# subject back until EVENTS distinct Nats-Msg-Id arrived (push consumer).
# Per run, the drivers take turns (the order rotating):
#   unordered  a sink group on a topic of its own (subject micsink.{topic}),
#              EVENTS events published by build/loadgen (8 connections,
#              batches of 100); events/s = EVENTS / time from the start of
#              the load to the last message seen in the stream
#   ordered    the same with an ordered group and 1,000 versioned
#              aggregates (1 connection, batches of 100, versions in order)
#   nats       build/peer_nats W1 against the same nats-server: 32
#              producers publishing to JetStream directly, each waiting
#              for its PubAck (NATS 2.9 acknowledges before fsync)
# Then the latency: LAT_EVENTS single-event durable publishes on one
# connection through an unordered sink group (no backlog), latency p50/p99
# as build/sink_watch measures it (its consumer's clock minus the
# mic-created-at header: micd's stamp when the publish came in).
# Checks every run: all EVENTS arrived, no duplicate Nats-Msg-Id, and for
# ordered no message before an earlier version of its aggregate.
#   SMOKE=1   2,000 events, 1 run, exits 1 on any problem
#   EVENTS=N RUNS=N LAT_EVENTS=N
# Raw lines (one JSON line per run) go to $OUT (default build/last-sink.jsonl).
set -eu
cd "$(dirname "$0")/.."
if [ "${SMOKE:-0}" = 1 ]; then
    EVENTS=${EVENTS:-2000} RUNS=${RUNS:-1} LAT_EVENTS=${LAT_EVENTS:-200}
else
    EVENTS=${EVENTS:-50000} RUNS=${RUNS:-3} LAT_EVENTS=${LAT_EVENTS:-2000}
fi
OUT=${OUT:-build/last-sink.jsonl}
mkdir -p "$(dirname "$OUT")"
: > "$OUT"
. bench/lib.sh

natsdir=$(mktemp -d /tmp/mic-sinkbench-nats-XXXXXX)
npid=""
cleanup() {
    [ -n "$npid" ] && { kill "$npid" 2>/dev/null || true; wait "$npid" 2>/dev/null || true; }
    rm -rf "$natsdir"
    stop_micd
}
nport=$(python3 -c 'import sys; sys.path.insert(0, "bench"); from peers import free_port; print(free_port())')
nats-server -a 127.0.0.1 -p "$nport" -js -sd "$natsdir" > "$natsdir/log" 2>&1 &
npid=$!
nurl=nats://127.0.0.1:$nport
start_micd
trap cleanup EXIT
i=0
until ./build/sink_watch --url "$nurl" --stream MICBENCH --create 'micsink.>' 2> /dev/null; do
    i=$((i + 1))
    [ $i -gt 100 ] && { echo "nats-server did not start" >&2; cat "$natsdir/log" >&2; exit 1; }
    sleep 0.1
done

put() { # PATH BODY
    curl -sf -XPUT "$url$1" -H 'Content-Type: application/json' -d "$2" > /dev/null
}
field() { # JSON KEY
    python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"
}

fail=0
n=0
drive() { # DRIVER RUN
    n=$((n + 1))
    case $1 in
    nats)
        r=$(./build/peer_nats --addr "127.0.0.1:$nport" --workload W1 --events "$EVENTS" --max-seconds 600 | tail -1)
        eps=$(field "$r" events_per_s)
        echo "{\"driver\":\"nats\",\"run\":$2,\"events_per_s\":$eps}" >> "$OUT"
        printf '%s run %s: %s events/s\n' "$1" "$2" "$eps"
        return ;;
    esac
    topic=t$n
    if [ "$1" = ordered ]; then ord=true; else ord=false; fi
    put "/v1/groups/g$n" "{\"topics\":[\"$topic\"],\"ordered\":$ord,\"sink\":{\"type\":\"nats\",\"url\":\"$nurl\",\"stream\":\"MICBENCH\",\"subject\":\"micsink.{topic}\"}}"
    ./build/sink_watch --url "$nurl" --stream MICBENCH --subject "micsink.$topic" --count "$EVENTS" \
        --max-seconds 600 > "$dir/watch" &
    w=$!
    if [ "$1" = ordered ]; then
        ./build/loadgen --url "$url" --conns 1 --events "$EVENTS" --batch 100 --topic "$topic" \
            --aggregates 1000 --versions --agg-offset $((n * 10000)) --max-seconds 600 > /dev/null
    else
        ./build/loadgen --url "$url" --conns 8 --events "$EVENTS" --batch 100 --topic "$topic" \
            --max-seconds 600 > /dev/null
    fi
    wait "$w" || fail=1
    r=$(cat "$dir/watch")
    secs=$(field "$r" seconds)
    dist=$(field "$r" distinct)
    msgs=$(field "$r" messages)
    bad=$(field "$r" order_violations)
    eps=$(python3 -c "print(round($dist / $secs))")
    [ "$dist" = "$EVENTS" ] && [ "$msgs" = "$EVENTS" ] && [ "$bad" = 0 ] || fail=1
    echo "{\"driver\":\"$1\",\"run\":$2,\"events\":$EVENTS,\"events_per_s\":$eps,\"watch\":$r}" >> "$OUT"
    printf '%s run %s: %s events/s (%s messages, %s distinct, %s order violations)\n' "$1" "$2" "$eps" "$msgs" "$dist" "$bad"
}

run=1
while [ $run -le "$RUNS" ]; do
    for d in $(rotated "$run" unordered ordered nats); do
        drive "$d" "$run"
    done
    run=$((run + 1))
done

# The latency: one connection, one event per publish, no backlog.
n=$((n + 1))
topic=lat$n
put "/v1/groups/g$n" "{\"topics\":[\"$topic\"],\"sink\":{\"type\":\"nats\",\"url\":\"$nurl\",\"stream\":\"MICBENCH\",\"subject\":\"micsink.{topic}\"}}"
./build/sink_watch --url "$nurl" --stream MICBENCH --subject "micsink.$topic" --count "$LAT_EVENTS" \
    --max-seconds 600 > "$dir/watch" &
w=$!
./build/loadgen --url "$url" --conns 1 --events "$LAT_EVENTS" --batch 1 --topic "$topic" --max-seconds 600 > /dev/null
wait "$w" || fail=1
r=$(cat "$dir/watch")
echo "{\"driver\":\"latency\",\"events\":$LAT_EVENTS,\"watch\":$r}" >> "$OUT"
printf 'latency: p50 %s ms, p99 %s ms over %s events\n' "$(field "$r" latency_p50_ms)" "$(field "$r" latency_p99_ms)" "$LAT_EVENTS"

python3 - "$OUT" "$EVENTS" "$RUNS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(d):
    v = [r["events_per_s"] for r in rows if r["driver"] == d]
    return statistics.median(v), min(v), max(v)
nats = med("nats")
print()
print("| path (%s events, %s runs, median (min-max)) | events/s | / JetStream alone |" % (sys.argv[2], sys.argv[3]))
print("|---|---|---|")
for d, what in (("unordered", "micd sink group, unordered (8 connections, batches of 100)"),
                ("ordered", "micd sink group, ordered (1,000 aggregates, versions in order)"),
                ("nats", "JetStream alone (peer_nats W1: 32 producers, a PubAck each)")):
    m = med(d)
    print("| %s | %s (%s-%s) | %.2fx |" % (what, format(round(m[0]), ","), format(round(m[1]), ","), format(round(m[2]), ","), m[0] / nats[0]))
lat = [r for r in rows if r["driver"] == "latency"][0]["watch"]
print()
print("Latency, micd's receipt to a consumer of the stream (%d single-event publishes on one connection): p50 %.2f ms, p99 %.2f ms." % (lat["distinct"], lat["latency_p50_ms"], lat["latency_p99_ms"]))
PY
exit $fail
