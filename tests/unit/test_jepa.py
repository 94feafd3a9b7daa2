"""JEPA objective: layer scaling, gradients reach the online model and predictor but never the target, EMA math."""

import pytest
import torch

from compgen import MaskGITScheduler, MaskGITTransformer, shapes_space
from compgen.models.jepa import JEPAPredictor, jepa_loss, parse_jepa_layers, scale_jepa_layers
from compgen.training.ema import ExponentialMovingAverage, MomentumSchedule


def test_layer_scaling_rule():
    assert scale_jepa_layers(12) == (7, 9, 11)
    assert scale_jepa_layers(7) == (4, 5, 6)
    assert scale_jepa_layers(4) == (2, 3, 4)
    assert scale_jepa_layers(1) == (1,)
    assert parse_jepa_layers("auto", 12) == (7, 9, 11)
    assert parse_jepa_layers("3,1", 4) == (1, 3)
    with pytest.raises(ValueError, match="1..4"):
        parse_jepa_layers("5", 4)


def make_setup(seed=0):
    torch.manual_seed(seed)
    online = MaskGITTransformer(shapes_space().to_dict(), codebook_size=16, grid_size=4, hidden_size=32,
                                num_layers=4, num_heads=4)
    target = ExponentialMovingAverage(online, MomentumSchedule(0.9, 1.0, "linear", total_steps=10))
    predictor = JEPAPredictor(32, (2, 3))
    torch.nn.init.normal_(predictor.heads["2"][-1].weight, std=0.1)  # leave the zero init so gradients flow
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 16, (6, 16), generator=generator)
    concepts = torch.randint(0, 2, (6, 3), generator=generator)
    mask = MaskGITScheduler(16).sample_mask(6, (4, 4), generator)
    return online, target, predictor, tokens, concepts, mask


def test_gradients_reach_online_model_and_predictor_but_not_the_target():
    online, target, predictor, tokens, concepts, mask = make_setup()
    context = online(torch.where(mask, 16, tokens), concepts, output_hidden_states=True).hidden_states
    with torch.no_grad():
        target_hidden = target.shadow(tokens, concepts, output_hidden_states=True).hidden_states
    loss = jepa_loss(predictor(context), target_hidden, mask)
    assert loss.item() > 0
    loss.backward()
    assert all(p.grad is None for p in target.shadow.parameters())
    assert all(not p.requires_grad for p in target.shadow.parameters())
    assert predictor.heads["2"][-1].weight.grad.abs().sum() > 0
    assert predictor.heads["3"][-1].weight.grad.abs().sum() > 0
    assert online.blocks[0].ff.net[0].proj.weight.grad.abs().sum() > 0
    # Blocks above the deepest JEPA layer get no JEPA gradient.
    top = online.blocks[3].ff.net[0].proj.weight.grad
    assert top is None or top.abs().sum() == 0


def test_loss_is_detached_from_targets_even_if_they_require_grad():
    online, _, predictor, tokens, concepts, mask = make_setup()
    hidden = online(tokens, concepts, output_hidden_states=True).hidden_states
    targets = [h.detach().clone().requires_grad_(True) for h in hidden]
    jepa_loss(predictor(hidden), targets, mask).backward()
    assert all(t.grad is None for t in targets)


def test_loss_only_counts_masked_positions():
    _, _, predictor, tokens, concepts, mask = make_setup()
    hidden = [torch.randn(6, 16, 32) for _ in range(5)]
    changed = [h.clone() for h in hidden]
    for h in changed:
        h[~mask] += 100.0
    predictions = predictor(hidden)
    assert jepa_loss(predictions, hidden, mask).item() == pytest.approx(jepa_loss(predictions, changed, mask).item())
    # The masked mean equals the MSE over exactly the masked positions (and nothing masked gives 0, not NaN).
    layer = predictor.layers[0]
    target = torch.nn.functional.layer_norm(hidden[layer], (32,))
    expected = torch.nn.functional.mse_loss(predictions[layer][mask], target[mask])
    single = {layer: predictions[layer]}
    torch.testing.assert_close(jepa_loss(single, hidden, mask), expected)
    assert jepa_loss(predictions, hidden, torch.zeros_like(mask)).item() == 0.0


def test_ema_update_math_and_schedule():
    online, target, *_ = make_setup()
    before = [p.clone() for p in target.shadow.parameters()]
    with torch.no_grad():
        for p in online.parameters():
            p.add_(1.0)
    momentum = target.update(online, step=5)
    assert momentum == pytest.approx(0.95)
    for old, new, current in zip(before, target.shadow.parameters(), online.parameters(), strict=True):
        torch.testing.assert_close(new, 0.95 * old + 0.05 * current)
    assert target.update(online, step=10) == pytest.approx(1.0)


def test_target_hidden_states_stop_at_the_deepest_layer_with_the_same_values():
    """The target encoder computes only the blocks up to the deepest JEPA layer, without the output head: its hidden
    states are those of the full forward."""
    online, target, predictor, tokens, concepts, mask = make_setup()
    with torch.no_grad():
        full = target.shadow(tokens, concepts, output_hidden_states=True).hidden_states
        truncated = target.shadow.hidden_states(tokens, concepts, num_layers=3)
    assert len(full) == 5 and len(truncated) == 4
    for a, b in zip(truncated, full, strict=False):
        torch.testing.assert_close(a, b)
    context = online(torch.where(mask, 16, tokens), concepts, output_hidden_states=True).hidden_states
    predictions = predictor(context)
    torch.testing.assert_close(jepa_loss(predictions, truncated, mask), jepa_loss(predictions, full, mask))
    # The loss over several layers is the mean of the single-layer losses.
    per_layer = [jepa_loss({layer: predictions[layer]}, full, mask) for layer in predictor.layers]
    torch.testing.assert_close(jepa_loss(predictions, full, mask), torch.stack(per_layer).mean())


def tiny_jepa_task(**options):
    """A MaskGIT + JEPA task on a 2-layer transformer, JEPA on both layers, its predictor's last layer nonzero."""
    from compgen.models.vq_tokenizer import build_vq_tokenizer
    from compgen.training.tasks.maskgit import MaskGITTask

    torch.manual_seed(0)
    transformer = MaskGITTransformer(shapes_space().to_dict(), codebook_size=16, grid_size=7, hidden_size=32,
                                     num_layers=2, num_heads=4)
    vqvae = build_vq_tokenizer(28, block_out_channels=(8, 8, 8), num_vq_embeddings=16, vq_embed_dim=4,
                               norm_num_groups=4)
    tokens = torch.randint(0, 16, (12, 49), generator=torch.Generator().manual_seed(1))
    task = MaskGITTask(transformer, vqvae, MaskGITScheduler(16), tokens, jepa_layers=(1, 2), total_steps=10,
                       **options)
    torch.nn.init.normal_(task.model.predictor.heads["2"][-1].weight, std=0.1)
    return task


def test_gradient_norms_of_both_objectives_leave_the_training_step_alone():
    """The diagnostic's gradient norms are those of separate backward passes, and measuring them changes no gradient
    of the step (the run's trajectory is the one without the diagnostic)."""
    task = tiny_jepa_task()
    batch = {"index": torch.arange(6), "concepts": torch.randint(0, 2, (6, 3)),
             "values": torch.zeros(6, 0)}

    def step(logging_steps):
        task.model.zero_grad(set_to_none=True)
        task.logging_steps = logging_steps
        loss, scalars = task.compute_loss(task.model, batch, torch.Generator().manual_seed(2), step=4)
        loss.backward()
        return scalars, {n: p.grad.clone() for n, p in task.model.named_parameters() if p.grad is not None}

    plain, grads_plain = step(logging_steps=100)  # step 4 is not the last of an interval: no diagnostic
    measured, grads_measured = step(logging_steps=5)
    assert "grad_norm_ratio" not in plain and "jepa_target_spread_1" not in plain
    assert grads_plain.keys() == grads_measured.keys()
    for name in grads_plain:
        torch.testing.assert_close(grads_measured[name], grads_plain[name], rtol=0, atol=0)

    # By hand: the blocks' gradient of the whole loss (above) minus that of the cross-entropy alone (lambda set to 0
    # for one step; the JEPA term needs the target, which stays) is lambda times the JEPA loss's.
    def block_gradient(grads):
        return torch.cat([grads[n].flatten() for n, _ in task.model.named_parameters() if n.startswith(
            "transformer.blocks.") and n in grads])

    weight, task.jepa_weight = task.jepa_weight, 0.0
    _, grads_ce = step(logging_steps=100)
    task.jepa_weight = weight
    ce_gradient = block_gradient(grads_ce)
    jepa_gradient = block_gradient(grads_plain) - ce_gradient
    assert float(measured["grad_norm_ce"]) == pytest.approx(float(ce_gradient.norm()), rel=1e-4)
    assert float(measured["grad_norm_jepa"]) == pytest.approx(float(jepa_gradient.norm()), rel=1e-3)
    assert float(measured["grad_norm_ratio"]) == pytest.approx(float(jepa_gradient.norm() / ce_gradient.norm()),
                                                               rel=1e-3)


def test_cross_entropy_warmup_lets_the_jepa_term_lead():
    """With ``cross_entropy_warmup_steps`` the loss at step 0 is the JEPA term alone, at the half-way step half the
    cross-entropy plus it, and after the warm-up the usual sum; options that cannot work are refused."""
    from compgen.training.tasks.maskgit import check_cross_entropy_warmup

    task = tiny_jepa_task(cross_entropy_warmup_steps=4)
    batch = {"index": torch.arange(6), "concepts": torch.randint(0, 2, (6, 3)), "values": torch.zeros(6, 0)}
    for step, weight in ((0, 0.0), (2, 0.5), (4, 1.0), (9, 1.0)):
        loss, scalars = task.compute_loss(task.model, batch, torch.Generator().manual_seed(2), step=step)
        expected = weight * scalars["ce"] + task.jepa_weight * scalars["jepa"]
        assert float(scalars["ce_weight"]) == weight
        torch.testing.assert_close(loss.detach(), expected)
    with pytest.raises(ValueError, match="needs a JEPA term"):
        check_cross_entropy_warmup(5, 0.0, 100)
    with pytest.raises(ValueError, match="longer than the run"):
        check_cross_entropy_warmup(200, 0.6, 100)
    with pytest.raises(ValueError, match="integer >= 0"):
        check_cross_entropy_warmup(-1, 0.6, 100)


def test_cross_entropy_delay_trains_the_jepa_term_alone_first():
    """With ``cross_entropy_delay_steps`` the cross-entropy's weight is exactly 0 for those steps (the loss is the JEPA
    term alone and the output head gets no gradient), then the ramp starts; a delay that cannot work is refused."""
    from compgen.training.tasks.maskgit import check_cross_entropy_warmup

    task = tiny_jepa_task(cross_entropy_delay_steps=3, cross_entropy_warmup_steps=2)
    batch = {"index": torch.arange(6), "concepts": torch.randint(0, 2, (6, 3)), "values": torch.zeros(6, 0)}
    for step, weight in ((0, 0.0), (2, 0.0), (3, 0.0), (4, 0.5), (5, 1.0), (9, 1.0)):
        loss, scalars = task.compute_loss(task.model, batch, torch.Generator().manual_seed(2), step=step)
        assert float(scalars["ce_weight"]) == weight
        torch.testing.assert_close(loss.detach(), weight * scalars["ce"] + task.jepa_weight * scalars["jepa"])
    task.model.zero_grad()
    loss, _ = task.compute_loss(task.model, batch, torch.Generator().manual_seed(2), step=1)
    loss.backward()
    assert all(p.grad is None or not p.grad.any() for p in task.model.transformer.head.parameters())
    assert any(p.grad is not None and p.grad.any() for p in task.model.transformer.blocks.parameters())
    with pytest.raises(ValueError, match="needs a JEPA term"):
        check_cross_entropy_warmup(0, 0.0, 100, delay_steps=5)
    with pytest.raises(ValueError, match=r"\(90 \+ 20\) is longer than the run"):
        check_cross_entropy_warmup(20, 0.6, 100, delay_steps=90)
    with pytest.raises(ValueError, match="cross_entropy_delay_steps must be an integer"):
        check_cross_entropy_warmup(0, 0.6, 100, delay_steps=2.5)


def test_an_independent_target_starts_apart_from_the_online_model_and_leaves_it_as_it_was():
    """``jepa_target_init="independent"`` (the JEPA script of a Paper B author's fork): the target encoder's initial
    weights are not the online model's, while the online model and the predictor start exactly as with a copy."""
    copied, independent = tiny_jepa_task(), tiny_jepa_task(jepa_target_init="independent")
    online = dict(copied.model.named_parameters())
    for name, parameter in independent.model.named_parameters():
        torch.testing.assert_close(parameter, online[name], rtol=0, atol=0)
    copy_target = dict(copied.target.shadow.named_parameters())
    assert all(torch.equal(p, online[f"transformer.{n}"]) for n, p in copy_target.items())
    assert not torch.equal(independent.target.shadow.blocks[0].attn.to_q.weight,
                           online["transformer.blocks.0.attn.to_q.weight"])
    def settings(model):
        return {k: v for k, v in model.config.items() if not k.startswith("_")}

    assert settings(independent.target.shadow) == settings(copied.target.shadow)


def test_the_jepa_loss_over_all_positions_counts_the_visible_ones_too():
    """``jepa_loss_positions="all"``: the JEPA term is the mean over every position, of which the masked mean is a
    part; refused values are named."""
    from compgen.training.tasks.maskgit import MaskGITTask

    batch = {"index": torch.arange(6), "concepts": torch.randint(0, 2, (6, 3)), "values": torch.zeros(6, 0)}
    losses = {}
    for positions in ("masked", "all"):
        task = tiny_jepa_task(jepa_loss_positions=positions)
        with torch.no_grad():  # a target apart from the online model, so visible positions have a loss of their own
            for parameter in task.target.shadow.parameters():
                parameter.add_(0.05 * torch.randn_like(parameter))
        _, scalars = task.compute_loss(task.model, batch, torch.Generator().manual_seed(2), step=0)
        losses[positions] = float(scalars["jepa"])
    assert losses["all"] != pytest.approx(losses["masked"], rel=1e-3)
    for values, message in (({"jepa_loss_positions": "visible"}, "jepa_loss_positions must be one of"),
                            ({"jepa_target_init": "random"}, "jepa_target_init must be one of"),
                            ({"jepa_momentum": 1.5}, r"jepa_momentum must be in \[0, 1\]"),
                            ({"jepa_momentum_end": float("nan")}, r"jepa_momentum_end must be in \[0, 1\]"),
                            ({"jepa_predictor_hidden_size": -1}, "jepa_predictor_hidden_size must be at least 1")):
        with pytest.raises(ValueError, match=message):
            MaskGITTask.Options(**values)
