"""The `dra-extender` subcommands, one module each (`register(subparsers)` adds its parser).

With the modules at extender's top level (cli, wiring, eventloop) they are the composition root: they
may import every room, and no room imports them.
"""
