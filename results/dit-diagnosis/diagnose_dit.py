"""Record of a one-off diagnosis: short, single-threaded DiT training probes over a trained tokenizer's latents.

Not maintained and not tested. This is the script behind the checks in ``NOTES.md``, kept as the record of how their
numbers were made: it ran on 2026-11-26 on a 2-core AMD EPYC CPU (torch 2.13.0+cpu) against compgen at commit c51c22e,
the commit that added it with its outputs in ``runs/``. Later revisions of compgen may not run it, and nothing checks
that they do. It is a stand-alone loop, not the library's: compgen trains through
``compgen.training.trainer.Trainer`` (``examples/train_dit.py`` for the DiT), and a new experiment belongs there, not
here.

    OMP_NUM_THREADS=1 PYTHONPATH=src python results/dit-diagnosis/diagnose_dit.py --vqvae_path TOKENIZER \
        --steps 400 --position_std 0.02 --out /tmp/dit-diag/baseline.json

Trains a ``TupleConditionedDiT`` with the cpu-quick recipe (Adam, constant lr after warm-up, EMA with the trainer's
warm-up schedule, v-prediction on the standardized latents, T=500 linear betas), as ``DDPMTask.compute_loss`` does,
then reports: the EMA model's validation loss per timestep bin (fixed noise) and the accuracy of its samples (DDIM,
20 steps) by both scorers (linear probes and the pixel scorer). ``--classes`` and ``--num_images`` restrict the
training data (the overfit check).
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from compgen.training.script import load_probes

from compgen import TupleConditionedDiT
from compgen.data.loading import load_concept_dataset, training_data_from
from compgen.evaluation.tracker import LearningDynamicsTracker
from compgen.models.vq_tokenizer import token_grid_size
from compgen.pipelines.tuple_ddpm import paper_ddpm_scheduler
from compgen.training.dit_task import DiTTask, latent_statistics, precompute_latents
from compgen.training.ema import ExponentialMovingAverage, MomentumSchedule


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--vqvae_path", required=True)
    parser.add_argument("--dataset", default="okawa-h32-train1")
    parser.add_argument("--cache_dir", default=None)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--eval_every", type=int, default=0, help="0: only at the end")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--ema", type=float, default=0.995)
    parser.add_argument("--hidden_size", type=int, default=128)
    parser.add_argument("--num_layers", type=int, default=4)
    parser.add_argument("--num_heads", type=int, default=4)
    parser.add_argument("--conditioning", default="full")
    parser.add_argument("--timesteps", type=int, default=500)
    parser.add_argument("--prediction_type", default="v_prediction")
    parser.add_argument("--position_std", type=float, default=None,
                        help="re-initialise the position embedding with this std (None: the model's own init)")
    parser.add_argument("--bf16", action="store_true", help="CPU bf16 autocast (what mixed_precision=auto picks)")
    parser.add_argument("--classes", default=None, help="comma-separated training classes to keep, e.g. 000")
    parser.add_argument("--num_images", type=int, default=0, help="keep this many training images (0: all)")
    parser.add_argument("--eval_images_per_class", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    from diffusers import VQModel

    torch.manual_seed(args.seed)
    dataset = load_concept_dataset(args.dataset, cache_dir=args.cache_dir)
    data, graph = training_data_from(dataset)
    probes = load_probes(None, data, 0)
    keep = torch.ones(len(data), dtype=torch.bool)
    if args.classes:
        wanted = set(args.classes.split(","))
        keep = torch.tensor(["".join(map(str, row)) in wanted for row in data.concepts.tolist()])
    index = keep.nonzero().flatten()
    if args.num_images:
        index = index[: args.num_images]
    images, concepts = data.images[index], data.concepts[index]
    values = data.concept_values[index] if data.concept_values is not None else None

    vqvae = VQModel.from_pretrained(args.vqvae_path).eval()
    latents = precompute_latents(vqvae, images)
    mean, std = latent_statistics(latents)
    from compgen.shapes import shapes_continuous_concepts

    model = TupleConditionedDiT(
        concept_space=data.space.to_dict(), latent_channels=latents.shape[1], grid_size=token_grid_size(vqvae),
        hidden_size=args.hidden_size, num_layers=args.num_layers, num_heads=args.num_heads,
        conditioning=args.conditioning,
        continuous_concepts=shapes_continuous_concepts(data.space) if args.conditioning == "full" else {},
        latent_mean=mean, latent_std=std,
    )
    if args.position_std is not None:
        torch.nn.init.trunc_normal_(model.position_embedding, std=args.position_std,
                                    a=-2 * args.position_std, b=2 * args.position_std)
    scheduler = paper_ddpm_scheduler(args.timesteps, args.prediction_type, clip_sample=False)
    task = DiTTask(model, vqvae, scheduler, latents, eval_inference_steps=20)
    ema = ExponentialMovingAverage(model, MomentumSchedule(args.ema, kind="warmup"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-2)
    lr_at = lambda step: min(1.0, (step + 1) / max(args.warmup, 1))  # noqa: E731  constant_with_warmup
    sched = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_at)
    generator = torch.Generator().manual_seed(args.seed)

    # Fixed validation batch: 256 training latents, fixed noise, 10 timestep bins.
    val_gen = torch.Generator().manual_seed(123)
    val_idx = torch.randint(0, len(index), (256,), generator=val_gen)
    val_noise = torch.randn((256,) + tuple(latents.shape[1:]), generator=val_gen)

    def validation_loss(net) -> dict[str, float]:
        out = {}
        clean = task.train_latents[val_idx]
        for b in range(10):
            t = torch.full((256,), int((b + 0.5) * args.timesteps / 10))
            a = task.sqrt_alphas_cumprod[t].view(-1, 1, 1, 1)
            s = task.sqrt_one_minus_alphas_cumprod[t].view(-1, 1, 1, 1)
            noisy = a * clean + s * val_noise
            target = {"epsilon": val_noise, "v_prediction": a * val_noise - s * clean, "sample": clean}[
                args.prediction_type]
            with torch.no_grad():
                pred = net(noisy, t, concepts[val_idx], concept_values=None).sample
            out[f"t{int(t[0])}"] = round(float(torch.nn.functional.mse_loss(pred, target)), 4)
        return out

    tracker = LearningDynamicsTracker(graph, probes, num_images_per_class=args.eval_images_per_class, seed=0)
    history = []

    def evaluate(step: int, losses: list[float]) -> None:
        record = tracker.evaluate(lambda cs, seed: task.generate(ema.shadow, cs, seed), step=step)
        entry = {"step": step, "train_loss_last50": round(sum(losses[-50:]) / max(len(losses[-50:]), 1), 4),
                 "val_loss_by_t": validation_loss(ema.shadow),
                 "level_accuracy": record.get("level_accuracy"),
                 "pixel_level_accuracy": record.get("pixel_level_accuracy"),
                 "accuracy": record.get("accuracy"),
                 "pixel_accuracy": record.get("pixel_accuracy"),
                 "elapsed_s": round(time.perf_counter() - start, 1)}
        history.append(entry)
        print(json.dumps(entry), flush=True)

    start = time.perf_counter()
    losses: list[float] = []
    model.train()
    for step in range(1, args.steps + 1):
        batch_idx = torch.randint(0, len(index), (args.batch_size,), generator=generator)
        batch = {"index": batch_idx, "concepts": concepts[batch_idx]}
        if values is not None and args.conditioning == "full":
            batch["concept_values"] = values[batch_idx]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            loss, _ = task.compute_loss(model, batch, generator, step)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        sched.step()
        ema.update(model, step)
        losses.append(float(loss.detach()))
        if step % 50 == 0:
            print(f"step {step} loss {sum(losses[-50:]) / 50:.4f} {time.perf_counter() - start:.0f}s", flush=True)
        if (args.eval_every and step % args.eval_every == 0) or step == args.steps:
            evaluate(step, losses)
    result = {"args": vars(args), "num_train_images": len(index), "latent_shape": list(latents.shape[1:]),
              "position_embedding_rms": round(float(ema.shadow.position_embedding.pow(2).mean().sqrt()), 4),
              "history": history}
    with open(args.out, "w") as handle:
        json.dump(result, handle, indent=1)


if __name__ == "__main__":
    main()
