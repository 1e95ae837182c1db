#!/usr/bin/env python3
"""The GPU run's driver (tests/gpu/gpu_run.py) dry-run on the CPU: what comes
back from the GPU machine must fit its limits (at most 8 files, none deeper
than two folders, names of letters, digits, '.', '_' and '-') whatever
happens, and a cut must keep what finished.

1. Cut by the caller: the driver is sent SIGTERM while multirank is half way
   (two checks recorded): multirank.json still parses, holds those checks and
   says it is incomplete; run.json marks the phase failed and cut; the
   tarball holds the phase's log; the phases after it are not run.
2. Cut by the budget: a budget too small for multirank stops it at its
   deadline (checks left out are named, whatever the host's speed), and the
   next phase still runs in what is left.
3. A broken bundle (a binary whose library is missing) fails the preflight,
   and nothing else runs.
4. multirank_check.py's staged figures can fail: on the CPU nothing is staged,
   so --expect-staged fails dp2 although its losses and weights match.

usage: python3 gpu_run_test.py BIN_DIR
"""
import json, lzma, os, re, shutil, signal, subprocess, sys, tarfile, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVER = os.path.join(HERE, "gpu_run.py")
failures = []


def expect(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def returned(out):
    """What the GPU machine would return of `out`, and what it would leave out."""
    files, bad = [], []
    for root, dirs, names in os.walk(out):
        depth = os.path.relpath(root, out).count(os.sep) + (root != out)
        for n in names:
            p = os.path.relpath(os.path.join(root, n), out)
            if depth > 2 or not re.fullmatch(r"[A-Za-z0-9._-]+", n):
                bad.append(p)
            files.append(p)
    return files, bad


def driver(bin_dir, work, *extra):
    out, logs = os.path.join(work, "out"), os.path.join(work, "logs")
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, DRIVER, "--device", "cpu", "--bin", bin_dir, "--out", out, "--logs", logs,
           "--multirank-args", "--steps 6 --allow-skip hf", *extra]
    return cmd, out, logs


def load(path):
    with open(path) as f:
        return json.load(f)


def cut_by_signal(bin_dir, work):
    cmd, out, logs = driver(bin_dir, work, "--phases", "preflight,multirank,gpu_tests", "--budget", "300")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t0 = time.time()
    checks = 0
    while time.time() - t0 < 240 and p.poll() is None:
        try:
            checks = len(load(os.path.join(out, "multirank.json"))["checks"])
        except (OSError, ValueError, KeyError):
            pass
        if checks >= 2:
            break
        time.sleep(0.2)
    expect(checks >= 2 and p.poll() is None, f"multirank recorded {checks} checks while running")
    p.send_signal(signal.SIGTERM)
    text = p.communicate(timeout=60)[0]
    expect(p.returncode == 1, f"a cut run exits 1: {p.returncode}")
    files, bad = returned(out)
    expect(len(files) <= 8 and not bad, f"at most 8 files, two folders down: {sorted(files)} {bad}")
    mr = load(os.path.join(out, "multirank.json"))
    expect(len(mr["checks"]) >= checks and mr["complete"] is False,
           f"multirank.json keeps the {len(mr['checks'])} finished checks and says it is incomplete")
    run = load(os.path.join(out, "run.json"))
    phases = {x["name"]: x for x in run["phases"]}
    expect(phases.get("multirank", {}).get("status") == "failed" and "cut" in phases["multirank"]["detail"],
           f"run.json: multirank failed, cut: {phases.get('multirank')}")
    expect("gpu_tests" not in phases and run["passed"] is False, "the phase after the cut did not run")
    with tarfile.open(os.path.join(out, "logs.tar.gz")) as t:
        names = t.getnames()
    expect("logs/multirank.log" in names and any(n.startswith("logs/multirank/") for n in names),
           f"the tarball holds the phase's logs ({len(names)} entries)")
    md = open(os.path.join(out, "summary.md")).read()
    expect("| gpu_tests | not run |" in md, "summary.md lists the phase not run")
    print(text[-1500:])


def cut_by_budget(bin_dir, work):
    # 26 s: multirank's share is 25 s, so it starts no check after its first
    # second (its deadline keeps 25 s for the check under way): the first
    # check (a reference run, a 4-rank run, two exports) always outlasts that.
    cmd, out, logs = driver(bin_dir, work, "--phases", "preflight,multirank,preflight", "--budget", "26")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=200)
    expect(r.returncode == 1, f"an incomplete run exits 1: {r.returncode}")
    mr = load(os.path.join(out, "multirank.json"))
    expect(mr["complete"] is False and mr["not_run"], f"multirank stopped at its deadline; not run: {mr['not_run']}")
    expect(mr["checks"] and mr["info"] is not None, f"{len(mr['checks'])} checks recorded, with the run's info")
    run = load(os.path.join(out, "run.json"))
    names = [x["name"] for x in run["phases"]]
    expect(names == ["preflight", "multirank", "preflight"], f"the phase after it still ran: {names}")
    expect(run["seconds"] <= 26 + 15, f"the budget held: {run['seconds']:.0f} s of 26")
    files, bad = returned(out)
    expect(len(files) <= 8 and not bad, f"at most 8 files: {sorted(files)}")


def broken_bundle(bin_dir, work):
    broken = os.path.join(work, "broken-bundle", "bin")
    lib_dir = os.path.join(work, "broken-bundle", "lib")
    shutil.rmtree(os.path.dirname(broken), ignore_errors=True)
    os.makedirs(broken)
    os.makedirs(lib_dir)
    shutil.copy(os.path.join(bin_dir, "weft-worker"), broken)
    # A binary that needs a library nobody has: what a bundle missing a .so looks like to ldd.
    exe = os.path.join(broken, "needs-missing-lib")
    lib_src, src = os.path.join(work, "gone.c"), os.path.join(work, "m.c")
    with open(lib_src, "w") as f:
        f.write("int gone(void) { return 0; }\n")
    with open(src, "w") as f:
        f.write("int gone(void);\nint main(void) { return gone(); }\n")
    lib = os.path.join(work, "libweftgone.so")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", lib, lib_src], check=True)
    subprocess.run(["cc", "-o", exe, src, "-L" + work, "-lweftgone"], check=True)
    # As prepare.sh packs a large library: the driver unpacks it before its preflight.
    with open(lib, "rb") as src, lzma.open(os.path.join(lib_dir, "libweftgone.so.xz"), "wb") as dst:
        dst.write(src.read())
    os.remove(lib)
    env = dict(os.environ, LD_LIBRARY_PATH=lib_dir)
    cmd, out, logs = driver(broken, work, "--phases", "preflight", "--budget", "60")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    run = load(os.path.join(out, "run.json"))
    expect(r.returncode == 0 and run["info"]["unpacked_libraries"] == ["libweftgone.so"],
           f"a packed library is unpacked before the preflight: {run['info'].get('unpacked_libraries')} {run['phases']}")
    os.remove(os.path.join(lib_dir, "libweftgone.so"))
    os.remove(os.path.join(lib_dir, "libweftgone.so.xz"))
    cmd, out, logs = driver(broken, work, "--phases", "preflight,multirank", "--budget", "60")
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    took = time.time() - t0
    run = load(os.path.join(out, "run.json"))
    expect(r.returncode == 1 and [x["name"] for x in run["phases"]] == ["preflight"],
           f"a missing library fails the preflight and stops the run: {[(x['name'], x['status']) for x in run['phases']]}")
    expect("libweftgone.so" in run["phases"][0]["detail"], f"it names the missing library: {run['phases'][0]['detail']}")
    expect(took < 15, f"in under 15 s: {took:.1f} s")


def staged_demanded(bin_dir, work):
    out = os.path.join(work, "staged")
    r = subprocess.run([sys.executable, os.path.join(HERE, "multirank_check.py"), "--bin", bin_dir, "--out", out,
                        "--device", "cpu", "--steps", "4", "--only", "dp2", "--expect-staged"],
                       capture_output=True, text=True, timeout=120)
    rec = {c["name"]: c for c in load(os.path.join(out, "multirank.json"))["checks"]}.get("dp2", {})
    expect(r.returncode == 1 and rec.get("ok") is False and rec.get("staged_collectives") == 0,
           f"--expect-staged fails a run that staged nothing: exit {r.returncode}, {rec.get('staged_collectives')}")
    expect(rec.get("loss_rel_diff", 1) <= 0.02 and rec.get("weight_rel_diff", 1) <= 0.03,
           "and only for that: its losses and weights match")


def main():
    bin_dir = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory() as work:
        staged_demanded(bin_dir, work)
        broken_bundle(bin_dir, work)
        cut_by_signal(bin_dir, work)
        cut_by_budget(bin_dir, work)
    if failures:
        sys.exit(f"{len(failures)} failed")
    print("all passed")


if __name__ == "__main__":
    main()
