"""Typed answers computed from the store: diff (+ causes), segments, bucket, a rendered
prompt's segment spans (prompt_spans), simulate, a serving engine's cache (engine_cache)."""
