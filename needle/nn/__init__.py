"""needle.nn: layers as Modules, with the course's names and semantics (hw2, hw4).

nn_module: Module, Parameter (the tree walk, state_dict); nn_basic: dense layers,
losses, normalization, Dropout; functional: PyTorch's functional forms; nn_conv: Conv, MaxPool2d; nn_sequence: Embedding
and the recurrent layers.
"""
from .nn_module import Module, Parameter, StateDictKeyError
from .nn_basic import (GELU, BatchNorm1d, BatchNorm2d, CrossEntropyLoss, Dropout, Flatten, Identity, LayerNorm,
                       LayerNorm1d, Linear, MSELoss, ReLU, Residual, Sequential, Sigmoid, Softmax, SoftmaxLoss, Tanh)
from .nn_conv import Conv, MaxPool2d
from .nn_sequence import LSTM, RNN, Embedding, LSTMCell, RNNCell
from .nn_transformer import AttentionLayer, MultiHeadAttention, Transformer, TransformerLayer
from . import functional, utils

__all__ = ["Module", "Parameter", "StateDictKeyError", "Identity", "Linear", "Flatten", "ReLU", "Tanh",
           "Sigmoid", "Softmax", "Sequential", "Residual", "SoftmaxLoss", "CrossEntropyLoss", "MSELoss",
           "BatchNorm1d", "BatchNorm2d", "LayerNorm1d", "LayerNorm", "GELU", "Dropout", "Conv", "MaxPool2d", "Embedding",
           "RNNCell", "RNN", "LSTMCell", "LSTM", "MultiHeadAttention", "AttentionLayer", "TransformerLayer",
           "Transformer"]
