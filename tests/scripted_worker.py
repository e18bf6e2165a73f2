"""A measuring worker for tests of decisions made from measurements: the real
:class:`~hdp.runtime.measure.measurer.Measurer` talks to it through the typed protocol
(:mod:`hdp.runtime.measure.protocol`), so ``measure``, ``head_to_head`` and ``best_of`` run their own code;
only the times are scripted (a true latency per placement and seeded noise), nothing compiles.

Every request and reply goes through the protocol's encoding both ways, as over the pipe to a
real worker, and each request type is answered by the handler its type maps to; a request this
fake has no script for is answered with ``Failed``, as a worker that cannot do it would.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hdp.runtime.measure import protocol as P
from hdp.runtime.measure.measurer import Measurer


class ScriptedWorker:
    """Times from ``truth(group_device) -> seconds`` (``problem`` maps a placement's device per op
    to its device per group) with seeded noise: ``Measure`` (one placement alone, as training sees
    it) scales the truth by ``1 + lucky(group_device)`` (default 0) and lognormal noise of ``sd``
    per run; ``Rounds`` (a head-to-head) by a drift shared by each round (sigma 0.05) and noise of
    ``h2h_sd`` per run. ``measured``: the group devices of every ``Measure``; ``heads``: per
    head-to-head, the group devices of its candidates in the order they were prepared in its first
    block (a head-to-head's later blocks prepare the same candidates again, in the reverse order:
    ``blocks`` counts them per head-to-head; only placements are scripted: a plain compile or a
    placed file is answered with ``Failed``)."""

    def __init__(self, problem, truth, *, sd=0.0, h2h_sd=0.02, lucky=None, seed=0):
        self.p, self.truth, self.sd, self.h2h_sd, self.lucky = problem, truth, sd, h2h_sd, lucky
        self.rng = np.random.default_rng(seed)
        self.measured: list[np.ndarray] = []
        self.heads: list[list] = []
        self.blocks: list[int] = []
        self.requests: list[str] = []
        self._prepared: dict[int, np.ndarray] = {}
        self._next_handle = 0
        self._open = False  # a head-to-head is being prepared or run (its candidates not released)
        self.alive = True
        self._handlers = {P.Load: self._load, P.Measure: self._measure, P.Prepare: self._prepare,
                          P.Rounds: self._rounds, P.Release: self._release}

    # ---- the client side of WorkerProcess

    def call(self, req: P.Request, timeout: float) -> P.Reply:
        req = P.decode_request(P.encode(req))
        self.requests.append(P.op_of(req))
        handler = self._handlers.get(type(req))
        reply = handler(req) if handler else P.Failed(error=f"scripted worker: no script for '{P.op_of(req)}'")
        return P.decode_reply(P.encode(reply))

    def send(self, req: P.Request) -> None:
        self.call(req, 0.0)

    def close(self, kill: bool = False) -> None:
        self.alive = False

    # ---- the requests

    def _gd(self, placement: P.Placement) -> np.ndarray:
        dev = np.frombuffer(placement.device_of, np.int16)
        index = np.array([self.p.devices.index(d) for d in placement.devices], np.int64)
        return self.p.structure.group_devices(index[dev]).astype(np.int16)

    def _load(self, req: P.Load) -> P.Loaded:
        n = self.p.n_ops
        return P.Loaded(n_ops=n, names=[f"op{i}" for i in range(n)], affinity=[""] * n, spec="")

    def _measure(self, req: P.Measure) -> P.Timed:
        gd = self._gd(req.placement)
        self.measured.append(gd)
        t = self.truth(gd) * (1 + (self.lucky(gd) if self.lucky else 0.0))
        times = t * np.exp(self.rng.normal(0, self.sd, req.runs)) if self.sd else np.full(req.runs, t)
        return P.Timed(times=times.tolist(), compile_seconds=0.01)

    def _prepare(self, req: P.Prepare) -> P.Prepared | P.Failed:
        if req.placement is None:
            return P.Failed(error="scripted worker: only placements are scripted")
        if not self._open:
            self.heads.append([])
            self._open = True
        gd = self._gd(req.placement)
        self.heads[-1].append(gd)
        handle = self._next_handle
        self._next_handle += 1
        self._prepared[handle] = gd
        return P.Prepared(handle=handle, compile_seconds=0.01)

    def _rounds(self, req: P.Rounds) -> P.RoundTimes | P.Failed:
        if any(h not in self._prepared for h in req.handles):
            return P.Failed(error="scripted worker: no such candidate", input=True)
        truth = np.array([self.truth(self._prepared[h]) for h in req.handles])
        rows = []
        for _ in req.orders:
            load = np.exp(self.rng.normal(0, 0.05))  # drift shared by a round
            rows.append((truth * load * np.exp(self.rng.normal(0, self.h2h_sd, truth.size))).tolist())
        return P.RoundTimes(times=rows)

    def _release(self, req: P.Release) -> P.Done:
        for h in req.handles:
            self._prepared.pop(h, None)
        self._open = False
        last = self.heads[-1] if self.heads else []
        before = self.heads[-2] if len(self.heads) > 1 else None
        if before is not None and len(before) == len(last) and all(
                np.array_equal(x, y) for x, y in zip(before[::-1], last)):  # the next block of the same one
            self.heads.pop()
            self.blocks[-1] += 1
        else:
            self.blocks.append(1)
        return P.Done()


def scripted_measurer(tmp: Path, target, worker: ScriptedWorker, *, runs: int = 10, warmup: int = 1,
                      timeout: float = 60.0) -> Measurer:
    """A real Measurer (never caching) whose requests ``worker`` answers. Its source is a stand-in
    file under ``tmp`` (the worker never reads it), so no op count is checked beyond the worker's."""
    xml = Path(tmp) / "scripted.xml"
    if not xml.exists():
        xml.write_text("<net name='scripted'/>\n")
    return Measurer(xml, target, runs=runs, warmup=warmup, timeout=timeout, cache=False, worker=worker)
