"""The command-line front end: one module per `python -m needle` subcommand, each with
`add_arguments(parser)` and `run(args)`, so the logic is reusable from Python."""
