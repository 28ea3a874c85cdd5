"""Benchmarks run PyTorch as the server does: with libgomp's short idle spin (app.openmp), set
here, before any benchmark loads torch (an operator's own setting is kept)."""

from app.openmp import spin_briefly

spin_briefly()
