"""A flag is spelled in full: a prefix (``--codebook`` for ``--codebook_size``) is refused, never read silently."""

from __future__ import annotations

import pytest

from compgen.cli import ArgumentParser
from compgen.recipes import load_recipe


@pytest.mark.parametrize("argv, prefix", [
    (["--tokenizer", "kl", "--codebook", "64"], "--codebook"),  # was read as --codebook_size and then ignored
    (["--max_train", "7"], "--max_train"),  # --print_config labelled it "[default]"
    (["--tokenizer_embed", "5"], "--tokenizer_embed"),
    (["--pre", "cpu-quick"], "--pre"),  # the preset's own pre-parse too
])
def test_a_prefix_of_a_flag_is_refused_before_any_work(tmp_path, capsys, argv, prefix):
    with pytest.raises(SystemExit) as exit_info:
        load_recipe("maskgit").main([*argv, "--cache_dir", str(tmp_path / "cache"), "--output_dir",
                                     str(tmp_path / "out"), "--print_config"])
    assert exit_info.value.code == 2
    assert f"unrecognized arguments: {prefix}" in capsys.readouterr().err
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out").exists()


def test_full_flags_and_the_old_hyphenated_spelling_still_parse():
    parser = ArgumentParser()
    parser.add_argument("--codebook_size", type=int, default=8)
    assert parser.parse_args(["--codebook_size", "64"]).codebook_size == 64
    with pytest.warns(FutureWarning, match="--codebook_size"):
        assert parser.parse_args(["--codebook-size=32"]).codebook_size == 32
    with pytest.raises(SystemExit):
        parser.parse_args(["--codebook", "64"])
