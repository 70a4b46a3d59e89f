"""pair_qp (the lean active set of tables over two variables) against dense_qp (any arity): the same
active-set method, so the same answers to 1e-10 on many random warm-started call sequences (the reference for
any change to pair_qp's inner step)."""

from __future__ import annotations

import numpy as np

from structopt.structures import _ad3_kernels as K
from structopt.structures.factor_graph import FactorGraph


def test_pair_qp_gives_dense_qps_answers_on_warm_started_sequences():
    rng = np.random.default_rng(21)
    calls = 0
    for _ in range(40):
        states = [int(rng.integers(2, 7)), int(rng.integers(2, 7))]
        fg = FactorGraph(states)
        fg.add_table([0, 1])
        fl = fg.flat
        sets = [(np.zeros(int(fl.aoff[-1]), dtype=np.int64), np.zeros(int(fl.aoff[-1])), np.zeros(1, dtype=np.int64))
                for _ in range(2)]
        base = rng.normal(scale=rng.choice([0.3, 1.0, 5.0]), size=states).ravel()
        target = rng.normal(0.3, 0.8, size=sum(states))
        for _ in range(25):  # a warm-started sequence of nearby problems, as AD3 makes them
            table = base + rng.normal(scale=0.05, size=base.size)
            if rng.random() < 0.2:
                table[rng.integers(table.size)] = -np.inf
            if rng.random() < 0.3:
                table = np.round(table)  # ties
            vallow = np.ones(int(fl.voff[-1]), dtype=bool)
            if rng.random() < 0.15:
                vallow[rng.integers(vallow.size)] = False
            eta = float(rng.choice([0.05, 0.5, 2.0, 20.0]))
            target = target + rng.normal(scale=0.1, size=target.size)
            out = []
            for lean, (acfg, aw, acount) in zip((True, False), sets, strict=True):
                qe, qt = np.zeros(int(fl.eoff[-1])), np.zeros(int(fl.toff[-1]))
                if lean:
                    ok = K.local_qp(0, fl.fkind, fl.fparam, fl.fptr, fl.evar, fl.eoff, fl.voff, fl.vstates, vallow,
                                    table, fl.toff, target, eta, acfg, aw, fl.aoff, acount, qe, qt, 50,
                                    np.zeros(1, dtype=bool))
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
