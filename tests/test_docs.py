"""docs/ is held to the code: every list the docs give is the list a registry holds.

Each registry table in ``docs/*.md`` follows a marker comment (``<!-- registry: op statuses -->``)
and names its keys in its first column. These tests compare those keys with the code's own
registries (statuses, isolation and overall verdicts, rewrite kinds, causes, diagnose factors,
CLI options, exit codes, metrics), the schema's enums and properties with the documented
tables, the documented files' fields with what the code writes, and check that every relative
link in docs/ and README.md resolves and that nothing in the repository points outside it, to
the shared folder beside the checkout. A new verdict, option or cause without its row here
fails; so does a row whose key the code no longer has.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from conftest import REPO, run_cli

DOCS = REPO / "docs"
PAGES = ("architecture.md", "contracts.md", "causes.md", "verdicts.md", "commands.md", "reliability.md")
MARKER = re.compile(r"<!--\s*([a-z-]+):\s*([a-z0-9 _-]+?)\s*-->")
NONE = "—"  # a table cell that says "no value" (a factor without a cause)


# ---------------------------------------------------------------------------- reading the docs


@cache
def _tables() -> dict[tuple[str, str], list[dict[str, str]]]:
    """(kind, name) of each marker -> the rows of the table right after it, as header -> cell."""
    found: dict[tuple[str, str], list[dict[str, str]]] = {}
    for page in PAGES:
        lines = (DOCS / page).read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            marker = MARKER.fullmatch(line.strip())
            if not marker:
                continue
            key = (marker[1], marker[2])
            assert key not in found, f"{page}: marker {line.strip()} used twice"
            table = []
            for row in lines[i + 1:]:
                if not row.startswith("|"):
                    break
                table.append(_cells(row))
            assert len(table) > 2 and set(table[1]) <= {"---"}, f"{page}: no table after {line.strip()}"
            header = table[0]
            for cells in table[2:]:  # an unescaped | in a cell breaks the table on GitHub too
                assert len(cells) == len(header), f"{page}: a row of <!-- {key[0]}: {key[1]} --> has {cells}"
            found[key] = [dict(zip(header, cells, strict=True)) for cells in table[2:]]
    return found


def _cells(row: str) -> list[str]:
    """A Markdown table row's cells; ``\\|`` inside a cell is not a separator."""
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", row.strip().strip("|"))]


def _code(cell: str) -> str:
    """The key a cell names: the text of its first `code span`, or the cell itself."""
    span = re.match(r"`([^`]*)`", cell)
    return span[1] if span else cell


def table(kind: str, name: str) -> list[dict[str, str]]:
    assert (kind, name) in _tables(), f"docs/ lost the table marked <!-- {kind}: {name} -->"
    return _tables()[(kind, name)]


def keys(kind: str, name: str) -> list[str]:
    rows = table(kind, name)
    return [_code(next(iter(row.values()))) for row in rows]


def column(kind: str, name: str, header: str) -> dict[str, str]:
    return {_code(next(iter(row.values()))): row[header] for row in table(kind, name)}


def _code_or_none(cell: str) -> str | None:
    return None if cell.startswith(NONE) else _code(cell)


# ---------------------------------------------------------------------------- registries


def test_op_statuses_are_the_classifiers_in_its_order_with_its_meanings():
    from tracer.comparison.statuses import STATUS, STATUSES

    assert tuple(keys("registry", "op statuses")) == STATUSES
    assert column("registry", "op statuses", "meaning") == {k: v.meaning for k, v in STATUS.items()}


def test_isolation_verdicts_are_the_judges_and_born_here_is_marked():
    from tracer.comparison.statuses import BORN_HERE, ISOLATION_VERDICTS

    assert tuple(keys("registry", "isolation verdicts")) == ISOLATION_VERDICTS
    born = column("registry", "isolation verdicts", "born at the op?")
    assert {v for v, cell in born.items() if cell == "yes"} == set(BORN_HERE)
    assert {cell for cell in born.values()} == {"yes", "no"}


def test_overall_verdicts_are_the_comparisons_with_the_exit_code_the_cli_gives():
    from tracer.comparison.pipeline import Comparison
    from tracer.comparison.statuses import VERDICT, VERDICTS
    from tracer.errors import EXIT_DIVERGED, EXIT_OK

    assert tuple(keys("registry", "overall verdicts")) == VERDICTS
    assert column("registry", "overall verdicts", "meaning") == {k: v.meaning for k, v in VERDICT.items()}
    assert {k: int(v) for k, v in column("registry", "overall verdicts", "exit code").items()} == {
        k: v.exit_code for k, v in VERDICT.items()}
    for verdict, cell in column("registry", "overall verdicts", "exit code").items():
        # the CLI's rule: EXIT_OK if result else EXIT_DIVERGED, result's truth being Comparison.__bool__
        passed = Comparison.__bool__(SimpleNamespace(verdict=verdict))  # type: ignore[arg-type]
        assert int(cell) == (EXIT_OK if passed else EXIT_DIVERGED), verdict


def test_rewrite_kinds_are_the_registrys_with_their_causes():
    from tracer.diff.kinds import KINDS

    assert set(keys("registry", "rewrite kinds")) == set(KINDS)
    causes = column("registry", "rewrite kinds", "cause")
    assert {k: _code_or_none(c) for k, c in causes.items()} == {k: kind.cause for k, kind in KINDS.items()}


def test_causes_are_the_catalogues_each_with_its_own_section():
    from tracer.causes import CAUSES

    documented = keys("registry", "causes")
    assert documented == list(CAUSES)
    page = (DOCS / "causes.md").read_text(encoding="utf-8")
    sections = re.findall(r"^### `([a-z0-9_]+)`", page, flags=re.M)
    assert sorted(sections) == sorted(CAUSES)


def test_every_cause_a_factor_or_rewrite_kind_names_is_in_the_catalogue():
    from tracer.causes import CAUSES
    from tracer.diagnosis.experiments import FACTORS
    from tracer.diff.kinds import KINDS

    named = {f.cause for f in FACTORS.values()} | {k.cause for k in KINDS.values()}
    assert named - {None} <= set(keys("registry", "causes")) == set(CAUSES)


def test_diagnose_factors_are_the_registrys_with_cause_quick_and_gpu():
    from tracer.diagnosis.experiments import FACTORS

    assert keys("registry", "diagnose factors") == list(FACTORS)
    for name, row in zip(keys("registry", "diagnose factors"), table("registry", "diagnose factors"), strict=True):
        factor = FACTORS[name]
        assert _code_or_none(row["cause"]) == factor.cause, name
        assert (row["quick"] == "yes") == factor.quick, name
        assert (row["GPU"] == "yes") == factor.gpu, name


def _parser_options() -> dict[str, set[str]]:
    """Every option string of tftrace's parser -> the commands that take it ("tftrace": the top level)."""
    from tracer.cli import build_parser

    parser = build_parser()
    found: dict[str, set[str]] = {}
    for action in parser._actions:  # noqa: SLF001 - argparse has no public walk of its actions
        for flag in action.option_strings:
            found.setdefault(flag, set()).add("tftrace")
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for command, sub in action.choices.items():
                for sub_action in sub._actions:  # noqa: SLF001
                    for flag in sub_action.option_strings:
                        found.setdefault(flag, set()).add(command)
    return found


def test_cli_options_are_the_parsers_with_their_commands_and_sides():
    parsed = _parser_options()
    commands = set().union(*parsed.values())
    per_side = {flag[4:] for flag in parsed if flag.startswith(("--a-", "--b-"))}
    wanted = {flag: where for flag, where in parsed.items()
              if flag not in ("-h", "--help") and not flag.startswith(("--a-", "--b-"))}
    documented = keys("registry", "cli options")
    assert len(documented) == len(set(documented)), "an option is listed twice"
    assert set(documented) == set(wanted)
    for row in table("registry", "cli options"):
        flag = _code(row["option"])
        listed = commands if row["commands"] == "every command" else set(re.findall(r"`([^`]+)`", row["commands"]))
        assert listed == wanted[flag], flag
        assert (row["per side"] == "yes") == (flag[2:] in per_side), flag


def test_exit_codes_are_the_errors_modules():
    from tracer import errors

    rows = table("registry", "exit codes")
    assert {int(_code(r["code"])): _code(r["name"]) for r in rows} == {
        getattr(errors, name): name for name in dir(errors) if name.startswith("EXIT_")}


def test_metrics_are_the_declared_ones():
    from tracer.metrics.result import METRICS

    assert keys("registry", "metrics") == [m.name for m in METRICS]


# ---------------------------------------------------------------------------- report.json's schema


@cache
def _schema() -> dict[str, Any]:
    return json.loads((REPO / "tracer" / "schemas" / "report.schema.json").read_text(encoding="utf-8"))


def _enums(node: Any, path: str = "") -> list[tuple[str, list[Any]]]:
    if isinstance(node, dict):
        found = [(path, node["enum"])] if "enum" in node else []
        return found + [e for k, v in node.items() for e in _enums(v, f"{path}/{k}")]
    if isinstance(node, list):
        return [e for i, v in enumerate(node) for e in _enums(v, f"{path}/{i}")]
    return []


def test_every_enum_of_the_schema_is_a_documented_list():
    documented = [set(keys(*marker)) for marker in _tables() if marker[0] == "registry"]
    enums = _enums(_schema())
    assert enums, "the schema has no enum left to check"
    for path, values in enums:
        as_text = {"null" if v is None else str(v) for v in values}
        assert as_text in documented, f"schema {path} {sorted(as_text)} is no documented list"


def _schema_objects() -> dict[str, dict[str, Any]]:
    """'top' and every $defs entry that declares properties."""
    schema = _schema()
    objects = {"top": schema}
    objects.update({name: d for name, d in schema["$defs"].items() if "properties" in d})
    return objects


def test_every_schema_object_has_its_table_with_every_property_and_required_one():
    for name, obj in _schema_objects().items():
        rows = dict(zip(keys("schema", name), table("schema", name), strict=True))
        assert set(obj["properties"]) <= set(rows), (name, sorted(set(obj["properties"]) - set(rows)))
        if "required" in next(iter(rows.values())):
            required = {k for k, r in rows.items() if r["required"] == "yes"}
            assert required == set(obj.get("required", [])), name


@cache
def _string_constants() -> frozenset[str]:
    """Every string literal in the tracer package: the keys the code can write."""
    found: set[str] = set()
    for path in (REPO / "tracer").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.add(node.value)
    return frozenset(found)


def test_no_documented_field_is_missing_from_the_code():
    for kind, name in _tables():
        if kind == "registry":
            continue
        missing = [k for k in keys(kind, name) if k not in _string_constants()]
        assert not missing, f"<!-- {kind}: {name} --> documents fields the code never writes: {missing}"


# ---------------------------------------------------------------------------- the other files


def _dict_keys(path: Path, function: str, needs: str) -> set[str]:
    """The string keys of the dict literals in ``function`` of ``path`` that hold the key ``needs``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and fn.name == function:
            for node in ast.walk(fn):
                if isinstance(node, ast.Dict):
                    names = {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
                    if needs in names:
                        found |= names
    assert found, f"no dict with {needs!r} in {path.name}:{function}: the test must follow the code"
    return found


def test_diagnosis_json_is_what_diagnose_writes():
    document = REPO / "tracer" / "diagnosis" / "document.py"
    assert set(keys("diagnosis", "top")) == _dict_keys(document, "diagnosis_document", "experiments")
    outcomes = REPO / "tracer" / "diagnosis" / "outcomes.py"
    base = _dict_keys(outcomes, _function_with(outcomes, '"latency_basis"'), "latency_basis")
    assert base <= set(keys("diagnosis", "experiment")), sorted(base - set(keys("diagnosis", "experiment")))


def _function_with(path: Path, text: str) -> str:
    tree = ast.parse(source := path.read_text(encoding="utf-8"))
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and text in (ast.get_source_segment(source, fn) or ""):
            return fn.name
    raise AssertionError(f"no function of {path.name} holds {text}")


def test_diff_graph_json_is_what_the_graph_diff_prints():
    from tracer.diff.records import GraphDiff, Rewrite

    assert set(keys("diff-graph", "top")) == set(GraphDiff({}, [], [], []).to_json())
    assert set(Rewrite("fused", [], [], {}).to_json()) == set(keys("schema", "rewrite"))


def test_the_manifest_fields_are_what_the_capture_child_and_the_store_write():
    from tracer.captures._format import APART

    worker = REPO / "tracer" / "captures" / "worker.py"
    written = (_dict_keys(worker, "_manifest", "spec") | _keys_set(worker, "run_capture", "manifest")
               | {"format", "format_version", "tensors", "uncaptured", *APART})  # the store adds these
    assert "memory" in written  # measured last, as the capture ends
    assert set(keys("manifest", "top")) == written


def _keys_set(path: Path, function: str, name: str) -> set[str]:
    """The keys ``function`` sets on the dict ``name`` (``name["key"] = ...``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    fn = next(f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == function)
    return {target.slice.value for node in ast.walk(fn) if isinstance(node, ast.Assign) for target in node.targets
            if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and target.value.id == name
            and isinstance(target.slice, ast.Constant) and isinstance(target.slice.value, str)}


# ---------------------------------------------------------------------------- links and references


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(m) for m in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


def _markdown_files() -> list[Path]:
    return [REPO / "README.md", *sorted(DOCS.glob("*.md"))]


def test_every_relative_link_in_docs_and_readme_resolves():
    checked = 0
    for page in _markdown_files():
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            file, _, anchor = target.partition("#")
            resolved = (page.parent / file).resolve() if file else page
            assert resolved.exists(), f"{page.name}: link {target} leads nowhere"
            assert REPO in resolved.parents or resolved == REPO, f"{page.name}: link {target} leaves the repository"
            if anchor:
                assert resolved.suffix == ".md" and anchor in _anchors(resolved), f"{page.name}: no #{anchor} in {file}"
            checked += 1
    assert checked >= 20, "the link check found almost no links: is it still reading the pages?"


def test_readme_sends_readers_to_every_docs_page():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for page in PAGES:
        assert f"](docs/{page}" in readme, f"README.md does not link docs/{page}"


def test_no_file_in_the_repository_points_outside_it_to_shared():
    outside = "../" + "shared/"  # written so, this file does not name it
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    hits = []
    for name in filter(None, files.decode().split("\0")):
        path = REPO / name
        if path.is_file() and not path.is_symlink():
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
            hits += [f"{name}:{n}" for n, line in enumerate(text.splitlines(), 1) if outside in line]
    assert not hits, hits


def test_help_that_names_a_contract_points_to_docs():
    proc = run_cli("diff-graph", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "docs/contracts.md" in proc.stdout
    assert "DESIGN.md" not in proc.stdout and "shared" not in proc.stdout


# ---------------------------------------------------------------------------- real files, as users make them


@pytest.mark.slow
def test_a_real_capture_and_report_write_only_documented_fields(models: dict[str, Path], tmp_path: Path):
    """A packed and an npy capture of the sample detector, and the report compare makes of them:
    every field they hold is in contracts.md, and the two formats are what it says."""
    from tracer.captures._format import APART

    model = models["detector_ckpt"]  # a checkpoint: its restored weights may be kept by digest
    caps = {}
    for fmt in ("packed", "npy"):
        caps[fmt] = tmp_path / fmt
        proc = run_cli("capture", str(model), "--out", str(caps[fmt]), "--tensor-format", fmt, "--examples", "2",
                       env={"TF_ENABLE_ONEDNN_OPTS": "0"})
        assert proc.returncode == 0, proc.stderr
    documented_top, documented_record = set(keys("manifest", "top")), set(keys("manifest", "record"))
    for fmt, cap in caps.items():
        manifest = json.loads((cap / "manifest.json").read_text(encoding="utf-8"))
        assert manifest["format"] == "tftrace-capture" and manifest["format_version"] == 2
        assert set(manifest) <= documented_top, sorted(set(manifest) - documented_top)
        records = [*manifest["tensors"].values(), *(r for group in APART for r in manifest.get(group, {}).values())]
        fields = set().union(*map(set, records))
        assert fields <= documented_record, sorted(fields - documented_record)
        files = {Path(r["file"]).suffix for r in records if "file" in r}
        if fmt == "npy":
            assert files == {".npy"} and not any("encoding" in r or r.get("values") == "artifact" for r in records)
        else:  # the packed capture of a checkpoint holds every kind of record the table lists
            assert ".zst" in files and any("encoding" in r for r in records)
            assert fields == documented_record, sorted(documented_record - fields)
    out = tmp_path / "report"
    proc = run_cli("compare", str(caps["packed"]), str(caps["npy"]), "--out", str(out), "--isolate", "0")
    assert proc.returncode == 0, proc.stderr  # the same side twice: identical
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["verdict"] == "identical"
    sections = {"top": [report], "side": list(report["sides"].values()), "node": list(report["nodes"].values()),
                "output": list(report["outputs"].values()), "rewrite": report["rewrites"]}
    for name, objects in sections.items():
        fields = set().union(set(), *map(set, objects))
        assert fields <= set(keys("schema", name)), (name, sorted(fields - set(keys("schema", name))))
