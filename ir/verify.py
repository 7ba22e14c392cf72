"""The verifier: a program is well formed if every variable is defined once before it is used,
every equation's outputs agree with its shape rule, and its sub-programs are well formed."""
from __future__ import annotations

import os

from ir import primitives as prims
from ir.core import Literal, Program, Var, programs_in
from ir.printer import print_program
from ir.shapes import out_avals


class VerifyError(ValueError):
    """A malformed program; the message names the equation."""


# Programs built by the tracer are well formed by construction (every equation's types come
# from its shape rule as it is recorded), so verifying them again on every trace is a debug
# check, off by default and on in the test suite: SHARDC_CHECKS=1. Passes, the parser and the
# lowering verify what they build always.
CHECKS = os.environ.get("SHARDC_CHECKS", "") not in ("", "0")


def check_traced(prog: Program) -> None:
    """Verify a freshly traced program when SHARDC_CHECKS is on."""
    if CHECKS:
        verify(prog)


def verify(prog: Program) -> None:
    """Raise ``VerifyError`` naming the first equation that breaks a rule."""
    defined: set = set()

    def define(var, where):
        if not isinstance(var, Var):
            raise VerifyError(f"{where}: binder {var!r} is not a variable")
        if id(var) in defined:
            raise VerifyError(f"{where}: variable {var!r} is assigned twice")
        defined.add(id(var))

    def use(atom, where):
        if isinstance(atom, Literal):
            return
        if not isinstance(atom, Var) or id(atom) not in defined:
            raise VerifyError(f"{where}: {atom!r} is used before it is defined")

    for v in prog.constvars:
        define(v, "constants")
    for v in prog.invars:
        define(v, "inputs")
    if len(prog.consts) not in (0, len(prog.constvars)):
        raise VerifyError("constants: values do not match constvars")
    for k, eqn in enumerate(prog.eqns):
        where = f"equation {k} ({_eqn_text(eqn)})"
        for atom in eqn.invars:
            use(atom, where)
        _check_types(eqn, where)
        for value in eqn.params.values():
            for sub in programs_in(value):
                try:
                    verify(sub)
                except VerifyError as err:
                    raise VerifyError(f"{where}: in its sub-program: {err}") from None
        for var in eqn.outvars:
            define(var, where)
    for atom in prog.outvars:
        use(atom, "outputs")


def _check_types(eqn, where):
    try:
        expected = out_avals(eqn.primitive, [a.aval for a in eqn.invars], eqn.params)
    except prims.MissingRuleError:
        raise VerifyError(f"{where}: primitive '{eqn.primitive}' has no shape rule") from None
    except Exception as err:  # a shape rule rejecting its operands
        raise VerifyError(f"{where}: {err}") from None
    if len(expected) != len(eqn.outvars):
        raise VerifyError(f"{where}: expected {len(expected)} outputs, got {len(eqn.outvars)}")
    for want, var in zip(expected, eqn.outvars):
        got = var.aval
        if (want.shape, want.dtype) != (got.shape, got.dtype):
            raise VerifyError(f"{where}: output has type {got.str_short()} but its shape rule "
                              f"gives {want.str_short()}")


def _eqn_text(eqn) -> str:
    return f"{eqn.primitive.name}"


def verify_text(prog: Program) -> str:
    """Verify and return the printed program (a convenience for tests)."""
    verify(prog)
    return print_program(prog)
