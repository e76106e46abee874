"""prefixscope: offline forensics for prompt (prefix) caching."""

__version__ = "0.1.0"
