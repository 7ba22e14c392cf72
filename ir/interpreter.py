"""The one loop every program walker shares (torch.fx's ``Interpreter`` is the model).

A walker subclasses ``Interpreter`` and says what one equation does (``eval_equation``);
the loop keeps the environment, asserts single assignment, frees each value after its last
use, and re-raises any error with the printed equation, the device (when the program is one
device's) and the user's source line attached::

    class Evaluate(Interpreter):
        def eval_equation(self, eqn, values):
            return impl_rules[eqn.primitive](*values, **eqn.params)

    outs = Evaluate().run(program, args)

``eval_equation`` may be a generator that yields requests (a device meeting its group at a
communication node) and returns the outputs: ``steps(program, args)`` is then a generator
whose driver answers each request; ``run`` drives a program that makes none.
"""
from __future__ import annotations

import operator
import types

from ir.core import Literal, Program, Var


class Interpreter:
    """Walks a program's equations in order. ``device``: the device id whose program this
    is, named in errors (None for a program of no one device)."""

    device = None
    # Whether errors get the failing equation attached; a walker whose errors already say
    # where they come from (a tracer's, raised under the equation's own source line) opts out.
    locates_errors = True

    def eval_equation(self, eqn, values):
        """The outputs of ``eqn`` on ``values`` (a list), or a generator returning them."""
        raise NotImplementedError

    def read_literal(self, literal: Literal):
        return literal.value

    def run(self, program: Program, args, consts=()) -> list:
        """Evaluate ``program``; its equations may make no request."""
        steps = self.steps(program, args, consts)
        try:
            request = next(steps)
        except StopIteration as done:
            return done.value
        steps.close()
        raise RuntimeError(f"{type(self).__name__} cannot serve the request {request!r}: "
                           "the program communicates, and runs on a device mesh only")

    def steps(self, program: Program, args, consts=()):
        """Evaluate ``program`` as a generator: yields each request of its equations, and
        returns the outputs."""
        env: dict = {}
        for var, value in zip(program.constvars, consts):
            env[id(var)] = value
        for var, value in zip(program.invars, args):
            env[id(var)] = value
        read_literal = self.read_literal

        def read(atom):
            return read_literal(atom) if type(atom) is Literal else env[id(atom)]

        dead = last_uses(program)
        assigned = set(env)         # freed values stay assigned: single assignment holds
        for k, eqn in enumerate(program.eqns):
            values = [read(a) for a in eqn.invars]
            try:
                outs = self.eval_equation(eqn, values)
                if type(outs) is types.GeneratorType:
                    outs = yield from outs
            except Exception as err:
                if self.locates_errors:
                    self._locate(err, eqn)
                raise
            for var, value in zip(eqn.outvars, outs):
                key = id(var)
                assert key not in assigned, f"a variable of {eqn.primitive} is assigned twice"
                assigned.add(key)
                env[key] = value
            for key in dead[k]:
                del env[key]
        return [read(a) for a in program.outvars]

    def _locate(self, err: Exception, eqn) -> None:
        """Attach the failing equation, device and source line to ``err`` (once: the
        innermost equation is the one that failed)."""
        locate(err, eqn, f" on device {self.device}" if self.device is not None else "")


def locate(err: BaseException, eqn, on: str = "") -> None:
    """Note on ``err`` the equation that raised it, where it ran (``on``: " on device 3")
    and its source line, once: the innermost equation is the one that failed."""
    if getattr(err, "shardc_equation", None) is not None:
        return
    from ir.printer import print_equation
    where = f" ({eqn.source})" if eqn.source is not None else ""
    text = f"while running{on}: {print_equation(eqn)}{where}"
    try:
        err.shardc_equation = text
    except AttributeError:      # an exception type that takes no attributes
        return
    err.add_note(text)


def last_uses(program: Program) -> list:
    """For each equation, the ids of the variables read for the last time there (inputs and
    values the outputs do not name). Kept with the program for the equations it was worked
    out for: a program whose equation list was edited in place (one replaced, added or
    removed) gets it worked out again. Equations themselves are never edited."""
    eqns = program.eqns
    cached = program.__dict__.get("_last_uses")
    if cached is not None and len(cached[0]) == len(eqns) and all(map(operator.is_, cached[0],
                                                                      eqns)):
        return cached[1]
    last: dict = {}
    for k, eqn in enumerate(program.eqns):
        for atom in eqn.invars:
            if type(atom) is Var:
                last[id(atom)] = k
    kept = {id(a) for a in program.outvars if type(a) is Var}
    dead: list = [[] for _ in program.eqns]
    for key, k in last.items():
        if key not in kept:
            dead[k].append(key)
    program.__dict__["_last_uses"] = (tuple(eqns), dead)
    return dead
