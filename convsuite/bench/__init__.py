"""Measuring convsuite: timing helpers, the seed workloads, target checks."""
