"""What third parties and our own tests use to check a layer: contract suites, strategies and
seeded test layers.

It needs pytest and hypothesis, the ``testing`` extra (``pip install 'runstore[testing]'``);
without them importing it raises one ``ImportError`` that says so.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from runstore._lazy import lazy_exports


def _require_the_testing_extra() -> None:
    """Raise one ``ImportError`` naming the extra when pytest or hypothesis is missing."""
    missing: list[str] = []
    for name in ("pytest", "hypothesis"):
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise ImportError(
            f"runstore.testing needs {' and '.join(missing)}, which "
            f"{'is' if len(missing) == 1 else 'are'} not installed: install the testing "
            "extra with pip install 'runstore[testing]'",
            name=missing[0],
        )


_require_the_testing_extra()

if TYPE_CHECKING:
    from runstore.testing._agents import (
        AgentsContract,
        AgentsMachine,
        agents_broken_clear_layer,
        agents_broken_client_id_layer,
        agents_broken_fencing_layer,
        agents_broken_sequence_layer,
        agents_json_values,
        agents_state_machine,
    )
    from runstore.testing._aio import bridged
    from runstore.testing._bad_types import BadTypesContract
    from runstore.testing._graphs import (
        GraphsContract,
        GraphsMachine,
        graph_versions,
        graphs_broken_prune_layer,
        graphs_broken_writes_layer,
        graphs_state_machine,
    )
    from runstore.testing._health import HealthContract
    from runstore.testing._ledger import (
        LedgerContract,
        LedgerContractViolation,
        LedgerMachine,
        action_run_failures,
        execution_failures,
        ledger_identifiers,
        ledger_json_values,
        ledger_model_layer,
        ledger_state_machine,
        non_json_values,
        phase_outcomes,
    )
    from runstore.testing._search import SearchContract, search_corpora, search_queries
    from runstore.testing._sessions import (
        ENTRY_TYPES,
        SessionsContract,
        SessionsContractViolation,
        SessionsMachine,
        entry_payloads,
        sessions_json_values,
        sessions_model_layer,
        sessions_state_machine,
    )
    from runstore.testing._shared import LayerFactory
    from runstore.testing._test_runs_contract import (
        DAY_MS,
        T0_MS,
        TestRunsMachine,
        TestRunsReaderContract,
        TestRunsStoreContract,
        collection_errors,
        environments,
        error_infos,
        file_coverages,
        free_text,
        git_states,
        huge_text,
        item_results,
        make_item,
        node_ids,
        phases_for,
        reference_streak,
        reference_verdict,
        rerun_item,
        selections,
        stack_frames,
        test_runs_state_machine,
        utc,
    )
    from runstore.testing._test_runs_fingerprint import code_fingerprints
    from runstore.testing._test_runs_layers import (
        SEED_PROJECT,
        SEED_START,
        SeededRuns,
        SeedError,
        empty,
        flaky,
        single_passing_run,
        with_failures,
    )
    from runstore.testing._test_runs_links import (
        bad_session_ids,
        changed_file_lists,
        session_ids,
    )

__all__: list[str] = [
    "DAY_MS",
    "ENTRY_TYPES",
    "SEED_PROJECT",
    "SEED_START",
    "T0_MS",
    "AgentsContract",
    "AgentsMachine",
    "BadTypesContract",
    "GraphsContract",
    "GraphsMachine",
    "HealthContract",
    "LayerFactory",
    "LedgerContract",
    "LedgerContractViolation",
    "LedgerMachine",
    "SearchContract",
    "SeedError",
    "SeededRuns",
    "SessionsContract",
    "SessionsContractViolation",
    "SessionsMachine",
    "TestRunsMachine",
    "TestRunsReaderContract",
    "TestRunsStoreContract",
    "action_run_failures",
    "agents_broken_clear_layer",
    "agents_broken_client_id_layer",
    "agents_broken_fencing_layer",
    "agents_broken_sequence_layer",
    "agents_json_values",
    "agents_state_machine",
    "bad_session_ids",
    "bridged",
    "changed_file_lists",
    "code_fingerprints",
    "collection_errors",
    "empty",
    "entry_payloads",
    "environments",
    "error_infos",
    "execution_failures",
    "file_coverages",
    "flaky",
    "free_text",
    "git_states",
    "graph_versions",
    "graphs_broken_prune_layer",
    "graphs_broken_writes_layer",
    "graphs_state_machine",
    "huge_text",
    "item_results",
    "ledger_identifiers",
    "ledger_json_values",
    "ledger_model_layer",
    "ledger_state_machine",
    "make_item",
    "node_ids",
    "non_json_values",
    "phase_outcomes",
    "phases_for",
    "reference_streak",
    "reference_verdict",
    "rerun_item",
    "search_corpora",
    "search_queries",
    "selections",
    "session_ids",
    "sessions_json_values",
    "sessions_model_layer",
    "sessions_state_machine",
    "single_passing_run",
    "stack_frames",
    "test_runs_state_machine",
    "utc",
    "with_failures",
]

# Where each name of ``__all__`` lives (module: names); read on first access.
_NAMES_OF: dict[str, tuple[str, ...]] = {
    "_agents": (
        "AgentsContract", "AgentsMachine", "agents_broken_clear_layer",
        "agents_broken_client_id_layer",
        "agents_broken_fencing_layer",
        "agents_broken_sequence_layer", "agents_json_values",
        "agents_state_machine",
    ),
    "_graphs": (
        "GraphsContract", "GraphsMachine", "graph_versions", "graphs_broken_prune_layer",
        "graphs_broken_writes_layer", "graphs_state_machine",
    ),
    "_ledger": (
        "LedgerContract", "LedgerContractViolation", "LedgerMachine", "action_run_failures",
        "execution_failures", "ledger_identifiers", "ledger_json_values", "ledger_model_layer",
        "ledger_state_machine", "non_json_values", "phase_outcomes",
    ),
    "_aio": (
        "bridged",
    ),
    "_bad_types": (
        "BadTypesContract",
    ),
    "_health": (
        "HealthContract",
    ),
    "_search": (
        "SearchContract", "search_corpora", "search_queries",
    ),
    "_sessions": (
        "ENTRY_TYPES", "SessionsContract", "SessionsContractViolation", "SessionsMachine",
        "entry_payloads", "sessions_json_values", "sessions_model_layer",
        "sessions_state_machine",
    ),
    "_shared": (
        "LayerFactory",
    ),
    "_test_runs_contract": (
        "DAY_MS", "T0_MS", "TestRunsMachine", "TestRunsReaderContract", "TestRunsStoreContract",
        "collection_errors", "environments", "error_infos", "file_coverages", "free_text",
        "git_states", "huge_text", "item_results", "make_item", "node_ids", "phases_for",
        "reference_streak", "reference_verdict", "rerun_item", "selections", "stack_frames",
        "test_runs_state_machine", "utc",
    ),
    "_test_runs_links": ("bad_session_ids", "changed_file_lists", "session_ids"),
    "_test_runs_fingerprint": ("code_fingerprints",),
    "_test_runs_layers": (
        "SEED_PROJECT", "SEED_START", "SeededRuns", "SeedError", "empty", "flaky",
        "single_passing_run", "with_failures",
    ),
}

if not TYPE_CHECKING:  # mypy reads the imports above; an unknown name stays an error there
    __getattr__, __dir__ = lazy_exports(__name__, _NAMES_OF)
