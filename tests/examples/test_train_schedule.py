"""`python -m needle train --schedule`: the learning rate each epoch trains at, against
the cosine formula lr * (1 + cos(pi * e / epochs)) / 2 worked out by hand."""
import pytest

from needle.cli import train
from tests.examples.test_train import write_idx_dir


@pytest.mark.parametrize("schedule, rates", [("cosine", [0.1, 0.075, 0.025]), ("constant", [0.1, 0.1, 0.1])])
def test_learning_rate_per_epoch(tmp_path, monkeypatch, schedule, rates):
    data = write_idx_dir(tmp_path / "data", n_train=120, n_test=20)
    seen = []
    real_epoch = train.train_epoch

    def recording_epoch(model, loader, opt, **kwargs):
        seen.append(opt.lr)
        return real_epoch(model, loader, opt, **kwargs)

    monkeypatch.setattr(train, "train_epoch", recording_epoch)
    train.run(train.defaults(data=data, model="softmax", epochs=3, batch_size=10, optimizer="sgd", lr=0.1,
                             schedule=schedule, no_progress=True))
    assert seen == pytest.approx(rates)
