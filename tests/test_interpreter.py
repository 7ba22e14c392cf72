"""The one interpreter loop: environment, single assignment, last-use freeing, and errors
re-raised with the printed equation, the device and the user's line."""
from __future__ import annotations

import numpy as np
import pytest

import shardc
import shardc.numpy as jnp
from ir import primitives as prims
from ir import collectives as coll
from ir.core import Aval, Eqn, Literal, Program, SourceInfo, Var
from ir.interpreter import Interpreter, last_uses
from runtime.reference import DeviceInterpreter, eval_program, run_device_programs
from shardc import lax
from shardc.sharding import PartitionSpec as P

F32 = np.dtype("float32")


def _chain():
    """a -> b = neg a -> c = add b a -> d = mul c c; out d."""
    a = Var(Aval((2,), F32))
    b, c, d = (Var(a.aval) for _ in range(3))
    eqns = [Eqn(prims.neg_p, [a], [b], {}, SourceInfo("model.py", 3)),
            Eqn(prims.add_p, [b, a], [c], {}, SourceInfo("model.py", 4)),
            Eqn(prims.mul_p, [c, c], [d], {}, SourceInfo("model.py", 5))]
    return Program([], [a], eqns, [d]), (a, b, c, d)


class Evaluate(Interpreter):
    """numpy evaluation; counts the equations it runs."""

    def __init__(self):
        self.count = 0

    def eval_equation(self, eqn, values):
        from runtime.reference import impl_rules
        self.count += 1
        return impl_rules[eqn.primitive](*values, **eqn.params)


def test_values_are_freed_after_their_last_use():
    program, (a, b, c, d) = _chain()
    dead = last_uses(program)
    assert dead[0] == [] and set(dead[1]) == {id(a), id(b)} and dead[2] == [id(c)]
    assert last_uses(program) is dead                   # computed once
    # an equation replaced in place: worked out again, never stale
    program.eqns[2] = Eqn(prims.mul_p, [b, b], [d], {})
    again = last_uses(program)
    assert again[1] == [id(a)] and again[2] == [id(b)]
    program.eqns[2] = Eqn(prims.mul_p, [c, c], [d], {})
    assert last_uses(program) == dead
    x = np.array([1.0, 2.0], F32)
    evaluate = Evaluate()
    (out,) = evaluate.run(program, [x])
    np.testing.assert_array_equal(out, ((-x) + x) * ((-x) + x))
    assert evaluate.count == 3


def test_a_variable_assigned_twice_is_an_error():
    program, (a, b, c, d) = _chain()
    program.eqns[2] = Eqn(prims.mul_p, [c, c], [b], {})      # b again
    with pytest.raises(AssertionError, match="assigned twice"):
        Evaluate().run(program, [np.ones(2, F32)])


def test_an_error_names_the_equation_the_device_and_the_line():
    a = Var(Aval((2,), F32))
    out = Var(Aval((3,), F32))
    bad = Eqn(prims.reshape_p, [a], [out], dict(new_sizes=(3,)), SourceInfo("model.py", 7))
    program = Program([], [a], [bad], [out])
    with pytest.raises(ValueError) as info:
        DeviceInterpreter(device=5).run(program, [np.zeros(2, F32)])
    note = info.value.shardc_equation
    assert note == ("while running on device 5: b:f32[3] = reshape[new_sizes=(3,)] a "
                    "(model.py:7)")
    assert note in getattr(info.value, "__notes__", [note])


def test_a_program_that_communicates_needs_a_mesh():
    x = Var(Aval((2,), F32))
    out = Var(x.aval)
    node = Eqn(coll.all_reduce_node, [x], [out], dict(mesh_axes=("i",), reduction="sum",
                                                     device_groups=((0, 1),)))
    with pytest.raises(RuntimeError, match="needs a device mesh"):
        eval_program(Program([], [x], [node], [out]), [np.zeros(2, F32)])


def test_errors_inside_a_device_program_name_that_device():
    mesh = shardc.make_mesh((2,), ("i",))
    a = Var(Aval((2,), F32))
    out = Var(Aval((3,), F32))
    bad = Program([], [a], [Eqn(prims.reshape_p, [a], [out], dict(new_sizes=(3,)))], [out])
    good = Program([], [a], [], [a])
    with pytest.raises(ValueError) as info:
        run_device_programs(mesh, [good, bad], [[np.zeros(2, F32)]] * 2)
    assert info.value.shardc_equation.startswith("while running on device 1: ")


def test_a_literal_reads_as_its_value():
    a = Var(Aval((), F32))
    out = Var(a.aval)
    program = Program([], [a], [Eqn(prims.add_p, [a, Literal(2.0, a.aval)], [out], {})], [out])
    (got,) = eval_program(program, [np.float32(1.5)])
    assert got == np.float32(3.5) and got.dtype == F32


def test_gradients_rebind_through_the_shared_loop():
    # compiler.ad_core.eval_program is an Interpreter too: a gradient through shard_map
    mesh = shardc.make_mesh((4,), ("i",))
    f = shardc.shard_map(lambda x: lax.psum(jnp.sin(x).sum(), "i"), mesh=mesh,
                         in_specs=P("i"), out_specs=P())
    x = np.linspace(0, 1, 8, dtype=F32)
    np.testing.assert_allclose(np.asarray(shardc.grad(f)(x)), np.cos(x), rtol=1e-6)


@pytest.mark.parametrize("name", ["psum_scatter", "reduce_scatter"])
def test_scattering_sums_reject_booleans(name):
    # the IR's own rule, for programs read from text (the front end raises first)
    from ir.core import Aval
    from ir.shapes import ShapeError, out_avals
    prim = coll.psum_scatter_p if name == "psum_scatter" else coll.reduce_scatter_node
    with pytest.raises(ShapeError, match=f"^{name}: add does not accept dtype bool"):
        out_avals(prim, [Aval((4,), np.dtype(bool))],
                  dict(mesh_axes=("i",), scatter_axis=0, tiled=True, axis_size=4))


def test_a_shape_error_while_tracing_names_the_equation_and_the_line():
    from compiler.tracing import bind
    from ir.shapes import ShapeError
    mesh = shardc.make_mesh((4,), ("x",))

    def body(a, b):
        return bind(prims.add_p, a, b)          # f32[2] + f32[3]
    f = shardc.jit(shardc.shard_map(body, mesh=mesh, in_specs=(P("x"), P()),
                                    out_specs=P("x")))
    with pytest.raises(ShapeError, match="requires operands of equal shape") as info:
        f(np.ones(8, F32), np.ones(3, F32))
    note = info.value.shardc_equation
    assert note.startswith("while tracing add of f32[2]{x} f32[3]{x} at test_interpreter.py:")
    line = int(note.rsplit(":", 1)[1])
    import inspect
    source, first = inspect.getsourcelines(test_a_shape_error_while_tracing_names_the_equation_and_the_line)
    assert source[line - first].strip().startswith("return bind(prims.add_p, a, b)")
