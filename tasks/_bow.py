"""Bag-of-visual-words cell features: dense HOG block descriptors quantised by a k-means codebook.

HOG (scikit-image) is computed with ``pixels_per_cell = cell_size / 2`` and 2 x 2 blocks, so each
block descriptor covers one grid cell's worth of pixels and four block centres fall inside every
grid cell (one or two in the first row and column). Each descriptor is assigned its nearest
codeword; a cell's feature vector is the histogram of the words of the blocks centred in it.

A coarser HOG (:func:`coarse_descriptors`, ``pixels_per_cell = cell_size``) gives block
descriptors that each span 2 x 2 grid cells; a block's word counts in all four. Colour words
(:func:`lab_pixels`, :func:`colour_histograms`) quantise the CIE-Lab value of every pixel; a cell
counts the words of its pixels.
"""

from __future__ import annotations

import numpy as np

ORIENTATIONS = 9


def grid_shape(image_shape: tuple[int, int], cell_size: int) -> tuple[int, int]:
    """Cells of ``cell_size`` pixels that fit in the image (the remainder is cropped)."""
    return image_shape[0] // cell_size, image_shape[1] // cell_size


def descriptors(image: np.ndarray, cell_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Dense HOG block descriptors of a grey image and the grid cell each one is centred in.

    Returns
    -------
    desc : (m, 4 * ORIENTATIONS) float32
    cell : (m, 2) int64
        ``(row, column)`` of the grid cell holding each block centre (blocks outside the grid
        are dropped).
    """
    from skimage.feature import hog

    half = cell_size // 2
    blocks = hog(image, orientations=ORIENTATIONS, pixels_per_cell=(half, half), cells_per_block=(2, 2),
                 block_norm="L2-Hys", feature_vector=False)
    n_rows, n_cols = blocks.shape[:2]
    H, W = grid_shape(image.shape, cell_size)
    # block (a, c) covers pixels [a * half, a * half + cell_size): its centre is (a + 1) * half
    rows = ((np.arange(n_rows) + 1) * half) // cell_size
    cols = ((np.arange(n_cols) + 1) * half) // cell_size
    rr, cc = np.meshgrid(rows, cols, indexing="ij")
    keep = (rr < H) & (cc < W)
    desc = blocks.reshape(n_rows, n_cols, -1)[keep].astype(np.float32)
    return desc, np.stack([rr[keep], cc[keep]], axis=1).astype(np.int64)


def coarse_descriptors(image: np.ndarray, cell_size: int) -> tuple[np.ndarray, np.ndarray]:
    """HOG block descriptors at twice the scale: each block covers 2 x 2 grid cells.

    Returns
    -------
    desc : (m, 4 * ORIENTATIONS) float32
    cell : (m, 2) int64
        ``(row, column)`` of the top-left grid cell of the block (the block spans that cell and its
        right, lower and lower-right neighbours; blocks reaching past the grid are dropped).
    """
    from skimage.feature import hog

    blocks = hog(image, orientations=ORIENTATIONS, pixels_per_cell=(cell_size, cell_size), cells_per_block=(2, 2),
                 block_norm="L2-Hys", feature_vector=False)
    n_rows, n_cols = blocks.shape[:2]
    H, W = grid_shape(image.shape, cell_size)
    rr, cc = np.meshgrid(np.arange(n_rows), np.arange(n_cols), indexing="ij")
    keep = (rr + 1 < H) & (cc + 1 < W)
    desc = blocks.reshape(n_rows, n_cols, -1)[keep].astype(np.float32)
    return desc, np.stack([rr[keep], cc[keep]], axis=1).astype(np.int64)


def lab_pixels(rgb: np.ndarray, cell_size: int) -> np.ndarray:
    """(H * cell_size, W * cell_size, 3) float32 CIE-Lab values of an RGB image in [0, 1], cropped to the grid."""
    from skimage.color import rgb2lab

    H, W = grid_shape(rgb.shape[:2], cell_size)
    return rgb2lab(np.clip(rgb[: H * cell_size, : W * cell_size], 0.0, 1.0)).astype(np.float32)


def fit_codebook(train_descriptors: list[np.ndarray], n_words: int, random_state: int,
                 max_samples: int = 60_000) -> np.ndarray:
    """k-means codebook (n_words, d) fitted with MiniBatchKMeans on a random subsample."""
    from sklearn.cluster import MiniBatchKMeans

    rng = np.random.default_rng(random_state)
    pool = np.concatenate(train_descriptors)
    if len(pool) > max_samples:
        pool = pool[rng.choice(len(pool), max_samples, replace=False)]
    km = MiniBatchKMeans(n_clusters=n_words, random_state=random_state, batch_size=4096, n_init=3)
    km.fit(pool)
    return km.cluster_centers_.astype(np.float32)


def assign(desc: np.ndarray, codebook: np.ndarray) -> np.ndarray:
    """Index of the nearest codeword of every descriptor."""
    d2 = (desc * desc).sum(1)[:, None] - 2.0 * desc @ codebook.T + (codebook * codebook).sum(1)[None, :]
    return np.argmin(d2, axis=1)


def cell_histograms(words: np.ndarray, cells: np.ndarray, grid: tuple[int, int], n_words: int) -> np.ndarray:
    """(H, W, n_words) counts of the words of the descriptors centred in each cell."""
    H, W = grid
    hist = np.zeros((H * W, n_words))
    np.add.at(hist, (cells[:, 0] * W + cells[:, 1], words), 1.0)
    return hist.reshape(H, W, n_words)


def spread_histograms(words: np.ndarray, cells: np.ndarray, grid: tuple[int, int], n_words: int) -> np.ndarray:
    """(H, W, n_words) counts of words of blocks spanning 2 x 2 cells from ``cells`` (their top-left)."""
    H, W = grid
    hist = np.zeros((H, W, n_words))
    for dr in (0, 1):
        for dc in (0, 1):
            np.add.at(hist, (cells[:, 0] + dr, cells[:, 1] + dc, words), 1.0)
    return hist


def colour_histograms(lab: np.ndarray, codebook: np.ndarray, cell_size: int) -> np.ndarray:
    """(H, W, n_colours) counts of the colour words of each cell's pixels."""
    h, w = lab.shape[:2]
    H, W = h // cell_size, w // cell_size
    words = assign(lab.reshape(-1, 3), codebook).reshape(h, w)
    rows = np.repeat(np.arange(H), cell_size)
    cols = np.repeat(np.arange(W), cell_size)
    hist = np.zeros((H, W, codebook.shape[0]))
    np.add.at(hist, (rows[:, None], cols[None, :], words), 1.0)
    return hist
