"""``hsdag``: the learned placer (GNN + graph parsing network + policy gradient), see hdp.learn.

``--method hsdag`` or ``hsdag:simulate`` / ``hsdag:measure`` (the reward's evaluator). Options are
the fields of :class:`hdp.placers.options.Hsdag`:

=============  ==========  ===============================================================
option         default     meaning
=============  ==========  ===============================================================
reward         auto        ``simulate`` (cost-model simulator), ``measure`` (HETERO runs), or
                           ``auto``: measure when every target device is real, else simulate
measure_runs   10          timed runs per measured placement (median)
budget         120         wall-clock seconds for training; 0 = no limit
placements     0           max placements evaluated; 0 = no limit
episodes       25          policy updates
samples        20          placements per episode
lr             1e-3        Adam learning rate
hidden         128         hidden width
warm_start     optimal     ``none``, or a placer (``optimal``, ``heft``) to evaluate and imitate first
policy         ""          checkpoint to resume (same model) or whose weights to reuse
checkpoint     ""          checkpoint path to write
report         ""          directory for curve.csv / curve.png / summary.json
algo           reinforce   ``reinforce`` or ``ppo``
entropy        0.01        entropy bonus weight (0 disables it)
reward_shape   neglog      ``neglog`` (-log latency) or ``inverse`` (1/latency)
baseline       batch       advantage baseline: ``batch`` mean or ``ema``
cost_aware     true        feed the cost table to the network (false: features only, as published)
timeout        120         seconds per measured placement before its worker is killed (--timeout)
=============  ==========  ===============================================================

The network places the tie groups of the placement problem (grouped further by the coarse
stage), so every placement it samples respects the legality rules. Every single-device placement
is evaluated first as a candidate. Torch is imported only when the method runs.
"""

from __future__ import annotations

import numpy as np

from hdp.errors import InputError
from hdp.placers import PlaceContext, Placed, place
from hdp.placers.options import Hsdag, method_from


def _reward(o: Hsdag, ctx: PlaceContext) -> str:
    if o.reward != "auto":
        return o.reward
    return "measure" if ctx.target is not None and ctx.target.is_real else "simulate"


def _make_evaluator(o: Hsdag, ctx: PlaceContext, reward: str):
    """``group_device -> seconds`` for the chosen reward, and a closer for its resources."""
    p = ctx.problem
    if reward == "simulate":
        from hdp.runtime.simulate import Simulator

        return Simulator(p).latency, lambda: None
    from hdp.runtime.measure import Measurer

    if ctx.target is None:
        raise InputError("hsdag reward 'measure' needs a target")
    m = Measurer(ctx.module, ctx.target, runs=o.measure_runs, timeout=ctx.timeout)
    return (lambda gd: m.latency(p.op_devices(gd), p.devices)), m.close


def hsdag(o: Hsdag, ctx: PlaceContext) -> Placed:
    """HSDAG: GNN + graph parsing + policy gradient on simulated or measured latency (hsdag[:measure])."""
    p = ctx.problem
    reward = _reward(o, ctx)
    if p.n_devices == 1:
        return Placed(p.single(0), {"message": f"target has one device ({p.devices[0]}): every op on it, no training"})
    if p.n_groups == 0:
        return Placed(np.zeros(0, np.int16), {"message": "empty graph"})
    try:
        from hdp.learn.graph import build_learn_graph
        from hdp.learn.trainer import TrainConfig, train
    except ImportError as e:
        raise InputError(f"method 'hsdag' needs torch and torch_geometric: {e}") from None

    lg = build_learn_graph(ctx.module, p, cost_aware=o.cost_aware)
    candidates = [(f"single:{d}", p.single(j)) for j, d in enumerate(p.devices) if p.allowed[:, j].all()]
    warm = None
    if o.warm_start != "none":
        warm_opts = method_from(o.warm_start)
        if isinstance(warm_opts, Hsdag):
            raise InputError("hsdag option 'warm_start' cannot be hsdag itself")
        warm = (o.warm_start, place(warm_opts, ctx).group_device)
    cfg = TrainConfig(
        episodes=o.episodes, samples=o.samples, lr=o.lr, hidden=o.hidden, algo=o.algo,
        reward=o.reward_shape, baseline=o.baseline, entropy=o.entropy,
        max_placements=o.placements, max_seconds=o.budget, seed=ctx.seed,
        report_dir=o.report or None, checkpoint=o.checkpoint or None, policy=o.policy or None)
    evaluate, close = _make_evaluator(o, ctx, reward)
    try:
        r = train(lg, evaluate, cfg, warm_start=warm, candidates=candidates)
    finally:
        close()
    if r.best_device_of is None:
        raise InputError(f"hsdag: every placement failed to evaluate ({r.evaluations} tried, reward "
                         f"'{reward}'); check the target and the model")
    info = {
        "best_latency_s": f"{r.best_latency:.6g}", "best_source": r.best_source, "reward": reward,
        "placements_evaluated": r.evaluations, "samples": r.samples, "failures": r.failures,
        "episodes": r.episodes, "seconds": f"{r.seconds:.3f}", "groups": r.groups, "stopped": r.stopped,
        "algo": o.algo, "resumed": r.resumed, "warm_start": o.warm_start,
    }
    return Placed(np.asarray(r.best_device_of, np.int16), info)
