"""cvxpy and OR-Tools (and scipy's HiGHS) must work in one process, whichever is imported first.

cvxpy's optional highspy wheel and the HiGHS bundled in OR-Tools clash inside one process, so
each import order runs in a fresh interpreter.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

IMPORTS = {
    "cvxpy_first": "import cvxpy as cp\nfrom ortools.graph.python import linear_sum_assignment\n"
                   "from ortools.linear_solver import pywraplp\n",
    "ortools_first": "from ortools.graph.python import linear_sum_assignment\n"
                     "from ortools.linear_solver import pywraplp\nimport cvxpy as cp\n",
}

SOLVE = r"""
import numpy as np
from scipy.optimize import linprog

# cvxpy (Clarabel): min x0 + 2 x1 + 3 x2 on the simplex with x0 <= 0.25 -> 0.25 + 2 * 0.75 = 1.75
x = cp.Variable(3)
prob = cp.Problem(cp.Minimize(np.array([1.0, 2.0, 3.0]) @ x), [x >= 0, cp.sum(x) == 1, x[0] <= 0.25])
prob.solve(solver=cp.CLARABEL)
assert prob.status == "optimal", prob.status
assert abs(prob.value - 1.75) < 1e-6, prob.value

# OR-Tools assignment: the best permutation of this cost matrix is (1, 0, 2) with cost 1 + 2 + 3 = 6
cost = [[4, 1, 9], [2, 8, 7], [5, 6, 3]]
lsa = linear_sum_assignment.SimpleLinearSumAssignment()
for i in range(3):
    for j in range(3):
        lsa.add_arc_with_cost(i, j, cost[i][j])
assert lsa.solve() == lsa.OPTIMAL
assert lsa.optimal_cost() == 6, lsa.optimal_cost()
assert [lsa.right_mate(i) for i in range(3)] == [1, 0, 2]

# OR-Tools GLOP: max 3a + 2b s.t. a + b <= 4, a + 3b <= 6, a <= 3 -> a = 3, b = 1, value 11
solver = pywraplp.Solver.CreateSolver("GLOP")
a, b = solver.NumVar(0, 3, "a"), solver.NumVar(0, solver.infinity(), "b")
solver.Add(a + b <= 4)
solver.Add(a + 3 * b <= 6)
solver.Maximize(3 * a + 2 * b)
assert solver.Solve() == pywraplp.Solver.OPTIMAL
assert abs(solver.Objective().Value() - 11) < 1e-9 and abs(b.solution_value() - 1) < 1e-9

# scipy's HiGHS in the same process
res = linprog([-3, -2], A_ub=[[1, 1], [1, 3]], b_ub=[4, 6], bounds=[(0, 3), (0, None)], method="highs")
assert res.status == 0 and abs(res.fun + 11) < 1e-9
print("OK")
"""


@pytest.fixture(scope="module")
def runs():
    # both import orders in parallel, each in a fresh interpreter
    procs = {name: subprocess.Popen([sys.executable, "-c", code + SOLVE], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
             for name, code in IMPORTS.items()}
    results = {}
    for name, p in procs.items():
        out, err = p.communicate(timeout=300)
        results[name] = (p.returncode, out, err)
    return results


@pytest.mark.parametrize("order", sorted(IMPORTS))
def test_cvxpy_and_ortools_in_one_process(order, runs):
    code, out, err = runs[order]
    assert code == 0 and out.strip() == "OK", f"{order} failed:\n{err[-3000:]}"
