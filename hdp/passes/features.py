"""``features``: a feature vector per op, after the HSDAG paper (x = T ‖ S ‖ Δin ‖ Δout ‖ D ‖ d_pos).

Column groups, in order (each can be switched off for ablations):

- ``op_type``: one-hot over :data:`OP_TYPES` (a fixed vocabulary, :data:`VOCAB_VERSION`), unknown
  types in ``type:other``.
- ``shape``: the first output's shape, ``log1p`` of each dim, left-aligned and zero-padded to
  ``max_rank`` (``shape:0`` is the first dim); a higher rank folds its leading dims into one product.
- ``structural``: in- and out-degree one-hot (edges, i.e. consumer inputs, counted; the last
  column ``indeg:<cap>+`` takes every degree >= ``degree_cap``), the node fractal dimension
  (``fractal``, see :func:`hdp.passes._kernels.fractal_dimension`), and ``depth`` / ``rdepth``: the
  longest path from an input and to an output, divided by the graph's longest path (so both are in
  [0, 1] and sum to 1 on a critical path).
- ``position``: ``pos`` = topological index / (n - 1) (ops are stored in topological order) and
  ``pos_sin:*``, the sinusoidal encoding of the raw index (sin/cos pairs, wavelengths
  2π·10000^(2j/pos_dims)).
"""

from __future__ import annotations

import math
from typing import Annotated

import numpy as np
from msgspec import Meta

from hdp.base.errors import InputError
from hdp.base.validation import MAX_COUNT
from hdp.ir.types import Array, Features, Graph, Module
from hdp.passes import _kernels as K
from hdp.passes.base import Pass

#: Bump when OP_TYPES changes (a model trained on one vocabulary needs the same columns).
VOCAB_VERSION = 1

#: OpenVINO op types (opset1..16 names) with their own one-hot column, in column order.
OP_TYPES: tuple[str, ...] = (
    "Abs", "Acos", "AdaptiveAvgPool", "AdaptiveMaxPool", "Add", "Asin", "Assign", "Atan", "AvgPool",
    "BatchNormInference", "BitwiseAnd", "BitwiseNot", "BitwiseOr", "BitwiseXor", "Broadcast",
    "Bucketize", "Ceiling", "Clamp", "Concat", "Constant", "Convert", "ConvertLike", "Convolution",
    "ConvolutionBackpropData", "Cos", "CumSum", "DepthToSpace", "DetectionOutput", "Divide", "Einsum",
    "Elu", "Equal", "Erf", "Exp", "FakeConvert", "FakeQuantize", "Floor", "FloorMod", "GRUCell",
    "GRUSequence", "Gather", "GatherElements", "GatherND", "Gelu", "Greater", "GreaterEqual",
    "GroupConvolution", "GroupConvolutionBackpropData", "GroupNormalization", "HSigmoid", "HSwish",
    "If", "Interpolate", "LRN", "LSTMCell", "LSTMSequence", "Less", "LessEqual", "Log", "LogSoftmax",
    "LogicalAnd", "LogicalNot", "LogicalOr", "LogicalXor", "Loop", "MVN", "MatMul", "MaxPool",
    "Maximum", "Minimum", "Mish", "Mod", "Multiply", "Negative", "NonMaxSuppression", "NonZero",
    "NormalizeL2", "NotEqual", "OneHot", "PRelu", "Pad", "Parameter", "Power", "PriorBox", "ROIAlign",
    "Range", "ReadValue", "ReduceL1", "ReduceL2", "ReduceLogicalAnd", "ReduceLogicalOr", "ReduceMax",
    "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "Relu", "Reshape", "Result", "Roll",
    "Round", "ScaledDotProductAttention", "ScatterElementsUpdate", "ScatterNDUpdate", "ScatterUpdate",
    "Select", "Selu", "ShapeOf", "ShuffleChannels", "Sigmoid", "Sign", "Sin", "Slice", "SoftPlus",
    "SoftSign", "Softmax", "SpaceToDepth", "Split", "Sqrt", "SquaredDifference", "Squeeze",
    "StridedSlice", "Subtract", "Swish", "Tan", "Tanh", "Tile", "TopK", "Transpose", "Unsqueeze",
    "VariadicSplit",
)
OTHER = "other"
_TYPE_INDEX = {t: i for i, t in enumerate(OP_TYPES)}
_SIN_BASE = 10000.0


class FeaturesPass(Pass, tag="features"):
    """Per-op features: op type, output shape, degrees, fractal dimension, depth, position."""

    op_type: bool = True
    shape: bool = True
    structural: bool = True  # degrees, fractal dimension, depths
    position: bool = True
    radius: Annotated[int, Meta(le=64)] = 4  # fractal dimension: largest BFS radius
    ball_cap: Annotated[int, Meta(le=MAX_COUNT)] = 512  # fractal dimension: stop growing a ball beyond this many nodes
    max_rank: Annotated[int, Meta(le=64)] = 6  # (the lower bounds: check())
    degree_cap: Annotated[int, Meta(le=1024)] = 8  # a column per degree up to it
    pos_dims: Annotated[int, Meta(le=1024)] = 8
    requires = ("graph",)
    provides = ("features",)

    def check(self) -> None:
        """Raise InputError for unusable options."""
        if not (self.op_type or self.shape or self.structural or self.position):
            raise InputError("every column group is switched off (op_type, shape, "
                             "structural, position)")
        for name, lo in (("radius", 1), ("ball_cap", 1), ("max_rank", 1), ("degree_cap", 1),
                         ("pos_dims", 0)):
            if getattr(self, name) < lo:
                raise InputError(f"{name}={getattr(self, name)} must be >= {lo}")
        if self.pos_dims % 2:
            raise InputError(f"pos_dims={self.pos_dims} must be even (sin/cos pairs)")

    def legend(self) -> tuple[str, ...]:
        """Column names, in matrix order."""
        cols: list[str] = []
        if self.op_type:
            cols += [f"type:{t}" for t in OP_TYPES] + [f"type:{OTHER}"]
        if self.shape:
            cols += [f"shape:{i}" for i in range(self.max_rank)]
        if self.structural:
            for d in ("indeg", "outdeg"):
                cols += [f"{d}:{i}" for i in range(self.degree_cap)] + [f"{d}:{self.degree_cap}+"]
            cols += ["fractal", "depth", "rdepth"]
        if self.position:
            cols += ["pos"] + [f"pos_sin:{i}" for i in range(self.pos_dims)]
        return tuple(cols)

    def run(self, module: Module) -> Module:
        self.check()
        mat = feature_matrix(module.graph, self)
        return module.replace(features=Features(matrix=Array.of(mat), legend=self.legend(),
                                                vocab_version=VOCAB_VERSION))


def feature_matrix(graph: Graph, p: FeaturesPass) -> np.ndarray:
    """The float32 n x len(p.legend()) matrix of ``graph`` for the options of ``p``."""
    n = graph.n_ops
    ncols = len(p.legend())
    mat = np.zeros((n, ncols), np.float32)
    if n == 0:
        return mat
    indptr = graph.indptr.numpy()
    indices = graph.indices.numpy()
    rows = np.arange(n)
    c = 0
    if p.op_type:
        other = len(OP_TYPES)
        codes = np.fromiter((_TYPE_INDEX.get(op.type, other) for op in graph.ops), np.int64, n)
        mat[rows, c + codes] = 1.0
        c += len(OP_TYPES) + 1
    if p.shape:
        mat[:, c:c + p.max_rank] = shape_columns(graph, p.max_rank)
        c += p.max_rank
    if p.structural:
        for deg in (np.bincount(indices, minlength=n), np.diff(indptr)):
            mat[rows, c + np.minimum(deg, p.degree_cap)] = 1.0
            c += p.degree_cap + 1
        uptr, uidx = K.undirected_csr(indptr, indices)
        mat[:, c] = K.fractal_dimension(uptr, uidx, p.radius, p.ball_cap)
        depth, rdepth = K.longest_path_depths(indptr, indices)
        longest = max(int(depth.max()), 1)
        mat[:, c + 1] = depth / longest
        mat[:, c + 2] = rdepth / longest
        c += 3
    if p.position:
        idx = np.arange(n, dtype=np.float64)
        mat[:, c] = idx / max(n - 1, 1)
        c += 1
        for j in range(p.pos_dims // 2):
            angle = idx / _SIN_BASE ** (2 * j / p.pos_dims)
            mat[:, c + 2 * j] = np.sin(angle)
            mat[:, c + 2 * j + 1] = np.cos(angle)
        c += p.pos_dims
    assert c == ncols
    return mat


def shape_columns(graph: Graph, max_rank: int) -> np.ndarray:
    """log1p of each op's first output dims, left-aligned, zero-padded to ``max_rank`` (float32);
    leading dims beyond ``max_rank`` are folded into the first column as their product."""
    table: dict[tuple[int, ...], int] = {}
    sid = np.fromiter((table.setdefault(op.out_shapes[0] if op.out_shapes else (), len(table))
                       for op in graph.ops), np.int64, graph.n_ops)
    uniq = np.zeros((len(table), max_rank), np.float64)
    for shape, i in table.items():
        dims = list(shape)
        if len(dims) > max_rank:
            cut = len(dims) - max_rank + 1
            dims = [math.prod(dims[:cut])] + dims[cut:]
        uniq[i, :len(dims)] = np.log1p(np.asarray(dims, np.float64))
    return uniq.astype(np.float32)[sid]
