"""The command-line interface: argument parsing and printing only; each subcommand calls the
function of the same name in :mod:`eegformer_cli.commands`, where the work is done."""
