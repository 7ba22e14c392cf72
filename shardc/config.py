"""``shardc.config`` (``jax.config``): ``update(name, value)``, ``read(name)`` and each flag as
an attribute (``config.jax_enable_x64``).

Honoured flags change what shardc does:

- ``jax_enable_x64``: keep float64/int64/uint64/complex128 and default Python scalars to
  them (JAX's 64-bit mode); the jit cache keys on it.
- ``jax_num_cpu_devices``: the simulated device count, before the devices are first used
  (afterwards RuntimeError, as JAX raises once its backends exist; -1: the environment's).
- ``jax_disable_jit``: jitted functions run op by op, untraced.
- ``jax_debug_nans`` / ``jax_debug_infs``: FloatingPointError when an operation run at once,
  or a jitted call's output, holds a NaN / an infinity (a jitted function is then called again
  as if not jitted, as JAX does, to name the operation).
- ``jax_explicit_x64_dtypes``: a 64-bit dtype asked for with x64 off is truncated with a
  warning (``'warn'``) or refused (``'error'``); under ``'allow'`` (JAX keeps it) shardc
  refuses it with NotImplementedError rather than truncate it quietly.
- ``jax_numpy_dtype_promotion``: ``'standard'`` or ``'strict'`` (no implicit promotion between
  typed values, JAX's lattice).
- ``jax_transfer_guard``, ``jax_transfer_guard_host_to_device``, ``..._device_to_device``,
  ``..._device_to_host`` (and ``shardc.transfer_guard(level)`` ...): log or refuse transfers
  between the host and the devices, as JAX's guards (``ir/transfer_guard.py``).
- ``jax_default_device`` (and ``shardc.default_device(d)``): values made without a device, and
  computations on uncommitted arrays, go to ``d``.

- ``jax_default_prng_impl``, ``jax_threefry_partitionable``: the implementation of new keys,
  and which of JAX's two schemes of threefry bits ``shardc.random`` computes;
  ``jax_random_seed_offset`` is added to every seed a key is made from.
- ``jax_log_compiles``: each jitted function's tracing and lowering logged at WARNING level.
- ``jax_explain_cache_misses``: each time a jitted function is traced, why none of its earlier
  traces served is logged at WARNING level (``compiler/cache_miss.py``).
- ``jax_numpy_rank_promotion`` (checked while tracing) and ``jax_default_matmul_precision``
  (which changes no result) are part of the tracing context, as in JAX: jitted functions'
  traces are cached per value of them.

The others are accepted, validated as JAX validates them, readable, and change nothing:
shardc has one simulated CPU platform, computes matmuls in their operands' dtype, and has no
compilation cache. ``ACCEPTED`` names them.

Each flag's initial value comes from its environment variable, as in JAX
(``JAX_ENABLE_X64=1``, ``JAX_PLATFORMS=cpu``). An unknown name raises AttributeError
(``Unrecognized config option: ...``), as ``jax.config.update`` does.

    >>> from shardc import config
    >>> config.update('jax_enable_x64', True); config.jax_enable_x64
    True
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import os
import sys
from typing import Any, Callable

from compiler import batching as _batching
from compiler import jit as _jit
from compiler import partition as _partition
from compiler import replication as _replication
from compiler import tracing as _tracing
from ir import dtypes as _dtypes
from ir import transfer_guard as _transfer_guard
from runtime import devices as _devices

__all__ = [
    "config", "Config", "Flag", "FLAGS", "ACCEPTED", "FlagState", "STATES", "disable_jit",
    "enable_x64", "disable_x64", "transfer_guard", "TRANSFER_GUARDS",
]


# --- value parsers: JAX's checks and messages ------------------------------------------------

def _bool(name, value):
    return bool(value)


def _int(name, value):
    if value is not None and not isinstance(value, int):
        raise ValueError(f"new int config value must be None or of type int, got {value} of "
                         f"type {type(value)}")
    return value


def _float(name, value):
    if value is not None and not isinstance(value, (float, int)):
        raise ValueError(f"new float config value must be None or of type float, got {value} "
                         f"of type {type(value)}")
    return value


def _optional_str(name, value):
    if value is not None and not isinstance(value, str):
        raise ValueError(f"new string config value must be None or of type str, got {value} "
                         f"of type {type(value)}.")
    return value


def _any(name, value):
    return value


def _enum(*choices, optional=False):
    def parse(name, value):
        if optional and value is None:
            return value
        if type(value) is not str or value not in choices:
            none = "None or " if optional else ""
            raise ValueError(f"new enum value must be {none}in {list(choices)}, got {value} "
                             f"of type {type(value)}.")
        return value
    return parse


_MATMUL_PRECISIONS = (
    "default", "high", "highest", "bfloat16", "tensorfloat32", "float32",
    "ANY_F8_ANY_F8_F32", "ANY_F8_ANY_F8_F32_FAST_ACCUM", "ANY_F8_ANY_F8_ANY",
    "ANY_F8_ANY_F8_ANY_FAST_ACCUM", "F16_F16_F16", "F16_F16_F32", "BF16_BF16_BF16",
    "BF16_BF16_F32", "BF16_BF16_F32_X3", "BF16_BF16_F32_X6", "BF16_BF16_F32_X9",
    "TF32_TF32_F32", "TF32_TF32_F32_X3", "F32_F32_F32", "F64_F64_F64")


# --- what honoured flags do ------------------------------------------------------------------

def _no_key_reuse_checker(on: bool) -> None:
    if on:
        raise NotImplementedError("jax_debug_key_reuse=True: shardc has no checker of PRNG "
                                  "keys used twice")


def _set_dtype_promotion(value):
    # what tracing gives depends on it: a trace made under one mode is not reused under the
    # other
    _dtypes.set_strict_promotion(value == "strict")
    _tracing.set_trace_setting("jax_numpy_dtype_promotion", value, default="standard")


def _explicit_x64_mode(name, value):
    """JAX's ExplicitX64Mode, by member (anything named WARN, ERROR or ALLOW) or by its
    lower-case name."""
    text = getattr(value, "name", value)
    if isinstance(text, str) and text.lower() in ("warn", "error", "allow"):
        return text.lower()
    raise ValueError(f"new enum value must be in ['warn', 'error', 'allow'], got {value} of "
                     f"type {type(value)}.")


def _set_auto_pcast(on: bool) -> None:
    _replication.set_auto_pcast(on)
    _tracing.set_trace_setting("jax_auto_pcast", bool(on), default=True)


def _set_explicit_x64(mode: str) -> None:
    _dtypes.set_explicit_x64_mode(mode)
    _tracing.set_trace_setting("jax_explicit_x64_dtypes", mode, default="warn")


@dataclasses.dataclass(frozen=True)
class Flag:
    """A configuration option: its default, how a new value is checked, and what setting it
    does (``apply``; None for a flag shardc accepts and ignores)."""
    name: str
    default: Any
    parse: Callable
    apply: Callable | None = None
    read: Callable | None = None     # where the value lives elsewhere (a thread's own)


def _traced_flag(name: str, default, parse) -> Flag:
    """A flag whose value changes what tracing gives: jitted functions' traces are cached
    per value of it (``jax_explain_cache_misses`` names it when they differ)."""
    return Flag(name, default, parse,
                functools.partial(_tracing.set_trace_setting, name, default=default))


FLAGS = {flag.name: flag for flag in (
    Flag("jax_enable_x64", False, _bool, _dtypes.set_x64),
    Flag("jax_num_cpu_devices", -1, _int, _devices.request_device_count),
    Flag("jax_disable_jit", False, _bool, _jit.set_jit_disabled),
    Flag("jax_no_tracing", False, _bool, _jit.set_no_tracing),
    Flag("jax_no_execution", False, _bool, _jit.set_no_execution),
    Flag("shardc_implicit_communication", "allow", _enum("allow", "warn", "error"),
         _partition.set_implicit_communication),
    Flag("jax_numpy_dtype_promotion", "standard", _enum("standard", "strict"),
         _set_dtype_promotion),
    Flag("jax_default_device", None, _any, _devices.set_default_device),
    # a 64-bit dtype asked for with x64 off: truncated with a warning, or refused
    Flag("jax_explicit_x64_dtypes", "warn", _explicit_x64_mode, _set_explicit_x64),
    # accepted, no effect
    Flag("jax_platforms", None, _optional_str),
    Flag("jax_platform_name", "", _optional_str),
    Flag("jax_check_static_indices", False, _bool, _tracing.set_static_index_check),
    Flag("jax_debug_nans", False, _bool,
         functools.partial(_tracing.set_invalid_value_check, "nan")),
    Flag("jax_debug_infs", False, _bool,
         functools.partial(_tracing.set_invalid_value_check, "inf")),
    Flag("jax_log_compiles", False, _bool, _jit.set_log_compiles),
    Flag("jax_explain_cache_misses", False, _bool, _jit.set_explain_cache_misses),
    Flag("jax_check_tracer_leaks", False, _bool),
    Flag("jax_enable_checks", False, _bool),
    Flag("jax_traceback_filtering", "auto", _enum(
        "off", "tracebackhide", "remove_frames", "quiet_remove_frames", "auto")),
    # part of the tracing context, as in JAX: a trace made under one value is not reused
    # under another (rank promotion is checked while tracing; the precision is taken and
    # has no effect on numpy's arithmetic)
    _traced_flag("jax_numpy_rank_promotion", "allow", _enum("allow", "warn", "raise")),
    _traced_flag("jax_default_matmul_precision", None,
                 _enum(*_MATMUL_PRECISIONS, optional=True)),
    # the implementation of keys made without one, and JAX's two schemes of threefry bits:
    # both change what tracing gives
    _traced_flag("jax_default_prng_impl", "threefry2x32",
                 _enum("threefry2x32", "threefry4x32", "rbg", "unsafe_rbg", "philox2x32",
                       "philox4x32")),
    # added to every seed a key is made from (jax.random.key, PRNGKey)
    _traced_flag("jax_random_seed_offset", 0, _int),
    # raw uint32 key data given to a jax.random function: taken, warned about, or refused
    Flag("jax_legacy_prng_key", "allow", _enum("allow", "warn", "error")),
    _traced_flag("jax_threefry_partitionable", True, _bool),
    # gumbel's (and categorical's) mode when none is given: 'high' when on, else 'low'
    _traced_flag("jax_high_dynamic_range_gumbel", False, _bool),
    # PRNGKey, and split and fold_in given raw key data, return typed keys (read by random)
    _traced_flag("jax_enable_custom_prng", False, _bool),
    # JAX's checker of PRNG keys used twice: off by default; shardc has no such checker, so
    # asking for it is refused rather than quietly not checking
    Flag("jax_debug_key_reuse", False, _bool, lambda on: _no_key_reuse_checker(on)),
    Flag("jax_enable_compilation_cache", True, _bool),
    Flag("jax_compilation_cache_dir", None, _optional_str),
    Flag("jax_persistent_cache_min_compile_time_secs", 1.0, _float),
    Flag("jax_persistent_cache_min_entry_size_bytes", 0, _int),
    Flag("jax_use_shardy_partitioner", True, _bool),
    Flag("jax_cpu_enable_async_dispatch", True, _bool),
    Flag("jax_softmax_custom_jvp", False, _bool),
    Flag("jax_dynamic_shapes", False, _bool),
    # a shard_map body's operation lifts operands varying over fewer axes (JAX's auto pcast),
    # or, off, refuses them with JAX's error
    Flag("jax_auto_pcast", True, _bool, _set_auto_pcast),
    # vmap's spmd_axis_name named by a shard_map's specs inside: JAX's error, or (JAX's
    # temporary switch) the shard_map is batched all the same
    Flag("jax_disable_vmap_shmap_error", False, _bool, _batching.set_vmap_shmap_error_disabled),
    # JAX's switch between two implementations of custom_vjp that compute the same values
    Flag("jax_custom_vjp3", False, _bool),
    # the transfer guards: global levels here, a thread's own from the context managers
    # (read back as this thread sees them); jax_transfer_guard sets all three directions
    *(Flag(f"jax_transfer_guard_{d}", None, _enum(*_transfer_guard.LEVELS, optional=True),
           functools.partial(_transfer_guard.set_global, d),
           functools.partial(_transfer_guard.local_level, d))
      for d in _transfer_guard.DIRECTIONS),
    Flag("jax_transfer_guard", None, _enum(*_transfer_guard.LEVELS, optional=True),
         functools.partial(_transfer_guard.set_global, None),
         functools.partial(_transfer_guard.local_level, None)),
)}
ACCEPTED = tuple(name for name, flag in FLAGS.items() if flag.apply is None)


def _env_value(flag: Flag):
    """The flag's value from its environment variable (``JAX_ENABLE_X64``), or its default."""
    text = os.environ.get(flag.name.upper())
    if text is None:
        return flag.default
    if isinstance(flag.default, bool):
        return _truth(text, flag.name.upper())
    if isinstance(flag.default, int):
        try:
            return int(text)
        except ValueError:
            raise ValueError(f'Invalid value "{text}" for JAX flag {flag.name}') from None
    if isinstance(flag.default, float):
        return float(text)
    return text


def _truth(text: str, variable: str) -> bool:
    value = text.lower()
    if value in ("y", "yes", "t", "true", "on", "1"):
        return True
    if value in ("n", "no", "f", "false", "off", "0"):
        return False
    raise ValueError(f"invalid truth value {text!r} for environment {variable!r}")


class Config:
    """The configuration: ``update(name, value)``, ``read(name)``, ``config.<name>``."""

    def __init__(self):
        object.__setattr__(self, "_values", {})
        for flag in FLAGS.values():
            value = _env_value(flag)
            if value != flag.default:
                self.update(flag.name, value)
            else:
                self._values[flag.name] = value

    def update(self, name: str, value) -> None:
        """Set flag ``name``; AttributeError for an unknown name, ValueError for a bad value."""
        flag = self._flag(name)
        value = flag.parse(name, value)
        if flag.apply is not None:
            flag.apply(value)
        self._values[name] = value

    def read(self, name: str):
        """The value of flag ``name``."""
        flag = self._flag(name)
        return self._values[flag.name] if flag.read is None else flag.read()

    @property
    def values(self) -> dict:
        return {name: self.read(name) for name in self._values}

    @property
    def x64_enabled(self) -> bool:
        return self._values["jax_enable_x64"]

    def _flag(self, name) -> Flag:
        try:
            return FLAGS[name]
        except (KeyError, TypeError):
            raise AttributeError(f"Unrecognized config option: {name}") from None

    def __getattr__(self, name):
        if name in FLAGS:
            return self.read(name)
        raise AttributeError(f"'Config' object has no attribute {name!r}")

    def __setattr__(self, name, value):
        raise AttributeError(f"cannot set config.{name}; use config.update({name!r}, value)")

    def __repr__(self):
        return f"Config({', '.join(f'{k}={v!r}' for k, v in self._values.items())})"

    def config_with_absl(self) -> None:
        """Define an absl flag for each option (``--jax_enable_x64`` ...), read once absl has
        parsed the command line (``app.run``), as JAX's ``config.config_with_absl``. absl
        is not a dependency: without it this is its ImportError, as in JAX."""
        from absl import app, flags as absl_flags
        defines = {bool: absl_flags.DEFINE_bool, int: absl_flags.DEFINE_integer,
                   float: absl_flags.DEFINE_float}
        for name, flag in FLAGS.items():
            value = self._values[name]
            if flag.parse is _any:
                continue            # (a device: not a command-line value)
            define = defines.get(type(flag.default), absl_flags.DEFINE_string)
            if define is absl_flags.DEFINE_string and value is not None:
                value = str(value)
            define(name, value, f"shardc's {name} (see jax.config)")
        app.call_after_init(lambda: self._complete_absl_config(absl_flags))

    def _complete_absl_config(self, absl_flags) -> None:
        """Take each option absl's command line set."""
        for name in FLAGS:
            try:
                flag = absl_flags.FLAGS[name]
            except KeyError:
                continue
            if flag.present:
                self.update(name, flag.value)

    def parse_flags_with_absl(self) -> None:
        """Parse only the ``--jax...`` arguments of the command line (before ``--``) with
        absl and take them, once, as JAX's ``config.parse_flags_with_absl``."""
        if self.__dict__.get("_absl_configured"):
            return
        import absl.flags
        argv = itertools.takewhile(lambda a: a != "--", sys.argv)
        jax_argv = ["", *(a for a in argv if a.startswith("--jax"))]
        self.config_with_absl()
        absl.flags.FLAGS(jax_argv, known_only=True)
        self._complete_absl_config(absl.flags)
        object.__setattr__(self, "_absl_configured", True)


config = Config()


@contextlib.contextmanager
def _flag_set_to(name: str, value):
    previous = config.read(name)
    config.update(name, value)
    try:
        yield
    finally:
        config.update(name, previous)


def disable_jit(disable: bool = True):
    """``with shardc.disable_jit():`` jitted functions run op by op inside the block."""
    return _flag_set_to("jax_disable_jit", disable)


@contextlib.contextmanager
def ensure_compile_time_eval():
    """``with shardc.ensure_compile_time_eval():`` operations on concrete values run at once,
    also while a function is traced (under jit their results are constants of the program);
    a value that depends on the function's arguments cannot be used inside."""
    with _tracing.set_current_trace(_tracing.eval_trace):
        yield


def enable_x64(new_val: bool = True):
    """``with enable_x64():`` 64-bit mode inside the block (``jax.experimental.enable_x64``)."""
    return _flag_set_to("jax_enable_x64", new_val)


def disable_x64():
    """``with disable_x64():`` 32-bit mode inside the block."""
    return _flag_set_to("jax_enable_x64", False)


_DEFAULT_TRUE = object()


class FlagState:
    """A flag as JAX's top-level names have it: ``with shardc.debug_nans(True):`` (a bool
    flag's value defaults to True) or ``with shardc.default_matmul_precision('float32'):``
    sets it inside the block; ``.value`` reads it."""

    def __init__(self, name: str):
        self.name = name

    @property
    def value(self):
        return config.read(self.name)

    def __call__(self, new_val=_DEFAULT_TRUE):
        if new_val is _DEFAULT_TRUE:
            if not isinstance(FLAGS[self.name].default, bool):
                raise TypeError(f"{self.name}() needs the value to set inside the block")
            new_val = True
        return _flag_set_to(self.name, new_val)

    def __repr__(self):
        return f"FlagState({self.name!r}, value={self.value!r})"


class TransferGuardState:
    """A transfer guard's context manager, as JAX's: ``with shardc.transfer_guard_host_to_device(
    'disallow'):`` sets the level for this thread inside the block, over the global one
    (``config.update``); ``.value`` reads it as this thread sees it."""

    def __init__(self, name: str, directions: tuple):
        self.name = name
        self.directions = directions

    @property
    def value(self):
        return config.read(self.name)

    def __call__(self, new_val):
        return _transfer_guard.guarding(self.directions, new_val)

    def __repr__(self):
        return f"TransferGuardState({self.name!r}, value={self.value!r})"


# jax.transfer_guard_host_to_device and the others; jax.transfer_guard sets all three
TRANSFER_GUARDS = {
    **{f"transfer_guard_{d}": TransferGuardState(f"jax_transfer_guard_{d}", (d,))
       for d in _transfer_guard.DIRECTIONS},
}


def transfer_guard(new_val: str):
    """``with shardc.transfer_guard(level):`` the transfer guard level of every direction, for
    this thread inside the block (``'allow'``, ``'log'``, ``'disallow'``, ``'log_explicit'``,
    ``'disallow_explicit'``), as JAX's; see ``ir/transfer_guard.py``."""
    return _transfer_guard.guarding(_transfer_guard.DIRECTIONS + ("all",), new_val)


# the context managers JAX exports at top level, under its names
STATES = {name: FlagState("jax_" + name) for name in (
    "enable_x64", "debug_nans", "debug_infs", "default_matmul_precision",
    "numpy_dtype_promotion", "numpy_rank_promotion", "log_compiles", "enable_checks",
    "check_tracer_leaks", "explain_cache_misses", "default_prng_impl", "legacy_prng_key",
    "threefry_partitionable", "softmax_custom_jvp", "default_device", "debug_key_reuse",
    "no_tracing", "no_execution", "enable_custom_prng")}
