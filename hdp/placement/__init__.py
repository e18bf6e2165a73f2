"""The placement core: one home for what a placement may and may not do.

- :mod:`hdp.placement.structure` — from the graph alone: which ops are placed and which follow
  others (constant data, replicated shape chains), the tie groups (ops that must share a device)
  and the acyclic graph over them.
- :mod:`hdp.placement.problem` — :class:`PlacementProblem`: the structure plus a target's devices,
  the allowed mask (support and finite cost over whole tie groups), the time of every group on
  every device and the copy cost of every tensor. Every placer, the simulator, ``assign``,
  refinement and the learned placer's graph consume only this.
- :mod:`hdp.placement.subgraphs` — HETERO's subgraphs of a placement as its splitter forms them,
  and the rule for state they impose (a state's component lies on no cycle):
  :func:`~hdp.placement.subgraphs.untangle` makes every placer's output obey it.
- :mod:`hdp.placement.simulate` — the simulator: a placement's latency (or throughput) from the
  problem's costs, Numba kernels in :mod:`hdp.placement._kernels`; :mod:`hdp.placement.objective`
  and :mod:`hdp.placement.memory` — what a placement is asked to minimise, and each device's bytes.
- :mod:`hdp.placement.repair` — a placement that failed its check: the boundary that breaks, tied.
- :mod:`hdp.placement.maxload` — throughput as the largest per-device load under memory caps (cost
  graphs, ``hdp place``): its pricing and exact MILP; :mod:`hdp.placement.maxload_search` — its
  heuristics and :func:`~hdp.placement.maxload_search.optimize` (the orders it cuts into pipelines in
  :mod:`hdp.placement.group_orders`); :mod:`hdp.placement.ideals` — the
  exact optimum over contiguous splits; Numba kernels in :mod:`hdp.placement._maxload_kernels`.

- :mod:`hdp.placement.plan` — serving plans (stages × replicas × streams) and their price;
  :mod:`hdp.placement.plan_search` — the contiguous plans' exact walk (kernels in
  :mod:`hdp.placement._plan_kernels`) and the whole model replicated; :mod:`hdp.placement.plan_milp`
  — the same space as a MILP, and a work bound; :mod:`hdp.placement.planner` — all of them for the
  throughput objective.

The layer just above the IR: it imports :mod:`hdp.ir` and the base utilities, nothing else of hdp.

The rules, and the HETERO failure each prevents, are listed in :mod:`hdp.placement.structure`.
Nothing here imports openvino; the rewrite of the written model that the rules call for lives in
:mod:`hdp.ir.openvino_legalize`.
"""
