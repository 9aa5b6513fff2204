"""vidspec.draft_training."""
