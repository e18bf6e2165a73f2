"""The placement core: op roles, tie groups, the contracted graph and the problem's allowed mask.

Small graphs built with openvino.opset13 (lowered by the frontend) or by hand; a property test on
random DAGs with random ties checks the contracted graph against networkx.
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from placement_helpers import cone_of, make_module, problem, random_types_and_edges

from hdp.base.errors import InputError
from hdp.placement.structure import CONE, PLACED, REPLICATED, build_structure


def by_name(m, values) -> dict:
    return {op.name: v for op, v in zip(m.graph.ops, np.asarray(values).tolist())}


# --- roles -------------------------------------------------------------------------------------

def decompression_and_shape_model():
    """x -> MatMul(x, dequantised W) -> Reshape(to a shape computed from ShapeOf) -> Result, with
    W = (Convert(Constant u8) - zero point) * scale."""
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter([2, 8], np.float32, name="x")
    wq = ops.constant(np.arange(32, dtype=np.uint8).reshape(8, 4), name="wq")
    sub = ops.subtract(ops.convert(wq, "f32", name="cvt"), ops.constant(np.float32(3), name="zp"), name="sub")
    w = ops.multiply(sub, ops.constant(np.full((1, 4), 0.5, np.float32), name="scale"), name="scaled")
    mm = ops.matmul(x, w, False, False, name="mm")
    sh = ops.shape_of(mm, name="shape")
    g = ops.gather(sh, ops.constant(np.array([0], np.int64), name="idx"), ops.constant(np.int64(0), name="ax"),
                   name="g")
    cat = ops.concat([g, ops.constant(np.array([2, 2], np.int64), name="tail")], 0, name="cat")
    rs = ops.reshape(mm, cat, False, name="rs")
    return ov.Model([ops.result(ops.relu(rs, name="act"), name="y")], [x], "decomp")


def test_decompression_and_shape_chains_are_constant_data():
    from hdp.ir.openvino_frontend import lower_model

    m = lower_model(decompression_and_shape_model())
    st_ = build_structure(m.graph)
    role = by_name(m, st_.role)
    cone = {"wq", "cvt", "zp", "sub", "scale", "scaled", "shape", "idx", "ax", "g", "tail", "cat"}
    assert {n for n, r in role.items() if r == CONE} == cone
    assert {n for n, r in role.items() if r == PLACED} == {"x", "mm", "rs", "act", "y"}
    grp = by_name(m, st_.group_of)
    assert all(grp[n] == -1 for n in cone)
    # the Parameter joins its first placed consumer, the Result its producer
    assert grp["x"] == grp["mm"] and grp["y"] == grp["act"]
    assert len({grp["mm"], grp["rs"], grp["act"]}) == 3 and st_.n_groups == 3
    # constant data is never a tensor: mm feeds rs (and the ShapeOf, which folds), nothing else crosses
    assert st_.n_tensors == 2 and st_.t_prod.tolist() == [grp["mm"], grp["rs"]]
    # and shows the device of its first placed consumer's group
    gd = np.zeros(3, np.int64)
    gd[grp["rs"]] = 1
    dev = by_name(m, st_.op_devices(gd))
    assert all(dev[n] == 0 for n in ("wq", "cvt", "sub", "scaled", "x", "mm"))
    assert all(dev[n] == 1 for n in ("shape", "g", "cat", "rs"))


def fragile_graph(result_on_f2=False):
    """P -> a -> f1 -> f2 -> {b, c}; b -> R, c -> R; f1 and f2 fragile. With ``result_on_f2``
    f2 also feeds a Result, so it cannot be replicated."""
    types = ["Parameter", "X", "X", "X", "X", "X", "Result", "Result"]
    edges = [(0, 1), (1, 2), (2, 3), (3, 4), (3, 5), (4, 6), (5, 7)]
    if result_on_f2:
        types.append("Result")
        edges.append((3, 8))
    n = len(types)
    fragile = np.zeros(n, bool)
    fragile[[2, 3]] = True
    t = np.array([[0, 0], [1, 1], [2, 20], [3, 30], [4, 4], [5, 5], [0, 0], [0, 0], [0, 0]][:n], float)
    return make_module(types, edges, t, edge_bytes=[10] * len(edges), fragile=fragile)


def test_a_fragile_chain_whose_consumers_are_placed_is_replicated():
    m = fragile_graph()
    p = problem(m)
    s = p.structure
    assert s.role.tolist() == [PLACED, PLACED, REPLICATED, REPLICATED, PLACED, PLACED, PLACED, PLACED]
    gb, gc, ga = s.group_of[4], s.group_of[5], s.group_of[1]
    assert len({gb, gc, ga}) == 3
    # each consumer group gets its own copy of the whole chain; a device pays for it once (one unit)
    for g, own in ((gb, 4), (gc, 5)):
        assert sorted(s.r_ops[s.r_ptr[g]:s.r_ptr[g + 1]].tolist()) == [2, 3]
        assert p.time[g].tolist() == pytest.approx([own, own])
    assert p.r_ptr.tolist() == [0, 2] and sorted(p.r_groups.tolist()) == sorted([gb, gc])
    assert p.r_time.tolist() == [[5.0, 50.0]]
    # the chain's input is the consumers' input: a's tensor goes to both groups, never to f1
    assert s.n_tensors == 1 and s.t_prod[0] == ga
    assert sorted(s.t_cons[s.t_ptr[0]:s.t_ptr[1]].tolist()) == sorted([gb, gc])
    # the contracted graph has a -> b and a -> c
    succ = s.g_idx[s.g_ptr[ga]:s.g_ptr[ga + 1]].tolist()
    assert sorted(succ) == sorted([gb, gc])


def test_a_fragile_op_that_feeds_a_result_is_placed_with_its_consumers():
    m = fragile_graph(result_on_f2=True)
    s = problem(m).structure
    assert s.role[3] == PLACED and s.role[2] == REPLICATED
    # f2 cannot be copied (a Result reads it), so no tensor of it may cross: it is tied to b and c
    assert s.group_of[3] == s.group_of[4] == s.group_of[5] == s.group_of[8]
    # f1 is replicated into that one group only
    g = s.group_of[3]
    assert s.r_ops[s.r_ptr[g]:s.r_ptr[g + 1]].tolist() == [2]


def test_parameter_reaching_its_consumer_through_constant_data_joins_it():
    # P0 -> ShapeOf1 -> Gather2 -> Reshape4 <- P3 ; Reshape4 -> R5
    types = ["Parameter", "ShapeOf", "Gather", "Parameter", "Reshape", "Result"]
    m = make_module(types, [(0, 1), (1, 2), (2, 4), (3, 4), (4, 5)], np.ones((6, 2)))
    s = problem(m).structure
    assert s.role.tolist() == [PLACED, CONE, CONE, PLACED, PLACED, PLACED]
    assert s.n_groups == 1 and s.n_tensors == 0
    assert s.counted.tolist() == [True]  # the group computes (the Reshape)


# --- ties ----------------------------------------------------------------------------------------

def test_read_value_assign_group_is_closed_over_the_paths_between_them():
    # 0 P -> 1 RV -> 2 a -> 4 b -> 6 Assign; 2 a -> 5 s -> 6; 1 RV -> 3 y -> 7 R;
    # 0 P -> 8 z -> 9 R; ties (RV, Assign). a, b and s are on paths RV -> Assign; y and z are not.
    types = ["Parameter", "ReadValue", "X", "X", "X", "X", "Assign", "Result", "X", "Result"]
    edges = [(0, 1), (1, 2), (1, 3), (2, 4), (2, 5), (4, 6), (5, 6), (3, 7), (0, 8), (8, 9)]
    m = make_module(types, edges, np.ones((10, 2)), ties=[(1, 6)])
    s = problem(m).structure
    g = s.group_of
    assert {i for i in range(10) if g[i] == g[1]} == {0, 1, 2, 4, 5, 6}
    assert g[3] == g[7] != g[1] and g[8] == g[9] != g[1]
    # without the tie every compute op is its own group
    free = problem(make_module(types, edges, np.ones((10, 2)))).structure
    assert free.n_groups == 7 and s.n_groups == 3


def test_state_ties_from_an_openvino_model():
    import openvino as ov
    from openvino import opset13 as ops
    from openvino.op.util import Variable, VariableInfo

    from hdp.ir.openvino_frontend import lower_model

    x = ops.parameter([1, 4], np.float32, name="x")
    info = VariableInfo()
    info.data_shape, info.data_type, info.variable_id = ov.PartialShape([1, 4]), ov.Type.f32, "state"
    var = Variable(info)
    rv = ops.read_value(x, var, name="rv")
    a = ops.add(rv, x, name="a")
    side = ops.relu(rv, name="side")
    b = ops.multiply(a, ops.constant(np.full((1, 4), 2, np.float32), name="two"), name="b")
    upd = ops.add(b, ops.sigmoid(a, name="c"), name="upd")
    asg = ops.assign(upd, var, name="asg")
    model = ov.Model([ops.result(side, name="y"), ops.result(ops.tanh(x, name="other"), name="z")], [x], "state")
    model.add_sinks([asg])
    m = lower_model(model)
    s = build_structure(m.graph)
    types = [op.type for op in m.graph.ops]
    grp = by_name(m, s.group_of)
    g_asg = s.group_of[types.index("Assign")]
    assert m.graph.ties is not None and len(m.graph.ties.numpy()) == 1
    assert grp["rv"] == grp["a"] == grp["b"] == grp["c"] == grp["upd"] == g_asg
    assert grp["side"] != grp["rv"] and grp["other"] != grp["rv"]


def effective_edges(types, edges, role):
    """Placed producer -> placed consumer pairs, through replicated chains (computed directly)."""
    n = len(types)
    succ = [[] for _ in range(n)]
    for a, b in edges:
        succ[a].append(b)

    def reach(v):
        if role[v] == PLACED:
            return {v}
        if role[v] == REPLICATED:
            return set().union(*(reach(c) for c in succ[v]))
        return set()

    return {(u, v) for u in range(n) if role[u] == PLACED for c in succ[u] for v in reach(c)}


@settings(max_examples=80, deadline=None, database=None)
@given(st.integers(0, 2**31 - 1), st.integers(2, 30), st.integers(0, 4), st.floats(0.0, 0.3))
def test_groups_contract_to_a_topologically_numbered_dag(seed, n, n_ties, p_fragile):
    rng = np.random.default_rng(seed)
    types, edges = random_types_and_edges(rng, n, p_edge=float(rng.uniform(0.05, 0.3)), const_frac=0.15)
    n = len(types)
    cone = cone_of(types, edges)
    xs = [i for i in range(n) if types[i] == "X" and not cone[i]]
    ties = [tuple(sorted(rng.choice(xs, 2, replace=False).tolist())) for _ in range(n_ties)] if len(xs) >= 2 else []
    fragile = (rng.random(n) < p_fragile) & (np.array(types) == "X")
    m = make_module(types, edges, np.ones((n, 2)), ties=ties, fragile=fragile)
    s = build_structure(m.graph)
    role, g = s.role, s.group_of
    assert ((role == CONE) == cone).all()
    placed = role == PLACED
    assert ((g >= 0) == placed).all() and sorted(s.m_ops.tolist()) == np.nonzero(placed)[0].tolist()
    for k in range(s.n_groups):
        assert (g[s.members(k)] == k).all()
    eff = effective_edges(types, edges, role)
    # the contracted graph: exactly the group pairs of the effective edges, numbered topologically
    pairs = {(int(g[u]), int(g[v])) for u, v in eff if g[u] != g[v]}
    got = {(a, int(b)) for a in range(s.n_groups) for b in s.g_idx[s.g_ptr[a]:s.g_ptr[a + 1]]}
    assert got == pairs
    assert all(a < b for a, b in got)
    q = nx.DiGraph(list(got))
    q.add_nodes_from(range(s.n_groups))
    assert nx.is_directed_acyclic_graph(q)
    # convex: no op outside a group lies on a path between two of its members
    G = nx.DiGraph(list(eff))
    G.add_nodes_from(np.nonzero(placed)[0].tolist())
    for k in range(s.n_groups):
        mem = set(s.members(k).tolist())
        down = set().union(*(nx.descendants(G, v) for v in mem))
        up = set().union(*(nx.ancestors(G, v) for v in mem))
        assert not (down & up) - mem
    # the rules hold
    for a, b in ties:
        if placed[a] and placed[b]:
            assert g[a] == g[b]
    for a, b in edges:
        if types[b] == "Result" and placed[a]:
            assert g[a] == g[b]
    # without ties or fragile ops nothing else is merged: Parameters join a consumer, Results a producer
    if not ties and not fragile.any():
        producer = {b: a for a, b in edges if types[b] == "Result"}
        joined = sum(1 for i in range(n) if types[i] == "Result" and placed[producer[i]]) + sum(
            1 for i in range(n) if types[i] == "Parameter" and any(g[i] == g[j] for j in range(n) if j != i))
        assert s.n_groups == int(placed.sum()) - joined
    # op_devices and group_devices are inverse for placements that respect the groups
    gd = rng.integers(0, 3, s.n_groups)
    assert (s.group_devices(s.op_devices(gd)) == gd).all()


# --- the problem ---------------------------------------------------------------------------------

def state_module(t_x_d1=1.0):
    """P0 -> RV3 -> X4 -> Assign5, X4 -> R6, K1 -> Convert2 -> X4; RV3/Assign5 tied. Support:
    RV on D0, D1; X on D1, D2; Assign on D1, D2; the Convert nowhere."""
    types = ["Parameter", "Constant", "Convert", "ReadValue", "X", "Assign", "Result"]
    edges = [(0, 3), (1, 2), (2, 4), (3, 4), (4, 5), (4, 6)]
    t = np.array([[9, 9, 9], [0, 0, 0], [np.inf] * 3, [1, 2, 3], [4, t_x_d1, 6], [7, 8, 9], [9, 9, 9]])
    sup = np.ones((7, 3), bool)
    sup[3, 2] = sup[4, 0] = sup[5, 0] = False
    sup[2] = False
    return make_module(types, edges, t, support=sup, ties=[(3, 5)])


def test_allowed_is_taken_over_whole_groups_and_ignores_constant_data():
    p = problem(state_module())
    s = p.structure
    assert s.n_groups == 1 and s.role[2] == CONE
    assert p.allowed.tolist() == [[False, True, False]]
    # time: RV + X + Assign on D1; the Parameter and the Result take none, the Convert folds
    assert p.time[0, 1] == pytest.approx(2 + 1 + 8)
    assert np.isinf(p.time[0, [0, 2]]).all()
    assert p.lower_bound() == pytest.approx(11)


def test_a_group_with_no_allowed_device_is_an_input_error_naming_an_op():
    # X cannot run on D1 (infinite time) and every other device is ruled out by a tie member
    with pytest.raises(InputError, match=r"can run op 'op[345]' \((ReadValue|X|Assign)\) \(tied with"):
        problem(state_module(t_x_d1=np.inf))
    # an untied op that no device supports is named alone
    m = make_module(["Parameter", "X", "X", "Result"], [(0, 1), (1, 2), (2, 3)], np.ones((4, 2)),
                    support=[[1, 1], [1, 1], [0, 0], [1, 1]])
    with pytest.raises(InputError, match=r"can run op 'op2' \(X\) \(tied with 1 other"):
        problem(m)  # op2 is tied with its Result only


def test_problem_devices_follow_the_target_order():
    m = state_module()
    p = problem(m, ("D1", "D2", "D0"))
    assert p.devices == ("D1", "D2", "D0") and p.allowed.tolist() == [[True, False, False]]
    with pytest.raises(InputError, match="D7"):
        problem(m, ("D0", "D7"))


def test_legalize_copies_shared_shape_chains_without_touching_the_ops_they_read():
    """A shape chain shared by consumers on two devices is copied for the second one; the copy reads
    a placed op (through ShapeOf), and that op and everything above it keep their names and
    devices (the copy's nodes were once collected after being wired to the original graph, so every
    op upstream was renamed ``.../hdp_copy_N`` and moved to the copy's device — a new-user try-out
    found 962 of 1010 ops renamed and a placement with 43 ops on CPU_B written with 4)."""
    import openvino as ov
    from openvino import opset13 as ops

    from hdp.ir.openvino_legalize import legalize
    from hdp.placement.structure import CONE, PLACED, REPLICATED

    x = ops.parameter([-1, 8], np.float32, name="x")
    a = ops.relu(x, name="relu")
    s = ops.shape_of(a, name="shape")
    g = ops.gather(s, ops.constant(np.array([0], np.int64), name="idx"), ops.constant(np.int64(0), name="axis"),
                   name="batch")
    c = ops.concat([g, ops.constant(np.array([2, 4], np.int64), name="rest")], 0, name="target_shape")
    b1 = ops.reshape(a, c, False, name="r1")
    b2 = ops.reshape(ops.sigmoid(a, name="sig"), c, False, name="r2")
    model = ov.Model([ops.result(b1, name="o1"), ops.result(b2, name="o2")], [x], "m")
    ov_ops = list(model.get_ordered_ops())
    names = [o.get_friendly_name() for o in ov_ops]
    replicated = {"shape", "batch", "target_shape"}
    cone = {"idx", "axis", "rest"}
    role = np.array([REPLICATED if n in replicated else CONE if n in cone else PLACED for n in names], np.int8)
    dev = {"sig": "CPU_B", "r2": "CPU_B"}
    device_of = [dev.get(n, "CPU") for n in names]
    stats = legalize(model, ov_ops, role == PLACED, device_of)
    assert stats["copies"] > 0
    after = {o.get_friendly_name(): o for o in model.get_ordered_ops()}
    for n in ("x", "relu", "sig", "r1", "r2"):
        assert n in after, sorted(after)
        assert after[n].get_rt_info()["user_dataaffinity"].astype(str) == dev.get(n, "CPU"), n
    assert all(k.count("hdp_copy") <= 1 for k in after), sorted(after)
    copies = [o for k, o in after.items() if "hdp_copy" in k]
    (concat_copy,) = [o for o in copies if o.get_type_name() == "Concat"]
    (reader,) = [t.get_node() for t in concat_copy.output(0).get_target_inputs()]
    want = reader.get_rt_info()["user_dataaffinity"].astype(str)  # the consumer the copy was made for
    assert {o.get_rt_info()["user_dataaffinity"].astype(str) for o in copies} == {want}
    # the copied chain still reads the shared relu through its ShapeOf
    (shape_copy,) = [o for o in copies if o.get_type_name() == "ShapeOf"]
    assert shape_copy.input(0).get_source_output().get_node().get_friendly_name() == "relu"
