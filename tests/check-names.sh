#!/bin/sh
# check-names.sh - every mic_* name that a header's comment mentions (the
# contracts of server/**/*.h and client/mic.h) exists in the code: as a
# function, macro, type, struct or enum of server/ or client/, outside
# comments.  A name ending in _* ("mic_store_dlv_*") is a prefix: some name
# of the code must start with it.  Exits 1 naming each stale mention
# (file:line), 0 when there is none, 2 when it cannot run.
# tests/check-layers.sh calls it; run it alone from anywhere.
cd "$(dirname "$0")/.." || exit 2
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
headers=$(find server -name '*.h' | sort; echo client/mic.h)

# The names the code has: every identifier of every C file, comments
# stripped by the preprocessor (directives and #if 0 blocks are kept).
for f in $(find server client -name '*.[ch]' | sort); do
    gcc -fpreprocessed -dD -E -P "$f" 2>/dev/null || { echo "check-names: cannot read $f"; exit 2; }
done | grep -o '\bmic_[a-z0-9_]*' | sort -u >"$tmp/code"
[ -s "$tmp/code" ] || { echo "check-names: no mic_ names found in the code"; exit 2; }

# The names the headers mention; what the code lacks can only be in a
# comment (or a string), so each is reported where it is mentioned.
grep -oh '\bmic_[a-z0-9_]*\*\?' $headers | sort -u >"$tmp/said"
status=0
while read -r name; do
    case "$name" in
    *_\*) grep -q "^${name%\*}" "$tmp/code" && continue ;;
    *) grep -qx "${name%\*}" "$tmp/code" && continue ;;
    esac
    word=${name%\*}
    grep -n "\\b$word" $headers | grep -v "\\b${word}[a-z0-9_]" |
        sed "s/^/check-names: $name is named here but is not in the code: /"
    status=1
done <"$tmp/said"
[ $status = 0 ] && echo "check-names: ok (every mic_ name in the comments of $(echo $headers | wc -w) headers is in the code)"
exit $status
