"""Ground truth on the GPU for the MobileNet-style fixture: plain tf.compat.v1 sessions, one fresh
process per run, nothing of tftrace. Usage: python truth.py MODELS_DIR OUT_JSON"""
import json, os, subprocess, sys
import numpy as np

CHILD = r'''
import os, sys, numpy as np
import tensorflow as tf
kind, path, npz, out, det = sys.argv[1:6]
if det == "1": tf.config.experimental.enable_op_determinism()
tf.compat.v1.disable_eager_execution()
images = np.load(npz)["images"]
with tf.compat.v1.Session(graph=tf.Graph()) as s:
    if kind == "ckpt":
        meta = [f for f in os.listdir(path) if f.endswith(".meta")][0]
        saver = tf.compat.v1.train.import_meta_graph(os.path.join(path, meta))
        saver.restore(s, os.path.join(path, meta[:-5]))
        x, y = "images:0", None
        names = [n.name for n in s.graph.as_graph_def().node]
        y = sys.argv[6]
    else:
        mg = tf.compat.v1.saved_model.loader.load(s, ["serve"], path)
        sig = mg.signature_def["serving_default"]
        x = sig.inputs["images"].name; y = sig.outputs["scores"].name
    r = s.run(y, {x: images})
    print("SCORES_TENSOR", y)
    np.save(out, r)
'''

def run(kind, path, npz, out, env, det="0", ytensor="scores:0"):
    e = {**os.environ, **env}
    p = subprocess.run([sys.executable, "-c", CHILD, kind, path, npz, out, det, ytensor], env=e,
                       capture_output=True, text=True)
    if p.returncode:
        print(p.stderr[-3000:]); raise SystemExit(1)
    return np.load(out)

m, outj = sys.argv[1], sys.argv[2]
b8, b1 = f"{m}/images_b8.npz", f"{m}/images_b1.npz"
# the signature's scores tensor name, for the checkpoint
ON, OFF = {"TF_CUDNN_USE_AUTOTUNE": "1"}, {"TF_CUDNN_USE_AUTOTUNE": "0"}
sm = lambda env, tag, **k: run("sm", f"{m}/savedmodel", k.get("npz", b8), f"/tmp/t_{tag}.npy", env, k.get("det", "0"))
facts = {}
r = [sm(ON, f"on{i}") for i in range(4)]
facts["savedmodel_fresh_process_autotune_on_max_abs_vs_run0"] = [float(np.abs(r[0] - x).max()) for x in r[1:]]
r = [sm(OFF, f"off{i}") for i in range(2)]
facts["savedmodel_fresh_process_autotune_off_max_abs"] = float(np.abs(r[0] - r[1]).max())
# the checkpoint's scores tensor: same graph as the savedmodel's
name = None
for line in subprocess.run([sys.executable, "-c", CHILD, "sm", f"{m}/savedmodel", b8, "/tmp/x.npy", "0"], capture_output=True, text=True, env={**os.environ, **OFF}).stdout.splitlines():
    if line.startswith("SCORES_TENSOR"): name = line.split()[1]
ck = run("ckpt", f"{m}/ckpt", b8, "/tmp/t_ck.npy", OFF, "0", name)
facts["ckpt_vs_savedmodel_autotune_off_max_abs"] = float(np.abs(ck - r[0]).max())
fo = run("sm", f"{m}/folded", b8, "/tmp/t_fo.npy", OFF)
facts["ckpt_vs_folded_autotune_off_max_abs"] = float(np.abs(ck - fo).max())
d8 = sm({}, "d8", det="1"); d1 = sm({}, "d1", det="1", npz=b1)
facts["batch1_vs_8_determinism_row0_max_abs"] = float(np.abs(d8[:1] - d1).max())
d8b = sm({}, "d8b", det="1")
facts["determinism_fresh_process_max_abs"] = float(np.abs(d8 - d8b).max())
print(json.dumps(facts, indent=1)); json.dump(facts, open(outj, "w"), indent=1)
