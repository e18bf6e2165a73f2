"""The isolated runner of the fuzz suite: ``python -m fuzz_worker`` (cwd tests/), see fuzzkit.py.

Reads framed msgpack requests on stdin (``{"op": "cli", "argv": [...]}`` runs ``hdp argv`` with
click's CliRunner; ``{"op": "placed", "xml": path}`` compiles a placed model with HETERO and runs
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
    from hdp.runtime.protocol import read_frame, write_msg

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
        elif req["op"] == "placed":
            try:
                run_placed(req["xml"])
                write_msg(out, {"exit_code": 0, "output": "", "traceback": ""})
            except Exception:  # noqa: BLE001 - reported to the parent as an invalid result
                write_msg(out, {"exit_code": 1, "output": traceback.format_exc(), "traceback": ""})


def run_placed(xml: str) -> None:
    """Compile a placed model with HETERO and run it once on random inputs."""
    import openvino as ov

    from hdp.runtime.placed import compile_placed
    from hdp.runtime.worker import random_inputs

    compiled = compile_placed(xml)
    req = compiled.create_infer_request()
    for i, a in enumerate(random_inputs(compiled)):
        req.set_input_tensor(i, ov.Tensor(a))
    req.infer()


if __name__ == "__main__":
    main()
