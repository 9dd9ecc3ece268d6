"""Makes every download fail loudly in the process that imports it (put this folder on PYTHONPATH).

Ultralytics binds its download functions by name across its modules (``from ultralytics.utils.downloads import
attempt_download_asset``), so they are replaced in ``ultralytics.utils.downloads`` as that module finishes
executing, before any other module can bind them; any socket connection beyond loopback fails the same way.
Each attempt appends one line to ``$LOOPER_GUARD_LOG`` (the test reads it: an attempt that a caller swallowed
still shows) and raises :class:`DownloadAttempted`. ``attempt_download_asset`` of a file that exists is let
through: Ultralytics calls it on every local checkpoint it loads and returns the path without a download.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import socket
import sys

DOWNLOADS = ("safe_download", "attempt_download_asset", "download", "get_github_assets", "get_google_drive_file_info")


class DownloadAttempted(RuntimeError):
    pass


def _attempt(what: str) -> None:
    with open(os.environ.get("LOOPER_GUARD_LOG", os.devnull), "a") as f:
        f.write(what + "\n")
    raise DownloadAttempted(f"DOWNLOAD ATTEMPTED: {what}")


def _refuse(name: str, real):  # noqa: ANN001, ANN202
    def refused(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        if name == "attempt_download_asset" and args and os.path.exists(str(args[0]).strip()):
            return real(*args, **kwargs)  # a file that is here: Ultralytics returns its path, nothing downloaded
        _attempt(f"ultralytics.utils.downloads.{name}{args[:2]!r}")
    return refused


class _PatchDownloads(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):  # noqa: ANN001, ANN201
        if name != "ultralytics.utils.downloads":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        self._real = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):  # noqa: ANN001, ANN201
        return self._real.create_module(spec)

    def exec_module(self, module):  # noqa: ANN001, ANN201
        self._real.exec_module(module)
        for name in DOWNLOADS:
            if hasattr(module, name):
                setattr(module, name, _refuse(name, getattr(module, name)))


_connect = socket.socket.connect


def _guarded_connect(self, address):  # noqa: ANN001, ANN202
    host = address[0] if isinstance(address, tuple) else address
    if self.family in (socket.AF_INET, socket.AF_INET6) and host not in ("127.0.0.1", "::1", "localhost"):
        _attempt(f"socket connect to {address!r}")
    return _connect(self, address)


sys.meta_path.insert(0, _PatchDownloads())
socket.socket.connect = _guarded_connect
