"""Pass values.

A pass is a frozen msgspec Struct: its fields are its options, its tag is its CLI name. It is
pure: ``run`` returns a new Module and never mutates its input or reads global state; everything
that changes the output is a field, so it is part of the cache key.
"""

from __future__ import annotations

from typing import ClassVar

import msgspec


class Pass(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, tag_field="pass"):
    """Base class of all passes. Subclasses set ``tag=`` (the CLI name) and the class vars."""

    requires: ClassVar[tuple[str, ...]] = ()
    provides: ClassVar[tuple[str, ...]] = ()
    #: Bump when the output changes for the same input and options.
    version: ClassVar[int] = 1
    #: True for a pass that queries or times the real devices of this host (support, profile):
    #: when its target has a real device, its cache key includes the host fingerprint
    #: (:func:`hdp.target.host.host_fingerprint`: CPU model and flags, OpenVINO version).
    host_dependent: ClassVar[bool] = False

    def depends_on_host(self) -> bool:
        """Whether this pass's output may differ from one host to another (see ``host_dependent``)."""
        if not type(self).host_dependent:
            return False
        target = getattr(self, "target", None)
        return target is None or any(d.kind == "real" for d in target.devices)
    #: Fields that cannot change the output (timeouts, where to memoise device answers): left out
    #: of the cache key, so changing them reuses cached results.
    key_exclude: ClassVar[tuple[str, ...]] = ()

    def needs(self) -> tuple[str, ...]:
        """Module stages this pass value needs: its class's ``requires``, and what its options add
        (a placement method's stages, refinement's costs). The manager checks a schedule with it
        before running anything."""
        return type(self).requires

    @classmethod
    def pass_name(cls) -> str:
        return cls.__struct_config__.tag

    # How flat options (``--set KEY=VALUE``, ``NAME{KEY=VALUE}`` in a pipeline text, a command's
    # flags) become the pass's fields, for :func:`hdp.pipeline.schedule.build_pass`, which converts
    # and bounds them by the fields' declarations. By default an option is a field.

    @classmethod
    def fields_from(cls, options: dict) -> dict:
        """The fields' builtins from flat options (reshaping only: the conversion comes after)."""
        return dict(options)

    @classmethod
    def known_options(cls, options: dict) -> tuple[tuple[str, ...], str]:
        """The option names these options may use, and how an unknown one's message names the pass."""
        return tuple(f for f in cls.__struct_fields__ if f != "target"), f"pass '{cls.pass_name()}'"

    @classmethod
    def option_message(cls, options: dict, path: str, what: str) -> tuple[str, str]:
        """(the option, the one-line message) of a bad value at field ``path`` of these options."""
        return path.split(".")[0].split("[")[0], f"pass '{cls.pass_name()}' option '{path}' {what}"

    def key_value(self):
        """What identifies this pass value in a cache key: itself, or its fields without
        :attr:`key_exclude`."""
        if not type(self).key_exclude:
            return self
        return {f: getattr(self, f) for f in self.__struct_fields__ if f not in type(self).key_exclude}

    # Subclasses define ``run(self, module: Module) -> Module``; hdp.passes.registry checks it.
