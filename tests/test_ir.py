import numpy as np
import pytest

from hdp.base.errors import InputError
from hdp.ir import serde
from hdp.ir.build import csr, disjoint_set, graph_from_edges, predecessors_csr, topological_order
from hdp.ir.types import Array, Module, Op, Placement
from hdp.ir.verify import VerifyError, verify


def diamond():
    ops = [Op(f"n{i}", t, ((1, 4),), ("f32",), 4.0, 0) for i, t in
           enumerate(["Parameter", "Relu", "Sigmoid", "Add", "Result"])]
    return Module(graph=graph_from_edges(ops, [0, 0, 1, 2, 3], [1, 2, 3, 3, 4], [16] * 5,
                                         dst_port=[0, 0, 0, 1, 0]))


def test_round_trip_same_digest():
    m = diamond()
    data = serde.encode(m)
    m2 = serde.decode(data)
    assert m2 == m
    assert serde.digest(m2) == serde.digest(m)
    assert serde.encode(m2) == data


def test_digest_changes_with_content():
    m = diamond()
    pl = Placement("x", ("CPU",), Array.of(np.zeros(5, np.int16)))
    assert serde.digest(m) != serde.digest(m.replace(placement=pl))


def test_array_view_is_read_only():
    a = Array.of(np.arange(6).reshape(2, 3))
    v = a.numpy()
    assert v.shape == (2, 3) and v[1, 2] == 5
    with pytest.raises(ValueError):
        v[0, 0] = 1


def test_csr_and_predecessors():
    m = diamond()
    g = m.graph
    assert g.indptr.numpy().tolist() == [0, 2, 3, 4, 5, 5]
    assert g.indices.numpy().tolist() == [1, 2, 3, 3, 4]
    pptr, preds = predecessors_csr(g)
    assert preds[pptr[3]:pptr[4]].tolist() == [1, 2]


def test_backward_edge_rejected():
    ops = [Op(f"n{i}", "Relu", ((1,),), ("f32",)) for i in range(2)]
    with pytest.raises(ValueError, match="not forward"):
        graph_from_edges(ops, [1], [0])


def test_topological_order_detects_cycle():
    assert topological_order(3, [2, 0], [1, 2]).tolist() == [0, 2, 1]
    with pytest.raises(ValueError, match="cycle"):
        topological_order(2, [0, 1], [1, 0])


def test_topological_order_breaks_ties_by_key_then_index():
    # 0 -> 3; 1, 2 and 0 are ready at once: by key (2, 0, 0), then index
    assert topological_order(4, [0], [3], key=[2, 0, 0, 1]).tolist() == [1, 2, 0, 3]
    assert topological_order(4, [0], [3]).tolist() == [0, 1, 2, 3]


def test_csr_groups_entries_by_row_keeping_their_order():
    ptr, cols, w = csr(3, [2, 0, 2, 0], [5, 6, 7, 8], np.array([0.5, 1.5, 2.5, 3.5]))
    assert ptr.tolist() == [0, 2, 2, 4] and cols.tolist() == [6, 8, 5, 7] and w.tolist() == [1.5, 3.5, 0.5, 2.5]
    assert csr(2, [])[0].tolist() == [0, 0, 0]


def test_disjoint_set_is_scipys():
    from scipy.cluster.hierarchy import DisjointSet

    uf = disjoint_set(range(4))
    assert type(uf) is DisjointSet
    assert uf.merge(0, 3) and not uf.merge(3, 0) and uf.connected(0, 3) and not uf.connected(1, 2)


def test_verify_catches_bad_placement():
    m = diamond()
    verify(m)
    bad = m.replace(placement=Placement("x", ("CPU",), Array.of(np.array([0, 0, 1, 0, 0], np.int16))))
    with pytest.raises(VerifyError, match="device id out of range"):
        verify(bad)
    short = m.replace(placement=Placement("x", ("CPU",), Array.of(np.zeros(3, np.int16))))
    with pytest.raises(VerifyError, match="length"):
        verify(short)


def test_newer_schema_is_a_clear_error(tmp_path):
    m = diamond().replace(schema=99)
    p = tmp_path / "new.hdp"
    serde.save(m, p)
    with pytest.raises(InputError, match="schema 99"):
        serde.load(p)


def test_corrupt_and_foreign_files(tmp_path):
    p = tmp_path / "m.hdp"
    serde.save(diamond(), p)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="corrupt|not an hdp"):
        serde.load(p)
    q = tmp_path / "x.hdp"
    q.write_bytes(b"hello")
    with pytest.raises(InputError, match="magic"):
        serde.load(q)
    with pytest.raises(InputError, match="no such file"):
        serde.load(tmp_path / "missing.hdp")


def test_atomic_write_keeps_old_file_on_failure(tmp_path, monkeypatch):
    import os

    p = tmp_path / "f.bin"
    serde.atomic_write(p, b"old")

    def boom(*a):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        serde.atomic_write(p, b"new")
    assert p.read_bytes() == b"old"
    assert [f.name for f in tmp_path.iterdir()] == ["f.bin"]
