#!/usr/bin/env python3
"""bench/hostile.py - publish and claim latency with hostile clients connected
(make bench-hostile; issue 12 point 5, issue 16 T8).

One micd with its default limits (--max-connections 1024, --per-ip-connections
256, --idle-timeout 75, --head-timeout 10) on 127.0.0.1.  First the figures of
an idle server: durable single-event publishes (bench/loadgen, 8 connections)
and single claims (bench/workers --driver raw, one worker, max 1), p50 and p99.
Then the same two measurements with three attacks at once:
  - 2,000 idle connections from 127.0.0.2-9 (250 from each, under the
    per-address limit);
  - 300 slow ones from 127.0.0.10-11 that send a request head one byte
    every 2 s;
  - a flood of malformed requests from 127.0.0.20-23 (FLOODERS threads, one
    request per connection, back to back: bad JSON, NUL bytes, bad methods,
    two lengths, chunks with a length, bad chunks, a 16 KB header, a 9 KB
    URL, huge and negative lengths, HTTP/9.9, bodies and heads cut short);
every connection micd closes is opened again, as an attacker would.  Then 30
plain requests of a client that comes last.  Target: p99 at most 3 times the
idle figure, the late client served 30 of 30, and no malformed request
answered other than 4xx (505 for HTTP/9.9).

RUNS runs (default 3), each on a fresh micd; the figures are the median of
the runs (min-max of the p99s and the ratios).  Everything stays on loopback;
it stops by itself.

Prints a Markdown section on stdout and, with OUT=FILE, puts it into FILE
between the markers <!-- hostile --> and <!-- /hostile --> (appended when
FILE has none), keeping the notes between <!-- hostile-notes --> and
<!-- /hostile-notes --> in the old section.  bench/peers.py keeps that section when it rewrites
bench/RESULTS.md."""
import json
import os
import resource
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from peers import free_port  # noqa: E402 (bench/peers.py, next to this file)

IDLE, SLOW, FLOODERS = 2000, 300, 2
PUBLISHES, CLAIMS = 20000, 2000
RUNS = int(os.environ.get("RUNS", "3"))


def _post(path, body, ctype=b"application/json", extra=b""):
    return (b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: " + ctype + b"\r\n" + extra +
            b"Content-Length: %d\r\n\r\n" % len(body) + body)


_EV = b'{"topic":"decoy","event_id":"f1","payload":{}}'
# (name, request, cut short: no answer awaited, 505 a right answer)
BAD = [
    ("bad_json", _post(b"/v1/events", _EV[:-2]), False, False),
    ("not_an_object", _post(b"/v1/events", b"[1,2,3]"), False, False),
    ("bad_event_id", _post(b"/v1/events", _EV.replace(b"f1", b"bad id!")), False, False),
    ("nul_in_body", _post(b"/v1/events", _EV.replace(b"f1", b"f\0x")), False, False),
    ("bad_utf8", _post(b"/v1/events", _EV.replace(b"{}", b'{"a":"\xff\xfe"}')), False, False),
    ("deep_json", _post(b"/v1/events", _EV.replace(b"{}", b"[" * 5000 + b"]" * 5000)), False, False),
    ("text_plain", _post(b"/v1/events", _EV, ctype=b"text/plain"), False, False),
    ("bad_method", b"BREW /v1/events HTTP/1.1\r\nHost: x\r\n\r\n", False, False),
    ("nul_in_method", b"PUT\0X /v1/topics/decoy2 HTTP/1.1\r\nHost: x\r\n\r\n", False, False),
    ("nul_in_target", b"DELETE /v1/groups/decoy\0x HTTP/1.1\r\nHost: x\r\n\r\n", False, False),
    ("two_lengths", _post(b"/v1/events", _EV, extra=b"Content-Length: 47\r\n"), False, False),
    ("chunked_and_length", _post(b"/v1/events", b"2e\r\n" + _EV + b"\r\n0\r\n\r\n",
                                 extra=b"Transfer-Encoding: chunked\r\n"), False, False),
    ("bad_chunk", b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n", False, False),
    ("huge_header", b"GET /healthz HTTP/1.1\r\nX-Big: " + b"b" * 16000 + b"\r\n\r\n", False, False),
    ("long_url", b"GET /v1/" + b"u" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", False, False),
    ("huge_length", b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 99999999999\r\n\r\n{", False, False),
    ("negative_length", b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n{}", False, False),
    ("claim_max_0", _post(b"/v1/groups/decoy/claim", b'{"max":0}'), False, False),
    ("http_9_9", b"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n", False, True),
    ("cut_body", _post(b"/v1/events", _EV)[:-20], True, False),
    ("cut_head", b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Ty", True, False),
]


def run_json(cmd):
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=600, check=True)
    return json.loads(out.stdout.decode().strip().splitlines()[-1])


class Attack:
    """IDLE idle and SLOW slow connections, reopened when micd closes them, and
    FLOODERS threads of malformed requests."""

    def __init__(self, port):
        self.port, self.stop, self.reopened = port, False, 0
        self.sent = self.refused = self.wrong = self.unanswered = 0
        self.first_wrong = ""
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.idle, args=(h,), daemon=True) for h in range(2, 10)]
        self.threads += [threading.Thread(target=self.slow, args=(h,), daemon=True) for h in (10, 11)]
        self.threads += [threading.Thread(target=self.flood, args=(i,), daemon=True) for i in range(FLOODERS)]

    def dial(self, host, blocking=False):
        s = socket.socket()
        s.bind(("127.0.0.%d" % host, 0))
        s.settimeout(5)
        try:
            s.connect(("127.0.0.1", self.port))
        except OSError:
            s.close()
            return None
        if not blocking:
            s.setblocking(False)
        return s

    @staticmethod
    def dead(s):
        try:
            return s.recv(4096) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    def idle(self, host):
        socks = [self.dial(host) for _ in range(IDLE // 8)]
        while not self.stop:
            for i, s in enumerate(socks):
                if s is None or self.dead(s):
                    if s:
                        s.close()
                    socks[i] = self.dial(host)
                    self.reopened += 1
            time.sleep(0.5)
        for s in socks:
            if s:
                s.close()

    def slow(self, host):
        head = b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        socks = [[self.dial(host), 0] for _ in range(SLOW // 2)]
        while not self.stop:
            for e in socks:
                s = e[0]
                if s is None or self.dead(s):
                    if s:
                        s.close()
                    e[0], e[1] = self.dial(host), 0
                    self.reopened += 1
                    continue
                try:
                    s.send(head[e[1] % len(head):e[1] % len(head) + 1])
                    e[1] += 1
                except OSError:
                    pass
            time.sleep(2)
        for s, _ in socks:
            if s:
                s.close()

    @staticmethod
    def status(s):
        got = b""
        try:
            while b"\r\n" not in got and len(got) < 4096:
                d = s.recv(4096)
                if not d:
                    break
                got += d
        except OSError:
            pass
        return int(got[9:12]) if got.startswith(b"HTTP/1.1 ") and got[9:12].isdigit() else 0

    def flood(self, i):
        n = i
        while not self.stop:
            name, req, cut, version_ok = BAD[n % len(BAD)]
            s = self.dial(20 + 2 * i + n % 2, blocking=True)
            n += 1
            if s is None:
                continue
            st = 0
            try:
                s.sendall(req)
                if not cut:
                    st = self.status(s)
            except OSError:
                pass
            # A reset, not a close: no TIME_WAIT left behind on this side.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
            with self.lock:
                self.sent += 1
                if st == 0:
                    self.unanswered += 1
                elif 400 <= st < 500 or (st == 505 and version_ok):
                    self.refused += 1
                else:
                    self.wrong += 1
                    self.first_wrong = self.first_wrong or "%s answered %d" % (name, st)

    def start(self):
        self.t0 = time.monotonic()
        for t in self.threads:
            t.start()

    def end(self):
        self.stop = True
        for t in self.threads:
            t.join()
        self.seconds = time.monotonic() - self.t0


def measure(url, group):
    pub = run_json(["./build/loadgen", "--url", url, "--conns", "8", "--events", str(PUBLISHES),
                    "--batch", "1", "--topic", group, "--max-seconds", "300"])
    # the raw driver: the claim latency is micd's, without libmic's own cost
    cl = run_json(["./build/workers", "--driver", "raw", "--url", url, "--group", group, "--workers", "1", "--max", "1",
                   "--rounds", str(CLAIMS), "--max-seconds", "300"])
    return {"pub_p50": pub["p50_ms"], "pub_p99": pub["p99_ms"], "claim_p50": cl["claim_p50_ms"],
            "claim_p99": cl["claim_p99_ms"], "pub_errors": pub["errors"]}


def late_client(url):
    ok = 0
    for _ in range(30):
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=10) as r:
                ok += r.status == 200
        except OSError:
            pass
    return ok


def put(url, path, body):
    req = urllib.request.Request(url + path, method="PUT", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=10).read()


def metrics(url):
    out = {}
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = int(float(value))
    return out


def answers_4xx(m):
    return sum(v for k, v in m.items() if k.startswith("mic_http_requests_total{") and 'code="4' in k)


def wait_for(cond, seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            if cond():
                return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def one_run():
    tmp = tempfile.mkdtemp(prefix="mic-hostile-")
    port = free_port()
    url = "http://127.0.0.1:%d" % port
    micd = subprocess.Popen(["./build/micd", "--listen", "127.0.0.1:%d" % port, "--data", tmp + "/mic"],
                            stdout=subprocess.DEVNULL, stderr=open(tmp + "/micd.log", "w"))
    try:
        if not wait_for(lambda: urllib.request.urlopen(url + "/readyz", timeout=1).status == 200, 30):
            raise SystemExit("micd did not start")
        for g in ("calm", "storm", "decoy"):
            put(url, "/v1/groups/" + g, {"topics": [g]})
        calm = measure(url, "calm")
        attack = Attack(port)
        attack.start()
        # The idle ones connected (micd full), the slow ones sending, the flood answered.
        if not wait_for(lambda: metrics(url).get("mic_http_connections", 0) >= 1000 and attack.refused > 0, 60):
            raise SystemExit("the attack did not fill micd")
        storm = measure(url, "storm")
        late = late_client(url)
        m = metrics(url)
        attack.end()
        after = metrics(url)
        with urllib.request.urlopen(url + "/v1/groups/decoy", timeout=10) as r:
            decoy_kept = r.status == 200
    finally:
        micd.terminate()
        micd.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)
    return {"calm": calm, "storm": storm, "late": late, "conns": m.get("mic_http_connections"),
            "evicted": after.get('mic_http_connections_closed_total{reason="evicted"}'),
            "heads": after.get('mic_http_connections_closed_total{reason="head"}'),
            "bodies": after.get('mic_http_connections_closed_total{reason="body"}'),
            "proto": after.get("mic_http_protocol_errors_total"), "c4xx": answers_4xx(after),
            "reopened": attack.reopened, "sent": attack.sent, "refused": attack.refused, "wrong": attack.wrong,
            "first_wrong": attack.first_wrong, "unanswered": attack.unanswered, "seconds": attack.seconds,
            "decoy_kept": decoy_kept,
            "ratio_pub": storm["pub_p99"] / calm["pub_p99"], "ratio_claim": storm["claim_p99"] / calm["claim_p99"]}


def med(runs, f):
    return statistics.median(f(r) for r in runs)


def span(runs, f, fmt="%.2f"):
    v = [f(r) for r in runs]
    return (fmt + " (" + fmt + "-" + fmt + ")") % (statistics.median(v), min(v), max(v))


def commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, check=True).stdout.decode().strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))  # micd inherits it
    runs = []
    for i in range(RUNS):
        runs.append(one_run())
        r = runs[-1]
        sys.stderr.write("run %d: publish p99 %.2f -> %.2f ms, claim p99 %.2f -> %.2f ms, late %d/30, "
                         "flood %d sent %d wrong\n" % (i + 1, r["calm"]["pub_p99"], r["storm"]["pub_p99"],
                                                       r["calm"]["claim_p99"], r["storm"]["claim_p99"],
                                                       r["late"], r["sent"], r["wrong"]))

    def cell(side, a, b):
        return "%.2f / %s" % (med(runs, lambda r: r[side][a]), span(runs, lambda r: r[side][b]))

    late = min(r["late"] for r in runs)
    wrong = sum(r["wrong"] for r in runs)
    ratio_pub, ratio_claim = med(runs, lambda r: r["ratio_pub"]), med(runs, lambda r: r["ratio_claim"])
    lines = [
        "<!-- hostile -->",
        "## Hostile clients (`make bench-hostile`)",
        "",
        "bench/hostile.py on %s at %s, %d runs on the %d-core machine (median, min-max of the runs): one "
        "micd with its default limits; under attack, all at once, %d idle connections from 127.0.0.2-9 "
        "(250 each), %d that send a head one byte every 2 s from 127.0.0.10-11, and %d threads of "
        "malformed requests from 127.0.0.20-23 (%d kinds, one per connection, back to back), every "
        "closed connection opened again. Publishes: bench/loadgen, 8 connections, %d single-event "
        "durable POSTs; claims: bench/workers --driver raw, one worker, %d claims of max 1." % (
            time.strftime("%Y-%m-%d"), commit(), RUNS, os.cpu_count(), IDLE, SLOW, FLOODERS, len(BAD),
            PUBLISHES, CLAIMS),
        "",
        "| | idle server | under attack | p99 ratio (target <= 3x) |",
        "|---|---|---|---|",
        "| publish p50 / p99 (ms) | %s | %s | %s |" % (cell("calm", "pub_p50", "pub_p99"),
                                                      cell("storm", "pub_p50", "pub_p99"),
                                                      span(runs, lambda r: r["ratio_pub"], "%.2fx")),
        "| claim p50 / p99 (ms) | %s | %s | %s |" % (cell("calm", "claim_p50", "claim_p99"),
                                                    cell("storm", "claim_p50", "claim_p99"),
                                                    span(runs, lambda r: r["ratio_claim"], "%.2fx")),
        "| publish errors | %d | %d | |" % (sum(r["calm"]["pub_errors"] for r in runs),
                                           sum(r["storm"]["pub_errors"] for r in runs)),
        "",
        "Per run (median): the malformed flood sent %d requests (%.0f/s), %d refused with a 4xx (or 505 "
        "for HTTP/9.9), %d cut short or unanswered, %d answered otherwise in all runs%s; group `decoy`, "
        "the target of the NUL-byte DELETEs, %s. micd held %d connections, closed %d idle ones to make "
        "room, %d slow heads and %d stalled bodies at their deadlines, counted %d protocol errors and "
        "answered %d 4xx (its own; libmicrohttpd answers the malformed heads itself); the attackers "
        "reopened %d connections. A client arriving last got %d of 30 requests answered (the fewest of "
        "the runs)." % (
            med(runs, lambda r: r["sent"]), med(runs, lambda r: r["sent"] / r["seconds"]),
            med(runs, lambda r: r["refused"]), med(runs, lambda r: r["unanswered"]), wrong,
            " (" + runs[0]["first_wrong"] + ")" if wrong else "",
            "was still there after every run" if all(r["decoy_kept"] for r in runs) else "was DELETED",
            med(runs, lambda r: r["conns"]), med(runs, lambda r: r["evicted"]), med(runs, lambda r: r["heads"]),
            med(runs, lambda r: r["bodies"]), med(runs, lambda r: r["proto"]), med(runs, lambda r: r["c4xx"]),
            med(runs, lambda r: r["reopened"]), late),
        "<!-- /hostile -->",
    ]
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    out = os.environ.get("OUT")
    if out:
        old = open(out).read() if os.path.exists(out) else ""
        a, b = old.find("<!-- hostile -->"), old.find("<!-- /hostile -->")
        # Notes written by hand inside the section (where the time goes)
        # stay, after the new figures.
        na, nb = old.find("<!-- hostile-notes -->", a), old.find("<!-- /hostile-notes -->", a)
        if a >= 0 and b > a and a < na < nb < b:
            notes = old[na:nb + len("<!-- /hostile-notes -->")]
            text = text.replace("<!-- /hostile -->", "\n" + notes + "\n<!-- /hostile -->")
        if a >= 0 and b > a:
            new = old[:a] + text + old[b + len("<!-- /hostile -->\n"):]
        else:
            new = old.rstrip("\n") + "\n\n" + text
        open(out, "w").write(new)
    ok = late == 30 and wrong == 0 and all(r["decoy_kept"] for r in runs)
    return 0 if ok and ratio_pub <= 3 and ratio_claim <= 3 else 1


if __name__ == "__main__":
    sys.exit(main())
