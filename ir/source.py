"""Where in the user's code something happens: the innermost frame outside shardc's own
packages and Python's library. Equations carry it (``Eqn.source``); errors name it.
"""
from __future__ import annotations

import functools
import inspect
import os
import re
import sys
import sysconfig

from ir.core import SourceInfo

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_INTERNAL = tuple(os.path.join(_ROOT, pkg) + os.sep
                  for pkg in ("shardc", "compiler", "ir", "runtime"))
# Python's own library and installed entry-point scripts are not user code either.
_NOT_USER = _INTERNAL + tuple(
    os.path.join(path, "") for path in {sysconfig.get_paths()["stdlib"],
                                        sysconfig.get_paths()["scripts"]})

# Both keyed by the code object's id, not the object (hashing a code object hashes its whole
# body); each entry holds its code object, so the id is not reused while the entry lives.
_USER_CODE: dict = {}       # id(code) -> (code, whether it is user code), once per function
_SOURCES: dict = {}         # (id(code), line) -> (code, its SourceInfo: immutable, so shared)


def frame_source(frame) -> SourceInfo | None:
    """The source of the innermost user frame at or above ``frame``, or None."""
    frame = user_frame(frame)
    return None if frame is None else _source_info(frame.f_code, frame.f_lineno)


def user_frame(frame):
    """The innermost user frame at or above ``frame``, or None."""
    while frame is not None and not _is_user(frame.f_code):
        frame = frame.f_back
    return frame


def is_user_code(code) -> bool:
    """Whether a code object is the user's: not shardc's own, nor Python's library."""
    return _is_user(code)


def _is_user(code) -> bool:
    entry = _USER_CODE.get(id(code))
    if entry is None or entry[0] is not code:
        if len(_USER_CODE) > 4096:
            _USER_CODE.clear()
        name = code.co_filename
        # "<shardc ...>": code shardc generates (a stacked body compiled to Python)
        entry = _USER_CODE[id(code)] = (code, not name.startswith(_NOT_USER)
                                        and not name.startswith(("<frozen", "<shardc")))
    return entry[1]


def caller_source() -> SourceInfo | None:
    """The innermost user frame of the current stack.

    >>> str(caller_source())      # from a user's script: 'train.py:42'
    """
    return frame_source(sys._getframe(1))


def traceback_source(tb) -> SourceInfo | None:
    """The innermost user frame of a traceback: where an exception left the user's code."""
    found = None
    while tb is not None:
        if _is_user(tb.tb_frame.f_code):
            found = _source_info(tb.tb_frame.f_code, tb.tb_lineno)
        tb = tb.tb_next
    return found


def _source_info(code, line: int) -> SourceInfo:
    entry = _SOURCES.get((id(code), line))
    if entry is None or entry[0] is not code:
        if len(_SOURCES) > 4096:
            _SOURCES.clear()
        entry = _SOURCES[id(code), line] = (
            code, SourceInfo(os.path.basename(code.co_filename), line, code.co_name))
    return entry[1]


def where_defined(fun) -> str:
    """JAX's ``fun_sourceinfo``: ``name at /path/file.py:line`` (through partials and
    wrappers); a builtin's name, else ``<unknown>``."""
    while isinstance(fun, functools.partial):
        fun = fun.func
    fun = inspect.unwrap(fun)
    code = getattr(fun, "__code__", None)
    if code is not None:
        return f"{fun.__name__} at {code.co_filename}:{code.co_firstlineno}"
    found = re.match(r"(?:<built-in function (\S+)>)", str(fun))
    return found.group(1) if found else "<unknown>"
