"""Scheduling: an order of equations that issues communication as early as possible."""
from __future__ import annotations

import dataclasses

from ir.core import Program
from ir.graph import communicates, dependency_graph, replace_sub_programs
from ir.verify import verify


def schedule(program: Program) -> Program:
    """Reorder equations so communication starts as soon as its operands exist.

    Policy (deterministic; a priority-keyed topological sort of the dependency graph):

    - a communicating equation (a front-end collective, a per-device communication node, or a
      higher-order equation with one inside) is placed as soon as its operands and the
      communicating equation before it are placed;
    - communicating equations keep their relative order, so every device of a group still
      meets at its nodes in the same order, whatever else differs between devices' programs;
    - all other equations keep their relative order (so ``debug_print`` output is unchanged),
      each placed after the communication that precedes it in the result.

    Sub-programs are scheduled the same way, each on its own. Scheduling a scheduled program
    changes nothing.

    Args: program: a traced or per-device program.
    Returns: a new, verified program with the same equations, inputs and outputs.

    >>> [e.primitive.name for e in schedule(p).eqns]   # p: dot_general, sin, all_reduce(dot)
    ['dot_general', 'all_reduce', 'sin']
    """
    result = _schedule(program)
    verify(result)
    return result


def _schedule(program: Program) -> Program:
    eqns = [replace_sub_programs(eqn, _schedule) for eqn in program.eqns]
    graph = dependency_graph(dataclasses.replace(program, eqns=eqns))
    early = [k for k, eqn in enumerate(eqns) if communicates(eqn)]
    graph.add_edges_from(zip(early, early[1:]))      # communication keeps its order
    first = set(early)
    import networkx as nx   # on first use: it takes longer to load than the rest of shardc
    order = nx.lexicographical_topological_sort(graph, key=lambda k: (k not in first, k))
    return Program(list(program.constvars), list(program.invars), [eqns[k] for k in order],
                   list(program.outvars), list(program.consts))
