"""Qwen3.5-0.8B written by hand in PyTorch, one part per chapter."""
