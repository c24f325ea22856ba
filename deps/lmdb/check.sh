#!/bin/sh
# deps/lmdb/check.sh [COPY [SRC]]: check the LMDB copy micd links (COPY,
# default build/liblmdb-journal.a) against Debian's liblmdb.a (SRC, default
# the one pkg-config names).  Run by make check; exits 1 on a breach:
#   1. COPY calls none of pwrite, writev, lseek (copy.sh --renamed): each
#      would write data.mdb past the journal; and it calls mic_jnl_pwrite,
#      mic_jnl_writev, mic_jnl_lseek (the renaming took);
#   2. the calls COPY imports are those README.md reviewed (imports);
#   3. COPY is SRC renamed by copy.sh now, byte for byte: not a copy made
#      from an older liblmdb.a (or by another rule).
here=$(dirname "$0")
copy=${1:-build/liblmdb-journal.a}
src=${2:-$(pkg-config --variable=libdir lmdb)/liblmdb.a}
status=0
bad() {
    echo "deps/lmdb/check.sh: $*"
    status=1
}
[ -f "$copy" ] || { bad "$copy: no such file"; exit 1; }
[ -f "$src" ] || { bad "$src: no such file"; exit 1; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
# What the copy imports: its undefined names less those it defines itself.
nm -u "$copy" | awk '$1 == "U" {print $2}' | sort -u > "$tmp/undef"
nm -g --defined-only "$copy" | awk 'NF == 3 {print $3}' | sort -u > "$tmp/def"
comm -23 "$tmp/undef" "$tmp/def" > "$tmp/imports"
for s in $("$here/copy.sh" --renamed); do
    grep -qx "$s" "$tmp/imports" &&
        bad "$copy still calls $s: what LMDB writes with it bypasses the journal"
    grep -qx "mic_jnl_$s" "$tmp/imports" ||
        bad "$copy does not call mic_jnl_$s: the renaming of $s did not take"
done
if ! grep -v '^#' "$here/imports" | diff - "$tmp/imports" > "$tmp/diff"; then
    bad "$copy imports other calls than the ones deps/lmdb/README.md reviewed (< reviewed, > now):"
    cat "$tmp/diff"
fi
if ! "$here/copy.sh" "$src" "$tmp/fresh" || ! cmp -s "$tmp/fresh" "$copy"; then
    bad "$copy is not $src renamed by deps/lmdb/copy.sh now: stale, or made another way"
fi
[ $status = 0 ] && echo "deps/lmdb/check.sh: ok ($copy: pwrite, writev and lseek go to the journal, imports as reviewed, made from $src)"
exit $status
