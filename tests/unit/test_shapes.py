"""Shapes renderer: determinism, and that rendered images carry their concepts."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import numpy as np
import pytest

from compgen.concepts import ConceptSpace, ConceptVariable, shapes_space
from compgen.shapes import COLOR_RGB, RenderConfig, class_values, render_classes

# sha256 of the 36 classes of the 3x3x2x2 space rendered with seed 0 at 28x28. A change means images differ from
# every dataset rendered before: bump the dataset version if it is intended.
GOLDEN_DIGEST = "da55168c8648cc35a3ac71eb1116d1d85660a0fcb7c730222ce151074d2f15fb"
NO_JITTER = RenderConfig(color_jitter=0.0, size_jitter=0.0)


def _object_mask(image: np.ndarray, background: np.ndarray, fraction: float) -> np.ndarray:
    """Pixels whose distance from the background color is at least ``fraction`` of the largest distance."""
    distance = np.abs(image.astype(np.float64) - background).sum(-1)
    return distance >= fraction * distance.max()


def test_same_seed_gives_identical_bytes_and_matches_the_golden_digest():
    space = shapes_space(num_shapes=3, num_colors=3, background=True)
    classes = space.all_classes()
    first = render_classes(space, classes, seed=0)
    second = render_classes(space, np.array(classes), seed=np.random.Generator(np.random.PCG64(0)))
    assert first.images.dtype == np.uint8 and first.images.shape == (36, 28, 28, 3)
    assert first.images.tobytes() == second.images.tobytes()
    for name in ("rgb", "size", "position", "rotation"):
        np.testing.assert_array_equal(getattr(first, name), getattr(second, name))
    assert hashlib.sha256(first.images.tobytes()).hexdigest() == GOLDEN_DIGEST
    other = render_classes(space, classes, seed=1)
    assert other.images.tobytes() != first.images.tobytes()


# The same for shaded solids in one pose, objects over half the free space around the centre.
GOLDEN_DIGEST_SHADED = "8b94d54b6c30a6bb81ecb22e645dfea930f34c486b779fec1b63477c5cdc3673"
SHADED = RenderConfig(style="shaded", rotate=False, position_range=0.5)


def test_shaded_solids_are_deterministic_and_match_their_golden_digest():
    space = shapes_space(num_shapes=3, num_colors=3, background=True)
    first = render_classes(space, space.all_classes(), seed=0, config=SHADED)
    again = render_classes(space, space.all_classes(), seed=0, config=SHADED)
    assert first.images.tobytes() == again.images.tobytes()
    assert hashlib.sha256(first.images.tobytes()).hexdigest() == GOLDEN_DIGEST_SHADED
    assert (first.rotation == 0).all()  # one pose


def test_position_range_shrinks_the_positions_around_the_centre():
    space = shapes_space()
    classes = np.repeat(np.array(space.all_classes()), 50, axis=0)
    anywhere = render_classes(space, classes, seed=3, config=RenderConfig(rotate=False))
    centred = render_classes(space, classes, seed=3, config=RenderConfig(rotate=False, position_range=0.0))
    quarter = render_classes(space, classes, seed=3, config=RenderConfig(rotate=False, position_range=0.25))
    np.testing.assert_allclose(centred.position, 14.0)
    spread = [np.abs(batch.position - 14.0).max() for batch in (centred, quarter, anywhere)]
    assert spread[0] == 0 < spread[1] < spread[2]
    # The same draws, scaled around the centre (at range 1 the draw is the one before the option existed).
    np.testing.assert_allclose(quarter.position - 14.0, 0.25 * (anywhere.position - 14.0), atol=1e-4)
    with pytest.raises(ValueError, match="position_range must be in"):
        RenderConfig(position_range=1.5)
    with pytest.raises(ValueError, match="shaded solids keep one pose"):
        RenderConfig(style="shaded")
    with pytest.raises(ValueError, match="style must be one of"):
        RenderConfig(style="wireframe", rotate=False)


def test_string_and_array_concepts_render_the_same():
    space = shapes_space()
    strings = ["000", "101", "111", "101"]
    by_string = render_classes(space, strings, seed=3)
    by_array = render_classes(space, np.array([space.parse(s) for s in strings]), seed=3)
    assert by_string.images.tobytes() == by_array.images.tobytes()
    np.testing.assert_array_equal(by_string.concepts, [[0, 0, 0], [1, 0, 1], [1, 1, 1], [1, 0, 1]])


@pytest.mark.parametrize("color", ["red", "blue", "green"])
def test_mean_color_of_the_object_is_the_returned_rgb(color):
    space = shapes_space(num_colors=3)
    index = space.variable("color").index(color)
    batch = render_classes(space, [(0, index, 0)] * 16, seed=5)
    for image, rgb in zip(batch.images, batch.rgb, strict=True):
        interior = _object_mask(image, np.full(3, 255.0), fraction=0.98)
        assert interior.sum() > 20
        np.testing.assert_allclose(image[interior].mean(0), rgb * 255, atol=3)
    # The jitter stays within +-0.1 of the class color, so classes stay apart.
    np.testing.assert_allclose(batch.rgb, np.tile(COLOR_RGB[color], (16, 1)), atol=0.1 + 1e-6)


def test_large_objects_cover_more_pixels_than_small_ones():
    space = shapes_space(num_shapes=3)
    for shape in range(3):
        batch = render_classes(space, [(shape, 0, 0)] * 8 + [(shape, 0, 1)] * 8, seed=2)
        area = np.array([_object_mask(image, np.full(3, 255.0), 0.5).sum() for image in batch.images])
        assert area[:8].min() > area[8:].max()
        assert np.all(batch.size[:8] > batch.size[8:])


def test_shapes_are_distinguishable_by_area_and_fill_ratio():
    space = shapes_space(num_shapes=3)
    config = RenderConfig(color_jitter=0.0, size_jitter=0.0, rotate=False)
    batch = render_classes(space, ["000", "100", "200"], seed=0, config=config)  # circle, triangle, square
    masks = [_object_mask(image, np.full(3, 255.0), 0.5) for image in batch.images]
    areas = np.array([m.sum() for m in masks], dtype=float)
    # Same scale: circle (r = 0.8 R) > square (half-diagonal 0.88 R) > triangle (circumradius R).
    np.testing.assert_allclose(areas / areas[0], [1.0, 1.299 / 2.011, 1.549 / 2.011], rtol=0.08)
    fill = []
    for mask in masks:
        rows, cols = np.flatnonzero(mask.any(1)), np.flatnonzero(mask.any(0))
        fill.append(mask.sum() / ((rows[-1] - rows[0] + 1) * (cols[-1] - cols[0] + 1)))
    circle, triangle, square = fill
    assert triangle < 0.65 < circle < 0.9 < square  # pi/4, 1/2 and 1 of the bounding box


def test_rotated_shapes_keep_their_area():
    space = shapes_space(num_shapes=3)
    batch = render_classes(space, ["100"] * 12 + ["200"] * 12, seed=4, config=NO_JITTER)
    assert len(set(np.round(batch.rotation, 3))) == 24
    area = np.array([_object_mask(image, np.full(3, 255.0), 0.5).sum() for image in batch.images], dtype=float)
    for group in (area[:12], area[12:]):
        assert group.std() / group.mean() < 0.06


def test_background_variable_sets_the_background_color():
    space = shapes_space(background=True)
    batch = render_classes(space, ["0000", "0001", "1101"], seed=0)
    corners = batch.images[:, [0, 0, -1, -1], [0, -1, 0, -1]]
    assert np.all(corners[0] == 255)
    assert np.all(corners[1:] == 0)
    # The object is still drawn on black, in its own color.
    interior = _object_mask(batch.images[2], np.zeros(3), 0.98)
    np.testing.assert_allclose(batch.images[2][interior].mean(0), batch.rgb[2] * 255, atol=3)


def test_objects_stay_inside_the_frame():
    batch = render_classes(shapes_space(), ["000"] * 200, seed=9)
    frame = np.ones((28, 28), dtype=bool)
    frame[1:-1, 1:-1] = False
    assert np.all(batch.images[:, frame] == 255)
    assert np.all((batch.position > 0) & (batch.position < 28))


@pytest.mark.parametrize("size", [32, 64])
def test_larger_image_sizes_scale_the_object(size):
    space = shapes_space()
    small = render_classes(space, ["000"] * 4, seed=0, config=NO_JITTER)
    large = render_classes(space, ["000"] * 4, seed=0, config=replace(NO_JITTER, image_size=size))
    assert large.images.shape == (4, size, size, 3)
    area = [np.mean([_object_mask(im, np.full(3, 255.0), 0.5).sum() for im in b.images]) for b in (small, large)]
    assert area[1] / area[0] == pytest.approx((size / 28) ** 2, rel=0.1)


def test_class_values_are_the_canonical_conditioning():
    space = shapes_space()
    rgb, scale = class_values(space, np.array([[0, 0, 0], [1, 1, 1]]))
    np.testing.assert_allclose(rgb, [[0.9, 0.1, 0.1], [0.1, 0.1, 0.9]])
    np.testing.assert_allclose(scale, [2.7, 1.6])
    batch = render_classes(space, ["000", "111"], seed=0, config=NO_JITTER)
    np.testing.assert_allclose(batch.rgb, rgb)
    np.testing.assert_allclose(batch.size, scale)


def test_errors_are_clear():
    space = shapes_space()
    with pytest.raises(ValueError, match="image_size"):
        RenderConfig(image_size=8)
    with pytest.raises(ValueError, match="color_jitter"):
        RenderConfig(color_jitter=0.5)
    with pytest.raises(ValueError, match="size_jitter"):
        RenderConfig(size_jitter=1.1)
    assert RenderConfig(size_jitter=0.7).size_jitter == 0.7  # overlapping size ranges are allowed
    with pytest.raises(ValueError, match="out of range for variable 'size'"):
        render_classes(space, np.array([[0, 0, 2]]))
    with pytest.raises(ValueError, match="3 columns"):
        render_classes(shapes_space(background=True), np.zeros((2, 3), dtype=int))
    with pytest.raises(ValueError, match="only digits"):
        render_classes(space, ["0x0"])
    hue = ConceptSpace((ConceptVariable("hue", ("a", "b")), ConceptVariable("size", ("large", "small"))))
    with pytest.raises(ValueError, match="draws spaces"):
        render_classes(hue, ["00"])
    assert len(render_classes(space, [], seed=0)) == 0
