"""Concrete datasets."""
from .mnist_dataset import MNISTDataset, parse_mnist, read_idx, read_mnist  # noqa: F401
from .ndarray_dataset import NDArrayDataset  # noqa: F401
from .cifar10_dataset import CIFAR10Dataset, read_cifar10_batch  # noqa: F401
from .ptb_dataset import Corpus, Dictionary, batchify, get_batch  # noqa: F401
