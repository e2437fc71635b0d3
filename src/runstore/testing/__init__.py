"""What third parties and our own tests use to check a layer: contract suites, strategies and
seeded test layers."""

from __future__ import annotations

from runstore.testing._testruns_contract import (
    DAY_MS,
    T0_MS,
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
    make_item,
    node_ids,
    phases_for,
    stack_frames,
    utc,
)

__all__: list[str] = [
    "DAY_MS",
    "T0_MS",
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
    "make_item",
    "node_ids",
    "phases_for",
    "stack_frames",
    "utc",
]
