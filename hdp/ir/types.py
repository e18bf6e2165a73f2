"""The typed DAG IR that flows between hdp's passes.

Everything here is a frozen msgspec Struct, so a Module is a value: it can be encoded, hashed,
cached and compared. Ops are stored in topological order and an op's id is its index. Edges are
CSR arrays over successors: the edges leaving op ``i`` are ``indptr[i]:indptr[i+1]``; each edge is one
(producer output port -> consumer input port) connection, so a tensor with three consumers gives three
edges, all with the producer's output bytes.

Stages are optional fields of :class:`Module`; a pass adds the field it provides and leaves the rest.
"""

from __future__ import annotations

import msgspec
import numpy as np

#: Bump when the encoded layout of Module changes; readers refuse newer schemas.
#: 2: ``Graph.fragile`` and ``Graph.ties`` (schema-1 modules decode with neither).
#: 3: ``Costs.op_se`` and ``Costs.device_class`` (older modules decode with neither).
#: 4: ``Graph.live_shapes`` (older modules decode without it).
#: 5: ``Costs.edge_time`` (cost graphs: a transfer time per edge instead of the link model).
SCHEMA_VERSION = 5

#: Module fields that passes may require or provide, in pipeline order.
STAGES = ("graph", "features", "support", "costs", "coarse", "partition", "placement")


class Array(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A numpy array as plain data: dtype string, shape and raw little-endian bytes."""

    dtype: str
    shape: tuple[int, ...]
    data: bytes

    @classmethod
    def of(cls, a, dtype=None) -> "Array":
        arr = np.ascontiguousarray(a, dtype=dtype)
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        return cls(arr.dtype.str, tuple(int(s) for s in arr.shape), arr.tobytes())

    def numpy(self) -> np.ndarray:
        """A read-only view of the data (no copy)."""
        return np.frombuffer(self.data, dtype=np.dtype(self.dtype)).reshape(self.shape)

    def __len__(self) -> int:
        return self.shape[0] if self.shape else 1


class Op(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """One operation of the source model.

    ``name`` is unique within the graph (the frontend renames duplicates and keeps a map);
    ``out_shapes``/``out_types`` describe each output port; ``flops`` is an estimate of the
    arithmetic work (multiply-add = 2 FLOPs); ``weight_bytes`` the bytes of constant data the op
    owns (a Constant's payload).
    """

    name: str
    type: str
    out_shapes: tuple[tuple[int, ...], ...]
    out_types: tuple[str, ...]
    flops: float = 0.0
    weight_bytes: int = 0


class Graph(msgspec.Struct, frozen=True, gc=False):
    """The op DAG in topological order with CSR successor edges."""

    ops: tuple[Op, ...]
    indptr: Array  # int64, len(ops) + 1
    indices: Array  # int32, consumer op id per edge
    edge_bytes: Array  # int64, bytes of the tensor carried by the edge
    src_port: Array  # int32, producer output port
    dst_port: Array  # int32, consumer input port
    renamed: dict[str, str] = {}  # unique name -> original friendly name, for renamed ops
    #: bool per op: in the model as written (the user's, dynamic shapes kept), some output of the
    #: op has a less static shape when integer tensor values are unknown (a Reshape to a computed
    #: shape...). A device plugin infers such shapes without those values, so HETERO cannot hand
    #: the tensor to another subgraph (see hdp.placement). None: no op is.
    fragile: Array | None = None
    #: int32 (k, 2): pairs of ops that must run on one device (ReadValue and Assign of one
    #: state variable). None: no pair.
    ties: Array | None = None
    #: bool per op: a ShapeOf whose input has a dynamic shape in the model as written, so at run
    #: time it reads that input (the written model folds every other ShapeOf into a Constant). For
    #: HETERO such a ShapeOf is an edge from the input's producer. None: no op is.
    live_shapes: Array | None = None

    @property
    def n_ops(self) -> int:
        return len(self.ops)

    @property
    def n_edges(self) -> int:
        return self.indices.shape[0]


class Features(msgspec.Struct, frozen=True, gc=False):
    """Per-op feature matrix (float32, n_ops x len(legend)) and its column legend."""

    matrix: Array
    legend: tuple[str, ...]
    vocab_version: int


class Support(msgspec.Struct, frozen=True, gc=False):
    """Which device can run which op: bool matrix n_ops x len(devices), plus each device's
    fallback priority (lower runs first under hetero-auto)."""

    devices: tuple[str, ...]
    mask: Array  # bool, n_ops x n_devices


class Costs(msgspec.Struct, frozen=True, gc=False):
    """Per-op per-device execution time in seconds (inf where unsupported) and the link model.

    ``kind`` is ``measured`` or ``modeled``; transfer of ``b`` bytes across a device boundary
    costs ``link_latency + b / link_bandwidth`` seconds; every HETERO subgraph costs
    ``subgraph_overhead`` seconds.
    """

    devices: tuple[str, ...]
    op_time: Array  # float64, n_ops x n_devices
    kind: tuple[str, ...]  # per device: "measured" | "modeled"
    link_latency: float
    link_bandwidth: float
    subgraph_overhead: float
    measured_total: tuple[float, ...] = ()  # per device, when measured: whole-model latency
    #: float64 n_ops x n_devices: standard error of each op_time (0 where modeled); None: not known
    #: (profiled before schema 3, or profiled without denoising)
    op_se: Array | None = None
    #: per device: what it is (plugin, precision it runs, threads, ...; "modeled" for modeled ones);
    #: devices with the same class share one profile (:mod:`hdp.runtime.costs.denoise`). Empty: not known
    device_class: tuple[str, ...] = ()
    #: float64 per edge (graph CSR order): seconds one copy of the edge's tensor costs across a
    #: device boundary, replacing ``link_latency + bytes / link_bandwidth`` (cost graphs give it per
    #: tensor, :mod:`hdp.costgraph`); None: the link model prices every copy
    edge_time: Array | None = None
    #: float64 n_ops x n_devices: bytes each op moves to and from its device's memory where modeled
    #: (0 where measured); None: not known. With ``dram_shares`` it prices devices of one DRAM running
    #: at once (:meth:`hdp.placement.simulate.Simulator.dram_seconds`)
    op_dram: Array | None = None
    #: devices that draw on one DRAM, with its bandwidth in bytes/s (a target's ``[[shares]]``
    #: resource = "memory" with a bandwidth)
    dram_shares: tuple[tuple[tuple[str, ...], float], ...] = ()


class Coarse(msgspec.Struct, frozen=True, gc=False):
    """A coarsened view: every op belongs to exactly one group; groups form a DAG."""

    group_of: Array  # int32, n_ops
    n_groups: int
    indptr: Array  # int64, n_groups + 1 (CSR over successor groups)
    indices: Array  # int32
    edge_bytes: Array  # int64, bytes crossing between the two groups (each tensor once per group pair)
    features: Array | None = None  # float32, n_groups x k: mean of members' features
    member_count: Array | None = None  # int32, n_groups
    cost: Array | None = None  # float64, n_groups x n_devices, summed member costs


class Partition(msgspec.Struct, frozen=True, gc=False):
    """A device per tie group of the placement problem (:mod:`hdp.placement`); ``group_of`` is the
    group each op shows (constant data: its first consumer's)."""

    method: str
    devices: tuple[str, ...]
    group_of: Array  # int32, n_ops
    group_device: Array  # int16, n_groups
    info: dict[str, str] = {}
    extra_ties: Array | None = None  # int32 (k, 2): op pairs tied beyond the graph's rules


class Placement(msgspec.Struct, frozen=True, gc=False):
    """The device of every op, as an index into ``devices``."""

    method: str
    devices: tuple[str, ...]
    device_of: Array  # int16, n_ops
    info: dict[str, str] = {}


class Module(msgspec.Struct, frozen=True, gc=False):
    """The unit every pass consumes and produces."""

    graph: Graph
    schema: int = SCHEMA_VERSION
    meta: dict[str, str] = {}
    features: Features | None = None
    support: Support | None = None
    costs: Costs | None = None
    coarse: Coarse | None = None
    partition: Partition | None = None
    placement: Placement | None = None

    def replace(self, **changes) -> "Module":
        """A copy with some fields changed (Modules are immutable)."""
        return msgspec.structs.replace(self, **changes)

    def stages(self) -> tuple[str, ...]:
        return tuple(s for s in STAGES if getattr(self, s) is not None)
