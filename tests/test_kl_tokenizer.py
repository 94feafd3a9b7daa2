"""The KL tokenizer (Paper B's continuous tokenizer, Farid et al. 2025): its builder, its training task, its reports,
the DiT pipeline over it, and ``--tokenizer kl`` through the scripts (the DiT's only: MaskGIT needs code indices)."""

import argparse
import json

import numpy as np
import pytest
import torch
from conftest import reset_accelerate_state
from diffusers import AutoencoderKL, DDPMScheduler, VQModel
from margins import check_margin, margin_seed

from compgen import TupleConditionedDiT, TupleConditionedDiTPipeline, get_split_preset
from compgen.evaluation.probes import ConceptProbes
from compgen.evaluation.tokenizer_report import reconstruct, reconstruction_markdown, reconstruction_report
from compgen.images import uint8_to_signed
from compgen.launch.token_model_setup import reusable_tokenizer, tokenizer_options
from compgen.launch.tokenizer_kind import load_tokenizer, tokenizer_kind
from compgen.models.kl_tokenizer import build_kl_tokenizer, encode_kl_latents
from compgen.models.vq_tokenizer import build_vq_tokenizer, token_grid_size
from compgen.recipes import load_recipe
from compgen.training.tasks.dit import DiTTask
from compgen.training.tasks.kl_tokenizer import KLTask
from compgen.training.tasks.latent_tokenizer import latent_statistics, precompute_latents

pytestmark = pytest.mark.usefixtures("single_thread")

GRAPH = get_split_preset("H32-train1").graph()


def tiny_vae(seed: int = 0) -> AutoencoderKL:
    torch.manual_seed(seed)
    return build_kl_tokenizer(28, block_out_channels=(8, 8, 8), latent_channels=4, norm_num_groups=4)


def square_images(n: int = 16, seed: int = 0) -> torch.Tensor:
    """uint8 ``(n, 28, 28, 3)``: a coloured square on white per image (easy to learn, unlike noise)."""
    generator = torch.Generator().manual_seed(seed)
    images = torch.full((n, 28, 28, 3), 255, dtype=torch.uint8)
    for i in range(n):
        top, left = torch.randint(0, 16, (2,), generator=generator).tolist()
        images[i, top : top + 10, left : left + 10] = torch.randint(0, 256, (3,), generator=generator).to(torch.uint8)
    return images


def test_build_mirrors_the_vq_tokenizer_and_refuses_what_cannot_be_built():
    vae = build_kl_tokenizer()
    assert isinstance(vae, AutoencoderKL) and token_grid_size(vae) == 7
    assert vae.encoder.conv_out.out_channels == 2 * 16  # mean and log-variance (double_z)
    latents = encode_kl_latents(vae.eval(), torch.zeros(2, 3, 28, 28))
    assert latents.shape == (2, 16, 7, 7)
    torch.testing.assert_close(encode_kl_latents(vae, torch.zeros(2, 3, 28, 28)), latents, rtol=0, atol=0)
    assert token_grid_size(build_kl_tokenizer(32)) == 8
    with pytest.raises(ValueError, match="divisible by the downsampling factor 4"):
        build_kl_tokenizer(30)
    with pytest.raises(ValueError, match="must divide by 8"):
        build_kl_tokenizer(block_out_channels=(8, 12, 16))
    with pytest.raises(ValueError, match="latent_channels"):
        build_kl_tokenizer(latent_channels=0)


def test_kl_task_learns_and_its_randomness_is_the_steps_generator():
    task = KLTask(tiny_vae(margin_seed(0)), kl_weight=1e-4, crop_size=16)
    batch = {"images": uint8_to_signed(square_images(seed=margin_seed(0)))}
    loss, scalars = task.compute_loss(task.model, batch, torch.Generator().manual_seed(5), 0)
    again, _ = task.compute_loss(task.model, batch, torch.Generator().manual_seed(5), 0)
    other, _ = task.compute_loss(task.model, batch, torch.Generator().manual_seed(6), 0)
    assert torch.equal(loss, again) and not torch.equal(loss, other)  # crops and posterior noise from the generator
    assert set(scalars) == {"reconstruction_mse", "kl"}
    optimizer = torch.optim.Adam(task.model.parameters(), lr=3e-3)
    losses = []
    for step in range(30):
        loss, _ = task.compute_loss(task.model, batch, torch.Generator().manual_seed(step), step)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    check_margin("KL tokenizer: loss of the last 5 / first 3 of 30 steps", np.mean(losses[-5:]) / np.mean(losses[:3]),
                 below=0.5)
    with pytest.raises(ValueError, match="kl_weight"):
        KLTask(tiny_vae(), kl_weight=-1.0)


def test_save_load_round_trip_and_the_kind_is_read_from_the_config(tmp_path):
    task = KLTask(tiny_vae(), tokenizer_options={"tokenizer": "kl", "kl_weight": 1e-4})
    task.save_pretrained(task.model, tmp_path)
    assert json.loads((tmp_path / "tokenizer_options.json").read_text())["tokenizer"] == "kl"
    assert {p.suffix for p in tmp_path.iterdir()} == {".json", ".safetensors"}
    loaded = load_tokenizer(tmp_path)
    assert isinstance(loaded, AutoencoderKL) and tokenizer_kind(tmp_path) == "kl" and not loaded.training
    images = uint8_to_signed(square_images(4))
    torch.testing.assert_close(encode_kl_latents(loaded, images), encode_kl_latents(task.vae.eval(), images),
                               rtol=0, atol=0)
    assert task.model_card_details()["tags"] == ["autoencoder-kl", "tokenizer"]
    vq_dir = tmp_path / "vq"
    build_vq_tokenizer(block_out_channels=(8, 8, 8), num_vq_embeddings=16, vq_embed_dim=4).save_pretrained(vq_dir)
    assert tokenizer_kind(vq_dir) == "vq" and isinstance(load_tokenizer(vq_dir), VQModel)


def test_tokenizer_options_record_the_kind_so_the_other_kind_is_not_reused(tmp_path):
    args = argparse.Namespace(tokenizer="vq", tokenizer_block_out_channels="8,8,8", codebook_size=16,
                              tokenizer_embed_dim=4,
                              tokenizer_mid_attention=False, tokenizer_commitment_cost=0.25,
                              tokenizer_restart_every=25, tokenizer_crop_size=16,
                              seed=0, dataset="d", dataset_config=None, train_batch_size=8, kl_latent_channels=None,
                              kl_weight=1e-4)
    vq = tokenizer_options(args, 10, 1e-3)
    assert "tokenizer" not in vq  # as before the KL tokenizer: existing VQ tokenizer directories stay reusable
    kl = tokenizer_options(argparse.Namespace(**{**vars(args), "tokenizer": "kl"}), 10, 1e-3)
    assert kl["tokenizer"] == "kl" and kl["kl_latent_channels"] == 4 and kl["kl_weight"] == 1e-4  # the embed dim
    assert "codebook_size" not in kl and kl["tokenizer_block_out_channels"] == "8,8,8"
    KLTask(tiny_vae(), tokenizer_options=kl).save_pretrained(KLTask(tiny_vae()).model, tmp_path)
    assert reusable_tokenizer(tmp_path, kl, overwrite=False)
    with pytest.raises(ValueError, match="--tokenizer 'kl' there vs None now"):
        reusable_tokenizer(tmp_path, vq, overwrite=False)


def test_reconstruction_report_runs_on_a_kl_tokenizer():
    vae = tiny_vae().eval()
    nodes = list(GRAPH.nodes)
    images = np.repeat(square_images(len(nodes)).numpy(), 2, axis=0)
    concepts = np.repeat(np.array(nodes), 2, axis=0)
    reconstructed = reconstruct(vae, images)
    assert reconstructed.shape == images.shape and reconstructed.dtype == np.uint8
    torch.manual_seed(0)
    probes = ConceptProbes(GRAPH.space.to_dict(), image_size=28, probe_type="linear")
    report = reconstruction_report(vae, GRAPH, probes, images, concepts)
    assert report["tokenizer"] == "kl" and report["latent_channels"] == 4 and "codebook_size" not in report
    assert sorted(report["classes"]) == sorted(GRAPH.format(node) for node in nodes)
    assert "Accuracy of KL reconstructions" in reconstruction_markdown(report)


def test_dit_over_a_kl_tokenizer_decodes_without_snapping_and_needs_exactly_one_tokenizer():
    vae = tiny_vae().eval()
    images = square_images(6)
    latents = precompute_latents(vae, images)
    torch.testing.assert_close(latents, encode_kl_latents(vae, uint8_to_signed(images)))  # posterior means
    mean, std = latent_statistics(latents)
    torch.manual_seed(0)
    dit = TupleConditionedDiT(GRAPH.space.to_dict(), latent_channels=4, grid_size=7, hidden_size=16, num_layers=1,
                              num_heads=2, latent_mean=mean, latent_std=std)
    scheduler = DDPMScheduler(num_train_timesteps=50, clip_sample=False)
    task = DiTTask(dit, vae, scheduler, latents)
    pipe = task.pipeline(dit)
    assert pipe.vqvae is None and pipe.vae is vae
    with torch.no_grad():
        decoded = pipe.decode_latents(task.train_latents, output_type="pt")
        expected = pipe.image_processor.postprocess(vae.decode(latents).sample, output_type="pt")
    torch.testing.assert_close(decoded, expected, atol=1e-5, rtol=0)  # the KL decoder, no codebook, any quantize
    torch.testing.assert_close(pipe.decode_latents(task.train_latents, quantize=False), decoded, rtol=0, atol=0)
    details = task.model_card_details()
    assert details["tags"] == ["dit", "latent-diffusion", "kl"] and "KL decoding" in details["hyperparameters"][
        "eval_sampler"]
    with pytest.raises(ValueError, match="exactly one tokenizer"):
        TupleConditionedDiTPipeline(vqvae=None, transformer=dit, scheduler=scheduler)
    vqvae = build_vq_tokenizer(block_out_channels=(8, 8, 8), num_vq_embeddings=16, vq_embed_dim=4)
    with pytest.raises(ValueError, match="exactly one tokenizer"):
        TupleConditionedDiTPipeline(vqvae=vqvae, transformer=dit, scheduler=scheduler, vae=vae)


def test_a_vq_pipeline_saved_before_the_kl_component_still_loads(tmp_path):
    vqvae = build_vq_tokenizer(block_out_channels=(8, 8, 8), num_vq_embeddings=16, vq_embed_dim=4, norm_num_groups=4)
    dit = TupleConditionedDiT(GRAPH.space.to_dict(), latent_channels=4, grid_size=7, hidden_size=16, num_layers=1,
                              num_heads=2)
    TupleConditionedDiTPipeline(vqvae=vqvae, transformer=dit,
                                scheduler=DDPMScheduler(num_train_timesteps=50, clip_sample=False)).save_pretrained(
        tmp_path)
    index = json.loads((tmp_path / "model_index.json").read_text())
    assert index["vqvae"] == ["diffusers", "VQModel"] and index["vae"] == [None, None]
    del index["vae"]  # a pipeline written before the KL tokenizer existed
    (tmp_path / "model_index.json").write_text(json.dumps(index))
    pipe = TupleConditionedDiTPipeline.from_pretrained(tmp_path)
    assert isinstance(pipe.vqvae, VQModel) and pipe.vae is None
    pipe.set_progress_bar_config(disable=True)
    assert pipe("111", num_inference_steps=2, output_type="np").images.shape == (1, 28, 28, 3)


# --- the scripts ------------------------------------------------------------------------------------------------

TINY = ["--train_batch_size", "16", "--hidden_size", "16", "--num_layers", "2", "--num_heads", "2",
        "--tokenizer_block_out_channels", "8,8,8", "--tokenizer_embed_dim", "4", "--tokenizer_steps", "3",
        "--learning_rate", "3e-3",
        "--logging_steps", "2", "--eval_inference_steps", "2", "--seed", "0", "--mixed_precision", "no"]


def test_maskgit_refuses_a_kl_tokenizer(tmp_path, capsys):
    script = load_recipe("maskgit")
    reset_accelerate_state()
    with pytest.raises(SystemExit):
        script.main(["--output_dir", str(tmp_path / "flag"), *TINY, "--tokenizer", "kl"])
    assert "this model predicts codebook indices" in capsys.readouterr().err
    tiny_vae().save_pretrained(tmp_path / "kl")
    reset_accelerate_state()
    with pytest.raises(SystemExit):
        script.main(["--output_dir", str(tmp_path / "path"), *TINY, "--tokenizer_path", str(tmp_path / "kl")])
    assert "holds a AutoencoderKL but --tokenizer is vq" in capsys.readouterr().err


@pytest.mark.usefixtures("fresh_accelerator_state")
def test_train_dit_end_to_end_on_a_kl_tokenizer(dataset_dir, tmp_path, capsys):
    script = load_recipe("tuple-dit")
    output = tmp_path / "dit-kl"
    torch.manual_seed(0)  # untrained probes: the evaluation and the tokenizer report run, their accuracy is moot
    ConceptProbes(GRAPH.space.to_dict(), image_size=28, probe_type="linear").save_pretrained(tmp_path / "probes")
    script.main(["--dataset", str(dataset_dir), "--output_dir", str(output), *TINY, "--tokenizer", "kl",
                 "--max_train_steps", "2", "--eval_steps", "2", "--eval_images_per_class", "2",
                 "--probes_path", str(tmp_path / "probes")])
    report = json.loads((output / "vq_reconstruction.json").read_text())
    assert report["tokenizer"] == "kl" and len(report["classes"]) == 8
    records = [json.loads(line) for line in (output / "learning_dynamics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [2]
    options = json.loads((output / "tokenizer" / "tokenizer_options.json").read_text())
    assert options["tokenizer"] == "kl" and options["kl_latent_channels"] == 4
    assert isinstance(load_tokenizer(output / "tokenizer"), AutoencoderKL)
    index = json.loads((output / "model_index.json").read_text())
    assert index["vae"] == ["diffusers", "AutoencoderKL"] and index["vqvae"] == [None, None]
    pipe = TupleConditionedDiTPipeline.from_pretrained(output)
    pipe.set_progress_bar_config(disable=True)
    assert pipe("111", num_inference_steps=2, output_type="np").images.shape == (1, 28, 28, 3)
    assert "- kl" in (output / "README.md").read_text()
    # A rerun asking for the VQ tokenizer must not reuse the KL one.
    reset_accelerate_state()
    with pytest.raises(SystemExit):
        script.main(["--dataset", str(dataset_dir), "--output_dir", str(output), *TINY, "--max_train_steps", "2",
                     "--resume_from_checkpoint", "latest"])
    err = capsys.readouterr().err  # refused before any work: the run's options (or its tokenizer's) changed
    assert "--tokenizer 'kl' there vs 'vq' now" in err or "--tokenizer 'kl' there vs None now" in err, err[-1000:]
