"""Capture and IR: load → trace → shapes → normalized FusionGraph."""
