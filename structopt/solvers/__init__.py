"""Solvers: ``solve(problem, **options) -> Result(w, trace)``."""
