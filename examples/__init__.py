"""Example NIC configurations (TOML), shipped as package data of ``mrcnic.examples``.

Read them through :mod:`mrcnic.resources` (``resource_text("examples/two_nics.toml")``);
``docs/config.md`` describes the format.
"""
