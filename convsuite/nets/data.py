"""Real data with no download: scikit-learn's bundled 8x8 handwritten digits."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["DigitSplit", "load_digits_split"]


@dataclass(frozen=True)
class DigitSplit:
    """A stratified train/test split of the digits, resized for a network.

    Attributes
    ----------
    x_train, x_test : ndarray, shape (N, 1, size, size)
        Intensities scaled to [0, 1].
    y_train, y_test : ndarray of int64, shape (N,)
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def _resize(images: np.ndarray, size: int) -> np.ndarray:
    """8x8 images to ``size x size``: exact pixel replication when it divides, else bilinear."""
    if size % 8 == 0:
        factor = size // 8
        return np.kron(images, np.ones((1, factor, factor), dtype=images.dtype))
    from scipy.ndimage import zoom

    return zoom(images, (1, size / 8, size / 8), order=1, grid_mode=True, mode="nearest")


def load_digits_split(size: int = 32, *, test_fraction: float = 0.25, seed: int = 0, dtype="float32") -> DigitSplit:
    """The 1,797 scikit-learn digits as ``(N, 1, size, size)`` images, split for training.

    Parameters
    ----------
    size : int, default 32
        Side of the resized images (32 for the classic LeNet-5, 86 for ECE408 FA21).
    test_fraction : float, default 0.25
        Share held out for the test accuracy (stratified by class).
    seed : int, default 0
        Seed of the split.
    dtype : str, default 'float32'

    Returns
    -------
    DigitSplit

    Raises
    ------
    ImportError
        scikit-learn is missing (``pip install 'convsuite[nets]'``).
    """
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError as exc:
        raise ImportError(
            "the digits data set comes with scikit-learn; install it with `pip install 'convsuite[nets]'`"
        ) from exc
    if not 0 < test_fraction < 1:
        raise ValueError(f"`test_fraction` must be in (0, 1); got {test_fraction!r}")
    digits = load_digits()
    images = (digits.images / 16.0).astype(dtype)
    x = _resize(images, size)[:, None, :, :].astype(dtype)
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=test_fraction, random_state=seed, stratify=y)
    return DigitSplit(np.ascontiguousarray(x_train), y_train, np.ascontiguousarray(x_test), y_test)
