"""Tests of the cpu.topodra.io driver."""
