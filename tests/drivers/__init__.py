"""Tests of the three drivers."""
