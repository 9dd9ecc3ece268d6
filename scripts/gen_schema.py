"""Write looper/schemas/verdict.schema.json from the pydantic Verdict model.

    python scripts/gen_schema.py           # (re)write the file
    python scripts/gen_schema.py --check   # exit 1 when the file has drifted from the model
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_PATH = ROOT / "looper" / "schemas" / "verdict.schema.json"


def rendered() -> str:
    """The schema file's exact expected text."""
    sys.path.insert(0, str(ROOT))
    from looper.core.verdicts.verdict import verdict_json_schema

    return json.dumps(verdict_json_schema(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 on drift")
    args = parser.parse_args(argv)
    text = rendered()
    if args.check:
        current = SCHEMA_PATH.read_text(encoding="utf-8") if SCHEMA_PATH.exists() else None
        if current != text:
            print(f"{SCHEMA_PATH.relative_to(ROOT)} is out of date: run python scripts/gen_schema.py",
                  file=sys.stderr)
            return 1
        print(f"{SCHEMA_PATH.relative_to(ROOT)} matches the Verdict model")
        return 0
    SCHEMA_PATH.parent.mkdir(parents=True, exist_ok=True)
    SCHEMA_PATH.write_text(text, encoding="utf-8")
    print(f"wrote {SCHEMA_PATH.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
