"""hdp's own cost-graph format (``--format hdp``) and split format.

A workload is one JSON object::

    {"format": "hdp-costgraph", "version": 1,
     "devices": [{"name": "CPU", "free_comm": true},
                 {"name": "GPU", "count": 2, "memory": 16000000000}],
     "ops": [{"name": "a", "time": {"CPU": 2.0, "GPU": 0.5}, "bytes": 1000, "tie": "block1"},
             {"name": "b", "time": {"CPU": 1.0}}],
     "tensors": [{"producer": "a", "consumers": ["b"], "bytes": 4096, "time": 0.01}],
     "link": {"latency": 0.0, "bandwidth": 1e10}}

- ``devices``: a kind of device each; ``count`` identical devices of that kind (named ``GPU1``,
  ``GPU2``… when ``count`` > 1; no more are made than there are ops that can run on the kind, a
  device more could only stay empty), each holding at most ``memory`` bytes (absent: no cap);
  ``free_comm``: transfers cost this device nothing under the throughput objective's peer rule.
- ``ops``: ``name`` unique; ``time`` seconds per device kind, a kind left out (or ``null``) cannot
  run the op; ``bytes`` the memory the op takes on its device; ``tie``: ops with the same tie
  (string or integer) share a device; ``backward``: a training graph's backward op (tied to its
  forward op, it runs in the reverse order: contiguous splits follow the forward ops,
  :mod:`hdp.placement.ideals`).
- ``tensors``: one output of ``producer`` read by ``consumers``; ``time``, the seconds to move it to
  another device, or, without it, ``link.latency + bytes / link.bandwidth``.

The split hdp writes (``--split-format hdp``)::

    {"format": "hdp-split", "workload": PATH, "objective": "throughput", "value": 17.79,
     "devices": [{"name": "CPU", "ops": ["a"], "load": 2.0, "memory": 1000}, ...]}
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

import msgspec
import numpy as np
from msgspec import Meta

from hdp.base.errors import InputError
from hdp.base.validation import AtLeastOne, ByteAmount, NonNegative, convert
from hdp.costgraph.graph import MAX_DEVICES, CostGraph, usable_count

Time = Annotated[float, Meta(ge=0, le=1e9)]


class Device(msgspec.Struct, forbid_unknown_fields=True):
    name: Annotated[str, Meta(min_length=1)]
    count: AtLeastOne = 1  # more than the ops that can run there: only those many are made (usable_count)
    memory: ByteAmount | None = None
    free_comm: bool = False


class OpSpec(msgspec.Struct, forbid_unknown_fields=True):
    name: Annotated[str, Meta(min_length=1)]
    time: dict[str, Time | None]
    bytes: ByteAmount = 0.0
    tie: Union[str, int, None] = None
    backward: bool = False


class Tensor(msgspec.Struct, forbid_unknown_fields=True):
    producer: str
    consumers: list[str]
    bytes: ByteAmount = 0.0
    time: Time | None = None


class Link(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    latency: NonNegative = 0.0
    bandwidth: Annotated[float, Meta(gt=0)] = float("inf")


class Workload(msgspec.Struct, forbid_unknown_fields=True):
    format: Literal["hdp-costgraph"]
    devices: list[Device]
    ops: list[OpSpec]
    tensors: list[Tensor] = []
    link: Link = Link()
    version: Literal[1] = 1


def parse(source: str, data) -> CostGraph:
    """The :class:`CostGraph` of a parsed hdp workload; InputErrors name the file and the field."""
    w: Workload = convert(data, Workload, lambda path, what: f"{source}: {path} {what}")
    kinds: dict[str, Device] = {}
    for j, d in enumerate(w.devices):
        if d.name in kinds:
            raise InputError(f"{source}: devices[{j}].name: '{d.name}' appears twice")
        kinds[d.name] = d
    if not kinds:
        raise InputError(f"{source}: devices: no device")
    devices, dclass = [], []
    for j, d in enumerate(w.devices):
        runs = sum(1 for op in w.ops if op.time.get(d.name) is not None)
        count = usable_count(source, f"devices[{j}].count", d.count, runs, d.name)
        names = [d.name] if d.count == 1 else [f"{d.name}{i + 1}" for i in range(count)]
        devices += names
        dclass += [d.name] * len(names)
    if len(devices) > MAX_DEVICES:
        raise InputError(f"{source}: devices: {len(devices)} devices in all; a cost graph has at most {MAX_DEVICES}")
    if len(set(devices)) != len(devices):
        raise InputError(f"{source}: devices: the expanded names {devices} are not unique")
    index: dict[str, int] = {}
    for j, op in enumerate(w.ops):
        if op.name in index:
            raise InputError(f"{source}: ops[{j}].name: op '{op.name}' appears twice")
        index[op.name] = j
        bad = [k for k in op.time if k not in kinds]
        if bad:
            raise InputError(f"{source}: ops[{j}].time: '{bad[0]}' is not a device (devices: {', '.join(kinds)})")
    n = len(w.ops)
    if not n:
        raise InputError(f"{source}: ops: the workload has no op")
    kt = np.array([[np.inf if op.time.get(k) is None else op.time[k] for k in kinds] for op in w.ops])
    col = [list(kinds).index(c) for c in dclass]
    time = kt[:, col]
    t_op, t_port, t_bytes, t_time, t_ptr, t_cons = [], [], [], [], [0], []
    ports: dict[int, int] = {}
    for j, t in enumerate(w.tensors):
        if t.producer not in index:
            raise InputError(f"{source}: tensors[{j}].producer: op '{t.producer}' is not in ops")
        u = index[t.producer]
        cs = []
        for c in t.consumers:
            if c not in index:
                raise InputError(f"{source}: tensors[{j}].consumers: op '{c}' is not in ops")
            if c == t.producer:
                raise InputError(f"{source}: tensors[{j}]: op '{c}' consumes its own output")
            if index[c] not in cs:
                cs.append(index[c])
        if not cs:
            continue
        t_op.append(u)
        t_port.append(ports.get(u, 0))
        ports[u] = t_port[-1] + 1
        t_bytes.append(round(t.bytes))
        t_time.append(np.nan if t.time is None else t.time)
        t_cons += cs
        t_ptr.append(len(t_cons))
    classes: dict = {}
    for j, op in enumerate(w.ops):
        if op.tie is not None:
            classes.setdefault((type(op.tie).__name__, op.tie), []).append(j)
    cap = [np.inf if kinds[c].memory is None else kinds[c].memory for c in dclass]
    return CostGraph(
        source=source, fmt="hdp", names=[op.name for op in w.ops], labels=[op.name for op in w.ops],
        devices=tuple(devices), device_class=tuple(dclass), time=time,
        size=np.array([round(op.bytes) for op in w.ops], np.int64),
        t_op=np.array(t_op, np.int64), t_port=np.array(t_port, np.int64), t_bytes=np.array(t_bytes, np.int64),
        t_time=np.array(t_time, np.float64), t_ptr=np.array(t_ptr, np.int64), t_cons=np.array(t_cons, np.int64),
        ties=[c for c in classes.values() if len(c) > 1], capacity=np.array(cap, np.float64),
        free_comm=np.array([kinds[c].free_comm for c in dclass], bool),
        link_latency=w.link.latency, link_bandwidth=w.link.bandwidth,
        backward=np.array([op.backward for op in w.ops], bool))


def split_json(module, devices, op_device, objective: str, value: float, loads=None, memory=None) -> dict:
    """hdp's split of a device per op (see the module docstring)."""
    op_device = np.asarray(op_device)
    out = []
    for d, name in enumerate(devices):
        entry = {"name": name, "ops": [module.graph.ops[i].name for i in np.flatnonzero(op_device == d)]}
        if loads is not None:
            entry["load"] = float(loads[d])
        if memory is not None:
            entry["memory"] = float(memory[d])
        out.append(entry)
    return {"format": "hdp-split", "workload": module.meta.get("costgraph", ""), "objective": objective,
            "value": float(value), "devices": out}
