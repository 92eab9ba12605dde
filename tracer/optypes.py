"""Every list of TensorFlow op types tftrace reasons about, in one place, each saying what it is for.

Op types are TensorFlow's names (``NodeDef.op``); a list here is a fact about TensorFlow's ops
(what an op does to a value, to a while-loop frame, to state kept between runs), so every
stage reads it from here rather than writing its own. Lists that are a *policy* rather than a
fact stay with the policy: the generated allow-list of ops safe to load
(:mod:`tracer.artifacts.safe_ops`) and the reasons the safety check gives per op
(:mod:`tracer.artifacts.safety`).

Adding an op type: find the list whose comment says what the op does, add it there; a list
that is a union of others (e.g. :data:`WEIGHT_OPS`) follows by itself.
"""

from __future__ import annotations

__all__ = [
    "VARIABLE_OPS", "WEIGHT_OPS", "PASS_THROUGH", "WEIGHT_SOURCES", "PLACEHOLDER_OPS", "CHAIN_BOUNDARY_OPS",
    "BATCH_NORM_OPS", "LINEAR_OPS", "FUSED_OP_PREFIXES", "FUSED_OPS", "RESIZE_FUSED_CONV_FILTER", "is_fused_op",
    "FRAME_OPS", "EXIT_OPS", "LOOP_BACK_EDGE_OPS", "SWITCH_OPS", "MERGE_OPS", "LOOP_COND_OP",
    "TENSOR_ARRAY_FLOW_INPUT", "FLOW_CARRIERS", "TENSOR_ARRAY_READ_OPS", "TENSOR_LIST_READ_OPS", "loop_result",
    "SHAPE_OPS", "SHAPE_READERS", "OFFSET_CARRIERS", "MAYBE_UNCHANGED_OPS",
    "SOURCE_OPS", "STATE_CHANGING_OPS", "STATE_CHANGING_PREFIXES", "OPTIMIZER_UPDATE_PREFIXES", "REF_PASSING_OPS",
    "changes_state", "applies_gradients", "RANDOM_OPS", "STATEFUL_RANDOM_PREFIXES", "draws_random", "SUMMARY_OPS",
    "BOOKKEEPING_OPS", "RUNTIME_PLUMBING", "VALUE_SIZED_OPS", "VALUE_SIZED_BY",
]

# ---- variables, weights and what reads them -------------------------------------------------

# Ops that own a variable (TF1 ref variables, TF2 resource handles): their value comes from a
# checkpoint, so it is compared by value, never by the op that holds it.
VARIABLE_OPS = frozenset({"VariableV2", "Variable", "VarHandleOp"})
# Ops that hold a weight: a variable, or a constant (what freezing turns a variable into).
WEIGHT_OPS = VARIABLE_OPS | {"Const"}
# Ops that pass a value through unchanged, a variable read included: inlining and export add,
# drop and swap them (TF1 ``w/read`` Identity vs TF2 ReadVariableOp), so graph matching and the
# diff look through them. (Was written twice: graphdiff.PASS_THROUGH and graphmatch.PLUMBING,
# the same three ops.) Reading a variable through one of them reads its loaded value.
PASS_THROUGH = frozenset({"Identity", "Snapshot", "ReadVariableOp"})
# Ops that can stand for one weight on either side of two exports (a variable, the constant it
# was frozen into, or a read of either): matched to each other by structure; and the ops whose
# value does not depend on the feed when they have no inputs (fetched once per capture).
WEIGHT_SOURCES = VARIABLE_OPS | {"Const", "Identity", "ReadVariableOp"}
# Ops whose value the caller feeds (one with a default may also be left unfed).
PLACEHOLDER_OPS = frozenset({"Placeholder", "PlaceholderWithDefault"})
# Ops a fused chain never extends over: weights, their reads, and the graph's inputs.
CHAIN_BOUNDARY_OPS = WEIGHT_OPS | PASS_THROUGH | {"Placeholder"}

# ---- export rewrites -------------------------------------------------------------------------

# Batch norms an export may fold into the linear op before them (rescaling its weights).
BATCH_NORM_OPS = frozenset({"FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3", "BatchNormWithGlobalNormalization"})
# Linear ops a batch norm can be folded into.
LINEAR_OPS = frozenset({"Conv2D", "Conv3D", "DepthwiseConv2dNative", "MatMul", "BatchMatMulV2"})
# Ops that replace a chain of ops by one kernel: Grappler's remapper (``_Fused*``), oneDNN's
# (``_MklFused*``, ``_MklNativeFused*``), and TF-TRT/contrib's fused conv.
FUSED_OP_PREFIXES = ("_Fused", "_MklFused", "_MklNativeFused")
# optimize_for_inference's fuse_resize_and_conv: a resize (and pad) folded into the conv, which has
# no half_pixel_centers (the resize it computes may be another one) -> the index of its filter input
RESIZE_FUSED_CONV_FILTER = {"FusedResizeAndPadConv2D": 3, "FusedPadConv2D": 2}
FUSED_OPS = frozenset({"FusedConv2DBiasActivation", *RESIZE_FUSED_CONV_FILTER})


def is_fused_op(op_type: str) -> bool:
    """Whether ``op_type`` is one kernel standing for a chain of ops (see :data:`FUSED_OP_PREFIXES`)."""
    return op_type.startswith(FUSED_OP_PREFIXES) or op_type in FUSED_OPS


# ---- TF1 control flow --------------------------------------------------------------------------

# Where a TF1 while-loop frame begins: everything reached from them runs inside the frame.
FRAME_OPS = frozenset({"Enter", "RefEnter"})
# Where a while-loop frame ends: the loop's result, fetchable again.
EXIT_OPS = frozenset({"Exit", "RefExit"})
# The back edge of a TF1 while loop: its only cycle, left out of every topological order.
LOOP_BACK_EDGE_OPS = frozenset({"NextIteration", "RefNextIteration"})
# A cond's (or a loop's) branch point, and where branches join again.
SWITCH_OPS = frozenset({"Switch", "RefSwitch"})
MERGE_OPS = frozenset({"Merge", "RefMerge"})
# The predicate of a while loop: a Switch reading it is the loop's, not a cond's.
LOOP_COND_OP = "LoopCond"

# ---- TensorArrays and TensorLists: the data a loop leaves behind -------------------------------

# TF1 TensorArray ops -> the index of their ``flow_in`` input (the last one, but for
# GradWithShape). The flow is a dummy float scalar that only orders the reads after the writes:
# the values live in the TensorArray behind the handle, written inside a while loop. Feeding a
# flow (its value has an A counterpart, as the loop's Exit) skips the writes, so a replay would
# read a freshly created, empty TensorArray ("Could not read from TensorArray index 0"); and
# identical flows say nothing about the data behind them.
TENSOR_ARRAY_FLOW_INPUT: dict[str, int] = {
    **{f"TensorArray{kind}{version}": -1 for kind in ("Read", "Gather", "Concat", "Size", "Write", "Scatter",
                                                      "Split", "Grad") for version in ("V2", "V3")},
    "TensorArrayGradWithShape": 1,
}
# Ops that pass a flow on unchanged, between its TensorArray op and its readers: the loop's frame
# ops (input index -> carries, None = every input; a Switch's predicate is no flow) and identities.
FLOW_CARRIERS: dict[str, frozenset[int] | None] = {
    **dict.fromkeys(("Enter", "RefEnter", "Exit", "RefExit", "Merge", "RefMerge", "NextIteration",
                     "RefNextIteration", "Identity", "RefIdentity", "Snapshot"), None),
    **dict.fromkeys(("Switch", "RefSwitch"), frozenset({0})),
}
# Ops that read the values a loop wrote into a TensorArray (TF1) or a TensorList (TF2's
# functional loops): their result is the loop's, as an Exit's is.
TENSOR_ARRAY_READ_OPS = frozenset({f"TensorArray{kind}{version}" for kind in ("Read", "Gather", "Concat")
                                   for version in ("V2", "V3")})
TENSOR_LIST_READ_OPS = frozenset({"TensorListStack", "TensorListGather", "TensorListGetItem", "TensorListConcatV2"})


def loop_result(op_type: str) -> str:
    """How an op's result comes out of a while loop, as words that finish "the while loop …":
    ``"ending here"`` for an Exit, ``"that filled its TensorArray"`` for a TensorArray (or
    TensorList) reader; "" for any other op. Isolating such an op replays the whole loop (a
    session cannot fetch the ops inside one), so what differs given identical inputs is the loop."""
    if op_type in EXIT_OPS:
        return "ending here"
    if op_type in TENSOR_ARRAY_READ_OPS:
        return "that filled its TensorArray"
    if op_type in TENSOR_LIST_READ_OPS:
        return "that filled its TensorList"
    return ""


# ---- what an op does to values -----------------------------------------------------------------

# Ops that read an input's shape, never its values (which placeholders a signature needs).
SHAPE_OPS = frozenset({"Shape", "ShapeN", "Size", "Rank"})
# Ops whose output depends on their input's shape, not its values (batch-size metadata).
SHAPE_READERS = SHAPE_OPS | {"TensorArraySizeV3", "TensorListLength", "TensorListElementShape", "ZerosLike", "OnesLike"}
# Integer ops that carry a batch-position offset from an input into their values (``idx + row*K``,
# with ``row`` from a Range over the batch): input index -> carries, None = every input.
OFFSET_CARRIERS: dict[str, frozenset[int] | None] = {
    **dict.fromkeys(("Add", "AddV2", "Sub", "Mul", "FloorDiv", "FloorMod", "TruncateDiv", "TruncateMod", "Div",
                     "Maximum", "Minimum", "Neg", "Abs", "Cast", "Identity", "AddN", "Pack"), None),
    **dict.fromkeys(("Reshape", "ExpandDims", "Squeeze", "BroadcastTo", "Tile", "StridedSlice", "Slice",
                     "Transpose"), frozenset({0})),
}
# Ops whose output can be their input unchanged (byte for byte): the capture compares and
# stores such an output once. Includes :data:`PASS_THROUGH`, which always is.
MAYBE_UNCHANGED_OPS = PASS_THROUGH | {
    "IdentityN", "StopGradient", "PreventGradient", "RefIdentity",
    "Reshape", "Squeeze", "ExpandDims", "EnsureShape", "CheckNumerics", "CheckNumericsV2", "PlaceholderWithDefault",
    "Cast", "Merge", "RefMerge", "Switch", "RefSwitch", "Enter", "Exit", "Print", "PrintV2",
}

# ---- state kept between runs -------------------------------------------------------------------

# Where a TF1 training graph's examples come from when no placeholder feeds them (the CIFAR-10
# tutorial's shuffle_batch, a tf.data iterator): a session can be fed their outputs as it is fed a
# placeholder. Each run that does run one takes the next examples (so they change state, below).
SOURCE_OPS = frozenset({"QueueDequeue", "QueueDequeueV2", "QueueDequeueMany", "QueueDequeueManyV2", "QueueDequeueUpTo",
                        "QueueDequeueUpToV2", "IteratorGetNext", "IteratorGetNextSync"})

# Ops that change state which outlives one ``session.run``: two runs of a graph holding one
# differ because of the state, not because a kernel is nondeterministic or was observed.
# One list for the capture's observer effect and diagnose's replays, which disagreed: the
# observer's lacked ScatterMin/Max, ScatterNdSub, ResourceScatterMul/Div/Min/Max,
# ResourceScatterNdSub, CountUpTo (its op def: "Increments 'ref' until it reaches 'limit'"),
# queues and iterators, which all update a variable or a resource that persists across runs;
# the replays' listed StackPushV2 and TensorArrayWriteV3, which do not: TensorFlow keeps a
# stack and a TensorArray "in a per-step container" (core/kernels/stack.cc,
# tensor_array_ops.cc), created afresh by every run, so a loop's scratch memory carries
# nothing from one run to the next. Optimiser updates are matched by prefix below.
STATE_CHANGING_OPS = frozenset({
    "Assign", "AssignAdd", "AssignSub", "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp",
    "ScatterUpdate", "ScatterAdd", "ScatterSub", "ScatterMul", "ScatterDiv", "ScatterMin", "ScatterMax",
    "ScatterNdUpdate", "ScatterNdAdd", "ScatterNdSub", "ResourceScatterUpdate", "ResourceScatterAdd",
    "ResourceScatterSub", "ResourceScatterMul", "ResourceScatterDiv", "ResourceScatterMin", "ResourceScatterMax",
    "ResourceScatterNdUpdate", "ResourceScatterNdAdd", "ResourceScatterNdSub", "CountUpTo", "ResourceCountUpTo",
    "ScatterNdMax", "ScatterNdMin", "ResourceScatterNdMax", "ResourceScatterNdMin", "StridedSliceAssign",
    "ResourceStridedSliceAssign", "SdcaShrinkL1", "QueueEnqueue", "QueueEnqueueV2", "QueueEnqueueMany",
    "QueueEnqueueManyV2", *SOURCE_OPS,
})
# Optimiser updates (``ApplyGradientDescent``, ``ResourceApplyAdam``, ``SparseApplyMomentum``,
# ``ResourceSparseApplyFtrl``, ...): they write variables from a gradient. Every op of TensorFlow's
# registry that takes its variable as a TF1 ref (OpDef ``is_ref``) and its ``Resource`` twin match
# one of these (tests/test_candidates.py holds them to the registry).
OPTIMIZER_UPDATE_PREFIXES = ("Apply", "ResourceApply", "SparseApply", "ResourceSparseApply")
STATE_CHANGING_PREFIXES = OPTIMIZER_UPDATE_PREFIXES


def changes_state(op_type: str) -> bool:
    """Whether running ``op_type`` changes state that the next run sees (:data:`STATE_CHANGING_OPS`)."""
    return op_type in STATE_CHANGING_OPS or op_type.startswith(STATE_CHANGING_PREFIXES)


# Ops that take a TF1 ref to a variable (OpDef ``is_ref``) only to read it or pass the reference
# on (control flow over ref variables; DestroyTemporaryVariable returns the value of a variable
# that lives for one run); every other op that takes a variable by ref writes it.
REF_PASSING_OPS = frozenset({
    "RefIdentity", "RefSwitch", "RefMerge", "RefEnter", "RefExit", "RefNextIteration", "RefSelect",
    "IsVariableInitialized", "DebugGradientRefIdentity", "DestroyTemporaryVariable",
})


def applies_gradients(op_type: str) -> bool:
    """Whether ``op_type`` is an optimiser's update of a variable (:data:`OPTIMIZER_UPDATE_PREFIXES`)."""
    return op_type.startswith(OPTIMIZER_UPDATE_PREFIXES)


# Ops that draw random numbers: two runs differ by design.
RANDOM_OPS = frozenset({
    "RandomUniform", "RandomUniformInt", "RandomStandardNormal", "TruncatedNormal", "RandomShuffle", "Multinomial",
    "RandomGamma", "RandomPoisson", "RandomPoissonV2", "ParameterizedTruncatedNormal", "RandomCrop",
})
STATEFUL_RANDOM_PREFIXES = ("StatefulUniform", "StatefulStandardNormal", "StatefulTruncatedNormal", "StatefulRandom")


def draws_random(op_type: str) -> bool:
    """Whether ``op_type`` draws random numbers from a generator that advances on every run."""
    return op_type in RANDOM_OPS or op_type.startswith(STATEFUL_RANDOM_PREFIXES)


# ---- ops that are never what to trace ----------------------------------------------------------

# Summaries: a serialized ``Summary`` proto (TF1) or a write to a summary file (TF2), never a model's
# output. Every op of TensorFlow's registry whose type names a summary but BoostedTreesMakeStatsSummary
# (a tree's gradient statistics), and ImportEvent, which writes an event to a summary file
# (tests/test_candidates.py holds the list to the registry).
SUMMARY_OPS = frozenset({
    "ScalarSummary", "HistogramSummary", "ImageSummary", "AudioSummary", "AudioSummaryV2", "TensorSummary",
    "TensorSummaryV2", "MergeSummary", "WriteSummary", "WriteScalarSummary", "WriteHistogramSummary",
    "WriteImageSummary", "WriteAudioSummary", "WriteGraphSummary", "WriteRawProtoSummary", "ImportEvent",
    "SummaryWriter", "CreateSummaryFileWriter", "CreateSummaryDbWriter", "FlushSummaryWriter", "CloseSummaryWriter",
    "StatsAggregatorSummary", "ExperimentalStatsAggregatorSummary", "StatsAggregatorSetSummaryWriter",
    "DebugNumericSummary", "DebugNumericSummaryV2",
})
# Ops a .meta holds for saving, restoring, initialising and training: never what to trace.
BOOKKEEPING_OPS = SUMMARY_OPS | {
    "Assign", "AssignAdd", "AssignSub", "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp",
    "VarIsInitializedOp", "IsVariableInitialized", "SaveV2", "RestoreV2", "MergeV2Checkpoints", "ShardedFilename",
    "Save", "SaveSlices", "Restore", "RestoreSlice", "ShardedFilespec", "NoOp", "Assert", "Print", "PrintV2",
}
# Op-type prefixes the runtime adds to a partitioned graph (sends, receives, function args): in
# step statistics, never ops of the model.
RUNTIME_PLUMBING = ("_Send", "_Recv", "_HostSend", "_HostRecv", "_Arg", "_Retval", "_DeviceArg", "_DeviceRetval")

# Ops whose output length depends on the *values* they read, not on the batch: one row's trace says
# nothing about a batch's (a mask of 8 rows may select 40 elements where one row selected 1); the
# capture's one-example warm-up (captures.fetch_plan.sizes_scale_with_rows) is refused with them.
VALUE_SIZED_OPS = frozenset({
    "Where", "Unique", "UniqueV2", "UniqueWithCounts", "UniqueWithCountsV2", "DynamicPartition", "Range", "Fill",
    "Tile", "BroadcastTo", "Empty", "SparseToDense", "ListDiff", "SetSize", "Bincount", "DenseBincount",
    "NonMaxSuppression", "NonMaxSuppressionV2", "NonMaxSuppressionV3", "NonMaxSuppressionV4", "NonMaxSuppressionV5",
    "NonMaxSuppressionWithOverlaps", "CombinedNonMaxSuppression", "TensorArrayGatherV3", "TensorArrayConcatV3",
    "TensorListStack", "TensorListConcatV2", "RaggedTensorToTensor", "StringSplit", "StringSplitV2",
})
# The inputs that set the output's length, for value-sized ops that take it from some inputs only (input
# index; an op not here: every input). ``Range(0, tf.shape(x)[0])`` and a TensorArray's stack (a gather
# by that Range) take it from the batch size, not from values, though their other inputs carry values.
VALUE_SIZED_BY: dict[str, frozenset[int]] = {
    "Fill": frozenset({0}), "Empty": frozenset({0}), "Tile": frozenset({1}), "BroadcastTo": frozenset({1}),
    "SparseToDense": frozenset({1}), "TensorArrayGatherV3": frozenset({1}),
}
