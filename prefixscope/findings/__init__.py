"""Typed analysis results -> ranked findings (for report)."""
