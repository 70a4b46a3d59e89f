"""Turkish dependency parsing (the `parsing` task's data, split and features): UAS/LAS per model and solver.

Usage::

    python benchmarks/dependency_parsing.py [--passes 10] [--solvers bcfw]
    python benchmarks/dependency_parsing.py --share      # the oracle's share of a BCFW pass

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
    parser.add_argument("--share", action="store_true", help="time one BCFW pass against its oracle calls")
    args = parser.parse_args()
    if args.share:
        share()
        return
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


def share() -> None:
    """One BCFW pass of the task's model against the same number of oracle calls at its final weights:
    loss-augmented decoding as the problem runs it (potentials x @ W, loss terms, Chu-Liu/Edmonds) and the
    structure's argmax alone (on precomputed loss-augmented potentials)."""
    from structopt.losses import Hamming
    from structopt.solvers import bcfw

    data = load_parsing()
    labels = data["labels"]
    X, Y = featurize(data["train"]), outputs(data["train"], labels)
    model = so.DependencyModel(N_FEATURES, n_labels=len(labels))
    problem = so.SSVMProblem(model, X, Y, Hamming(), 1.0 / len(X))
    start = time.process_time()
    result = bcfw(problem, max_passes=1, random_state=0)
    pass_seconds = time.process_time() - start  # the pass and its closing evaluation (primal and gap)
    start = time.process_time()
    for i in range(problem.n):
        problem.decode(i, result.w)
    decode_seconds = time.process_time() - start
    augmented = []
    for i in range(problem.n):
        c, _ = Hamming().linear_terms(model.structure, Y[i], model.potentials(X[i], result.w))
        theta = model.potentials(X[i], result.w)
        augmented.append(so.DependencyPotentials(theta.arcs + c.arcs))
    start = time.process_time()
    for theta in augmented:
        model.structure.argmax(theta)
    argmax_seconds = time.process_time() - start
    print(f"one BCFW pass over {problem.n:,} sentences: {pass_seconds:.2f} s CPU (with its evaluation pass); "
          f"{problem.n:,} loss-augmented decodings: {decode_seconds:.2f} s CPU "
          f"({decode_seconds / pass_seconds:.0%} of the pass); the structure's argmax alone: {argmax_seconds:.2f} s "
          f"({argmax_seconds / pass_seconds:.0%})")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
