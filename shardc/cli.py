"""The ``shardc`` command: show what each device runs.

    shardc lower examples/seed_tutorial.py:matmul_basic --args 'f32[8,16],f32[16,4]'
    shardc lower FILE.py:FN --args ... --device 3
    shardc lower FILE.py:FN --args ... --all-devices

Exit codes: 0 success, 1 a check that failed, 2 a usage error (one clear line, no traceback).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys


class UsageError(Exception):
    """Bad command-line input: reported in one line with exit code 2."""


_SHAPE = re.compile(r"^\s*([a-z]+[0-9]*)\[([0-9,\s]*)\]\s*$")


def parse_arg_types(text: str) -> list:
    """``'f32[8,16],i32[4]'`` -> ShapeDtypeStructs."""
    from ir.core import dtype_from_short
    import shardc
    structs = []
    for part in re.split(r",\s*(?=[a-z])", text.strip()):
        match = _SHAPE.match(part)
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
    lines = [l.strip() for l in message.splitlines() if l.strip()]
    for line in lines:
        if line.startswith(("args", "in_specs", "out_specs", "* ")):
            return line.lstrip("* ")
    return lines[0] if lines else message


def _lower(args) -> int:
    import shardc
    fn = load_function(args.target)
    structs = parse_arg_types(args.args) if args.args else []
    try:
        compiled = shardc.jit(fn).lower(*structs)
    except (ValueError, TypeError) as err:
        raise UsageError(f"{type(err).__name__}: {_one_line(str(err))}") from None
    print(compiled.closed.pretty_print(with_source=args.source))
    for lowered in compiled.module.all_shard_maps():
        programs = lowered.device_programs
        if not args.all_devices:
            ids = [dp.device_id for dp in programs]
            if args.device not in ids:
                raise UsageError(f"--device {args.device} is not in the mesh (devices {ids})")
            programs = [lowered.program_of(args.device)]
        for dp in programs:
            print()
            print(dp.pretty_print(with_source=args.source))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shardc", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    lower = commands.add_parser("lower", help="print the traced program and per-device programs")
    lower.add_argument("target", help="FILE.py:FUNCTION (a shard_map-decorated or jit function)")
    lower.add_argument("--args", default="", help="argument types, e.g. 'f32[8,16],f32[16,4]'")
    lower.add_argument("--device", type=int, default=0, help="the device whose program to show")
    lower.add_argument("--all-devices", action="store_true", help="show every device's program")
    lower.add_argument("--no-source", dest="source", action="store_false",
                       help="omit the user source lines")
    lower.set_defaults(run=_lower)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except UsageError as err:
        print(f"shardc: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
