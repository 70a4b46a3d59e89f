"""The fused chain BCFW pass (sparse transition blocks, per-token non-zero labels, prefetches) takes
the generic Python path's steps iterate by iterate, keeps its support index equal to one rebuilt
from ``m``, and survives any interleaving with the Python path, mini-batch BCFW and checkpoints."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import scipy.sparse as sp

import structopt as so
from structopt.archive import decode, encode
from structopt.fused._chain_passes import block_index
from structopt.parallel import SerialExecutor
from structopt.solvers._blocks import BlockState, FusedBlockUpdater, PythonBlockUpdater
from structopt.solvers._minibatch import MiniBatchUpdater
from structopt.solvers.base import load_checkpoint
from structopt.solvers.bcfw import bcfw
from structopt.structures.base import unflatten

TOL = 1e-10
ALLOWED = np.array([[1, 1, 0, 1], [0, 1, 1, 0], [1, 0, 1, 1], [1, 1, 0, 0]], dtype=bool)
ALLOWED_START = np.array([True, False, True, True])
ALLOWED_END = np.array([True, True, False, True])


def _through_checkpoint(state: BlockState) -> BlockState:
    """``state`` after the round trip a checkpoint makes (the archive codec)."""
    data, arrays = encode(state)
    return decode(data, arrays)


def _feasible_labels(rng, T, allowed, start, end):
    # backward reachability, then a forward draw among labels that can still end feasibly
    reach = [end]
    for _ in range(T - 1):
        reach.insert(0, (allowed & reach[0][None, :]).any(axis=1))
    y = [int(rng.choice(np.flatnonzero(start & reach[0])))]
    for t in range(1, T):
        y.append(int(rng.choice(np.flatnonzero(allowed[y[-1]] & reach[t]))))
    return np.array(y)


def _problem(seed=0, *, n=6, F=4, S=3, lengths=(1, 5), sparse=False, extras=False, masks=None, structure=None,
             lam=0.1):
    """A random chain SSVM (Hamming loss). ``masks`` go to ``ChainModel``; ``structure`` replaces the
    model's chain after construction (a declared ``Chain`` with masks keeps the fused kernels).
    Sparse tokens keep at least one feature: a featureless token makes exact Viterbi ties, broken
    differently by rounding-level differences of the two paths' potentials."""
    rng = np.random.default_rng(seed)
    model = so.ChainModel(F, S, start_end=extras, bias=extras, **(masks or {}))
    if structure is not None:
        model.structure = structure
    chain = model.structure
    allowed = np.ones((S, S), bool) if chain.allowed is None else np.asarray(chain.allowed)
    start = np.ones(S, bool) if chain.allowed_start is None else np.asarray(chain.allowed_start)
    end = np.ones(S, bool) if chain.allowed_end is None else np.asarray(chain.allowed_end)
    X, Y = [], []
    for _ in range(n):
        T = int(rng.integers(lengths[0], lengths[1] + 1))
        x = rng.normal(size=(T, F))
        if sparse:
            keep = rng.random(x.shape) < 0.3
            keep[np.arange(T), rng.integers(0, F, size=T)] = True
            x = sp.csr_matrix(x * keep)
        X.append(x)
        Y.append(_feasible_labels(rng, T, allowed, start, end))
    problem = so.SSVMProblem(model, X, Y, so.Hamming(), lam)
    assert problem.fused() is not None
    return problem


def _pair_slices(state, S):
    return [slice(state.offsets[i + 1] - S * S, state.offsets[i + 1]) for i in range(state.ell_i.size)]


def _assert_same(problem, a, b, tol=TOL):
    """Same dual state. The fused pass sums the averaging accumulator of the (shared) transition
    blocks into the first example's block, so ``r`` is compared on node blocks and on that sum."""
    S = problem.model.n_states
    assert a.k == b.k
    np.testing.assert_allclose(a.w, b.w, rtol=0, atol=tol)
    np.testing.assert_allclose(a.m, b.m, rtol=0, atol=tol)
    np.testing.assert_allclose(a.ell_i, b.ell_i, rtol=0, atol=tol)
    assert a.ell == pytest.approx(b.ell, abs=tol)
    scale = max(1.0, abs(a.v), float(np.abs(a.r).max(initial=0.0)))  # the accumulators grow like k^2
    assert a.v == pytest.approx(b.v, abs=tol * scale)
    pairs = _pair_slices(a, S)
    node = np.ones(a.m.size, dtype=bool)
    for seg in pairs:
        node[seg] = False
    np.testing.assert_allclose(a.r[node], b.r[node], rtol=0, atol=tol * scale)
    np.testing.assert_allclose(sum(a.r[s] for s in pairs), sum(b.r[s] for s in pairs), rtol=0, atol=tol * scale)


def _assert_index_fresh(problem, state):
    """The index the fused pass maintains equals the one rebuilt from ``m``."""
    assert state.fused_index is not None
    positions, counts = state.fused_index
    fresh_positions, fresh_counts = block_index(state.m, state.offsets, problem.fused().pack)
    np.testing.assert_array_equal(counts, fresh_counts)
    for i in range(problem.n):
        np.testing.assert_array_equal(positions[i, :counts[i]], fresh_positions[i, :counts[i]])


def _updaters(problem, state=None):
    python = BlockState.initial(problem) if state is None else copy.deepcopy(state)
    fused = copy.deepcopy(python)
    return PythonBlockUpdater(problem, python), FusedBlockUpdater(problem, fused, problem.fused())


def _lockstep(problem, python, fused, order, line_search, averaging, per_call):
    """Run ``order`` on both updaters, ``per_call`` steps per fused call, comparing after each call."""
    for start in range(0, len(order), per_call):
        part = np.asarray(order[start:start + per_call], dtype=np.int64)
        python.run(part, line_search, averaging)
        fused.run(part, line_search, averaging)
        _assert_same(problem, python.state, fused.state)
    _assert_index_fresh(problem, fused.state)


def _orders(problem, seed):
    rng = np.random.default_rng(seed)
    n = problem.n
    return [(np.concatenate([rng.permutation(n) for _ in range(2)]), 1),  # one step per call
            (rng.permutation(n), n),  # a pass per call: the prefetches of the following example
            (rng.integers(0, n, size=2 * n), 2 * n)]  # uniform draws, repeats in one call


CASES = {
    "plain": dict(),
    "single_tokens": dict(lengths=(1, 1)),  # T = 1: no transitions at all
    "some_single_tokens": dict(lengths=(1, 2), n=8),
    "long_chains": dict(lengths=(60, 120), n=3, S=4),
    "masks": dict(S=4, masks=dict(allowed=ALLOWED, allowed_start=ALLOWED_START, allowed_end=ALLOWED_END)),
    "declared_chain": dict(S=4, structure=so.Chain(4, allowed=ALLOWED, allowed_start=ALLOWED_START,
                                                   allowed_end=ALLOWED_END)),
    "start_end_bias": dict(extras=True),
    "start_end_bias_single_tokens": dict(extras=True, lengths=(1, 1)),
    "sparse_csr": dict(sparse=True, F=25),
    "sparse_csr_extras_masks": dict(sparse=True, F=25, S=4, extras=True,
                                    masks=dict(allowed=ALLOWED, allowed_start=ALLOWED_START)),
    "many_labels": dict(S=7, lengths=(2, 6)),
    "one_label": dict(S=1),
    "small_lam": dict(lam=1e-4),  # line search clipped at 1: transition entries cancel to exact zeros
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("line_search,averaging", [(True, True), (True, False), (False, True), (False, False)])
def test_fused_steps_equal_python_steps(case, line_search, averaging):
    problem = _problem(seed=sorted(CASES).index(case), **CASES[case])
    python, fused = _updaters(problem)
    for order, per_call in _orders(problem, seed=1):
        _lockstep(problem, python, fused, order, line_search, averaging, per_call)
    np.testing.assert_allclose(python.averaged()[0], fused.averaged()[0], rtol=0, atol=TOL)
    assert python.averaged()[1] == pytest.approx(fused.averaged()[1], abs=TOL)


def _spread_state(problem, seed=0, density=0.6):
    """A dual state whose node rows spread over every label (a direction then has S non-zeros per
    token: the dense branch of the adjoint scatter) and whose transition blocks are random with
    exact zeros; ``w`` recomputed from ``m``."""
    rng = np.random.default_rng(seed)
    state = BlockState.initial(problem)
    gold = state.m.copy()
    S = problem.model.n_states
    for i, pair in enumerate(_pair_slices(state, S)):
        lo = state.offsets[i]
        T = problem.X[i].shape[0]
        state.m[lo:lo + T * S] = rng.dirichlet(np.ones(S), size=T).ravel()
        state.m[pair] = rng.random(S * S) * (rng.random(S * S) < density)
        state.ell_i[i] = 0.01 * rng.random()
    state.ell = float(state.ell_i.sum())
    w = problem.model.zeros()
    for i in range(problem.n):
        seg = slice(state.offsets[i], state.offsets[i + 1])
        theta = problem.theta(i, w)
        problem.model.add_features(problem.X[i], unflatten(gold[seg] - state.m[seg], theta), w,
                                   1.0 / (problem.lam * problem.n))
    state.w = w
    return state


@pytest.mark.parametrize("kwargs", [dict(S=5), dict(S=5, extras=True), dict(S=6, sparse=True, F=20),
                                    dict(S=5, lengths=(1, 1), extras=True)],
                         ids=["dense", "extras", "sparse", "single_tokens"])
@pytest.mark.parametrize("line_search", [True, False])
def test_dense_direction_rows(kwargs, line_search):
    problem = _problem(seed=3, **kwargs)
    state = _spread_state(problem)
    S = problem.model.n_states
    node = state.m[:problem.X[0].shape[0] * S].reshape(-1, S)
    assert np.all(2 * np.count_nonzero(node, axis=1) > S)  # any corner's direction row is dense
    python, fused = _updaters(problem, state)
    assert fused.state.fused_index is None  # deep copies drop it
    for order, per_call in _orders(problem, seed=2):
        _lockstep(problem, python, fused, order, line_search, True, per_call)


def test_transition_block_larger_than_int16():
    # S * S = 33124 > 32767 entries per transition block
    problem = _problem(seed=4, n=3, F=2, S=182, lengths=(1, 3))
    python, fused = _updaters(problem)
    for order, per_call in _orders(problem, seed=3):
        _lockstep(problem, python, fused, order, True, True, per_call)
    assert fused.state.fused_index[1].max() > 0


def test_timing_stages_keep_the_index_of_m():
    problem = _problem(seed=5, sparse=True, F=20, extras=True)
    _, fused = _updaters(problem)
    fused.run(np.arange(problem.n), True)
    for stages in (1, 2, 3, 4, 5):
        scratch = FusedBlockUpdater(problem, copy.deepcopy(fused.state), problem.fused())
        scratch.state.fused_index = copy.deepcopy(fused.state.fused_index)
        scratch.run(np.random.default_rng(stages).permutation(problem.n), True, True, stages)
        _assert_index_fresh(problem, scratch.state)


def test_index_lifecycle():
    problem = _problem(seed=6)
    _, fused = _updaters(problem)
    state = fused.state
    fused.run(np.arange(problem.n), True)
    index = state.fused_index
    assert index is not None
    restored = _through_checkpoint(state)  # checkpoints drop the index, the live state keeps it
    assert restored.fused_index is None and state.fused_index is index
    np.testing.assert_array_equal(restored.m, state.m)
    PythonBlockUpdater(problem, state).run(np.arange(problem.n), True)  # any other change to m drops it
    assert state.fused_index is None
    legacy = restored.__getstate__()
    del legacy["fused_index"]  # a checkpoint written before the index existed
    old = BlockState.__new__(BlockState)
    old.__setstate__(legacy)
    assert old.fused_index is None


def test_switching_paths_mid_run_stays_equal():
    """Fused -> Python -> fused -> mini-batch -> fused -> checkpoint round trip -> fused -> Python,
    against the Python path all along (mini-batch phases on both)."""
    problem = _problem(seed=7, n=8, S=4, extras=True, sparse=True, F=15)
    executor = SerialExecutor(problem)
    reference = BlockState.initial(problem)
    state = copy.deepcopy(reference)
    rng = np.random.default_rng(0)
    for phase in ("fused", "python", "fused", "minibatch", "fused", "checkpoint", "fused", "python", "fused"):
        if phase == "checkpoint":
            state = _through_checkpoint(state)
            continue
        order = rng.permutation(problem.n)
        if phase == "minibatch":
            MiniBatchUpdater(problem, reference, executor, 3).run(order, True)
            MiniBatchUpdater(problem, state, executor, 3).run(order, True)
        else:
            PythonBlockUpdater(problem, reference).run(order, True)
            updater = (FusedBlockUpdater(problem, state, problem.fused()) if phase == "fused"
                       else PythonBlockUpdater(problem, state))
            updater.run(order, True)
        _assert_same(problem, reference, state)
        if phase == "fused":
            _assert_index_fresh(problem, state)


def test_python_changes_to_transition_blocks_reach_the_fused_pass():
    # the Python path moves a block the fused pass has indexed: its transition support changes, and
    # a stale index would skip the new non-zeros (their direction entries would be lost)
    problem = _problem(seed=8, n=4, S=5, lengths=(4, 6))
    python, fused = _updaters(problem)
    fused.run(np.arange(problem.n), True)
    python.run(np.arange(problem.n), True)
    for i in range(problem.n):
        PythonBlockUpdater(problem, fused.state).run(np.array([i]), True)
        python.run(np.array([i]), True)
        fused.run(np.array([i, (i + 1) % problem.n]), True)
        python.run(np.array([i, (i + 1) % problem.n]), True)
        _assert_same(problem, python.state, fused.state)
        _assert_index_fresh(problem, fused.state)


@pytest.mark.parametrize("case,options", [
    ("single_tokens", dict()),
    ("masks", dict(averaging="none")),
    ("sparse_csr_extras_masks", dict(line_search=False)),
    ("start_end_bias", dict(sampling="uniform")),
    ("long_chains", dict(averaging="none", line_search=False)),
])
def test_bcfw_fused_equals_generic(case, options):
    problem = _problem(seed=9, **CASES[case])
    fast = bcfw(problem, max_passes=3, random_state=2, fused=True, **options)
    generic = bcfw(problem, max_passes=3, random_state=2, fused=False, **options)
    assert fast.info["fused"] and not generic.info["fused"]
    np.testing.assert_allclose(fast.w, generic.w, rtol=0, atol=TOL)
    for a, b in zip(fast.trace, generic.trace, strict=True):
        for key in ("primal", "dual", "gap", "dual_iterate"):
            assert a[key] == pytest.approx(b[key], abs=TOL)
    _assert_same(problem, fast.info["state"], generic.info["state"])


def test_resume_mid_run_equals_uninterrupted(tmp_path):
    problem = _problem(seed=10, **CASES["sparse_csr_extras_masks"])
    whole = bcfw(problem, max_passes=4, random_state=3, eval_every=0.5, fused=True)
    generic = bcfw(problem, max_passes=4, random_state=3, eval_every=0.5, fused=False)
    path = tmp_path / "state.pkl"
    bcfw(problem, max_passes=1.5, random_state=3, eval_every=0.5, fused=True, checkpoint=path)
    resumed = bcfw(problem, max_passes=4, random_state=3, eval_every=0.5, fused=True, resume=path)
    np.testing.assert_array_equal(resumed.w, whole.w)  # the rebuilt index visits the same entries in the same order
    _assert_same(problem, resumed.info["state"], generic.info["state"])
    _assert_index_fresh(problem, resumed.info["state"])
    payload = load_checkpoint(path, "bcfw", problem=problem)  # the checkpoint, continued both ways
    state = payload["state"].blocks
    assert state.fused_index is None
    python, fused = _updaters(problem, state)
    order = np.random.default_rng(4).permutation(problem.n)
    _lockstep(problem, python, fused, order, True, True, problem.n)
