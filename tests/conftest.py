"""Suite-wide pytest hooks.

Slow tests (``@pytest.mark.slow``: long cocotb runs; later the bitstream build) are
moved to the front of the run, so that with pytest-xdist (``-n auto --dist worksteal``) one
worker starts them at once while the other workers share out the rest of the suite.

Simulator: the co-simulation tests (:data:`VERILATOR_MODULES`) run on Verilator, whose
model of the 2-NIC top is built once (cached, file-locked across workers) and then
simulates ~10x faster than Icarus; every other cocotb test runs on Icarus, whose builds
take a second where a cold Verilator build takes minutes.  ``MRCNIC_SIM=icarus`` or
``MRCNIC_SIM=verilator`` runs the whole suite on one simulator.
"""

import os

import pytest

#: test modules whose simulations pay back a Verilator build (the co-simulation)
VERILATOR_MODULES = {"test_sim", "test_serve", "test_serve_write", "test_serve_mrc",
                     "test_simulators", "test_campaign"}


@pytest.fixture(autouse=True)
def _simulator(request, monkeypatch):
    """``$MRCNIC_SIM`` for the test: as the environment chose, else by module (see above)."""
    if not os.environ.get("MRCNIC_SIM"):
        name = request.module.__name__.rsplit(".", 1)[-1]
        monkeypatch.setenv("MRCNIC_SIM",
                           "verilator" if name in VERILATOR_MODULES else "icarus")


def pytest_collection_modifyitems(config, items):
    """Run ``slow``-marked tests first (stable order otherwise)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
