"""The pure planner: numpy and pydantic only, never kopf or kubernetes.

In rooms, each importing only from those below it (the `planner-rooms` import contract in pyproject.toml):
calibration/ > simulation/ > search/ > model/ > spec.py > catalog/ > names.py, quantiles.py, results.py. Modules hold
pure functions over scalars or numpy arrays; results are frozen dataclasses or pydantic models.
"""
