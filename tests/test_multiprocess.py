"""Data-parallel training with two CPU processes (``torchrun`` with gloo), and the in-process run queue.

Each process takes its half of the global batch; evaluation, logging, checkpoints and the export happen once, on the
main process; resuming under the same number of processes gives the weights of an uninterrupted run.
"""

import json
import os
import subprocess
import sys
import time

import pytest
import torch
from repo_scripts import REPO_ROOT, log_steps, torchrun
from safetensors.torch import load_file

from compgen import GIVTPipeline, MARPipeline, MaskGITPipeline, TupleConditionedDDPMPipeline
from compgen.data.concept_graph_builder import build_concept_graph_dataset
from compgen.studies.runner import parse_runs, run_queue

TINY_UNET = ["--block_out_channels", "16,32", "--layers_per_block", "1", "--train_batch_size", "8",
             "--eval_images_per_class", "2", "--eval_inference_steps", "2", "--eval_steps", "4",
             "--checkpointing_steps", "4", "--logging_steps", "2"]
TINY_MASKGIT = ["--train_batch_size", "8", "--hidden_size", "16", "--num_layers", "2", "--num_heads", "2",
                "--tokenizer_block_out_channels", "8,8,8", "--tokenizer_embed_dim", "4", "--codebook_size", "32",
                "--tokenizer_steps", "4",
                "--eval_steps", "3", "--eval_images_per_class", "2", "--eval_inference_steps", "2",
                "--checkpointing_steps", "3", "--jepa_layers", "1,2"]


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory):
    """A small H32-train1 split in Hub layout, as --dataset DIR."""
    root = tmp_path_factory.mktemp("h32-small")
    dataset = build_concept_graph_dataset("mp-h32", cache_dir=str(root / "cache"), split_preset="H32-train1",
                                          images_per_class=32, test_images_per_class=2)
    (root / "data").mkdir()
    for split, data in dataset.items():
        data.to_parquet(str(root / "data" / f"{split}-00000-of-00001.parquet"))
    return root


@pytest.mark.slow
def test_two_process_unet_logs_once_shards_the_batch_resumes_exactly_and_exports(dataset_dir, tmp_path):
    data = ["--dataset", str(dataset_dir)]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    torchrun("examples/train_tuple_unet.py", *data, *TINY_UNET, "--max_train_steps", "8", "--output_dir",
             str(straight))
    assert log_steps(straight) == [4, 8]  # one line per evaluation step, not one per process
    state = json.loads((straight / "checkpoints" / "checkpoint-8" / "trainer_state.json").read_text())
    assert state["num_processes"] == 2 and state["images_seen"] == 8 * 2 * 8  # 8 steps of 2 x 8 images
    assert sorted(p.name for p in (straight / "checkpoints").iterdir()) == ["checkpoint-4", "checkpoint-8"]

    torchrun("examples/train_tuple_unet.py", *data, *TINY_UNET, "--max_train_steps", "4", "--output_dir",
             str(resumed))
    torchrun("examples/train_tuple_unet.py", *data, *TINY_UNET, "--max_train_steps", "8", "--output_dir",
             str(resumed), "--resume_from_checkpoint", "latest")
    assert log_steps(resumed) == [4, 8]
    weights = "unet/diffusion_pytorch_model.safetensors"
    a, b = load_file(str(straight / weights)), load_file(str(resumed / weights))
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=0, atol=0, msg=name)

    pipe = TupleConditionedDDPMPipeline.from_pretrained(straight)
    pipe.set_progress_bar_config(disable=True)
    assert pipe("111", num_inference_steps=2, output_type="np").images.shape == (1, 28, 28, 3)


@pytest.mark.slow
def test_two_process_maskgit_jepa_trains_tokenizer_then_transformer(dataset_dir, tmp_path):
    out = tmp_path / "maskgit"
    torchrun("examples/train_maskgit_jepa.py", "--dataset", str(dataset_dir), *TINY_MASKGIT, "--max_train_steps",
             "6", "--output_dir", str(out))
    assert log_steps(out) == [3, 6]
    assert json.loads((out / "checkpoints" / "checkpoint-6" / "trainer_state.json").read_text())["num_processes"] == 2
    pipe = MaskGITPipeline.from_pretrained(out)
    pipe.set_progress_bar_config(disable=True)
    assert pipe("111", num_inference_steps=2, output_type="np").images.shape == (1, 28, 28, 3)
    assert (out / "jepa_target" / "predictor.safetensors").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("model", ["givt", "mar"])
def test_two_process_givt_and_mar_log_once_and_resume_exactly(dataset_dir, tmp_path, model):
    """Paper B's middle rungs under two processes: the tokenizer first, one log line per evaluation, and a run
    stopped at step 3 and resumed ends with the weights of an uninterrupted one (MAR's noise draws included)."""
    tiny = [*TINY_MASKGIT[:-2], "--mixed_precision", "no"]  # no JEPA flags: GIVT and MAR have no JEPA
    if model == "mar":
        tiny += ["--head_width", "16", "--head_depth", "1", "--num_train_timesteps", "20", "--eval_head_steps", "2"]
    data, script = ["--dataset", str(dataset_dir)], f"examples/train_{model}.py"
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    torchrun(script, *data, *tiny, "--max_train_steps", "6", "--output_dir", str(straight))
    assert log_steps(straight) == [3, 6]
    assert json.loads((straight / "checkpoints" / "checkpoint-6" / "trainer_state.json").read_text())[
        "num_processes"] == 2
    torchrun(script, *data, *tiny, "--max_train_steps", "3", "--output_dir", str(resumed),
             "--tokenizer_path", str(straight / "vqvae"))
    torchrun(script, *data, *tiny, "--max_train_steps", "6", "--output_dir", str(resumed),
             "--tokenizer_path", str(straight / "vqvae"), "--resume_from_checkpoint", "latest")
    weights = "transformer/diffusion_pytorch_model.safetensors"
    a, b = load_file(str(straight / weights)), load_file(str(resumed / weights))
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=0, atol=0, msg=name)
    pipeline = {"givt": GIVTPipeline, "mar": MARPipeline}[model].from_pretrained(straight)
    pipeline.set_progress_bar_config(disable=True)
    extra = {"num_head_steps": 2} if model == "mar" else {}
    assert pipeline("111", num_inference_steps=2, output_type="np", **extra).images.shape == (1, 28, 28, 3)


def test_queue_runs_one_after_another_in_one_process_and_survives_a_failing_run(dataset_dir, tmp_path):
    common = f"{REPO_ROOT / 'examples/train_tuple_unet.py'} --dataset {dataset_dir} --no_eval --max_train_steps 2"
    tiny = " ".join(TINY_UNET)
    runs = f"""
        # two seeds, and a run with a bad flag in between
        {common} --seed 0 --output_dir {tmp_path / 'a'} {tiny}
        {common} --learning_rate -1 --output_dir {tmp_path / 'bad'}
        {common} --seed 1 --output_dir {tmp_path / 'b'} {tiny}
    """
    commands = parse_runs(runs)
    assert len(commands) == 3
    results = run_queue(commands)
    assert [r.status for r in results] == ["ok", "failed", "ok"]
    assert "learning_rate" in results[1].error
    a = load_file(str(tmp_path / "a" / "unet" / "diffusion_pytorch_model.safetensors"))
    b = load_file(str(tmp_path / "b" / "unet" / "diffusion_pytorch_model.safetensors"))
    assert any(not torch.equal(a[k], b[k]) for k in a)  # the two seeds trained two different models
    with pytest.raises(ValueError, match="script path"):
        parse_runs("--seed 0 examples/train_tuple_unet.py")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = f"/proc/{pid}/status"
    return not os.path.exists(status) or "zombie" not in open(status).read()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_queue_workers_die_with_a_killed_runner(tmp_path):
    # A killed runner must not leave workers that go on training into run directories (a rerun resumes there).
    pid_file = tmp_path / "worker.pid"
    script = tmp_path / "runner.py"
    script.write_text(f"""
import os, time
from compgen.studies.runner import worker_pool

def work(path):
    open(path, "w").write(str(os.getpid()))
    time.sleep(120)

if __name__ == "__main__":
    with worker_pool(1) as pool:
        pool.submit(work, {str(pid_file)!r}).result()
""")
    parent = subprocess.Popen([sys.executable, str(script)])
    deadline = time.monotonic() + 60
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, "the worker never started"
        time.sleep(0.2)
    worker = int(pid_file.read_text())
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 20
    while _alive(worker):
        assert time.monotonic() < deadline, "the worker outlived the killed runner"
        time.sleep(0.2)
