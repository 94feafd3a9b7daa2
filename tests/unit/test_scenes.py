"""The Shapes3D-like scene renderer (issue 73, item 1): the public dataset's six factors and value sets, exact and
deterministic renders whose pixels show the factors asked for."""

import colorsys
import math

import numpy as np
import pytest

from compgen.scenes import FACTOR_VALUES, FACTORS, SHAPES, check_factors, contact_sheet, render_scenes


def test_the_factors_and_their_values_are_the_public_datasets():
    assert FACTORS == ("floor_hue", "wall_hue", "object_hue", "scale", "shape", "orientation")
    assert [len(FACTOR_VALUES[name]) for name in FACTORS] == [10, 10, 10, 8, 4, 15]
    assert math.prod(len(values) for values in FACTOR_VALUES.values()) == 480_000
    np.testing.assert_allclose(FACTOR_VALUES["object_hue"], np.arange(10) / 10)
    assert (FACTOR_VALUES["scale"][0], FACTOR_VALUES["scale"][-1]) == (0.75, 1.25)
    assert (FACTOR_VALUES["orientation"][0], FACTOR_VALUES["orientation"][-1]) == (-30.0, 30.0)
    assert SHAPES == ("cube", "cylinder", "sphere", "capsule")


def _hue(rgb) -> float:
    return colorsys.rgb_to_hsv(*(np.asarray(rgb, dtype=np.float64) / 255.0))[0]


@pytest.mark.parametrize("image_size", [32, 64])
def test_every_scene_shows_its_factors_and_renders_the_same_twice(image_size):
    rng = np.random.default_rng(0)
    factors = np.stack([rng.integers(len(FACTOR_VALUES[name]), size=64) for name in FACTORS], axis=1)
    batch = render_scenes(factors, image_size)
    assert batch.images.shape == (64, image_size, image_size, 3) and batch.images.dtype == np.uint8
    assert np.array_equal(batch.images, render_scenes(factors, image_size).images)
    for image, mask, values in zip(batch.images, batch.object_mask, batch.values, strict=True):
        floor_hue, wall_hue, object_hue = values[:3]
        assert mask.any()
        brightest = image[mask][np.argmax(image[mask].max(axis=1))]
        assert abs(_hue(brightest) - object_hue) < 0.02 or abs(_hue(brightest) - object_hue) > 0.98
        assert abs(_hue(image[0, 0]) - wall_hue) < 0.02 or abs(_hue(image[0, 0]) - wall_hue) > 0.98
        assert abs(_hue(image[-1, 0]) - floor_hue) < 0.02 or abs(_hue(image[-1, 0]) - floor_hue) > 0.98


def test_scale_shape_and_orientation_change_the_object_as_they_should():
    def masks(column: int, values, base=(0, 3, 6, 4, 0, 7)):
        factors = np.repeat(np.array([base]), len(values), axis=0)
        factors[:, column] = values
        return render_scenes(factors, 64).object_mask

    areas = masks(3, range(8)).sum(axis=(1, 2))
    assert (np.diff(areas) > 0).all()  # larger scale, larger object
    by_shape = masks(4, range(4))
    assert all((by_shape[i] != by_shape[j]).sum() > 20 for i in range(4) for j in range(i + 1, 4))
    cube = masks(5, [0, 7], base=(0, 3, 6, 4, 0, 7))
    sphere = masks(5, [0, 7], base=(0, 3, 6, 4, 2, 7))
    assert (cube[0] != cube[1]).any() and np.array_equal(sphere[0], sphere[1])  # a sphere looks the same turned


def test_bad_factors_and_sizes_are_refused_naming_them():
    with pytest.raises(ValueError, match="shape index 4 out of range 0..3"):
        check_factors(np.array([[0, 0, 0, 0, 4, 0]]))
    with pytest.raises(ValueError, match=r"\(N, 6\)"):
        check_factors(np.zeros((2, 5), dtype=int))
    with pytest.raises(ValueError, match="integer indices"):
        check_factors(np.zeros((2, 6)))
    with pytest.raises(ValueError, match="image_size must be one of"):
        render_scenes(np.zeros((1, 6), dtype=int), 28)
    assert contact_sheet(32).shape == (6 * 32, 15 * 32, 3)
