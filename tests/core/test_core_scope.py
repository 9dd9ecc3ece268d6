"""core.propose.scope: what the agent changed, as one verdict (pure; every branch)."""

from __future__ import annotations

from looper.core.propose import scope
from looper.core.verdicts.verdict import Status

PARENT = "import os\nimport torch\n\nLR = 0.1\n# a comment\n\nprint(LR)\n"


def test_a_train_py_only_change_that_compiles_passes_and_says_whether_it_is_simpler():
    v = scope.check(["train.py"], PARENT.replace("0.1", "0.2"), PARENT)
    assert v.status is Status.PASS and v.metrics == {"simpler": False}
    shorter = scope.check(["train.py"], "import os\nprint(1)\n", PARENT)
    assert shorter.ok and shorter.metrics == {"simpler": True}


def test_another_path_is_a_scope_violation_naming_at_most_eight_paths():
    paths = [f"f{i}.py" for i in range(10)]
    v = scope.check(["train.py", *reversed(paths)], PARENT.replace("0.1", "0.2"), PARENT)
    assert v.status is Status.FAIL and v.metrics == {"outcome": "discard"}
    assert v.blocking == ["scope violation: the agent changed " + ", ".join(paths[:8])
                          + " (only train.py may change); restored"]


def test_no_change_is_a_discard():
    v = scope.check([], PARENT, PARENT)
    assert v.blocking == ["the agent changed nothing in train.py"] and v.metrics["outcome"] == "discard"


def test_source_that_does_not_compile_is_a_crash_with_a_signature():
    v = scope.check(["train.py"], "def f(:\n", PARENT)
    assert v.status is Status.FAIL and v.metrics["outcome"] == "crash"
    assert v.blocking[0].startswith("train.py does not compile: ") and "(line 1)" in v.blocking[0]
    assert v.metrics["signature"].startswith("SyntaxError")


def test_a_new_third_party_import_is_a_discard_but_stdlib_declared_and_old_ones_are_not():
    v = scope.check(["train.py"], "import requests\nimport json\nimport torch\n" + PARENT, PARENT)
    assert v.blocking == ["new third-party import: requests (no new packages)"]
    assert v.metrics["outcome"] == "discard"
    old = "import requests\n" + PARENT
    assert scope.check(["train.py"], old + "x = 1\n", old).ok


def test_a_rejected_reply_is_a_discard_unless_its_source_does_not_compile():
    v = scope.check(["train.py", "other.py"], PARENT, PARENT, rejected="no diff in the reply")
    assert v.blocking == ["agent reply rejected: no diff in the reply"] and v.metrics["outcome"] == "discard"
    broken = scope.check(["train.py"], "x = (\n", PARENT, rejected="bad reply")
    assert broken.metrics["outcome"] == "crash" and broken.blocking[0].startswith("train.py does not compile")


def test_imports_of_sees_absolute_imports_only():
    src = "import a.b, c\nfrom d.e import f\nfrom . import g\nfrom .h import i\n"
    assert scope.imports_of(src) == {"a", "c", "d"}


def test_code_lines_skip_blanks_and_comments():
    assert scope.code_lines(PARENT) == 4
    assert scope.compile_problem("x = 1\n") is None
