"""Stage 1 — what the user points at: detect the kind of a path, refuse unsafe graphs, load it.

``records`` holds what the stage hands on (ArtifactRef, Signature, Artifact); ``kinds`` decides
which kind a path holds without loading it; ``loader`` loads a checkpoint,
a SavedModel (TF2 functions inlined by ``tf2_inline``) or a GraphDef; ``graph`` builds the op
graph and borrows a signature for a side without one; ``safety`` checks every op against the
allow-list ``safe_ops`` (generated from TensorFlow's registry by ``safe_ops_gen``); ``bundle``
reads a checkpoint's tensors without TensorFlow (what a compare needs of a weight it kept only
by digest).
"""
