"""The ``libreyolo`` command line: argument parsing -> API call -> error mapping, nothing else."""
