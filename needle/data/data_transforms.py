"""Data augmentation on single images stored H x W x C (numpy), as in the course.

Randomness comes from numpy's global RNG with the course's exact draws, so seeded
code reproduces the course's augmented images.
"""
from __future__ import annotations

import numpy as np

from ..errors import ArgumentError


class Transform:
    """A callable that maps one example (a numpy array) to another."""

    def __call__(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError()


class RandomFlipHorizontal(Transform):
    """Flip the image left-right (axis 1, the width) with probability p."""

    def __init__(self, p: float = 0.5):
        self.p = p

    def __call__(self, img: np.ndarray) -> np.ndarray:
        flip_img = np.random.rand() < self.p
        return np.flip(img, axis=1) if flip_img else img


class RandomCrop(Transform):
    """Zero-pad by `padding` on each side of H and W, then crop back to H x W
    shifted by (shift_x, shift_y) drawn uniformly from [-padding, padding]:
    out[i, j] = img[i + shift_x, j + shift_y] where that lies inside, else 0."""

    def __init__(self, padding: int = 3):
        if isinstance(padding, bool) or not isinstance(padding, (int, np.integer)) or padding < 0:
            raise ArgumentError(f"RandomCrop: padding must be a non-negative integer, got {padding!r}")
        self.padding = int(padding)

    def __call__(self, img: np.ndarray) -> np.ndarray:
        shift_x, shift_y = np.random.randint(low=-self.padding, high=self.padding + 1, size=2)
        H, W = img.shape[0], img.shape[1]
        p = self.padding
        pad_width = ((p, p), (p, p)) + ((0, 0),) * (img.ndim - 2)
        padded = np.pad(img, pad_width, mode="constant")
        return padded[p + shift_x:p + shift_x + H, p + shift_y:p + shift_y + W]
