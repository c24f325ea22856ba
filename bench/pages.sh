#!/bin/sh
# bench/pages.sh - what a commit writes (data.mdb pages, OS cache) and syncs (the
# journal: one write and one fdatasync a flush) for W3 and W4
# (make bench-pages), measured with strace on the writer (strace slows
# micd down, so its throughput here means nothing; the page counts do).
#   W3  100k events, 8 workers claiming up to 32 and acking
#   W4  2000 aggregates x 25 versions in an ordered group, same workers
# One micd (--durability fsync) on 127.0.0.1, ephemeral port, temporary
# store; stopped by PID at the end.  Prints one JSON line per workload.
# build/workers runs its raw driver (--driver raw: one ack per claim batch,
# as the figures in bench/RESULTS.md were taken).
set -eu
cd "$(dirname "$0")/.."
. bench/lib.sh
start_micd --map-max 64G
trace() { # workload group expect extra-worker-flags...
    w=$1 g=$2 n=$3
    shift 3
    strace -f -y -e trace=pwrite64,pwritev,writev,fdatasync -p "$pid" -o "$dir/$w.strace" 2> /dev/null &
    spid=$!
    i=0
    while [ ! -s "$dir/$w.strace" ] && [ $i -lt 100 ]; do i=$((i + 1)); sleep 0.05; done
    ./build/workers --driver raw --url "$url" --group "$g" --workers 8 --max 32 --expect "$n" \
        --max-seconds 600 "$@" > /dev/null
    kill "$spid"
    wait "$spid" 2> /dev/null || true
    printf '{"workload":"%s",' "$w"
    bench/pages.py "$dir/$w.strace" | cut -c2-
}
curl -sf -XPUT "$url/v1/groups/p3" -H 'Content-Type: application/json' -d '{"topics":["p3"]}' > /dev/null
./build/loadgen --url "$url" --conns 8 --events 100000 --batch 1000 --topic p3 > /dev/null 2>&1
trace W3 p3 100000
curl -sf -XPUT "$url/v1/groups/p4" -H 'Content-Type: application/json' \
    -d '{"topics":["p4"],"ordered":true}' > /dev/null
./build/loadgen --url "$url" --conns 1 --events 50000 --batch 1000 --topic p4 \
    --aggregates 2000 --versions --agg-offset 100000 > /dev/null 2>&1
trace W4 p4 50000 --verify-order 1
