"""The oracles of a chain
======================

What a structure gives you: the oracles of a chain, checked against brute force and an LP.

Run: python examples/chain_oracles.py
"""

import numpy as np

import structopt as so
from structopt.validate import check_structure

rng = np.random.default_rng(0)
chain = so.Chain(n_states=3)
theta = so.ChainPotentials(unary=rng.normal(size=(4, 3)), pairwise=rng.normal(size=(3, 3)))

print("MAP labels:        ", chain.argmax(theta))
labels, scores = chain.topk(theta, 3)
print("3 best sequences:  ", labels.tolist(), np.round(scores, 3))
log_z, marginals = chain.marginals(theta)
print("log Z:             ", round(log_z, 4))
print("node marginals:\n", np.round(marginals.unary, 3))
value, lp_marginals = chain.lp_relaxation(theta)
print("LP relaxation value equals the MAP score:", np.isclose(value, scores[0]))

# every oracle against enumeration and the LP, with timings
print(check_structure(chain, theta).table())
