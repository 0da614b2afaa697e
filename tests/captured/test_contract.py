"""The contract of needle.jit (SPEC "Captured steps"), one test per defect class that
an independent check found silently wrong: every dependency of a capture is an input,
state, a guard or a reason to run plainly with a warning.  Each test runs a loop
plainly and jitted (verify on) and compares everything bit for bit, or checks the
warning / JitError that says where needle cannot follow."""
import collections
import functools
import warnings

import numpy as np
import pytest

import needle as ndl
from needle import nn, optim
from needle.errors import IndexingError, JitError
from needle.optim.lr_scheduler import StepLR


@pytest.fixture(autouse=True)
def lazy():
    with ndl.lazy(True):
        yield


def T(a):
    return ndl.Tensor(np.asarray(a, dtype="float32"), requires_grad=False)


def batch(i, n=4, features=6, classes=3):
    rng = np.random.default_rng(i)
    return rng.standard_normal((n, features)).astype("float32"), rng.integers(0, classes, n).astype("float32")


def small(seed=0, dropout=False):
    np.random.seed(seed)
    layers = [nn.Linear(6, 8), nn.ReLU()] + ([nn.Dropout(0.3)] if dropout else []) + [nn.Linear(8, 3)]
    return nn.Sequential(*layers)


def values(x):
    """Everything observable, as comparable values."""
    if isinstance(x, ndl.Tensor):
        return ("tensor", x.numpy().tobytes(), x.shape)
    if isinstance(x, np.ndarray):
        return ("array", x.tobytes(), x.shape)
    if isinstance(x, (list, tuple)):
        return tuple(values(v) for v in x)
    if isinstance(x, dict):
        return tuple((k, values(v)) for k, v in x.items())
    return x


def both(run, replays=1, warns=None):
    """run(jit) -> observations; equal bit for bit with and without needle.jit (verify
    on every replay), the jitted run replayed at least `replays` times, or ran plainly
    with a warning matching `warns` (the notice of sums pending at a call is advice, not
    a reason to differ)."""
    plain = values(run(lambda f: f))
    made = []

    def jit(f):  # (verify every replay, unless needle is expected to say it runs plainly)
        made.append(ndl.jit(f, verify=0 if warns else 100))
        return made[-1]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jitted = values(run(jit))
    said = [str(w.message) for w in caught if "needle.jit" in str(w.message)
            and "still pending when the call started" not in str(w.message)]  # (advice: compared all the same)
    assert jitted == plain
    if warns is not None:
        assert any(__import__("re").search(warns, s) for s in said), said
    else:
        assert not said, said
        assert sum(f.replays for f in made) >= replays, [f.replays for f in made]


def sgd_step(model, opt, loss_fn=None):
    loss_fn = loss_fn or nn.SoftmaxLoss()

    def step(x, y):
        opt.reset_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


# ---- 1. arguments ---------------------------------------------------------------------------
def test_the_same_tensor_for_two_parameters_then_two_tensors():
    def run(jit):
        model = small()
        opt = optim.SGD(model.parameters(), lr=0.1)

        def step(noisy, clean):
            opt.reset_grad()
            loss = ((model(noisy) - model(clean)) ** 2).sum() + model(clean).sum()
            loss.backward()
            opt.step()
            return loss
        f = jit(step)
        out = []
        for i in range(6):
            x = T(batch(i)[0])
            out.append(f(x, x) if i < 3 else f(x, T(batch(i + 10)[0])))
        return out + model.parameters()
    both(run, replays=3)


def test_a_numpy_buffer_refilled_in_place_is_each_calls_input():
    def run(jit):
        model = small()
        opt = optim.SGD(model.parameters(), lr=0.1)
        buf_x, buf_y = np.empty((4, 6), "float32"), np.empty(4, "float32")

        def step(xb, yb):
            opt.reset_grad()
            loss = nn.SoftmaxLoss()(model(ndl.Tensor(xb, requires_grad=False)), ndl.Tensor(yb, requires_grad=False))
            loss.backward()
            opt.step()
            return loss
        f = jit(step)
        out = []
        for i in range(6):
            buf_x[:], buf_y[:] = batch(i)
            out.append(f(buf_x, buf_y))
        return out + model.parameters()
    both(run, replays=4)


@pytest.mark.parametrize("convert", ["view", "astype", "reshape"])
def test_numpy_arguments_converted_through_views_and_casts(convert):
    def make(x):
        if convert == "view":
            return ndl.Tensor(x[:, :6], requires_grad=False)
        if convert == "astype":
            return ndl.Tensor(x[:, :6].astype("float32"), requires_grad=False)
        return ndl.Tensor(x.reshape(4, 8)[:, :6], requires_grad=False)

    def run(jit):
        model = small()
        f = jit(lambda x: model(make(x)).sum())
        data = np.random.default_rng(0).standard_normal((6, 4, 8))
        data = data if convert == "astype" else data.astype("float32")
        return [f(data[i]) for i in range(6)]
    both(run, replays=4)


def test_numpy_computations_on_arguments_are_made_again_at_each_replay():
    def run(jit):
        model = small()
        f = jit(lambda x, mean: model(ndl.Tensor((x - mean) / 255.0, requires_grad=False)).sum())
        images = np.random.default_rng(0).integers(0, 256, (6, 4, 6)).astype("uint8")
        return [f(images[i], images[i].mean(axis=0)) for i in range(6)]
    both(run, replays=4)


@pytest.mark.parametrize("labels", ["loss", "index", "one-hot"])
def test_numpy_labels_and_indices_are_each_calls_input(labels):
    def run(jit):
        model = small()
        opt = optim.SGD(model.parameters(), lr=0.1)

        def step(x, y):
            opt.reset_grad()
            out = model(x)
            if labels == "loss":
                loss = nn.SoftmaxLoss()(out, y)
            elif labels == "index":
                loss = out[np.arange(4), y].sum() * -1.0
            else:
                loss = (out * ndl.Tensor(np.eye(3, dtype="float32")[y], requires_grad=False)).sum()
            loss.backward()
            opt.step()
            return loss
        f = jit(step)
        out = []
        for i in range(6):
            x, y = batch(i)
            out.append(f(T(x), y.astype("int64")))
        return out + model.parameters()
    if labels == "one-hot":  # (numpy indexing an array of its own by an argument, in C: no constant)
        both(run, warns="may have been computed from the numpy arguments")
    else:
        both(run, replays=3)


def test_a_numpy_argument_read_to_python_runs_plainly_and_says_so():
    def run(jit):
        model = small()
        f = jit(lambda x: model(T(x)).sum() * float(x.max()))
        return [f(batch(i)[0]) for i in range(5)]
    both(run, warns="value read of numpy argument 0")


def test_a_step_that_returns_its_input_returns_each_calls_input():
    def run(jit):
        model = small()
        f = jit(lambda x: (model(x).sum(), x))
        out = []
        for i in range(5):
            x = T(batch(i)[0])
            loss, back = f(x)
            assert back is x
            out.append(loss)
        return out
    both(run, replays=3)


def test_an_input_rebound_inside_the_step_is_written_back():
    def run(jit):
        model = small()

        def step(x):
            x.data = x.data / 255
            return model(x).sum()
        f = jit(step)
        out = []
        for i in range(5):
            x = T(batch(i)[0] * 255)
            out += [f(x), x]
        return out
    both(run, replays=3)


# ---- 2. state reached but not watched ----------------------------------------------------------
class Tempered(nn.Module):
    def __init__(self):
        super().__init__()
        self.net, self.aux = small(), nn.Linear(6, 3)
        self.temperature, self.use_aux = 1.0, False

    def forward(self, x):
        out = self.net(x) / self.temperature
        if self.use_aux:
            out = out + self.aux(x)
        return out


def test_a_float_and_a_flag_read_by_forward_between_calls():
    def run(jit):
        model = Tempered()
        opt = optim.Adam(model.parameters(), lr=0.01)
        f = jit(sgd_step(model, opt))
        out = []
        for i in range(10):
            model.temperature = 1.0 + (i // 3) * 0.5
            model.use_aux = i >= 6
            out.append(f(*map(T, batch(i))))
        return out + model.parameters()
    both(run, replays=4)


class CourseSGD(optim.Optimizer):
    """A course-style optimizer: step() reads self.lr as a Python float."""

    def __init__(self, params, lr):
        super().__init__(params, lr)

    def step(self):
        for p in self.params:
            if p.grad is not None:
                p.data = p.data - p.grad.data * self.lr


def test_a_course_style_optimizer_follows_its_scheduler():
    def run(jit):
        model = small()
        opt = CourseSGD(model.parameters(), lr=0.5)
        sched = StepLR(opt, step_size=2, gamma=0.5)
        f = jit(sgd_step(model, opt))
        out = []
        for i in range(8):
            out.append(f(*map(T, batch(i))))
            sched.step()
        return out + model.parameters()
    both(run, replays=3)


def test_hyperparameters_in_a_nested_dict_and_an_object():
    config = {"loss": {"l2": 0.0}}

    class HP:
        scale = 1.0

    hp = HP()

    def run(jit):
        model = small()
        opt = optim.SGD(model.parameters(), lr=0.1)

        def step(x, y):
            opt.reset_grad()
            reg = (model.modules[0].weight ** 2).sum() * config["loss"]["l2"]
            loss = nn.SoftmaxLoss()(model(x) * hp.scale, y) + reg
            loss.backward()
            opt.step()
            return loss
        f = jit(step)
        out = []
        for i in range(9):
            config["loss"]["l2"] = 0.01 * (i // 3)
            hp.scale = 1.0 + (i // 4)
            out.append(f(*map(T, batch(i))))
        return out + model.parameters()
    both(run, replays=3)


def test_a_block_appended_to_a_plain_list_of_layers():
    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            np.random.seed(1)
            self.blocks = [nn.Linear(6, 6)]
            self.head = nn.Linear(6, 3)

        def forward(self, x):
            for b in self.blocks:
                x = b(x).relu()
            return self.head(x)

    def run(jit):
        model = Stack()
        f = jit(lambda x: model(x).sum())
        out = []
        for i in range(8):
            if i == 4:
                np.random.seed(2)
                model.blocks.append(nn.Linear(6, 6))
            out.append(f(T(batch(i)[0])))
        return out
    both(run, replays=4)


def train_step(model, opt, x, y):
    opt.reset_grad()
    loss = nn.SoftmaxLoss()(model(x), y)
    loss.backward()
    opt.step()
    return loss


def test_a_model_reached_through_functools_partial_switched_to_eval():
    def run(jit):
        model = small(dropout=True)
        opt = optim.SGD(model.parameters(), lr=0.1)
        f = jit(functools.partial(train_step, model, opt))
        out = []
        np.random.seed(3)
        for i in range(8):
            model.train() if i % 3 else model.eval()
            out.append(f(*map(T, batch(i))))
        return out + model.parameters()
    both(run, replays=3)


HELPER = {}


def forward_helper(x):
    return HELPER["model"](x)


def test_a_model_reached_through_a_helpers_globals_frozen_between_calls():
    def run(jit):
        model = HELPER["model"] = small()
        opt = optim.SGD(model.parameters(), lr=0.1)

        def step(x, y):
            opt.reset_grad()
            loss = nn.SoftmaxLoss()(forward_helper(x), y)
            loss.backward()
            opt.step()
            return loss
        f = jit(step)
        out = []
        for i in range(8):
            if i == 4:
                for p in model.modules[0].parameters():
                    p.requires_grad = False
            out.append(f(*map(T, batch(i))))
        return out + model.parameters()
    both(run, replays=3)


# ---- 3. host effects ---------------------------------------------------------------------------
def test_numpys_global_rng_used_directly_runs_plainly_and_says_so():
    def run(jit):
        model = small()
        opt = optim.SGD(model.parameters(), lr=0.1)

        def step(x, y):
            noise = ndl.Tensor(np.random.randn(*x.shape).astype("float32") * 0.1, requires_grad=False)
            return train_step(model, opt, x + noise, y)
        f = jit(step)
        np.random.seed(0)
        out = [f(*map(T, batch(i))) for i in range(6)]
        return out + model.parameters() + [np.random.rand(3)]
    both(run, warns="numpy's global RNG")


def test_a_list_the_step_appends_to_runs_plainly_and_says_so():
    def run(jit):
        model, seen = small(), []

        def step(x):
            seen.append(x.shape[0])
            return model(x).sum()
        f = jit(step)
        return [f(T(batch(i)[0])) for i in range(6)] + [len(seen)]
    both(run, warns="changes .*seen")


def test_a_counter_returned_by_the_step_is_not_frozen():
    class Counting(nn.Module):
        def __init__(self):
            super().__init__()
            self.net, self.steps = small(), 0

        def forward(self, x):
            self.steps += 1
            return self.net(x).sum(), self.steps

    def run(jit):
        model = Counting()
        f = jit(model.forward)
        return [f(T(batch(i)[0])) for i in range(6)]
    both(run, warns=r"changes self\.steps")


@pytest.mark.parametrize("read", ["cached_data", "realize_cached_data", "cached_data.numpy"])
def test_reading_a_value_by_any_path_is_a_jit_error(read):
    model = small()
    reads = {"cached_data": lambda t: t.cached_data, "realize_cached_data": lambda t: t.realize_cached_data(),
             "cached_data.numpy": lambda t: t.cached_data.numpy()}

    def step(x):
        out = model(x).sum()
        reads[read](out)
        return out
    f = ndl.jit(step)
    f(T(batch(0)[0]))
    with pytest.raises(JitError, match=r"test_contract\.py:\d+"):
        f(T(batch(1)[0]))


def test_print_inside_the_step_runs_plainly_and_says_so(capsys):
    def run(jit):
        model = small()

        def step(x):
            print("step")
            return model(x).sum()
        f = jit(step)
        return [f(T(batch(i)[0])) for i in range(4)]
    both(run, warns=r"print\(\)")
    assert capsys.readouterr().out.count("step") == 8


WRITES = {  # how a step writes to the world; each writes one line per call
    "a file's write": lambda out: out["file"].write("step\n"),
    "sys.stdout.write": lambda out: __import__("sys").stdout.write("step\n"),
    "logging": lambda out: out["log"].info("step"),
    "json.dump": lambda out: (__import__("json").dump({"step": 1}, out["buffer"]), out["buffer"].write("\n")),
    "warnings.warn": lambda out: warnings.warn("step"),
}


@pytest.mark.parametrize("how", list(WRITES))
def test_a_step_writing_to_a_file_stream_log_or_warning_runs_plainly_and_says_so(how, tmp_path, capsys):
    """A replay writes nothing: a write through any file or stream, by the step or by a
    library for it, makes it run plainly with a warning, every line written as without jit."""
    import io
    import logging

    def run(jit):
        path = tmp_path / f"log-{len(list(tmp_path.iterdir()))}.txt"
        out = {"file": open(path, "w"), "buffer": io.StringIO()}
        out["log"] = logging.getLogger(f"needle-test-{path.name}")
        out["log"].handlers[:], out["log"].propagate = [logging.StreamHandler(out["buffer"])], False
        out["log"].setLevel(logging.INFO)
        model = small()

        def step(x):
            WRITES[how](out)
            return model(x).sum()
        f = jit(step)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results = [f(T(batch(i)[0])) for i in range(4)]
        out["file"].close()
        for w in caught:  # (needle's own, for `both` to see)
            if str(w.message) != "step":
                warnings.warn(w.message)
        lines = path.read_text().count("\n") + out["buffer"].getvalue().count("\n")
        return results + [lines, sum(str(w.message) == "step" for w in caught)]
    both(run, warns=r"the step calls [\w.]+\(\)")  # (logging's first: os.getpid, for its record)
    if how == "sys.stdout.write":
        assert capsys.readouterr().out.count("step") == 8


READS = {  # how a step reads a loss scale from the host: each changes it before call 5
    "os.path.exists": (lambda env: 0.1 if __import__("os").path.exists(env["flag"]) else 1.0,
                       lambda env: open(env["flag"], "w").close()),
    "os.getenv": (lambda env: float(__import__("os").getenv("NEEDLE_TEST_SCALE", "1.0")),
                  lambda env: __import__("os").environ.__setitem__("NEEDLE_TEST_SCALE", "0.1")),
    "sqlite3": (lambda env: env["db"].execute("select v from s").fetchone()[0],
                lambda env: env["db"].execute("update s set v = 0.1")),
}


@pytest.mark.parametrize("how", list(READS))
def test_a_step_reading_the_host_through_os_or_a_database_runs_plainly_and_says_so(how, tmp_path, monkeypatch):
    import sqlite3
    monkeypatch.delenv("NEEDLE_TEST_SCALE", raising=False)
    read, change = READS[how]

    def run(jit):
        env = {"flag": str(tmp_path / f"flag-{len(list(tmp_path.iterdir()))}"), "db": sqlite3.connect(":memory:")}
        env["db"].execute("create table s (v real)")
        env["db"].execute("insert into s values (1.0)")
        monkeypatch.delenv("NEEDLE_TEST_SCALE", raising=False)
        return _scale_changed_at_call_5(jit, lambda: read(env), lambda: change(env))
    both(run, warns=r"the step calls ([\w.]+\(\)|a read of os\.environ)")


def test_os_write_in_the_step_runs_plainly_and_says_so(tmp_path):
    import os

    def run(jit):
        path = tmp_path / f"out-{len(list(tmp_path.iterdir()))}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT)
        model = small()

        def step(x):
            os.write(fd, b"step\n")
            return model(x).sum()
        f = jit(step)
        out = [f(T(batch(i)[0])) for i in range(4)]
        os.close(fd)
        return out + [path.read_bytes().count(b"\n")]
    both(run, warns=r"os\.write\(\)")


def _scaled_step(model, opt, scale):
    def step(x, y):
        opt.reset_grad()
        loss = nn.SoftmaxLoss()(model(x), y) * scale()
        loss.backward()
        opt.step()
        return loss
    return step


def _scale_changed_at_call_5(jit, scale, change):
    model = small()
    opt = optim.SGD(model.parameters(), lr=0.1)
    f = jit(_scaled_step(model, opt, scale))
    out = []
    for i in range(8):
        if i == 4:
            change()
        out.append(f(*map(T, batch(i))))
    return out + model.parameters()


@pytest.mark.parametrize("how", ["getattr of a module", "globals()", "getattr of the optimizer", "vars()"])
def test_values_read_by_names_built_at_run_time_are_guards(how, monkeypatch):
    """getattr, vars and globals() read names the step's code does not spell: after one,
    every global and module attribute the step could reach is a guard, and an optimizer's
    lr is no longer read at each replay but guarded (a changed value recaptures)."""
    import types
    cfg = types.ModuleType("needle_test_cfg")
    monkeypatch.setitem(__import__("sys").modules, "needle_test_cfg", cfg)
    name = "".join({"getattr of a module": ["LOSS", "_SCALE"], "globals()": ["NEEDLE", "_TEST_SCALE"]}.get(how, "lr"))
    opts = []

    def scale():
        if how == "getattr of a module":
            return getattr(cfg, name)
        if how == "globals()":
            return globals()[name]
        return 10 * (getattr(opts[-1], name) if how == "getattr of the optimizer" else vars(opts[-1])[name])

    def set_to(value):
        if how == "getattr of a module":
            setattr(cfg, name, value)
        elif how == "globals()":
            globals()[name] = value
        elif value != 1.0:
            setattr(opts[-1], name, value / 10)

    def run(jit):
        set_to(1.0)
        model = small()
        opts.append(optim.SGD(model.parameters(), lr=0.1))
        f = jit(_scaled_step(model, opts[-1], scale))
        out = []
        for i in range(8):
            if i == 4:
                set_to(0.25)
            out.append(f(*map(T, batch(i))))
        return out + model.parameters()
    try:
        both(run, replays=3)
    finally:
        globals().pop("NEEDLE_TEST_SCALE", None)


def test_a_ctypes_array_the_step_reads_is_guarded_by_its_values():
    """Shared memory (a ctypes array, what multiprocessing.Array wraps) changed between
    calls: its values are a guard, as a small numpy array's are."""
    import ctypes
    shared = (ctypes.c_double * 2)(1.0, 0.0)

    def run(jit):
        shared[0] = 1.0
        return _scale_changed_at_call_5(jit, lambda: shared[0], lambda: shared.__setitem__(0, 0.25))
    both(run, replays=3)


def test_an_installed_packages_global_the_step_reads_through_it_is_a_guard(tmp_path, monkeypatch):
    """Code of an installed package the step calls is followed like the user's: its module
    setting changed between calls recaptures (it had been ignored by replays)."""
    import sys
    from needle.captured import code
    site = tmp_path / "site-packages"
    (site / "needle_test_lib").mkdir(parents=True)
    (site / "needle_test_lib" / "__init__.py").write_text(
        "SCALE = 1.0\n\ndef set_scale(v):\n    global SCALE\n    SCALE = v\n\n\ndef scaled(x):\n    return x * SCALE\n")
    monkeypatch.setattr(code, "_LIBRARY_DIRS", code._LIBRARY_DIRS + (str(site),))
    monkeypatch.setattr(code, "_PACKAGE_DIRS", code._PACKAGE_DIRS + (str(site),))
    code.is_user_code.cache_clear()
    code.is_package_code.cache_clear()
    monkeypatch.syspath_prepend(str(site))
    try:
        import needle_test_lib as lib
        assert not code.is_user_code(lib.__file__) and code.is_package_code(lib.__file__)

        def run(jit):
            lib.set_scale(1.0)
            return _scale_changed_at_call_5(jit, lambda: lib.scaled(1.0), lambda: lib.set_scale(0.25))
        both(run, replays=3)
    finally:
        sys.modules.pop("needle_test_lib", None)
        code.is_user_code.cache_clear()
        code.is_package_code.cache_clear()


def test_a_numpy_boolean_mask_argument_runs_plainly_and_says_so():
    """Its values decide the selection's shape, which a replay could not: the step runs
    plainly with a warning (every call after the first had raised a JitError that spoke of
    reading a tensor's value)."""
    def run(jit):
        model = small()
        opt = optim.SGD(model.parameters(), lr=0.1)

        def step(x, y, mask):
            opt.reset_grad()
            loss = nn.SoftmaxLoss()(model(x[mask]), y[mask])
            loss.backward()
            opt.step()
            return loss
        f = jit(step)
        masks = [np.array(m, bool) for m in ([1, 1, 0, 1], [0, 1, 1, 1], [1, 0, 0, 1], [1, 1, 1, 1])]
        return [f(*map(T, batch(i)), masks[i % 4]) for i in range(6)] + model.parameters()
    both(run, warns="boolean mask from a numpy argument")


def test_dict_keys_the_step_deletes_are_deleted_by_replays():
    """Gradients accumulated into a dict over micro-batches, cleared by the step that
    applies them: the deletions replay (they had made it run plainly, naming an `object`)."""
    def run(jit):
        model, acc = small(), {}
        opt = optim.SGD(model.parameters(), lr=0.1)

        def step(x, y, last):
            loss = nn.SoftmaxLoss()(model(x), y)
            loss.backward()
            for i, p in enumerate(model.parameters()):
                acc[i] = p.grad.detach()
            if last:
                opt.step()
                opt.reset_grad()
                acc.clear()
            return loss
        f = jit(step)
        out = [f(*map(T, batch(i)), i % 2 == 1) for i in range(10)]
        return out + model.parameters() + [sorted(acc)]
    both(run, replays=4)


def test_a_hidden_state_passed_back_with_its_graph_names_the_argument():
    model = nn.RNNCell(6, 5)
    opt = optim.SGD(model.parameters(), lr=0.1)

    def step(x, h):
        opt.reset_grad()
        h = model(x, h)
        h.sum().backward()
        opt.step()
        return h
    f = ndl.jit(step)
    h = T(np.zeros((4, 5)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(4):
            h = f(T(batch(i)[0]), h)
    said = [str(w.message) for w in caught if "needle.jit" in str(w.message)]
    assert any("tensor argument 1 carries the graph of earlier calls" in s and "detach()" in s for s in said), said


def test_an_array_array_the_step_appends_to_runs_plainly_and_says_so():
    import array

    def run(jit):
        model, history = small(), array.array("d")

        def step(x):
            history.append(float(x.shape[0]))
            return model(x).sum()
        f = jit(step)
        return [f(T(batch(i)[0])) for i in range(5)] + [list(history)]
    both(run, warns="changes .*history")


@pytest.mark.parametrize("setting, value", [("UNROLL_MIN_WORK", 0), ("BOUNDS_CHECK", True), ("THREADS", 1)])
def test_a_compile_setting_changed_at_run_time_is_what_replays_use(setting, value):
    """needle.config may be assigned at run time: a plain call then compiles for the new
    setting (another unrolling rounds sums differently), so a replay must too."""
    from needle import config

    def run(jit):
        before = getattr(config, setting)
        np.random.seed(0)
        model = nn.Sequential(nn.Linear(600, 64), nn.ReLU(), nn.Linear(64, 3))
        opt = optim.SGD(model.parameters(), lr=0.1)
        f = jit(sgd_step(model, opt))
        out = []
        try:
            for i in range(8):
                if i == 4:
                    setattr(config, setting, value)
                rng = np.random.default_rng(i)
                out.append(f(T(rng.standard_normal((32, 600))), T(rng.integers(0, 3, 32))))
        finally:
            setattr(config, setting, before)
        return out + model.parameters()
    both(run, replays=4)


# ---- 4. transactional replays ------------------------------------------------------------------
def test_a_hidden_state_reset_between_epochs_with_adam_and_dropout():
    class Carry(nn.Module):
        def __init__(self):
            super().__init__()
            np.random.seed(4)
            self.cell, self.drop, self.head, self.h = nn.RNNCell(6, 5), nn.Dropout(0.2), nn.Linear(5, 3), None

        def forward(self, x):
            self.h = self.cell(x, None if self.h is None else self.h.detach())
            return self.head(self.drop(self.h))

    def run(jit):
        model = Carry()
        opt = optim.Adam(model.parameters(), lr=0.01)
        f = jit(sgd_step(model, opt))
        np.random.seed(5)
        out = []
        for epoch in range(3):
            model.h = None
            for i in range(3):
                out.append(f(*map(T, batch(10 * epoch + i))))
        return out + model.parameters() + [opt.t]
    both(run, replays=3)


def test_optimizer_state_cleared_between_calls():
    def run(jit):
        model = small()
        opt = optim.Adam(model.parameters(), lr=0.01)
        f = jit(sgd_step(model, opt))
        out = []
        for i in range(8):
            if i == 4:
                opt.m.clear()
                opt.v.clear()
            out.append(f(*map(T, batch(i))))
        return out + model.parameters() + [opt.t]
    both(run, replays=3)


# ---- 5. forward-only capture -------------------------------------------------------------------
def test_backward_outside_the_jitted_function_runs_plainly_and_says_so():
    def run(jit):
        model = small()
        opt = optim.SGD(model.parameters(), lr=0.1)
        loss_fn = nn.SoftmaxLoss()
        f = jit(lambda x, y: loss_fn(model(x), y))
        out = []
        for i in range(6):
            opt.reset_grad()
            loss = f(*map(T, batch(i)))
            loss.backward()
            opt.step()
            out.append(loss)
        return out + model.parameters()
    both(run, warns="differentiated after the call")


def test_backward_through_a_replayed_result_is_a_jit_error():
    model = small()
    f = ndl.jit(lambda x: model(x).sum())
    for i in range(4):
        out = f(T(batch(i)[0]))
    assert f.replays == 2
    with pytest.raises(JitError, match="keeps no graph"):
        out.backward()


def test_an_inference_function_replays():
    def run(jit):
        model = small()
        f = jit(lambda x: model(x))
        return [f(T(batch(i)[0])) for i in range(5)]
    both(run, replays=3)


# ---- verify --------------------------------------------------------------------------------------
def test_verify_names_the_first_tensor_a_broken_replay_gets_wrong():
    model = small()
    opt = optim.SGD(model.parameters(), lr=0.1)
    f = ndl.jit(sgd_step(model, opt), verify=2)
    f(*map(T, batch(0)))
    f(*map(T, batch(1)))
    (step,) = [s for steps in f.captures.values() for s in steps]
    step.data_writes = []  # a replay that forgets the new weights
    with pytest.raises(JitError, match=r"verify: replay 1 \(call 3\) differs from a plain call in .*weight"):
        f(*map(T, batch(2)))


def test_verify_from_the_environment(monkeypatch):
    monkeypatch.setenv("NEEDLE_JIT_VERIFY", "3")
    model = small()
    f = ndl.jit(lambda x: model(x).sum())
    for i in range(6):
        f(T(batch(i)[0]))
    assert f.verify == 3 and f.verified == 3 and f.replays == 4


def test_two_threads_each_capture_their_own_step():
    import threading

    def setup(seed):
        model = small(seed)
        return model, ndl.jit(sgd_step(model, optim.SGD(model.parameters(), lr=0.1)))

    def train(model, f, seed, results):
        results.append([f(*map(T, batch(seed * 100 + i))).numpy() for i in range(8)] +
                       [p.numpy() for p in model.parameters()] + [f.replays])
    want = []
    for seed in (1, 2):
        train(*setup(seed), seed, want)
    runs = [setup(seed) for seed in (1, 2)]  # (models made here: numpy's RNG is one for all threads)
    got = [[], []]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        threads = [threading.Thread(target=train, args=(*runs[k], k + 1, got[k])) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not [str(w.message) for w in caught if "needle.jit" in str(w.message)]
    for k in range(2):
        assert values(got[k][0]) == values(want[k]) and got[k][0][-1] >= 5
    from needle.engine import capture
    assert capture.CURRENT is None and capture.current() is None


# ---- from the third independent check (whole training scripts) ------------------------------
@pytest.mark.parametrize("habit", ["frozen_flag", "lr_multiplier", "mask_replaced", "written_inside"])
def test_the_users_own_attributes_on_parameters(habit):
    def run(jit):
        model = small()
        w = model[0].weight
        for p in model.parameters():
            p.frozen, p.lr_mult = False, 1.0
        w.mask = ndl.init.ones(*w.shape)

        def step(x, y):
            for p in model.parameters():
                p.grad = None
            loss = nn.SoftmaxLoss()(model(x), y)
            loss.backward()
            w.grad = w.grad * w.mask
            for p in model.parameters():
                p.grad_sq = (p.grad * p.grad).sum()
                if not p.frozen:
                    p.data = p.data - p.grad * (0.1 * p.lr_mult)
            return loss
        f = jit(step)
        out = []
        for i in range(8):
            if i == 4 and habit == "frozen_flag":
                w.frozen = True
            if i == 4 and habit == "lr_multiplier":
                for p in model.parameters():
                    p.lr_mult = 0.25
            if i == 4 and habit == "mask_replaced":
                w.mask = T((np.abs(w.numpy()) > np.median(np.abs(w.numpy()))).astype("float32"))
            x, y = batch(i % 3)
            out.append(f(T(x), T(y)))
            out.append([p.grad_sq for p in model.parameters()])
        return out + model.parameters()
    both(run, replays=4)


def test_attributes_of_a_batch_tensor_are_arguments_too():
    def run(jit):
        model = small()
        opt = optim.SGD(model.parameters(), lr=0.1)

        def step(x, y):
            opt.reset_grad()
            per = ndl.ops.logsumexp(model(x), (1,))
            loss = (per * x.sample_weight).sum()
            loss.backward()
            opt.step()
            return loss
        f = jit(step)
        out = []
        for i in range(6):
            x, y = batch(i % 3)
            xb = T(x)
            xb.sample_weight = T(np.full(4, 1.0 if i < 3 else 0.5 + i, "float32"))
            out.append(f(xb, T(y)))
        return out + model.parameters()
    both(run, replays=3)


def test_a_step_setting_an_attribute_on_its_argument_runs_plainly():
    def run(jit):
        model = small()
        f = jit(lambda x: setattr(x, "out", model(x)) or x.out.sum())
        out = []
        for i in range(4):
            xb = T(batch(i)[0])
            out.append(f(xb))
            out.append(xb.out)
        return out
    both(run, warns="changes an argument it was given")


@pytest.mark.parametrize("labels_as", ["tensor", "numpy"])
def test_one_hot_of_each_calls_labels(labels_as):
    def run(jit):
        model = small()
        opt = optim.SGD(model.parameters(), lr=0.1)

        def step(x, y):
            opt.reset_grad()
            target = ndl.init.one_hot(3, y) * 0.9 + 0.1 / 3  # (label smoothing: every term of the sum counts)
            logits = model(x)
            loss = (ndl.ops.logsumexp(logits, (1,)) - (logits * target).sum((1,))).sum()
            loss.backward()
            opt.step()
            return loss
        f = jit(step)
        out = []
        for i in range(6):
            x, y = batch(i)
            out.append(f(T(x), T(y) if labels_as == "tensor" else y.astype("int64")))
        with pytest.raises(ndl.errors.IndexingError, match="one_hot: label .* out of range"):
            f(T(x), T(y + 7) if labels_as == "tensor" else (y + 7).astype("int64"))
        return out + model.parameters()
    both(run, replays=3)


def test_a_projection_after_the_optimizers_step_left_pending():
    # Weight clipping (WGAN), max-norm, decay by hand: the parameters are pending at the end
    # of each call; unjitted, the next call computes them with its schedule.
    def run(jit):
        model = small()
        opt = optim.Adam(model.parameters(), lr=0.01)

        def step(x, y):
            opt.reset_grad()
            loss = nn.SoftmaxLoss()(model(x), y)
            loss.backward()
            opt.step()
            for p in model.parameters():
                p.data = p.data - ndl.ops.relu(p.data - 0.05) + ndl.ops.relu(-p.data - 0.05)
            return loss
        f = jit(step)
        return [f(*map(T, batch(i % 4))) for i in range(8)] + model.parameters()
    both(run, replays=5)


def test_a_number_argument_new_at_every_call_runs_plainly_saying_so():
    def run(jit):
        model = small()
        opt = optim.SGD(model.parameters(), lr=0.1)

        def step(x, lam):
            opt.reset_grad()
            loss = (model(x) * lam).sum()
            loss.backward()
            opt.step()
            return loss
        f = jit(step)
        return [f(T(batch(i)[0]), 0.1 * i + 0.05) for i in range(8)] + model.parameters()
    both(run, warns=r"number in argument 1 has a new value at every call.*needle.Tensor")


def test_number_arguments_that_repeat_replay_their_captures():
    def run(jit):
        model = small()
        opt = optim.SGD(model.parameters(), lr=0.1)

        def step(x, lam=1.0):
            opt.reset_grad()
            loss = (model(x) * lam).sum()
            loss.backward()
            opt.step()
            return loss
        f = jit(step)
        return [f(T(batch(i)[0]), lam=(0.5, 0.25)[i % 2]) for i in range(8)] + model.parameters()
    both(run, replays=4)


@pytest.mark.parametrize("make", [optim.RMSprop, optim.Adam])
def test_optimizer_state_sharing_storage_cleared_and_made_again(make):
    # Two biases added to one sum get the same gradient; the optimizer's first step makes
    # their moments from it, and the schedule computes the two equal values once: two
    # state Tensors sharing storage (the loop fuzzer's seed 5527). Each is written.
    def run(jit):
        np.random.seed(0)
        cell = nn.RNNCell(6, 8)
        head = nn.Linear(8, 3)
        params = cell.parameters() + head.parameters()
        opt = make(params, lr=0.01)

        def step(x, y):
            opt.reset_grad()
            loss = nn.SoftmaxLoss()(head(cell(x)), y)
            loss.backward()
            opt.step()
            return loss
        f = jit(step)
        out = []
        for i in range(8):
            if i == 3:
                for name in type(opt)._state_names:
                    getattr(opt, name).clear()
            out.append(f(*map(T, batch(i))))
        return out + params + [t for name in type(opt)._state_names for t in getattr(opt, name).values()]
    both(run, replays=3)


@pytest.mark.parametrize("indices", [[[0, 1], [2, 3], [4, 5], [1, 0]], [[0, 0], [3, 3], [1, -1], [-2, 5], [7, 7]],
                                     [[0, 1, 0], [2, 3, 2], [4, 4, 4], [-1, 6, 7]]])
def test_a_write_through_a_tensor_index_into_state_is_captured(indices):
    # `bank[idx] = out` with an integer Tensor index: written by kernels (numpy's rule, the
    # last of repeated positions wins, negative positions from the end), so a replay
    # follows each call's index; it was read on the host, which a capture refuses
    def run(jit):
        model = small()
        opt = optim.SGD(model.parameters(), lr=0.1)
        state = {"bank": T(np.arange(24, dtype="float32").reshape(8, 3))}

        def step(x, idx):
            opt.reset_grad()
            bank = state["bank"] * 1.0
            bank[idx] = model(x)
            loss = (bank ** 2).sum()
            loss.backward()
            opt.step()
            state["bank"] = bank.detach()
            return loss
        f = jit(step)
        out = [f(T(batch(i, len(ix))[0]), ndl.Tensor(np.array(ix), requires_grad=False))
               for i, ix in enumerate(indices)]
        return out + [state["bank"]] + model.parameters()
    both(run, replays=len(indices) - 2)


def test_a_tensor_index_out_of_range_at_a_replay_raises_as_a_plain_call():
    bank = T(np.zeros((4, 2), "float32"))

    def step(v, idx):
        b = bank * 1.0
        b[idx] = v
        return b
    f = ndl.jit(step)
    for ix in ([0, 1], [1, 2], [2, 3]):
        f(T(np.ones((2, 2), "float32")), ndl.Tensor(np.array(ix), requires_grad=False))
    with pytest.raises(IndexingError, match="out of bounds"):
        f(T(np.ones((2, 2), "float32")), ndl.Tensor(np.array([3, 9]), requires_grad=False))


def test_a_dataset_of_small_arrays_held_by_the_step_runs_plainly_and_says_so():
    # every small numpy array the step can reach is copied and compared at each call: a
    # trainer holding its samples would make each call slower than the plain one and each
    # capture a copy of the data; past a bound (world.ARRAY_GUARD_BYTES) it runs plainly
    from needle.captured import world
    samples = [np.full(4096, i, "float32") for i in range(world.ARRAY_GUARD_BYTES // (4096 * 4) + 2)]

    def run(jit):
        model = small()
        f = jit(lambda x: model(x).sum() + float(len(samples)))
        return [f(T(batch(i)[0])) for i in range(4)]
    both(run, warns="MB of numpy arrays to guard")


def test_a_state_tensor_sharing_a_parameters_storage_between_two_captures():
    # an anchor taken with `q.data = p.detach()` shares p's storage for one call: one capture
    # with the two as one place, one without; a replay of the first ends the sharing (p gets
    # new data), so the next call must not reuse what that replay left (it read p's storage
    # for q: calls after the second anchor differed)
    def run(jit):
        model = small()
        opt = optim.SGD(model.parameters(), lr=0.1)
        anchor = [T(np.zeros(p.shape, "float32")) for p in model.parameters()]

        def step(x):
            opt.reset_grad()
            loss = (model(x) ** 2).sum() + sum(((p - q) ** 2).sum() for p, q in zip(model.parameters(), anchor))
            loss.backward()
            opt.step()
            return loss
        f = jit(step)
        out = []
        for i in range(8):
            if i in (1, 5):
                for q, p in zip(anchor, model.parameters()):
                    q.data = p.detach()
            out.append(f(T(batch(i)[0])))
        return out + model.parameters() + anchor
    both(run, replays=4)


def test_the_order_of_a_dict_the_step_iterates_is_a_guard():
    scales = {"big": 1e8, "neg": -1e8, "one": 1.0}

    def run(jit):
        scales.update(big=1e8, neg=-1e8, one=1.0)
        scales["neg"] = scales.pop("neg")  # (the capture's order: big, one, neg)

        def f(x):
            out = None
            for s in scales.values():
                out = x * s if out is None else out + x * s
            return out
        g = jit(f)
        out = [g(T([1.0, 1.0])) for _ in range(3)]
        scales["one"] = scales.pop("one")  # (the same keys and values, another order: big, neg, one)
        return out + [g(T([1.0, 1.0])) for _ in range(3)]
    both(run, replays=2)


def test_a_jitted_function_called_inside_another_runs_inline():
    # the outer call's warm-up is plain: an inner jitted forward that replays there would
    # give a tensor without a graph to backward() through; a recursive call is inline too
    def run(jit):
        model = small()
        opt = optim.SGD(model.parameters(), lr=0.1)
        forward = jit(lambda x: model(x))
        out = [forward(T(batch(i)[0])) for i in range(3)]  # (forward has a capture of its own)
        f = jit(sgd_step(forward, opt))
        return out + [f(*map(T, batch(i))) for i in range(5)]
    both(run, replays=2)


def test_a_returned_tensor_that_refers_to_itself_runs_plainly():
    def run(jit):
        model = small()

        def f(x):
            t = model(x)
            t.me = t
            return t
        g = jit(f)
        return [g(T(batch(i)[0])) for i in range(4)]
    both(run, warns="refers to itself")


class _Stats:
    avg = None


def test_a_state_tensor_in_a_class_attribute_is_read_where_it_lives():
    # (a running average kept on a class, rebound by the step: replays read the capture's
    # Tensor, silently)
    def run(jit):
        model = small()
        opt = optim.SGD(model.parameters(), lr=0.1)
        _Stats.avg = T(np.zeros((), "float32"))

        def step(x):
            opt.reset_grad()
            loss = (model(x) ** 2).mean()
            loss.backward()
            opt.step()
            _Stats.avg = (_Stats.avg * 0.9 + loss.detach() * 0.1).detach()
            return loss
        f = jit(step)
        out = []
        for i in range(6):
            f(T(batch(i)[0]))
            out.append(_Stats.avg)
        return out + model.parameters()
    both(run, replays=3)


def test_a_tensor_arguments_class_is_part_of_the_key():
    def run(jit):
        w = T(np.ones(2, "float32"))
        f = jit(lambda x: (x * w * (2.0 if isinstance(x, nn.Parameter) else 1.0)).sum())
        out = []
        for i in range(6):
            x = (ndl.Tensor if i % 2 else nn.Parameter)(np.full(2, i, "float32"))
            x.requires_grad = False
            out.append(f(x))
        return out
    both(run, replays=2)


def test_a_jitted_closure_deep_copies_without_its_captures():
    import copy
    model = small()
    f = ndl.jit(lambda x: model(x).sum())
    for i in range(3):
        f(T(batch(i)[0]))
    g = copy.deepcopy(f)
    assert g.calls == 0 and not g.captures
    np.testing.assert_array_equal(g(T(batch(5)[0])).numpy(), f(T(batch(5)[0])).numpy())


def test_state_found_only_while_the_call_runs_is_not_computed_inside_the_capture():
    # a class's running Tensor reached only through a function kept in a dict: the world
    # finds it while the call runs, after the call's first schedule had computed what the
    # warm-up left pending (the old average) as part of the capture, from constants
    places = {"avg": (lambda: _Stats.avg, lambda v: setattr(_Stats, "avg", v))}

    def run(jit):
        get, put = places["avg"]
        model = small()
        opt = optim.SGD(model.parameters(), lr=0.1)
        put(T(np.zeros((), "float32")))

        def step(x):
            opt.reset_grad()
            loss = (model(x) ** 2).mean()
            loss.backward()
            opt.step()
            put((get() * 0.9 + loss.detach() * 0.1).detach())
            return loss
        f = jit(step)
        out = []
        for i in range(6):
            f(T(batch(i)[0]))
            out.append(get())
        return out + model.parameters()
    plain = values(run(lambda f: f))
    made = []
    jitted = values(run(lambda f: made.append(ndl.jit(f)) or made[-1]))  # (no verify: it would run plain calls)
    assert jitted == plain and made[0].replays >= 3


class _Flags(__import__("ctypes").Structure):
    _fields_ = [("scale", __import__("ctypes").c_double), ("on", __import__("ctypes").c_int)]


def _holder(kind):
    """(read, change) of a loss scale kept where the world walk must look to guard it."""
    import ctypes
    import mmap
    if kind == "memoryview":  # (SharedMemory.buf is one)
        view = memoryview(bytearray(np.float64(1.0).tobytes()))
        return lambda: float(np.frombuffer(view, np.float64)[0]), \
            lambda: view.__setitem__(slice(0, 8), np.float64(0.25).tobytes())
    if kind == "mmap":
        mapped = mmap.mmap(-1, 8)
        mapped[:] = np.float64(1.0).tobytes()
        return lambda: float(np.frombuffer(mapped[:8], np.float64)[0]), \
            lambda: mapped.__setitem__(slice(0, 8), np.float64(0.25).tobytes())
    if kind == "ctypes structure":  # (multiprocessing.RawValue(Structure) gives one)
        flags = _Flags(1.0, 1)
        return lambda: flags.scale, lambda: setattr(flags, "scale", 0.25)
    if kind == "ctypes pointer":
        pointer = ctypes.pointer(ctypes.c_double(1.0))
        return lambda: pointer.contents.value, lambda: setattr(pointer.contents, "value", 0.25)
    if kind == "numpy object array":
        table = np.empty(1, dtype=object)
        table[0] = {"scale": 1.0}
        return lambda: table[0]["scale"], lambda: table[0].__setitem__("scale", 0.25)
    big = np.ones(100_000, np.float32)  # (too big to copy: guarded by a checksum)
    if kind == "large array, an element":
        return lambda: float(big[7]), lambda: big.__setitem__(7, 0.25)
    return lambda: float(big.mean()), lambda: big.__setitem__(slice(None), 0.25)


@pytest.mark.parametrize("kind", ["memoryview", "mmap", "ctypes structure", "ctypes pointer", "numpy object array",
                                  "large array, an element", "large array, a method"])
def test_a_value_in_memory_the_step_reads_is_guarded(kind):
    """Memory the walk had not entered (a memoryview, an mmap, a ctypes structure or
    pointer, an object array's elements, a numpy array too big to copy) changed between
    calls: a guard, so the capture is made again (replays had kept the first value)."""
    def run(jit):
        read, change = _holder(kind)
        return _scale_changed_at_call_5(jit, read, change)
    both(run, replays=3)


def test_a_large_array_the_step_writes_runs_plainly_and_says_so():
    """`acc[:] = 0` at each step into an array too big to copy: replays would not write
    it, so once the loop changes it between calls the step runs plainly, saying so."""
    def run(jit):
        acc = np.zeros(100_000, np.float32)
        model = small()

        def step(x):
            acc[:] = 0.0
            return model(x).sum()
        f = jit(step)
        out = []
        for i in range(8):
            out.append(f(T(batch(i)[0])))
            if i >= 4:
                acc[i] = 1.0
            out.append(float(acc.sum()))
        return out
    both(run, warns=r"writes the numpy array at acc")


def _iterated(kind):
    import itertools
    if kind == "for loop over an iterator":
        it = iter([1.0, 0.5, 0.25, 0.125] * 3)

        def draw():
            for s in it:
                return s
        return draw
    if kind == "islice":
        it = iter([1.0, 0.5, 0.25, 0.125] * 3)
        return lambda: next(iter(list(itertools.islice(it, 1))))
    gen = (1.0 / (k + 1) for k in range(100))
    return lambda: sum(itertools.islice(gen, 1))


@pytest.mark.parametrize("kind", ["for loop over an iterator", "islice", "generator"])
def test_an_iterator_the_step_advances_runs_plainly_and_says_so(kind):
    """An iterator whose position lives in C (a list's, a generator) advanced by a for
    loop or islice, which call nothing the tracer sees: replays had kept the first item."""
    def run(jit):
        draw = _iterated(kind)
        model = small()
        opt = optim.SGD(model.parameters(), lr=0.1)
        f = jit(_scaled_step(model, opt, draw))
        return [f(*map(T, batch(i))) for i in range(6)] + model.parameters()
    both(run, warns=r"reaches an iterator")


def test_a_thread_local_the_step_reads_is_guarded_by_the_calling_thread():
    """A threading.local holds one value per thread: a capture made on one thread had
    replayed on another with the first thread's value; now the thread is a guard."""
    import threading
    context = threading.local()

    def run(jit):
        model = small()
        opt = optim.SGD(model.parameters(), lr=0.1)
        f = jit(_scaled_step(model, opt, lambda: context.scale))
        out = []

        def calls(scale, first):
            context.scale = scale
            out.extend(f(*map(T, batch(i))) for i in range(first, first + 4))
        for scale, first in ((1.0, 0), (0.25, 4)):
            thread = threading.Thread(target=calls, args=(scale, first))
            thread.start()
            thread.join()
        return out + model.parameters()
    both(run, replays=3)


HOST_READS = {  # host state read through C functions of modules other than time and os
    "resource.getrusage": lambda: 1.0 + 0.0 * __import__("resource").getrusage(0).ru_utime,
    "datetime.date.today": lambda: 1.0 if __import__("datetime").date.today().year > 2000 else 0.5,
}


@pytest.mark.parametrize("how", list(HOST_READS))
def test_a_step_reading_host_clocks_runs_plainly_and_says_so(how):
    def run(jit):
        model = small()
        opt = optim.SGD(model.parameters(), lr=0.1)
        f = jit(_scaled_step(model, opt, HOST_READS[how]))
        return [f(*map(T, batch(i))) for i in range(6)] + model.parameters()
    both(run, warns=how.split(".")[-1] + r"\(\)")


def test_a_simple_queue_the_step_puts_into_runs_plainly_and_says_so():
    """queue.SimpleQueue (an async logger's) is C: its put had been dropped by replays."""
    import queue

    def run(jit):
        logged = queue.SimpleQueue()
        model = small()

        def step(x):
            loss = model(x).sum()
            logged.put("step")
            return loss
        f = jit(step)
        return [f(T(batch(i)[0])) for i in range(6)] + [logged.qsize()]
    both(run, warns=r"SimpleQueue\.put\(\)")


def test_a_negative_zero_argument_is_not_the_capture_of_zero():
    """-0.0 == 0.0, but code may branch on its sign (copysign, 1 / x): the key tells them
    apart (the capture made for 0.0 had replayed for -0.0)."""
    import math

    def run(jit):
        model = small()
        opt = optim.SGD(model.parameters(), lr=0.1)

        def step(x, y, shift):
            opt.reset_grad()
            loss = nn.SoftmaxLoss()(model(x), y) + math.copysign(0.5, shift)
            loss.backward()
            opt.step()
            return loss
        f = jit(step)
        return [f(*map(T, batch(i)), -0.0 if i in (4, 5, 6) else 0.0) for i in range(9)] + model.parameters()
    both(run, replays=3)


def _update_outside(jit, realize_first):
    """Gradients from a backward() outside the jitted optimizer step."""
    model = small()
    opt = optim.Adam(model.parameters(), lr=0.01)
    update = jit(opt.step)
    losses = []
    for i in range(6):
        opt.reset_grad()
        loss = nn.SoftmaxLoss()(model(T(batch(i)[0])), T(batch(i)[1]))
        loss.backward()
        if realize_first:
            ndl.realize(*[p.grad for p in model.parameters()])
        update()
        losses.append(loss)
    return losses + model.parameters()


def test_sums_still_pending_when_a_call_starts_are_told():
    """Gradients pending at the call are computed before it, where a call without
    needle.jit computes them with the step's own kernels (a sum rounds by its kernel):
    needle says so, once; realized before the call, the two runs are the same."""
    plain = values(_update_outside(lambda f: f, False))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jitted = values(_update_outside(ndl.jit, False))
    said = [str(w.message) for w in caught if "still pending when the call started" in str(w.message)]
    assert len(said) == 1 and ".grad" in said[0], said
    for a, b in zip(plain[:6], jitted[:6]):  # (the losses: the same up to the last bits)
        np.testing.assert_allclose(np.frombuffer(a[1], np.float32), np.frombuffer(b[1], np.float32), rtol=1e-6)
    both(lambda jit: _update_outside(jit, True), replays=3)


def test_a_guard_new_at_every_call_runs_plainly_and_says_so():
    """A step counter the loop keeps on the model (`m.t = i`) read by the step: each value
    needs a capture of its own, each costlier than the plain call; after a few calls in a
    row the step runs plainly, saying which value (it had captured at every call, silently,
    for 2 * max_captures calls)."""
    def run(jit):
        model = small()
        opt = optim.SGD(model.parameters(), lr=0.1)
        model.t = 0
        f = jit(_scaled_step(model, opt, lambda: min(1.0, (model.t + 1) / 3)))
        out = []
        for i in range(8):
            model.t = i
            out.append(f(*map(T, batch(i))))
        return out + model.parameters()
    both(run, warns=r"model\.t .*new at each of the last 3 calls")


class _Scaled(float):
    """A number with attributes of its own (a float subclass)."""


class _Config(dict):
    """`class Config(dict)` with attributes besides its items."""


def _state_holder(kind):
    """(read, change) of a loss scale kept in a value that is more than it looks."""
    import enum
    if kind == "float subclass attribute":
        value = _Scaled(2.0)
        value.mult = 1.0
        return lambda: value.mult, lambda: setattr(value, "mult", 0.25)
    if kind == "IntEnum member attribute":
        class Phase(enum.IntEnum):
            MAIN = 1
        Phase.MAIN.weight = 1.0
        return lambda: Phase.MAIN.weight, lambda: setattr(Phase.MAIN, "weight", 0.25)
    if kind == "dict subclass attribute":
        config = _Config(lr=0.1)
        config.scale = 1.0
        return lambda: config.scale, lambda: setattr(config, "scale", 0.25)
    if kind == "numpy record":
        table = np.zeros(1, dtype=[("scale", "f8")])
        table["scale"] = 1.0
        record = table[0]
        return lambda: float(record["scale"]), lambda: record.__setitem__("scale", 0.25)
    if kind == "property over dict.get":  # (the property runs no Python: scales.get(holder))
        scales = {}
        holder = type("Holder", (), {"scale": property(scales.get)})()
        scales[holder] = 1.0
        return lambda: holder.scale, lambda: scales.__setitem__(holder, 0.25)
    if kind == "dict values view":
        weights = {"a": 1.0}
        view = weights.values()
        return lambda: sum(view), lambda: weights.__setitem__("a", 0.25)
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["float subclass attribute", "IntEnum member attribute", "dict subclass attribute",
                                  "numpy record", "property over dict.get", "dict values view"])
def test_state_inside_values_that_look_plain_is_guarded(kind):
    """Attributes of a number's, an enum member's or a container subclass's own, a record
    of a structured array (a view), a dict read through a builtin property or a view:
    the walk had stopped at the value (replays kept the first scale)."""
    def run(jit):
        read, change = _state_holder(kind)
        return _scale_changed_at_call_5(jit, read, change)
    both(run, replays=3)


def test_the_decimal_context_is_a_guard():
    """Decimal arithmetic in the step reads this thread's context (C state)."""
    import decimal

    def run(jit):
        decimal.getcontext().prec = 28
        return _scale_changed_at_call_5(jit, lambda: float(decimal.Decimal(1) / decimal.Decimal(3)),
                                        lambda: setattr(decimal.getcontext(), "prec", 2))
    try:
        both(run, replays=3)
    finally:
        decimal.getcontext().prec = 28


def test_an_ordered_dicts_key_order_is_a_guard():
    """The order of an OrderedDict's keys (the order the step adds its loss terms in):
    guarded like a dict's (only a plain dict's had been)."""
    def run(jit):  # (in float32, 1 + 1e8 - 1e8 is 0 and 1e8 - 1e8 + 1 is 1)
        terms = collections.OrderedDict([("a", 1.0), ("b", 1e8), ("c", -1e8)])
        return _scale_changed_at_call_5(jit, lambda: 0.5 + _sum_in_order(terms), lambda: terms.move_to_end("a"))
    both(run, replays=3)


def _sum_in_order(terms) -> float:
    total = np.float32(0)
    for v in terms.values():
        total = np.float32(total + np.float32(v))
    return float(total)


def test_a_cached_function_hiding_a_host_read_is_followed_after_cache_clear(monkeypatch):
    """lru_cache over an os.environ read: a hit runs nothing the tracer sees; the cache's
    size is a guard, so after cache_clear() the next call captures, runs the function, and
    sees the read (runs plainly, saying so)."""
    import functools as ft
    import os
    monkeypatch.setenv("NEEDLE_TEST_SCALE", "1.0")

    def run(jit):
        @ft.lru_cache(maxsize=None)
        def scale():
            return float(os.environ["NEEDLE_TEST_SCALE"])

        def change():
            os.environ["NEEDLE_TEST_SCALE"] = "0.25"
            scale.cache_clear()
        os.environ["NEEDLE_TEST_SCALE"] = "1.0"
        return _scale_changed_at_call_5(jit, scale, change)
    both(run, warns=r"os\.environ")


class _Yield:
    def __init__(self, value):
        self.value = value

    def __await__(self):
        return (yield self.value)


def test_a_coroutine_the_step_advances_runs_plainly_and_says_so():
    """A schedule in a coroutine, advanced with send(): not an iterator (no __next__),
    and its position lives in its frame, which no guard reads."""
    def run(jit):
        async def schedule():
            scale = 1.0
            while True:
                await _Yield(scale)
                scale *= 0.5
        coro = schedule()
        model = small()
        opt = optim.SGD(model.parameters(), lr=0.1)
        f = jit(_scaled_step(model, opt, lambda: coro.send(None)))
        return [f(*map(T, batch(i))) for i in range(6)] + model.parameters()
    both(run, warns=r"reaches an iterator")


def test_a_pending_value_the_step_does_not_read_is_not_told():
    """An intermediate a module keeps (an attention's probabilities) has a gradient the
    warm-up call left pending; the step replaces it without reading it, so computing it
    first changes nothing: no notice (the Transformer's step had one)."""
    class Keeps(nn.Module):
        def __init__(self):
            super().__init__()
            np.random.seed(1)
            self.first, self.last, self.hidden = nn.Linear(6, 8), nn.Linear(8, 3), None

        def forward(self, x):
            self.hidden = ndl.ops.relu(self.first(x))
            return self.last(self.hidden)
    model = Keeps()
    opt = optim.SGD(model.parameters(), lr=0.1)
    f = ndl.jit(sgd_step(model, opt))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(5):
            f(*map(T, batch(i)))
    assert f.replays >= 2
    assert not [w for w in caught if "still pending" in str(w.message)], [str(w.message) for w in caught]


class _SlottedCycle:
    """An iterator class written in Python, with __slots__: its position is guarded."""
    __slots__ = ("values", "i")

    def __init__(self, values):
        self.values, self.i = values, 0

    def __iter__(self):
        return self

    def __next__(self):
        value = self.values[self.i % len(self.values)]
        self.i += 1
        return value


@pytest.mark.parametrize("kind", ["released memoryview", "closed mmap", "numpy memmap", "object array of arrays",
                                  "slotted Python iterator"])
def test_what_a_model_holds_never_breaks_a_capture(kind, tmp_path):
    """Objects a model may hold that the walk reads: a released memoryview or closed mmap
    (had raised at every call), a numpy memmap (had run plainly: its mmap taken for raw
    memory), an object array of arrays (its guard had raised), an iterator class with
    __slots__ (had run plainly: taken for a C iterator; it replays, its position guarded)."""
    import mmap

    def held():
        if kind == "released memoryview":
            view = memoryview(bytearray(8))
            view.release()
            return view
        if kind == "closed mmap":
            mapped = mmap.mmap(-1, 8)
            mapped.close()
            return mapped
        if kind == "numpy memmap":
            path = tmp_path / f"table-{len(list(tmp_path.iterdir()))}.bin"
            table = np.memmap(path, dtype=np.float32, mode="w+", shape=(100_000,))
            table[:] = 1.0
            return table
        if kind == "object array of arrays":
            table = np.empty(2, dtype=object)
            table[0], table[1] = np.ones(3), np.zeros(2)
            return table
        return _SlottedCycle([1.0, 0.5])

    def run(jit):
        model = small()
        model.extra = held()
        scale = (lambda: next(model.extra)) if kind == "slotted Python iterator" else (lambda: 1.0)
        opt = optim.SGD(model.parameters(), lr=0.1)
        f = jit(_scaled_step(model, opt, scale))
        return [f(*map(T, batch(i))) for i in range(6)] + model.parameters()
    both(run, warns=r"the step calls next\(\)") if kind == "slotted Python iterator" else both(run, replays=3)


class _Scale:
    """A hook-like object whose attribute the step reads."""

    def __init__(self, value):
        self.value = value


@pytest.mark.parametrize("kind", ["set member", "frozenset member", "dict key"])
def test_an_object_held_in_a_set_or_as_a_dict_key_is_walked(kind):
    """Objects in a set or used as dict keys: their attributes are guards, as a list
    member's are (replays had kept the first value)."""
    def run(jit):
        scale = _Scale(1.0)
        holder = {"set member": {scale}, "frozenset member": frozenset([scale]), "dict key": {scale: 1}}[kind]
        return _scale_changed_at_call_5(jit, lambda: sum(s.value for s in holder),
                                        lambda: setattr(scale, "value", 0.25))
    both(run, replays=3)


@pytest.mark.parametrize("where", ["attribute", "dict value", "numpy array"])
def test_a_zero_in_state_is_guarded_by_its_sign(where):
    """0.0 and -0.0 compare equal, but code may branch on the sign: a state zero that
    changes sign is a new guard value (arguments were keyed by it already)."""
    import math
    import types

    def run(jit):
        state = types.SimpleNamespace(shift=0.0)
        config = {"shift": 0.0}
        table = np.zeros(1)
        read = {"attribute": lambda: state.shift, "dict value": lambda: config["shift"],
                "numpy array": lambda: float(table[0])}[where]
        change = {"attribute": lambda: setattr(state, "shift", -0.0),
                  "dict value": lambda: config.__setitem__("shift", -0.0),
                  "numpy array": lambda: table.__setitem__(0, -0.0)}[where]
        return _scale_changed_at_call_5(jit, lambda: math.copysign(1.0, read()), change)
    both(run, replays=3)


def test_a_sets_iteration_order_is_a_guard():
    """A set refilled in place with the same members in another order: a step summing
    over it in iteration order rounds otherwise (in float64, 0.1 + 1e16 - 1e16 is 0 and
    1e16 - 1e16 + 0.1 is 0.1)."""
    def run(jit):
        terms = {0.1, 1e16, -1e16}

        def refill():
            members = list(terms)
            terms.clear()
            terms.update(members[::-1])
        return _scale_changed_at_call_5(jit, lambda: 1.0 + sum(terms), refill)
    both(run, replays=3)


def _labels_loop(jit, loss_of, labels):
    """A SGD step whose loss `loss_of(model, x, y)` reads numpy labels `y`, over `labels`."""
    model = small()
    opt = optim.SGD(model.parameters(), lr=0.1)

    def step(x, y):
        opt.reset_grad()
        loss = loss_of(model, x, y)
        loss.backward()
        opt.step()
        return loss
    f = jit(step)
    return [f(batch(i)[0], np.array(y)) for i, y in enumerate(labels)] + model.parameters()


def test_an_array_numpy_made_in_the_step_is_no_constant_beside_numpy_arguments():
    """`np.eye(3)[y]` (label smoothing from numpy labels) is computed by numpy in C, where
    needle cannot see; the first calls had the same labels and new images, so the check of
    the first replay with new numpy values passed and later labels were silently the
    capture's.  A Tensor made from an array numpy made in the step, beside numpy
    arguments, runs the step plainly, saying so."""
    def smoothed(model, x, y):
        target = np.eye(3, dtype=np.float32)[y] * 0.9 + 0.1 / 3
        return -(ndl.ops.logsoftmax(model(ndl.Tensor(x))) * ndl.Tensor(target)).sum() / 4
    labels = [[0, 1, 2, 0]] * 3 + [[2, 2, 1, 0], [1, 0, 0, 2]] * 3
    both(lambda jit: _labels_loop(jit, smoothed, labels), warns=r"may have been computed from the numpy arguments")


def test_a_shape_numpy_computes_from_a_numpy_argument_is_a_guard():
    """x[y == 0], np.unique(y): the result's shape is the labels' doing.  A Tensor made
    from it of another shape than at capture makes the call capture again (its kernels
    would have read the captured length), and so does a shape the step's code reads
    (len(np.unique(y)) as a number)."""
    labels = [[0, 1, 2, 0]] * 4 + [[0, 0, 0, 2], [0, 1, 0, 0]] * 3
    both(lambda jit: _labels_loop(jit, lambda model, x, y: model(ndl.Tensor(x[y == 0])).sum() * len(np.unique(y)),
                                  labels), replays=3)


def test_a_value_numpy_computes_in_c_from_an_argument_is_checked_at_later_changes_too():
    """float(TABLE[y].sum()): numpy indexes another array with the labels in C, where
    needle cannot see.  The labels' first change maps alike (classes 0 and 1 weigh the
    same), so the check of that change passes; the next change is checked too (each
    argument's first three changes are), and the difference is found."""
    table = np.array([1.0, 1.0, 2.0])
    targets = T([0, 1, 2, 0])
    labels = [[0, 1, 2, 0]] * 3 + [[1, 0, 2, 1]] + [[2, 2, 2, 0]] * 4
    both(lambda jit: _labels_loop(jit, lambda model, x, y: nn.SoftmaxLoss()(model(ndl.Tensor(x)), targets)
                                  * float(table[y].sum()), labels), warns=r"differed from a plain call")
