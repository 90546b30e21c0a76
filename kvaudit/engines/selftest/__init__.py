"""The selftest engine: a torch-only workload with planted, known sizes per owner, driven
through the same sequence, probes, warmup guard and ledger as the vLLM engine; the report's
`accuracy` holds planted vs measured per owner per rank. Importing this package imports no torch."""

from kvaudit.engines.selftest.supervise import SelftestOptions, check_options, run_selftest

__all__ = ["SelftestOptions", "check_options", "run_selftest"]
