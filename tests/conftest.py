"""Suite-wide pytest hooks.

Slow tests (``@pytest.mark.slow``: long cocotb runs; later the bitstream build) are
moved to the front of the run, so that with pytest-xdist (``-n auto --dist worksteal``) one
worker starts them at once while the other workers share out the rest of the suite.
"""


def pytest_collection_modifyitems(config, items):
    """Run ``slow``-marked tests first (stable order otherwise)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
