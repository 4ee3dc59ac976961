"""Physics and queueing: memory, kernels and step times, queueing, disaggregated pools, engine factors, prediction
intervals."""
