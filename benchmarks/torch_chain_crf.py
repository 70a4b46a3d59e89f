"""structopt.torch.ChainCRF against pytorch-crf and torch-struct: NLL forward + backward and Viterbi on CPU.

Usage::

    OPENBLAS_NUM_THREADS=1 python benchmarks/torch_chain_crf.py [--threads 1] [--repeats 15]
        [--out benchmarks/torch_chain_crf_results.md] [--dtype float64|float32|both]

One process, batch 32, T = 30, S = 9 and 45, every sequence of length 30 ("full") or lengths drawn in
2..30 with one of 30 ("varied"). For each case the three layers get the same emissions, tags,
transitions, start and end scores (torch-struct's edge potentials are built from them inside the timed
call, as a user of it must), and their NLLs, gradients (emissions, transitions) and Viterbi labels are
asserted equal before timing. Timing is interleaved: each repetition runs every method once in
rotating order, a method's calls batched to last at least ``--min-batch`` seconds; the median over
repetitions of the time per call is reported, wall and CPU (process time; with one torch thread the
steadier figure on a shared machine). The ratio is the faster peer's time over structopt's.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import use_checkout, write_keeping_findings  # noqa: E402

B, T = 32, 30


def build(S: int, varied: bool, dtype, seed: int = 0):
    import torch

    g = torch.Generator().manual_seed(seed + S + 100 * varied)
    emissions = torch.randn(B, T, S, generator=g, dtype=torch.float64).to(dtype)
    tags = torch.randint(0, S, (B, T), generator=g)
    lengths = torch.randint(2, T + 1, (B,), generator=g) if varied else torch.full((B,), T)
    lengths[0] = T
    mask = torch.arange(T)[None, :] < lengths[:, None]
    tags = torch.where(mask, tags, 0)
    return emissions, tags, lengths, mask


class Peers:
    """The three layers with the same parameters, each as (nll+grad, decode) callables."""

    def __init__(self, S: int, dtype, emissions, tags, lengths, mask):
        import torch
        import torch_struct
        from torchcrf import CRF

        from structopt.torch import ChainCRF

        self.ours = ChainCRF(S, dtype=dtype)
        self.ref = CRF(S, batch_first=True).to(dtype)
        with torch.no_grad():
            self.ref.transitions.copy_(self.ours.transitions)
            self.ref.start_transitions.copy_(self.ours.start)
            self.ref.end_transitions.copy_(self.ours.end)
            # torch-struct has no parameters of its own: leaf tensors with the same values
            self.trans = self.ours.transitions.detach().clone().requires_grad_(True)
            self.start = self.ours.start.detach().clone().requires_grad_(True)
            self.end = self.ours.end.detach().clone().requires_grad_(True)
        self.S, self.em, self.tags, self.lengths, self.mask = S, emissions, tags, lengths, mask
        self.parts = torch_struct.LinearChainCRF.struct.to_parts(tags, S, lengths=lengths).to(dtype)
        self.LinearChainCRF = torch_struct.LinearChainCRF

    def _edges(self, em):
        # (B, N-1, C_next, C_prev): transition, next emission; + first emission and start on edge 0, end on
        # each example's last edge
        import torch

        edge = self.trans.t()[None, None] + em[:, 1:, :, None]
        first = (em[:, 0] + self.start)[:, None, None, :]
        last = torch.zeros(B, T - 1, self.S, 1, dtype=em.dtype)
        last[torch.arange(B), self.lengths - 2, :, 0] = 1.0
        return torch.cat([edge[:, :1] + first, edge[:, 1:]], dim=1) + last * self.end[None, None, :, None]

    def nll(self, name: str):
        import torch

        em = self.em.detach().requires_grad_(True)
        if name == "structopt":
            loss = self.ours(em, self.tags, self.lengths, reduction="sum")
            wrt = (em, self.ours.transitions)
        elif name == "pytorch-crf":
            loss = -self.ref(em, self.tags, mask=self.mask, reduction="sum")
            wrt = (em, self.ref.transitions)
        else:
            dist = self.LinearChainCRF(self._edges(em), lengths=self.lengths)
            loss = -dist.log_prob(self.parts).sum()
            wrt = (em, self.trans)
        grads = torch.autograd.grad(loss, wrt)
        return loss.detach(), grads

    def decode(self, name: str):
        import torch

        with torch.no_grad():
            if name == "structopt":
                return self.ours.decode(self.em, self.lengths)[0]
            if name == "pytorch-crf":
                return self.ref.decode(self.em, mask=self.mask)
            dist = self.LinearChainCRF(self._edges(self.em), lengths=self.lengths)
            return dist.argmax

    def labels(self, name: str, out) -> list[list[int]]:
        """Decoded labels as lists cut to each length (torch-struct's edge indicators read back)."""
        import torch

        L = self.lengths.tolist()
        if name == "structopt":
            return [out[b, :L[b]].tolist() for b in range(B)]
        if name == "pytorch-crf":
            return out
        edges = out  # (B, N-1, next, prev) one-hot
        seqs = []
        for b in range(B):
            e = edges[b, :L[b] - 1]
            idx = torch.nonzero(e > 0.5)  # rows (n, next, prev)
            seq = [int(idx[0, 2])] + [int(r[1]) for r in idx]
            seqs.append(seq)
        return seqs


METHODS = ("structopt", "pytorch-crf", "torch-struct")


def check_equal(peers: Peers, rtol: float) -> None:
    import torch

    values = {m: peers.nll(m) for m in METHODS}
    base_loss, base_grads = values["structopt"]
    for m in METHODS[1:]:
        loss, grads = values[m]
        torch.testing.assert_close(loss, base_loss, rtol=rtol, atol=rtol)
        for a, b in zip(grads, base_grads, strict=True):
            torch.testing.assert_close(a, b, rtol=rtol, atol=rtol)
    labels = {m: peers.labels(m, peers.decode(m)) for m in METHODS}
    for m in METHODS[1:]:
        assert labels[m] == labels["structopt"], f"{m} decodes other labels"


def timed(fn, min_batch: float) -> tuple[float, float]:
    """(wall, cpu) seconds per call over a batch of calls lasting at least ``min_batch``."""
    n, wall, cpu = 0, 0.0, 0.0
    w0, c0 = time.perf_counter(), time.process_time()
    while wall < min_batch or n == 0:
        fn()
        n += 1
        wall = time.perf_counter() - w0
    cpu = time.process_time() - c0
    return wall / n, cpu / n


def run_case(peers: Peers, repeats: int, min_batch: float, slow_repeats: int) -> dict:
    fns = {}
    for m in METHODS:
        fns[("nll", m)] = (lambda m=m: peers.nll(m))
        fns[("decode", m)] = (lambda m=m: peers.decode(m))
    samples: dict = {k: [] for k in fns}
    keys = list(fns)
    for r in range(repeats):
        order = keys[r % len(keys):] + keys[:r % len(keys)]
        for key in order:
            if key[1] == "torch-struct" and r >= slow_repeats:
                continue
            samples[key].append(timed(fns[key], min_batch))
    return {k: (float(np.median([s[0] for s in v])), float(np.median([s[1] for s in v])), len(v))
            for k, v in samples.items()}


def kernel_share(peers: Peers, min_batch: float) -> float:
    """CPU seconds of the compiled NLL kernel alone (the rest of structopt's time is Python and torch)."""
    from structopt.structures import _chain_batch as cb

    S = peers.S
    em = peers.em.detach().double().numpy()
    pw = peers.ours.transitions.detach().double().numpy().reshape(1, 1, S, S)
    st, en = peers.ours.start.detach().double().numpy(), peers.ours.end.detach().double().numpy()
    L, y = peers.lengths.numpy().astype(np.int64), peers.tags.numpy().astype(np.int64)
    cpu = [timed(lambda: cb.marginals_kernel(em, pw, True, st, en, L, y, True), min_batch)[1] for _ in range(7)]
    return float(np.median(cpu))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (0: torch's default)")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--slow-repeats", type=int, default=5,
                        help="repetitions of torch-struct (about 1.5 s a call at S = 45)")
    parser.add_argument("--min-batch", type=float, default=0.05)
    parser.add_argument("--dtype", choices=("float64", "float32", "both"), default="both")
    parser.add_argument("--sizes", default="9,45")
    parser.add_argument("--out", type=Path, default=None, help="write the markdown table here")
    args = parser.parse_args()
    use_checkout(ROOT)
    import warnings

    import torch

    warnings.filterwarnings("ignore", category=UserWarning)  # pytorch-crf's uint8 mask, torch-struct's constraints
    if args.threads:
        torch.set_num_threads(args.threads)
    dtypes = {"float64": [torch.float64], "float32": [torch.float32],
              "both": [torch.float64, torch.float32]}[args.dtype]
    rows = []
    for dtype in dtypes:
        for S in (int(s) for s in args.sizes.split(",")):
            for varied in (False, True):
                torch.manual_seed(S)
                emissions, tags, lengths, mask = build(S, varied, dtype)
                peers = Peers(S, dtype, emissions, tags, lengths, mask)
                check_equal(peers, 1e-8 if dtype == torch.float64 else 2e-4)
                res = run_case(peers, args.repeats, args.min_batch, args.slow_repeats)
                kern = kernel_share(peers, args.min_batch)
                rows.append((str(dtype).replace("torch.", ""), S, "varied" if varied else "full", res, kern))
                print(f"{rows[-1][0]} S={S} {rows[-1][2]}: " + ", ".join(
                    f"{k[0]} {k[1]} {v[1] * 1e3:.3f} ms" for k, v in res.items()), file=sys.stderr, flush=True)
    lines = [
        "# structopt.torch.ChainCRF vs pytorch-crf and torch-struct",
        "",
        f"Generated by `benchmarks/torch_chain_crf.py` ({platform.machine()}, {os.cpu_count()} cores shared with "
        f"other jobs; torch {torch.__version__}, {torch.get_num_threads()} torch thread(s), "
        f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}). Batch {B}, T = {T}; "
        f"values (NLL, gradients wrt emissions and transitions, Viterbi labels) asserted equal first "
        f"(float64: 1e-8, float32: 2e-4). Median over {args.repeats} interleaved repetitions "
        f"({args.slow_repeats} for torch-struct) of the time per call, CPU ms (wall ms). Ratio: the faster "
        f"peer's CPU time / structopt's. structopt kernel: CPU ms of the compiled NLL kernel alone.",
        "",
        "| dtype | S | lengths | task | structopt | pytorch-crf | torch-struct | ratio | structopt kernel |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for dt, S, lens, res, kern in rows:
        for task in ("nll", "decode"):
            cells = [f"{res[(task, m)][1] * 1e3:.3f} ({res[(task, m)][0] * 1e3:.3f})" for m in METHODS]
            peer = min(res[(task, m)][1] for m in METHODS[1:])
            ratio = peer / res[(task, 'structopt')][1]
            k = f"{kern * 1e3:.3f}" if task == "nll" else ""
            label = "NLL fwd+bwd" if task == "nll" else "Viterbi"
            lines.append(f"| {dt} | {S} | {lens} | {label} | " + " | ".join(cells) + f" | {ratio:.1f}x | {k} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        write_keeping_findings(args.out, text)


if __name__ == "__main__":
    main()
