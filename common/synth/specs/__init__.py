"""Shipped machine specs (`<name>.json`), the machines the drivers' tests, examples and benchmarks run on."""
