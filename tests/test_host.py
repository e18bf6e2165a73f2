"""The host fingerprint, and pass-cache keys that include it for passes that touch real devices."""

import re

import pytest

import hdp.target.host as host
from hdp.passes import manager
from hdp.passes.manager import PassManager, pass_key
from hdp.pipeline.schedule import make_pass
from hdp.runtime.measure import cache as measure_cache
from hdp.target.target import load_target


def test_host_facts_and_fingerprint():
    facts = host.host_facts()
    assert set(facts) >= {"cpu", "flags", "cpus", "machine", "openvino"}
    assert facts["openvino"].startswith("20") and int(facts["cpus"]) >= 1
    assert re.fullmatch(r"[0-9a-f]{24}", host.host_fingerprint())
    assert host.host_fingerprint() == host.host_fingerprint()


@pytest.fixture
def other_host(monkeypatch):
    """Pretend to be another machine (another CPU or OpenVINO version)."""
    def switch():
        # where it is called: the pass manager's keys and the measurement cache's
        monkeypatch.setattr(manager, "host_fingerprint", lambda: "another-host")
        monkeypatch.setattr(measure_cache, "host_fingerprint", lambda: "another-host")
    return switch


@pytest.mark.parametrize("name, opts", [("support", {}), ("profile", {"runs": 2})])
def test_real_device_passes_are_keyed_by_host(name, opts, other_host):
    real = make_pass(name, dict(opts, target=load_target("virtual")))
    modeled = make_pass(name, dict(opts, target=load_target("i9-flex170")))
    assert real.depends_on_host() and not modeled.depends_on_host()
    here = pass_key(real, "digest"), pass_key(modeled, "digest")
    other_host()
    there = pass_key(real, "digest"), pass_key(modeled, "digest")
    assert here[0] != there[0]  # a real-device result is not reused on another machine
    assert here[1] == there[1]  # a modeled one is: it does not depend on the host


def test_other_passes_keep_their_keys(other_host):
    p = make_pass("coarsen", {})
    assert not p.depends_on_host()
    before = pass_key(p, "digest")
    other_host()
    assert pass_key(p, "digest") == before


def test_pass_manager_misses_on_another_host(branchy_xml, cache_dir, other_host):
    from hdp.ir.openvino_frontend import lower
    from hdp.passes.cache import PassCache
    from hdp.passes.instruments import Timing

    m = lower(branchy_xml)
    sched = [make_pass("support", {"target": load_target("virtual")})]
    cache = PassCache(cache_dir)
    t1, t2, t3 = Timing(), Timing(), Timing()
    PassManager(sched, cache=cache, instruments=[t1]).run(m)
    PassManager(sched, cache=cache, instruments=[t2]).run(m)
    other_host()
    PassManager(sched, cache=cache, instruments=[t3]).run(m)
    assert [t.rows[-1]["cache_hit"] for t in (t1, t2, t3)] == [False, True, False]
