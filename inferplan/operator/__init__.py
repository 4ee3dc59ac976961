"""The Kubernetes side of inferplan: the InferenceCapacityPlan resource, its status, and the kopf operator.

Only `handlers` (kopf's glue) and `main` import kopf; only they, `kube` (the API requests), `controller` (the
loop that keeps plans answered) and `runtime` (what one kopf run shares, made by the startup handler) import
kubernetes, the last two through `kube`. The rest is pure, tested without a cluster: the rules
(`scheduling`), one reconcile (`reconcile`, `cluster_spec`), the status (`status`) and the inventory.
docs/operator.md#code-layout has the map. The resource's group, version and names are in `inferplan.resource`.
"""
