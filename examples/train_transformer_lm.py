"""Train the course's Transformer language model on a small corpus that every Debian
system has (the GPL and LGPL texts in /usr/share/common-licenses), and report perplexity.

The text is first written as a Penn-Treebank-style corpus (lowercased words and
punctuation separated by spaces, one line per text line, words seen once replaced by
`<unk>`; train.txt / valid.txt / test.txt), so that the course's `Corpus`, `batchify`,
`train_ptb` and `evaluate_ptb` read it exactly as they read PTB.  Every tenth line goes
to the test part and the one before it to the validation part, so that all parts
sample the same kinds of text.

    python examples/train_transformer_lm.py --epochs 5
"""
from __future__ import annotations

import argparse
import collections
import math
import os
import re
import sys
import tempfile
import time
from typing import List, Optional, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import needle as ndl  # noqa: E402
from models import LanguageModel  # noqa: E402
from simple_ml import evaluate_ptb, train_ptb  # noqa: E402

DEFAULT_SOURCES = ("/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/GPL-2",
                   "/usr/share/common-licenses/LGPL-2.1")
_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?|[^\sa-z0-9]")


def tokenize_line(line: str) -> List[str]:
    """Lowercased words, numbers and single punctuation marks."""
    return _TOKEN.findall(line.lower())


def make_ptb_corpus(sources: Sequence[str], out_dir: str, every: int = 10, min_count: int = 2) -> str:
    """Write out_dir/{train,valid,test}.txt from the text files `sources`: non-empty lines,
    tokens separated by single spaces, tokens rarer than `min_count` (counted on the
    training part) as `<unk>`; of every `every` lines the last is a test line, the one
    before it a validation line.  Returns out_dir."""
    lines: List[List[str]] = []
    for source in sources:
        with open(source, encoding="utf-8") as f:
            lines.extend(t for t in (tokenize_line(line) for line in f) if t)
    test = [t for i, t in enumerate(lines) if i % every == every - 1]
    valid = [t for i, t in enumerate(lines) if i % every == every - 2]
    train = [t for i, t in enumerate(lines) if i % every < every - 2]
    counts = collections.Counter(w for line in train for w in line)
    os.makedirs(out_dir, exist_ok=True)
    for name, part in (("train.txt", train), ("valid.txt", valid), ("test.txt", test)):
        with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
            for line in part:
                f.write(" " + " ".join(w if counts[w] >= min_count else "<unk>" for w in line) + " \n")
    return out_dir


def run(args: argparse.Namespace) -> dict:
    """Train and evaluate; returns the perplexities per epoch and the time per epoch."""
    corpus_dir = args.corpus or make_ptb_corpus(args.source, tempfile.mkdtemp(prefix="needle-ptb-"))
    corpus = ndl.data.Corpus(corpus_dir)
    device = {"cpu": ndl.cpu, "cpu_numpy": ndl.cpu_numpy, "cuda": ndl.cuda}[args.device]()
    train_data = ndl.data.batchify(corpus.train, args.batch_size, device, "float32")
    test_data = ndl.data.batchify(corpus.test, args.batch_size, device, "float32")
    print(f"corpus: {len(corpus.train)} training and {len(corpus.test)} test tokens, "
          f"{len(corpus.dictionary)} words ({corpus_dir})")
    np.random.seed(args.seed)
    model = LanguageModel(args.embedding, len(corpus.dictionary), args.hidden, num_layers=args.layers,
                          seq_model="transformer", seq_len=args.seq_len, device=device)
    _, loss = evaluate_ptb(model, test_data, seq_len=args.seq_len, device=device)
    history = {"test_ppl": [math.exp(loss)], "train_ppl": [], "epoch_seconds": []}
    print(f"epoch 0  test perplexity {math.exp(loss):9.2f}")
    for epoch in range(1, args.epochs + 1):
        t0 = time.perf_counter()
        _, train_loss = train_ptb(model, train_data, seq_len=args.seq_len, n_epochs=1, optimizer=ndl.optim.Adam,
                                  lr=args.lr, clip=args.clip, device=device)
        seconds = time.perf_counter() - t0
        _, loss = evaluate_ptb(model, test_data, seq_len=args.seq_len, device=device)
        history["train_ppl"].append(math.exp(train_loss))
        history["test_ppl"].append(math.exp(loss))
        history["epoch_seconds"].append(seconds)
        print(f"epoch {epoch}  train perplexity {math.exp(train_loss):9.2f}  test perplexity "
              f"{math.exp(loss):9.2f}  time {seconds:.1f}s", flush=True)
    return history


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--source", nargs="+", default=list(DEFAULT_SOURCES),
                   help=f"text files to learn (default: {' '.join(DEFAULT_SOURCES)})")
    p.add_argument("--corpus", default=None, help="an existing PTB-style folder instead of --source")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--embedding", type=int, default=64)
    p.add_argument("--hidden", type=int, default=128, help="feed-forward width of each layer")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=("cpu", "cpu_numpy", "cuda"), default="cpu")
    return p.parse_args(argv)


if __name__ == "__main__":
    run(parse_args())
