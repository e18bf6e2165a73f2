"""The HSDAG network: input MLP -> GCN -> graph parsing network -> policy head (torch).

Forward pass, on the graph of :class:`hdp.learn.graph.LearnGraph` (coarse groups, or ops):

1. ``h = MLP(x) + W·state``: node features, plus the episode state (below).
2. Parsing rounds, each: GCN layers (torch_geometric ``GCNConv``, residual, shared across rounds) ->
   an edge score ``σ(MLP([h_u + h_v, h_u ⊙ h_v, f_uv]) + w·(f_uv - f0))`` (symmetric in the two
   endpoints; ``f_uv`` = how alike the endpoints' device preferences are and how long the edge's
   tensors take to copy) -> every node picks its dominant (highest-scored) edge -> kept dominant
   edges are merged into groups (:func:`hdp.learn.parse.merge`) -> group embedding =
   ``LayerNorm(mean h + MLP(mean MLP(h)))`` scaled by the mean score of the edges merged along (the
   scorer's gradient path, as in graph parsing networks). Node->group maps compose across rounds.
   Rounds repeat until one merges nothing (or ``max_rounds``), so the number of groups is found,
   not fixed.
3. A last GCN pass over the group graph, then the policy head scores every (group, device) pair:
   ``MLP([z_g, e_d, c_gd]) - w_c·c_gd[0]`` with ``e_d`` a learned device embedding and ``c_gd``
   three cost features (log of the group's time on ``d`` over its best time, the time lost on
   ``d`` and the group's best time, both as fractions of the model's best-device time). Devices a
   group's members do not all support are masked out.

**Cost awareness (beyond the paper).** The published network sees op features only and must discover
from rewards which device suits which op. Ours also sees the cost table through features whose
number does not depend on the device count, and two learned linear priors start it from sensible
behaviour: ``w_c`` (initially 1) makes a group prefer its faster devices, ``w`` (initially 4 on
preference similarity, 1 on copy time; ``f0`` = (0.5, 0.7), i.e. half-alike endpoints and a copy as
long as an average node's time score 0.5) makes edges between like-minded or expensive-to-cut
endpoints merge first. On random 100-op DAGs with 500 placements (REINFORCE, paper settings) this
brings the best placement from 1.03-1.22x to 1.01-1.13x of the exact optimum. ``cost_aware=False``
removes both (features only, as published).

**Anti-collapse guards.** In the published parser every node always keeps its dominant edge, so each
round merges every non-isolated node with a neighbour and the loop "until nothing merges" ends with
one group per connected component — a connected model gets one group, i.e. only single-device
placements. Here (a) a dominant edge is kept only when its score clears ``threshold`` (0.5; while
training it is kept with probability equal to its score — see below), so the network can decide to
stop merging; (b) no group may exceed ``max_group_frac`` of the model's ops (0.25), and (c) merging
stops at ``min_groups`` groups (default 2 × devices); (d) at most ``max_rounds`` rounds (4). (a) is
the learnable part; (b)-(d) are hard floors so an untrained or badly trained scorer (initial scores
sit near 0.5) cannot take away the policy's ability to split the model.

**Stochastic parsing.** Published GPN groups are a deterministic function of the scores and the
scorer only gets gradient through the gate; REINFORCE gives it no signal that a merge was harmful.
In ``sample`` mode each dominant edge is kept with probability equal to its score and the log
probability of those keep/drop decisions is part of the action's log probability, so the grouping is
trained by the reward like the device choice. ``greedy`` mode thresholds at ``threshold``.

**State.** The paper updates the node state between the placements of an episode
(``Z <- Z + group embedding``). We keep a per-episode sum ``S`` of (group embedding + a fixed code of
the device the group was given) broadcast to the member nodes, and feed ``S / steps`` back through a
linear map, so later samples of an episode see what earlier ones tried, at a bounded scale.

**Acyclicity.** Groups grown along dominant edges can make the group graph cyclic (merging ``u -> v``
when another path ``u -> w -> v`` exists). That does not affect correctness: the result is a device
per op, and HETERO forms its subgraphs from the per-op affinities, not from these groups. The
groups are the policy's decision units only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from torch_geometric.nn import GCNConv

from hdp.learn.config import ModelConfig, ParseConfig  # noqa: F401  (part of this module's API)
from hdp.learn.graph import LearnGraph
from hdp.learn.parse import dominant_edges, merge, quotient

#: Size of the device embedding tables: a policy works on targets with up to this many devices.
MAX_DEVICES = 16
#: Per (group, device) cost features fed to the policy head.
N_PAIR_FEATURES = 3
_MASKED = -1e9


@dataclass
class Round:
    """One parsing round, recorded so the same grouping can be replayed under new weights."""

    edges: np.ndarray  # 2 x m edges of the level graph
    dom: np.ndarray  # dominant edge ids
    keep: np.ndarray  # bool per dominant edge
    assign: np.ndarray  # node -> group at this level
    accepted: np.ndarray  # edge ids merged along


@dataclass
class Output:
    logits: torch.Tensor  # n_groups x n_devices, masked entries very negative
    z: torch.Tensor  # n_groups x hidden
    group_of_node: np.ndarray  # int64, n_nodes
    rounds: list[Round] = field(default_factory=list)
    parse_logp: torch.Tensor | float = 0.0  # log prob of the sampled keep/drop decisions
    parse_entropy: torch.Tensor | float = 0.0
    first_scores: torch.Tensor | None = None  # edge scores of the first round (over p.edges)

    @property
    def n_groups(self) -> int:
        return int(self.logits.shape[0])


class Problem:
    """A LearnGraph as tensors plus the constants the forward pass needs (built once)."""

    def __init__(self, lg: LearnGraph):
        self.graph = lg
        self.x = torch.from_numpy(lg.x)
        self.edges = lg.edges
        self.edge_copy = lg.edge_copy
        self.size = lg.size
        self.cost = lg.cost
        self.allowed = lg.allowed
        best = np.where(lg.allowed, lg.cost, np.inf).min(axis=1) if lg.n_nodes else np.zeros(0)
        self.total = max(float(best.sum()), 1e-12)
        # times for the edge features, a disallowed device counting as e^5 x slower than the best
        self.cost_for_edges = np.where(lg.allowed, lg.cost, np.exp(5.0) * best[:, None]) if lg.n_nodes else lg.cost

    @property
    def n_nodes(self) -> int:
        return self.graph.n_nodes

    @property
    def n_devices(self) -> int:
        return self.graph.n_devices

    def edge_features(self, edges: np.ndarray, copy: np.ndarray, cost: np.ndarray) -> torch.Tensor:
        """Per level edge: how alike the endpoints' device preferences are (exp of minus the mean
        absolute difference of log(time / best time) over devices; 1 = same preferences) and the
        edge's copy time relative to the model (log1p of copy × nodes / best-device total). Zeros
        when the policy is not cost-aware."""
        m = edges.shape[1]
        if not self.graph.cost_aware or m == 0:
            return torch.zeros(m, 2)
        eps = 1e-6 * self.total / max(self.n_nodes, 1) + 1e-15
        rel = np.clip(np.log((cost + eps) / (cost.min(axis=1, keepdims=True) + eps)), 0, 5)
        sim = np.exp(-np.abs(rel[edges[0]] - rel[edges[1]]).mean(axis=1))
        cp = np.log1p(copy * self.n_nodes / self.total)
        return torch.from_numpy(np.stack([sim, cp], axis=1).astype(np.float32))

    def group_tables(self, group_of_node: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
        """(allowed mask, pair features) per group; a group nobody fully supports allows all."""
        d = self.n_devices
        bad = np.zeros((n_groups, d), np.int64)
        np.add.at(bad, group_of_node, (~self.allowed).astype(np.int64))
        allowed = bad == 0
        allowed[~allowed.any(axis=1)] = True
        cost = np.zeros((n_groups, d))
        np.add.at(cost, group_of_node, self.cost)
        tmin = np.where(allowed, cost, np.inf).min(axis=1, keepdims=True)
        eps = 1e-6 * self.total / max(self.n_nodes, 1) + 1e-15
        rel = np.log((cost + eps) / (tmin + eps))
        lost = (cost - tmin) / self.total
        share = np.broadcast_to(tmin / self.total, cost.shape)
        pair = np.stack([np.clip(rel, 0, 20), np.clip(lost, 0, 10), share], axis=-1)
        pair = np.where(allowed[..., None], pair, 0.0)
        return allowed, pair.astype(np.float32)


def _mean_by(index: torch.Tensor, values: torch.Tensor, n: int) -> torch.Tensor:
    out = torch.zeros((n,) + values.shape[1:], dtype=values.dtype)
    out.index_add_(0, index, values)
    cnt = torch.zeros(n, dtype=values.dtype).index_add_(0, index, torch.ones_like(index, dtype=values.dtype))
    return out / cnt.clamp(min=1).view((n,) + (1,) * (values.dim() - 1))


def _sum_by(index: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros((n,) + values.shape[1:])
    np.add.at(out, index, values)
    return out


def _sym(edges: np.ndarray) -> torch.Tensor:
    e = torch.from_numpy(edges)
    return torch.cat([e, e.flip(0)], dim=1)


class HsdagNet(nn.Module):
    """The policy network; weights do not depend on graph size or device count (up to 16)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        h = cfg.hidden
        self.inp = nn.Sequential(nn.Linear(cfg.in_width, h), nn.LayerNorm(h), nn.ReLU(), nn.Linear(h, h))
        self.state_proj = nn.Linear(h, h)
        self.convs = nn.ModuleList(GCNConv(h, h) for _ in range(cfg.gcn_layers))
        self.norm = nn.LayerNorm(h)
        self.edge_mlp = nn.Sequential(nn.Linear(2 * h + 2, h), nn.ReLU(), nn.Linear(h, 1))
        self.pool_pre = nn.Sequential(nn.Linear(h, h), nn.ReLU())
        self.pool_post = nn.Linear(h, h)
        self.pool_norm = nn.LayerNorm(h)
        self.dev_emb = nn.Embedding(MAX_DEVICES, cfg.device_dim)
        self.head = nn.Sequential(nn.Linear(h + cfg.device_dim + N_PAIR_FEATURES, h), nn.ReLU(),
                                  nn.Linear(h, 1))
        # weight of the cost prior -log(t_gd / t_g,best) added to the logits (learned; 0 when the
        # policy is not cost-aware)
        self.prior = nn.Parameter(torch.tensor(float(cfg.cost_prior) if cfg.cost_aware else 0.0),
                                  requires_grad=cfg.cost_aware)
        # learned linear prior on the edge features (merge endpoints that prefer the same devices,
        # and edges that are expensive to cut), centred so an edge of average features scores 0.5
        self.edge_prior = nn.Parameter(torch.tensor([cfg.edge_prior, cfg.edge_prior / 4]) if cfg.cost_aware
                                       else torch.zeros(2), requires_grad=cfg.cost_aware)
        self.register_buffer("edge_center", torch.tensor([0.5, 0.7]))
        # fixed random code per device for the episode state (not trained: the state is an input)
        self.register_buffer("act_code", torch.randn(MAX_DEVICES, h) / np.sqrt(h))

    def gnn(self, h: torch.Tensor, edges: np.ndarray) -> torch.Tensor:
        ei = _sym(edges)
        for conv in self.convs:
            h = h + torch.relu(conv(h, ei))
        return self.norm(h)

    def edge_scores(self, h: torch.Tensor, edges: np.ndarray, ef: torch.Tensor) -> torch.Tensor:
        u, v = h[torch.from_numpy(edges[0])], h[torch.from_numpy(edges[1])]
        prior = (ef - self.edge_center) @ self.edge_prior
        return torch.sigmoid(self.edge_mlp(torch.cat([u + v, u * v, ef], dim=1)).squeeze(-1) + prior)

    def forward(self, p: Problem, pc: ParseConfig, state: torch.Tensor | None = None,
                mode: str = "greedy", rounds: list[Round] | None = None,
                generator: torch.Generator | None = None, stochastic: bool = True) -> Output:
        """Group the graph and score devices per group.

        ``mode`` is ``greedy`` (keep dominant edges above the threshold) or ``sample`` (keep each
        with probability = its score, using ``generator``). With ``rounds`` the recorded grouping is
        replayed instead (for the policy update). ``stochastic`` says whether the keep/drop
        decisions count as actions (their log probability is then returned).
        """
        n = p.n_nodes
        h = self.inp(p.x)
        if state is not None:
            h = h + self.state_proj(state)
        edges, size, copy, cost = p.edges, p.size, p.edge_copy, p.cost_for_edges
        group_of_node = np.arange(n, dtype=np.int64)
        min_groups = pc.min_groups or 2 * p.n_devices
        max_size = max(pc.max_group_frac * float(size.sum()), float(size.max()) if n else 0.0)
        logp = torch.zeros(())
        ent = torch.zeros(())
        recs: list[Round] = []
        first_scores = None
        count_decisions = stochastic and (mode == "sample" or rounds is not None)
        for r in range(pc.max_rounds):
            if edges.shape[1] == 0 or n <= min_groups or (rounds is not None and r >= len(rounds)):
                break
            h = self.gnn(h, edges)
            s = self.edge_scores(h, edges, p.edge_features(edges, copy, cost))
            if r == 0:
                first_scores = s
            if rounds is not None:
                rec = rounds[r]
            else:
                s_np = s.detach().numpy().astype(np.float64)
                dom = dominant_edges(n, edges, s_np)
                sd = s.detach()[torch.from_numpy(dom)]
                if mode == "sample":
                    keep = torch.bernoulli(sd, generator=generator).bool().numpy()
                else:
                    keep = (sd > pc.threshold).numpy()
                assign, accepted = merge(n, edges, dom[keep], s_np, size, min_groups, max_size)
                rec = Round(edges, dom, keep, assign, accepted)
            recs.append(rec)
            if count_decisions and rec.dom.size:
                sd = s[torch.from_numpy(rec.dom)].clamp(1e-6, 1 - 1e-6)
                kp = torch.from_numpy(rec.keep)
                logp = logp + torch.where(kp, sd.log(), (1 - sd).log()).sum()
                ent = ent - (sd * sd.log() + (1 - sd) * (1 - sd).log()).sum()
            n_next = int(rec.assign.max()) + 1
            if n_next == n:
                break
            idx = torch.from_numpy(rec.assign)
            pooled = self.pool_norm(_mean_by(idx, h, n_next) + self.pool_post(_mean_by(idx, self.pool_pre(h), n_next)))
            gate = torch.ones(n_next)
            if rec.accepted.size:
                acc = torch.from_numpy(rec.accepted)
                gi = idx[torch.from_numpy(edges[0][rec.accepted])]
                gmean = _mean_by(gi, s[acc], n_next)
                has = torch.zeros(n_next, dtype=torch.bool)
                has[gi] = True
                gate = torch.where(has, gmean, gate)
            h = pooled * gate[:, None]
            size = np.bincount(rec.assign, weights=size, minlength=n_next)
            edges, copy = quotient(edges, copy, rec.assign)
            cost = _sum_by(rec.assign, cost, n_next)
            group_of_node = rec.assign[group_of_node]
            n = n_next
        if edges.shape[1]:
            h = self.gnn(h, edges)
        allowed, pair = p.group_tables(group_of_node, n)
        d = p.n_devices
        dev = self.dev_emb(torch.arange(d))
        inp = torch.cat([h[:, None, :].expand(n, d, -1), dev[None].expand(n, d, -1), torch.from_numpy(pair)],
                        dim=-1)
        logits = self.head(inp).squeeze(-1) - self.prior * inp[..., -N_PAIR_FEATURES]
        logits = logits.masked_fill(~torch.from_numpy(allowed), _MASKED)
        return Output(logits, h, group_of_node, recs, logp, ent, first_scores)

    def state_delta(self, out: Output, actions: torch.Tensor) -> torch.Tensor:
        """Per-node state increment after a placement: (group embedding + device code) of its group."""
        g = out.z.detach() + self.act_code[actions]
        return g[torch.from_numpy(out.group_of_node)]
