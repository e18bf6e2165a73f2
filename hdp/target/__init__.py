"""Targets: the devices a model is placed on, and what this host has.

- :mod:`~hdp.target.target` — the typed target (devices, links, precisions), read from TOML files
  (the built-in ones in ``targets/``) and checked;
- :mod:`~hdp.target.devices` — an OpenVINO ``Core`` with a target's devices registered, HETERO's
  device names and configuration;
- :mod:`~hdp.target.host` — this host's facts and fingerprint (what a cached measurement is keyed by);
- :mod:`~hdp.target.capacity` — each device's memory, reported or declared, and ``--memory`` caps.

Low and alone: it imports the base utilities and the placement core's memory model, nothing that
measures, places or runs passes, so that everything naming a device set can import it.
"""
