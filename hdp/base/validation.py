"""Declarative validation: bounds declared on msgspec Struct fields, and the one way a broken
bound becomes a one-line :class:`~hdp.base.errors.InputError` naming the field.

A field states its bounds in its type: ``samples: Annotated[int, Meta(ge=2)]``, ``algo:
Literal["reinforce", "ppo"]``. msgspec checks them when it decodes or converts a value (a
``--set`` option, a target file, a checkpoint), not when Python code calls the constructor;
:func:`recheck` checks a value built in Python through the same declarations. A rule a bound
cannot state (one field against another, a method name that must exist) is a ``__post_init__``
raising ``ValueError("field: what")``: msgspec reports it like a broken bound, and the field it
names is put on the error's path.

Errors read ``<path> <what>``: ``samples`` ``must be an integer >= 2, got 1 (a policy update
compares the placements of one batch)`` — the bound, the value given, and the bound's
``Meta(description=...)`` when it has one; ``devices[0].peak_flops.f32`` ``must be a finite
number, got inf``.
"""

from __future__ import annotations

import math
import re
import sys
import types
import typing
from typing import Annotated, Any, Callable, Literal, Union

import msgspec
from msgspec import Meta

from hdp.base.errors import InputError

FLOAT_MAX = sys.float_info.max

#: A finite number (no inf, no nan).
Finite = Annotated[float, Meta(ge=-FLOAT_MAX, le=FLOAT_MAX)]
#: A finite number >= 0.
NonNegative = Annotated[float, Meta(ge=0, le=FLOAT_MAX)]
#: A finite number > 0.
Positive = Annotated[float, Meta(gt=0, le=FLOAT_MAX)]
#: A share of a whole: 0 <= x < 1.
Share = Annotated[float, Meta(ge=0, lt=1)]
#: The largest count hdp takes (requests, runs, samples, placements, steps ...): an int32, so every
#: count fits the encoder, a C long and a float exactly.
MAX_COUNT = 2**31 - 1
#: A count (an integer >= 0; 0 often means "no limit").
Count = Annotated[int, Meta(ge=0, le=MAX_COUNT)]
#: An integer >= 1.
AtLeastOne = Annotated[int, Meta(ge=1, le=MAX_COUNT)]
#: The largest size in bytes hdp takes: 2^60 (an exbibyte; a device or a tensor larger is a mistake,
#: and every size up to it fits an int64 and a float's exact integers within 1 part in 2^53).
MAX_BYTES = 1 << 60
#: A size in bytes.
Bytes = Annotated[int, Meta(ge=0, le=MAX_BYTES)]
#: A size in bytes given as a number (a cost graph's JSON may write 1e9).
ByteAmount = Annotated[float, Meta(ge=0, le=MAX_BYTES)]
#: The longest time limit or budget hdp takes, in seconds: a week.
MAX_SECONDS = 7 * 86400.0
#: A time limit or budget in seconds, 0 often meaning "no limit".
Duration = Annotated[float, Meta(ge=0, le=MAX_SECONDS)]
#: A time limit in seconds, more than 0.
TimeLimit = Annotated[float, Meta(gt=0, le=MAX_SECONDS)]
#: A percentage strictly between 0 and 100 (a resolution).
Percent = Annotated[float, Meta(gt=0, lt=100)]
#: A seed (numpy's and torch's generators take any integer in this range).
Seed = Annotated[int, Meta(ge=0, le=2**32 - 1)]

#: How an error is worded: ``message(path, what)`` -> the line the user reads.
Message = Callable[[str, str], str]


def convert(data: Any, typ: Any, message: Message, strict: bool = True) -> Any:
    """``msgspec.convert(data, typ)``; a value that breaks a declaration is an InputError
    ``message(path, what)`` (see the module docstring)."""
    try:
        return msgspec.convert(data, typ, strict=strict)
    except msgspec.ValidationError as e:
        raise InputError(message(*explain(str(e), data, typ, strict))) from None
    except Exception as e:  # noqa: BLE001  an odd object where a table belongs (a tensor, in a checkpoint)
        found = _misplaced(data, typ, "")  # makes msgspec raise what reading it raises
        if found is None:
            raise InputError(message("", f"cannot be read ({type(e).__name__}: {e})")) from None
        path, value = found
        raise InputError(message(path, f"must be a dictionary, got {_show(value, Any, True)}")) from None


def recheck(value: Any, message: Message) -> Any:
    """A Struct built in Python, checked against its declarations (msgspec checks them only when
    it decodes or converts); returns the value checked."""
    return convert(msgspec.to_builtins(value), type(value), message)


# --- turning msgspec's message into "path what" ----------------------------------------------

_TYPE_NAMES = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false",
               "array": "a list", "object": "a dictionary", "null": "none", "Tensor": "a tensor"}
_STEP = re.compile(r"\.(\w+)|\[(\d+)\]|(\[\.\.\.\])")


def explain(msg: str, data: Any, typ: Any, strict: bool = True) -> tuple[str, str]:
    """(field path, what is wrong) of msgspec's ``msg`` on converting ``data`` to ``typ``; the
    path is followed through ``data`` to name the value given (and the key of a dict value)."""
    m = re.fullmatch(r"(?s)(.*?)(?: - at `(.*)`)?", msg)
    body, at = m.group(1), m.group(2) or "$"
    is_key = at.startswith("key` in `")
    if is_key:
        at = at[len("key` in `"):]
    path, value, t = "", data, typ
    for name, index, values in _STEP.findall(at[1:]):
        if name:
            path, value, t = f"{path}.{name}" if path else name, _get(value, name), _field_type(t, name, value)
        elif index:
            i = int(index)
            value = value[i] if isinstance(value, (list, tuple)) and i < len(value) else None
            path, t = f"{path}[{i}]", _item_type(t, 0)
        elif values:
            t = _item_type(t, 1)
            key = _first_bad(value.items() if isinstance(value, dict) else (), t, strict, keys=False)
            path += "[...]" if key is None else (f".{key}" if re.fullmatch(r"\w+", str(key)) else f"[{key!r}]")
            value = value[key] if key is not None else None
    if is_key:
        t = _item_type(t, 0)
        key = _first_bad(value.items() if isinstance(value, dict) else (), t, strict, keys=True)
        value = key
    if m2 := re.fullmatch(r"Object missing required field `(\w+)`", body):
        return _join(path, m2.group(1)), "is missing"
    if m2 := re.fullmatch(r"Object contains unknown field `(\w+)`", body):
        return _join(path, m2.group(1)), "is not a known field"
    if m2 := re.fullmatch(r"Invalid enum value (.*)", body):
        choices = _literal_values(t)
        what = (f"must be one of {', '.join(map(repr, choices))}, got {m2.group(1)}" if choices
                else f"is not one of the known values: {m2.group(1)}")
        return path, f"has a key that {what}" if is_key else what
    if m2 := re.fullmatch(r"Expected `([^`]+)`(.*?)(?:, got `([^`]+)`)?", body):
        what = _expected(m2.group(1), m2.group(2).strip(), m2.group(3), value, t, strict)
        return path, f"has a key that {what}" if is_key else what
    if body == "Number out of range":
        return path, f"is out of range, got {_show(value, Any, True)}"
    if m2 := re.fullmatch(r"(\w+): (.*)", body, re.S):  # a __post_init__ rule names its field
        return _join(path, m2.group(1)), m2.group(2)
    return path, body


def _expected(types: str, bound: str, got: str | None, value: Any, t: Any, strict: bool) -> str:
    names = " or ".join(_TYPE_NAMES.get(x, f"a {x}") for x in types.split(" | "))
    declared_finite = any(x.le == FLOAT_MAX or x.ge == -FLOAT_MAX for x in _metas(t))
    if types == "float" and (declared_finite or isinstance(value, float) and math.isinf(value)):
        names = "a finite number"
    if re.match(r"[<>]=? ", bound):  # msgspec names the bound broken; say the whole range declared
        bound = _range(_metas(t)) if _metas(t) else bound
    if repr(FLOAT_MAX) in bound:  # the bound that only keeps out inf and nan
        bound = ""
    description = next((x.description for x in _metas(t) if x.description), None)
    if description and bound.startswith("matching regex"):  # say what the pattern means instead
        names, bound, description = description, "", None
    what = f"must be {names}{' ' + bound if bound else ''}"
    if value is not None:
        what += f", got {_show(value, t, strict)}"
    elif got is not None:
        what += f", got {_TYPE_NAMES.get(got, f'a {got}')}"
    return f"{what} ({description})" if description and got is None else what


def _range(metas: list[Meta]) -> str:
    """``>= 2``, ``in (0, 1)``, ``in [0, 10]``: the numeric bounds declared (not the ones that
    only keep out inf and nan)."""
    lo = next(((x.ge, "[") if x.ge is not None else (x.gt, "(") for x in metas
               if x.ge not in (None, -FLOAT_MAX) or x.gt is not None), None)
    hi = next(((x.le, "]") if x.le is not None else (x.lt, ")") for x in metas
               if x.le not in (None, FLOAT_MAX) or x.lt is not None), None)
    if lo and hi:
        return f"in {lo[1]}{_num(lo[0])}, {_num(hi[0])}{hi[1]}"
    if lo:
        return f"{'>=' if lo[1] == '[' else '>'} {_num(lo[0])}"
    if hi:
        return f"{'<=' if hi[1] == ']' else '<'} {_num(hi[0])}"
    return ""


def _num(x) -> str:
    """A bound as declared: an integer in full (2147483647), a float short (1e+06)."""
    return str(x) if isinstance(x, int) else f"{x:g}"


def _show(value: Any, t: Any, strict: bool) -> str:
    if isinstance(value, str) and not strict:  # a --set value: show the number it was read as
        try:
            return repr(msgspec.convert(value, _bare(t), strict=False))
        except (msgspec.ValidationError, TypeError):
            pass
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    if isinstance(value, str):
        return repr(value if len(value) <= 40 else value[:37] + "...")
    if isinstance(value, (list, tuple, dict)):
        return f"{'a dictionary' if isinstance(value, dict) else 'a list'} of {len(value)} items"
    return f"a {type(value).__name__}"


def _misplaced(data: Any, t: Any, path: str) -> tuple[str, Any] | None:
    """(path, value) of the first value that is not a dictionary where a Struct is declared."""
    struct = next((m for m in _members(t) if isinstance(m, type) and issubclass(m, msgspec.Struct)), None)
    if struct is not None:
        if not isinstance(data, dict):
            return path, data
        for f in msgspec.structs.fields(struct):
            if f.name in data and (found := _misplaced(data[f.name], f.type, _join(path, f.name))):
                return found
    elif isinstance(data, list) and any(typing.get_origin(m) is list for m in _members(t)):
        for i, x in enumerate(data):
            if found := _misplaced(x, _item_type(t, 0), f"{path}[{i}]"):
                return found
    return None


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _get(value: Any, name: str) -> Any:
    if isinstance(value, dict):
        return value.get(name)
    return getattr(value, name, None) if isinstance(value, msgspec.Struct) else None


def _first_bad(items, t: Any, strict: bool, keys: bool):
    """The first key of a dict whose key (or value) breaks ``t``."""
    for k, v in items:
        try:
            msgspec.convert(k if keys else v, t, strict=strict)
        except msgspec.ValidationError:
            return k
        except TypeError:  # a type msgspec cannot convert to on its own
            return None
    return None


def _metas(t: Any) -> list[Meta]:
    """The Meta bounds on ``t`` (on its non-None member, for ``X | None``)."""
    if typing.get_origin(t) is Annotated:
        return [x for x in t.__metadata__ if isinstance(x, Meta)]
    if typing.get_origin(t) in (Union, types.UnionType):
        return [x for a in typing.get_args(t) for x in _metas(a)]
    return []


def _bare(t: Any) -> Any:
    """``t`` without its Annotated bounds and without ``None``."""
    if typing.get_origin(t) is Annotated:
        return _bare(typing.get_args(t)[0])
    if typing.get_origin(t) in (Union, types.UnionType):
        args = [a for a in typing.get_args(t) if a is not type(None)]
        return _bare(args[0]) if len(args) == 1 else t
    return t


def _members(t: Any) -> list:
    t = _bare(t)
    if typing.get_origin(t) in (Union, types.UnionType):
        return [_bare(a) for a in typing.get_args(t)]
    return [t]


def _field_type(t: Any, name: str, value: Any = None) -> Any:
    """The type of field ``name`` of ``t`` (of a tagged union, of the member ``value``'s tag names)."""
    members = _members(t)
    for m in members:
        cfg = getattr(m, "__struct_config__", None)
        if cfg is not None and cfg.tag_field and isinstance(value, dict) and value.get(cfg.tag_field) == cfg.tag:
            members = [m]
            break
    for m in members:
        if isinstance(m, type) and issubclass(m, msgspec.Struct):
            for f in msgspec.structs.fields(m):
                if f.name == name:
                    return f.type
    return Any


def _item_type(t: Any, i: int) -> Any:
    """The element type of a list (``i`` = 0) or the key (0) / value (1) type of a dict."""
    for m in _members(t):
        args = typing.get_args(m)
        if typing.get_origin(m) in (list, tuple, set, frozenset) and args:
            return args[0]
        if typing.get_origin(m) is dict and len(args) == 2:
            return args[i]
    return Any


def _literal_values(t: Any) -> tuple:
    return next((typing.get_args(m) for m in _members(t) if typing.get_origin(m) is Literal), ())
