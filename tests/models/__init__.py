"""Tests (a package, so ``tests.*`` imports cannot pick up another distribution's top-level ``tests``)."""
