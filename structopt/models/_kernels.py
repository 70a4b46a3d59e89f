"""numba kernels shared by linear models (sparse feature products)."""

from __future__ import annotations

from numba import njit


@njit(cache=True)
def csr_add_outer(indptr, indices, data, rows, out, scale):
    """``out += scale * X^T rows`` for CSR ``X`` (T, F), dense ``rows`` (T, S), ``out`` (F, S)."""
    S = rows.shape[1]
    for t in range(indptr.shape[0] - 1):
        for j in range(indptr[t], indptr[t + 1]):
            f = indices[j]
            v = scale * data[j]
            for s in range(S):
                out[f, s] += v * rows[t, s]
