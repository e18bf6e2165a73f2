"""Policy checkpoints of :func:`hdp.learn.trainer.train`: written after every episode, read back
checked field by field, so a resumed run continues exactly where an uninterrupted one would be.

A checkpoint is a ``torch.save`` of tensors and plain values (loadable with ``weights_only=True``):
the weights, the optimizer, the generator state, the run's counters, best-so-far, curve and
evaluation cache. :class:`Checkpoint` declares each field's bounds; what depends on the problem
(tensor shapes, the optimizer's state, the placements' size) is checked when it is loaded into a
run (:func:`load_weights`, :func:`load_run_state`).
"""

from __future__ import annotations

import math
import os
from typing import Annotated, Literal

import msgspec
import numpy as np
import torch
from msgspec import Meta

from hdp.base.errors import InputError
from hdp.base.fsutil import atomic_path
from hdp.base.validation import Count, Finite, NonNegative, Positive, convert
from hdp.learn.config import ModelConfig, ParseConfig, Width
from hdp.learn.graph import LearnGraph
from hdp.learn.model import HsdagNet

CHECKPOINT_VERSION = 1


def save_checkpoint(path: str, model: HsdagNet, opt, gen: torch.Generator, run, pc: ParseConfig) -> None:
    """Write the state of ``run`` (a :class:`hdp.learn.trainer.TrainingRun`) atomically to ``path``."""
    lg = run.p.graph
    ck = {
        "version": CHECKPOINT_VERSION,
        "model_config": msgspec.structs.asdict(model.cfg),
        "parse_config": msgspec.structs.asdict(pc),
        "state_dict": model.state_dict(),
        "optimizer": opt.state_dict(),
        "generator": gen.get_state(),
        "digest": lg.digest,
        "devices": list(lg.devices),
        "feature_width": lg.feature_width,
        "cost_aware": lg.cost_aware,
        "episode": run.episode,
        "samples": run.samples,
        "evaluations": run.evaluations,
        "failures": run.failures,
        "worst": run.worst,
        "ema": run.ema,
        "best_latency": run.best_latency,
        "best_source": run.best_source,
        "best_device_of": None if run.best_device_of is None else torch.from_numpy(run.best_device_of.copy()),
        "curve": run.curve,
        "cache": {k.hex(): v for k, v in run.cache.items()},
    }
    with atomic_path(path) as tmp:  # unique temporary: several runs may share one checkpoint path
        torch.save(ck, tmp)


class CurveRow(msgspec.Struct, forbid_unknown_fields=True):
    """One row of the training curve (``curve.csv``)."""

    index: Count
    episode: Count
    source: str
    latency_s: Positive | Literal[""]  # "": the evaluation failed
    failed: Literal[0, 1]
    best_s: Positive | Literal[""]  # "": nothing succeeded yet
    seconds: NonNegative


class Checkpoint(msgspec.Struct, kw_only=True):
    """A checkpoint as :func:`train` writes it, each field with its bounds (fields this hdp does
    not know are ignored). What depends on the problem (tensor shapes, the optimizer's state, the
    placements' size) is checked when it is loaded into a run."""

    version: Annotated[int, Meta(ge=1)]  # <= CHECKPOINT_VERSION: load_checkpoint says so first
    model_config: ModelConfig
    parse_config: ParseConfig
    state_dict: dict[str, torch.Tensor]
    optimizer: dict
    generator: torch.Tensor
    digest: str
    devices: list[str]
    feature_width: Width
    cost_aware: bool
    episode: Count
    samples: Count
    evaluations: Count
    failures: Count
    worst: NonNegative
    ema: Finite | None
    best_latency: Annotated[float, Meta(gt=0)]  # inf: nothing succeeded yet
    best_source: str
    best_device_of: torch.Tensor | None
    curve: list[CurveRow]
    #: evaluated placements: the hex of an int16 device per tie group -> latency (None: failed)
    cache: dict[Annotated[str, Meta(pattern="^(?:[0-9a-f]{4})*$")], Positive | None]

    def __post_init__(self) -> None:
        if self.generator.dtype != torch.uint8 or self.generator.dim() != 1:
            raise ValueError("generator: must be a 1-D uint8 tensor (a torch.Generator state)")
        bd = self.best_device_of
        if bd is not None and (bd.dim() != 1 or bd.dtype.is_floating_point or bd.dtype.is_complex
                               or bd.dtype == torch.bool):
            raise ValueError("best_device_of: must be None or a 1-D integer tensor")
        if bd is None and math.isfinite(self.best_latency):
            raise ValueError("best_device_of: is None but best_latency is set")


def load_checkpoint(path: str) -> Checkpoint:
    """Read a checkpoint written by :func:`train` and check it against :class:`Checkpoint`;
    InputError naming the file and the field when it is missing, unreadable or not a valid hdp
    policy checkpoint."""
    if os.path.isdir(path):
        raise InputError(f"policy checkpoint '{path}' is a directory")
    try:
        ck = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise InputError(f"policy checkpoint '{path}' does not exist") from None
    except Exception as e:  # noqa: BLE001  (torch raises many types for a bad file)
        raise InputError(f"'{path}' is not a readable hdp policy checkpoint ({type(e).__name__}: "
                         f"{str(e).strip().splitlines()[0] if str(e).strip() else ''})") from None
    if not isinstance(ck, dict) or "model_config" not in ck or "state_dict" not in ck:
        raise InputError(f"'{path}' is not an hdp policy checkpoint")
    v = ck.get("version")
    if isinstance(v, int) and v > CHECKPOINT_VERSION:
        raise InputError(f"policy checkpoint '{path}' has version {v}; this hdp reads up to {CHECKPOINT_VERSION}")
    return convert(ck, Checkpoint, lambda field, what: f"policy checkpoint '{path}': field '{field}' {what}")


def restore_config(ck: Checkpoint, path: str, lg: LearnGraph) -> ModelConfig:
    if ck.feature_width != lg.feature_width or ck.cost_aware != lg.cost_aware:
        raise InputError(
            f"policy '{path}' was trained on {ck.feature_width} features per op "
            f"(cost_aware={ck.cost_aware}); this model has {lg.feature_width} "
            f"(cost_aware={lg.cost_aware}): compute features with the same vocabulary, or train a new policy")
    cfg = ck.model_config
    if cfg.in_width != lg.x.shape[1] or cfg.feature_width != lg.feature_width or cfg.cost_aware != lg.cost_aware:
        raise InputError(f"policy checkpoint '{path}': field 'model_config' describes inputs of width "
                         f"{cfg.in_width} (features {cfg.feature_width}, cost_aware={cfg.cost_aware}); this "
                         f"model needs {lg.x.shape[1]} ({lg.feature_width}, cost_aware={lg.cost_aware})")
    return cfg


def load_weights(model: HsdagNet, ck: Checkpoint, path: str) -> None:
    """``model.load_state_dict`` after checking names, shapes and values of every tensor."""
    want = model.state_dict()
    got = ck.state_dict
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    if missing or extra:
        what = f"lacks '{missing[0]}'" if missing else f"has an unknown tensor '{extra[0]}'"
        raise InputError(f"policy checkpoint '{path}': field 'state_dict' {what}")
    for k, t in want.items():
        g = got[k]
        if tuple(g.shape) != tuple(t.shape) or g.dtype != t.dtype:
            raise InputError(f"policy checkpoint '{path}': state_dict['{k}'] has shape {tuple(g.shape)} "
                             f"({g.dtype}); the network needs {tuple(t.shape)} ({t.dtype})")
        if g.dtype.is_floating_point and not bool(torch.isfinite(g).all()):
            raise InputError(f"policy checkpoint '{path}': state_dict['{k}'] has NaN or infinite values")
    model.load_state_dict(got)


def load_run_state(ck: Checkpoint, path: str, model: HsdagNet, opt, gen: torch.Generator, run,
                    lg: LearnGraph) -> None:
    """Restore optimizer, generator and counters of a resumed ``run`` (a
    :class:`hdp.learn.trainer.TrainingRun`), each checked first."""
    fresh = [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]
    try:
        opt.load_state_dict(ck.optimizer)
    except (ValueError, KeyError, TypeError, RuntimeError, IndexError) as e:
        raise InputError(f"policy checkpoint '{path}': field 'optimizer' does not fit the network ({e})") from None
    for g, f in zip(opt.param_groups, fresh):  # hyperparameters come from this run, not the file
        g.update(f)
    for p in model.parameters():
        for name, t in opt.state.get(p, {}).items():
            if not isinstance(t, torch.Tensor) or (t.dim() and tuple(t.shape) != tuple(p.shape)) \
                    or (t.dtype.is_floating_point and not bool(torch.isfinite(t).all())):
                raise InputError(f"policy checkpoint '{path}': field 'optimizer' has an invalid '{name}' state")
    try:
        gen.set_state(ck.generator)
    except (RuntimeError, TypeError) as e:
        raise InputError(f"policy checkpoint '{path}': field 'generator' is not a generator state ({e})") from None
    bd = ck.best_device_of
    if bd is not None:
        bd = bd.numpy().astype(np.int64)
        if bd.shape != (lg.node_of_group.shape[0],) or (bd.size and (bd.min() < 0 or bd.max() >= lg.n_devices)):
            raise InputError(f"policy checkpoint '{path}': field 'best_device_of' does not fit this model "
                             f"({lg.node_of_group.shape[0]} groups, {lg.n_devices} devices)")
    width = 4 * lg.node_of_group.shape[0]  # hex of int16 per group
    if any(len(k) != width for k in ck.cache):
        raise InputError(f"policy checkpoint '{path}': field 'cache' holds placements of another size")
    run.episode, run.samples, run.evaluations = ck.episode, ck.samples, ck.evaluations
    run.failures, run.worst, run.ema = ck.failures, ck.worst, ck.ema
    run.best_latency, run.best_source = ck.best_latency, ck.best_source
    run.best_device_of = None if bd is None else bd.astype(np.int16)
    run.curve = [msgspec.structs.asdict(r) for r in ck.curve]
    run.cache = {bytes.fromhex(k): v for k, v in ck.cache.items()}
