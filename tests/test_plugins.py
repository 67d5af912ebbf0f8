"""The shared plug-in registry (torchx_datapipes/plugins.py) behind caches, queue brokers and formats."""

from importlib.metadata import EntryPoint
from typing import Any, Iterator, List

import pytest

from torchx_datapipes import plugins
from torchx_datapipes.cache.registry import PROVIDERS
from torchx_datapipes.errors import DatapipesError
from torchx_datapipes.formats import registry as formats_registry
from torchx_datapipes.plugins import MissingExtraError, Registry
from torchx_datapipes.queue.registry import BROKERS


@pytest.fixture()
def scans(monkeypatch: pytest.MonkeyPatch) -> Iterator[List[str]]:
    """Counts entry_points() scans; serves one fake entry point in group 'tdp.test'."""
    calls: List[str] = []
    eps = [EntryPoint(name="ep", value="json:dumps", group="tdp.test")]

    def fake() -> List[EntryPoint]:
        calls.append("scan")
        return eps

    plugins.forget_entry_points()
    monkeypatch.setattr(plugins, "entry_points", fake)
    yield calls
    plugins.forget_entry_points()


def test_layers_clobber_rule_and_one_scan_per_process(scans: List[str]) -> None:
    reg: Registry[Any] = Registry("toy", "tdp.test", {"known": "json:loads"})
    reg.register("code", len)
    assert reg.names() == ("code", "ep", "known") and "ep" in reg
    import json

    assert reg.load("known") is json.loads and reg.load("ep") is json.dumps and reg.load("code") is len
    with pytest.raises(ValueError, match="toy 'known' is already registered; pass clobber=True"):
        reg.register("known", str)
    reg.register("known", str, clobber=True)  # code beats the table and entry points
    assert reg.load("known") is str
    with pytest.raises(ValueError, match="unknown toy 'nope'; known: code, ep, known"):
        reg.load("nope")
    other: Registry[Any] = Registry("other", "tdp.other", {})
    for _ in range(5):
        reg.names(), other.names()
    assert scans == ["scan"]  # entry_points() read once per process, for every group


def test_a_missing_client_library_names_the_extra() -> None:
    reg: Registry[Any] = Registry("queue scheme", "tdp.none", {"x": "tdp_no_such_module:C"},
                                  {"tdp_no_such_module": ("queue", "a client")})  # fmt: skip
    with pytest.raises(MissingExtraError) as e:
        reg.load("x")
    assert "queue scheme 'x' needs a client" in str(e.value)
    assert "pip install 'torchx-datapipes[queue]'" in str(e.value)
    assert isinstance(e.value, ImportError) and isinstance(e.value, DatapipesError)


def test_every_kind_asks_the_shared_registry() -> None:
    assert isinstance(PROVIDERS, Registry) and isinstance(BROKERS, Registry)
    assert {"redis", "memory", "sqlite", "memcached"} <= set(PROVIDERS.names())
    assert {"redis", "amqp", "nats"} <= set(BROKERS.names())
    assert formats_registry._entry_points("torchx_datapipes.formats") is plugins.entry_point_table(
        "torchx_datapipes.formats"
    )
