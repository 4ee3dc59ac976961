"""Reading what a serving deployment does: its engine's metrics, through Prometheus.

Pure parts (metric names, PromQL, histogram maths) have no dependency on Kubernetes; the HTTP client uses only
the standard library.
"""
