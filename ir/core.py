"""The graph IR: abstract values, variables, literals, equations and programs.

A program reads like a jaxpr::

    { lambda ; a:f32[8,16] b:f32[16,4]. let
        c:f32[8,4] = dot_general[dimension_numbers=(((1,), (0,)), ((), ()))] a b
      in (c,) }

Names are not stored: the printer assigns them in definition order.
"""
from __future__ import annotations

import dataclasses
import math
import sys
from typing import Any, Sequence

import numpy as np

from ir import dtypes

# Short dtype names used in printed types: f32[4,8], bf16[4].
_SHORT_DTYPE = dtypes.SHORT_NAMES       # long name -> short name (``bfloat16`` -> ``bf16``)


def short_dtype(dtype) -> str:
    return dtypes.short_name(dtype)


def dtype_from_short(name: str) -> np.dtype:
    return dtypes.from_short_name(name)


class TypeSharding:
    """How a value's type says it is split (JAX's sharding in types): per dimension the mesh
    axes that split it, major to minor, on ``mesh``. Only a mesh's Explicit axes appear.

    Made once per (mesh object, spec) by ``of``; compared by identity of those.

    >>> str(Aval((8, 4), np.dtype('float32'), type_sharding=TypeSharding.of(mesh, (('x',), ()))))
    'f32[8@x,4]'
    """
    __slots__ = ("mesh", "spec", "_hash", "axes")
    _MADE: dict = {}

    def __init__(self, mesh, spec: tuple):
        self.mesh = mesh
        self.spec = spec
        self._hash = hash((mesh, spec))
        self.axes = tuple(a for names in spec for a in names)

    @classmethod
    def of(cls, mesh, spec) -> "TypeSharding | None":
        """The sharding of ``spec`` (per dimension a tuple of axis names) on ``mesh``; None
        when it splits nothing."""
        spec = tuple(tuple(names) for names in spec)
        if not any(spec):
            return None
        # per mesh object: equal meshes are not interchangeable where one stands for another
        # (an Explicit mesh's Auto twin equals a user's Auto mesh of the same devices)
        key = (id(mesh), spec)
        found = cls._MADE.get(key)
        if found is None or found.mesh is not mesh:
            if len(cls._MADE) > 4096:
                cls._MADE.clear()
            found = cls._MADE[key] = cls(mesh, spec)
        return found

    def __eq__(self, other):
        return (self is other or isinstance(other, TypeSharding) and self.spec == other.spec
                and self.mesh == other.mesh)

    def __hash__(self):
        return self._hash

    def __repr__(self):
        return f"TypeSharding({self.mesh}, {self.spec!r})"

    def dim_text(self, d: int, size: int) -> str:
        """``8``, ``8@x`` or ``32@(x,y)``."""
        names = self.spec[d]
        if not names:
            return str(size)
        return f"{size}@{names[0]}" if len(names) == 1 else f"{size}@({','.join(names)})"

    def shards(self, d: int) -> int:
        """How many blocks dimension ``d`` is split into."""
        sizes = self.mesh.shape
        return math.prod(sizes[a] for a in self.spec[d])


def _dims_text(shape, sharding) -> str:
    if sharding is None:
        return ",".join(str(d) for d in shape)
    return ",".join(sharding.dim_text(k, d) for k, d in enumerate(shape))


@dataclasses.dataclass(frozen=True)
class ManualAxisType:
    """How a value in a ``shard_map`` body relates to the manual mesh axes (JAX's name).

    ``varying``: the axes over which the value may differ between devices (its vma).
    ``unreduced``: the axes over which each device holds a partial sum, not yet added;
    ``reduced``: the axes over which the copies are known equal (a reduced value's cotangent
    is unreduced, so that its transpose adds nothing twice).

    ``shardc.typeof(x_block).manual_axis_type.varying`` is ``frozenset({'x'})`` for a
    block varying over x.
    """
    varying: frozenset = frozenset()
    unreduced: frozenset = frozenset()
    reduced: frozenset = frozenset()

    @property
    def empty(self) -> bool:
        return not (self.varying or self.unreduced or self.reduced)

    @property
    def vur(self) -> frozenset:
        """The axes the value is varying, unreduced or reduced over."""
        return self.varying | self.unreduced | self.reduced

    def invarying(self, mesh) -> frozenset:
        """The manual axes of ``mesh`` the value is the same over (none outside a body)."""
        return frozenset(mesh.manual_axes) - self.vur


# the packages whose code reads ``Aval.type_sharding``, never JAX's public ``Aval.sharding``
_OWN_PACKAGES = frozenset({"ir", "compiler", "runtime", "shardc", "benchmarks"})
# how ``Aval.sharding`` reads a type (it needs the mesh in context): set by the layer that knows
_public_sharding_view: list = [lambda aval: None]


def set_public_sharding_view(view) -> None:
    """Install ``view(aval)``, JAX's public ``aval.sharding`` of a type."""
    _public_sharding_view[0] = view


@dataclasses.dataclass(frozen=True)
class Aval:
    """The abstract value of an array: shape, dtype, the mesh axes it may vary over (vma) and
    how its type says it is split over Explicit mesh axes (``type_sharding``, None: not
    split). ``sharding`` is JAX's public reading of the type, for programs that read
    ``x.aval.sharding``; shardc's own code reads ``type_sharding``.

    ``unreduced``: the mesh axes over which each device holds a partial sum not yet added
    (JAX's ``{U:x}``); its blocks differ along them as a varying value's do, but no block is
    the value. ``reduced``: the axes over which the copies are known equal (``{R:x}``), whose
    transpose is unreduced. Disjoint from the vma and from each other, as JAX's.

    >>> Aval((2, 8), np.dtype('float32'), frozenset({'x'})).str_short()
    'f32[2,8]{x}'
    """
    shape: tuple
    dtype: np.dtype
    vma: frozenset = frozenset()
    type_sharding: TypeSharding | None = None
    unreduced: frozenset = frozenset()
    reduced: frozenset = frozenset()

    def __init__(self, shape, dtype, vma=frozenset(), type_sharding=None,
                 unreduced=frozenset(), reduced=frozenset()):
        # (written out, the fields set in one go: avals are made on every operation's path)
        if type(shape) is not tuple:
            shape = tuple(int(d) for d in shape)
        else:
            for d in shape:
                if type(d) is not int:
                    shape = tuple(int(d) for d in shape)
                    break
        if not isinstance(dtype, np.dtype):
            dtype = np.dtype(dtype)
        if type(vma) is not frozenset:
            vma = frozenset(vma)
        fields = self.__dict__
        if unreduced or reduced:
            unreduced, reduced = frozenset(unreduced), frozenset(reduced)
            # avals key jit's cache on every call: hash once
            fields.update(ur=True, _hash=hash((shape, dtype, vma, type_sharding, unreduced,
                                              reduced)))
        else:
            fields["_hash"] = hash((shape, dtype, vma, type_sharding))
        fields.update(shape=shape, dtype=dtype, vma=vma, type_sharding=type_sharding,
                      unreduced=unreduced, reduced=reduced)

    # whether the value is unreduced or reduced over some axis (set on such avals only): the
    # operations that see one ask their rule for it (``ir.unreduced``)
    ur = False
    # JAX's public ``x.aval.weak_type``: a weakly typed array's aval is this type's twin that
    # says so (``weak_twin``), equal to it and hashed alike; shardc's own code reads a value's
    # ``weak`` (an Array's is read off its aval)
    weak_type = False

    def __hash__(self):
        return self._hash

    def weak_twin(self) -> "Aval":
        """This type, read as weakly typed (made once per aval)."""
        if self.weak_type:
            return self
        twin = self.__dict__.get("_twin")
        if twin is None:
            twin = object.__new__(Aval)
            twin.__dict__.update(self.__dict__, weak_type=True, _twin=self)
            self.__dict__["_twin"] = twin
        return twin

    def strong(self) -> "Aval":
        """This type, read as not weakly typed."""
        return self.__dict__["_twin"] if self.weak_type else self

    @property
    def sharding(self):
        """JAX's ``aval.sharding``: a NamedSharding on the abstract mesh in context, one spec
        entry per dimension (``P(None, 'y')``), for programs that read it."""
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if caller.split(".")[0] in _OWN_PACKAGES:
            raise AssertionError(f"{caller} read Aval.sharding, JAX's public view; shardc's "
                                 "code reads Aval.type_sharding")
        return _public_sharding_view[0](self)

    @property
    def mat(self) -> ManualAxisType:
        """JAX's ``aval.mat``: the mesh axes the value varies over, is unreduced and reduced
        over, as a ManualAxisType."""
        return ManualAxisType(varying=self.vma, unreduced=self.unreduced, reduced=self.reduced)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def update(self, shape=None, dtype=None, vma=None, type_sharding=...) -> "Aval":
        """A copy with fields changed; a new shape drops the sharding unless one is given."""
        if type_sharding is ...:
            type_sharding = (self.type_sharding if shape is None or tuple(shape) == self.shape
                             else None)
        return Aval(self.shape if shape is None else shape,
                    self.dtype if dtype is None else dtype,
                    self.vma if vma is None else vma, type_sharding, self.unreduced,
                    self.reduced)

    def strip_vma(self) -> "Aval":
        return self if not self.vma else Aval(self.shape, self.dtype,
                                              type_sharding=self.type_sharding,
                                              unreduced=self.unreduced, reduced=self.reduced)

    def with_ur(self, unreduced=frozenset(), reduced=frozenset()) -> "Aval":
        """This aval unreduced over ``unreduced`` and reduced over ``reduced`` (none: neither)."""
        if unreduced == self.unreduced and reduced == self.reduced:
            return self
        return Aval(self.shape, self.dtype, self.vma, self.type_sharding, unreduced, reduced)

    def to_ct(self) -> "Aval":
        """The type of this value's cotangent: a reduced value's is unreduced (each device's
        share of the sum), an unreduced value's reduced (JAX's ``to_ct_aval``)."""
        return self.with_ur(self.reduced, self.unreduced) if self.ur else self

    def strip_ur(self) -> "Aval":
        return self.with_ur() if self.ur else self

    def unstacked(self) -> "Aval":
        """One slice along the leading dimension (a scan's x from its xs), split as the rest
        of this type is split."""
        typed = self.type_sharding
        return self.update(shape=self.shape[1:], type_sharding=TypeSharding.of(
            typed.mesh, typed.spec[1:]) if typed is not None else None)

    def stacked(self, length: int) -> "Aval":
        """``length`` of these along a new, unsplit leading dimension (a scan's ys)."""
        typed = self.type_sharding
        return self.update(shape=(length,) + self.shape, type_sharding=TypeSharding.of(
            typed.mesh, ((),) + typed.spec) if typed is not None else None)

    def strip_sharding(self) -> "Aval":
        return self if self.type_sharding is None else Aval(
            self.shape, self.dtype, self.vma, None, self.unreduced, self.reduced)

    def with_sharding(self, type_sharding) -> "Aval":
        return self if type_sharding == self.type_sharding else Aval(
            self.shape, self.dtype, self.vma, type_sharding, self.unreduced, self.reduced)

    def with_vma(self, vma: frozenset) -> "Aval":
        """This aval varying over ``vma``; made once per (aval, vma), as tracing a long
        program asks for the same few again and again."""
        if type(vma) is not frozenset:
            vma = frozenset(vma)
        if vma == self.vma:
            return self
        key = (self, vma)
        found = _WITH_VMA.get(key)
        if found is None:
            if len(_WITH_VMA) > 4096:
                _WITH_VMA.clear()
            found = _WITH_VMA[key] = Aval(self.shape, self.dtype, vma, self.type_sharding,
                                          self.unreduced, self.reduced)
        return found

    def str_short(self, axis_order: Sequence[str] | None = ()) -> str:
        """``f32[4,8]{x}``; ``axis_order=None`` hides the vma (a body with the check off)."""
        dims = _dims_text(self.shape, self.type_sharding)
        vma = "" if axis_order is None else format_vma(self.vma, axis_order)
        if self.ur:
            vma += _ur_text(self, axis_order or ())
        return f"{short_dtype(self.dtype)}[{dims}]{vma}"

    def str_long(self, axis_order: Sequence[str] | None = (), short: bool = False) -> str:
        """The form of ``typeof(x)``, as JAX 0.10 prints it: ``float32[3]{V:i}``,
        ``float32[3]{V:(i,j)}`` (``f32[3]{V:i}`` with ``short``, as its errors do);
        ``axis_order=None`` hides the vma."""
        dims = _dims_text(self.shape, self.type_sharding)
        vma = "" if axis_order is None or not self.vma else \
            "{V:" + _grouped(_ordered(self.vma, axis_order)) + "}"
        if self.ur:
            vma = _ur_text(self, axis_order or (), vma[:-1])
        dtype = short_dtype(self.dtype) if short else dtypes.dtype_name(self.dtype)
        return f"{dtype}[{dims}]{vma}"

    def __repr__(self):
        return f"Aval({self.str_short()})"

    def __str__(self):
        return self.str_long()      # as JAX prints a ShapedArray: ``float32[8@x,4]``


_WITH_VMA: dict = {}


def check_scalar_conversion(aval: Aval) -> None:
    """JAX's TypeError for ``int``, ``float`` or ``complex`` of an array of rank above 0 (of
    one element too, which numpy still converts)."""
    if aval.ndim:
        raise TypeError(f"Only scalar arrays can be converted to Python scalars; got "
                        f"arr.ndim={aval.ndim}")


def check_index_conversion(aval: Aval) -> None:
    """JAX's TypeError for ``operator.index`` (``hex``, ``oct``, an index) of anything but an
    integer scalar: numpy's booleans would pass as 0 and 1."""
    if aval.ndim or aval.dtype.kind not in "iu":
        raise TypeError("Only integer scalar arrays can be converted to a scalar index.")


def check_truth_value(aval: Aval) -> None:
    """numpy's ValueError for the truth value of an array of no or several elements (JAX's,
    before a traced value's own error)."""
    if aval.size == 0:
        raise ValueError("The truth value of an empty array is ambiguous. Use `array.size > 0` "
                         "to check that an array is not empty.")
    if aval.size > 1:
        raise ValueError("The truth value of an array with more than one element is ambiguous. "
                         "Use a.any() or a.all()")


def _ur_text(aval: Aval, axis_order, opened: str = "") -> str:
    """``{U:x}``, ``{R:(x,y)}``, ``{V:x, U:y}`` (``opened``: the vma's text, brace open),
    as JAX 0.10 prints a type's unreduced and reduced axes."""
    parts = [opened[1:]] if opened else []
    for axes, tag in ((aval.unreduced, "U"), (aval.reduced, "R")):
        if axes:
            parts.append(f"{tag}:" + _grouped(_ordered(axes, axis_order)))
    return "{" + ", ".join(parts) + "}"


def format_vma(vma, axis_order: Sequence[str] = ()) -> str:
    """``{x,y}`` in mesh order (unknown axes after, sorted); empty string for no axes."""
    if not vma:
        return ""
    return "{" + ",".join(_ordered(vma, axis_order)) + "}"


def _ordered(vma, axis_order: Sequence[str]) -> list:
    order = {name: k for k, name in enumerate(axis_order)}
    return sorted(vma, key=lambda a: (order.get(a, len(order)), a))


def _grouped(names: list) -> str:
    return names[0] if len(names) == 1 else "(" + ",".join(names) + ")"


class Var:
    """An SSA value. Identity is the variable; the printer gives it a name."""
    __slots__ = ("aval",)

    def __init__(self, aval: Aval):
        self.aval = aval

    def __repr__(self):
        return f"Var({self.aval.str_short()})"


class Literal:
    """A scalar constant written inline in the program text."""
    __slots__ = ("value", "aval")

    def __init__(self, value, aval: Aval):
        self.value = np.asarray(value, dtype=aval.dtype)
        self.aval = aval

    @property
    def val(self):
        """JAX's name for the value (programs that read a jaxpr's literals use it)."""
        return self.value[()]

    def __repr__(self):
        return f"Literal({format_literal(self)})"



def format_literal(lit: Literal) -> str:
    value = lit.value.item()
    if isinstance(value, bool):
        text = "True" if value else "False"
    elif isinstance(value, float):
        text = repr(value)
    else:
        text = str(value)
    return f"{text}:{lit.aval.str_short()}"


@dataclasses.dataclass(frozen=True)
class SourceInfo:
    """Where the user wrote the operation."""
    file: str
    line: int
    function: str = ""

    def __str__(self):
        return f"{self.file}:{self.line}"


@dataclasses.dataclass
class Eqn:
    """``outvars = primitive[params](invars)``."""
    primitive: Any
    invars: list
    outvars: list
    params: dict
    source: SourceInfo | None = None


@dataclasses.dataclass
class Program:
    """A typed, closed program: constants (with their values), inputs, equations, outputs."""
    constvars: list
    invars: list
    eqns: list
    outvars: list
    consts: list = dataclasses.field(default_factory=list)

    @property
    def in_avals(self) -> list:
        return [v.aval for v in self.invars]

    @property
    def out_avals(self) -> list:
        return [v.aval for v in self.outvars]

    def __str__(self):
        from ir.printer import print_program
        return print_program(self)

    def pretty_print(self, *, source_info: bool = False, print_shapes: bool = True,
                     use_color: bool = False, name_stack: bool = False,
                     print_effects: bool = False, custom_pp_eqn_rules: bool = True,
                     with_source: bool = False) -> str:
        """JAX's ``jaxpr.pretty_print``: the text ``str`` gives, with each equation's source
        line where ``source_info`` (or ``with_source``) asks. The text has no colors
        (``use_color`` changes nothing); every variable is printed with its type, and each
        equation as shardc prints it. shardc's programs keep no name stacks and no effects,
        so those cannot be printed."""
        from ir.printer import print_program
        for flag, given, default in (("print_shapes", print_shapes, True),
                                     ("name_stack", name_stack, False),
                                     ("print_effects", print_effects, False),
                                     ("custom_pp_eqn_rules", custom_pp_eqn_rules, True)):
            if bool(given) != default:
                raise NotImplementedError(f"pretty_print({flag}={given}): shardc's programs "
                                          "print every variable with its type, each equation "
                                          "as shardc prints it, and keep no name stacks or "
                                          "effects")
        return print_program(self, with_source=source_info or with_source)


def holds_programs(value) -> bool:
    """A parameter holding sub-programs: a Program, or a non-empty tuple of Programs."""
    return isinstance(value, Program) or (
        isinstance(value, tuple) and bool(value) and all(isinstance(v, Program) for v in value))


def programs_in(value) -> list:
    """The sub-programs a parameter value holds, in order."""
    if isinstance(value, Program):
        return [value]
    return list(value) if holds_programs(value) else []


@dataclasses.dataclass(frozen=True)
class DeviceProgram:
    """One device's program after lowering: which device, where it sits in the mesh, what it runs."""
    device_id: int
    position: int
    mesh_axes: tuple          # axis names, mesh order
    coords: tuple             # this device's coordinate on each mesh axis
    program: Program
    show_vma: bool = True     # False when the shard_map's replication check is off

    def __str__(self):
        from ir.printer import print_device_program
        return print_device_program(self)

    def pretty_print(self, with_source: bool = False) -> str:
        from ir.printer import print_device_program
        return print_device_program(self, with_source=with_source)
