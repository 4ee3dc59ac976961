"""The InferenceCapacityPlan resource's names: one home for the plan files the planner reads and the custom
resource the operator serves (no dependencies: the planner and the operator both import it)."""

from __future__ import annotations

GROUP = "inferplan.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "InferenceCapacityPlan"
PLURAL = "inferencecapacityplans"
SINGULAR = "inferencecapacityplan"
SHORT_NAMES = ("icp",)
