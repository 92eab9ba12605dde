"""report.json's published JSON Schema, the reader that holds a received report to it, and what a
re-render (``tftrace report``) may import."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tracer.comparison.statuses import ISOLATION_VERDICTS, STATUSES, VERDICTS
from tracer.errors import TftraceError
from tracer.report.contract import check_report, load_report, report_errors, report_schema

from conftest import REPO, written_report_errors

FIXTURES = Path(__file__).parent / "fixtures"


def _planted() -> dict[str, Any]:
    return json.loads((FIXTURES / "report_detector_planted.json").read_text(encoding="utf-8"))


def test_the_schema_ships_in_the_package_and_states_the_design_contract() -> None:
    schema = report_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    # docs/contracts.md: these report.json fields are never renamed
    assert schema["required"] == ["schema_version", "verdict", "sides", "first_divergence",
                                  "first_divergence_beyond_tolerance", "origins", "nodes", "outputs", "rewrites",
                                  "observer_effect"]
    assert schema["$defs"]["origin"]["required"] == ["node", "op", "max_abs", "max_rel"]
    node = schema["$defs"]["node"]["properties"]
    assert {"status", "op", "max_abs", "max_rel", "ulp_max", "cosine", "amplification", "isolation"} <= set(node)
    assert '"additionalProperties": false' not in json.dumps(schema)  # fields may be added freely
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert '"tracer.schemas" = ["*.json"]' in pyproject and '"jsonschema>=' in pyproject


def test_the_schema_lists_the_statuses_and_verdicts_the_code_uses() -> None:
    defs = report_schema()["$defs"]
    assert tuple(defs["status"]["enum"]) == STATUSES
    assert tuple(defs["verdict"]["enum"]) == VERDICTS
    assert tuple(defs["isolation"]["properties"]["verdict"]["enum"]) == ISOLATION_VERDICTS


def test_the_report_fixtures_satisfy_the_whole_schema() -> None:
    for name in ("report_detector_planted.json", "report_hostile.json"):
        assert written_report_errors(FIXTURES / name) == [], name


def test_the_schema_catches_a_writer_that_drifts() -> None:
    report = _planted()
    report["nodes"]["images"]["status"] = "fine"  # a status no reader knows
    report["origins"][0]["max_abs"] = "big"  # a figure is a number or "inf"/"-inf"/"nan"
    report["rewrites"][0]["a_nodes"] = "one"
    paths = sorted("/".join(map(str, e.absolute_path)) for e in report_errors(report))
    assert paths == ["nodes/images/status", "origins/0/max_abs", "rewrites/0/a_nodes"]
    report = _planted()
    report["origins"][0]["max_abs"] = "inf"
    assert report_errors(report) == []


REFUSED = {
    "nodes is a list": (lambda r: r.update(nodes=[1, 2]), '"nodes" must be an object'),
    "verdict unknown": (lambda r: r.update(verdict="fine"), 'unknown "verdict" (\'fine\')'),
    "first divergence a string": (lambda r: r.update(first_divergence="x"), '"first_divergence" must be an object or null'),
    "first divergence without its node": (lambda r: r["first_divergence"].pop("node"), '"first_divergence" has no "node"'),
    "sides without b": (lambda r: r["sides"].pop("b"), '"sides" has no "b"'),
    "rewrites missing": (lambda r: r.pop("rewrites"), '"rewrites" is missing'),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_received_report_is_refused_naming_the_field(case: str, tmp_path: Path) -> None:
    change, message = REFUSED[case]
    report = _planted()
    change(report)
    (tmp_path / "report.json").write_text(json.dumps(report), encoding="utf-8")
    with pytest.raises(TftraceError) as info:
        load_report(tmp_path)
    assert info.value.problem == f"{tmp_path / 'report.json'} is not a valid tftrace report: {message}"
    assert info.value.fix == "re-run tftrace compare to rewrite it"


def test_damage_below_the_top_level_is_left_to_the_renderers() -> None:
    report = _planted()
    report["nodes"]["mul"] = "oops"
    report["first_divergence"]["node"] = 5
    report["edges"] = [[1], "x"]
    check_report(copy.deepcopy(report), "R")  # no error: the renderers show what they cannot read as "—"
    assert len(report_errors(report)) >= 3  # but no report tftrace writes looks like this
    with pytest.raises(TftraceError) as info:
        check_report([report], "R")
    assert info.value.problem == "R is not a tftrace report"


RERENDER = """
import json, sys
from tracer.cli import main
code = main(["report", sys.argv[1]])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "numba", "keras", "tf_keras"))
print(json.dumps({"code": code, "heavy": heavy}))
"""


def test_a_rerender_imports_neither_tensorflow_nor_numba(tmp_path: Path) -> None:
    (tmp_path / "report.json").write_text((FIXTURES / "report_detector_planted.json").read_text(encoding="utf-8"))
    proc = subprocess.run([sys.executable, "-c", RERENDER, str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen == {"code": 1, "heavy": []}  # 1: the planted report diverged
    assert (tmp_path / "report.html").exists() and (tmp_path / "report.md").exists()
