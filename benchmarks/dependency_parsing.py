"""Turkish dependency parsing (the `parsing` task's data, split and features): UAS/LAS per model and solver.

Usage::

    python benchmarks/dependency_parsing.py [--passes 10] [--solvers bcfw]

Models: labelled non-projective trees (Chu-Liu/Edmonds; the task's model) and labelled projective trees
(Eisner's spans; trained on the training sentences whose gold tree is projective, the others counted and
left out; tested on every test sentence). Reported: test UAS and LAS without punctuation, the training
CPU seconds and the solver's final duality gap.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import structopt as so
from structopt.solvers import get_solver
from structopt.structures.dependency import tree_mask
from structopt.tasks.parsing import N_FEATURES, attachment_scores, featurize, load_parsing, outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passes", type=float, default=10)
    parser.add_argument("--solvers", nargs="+", default=["bcfw"])
    args = parser.parse_args()
    data = load_parsing()
    labels = data["labels"]
    train, test = data["train"], data["test"]
    X, Y, X_test = featurize(train), outputs(train, labels), featurize(test)
    projective = [bool(tree_mask(s.heads[None], True, True)[0]) for s in train]
    print(f"# {len(train):,} training sentences ({len(train) - sum(projective):,} non-projective), {len(test)} test, "
          f"{len(labels)} relations, {args.passes:g} passes, lambda = 1/n\n")
    print("| model | solver | train sentences | test UAS | test LAS | train CPU s | final gap |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for proj in (False, True):
        keep = [i for i in range(len(train)) if projective[i] or not proj]
        model = so.DependencyModel(N_FEATURES, projective=proj, n_labels=len(labels))
        problem = so.SSVMProblem(model, [X[i] for i in keep], [Y[i] for i in keep], so.Hamming(), 1.0 / len(keep))
        for solver in args.solvers:
            start = time.process_time()
            result = get_solver(solver)(problem, max_passes=args.passes, random_state=0)
            seconds = time.process_time() - start
            found = attachment_scores(test, model.predict_batch(X_test, result.w), labels)
            gap = result.trace[-1].get("gap", float("nan"))
            print(f"| {'projective' if proj else 'non-projective'} | {solver} | {len(keep):,} | {found['uas']:.4f} | "
                  f"{found['las']:.4f} | {seconds:.0f} | {gap:.3g} |", flush=True)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
