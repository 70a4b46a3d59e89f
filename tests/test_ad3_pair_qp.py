"""pair_qp (the lean active set of tables over two variables, its KKT inverse carried from call to call) against
dense_qp (any arity, a KKT solve from scratch per inner step): the same active-set method, so the same answers to
1e-10 on many random warm-started call sequences; and the carried inverse stays the inverse of its active set's
KKT matrix (to 1e-10) through many bordering / deletion updates between its periodic rebuilds."""

from __future__ import annotations

import numpy as np
import pytest

from structopt.structures import _ad3_kernels as K
from structopt.structures.factor_graph import FactorGraph


def _kkt_inverse(acfg: np.ndarray, Sb: int) -> np.ndarray:
    # the inverse of [0 1ᵀ; 1 G] for members acfg (G: the states two members share), by numpy
    ya, yb = acfg // Sb, acfg % Sb
    n = acfg.size
    kkt = np.zeros((n + 1, n + 1))
    kkt[0, 1:] = kkt[1:, 0] = 1.0
    kkt[1:, 1:] = (ya[:, None] == ya[None]).astype(float) + (yb[:, None] == yb[None])
    return np.linalg.inv(kkt)


def _sequences(seed: int, n_seq: int, length: int):
    # warm-started sequences of nearby local QPs, as AD3 makes them: tables drifting, forbidden entries and
    # states, ties, η changes
    rng = np.random.default_rng(seed)
    for _ in range(n_seq):
        states = [int(rng.integers(2, 7)), int(rng.integers(2, 7))]
        fg = FactorGraph(states)
        fg.add_table([0, 1])
        base = rng.normal(scale=rng.choice([0.3, 1.0, 5.0]), size=states).ravel()
        target = rng.normal(0.3, 0.8, size=sum(states))
        calls = []
        for _ in range(length):
            table = base + rng.normal(scale=0.05, size=base.size)
            if rng.random() < 0.2:
                table[rng.integers(table.size)] = -np.inf
            if rng.random() < 0.3:
                table = np.round(table)  # ties
            vallow = np.ones(sum(states), dtype=bool)
            if rng.random() < 0.15:
                vallow[rng.integers(vallow.size)] = False
            eta = float(rng.choice([0.05, 0.5, 2.0, 20.0]))
            target = target + rng.normal(scale=0.1, size=target.size)
            calls.append((table, vallow, eta, target.copy()))
        yield fg, states, calls


def _pair_call(fl, table, vallow, eta, target, acfg, aw, acount, ainv, qe, qt):
    Sa = int(fl.vstates[0])
    xa, xb = eta * target[:Sa], eta * target[Sa:]
    return K.pair_qp(0, fl.fptr, fl.evar, fl.eoff, fl.voff, fl.vstates, vallow, table, fl.toff, fl.aoff, xa, xb, eta,
                     acfg, aw, acount, qe, qt, 50, ainv, 0, xa, xb)


def test_pair_qp_gives_dense_qps_answers_on_warm_started_sequences():
    calls = 0
    for fg, states, sequence in _sequences(21, 40, 25):
        fl = fg.flat
        n_inv = int(K.inverse_layout(fl.fkind, fl.fptr, fl.aoff)[-1])
        sets = [(np.zeros(int(fl.aoff[-1]), dtype=np.int64), np.zeros(int(fl.aoff[-1])), np.zeros(1, dtype=np.int64))
                for _ in range(2)]
        ainv = np.zeros(n_inv)
        for table, vallow, eta, target in sequence:
            out = []
            for lean, (acfg, aw, acount) in zip((True, False), sets, strict=True):
                qe, qt = np.zeros(int(fl.eoff[-1])), np.zeros(int(fl.toff[-1]))
                if lean:
                    ok = _pair_call(fl, table, vallow, eta, target, acfg, aw, acount, ainv, qe, qt) != K.NEG
                else:
                    ok = K.dense_qp(0, fl.fptr, fl.evar, fl.eoff, fl.voff, fl.vstates, vallow, table, fl.toff, target,
                                    eta, acfg, aw, fl.aoff, acount, qe, qt, 50)
                out.append((ok, qe, qt))
            assert out[0][0] == out[1][0]
            # the variable marginals are the unique optimum (the objective is strictly concave in them); the
            # table marginal may not be (ties): it must marginalise to them and score the same objective
            np.testing.assert_allclose(out[0][1], out[1][1], rtol=0, atol=1e-10)
            values = []
            for _, qe, qt in out:
                z = qt.reshape(states)
                assert z.min() >= -1e-12 and np.all(z[~np.isfinite(table.reshape(states))] == 0.0)
                np.testing.assert_allclose(np.concatenate([z.sum(1), z.sum(0)]), qe, rtol=0, atol=1e-10)
                values.append(np.where(np.isfinite(table), table, 0.0) @ qt - 0.5 * eta * np.sum((qe - target) ** 2))
            assert abs(values[0] - values[1]) <= 1e-10 * (1.0 + abs(values[1]))
            calls += 1
    assert calls == 1000


def test_the_carried_inverse_equals_a_fresh_one_after_many_warm_started_calls():
    # after every call, the inverse carried in ainv (header: members, updates since the last rebuild,
    # their configurations) is the inverse of the KKT matrix of the active set the call left, to 1e-10,
    # also just before a periodic rebuild (INV_REFRESH updates in)
    most_updates = 0
    for fg, _states, sequence in _sequences(5, 30, 120):
        fl = fg.flat
        cap = int(fl.aoff[1])
        Sb = int(fl.vstates[1])
        ainv = np.zeros(int(K.inverse_layout(fl.fkind, fl.fptr, fl.aoff)[-1]))
        assert ainv.size == 2 + cap + (cap + 1) ** 2
        acfg, aw, acount = np.zeros(cap, dtype=np.int64), np.zeros(cap), np.zeros(1, dtype=np.int64)
        for table, vallow, eta, target in sequence:
            qe, qt = np.zeros(int(fl.eoff[-1])), np.zeros(int(fl.toff[-1]))
            if _pair_call(fl, table, vallow, eta, target, acfg, aw, acount, ainv, qe, qt) == K.NEG:
                continue
            n = int(acount[0])
            assert int(ainv[0]) == n and np.array_equal(ainv[2:2 + n].astype(np.int64), acfg[:n])
            most_updates = max(most_updates, int(ainv[1]))
            carried = ainv[2 + cap:].reshape(cap + 1, cap + 1)[:n + 1, :n + 1]
            np.testing.assert_allclose(carried, _kkt_inverse(acfg[:n], Sb), rtol=0, atol=1e-10)
    assert most_updates >= K.INV_REFRESH - 1  # some inverses went through a whole refresh period of updates


def test_a_stale_header_has_the_inverse_rebuilt():
    # an active set changed behind the kernel's back (branch-and-bound resets acount) does not match the
    # header: the call rebuilds the inverse instead of using a stale one
    fg = FactorGraph([3, 4])
    fg.add_table([0, 1])
    fl = fg.flat
    cap = int(fl.aoff[1])
    rng = np.random.default_rng(3)
    table = rng.normal(scale=0.1, size=12)  # flat scores, a large η: the optimum mixes several configurations
    vallow = np.ones(7, dtype=bool)
    ainv = np.zeros(int(K.inverse_layout(fl.fkind, fl.fptr, fl.aoff)[-1]))
    acfg, aw, acount = np.zeros(cap, dtype=np.int64), np.zeros(cap), np.zeros(1, dtype=np.int64)
    qe, qt = np.zeros(7), np.zeros(12)
    _pair_call(fl, table, vallow, 5.0, np.full(7, 0.3), acfg, aw, acount, ainv, qe, qt)
    n = int(acount[0])
    assert n >= 3
    acfg[:n] = acfg[:n][::-1].copy()  # the same members in another order: the header no longer matches
    aw[:n] = aw[:n][::-1].copy()
    _pair_call(fl, table, vallow, 5.0, np.full(7, 0.3), acfg, aw, acount, ainv, qe, qt)
    n = int(acount[0])
    carried = ainv[2 + cap:].reshape(cap + 1, cap + 1)[:n + 1, :n + 1]
    np.testing.assert_allclose(carried, _kkt_inverse(acfg[:n], 4), rtol=0, atol=1e-10)


def test_a_warm_start_without_carried_inverses_rebuilds_them():
    # an AD3State made without the inverses (ainv empty) warm-starts a run: the driver gives it empty ones,
    # rebuilt from the active sets, and the run reaches the answer of the same warm start with them
    from structopt.structures._fg_types import AD3State
    from tests.test_ad3_stopping import _potts_graph

    fg, theta = _potts_graph(np.random.default_rng(2), 5, 3)
    _, state = fg._ad3(theta, max_iter=40)
    bare = state.copy()
    bare = AD3State(bare.p, bare.lam, bare.qe, bare.qt, bare.acfg, bare.aw, bare.acount, bare.scal)
    assert bare.ainv.size == 0 and state.acount.max() >= 2
    with_inverses, _ = fg._ad3(theta, state=state.copy())
    rebuilt, after = fg._ad3(theta, state=bare)
    assert after.ainv.size == state.ainv.size
    assert (rebuilt.status, rebuilt.iterations) == (with_inverses.status, with_inverses.iterations)
    np.testing.assert_array_equal(rebuilt.labels, with_inverses.labels)
    assert rebuilt.upper_bound == pytest.approx(with_inverses.upper_bound, rel=1e-9, abs=1e-9)
