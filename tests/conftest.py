"""Shared test fixtures."""

import pytest
import torch
from accelerate.state import AcceleratorState, GradientState


def reset_accelerate_state() -> None:
    """Forget the process-wide Accelerate state so that the next ``Accelerator()`` starts fresh."""
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


@pytest.fixture
def fresh_accelerator_state():
    """Run a test between two resets of Accelerate's singletons (several training runs in one process)."""
    reset_accelerate_state()
    yield
    reset_accelerate_state()


@pytest.fixture(scope="module")
def single_thread():
    """Small models on a shared 2-core machine run far faster single-threaded; restored afterwards."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session", autouse=True)
def probe_cache(tmp_path_factory):
    """One on-disk cache of default probes for the whole test run (trained once, never in the user's home)."""
    import os

    previous = os.environ.get("COMPGEN_CACHE")
    os.environ["COMPGEN_CACHE"] = str(tmp_path_factory.mktemp("compgen-cache"))
    yield
    if previous is None:
        os.environ.pop("COMPGEN_CACHE", None)
    else:
        os.environ["COMPGEN_CACHE"] = previous


def small_training_data(name: str, cache_dir, **config):
    """The train split (as tensors) and concept graph of a small concept-graph config built for a test."""
    from compgen.data.concept_graph_builder import build_concept_graph_dataset
    from compgen.data.loading import training_data_from

    return training_data_from(build_concept_graph_dataset(name, cache_dir=str(cache_dir), **config))


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory):
    """A tiny H32-train1 split in Hub layout (Parquet per split), as --dataset DIR for the token models' scripts."""
    from compgen.data.concept_graph_builder import build_concept_graph_dataset

    root = tmp_path_factory.mktemp("tiny-h32-tokens")
    dataset = build_concept_graph_dataset("tiny-kl", cache_dir=str(root / "cache"), split_preset="H32-train1",
                                          images_per_class=16, test_images_per_class=2)
    (root / "data").mkdir()
    for split, data in dataset.items():
        data.to_parquet(str(root / "data" / f"{split}-00000-of-00001.parquet"))
    return root


def tiny_tokenizer(kl: bool, channels: int):
    """A tiny untrained tokenizer for 28 px images with ``channels`` latent channels: a VQ one, or a KL one."""
    from compgen.models.kl_tokenizer import build_kl_tokenizer
    from compgen.models.vq_tokenizer import build_vq_tokenizer

    torch.manual_seed(0)
    if kl:
        return build_kl_tokenizer(28, block_out_channels=(8, 8, 8), latent_channels=channels, norm_num_groups=4).eval()
    return build_vq_tokenizer(28, block_out_channels=(8, 8, 8), num_vq_embeddings=32, vq_embed_dim=channels,
                              norm_num_groups=4).eval()


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``make test``: ``-n 2 --dist loadgroup``), a test file runs on one worker, so its module
    fixtures are built once; the files whose tests train in two processes (``repo_scripts.torchrun``) share one
    group, so that no two such runs (four processes) compete for a 2-core machine at once."""
    sources = {}
    for item in items:
        path = item.path
        if path not in sources:
            sources[path] = "torchrun(" in path.read_text() if path.suffix == ".py" else False
        item.add_marker(pytest.mark.xdist_group("two-process" if sources[path] else str(path)))
