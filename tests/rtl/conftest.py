"""Block-level cocotb testbenches run on Icarus unless ``$MRCNIC_SIM`` says otherwise.

Their designs are small and their runs short: Icarus compiles one in about a second,
while a cold Verilator build (g++) takes tens of seconds and its faster simulation never
pays that back here.  ``MRCNIC_SIM=verilator pytest tests/rtl`` runs them on Verilator.
"""

import os

import pytest


@pytest.fixture(autouse=True)
def _block_tests_simulator(monkeypatch):
    """``$MRCNIC_SIM`` = icarus for the test unless the environment already chose."""
    if not os.environ.get("MRCNIC_SIM"):
        monkeypatch.setenv("MRCNIC_SIM", "icarus")
