"""The course's hw4 models: ResNet9 for CIFAR-10 and a word-level LanguageModel.

Importable as a module (`from examples.models import ResNet9`) or, when the
examples folder is on the path, as `models`.
"""
from __future__ import annotations

from typing import Optional, Tuple, Union

import needle as ndl
import needle.nn as nn


class ConvBN(nn.Module):
    """Conv -> BatchNorm2d -> ReLU, the building block of ResNet9."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int,
                 device=None, dtype: str = "float32") -> None:
        super().__init__()
        self.conv = nn.Conv(in_channels, out_channels, kernel_size, stride=stride, device=device, dtype=dtype)
        self.bn = nn.BatchNorm2d(out_channels, device=device, dtype=dtype)
        self.relu = nn.ReLU()

    def forward(self, x: ndl.Tensor) -> ndl.Tensor:
        return self.relu(self.bn(self.conv(x)))


class ResNet9(nn.Module):
    """(N, 3, 32, 32) images -> (N, 10) logits; 431,946 parameters, as in the course."""

    def __init__(self, device=None, dtype: str = "float32") -> None:
        super().__init__()

        def block(a: int, b: int, k: int, s: int) -> ConvBN:
            return ConvBN(a, b, k, s, device=device, dtype=dtype)

        self.model = nn.Sequential(
            block(3, 16, 7, 4),
            block(16, 32, 3, 2),
            nn.Residual(nn.Sequential(block(32, 32, 3, 1), block(32, 32, 3, 1))),
            block(32, 64, 3, 2),
            block(64, 128, 3, 2),
            nn.Residual(nn.Sequential(block(128, 128, 3, 1), block(128, 128, 3, 1))),
            nn.Flatten(),
            nn.Linear(128, 128, device=device, dtype=dtype),
            nn.ReLU(),
            nn.Linear(128, 10, device=device, dtype=dtype),
        )

    def forward(self, x: ndl.Tensor) -> ndl.Tensor:
        return self.model(x)


class LanguageModel(nn.Module):
    """Embedding -> RNN, LSTM or Transformer -> Linear over the vocabulary.

    forward(x, h=None): x (seq_len, batch) of word ids -> (logits (seq_len * batch,
    output_size), h), where h is the sequence model's final state (h_n for the RNN,
    (h_n, c_n) for the LSTM, zeros for the Transformer), to be fed back (detached)
    for the next chunk.  The Transformer works at the embedding width (its
    `hidden_size` is the width of its feed-forward layers) and attends causally
    over at most `seq_len` positions."""

    def __init__(self, embedding_size: int, output_size: int, hidden_size: int, num_layers: int = 1,
                 seq_model: str = "rnn", seq_len: int = 40, device=None, dtype: str = "float32") -> None:
        super().__init__()
        if seq_model not in ("rnn", "lstm", "transformer"):
            raise ValueError(f"LanguageModel: seq_model must be 'rnn', 'lstm' or 'transformer', got {seq_model!r}")
        self.embedding_size = embedding_size
        self.output_size = output_size
        self.hidden_size = hidden_size
        self.seq_len = seq_len
        self.embedding = nn.Embedding(output_size, embedding_size, device=device, dtype=dtype)
        if seq_model == "transformer":
            self.seq_model = nn.Transformer(embedding_size, hidden_size, num_layers, device=device, dtype=dtype,
                                            sequence_len=seq_len)
            self.out_size = embedding_size
        else:
            sequence = nn.RNN if seq_model == "rnn" else nn.LSTM
            self.seq_model = sequence(embedding_size, hidden_size, num_layers, device=device, dtype=dtype)
            self.out_size = hidden_size
        self.linear = nn.Linear(self.out_size, output_size, device=device, dtype=dtype)

    def forward(self, x: ndl.Tensor, h: Optional[Union[ndl.Tensor, Tuple[ndl.Tensor, ndl.Tensor]]] = None):
        seq_len, bs = x.shape
        out, h = self.seq_model(self.embedding(x), h)
        return self.linear(out.reshape((seq_len * bs, self.out_size))), h
