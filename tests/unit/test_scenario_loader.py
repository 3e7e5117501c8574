import pytest

from agent.errors import InvalidObject
from agent.scenario import load_scenario

SCENARIO = """
now: '2026-01-01T00:00:00Z'
objects:
- {apiVersion: v1, kind: Node, metadata: {name: n1}, status: {allocatable: {cpu: '8', memory: 32Gi}}}
samples:
- {at: 0, node: n1, metrics: {memory_total_usage: 2.0e10, cpu_total_usage: 7}}
"""


def test_exponent_floats_as_simulate_md_writes_them(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    scenario = load_scenario(path)
    assert scenario.samples[0].metrics == {"memory_total_usage": 2.0e10, "cpu_total_usage": 7.0}
    assert scenario.now == 1767225600.0


def test_json_scenarios_and_unreadable_files(tmp_path):
    path = tmp_path / "s.json"
    path.write_text('{"objects": [], "samples": []}')
    assert load_scenario(path).samples == []
    path.write_text("{not json")
    with pytest.raises(InvalidObject, match="cannot read"):
        load_scenario(path)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("config: {bogus: {}}", "config.bogus"),
        ("now: yesterday", "now"),
        ("objects: 3", "objects"),
        ("samples: [{at: 0}]", "samples[0].node"),
        ("samples: [{at: -1, node: n1}]", "samples[0].at"),
    ],
)
def test_bad_scenarios_name_the_field(tmp_path, text, field):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(InvalidObject) as err:
        load_scenario(path)
    assert err.value.field == field
