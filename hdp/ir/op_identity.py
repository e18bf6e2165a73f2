"""Op identity between an OpenVINO model, its specialisations and any re-read of it.

**Op identity** between the original, a specialisation and any re-read is the topological position
in ``get_ordered_ops()``, checked structurally (type, input count, each input's source position
and port; :func:`op_structure`) -- never friendly names, which OpenVINO may generate. Names stay
in the IR (``Op.name``) for people; where an OpenVINO answer comes back by name (``query_model``,
a runtime graph's ``originalLayersNames``) it is mapped to positions inside the process that holds
the model it asked about (:func:`name_positions`, :func:`names_to_positions`).
"""

from __future__ import annotations

import hashlib

import msgspec
import numpy as np

from hdp.base.errors import StaleInput
from hdp.ir.types import Graph


class OpStructure(msgspec.Struct, frozen=True):
    """The shape of a DAG independent of names: per op its type and input count, per input (in
    op order, then port order) the producing op's position and output port."""

    types: tuple[str, ...]
    n_inputs: tuple[int, ...]
    src: tuple[int, ...]
    port: tuple[int, ...]

    def digest(self) -> str:
        return hashlib.blake2b(msgspec.msgpack.encode(self), digest_size=16).hexdigest()


def op_structure(ov_ops) -> OpStructure:
    """The :class:`OpStructure` of OpenVINO ops in ``get_ordered_ops()`` order."""
    pos = {op: i for i, op in enumerate(ov_ops)}  # ov Nodes hash and compare by identity
    types, n_in, src, port = [], [], [], []
    for op in ov_ops:
        types.append(op.get_type_name())
        ins = op.inputs()
        n_in.append(len(ins))
        for inp in ins:
            so = inp.get_source_output()
            src.append(pos.get(so.get_node(), -1))
            port.append(so.get_index())
    return OpStructure(tuple(types), tuple(n_in), tuple(src), tuple(port))


def graph_structure(graph: Graph) -> OpStructure:
    """The :class:`OpStructure` of a lowered graph (equal to its source model's)."""
    n = graph.n_ops
    indptr = graph.indptr.numpy()
    srcs = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    dst = graph.indices.numpy().astype(np.int64)
    dp = graph.dst_port.numpy()
    order = np.lexsort((dp, dst))
    return OpStructure(tuple(op.type for op in graph.ops), tuple(int(c) for c in np.bincount(dst, minlength=n)),
                     tuple(int(s) for s in srcs[order]), tuple(int(p) for p in graph.src_port.numpy()[order]))


def check_structure(ov_ops, graph: Graph, xml) -> None:
    """InputError naming the first op where ``ov_ops`` and the lowered ``graph`` differ."""
    a, b = op_structure(ov_ops), graph_structure(graph)
    if a == b:
        return
    where = _first_difference(a, b)
    what = (f"op #{where} is '{ov_ops[where].get_friendly_name()}' ({a.types[where]}), the module has "
            f"'{graph.ops[where].name}' ({b.types[where]}) with other inputs" if where < min(len(a.types), len(b.types))
            else f"{len(a.types)} ops, the module has {len(b.types)}")
    raise StaleInput(f"{xml}: model.xml changed since it was lowered ({what}); lower it again")


def _first_difference(a: OpStructure, b: OpStructure) -> int:
    ia = ib = 0
    for k in range(min(len(a.types), len(b.types))):
        na, nb = a.n_inputs[k], b.n_inputs[k]
        if a.types[k] != b.types[k] or na != nb or a.src[ia:ia + na] != b.src[ib:ib + nb] \
                or a.port[ia:ia + na] != b.port[ib:ib + nb]:
            return k
        ia, ib = ia + na, ib + nb
    return min(len(a.types), len(b.types))


def name_positions(ov_ops) -> dict[str, list[int]]:
    """Friendly name -> positions of the ops carrying it (usually one), for mapping an OpenVINO
    answer given by name (``query_model``, ``originalLayersNames``) back to op positions. Only
    meaningful for the very model object that answered."""
    out: dict[str, list[int]] = {}
    for i, op in enumerate(ov_ops):
        out.setdefault(op.get_friendly_name(), []).append(i)
    return out


def names_to_positions(names, index: dict[str, list[int]]) -> list[int]:
    """Positions of the ops named in ``names`` (unknown names are ignored)."""
    return sorted({i for n in names for i in index.get(n, ())})


def most_name_parts(index: dict[str, list[int]]) -> int:
    """The most comma-separated parts a name of ``index`` has (1 when no name has a comma)."""
    return max((name.count(",") for name in index), default=0) + 1


def layer_names_to_positions(original: str, index: dict[str, list[int]], parts_at_most: int | None = None) -> list[int]:
    """Positions of the ops listed in a runtime node's ``originalLayersNames`` (comma separated;
    a name that itself contains commas is rejoined: the longest name of ``index`` first).

    Only names of up to ``parts_at_most`` parts are tried (:func:`most_name_parts` of ``index``,
    computed when not given: pass it when mapping every node of a runtime graph against one index),
    since no longer one is in ``index``: a node fusing ``n`` ops is mapped in ``O(n)`` tries. Trying
    every length was cubic in ``n``: the CPU plugin fuses a 2,000-op element-wise chain into one
    snippet, whose mapping took longer than compiling it."""
    parts = original.split(",") if original else []
    if parts_at_most is None:
        parts_at_most = most_name_parts(index)
    out, i = set(), 0
    while i < len(parts):
        for j in range(min(len(parts), i + parts_at_most), i, -1):
            cand = ",".join(parts[i:j])
            if cand in index:
                out.update(index[cand])
                i = j
                break
        else:
            i += 1
    return sorted(out)


def supported_mask(ov_ops, supported_names) -> np.ndarray:
    """Bool per op position: whether ``query_model`` (asked about these very ops) named it."""
    mask = np.zeros(len(ov_ops), bool)
    mask[names_to_positions(supported_names, name_positions(ov_ops))] = True
    return mask


def unique_names(ov_ops) -> tuple[list[str], dict[str, str]]:
    """Friendly names made unique by suffixing ``#k``; returns (names, unique -> original)."""
    seen: dict[str, int] = {}
    names, renamed = [], {}
    taken = set()
    for op in ov_ops:
        base = op.get_friendly_name()
        name = base
        if name in taken:
            k = seen.get(base, 1)
            while f"{base}#{k}" in taken:
                k += 1
            seen[base] = k + 1
            name = f"{base}#{k}"
            renamed[name] = base
        taken.add(name)
        names.append(name)
    return names, renamed
