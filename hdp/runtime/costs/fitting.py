"""Modeled devices fitted to published figures, and checked against the ones left out.

A modeled device is a roofline (:func:`hdp.runtime.costs.profile.roofline`): an op takes
``max(flops / (peak[p] * efficiency[p]), bytes[p] / bandwidth) + op_overhead`` at precision ``p``.
Its peaks and bandwidth are published specifications; its **free parameters** are what the
specifications do not say: the efficiency at each precision published for it
(``precision_efficiency``), the per-op overhead, and what throughput mode gains
(``stream_efficiency``, :class:`~hdp.target.target.Device`). Each is fitted to the published
rows of the device (:mod:`hdp.target.published`) by least squares on the log of the ratio of
predicted to published time (``scipy.optimize.least_squares``, within the fields' bounds).

A row is predicted as hdp simulates the model on the device alone (every op on it): the sum of
the roofline over the model's ops plus the target's ``subgraph_overhead`` (one request's
submission); in throughput mode the same per inference with the streams' gain, so that
``1 / time`` is the frames per second. An LLM row is the model specialised for its phase (``--phase
prefill`` with the prompt's tokens for the first token, ``--phase decode`` after them for the
second) at the device's own precision, its INT4 weights counted as stored.

:func:`leave_one_model_out` is the check: for each model of a device, fit on the rows of the
others and predict its rows. A row of a precision (or a throughput row) no other model has
cannot be predicted that way; it is reported as such rather than guessed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np

from hdp.base.errors import InputError
from hdp.ir.openvino_frontend import lower
from hdp.ir.shapes import parse_request
from hdp.ir.types import Graph
from hdp.runtime.costs.profile import op_bytes, zero_cost_ops
from hdp.target.published import TOKEN_MODES, PublishedRow
from hdp.target.target import Device

#: Bounds of the free parameters (those of the Device fields they fill).
EFFICIENCY = (1e-4, 1.0)
OVERHEAD = (1e-8, 1e-2)
STREAMS = (1.0, 64.0)


@dataclass(frozen=True)
class ModelTerms:
    """What the roofline needs of one specialised model: flops of the costed ops and their bytes at
    each precision (computed when first asked)."""

    graph: Graph
    flops: np.ndarray
    costed: np.ndarray  # bool per op

    @classmethod
    def of(cls, graph: Graph) -> "ModelTerms":
        costed = ~zero_cost_ops(graph)
        return cls(graph, np.array([op.flops for op in graph.ops], np.float64)[costed], costed)

    def bytes_at(self, precision: str) -> np.ndarray:
        cache = self.__dict__.setdefault("_bytes", {})
        if precision not in cache:
            cache[precision] = op_bytes(self.graph, precision)[self.costed]
        return cache[precision]

    @property
    def n_ops(self) -> int:
        return int(self.costed.sum())


def row_key(row: PublishedRow) -> tuple[str, str | None, int | None]:
    """``(model, phase, seq_len)`` of the specialisation a row is predicted on."""
    if row.mode == "first-token":
        return row.model, "prefill", row.seq_len
    if row.mode == "second-token":
        return row.model, "decode", row.seq_len
    return row.model, None, None


def lower_row(xml: str | Path, row: PublishedRow) -> ModelTerms:
    """The :class:`ModelTerms` of ``row``'s model read from ``xml``, specialised for the row."""
    _, phase, seq_len = row_key(row)
    request = parse_request(seq_len=seq_len, phase=phase) if phase else None
    return ModelTerms.of(lower(xml, request).graph)


def row_precision(row: PublishedRow, device: Device) -> str:
    """The roofline precision of a row: its own, or the device's for INT4 weights (computed in it)."""
    return device.precision if row.precision == "int4" else row.precision


def predict(row: PublishedRow, terms: ModelTerms, device: Device, request_overhead: float = 0.0) -> float:
    """Seconds of ``row`` on ``device`` (per inference in throughput mode; see the module docstring)."""
    p = row_precision(row, device)
    if p not in device.peak_flops:
        raise InputError(f"{row.device}: no peak_flops entry for precision '{p}' (published row line {row.line})")
    streams = row.mode == "throughput"
    gain = device.stream_efficiency if streams else 1.0
    peak = device.peak_flops[p] * min(device.efficiency_at(p) * gain, 1.0)
    t = np.maximum(terms.flops / peak, terms.bytes_at(p) / device.memory_bandwidth) + device.op_overhead / gain
    return float(t.sum()) + request_overhead / gain


@dataclass(frozen=True)
class Fitted:
    """A device with its free parameters fitted to ``rows``, and what the fit could not see."""

    device: Device
    rows: tuple[PublishedRow, ...]
    #: precisions fitted; ``streams``: whether throughput rows fitted the streams' efficiency
    precisions: tuple[str, ...]
    streams: bool

    def covers(self, row: PublishedRow) -> str | None:
        """None if the fit can predict ``row``, else why not."""
        p = row_precision(row, self.device)
        if p not in self.precisions:
            return f"no other row at {p}"
        if row.mode == "throughput" and not self.streams:
            return "no other throughput row"
        return None


def fit_device(device: Device, rows, terms: dict, request_overhead: float = 0.0) -> Fitted:
    """``device`` with ``precision_efficiency`` (and ``efficiency`` at its own precision),
    ``op_overhead`` and ``stream_efficiency`` fitted to ``rows`` (``terms[row_key(row)]`` their
    models). A parameter no row informs keeps the device's value."""
    rows = tuple(rows)
    if not rows:
        raise InputError(f"device {device.name}: no published rows to fit")
    precisions = tuple(sorted({row_precision(r, device) for r in rows}))
    streams = any(r.mode == "throughput" for r in rows) and any(r.mode != "throughput" for r in rows)
    names = [f"eff:{p}" for p in precisions] + ["overhead"] + (["streams"] if streams else [])
    lo = [math.log(EFFICIENCY[0])] * len(precisions) + [math.log(OVERHEAD[0])] + ([0.0] if streams else [])
    hi = [math.log(EFFICIENCY[1])] * len(precisions) + [math.log(OVERHEAD[1])] + ([math.log(STREAMS[1])] if streams else [])
    x0 = [math.log(min(max(device.efficiency_at(p), EFFICIENCY[0]), EFFICIENCY[1])) for p in precisions]
    x0 += [math.log(min(max(device.op_overhead, 1e-6), OVERHEAD[1]))]
    x0 += [math.log(min(max(device.stream_efficiency, 1.5), STREAMS[1]))] if streams else []
    x0 = np.clip(x0, np.array(lo) + 1e-9, np.array(hi) - 1e-9)
    published = np.log([r.seconds for r in rows])

    def with_params(x) -> Device:
        v = dict(zip(names, np.exp(x)))
        eff = {p: float(min(v[f"eff:{p}"], 1.0)) for p in precisions}
        own = eff.get(device.precision, device.efficiency)
        return msgspec.structs.replace(device, precision_efficiency={**device.precision_efficiency, **eff},
                                       efficiency=own, op_overhead=float(v["overhead"]),
                                       stream_efficiency=float(v.get("streams", device.stream_efficiency)))

    def residuals(x):
        d = with_params(x)
        return np.log([predict(r, terms[row_key(r)], d, request_overhead) for r in rows]) - published

    from scipy.optimize import least_squares

    best = None
    for start in (x0, np.array(lo) * 0.5 + np.array(hi) * 0.5):  # two starts: the fit is not convex
        res = least_squares(residuals, np.clip(start, np.array(lo) + 1e-9, np.array(hi) - 1e-9),
                            bounds=(lo, hi), method="trf", x_scale="jac")
        if best is None or res.cost < best.cost:
            best = res
    return Fitted(with_params(best.x), rows, precisions, streams)


def fitted_rows(rows) -> list[PublishedRow]:
    """The rows a device is fitted to: its latency and throughput rows, or, for a device published
    only with LLM rows, those (an LLM row of a device with others is a check, not a fit)."""
    rows = list(rows)
    plain = [r for r in rows if r.mode not in TOKEN_MODES]
    return plain or rows


@dataclass(frozen=True)
class Check:
    """One published row against its prediction."""

    row: PublishedRow
    predicted: float | None  # seconds (None: not predictable, ``why``)
    how: str  # "leave-one-model-out", "fitted on all" (LLM rows checked against the fit), ...
    why: str = ""

    @property
    def error(self) -> float | None:
        """Predicted / published - 1 in the row's unit (ms, or frames per second)."""
        if self.predicted is None:
            return None
        return self.predicted / self.row.seconds - 1.0 if self.row.unit == "ms" else self.row.seconds / self.predicted - 1.0

    @property
    def predicted_value(self) -> float | None:
        """The prediction in the row's own unit (ms or fps)."""
        if self.predicted is None:
            return None
        return self.predicted * 1e3 if self.row.unit == "ms" else 1.0 / self.predicted


def leave_one_model_out(device: Device, rows, terms: dict, request_overhead: float = 0.0) -> list[Check]:
    """For each model of the device's fitted rows, the fit on the others' rows predicting its rows;
    the device's other rows (an LLM's, checked rather than fitted) predicted by the fit on all
    fitted rows."""
    rows = list(rows)
    fit = fitted_rows(rows)
    models = sorted({r.model for r in fit})
    out: list[Check] = []
    for m in models:
        rest = [r for r in fit if r.model != m]
        mine = [r for r in fit if r.model == m]
        if not rest:
            out += [Check(r, None, "leave-one-model-out", "no other model") for r in mine]
            continue
        f = fit_device(device, rest, terms, request_overhead)
        for r in mine:
            why = f.covers(r)
            out.append(Check(r, None if why else predict(r, terms[row_key(r)], f.device, request_overhead),
                             "leave-one-model-out", why or ""))
    others = [r for r in rows if r not in fit]
    if others:
        f = fit_device(device, fit, terms, request_overhead)
        out += [Check(r, predict(r, terms[row_key(r)], f.device, request_overhead), "fit on the others' rows")
                for r in others]
    return out
