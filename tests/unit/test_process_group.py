"""A finished run's process group is destroyed at exit (gloo's threads otherwise can abort a finished process)."""

import atexit
import sys

import torch.distributed as dist

from compgen.training import process_group


def _init_single_process_group(tmp_path) -> None:
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)


def test_a_finished_run_destroys_the_group_at_exit_once(tmp_path, monkeypatch):
    registered = []
    monkeypatch.setattr(atexit, "register", registered.append)
    monkeypatch.setattr(process_group, "_registered", False)
    process_group.end_process_group_at_exit()
    process_group.end_process_group_at_exit()
    assert registered == [process_group._destroy_after_clean_exit]
    _init_single_process_group(tmp_path)
    try:
        registered[0]()
        assert not dist.is_initialized()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    registered[0]()  # no group (a single-process run): nothing to do


def test_an_uncaught_exception_leaves_the_group_to_its_peers(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "last_value", RuntimeError("a rank failed"), raising=False)
    _init_single_process_group(tmp_path)
    try:
        process_group._destroy_after_clean_exit()
        assert dist.is_initialized()
    finally:
        dist.destroy_process_group()
