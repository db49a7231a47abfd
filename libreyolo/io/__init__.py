"""Checkpoint reading/writing and weights resolution (local path, bundled, Hugging Face Hub)."""
