# bench/lib.sh - sourced by the bench scripts: start build/micd on
# 127.0.0.1 with an ephemeral port and a temporary store, stop it by PID on
# exit.  After start_micd: $dir (temporary directory), $pid, $url.
# Extra flags for micd: start_micd FLAG...
start_micd() {
    dir=$(mktemp -d /tmp/mic-bench-XXXXXX)
    ./build/micd --listen 127.0.0.1:0 --data "$dir/store" --port-file "$dir/port" "$@" \
        2> "$dir/micd.log" &
    pid=$!
    trap stop_micd EXIT
    await_port "$dir/port" "$pid" "$dir/micd.log"
    url=http://127.0.0.1:$(cat "$dir/port")
}

# await_port FILE PID LOG: wait (up to 10 s) until micd PID has written its
# port to FILE; exit 1 showing LOG if it does not or if it exits.
await_port() {
    _i=0
    while [ ! -s "$1" ]; do
        _i=$((_i + 1))
        [ $_i -gt 200 ] && { echo "micd did not start" >&2; cat "$3" >&2; exit 1; }
        kill -0 "$2" 2>/dev/null || { echo "micd exited" >&2; cat "$3" >&2; exit 1; }
        sleep 0.05
    done
}

stop_micd() {
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rm -rf "$dir"
}

# rotated N WORD...: the words rotated left by N modulo their number (the
# drivers' order in run N, so that no driver always comes first).
rotated() {
    _r=$(($1 % ($# - 1)))
    shift
    while [ "$_r" -gt 0 ]; do
        _w=$1
        shift
        set -- "$@" "$_w"
        _r=$((_r - 1))
    done
    echo "$@"
}
