"""Word-level language-model data in the Penn Treebank layout, as the course reads it.

A corpus folder holds `train.txt` and `test.txt` (and `valid.txt`, which the course
never reads): one sentence per line, words separated by whitespace.  Every line
becomes its words followed by `<eos>`, each word an id from one shared Dictionary.
`batchify` lays the id stream out in columns and `get_batch` cuts it into chunks of
`bptt` time steps with next-word targets.
"""
from __future__ import annotations

import os
from typing import List, Optional, Tuple

import numpy as np

from ...autograd import Tensor
from ...errors import ArgumentError, DataError

EOS = "<eos>"


class Dictionary:
    """Word <-> id: `word2idx` (dict), `idx2word` (list); ids are given in order of first sight."""

    def __init__(self) -> None:
        self.word2idx: dict = {}
        self.idx2word: List[str] = []

    def add_word(self, word: str) -> int:
        """The word's id, giving it the next free id if it is new."""
        idx = self.word2idx.get(word)
        if idx is None:
            idx = self.word2idx[word] = len(self.idx2word)
            self.idx2word.append(word)
        return idx

    def __len__(self) -> int:
        return len(self.idx2word)


class Corpus:
    """`train` and `test` id lists from base_dir/train.txt and base_dir/test.txt (in that
    order, one Dictionary), each cut to its first `max_lines` lines when given."""

    def __init__(self, base_dir: str, max_lines: Optional[int] = None) -> None:
        if max_lines is not None and (isinstance(max_lines, bool) or not isinstance(max_lines, (int, np.integer))
                                      or max_lines < 0):
            raise ArgumentError(f"Corpus: max_lines must be None or a non-negative integer, got {max_lines!r}")
        self.dictionary = Dictionary()
        self.train = self.tokenize(os.path.join(os.fspath(base_dir), "train.txt"), max_lines)
        self.test = self.tokenize(os.path.join(os.fspath(base_dir), "test.txt"), max_lines)

    def tokenize(self, path: str, max_lines: Optional[int] = None) -> List[int]:
        """The ids of the file's words, `<eos>` after each line, adding new words."""
        ids: List[int] = []
        try:
            with open(path, encoding="utf-8") as f:
                for i, line in enumerate(f):
                    if max_lines is not None and i >= max_lines:
                        break
                    for word in line.split() + [EOS]:
                        ids.append(self.dictionary.add_word(word))
        except FileNotFoundError:
            raise DataError(f"{path}: no such file (a PTB-style corpus folder holds train.txt and test.txt)") from None
        except (OSError, UnicodeDecodeError) as e:
            raise DataError(f"{path}: cannot read the text ({e})") from None
        return ids


def batchify(data, batch_size: int, device=None, dtype=None) -> np.ndarray:
    """The id stream as `batch_size` columns: (nbatch, batch_size) with nbatch =
    len(data) // batch_size; column j is data[j*nbatch : (j+1)*nbatch]; the tail that
    does not fill a row is dropped.  A numpy array of `dtype` (as the course returns)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ArgumentError(f"batchify: batch_size must be a positive integer, got {batch_size!r}")
    data = np.asarray(data)
    nbatch = len(data) // batch_size
    return np.array(data[:nbatch * batch_size].reshape(batch_size, nbatch).T, dtype=dtype)


def get_batch(batches, i: int, bptt: int, device=None, dtype=None) -> Tuple[Tensor, Tensor]:
    """Rows i .. i+L-1 of `batches` as data (L, batch_size) and rows i+1 .. i+L flattened
    as targets (L * batch_size,), with L = min(bptt, nbatch - 1 - i): the last chunk
    may be short.  Both are constant Tensors (float32 unless `dtype` says otherwise)."""
    batches = np.asarray(batches)
    length = min(int(bptt), len(batches) - 1 - int(i))
    if length < 1 or i < 0:
        raise ArgumentError(f"get_batch: no chunk starts at row {i} of {len(batches)} rows "
                            f"(a chunk needs a next row for its targets)")
    data = batches[i:i + length]
    target = batches[i + 1:i + 1 + length].reshape(-1)
    dtype = dtype or "float32"
    return (Tensor(data, device=device, dtype=dtype, requires_grad=False),
            Tensor(target, device=device, dtype=dtype, requires_grad=False))
