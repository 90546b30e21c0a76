"""The vLLM engine: boots real vLLM with kvaudit's audit worker (worker_cls) and reports every
rank. Importing this package imports neither torch nor vllm; the boot process does."""

from kvaudit.engines.vllm.multinode import node_rank
from kvaudit.engines.vllm.supervise import RunOptions, preflight, run_audit, run_follower

__all__ = ["RunOptions", "node_rank", "preflight", "run_audit", "run_follower"]
