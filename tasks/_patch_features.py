"""Learned patch features for grey images: k-means on whitened patches with the "triangle" activation
(Coates, Lee and Ng, "An analysis of single-layer networks in unsupervised feature learning", AISTATS 2011).

A :class:`PatchCodebook` is fitted on patches drawn from training images (each patch normalised for
brightness and contrast, then ZCA-whitened); an image's activations are, at every pixel, for every
centre ``k``: ``max(0, mean_j(z_j) - z_k)`` with ``z_k`` the distance of the pixel's whitened patch to
centre ``k``. With ``factor > 1`` the codebook sees the image downscaled ``factor`` times (block means),
so its patches cover a ``factor`` times larger neighbourhood, and each full-resolution pixel reads the
activation of the coarse pixel it falls in. The codebook is plain arrays (a saved model keeps them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numpy.lib.stride_tricks import sliding_window_view

from structopt.errors import InvalidInputError

#: regularisers of the contrast normalisation and of the whitening (Coates et al.'s values for [0, 1] pixels)
CONTRAST_EPS = 0.01
WHITEN_EPS = 0.1
#: patches drawn per image to fit a codebook
PATCHES_PER_IMAGE = 400
#: downscaled pixels whose activations are computed at once (memory ~ BLOCK * K * 8 bytes)
BLOCK = 32768
FIELDS = ("mean", "whiten", "centres")


@dataclass(frozen=True)
class PatchCodebook:
    """Whitening and k-means centres of ``patch x patch`` patches of the image downscaled ``factor`` times."""

    factor: int
    patch: int
    mean: np.ndarray     # (patch * patch,) mean of the normalised patches
    whiten: np.ndarray   # (patch * patch, patch * patch) ZCA matrix
    centres: np.ndarray  # (K, patch * patch) in the whitened space

    def to_arrays(self, prefix: str) -> dict[str, np.ndarray]:
        return {f"{prefix}_{name}": np.asarray(getattr(self, name), dtype=np.float64) for name in FIELDS}

    @classmethod
    def from_arrays(cls, arrays: dict, prefix: str, factor: int, source: str) -> PatchCodebook:
        """A codebook read back from ``arrays`` (untrusted: every shape is checked, ``source`` names the file)."""
        values = [arrays.get(f"{prefix}_{name}") for name in FIELDS]
        if any(not isinstance(v, np.ndarray) or v.dtype.kind != "f" or not np.all(np.isfinite(v)) for v in values):
            raise InvalidInputError(f"{source}: the patch codebook {prefix!r} lacks finite float arrays "
                                    f"{', '.join(FIELDS)}")
        mean, whiten, centres = values
        d = mean.size
        patch = round(float(np.sqrt(d)))
        if mean.shape != (patch * patch,) or whiten.shape != (d, d) or centres.ndim != 2 or centres.shape[1] != d \
                or centres.shape[0] < 1 or not isinstance(factor, int | np.integer) or factor < 1:
            raise InvalidInputError(f"{source}: the patch codebook {prefix!r} has inconsistent shapes "
                                    f"{mean.shape}, {whiten.shape}, {centres.shape} (factor {factor})")
        return cls(int(factor), patch, mean, whiten, centres)


def downscale(image: np.ndarray, factor: int) -> np.ndarray:
    """Block means of ``factor x factor`` pixels (the last partial rows and columns dropped; at least 1 x 1)."""
    if factor == 1:
        return image
    H, W = max(image.shape[0] // factor, 1), max(image.shape[1] // factor, 1)
    fh, fw = min(factor, image.shape[0]), min(factor, image.shape[1])
    return image[:H * fh, :W * fw].reshape(H, fh, W, fw).mean(axis=(1, 3))


def _padded(image: np.ndarray, patch: int) -> np.ndarray:
    before, after = patch // 2, patch - 1 - patch // 2
    return np.pad(image, ((before, after), (before, after)), mode="edge")


def _band(padded: np.ndarray, patch: int, first: int, stop: int) -> np.ndarray:
    """The ``patch x patch`` neighbourhoods of the pixels of image rows ``first:stop``, one row per pixel."""
    window = sliding_window_view(padded[first:stop + patch - 1], (patch, patch))
    return window.reshape(window.shape[0] * window.shape[1], patch * patch)


def _patches(image: np.ndarray, patch: int) -> np.ndarray:
    """Every pixel's ``patch x patch`` neighbourhood (edge-padded), one row per pixel."""
    return _band(_padded(image, patch), patch, 0, image.shape[0])


def _normalised(rows: np.ndarray) -> np.ndarray:
    rows = rows - rows.mean(axis=1, keepdims=True)
    return rows / np.sqrt(rows.var(axis=1, keepdims=True) + CONTRAST_EPS)


def fit_patch_codebook(images: Sequence[np.ndarray], factor: int, patch: int, n_centres: int, seed: int
                       ) -> PatchCodebook:
    """Fit a codebook on :data:`PATCHES_PER_IMAGE` random patches of each of ``images`` (grey, in [0, 1])."""
    from sklearn.cluster import MiniBatchKMeans
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(seed)
    sample = []
    for image in images:
        rows = _patches(downscale(np.asarray(image, dtype=np.float64), factor), patch)
        sample.append(rows[rng.choice(len(rows), size=min(PATCHES_PER_IMAGE, len(rows)), replace=False)])
    data = _normalised(np.concatenate(sample))
    if len(data) < n_centres:
        raise InvalidInputError(f"a patch codebook of {n_centres} centres needs at least as many patches, "
                                f"got {len(data)}")
    mean = data.mean(axis=0)
    eigenvalues, vectors = np.linalg.eigh(np.cov(data - mean, rowvar=False))
    whiten = (vectors / np.sqrt(np.maximum(eigenvalues, 0.0) + WHITEN_EPS)) @ vectors.T
    with threadpool_limits(1):  # the machine's cores are shared: OpenMP spinning threads only contend
        km = MiniBatchKMeans(int(n_centres), random_state=seed, n_init=3, batch_size=2048).fit((data - mean) @ whiten)
    return PatchCodebook(int(factor), int(patch), mean, whiten, km.cluster_centers_)


def _triangle(z: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """``max(0, mean_j(d_j) - d_k)`` of the distances ``d`` of the rows of ``z`` to the centres (float32)."""
    # distances through ||z||^2 - 2 z.c + ||c||^2, one matrix product per block
    dist = (z * z).sum(axis=1)[:, None] - 2.0 * (z @ centres.T) + (centres * centres).sum(axis=1)[None, :]
    np.sqrt(np.maximum(dist, 0.0, out=dist), out=dist)
    return np.maximum(dist.mean(axis=1, keepdims=True) - dist, 0.0).astype(np.float32)


def _coarse_index(shape: tuple[int, int], small: tuple[int, int], factor: int) -> np.ndarray:
    """The downscaled pixel (flat index) every full-resolution pixel reads."""
    rows = np.minimum(np.arange(shape[0]) // factor, small[0] - 1)
    cols = np.minimum(np.arange(shape[1]) // factor, small[1] - 1)
    return (rows[:, None] * small[1] + cols[None, :]).ravel()


def patch_activations(image: np.ndarray, codebook: PatchCodebook) -> np.ndarray:
    """Triangle activations ``(H * W, K)`` (float32) of every full-resolution pixel of ``image`` (H, W).

    Holds ``H * W * K`` numbers; :func:`pooled_activations` pools them block by block instead."""
    image = np.asarray(image, dtype=np.float64)
    small = downscale(image, codebook.factor)
    act = _triangle((_normalised(_patches(small, codebook.patch)) - codebook.mean) @ codebook.whiten,
                    codebook.centres)
    return act if codebook.factor == 1 else act[_coarse_index(image.shape, small.shape, codebook.factor)]


def pooled_activations(image: np.ndarray, codebook: PatchCodebook, pool: sp.spmatrix, block: int = BLOCK
                       ) -> np.ndarray:
    """``pool @ patch_activations(image, codebook)`` (float64, ``(N, K)`` for a ``(N, H * W)`` pooling matrix)
    without the full-resolution activations: the pooling is moved to the downscaled pixels and the
    activations are computed ``block`` of those pixels at a time, so memory stays ``O(block * K)`` for
    images of any size."""
    image = np.asarray(image, dtype=np.float64)
    small = downscale(image, codebook.factor)
    n_small = small.shape[0] * small.shape[1]
    pool = sp.csr_matrix(pool)
    if codebook.factor != 1:  # pixel p reads coarse pixel index[p]: pool @ one-hot(index) pools the coarse pixels
        index = _coarse_index(image.shape, small.shape, codebook.factor)
        pool = pool @ sp.csr_matrix((np.ones(index.size), (np.arange(index.size), index)),
                                    shape=(index.size, n_small))
    pool = pool.tocsc()
    padded = _padded(small, codebook.patch)
    width = small.shape[1]
    band = max(1, block // width)  # image rows per block: their pixels are contiguous in the flat order
    out = np.zeros((pool.shape[0], codebook.centres.shape[0]))
    for first in range(0, small.shape[0], band):
        stop = min(first + band, small.shape[0])
        z = (_normalised(_band(padded, codebook.patch, first, stop)) - codebook.mean) @ codebook.whiten
        out += pool[:, first * width:stop * width] @ _triangle(z, codebook.centres).astype(np.float64)
    return out
