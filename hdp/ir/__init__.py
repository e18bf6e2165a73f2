"""The IR, the lowest layer of hdp: what every other layer reads and writes.

- :mod:`hdp.ir.types` — the typed DAG (msgspec Structs, ops in topological order, CSR edges) and
  the Module that carries it and what the passes add; :mod:`hdp.ir.serde` encodes and hashes it,
  :mod:`hdp.ir.verify` checks its invariants.
- :mod:`hdp.ir.build` — Graphs from edge lists, and the shared graph helpers (CSR, topological order).
- :mod:`hdp.ir.openvino_frontend` (lowering) with :mod:`hdp.ir.openvino_read` (reading and
  checking a model file), :mod:`hdp.ir.specialise` (the static shapes a dynamic or stateful model
  is costed at), :mod:`hdp.ir.size_limits` and :mod:`hdp.ir.op_identity` (ops matched by position
  and structure); :mod:`hdp.ir.openvino_backend` (annotating and saving a placed model) and
  :mod:`hdp.ir.openvino_legalize` (the rewrite a placement over several devices needs): the only
  modules here that import openvino, lazily.

Nothing here imports another hdp package but the base utilities (:mod:`hdp.base.errors`,
:mod:`hdp.base.fsutil`, :mod:`hdp.base.cache`): which ops a placement decides is the caller's to say.
"""
