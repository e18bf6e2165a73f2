"""The statistics of timing comparisons (hdp/runtime/measure/stats.py), on synthetic run times with the
noise of a shared machine (tests/noisy_machine.py): fast and deterministic."""

import math
import os

import numpy as np
import pytest
from noisy_machine import PRESETS, NoisyMachine

from hdp.runtime.measure import stats
from hdp.runtime.measure.load import HostLoad, Sampler, host_busy_seconds
from hdp.runtime.measure.selection import select_best, shortlist
from hdp.runtime.measure.stats import (
    Comparison,
    SequentialPlan,
    compare,
    hodges_lehmann,
    lag1_autocorrelation,
    round_order,
    run_sequential,
)

#: the plan of the done-when tests: resolve 3 %, at most 600 rounds (a 40 ms model, two candidates:
#: about 50 s of running on the shared VM)
PLAN = SequentialPlan(resolution=0.03, max_rounds=600, max_seconds=1e9)


def _run(true, seed, plan=PLAN, preset="shared"):
    m = NoisyMachine.preset(preset, true, seed)
    times, reason = run_sequential(plan, len(true), m.run_rounds, m.clock)
    return times, reason


# --------------------------------------------------------------------------- the interval


@pytest.mark.parametrize("n, k", [(5, 0), (6, 1), (10, 9), (20, 53), (30, 138), (50, 435)])
def test_signed_rank_critical_values_match_the_tables(n, k):
    # two-sided 5 % critical values T (reject when T+ <= T) of the Wilcoxon signed-rank test: k = T + 1
    assert stats._rank_k(n, 0.95) == k


def test_normal_approximation_is_close_to_exact_and_conservative():
    exact = int(np.count_nonzero(stats._signed_rank_cdf(150) <= 0.025 + 1e-12))
    approx = stats._rank_k(150, 0.95)  # 150 > EXACT_N: normal approximation
    assert 150 > stats.EXACT_N and exact - 2 <= approx <= exact


def test_walsh_order_statistics_by_bisection_match_direct():
    d = np.random.default_rng(3).standard_t(3, 700) * 0.1
    i, j = np.triu_indices(d.size)
    w = np.sort((d[i] + d[j]) / 2)
    ks = [1, 17, w.size // 2, w.size - 5, w.size]
    got = stats._walsh_order(d, ks)  # 700 > _WALSH_DIRECT: bisection
    assert d.size > stats._WALSH_DIRECT
    assert got == [float(x) for x in w[np.array(ks) - 1]]
    small = d[:50]
    assert stats._walsh_order(small, [1, 1275]) == [float(small.min()), float(small.max())]


def test_hodges_lehmann_estimate_and_interval():
    est, lo, hi = hodges_lehmann([1.0, 2.0, 3.0, 4.0, 100.0, 3.5], serial=False)
    assert lo == 1.0 and hi == 100.0  # n = 6: the 96.9 % interval is [min, max]
    assert 2.5 <= est <= 4.0  # robust: the 100 barely moves it
    assert hodges_lehmann([1.0, 2.0, 3.0]) [1:] == (-math.inf, math.inf)  # too few for 95 %
    assert math.isnan(hodges_lehmann([])[0])


def test_interval_coverage_is_nominal_on_independent_data():
    rng = np.random.default_rng(0)
    cover = sum(lo <= 0 <= hi for _, lo, hi in (hodges_lehmann(rng.standard_normal(25)) for _ in range(2000)))
    assert 0.93 <= cover / 2000 <= 0.97


def test_serial_correlation_widens_the_interval():
    rng = np.random.default_rng(0)
    e = rng.standard_normal(4000)
    ar = np.empty_like(e)
    ar[0] = e[0]
    for i in range(1, e.size):
        ar[i] = 0.6 * ar[i - 1] + e[i]
    assert lag1_autocorrelation(ar) == pytest.approx(0.58, abs=0.05)  # rank: (6/pi) asin(0.3)
    assert lag1_autocorrelation(e) < 0.1
    assert lag1_autocorrelation(-ar[::-1] * np.resize([1, -1], ar.size)) == 0.0  # negative: clipped
    _, lo, hi = hodges_lehmann(ar)
    _, lo0, hi0 = hodges_lehmann(ar, serial=False)
    assert hi - lo > 1.5 * (hi0 - lo0)


# --------------------------------------------------------------------------- verdicts


def test_verdict_texts():
    """One vocabulary (hdp.base.glossary): a time change is a ratio of times, "0.95× the time,
    faster" or "1.10× slower", its interval a range of ratios."""
    rng = np.random.default_rng(2)
    a = 0.010 * np.exp(rng.normal(0, 0.02, 200))
    faster = compare(a, a * 0.95 * np.exp(rng.normal(0, 0.01, 200)), names=("plain CPU", "placement"))
    assert faster.verdict == "faster" and faster.ratio == pytest.approx(0.95, abs=0.01)
    assert faster.describe().startswith("0.95× the time, faster (95 % CI 0.9") and faster.describe().endswith("×)")
    assert f"{faster.low:.3f}–{faster.high:.3f}×" in faster.describe()  # two decimals would not tell them apart
    assert faster.text().startswith("placement vs plain CPU: 0.95× the time, faster") and "200 rounds" in faster.text()
    slower = compare(a, a * 1.10)
    assert slower.verdict == "slower" and slower.describe() == "1.10× slower (95 % CI 1.100–1.100×)"
    equal = compare(a, a * np.exp(rng.normal(0, 0.02, 200)))
    # never "equal" alone: the estimate and its interval, so a wide interval cannot pass for equality
    said = "equal within noise" if equal.low <= 1 <= equal.high else "no practical difference (under 0.5 %)"
    assert equal.verdict == "equal" and equal.describe().startswith(f"{said}: {equal.ratio:.2f}× the time (95 % CI ")
    assert 0 < equal.resolution < 0.01
    wide = compare(a[:12], a[:12] * 1.3 * np.exp(rng.normal(0, 0.8, 12)))
    assert wide.verdict == "equal" and "equal within noise: " in wide.describe()
    assert "CI" in wide.describe(level=False) and "95 %" not in wide.describe(level=False)
    fam = compare(a, a * 1.10, family=2)
    assert fam.level == pytest.approx(0.975) and "(95 % simultaneous CI 1.100–1.100×)" in fam.describe()
    few = compare(a[:4], a[:4] * 2)
    assert few.verdict == "equal" and "not resolved" in few.describe()
    d = faster.to_dict()
    assert d["verdict"] == "faster" and d["text"] == faster.text() and d["resolution"] > 0 and d["claimed"]
    with pytest.raises(ValueError, match="equal-length"):
        compare(a, a[:10])


def test_a_difference_within_the_threshold_is_no_practical_difference():
    """A head-to-head's verdict claims a difference only beyond the practical threshold (3 %): a
    resolved 2 % is said to be too small to act on."""
    a = np.full(500, 0.010) * np.exp(np.random.default_rng(3).normal(0, 0.002, 500))
    c = compare(a, a * 0.98, margin=stats.THRESHOLD)
    assert c.high < 0.99 and c.verdict == "equal" and not c.claimed
    assert c.describe().startswith("no practical difference (under 3 %): 0.98× the time")
    assert compare(a, a * 0.96, margin=stats.THRESHOLD).verdict == "faster"
    assert SequentialPlan().margin == stats.THRESHOLD == 0.03


def test_the_interval_covers_every_block():
    """Two blocks that disagree (another compile, another load: 4 % apart) give an interval that
    covers both; a difference is claimed only if it lies beyond the threshold in both."""
    rng = np.random.default_rng(5)
    a = 0.010 * np.exp(rng.normal(0, 0.005, 200))
    b = np.concatenate([a[:100] * 0.94, a[100:] * 0.99]) * np.exp(rng.normal(0, 0.005, 200))
    blocks = np.repeat([0, 1], 100)
    pooled = compare(a, b, margin=stats.THRESHOLD)
    covered = compare(a, b, margin=stats.THRESHOLD, blocks=blocks)
    first = compare(a[:100], b[:100], margin=stats.THRESHOLD)
    second = compare(a[100:], b[100:], margin=stats.THRESHOLD)
    assert first.verdict == "faster" and second.verdict == "equal"
    assert covered.low <= min(first.low, second.low) + 1e-12 and covered.high >= max(first.high, second.high) - 1e-12
    assert covered.verdict == "equal" and covered.blocks == 2 and "2 blocks" in covered.describe()
    assert pooled.high - pooled.low < covered.high - covered.low
    with pytest.raises(ValueError, match="one block per round"):
        compare(a, b, blocks=blocks[:10])


def test_a_loaded_host_claims_nothing():
    """Other processes busy on the cores while measuring (HostLoad beyond its limit): the verdict
    is withheld, and the words say why."""
    rng = np.random.default_rng(6)
    a = 0.010 * np.exp(rng.normal(0, 0.01, 100))
    quiet = HostLoad(others=0.02, cores=2, seconds=3.0)
    busy = HostLoad(others=1.1, cores=2, seconds=3.0)
    assert not quiet.loaded and busy.loaded and not HostLoad(others=math.nan, cores=2, seconds=1).loaded
    assert compare(a, a * 0.8, load=quiet).verdict == "faster"
    held = compare(a, a * 0.8, load=busy)
    assert held.verdict == "equal" and held.withheld == "faster" and held.loaded and not held.claimed
    assert held.describe().startswith("no claim: other processes kept 1.1 of 2 cores busy (over 0.2)")
    assert "measured 0.80× the time" in held.describe()
    sel = select_best(np.column_stack([a, a * 0.8]), ["single", "mixed"], preference=[0], load=busy)
    assert sel.winner == 0 and "no claim" in sel.reason
    assert select_best(np.column_stack([a, a * 0.8]), ["single", "mixed"], preference=[0], load=quiet).winner == 1
    assert HostLoad.of(busy=5.0, own=3.0, wall=2.0, cores=2).others == pytest.approx(1.0)
    assert math.isnan(HostLoad.of(busy=-1.0, own=3.0, wall=2.0, cores=2).others)


def test_the_host_load_is_read_from_proc_stat(tmp_path):
    line = "cpu  100 5 50 1000 7 3 2 40 0 0\n"
    f = tmp_path / "stat"
    f.write_text(line + "cpu0 1 2 3 4\n")
    tick = os.sysconf("SC_CLK_TCK")
    assert host_busy_seconds(str(f)) == pytest.approx((100 + 5 + 50 + 3 + 2 + 40) / tick)
    assert host_busy_seconds(str(tmp_path / "none")) == -1.0
    f.write_text("intr 1 2 3\n")
    assert host_busy_seconds(str(f)) == -1.0
    with Sampler() as s:
        sum(i * i for i in range(200000))  # busy on a core: its own CPU time shows
    assert s.result.wall > 0 and s.result.own > 0 and (s.result.busy >= 0 or not os.path.exists("/proc/stat"))


def test_a_difference_below_the_margin_is_never_called():
    a = np.full(500, 0.010) * np.exp(np.random.default_rng(3).normal(0, 0.001, 500))
    c = compare(a, a * 1.003)  # 0.3 %: resolved to well under 0.1 %, yet below the 0.5 % margin
    assert c.high - c.low < 0.001 and c.verdict == "equal"
    assert compare(a, a * 1.008).verdict == "slower"


def test_same_graph_is_never_called_faster():
    rng = np.random.default_rng(4)
    a = 0.010 * np.exp(rng.normal(0, 0.02, 100))
    c = compare(a, a * 0.9, same_graph=True)
    assert c.verdict == "equal" and "same graph" in c.describe() and "0.90× the time, faster" in c.overruled
    assert compare(a, a * 1.1, same_graph=True).verdict == "slower"  # HETERO's own cost may show


# --------------------------------------------------------------------------- run order and plan


@pytest.mark.parametrize("k", [2, 3, 4])
def test_round_order_is_balanced(k):
    orders = [round_order(r, k) for r in range(2 * k)]
    assert all(sorted(o) == list(range(k)) for o in orders)
    position = np.zeros((k, k), int)
    follows = np.zeros((k, k), int)
    for o in orders:
        for p, c in enumerate(o):
            position[c, p] += 1
        for x, y in zip(o, o[1:]):
            follows[x, y] += 1
    assert (position == 2).all()
    off = follows[~np.eye(k, dtype=bool)]
    assert (off == off[0]).all() and np.trace(follows) == 0


def test_plan_validation():
    for bad in (dict(resolution=0), dict(level=0.999), dict(min_rounds=3), dict(max_rounds=5),
                dict(max_seconds=0)):
        with pytest.raises(ValueError):
            SequentialPlan(**bad)


def test_plan_stops_at_caps_and_says_why():
    times, reason = _run([0.01, 0.01], 0, SequentialPlan(max_rounds=40, max_seconds=1e9))
    assert times.shape == (40, 2) and reason == "round cap (40 rounds)"
    times, reason = _run([0.01, 0.01], 0, SequentialPlan(max_seconds=0.3, max_rounds=10_000))
    assert reason.startswith("time cap (0.3 s") and 10 <= times.shape[0] < 30  # ~20 ms per round
    c = compare(times[:, 0], times[:, 1])
    assert c.verdict == "equal" and c.resolution > 0.03  # too few rounds: what the data can resolve


def test_plan_resolves_clear_differences_early():
    times, reason = _run([0.010, 0.013], 1, PLAN, preset="quiet")
    assert reason.startswith("resolved") and times.shape[0] < 40
    assert compare(times[:, 0], times[:, 1]).verdict == "slower"


def test_run_sequential_discards_warmup_rounds():
    seen = []

    def runner(orders):
        seen.extend(orders)
        return np.array([[1.0, 1.0] if len(seen) - len(orders) + i else [50.0, 1.0] for i in range(len(orders))])

    times, _ = run_sequential(SequentialPlan(max_rounds=12, discard=1), 2, runner, clock=lambda: 0.0)
    assert len(seen) == 13 and times.shape == (12, 2) and (times == 1.0).all()
    assert seen[:4] == [[0, 1], [1, 0], [0, 1], [1, 0]]


# --------------------------------------------------------------------------- the done-when


def test_identical_candidates_are_equal_within_noise_95_of_100():
    verdicts = [compare(*_run([0.010, 0.010], seed)[0].T).verdict for seed in range(100)]
    assert verdicts.count("equal") >= 95, verdicts


@pytest.mark.parametrize("effect, verdict", [(0.05, "slower"), (-0.05, "faster")])
def test_a_real_5_percent_difference_is_detected_95_of_100(effect, verdict):
    got = [compare(*_run([0.010, 0.010 * (1 + effect)], 1000 + seed)[0].T).verdict for seed in range(100)]
    assert got.count(verdict) >= 95, got
    assert got.count("faster" if verdict == "slower" else "slower") == 0


# --------------------------------------------------------------------------- best of several


def test_shortlist():
    assert shortlist([3.0, 1.0, 2.0, 5.0, np.inf], top=2) == [1, 2]
    assert shortlist([3.0, 1.0, 2.0, 5.0], top=2, preference=[3]) == [1, 2, 3]
    assert shortlist([3.0, 1.0, 2.0, np.inf], top=2, preference=[3]) == [1, 2]  # a failed one is not added
    assert shortlist([1.0, 1.0, 1.0], top=2) == [0, 1]


def test_best_of_identical_candidates_keeps_the_preferred():
    winners = []
    for seed in range(100):
        times, _ = _run([0.010, 0.010, 0.010], 2000 + seed)
        winners.append(select_best(times, ["x", "y", "z"], preference=[1, 0]).winner)
    assert winners.count(1) >= 95, winners


def test_anchored_plan_answers_equal_candidates_in_fewer_rounds_and_keeps_the_preferred():
    """Anchored (auto's head-to-head): the rounds stop once no candidate can beat the preferred one
    by the resolution; with three equal candidates that takes far fewer rounds than resolving every
    difference to the same resolution, and the preferred one is still kept."""
    plain, anchored = SequentialPlan(resolution=0.05, max_seconds=1e9), SequentialPlan(resolution=0.05, max_seconds=1e9,
                                                                                      anchor=1)
    rounds, winners = {"plain": [], "anchored": []}, []
    for seed in range(40):
        for name, plan in (("plain", plain), ("anchored", anchored)):
            times, reason = _run([0.010, 0.010, 0.010], 4000 + seed, plan)
            rounds[name].append(times.shape[0])
            if name == "anchored":
                assert reason.startswith("none can beat the preferred candidate by 5 %"), reason
                winners.append(select_best(times, ["x", "y", "z"], preference=[1, 0]).winner)
    assert np.median(rounds["anchored"]) * 2 < np.median(rounds["plain"]), rounds
    assert winners.count(1) >= 38, winners


def test_anchored_plan_still_finds_a_candidate_that_beats_the_anchor():
    winners = []
    for seed in range(40):
        times, reason = _run([0.010, 0.010, 0.0092], 5000 + seed, SequentialPlan(resolution=0.05, max_seconds=1e9, anchor=0))
        assert not reason.startswith("none can beat"), reason
        winners.append(select_best(times, ["single:CPU", "optimal", "refined"], preference=[0]).winner)
    assert winners.count(2) >= 38, winners


def test_best_of_keeps_a_candidate_that_beats_the_preferred():
    winners = []
    for seed in range(100):
        times, _ = _run([0.010, 0.010, 0.0095], 3000 + seed)
        sel = select_best(times, ["single:CPU", "optimal", "refined"], preference=[0])
        winners.append(sel.winner)
    assert winners.count(2) >= 95, winners


def test_select_best_rules():
    rng = np.random.default_rng(5)
    base = 0.010 * np.exp(rng.normal(0, 0.01, (300, 1)))
    times = base * np.array([1.0, 0.9, 0.9]) * np.exp(rng.normal(0, 0.005, (300, 3)))
    sel = select_best(times, ["a", "b", "c"], preference=[2])
    assert sel.winner == 2 and set(sel.tied) == {1, 2} and "preference" in sel.reason
    assert [c.b for c in sel.comparisons] == ["a", "b"] and all(c.a == "c" for c in sel.comparisons)
    sel = select_best(times, ["a", "b", "c"])  # nothing preferred among the tied: the fastest
    assert sel.winner == sel.fastest and sel.winner in (1, 2)
    assert all(c.level == pytest.approx(0.975) and c.family == 2 for c in sel.comparisons)  # Bonferroni over 2
    # the preferred candidate is kept unless another beats it beyond noise, and then no one shown beats the kept
    sel = select_best(times, ["a", "b", "c"], preference=[0])
    assert sel.winner in (1, 2) and all(c.verdict != "faster" for c in sel.comparisons)
    # a placement with all ops on one device and that device's plain compile: always tied
    times = base * np.array([1.0, 0.8]) * np.exp(rng.normal(0, 0.005, (300, 2)))
    sel = select_best(times, ["plain CPU", "all on CPU"], preference=[0], same_graph=lambda i, j: True)
    assert sel.winner == 0 and sel.tied == (0, 1) and "same graph" in sel.comparisons[0].overruled
    assert select_best(times[:, :1]).winner == 0
    with pytest.raises(ValueError, match="preference index 5"):
        select_best(times, preference=[5])


# --------------------------------------------------------------------------- the synthetic machine


def test_noisy_machine_is_reproducible_and_noisy():
    a = NoisyMachine.preset("shared", [0.01, 0.02], 7).run_rounds([round_order(r, 2) for r in range(300)])
    b = NoisyMachine.preset("shared", [0.01, 0.02], 7).run_rounds([round_order(r, 2) for r in range(300)])
    assert (a == b).all()
    lt = np.log(a[:, 0])
    robust_sd = 1.4826 * np.median(np.abs(lt - np.median(lt)))
    assert 0.15 < robust_sd < 0.5  # like the shared VM (0.28 measured)
    assert np.median(a[:, 1] / a[:, 0]) == pytest.approx(2.0, rel=0.1)
    assert set(PRESETS) == {"quiet", "shared"}
    with pytest.raises(ValueError, match="no noise preset"):
        NoisyMachine.preset("loud", [0.01])
    with pytest.raises(ValueError, match="positive"):
        NoisyMachine([0.0])


def test_comparison_is_a_frozen_value():
    c = Comparison(a="a", b="b", rounds=3, ratio=1.0, low=0.9, high=1.1)
    with pytest.raises(AttributeError):
        c.ratio = 2.0
    assert c.describe() == "equal within noise: 1.00× the time (95 % CI 0.90–1.10×)"
