"""PLACEHOLDER: being written. Replace this whole file."""

NAME = "block-trace"
DESCRIPTION = "(not yet implemented)"


def sniff(probe):
    return False


def parse(source, probe):
    return iter(())
