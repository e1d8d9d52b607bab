"""Benchmark commands (scripts, never timed asserts)."""
