"""Transforms against direct numpy constructions of the expected images."""
import numpy as np

from needle.data import RandomCrop, RandomFlipHorizontal


def image(h=5, w=4, c=2):
    return np.arange(h * w * c, dtype=np.float32).reshape(h, w, c) + 1


def test_flip_always_and_never():
    img = image()
    np.testing.assert_array_equal(RandomFlipHorizontal(p=1.0)(img), img[:, ::-1, :])
    np.testing.assert_array_equal(RandomFlipHorizontal(p=0.0)(img), img)


def test_flip_draws_rand_like_the_course():
    img = image()
    np.random.seed(1)
    draws = np.random.rand(20)
    np.random.seed(1)
    flip = RandomFlipHorizontal(p=0.5)
    for d in draws:
        expected = img[:, ::-1, :] if d < 0.5 else img
        np.testing.assert_array_equal(flip(img), expected)


def shifted(img, sx, sy):
    """out[i, j] = img[i + sx, j + sy] inside the image, 0 outside — built by loops."""
    H, W = img.shape[:2]
    out = np.zeros_like(img)
    for i in range(H):
        for j in range(W):
            if 0 <= i + sx < H and 0 <= j + sy < W:
                out[i, j] = img[i + sx, j + sy]
    return out


def test_crop_matches_shifted_image():
    img = image(6, 5, 3)
    np.random.seed(2)
    shifts = [np.random.randint(low=-2, high=3, size=2) for _ in range(25)]
    np.random.seed(2)
    crop = RandomCrop(padding=2)
    for sx, sy in shifts:
        out = crop(img)
        assert out.shape == img.shape
        np.testing.assert_array_equal(out, shifted(img, sx, sy))


def test_crop_zero_padding_is_identity():
    img = image()
    np.testing.assert_array_equal(RandomCrop(padding=0)(img), img)


def test_crop_default_padding_covers_all_shifts():
    img = image(8, 8, 1)
    seen = set()
    crop = RandomCrop()
    for _ in range(400):
        out = crop(img)
        for sx in range(-3, 4):
            for sy in range(-3, 4):
                if np.array_equal(out, shifted(img, sx, sy)):
                    seen.add((sx, sy))
    assert seen == {(sx, sy) for sx in range(-3, 4) for sy in range(-3, 4)}
