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

Usage: hostile_clients.py BUILD_BIN_DIR [store|metrics|all]
Loopback only; every process it starts is stopped at the end.
"""
import os
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


if __name__ == "__main__":
    bindir = sys.argv[1]
    what = sys.argv[2] if len(sys.argv) > 2 else "all"
    if what in ("store", "all"):
        store_probe(bindir)
    if what in ("metrics", "all"):
        metrics_probe(bindir)
