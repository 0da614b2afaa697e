"""The peers of bench_training.py: the course's models written as a PyTorch user and a JAX
user would write them, with the same architectures, batch sizes, data and optimizers as
the needle cases.

    SPECS[model]                 sizes and optimizer of each model (needle's cases read them too)
    make_data(model)             the numpy inputs every implementation trains on
    torch_case(model, compiled)  (step, inputs): torch eager, or torch.compile
    jax_case(model)              (step, inputs): one jax.jit'ed train step with optax

step(*inputs) runs forward, backward and the optimizer update and returns the loss as a
Python float (reading it waits for the step, as needle's `loss.numpy()` does).

Optimizers.  needle's SGD momentum is the course's rule u = m u + (1 - m) g, p -= lr u.
Undampened momentum (torch's and optax's u' = m u' + g) with lr (1 - m) gives exactly the
same updates (u' = u / (1 - m) at every step), so the peers use that.  needle's and
torch's Adam weight decay is L2 (wd * p added to the gradient before the moments); optax
writes it as add_decayed_weights(wd) before adam.

torch.compile: the forward and the loss are compiled together (AOTAutograd compiles the
backward from them) and so is the optimizer step (PyTorch's "compiling the optimizer"
recipe); zero_grad and backward() stay the calls a user makes.  nn.LSTM is not traced by
dynamo (it graph-breaks and runs eagerly), which is what a user of torch.compile gets.
The Transformer uses F.scaled_dot_product_attention(is_causal=True, dropout_p), the call
a torch user would make; it is the same math as needle's softmax(q kᵀ / sqrt(D) + mask).

jax: plain jax (no flax): small functional layers below; `batch_stats` carries the state
that is not trained (BatchNorm running statistics, the LSTM's hidden state), `key` the
PRNG key for Dropout, split inside the step and returned.

Initialization: both peers draw their weights from the distributions needle's layers use
(the course's: Linear W ~ U(+-sqrt(6 / in)), b ~ U(+-sqrt(6 / out)); Conv W ~ U(+-sqrt(6 /
fan_in)), b ~ U(+-1 / sqrt(fan_in)); LSTM U(+-1 / sqrt(hidden)); Embedding N(0, 1)), so that
the same architecture starts from about the same loss (bench_training.py --check).
"""
from __future__ import annotations

import math

import numpy as np

# Every model's sizes and optimizer: (name, lr, momentum, weight decay).
SPECS = {
    "mlp": dict(batch=128, shape=(784,), classes=10, opt=("sgd", 0.1, 0.0, 0.0)),
    "mlpresnet": dict(batch=100, shape=(784,), classes=10, hidden=100, blocks=3, drop=0.1,
                      opt=("adam", 1e-3, 0.0, 1e-3)),
    "cnn": dict(batch=128, shape=(784,), classes=10, opt=("sgd", 0.01, 0.0, 0.0)),
    "resnet9": dict(batch=16, shape=(3, 32, 32), classes=10, opt=("sgd", 0.01, 0.9, 0.0)),
    "lstm": dict(batch=16, seq=20, classes=1000, embedding=32, hidden=64, layers=2, opt=("sgd", 0.01, 0.0, 0.0)),
    # hw4_extra's Transformer language model (examples/train_transformer_lm.py's sizes, Adam
    # as hw4_extra trains it), with 4 heads of 16 and Dropout 0.1
    "transformer": dict(batch=16, seq=32, classes=1000, embedding=64, hidden=128, layers=2, heads=4,
                        dim_head=16, drop=0.1, opt=("adam", 1e-3, 0.0, 0.0)),
}
LANGUAGE_MODELS = ("lstm", "transformer")


def make_data(model: str):
    """The numpy arrays every implementation trains on (the same batch at every step)."""
    rng = np.random.default_rng(0)
    if model == "tiny":  # one realize of an add of two 16-float tensors
        return tuple(rng.standard_normal(16).astype("float32") for _ in range(2))
    spec = SPECS[model]
    if model in LANGUAGE_MODELS:  # (seq, batch) word ids, (seq * batch,) targets
        x = rng.integers(0, spec["classes"], (spec["seq"], spec["batch"]))
        y = rng.integers(0, spec["classes"], (spec["seq"] * spec["batch"],))
        return x, y
    x = rng.standard_normal((spec["batch"],) + spec["shape"]).astype("float32")
    y = rng.integers(0, spec["classes"], spec["batch"])
    return x, y


# ---- torch ----------------------------------------------------------------------------------
def torch_model(model_name: str):
    """The nn.Module of `model_name` (forward(x) -> logits, or (logits, h) for the LSTM)."""
    import torch
    from torch import nn
    F = nn.functional
    spec = SPECS[model_name]

    if model_name == "mlp":
        return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    if model_name == "mlpresnet":  # examples/mlp_resnet.py: relu(x + norm(linear(dropout(relu(norm(linear(x)))))))
        class Residual(nn.Module):
            def __init__(self, dim, hidden, drop):
                super().__init__()
                self.main = nn.Sequential(nn.Linear(dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Dropout(drop),
                                          nn.Linear(hidden, dim), nn.BatchNorm1d(dim))

            def forward(self, x):
                return torch.relu(x + self.main(x))
        h = spec["hidden"]
        return nn.Sequential(nn.Linear(784, h), nn.ReLU(), *[Residual(h, h // 2, spec["drop"]) for _ in range(spec["blocks"])],
                             nn.Linear(h, 10))
    if model_name == "cnn":  # needle.cli.train.build_model("cnn")
        def stage(a, b):
            return [nn.Conv2d(a, b, 3, padding=1), nn.BatchNorm2d(b), nn.ReLU(), nn.MaxPool2d(2)]
        return nn.Sequential(nn.Unflatten(1, (1, 28, 28)), *stage(1, 16), *stage(16, 32), nn.Flatten(),
                             nn.Linear(32 * 7 * 7, 10))
    if model_name == "resnet9":  # examples/models.py ResNet9
        def cbn(a, b, k, s):
            return nn.Sequential(nn.Conv2d(a, b, k, s, k // 2), nn.BatchNorm2d(b), nn.ReLU())

        class Residual(nn.Module):
            def __init__(self, f):
                super().__init__()
                self.f = f

            def forward(self, x):
                return x + self.f(x)
        return nn.Sequential(cbn(3, 16, 7, 4), cbn(16, 32, 3, 2), Residual(nn.Sequential(cbn(32, 32, 3, 1), cbn(32, 32, 3, 1))),
                             cbn(32, 64, 3, 2), cbn(64, 128, 3, 2),
                             Residual(nn.Sequential(cbn(128, 128, 3, 1), cbn(128, 128, 3, 1))),
                             nn.Flatten(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))
    if model_name == "lstm":  # examples/models.py LanguageModel(seq_model="lstm")
        vocab, emb, hidden, layers = spec["classes"], spec["embedding"], spec["hidden"], spec["layers"]

        class LSTMLanguageModel(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb, self.lstm, self.lin = nn.Embedding(vocab, emb), nn.LSTM(emb, hidden, layers), nn.Linear(hidden, vocab)

            def forward(self, x, h):
                out, h = self.lstm(self.emb(x), h)
                return self.lin(out.reshape(-1, hidden)), h
        return LSTMLanguageModel()
    if model_name == "transformer":  # needle/nn/nn_transformer.py, layer by layer
        vocab, d, hidden, heads, dh, drop = (spec[k] for k in ("classes", "embedding", "hidden", "heads", "dim_head", "drop"))

        class AttentionLayer(nn.Module):
            """Pre-norm: a LayerNorm and a bias-free projection for each of q, k, v."""

            def __init__(self):
                super().__init__()
                self.prenorm_q, self.prenorm_k, self.prenorm_v = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
                self.q_projection = nn.Linear(d, heads * dh, bias=False)
                self.k_projection = nn.Linear(d, heads * dh, bias=False)
                self.v_projection = nn.Linear(d, heads * dh, bias=False)
                self.out_projection = nn.Linear(heads * dh, d, bias=False)

            def forward(self, x):
                b, t, _ = x.shape
                q, k, v = (proj(norm(x)).view(b, t, heads, dh).transpose(1, 2)
                           for norm, proj in ((self.prenorm_q, self.q_projection), (self.prenorm_k, self.k_projection),
                                              (self.prenorm_v, self.v_projection)))
                out = F.scaled_dot_product_attention(q, k, v, dropout_p=drop if self.training else 0.0, is_causal=True)
                return self.out_projection(out.transpose(1, 2).reshape(b, t, heads * dh))

        class TransformerLayer(nn.Module):
            """x + Dropout(Attention(x)), then x + Dropout(Linear2(Dropout(ReLU(Linear1(LayerNorm(x))))))."""

            def __init__(self):
                super().__init__()
                self.attention = AttentionLayer()
                self.linear1, self.linear2 = nn.Linear(d, hidden), nn.Linear(hidden, d)
                self.layernorm, self.dropout = nn.LayerNorm(d), nn.Dropout(drop)

            def forward(self, x):
                x = x + self.dropout(self.attention(x))
                y = self.dropout(torch.relu(self.linear1(self.layernorm(x))))
                return x + self.dropout(self.linear2(y))

        class TransformerLanguageModel(nn.Module):
            """Embedding -> (T, B, D) to (B, T, D) + learned positions -> layers -> back -> Linear."""

            def __init__(self):
                super().__init__()
                self.embedding, self.pos_embedding = nn.Embedding(vocab, d), nn.Embedding(spec["seq"], d)
                self.layers = nn.Sequential(*[TransformerLayer() for _ in range(spec["layers"])])
                self.linear = nn.Linear(d, vocab)

            def forward(self, x):
                t, b = x.shape
                h = self.embedding(x).transpose(0, 1)
                h = self.layers(h + self.pos_embedding(torch.arange(t, device=x.device))[None])
                return self.linear(h.transpose(0, 1).reshape(t * b, d))
        return TransformerLanguageModel()
    raise ValueError(f"no torch model {model_name!r}")


def needle_init(model) -> None:
    """Redraw torch's Linear and Conv2d parameters from needle's distributions (the module's
    docstring); LSTM, Embedding and the norms already match."""
    import torch
    from torch import nn
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Linear):
                bound = math.sqrt(6 / m.in_features)
                m.weight.uniform_(-bound, bound)
                if m.bias is not None:
                    bound = math.sqrt(6 / m.out_features)
                    m.bias.uniform_(-bound, bound)
            elif isinstance(m, nn.Conv2d):
                fan_in = m.in_channels * m.kernel_size[0] * m.kernel_size[1]
                m.weight.uniform_(-math.sqrt(6 / fan_in), math.sqrt(6 / fan_in))
                m.bias.uniform_(-1 / math.sqrt(fan_in), 1 / math.sqrt(fan_in))


def torch_optimizer(params, model_name: str):
    import torch
    name, lr, momentum, wd = SPECS[model_name]["opt"]
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=wd)
    # the course's dampened momentum, exactly (see the module's docstring)
    return torch.optim.SGD(params, lr=lr * (1 - momentum), momentum=momentum, weight_decay=wd)


def torch_case(model_name: str, compiled: bool = False):
    """(step, inputs) for torch eager, or torch.compile (forward + loss, and the optimizer step)."""
    import torch
    F = torch.nn.functional
    torch.manual_seed(0)
    data = make_data(model_name)
    if model_name == "tiny":
        def add(a, b):
            return a + b
        fn = torch.compile(add) if compiled else add
        return (lambda a, b: fn(a, b)), tuple(torch.as_tensor(a) for a in data)
    model = torch_model(model_name)
    needle_init(model)
    model.train()
    opt = torch_optimizer(model.parameters(), model_name)
    x, y = (torch.as_tensor(a) for a in data)

    if model_name == "lstm":
        spec = SPECS["lstm"]
        zeros = torch.zeros(spec["layers"], spec["batch"], spec["hidden"])
        state = {"h": (zeros, zeros.clone())}  # zeros, as None would mean: the same shapes at every call

        def forward_loss(x, y, h):
            out, h = model(x, h)
            return F.cross_entropy(out, y), h
    else:
        state = None

        def forward_loss(x, y):
            return F.cross_entropy(model(x), y)

    def optimizer_step():
        opt.step()

    if compiled:
        forward_loss = torch.compile(forward_loss)
        optimizer_step = torch.compile(optimizer_step, fullgraph=False)

    if model_name == "lstm":
        def step(x, y):
            opt.zero_grad()
            loss, h = forward_loss(x, y, state["h"])
            loss.backward()
            optimizer_step()
            state["h"] = tuple(t.detach() for t in h)
            return loss.item()
    else:
        def step(x, y):
            opt.zero_grad()
            loss = forward_loss(x, y)
            loss.backward()
            optimizer_step()
            return loss.item()
    return step, (x, y)


# ---- jax ------------------------------------------------------------------------------------
# Layers are pairs of functions: an initializer returning a dict of parameters (needle's
# distributions: the module's docstring), and a plain function of (params, inputs).
def _uniform(rng, shape, bound):
    return rng.uniform(-bound, bound, shape).astype("float32")


def _kaiming(rng, shape, fan_in):
    return _uniform(rng, shape, math.sqrt(6 / fan_in))


def _linear_init(rng, a, b, bias=True):
    p = {"w": _kaiming(rng, (a, b), a)}
    if bias:
        p["b"] = _kaiming(rng, (b,), b)
    return p


def _linear(p, x):
    y = x @ p["w"]
    return y + p["b"] if "b" in p else y


def _norm_init(n):
    return {"w": np.ones(n, "float32"), "b": np.zeros(n, "float32")}


def _bn_stats(n):
    return {"mean": np.zeros(n, "float32"), "var": np.ones(n, "float32")}


def _batchnorm(p, stats, x, axes, momentum=0.1, eps=1e-5):
    """Train mode: normalize with the batch's statistics, update the running ones
    (needle's rule: running = (1 - momentum) running + momentum batch, biased variance)."""
    import jax
    import jax.numpy as jnp
    mean = jnp.mean(x, axes)
    var = jnp.mean(jnp.square(x - jnp.expand_dims(mean, axes)), axes)
    shape = [1] * x.ndim
    shape[1] = -1
    y = (x - mean.reshape(shape)) * jax.lax.rsqrt(var.reshape(shape) + eps) * p["w"].reshape(shape) + p["b"].reshape(shape)
    new = {"mean": (1 - momentum) * stats["mean"] + momentum * jax.lax.stop_gradient(mean),
           "var": (1 - momentum) * stats["var"] + momentum * jax.lax.stop_gradient(var)}
    return y, new


def _layernorm(p, x, eps=1e-5):
    import jax
    import jax.numpy as jnp
    mean = jnp.mean(x, -1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), -1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * p["w"] + p["b"]


def _dropout(key, x, rate):
    import jax
    import jax.numpy as jnp
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


def _conv_init(rng, a, b, k):
    return {"w": _kaiming(rng, (b, a, k, k), a * k * k), "b": _uniform(rng, (b,), 1 / math.sqrt(a * k * k))}


def _conv(p, x, stride=1):
    """NCHW, OIHW weights, padding k // 2 (needle's Conv)."""
    import jax
    pad = p["w"].shape[-1] // 2
    y = jax.lax.conv_general_dilated(x, p["w"], (stride, stride), [(pad, pad), (pad, pad)],
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"))
    return y + p["b"][None, :, None, None]


def _maxpool2(x):
    import jax
    import jax.numpy as jnp
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")


def jax_model(model_name: str):
    """(params, state, apply, dropout sites): apply(params, state, x, keys) -> (logits, new state),
    `keys` a sequence of PRNG keys, one per Dropout site."""
    import jax
    import jax.numpy as jnp
    relu = jax.nn.relu
    spec = SPECS[model_name]
    rng = np.random.default_rng(0)

    if model_name == "mlp":
        params = {"l1": _linear_init(rng, 784, 256), "l2": _linear_init(rng, 256, 10)}

        def apply(p, s, x, keys):
            return _linear(p["l2"], relu(_linear(p["l1"], x))), s
        return params, {}, apply, 0

    if model_name == "mlpresnet":
        h, blocks = spec["hidden"], spec["blocks"]
        params = {"in": _linear_init(rng, 784, h), "out": _linear_init(rng, h, 10),
                  "blocks": [{"l1": _linear_init(rng, h, h // 2), "bn1": _norm_init(h // 2),
                              "l2": _linear_init(rng, h // 2, h), "bn2": _norm_init(h)} for _ in range(blocks)]}
        state = {"blocks": [{"bn1": _bn_stats(h // 2), "bn2": _bn_stats(h)} for _ in range(blocks)]}

        def apply(p, s, x, keys):
            x = relu(_linear(p["in"], x))
            new = []
            for b, bs, key in zip(p["blocks"], s["blocks"], keys):
                y, s1 = _batchnorm(b["bn1"], bs["bn1"], _linear(b["l1"], x), (0,))
                y = _dropout(key, relu(y), spec["drop"])
                y, s2 = _batchnorm(b["bn2"], bs["bn2"], _linear(b["l2"], y), (0,))
                x = relu(x + y)
                new.append({"bn1": s1, "bn2": s2})
            return _linear(p["out"], x), {"blocks": new}
        return params, state, apply, blocks

    if model_name == "cnn":
        params = {"c1": _conv_init(rng, 1, 16, 3), "bn1": _norm_init(16), "c2": _conv_init(rng, 16, 32, 3),
                  "bn2": _norm_init(32), "out": _linear_init(rng, 32 * 7 * 7, 10)}
        state = {"bn1": _bn_stats(16), "bn2": _bn_stats(32)}

        def apply(p, s, x, keys):
            x = x.reshape(x.shape[0], 1, 28, 28)
            y, s1 = _batchnorm(p["bn1"], s["bn1"], _conv(p["c1"], x), (0, 2, 3))
            y = _maxpool2(relu(y))
            y, s2 = _batchnorm(p["bn2"], s["bn2"], _conv(p["c2"], y), (0, 2, 3))
            y = _maxpool2(relu(y))
            return _linear(p["out"], y.reshape(y.shape[0], -1)), {"bn1": s1, "bn2": s2}
        return params, state, apply, 0

    if model_name == "resnet9":
        layout = [(3, 16, 7, 4), (16, 32, 3, 2), (32, 32, 3, 1), (32, 32, 3, 1), (32, 64, 3, 2), (64, 128, 3, 2),
                  (128, 128, 3, 1), (128, 128, 3, 1)]
        params = {"convs": [{"conv": _conv_init(rng, a, b, k), "bn": _norm_init(b)} for a, b, k, _ in layout],
                  "l1": _linear_init(rng, 128, 128), "l2": _linear_init(rng, 128, 10)}
        state = {"convs": [_bn_stats(b) for _, b, _, _ in layout]}
        strides = [s for *_, s in layout]

        def apply(p, s, x, keys):
            new = []

            def cbn(i, x):
                y, st = _batchnorm(p["convs"][i]["bn"], s["convs"][i], _conv(p["convs"][i]["conv"], x, strides[i]), (0, 2, 3))
                new.append(st)
                return relu(y)
            x = cbn(1, cbn(0, x))
            x = x + cbn(3, cbn(2, x))
            x = cbn(5, cbn(4, x))
            x = x + cbn(7, cbn(6, x))
            x = relu(_linear(p["l1"], x.reshape(x.shape[0], -1)))
            return _linear(p["l2"], x), {"convs": new}
        return params, state, apply, 0

    if model_name == "lstm":
        vocab, emb, hid, layers, batch = (spec[k] for k in ("classes", "embedding", "hidden", "layers", "batch"))
        params = {"emb": rng.standard_normal((vocab, emb)).astype("float32"),
                  "lstm": [{"w_ih": _uniform(rng, (a, 4 * hid), 1 / math.sqrt(hid)),
                            "w_hh": _uniform(rng, (hid, 4 * hid), 1 / math.sqrt(hid)),
                            "b_ih": _uniform(rng, (4 * hid,), 1 / math.sqrt(hid)),
                            "b_hh": _uniform(rng, (4 * hid,), 1 / math.sqrt(hid))}
                           for a in [emb] + [hid] * (layers - 1)],
                  "out": _linear_init(rng, hid, vocab)}
        state = {"h": np.zeros((layers, batch, hid), "float32"), "c": np.zeros((layers, batch, hid), "float32")}

        def apply(p, s, x, keys):
            seq = p["emb"][x]  # (T, B, emb)
            hs, cs = [], []
            for i, lp in enumerate(p["lstm"]):
                xw = seq @ lp["w_ih"] + lp["b_ih"] + lp["b_hh"]  # every step's input projection at once

                def cell(carry, xw_t, lp=lp):
                    h, c = carry
                    gates = xw_t + h @ lp["w_hh"]
                    i_, f_, g_, o_ = jnp.split(gates, 4, axis=-1)  # torch's and the course's gate order
                    c = jax.nn.sigmoid(f_) * c + jax.nn.sigmoid(i_) * jnp.tanh(g_)
                    h = jax.nn.sigmoid(o_) * jnp.tanh(c)
                    return (h, c), h
                (h, c), seq = jax.lax.scan(cell, (s["h"][i], s["c"][i]), xw)
                hs.append(h)
                cs.append(c)
            out = _linear(p["out"], seq.reshape(-1, hid))
            return out, {"h": jax.lax.stop_gradient(jnp.stack(hs)), "c": jax.lax.stop_gradient(jnp.stack(cs))}
        return params, state, apply, 0

    if model_name == "transformer":
        vocab, d, hidden, heads, dh, drop, nl = (spec[k] for k in ("classes", "embedding", "hidden", "heads", "dim_head",
                                                                   "drop", "layers"))
        inner = heads * dh
        params = {"emb": rng.standard_normal((vocab, d)).astype("float32"),
                  "pos": rng.standard_normal((spec["seq"], d)).astype("float32"),
                  "layers": [{"nq": _norm_init(d), "nk": _norm_init(d), "nv": _norm_init(d),
                              "wq": _kaiming(rng, (d, inner), d), "wk": _kaiming(rng, (d, inner), d),
                              "wv": _kaiming(rng, (d, inner), d), "wo": _kaiming(rng, (inner, d), inner),
                              "l1": _linear_init(rng, d, hidden), "l2": _linear_init(rng, hidden, d),
                              "ln": _norm_init(d)} for _ in range(nl)],
                  "out": _linear_init(rng, d, vocab)}
        causal = np.tril(np.ones((spec["seq"], spec["seq"]), bool))

        def attention(lp, x, key):
            b, t, _ = x.shape

            def project(norm, w):
                return (_layernorm(lp[norm], x) @ lp[w]).reshape(b, t, heads, dh).transpose(0, 2, 1, 3)
            q, k, v = project("nq", "wq"), project("nk", "wk"), project("nv", "wv")
            scores = (q @ k.transpose(0, 1, 3, 2)) / math.sqrt(dh)
            scores = jnp.where(causal[:t, :t], scores, -np.finfo(np.float32).max)
            probs = _dropout(key, jax.nn.softmax(scores, axis=-1), drop)
            return (probs @ v).transpose(0, 2, 1, 3).reshape(b, t, inner) @ lp["wo"]

        def apply(p, s, x, keys):
            t, b = x.shape
            h = p["emb"][x].transpose(1, 0, 2) + p["pos"][:t][None]
            for i, lp in enumerate(p["layers"]):
                k_attn, k1, k2, k3 = keys[4 * i: 4 * i + 4]
                h = h + _dropout(k1, attention(lp, h, k_attn), drop)
                y = _dropout(k2, relu(_linear(lp["l1"], _layernorm(lp["ln"], h))), drop)
                h = h + _dropout(k3, _linear(lp["l2"], y), drop)
            return _linear(p["out"], h.transpose(1, 0, 2).reshape(t * b, d)), s
        return params, {}, apply, 4 * nl
    raise ValueError(f"no jax model {model_name!r}")


def jax_optimizer(model_name: str):
    import optax
    name, lr, momentum, wd = SPECS[model_name]["opt"]
    if name == "adam":
        return optax.chain(optax.add_decayed_weights(wd), optax.adam(lr)) if wd else optax.adam(lr)
    sgd = optax.sgd(lr * (1 - momentum), momentum=momentum or None)  # the course's rule, exactly
    return optax.chain(optax.add_decayed_weights(wd), sgd) if wd else sgd


def jax_case(model_name: str):
    """(step, inputs): a jax.jit'ed train_step(params, opt_state, batch_stats, x, y, key) with
    value_and_grad and optax; params, optimizer state and batch_stats are donated."""
    import jax
    import jax.numpy as jnp
    import optax
    data = make_data(model_name)
    if model_name == "tiny":
        add = jax.jit(lambda a, b: a + b)
        return (lambda a, b: add(a, b).block_until_ready()), tuple(jnp.asarray(a) for a in data)

    params, batch_stats, apply, n_keys = jax_model(model_name)
    tx = jax_optimizer(model_name)

    def loss_fn(params, batch_stats, x, y, keys):
        logits, new_stats = apply(params, batch_stats, x, keys)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), new_stats

    def train_step(params, opt_state, batch_stats, x, y, key):
        key, *keys = jax.random.split(key, n_keys + 1)
        (loss, batch_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch_stats, x, y, keys)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, batch_stats, key, loss

    train_step = jax.jit(train_step, donate_argnums=(0, 1, 2))
    params = jax.tree_util.tree_map(jnp.asarray, params)
    carry = {"params": params, "opt_state": tx.init(params),
             "batch_stats": jax.tree_util.tree_map(jnp.asarray, batch_stats), "key": jax.random.PRNGKey(0)}
    x, y = jnp.asarray(data[0]), jnp.asarray(data[1].astype("int32"))

    def step(x, y):
        c = carry
        c["params"], c["opt_state"], c["batch_stats"], c["key"], loss = train_step(
            c["params"], c["opt_state"], c["batch_stats"], x, y, c["key"])
        return float(loss)
    return step, (x, y)
