"""The Wireshark Lua dissector of mrcnic's own headers (``mrcnic.lua``), shipped as package data.

``mrcnic.resources.dissector_path()`` gives its installed path; docs/wire-format.md shows
how to load it (``tshark -X lua_script:...``).
"""
