"""examples/train_transformer_lm.py: the PTB-format corpus it writes, and a short
training run whose test perplexity falls."""
import math

import needle as ndl
from examples import train_transformer_lm as lm

TEXT = """The quick brown fox jumps over the lazy dog.
The dog sleeps; the fox runs away!

A lazy dog and a quick fox, again and again.
"""


def test_make_ptb_corpus_writes_the_ptb_layout(tmp_path):
    source = tmp_path / "text.txt"
    source.write_text(TEXT * 5)
    out = lm.make_ptb_corpus([str(source)], str(tmp_path / "corpus"), every=5)
    files = {name: (tmp_path / "corpus" / name).read_text().splitlines() for name in ("train.txt", "valid.txt",
                                                                                     "test.txt")}
    # 15 non-empty lines: of every 5, 3 train, 1 valid, 1 test
    assert len(files["train.txt"]) == 9 and len(files["valid.txt"]) == 3 and len(files["test.txt"]) == 3
    assert files["train.txt"][0] == " the quick brown fox jumps over the lazy dog . "
    assert files["train.txt"][1] == " the dog sleeps ; the fox runs away ! "
    assert files["valid.txt"][0] == " the quick brown fox jumps over the lazy dog . "  # line 4 of 15
    assert files["test.txt"][0] == " the dog sleeps ; the fox runs away ! "  # line 5
    corpus = ndl.data.Corpus(out)
    assert corpus.dictionary.idx2word[:3] == ["the", "quick", "brown"]
    assert "<unk>" not in corpus.dictionary.word2idx  # every word occurs at least twice


def test_rare_words_become_unk(tmp_path):
    source = tmp_path / "text.txt"
    source.write_text("a b a\na c a\na b a\nz z\n")
    lm.make_ptb_corpus([str(source)], str(tmp_path / "c"), every=4)
    assert (tmp_path / "c" / "train.txt").read_text().splitlines()[1] == " a <unk> a "


def test_a_short_run_lowers_the_perplexity(tmp_path):
    source = tmp_path / "text.txt"
    source.write_text(TEXT * 12)
    args = lm.parse_args(["--source", str(source), "--epochs", "3", "--batch-size", "4", "--seq-len", "8",
                          "--embedding", "16", "--hidden", "16", "--layers", "1", "--lr", "0.01",
                          "--device", "cpu_numpy"])  # numpy op by op: no kernels to compile
    history = lm.run(args)
    assert len(history["test_ppl"]) == 4 and all(math.isfinite(p) for p in history["test_ppl"])
    assert history["test_ppl"][-1] < 0.5 * history["test_ppl"][0]
