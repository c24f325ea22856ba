#!/bin/sh
# bench/replaysel.sh - publish and claim latency while replay selections
# run (make bench-replay-select).
#
# Starts build/micd (defaults: --durability fsync, 2 HTTP threads,
# --replay-select-share 25; SHARE=N passes --replay-select-share N) on
# 127.0.0.1 with a temporary store, publishes SEL events to topic "sel"
# (batches of 1000) and CLAIMS events to topic "live" (read by group
# "work"), records run "fixed" over an empty range of "sel", then, RUNS
# times each and in alternation:
#   quiet   LOAD single-event publishes on 8 connections (topic "pub") and,
#           at the same time, one worker claiming one delivery of "work"
#           and acking it, ROUNDS times (build/workers --driver raw):
#           publish p99 and claim p99;
#   select  the same while one client (one keep-alive connection) POSTs
#           /v1/replays {"run_id":"fixed"}, selecting the whole of "sel",
#           again and again until both end.  Each POST makes the SEL
#           events' selection (count and digest) and is then answered 409
#           replay_exists by the writer, so what runs beside the load is
#           the selection alone, not a run's deliveries being added.
#           Every request of the load runs during a selection;
#   single  the same, but each selection followed by GAP seconds without
#           one (a user selects now and then, not continuously): publish
#           p99 and claim p99 of the requests that began while a selection
#           ran (loadgen and workers --lat-log: start and latency of each;
#           the requests between two selections are left out, so the
#           figure is not diluted by the idle time);
#   busy    the same beside a shell busy loop at SCHED_IDLE (chrt -i 0),
#           no selection: a control, what any CPU-bound work beside the
#           load costs it on this machine.
# Then one real run over the whole of "sel" checks that it selected SEL
# events.  The p99 figures are the medians over the runs; "x" is select
# (or single) over quiet (the goal: 1.5 at most).
# Environment: SEL (default 2000000), CLAIMS (default: enough for every
# phase's claims), LOAD (default 40000), ROUNDS (default 3000), RUNS (3),
# GAP (seconds between two single selections, default 1), SHARE (micd's
# --replay-select-share, default micd's own), SMOKE=1 (SEL 20000, LOAD
# 2000, ROUNDS 300, RUNS 1, GAP 0.1).  Output: a Markdown table on stdout; raw lines in $OUT (default
# bench/last-replaysel.jsonl).
set -eu
cd "$(dirname "$0")/.."
. bench/lib.sh
if [ "${SMOKE:-0}" = 1 ]; then
    SEL=${SEL:-20000}; LOAD=${LOAD:-2000}; ROUNDS=${ROUNDS:-300}; RUNS=${RUNS:-1}; GAP=${GAP:-0.1}
fi
SEL=${SEL:-2000000}
LOAD=${LOAD:-40000}
ROUNDS=${ROUNDS:-3000}
RUNS=${RUNS:-3}
GAP=${GAP:-1}
CLAIMS=${CLAIMS:-$((4 * RUNS * ROUNDS + 1000))}
OUT=${OUT:-bench/last-replaysel.jsonl}
: > "$OUT"

start_micd --map-max 256G ${SHARE:+--replay-select-share "$SHARE"}
bpid=""
stop_all() {
    [ -n "$bpid" ] && { kill "$bpid" 2>/dev/null || true; wait "$bpid" 2>/dev/null || true; }
    stop_micd
}
trap stop_all EXIT
post() { # path body: prints the status, the body in $dir/post.out
    curl -s -o "$dir/post.out" -w '%{http_code}' -XPOST "$url$1" \
        -H 'Content-Type: application/json' -d "$2"
}
curl -sf -XPUT "$url/v1/groups/work" -H 'Content-Type: application/json' \
    -d '{"topics":["live"]}' > /dev/null
t0=$(date +%s.%N)
./build/loadgen --url "$url" --conns 4 --events "$SEL" --batch 1000 --topic sel \
    --max-seconds 900 > "$dir/fill.json" 2>> "$dir/loadgen.log"
t1=$(date +%s.%N)
./build/loadgen --url "$url" --conns 4 --events "$CLAIMS" --batch 100 --topic live \
    --max-seconds 300 > /dev/null 2>> "$dir/loadgen.log"
[ "$(post /v1/replays '{"topic":"sel","run_id":"fixed","to":"1970-01-02T00:00:00Z"}')" = 201 ] ||
    { cat "$dir/post.out" >&2; exit 1; }
printf '{"case":"fill","events":%s,"seconds":%s}\n' "$SEL" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')" >> "$OUT"

# load: the publishes and the claims at once, results in $dir/pub.json and
# $dir/claim.json, each request's start and latency in $dir/pub.lat and
# $dir/claim.lat; their PIDs in $lpid and $wpid.
load() {
    ./build/loadgen --url "$url" --conns 8 --events "$LOAD" --batch 1 --topic pub \
        --max-seconds 300 --lat-log "$dir/pub.lat" > "$dir/pub.json" 2>> "$dir/loadgen.log" &
    lpid=$!
    ./build/workers --driver raw --url "$url" --group work --workers 1 --max 1 \
        --rounds "$ROUNDS" --max-seconds 300 --lat-log "$dir/claim.lat" > "$dir/claim.json" &
    wpid=$!
}

# select_until GAP PID...: POST the selection of "fixed" again and again on
# one keep-alive connection (one process: no fork per selection) while any
# PID runs, GAP seconds without one before each (0: back to back); prints
# each one's start and end (CLOCK_MONOTONIC ns), a line each.  Each must be
# a 409.
select_until() {
    python3 - "$url" "$@" <<'PY'
import http.client, os, sys, time, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
gap = float(sys.argv[2])
pids = [int(p) for p in sys.argv[3:]]
def alive(p):
    try:
        os.kill(p, 0)
        return True
    except ProcessLookupError:
        return False
c = http.client.HTTPConnection(u.hostname, u.port)
body = b'{"topic":"sel","run_id":"fixed"}'
while any(alive(p) for p in pids):
    if gap:
        time.sleep(gap)
        if not any(alive(p) for p in pids):
            break
    t0 = time.monotonic_ns()
    c.request("POST", "/v1/replays", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    text = r.read()
    if r.status != 409:
        sys.exit("selection answered %d: %s" % (r.status, text.decode()))
    print(t0, time.monotonic_ns())
PY
}

# during LATLOG WINDOWS: {"p99_ms","n"} of the requests of LATLOG
# ("START_NS LATENCY_US" lines) that began inside one of the WINDOWS
# ("START_NS END_NS" lines), p99 nearest-rank as loadgen's.
during() {
    python3 - "$1" "$2" <<'PY'
import bisect, json, math, sys
win = sorted(tuple(map(int, l.split())) for l in open(sys.argv[2]) if l.strip())
starts = [w[0] for w in win]
lat = []
for l in open(sys.argv[1]):
    at, us = map(int, l.split())
    i = bisect.bisect_right(starts, at) - 1
    if i >= 0 and at <= win[i][1]:
        lat.append(us)
lat.sort()
p99 = lat[max(1, math.ceil(0.99 * len(lat))) - 1] / 1000 if lat else None
print(json.dumps({"p99_ms": p99, "n": len(lat)}))
PY
}

la() { cut -d' ' -f1 /proc/loadavg; } # the machine's load (other processes run on it too)
for r in $(seq 1 "$RUNS"); do
    load
    wait "$lpid" "$wpid"
    printf '{"run":%s,"load":'"$(la)"',"case":"quiet","publish":%s,"claim":%s}\n' "$r" \
        "$(cat "$dir/pub.json")" "$(cat "$dir/claim.json")" >> "$OUT"
    load
    select_until 0 "$lpid" "$wpid" > "$dir/sel.txt"
    wait "$lpid" "$wpid"
    printf '{"run":%s,"load":'"$(la)"',"case":"select","publish":%s,"claim":%s,"selections":[%s]}\n' "$r" \
        "$(cat "$dir/pub.json")" "$(cat "$dir/claim.json")" \
        "$(awk '{ printf "%s%.4f", (NR > 1 ? "," : ""), ($2 - $1) / 1000000000 }' "$dir/sel.txt")" >> "$OUT"
    load
    select_until "$GAP" "$lpid" "$wpid" > "$dir/sel.txt"
    wait "$lpid" "$wpid"
    printf '{"run":%s,"load":'"$(la)"',"case":"single","publish":%s,"claim":%s,"selections":[%s],"publish_during":%s,"claim_during":%s}\n' "$r" \
        "$(cat "$dir/pub.json")" "$(cat "$dir/claim.json")" \
        "$(awk '{ printf "%s%.4f", (NR > 1 ? "," : ""), ($2 - $1) / 1000000000 }' "$dir/sel.txt")" \
        "$(during "$dir/pub.lat" "$dir/sel.txt")" "$(during "$dir/claim.lat" "$dir/sel.txt")" >> "$OUT"
    load
    chrt -i 0 sh -c 'while :; do :; done' &
    bpid=$!
    wait "$lpid" "$wpid"
    kill "$bpid"
    wait "$bpid" 2>/dev/null || true
    bpid=""
    printf '{"run":%s,"load":'"$(la)"',"case":"busy","publish":%s,"claim":%s}\n' "$r" \
        "$(cat "$dir/pub.json")" "$(cat "$dir/claim.json")" >> "$OUT"
done

# One real run over the whole topic: it selected every event.
[ "$(post /v1/replays '{"topic":"sel","run_id":"check"}')" = 201 ] || { cat "$dir/post.out" >&2; exit 1; }
n=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["selected"])' "$dir/post.out")
[ "$n" = "$SEL" ] || { echo "the run selected $n events, not $SEL" >&2; exit 1; }
curl -sf -XDELETE "$url/v1/replays/check" > /dev/null

python3 - "$OUT" "$SEL" "$GAP" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
sel = int(sys.argv[2])
gap = float(sys.argv[3])
def med(xs):
    xs = sorted(xs)
    return statistics.median(xs), xs[0], xs[-1]
def fmt(v, unit=" ms", nd=2):
    m, lo, hi = v
    return f"{m:,.{nd}f}{unit} ({lo:,.{nd}f}-{hi:,.{nd}f})"
quiet = [r for r in rows if r.get("case") == "quiet"]
under = [r for r in rows if r.get("case") == "select"]
busy = [r for r in rows if r.get("case") == "busy"]
single = [r for r in rows if r.get("case") == "single"]
secs = [s for r in under for s in r["selections"]]
ssecs = [s for r in single for s in r["selections"]]
pq = med([r["publish"]["p99_ms"] for r in quiet]); ps = med([r["publish"]["p99_ms"] for r in under])
cq = med([r["claim"]["claim_p99_ms"] for r in quiet]); cs = med([r["claim"]["claim_p99_ms"] for r in under])
print("| what | median (min-max) |")
print("|---|---|")
print(f"| a selection of {sel:,} events (POST /v1/replays, to its 409), back to back | {fmt(med([x * 1000 for x in secs]), ' ms', 0)}, {len(secs)} selections |")
if ssecs:
    print(f"| a selection of {sel:,} events, one every {gap:g} s | {fmt(med([x * 1000 for x in ssecs]), ' ms', 0)}, {len(ssecs)} selections |")
print(f"| publish p99, 8 connections, single events, no selection | {fmt(pq)} |")
print(f"| publish p99 while selections run back to back | {fmt(ps)}: {ps[0] / pq[0]:.2f}x |")
print(f"| publish max, no selection / with | {fmt(med([r['publish']['max_ms'] for r in quiet]))} / {fmt(med([r['publish']['max_ms'] for r in under]))} |")
print(f"| claim p99 (claim 1, then ack), no selection | {fmt(cq)} |")
print(f"| claim p99 while selections run back to back | {fmt(cs)}: {cs[0] / cq[0]:.2f}x |")
sp = [r["publish_during"]["p99_ms"] for r in single if r["publish_during"]["p99_ms"] is not None]
sc = [r["claim_during"]["p99_ms"] for r in single if r["claim_during"]["p99_ms"] is not None]
if sp and sc:
    sp = med(sp); sc = med(sc)
    n_p = sum(r["publish_during"]["n"] for r in single); n_c = sum(r["claim_during"]["n"] for r in single)
    print(f"| publish p99 of the requests begun during a selection, one every {gap:g} s | {fmt(sp)}: {sp[0] / pq[0]:.2f}x ({n_p:,} requests) |")
    print(f"| claim p99 of the claims begun during a selection, one every {gap:g} s | {fmt(sc)}: {sc[0] / cq[0]:.2f}x ({n_c:,} claims) |")
pb = med([r["publish"]["p99_ms"] for r in busy]); cb = med([r["claim"]["claim_p99_ms"] for r in busy])
print(f"| control: publish p99 beside a busy loop at SCHED_IDLE | {fmt(pb)}: {pb[0] / pq[0]:.2f}x |")
print(f"| control: claim p99 beside a busy loop at SCHED_IDLE | {fmt(cb)}: {cb[0] / cq[0]:.2f}x |")
print(f"| the machine's 1-minute load average at the phases' ends | {fmt(med([r['load'] for r in rows if 'load' in r]), '', 2)} |")
EOF
