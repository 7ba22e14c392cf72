"""Functions the CLI tests lower: a decorated shard_map, a jitted one, plain bodies."""
from functools import partial

import shardc
import shardc.numpy as jnp
from shardc import lax
from shardc.sharding import PartitionSpec as P

mesh = shardc.make_mesh((4, 2), ("x", "y"))


@partial(shardc.shard_map, mesh=mesh, in_specs=(P("x", "y"), P("y", None)),
         out_specs=P("x", None))
def matmul_basic(a_block, b_block):
    return lax.psum(jnp.dot(a_block, b_block), "y")


@shardc.jit
def jitted(a, b):
    return matmul_basic(a, b) * 2


def double(a):
    return a * 2


def total(a):
    return lax.psum(a, "x")


@partial(shardc.shard_map, mesh=mesh, in_specs=P("x"), out_specs=P(), check_vma=False)
def unchecked_bad(a):
    return a * 2


def ring(a):
    return lax.fori_loop(0, 3, lambda i, v: lax.ppermute(v, "x", [(k, (k + 1) % 4)
                                                                   for k in range(4)]), a)


@partial(shardc.shard_map, mesh=mesh, in_specs=P("x"), out_specs=P(), check_vma=False)
def unchecked_good(a):
    return lax.psum(a, "x")


def _old_unchecked(a):
    return a * 2


from shardc.experimental.shard_map import shard_map as old_shard_map  # noqa: E402

old_unchecked = old_shard_map(_old_unchecked, mesh, in_specs=P("x"), out_specs=P(),
                              check_rep=False)


def scaled(a, *, scale):
    return a * scale


def optional_bias(a, bias=0.0):
    return a + bias


def summed(first, *rest):
    return sum(rest, first)


@shardc.jit
def centered(a):
    """Explicit sharding: typed by its argument (--args 'f32[8@x,4@y]' on the mesh above)."""
    return a - jnp.mean(a, axis=0)
