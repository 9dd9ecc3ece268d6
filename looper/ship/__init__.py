"""The detector shipped: a run's hash-verified weights as an Ultralytics checkpoint or ONNX (export.py), and the
`looper export` command (cli.py). docs/SHIPPING.md."""
