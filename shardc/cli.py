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

_TYPE = re.compile(r"^\s*([a-z]+[0-9]*)\[([0-9,\s]*)\]\s*$")


def parse_arg_types(text: str) -> list:
    """``'f32[8,16],i32[4]'`` -> ShapeDtypeStructs."""
    from ir.core import dtype_from_short
    import shardc
    structs = []
    for part in re.split(r",\s*(?=[a-z])", text.strip()):
        match = _TYPE.match(part)
        if not match:
            raise UsageError(f"bad shape {part!r}: expected a type like f32[8,16]")
        try:
            dtype = dtype_from_short(match.group(1))
        except KeyError:
            raise UsageError(f"bad shape {part!r}: unknown dtype {match.group(1)!r} "
                             "(f32, i32, bool, ...)") from None
        dims = tuple(int(d) for d in match.group(2).split(",") if d.strip())
        structs.append(shardc.ShapeDtypeStruct(dims, dtype))
    return structs


def parse_mesh(text: str):
    """``'x=4,y=2'`` -> a mesh of the first 8 devices."""
    import shardc
    names, sizes = [], []
    for part in text.split(","):
        match = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*=\s*(\d+)\s*", part)
        if not match:
            raise UsageError(f"bad mesh {text!r}: expected axis=size pairs like x=4,y=2")
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
    if not os.path.isfile(path):
        raise UsageError(f"no such file: {path}")
    spec = importlib.util.spec_from_file_location("_shardc_user_module", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        raise UsageError(f"importing {path} failed: {type(err).__name__}: {err}") from None
    if not hasattr(module, name):
        raise UsageError(f"{path} has no function {name!r}")
    return getattr(module, name)


def _one_line(message: str) -> str:
    """The most specific line of a multi-line error message."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    for line in lines:
        if line.startswith(("args", "in_specs", "out_specs", "* ")):
            return line.lstrip("* ")
    return lines[0] if lines else message


# --- what a command works on ---------------------------------------------------------------------

def _target_function(args, *, check=None):
    """The function to lower: as written, or a plain body wrapped by --mesh/--in-specs/
    --out-specs. ``check`` forces the static replication check on or off where possible."""
    import shardc
    fn = load_function(args.target)
    if args.mesh or args.in_specs is not None or args.out_specs is not None:
        if not (args.mesh and args.in_specs is not None and args.out_specs is not None):
            raise UsageError("a plain body needs --mesh, --in-specs and --out-specs together")
        mesh = parse_mesh(args.mesh)
        in_specs = parse_specs(args.in_specs, "--in-specs")
        out_specs = parse_specs(args.out_specs, "--out-specs")
        out = out_specs[0] if len(out_specs) == 1 else out_specs
        flag = True if check is None else check
        return shardc.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out,
                                check_vma=flag)
    config = getattr(fn, "__wrapped_shard_map__", None)
    if config is not None and check is not None:
        from compiler.shard_map import shard_map as build
        return build(config.f, config.mesh, config.in_specs, config.out_specs,
                     check_vma=check, flag=config.flag)
    return fn


def _lower(args, fn):
    import shardc
    structs = parse_arg_types(args.args) if args.args else []
    jitted = fn if hasattr(fn, "lower") else shardc.jit(fn)
    try:
        return jitted.lower(*structs)
    except shardc.ReplicationError:
        raise
    except (ValueError, TypeError, NotImplementedError) as err:
        raise UsageError(f"{type(err).__name__}: {_one_line(str(err))}") from None


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


# --- commands ----------------------------------------------------------------------------------------

def cmd_lower(args) -> int:
    from ir.printer import print_module, program_to_dict
    compiled = _lower(args, _target_function(args))
    devices = _selected_devices(args, compiled)
    if args.output:
        with open(args.output, "w") as out:
            out.write(print_module(compiled.module, with_source=args.source))
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
    import shardc
    try:
        compiled = _lower(args, _target_function(args, check=True))
    except shardc.ReplicationError as err:
        print(f"replication check failed:\n\n{err}")
        raise CheckFailed() from None
    shard_maps = compiled.module.all_shard_maps()
    print(f"replication check passed: {len(shard_maps)} shard_map(s), out_specs verified")
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
    from ir.parser import ParseError, decode_text, parse_module
    from ir.verify import VerifyError
    from runtime.reference import execute_module
    if not os.path.isfile(args.program):
        raise UsageError(f"no such file: {args.program}")
    with open(args.program, "rb") as source:
        data = source.read()
    devices = shardc.devices()

    def device(device_id):
        if not 0 <= device_id < len(devices):
            raise UsageError(f"{args.program} uses device {device_id}, but there are "
                             f"{len(devices)} devices (set SHARDC_NUM_DEVICES)")
        return devices[device_id]

    try:
        module = parse_module(decode_text(data), device=device, check=check_derived)
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
    outputs = [np.asarray(o) for o in execute_module(module, inputs)]
    if args.output:
        np.savez(args.output, *outputs)
    else:
        for k, out in enumerate(outputs):
            print(f"output {k}: {out.dtype}{list(out.shape)}")
            print(out)
    return 0


def _load_inputs(text) -> list:
    import numpy as np
    if not text:
        return []
    values = []
    for path in text.split(","):
        if not os.path.isfile(path):
            raise UsageError(f"no such input file: {path}")
        try:
            values.append(np.load(path, allow_pickle=False))
        except Exception as err:
            raise UsageError(f"cannot read {path}: {err}") from None
    return values


# --- the parser ----------------------------------------------------------------------------------------

def _add_target_arguments(sub):
    sub.add_argument("target", help="FILE.py:FUNCTION (a shard_map-decorated or jit function, "
                                    "or a plain body with --mesh/--in-specs/--out-specs)")
    sub.add_argument("--args", default="", help="argument types, e.g. 'f32[8,16],f32[16,4]'")
    sub.add_argument("--mesh", help="a mesh for a plain body, e.g. x=4,y=2")
    sub.add_argument("--in-specs", help="in_specs for a plain body, e.g. \"P('x','y'),P()\"")
    sub.add_argument("--out-specs", help="out_specs for a plain body, e.g. \"P('x',None)\"")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="shardc", description=__doc__.split("\n")[0],
                     epilog="exit codes: 0 success, 1 a check failed, 2 usage error")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    lower = commands.add_parser("lower", help="print the traced and per-device programs")
    _add_target_arguments(lower)
    lower.add_argument("--device", type=int, default=0, help="the device whose program to show")
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
    comm.add_argument("--latency", type=float, default=None, help="seconds per message")
    comm.add_argument("--bandwidth", type=float, default=None, help="bytes per second")
    comm.add_argument("--format", choices=("text", "json"), default="text")
    comm.set_defaults(run=cmd_comm)

    run = commands.add_parser("run", help="execute a saved module on global inputs")
    run.add_argument("program", help="a module written by `shardc lower -o`")
    run.add_argument("--inputs", default="", help="comma-separated .npy files, one per input")
    run.add_argument("-o", "--output", help="write the outputs to an .npz file")
    run.set_defaults(run=cmd_run)
    return parser


def main(argv=None) -> int:
    from ir.sharding import ReplicationError
    args = build_parser().parse_args(argv)
    try:
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
