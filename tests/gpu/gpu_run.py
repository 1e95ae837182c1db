#!/usr/bin/env python3
"""The GPU run: every GPU check of weft in one budgeted command.

usage (on the GPU machine, from the project root, the bundle in .gpu/):
  python3 tests/gpu/gpu_run.py [--set first|second] [--budget 540] [--out DIR] [--logs DIR]
                               [--phases a,b,...] [--device cuda|cpu] [--bin DIR]

GPU time is short and what comes back from the GPU machine is a small output
folder: at most 8 files, at most two folders deep. So:

- Results: the logs stay under --logs (/tmp/weft-gpu-logs); --out gets
  run.json (provenance, every phase's status, limit and seconds), summary.md,
  logs.tar.gz (the logs, refreshed after every phase) and one JSON per phase
  (gpu_tests.json, multirank.json, speed.json, sanitizers.json, hf.json),
  each written as its checks finish: a cut keeps what finished. At most 8
  files, all at the top of --out.
- Budget: --budget seconds in all (default 540, under the 600 s a command may
  run). Each phase gets its share of the time left, by weight, never more than
  its cap, and returns what it does not use to the phases after it. A phase
  that runs past its share is stopped (its JSON keeps what finished).
- Preflight first (at most 15 s): every binary's libraries resolve (ldd), the
  GPU is seen, cuDNN loads, the bundle names its commit; a broken bundle ends
  the run there, before GPU time goes to phases that cannot pass.
  WEFT_ATTENTION=cudnn is set for every weft run: no silent SIMT fallback.
- Sets: `first` (the default) is what the next GPU run does first:
  preflight, gpu_tests (the GPU tests, the two-process staged test among
  them), multirank (every strategy on 2-4 ranks of the GPU against one rank,
  newest code first), speed (weft vs torch.compile on the ~1B config and
  gpt2-124m mb 4, round by round, 3 repeats, with the loss agreement).
  `second` is the follow-up while the machine is still up: gpt2-124m mb 16
  and weft's memory variants, the sanitizers over the kernels, transformers
  loading a GPU run's checkpoint.

Exit 0 only when every phase that ran passed and none was left out. With
--device cpu (tests/gpu/CMakeLists.txt: gpu.driver_dry_run) the driver runs
its CPU-capable phases on the CPU: how it is tested without a GPU.
"""
import argparse
import glob
import json
import lzma
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# name: (weight, cap seconds). A phase's limit is min(cap, left * weight / weights still to run).
PHASES = {
    "preflight": (0, 15),
    "gpu_tests": (1, 90),
    "multirank": (3, 200),
    "speed": (4, 330),
    "speed_more": (4, 330),
    "sanitizers": (2, 200),
    "hf": (1, 120),
}
# The GPU tests of code that has never run on a GPU, first: a cut phase keeps them.
GPU_TESTS_FIRST = ("StagedOnOneGpu.*:SoloCommunicatorGpu.*:CudaOps.*:CudaOpsDeathTest.*:StreamWaitsGpu.*:"
                   "GpuTraining.IspOnOneGpuTrainsLikeDpAndResumes:GpuTraining.PointwiseRecompute*:"
                   "GpuTraining.PackedDocumentsMatchTheCpuModel:GpuTraining.Llama3RopeAndHeadDimMatchTheCpuModel:"
                   "CudnnAttention.*")
SETS = {
    "first": ["preflight", "gpu_tests", "multirank", "speed"],
    "second": ["preflight", "speed_more", "sanitizers", "hf"],
}
OUT_FILES = 8  # what the GPU machine returns


def now():
    return time.monotonic()


class Driver:
    def __init__(self, args):
        self.a = args
        self.t0 = now()
        self.phases = []  # dicts: name, status, seconds, limit, detail
        self.info = {}
        self.child = None
        self.stopping = False

    # ------------------------------------------------------------ plumbing

    def left(self):
        return self.a.budget - (now() - self.t0)

    def log(self, name):
        return os.path.join(self.a.logs, name + ".log")

    def out(self, name):
        return os.path.join(self.a.out, name)

    def run(self, cmd, log, limit, env=None):
        """Runs cmd with output to log; returns (exit code, seconds, cut). A
        cut run (past `limit`, or the driver told to stop) is killed with its
        whole process group."""
        t = now()
        with open(log, "a") as f:
            f.write("+ " + " ".join(cmd) + "\n")
            f.flush()
            self.child = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT,
                                          env=dict(os.environ, **(env or {})), start_new_session=True)
            try:
                rc = self.child.wait(timeout=max(1.0, limit))
                cut = False
            except subprocess.TimeoutExpired:
                self.kill_child()
                rc, cut = self.child.wait(), True
                f.write(f"\ngpu_run: stopped after {limit:.0f} s (the phase's share of the budget)\n")
        self.child = None
        return rc, now() - t, cut or self.stopping

    def kill_child(self):
        if self.child and self.child.poll() is None:
            try:
                os.killpg(self.child.pid, signal.SIGTERM)
                self.child.wait(timeout=3)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                try:
                    os.killpg(self.child.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def write_json(self, name, obj):
        tmp = self.out(name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=1)
        os.replace(tmp, self.out(name))

    def publish(self):
        """run.json, summary.md and logs.tar.gz as they stand (after every phase)."""
        total = now() - self.t0
        self.write_json("run.json", {"info": self.info, "set": self.a.set, "budget_s": self.a.budget,
                                     "seconds": total, "phases": self.phases,
                                     "passed": all(p["status"] == "passed" for p in self.phases)
                                     and len(self.phases) == len(self.a.phase_list)})
        lines = [f"# weft GPU run ({self.a.set})", "",
                 f"commit {self.info.get('weft', {}).get('commit', 'unknown')}"
                 f"{' (dirty)' if self.info.get('weft', {}).get('dirty') else ''}, "
                 f"{self.info.get('gpu', '?')}, driver {self.info.get('driver', '?')}, "
                 f"{total:.0f} s of a {self.a.budget:.0f} s budget", "",
                 "| phase | status | seconds | limit | detail |", "|---|---|---|---|---|"]
        for p in self.phases:
            lines.append(f"| {p['name']} | {p['status']} | {p['seconds']:.0f} | {p['limit']:.0f} | {p.get('detail', '')} |")
        for p in self.a.phase_list[len(self.phases):]:
            lines.append(f"| {p} | not run | | | |")
        speed_md = os.path.join(self.a.logs, "speed", "speed.md")
        if os.path.exists(speed_md):
            lines += ["", "## speed", "", open(speed_md).read()]
        with open(self.out("summary.md"), "w") as f:
            f.write("\n".join(lines) + "\n")
        tmp = self.out("logs.tar.gz.tmp")
        with tarfile.open(tmp, "w:gz") as t:
            t.add(self.a.logs, arcname="logs", filter=lambda ti: None if ti.size > 4 << 20 else ti)
        os.replace(tmp, self.out("logs.tar.gz"))

    # -------------------------------------------------------------- phases

    def limit(self, name, remaining):
        weight, cap = PHASES[name]
        if weight == 0:
            return min(cap, max(self.left(), 1))
        weights = sum(PHASES[n][0] for n in remaining)
        return max(1.0, min(cap, self.left() * weight / weights))

    def preflight(self, limit):
        problems, facts = [], {}
        bins = sorted(glob.glob(os.path.join(self.a.bin, "*")))
        if not bins:
            problems.append(f"no binaries in {self.a.bin}")
        for b in bins:
            try:
                r = subprocess.run(["ldd", b], capture_output=True, text=True, timeout=5)
                missing = [l.split()[0] for l in r.stdout.splitlines() if "not found" in l]
                if missing:
                    problems.append(f"{os.path.basename(b)}: libraries not found: {', '.join(missing)}")
            except (OSError, subprocess.TimeoutExpired) as e:
                problems.append(f"ldd {os.path.basename(b)}: {e}")
        build = os.path.join(os.path.dirname(self.a.bin), "build-info.json")
        try:
            with open(build) as f:
                self.info["weft"] = json.load(f)
            if self.info["weft"].get("commit", "unknown") == "unknown":
                problems.append(f"{build} names no commit")
        except (OSError, ValueError) as e:
            self.info["weft"] = {"commit": "unknown"}
            if self.a.device == "cuda":
                problems.append(f"no build record ({e}): the bundle's commit is unknown")
        if self.a.device == "cuda":
            try:
                r = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                    "--format=csv,noheader"], capture_output=True, text=True, timeout=10)
                first = r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else ""
                if not first:
                    problems.append(f"nvidia-smi sees no GPU: {r.stderr.strip()}")
                else:
                    name, driver, mem = [x.strip() for x in first.split(",")]
                    self.info.update(gpu=name, driver=driver, gpu_memory=mem)
            except (OSError, subprocess.TimeoutExpired) as e:
                problems.append(f"nvidia-smi: {e}")
            if os.environ.get("WEFT_ATTENTION") != "cudnn":
                problems.append("WEFT_ATTENTION is not cudnn: weft could fall back to its SIMT attention")
            probe = ("import ctypes, json, sys\n"
                     "out = {}\n"
                     "for lib, key in (('libcudnn.so.9', 'cudnn'), ('libnccl.so.2', 'nccl')):\n"
                     "    try:\n"
                     "        h = ctypes.CDLL(lib)\n"
                     "        fn = getattr(h, 'cudnnGetVersion', None) if key == 'cudnn' else None\n"
                     "        if key == 'cudnn':\n"
                     "            fn.restype = ctypes.c_size_t; out[key] = fn()\n"
                     "        else:\n"
                     "            v = ctypes.c_int(); h.ncclGetVersion(ctypes.byref(v)); out[key] = v.value\n"
                     "    except Exception as e:\n"
                     "        out[key + '_error'] = str(e)\n"
                     "for mod in ('torch', 'transformers'):\n"
                     "    try:\n"
                     "        out[mod] = __import__(mod).__version__\n"
                     "    except Exception as e:\n"
                     "        out[mod + '_error'] = str(e)\n"
                     "print(json.dumps(out))\n")
            try:
                r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=12)
                facts = json.loads(r.stdout.strip().splitlines()[-1])
            except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as e:
                facts = {"probe_error": str(e)}
            self.info.update(facts)
            if "cudnn" not in facts:
                problems.append(f"cuDNN does not load: {facts.get('cudnn_error', facts)}")
            if "nccl" not in facts:
                problems.append(f"NCCL does not load: {facts.get('nccl_error', facts)}")
            try:
                nvcc = subprocess.run(["nvcc", "--version"], capture_output=True, text=True, timeout=5).stdout
                self.info["cuda"] = nvcc.strip().splitlines()[-1]
            except (OSError, subprocess.TimeoutExpired, IndexError):
                pass
        with open(self.log("preflight"), "w") as f:
            f.write(json.dumps({"info": self.info, "problems": problems}, indent=1) + "\n")
        with open(os.path.join(self.a.logs, "info.json"), "w") as f:
            json.dump(self.info, f, indent=1)
        return ("failed" if problems else "passed"), "; ".join(problems)

    def gpu_tests(self, limit):
        """The newest tests first, then the rest, in the phase's limit; the
        console log says each test's verdict even when the run is cut."""
        gtest = os.path.join(self.a.bin, "weft_gpu_tests")
        rc, secs, cut = self.run([gtest, "--gtest_brief=0", f"--gtest_filter={GPU_TESTS_FIRST}"],
                                 self.log("gpu_tests"), limit)
        if not cut:
            rc2, secs2, cut = self.run([gtest, "--gtest_brief=0", f"--gtest_filter=-{GPU_TESTS_FIRST}"],
                                       self.log("gpu_tests"), self.left_in_phase(limit))
            rc, secs = rc or rc2, secs + secs2
        tests = parse_gtest_log(self.log("gpu_tests"))
        skipped = [t for t, s in tests.items() if s == "skipped"]
        failed = [t for t, s in tests.items() if s == "failed"]
        self.write_json("gpu_tests.json", {"info": self.info, "exit": rc, "cut": cut, "seconds": secs,
                                           "tests": tests, "failed": failed, "skipped": skipped})
        ok = rc == 0 and not cut and not failed and not skipped and tests
        detail = f"{len(tests)} tests, {len(failed)} failed, {len(skipped)} skipped" + (", cut" if cut else "")
        return ("passed" if ok else "failed"), detail

    def python_phase(self, name, cmd, limit, json_name):
        rc, secs, cut = self.run(cmd, self.log(name), limit)
        try:
            with open(self.out(json_name)) as f:
                rec = json.load(f)
        except (OSError, ValueError):
            rec = None
        if rec is None:
            self.write_json(json_name, {"info": self.info, "exit": rc, "cut": cut,
                                        "error": f"no record written (see logs/{name}.log)"})
        detail = f"exit {rc}" + (", cut" if cut else "")
        if rec and "checks" in rec:
            detail += f", {len(rec['checks']) - rec['failed']} of {len(rec['checks'])} checks passed"
            if rec.get("not_run"):
                detail += f", {len(rec['not_run'])} not run"
        if rec and rec.get("failed") and isinstance(rec["failed"], list):
            detail += "; " + "; ".join(rec["failed"][:3])
        return ("passed" if rc == 0 and not cut else "failed"), detail

    def multirank(self, limit):
        # Stop starting checks a little before the phase's limit, so the
        # last one finishes and is recorded instead of being cut.
        return self.python_phase("multirank", [
            sys.executable, "tests/gpu/multirank_check.py", "--bin", self.a.bin, "--out", self.a.logs,
            "--json", self.out("multirank.json"), "--device", self.a.device, "--info", self.info_path(),
            "--deadline", str(max(1, limit - 25)), "--run-timeout", str(max(10, min(90, limit / 3)))]
            + self.a.multirank_args, limit, "multirank.json")

    def speed_cmd(self, limit, extra):
        return [sys.executable, "tests/bench/gpu/speed.py", "--bin", self.a.bin,
                "--out", os.path.join(self.a.logs, "speed"), "--json", self.out("speed.json"),
                "--build-info", os.path.join(os.path.dirname(self.a.bin), "build-info.json"),
                "--info", self.info_path(), "--deadline", str(max(1, limit - 60)),
                "--step-timeout", str(max(30, min(150, limit / 2)))] + extra

    def speed(self, limit):
        return self.python_phase("speed", self.speed_cmd(limit, [
            "--configs", "llama-1b-mb4,gpt2-124m-mb4", "--contestants", "weft,compile", "--repeats", "3"]),
            limit, "speed.json")

    def speed_more(self, limit):
        return self.python_phase("speed", self.speed_cmd(limit, [
            "--configs", "gpt2-124m-mb16,gpt2-124m-mb4", "--contestants", "weft,compile,weft-whole,weft-kept",
            "--repeats", "3", "--no-agreement"]), limit, "speed.json")

    def sanitizers(self, limit):
        tool = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
        gtest = os.path.join(self.a.bin, "weft_gpu_tests")
        # The kernels, and cuDNN's attention under memcheck (its engines load slowly under it).
        runs = [("memcheck", "CudaOps.*:CudaAllocator.*"),
                ("racecheck", "CudaOps.Attention*:CudaOps.RmsNorm:CudaOps.CrossEntropy"),
                ("synccheck", "CudaOps.*"),
                ("memcheck", "CudnnAttention.MatchesTheCpuOpAndTheSimtKernels")]
        results, status = [], "passed"
        for i, (kind, filt) in enumerate(runs):
            share = self.left_in_phase(limit) / (len(runs) - i)
            rc, secs, cut = self.run([tool, "--tool", kind, "--error-exitcode", "1", gtest, f"--gtest_filter={filt}"],
                                     self.log(f"sanitizer-{i}-{kind}"), share)
            results.append({"tool": kind, "filter": filt, "exit": rc, "cut": cut, "seconds": secs})
            self.write_json("sanitizers.json", {"info": self.info, "runs": results})
            if rc != 0 or cut:
                status = "failed"
        return status, ", ".join(f"{r['tool']} {'ok' if r['exit'] == 0 and not r['cut'] else 'FAIL'}" for r in results)

    def hf(self, limit):
        """transformers loads GPU runs' checkpoints: the Llama 2 shape, then
        Llama 3 RoPE scaling with head_dim and tied embeddings."""
        runs = []
        for variant in ("llama2", "llama3"):
            rc, secs, cut = self.run([sys.executable, "tests/reference/hf_transformers_check.py", "--bin", self.a.bin,
                                      "--workdir", os.path.join("/tmp", "weft-hf-work-" + variant), "--device", "cuda",
                                      "--weft-device", "cuda", "--variant", variant], self.log("hf"),
                                     self.left_in_phase(limit))
            runs.append({"variant": variant, "exit": rc, "cut": cut, "seconds": secs})
            self.write_json("hf.json", {"info": self.info, "runs": runs,
                                        "log_tail": open(self.log("hf")).read()[-3000:]})
        ok = all(r["exit"] == 0 and not r["cut"] for r in runs)
        return ("passed" if ok else "failed"), ", ".join(f"{r['variant']} exit {r['exit']}" for r in runs)

    def left_in_phase(self, limit):
        return max(1.0, limit - (now() - self.phase_t0))

    def info_path(self):
        return os.path.join(self.a.logs, "info.json")

    # ---------------------------------------------------------------- run

    def main(self):
        os.makedirs(self.a.out, exist_ok=True)
        shutil.rmtree(self.a.logs, ignore_errors=True)
        os.makedirs(self.a.logs)
        with open(self.info_path(), "w") as f:
            json.dump(self.info, f)
        signal.signal(signal.SIGTERM, self.on_signal)
        signal.signal(signal.SIGINT, self.on_signal)
        self.info["unpacked_libraries"] = unpack_libs(os.path.join(os.path.dirname(self.a.bin), "lib"))
        todo = list(self.a.phase_list)
        while todo and not self.stopping:
            name = todo[0]
            limit = self.limit(name, todo)
            if self.left() < 5:
                break
            print(f"gpu_run: {name} (limit {limit:.0f} s, {self.left():.0f} s left)", flush=True)
            self.phase_t0 = now()
            try:
                status, detail = getattr(self, name)(limit)
            except Exception as e:  # noqa: BLE001 - one broken phase must not lose the others' records
                status, detail = "failed", f"{type(e).__name__}: {e}"
            self.phases.append({"name": name, "status": status, "seconds": now() - self.phase_t0,
                                "limit": limit, "detail": detail})
            print(f"gpu_run: {name} {status} in {now() - self.phase_t0:.0f} s: {detail}", flush=True)
            todo.pop(0)
            self.publish()
            if name == "preflight" and status != "passed":
                print("gpu_run: the preflight failed; no phase can pass on this bundle", flush=True)
                break
        self.publish()
        files = os.listdir(self.a.out)
        assert len(files) <= OUT_FILES, files
        print(open(self.out("summary.md")).read(), flush=True)
        ok = len(self.phases) == len(self.a.phase_list) and all(p["status"] == "passed" for p in self.phases)
        return 0 if ok else 1

    def on_signal(self, signum, _frame):
        self.stopping = True
        self.kill_child()


def unpack_libs(lib_dir):
    """The bundle's large libraries travel xz-compressed (tests/gpu/prepare.sh:
    Debian's OpenBLAS alone is 35 MiB of the 64 that may travel): NAME.xz
    becomes NAME beside it, once. LD_LIBRARY_PATH already names the folder
    (.gpu/env.sh); the loader reads it when each program starts."""
    unpacked = []
    for packed in sorted(glob.glob(os.path.join(lib_dir, "*.xz"))):
        target = packed[:-3]
        if os.path.exists(target):
            continue
        with lzma.open(packed, "rb") as src, open(target + ".tmp", "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.replace(target + ".tmp", target)
        unpacked.append(os.path.basename(target))
    return unpacked


def parse_gtest_log(path):
    """test name -> passed | failed | skipped, from gtest's console output
    (complete even when the binary was killed half way)."""
    tests = {}
    for line in open(path, errors="replace"):
        for mark, status in (("[       OK ] ", "passed"), ("[  FAILED  ] ", "failed"), ("[  SKIPPED ] ", "skipped")):
            if line.startswith(mark):
                name = line[len(mark):].split(" (")[0].strip()
                if name and not name[0].isdigit():
                    tests[name] = status
    return tests


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--set", default="first", choices=sorted(SETS))
    ap.add_argument("--phases", help="comma-separated phases instead of the set's")
    ap.add_argument("--budget", type=float, default=540)
    ap.add_argument("--out", default=os.environ.get("OUT", "gpu-out"))
    ap.add_argument("--logs", default="/tmp/weft-gpu-logs")
    ap.add_argument("--bin", default=os.path.join(ROOT, ".gpu", "bin"))
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--multirank-args", default="", help="extra options for multirank_check.py")
    a = ap.parse_args()
    a.bin = os.path.abspath(a.bin)
    a.out, a.logs = os.path.abspath(a.out), os.path.abspath(a.logs)
    a.phase_list = a.phases.split(",") if a.phases else SETS[a.set]
    unknown = [p for p in a.phase_list if p not in PHASES]
    if unknown:
        sys.exit(f"gpu_run: unknown phase(s) {unknown}; known: {', '.join(PHASES)}")
    a.multirank_args = a.multirank_args.split()
    if a.device == "cuda":
        os.environ.setdefault("WEFT_ATTENTION", "cudnn")
    sys.exit(Driver(a).main())


if __name__ == "__main__":
    main()
