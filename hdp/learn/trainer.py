"""Training the HSDAG policy on execution-time reward.

:func:`train` runs episodes of ``samples`` placements each. Within an episode the node state is
updated between placements (see :mod:`hdp.learn.model`); after it the policy is updated:

- ``reinforce``: one gradient step on ``-(A · log π(a)) - β·H``;
- ``ppo``: ``ppo_epochs`` steps on the clipped surrogate, replaying the recorded groupings.

``A`` is the reward (``-log latency``, or ``1/latency``) minus a baseline (the batch mean, or an
exponential moving average), divided by the batch's standard deviation. The published code uses
the raw discounted reward with no baseline and scores single-device placements as failures; here a
single-device placement is an ordinary candidate, and a placement whose evaluation raises
:class:`hdp.base.errors.HdpError` is recorded as failed and rewarded as ``fail_factor ×`` the worst
latency seen, and training goes on.

Beyond the paper: initial candidates (e.g. every single-device placement) and an optional warm-start
placement are evaluated first, and the policy first imitates the warm start by cross-entropy, so RL
starts from the best classical answer; the greedy placement of the final policy is evaluated last.
The best placement of all of these is kept and returned.

Budgets: ``episodes × samples`` training placements, ``max_placements`` evaluator calls (identical
placements are evaluated once), ``max_seconds`` of wall clock for this call and an absolute
``deadline``, both on :func:`hdp.learn.clock.now` (``time.monotonic``; tests replace it). Time is
checked before every evaluation, every sampled placement, every imitation step and every policy
update, not only between episodes; an evaluation starts only if the recent evaluations (or, before any, ``eval_estimate``) say it will end before
the deadline with time left for the caller to compare up to ``reserve_evals`` of the placements
evaluated (a final head-to-head; none while fewer than two were evaluated); one already running
finishes. ``patience`` stops training when that many placements in a row brought no gain
of more than ``min_gain`` (relative) over the best so far — with a noisy evaluator, set
``min_gain`` to the noise. Randomness comes from ``seed`` only (weights initialised under it,
sampling from a private generator), so a run is reproducible and a resumed run continues the same
sequence. The result lists the ``top`` distinct placements by evaluated latency, so a caller with a
noisy evaluator can re-measure them head to head rather than trust the minimum.

Checkpoints (``torch.save`` of tensors and plain values, loadable with ``weights_only=True``) hold
the weights, optimizer, generator state, counters, best-so-far, curve and evaluation cache. Given
``policy=path``: a checkpoint of the same problem (same graph, features, costs, devices) resumes the
run; one of another problem only lends its weights (the feature width must match). A checkpoint is
written after every episode, so a resumed run continues exactly where an uninterrupted one would be;
a run stopped by a budget in mid-episode keeps that partial update and resumes at the start of the
episode (a stop by time skips that update: the time is up). The training options themselves are
not checked on resume: pass the same ones. The options (:class:`TrainConfig`) and a checkpoint's
fields (:class:`~hdp.learn.checkpoint.Checkpoint`, in :mod:`hdp.learn.checkpoint`) are checked against
their declared bounds (:mod:`hdp.learn.config`).
"""

from __future__ import annotations

import csv
import json
import math
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import msgspec
import numpy as np
import torch
from tqdm.auto import tqdm

from hdp.base.errors import HdpError, InputError
from hdp.base.fsutil import atomic_path, atomic_write, kill_point
from hdp.learn import clock
from hdp.learn.checkpoint import (
    CurveRow,
    load_checkpoint,
    load_run_state,
    load_weights,
    restore_config,
    save_checkpoint,
)
from hdp.learn.config import ModelConfig, ParseConfig, TrainConfig
from hdp.learn.graph import LearnGraph
from hdp.learn.model import MAX_DEVICES, HsdagNet, Output, Problem, Round

_SINGLE_THREAD_BELOW = 4000


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``n`` torch threads (``None``: unchanged), restoring the count after. The
    learners' networks are small: one thread is faster, and spinning OpenMP workers slow everything
    down on a loaded machine."""
    threads = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@dataclass
class TrainResult:
    best_device_of: np.ndarray | None  # int16 per tie group; None when every evaluation failed
    best_latency: float
    best_source: str  # sample | greedy | warm:<name> | <candidate name>
    evaluations: int  # evaluator calls (all runs of a resumed training)
    samples: int  # training placements drawn
    failures: int
    episodes: int  # episodes completed (all runs)
    seconds: float  # wall clock of this call
    groups: int  # groups of the final policy's greedy parse
    stopped: str  # why training ended: done | placements | seconds | no gain | converged (placeto, rnn-placer)
    curve: list[dict] = field(default_factory=list)
    resumed: bool = False
    #: the best distinct placements evaluated, by latency: (source, device per tie group, latency)
    top: list[tuple[str, np.ndarray, float]] = field(default_factory=list)


class StopTraining(Exception):
    def __init__(self, why: str):
        self.why = why


@dataclass
class _Sample:
    state: torch.Tensor | None
    rounds: list[Round]
    actions: torch.Tensor
    logp: float
    latency: float | None  # None: the evaluation failed


class TrainingRun:
    """Mutable run state: everything a checkpoint must carry to resume exactly."""

    def __init__(self, problem: Problem, evaluate, cfg: TrainConfig):
        self.p = problem
        self.evaluate = evaluate
        self.cfg = cfg
        self.cache: dict[bytes, float | None] = {}
        self.curve: list[dict] = []
        self.best_latency = math.inf
        self.best_device_of: np.ndarray | None = None
        self.best_source = ""
        self.worst = 0.0
        self.evaluations = 0
        self.samples = 0
        self.failures = 0
        self.episode = 0
        self.ema: float | None = None
        self.t0 = clock.now()
        self.stop_at = min(self.t0 + cfg.max_seconds if cfg.max_seconds else math.inf,
                           math.inf if cfg.deadline is None else cfg.deadline)
        self.eval_seconds: list[float] = []  # wall time of each evaluator call of this run
        self.sources: dict[bytes, str] = {}  # first source of each placement evaluated
        self.gain_ref: float | None = None  # the best latency at the last gain
        self.since_gain = 0  # placements scored since then
        self.bar = None

    def score(self, device_of: np.ndarray, source: str) -> float | None:
        """Latency of a placement (a device per tie group; cached), or None when its evaluation failed."""
        key = np.ascontiguousarray(device_of, np.int16).tobytes()
        c = self.cfg
        if c.patience and self.since_gain >= c.patience:
            raise StopTraining("no gain")
        if key in self.cache:
            lat = self.cache[key]
        else:
            self.check_budget()
            self.evaluations += 1
            t0 = clock.now()
            try:
                lat = float(self.evaluate(np.asarray(device_of, np.int16)))
                if not math.isfinite(lat) or lat <= 0:
                    raise HdpError(f"evaluator returned latency {lat}")
            except HdpError:
                lat = None
            self.eval_seconds.append(clock.now() - t0)
            self.cache[key] = lat
            self.sources.setdefault(key, source)
        if self.gain_ref is None or (lat is not None and lat < self.gain_ref * (1 - c.min_gain)):
            if lat is not None:
                self.gain_ref, self.since_gain = lat, 0
        else:
            self.since_gain += 1
        if lat is None:
            self.failures += 1
        else:
            self.worst = max(self.worst, lat)
            if lat < self.best_latency:
                self.best_latency, self.best_source = lat, source
                self.best_device_of = np.array(device_of, np.int16)
        self.curve.append({"index": len(self.curve), "episode": self.episode, "source": source,
                           "latency_s": "" if lat is None else lat, "failed": int(lat is None),
                           "best_s": self.best_latency if self.best_device_of is not None else "",
                           "seconds": round(clock.now() - self.t0, 4)})
        if self.bar is not None and self.best_device_of is not None:
            self.bar.set_postfix_str(f"best {self.best_latency * 1e3:.4g} ms")
        return lat

    def eval_estimate(self) -> float:
        """Seconds the next evaluation is expected to take (median of the last five; before any,
        the configured ``eval_estimate``)."""
        return float(np.median(self.eval_seconds[-5:])) if self.eval_seconds else self.cfg.eval_estimate

    def check_time(self, evaluating: bool = False) -> None:
        """Stop when the deadline has come, counting the time reserved for the caller (and, before
        an evaluation, the time that evaluation is expected to take)."""
        if self.stop_at == math.inf:
            return
        # the caller's comparison holds at most reserve_evals of the placements evaluated by then,
        # and needs two of them to be a comparison at all
        n = len(self.eval_seconds) + (1 if evaluating else 0)
        reserve = min(self.cfg.reserve_evals, n) if n >= 2 else 0.0
        need = self.eval_estimate() * (reserve + (1 if evaluating else 0))
        if clock.now() + need >= self.stop_at:
            raise StopTraining("seconds")

    def check_budget(self) -> None:
        c = self.cfg
        if c.max_placements and self.evaluations >= c.max_placements:
            raise StopTraining("placements")
        self.check_time(evaluating=True)

    def top(self, k: int) -> list[tuple[str, np.ndarray, float]]:
        """The ``k`` best distinct placements evaluated, by latency (ties: first evaluated)."""
        ok = [(lat, i, key) for i, (key, lat) in enumerate(self.cache.items()) if lat is not None]
        return [(self.sources.get(key, "resumed"), np.frombuffer(key, np.int16).copy(), lat)
                for lat, _, key in sorted(ok)[:k]]


def _reward(lat: np.ndarray, kind: str) -> np.ndarray:
    return -np.log(lat) if kind == "neglog" else 1.0 / lat


def _advantages(run: TrainingRun, lats: list[float | None]) -> np.ndarray | None:
    if run.worst <= 0:
        return None  # nothing has succeeded yet: no scale for a penalty
    lat = np.array([run.cfg.fail_factor * run.worst if x is None else x for x in lats])
    r = _reward(lat, run.cfg.reward_shape)
    if run.cfg.baseline == "ema":
        base = r.mean() if run.ema is None else run.ema
        run.ema = r.mean() if run.ema is None else run.cfg.ema * run.ema + (1 - run.cfg.ema) * r.mean()
    else:
        base = r.mean()
    adv = r - base
    sd = r.std()
    return adv / sd if sd > 1e-12 else adv


def _logp_entropy(model: HsdagNet, run: TrainingRun, s: _Sample) -> tuple[torch.Tensor, torch.Tensor]:
    out = model(run.p, run.cfg.parse, state=s.state, rounds=s.rounds, stochastic=run.cfg.stochastic_parse)
    dist = torch.distributions.Categorical(logits=out.logits)
    logp = dist.log_prob(s.actions).sum() + out.parse_logp
    return logp, dist.entropy().sum() + out.parse_entropy


def _update(model: HsdagNet, opt: torch.optim.Optimizer, run: TrainingRun, batch: list[_Sample]) -> None:
    """One policy update on ``batch``; raises StopTraining between PPO epochs when time is up."""
    if len(batch) < 2:
        return
    adv = _advantages(run, [s.latency for s in batch])
    if adv is None or not np.any(adv):
        return
    a = torch.as_tensor(adv, dtype=torch.float32)
    old = torch.tensor([s.logp for s in batch])
    epochs = run.cfg.ppo_epochs if run.cfg.algo == "ppo" else 1
    for _ in range(epochs):
        run.check_time()
        pairs = [_logp_entropy(model, run, s) for s in batch]
        logp = torch.stack([lp for lp, _ in pairs])
        ent = torch.stack([e for _, e in pairs])
        if run.cfg.algo == "ppo":
            ratio = torch.exp(logp - old)
            clipped = ratio.clamp(1 - run.cfg.ppo_clip, 1 + run.cfg.ppo_clip)
            pg = -torch.minimum(ratio * a, clipped * a).mean()
        else:
            pg = -(a * logp).mean()
        loss = pg - run.cfg.entropy * ent.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def _greedy(model: HsdagNet, run: TrainingRun) -> tuple[np.ndarray, Output]:
    with torch.no_grad():
        out = model(run.p, run.cfg.parse, mode="greedy", stochastic=False)
    act = out.logits.argmax(dim=1).numpy()
    return run.p.graph.group_devices(act[out.group_of_node]), out


def imitate(model: HsdagNet, opt: torch.optim.Optimizer, p: Problem, pc: ParseConfig,
            device_of_group: np.ndarray, steps: int, check: Callable[[], None] | None = None) -> float:
    """Fit the greedy policy to a placement (a device per tie group); returns the final device loss.

    Two cross-entropies: each group's device towards its members' majority device (by tie-group count),
    and each first-round edge score towards 1 when both endpoint nodes' majority devices agree, 0
    when they differ — so the parser learns not to merge across the placement's device boundaries
    and the groups can express it. Stops early once the greedy policy reproduces 99% of the tie groups
    with confidence. ``check()`` is called before every step (it may raise to stop).
    """
    lg = p.graph
    counts = np.zeros((lg.n_nodes, lg.n_devices))
    np.add.at(counts, (lg.node_of_group, np.asarray(device_of_group, np.int64)), 1.0)
    node_dev = counts.argmax(axis=1)
    same = torch.from_numpy((node_dev[lg.edges[0]] == node_dev[lg.edges[1]]).astype(np.float32))
    loss_v = math.nan
    for _ in range(steps):
        if check is not None:
            check()
        out = model(p, pc, mode="greedy", stochastic=False)
        gc = np.zeros((out.n_groups, lg.n_devices))
        np.add.at(gc, out.group_of_node, counts)
        tgt = torch.from_numpy(gc.argmax(axis=1))
        loss = torch.nn.functional.cross_entropy(out.logits, tgt)
        loss_v = float(loss.detach())
        placed = lg.group_devices(out.logits.argmax(dim=1).numpy()[out.group_of_node])
        if loss_v < 0.1 and np.mean(placed == device_of_group) >= 0.99:
            break
        if out.first_scores is not None and same.numel():
            sc = out.first_scores.clamp(1e-6, 1 - 1e-6)
            loss = loss + torch.nn.functional.binary_cross_entropy(sc, same)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss_v


def _write_report(report_dir: str, run: TrainingRun, result: TrainResult) -> None:
    d = Path(report_dir)
    d.mkdir(parents=True, exist_ok=True)
    with atomic_path(d / "curve.csv") as tmp, open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CurveRow.__struct_fields__)
        w.writeheader()
        w.writerows(run.curve)
    summary = {k: v for k, v in asdict(result).items() if k not in ("curve", "best_device_of")}
    summary["config"] = msgspec.to_builtins(run.cfg)
    atomic_write(d / "summary.json", (json.dumps(summary, indent=2, default=str) + "\n").encode())
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    idx = [r["index"] for r in run.curve if r["latency_s"] != ""]
    lat = [r["latency_s"] * 1e3 for r in run.curve if r["latency_s"] != ""]
    bi = [r["index"] for r in run.curve if r["best_s"] != ""]
    best = [r["best_s"] * 1e3 for r in run.curve if r["best_s"] != ""]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.scatter(idx, lat, s=6, alpha=0.4, label="placement")
    ax.plot(bi, best, color="C3", label="best so far")
    ax.set_xlabel("placement evaluated")
    ax.set_ylabel("latency (ms)")
    ax.set_title(f"HSDAG training: best {result.best_latency * 1e3:.4g} ms ({result.best_source})")
    ax.legend()
    fig.tight_layout()
    with atomic_path(d / "curve.png") as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)


def train(lg: LearnGraph, evaluate: Callable[[np.ndarray], float], cfg: TrainConfig = TrainConfig(),
          warm_start: tuple[str, np.ndarray] | None = None,
          candidates: list[tuple[str, np.ndarray]] = ()) -> TrainResult:
    """Learn a placement for ``lg``; ``evaluate(group_device) -> seconds`` scores a device per tie group.

    ``candidates`` (name, devices per group) are evaluated first; ``warm_start`` (name, devices per group)
    is evaluated and imitated before RL (both skipped when resuming).
    """
    cfg.check()
    with torch_threads(1 if lg.n_nodes < _SINGLE_THREAD_BELOW else None), torch.enable_grad():  # grad: any caller
        return _train(lg, evaluate, cfg, warm_start, candidates)


def _train(lg, evaluate, cfg, warm_start, candidates) -> TrainResult:
    if lg.n_devices > MAX_DEVICES:
        raise InputError(f"the learned placer handles up to {MAX_DEVICES} devices, not {lg.n_devices}")
    model_cfg = ModelConfig(in_width=lg.x.shape[1], feature_width=lg.feature_width, cost_aware=lg.cost_aware,
                            hidden=cfg.hidden, gcn_layers=cfg.gcn_layers, cost_prior=cfg.cost_prior,
                            edge_prior=cfg.edge_prior)
    ck = None
    if cfg.policy:
        ck = load_checkpoint(cfg.policy)
        model_cfg = restore_config(ck, cfg.policy, lg)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = HsdagNet(model_cfg)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    problem = Problem(lg)
    run = TrainingRun(problem, evaluate, cfg)
    resumed = ck is not None and ck.digest == lg.digest
    if ck is not None:
        load_weights(model, ck, cfg.policy)
    if resumed:
        load_run_state(ck, cfg.policy, model, opt, gen, run, lg)

    stopped = "done"
    total = max(cfg.episodes - run.episode, 0) * cfg.samples

    hide = None if cfg.progress is None else not cfg.progress
    run.bar = tqdm(total=total, desc="hsdag", unit="placement", disable=hide, leave=False)
    try:
        if not resumed:
            for name, dev in candidates:
                run.score(dev, name)
            if warm_start is not None:
                name, dev = warm_start
                run.score(dev, f"warm:{name}")
                imitate(model, opt, problem, cfg.parse, dev, cfg.warm_steps, check=run.check_time)
        while run.episode < cfg.episodes:
            batch: list[_Sample] = []
            state_sum = torch.zeros(lg.n_nodes, model_cfg.hidden)
            try:
                for t in range(cfg.samples):
                    run.check_time()
                    state = state_sum / t if t else None
                    with torch.no_grad():
                        out = model(problem, cfg.parse, state=state, generator=gen,
                                    mode="sample" if cfg.stochastic_parse else "greedy",
                                    stochastic=cfg.stochastic_parse)
                        act = torch.multinomial(torch.softmax(out.logits, dim=1), 1, generator=gen).squeeze(1)
                        logp = float(torch.distributions.Categorical(logits=out.logits).log_prob(act).sum()
                                     + out.parse_logp)
                    lat = run.score(lg.group_devices(act.numpy()[out.group_of_node]), "sample")
                    run.samples += 1
                    run.bar.update(1)
                    batch.append(_Sample(state, out.rounds, act, logp, lat))
                    state_sum = state_sum + model.state_delta(out, act)
            except StopTraining as s:
                stopped = s.why
            if stopped != "seconds":  # with the time up, no update: it would overrun the budget
                try:
                    _update(model, opt, run, batch)
                except StopTraining as s:
                    stopped = s.why
            if stopped != "done":
                break
            run.episode += 1
            if cfg.greedy_each:
                try:
                    run.score(_greedy(model, run)[0], "greedy")
                except StopTraining as s:
                    stopped = s.why
                    break
            if cfg.checkpoint:
                save_checkpoint(cfg.checkpoint, model, opt, gen, run, cfg.parse)
            kill_point("trained-episode", str(run.episode))  # test hook: dies mid-training
        dev, out = _greedy(model, run)
        groups = out.n_groups
        if stopped == "done" and not (cfg.greedy_each and run.episode):
            try:
                run.score(dev, "greedy")
            except StopTraining as s:
                stopped = s.why
    except StopTraining as s:  # budget exhausted by the candidates or the warm start
        stopped = s.why
        groups = _greedy(model, run)[1].n_groups
    finally:
        run.bar.close()
    if cfg.checkpoint:
        save_checkpoint(cfg.checkpoint, model, opt, gen, run, cfg.parse)
    result = TrainResult(
        best_device_of=run.best_device_of, best_latency=run.best_latency, best_source=run.best_source,
        evaluations=run.evaluations, samples=run.samples, failures=run.failures, episodes=run.episode,
        seconds=clock.now() - run.t0, groups=groups, stopped=stopped, curve=run.curve, resumed=resumed,
        top=run.top(cfg.top))
    if cfg.report_dir:
        _write_report(cfg.report_dir, run, result)
    return result
