"""What stage 1 hands on: the reference a user typed, a signature, a loaded artifact.

These records are shared by the loader (:mod:`tracer.artifacts.loader`), the TF2 inliner
(:mod:`tracer.artifacts.tf2_inline`) and the op-graph builder (:mod:`tracer.artifacts.graph`),
and by every later stage that names an artifact; they live apart from the loading code so that
those modules import them without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from .._tf import tf
from ..errors import TftraceError

if TYPE_CHECKING:  # numpy only where a value is read: the CLI's parser imports these records
    import numpy as np

__all__ = ["TensorSpec", "Signature", "ArtifactRef", "Artifact", "signature_keys", "USER_SIGNATURE", "KIND_LABELS",
           "kind_label"]

USER_SIGNATURE = "(from --outputs)"  # the key of a signature made of tensors the user named

# An artifact's kind (report.json's and the manifest's key, a contract) in a reader's words. A
# "TF1-style" SavedModel has no object graph: written by TF1, or by tf.compat.v1's builder.
KIND_LABELS: dict[str, str] = {
    "checkpoint": "TF1 checkpoint",
    "saved_model_v1": "TF1-style SavedModel",
    "saved_model_v2": "TF2 SavedModel",
    "graphdef": "frozen GraphDef",
}


def kind_label(kind: object) -> str:
    """``TF2 SavedModel``; a kind this release does not know (a newer capture's) as it is spelled."""
    return KIND_LABELS.get(str(kind), str(kind or "—"))


@dataclass(frozen=True)
class TensorSpec:
    """One signature input or output: the graph tensor it names, its dtype and static shape."""

    name: str  # "images:0"
    dtype: str  # "float32", "string", ...
    shape: tuple[int | None, ...] | None  # None = unknown rank

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": None if self.shape is None else list(self.shape)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TensorSpec:
        shape = d.get("shape")
        return cls(d["name"], d["dtype"], None if shape is None else tuple(shape))


@dataclass(frozen=True)
class Signature:
    """The inputs and outputs to trace, keyed the way the SignatureDef keys them."""

    key: str
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]
    method_name: str = ""
    from_user: bool = False  # built from --outputs/--input-names rather than a SignatureDef
    borrowed_from: str = ""  # the other side's artifact, when this graph had none of its own

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "method_name": self.method_name,
            "from_user": self.from_user,
            "borrowed_from": self.borrowed_from,
            "inputs": {k: v.to_json() for k, v in self.inputs.items()},
            "outputs": {k: v.to_json() for k, v in self.outputs.items()},
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Signature:
        return cls(
            key=d["key"],
            method_name=d.get("method_name", ""),
            from_user=bool(d.get("from_user", False)),
            borrowed_from=str(d.get("borrowed_from", "")),
            inputs={k: TensorSpec.from_json(v) for k, v in d["inputs"].items()},
            outputs={k: TensorSpec.from_json(v) for k, v in d["outputs"].items()},
        )


@dataclass(frozen=True)
class ArtifactRef:
    """What the user typed: enough to load the same artifact again in a child process."""

    path: str
    tag: str = "serve"  # comma-separated tag set of a SavedModel
    signature: str = "serving_default"
    outputs: tuple[str, ...] = ()  # --outputs, for graphs without a signature
    input_names: tuple[str, ...] = ()  # --input-names
    # The other side of a comparison: where a graph without a signature borrows one (a TF1
    # training checkpoint compared with the SavedModel exported from it).
    signature_from: ArtifactRef | None = None
    # That borrowed signature once resolved in this graph, so replays need not load the other side.
    borrowed: Signature | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "path": self.path,
            "tag": self.tag,
            "signature": self.signature,
            "outputs": list(self.outputs),
            "input_names": list(self.input_names),
        }
        if self.signature_from is not None:
            doc["signature_from"] = self.signature_from.to_json()
        if self.borrowed is not None:
            doc["borrowed"] = self.borrowed.to_json()
        return doc

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ArtifactRef:
        return cls(
            path=d["path"],
            tag=d.get("tag", "serve"),
            signature=d.get("signature", "serving_default"),
            outputs=tuple(d.get("outputs", ())),
            input_names=tuple(d.get("input_names", ())),
            signature_from=ArtifactRef.from_json(d["signature_from"]) if d.get("signature_from") else None,
            borrowed=Signature.from_json(d["borrowed"]) if d.get("borrowed") else None,
        )

    def lender(self) -> ArtifactRef:
        """This artifact as the one another side borrows a signature from (never a chain)."""
        return replace(self, signature_from=None, borrowed=None)




@dataclass
class Artifact:
    """A loaded artifact: the graph to run, what to feed and fetch, and where weights come from.

    ``graph_def`` is the graph as it will be imported for running (for a TF2 SavedModel: the
    inlined, frozen signature function). ``meta_graph`` is set for checkpoints and TF1
    SavedModels, whose collections (saver, variables) are needed to restore weights.
    """

    ref: ArtifactRef
    kind: str  # "checkpoint" | "saved_model_v1" | "saved_model_v2" | "graphdef"
    location: str  # the resolved path that was loaded (prefix, version dir, file)
    graph_def: Any  # tf GraphDef
    meta_graph: Any | None
    signature: Signature | None
    available_signatures: dict[str, list[str]] = field(default_factory=dict)  # tag set -> keys
    checkpoint_prefix: str | None = None
    tf_version_written: str = ""
    inlined_by_loader: bool = False  # TF2: tftrace inlined the signature function (adds Identity plumbing)
    control_flow_lowered: bool = False  # TF1: its If/While ops lowered as TF runs them (meta_graph is the lowered one)
    variable_values: dict[str, np.ndarray] = field(default_factory=dict)  # TF2: values of the inlined variables
    table_values: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # TF2: (keys, values)
    # TF2: (function, "RaggedTensor" | "SparseTensor") for each function the signature calls with a composite
    # tensor, which the signature flattens into inputs that hold no row per example (tf2_functions.composite_arguments)
    composite_arguments: list[tuple[str, str]] = field(default_factory=list)
    # TF2: the ``api_implements`` names the library holds a GPU implementation of (a Keras 2 LSTM/GRU's cuDNN
    # path), which Grappler's implementation selector swaps in where the call runs on a GPU (tf2_inline)
    gpu_alternatives: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    _reader: Any = None

    def variable_value(self, name: str) -> np.ndarray | None:
        """Value of a variable (by node name or checkpoint key), or None if unknown."""
        if name in self.variable_values:
            return self.variable_values[name]
        if self.checkpoint_prefix is None:
            return None
        reader = self._checkpoint_reader()
        for key in (name, name.split(":")[0]):
            if reader.has_tensor(key):
                import numpy as np  # noqa: PLC0415

                return np.asarray(reader.get_tensor(key))
        return None

    def checkpoint_keys(self) -> set[str]:
        """Every key the artifact's checkpoint holds (its index: nothing is read), the variables its
        inference graph does not use included (optimizer slots, moving averages); empty without one."""
        if self.checkpoint_prefix is None:
            return set()
        return set(self._checkpoint_reader().get_variable_to_shape_map())

    def _checkpoint_reader(self) -> Any:
        if self._reader is None:
            try:  # not tf.train.load_checkpoint: on ram:// it takes the prefix for a directory
                self._reader = tf().compat.v1.train.NewCheckpointReader(self.checkpoint_prefix)
            except Exception as exc:  # TF raises DataLossError, NotFoundError, ... for damaged files
                raise TftraceError(
                    f"cannot read the weights of {self.checkpoint_prefix}: {str(exc).splitlines()[0][:300]}",
                    "re-copy the checkpoint's .index and .data-* files",
                ) from exc
        return self._reader

    def describe(self) -> str:
        sig = f", signature {self.signature.key!r}" if self.signature else ""
        return f"{kind_label(self.kind)} at {self.location}{sig}"


def signature_keys(meta: Any) -> list[str]:
    """The signatures a user can choose; TF2's ``__saved_model_init_op`` only initialises tables."""
    return sorted(k for k in meta.signature_def if k != "__saved_model_init_op")
