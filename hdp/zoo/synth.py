"""Synthetic DAGs that look like neural-network graphs, for tests and benchmarks.

:func:`random_graph` strings random *blocks* together, each a small template of OpenVINO ops:
conv + bias + relu, a weight-decompressed linear layer (Constant -> Convert -> Multiply -> MatMul),
a residual MLP, inception-style branches, attention (every attention block reads one shared mask
Parameter, so the mask is a hub with thousands of consumers in a large graph), a long skip
connection with a constant shared by two consumers, a shape subgraph and a swish. Edges are built
with numpy per template (no per-op Python loop); only the final ``Op`` objects are made one by one,
about a second per million ops.
"""

from __future__ import annotations

import math

import numpy as np

from hdp.ir.build import graph_from_edges
from hdp.ir.types import Graph, Module, Op

IN, HUB, SKIP = -1, -2, -3  # template inputs: previous block's output, the mask, an earlier block

# (type, shape, element type) of every kind of op the templates use
_KINDS = {
    "act": ("Relu", (1, 128, 768), "f32"),
    "w": ("Constant", (768, 768), "f32"),
    "w8": ("Constant", (768, 768), "i8"),
    "b": ("Constant", (768,), "f32"),
    "s": ("Constant", (), "f32"),
    "idx": ("Constant", (1,), "i64"),
    "cw": ("Constant", (64, 64, 3, 3), "f32"),
    "cb": ("Constant", (1, 64, 1, 1), "f32"),
    "fmap": ("Relu", (1, 64, 56, 56), "f32"),
    "fmap3": ("Concat", (1, 192, 56, 56), "f32"),
    "att": ("Softmax", (1, 12, 128, 128), "f32"),
    "shape": ("ShapeOf", (3,), "i64"),
}

# name: (relative frequency, ops as (type, kind, inputs)); the last op is the block's output
_TEMPLATES = {
    "conv": (0.15, [
        ("Constant", "cw", ()), ("Convolution", "fmap", (IN, 0)), ("Constant", "cb", ()),
        ("Add", "fmap", (1, 2)), ("Relu", "fmap", (3,))]),
    "linear_int8": (0.20, [
        ("Constant", "w8", ()), ("Convert", "w", (0,)), ("Constant", "b", ()),
        ("Multiply", "w", (1, 2)), ("MatMul", "act", (IN, 3)), ("Constant", "b", ()),
        ("Add", "act", (4, 5))]),
    "mlp": (0.15, [
        ("Constant", "w", ()), ("MatMul", "act", (IN, 0)), ("Gelu", "act", (1,)),
        ("Constant", "w", ()), ("MatMul", "act", (2, 3)), ("Add", "act", (IN, 4))]),
    "inception": (0.10, [
        ("Constant", "cw", ()), ("Convolution", "fmap", (IN, 0)), ("Constant", "cw", ()),
        ("Convolution", "fmap", (IN, 2)), ("Relu", "fmap", (3,)), ("Constant", "cw", ()),
        ("Convolution", "fmap", (4, 5)), ("MaxPool", "fmap", (IN,)),
        ("Concat", "fmap3", (1, 6, 7))]),
    "attention": (0.15, [
        ("Constant", "idx", ()), ("MVN", "act", (IN, 0)), ("Constant", "w", ()),
        ("MatMul", "act", (1, 2)), ("Constant", "w", ()), ("MatMul", "act", (1, 4)),
        ("Constant", "w", ()), ("MatMul", "act", (1, 6)), ("MatMul", "att", (3, 5)),
        ("Add", "att", (8, HUB)), ("Softmax", "att", (9,)), ("MatMul", "act", (10, 7)),
        ("Add", "act", (IN, 11))]),
    "skip": (0.10, [
        ("Constant", "s", ()), ("Multiply", "act", (IN, 0)), ("Multiply", "act", (SKIP, 0)),
        ("Add", "act", (1, 2))]),
    "shape": (0.05, [
        ("ShapeOf", "shape", (IN,)), ("Constant", "idx", ()), ("Constant", "idx", ()),
        ("Gather", "shape", (0, 1, 2)), ("Reshape", "act", (IN, 3))]),
    "swish": (0.10, [("Sigmoid", "act", (IN,)), ("Multiply", "act", (IN, 0))]),
}

_ITEMSIZE = {"f32": 4, "i8": 1, "i64": 8}


def _flops(t: str, shape: tuple[int, ...]) -> float:
    numel = math.prod(shape)
    if t == "MatMul":
        return 2.0 * numel * 768
    if t == "Convolution":
        return 2.0 * numel * 64 * 9
    return 0.0 if t in ("Constant", "Parameter", "Result", "ShapeOf") else float(numel)


def _tables():
    """Flat per-template-op arrays: op type, shape, element type, flops, output bytes."""
    names = list(_TEMPLATES)
    probs = np.array([_TEMPLATES[t][0] for t in names])
    sizes = np.array([len(_TEMPLATES[t][1]) for t in names])
    kinds: list[tuple[str, tuple[int, ...], str]] = []
    for t in names:
        for op_type, kind, _ in _TEMPLATES[t][1]:
            kinds.append((op_type, _KINDS[kind][1], _KINDS[kind][2]))
    return names, probs / probs.sum(), sizes, kinds


def random_graph(n_ops: int, seed: int = 0, skip_max: int = 8) -> Graph:
    """A random NN-like DAG with exactly ``n_ops`` ops, in topological order.

    Op 0 is the input Parameter, op 1 the attention-mask Parameter, the last op a Result; blocks
    fill the rest (the last block is cut to fit, which can leave an unused Constant). ``skip``
    blocks reach back 2..``skip_max`` blocks. Same ``n_ops`` and ``seed``, same graph.
    """
    if n_ops < 0:
        raise ValueError("n_ops must be >= 0")
    if n_ops < 3:
        ops = [Op("input", "Parameter", ((1, 128, 768),), ("f32",)),
               Op("output", "Result", ((1, 128, 768),), ("f32",))][:n_ops]
        e = [0] if n_ops == 2 else []
        return graph_from_edges(ops, e, [1] * len(e), [128 * 768 * 4] * len(e))
    rng = np.random.default_rng(seed)
    names, probs, sizes, kinds = _tables()
    body = n_ops - 3  # ops between the two Parameters and the Result
    mean = float((probs * sizes).sum())
    tid = rng.choice(len(names), size=int(body / mean * 1.1) + 8, p=probs)
    while sizes[tid].sum() < body:
        tid = np.concatenate([tid, rng.choice(len(names), size=tid.shape[0] // 2 + 8, p=probs)])
    blen = sizes[tid]
    nb = int(np.searchsorted(np.cumsum(blen), body) + 1)
    tid, blen = tid[:nb], blen[:nb]
    starts = 2 + np.concatenate([[0], np.cumsum(blen)[:-1]])
    outs = starts + blen - 1
    ins = np.concatenate([[0], outs[:-1]])
    back = np.arange(nb) - rng.integers(2, skip_max + 1, size=nb)
    skip_src = np.where(back >= 0, outs[np.maximum(back, 0)], 0)

    src_l, dst_l, port_l = [], [], []
    for t, name in enumerate(names):
        blocks = np.nonzero(tid == t)[0]
        if blocks.size == 0:
            continue
        for j, (_, _, inputs) in enumerate(_TEMPLATES[name][1]):
            for port, s in enumerate(inputs):
                if s == IN:
                    src = ins[blocks]
                elif s == HUB:
                    src = np.ones(blocks.size, np.int64)
                elif s == SKIP:
                    src = skip_src[blocks]
                else:
                    src = starts[blocks] + s
                src_l.append(src)
                dst_l.append(starts[blocks] + j)
                port_l.append(np.full(blocks.size, port))
    src = np.concatenate(src_l)
    dst = np.concatenate(dst_l)
    dport = np.concatenate(port_l)

    # per-op row of ``table`` (the two Parameters, then the flat template ops), cut to n_ops - 1
    table = [("Parameter", (1, 128, 768), "f32"), ("Parameter", (1, 1, 1, 128), "f32")] + kinds
    tstart = 2 + np.concatenate([[0], np.cumsum(sizes)[:-1]])
    within = np.arange(int(blen.sum())) - np.repeat(starts - 2, blen)
    kind = np.concatenate([[0, 1], tstart[np.repeat(tid, blen)] + within])[: n_ops - 1]
    keep = dst < n_ops - 1
    src, dst, dport = src[keep], dst[keep], dport[keep]
    last = n_ops - 2  # the Result reads the last op that is not a Constant
    while last > 1 and table[kind[last]][0] == "Constant":
        last -= 1
    src = np.concatenate([src, [last]])
    dst = np.concatenate([dst, [n_ops - 1]])
    dport = np.concatenate([dport, [0]])
    out_bytes = np.array([math.prod(s) * _ITEMSIZE[d] for _, s, d in table], np.int64)
    ops = [_make_op(i, table[c]) for i, c in enumerate(kind.tolist())]
    last_kind = table[kind[last]]
    ops.append(Op(f"Result_{n_ops - 1}", "Result", (last_kind[1],), (last_kind[2],)))
    edge_bytes = out_bytes[kind[src]]
    return graph_from_edges(ops, src, dst, edge_bytes, None, dport)


def _make_op(i: int, kind: tuple[str, tuple[int, ...], str]) -> Op:
    t, shape, dtype = kind
    wbytes = math.prod(shape) * _ITEMSIZE[dtype] if t == "Constant" else 0
    return Op(f"{t}_{i}", t, (shape,), (dtype,), _flops(t, shape), wbytes)


def random_module(n_ops: int, seed: int = 0) -> Module:
    """:func:`random_graph` wrapped in a Module."""
    return Module(graph=random_graph(n_ops, seed), meta={"source": f"synth:{n_ops}:{seed}"})
