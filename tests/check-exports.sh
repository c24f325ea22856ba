#!/bin/sh
# check-exports.sh [LIB [HEADER [OBJ...]]] - the shared libmic exports its
# public API and nothing else (run by make check; exits non-zero on a
# breach):
#   1. the dynamic symbols LIB defines (nm -D --defined-only; default
#      build/libmic.so) are exactly the functions HEADER declares (default
#      client/mic.h): every name followed by '(' outside its comments.  An
#      extra symbol (micd's mic_buf_* or mic_time_* leaking out of
#      server/core/buf.c and clock.c, a name put into client/libmic.map that
#      mic.h does not declare) or a missing one (a function of mic.h not in
#      client/libmic.map, or not defined) fails;
#   2. each global that one of libmic's own objects OBJ defines (nm -g) is
#      a function of HEADER or is used by another of them: a helper left
#      non-static by mistake fails here, although the version script keeps
#      it out of LIB's exports (rule 1 alone would not see it).
cd "$(dirname "$0")/.." || exit 2
lib=${1:-build/libmic.so}
hdr=${2:-client/mic.h}
[ $# -ge 2 ] && shift 2 || set --
for f in "$lib" "$hdr"; do
    if [ ! -r "$f" ]; then
        echo "check-exports: cannot read $f (make $lib first)"
        exit 2
    fi
done
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
# What the library exports (any kind of symbol: functions and data).
if ! nm -D --defined-only "$lib" > "$tmp/nm"; then
    echo "check-exports: nm -D $lib failed"
    exit 2
fi
awk 'NF >= 3 { sub(/@.*/, "", $3); print $3 }' "$tmp/nm" | sort -u > "$tmp/exported"
# What the header declares: comments dropped (they name functions too),
# then every identifier directly followed by '(' (mic.h's declarations
# are written "type mic_name(args)"; its typedef of a handler reads
# "(*mic_handler_fn)(", and calls inside macros are not mic_ names).
awk '{
    line = $0; out = ""
    while (length(line)) {
        if (c) {
            i = index(line, "*/")
            if (!i) { line = ""; break }
            line = substr(line, i + 2); c = 0
        } else {
            i = index(line, "/*")
            if (!i) { out = out line; line = "" }
            else { out = out substr(line, 1, i - 1); line = substr(line, i + 2); c = 1 }
        }
    }
    sub(/\/\/.*/, "", out)
    print out
}' "$hdr" | grep -o '[A-Za-z_][A-Za-z0-9_]*(' | tr -d '(' |
    grep -v '^\(__attribute__\|format\|printf\|defined\)$' | sort -u > "$tmp/declared"
if [ ! -s "$tmp/declared" ]; then
    echo "check-exports: found no function declared in $hdr"
    exit 2
fi
status=0
extra=$(comm -23 "$tmp/exported" "$tmp/declared")
missing=$(comm -13 "$tmp/exported" "$tmp/declared")
if [ -n "$extra" ]; then
    echo "check-exports: $lib exports what $hdr does not declare (keep it local: static, or out of client/libmic.map):"
    printf '  %s\n' $extra
    status=1
fi
if [ -n "$missing" ]; then
    echo "check-exports: $hdr declares what $lib does not export (define it, and list it in client/libmic.map):"
    printf '  %s\n' $missing
    status=1
fi
# Rule 2: the globals of each object, against mic.h and what the others use.
for o in "$@"; do
    if ! nm -g --defined-only "$o" > "$tmp/def" || ! nm -u "$o" > "$tmp/undef"; then
        echo "check-exports: nm $o failed"
        exit 2
    fi
    awk 'NF >= 3 { print $3 }' "$tmp/def" | sort -u > "$tmp/defnames"
    : > "$tmp/used"
    for other in "$@"; do
        [ "$other" = "$o" ] && continue
        nm -u "$other" | awk '{ print $NF }' >> "$tmp/used"
    done
    sort -u "$tmp/used" -o "$tmp/used"
    loose=$(comm -23 "$tmp/defnames" "$tmp/declared" | comm -23 - "$tmp/used")
    if [ -n "$loose" ]; then
        echo "check-exports: $o defines globals that are not in $hdr and no other libmic file uses (make them static):"
        printf '  %s\n' $loose
        status=1
    fi
done
if [ "$status" -eq 0 ]; then
    echo "check-exports: $lib exports the $(wc -l < "$tmp/declared") functions of $hdr, nothing else${1:+; $# objects define no loose global}"
fi
exit $status
