"""``hsdag``: the learned placer (GNN + graph parsing network + policy gradient), see hdp.learn.

``--method hsdag`` or ``hsdag:simulate`` / ``hsdag:measure`` (the reward's evaluator). Options come
from the partition pass (``req.options``); a missing, ``None`` or empty value takes the default:

=============  ==========  ===============================================================
option         default     meaning
=============  ==========  ===============================================================
reward         auto        ``simulate`` (cost-model simulator), ``measure`` (HETERO runs), or
                           ``auto``: measure when every target device is real, else simulate
measure_runs   10          timed runs per measured placement (median)
budget         120         wall-clock seconds for training; 0 = no limit
placements     0           max placements evaluated; 0 = no limit
episodes       25          policy updates (0 = default)
samples        20          placements per episode (0 = default)
lr             1e-3        Adam learning rate (0 = default)
hidden         128         hidden width (0 = default)
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

Every single-device placement is evaluated first as a candidate. Placements are scored as the
``assign`` pass will turn them into per-op devices (unsupported ops moved, Constants/Parameters/
Results co-located), so the reported latency is that of the final placement. Torch is imported only
when the method runs.
"""

from __future__ import annotations

import numpy as np

from hdp.errors import InputError
from hdp.ir.types import Module
from hdp.placers import Placed, PlaceRequest, placer, placers

DEFAULTS = {
    "reward": "auto", "measure_runs": 10, "budget": 120.0, "placements": 0, "episodes": 25, "samples": 20,
    "lr": 1e-3, "hidden": 128, "warm_start": "optimal", "policy": "", "checkpoint": "", "report": "",
    "algo": "reinforce", "entropy": 0.01, "reward_shape": "neglog", "baseline": "batch", "cost_aware": True,
    "timeout": 120.0,
}
_ZERO_IS_DEFAULT = {"episodes", "samples", "lr", "hidden"}


def read_options(req: PlaceRequest) -> dict:
    """The hsdag options from ``req.options`` with defaults, type-checked (InputError naming the option)."""
    out = {}
    for key, default in DEFAULTS.items():
        v = req.options.get(key)
        if v is None or v == "" or (key in _ZERO_IS_DEFAULT and v == 0):
            out[key] = default
            continue
        try:
            if isinstance(default, bool):
                if isinstance(v, str):
                    if v.lower() not in ("true", "false", "1", "0", "yes", "no"):
                        raise ValueError(v)
                    v = v.lower() in ("true", "1", "yes")
                out[key] = bool(v)
            else:
                out[key] = type(default)(v)
        except (TypeError, ValueError):
            raise InputError(f"hsdag option '{key}': expected {type(default).__name__}, got {v!r}") from None
    if req.arg:
        out["reward"] = req.arg
    if out["reward"] == "auto":
        real = req.target is not None and req.target.is_real
        out["reward"] = "measure" if real else "simulate"
    if out["reward"] not in ("simulate", "measure"):
        raise InputError(f"hsdag option 'reward': 'auto', 'simulate' or 'measure', not '{out['reward']}'")
    if out["measure_runs"] < 1:
        raise InputError("hsdag option 'measure_runs' must be >= 1")
    if out["budget"] < 0 or out["placements"] < 0:
        raise InputError("hsdag options 'budget' and 'placements' must be >= 0")
    if not out["timeout"] > 0:
        raise InputError("hsdag option 'timeout' must be > 0")
    return out


def _make_evaluator(module: Module, req: PlaceRequest, reward: str, runs: int = 10, timeout: float = 120.0):
    """``device_of -> seconds`` for the chosen reward (device ids index ``req.devices``)."""
    if module.costs is not None and module.costs.devices != req.devices:
        raise InputError(f"costs were computed for devices {module.costs.devices}, not for target "
                         f"{req.devices} (same order); rerun the profile pass")
    if reward == "simulate":
        try:
            from hdp.runtime.simulate import Simulator
        except ImportError as e:
            raise InputError(f"hsdag reward 'simulate' needs the simulator (hdp.runtime.simulate): {e}") from None
        return Simulator(module).latency
    try:
        from hdp.runtime.measure import Measurer
    except ImportError as e:
        raise InputError(f"hsdag reward 'measure' needs the measurer (hdp.runtime.measure): {e}") from None
    if req.target is None:
        raise InputError("hsdag reward 'measure' needs a target")
    return Measurer(module, req.target, runs=runs, timeout=timeout).latency


def as_assigned(module: Module, device_of: np.ndarray) -> np.ndarray:
    """What the assign pass makes of a per-op placement: unsupported ops moved to their first
    supporting device, Constants/Parameters/Results co-located."""
    from hdp.passes.assign import colocate, fix_support

    d, _ = fix_support(module, device_of)
    return colocate(module, d) if d.size else d


def _warm_placement(module: Module, req: PlaceRequest, name: str) -> np.ndarray:
    known = placers()
    if name not in known or name == "hsdag":
        raise InputError(f"hsdag option 'warm_start': no placer '{name}' to start from "
                         f"(available: none, {', '.join(sorted(k for k in known if k != 'hsdag'))})")
    fn, needs, _ = known[name]
    missing = [s for s in needs if getattr(module, s) is None]
    if missing:
        raise InputError(f"hsdag warm start '{name}' needs {', '.join(missing)}")
    placed = fn(module, PlaceRequest(devices=req.devices, seed=req.seed, target=req.target))
    return np.asarray(placed.group_device, np.int16)[np.asarray(placed.group_of, np.int64)]


@placer("hsdag", requires=("support", "costs", "features", "coarse"))
def hsdag(module: Module, req: PlaceRequest) -> Placed:
    """HSDAG: GNN + graph parsing + policy gradient on simulated or measured latency (hsdag[:measure])."""
    o = read_options(req)
    n = module.graph.n_ops
    if len(req.devices) == 1:
        return Placed.per_op(np.zeros(n, np.int16), {
            "message": f"target has one device ({req.devices[0]}): every op on it, no training"})
    if n == 0:
        return Placed.per_op(np.zeros(0, np.int16), {"message": "empty graph"})
    try:
        from hdp.learn.graph import build_learn_graph
        from hdp.learn.trainer import TrainConfig, train
    except ImportError as e:
        raise InputError(f"method 'hsdag' needs torch and torch_geometric: {e}") from None

    raw_eval = _make_evaluator(module, req, o["reward"], o["measure_runs"], o["timeout"])

    def evaluate(device_of: np.ndarray) -> float:
        return raw_eval(as_assigned(module, device_of))

    lg = build_learn_graph(module, req.devices, cost_aware=o["cost_aware"])
    candidates = [(f"single:{d}", np.full(n, j, np.int16)) for j, d in enumerate(req.devices)]
    warm = None
    if o["warm_start"] != "none":
        warm = (o["warm_start"], _warm_placement(module, req, o["warm_start"]))
    cfg = TrainConfig(
        episodes=o["episodes"], samples=o["samples"], lr=o["lr"], hidden=o["hidden"], algo=o["algo"],
        reward=o["reward_shape"], baseline=o["baseline"], entropy=o["entropy"],
        max_placements=o["placements"], max_seconds=o["budget"], seed=req.seed,
        report_dir=o["report"] or None, checkpoint=o["checkpoint"] or None, policy=o["policy"] or None)
    try:
        r = train(lg, evaluate, cfg, warm_start=warm, candidates=candidates)
    finally:
        closer = getattr(raw_eval, "__self__", None)  # a Measurer's worker process ends here
        if hasattr(closer, "close"):
            closer.close()
    if r.best_device_of is None:
        raise InputError(f"hsdag: every placement failed to evaluate ({r.evaluations} tried, reward "
                         f"'{o['reward']}'); check the target and the model")
    info = {
        "best_latency_s": f"{r.best_latency:.6g}", "best_source": r.best_source, "reward": o["reward"],
        "placements_evaluated": r.evaluations, "samples": r.samples, "failures": r.failures,
        "episodes": r.episodes, "seconds": f"{r.seconds:.3f}", "groups": r.groups, "stopped": r.stopped,
        "algo": o["algo"], "resumed": r.resumed, "warm_start": o["warm_start"],
    }
    return Placed.per_op(r.best_device_of, info)
