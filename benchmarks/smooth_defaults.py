"""Relative excess over the exact SSVM optimum of sgd, svrg and casimir_svrg with default options (issue 25, item 3).

Small problems of ``tests/_reference.py`` (random chains and multiclass problems with planted
labels plus noise); the exact optimum ``F*`` is the n-slack QP over every enumerated output, solved
by Clarabel (``exact_primal``). Each solver runs with its defaults only (``random_state=0``); the
table gives ``(F(w) - F*) / F*`` after 100, 300 and 1,000 passes (the solvers' own ``passes``),
the goal being <= 1% at 1,000, and the epochs the step guard rejected.

Usage: ``python benchmarks/smooth_defaults.py --out benchmarks/smooth_defaults_results.md``
(a few minutes; the problems are tiny, the generic Python path runs): the table replaces the one between the
file's ``<!-- after-table -->`` markers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from _reference import exact_primal, random_chain_problem, random_multiclass_problem

from structopt.solvers import casimir_svrg, sgd, svrg

PROBLEMS = {
    "chain seed 0 (n=8)": lambda: random_chain_problem(0),
    "chain seed 1 (n=8)": lambda: random_chain_problem(1),
    "chain seed 2 (n=6)": lambda: random_chain_problem(2, n=6),
    "chain seed 3 (n=20, T<=5)": lambda: random_chain_problem(3, n=20, max_len=5),
    "chain seed 0 (n=4)": lambda: random_chain_problem(0, n=4),
    "chain seed 1 (n=2)": lambda: random_chain_problem(1, n=2),
    "multiclass seed 0 (n=20)": lambda: random_multiclass_problem(0),
    "multiclass seed 1 (n=20)": lambda: random_multiclass_problem(1),
}
SOLVERS = {"sgd": sgd, "svrg": svrg, "casimir_svrg": casimir_svrg}
CHECKPOINTS = (100, 300, 1000)
START, END = "<!-- after-table -->", "<!-- /after-table -->"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    lines = ["| problem | F* | solver | excess @100 | @300 | @1000 | rejected epochs / epochs |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, make in PROBLEMS.items():
        problem = make()
        f_star, _ = exact_primal(problem)
        for solver_name, solve in SOLVERS.items():
            r = solve(problem, max_passes=CHECKPOINTS[-1], random_state=0)
            excess = []
            for c in CHECKPOINTS:  # the last record at or before c passes
                record = [t for t in r.trace if t["passes"] <= c + 1e-9][-1]
                excess.append((record["primal"] - f_star) / f_star)
            final = (problem.primal(r.w) - f_star) / f_star
            row = (f"| {name} | {f_star:.4f} | {solver_name} | {excess[0]:+.2%} | {excess[1]:+.2%} | {final:+.2%} "
                   f"| {r.info['rejected_epochs']} / {r.info['epochs']} |")
            print(row, flush=True)
            lines.append(row)
    if args.out is not None:
        write_table(args.out, "\n".join(lines))


def write_table(path: Path, table: str) -> None:
    """Write ``table`` into ``path`` between its ``<!-- after-table -->`` markers (the discussion and the
    "before" table around it stay), or as the whole file when it has no markers."""
    text = path.read_text() if path.exists() else ""
    if START in text and END in text:
        head, rest = text.split(START, 1)
        text = f"{head}{START}\n{table}\n{END}{rest.split(END, 1)[1]}"
    else:
        text = table + "\n"
    path.write_text(text)


if __name__ == "__main__":
    main()
