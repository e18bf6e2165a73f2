"""User-facing errors. The CLI prints them as one line and exits with code 2."""


class HdpError(Exception):
    """A problem with the user's input or environment (not a bug in hdp)."""


class InputError(HdpError):
    """A model, module, target or option given by the user is unusable."""


class StaleInput(InputError):
    """A module no longer matches the model it was lowered from: the file changed, or a cache
    entry decoded fine but holds a module of another model (a checksum cannot tell a forged or
    misfiled entry). A command that took modules from the cache discards those entries and
    recomputes once (:func:`hdp.pipeline.recompute_if_stale`); otherwise it is the user's error."""


class PassError(HdpError):
    """A pass failed; the message names the pass."""

    def __init__(self, pass_name: str, message: str, stale: bool = False):
        super().__init__(f"pass '{pass_name}': {message}")
        self.pass_name = pass_name
        self.stale = stale  # raised for a StaleInput


def is_stale(e: BaseException) -> bool:
    """Whether ``e`` says a module no longer matches its model (:class:`StaleInput`)."""
    return isinstance(e, StaleInput) or bool(getattr(e, "stale", False))
