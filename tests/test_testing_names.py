"""``runstore.testing`` names each domain's pieces one way, and pytest collects none of them.

The domains are ``test_runs``, ``ledger``, ``agents``, ``graphs`` and ``sessions``: a state
machine is ``<domain>_state_machine``, its class ``<Domain>Machine``, a contract
``<Domain>...Contract``.
The test-run names begin with ``test``/``Test``, which pytest collects from any test module
that imports them, so they say ``__test__ = False`` while a contract's subclass is collected.
"""

from __future__ import annotations

import pytest

import runstore.testing as testing
from runstore.testing import TestRunsReaderContract, TestRunsStoreContract

DOMAINS = {
    "test_runs": "TestRuns",
    "ledger": "Ledger",
    "agents": "Agents",
    "graphs": "Graphs",
    "sessions": "Sessions",
}


def test_every_domain_names_its_state_machine_and_contract_alike() -> None:
    for snake, camel in DOMAINS.items():
        assert f"{snake}_state_machine" in testing.__all__, snake
        assert f"{camel}Machine" in testing.__all__, camel
        contracts = [n for n in testing.__all__ if n.startswith(camel) and n.endswith("Contract")]
        assert contracts, camel
    machines = {n for n in testing.__all__ if n.endswith("_state_machine")}
    assert machines == {f"{snake}_state_machine" for snake in DOMAINS}


def test_no_export_named_like_a_test_is_collected() -> None:
    named_like_tests = [n for n in testing.__all__ if n.lower().startswith("test")]
    assert "test_runs_state_machine" in named_like_tests
    for name in named_like_tests:
        assert getattr(testing, name).__test__ is False, name


@pytest.mark.parametrize("contract", [TestRunsStoreContract, TestRunsReaderContract])
def test_a_subclass_of_a_test_run_contract_is_collected_unless_it_says_not(
    contract: type[object],
) -> None:
    a_layer = type("TestALayer", (contract,), {})
    a_base = type("TestAnAbstractBase", (contract,), {"__test__": False})
    its_subclass = type("TestItsSubclass", (a_base,), {})

    collected = [vars(c)["__test__"] for c in (contract, a_layer, a_base, its_subclass)]
    assert collected == [False, True, False, True]
