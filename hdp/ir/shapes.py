"""What a command asks a model to be specialised at: ``--input-shape NAME:D0,D1,...[:TYPE]``,
``--seq-len`` and ``--phase`` (:class:`ShapeRequest`), parsed once and bounded. The
specialisation itself (the static shapes hdp costs a model at) is :mod:`hdp.ir.specialise`."""

from __future__ import annotations

import msgspec

from hdp.base.errors import InputError
from hdp.base.validation import MAX_COUNT

PHASES = ("prefill", "decode")
#: The largest dimension ``--input-shape`` takes (an int64 holds it with room for a product check;
#: :mod:`hdp.ir.size_limits` refuses the tensors a plugin could not allocate).
MAX_DIM = 2**62
#: Element type names accepted as the ``:TYPE`` suffix of ``--input-shape``.
ELEMENT_TYPES = ("f64", "f32", "f16", "bf16", "i64", "i32", "i16", "i8", "u64", "u32", "u16", "u8",
                 "boolean")

class ShapeRequest(msgspec.Struct, frozen=True, kw_only=True):
    """The specialisation options of a command: ``--input-shape`` (input names or variable ids
    to shapes, and element types), ``--seq-len`` (None: the default, not given) and ``--phase``."""

    shapes: dict[str, tuple[int, ...]] = {}
    types: dict[str, str] = {}
    seq_len: int | None = None
    phase: str = "prefill"


def parse_input_shapes(specs: tuple[str, ...] | list[str]) -> dict[str, list[int]]:
    """``["x:1,3,224,224", "mask:1,128"]`` -> {"x": [1,3,224,224], ...}. Several may also be
    separated by ``;`` in one string. ``s:`` is a scalar; a ``:TYPE`` suffix is dropped here
    (see :func:`parse_request`)."""
    return {k: list(v) for k, v in _parse_specs(specs)[0].items()}


def _parse_specs(specs) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
    shapes: dict[str, tuple[int, ...]] = {}
    types: dict[str, str] = {}
    for spec in specs:
        for part in filter(None, (s.strip() for s in spec.split(";"))):
            body, et = part, ""
            head, sep, last = part.rpartition(":")
            if sep and last.strip().lower() in ELEMENT_TYPES + ("bool",):
                body, et = head, ("boolean" if last.strip().lower() == "bool" else last.strip().lower())
            name, sep, dims = body.rpartition(":")
            if not sep or not name:
                raise InputError(f"--input-shape '{part}': expected NAME:D0,D1,...[:TYPE] "
                                 f"(e.g. x:1,3,224,224 or ids:1,128:i64; NAME: for a scalar)")
            try:
                shape = tuple(int(d) for d in dims.replace("x", ",").split(",") if d.strip())
            except ValueError:
                raise InputError(f"--input-shape '{part}': dimensions must be integers") from None
            if any(d < 0 for d in shape):
                raise InputError(f"--input-shape '{part}': dimensions must be non-negative integers")
            big = next((k for k, d in enumerate(shape) if d > MAX_DIM), None)
            if big is not None:
                raise InputError(f"--input-shape '{part}': dimension {big} must be at most 2^62, got {shape[big]}")
            shapes[name] = shape
            if et:
                types[name] = et
    return shapes, types


def parse_request(specs=(), seq_len: int | None = None, phase: str | None = None) -> ShapeRequest:
    """A :class:`ShapeRequest` from the command-line options."""
    shapes, types = _parse_specs(specs)
    if seq_len is not None and not 1 <= seq_len <= MAX_COUNT:
        raise InputError(f"--seq-len {seq_len}: must be an integer in [1, {MAX_COUNT}]")
    phase = phase or "prefill"
    if phase not in PHASES:
        raise InputError(f"--phase {phase}: expected one of {', '.join(PHASES)}")
    return ShapeRequest(shapes=shapes, types=types, seq_len=seq_len, phase=phase)


def as_request(shapes) -> ShapeRequest:
    """Accept a ShapeRequest, a ``{name: shape}`` dict (older callers) or None."""
    if shapes is None:
        return ShapeRequest()
    if isinstance(shapes, ShapeRequest):
        return shapes
    return ShapeRequest(shapes={k: tuple(int(d) for d in v) for k, v in dict(shapes).items()})


def format_input_shapes(shapes: dict[str, list[int]]) -> str:
    """The inverse of :func:`parse_input_shapes`. Scalar inputs are left out: they are static
    already, and ``NAME:`` would not parse back."""
    return ";".join(f"{k}:{','.join(map(str, v))}" for k, v in sorted(shapes.items()) if v)
