"""Shared fixtures for the unit tests (interpreter setup and the gpu rule live in ../conftest.py)."""
