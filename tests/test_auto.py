"""The default method (``auto``), budgets that hold inside training, and hsdag's final choice by
head-to-head statistics rather than by the minimum over noisy samples.

Where the test is about a decision, the real Measurer talks to a scripted worker (synthetic,
seeded timing noise at the protocol boundary: tests/scripted_worker.py), so the test is fast and
deterministic and the measuring code is the real one; one test runs the real thing on the
``virtual`` target."""

from __future__ import annotations

import time

import numpy as np
import pytest
from placement_helpers import random_module
from scripted_worker import ScriptedWorker, scripted_measurer
from test_learn import DEV2, FAST, FakeClock, blocks_module, reference

import hdp.learn.trainer as trainer
import hdp.placers.auto as auto_mod
import hdp.placers.hsdag as hs
from hdp.ir import serde
from hdp.learn import clock as learn_clock
from hdp.placement.problem import build_problem
from hdp.placement.simulate import Simulator
from hdp.placers import PlaceContext, place, stage_times
from hdp.placers.options import Auto, Optimal, method_from
from hdp.target.target import Device, Target

MODELED2 = Target(name="m2", devices=[Device(name="D0", kind="modeled"), Device(name="D1", kind="modeled")])
REAL2 = Target(name="r2", devices=[Device(name="A"), Device(name="B")])


# --- auto on a modeled target ------------------------------------------------------------------

def mixed_module(seed=3):
    """A random graph whose optimum under the cost model uses both devices (cheap links)."""
    return random_module(np.random.default_rng(seed), 30, 2, lat=1e-3, bw=1e6, ovh=1e-3)


def test_auto_on_a_modeled_target_is_optimal_without_learning(monkeypatch):
    m = mixed_module()
    p = build_problem(m, ("D0", "D1"))
    monkeypatch.setattr(auto_mod, "train", lambda *a, **k: pytest.fail("auto learned on a modeled target"))
    monkeypatch.setattr(auto_mod, "_measurer", lambda *a, **k: pytest.fail("auto measured on a modeled target"))
    ctx = PlaceContext(module=m, problem=p, target=MODELED2)
    got = place(Auto(), ctx)
    opt = place(Optimal(), ctx)
    sim = Simulator(p)
    assert np.unique(opt.group_device).size == 2  # the optimum is mixed: auto must not settle for one device
    assert sim.latency(got.group_device) <= sim.latency(opt.group_device) * (1 + 1e-12)
    # what auto kept is the best candidate it simulated: optimal, or optimal/heft refined under the model
    assert got.info["chosen"].split("+")[0] in ("optimal", "heft")
    assert got.info["stages"] == "candidates" and "no learning" in got.info["report"]
    assert "lower bound" in got.info["report"]
    assert Auto().stages(MODELED2) == ("costs",) and Auto(learn="yes").stages(MODELED2)[-1] == "coarse"


def test_auto_drops_an_optimal_that_finds_no_placement_in_its_time(monkeypatch):
    # On large cost graphs HiGHS may stop before its first placement: auto keeps the other candidates
    # (it raised and lost every one of them on two of the peer's workloads).
    from hdp.base.errors import InputError

    m = mixed_module()
    p = build_problem(m, ("D0", "D1"))
    real_place = auto_mod.place

    def place_no_optimal(opts, ctx):
        if isinstance(opts, Optimal):
            raise InputError("optimal: HiGHS found no placement within 1 s")
        return real_place(opts, ctx)

    monkeypatch.setattr(auto_mod, "place", place_no_optimal)
    got = place(Auto(), PlaceContext(module=m, problem=p, target=MODELED2))
    assert not got.info["chosen"].startswith("optimal")
    assert Simulator(p).latency(got.group_device) <= min(Simulator(p).latency(p.single(j)) for j in range(2))


def test_auto_on_one_device_and_bad_options():
    m = mixed_module()
    got = place(Auto(), PlaceContext(module=m, problem=build_problem(m, ("D1",)), target=MODELED2))
    assert got.group_device.tolist() == [0] * got.group_device.size and "one device" in got.info["message"]
    from hdp.base.errors import InputError

    for bad, opt in (({"learn": "maybe"}, "learn"), ({"budget": "-1"}, "budget"), ({"samples": "1"}, "samples"),
                     ({"resolution": "2"}, "resolution")):
        with pytest.raises(InputError, match=opt):
            method_from("auto", bad)
    assert method_from("auto:no").learn == "no" and method_from("auto").label() == "auto"


def test_no_wall_time_in_the_module_of_a_deterministic_method(branchy_xml):
    """Same input, same bytes: two runs of optimal and of auto on a modeled target give the same
    module digest (solve times go to note_time, not into info)."""
    from hdp.ir.openvino_frontend import lower
    from hdp.passes.manager import PassManager
    from hdp.pipeline.schedule import compile_schedule
    from hdp.target.target import load_target

    t = load_target("i9-flex170")
    for method in ("optimal", "auto"):
        with stage_times() as rows:
            a = PassManager(compile_schedule(t, method)).run(lower(branchy_xml))
        b = PassManager(compile_schedule(t, method)).run(lower(branchy_xml))
        assert serde.digest(a) == serde.digest(b)
        assert rows and all(s >= 0 for _, s in rows)
    assert [type(x).pass_name() for x in compile_schedule(t, "auto")] == ["support", "profile", "partition", "assign"]


# --- auto on a real target (fake measurements) ------------------------------------------------

def _real_ctx(m, **kw):
    return PlaceContext(module=m, problem=build_problem(m, DEV2), target=REAL2, **kw)


def _scripted(monkeypatch, module, attr, tmp_path, **kw) -> list[ScriptedWorker]:
    """Make ``module.attr`` (a placer's Measurer factory) give real Measurers over ScriptedWorkers
    made with ``kw``; returns the workers made."""
    workers = []

    def make(o, ctx):
        workers.append(ScriptedWorker(ctx.problem, **kw))
        return scripted_measurer(tmp_path, ctx.target, workers[-1], runs=o.measure_runs,
                                 warmup=getattr(module, "WARMUP", 3), timeout=ctx.timeout)

    monkeypatch.setattr(module, attr, make)
    return workers


@pytest.mark.parametrize("gain", [0.0, 0.10])
def test_auto_keeps_the_best_single_device_unless_another_beats_it_beyond_noise(monkeypatch, tmp_path, gain):
    """Every candidate equally fast (gain 0): the preferred single device is kept, whatever the
    medians' order. A mixed candidate truly 10 % faster: it is kept. (On the blocks chain both
    single devices simulate alike and the cost model's optimum is mixed.)"""
    m = blocks_module()
    ctx = _real_ctx(m)

    def truth(gd):
        return 10e-3 * (1 - gain * (np.unique(gd).size > 1))

    workers = _scripted(monkeypatch, auto_mod, "_measurer", tmp_path, truth=truth, h2h_sd=0.02, seed=11)
    got = place(Auto(learn="no", budget=0), ctx)
    head = workers[0].heads[0]  # singles first (A, then B), then mixed
    assert [np.unique(gd).tolist() for gd in head[:2]] == [[0], [1]] and len(head) >= 3
    assert all(np.unique(gd).size == 2 for gd in head[2:])
    assert workers[0].requests[0] == "load" and "rounds" in workers[0].requests
    if gain == 0:
        assert got.info["chosen"] == "single:A" and np.unique(got.group_device).tolist() == [0]
        assert "equal within noise" in got.info["report"] or "no practical difference" in got.info["report"]
        assert_one_interval_per_pair(got.info["report"].splitlines())
    else:
        assert not got.info["chosen"].startswith("single:") and np.unique(got.group_device).size == 2
        assert "faster" in got.info["report"] or "slower" in got.info["report"]


def test_auto_accepts_learning_only_when_it_wins_head_to_head(monkeypatch, tmp_path):
    """The measured refinement finds lucky samples (a -15 % single measurement) of placements no
    faster than the winner: the final head-to-head rejects them and the winner is kept."""
    m = blocks_module()
    ctx = _real_ctx(m, seed=2)

    def truth(gd):
        return 10e-3

    def lucky(gd):
        return -0.15 if np.unique(gd).size > 1 else 0.0

    workers = _scripted(monkeypatch, auto_mod, "_measurer", tmp_path, truth=truth, sd=0.01, lucky=lucky, seed=5)
    # the implementation directly: the hand-built module has no coarse stage, which place() would ask for
    got = auto_mod.auto(Auto(learn="yes", budget=0, samples=4, hidden=16, episodes=3, patience=6), ctx)
    w = workers[0]
    assert len(w.measured) >= 2  # learning ran: the warm start and at least one sampled placement
    assert len(w.heads) == 2  # a final head-to-head happened, the kept placement first in it
    assert np.array_equal(w.heads[1][0], got.group_device)
    assert got.info["chosen"].startswith("single:") and "no gain beyond noise" in got.info["report"]


# --- budgets inside training ------------------------------------------------------------------

def test_deadline_stops_training_mid_episode_with_time_left_for_the_caller(monkeypatch):
    """Each evaluation takes 1 s of a fake clock; a deadline at 10.5 s, and 3 evaluations' time
    reserved for the caller: the last evaluation starts at 6 s and training stops in the middle of
    its first episode, before the deadline minus the reserve."""
    m = blocks_module()
    clock = FakeClock()
    monkeypatch.setattr(learn_clock, "now", clock)
    ev = reference(m)

    def slow(gd):
        clock.t += 1.0
        return ev(gd)

    from hdp.learn.graph import build_learn_graph

    lg = build_learn_graph(m, build_problem(m, DEV2))
    cfg = trainer.TrainConfig(episodes=5, deadline=10.5, reserve_evals=3, seed=1, **{**FAST, "samples": 20})
    r = trainer.train(lg, slow, cfg)
    assert r.stopped == "seconds" and r.episodes == 0 and 0 < r.samples < 20
    assert r.evaluations == 7 and clock.t <= 10.5 - 3
    # without the reserve: evaluations until the next would end past the deadline
    clock.t = 0.0
    r = trainer.train(lg, slow, trainer.TrainConfig(episodes=5, deadline=10.5, seed=1, **{**FAST, "samples": 20}))
    assert r.stopped == "seconds" and r.evaluations == 10 and clock.t <= 10.5


def test_deadline_is_checked_during_imitation(monkeypatch):
    """The clock advances only while imitating the warm start: training stops there, not after
    the 300 imitation steps."""
    m = blocks_module()
    clock = FakeClock(tick=0.01)
    monkeypatch.setattr(learn_clock, "now", clock)
    steps = []
    real_imitate = trainer.imitate

    def counting(*a, check=None, **k):
        def c():
            steps.append(1)
            check()
        return real_imitate(*a, check=c, **k)

    monkeypatch.setattr(trainer, "imitate", counting)
    from hdp.learn.graph import build_learn_graph

    lg = build_learn_graph(m, build_problem(m, DEV2))
    warm = np.array([0, 1] * 6, np.int16)  # alternating: many imitation steps to learn
    r = trainer.train(lg, reference(m), trainer.TrainConfig(deadline=0.12, warm_steps=300, seed=0, **FAST),
                      warm_start=("given", warm))
    assert r.stopped == "seconds" and r.samples == 0 and 0 < len(steps) < 15


def test_patience_stops_when_placements_bring_no_gain():
    m = blocks_module()
    from hdp.learn.graph import build_learn_graph

    lg = build_learn_graph(m, build_problem(m, DEV2))
    flat = trainer.train(lg, lambda gd: 1e-3, trainer.TrainConfig(episodes=20, patience=5, seed=0, **FAST))
    assert flat.stopped == "no gain" and flat.samples <= 6
    # a gain smaller than min_gain is no gain; the reference is the best at the last gain
    ev = reference(m)
    r = trainer.train(lg, ev, trainer.TrainConfig(episodes=20, patience=5, min_gain=0.9, seed=0, **FAST))
    assert r.stopped == "no gain"


# --- hsdag's final choice -----------------------------------------------------------------------

HS_SMALL = {"episodes": 3, "samples": 6, "hidden": 16, "warm_start": "none", "reward": "measure", "budget": 0}


def test_hsdag_final_choice_is_made_head_to_head_not_by_a_lucky_sample(monkeypatch, tmp_path):
    """Every placement is truly equally fast, but mixed placements measured alone sometimes come
    out 20 % lower (lucky samples). The minimum over samples is such a lucky one; the final
    head-to-head shows it equal to the best single device, which is kept."""
    m = blocks_module()
    ctx = _real_ctx(m, seed=4)
    hits = []

    def lucky(gd):
        hits.append(1)
        return -0.2 if np.unique(gd).size > 1 and len(hits) % 3 == 0 else 0.0

    workers = _scripted(monkeypatch, hs, "_make_measurer", tmp_path, truth=lambda gd: 10e-3, sd=0.005, lucky=lucky,
                        seed=3)
    got = hs.hsdag(method_from("hsdag", HS_SMALL), ctx)
    assert not got.info["sampled_best"].startswith("single:")  # training's minimum was a lucky sample
    assert workers[0].heads, "no final head-to-head"
    assert got.info["best_source"].startswith("single:") and np.unique(got.group_device).size == 1
    assert "equal within noise" in got.info["final"] or "no practical difference" in got.info["final"]
    assert_one_interval_per_pair(got.info["final"].splitlines())


def test_hsdag_keeps_a_learned_placement_that_truly_wins(monkeypatch, tmp_path):
    m = blocks_module()
    ctx = _real_ctx(m, seed=4)
    ev = reference(m)  # mixed placements are truly faster on this chain (blocks alternate devices)
    _scripted(monkeypatch, hs, "_make_measurer", tmp_path, truth=ev, sd=0.005, seed=3)
    got = hs.hsdag(method_from("hsdag", HS_SMALL), ctx)
    singles = min(ev(np.zeros(12, np.int16)), ev(np.ones(12, np.int16)))
    assert ev(got.group_device) < singles * 0.95 and not got.info["best_source"].startswith("single:")


# --- the real thing -----------------------------------------------------------------------------

def test_auto_on_virtual_measures_head_to_head_and_writes_a_placement(branchy_xml, tmp_path, monkeypatch):
    """On two real devices of one host, auto (no learning, only single devices measured) keeps the
    preferred single device unless the interleaved comparison shows it slower beyond noise, and
    compile reports what each stage contributed and where the time went. The final comparison with
    the plain compiles is that head-to-head (it ran every op on each device beside the kept
    placement), not measured again."""
    from click.testing import CliRunner

    from hdp.cli.main import main
    from hdp.runtime.measure.worker_client import WorkerPool, current_pool

    pools, park = [], WorkerPool.park
    monkeypatch.setattr(WorkerPool, "park", lambda self, w, *a: (pools.append((self, w)), park(self, w, *a))[1])
    out = tmp_path / "p.xml"
    r = CliRunner().invoke(main, ["compile", str(branchy_xml), "-o", str(out), "--target", "virtual",
                                  "--method", "auto:no", "--set", "top=0", "--budget", "20",
                                  "--cache-dir", str(tmp_path / "c"), "-v"])
    assert r.exit_code == 0, r.output
    assert pools and current_pool() is None  # the passes shared a worker ...
    assert all(pool.spare is None and not w.alive for pool, w in pools)  # ... stopped with the command
    lines = r.output.splitlines()
    at = lines.index("compared with the plain compiles in the placer's head-to-head above (measured in this run, "
                     "not repeated); the default plain compiles measured beside the placement:")
    # the comparisons are not stated a second time: the default plain compile's is measured beside the
    # placement (its head-to-head's header, and the verdict that states it)
    said = [x for x in lines[at:] if "CI" in x and not x.startswith("measured interleaved")]
    verdict = [x for x in lines[at:] if x.startswith("verdict: ")]
    assert len(verdict) == 1 and "default plain CPU compile" in verdict[0] and said in ([], verdict)
    assert_one_interval_per_pair(lines)
    summary = next(x for x in lines if x.startswith("auto: measured: kept single:"))
    kept = summary.split("kept ")[1].split()[0]
    cands = next(x for x in lines if x.startswith("auto: candidates (simulated): "))
    preferred = cands.split(": ", 2)[2].split()[0]
    if kept != preferred:  # only when the preferred one lost beyond the threshold
        assert "× slower" in r.output
    other = next(x for x in lines if x.startswith("auto:   single:") and " vs " in x)
    assert any(w in other for w in ("equal within noise", "no practical difference", "× slower", "the time, faster",
                                    "no claim"))
    assert any(x.startswith("auto: simulator vs measurement: ") for x in lines)
    assert any(x.startswith("simulated by the cost model (not measured): this placement") for x in lines)
    assert lines[-2].startswith("time: ") and " s in all: " in lines[-2] and "of a 20 s budget" in lines[-2]
    assert "profile" in lines[-2] and "comparison" in lines[-2] and "--no-compare" in lines[-2]
    assert lines[-1].startswith("next: ")
    assert any(x.startswith("checked: ") for x in lines) and out.exists()


def assert_one_interval_per_pair(lines: list[str]) -> None:
    """The report of a head-to-head states every pair once, with one interval; the level of the
    intervals is stated once per head-to-head (its first line), never "equal within noise"."""
    import re

    said = []
    for x in lines:
        if "CI" not in x or "; CI: " in x:  # a head-to-head's first line: medians and the level
            continue
        if x.startswith("verdict: "):  # against the default plain compile: stated there alone
            continue
        m = re.search(r"(\S+) vs (\S+(?: \S+)?(?: \(as [^)]*\))?): ", x)
        assert m, f"an interval outside a pair's line: {x}"
        assert x.count("CI ") == 1, f"more than one interval on a line: {x}"
        said.append(frozenset((m.group(1), m.group(2))))
    assert len(said) == len(set(said)), f"a pair compared twice: {said}"
    # "equal" never alone: always with the ratio and its interval
    bad = [x for x in lines if "equal within noise" in x and not re.search(r"equal within noise[:,] [0-9.]+× (the|its) time \(", x)]
    assert not bad, bad


# --- throughput on a real target: served, not simulated ------------------------------------------


class _FakeServer:
    """Serves a placement at a rate set by its cut (the group where the device first changes):
    the best measured cut is ``best``; the plain device always serves 100/s."""

    def __init__(self, p, best: int, noise: float = 0.5, peak: float = 190.0):
        self.p, self.best, self.noise, self.peak, self.calls = p, best, noise, peak, []
        self.rng = np.random.default_rng(0)

    def serve_beside(self, device_of, devices, plain_on, plain_config, *, requests, batches):
        from hdp.runtime.measure.measurement import Served

        gd = self.p.structure.group_devices(device_of)
        change = np.nonzero(gd[1:] != gd[:-1])[0]
        cut = int(change[0]) + 1 if change.size == 1 else None
        self.calls.append((cut, plain_on, requests))
        rate = 100.0 if cut is None else self.peak - 10.0 * abs(cut - self.best)  # one device: the plain rate
        jitter = self.rng.normal(0, self.noise, (2, batches))
        return (Served(what="placed", target="r2", requests=requests, per_batch=8, rates=tuple(rate + jitter[0])),
                Served(what="plain", target="r2", requests=requests, per_batch=8, rates=tuple(100.0 + jitter[1])))

    def close(self):
        pass


def test_auto_for_throughput_on_a_real_target_serves_the_cuts_next_to_the_best_pipeline(monkeypatch):
    """On a real target auto serves the simulated best and the cuts beside the best two-stage
    pipeline's and the best single device, each beside the first device alone with the objective's
    requests in flight, and keeps a split measured faster than the single device beyond noise;
    within noise, the single device."""
    from placement_helpers import make_module

    from hdp.placement.objective import Throughput

    types = ["Parameter"] + ["MatMul"] * 10 + ["Result"]
    edges = [(i, i + 1) for i in range(11)]
    t = np.array([[0, 0]] + [[1, 1]] * 10 + [[0, 0]], float) * 1e-3
    m = make_module(types, edges, t, lat=1e-6, bw=1e12, ovh=1e-5)
    p = build_problem(m, ("D0", "D1")).with_objective(Throughput(requests=3))
    sim = Simulator(p)
    pipe = auto_mod.pipeline_candidates(p, sim)[0][1]
    sim_cut = int(np.nonzero(pipe[1:] != pipe[:-1])[0][0]) + 1
    fake = _FakeServer(p, best=sim_cut + 1)
    monkeypatch.setattr(auto_mod, "_measurer", lambda *a, **k: fake)
    real = Target(name="r2", devices=[Device(name="D0"), Device(name="D1")])
    got = place(Auto(budget=0, learn="no"), PlaceContext(module=m, problem=p, target=real))
    cuts = [c for c, _, _ in fake.calls]
    assert {sim_cut - 1, sim_cut + 1} <= set(cuts) and all(plain == "D0" and n == 3 for _, plain, n in fake.calls)
    gd = np.asarray(got.group_device)
    assert int(np.nonzero(gd[1:] != gd[:-1])[0][0]) + 1 == sim_cut + 1  # the measured best, not the simulated
    assert got.info["stages"] == "candidates,served" and "served with 3 requests in flight" in got.info["report"]
    assert float(got.info["served_ratio"]) == pytest.approx(100 / 190, rel=0.01)
    # the best single device is D0, served beside every candidate: it stands in for its HETERO
    # compile (ratio 1), not served again; a split must beat it
    assert None not in cuts and "single:D0 is that reference itself, not served apart" in got.info["report"]
    assert "single:D0 1 (the reference)" in got.info["report"]
    # a budget already spent: the simplest split near the simulated best is still served
    fake = _FakeServer(p, best=sim_cut)
    monkeypatch.setattr(auto_mod, "_measurer", lambda *a, **k: fake)
    ctx = PlaceContext(module=m, problem=p, target=real, started=time.monotonic() - 100)
    got = place(Auto(budget=1, learn="no"), ctx)
    assert [c for c, _, _ in fake.calls] == [sim_cut]
    assert np.unique(got.group_device).size == 2  # the split, served faster than one device
    # splits within noise of one device (at best 3 % faster, windows ±10 %): the single device stays
    fake = _FakeServer(p, best=sim_cut + 1, noise=10.0, peak=103.0)
    monkeypatch.setattr(auto_mod, "_measurer", lambda *a, **k: fake)
    got = place(Auto(budget=0, learn="no"), PlaceContext(module=m, problem=p, target=real))
    assert len(fake.calls) > 2 and "no other candidate served faster beyond noise" in got.info["report"]
    assert got.info["chosen"].startswith("single:") and np.unique(got.group_device).size == 1


def test_served_throughput_prefers_the_split_with_fewer_subgraphs_near_the_simulated_best():
    """Among splits within SERVED_TIE of the simulated best, the one with the fewest HETERO
    subgraphs is served first and preferred (a balanced four-subgraph optimum served below a
    two-stage cut); beyond the tie, or against a single device, the simulated best stays."""
    from hdp.placers.auto import SERVED_TIE, Cand, _simplest

    z = np.zeros(3, np.int16)
    one = Cand("single:D0", z, 1.0, True)
    opt = Cand("optimal", z, 0.500, False, subgraphs=4)
    pipe = Cand("pipeline:D0>D1", z, 0.500 * (1 + SERVED_TIE / 2), False, subgraphs=2)
    far = Cand("pipeline:D1>D0", z, 0.500 * (1 + 2 * SERVED_TIE), False, subgraphs=2)
    assert _simplest([one, opt, pipe, far], opt) is pipe
    assert _simplest([one, opt, far], opt) is opt
    assert _simplest([one, opt, pipe], one) is one  # a single device is simplest of all
    three = Cand("heft", z, 0.499, False, subgraphs=3)
    assert _simplest([one, three, opt, pipe], three) is pipe
