"""Probes of the superpixel horses task's foreground IoU (issue 24, item 5): what does not move it.

Usage::

    python benchmarks/horses_superpixels_probes.py passes [--lams 0.01 0.001] [--passes 30] [--every 5]
    python benchmarks/horses_superpixels_probes.py classifier [--variants base area long long_area n1 n1n2]
    python benchmarks/horses_superpixels_probes.py area-loss [--powers 0.5 1] [--passes 10]
    python benchmarks/horses_superpixels_probes.py test-passes [--passes 30] [--every 10]

(each with ``--patch-centres 0`` for the features before the learned patch features)

Every probe but the last uses the training images only, in the folds of
:func:`structopt.tasks.horses_superpixels.select_lam` (training image ``t`` in fold ``t % 3``), and
prints held-out pixel accuracy / foreground IoU pooled over the folds (0 auto-context stages,
λ = 0.01 unless said):

- ``passes``: the CRF's BCFW passes (the held-out metrics every ``--every`` passes of one run per fold);
- ``classifier``: the stacked boosted classifier alone (log-odds > 0), out of fold, with the task's
  settings (``base``), superpixel-area sample weights (``area``), 400 iterations at rate 0.05
  (``long``), and the raw features plus their boundary-area-weighted 1-hop (``n1``) and 2-hop
  (``n1n2``) neighbour means;
- ``area-loss``: the CRF trained with a Hamming loss whose superpixel costs are proportional to
  (area)^power, averaging 1 per image. The library's ``Loss`` contract sees no example, so this
  probe scales the problem's stored loss terms (``SSVMProblem._terms``) itself: a measurement, not
  a feature;
- ``test-passes``: BCFW on all training images, the test images scored with exact MAP every
  ``--every`` passes (run only once the number of passes is chosen by the ``passes`` probe).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.sparse as sp

from structopt.problem import SSVMProblem
from structopt.solvers.bcfw import bcfw
from structopt.tasks import horses_superpixels as hs
from structopt.tasks.horses import count_metrics, pixel_counts

N_FOLDS = 3


def _folds(n: int):
    fold = np.arange(n) % N_FOLDS
    for f in range(N_FOLDS):
        yield np.flatnonzero(fold != f), np.flatnonzero(fold == f)


def _show(label: str, counts: np.ndarray) -> None:
    m = count_metrics(counts)
    print(f"{label}: accuracy {m['pixel_accuracy']:.4f} IoU {m['foreground_iou']:.4f} "
          f"precision {m['precision']:.4f} recall {m['recall']:.4f}", flush=True)


def _problem(data: dict, index: np.ndarray, lam: float) -> SSVMProblem:
    train = data["train"]
    return SSVMProblem(data["model"], [train["X"][i] for i in index], [train["y"][i] for i in index],
                       hs.superpixel_loss(1.0), lam)


def probe_passes(data: dict, lams: list[float], passes: float, every: float) -> None:
    train, model = data["train"], data["model"]
    for lam in lams:
        counts: dict[float, np.ndarray] = {}
        for fit, held in _folds(len(train["X"])):
            X, segments = [train["X"][i] for i in held], [train["segments"][i] for i in held]
            masks = [train["masks"][i] for i in held]

            def held_counts(w: np.ndarray, X=X, segments=segments, masks=masks) -> dict:
                return {"counts": pixel_counts(masks, hs.predict_masks(model, w, X, segments, exact=False))}

            result = bcfw(_problem(data, fit, lam), max_passes=passes, eval_every=every, random_state=0,
                          callback=held_counts)
            for record in result.trace:
                key = round(float(record["passes"]), 1)
                counts[key] = counts.get(key, 0) + record["counts"]
        for key in sorted(counts):
            _show(f"λ={lam:g} passes={key:g}", counts[key])


def _neighbour_means(features: np.ndarray, edges: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = features.shape[0]
    adjacency = sp.csr_matrix((np.ones(2 * len(edges)), (np.r_[edges[:, 0], edges[:, 1]],
                                                         np.r_[edges[:, 1], edges[:, 0]])), shape=(n, n))
    weighted = adjacency @ sp.diags(sizes)
    total = np.asarray(weighted.sum(axis=1)).ravel()
    total[total == 0] = 1.0
    mean = sp.diags(1.0 / total) @ weighted
    one_hop = mean @ features
    return one_hop, mean @ one_hop


def probe_classifier(data: dict, variants: list[str]) -> None:
    from sklearn.ensemble import HistGradientBoostingClassifier
    from threadpoolctl import threadpool_limits

    train = data["train"]
    # the standardised raw features (bias and stacked-score columns dropped; trees ignore the scaling)
    raw = [x.nodes[:, 2:] * x.nodes.shape[0] for x in train["X"]]
    sizes = [np.bincount(s.ravel(), minlength=len(y)).astype(np.float64) for s, y in zip(train["segments"], train["y"])]
    for variant in variants:
        features = raw
        if variant in ("n1", "n1n2"):
            hops = [_neighbour_means(f, x.edges, s) for f, x, s in zip(raw, train["X"], sizes)]
            features = [np.concatenate([f, h1] + ([h2] if variant == "n1n2" else []), axis=1)
                        for f, (h1, h2) in zip(raw, hops)]
        options = dict(max_iter=150, learning_rate=0.1, max_leaf_nodes=31, l2_regularization=1.0,
                       early_stopping=False, random_state=0)
        if variant.startswith("long"):
            options.update(max_iter=400, learning_rate=0.05)
        t0 = time.process_time()
        predicted: list[np.ndarray] = [np.empty(0)] * len(raw)
        with threadpool_limits(1):
            for fit, held in _folds(len(raw)):
                weight = None
                if variant.endswith("area"):
                    weight = np.concatenate([sizes[i] for i in fit])
                    weight /= weight.mean()
                clf = HistGradientBoostingClassifier(**options).fit(
                    np.concatenate([features[i] for i in fit]), np.concatenate([train["y"][i] for i in fit]),
                    sample_weight=weight)
                for i in held:
                    labels = (clf.decision_function(features[i]) > 0).astype(np.int64)
                    predicted[i] = hs.project_labels(train["segments"][i], labels)
        _show(f"classifier {variant} ({features[0].shape[1]} features, {time.process_time() - t0:.0f} CPU s)",
              pixel_counts(train["masks"], predicted))


def probe_area_loss(data: dict, powers: list[float], passes: float, lam: float) -> None:
    train, model = data["train"], data["model"]
    for power in powers:
        counts = np.zeros(4, dtype=np.int64)
        for fit, held in _folds(len(train["X"])):
            problem = _problem(data, fit, lam)
            for j, i in enumerate(fit):  # probe only: reweight the stored Hamming costs per superpixel
                c, const = problem._terms[j]
                area = np.bincount(train["segments"][i].ravel(), minlength=c.unary.shape[0]) ** power
                problem._terms[j] = (type(c)(c.unary * (area * len(area) / area.sum())[:, None], c.pairwise), const)
            w = bcfw(problem, max_passes=passes, random_state=0).w
            predicted = hs.predict_masks(model, w, [train["X"][i] for i in held],
                                         [train["segments"][i] for i in held], exact=False)
            counts += pixel_counts([train["masks"][i] for i in held], predicted)
        _show(f"area^{power:g} loss, {passes:g} passes", counts)


def probe_test_passes(data: dict, passes: float, every: float, lam: float) -> None:
    train, test, model = data["train"], data["test"], data["model"]

    def test_counts(w: np.ndarray) -> dict:
        predicted = hs.predict_masks(model, w, test["X"], test["segments"], exact=True)
        return {"counts": pixel_counts(test["masks"], predicted)}

    t0 = time.process_time()
    result = bcfw(SSVMProblem(model, train["X"], train["y"], hs.superpixel_loss(1.0), lam), max_passes=passes,
                  eval_every=every, random_state=0, callback=test_counts)
    for record in result.trace:
        _show(f"test, {record['passes']:g} passes (primal {record['primal']:.5f}, gap {record['gap']:.5f})",
              record["counts"])
    print(f"CPU s: {time.process_time() - t0:.0f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("probe", choices=["passes", "classifier", "area-loss", "test-passes"])
    parser.add_argument("--data", default=None)
    parser.add_argument("--lams", type=float, nargs="+", default=[0.01])
    parser.add_argument("--passes", type=float, default=None)
    parser.add_argument("--every", type=float, default=None)
    parser.add_argument("--variants", nargs="+", default=["base", "area", "long", "long_area", "n1", "n1n2"])
    parser.add_argument("--powers", type=float, nargs="+", default=[0.5, 1.0])
    parser.add_argument("--patch-centres", type=int, default=hs.DEFAULT_PATCH_CENTRES,
                        help="learned patch features per codebook (0: the features before them)")
    args = parser.parse_args(argv)
    data = hs.load_superpixel_horses(args.data, seed=0, context_stages=0, patch_centres=args.patch_centres)
    if args.probe == "passes":
        probe_passes(data, args.lams, args.passes or 30, args.every or 5)
    elif args.probe == "classifier":
        probe_classifier(data, args.variants)
    elif args.probe == "area-loss":
        probe_area_loss(data, args.powers, args.passes or 10, args.lams[0])
    else:
        probe_test_passes(data, args.passes or 30, args.every or 10, args.lams[0])


if __name__ == "__main__":
    main()
