"""The seed tutorial's examples (first half of JAX's shard_map tutorial, up to psum), run by
shardc with only the imports changed. ``make demo`` runs this file; its functions can also be
given to ``shardc lower examples/seed_tutorial.py:matmul_basic``."""
import os
os.environ["XLA_FLAGS"] = '--xla_force_host_platform_device_count=8'  # Use 8 CPU devices

import warnings
from functools import partial

import numpy as np

import shardc as jax
import shardc.numpy as jnp
from shardc.sharding import Mesh, NamedSharding, PartitionSpec as P
from shardc.experimental import mesh_utils
with warnings.catch_warnings():
    # the tutorial's import: the old form, which JAX 0.10 (and shardc) warns is deprecated;
    # silenced so that the demo prints what the tutorial prints
    warnings.simplefilter("ignore", DeprecationWarning)
    from shardc.experimental.shard_map import shard_map
from shardc.tree_util import tree_map, tree_all

devices = mesh_utils.create_device_mesh((4, 2))
mesh = Mesh(devices, axis_names=('x', 'y'))


@partial(shard_map, mesh=mesh, in_specs=(P('x', 'y'), P('y', None)),
         out_specs=P('x', None))
def matmul_basic(a_block, b_block):
    # a_block: f32[2, 8]
    # b_block: f32[8, 4]
    c_partialsum = jnp.dot(a_block, b_block)
    c_block = jax.lax.psum(c_partialsum, 'y')
    # c_block: f32[2, 4]
    return c_block


def allclose(a, b):
    return tree_all(tree_map(partial(jnp.allclose, atol=1e-2, rtol=1e-2), a, b))


@jax.jit
def matmul_reference(a, b):
    c = jnp.dot(a, b)
    return jax.lax.with_sharding_constraint(c, NamedSharding(mesh, P('x', None)))


def check_vmap(f, xs):
    ans = jax.vmap(f, in_axes=(0,), out_axes=0)(xs)
    expected = jnp.stack([f(x) for x in xs])  # vmap reference semantics
    print(allclose(ans, expected))


mesh1d_4 = Mesh(np.array(jax.devices()[:4]), ('i',))  # mesh.shape['i'] = 4


def check_shmap(f, y):
    ans = shard_map(f, mesh1d_4, in_specs=P('i'), out_specs=P('i'))(y)
    expected = jnp.concatenate([f(y_blk) for y_blk in jnp.split(y, mesh1d_4.shape['i'])])
    print(allclose(ans, expected))


mesh_ij = Mesh(mesh_utils.create_device_mesh((4, 2)), ('i', 'j'))


@partial(shard_map, mesh=mesh_ij, in_specs=P('i', None), out_specs=P('i', 'j'))
def f1(x_block):
    print(x_block.shape)  # prints (3, 12)
    return x_block


@partial(shard_map, mesh=mesh_ij, in_specs=P('i', 'j'), out_specs=P('i', 'j'))
def f2(x_block):
    print(x_block.shape)
    return x_block


@partial(shard_map, mesh=mesh_ij, in_specs=P('i', 'j'), out_specs=P('i', None))
def f3(x_block):
    return jax.lax.psum(x_block, 'j')


@partial(shard_map, mesh=mesh_ij, in_specs=P('i', 'j'), out_specs=P(None, 'j'))
def f4(x_block):
    return jax.lax.psum(x_block, 'i')


@partial(shard_map, mesh=mesh_ij, in_specs=P('i', 'j'), out_specs=P(None, None))
def f5(x_block):
    return jax.lax.psum(x_block, ('i', 'j'))


mesh1d = Mesh(jax.devices()[:4], ('i',))


@partial(shard_map, mesh=mesh1d, in_specs=P('i'), out_specs=P(None))
def psum_f1(x_block):
    print('BEFORE:\n', x_block)
    y_block = jax.lax.psum(x_block, 'i')
    print('AFTER:\n', y_block)
    return y_block


mesh2d = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ('i', 'j'))


@partial(shard_map, mesh=mesh2d, in_specs=P('i', 'j'), out_specs=P(None, 'j'))
def psum_f2(x_block):
    print('BEFORE:\n', x_block)
    y_block = jax.lax.psum(x_block, 'i')
    print('AFTER:\n', y_block)
    return y_block


@partial(shard_map, mesh=mesh2d, in_specs=P('i', 'j'), out_specs=P(None, None))
def psum_f3(x_block):
    print('BEFORE:\n', x_block)
    y_block = jax.lax.psum(x_block, ('i', 'j'))
    print('AFTER:\n', y_block)
    return y_block


def section(title):
    print(f"\n=== {title} " + "=" * max(0, 72 - len(title)))


def main():
    section("So, let's see a shard_map!")
    a = jnp.arange(8 * 16.).reshape(8, 16)
    b = jnp.arange(16 * 4.).reshape(16, 4)
    c = matmul_basic(a, b)   # c: f32[8, 4]
    print(allclose(c, jnp.dot(a, b)))
    jax.debug.visualize_array_sharding(c)

    section("The same computation with jit and sharding constraints")
    a = jax.device_put(a, NamedSharding(mesh, P('x', 'y')))
    b = jax.device_put(b, NamedSharding(mesh, P('y', None)))
    c_ref = matmul_reference(a, b)
    print(allclose(c_ref, jnp.dot(a, b)))
    print('a blocks:'); jax.debug.visualize_array_sharding(a)
    print('b blocks:'); jax.debug.visualize_array_sharding(b)
    print('c blocks:'); jax.debug.visualize_array_sharding(c)

    section("Rank-reducing vs rank-preserving maps")
    check_vmap(lambda x: x @ x, jnp.arange(12).reshape(4, 3))
    check_shmap(lambda x: x.T @ x, jnp.arange(32).reshape(8, 4))

    section("Input splitting with in_specs")
    x1 = jnp.arange(12 * 12).reshape(12, 12)
    y = f1(x1)
    x = jnp.arange(12 * 12).reshape(12, 12)
    x_ = jnp.tile(x, (1, mesh_ij.shape['j']))  # x_ has shape (12, 24)
    y2 = f2(x_)  # prints (3,12), and f1(x) == f2(x_)
    print(bool(jnp.array_equal(y, y2)))

    section("Output assembly with out_specs")
    x = jnp.array([[3.]])
    z = shard_map(lambda: x, mesh=mesh_ij, in_specs=(), out_specs=P('i', 'j'))()
    print(z)  # prints the same as jnp.tile(x, (4, 2))
    z = shard_map(lambda: x, mesh=mesh_ij, in_specs=(), out_specs=P('i', None))()
    print(z)  # prints the same as jnp.tile(x, (4, 1)), or just jnp.tile(x, (4,))
    z = shard_map(lambda: x, mesh=mesh_ij, in_specs=(), out_specs=P(None, None))()
    print(z)  # prints the same as jnp.tile(x, (1, 1)), or just x
    x = jnp.arange(12 * 12).reshape(12, 12)
    print(f3(x).shape)
    print(f4(x).shape)  # (3,12)
    print(f5(x).shape)  # (3,6)

    section("psum")
    x = jnp.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2])
    y = psum_f1(x)
    print('FINAL RESULT:\n', y)
    y = psum_f2(jnp.arange(16).reshape(4, 4))
    print('FINAL RESULT:\n', y)
    y = psum_f3(jnp.arange(16).reshape(4, 4))
    print('FINAL RESULT:\n', y)

    section("The traced program of matmul_basic")
    a = jnp.arange(8 * 16.).reshape(8, 16)
    b = jnp.arange(16 * 4.).reshape(16, 4)
    print(jax.make_jaxpr(matmul_basic)(a, b))

    section("What device 3 runs for matmul_basic (jit, inputs placed as in_specs ask)")
    a = jax.device_put(a, NamedSharding(mesh, P('x', 'y')))
    b = jax.device_put(b, NamedSharding(mesh, P('y', None)))
    lowered = jax.jit(matmul_basic).lower(a, b)
    (shard_map_program,) = lowered.module.all_shard_maps()
    print(shard_map_program.program_of(3).pretty_print(with_source=True))


if __name__ == "__main__":
    main()
