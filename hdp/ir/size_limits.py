"""Tensor size limits: a specialisation whose inputs, states or op outputs a plugin could not
allocate is refused with the input or op named, before any device is asked about it."""

from __future__ import annotations

import math
import os
from pathlib import Path

from hdp.base.cache import parse_size
from hdp.base.errors import InputError
from hdp.ir.specialise import Specialisation, ov_type
from hdp.ir.types import Module


def tensor_limit() -> int:
    """The largest tensor, in bytes, hdp accepts in a specialisation: a quarter of this host's
    memory (the smaller of the physical memory and a cgroup limit). Profiling holds a copy of
    every input and output per device at once, and a plugin asked about a larger tensor ends in
    ``std::bad_alloc`` or the kernel's out-of-memory killer. ``HDP_MAX_TENSOR_BYTES`` overrides it."""
    env = os.environ.get("HDP_MAX_TENSOR_BYTES", "")
    if env:
        try:
            return parse_size(env)
        except ValueError as e:
            raise InputError(f"HDP_MAX_TENSOR_BYTES={env!r}: {e} (a size such as 4G)") from None
    return host_memory() // 4


def host_memory() -> int:
    """Bytes of memory this process may use: physical memory, or a smaller cgroup limit."""
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError):
        mem = 1 << 40
    for f in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            mem = min(mem, int(Path(f).read_text().split()[0]))
        except (OSError, ValueError, IndexError):
            continue
    return mem


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.1f} MiB"


_TYPE_SIZES: dict[str, float] = {}


def _type_size(name: str) -> float:
    if name not in _TYPE_SIZES:
        try:
            t = ov_type(name)
            _TYPE_SIZES[name] = t.bitwidth / 8 if hasattr(t, "bitwidth") else t.size
        except (AttributeError, RuntimeError, TypeError):
            _TYPE_SIZES[name] = 1
    return _TYPE_SIZES[name]


def _too_big(what: str, shape, type_name: str, limit: int) -> str | None:
    nbytes = int(math.prod(shape) * _type_size(type_name)) if shape else 0
    if nbytes <= limit:
        return None
    k = max(range(len(shape)), key=lambda i: shape[i])
    return (f"{what} has shape [{','.join(map(str, shape))}] (dimension {k} is {shape[k]}): one {type_name} tensor "
            f"of {_gib(nbytes)}, over hdp's limit of {_gib(limit)} per tensor (a quarter of this host's memory; "
            f"HDP_MAX_TENSOR_BYTES overrides it)")


def check_input_sizes(spec: Specialisation, xml) -> None:
    """InputError naming the input (or state) and its largest dimension when one tensor of the
    specialisation is larger than :func:`tensor_limit`."""
    limit = tensor_limit()
    for i in spec.inputs:
        why = _too_big(f"input '{i.name}'", i.shape, i.type, limit)
        if why:
            raise InputError(f"{xml}: {why}")
    for st in spec.state:
        why = _too_big(f"state '{st.variable}'", st.shape, st.type, limit)
        if why:
            raise InputError(f"{xml}: {why}; give a smaller state shape with --input-shape or --seq-len")


def check_tensor_sizes(module: Module, xml, spec: Specialisation) -> None:
    """InputError naming the op when one output of the specialised model is larger than
    :func:`tensor_limit` (the inputs fit, but an op makes something much larger of them)."""
    limit = tensor_limit()
    for op in module.graph.ops:
        for shape, t in zip(op.out_shapes, op.out_types):
            why = _too_big(f"op '{op.name}' ({op.type}) at inputs {spec.input_shapes()}", shape, t, limit)
            if why:
                raise InputError(f"{xml}: {why}")
