"""The control-plane tier. The `control_plane` fixture is defined in fixtures.py and loaded as a
plugin by tests/conftest.py, so tests in every folder share one session-wide instance."""
