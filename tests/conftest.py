"""Shared fixtures for the unit tests (interpreter setup and gpu rule: ../conftest.py)."""
