"""Train a tokenizer on its own (VQ, or KL with ``--tokenizer kl``), to share between runs.

    accelerate launch examples/train_vq_tokenizer.py --preset cpu-quick --output_dir outputs/vqvae

The same command as ``python -m compgen.train tokenizer``: flags, presets and checks live in the recipe,
``compgen.recipes.tokenizer`` (``--help`` lists them).
"""

from compgen.recipes.tokenizer import main

if __name__ == "__main__":
    main()
