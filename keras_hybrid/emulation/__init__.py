"""Hosts and links emulated on this machine, for tests and benchmarks.

Network namespaces on a bridge with `tc` rate limits (`network`), and
emulated hosts that run sshd (`hosts`). Needs root; the runtime never
imports it.
"""
