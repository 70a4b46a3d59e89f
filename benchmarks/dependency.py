"""Dependency-tree oracles against other implementations: time per sentence and agreement.

Usage::

    python benchmarks/dependency.py [--sentences 20] [--lengths 10 50 100] [--long 1000 --long-sentences 10]

Compared on the same random arc scores (uniform in [-20, 20], float64), one sentence per call:

- non-projective argmax: structopt's Chu-Liu/Edmonds kernel (Tarjan's O(n²) form; ``DependencyTree.argmax``, multi- and
  single-root) against ``ufal.chu_liu_edmonds`` (Cython; benchmark-only dependency, ``pip install
  ufal.chu_liu_edmonds``) and networkx's ``maximum_spanning_arborescence``; agreement = the same
  tree score (and heads);
- marginals: the matrix-tree theorem (``DependencyTree(projective=False).marginals``) against
  torch-struct's ``NonProjectiveDependencyCRF`` (its functions ``deptree_nonproj`` and ``deptree_part``
  called with ``eps=0``: the distribution adds 1e-5 to every exponentiated score) and Eisner's inside-outside
  (``DependencyTree(projective=True).marginals``) against torch-struct's ``DependencyCRF`` (both on CPU
  in float64, batch of one sentence, single- and multi-root), agreement = max |marginal difference|.

Long sentences (``--long``, default n = 1000): the non-projective argmax only, structopt (single and multi root)
against ufal (networkx would take minutes per sentence), on arc scores of four kinds: uniform in [-20, 20], the
same with half the arcs at -inf, with the root arcs lowered by 30 and raised by 30 (a multi-root tree with many
root arcs: the single-root run continues the most there).

Times are CPU seconds per call (the machine is shared): the median over the sentences, each the best of
three calls after one warm-up call (numba compilation and Eisner's hypergraph for that length are built
before timing).
"""

from __future__ import annotations

import argparse
import platform
import time

import networkx as nx
import numpy as np

from structopt.structures.dependency import DependencyPotentials, DependencyTree


def cpu_time(fn, repeats: int = 3) -> float:
    fn()
    best = np.inf
    for _ in range(repeats):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def ufal_heads(arcs: np.ndarray) -> np.ndarray:
    from ufal.chu_liu_edmonds import chu_liu_edmonds

    heads, _ = chu_liu_edmonds(np.ascontiguousarray(arcs.T))  # ufal: [modifier, head]
    return np.asarray(heads[1:], dtype=np.int64)


def networkx_heads(arcs: np.ndarray) -> np.ndarray:
    N = arcs.shape[0]
    graph = nx.DiGraph()
    h, m = np.meshgrid(np.arange(N), np.arange(N), indexing="ij")
    keep = (h != m) & (m >= 1)
    graph.add_weighted_edges_from(zip(h[keep].tolist(), m[keep].tolist(), arcs[keep].tolist(), strict=True))
    tree = nx.maximum_spanning_arborescence(graph)
    heads = np.zeros(N - 1, dtype=np.int64)
    for u, v in tree.edges():
        heads[v - 1] = u
    return heads


def torch_potentials(arcs: np.ndarray):
    import torch

    n = arcs.shape[0] - 1
    phi = arcs[1:, 1:].copy()
    phi[np.arange(n), np.arange(n)] = arcs[0, 1:]  # torch-struct: root arcs on the diagonal
    # a non-leaf tensor: DependencyCRF writes in place into a view of its input, which autograd refuses on a leaf
    return torch.tensor(phi[None], dtype=torch.float64, requires_grad=True) + 0.0


def from_torch(marg: np.ndarray) -> np.ndarray:
    n = marg.shape[0]
    out = np.zeros((n + 1, n + 1))
    out[1:, 1:] = marg
    out[0, 1:] = np.diag(marg)
    out[np.arange(1, n + 1), np.arange(1, n + 1)] = 0.0
    return out


def argmax_rows(lengths: list[int], n_sentences: int, rng: np.random.Generator) -> list[str]:
    rows = []
    for n in lengths:
        scores = [rng.uniform(-20, 20, (n + 1, n + 1)) for _ in range(n_sentences)]
        multi, single = DependencyTree(single_root=False), DependencyTree(single_root=True)
        t = {"structopt multi-root": [], "structopt single-root": [], "ufal": [], "networkx": []}
        agree = {"ufal": 0, "networkx": 0}
        for arcs in scores:
            theta = DependencyPotentials(arcs)
            ours = multi.argmax(theta)
            best = multi.score(theta, ours)
            t["structopt multi-root"].append(cpu_time(lambda theta=theta, tree=multi: tree.argmax(theta)))
            t["structopt single-root"].append(cpu_time(lambda theta=theta, tree=single: tree.argmax(theta)))
            t["ufal"].append(cpu_time(lambda arcs=arcs: ufal_heads(arcs)))
            t["networkx"].append(cpu_time(lambda arcs=arcs: networkx_heads(arcs), repeats=1))
            for name, fn in (("ufal", ufal_heads), ("networkx", networkx_heads)):
                other = fn(arcs)
                agree[name] += abs(multi.score(theta, other) - best) <= 1e-9 * (1 + abs(best))
        base = np.median(t["structopt multi-root"])
        for name, times in t.items():
            med = float(np.median(times))
            same = "-" if name.startswith("structopt") else f"{agree[name]}/{n_sentences}"
            rows.append(f"| {n} | {name} | {med * 1e6:,.0f} | {med / base:.2f} | {same} |")
    return rows


def long_rows(lengths: list[int], n_sentences: int, rng: np.random.Generator) -> list[str]:
    """The non-projective argmax on long sentences (module docstring): median CPU ms over ``n_sentences`` per kind
    of scores; the tree scores agree with ufal's (multi root)."""
    rows = []
    multi, single = DependencyTree(single_root=False), DependencyTree(single_root=True)
    for n in lengths:
        for kind in ("uniform", "half -inf", "root - 30", "root + 30"):
            t = {"multi-root": [], "single-root": [], "ufal": []}
            agree, roots = 0, []
            for _ in range(n_sentences):
                arcs = rng.uniform(-20, 20, (n + 1, n + 1))
                if kind == "half -inf":
                    arcs[rng.random(arcs.shape) < 0.5] = -np.inf
                elif kind != "uniform":
                    arcs[0] += -30.0 if kind == "root - 30" else 30.0
                theta = DependencyPotentials(arcs)
                ours = multi.argmax(theta)
                roots.append(int(np.sum(ours == 0)))
                t["multi-root"].append(cpu_time(lambda theta=theta: multi.argmax(theta)))
                t["single-root"].append(cpu_time(lambda theta=theta: single.argmax(theta)))
                if kind != "half -inf":  # ufal takes dense finite scores
                    t["ufal"].append(cpu_time(lambda arcs=arcs: ufal_heads(arcs), repeats=1))
                    best = multi.score(theta, ours)
                    agree += abs(multi.score(theta, ufal_heads(arcs)) - best) <= 1e-9 * (1 + abs(best))
            base = float(np.median(t["multi-root"]))
            for name, times in t.items():
                if not times:
                    continue
                med = float(np.median(times))
                same = f"{agree}/{n_sentences}" if name == "ufal" else "-"
                rows.append(f"| {n} | {kind} | {float(np.median(roots)):.0f} | {name} | {med * 1e3:,.2f} | "
                            f"{med / base:.2f} | {same} |")
    return rows


def marginal_rows(lengths: list[int], n_sentences: int, rng: np.random.Generator) -> list[str]:
    from torch_struct import DependencyCRF, NonProjectiveDependencyCRF
    from torch_struct.deptree import deptree_nonproj, deptree_part

    rows = []
    for projective in (False, True):
        for single_root in (False, True):
            tree = DependencyTree(projective=projective, single_root=single_root)
            crf = DependencyCRF if projective else NonProjectiveDependencyCRF
            for n in lengths:
                ours_t, theirs_t, worst, worst_z = [], [], 0.0, 0.0
                for _ in range(n_sentences):
                    arcs = rng.uniform(-20, 20, (n + 1, n + 1))
                    theta = DependencyPotentials(arcs)
                    phi = torch_potentials(arcs)

                    def theirs(phi=phi, crf=crf, multiroot=not single_root, projective=projective):
                        if projective:
                            dist = crf(phi, multiroot=multiroot)
                            return dist.marginals, dist.partition
                        # the functions behind NonProjectiveDependencyCRF, with eps = 0: by default they add
                        # 1e-5 to every exp(score), which biases the marginals (by up to 3e-6 at n = 10 here)
                        return (deptree_nonproj(phi, multiroot, eps=0.0),
                                deptree_part(phi, multiroot, eps=0.0))

                    log_z, mu = tree.marginals(theta)
                    marg, part = theirs()
                    worst = max(worst, float(np.max(np.abs(from_torch(marg[0].detach().numpy()) - mu.arcs))))
                    worst_z = max(worst_z, abs(float(part.detach()[0]) - log_z) / (1 + abs(log_z)))
                    ours_t.append(cpu_time(lambda theta=theta, tree=tree: tree.marginals(theta)))
                    theirs_t.append(cpu_time(theirs, repeats=1))
                a, b = float(np.median(ours_t)), float(np.median(theirs_t))
                kind = ("Eisner" if projective else "matrix-tree") + (", single root" if single_root else
                                                                      ", multi-root")
                rows.append(f"| {kind} | {n} | {a * 1e6:,.0f} | {b * 1e6:,.0f} | {b / a:.1f} | {worst:.1e} | "
                            f"{worst_z:.1e} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sentences", type=int, default=20)
    parser.add_argument("--lengths", type=int, nargs="+", default=[10, 50, 100])
    parser.add_argument("--long", type=int, nargs="*", default=[1000], help="long sentence lengths (argmax only)")
    parser.add_argument("--long-sentences", type=int, default=10)
    parser.add_argument("--skip-marginals", action="store_true")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    print(f"# machine: {platform.processor() or platform.machine()}, python {platform.python_version()}, "
          f"torch {torch.__version__} (1 thread), {args.sentences} sentences per length\n")
    print("## Non-projective argmax (CPU µs per sentence, median)\n")
    print("| n | implementation | µs | ÷ structopt multi-root | same score |")
    print("| --- | --- | --- | --- | --- |")
    print("\n".join(argmax_rows(args.lengths, args.sentences, rng)))
    if args.long:
        print("\n## Non-projective argmax on long sentences (CPU ms per sentence, median)\n")
        print("| n | scores | root arcs of the multi-root tree (median) | implementation | ms | ÷ structopt multi-root "
              "| same score |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        print("\n".join(long_rows(args.long, args.long_sentences, rng)))
    if args.skip_marginals:
        return
    print("\n## Marginals and log Z (CPU µs per sentence, median)\n")
    print("| algorithm | n | structopt µs | torch-struct µs | torch-struct ÷ structopt | max abs marginal diff "
          "| log Z rel diff |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(marginal_rows(args.lengths, args.sentences, rng)))


if __name__ == "__main__":
    main()
