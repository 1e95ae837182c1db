#!/usr/bin/env python3
"""Hostile clients against a live weft-worker's two network servers.

store:   starts rank 0 of a 2-rank job (rank 1 never comes, so rank 0 sits in
         the rendezvous with its store listening) and reports rank 0's
         resident memory and thread count after 20 connections that each send
         a 5-byte frame declaring 64 MiB, and after 300 idle connections; then
         whether a client with the right token still gets its hello answered.
metrics: starts a one-rank training run with metrics on and reports how many
         scrapes succeed (and how long they take) while slow clients hold
         connections by sending one byte every 2 s.
http:    the same run against hostile HTTP: the status each malformed request
         gets (binary, HTTP/0.9, bad Content-Length, chunked, pipelined, path
         tricks, MiBs of headers) and whether the connection closes; then,
         for loads of 200 threads hammering /metrics and /ready, 300 slow
         loris clients, 300 that never read and a flood of 500 idle ones:
         steps/s against the 8 s just before, the rank's memory, descriptors,
         CPU of the "weft-metrics" thread, and a good client's scrape latency.
fd:      a rank under `ulimit -n 64` flooded with 300 idle connections: a
         scrape still answered, then SIGTERM: exit code and whether the
         checkpoint was written.

Usage: hostile_clients.py BUILD_BIN_DIR [store|metrics|http|fd|all]
Loopback only; every process it starts is stopped at the end.
"""
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def proc_status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return int(out["VmRSS"].split()[0]) // 1024, int(out["Threads"])


def wait_listening(port, proc, limit=60):
    t0 = time.time()
    while time.time() - t0 < limit:
        if proc.poll() is not None:
            raise SystemExit(f"worker exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"nothing listens on {port} after {limit} s")


def hello(token):
    tok = token.encode()
    body = b"\x01" + struct.pack("<I", len(tok)) + tok
    return struct.pack("<I", len(body)) + body


def legit_hello_ms(port, token, limit=10.0):
    t0 = time.time()
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=limit)
        s.sendall(hello(token))
        hdr = b""
        while len(hdr) < 5:
            chunk = s.recv(5 - len(hdr))
            if not chunk:
                return None
            hdr += chunk
        s.close()
        return (time.time() - t0) * 1000 if hdr[4] == 0 else None
    except OSError:
        return None


def store_probe(bindir):
    port = free_port()
    env = dict(os.environ, RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               WEFT_RDZV_TOKEN="probe-token", WEFT_ATTEMPT="0")
    out = tempfile.mkdtemp(prefix="weft-probe-")
    w = subprocess.Popen([f"{bindir}/weft-worker", "--preset", "tiny", "--out", out], env=env,
                         stdout=subprocess.DEVNULL, stderr=open(f"{out}/rank0.log", "w"))
    try:
        wait_listening(port, w)
        time.sleep(1.0)
        rss0, thr0 = proc_status(w.pid)
        print(f"store: baseline rank 0: {rss0} MB resident, {thr0} threads")
        big = []
        for _ in range(20):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(struct.pack("<I", 64 << 20) + b"\x01")  # declares 64 MiB, sends 1 byte
            big.append(s)
        time.sleep(2.0)
        rss1, thr1 = proc_status(w.pid)
        print(f"store: 20 frames declaring 64 MiB: {rss1} MB resident (+{rss1 - rss0}), {thr1} threads")
        idle = []
        for _ in range(300):
            try:
                idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            except OSError:
                break
        time.sleep(2.0)
        rss2, thr2 = proc_status(w.pid)
        print(f"store: +{len(idle)} idle connections: {rss2} MB resident, {thr2} threads")
        ms = legit_hello_ms(port, "probe-token")
        print("store: right-token hello with those connections open: " +
              (f"answered in {ms:.1f} ms" if ms is not None else "NOT answered"))
        time.sleep(6.5)
        closed = 0
        for s in big + idle:
            s.settimeout(0.01)
            try:
                if s.recv(1) == b"":
                    closed += 1
            except socket.timeout:
                pass
            except OSError:
                closed += 1
        rss3, thr3 = proc_status(w.pid)
        print(f"store: 6.5 s later: {closed} of {len(big) + len(idle)} hostile connections closed by "
              f"the store; {rss3} MB resident, {thr3} threads")
        for s in big + idle:
            s.close()
    finally:
        w.send_signal(signal.SIGKILL)
        w.wait()


def scrape_ms(port, limit):
    t0 = time.time()
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=limit)
        s.settimeout(max(0.1, limit - (time.time() - t0)))
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        return (time.time() - t0) * 1000 if data.startswith(b"HTTP/1.1 200") else None
    except OSError:
        return None


def metrics_probe(bindir):
    port = free_port()
    out = tempfile.mkdtemp(prefix="weft-probe-")
    env = dict(os.environ, WEFT_METRICS_PORT=str(port))
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    w = subprocess.Popen([f"{bindir}/weft-worker", "--preset", "tiny", "--steps", "1000000", "--out", out],
                         env=env, stdout=subprocess.DEVNULL, stderr=open(f"{out}/rank0.log", "w"))
    try:
        wait_listening(port, w)
        ms = scrape_ms(port, 10)
        print(f"metrics: scrape with no slow client: {ms and round(ms, 1)} ms")
        for nslow in (1, 8):
            loris = []
            for _ in range(nslow):
                s = socket.create_connection(("127.0.0.1", port))
                s.sendall(b"G")
                loris.append(s)
            stop = threading.Event()

            def drip():
                while not stop.wait(2.0):  # one byte every 2 s, inside any per-receive timeout
                    for s in loris:
                        try:
                            s.sendall(b"E")
                        except OSError:
                            pass

            dripper = threading.Thread(target=drip)
            dripper.start()
            ok, times, tries, t_end = 0, [], 0, time.time() + 16
            while time.time() < t_end:
                tries += 1
                ms = scrape_ms(port, 4.0)
                if ms is not None:
                    ok += 1
                    times.append(ms)
                time.sleep(0.5)
            stop.set()
            dripper.join()
            alive = 0
            for s in loris:
                s.settimeout(0.01)
                try:
                    alive += s.recv(1) != b""
                except socket.timeout:
                    alive += 1
                except OSError:
                    pass
                s.close()
            worst = f", worst {max(times):.0f} ms" if times else ""
            print(f"metrics: {nslow} slow client(s) over 16 s: {ok} of {tries} scrapes answered within 4 s"
                  f"{worst}; {alive} slow connection(s) still open at the end")
            time.sleep(1)
    finally:
        w.send_signal(signal.SIGKILL)
        w.wait()


def start_rank(bindir, port, out, ulimit=None):
    env = dict(os.environ, WEFT_METRICS_PORT=str(port))
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        env.pop(k, None)
    cfg = f"{out}/run.yaml"
    with open(cfg, "w") as f:  # ~100 steps/s on one core, a progress line every 50
        f.write("model: {vocab_size: 128, d_model: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2, max_seq_len: 32}\n"
                "train: {steps: 1000000, micro_batch: 4, seq_len: 32, log_every: 50}\n"
                "checkpoint: {every: 2000}\n")
    cmd = [f"{bindir}/weft-worker", cfg, "--out", out, "--no-resume"]
    if ulimit:
        cmd = ["sh", "-c", f'ulimit -n {ulimit} && exec "$@"', "sh"] + cmd
    w = subprocess.Popen(cmd, env=env, stdout=open(f"{out}/rank0.log", "w"), stderr=subprocess.STDOUT)
    wait_listening(port, w)
    return w


def http(port, raw, limit=10.0):
    """Sends raw bytes; returns (status line or None, closed cleanly, ms)."""
    t0 = time.time()
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=limit)
        s.settimeout(limit)
        try:
            s.sendall(raw)
        except OSError:
            pass
        data, end = b"", "EOF"
        while True:
            try:
                c = s.recv(65536)
            except socket.timeout:
                end = "timeout"
                break
            except OSError as e:
                end = type(e).__name__
                break
            if not c:
                break
            data += c
        s.close()
        line = data.split(b"\r\n", 1)[0].decode(errors="replace") if data.startswith(b"HTTP/") else None
        return line, end, (time.time() - t0) * 1000
    except OSError as e:
        return None, type(e).__name__, (time.time() - t0) * 1000


def thread_cpu(pid, name="weft-metrics"):
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            if open(f"/proc/{pid}/task/{t}/comm").read().strip() == name:
                f = open(f"/proc/{pid}/task/{t}/stat").read().rsplit(")", 1)[1].split()
                return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            pass
    return 0.0


def steps_per_s(log, t_from, t_to):
    pts = []
    day0 = time.mktime(time.localtime(t_from)[:3] + (0, 0, 0, 0, 0, -1))
    for line in open(log, errors="replace"):
        m = re.match(r"\[(\d+):(\d+):(\d+)\.(\d+)\] \[info\] step +(\d+)/", line)
        if m:
            h, mi, sec, ms, st = map(int, m.groups())
            t = day0 + h * 3600 + mi * 60 + sec + ms / 1000
            if t_from <= t <= t_to:
                pts.append((t, st))
    return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0]) if len(pts) > 1 else None


MALFORMED = [
    ("binary (TLS hello)", bytes.fromhex("1603010200010001fc0303") + bytes(64)),
    ("HTTP/0.9", b"GET /metrics\r\n"),
    ("LF line ends", b"GET /metrics HTTP/1.0\n\n"),
    ("HTTP/2.0", b"GET /metrics HTTP/2.0\r\n\r\n"),
    ("absurd Content-Length", b"GET /metrics HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n"),
    ("chunked GET", b"GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffff\r\n"),
    ("POST 2 MiB body", b"POST /metrics HTTP/1.1\r\nContent-Length: 2097152\r\n\r\n" + b"x" * (2 << 20)),
    ("50 pipelined", b"GET /ready HTTP/1.1\r\n\r\n" * 50),
    ("DELETE", b"DELETE /metrics HTTP/1.1\r\n\r\n"),
    ("HEAD /nope", b"HEAD /nope HTTP/1.1\r\n\r\n"),
    ("/metrics?x", b"GET /metrics?x HTTP/1.1\r\n\r\n"),
    ("//metrics", b"GET //metrics HTTP/1.1\r\n\r\n"),
    ("/ready/..", b"GET /ready/.. HTTP/1.1\r\n\r\n"),
    ("/%6Detrics", b"GET /%6Detrics HTTP/1.1\r\n\r\n"),
    ("100 KiB path", b"GET /" + b"a" * 100000 + b" HTTP/1.1\r\n\r\n"),
    ("8 MiB header", b"GET /metrics HTTP/1.1\r\nX: " + b"a" * (8 << 20) + b"\r\n\r\n"),
]


def http_probe(bindir):
    port = free_port()
    out = tempfile.mkdtemp(prefix="weft-probe-")
    w = start_rank(bindir, port, out)
    log = f"{out}/rank0.log"
    try:
        time.sleep(2)
        for name, raw in MALFORMED:
            line, end, ms = http(port, raw)
            print(f"http: {name:22s} -> {line}; {end} after {ms:.0f} ms")

        def hammer(path, n):
            def run(stop):
                def one():
                    while not stop.is_set():
                        http(port, f"GET {path} HTTP/1.1\r\n\r\n".encode(), 5)
                ts = [threading.Thread(target=one) for _ in range(n)]
                [t.start() for t in ts]
                [t.join() for t in ts]
            return run

        def hold(n, first, drip):
            def run(stop):
                socks = []
                for _ in range(n):
                    try:
                        s = socket.socket()
                        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
                        s.settimeout(5)
                        s.connect(("127.0.0.1", port))
                        if first:
                            s.sendall(first)
                        socks.append(s)
                    except OSError:
                        pass
                while not stop.wait(1.0):
                    for s in socks:
                        try:
                            if drip:
                                s.sendall(drip)
                        except OSError:
                            pass
                for s in socks:
                    s.close()
            return run

        loads = [("200 threads hammering /metrics", hammer("/metrics", 200)),
                 ("200 threads hammering /ready", hammer("/ready", 200)),
                 ("300 slow loris, a byte a second", hold(300, b"G", b"E")),
                 ("300 that never read", hold(300, b"GET /metrics HTTP/1.1\r\n\r\n", None)),
                 ("500 idle", hold(500, None, None))]
        for name, load in loads:
            b0 = time.time()
            time.sleep(8)
            base = steps_per_s(log, b0, time.time())
            stop = threading.Event()
            th = threading.Thread(target=load, args=(stop,))
            th.start()
            time.sleep(0.5)
            c0, l0 = thread_cpu(w.pid), time.time()
            lat = []
            while time.time() - l0 < 8:
                line, _, ms = http(port, b"GET /metrics HTTP/1.1\r\n\r\n", 10)
                lat.append(ms if line and " 200 " in line else None)
                time.sleep(0.2)
            l1 = time.time()
            cpu = (thread_cpu(w.pid) - c0) / (l1 - l0)
            rss, _ = proc_status(w.pid)
            fds = len(os.listdir(f"/proc/{w.pid}/fd"))
            stop.set()
            th.join()
            loaded = steps_per_s(log, l0, l1)
            ok = sorted(x for x in lat if x is not None)
            ratio = f"{loaded / base:.2f}" if base and loaded else "n/a"
            print(f"http: {name}: steps/s {base and round(base)} -> {loaded and round(loaded)} (ratio {ratio}); "
                  f"{rss} MB resident, {fds} descriptors, server thread {cpu:.2f} cores; good scrapes "
                  f"{len(ok)}/{len(lat)}, median {ok[len(ok) // 2] if ok else 0:.1f} ms, worst "
                  f"{ok[-1] if ok else 0:.1f} ms")
            time.sleep(2)
        n = sum(1 for _ in open(log, errors="replace"))
        print(f"http: the rank's log has {n} lines")
    finally:
        w.send_signal(signal.SIGKILL)
        w.wait()


def fd_probe(bindir):
    port = free_port()
    out = tempfile.mkdtemp(prefix="weft-probe-")
    w = start_rank(bindir, port, out, ulimit=64)
    try:
        time.sleep(2)
        idle = []
        for _ in range(300):
            try:
                idle.append(socket.create_connection(("127.0.0.1", port), timeout=2))
            except OSError:
                pass
        time.sleep(2)
        fds = len(os.listdir(f"/proc/{w.pid}/fd"))
        line, end, ms = http(port, b"GET /ready HTTP/1.1\r\n\r\n", 10)
        print(f"fd: ulimit -n 64, {len(idle)} idle connections: the rank holds {fds} descriptors; "
              f"/ready -> {line} in {ms:.0f} ms")
        t0 = time.time()
        w.send_signal(signal.SIGTERM)
        try:
            rc = w.wait(60)
        except subprocess.TimeoutExpired:
            rc = "none (hung)"
        log = open(f"{out}/rank0.log", errors="replace").read()
        print(f"fd: SIGTERM -> exit {rc} after {time.time() - t0:.1f} s; checkpoint written: "
              f"{'checkpoint written' in log}; 'Too many open files' in the log: {'Too many open files' in log}")
        for s in idle:
            s.close()
    finally:
        if w.poll() is None:
            w.send_signal(signal.SIGKILL)
            w.wait()


if __name__ == "__main__":
    bindir = sys.argv[1]
    what = sys.argv[2] if len(sys.argv) > 2 else "all"
    if what in ("store", "all"):
        store_probe(bindir)
    if what in ("metrics", "all"):
        metrics_probe(bindir)
    if what in ("http", "all"):
        http_probe(bindir)
    if what in ("fd", "all"):
        fd_probe(bindir)
