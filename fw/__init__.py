"""Firmware: register-map client, path provisioning, weight manager."""
