"""Typed answers computed from the store: diff (+ causes), segments, bucket, render."""
