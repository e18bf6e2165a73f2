import json

import msgspec
import numpy as np
import pytest

from hdp.base.errors import HdpError, InputError, PassError
from hdp.ir import serde
from hdp.ir.openvino_frontend import lower
from hdp.passes.cache import PassCache
from hdp.passes.instruments import Timing
from hdp.passes.manager import PassManager, check_schedule, pass_key
from hdp.pipeline.schedule import compile_schedule, make_pass
from hdp.target.target import devices_target, load_target


def test_schedule_is_validated():
    with pytest.raises(HdpError, match="requires partition"):
        check_schedule([make_pass("assign", {})], ["graph"])


def test_pass_key_depends_on_options_and_input():
    t = devices_target(["CPU"])
    a = make_pass("partition", {"target": t, "method": "single:CPU"})
    b = make_pass("partition", {"target": t, "method": "hetero-auto"})
    assert pass_key(a, "d1") != pass_key(b, "d1")
    assert pass_key(a, "d1") != pass_key(a, "d2")
    assert pass_key(a, "d1") == pass_key(make_pass("partition", {"target": t, "method": "single:CPU"}), "d1")


def test_options_convert_and_unknown_rejected():
    t = devices_target(["CPU"])
    p = make_pass("partition", {"target": t, "seed": "7"})
    assert p.seed == 7
    with pytest.raises(InputError, match="bogus"):
        make_pass("partition", {"target": t, "bogus": "1"})
    with pytest.raises(InputError, match="unknown pass 'nope'"):
        make_pass("nope", {})


def test_cache_hit_same_output_and_corrupt_entry(branchy_xml, cache_dir):
    m = lower(branchy_xml)
    sched = compile_schedule(devices_target(["CPU"]), "single:CPU")
    t1, t2 = Timing(), Timing()
    out1 = PassManager(sched, cache=PassCache(cache_dir), instruments=[t1]).run(m)
    out2 = PassManager(sched, cache=PassCache(cache_dir), instruments=[t2]).run(m)
    assert [r["cache_hit"] for r in t1.rows] == [False] * 3
    assert [r["cache_hit"] for r in t2.rows] == [True] * 3
    assert serde.encode(out1) == serde.encode(out2)
    # corrupt one entry: it is discarded with a warning and recomputed
    entry = next(cache_dir.rglob("*.hdp"))
    entry.write_bytes(entry.read_bytes()[:-5] + b"xxxxx")
    t3 = Timing()
    with pytest.warns(UserWarning, match="corrupt cache entry"):
        out3 = PassManager(sched, cache=PassCache(cache_dir), instruments=[t3]).run(m)
    assert serde.encode(out3) == serde.encode(out1)
    assert sum(not r["cache_hit"] for r in t3.rows) >= 1


def test_hetero_auto_uses_priority_order(branchy_xml):
    m = lower(branchy_xml)
    t = load_target("virtual")
    out = PassManager(compile_schedule(t, "hetero-auto")).run(m)
    assert set(out.placement.device_of.numpy().tolist()) == {0}  # CPU supports everything, first
    out = PassManager(compile_schedule(t, "hetero-auto:CPU_B,CPU")).run(m)
    assert set(out.placement.device_of.numpy().tolist()) == {1}


def test_assign_expands_groups_constants_follow_consumers_results_producers(branchy_xml):
    from hdp.ir.types import Array, Partition
    from hdp.placement.problem import build_problem

    m = lower(branchy_xml)
    m = make_pass("support", {"target": load_target("virtual")}).run(m)
    names = [op.name for op in m.graph.ops]
    p = build_problem(m, ("CPU", "CPU_B"))
    st = p.structure
    gof = dict(zip(names, st.group_of.tolist()))
    # conv and relu on CPU, every other group on CPU_B
    gd = np.ones(p.n_groups, np.int16)
    gd[[gof["conv"], gof["relu"]]] = 0
    part = Partition("manual", ("CPU", "CPU_B"), Array.of(st.anchor, np.int32), Array.of(gd))
    out = make_pass("assign", {}).run(m.replace(partition=part)).placement.device_of.numpy()
    d = dict(zip(names, out.tolist()))
    assert d["w"] == d["x"] == d["conv"] == 0  # the weight shows its consumer's device, x is tied to conv
    assert d["axis"] == d["split"] == 1
    assert d["feat"] == d["relu"] == 0 and d["out"] == d["sum"] == 1  # Results with their producers
    # a partition of another graph, or one that puts a group where it cannot run, is refused
    bad = Partition("manual", ("CPU", "CPU_B"), Array.of(np.arange(len(names), dtype=np.int32)),
                    Array.of(np.zeros(len(names), np.int16)))
    with pytest.raises(InputError, match="groups"):
        make_pass("assign", {}).run(m.replace(partition=bad))
    mask = m.support.mask.numpy().copy()
    mask[names.index("split"), 1] = False
    m2 = m.replace(support=msgspec.structs.replace(m.support, mask=Array.of(mask)))
    with pytest.raises(InputError, match="'split'.*CPU_B"):
        make_pass("assign", {}).run(m2.replace(partition=part))


def test_failing_pass_is_named(branchy_xml):
    m = lower(branchy_xml)
    with pytest.raises(PassError, match="pass 'partition'.*unknown device 'GPU'"):
        PassManager(compile_schedule(devices_target(["CPU"]), "single:GPU")).run(m)


def test_timings_json(branchy_xml, tmp_path):
    t = Timing()
    PassManager(compile_schedule(devices_target(["CPU"]), "single:CPU"), instruments=[t]).run(lower(branchy_xml))
    t.write(tmp_path / "t.json")
    rows = json.loads((tmp_path / "t.json").read_text())
    assert [r["pass"] for r in rows] == ["support", "partition", "assign"]
    assert all(r["seconds"] >= 0 and len(r["key"]) == 32 for r in rows)


def test_one_placer_registry_the_cli_hdp_passes_and_the_partition_pass_agree():
    """Issue 33: each options class names its implementation once; METHODS, the Method union the
    partition pass holds, ``hdp passes``, and what ``--method`` accepts and refuses are the same."""
    import re
    import typing

    from click.testing import CliRunner

    from hdp.base.errors import InputError
    from hdp.cli.main import main
    from hdp.passes.partition import PartitionPass
    from hdp.pipeline.schedule import make_pass
    from hdp.placers import implementation
    from hdp.placers.options import METHODS, Method, PlacerOptions, method_from
    from hdp.target.target import load_target

    assert set(METHODS.values()) == set(typing.get_args(Method)) == set(PlacerOptions.__subclasses__())
    for name, cls in METHODS.items():
        assert cls.name() == name and callable(implementation(name)), name
        assert type(method_from(name)) is cls
    # the partition pass takes every method by its tag, through the generic option path
    t = load_target("i9-flex170")
    for name in METHODS:
        assert make_pass("partition", {"target": t, "method": name}).placer.name() == name
    # hdp passes lists them all, and nothing else, under "methods"
    out = CliRunner().invoke(main, ["passes"]).output
    listed = re.findall(r"^  ([a-z][\w-]*) ", out.split("\nmethods (")[1].split("\nterms used")[0], re.M)
    assert sorted(listed) == sorted(METHODS)
    # --method refuses a method not in the registry, naming the registry's
    with pytest.raises(InputError, match=re.escape(f"(known: {', '.join(sorted(METHODS))})")):
        method_from("magic")
    r = CliRunner().invoke(main, ["passes", "--target", "i9-flex170", "--method", "magic"])
    assert r.exit_code == 2 and f"(known: {', '.join(sorted(METHODS))})" in r.output, r.output
    assert PartitionPass.known_options({"method": "optimal"})[0][-len(METHODS["optimal"].__struct_fields__):] \
        == METHODS["optimal"].__struct_fields__
