"""The learned placer's options, each declared once with its bounds (no torch here).

:class:`TrainConfig` is what :func:`hdp.learn.trainer.train` takes; the placers that train
(``hsdag``, ``auto``) expose some of its fields as their own options, under the same name and
with the same declaration (:data:`PLACER_OPTIONS`; each method keeps its own defaults), and
build the config with :meth:`TrainConfig.of`. :class:`ModelConfig` (the architecture, stored in
checkpoints) and :class:`ParseConfig` (the parser's guards) live here too, so a checkpoint's
architecture is checked against the same bounds as a training run's.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from hdp.base.validation import AtLeastOne, Count, Finite, NonNegative, Positive, Share, recheck

Episodes = AtLeastOne
#: The REINFORCE and PPO updates compare the placements of one batch (advantage = reward minus
#: the batch mean, over the batch's spread); one placement gives no update (``_update`` skips it).
Samples = Annotated[int, Meta(ge=2, le=4096, description="a policy update compares the placements of one batch")]
LearningRate = Annotated[float, Meta(gt=0, lt=1)]
#: Beyond these bounds building the network exhausts memory.
Hidden = Annotated[int, Meta(ge=1, le=4096)]
GcnLayers = Annotated[int, Meta(ge=0, le=32)]
Width = Annotated[int, Meta(ge=0, le=100_000)]
#: Seconds, times and counts of the run's budget: >= 0, inf meaning no limit (nan refused).
Budget = Annotated[float, Meta(ge=0)]
Algo = Literal["reinforce", "ppo"]
RewardShape = Literal["neglog", "inverse"]
Baseline = Literal["batch", "ema"]

#: The TrainConfig fields a placer may expose as options of the same name and declaration.
PLACER_OPTIONS = ("episodes", "samples", "lr", "hidden", "algo", "entropy", "reward_shape", "baseline", "patience")


class ModelConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Architecture; stored in checkpoints so a reused policy is rebuilt identically."""

    in_width: Annotated[int, Meta(ge=1, le=100_000)]  # node input width (module features + cost features)
    feature_width: Width  # module feature width alone
    cost_aware: bool = True
    hidden: Hidden = 128
    gcn_layers: GcnLayers = 2
    device_dim: Annotated[int, Meta(ge=1, le=1024)] = 16
    cost_prior: Finite = 1.0  # initial weight of the cost prior in the logits
    edge_prior: Finite = 4.0  # initial weight of the preference-similarity prior in the edge scores


class ParseConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The parser's guards (not weights; see :mod:`hdp.learn.model`)."""

    threshold: Annotated[float, Meta(ge=0, le=1)] = 0.5
    min_groups: Count = 0  # 0: 2 x the number of devices
    max_group_frac: Annotated[float, Meta(gt=0, le=1)] = 0.25
    max_rounds: AtLeastOne = 4


class TrainConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Training options; defaults are the paper's (25 episodes × 20 placements, lr 1e-3, hidden 128)."""

    episodes: Episodes = 25
    samples: Samples = 20
    lr: LearningRate = 1e-3
    hidden: Hidden = 128
    gcn_layers: GcnLayers = 2
    cost_prior: Finite = 1.0  # initial weight of the cost prior in the logits (cost-aware policies)
    edge_prior: Finite = 4.0  # initial weight of the same-preference prior in the edge scores
    algo: Algo = "reinforce"
    reward_shape: RewardShape = "neglog"  # neglog: -log(latency) | inverse: 1/latency
    baseline: Baseline = "batch"
    ema: Annotated[float, Meta(ge=0, le=1)] = 0.9
    entropy: NonNegative = 0.01
    ppo_epochs: AtLeastOne = 4
    ppo_clip: Annotated[float, Meta(gt=0, lt=1)] = 0.2
    stochastic_parse: bool = True
    parse: ParseConfig = ParseConfig()
    max_placements: Count = 0  # 0: no cap on evaluator calls
    max_seconds: Budget = 0.0  # 0: no wall-clock cap
    deadline: Budget | None = None  # time.monotonic() by which training ends (None: none)
    reserve_evals: Budget = 0.0  # the caller compares up to this many evaluated placements afterwards
    eval_estimate: Budget = 0.0  # seconds one evaluation is expected to take before any has run
    patience: Count = 0  # stop after this many placements in a row without a gain (0: never)
    min_gain: Share = 0.0  # relative improvement of the best that counts as a gain
    top: Count = 5  # distinct best placements listed in the result
    seed: int = 0
    warm_steps: Count = 300
    greedy_each: bool = True  # evaluate the policy's most likely placement after every update
    #: a failed placement is rewarded as this × the worst latency seen (>= 1: never better than it)
    fail_factor: Annotated[float, Meta(ge=1, le=1e6)] = 2.0
    progress: bool | None = None  # None: tqdm shows a bar only on a terminal
    report_dir: str | None = None
    checkpoint: str | None = None  # written after every episode and at the end
    policy: str | None = None  # checkpoint to resume (same problem) or reuse (another problem)

    @classmethod
    def of(cls, options, **run) -> TrainConfig:
        """The config of a placer's ``options``: the :data:`PLACER_OPTIONS` they declare, and the
        fields of one run (deadline, seed, ...) as ``run``."""
        own = {f.name for f in msgspec.structs.fields(options)}
        return cls(**{k: getattr(options, k) for k in PLACER_OPTIONS if k in own}, **run)

    @classmethod
    def budget_of(cls, options) -> TrainConfig:
        """The run budget (placements, seconds, deadline), ``top`` and ``seed`` of a learner's
        ``options`` (placeto, rnn-placer), every other training field left at its default."""
        return cls(**{k: getattr(options, k) for k in ("max_placements", "max_seconds", "deadline", "top", "seed")})

    def check(self) -> TrainConfig:
        """InputError naming the first field outside its declared bounds."""
        return recheck(self, lambda path, what: f"training option '{path}' {what}")


class PlacetoConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Placeto (Addanki et al., NeurIPS 2019), as :mod:`hdp.learn.placeto` runs it. Defaults are the
    published ones where the authors' code states them (lr 1e-3 decayed linearly to 1e-4, 8 rounds
    of message passing, a baseline over the last 10 episodes); ``hidden`` is ours (not published)."""

    episodes: Episodes = 1000  # upper bound; the budgets usually end training first
    lr: LearningRate = 1e-3
    lr_end: LearningRate = 1e-4
    rounds: Annotated[int, Meta(ge=0, le=64)] = 8  # message-passing rounds, each direction
    baseline_episodes: AtLeastOne = 10
    hidden: Hidden = 32
    step_reward: bool = True  # per-step rewards (the paper's credit assignment); False: final only
    max_placements: Count = 0
    max_seconds: Budget = 0.0
    deadline: Budget | None = None
    top: Count = 5
    seed: int = 0

    def check(self) -> PlacetoConfig:
        return recheck(self, lambda path, what: f"placeto option '{path}' {what}")


class RnnConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The hierarchical planner (Mirhoseini et al., ICLR 2018), as :mod:`hdp.learn.rnn` runs it.
    Defaults are the published ones (TensorFlow's ``hierarchical_controller_hparams``) but one:
    groups = min(256, 20 x devices), a feed-forward grouper of width 64, a bidirectional LSTM
    encoder and an attentional LSTM decoder of width 512, Adam decayed x0.95 every 50 steps from
    step 400, gradients clipped to norm 1, the placer's logits through ``tanh_constant · tanh``,
    Gaussian noise on the grouper's and the placer's logits for the first 750 steps, reward
    sqrt(runtime) against a moving-average baseline (decay 0.9), one placement per update.

    The learning rate is 1e-3, not the published 0.1: at 0.1 the policy collapses onto placements
    it has seen within a hundred updates and never reached the optimum of a 16-op chain whose fast
    device alternates by blocks (tests/test_learned_baselines.py): 0 of 18 runs within 1,000
    evaluations (seeds, 4 and 40 groups, widths 64 and 512), each stopping after 11-104 distinct
    placements; at 1e-3 with 4 groups 6 of 6 seeds reach it in 315-596 evaluations at width 64, 5
    of 6 in 237-377 at width 512."""

    steps: AtLeastOne = 100_000  # policy updates, upper bound; the budgets usually end training first
    groups: Count = 0  # 0: min(256, 20 x devices), and no more than the graph's nodes
    hidden: Hidden = 512
    grouping_hidden: Hidden = 64
    lr: LearningRate = 1e-3  # published: 0.1 (see the class docstring)
    lr_decay: Annotated[float, Meta(gt=0, le=1)] = 0.95
    decay_steps: AtLeastOne = 50
    start_decay_step: Count = 400
    grad_bound: Positive = 1.0
    tanh_constant: NonNegative = 1.0  # 0: logits unclipped
    logits_noise: NonNegative = 0.5  # grouper and placer logit noise, x the logits' RMS, for the first noise_steps
    noise_steps: Count = 750
    baseline_decay: Annotated[float, Meta(ge=0, lt=1)] = 0.9
    max_placements: Count = 0
    max_seconds: Budget = 0.0
    deadline: Budget | None = None
    top: Count = 5
    seed: int = 0

    def check(self) -> RnnConfig:
        return recheck(self, lambda path, what: f"rnn-placer option '{path}' {what}")
