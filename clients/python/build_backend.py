"""The package's build backend (PEP 517 and PEP 660), on the standard library alone.

setuptools builds a wheel only with the `wheel` package beside it, which Debian's Python has
(python3-wheel) and a Python built from source (pyenv's) does not: there, `pip install
--no-build-isolation` failed with "invalid command 'bdist_wheel'", and without
--no-build-isolation pip asks PyPI for setuptools. This backend needs nothing, so that
`pip install ./clients/python` works offline on any Python 3.9 or later with pip.

A wheel of this package is its modules and three files of metadata (PEP 427): written here.
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "sluice"
SUMMARY = ("Client of sluiced, the sluice rate limit server: checks, acquires, leases, a "
           "decorator and a Celery recipe")
REQUIRES_PYTHON = ">=3.9"
TAG = "py3-none-any"


def _version():
    """The package's __version__, the one place it is written."""
    with open(os.path.join(HERE, NAME, "__init__.py")) as f:
        return re.search(r'^__version__ = "([^"]+)"$', f.read(), re.M).group(1)


def _metadata():
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {_version()}\n"
            f"Summary: {SUMMARY}\nRequires-Python: {REQUIRES_PYTHON}\n")


def _modules():
    """{path in the archive: bytes} of the package's modules."""
    package = os.path.join(HERE, NAME)
    files = {}
    for name in sorted(os.listdir(package)):
        if name.endswith(".py"):
            with open(os.path.join(package, name), "rb") as f:
                files[f"{NAME}/{name}"] = f.read()
    return files


def _write_wheel(directory, files):
    """A wheel of `files` ({path: bytes}) with its metadata, in `directory`; its file name."""
    dist_info = f"{NAME}-{_version()}.dist-info"
    files = dict(files)
    files[f"{dist_info}/METADATA"] = _metadata().encode()
    files[f"{dist_info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: {NAME} build_backend.py\n"
                                   f"Root-Is-Purelib: true\nTag: {TAG}\n").encode()
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}\n")
    files[f"{dist_info}/RECORD"] = ("".join(record) + f"{dist_info}/RECORD,,\n").encode()
    wheel = f"{NAME}-{_version()}-{TAG}.whl"
    with zipfile.ZipFile(os.path.join(directory, wheel), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            z.writestr(path, data)
    return wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, _modules())


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # `pip install -e`: a path file that puts this folder on sys.path, so edits apply at once.
    return _write_wheel(wheel_directory, {f"{NAME}.pth": (HERE + "\n").encode()})


def build_sdist(sdist_directory, config_settings=None):
    base = f"{NAME}-{_version()}"
    files = dict(_modules())
    for name in ("pyproject.toml", "build_backend.py"):
        with open(os.path.join(HERE, name), "rb") as f:
            files[name] = f.read()
    files["PKG-INFO"] = _metadata().encode()
    sdist = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, sdist), "w:gz", format=tarfile.PAX_FORMAT) as t:
        for path, data in sorted(files.items()):
            info = tarfile.TarInfo(f"{base}/{path}")
            info.size = len(data)
            info.mode = 0o644
            t.addfile(info, io.BytesIO(data))
    return sdist
