"""A Hugging Face model id is passed to vLLM as it is (issue 30 item 1), and before the boot kvaudit
reads its config.json from the local Hugging Face cache (never the network) for the same checks a model
folder gets. With HF_HUB_OFFLINE set vLLM finds an id in the cache or nowhere
(EngineArgs.__post_init__ → transformers_utils.repo_utils.get_model_path): one that is not there is
exit 2 before any boot. The cache is built here from the embedded model (factories.hf_cache)."""

from __future__ import annotations

import http.server
import socket
import threading
import time

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


class _Hub(http.server.BaseHTTPRequestHandler):
    """The Hub's answers to a HEAD of `/{org}/{name}/resolve/{revision}/config.json`, as huggingface.co
    gives them: 200 with the file's headers, or an error status with its `X-Error-Code`."""

    ANSWERS = {"org/present": (200, None), "org/mistral-format": (404, "EntryNotFound"),
               "org/absent": (404, "RepoNotFound"), "org/gated": (401, "GatedRepo"), "org/busy": (503, None),
               "org/slow": (200, None)}
    heads: list[str] = []
    """Each HEAD asked, as `path token` (the bearer token, or -)."""

    def do_HEAD(self):  # noqa: N802 - http.server's name
        auth = self.headers.get("Authorization", "")
        self.heads.append(f"{self.path} {auth.removeprefix('Bearer ') or '-'}")
        org, name, _, revision = self.path.strip("/").split("/")[:4]
        status, code = (404, "RevisionNotFound") if revision == "v9" else self.ANSWERS[f"{org}/{name}"]
        if name == "gated" and auth == "Bearer hf_granted":
            status, code = 200, None
        if name == "slow":
            time.sleep(1.0)
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
        self.send_header("X-Repo-Commit", "0" * 40)
        self.send_header("ETag", '"e"')
        self.send_header("Content-Length", "2")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def endpoint(hub, monkeypatch):
    """A Hub on loopback, where huggingface_hub (and so vLLM) asks: HF_ENDPOINT."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setattr(constants, "ENDPOINT", url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", "/nonexistent/token")
    _Hub.heads.clear()
    yield url
    server.shutdown()


@pytest.mark.parametrize("model", ["org/present", "org/mistral-format", "org/busy"])
def test_online_an_id_the_hub_has_is_vllms_to_download(endpoint, model):
    preflight(AuditConfig(model=model, max_model_len=10**9))   # nothing read from the cache, nothing refused
    assert _Hub.heads == [f"/{model}/resolve/main/config.json -"]  # one HEAD, no retries


def test_a_slow_hub_is_vllms_to_wait_for(endpoint, monkeypatch):
    """A read timeout is an answer late, not none: vLLM's download retries, so the boot goes on."""
    monkeypatch.setattr(constants, "HF_HUB_ETAG_TIMEOUT", 0.3)
    preflight(AuditConfig(model="org/slow"))
    assert len(_Hub.heads) == 1


def test_the_token_the_boot_passes_vllm_is_the_one_the_hub_is_asked_with(endpoint):
    """`--hf-token` after `--` stays in the config's extra args (only a serve line moves it to HF_TOKEN)."""
    preflight(AuditConfig(model="org/gated", extra_args={"hf_token": "hf_granted"}))
    assert _Hub.heads == ["/org/gated/resolve/main/config.json hf_granted"]


def test_an_id_the_cache_holds_without_a_config_json_is_not_asked_of_the_hub(endpoint, hub):
    """Mistral's own format (params.json, no config.json), downloaded before: vLLM reads it offline."""
    snapshot = hub / "models--org--absent" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "params.json").write_text("{}", encoding="utf-8")
    preflight(AuditConfig(model="org/absent"))
    assert _Hub.heads == []


def test_online_an_id_the_hub_refuses_is_refused_before_any_boot(endpoint, hub):
    head = f"is not in the Hugging Face cache ({hub}) and {endpoint}"
    assert refusal(AuditConfig(model="org/absent")) == (
        f"model org/absent {head} has no such model (or it is private: set HF_TOKEN): check the id, or pass its "
        f"folder")
    assert refusal(AuditConfig(model="org/gated")) == (
        f"model org/gated is not in the Hugging Face cache ({hub}) and is gated on {endpoint}: accept its terms "
        f"there and set HF_TOKEN (or --hf-token), or pass its folder")
    assert refusal(AuditConfig(model="org/present", extra_args={"revision": "v9"})) == (
        f"model org/present at revision v9 {head} has no revision v9 of it: check --revision")


def test_online_an_id_with_no_hub_to_answer_is_refused_at_once(hub, monkeypatch):
    """Nothing listens on the port: the connection is refused (vLLM would retry ~25 s after its import)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    monkeypatch.setattr(constants, "ENDPOINT", url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}")
    started = time.monotonic()
    message = refusal(AuditConfig(model="Qwen/Qwen3-8B"))
    assert time.monotonic() - started < 5
    assert message.startswith(f"model Qwen/Qwen3-8B is not in the Hugging Face cache ({hub}) and {url} could not "
                              f"be reached (")  # httpx's ConnectError, or requests' ConnectionError
    assert message.endswith("), so vLLM could not fetch it: download it first (hf download Qwen/Qwen3-8B), point "
                            "HF_HUB_CACHE at the cache that has it, or pass its folder")


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
