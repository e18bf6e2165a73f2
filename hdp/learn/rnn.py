"""The hierarchical RNN placer (Mirhoseini et al., "A Hierarchical Model for Device Placement",
ICLR 2018), rebuilt in torch on hdp's placement problem.

Two policies trained together by REINFORCE, one placement per update:

- the **grouper**, a feed-forward network (two linear maps through ``grouping_hidden``) over each
  node's features (:attr:`LearnGraph.x` and its time per device), samples a group per node out of
  ``groups`` = min(256, 20 x devices) (published), and no more than the nodes (beyond them every
  extra group is empty: one more decoder step that places nothing and only adds noise);
- the **placer**, a sequence-to-sequence LSTM: each group is embedded (the sum of its members'
  features, its time per device as a share of the model's, its member count, and which groups feed
  it and which it feeds, 2 x groups; each row divided by its largest entry + 1), a bidirectional
  LSTM encodes the groups in order, and an LSTM decoder starting from the encoder's final state,
  with additive attention over the encoder, emits a device per group, fed the embedding of
  the device it chose for the previous group. The placer's logits pass through ``tanh_constant ·
  tanh`` as in the published code (the grouper's are not clipped); both get Gaussian noise of
  ``logits_noise`` x their RMS for the first ``noise_steps`` updates, as published; devices a
  group's members do not all support are masked out (a member whose
  group got a device it cannot run keeps its fastest allowed device).

Reward: sqrt(runtime), minimised against an exponential moving average of it (decay 0.9, starting
at the first reward); loss = (sqrt(runtime) - baseline) x (log p(groups) + log p(devices)). Adam
at ``lr`` (1e-3; 0.1 published, which collapses: :class:`~hdp.learn.config.RnnConfig`), x ``lr_decay`` every ``decay_steps`` updates from ``start_decay_step``,
gradient norm clipped to ``grad_bound``. The candidates (single devices) and the warm start are
evaluated first and the best placement seen is kept; the warm start is not imitated (the published
planner has no such step).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from hdp.learn import clock
from hdp.learn.baseline_graph import directed_view
from hdp.learn.config import RnnConfig, TrainConfig
from hdp.learn.graph import LearnGraph
from hdp.learn.trainer import StopTraining, TrainingRun, TrainResult, torch_threads

_MASKED = -1e9
#: Stop once this many placements in a row were all evaluated before (the policy has converged:
#: the evaluation budget, which counts new placements only, would never end the run).
STALL = 500


class HierarchicalPlanner(nn.Module):
    def __init__(self, node_width: int, group_width: int, n_groups: int, n_devices: int, cfg: RnnConfig):
        super().__init__()
        h = cfg.hidden
        self.cfg = cfg
        # two linear maps, no activation between them, as published
        self.grouper = nn.Sequential(nn.Linear(node_width, cfg.grouping_hidden),
                                     nn.Linear(cfg.grouping_hidden, n_groups))
        self.encoder = nn.LSTM(group_width, h // 2, batch_first=True, bidirectional=True)
        self.decoder = nn.LSTMCell(h, h)
        self.device_emb = nn.Embedding(n_devices + 1, h)  # the last row is the GO symbol
        self.attn_enc = nn.Linear(h, h, bias=False)
        self.attn_dec = nn.Linear(h, h, bias=False)
        self.attn_v = nn.Linear(h, 1, bias=False)
        self.out = nn.Linear(2 * h, n_devices)
        self.n_devices = n_devices
        for cell in (self.decoder,):  # forget-gate bias 1 (published init)
            cell.bias_hh.data[h:2 * h] = 1.0

    def group_logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.grouper(x)

    def _clip(self, logits: torch.Tensor) -> torch.Tensor:
        c = self.cfg.tanh_constant
        return c * torch.tanh(logits) if c > 0 else logits

    def place(self, emb: torch.Tensor, allowed: torch.Tensor, actions: torch.Tensor | None = None,
              generator: torch.Generator | None = None, greedy: bool = False,
              noise: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
        """(device per group, summed log prob). ``actions`` given: score them instead of sampling.
        ``noise``: Gaussian noise of this many times the logits' RMS added after the tanh clip."""
        enc, (hn, cn) = self.encoder(emb[None])
        enc = enc[0]  # groups x h
        keys = self.attn_enc(enc)
        g = emb.shape[0]
        # the decoder starts from the encoder's final states (both directions)
        h, c = hn.permute(1, 0, 2).reshape(1, -1), cn.permute(1, 0, 2).reshape(1, -1)
        prev = torch.tensor([self.n_devices])
        chosen, logp = [], torch.zeros(())
        for i in range(g):
            h, c = self.decoder(self.device_emb(prev), (h, c))
            score = self.attn_v(torch.tanh(keys + self.attn_dec(h))).squeeze(-1)
            ctx = torch.softmax(score, 0) @ enc
            logits = self._clip(self.out(torch.cat([h[0], ctx])))
            if noise:
                rms = logits.detach().pow(2).mean().sqrt()
                logits = logits + torch.randn(logits.shape, generator=generator) * (noise * rms)
            logits = logits.masked_fill(~allowed[i], _MASKED)
            if actions is not None:
                a = actions[i]
            elif greedy:
                a = logits.argmax()
            else:
                a = torch.multinomial(torch.softmax(logits, 0), 1, generator=generator)[0]
            logp = logp + torch.log_softmax(logits, 0)[a]
            chosen.append(a)
            prev = a.view(1)
        return torch.stack(chosen), logp


class _Tables:
    """Per-node inputs and the group embedding of a grouping (numpy in, torch out)."""

    def __init__(self, lg: LearnGraph, problem, n_groups: int):
        self.lg = lg
        n = lg.n_nodes
        best = np.where(lg.allowed, lg.cost, np.inf).min(axis=1) if n else np.zeros(0)
        self.total = max(float(best.sum()), 1e-12)
        t = np.log1p(np.where(lg.allowed, lg.cost, 0.0) * n / self.total)
        self.node_x = np.concatenate([lg.x, t], axis=1).astype(np.float32)
        self.arcs = directed_view(lg, problem).arcs
        self.g = n_groups
        self.group_width = self.node_x.shape[1] + lg.n_devices + 1 + 2 * n_groups
        self.fastest = np.where(lg.allowed, lg.cost, np.inf).argmin(axis=1) if n else np.zeros(0, np.int64)

    def embed(self, group_of: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """(group embeddings, allowed devices per group) of a node -> group assignment."""
        lg, g = self.lg, self.g
        feats = np.zeros((g, self.node_x.shape[1]))
        np.add.at(feats, group_of, self.node_x)
        cost = np.zeros((g, lg.n_devices))
        np.add.at(cost, group_of, np.where(lg.allowed, lg.cost, 0.0))
        size = np.bincount(group_of, minlength=g).astype(np.float64)
        adj = np.zeros((g, 2 * g))
        if self.arcs.shape[1]:
            a, b = group_of[self.arcs[0]], group_of[self.arcs[1]]
            cross = a != b
            np.add.at(adj, (b[cross], a[cross]), 1.0)  # fed by
            np.add.at(adj, (a[cross], g + b[cross]), 1.0)  # feeds
        bad = np.zeros((g, lg.n_devices), np.int64)
        np.add.at(bad, group_of, (~lg.allowed).astype(np.int64))
        allowed = bad == 0
        allowed[~allowed.any(axis=1)] = True
        emb = np.concatenate([adj, np.log1p(np.abs(feats)) * np.sign(feats), cost / self.total,
                              np.log1p(size)[:, None]], axis=1)
        emb /= np.abs(emb).max(axis=1, keepdims=True) + 1.0  # per group, as published
        return torch.from_numpy(emb.astype(np.float32)), torch.from_numpy(allowed)

    def node_devices(self, group_of: np.ndarray, group_dev: np.ndarray) -> np.ndarray:
        d = np.asarray(group_dev, np.int64)[group_of]
        ok = self.lg.allowed[np.arange(d.shape[0]), d]
        return np.where(ok, d, self.fastest)


def train_rnn(lg: LearnGraph, problem, evaluate, cfg: RnnConfig = RnnConfig(),
              warm_start: tuple[str, np.ndarray] | None = None,
              candidates: list[tuple[str, np.ndarray]] = ()) -> TrainResult:
    """Learn a placement of ``lg`` (built from ``problem``) with the hierarchical planner;
    ``evaluate(device per tie group) -> seconds``. See the module docstring."""
    cfg.check()
    with torch_threads(1), torch.enable_grad():  # grad mode on whatever the caller left (an interrupted no_grad)
        return _train(lg, problem, evaluate, cfg, warm_start, candidates)


def _train(lg, problem, evaluate, cfg: RnnConfig, warm_start, candidates) -> TrainResult:
    nd = lg.n_devices
    n_groups = cfg.groups or max(1, min(256, 20 * nd, lg.n_nodes))
    run = TrainingRun(None, evaluate, TrainConfig.budget_of(cfg))
    tables = _Tables(lg, problem, n_groups)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        net = HierarchicalPlanner(tables.node_x.shape[1], tables.group_width, n_groups, nd, cfg)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    node_x = torch.from_numpy(tables.node_x)
    baseline: float | None = None
    stopped = "done"
    try:
        for name, dev in candidates:
            run.score(dev, name)
        if warm_start is not None:
            run.score(warm_start[1], f"warm:{warm_start[0]}")
        stall_from = (0, run.evaluations)
        while run.samples < cfg.steps and lg.n_nodes:
            run.check_time()
            if run.evaluations != stall_from[1]:
                stall_from = (run.samples, run.evaluations)
            elif run.samples - stall_from[0] >= STALL:
                raise StopTraining("converged")
            step = run.samples
            lr = cfg.lr * cfg.lr_decay ** (max(step - cfg.start_decay_step, 0) // cfg.decay_steps)
            for g in opt.param_groups:
                g["lr"] = lr
            gl = net.group_logits(node_x)
            if cfg.logits_noise and step < cfg.noise_steps:
                rms = gl.detach().pow(2).mean().sqrt()
                gl = gl + torch.randn(gl.shape, generator=gen) * (cfg.logits_noise * rms)
            glog = torch.log_softmax(gl, dim=1)
            group_of = torch.multinomial(glog.exp(), 1, generator=gen).squeeze(1)
            emb, allowed = tables.embed(group_of.numpy())
            noisy = cfg.logits_noise if step < cfg.noise_steps else 0.0
            gdev, logp = net.place(emb, allowed, generator=gen, noise=noisy)
            lat = run.score(lg.group_devices(tables.node_devices(group_of.numpy(), gdev.numpy())), "sample")
            run.samples += 1
            worst = max(run.worst, 1e-12)
            r = math.sqrt(2.0 * worst if lat is None else lat)
            baseline = r if baseline is None else cfg.baseline_decay * baseline + (1 - cfg.baseline_decay) * r
            adv = r - baseline
            if adv != 0.0:
                _update(net, opt, adv * (logp + glog[torch.arange(group_of.shape[0]), group_of].sum()), cfg.grad_bound)
    except StopTraining as s:
        stopped = s.why
    return TrainResult(best_device_of=run.best_device_of, best_latency=run.best_latency,
                       best_source=run.best_source, evaluations=run.evaluations, samples=run.samples,
                       failures=run.failures, episodes=run.samples, seconds=clock.now() - run.t0, groups=n_groups,
                       stopped=stopped, curve=run.curve, top=run.top(cfg.top))


def _update(net: HierarchicalPlanner, opt, loss: torch.Tensor, grad_bound: float) -> None:
    """One REINFORCE step of both policies on ``loss``, the gradient norm clipped to ``grad_bound``."""
    opt.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(net.parameters(), grad_bound)
    opt.step()
