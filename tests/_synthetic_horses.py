"""Synthetic Weizmann-horses folders for the superpixel tests: grey images with a bright noisy ellipse
(the "horse") on a darker background, and their figure-ground masks."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_synthetic_horses(root: Path, n: int, *, seed: int, height: int, width: int, foreground: float,
                           background: float, noise: float) -> None:
    """``n`` image/mask pairs ``horse000.jpg ...`` under ``root/gray`` and ``root/figure_ground``; image ``i`` is
    ``height + 2 i`` by ``width`` pixels, the ellipse centred near the middle."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    (root / "gray").mkdir(parents=True)
    (root / "figure_ground").mkdir()
    for i in range(n):
        H, W = height + 2 * i, width
        rr, cc = np.mgrid[:H, :W]
        cy, cx = H / 2 + rng.integers(-3, 4), W / 2 + rng.integers(-4, 5)
        mask = ((rr - cy) / (H / 4)) ** 2 + ((cc - cx) / (W / 4)) ** 2 <= 1
        image = np.where(mask, foreground, background) + rng.normal(0, noise, size=(H, W))
        Image.fromarray((np.clip(image, 0, 1) * 255).astype(np.uint8)).save(root / "gray" / f"horse{i:03d}.jpg")
        Image.fromarray(mask.astype(np.uint8) * 255).save(root / "figure_ground" / f"horse{i:03d}.jpg")
