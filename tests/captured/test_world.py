"""World (needle/captured/world.py) alone: what it guards, what it accepts, what it
reports as a call's effects."""
import collections

import numpy as np
import pytest

import needle as ndl
from needle.captured.places import ALL, MISSING, Attrs
from needle.captured import world_effects, world_guards
from needle.captured.world import World


def T(shape=(2,), value=0.0):
    return ndl.Tensor(np.full(shape, value, "float32"), requires_grad=False)


def world_of(*roots):
    w = World()
    for i, r in enumerate(roots):
        w.add(r, f"root{i}")
    return w


def holds(w):
    """Whether a replay may go ahead: the fast check, else the slow one (which refreshes)."""
    return world_guards.holds(w) or world_guards.changed(w) is None


@pytest.mark.parametrize("change", [
    lambda s: s["cfg"].__setitem__("lr", 0.5),
    lambda s: s["layers"].append(object()),
    lambda s: s["obj"].__setattr__("flag", True),
    lambda s: s["obj"].__setattr__("name", "other"),
    lambda s: s["deque"].append(1),
    lambda s: s["tags"].add("new"),
    lambda s: s["mask"].__setitem__(0, 5.0),
    lambda s: s.__setitem__("inner", {"x": 1}),
    lambda s: s["obj"].weight.__setattr__("requires_grad", True),
    lambda s: s["obj"].weight.__setattr__("grad", T()),
    lambda s: s["obj"].__setattr__("weight", T((3,))),
    lambda s: s["obj"].__setattr__("weight", None),
], ids=["dict number", "list member", "flag", "string", "deque", "set", "small numpy array", "dict rebound",
        "requires_grad", ".grad None -> Tensor", "a state Tensor of another shape", "state emptied"])
def test_a_change_of_anything_a_step_could_read_fails_the_guard(change):
    class Obj:
        pass
    obj = Obj()
    obj.flag, obj.name, obj.weight = False, "a", T()
    state = {"cfg": {"lr": 0.1}, "layers": [1, 2], "obj": obj, "deque": collections.deque([0]), "tags": {"a"},
             "mask": np.zeros(3), "inner": {"x": 1}}
    w = world_of(state)
    assert world_guards.holds(w)
    change(state)
    assert not holds(w)


def test_a_state_tensor_replaced_by_one_of_the_same_layout_is_followed():
    class Obj:
        pass
    obj = Obj()
    obj.h = T((2, 3))
    w = world_of(obj)
    obj.h = T((2, 3), 1.0)  # (a hidden state the user set again: a replay reads it where it lives)
    assert not world_guards.holds(w) and world_guards.changed(w) is None and w.moved
    assert world_guards.holds(w)  # (the snapshot followed)


def test_closure_cells_globals_and_class_attributes():
    scale = [1.0]

    def step():
        return scale

    class Net:
        SCALE = 1.0
    namespace = {"net": Net()}
    w = World()
    w.add_function(step, "step")
    w.add_globals(namespace, ["net"])
    w.namespace_attributes({"SCALE"})
    assert world_guards.holds(w)
    Net.SCALE = 2.0
    assert not holds(w)
    Net.SCALE = 1.0
    assert holds(w)
    namespace["net"] = Net()
    assert not holds(w)


def test_slots_objects_are_guarded_through_their_attributes():
    class Slotted:
        __slots__ = ("lr",)

    s = Slotted()
    s.lr = 0.1
    w = world_of({"s": s})
    s.lr = 0.2
    assert not holds(w)


def test_effects_are_what_changed_deleted_keys_and_lists_that_grew():
    d, lst, obj = {"a": 1, "b": 2}, [1, 2], type("O", (), {})()
    obj.count = 0
    w = world_of({"d": d, "lst": lst, "obj": obj})
    d["a"] = 10
    del d["b"]
    lst.append(3)
    obj.count += 1
    found = {(id(c), k): v for c, k, v in world_effects.diff(w)}
    assert found[(id(d), "a")] == 10 and found[(id(d), "b")] is MISSING
    assert found[(id(lst), ALL)] == [1, 2, 3] and found[(id(obj.__dict__), "count")] == 1


def test_exempt_attributes_are_neither_guards_nor_effects():
    class Opt:
        pass
    opt = Opt()
    opt.lr, opt.momentum = 0.1, 0.0
    w = world_of(opt)
    w.exempt_keys({(id(opt.__dict__), "lr")}, set())
    opt.lr = 0.01
    assert holds(w) and not world_effects.diff(w)
    opt.momentum = 0.9
    assert not holds(w)


def test_attrs_reads_and_writes_a_class_namespace():
    class C:
        X = 1
    a = Attrs(C)
    assert a["X"] == 1 and "X" in a and "Y" not in a
    a["X"] = 2
    assert C.X == 2
    del a["X"]
    with pytest.raises(KeyError):
        a["X"]
