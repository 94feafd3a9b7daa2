"""compgen's ``block_type="paper"`` U-Net against Paper A's official ``ContextUnet``, imported from a checkout of
phys-ai/concept_graphs named by ``COMPGEN_PEER_DIR`` (skipped without one): the same layers in the same order, the
same parameter count, the same FLOPs per training step, and, with the official weights copied in, the same output."""

import os
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from repo_scripts import load_repo_script
from torch import nn

from compgen import TupleConditionedUNet2DModel, shapes_space
from compgen.shapes import shapes_continuous_concepts

PEER_DIR = os.environ.get("COMPGEN_PEER_DIR")
pytestmark = pytest.mark.skipif(not PEER_DIR or not (Path(PEER_DIR) / "train.py").is_file(),
                                reason="set COMPGEN_PEER_DIR to a checkout of phys-ai/concept_graphs")
SPACE = shapes_space()
VARIABLES = ("shape", "color", "size")


def models(n_feat: int, seed: int = 0) -> tuple[nn.Module, TupleConditionedUNet2DModel]:
    """The official ContextUnet (shape one-hot, RGB, size: ``n_classes=[2, 3, 1]``) and compgen's paper layout."""
    peer = load_repo_script("examples/compare_peer_unet.py").import_peer(PEER_DIR)
    torch.manual_seed(seed)
    official = peer.ContextUnet(in_channels=3, n_feat=n_feat, n_classes=[2, 3, 1])
    ours = TupleConditionedUNet2DModel(SPACE.to_dict(), block_out_channels=(n_feat, 2 * n_feat), layers_per_block=2,
                                       conditioning="full", continuous_concepts=shapes_continuous_concepts(SPACE),
                                       block_type="paper", norm_type="batch")
    return official, ours


def official_to_compgen(key: str) -> str:
    """The name in compgen's paper layout of an official ``ContextUnet`` weight."""
    rules = [
        (r"^init_conv\.", "conv_in."),
        (r"^down(\d)\.model\.0\.", lambda m: f"down_stages.{int(m[1]) - 1}.blocks.0."),
        (r"^up0\.0\.", "bottleneck_up."),
        (r"^up0\.1\.", "bottleneck_norm."),
        (r"^up(\d)\.model\.0\.", lambda m: f"up_stages.{int(m[1]) - 1}.upsample."),
        (r"^up(\d)\.model\.([13])\.", lambda m: f"up_stages.{int(m[1]) - 1}.blocks.{int(m[2]) // 2}."),
        (r"^out\.(\d)\.", r"conv_out.\1."),
        (r"^timeembed(\d)\.model\.", lambda m: f"time_embedding.{int(m[1]) - 1}."),
        (r"^contextembed(\d)\.(\d)\.model\.", lambda m: f"concept_embedding.embedders.{VARIABLES[int(m[2])]}."
                                                        f"{int(m[1]) - 1}.{'model.' if m[2] == '0' else ''}"),
    ]
    for pattern, replacement in rules:
        renamed, count = re.subn(pattern, replacement, key)
        if count:
            return renamed
    raise AssertionError(f"no rule for the official weight {key}")


def layer_list(model: nn.Module) -> list[tuple[str, tuple[tuple[int, ...], ...]]]:
    """Every module that holds weights, as (type, weight shapes), in a canonical order."""
    return sorted((type(m).__name__, tuple(tuple(p.shape) for p in m.parameters(recurse=False)))
                  for m in model.modules() if any(True for _ in m.parameters(recurse=False)))


def inputs(batch: int = 4):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 3, 28, 28, generator=generator)
    concepts = torch.tensor([[0, 0, 0], [1, 1, 1], [0, 1, 0], [1, 0, 1]])[:batch]
    values = torch.rand(batch, 4, generator=generator)
    timesteps = torch.tensor([3, 100, 250, 499])[:batch]
    return x, concepts, values, timesteps


@pytest.mark.parametrize("n_feat", [32, 256])
def test_same_layers_and_parameter_count_as_the_official_context_unet(n_feat):
    official, ours = models(n_feat)
    assert layer_list(ours) == layer_list(official)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in official.parameters())
    assert sorted(official_to_compgen(k) for k in official.state_dict()) == sorted(ours.state_dict())


def test_with_the_official_weights_the_output_is_the_official_output():
    official, ours = models(32)
    ours.load_state_dict({official_to_compgen(k): v for k, v in official.state_dict().items()})
    x, concepts, values, timesteps = inputs()
    for train in (True, False):  # batch statistics, then running statistics
        official.train(train)
        ours.train(train)
        expected = official(x, [concepts[:, 0], values[:, :3], values[:, 3:]], timesteps.float() / 500)
        torch.testing.assert_close(ours(x, timesteps, concepts, concept_values=values).sample, expected,
                                   rtol=1e-4, atol=1e-5)


def test_flops_per_training_step_within_two_percent():
    from torch.utils.flop_counter import FlopCounterMode

    official, ours = models(64)
    x, concepts, values, timesteps = inputs()

    def flops(loss_fn) -> int:
        with FlopCounterMode(display=False) as counter:
            loss_fn().backward()
        return counter.get_total_flops()

    theirs = flops(lambda: F.mse_loss(official(x, [concepts[:, 0], values[:, :3], values[:, 3:]],
                                               timesteps.float() / 500), x))
    mine = flops(lambda: F.mse_loss(ours(x, timesteps, concepts, concept_values=values).sample, x))
    assert abs(mine / theirs - 1) <= 0.02, (mine, theirs)
