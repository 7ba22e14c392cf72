"""The benchmark harness of issue 6: `make bench` or `python -m benchmarks [--quick]`."""
