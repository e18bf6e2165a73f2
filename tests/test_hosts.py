"""Targets of several hosts (issue 31): [[hosts]] and [[links]] validated in one line naming the field,
a crossing between hosts priced by its link (a one-host problem as before), each host's memory a cap,
plans across hosts for latency and throughput, and the refusal of a model no hosts hold."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import msgspec
import numpy as np
import openvino as ov
import openvino.opset13 as op
import pytest
from click.testing import CliRunner

from hdp.base.errors import HdpError, InputError
from hdp.cli.main import main
from hdp.ir.plan import ServingPlan
from hdp.pipeline.compile import compile_model
from hdp.placement.plan import GroupPlan, PlanPricer, Replica
from hdp.placement.problem import Hosts, problem_of
from hdp.placement.simulate import Simulator
from hdp.runtime.costs import links as L
from hdp.target.hosts import problem_hosts, with_links
from hdp.target.streams import plan_devices
from hdp.target.target import parse_target

DEVICE = """
[[devices]]
name = "{name}"
kind = "modeled"
peak_flops = {{ f32 = 2e11 }}
memory_bandwidth = 2e10
op_overhead = 1e-6
memory_overhead = "0"
weight_copies = 0
"""


def two_hosts(bandwidth: float = 1.25e9, latency: float = 1e-4, memory: str | None = None, devices=("A", "B")) -> str:
    """Two modeled hosts ``a`` and ``b`` of one device each (``A``, ``B``), joined by one link."""
    mem = f'memory = "{memory}"\n' if memory else ""
    text = 'name = "two-hosts"\n' + "".join(DEVICE.format(name=d) for d in devices)
    text += "[link]\nlatency = 1e-6\nbandwidth = 1e11\nsubgraph_overhead = 1e-6\n"
    for h, d in zip("ab", devices):
        text += f'[[hosts]]\nname = "{h}"\ndevices = ["{d}"]\n{mem}address = "10.77.0.{1 if h == "a" else 2}"\n'
    return text + f'[[links]]\nhosts = ["a", "b"]\nbandwidth = {bandwidth!r}\nlatency = {latency!r}\n'


def mlp(path, layers: int = 8, width: int = 256, tanh: bool = False):
    """A chain of ``layers`` MatMul + ReLU layers of ``width`` (each weight width² f32), seeded;
    ``tanh``: ending in a Tanh."""
    rng = np.random.default_rng(0)
    x = op.parameter([1, width], np.float32, name="x")
    h = x
    for _ in range(layers):
        w = op.constant((rng.standard_normal((width, width)) * 0.05).astype(np.float32))
        h = op.relu(op.matmul(h, w, False, False))
    ov.save_model(ov.Model([op.result(op.tanh(h) if tanh else h)], [x], "mlp_tanh" if tanh else "mlp"), str(path))
    return path


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return mlp(tmp_path_factory.mktemp("hosts") / "mlp.xml")


# ----------------------------------------------------------------------------- the target format


def test_hosts_and_links_are_read():
    t = parse_target(two_hosts(memory="8GiB"), "t.toml")
    assert [h.name for h in t.hosts] == ["a", "b"] and t.host_of("B") == "b" and t.multi_host
    assert t.hosts[0].memory_bytes == 8 << 30 and t.hosts[0].address == "10.77.0.1"
    assert t.host_link("b", "a").bandwidth == 1.25e9
    h = problem_hosts(t)
    assert h.names == ("a", "b") and h.host_of.tolist() == [0, 1] and h.latency[0, 1] == 1e-4
    assert problem_hosts(parse_target(two_hosts().split("[[hosts]]")[0], "one.toml")) is None


@pytest.mark.parametrize("old, new, said", [
    ('[[links]]\nhosts = ["a", "b"]\nbandwidth = 1250000000.0\nlatency = 0.0001\n', "",
     "t.toml: links: no link between hosts 'a' and 'b'"),
    ('devices = ["B"]', 'devices = ["A"]', "t.toml: hosts[1].devices: 'A' is already on hosts[0] (a)"),
    ('devices = ["B"]', 'devices = ["C"]', "t.toml: hosts[1].devices: no device 'C' in the target (has A, B)"),
    ('name = "a"', 'name = "a b"', "t.toml: invalid target: hosts[0].name: must be 1 to 64 letters"),
    ('bandwidth = 1250000000.0', 'bandwidth = 0', "t.toml: invalid target: links[0].bandwidth: must be a number in"),
    ('latency = 0.0001', 'latency = -1', "t.toml: invalid target: links[0].latency: must be a number in [0, 10]"),
    ('hosts = ["a", "b"]', 'hosts = ["a", "c"]', "t.toml: links[0].hosts: no host 'c' in the target (has a, b)"),
    ('hosts = ["a", "b"]', 'hosts = ["a", "a"]', "t.toml: links[0].hosts: a link joins two different hosts"),
    ('memory = "1MiB"', 'memory = "1Mx"', "t.toml: hosts[0].memory: not a size: '1Mx'"),
    ('[[hosts]]\nname = "b"\ndevices = ["B"]\nmemory = "1MiB"\naddress = "10.77.0.2"\n', "",
     "t.toml: hosts: device B is on no host; with [[hosts]] every device is listed under one"),
])
def test_bad_hosts_are_one_line_errors_naming_the_field(old, new, said):
    text = two_hosts(memory="1MiB")
    assert old in text
    with pytest.raises(InputError) as e:
        parse_target(text.replace(old, new, 1), "t.toml")
    assert str(e.value).startswith(said) and "\n" not in str(e.value)


def test_fitted_link_replaces_the_targets():
    t = with_links(parse_target(two_hosts(), "t.toml"), {("b", "a"): (2e-3, 3e6)})
    ln = t.host_link("a", "b")
    assert (ln.latency, ln.bandwidth) == (2e-3, 3e6) and "fitted" in ln.description


# ----------------------------------------------------------------------------- pricing


def compiled(model, tmp_path, text, **kw):
    t = parse_target(text, "t.toml")
    return compile_model(model, tmp_path / "p.xml", t, check=False, compare=False, **kw), t


def test_a_crossing_between_hosts_costs_the_link(model, tmp_path):
    r, t = compiled(model, tmp_path, two_hosts(), method="single:A")
    m = r.module
    base = problem_of(m, t.device_names)
    fast = base.with_hosts(problem_hosts(t))
    slow = base.with_hosts(problem_hosts(parse_target(two_hosts(bandwidth=1e4, latency=0.5), "t.toml")))
    k = base.n_groups
    half = np.array([0] * (k // 2) + [1] * (k - k // 2), np.int16)
    one = np.zeros(k, np.int16)
    s0, s1, s2 = Simulator(base), Simulator(fast), Simulator(slow)
    assert s0.latency(one) == s1.latency(one) == s2.latency(one)  # no crossing: no link
    assert s0.latency(half) < s1.latency(half) < s2.latency(half)
    assert s2.latency(half) - s0.latency(half) > 0.5  # the slow link's latency at least once
    # throughput: the receiver's load holds the link too, and a plan's price
    assert s2.loads(half)[1] > s0.loads(half)[1] + 0.5
    plan = GroupPlan(half.astype(np.int64), ((Replica(0),), (Replica(1),)))
    slow_pr = PlanPricer(slow, plan_devices(t, t.device_names), 2)
    assert slow_pr.price(plan).period > PlanPricer(base, plan_devices(t, t.device_names), 2).price(plan).period + 0.5


def test_a_slow_link_keeps_the_model_on_one_host_and_memory_splits_it(model, tmp_path):
    r, _ = compiled(model, tmp_path, two_hosts(bandwidth=1e5, latency=0.05), method="optimal")
    assert len(set(r.module.placement.device_of.numpy().tolist()) - {-1}) == 1
    # each host holds 60 % of the weights: split across hosts whatever the link
    r2, _ = compiled(model, tmp_path, two_hosts(bandwidth=1e5, latency=0.05, memory="640KiB"), method="optimal")
    used = {r2.module.placement.devices[d] for d in set(r2.module.placement.device_of.numpy().tolist())}
    assert used == {"A", "B"}


def mlp_tanh(path, layers: int = 8, width: int = 256):
    """:func:`mlp` ending in a Tanh (which device A of :func:`split_worth` does not run)."""
    return mlp(path, layers, width, tanh=True)


def split_worth(bandwidth: float, latency: float) -> str:
    """Two hosts where A (host a) is 10x B's speed but runs no Tanh: splitting pays unless the link is slow."""
    return two_hosts(bandwidth=bandwidth, latency=latency).replace(
        'peak_flops = { f32 = 2e11 }\nmemory_bandwidth = 2e10',
        'peak_flops = { f32 = 2e12 }\nmemory_bandwidth = 2e11\nsupported_ops = ["MatMul", "Relu", "Convert"]', 1)


@pytest.mark.parametrize("bandwidth, latency, used", [(1e10, 1e-6, {"A", "B"}), (1e5, 0.05, {"B"})])
def test_the_link_decides_whether_a_split_across_hosts_pays(tmp_path, bandwidth, latency, used):
    m = mlp_tanh(tmp_path / "m.xml")
    r, _ = compiled(m, tmp_path, split_worth(bandwidth, latency), method="optimal")
    pl = r.module.placement
    assert {pl.devices[d] for d in set(pl.device_of.numpy().tolist()) if d >= 0} == used
    # the placed model's simulated figures are the hosts' (the assign pass prices it on them)
    p = problem_of(r.module, pl.devices).with_hosts(Hosts.from_text(pl.info["hosts_table"]))
    gd = r.module.partition.group_device.numpy()
    assert float(pl.info["simulated"]) == pytest.approx(Simulator(p).latency(gd), rel=1e-6)
    assert pl.info["hosts"].startswith("a: ")


def test_throughput_plans_across_hosts_hold_each_hosts_memory(model, tmp_path):
    r, t = compiled(model, tmp_path, two_hosts(memory="640KiB"), method="auto", options={"requests": 4})
    info = r.module.partition.info
    used = {r.module.placement.devices[d] for d in set(r.module.placement.device_of.numpy().tolist())}
    assert used == {"A", "B"} and "host a cannot hold the model" in info["report"]
    assert " | " in info["best_plan"] and {"A", "B"} <= set(info["best_plan"].replace("|", " ").split())


def test_a_model_no_hosts_hold_is_refused_in_one_line(model, tmp_path):
    with pytest.raises(HdpError) as e:
        compiled(model, tmp_path, two_hosts(memory="256KiB"), method="optimal")
    msg = str(e.value)
    assert "\n" not in msg
    assert "the model does not fit across the hosts: it needs at least 1" in msg
    assert "the hosts hold a 256.0 KiB, b 256.0 KiB" in msg and not (tmp_path / "p.xml").exists()


# ----------------------------------------------------------------------------- hdp calibrate --link


def test_the_link_fit_is_least_squares_with_its_residual():
    sizes = np.array(L.SIZES, np.float64)
    lat, bw, rms = L.fit_link(sizes, 2e-4 + sizes / 1e8)
    assert lat == pytest.approx(2e-4, rel=1e-6) and bw == pytest.approx(1e8, rel=1e-6) and rms < 1e-12
    with pytest.raises(InputError, match="do not grow with the bytes"):
        L.fit_link(sizes, np.full(sizes.shape, 1e-3))


def test_link_errors_and_no_ray_are_one_line(tmp_path, monkeypatch):
    (tmp_path / "two.toml").write_text(two_hosts())
    run = CliRunner().invoke
    r = run(main, ["calibrate", "--link", "a,c", "--target", str(tmp_path / "two.toml"), "--no-cache"])
    assert r.exit_code != 0 and "--link a,c: target 'two-hosts' has no host 'c' (hosts: a, b)" in r.output
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails
    r = run(main, ["calibrate", "--link", "a,b", "--target", str(tmp_path / "two.toml"), "--no-cache"])
    assert r.exit_code != 0 and r.output.strip().endswith("--link needs Ray: pip install 'hdp[ray]'")
    assert "Traceback" not in r.output


def test_a_fitted_link_is_used_by_compile_and_said(model, tmp_path):
    (tmp_path / "two.toml").write_text(two_hosts(bandwidth=1e5, latency=0.05))
    t = parse_target(two_hosts(bandwidth=1e5, latency=0.05), "t.toml")
    fit = L.LinkFit(target="two-hosts", hosts=("a", "b"), latency=1e-5, bandwidth=1e11, residual=0.0,
                    sizes=(1, 2), seconds=(0.0, 0.0), placed="local")
    L.LinkStore(tmp_path / "cache").put(t, fit)
    args = ["compile", str(model), "--target", str(tmp_path / "two.toml"), "-o", str(tmp_path / "p.xml"),
            "--cache-dir", str(tmp_path / "cache"), "--method", "optimal", "--no-check", "--no-compare"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert "link a-b: fitted by hdp calibrate --link" in r.output and "in place of the target's" in r.output
    r2 = CliRunner().invoke(main, args[:4] + ["-o", str(tmp_path / "q.xml"), "--no-cache", "--method", "optimal",
                                              "--no-check", "--no-compare"])
    assert r2.exit_code == 0 and "link a-b: the target's" in r2.output


@pytest.mark.slow
def test_calibrate_link_measures_between_two_ray_actors(tmp_path, monkeypatch):
    pytest.importorskip("ray")
    monkeypatch.setenv("HOME", str(tmp_path))  # Ray's files stay out of the user's home
    short = Path(tempfile.mkdtemp(prefix="hdp-ray-", dir="/tmp"))  # Ray's socket paths must stay under 108 bytes
    monkeypatch.setenv("RAY_TMPDIR", str(short))
    t = parse_target(two_hosts(), "t.toml")
    import ray  # heavy, optional: only the slow test starts it

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, _temp_dir=str(short))
    try:
        fit = L.measure_link(t, "a", "b", sizes=(4096, 1 << 20, 4 << 20), repeats=3)
    finally:
        ray.shutdown()
        shutil.rmtree(short, ignore_errors=True)
    assert fit.placed == "local" and fit.bandwidth > 0 and len(fit.seconds) == 3 and fit.residual >= 0


def read_plan_bytes(data: bytes) -> ServingPlan:
    return msgspec.json.decode(data, type=ServingPlan)


def test_the_concurrent_executor_is_refused_on_several_hosts(model, tmp_path):
    with pytest.raises(HdpError, match="--execution concurrent runs one process on one host"):
        compiled(model, tmp_path, two_hosts(), method="heft", options={"execution": "concurrent"})
