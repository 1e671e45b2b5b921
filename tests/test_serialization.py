"""Reports read back from plain data are the reports that were written: the matrix stores results as JSON and
publishes them again later, possibly under another model id."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests import templates
from tests.helpers import run_audit
from tito_audit.audit.results import Failure, TokenWindow
from tito_audit.audit.serialization import DecodeError, from_dict, report_from_dict
from tito_audit.formatters.json_report import to_json
from tito_audit.formatters.markdown import to_markdown


@pytest.mark.parametrize("name", ["GOOD", "MULTILINE_EMPTY_THINK", "QWQ_LIKE"])
def test_a_report_survives_json(tiny_model_dir, write_template, name):
    report = run_audit(tiny_model_dir, write_template(name, getattr(templates, name)), count=12)
    again = report_from_dict(json.loads(to_json(report)))
    assert again == report
    assert to_json(again) == to_json(report) and to_markdown(again) == to_markdown(report)


def test_nested_optional_and_numeric_fields():
    data = {
        "check": "rollout",
        "aspect": "text",
        "category": "tool",
        "conversation_id": "c1",
        "turn": 3,
        "roles": ["user", "assistant"],
        "causes": ["closing-rewritten"],
        "expected": {"start": 4, "ids": [1, 2], "texts": ["a", "b"]},
        "actual": None,
    }
    failure = from_dict(Failure, data)
    assert failure.expected == TokenWindow(4, [1, 2], ["a", "b"]) and failure.actual is None
    assert dataclasses.asdict(failure)["turn"] == 3


@pytest.mark.parametrize(
    "data",
    [
        {"start": 1, "ids": [1], "texts": ["a"], "extra": 0},  # unknown field
        {"start": 1, "ids": [1]},  # missing field
        {"start": "1", "ids": [1], "texts": ["a"]},  # wrong type
        {"start": True, "ids": [1], "texts": ["a"]},  # a bool is not an integer
        {"start": 1, "ids": ["x"], "texts": ["a"]},  # wrong item type
        [1, 2, 3],  # not an object
    ],
)
def test_data_of_the_wrong_shape_is_refused(data):
    with pytest.raises(DecodeError):
        from_dict(TokenWindow, data)
