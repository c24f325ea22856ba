#!/bin/sh
# deps/lmdb/copy.sh SRC DST: write DST, a copy of SRC (Debian's liblmdb.a)
# whose calls of the names in RENAMED go to the store journal's capture
# functions, mic_jnl_NAME (server/store/journal.h).  `copy.sh --renamed`
# prints the names.  Why these three and no other: README.md beside this
# file.  The output is deterministic (check.sh compares a fresh copy with
# the one built).
set -eu
RENAMED="pwrite writev lseek"
if [ "${1:-}" = --renamed ]; then
    echo "$RENAMED"
    exit 0
fi
if [ $# -ne 2 ]; then
    echo "usage: $0 SRC DST | --renamed" >&2
    exit 2
fi
args=""
for s in $RENAMED; do
    args="$args --redefine-sym $s=mic_jnl_$s"
done
# shellcheck disable=SC2086 # $args is a list of options
objcopy -D $args "$1" "$2.tmp"
mv "$2.tmp" "$2"
