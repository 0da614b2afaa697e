"""kernel_exprs.select: where(c, a, b) simplified by what c implies in each arm, on
small expressions with a known answer; guarded loads keep their guards.  And
kernel_exprs.transcendentals on a small body with a known count."""
from needle.codegen import kernel_ir as K
from needle.compiler.kernel_exprs import select, transcendentals

I, J = K.Var("i"), K.Var("j")
C = K.Binary("le", K.Const(1), I, "bool")          # the kind of mask padding makes
D = K.Binary("lt", J, K.Const(4), "bool")
X = K.Load("in0", I, "float32", C)                  # a guarded load
ZERO, TRUE, FALSE = K.Const(0, "float32"), K.Const(True, "bool"), K.Const(False, "bool")


def test_a_constant_condition_picks_its_arm():
    assert select(TRUE, X, ZERO, "float32") is X
    assert select(FALSE, X, ZERO, "float32") is ZERO


def test_a_bool_select_of_true_and_false_is_its_condition():
    assert select(C, TRUE, FALSE, "bool") is C


def test_equal_arms_need_no_select():
    assert select(C, K.Const(0.0, "float32"), ZERO, "float32") == ZERO


def test_selects_on_the_same_condition_inside_an_arm_take_its_side():
    # relu under padding: c ? max(c ? x : 0, c ? 0.0 : 0) : 0  ->  c ? max(x, 0.0) : 0
    inner = K.Binary("max", K.Where(C, X, ZERO, "float32"), K.Where(C, K.Const(0.0, "float32"), ZERO, "float32"),
                     "float32")
    got = select(C, inner, ZERO, "float32")
    assert got == K.Where(C, K.Binary("max", X, K.Const(0.0, "float32"), "float32"), ZERO, "float32")
    assert got.a.a.valid is C  # the load still checks its own bounds
    # the false arm: c ? y : (c ? x : z)  ->  c ? y : z
    y, z = K.Const(2.0, "float32"), K.Const(3.0, "float32")
    assert select(C, y, K.Where(C, X, z, "float32"), "float32") == K.Where(C, y, z, "float32")


def test_other_conditions_and_untouched_parts_stay_as_they_are():
    other = K.Where(D, X, ZERO, "float32")
    got = select(C, other, ZERO, "float32")
    assert got == K.Where(C, other, ZERO, "float32") and got.a is other


def test_transcendentals_counts_each_written_occurrence_in_every_statement():
    """exp and tanh in a Let, a pow under a Where and a Cast in a Store inside a loop, a
    sigmoid in a Declare: 4; a sqrt, arithmetic and the loads' indices count nothing."""
    y = K.Load("in1", I, "float32")
    body = [K.Loop("i", 8, [
        K.Let("t", K.Binary("add", K.Unary("exp", X, "float32"), K.Unary("tanh", y, "float32"), "float32")),
        K.Store("out0", I, K.Cast(K.Where(C, K.Binary("pow", X, y, "float32"), ZERO, "float32"), "float64")),
        K.Store("out1", I, K.Unary("sqrt", K.Binary("mul", X, y, "float32"), "float32")),
    ], "parallel"), K.Declare("acc", "float32", K.Unary("sigmoid", ZERO, "float32"))]
    assert transcendentals(body) == 4
    assert transcendentals([K.Store("out0", I, K.Binary("add", X, y, "float32"))]) == 0
