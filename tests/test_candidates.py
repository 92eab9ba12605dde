"""The op lists that tell training from inference, held to TensorFlow's own op registry."""

from __future__ import annotations

from typing import Any

import pytest


# ---- the op lists, held to TensorFlow's registry ----------------------------------------------------------


@pytest.fixture(scope="module")
def registry() -> dict[str, Any]:
    """Every op TensorFlow registers: type -> OpDef."""
    from tracer._tf import tf  # noqa: PLC0415
    from tensorflow.python.framework import op_def_registry  # noqa: PLC0415

    tf()
    return {name: op_def_registry.get(name) for name in dir(tf().raw_ops)
            if not name.startswith("_") and op_def_registry.get(name) is not None}


def _takes_variable_by_ref(op_def: Any) -> bool:
    return any(arg.is_ref and arg.type != 7 for arg in op_def.input_arg)  # 7: DT_STRING, a TF1 queue's handle


def test_every_op_that_writes_a_variable_by_ref_changes_state_and_so_does_its_resource_twin(
        registry: dict[str, Any]) -> None:
    """``SparseApplyMomentum``, ``ResourceSparseApplyFtrl``, ``StridedSliceAssign``, ``ScatterNdMax``
    were missing: the observer and diagnose's replays did not count them as changing state."""
    from tracer.optypes import REF_PASSING_OPS, changes_state  # noqa: PLC0415

    writers = [name for name, op_def in registry.items()
               if _takes_variable_by_ref(op_def) and name not in REF_PASSING_OPS]
    assert len(writers) > 40, writers  # the registry was read
    twins = [f"Resource{name}" for name in writers if f"Resource{name}" in registry]
    assert [name for name in writers + twins if not changes_state(name)] == []
    assert not any(changes_state(name) for name in REF_PASSING_OPS)
    assert set(REF_PASSING_OPS) <= set(registry)


def test_every_summary_op_is_bookkeeping(registry: dict[str, Any]) -> None:
    from tracer.optypes import BOOKKEEPING_OPS, SUMMARY_OPS  # noqa: PLC0415

    summaries = {name for name in registry if "Summary" in name} - {"BoostedTreesMakeStatsSummary"} | {"ImportEvent"}
    assert summaries == set(SUMMARY_OPS)
    assert SUMMARY_OPS <= BOOKKEEPING_OPS
