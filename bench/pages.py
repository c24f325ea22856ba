#!/usr/bin/env python3
"""bench/pages.py STRACE_FILE - pages written and fdatasyncs per commit.

Reads the output of `strace -f -e trace=pwrite64,pwritev,fdatasync -p PID`
(one line per call, prefixed by the thread id) and counts, for the thread
that writes the store's pages (the writer), the 4 KiB pages written between
two of its fdatasyncs: that is one commit (its meta page is written after
the fdatasync, so it is counted with the next commit).  fdatasyncs of other
threads (the sync stage, which makes each commit's meta page durable) are
counted apart.  Prints one JSON line."""
import json
import re
import sys

per, cur, wtid, syncs_all = [], 0, None, 0
with open(sys.argv[1]) as f:
    for line in f:
        m = re.match(r'(\d+)\s+(pwrite64|pwritev)\(.*\)\s*=\s*(\d+)', line)
        if m:
            wtid = m.group(1)
            cur += int(m.group(3)) / 4096
            continue
        m = re.match(r'(\d+)\s+fdatasync\(.*=\s*0', line)
        if m:
            syncs_all += 1
            if m.group(1) == wtid:
                per.append(cur)
                cur = 0
per = [p for p in per if p > 0]
if not per:
    sys.exit("pages.py: no commit found in %s" % sys.argv[1])
per.sort()
print(json.dumps({"commits": len(per), "pages_per_commit_mean": round(sum(per) / len(per), 1),
                  "pages_per_commit_median": round(per[len(per) // 2], 1),
                  "fdatasyncs_per_commit": round(syncs_all / len(per), 2)}))
