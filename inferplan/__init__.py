"""inferplan: capacity planning for LLM serving on Kubernetes."""

__version__ = "0.1.0"
