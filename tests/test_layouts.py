"""jax.experimental.layout: shardc keeps every block row-major, reports that layout
(``x.format``, a compiled function's ``input_formats``/``output_formats``, a
ShapeDtypeStruct's ``format``), and accepts it, ``Layout.AUTO`` or None wherever a Format may
stand for a sharding; another layout is refused, not ignored. Reprs and errors are JAX
0.10.2's."""
import re

import numpy as np
import pytest

import shardc as jax
import shardc.numpy as jnp
from shardc.experimental.layout import Format, Layout, with_layout_constraint
from shardc.sharding import AxisType, NamedSharding, PartitionSpec as P


@pytest.fixture
def split():
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto, AxisType.Auto))
    return NamedSharding(mesh, P("x", "y"))


def test_arrays_report_row_major_formats(split):
    x = jax.device_put(np.arange(32.0).reshape(8, 4), split)
    assert x.format == Format(Layout((0, 1), ()), split)
    assert repr(x.format.layout) == ("Layout(major_to_minor=(0, 1), tiling=(), "
                                     "sub_byte_element_size_in_bits=0)")
    compiled = jax.jit(lambda a, b: (a * 2, b.sum())).lower(x, jnp.ones(3)).compile()
    (fa, fb), kwargs = compiled.input_formats
    assert kwargs == {} and fa == x.format and fb.layout.major_to_minor == (0,)
    out_a, out_b = compiled.output_formats
    assert out_a.layout == Layout((0, 1), ()) and out_b.layout == Layout((), ())
    sds = jax.ShapeDtypeStruct((8, 4), np.float32, sharding=Format(Layout((0, 1)), split))
    assert sds.sharding == split and sds.format == Format(Layout((0, 1)), split)


def test_formats_stand_for_their_shardings(split):
    host = np.arange(32.0, dtype=np.float32).reshape(8, 4)
    y = jax.device_put(host, Format(Layout((0, 1)), split))
    assert y.sharding == split
    z = jax.jit(lambda a: a * 2, in_shardings=Format(None, split),
                out_shardings=Format(Layout.AUTO, split))(y)
    assert z.sharding == split
    np.testing.assert_array_equal(np.asarray(z), host * 2)
    w = jax.jit(lambda a: with_layout_constraint(a + 1, Layout((0, 1))))(y)
    np.testing.assert_array_equal(np.asarray(w), host + 1)
    c = jax.lax.with_sharding_constraint(y, Format(Layout((0, 1)), split))
    assert c.sharding == split
    made = jax.make_array_from_callback((8, 4), Format(None, split), lambda i: host[i])
    np.testing.assert_array_equal(np.asarray(made), host)


def test_other_layouts_and_bad_formats_are_errors(split):
    host = np.arange(32.0, dtype=np.float32).reshape(8, 4)
    with pytest.raises(NotImplementedError, match=re.escape(
            "device_put: Layout(major_to_minor=(1, 0), tiling=None, "
            "sub_byte_element_size_in_bits=0) is not row-major")):
        jax.device_put(host, Format(Layout((1, 0)), split))
    with pytest.raises(NotImplementedError, match="with_layout_constraint: .* not row-major"):
        with_layout_constraint(jnp.ones((2, 3)), Layout((1, 0)))
    with pytest.raises(ValueError, match=re.escape(
            "Length of major_to_minor and the rank of the value should match. Got "
            "major_to_minor=(0,) and shape=(8, 4)")):
        jax.device_put(host, Format(Layout((0,)), split))
    with pytest.raises(ValueError, match="Sharding has to be concrete when layout is of type"):
        Format(Layout((0, 1)))
    with pytest.raises(TypeError, match="Invalid value received for the layout argument"):
        Format("row-major", split)
    with pytest.raises(TypeError, match="Invalid value received for the sharding argument"):
        Format(None, P("x"))
    with pytest.raises(TypeError, match="`Layout.AUTO` cannot be used in place of a "
                                        "device-local layout in a `ShapeDtypeStruct`"):
        jax.ShapeDtypeStruct((8, 4), np.float32, sharding=Format(Layout.AUTO))
    assert repr(Layout.AUTO) == "AUTO"
    assert Layout((0, 1)).update(tiling=((8,),)) == Layout((0, 1), ((8,),))
