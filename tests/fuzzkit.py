"""Machinery of the fuzz suite (tests/test_fuzz.py): running hdp on a case, judging the outcome.

A case runs one ``hdp`` command in a fresh sandbox directory and must end with

- exit 0 and a valid result, or exit 2 with one ``hdp: error:`` (or click usage) line;
- no Python traceback, no signal, no hang;
- no leftover file: no hdp temporary anywhere in the sandbox, and after a failure no file
  outside the cache directory that was not there before (and none changed);
- every input byte-identical afterwards.

Commands whose input reaches Numba kernels or OpenVINO's parsers (``.hdp`` modules, XML/BIN,
cache entries) run in an :class:`IsolatedRunner`: one long-lived child process that invokes the
CLI in-process (click's CliRunner, so hdp and its kernels are imported once) and answers over a
pipe; a segfault there is observed as a signal and a fresh child takes over. The other surfaces
(target TOML, checkpoints, CLI paths) run in this process.

:data:`TALLY` counts cases and outcomes per surface; ``HDP_FUZZ_REPORT=path`` writes it as JSON
at the end of the session (see tests/test_fuzz.py).
"""

from __future__ import annotations

import json
import os
import select
import stat
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from hdp.base.fsutil import is_temp

ROOT = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- outcomes and tallies


@dataclass
class Outcome:
    exit_code: int | None  # None: the process died by a signal or hung
    output: str = ""
    traceback: str = ""
    signal: int | None = None
    hung: bool = False


class Tally:
    """Per surface: cases, ok (exit 0), refused (exit 2), and the failures the suite forbids."""

    FIELDS = ("cases", "ok", "refused", "interrupted", "tracebacks", "signals", "hangs", "bad_exit", "leftovers",
              "modified_inputs", "invalid_results")

    def __init__(self):
        self.rows: dict[str, Counter] = defaultdict(Counter)
        self.t0 = time.time()
        self.seconds: Counter = Counter()

    def add(self, surface: str, **flags) -> None:
        row = self.rows[surface]
        row["cases"] += 1
        for k, v in flags.items():
            if v:
                row[k] += 1

    def as_dict(self) -> dict:
        return {s: {f: int(r.get(f, 0)) for f in self.FIELDS} | {"seconds": round(self.seconds[s], 1)}
                for s, r in sorted(self.rows.items())}

    def write(self, path: str | os.PathLike) -> None:
        old = {}
        p = Path(path)
        if p.exists():
            try:
                old = json.loads(p.read_text()).get("surfaces", {})
            except (ValueError, OSError):
                old = {}
        old.update(self.as_dict())
        doc = {"surfaces": old, "python": sys.version.split()[0],
               "examples_per_surface": int(os.environ.get("HDP_FUZZ_EXAMPLES", "0") or 0)}
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(doc, indent=2) + "\n")


TALLY = Tally()


# --------------------------------------------------------------------------- running a command


def run_inprocess(argv: list[str]) -> Outcome:
    """``hdp argv`` in this process (click's CliRunner)."""
    from click.testing import CliRunner

    from hdp.cli.main import main

    r = CliRunner().invoke(main, [str(a) for a in argv], catch_exceptions=True)
    tb = ""
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        tb = "".join(traceback.format_exception(*r.exc_info))
    return Outcome(exit_code=r.exit_code, output=r.output, traceback=tb)


class IsolatedRunner:
    """A child process running ``hdp`` commands in-process on request (see the module docstring)."""

    def __init__(self, timeout: float = 300.0):
        self.timeout = timeout
        self.proc: subprocess.Popen | None = None
        self.restarts = 0

    def _start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), str(ROOT / "tests"), env.get("PYTHONPATH", "")]))
        env["PYTHONFAULTHANDLER"] = "1"
        self.proc = subprocess.Popen([sys.executable, "-m", "fuzz_worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0, env=env,
                                     cwd=str(ROOT / "tests"))

    def request(self, req: dict) -> Outcome:
        import msgspec

        from hdp.runtime.measure.protocol import frame_length, write_msg

        if self.proc is None or self.proc.poll() is not None:
            self.close()
            self._start()
        try:
            write_msg(self.proc.stdin, req)
        except OSError:
            return self._dead()
        fd = self.proc.stdout.fileno()
        buf = bytearray()
        need = 4
        deadline = time.monotonic() + self.timeout
        while len(buf) < need:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self.close(kill=True)
                return Outcome(exit_code=None, hung=True)
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return self._dead()
            buf += chunk
            if need == 4 and len(buf) >= 4:
                need = 4 + frame_length(buf)
        reply = msgspec.msgpack.decode(bytes(buf[4:need]))
        return Outcome(exit_code=reply["exit_code"], output=reply["output"], traceback=reply["traceback"])

    def run(self, argv: list[str]) -> Outcome:
        return self.request({"op": "cli", "argv": [str(a) for a in argv]})

    def run_interrupted(self, argv: list[str], delay: float, env: dict | None = None) -> Outcome:
        """``hdp argv`` in the child, sent SIGINT ``delay`` seconds after it starts (``env``: set
        for the command)."""
        return self.request({"op": "cli_interrupt", "argv": [str(a) for a in argv], "delay": float(delay),
                             "env": env or {}})

    def _dead(self) -> Outcome:
        rc = self.proc.wait()
        self.proc = None
        self.restarts += 1
        return Outcome(exit_code=None, signal=-rc if rc < 0 else None,
                       output=f"isolated runner exited with {rc}")

    def close(self, kill: bool = False) -> None:
        if self.proc is not None:
            if kill:
                self.proc.kill()
            else:
                try:
                    self.proc.stdin.close()
                except OSError:
                    pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


def run_subprocess(argv: list[str], timeout: float = 300.0, env: dict | None = None) -> Outcome:
    """``python -m hdp argv`` in a fresh process."""
    e = dict(os.environ if env is None else env)
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), e.get("PYTHONPATH", "")]))
    try:
        r = subprocess.run([sys.executable, "-m", "hdp", *map(str, argv)], capture_output=True, text=True,
                           timeout=timeout, env=e)
    except subprocess.TimeoutExpired:
        return Outcome(exit_code=None, hung=True)
    if r.returncode < 0:
        return Outcome(exit_code=None, signal=-r.returncode, output=r.stdout + r.stderr)
    tb = r.stderr if "Traceback (most recent call last)" in r.stderr else ""
    return Outcome(exit_code=r.returncode, output=r.stdout + r.stderr, traceback=tb)


# --------------------------------------------------------------------------- sandboxes


def _files(root: Path) -> dict[str, bytes | None]:
    """Every file under ``root`` (relative path -> bytes; None for directories, symlinks as
    their target text)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            p = Path(dirpath, d)
            out[str(p.relative_to(root)) + "/"] = None
        for f in filenames:
            p = Path(dirpath, f)
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = b"->" + os.readlink(p).encode()
            elif not stat.S_ISREG(p.lstat().st_mode):
                # a FIFO or a socket a cache case put there: reading a FIFO with no writer blocks forever
                out[rel] = b"<special %o>" % stat.S_IFMT(p.lstat().st_mode)
            else:
                try:
                    out[rel] = p.read_bytes()
                except OSError:
                    out[rel] = b"<unreadable>"
    return out


class Sandbox:
    """A fresh directory for one case: ``inputs`` (must stay byte-identical), anything else
    may be written; ``cache`` (under the sandbox) may gain entries."""

    def __init__(self, base: Path, inputs: Path | None = None):
        self.root = Path(tempfile.mkdtemp(prefix="case-", dir=base))
        self.inputs = inputs or self.root / "in"
        self.inputs.mkdir(exist_ok=True)
        self.cache = self.root / "cache"

    def freeze(self) -> None:
        """Record the state before the command runs."""
        self.before_inputs = _files(self.inputs)
        self.before_all = _files(self.root)

    def _rel(self, p) -> str | None:
        root = os.path.realpath(self.root)
        real = os.path.realpath(os.path.abspath(p))
        if real == root:
            return ""
        return os.path.relpath(real, root) if real.startswith(root + os.sep) else None

    def problems(self, outcome: Outcome, expected: list[Path] = (), by_products: list[Path] = (),
                 reads: list[Path] | None = None, interrupt: bool = False) -> dict[str, str]:
        """What this case did wrong, by tally field (empty: nothing). ``expected``: files a
        successful run writes; ``by_products``: files or directories where new files are fine
        whatever the exit (the cache, IR dumps, checkpoints written while training); ``reads``:
        the files the command reads (default: everything under ``in/``), which must not change.
        Other files may change only when they are expected outputs of a successful run.
        ``interrupt``: the command was sent SIGINT; exit 130 with ``hdp: interrupted`` last is
        right too, with every expected output or none of them."""
        bad: dict[str, str] = {}
        if outcome.hung:
            bad["hangs"] = "hung"
        if outcome.signal:
            bad["signals"] = f"killed by signal {outcome.signal}: {outcome.output[-500:]}"
        if outcome.traceback or "Traceback (most recent call last)" in outcome.output:
            bad["tracebacks"] = outcome.traceback or outcome.output
        if outcome.exit_code not in (0, 2, None) and not (interrupt and outcome.exit_code == 130):
            bad["bad_exit"] = f"exit {outcome.exit_code}: {outcome.output[-500:]}"
        whole = bool(expected) and all(os.path.lexists(p) for p in expected)
        if outcome.exit_code == 130:
            lines = [ln for ln in outcome.output.strip().splitlines() if ln.strip()]
            if not lines or lines[-1] != "hdp: interrupted":
                bad["bad_exit"] = f"exit 130 without its one line: {outcome.output[-500:]}"
            if any(os.path.lexists(p) for p in expected) and not whole:
                bad["leftovers"] = f"interrupted with some outputs: {[str(p) for p in expected if os.path.lexists(p)]}"
        if outcome.exit_code == 2:
            lines = [ln for ln in outcome.output.strip().splitlines() if ln.strip()]
            if not lines or not (lines[-1].startswith("hdp: error:") or lines[-1].startswith("Error:")):
                bad["bad_exit"] = f"exit 2 without an error line: {outcome.output[-500:]}"
        after_inputs = _files(self.inputs)
        keys = set(self.before_inputs)
        if reads is not None:
            keys = set()
            for p in reads:
                for q in (Path(p), Path(p).with_suffix(".bin") if str(p).lower().endswith(".xml") else None):
                    if q is None:
                        continue
                    for cand in (os.path.abspath(q), os.path.realpath(q)):
                        r = os.path.relpath(cand, os.path.realpath(self.inputs))
                        if not r.startswith(".."):
                            keys.add(r)
        changed = sorted(k for k in keys if k in self.before_inputs
                         and after_inputs.get(k, b"<gone>") != self.before_inputs[k])
        if changed:
            bad["modified_inputs"] = f"inputs changed or removed: {changed[:5]}"
        after = _files(self.root)
        temps = [k for k in after if is_temp(Path(k.rstrip("/")).name)]
        free = [r for r in (self._rel(p) for p in [self.cache, *by_products]) if r is not None]

        def under(k: str, prefixes) -> bool:
            k = k.rstrip("/")
            return any(pre == "" or k == pre or k.startswith(pre + os.sep) for pre in prefixes)

        if temps:
            bad["leftovers"] = f"temporaries left: {temps[:5]}"
        else:
            ok = set(free)
            if outcome.exit_code == 0 or (outcome.exit_code == 130 and whole):
                ok |= {r for r in (self._rel(p) for p in expected) if r is not None}
            new = [k for k in after if k not in self.before_all and not under(k, ok)
                   and not any(under(e, [k.rstrip("/")]) for e in ok)]  # parents of allowed files
            mod = [k for k in after if k in self.before_all and after[k] != self.before_all[k] and not under(k, ok)]
            if new or mod:
                bad["leftovers"] = (f"{'a failed' if outcome.exit_code else 'the'} run left files: new {new[:5]}, "
                                    f"changed {mod[:5]}")
        return bad

    def remove(self) -> None:
        import shutil

        shutil.rmtree(self.root, ignore_errors=True)


def judge(surface: str, box: Sandbox, outcome: Outcome, expected: list[Path] = (), validate=None,
          by_products: list[Path] = (), reads: list[Path] | None = None, interrupt: bool = False) -> None:
    """Record the case in :data:`TALLY` and fail the test on any problem."""
    bad = box.problems(outcome, expected, by_products, reads, interrupt)
    if outcome.exit_code == 0 and validate is not None and not bad:
        try:
            validate()
        except Exception as e:  # noqa: BLE001 - any failure of the result is what we look for
            bad["invalid_results"] = f"exit 0 but the result is invalid: {type(e).__name__}: {e}"
    TALLY.add(surface, ok=outcome.exit_code == 0 and not bad, refused=outcome.exit_code == 2 and not bad,
              interrupted=outcome.exit_code == 130 and not bad, **{k: True for k in bad})
    if bad:
        raise AssertionError(f"[{surface}] " + "; ".join(f"{k}: {v}" for k, v in bad.items()))


# --------------------------------------------------------------------------- writing test inputs


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v != v:
            return "nan"
        if v in (float("inf"), float("-inf")):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + " }"
    if v is None:
        return '""'
    raise TypeError(type(v))


def to_toml(doc: dict) -> str:
    """A small TOML writer: top-level scalars, ``[[devices]]`` arrays of tables, ``[link]``."""
    lines = []
    tables = {k: v for k, v in doc.items() if isinstance(v, dict)}
    arrays = {k: v for k, v in doc.items() if isinstance(v, list) and v and all(isinstance(x, dict) for x in v)}
    for k, v in doc.items():
        if k not in tables and k not in arrays:
            lines.append(f"{json.dumps(k)} = {toml_value(v)}")
    for k, rows in arrays.items():
        for row in rows:
            lines.append(f"[[{json.dumps(k)}]]")
            lines += [f"{json.dumps(a)} = {toml_value(b)}" for a, b in row.items()]
    for k, t in tables.items():
        lines.append(f"[{json.dumps(k)}]")
        lines += [f"{json.dumps(a)} = {toml_value(b)}" for a, b in t.items()]
    return "\n".join(lines) + "\n"


def leaves(obj, path=()):
    """Paths to every leaf (and every list/dict) of a decoded msgpack tree."""
    yield path, obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from leaves(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from leaves(v, path + (i,))


def set_at(obj, path, value):
    if not path:
        return value
    cur = obj
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = value
    return obj


def flip(data: bytes, positions: list[int], values: list[int]) -> bytes:
    b = bytearray(data)
    if not b:
        return bytes(b)
    for p, v in zip(positions, values):
        b[p % len(b)] ^= (v % 255) + 1
    return bytes(b)
