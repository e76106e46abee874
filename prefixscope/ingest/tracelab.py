"""PLACEHOLDER: being written. Replace this whole file."""

NAME = "tracelab"
DESCRIPTION = "(not yet implemented)"


def sniff(probe):
    return False


def parse(source, probe):
    return iter(())
