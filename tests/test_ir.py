"""The IR: names, types, printing, the verifier, and rule-table coverage."""
import numpy as np
import pytest

import shardc
import shardc.numpy as jnp
from compiler.replication import vma_rules
from ir import primitives as prims
from ir import collectives as coll
from ir.core import Aval, Eqn, Literal, Program, Var
from ir.printer import print_program, var_name
from ir.shapes import shape_rules
from ir.verify import VerifyError, verify
from runtime.collectives import group_rules
from runtime.reference import impl_rules

f32 = np.dtype("float32")


def test_names_follow_jaxpr_order():
    assert [var_name(k) for k in (0, 1, 25, 26, 27, 51, 52)] == [
        "a", "b", "z", "ba", "bb", "bz", "ca"]


def test_types_print_vma_in_mesh_order():
    aval = Aval((4, 8), f32, frozenset({"y", "x"}))
    assert aval.str_short(("x", "y")) == "f32[4,8]{x,y}"
    assert aval.str_short(("y", "x")) == "f32[4,8]{y,x}"
    assert Aval((3,), f32).str_short() == "f32[3]"
    assert Aval((3,), np.dtype("int32"), frozenset({"i"})).str_long(("i",)) == "int32[3]{V:i}"


def _program():
    a, b = Var(Aval((3,), f32)), Var(Aval((3,), f32))
    c = Var(Aval((3,), f32))
    d = Var(Aval((3,), f32))
    eqns = [Eqn(prims.add_p, [a, b], [c], {}),
            Eqn(prims.mul_p, [c, Literal(2.0, Aval((), f32))], [d], {})]
    return Program([], [a, b], eqns, [d])


def test_printer_reads_like_a_jaxpr():
    assert print_program(_program()) == (
        "{ lambda ; a:f32[3] b:f32[3]. let\n"
        "    c:f32[3] = add a b\n"
        "    d:f32[3] = mul c 2.0:f32[]\n"
        "  in (d,) }")


def test_verifier_accepts_a_good_program():
    verify(_program())


def test_verifier_rejects_use_before_definition():
    prog = _program()
    prog.eqns.reverse()
    with pytest.raises(VerifyError, match=r"equation 0 \(mul\).*used before it is defined"):
        verify(prog)


def test_verifier_rejects_double_assignment():
    prog = _program()
    prog.eqns[1].outvars = prog.eqns[0].outvars
    with pytest.raises(VerifyError, match=r"equation 1 \(mul\).*assigned twice"):
        verify(prog)


def test_verifier_rejects_wrong_output_type():
    prog = _program()
    prog.eqns[0].outvars[0].aval = Aval((4,), f32)
    with pytest.raises(VerifyError, match=r"equation 0 \(add\): output has type f32\[4\] but "
                                          r"its shape rule gives f32\[3\]"):
        verify(prog)


def test_verifier_rejects_operands_the_shape_rule_refuses():
    a = Var(Aval((3,), f32))
    b = Var(Aval((4,), f32))
    prog = Program([], [a, b], [Eqn(prims.add_p, [a, b], [Var(Aval((3,), f32))], {})], [a])
    with pytest.raises(VerifyError, match=r"equation 0 \(add\): add requires operands of equal") \
            as caught:
        verify(prog)
    # the shape rule's own error is kept as the cause
    assert isinstance(caught.value.__cause__, TypeError)
    assert "add requires operands of equal" in str(caught.value.__cause__)


def test_verifier_checks_sub_programs():
    mesh = shardc.make_mesh((2,), ("i",))
    body = _program()
    body.eqns.reverse()
    x, y = Var(Aval((6,), f32)), Var(Aval((6,), f32))
    out = Var(Aval((6,), f32))
    params = dict(jaxpr=body, mesh=mesh, in_specs=(shardc.PartitionSpec("i"),) * 2,
                  out_specs=(shardc.PartitionSpec("i"),), check_vma=True)
    prog = Program([], [x, y], [Eqn(prims.shard_map_p, [x, y], [out], params)], [out])
    with pytest.raises(VerifyError, match=r"equation 0 \(shard_map\): in its sub-program: "
                                          r"equation 0 \(mul\)"):
        verify(prog)


# Every primitive has the rules its layers need; explicit exemptions only.
# Calls and names that only autodiff reads (and linear_solve) are inlined before any backend
# runs a program
# (compiler/inline_calls.py), and custom_lin never runs (it raises first). process_index is
# the mesh-level program's: per-device programs hold its constant instead.
# (a sharding inspection is done and removed when its program is compiled: compiler.inspection)
_NO_IMPL = {prims.shard_map_p, *prims.CUSTOM_CALLS, prims.custom_lin_p, prims.name_p,
            prims.linear_solve_p, coll.process_index_node, prims.inspect_sharding_p,
            # checks run eagerly or become a checkified function's error; compiling refuses
            # them (compiler/checks.py)
            prims.check_p}


def test_every_primitive_has_a_shape_rule():
    missing = [p.name for p in prims.all_primitives() if p not in shape_rules]
    assert missing == []


def test_every_primitive_has_an_implementation():
    missing = [p.name for p in prims.all_primitives()
               if p not in _NO_IMPL and p not in impl_rules and p not in group_rules
               and p.kind != "collective"]
    assert missing == []


def test_every_body_primitive_has_a_replication_rule():
    missing = [p.name for p in prims.registry.values()
               if p.kind in ("op", "collective", "higher") and p not in vma_rules
               and p is not prims.shard_map_p]
    assert missing == []


def test_missing_rule_names_primitive_and_table():
    with pytest.raises(prims.MissingRuleError, match="no replication rule for primitive "
                                                     "'all_slice'"):
        vma_rules[coll.all_slice_node]


def test_primitive_names_are_registered_once():
    with pytest.raises(ValueError, match="'add' is already registered"):
        prims.primitive("add")


def test_traced_programs_verify_and_carry_user_lines():
    closed = shardc.make_jaxpr(lambda x: jnp.sin(x) * 2 + 1)(jnp.arange(3.))
    verify(closed.jaxpr)
    assert str(closed) == (
        "{ lambda ; a:f32[3]. let\n"
        "    b:f32[3] = sin a\n"
        "    c:f32[3] = mul b 2.0:f32[]\n"
        "    d:f32[3] = add c 1.0:f32[]\n"
        "  in (d,) }")
    sources = {str(e.source) for e in closed.jaxpr.eqns}
    assert sources == {f"test_ir.py:{test_traced_programs_verify_and_carry_user_lines.__code__.co_firstlineno + 1}"}


def test_closed_over_arrays_become_constants():
    w = jnp.arange(3.)
    closed = shardc.make_jaxpr(lambda x: x * w)(jnp.ones(3))
    assert str(closed).startswith("{ lambda a:f32[3]; b:f32[3]. let")
    assert len(closed.consts) == 1
