"""Concept graph core: parsing and validation, distances, levels on the 3- and 4-cube, presets, edges."""

from __future__ import annotations

import pytest

from compgen.concepts import (
    SPLIT_PRESETS,
    ConceptGraph,
    ConceptSpace,
    ConceptVariable,
    concept_distance,
    get_split_preset,
    shapes_space,
)


@pytest.fixture
def cube() -> ConceptSpace:
    return shapes_space()


def test_parse_forms_agree(cube):
    expected = (1, 0, 1)
    assert cube.parse("101") == expected
    assert cube.parse((1, 0, 1)) == expected
    assert cube.parse([1, 0, 1]) == expected
    assert cube.parse({"shape": "triangle", "color": "red", "size": "small"}) == expected
    assert cube.format((1, 0, 1)) == "101"
    assert cube.describe("101") == {"shape": "triangle", "color": "red", "size": "small"}


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("10", "has 2 values but the space has 3"),
        ("1010", "has 4 values"),
        ("1a1", "only digits"),
        ("", "only digits"),
        ("-01", "only digits"),
        ("121", "out of range for concept variable 'color'"),
        ("012", "out of range for concept variable 'size'"),
        ((0, 0, 5), "out of range for concept variable 'size'"),
        ((0, -1, 0), "out of range for concept variable 'color'"),
        ({"shape": "hexagon", "color": "red", "size": "large"}, "unknown value 'hexagon'"),
        ({"shape": "circle", "color": "red"}, "missing variables"),
        ({"shape": "circle", "color": "red", "size": "large", "hue": "x"}, "unknown concept variables"),
        ((0, "x", 0), "unknown value 'x' for concept variable 'color'"),
        ((0, 0.5, 0), "must be an int or a name"),
        (5, "cannot interpret"),
    ],
)
def test_parse_rejects_bad_input_naming_the_problem(cube, bad, message):
    with pytest.raises(ValueError, match=message):
        cube.parse(bad)


def test_variable_and_space_validation():
    with pytest.raises(ValueError, match="at least 2 values"):
        ConceptVariable("shape", ("circle",))
    with pytest.raises(ValueError, match="duplicate"):
        ConceptVariable("shape", ("circle", "circle"))
    with pytest.raises(ValueError, match="at most 10"):
        ConceptVariable("many", tuple(str(i) for i in range(11)))
    with pytest.raises(ValueError, match="unique"):
        ConceptSpace((ConceptVariable("a", ("x", "y")), ConceptVariable("a", ("x", "y"))))
    with pytest.raises(ValueError, match="num_shapes"):
        shapes_space(num_shapes=4)
    with pytest.raises(ValueError, match="unknown concept variable"):
        shapes_space().variable("background")


def test_space_dict_round_trip():
    space = shapes_space(num_shapes=3, num_colors=3, background=True)
    assert ConceptSpace.from_dict(space.to_dict()) == space
    assert space.cardinalities == (3, 3, 2, 2)
    assert len(space.all_classes()) == 36


def test_concept_distance_is_hamming():
    assert concept_distance((0, 0, 0), (1, 1, 1)) == 3
    assert concept_distance((1, 0, 1), (1, 1, 1)) == 1
    assert concept_distance((2, 0), (2, 0)) == 0
    with pytest.raises(ValueError, match="different lengths"):
        concept_distance((0, 0), (0, 0, 0))


def test_levels_on_the_3_cube_h32_train1():
    graph = get_split_preset("H32-train1").graph()
    assert graph.levels == {
        "000": 0, "001": 0, "010": 0, "011": 1, "100": 0, "101": 1, "110": 1, "111": 2,
    }  # fmt: skip
    assert graph.max_level == 2
    assert [graph.format(c) for c in graph.classes_at_level(1)] == ["011", "101", "110"]
    assert [graph.format(c) for c in graph.held_out_classes] == ["011", "101", "110", "111"]


def test_levels_of_the_adversarial_fail1_split():
    graph = get_split_preset("fail1").graph()
    # Every held-out class neighbours a training class; 111 is a training class.
    assert graph.levels == {
        "000": 0, "001": 0, "010": 1, "011": 1, "100": 0, "101": 1, "110": 1, "111": 0,
    }  # fmt: skip


def test_levels_on_the_4_cube_reach_3():
    graph = get_split_preset("H42-train1").graph()
    counts = {level: len(graph.classes_at_level(level)) for level in range(graph.max_level + 1)}
    assert counts == {0: 5, 1: 6, 2: 4, 3: 1}  # binomial(4, k) minus the 4 training neighbours at level 1
    assert graph.level("1111") == 3
    assert graph.level("0011") == 1


def test_user_defined_training_set_levels():
    graph = ConceptGraph(shapes_space(), ["000"])
    for concept, level in graph.levels.items():
        assert level == concept.count("1")
    with pytest.raises(ValueError, match="at least one training class"):
        ConceptGraph(shapes_space(), [])
    with pytest.raises(ValueError, match="not nodes of the graph"):
        ConceptGraph(shapes_space(), ["111"], nodes=["000", "001"])


def test_graph_edges_are_the_cube_edges():
    graph = ConceptGraph(shapes_space(), ["000"])
    assert len(graph.edges) == 12  # a 3-cube has 12 edges
    assert all(concept_distance(a, b) == 1 for a, b in graph.edges)
    four_cube = get_split_preset("H42-train1").graph()
    assert len(four_cube.edges) == 32
    three_colors = ConceptGraph(shapes_space(num_colors=3), ["000"])
    # 12 classes; each class has 1 + 2 + 1 = 4 neighbours -> 12 * 4 / 2 edges.
    assert len(three_colors.edges) == 24


def test_presets():
    assert set(SPLIT_PRESETS) == {*(f"H32-train{i}" for i in range(1, 10)), "fail1", "H42-train1"}
    assert get_split_preset("H32-train1").training_classes == ("000", "001", "010", "100")
    assert get_split_preset("fail1").training_classes == ("000", "100", "001", "111")
    assert get_split_preset("H42-train1").space.names == ("shape", "color", "size", "background")
    with pytest.raises(ValueError, match="unknown split preset"):
        get_split_preset("H32-train10")


@pytest.mark.parametrize(("number", "level_two"), [(2, "110"), (3, "101"), (4, "011")])
def test_paper_stars_around_other_centres_hold_one_level_two_class(number, level_two):
    """H32-train2..4 are H32-train1's star (a class and its three neighbours) around 001, 010 and 100."""
    graph = get_split_preset(f"H32-train{number}").graph()
    assert sorted(graph.levels.values()) == [0, 0, 0, 0, 1, 1, 1, 2]
    assert graph.classes_at_level(2) == [graph.space.parse(level_two)]


def test_from_dict_reads_every_form():
    import json

    from compgen.concepts import ConceptSpace

    space = shapes_space()
    assert ConceptSpace.from_dict(space) is space
    assert ConceptSpace.from_dict(space.to_pairs()) == space
    assert ConceptSpace.from_dict(json.loads(json.dumps(space.to_pairs()))) == space
    assert ConceptSpace.from_dict(space.to_dict()) == space
    for bad in ("abc", 3, [["a"]], [["a", "xy"]]):
        with pytest.raises(ValueError):
            ConceptSpace.from_dict(bad)
