"""The fixtures of the import tests: small COCO and YOLO exports (tests/data/exports.py)."""

from tests.data.exports import coco, exports, yolo  # noqa: F401 (fixtures for this folder's tests)
