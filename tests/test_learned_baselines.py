"""Placeto and the hierarchical RNN placer (the HSDAG paper's learned baselines), the training
harness shared by the three learned placers, and policy reuse (zero-shot HSDAG).

Small hand-built problems with a known optimum (tests/test_learn.py's chain of blocks whose fast
device alternates; its optimum by brute force over the simulator), the simulator or test_learn's
reference latency as the cost, fixed seeds.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch  # noqa: F401,E402  (hard dependency: fail loudly, never skip)
from test_learn import (  # noqa: E402
    DEV2,
    FakeClock,
    blocks_module,
    chain_optimum,
    charged,
    make_module,
    reference,
)

from hdp.base.errors import InputError
from hdp.learn import clock
from hdp.learn.config import PlacetoConfig, RnnConfig  # noqa: E402
from hdp.learn.graph import build_learn_graph  # noqa: E402
from hdp.learn.harness import (  # noqa: E402
    Budget,
    candidates_of,
    learn,
    objective_cost,
    objective_problem,
    problem_cost,
    time_to_best,
    train_on_models,
    zero_shot,
)
from hdp.learn.placeto import train_placeto  # noqa: E402
from hdp.learn.rnn import train_rnn  # noqa: E402
from hdp.learn.trainer import StopTraining  # noqa: E402
from hdp.placement.problem import build_problem
from hdp.placement.simulate import Simulator  # noqa: E402


def _setup(n=12, block=3, seed=0):
    m = blocks_module(n=n, block=block, seed=seed)
    p = build_problem(m, DEV2)
    return m, p, build_learn_graph(m, p)


# --- the optimum within the budget --------------------------------------------------------------

def _alternating_chain():
    """16 ops in blocks of 4 whose fast device alternates (3x faster): 2^16 placements; the
    optimum (each block on its fast device) costs half of either single device."""
    m = blocks_module(n=16, block=4)
    return m, build_problem(m, DEV2)


def _brute_force(p) -> tuple[float, float]:
    """(optimum, second best) of the simulator's latency over every device per tie group."""
    k = p.n_groups
    every = (np.arange(2**k)[:, None] >> np.arange(k)) & 1
    c = np.unique(Simulator(p).latencies(every))
    return float(c[0]), float(c[1])


def _stops_at(p, optimum: float):
    """The simulator's latency, ending the run (StopTraining, as a budget does) once a placement at
    the optimum has been evaluated: the run's evaluation count is then what finding it took."""
    cost = problem_cost(p)

    def evaluate(d):
        c = cost(d)
        if c <= optimum * (1 + 1e-9):
            raise StopTraining("optimum")
        return c

    return evaluate


def _finds_the_optimum(run, frozen_update, monkeypatch, budget=1000):
    """``run(evaluate, evaluations)`` (a learner from the single-device candidates, no warm start)
    evaluates the brute-force optimum within ``budget``; the same run with its policy updates
    (``frozen_update``: module, name) disabled, for as many evaluations, does not."""
    m, p = _alternating_chain()
    opt, second = _brute_force(p)
    assert opt < 0.51 * min(Simulator(p).singles().values()) and second > 1.05 * opt
    r = run(m, p, _stops_at(p, opt), budget)
    assert r.stopped == "optimum" and r.evaluations <= budget, (r.stopped, r.evaluations, r.best_latency / opt)
    monkeypatch.setattr(*frozen_update, lambda *a, **k: None)
    frozen = run(m, p, _stops_at(p, opt), r.evaluations)
    assert frozen.stopped != "optimum" and frozen.best_latency >= second
    return r


def test_placeto_finds_the_known_optimum_within_its_budget(monkeypatch):
    """Placeto with its published hyper-parameters, through the harness with the table's budget
    (1,000 evaluations; measured on seeds 0-7: the optimum after 257-485). A random search of 1,000
    of the 65,536 placements finds it with probability 1.5 %; Placeto's own policy, frozen, does
    not within the evaluations the trained one needed."""
    import hdp.learn.placeto as placeto

    def run(m, p, evaluate, evaluations):
        return learn("placeto", m, p, evaluate, Budget(evaluations=evaluations), seed=0)

    _finds_the_optimum(run, (placeto, "_update"), monkeypatch)


def _rnn_learns_and_finds_the_optimum(**cfg):
    """The hierarchical planner, 700 placements from the single-device candidates: it evaluates the
    brute-force optimum within 1,000 evaluations, and what it samples in its last 100 placements
    is at least 20 % faster than its first 100 (a frozen policy samples alike throughout; with
    the update's sign reversed, measured, the ratio rises to 1.25-1.30 and seed 0 misses the
    optimum)."""
    m, p = _alternating_chain()
    opt, second = _brute_force(p)
    cost, seen = problem_cost(p), []

    def evaluate(d):
        seen.append(cost(d))
        return seen[-1]

    r = train_rnn(build_learn_graph(m, p), p, evaluate, RnnConfig(steps=700, groups=4, **cfg), None,
                  candidates_of(p))
    found = next((i + 1 for i, c in enumerate(seen) if c <= opt * (1 + 1e-9)), None)
    assert found is not None and found <= 1000 and r.best_latency == pytest.approx(opt)
    sampled = [x["latency_s"] for x in r.curve if x["source"] == "sample"]
    assert len(sampled) == 700 and np.mean(sampled[-100:]) < 0.8 * np.mean(sampled[:100])


def test_rnn_placer_finds_the_known_optimum_within_its_budget():
    """The hierarchical planner with its defaults (the published ones, lr 1e-3: hdp.learn.config.
    RnnConfig says why) but two: 4 groups, as the table's graphs have 5-16 nodes per group (the
    published 20 x devices = 40 is meant for thousands of ops and leaves each of these 16 nodes
    alone: measured, it then learns nothing in 2,000 placements), and width 64 for time (the
    published 512: the test below). Measured on seeds 0-5: the optimum after 315-596 evaluations,
    the last 100 placements 0.67-0.69 of the first 100 (seeds 0, 1)."""
    _rnn_learns_and_finds_the_optimum(hidden=64, seed=0)


@pytest.mark.slow
def test_rnn_placer_at_its_published_width_finds_the_known_optimum():
    """As above at width 512 (slow: about 40 ms per placement here; measured on seeds 0-5: 5 reach
    the optimum, after 237-377 evaluations, one does not within 1,000)."""
    _rnn_learns_and_finds_the_optimum(seed=0)


@pytest.mark.parametrize("trainer,cfg", [(train_placeto, PlacetoConfig(max_placements=60)),
                                         (train_rnn, RnnConfig(steps=30, hidden=32))])
def test_same_seed_same_run(trainer, cfg):
    import msgspec

    m, p, lg = _setup()
    runs = [trainer(lg, p, reference(m), msgspec.structs.replace(cfg, seed=s)) for s in (3, 3, 4)]
    a, b, c = ([x["latency_s"] for x in r.curve] for r in runs)
    assert a == b and a != c


@pytest.mark.slow
def test_placeto_learns_node_by_node():
    """Over the episodes, the placements Placeto ends its episodes with get faster."""
    m, p, lg = _setup(n=24, block=4)
    r = train_placeto(lg, p, reference(m), PlacetoConfig(episodes=120, seed=0))
    ends = [x["latency_s"] for x in r.curve if x["source"] == "sample"][23::24]  # each episode's final placement
    assert len(ends) == 120
    assert np.mean(ends[-20:]) < 0.92 * np.mean(ends[:20])


# --- the placers ------------------------------------------------------------------------------

@pytest.mark.parametrize("method,opts", [("placeto", {"placements": 200}),
                                         ("rnn-placer", {"placements": 100, "hidden": 32})])
def test_placers_run_through_place_and_keep_the_best(method, opts):
    from hdp.passes.coarsen import CoarsenPass
    from hdp.placement.simulate import Simulator
    from hdp.placers import PlaceContext, place
    from hdp.placers.options import method_from

    m = blocks_module()
    m = CoarsenPass(rule="none").run(m)
    p = build_problem(m, DEV2)
    placed = place(method_from(method, {**opts, "warm_start": "heft"}), PlaceContext(module=m, problem=p, seed=1))
    sim = Simulator(p)
    heft = place(method_from("heft"), PlaceContext(module=m, problem=p)).group_device
    assert sim.latency(placed.group_device) <= sim.latency(heft) + 1e-12
    assert float(placed.info["best_latency_s"]) == pytest.approx(sim.latency(placed.group_device), rel=1e-5)
    assert int(placed.info["placements_evaluated"]) <= opts["placements"]


def test_bad_options_are_one_line_input_errors():
    from hdp.placers.options import method_from

    with pytest.raises(InputError, match="placeto option 'rounds'"):
        method_from("placeto", {"rounds": "-1"})
    with pytest.raises(InputError, match="warm_start"):
        method_from("rnn-placer", {"warm_start": "hsdag"})
    with pytest.raises(InputError, match="rnn-placer option 'lr'"):
        method_from("rnn-placer", {"lr": "2"})


# --- the harness ------------------------------------------------------------------------------

def _branchy_module(seed=0):
    """Two independent branches between a source and a sink: the concurrent objective rewards
    running them on different devices, the sequential one does not."""
    n = 10
    src = [0, 1, 2, 3, 0, 5, 6, 7, 4, 8]
    dst = [1, 2, 3, 4, 5, 6, 7, 8, 9, 9]
    t = np.full((n, 2), 1e-3)
    t[:, 1] *= 1.2
    return make_module(n, src, dst, t, seed=seed, edge_bytes=1000)


def test_objectives_price_concurrency():
    m = _branchy_module()
    p = build_problem(m, DEV2)
    seq, conc = objective_cost(p, "latency"), objective_cost(p, "concurrent")
    split = np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 0], np.int16)  # the second branch on device 1
    one = p.single(0)
    assert seq(split) > seq(one)
    assert conc(split) < conc(one)
    tput = objective_cost(p, "throughput", requests=2)  # the two devices as pipeline stages
    assert tput(split) < seq(split) and tput(one) == pytest.approx(seq(one))
    with pytest.raises(InputError, match="objective"):
        objective_cost(p, "energy")


def test_concurrent_objective_is_the_problems_as_compile_prices_it():
    """The harness's ``concurrent`` is the problem's :class:`Concurrent` objective, the one ``hdp
    compile --execution concurrent`` puts in its problem, priced by the simulator's executor
    semantics with that objective's launch, hand-over and request costs (not a copy of its own)."""
    from hdp.pipeline.schedule import make_pass
    from hdp.placement.objective import Concurrent
    from hdp.placement.simulate import Simulator
    from hdp.target.target import load_target

    m = _branchy_module()
    p = build_problem(m, DEV2)
    compiles = make_pass("partition", {"target": load_target("virtual-2x1"), "execution": "concurrent"}).objective
    assert objective_problem(p, "concurrent").objective == compiles == Concurrent()
    split = np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 0], np.int16)
    sim = Simulator(p)
    assert objective_cost(p, "concurrent")(split) == sim.latency_concurrent(split)
    # an executor calibrated by hdp calibrate: compile's objective, and the harness prices it the same
    calibrated = make_pass("partition", {"target": load_target("virtual-2x1"), "execution": "concurrent",
                                         "launch": 2e-4, "handover": 5e-5, "request": 1e-4}).objective
    assert calibrated == Concurrent(launch=2e-4, handover=5e-5, request=1e-4)
    priced = objective_cost(p, calibrated)(split)
    assert priced == Simulator(p.with_objective(calibrated)).cost(split)
    assert priced == sim.latency_concurrent(split, 2e-4, 5e-5, 1e-4)
    assert priced > objective_cost(p, "concurrent")(split) + 1e-4


@pytest.mark.parametrize("method", ["hsdag", "placeto", "rnn-placer"])
def test_harness_gives_every_learner_the_same_budget_seed_and_warm_start(method):
    m = _branchy_module()
    p = build_problem(m, DEV2)
    cost = objective_cost(p, "concurrent")
    warm = ("heft", np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 0], np.int16))
    runs = [learn(method, m, p, cost, Budget(evaluations=25), seed=5, warm_start=warm) for _ in range(2)]
    r = runs[0]
    # the evaluation budget ends the run, or the policy collapsed first (rnn-placer on this 10-op
    # graph may sample only known placements for STALL steps after ~20 new ones: seen on CI-like runs)
    assert r.evaluations <= 25 and r.stopped in ("placements", "converged")
    assert [x["source"] for x in r.curve[:3]] == ["single:A", "single:B", "warm:heft"]
    assert r.best_latency <= cost(warm[1])
    assert [x["latency_s"] for x in r.curve] == [x["latency_s"] for x in runs[1].curve]
    assert 0 <= time_to_best(r) <= r.seconds


def test_harness_wall_budget_stops_training(monkeypatch):
    """The harness's seconds on the learners' clock, held by the test: every evaluation takes 0.05 s
    of it, so Placeto stops within 0.5 s, after at most ten evaluations."""
    m, p, lg = _setup(n=24, block=4)
    fake = FakeClock()
    monkeypatch.setattr(clock, "now", fake)
    r = learn("placeto", m, p, charged(reference(m), fake, 0.05), Budget(seconds=0.5), seed=0)
    assert r.stopped == "seconds" and 1 <= r.evaluations <= 10
    assert r.seconds == pytest.approx(fake.t) and fake.t <= 0.5 + 1e-9


# --- policy reuse -----------------------------------------------------------------------------

@pytest.mark.slow
def test_zero_shot_policy_places_an_unseen_model(tmp_path):
    """A policy trained on two chains places a third, longer one (never seen) in one forward pass
    better than the average random placement and, as a warm start, training from it does no worse."""
    ck = str(tmp_path / "policy.pt")
    train = []
    for seed in (1, 2):
        m, p, _ = _setup(n=12, block=3, seed=seed)
        train.append((m, p, reference(m)))
    results = train_on_models(train, Budget(evaluations=120, seconds=30), rounds=2, checkpoint=ck, seed=0)
    assert len(results) == 4
    m, p, _ = _setup(n=30, block=5, seed=9)
    dev, seconds = zero_shot(m, p, ck)
    assert dev.shape == (p.n_groups,) and set(seconds) == {"graph", "load", "forward"}
    ev = reference(m)
    rng = np.random.default_rng(0)
    random_mean = np.mean([ev(rng.integers(0, 2, p.n_groups)) for _ in range(200)])
    assert ev(dev) < random_mean
    assert ev(dev) >= chain_optimum(m) - 1e-12
    warm = learn("hsdag", m, p, ev, Budget(evaluations=40, seconds=30), seed=0, warm_start=("zero-shot", dev))
    assert warm.best_latency <= ev(dev)
