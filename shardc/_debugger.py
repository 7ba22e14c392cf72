"""``jax.debug.breakpoint``: an interactive prompt where a program reaches it, with the values
of the traced function's local variables as the program computed them.

When the function is traced, the Python frames that called ``breakpoint`` are recorded
(file, line, source, local variables); the locals that are values of the program become the
arguments of a debug callback, the others are kept as they were. When the program runs and
reaches the callback, a command loop (JAX's ``jdb``: ``p``, ``pp``, ``u``, ``d``, ``l``,
``w``, ``c``, ``q``, or any expression) reads commands from standard input, in the frame of
the call, its locals holding the computed values.
"""
from __future__ import annotations

import cmd
import dataclasses
import inspect
import os
import pprint
import sys
import threading
import traceback

from compiler import tree
from compiler.tracing import Tracer
from ir.shape_dtype import ShapeDtypeStruct
from shardc._callbacks import debug_callback, pure_callback

# shardc's own frames are left out of what the prompt shows (``filter_frames``)
_OWN_DIRS = tuple(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), d)
                  + os.sep for d in ("shardc", "compiler", "ir", "runtime"))
_lock = threading.Lock()


@dataclasses.dataclass
class Frame:
    """One Python frame as the prompt shows it: where it is, its source, its locals."""
    filename: str
    lineno: int
    source: list
    offset: int | None          # the current line's index in ``source`` (None: no source)
    locals: dict

    @classmethod
    def of(cls, info) -> "Frame":
        try:
            lines, start = inspect.getsourcelines(info.frame)
            source = "".join(lines).split("\n")       # (as JAX shows it: a last empty line)
            offset = info.lineno - max(start, 1)
            if not 0 <= offset < len(source):
                source, offset = [], None
        except (OSError, TypeError):
            source, offset = [], None
        return cls(info.filename, info.lineno, source, offset, dict(info.frame.f_locals))


class Prompt(cmd.Cmd):
    """JAX's text debugger (``(jdb)``) over recorded frames, innermost first."""
    prompt = "(jdb) "
    intro = "Entering jdb:"

    def __init__(self, frames, stdin=None, stdout=None):
        super().__init__(stdin=stdin, stdout=stdout)
        self.use_rawinput = stdin is None
        self.frames = frames
        self.index = 0

    def evaluate(self, expression: str):
        return eval(expression, {}, dict(self.frames[self.index].locals))   # noqa: S307

    def _show(self, expression: str, formatter) -> None:
        try:
            print(formatter(self.evaluate(expression)), file=self.stdout)
        except Exception:                   # the user's expression: its error is shown
            kind, value = sys.exc_info()[:2]
            print("***", traceback.format_exception_only(kind, value)[-1].strip(),
                  file=self.stdout)

    def default(self, line):
        self._show(line, repr)

    def do_p(self, arg):
        """p expression: print its value"""
        self._show(arg, repr)

    def do_pp(self, arg):
        """pp expression: pretty-print its value"""
        self._show(arg, pprint.pformat)

    def do_up(self, arg):
        """u(p): the frame that called this one"""
        if self.index == len(self.frames) - 1:
            print("At topmost frame.", file=self.stdout)
        else:
            self.index += 1
        self.context()
    do_u = do_up

    def do_down(self, arg):
        """d(own): the frame this one called"""
        if self.index == 0:
            print("At bottommost frame.", file=self.stdout)
        else:
            self.index -= 1
        self.context()
    do_d = do_down

    def do_list(self, arg):
        """l(ist): the source around the current line"""
        self.context(lines=5)
    do_l = do_list

    def do_where(self, arg):
        """w(here), bt: the recorded frames, innermost last"""
        lines = ["Traceback:"]
        for frame in reversed(self.frames):
            lines.append(f'  File "{frame.filename}", line {frame.lineno}')
            lines.append("    " + (frame.source[frame.offset].strip()
                                   if frame.offset is not None else "<no source>"))
        print("\n".join(lines), file=self.stdout)
    do_w = do_bt = do_where

    def do_continue(self, arg):
        """c(ont(inue)): let the program go on"""
        return True
    do_c = do_cont = do_continue

    def do_quit(self, arg):
        """q(uit), exit: end the program"""
        sys.exit(0)
    do_q = do_exit = do_EOF = do_quit

    def context(self, lines: int = 2) -> None:
        frame = self.frames[self.index]
        shown = [f"> {frame.filename}({frame.lineno})"]
        if frame.offset is not None:
            for k, line in enumerate(frame.source):
                if frame.offset - 1 - lines <= k <= frame.offset + lines:
                    shown.append(("->  " if k == frame.offset else "    ") + line)
        print("\n".join(shown), file=self.stdout)

    def run(self) -> None:
        while True:
            try:
                self.cmdloop()
                return
            except KeyboardInterrupt:
                print("--KeyboardInterrupt--", file=self.stdout)


def breakpoint(*, backend=None, filter_frames: bool = True, num_frames=None,
               ordered: bool = False, token=None, **kwargs):
    """Stop where a program reaches this point and read commands (``p x``, ``c`` to go on)
    from standard input, the caller's local variables holding their values (under jit, the
    values the program computed). ``backend`` names a debugger (shardc has JAX's text one,
    ``'cli'``); ``filter_frames`` leaves shardc's own frames out; ``num_frames`` keeps that
    many. With ``token`` (an array, or a pytree of them) the stop waits for it, and the
    token is returned: a program that does not use it never stops (JAX's)."""
    if token is not None and ordered:
        raise ValueError("`ordered` and `token` are mutually exclusive arguments.")
    if backend not in (None, "cli"):
        raise ValueError(f"No debugger named {backend!r}: shardc's is 'cli'")
    infos = inspect.stack()[1:]
    if filter_frames:
        infos = [i for i in infos if not os.path.abspath(i.filename).startswith(_OWN_DIRS)]
    frames = [Frame.of(info) for info in infos[:num_frames]]
    # the locals that are values of the program reach the stop computed; the others as
    # they were
    traced = [(k, name) for k, frame in enumerate(frames)
              for name, value in frame.locals.items() if isinstance(value, Tracer)]

    def stop(*values):
        shown = [dataclasses.replace(f, locals=dict(f.locals)) for f in frames]
        for (k, name), value in zip(traced, values):
            shown[k].locals[name] = value
        with _lock:
            Prompt(shown, **kwargs).run()

    values = [frames[k].locals[name] for k, name in traced]
    if token is None:
        debug_callback(stop, *values, ordered=ordered)
        return None

    def stop_then_give(token_value, *values):
        stop(*values)
        return token_value
    shapes = tree.tree_map(lambda x: ShapeDtypeStruct(x.shape, x.dtype), token)
    return pure_callback(stop_then_give, shapes, token, *values)
