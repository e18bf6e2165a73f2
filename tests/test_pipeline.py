"""``compile`` as a pipeline: the text form (parse and print round-trip, errors at a column), the
default pipeline as text, flags filling it, and ``compile_model`` running lower, the passes, check
and raise through one manager."""

import json
import os

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from hdp.cli.main import main
from hdp.passes.instruments import Timing
from hdp.pipeline.compile import compile_model
from hdp.pipeline.schedule import build_passes, compile_schedule, default_text, pipeline_specs
from hdp.pipeline.text import PassSpec, PipelineError, parse_pipeline, print_pipeline
from hdp.target.target import devices_target, load_target


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


# ----------------------------------------------------------------------------- the text


def test_parse_and_print_round_trip():
    text = 'support , profile,coarsen{ groups = 64 },partition{method="hetero-auto:NPU,CPU",seed=2},assign{}'
    specs = parse_pipeline(text)
    assert specs == [PassSpec("support"), PassSpec("profile"), PassSpec("coarsen", (("groups", "64"),)),
                     PassSpec("partition", (("method", "hetero-auto:NPU,CPU"), ("seed", "2"))), PassSpec("assign")]
    canonical = 'support,profile,coarsen{groups=64},partition{method="hetero-auto:NPU,CPU",seed=2},assign'
    assert print_pipeline(specs) == canonical
    assert parse_pipeline(canonical) == specs
    odd = parse_pipeline(r'partition{policy="a \"b\" \\ {c}=d",report=""}')[0]
    assert odd.options == (("policy", 'a "b" \\ {c}=d'), ("report", ""))
    assert parse_pipeline(print_pipeline([odd])) == [odd]


_names = st.from_regex(r"[a-z][a-z0-9_-]{0,8}", fullmatch=True)
_values = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_names, st.dictionaries(_names, _values, max_size=4)), min_size=1, max_size=5))
def test_round_trip_property(passes):
    specs = [PassSpec(n, tuple(opts.items())) for n, opts in passes]
    text = print_pipeline(specs)
    assert parse_pipeline(text) == specs
    assert print_pipeline(parse_pipeline(text)) == text


@pytest.mark.parametrize("text, column, needle", [
    ("", 1, "expected a pass name, found the end"),
    ("support,,assign", 9, "expected a pass name, found ','"),
    ("coarsen{groups 3}", 16, "expected '=' after option 'groups'"),
    ("coarsen{groups=3}}", 18, "expected ',' between passes"),
    ('partition{method="single:CPU}', 18, "quoted value is not closed"),
    ("coarsen{groups=1,groups=2}", 18, "option 'groups' of pass 'coarsen' is given twice"),
    ("coarsen{groups=a,b}", 19, 'after option \'b\', found \'}\' (a value holding a comma is quoted: key="a,b")'),
])
def test_syntax_errors_name_the_column(text, column, needle):
    with pytest.raises(PipelineError) as e:
        parse_pipeline(text)
    assert e.value.column == column and needle in str(e.value) and str(e.value).startswith(f"at column {column}:")


@pytest.mark.parametrize("text, column, needle", [
    ("support,profile,coarsen{grups=64},partition{method=optimal},assign", 25,
     "unknown option 'grups' of pass 'coarsen' (its options: rule, fold_constants, groups)"),
    ("support,frob,assign", 9, "unknown pass 'frob'"),
    ("support,profile,coarsen{groups=x},partition{method=optimal},assign", 32, "option 'groups' must be an integer"),
    ("support,profile,coarsen{groups=-1},partition{method=optimal},assign", 32, "groups=-1 must be >= 0"),
    ("support,profile,partition{method=magic},assign", 34, "unknown method 'magic'"),
    ("support,profile,partition{method=optimal,margin=2},assign", 49, "optimal option 'margin' must be a number in [0, 1)"),
    ("support,profile,partition{method=optimal:foo},assign", 34, "optimal option 'solver' must be one of"),
    ("support,profile,partition{method=optimal,budget=3},assign", 42,
     "unknown option 'budget' of pass 'partition' with method 'optimal'"),
    ("support,profile,partition{method=optimal,seed=x},assign", 47, "option 'seed' must be an integer"),
    ("support,partition{method=optimal},assign", 9, "pass 'partition' requires costs, which no earlier pass provides"),
    ("support,profile,partition{method=optimal},assign{refine=maybe}", 57, "option 'refine' must be true or false"),
])
def test_build_errors_name_the_column(text, column, needle):
    t = load_target("virtual")
    with pytest.raises(PipelineError) as e:
        build_passes(pipeline_specs(t, text), t)
    assert e.value.column == column and needle in str(e.value), str(e.value)


# ----------------------------------------------------------------------------- the default is text


@pytest.mark.parametrize("target, method, options, refine, seed", [
    ("virtual", "auto", None, False, 0), ("virtual", "optimal", None, True, 0), ("i9-flex170", "auto", None, False, 0),
    ("virtual", "hsdag", {"budget": 5.0, "reward": "simulate"}, False, 3), ("virtual", "auto", {"learn": "no"}, False, 0),
    ("i9-flex170", "hetero-auto:GPU,CPU", None, False, 0), ("virtual", "single:CPU_B", None, False, 1),
    ("virtual", "optimal", {"margin": "0.1", "solver": "ilp", "boundary_penalty": "none"}, False, 0),
    ("virtual", "hetero-auto", {"priority": "CPU_B,CPU"}, False, 0),
])
def test_default_pipeline_text_builds_the_schedule(target, method, options, refine, seed):
    t = load_target(target)
    text = default_text(t, method, options, refine, seed or None)
    assert build_passes(parse_pipeline(text), t) == compile_schedule(t, method, seed, options, refine)


def test_default_texts():
    assert default_text(load_target("virtual")) == "support,profile,features,coarsen,partition{method=auto},assign"
    assert default_text(load_target("i9-flex170")) == "support,profile,partition{method=auto},assign"
    assert default_text(devices_target(["CPU"])) == "support,partition{method=single:CPU},assign"
    assert default_text(load_target("virtual"), "optimal", {"margin": 0.1}, True) == \
        "support,profile,partition{method=optimal,margin=0.1},assign{refine=true}"


def test_hdp_passes_prints_the_default_text():
    """``hdp passes --target T [--method M]`` prints exactly the default pipeline text (what
    ``--passes`` takes back); the listing without a target shows the defaults of both kinds of target."""
    for target, method in (("virtual", None), ("virtual", "heft"), ("i9-flex170", None)):
        r = run("passes", "--target", target, *(["--method", method] if method else []))
        assert r.exit_code == 0, r.output
        assert r.output == default_text(load_target(target), method) + "\n"
    r = run("passes", "--devices", "CPU")
    assert r.output == "support,partition{method=single:CPU},assign\n"
    listing = run("passes").output
    assert default_text(load_target("virtual")) in listing and default_text(load_target("i9-flex170")) in listing
    r = run("passes", "--target", "virtual", "--method", "magic")
    assert r.exit_code == 2 and "Traceback" not in r.output and "magic" in r.output


def test_flags_fill_the_text_and_may_not_contradict_it():
    t = load_target("virtual")
    text = "support,profile,partition,assign"
    specs = pipeline_specs(t, text, "optimal", 3, {"margin": 0.2}, True)
    assert print_pipeline(specs) == "support,profile,partition{method=optimal,seed=3,margin=0.2},assign{refine=true}"
    # no --method and none in the text: the target's default method
    assert print_pipeline(pipeline_specs(t, "support,partition,assign")) == "support,partition{method=auto},assign"
    # agreeing is fine, contradicting is an error at the text's value
    assert pipeline_specs(t, "support,profile,partition{method=optimal},assign", "optimal")
    with pytest.raises(PipelineError, match=r"at column 34: option 'method' of pass 'partition' is 'optimal' here "
                                            r"and 'heft' from --method: give one"):
        pipeline_specs(t, "support,profile,partition{method=optimal},assign", "heft")
    with pytest.raises(PipelineError, match="'false' here and 'true' from --refine"):
        pipeline_specs(t, "support,profile,partition,assign{refine=false}", refine=True)
    with pytest.raises(PipelineError, match="--refine: the pipeline has no 'assign' pass"):
        pipeline_specs(t, "support,profile,partition", refine=True)


# ----------------------------------------------------------------------------- compile


def test_compile_passes_text_gives_the_default_bytes(branchy_xml, tmp_path, cache_dir):
    """``--passes "$(hdp passes --target T)"`` is the default compile: every pass a cache hit of
    the default's entries (the same pass values), the same placed model byte for byte."""
    r = run("passes", "--target", "virtual", "--method", "optimal")
    assert r.exit_code == 0, r.output
    text = r.output.strip()
    assert text == "support,profile,partition{method=optimal},assign"
    a, b = tmp_path / "a.xml", tmp_path / "b.xml"
    common = ["--target", "virtual", "--cache-dir", cache_dir, "--no-compare", "-q"]
    assert run("compile", branchy_xml, "-o", a, "--method", "optimal", *common).exit_code == 0
    r = run("compile", branchy_xml, "-o", b, "--passes", text, "--timings", tmp_path / "t.json", *common)
    assert r.exit_code == 0, r.output
    rows = json.loads((tmp_path / "t.json").read_text())
    assert [(x["pass"], x["cache_hit"]) for x in rows] == [
        ("lower", True), ("support", True), ("profile", True), ("partition", True), ("assign", True),
        ("check", False), ("raise", False)]
    assert a.read_bytes() == b.read_bytes() and a.with_suffix(".bin").read_bytes() == b.with_suffix(".bin").read_bytes()


def test_compile_modeled_default_and_text_same_bytes_without_cache(branchy_xml, tmp_path):
    text = run("passes", "--target", "i9-flex170").output.strip()
    outs = []
    for i, extra in enumerate(([], ["--passes", text])):
        out = tmp_path / f"p{i}.xml"
        r = run("compile", branchy_xml, "-o", out, "--target", "i9-flex170", "--no-cache", "--no-check", "-q", *extra)
        assert r.exit_code == 0, r.output
        outs.append(out)
    assert outs[0].read_bytes() == outs[1].read_bytes()


def test_bad_pipeline_text_is_one_line_at_a_column(branchy_xml, tmp_path):
    out = tmp_path / "out.xml"
    out.write_text("previous")
    r = run("compile", branchy_xml, "-o", out, "--target", "virtual", "--no-cache", "--passes",
            "support,profile,coarsen{grups=64},partition{method=optimal},assign")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.output.strip().splitlines() == [
        "hdp: error: --passes: at column 25: unknown option 'grups' of pass 'coarsen' "
        "(its options: rule, fold_constants, groups)"]
    r = run("compile", branchy_xml, "-o", out, "--target", "virtual", "--no-cache", "--method", "heft",
            "--passes", "support,profile,partition{method=optimal},assign")
    assert r.exit_code == 2 and "--passes: at column 34: option 'method' of pass 'partition' is 'optimal' here and " \
                                "'heft' from --method" in r.output
    r = run("compile", branchy_xml, "-o", out, "--target", "virtual", "--no-cache", "--passes", "support,profile")
    assert r.exit_code == 2 and "--passes: at column 16:" in r.output and "'raise' requires placement" in r.output
    assert out.read_text() == "previous"


def test_compile_model_from_python(branchy_xml, tmp_path, cache_dir):
    """The pipeline text with options no flag reaches (coarsen's groups), run from Python: lower,
    the passes, check and raise are rows of one timing; the report is returned."""
    from hdp.passes.cache import PassCache

    said = []
    res = compile_model(branchy_xml, tmp_path / "p.xml", "virtual", cache=PassCache(cache_dir),
                        passes="support,profile,features,coarsen{groups=2},partition{method=random,seed=4},assign",
                        emit_ir=tmp_path / "m.hdp", echo=said.append, verbose=True)
    assert res.pipeline == "support,profile,features,coarsen{groups=2},partition{method=random,seed=4},assign"
    assert [r["pass"] for r in res.timings] == ["lower", "support", "profile", "features", "coarsen", "partition",
                                                "assign", "check", "raise"]
    assert res.module.coarse.n_groups == 2 and res.module.placement.method == "random"
    assert res.check is not None and res.check.passed
    assert res.lines == said and said[0].startswith("11 ops placed (") and " on virtual with random -> " in said[0]
    assert any(x.startswith("checked: runs under HETERO") for x in said) and said[-2].startswith("time: ")
    # the short report: what was placed where, the check, the verdict, the time, what to run next
    assert len(res.summary) <= 6 and res.summary[0] == said[0] and res.summary[-1].startswith("next: ")
    assert [x.split(":")[0] for x in res.summary[1:]] == ["checked", "verdict", "time", "next"]
    assert set(res.written) == {"placed", "ir"} and all(p.exists() for p in res.written.values())


def test_repair_places_again_with_the_partition_pass_found_by_type(branchy_xml, cache_dir):
    """The check's re-placement runs the pipeline's partition pass (wherever it is) with the
    learned ties, then every pass after it, through the same manager."""
    from hdp.ir.openvino_frontend import lower
    from hdp.passes.cache import PassCache
    from hdp.passes.manager import PassManager
    from hdp.pipeline.stages import Check

    t = load_target("virtual")
    passes = build_passes(parse_pipeline("support,partition{method=single:CPU_B},assign,features"), t)
    timing = Timing()
    manager = PassManager(passes, cache=PassCache(cache_dir), instruments=[timing])
    module = manager.run(lower(branchy_xml))
    again = Check(t, manager, passes).replace(module, ((1, 2),))
    assert again.partition.extra_ties.numpy().tolist() == [[1, 2]]
    assert again.placement is not None and again.features is not None
    assert [r["pass"] for r in timing.rows[-3:]] == ["partition", "assign", "features"]
    assert not any(r["cache_hit"] for r in timing.rows[-3:-1])  # new ties: new keys


HINT = "raise --timeout, or write the placement unchecked with --no-check"


@pytest.mark.parametrize("errors", [{0: "timed out after 300 s; worker killed", 1: "timed out after 300 s; worker killed"},
                                    {0: "timed out after 300 s; worker killed", 1: "Subgraph 3 of GPU: unsupported op"},
                                    {0: "Subgraph 3 of CPU: unsupported op", 1: "Subgraph 3 of GPU: unsupported op"}],
                         ids=["every-check-timed-out", "one-timed-out", "none-timed-out"])
def test_a_failed_placement_is_not_checked_again_as_a_fallback(errors):
    """A placement with every op on one device that fails its check (a compile that timed out, say)
    is not checked a second time when the fallback comes to that same device: each check of the
    20,000-op chain sharing one Constant costs the check's whole timeout. The error names
    --timeout and --no-check only when every check timed out (a real failure is not the timeout's)."""
    import numpy as np

    from hdp.base.errors import InputError
    from hdp.passes.manager import PassManager
    from hdp.pipeline.schedule import make_pass
    from hdp.runtime.serve.verify import CheckResult, verify_and_repair
    from hdp.zoo.synth import random_module

    t = load_target("i9-flex170")
    module = PassManager([make_pass("support", {"target": t}), make_pass("profile", {"target": t}),
                          make_pass("partition", {"target": t, "method": "single:CPU"}),
                          make_pass("assign", {})]).run(random_module(30))

    class Failing:
        def __init__(self):
            self.seen = []

        def _fail(self, device_of):
            used = tuple(np.unique(device_of).tolist())
            self.seen.append(used)
            return CheckResult(passed=False, error=errors[used[0]] if len(used) == 1 else "mixed: unsupported op")

        def check_module(self, m):
            return self._fail(m.placement.device_of.numpy())

        def check(self, device_of, devices):
            return self._fail(device_of)

    checker = Failing()
    with pytest.raises(InputError, match="every op on GPU fails the check: .*every op on CPU fails") as e:
        verify_and_repair(module, t, lambda m, ties: m, checker)
    assert (HINT in str(e.value)) == (set(errors.values()) == {"timed out after 300 s; worker killed"}), e.value
    assert checker.seen.count((0,)) == 1 and checker.seen.count((1,)) == 1, checker.seen


def test_timing_nests():
    t = Timing()
    t.before("check", "")
    t.before("partition", "k")
    t.after("partition", "k", False, None)
    t.after("check", "", False, None)
    assert [r["pass"] for r in t.rows] == ["partition", "check"]
    assert t.rows[1]["seconds"] >= t.rows[0]["seconds"]


def test_one_worker_serves_support_profile_and_the_check(branchy_xml, tmp_path, monkeypatch):
    """The check loads the model as support and profile did (its target is the same when every
    device is real), so it takes over their worker, model read, even though hdp.base.jit sets Numba's
    cache directory in the environment when the placer makes its first kernel, in between."""
    from hdp.base.jit import ENV
    from hdp.passes.partition import PartitionPass
    from hdp.runtime.measure import worker_client as wc

    starts = []
    real_start, real_run = wc.WorkerProcess.start, PartitionPass.run

    def start(self):
        starts.append(self)
        return real_start(self)

    def run(self, module):
        os.environ[ENV] = str(tmp_path / "numba")  # (undone by monkeypatch below)
        return real_run(self, module)

    monkeypatch.setenv(ENV, os.environ.get(ENV, ""))
    monkeypatch.setattr(wc.WorkerProcess, "start", start)
    monkeypatch.setattr(PartitionPass, "run", run)
    res = compile_model(branchy_xml, tmp_path / "p.xml", "virtual", method="heft")
    assert res.check is not None and res.check.passed
    assert len(starts) == 1


def test_the_written_file_is_what_is_checked_and_it_is_compiled_once(branchy_xml, tmp_path, monkeypatch):
    """With a check, the placement is saved to a temporary file beside the output, that file is
    checked (one HETERO compile in the worker) and it is what gets committed: no second check of
    the same placement before or after writing (each worker check compiles the 20,000-op model)."""
    from hdp.runtime.measure.measurer import Measurer

    calls = []
    real = Measurer.check

    def counted(self, *a, **kw):
        xml = kw.get("xml")
        calls.append((xml, open(xml, "rb").read() if xml is not None else None))
        return real(self, *a, **kw)

    monkeypatch.setattr(Measurer, "check", counted)
    out = tmp_path / "p.xml"
    res = compile_model(branchy_xml, out, "virtual", method="heft")
    assert res.check is not None and res.check.passed
    assert len(calls) == 1, [c[0] for c in calls]
    xml, seen = calls[0]
    assert xml is not None and xml != str(out) and seen == out.read_bytes()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # the staged directory is gone
    calls.clear()
    compile_model(branchy_xml, tmp_path / "q.xml", "virtual", method="heft", check=False)
    assert not calls and (tmp_path / "q.xml").is_file()
