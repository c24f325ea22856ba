#!/usr/bin/env python3
"""bench/hostile.py - publish and claim latency with hostile clients connected
(make bench-hostile; issue 12 point 5).

One micd with its default limits (--max-connections 1024, --per-ip-connections
256, --idle-timeout 75, --head-timeout 10) on 127.0.0.1.  First the figures of
an idle server: durable single-event publishes (bench/loadgen, 8 connections)
and single claims (bench/workers, one worker, max 1), p50 and p99.  Then, with
2,000 idle connections open from 127.0.0.2-9 (250 from each, under the
per-address limit) and 300 slow ones from 127.0.0.10-11 that send a request
head one byte every 2 s (every connection micd closes is opened again, as an
attacker would), the same two measurements, and 30 plain requests of a client
that comes last.  Target: p99 at most 3 times the idle figure, and the late
client served 30 of 30.  Everything stays on loopback; it stops by itself.

Prints a Markdown section on stdout and, with OUT=FILE, puts it into FILE
between the markers <!-- hostile --> and <!-- /hostile --> (appended when
FILE has none).  bench/peers.py keeps that section when it rewrites
bench/RESULTS.md."""
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from peers import free_port  # noqa: E402 (bench/peers.py, next to this file)

IDLE, SLOW = 2000, 300
PUBLISHES, CLAIMS = 20000, 2000


def run_json(cmd):
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=600, check=True)
    return json.loads(out.stdout.decode().strip().splitlines()[-1])


class Attack:
    """IDLE idle and SLOW slow connections, reopened when micd closes them."""

    def __init__(self, port):
        self.port, self.stop, self.reopened = port, False, 0
        self.threads = [threading.Thread(target=self.idle, args=(h,), daemon=True) for h in range(2, 10)]
        self.threads += [threading.Thread(target=self.slow, args=(h,), daemon=True) for h in (10, 11)]

    def dial(self, host):
        s = socket.socket()
        s.bind(("127.0.0.%d" % host, 0))
        s.settimeout(5)
        try:
            s.connect(("127.0.0.1", self.port))
        except OSError:
            s.close()
            return None
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

    def start(self):
        for t in self.threads:
            t.start()

    def end(self):
        self.stop = True
        for t in self.threads:
            t.join()


def measure(url, group):
    pub = run_json(["./build/loadgen", "--url", url, "--conns", "8", "--events", str(PUBLISHES),
                    "--batch", "1", "--topic", group, "--max-seconds", "300"])
    # the raw driver: the claim latency is micd's, without libmic's own cost
    cl = run_json(["./build/workers", "--driver", "raw", "--url", url, "--group", group, "--workers", "1", "--max", "1",
                   "--rounds", str(CLAIMS), "--max-seconds", "300"])
    return pub["p50_ms"], pub["p99_ms"], cl["claim_p50_ms"], cl["claim_p99_ms"], pub["errors"]


def late_client(url):
    ok = 0
    for _ in range(30):
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=10) as r:
                ok += r.status == 200
        except OSError:
            pass
    return ok


def put_group(url, g):
    req = urllib.request.Request(url + "/v1/groups/" + g, method="PUT", data=json.dumps({"topics": [g]}).encode(),
                                 headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=10).read()


def metric(url, name):
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return int(float(line.split()[1]))
    return None


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))  # micd inherits it
    tmp = tempfile.mkdtemp(prefix="mic-hostile-")
    port = free_port()
    url = "http://127.0.0.1:%d" % port
    micd = subprocess.Popen(["./build/micd", "--listen", "127.0.0.1:%d" % port, "--data", tmp + "/mic"],
                            stdout=subprocess.DEVNULL, stderr=open(tmp + "/micd.log", "w"))
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(url + "/readyz", timeout=1).read()
                break
            except OSError:
                time.sleep(0.05)
        put_group(url, "calm")
        put_group(url, "storm")
        calm = measure(url, "calm")
        attack = Attack(port)
        attack.start()
        time.sleep(5)  # the idle ones connected, the slow ones sending
        storm = measure(url, "storm")
        late = late_client(url)
        conns = metric(url, "mic_http_connections")
        evicted = metric(url, 'mic_http_connections_closed_total{reason="evicted"}')
        heads = metric(url, 'mic_http_connections_closed_total{reason="head"}')
        attack.end()
    finally:
        micd.terminate()
        micd.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)
    ratio_pub, ratio_claim = storm[1] / calm[1], storm[3] / calm[3]
    lines = [
        "<!-- hostile -->",
        "## Hostile clients (`make bench-hostile`)",
        "",
        "bench/hostile.py on %s: one micd with its default limits; %d idle connections from 127.0.0.2-9 "
        "(250 each) and %d that send a head one byte every 2 s from 127.0.0.10-11, every closed one "
        "opened again (%d reopened in all). Publishes: bench/loadgen, 8 connections, %d single-event "
        "durable POSTs; claims: bench/workers --driver raw, one worker, %d claims of max 1." % (
            time.strftime("%Y-%m-%d"), IDLE, SLOW, attack.reopened, PUBLISHES, CLAIMS),
        "",
        "| | idle server | under attack | ratio (target <= 3x) |",
        "|---|---|---|---|",
        "| publish p50 / p99 (ms) | %.2f / %.2f | %.2f / %.2f | %.2fx |" % (calm[0], calm[1], storm[0], storm[1], ratio_pub),
        "| claim p50 / p99 (ms) | %.2f / %.2f | %.2f / %.2f | %.2fx |" % (calm[2], calm[3], storm[2], storm[3], ratio_claim),
        "| publish errors | %d | %d | |" % (calm[4], storm[4]),
        "",
        "A client arriving last got %d of 30 requests answered; micd held %s connections, had closed %s "
        "idle ones to make room and %s slow heads." % (late, conns, evicted, heads),
        "<!-- /hostile -->",
    ]
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    out = os.environ.get("OUT")
    if out:
        old = open(out).read() if os.path.exists(out) else ""
        a, b = old.find("<!-- hostile -->"), old.find("<!-- /hostile -->")
        if a >= 0 and b > a:
            new = old[:a] + text + old[b + len("<!-- /hostile -->\n"):]
        else:
            new = old.rstrip("\n") + "\n\n" + text
        open(out, "w").write(new)
    return 0 if late == 30 and ratio_pub <= 3 and ratio_claim <= 3 else 1


if __name__ == "__main__":
    sys.exit(main())
