"""`pip install ./examples/vllm` into a fresh virtual environment, without
the network, and what the installed package offers; dump_kv.py without
NumPy.

The virtual environment sees the system's site packages
(--system-site-packages: NumPy, PyTorch from Debian's python3-numpy and
python3-torch) and installs with `pip install --no-index
--no-build-isolation` (setuptools from the venv, wheel from python3-wheel).
The package is copied to a temporary directory first, so that the build
leaves nothing in the source tree.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
KVAUDIT = os.environ.get("KVAUDIT_BIN", "")


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


class TestInstall(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="kvaudit-install-")
        src = os.path.join(cls.tmp.name, "src")
        os.makedirs(src)
        for name in ("pyproject.toml", "README.md"):  # what a clone holds
            shutil.copy(os.path.join(PKG, name), src)
        shutil.copytree(os.path.join(PKG, "kvaudit_export"), os.path.join(src, "kvaudit_export"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        cls.venv = os.path.join(cls.tmp.name, "venv")
        p = run([sys.executable, "-m", "venv", "--system-site-packages", cls.venv])
        if p.returncode != 0:
            raise RuntimeError(f"python3 -m venv failed (install python3-venv): {p.stdout}{p.stderr}")
        cls.py = os.path.join(cls.venv, "bin", "python")
        env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
        p = run([cls.py, "-m", "pip", "install", "--no-index", "--no-build-isolation", src], env=env)
        if p.returncode != 0:
            raise RuntimeError(f"pip install failed (python3-wheel, python3-numpy installed?):\n{p.stdout}{p.stderr}")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_installed_modules_and_entry_points(self):
        code = ("import json, importlib.metadata as md, kvaudit_export, kvaudit_export.connector as c, "
                "kvaudit_export.nixl_log as n; "
                "print(json.dumps({'file': kvaudit_export.__file__, 'connector': c.KvauditConnector.__name__, "
                "'plugins': [e.value for e in md.entry_points(group='vllm.general_plugins')], "
                "'scripts': [e.value for e in md.entry_points(group='console_scripts') if e.name == 'kvaudit-dump-kv'], "
                "'requires': md.requires('kvaudit-vllm'), "
                "'description': md.metadata('kvaudit-vllm').get_payload() or md.metadata('kvaudit-vllm')['Description']}))")
        p = run([self.py, "-c", code], cwd=self.tmp.name)
        self.assertEqual(p.returncode, 0, p.stderr)
        got = json.loads(p.stdout)
        self.assertTrue(got["file"].startswith(self.venv), got["file"])  # the installed copy, not the tree
        self.assertEqual(got["connector"], "KvauditConnector")
        self.assertEqual(got["plugins"], ["kvaudit_export.nixl_log:register"])
        self.assertEqual(got["scripts"], ["kvaudit_export.dump_kv:main"])
        self.assertIn("numpy", got["requires"])
        # The vLLM commits it targets travel in the package's metadata (its README).
        for commit in ("9aaf83ef5", "e78684ecbf33", "71bbe3910b5c", "ca3221eb3513"):
            self.assertIn(commit, got["description"])
        self.assertTrue(any(r.startswith("torch") and "extra" in r for r in got["requires"]), got["requires"])

    def test_console_script_writes_a_dump(self):
        script = os.path.join(self.venv, "bin", "kvaudit-dump-kv")
        p = run([script, "--help"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("usage: kvaudit-dump-kv spec.json out.safetensors", p.stdout)
        d = os.path.join(self.tmp.name, "run")
        os.makedirs(d)
        # One FlashAttention layer, bf16 bits as uint16: 4 blocks of 16 tokens, 2 heads of 8.
        code = ("import numpy as np, json, sys; d = sys.argv[1]; "
                "np.save(d + '/l0.npy', (np.arange(2 * 4 * 16 * 2 * 8) % 65521).astype(np.uint16).reshape(2, 4, 16, 2, 8)); "
                "json.dump({'kv_cache_config': {'num_blocks': 4, 'kv_cache_groups': [{'layer_names': "
                "['model.layers.0.self_attn.attn'], 'kv_cache_spec': {'type': 'FullAttentionSpec', 'block_size': 16, "
                "'num_kv_heads': 2, 'head_size': 8, 'dtype': 'bfloat16'}}]}, 'kv_caches': "
                "{'model.layers.0.self_attn.attn': 'l0.npy'}, 'requests': [{'id': 'r', 'num_tokens': 20, "
                "'block_ids': [[3, 1]]}], 'agent': 'agent-0'}, open(d + '/spec.json', 'w'))")
        p = run([self.py, "-c", code, d])
        self.assertEqual(p.returncode, 0, p.stderr)
        out = os.path.join(d, "rank-0-0.safetensors")
        p = run([script, os.path.join(d, "spec.json"), out])
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(out, "rb") as f:
            header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
        manifest = json.loads(header["__metadata__"]["kvaudit.manifest"])
        self.assertEqual(manifest["parallel"]["agent"], "agent-0")
        self.assertEqual(header["model.layers.0.self_attn.attn"]["shape"], [2, 2, 16, 2, 8])
        if KVAUDIT:
            p = run([KVAUDIT, "checksum", "-o", "json", out])
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(json.loads(p.stdout)["requests"][0]["id"], "r")


class TestWithoutNumPy(unittest.TestCase):
    """dump_kv.py in a Python that lacks NumPy (a virtual environment without
    the system's site packages) says what to install, without a traceback."""

    def test_help_and_run(self):
        with tempfile.TemporaryDirectory(prefix="kvaudit-nonumpy-") as tmp:
            venv = os.path.join(tmp, "venv")
            p = run([sys.executable, "-m", "venv", "--without-pip", venv])
            self.assertEqual(p.returncode, 0, p.stderr)
            py = os.path.join(venv, "bin", "python")
            self.assertNotEqual(run([py, "-c", "import numpy"]).returncode, 0, "this venv should lack NumPy")
            script = os.path.join(PKG, "dump_kv.py")
            p = run([py, script, "--help"])
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("usage: dump_kv.py spec.json out.safetensors", p.stdout)
            self.assertIn("pip install numpy", p.stdout)
            self.assertIn("python3-numpy", p.stdout)
            p = run([py, script, "spec.json", "out.safetensors"])
            self.assertEqual(p.returncode, 3)
            self.assertIn("needs NumPy", p.stderr)
            for text in (p.stdout, p.stderr):
                self.assertNotIn("Traceback", text)


if __name__ == "__main__":
    unittest.main()
