"""Resumes under bad options, refused before any work: a changed training option (named, with the checkpoints left
intact and how to go on) and a --max_train_steps below the run's last checkpoint (which would re-export the later
weights under a card of fewer steps)."""

import pytest
from conftest import reset_accelerate_state

import compgen.launch.run_setup as script_module
from compgen.recipes import load_recipe

pytestmark = pytest.mark.usefixtures("single_thread")
TINY = ["--block_out_channels", "8,16", "--layers_per_block", "1", "--train_batch_size", "8", "--eval_steps", "2",
        "--eval_images_per_class", "2", "--eval_inference_steps", "2", "--checkpointing_steps", "2",
        "--mixed_precision", "no"]


@pytest.fixture(scope="module")
def finished_run(dataset_dir):
    """A finished 4-step run (checkpoints at 2 and 4) in ``dataset_dir``'s folder, on that tiny H32-train1 split."""
    root = dataset_dir
    reset_accelerate_state()
    load_recipe("tuple-unet").main(
        [*TINY, "--dataset", str(root), "--max_train_steps", "4", "--output_dir", str(root / "run")])
    return root


def _resume(root, monkeypatch, *argv):
    def no_data(*args, **kwargs):
        raise AssertionError("the dataset was loaded before the resume was checked")

    monkeypatch.setattr(script_module, "_load_dataset", no_data)
    reset_accelerate_state()
    load_recipe("tuple-unet").main(
        [*TINY, "--dataset", str(root), "--output_dir", str(root / "run"), "--resume_from_checkpoint", "latest", *argv])


def test_a_resume_with_a_changed_option_is_refused_before_any_work(finished_run, monkeypatch, capsys):
    card = (finished_run / "run" / "README.md").read_text()
    with pytest.raises(SystemExit) as exit_info:
        _resume(finished_run, monkeypatch, "--max_train_steps", "6", "--seed", "1")
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "seed" in err and "checkpoints are intact" in err
    assert "remove" not in err
    assert (finished_run / "run" / "README.md").read_text() == card


def test_a_resume_below_the_last_checkpoint_is_refused_and_the_export_kept(finished_run, monkeypatch, capsys):
    run = finished_run / "run"
    card, weights = (run / "README.md").read_text(), (run / "unet" / "diffusion_pytorch_model.safetensors").read_bytes()
    with pytest.raises(SystemExit) as exit_info:
        _resume(finished_run, monkeypatch, "--max_train_steps", "2")
    assert exit_info.value.code == 2 and "past --max_train_steps 2" in capsys.readouterr().err
    assert (run / "README.md").read_text() == card
    assert (run / "unet" / "diffusion_pytorch_model.safetensors").read_bytes() == weights


def test_a_full_disk_during_a_checkpoint_leaves_no_half_written_folder(tmp_path):
    """The write fails (ENOSPC): the temporary folder goes, the earlier checkpoints stay, and the error says so."""
    import errno

    from compgen.training.checkpoint import CheckpointError
    from compgen.training.run_directory import RunDirectory

    run = RunDirectory(tmp_path)
    run.write_checkpoint(2, lambda folder: (folder / "model.safetensors").write_bytes(b"x"), "run", None)

    def disk_full(folder):
        (folder / "model.safetensors").write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(CheckpointError, match="No space left on device.*intact \\(checkpoint-2\\)"):
        run.write_checkpoint(4, disk_full, "run", None)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["checkpoint-2"]

    def safetensors_disk_full(folder):  # what safetensors raises on a truly full file system: not an OSError
        from safetensors import SafetensorError

        (folder / "model.safetensors").write_bytes(b"partial")
        raise SafetensorError("Error while serializing: IoError(Os { code: 28, kind: StorageFull })")

    with pytest.raises(CheckpointError, match="StorageFull.*intact \\(checkpoint-2\\)"):
        run.write_checkpoint(6, safetensors_disk_full, "run", None)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["checkpoint-2"]


def test_a_full_disk_during_the_export_leaves_the_earlier_export_and_no_temporary_folder(tmp_path):
    from types import SimpleNamespace

    from safetensors import SafetensorError

    from compgen.training.export import export_run

    (tmp_path / "model_index.json").write_text("{}")  # an earlier export

    def full(model, folder):
        (folder / "partial.safetensors").write_bytes(b"x")
        raise SafetensorError("Error while serializing: IoError(Os { code: 28, kind: StorageFull })")

    task = SimpleNamespace(save_pretrained=full, model_card_details=dict)
    with pytest.raises(OSError, match="could not write the export .*StorageFull.*earlier export there is intact"):
        export_run(tmp_path, task, None, [], None, None, None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model_index.json"]


def test_a_resume_that_names_the_seed_the_run_defaulted_to_is_the_same_run(tmp_path):
    """A run started with ``--seed 0`` took its data order and draws from it; resuming with ``--data_seed 0`` (or
    ``--noise_seed 0``) given explicitly is the same run, not a run "with other training options". Another seed is."""
    from compgen.training.checkpoint import CheckpointError
    from compgen.training.config import TrainingConfig
    from compgen.training.run_directory import RunDirectory

    started = TrainingConfig(output_dir=str(tmp_path), seed=0)
    state = {"config": started.to_json_dict(), "fingerprint": started.fingerprint()}
    for same in (TrainingConfig(output_dir=str(tmp_path), seed=0, data_seed=0),
                 TrainingConfig(output_dir=str(tmp_path), seed=0, data_seed=0, noise_seed=0)):
        RunDirectory.check_resumable(state, tmp_path, same, 1, [])
    with pytest.raises(CheckpointError, match="data_seed"):
        RunDirectory.check_resumable(state, tmp_path, TrainingConfig(output_dir=str(tmp_path), seed=0, data_seed=1),
                                     1, [])


def test_a_run_started_with_auto_precision_resumes_where_auto_is_bf16(tmp_path, monkeypatch):
    """A checkpoint records the precision ``auto`` resolved to (``bf16`` on a CPU with native bf16); the check
    before any work compares the resumed run's options resolved the same way, so ``auto`` resumes its own run and
    an explicit other precision is still refused."""
    import dataclasses

    import torch

    from compgen.training.checkpoint import CheckpointError
    from compgen.training.config import TrainingConfig
    from compgen.training.run_directory import RunDirectory

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True, raising=False)
    started = TrainingConfig(output_dir=str(tmp_path), mixed_precision="auto")
    trained = started.resolved()
    assert (trained.mixed_precision, trained.eval_mixed_precision) == ("bf16", "bf16")
    assert trained.resolved() == trained
    state = {"config": trained.to_json_dict(), "fingerprint": trained.fingerprint()}
    RunDirectory.check_resumable(state, tmp_path, started, 1, [])
    RunDirectory.check_resumable(state, tmp_path, dataclasses.replace(started, mixed_precision="bf16"), 1, [])
    with pytest.raises(CheckpointError, match="mixed_precision 'bf16' there vs 'no' now"):
        RunDirectory.check_resumable(state, tmp_path, dataclasses.replace(started, mixed_precision="no"), 1, [])
