"""Turkish dependency parsing: a BiLSTM arc scorer (tasks/parsing_net.py) trained with the structured hinge and
the tree CRF, beside the linear arc-factored model.

Usage::

    OPENBLAS_NUM_THREADS=1 python benchmarks/dependency_parsing_net.py [--losses hinge crf] [--epochs 12]
        [--seed 0] [--n-train N] [--records benchmarks/records/dependency_parsing_net]
        [--out benchmarks/dependency_parsing_net_results.md] [--report]

Each loss is one run of :func:`structopt.tasks.parsing_net.train_parser` (the module's defaults: Adam 2e-3, batch
32, dropout 0.33, word dropout α = 0.25, clipping 5; one torch thread), trained on the task's 3,881 training
sentences, the epoch with the best development UAS kept, UAS/LAS on the 485 test sentences without punctuation.
A run's record (JSON) is written to ``--records`` when it ends, and the table is rebuilt from the records
(``--report`` rebuilds it alone). Per run it also times the oracle alone: after training, the arc tables of every
training sentence (no gradient) and one pass of the structure's own calls on them (``DependencyTree.argmax`` on
the Hamming-augmented table for the hinge, ``DependencyTree.marginals`` for the CRF), so that the share of the
structured loss (its forward and backward through ``structopt.torch``) can be split into the oracle and the rest.
The default run (both losses, 12 epochs) took 13.4 minutes under a load of 6-7 on 2 cores (about 30 s an epoch;
11-14 s an epoch at a load of about 2.5).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import use_checkout, write_keeping_findings  # noqa: E402

#: the linear model's test scores (benchmarks/dependency_parsing_results.md: labelled non-projective trees,
#: McDonald's first-order templates hashed into 2^16 columns, BCFW 10 passes, λ = 1/n)
LINEAR = ("linear arc-factored (DependencyModel), BCFW 10 passes", 0.8331, 0.7573, "8.6 CPU s a pass")
NAMES = {"hinge": "BiLSTM arc scorer, structured hinge (loss-augmented Chu–Liu/Edmonds, Hamming over heads)",
         "crf": "BiLSTM arc scorer, tree CRF (matrix-tree log Z and marginals)"}


def oracle_seconds(model, X, Y, loss: str) -> float:
    """Seconds of one pass of the bare oracle calls over the training sentences at the trained weights."""
    import numpy as np
    import torch

    from structopt.structures.dependency import DependencyPotentials, DependencyTree
    from structopt.tasks.parsing_net import pad

    net, tree = model.module, DependencyTree()
    tables = []
    with torch.no_grad():
        for a in range(0, len(X), 64):
            tokens, lengths = pad(X[a:a + 64])
            arcs = net.arc_scores(net.encode(tokens, lengths), lengths).to(torch.float64).numpy()
            tables += [arcs[b, :n + 1, :n + 1].copy() for b, n in enumerate(lengths.tolist())]
    if loss == "hinge":  # Hamming over heads: +1 on every arc but the gold one of each word
        thetas = []
        for arcs, y in zip(tables, Y):
            shifted = arcs + 1.0
            shifted[y[0], np.arange(1, len(y[0]) + 1)] -= 1.0
            thetas.append(DependencyPotentials(shifted))
        t0 = time.perf_counter()
        for theta in thetas:
            tree.argmax(theta)
        return time.perf_counter() - t0
    thetas = [DependencyPotentials(arcs) for arcs in tables]
    t0 = time.perf_counter()
    for theta in thetas:
        tree.marginals(theta)
    return time.perf_counter() - t0


def run(loss: str, epochs: int, seed: int, n_train: int | None, records: Path) -> dict:
    import torch

    from structopt.progress import Progress
    from structopt.tasks.parsing_net import NetOptions, encode, gold_outputs, train_parser

    options = NetOptions(loss=loss, epochs=epochs, seed=seed)
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    out = train_parser(options, n_train=n_train, progress=Progress(lines=True, bars=True))
    wall = time.perf_counter() - t0
    info = out["info"]
    train = out["data"]["train"][:out["n_train"]]
    oracle = oracle_seconds(out["model"], encode(train, out["vocab"]), gold_outputs(train, out["vocab"]), loss)
    record = {"loss": loss, "options": {k: getattr(options, k) for k in options.__dataclass_fields__},
              "n_train": out["n_train"], "test_uas": info["test_uas"], "test_las": info["test_las"],
              "dev_uas": info["dev_uas"], "dev_las": info["dev_las"], "best_epoch": info["best_epoch"],
              "epochs": info["epochs"], "losses": info["losses"], "epoch_seconds": info["epoch_seconds"],
              "structured_seconds": info["structured_seconds"], "structured_share": info["structured_share"],
              "oracle_seconds": oracle, "wall_seconds": wall, "torch_threads": torch.get_num_threads(),
              "load_before": load_before, "load_average": os.getloadavg(), "machine": platform.machine(),
              "torch": torch.__version__, "n_params": int(out["model"].n_params)}
    records.mkdir(parents=True, exist_ok=True)
    (records / f"{loss}{'' if n_train is None else f'_n{n_train}'}.json").write_text(json.dumps(record, indent=1))
    print(f"{loss}: test UAS {info['test_uas']:.4f} LAS {info['test_las']:.4f}, {info['seconds_per_epoch']:.1f} "
          f"s/epoch, structured loss {100 * info['structured_share']:.1f}%, oracle alone {oracle:.2f} s/epoch",
          file=sys.stderr)
    return record


def report(records: Path, out: Path) -> None:
    rows = [json.loads(file.read_text()) for file in sorted(records.glob("*.json"))]
    order = {k: i for i, k in enumerate(NAMES)}
    rows.sort(key=lambda r: (r["n_train"], order.get(r["loss"], 9)))
    most = max((r["epochs"] for r in rows), default=0)
    lines = ["# Turkish dependency parsing: BiLSTM arc scorer (structopt.torch) beside the linear model", "",
             "Generated by `benchmarks/dependency_parsing_net.py` from the records in "
             "`benchmarks/records/dependency_parsing_net/`. The `parsing` task's data and split (the treebanks of "
             "`turkish-treebanks` 1.0.0, web + wiki; 3,881 training sentences, 485 test; the package's development "
             "sentences, i % 10 == 8, choose the network's epoch), labelled single-root non-projective trees, UAS "
             "and LAS over the test words whose UPOS is not PUNCT. Network (trained from scratch, no pretrained "
             "vectors): embeddings of the lower-cased form (100; word dropout α / (α + count), α = 0.25), UPOS, XPOS "
             "and the 3-character suffix (25 each), a 2-layer BiLSTM 2×125 over them with a root token first, an arc "
             "MLP (100) giving the (n + 1) × (n + 1) arc table, a label MLP (100) with a softmax over the 44 "
             "relations trained on the gold arcs; dropout 0.33, Adam 2e-3, batch 32, clipping 5, one torch thread. "
             "Test decoding: Chu–Liu/Edmonds (single root, exact) on the arc scores, each arc then labelled by the "
             "label MLP's argmax.", "",
             "s/epoch: training time of an epoch, mean over the run (the development scoring excluded). Structured "
             "loss: the time inside `structured_loss` (forward and backward to the arc tables: input checks, "
             "tensor ↔ numpy copies, the oracle) over the epoch. Oracle alone: one pass of the bare structure calls "
             "(`DependencyTree.argmax` on the Hamming-augmented table, `DependencyTree.marginals`) over the "
             "training sentences' tables at the trained weights, and its share of a mean epoch.", "",
             "| model | epochs (best) | test UAS | test LAS | best dev UAS | s/epoch | structured loss | oracle alone "
             "| load (start → end) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
             f"| {LINEAR[0]} | — | {LINEAR[1]:.4f} | {LINEAR[2]:.4f} | — | {LINEAR[3]} | — | — | — |"]
    for r in rows:
        seconds = sum(r["epoch_seconds"]) / len(r["epoch_seconds"])
        label = NAMES.get(r["loss"], r["loss"])
        if r["n_train"] != 3881:
            label += f", first {r['n_train']:,} sentences"
        load = "/".join(f"{x:.1f}" for x in r["load_before"]) + " → " + "/".join(f"{x:.1f}" for x in
                                                                                 r["load_average"])
        lines.append(f"| {label} | {r['epochs']} ({r['best_epoch']}) | {r['test_uas']:.4f} | {r['test_las']:.4f} | "
                     f"{max(r['dev_uas']):.4f} | {seconds:.1f} | {100 * r['structured_share']:.1f}% | "
                     f"{r['oracle_seconds']:.2f} s ({100 * r['oracle_seconds'] / seconds:.1f}%) | {load} |")
    lines += ["", "load: the machine's 1/5/15-minute load averages when the run started and ended (2 cores, "
              "shared with other jobs).", "", "## Development UAS after each epoch", "",
              "| model | " + " | ".join(str(e) for e in range(1, most + 1)) + " |", "| --- |" + " --- |" * most]
    for r in rows:
        cells = [f"{u:.3f}" for u in r["dev_uas"]] + [""] * (most - len(r["dev_uas"]))
        lines.append(f"| {r['loss']} | " + " | ".join(cells) + " |")
    lines += ["", "Seconds per epoch (structured loss seconds):", ""]
    for r in rows:
        pairs = ", ".join(f"{e:.1f} ({s:.1f})" for e, s in zip(r["epoch_seconds"], r["structured_seconds"]))
        lines.append(f"- {r['loss']}: {pairs}")
    lines.append("")
    write_keeping_findings(out, "\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--losses", nargs="+", default=["hinge", "crf"], choices=list(NAMES))
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n-train", type=int, default=None)
    parser.add_argument("--records", type=Path, default=ROOT / "benchmarks" / "records" / "dependency_parsing_net")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "dependency_parsing_net_results.md")
    parser.add_argument("--report", action="store_true", help="only rebuild the table from the records")
    args = parser.parse_args()
    use_checkout(ROOT)
    if not args.report:
        import torch

        torch.set_num_threads(1)
        for loss in args.losses:
            run(loss, args.epochs, args.seed, args.n_train, args.records)
    report(args.records, args.out)


if __name__ == "__main__":
    main()
