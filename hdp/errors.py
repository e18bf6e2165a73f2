"""User-facing errors. The CLI prints them as one line and exits with code 2."""


class HdpError(Exception):
    """A problem with the user's input or environment (not a bug in hdp)."""


class InputError(HdpError):
    """A model, module, target or option given by the user is unusable."""


class PassError(HdpError):
    """A pass failed; the message names the pass."""

    def __init__(self, pass_name: str, message: str):
        super().__init__(f"pass '{pass_name}': {message}")
        self.pass_name = pass_name
