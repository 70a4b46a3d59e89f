"""Word alignment as bipartite matching
====================================

Word alignment as bipartite matching on the Hansards gold (needs ../shared/data/hansards).

Run: python examples/word_alignment.py
"""

import structopt as so
from structopt.solvers.bcfw import bcfw
from structopt.tasks.alignment import load_alignment

task = load_alignment(n_heldout=200)  # features are computed from the sentence pairs themselves
model = so.MatchingModel(task.n_features, allow_unmatched=True)
problem = so.SSVMProblem(model, task.X_train, task.Y_train, so.MatchingHamming(fp_cost=1.0, fn_cost=3.0), lam=0.01)

result = bcfw(problem, max_passes=20, random_state=0)
print(f"duality gap {result.trace[-1]['gap']:.3f}")
print(f"held-out AER {task.evaluate(problem.predict(task.X_test, result.w)):.3f}")
