"""The SynthVid testbed's release pipeline: from a recipe to trained, exported and measured releases.

- :mod:`.recipe`: the typed stages of a testbed recipe (``configs/testbed/*.yaml``).
- :mod:`.pipeline`: the stages and ``build``, resumable stage by stage; training stages run as ``vidspec train
  fit`` / ``vidspec export`` subprocesses, so the evaluation package never imports the training package.
- :mod:`.scenes`: the scene files a testbed's vision tower is pretrained on.
- :mod:`.figures`: fact-judge precision, MCQ accuracy and draft tau of the releases.
- :mod:`.cli`: ``vidspec testbed build --recipe R --out O``.
"""
