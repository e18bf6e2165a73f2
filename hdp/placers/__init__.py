"""Placers: the methods behind ``--method``. Each maps a Module to groups and a device per group.

A placer is a function ``place(module, request) -> Placed`` registered under a name; ``--method
name:arg`` passes ``arg`` in the request. The ``partition`` pass dispatches to them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from hdp.errors import InputError


@dataclass(frozen=True)
class PlaceRequest:
    devices: tuple[str, ...]  # the target's devices, in priority order
    arg: str = ""  # the part after ':' in --method name:arg
    seed: int = 0
    target: object = None  # hdp.runtime.target.Target
    options: dict = field(default_factory=dict)  # method-specific options from the partition pass


@dataclass
class Placed:
    group_of: np.ndarray  # int32, n_ops
    group_device: np.ndarray  # int16, n_groups
    info: dict = field(default_factory=dict)

    @classmethod
    def per_op(cls, device_of, info=None) -> "Placed":
        """Every op its own group."""
        d = np.asarray(device_of, np.int16)
        return cls(np.arange(d.shape[0], dtype=np.int32), d, dict(info or {}))


_PLACERS: dict[str, tuple[Callable, tuple[str, ...], str]] = {}


def placer(name: str, requires: tuple[str, ...] = (), doc: str = ""):
    """Register ``fn(module, request) -> Placed`` as method ``name``; ``requires`` lists the Module
    stages it needs beyond the graph (``support``, ``costs``, ``features``, ``coarse``)."""

    def deco(fn):
        _PLACERS[name] = (fn, requires, doc or (fn.__doc__ or "").strip().splitlines()[0])
        return fn

    return deco


def placers() -> dict[str, tuple[Callable, tuple[str, ...], str]]:
    import hdp.placers.all  # noqa: F401

    return dict(_PLACERS)


def parse_method(method: str) -> tuple[str, str]:
    name, _, arg = method.partition(":")
    known = placers()
    if name not in known:
        raise InputError(f"unknown method '{method}' (known: {', '.join(sorted(known))})")
    return name, arg


def device_index(devices: tuple[str, ...], name: str) -> int:
    if name not in devices:
        raise InputError(f"unknown device '{name}' (target devices: {', '.join(devices)})")
    return devices.index(name)
