"""Build of the compiled fair-share kernels; everything else is in pyproject.toml.

The extension is optional: without a C compiler the package installs and runs on the numpy reference
implementation of the same passes (pooltree/fairshare/functions.py), only slower.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "pooltree.fairshare._kernels",
            ["pooltree/fairshare/_kernels.c"],
            extra_compile_args=["-O2", "-std=c11"],
            optional=True,
        )
    ]
)
