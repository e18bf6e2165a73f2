"""The worker protocol: every request has a handler and a reply type, messages survive the
encoding, and a worker or client that gets something it cannot read says so instead of hanging."""

from __future__ import annotations

import subprocess
import sys
import typing

import pytest

from hdp.runtime.measure import protocol as P
from hdp.runtime.measure.worker import HANDLERS, Worker
from hdp.runtime.measure.worker_client import WorkerFailure, WorkerProcess
from hdp.target.target import Target, load_target


def _members(union) -> set[type]:
    return set(typing.get_args(union))


def test_every_request_has_one_handler_and_one_reply_type():
    requests, replies = _members(P.Request), _members(P.Reply)
    assert set(HANDLERS) == requests == set(P.REPLY_TO)
    assert set(P.REPLY_TO.values()) <= replies and P.Failed in replies
    tags = [P.op_of(c) for c in requests | replies]  # a tag names one message, in either direction
    assert len(tags) == len(set(tags))


def test_messages_round_trip_typed():
    virtual = load_target("virtual")
    msgs = [P.Load(xml="m.xml", target=virtual, roles=b"\x01\x02"),
            P.Measure(placement=P.Placement(devices=["CPU", "CPU_B"], device_of=b"\x00\x00\x01\x00"), runs=3, warmup=1),
            P.Prepare(unplaced_on="CPU", warmup=2), P.Rounds(handles=[0, 1], orders=[[0, 1], [1, 0]]),
            P.Blob(blob="a.blob", device="HETERO:CPU", target=virtual, runs=1, warmup=0),
            P.Serve(placement=P.Placement(devices=["CPU"], device_of=b"\x00\x00"), requests=2, batches=3, per_batch=0,
                    warmup=1)]
    for m in msgs:
        assert P.decode_request(P.encode(m)) == m
    node = P.RuntimeNode(name="n", type="Relu", exec_type="jit", original="r", ops=[3], preds=[], avg_warm=1e-6,
                         avg_all=1e-6, avg_runs=[1e-6, 1e-6], executed=True)
    prof = P.Profiled(devices=[P.DeviceProfile(device="CPU", times=[1e-3], starts=[0.0], compile_seconds=0.1, warmup=1,
                                               nodes=[node], properties={"NUM_STREAMS": "1"})], seconds=P.ProfileSeconds(prepare=0.1, timed=0.2, nodes=0.0))
    answers = P.SignatureAnswers(answers={"CPU": [(0, True), (-3, False)]}, in_context={"CPU": [2]},
                                 queries={"CPU": 2}, seconds=0.5)
    for r in (P.Failed(error="x", input=True, stale=True, device="CPU"), P.Done(), prof, answers,
              P.Checked(passed=True, max_error=1e-7), P.Served(rates=[1.0, 2.0], compile_seconds=0.1, per_batch=8)):
        assert P.decode_reply(P.encode(r)) == r
    with pytest.raises(Exception, match="op"):
        P.decode_request(P.encode({"op": "frobnicate"}))


def test_a_request_before_load_is_the_callers_mistake():
    w = Worker()
    reply = w.handle(P.Query(devices=["CPU"]))
    assert reply == P.Failed(error="worker: no model loaded", input=True)
    assert w.handle(P.Prepare(warmup=0)).input  # still no model: refused before anything else


def test_the_worker_answers_an_undecodable_request_and_goes_on():
    """A frame that is no request gets a Failed reply; the worker keeps serving."""
    w = WorkerProcess()
    w.start()
    try:
        P.write_msg(w.proc.stdin, {"op": "measure", "runs": "many"})
        bad = w._reply(60, "measure")
        assert isinstance(bad, P.Failed) and "not a request" in bad.error and not bad.input
        assert w.call(P.Release(handles=[1]), 60) == P.Failed(error="worker: no model loaded", input=True)
    finally:
        w.close()


def test_a_reply_of_the_wrong_type_kills_the_worker(monkeypatch):
    script = ("import sys; from hdp.runtime.measure import protocol as P\n"
              "P.read_frame(sys.stdin.buffer); P.write_msg(sys.stdout.buffer, P.Done()); P.read_frame(sys.stdin.buffer)\n")

    def start(self):
        self.proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     bufsize=0)

    monkeypatch.setattr(WorkerProcess, "start", start)
    w = WorkerProcess()
    with pytest.raises(WorkerFailure, match="answered 'load' with 'done'"):
        w.call(P.Load(xml="m.xml", target=Target(name="t", devices=[])), timeout=30)
    assert not w.alive
