"""needle.nn: layers as Modules, with the course's names and semantics (hw2, hw4).

nn_module: Module, Parameter (the tree walk, state_dict); nn_basic: dense layers,
losses, normalization, Dropout; nn_conv: Conv, MaxPool2d; nn_sequence: Embedding
and the recurrent layers.
"""
from .nn_module import Module, Parameter, StateDictKeyError
from .nn_basic import (BatchNorm1d, BatchNorm2d, CrossEntropyLoss, Dropout, Flatten, Identity, LayerNorm1d,
                       Linear, MSELoss, ReLU, Residual, Sequential, Sigmoid, Softmax, SoftmaxLoss, Tanh)
from .nn_conv import Conv, MaxPool2d
from .nn_sequence import LSTM, RNN, Embedding, LSTMCell, RNNCell
from .nn_transformer import AttentionLayer, MultiHeadAttention, Transformer, TransformerLayer
from . import utils

__all__ = ["Module", "Parameter", "StateDictKeyError", "Identity", "Linear", "Flatten", "ReLU", "Tanh",
           "Sigmoid", "Softmax", "Sequential", "Residual", "SoftmaxLoss", "CrossEntropyLoss", "MSELoss",
           "BatchNorm1d", "BatchNorm2d", "LayerNorm1d", "Dropout", "Conv", "MaxPool2d", "Embedding",
           "RNNCell", "RNN", "LSTMCell", "LSTM", "MultiHeadAttention", "AttentionLayer", "TransformerLayer",
           "Transformer"]
