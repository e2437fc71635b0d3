"""What third parties and our own tests use to check a layer: contract suites, strategies and
seeded test layers."""

from __future__ import annotations

from runstore.testing._testruns_contract import (
    DataReaderContract,
    DataStoreContract,
    LayerFactory,
    RunRecordsMachine,
    collection_errors,
    contract_state_machine,
    environments,
    error_infos,
    file_coverages,
    free_text,
    huge_text,
    item_results,
    node_ids,
    phases_for,
    stack_frames,
)

__all__: list[str] = [
    "DataReaderContract",
    "DataStoreContract",
    "LayerFactory",
    "RunRecordsMachine",
    "collection_errors",
    "contract_state_machine",
    "environments",
    "error_infos",
    "file_coverages",
    "free_text",
    "huge_text",
    "item_results",
    "node_ids",
    "phases_for",
    "stack_frames",
]
