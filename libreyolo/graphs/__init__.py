"""CUDA graphs: prediction runner, training capture, seams and the parity harness."""
