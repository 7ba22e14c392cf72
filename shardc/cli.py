"""The ``shardc`` command: see, save, check and run what each device executes.

    shardc lower examples/seed_tutorial.py:matmul_basic --args 'f32[8,16],f32[16,4]'
    shardc lower FILE.py:BODY --args ... --mesh x=4,y=2 --in-specs "P('x','y'),P('y',None)" \\
                 --out-specs "P('x',None)" [--device K | --all-devices] [--format text|json|dot]
    shardc lower FILE.py:FN --args ... -o module.ir
    shardc check FILE.py:FN --args ...
    shardc comm FILE.py:FN --args ... [--latency 1e-6] [--bandwidth 1e10]
    shardc run module.ir --inputs a.npy,b.npy [-o out.npz]

Exit codes: 0 success, 1 a check that failed, 2 a usage error (one clear line, no traceback).
"""
from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import re
import sys


class UsageError(Exception):
    """Bad command-line input: reported in one line with exit code 2."""


class CheckFailed(Exception):
    """A check that ran and failed: exit code 1."""


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line and exit 2 (argparse's own code)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


# --- argument parsing ------------------------------------------------------------------------------

_TYPE = re.compile(r"^\s*([a-z]+[0-9]*(?:_[a-z0-9]+)?)\[([^\]]*)\]\s*$")   # f32[8], f8_e4m3fn[4]
_ASCII_DIGITS = re.compile(r"[0-9]+")


def _split_types(text: str) -> list:
    """``'f32[8,16],i32[4]'`` -> ``['f32[8,16]', 'i32[4]']``: commas inside brackets (and
    parentheses: ``32@(x,y)``) stay."""
    parts, depth, start = [], 0, 0
    for k, char in enumerate(text):
        depth += {"[": 1, "]": -1, "(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(text[start:k])
            start = k + 1
    parts.append(text[start:])
    return parts


_TYPED_DIM = re.compile(r"([0-9]+)@(?:([A-Za-z_]\w*)|\(([A-Za-z_\w,\s]+)\))")


def parse_arg_types(text: str, mesh=None) -> list:
    """``'f32[8,16],i32[4]'`` -> ShapeDtypeStructs; ``f32[8@x,4@y]``, ``f32[32@(x,y)]``: split
    over ``mesh``'s axes, as the type says (explicit sharding)."""
    from ir.core import dtype_from_short
    import shardc
    structs = []
    for part in _split_types(text.strip()):
        if not part.strip():
            raise UsageError(f"bad --args {text!r}: an empty entry (expected types like "
                             "f32[8,16],i32[4])")
        match = _TYPE.match(part)
        if not match:
            raise UsageError(f"bad shape {part.strip()!r}: expected a type like f32[8,16]")
        try:
            dtype = dtype_from_short(match.group(1))
        except KeyError:
            raise UsageError(f"bad shape {part.strip()!r}: unknown dtype {match.group(1)!r} "
                             "(f32, i32, bool, ...)") from None
        dims = _split_types(match.group(2)) if match.group(2).strip() else []
        sizes, spec = [], []
        for d in (d.strip() for d in dims):
            typed = _TYPED_DIM.fullmatch(d)
            if typed:
                sizes.append(int(typed.group(1)))
                names = typed.group(2) or tuple(n.strip() for n in typed.group(3).split(","))
                spec.append(names)
                continue
            if not _ASCII_DIGITS.fullmatch(d):       # str.isdigit would take '８' or '²'
                raise UsageError(f"bad shape {part.strip()!r}: dimension {d!r} is not a "
                                 "non-negative integer (digits 0-9), or one split over "
                                 "mesh axes (8@x, 32@(x,y))")
            sizes.append(int(d))
            spec.append(None)
        structs.append(shardc.ShapeDtypeStruct(tuple(sizes), dtype,
                                               sharding=_typed_sharding(part, spec, mesh)))
    return structs


def _typed_sharding(part: str, spec: list, mesh):
    """The NamedSharding a typed ``--args`` entry names (None when it splits nothing)."""
    from ir.sharding import NamedSharding, PartitionSpec
    if not any(entry is not None for entry in spec):
        return None
    if mesh is None:
        raise UsageError(f"bad shape {part.strip()!r}: a type split over mesh axes needs a "
                         "mesh: pass --mesh (e.g. --mesh x=2,y=4), or define one in the file")
    for entry in spec:
        for name in (entry,) if isinstance(entry, str) else entry or ():
            if name not in mesh.axis_names:
                raise UsageError(f"bad shape {part.strip()!r}: mesh axis {name!r} is not an "
                                 f"axis of the mesh ({', '.join(mesh.axis_names)})")
    return NamedSharding(mesh, PartitionSpec(*spec))


def parse_mesh(text: str):
    """``'x=4,y=2'`` -> a mesh of the first 8 devices."""
    import shardc
    if not text.strip():
        raise UsageError(f"bad mesh {text!r}: the mesh text is empty; expected axis=size pairs "
                         "like x=4,y=2")
    names, sizes = [], []
    for part in text.split(","):
        match = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*=\s*([0-9]+)\s*", part)
        if not match:
            raise UsageError(f"bad mesh {text!r}: expected axis=size pairs like x=4,y=2 "
                             "(sizes in digits 0-9)")
        names.append(match.group(1))
        sizes.append(int(match.group(2)))
    try:
        return shardc.make_mesh(tuple(sizes), tuple(names))
    except ValueError as err:
        raise UsageError(f"bad mesh {text!r}: {err}") from None


def parse_specs(text: str, what: str) -> tuple:
    """``"P('x','y'),P('y',None)"`` -> PartitionSpecs, read from the syntax tree (never
    evaluated)."""
    from ir.sharding import PartitionSpec
    try:
        tree = ast.parse(f"({text},)", mode="eval").body
    except SyntaxError:
        raise UsageError(f"bad {what} {text!r}: expected specs like P('x',None),P()") from None
    specs = []
    for node in tree.elts:
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("P", "PartitionSpec") and not node.keywords):
            raise UsageError(f"bad {what} {text!r}: each entry must be P(...)")
        specs.append(PartitionSpec(*(_spec_entry(arg, text, what) for arg in node.args)))
    return tuple(specs)


def _spec_entry(node, text, what):
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, str)):
        return node.value
    if isinstance(node, ast.Tuple) and all(isinstance(e, ast.Constant)
                                           and isinstance(e.value, str) for e in node.elts):
        return tuple(e.value for e in node.elts)
    raise UsageError(f"bad {what} {text!r}: spec entries are None, 'axis' or ('a', 'b')")


def load_function(target: str):
    """``FILE.py:FN`` -> the function object."""
    if ":" not in target:
        raise UsageError(f"expected FILE.py:FUNCTION, got {target!r}")
    path, name = target.rsplit(":", 1)
    if not path or not name:
        raise UsageError(f"expected FILE.py:FUNCTION, got {target!r}")
    _check_input_file(path, "no such file")
    spec = importlib.util.spec_from_file_location("_shardc_user_module", path)
    if spec is None or not path.endswith(".py"):
        raise UsageError(f"{path} is not a Python file: expected FILE.py:FUNCTION")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        raise UsageError(f"importing {path} failed: {type(err).__name__}: {err}") from None
    if not hasattr(module, name):
        raise UsageError(f"{path} has no function {name!r}")
    fn = getattr(module, name)
    if not callable(fn):
        raise UsageError(f"{path}:{name} is a {type(fn).__name__}, not a function")
    return fn


def _check_input_file(path, missing: str):
    """``path`` must be a file: say so when it is missing or a directory."""
    if os.path.isdir(path):
        raise UsageError(f"{path} is a directory, not a file")
    if not os.path.isfile(path):
        raise UsageError(f"{missing}: {path}")


def _one_line(message: str) -> str:
    """The most specific line of a multi-line error message."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if lines and lines[0].startswith("pytree structure error"):
        return " ".join(lines)         # the path and the lengths are on the lines after
    for line in lines:
        if line.startswith(("args", "the passed args", "in_specs", "out_specs", "* ")):
            return line.lstrip("* ")
    return lines[0] if lines else message


# --- what a command works on ---------------------------------------------------------------------

def _target_function(args, *, check=None, fn=None):
    """The function to lower (``fn``, else loaded from the target): as written, or a plain
    body wrapped by --mesh/--in-specs/--out-specs. ``check`` forces the static replication
    check on or off where possible."""
    fn = load_function(args.target) if fn is None else fn
    config = getattr(fn, "__wrapped_shard_map__", None)
    typed_args = args.mesh is not None and args.in_specs is None and args.out_specs is None \
        and config is None and "@" in (args.args or "")
    if typed_args:                      # --mesh is the mesh the typed --args are split over
        return fn
    if args.mesh is not None or args.in_specs is not None or args.out_specs is not None:
        if config is not None:
            raise UsageError(f"{args.target} is a shard_map already (on {config.mesh}); "
                             "--mesh, --in-specs and --out-specs are for a plain body: drop "
                             "them to use its own")
        return _wrap_plain_body(args, fn, check)
    if config is not None and check is not None:
        from compiler.shard_map import shard_map as build
        return build(config.f, config.mesh, config.in_specs, config.out_specs,
                     check_vma=check, flag=config.flag)
    return fn


def _wrap_plain_body(args, fn, check):
    import shardc
    mesh = parse_mesh(args.mesh) if args.mesh is not None else None
    if mesh is None or args.in_specs is None or args.out_specs is None:
        raise UsageError("a plain body needs --mesh, --in-specs and --out-specs together")
    in_specs = parse_specs(args.in_specs, "--in-specs")
    out_specs = parse_specs(args.out_specs, "--out-specs")
    for specs, option in ((in_specs, "--in-specs"), (out_specs, "--out-specs")):
        _check_spec_axes(specs, option, mesh)
    structs = parse_arg_types(args.args) if args.args else []
    _check_arity(fn, structs)
    if len(in_specs) != len(structs):
        raise UsageError(f"--in-specs gives {len(in_specs)} spec(s) for {len(structs)} "
                         "argument(s): give one P(...) per argument")
    out = out_specs[0] if len(out_specs) == 1 else out_specs
    try:
        return shardc.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out,
                                check_vma=True if check is None else check)
    except (ValueError, TypeError) as err:
        raise UsageError(f"{type(err).__name__}: {_one_line(str(err))}") from None


def _check_spec_axes(specs, option, mesh):
    from ir.sharding import spec_axes
    for spec in specs:
        for name in spec_axes(spec):
            if name not in mesh.axis_names:
                raise UsageError(f"{option} names mesh axis {name!r}, but --mesh has axes "
                                 f"{', '.join(mesh.axis_names)}")


def _check_arity(fn, structs):
    """``--args`` must give what the function's positional parameters take."""
    import inspect
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):       # no signature to read (a builtin): lowering decides
        return
    try:
        signature.bind(*structs)
    except TypeError:
        given = f"{len(structs)}" if structs else "none"
        raise UsageError(f"{_function_name(fn)} takes {_arity_text(signature)}, but --args "
                         f"gives {given}") from None


def _arity_text(signature) -> str:
    params = list(signature.parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    names = ", ".join(p.name for p in positional)
    keyword_only = [p.name for p in params if p.kind == p.KEYWORD_ONLY and p.default is p.empty]
    if keyword_only:
        return f"keyword-only argument(s) {', '.join(keyword_only)}, which --args cannot give"
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return f"at least {len(required)} argument(s) ({names}, ...)"
    if len(required) != len(positional):
        return f"{len(required)} to {len(positional)} arguments ({names})"
    count = f"{len(positional)} argument" + ("" if len(positional) == 1 else "s")
    return f"{count} ({names})" if positional else "no arguments"


def _function_name(fn) -> str:
    from compiler.shard_map import function_name
    return function_name(getattr(fn, "__wrapped__", fn))


def _lower(args, fn):
    import shardc
    from compiler.shard_map import UnknownAxisError
    structs = parse_arg_types(args.args, _mesh_for_types(args, fn)) if args.args else []
    _check_arity(fn, structs)
    jitted = fn if hasattr(fn, "lower") else shardc.jit(fn)
    try:
        return jitted.lower(*structs)
    except shardc.ReplicationError:
        raise
    except UnknownAxisError as err:
        if err.bound or args.mesh is not None:
            raise UsageError(f"{type(err).__name__}: {_one_line(str(err))}") from None
        # a collective outside any shard_map: most likely a plain body given without its mesh
        raise UsageError(
            f"{_function_name(fn)} uses mesh axis {err.axis_name!r} outside any shard_map; to "
            f"lower it as a shard_map body, pass --mesh (e.g. --mesh {err.axis_name}=4) with "
            "--in-specs and --out-specs") from None
    except (ValueError, TypeError, NotImplementedError) as err:
        raise UsageError(f"{type(err).__name__}: {_one_line(str(err))}") from None


def _mesh_for_types(args, fn):
    """The mesh typed ``--args`` are split over: ``--mesh``, else the one mesh with Explicit
    axes the function's module defines (None when there is none, or several)."""
    if args.mesh is not None:
        return parse_mesh(args.mesh)
    from ir.sharding import Mesh
    inner = fn
    while hasattr(inner, "__wrapped__"):
        inner = inner.__wrapped__
    found = {id(v): v for v in getattr(inner, "__globals__", {}).values()
             if isinstance(v, Mesh) and v.explicit_axes}
    return next(iter(found.values())) if len(found) == 1 else None


def _selected_devices(args, compiled) -> list:
    programs = []
    for lowered in compiled.module.all_shard_maps():
        if args.all_devices:
            programs.extend(lowered.device_programs)
            continue
        ids = [dp.device_id for dp in lowered.device_programs]
        if args.device not in ids:
            raise UsageError(f"--device {args.device} is not in the mesh (devices {ids})")
        programs.append(lowered.program_of(args.device))
    return programs


def _check_output_path(path, option="-o"):
    """Fail before any work when ``path`` cannot be written as a file."""
    if path is None:
        return
    if os.path.isdir(path):
        raise UsageError(f"{option} {path}: is a directory; give a file name")
    parent = os.path.dirname(path) or "."
    if not os.path.isdir(parent):
        raise UsageError(f"{option} {path}: no such directory {parent}")


def _write_text(path, text, option="-o"):
    try:
        with open(path, "w") as out:
            out.write(text)
    except OSError as err:
        raise UsageError(f"{option} {path}: cannot write: {err.strerror}") from None


# --- commands ----------------------------------------------------------------------------------------

def cmd_lower(args) -> int:
    from ir.printer import print_module, program_to_dict
    _check_output_path(args.output)
    compiled = _lower(args, _target_function(args))
    devices = _selected_devices(args, compiled)
    if args.output:
        _write_text(args.output, print_module(compiled.module, with_source=args.source))
    if args.format == "json":
        print(json.dumps({"program": program_to_dict(compiled.closed.program),
                          "devices": [dict(device_id=dp.device_id, coords=list(dp.coords),
                                           program=program_to_dict(dp.program))
                                      for dp in devices]}, indent=1))
    elif args.format == "dot":
        from ir.graph import to_dot
        print(to_dot(compiled.closed.program))
        for dp in devices:
            print(to_dot(dp.program))
    else:
        print(compiled.closed.pretty_print(with_source=args.source))
        for dp in devices:
            print()
            print(dp.pretty_print(with_source=args.source))
    return 0


def cmd_check(args) -> int:
    """Run the static replication check, also on a shard_map built with the check off or at
    run time: checking is what the command is for, so it says so and checks anyway."""
    import shardc
    fn = load_function(args.target)
    target = _target_function(args, check=True, fn=fn)
    config = getattr(fn, "__wrapped_shard_map__", None)
    check_off = config is not None and not config.check_vma
    setting = "'runtime'" if check_off and config.runtime_check else "False"
    note = (f"note: {config.name} is built with {config.flag}={setting}, so the static "
            "replication check does not run when it is called; shardc check runs it anyway\n"
            if check_off else "")
    try:
        compiled = _lower(args, target)
    except shardc.ReplicationError as err:
        text = str(err)
        if check_off:           # the usual hint would be to turn off what is off already
            text = text.replace(
                f"If so, consider disabling the check by passing the {config.flag}=False "
                "argument to shard_map.",
                f"If so, {config.name} turns the check off already ({config.flag}={setting}), "
                "and this report is what the check would reject.")
        print(f"{note}replication check failed:\n\n{text}")
        raise CheckFailed() from None
    shard_maps = compiled.module.all_shard_maps()
    print(f"{note}replication check passed: {len(shard_maps)} shard_map(s), out_specs verified")
    for index, eqn in enumerate(compiled.closed.program.eqns):
        if eqn.primitive.name != "shard_map":
            continue
        body = eqn.params["jaxpr"]
        order = eqn.params["mesh"].axis_names
        types = ", ".join(a.str_short(order) for a in body.out_avals)
        specs = ", ".join(s.short_repr() for s in eqn.params["out_specs"])
        print(f"  equation {index}: outputs {types} with out_specs {specs}")
    return 0


def cmd_comm(args) -> int:
    from ir.ledger import build_ledger
    from shardc.ledger import render_ledger
    compiled = _lower(args, _target_function(args))
    ledger = build_ledger(compiled.module, latency=args.latency, bandwidth=args.bandwidth)
    if args.format == "json":
        print(json.dumps(ledger.to_dict(), indent=1))
    else:
        print(render_ledger(ledger))
    return 0


def cmd_run(args) -> int:
    import numpy as np
    import shardc
    from compiler.lowering import check_derived
    from ir.parser import ParseError, parse_module
    from ir.verify import VerifyError
    _check_input_file(args.program, "no such file")
    _check_output_path(args.output)
    text = _read_module_text(args.program)
    devices = shardc.devices()

    def device(device_id):
        if not 0 <= device_id < len(devices):
            raise UsageError(f"{args.program} uses device {device_id}, but there are "
                             f"{len(devices)} devices (set SHARDC_NUM_DEVICES)")
        return devices[device_id]

    try:
        module = parse_module(text, device=device, check=check_derived)
    except (ParseError, VerifyError) as err:
        raise UsageError(f"{args.program}: {_one_line(str(err))}") from None
    inputs = _load_inputs(args.inputs)
    program = module.program
    if len(inputs) != len(program.invars) + len(program.constvars):
        raise UsageError(f"{args.program} takes {len(program.constvars) + len(program.invars)} "
                         f"inputs, got {len(inputs)}")
    for k, (value, var) in enumerate(zip(inputs, program.constvars + program.invars)):
        if tuple(value.shape) != var.aval.shape or value.dtype != var.aval.dtype:
            raise UsageError(f"input {k} has type {value.dtype}{list(value.shape)} but the "
                             f"program takes {var.aval.str_short()}")
    outputs = [np.asarray(o) for o in _run_module(module, inputs)]
    if shardc.process_index() != 0:
        return 0            # under mpiexec: every process computed the outputs; one writes them
    if args.output:
        try:
            np.savez(args.output, *outputs)
        except OSError as err:
            raise UsageError(f"-o {args.output}: cannot write: {err.strerror}") from None
    else:
        for k, out in enumerate(outputs):
            print(f"output {k}: {out.dtype}{list(out.shape)}")
            print(out)
    return 0


def _run_module(module, inputs) -> list:
    """The reference interpreter; under mpiexec the MPI backend (each process runs its
    devices' programs)."""
    from compiler.backend import get_backend
    from runtime.reference import execute_module
    backend = get_backend()
    if getattr(backend, "name", None) == "mpi":
        return backend.execute(module, inputs)
    return execute_module(module, inputs)


def _read_module_text(path) -> str:
    """The IR text of a module file: UTF-8, as ``shardc lower -o`` writes it."""
    with open(path, "rb") as source:
        data = source.read()
    from ir.parser import ParseError, decode_text
    try:
        text = decode_text(data)
    except ParseError as err:
        raise UsageError(f"{path} is not a module written by `shardc lower -o`: it is not UTF-8 "
                         f"text ({err})") from None
    if "\x00" in text:
        raise UsageError(f"{path} is not a module written by `shardc lower -o`: it holds NUL "
                         "bytes (a binary file?)")
    return text


_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = b"PK\x03\x04"


def _load_inputs(text) -> list:
    if not text:
        return []
    return [_load_npy(path) for path in text.split(",")]


def _load_npy(path):
    """One input: a .npy file of a numeric array (never unpickled)."""
    import numpy as np
    if not path:
        raise UsageError("--inputs has an empty entry; give comma-separated .npy files")
    _check_input_file(path, "no such input file")
    with open(path, "rb") as source:
        magic = source.read(len(_NPY_MAGIC))
    if magic.startswith(_ZIP_MAGIC):
        raise UsageError(f"{path} is an .npz archive; --inputs takes one .npy file per input "
                         "(np.save each array)")
    if magic != _NPY_MAGIC:
        raise UsageError(f"{path} is not a .npy file (it does not start with numpy's .npy "
                         "header); write inputs with np.save")
    try:
        value = np.load(path, allow_pickle=False)
    except ValueError as err:
        if "allow_pickle" in str(err) or "pickled" in str(err):
            raise UsageError(f"{path} holds an object array (pickled Python objects), which "
                             "shardc does not load; save a numeric array") from None
        raise UsageError(f"{path} is not a readable .npy file: {_one_line(str(err))}") from None
    except (OSError, EOFError) as err:
        raise UsageError(f"{path} is not a readable .npy file: {err}") from None
    return value


# --- the parser ----------------------------------------------------------------------------------------

def _add_target_arguments(sub):
    sub.add_argument("target", help="FILE.py:FUNCTION (a shard_map-decorated or jit function, "
                                    "or a plain body with --mesh/--in-specs/--out-specs)")
    sub.add_argument("--args", default="", help="argument types, e.g. 'f32[8,16],f32[16,4]'")
    sub.add_argument("--mesh", help="a mesh for a plain body, e.g. x=4,y=2")
    sub.add_argument("--in-specs", help="in_specs for a plain body, e.g. \"P('x','y'),P()\"")
    sub.add_argument("--out-specs", help="out_specs for a plain body, e.g. \"P('x',None)\"")


def _finite(text: str) -> float:
    import math
    try:
        if not text.isascii():      # float() would read '１' as 1
            raise ValueError(text)
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _non_negative(text: str) -> float:
    value = _finite(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be zero or more, got {text!r}")
    return value


def _positive(text: str) -> float:
    value = _finite(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than zero, got {text!r}")
    return value


def _device_id(text: str) -> int:
    if not re.fullmatch(r"\s*[0-9]+\s*", text):      # int() would read '４' as 4
        raise argparse.ArgumentTypeError(f"expected a device number (digits 0-9), got {text!r}")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="shardc", description=__doc__.split("\n")[0],
                     epilog="exit codes: 0 success, 1 a check failed, 2 usage error")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    lower = commands.add_parser("lower", help="print the traced and per-device programs")
    _add_target_arguments(lower)
    lower.add_argument("--device", type=_device_id, default=0,
                       help="the device whose program to show")
    lower.add_argument("--all-devices", action="store_true", help="show every device's program")
    lower.add_argument("--format", choices=("text", "json", "dot"), default="text")
    lower.add_argument("--no-source", dest="source", action="store_false",
                       help="omit the user source lines")
    lower.add_argument("-o", "--output", help="write the lowered module (all devices) as IR text")
    lower.set_defaults(run=cmd_lower)

    check = commands.add_parser("check", help="run the replication checker and print the verdict")
    _add_target_arguments(check)
    check.set_defaults(run=cmd_check)

    comm = commands.add_parser("comm", help="the communication ledger as a table")
    _add_target_arguments(comm)
    comm.add_argument("--latency", type=_non_negative, default=None,
                      help="seconds per message (zero or more)")
    comm.add_argument("--bandwidth", type=_positive, default=None,
                      help="bytes per second (more than zero)")
    comm.add_argument("--format", choices=("text", "json"), default="text")
    comm.set_defaults(run=cmd_comm)

    run = commands.add_parser("run", help="execute a saved module on global inputs")
    run.add_argument("program", help="a module written by `shardc lower -o`")
    run.add_argument("--inputs", default="", help="comma-separated .npy files, one per input")
    run.add_argument("-o", "--output", help="write the outputs to an .npz file")
    run.set_defaults(run=cmd_run)
    return parser


def _check_environment():
    """The settings shardc reads from the environment, checked before any work."""
    from runtime.devices import configured_device_count
    from runtime.vectorized import BACKENDS
    backend = os.environ.get("SHARDC_BACKEND", "")
    if backend and backend not in BACKENDS:
        raise UsageError(f"SHARDC_BACKEND={backend!r} is not a backend; expected one of "
                         f"{', '.join(BACKENDS)}")
    threads = os.environ.get("SHARDC_THREADS", "")
    if threads and not (threads.strip().isascii() and threads.strip().isdigit()
                        and int(threads) > 0):
        raise UsageError(f"SHARDC_THREADS={threads!r}: expected a positive number of threads")
    try:
        configured_device_count()
    except ValueError as err:
        raise UsageError(str(err)) from None


def main(argv=None) -> int:
    from ir.sharding import ReplicationError
    args = build_parser().parse_args(argv)
    try:
        _check_environment()
        return args.run(args)
    except UsageError as err:
        print(f"shardc: error: {err}", file=sys.stderr)
        return 2
    except ReplicationError as err:
        print(f"shardc: replication check failed:\n\n{err}", file=sys.stderr)
        return 1
    except CheckFailed:
        return 1
    except BrokenPipeError:     # output piped into a command that stopped reading
        return 0


if __name__ == "__main__":
    sys.exit(main())
