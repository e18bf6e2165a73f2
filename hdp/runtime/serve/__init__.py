"""Serving placed models, measured: the check before a placement is written
(:mod:`~hdp.runtime.serve.verify`), the compiled blob (:mod:`~hdp.runtime.serve.blob`), a placement
served beside the plain compile (:mod:`~hdp.runtime.serve.serving`) and the words of compile's
measured reports (:mod:`~hdp.runtime.serve.report`). The top runtime package."""
