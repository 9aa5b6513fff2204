"""Qwen2.5-VL as a vidspec target: ChatML prompt, patchified video pixels, M-RoPE positions."""

from __future__ import annotations

import numpy as np
import torch

from vidspec.decoding.models.base import DEFAULT_SYSTEM, HFVideoTarget, VisualInputs
from vidspec.decoding.types import Request, TargetState, VideoClip

# CLIP normalisation constants used by the Qwen2-VL family's processors.
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def patchify_batch(frames: torch.Tensor, patch: int, temporal: int = 2, merge: int = 2) -> torch.Tensor:
    """``(B, T, H, W, 3) uint8`` videos -> Qwen2.5-VL's flattened patches, video after video.

    CLIP-normalised, and ordered as the Qwen2-VL processors order them: each ``merge x merge`` block
    of neighbouring patches is contiguous (the vision tower merges them). ``T`` must be a multiple of
    ``temporal`` and H, W multiples of ``patch * merge``.

    Returns:
        ``(B * grid_t * grid_h * grid_w, 3 * temporal * patch**2) float32``.
    """
    b, t, h, w, c = frames.shape
    x = frames.float() / 255.0
    x = (x - x.new_tensor(CLIP_MEAN)) / x.new_tensor(CLIP_STD)
    x = x.permute(0, 1, 4, 2, 3)  # (B, T, C, H, W)
    gt, gh, gw = t // temporal, h // patch, w // patch
    x = x.reshape(b, gt, temporal, c, gh // merge, merge, patch, gw // merge, merge, patch)
    x = x.permute(0, 1, 4, 7, 5, 8, 3, 2, 6, 9)
    return x.reshape(b * gt * gh * gw, c * temporal * patch * patch)


def patchify(frames: np.ndarray, patch_size: int, temporal_patch_size: int, merge_size: int) -> tuple[torch.Tensor, tuple[int, int, int]]:
    """Normalise and cut one video's frames into the flattened patches Qwen2.5-VL's vision tower reads.

    Frames are padded to a multiple of the temporal patch by repeating the last one, as the Qwen2-VL
    processors do; the layout is :func:`patchify_batch`'s.

    Args:
        frames: ``(T, H, W, 3) uint8`` with H, W multiples of ``patch_size * merge_size``.

    Returns:
        ``(grid_t * grid_h * grid_w, 3 * temporal_patch_size * patch_size**2) float32`` patches and
        the grid ``(grid_t, grid_h, grid_w)``.
    """
    t, h, w, _ = frames.shape
    if t % temporal_patch_size:
        pad = temporal_patch_size - t % temporal_patch_size
        frames = np.concatenate([frames, np.repeat(frames[-1:], pad, axis=0)], axis=0)
    x = torch.from_numpy(np.ascontiguousarray(frames))[None]
    flat = patchify_batch(x, patch_size, temporal_patch_size, merge_size)
    return flat, (frames.shape[0] // temporal_patch_size, h // patch_size, w // patch_size)


class Qwen2_5_VLTarget(HFVideoTarget):
    """Adapter for ``Qwen2_5_VLForConditionalGeneration``.

    Args:
        min_pixels / max_pixels: per-frame pixel budget; frames are resized to multiples of 28
            within it (``smart_resize``), as Qwen's video processor does.
        frame_per_patch: give each sampled frame a temporal patch of its own (the frame repeated
            ``temporal_patch_size`` times, as Qwen's processor does for an image) instead of pairing
            consecutive frames, as its video processor does. No vision token then mixes two frames (a
            moving object is not drawn twice in it), at twice the vision tokens; the clip's timing
            (``second_per_grid_ts``) is one frame interval per patch.
        Other arguments: see :class:`HFVideoTarget`.
    """

    family = "qwen2.5-vl"
    video_token = "<|video_pad|>"

    def __init__(self, model, tokenizer, name: str, *, min_pixels: int = 128 * 28 * 28,
                 max_pixels: int = 768 * 28 * 28, frame_per_patch: bool = False, **kw):
        super().__init__(model, tokenizer, name, **kw)
        vc = model.config.vision_config
        self.patch_size = vc.patch_size
        self.temporal_patch_size = vc.temporal_patch_size
        self.merge_size = vc.spatial_merge_size
        self.min_pixels = min_pixels
        self.max_pixels = max_pixels
        self.frame_per_patch = bool(frame_per_patch)
        # Read at up to 4x the budget so resizing still has detail to work with.
        self.max_read_pixels = 4 * max_pixels

    def prompt_parts(self, request: Request) -> tuple[str, str]:
        system = DEFAULT_SYSTEM if request.system is None else request.system
        head = f"<|im_start|>system\n{system}<|im_end|>\n" if system else ""
        head += "<|im_start|>user\n"
        if request.clip is not None:
            head += "<|vision_start|>"
            tail = "<|vision_end|>"
        else:
            tail = ""
        tail += f"{request.prompt}<|im_end|>\n<|im_start|>assistant\n"
        return head, tail

    def visual_inputs(self, clip: VideoClip) -> VisualInputs:
        from vidspec.decoding.video import resize_frames, smart_resize

        h, w = clip.size
        factor = self.patch_size * self.merge_size
        rh, rw = smart_resize(h, w, factor=factor, min_pixels=self.min_pixels, max_pixels=self.max_pixels)
        frames = clip.frames if (rh, rw) == (h, w) else resize_frames(clip.frames, (rh, rw))
        per_patch = self.temporal_patch_size  # sampled frames a temporal patch spans
        if self.frame_per_patch:
            frames, per_patch = np.repeat(frames, self.temporal_patch_size, axis=0), 1
        pixels, grid = patchify(frames, self.patch_size, self.temporal_patch_size, self.merge_size)
        dtype = self.model.model.visual.dtype if hasattr(self.model.model.visual, "dtype") else torch.float32
        grid_thw = torch.tensor([grid], dtype=torch.long, device=self.device)
        fps = clip.fps if clip.fps > 0 else 2.0
        return VisualInputs(
            num_tokens=grid[0] * grid[1] * grid[2] // self.merge_size**2,
            tensors={"pixel_values_videos": pixels.to(self.device, dtype), "video_grid_thw": grid_thw},
            extra={"video_grid_thw": grid_thw, "second_per_grid_ts": torch.tensor([per_patch / fps])},
        )

    def generate_inputs(self, ids: torch.Tensor, visual: VisualInputs | None) -> dict:
        kw = super().generate_inputs(ids, visual)
        if visual is not None:  # what the HF processor adds for videos: the token types and the clip's timing
            kw["mm_token_type_ids"] = (kw["input_ids"] == self.video_token_id).int() * 2
            kw["second_per_grid_ts"] = visual.extra["second_per_grid_ts"]
        return kw

    def prefill_positions(self, input_ids: torch.Tensor, visual: VisualInputs | None):
        n = input_ids.shape[1]
        if visual is None:
            pos = torch.arange(n, device=input_ids.device).view(1, 1, -1).expand(3, 1, -1)
            return pos, 0
        mm = (input_ids == self.video_token_id).to(torch.int32) * 2  # 0 text, 2 video
        pos, deltas = self.model.model.get_rope_index(
            input_ids,
            mm_token_type_ids=mm,
            video_grid_thw=visual.extra["video_grid_thw"],
            second_per_grid_ts=visual.extra["second_per_grid_ts"],
        )
        return pos, int(deltas.flatten()[0])

    def step_positions(self, state: TargetState, n: int) -> torch.Tensor:
        start = state.length + state.extra["offset"]
        pos = torch.arange(start, start + n, device=self.device)
        return pos.view(1, 1, -1).expand(3, 1, -1)
