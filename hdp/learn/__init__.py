"""The learned placer (HSDAG, NeurIPS 2024, arXiv 2405.14185), rebuilt.

- :mod:`hdp.learn.graph`  — numpy: the graph the network sees (coarse groups or ops), its features,
  costs and support, derived once from a Module.
- :mod:`hdp.learn.parse`  — numpy: one round of graph parsing (dominant edges -> groups) with the
  guards that keep a connected graph from collapsing into one group.
- :mod:`hdp.learn.model`  — torch: input MLP -> GCN -> graph parsing network -> policy head.
- :mod:`hdp.learn.trainer` — torch: REINFORCE / PPO on execution-time reward, warm start,
  budgets, checkpoints, training curve.

Only the ``model`` and ``trainer`` modules import torch; importing this package does not.
"""
