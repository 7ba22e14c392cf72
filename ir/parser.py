"""Reading the text form back: ``print(parse(text)) == text`` for every text the printer writes.

``ir/grammar.lark`` is the syntax; this module builds the IR from lark's parse tree, checking
what the grammar cannot (names defined once and before use, known primitives and dtypes,
literals that fit their type, well-formed meshes), then runs the verifier::

    >>> prog = parse_program("{ lambda ; a:f32[2]. let\\n    b:f32[2] = neg a\\n  in (b,) }")
    >>> [eqn.primitive.name for eqn in prog.eqns]
    ['neg']

Names are local to the text: each becomes a fresh ``Var``, and each program, sub-programs
included, is its own scope (sub-programs are closed, they cannot name the enclosing program's
variables). Two things the text does not hold come back empty: the values of constants (a
parsed program has ``consts == []``; whoever runs a program with constvars supplies their
values: ``eval_program(prog, args, consts)``, or the constants before the inputs in the
arguments of ``execute_module``) and the function of a source location (``# file:line``
comments become ``SourceInfo(file, line)``). Nothing is evaluated: a string is decoded from
its one token by ``ast.literal_eval``, everything else is read by the grammar.
"""
from __future__ import annotations

import ast
import functools
import math
import os
import re
import warnings

import numpy as np
from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken
from lark.lexer import PatternStr

from ir import dtypes
from ir import collectives  # noqa: F401  (registers the collectives' names)
from ir import primitives as prims
from ir.core import (Aval, DeviceProgram, Eqn, Literal, Program, SourceInfo, TypeSharding,
                     Var, dtype_from_short)
from ir.module import LoweredModule, LoweredShardMap
from ir.sharding import AxisType, Mesh, NamedSharding, PartitionSpec
from ir.specialise import device_programs
from ir.verify import VerifyError, verify, verify_lowered, verify_mesh_program

# A mesh is built device by device; texts naming more devices than this are refused.
MAX_MESH_DEVICES = 1 << 16


class ParseError(ValueError):
    """Text that is not a program: where (1-based line and column), what was found there
    (``token``; ``''`` at the end of the input), and what could have come instead
    (``expected``, empty for problems of meaning such as an unknown primitive)."""

    def __init__(self, detail: str, line: int, column: int, token: str = "",
                 expected: tuple = ()):
        super().__init__(f"line {line}, column {column}: {detail}")
        self.detail = detail
        self.line = line
        self.column = column
        self.token = token
        self.expected = tuple(expected)


class DeviceRef:
    """A device the text names by its id, when the caller supplies no device factory.

    >>> str(DeviceRef(3))
    'cpu:3'
    """
    __slots__ = ("id",)

    def __init__(self, id: int):
        self.id = id

    def __str__(self):
        return f"cpu:{self.id}"

    def __repr__(self):
        return f"DeviceRef(id={self.id})"

    def __eq__(self, other):
        return isinstance(other, DeviceRef) and other.id == self.id

    def __hash__(self):
        return hash(("DeviceRef", self.id))


# --- public entry points --------------------------------------------------------------------

def _shown(parse):
    """An entry point whose ParseError or VerifyError shows, below its message, the offending
    line of the text with a caret under the column."""
    @functools.wraps(parse)
    def entry(text, **kwargs):
        try:
            return parse(text, **kwargs)
        except (ParseError, VerifyError) as err:
            if err.line is not None and isinstance(text, str):
                err.args = (str(err) + "\n" + excerpt(text, err.line, err.column),)
            raise

    return entry


def excerpt(text: str, line: int, column: int) -> str:
    """Line ``line`` of ``text`` and a caret under ``column`` (both 1-based)::

        c:f32[2,4] = all_reduce[reduction='prod'] b
                                ^
    """
    lines = text.split("\n")
    shown = lines[line - 1] if 1 <= line <= len(lines) else ""
    shown = shown.replace("\t", " ").rstrip("\r")
    return f"  {shown}\n  {' ' * max(column - 1, 0)}^"


@_shown
def parse_program(text: str, *, device=None, lowered: bool = False) -> Program:
    """The program of ``print_program`` text, with or without ``# file:line`` comments.

    Args:
      text: the program text.
      device: ``id -> device`` for the devices of meshes in params (default ``DeviceRef``).
      lowered: the text is a lowered (mesh-level) program: a word both levels use
        (``all_gather``, ``all_to_all``, ``ppermute``) names the communication node, not the
        front-end collective (``ir.collectives``).
    Returns the verified ``Program`` (``consts`` empty). Raises ``ParseError`` at the line and
    column of the problem, or ``VerifyError`` naming an equation whose types do not check.
    """
    tree = _parse(text, "program_text")
    builder = _Builder(text, device)
    builder.lowered = lowered
    program_tree = builder.guarded(builder.read_types_mesh, tree)
    program = builder.guarded(builder.program, program_tree)
    builder.verified(verify, program)
    return program


@_shown
def parse_device_program(text: str, *, device=None, mesh: Mesh | None = None) -> DeviceProgram:
    """The ``DeviceProgram`` of ``print_device_program`` text.

    The traffic notes in comments are derived and skipped; source locations are kept.
    ``show_vma`` is True when some type in the text shows varying axes (a program whose types
    vary over no axis prints the same either way). The text does not hold the device's mesh
    position: with ``mesh`` it is computed from the coordinates (and the device id checked),
    otherwise it is the device id, as on a mesh over the first devices in order.
    """
    tree = _parse(text, "device_text")
    builder = _Builder(text, device)
    dp = builder.guarded(builder.device_program, tree.children[0], mesh)
    builder.verified(verify, dp.program)
    return dp


@_shown
def parse_module(text: str, *, device=None, check=None) -> LoweredModule:
    """The ``LoweredModule`` of ``print_module`` text: the host program, and for each of its
    shard_map equations the layouts at its boundary and one program per mesh position.

    The text holds each equation's mesh-level program, verified as one
    (``ir.verify.verify_mesh_program``); the per-device programs are derived from it
    (``ir.specialise``). A text may also carry them (an older text, one printed with
    ``devices=True`` or edited by hand): they are then read, not derived, and ``check``
    compares them with the derivation.

    ``runtime_check`` comes from the equation's ``check_vma='runtime'``, each device
    program's ``show_vma`` from ``check_vma=True``. Exceptions raised by ``device`` pass
    through unchanged. The per-device programs are verified as lowered programs
    (``ir.verify.verify_lowered``: device groups, ids, reductions, permutations, parameters,
    types, cross-device coherence); a ``VerifyError`` carries the line and column of the
    offending equation and the device. ``check(module)``, when given, runs last and its
    ``VerifyError`` is placed the same way (``shardc run`` passes
    ``compiler.lowering.check_derived``: the lowered programs must be the body's lowering).
    """
    tree = _parse(text, "module_text")
    builder = _Builder(text, device)
    module = builder.guarded(builder.module, tree)
    for lowered in module.all_shard_maps():
        if lowered.mesh_program is not None:
            builder.verified(verify_mesh_program, lowered.mesh_program, lowered.mesh)
        builder.verified(verify_lowered, lowered)     # derives them from the mesh level
    if check is not None:
        builder.verified(check, module)
    return module


def decode_text(data: bytes) -> str:
    """The text of a file's bytes, which must be UTF-8 (what the printer writes); a
    ``ParseError`` at the line and column of the first byte that is not.

    >>> try:
    ...     decode_text(b"ab\\n\\xff")
    ... except ParseError as err:
    ...     print(err)
    line 2, column 1: the text is not UTF-8: byte 0xff cannot start a character
    """
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        before = data[:err.start]
        line = before.count(b"\n") + 1
        column = len(before[before.rfind(b"\n") + 1:].decode("utf-8", "replace")) + 1
        detail = (f"byte 0x{data[err.start]:02x} cannot start a character"
                  if err.reason == "invalid start byte" else err.reason)
        raise ParseError(f"the text is not UTF-8: {detail}", line, column) from None


# --- syntax -----------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _lark() -> Lark:
    path = os.path.join(os.path.dirname(__file__), "grammar.lark")
    return Lark.open(path, parser="lalr", lexer="contextual", propagate_positions=True,
                     maybe_placeholders=False,
                     start=["program_text", "device_text", "module_text"])


def _parse(text: str, start: str) -> Tree:
    if not isinstance(text, str):
        raise TypeError(f"expected the program text as a str, got {type(text).__name__}")
    try:
        return _lark().parse(text, start=start)
    except UnexpectedInput as err:
        raise _syntax_error(err, text) from None


# What each terminal of the grammar is, for "expected one of" lists.
_TERMINAL_WORDS = {
    "NAME": "a name", "INT": "an integer", "FLOAT": "a float", "STRING": "a string",
    "LITERAL_WORD": "a literal", "COMPLEX": "a complex literal", "NEGATIVE_WORD": "-inf",
    "IN": "'in'", "COMMENT": "a comment", "_NL": "end of line", "$END": "end of input",
}


def _describe(terminal: str) -> str:
    if terminal in _TERMINAL_WORDS:
        return _TERMINAL_WORDS[terminal]
    for definition in _lark().terminals:
        if definition.name == terminal and isinstance(definition.pattern, PatternStr):
            return repr(definition.pattern.value)
    return terminal


def _syntax_error(err: UnexpectedInput, text: str) -> ParseError:
    if isinstance(err, UnexpectedToken):
        names = err.accepts or err.expected
        if err.token.type == "$END":
            return _at_end(text, names)
        if err.token.type == "_NL":
            token, shown = "\n", "end of line"
        else:
            token = str(err.token)
            shown = repr(token)
        return _unexpected(shown, err.token.line, err.token.column, token, names)
    if isinstance(err, UnexpectedCharacters):
        token = _word_at(text, err.pos_in_stream)
        return _unexpected(repr(token), err.line, err.column, token, err.allowed or ())
    if isinstance(err, UnexpectedEOF):
        return _at_end(text, err.expected)
    return ParseError(str(err), getattr(err, "line", 1), getattr(err, "column", 1))


def _unexpected(shown, line, column, token, names) -> ParseError:
    expected = tuple(sorted({_describe(n) for n in names}))
    detail = f"unexpected {shown}; expected one of: {', '.join(expected)}"
    return ParseError(detail, line, column, token, expected)


def _at_end(text: str, names) -> ParseError:
    lines = text.split("\n")
    return _unexpected("end of input", len(lines), len(lines[-1]) + 1, "", names)


def _word_at(text: str, pos: int) -> str:
    """The word starting at ``pos``, or its one character if no word starts there."""
    match = re.compile(r"[A-Za-z0-9_]+").match(text, pos)
    return match.group(0) if match else text[pos:pos + 1]


# --- building the IR --------------------------------------------------------------------------

class _Scope:
    """The names of one program: each defined once, and used only after its definition."""

    def __init__(self, builder):
        self.builder = builder
        self.vars: dict = {}
        self.where: dict = {}

    def define(self, name: Token, aval: Aval) -> Var:
        if str(name) in self.vars:
            line, column = self.where[str(name)]
            raise self.builder.error(name, f"variable {str(name)!r} is defined twice (first at "
                                           f"line {line}, column {column})")
        var = Var(aval)
        self.vars[str(name)] = var
        self.where[str(name)] = (name.line, name.column)
        return var

    def use(self, name: Token) -> Var:
        if str(name) not in self.vars:
            raise self.builder.error(name, f"variable {str(name)!r} is used before it is defined "
                                           "(a program sees only its own variables)")
        return self.vars[str(name)]


class _Builder:
    """Walks lark's tree and builds the IR; problems of meaning become ParseErrors."""

    def __init__(self, text: str, device=None):
        self.text = text
        self.device = device if device is not None else DeviceRef
        self.shows_vma = False      # some type written so far names varying axes
        # where equations, variables and parameters were written: (line, column) by
        # id(eqn), id(var), (id(eqn), parameter name); verifier errors are placed with it
        self.positions: dict = {}
        self._param_tokens: list = []
        self.mesh_programs: dict = {}   # shard_map equation index -> its mesh-level program
        # whether the program being read is lowered: names then mean communication nodes
        self.lowered = False
        self.types_mesh = None          # the mesh of a `types on Mesh(...):` line
        self._parts: list = []

    def guarded(self, build, *args):
        try:
            return build(*args)
        except RecursionError:
            raise ParseError("the text is nested too deeply", 1, 1) from None
        except VerifyError as err:
            raise self.located(err) from None

    def verified(self, check, *args) -> None:
        """Run a verifier; its error gets the position of what it names in the text."""
        try:
            check(*args)
        except VerifyError as err:
            raise self.located(err) from None

    def located(self, err: VerifyError) -> VerifyError:
        """``err`` at the line and column of its parameter, variable or equation."""
        keys = [(id(err.eqn), err.param), id(err.var), id(err.eqn)]
        if err.eqn is not None and err.eqn.outvars:
            # a derived equation (a node given its device groups) binds the text's variables
            keys.append(id(err.eqn.outvars[0]))
        for key in keys:
            if key in self.positions:
                line, column = self.positions[key]
                return err.replace(line=line, column=column)
        return err

    # --- errors ---

    def error(self, node, detail: str, expected=(), near=None) -> ParseError:
        """A ParseError at a token or at the first token of a tree; at ``near`` for a tree
        without tokens (``()``, ``Mesh()``)."""
        if isinstance(node, Tree) and node.meta.empty:
            node = near
        if isinstance(node, Token):
            return ParseError(detail, node.line, node.column, str(node), expected)
        meta = node.meta
        token = self.text[meta.start_pos:meta.end_pos]
        return ParseError(detail, meta.line, meta.column, token, expected)

    # --- modules and device programs ---

    def read_types_mesh(self, tree: Tree) -> Tree:
        """Read an optional ``types on Mesh(...):`` line; the program's tree."""
        children = [c for c in tree.children if c is not None]
        if children and isinstance(children[0], Tree) and children[0].data == "types_mesh":
            self.types_mesh = self.mesh(children[0].children[0])
            children = children[1:]
        self._parts = children[1:]
        return children[0]

    def module(self, tree: Tree) -> LoweredModule:
        program = self.program(self.read_types_mesh(tree))
        self.verified(verify, program)    # so that each shard_map equation has its params
        shard_maps: dict = {}
        current = None
        for part in self._parts:
            if part.data == "shard_map_header":
                self._complete(current, shard_maps)
                current = self.shard_map_header(part, program, shard_maps)
                shard_maps[current[0]] = current[1]
            elif current is None:
                raise self.error(part, f"a {_PART_WORDS[part.data]} comes before any "
                                       "'shard_map equation' line")
            elif part.data == "mesh_program":
                self._add_mesh_program(part, current)
            else:
                self._add_device_program(part, current)
        self._complete(current, shard_maps)
        self._check_all_lowered(program, shard_maps)
        return LoweredModule(program, shard_maps)

    def _add_mesh_program(self, tree: Tree, current) -> None:
        index, lowered, eqn, header = current
        if index in self.mesh_programs or lowered.device_programs:
            raise self.error(tree, f"shard_map equation {index} has one mesh-level program, "
                                   "right after its 'shard_map equation' line")
        prog = self.lowered_program(tree.children[0])
        if len(prog.invars) != len(eqn.invars) or len(prog.outvars) != len(eqn.outvars):
            raise self.error(tree, f"the mesh-level program takes {len(prog.invars)} inputs "
                                   f"and gives {len(prog.outvars)} outputs, but shard_map "
                                   f"equation {index} has {len(eqn.invars)} and "
                                   f"{len(eqn.outvars)}")
        self.mesh_programs[index] = prog

    def shard_map_header(self, tree: Tree, program: Program, shard_maps: dict):
        index_token, mesh_tree, arrive, leave = tree.children
        index = int(index_token)
        if not 0 <= index < len(program.eqns) or \
                program.eqns[index].primitive is not prims.shard_map_p:
            raise self.error(index_token, f"equation {index} of the program is not a shard_map")
        if index in shard_maps or (shard_maps and index < max(shard_maps)):
            raise self.error(index_token, f"shard_map equation {index} comes out of order or "
                                          "twice")
        eqn = program.eqns[index]
        mesh = self.mesh(mesh_tree)
        if mesh != eqn.params.get("mesh"):
            raise self.error(mesh_tree, f"the mesh differs from the equation's "
                                        f"{eqn.params.get('mesh')!r}", near=index_token)
        in_shardings = self._specs(arrive, len(eqn.invars), "inputs arrive as", index_token)
        out_specs = self._specs(leave, len(eqn.outvars), "outputs leave as", index_token)
        if out_specs != eqn.params.get("out_specs"):
            raise self.error(leave, "the output specs differ from the equation's out_specs",
                             near=index_token)
        check = eqn.params.get("check_vma", True)
        lowered = LoweredShardMap(eqn.params["mesh"], in_shardings, out_specs, [],
                                  runtime_check=check == "runtime", show_vma=check is True)
        return index, lowered, eqn, tree

    def _specs(self, tree, count: int, what: str, near: Token) -> tuple:
        value = self.value(tree)
        if not isinstance(value, tuple) or not all(isinstance(s, PartitionSpec) for s in value):
            raise self.error(tree, f"'{what}' takes a tuple of specs P(...)", near=near)
        if len(value) != count:
            raise self.error(tree, f"'{what}' lists {len(value)} specs for {count} values",
                             near=near)
        return value

    def _add_device_program(self, tree: Tree, current) -> None:
        index, lowered, eqn, header = current
        mesh = lowered.mesh
        dp = self.device_program(tree, mesh, show_vma=eqn.params.get("check_vma", True) is True)
        expected = len(lowered.device_programs)
        if dp.position != expected:
            raise self.error(tree, f"expected the program of mesh position {expected} "
                                   f"(device "
                                   f"{mesh.flat_device_ids[min(expected, mesh.size - 1)]}), "
                                   f"got position {dp.position}")
        prog = dp.program
        if len(prog.invars) != len(eqn.invars) or len(prog.outvars) != len(eqn.outvars):
            raise self.error(tree, f"the program of device {dp.device_id} takes "
                                   f"{len(prog.invars)} inputs and gives {len(prog.outvars)} "
                                   f"outputs, but shard_map equation {index} has "
                                   f"{len(eqn.invars)} and {len(eqn.outvars)}")
        lowered.device_programs.append(dp)

    def _complete(self, current, shard_maps: dict) -> None:
        """Check the programs read for one shard_map equation; a mesh-level program alone
        stands for every device's, derived from it when first read."""
        if current is None:
            return
        index, lowered, _, header = current
        given = len(lowered.device_programs)
        mesh_program = self.mesh_programs.get(index)
        if mesh_program is not None and given == 0:
            shard_maps[index] = lowered.replace(device_programs=None, build=device_programs,
                                                mesh_program=mesh_program)
            return
        if mesh_program is not None:
            shard_maps[index] = lowered.replace(mesh_program=mesh_program)
        if given != lowered.mesh.size:
            raise self.error(header, f"shard_map equation {index} has {given} device programs, "
                                     f"but its mesh has {lowered.mesh.size} devices")

    def _check_all_lowered(self, program: Program, shard_maps: dict) -> None:
        for index, eqn in enumerate(program.eqns):
            if eqn.primitive is prims.shard_map_p and index not in shard_maps:
                lines = self.text.rstrip().split("\n")
                raise ParseError(f"missing the mesh-level program of shard_map equation {index}",
                                 len(lines), len(lines[-1]) + 1)

    def device_program(self, tree: Tree, mesh: Mesh | None = None,
                       show_vma: bool | None = None) -> DeviceProgram:
        id_token, axes_tree, coords_tree, program_tree = tree.children
        axes = tuple(str(t) for t in axes_tree.children)
        coords = tuple(int(t) for t in coords_tree.children)
        if len(set(axes)) != len(axes):
            raise self.error(axes_tree, "a mesh axis is named twice")
        if len(coords) != len(axes):
            raise self.error(coords_tree, f"{len(coords)} coordinates for {len(axes)} mesh axes",
                             near=id_token)
        device_id = int(id_token)
        position = device_id if mesh is None else self._position(tree, mesh, axes, coords,
                                                                 device_id)
        self.shows_vma = False
        program = self.lowered_program(program_tree)
        show = self.shows_vma if show_vma is None else show_vma
        return DeviceProgram(device_id, position, axes, coords, program, show_vma=show)

    def _position(self, tree, mesh: Mesh, axes, coords, device_id) -> int:
        id_token, axes_tree, coords_tree, _ = tree.children
        if axes != mesh.axis_names:
            raise self.error(axes_tree, f"the mesh axes are {mesh.axis_names!r}", near=id_token)
        if any(not 0 <= c < n for c, n in zip(coords, mesh.axis_sizes)):
            raise self.error(coords_tree, f"coordinates outside the mesh {mesh}",
                             near=id_token)
        position = mesh.position(coords)
        if mesh.flat_device_ids[position] != device_id:
            raise self.error(id_token, f"the device at mesh coordinates {coords} is "
                                       f"{mesh.flat_device_ids[position]}")
        return position

    # --- programs and equations ---

    def lowered_program(self, tree: Tree) -> Program:
        """A mesh-level or per-device program (its sub-programs too)."""
        outer, self.lowered = self.lowered, True
        try:
            return self.program(tree)
        finally:
            self.lowered = outer

    def program(self, tree: Tree) -> Program:
        consts_tree, ins_tree, *eqn_trees, _in, outputs_tree = tree.children
        scope = _Scope(self)
        constvars = [self.binder(b, scope) for b in consts_tree.children]
        invars = [self.binder(b, scope) for b in ins_tree.children]
        eqns = [self.equation(e, scope) for e in eqn_trees]
        outvars = [self.atom(a, scope) for a in outputs_tree.children]
        return Program(constvars, invars, eqns, outvars)

    def binder(self, tree: Tree, scope: _Scope) -> Var:
        name, type_tree = tree.children
        var = scope.define(name, self.aval(type_tree))
        self.positions[id(var)] = (name.line, name.column)
        return var

    def equation(self, tree: Tree, scope: _Scope) -> Eqn:
        binders = [c for c in tree.children if isinstance(c, Tree) and c.data == "binder"]
        rest = tree.children[len(binders):]
        name, rest = rest[0], rest[1:]
        params_tree = None
        if rest and isinstance(rest[0], Tree) and rest[0].data in ("inline_params", "block_params"):
            params_tree, rest = rest[0], rest[1:]
        comment = rest[-1] if rest and isinstance(rest[-1], Token) else None
        atoms = rest[:-1] if comment is not None else rest
        primitive = self.primitive(name)
        invars = [self.atom(a, scope) for a in atoms]
        params = self.params(params_tree) if params_tree is not None else {}
        keys, self._param_tokens = self._param_tokens, []
        outvars = [self.binder(b, scope) for b in binders]
        eqn = Eqn(primitive, invars, outvars, params, self.source(comment))
        self.positions[id(eqn)] = (name.line, name.column)
        for key in keys:
            self.positions[(id(eqn), str(key))] = (key.line, key.column)
        return eqn

    def primitive(self, name: Token):
        try:
            return prims.lookup(str(name), lowered=self.lowered)
        except KeyError:
            raise self.error(name, f"unknown primitive {str(name)!r}") from None

    def atom(self, tree: Tree, scope: _Scope):
        if tree.data == "var":
            return scope.use(tree.children[0])
        return self.literal(tree)

    def source(self, comment: Token | None) -> SourceInfo | None:
        """``# file:line``, after the traffic note of a per-device program if any."""
        if comment is None:
            return None
        # Only the one space after '#' is markup: a file name may begin with a space.
        note = comment[2:] if comment.startswith("# ") else comment[1:]
        note = _TRAFFIC_NOTE.sub("", note.rstrip(), count=1)
        if not note:
            return None
        match = re.fullmatch(r"(.*):([0-9]+)", note)
        if match is None:
            raise self.error(comment, "a comment holds the source location as file:line")
        return SourceInfo(match.group(1), int(match.group(2)))

    # --- types and literals ---

    def aval(self, tree: Tree) -> Aval:
        dtype_token, *rest = tree.children
        dim_trees = [c for c in rest if isinstance(c, Tree) and c.data == "dim"]
        vma = [str(t) for c in rest if isinstance(c, Tree) and c.data == "vma"
               for t in c.children]
        dtype = self.dtype(dtype_token)
        dims, spec = [], []
        for dim in dim_trees:
            size, *axes = [t for t in dim.children if t is not None]
            if int(size) < 0:
                raise self.error(size, "a dimension is a non-negative integer")
            dims.append(int(size))
            spec.append(tuple(str(a) for a in axes))
        if len(set(vma)) != len(vma):
            raise self.error(rest[-1], "a type names a mesh axis twice")
        self.shows_vma = self.shows_vma or bool(vma)
        return Aval(tuple(dims), dtype, frozenset(vma), self.type_sharding(tree, dims, spec))

    def type_sharding(self, tree: Tree, dims, spec):
        """The sharding a type names (``8@x``), on the mesh of the text's ``types on`` line."""
        if not any(spec):
            return None
        mesh = self.types_mesh
        if mesh is None:
            raise self.error(tree, "a type names mesh axes, but the text names no mesh: it "
                                   "starts with `types on Mesh(...):` when its types do")
        named = [a for axes in spec for a in axes]
        for axis in named:
            # an Auto axis splits a type where the partitioner propagated a layout
            if axis not in mesh.axis_names:
                raise self.error(tree, f"a type names {axis!r}, which is not an axis of "
                                       f"{mesh}")
        if len(set(named)) != len(named):
            raise self.error(tree, "a type splits two dimensions over one mesh axis")
        sizes = mesh.shape
        for d, (n, axes) in enumerate(zip(dims, spec)):
            k = math.prod(sizes[a] for a in axes)
            if n % k:
                raise self.error(tree, f"dimension {d} of size {n} does not split into {k} "
                                       f"blocks over {axes}")
        return TypeSharding.of(mesh, tuple(spec))

    def dtype(self, token: Token) -> np.dtype:
        try:
            return dtype_from_short(str(token))
        except KeyError:
            names = tuple(sorted(dtypes.SHORT_NAMES.values()))
            raise self.error(token, f"unknown dtype {str(token)!r}; expected one of: "
                                    + ", ".join(names), names) from None

    def literal(self, tree: Tree) -> Literal:
        value_token, type_tree = tree.children
        aval = self.aval(type_tree)
        if aval.shape != ():
            raise self.error(type_tree, f"a literal is a scalar, not {aval.str_short()}")
        value = _literal_value(str(value_token), value_token.type, aval.dtype)
        if value is None:
            raise self.error(value_token, f"the literal {str(value_token)!r} is not a value of "
                                          f"type {aval.str_short()}")
        return Literal(value, aval)

    # --- parameters ---

    def params(self, tree: Tree) -> dict:
        params: dict = {}
        for param in tree.children:
            key, value_tree = param.children
            if str(key) in params:
                raise self.error(key, f"parameter {str(key)!r} is given twice")
            params[str(key)] = self.value(value_tree)
        self._param_tokens = [param.children[0] for param in tree.children]
        return params

    def value(self, tree: Tree):
        """A parameter value, as ``ir.printer.format_param`` writes it."""
        kind = tree.data
        if kind in _SIMPLE_VALUES:
            return _SIMPLE_VALUES[kind](tree)
        if kind == "string":
            return self.string(tree.children[0])
        if kind == "word":
            return self.word(tree.children[0])
        if kind == "tuple":
            return tuple(self.value(c) for c in tree.children)
        if kind == "programs":
            return tuple(self.program(c) for c in tree.children)
        return getattr(self, kind)(tree)

    def string(self, token: Token) -> str:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                value = ast.literal_eval(str(token))
            except (SyntaxError, ValueError, Warning):
                raise self.error(token, f"bad string {str(token)}") from None
        return value

    def precision(self, tree: Tree):
        """``Precision.HIGHEST``: a dot_general's precision for one operand."""
        return prims.Precision[str(tree.children[0]).split(".", 1)[1]]

    def word(self, token: Token):
        """A bare word: a dtype name (``float32``), or the floats ``inf`` and ``nan``."""
        if str(token) in ("inf", "nan"):
            return float(str(token))
        dtype = dtypes.BY_NAME.get(str(token))
        if dtype is None:
            raise self.error(token, f"unknown name {str(token)!r}; a bare word is a dtype name "
                                    "(float32, int32, bool, ...), inf or nan")
        return dtype

    def spec(self, tree: Tree) -> PartitionSpec:
        entries = []
        for entry in tree.children:
            if entry.data == "none":
                entries.append(None)
            elif entry.data == "unconstrained":
                entries.append(PartitionSpec.UNCONSTRAINED)
            elif entry.data == "string":
                entries.append(self.string(entry.children[0]))
            else:
                entries.append(tuple(self.string(t) for t in entry.children))
        return PartitionSpec(*entries)

    def named_sharding(self, tree: Tree) -> NamedSharding:
        mesh_tree, spec_tree = tree.children
        return NamedSharding(self.mesh(mesh_tree), self.spec(spec_tree))

    def mesh(self, tree: Tree) -> Mesh:
        fields = [c for c in tree.children if isinstance(c, Tree)]
        order = {"mesh_axis": 0, "mesh_types": 1, "mesh_ids": 2}
        ranks = [order[f.data] for f in fields]
        if ranks != sorted(ranks) or ranks.count(1) > 1 or ranks.count(2) > 1:
            raise self.error(tree, "a mesh lists its axes, then axis_types, then device_ids")
        axes = [c for c in fields if c.data == "mesh_axis"]
        names = tuple(self.string(a.children[0]) for a in axes)
        sizes = tuple(int(a.children[1]) for a in axes)
        for axis, size in zip(axes, sizes):
            if size < 1:
                raise self.error(axis.children[1], "a mesh axis has a positive size")
        size = math.prod(sizes)
        if size > MAX_MESH_DEVICES:
            raise self.error(tree, f"a mesh of {size} devices is too large "
                                   f"(at most {MAX_MESH_DEVICES})")
        ids = self._device_ids(tree, fields, size)
        devices = np.empty(size, dtype=object)
        for k, device_id in enumerate(ids):
            devices[k] = self.device(device_id)
        types = self._axis_types(fields, len(names))
        try:
            return Mesh(devices.reshape(sizes), names, axis_types=types)
        except ValueError as err:
            raise self.error(tree, f"bad mesh: {err}") from None

    def _axis_types(self, fields, n: int):
        """The ``axis_types=(Explicit, ...)`` of a mesh, or None (Auto) when not written."""
        given = [f for f in fields if f.data == "mesh_types"]
        if not given:
            return None
        words = [t for t in given[0].children if t is not None]
        types = []
        for word in words:
            if str(word) not in AxisType.__members__:
                raise self.error(word, "an axis type is Auto, Explicit or Manual")
            types.append(AxisType[str(word)])
        if len(types) != n:
            raise self.error(given[0], f"the mesh has {n} axes but names {len(types)} axis "
                                       "types")
        return tuple(types)

    def _device_ids(self, tree: Tree, fields, size: int) -> tuple:
        given = [f.children[0] for f in fields if f.data == "mesh_ids"]
        if not given:
            return tuple(range(size))
        ids = self.value(given[0])
        if not isinstance(ids, tuple) or not all(type(i) is int and i >= 0 for i in ids):
            raise self.error(tree, "device_ids is a tuple of non-negative integers")
        if len(ids) != size:
            raise self.error(tree, f"the mesh has {size} positions but names {len(ids)} "
                                   "device ids")
        return ids


_PART_WORDS = {"mesh_program": "mesh-level program", "device_program": "device program"}

_TRAFFIC_NOTE = re.compile(r"^sends [0-9]+ B, receives [0-9]+ B(; |$)")

_SIMPLE_VALUES = {
    "int": lambda tree: int(tree.children[0]),
    "float": lambda tree: float(tree.children[0]),
    "true": lambda tree: True,
    "false": lambda tree: False,
    "none": lambda tree: None,
}


def _literal_value(text: str, kind: str, dtype: np.dtype):
    """The value of a literal's word for ``dtype``, or None if the word is not such a value."""
    if dtype == np.bool_:
        return {"True": True, "False": False}.get(text)
    if dtypes.is_int(dtype):
        if kind != "INT":
            return None
        info = dtypes.iinfo(dtype)
        return int(text) if info.min <= int(text) <= info.max else None
    if np.issubdtype(dtype, np.complexfloating):
        if kind not in ("COMPLEX", "INT", "FLOAT") and text.lstrip("-") not in ("inf", "nan"):
            return None
        value = complex(text)
        return _fits(value, dtype, math.isfinite(value.real) and math.isfinite(value.imag))
    if kind not in ("INT", "FLOAT") and text.lstrip("-") not in ("inf", "nan"):
        return None
    value = float(text)
    return _fits(value, dtype, math.isfinite(value))


def _fits(value, dtype: np.dtype, finite: bool):
    """``value`` if it stays finite in ``dtype`` when it was finite as written."""
    with np.errstate(all="ignore"):
        converted = np.asarray(value, dtype=dtype)
    if finite and not np.all(np.isfinite(converted)):
        return None
    return value
