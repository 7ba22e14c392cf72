"""Memory layouts (``jax.experimental.layout``): ``Layout`` says in which order an array's
dimensions lie in memory (major to minor), ``Format`` pairs a layout with a sharding.

shardc keeps every block row-major, numpy's C order (``major_to_minor = (0, 1, ..., n-1)``):
a layout changes where elements lie, never their values, so that is the one layout an array
reports (``x.format``) and the one a placement may ask for; ``Layout.AUTO`` and None leave
it to shardc, which picks it. Another is refused (NotImplementedError), not ignored.

    >>> x.format.layout
    Layout(major_to_minor=(0, 1), tiling=(), sub_byte_element_size_in_bits=0)
"""
from __future__ import annotations

from ir.sharding import Sharding


class AutoLayoutSingleton:
    """``Layout.AUTO``: the layout is the compiler's choice."""

    def __repr__(self):
        return "AUTO"


AutoLayout = AutoLayoutSingleton()


class Layout:
    """The order of an array's dimensions in memory, major to minor (and a tiling, as JAX's
    class records it)."""
    AUTO = AutoLayout

    def __init__(self, major_to_minor, tiling=None, sub_byte_element_size_in_bits: int = 0):
        self.major_to_minor = tuple(major_to_minor)
        self.tiling = None if tiling is None else tuple(map(tuple, tiling))
        self.sub_byte_element_size_in_bits = sub_byte_element_size_in_bits

    def __repr__(self):
        return (f"Layout(major_to_minor={self.major_to_minor}, tiling={self.tiling}, "
                f"sub_byte_element_size_in_bits={self.sub_byte_element_size_in_bits})")

    def __hash__(self):
        return hash((self.major_to_minor, self.tiling, self.sub_byte_element_size_in_bits))

    def __eq__(self, other):
        return isinstance(other, Layout) and (
            (self.major_to_minor, self.tiling, self.sub_byte_element_size_in_bits)
            == (other.major_to_minor, other.tiling, other.sub_byte_element_size_in_bits))

    def update(self, **kwargs) -> "Layout":
        fields = dict(major_to_minor=self.major_to_minor, tiling=self.tiling,
                      sub_byte_element_size_in_bits=self.sub_byte_element_size_in_bits)
        fields.update(kwargs)
        return Layout(**fields)

    def check_compatible_aval(self, aval_shape) -> None:
        if len(self.major_to_minor) != len(aval_shape):
            raise ValueError("Length of major_to_minor and the rank of the value should "
                             f"match. Got major_to_minor={self.major_to_minor} and "
                             f"shape={tuple(aval_shape)}")


class Format:
    """A layout and a sharding: where an array's blocks lie, and how each is laid out."""
    __slots__ = ("layout", "sharding")

    def __init__(self, layout=None, sharding=None):
        if isinstance(layout, Layout) and sharding is None:
            raise ValueError(
                f"Sharding has to be concrete when layout is of type {type(layout)}. Please "
                "pass a `jax.sharding.NamedSharding` or `jax.sharding.SingleDeviceSharding` "
                f"to the sharding argument. Got sharding {sharding}")
        if not isinstance(layout, (Layout, type(None), AutoLayoutSingleton)):
            raise TypeError("Invalid value received for the layout argument. Expected values "
                            "are `None`, `Layout.AUTO` or an instance of `Layout`. Got "
                            f"{layout} of type {type(layout)}")
        if not isinstance(sharding, (Sharding, type(None))):
            raise TypeError("Invalid value received for the sharding argument. Expected "
                            "values are `None` or an instance of `jax.Sharding`. Got "
                            f"{sharding} of type {type(sharding)}")
        self.layout = layout
        self.sharding = sharding

    def __repr__(self):
        return f"Format(layout={self.layout}, sharding={self.sharding})"

    def __hash__(self):
        return hash((self.layout, self.sharding))

    def __eq__(self, other):
        return isinstance(other, Format) and (self.layout, self.sharding) == (
            other.layout, other.sharding)


def row_major(ndim: int) -> Layout:
    """The one layout shardc keeps: C order, untiled (``tiling=()``, as JAX's CPU arrays
    report it)."""
    return Layout(tuple(range(ndim)), ())


def check_layout(layout, shape, where: str) -> None:
    """Refuse a layout other than row-major for a value of ``shape`` (None and
    ``Layout.AUTO`` choose it); one of another rank is JAX's ValueError."""
    if layout is None or layout is AutoLayout:
        return
    layout.check_compatible_aval(shape)
    if layout.major_to_minor != tuple(range(len(shape))) or layout.tiling not in (None, ()):
        raise NotImplementedError(f"{where}: {layout} is not row-major; shardc keeps every "
                                  "block in row-major order (its values are the same in any "
                                  "layout)")


def sharding_of_format(target, shape, where: str):
    """A Format's sharding (its layout checked for a value of ``shape``); anything else as
    it is (where a Format may stand for a sharding: device_put, jit's shardings)."""
    if not isinstance(target, Format):
        return target
    check_layout(target.layout, shape, where)
    return target.sharding
