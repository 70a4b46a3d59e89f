"""Bag-of-visual-words cell features: dense HOG block descriptors quantised by a k-means codebook.

HOG (scikit-image) is computed with ``pixels_per_cell = cell_size / 2`` and 2 x 2 blocks, so each
block descriptor covers one grid cell's worth of pixels and four block centres fall inside every
grid cell (one or two in the first row and column). Each descriptor is assigned its nearest
codeword; a cell's feature vector is the histogram of the words of the blocks centred in it.
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
