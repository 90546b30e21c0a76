"""A Hugging Face model id is passed to vLLM as it is (issue 30 item 1), and before the boot kvaudit
reads its config.json from the local Hugging Face cache (never the network) for the same checks a model
folder gets. With HF_HUB_OFFLINE set vLLM finds an id in the cache or nowhere
(EngineArgs.__post_init__ → transformers_utils.repo_utils.get_model_path): one that is not there is
exit 2 before any boot. The cache is built here from the embedded model (factories.hf_cache)."""

from __future__ import annotations

import pytest

pytest.importorskip("huggingface_hub")  # vLLM's dependency: without it there is nothing to boot either

from factories import hf_cache  # noqa: E402
from huggingface_hub import constants  # noqa: E402

from kvaudit.config import AuditConfig  # noqa: E402
from kvaudit.engines.vllm import preflight  # noqa: E402
from kvaudit.errors import ExitCode, UsageError  # noqa: E402

MODEL_ID = "kvaudit/tiny-deepseek"
LIMIT = "max_model_len 200000 is above the model's limit (max_position_embeddings 163840 in config.json)"


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """The cache, as huggingface_hub (and so vLLM) finds it: HF_HUB_CACHE; online unless a test says."""
    path = hf_cache(tmp_path)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(path))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    return path


def refusal(config: AuditConfig) -> str:
    with pytest.raises(UsageError) as info:
        preflight(config)
    assert info.value.exit_code is ExitCode.USAGE and "\n" not in str(info.value)
    return str(info.value)


@pytest.mark.parametrize("offline", [False, True])
def test_an_id_in_the_cache_is_checked_against_its_config_json(hub, monkeypatch, offline):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
    assert refusal(AuditConfig(model=MODEL_ID, max_model_len=200_000)).startswith(LIMIT)
    preflight(AuditConfig(model=MODEL_ID, max_model_len=163_840))   # at the limit: vLLM's to boot
    revision = (hub / "models--kvaudit--tiny-deepseek" / "refs" / "main").read_text(encoding="utf-8")
    assert refusal(AuditConfig(model=MODEL_ID, max_model_len=200_000,
                               extra_args={"revision": revision})).startswith(LIMIT)


def test_offline_an_id_not_in_the_cache_is_refused_before_any_boot(hub, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert refusal(AuditConfig(model="org/absent")) == (
        f"model org/absent is not in the Hugging Face cache ({hub}) and HF_HUB_OFFLINE is set, so vLLM would "
        f"not find it: download it first (hf download org/absent), point HF_HUB_CACHE at the cache that has it, "
        f"or pass its folder")
    assert refusal(AuditConfig(model=MODEL_ID, extra_args={"revision": "v2"})).startswith(
        f"model {MODEL_ID} at revision v2 is not in the Hugging Face cache ({hub})")
    assert refusal(AuditConfig(model="no such id!")) == (
        "model no such id! is neither a model folder nor a Hugging Face id (org/name)")


def test_online_an_id_not_in_the_cache_is_vllms_to_download(hub):
    preflight(AuditConfig(model="org/absent", max_model_len=10**9))   # nothing read, nothing refused, no network


def test_a_config_vllm_edits_or_takes_elsewhere_is_not_judged_by_the_cached_one(hub):
    for extra in ({"hf_overrides": {"max_position_embeddings": 262144}}, {"hf_config_path": "org/other"}):
        preflight(AuditConfig(model=MODEL_ID, max_model_len=200_000, extra_args=extra))


def test_the_cli_refuses_an_absent_id_offline_in_one_line(cli, hub, monkeypatch):
    import kvaudit.engines.vllm as engine

    def boom(*args, **kwargs):  # pragma: no cover - must not be reached
        raise AssertionError("vLLM would have booted")
    monkeypatch.setattr(engine, "run_audit", boom)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    result = cli("run", "--", "vllm", "serve", "org/absent", "--max-model-len", "4K")
    assert result.code == 2 and result.stdout == ""
    assert result.stderr_lines == [f"kvaudit: error: model org/absent is not in the Hugging Face cache ({hub}) and "
                                   f"HF_HUB_OFFLINE is set, so vLLM would not find it: download it first (hf "
                                   f"download org/absent), point HF_HUB_CACHE at the cache that has it, or pass "
                                   f"its folder"]
