"""Errors a user can cause. The CLI turns them into one line on stderr and exit status 2."""

from __future__ import annotations


class VidspecError(Exception):
    """A problem with the user's input (file, model, config), not a bug in vidspec."""


class VideoError(VidspecError):
    """A video file is missing, unreadable, or has no frames."""


class ModelError(VidspecError):
    """A model name is unknown, a checkpoint is malformed, or two models do not fit together."""


class ConfigError(VidspecError):
    """A configuration value or recipe is invalid."""
