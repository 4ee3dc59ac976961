"""From a recommendation to what runs it: Kubernetes manifests (`manifests`), autoscaling objects
(`autoscaling`) and the change against a running Deployment (`diff`). Pure: plain dicts, no Kubernetes client
and no kopf, so the command line and the operator build the same objects (docs/deploy.md)."""
