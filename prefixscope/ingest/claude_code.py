"""PLACEHOLDER: being written. Replace this whole file."""

NAME = "claude-code"
DESCRIPTION = "(not yet implemented)"


def sniff(probe):
    return False


def parse(source, probe):
    return iter(())
