#!/bin/sh
# Run each test binary given as an argument, print its output, and end with
# one line "tests: N passed, N failed".  Exits non-zero if any test failed
# or any binary crashed (a sanitizer report makes the binary exit non-zero).
passed=0
failed=0
status=0
for t in "$@"; do
    echo "== $t"
    out=$("$t" 2>&1)
    rc=$?
    printf '%s\n' "$out"
    # A binary may run several cmocka groups: add up their lines.
    p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test(s)\./\1/p' | awk '{n+=$1} END{if(NR)print n}')
    f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test(s), listed below:/\1/p' | awk '{n+=$1} END{if(NR)print n}')
    passed=$((passed + ${p:-0}))
    failed=$((failed + ${f:-0}))
    if [ "$rc" -ne 0 ]; then
        status=1
        [ -z "$f" ] && failed=$((failed + 1)) && echo "!! $t exited with status $rc"
    fi
done
echo "tests: $passed passed, $failed failed"
exit $status
