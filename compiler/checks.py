"""``check`` equations (``checkify.check``) outside ``checkify``.

A check holds an error value's leaves. Bound eagerly (a concrete error) it raises at once when
the error holds a failure; under ``checkify`` it becomes part of the function's error result
(``shardc.experimental.checkify``). A compiled program may hold none: JAX cannot run a check it
has not functionalized, and says so when the program is compiled, where a debug check
(``debug_check``) is dropped instead::

    jit(lambda x: check(x > 0, "positive"))(1.)
    ValueError: Cannot abstractly evaluate a checkify.check which was not functionalized. ...
"""
from __future__ import annotations

from compiler.tracing import eager_rules
from compiler.tree import tree_unflatten
from ir import primitives as prims
from ir.core import Program
from ir.graph import holds_equation, replace_sub_programs

# whether any check was ever bound (most programs hold none: nothing to look for)
_bound = [False]


def functionalization_error() -> ValueError:
    """JAX's error for a program compiled with a check left in it."""
    return ValueError("Cannot abstractly evaluate a checkify.check which was not "
                      "functionalized. This probably means you tried to stage "
                      "(jit/scan/pmap/...) a `check` without functionalizing it through "
                      "`checkify.checkify`.")


def mark_bound() -> None:
    """Note that a check was traced: compiled programs are searched for checks from now on."""
    _bound[0] = True


def _check_now(*leaves, err_tree, debug):
    """A check of a concrete error: raised now where it failed (a debug check never is)."""
    if not debug:
        tree_unflatten(err_tree, list(leaves)).throw()
    return []


eager_rules[prims.check_p] = _check_now


def without_checks(program: Program) -> Program:
    """``program`` with its debug checks dropped, ``program`` itself where it holds none;
    ValueError (``functionalization_error``) where it holds another check."""
    if not holds_checks(program):
        return program
    eqns = []
    for eqn in program.eqns:
        if eqn.primitive is prims.check_p:
            if not eqn.params["debug"]:
                raise functionalization_error()
            continue
        eqns.append(replace_sub_programs(eqn, without_checks))
    return Program(program.constvars, program.invars, eqns, program.outvars,
                   list(program.consts))


def holds_checks(program: Program) -> bool:
    """Whether ``program`` holds a check, in a sub-program too."""
    return _bound[0] and holds_equation(program, _is_check)


def _is_check(eqn) -> bool:
    return eqn.primitive is prims.check_p
