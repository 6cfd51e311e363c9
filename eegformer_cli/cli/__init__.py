"""The command-line interface: argument parsing only; the work lives in the other packages."""
