"""The plain compile a served placement is compared with (hdp.runtime.serve.serving): which device, and
the words of the comparison (fabricated window rates; the real serving runs in test_objectives'
slow tests)."""

from __future__ import annotations

import msgspec
import numpy as np

from hdp.runtime.measure.load import HostLoad
from hdp.runtime.measure.measurement import Served
from hdp.runtime.serve.serving import AgainstPlain, fastest_plain, plain_streams, plain_streams_config
from hdp.target.target import load_target


def test_the_plain_device_is_the_real_one_the_simulator_makes_fastest_alone():
    t = load_target("virtual-2x1")
    assert fastest_plain(t, "CPU=0.02,CPU_B=0.01") == "CPU_B"
    assert fastest_plain(t, "CPU=0.01,CPU_B=0.02") == "CPU"
    assert fastest_plain(t, None) == "CPU" and fastest_plain(t, "garbage,CPU_B=x") == "CPU"
    assert fastest_plain(t, "CPU=0,CPU_B=-1") == "CPU"  # no usable figure: the first real device
    assert fastest_plain(load_target("i9-flex170"), "CPU=0.01") is None  # modeled: nothing to serve on


def _served(rates, what="HETERO:CPU,CPU_B"):
    return Served(what=what, target="virtual-2x1", requests=2, per_batch=14, rates=tuple(rates))


def _against(placed_rates, plain_rates):
    placed, plain = _served(placed_rates), _served(plain_rates, "plain:CPU")
    config = plain_streams_config(load_target("virtual-2x1").device("CPU"), 2)
    return AgainstPlain(placed, plain, "CPU", 2, placed.period_ratio(plain, names=("plain CPU", "placed")), config)


def test_the_verdict_follows_the_paired_ratio():
    rng = np.random.default_rng(0)
    base = 50 + rng.normal(0, 2, 16)  # the host's drift moves both sides window by window
    slower = _against(base * 0.9, base)
    assert slower.versus.verdict == "slower"
    assert ("the plain CPU compile with its own streams serves 2 requests in flight faster: the placement takes "
            "1.11× its time per request") in slower.verdict()
    assert f"with {plain_streams(2)} streams" in slower.verdict() and "requests/s" in slower.verdict()
    equal = _against(base * (1 + rng.normal(0, 0.02, 16)), base)
    assert equal.versus.verdict == "equal" and "as fast as the plain CPU compile" in equal.verdict()
    faster = _against(base * 1.1, base)
    assert "faster than the plain CPU compile with its own streams: 0.91× its time per request" in faster.verdict()
    lines = slower.lines(simulated=50.0, plain_sim=100.0)
    assert lines[0].startswith("HETERO:CPU,CPU_B on virtual-2x1: ") and lines[1].startswith("plain:CPU on ")
    assert "placed vs plain CPU (windows side by side, time per request): 1.11× slower" in lines[2]
    assert "measured/simulated" in lines[3] and "simulated placed/plain CPU rate: 0.500; measured 0.900" in lines[4]
    assert len(slower.lines()) == 3  # nothing simulated to set beside it
    assert all("inferences/s" not in x for x in lines) and "requests/s" in lines[0]  # one rate unit
    # a device that is no CPU gets the plugin's throughput hint, and the verdict says so
    gpu = AgainstPlain(slower.placed, slower.plain, "GPU", 2, slower.versus,
                       {"PERFORMANCE_HINT": "THROUGHPUT", "PERFORMANCE_HINT_NUM_REQUESTS": "2"})
    assert gpu.verdict().endswith("on GPU with PERFORMANCE_HINT=THROUGHPUT, PERFORMANCE_HINT_NUM_REQUESTS=2")


def test_served_windows_in_blocks_are_judged_by_the_interval_covering_both():
    rng = np.random.default_rng(1)
    base = 50 + rng.normal(0, 1, 12)
    placed = msgspec.structs.replace(_served(base * np.r_[[0.9] * 6, [1.0] * 6]), blocks=(0,) * 6 + (1,) * 6)
    plain = _served(base, "plain:CPU")
    v = placed.period_ratio(plain)
    assert v.blocks == 2 and v.verdict == "equal"  # slower in one block, equal in the other: no claim
    loaded = msgspec.structs.replace(_served(base * 0.8), load=HostLoad(others=1.5, cores=2, seconds=3.0))
    ap = AgainstPlain(loaded, plain, "CPU", 2, loaded.period_ratio(plain), default=True,
                      plain_config={"PERFORMANCE_HINT": "THROUGHPUT"})
    assert ap.versus.loaded and ap.verdict().startswith("verdict: no claim against the default plain CPU compile")


def test_a_failed_side_is_said_not_compared():
    broken = AgainstPlain(_served([50.0] * 4), Served(what="plain:CPU", target="virtual-2x1", requests=2, per_batch=0,
                                                      error="plain:CPU: no such device"), "CPU", 2, None)
    assert broken.verdict() == ("verdict: not compared with the plain CPU compile with its own streams: "
                                "plain:CPU: no such device")
    assert broken.lines()[1] == "plain:CPU on virtual-2x1: failed: plain:CPU: no such device"


def test_a_rate_without_an_interval_says_so_instead_of_printing_infinities():
    """Too few independent windows for a 95 % interval (here 5; also 12 whose rates drift together):
    the summary and the measured/simulated line say so (a trial saw "95 % CI -inf-inf")."""
    drifting = _served([100.0 + 5 * k for k in range(5)])
    est, lo, hi = drifting.estimate()
    assert not (np.isfinite(lo) and np.isfinite(hi))
    assert "no 95 % interval" in drifting.summary() and "inf-" not in drifting.summary()
    ap = AgainstPlain(drifting, _served([100.0] * 5, "plain:CPU"), "CPU", 2, None)
    assert ap.lines(simulated=100.0)[2].endswith("(no interval)")
