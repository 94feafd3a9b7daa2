"""The measurement families of ``run_benchmarks.py``, one module each (training, sampling, evaluation, emergence)."""
