"""MaskGITScheduler: schedules, training masks, mask counts per decoding step, determinism."""

import math

import pytest
import torch

from compgen import MaskGITScheduler

L, K = 49, 16


def decode(scheduler, steps, seed, logits_seed=0, temperature=(2.0, 0.0)):
    """Run the full decoding loop with fixed random logits; returns the tokens and the masked count after each step."""
    logits = torch.randn(3, L, K, generator=torch.Generator().manual_seed(logits_seed))
    tokens = torch.full((3, L), scheduler.config.mask_token_id)
    scheduler.set_timesteps(steps, temperature=temperature)
    generator = torch.Generator().manual_seed(seed)
    counts = []
    for t in scheduler.timesteps:
        tokens = scheduler.step(logits, t, tokens, generator=generator).prev_sample
        counts.append((tokens == scheduler.config.mask_token_id).sum(dim=1).tolist())
    return tokens, counts


@pytest.mark.parametrize("schedule", ["cosine", "linear", "square", "arccos"])
def test_schedules_go_from_all_masked_to_none_and_decrease(schedule):
    scheduler = MaskGITScheduler(mask_token_id=K, masking_schedule=schedule)
    ratios = scheduler.mask_ratio(torch.linspace(0, 1, 101))
    assert ratios[0] == pytest.approx(1.0) and ratios[-1] == pytest.approx(0.0, abs=1e-7)
    assert (ratios[1:] <= ratios[:-1] + 1e-12).all()


@pytest.mark.parametrize("schedule", ["cosine", "linear", "square", "arccos"])
def test_mask_counts_per_step_follow_the_schedule_and_end_unmasked(schedule):
    scheduler = MaskGITScheduler(mask_token_id=K, masking_schedule=schedule)
    steps = 8
    tokens, counts = decode(scheduler, steps, seed=0)
    expected, before = [], L
    gamma = {"cosine": lambda r: math.cos(r * math.pi / 2), "linear": lambda r: 1 - r,
             "square": lambda r: 1 - r**2, "arccos": lambda r: math.acos(r) / (math.pi / 2)}[schedule]
    for i in range(steps):
        n = 0 if i == steps - 1 else max(1, min(before - 1, math.floor(L * gamma((i + 1) / steps))))
        expected.append(n)
        before = n
    assert counts == [[n] * 3 for n in expected]
    assert (tokens < K).all() and (tokens >= 0).all()


def test_known_tokens_are_never_changed():
    scheduler = MaskGITScheduler(mask_token_id=K)
    scheduler.set_timesteps(4)
    sample = torch.full((2, L), K)
    sample[:, :10] = 3
    out = scheduler.step(torch.randn(2, L, K), scheduler.timesteps[0], sample,
                         generator=torch.Generator().manual_seed(0))
    assert (out.prev_sample[:, :10] == 3).all() and (out.pred_original_sample[:, :10] == 3).all()


def test_same_generator_gives_the_same_tokens_and_another_differs():
    scheduler = MaskGITScheduler(mask_token_id=K)
    first, _ = decode(scheduler, 6, seed=1)
    again, _ = decode(scheduler, 6, seed=1)
    other, _ = decode(scheduler, 6, seed=2)
    assert torch.equal(first, again)
    assert not torch.equal(first, other)


@pytest.mark.parametrize("mask_type", ["random", "block"])
def test_training_masks_have_the_scheduled_count_and_are_reproducible(mask_type):
    scheduler = MaskGITScheduler(mask_token_id=K)
    mask = scheduler.sample_mask(256, (7, 7), torch.Generator().manual_seed(0), mask_type)
    again = scheduler.sample_mask(256, (7, 7), torch.Generator().manual_seed(0), mask_type)
    assert mask.shape == (256, L) and mask.dtype == torch.bool and torch.equal(mask, again)
    progress = torch.rand(256, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    expected = torch.ceil(scheduler.mask_ratio(progress) * L).long().clamp(1, L)
    assert torch.equal(mask.sum(dim=1), expected)
    # gamma(r ~ U(0,1)) for cosine has mean 2 / pi.
    assert mask.float().mean().item() == pytest.approx(2 / math.pi, abs=0.06)


def test_block_masks_are_contiguous_rectangles_more_than_random_ones():
    scheduler = MaskGITScheduler(mask_token_id=K)

    def neighbour_agreement(mask):
        grid = mask.view(-1, 7, 7).float()
        return ((grid[:, 1:] == grid[:, :-1]).float().mean() + (grid[:, :, 1:] == grid[:, :, :-1]).float().mean()) / 2

    block = scheduler.sample_mask(512, (7, 7), torch.Generator().manual_seed(0), "block")
    random = scheduler.sample_mask(512, (7, 7), torch.Generator().manual_seed(0), "random")
    assert neighbour_agreement(block) > neighbour_agreement(random) + 0.15


def test_invalid_configuration_and_calls_raise():
    with pytest.raises(ValueError, match="masking_schedule"):
        MaskGITScheduler(mask_token_id=K, masking_schedule="exp")
    scheduler = MaskGITScheduler(mask_token_id=K)
    with pytest.raises(ValueError, match="set_timesteps"):
        scheduler.step(torch.randn(1, L, K), 0, torch.full((1, L), K))
    with pytest.raises(ValueError, match="mask_type"):
        scheduler.sample_mask(2, (7, 7), mask_type="stripes")
    scheduler.set_timesteps(4)
    with pytest.raises(ValueError, match="logits"):
        scheduler.step(torch.randn(1, K, 7, 7), 3, torch.full((1, L), K))


def test_config_round_trip(tmp_path):
    scheduler = MaskGITScheduler(mask_token_id=K, masking_schedule="arccos")
    scheduler.save_pretrained(tmp_path)
    loaded = MaskGITScheduler.from_pretrained(tmp_path)
    assert loaded.config.mask_token_id == K and loaded.config.masking_schedule == "arccos"


def test_visible_block_masks_leave_one_contiguous_block_of_15_to_40_percent_visible():
    """Paper B's JEPA context: one small visible block, every other token masked (for both objectives)."""
    from compgen.schedulers.scheduling_maskgit import VISIBLE_BLOCK_FRACTION

    scheduler = MaskGITScheduler(mask_token_id=K)
    mask = scheduler.sample_mask(512, (7, 7), torch.Generator().manual_seed(0), "visible_block")
    again = scheduler.sample_mask(512, (7, 7), torch.Generator().manual_seed(0), "visible_block")
    assert mask.shape == (512, L) and mask.dtype == torch.bool and torch.equal(mask, again)
    visible = (~mask).sum(dim=1).float() / L
    low, high = VISIBLE_BLOCK_FRACTION
    assert visible.min() >= low - 1 / L and visible.max() <= high + 1 / L
    assert visible.mean().item() == pytest.approx((low + high) / 2, abs=0.03)
    # the visible tokens are the complement of a "block" mask: one connected region, not scattered positions
    for row in (~mask).view(-1, 7, 7)[:64]:
        cells = {(int(i), int(j)) for i, j in row.nonzero()}
        seen, stack = set(), [next(iter(cells))]
        while stack:
            i, j = stack.pop()
            if (i, j) in seen:
                continue
            seen.add((i, j))
            stack += [n for n in ((i + 1, j), (i - 1, j), (i, j + 1), (i, j - 1)) if n in cells]
        assert seen == cells


def test_clip_block_masks_span_time_as_space_time_boxes():
    """A clip's grid ``(T, H, W)``: the scheduled count over all ``T * H * W`` tokens, and a block is a box in space
    and time (contiguous across frames as within them), unlike random masks."""
    scheduler = MaskGITScheduler(mask_token_id=K)
    shape = (4, 7, 7)
    block = scheduler.sample_mask(256, shape, torch.Generator().manual_seed(0), "block")
    random = scheduler.sample_mask(256, shape, torch.Generator().manual_seed(0), "random")
    progress = torch.rand(256, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    expected = torch.ceil(scheduler.mask_ratio(progress) * 4 * L).long().clamp(1, 4 * L)
    assert block.shape == (256, 4 * L) and torch.equal(block.sum(dim=1), expected)

    def agreement_over_time(mask):
        clips = mask.view(-1, *shape).float()
        return (clips[:, 1:] == clips[:, :-1]).float().mean()

    assert agreement_over_time(block) > agreement_over_time(random) + 0.15
    frames_touched = block.view(-1, *shape).any(dim=(2, 3)).sum(dim=1)
    assert (frames_touched > 1).float().mean() > 0.5  # most boxes span several frames
    with pytest.raises(ValueError, match="grid_size"):
        scheduler.sample_mask(2, (2, 4, 7, 7))
