"""Resumes under bad options, refused before any work: a changed training option (named, with the checkpoints left
intact and how to go on) and a --max_train_steps below the run's last checkpoint (which would re-export the later
weights under a card of fewer steps)."""

import pytest
from conftest import reset_accelerate_state
from repo_scripts import load_repo_script

import compgen.launch.run_setup as script_module

pytestmark = pytest.mark.usefixtures("single_thread")
TINY = ["--block_out_channels", "8,16", "--layers_per_block", "1", "--train_batch_size", "8", "--eval_steps", "2",
        "--eval_images_per_class", "2", "--eval_inference_steps", "2", "--checkpointing_steps", "2",
        "--mixed_precision", "no"]


@pytest.fixture(scope="module")
def finished_run(dataset_dir):
    """A finished 4-step run (checkpoints at 2 and 4) in ``dataset_dir``'s folder, on that tiny H32-train1 split."""
    root = dataset_dir
    reset_accelerate_state()
    load_repo_script("examples/train_tuple_unet.py").main(
        [*TINY, "--dataset", str(root), "--max_train_steps", "4", "--output_dir", str(root / "run")])
    return root


def _resume(root, monkeypatch, *argv):
    def no_data(*args, **kwargs):
        raise AssertionError("the dataset was loaded before the resume was checked")

    monkeypatch.setattr(script_module, "_load_dataset", no_data)
    reset_accelerate_state()
    load_repo_script("examples/train_tuple_unet.py").main(
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
