"""The ``features`` pass and its kernels, on hand-built graphs with known values."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest

from hdp.base.errors import InputError
from hdp.ir import serde
from hdp.ir.build import graph_from_edges
from hdp.ir.types import Module, Op
from hdp.ir.verify import verify
from hdp.passes import _kernels as K
from hdp.passes.features import OP_TYPES, VOCAB_VERSION, FeaturesPass, feature_matrix
from hdp.zoo.synth import random_graph


def make_graph(types, edges, shapes=None):
    shapes = shapes or [((1, 8),)] * len(types)
    ops = [Op(f"op{i}", t, s, ("f32",) * len(s)) for i, (t, s) in enumerate(zip(types, shapes))]
    src = [u for u, _ in edges]
    dst = [v for _, v in edges]
    return graph_from_edges(ops, src, dst)


def chain(n, t="Relu"):
    return make_graph([t] * n, [(i, i + 1) for i in range(n - 1)])


def grid(w):
    """A w x w grid DAG (edges right and down), ops in row-major (topological) order."""
    edges = []
    for i in range(w):
        for j in range(w):
            u = i * w + j
            if j + 1 < w:
                edges.append((u, u + 1))
            if i + 1 < w:
                edges.append((u, u + w))
    return make_graph(["Add"] * (w * w), edges)


def features(g, **opts):
    p = FeaturesPass(**opts)
    m = p.run(Module(graph=g))
    verify(m)
    return m.features.matrix.numpy(), list(m.features.legend)


def col(mat, legend, name):
    return mat[:, legend.index(name)]


def fractal(g, radius=4, ball_cap=512):
    uptr, uidx = K.undirected_csr(g.indptr.numpy(), g.indices.numpy())
    return K.fractal_dimension(uptr, uidx, radius, ball_cap)


# --------------------------------------------------------------------------- fractal dimension


def test_fractal_dimension_of_a_path_is_one_inside():
    f = fractal(chain(41), radius=4)
    assert np.allclose(f[4:-4], 1.0, atol=1e-12)
    assert np.all(f[:4] < 1.0) and np.all(f[-4:] < 1.0)  # the ends see fewer nodes


def test_fractal_dimension_of_a_grid_is_about_two():
    w = 21
    f = fractal(grid(w), radius=6)
    centre = (w // 2) * w + w // 2
    assert 1.85 < f[centre] < 2.05
    assert f[centre] > fractal(chain(41), radius=6)[20] + 0.8


def test_fractal_dimension_isolated_and_tiny_components():
    g = make_graph(["Relu"] * 3, [(1, 2)])  # op 0 isolated, 1-2 a pair
    f = fractal(g)
    assert f[0] == 0.0
    # the pair is exhausted at radius 1: N = 2 at every radius, a flat (zero) slope
    assert f[1] == 0.0 and f[2] == 0.0


def test_ball_cap_limits_growth_near_hubs():
    leaves = 100
    g = make_graph(["Relu"] * (leaves + 1), [(0, i) for i in range(1, leaves + 1)])
    uptr, uidx = K.undirected_csr(g.indptr.numpy(), g.indices.numpy())
    sizes, done = K.ball_sizes(uptr, uidx, 3, 10)
    assert sizes[0, 1] == leaves + 1 and done[0] == 3  # hub: radius 1 always complete, then exhausted
    assert done[1] == 1 and sizes[1, 1] == 2  # a leaf gives up at radius 2 (101 > cap)
    f = K.fractal_dimension(uptr, uidx, 3, 10)
    assert f[1] == pytest.approx(math.log(2) / math.log(3))
    sizes, done = K.ball_sizes(uptr, uidx, 3, 10_000)
    assert done[1] == 3 and sizes[1, 2] == leaves + 1


def test_ball_sizes_match_networkx_bfs():
    g = random_graph(300, seed=3)
    uptr, uidx = K.undirected_csr(g.indptr.numpy(), g.indices.numpy())
    sizes, done = K.ball_sizes(uptr, uidx, 3, 10**9)
    ug = nx.Graph()
    ug.add_nodes_from(range(g.n_ops))
    ug.add_edges_from(zip(np.repeat(np.arange(g.n_ops), np.diff(g.indptr.numpy())), g.indices.numpy()))
    assert np.all(done == 3)
    for s in range(0, g.n_ops, 7):
        dist = nx.single_source_shortest_path_length(ug, s, cutoff=3)
        counts = np.bincount(list(dist.values()), minlength=4).cumsum()
        assert list(sizes[s]) == list(counts)


# --------------------------------------------------------------------------- depths, degrees, position


def test_depths_of_a_diamond_with_a_long_side():
    # 0 -> 1 -> 2 -> 4 and 0 -> 3 -> 4
    g = make_graph(["Relu"] * 5, [(0, 1), (1, 2), (2, 4), (0, 3), (3, 4)])
    depth, rdepth = K.longest_path_depths(g.indptr.numpy(), g.indices.numpy())
    assert list(depth) == [0, 1, 2, 1, 3]
    assert list(rdepth) == [3, 2, 1, 1, 0]
    mat, legend = features(g)
    assert np.allclose(col(mat, legend, "depth"), np.array([0, 1, 2, 1, 3]) / 3)
    assert np.allclose(col(mat, legend, "rdepth"), np.array([3, 2, 1, 1, 0]) / 3)


def test_degree_one_hot_is_capped():
    g = make_graph(["Split"] + ["Relu"] * 10, [(0, i) for i in range(1, 11)])
    mat, legend = features(g, degree_cap=4)
    assert "outdeg:4+" in legend and "outdeg:5" not in legend
    assert col(mat, legend, "outdeg:4+")[0] == 1 and col(mat, legend, "indeg:0")[0] == 1
    assert np.all(col(mat, legend, "indeg:1")[1:] == 1) and np.all(col(mat, legend, "outdeg:0")[1:] == 1)
    for d in ("indeg", "outdeg"):
        block = mat[:, [i for i, c in enumerate(legend) if c.startswith(d + ":")]]
        assert np.all(block.sum(axis=1) == 1)


def test_parallel_edges_count_as_inputs():
    g = make_graph(["Relu", "Add"], [(0, 1), (0, 1)])  # Add(x, x)
    mat, legend = features(g)
    assert col(mat, legend, "indeg:2")[1] == 1 and col(mat, legend, "outdeg:2")[0] == 1


def test_position_columns():
    g = chain(3)
    mat, legend = features(g, pos_dims=4)
    assert np.allclose(col(mat, legend, "pos"), [0, 0.5, 1])
    i = np.arange(3)
    assert np.allclose(col(mat, legend, "pos_sin:0"), np.sin(i))
    assert np.allclose(col(mat, legend, "pos_sin:1"), np.cos(i))
    assert np.allclose(col(mat, legend, "pos_sin:2"), np.sin(i / 100.0))
    assert np.allclose(col(mat, legend, "pos_sin:3"), np.cos(i / 100.0))


# --------------------------------------------------------------------------- type and shape


def test_op_type_one_hot_and_other():
    g = make_graph(["Convolution", "MyCustomOp", "Constant"], [(0, 1)])
    mat, legend = features(g)
    types = mat[:, : len(OP_TYPES) + 1]
    assert np.all(types.sum(axis=1) == 1)
    assert col(mat, legend, "type:Convolution")[0] == 1
    assert col(mat, legend, "type:other")[1] == 1
    assert col(mat, legend, "type:Constant")[2] == 1
    assert legend[: len(OP_TYPES) + 1] == [f"type:{t}" for t in OP_TYPES] + ["type:other"]


def test_shape_columns_log_scaled_padded_and_folded():
    shapes = [((1, 3, 224, 224), (7,)), ((),), (), ((2, 3, 4, 5, 6, 7, 8, 9),)]
    g = make_graph(["Relu", "Constant", "Result", "Reshape"], [], shapes=shapes)
    mat, legend = features(g, max_rank=6)
    s = mat[:, [legend.index(f"shape:{i}") for i in range(6)]]
    assert np.allclose(s[0], np.log1p([1, 3, 224, 224, 0, 0]))  # first output only
    assert np.all(s[1] == 0) and np.all(s[2] == 0)  # scalar, and an op without outputs
    assert np.allclose(s[3], np.log1p([2 * 3 * 4, 5, 6, 7, 8, 9]))


def test_vocabulary_is_fixed_and_unique():
    assert VOCAB_VERSION == 1
    assert len(set(OP_TYPES)) == len(OP_TYPES) and list(OP_TYPES) == sorted(OP_TYPES)
    for t in ("Convolution", "MatMul", "Constant", "Parameter", "Result", "ScaledDotProductAttention"):
        assert t in OP_TYPES


# --------------------------------------------------------------------------- options and edge cases


def test_ablation_switches_drop_their_columns():
    g = chain(4)
    full = FeaturesPass().legend()
    assert {"fractal", "depth", "rdepth", "pos", "shape:0", "type:Relu", "indeg:1"} <= set(full)
    no_struct = FeaturesPass(structural=False).legend()
    assert not any(c.startswith(("indeg", "outdeg")) or c in ("fractal", "depth", "rdepth") for c in no_struct)
    only_pos = FeaturesPass(op_type=False, shape=False, structural=False).legend()
    assert only_pos == ("pos",) + tuple(f"pos_sin:{i}" for i in range(8))
    mat, legend = features(g, op_type=False, shape=False, structural=False)
    assert mat.shape == (4, len(only_pos))


@pytest.mark.parametrize("opts", [
    {"op_type": False, "shape": False, "structural": False, "position": False},
    {"radius": 0}, {"max_rank": 0}, {"degree_cap": 0}, {"pos_dims": 3}, {"ball_cap": 0},
])
def test_bad_options_are_input_errors(opts):
    with pytest.raises(InputError):
        FeaturesPass(**opts).run(Module(graph=chain(2)))


def test_empty_graph():
    mat, legend = features(make_graph([], []))
    assert mat.shape == (0, len(legend))


def test_single_op():
    mat, legend = features(make_graph(["Parameter"], []))
    assert mat.shape == (1, len(legend))
    assert col(mat, legend, "fractal")[0] == 0 and col(mat, legend, "depth")[0] == 0
    assert col(mat, legend, "pos")[0] == 0 and col(mat, legend, "indeg:0")[0] == 1
    assert col(mat, legend, "type:Parameter")[0] == 1


def test_disconnected_components():
    # a 3-chain and a separate pair: depths normalise by the longest path of the whole graph
    g = make_graph(["Relu"] * 5, [(0, 1), (1, 2), (3, 4)])
    mat, legend = features(g)
    assert np.allclose(col(mat, legend, "depth"), [0, 0.5, 1, 0, 0.5])
    assert np.allclose(col(mat, legend, "rdepth"), [1, 0.5, 0, 0.5, 0])
    assert np.all(np.isfinite(mat))


def test_only_constants_and_one_op():
    g = make_graph(["Constant", "Constant", "Constant", "Add"], [(0, 3), (1, 3), (2, 3)])
    mat, legend = features(g)
    assert np.all(col(mat, legend, "type:Constant")[:3] == 1)
    assert col(mat, legend, "indeg:3")[3] == 1
    assert np.allclose(col(mat, legend, "depth"), [0, 0, 0, 1])
    # the star's centre: N(1) = 4, exhausted after that
    f = col(mat, legend, "fractal")
    assert np.all(np.isfinite(f)) and f[3] == 0.0


def test_pass_is_deterministic_and_does_not_mutate_input():
    m = Module(graph=random_graph(200, seed=1))
    before = serde.encode(m)
    a = FeaturesPass().run(m)
    b = FeaturesPass().run(m)
    assert serde.encode(m) == before
    assert serde.encode(a) == serde.encode(b)
    assert a.features.vocab_version == VOCAB_VERSION
    assert a.features.matrix.numpy().dtype == np.float32


def test_feature_matrix_matches_pass_output():
    g = random_graph(120, seed=2)
    p = FeaturesPass(radius=3)
    assert np.array_equal(feature_matrix(g, p), p.run(Module(graph=g)).features.matrix.numpy())


# --------------------------------------------------------------------------- CLI


def test_cli_features_on_a_lowered_model(tmp_path):
    import openvino as ov
    import openvino.opset13 as ops
    from click.testing import CliRunner

    from hdp.cli.main import main

    x = ops.parameter([1, 16], np.float32, name="x")
    w = ops.constant(np.ones((16, 8), np.float32))
    y = ops.softmax(ops.relu(ops.matmul(x, w, False, False)), 1)
    ov.save_model(ov.Model([y.output(0)], [x], "tiny"), str(tmp_path / "m.xml"))
    run = CliRunner().invoke
    assert run(main, ["lower", str(tmp_path / "m.xml"), "-o", str(tmp_path / "in.hdp")]).exit_code == 0
    r = run(main, ["pass", "features", str(tmp_path / "in.hdp"), "-o", str(tmp_path / "out.hdp"),
                   "--set", "position=false", "--set", "radius=2", "--no-cache"])
    assert r.exit_code == 0, r.output
    m = serde.load(tmp_path / "out.hdp")
    legend = list(m.features.legend)
    assert "pos" not in legend and "fractal" in legend
    mat = m.features.matrix.numpy()
    types = [op.type for op in m.graph.ops]
    assert mat[types.index("MatMul"), legend.index("type:MatMul")] == 1
    assert mat[types.index("MatMul"), legend.index("shape:1")] == np.float32(np.log1p(8))
    r = run(main, ["show", str(tmp_path / "out.hdp")])
    assert r.exit_code == 0 and f"features: {len(legend)} columns (vocabulary v1)" in r.output
    assert "type[" in r.output and "fractal" in r.output
    r = run(main, ["pass", "features", str(tmp_path / "in.hdp"), "-o", str(tmp_path / "bad.hdp"),
                   "--set", "pos_dims=3", "--no-cache"])
    assert r.exit_code == 2 and "pos_dims=3 must be even" in r.output
