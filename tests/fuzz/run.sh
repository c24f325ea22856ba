#!/bin/sh
# tests/fuzz/run.sh SECONDS TARGET... - run each libFuzzer target
# (build/fuzz/fuzz_TARGET) for SECONDS, one after the other, and print one
# line per target: execs, execs/s, corpus size (and what this run added),
# crashes.  Seeds are read from tests/fuzz/corpus/TARGET (never written);
# what the fuzzer finds goes to build/fuzz/corpus/TARGET, crashing inputs
# to build/fuzz/artifacts/TARGET/, the log to build/fuzz/TARGET.log.  A
# crash, a leak, a timeout or any sanitizer report fails the run (exit 1).
# FUZZ_JOBS=N runs N targets at a time (default 1: the machine is shared).
set -u
secs=$1
shift
cd "$(dirname "$0")/../.." || exit 2
status=0

run_one() {
    t=$1
    bin=build/fuzz/fuzz_$t
    out=build/fuzz/corpus/$t
    art=build/fuzz/artifacts/$t
    log=build/fuzz/$t.log
    mkdir -p "$out" "$art"
    before=$(ls "$out" | wc -l)
    bad_before=$(ls "$art" | grep -c '^\(crash\|leak\|timeout\|oom\)-')
    dict=
    [ -f "tests/fuzz/$t.dict" ] && dict="-dict=tests/fuzz/$t.dict"
    # -timeout: one input may take this long (seconds) before it counts as
    # a hang; generous, as the machine may be loaded.  -rss_limit_mb: a
    # parser's memory for one input.
    "$bin" "$out" "tests/fuzz/corpus/$t" $dict -max_total_time="$secs" -timeout=30 \
        -rss_limit_mb=2048 -max_len=16384 -print_final_stats=1 -artifact_prefix="$art/" \
        > "$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    after=$(ls "$out" | wc -l)
    crashes=$(( $(ls "$art" | grep -c '^\(crash\|leak\|timeout\|oom\)-') - bad_before ))
    reports=$(grep -c 'ERROR: \(AddressSanitizer\|LeakSanitizer\|libFuzzer\)\|runtime error:\|broken promise' "$log")
    [ "$crashes" -eq 0 ] && [ "$reports" -ne 0 ] && crashes=1
    printf 'fuzz %-8s %10s execs %7s execs/s  corpus %5s (+%s)  crashes %s\n' \
        "$t" "${execs:-?}" "${rate:-?}" "$after" "$((after - before))" "$((crashes + reports))"
    if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ] || [ "$reports" -ne 0 ] || [ -z "$execs" ]; then
        echo "fuzz $t: FAILED (exit $rc); the end of $log:"
        tail -n 40 "$log"
        return 1
    fi
    return 0
}

jobs=${FUZZ_JOBS:-1}
if [ "$jobs" -le 1 ]; then
    for t in "$@"; do
        run_one "$t" || status=1
    done
else
    # N at a time, in the background, each printing its own line
    set -- "$@"
    while [ $# -gt 0 ]; do
        pids=
        i=0
        while [ $i -lt "$jobs" ] && [ $# -gt 0 ]; do
            run_one "$1" > "build/fuzz/$1.line" 2>&1 &
            pids="$pids $!:$1"
            shift
            i=$((i + 1))
        done
        for p in $pids; do
            wait "${p%%:*}" || status=1
            cat "build/fuzz/${p#*:}.line"
        done
    done
fi
[ $status = 0 ] && echo "fuzz: every target ran ${secs}s: 0 crashes, 0 leaks, 0 sanitizer reports"
exit $status
