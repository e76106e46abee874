"""Typed results -> what a person or a program reads: terminal tables, JSON, plots."""
