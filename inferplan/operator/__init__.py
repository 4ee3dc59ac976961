"""The Kubernetes side of inferplan: the InferenceCapacityPlan resource, its status, and the kopf operator.

Modules other than `handlers` and `main` are pure (no kopf or kubernetes import) so that they can be tested
without a cluster; the handlers stay thin: spec -> planner -> a pure function that builds the new status.
"""

GROUP = "inferplan.io"
VERSION = "v1alpha1"
KIND = "InferenceCapacityPlan"
PLURAL = "inferencecapacityplans"
SINGULAR = "inferencecapacityplan"
SHORT_NAMES = ("icp",)
