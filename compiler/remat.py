"""``remat`` (``checkpoint``): choose what the backward pass recomputes instead of saving.

``remat(fun, policy=...)`` binds one ``remat`` equation carrying ``fun``'s program and the
indices of the equations whose results the policy lets autodiff save (``saved``). Forward
evaluation runs the body; partial evaluation saves only those results (and the body's inputs)
as residuals, and moves the computation of every other residual into the backward part, where
the backward pass recomputes it. With the tutorial's FSDP policy (save everything but
``all_gather``) the backward pass gathers the parameters again instead of keeping them.

``policy(prim, *avals, **params)`` is asked once per equation when the body is traced;
``str(prim)`` is the JAX name. No policy saves nothing but the inputs, as in JAX.
"""
from __future__ import annotations

import functools

import numpy as np

from compiler import tree
from compiler.ad_core import (JVPTrace, JVPTracer, Linear, backward_pass, instantiate,
                               jvp_rules, partial_eval, partial_eval_rules, transpose_rules)
from compiler.replication import infer_vma, vma_rules
from compiler.shard_map import current_shard_context
from compiler.tracing import (Replay, Tracer, aval_of, bind, current_trace, eval_trace,
                              layouts_of, set_current_trace, trace_settings, trace_to_program,
                              weakened_where, weakly_typed)
from ir import dtypes
from ir import primitives as p
from ir.core import Eqn, Program, Var
from ir.graph import io_effects
from ir.sharding import current_mesh


_NOT_GIVEN = object()


def remat(fun=None, *, policy=None, prevent_cse=True, static_argnums=(), concrete=_NOT_GIVEN):
    """``jax.remat`` / ``jax.checkpoint``: recompute ``fun``'s intermediates in the backward
    pass, except those ``policy`` allows to be saved. (``concrete`` is gone from JAX 0.10:
    giving it is JAX's NotImplementedError.)"""
    if concrete is not _NOT_GIVEN:
        raise NotImplementedError(
            "The `concrete` option to `jax.checkpoint` was deprecated in JAX v0.8.2, and "
            "removed in JAX v0.10.0. In its place please use `static_argnums`; for details "
            "refer to https://docs.jax.dev/en/latest/jep/11830-new-remat-checkpoint.html.")
    if fun is None:
        return functools.partial(remat, policy=policy, prevent_cse=prevent_cse,
                                 static_argnums=static_argnums)

    static_argnums = (static_argnums,) if isinstance(static_argnums, int) else static_argnums

    @functools.wraps(fun)
    def rematerialized(*args, **kwargs):
        # static arguments (Python values: flags, sizes) stay Python; keywords are dynamic
        static = {k: args[k] for k in static_argnums if k < len(args)}
        dynamic = tuple(a for k, a in enumerate(args) if k not in static)

        def call(dyn, kw):
            it = iter(dyn)
            return fun(*[static[k] if k in static else next(it) for k in range(len(args))],
                       **kw)

        flat, in_tree = tree.tree_flatten((dynamic, kwargs))
        key = _eager_key(static, in_tree, flat)
        traced = cache.get(key) if key is not None else None
        if traced is None:
            flat_fun, box = tree.flatten_fun(call, in_tree)
            body, consts, outs = trace_to_program(flat_fun, [aval_of(x) for x in flat],
                                                  shard=current_shard_context(),
                                                  parent=current_trace(),
                                                  in_shardings=layouts_of(flat),
                                                  weak=[weakly_typed(x) for x in flat])
            body = Program([], body.constvars + body.invars, body.eqns, body.outvars)
            saved = tuple(k for k, eqn in enumerate(body.eqns) if _saveable(policy, eqn))
            traced = (body, consts, saved, box[0], [weakly_typed(o) for o in outs])
            if key is not None and not any(isinstance(c, Tracer) for c in consts):
                cache[key] = traced
        body, consts, saved, out_tree, weak = traced
        outs = bind(p.remat_p, *consts, *flat, jaxpr=body, saved=saved)
        if current_trace() is eval_trace:
            # called eagerly: a result the body did not compute (a constant of it) is an
            # array all the same, as a jitted function's; weakly typed where it traced so (a
            # Python number passed through stays one, as JAX's typed scalar)
            outs = [bind(p.convert_element_type_p, o, new_dtype=o.dtype)
                    if isinstance(o, (np.ndarray, np.generic)) else o for o in outs]
        return tree.tree_unflatten(out_tree, weakened_where(outs, weak))

    # called eagerly, the body is traced once per signature (as JAX caches it), not per call
    cache: dict = {}
    return rematerialized


def _eager_key(static: dict, in_tree, flat):
    """What an eager call's trace of the body depends on: the arguments' structure, types and
    layouts, the static arguments and x64; None (trace again) under another trace or in a
    shard_map body, or where a static argument cannot be hashed."""
    if current_trace() is not eval_trace or current_shard_context() is not None:
        return None
    key = (tuple(sorted(static.items())), in_tree, tuple(aval_of(x) for x in flat),
           tuple(weakly_typed(x) for x in flat), tuple(layouts_of(flat)),
           dtypes.x64_enabled(), current_mesh(), trace_settings())
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _saveable(policy, eqn) -> bool:
    if policy is None:
        return False
    return bool(policy(eqn.primitive, *[a.aval for a in eqn.invars], **eqn.params))


def _remat_types(in_vmas, *, jaxpr, saved):
    outs, _ = infer_vma(jaxpr, list(in_vmas))
    return list(in_vmas), outs


vma_rules[p.remat_p] = _remat_types


# --- JVP: a remat of the body's JVP, the policy carried to the equations each one became ------

def _remat_jvp(primals, tangents, *, jaxpr, saved):
    nonzero = [t is not None for t in tangents]
    tags: list = []
    saved_set = set(saved)

    def fun(*args):
        staging = current_trace()
        trace = JVPTrace(staging)
        it = iter(args[len(primals):])
        operands = [JVPTracer(trace, a, next(it) if nz else None)
                    for a, nz in zip(args[:len(primals)], nonzero)]
        staged = [len(staging.eqns)]

        def tag(k):     # the equations staged for equation k keep its policy
            tags.extend([k in saved_set] * (len(staging.eqns) - staged[0]))
            staged[0] = len(staging.eqns)

        with set_current_trace(trace):
            results = [trace.to_tracer(out) for out in Replay(tag).run(jaxpr, operands)]
        return ([r.primal for r in results]
                + [instantiate(r.tangent, aval_of(r.primal)) for r in results])

    avals = jaxpr.in_avals + [a for a, nz in zip(jaxpr.in_avals, nonzero) if nz]
    body, consts, _ = trace_to_program(fun, avals, shard=current_shard_context(),
                                       parent=current_trace())
    # constants the rules made (a custom rule's zeros, say) enter as leading inputs
    body = Program([], body.constvars + body.invars, body.eqns, body.outvars)
    new_saved = tuple(k for k, keep in enumerate(tags) if keep)
    outs = bind(p.remat_p, *consts, *primals, *[t for t in tangents if t is not None],
                jaxpr=body, saved=new_saved)
    n = len(jaxpr.outvars)
    return outs[:n], outs[n:]


jvp_rules[p.remat_p] = _remat_jvp


# --- partial evaluation: save what the policy allows, recompute the rest ----------------------------

def _remat_partial_eval(eqn: Eqn, ins_unknown: list):
    """Three equations: the known part (its outputs and the results the policy saves), a
    recomputation (every other value the backward part needs, from the saved ones: it runs
    again in the backward pass), and the linear part."""
    body = eqn.params["jaxpr"]
    effects = io_effects(body)
    if effects:         # recomputed, an io_callback would run twice
        raise NotImplementedError("Effects not supported in partial-eval of "
                                  f"`checkpoint`/`remat`: [{', '.join(effects)}]")
    saved_eqns = {id(body.eqns[k]) for k in eqn.params["saved"]}
    split = partial_eval(body, ins_unknown, [False] * len(body.outvars))
    n_keep = len(split.known.outvars) - split.num_residuals
    residuals = split.known.outvars[n_keep:]
    producer = {id(v): e for e in split.known.eqns for v in e.outvars}
    inputs = {id(v) for v in split.known.invars}

    def is_saved(var) -> bool:
        # an equation a rule split off (a shard_map's forward part) is saved as its original
        if id(var) in inputs:
            return True
        made_by = producer[id(var)]
        return id(split.origin.get(id(made_by), made_by)) in saved_eqns

    replay: dict = {}

    def need(var):
        """Recompute ``var`` from saved values: collect its producers, inputs first."""
        if is_saved(var) or id(producer[id(var)]) in replay:
            return
        made_by = producer[id(var)]
        for atom in made_by.invars:
            if isinstance(atom, Var):
                need(atom)
        replay[id(made_by)] = made_by

    # the body's known outputs are computed by the forward part: the backward part reads
    # them from there (saved, where it needs them), as JAX's remat saves a block's output
    known_outs: list = []
    for var in list(residuals) + [o for _, o in known_outs]:
        need(var)
    saved_res = _unique(v for v in residuals if is_saved(v))
    for e in replay.values():
        saved_res += _unique(a for a in e.invars if isinstance(a, Var) and is_saved(a)
                             and all(a is not r for r in saved_res))
    redone = _unique([v for v in residuals if not is_saved(v)] + [o for _, o in known_outs])
    known_out_flags = [not u for u in split.out_unknown]
    # saved inputs of the remat are read from outside it directly, not passed through it
    outer_input = {id(v): a for v, a in zip(body.invars, eqn.invars)}
    saved_values = [v for v in saved_res if id(v) not in outer_input]
    outer_saved_values = [Var(v.aval) for v in saved_values]
    outer_of = {id(v): o for v, o in zip(saved_values, outer_saved_values)}
    outer_of.update({id(v): outer_input[id(v)] for v in saved_res if id(v) in outer_input})
    outer_saved = [outer_of[id(v)] for v in saved_res]
    outer_redone = [Var(v.aval) for v in redone]
    known_eqn = Eqn(p.remat_p, [a for a, u in zip(eqn.invars, ins_unknown) if not u],
                    [v for v, k in zip(eqn.outvars, known_out_flags) if k] + outer_saved_values,
                    dict(jaxpr=Program([], list(split.known.invars), split.known.eqns,
                                       list(split.known.outvars[:n_keep]) + saved_values),
                         saved=tuple(range(len(split.known.eqns)))), eqn.source)
    replay_eqns, redo_inputs, redo_outputs = _fresh_replay(
        [e for e in split.known.eqns if id(e) in replay], saved_res, redone)
    redo_eqn = Eqn(p.remat_p, outer_saved, outer_redone,
                   dict(jaxpr=Program([], redo_inputs, replay_eqns, redo_outputs),
                        saved=()), eqn.source)
    outer_of.update({id(v): o for v, o in zip(redone, outer_redone)})
    linear_eqn = Eqn(p.remat_p,
                     [outer_of[id(r)] for r in residuals]
                     + [a for a, u in zip(eqn.invars, ins_unknown) if u],
                     [v for v, k in zip(eqn.outvars, known_out_flags) if not k],
                     dict(jaxpr=split.unknown, saved=()), eqn.source)
    renames = {id(eqn.outvars[k]): outer_of[id(o)] for k, o in known_outs}
    unknown_outs = [v for v, k in zip(eqn.outvars, known_out_flags) if not k]
    return [known_eqn], [redo_eqn, linear_eqn], unknown_outs, renames


def _fresh_replay(eqns, inputs, outputs):
    """The recomputation with variables of its own, so it never binds a variable the forward
    part binds too (both may end up inlined in one device's program)."""
    fresh = {id(v): Var(v.aval) for v in inputs}
    copies = []
    for e in eqns:
        for v in e.outvars:
            fresh[id(v)] = Var(v.aval)
        copies.append(Eqn(e.primitive, [fresh.get(id(a), a) for a in e.invars],
                          [fresh[id(v)] for v in e.outvars], e.params, e.source))
    return copies, [fresh[id(v)] for v in inputs], [fresh[id(v)] for v in outputs]


def _unique(values) -> list:
    seen, out = set(), []
    for v in values:
        if id(v) not in seen:
            seen.add(id(v))
            out.append(v)
    return out


partial_eval_rules[p.remat_p] = _remat_partial_eval


def _remat_transpose(cts, *args, jaxpr, saved):
    """Inline the body's backward pass: its non-linear equations (the recomputation) run first."""
    in_cts = backward_pass(jaxpr, list(args), list(cts))
    it = iter(in_cts)
    return [next(it) if isinstance(a, Linear) else None for a in args]


transpose_rules[p.remat_p] = _remat_transpose
