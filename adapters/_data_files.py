"""Reading a benchmark's data files: every problem is an error of sclate's that names
the file, and where in it (a line, a field), never a traceback.

Upstream data is read unchanged, so what it holds is checked where it is read.
These turn what Python's readers raise (a missing file, a directory, bytes that
are not UTF-8, JSON that is cut short, nested past the recursion limit or holding
an integer past Python's digit limit) into :class:`~sclated.errors.NotFound` or
:class:`~sclated.errors.InvalidArgument`, and check a field's type by its name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sclated.errors import InvalidArgument, NotFound

__all__ = ["kind_of", "parse_json", "read_json", "read_text", "typed"]

_KINDS: dict[type, str] = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    list: "a list",
    dict: "an object",
    type(None): "null",
}


def kind_of(value: Any) -> str:
    """What a JSON value is, in words (``a list``, ``null``)."""
    return _KINDS.get(type(value), type(value).__name__)


def read_text(path: Path, what: str) -> str:
    """The UTF-8 text of ``path``; ``what`` names the file's role (``MetaClaw data file``)."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NotFound(f"{what} {path} does not exist") from None
    except IsADirectoryError:
        raise InvalidArgument(f"{what} {path} is a directory, not a file") from None
    except UnicodeDecodeError as exc:
        raise InvalidArgument(f"{what} {path} is not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    except OSError as exc:
        raise InvalidArgument(f"{what} {path} cannot be read: {exc.strerror or exc}") from None


_NESTING = 1000
"""Deeper than this is where a JSON text is reported nested too deeply (Python's reader
gives up somewhere past it, without saying where)."""
_LONG_INTEGER = re.compile(r"-?\d{4300,}")


def parse_json(text: str, where: str) -> Any:
    """``text`` parsed; ``where`` says what it is (a file, a file's line) in the error,
    which also says where in the text the problem is."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"{where} is not valid JSON: {exc.msg} (line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise InvalidArgument(
            f"{where} is not JSON this reader takes: {_at(text, _too_deep(text))}nested too deeply"
        ) from None
    except ValueError:  # an integer past Python's digit limit
        found = _LONG_INTEGER.search(text)
        raise InvalidArgument(
            f"{where} is not JSON this reader takes: {_at(text, found.start() if found else None)}"
            "an integer of more than 4300 digits"
        ) from None


def _at(text: str, offset: int | None) -> str:
    if offset is None:
        return ""
    line = text.count("\n", 0, offset) + 1
    return f"line {line} column {offset - text.rfind(chr(10), 0, offset)}: "


def _too_deep(text: str) -> int | None:
    """Where the nesting of a JSON text first passes _NESTING (strings skipped)."""
    depth = 0
    in_string = escaped = False
    for i, c in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            if depth > _NESTING:
                return i
        elif c in "]}":
            depth -= 1
    return None


def read_json(path: Path, what: str) -> Any:
    return parse_json(read_text(path, what), f"{what} {path}")


def typed(
    obj: Mapping[str, Any], key: str, kinds: type | tuple[type, ...], where: str, *, required: bool = True
) -> Any:
    """``obj[key]`` when it is one of ``kinds`` (a bool is no integer); None when it is
    absent (or null) and not ``required``. InvalidArgument names ``where`` (the file and
    the place in it) and the field."""
    value = obj.get(key)
    if value is None and not required:
        return None
    allowed = kinds if isinstance(kinds, tuple) else (kinds,)
    if value is None or not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
        wanted = " or ".join(_KINDS.get(k, k.__name__) for k in allowed)
        got = "missing" if key not in obj else kind_of(value)
        raise InvalidArgument(f"{where}: {key} must be {wanted}, got {got}", field=key)
    return value
