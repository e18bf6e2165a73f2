"""Declared bounds (msgspec ``Meta`` / ``Literal``): placer options, training options, checkpoints
and targets are checked by their field declarations, and every error is one line naming the field.
"""

from __future__ import annotations

import math
from typing import Annotated

import msgspec
import pytest

from hdp.base.errors import InputError
from hdp.base.validation import Positive, convert, explain
from hdp.learn.config import PLACER_OPTIONS, ModelConfig, ParseConfig, TrainConfig
from hdp.placers.options import Auto, Hsdag, Optimal, method_from
from hdp.target.target import devices_target, parse_target


def one_line(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert "\n" not in msg and msg.strip() == msg
    return msg


# --- one declaration per training field -------------------------------------------------------

def _fields(cls) -> dict:
    return {f.name: f for f in msgspec.structs.fields(cls)}


def test_training_options_of_the_placers_are_trainconfigs_declarations():
    train = _fields(TrainConfig)
    seen = set()
    for cls in (Hsdag, Auto):
        own = _fields(cls)
        for name in PLACER_OPTIONS:
            if name in own:
                seen.add(name)
                assert own[name].type == train[name].type, (cls.name(), name)
    assert seen == set(PLACER_OPTIONS)  # every shared name is used by some placer
    # ... and they reach the trainer as given, the method's own defaults included
    for o in (Hsdag(episodes=3, samples=5, lr=0.2, hidden=7, algo="ppo", entropy=0.5, reward_shape="inverse",
                    baseline="ema"), Auto(), Auto(patience=3, samples=2)):
        cfg = TrainConfig.of(o, seed=9)
        assert cfg.seed == 9
        assert all(getattr(cfg, k) == getattr(o, k) for k in PLACER_OPTIONS if k in _fields(type(o)))


@pytest.mark.parametrize("samples, ok", [(1, False), (2, True), (0, False)])
def test_hsdag_auto_and_the_trainer_agree_on_samples(samples, ok):
    """The bound that used to differ (hsdag took 1, TrainConfig refused it): one declaration now."""
    outcomes = []
    for check in (lambda: method_from("hsdag", {"samples": str(samples)}),
                  lambda: method_from("auto", {"samples": samples}),
                  lambda: Hsdag(samples=samples).check(),
                  lambda: TrainConfig(samples=samples).check()):
        try:
            check()
            outcomes.append(None)
        except InputError as e:
            assert "must be an integer in [2, 4096]" in str(e) and "one batch" in str(e) and "'samples'" in str(e)
            outcomes.append(str(e).split("'samples' ", 1)[1])
    assert outcomes == [None] * 4 if ok else len(set(outcomes)) == 1 and outcomes[0] is not None


@pytest.mark.parametrize("method, options, field, words", [
    ("hsdag", {"hidden": "5000"}, "hidden", "in [1, 4096], got 5000"),
    ("hsdag", {"lr": "1"}, "lr", "in (0, 1), got 1.0"),
    ("hsdag", {"budget": "inf"}, "budget", "a number in [0, 604800], got inf"),
    ("hsdag", {"entropy": "nan"}, "entropy", "got nan"),
    ("hsdag", {"measure_runs": "0"}, "measure_runs", "in [1, 2147483647], got 0"),
    ("hsdag", {"reward": "guess"}, "reward", "one of 'auto', 'simulate', 'measure', got 'guess'"),
    ("hsdag", {"baseline": "mean"}, "baseline", "one of 'batch', 'ema'"),
    ("hsdag", {"cost_aware": "maybe"}, "cost_aware", "true or false, got 'maybe'"),
    ("hsdag", {"warm_start": "auto"}, "warm_start", "cannot be auto"),
    ("hsdag", {"episodes": "many"}, "episodes", "an integer, got 'many'"),
    ("auto", {"top": "-1"}, "top", "in [0, 2147483647]"),
    ("auto", {"singles": "0"}, "singles", "in [1, 2147483647]"),
    ("optimal", {"mip_gap": "1"}, "mip_gap", "in [0, 1)"),
    ("optimal", {"margin": "1"}, "margin", "best single device's latency"),
    ("optimal", {"time_limit": "0"}, "time_limit", "in (0, 604800]"),
    ("optimal:cplex", {}, "solver", "got 'cplex'"),
])
def test_placer_options_name_the_field_and_the_bound(method, options, field, words):
    with pytest.raises(InputError) as e:
        method_from(method, options)
    msg = one_line(e)
    assert msg.startswith(f"{method.partition(':')[0]} option '{field}' ") and words in msg, msg


def test_values_built_in_python_are_checked_through_the_same_declarations():
    assert Optimal(time_limit=-1.0).time_limit == -1.0  # msgspec checks on convert, not in __init__ ...
    with pytest.raises(InputError, match=r"optimal option 'time_limit' must be a number in \(0, 604800\], got -1.0"):
        Optimal(time_limit=-1.0).check()  # ... so what place() runs checks it again
    with pytest.raises(ValueError, match="warm_start"):  # a rule between fields runs in __init__ too
        Hsdag(warm_start="hsdag")
    with pytest.raises(InputError, match=r"training option 'parse\.max_group_frac' must be a number in \(0, 1\]"):
        TrainConfig(parse=ParseConfig(max_group_frac=0.0)).check()
    with pytest.raises(InputError, match=r"training option 'fail_factor' must be a number in \[1, 1e\+06\], got 0.5"):
        TrainConfig(fail_factor=0.5).check()
    assert TrainConfig(deadline=math.inf, max_seconds=0.0).check().deadline == math.inf  # inf: no limit
    with pytest.raises(InputError, match="'deadline' must be a number >= 0, got nan"):
        TrainConfig(deadline=math.nan).check()
    with pytest.raises(InputError, match=r"--devices: invalid target: devices\[1\]\.name: must be 1 to 64 letters"):
        devices_target(["CPU", "CPU B"])


def test_architecture_bounds_are_the_training_bounds():
    assert _fields(ModelConfig)["hidden"].type == _fields(TrainConfig)["hidden"].type
    assert _fields(ModelConfig)["gcn_layers"].type == _fields(TrainConfig)["gcn_layers"].type
    with pytest.raises(InputError, match="model 'hidden' must be an integer in"):
        convert({"in_width": 3, "feature_width": 2, "hidden": 0}, ModelConfig, lambda p, w: f"model '{p}' {w}")


# --- the messages -----------------------------------------------------------------------------

class _Inner(msgspec.Struct, forbid_unknown_fields=True):
    rates: dict[str, Positive]
    keys: dict[Annotated[str, msgspec.Meta(pattern="^[a-z]+$")], int] = {}


class _Outer(msgspec.Struct):
    items: list[_Inner]


@pytest.mark.parametrize("data, path, what", [
    ({"items": [{"rates": {"a": 1.0}}, {"rates": {"a": 1.0, "b c": -2.0}}]}, "items[1].rates['b c']",
     "must be a finite number > 0, got -2.0"),
    ({"items": [{"rates": {"ok": math.inf}}]}, "items[0].rates.ok", "must be a finite number > 0, got inf"),
    ({"items": [{}]}, "items[0].rates", "is missing"),
    ({"items": [{"rates": {}, "nope": 1}]}, "items[0].nope", "is not a known field"),
    ({"items": [{"rates": {}, "keys": {"a": 1, "B": 2}}]}, "items[0].keys",
     "has a key that must be a string matching regex '^[a-z]+$', got 'B'"),
    ({"items": "x"}, "items", "must be a list, got 'x'"),
])
def test_explain_follows_the_path_to_the_value(data, path, what):
    with pytest.raises(msgspec.ValidationError) as e:
        msgspec.convert(data, _Outer)
    assert explain(str(e.value), data, _Outer) == (path, what)


# --- targets ----------------------------------------------------------------------------------

MODELED = """
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
"""


@pytest.mark.parametrize("old, new, words", [
    ('name = "t"', 'name = "  "', "name: must be a string that is not blank"),
    ("f32 = 1e12", "f7 = 1e12", "devices[1].peak_flops: has a key that must be one of 'f64'"),
    ("f32 = 1e12", "f32 = 1e20", "devices[1].peak_flops.f32: must be a number in [1000, 1e+19], got 1e+20"),
    ("op_overhead = 5e-6", "op_overhead = 11.0", "devices[1].op_overhead: must be a number in [0, 10], got 11.0"),
    ('name = "CPU"', 'name = "CPU"\nplugin = "C P U"', "devices[0].plugin: must be empty or 1 to 64 letters"),
    ('INFERENCE_PRECISION_HINT = "f32"', '" " = "f32"', "devices[0].config: has a key that must be a string that is not blank"),
    ('name = "t"', 'name = "t"\n[link]\nlatency = 20.0', "link.latency: must be a number in [0, 10], got 20.0"),
    ("memory_bandwidth = 100e9", "memory_bandwidth = 10.0", "devices[1].memory_bandwidth: a modeled device needs one"),
])
def test_target_bounds_name_the_field_path(old, new, words):
    assert old in MODELED
    with pytest.raises(InputError) as e:
        parse_target(MODELED.replace(old, new, 1), "bad.toml")
    msg = one_line(e)
    assert msg.startswith("bad.toml: ") and words in msg, msg


def test_target_device_count_is_declared():
    many = 'name = "x"\n' + "".join(f'[[devices]]\nname = "D{i}"\n' for i in range(65))
    with pytest.raises(InputError, match=r"devices: must be a list of length <= 64, got a list of 65 items"):
        parse_target(many, "many.toml")
    with pytest.raises(InputError, match=r"none.toml: target has no devices \(field 'devices'\)"):
        parse_target('name = "x"\ndevices = []\n', "none.toml")


# --- checkpoints ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def saved_policy(tmp_path_factory):
    from test_learn import DEV2, FAST, blocks_module, reference

    from hdp.learn.graph import build_learn_graph
    from hdp.learn.trainer import train
    from hdp.placement.problem import build_problem

    m = blocks_module()
    ck = tmp_path_factory.mktemp("policy") / "ck.pt"
    train(build_learn_graph(m, build_problem(m, DEV2)), reference(m), TrainConfig(episodes=1, seed=1, checkpoint=str(ck), **FAST))
    return ck


@pytest.mark.parametrize("change, words", [
    (lambda ck: ck.update(version=2), "has version 2; this hdp reads up to 1"),
    (lambda ck: ck["model_config"].update(width=3), "field 'model_config.width' is not a known field"),
    (lambda ck: ck["parse_config"].update(max_rounds=0), "field 'parse_config.max_rounds' must be an integer in [1, 2147483647], got 0"),
    (lambda ck: ck["curve"][0].pop("source"), "field 'curve[0].source' is missing"),
    (lambda ck: ck["curve"][0].update(failed=2), "field 'curve[0].failed' must be one of 0, 1, got 2"),
    (lambda ck: ck.update(cache={"0001": -1.0}), "field 'cache.0001' must be a finite number > 0, got -1.0"),
    (lambda ck: ck.update(cache={"abc": 1.0}), "field 'cache' has a key that must be a string matching regex"),
    (lambda ck: ck.update(best_latency=math.nan), "field 'best_latency' must be a number > 0, got nan"),
    (lambda ck: ck.update(ema=math.inf), "field 'ema' must be a finite number, got inf"),
    (lambda ck: ck.update(episode=True), "field 'episode' must be an integer, got True"),
    (lambda ck: ck.update(generator=ck["generator"].float()), "field 'generator' must be a 1-D uint8 tensor"),
    (lambda ck: ck.update(best_device_of=None), "field 'best_device_of' is None but best_latency is set"),
    # msgspec raises what reading a tensor raises where a Struct is declared (IndexError): still named
    (lambda ck: ck.update(model_config=__import__("torch").zeros(3)), "field 'model_config' must be a dictionary, got a Tensor"),
])
def test_checkpoint_fields_are_declared(saved_policy, tmp_path, change, words):
    import torch

    from hdp.learn.checkpoint import load_checkpoint

    assert load_checkpoint(str(saved_policy)).model_config.hidden == 32
    ck = torch.load(saved_policy, weights_only=True)
    change(ck)
    bad = tmp_path / "bad.pt"
    torch.save(ck, bad)
    with pytest.raises(InputError) as e:
        load_checkpoint(str(bad))
    msg = one_line(e)
    assert msg.startswith(f"policy checkpoint '{bad}'") and words in msg, msg
