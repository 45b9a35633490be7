"""CUDA C++ sources of the cupy backend, shipped inside the package.

They are compiled at run time by NVRTC through ``cupy.RawModule``; this file
only makes the folder a package so ``importlib.resources`` can find them.
"""
