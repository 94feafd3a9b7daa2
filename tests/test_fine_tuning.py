"""Fine-tuning (``--init_from``): the run starts from the given weights, on other data and at another learning rate,
and one learning-dynamics log holds both phases with the boundary marked (Paper A, Sec. 5, Fig. 9)."""

import json

import pytest
import torch
from conftest import reset_accelerate_state
from safetensors.torch import load_file

from compgen.data.concept_graph_builder import build_concept_graph_dataset
from compgen.launch.init_from import resolve_initial_weights
from compgen.models.tuple_unet import TupleConditionedUNet2DModel
from compgen.recipes import load_recipe
from compgen.training.fine_tuning import load_initial_weights

pytestmark = pytest.mark.usefixtures("single_thread")
TINY_UNET = ["--block_out_channels", "8,16", "--layers_per_block", "1", "--train_batch_size", "8",
             "--eval_images_per_class", "2", "--eval_inference_steps", "2", "--checkpointing_steps", "2",
             "--mixed_precision", "no"]


def _hub_layout(root, split_preset):
    dataset = build_concept_graph_dataset(f"ft-{split_preset}", cache_dir=str(root / "cache"),
                                          split_preset=split_preset, images_per_class=16, test_images_per_class=2)
    (root / "data").mkdir(parents=True)
    for split, data in dataset.items():
        data.to_parquet(str(root / "data" / f"{split}-00000-of-00001.parquet"))
    return root


def _train(*argv):
    reset_accelerate_state()
    return load_recipe("tuple-unet").main([*TINY_UNET, *argv])


def _log(run):
    return [json.loads(line) for line in (run / "learning_dynamics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def source_run(tmp_path_factory):
    """A tiny U-Net trained 4 steps on H32-train1 (evaluations at 2 and 4, checkpoints at 2 and 4, an EMA export)."""
    root = tmp_path_factory.mktemp("fine-tuning")
    data = _hub_layout(root / "train1", "H32-train1")
    _train("--dataset", str(data), "--max_train_steps", "4", "--eval_steps", "2", "--output_dir", str(root / "source"))
    return root / "source"


def test_fine_tuning_logs_both_phases_and_starts_from_the_source_model(source_run, tmp_path):
    """On another training set (H32-train2) at another learning rate: the log holds the source's records, then an
    evaluation of the loaded weights before any update (the same samples as the source's last evaluation where the
    classes are the same), then the fine-tuning's, steps continuing from the source's."""
    other = _hub_layout(tmp_path / "train2", "H32-train2")
    out = tmp_path / "fine-tuned"
    _train("--dataset", str(other), "--init_from", str(source_run), "--learning_rate", "1e-5",
           "--max_train_steps", "2", "--eval_steps", "2", "--output_dir", str(out))
    records = _log(out)
    source = _log(source_run)
    assert [(r["step"], r.get("phase")) for r in records] == [(2, "source"), (4, "source"), (4, "fine-tune"),
                                                               (6, "fine-tune")]
    assert all(r["phase_start_step"] == 4 for r in records[2:])
    assert records[0]["training_classes"] == source[0]["training_classes"] != records[2]["training_classes"]
    # The boundary evaluation scores the source's EMA export with the same evaluation seed: identical samples.
    assert records[2]["concept_accuracy"] == source[-1]["concept_accuracy"]
    assert json.loads((out / "checkpoints" / "checkpoint-2" / "trainer_state.json").read_text())["config"][
        "learning_rate"] == 1e-5


def test_loaded_weights_are_the_source_export_and_give_its_loss(source_run):
    """The identical first-step loss: the initialized model and the source's export, same batch, same noise."""
    initial = resolve_initial_weights(source_run)
    assert initial.step == 4 and len(initial.records) == 2
    reference = TupleConditionedUNet2DModel.from_pretrained(source_run / "unet").eval()
    torch.manual_seed(123)  # another initialization, then overwritten
    model = TupleConditionedUNet2DModel.from_config(reference.config).eval()
    assert "unet" in load_initial_weights(model, initial)
    exported = load_file(str(source_run / "unet" / "diffusion_pytorch_model.safetensors"))
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(tensor, exported[name], rtol=0, atol=0)
    images = torch.randn(2, 3, 28, 28, generator=torch.Generator().manual_seed(0))
    concepts, steps = torch.tensor([[0, 0, 0], [1, 1, 1]]), torch.tensor([10, 500])
    with torch.no_grad():
        a = model(images, steps, concepts).sample
        b = reference(images, steps, concepts).sample
    torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_checkpoint_gives_its_raw_weights_and_the_log_up_to_its_step(source_run):
    initial = resolve_initial_weights(source_run / "checkpoints" / "checkpoint-2")
    assert initial.step == 2 and [r["step"] for r in initial.records] == [2]
    assert initial.weight_files[0].name == "model.safetensors"


def test_bad_init_from_is_refused_before_any_work(source_run, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        _train("--dataset", "okawa-h32-train1", "--init_from", str(tmp_path / "missing"), "--output_dir",
               str(tmp_path / "never"))
    assert exit_info.value.code == 2 and "--init_from" in capsys.readouterr().err
    assert not (tmp_path / "never").exists()
    with pytest.raises(ValueError, match="holds no export"):
        resolve_initial_weights(tmp_path)
    wider = TupleConditionedUNet2DModel.from_config(
        {**TupleConditionedUNet2DModel.load_config(source_run / "unet"), "block_out_channels": [16, 32]})
    with pytest.raises(ValueError, match="shapes differ"):
        load_initial_weights(wider, resolve_initial_weights(source_run))


def test_eval_steps_held_decides_from_the_fine_tuning_phase_after_its_boundary(source_run, tmp_path, monkeypatch):
    """Issue 42, case 15: whether the levels hold was decided from the source's records, before the boundary
    evaluation and not after it; now from this run's own records, the boundary evaluation first among them."""
    import compgen.training.trainer as trainer

    seen = []
    monkeypatch.setattr(trainer, "levels_held", lambda records: seen.append(list(records)) or False)
    other = _hub_layout(tmp_path / "train2", "H32-train2")
    _train("--dataset", str(other), "--init_from", str(source_run), "--max_train_steps", "2", "--eval_steps", "2",
           "--eval_steps_held", "4", "--output_dir", str(tmp_path / "fine-tuned"))
    assert seen and all(r["phase"] == "fine-tune" for records in seen for r in records)
    assert [r["step"] for r in seen[0]] == [4]  # the boundary evaluation, before any update


def test_reports_of_a_fine_tuning_run_are_of_its_own_phase(source_run, tmp_path, capsys):
    """A results-folder arm, the quick start's report, the model card and a checkpoint's re-score of a fine-tuning run
    read its own records and steps, never its source's (whose records open its log)."""
    from compgen.analysis.rescore import resolve_run
    from compgen.analysis.results_folder import write_results
    from compgen.quickstart import main as quickstart_main

    out = tmp_path / "fine-tuned"
    _train("--dataset", str(source_run.parent / "train1"), "--init_from", str(source_run), "--max_train_steps", "4",
           "--eval_steps", "2", "--eval_start_step", "2", "--output_dir", str(out))
    records = _log(out)
    own = [r for r in records if r.get("phase") != "source"]
    assert [r["step"] for r in own] == [4, 6, 8] and records[0]["phase"] == "source"

    # The card: the evaluations start at the run's own step 2 (logged 6), not at the source's step 2.
    card = (out / "README.md").read_text()
    assert "The evaluations start at step 6" in card
    # A checkpoint's re-score is labelled with the log's step (source 4 + own 2), as its evaluation was.
    assert resolve_run(out, "checkpoint-2")[2] == 6
    # The quick start's report judges the run's own last three evaluations.
    capsys.readouterr()
    quickstart_main(["--report", str(out)])
    assert "step 8: per-level accuracy" in capsys.readouterr().out
    # A results-folder arm of the run: its first steps are its own (>= 4), never the source's step 2.
    folder = write_results([out / "learning_dynamics.jsonl"], tmp_path / "results", machine="test",
                           arms={"fine-tuned": ["learning_dynamics"]})
    arm = json.loads((tmp_path / "results" / "summary.json").read_text())["arms"]["fine-tuned"]
    firsts = [step for scorer in ("probes", "pixel statistics") if scorer in arm for level in arm[scorer].values()
              for step in level["first_step_0.5"] if step is not None]
    assert folder and all(step >= 4 for step in firsts)
