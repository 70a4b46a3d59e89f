"""Learned patch features (tasks/_patch_features.py): activations against a per-pixel computation, the
codebook's arrays as untrusted input, and the fit."""

from __future__ import annotations

import numpy as np
import pytest

from structopt.errors import InvalidInputError
from structopt.tasks import _patch_features as pf
from structopt.tasks import horses_superpixels as hs


def codebook(rng: np.random.Generator, factor: int, patch: int, k: int) -> pf.PatchCodebook:
    d = patch * patch
    a = rng.normal(size=(d, d))
    return pf.PatchCodebook(factor, patch, rng.normal(size=d) * 0.1, a @ a.T / d + np.eye(d), rng.normal(size=(k, d)))


def brute_force(image: np.ndarray, cb: pf.PatchCodebook) -> np.ndarray:
    # per pixel of the downscaled image: its edge-padded patch, normalised, whitened, triangle activation
    small = pf.downscale(image, cb.factor)
    h, w = small.shape
    before = cb.patch // 2
    padded = np.pad(small, ((before, cb.patch - 1 - before),) * 2, mode="edge")
    coarse = np.zeros((h, w, cb.centres.shape[0]))
    for r in range(h):
        for c in range(w):
            x = padded[r:r + cb.patch, c:c + cb.patch].ravel()
            x = (x - x.mean()) / np.sqrt(x.var() + pf.CONTRAST_EPS)
            z = (x - cb.mean) @ cb.whiten
            dist = np.linalg.norm(cb.centres - z, axis=1)
            coarse[r, c] = np.maximum(dist.mean() - dist, 0.0)
    H, W = image.shape
    out = np.zeros((H, W, coarse.shape[2]))
    for r in range(H):
        for c in range(W):
            out[r, c] = coarse[min(r // cb.factor, h - 1), min(c // cb.factor, w - 1)]
    return out.reshape(H * W, -1)


@pytest.mark.parametrize("factor,patch,shape", [(1, 3, (6, 7)), (1, 4, (5, 5)), (2, 3, (9, 8)), (4, 2, (10, 13)),
                                                (4, 3, (3, 2))])
def test_activations_equal_a_per_pixel_computation(factor, patch, shape):
    rng = np.random.default_rng(factor * 10 + patch)
    image = rng.random(shape)
    cb = codebook(rng, factor, patch, 5)
    got = pf.patch_activations(image, cb)
    assert got.dtype == np.float32 and got.shape == (shape[0] * shape[1], 5)
    np.testing.assert_allclose(got, brute_force(image, cb), rtol=1e-5, atol=1e-5)
    assert np.all(got >= 0) and np.all((got > 0).sum(axis=1) >= 1)  # a centre is always below the mean distance


def test_downscale_is_block_means():
    image = np.arange(30.0).reshape(5, 6)
    np.testing.assert_array_equal(pf.downscale(image, 2), [[3.5, 5.5, 7.5], [15.5, 17.5, 19.5]])
    assert pf.downscale(image, 8).shape == (1, 1)  # smaller than the factor: one block of all pixels


def test_codebook_arrays_round_trip_and_refusals():
    rng = np.random.default_rng(0)
    books = [codebook(rng, 1, 3, 4), codebook(rng, 4, 3, 2)]
    arrays = hs.codebook_arrays(books)
    back = hs.read_codebooks(arrays, "model.npz")
    assert [(b.factor, b.patch, b.centres.shape) for b in back] == [(1, 3, (4, 9)), (4, 3, (2, 9))]
    for b, c in zip(back, books):
        np.testing.assert_array_equal(b.whiten, c.whiten)
    bad = [({k: v for k, v in arrays.items() if k != "patch_factors"}, "lacks 'patch_factors'"),
           (dict(arrays, patch_factors=np.array([0, 4])), "lacks 'patch_factors'"),
           (dict(arrays, patch1_centres=np.ones((2, 8))), "inconsistent shapes"),
           (dict(arrays, patch0_whiten=np.full((9, 9), np.nan)), "finite float arrays"),
           ({k: v for k, v in arrays.items() if k != "patch0_mean"}, "finite float arrays")]
    for broken, message in bad:
        with pytest.raises(InvalidInputError, match=f"model.npz: .*{message}"):
            hs.read_codebooks(broken, "model.npz")


def test_fit_is_seeded_and_whitens():
    rng = np.random.default_rng(1)
    images = [rng.random((20, 24)) for _ in range(3)]
    a = pf.fit_patch_codebook(images, 1, 4, 6, seed=3)
    b = pf.fit_patch_codebook(images, 1, 4, 6, seed=3)
    np.testing.assert_array_equal(a.centres, b.centres)
    assert a.centres.shape == (6, 16) and a.whiten.shape == (16, 16)
    np.testing.assert_allclose(a.whiten, a.whiten.T, atol=1e-12)  # ZCA: symmetric
    with pytest.raises(InvalidInputError, match="needs at least as many patches"):
        pf.fit_patch_codebook([rng.random((3, 3))], 1, 2, 20, seed=0)


@pytest.mark.parametrize("factor", [1, 4])
def test_pooled_activations_equal_pooling_the_full_activations(factor):
    # blocks of whole image rows (down to one row per block) give the pooled full-resolution activations
    rng = np.random.default_rng(factor)
    image = rng.random((23, 18))
    cb = codebook(rng, factor, 3, 6)
    labels = rng.integers(0, 7, size=image.shape)
    labels[0, :7] = np.arange(7)  # every region present
    pool = hs.pool_matrix(labels)
    expected = pool @ pf.patch_activations(image, cb).astype(np.float64)
    for block in (1, 5, 40, 10_000):
        np.testing.assert_allclose(pf.pooled_activations(image, cb, pool, block=block), expected, rtol=1e-10,
                                   atol=1e-10)
