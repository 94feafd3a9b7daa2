"""compgen.launch: a training run set up from the command line, above the loop (:mod:`compgen.training`).

``run_setup.py`` (:func:`~compgen.launch.run_setup.prepare_run`: a script's options parsed and checked before any
work, its data and probes loaded, a :class:`~compgen.launch.run_setup.TrainingRun` that trains tasks through the loop),
``directory_claim.py`` (the one owner of an output directory's claim, and whether a run may start there),
``init_from.py`` (``--init_from`` resolved, once), ``token_model_setup.py`` (a token-space script's tokenizer: its
flags, training and reuse, and the token transformer's shared flags) with ``tokenizer_kind.py`` (``--tokenizer
vq|kl``, loading a saved one, the source's tokenizer a fine-tuning run keeps). Only commands (``examples/``) and
:mod:`compgen.studies` import this package.
"""
