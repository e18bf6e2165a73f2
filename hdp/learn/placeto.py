"""Placeto (Addanki et al., "Placeto: Learning Generalizable Device Placement Algorithms for
Distributed Machine Learning", NeurIPS 2019), rebuilt in torch on hdp's placement problem.

An episode walks the nodes of the :class:`~hdp.learn.graph.LearnGraph` once, in the problem's
topological order, starting from a full placement (the warm start, else one random placement
drawn once per run). At each step the current node gets a new device:

1. Node inputs: the static features of ``lg.x``, the node's time on every device (share of the
   model's best-device time), and the episode's state: the current device of every node (one-hot),
   a flag on the node being placed and a flag on the nodes placed already in this episode.
2. Graph embedding: ``rounds`` rounds of message passing along the arcs (parents -> children) and,
   separately, against them, each ``h <- relu(W_self e + W_msg · mean(h of neighbours))``; a node's
   embedding is both directions concatenated.
3. The current node's view: the mean embedding of its ancestors, of its descendants, of the nodes
   that are neither (its "parallel" peers), and its own, concatenated, through a classifier
   (two hidden layers, 2x and 1x its input width) to a distribution over its allowed devices.

Reward (the paper's credit assignment): after each step the whole placement is evaluated; the
step's reward is the decrease of the cost, so a step's return is the cost before it minus the cost
at the end of the episode (divided by the cost of the start placement, to be scale-free). The
baseline of step ``t`` is the mean return of step ``t`` over the last ``baseline_episodes``
episodes. One REINFORCE update per episode; Adam with the learning rate decayed linearly from
``lr`` to ``lr_end`` over the run (by the share of the budget used, when there is a budget).
Each step's evaluation counts against the evaluation budget (a placement evaluated before is
free: the run caches them), which is Placeto's real price where evaluations are not free.

Beyond the paper, as for every learned placer here: the caller's candidates (the single-device
placements) are evaluated first, and the best placement seen is kept.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from hdp.learn import clock
from hdp.learn.baseline_graph import DirectedView, directed_view
from hdp.learn.config import PlacetoConfig, TrainConfig
from hdp.learn.graph import LearnGraph
from hdp.learn.trainer import StopTraining, TrainingRun, TrainResult, torch_threads

_MASKED = -1e9
#: Steps recomputed with gradient at once in an update (bounds the memory of long episodes).
_CHUNK = 32
#: Stop once the placements of this many steps in a row were all evaluated before (the policy has
#: converged: the evaluation budget, which counts new placements only, would never end the run).
STALL = 2000


class Arcs:
    """The arcs (parents -> children) and, per node, 1 / its number of parents and of children
    (computed once per problem: every round of every step averages over them)."""

    def __init__(self, arcs: np.ndarray, n: int):
        self.src, self.dst = torch.from_numpy(arcs[0]), torch.from_numpy(arcs[1])
        self.inv_parents = 1.0 / torch.from_numpy(np.bincount(arcs[1], minlength=n).clip(min=1).astype(np.float32))
        self.inv_children = 1.0 / torch.from_numpy(np.bincount(arcs[0], minlength=n).clip(min=1).astype(np.float32))


def _mean_over(index_to: torch.Tensor, index_from: torch.Tensor, h: torch.Tensor, inv_count: torch.Tensor) -> torch.Tensor:
    """Per node, the mean of ``h`` over the arcs ``from -> to`` (h: steps x nodes x width)."""
    out = torch.zeros_like(h)
    out.index_add_(1, index_to, h[:, index_from])
    return out * inv_count[None, :, None]


class PlacetoNet(nn.Module):
    """Embeds a batch of episode states and scores the devices of each state's current node."""

    def __init__(self, in_width: int, n_devices: int, hidden: int, rounds: int):
        super().__init__()
        h = hidden
        self.rounds = rounds
        self.inp = nn.Sequential(nn.Linear(in_width, h), nn.ReLU(), nn.Linear(h, h))
        self.fwd_self, self.fwd_msg = nn.Linear(h, h), nn.Linear(h, h, bias=False)
        self.bwd_self, self.bwd_msg = nn.Linear(h, h), nn.Linear(h, h, bias=False)
        d = 8 * h  # (ancestors, descendants, peers, self) x both directions
        self.classifier = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d), nn.ReLU(),
                                        nn.Linear(d, n_devices))

    def forward(self, x: torch.Tensor, arcs: Arcs, masks: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        """Logits (steps x devices). ``x``: steps x nodes x width; ``masks``: steps x 4 x nodes
        (ancestors, descendants, peers, self of each step's node); ``allowed``: steps x devices."""
        e = self.inp(x)
        own_f, own_b = self.fwd_self(e), self.bwd_self(e)  # the same every round
        hf, hb = e, e
        for _ in range(self.rounds):
            hf = torch.relu(own_f + self.fwd_msg(_mean_over(arcs.dst, arcs.src, hf, arcs.inv_parents)))
            hb = torch.relu(own_b + self.bwd_msg(_mean_over(arcs.src, arcs.dst, hb, arcs.inv_children)))
        h = torch.cat([hf, hb], dim=-1)  # steps x nodes x 2h
        w = masks / masks.sum(dim=-1, keepdim=True).clamp(min=1)
        views = torch.einsum("skn,snh->skh", w, h).reshape(x.shape[0], -1)
        return self.classifier(views).masked_fill(~allowed, _MASKED)


class _Episode:
    """Static tensors of one problem and the per-step inputs of an episode."""

    def __init__(self, lg: LearnGraph, dv: DirectedView):
        self.lg, self.dv = lg, dv
        n, nd = lg.n_nodes, lg.n_devices
        best = np.where(lg.allowed, lg.cost, np.inf).min(axis=1) if n else np.zeros(0)
        total = max(float(best.sum()), 1e-12)
        t = np.log1p(np.where(lg.allowed, lg.cost, 0.0) * n / total)
        self.static = np.concatenate([lg.x, t.astype(np.float32)], axis=1).astype(np.float32)
        self.width = self.static.shape[1] + nd + 2
        self.arcs = Arcs(dv.arcs, n)
        peers = ~(dv.ancestors | dv.descendants)
        np.fill_diagonal(peers, False)
        self.peers = peers
        self.allowed = torch.from_numpy(lg.allowed)

    def inputs(self, devs: np.ndarray, steps: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Batched inputs of the given steps; ``devs[s]`` is the placement before step ``s``."""
        lg, dv = self.lg, self.dv
        n, nd = lg.n_nodes, lg.n_devices
        s = len(steps)
        x = np.zeros((s, n, self.width), np.float32)
        x[:, :, :self.static.shape[1]] = self.static
        masks = np.zeros((s, 4, n), np.float32)
        for i, t in enumerate(steps):
            node = dv.order[t]
            x[i, np.arange(n), self.static.shape[1] + devs[t]] = 1.0
            x[i, node, -2] = 1.0
            x[i, dv.order[:t], -1] = 1.0
            masks[i, 0] = dv.ancestors[node]
            masks[i, 1] = dv.descendants[node]
            masks[i, 2] = self.peers[node]
            masks[i, 3, node] = 1.0
        nodes = torch.from_numpy(dv.order[steps])
        return torch.from_numpy(x), torch.from_numpy(masks), self.allowed[nodes]


def train_placeto(lg: LearnGraph, problem, evaluate, cfg: PlacetoConfig = PlacetoConfig(),
                  warm_start: tuple[str, np.ndarray] | None = None,
                  candidates: list[tuple[str, np.ndarray]] = ()) -> TrainResult:
    """Learn a placement of ``lg`` (the problem it was built from: ``problem``) with Placeto;
    ``evaluate(device per tie group) -> seconds``. See the module docstring."""
    cfg.check()
    with torch_threads(1), torch.enable_grad():  # grad mode on whatever the caller left (an interrupted no_grad)
        return _train(lg, problem, evaluate, cfg, warm_start, candidates)


def _train(lg, problem, evaluate, cfg: PlacetoConfig, warm_start, candidates) -> TrainResult:
    n, nd = lg.n_nodes, lg.n_devices
    run = TrainingRun(None, evaluate, TrainConfig.budget_of(cfg))
    ep = _Episode(lg, directed_view(lg, problem))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        net = PlacetoNet(ep.width, nd, cfg.hidden, cfg.rounds)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    rng = np.random.default_rng(cfg.seed)
    allowed = lg.allowed
    if warm_start is not None:
        start = _node_devices(lg, warm_start[1])
    else:
        start = np.array([rng.choice(np.flatnonzero(allowed[i])) for i in range(n)], np.int64)
    history: list[np.ndarray] = []  # returns per step of the last episodes
    stopped = "done"
    try:
        for name, dev in candidates:
            run.score(dev, name)
        if warm_start is not None:
            run.score(warm_start[1], f"warm:{warm_start[0]}")
        c0 = run.score(lg.group_devices(start), "start")
        stall_from = (0, run.evaluations)
        while run.episode < cfg.episodes and n:
            if run.evaluations != stall_from[1]:
                stall_from = (run.samples, run.evaluations)
            elif run.samples - stall_from[0] >= STALL:
                raise StopTraining("converged")
            _set_lr(opt, cfg, run)
            devs = np.empty((n + 1, n), np.int64)
            devs[0] = start
            costs = np.empty(n + 1)
            costs[0] = c0 if c0 is not None else math.nan
            actions = np.empty(n, np.int64)
            with torch.no_grad():
                for t in range(n):
                    run.check_time()
                    x, masks, al = ep.inputs(devs, [t])
                    logits = net(x, ep.arcs, masks, al)
                    a = int(torch.multinomial(torch.softmax(logits[0], 0), 1, generator=gen))
                    actions[t] = a
                    devs[t + 1] = devs[t]
                    devs[t + 1, ep.dv.order[t]] = a
                    if cfg.step_reward or t == n - 1:
                        lat = run.score(lg.group_devices(devs[t + 1]), "sample")
                        costs[t + 1] = math.nan if lat is None else lat
                    else:
                        costs[t + 1] = costs[t]
                    run.samples += 1
            returns = _returns(costs, run, cfg.step_reward)
            history.append(returns)
            del history[:-cfg.baseline_episodes]
            adv = returns - np.mean(history, axis=0) if len(history) > 1 else returns - returns.mean()
            if np.any(adv):
                _update(net, opt, ep, devs, actions, adv, run)
            run.episode += 1
    except StopTraining as s:
        stopped = s.why
    return TrainResult(best_device_of=run.best_device_of, best_latency=run.best_latency,
                       best_source=run.best_source, evaluations=run.evaluations, samples=run.samples,
                       failures=run.failures, episodes=run.episode, seconds=clock.now() - run.t0, groups=n,
                       stopped=stopped, curve=run.curve, top=run.top(cfg.top))


def _node_devices(lg: LearnGraph, group_device: np.ndarray) -> np.ndarray:
    """Device per node from a device per tie group (the majority of its tie groups)."""
    counts = np.zeros((lg.n_nodes, lg.n_devices))
    np.add.at(counts, (lg.node_of_group, np.asarray(group_device, np.int64)), 1.0)
    return counts.argmax(axis=1).astype(np.int64)


def _returns(costs: np.ndarray, run: TrainingRun, step_reward: bool) -> np.ndarray:
    """Return of every step: (cost before it - final cost) / start cost; a failed evaluation costs
    twice the worst latency seen."""
    c = np.where(np.isnan(costs), 2.0 * max(run.worst, 1e-12), costs)
    scale = c[0] if c[0] > 0 else 1.0
    if not step_reward:
        return np.full(c.shape[0] - 1, (c[0] - c[-1]) / scale)
    return (c[:-1] - c[-1]) / scale


def _set_lr(opt, cfg: PlacetoConfig, run: TrainingRun) -> None:
    """Linear decay from ``lr`` to ``lr_end`` over the run's progress (the budget share used)."""
    shares = [run.episode / cfg.episodes]
    if cfg.max_placements:
        shares.append(run.evaluations / cfg.max_placements)
    if run.stop_at != math.inf:
        shares.append((clock.now() - run.t0) / max(run.stop_at - run.t0, 1e-9))
    f = min(max(shares), 1.0)
    for g in opt.param_groups:
        g["lr"] = cfg.lr + (cfg.lr_end - cfg.lr) * f


def _update(net: PlacetoNet, opt, ep: _Episode, devs: np.ndarray, actions: np.ndarray, adv: np.ndarray,
            run: TrainingRun) -> None:
    n = actions.shape[0]
    opt.zero_grad()
    for lo in range(0, n, _CHUNK):
        run.check_time()
        steps = list(range(lo, min(lo + _CHUNK, n)))
        x, masks, al = ep.inputs(devs, steps)
        logp = torch.log_softmax(net(x, ep.arcs, masks, al), dim=1)
        chosen = logp[torch.arange(len(steps)), torch.from_numpy(actions[steps])]
        loss = -(torch.from_numpy(adv[steps].astype(np.float32)) * chosen).sum() / n
        loss.backward()
    opt.step()
