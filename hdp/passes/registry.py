"""The passes by name: a lazy map from a pass's CLI name to the class that implements it.

Nothing is registered at import time; :func:`registry` imports the pass modules on first use.
"""

from __future__ import annotations

import importlib

from hdp.passes.base import Pass

#: pass name -> "module:Class"
PASSES = {
    "support": "hdp.passes.support:SupportPass",
    "profile": "hdp.passes.profile:ProfilePass",
    "boundary": "hdp.passes.boundary:BoundaryPass",
    "features": "hdp.passes.features:FeaturesPass",
    "coarsen": "hdp.passes.coarsen:CoarsenPass",
    "partition": "hdp.passes.partition:PartitionPass",
    "assign": "hdp.passes.assign:AssignPass",
}


def pass_class(name: str) -> type[Pass]:
    """The class of pass ``name`` (KeyError for an unknown name); checks it is a proper pass."""
    module, _, cls_name = PASSES[name].partition(":")
    cls = getattr(importlib.import_module(module), cls_name)
    if cls.pass_name() != name or not callable(getattr(cls, "run", None)):
        raise TypeError(f"{PASSES[name]} is not the pass '{name}' with a run(module) method")
    return cls


def registry() -> dict[str, type[Pass]]:
    """Every pass by name."""
    return {name: pass_class(name) for name in PASSES}
