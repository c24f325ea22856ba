#!/bin/sh
# check-layers.sh - the rules of server/'s layers that the compiler and the
# unit tests' link lines do not check by themselves (run by make check,
# after the build; exits non-zero on a breach, naming it):
#
#   1. server/'s folders are layers, from the bottom: core, store, engine,
#      ops, http, relay (main.c above them all).  A file includes headers of
#      its own layer or of a lower one only.
#   2. A folder's private headers (*_int.h) are included only inside it.
#   3. No cycle in the include graph of server/'s modules (x.c and x.h are
#      one module), over the whole graph, not only pairs.
#   4. The objects of layer L and below leave no mic_* symbol undefined
#      that a higher layer defines: an upward call does not link (nm over
#      build/san/LAYER/*.o; what unit tests' link lines show per test, for
#      every layer at once).
#   5. Only the writer (engine/writer.c) begins a write transaction.
#   6. Only the delivery engine (engine/delivery.c) calls the store's
#      delivery indexes (store.h "Deliveries", "Ordered groups", "Per-group
#      figures", the unhandled and poison indexes).
#   7. Only the event log's owner (engine/eventlog.c) writes the log, the
#      event ids, the time index and the aggregate records.
#   8. Only store/ calls LMDB (mdb_*); only relay/sink.c calls libnats.
#   9. Every mic_* name a header comment mentions exists
#      (tests/check-names.sh, when present).
#  10. DESIGN.md's tree (section 8) names every server/*.c and *_int.h file,
#      and none that does not exist.
# Each rule fails on a planted breach: see the closing note of issue 30.
cd "$(dirname "$0")/.." || exit 2
command -v python3 > /dev/null || { echo "check-layers: needs python3"; exit 2; }
BUILD=${BUILD:-build/san} exec python3 - "$@" <<'EOF'
import os, re, subprocess, sys, glob

LAYERS = ["core", "store", "engine", "ops", "http", "relay"]
rank = {l: i for i, l in enumerate(LAYERS)}
rank["main"] = len(LAYERS)
bad = []

def layer_of(path):
    p = path.split("/")
    if p[0] != "server":
        return None
    return "main" if len(p) == 2 else p[1]

files = sorted(glob.glob("server/*.c") + glob.glob("server/*/*.c") + glob.glob("server/*/*.h"))
inc_re = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
headers = {f for f in files if f.endswith(".h")}

def resolve(src, name):
    """The server header a #include names, or None (not server's)."""
    here = os.path.join(os.path.dirname(src), name)
    for cand in (os.path.normpath(here), os.path.normpath(os.path.join("server", name))):
        if cand in headers:
            return cand
    return None

def strip_comments(s):
    return re.sub(r'/\*.*?\*/|//[^\n]*', ' ', s, flags=re.S)

def includes(f, seen=None):
    """The server headers f includes; a private header (*_int.h) stands for
    what it includes, as part of the file that includes it."""
    seen = set() if seen is None else seen
    out = []
    for name in inc_re.findall(open(f).read()):
        h = resolve(f, name)
        if not h or h in seen:
            continue
        seen.add(h)
        out.append(h)
        if h.endswith("_int.h"):
            out.extend(includes(h, seen))
    return out

graph = {}
for f in files:
    me = layer_of(f)
    mod = f[:-2]
    for h in includes(f):
        hl = layer_of(h)
        # 1. includes go down or sideways
        if rank[hl] > rank[me]:
            bad.append(f"{f} includes {h}: {me} may not include from {hl}, a higher layer (rule 1)")
        # 2. private headers stay in their folder
        if h.endswith("_int.h") and os.path.dirname(h) != os.path.dirname(f):
            bad.append(f"{f} includes {h}, private to {os.path.dirname(h)}/ (rule 2)")
        if h[:-2] != mod and not h.endswith("_int.h") and not f.endswith("_int.h"):
            graph.setdefault(mod, set()).add(h[:-2])

# 3. cycles over the whole graph (Tarjan's strongly connected components)
index, low, onstack, stack, sccs, counter = {}, {}, set(), [], [], [0]
def strong(v):
    index[v] = low[v] = counter[0]; counter[0] += 1
    stack.append(v); onstack.add(v)
    for w in graph.get(v, ()):
        if w not in index:
            strong(w); low[v] = min(low[v], low[w])
        elif w in onstack:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); onstack.discard(w); comp.append(w)
            if w == v:
                break
        if len(comp) > 1:
            sccs.append(sorted(comp))
sys.setrecursionlimit(10000)
for v in sorted(graph):
    if v not in index:
        strong(v)
for c in sccs:
    bad.append("include cycle among " + ", ".join(c) + " (rule 3)")

# 4. no upward symbol at link time
build = os.environ.get("BUILD", "build/san")
def nm(paths, flag):
    if not paths:
        return set()
    out = subprocess.run(["nm", flag] + paths, capture_output=True, text=True)
    if out.returncode:
        return None
    syms = set()
    for line in out.stdout.splitlines():
        parts = line.split()
        if parts and parts[-1].startswith("mic_"):
            syms.add(parts[-1])
    return syms
defined_in = {}
objs_of = {}
for l in LAYERS:
    objs = sorted(glob.glob(f"{build}/{l}/*.o"))
    objs_of[l] = objs
    d = nm(objs, "--defined-only")
    if d is None or not objs:
        bad.append(f"no objects of layer {l} under {build}/{l}/ (build first: make {build}/micd) (rule 4)")
        d = set()
    for s in d:
        defined_in.setdefault(s, l)
for l in LAYERS:
    undef = nm(objs_of[l], "-u") or set()
    for s in sorted(undef):
        owner = defined_in.get(s)
        if owner and rank[owner] > rank[l]:
            users = [o for o in objs_of[l] if s in (nm([o], "-u") or set())]
            bad.append(f"{', '.join(users)} calls {s}, defined in {owner}/, a higher layer than {l} (rule 4)")

def calls(pattern, allowed, rule, what):
    rx = re.compile(pattern)
    for f in files:
        if not f.endswith(".c") or f in allowed or any(f.startswith(a) for a in allowed if a.endswith("/")):
            continue
        body = strip_comments(open(f).read())
        for n, line in enumerate(body.splitlines(), 1):
            if rx.search(line):
                bad.append(f"{f}:{n}: {what} (rule {rule}): {line.strip()}")

# 5. one writer
calls(r'\bmic_txn_begin\s*\([^,]*,\s*1\s*,', {"server/engine/writer.c", "server/store/"}, 5,
      "begins a write transaction (only engine/writer.c may)")
# 6. the delivery engine owns the delivery indexes
calls(r'\bmic_store_(dlv|ready|timer|dlq|aq|ags|gstat|unh|poison|oldest|drop_step)_*[a-z_]*\s*\(',
      {"server/engine/delivery.c", "server/store/"}, 6,
      "calls a delivery index of the store (only engine/delivery.c may)")
# 7. the event log's owner writes the log, ids, time index, aggregates
calls(r'\bmic_store_(log_put|log_del|id_put|id_del|time_put|time_del|agg_put|aggidx_put|topic_events_add)\s*\(',
      {"server/engine/eventlog.c", "server/store/"}, 7,
      "writes the event log (only engine/eventlog.c may)")
# 8. LMDB in store/, libnats in the sink
calls(r'\bmdb_[a-z_]+\s*\(', {"server/store/"}, 8, "calls LMDB (only store/ may)")
calls(r'\b(nats[A-Za-z]*_[A-Za-z]+|js_[A-Za-z]+|jsCtx_[A-Za-z]+)\s*\(', {"server/relay/sink.c"}, 8,
      "calls libnats (only relay/sink.c may)")

# 9. names in header comments exist
if os.path.exists("tests/check-names.sh"):
    r = subprocess.run(["sh", "tests/check-names.sh"], capture_output=True, text=True)
    if r.returncode:
        bad.append("tests/check-names.sh: " + (r.stdout + r.stderr).strip() + " (rule 9)")

# 10. DESIGN.md's tree names every server file, and only those
tree, folder = set(), None
for line in open("DESIGN.md").read().splitlines():
    m = re.match(r'^    (server/(?:[a-z]+/)?)(\S*)\s', line + " ")
    if m:
        folder = m.group(1)
        if m.group(2):
            tree.add(m.group(1) + m.group(2))
        continue
    m = re.match(r'^      ([a-z_0-9]+\.[ch])\s', line)
    if m and folder:
        tree.add(folder + m.group(1))
    elif not line.startswith("      "):
        folder = None
actual = {f for f in glob.glob("server/*.c") + glob.glob("server/*/*.c")} | set(glob.glob("server/*/*_int.h"))
for f in sorted(actual - tree):
    bad.append(f"{f} is missing from DESIGN.md's tree (rule 10)")
for f in sorted(tree - actual):
    bad.append(f"DESIGN.md's tree names {f}, which does not exist (rule 10)")

for b in bad:
    print("check-layers: " + b)
if bad:
    sys.exit(1)
print(f"check-layers: ok ({len(files)} files in {len(LAYERS)} layers: includes and symbols go down, "
      f"no include cycle, one writer, delivery indexes in delivery.c, the event log in eventlog.c, "
      f"LMDB in store/, libnats in relay/sink.c, DESIGN.md's tree true)")
EOF
