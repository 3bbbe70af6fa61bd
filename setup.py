"""Build the optional C record walker (parsers/columnar/_walk.c); everything else is in setup.cfg.

The extension is optional: where it cannot be compiled (no C compiler), the install goes on and
parsers/columnar/accel.py uses the pure-Python loops, which give the same tables more slowly.
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("parsers.columnar._walk", ["parsers/columnar/_walk.c"], optional=True,
                             extra_compile_args=["-O2"]),
                   Extension("xlayer.metrics._tcpk", ["xlayer/metrics/_tcpk.c"], optional=True, extra_compile_args=["-O2"])])
