"""Concrete datasets."""
from .mnist_dataset import MNISTDataset, parse_mnist, read_idx, read_mnist  # noqa: F401
from .ndarray_dataset import NDArrayDataset  # noqa: F401
