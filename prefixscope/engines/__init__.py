"""Cache models for simulate: a registry of engines."""
