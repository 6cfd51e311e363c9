from eegformer_cli.cli.app import main

main()
