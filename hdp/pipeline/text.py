"""A pipeline as text: ``support,profile,coarsen{groups=64},partition{method=optimal},assign``.

Grammar (whitespace around the punctuation is ignored)::

    pipeline := pass ("," pass)*
    pass     := NAME ["{" [option ("," option)*] "}"]
    option   := KEY "=" value
    value    := BARE | '"' (any character but '"' and '\\' | '\\"' | '\\\\')* '"'
    NAME     := a letter, then letters, digits, '_' or '-'      (a pass: support, coarsen, ...)
    KEY      := a letter or '_', then letters, digits, '_' or '-' (an option; '-' reads as '_')
    BARE     := one or more characters other than whitespace and , { } = "

A value holding a comma, a brace, '=', a quote, whitespace, or nothing is quoted:
``partition{method="hetero-auto:NPU,CPU"}``. Values stay strings here (a command's flags add
typed values, printed by :func:`as_text`); the pipeline converts them to the pass's typed fields
(:mod:`hdp.pipeline.schedule`). :func:`parse_pipeline` and
:func:`print_pipeline` round-trip: ``parse_pipeline(print_pipeline(specs)) == specs``, and printing
a parsed text gives it back in canonical form (no spaces, ``{}`` dropped, quotes only where
needed). A syntax error is a :class:`PipelineError` naming the 1-based column (after xDSL's
``pass{opt=val}`` pipelines, with commas between options as in this project's ``--set``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from hdp.base.errors import InputError

__all__ = ["PassSpec", "PipelineError", "as_text", "format_value", "parse_pipeline", "print_pipeline"]


class PipelineError(InputError):
    """A pipeline text that does not parse or build: the message starts with the column
    (``at column 23: ...``) when the mistake is in the text."""

    def __init__(self, message: str, column: int | None = None):
        super().__init__(f"at column {column}: {message}" if column is not None else message)
        self.column = column


@dataclass(frozen=True)
class PassSpec:
    """One pass of a pipeline text: its name and its options (key, value) in the order given.
    ``where`` is not part of equality: the column of the name, and per option where it came
    from — (key column, value column) in the text, or the label of the flag that filled it."""

    name: str
    options: tuple[tuple[str, object], ...] = ()  # text, or a flag's typed value
    where: tuple = field(default=(), compare=False, repr=False)

    def __str__(self) -> str:
        if not self.options:
            return self.name
        return self.name + "{" + ",".join(f"{k}={format_value(as_text(v))}" for k, v in self.options) + "}"

    def get(self, key: str) -> object | None:
        """The value of option ``key`` ('-' and '_' alike), or None."""
        key = key.replace("-", "_")
        return next((v for k, v in self.options if k.replace("-", "_") == key), None)

    def column(self, key: str | None = None, value: bool = False) -> int | None:
        """The column of the pass name (``key`` None), or of option ``key``'s key or value; None
        when it did not come from the text."""
        if key is None:
            return self.where[0] if self.where else None
        key = key.replace("-", "_")
        for (k, _), w in zip(self.options, self.where[1:]):
            if k.replace("-", "_") == key:
                return w[1 if value else 0] if isinstance(w, tuple) else None
        return None

    def origin(self, key: str) -> str | None:
        """The flag that filled option ``key`` (None: it came from the text, or is not set)."""
        key = key.replace("-", "_")
        for (k, _), w in zip(self.options, self.where[1:]):
            if k.replace("-", "_") == key:
                return w if isinstance(w, str) else None
        return None

    def with_option(self, key: str, value: object, origin: str) -> "PassSpec":
        """This spec with one more option, filled by flag ``origin``."""
        where = self.where or (None,) + (None,) * len(self.options)
        return PassSpec(self.name, self.options + ((key, value),), where + (origin,))


_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_BARE = re.compile(r'[^\s,{}="]+')
_NEEDS_QUOTES = re.compile(r'[\s,{}="\\]')
_SPACE = re.compile(r"\s*")


def as_text(value) -> str:
    """An option value as the pipeline text holds it (``true``, ``none``, ``NPU,CPU``, ``0.5``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, (tuple, list)):
        if value and all(isinstance(v, (tuple, list)) and len(v) == 2 for v in value):  # (key, value) pairs
            return ",".join(f"{as_text(k)}={as_text(v)}" for k, v in value)
        return ",".join(as_text(v) for v in value)
    return str(value)


def format_value(v: str) -> str:
    """A value as the text writes it: bare, or quoted with '"' and '\\' escaped."""
    if v and not _NEEDS_QUOTES.search(v):
        return v
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'


def print_pipeline(specs) -> str:
    """The text of a list of :class:`PassSpec` (the inverse of :func:`parse_pipeline`)."""
    return ",".join(str(s) for s in specs)


class _Reader:
    def __init__(self, text: str):
        self.text = text
        self.i = 0

    def skip(self) -> None:
        self.i = _SPACE.match(self.text, self.i).end()

    def col(self) -> int:
        return self.i + 1

    def peek(self) -> str:
        return self.text[self.i] if self.i < len(self.text) else ""

    def found(self) -> str:
        c = self.peek()
        return f"'{c}'" if c else "the end"

    def fail(self, what: str):
        raise PipelineError(f"expected {what}, found {self.found()}", self.col())

    def token(self, pattern: re.Pattern, what: str) -> str:
        m = pattern.match(self.text, self.i)
        if not m:
            self.fail(what)
        self.i = m.end()
        return m.group()

    def value(self) -> str:
        if self.peek() != '"':
            return self.token(_BARE, "a value (quote one that holds , { } = or spaces)")
        start = self.col()
        out, self.i = [], self.i + 1
        while self.i < len(self.text):
            c = self.text[self.i]
            if c == '"':
                self.i += 1
                return "".join(out)
            if c == "\\":
                nxt = self.text[self.i + 1:self.i + 2]
                if nxt not in ('"', "\\"):
                    raise PipelineError('a backslash in a quoted value escapes only " or \\', self.col())
                out.append(nxt)
                self.i += 2
                continue
            out.append(c)
            self.i += 1
        raise PipelineError("this quoted value is not closed", start)


def parse_pipeline(text: str) -> list[PassSpec]:
    """The passes of a pipeline text (see the module docstring); :class:`PipelineError` with the
    column of the first mistake."""
    r = _Reader(text)
    specs: list[PassSpec] = []
    while True:
        r.skip()
        name_col = r.col()
        name = r.token(_NAME, "a pass name")
        r.skip()
        options: list[tuple[str, str]] = []
        where: list = [name_col]
        if r.peek() == "{":
            r.i += 1
            r.skip()
            if r.peek() != "}":
                while True:
                    key_col = r.col()
                    key = r.token(_KEY, "an option name")
                    if any(k.replace("-", "_") == key.replace("-", "_") for k, _ in options):
                        raise PipelineError(f"option '{key}' of pass '{name}' is given twice", key_col)
                    r.skip()
                    if r.peek() != "=":
                        hint = ' (a value holding a comma is quoted: key="a,b")' if r.peek() in ",}" and options else ""
                        raise PipelineError(f"expected '=' after option '{key}', found {r.found()}{hint}", r.col())
                    r.i += 1
                    r.skip()
                    value_col = r.col()
                    options.append((key, r.value()))
                    where.append((key_col, value_col))
                    r.skip()
                    if r.peek() == ",":
                        r.i += 1
                        r.skip()
                        continue
                    if r.peek() != "}":
                        r.fail(f"',' or '}}' after the value of '{key}'")
                    break
            r.i += 1
            r.skip()
        specs.append(PassSpec(name, tuple(options), tuple(where)))
        if r.peek() == ",":
            r.i += 1
            continue
        if r.peek():
            r.fail("',' between passes, or the end")
        return specs
