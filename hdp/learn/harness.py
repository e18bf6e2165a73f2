"""One training harness for the learned placers (``hsdag``, ``placeto``, ``rnn-placer``), and
policy reuse (a policy trained on several models places an unseen one).

:func:`learn` runs one method on one problem under a :class:`Budget` — the same number of
simulated evaluations and the same wall seconds for every method — from the same seed, with the
same candidates (every single-device placement, evaluated first) and the same optional warm start,
and returns the trainer's :class:`~hdp.learn.trainer.TrainResult` (best placement, its cost, the
curve with the seconds at which each placement was evaluated). Each method keeps its own published
hyper-parameters (:mod:`hdp.learn.config`); only the budget, the seed and the warm start are the
harness's. Training runs until the budget ends (the episode counts are set out of reach).

The cost a method minimises is a function ``device per tie group -> seconds``:
:func:`objective_cost` is :meth:`Simulator.cost` of the problem with the objective named (one value
of :mod:`hdp.placement.objective`, :func:`objective_of`): the sequential HETERO latency
(``latency``), one request run by hdp's concurrent executor (``concurrent``: the problem's
:class:`~hdp.placement.objective.Concurrent`, priced by :meth:`Simulator.latency_concurrent`, as
``hdp compile --execution concurrent`` prices it) or seconds per request with ``requests`` in
flight (``throughput``, :class:`~hdp.placement.objective.Throughput`); :func:`problem_cost` is
what the placement methods optimise: the problem's own objective.

:func:`train_on_models` trains one HSDAG policy over several models in turn (round robin, the
weights carried from one to the next through a checkpoint); :func:`zero_shot` places a model with
such a policy by one greedy forward pass, without any evaluation.
"""

from __future__ import annotations

import os
import time
from typing import Callable

import msgspec
import numpy as np

from hdp.base.errors import InputError
from hdp.base.validation import Count
from hdp.learn import clock
from hdp.learn.config import Budget as Seconds
from hdp.learn.config import PlacetoConfig, RnnConfig, TrainConfig
from hdp.learn.graph import build_learn_graph
from hdp.placement.objective import Concurrent, Latency, Throughput
from hdp.placement.simulate import Simulator

OBJECTIVES: tuple[str, ...] = ("latency", "concurrent", "throughput")
LEARNERS: tuple[str, ...] = ("hsdag", "placeto", "rnn-placer")
#: Episode counts no budget of the harness reaches: the budget ends training.
_UNBOUNDED = 10**6
#: hsdag stops after this many placements in a row without a new best: a converged policy samples
#: placements evaluated before, which the evaluation budget (new placements only) never counts
#: (placeto and rnn-placer stop on the same condition, :data:`hdp.learn.placeto.STALL`).
_PATIENCE = 1000


class Budget(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What every learned method gets: evaluations of the cost (0: no limit) and wall seconds (0:
    no limit) for the whole run, candidates and warm start included."""

    evaluations: Count = 0
    seconds: Seconds = 0.0


def objective_of(objective, requests: int = 4):
    """The problem objective (:mod:`hdp.placement.objective`) the harness optimises for
    ``objective``: ``latency`` -> :class:`Latency`, ``concurrent`` -> :class:`Concurrent` (the
    objective ``hdp compile --execution concurrent`` gives its problem when the executor was not
    calibrated), ``throughput`` -> :class:`Throughput` with ``requests`` in flight; an objective
    value (e.g. a :class:`Concurrent` with the executor's calibrated costs) is returned as is."""

    if isinstance(objective, (Latency, Concurrent, Throughput)):
        return objective
    if objective == "throughput":
        return Throughput(requests=requests)
    if objective == "concurrent":
        return Concurrent()
    if objective == "latency":
        return Latency()
    raise InputError(f"unknown objective '{objective}' (known: {', '.join(OBJECTIVES)})")


def objective_problem(problem, objective, requests: int = 4):
    """``problem`` with the objective of :func:`objective_of` (what heft, CP-SAT and the learned
    placers are given, so each optimises the same value)."""
    return problem.with_objective(objective_of(objective, requests))


def objective_cost(problem, objective, requests: int = 4) -> Callable[[np.ndarray], float]:
    """The simulator's price of a device per tie group under ``objective`` (``requests`` in flight
    for ``throughput``): :meth:`Simulator.cost` of :func:`objective_problem`, the one pricing every
    placer of that problem is held to (``concurrent``: :meth:`Simulator.latency_concurrent` with the
    objective's launch, hand-over and request costs)."""
    return problem_cost(objective_problem(problem, objective, requests))


def problem_cost(problem) -> Callable[[np.ndarray], float]:
    """What a placement method optimises on ``problem``: its own objective."""

    return Simulator(problem).cost


def candidates_of(problem) -> list[tuple[str, np.ndarray]]:
    """Every single-device placement the problem allows, named ``single:<device>``."""
    return [(f"single:{d}", problem.single(j)) for j, d in enumerate(problem.devices) if problem.allowed[:, j].all()]


def learn(method: str, module, problem, cost: Callable[[np.ndarray], float], budget: Budget, seed: int = 0,
          warm_start: tuple[str, np.ndarray] | None = None, policy: str | None = None,
          checkpoint: str | None = None):
    """Train ``method`` on ``problem`` (built from ``module``) to minimise ``cost``; see the module
    docstring. ``policy``/``checkpoint`` (hsdag only): weights to start from / to write."""

    lg = build_learn_graph(module, problem)
    cands = candidates_of(problem)
    deadline = clock.now() + budget.seconds if budget.seconds else None
    if method == "hsdag":
        # lazy: imports torch (about 1.5 s), needed only when a learned method runs
        from hdp.learn.trainer import train

        cfg = TrainConfig(episodes=_UNBOUNDED, max_placements=budget.evaluations, deadline=deadline, seed=seed,
                          progress=False, policy=policy, checkpoint=checkpoint, patience=_PATIENCE)
        return train(lg, cost, cfg, warm_start=warm_start, candidates=cands)
    if policy or checkpoint:
        raise InputError(f"{method}: policy reuse is implemented for hsdag only")
    if method == "placeto":
        # lazy: imports torch (about 1.5 s), needed only when a learned method runs
        from hdp.learn.placeto import train_placeto

        cfg = PlacetoConfig(episodes=_UNBOUNDED, max_placements=budget.evaluations, deadline=deadline, seed=seed)
        return train_placeto(lg, problem, cost, cfg, warm_start, cands)
    if method == "rnn-placer":
        # lazy: imports torch (about 1.5 s), needed only when a learned method runs
        from hdp.learn.rnn import train_rnn

        cfg = RnnConfig(steps=_UNBOUNDED, max_placements=budget.evaluations, deadline=deadline, seed=seed)
        return train_rnn(lg, problem, cost, cfg, warm_start, cands)
    raise InputError(f"unknown learned method '{method}' (known: {', '.join(LEARNERS)})")


def time_to_best(result) -> float:
    """Seconds into the run at which its best placement was first evaluated."""
    best = result.best_latency
    for row in result.curve:
        if row["latency_s"] != "" and row["latency_s"] <= best:
            return float(row["seconds"])
    return float("nan")


def train_on_models(items, budget_each: Budget, rounds: int, checkpoint: str, seed: int = 0,
                    warm_starts=None) -> list:
    """Train one HSDAG policy on several models: ``rounds`` passes over ``items`` (``(module,
    problem, cost)`` each), ``budget_each`` per model and pass, the weights handed from one run to
    the next through ``checkpoint`` (a model's own run state is not resumed: each run lends the
    weights to the next). ``warm_starts``: an optional warm start per item. Returns the results."""

    out = []
    for r in range(rounds):
        for i, (module, problem, cost) in enumerate(items):
            warm = warm_starts[i] if warm_starts is not None else None
            policy = checkpoint if os.path.exists(checkpoint) else None
            out.append(learn("hsdag", module, problem, cost, budget_each, seed=seed + r * len(items) + i,
                             warm_start=warm, policy=policy, checkpoint=checkpoint))
    return out


def zero_shot(module, problem, policy: str) -> tuple[np.ndarray, dict]:
    """A device per tie group from an HSDAG policy checkpoint by one greedy forward pass (no
    evaluation), and the seconds of each stage (``graph``, ``load``, ``forward``)."""
    import torch

    # lazy: imports torch (about 1.5 s), needed only when a learned method runs
    from hdp.learn.checkpoint import load_checkpoint, load_weights, restore_config

    # lazy: imports torch (about 1.5 s), needed only when a learned method runs
    from hdp.learn.model import HsdagNet, Problem

    t0 = time.perf_counter()
    lg = build_learn_graph(module, problem)
    t1 = time.perf_counter()
    ck = load_checkpoint(policy)
    model = HsdagNet(restore_config(ck, policy, lg))
    load_weights(model, ck, policy)
    t2 = time.perf_counter()
    with torch.no_grad():
        out = model(Problem(lg), ck.parse_config, mode="greedy", stochastic=False)
        dev = lg.group_devices(out.logits.argmax(dim=1).numpy()[out.group_of_node])
    t3 = time.perf_counter()
    return dev, {"graph": t1 - t0, "load": t2 - t1, "forward": t3 - t2}
