"""Casimir-SVRG and baselines on CoNLL NER (Pillutla et al. §7, Fig. 2) and chunking (BCFW paper Fig. 1(d)).

Measured results (every method on Spanish and Dutch over the paper's lambda grid, 100 passes, seeds
0-1 at c = 0.01 and for the main methods at the other c), the ordering at 10/50/100 passes and the
solver defaults they decided: ``conll_casimir_results.md`` beside this file; the traces behind
them are in ``records/conll_casimir/``.

Three parts, each optional (``--parts``, default ``ner``):

``ner``
    The paper's NER protocol (§7.1.1-7.3) on the full CoNLL-2002 **Spanish and Dutch** data. The
    paper uses CoNLL-2003 English, which is not redistributable and not available here, so its
    absolute numbers cannot be compared with ours; only the shape of Fig. 2 can. Chain model over
    2^16 hashed features, unnormalised Hamming loss, ``lam = c / n``. The paper's grid is
    ``c in {0.01, 0.1, 1, 10}`` (``--cs 0.01 0.1 1 10``); it reports no best ``c`` (lam defines
    the problem, it is not tuned), so the default is ``c = 0.01``, the value of its NER ablations
    (Fig. 5(b)-(d)). Methods (§7.2): ``sgd`` (max oracle, step ``gamma0 / (1 + floor(t / t0))``,
    weighted averaging), ``bcfw-wavg``, ``svrg``, ``casimir-const``, ``casimir-adapt``; the three
    smooth ones use l2 smoothing over the top-K outputs with K = 5 (``topk5``), the paper's only
    smoother in its experiments. Entropy smoothing (``--smoothing topk entropy``) is available as an
    extra, it is not in the paper's NER runs. Budget: 100 oracle calls / n (the paper counts 2
    calls per SVRG step and excludes full-gradient passes; the released scripts run 50 epochs of the
    smooth methods and 100 passes of the others, i.e. 100 oracle calls / n for all). The paper
    averages 10 random runs (shaded: +-1 std): ``--seeds 0 ... 9``.

    Variants of the SVRG-type methods are separate methods, so that runs decide the solver
    defaults: ``svrg``, ``casimir-const`` and ``casimir-adapt`` are the paper's variant (epoch
    output = average of the inner iterates, no SGD pass first, passed explicitly whatever the
    solver defaults are); a suffix ``+last`` takes the last inner iterate, ``+sgdinit`` runs one
    SGD pass before the first snapshot (e.g. ``svrg+last+sgdinit``), ``+guard`` turns on the
    solvers' divergence guard (rejected epochs re-run with a shorter step; off otherwise, as in the
    paper). ``--iterate average last`` and
    ``--sgd-init no yes`` expand every SVRG-type method into these variants.

    Each (language, method, smoothing, c, seed) is one run. Its finished trace goes to its own
    JSON, ``<out>/conll_casimir/<lang>_<method>_<smoothing>_c<c>_s<seed>.json``, and a run whose
    JSON already holds at least ``--passes`` is skipped (one whose options differ is reported and
    left alone: use another ``--out``). A run saves its solver state every ``--checkpoint-every``
    passes under ``--cache`` (default ``benchmarks/.cache/conll_casimir``, not committed); an
    interrupted run resumes from there (same trajectory: iterates, counters and random state are
    restored). A run being computed by another process (a lock file) is skipped, so several
    processes may share one command line. ``--report`` reads whatever JSONs exist and writes
    ``<out>/conll_casimir_report.md`` (training objective F and test F1 at 10/50/100 oracle calls
    / n, mean +- std over seeds, wall time per pass) and one figure per language and c
    (``<out>/conll_casimir_<lang>_c<c>.png``: F and test F1 against oracle calls / n, +-1 std).

    Hyper-parameters, as in the paper's released NER scripts: SGD gamma0 = 0.02, t0 = 150000;
    mu = 1 (svrg, const) and 2 (adapt); warm starts prev-iterate (const) and extrapolation (adapt),
    although the paper names prox-center as its default. L is estimated by default (local top-K
    curvature at w = 0, ~54/mu on NER; the paper tunes L on a x2 grid, the released const script
    uses L = 32); ``--L`` overrides. Trace records also carry ``dev_f1`` (testa) for the paper's
    tuning rule (best objective within 1% of the best validation F1), ``wall`` and ``cpu`` (elapsed
    and CPU seconds of the run including evaluations; ``time`` excludes them).

    Cost, measured (seed 0, c = 0.01, 2 passes per method, steady-state seconds per pass from the
    traces, evaluation of F, test and dev F1 at every record included; CPU seconds of one process,
    taken on the shared 2-core machine at load ~5, where elapsed time was 1.0-1.5x the CPU time):
    esp (n = 8,323): sgd 1.9, bcfw-wavg 0.9, svrg 2.5, casimir-const 2.4, casimir-adapt 2.6;
    ned (n = 15,806): sgd 2.9, bcfw-wavg 1.1, svrg 4.1, casimir-const 4.7, casimir-adapt 4.1.
    (Optimisation alone: bcfw 0.3/0.4, sgd 1.6/2.1; one evaluation costs ~0.65 s on esp.) The +last
    and +sgdinit variants cost the same per pass. So one seed of the five methods at one c, both
    languages, 100 passes: ~47 CPU min; the paper's protocol (5 methods x 4 c x 10 seeds x 2
    languages) ~31 CPU h; the nine variants at c = 0.01 add ~1.8 CPU h per seed.

``chunk``
    BCFW (weighted averaging, line search) on CoNLL-2000 chunking, ``lam = 1/n``: test F1 and wall
    time per pass.
``accept``
    Casimir-SVRG (const, top-5) on CoNLL-2000 chunking, ``lam = 1/n``; test chunk F1 after 10
    passes (paper counting: 5 epochs) and after 10 epochs.

Usage::

    python benchmarks/conll_casimir.py --languages esp ned --seeds 0 1 2          # NER runs (resumable)
    python benchmarks/conll_casimir.py --report                                    # tables and figures
    python benchmarks/conll_casimir.py --parts chunk accept                        # the chunking parts

The recorded runs (``records/``), in the order they were run; each command skips finished runs and
resumes interrupted ones, and two processes may share one command line::

    M7="sgd bcfw-wavg svrg svrg+last+sgdinit casimir-const casimir-const+last+sgdinit casimir-adapt"
    # 1. every method and variant at c = 0.01, seeds 0-1 (+ adapt+last+sgdinit, + bcfw seed 2 on esp)
    python benchmarks/conll_casimir.py --cs 0.01 --seeds 0 1 --methods $M7 casimir-adapt+last+sgdinit
    # 2. entropy smoothing (of the +last+sgdinit Casimir variant)
    python benchmarks/conll_casimir.py --cs 0.01 --seeds 0 1 --methods casimir-const+last+sgdinit --smoothing entropy
    # 3. the rest of the paper's lambda grid, seed 0
    python benchmarks/conll_casimir.py --cs 1 10 0.1 --seeds 0 --methods $M7
    # 4. L grid of Casimir-const around the local estimate (54), Spanish, 30 passes
    for L in 13.5 27 108 216; do python benchmarks/conll_casimir.py --languages esp --passes 30 \
        --methods casimir-const+last+sgdinit casimir-const --L $L --out benchmarks/results/lgrid/L$L; done
    # 5. epoch output and SGD start apart (50 passes), then the averaged output with an SGD start
    #    over the grid, the divergence guard on, and a second seed of the main methods
    python benchmarks/conll_casimir.py --cs 10 --passes 50 --methods svrg+sgdinit svrg+last \
        casimir-const+sgdinit casimir-const+last
    python benchmarks/conll_casimir.py --cs 0.01 --passes 50 --methods svrg+sgdinit casimir-const+sgdinit
    python benchmarks/conll_casimir.py --cs 1 0.1 --methods svrg+sgdinit casimir-const+sgdinit
    python benchmarks/conll_casimir.py --cs 0.01 10 --methods svrg+last+sgdinit+guard svrg+sgdinit+guard \
        casimir-const+last+sgdinit+guard casimir-const+sgdinit+guard
    python benchmarks/conll_casimir.py --cs 1 10 0.1 --seeds 1 --methods sgd bcfw-wavg svrg+sgdinit \
        casimir-const+sgdinit
    python benchmarks/conll_casimir.py --cs 0.01 10 --seeds 1 --methods svrg+sgdinit+guard casimir-const+sgdinit+guard
    # then: cp benchmarks/results/conll_casimir/*.json benchmarks/records/conll_casimir/
    #       cp -r benchmarks/results/lgrid benchmarks/records/conll_casimir_lgrid
    #       python benchmarks/conll_casimir.py --report --out benchmarks/records
    # not run (the paper's full protocol): seeds 2 ... 9 of every method at every c (~31 CPU-hours)
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import math
import os
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from structopt.errors import InvalidInputError
from structopt.losses import Hamming
from structopt.problem import SSVMProblem
from structopt.solvers.base import load_checkpoint
from structopt.solvers.bcfw import bcfw
from structopt.solvers.casimir import casimir_svrg
from structopt.solvers.sgd import sgd
from structopt.solvers.svrg import svrg
from structopt.tasks.conll import chunk_f1, load_conll2000, load_conll2002

HERE = Path(__file__).resolve().parent
PAPER_CS = (0.01, 0.1, 1.0, 10.0)
BASE_METHODS = ("sgd", "bcfw-wavg", "svrg", "casimir-const", "casimir-adapt")
SMOOTH_METHODS = ("svrg", "casimir-const", "casimir-adapt")
SOLVER_NAMES = {"sgd": "sgd", "bcfw-wavg": "bcfw", "svrg": "svrg", "casimir-const": "casimir_svrg",
                "casimir-adapt": "casimir_svrg"}
REPORT_PASSES = (10, 50, 100)
LANGUAGE_NAMES = {"esp": "Spanish", "ned": "Dutch"}


def peak_rss_mb() -> float:
    """Peak resident memory of this process (MB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# --------------------------------------------------------------------------------------------
# methods and runs
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Method:
    """A solver and, for the SVRG-type ones, its epoch output and SGD initialisation."""

    base: str
    iterate: str = "average"
    sgd_init: bool = False
    guard: bool = False

    @property
    def name(self) -> str:
        return (self.base + ("+last" if self.iterate == "last" else "") + ("+sgdinit" if self.sgd_init else "")
                + ("+guard" if self.guard else ""))

    @property
    def smooth(self) -> bool:
        return self.base in SMOOTH_METHODS


def parse_method(name: str) -> Method:
    """``svrg``, ``svrg+last``, ``casimir-const+sgdinit``, ``casimir-adapt+last+sgdinit+guard``, ``sgd``, ..."""
    base, *suffixes = name.split("+")
    if base not in BASE_METHODS:
        raise ValueError(f"unknown method {name!r}: the base must be one of {', '.join(BASE_METHODS)}")
    unknown = set(suffixes) - {"last", "sgdinit", "guard"}
    if unknown or len(set(suffixes)) != len(suffixes):
        raise ValueError(f"method {name!r}: suffixes are +last, +sgdinit and +guard, each at most once")
    if suffixes and base not in SMOOTH_METHODS:
        raise ValueError(f"method {name!r}: +last/+sgdinit/+guard apply to {', '.join(SMOOTH_METHODS)} only")
    return Method(base, "last" if "last" in suffixes else "average", "sgdinit" in suffixes, "guard" in suffixes)


def expand_methods(names: list[str], iterates: list[str], sgd_inits: list[str]) -> list[Method]:
    """The methods of ``names``, each SVRG-type one crossed with ``iterates`` x ``sgd_inits``
    (applied only to names without an explicit suffix); duplicates dropped, order kept."""
    out: list[Method] = []
    for name in names:
        m = parse_method(name)
        if m.smooth and "+" not in name:
            variants = [Method(m.base, it, s == "yes") for it in iterates for s in sgd_inits]
        else:
            variants = [m]
        out += [v for v in variants if v not in out]
    return out


@dataclass(frozen=True)
class RunSpec:
    """One run of the protocol."""

    language: str
    method: Method
    smoothing: str  # "none" (max oracle), "topk<K>" or "entropy"
    c: float
    seed: int

    @property
    def key(self) -> str:
        return f"{self.language}_{self.method.name}_{self.smoothing}_c{self.c:g}_s{self.seed}"


def smoothing_label(kind: str, k: int) -> str:
    return f"topk{k}" if kind == "topk" else kind


def plan(args) -> list[RunSpec]:
    """Every run of the command line, in the order they are computed: seed-major, then c,
    language and method, so that a partial run has every method at the first seeds."""
    methods = expand_methods(args.methods, args.iterate, args.sgd_init)
    specs = []
    for seed in args.seeds:
        for c in args.cs:
            for lang in args.languages:
                for m in methods:
                    kinds = [smoothing_label(s, args.k) for s in args.smoothing] if m.smooth else ["none"]
                    specs += [RunSpec(lang, m, s, float(c), int(seed)) for s in kinds]
    return specs


def run_config(spec: RunSpec, args) -> dict:
    """The options that decide a run's trajectory and records (everything but the budget)."""
    m = spec.method
    cfg: dict = {"language": spec.language, "method": m.name, "base": m.base, "smoothing": spec.smoothing,
                 "c": spec.c, "seed": spec.seed, "n_features": args.n_features, "subset": args.subset,
                 "test_subset": args.test_subset}
    if m.base == "sgd":
        cfg |= {"gamma0": args.sgd_gamma0, "t0": args.sgd_t0, "averaging": "weighted", "eval_every": args.eval_every}
    elif m.base == "bcfw-wavg":
        cfg |= {"averaging": "weighted", "line_search": True, "eval_every": args.eval_every}
    else:
        kind = "entropy" if spec.smoothing == "entropy" else "topk"
        cfg |= {"kind": kind, "k": args.k, "iterate": m.iterate, "sgd_init": m.sgd_init}
        if m.guard:  # only when on, so that the runs recorded before the suffix keep their config
            cfg["guard"] = True
        if m.base == "svrg":
            cfg |= {"mu": args.mu, "L": args.L}
        elif m.base == "casimir-const":
            cfg |= {"mu": args.mu, "L": args.L, "warm_start": args.const_warm_start}
        else:
            cfg |= {"mu": args.adapt_mu, "learning_rate": args.adapt_lr, "warm_start": args.adapt_warm_start}
    return cfg


def config_hash(cfg: dict) -> str:
    return hashlib.sha1(json.dumps(cfg, sort_keys=True, default=str).encode()).hexdigest()[:10]


def run_solver(spec: RunSpec, cfg: dict, problem: SSVMProblem, passes: float, callback, checkpoint: Path,
               checkpoint_every: float, resume: Path | None):
    """Call the solver of ``spec`` with the options of ``cfg``."""
    common = {"max_passes": passes, "random_state": spec.seed, "callback": callback, "checkpoint": checkpoint,
              "checkpoint_every": checkpoint_every, "resume": resume}
    base = spec.method.base
    if base == "sgd":
        return sgd(problem, gamma0=cfg["gamma0"], t0=cfg["t0"], averaging="weighted", eval_every=cfg["eval_every"],
                   guard=False, **common)
    if base == "bcfw-wavg":
        return bcfw(problem, averaging="weighted", line_search=True, eval_every=cfg["eval_every"], **common)
    # without +guard: the paper's algorithms as published (no rejected epochs)
    smooth = {"mu": cfg["mu"], "kind": cfg["kind"], "k": cfg["k"], "iterate": cfg["iterate"],
              "sgd_init": cfg["sgd_init"], "guard": cfg.get("guard", False)}
    if base == "svrg":
        return svrg(problem, L=cfg["L"], **smooth, **common)
    if base == "casimir-const":
        return casimir_svrg(problem, schedule="const", L=cfg["L"], warm_start=cfg["warm_start"], **smooth, **common)
    return casimir_svrg(problem, schedule="adapt", learning_rate=cfg["learning_rate"], warm_start=cfg["warm_start"],
                        **smooth, **common)


class Tasks:
    """Loaded languages and their problems (one per c), built on first use."""

    def __init__(self, args):
        self.args = args
        self._data: dict = {}
        self._problems: dict = {}

    def data(self, lang: str) -> dict:
        if lang not in self._data:
            a = self.args
            t = time.perf_counter()
            d = load_conll2002(a.data / "conll2002" if a.data else None, language=lang, n_features=a.n_features)
            d["train"], d["test"] = subset(d["train"], a.subset), subset(d["test"], a.test_subset)
            d["dev"] = subset(d["dev"], a.test_subset)
            print(f"loaded {lang}: n={len(d['train']['X'])} dev={len(d['dev']['X'])} test={len(d['test']['X'])} "
                  f"d={d['model'].n_params} ({time.perf_counter() - t:.1f}s)", flush=True)
            self._data[lang] = d
        return self._data[lang]

    def problem(self, lang: str, c: float) -> SSVMProblem:
        if (lang, c) not in self._problems:
            d = self.data(lang)
            n = len(d["train"]["X"])
            self._problems[lang, c] = SSVMProblem(d["model"], d["train"]["X"], d["train"]["y"], Hamming(), c / n)
        return self._problems[lang, c]


def subset(split: dict, m: int | None) -> dict:
    if m is None or m >= len(split["X"]):
        return split
    return {"X": split["X"][:m], "y": split["y"][:m]}


def eval_callback(problem: SSVMProblem, data: dict, offset: tuple[float, float] = (0.0, 0.0)):
    """Trace extra: conlleval F1 of the MAP predictions on test (testb) and dev (testa), and the
    run's wall and CPU seconds so far (evaluations included, and earlier segments of a resumed run:
    ``offset``). CPU seconds are this process's, a load-independent measure on a shared machine."""
    start, cpu = time.perf_counter(), time.process_time()

    def cb(w: np.ndarray) -> dict:
        out = {split + "_f1": chunk_f1(data[split]["y"], problem.predict(data[split]["X"], w), data["tags"])["f1"]
               for split in ("test", "dev")}
        out["wall"] = offset[0] + time.perf_counter() - start
        out["cpu"] = offset[1] + time.process_time() - cpu
        return out
    return cb


@contextlib.contextmanager
def run_lock(path: Path):
    """An exclusive, non-blocking lock on ``path`` (released when the process dies); yields
    whether it was obtained."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def write_json(path: Path, obj) -> None:
    """Atomic JSON write (temporary file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as fh:
        json.dump(obj, fh, indent=1, default=float)
    os.replace(tmp, path)


def read_json(path: Path) -> dict | None:
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def existing_status(path: Path, cfg: dict, passes: float) -> str | None:
    """``skipped`` when ``path`` holds this run with at least ``passes``, ``conflict`` when it holds
    a run with other options, None when the run is still to be computed (or extended)."""
    existing = read_json(path) if path.exists() else None
    if existing is None:
        return None
    if existing.get("config") != cfg:
        return "conflict"
    return "skipped" if existing.get("max_passes", 0) >= passes - 1e-9 else None


def _jsonable(info: dict) -> dict:
    """The JSON-serialisable scalars and flat dicts of a solver's ``Result.info``."""
    def ok(v):
        return isinstance(v, (str, bool, int, float, np.integer, np.floating)) or v is None
    return {k: v for k, v in info.items() if ok(v) or (isinstance(v, dict) and all(map(ok, v.values())))}


def execute(spec: RunSpec, args, tasks: Tasks) -> str:
    """Compute one run unless its JSON is already there; return what happened: ``done``,
    ``resumed`` (finished from a checkpoint), ``skipped`` (already done), ``busy`` (another process
    holds it) or ``conflict`` (its JSON has other options)."""
    cfg = run_config(spec, args)
    out = args.out / "conll_casimir" / f"{spec.key}.json"
    messages = {"skipped": "already done, skipped",
                "conflict": f"CONFLICT: {out} holds a run with other options; left alone (use another --out)"}
    status = existing_status(out, cfg, args.passes)
    if status is not None:
        print(f"  {spec.key}: {messages[status]}", flush=True)
        return status
    ckpt = args.cache / f"{spec.key}-{config_hash(cfg)}.pkl"
    with run_lock(ckpt.with_suffix(".lock")) as mine:
        if not mine:
            print(f"  {spec.key}: running in another process, skipped", flush=True)
            return "busy"
        status = existing_status(out, cfg, args.passes)  # another process may have finished it meanwhile
        if status is not None:
            print(f"  {spec.key}: {messages[status]}", flush=True)
            return status
        problem = tasks.problem(spec.language, spec.c)
        data = tasks.data(spec.language)
        resume, offset, status = None, (0.0, 0.0), "done"
        if ckpt.exists():
            try:
                saved = load_checkpoint(ckpt, SOLVER_NAMES[spec.method.base])
                resume, status = ckpt, "resumed"
                offset = saved["trace"][-1].get("wall", 0.0), saved["trace"][-1].get("cpu", 0.0)
                print(f"  {spec.key}: resuming at {saved['trace'][-1]['passes']:.1f} passes", flush=True)
            except (InvalidInputError, IndexError, KeyError) as error:
                print(f"  {spec.key}: unusable checkpoint ({error}); starting afresh", flush=True)
                ckpt.unlink()
        t = time.perf_counter()
        res = run_solver(spec, cfg, problem, args.passes, eval_callback(problem, data, offset), ckpt,
                         args.checkpoint_every, resume)
        wall = time.perf_counter() - t
        record = {"key": spec.key, "config": cfg, "max_passes": args.passes, "n": problem.n,
                  "n_test": len(data["test"]["X"]), "n_dev": len(data["dev"]["X"]), "n_params": problem.model.n_params,
                  "trace": res.trace, "info": _jsonable(res.info), "wall_last_segment": wall,
                  "resumed": resume is not None, "peak_rss_mb": peak_rss_mb(), "structopt_version": _version()}
        write_json(out, record)
        if not args.keep_checkpoints:
            ckpt.unlink(missing_ok=True)
    last = res.trace[-1]
    print(f"  {spec.key:44s} passes={last['passes']:.1f} F={last['primal']:.5f} test_f1={last['test_f1']:.4f} "
          f"time/pass={last['time'] / max(last['passes'], 1e-9):.2f}s wall={last['wall']:.1f}s", flush=True)
    return status


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("structopt-learn")
    except Exception:  # pragma: no cover - only metadata
        return "unknown"


def part_ner(args) -> dict:
    specs = plan(args)
    print(f"NER: {len(specs)} runs ({', '.join(args.languages)}; c in {args.cs}; seeds {args.seeds}; "
          f"{args.passes:g} passes) -> {args.out / 'conll_casimir'}", flush=True)
    tasks, counts = Tasks(args), {}
    for spec in specs:
        status = execute(spec, args, tasks)
        counts[status] = counts.get(status, 0) + 1
    print("NER: " + ", ".join(f"{v} {k}" for k, v in counts.items()), flush=True)
    return counts


# --------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------

def load_runs(directory: Path) -> list[dict]:
    """Every finished run JSON in ``directory``."""
    runs = []
    for path in sorted(directory.glob("*.json")):
        run = read_json(path)
        if run is not None and "config" in run and run.get("trace"):
            runs.append(run)
    return runs


PASS_SLACK = 0.01  # an epoch of an odd number of steps after an SGD pass overshoots by 1/n


def value_at(trace: list[dict], passes: float, key: str) -> float | None:
    """``key`` at the last evaluation at or before ``passes`` oracle calls / n (up to
    :data:`PASS_SLACK`); None when the run has not reached ``passes``."""
    if trace[-1]["passes"] < passes - 1e-6:
        return None
    before = [r for r in trace if r["passes"] <= passes + PASS_SLACK and key in r]
    return before[-1][key] if before else None


def group_runs(runs: list[dict]) -> dict:
    """Runs grouped by (language, c, method, smoothing), seeds in each group."""
    groups: dict = {}
    for run in runs:
        cfg = run["config"]
        groups.setdefault((cfg["language"], cfg["c"], cfg["method"], cfg["smoothing"]), []).append(run)
    return groups


def _method_order(name: str) -> tuple:
    m = parse_method(name)
    return BASE_METHODS.index(m.base), m.iterate != "average", m.sgd_init, m.guard


def _fmt(values: list[float], digits: int) -> str:
    if not values:
        return "n/a"
    mean = float(np.mean(values))
    if len(values) == 1:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {float(np.std(values, ddof=1)):.{digits}f}"


def report(out: Path, at: tuple[float, ...] = REPORT_PASSES, figures: bool = True) -> str:
    """Write the markdown report (values at ``at`` oracle calls / n) and, with ``figures``, one
    figure per (language, c) from the run JSONs under ``out/conll_casimir``; return the markdown."""
    runs = load_runs(out / "conll_casimir")
    groups = group_runs(runs)
    lines = ["# CoNLL-2002 NER, Casimir paper protocol (§7): report", "",
             f"{len(runs)} finished runs read from `{out / 'conll_casimir'}`. Values are mean ± std over "
             "seeds (a single number: one seed); `n/a`: no run of the group has reached that budget. "
             "Passes are oracle calls / n counted as the paper does (2 per SVRG step, full-gradient "
             "passes excluded); the value at P passes is the last evaluation at or before P. F is the "
             "non-smooth training objective, F1 the conlleval F1 on testb.", ""]
    for lang, c in sorted({(k[0], k[1]) for k in groups}):
        keys = sorted((k for k in groups if k[:2] == (lang, c)), key=lambda k: (_method_order(k[2]), k[3]))
        n = groups[keys[0]][0]["n"]
        lines += [f"## {LANGUAGE_NAMES.get(lang, lang)} ({lang}), λ = {c:g}/n (n = {n})", "",
                  "| method | smoothing | seeds | passes | " + " | ".join(f"F @{p:g}" for p in at) + " | "
                  + " | ".join(f"test F1 @{p:g}" for p in at) + " | s/pass (opt) | s/pass (wall) | s/pass (cpu) |",
                  "|" + " --- |" * (7 + 2 * len(at))]
        for key in keys:
            group = groups[key]
            cells = []
            for field, digits in (("primal", 4), ("test_f1", 4)):
                for p in at:
                    vals = [v for v in (value_at(r["trace"], p, field) for r in group) if v is not None]
                    cells.append(_fmt(vals, digits))
            per_pass = {f: [r["trace"][-1][f] / r["trace"][-1]["passes"] for r in group
                            if r["trace"][-1]["passes"] > 0 and f in r["trace"][-1]] for f in ("time", "wall", "cpu")}
            seeds = ", ".join(str(r["config"]["seed"]) for r in group)
            reached = ", ".join(sorted({f"{r['trace'][-1]['passes']:g}" for r in group}, key=float))
            lines.append(f"| {key[2]} | {key[3]} | {len(group)} ({seeds}) | {reached} | " + " | ".join(cells)
                         + "".join(f" | {_fmt(per_pass[f], 2)}" for f in ("time", "wall", "cpu")) + " |")
        figure = out / f"conll_casimir_{lang}_c{c:g}.png"
        if figures:
            plot_group(lang, c, {k: groups[k] for k in keys}, figure)
        lines += ["", f"![{lang}, c = {c:g}]({figure.name})", ""]
    lines += ["`s/pass (opt)`: optimisation seconds per pass (evaluations excluded; SVRG-type methods "
              "include their full-gradient passes); `s/pass (wall)` and `(cpu)`: elapsed and CPU seconds "
              "per pass of the whole run, with the evaluation of F, test and dev F1 at every record (CPU "
              "seconds do not grow when other jobs share the machine).", ""]
    text = "\n".join(lines)
    (out / "conll_casimir_report.md").write_text(text)
    return text


def plot_group(lang: str, c: float, groups: dict, path: Path) -> None:
    """F and test F1 against oracle calls / n for every method of one (language, c): mean over
    seeds and a +-1 std band (on the passes all seeds of a method reached)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for (_, _, method, smoothing), group in groups.items():
        end = min(r["trace"][-1]["passes"] for r in group)
        grid = np.unique(np.concatenate([[rec["passes"] for rec in r["trace"]] for r in group]))
        grid = grid[grid <= end + 1e-9]
        label = method + ("" if smoothing == "none" else f" ({smoothing})") + f" ×{len(group)}"
        for ax, field in zip(axes, ("primal", "test_f1")):
            ys = []
            for r in group:
                pts = [(rec["passes"], rec[field]) for rec in r["trace"] if field in rec]
                ys.append(np.interp(grid, [p for p, _ in pts], [v for _, v in pts]))
            ys = np.array(ys)
            mean = ys.mean(axis=0)
            (line,) = ax.plot(grid, mean, label=label, lw=1.3)
            if len(group) > 1:
                sd = ys.std(axis=0, ddof=1)
                ax.fill_between(grid, mean - sd, mean + sd, color=line.get_color(), alpha=0.2, lw=0)
    axes[0].set_yscale("log")
    axes[0].set_ylabel("training objective F(w)")
    axes[1].set_ylabel("test F1 (conlleval)")
    for ax in axes:
        ax.set_xlabel("oracle calls / n")
        ax.grid(alpha=0.3)
    axes[1].set_ylim(bottom=max(0.0, axes[1].get_ylim()[0]))
    axes[0].legend(fontsize=7)
    fig.suptitle(f"CoNLL-2002 {LANGUAGE_NAMES.get(lang, lang)}, λ = {c:g}/n (mean ± 1 std over seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------------------------
# chunking parts (BCFW paper Fig. 1(d), acceptance run)
# --------------------------------------------------------------------------------------------

def f1_callback(problem: SSVMProblem, test: dict, tags: list[str]):
    """Trace extra: conlleval F1 of the MAP predictions on the test split."""
    def cb(w: np.ndarray) -> dict:
        return {"test_f1": chunk_f1(test["y"], problem.predict(test["X"], w), tags)["f1"]}
    return cb


def part_chunk(args) -> dict:
    data = load_conll2000(args.data / "conll2000" if args.data else None)
    train, test = subset(data["train"], args.chunk_subset), data["test"]
    n = len(train["X"])
    problem = SSVMProblem(data["model"], train["X"], train["y"], Hamming(), 1.0 / n)
    cb = f1_callback(problem, test, data["tags"])
    t = time.perf_counter()
    res = bcfw(problem, max_passes=args.chunk_passes, averaging="weighted", random_state=args.seeds[0], callback=cb)
    wall = time.perf_counter() - t
    per_pass = res.trace[-1]["time"] / max(res.trace[-1]["passes"], 1e-9)
    print(f"BCFW chunking n={n}: passes={res.trace[-1]['passes']:.0f} F={res.trace[-1]['primal']:.5f} "
          f"gap={res.trace[-1].get('gap', float('nan')):.4g} test_f1={res.trace[-1]['test_f1']:.4f} "
          f"time/pass={per_pass:.2f}s wall={wall:.1f}s", flush=True)
    return {"n": n, "trace": res.trace, "seconds_per_pass": per_pass, "wall": wall}


def part_accept(args) -> dict:
    data = load_conll2000(args.data / "conll2000" if args.data else None)
    train, test = data["train"], data["test"]
    n = len(train["X"])
    problem = SSVMProblem(data["model"], train["X"], train["y"], Hamming(), 1.0 / n)
    cb = f1_callback(problem, test, data["tags"])
    t = time.perf_counter()
    res = casimir_svrg(problem, schedule="const", mu=args.mu, k=5, L=args.L, iterate="average", sgd_init=False,
                       max_passes=args.accept_passes, random_state=args.seeds[0], callback=cb)
    wall = time.perf_counter() - t
    at10 = next((r for r in res.trace if r["passes"] >= 10 - 1e-9), res.trace[-1])
    epochs10 = next((r for r in res.trace if r.get("outer_iter", 0) >= 10), res.trace[-1])
    print(f"Casimir-SVRG chunking n={n}: F1 after {at10['passes']:.0f} passes = {at10['test_f1']:.4f}; "
          f"after {epochs10.get('outer_iter')} epochs = {epochs10['test_f1']:.4f}; wall={wall:.1f}s "
          f"state={sum(res.info['memory'].values()) / 2**20:.1f}MB", flush=True)
    return {"n": n, "trace": res.trace, "wall": wall, "memory_bytes": res.info["memory"],
            "f1_at_10_passes": at10["test_f1"], "f1_at_10_epochs": epochs10["test_f1"],
            "accepted": bool(at10["test_f1"] >= 0.90)}


# --------------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------------

def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--report", action="store_true", help="only write the report from the existing run JSONs")
    ap.add_argument("--report-at", nargs="+", type=float, default=list(REPORT_PASSES),
                    help="oracle calls / n at which the report tabulates F and test F1")
    ap.add_argument("--parts", nargs="+", default=["ner"], choices=["ner", "chunk", "accept"])
    ap.add_argument("--languages", nargs="+", default=["esp", "ned"], choices=["esp", "ned"])
    ap.add_argument("--methods", nargs="+", default=list(BASE_METHODS),
                    help="base names (sgd bcfw-wavg svrg casimir-const casimir-adapt), SVRG-type ones with "
                         "optional +last / +sgdinit / +guard suffixes")
    ap.add_argument("--iterate", nargs="+", default=["average"], choices=["average", "last"],
                    help="epoch outputs every suffix-free SVRG-type method is run with")
    ap.add_argument("--sgd-init", nargs="+", default=["no"], choices=["no", "yes"],
                    help="SGD-pass initialisations every suffix-free SVRG-type method is run with")
    ap.add_argument("--smoothing", nargs="+", default=["topk"], choices=["topk", "entropy"],
                    help="smoothers of the SVRG-type methods (the paper: top-K only)")
    ap.add_argument("--k", type=int, default=5, help="K of top-K smoothing")
    ap.add_argument("--cs", nargs="+", type=float, default=[0.01],
                    help=f"lam = c/n; the paper's grid is {' '.join(f'{c:g}' for c in PAPER_CS)}")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0], help="the paper averages 10 seeds")
    ap.add_argument("--passes", type=float, default=100, help="budget per NER run, oracle calls / n")
    ap.add_argument("--eval-every", type=float, default=1, help="evaluation interval of SGD and BCFW (passes)")
    ap.add_argument("--checkpoint-every", type=float, default=2, help="passes between solver checkpoints")
    ap.add_argument("--keep-checkpoints", action="store_true",
                    help="keep a finished run's final state (lets a larger --passes extend it)")
    ap.add_argument("--subset", type=int, default=None, help="first m training sentences (ner)")
    ap.add_argument("--test-subset", type=int, default=None, help="first m test and dev sentences (ner)")
    ap.add_argument("--n-features", type=int, default=2**16, help="hashed feature dimension")
    ap.add_argument("--mu", type=float, default=1.0, help="smoothing of SVRG and Casimir-const")
    ap.add_argument("--L", type=float, default=None,
                    help="smoothness of SVRG and Casimir-const (default: estimated, local top-K curvature)")
    ap.add_argument("--const-warm-start", default="prev-iterate")
    ap.add_argument("--adapt-mu", type=float, default=2.0)
    ap.add_argument("--adapt-lr", type=float, default=None, help="default 1/(L + lam + kappa), L estimated")
    ap.add_argument("--adapt-warm-start", default="extrapolation")
    ap.add_argument("--sgd-gamma0", type=float, default=0.02, help="the released scripts' value")
    ap.add_argument("--sgd-t0", type=float, default=150000, help="the released scripts' value")
    ap.add_argument("--chunk-passes", type=float, default=10)
    ap.add_argument("--accept-passes", type=float, default=20, help="acceptance run (10 epochs = 20 passes)")
    ap.add_argument("--chunk-subset", type=int, default=None, help="first m training sentences (chunk)")
    ap.add_argument("--data", type=Path, default=None,
                    help="directory holding conll2002/ and conll2000/ (default: ../shared/data or $STRUCTOPT_DATA)")
    ap.add_argument("--out", type=Path, default=HERE / "results", help="results directory")
    ap.add_argument("--cache", type=Path, default=None,
                    help="checkpoint directory (default: benchmarks/.cache/conll_casimir)")
    args = ap.parse_args(argv)
    if args.cache is None:
        args.cache = HERE / ".cache" / "conll_casimir"
    try:
        expand_methods(args.methods, args.iterate, args.sgd_init)
    except ValueError as error:
        ap.error(str(error))
    if not math.isfinite(args.passes) or args.passes <= 0:
        ap.error("--passes must be > 0")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.report:
        print(report(args.out, tuple(args.report_at)))
        return 0
    if "ner" in args.parts:
        part_ner(args)
    results = {}
    if "chunk" in args.parts:
        results["chunk_bcfw"] = part_chunk(args)
    if "accept" in args.parts:
        results["accept"] = part_accept(args)
    if results:
        results["peak_rss_mb"] = peak_rss_mb()
        name = "conll_casimir_" + "_".join(p for p in args.parts if p != "ner")
        write_json(args.out / f"{name}.json", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
