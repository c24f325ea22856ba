#!/bin/sh
# bench/range.sh - time-range reads (make bench-range).
#
# One micd on 127.0.0.1 (ephemeral port, temporary store, stopped by PID):
# 1M events published to one topic (batches of 1000), then the middle 10%
# of their created_at span read back as an NDJSON stream
# (Accept: application/x-ndjson) by build/rangeread (libmic, timed in the
# process, order checked), 3 times: events/s, median with min-max.  EVENTS
# changes the size.
set -eu
cd "$(dirname "$0")/.."
EVENTS=${EVENTS:-1000000}
RUNS=${RUNS:-3}
. bench/lib.sh
start_micd --map-max 256G
t0=$(date -u +%s%6N)
./build/loadgen --url "$url" --conns 4 --events "$EVENTS" --batch 1000 --topic range \
    --max-seconds 900 > /dev/null 2>&1
t1=$(date -u +%s%6N)
python3 - "$url" "$t0" "$t1" "$RUNS" "$EVENTS" <<'PY'
import datetime, json, statistics, subprocess, sys
url, t0, t1, runs, total = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
def iso(us):
    return datetime.datetime.fromtimestamp(us / 1e6, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
lo, hi = t0 + (t1 - t0) * 45 // 100, t0 + (t1 - t0) * 55 // 100
rates, n = [], 0
for _ in range(runs):
    out = subprocess.run(["./build/rangeread", "--url", url, "--topic", "range", "--from", iso(lo),
                          "--to", iso(hi)], stdout=subprocess.PIPE, check=True).stdout
    r = json.loads(out)
    n = r["events"]
    rates.append(r["events_per_s"])
rates.sort()
print("| workload | MIC |")
print("|---|---|")
print("| W5 read the middle 10%% of %d stored events as an NDJSON stream (%d events) | %.0f ev/s median (%.0f-%.0f) |" % (total,
    n, statistics.median(rates), rates[0], rates[-1]))
PY
