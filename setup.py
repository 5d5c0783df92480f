"""Shim for tools that still call setup.py; configuration is in setup.cfg."""

import setuptools

setuptools.setup()
