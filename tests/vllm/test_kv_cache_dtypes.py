"""`kvaudit plan --kv-cache-dtype` refuses what vLLM does not know, naming what it does, from a
list kept in kvaudit (plan never imports vLLM): the list holds every dtype of the installed vLLM."""

from __future__ import annotations

import typing

import pytest

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm


def test_the_plans_list_holds_every_kv_cache_dtype_of_the_installed_vllm():
    from vllm.config.cache import CacheDType

    from kvaudit.plan import KV_CACHE_DTYPES
    assert set(typing.get_args(CacheDType)) <= set(KV_CACHE_DTYPES)
