"""Weizmann horses on SLIC superpixels: figure-ground segmentation as a pairwise CRF on each image's
region adjacency graph (:class:`~structopt.models.graph.GraphModel`).

Data and split are those of :mod:`structopt.tasks.horses` (``gray/`` and ``figure_ground/``;
images sorted by name, every third one, index 2, 5, 8, ..., a test image). Per image, at full
resolution:

1. **Superpixels**: SLIC (Achanta et al., TPAMI 2012; :func:`skimage.segmentation.slic`) on the
   grey image, relabelled ``0..N-1`` (:func:`superpixels`).
2. **Region adjacency graph**: superpixels that touch horizontally or vertically, found from the
   label image's neighbouring pixel pairs in one vectorised pass (:func:`region_adjacency`).
3. **Node features**, pooled over each superpixel's pixels by one sparse product
   (:func:`pool_mean`): the mean and standard deviation of every channel of the grid task's filter
   bank (:func:`structopt.tasks.horses._filter_bank`: intensity, Gaussian smoothings, gradient
   magnitudes, Laplacians of Gaussian, local deviations, Hessian eigenvalues, soft intensity
   histogram); a texton histogram (each pixel's filter responses assigned to the nearest of
   ``n_textons`` k-means centres fitted on pixels of training images only); position (centroid row
   and column in [0, 1], their squares, squared distance to the centre, area fraction); the mean
   filter response relative to the image's mean (contrast with the whole image); and the
   area-weighted mean of the neighbours' filter means and textons (context); and the mean over the
   superpixel of the filter bank computed on the image downscaled 4 and 8 times (the same filters
   at coarser scales: the full-resolution bank sees only a few pixels around each one); and the mean
   over the superpixel of **learned patch features** (:mod:`~structopt.tasks._patch_features`:
   k-means on whitened 8 x 8 patches of training images with the triangle activation, Coates, Lee
   and Ng, AISTATS 2011), ``patch_centres`` per codebook, one codebook on the full-resolution image
   and one on the image downscaled 4 times. They carry most of the evidence: the stacked
   classifier's out-of-fold foreground IoU on the training images rises from 0.639 to 0.730 with
   them (``benchmarks/horses_superpixels_results.md``).
4. **Edge features**: a constant, the mean contrast ``exp(-beta (I_p - I_q)^2)`` over the pixel
   pairs of the shared boundary (smoothed image, ``beta`` the inverse of twice the image's mean
   squared neighbour difference: Boykov and Jolly's term), the similarity ``exp(-|m_u - m_v| / s)``
   of the two regions' mean intensities, and the boundary length relative to the smaller region's
   perimeter scale.
5. **Labels**: a superpixel is foreground when at least half its pixels are (majority of the mask).

Steps 1-4 are cached as a sealed archive (:mod:`structopt.archive`) under the cache directory of
:func:`structopt.tasks._data.cache_dir`, keyed on every parameter and on the data
directory's listing (names, sizes, modification times): an edited file is never served stale.

After loading, a **stacked foreground score** is prepended to the node features: the log-odds of a
gradient-boosted classifier of "superpixel is foreground" on the features above, cross-fitted on
the training images (image ``i`` of the training split gets the score of the fit on the other
folds) and fitted on all training images for the test images, as :mod:`~structopt.tasks.localization`
does for cells. Then ``context_stages`` **auto-context** stages (Tu and Bai, TPAMI 2010): a second
boosted classifier, cross-fitted the same way, on the raw features and :func:`context_features` of
the first stage's scores (the neighbours' and 2-hop neighbours' scores weighted by boundary length,
the position relative to the predicted foreground's centroid, spread and box, image-level score
statistics); its score is prepended too. The stages' scores and trees (exported as arrays,
:mod:`~structopt.tasks._boosted_trees`) are cached beside the features. A trained model keeps the
preprocessing a new image needs (:func:`image_graph`) as plain arrays, without pickle.
All features but the bias are standardised with the training split's statistics,
and, as in the grid task, every node and edge feature is divided by the image's number of
superpixels so that with the normalised Hamming loss ``lam`` means the same for every graph size.

The loss is Hamming over superpixels divided by their number, a missed foreground superpixel
optionally costing more (:func:`superpixel_loss`). Metrics are on pixels at full resolution
(:func:`project_labels` maps superpixel labels back): pixel accuracy and foreground IoU pooled over
the test images (:func:`structopt.tasks.horses.segmentation_scores`).

A prediction-time foreground bias (:func:`biased_labels`: added to each superpixel's foreground score,
uniformly or by area, before the MAP) can be chosen by :func:`select_fg_bias` on the training images; 3-fold
CV finds no bias worth keeping (``benchmarks/horses_superpixels_results.md``), so the task and its saved
models predict without one.
"""

from __future__ import annotations

import hashlib
import json
import numbers
import os
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from structopt.errors import InvalidInputError, OutputError
from structopt.models.graph import GraphInput, GraphModel
from structopt.progress import Progress, as_progress, count
from structopt.structures.base import check_flag
from structopt.tasks._boosted_trees import ARRAY_FIELDS as TREE_FIELDS
from structopt.tasks._boosted_trees import BoostedTrees, export_hist_gradient_boosting
from structopt.tasks._data import (
    cache_dir,
    check_cross_validation,
    file_listing,
    read_cache,
    read_image,
    write_cache,
)
from structopt.tasks._patch_features import PatchCodebook, fit_patch_codebook, pooled_activations
from structopt.tasks.horses import (
    SPLIT_RULE,
    _filter_bank,
    count_metrics,
    held_out_images,
    paired_names,
    pixel_counts,
    resolve_data_dir,
    segmentation_scores,
)

N_BANK = 22  # channels of the grid task's filter bank
EDGE_FEATURE_NAMES = ("constant", "boundary_contrast", "mean_similarity", "boundary_length")
DEFAULT_N_SEGMENTS = 400
DEFAULT_COMPACTNESS = 0.1
DEFAULT_N_TEXTONS = 24
DEFAULT_PATCH_CENTRES = 100  # k-means centres of each learned patch codebook (0: no learned features)
PATCH_FACTORS = (1, 4)  # the codebooks see the image at full resolution and downscaled 4 times
PATCH_SIZE = 8
DEFAULT_LAMS = (1e-4, 1e-3, 1e-2)
COARSE_FACTORS = (4, 8)  # downscaling factors of the coarse filter banks
_CACHE_VERSION = 4  # 3: the texton standardisation is cached (a saved model keeps it); 4: learned patch features
_STAGE_VERSION = 1  # the cached stacked / auto-context scores and their trees
# auto-context stages after the stacked score: 3-fold CV on the training images scores 0 and 1 stage alike with
# the CRF on top (0.7947 and 0.7946, benchmarks/horses_superpixels_results.md), so the simpler model
DEFAULT_CONTEXT_STAGES = 0
DEFAULT_FG_WEIGHT = 1.0  # the loss's price of a missed foreground superpixel (chosen by CV, see the benchmark)
_TEXTON_IMAGES = 40  # training images whose pixels fit the texton codebook
_TEXTON_PIXELS = 2000  # pixels drawn per such image


# --------------------------------------------------------------------------- graph primitives
def superpixels(image: np.ndarray, n_segments: int = DEFAULT_N_SEGMENTS,
                compactness: float = DEFAULT_COMPACTNESS) -> np.ndarray:
    """SLIC superpixels of a grey image in [0, 1]: an int64 label image with labels ``0..N-1``, every
    label present (SLIC's labels relabelled in increasing order)."""
    from skimage.segmentation import slic

    image = np.asarray(image, dtype=np.float64)
    if image.ndim != 2 or min(image.shape) < 2:
        raise InvalidInputError(f"superpixels need a 2-d grey image of at least 2 x 2 pixels, got shape {image.shape}")
    labels = slic(image, n_segments=int(n_segments), compactness=float(compactness), channel_axis=None,
                  start_label=0)
    _, dense = np.unique(labels, return_inverse=True)
    return dense.reshape(image.shape).astype(np.int64)


def _check_labels(labels: np.ndarray) -> tuple[np.ndarray, int]:
    labels = np.asarray(labels)
    if labels.ndim != 2 or not np.issubdtype(labels.dtype, np.integer) or labels.size == 0:
        raise InvalidInputError(f"a superpixel label image must be a non-empty 2-d integer array, got "
                                f"{labels.dtype} {labels.shape}")
    if labels.min() < 0:
        raise InvalidInputError(f"superpixel labels must be >= 0, found {int(labels.min())}")
    return labels.astype(np.int64, copy=False), int(labels.max()) + 1


def _neighbour_pairs(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Labels ``(a, b)`` of every horizontally or vertically adjacent pixel pair whose labels differ,
    with the flat pixel indices ``(p, q)`` of the pair."""
    H, W = labels.shape
    index = np.arange(H * W).reshape(H, W)
    a = np.concatenate([labels[:, :-1].ravel(), labels[:-1, :].ravel()])
    b = np.concatenate([labels[:, 1:].ravel(), labels[1:, :].ravel()])
    p = np.concatenate([index[:, :-1].ravel(), index[:-1, :].ravel()])
    q = np.concatenate([index[:, 1:].ravel(), index[1:, :].ravel()])
    cut = a != b
    return a[cut], b[cut], p[cut], q[cut]


def region_adjacency(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The region adjacency graph of a label image (4-connectivity), vectorised.

    Returns
    -------
    edges : ndarray of int64, shape (E, 2)
        Each pair of touching regions once, ``u < v``, sorted lexicographically.
    boundary : ndarray of int64, shape (E,)
        Number of adjacent pixel pairs across each edge's boundary.
    """
    labels, N = _check_labels(labels)
    a, b, _, _ = _neighbour_pairs(labels)
    key = np.minimum(a, b) * N + np.maximum(a, b)
    uniq, counts = np.unique(key, return_counts=True)
    return np.stack([uniq // N, uniq % N], axis=1).astype(np.int64), counts.astype(np.int64)


def pool_matrix(labels: np.ndarray) -> sp.csr_matrix:
    """The (N, pixels) sparse matrix averaging pixel values over each region (rows sum to 1)."""
    labels, N = _check_labels(labels)
    flat = labels.ravel()
    size = np.bincount(flat, minlength=N).astype(np.float64)
    return sp.csr_matrix((1.0 / size[flat], (flat, np.arange(flat.size))), shape=(N, flat.size))


def pool_mean(labels: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Mean of ``values`` (H, W) or (H, W, C) over each region of ``labels``: (N,) or (N, C)."""
    labels = np.asarray(labels)
    values = np.asarray(values, dtype=np.float64)
    if values.shape[:2] != labels.shape:
        raise InvalidInputError(f"values of shape {values.shape} do not match the label image {labels.shape}")
    flat = values.reshape(labels.size, -1)
    out = pool_matrix(labels) @ flat
    return out.ravel() if values.ndim == 2 else out


def majority_labels(labels: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Per region, 1 when at least half of its pixels are foreground in ``mask``, else 0 (int64)."""
    mask = np.asarray(mask)
    if mask.shape != np.shape(labels):
        raise InvalidInputError(f"mask of shape {mask.shape} does not match the label image {np.shape(labels)}")
    return (pool_mean(labels, mask.astype(np.float64)) >= 0.5).astype(np.int64)


def project_labels(labels: np.ndarray, node_labels: np.ndarray) -> np.ndarray:
    """Pixel mask (H, W) from one label per region: ``node_labels[labels]``."""
    labels, N = _check_labels(labels)
    node_labels = np.asarray(node_labels)
    if node_labels.shape != (N,):
        raise InvalidInputError(f"{node_labels.shape[0] if node_labels.ndim == 1 else node_labels.shape} region "
                                f"labels for a label image with {N} regions")
    return node_labels[labels]


# --------------------------------------------------------------------------- per-image features
def _textons(bank: np.ndarray, centres: np.ndarray, scale: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Index of the nearest texton centre of every pixel's standardised filter responses (H*W,)."""
    z = (bank.reshape(-1, bank.shape[-1]) - scale[0]) / scale[1]
    # ||z - c||^2 = ||z||^2 - 2 z.c + ||c||^2; the first term is the same for every centre
    return np.argmin(centres @ z.T * -2.0 + (centres * centres).sum(axis=1)[:, None], axis=0)


def _edge_raw(labels: np.ndarray, smooth: np.ndarray, node_mean: np.ndarray, sizes: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """Edges of the RAG and their raw features (see :data:`EDGE_FEATURE_NAMES`)."""
    N = sizes.size
    a, b, p, q = _neighbour_pairs(labels)
    flat = smooth.ravel()
    d2 = (flat[p] - flat[q]) ** 2
    all_h = np.diff(smooth, axis=1) ** 2
    all_v = np.diff(smooth, axis=0) ** 2
    mean = (all_h.sum() + all_v.sum()) / max(all_h.size + all_v.size, 1)
    beta = 1.0 / (2.0 * mean) if mean > 0 else 0.0
    key = np.minimum(a, b) * N + np.maximum(a, b)
    uniq, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
    edges = np.stack([uniq // N, uniq % N], axis=1).astype(np.int64)
    contrast = np.bincount(inverse, np.exp(-beta * d2), minlength=uniq.size) / counts
    spread = float(np.std(node_mean)) or 1.0
    similarity = np.exp(-np.abs(node_mean[edges[:, 0]] - node_mean[edges[:, 1]]) / spread)
    length = counts / np.sqrt(np.minimum(sizes[edges[:, 0]], sizes[edges[:, 1]]))
    feats = np.stack([np.ones(len(edges)), contrast, similarity, length], axis=1)
    return edges, feats


def _coarse_bank(image: np.ndarray, factor: int) -> np.ndarray:
    """The filter bank of the image downscaled ``factor`` times (anti-aliased), read back at every
    full-resolution pixel from the coarse pixel it falls in: the same filters over a ``factor``
    times larger neighbourhood (the full-resolution bank only sees a few pixels around each one)."""
    from skimage.transform import resize

    H, W = image.shape
    h, w = max(2, round(H / factor)), max(2, round(W / factor))
    small = _filter_bank(resize(image, (h, w), order=1, anti_aliasing=True, preserve_range=True, mode="reflect"))
    rows = np.minimum((np.arange(H) * h) // H, h - 1)
    cols = np.minimum((np.arange(W) * w) // W, w - 1)
    return small[rows[:, None], cols[None, :]]


def image_features(image: np.ndarray, mask: np.ndarray | None, centres: np.ndarray,
                   scale: tuple[np.ndarray, np.ndarray], n_segments: int = DEFAULT_N_SEGMENTS,
                   compactness: float = DEFAULT_COMPACTNESS, codebooks: Sequence[PatchCodebook] = ()
                   ) -> dict[str, np.ndarray]:
    """Superpixels, RAG and raw (unstandardised) node and edge features of one grey image (``codebooks``:
    the learned patch codebooks whose mean activations end the node features).

    Returns
    -------
    dict with ``segments`` (H, W) int64 region labels, ``nodes`` (N, C) raw node features (see the
    module docstring), ``edges`` (E, 2), ``edge_features`` (E, 4) and ``labels`` (N,) majority labels
    (None without a mask).
    """
    image = np.asarray(image, dtype=np.float64)
    if mask is not None and mask.shape != image.shape:
        raise InvalidInputError(f"mask of shape {mask.shape} does not match the image {image.shape}")
    segments = superpixels(image, n_segments, compactness)
    N = int(segments.max()) + 1
    H, W = image.shape
    bank = _filter_bank(image)
    P = pool_matrix(segments)
    flat = bank.reshape(H * W, -1)
    mean = P @ flat
    coarse = [P @ _coarse_bank(image, factor).reshape(H * W, -1) for factor in COARSE_FACTORS]
    std = np.sqrt(np.maximum(P @ (flat * flat) - mean * mean, 0.0))
    K = centres.shape[0]
    words = _textons(bank, centres, scale)
    hist = (P @ sp.csr_matrix((np.ones(H * W), (np.arange(H * W), words)), shape=(H * W, K))).toarray()
    rows, cols = np.meshgrid(np.linspace(0.0, 1.0, H), np.linspace(0.0, 1.0, W), indexing="ij")
    r, c = P @ rows.ravel(), P @ cols.ravel()
    sizes = np.bincount(segments.ravel(), minlength=N).astype(np.float64)
    position = np.stack([r, c, r * r, c * c, (r - 0.5) ** 2 + (c - 0.5) ** 2, sizes / (H * W)], axis=1)
    relative = mean - flat.mean(axis=0)
    edges, edge_feats = _edge_raw(segments, bank[..., 2], mean[:, 0], sizes)
    # context: area-weighted mean of the neighbours' filter means and texton histograms
    A = sp.csr_matrix((np.ones(2 * len(edges)), (np.r_[edges[:, 0], edges[:, 1]], np.r_[edges[:, 1], edges[:, 0]])),
                      shape=(N, N)) @ sp.diags(sizes)
    weight = np.asarray(A.sum(axis=1)).ravel()
    weight[weight == 0] = 1.0
    context = (A @ np.concatenate([mean, hist], axis=1)) / weight[:, None]
    learned = [pooled_activations(image, codebook, P) for codebook in codebooks]
    nodes = np.concatenate([mean, std, hist, position, relative, context, *coarse, *learned], axis=1)
    return {"segments": segments, "nodes": nodes, "edges": edges, "edge_features": edge_feats,
            "labels": None if mask is None else majority_labels(segments, mask)}


def feature_names(n_textons: int = DEFAULT_N_TEXTONS, codebooks: Sequence[PatchCodebook] = ()) -> list[str]:
    """Names of the raw node features of :func:`image_features` (before the stacked score and bias)."""
    bank = [f"bank{c}" for c in range(N_BANK)]
    words = [f"texton{k}" for k in range(n_textons)]
    return ([f"mean_{b}" for b in bank] + [f"std_{b}" for b in bank] + words
            + ["row", "col", "row2", "col2", "centre_dist2", "area"] + [f"relative_{b}" for b in bank]
            + [f"context_mean_{b}" for b in bank] + [f"context_{w}" for w in words]
            + [f"coarse{f}_mean_{b}" for f in COARSE_FACTORS for b in bank]
            + [f"patch{c.factor}_{k}" for c in codebooks for k in range(c.centres.shape[0])])


def _read_pair(root: Path, name: str) -> tuple[np.ndarray, np.ndarray]:
    image = read_image(root / "gray" / name, "L").astype(np.float64) / 255.0
    mask = read_image(root / "figure_ground" / name, "L") > 127
    if image.shape != mask.shape:
        raise InvalidInputError(f"{root / 'gray' / name}: image is {image.shape[1]}x{image.shape[0]} pixels but its "
                                f"mask {root / 'figure_ground' / name} is {mask.shape[1]}x{mask.shape[0]}")
    return image, mask


def _fit_textons(root: Path, names: Sequence[str], n_textons: int, seed: int
                 ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """k-means texton centres (standardised responses) from pixels of the given training images."""
    from sklearn.cluster import KMeans

    rng = np.random.default_rng(seed)
    samples = []
    for name in names:
        image, _ = _read_pair(root, name)
        bank = _filter_bank(image).reshape(-1, N_BANK)
        samples.append(bank[rng.choice(bank.shape[0], size=min(_TEXTON_PIXELS, bank.shape[0]), replace=False)])
    data = np.concatenate(samples)
    mu, sd = data.mean(axis=0), data.std(axis=0)
    sd[sd == 0] = 1.0
    km = KMeans(n_clusters=int(n_textons), n_init=2, random_state=seed).fit((data - mu) / sd)
    return km.cluster_centers_, (mu, sd)


def codebook_arrays(codebooks: Sequence[PatchCodebook]) -> dict[str, np.ndarray]:
    """The learned patch codebooks as the arrays a cache or a saved model keeps (:func:`read_codebooks`)."""
    out = {"patch_factors": np.array([c.factor for c in codebooks], dtype=np.int64)}
    for j, c in enumerate(codebooks):
        out.update(c.to_arrays(f"patch{j}"))
    return out


def read_codebooks(arrays: dict[str, Any], source: str = "preprocessing") -> list[PatchCodebook]:
    """The codebooks of :func:`codebook_arrays`, checked as untrusted input (``source`` names the file)."""
    factors = arrays.get("patch_factors")
    if not isinstance(factors, np.ndarray) or factors.ndim != 1 or factors.dtype.kind not in "iu" or \
            factors.size > 10 or np.any(factors < 1):
        raise InvalidInputError(f"{source}: the superpixel preprocessing lacks 'patch_factors' or holds no list of "
                                f"positive factors there")
    return [PatchCodebook.from_arrays(arrays, f"patch{j}", int(f), source) for j, f in enumerate(factors)]


def _fit_codebooks(root: Path, names: Sequence[str], n_centres: int, seed: int) -> list[PatchCodebook]:
    """One learned patch codebook per :data:`PATCH_FACTORS` (none when ``n_centres`` is 0)."""
    if n_centres == 0:
        return []
    images = [_read_pair(root, name)[0] for name in names]
    return [fit_patch_codebook(images, factor, PATCH_SIZE, n_centres, seed) for factor in PATCH_FACTORS]


def _compute(root: Path, names: list[str], is_test: np.ndarray, n_segments: int, compactness: float,
             n_textons: int, patch_centres: int, seed: int, progress: bool | Progress) -> dict[str, np.ndarray]:
    report = as_progress(progress)
    train_names = [names[i] for i in np.flatnonzero(~is_test)]
    report.stage(f"fitting the texton and patch codebooks on {count(min(len(train_names), _TEXTON_IMAGES), 'image')}")
    step = max(1, len(train_names) // _TEXTON_IMAGES)
    centres, (mu, sd) = _fit_textons(root, train_names[::step][:_TEXTON_IMAGES], n_textons, seed)
    codebooks = _fit_codebooks(root, train_names[::step][:_TEXTON_IMAGES], patch_centres, seed)
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("segments", "masks", "nodes", "edges", "edge_features",
                                                           "labels")}
    shapes, n_nodes, n_edges = [], [], []
    report.stage(f"computing superpixel features of {count(len(names), 'image')} (cached for the next run)")
    for name in report.items(names, len(names), "superpixel features", "images"):
        image, mask = _read_pair(root, name)
        f = image_features(image, mask, centres, (mu, sd), n_segments, compactness, codebooks)
        if f["nodes"].shape[0] > np.iinfo(np.int16).max:
            raise InvalidInputError(f"{root / 'gray' / name}: {f['nodes'].shape[0]} superpixels, more than the cache "
                                    f"stores; lower n_segments")
        parts["segments"].append(f["segments"].ravel().astype(np.int16))
        parts["masks"].append(mask.ravel())
        for key in ("nodes", "edges", "edge_features", "labels"):
            parts[key].append(f[key])
        shapes.append(image.shape)
        n_nodes.append(f["nodes"].shape[0])
        n_edges.append(f["edges"].shape[0])
    data = {key: np.concatenate(value) for key, value in parts.items()}
    data.update(shapes=np.array(shapes, dtype=np.int64), n_nodes=np.array(n_nodes, dtype=np.int64),
                n_edges=np.array(n_edges, dtype=np.int64), centres=centres, texton_mean=mu, texton_std=sd,
                names=np.array(names), **codebook_arrays(codebooks))
    return data


# --------------------------------------------------------------------------- stacking and auto-context
#: the auto-context features of a node from a stage's scores (:func:`context_features`)
CONTEXT_NAMES = ("score", "nbr_mean", "nbr_max", "nbr_min", "hop2_mean", "hop2_max", "rel_row", "rel_col",
                 "rel_dist2", "in_box", "box_row", "box_col", "score_minus_image_mean", "image_fg_fraction",
                 "image_score_mean", "image_score_std", "image_score_p90", "image_score_p10", "image_fg_row",
                 "image_fg_col", "image_fg_row_spread", "image_fg_col_spread")


def context_features(score: np.ndarray, edges: np.ndarray, boundary: np.ndarray, sizes: np.ndarray,
                     position: np.ndarray) -> np.ndarray:
    """Auto-context features of every superpixel from one stage's foreground log-odds (Tu and Bai, TPAMI 2010).

    Columns (:data:`CONTEXT_NAMES`): the node's own score; over its neighbours (boundary-length weighted
    mean, max, min) and its 2-hop neighbourhood (the mean weighted by the squared adjacency, the max of the
    neighbours' maxima); a shape prior, the node's position relative to the predicted foreground (centroid
    and spread of the superpixels' areas weighted by their foreground probability: offsets in spreads, their
    squared norm; inside the box of the superpixels scored foreground, and the position in that box); and
    image-level statistics (predicted foreground fraction, score mean, deviation, 90th and 10th
    percentiles, foreground centroid and spread), the same for every node of the image.

    Parameters
    ----------
    score : ndarray, shape (N,)
        Log-odds of "foreground" per superpixel.
    edges : ndarray of int64, shape (E, 2)
        The region adjacency graph.
    boundary : ndarray, shape (E,)
        Pixel pairs across each edge's boundary (:func:`region_adjacency`).
    sizes : ndarray, shape (N,)
        Pixels per superpixel.
    position : ndarray, shape (N, 2)
        Centroid row and column of each superpixel in [0, 1].

    Returns
    -------
    ndarray, shape (N, len(CONTEXT_NAMES))
    """
    score = np.asarray(score, dtype=np.float64)
    N = score.size
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    if position.shape != (N, 2) or sizes.shape != (N,) or boundary.shape != (edges.shape[0],):
        raise InvalidInputError(f"context features: {N} scores but positions {position.shape}, sizes {sizes.shape}, "
                                f"boundaries {boundary.shape} for {edges.shape[0]} edges")
    u, v = np.r_[edges[:, 0], edges[:, 1]], np.r_[edges[:, 1], edges[:, 0]]
    A = sp.csr_matrix((np.r_[boundary, boundary].astype(np.float64), (u, v)), shape=(N, N))

    def weighted_mean(M: sp.csr_matrix) -> np.ndarray:
        total = np.asarray(M.sum(axis=1)).ravel()
        return np.where(total > 0, M @ score / np.where(total > 0, total, 1.0), score)

    def neighbour(values: np.ndarray, reduce: np.ufunc, empty: float) -> np.ndarray:
        out = np.full(N, empty)
        reduce.at(out, u, values[v])
        return np.where(np.isfinite(out), out, values)  # an isolated node: its own value

    mx, mn = neighbour(score, np.maximum, -np.inf), neighbour(score, np.minimum, np.inf)
    A2 = (A @ A).tolil()
    A2.setdiag(0)
    hop2_mean, hop2_max = weighted_mean(A2.tocsr()), neighbour(mx, np.maximum, -np.inf)
    p = 1.0 / (1.0 + np.exp(-np.clip(score, -50.0, 50.0)))
    mass = p * sizes
    r, c = position[:, 0], position[:, 1]
    w = mass / mass.sum() if mass.sum() > 0 else sizes / sizes.sum()
    cr, cc = float(w @ r), float(w @ c)
    sr = float(np.sqrt(w @ (r - cr) ** 2)) + 1e-3
    sc = float(np.sqrt(w @ (c - cc) ** 2)) + 1e-3
    dr, dc = (r - cr) / sr, (c - cc) / sc
    on = score > 0
    r0, r1, c0, c1 = (r[on].min(), r[on].max(), c[on].min(), c[on].max()) if on.any() else (0.0, 1.0, 0.0, 1.0)
    in_box = ((r >= r0) & (r <= r1) & (c >= c0) & (c <= c1)).astype(np.float64)
    image = np.array([mass.sum() / sizes.sum(), score.mean(), score.std(), np.percentile(score, 90),
                      np.percentile(score, 10), cr, cc, sr, sc])
    return np.column_stack([score, weighted_mean(A), mx, mn, hop2_mean, hop2_max, dr, dc, dr * dr + dc * dc, in_box,
                            (r - r0) / max(r1 - r0, 1e-3), (c - c0) / max(c1 - c0, 1e-3), score - score.mean(),
                            np.broadcast_to(image, (N, image.size))])


def _fit_boosted(X: np.ndarray, y: np.ndarray, seed: int) -> BoostedTrees:
    from sklearn.ensemble import HistGradientBoostingClassifier

    if np.unique(y).size < 2:
        raise InvalidInputError("stacking: the training superpixels are all of one class")
    clf = HistGradientBoostingClassifier(max_iter=150, learning_rate=0.1, max_leaf_nodes=31, l2_regularization=1.0,
                                         early_stopping=False, random_state=seed).fit(X, y)
    return export_hist_gradient_boosting(clf)


def _cross_fit(nodes: list[np.ndarray], labels: list[np.ndarray], is_train: np.ndarray, n_folds: int,
               seed: int, progress: bool | Progress = False, what: str = "stacked score"
               ) -> tuple[list[np.ndarray], BoostedTrees]:
    """Cross-fitted log-odds of a gradient-boosted "foreground" classifier for every image (see the
    module docstring): training image ``t`` (its rank among training images) is in fold ``t % n_folds``;
    the other images are scored by the fit on all training images, which is returned as arrays
    (:class:`~structopt.tasks._boosted_trees.BoostedTrees`, what a saved model keeps). A stage line per
    fit (``what``): each is minutes on a loaded machine."""
    from threadpoolctl import threadpool_limits

    train = np.flatnonzero(is_train)
    if len(train) < n_folds:
        raise InvalidInputError(f"stacking needs at least n_folds={n_folds} training images, got {len(train)}")

    def rows(index: np.ndarray) -> np.ndarray:
        return np.concatenate([nodes[i] for i in index])

    def predict(trees: BoostedTrees, index: np.ndarray) -> None:
        if index.size:  # one call over all the images' rows
            for i, part in zip(index, _split(trees.decision_function(rows(index)),
                                             np.array([nodes[i].shape[0] for i in index]))):
                scores[i] = part

    scores: list[np.ndarray] = [np.empty(0)] * len(nodes)
    fold = np.arange(len(train)) % n_folds
    with threadpool_limits(1):  # the machine's cores are shared: OpenMP spinning threads only contend
        for f in range(n_folds):
            fit = train[fold != f]
            as_progress(progress).stage(f"{what}: boosted trees {f + 1} of {n_folds + 1} (fold {f + 1}: "
                                        f"{count(len(fit), 'training image')})")
            predict(_fit_boosted(rows(fit), np.concatenate([labels[i] for i in fit]), seed), train[fold == f])
        as_progress(progress).stage(f"{what}: boosted trees {n_folds + 1} of {n_folds + 1} (all "
                                    f"{count(len(train), 'training image')}, for the other images)")
        final = _fit_boosted(rows(train), np.concatenate([labels[i] for i in train]), seed)
    predict(final, np.flatnonzero(~is_train))
    return scores, final


def _geometry(segments: np.ndarray, edges: np.ndarray, nodes: np.ndarray, names: list[str]
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Boundary lengths of the cached edges, region sizes and centroids (from the raw node features)."""
    found, boundary = region_adjacency(segments)
    if not np.array_equal(found, edges):
        raise InvalidInputError("feature cache: the edges do not match the superpixels' adjacency")
    sizes = np.bincount(segments.ravel(), minlength=nodes.shape[0]).astype(np.float64)
    position = nodes[:, [names.index("row"), names.index("col")]]
    return boundary.astype(np.float64), sizes, position


def _stage_scores(nodes: list[np.ndarray], labels: list[np.ndarray], geometry: list[tuple], is_train: np.ndarray,
                  n_folds: int, seed: int, context_stages: int, progress: bool | Progress = False
                  ) -> tuple[list[list[np.ndarray]], list[BoostedTrees]]:
    """The stacked score, then ``context_stages`` auto-context stages, each cross-fitted on the raw node
    features and the previous stage's :func:`context_features`: every stage's scores and final trees."""
    scores, trees = _cross_fit(nodes, labels, is_train, n_folds, seed, progress)
    stages, fitted = [scores], [trees]
    for k in range(context_stages):
        features = [np.concatenate([x, context_features(s, e, *g)], axis=1) for x, s, (e, *g) in
                    zip(nodes, stages[-1], geometry)]
        scores, trees = _cross_fit(features, labels, is_train, n_folds, seed, progress,
                                   f"auto-context stage {k + 1}")
        stages.append(scores)
        fitted.append(trees)
    return stages, fitted


# --------------------------------------------------------------------------- loader
def load_superpixel_horses(path: str | os.PathLike | None = None, *, n_segments: int = DEFAULT_N_SEGMENTS,
                           compactness: float = DEFAULT_COMPACTNESS, n_textons: int = DEFAULT_N_TEXTONS,
                           patch_centres: int = DEFAULT_PATCH_CENTRES, max_images: int | None = None,
                           stacked: bool = True, n_folds: int = 3,
                           context_stages: int = DEFAULT_CONTEXT_STAGES, seed: int = 0, cache: bool = True,
                           progress: bool | Progress = False) -> dict[str, Any]:
    """Load the Weizmann horses as superpixel graphs (see the module docstring).

    Parameters
    ----------
    path : path, optional
        Directory with ``gray/`` and ``figure_ground/`` (default as :func:`~structopt.tasks.horses.load_horses`).
    n_segments, compactness : SLIC's target number of superpixels and compactness.
    n_textons : int
        Size of the texton codebook (k-means on pixels of training images).
    patch_centres : int
        Centres of each learned patch codebook (:mod:`~structopt.tasks._patch_features`, one per
        :data:`PATCH_FACTORS`, fitted on patches of the same training images); 0 leaves them out.
    max_images : int, optional
        Only the first images (sorted by name), for quick runs; the split rule is unchanged.
    stacked : bool
        Prepend the cross-fitted boosted foreground score (``n_folds`` folds).
    context_stages : int
        Auto-context stages after the stacked score (each a cross-fitted boosted classifier on the raw
        features and the previous stage's :func:`context_features`); every stage's score is prepended.
        Ignored without ``stacked``.
    seed : int
        Seed of the texton sample, k-means and the boosted classifiers.
    cache : bool
        Read/write steps 1-4, and the stages' scores and trees, in the cache directory.
    progress : bool or Progress
        Say on stderr what is computed (stage lines, a bar over the images; :mod:`~structopt.progress`).

    Returns
    -------
    dict
        ``train`` / ``test``: ``{"X": list of GraphInput, "y": list of (N,) labels, "segments": list of
        (H, W) region label images, "masks": list of (H, W) bool full-resolution masks, "names",
        "stacked": the last stage's raw log-odds per node, "stages": every stage's, (N, stages) (None each
        without stacking)}``;
        ``model``: :class:`GraphModel` (2 states, symmetric pairwise weights); ``info`` (with
        ``preprocessing``: what reading a new image needs, see :func:`image_graph`).

    Raises
    ------
    DataNotFoundError
        The directory, an image's mask or a mask's image is missing.
    InvalidInputError
        Bad options; an undecodable image or one whose mask differs in size (naming the files).
    """
    for name, value, low in (("n_segments", n_segments, 2), ("n_textons", n_textons, 2), ("n_folds", n_folds, 2),
                             ("context_stages", context_stages, 0)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise InvalidInputError(f"{name} must be an integer >= {low}, got {value!r}")
    if isinstance(patch_centres, bool) or not isinstance(patch_centres, (int, np.integer)) or patch_centres < 0:
        raise InvalidInputError(f"patch_centres must be an integer >= 0, got {patch_centres!r}")
    if not (isinstance(compactness, (int, float)) and compactness > 0):
        raise InvalidInputError(f"compactness must be a positive number, got {compactness!r}")
    if max_images is not None and (not isinstance(max_images, (int, np.integer)) or max_images < 3):
        raise InvalidInputError(f"max_images must be an integer >= 3 (one test image per three), got {max_images!r}")
    root = resolve_data_dir(path)
    names = paired_names(root)
    if max_images is not None:
        names = names[: int(max_images)]
    is_test = held_out_images(len(names))
    params = {"root": str(root), "names": names, "n_segments": int(n_segments), "compactness": float(compactness),
              "n_textons": int(n_textons), "patch_centres": int(patch_centres), "seed": int(seed),
              "version": _CACHE_VERSION,
              "files": file_listing(root)}  # an edited, added or removed file makes a new key: never a stale cache
    key = hashlib.sha1(json.dumps(params, sort_keys=True).encode()).hexdigest()[:16]
    file = cache_dir() / "horses_superpixels" / f"features-{key}.npz"
    data = read_cache(file) if cache else None
    if data is not None:
        as_progress(progress).stage(f"superpixel features of {count(len(names), 'image')} read from the cache {file}")
    if data is None:
        data = _compute(root, names, is_test, int(n_segments), float(compactness), int(n_textons),
                        int(patch_centres), int(seed), progress)
        if cache:
            write_cache(file, {"kind": "structopt horses superpixel features", "params": params}, data)
    stage_key = hashlib.sha1(json.dumps([key, int(n_folds), int(seed), int(context_stages), _STAGE_VERSION]).encode())
    stage_file = cache_dir() / "horses_superpixels" / f"stages-{stage_key.hexdigest()[:16]}.npz" if cache else None
    return _assemble(data, names, is_test, stacked, int(n_folds), int(seed), n_textons,
                     int(context_stages) if stacked else 0, stage_file, progress,
                     {"root": str(root), "n_segments": int(n_segments), "compactness": float(compactness),
                      "n_textons": int(n_textons), "patch_centres": int(patch_centres),
                      "cache_file": str(file) if cache else None})


def _split(array: np.ndarray, counts: np.ndarray) -> list[np.ndarray]:
    return np.split(array, np.cumsum(counts)[:-1])


def _cached_stages(file: Path | None, nodes: list[np.ndarray], labels: list[np.ndarray], segments: list[np.ndarray],
                   edges: list[np.ndarray], is_train: np.ndarray, n_folds: int, seed: int, context_stages: int,
                   n_textons: int, progress: bool | Progress) -> tuple[list[list[np.ndarray]], list[BoostedTrees]]:
    """:func:`_stage_scores`, read from / written to ``file`` (a sealed archive) when it is given."""
    n_nodes = np.array([x.shape[0] for x in nodes])
    arrays = read_cache(file) if file is not None else None
    if arrays is not None:
        try:
            stages = [_split(arrays[f"stage{k}"], n_nodes) for k in range(context_stages + 1)]
            trees = [BoostedTrees.from_arrays({name: arrays.get(f"trees{k}_{name}") for name, _ in TREE_FIELDS},
                                              str(file)) for k in range(context_stages + 1)]
            if all(arrays[f"stage{k}"].shape == (n_nodes.sum(),) for k in range(context_stages + 1)):
                return stages, trees
        except (KeyError, InvalidInputError) as error:
            warnings.warn(f"{error}; fitting the stages again", stacklevel=3)
    stages_text = count(context_stages, "auto-context stage")
    as_progress(progress).stage(f"fitting the stacked foreground score and {stages_text} (boosted trees, cached)")
    start = time.perf_counter()
    names = feature_names(n_textons)
    geometry = [(e, *_geometry(s, e, x, names)) for s, e, x in zip(segments, edges, nodes)]
    stages, trees = _stage_scores(nodes, labels, geometry, is_train, n_folds, seed, context_stages, progress)
    as_progress(progress).stage(f"stacked score and {count(context_stages, 'auto-context stage')}: "
                                f"{time.perf_counter() - start:.0f} s")
    if file is not None:
        out = {f"stage{k}": np.concatenate(scores) for k, scores in enumerate(stages)}
        for k, t in enumerate(trees):
            out.update({f"trees{k}_{name}": value for name, value in t.to_arrays().items()})
        write_cache(file, {"kind": "structopt horses superpixel stages"}, out, "stage cache",
                    "the stages will be fitted again next time", stacklevel=4)
    return stages, trees


def _assemble(data: dict[str, np.ndarray], names: list[str], is_test: np.ndarray, stacked: bool, n_folds: int,
              seed: int, n_textons: int, context_stages: int, stage_file: Path | None, progress: bool | Progress,
              info: dict[str, Any]) -> dict[str, Any]:
    shapes, n_nodes, n_edges = data["shapes"], data["n_nodes"], data["n_edges"]
    if len(shapes) != len(names) or [str(n) for n in data["names"]] != names:
        raise InvalidInputError(f"feature cache {info.get('cache_file')} does not list the expected images")
    pixels = shapes.prod(axis=1)
    segments = [s.reshape(shape).astype(np.int64) for s, shape in zip(_split(data["segments"], pixels), shapes)]
    masks = [m.reshape(shape) for m, shape in zip(_split(data["masks"], pixels), shapes)]
    nodes = _split(data["nodes"], n_nodes)
    labels = [y.astype(np.int64) for y in _split(data["labels"], n_nodes)]
    edges = _split(data["edges"], n_edges)
    efeats = _split(data["edge_features"], n_edges)
    codebooks = read_codebooks(data, str(info.get("cache_file")))
    names_out = feature_names(n_textons, codebooks)
    scores: list[np.ndarray | None] = [None] * len(nodes)
    stage_scores: list[np.ndarray | None] = [None] * len(nodes)
    trees: list[BoostedTrees] = []
    if stacked:
        stages, trees = _cached_stages(stage_file, nodes, labels, segments, edges, ~is_test, n_folds, seed,
                                       context_stages, n_textons, progress)
        scores = list(stages[-1])
        stage_scores = [np.stack(per_image, axis=1) for per_image in zip(*stages)]
        nodes = [np.concatenate([z, x], axis=1) for z, x in zip(stage_scores, nodes)]
        names_out = ["stacked_score", *(f"context_score{k}" for k in range(1, context_stages + 1)), *names_out]
    train_rows = np.concatenate([nodes[i] for i in np.flatnonzero(~is_test)])
    mean, std = train_rows.mean(axis=0), train_rows.std(axis=0)
    std[std == 0] = 1.0
    e_train = np.concatenate([efeats[i] for i in np.flatnonzero(~is_test)])
    e_scale = np.abs(e_train).mean(axis=0)
    e_scale[e_scale == 0] = 1.0
    X = []
    for x, e, f in zip(nodes, edges, efeats):
        n = x.shape[0]
        X.append(GraphInput(np.concatenate([np.ones((n, 1)), (x - mean) / std], axis=1) / n, e, f / e_scale / n))

    def pick(sel: np.ndarray) -> dict[str, list]:
        index = np.flatnonzero(sel)
        return {"X": [X[i] for i in index], "y": [labels[i] for i in index], "segments": [segments[i] for i in index],
                "masks": [masks[i] for i in index], "names": [names[i] for i in index],
                "stacked": [scores[i] for i in index], "stages": [stage_scores[i] for i in index]}

    preprocessing = {"n_segments": info["n_segments"], "compactness": info["compactness"],
                     "centres": np.asarray(data["centres"], dtype=np.float64),
                     "texton_mean": np.asarray(data["texton_mean"], dtype=np.float64),
                     "texton_std": np.asarray(data["texton_std"], dtype=np.float64),
                     "node_mean": mean, "node_std": std, "edge_scale": e_scale, "stages": len(trees),
                     **codebook_arrays(codebooks)}
    for k, t in enumerate(trees):
        preprocessing.update({f"trees{k}_{name}": value for name, value in t.to_arrays().items()})
    info = dict(info, n_images=len(names), feature_names=["bias", *names_out],
                edge_feature_names=list(EDGE_FEATURE_NAMES), stacked=bool(stacked), context_stages=context_stages,
                preprocessing=preprocessing,
                mean_nodes=float(n_nodes.mean()), mean_edges=float(n_edges.mean()),
                split=SPLIT_RULE)
    return {"train": pick(~is_test), "test": pick(is_test),
            "model": GraphModel(X[0].nodes.shape[1], len(EDGE_FEATURE_NAMES), 2, symmetric=True), "info": info}


# --------------------------------------------------------------------------- new images
#: the preprocessing a trained model keeps to read new images (besides each stage's ``trees{k}_*`` arrays)
PREPROCESSING_TYPES = (("n_segments", int), ("compactness", float), ("centres", np.ndarray),
                       ("texton_mean", np.ndarray), ("texton_std", np.ndarray), ("node_mean", np.ndarray),
                       ("node_std", np.ndarray), ("edge_scale", np.ndarray), ("stages", int),
                       ("patch_factors", np.ndarray))  # and each learned codebook's patch{j}_* arrays


def stage_trees(preprocessing: dict[str, Any], source: str = "preprocessing") -> list[BoostedTrees]:
    """The boosted-tree stages kept in ``preprocessing`` (``trees{k}_*`` arrays), checked as untrusted input.

    Raises
    ------
    InvalidInputError
        A key or array is missing or malformed (``source`` names the file).
    """
    for key, kind in PREPROCESSING_TYPES:
        value = preprocessing.get(key)
        if isinstance(value, bool) or not isinstance(value, kind):
            raise InvalidInputError(f"{source}: the superpixel preprocessing lacks {key!r} or holds a "
                                    f"{type(value).__name__} there")
    if not 0 <= preprocessing["stages"] <= 10:
        raise InvalidInputError(f"{source}: {preprocessing['stages']} boosted stages is not a number a model holds")
    return [BoostedTrees.from_arrays({name: preprocessing.get(f"trees{k}_{name}") for name, _ in TREE_FIELDS},
                                     source) for k in range(preprocessing["stages"])]


def image_graph(image: np.ndarray, preprocessing: dict[str, Any], trees: Sequence[BoostedTrees] | None = None,
                source: str = "image") -> tuple[GraphInput, np.ndarray]:
    """The model input of a new grey image (H, W) in [0, 1] with a trained model's ``preprocessing``
    (``info["preprocessing"]`` of :func:`load_superpixel_horses`): superpixels, raw features, the
    boosted stages' scores (each stage on the raw features and the previous stage's context), then the
    training split's standardisation and the per-graph scaling. A test image of the loader gets the
    same graph (``tests/test_superpixel_predict.py``).

    Returns
    -------
    x : GraphInput
    segments : ndarray of int64, shape (H, W)
        The superpixel of every pixel (:func:`project_labels` maps node labels to a mask).

    Raises
    ------
    InvalidInputError
        Preprocessing that does not fit the features (``source`` names the image).
    """
    p = preprocessing
    if trees is None:
        trees = stage_trees(p)
    centres, scale = p["centres"], (p["texton_mean"], p["texton_std"])
    if centres.ndim != 2 or centres.shape[1] != N_BANK or scale[0].shape != (N_BANK,) or scale[1].shape != (N_BANK,):
        raise InvalidInputError(f"{source}: texton centres {centres.shape} and scale {scale[0].shape} do not fit "
                                f"the {N_BANK} filters")
    f = image_features(image, None, centres, scale, p["n_segments"], p["compactness"], read_codebooks(p, source))
    raw, edges = f["nodes"], f["edges"]
    scores: list[np.ndarray] = []
    if trees:
        boundary, sizes, position = _geometry(f["segments"], edges, raw, feature_names(centres.shape[0]))
        scores.append(trees[0].decision_function(raw))
        for t in trees[1:]:
            context = context_features(scores[-1], edges, boundary, sizes, position)
            scores.append(t.decision_function(np.concatenate([raw, context], axis=1)))
    nodes = np.concatenate([np.stack(scores, axis=1), raw], axis=1) if scores else raw
    n = nodes.shape[0]
    if p["node_mean"].shape != (nodes.shape[1],) or p["node_std"].shape != (nodes.shape[1],) or \
            p["edge_scale"].shape != (f["edge_features"].shape[1],):
        raise InvalidInputError(f"{source}: the saved standardisation does not fit {nodes.shape[1]} node and "
                                f"{f['edge_features'].shape[1]} edge features")
    x = GraphInput(np.concatenate([np.ones((n, 1)), (nodes - p["node_mean"]) / p["node_std"]], axis=1) / n, edges,
                   f["edge_features"] / p["edge_scale"] / n)
    return x, f["segments"]


def read_image_graph(file: str | os.PathLike, preprocessing: dict[str, Any],
                     trees: Sequence[BoostedTrees] | None = None) -> tuple[GraphInput, np.ndarray]:
    """:func:`image_graph` of a grey image file (read as training reads ``gray/``).

    Raises
    ------
    DataNotFoundError, InvalidInputError
        The file is missing or cannot be decoded, or the preprocessing does not fit (naming the file).
    """
    image = read_image(Path(file), "L").astype(np.float64) / 255.0
    return image_graph(image, preprocessing, trees, str(file))


def read_gold_mask(file: str | os.PathLike, shape: tuple[int, int]) -> np.ndarray:
    """A full-resolution figure-ground mask (> 127, as training reads ``figure_ground/``) of an image of ``shape``.

    Raises
    ------
    DataNotFoundError, InvalidInputError
        The file is missing, undecodable, or not the image's size (naming it).
    """
    mask = read_image(Path(file), "L") > 127
    if mask.shape != tuple(shape):
        raise InvalidInputError(f"{file}: mask is {mask.shape[1]}x{mask.shape[0]} pixels but its image is "
                                f"{shape[1]}x{shape[0]}")
    return mask


# --------------------------------------------------------------------------- prediction-time foreground bias
#: how a foreground bias ``b`` is spread over a graph's superpixels: ``"uniform"`` adds ``b / N`` to every one of
#: the N superpixels' foreground score, ``"area"`` adds ``b`` times the superpixel's fraction of the image's pixels;
#: both add ``b`` in total, in the units of the per-graph scaled scores (every feature is divided by N)
BIAS_MODES = ("uniform", "area")


def _check_bias(fg_bias: Any, bias_mode: Any, source: str = "fg_bias") -> tuple[float, str]:
    if isinstance(fg_bias, (bool, np.bool_)) or not isinstance(fg_bias, numbers.Real) or not np.isfinite(fg_bias):
        raise InvalidInputError(f"{source}: the foreground bias must be a finite number, got {fg_bias!r}")
    if bias_mode not in BIAS_MODES:
        raise InvalidInputError(f"{source}: the bias mode must be one of {', '.join(BIAS_MODES)}, got {bias_mode!r}")
    return float(fg_bias), str(bias_mode)


def node_bias(segments: np.ndarray, fg_bias: float, bias_mode: str = "uniform") -> np.ndarray:
    """The shift ``(N,)`` of each superpixel's foreground score for a total bias ``fg_bias`` (:data:`BIAS_MODES`)."""
    fg_bias, bias_mode = _check_bias(fg_bias, bias_mode)
    segments, N = _check_labels(segments)
    if bias_mode == "uniform":
        return np.full(N, fg_bias / N)
    return fg_bias * np.bincount(segments.ravel(), minlength=N) / segments.size


def biased_labels(model: GraphModel, w: np.ndarray, x: GraphInput, segments: np.ndarray, fg_bias: float = 0.0,
                  bias_mode: str = "uniform", exact: bool = True) -> np.ndarray:
    """MAP labels ``(N,)`` of one graph with :func:`node_bias` added to the foreground state's (state 1) unary
    scores: exact MAP (branch-and-bound over AD3) or AD3's rounding. ``fg_bias == 0`` is
    :meth:`GraphModel.predict` itself. IoU rewards a different decision than pixel accuracy does: a positive
    bias trades precision for recall of the foreground."""
    fg_bias, bias_mode = _check_bias(fg_bias, bias_mode)
    exact = check_flag(exact, "exact", "biased_labels")
    if fg_bias == 0.0:
        return model.predict(x, w, exact=exact)
    x = model.validate_input(x)
    shift = node_bias(segments, fg_bias, bias_mode)
    if shift.shape[0] != x.nodes.shape[0] or model.n_states != 2:
        raise InvalidInputError(f"a foreground bias needs 2 states and one superpixel per node: {x.nodes.shape[0]} "
                                f"nodes, {shift.shape[0]} superpixels, {model.n_states} states")
    theta = model.potentials(x, np.asarray(w, dtype=float))
    unary = theta.unary.copy()
    unary[:, 1] += shift
    return model.structure.map_labels(type(theta)(unary, theta.pairwise), exact=exact)


# --------------------------------------------------------------------------- training task
def predict_masks(model: GraphModel, w: np.ndarray, X: Sequence[GraphInput], segments: Sequence[np.ndarray],
                  exact: bool = True, fg_bias: float = 0.0, bias_mode: str = "uniform") -> list[np.ndarray]:
    """Full-resolution 0/1 masks: each graph's MAP labels (exact, or AD3's rounding), with the foreground bias
    ``fg_bias`` (:func:`biased_labels`), projected on its pixels."""
    if len(X) != len(segments):
        raise InvalidInputError(f"{len(X)} graphs but {len(segments)} superpixel label images")
    return [project_labels(s, biased_labels(model, w, x, s, fg_bias, bias_mode, exact)) for x, s in zip(X, segments)]


def pixel_scores(masks: Sequence[np.ndarray], predicted: Sequence[np.ndarray]) -> dict[str, float]:
    """Pixel accuracy, foreground IoU and mean per-image IoU at full resolution (the grid task's metric)."""
    return segmentation_scores([np.asarray(m, dtype=np.int64) for m in masks],
                               [np.asarray(p, dtype=np.int64) for p in predicted])


def superpixel_loss(fg_weight: float = 1.0) -> Any:
    """The training loss: Hamming over superpixels divided by their number, a missed foreground superpixel
    costing ``fg_weight`` (a false foreground 1): :class:`~structopt.losses.Hamming` when it is 1, else
    :class:`~structopt.losses.WeightedHamming` (IoU rewards the foreground's recall more than accuracy does)."""
    from structopt.losses import Hamming, WeightedHamming

    if isinstance(fg_weight, bool) or not isinstance(fg_weight, (int, float)) or not (
            np.isfinite(fg_weight) and fg_weight > 0):
        raise InvalidInputError(f"fg_weight must be a positive number, got {fg_weight!r}")
    if fg_weight == 1:
        return Hamming(normalize=True)
    return WeightedHamming(np.array([[0.0, 1.0], [float(fg_weight), 0.0]]), normalize=True)


def _train(model: GraphModel, X: Sequence[GraphInput], Y: Sequence[np.ndarray], lam: float, passes: float,
           seed: int, fg_weight: float = 1.0) -> np.ndarray:
    from structopt.problem import SSVMProblem
    from structopt.solvers.bcfw import bcfw

    problem = SSVMProblem(model, list(X), list(Y), superpixel_loss(fg_weight), lam)
    return bcfw(problem, max_passes=passes, random_state=seed).w


def select_lam(data: dict[str, Any], lams: Sequence[float] = DEFAULT_LAMS, n_folds: int = 3, passes: float = 5,
               n_train: int | None = None, seed: int = 0, progress: bool | Progress = False, fg_weight: float = 1.0
               ) -> dict[str, Any]:
    """λ by ``n_folds``-fold cross-validation on the training images only (image ``t`` in fold ``t % n_folds``):
    BCFW for ``passes`` passes on the other folds, scored by the mean of pixel accuracy and foreground
    IoU on the held-out fold (AD3's rounded labels, projected on the pixels).

    ``fg_weight`` is the loss's (:func:`superpixel_loss`).

    Returns
    -------
    dict with ``lam`` (the best), ``scores`` ({λ: mean CV score}), ``metrics`` ({λ: {"pixel_accuracy",
    "foreground_iou"} pooled over the held-out folds' pixels}) and ``seconds``.
    """
    train = data["train"]
    n = len(train["X"]) if n_train is None else min(int(n_train), len(train["X"]))
    lams = check_cross_validation(n, n_folds, "images", lams)
    fold = np.arange(n) % n_folds
    start = time.perf_counter()
    scores: dict[float, float] = {}
    metrics: dict[float, dict[str, float]] = {}
    for lam in lams:
        values = []
        held_masks, held_pred = [], []
        for f in range(n_folds):
            fit, held = np.flatnonzero(fold != f), np.flatnonzero(fold == f)
            w = _train(data["model"], [train["X"][i] for i in fit], [train["y"][i] for i in fit], lam, passes, seed,
                       fg_weight)
            pred = predict_masks(data["model"], w, [train["X"][i] for i in held],
                                 [train["segments"][i] for i in held], exact=False)
            s = pixel_scores([train["masks"][i] for i in held], pred)
            values.append(0.5 * (s["pixel_accuracy"] + s["foreground_iou"]))
            held_masks += [train["masks"][i] for i in held]
            held_pred += pred
        scores[lam] = float(np.mean(values))
        pooled = pixel_scores(held_masks, held_pred)
        metrics[lam] = {"pixel_accuracy": pooled["pixel_accuracy"], "foreground_iou": pooled["foreground_iou"]}
        as_progress(progress).stage(f"cv λ={lam:g}: score {scores[lam]:.4f} ({time.perf_counter() - start:.0f} s)")
    best = max(scores, key=lambda v: (scores[v], v))  # ties: the larger λ (the simpler model)
    return {"lam": best, "scores": scores, "metrics": metrics, "seconds": time.perf_counter() - start}


def select_fg_bias(data: dict[str, Any], lam: float, biases: Sequence[float], modes: Sequence[str] = BIAS_MODES,
                   n_folds: int = 3, passes: float = 5, n_train: int | None = None, seed: int = 0,
                   fg_weight: float = 1.0, min_accuracy: float = 0.905, exact: bool = True,
                   progress: bool | Progress = False) -> dict[str, Any]:
    """The prediction-time foreground bias (:func:`biased_labels`) by ``n_folds``-fold cross-validation on the
    training images only (the folds of :func:`select_lam`): BCFW for ``passes`` passes at ``lam`` on the other
    folds, then every ``(mode, bias)`` scored on the held-out fold by exact MAP (or AD3's rounding).

    Two criteria, both reported: ``"iou"``, the largest CV foreground IoU whose CV pixel accuracy is at least
    ``min_accuracy`` (no bias when none is); ``"mean"``, the largest CV score (the mean over folds of
    (pixel accuracy + foreground IoU) / 2, :func:`select_lam`'s score). Ties: the smaller ``|bias|``, then
    ``"uniform"``.

    Returns
    -------
    dict with ``table`` ({(mode, bias): {"score", "pixel_accuracy", "foreground_iou", "precision", "recall"}},
    accuracy, IoU, precision and recall pooled over the held-out folds' pixels), ``iou`` and ``mean`` (each the
    chosen ``(mode, bias)``) and ``seconds``.
    """
    train = data["train"]
    n = len(train["X"]) if n_train is None else min(int(n_train), len(train["X"]))
    check_cross_validation(n, n_folds, "images")
    grid = list(dict.fromkeys(_check_bias(b, m)[::-1] for m in modes for b in biases))  # (mode, bias), checked
    if not grid or all(b != 0.0 for _, b in grid):
        grid = [("uniform", 0.0), *grid]  # the unbiased model is always a candidate
    fold = np.arange(n) % n_folds
    start = time.perf_counter()
    counts = {c: np.zeros(4, dtype=np.int64) for c in grid}
    fold_scores: dict[tuple[str, float], list[float]] = {c: [] for c in grid}
    for f in range(n_folds):
        fit, held = np.flatnonzero(fold != f), np.flatnonzero(fold == f)
        w = _train(data["model"], [train["X"][i] for i in fit], [train["y"][i] for i in fit], lam, passes, seed,
                   fg_weight)
        masks = [train["masks"][i] for i in held]
        for c in grid:
            pred = predict_masks(data["model"], w, [train["X"][i] for i in held],
                                 [train["segments"][i] for i in held], exact, c[1], c[0])
            k = pixel_counts(masks, pred)
            counts[c] += k
            m = count_metrics(k)
            fold_scores[c].append(0.5 * (m["pixel_accuracy"] + m["foreground_iou"]))
        as_progress(progress).stage(f"bias cv fold {f + 1}/{n_folds} ({time.perf_counter() - start:.0f} s)")
    table = {c: {"score": float(np.mean(fold_scores[c])), **count_metrics(counts[c])} for c in grid}

    def tie(c: tuple[str, float]) -> tuple[float, int]:
        return -abs(c[1]), -BIAS_MODES.index(c[0])

    feasible = [c for c in grid if table[c]["pixel_accuracy"] >= min_accuracy]
    unbiased = next(c for c in grid if c[1] == 0.0)  # the fallback when no candidate is accurate enough
    by_iou = max(feasible, key=lambda c: (table[c]["foreground_iou"], *tie(c))) if feasible else unbiased
    by_mean = max(grid, key=lambda c: (table[c]["score"], *tie(c)))
    return {"table": table, "iou": by_iou, "mean": by_mean, "seconds": time.perf_counter() - start}


def write_mask_png(path: str | os.PathLike, root: str | os.PathLike, names: Sequence[str],
                   masks: Sequence[np.ndarray], predicted: Sequence[np.ndarray],
                   segments: Sequence[np.ndarray] | None = None, n: int = 4) -> Path:
    """A PNG of ``n`` test images (grey, with superpixel boundaries when ``segments`` is given), their
    gold masks and the predicted masks; returns the path written.

    Raises
    ------
    OutputError
        The file cannot be written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from skimage.segmentation import find_boundaries

    n = min(int(n), len(names))
    if n < 1:
        raise InvalidInputError("write_mask_png needs at least one image")
    path = Path(path)
    fig, axes = plt.subplots(n, 3, figsize=(8, 2.4 * n), squeeze=False)
    for row in range(n):
        image, _ = _read_pair(Path(root), names[row])
        shown = np.repeat(image[..., None], 3, axis=2)
        if segments is not None:
            shown[find_boundaries(segments[row], mode="inner")] = (1.0, 0.85, 0.0)
        for ax, picture, title in zip(axes[row], (shown, masks[row], predicted[row]),
                                      (names[row], "gold", "predicted")):
            ax.imshow(picture, cmap="gray", interpolation="nearest")
            ax.set_title(title, fontsize=9)
            ax.axis("off")
    fig.tight_layout()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=100)
    except OSError as error:
        raise OutputError(f"cannot write {path}: {error.strerror or error}") from error
    finally:
        plt.close(fig)
    return path


def build_task(data_dir: str | os.PathLike | None = None, n_train: int | None = None, lam: float | None = None,
               seed: int = 0, *, fg_weight: float = DEFAULT_FG_WEIGHT, lams: Sequence[float] = DEFAULT_LAMS,
               cv_folds: int = 3, cv_passes: float = 5, exact_predict: bool = True,
               png: str | os.PathLike | None = None, progress: bool | Progress = False, **load_options: Any
               ) -> tuple[Any, Callable[[np.ndarray], dict[str, float]], str, dict[str, Any]]:
    """The superpixel horses as a training task: ``(problem, evaluate, description, preprocessing)``.

    Parameters
    ----------
    data_dir : path, optional
        The horses directory (default: see :func:`load_superpixel_horses`).
    n_train : int, optional
        Train on the first ``n_train`` training images only (the test split is unchanged).
    lam : float, optional
        λ; None chooses it by :func:`select_lam` on the training images (``lams``, ``cv_folds``
        folds, ``cv_passes`` BCFW passes each).
    seed : int
        Seed of the features (textons, stacking) and of the CV runs.
    fg_weight : float
        The loss's price of a missed foreground superpixel (:func:`superpixel_loss`).
    exact_predict : bool
        ``evaluate`` predicts by exact MAP (branch-and-bound over AD3) or AD3's rounding.
    png : path, optional
        ``evaluate`` also writes the test masks there (:func:`write_mask_png`).
    progress : bool or Progress
        Say on stderr what is computed (features, CV; :mod:`~structopt.progress`).
    **load_options
        Passed to :func:`load_superpixel_horses` (``n_segments``, ``compactness``, ``n_textons``,
        ``patch_centres``, ``max_images``, ``stacked``, ``context_stages``, ``cache``).

    Returns
    -------
    problem : SSVMProblem
        :class:`GraphModel` (relaxed AD3 oracle), :func:`superpixel_loss` (Hamming over superpixels).
    evaluate : callable
        ``evaluate(w)`` -> ``{"test_pixel_accuracy", "test_foreground_iou", "test_mean_image_iou"}``
        on full-resolution test masks.
    description : str
        Names the task and the graph sizes, with the CV scores of the candidate λ when it was chosen (the
        problem holds λ; a caller prints it from there).
    preprocessing : dict
        What reading a new image needs (:func:`image_graph`; arrays and JSON values), with
        ``graph: "superpixels"``.
    """
    from structopt.problem import SSVMProblem

    if n_train is not None and (isinstance(n_train, bool) or not isinstance(n_train, (int, np.integer))
                                or n_train < 1):
        raise InvalidInputError(f"n_train must be a positive integer or None, got {n_train!r}")
    if lam is not None and not (isinstance(lam, (int, float)) and np.isfinite(lam) and lam > 0):
        raise InvalidInputError(f"lam must be a positive number or None, got {lam!r}")
    data = load_superpixel_horses(data_dir, seed=seed, progress=progress, **load_options)
    train, test, info = data["train"], data["test"], data["info"]
    n = len(train["X"]) if n_train is None else min(int(n_train), len(train["X"]))
    cv = ""
    if lam is None:
        chosen = select_lam(data, lams, cv_folds, cv_passes, n, seed, progress, fg_weight)
        lam = chosen["lam"]
        cv = ", cross-validated (" + ", ".join(f"{k:g}: {v:.4f}" for k, v in chosen["scores"].items()) + ")"
    model = data["model"]
    problem = SSVMProblem(model, train["X"][:n], train["y"][:n], superpixel_loss(fg_weight), float(lam))

    def evaluate(w: np.ndarray) -> dict[str, float]:
        pred = predict_masks(model, w, test["X"], test["segments"], exact=exact_predict)
        if png is not None:
            write_mask_png(png, info["root"], test["names"], test["masks"], pred, test["segments"])
        return {f"test_{name}": value for name, value in pixel_scores(test["masks"], pred).items()}

    description = (f"Weizmann horses on SLIC superpixels ({n} training / {len(test['X'])} test images, "
                   f"{info['mean_nodes']:.0f} nodes and {info['mean_edges']:.0f} edges per graph), "
                   f"{info['context_stages']} auto-context stage(s), foreground weight {float(fg_weight):g}{cv}")
    return problem, evaluate, description, {"graph": "superpixels", **info["preprocessing"]}
