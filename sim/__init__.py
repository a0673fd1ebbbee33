"""Simulation: RTL runners, host/memory models and (later) the fabric model."""
