"""The graph kernel family (structopt.fused.graph): whole BCFW / FW / SSG passes over GraphModel problems,
the relaxed AD3 oracle included, in one numba call, held equal to the generic per-example path."""

from __future__ import annotations

import numpy as np
import pytest

import structopt as so
from structopt.fused import register_family, select
from structopt.fused.graph import GRAPH
from structopt.solvers import bcfw, frank_wolfe, ssg


def _problem(seed: int, S: int = 3, G: int = 1, symmetric: bool = True, n: int = 6, **structure) -> so.SSVMProblem:
    """Small loopy graphs: 3 nearest neighbours of random points, noisy one-hot node features (longer AD3 runs:
    tests/test_ad3_chunks.py)."""
    rng = np.random.default_rng(seed)
    X, Y = [], []
    for _ in range(n):
        N = int(rng.integers(4, 9))
        pos = rng.random((N, 2))
        nbr = np.argsort(np.linalg.norm(pos[:, None] - pos[None], axis=-1), axis=1)[:, 1:3]
        edges = np.unique(np.sort([(i, j) for i in range(N) for j in nbr[i]], axis=1), axis=0).astype(np.int64)
        if rng.random() < 0.5:
            edges = edges[:, ::-1].copy()  # either direction: the tables' rows are the first node's states
        y = rng.integers(0, S, N)
        nodes = np.hstack([np.eye(S)[y] + 1.2 * rng.normal(size=(N, S)), np.ones((N, 1))])
        X.append((nodes, edges, rng.normal(size=(len(edges), G)) if G else np.zeros((len(edges), 0))))
        Y.append(y)
    model = so.GraphModel(S + 1, G, S, symmetric=symmetric, **structure)
    return so.SSVMProblem(model, X, Y, so.Hamming(), lam=0.1)


CASES = [dict(seed=0), dict(seed=1, S=2), dict(seed=2, symmetric=False, G=2), dict(seed=3, G=0), dict(seed=4, S=4)]


@pytest.mark.parametrize("case", CASES)
def test_fused_bcfw_equals_the_generic_path(case):
    problem = _problem(**case)
    assert select(problem) is not None
    fused = bcfw(problem, max_passes=4, random_state=0, fused=True)
    generic = bcfw(problem, max_passes=4, random_state=0, fused=False)
    assert fused.info["fused"] and not generic.info["fused"]
    np.testing.assert_allclose(fused.w, generic.w, rtol=1e-9, atol=1e-9)
    for a, b in zip(fused.trace, generic.trace, strict=True):
        assert a["primal"] == pytest.approx(b["primal"], rel=1e-9, abs=1e-9)
        assert a["gap"] == pytest.approx(b["gap"], rel=1e-7, abs=1e-8)


@pytest.mark.parametrize("run", [
    lambda p, fused: frank_wolfe(p, max_passes=3, fused=fused),
    lambda p, fused: ssg(p, max_passes=3, random_state=0, fused=fused),
    lambda p, fused: bcfw(p, max_passes=3, random_state=0, line_search=False, fused=fused),
    lambda p, fused: bcfw(p, max_passes=4, random_state=0, sampling="gap", fused=fused),  # block gaps, refreshes
])
def test_fused_fw_ssg_and_fixed_steps_equal_the_generic_path(run):
    problem = _problem(5)
    np.testing.assert_allclose(run(problem, True).w, run(problem, False).w, rtol=1e-9, atol=1e-9)


def test_fused_hinges_and_adjoint_equal_the_problem_operators():
    problem = _problem(6, symmetric=False, G=2)
    view = select(problem)
    rng = np.random.default_rng(0)
    w = rng.normal(size=problem.n_params)
    hinges, losses = view.hinge_terms(w)
    np.testing.assert_allclose(hinges, problem.hinge_losses(w), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(losses, [problem.max_oracle(i, w).loss for i in range(problem.n)], rtol=1e-9,
                               atol=1e-9)
    blocks = rng.normal(size=int(view.offsets[-1]))
    out = np.zeros(problem.n_params)
    view.add_adjoint(blocks, 0.5, out)
    expected = np.zeros(problem.n_params)
    for i in range(problem.n):
        like = problem.like(i)
        seg = blocks[view.offsets[i]:view.offsets[i + 1]]
        stats = type(like)(seg[:like.unary.size].reshape(like.unary.shape), seg[like.unary.size:].reshape(
            like.pairwise.shape))
        problem.adjoint(i, stats, expected, 0.5)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("options, reason", [
    (dict(exact=True), "kernel_oracles"),
    (dict(time_limit=5.0), "kernel_oracles"),
    (dict(warm_start=True), "kernel_oracles"),
])
def test_oracles_the_kernels_do_not_reproduce_take_the_generic_path(options, reason):
    problem = _problem(7, **options)
    assert select(problem) is None and reason in problem.fused_refusal
    with pytest.raises(so.errors.NotSupportedError, match="no fused kernels"):
        bcfw(problem, max_passes=1, fused=True)


def test_a_subclass_overriding_the_potentials_takes_the_generic_path():
    class Scaled(so.GraphModel):
        def potentials(self, x, w):
            return super().potentials(x, 2.0 * w)

    base = _problem(8)
    problem = so.SSVMProblem(Scaled(4, 1, 3, symmetric=True), base.X, base.Y, so.Hamming(), lam=0.1)
    assert select(problem) is None and "no kernel family is registered for Scaled" in problem.fused_refusal
    register_family(Scaled, GRAPH)  # registered, the family's capability check still refuses it
    problem = so.SSVMProblem(Scaled(4, 1, 3, symmetric=True), base.X, base.Y, so.Hamming(), lam=0.1)
    assert select(problem) is None and "Scaled overrides potentials" in problem.fused_refusal


def test_passes_cut_into_chunks_are_the_same_bits_as_one_call(monkeypatch):
    # the family's passes run their compiled loops in chunks of examples (Ctrl-C between chunks); one example
    # per chunk gives the same bits as the kernels called once over every example
    import structopt.fused._graph_passes as passes
    import structopt.fused.graph as graph

    problem = _problem(9, n=9)
    view = select(problem)
    rng = np.random.default_rng(1)
    w0 = rng.normal(size=problem.n_params)
    order = rng.permutation(problem.n).astype(np.int64)
    size = int(view.offsets[-1])

    def run(chunked: bool) -> list:
        monkeypatch.setattr(graph, "FIRST_CHUNK", 1 if chunked else 10**6)
        monkeypatch.setattr(graph, "CHUNK_SECONDS", 0.0)
        out = []
        hinges = np.zeros(2 * problem.n)
        GRAPH.hinge_terms(w0, view.pack, view.offsets, view.gold, view.theta_buf, view.stats_buf, hinges)
        out.append(hinges)
        w_s = np.zeros(problem.n_params)
        out.append(np.array(GRAPH.fw_pass(w0, problem.lam, problem.n, view.gold, view.offsets, view.pack, w_s,
                                          view.theta_buf, view.stats_buf)))
        out.append(w_s)
        out.append(np.array([GRAPH.oracle_steps(order, w0, view.pack, view.offsets, view.theta_buf,
                                                view.stats_buf)]))
        w, m, r = w0.copy(), np.full(size, 0.1), np.zeros(size)
        ell_i, scalars, gaps = np.zeros(problem.n), np.array([0.0, 0.0, 3.0]), np.zeros(problem.n)
        positions, counts = passes.block_index(m, view.offsets, view.pack)
        GRAPH.bcfw_steps(order, True, True, problem.n, problem.lam, w, m, r, view.offsets, ell_i, scalars, view.pack,
                         view.theta_buf, view.stats_buf, view.direction_buf, positions, counts, 5, gaps)
        out += [w, m, r, ell_i, scalars, gaps]
        w, w_avg = w0.copy(), np.zeros(problem.n_params)
        k = GRAPH.ssg_steps(order, problem.lam, w, w_avg, 2, True, view.gold, view.offsets, view.pack,
                            view.theta_buf, view.stats_buf)
        out += [w, w_avg, np.array([k])]
        return out

    calls = []
    original = passes.hinge_terms

    def counting(*args):
        calls.append(1)
        return original(*args)

    monkeypatch.setattr(passes, "hinge_terms", counting)
    whole = run(False)
    assert len(calls) == 1
    chunked = run(True)
    assert len(calls) == 1 + problem.n  # one example per chunk
    for a, b in zip(whole, chunked, strict=True):
        np.testing.assert_array_equal(a, b)


_INTERRUPTED_PASS = r"""
import sys, time
import numpy as np
import structopt as so
from structopt.fused import select

S = 4
def graphs(n, N, seed):
    rng = np.random.default_rng(seed)
    X, Y = [], []
    for _ in range(n):
        pos = rng.random((N, 2))
        nbr = np.argsort(np.linalg.norm(pos[:, None] - pos[None], axis=-1), axis=1)[:, 1:4]
        edges = np.unique(np.sort([(i, j) for i in range(N) for j in nbr[i]], axis=1), axis=0).astype(np.int64)
        y = rng.integers(0, S, N)
        nodes = np.hstack([np.eye(S)[y] + 2.0 * rng.normal(size=(N, S)), np.ones((N, 1))])
        agree = 2.0 * (y[edges[:, 0]] == y[edges[:, 1]]) - 1.0
        X.append((nodes, edges, np.stack([agree + rng.normal(size=len(edges)), np.ones(len(edges))], axis=1)))
        Y.append(y)
    return so.SSVMProblem(so.GraphModel(S + 1, 2, S, symmetric=False), X, Y, so.Hamming(), lam=1e-3)

small = graphs(2, 10, 0)
w = np.random.default_rng(1).normal(size=small.n_params)
select(small).hinge_terms(w)  # load the kernels outside the timed pass
big = graphs(int(sys.argv[1]), 60, 2)
view = select(big)
print("go", flush=True)
t0 = time.perf_counter()
view.hinge_terms(w)  # one whole pass of oracle calls (AD3 at the training tolerance)
print(f"done {time.perf_counter() - t0:.2f}", flush=True)
"""


@pytest.mark.slow
def test_ctrl_c_interrupts_a_fused_graph_pass_within_two_seconds(tmp_path):
    # a real process, a real SIGINT one second into a pass of oracle calls that lasts several seconds: the
    # process ends with KeyboardInterrupt within two seconds, before the pass ends
    import os
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "interrupted_pass.py"
    script.write_text(_INTERRUPTED_PASS)
    proc = subprocess.Popen([sys.executable, str(script), "400"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    try:
        assert proc.stdout.readline().strip() == "go"
        time.sleep(1.0)
        assert proc.poll() is None  # still in the pass
        sent = time.perf_counter()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        waited = time.perf_counter() - sent
    finally:
        proc.kill()
    assert "KeyboardInterrupt" in err and "done" not in out, (out, err[-2000:])
    assert waited < 2.0, waited
