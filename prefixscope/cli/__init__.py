"""The command line: one module per command (parse options -> one core call -> one view),
plus the shared options, output streams and store opening."""
