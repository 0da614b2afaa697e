"""Dictionary, Corpus, batchify and get_batch on a small corpus written here in the Penn
Treebank layout (train.txt / test.txt / valid.txt, one sentence a line).  References:
ids, columns and chunks worked out by hand."""
import numpy as np
import pytest

import needle as ndl
from needle import backend_ndarray as nd
from needle.data import Corpus, Dictionary, batchify, get_batch


@pytest.fixture
def ptb_dir(tmp_path):
    (tmp_path / "train.txt").write_text(" the cat sat \n the dog  sat down\n a cat\n")
    (tmp_path / "test.txt").write_text(" the bird sat \n")
    (tmp_path / "valid.txt").write_text(" never read words \n")
    return str(tmp_path)


def test_dictionary():
    d = Dictionary()
    assert d.add_word("a") == 0 and d.add_word("b") == 1 and d.add_word("a") == 0
    assert d.word2idx == {"a": 0, "b": 1} and d.idx2word == ["a", "b"] and len(d) == 2


def test_corpus_ids_and_eos(ptb_dir):
    c = Corpus(ptb_dir)
    words = ["the", "cat", "sat", "<eos>", "dog", "down", "a", "bird"]
    assert c.dictionary.idx2word == words  # valid.txt is never read
    assert c.train == [0, 1, 2, 3, 0, 4, 2, 5, 3, 6, 1, 3]
    assert c.test == [0, 7, 2, 3]
    assert len(c.dictionary) == 8


def test_corpus_max_lines(ptb_dir):
    c = Corpus(ptb_dir, max_lines=1)
    assert c.train == [0, 1, 2, 3] and c.test == [0, 4, 2, 3]
    assert c.dictionary.idx2word == ["the", "cat", "sat", "<eos>", "bird"]


def test_corpus_missing_file(tmp_path):
    with pytest.raises(ndl.errors.DataError, match="train.txt"):
        Corpus(str(tmp_path))


def test_batchify_fills_columns_and_drops_the_tail():
    out = batchify(list(range(11)), batch_size=3, device=ndl.cpu(), dtype="float32")
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    np.testing.assert_array_equal(out, [[0, 3, 6], [1, 4, 7], [2, 5, 8]])


def test_get_batch_chunks_and_targets():
    batches = batchify(list(range(20)), batch_size=2, device=None, dtype="float32")  # (10, 2)
    X, y = get_batch(batches, 0, 4, device=ndl.cpu())
    assert isinstance(X, ndl.Tensor) and isinstance(X.cached_data, nd.NDArray)
    assert X.dtype == "float32" and y.dtype == "float32"
    np.testing.assert_array_equal(X.numpy(), [[0, 10], [1, 11], [2, 12], [3, 13]])
    np.testing.assert_array_equal(y.numpy(), [1, 11, 2, 12, 3, 13, 4, 14])
    X, y = get_batch(batches, 8, 4)  # the short last chunk: 10 - 1 - 8 = 1 row
    np.testing.assert_array_equal(X.numpy(), [[8, 18]])
    np.testing.assert_array_equal(y.numpy(), [9, 19])
    with pytest.raises(ndl.errors.ArgumentError, match="row 9"):
        get_batch(batches, 9, 4)


def test_corpus_to_batches(ptb_dir):
    c = Corpus(ptb_dir)
    data = batchify(c.train, 4, ndl.cpu(), "float32")
    assert data.shape == (3, 4)
    np.testing.assert_array_equal(data[:, 0], c.train[0:3])
    X, y = get_batch(data, 0, 40)
    assert X.shape == (2, 4) and y.shape == (8,)
