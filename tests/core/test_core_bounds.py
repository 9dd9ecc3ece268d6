"""Bounded evidence (looper.core.fault.bounds): train.json / METRICS.json over a size or depth limit are
refused with a reason naming the limit, before any parser sees them; no RecursionError escapes."""

from __future__ import annotations

import json

import pytest

from looper.core.fault.bounds import loads_bounded, nesting_depth


@pytest.mark.parametrize("text, expected", [
    ("{}", 1),
    ("[]", 1),
    ("3", 0),
    ('{"a": [1, {"b": []}]}', 4),
    ('{"a": "[[[[[[[["}', 1),  # brackets inside a string do not nest
    ('{"a": "\\"[[[["}', 1),  # an escaped quote does not end the string
    ('["\\\\", [[]]]', 3),  # an escaped backslash does not escape the closing quote
    ("[[]] [[]]", 2),
])
def test_nesting_depth(text, expected):
    assert nesting_depth(text, 64) == expected


def test_nesting_depth_stops_counting_past_the_limit():
    assert nesting_depth("[" * 100_000 + "]" * 100_000, 64) == 65


def test_a_text_within_the_limits_is_parsed():
    assert loads_bounded('{"steps": 3}', 12, "train.json", 1024, 8) == ({"steps": 3}, None)


def test_a_text_over_the_size_limit_is_refused_unread_naming_the_limit():
    value, problem = loads_bounded("", 104_857_600, "train.json", 8_388_608, 64)
    assert value is None
    assert problem == ("train.json is 104857600 bytes, over the limit of 8388608 bytes ([limits] json_max_bytes): "
                       "refused unread")


def test_a_text_nested_100000_deep_is_refused_without_a_recursion_error():
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(RecursionError):  # what the daemon used to meet
        json.loads(deep)
    value, problem = loads_bounded(deep, len(deep), "train.json", 10**7, 64)
    assert value is None and problem == "train.json nests deeper than 64 levels ([limits] json_max_depth): refused unparsed"


@pytest.mark.parametrize("text", ["{", "not json", '{"a": NaN'])
def test_malformed_json_is_a_problem_in_words(text):
    value, problem = loads_bounded(text, len(text), "METRICS.json", 1024, 8)
    assert value is None and problem.startswith("METRICS.json is not valid JSON (")
