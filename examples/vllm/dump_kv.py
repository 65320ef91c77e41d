#!/usr/bin/env python3
"""Write a kvaudit dump from arrays saved with numpy.save (the command
kvaudit_export.dump_kv, installed as kvaudit-dump-kv by
`pip install ./examples/vllm`). Run with --help for the spec format; without
NumPy, --help says what to install."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kvaudit_export.dump_kv import main  # noqa: E402  (imports without NumPy)

if __name__ == "__main__":
    sys.exit(main(sys.argv))
