"""Train softmax regression and a two-layer MLP on MNIST-format data, one after the other.

    python examples/train_mnist.py --epochs 5                    # Fashion-MNIST if installed
    python examples/train_mnist.py --data DIR --optimizer sgd --lr 0.1

Same options as `python -m needle train` (--model is ignored: both models are
trained); the training code is `needle.cli.train`, so this script only chooses
the models and prints a summary.
Importable: `main(argv)` returns {model name: final metrics}.
"""
from __future__ import annotations

import argparse
import sys
from typing import Dict, List, Optional

from needle.cli import train
from needle.errors import NeedleError

MODELS = ("softmax", "mlp")


def main(argv: Optional[List[str]] = None) -> Dict[str, dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    train.add_arguments(parser)
    args = parser.parse_args(argv)
    results = {}
    for model in MODELS:
        args.model = model
        results[model] = train.run(args)
        print()
    print(f"{'model':<8} {'test acc':>9} {'train loss':>11} {'time':>8}")
    for model, r in results.items():
        print(f"{model:<8} {r['test_acc']:>9.2%} {r['train_loss']:>11.4f} {r['total_time']:>7.1f}s")
    return results


if __name__ == "__main__":
    try:
        main()
    except NeedleError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
