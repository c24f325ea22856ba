#!/bin/sh
# readme-tour.sh - README.md's tour, run as pasted against a fresh micd, so
# that the README cannot rot (run by make check; exits non-zero on a failure).
#
# Which blocks: every ```sh block of README.md that follows a line
# "<!-- readme-tour -->", in the order of the README, each in its own
# `sh -e` (a failing command fails the tour), all against one micd started
# here on a fresh store and an ephemeral port, from a fresh working
# directory (so `./var-view` and the like land there).  What is changed
# from the README's text, and nothing else:
#   - localhost:8080 and 127.0.0.1:8080 become the ephemeral port;
#   - build/micd, build/mic and build/examples/ are the binaries under test
#     ($MICD, $MIC_CLI, build/examples/ of the tree), and `mic` is on PATH;
#   - `make TARGET...` only checks that the targets are built (make check
#     builds them before it runs this script);
#   - a line "# {...}" or "# NNN {...}" at the start of a line right after a
#     command (continued on lines starting "#   ") is what that command
#     prints: the tour checks the status (NNN, else 2xx) and the JSON
#     against it.  In the expected JSON, a string with "…" (or {…}, […], a
#     bare …) matches any value, "..." in an object allows more keys, a
#     time matches any time of the same form, an age (*age_s) any number;
#     every other value must be equal and the key sets the same.
# Every curl of the tour must answer a status below 400 unless the line
# after it expects the error.  Comments elsewhere (indented, inside loops,
# tables of `mic`) are the reader's and are not checked.
#
# Usage: tests/readme-tour.sh (MICD=build/san/micd MIC_CLI=build/san/mic by
# default; KEEP=1 keeps the working directory).
cd "$(dirname "$0")/.." || exit 2
repo=$(pwd -P)
MICD=${MICD:-build/san/micd}
MIC_CLI=${MIC_CLI:-build/san/mic}
for b in "$MICD" "$MIC_CLI"; do
    [ -x "$b" ] || { echo "readme-tour: $b is not built"; exit 2; }
done
command -v jq > /dev/null || { echo "readme-tour: jq is missing (make deps installs it)"; exit 2; }
command -v python3 > /dev/null || { echo "readme-tour: python3 is missing (make test-deps)"; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/readme-tour.XXXXXX") || exit 2
micd_pid=
cleanup() {
    if [ -n "$micd_pid" ]; then
        kill "$micd_pid" 2> /dev/null
        wait "$micd_pid" 2> /dev/null
    fi
    if [ "${KEEP:-0}" = 1 ]; then echo "readme-tour: kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

abs() { case "$1" in /*) echo "$1" ;; *) echo "$repo/$1" ;; esac; }
mkdir -p "$work/cwd/build" "$work/tour" "$work/bin"
ln -s "$(abs "$MICD")" "$work/cwd/build/micd"
ln -s "$(abs "$MIC_CLI")" "$work/cwd/build/mic"
ln -s "$(abs "$MIC_CLI")" "$work/bin/mic"
ln -s "$repo/build/examples" "$work/cwd/build/examples"

# micd as `make run` starts it, on an ephemeral port.
"$work/cwd/build/micd" --listen 127.0.0.1:0 --port-file "$work/port" --data "$work/cwd/var" \
    > "$work/micd.log" 2>&1 &
micd_pid=$!
i=0
while [ ! -s "$work/port" ]; do
    if ! kill -0 "$micd_pid" 2> /dev/null || [ $i -ge 400 ]; then    # 20 s at most
        echo "readme-tour: micd did not start"; cat "$work/micd.log"; exit 1
    fi
    i=$((i + 1)); sleep 0.05
done
port=$(cat "$work/port")

# What each block runs first: the curl that records statuses, the checks.
cat > "$work/prelude.sh" <<'EOF'
T=$TOUR_STATE
tour_fail() {
    echo "readme-tour: FAILED: $*" >&2
    echo "$*" >> "$T/failed"
    exit 1
}
# A status not below 400 that nothing expected fails the tour.
tour_pending() {
    if [ -f "$T/unchecked" ]; then
        s=$(cat "$T/status")
        rm -f "$T/unchecked"
        [ "$s" -lt 400 ] || tour_fail "status $s, not expected by the README: $(cat "$T/body")"
    fi
}
curl() {
    tour_pending
    s=$(command curl -sS -o "$T/body" -w '%{http_code}' "$@") ||
        tour_fail "curl $* did not complete"
    echo "$s" > "$T/status"
    touch "$T/unchecked"
    echo "$s curl $*" >> "$T/requests"
    cat "$T/body"
}
# tour_out CMD...: a command other than curl whose output the README shows.
tour_out() {
    tour_pending
    "$@" > "$T/body" || tour_fail "$* exited with status $?"
    echo 200 > "$T/status"
    touch "$T/unchecked"
    cat "$T/body"
}
# tour_expect TEXT: the README's "# [NNN] {...}" after the last command.
tour_expect() {
    [ -f "$T/status" ] || tour_fail "nothing ran before: $1"
    rm -f "$T/unchecked"
    s=$(cat "$T/status")
    want=$(printf '%s' "$1" | sed -n 's/^\([0-9][0-9][0-9]\) .*/\1/p')
    if [ -n "$want" ]; then
        [ "$s" = "$want" ] || tour_fail "status $s, the README shows $want: $(cat "$T/body")"
    else
        [ "$s" -ge 200 ] && [ "$s" -lt 300 ] || tour_fail "status $s, the README shows a 2xx: $(cat "$T/body")"
    fi
    python3 "$TOUR_MATCH" "$1" "$T/body" || tour_fail "output differs from the README's"
    echo "ok: $1" >> "$T/checked"
}
make() {
    for t in "$@"; do
        case "$t" in
        examples) for e in producer projection worker_pool; do
                      [ -x "build/examples/$e" ] || tour_fail "build/examples/$e is not built (make examples)"
                  done ;;
        *) [ -e "$t" ] || tour_fail "$t is not built (make $t)" ;;
        esac
    done
}
EOF

# The matcher of tour_expect.
cat > "$work/match.py" <<'EOF'
import json, re, sys
text, path = sys.argv[1], sys.argv[2]
text = re.sub(r'^\d{3} ', '', text.strip())
s = text.replace('{…}', '"…"').replace('[…]', '"…"')
s = re.sub(r',\s*\.\.\.(?=\s*[,}])', ',"...":"…"', s)
s = re.sub(r'(?<=[:\[,])(\s*)…(?=\s*[,\]}])', r'\1"…"', s)
try:
    want = json.JSONDecoder().raw_decode(s)[0]   # (text after the JSON: the reader's)
except ValueError as e:
    print("readme-tour: the README's expected output is not JSON once normalised: %s\n  %s" % (e, s))
    sys.exit(1)
raw = open(path).read()
try:
    got = json.loads(raw)
except ValueError:
    print("readme-tour: the output is not JSON: %r" % raw[:500])
    sys.exit(1)
TIME = re.compile(r'^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z$')
errs = []
def match(w, g, where, key):
    if isinstance(w, str) and '…' in w:
        return
    if isinstance(w, str) and TIME.match(w):
        if not (isinstance(g, str) and TIME.match(g)):
            errs.append('%s: a time like %s, got %r' % (where, w, g))
        return
    if key.endswith('age_s') and isinstance(w, (int, float)) and not isinstance(w, bool):
        if not isinstance(g, (int, float)) or isinstance(g, bool):
            errs.append('%s: a number, got %r' % (where, g))
        return
    if isinstance(w, dict):
        if not isinstance(g, dict):
            errs.append('%s: an object, got %r' % (where, g)); return
        more = '...' in w
        keys = [k for k in w if k != '...']
        missing = [k for k in keys if k not in g]
        extra = [k for k in g if k not in w]
        if missing: errs.append('%s: missing %s' % (where, ', '.join(missing)))
        if extra and not more: errs.append('%s: not in the README: %s' % (where, ', '.join(extra)))
        for k in keys:
            if k in g: match(w[k], g[k], where + '.' + k, k)
        return
    if isinstance(w, list):
        if not isinstance(g, list) or len(g) != len(w):
            errs.append('%s: a list of %d, got %r' % (where, len(w), g)); return
        for i, (a, b) in enumerate(zip(w, g)):
            match(a, b, '%s[%d]' % (where, i), key)
        return
    if w != g or type(w) != type(g):
        errs.append('%s: the README shows %r, micd printed %r' % (where, w, g))
match(want, got, '$', '')
if errs:
    print('readme-tour: the README shows\n  %s\nmicd printed\n  %s\n  %s' % (text, raw.strip()[:2000], '\n  '.join(errs)))
    sys.exit(1)
EOF

# The blocks, with their expectations turned into tour_expect calls.
awk -v port="$port" -v dir="$work/tour" '
    /^<!-- readme-tour -->/ { armed = 1; next }
    armed && /^```sh/ { inblk = 1; armed = 0; n++; f = sprintf("%s/block-%02d.sh", dir, n)
                        printf "# README.md line %d\n", NR + 1 > f; pend = ""; last = ""; next }
    inblk && /^```/ { flush(); inblk = 0; close(f); next }
    !inblk { if ($0 !~ /^[ \t]*$/) armed = armed && 0; next }
    {
        line = $0
        gsub(/localhost:8080/, "localhost:" port, line)
        gsub(/127\.0\.0\.1:8080/, "127.0.0.1:" port, line)
        if (pend != "" && line ~ /^#   /) { pend = pend " " substr(line, 5); next }
        expect()
        if (line ~ /^# ([0-9][0-9][0-9] )?[{]/ && last != "") {
            pend = substr(line, 3)
            if (last !~ /^curl / && last !~ /\\$/ && lines[nl] == last) {
                # the command was a single line other than curl: run it
                # through tour_out so that its output can be compared
                lines[nl] = "tour_out " lines[nl]
            }
            last = ""
            next
        }
        nl++; lines[nl] = line
        if (line !~ /^[ \t#]/ && line !~ /^$/) last = line
    }
    function expect() {
        if (pend != "") {
            gsub(/\047/, "\047\\\047\047", pend)
            nl++; lines[nl] = sprintf("tour_expect \047%s\047", pend)
            pend = ""
        }
    }
    function flush(   i) {
        expect()
        for (i = 1; i <= nl; i++) print lines[i] > f
        nl = 0
    }
' README.md
# (armed is cleared by any non-blank line between the marker and the block)

blocks=$(ls "$work/tour"/block-*.sh 2> /dev/null)
nblocks=$(echo "$blocks" | grep -c . )
if [ "$nblocks" -lt 6 ]; then
    echo "readme-tour: only $nblocks blocks of README.md are marked <!-- readme-tour --> (the tour has at least 6)"
    exit 1
fi

state="$work/state"
mkdir -p "$state"
status=0
for b in $blocks; do
    name=$(sed -n '1s/^# //p' "$b")
    log="$work/$(basename "$b" .sh).log"
    rm -f "$state/unchecked" "$state/failed"
    ( cd "$work/cwd" &&
      PATH="$work/bin:$PATH" MIC_URL="http://127.0.0.1:$port" TOUR_STATE="$state" \
      TOUR_MATCH="$work/match.py" \
      timeout 180 sh -e -c ". '$work/prelude.sh'; . '$b'; tour_pending" ) > "$log" 2>&1
    rc=$?
    if [ $rc -ne 0 ] || [ -f "$state/failed" ]; then
        echo "readme-tour: FAILED: the block at $name (exit $rc); the block as run:"
        sed 's/^/    /' "$b"
        echo "  its output:"
        sed 's/^/    /' "$log"
        status=1
        break
    fi
    echo "readme-tour: ok: the block at $name"
done
nreq=$(wc -l < "$state/requests" 2> /dev/null || echo 0)
nchk=$(wc -l < "$state/checked" 2> /dev/null || echo 0)
if ! kill -0 "$micd_pid" 2> /dev/null; then
    echo "readme-tour: micd died during the tour"; cat "$work/micd.log"; status=1
fi
if [ $status = 0 ]; then
    echo "readme-tour: ok ($nblocks blocks of README.md, $nreq requests, $nchk outputs compared with the README's)"
fi
exit $status
