"""The space-time position embedding of the video transformers (``compgen.models.space_time_positions``): ``joint``
is the embedding every saved model has, ``factorized`` shares a frame's grid positions across frames."""

from __future__ import annotations

import pytest
import torch

from compgen.clips import CLIP_SPACE
from compgen.models.maskgit_transformer import MaskGITTransformer
from compgen.models.tuple_dit import TupleConditionedDiT

pytestmark = pytest.mark.usefixtures("single_thread")

FRAMES, GRID, HIDDEN = 3, 4, 32


def maskgit(**options) -> MaskGITTransformer:
    torch.manual_seed(0)
    return MaskGITTransformer(CLIP_SPACE.to_dict(), codebook_size=16, grid_size=GRID, num_layers=1,
                              **{"num_frames": FRAMES, "hidden_size": HIDDEN, "num_heads": 2} | options).eval()


def dit(**options) -> TupleConditionedDiT:
    torch.manual_seed(0)
    model = TupleConditionedDiT(CLIP_SPACE.to_dict(), latent_channels=4, grid_size=GRID, num_layers=1,
                                **{"num_frames": FRAMES, "hidden_size": HIDDEN, "num_heads": 2} | options).eval()
    with torch.no_grad():  # the output layer starts at zero (DiT), blind to its inputs: give it weights
        model.output_projection.weight.normal_(std=0.1)
    return model


def outputs(model) -> torch.Tensor:
    """The model's output on fixed inputs of its kind."""
    concepts = torch.tensor([[0, 1, 1], [1, 0, 0]])
    generator = torch.Generator().manual_seed(1)
    if isinstance(model, MaskGITTransformer):
        ids = torch.randint(0, 17, (2, FRAMES, GRID, GRID), generator=generator)
        return model(ids, concepts).logits
    return model(torch.randn((2, *model.latent_shape), generator=generator), 7, concepts).sample


@pytest.mark.parametrize("build", [maskgit, dit])
def test_joint_is_the_default_and_keeps_the_saved_weights_layout(build):
    default, joint = build(), build(position_embedding_type="joint")
    assert default.config.position_embedding_type == "joint" and default.frame_embedding is None
    assert default.state_dict().keys() == joint.state_dict().keys() and "frame_embedding" not in default.state_dict()
    assert default.positions() is default.position_embedding  # one vector per space-time position
    torch.testing.assert_close(outputs(default), outputs(joint), rtol=0, atol=0)


@pytest.mark.parametrize("build", [maskgit, dit])
def test_factorized_positions_share_a_frames_grid_across_frames(build):
    joint, factorized = build(), build(position_embedding_type="factorized")
    prefix = joint.positions().shape[1] - FRAMES * GRID * GRID
    assert factorized.positions().shape == joint.positions().shape == (1, prefix + FRAMES * GRID * GRID, HIDDEN)
    # learned vectors: the prefix's and one frame's grid, plus one per frame
    assert factorized.position_embedding.shape[1] == prefix + GRID * GRID
    assert factorized.frame_embedding.shape == (1, FRAMES, 1, HIDDEN)
    # the frames start told apart at a token's scale: their index's sine-cosine encoding
    index = torch.arange(FRAMES, dtype=torch.float64)[:, None]
    frequencies = 1.0 / 10000 ** (torch.arange(HIDDEN // 2, dtype=torch.float64) / (HIDDEN / 2))
    encoding = torch.cat([torch.sin(index * frequencies), torch.cos(index * frequencies)], dim=1)
    torch.testing.assert_close(factorized.frame_embedding[0, :, 0], encoding.float())
    grid = factorized.positions()[0, prefix:].unflatten(0, (FRAMES, GRID * GRID))
    frame_step = factorized.frame_embedding[0, 1, 0] - factorized.frame_embedding[0, 0, 0]
    # the same place in two frames differs by the frames' vectors alone, wherever it is
    torch.testing.assert_close(grid[1] - grid[0], frame_step.expand(GRID * GRID, HIDDEN))
    torch.testing.assert_close(factorized.positions()[0, :prefix], factorized.position_embedding[0, :prefix])
    # and both take gradients
    outputs(factorized).square().mean().backward()
    assert factorized.frame_embedding.grad.abs().sum() > 0 and factorized.position_embedding.grad.abs().sum() > 0


@pytest.mark.parametrize("build", [maskgit, dit])
def test_a_factorized_model_round_trips_through_save_pretrained(build, tmp_path):
    model = build(position_embedding_type="factorized")
    model.save_pretrained(tmp_path)
    loaded = type(model).from_pretrained(tmp_path).eval()
    assert loaded.config.position_embedding_type == "factorized"
    torch.testing.assert_close(outputs(loaded), outputs(model), rtol=0, atol=0)


@pytest.mark.parametrize("build", [maskgit, dit])
def test_unknown_kinds_and_factorized_images_are_refused(build):
    with pytest.raises(ValueError, match="position_embedding_type must be one of"):
        build(position_embedding_type="diagonal")
    with pytest.raises(ValueError, match="needs clips"):
        build(num_frames=1, position_embedding_type="factorized")
    with pytest.raises(ValueError, match="needs an even hidden size, got 9"):  # diffusers' sine-cosine would raise
        build(position_embedding_type="factorized", hidden_size=9, num_heads=3)
    build(position_embedding_type="joint", hidden_size=9, num_heads=3)  # joint vectors have any width


@pytest.mark.parametrize("recipe", ["maskgit-video", "flow-dit-video"])
def test_a_factorized_recipe_at_an_odd_width_is_refused_before_any_work(recipe, tmp_path, capsys):
    from compgen.recipes import load_recipe

    with pytest.raises(SystemExit) as exit_info:
        load_recipe(recipe).main(["--position_embedding", "factorized", "--hidden_size", "9", "--num_heads", "3",
                                  "--cache_dir", str(tmp_path / "cache"), "--output_dir", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert "--position_embedding factorized with --hidden_size 9" in capsys.readouterr().err
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out").exists()
