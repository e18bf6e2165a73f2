"""Two hosts on one machine: two network namespaces joined by a veth pair, the link rate-limited with
``tc tbf`` (this kernel has no netem), one Ray node in each pinned to its own core, and an hdp
target describing them. Needs root and ``ip``/``tc``/``taskset``.

    python bench/two_host_bed.py run [--rate 200mbit] -- hdp serve PLAN --ray '$HDP_RAY_ADDRESS'
    python bench/two_host_bed.py link [--rate 200mbit]      # the link's rate by a tensor round trip
    python bench/two_host_bed.py up                         # leaves it up; prints HDP_BED=DIR ...
    python bench/two_host_bed.py down [DIR ...]             # tears down what `up` started

``run -- CMD...`` brings the bed up, runs CMD inside namespace A (host ``a``, where the head node
runs) with ``HDP_RAY_ADDRESS`` (the head's ip:port), ``HDP_BED_TARGET`` (the target file),
``RAY_AUTH_MODE=token`` and ``RAY_AUTH_TOKEN`` (the bed's own token: nothing goes to ``~/.ray``) in
its environment (``$HDP_RAY_ADDRESS`` in CMD is expanded), and tears it down; its exit code is the
command's. Names are unique per run (``hdpA<pid>``, ``hdpB<pid>``, veth ``hva<pid>``/``hvb<pid>``),
the addresses exist inside the namespaces only (10.77.0.1 and 10.77.0.2), the Ray nodes' files and
the target live in one temporary directory. Teardown runs on every path, SIGINT and SIGTERM
included: every process in the two namespaces (``ip netns pids``: the raylets, GCS, workers) is
killed by its pid, the namespaces deleted (the veth goes with them), the directory removed.

The target (``HDP_BED_TARGET``)::

    [[hosts]]
    name = "a"
    devices = ["CPU_A"]
    memory = "2GiB"
    address = "10.77.0.1"
    [[links]]
    hosts = ["a", "b"]
    bandwidth = 25e6   # bytes/s (what tc set)
    latency = 1e-4

``link`` brings the bed up, sends arrays of --mb MB from a driver in namespace A to an actor on host
``b`` that returns them (two crossings of the link), prints the rate over the rounds (median and
range) against what tc set, and exits 1 when the median is off by more than 15 %.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SUBNET = "10.77.0"
PORT = 6379
STATE = "bed.json"
VENV_BIN = Path(sys.executable).parent


def rate_bytes(rate: str) -> float:
    """``200mbit`` -> 25e6 bytes/s (tc's units: kbit, mbit, gbit, bit; kbps... are bytes)."""
    m = re.fullmatch(r"([0-9.]+)\s*(bit|kbit|mbit|gbit|bps|kbps|mbps|gbps)", rate.strip().lower())
    if not m:
        raise SystemExit(f"--rate {rate}: give tc's form, e.g. 200mbit")
    scale = {"bit": 1 / 8, "kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8,
             "bps": 1, "kbps": 1e3, "mbps": 1e6, "gbps": 1e9}[m.group(2)]
    return float(m.group(1)) * scale


def sh(*cmd, check=True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], check=check, capture_output=True, text=True, **kw)


def netns_list() -> list[str]:
    return [ln.split()[0] for ln in sh("ip", "netns", "list").stdout.splitlines() if ln.strip()]


class Bed:
    """The two hosts (see the module docstring); :meth:`up`, :meth:`down` (idempotent)."""

    def __init__(self, rate: str = "200mbit", memory: str = "2GiB", directory: str | None = None, tag: str = ""):
        self.tag = tag or str(os.getpid())
        self.rate = rate
        self.memory = memory
        self.ns = {"a": f"hdpA{self.tag}", "b": f"hdpB{self.tag}"}
        self.veth = {"a": f"hva{self.tag}"[:15], "b": f"hvb{self.tag}"[:15]}
        self.ip = {"a": f"{SUBNET}.1", "b": f"{SUBNET}.2"}
        self.dir = Path(directory) if directory else None
        self.token = secrets.token_hex(32)
        self.cores = {"a": 0, "b": 1 % (os.cpu_count() or 1)}

    # ---------------------------------------------------------------- state

    @property
    def address(self) -> str:
        return f"{self.ip['a']}:{PORT}"

    @property
    def target(self) -> Path:
        return self.dir / "target.toml"

    def env(self) -> dict:
        """What a command on the bed needs: the address, the target, the token."""
        return {"HDP_RAY_ADDRESS": self.address, "HDP_BED_TARGET": str(self.target), "RAY_AUTH_MODE": "token",
                "RAY_AUTH_TOKEN": self.token}

    def save(self) -> None:
        (self.dir / STATE).write_text(json.dumps({"tag": self.tag, "rate": self.rate, "memory": self.memory,
                                                  "token": self.token, "ns": self.ns}))

    @classmethod
    def load(cls, directory: str) -> "Bed":
        st = json.loads((Path(directory) / STATE).read_text())
        bed = cls(st["rate"], st["memory"], directory, st["tag"])
        bed.token = st["token"]
        return bed

    # ---------------------------------------------------------------- up and down

    def up(self) -> "Bed":
        if self.dir is None:
            self.dir = Path(tempfile.mkdtemp(prefix="hdp-bed-"))
        self.save()
        a, b = self.ns["a"], self.ns["b"]
        for ns in (a, b):
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "link", "add", self.veth["a"], "type", "veth", "peer", "name", self.veth["b"])
        rate = rate_bytes(self.rate)
        burst = max(int(rate / 100), 70000)  # 10 ms of the rate, and above a GSO segment (64 KB)
        for h in ("a", "b"):
            sh("ip", "link", "set", self.veth[h], "netns", self.ns[h])
            sh("ip", "-n", self.ns[h], "addr", "add", f"{self.ip[h]}/24", "dev", self.veth[h])
            sh("ip", "-n", self.ns[h], "link", "set", self.veth[h], "up")
            sh("ip", "netns", "exec", self.ns[h], "tc", "qdisc", "add", "dev", self.veth[h], "root", "tbf",
               "rate", self.rate, "burst", burst, "latency", "50ms")
        self._write_target(rate)
        self._ray_start("a", ["--head", f"--port={PORT}"])
        self._ray_start("b", [f"--address={self.address}"])
        self._wait_nodes(2)
        return self

    def _ray_start(self, h: str, extra: list[str]) -> None:
        home = self.dir / "home"
        home.mkdir(exist_ok=True)
        env = dict(os.environ, HOME=str(home), RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=self.token,
                   RAY_USAGE_STATS_ENABLED="0")
        cmd = ["ip", "netns", "exec", self.ns[h], "taskset", "-c", str(self.cores[h]), VENV_BIN / "ray", "start",
               *extra, f"--node-ip-address={self.ip[h]}", "--num-cpus=1",
               f"--resources={json.dumps({f'hdp_host_{h}': 1000})}", f"--temp-dir={self.dir / ('ray-' + h)}",
               "--disable-usage-stats", "--object-store-memory=200000000"]
        if h == "a":
            cmd.append("--include-dashboard=false")
        got = sh(*cmd, check=False, env=env, timeout=180)
        if got.returncode != 0:
            tail = (got.stderr or got.stdout).strip().splitlines()[-3:]
            raise RuntimeError(f"ray start on host {h} failed: {' | '.join(tail)}")

    def _wait_nodes(self, n: int, timeout: float = 60.0) -> None:
        code = ("import ray; ray.init(address='auto', log_to_driver=False);"
                "print(sum(1 for x in ray.nodes() if x['Alive']))")
        t0 = time.time()
        while time.time() - t0 < timeout:
            got = self.exec([sys.executable, "-c", code], capture=True, env={"RAY_ADDRESS": self.address})
            if got.returncode == 0 and got.stdout.strip().splitlines()[-1:] == [str(n)]:
                return
            time.sleep(1.0)
        raise RuntimeError(f"the bed's Ray cluster did not show {n} nodes within {timeout:g} s")

    def _write_target(self, rate: float) -> None:
        cfg = '{ INFERENCE_PRECISION_HINT = "f32", KV_CACHE_PRECISION = "f32", INFERENCE_NUM_THREADS = "1" }'
        text = [f'name = "two-host-bed-{self.tag}"',
                f'description = "two network namespaces joined by a veth at {self.rate} (tc tbf), one Ray node '
                f'each, one 1-thread CPU device each"', ""]
        for h in ("a", "b"):
            text += ["[[devices]]", f'name = "CPU_{h.upper()}"', 'kind = "real"', 'plugin = "CPU"', "alias = true",
                     f"config = {cfg}", ""]
        for h in ("a", "b"):
            text += ["[[hosts]]", f'name = "{h}"', f'devices = ["CPU_{h.upper()}"]', f'memory = "{self.memory}"',
                     f'address = "{self.ip[h]}"', ""]
        text += ["[[links]]", 'hosts = ["a", "b"]', f"bandwidth = {rate:g}   # bytes/s (what tc set)",
                 "latency = 1e-4", ""]
        self.target.write_text("\n".join(text))

    def exec(self, cmd: list, capture: bool = False, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
        """Run ``cmd`` inside namespace A with the bed's environment."""
        full = dict(os.environ, **self.env(), **(env or {}))
        return subprocess.run(["ip", "netns", "exec", self.ns["a"], *map(str, cmd)], env=full,
                              capture_output=capture, text=True, **kw)

    def pids(self) -> list[int]:
        out = []
        for ns in self.ns.values():
            got = sh("ip", "netns", "pids", ns, check=False)
            out += [int(p) for p in got.stdout.split() if p.isdigit()]
        return out

    def down(self) -> None:
        """Kill every process of the two namespaces by its pid (TERM, then KILL), delete them, remove
        the directory. Safe to call twice or on a half-built bed."""
        killed: set[int] = set()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = self.pids()
            killed.update(pids)
            for p in pids:
                try:
                    os.kill(p, sig)
                except ProcessLookupError:
                    pass
            t0 = time.time()
            while self.pids() and time.time() - t0 < 5.0:
                time.sleep(0.1)
        t0 = time.time()  # until their parents (init, for daemonised Ray processes) have reaped them
        while any(Path(f"/proc/{p}").exists() for p in killed) and time.time() - t0 < 10.0:
            time.sleep(0.1)
        have = netns_list()
        for ns in self.ns.values():
            if ns in have:
                sh("ip", "netns", "del", ns, check=False)
        sh("ip", "link", "del", self.veth["a"], check=False)  # only when it never left the root namespace
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


def _on_signal(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


def guarded(fn):
    """Run ``fn`` with SIGINT, SIGTERM and SIGHUP turned into KeyboardInterrupt so that ``finally``
    blocks run (SIGINT too: a shell starts a background job with it ignored, Python keeps that)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    return fn()


LINK_CODE = r"""
import os, sys, time, json
import numpy as np, ray
ray.init(address=os.environ["HDP_RAY_ADDRESS"], log_to_driver=False)
mb, rounds = float(sys.argv[1]), int(sys.argv[2])
@ray.remote(num_cpus=0, resources={"hdp_host_b": 0.001})
class Echo:
    def back(self, x):
        return x
    def ip(self):
        return ray.util.get_node_ip_address()
e = Echo.remote()
where = ray.get(e.ip.remote())
x = np.random.default_rng(0).integers(0, 255, int(mb * 1e6), dtype=np.uint8)
small = np.zeros(8, np.uint8)
ray.get(e.back.remote(x))  # warm: the actor, the connection
lat = []
for _ in range(5):
    t = time.perf_counter(); ray.get(e.back.remote(small)); lat.append(time.perf_counter() - t)
rates = []
for _ in range(rounds):
    t = time.perf_counter()
    y = ray.get(e.back.remote(x))
    dt = time.perf_counter() - t
    assert y.shape == x.shape and y[-1] == x[-1]
    rates.append(2 * x.nbytes / max(dt - min(lat), 1e-9))
print(json.dumps({"where": where, "rates": rates, "small": min(lat)}))
"""


def measure_link(bed: Bed, mb: float = 4.0, rounds: int = 7) -> dict:
    """Bytes/s over ``rounds`` round trips of an ``mb`` MB array to an actor on host b and back
    (two crossings; the round trip of an 8-byte array taken off each)."""
    got = bed.exec([sys.executable, "-c", LINK_CODE, mb, rounds], capture=True, timeout=600)
    if got.returncode != 0:
        raise RuntimeError("the link measurement failed: " + " | ".join(got.stderr.strip().splitlines()[-3:]))
    return json.loads(got.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("up", "run", "link"):
        p = sub.add_parser(name)
        p.add_argument("--rate", default="200mbit", help="the link's rate in tc's form (default 200mbit)")
        p.add_argument("--memory", default="2GiB", help="each host's memory in the target (default 2GiB)")
        if name == "run":
            p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD...")
        if name == "link":
            p.add_argument("--mb", type=float, default=4.0, help="MB per round trip (default 4)")
            p.add_argument("--rounds", type=int, default=7)
    p = sub.add_parser("down")
    p.add_argument("dirs", nargs="*", help="the HDP_BED directories `up` printed (default: every one in the "
                                           "temporary directory)")
    args = ap.parse_args(argv)
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc"):
        print("two_host_bed: needs root and ip/tc (network namespaces, veth, tc tbf)", file=sys.stderr)
        return 2
    if args.cmd == "down":
        dirs = args.dirs or [str(p) for p in Path(tempfile.gettempdir()).glob("hdp-bed-*") if (p / STATE).is_file()]
        for d in dirs:
            Bed.load(d).down()
            print(f"down: {d}")
        return 0
    bed = Bed(args.rate, args.memory)
    if args.cmd == "up":
        try:
            guarded(bed.up)
        except BaseException:
            bed.down()
            raise
        print(f"HDP_BED={bed.dir}")
        print(f"HDP_RAY_ADDRESS={bed.address}")
        print(f"HDP_BED_TARGET={bed.target}")
        print(f"namespaces {bed.ns['a']} (host a, {bed.ip['a']}, core {bed.cores['a']}) and {bed.ns['b']} (host b, "
              f"{bed.ip['b']}, core {bed.cores['b']}), link {args.rate} ({rate_bytes(args.rate):.3g} bytes/s); "
              f"run commands with: ip netns exec {bed.ns['a']} env RAY_AUTH_MODE=token "
              f"RAY_AUTH_TOKEN=$(python -c \"import json;print(json.load(open('{bed.dir}/{STATE}'))['token'])\") ...")
        return 0

    def body() -> int:
        t0 = time.time()
        bed.up()
        print(f"bed up in {time.time() - t0:.1f} s: {bed.ns['a']} {bed.ip['a']} (core {bed.cores['a']}), "
              f"{bed.ns['b']} {bed.ip['b']} (core {bed.cores['b']}), link {args.rate}; head {bed.address}; "
              f"target {bed.target}", flush=True)
        if args.cmd == "link":
            m = measure_link(bed, args.mb, args.rounds)
            set_rate = rate_bytes(args.rate)
            rates = sorted(m["rates"])
            med = rates[len(rates) // 2]
            off = med / set_rate - 1
            print(f"link a->b->a ({m['where']}), {args.mb:g} MB arrays, {len(rates)} round trips: median "
                  f"{med / 1e6:.2f} MB/s (range {rates[0] / 1e6:.2f}-{rates[-1] / 1e6:.2f}) against tc's "
                  f"{set_rate / 1e6:.2f} MB/s: {off:+.1%}; an 8-byte round trip {m['small'] * 1e3:.2f} ms")
            ok = abs(off) <= 0.15
            print("within 15 % of what tc set" if ok else "NOT within 15 % of what tc set")
            return 0 if ok else 1
        cmd = [c for c in args.command if c != "--"] if args.command[:1] == ["--"] else list(args.command)
        if not cmd:
            print("run: give a command after --", file=sys.stderr)
            return 2
        cmd = [os.path.expandvars(c.replace("$HDP_RAY_ADDRESS", bed.address)
                                  .replace("$HDP_BED_TARGET", str(bed.target))) for c in cmd]
        return bed.exec(cmd).returncode

    try:
        return guarded(body)
    except KeyboardInterrupt as e:
        print(f"two_host_bed: interrupted ({e or 'SIGINT'}); tearing down", file=sys.stderr)
        return 130
    finally:
        bed.down()


if __name__ == "__main__":
    sys.exit(main())
