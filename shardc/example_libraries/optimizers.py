"""``shardc.example_libraries.optimizers`` (``jax.example_libraries.optimizers``).

An optimizer is a triple of pure functions, ``(init_fun, update_fun, get_params)``:
``init_fun(params)`` gives an ``OptimizerState``, ``update_fun(step, grads, state)`` the next
state, and ``get_params(state)`` the parameters, for any pytree of arrays::

    opt_init, opt_update, get_params = optimizers.adam(1e-3)
    state = opt_init(params)
    for i in range(steps):
        state = opt_update(i, jax.grad(loss)(get_params(state)), state)

Each optimizer is written for one array; the ``optimizer`` decorator lifts it to pytrees by
keeping one inner state per parameter leaf. A step size is a number or a schedule, a function
from the step index to a number. The update formulas are JAX's, term for term, so a training
run gives JAX's numbers.
"""
from __future__ import annotations

import functools
from collections import namedtuple
from typing import Any, Callable, NamedTuple

from shardc import numpy as jnp
from shardc import tree_util

__all__ = [
    "Optimizer", "OptimizerState", "JoinPoint", "optimizer", "sgd", "momentum", "nesterov",
    "adagrad", "rmsprop", "rmsprop_momentum", "adam", "adamax", "sm3", "constant",
    "exponential_decay", "inverse_time_decay", "polynomial_decay", "piecewise_constant",
    "make_schedule", "l2_norm", "clip_grads", "unpack_optimizer_state", "pack_optimizer_state",
]

Schedule = Callable[[int], Any]

# The state of a pytree of parameters: one flat list of leaves per parameter (its inner
# state flattened), the parameters' tree, and each inner state's tree. Only the leaves are
# pytree children, so the state passes through jit, grad and friends as arrays.
OptimizerState = namedtuple("OptimizerState", ["packed_state", "tree_def", "subtree_defs"])
tree_util.register_pytree_node(
    OptimizerState,
    lambda state: ((state.packed_state,), (state.tree_def, state.subtree_defs)),
    lambda aux, children: OptimizerState(children[0], aux[0], aux[1]))


class Optimizer(NamedTuple):
    init_fn: Callable
    update_fn: Callable
    params_fn: Callable


def _flatten_states(states) -> tuple[list, list]:
    """Each inner state's leaves and tree, as two lists."""
    flat = [tree_util.tree_flatten(state) for state in states]
    return [leaves for leaves, _ in flat], [treedef for _, treedef in flat]


def _inner_states(opt_state) -> list:
    states_flat, _, subtrees = opt_state
    return [tree_util.tree_unflatten(treedef, leaves)
            for treedef, leaves in zip(subtrees, states_flat, strict=True)]


def optimizer(opt_maker: Callable) -> Callable[..., Optimizer]:
    """Lifts an optimizer written for one array to pytrees of arrays.

    ``opt_maker(*args)`` returns ``(init, update, get_params)`` for a single array, whose
    state may itself be a pytree; the decorated maker returns the same triple over any
    pytree of parameters, with an ``OptimizerState`` holding every leaf's state. ``update``
    refuses (TypeError) a gradient tree unlike the parameters', or an inner update that
    changes its state's structure.

    >>> @optimizer
    ... def halving():
    ...     return (lambda x: x), (lambda i, g, x: x - g / 2), (lambda x: x)
    """
    @functools.wraps(opt_maker)
    def tree_opt_maker(*args, **kwargs) -> Optimizer:
        init, update, get_params = opt_maker(*args, **kwargs)

        @functools.wraps(init)
        def tree_init(x0_tree):
            leaves, treedef = tree_util.tree_flatten(x0_tree)
            states_flat, subtrees = _flatten_states([init(x0) for x0 in leaves])
            return OptimizerState(states_flat, treedef, subtrees)

        @functools.wraps(update)
        def tree_update(i, grad_tree, opt_state):
            _, treedef, subtrees = opt_state
            grads, grad_treedef = tree_util.tree_flatten(grad_tree)
            if grad_treedef != treedef:
                raise TypeError(
                    "optimizer update function was passed a gradient tree that did not match "
                    f"the parameter tree structure with which it was initialized: parameter "
                    f"tree {treedef} and grad tree {grad_treedef}.")
            states = _inner_states(opt_state)
            new_flat, new_subtrees = _flatten_states(
                [update(i, g, state) for g, state in zip(grads, states, strict=True)])
            for before, after in zip(subtrees, new_subtrees):
                if after != before:
                    raise TypeError(
                        "optimizer update function produced an output structure that did not "
                        f"match its input structure: input {before} and output {after}.")
            return OptimizerState(new_flat, treedef, subtrees)

        @functools.wraps(get_params)
        def tree_get_params(opt_state):
            params = [get_params(state) for state in _inner_states(opt_state)]
            return tree_util.tree_unflatten(opt_state.tree_def, params)

        return Optimizer(tree_init, tree_update, tree_get_params)
    return tree_opt_maker


# ----- optimizers (one array each) -----

def _params_of(state):
    return state[0]


@optimizer
def sgd(step_size):
    """Stochastic gradient descent: ``x - step_size(i) * g``."""
    step_size = make_schedule(step_size)
    return (lambda x0: x0), (lambda i, g, x: x - step_size(i) * g), (lambda x: x)


def _with_zeros(x0, count: int) -> tuple:
    """A parameter's initial state: the parameter and ``count`` zero statistics like it."""
    return (x0,) + tuple(jnp.zeros_like(x0) for _ in range(count))


def _momentum(step_size, mass: float, look_ahead: bool) -> tuple:
    """Momentum's triple: ``v = mass * v + g``, then a step along ``v`` (heavy ball) or
    along ``mass * v + g`` (Nesterov's look-ahead)."""
    step_size = make_schedule(step_size)

    def update(i, g, state):
        x, velocity = state
        velocity = mass * velocity + g
        direction = mass * velocity + g if look_ahead else velocity
        return x - step_size(i) * direction, velocity
    return (lambda x0: _with_zeros(x0, 1)), update, _params_of


@optimizer
def momentum(step_size, mass: float):
    """Heavy-ball momentum: ``v = mass * v + g``, ``x - step_size(i) * v``."""
    return _momentum(step_size, mass, look_ahead=False)


@optimizer
def nesterov(step_size, mass: float):
    """Nesterov momentum: ``v = mass * v + g``, ``x - step_size(i) * (mass * v + g)``."""
    return _momentum(step_size, mass, look_ahead=True)


@optimizer
def adagrad(step_size, momentum=0.9):
    """Adagrad with momentum: steps scaled by the inverse root of the summed squared
    gradients (zero where that sum is zero)."""
    step_size = make_schedule(step_size)

    def update(i, g, state):
        x, g_sq, m = state
        g_sq = g_sq + jnp.square(g)
        inv_root = jnp.where(g_sq > 0, 1. / jnp.sqrt(g_sq), 0.0)
        m = (1. - momentum) * (g * inv_root) + momentum * m
        return x - step_size(i) * m, g_sq, m
    return (lambda x0: _with_zeros(x0, 2)), update, _params_of


@optimizer
def rmsprop(step_size, gamma=0.9, eps=1e-8):
    """RMSProp: steps divided by the root of a decaying mean of squared gradients."""
    step_size = make_schedule(step_size)

    def update(i, g, state):
        x, avg_sq_grad = state
        avg_sq_grad = avg_sq_grad * gamma + jnp.square(g) * (1. - gamma)
        return x - step_size(i) * g / jnp.sqrt(avg_sq_grad + eps), avg_sq_grad
    return (lambda x0: _with_zeros(x0, 1)), update, _params_of


@optimizer
def rmsprop_momentum(step_size, gamma=0.9, eps=1e-8, momentum=0.9):
    """RMSProp whose scaled steps accumulate with ``momentum``."""
    step_size = make_schedule(step_size)

    def update(i, g, state):
        x, avg_sq_grad, mom = state
        avg_sq_grad = avg_sq_grad * gamma + jnp.square(g) * (1. - gamma)
        mom = momentum * mom + step_size(i) * g / jnp.sqrt(avg_sq_grad + eps)
        return x - mom, avg_sq_grad, mom
    return (lambda x0: _with_zeros(x0, 2)), update, _params_of


def _bias_correction(beta, like, i):
    """``1 - beta ** (i + 1)``, with ``beta`` in the moments' dtype."""
    return 1 - jnp.asarray(beta, like.dtype) ** (i + 1)


@optimizer
def adam(step_size, b1=0.9, b2=0.999, eps=1e-8):
    """Adam: bias-corrected first and second moment estimates."""
    step_size = make_schedule(step_size)

    def update(i, g, state):
        x, m, v = state
        m = (1 - b1) * g + b1 * m
        v = (1 - b2) * jnp.square(g) + b2 * v
        mhat = m / _bias_correction(b1, m, i)
        vhat = v / _bias_correction(b2, m, i)
        return x - step_size(i) * mhat / (jnp.sqrt(vhat) + eps), m, v
    return (lambda x0: _with_zeros(x0, 2)), update, _params_of


@optimizer
def adamax(step_size, b1=0.9, b2=0.999, eps=1e-8):
    """Adamax: Adam with the infinity norm for the second moment."""
    step_size = make_schedule(step_size)

    def update(i, g, state):
        x, m, u = state
        m = (1 - b1) * g + b1 * m
        u = jnp.maximum(b2 * u, jnp.abs(g))
        x = x - (step_size(i) / _bias_correction(b1, m, i)) * m / (u + eps)
        return x, m, u
    return (lambda x0: _with_zeros(x0, 2)), update, _params_of


def _sm3_cover(ndim: int, accumulator, axis: int):
    """An axis's accumulator indexed to broadcast along ``axis`` of a rank-``ndim`` array."""
    index = [None] * ndim
    index[axis:axis + 1] = [slice(None)]     # a scalar's gradient takes the accumulator whole
    return accumulator[tuple(index)]


@optimizer
def sm3(step_size, momentum=0.9):
    """SM3 (memory-efficient adaptive optimization): one accumulator per axis, a leaf's
    second-moment estimate the least of its axes' accumulators."""
    step_size = make_schedule(step_size)

    def init(x0):
        x_shape = x0.shape
        x0 = jnp.atleast_1d(x0)
        accumulators = [jnp.zeros(size, dtype=x0.dtype) for size in x0.shape]
        return x0, jnp.zeros_like(x0), accumulators, x_shape

    def update(i, g, state):
        x, m, accumulators, x_shape = state
        covers = [_sm3_cover(g.ndim, v, axis) for axis, v in enumerate(accumulators)]
        accum = functools.reduce(jnp.minimum, covers) + jnp.square(g)
        inv_root = jnp.where(accum > 0, 1. / jnp.sqrt(accum), 0)
        m = (1. - momentum) * (g * inv_root) + momentum * m
        x = x - step_size(i) * m
        accumulators = [accum.max(tuple(d for d in range(x.ndim) if d != axis))
                        for axis in range(x.ndim)]
        return x, m, accumulators, x_shape

    def get_params(state):
        x, _, _, x_shape = state
        return x.reshape(x_shape)
    return init, update, get_params


# ----- step-size schedules -----

def constant(step_size) -> Schedule:
    return lambda i: step_size


def exponential_decay(step_size, decay_steps, decay_rate) -> Schedule:
    return lambda i: step_size * decay_rate ** (i / decay_steps)


def inverse_time_decay(step_size, decay_steps, decay_rate, staircase=False) -> Schedule:
    if staircase:
        return lambda i: step_size / (1 + decay_rate * jnp.floor(i / decay_steps))
    return lambda i: step_size / (1 + decay_rate * i / decay_steps)


def polynomial_decay(step_size, decay_steps, final_step_size, power=1.0) -> Schedule:
    def schedule(step_num):
        step_num = jnp.minimum(step_num, decay_steps)
        step_mult = (1 - step_num / decay_steps) ** power
        return step_mult * (step_size - final_step_size) + final_step_size
    return schedule


def piecewise_constant(boundaries, values) -> Schedule:
    """``values[k]`` for steps past ``k`` of the ``boundaries`` (one fewer than values)."""
    boundaries = jnp.array(boundaries)
    values = jnp.array(values)
    if not boundaries.ndim == values.ndim == 1:
        raise ValueError("boundaries and values must be sequences")
    if boundaries.shape[0] != values.shape[0] - 1:
        raise ValueError("boundaries length must be one shorter than values length")
    return lambda i: values[jnp.sum(i > boundaries)]


def make_schedule(scalar_or_schedule) -> Schedule:
    """A schedule as given, or a number as a constant schedule (TypeError otherwise)."""
    if callable(scalar_or_schedule):
        return scalar_or_schedule
    if jnp.ndim(scalar_or_schedule) == 0:
        return constant(scalar_or_schedule)
    raise TypeError(type(scalar_or_schedule))


# ----- utilities -----

def l2_norm(tree):
    """The l2 norm of all the leaves of ``tree`` together."""
    leaves = tree_util.tree_leaves(tree)
    return jnp.sqrt(sum(jnp.vdot(x, x) for x in leaves))


def clip_grads(grad_tree, max_norm):
    """``grad_tree`` scaled down to l2 norm ``max_norm`` where it is longer."""
    norm = l2_norm(grad_tree)
    return tree_util.tree_map(
        lambda g: jnp.where(norm < max_norm, g, g * (max_norm / norm)), grad_tree)


# ----- serialization -----

class JoinPoint:
    """A leaf of the parameters' tree that holds that leaf's own state tree."""

    def __init__(self, subtree):
        self.subtree = subtree

    def __iter__(self):     # looks iterable, as containers of arrays do
        yield self.subtree


def unpack_optimizer_state(opt_state):
    """``opt_state`` as the parameters' tree with a ``JoinPoint`` holding each leaf's state:
    a plain structure to serialize."""
    joins = [JoinPoint(state) for state in _inner_states(opt_state)]
    return tree_util.tree_unflatten(opt_state.tree_def, joins)


def pack_optimizer_state(marked_pytree):
    """The ``OptimizerState`` that ``unpack_optimizer_state`` unpacked."""
    joins, treedef = tree_util.tree_flatten(marked_pytree)
    if not all(isinstance(join, JoinPoint) for join in joins):
        raise TypeError("pack_optimizer_state: every leaf must be a JoinPoint, as "
                        "unpack_optimizer_state leaves them")
    states_flat, subtrees = _flatten_states([join.subtree for join in joins])
    return OptimizerState(states_flat, treedef, subtrees)
