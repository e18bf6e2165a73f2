"""The isolated runner of the fuzz suite: ``python -m fuzz_worker`` (cwd tests/), see fuzzkit.py.

Reads framed msgpack requests on stdin (``{"op": "cli", "argv": [...]}`` runs ``hdp argv`` with
click's CliRunner; ``{"op": "cli_interrupt", "argv": [...], "delay": s}`` the same, sent SIGINT
after ``delay`` seconds; ``{"op": "placed", "xml": path}`` compiles a placed model with HETERO and runs
it once) and answers ``exit_code``, ``output``, ``traceback`` on stdout. A crash ends the process;
the parent sees the signal.
"""

from __future__ import annotations

import os
import sys
import traceback


def main() -> None:
    import msgspec
    from fuzzkit import run_inprocess

    from hdp.runtime.measure.protocol import read_frame, write_msg

    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    while True:
        data = read_frame(sys.stdin.buffer)
        if data is None:
            return
        req = msgspec.msgpack.decode(data)
        if req["op"] == "cli":
            o = run_inprocess(req["argv"])
            write_msg(out, {"exit_code": o.exit_code, "output": o.output, "traceback": o.traceback})
        elif req["op"] == "cli_interrupt":
            o = run_interrupted(req["argv"], req["delay"], req.get("env") or {})
            write_msg(out, {"exit_code": o.exit_code, "output": o.output, "traceback": o.traceback})
        elif req["op"] == "placed":
            try:
                run_placed(req["xml"])
                write_msg(out, {"exit_code": 0, "output": "", "traceback": ""})
            except Exception:  # noqa: BLE001 - reported to the parent as an invalid result
                write_msg(out, {"exit_code": 1, "output": traceback.format_exc(), "traceback": ""})


def run_interrupted(argv, delay: float, env: dict):
    """``hdp argv`` in-process with SIGINT sent to this process ``delay`` seconds after hdp's main
    starts (from a SIGALRM handler, so SIGINT meets whatever disposition the command gave it then;
    disarmed when main returns). A KeyboardInterrupt that escapes while main runs is what the suite
    looks for; one that lands after main returned (the alarm fired as it was disarmed) is not the
    command's: its files are judged (every output there: exit 0, none: an interrupted exit)."""
    import signal
    import time

    from click.testing import CliRunner  # noqa: F401 - imported before the alarm is armed
    from fuzzkit import Outcome, run_inprocess

    _import_everything()

    from hdp.cli.main import main as group

    state = {"armed": False, "in_main": False}
    orig = group.main

    def timed_main(*a, **kw):
        state["in_main"] = state["armed"] = True
        entered = []

        def inner():
            entered.append(True)
            return orig(*a, **kw)

        try:
            signal.setitimer(signal.ITIMER_REAL, max(delay, 1e-4))
            return inner()
        except KeyboardInterrupt:
            if entered:
                raise  # out of hdp's main: a finding
            # before hdp's main ran (here, the timer fired at once): what hdp's entry point answers then
            print("hdp: interrupted", file=sys.stderr)
            raise SystemExit(130) from None
        finally:
            state["armed"] = False
            state["in_main"] = False
            signal.setitimer(signal.ITIMER_REAL, 0)

    def alarm(*_):
        if state["armed"]:
            os.kill(os.getpid(), signal.SIGINT)

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    old = signal.signal(signal.SIGALRM, alarm)
    group.main = timed_main
    result = None
    try:
        try:
            result = run_inprocess(argv)
            time.sleep(0.01)  # a SIGINT already on its way lands here, outside the command
        except KeyboardInterrupt:
            if result is None and state["in_main"]:
                result = Outcome(exit_code=1, output="KeyboardInterrupt escaped the command",
                                 traceback=traceback.format_exc())
            elif result is None:
                result = Outcome(exit_code=-1, output="interrupted after the command returned")
    finally:
        del group.main
        signal.signal(signal.SIGALRM, old)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return result


def _import_everything() -> None:
    """Import what commands import lazily (torch, torch_geometric, the learned placers' modules):
    an interrupt that lands in an import leaves a half-initialised module in this process, which
    every later command in it would trip on (a real ``hdp`` process ends with its interrupt)."""
    import importlib
    import pkgutil

    import hdp

    for m in pkgutil.walk_packages(hdp.__path__, "hdp."):
        if not m.name.endswith("__main__") and ".cli.entry" not in m.name:
            importlib.import_module(m.name)
    import torch  # noqa: F401
    import torch_geometric  # noqa: F401


def run_placed(xml: str) -> None:
    """Compile a placed model with HETERO and run it once on random inputs."""
    import openvino as ov

    from hdp.runtime.measure.worker import random_inputs
    from hdp.runtime.placed.model import compile_placed

    compiled = compile_placed(xml)
    req = compiled.create_infer_request()
    for i, a in enumerate(random_inputs(compiled)):
        req.set_input_tensor(i, ov.Tensor(a))
    req.infer()


if __name__ == "__main__":
    main()
