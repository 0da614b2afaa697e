"""Realistic whole training scripts, each run plainly and through needle.jit (round 3)."""
import os, math, tempfile, functools
import numpy as np

import harness as H
import needle as ndl
import needle.nn as nn
from needle import init, ops
from mlp_resnet import MLPResNet  # examples/
from models import ResNet9, LanguageModel  # examples/

LOOPS = {}


def loop(fn):
    LOOPS[fn.__name__] = fn
    return fn


def T(a, dtype="float32"):
    return ndl.Tensor(np.asarray(a), dtype=dtype, requires_grad=False)


def classif_data(n=30, d=20, k=10, seed=0):
    rs = np.random.RandomState(seed)
    return rs.rand(n, d).astype("float32"), rs.randint(0, k, n).astype("uint8")


def detach_h(h):
    if h is None:
        return None
    if isinstance(h, (tuple, list)):
        return tuple(x.detach() for x in h)
    return h.detach()


def corpus_ids(n=70, vocab=12, seed=1):
    return list(np.random.RandomState(seed).randint(0, vocab, n))


# ------------------------------------------------------------------------------------------
# 1. The course's hw2 MLPResNet with the course's epoch, the step jitted
@loop
def mlp_resnet_course_epoch(o):
    np.random.seed(0)
    X, y = classif_data(30, 20)
    train = ndl.data.DataLoader(ndl.data.NDArrayDataset(X, y), batch_size=8, shuffle=True)
    test = ndl.data.DataLoader(ndl.data.NDArrayDataset(X[:13], y[:13]), batch_size=5)
    model = MLPResNet(20, hidden_dim=16, num_blocks=2, num_classes=10)
    opt = ndl.optim.Adam(model.parameters(), lr=0.01, weight_decay=0.001)
    loss_fn = nn.SoftmaxLoss()

    def train_step(X, y):
        logits = model(X)
        loss = loss_fn(logits, y)
        opt.reset_grad()
        loss.backward()
        opt.step()
        return logits, loss

    def eval_step(X, y):
        logits = model(X)
        return logits, loss_fn(logits, y)

    train_step = H.J(train_step)
    eval_step = H.J(eval_step)

    def epoch(loader, training):
        np.random.seed(4)
        model.train() if training else model.eval()
        errors, losses = 0, []
        for Xb, yb in loader:
            if len(Xb.shape) != 2:
                Xb = Xb.reshape((Xb.shape[0], -1))
            logits, loss = (train_step if training else eval_step)(Xb, yb)
            errors += int((logits.numpy().argmax(axis=1) != yb.numpy()).sum())
            losses.append(float(loss.numpy()))
        return errors / len(loader.dataset), float(np.mean(losses)), losses

    o["hist"] = [epoch(train, True) for _ in range(3)] + [epoch(test, False)]
    o.model("model", model)
    o.opt("opt", opt)


# 2. train_mnist-style driver; one jitted run_batch for train and eval (opt or None)
@loop
def mlp_resnet_run_batch_train_and_eval(o):
    np.random.seed(4)
    X, y = classif_data(26, 20, seed=3)
    Xt, yt = classif_data(9, 20, seed=4)
    train_loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X, y), 6, shuffle=True)
    test_loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(Xt, yt), 4)
    model = MLPResNet(20, hidden_dim=12, num_blocks=1, num_classes=10, drop_prob=0.2)
    loss_fn = nn.SoftmaxLoss()

    def run_batch(X, y, opt=None):
        logits = model(X)
        loss = loss_fn(logits, y)
        if opt is not None:
            opt.reset_grad()
            loss.backward()
            opt.step()
        return logits, loss

    run_batch = H.J(run_batch)

    def epoch(loader, opt=None):
        np.random.seed(4)
        model.train() if opt is not None else model.eval()
        errs, losses = 0, []
        for Xb, yb in loader:
            logits, loss = run_batch(Xb, yb, opt) if opt is not None else run_batch(Xb, yb)
            errs += int((logits.numpy().argmax(1) != yb.numpy()).sum())
            losses.append(float(loss.numpy()))
        return errs / len(loader.dataset), float(np.mean(losses)), losses

    opt = ndl.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=0.001)
    hist = []
    for _ in range(3):
        hist.append(epoch(train_loader, opt))
        hist.append(epoch(test_loader))
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)


# 3. ResNet9 on a fake CIFAR-10 folder (the course's CIFAR10Dataset with transforms)
def fake_cifar(root, per_batch=2):
    import pickle
    rs = np.random.RandomState(7)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        with open(os.path.join(root, name), "wb") as f:
            pickle.dump({b"data": rs.randint(0, 256, (per_batch, 3072)).astype(np.uint8),
                         b"labels": list(rs.randint(0, 10, per_batch))}, f)


@loop
def resnet9_cifar_course_loop(o):
    root = tempfile.mkdtemp()
    fake_cifar(root, per_batch=1)  # 5 train images, 1 test image
    np.random.seed(0)
    train_set = ndl.data.CIFAR10Dataset(root, train=True, transforms=[ndl.data.RandomFlipHorizontal(),
                                                                      ndl.data.RandomCrop(4)])
    test_set = ndl.data.CIFAR10Dataset(root, train=False)
    train_loader = ndl.data.DataLoader(train_set, batch_size=2, shuffle=True)  # 2, 2, 1
    test_loader = ndl.data.DataLoader(test_set, batch_size=2)
    model = ResNet9()
    opt = ndl.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-3)
    loss_fn = nn.SoftmaxLoss()

    @functools.wraps(lambda X, y: None)
    def step(X, y):
        opt.reset_grad()
        out = model(X)
        loss = loss_fn(out, y)
        loss.backward()
        opt.step()
        return out, loss

    step = H.J(step, "train")
    evaluate = H.J(lambda X, y: (lambda out: (out, loss_fn(out, y)))(model(X)), "eval")
    hist = []
    for ep in range(2):
        np.random.seed(4 + ep)
        model.train()
        correct, total = 0, 0.0
        for i, (X, y) in enumerate(train_loader):
            if ep == 0 and i == 2:
                break  # the first epoch: 2 steps only
            out, loss = step(X, y)
            correct += int(np.sum(out.numpy().argmax(1) == y.numpy()))
            total += float(loss.numpy()) * y.shape[0]
            hist.append(float(loss.numpy()))
        model.eval()
        for X, y in test_loader:
            out, loss = evaluate(X, y)
            hist.append((out.numpy().argmax(1).tolist(), float(loss.numpy())))
        hist.append((correct, total))
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)


# 4. LanguageModel(rnn) with batchify/get_batch, hidden carried and detached, clip in step
@loop
def lm_rnn_ptb_clip_inside(o):
    np.random.seed(0)
    data = ndl.data.batchify(corpus_ids(70, 12), 3, dtype="float32")  # 23 x 3
    test = ndl.data.batchify(corpus_ids(30, 12, seed=9), 3, dtype="float32")
    model = LanguageModel(8, 12, 10, num_layers=2, seq_model="rnn", seq_len=4)
    opt = ndl.optim.SGD(model.parameters(), lr=4.0)
    loss_fn = nn.SoftmaxLoss()

    def train_step(X, y, h):
        opt.reset_grad()
        out, h = model(X, h)
        loss = loss_fn(out, y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        opt.step()
        return out, loss, h

    def eval_step(X, y, h):
        with ndl.no_grad():
            out, h = model(X, h)
            return out, loss_fn(out, y), h

    train_step, eval_step = H.J(train_step), H.J(eval_step)
    hist = []
    for ep in range(2):
        np.random.seed(4)
        model.train()
        h = None
        for i in range(0, data.shape[0] - 1, 4):
            X, y = ndl.data.get_batch(data, i, 4)
            out, loss, h = train_step(X, y, h)
            h = detach_h(h)
            hist.append((float(loss.numpy()), int((out.numpy().argmax(1) == y.numpy()).sum())))
        model.eval()
        h = None
        for i in range(0, test.shape[0] - 1, 4):
            X, y = ndl.data.get_batch(test, i, 4)
            out, loss, h = eval_step(X, y, h)
            hist.append(float(loss.numpy()))
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)


# 5. LSTM LM with the course's numpy clip (reads p.grad.numpy()) inside the step
def course_clip(params, max_norm):
    grads = [p for p in params if p.grad is not None]
    total = float(np.sqrt(sum(float(np.sum(p.grad.numpy().astype(np.float64) ** 2)) for p in grads)))
    scale = max_norm / (total + 1e-6)
    if scale < 1:
        for p in grads:
            p.grad = (p.grad * scale).detach()


@loop
def lm_lstm_course_numpy_clip(o):
    np.random.seed(0)
    data = ndl.data.batchify(corpus_ids(60, 10), 2, dtype="float32")
    model = LanguageModel(6, 10, 8, num_layers=1, seq_model="lstm")
    opt = ndl.optim.SGD(model.parameters(), lr=2.0)
    loss_fn = nn.SoftmaxLoss()

    def train_step(X, y, h):
        opt.reset_grad()
        out, h = model(X, h)
        h = detach_h(h)
        loss = loss_fn(out, y)
        loss.backward()
        course_clip(model.parameters(), 0.5)
        opt.step()
        return out, loss, h

    train_step = H.J(train_step)
    hist = []
    for ep in range(2):
        h = None
        for i in range(0, data.shape[0] - 1, 5):
            X, y = ndl.data.get_batch(data, i, 5)
            out, loss, h = train_step(X, y, h)
            hist.append(float(loss.numpy()))
    o["hist"] = hist
    o.model("model", model)


# 6. Transformer LM with Adam, clip, short last chunk, evaluation jitted too
@loop
def lm_transformer_adam(o):
    np.random.seed(0)
    data = ndl.data.batchify(corpus_ids(50, 11), 2, dtype="float32")  # 25 x 2
    model = LanguageModel(16, 11, 16, num_layers=1, seq_model="transformer", seq_len=5)
    opt = ndl.optim.Adam(model.parameters(), lr=0.003)
    loss_fn = nn.SoftmaxLoss()

    def train_step(X, y):
        opt.reset_grad()
        out, _ = model(X)
        loss = loss_fn(out, y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return out, loss

    train_step = H.J(train_step)
    evaluate = H.J(lambda X, y: loss_fn(model(X)[0], y))
    hist = []
    for ep in range(2):
        model.train()
        for i in range(0, data.shape[0] - 1, 5):
            X, y = ndl.data.get_batch(data, i, 5)
            out, loss = train_step(X, y)
            hist.append(float(loss.numpy()))
        model.eval()
        X, y = ndl.data.get_batch(data, 0, 5)
        hist.append(float(evaluate(X, y).numpy()))
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)


# 7. A Trainer class keeping the LSTM state in self.h, detached inside the jitted method
@loop
def lm_trainer_class_hidden_attribute(o):
    np.random.seed(0)

    class Trainer:
        def __init__(self, model, opt):
            self.model, self.opt, self.loss_fn = model, opt, nn.SoftmaxLoss()
            self.h = None
            self.step = H.J(self._step)

        def _step(self, X, y):
            self.opt.reset_grad()
            out, h = self.model(X, self.h)
            self.h = detach_h(h)
            loss = self.loss_fn(out, y)
            loss.backward()
            nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.opt.step()
            return loss

        def fit_epoch(self, data, bptt):
            self.h = None
            self.model.train()
            losses = []
            for i in range(0, data.shape[0] - 1, bptt):
                X, y = ndl.data.get_batch(data, i, bptt)
                losses.append(float(self.step(X, y).numpy()))
            return losses

    data = ndl.data.batchify(corpus_ids(64, 9), 4, dtype="float32")  # 16 x 4
    model = LanguageModel(6, 9, 7, num_layers=2, seq_model="lstm")
    tr = Trainer(model, ndl.optim.Adam(model.parameters(), lr=0.01))
    o["hist"] = [tr.fit_epoch(data, 4) for _ in range(3)]
    o["h"] = tr.h
    o.model("model", model)
    o.opt("opt", tr.opt)


# 8. PyTorch-style Dataset (one sample per index, dict samples, noise augmentation)
@loop
def pytorch_style_dataset_dict_batches(o):
    np.random.seed(0)

    class NoisyDataset(ndl.data.Dataset):
        def __init__(self, n):
            super().__init__()
            rs = np.random.RandomState(5)
            self.x = rs.randn(n, 6).astype("float32")
            self.y = (self.x.sum(1) > 0).astype("int64")

        def __len__(self):
            return len(self.x)

        def __getitem__(self, i):
            if not isinstance(i, (int, np.integer)):
                raise TypeError("one index at a time")
            return {"x": self.x[i] + 0.1 * np.random.randn(6).astype("float32"), "y": self.y[i]}

    loader = ndl.data.DataLoader(NoisyDataset(11), batch_size=4, shuffle=True)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 2))
    opt = ndl.optim.Adam(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()

    def train_step(batch):
        opt.zero_grad()
        logits = model(batch["x"])
        loss = loss_fn(logits, batch["y"])
        loss.backward()
        opt.step()
        return loss

    train_step = H.J(train_step)
    hist = []
    for ep in range(3):
        for batch in loader:
            hist.append(train_step(batch).item())
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)


# 9. train + eval jitted, eval under no_grad inside, early stopping with best weights
@loop
def early_stopping_best_state_dict(o):
    np.random.seed(1)
    X, y = classif_data(24, 10, 4, seed=11)
    Xv, yv = classif_data(8, 10, 4, seed=12)
    model = nn.Sequential(nn.Linear(10, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 4))
    opt = ndl.optim.Adam(model.parameters(), lr=0.05)
    loss_fn = nn.SoftmaxLoss()

    def train_step(X, y):
        opt.reset_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        opt.step()
        return loss

    def eval_step(X, y):
        with ndl.no_grad():
            logits = model(X)
            return logits, loss_fn(logits, y)

    train_step, eval_step = H.J(train_step), H.J(eval_step)
    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X, y), 8, shuffle=True)
    best, best_state, bad, hist = float("inf"), None, 0, []
    for ep in range(12):
        model.train()
        for Xb, yb in loader:
            hist.append(float(train_step(Xb, yb).numpy()))
        model.eval()
        logits, vloss = eval_step(T(Xv), T(yv))
        acc = float((logits.numpy().argmax(1) == yv).mean())
        v = float(vloss.numpy())
        hist.append((v, acc))
        if v < best - 1e-4:
            best, best_state, bad = v, model.state_dict(), 0
        else:
            bad += 1
            if bad >= 2:
                break
    o["stopped_at"] = ep
    model.load_state_dict(best_state)
    model.eval()
    logits, vloss = eval_step(T(Xv), T(yv))
    hist.append(float(vloss.numpy()))
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)


# 10. checkpoint: needle.save mid-training, train on, then roll back with load_state_dict
@loop
def checkpoint_save_train_rollback(o):
    np.random.seed(2)
    X, y = classif_data(20, 8, 3, seed=21)
    path = os.path.join(tempfile.mkdtemp(), "ckpt.npz")
    model = nn.Sequential(nn.Linear(8, 12), nn.ReLU(), nn.Linear(12, 3))
    opt = ndl.optim.Adam(model.parameters(), lr=0.02, weight_decay=1e-4)
    loss_fn = nn.SoftmaxLoss()

    def step(X, y):
        opt.reset_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        opt.step()
        return loss

    step = H.J(step)
    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X, y), 6, shuffle=True)
    hist = []
    for ep in range(6):
        for Xb, yb in loader:
            hist.append(float(step(Xb, yb).numpy()))
        if ep == 1:
            ndl.save({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": ep}, path)
        if ep == 3:
            ck = ndl.load(path)
            model.load_state_dict(ck["model"])
            opt.load_state_dict(ck["opt"])
            hist.append(("rolled back to", int(ck["epoch"]), opt.t))
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)


# 11. resume into a fresh model/optimizer (closure variables rebound), same jitted step
@loop
def resume_fresh_model_closure_rebound(o):
    np.random.seed(3)
    X, y = classif_data(16, 8, 3, seed=31)
    path = os.path.join(tempfile.mkdtemp(), "ckpt.npz")
    loss_fn = nn.SoftmaxLoss()

    def build():
        m = nn.Sequential(nn.Linear(8, 10), nn.LayerNorm1d(10), nn.ReLU(), nn.Linear(10, 3))
        return m, ndl.optim.RMSprop(m.parameters(), lr=0.01, momentum=0.5)

    model, opt = build()

    def step(X, y):
        opt.reset_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        opt.step()
        return loss

    step = H.J(step)
    hist = []
    for it in range(5):
        hist.append(float(step(T(X[it % 4 * 4:][:4]), T(y[it % 4 * 4:][:4])).numpy()))
    ndl.save({"model": model.state_dict(), "opt": opt.state_dict()}, path)
    # "the job died": a new model and optimizer, loaded from the checkpoint
    model, opt = build()
    ck = ndl.load(path)
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["opt"])
    for it in range(5, 10):
        hist.append(float(step(T(X[it % 4 * 4:][:4]), T(y[it % 4 * 4:][:4])).numpy()))
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)


# 12. learning-rate warmup then cosine decay, written by hand, set before each call
@loop
def manual_warmup_cosine_lr_outside(o):
    np.random.seed(4)
    X, y = classif_data(24, 12, 5, seed=41)
    model = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 5))
    opt = ndl.optim.Adam(model.parameters(), lr=0.0)
    loss_fn = nn.SoftmaxLoss()

    def step(X, y):
        opt.reset_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        opt.step()
        return loss

    step = H.J(step)
    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X, y), 5, shuffle=True)  # 5x4 + 4
    total, warm, it, hist = 4 * len(loader), 4, 0, []
    for ep in range(4):
        for Xb, yb in loader:
            if it < warm:
                lr = 0.01 * (it + 1) / warm
            else:
                lr = 0.005 * (1 + math.cos(math.pi * (it - warm) / (total - warm)))
            opt.param_groups[0]["lr"] = lr
            hist.append((lr, float(step(Xb, yb).numpy())))
            it += 1
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)


# 13. CosineAnnealingLR stepped per batch inside the step (SGD momentum); last_lr logged
@loop
def cosine_scheduler_inside_step(o):
    np.random.seed(5)
    X, y = classif_data(22, 10, 4, seed=51)
    model = nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 4))
    opt = ndl.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X, y), 6, shuffle=True)  # 6,6,6,4
    sched = ndl.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=3 * len(loader), eta_min=1e-3)
    loss_fn = nn.SoftmaxLoss()

    def step(X, y):
        opt.reset_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        opt.step()
        sched.step()
        return loss

    step = H.J(step)
    hist = []
    for ep in range(3):
        for Xb, yb in loader:
            loss = step(Xb, yb)
            hist.append((float(loss.numpy()), sched.get_last_lr()[0], opt.lr, sched.last_epoch))
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)
    o["sched"] = sched.state_dict()


# 14. LambdaLR warmup stepped outside after each call (RMSprop), get_last_lr logged
@loop
def lambdalr_warmup_outside_rmsprop(o):
    np.random.seed(6)
    X, y = classif_data(20, 10, 4, seed=61)
    model = nn.Sequential(nn.Linear(10, 12), nn.ReLU(), nn.Linear(12, 4))
    opt = ndl.optim.RMSprop(model.parameters(), lr=0.01, alpha=0.9)
    sched = ndl.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 5) * 0.95 ** s)
    loss_fn = nn.SoftmaxLoss()

    @H.J
    def step(X, y):
        opt.reset_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        opt.step()
        return loss

    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X, y), 7, shuffle=True)  # 7,7,6
    hist = []
    for ep in range(4):
        for Xb, yb in loader:
            hist.append(float(step(Xb, yb).numpy()))
            sched.step()
            hist.append(sched.get_last_lr()[0])
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)


# 15. gradient accumulation over K micro-batches, accumulators in a dict, step called K times
@loop
def grad_accumulation_dict_of_accumulators(o):
    np.random.seed(7)
    X, y = classif_data(24, 8, 3, seed=71)
    model = nn.Sequential(nn.Linear(8, 10), nn.ReLU(), nn.Linear(10, 3))
    params = model.parameters()
    opt = ndl.optim.SGD(params, lr=0.1, momentum=0.9)
    loss_fn = nn.SoftmaxLoss()
    K = 3
    acc = {}

    def micro_step(X, y, apply):
        loss = loss_fn(model(X), y) / K
        loss.backward()
        for i, p in enumerate(params):
            acc[i] = p.grad.detach() if i not in acc else (acc[i] + p.grad).detach()
        if apply:
            for i, p in enumerate(params):
                p.grad = acc[i]
            opt.step()
            acc.clear()
            opt.reset_grad()
        return loss

    micro_step = H.J(micro_step)
    hist = []
    for ep in range(3):
        for k in range(6):
            Xb, yb = T(X[k * 4:(k + 1) * 4]), T(y[k * 4:(k + 1) * 4])
            hist.append(float(micro_step(Xb, yb, (k + 1) % K == 0).numpy()))
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)


# 16. gradient accumulation with accumulators on the parameters themselves (p.acc)
@loop
def grad_accumulation_on_param_attributes(o):
    np.random.seed(8)
    X, y = classif_data(32, 8, 3, seed=81)
    model = nn.Sequential(nn.Linear(8, 10), nn.ReLU(), nn.Linear(10, 3))
    opt = ndl.optim.Adam(model.parameters(), lr=0.01)
    loss_fn = nn.SoftmaxLoss()
    for p in model.parameters():
        p.acc = None

    def train_step(X, y, last_micro_batch):
        loss = loss_fn(model(X), y)
        loss.backward()
        for p in model.parameters():
            p.acc = p.grad.detach() if p.acc is None else (p.acc + p.grad).detach()
        if last_micro_batch:
            for p in model.parameters():
                p.grad = p.acc * 0.5
                p.acc = None
            opt.step()
        return loss

    train_step = H.J(train_step)
    hist = []
    for ep in range(4):
        for k in range(4):
            hist.append(float(train_step(T(X[k * 8:k * 8 + 8]), T(y[k * 8:k * 8 + 8]), k % 2 == 1).numpy()))
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)


# 17. freeze the backbone for the first epoch, then unfreeze (requires_grad flips)
@loop
def freeze_backbone_then_unfreeze(o):
    np.random.seed(9)
    X, y = classif_data(20, 10, 4, seed=91)
    backbone = nn.Sequential(nn.Linear(10, 12), nn.BatchNorm1d(12), nn.ReLU())
    head = nn.Linear(12, 4)
    model = nn.Sequential(backbone, head)
    opt = ndl.optim.Adam(model.parameters(), lr=0.01, weight_decay=1e-4)
    loss_fn = nn.SoftmaxLoss()

    def step(X, y):
        opt.reset_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        opt.step()
        return loss

    step = H.J(step)
    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X, y), 6, shuffle=True)
    hist = []
    for ep in range(4):
        frozen = ep == 0
        for p in backbone.parameters():
            p.requires_grad = not frozen
        for Xb, yb in loader:
            hist.append(float(step(Xb, yb).numpy()))
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)


# 18. a model whose forward takes an optional mask (padding), sometimes None
@loop
def optional_mask_forward(o):
    np.random.seed(10)

    class MaskedPool(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Linear(5, 8)
            self.out = nn.Linear(8, 2)

        def forward(self, x, mask=None):  # x (B, L, 5), mask (B, L) 1 = real token
            B, L, _ = x.shape
            h = ops.relu(self.emb(x.reshape((B * L, 5)))).reshape((B, L, 8))
            if mask is not None:
                h = h * mask.reshape((B, L, 1)).broadcast_to((B, L, 8))
                pooled = h.sum((1,)) / mask.sum((1,)).reshape((B, 1)).broadcast_to((B, 8))
            else:
                pooled = h.sum((1,)) / L
            return self.out(pooled)

    model = MaskedPool()
    opt = ndl.optim.Adam(model.parameters(), lr=0.01)
    loss_fn = nn.SoftmaxLoss()

    def step(x, y, mask=None):
        opt.reset_grad()
        loss = loss_fn(model(x, mask), y)
        loss.backward()
        opt.step()
        return loss

    step = H.J(step)
    rs = np.random.RandomState(3)
    hist = []
    for it in range(12):
        x = rs.randn(4, 6, 5).astype("float32")
        y = rs.randint(0, 2, 4)
        if it % 3 == 0:
            hist.append(float(step(T(x), T(y)).numpy()))
        else:
            lengths = rs.randint(2, 7, 4)
            mask = (np.arange(6)[None, :] < lengths[:, None]).astype("float32")
            hist.append(float(step(T(x), T(y), mask=T(mask)).numpy()))
    o["hist"] = hist
    o.model("model", model)


# 19. a Trainer with callbacks that only touch tensors (grad clip, EMA of the weights)
@loop
def trainer_callbacks_tensor_only(o):
    np.random.seed(11)

    class Callback:
        def on_after_backward(self, trainer): pass
        def on_step_end(self, trainer): pass

    class ClipGrad(Callback):
        def __init__(self, max_norm): self.max_norm = max_norm
        def on_after_backward(self, trainer):
            nn.utils.clip_grad_norm_(trainer.model.parameters(), self.max_norm)

    class EMA(Callback):
        def __init__(self, model, decay):
            self.decay = decay
            self.shadow = [p.detach() for p in model.parameters()]
        def on_step_end(self, trainer):
            for s, p in zip(self.shadow, trainer.model.parameters()):
                s.data = s.data * self.decay + p.data * (1 - self.decay)

    class Trainer:
        def __init__(self, model, opt, callbacks):
            self.model, self.opt, self.callbacks = model, opt, callbacks
            self.loss_fn = nn.SoftmaxLoss()
            self.train_step = H.J(self._train_step)

        def _train_step(self, X, y):
            self.opt.reset_grad()
            logits = self.model(X)
            loss = self.loss_fn(logits, y)
            loss.backward()
            for cb in self.callbacks:
                cb.on_after_backward(self)
            self.opt.step()
            for cb in self.callbacks:
                cb.on_step_end(self)
            return logits, loss

    X, y = classif_data(20, 8, 3, seed=111)
    model = nn.Sequential(nn.Linear(8, 12), nn.ReLU(), nn.Dropout(0.1), nn.Linear(12, 3))
    ema = EMA(model, 0.9)
    tr = Trainer(model, ndl.optim.SGD(model.parameters(), lr=0.2, momentum=0.5), [ClipGrad(0.5), ema])
    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X, y), 6, shuffle=True)
    hist = []
    for ep in range(4):
        if ep == 2:
            ema.decay = 0.99  # the user tightens the EMA halfway
        for Xb, yb in loader:
            logits, loss = tr.train_step(Xb, yb)
            hist.append((float(loss.numpy()), int((logits.numpy().argmax(1) == yb.numpy()).sum())))
    o["hist"] = hist
    o["shadow"] = ema.shadow
    o.model("model", model)
    o.opt("opt", tr.opt)


# 20. Trainer callbacks with host effects: a loss history list and a step counter
@loop
def trainer_callbacks_history_and_counter(o):
    np.random.seed(12)

    class History:
        def __init__(self): self.losses, self.steps = [], 0
        def on_step_end(self, trainer, loss):
            self.losses.append(loss.detach())
            self.steps += 1

    class Trainer:
        def __init__(self, model, opt, callbacks):
            self.model, self.opt, self.callbacks = model, opt, callbacks
            self.loss_fn = nn.SoftmaxLoss()

        def train_step(self, X, y):
            self.opt.reset_grad()
            loss = self.loss_fn(self.model(X), y)
            loss.backward()
            self.opt.step()
            for cb in self.callbacks:
                cb.on_step_end(self, loss)
            return loss

    X, y = classif_data(18, 8, 3, seed=121)
    model = nn.Sequential(nn.Linear(8, 10), nn.ReLU(), nn.Linear(10, 3))
    hist_cb = History()
    tr = Trainer(model, ndl.optim.Adam(model.parameters(), lr=0.01), [hist_cb])
    step = H.J(tr.train_step)
    for ep in range(3):
        for k in range(3):
            step(T(X[k * 6:k * 6 + 6]), T(y[k * 6:k * 6 + 6]))
    o["losses"] = hist_cb.losses
    o["steps"] = hist_cb.steps
    o.model("model", model)


# 21. Adam: weight decay switched on after 2 epochs, betas and eps changed via param_groups
@loop
def adam_hparams_changed_midrun(o):
    np.random.seed(13)
    X, y = classif_data(18, 8, 3, seed=131)
    model = nn.Sequential(nn.Linear(8, 10), nn.ReLU(), nn.Linear(10, 3))
    opt = ndl.optim.Adam(model.parameters(), lr=0.01)
    loss_fn = nn.SoftmaxLoss()

    def step(X, y):
        opt.reset_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        opt.step()
        return loss

    step = H.J(step)
    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X, y), 6, shuffle=True)
    hist = []
    for ep in range(6):
        if ep == 2:
            opt.param_groups[0]["weight_decay"] = 1e-3
        if ep == 3:
            opt.param_groups[0]["betas"] = (0.8, 0.99)
        if ep == 4:
            opt.eps = 1e-6
            opt.weight_decay = 5e-3
        for Xb, yb in loader:
            hist.append(float(step(Xb, yb).numpy()))
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)


# 22. SGD: momentum turned on after an epoch, weight decay ramped each epoch
@loop
def sgd_momentum_and_wd_schedule(o):
    np.random.seed(14)
    X, y = classif_data(18, 8, 3, seed=141)
    model = nn.Sequential(nn.Linear(8, 10), nn.BatchNorm1d(10), nn.ReLU(), nn.Linear(10, 3))
    opt = ndl.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.SoftmaxLoss()

    def step(X, y):
        opt.reset_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        opt.step()
        return loss

    step = H.J(step)
    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X, y), 5, shuffle=True)
    hist = []
    for ep in range(5):
        opt.momentum = 0.0 if ep == 0 else 0.9
        opt.weight_decay = 1e-4 * ep
        for Xb, yb in loader:
            hist.append(float(step(Xb, yb).numpy()))
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)


# 23. data-parallel style in a one-process world: DistributedSampler + average_gradients
@loop
def distributed_one_process_world(o):
    import needle.distributed as dist
    np.random.seed(15)
    dist.init()
    X, y = classif_data(21, 8, 3, seed=151)
    ds = ndl.data.NDArrayDataset(X, y)
    sampler = ndl.data.DistributedSampler(ds, shuffle=True, seed=3)
    loader = ndl.data.DataLoader(ds, 5, sampler=sampler)
    model = nn.Sequential(nn.Linear(8, 10), nn.ReLU(), nn.Linear(10, 3))
    dist.broadcast_parameters(model)
    opt = ndl.optim.Adam(model.parameters(), lr=0.01)
    loss_fn = nn.SoftmaxLoss()

    def step(X, y):
        opt.reset_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        dist.average_gradients(model.parameters())
        opt.step()
        return dist.all_reduce(loss.detach(), "mean")

    step = H.J(step)
    hist = []
    for ep in range(3):
        sampler.set_epoch(ep)
        for Xb, yb in loader:
            hist.append(float(step(Xb, yb).numpy()))
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)


# 24. PyTorch habits: zero_grad outside, manual p.grad = None inside, loss.item() after
@loop
def pytorch_habits_zero_grad_item(o):
    np.random.seed(16)
    X, y = classif_data(20, 8, 3, seed=161)
    model = nn.Sequential(nn.Linear(8, 10), nn.ReLU(), nn.Linear(10, 3))
    criterion = nn.CrossEntropyLoss()
    optimizer = ndl.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def train_one_batch(inputs, targets):
        for p in model.parameters():
            p.grad = None
        outputs = model(inputs)
        loss = criterion(outputs, targets)
        loss.backward()
        optimizer.step()
        return outputs, loss

    train_one_batch = H.J(train_one_batch)
    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X, y), 6, shuffle=True)
    hist = []
    for epoch in range(4):
        running_loss, correct, total = 0.0, 0, 0
        for inputs, targets in loader:
            optimizer.zero_grad()
            outputs, loss = train_one_batch(inputs, targets)
            running_loss += loss.item()
            predicted = outputs.numpy().argmax(1)
            total += targets.shape[0]
            correct += int((predicted == targets.numpy()).sum())
        hist.append((running_loss, correct, total))
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", optimizer)


# 25. parameter edits between calls under no_grad: max-norm constraint, periodic shrink
@loop
def no_grad_param_edits_between_calls(o):
    np.random.seed(17)
    X, y = classif_data(20, 8, 3, seed=171)
    model = nn.Sequential(nn.Linear(8, 10), nn.ReLU(), nn.Linear(10, 3))
    opt = ndl.optim.Adam(model.parameters(), lr=0.05)
    loss_fn = nn.SoftmaxLoss()

    def step(X, y):
        opt.reset_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        opt.step()
        return loss

    step = H.J(step)
    hist = []
    for it in range(14):
        k = it % 4
        hist.append(float(step(T(X[k * 5:k * 5 + 5]), T(y[k * 5:k * 5 + 5])).numpy()))
        with ndl.no_grad():
            w = model[0].weight
            norms = (w * w).sum((0,)) ** 0.5  # column norms
            scale = 1.0 / ((norms - 1.0).relu() + 1.0)  # min(1, 1 / norm) for norm > 1
            w.data = w.data * scale.reshape((1, 10)).broadcast_to(w.shape)
            if it % 5 == 4:
                for p in model.parameters():
                    p.data *= 0.5
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)


# 26. the step jitted before the optimizer exists; the same function re-jitted each epoch
@loop
def optimizer_after_jit_and_rejit_each_epoch(o):
    np.random.seed(18)
    X, y = classif_data(15, 8, 3, seed=181)
    model = nn.Sequential(nn.Linear(8, 10), nn.ReLU(), nn.Linear(10, 3))
    loss_fn = nn.SoftmaxLoss()
    opt = None

    def train_step(X, y):
        opt.reset_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        opt.step()
        return loss

    step = H.J(train_step)
    opt = ndl.optim.Adam(model.parameters(), lr=0.02)
    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X, y), 4, shuffle=True)
    hist = []
    for ep in range(4):
        for Xb, yb in loader:
            hist.append(float(step(Xb, yb).numpy()))
        step = H.J(train_step, f"rejit{ep}")  # "fresh jit per epoch"
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)


# 27. model.forward jitted for evaluation while the train step is jitted too
@loop
def jit_model_forward_for_eval_while_training(o):
    np.random.seed(19)
    X, y = classif_data(20, 8, 3, seed=191)
    model = nn.Sequential(nn.Linear(8, 12), nn.BatchNorm1d(12), nn.ReLU(), nn.Dropout(0.3), nn.Linear(12, 3))
    opt = ndl.optim.Adam(model.parameters(), lr=0.02)
    loss_fn = nn.SoftmaxLoss()
    predict = H.J(model.forward, "predict")

    def train_step(X, y):
        opt.reset_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        opt.step()
        return loss

    train_step = H.J(train_step)
    Xv = T(X[:6])
    hist = []
    for ep in range(5):
        model.train()
        for k in range(4):
            hist.append(float(train_step(T(X[k * 5:k * 5 + 5]), T(y[k * 5:k * 5 + 5])).numpy()))
        model.eval()
        with ndl.no_grad():
            hist.append(predict(Xv).numpy().argmax(1).tolist())
            hist.append(predict(Xv).numpy().sum())
    o["hist"] = hist
    o.model("model", model)


# 28. VAE with the reparameterization noise drawn inside the step (init.randn)
@loop
def vae_reparameterization_randn(o):
    np.random.seed(20)
    X = np.random.RandomState(201).rand(24, 10).astype("float32")

    class VAE(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.Linear(10, 8)
            self.mu = nn.Linear(8, 3)
            self.logvar = nn.Linear(8, 3)
            self.dec = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 10), nn.Sigmoid())

        def forward(self, x):
            h = ops.relu(self.enc(x))
            mu, logvar = self.mu(h), self.logvar(h)
            eps = init.randn(*mu.shape)
            z = mu + eps * ops.exp(logvar * 0.5)
            return self.dec(z), mu, logvar

    model = VAE()
    opt = ndl.optim.Adam(model.parameters(), lr=0.01)

    def step(x):
        opt.reset_grad()
        recon, mu, logvar = model(x)
        rec = ((recon - x) ** 2).sum() / x.shape[0]
        kl = (ops.exp(logvar) + mu * mu - 1 - logvar).sum() * 0.5 / x.shape[0]
        loss = rec + kl
        loss.backward()
        opt.step()
        return loss, rec, kl

    step = H.J(step)
    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X), 7, shuffle=True)  # 7,7,7,3
    hist = []
    for ep in range(3):
        for (xb,) in loader:
            loss, rec, kl = step(xb)
            hist.append([float(t.numpy()) for t in (loss, rec, kl)])
    with ndl.no_grad():
        sample = model.dec(init.randn(2, 3))
    o["sample"] = sample
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)


# 29. knowledge distillation: teacher in eval mode under no_grad inside the student's step
@loop
def knowledge_distillation_teacher_no_grad(o):
    np.random.seed(21)
    X, y = classif_data(20, 8, 4, seed=211)
    teacher = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 4))
    student = nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 4))
    teacher.eval()
    opt = ndl.optim.Adam(student.parameters(), lr=0.02)
    ce = nn.SoftmaxLoss()
    TEMP, ALPHA = 2.0, 0.7

    def distill_step(X, y):
        with ndl.no_grad():
            t_logits = teacher(X)
        s_logits = student(X)
        p_t = ops.exp(ops.logsoftmax(t_logits / TEMP))
        kd = -(p_t * ops.logsoftmax(s_logits / TEMP)).sum() / X.shape[0] * (TEMP ** 2)
        loss = ALPHA * kd + (1 - ALPHA) * ce(s_logits, y)
        opt.reset_grad()
        loss.backward()
        opt.step()
        return loss

    distill_step = H.J(distill_step)
    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X, y), 6, shuffle=True)
    hist = []
    for ep in range(4):
        for Xb, yb in loader:
            hist.append(float(distill_step(Xb, yb).numpy()))
    o["hist"] = hist
    o.model("student", student)
    o.model("teacher", teacher)


# 30. class-weighted cross-entropy: weights from the training labels' counts (numpy global)
CLASS_WEIGHTS = None


@loop
def class_weighted_loss_from_counts(o):
    global CLASS_WEIGHTS
    np.random.seed(22)
    X, y = classif_data(24, 8, 4, seed=221)
    counts = np.bincount(y, minlength=4).astype("float32")
    CLASS_WEIGHTS = (counts.sum() / (4 * np.maximum(counts, 1))).astype("float32")
    model = nn.Sequential(nn.Linear(8, 10), nn.ReLU(), nn.Linear(10, 4))
    opt = ndl.optim.Adam(model.parameters(), lr=0.02)

    def weighted_ce(logits, y_onehot):
        w = ndl.Tensor(CLASS_WEIGHTS, requires_grad=False)
        per = ops.logsumexp(logits, (1,)) - (logits * y_onehot).sum((1,))
        sw = (y_onehot @ w.reshape((4, 1))).reshape((logits.shape[0],))
        return (per * sw).sum() / sw.sum()

    def step(X, y):
        opt.reset_grad()
        yo = init.one_hot(4, y)
        loss = weighted_ce(model(X), yo)
        loss.backward()
        opt.step()
        return loss

    step = H.J(step)
    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X, y), 7, shuffle=True)
    hist = []
    for ep in range(4):
        for Xb, yb in loader:
            hist.append(float(step(Xb, yb).numpy()))
    o["hist"] = hist
    o.model("model", model)


# 31. LSTM classifier on variable-length sequences padded to each batch's longest
@loop
def lstm_classifier_padded_variable_lengths(o):
    np.random.seed(23)
    rs = np.random.RandomState(231)
    seqs = [rs.randn(rs.randint(2, 8), 3).astype("float32") for _ in range(30)]
    labels = np.array([int(s[:, 0].sum() > 0) for s in seqs])

    class Clf(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(3, 6)
            self.fc = nn.Linear(6, 2)

        def forward(self, x):
            out, (h, c) = self.lstm(x)
            return self.fc(h.reshape((h.shape[1], 6)))

    model = Clf()
    opt = ndl.optim.Adam(model.parameters(), lr=0.02)
    loss_fn = nn.SoftmaxLoss()

    def step(x, y):
        opt.reset_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    step = H.J(step)
    hist = []
    for ep in range(2):
        order = np.random.permutation(30)
        for b in range(0, 30, 5):
            idx = order[b:b + 5]
            L = max(len(seqs[i]) for i in idx)
            x = np.zeros((L, 5, 3), "float32")
            for j, i in enumerate(idx):
                x[L - len(seqs[i]):, j] = seqs[i]  # left-padded
            hist.append(float(step(T(x), T(labels[idx])).numpy()))
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)


# 32. multi-task model returning a dict of losses and logits; logging reads them after
@loop
def multitask_dict_of_losses(o):
    np.random.seed(24)
    rs = np.random.RandomState(241)
    X = rs.randn(20, 6).astype("float32")
    yc = rs.randint(0, 3, 20)
    yr = rs.randn(20, 1).astype("float32")

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.trunk = nn.Sequential(nn.Linear(6, 12), nn.ReLU())
            self.cls = nn.Linear(12, 3)
            self.reg = nn.Linear(12, 1)

        def forward(self, x):
            h = self.trunk(x)
            return self.cls(h), self.reg(h)

    model = Net()
    opt = ndl.optim.Adam(model.parameters(), lr=0.01)
    ce, mse = nn.SoftmaxLoss(), nn.MSELoss()
    weights = {"cls": 1.0, "reg": 0.5}

    def step(batch):
        opt.reset_grad()
        logits, pred = model(batch["x"])
        losses = {"cls": ce(logits, batch["yc"]), "reg": mse(pred, batch["yr"])}
        total = sum(weights[k] * v for k, v in losses.items())
        total.backward()
        opt.step()
        return {"total": total, **losses, "logits": logits}

    step = H.J(step)
    hist = []
    for ep in range(5):
        if ep == 3:
            weights["reg"] = 2.0  # re-balance the tasks
        for k in range(4):
            s = slice(k * 5, k * 5 + 5)
            out = step({"x": T(X[s]), "yc": T(yc[s]), "yr": T(yr[s])})
            hist.append({k2: float(v.numpy()) if k2 != "logits" else v.numpy().argmax(1).tolist()
                         for k2, v in out.items()})
    o["hist"] = hist
    o.model("model", model)


# 33. StepLR per epoch outside, clip_grad_norm_'s norm returned and logged
@loop
def steplr_epoch_clip_norm_logged(o):
    np.random.seed(25)
    X, y = classif_data(21, 8, 3, seed=251)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = ndl.optim.SGD(model.parameters(), lr=0.5, momentum=0.9, weight_decay=1e-4)
    sched = ndl.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.3)
    loss_fn = nn.SoftmaxLoss()

    def step(X, y):
        opt.reset_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)
        opt.step()
        return loss, norm

    step = H.J(step)
    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X, y), 5, shuffle=True)
    hist = []
    for ep in range(5):
        for Xb, yb in loader:
            loss, norm = step(Xb, yb)
            hist.append((float(loss.numpy()), float(norm.numpy())))
        sched.step()
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)


# 34. warmup computed inside the step from the global step number passed as an int
@loop
def warmup_inside_from_global_step_arg(o):
    np.random.seed(26)
    X, y = classif_data(20, 8, 3, seed=261)
    model = nn.Sequential(nn.Linear(8, 10), nn.ReLU(), nn.Linear(10, 3))
    opt = ndl.optim.Adam(model.parameters(), lr=0.0)
    loss_fn = nn.SoftmaxLoss()
    BASE_LR, WARMUP = 0.01, 6

    def step(X, y, global_step):
        opt.lr = BASE_LR * min(1.0, (global_step + 1) / WARMUP)
        opt.reset_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        opt.step()
        return loss

    step = H.J(step)
    hist, gs = [], 0
    for ep in range(5):
        for k in range(4):
            hist.append(float(step(T(X[k * 5:k * 5 + 5]), T(y[k * 5:k * 5 + 5]), gs).numpy()))
            gs += 1
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)


# 35. batches as dicts from the DataLoader, splatted into the step as keyword arguments
@loop
def dict_batches_kwargs_splat(o):
    np.random.seed(27)

    class DictDataset(ndl.data.Dataset):
        def __init__(self):
            super().__init__()
            rs = np.random.RandomState(271)
            self.img = rs.rand(13, 2, 4, 4).astype("float32")
            self.label = rs.randint(0, 3, 13)

        def __len__(self):
            return 13

        def __getitem__(self, i):
            return {"image": self.img[i], "label": self.label[i]}

    model = nn.Sequential(nn.Conv(2, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(64, 3))
    opt = ndl.optim.Adam(model.parameters(), lr=0.01)
    loss_fn = nn.SoftmaxLoss()

    def train_step(image, label):
        opt.reset_grad()
        loss = loss_fn(model(image), label)
        loss.backward()
        opt.step()
        return loss

    train_step = H.J(train_step)
    loader = ndl.data.DataLoader(DictDataset(), batch_size=4, shuffle=True)
    hist = []
    for ep in range(3):
        for batch in loader:
            hist.append(float(train_step(**batch).numpy()))
    o["hist"] = hist
    o.model("model", model)


# 36. k-fold cross-validation: a fresh model and optimizer per fold, passed as arguments
@loop
def kfold_models_as_arguments(o):
    np.random.seed(28)
    X, y = classif_data(24, 6, 3, seed=281)
    loss_fn = nn.SoftmaxLoss()

    def train_step(model, opt, X, y):
        opt.reset_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        opt.step()
        return loss

    def eval_step(model, X, y):
        model.eval()
        with ndl.no_grad():
            logits = model(X)
        model.train()
        return logits

    train_step, eval_step = H.J(train_step), H.J(eval_step)
    folds = np.array_split(np.arange(24), 4)
    hist, models = [], []
    for f in range(4):
        val = folds[f]
        tr = np.concatenate([folds[g] for g in range(4) if g != f])
        model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
        opt = ndl.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X[tr], y[tr]), 6, shuffle=True)
        for ep in range(2):
            for Xb, yb in loader:
                hist.append(float(train_step(model, opt, Xb, yb).numpy()))
        logits = eval_step(model, T(X[val]), T(y[val]))
        hist.append(float((logits.numpy().argmax(1) == y[val]).mean()))
        models.append(model)
    o["hist"] = hist
    for i, m in enumerate(models):
        o.model(f"fold{i}", m)


# 37. fine-tuning: pretrain, replace the head (new class count), new optimizer, same step
@loop
def finetune_replace_head_new_optimizer(o):
    np.random.seed(29)
    X, y = classif_data(20, 8, 5, seed=291)
    y2 = y % 2
    loss_fn = nn.SoftmaxLoss()

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(8, 12), nn.ReLU())
            self.head = nn.Linear(12, 5)

        def forward(self, x):
            return self.head(self.body(x))

    model = Net()
    opt = ndl.optim.Adam(model.parameters(), lr=0.01)

    def step(X, y):
        opt.reset_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        opt.step()
        return loss

    step = H.J(step)
    hist = []
    for it in range(6):
        k = it % 4
        hist.append(float(step(T(X[k * 5:k * 5 + 5]), T(y[k * 5:k * 5 + 5])).numpy()))
    model.head = nn.Linear(12, 2)
    opt = ndl.optim.Adam(model.parameters(), lr=0.005)
    for it in range(6):
        k = it % 4
        hist.append(float(step(T(X[k * 5:k * 5 + 5]), T(y2[k * 5:k * 5 + 5])).numpy()))
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)


# 38. mixup: lambda drawn outside with np.random.beta and passed as a float argument
@loop
def mixup_lambda_float_argument(o):
    np.random.seed(30)
    X, y = classif_data(24, 8, 3, seed=301)
    model = nn.Sequential(nn.Linear(8, 12), nn.ReLU(), nn.Linear(12, 3))
    opt = ndl.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = nn.SoftmaxLoss()

    def step(xa, ya, xb, yb, lam):
        opt.reset_grad()
        logits = model(xa * lam + xb * (1 - lam))
        loss = loss_fn(logits, ya) * lam + loss_fn(logits, yb) * (1 - lam)
        loss.backward()
        opt.step()
        return loss

    step = H.J(step)
    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X, y), 6, shuffle=True, drop_last=True)
    hist = []
    for ep in range(4):
        for Xb, yb in loader:
            perm = np.random.permutation(6)
            lam = float(np.random.beta(0.4, 0.4))
            xs, ys = Xb.numpy()[perm], yb.numpy()[perm]
            hist.append(float(step(Xb, yb, T(xs), T(ys), lam).numpy()))
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)


# 39. learning-rate range test (lr grows per batch, stop on divergence), then restore
@loop
def lr_range_test_then_restore(o):
    np.random.seed(31)
    X, y = classif_data(30, 8, 3, seed=311)
    model = nn.Sequential(nn.Linear(8, 12), nn.ReLU(), nn.Linear(12, 3))
    opt = ndl.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    loss_fn = nn.SoftmaxLoss()
    init_state = model.state_dict()
    init_opt = opt.state_dict()

    def step(X, y):
        opt.reset_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        opt.step()
        return loss

    step = H.J(step)
    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X, y), 5, shuffle=True)
    lrs, losses, best = [], [], float("inf")
    lr = 1e-4
    done = False
    for ep in range(10):
        for Xb, yb in loader:
            opt.lr = lr
            lv = float(step(Xb, yb).numpy())
            lrs.append(lr)
            losses.append(lv)
            best = min(best, lv)
            if lv > 4 * best or not math.isfinite(lv) or lr > 50:
                done = True
                break
            lr *= 2.5
        if done:
            break
    chosen = lrs[int(np.argmin(losses))] / 10
    model.load_state_dict(init_state)
    opt.load_state_dict(init_opt)
    opt.lr = chosen
    for ep in range(2):
        for Xb, yb in loader:
            losses.append(float(step(Xb, yb).numpy()))
    o["lrs"] = lrs
    o["losses"] = losses
    o.model("model", model)
    o.opt("opt", opt)


# 40. gradual magnitude pruning: a mask stored on each weight, renewed every epoch
@loop
def magnitude_pruning_mask_on_parameters(o):
    np.random.seed(32)
    X, y = classif_data(20, 8, 3, seed=321)
    model = nn.Sequential(nn.Linear(8, 12), nn.ReLU(), nn.Linear(12, 3))
    opt = ndl.optim.SGD(model.parameters(), lr=0.2)
    loss_fn = nn.SoftmaxLoss()
    weights = [model[0].weight, model[2].weight]
    for w in weights:
        w.mask = init.ones(*w.shape)

    def step(X, y):
        opt.reset_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        for w in weights:
            w.grad = w.grad * w.mask
        opt.step()
        for w in weights:
            w.data = w.data * w.mask
        return loss

    step = H.J(step)
    hist = []
    for ep in range(5):
        if ep >= 1:  # prune 20% more of the smallest weights each epoch
            for w in weights:
                a = np.abs(w.numpy())
                thr = np.quantile(a, 0.2 * ep)
                w.mask = T((a > thr).astype("float32"))
        for k in range(4):
            hist.append(float(step(T(X[k * 5:k * 5 + 5]), T(y[k * 5:k * 5 + 5])).numpy()))
        hist.append([float((w.numpy() == 0).mean()) for w in weights])
    o["hist"] = hist
    o.model("model", model)


# 41. per-parameter gradient norms kept on the parameters for a dashboard
@loop
def per_parameter_grad_norm_attribute_logging(o):
    np.random.seed(33)
    X, y = classif_data(20, 8, 3, seed=331)
    model = nn.Sequential(nn.Linear(8, 12), nn.ReLU(), nn.Linear(12, 3))
    opt = ndl.optim.Adam(model.parameters(), lr=0.01)
    loss_fn = nn.SoftmaxLoss()

    def step(X, y):
        opt.reset_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        for p in model.parameters():
            p.grad_norm = ((p.grad * p.grad).sum()) ** 0.5
        opt.step()
        return loss

    step = H.J(step)
    hist = []
    for ep in range(3):
        for k in range(4):
            loss = step(T(X[k * 5:k * 5 + 5]), T(y[k * 5:k * 5 + 5]))
            hist.append((float(loss.numpy()), {n: float(p.grad_norm.numpy()) for n, p in model.named_parameters()}))
    o["hist"] = hist
    o.model("model", model)


# 42. layer-wise learning-rate decay with a per-parameter multiplier, turned on mid-run
@loop
def layerwise_lr_multiplier_on_parameters(o):
    np.random.seed(34)
    X, y = classif_data(20, 8, 3, seed=341)
    model = nn.Sequential(nn.Linear(8, 12), nn.ReLU(), nn.Linear(12, 12), nn.ReLU(), nn.Linear(12, 3))
    loss_fn = nn.SoftmaxLoss()
    for p in model.parameters():
        p.lr_mult = 1.0
    LR = 0.1

    def step(X, y):
        for p in model.parameters():
            p.grad = None
        loss = loss_fn(model(X), y)
        loss.backward()
        for p in model.parameters():
            p.data = p.data - p.grad * (LR * p.lr_mult)
        return loss

    step = H.J(step)
    hist = []
    for ep in range(4):
        if ep == 2:  # freeze-ish: decay the lower layers' rates
            for depth, (name, p) in enumerate(model.named_parameters()):
                p.lr_mult = 0.5 ** (4 - depth // 2)
        for k in range(4):
            hist.append(float(step(T(X[k * 5:k * 5 + 5]), T(y[k * 5:k * 5 + 5])).numpy()))
    o["hist"] = hist
    o.model("model", model)


# 43. a student forgets to detach the RNN state between chunks (graph spans chunks)
@loop
def lm_rnn_hidden_not_detached(o):
    np.random.seed(35)
    data = ndl.data.batchify(corpus_ids(40, 8, seed=351), 2, dtype="float32")  # 20 x 2
    model = LanguageModel(5, 8, 6, num_layers=1, seq_model="rnn")
    opt = ndl.optim.SGD(model.parameters(), lr=0.5)
    loss_fn = nn.SoftmaxLoss()

    def train_step(X, y, h):
        opt.reset_grad()
        out, h = model(X, h)
        loss = loss_fn(out, y)
        loss.backward()
        opt.step()
        return loss, h

    train_step = H.J(train_step)
    hist = []
    for ep in range(2):
        h = None
        for i in range(0, data.shape[0] - 1, 4):
            X, y = ndl.data.get_batch(data, i, 4)
            loss, h = train_step(X, y, h)  # h is NOT detached
            hist.append(float(loss.numpy()))
    o["hist"] = hist
    o.model("model", model)


# 44. the course's epoch body copied verbatim into the step (realize_later, ndl.realize)
@loop
def course_epoch_body_with_realize_later(o):
    from needle.engine import realize_later
    np.random.seed(36)
    X, y = classif_data(22, 12, 10, seed=361)
    model = MLPResNet(12, hidden_dim=10, num_blocks=1)
    opt = ndl.optim.Adam(model.parameters(), lr=0.01, weight_decay=0.001)
    loss_fn = nn.SoftmaxLoss()

    def batch_step(X, y, train):
        logits = model(X)
        loss = loss_fn(logits, y)
        if train:
            opt.reset_grad()
            loss.backward()
            realize_later(logits)
            realize_later(loss)
            opt.step()
        else:
            ndl.realize(logits, loss)
        return logits, loss

    batch_step = H.J(batch_step)
    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X, y), 8, shuffle=True)
    hist = []
    for ep in range(4):
        np.random.seed(4)
        training = ep != 2
        model.train() if training else model.eval()
        errors = 0
        for Xb, yb in loader:
            logits, loss = batch_step(Xb, yb, training)
            errors += int((logits.numpy().argmax(axis=1) != yb.numpy()).sum())
            hist.append(float(loss.numpy()))
        hist.append(errors)
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)


# 45. ReduceLROnPlateau written by hand: halve lr when validation loss stalls
@loop
def manual_reduce_lr_on_plateau(o):
    np.random.seed(37)
    X, y = classif_data(20, 8, 3, seed=371)
    Xv, yv = classif_data(6, 8, 3, seed=372)
    model = nn.Sequential(nn.Linear(8, 10), nn.ReLU(), nn.Linear(10, 3))
    opt = ndl.optim.RMSprop(model.parameters(), lr=0.05, centered=True)
    loss_fn = nn.SoftmaxLoss()

    def train_step(X, y):
        opt.reset_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        opt.step()
        return loss

    val_loss = H.J(lambda X, y: loss_fn(model(X), y), "val")
    train_step = H.J(train_step)
    best, wait, hist = float("inf"), 0, []
    for ep in range(8):
        for k in range(4):
            hist.append(float(train_step(T(X[k * 5:k * 5 + 5]), T(y[k * 5:k * 5 + 5])).numpy()))
        with ndl.no_grad():
            v = float(val_loss(T(Xv), T(yv)).numpy())
        if v < best * 0.999:
            best, wait = v, 0
        else:
            wait += 1
            if wait >= 1:
                opt.lr *= 0.5
                wait = 0
        hist.append((v, opt.lr))
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)


# 46. siamese network with a triplet margin loss, one shared encoder called three times
@loop
def siamese_triplet_shared_encoder(o):
    np.random.seed(38)
    rs = np.random.RandomState(381)
    A = rs.randn(24, 6).astype("float32")
    enc = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 4))
    opt = ndl.optim.Adam(enc.parameters(), lr=0.01)

    def triplet_step(a, p, n, margin):
        opt.reset_grad()
        ea, ep_, en = enc(a), enc(p), enc(n)
        dp = ((ea - ep_) ** 2).sum((1,))
        dn = ((ea - en) ** 2).sum((1,))
        loss = ops.relu(dp - dn + margin).sum() / a.shape[0]
        loss.backward()
        opt.step()
        return loss

    triplet_step = H.J(triplet_step)
    hist = []
    for ep in range(3):
        for k in range(4):
            a = A[k * 6:k * 6 + 6]
            p = a + 0.05 * np.random.randn(6, 6).astype("float32")
            n = A[np.random.permutation(24)[:6]]
            hist.append(float(triplet_step(T(a), T(p), T(n), 1.0).numpy()))
    o["hist"] = hist
    o.model("enc", enc)
    o.opt("opt", opt)


# 47. a small GAN: two jitted steps, noise from init.randn inside each
@loop
def gan_two_jitted_steps(o):
    np.random.seed(39)
    real = np.random.RandomState(391).randn(30, 2).astype("float32") * 0.5 + 2.0
    G = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2))
    D = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 2))
    optG = ndl.optim.Adam(G.parameters(), lr=0.01, beta1=0.5)
    optD = ndl.optim.Adam(D.parameters(), lr=0.01, beta1=0.5)
    loss_fn = nn.SoftmaxLoss()
    ones_, zeros_ = np.ones(6, "int64"), np.zeros(6, "int64")

    def d_step(x_real):
        optD.reset_grad()
        fake = G(init.randn(6, 3)).detach()
        loss = loss_fn(D(x_real), T(ones_)) + loss_fn(D(fake), T(zeros_))
        loss.backward()
        optD.step()
        return loss

    def g_step():
        optG.reset_grad()
        loss = loss_fn(D(G(init.randn(6, 3))), T(ones_))
        loss.backward()
        optG.step()
        return loss

    d_step, g_step = H.J(d_step), H.J(g_step)
    hist = []
    for ep in range(2):
        for k in range(5):
            hist.append(float(d_step(T(real[k * 6:k * 6 + 6])).numpy()))
            hist.append(float(g_step().numpy()))
    o["hist"] = hist
    o.model("G", G)
    o.model("D", D)
    o.grads("Dgrad", D)


# 48. stochastic weight averaging: the running average of the weights kept outside the step
@loop
def swa_running_average_outside(o):
    np.random.seed(40)
    X, y = classif_data(20, 8, 3, seed=401)
    model = nn.Sequential(nn.Linear(8, 10), nn.ReLU(), nn.Linear(10, 3))
    opt = ndl.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = nn.SoftmaxLoss()

    def step(X, y):
        opt.reset_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        opt.step()
        return loss

    step = H.J(step)
    swa, n_avg, hist = None, 0, []
    for ep in range(5):
        for k in range(4):
            hist.append(float(step(T(X[k * 5:k * 5 + 5]), T(y[k * 5:k * 5 + 5])).numpy()))
        if ep >= 2:
            cur = [p.detach() for p in model.parameters()]
            swa = cur if swa is None else [(s * n_avg + c) / (n_avg + 1) for s, c in zip(swa, cur)]
            n_avg += 1
    ndl.realize(*swa)
    for p, s in zip(model.parameters(), swa):
        p.data = s
    hist.append(float(H.J(lambda X, y: loss_fn(model(X), y), "final")(T(X), T(y)).numpy()))
    o["hist"] = hist
    o.model("model", model)


# 49. autoregressive toy: inputs and targets are overlapping numpy views of one array
@loop
def autoregressive_overlapping_numpy_views(o):
    np.random.seed(41)
    series = np.sin(np.linspace(0, 12, 64)).astype("float32").reshape(8, 8)
    model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
    opt = ndl.optim.Adam(model.parameters(), lr=0.02)

    def step(window, target):
        opt.reset_grad()
        x = ndl.Tensor(window, requires_grad=False)
        t = ndl.Tensor(target.reshape(-1, 1), requires_grad=False)
        loss = ((model(x) - t) ** 2).sum() / x.shape[0]
        loss.backward()
        opt.step()
        return loss

    step = H.J(step)
    hist = []
    for ep in range(3):
        for start in range(0, 5):
            block = series[:, start:start + 4]  # a view
            hist.append(float(step(block[:, :3], block[:, 3]).numpy()))  # views of one buffer
    o["hist"] = hist
    o.model("model", model)


# 50. WGAN critic with weight clipping after the update (inside the step)
@loop
def wgan_critic_weight_clipping_inside(o):
    np.random.seed(42)
    real = np.random.RandomState(421).randn(40, 2).astype("float32") + 1.0
    G = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 2))
    C = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 1))
    optC = ndl.optim.RMSprop(C.parameters(), lr=5e-3)
    optG = ndl.optim.RMSprop(G.parameters(), lr=5e-3)
    CLIP = 0.1

    def critic_step(x_real):
        optC.reset_grad()
        fake = G(init.randn(5, 2)).detach()
        loss = C(fake).sum() / 5 - C(x_real).sum() / 5
        loss.backward()
        optC.step()
        for p in C.parameters():  # clamp to [-CLIP, CLIP]
            p.data = p.data - ops.relu(p.data - CLIP) + ops.relu(-p.data - CLIP)
        return loss

    def gen_step():
        optG.reset_grad()
        loss = -C(G(init.randn(5, 2))).sum() / 5
        loss.backward()
        optG.step()
        return loss

    critic_step, gen_step = H.J(critic_step), H.J(gen_step)
    hist = []
    for it in range(8):
        for c in range(3):
            k = (it * 3 + c) % 8
            hist.append(float(critic_step(T(real[k * 5:k * 5 + 5])).numpy()))
        hist.append(float(gen_step().numpy()))
    o["hist"] = hist
    o.model("G", G)
    o.model("C", C)


# 51. Lookahead written by the user: slow weights stored on each parameter
@loop
def lookahead_slow_weights_on_parameters(o):
    np.random.seed(43)
    X, y = classif_data(20, 8, 3, seed=431)
    model = nn.Sequential(nn.Linear(8, 10), nn.ReLU(), nn.Linear(10, 3))
    opt = ndl.optim.Adam(model.parameters(), lr=0.02)
    loss_fn = nn.SoftmaxLoss()
    K, ALPHA = 3, 0.5
    for p in model.parameters():
        p.slow = p.detach()

    def step(X, y, sync):
        opt.reset_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        opt.step()
        if sync:
            for p in model.parameters():
                p.slow = (p.slow + (p.data - p.slow) * ALPHA).detach()
                p.data = p.slow
        return loss

    step = H.J(step)
    hist, it = [], 0
    for ep in range(4):
        for k in range(4):
            it += 1
            hist.append(float(step(T(X[k * 5:k * 5 + 5]), T(y[k * 5:k * 5 + 5]), it % K == 0).numpy()))
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)


# 52. EMA weights swapped in for evaluation (and back) around a jitted eval
@loop
def ema_weights_swapped_in_for_eval(o):
    np.random.seed(44)
    X, y = classif_data(20, 8, 3, seed=441)
    model = nn.Sequential(nn.Linear(8, 10), nn.BatchNorm1d(10), nn.ReLU(), nn.Linear(10, 3))
    opt = ndl.optim.Adam(model.parameters(), lr=0.02)
    loss_fn = nn.SoftmaxLoss()
    params = model.parameters()
    ema = [p.detach() for p in params]

    def step(X, y):
        opt.reset_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        opt.step()
        for e, p in zip(ema, params):
            e.data = e.data * 0.9 + p.data * 0.1
        return loss

    step = H.J(step)
    evaluate = H.J(lambda X, y: loss_fn(model(X), y), "eval")
    hist = []
    for ep in range(4):
        model.train()
        for k in range(4):
            hist.append(float(step(T(X[k * 5:k * 5 + 5]), T(y[k * 5:k * 5 + 5])).numpy()))
        model.eval()
        backup = [p.detach() for p in params]
        with ndl.no_grad():
            for p, e in zip(params, ema):
                p.data = e
            hist.append(float(evaluate(T(X), T(y)).numpy()))
            for p, b in zip(params, backup):
                p.data = b
    o["hist"] = hist
    o["ema"] = ema
    o.model("model", model)
    o.opt("opt", opt)


# 53. label smoothing written with init.one_hot on numpy labels passed to the step
@loop
def label_smoothing_one_hot_numpy_labels(o):
    np.random.seed(45)
    X, y = classif_data(20, 8, 4, seed=451)
    model = nn.Sequential(nn.Linear(8, 10), nn.ReLU(), nn.Linear(10, 4))
    opt = ndl.optim.Adam(model.parameters(), lr=0.02)
    EPS = 0.1

    def step(x, labels):
        opt.reset_grad()
        logits = model(ndl.Tensor(x, requires_grad=False))
        target = init.one_hot(4, labels) * (1 - EPS) + EPS / 4
        loss = -(ops.logsoftmax(logits) * target).sum() / x.shape[0]
        loss.backward()
        opt.step()
        return loss

    step = H.J(step)
    hist = []
    for ep in range(3):
        perm = np.random.permutation(20)
        for k in range(4):
            idx = perm[k * 5:k * 5 + 5]
            hist.append(float(step(X[idx], y[idx]).numpy()))
    o["hist"] = hist
    o.model("model", model)


# 54. custom freezing: a user flag on each parameter, read by a hand-written update
@loop
def custom_frozen_flag_on_parameters(o):
    np.random.seed(46)
    X, y = classif_data(20, 8, 3, seed=461)
    model = nn.Sequential(nn.Linear(8, 10), nn.ReLU(), nn.Linear(10, 3))
    loss_fn = nn.SoftmaxLoss()
    for p in model.parameters():
        p.frozen = False

    def sgd_step(X, y):
        for p in model.parameters():
            p.grad = None
        loss = loss_fn(model(X), y)
        loss.backward()
        for p in model.parameters():
            if not p.frozen:
                p.data = p.data - p.grad * 0.1
        return loss

    sgd_step = H.J(sgd_step)
    hist = []
    for ep in range(4):
        for p in model[0].parameters():
            p.frozen = ep >= 2  # freeze the first layer for the last two epochs
        for k in range(4):
            hist.append(float(sgd_step(T(X[k * 5:k * 5 + 5]), T(y[k * 5:k * 5 + 5])).numpy()))
    o["hist"] = hist
    o.model("model", model)


# 55. activation statistics: the model keeps its activations in a list for logging
@loop
def activation_stats_list_on_model(o):
    np.random.seed(47)
    X, y = classif_data(20, 8, 3, seed=471)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.l2, self.l3 = nn.Linear(8, 10), nn.Linear(10, 10), nn.Linear(10, 3)
            self.acts = []

        def forward(self, x):
            self.acts = []
            h = ops.relu(self.l1(x))
            self.acts.append(h.detach())
            h = ops.relu(self.l2(h))
            self.acts.append(h.detach())
            return self.l3(h)

    model = Net()
    opt = ndl.optim.Adam(model.parameters(), lr=0.01)
    loss_fn = nn.SoftmaxLoss()

    def step(X, y):
        opt.reset_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        opt.step()
        return loss

    step = H.J(step)
    hist = []
    for ep in range(3):
        for k in range(4):
            loss = step(T(X[k * 5:k * 5 + 5]), T(y[k * 5:k * 5 + 5]))
            hist.append((float(loss.numpy()), [float((a.numpy() > 0).mean()) for a in model.acts]))
    o["hist"] = hist
    o.model("model", model)


# 56. per-sample weights attached to the batch tensor by the data pipeline
@loop
def sample_weights_attached_to_batch_tensor(o):
    np.random.seed(48)
    X, y = classif_data(20, 8, 3, seed=481)
    W = np.ones(20, "float32")
    model = nn.Sequential(nn.Linear(8, 10), nn.ReLU(), nn.Linear(10, 3))
    opt = ndl.optim.SGD(model.parameters(), lr=0.1)

    def step(X, y):
        opt.reset_grad()
        logits = model(X)
        per = ops.logsumexp(logits, (1,)) - (logits * y).sum((1,))
        loss = (per * X.sample_weight).sum() / X.shape[0]
        loss.backward()
        opt.step()
        return loss

    step = H.J(step)
    hist = []
    for ep in range(4):
        if ep == 2:
            W[:] = np.random.RandomState(482).rand(20)  # hard-example reweighting starts
        for k in range(4):
            xb = T(X[k * 5:k * 5 + 5])
            xb.sample_weight = T(W[k * 5:k * 5 + 5])
            yo = T(np.eye(3, dtype="float32")[y[k * 5:k * 5 + 5]])
            hist.append(float(step(xb, yo).numpy()))
    o["hist"] = hist
    o.model("model", model)


# 57. checkpoint every few steps from inside the step (needle.save with a step counter)
@loop
def checkpoint_inside_step_every_n(o):
    np.random.seed(49)
    X, y = classif_data(20, 8, 3, seed=491)
    model = nn.Sequential(nn.Linear(8, 10), nn.ReLU(), nn.Linear(10, 3))
    opt = ndl.optim.Adam(model.parameters(), lr=0.01)
    loss_fn = nn.SoftmaxLoss()
    path = os.path.join(tempfile.mkdtemp(), "last.npz")
    state = {"step": 0}

    def step(X, y):
        opt.reset_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        opt.step()
        state["step"] += 1
        if state["step"] % 3 == 0:
            ndl.save(model.state_dict(), path)
        return loss

    step = H.J(step)
    hist = []
    for ep in range(3):
        for k in range(4):
            hist.append(float(step(T(X[k * 5:k * 5 + 5]), T(y[k * 5:k * 5 + 5])).numpy()))
    saved = ndl.load(path)
    o["saved"] = saved
    o["hist"] = hist
    o["state"] = state
    o.model("model", model)


# 58. a learning rate kept in a Tensor (manual SGD), its data replaced between epochs
@loop
def lr_tensor_manual_sgd(o):
    np.random.seed(50)
    X, y = classif_data(20, 8, 3, seed=501)
    model = nn.Sequential(nn.Linear(8, 10), nn.ReLU(), nn.Linear(10, 3))
    loss_fn = nn.SoftmaxLoss()
    lr = ndl.Tensor(np.float32(0.2), requires_grad=False)

    def step(X, y):
        for p in model.parameters():
            p.grad = None
        loss = loss_fn(model(X), y)
        loss.backward()
        for p in model.parameters():
            p.data = p.data - p.grad * lr.broadcast_to(p.shape)
        return loss

    step = H.J(step)
    hist = []
    for ep in range(4):
        lr.data = ndl.Tensor(np.float32(0.2 * 0.5 ** ep), requires_grad=False)
        for k in range(4):
            hist.append(float(step(T(X[k * 5:k * 5 + 5]), T(y[k * 5:k * 5 + 5])).numpy()))
    o["hist"] = hist
    o.model("model", model)


# 59. Transformer LM with dropout and a sequence-length curriculum (bptt grows per epoch)
@loop
def transformer_lm_dropout_seq_curriculum(o):
    np.random.seed(51)
    data = ndl.data.batchify(corpus_ids(48, 10, seed=511), 2, dtype="float32")  # 24 x 2

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 16)
            self.tf = nn.Transformer(16, 16, 1, num_head=2, dim_head=8, dropout=0.1, sequence_len=8)
            self.out = nn.Linear(16, 10)

        def forward(self, x):
            L, B = x.shape
            h, _ = self.tf(self.emb(x))
            return self.out(h.reshape((L * B, 16)))

    model = LM()
    opt = ndl.optim.Adam(model.parameters(), lr=0.005, weight_decay=1e-4)
    loss_fn = nn.SoftmaxLoss()

    def step(X, y):
        opt.reset_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        return loss

    step = H.J(step)
    hist = []
    for ep, bptt in enumerate([3, 3, 5, 8]):
        model.train()
        for i in range(0, data.shape[0] - 1, bptt):
            X, y = ndl.data.get_batch(data, i, bptt)
            hist.append(float(step(X, y).numpy()))
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)


# 60. LSTM LM: hidden state reset at document boundaries with a keep-mask argument
@loop
def lstm_state_reset_mask_argument(o):
    np.random.seed(52)
    ids = corpus_ids(64, 9, seed=521)
    data = ndl.data.batchify(ids, 4, dtype="float32")  # 16 x 4
    model = LanguageModel(6, 9, 8, seq_model="lstm")
    opt = ndl.optim.SGD(model.parameters(), lr=1.0, momentum=0.5)
    loss_fn = nn.SoftmaxLoss()
    zeros = init.zeros(1, 4, 8)

    def step(X, y, h, c, keep):
        opt.reset_grad()
        k = ndl.Tensor(keep.reshape(1, 4, 1), requires_grad=False).broadcast_to((1, 4, 8))
        out, (h, c) = model(X, (h * k, c * k))
        loss = loss_fn(out, y)
        loss.backward()
        opt.step()
        return loss, h.detach(), c.detach()

    step = H.J(step)
    rs = np.random.RandomState(522)
    hist = []
    for ep in range(2):
        h, c = zeros, zeros
        for i in range(0, data.shape[0] - 1, 3):
            X, y = ndl.data.get_batch(data, i, 3)
            keep = (rs.rand(4) > 0.3).astype("float32")  # a new document starts in some columns
            loss, h, c = step(X, y, h, c, keep)
            hist.append(float(loss.numpy()))
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)


# 61. accuracy counted on the device inside the step (argmax, eq), read after the call
@loop
def accuracy_counted_inside_step(o):
    np.random.seed(53)
    X, y = classif_data(22, 8, 4, seed=531)
    model = nn.Sequential(nn.Linear(8, 10), nn.ReLU(), nn.Linear(10, 4))
    opt = ndl.optim.Adam(model.parameters(), lr=0.02)
    loss_fn = nn.SoftmaxLoss()

    def step(X, y):
        opt.reset_grad()
        logits = model(X)
        loss = loss_fn(logits, y)
        loss.backward()
        opt.step()
        correct = logits.argmax(axis=1).eq(y).astype("float32").sum()
        return loss, correct

    step = H.J(step)
    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X, y), 6, shuffle=True)
    hist = []
    for ep in range(4):
        tot = 0.0
        for Xb, yb in loader:
            loss, correct = step(Xb, yb)
            tot += float(correct.numpy())
            hist.append(float(loss.numpy()))
        hist.append(tot)
    o["hist"] = hist
    o.model("model", model)


# 62. progressive batch size: the DataLoader's batch size grows every epoch
@loop
def progressive_batch_size(o):
    np.random.seed(54)
    X, y = classif_data(24, 8, 3, seed=541)
    model = nn.Sequential(nn.Linear(8, 10), nn.BatchNorm1d(10), nn.ReLU(), nn.Linear(10, 3))
    opt = ndl.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = nn.SoftmaxLoss()

    def step(X, y):
        opt.reset_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        opt.step()
        return loss

    step = H.J(step)
    ds = ndl.data.NDArrayDataset(X, y)
    hist = []
    for ep, bs in enumerate([4, 4, 6, 8, 8]):
        opt.lr = 0.1 * bs / 4  # linear scaling rule
        for Xb, yb in ndl.data.DataLoader(ds, bs, shuffle=True):
            hist.append(float(step(Xb, yb).numpy()))
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)


# 63. AdamW written by hand: decoupled weight decay after opt.step(), inside the step
@loop
def adamw_by_hand_decay_after_step(o):
    np.random.seed(55)
    X, y = classif_data(30, 16, 4, seed=551)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = ndl.optim.Adam(model.parameters(), lr=0.01)
    loss_fn = nn.SoftmaxLoss()
    WD = 0.01

    def step(X, y):
        opt.reset_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        opt.step()
        for p in model.parameters():
            p.data = p.data * (1 - opt.lr * WD)
        return loss

    step = H.J(step)
    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X, y), 5, shuffle=True)
    hist = []
    for ep in range(3):
        for Xb, yb in loader:
            hist.append(float(step(Xb, yb).numpy()))
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)


# 64. AdamW by hand, the decoupled decay applied between calls (outside the jitted step)
@loop
def adamw_decay_between_calls(o):
    np.random.seed(56)
    X, y = classif_data(30, 16, 4, seed=561)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = ndl.optim.Adam(model.parameters(), lr=0.01)
    loss_fn = nn.SoftmaxLoss()
    WD = 0.01

    def step(X, y):
        opt.reset_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        opt.step()
        return loss

    step = H.J(step)
    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X, y), 5, shuffle=True)
    hist = []
    for ep in range(3):
        for Xb, yb in loader:
            hist.append(float(step(Xb, yb).numpy()))
            with ndl.no_grad():
                for p in model.parameters():
                    p.data = p.data * (1 - opt.lr * WD)
    o["hist"] = hist
    o.model("model", model)
    o.opt("opt", opt)
