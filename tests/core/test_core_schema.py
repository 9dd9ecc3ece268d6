"""verdict.schema.json is generated from the Verdict model; a drift fails here."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from looper.core.verdicts.verdict import Status, verdict_json_schema

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "looper" / "schemas" / "verdict.schema.json"


def _gen_schema_module():
    spec = importlib.util.spec_from_file_location("gen_schema", ROOT / "scripts" / "gen_schema.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_schema_file_matches_the_model() -> None:
    on_disk = json.loads(SCHEMA.read_text(encoding="utf-8"))
    assert on_disk == verdict_json_schema(), "run: python scripts/gen_schema.py"
    assert SCHEMA.read_text(encoding="utf-8") == _gen_schema_module().rendered()


def test_schema_says_what_the_contract_says() -> None:
    s = verdict_json_schema()
    assert s["required"] == ["status", "blocking", "metrics", "confidence"]
    assert s["additionalProperties"] is False
    assert s["$defs"]["Status"]["enum"] == [x.value for x in Status]
    rule = s["allOf"][0]
    assert rule["if"]["properties"]["status"]["const"] == "pass"
    assert rule["then"]["properties"]["blocking"]["maxItems"] == 0
    assert rule["else"]["properties"]["blocking"]["minItems"] == 1
    assert s["properties"]["confidence"]["minimum"] == 0 and s["properties"]["confidence"]["maximum"] == 1


def test_gen_schema_check_detects_drift(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    mod = _gen_schema_module()
    target = tmp_path / "looper" / "schemas" / "verdict.schema.json"
    monkeypatch.setattr(mod, "ROOT", tmp_path)
    monkeypatch.setattr(mod, "SCHEMA_PATH", target)
    assert mod.main(["--check"]) == 1  # missing file is drift
    assert mod.main([]) == 0 and target.exists()
    assert mod.main(["--check"]) == 0
    target.write_text(target.read_text().replace('"pass"', '"passed"'))
    assert mod.main(["--check"]) == 1
    assert "out of date" in capsys.readouterr().err
