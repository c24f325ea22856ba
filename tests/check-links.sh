#!/bin/sh
# check-links.sh - the repository's markdown documents link only inside the
# repository (run by make check; exits non-zero on a breach):
#   1. every relative link of every *.md file (outside build/), [text](target),
#      ![alt](target) or "[ref]: target", names a file or directory that
#      exists, and does not lead outside the repository once resolved;
#   2. no link is absolute (/path) or to the web (http:, https:, ftp:,
#      mailto:, file:, //host): the documents work from a clone, offline;
#   3. no file names the team's design contract outside the repository
#      (../shared/DESIGN.md): DESIGN.md at the root is the design document.
#   4. a #fragment into a markdown file names one of its headings (GitHub's
#      anchors: lowercase, punctuation dropped, spaces as hyphens), so that
#      "DESIGN section 12" links keep pointing at section 12.
# Links inside fenced code blocks and `code spans` are not links and are
# skipped.
cd "$(dirname "$0")/.." || exit 2
root=$(pwd -P)
status=0
files=$(find . -name '*.md' -not -path './build/*' -not -path './.git/*' \
             -not -path '*/node_modules/*' | sort)
n_files=0
n_links=0
# The anchors of a markdown file's headings, one a line.
anchors() {
    awk '/^[ \t]*(```|~~~)/ { fence = !fence; next }
         !fence && /^#+ / {
             h = $0; sub(/^#+ +/, "", h); sub(/ +#* *$/, "", h)
             h = tolower(h); gsub(/[^a-z0-9 _-]/, "", h); gsub(/ /, "-", h)
             print h
         }' "$1"
}
for f in $files; do
    n_files=$((n_files + 1))
    dir=$(dirname "$f")
    # One "LINE<TAB>TARGET" per link, code blocks and code spans removed.
    links=$(awk '
        /^[ \t]*(```|~~~)/ { fence = !fence; next }
        fence { next }
        {
            line = $0
            gsub(/`[^`]*`/, "", line)
            # [ref]: target
            if (match(line, /^[ \t]*\[[^]]+\]:[ \t]+[^ \t]+/)) {
                t = substr(line, RSTART, RLENGTH)
                sub(/^[ \t]*\[[^]]+\]:[ \t]+/, "", t)
                print NR "\t" t
            }
            # [text](target) and ![alt](target), several per line
            while (match(line, /\]\([^) \t]+( +"[^"]*")?\)/)) {
                t = substr(line, RSTART + 2, RLENGTH - 3)
                sub(/ +".*$/, "", t)
                print NR "\t" t
                line = substr(line, RSTART + RLENGTH)
            }
        }' "$f")
    [ -z "$links" ] && continue
    tab=$(printf '\t')
    while IFS="$tab" read -r ln target; do
        n_links=$((n_links + 1))
        case "$target" in
        '#'*)                                # an anchor in the same file
            if ! anchors "$f" | grep -qxF "${target#\#}"; then
                echo "check-links: $f:$ln: $target: no such heading in $f"
                status=1
            fi
            continue ;;
        [A-Za-z]*:*|//*)
            echo "check-links: $f:$ln: $target: a link out of the repository (web or URL scheme)"
            status=1; continue ;;
        /*)
            echo "check-links: $f:$ln: $target: an absolute path (links must be relative)"
            status=1; continue ;;
        esac
        path=${target%%#*}
        path=$(printf '%s' "$path" | sed 's/%20/ /g')
        resolved=$(realpath -m "$dir/$path")
        case "$resolved" in
        "$root"|"$root"/*) ;;
        *)
            echo "check-links: $f:$ln: $target: leads outside the repository ($resolved)"
            status=1; continue ;;
        esac
        case "$resolved" in
        "$root"/build|"$root"/build/*)
            echo "check-links: $f:$ln: $target: points into build/ (not part of a clone)"
            status=1; continue ;;
        esac
        if [ ! -e "$resolved" ]; then
            echo "check-links: $f:$ln: $target: no such file"
            status=1
            continue
        fi
        case "$target" in
        *.md\#*)
            frag=${target#*\#}
            if ! anchors "$resolved" | grep -qxF "$frag"; then
                echo "check-links: $f:$ln: $target: no heading of $path has the anchor #$frag"
                status=1
            fi ;;
        esac
    done <<EOF
$links
EOF
done
# The design contract the team was given lives outside the repository; the
# repository's own design document is DESIGN.md.
if grep -rn --exclude-dir=build --exclude-dir=.git --exclude=check-links.sh \
        -e 'shared/DESIGN' . ; then
    echo "check-links: the lines above name a design document outside the repository (use DESIGN.md)"
    status=1
fi
[ $status = 0 ] && echo "check-links: ok ($n_links links in $n_files markdown files, all inside the repository)"
exit $status
