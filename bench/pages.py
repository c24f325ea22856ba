#!/usr/bin/env python3
"""bench/pages.py STRACE_FILE - pages written, write calls and fdatasyncs per commit.

Reads the output of `strace -f -e trace=pwrite64,pwritev,writev,fdatasync
-p PID` (one line per call, prefixed by the thread id).  For each thread it
adds up the bytes and the calls of its writes since its last fdatasync; at
an fdatasync of a thread that wrote something, that is one commit (the
writer's: LMDB writes a commit's pages, contiguous runs with one writev
each, then fdatasyncs; its meta page is written after the fdatasync, so it
is counted with the next commit).  fdatasyncs of threads that wrote nothing
(the sync stage, which makes each commit's meta page durable) are counted
apart; writes of threads that never sync (the HTTP threads' writev to
sockets) are never counted.  Prints one JSON line."""
import json
import re
import sys

pages, calls, syncs_all = [], [], 0
acc = {}  # tid -> [bytes, calls]
with open(sys.argv[1]) as f:
    for line in f:
        m = re.match(r'(\d+)\s+(pwrite64|pwritev|writev)\(.*\)\s*=\s*(\d+)', line)
        if m:
            a = acc.setdefault(m.group(1), [0, 0])
            a[0] += int(m.group(3))
            a[1] += 1
            continue
        m = re.match(r'(\d+)\s+fdatasync\(.*=\s*0', line)
        if m:
            syncs_all += 1
            a = acc.get(m.group(1))
            if a and a[0] > 0:
                pages.append(a[0] / 4096)
                calls.append(a[1])
            acc[m.group(1)] = [0, 0]
if not pages:
    sys.exit("pages.py: no commit found in %s" % sys.argv[1])
n = len(pages)
print(json.dumps({"commits": n, "pages_per_commit_mean": round(sum(pages) / n, 1),
                  "pages_per_commit_median": round(sorted(pages)[n // 2], 1),
                  "writes_per_commit_mean": round(sum(calls) / n, 1),
                  "fdatasyncs_per_commit": round(syncs_all / n, 2)}))
