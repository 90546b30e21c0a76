"""Engines turn something that ran (a vLLM boot, the selftest workload, a vLLM log) into
per-rank records. Only modules under here import torch or vllm, and only when called."""
