"""Every rule table is filled by the layer that owns it, and covers every primitive that needs
a rule there: a primitive without one fails here unless it is declared, with the reason."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import shardc  # noqa: F401  (the package loads every rule module, as a user's import does)
from compiler import ad_core
from ir import primitives as prims
from ir import collectives as coll

ROOT = Path(__file__).resolve().parent.parent

BODY_KINDS = ("op", "collective", "higher")

# An integer-valued result: its tangent is zero, no rule computes it.
NO_JVP = {coll.axis_index_p: "integer-valued"}

# Not linear in any operand: no linear (tangent) program holds them, so nothing transposes them.
NOT_LINEAR = set(prims.UNARY + prims.COMPARISON) - {prims.neg_p, *prims.COMPLEX_PARTS} | {
    prims.is_finite_p, prims.rem_p, prims.pow_p, prims.max_p, prims.min_p, prims.atan2_p,
    prims.and_p, prims.or_p, prims.xor_p, prims.iota_p, prims.reduce_max_p, prims.reduce_min_p,
    prims.reduce_prod_p, prims.reduce_and_p, prims.reduce_or_p, prims.argmax_p, prims.argmin_p,
    prims.threefry2x32_p, prims.stop_gradient_p, prims.debug_print_p, prims.inspect_sharding_p,
    prims.check_p, coll.pmax_p,
    coll.pmin_p, coll.axis_index_p, prims.signbit_p, prims.nextafter_p, *prims.SHIFTS,
    prims.cumprod_p, prims.cummax_p, prims.cummin_p, prims.sort_p, prims.searchsorted_p,
    prims.polygamma_p, *prims.INCOMPLETE, prims.bitcast_convert_type_p, prims.cholesky_p,
    prims.qr_p,
    prims.slogdet_p, prims.eigh_p, prims.svd_p, prims.eig_p, prims.callback_p, prims.schur_p,
    prims.hessenberg_p, prims.tridiagonal_p, prims.geqp3_p}

# Custom-derivative calls are replaced by their rules when differentiated (a JVP binds the
# rule's result, a custom_vjp's tangent is one custom_lin): partial evaluation never meets them.
NO_PARTIAL_EVAL = {*prims.CUSTOM_CALLS}


def _body_primitives():
    return [p for p in prims.registry.values() if p.kind in BODY_KINDS]


def test_every_body_primitive_has_a_jvp_rule():
    missing = [p.name for p in _body_primitives()
               if p not in ad_core.jvp_rules and p not in NO_JVP]
    assert missing == [], f"no jvp rule (compiler/ad_*.py) and not declared: {missing}"


def test_every_linear_primitive_has_a_transpose_rule():
    missing = [p.name for p in _body_primitives()
               if p not in ad_core.transpose_rules and p not in NOT_LINEAR]
    assert missing == [], f"no transpose rule and not declared NOT_LINEAR: {missing}"
    needless = [p.name for p in NOT_LINEAR if p in ad_core.transpose_rules]
    assert needless == [], f"declared NOT_LINEAR but transposed: {needless}"


def test_every_higher_order_primitive_has_a_partial_evaluation_rule():
    missing = [p.name for p in prims.registry.values()
               if p.kind == "higher" and p not in ad_core.partial_eval_rules
               and p not in NO_PARTIAL_EVAL]
    assert missing == []


def test_grad_works_without_importing_shardc():
    # the compiler fills its own tables: no import of the public layer is needed for them
    script = (
        "import sys, numpy as np\n"
        "import compiler.autodiff as ad\n"
        "from compiler.jit import make_jaxpr\n"
        "from compiler.tracing import bind\n"
        "from ir import primitives as p\n"
        "f = lambda x: bind(p.reduce_sum_p, bind(p.sin_p, x), axes=(0,))\n"
        "print(make_jaxpr(ad.grad(f))(np.ones(3, np.float32)))\n"
        "assert 'shardc' not in sys.modules, 'shardc was imported'\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "cos a" in done.stdout and "mul" in done.stdout


def test_every_array_primitive_runs_stacked_or_per_device_for_a_declared_reason():
    from runtime.reference import impl_rules
    from runtime.vectorized_rules import PER_DEVICE, stacked_rules
    # bodies that print or call back run on the reference backend (a declared fallback):
    # never stacked
    never_stacked = {prims.debug_print_p, prims.callback_p}
    missing = [p.name for p in prims.registry.values()
               if p.kind == "op" and p in impl_rules and p not in stacked_rules
               and p not in PER_DEVICE and p not in never_stacked]
    assert not missing, f"no stacked rule and no declared per-device reason: {missing}"
