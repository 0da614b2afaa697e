"""needle.data: datasets, the DataLoader and data augmentation (course layout)."""
from .data_basic import DataLoader, Dataset, collate  # noqa: F401
from .distributed_sampler import DistributedSampler  # noqa: F401
from .data_transforms import RandomCrop, RandomFlipHorizontal, Transform  # noqa: F401
from .datasets import MNISTDataset, NDArrayDataset, parse_mnist, read_idx, read_mnist  # noqa: F401
from .datasets import CIFAR10Dataset, Corpus, Dictionary, batchify, get_batch  # noqa: F401
