#!/usr/bin/env python3
"""bench/pages.py STRACE_FILE - what a commit writes, and what it syncs.

Reads the output of `strace -f -y -e trace=pwrite64,pwritev,writev,fdatasync
-p PID` (one line per call, prefixed by the thread id; -y names each
descriptor's file).  Under --durability fsync (server/store/journal.h) a commit
writes its pages and its meta page to data.mdb in the OS cache, unsynced;
the sync stage appends the commits' records to journal-0 or journal-1 in
one pwritev and fdatasyncs that file; a checkpoint fdatasyncs data.mdb
now and then.  So: a commit is one meta-page write (offset below two
pages); its pages are every byte it wrote to data.mdb; a flush is one
fdatasync of a journal file, with the journal bytes written before it.
Writes to sockets and other files are not counted.  Prints one JSON line."""
import json
import re
import sys

PAGE = 4096
commits, data_bytes, data_calls = 0, 0, 0
cur_bytes, per_commit = 0, []
flushes, jbytes, jcalls, ckpts = 0, 0, 0, 0
call = re.compile(r'(\d+)\s+(pwrite64|pwritev|writev|fdatasync)\((\d+)<([^>]*)>(.*)')
resumed = re.compile(r'(\d+)\s+<\.\.\. (pwrite64|pwritev|writev|fdatasync) resumed>(.*)')
pending = {}  # tid -> the first half of a call strace split ("<unfinished ...>")
with open(sys.argv[1]) as f:
    for line in f:
        line = line.rstrip("\n")
        m = call.match(line)
        if m and line.endswith("<unfinished ...>"):
            pending[m.group(1)] = (m.group(2), m.group(4), m.group(5)[:-len("<unfinished ...>")])
            continue
        if m:
            name, path, rest = m.group(2), m.group(4), m.group(5)
        else:
            r = resumed.match(line)
            if not r or r.group(1) not in pending:
                continue
            name, path, first = pending.pop(r.group(1))
            rest = first + r.group(3)
        ok = re.search(r'=\s*(\d+)\s*$', rest)
        if not ok:
            continue
        n = int(ok.group(1))
        if name == "fdatasync":
            if path.endswith("/data.mdb"):
                ckpts += 1
            elif re.search(r'/journal-[01]$', path):
                flushes += 1
            continue
        if path.endswith("/data.mdb"):
            data_bytes += n
            data_calls += 1
            cur_bytes += n
            off = re.search(r',\s*(\d+)\s*\)\s*=', rest) if name == "pwrite64" else None
            if off and int(off.group(1)) < 2 * PAGE:  # the meta page: the commit ends
                commits += 1
                per_commit.append(cur_bytes / PAGE)
                cur_bytes = 0
        elif re.search(r'/journal-[01]$', path):
            jbytes += n
            jcalls += 1
if not commits:
    sys.exit("pages.py: no commit found in %s" % sys.argv[1])
print(json.dumps({"commits": commits,
                  "pages_per_commit_mean": round(sum(per_commit) / commits, 1),
                  "pages_per_commit_median": round(sorted(per_commit)[commits // 2], 1),
                  "writes_per_commit_mean": round(data_calls / commits, 1),
                  "journal_flushes_per_commit": round(flushes / commits, 2),
                  "journal_kib_per_flush": round(jbytes / 1024 / max(flushes, 1), 1),
                  "journal_writes_per_flush": round(jcalls / max(flushes, 1), 2),
                  "fdatasyncs_per_commit": round((flushes + ckpts) / commits, 2),
                  "checkpoints": ckpts}))
