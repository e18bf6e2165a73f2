"""The ``hdp`` package has no import circle (issue 8), and its layers only point down (issue 17).

Every ``import`` and ``from ... import`` in every module counts, at module level or inside a
function (a circle hidden in a function is still a circle: the modules still depend on each other).
An import of ``a.b.c`` also depends on the packages ``a.b`` and ``a`` that Python runs first, except
those that contain the importer (they are initialised before it anyway). ``from pkg import name``
depends on ``pkg.name`` when that is a module. Lazy registries (``importlib.import_module`` of a
string) are not imports of the importer and are not counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

import hdp

ROOT = Path(hdp.__file__).resolve().parent


def modules() -> dict[str, Path]:
    out = {}
    for f in ROOT.rglob("*.py"):
        parts = list(f.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The hdp modules ``name`` imports (see the module docstring)."""
    is_pkg = path.name == "__init__.py"
    package = name if is_pkg else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets.add(mod)
            targets.update(f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in known)
    out = set()
    own = set(ancestors(name))
    for t in targets:
        if t not in known:
            continue
        out.add(t)
        out.update(a for a in ancestors(t) if a not in own and a in known)
    out.discard(name)
    return out


def import_graph() -> nx.DiGraph:
    mods = modules()
    g = nx.DiGraph()
    g.add_nodes_from(mods)
    for name, path in mods.items():
        g.add_edges_from((name, t) for t in imports_of(name, path, set(mods)))
    return g


def test_the_import_graph_sees_the_imports():
    # the parser finds real edges (function-level and relative ones included), so the check below
    # cannot pass on an empty graph
    g = import_graph()
    assert g.number_of_nodes() > 30 and g.number_of_edges() > 60
    assert g.has_edge("hdp.passes.partition", "hdp.placement.problem")  # inside PartitionPass.run
    assert g.has_edge("hdp.passes.partition", "hdp.placers")  # via hdp.placers.options' package
    assert g.has_edge("hdp.placement.simulate", "hdp.placement.problem")


def test_a_planted_circle_is_found(tmp_path):
    a = tmp_path / "a.py"
    a.write_text("def f():\n    from .b import g\n")
    b = tmp_path / "b.py"
    b.write_text("import hdp.x.a\n")
    known = {"hdp.x", "hdp.x.a", "hdp.x.b"}
    g = nx.DiGraph()
    g.add_edges_from(("hdp.x.a", t) for t in imports_of("hdp.x.a", a, known))
    g.add_edges_from(("hdp.x.b", t) for t in imports_of("hdp.x.b", b, known))
    assert ("hdp.x.a", "hdp.x.b") in g.edges and ("hdp.x.b", "hdp.x.a") in g.edges
    assert not nx.is_directed_acyclic_graph(g)


def describe_circles(g: nx.DiGraph) -> list[str]:
    out = []
    for c in nx.strongly_connected_components(g):
        if len(c) > 1:
            cycle = [u for u, _ in nx.find_cycle(g.subgraph(c))]
            out.append(" -> ".join(cycle + cycle[:1]) + f" (circle among {', '.join(sorted(c))})")
    return out


def test_hdp_has_no_import_circle():
    circles = describe_circles(import_graph())
    assert not circles, "import circles: " + "; ".join(circles)


# ----------------------------------------------------------------------------- layers (issue 17)

#: hdp's layers, lowest first. A module may import modules of its own layer and of the layers below
#: it, never above: an IR that knows the placement rules, a placement core that needs the runtime,
#: a runtime that runs placers or passes, all made one cycle through six packages before.
#: costgraph (abstract placement problems from JSON, issue 19) lowers into the IR and prices with
#: the placement core, like a frontend that knows the problem it builds.
LAYERS = ("base", "ir", "placement", "costgraph", "runtime", "learn", "placers", "passes", "pipeline", "cli")
#: The table of allowed directions, from the order above: layer -> the layers it may import.
ALLOWED = {layer: set(LAYERS[:i + 1]) for i, layer in enumerate(LAYERS)}
#: The layer of each top-level module (a subpackage's layer is its name). A new top-level module
#: fails :func:`test_every_module_has_a_layer` until it is placed here.
TOP_LEVEL = {
    "hdp": "base", "errors": "base", "fsutil": "base", "cache": "base", "validation": "base", "jit": "base",
    "glossary": "base",
    # the model zoo builds OpenVINO models and imports only base utilities; the runtime's generation
    # check decodes with its greedy loop (zoo.generate)
    "zoo": "base", "zoo_common": "base", "zoo_keras": "base", "zoo_transformers": "base",
    "cli": "cli", "__main__": "cli", "cli_cache": "cli", "cli_calibrate": "cli", "cli_common": "cli",
    "cli_runtime": "cli", "cli_costgraph": "cli", "show": "cli", "warmup": "cli", "synth": "cli",
}


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in LAYERS:
        return parts[1]
    return TOP_LEVEL.get(parts[1] if len(parts) > 1 else parts[0])


def registry_targets(path: Path, known: set[str]) -> set[str]:
    """Modules named by string in ``path`` as lazy registries name them (``"hdp.passes.coarsen:CoarsenPass"``,
    ``importlib.import_module("hdp.zoo_keras")``): not imports, but a dependency all the same."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("hdp."):
            mod = node.value.partition(":")[0]
            if mod in known:
                out.add(mod)
    return out


def upward_imports(g: nx.DiGraph) -> list[str]:
    return [f"{u} ({layer_of(u)}) imports {v} ({layer_of(v)}), a layer above it"
            for u, v in sorted(g.edges) if layer_of(v) not in ALLOWED[layer_of(u)]]


def layered_graph() -> nx.DiGraph:
    mods = modules()
    g = import_graph()
    for name, path in mods.items():
        g.add_edges_from((name, t) for t in registry_targets(path, set(mods)) if t != name)
    return g


def test_every_module_has_a_layer():
    assert not [m for m in modules() if layer_of(m) is None], "add these modules to TOP_LEVEL"


def test_layers_only_point_down():
    """Every import, at module level or inside a function, and every module a registry names by
    string, goes to the importer's layer or one below (see :data:`LAYERS`)."""
    up = upward_imports(layered_graph())
    assert not up, "upward imports:\n" + "\n".join(up)


def test_an_upward_import_in_a_function_is_found(tmp_path):
    """A planted ``ir`` module importing ``placement`` inside a function, and a ``runtime`` module
    naming a placer in a registry string, are both reported; the downward import is not."""
    ir_mod = tmp_path / "openvino_backend.py"
    ir_mod.write_text("from hdp.ir.types import Module\n\ndef f():\n    from hdp.placement.structure import roles\n")
    rt_mod = tmp_path / "calibrate.py"
    rt_mod.write_text('PLACERS = {"heft": "hdp.placers.classical:heft"}\n')
    known = set(modules())
    g = nx.DiGraph()
    g.add_edges_from(("hdp.ir.openvino_backend", t) for t in imports_of("hdp.ir.openvino_backend", ir_mod, known))
    g.add_edges_from(("hdp.runtime.calibrate", t) for t in registry_targets(rt_mod, known))
    up = upward_imports(g)
    assert "hdp.ir.openvino_backend (ir) imports hdp.placement.structure (placement), a layer above it" in up
    assert "hdp.runtime.calibrate (runtime) imports hdp.placers.classical (placers), a layer above it" in up
    assert not any("hdp.ir.types" in x for x in up)


def test_no_module_imports_a_private_name_of_another():
    """``from hdp.x import _name`` reaches into another module's internals (the one exception: the
    kernel modules, ``_kernels`` and ``_<concern>_kernels``, private to hdp but shared by design,
    DESIGN.md §3)."""
    bad = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hdp"):
                bad += [f"{name} imports {node.module}.{a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__") and not a.name.endswith("_kernels")]
    assert not bad, "; ".join(bad)


def test_the_command_line_runs_no_pass_manager_itself():
    """``hdp.cli`` and its command modules parse arguments and print; running stages is
    :mod:`hdp.pipeline`'s (compile_model, run_passes, lower_cached)."""
    g = import_graph()
    cli = [m for m in g if m.split(".")[-1].startswith("cli")]
    assert len(cli) >= 5
    assert not [m for m in cli if g.has_edge(m, "hdp.passes.manager")]
