"""Targets: TOML decoding with field paths, validation, built-ins and `hdp targets`."""

import json
import re

import pytest
from click.testing import CliRunner

from hdp.base.errors import InputError
from hdp.cli.main import main
from hdp.target.devices import device_status
from hdp.target.target import Device, builtin_names, load_target, parse_target

GOOD = """
name = "t"
[[devices]]
name = "CPU"
config = { INFERENCE_PRECISION_HINT = "f32" }
[[devices]]
name = "GPU"
kind = "modeled"
peak_flops = { f32 = 1e12, f16 = 2e12 }
precision = "f16"
memory_bandwidth = 100e9
op_overhead = 5e-6
efficiency = 0.5
"""


def test_builtins_load():
    assert {"host", "virtual", "i9-flex170"} <= set(builtin_names())
    v = load_target("virtual")
    assert [(d.name, d.kind, d.alias) for d in v.devices] == [("CPU", "real", False), ("CPU_B", "real", True)]
    assert all("INFERENCE_PRECISION_HINT" in d.config for d in v.devices)  # bf16 is never implicit
    m = load_target("i9-flex170")
    assert not m.is_real and all(0 < d.efficiency <= 1 for d in m.devices)


def test_parse_good_and_defaults():
    t = parse_target(GOOD, "t.toml")
    assert t.device("GPU").efficiency == 0.5
    assert t.device("CPU").efficiency == 1.0 and t.link.bandwidth > 0


@pytest.mark.parametrize("text, path", [
    ('name="x"\n[[devices]]\nname="G"\nkind="modeled"\npeak_flops="fast"\n', "devices[0].peak_flops"),
    ('name="x"\n[[devices]]\nname="G"\nkind="gpu"\n', "devices[0].kind"),
    ('name="x"\n[[devices]]\nname="A"\n[[devices]]\nname="B"\nbogus=1\n', "devices[1]"),
    ('name="x"\n[[devices]]\nname="A"\n[link]\nbandwidth="fast"\n', "link.bandwidth"),
])
def test_type_errors_name_the_field_path(text, path):
    with pytest.raises(InputError) as e:
        parse_target(text, "bad.toml")
    msg = str(e.value)
    assert msg.startswith("bad.toml: invalid target: ") and path in msg


@pytest.mark.parametrize("old, new, path", [
    ("efficiency = 0.5", "efficiency = 1.5", "devices[1].efficiency"),
    ('precision = "f16"', 'precision = "f7"', "devices[1].precision"),
    ('precision = "f16"', 'precision = "bf16"', "devices[1].peak_flops"),
    ("memory_bandwidth = 100e9", "memory_bandwidth = 0", "devices[1].memory_bandwidth"),
    ("op_overhead = 5e-6", "op_overhead = -1.0", "devices[1].op_overhead"),
    ('name = "GPU"', 'name = "CPU"', "devices[1].name"),
])
def test_value_errors_name_the_field(old, new, path):
    assert old in GOOD
    with pytest.raises(InputError, match=path.replace("[", r"\[").replace("]", r"\]")):
        parse_target(GOOD.replace(old, new), "bad.toml")


def test_malformed_toml_and_unknown_target(tmp_path):
    with pytest.raises(InputError, match="malformed TOML"):
        parse_target("name = \n", "bad.toml")
    with pytest.raises(InputError, match="unknown target 'nope'.*virtual"):
        load_target("nope")
    p = tmp_path / "mine.toml"
    p.write_text(GOOD)
    assert load_target(str(p)).name == "t"
    with pytest.raises(InputError, match="no such target file"):
        load_target(str(tmp_path / "missing.toml"))


def test_device_status():
    assert device_status(Device(name="CPU"), ["CPU"]) == "present"
    assert device_status(Device(name="NPU"), ["CPU"]) == "absent"
    assert device_status(Device(name="GPU.1", plugin="GPU"), ["CPU", "GPU"]) == "present"
    assert device_status(Device(name="GPU"), ["CPU", "GPU.0", "GPU.1"]) == "present"
    assert device_status(Device(name="CPU_B", plugin="CPU", alias=True), ["CPU"]) == "present"
    assert device_status(Device(name="X", kind="modeled"), []) == "modeled"


def test_targets_command():
    r = CliRunner().invoke(main, ["targets"])
    assert r.exit_code == 0, r.output
    assert "virtual:" in r.output and "i9-flex170:" in r.output
    lines = {ln.split()[0]: ln for ln in r.output.splitlines() if ln.startswith("  CPU_B")}
    assert "present" in lines["CPU_B"]
    r = CliRunner().invoke(main, ["targets", "--json"])
    data = {t["name"]: t for t in json.loads(r.output)}
    assert [d["status"] for d in data["virtual"]["devices"]] == ["present", "present"]
    assert [d["status"] for d in data["i9-flex170"]["devices"]] == ["modeled", "modeled"]
    assert data["host"]["devices"][0]["name"] == "CPU"


@pytest.mark.parametrize("caps,said", [({"FP32", "INT8"}, True), ({"FP32", "BF16", "FP16"}, False)])
def test_targets_says_when_the_host_runs_a_bf16_device_in_f32(monkeypatch, caps, said):
    """virtual's CPU_B asks for bf16; a CPU without BF16 runs it in f32, and the two devices are then
    the same plugin in the same precision: hdp targets says so (a new user could not tell)."""
    from hdp.cli import runtime as cli_runtime

    monkeypatch.setattr(cli_runtime, "_cpu_capabilities", lambda: caps)
    r = CliRunner().invoke(main, ["targets"])
    assert r.exit_code == 0, r.output
    text = r.output.split("\nvirtual:", 1)[1]
    cpu_b = next(ln for ln in text.splitlines() if ln.startswith("  CPU_B"))
    assert ("has no BF16: it runs f32" in cpu_b) is said, cpu_b


def test_shares_name_devices_of_the_target_once():
    base = 'name = "t"\n[[devices]]\nname = "A"\n[[devices]]\nname = "B"\n'
    t = parse_target(base + '[[shares]]\nresource = "memory"\ndevices = ["A", "B"]\ncapacity = "8GiB"\n')
    assert t.sharing("memory", "A") == ("A", "B") and t.sharing("compute", "A") == ("A",)
    assert t.shares[0].capacity_bytes == 8 << 30
    for extra, msg in [('[[shares]]\nresource = "memory"\ndevices = ["A", "C"]\n', "shares[0].devices: no device 'C'"),
                       ('[[shares]]\nresource = "compute"\ndevices = ["A", "B"]\n[[shares]]\nresource = "compute"\n'
                        'devices = ["B", "A"]\n', "'B' already shares compute"),
                       ('[[shares]]\nresource = "compute"\ndevices = ["A", "B"]\ncapacity = "1G"\n', "not of shared compute"),
                       ('[[shares]]\nresource = "memory"\ndevices = ["A"]\n', "shares[0].devices"),
                       ('[[shares]]\nresource = "disk"\ndevices = ["A", "B"]\n', "shares[0].resource")]:
        with pytest.raises(InputError, match=re.escape(msg)):
            parse_target(base + extra, "t.toml")


def test_builtin_real_targets_say_their_devices_share_the_host():
    assert load_target("virtual").sharing("compute", "CPU") == ("CPU", "CPU_B")
    assert load_target("virtual-2x1").sharing("compute", "CPU") == ("CPU",)  # a core each
    assert load_target("virtual-2x1").sharing("memory", "CPU_B") == ("CPU", "CPU_B")
