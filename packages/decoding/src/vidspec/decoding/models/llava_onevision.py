"""LLaVA-OneVision as a vidspec target: ChatML prompt, SigLIP frames, 1-D positions."""

from __future__ import annotations

import numpy as np
import torch

from vidspec.decoding.models.base import DEFAULT_SYSTEM, HFVideoTarget, VisualInputs
from vidspec.decoding.types import Request, TargetState, VideoClip

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def frames_to_pixels(frames: np.ndarray, size: int) -> torch.Tensor:
    """Resize frames to ``size x size`` (bicubic) and normalise as LLaVA-OneVision's video processor.

    Returns:
        ``(1, T, 3, size, size) float32``.
    """
    from vidspec.decoding.video import resize_frames

    if frames.shape[1:3] != (size, size):
        frames = resize_frames(frames, (size, size))
    x = frames.astype(np.float32) / 255.0
    x = (x - np.asarray(CLIP_MEAN, np.float32)) / np.asarray(CLIP_STD, np.float32)
    return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))[None]


class LlavaOnevisionTarget(HFVideoTarget):
    """Adapter for ``LlavaOnevisionForConditionalGeneration``.

    Each frame becomes ``ceil(s/2)^2`` tokens (s = image_size / patch_size, pooled 2x2) and the
    video ends with one newline embedding: ``T * ceil(s/2)^2 + 1`` placeholders.
    """

    family = "llava-ov"
    video_token = "<video>"

    def __init__(self, model, tokenizer, name: str, **kw):
        super().__init__(model, tokenizer, name, **kw)
        vc = model.config.vision_config
        self.image_size = vc.image_size
        side = vc.image_size // vc.patch_size
        self.tokens_per_frame = ((side + 1) // 2) ** 2
        self.max_read_pixels = 4 * self.image_size * self.image_size

    def prompt_parts(self, request: Request) -> tuple[str, str]:
        system = DEFAULT_SYSTEM if request.system is None else request.system
        head = f"<|im_start|>system\n{system}<|im_end|>\n" if system else ""
        head += "<|im_start|>user\n"
        tail = "\n" if request.clip is not None else ""
        tail += f"{request.prompt}<|im_end|>\n<|im_start|>assistant\n"
        return head, tail

    def visual_inputs(self, clip: VideoClip) -> VisualInputs:
        pixels = frames_to_pixels(clip.frames, self.image_size)
        dtype = self.model.model.vision_tower.dtype
        return VisualInputs(
            num_tokens=clip.num_frames * self.tokens_per_frame + 1,
            tensors={"pixel_values_videos": pixels.to(self.device, dtype)},
            extra={},
        )

    def repeated_visual_inputs(self, clip: VideoClip, factor: int) -> VisualInputs:
        """Each frame is resized and normalised on its own, so the pixels of the repeated clip are the clip's pixels
        repeated, at a fraction of the cost (its tokens are counted for every repeat)."""
        visual = self.visual_inputs(clip)
        pixels = visual.tensors["pixel_values_videos"].repeat_interleave(factor, dim=1)
        return VisualInputs(num_tokens=clip.num_frames * factor * self.tokens_per_frame + 1,
                            tensors={"pixel_values_videos": pixels}, extra={})

    def prefill_positions(self, input_ids: torch.Tensor, visual: VisualInputs | None):
        return torch.arange(input_ids.shape[1], device=input_ids.device)[None], 0

    def step_positions(self, state: TargetState, n: int) -> torch.Tensor:
        return torch.arange(state.length, state.length + n, device=self.device)[None]
