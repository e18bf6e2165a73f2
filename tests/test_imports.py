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
import numpy as np
from placement_helpers import random_module

import hdp
from hdp.base.errors import HdpError
from hdp.passes.cache import PassCache
from hdp.passes.instruments import Instrument
from hdp.passes.manager import PassManager, Stage
from hdp.pipeline import stages

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
#: ``zoo`` builds models (and random IR modules) from the base utilities and the IR; ``target``
#: names device sets and sits below everything that measures, places or runs passes (issue 33);
#: costgraph (abstract placement problems from JSON, issue 19) lowers into the IR and prices with
#: the placement core, like a frontend that knows the problem it builds. The runtime is four
#: packages by concern, each a layer: placed models, measuring, costs, serving.
LAYERS = ("base", "ir", "zoo", "placement", "target", "costgraph",
          "runtime.placed", "runtime.measure", "runtime.costs", "runtime.serve",
          "learn", "placers", "passes", "pipeline", "cli")
#: The table of allowed directions, from the order above: layer -> the layers it may import.
ALLOWED = {layer: set(LAYERS[:i + 1]) for i, layer in enumerate(LAYERS)}
#: The layer of the modules that are not inside a layer's package.
TOP_LEVEL = {"hdp": "base", "hdp.__main__": "cli", "hdp.runtime": "runtime.placed"}


def layer_of(module: str) -> str | None:
    if module in TOP_LEVEL:
        return TOP_LEVEL[module]
    parts = module.split(".")
    for n in (3, 2):
        if ".".join(parts[1:n]) in LAYERS:
            return ".".join(parts[1:n])
    return None


def registry_targets(path: Path, known: set[str]) -> set[str]:
    """Modules named by string in ``path`` as lazy registries name them (``"hdp.passes.coarsen:CoarsenPass"``,
    ``importlib.import_module("hdp.zoo.keras_models")``): not imports, but a dependency all the same."""
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
    g.add_edges_from(("hdp.runtime.costs.calibrate", t) for t in registry_targets(rt_mod, known))
    up = upward_imports(g)
    assert "hdp.ir.openvino_backend (ir) imports hdp.placement.structure (placement), a layer above it" in up
    assert "hdp.runtime.costs.calibrate (runtime.costs) imports hdp.placers.classical (placers), a layer above it" in up
    assert not any("hdp.ir.types" in x for x in up)


def test_no_module_imports_a_private_name_of_another():
    """``from hdp.x import _name`` reaches into another module's internals (the one exception: the
    kernel modules, ``_kernels`` and ``_<concern>_kernels``, private to hdp but shared by design,
    docs/design.md §3)."""
    bad = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hdp"):
                bad += [f"{name} imports {node.module}.{a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__") and not a.name.endswith("_kernels")]
    assert not bad, "; ".join(bad)


def test_the_command_line_runs_no_pass_manager_itself():
    """``hdp.cli.main`` and its command modules parse arguments and print; running stages is
    :mod:`hdp.pipeline`'s (compile_model, run_passes, lower_cached)."""
    g = import_graph()
    cli = [m for m in g if m.startswith("hdp.cli")]
    assert len(cli) >= 5
    assert not [m for m in cli if g.has_edge(m, "hdp.passes.manager")]


# ----------------------------------------------------------------------------- imports you can see (issue 33)

#: At most this many imports of hdp's own modules stay inside functions, each with its reason.
MAX_LAZY = 40


def function_imports(path: Path) -> list[tuple[int, str]]:
    """(line, statement) of every import of an hdp module inside a function of ``path``."""
    text = path.read_text()
    out = set()
    for fn in ast.walk(ast.parse(text, str(path))):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for n in ast.walk(fn):
                if isinstance(n, ast.ImportFrom) and (n.level or (n.module or "").startswith("hdp")):
                    out.add((n.lineno, ast.unparse(n)))
                elif isinstance(n, ast.Import) and any(a.name.startswith("hdp") for a in n.names):
                    out.add((n.lineno, ast.unparse(n)))
    return sorted(out)


def has_reason(lines: list[str], lineno: int) -> bool:
    """A ``# lazy: <why>`` comment on the import's line or the line above it."""
    here, above = lines[lineno - 1], lines[lineno - 2] if lineno > 1 else ""
    return "# lazy:" in here or above.strip().startswith("# lazy:")


def test_hdp_modules_are_imported_at_module_level():
    """hdp's own modules are imported at the top of a module, where a reader and a tool see them;
    the few left inside functions keep a heavy third party (torch) out of start-up and say so."""
    lazy, unexplained = [], []
    for name, path in modules().items():
        lines = path.read_text().splitlines()
        for lineno, stmt in function_imports(path):
            lazy.append(f"{name}:{lineno}")
            if not has_reason(lines, lineno):
                unexplained.append(f"{path.relative_to(ROOT.parent)}:{lineno}: {stmt}")
    assert not unexplained, "an import of hdp inside a function needs a '# lazy: why' comment:\n" + "\n".join(unexplained)
    assert len(lazy) <= MAX_LAZY, f"{len(lazy)} imports of hdp inside functions (at most {MAX_LAZY})"


def test_an_unexplained_function_import_is_found(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from hdp.ir.types import Module\n\n\ndef g():\n    # lazy: torch\n"
                 "    from hdp.learn.model import HsdagNet\n")
    lines = f.read_text().splitlines()
    found = function_imports(f)
    assert [ln for ln, _ in found] == [2, 7]
    assert [has_reason(lines, ln) for ln, _ in found] == [False, True]


def defined_names(path: Path) -> tuple[set[str], dict[str, str]]:
    """The names ``path`` defines at top level, and those it imports (name -> from which module)."""
    defined, imported = set(), {}
    for n in ast.parse(path.read_text(), str(path)).body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(n.name)
        elif isinstance(n, (ast.Assign, ast.AnnAssign)):
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                defined.update(x.id for x in ast.walk(t) if isinstance(x, ast.Name))
        elif isinstance(n, ast.ImportFrom) and (n.module or "").startswith("hdp"):
            imported.update({a.asname or a.name: n.module for a in n.names})
    return defined, imported


def test_every_name_has_one_home():
    """No re-exports: ``from hdp.a import name`` takes ``name`` from the module that defines it,
    not from one that imported it (``hdp.pipeline`` re-exported 19 names before issue 33)."""
    mods = modules()
    tables = {m: defined_names(p) for m, p in mods.items()}
    files = list(mods.values()) + sorted(Path(__file__).parent.glob("*.py")) \
        + sorted((ROOT.parent / "bench").glob("*.py"))
    bad = []
    for f in files:
        for n in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(n, ast.ImportFrom) and not n.level and n.module in tables:
                defined, imported = tables[n.module]
                for a in n.names:
                    if a.name in imported and a.name not in defined and f"{n.module}.{a.name}" not in mods:
                        bad.append(f"{f.name}: from {n.module} import {a.name} (defined in {imported[a.name]})")
    assert not bad, "import each name from its home:\n" + "\n".join(bad)


# ----------------------------------------------------------------------------- the manager runs a protocol (issue 33)

#: What the pipeline builds around the passes: names the pass manager must not know.
PIPELINE_NAMES = {"Lower", "Check", "Raise", "StagedPlaced", "PlacementChecker", "lower_cached", "recompute_if_stale"}


def code_names(path: Path) -> set[str]:
    """Every identifier ``path``'s code uses (names, attributes, imported names), and every string
    constant that is not a docstring."""
    tree = ast.parse(path.read_text(), str(path))
    docs = {id(b.body[0].value) for b in ast.walk(tree)
            if isinstance(b, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and b.body and isinstance(b.body[0], ast.Expr) and isinstance(b.body[0].value, ast.Constant)}
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif isinstance(n, ast.alias):
            out.update(n.name.split("."))
        elif isinstance(n, ast.ImportFrom) and n.module:
            out.update(n.module.split("."))
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
            out.add(n.value)
    return out


def test_the_pass_manager_knows_no_stage_of_the_pipeline():
    """``hdp.passes`` runs the pipeline's edge stages (lower, check, raise) as values of its own
    :class:`~hdp.passes.manager.Stage` protocol: no module of it imports the pipeline, names it in a
    string or refers to a stage's type; each of the pipeline's stages has every member the protocol
    declares."""
    bad = []
    for name, path in modules().items():
        if name.startswith("hdp.passes"):
            names = code_names(path)
            bad += [f"{name} uses '{x}'" for x in sorted(names & PIPELINE_NAMES)]
            bad += [f"{name} names '{x}'" for x in sorted(names) if x.startswith("hdp.pipeline") or x == "pipeline"]
    assert not bad, "the pass manager must run stages through its protocol only:\n" + "\n".join(bad)
    members = {m for m in vars(Stage) if not m.startswith("_")} | set(Stage.__annotations__)
    assert members >= {"name", "needs", "gives", "cache_key", "accepts", "run"}
    for cls in (stages.Lower, stages.Check, stages.Raise):
        assert not [m for m in members if not hasattr(cls, m)], cls


def test_the_pass_manager_runs_a_stage_it_has_never_seen(tmp_path):
    """A stage defined here, not in the pipeline: checked against the schedule by what it needs,
    told to the instruments, cached under its own key and taken from the cache when it accepts it."""
    class Tagged:
        name = "tagged"

        def __init__(self, need=("graph",)):
            self.need, self.runs, self.asked = need, 0, []

        def needs(self):
            return self.need

        def gives(self):
            return ()

        def cache_key(self):
            return "5fa9e0c1"

        def accepts(self, before, after):
            self.asked.append(after == before)
            return True

        def run(self, module):
            self.runs += 1
            return module

    class Seen(Instrument):
        def __init__(self):
            self.rows = []

        def after(self, name, key, hit, module):
            self.rows.append((name, key, hit))

    m = random_module(np.random.default_rng(0), 12, 2)
    s, seen = Tagged(), Seen()
    manager = PassManager([s], cache=PassCache(tmp_path / "c"), instruments=[seen])
    assert manager.run(m) == m and manager.run(m) == m
    assert s.runs == 1 and s.asked == [True]
    assert seen.rows == [("tagged", "5fa9e0c1", False), ("tagged", "5fa9e0c1", True)]
    try:
        PassManager([Tagged(need=("partition",))]).run(m)
    except HdpError as e:
        assert str(e).startswith("stage 'tagged' requires partition, which no earlier pass provides"), e
    else:
        raise AssertionError("a stage's unmet need was not refused")


def test_the_command_line_starts_without_heavy_imports():
    """``hdp --help`` imports hdp's modules at module level, but neither Numba (its kernels compile on
    first use, hdp.base.jit.Kernel) nor torch, OpenVINO, SciPy or OR-Tools."""
    import subprocess
    import sys

    code = ("import sys, hdp.cli.main; heavy = {'numba', 'torch', 'openvino', 'scipy', 'ortools', 'ray'}; "
            "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT.parent).stdout.strip()
    assert out == "[]"
