"""mrcnic: an open NIC for MRC (Multipath Reliable Connection).

Sub-packages (each mapped from a top-level folder of the repository):

- :mod:`mrcnic.rtl`    Amaranth components of the NIC (``rtl/``).
- :mod:`mrcnic.sim`    simulation runners and models (``sim/``).
- :mod:`mrcnic.fw`     firmware (``fw/``).
- :mod:`mrcnic.boards` board platforms and bitstream builds (``boards/``).

Modules of this package proper:

- :mod:`mrcnic.wire`   the wire format: Scapy layers, uSID carriers, ICRC.
- :mod:`mrcnic.config` the NIC configuration file (TOML) loader.
- :mod:`mrcnic.cli`    the ``mrcnic`` command line.
"""

__version__ = "0.1.0"
