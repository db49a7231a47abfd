"""Frozen reference implementations that tests and benchmarks compare against."""
