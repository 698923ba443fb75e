"""Serve requests from an export in a FRESH process that imports only tensorflow and tensorflow_text (what a
server has): the check that a SavedModel stands alone, shared by the serving tests."""

import json
import os
import subprocess
import sys
from typing import Dict, Tuple

import numpy as np

RELOAD = r'''
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)
path, inputs_file, out_file, errors_file = sys.argv[1:]
loaded = tf.saved_model.load(path)
out, errors = {}, {}
for name, request in json.load(open(inputs_file)).items():
    dtypes = request.get("dtypes", {})
    tensors = {k: tf.constant(v, dtype=dtypes.get(k, "string")) for k, v in request["args"].items()}
    try:
        result = loaded.signatures[request["signature"]](**tensors)
    except (tf.errors.InvalidArgumentError, ValueError, TypeError) as e:
        errors[name] = str(e)
        continue
    for key, value in result.items():
        value = value.numpy()
        out[f"{name}/{key}"] = value.astype("S") if value.dtype == object else value
np.savez(out_file, **out)
json.dump(errors, open(errors_file, "w"))
'''


def serve(path: str, requests: Dict[str, dict], workdir) -> Tuple[Dict[str, np.ndarray], Dict[str, str]]:
    """Runs every request `{name: {"signature", "args": {input: JSON value}, "dtypes": {input: dtype}}}` (string
    inputs by default) against the export at `path` in one fresh process; returns `(outputs "<name>/<key>" ->
    array, errors name -> message)`."""
    workdir = str(workdir)
    os.makedirs(workdir, exist_ok=True)
    script, inputs = os.path.join(workdir, "reload.py"), os.path.join(workdir, "requests.json")
    out_file, errors_file = os.path.join(workdir, "out.npz"), os.path.join(workdir, "errors.json")
    with open(script, "w") as f:
        f.write(RELOAD)
    with open(inputs, "w") as f:
        json.dump(requests, f)
    proc = subprocess.run([sys.executable, script, path, inputs, out_file, errors_file], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ""},
                          cwd=workdir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(errors_file) as f:
        errors = json.load(f)
    return dict(np.load(out_file, allow_pickle=False)), errors
