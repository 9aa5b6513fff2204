"""What only the SynthVid testbed needs: Video-LLMs built from scratch at toy sizes, and their vision pretraining.

- :mod:`.arch`: :class:`~.arch.ArchConfig`, the sizes of a LLaVA-OV or Qwen2.5-VL model built from scratch with a
  SynthVid tokenizer (``VLMSFTModule(arch=...)``).
- :mod:`.vision_pretrain`: pretraining of such a model's vision tower on rendered one-object scenes with exact
  labels (``vidspec tower-pretrain``; ``VLMSFTModule(vision_init=DIR)`` loads the result).

The whole testbed release pipeline (SynthVid -> tower -> target and draft VLM SFT -> Sparrow -> export ->
figures) is ``vidspec testbed build`` in the evaluation package, which owns SynthVid and runs these training
stages as ``vidspec`` subprocesses.
"""
