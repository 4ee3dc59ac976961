"""The pure planner: numpy and pydantic only, never kopf or kubernetes.

Modules by domain hold pure functions over scalars or numpy arrays; results are frozen dataclasses.
"""
