"""PLACEHOLDER: being written. Replace this whole file."""

NAME = "openhands"
DESCRIPTION = "(not yet implemented)"


def sniff(probe):
    return False


def parse(source, probe):
    return iter(())
