import pytest

from agent.model.quantity import cached_quantities, format_cpu, parse_quantity, parse_resource_list


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1", 1.0),
        ("100m", 0.1),
        ("1500m", 1.5),
        ("0.5", 0.5),
        (".5", 0.5),
        ("250u", 250e-6),
        ("10n", 10e-9),
        ("1k", 1e3),
        ("2M", 2e6),
        ("3G", 3e9),
        ("1T", 1e12),
        ("1P", 1e15),
        ("1E", 1e18),
        ("1Ki", 1024.0),
        ("1Mi", 1024.0**2),
        ("32Gi", 32 * 1024.0**3),
        ("1Ti", 1024.0**4),
        ("1Pi", 1024.0**5),
        ("1Ei", 1024.0**6),
        ("1e3", 1000.0),
        ("1E3", 1000.0),
        ("2.5e-3", 0.0025),
        ("+4", 4.0),
        (7, 7.0),
        (0.25, 0.25),
    ],
)
def test_every_kubernetes_suffix(text, expected):
    assert parse_quantity(text) == pytest.approx(expected)


@pytest.mark.parametrize("bad", ["", "abc", "1Xi", "1.2.3", "Gi", None, True, [1]])
def test_garbage_is_rejected_with_the_text(bad):
    with pytest.raises(ValueError):
        parse_quantity(bad)


def test_resource_list_names_the_bad_resource():
    assert parse_resource_list({"cpu": "2", "memory": "1Gi"}) == {"cpu": 2.0, "memory": 2.0**30}
    with pytest.raises(ValueError, match="memory"):
        parse_resource_list({"cpu": "2", "memory": "lots"})


def test_format_cpu():
    assert format_cpu(1.5) == "1500m"
    assert format_cpu(2.0) == "2"


def test_a_resource_list_refuses_a_negative_amount_naming_the_resource() -> None:
    import pytest

    from agent.model.quantity import parse_resource_list

    assert parse_resource_list({"cpu": "0", "memory": "1Gi"}) == {"cpu": 0.0, "memory": 2.0**30}
    with pytest.raises(ValueError, match=r"^cpu: must not be negative, got '-1'$"):
        parse_resource_list({"memory": "1Gi", "cpu": "-1"})


def test_new_quantities_all_its_life_keep_the_cache_bounded() -> None:
    """Issue 32: the node's batch capacity comes back through its watch as a new figure
    at each publication; the cache of parsed quantities stays bounded, and right."""
    for i in range(10_000):
        assert parse_quantity(str(8_000_000_000 + i * 4096)) == 8_000_000_000 + i * 4096
        assert cached_quantities() <= 4096
    assert parse_quantity("100m") == pytest.approx(0.1)
