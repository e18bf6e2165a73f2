"""The base utilities every layer may use: errors (:mod:`~hdp.base.errors`), files written whole
(:mod:`~hdp.base.fsutil`), the cache directory and sizes (:mod:`~hdp.base.cache`), validated
input (:mod:`~hdp.base.validation`), the Numba kernel cache (:mod:`~hdp.base.jit`) and the words of
hdp's output (:mod:`~hdp.base.glossary`). Nothing here imports another hdp package."""
