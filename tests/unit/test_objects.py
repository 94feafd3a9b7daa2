"""The one-object check and the image layer model (compgen.evaluation.objects)."""

import numpy as np
import pytest
import torch

from compgen import get_split_preset
from compgen.concepts import shapes_space
from compgen.evaluation.corruptions import corrupt, to_uint8
from compgen.evaluation.objects import check_objects, connected_components, image_layers
from compgen.shapes import PAPER_COLOR_JITTER, PAPER_SIZE_JITTER, RenderConfig, render_classes

pytestmark = pytest.mark.usefixtures("single_thread")

WIDE = RenderConfig(color_jitter=PAPER_COLOR_JITTER, size_jitter=PAPER_SIZE_JITTER)


def _reference_components(mask: np.ndarray) -> np.ndarray:
    """8-connected labels by flood fill, labelled like ``connected_components`` (largest flat index + 1)."""
    h, w = mask.shape
    labels = np.zeros((h, w), dtype=np.int64)
    seen = np.zeros((h, w), dtype=bool)
    for y in range(h):
        for x in range(w):
            if not mask[y, x] or seen[y, x]:
                continue
            stack, component = [(y, x)], []
            seen[y, x] = True
            while stack:
                a, b = stack.pop()
                component.append((a, b))
                for c in range(max(a - 1, 0), min(a + 2, h)):
                    for d in range(max(b - 1, 0), min(b + 2, w)):
                        if mask[c, d] and not seen[c, d]:
                            seen[c, d] = True
                            stack.append((c, d))
            label = max(a * w + b for a, b in component) + 1
            for a, b in component:
                labels[a, b] = label
    return labels


def test_connected_components_match_a_flood_fill():
    generator = torch.Generator().manual_seed(0)
    for density in (0.2, 0.45, 0.6):
        mask = torch.rand(20, 28, 28, generator=generator) < density
        labels = connected_components(mask).numpy()
        for image, image_labels in zip(mask.numpy(), labels, strict=True):
            np.testing.assert_array_equal(image_labels, _reference_components(image))
    snake = torch.zeros(1, 28, 28, dtype=torch.bool)  # one long path: the slowest case for label propagation
    snake[0, ::2, :] = True
    snake[0, 1::4, -1] = True
    snake[0, 3::4, 0] = True
    assert connected_components(snake).unique().tolist() == [0, int(_reference_components(snake[0].numpy()).max())]


@pytest.mark.parametrize("space", [get_split_preset("H32-train1").graph().space,
                                   pytest.param(shapes_space(num_shapes=3, num_colors=3, background=True),
                                                marks=pytest.mark.slow)],  # the larger space: in `make test`
                         ids=["H32", "3x3x2x2"])
def test_every_real_render_shows_one_object_even_darkened_and_noisy(space):
    classes = np.repeat(np.array(space.all_classes()), 40, axis=0)
    batch = render_classes(space, classes, seed=8, config=WIDE)
    assert check_objects(batch.images).valid.all()
    for kind in ("generator", "noise", "specks", "blur"):
        check = check_objects(to_uint8(corrupt(batch.images, kind, level=4, seed=3)))
        assert check.valid.mean() >= 0.995, (kind, check.failure_counts())


def test_blank_specks_fragments_several_and_oversized_are_no_valid_object():
    white = np.full((6, 28, 28, 3), 255, dtype=np.uint8)
    images = white.copy()
    # 0: blank. 1: three isolated specks. 2: a small object broken into pieces of 2-3 pixels.
    images[1, 5, 5] = images[1, 20, 8] = images[1, 12, 22] = (200, 20, 20)
    for y, x in ((10, 10), (10, 14), (14, 10), (14, 14)):
        images[2, y : y + 2, x : x + 1] = (20, 20, 200)
    # 3: two object-sized blobs. 4: one blob covering most of the frame. 5: one object and one speck: valid.
    images[3, 3:8, 3:8] = images[3, 18:24, 18:24] = (20, 20, 200)
    images[4, 1:27, 1:27] = (200, 20, 20)
    images[4, 0, :] = 255
    images[5, 10:17, 10:17] = (200, 20, 20)
    images[5, 2, 25] = (20, 200, 20)
    check = check_objects(images)
    assert check.reasons.tolist() == ["blank", "fragments", "fragments", "several", "oversized", "ok"]
    assert check.failure_counts() == {"blank": 1, "fragments": 2, "several": 1, "oversized": 1, "hybrid": 0, "pale": 0}
    assert check.valid.tolist() == [False] * 5 + [True]


def test_pure_noise_and_a_uniform_grey_frame_have_no_object():
    rng = np.random.default_rng(0)
    noise = np.clip(127 + rng.normal(0, 40, (8, 28, 28, 3)), 0, 255).astype(np.uint8)
    grey = np.full((8, 28, 28, 3), 210, dtype=np.uint8)
    assert not check_objects(noise).valid.any()
    assert check_objects(grey).reasons.tolist() == ["blank"] * 8


def test_layers_recover_background_colour_and_area_of_real_renders():
    space = shapes_space(background=True)
    batch = render_classes(space, np.repeat(np.array(space.all_classes()), 10, axis=0), seed=4, config=WIDE)
    layers = image_layers(batch.images)
    background = np.where(batch.concepts[:, 3:4] == 0, 1.0, 0.0).repeat(3, axis=1)
    np.testing.assert_allclose(layers.background.numpy(), background, atol=1e-6)
    np.testing.assert_allclose(layers.foreground.numpy(), batch.rgb, atol=0.08)
    # The composite is the image itself, up to uint8 rounding and the rim of the anti-aliased edge.
    recomposed = to_uint8(layers.composite()).astype(int)
    assert np.abs(recomposed - batch.images.astype(int)).mean() < 1.0
