"""Numeric kernels over whole arrays: numba walks and gathers, CRC32, SHA-256, Arrow buffer access,
memory settings and row grouping. Over ``format`` only.
"""
