"""kvaudit: where every byte of vLLM startup GPU memory goes, per rank, and how much KV is safe."""

__version__ = "0.1.0"
