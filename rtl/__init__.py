"""Amaranth components of the MRC NIC (see docs/architecture.md)."""
