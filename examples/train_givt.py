"""Train GIVT (a Gaussian mixture per token over a tokenizer's continuous latents).

    accelerate launch examples/train_givt.py --preset cpu-quick --output_dir outputs/givt

The same command as ``python -m compgen.train givt``: flags, presets and checks live in the recipe,
``compgen.recipes.givt`` (``--help`` lists them).
"""

from compgen.recipes.givt import main

if __name__ == "__main__":
    main()
