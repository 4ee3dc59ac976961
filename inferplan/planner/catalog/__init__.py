"""What exists: GPUs, model architectures, checkpoints, precisions, engines and their rules, datasets, launch
arguments."""
