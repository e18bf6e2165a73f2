"""``placeto`` and ``rnn-placer``: the HSDAG paper's learned baselines as placement methods.

Both train on the simulator (the problem's objective, :func:`hdp.learn.harness.problem_cost`) within
``budget`` wall seconds and ``placements`` evaluations, from the seed of the run; the single-device
placements are evaluated first and, with ``warm_start``, the warm-start placement (Placeto starts
every episode from it). The best placement evaluated is kept. Torch is imported only when one runs.
Unlike ``hsdag`` they have no measured reward and no checkpoints.
"""

from __future__ import annotations

import time

import numpy as np

from hdp.base.errors import InputError
from hdp.learn.config import PlacetoConfig, RnnConfig
from hdp.learn.graph import build_learn_graph
from hdp.learn.harness import problem_cost
from hdp.placers import PlaceContext, Placed, note_time, place
from hdp.placers.options import PlacerOptions, Placeto, RnnPlacer, method_from


def _setup(o: PlacerOptions, ctx: PlaceContext):
    """(learn graph, candidates, warm start, cost function, deadline), or a Placed when there is
    nothing to learn."""
    p = ctx.problem
    if p.n_devices == 1:
        return Placed(p.single(0), {"message": f"target has one device ({p.devices[0]}): every op on it, no training"})
    if p.n_groups == 0:
        return Placed(np.zeros(0, np.int16), {"message": "empty graph"})
    lg = build_learn_graph(ctx.module, p)
    candidates = [(f"single:{d}", p.single(j)) for j, d in enumerate(p.devices) if p.allowed[:, j].all()]
    warm = None
    if o.warm_start != "none":
        warm = (o.warm_start, place(method_from(o.warm_start), ctx).group_device)
    deadline = ctx.started + o.budget if o.budget else None
    return lg, candidates, warm, problem_cost(p), deadline


def _result(o: PlacerOptions, r) -> Placed:
    if r.best_device_of is None:
        raise InputError(f"{o.name()}: no placement could be evaluated within the budget ({r.evaluations} tried)")
    info = {"best_latency_s": f"{r.best_latency:.6g}", "best_source": r.best_source,
            "placements_evaluated": r.evaluations, "samples": r.samples, "episodes": r.episodes,
            "stopped": r.stopped, "warm_start": o.warm_start}
    return Placed(np.asarray(r.best_device_of, np.int16), info)


def placeto(o: Placeto, ctx: PlaceContext) -> Placed:
    """Placeto on the simulator (see :mod:`hdp.learn.placeto`)."""
    s = _setup(o, ctx)
    if isinstance(s, Placed):
        return s
    lg, candidates, warm, cost, deadline = s
    # lazy: imports torch (about 1.5 s), needed only when a learned method runs
    from hdp.learn.placeto import train_placeto

    cfg = PlacetoConfig(episodes=o.episodes, lr=o.lr, lr_end=o.lr_end, rounds=o.rounds,
                        baseline_episodes=o.baseline_episodes, hidden=o.hidden, step_reward=o.step_reward,
                        max_placements=o.placements, deadline=deadline, seed=ctx.seed)
    t0 = time.monotonic()
    r = train_placeto(lg, ctx.problem, cost, cfg, warm, candidates)
    note_time("placeto: training", time.monotonic() - t0)
    return _result(o, r)


def rnn_placer(o: RnnPlacer, ctx: PlaceContext) -> Placed:
    """The hierarchical RNN placer on the simulator (see :mod:`hdp.learn.rnn`)."""
    s = _setup(o, ctx)
    if isinstance(s, Placed):
        return s
    lg, candidates, warm, cost, deadline = s
    # lazy: imports torch (about 1.5 s), needed only when a learned method runs
    from hdp.learn.rnn import train_rnn

    cfg = RnnConfig(steps=o.steps, groups=o.groups, hidden=o.hidden, lr=o.lr, max_placements=o.placements,
                    deadline=deadline, seed=ctx.seed)
    t0 = time.monotonic()
    r = train_rnn(lg, ctx.problem, cost, cfg, warm, candidates)
    note_time("rnn-placer: training", time.monotonic() - t0)
    return _result(o, r)
