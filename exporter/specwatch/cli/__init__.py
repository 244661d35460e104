"""The command line: `specwatch` and its core subcommands (main), the demo (demo). The lesson's,
the simulator's and backtest's subcommands come from their own packages' add_parsers."""
