"""Models to place: the benchmark zoo (:mod:`~hdp.zoo.models`, built from ``keras.applications``
in :mod:`~hdp.zoo.keras_models` and ``transformers`` configs in :mod:`~hdp.zoo.hf_models`, random
weights, nothing downloaded) and random IR modules for tests and kernel warm-up
(:mod:`~hdp.zoo.synth`). Above the IR, below everything that places."""
