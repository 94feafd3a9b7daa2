"""Train MaskGIT, with Paper B's JEPA auxiliary objective by default (``--jepa_weight 0``: plain MaskGIT).

    accelerate launch examples/train_maskgit_jepa.py --preset cpu-quick --output_dir outputs/maskgit-jepa

The same command as ``python -m compgen.train maskgit``: flags, presets and checks live in the recipe,
``compgen.recipes.maskgit`` (``--help`` lists them).
"""

from compgen.recipes.maskgit import main

if __name__ == "__main__":
    main()
