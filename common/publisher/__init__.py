"""ResourceSlice publisher: every driver's devices on the API server, correct, current and cheap.

Pure parts (validation, chunking, naming, sync planning) are separate from the side effects (the
API layer and the publisher's threads) so that `topodra slices` and the tests run them without a
cluster.
"""
