import pytest

from agent.cluster.registry import ENGINES
from agent.errors import InvalidObject
from agent.scenario import CONFIG_SECTIONS, load_scenario

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
        ("sampels: []", "sampels"),
        ("now: '2026-01-01T00:00:00Z'\nobject: []", "object"),
        ("config: {reservations: {}}", "config.reservations"),
        ("now: yesterday", "now"),
        ("objects: 3", "objects"),
        ("samples: [{at: 0}]", "samples[0].node"),
        ("samples: [{at: -1, node: n1}]", "samples[0].at"),
        ("config: 5", "config"),
        ("config: {agent: 5}", "config.agent"),
        ("samples: 5", "samples"),
    ],
)
def test_bad_scenarios_name_the_field(tmp_path, text, field):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(InvalidObject) as err:
        load_scenario(path)
    assert err.value.field == field
    assert ", got " in str(err.value)  # the one format: <Kind> <name>: <field> <problem>, got <value>


def test_unknown_keys_are_named_with_the_known_ones(tmp_path):
    path = tmp_path / "typo.yaml"
    path.write_text("samples: []\nsampels: [{at: 0, node: n1}]\n")
    with pytest.raises(InvalidObject) as err:
        load_scenario(path)
    assert str(err.value) == (
        "Scenario typo.yaml: sampels is not a known key (known: now, config, objects, samples), "
        "got [{'at': 0, 'node': 'n1'}]"
    )


def test_config_sections_are_the_agent_and_every_cluster_engine():
    assert set(CONFIG_SECTIONS) == {"agent"} | {engine.key for engine in ENGINES}


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_deep_nesting_is_refused_not_a_crash(tmp_path, suffix):
    """Refused with the file named, by whichever layer is first: our bound (always, for
    JSON) or PyYAML's own (6.0.4 and later refuse 1,000 levels themselves)."""
    path = tmp_path / f"deep{suffix}"
    path.write_text('{"objects": ' + "[" * 100_000)
    with pytest.raises(InvalidObject, match=f"^Scenario deep{suffix}: ") as err:
        load_scenario(path)
    if suffix == ".json":
        assert "nested deeper than 100 levels" in str(err.value)


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_nesting_past_our_bound_is_refused_with_it(tmp_path, suffix):
    path = tmp_path / f"deep{suffix}"
    path.write_text('{"objects": ' + "[" * 300 + "]" * 300 + "}")
    with pytest.raises(InvalidObject, match="nested deeper than 100 levels"):
        load_scenario(path)


def test_text_that_is_not_utf8_is_refused(tmp_path):
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"now: \xff\xfe\x00")
    with pytest.raises(InvalidObject, match="not UTF-8 text"):
        load_scenario(path)
