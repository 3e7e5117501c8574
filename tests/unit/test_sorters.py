from agent.model.objects import parse_pod
from agent.model.registry import METRICS
from agent.model.usage import PodUsage
from engine.sorters import SORTERS, Candidate
from tests.builders import NOW, pod


def _cand(name, usage=None, **kwargs):
    return Candidate(parse_pod(pod(name, **kwargs)), usage or PodUsage(), NOW)


def _order(sorter, candidates):
    return [c.pod.name for c in SORTERS[sorter].sort(candidates)]


def test_class_then_priority_then_running_time():
    cands = [
        _cand("guaranteed", limits={"cpu": "1", "memory": "1Gi"}),
        _cand("burstable", requests={"cpu": "1"}),
        _cand("be-old", started="2025-12-31T20:00:00Z"),
        _cand("be-young", started="2025-12-31T23:30:00Z"),
        _cand("be-prio", priority=5, started="2025-12-31T23:59:00Z"),
    ]
    assert _order("general", cands) == ["be-young", "be-old", "be-prio", "burstable", "guaranteed"]


def test_cpu_sorter_higher_usage_first_unknown_last():
    cands = [
        _cand("low", PodUsage(cpu=0.5)),
        _cand("high", PodUsage(cpu=2.0)),
        _cand("unknown", PodUsage()),
        _cand("burstable-hot", PodUsage(cpu=5.0), requests={"cpu": "1"}),
    ]
    # no figure sorts after every pod that has one, whatever its class
    assert _order("cpu", cands) == ["high", "low", "burstable-hot", "unknown"]


def test_ext_cpu_requesters_first_then_ratio():
    ext = "qos.waterline.io/ext-cpu"
    cands = [
        _cand("plain", PodUsage(cpu=1.0)),
        _cand("ext-low", PodUsage(cpu=1.0, ext_cpu=0.5), requests={ext: "2"}, limits={ext: "2"}),
        _cand("ext-high", PodUsage(cpu=1.0, ext_cpu=1.5), requests={ext: "2"}, limits={ext: "2"}),
    ]
    # all BestEffort? ext requests make them Burstable only for cpu/memory: they stay BestEffort
    assert _order("cpu", cands) == ["ext-high", "ext-low", "plain"]


def test_memory_sorter_and_name_tie_break():
    cands = [
        _cand("b", PodUsage(memory=1e9)),
        _cand("a", PodUsage(memory=1e9)),
        _cand("c", PodUsage(memory=2e9)),
    ]
    assert _order("memory", cands) == ["c", "a", "b"]
    cands = [_cand("b", namespace="x"), _cand("b", namespace="a")]
    assert [c.key for c in SORTERS["general"].sort(cands)] == ["a/b", "x/b"]


def test_every_metric_names_a_sorter_that_exists():
    assert {spec.sorter for spec in METRICS} <= set(SORTERS)
    assert all(SORTERS[name].name == name for name in SORTERS)
