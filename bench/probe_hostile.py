"""Issue 23's adversarial probes, each run ``--runs`` times in fresh processes, outcomes counted.

Every probe is one ``hdp compile`` (tiny conv model, ``heft``; the modeled two-device target, or
``virtual`` where the failure needed real devices) in a fresh directory, in a fresh process:

- ``full disk``: ``-o`` on a 2 MiB tmpfs left with 4 KiB; ``full disk, late``: the same with an old
  output there and the up-front check switched off (as if the disk filled while hdp ran: OpenVINO's
  ``basic_ios::clear: iostream error``); ``no inodes`` and ``no inodes, late`` likewise
- ``-o name 250 bytes`` (written), ``-o name 256 bytes``, ``-o over PATH_MAX``, ``--cache-dir over PATH_MAX``
- ``nesting 100,000`` (in the model's rt_info), ``2^31 dimension`` (``virtual``), ``FIFO as MODEL``
- ``FIFO in the cache`` (every pass entry a FIFO), ``poisoned cache`` (a valid-checksum entry holding
  another model's lowered module; ``virtual``; run twice: healed, then clean)
- ``HOME a file, package read-only`` (Numba's "no locator available"; a read-only bind mount of the
  checkout, root only)
- issue 35's families: a 400-digit memory (A), ``--requests 10^20`` (B), cost-graph bytes of 10^30
  (C), ``--time-limit inf`` (E), a device count of 1,000,000 (a hang then), SIGINT at a random
  moment of a compile with four outputs (F: all or none, nothing in its ``TMPDIR``)

A run counts as *expected* when its exit code is the one the probe expects and its last line
names what the probe is about (and, for the late disk probes, the old output is intact). Probes
that need ``mount`` are reported as skipped where it is refused.

    python bench/probe_hostile.py --runs 5          # ~8 min
    python bench/probe_hostile.py --runs 20 --only "F: SIGINT at 0.3-4 s, four outputs"
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

NO_SPACE_CHECK = "import hdp.cli.common as c; c._check_space = lambda *a: None; from hdp.cli.main import main; main()"


class Skip(Exception):
    pass


def _run(argv, env, timeout, code=None, cwd=None, wrap=None):
    cmd = [sys.executable, "-c", code, *map(str, argv)] if code else [sys.executable, "-m", "hdp", *map(str, argv)]
    if wrap:
        cmd = wrap + cmd
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=cwd)
    except subprocess.TimeoutExpired:
        return {"rc": None, "hung": True, "err": "", "seconds": timeout}
    return {"rc": p.returncode, "hung": False, "err": p.stderr, "out": p.stdout, "seconds": time.perf_counter() - t0}


def _base(d: Path, env: dict) -> tuple[Path, Path]:
    import hostile
    from conftest import build_branchy, build_mlp
    from placement_helpers import MODELED_TOML

    model = hostile.save(build_branchy(), d / "branchy.xml")
    hostile.save(build_mlp(), d / "mlp.xml")
    (d / "m2.toml").write_text(MODELED_TOML)
    return model, d / "m2.toml"


def probes():
    """name -> function(dir, env, timeout) -> (result, expected code, needles, extra check)."""
    import hostile

    def compile_(model, out, target, *extra):
        return ["compile", model, "-o", out, "--target", target, "--method", "heft", "-q", "--no-cache", *extra]

    def full_disk(d, env, t, late=False, inodes=False):
        model, tgt = _base(d, env)
        try:
            with hostile.small_fs(d / "fs", "2m", 64 if inodes else None) as fs:
                out = fs / "p.xml"
                old = None
                if late:
                    r = _run(compile_(model, out, tgt), env, t)
                    if r["rc"] != 0:
                        return r, 0, ("(could not write the old output)",), None
                    old = (out.read_bytes(), out.with_suffix(".bin").read_bytes())
                if inodes:
                    n = hostile.use_inodes(fs)
                    for k in (n - 1, n - 2):
                        (fs / "inodes" / str(k)).unlink()
                else:
                    hostile.fill(fs, 4096 if not late else 0)
                r = _run(compile_(model, out, tgt), env, t, code=NO_SPACE_CHECK if late else None)
                kept = old is None or (out.read_bytes(), out.with_suffix(".bin").read_bytes()) == old
                return r, 2, (("inodes",) if inodes else ("no space left on device",)), kept
        except hostile.MountRefused as e:
            raise Skip(str(e)) from None

    def name(d, env, t, n):
        model, tgt = _base(d, env)
        return _run(compile_(model, d / hostile.long_name(n), tgt), env, t), (0 if n <= 255 else 2), ("255",), None

    def path_max(d, env, t):
        model, tgt = _base(d, env)
        return _run(compile_(model, hostile.long_path(d, 4200), tgt), env, t), 2, ("PATH_MAX",), None

    def cache_max(d, env, t):
        model, tgt = _base(d, env)
        argv = compile_(model, d / "p.xml", tgt)[:-1] + ["--cache-dir", hostile.long_path(d, 4200, leaf="cache")]
        r = _run(argv, env, t)
        return r, 2, ("--cache-dir",), "corrupt" not in r["err"]

    def nesting(d, env, t):
        model, tgt = _base(d, env)
        hostile.nest(model, 100_000, "model")
        return _run(compile_(model, d / "p.xml", tgt), env, t), 2, ("nested 1001 levels deep",), None

    def dim(d, env, t):
        m = hostile.save(hostile.relu_model([1, 2**31]), d / "h.xml")
        return _run(compile_(m, d / "p.xml", "virtual"), env, t), 2, ("input 'x'", "2147483648"), None

    def fifo_model(d, env, t):
        _, tgt = _base(d, env)
        f = hostile.special_file(d / "f.xml", "fifo")
        return _run(compile_(f, d / "p.xml", tgt), env, t), 2, ("not a regular file",), None

    def fifo_cache(d, env, t):
        model, tgt = _base(d, env)
        argv = compile_(model, d / "a.xml", tgt)[:-1] + ["--cache-dir", d / "cache"]
        r = _run(argv, env, t)
        if r["rc"] != 0:
            return r, 0, (), None
        for e in hostile.entries(d / "cache"):
            hostile.special_file(e, "fifo")
        argv[argv.index("-o") + 1] = d / "b.xml"
        r = _run(argv, env, t)
        return r, 0, (), (d / "a.xml").read_bytes() == (d / "b.xml").read_bytes()

    def poisoned(d, env, t):
        model, _ = _base(d, env)
        hostile.poison_lower_entry(d / "cache", model, d / "mlp.xml")
        argv = ["compile", model, "-o", d / "p.xml", "--target", "virtual", "--method", "heft", "-q", "--no-compare",
                "--cache-dir", d / "cache"]
        first = _run(argv, env, t)
        second = _run(argv, env, t)
        healed = "does not match its model" in first["err"] and second["rc"] == 0 and "warning" not in second["err"]
        return first, 0, (), healed

    def numba_home(d, env, t):
        if os.geteuid() != 0 or not shutil.which("unshare"):
            raise Skip("needs root and unshare for a read-only bind mount")
        model, tgt = _base(d, env)
        (d / "home").write_text("a file")
        e = {k: v for k, v in env.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
        e.update(HOME=str(d / "home"), TMPDIR=str(d))
        wrap = ["unshare", "-m", "sh", "-c", f'mount --bind "{ROOT}" "{ROOT}" && mount -o remount,ro,bind "{ROOT}" '
                f'&& exec "$@"', "sh"]
        argv = ["compile", model, "-o", d / "p.xml", "--target", tgt, "--method", "heft", "-q", "--cache-dir", d / "c"]
        r = _run(argv, e, t, wrap=wrap)
        return r, 0, (), "cannot write Numba's kernel cache" in r["err"] and "no locator" not in r["err"]

    # issue 35's families
    def big_memory(d, env, t):
        model, tgt = _base(d, env)
        big = d / "big.toml"
        big.write_text(tgt.read_text().replace('op_overhead = 2e-5', f'op_overhead = 2e-5\nmemory = "{"9" * 400}"'))
        return _run(compile_(model, d / "p.xml", big), env, t), 2, ("devices[1].memory", "1 EiB"), None

    def big_requests(d, env, t):
        model, tgt = _base(d, env)
        return _run(compile_(model, d / "p.xml", tgt, "--requests", str(10**20)), env, t), 2, ("--requests:",), None

    def chain(n, count=2, nbytes=10.0):
        return {"format": "hdp-costgraph", "version": 1,
                "devices": [{"name": "CPU", "free_comm": True}, {"name": "ACC", "count": count}],
                "ops": [{"name": f"o{i}", "time": {"CPU": 1.0, "ACC": 0.5}, "bytes": nbytes} for i in range(n)],
                "tensors": [{"producer": f"o{i}", "consumers": [f"o{i + 1}"], "time": 0.1} for i in range(n - 1)]}

    def big_bytes(d, env, t):
        import json

        (d / "w.json").write_text(json.dumps(chain(5, nbytes=1e30)))
        return _run(["place", d / "w.json", "-o", d / "s.json"], env, t), 2, ("ops[0].bytes",), None

    def inf_limit(d, env, t):
        import json

        (d / "w.json").write_text(json.dumps(chain(5)))
        return _run(["place", d / "w.json", "-o", d / "s.json", "--time-limit", "inf"], env, t), 2, ("--time-limit:",), None

    def many_devices(d, env, t):
        import json

        (d / "w.json").write_text(json.dumps(chain(50, count=1_000_000)))
        r = _run(["place", d / "w.json", "-o", d / "s.json", "--time-limit", "10"], env, t)
        return r, 0, (), r["seconds"] < 60

    def interrupt(d, env, t):
        import random
        import signal

        model, tgt = _base(d, env)
        tmp = d / "tmp"
        tmp.mkdir()
        e = dict(env, TMPDIR=str(tmp))
        argv = [sys.executable, "-m", "hdp", *map(str, compile_(model, d / "o.xml", tgt, "--emit-ir", d / "o.hdp",
                                                                 "--timings", d / "o.json"))]
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e)
        try:
            p.wait(timeout=random.uniform(0.3, 4.0))
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=t)
        outs = [(d / f).exists() for f in ("o.xml", "o.bin", "o.hdp", "o.json")]
        clean = (all(outs) or not any(outs)) and not list(tmp.rglob("*"))
        r = {"rc": p.returncode, "hung": False, "err": err, "out": out, "seconds": time.perf_counter() - t0}
        if p.returncode == 130:  # the expected exit of an interrupted run: one line
            r["rc"] = 2 if err.strip().splitlines()[-1:] == ["hdp: interrupted"] else 1
            r["err"] = err.replace("hdp: interrupted", "hdp: error: interrupted")
        return r, r["rc"] if r["rc"] in (0, 2) else 2, (), clean

    return {
        "A: memory of 400 digits": big_memory,
        "B: --requests 10^20": big_requests,
        "C: cost-graph bytes 10^30": big_bytes,
        "E: --time-limit inf": inf_limit,
        "hang: a device count of 1,000,000": many_devices,
        "F: SIGINT at 0.3-4 s, four outputs": interrupt,
        "full disk": lambda d, e, t: full_disk(d, e, t),
        "full disk, late": lambda d, e, t: full_disk(d, e, t, late=True),
        "no inodes": lambda d, e, t: full_disk(d, e, t, inodes=True),
        "no inodes, late": lambda d, e, t: full_disk(d, e, t, late=True, inodes=True),
        "-o name 250 bytes": lambda d, e, t: name(d, e, t, 250),
        "-o name 256 bytes": lambda d, e, t: name(d, e, t, 256),
        "-o over PATH_MAX": path_max,
        "--cache-dir over PATH_MAX": cache_max,
        "nesting 100,000": nesting,
        "2^31 dimension": dim,
        "FIFO as MODEL": fifo_model,
        "FIFO in the cache": fifo_cache,
        "poisoned cache": poisoned,
        "HOME a file, package read-only": numba_home,
    }


def classify(r) -> str:
    if r["hung"]:
        return "hang"
    if r["rc"] is not None and r["rc"] < 0:
        return "signal"
    if "Traceback (most recent call last)" in r["err"]:
        return "traceback"
    if r["rc"] == 0:
        return "exit 0"
    lines = [ln for ln in r["err"].strip().splitlines() if ln.strip()]
    if r["rc"] == 2 and lines and lines[-1].startswith("hdp: error:"):
        return "exit 2"
    return "other"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--only", default="", help="probe names separated by semicolons")
    a = ap.parse_args()
    cols = ["exit 0", "exit 2", "traceback", "hang", "signal", "other"]
    work = Path(tempfile.mkdtemp(prefix="hdp-probe-"))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    env["XDG_CACHE_HOME"] = str(work / "xdg")  # leave the user's ~/.cache/hdp alone
    env.setdefault("NUMBA_CACHE_DIR", str(Path(tempfile.gettempdir()) / "hdp-probe-numba"))
    chosen = {k: v for k, v in probes().items() if not a.only or k in a.only.split(";")}
    print(f"{a.runs} runs per probe, load average {os.getloadavg()[0]:.1f} at the start on {os.cpu_count()} cores\n")
    print("| probe | runs | " + " | ".join(cols) + " | as expected | seconds per run (median) | last line |")
    print("|---|---:|" + "---:|" * len(cols) + "---:|---:|---|")
    try:
        for name, probe in chosen.items():
            counts, expected, secs, last = Counter(), 0, [], ""
            try:
                for i in range(a.runs):
                    d = work / f"{len(counts)}-{i}-{abs(hash(name)) % 10**6}"
                    d.mkdir()
                    r, code, needles, extra = probe(d, env, a.timeout)
                    kind = classify(r)
                    counts[kind] += 1
                    lines = [ln for ln in r["err"].strip().splitlines() if ln.strip()]
                    last = lines[-1] if lines else ""
                    expected += (r["rc"] == code and kind in ("exit 0", "exit 2")
                                 and all(n in last for n in (needles if code == 2 else ()))
                                 and extra is not False)
                    secs.append(r["seconds"])
                    shutil.rmtree(d, ignore_errors=True)
            except Skip as e:
                print(f"| {name} | 0 | skipped: {e} |")
                continue
            secs.sort()
            shown = last if len(last) <= 150 else last[:147] + "..."
            print(f"| {name} | {a.runs} | " + " | ".join(str(counts.get(c, 0)) for c in cols) +
                  f" | {expected} | {secs[len(secs) // 2]:.1f} | {shown.replace('|', '/')} |", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
