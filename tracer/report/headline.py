"""The headline of a comparison: what the verdict rests on, in the order a user needs it.

One list of ``{"key", "text"}`` lines, written into report.json (``headline``) and printed first
by the terminal, report.md and report.html, so every renderer and the API say the same:

1. ``noise`` — a side that does not repeat itself is said first ("each side changes from run to
   run by up to X; a detection changed class between two runs of A; A vs B within that"): any
   difference between the sides is read against it. ``repeatable`` says the sides were measured
   and repeat themselves bit for bit; ``noise_not_measured`` says a side could move but was run
   once (``--repeat 1``, or a capture directory).
2. ``outputs`` — what the verdict judges by default: the outputs as production computes them.
3. ``inside`` — intermediates beyond tolerance whose difference heals before the outputs: a
   finding with its place (from where, healed by which op), not a failure of what the user tests.
4. ``unobserved`` — a difference only the plain runs show.

Built from the report dict alone, so a report written by an older tftrace renders too.

Beside the headline, the Reproduce block's command and what decided its numbers
(:func:`reproduce_command`, :func:`reproduce_facts`): the terminal and report.md say the same.
"""

from __future__ import annotations

import functools
import os
import shlex
from typing import Any

from ..cause_shares import beyond_noise, outputs_noise
from ..comparison.statuses import verdict_label
from .detections_view import changes_text, detection_groups, detection_outputs
from ..text import count
from .numbers import fmt

__all__ = ["headline", "headline_texts", "reproduce_command", "reproduce_facts"]


def headline_texts(report: dict[str, Any]) -> list[str]:
    return [line["text"] for line in headline(report)]


def headline(report: dict[str, Any]) -> list[dict[str, str]]:
    """The report's own ``headline`` when it has one, else built from its fields."""
    given = report.get("headline")
    if isinstance(given, list) and all(isinstance(x, dict) and "text" in x for x in given):
        return [{"key": str(x.get("key") or ""), "text": str(x["text"])} for x in given]
    return build_headline(report)


def build_headline(report: dict[str, Any]) -> list[dict[str, str]]:
    lines = _noise(report)
    outputs = _outputs(report)
    if outputs:
        lines.append({"key": "outputs", "text": outputs})
    inside = _inside(report)
    if inside:
        lines.append({"key": "inside", "text": inside})
    from .summary import unobserved_divergence  # noqa: PLC0415 - summary imports this module's users

    unobserved = unobserved_divergence(report)
    if unobserved:
        lines.append({"key": "unobserved", "text": f"Not seen op by op: {unobserved}."})
    return lines


def _outputs_of(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(k): o for k, o in (report.get("outputs") or {}).items() if isinstance(o, dict)}


def _noise(report: dict[str, Any]) -> list[dict[str, str]]:
    noise = report.get("noise") if isinstance(report.get("noise"), dict) else {}
    lines = []
    unmeasured = [u for u in report.get("noise_not_measured") or [] if isinstance(u, dict)]
    measured = {key: noise[key] for key in ("a", "b") if isinstance(noise.get(key), dict) and "max_abs" in noise[key]}
    if measured:
        moving = {key: side for key, side in measured.items() if not side.get("repeats_itself", side.get("max_abs") == 0)}
        cost = _cost(noise)
        if moving:
            lines.append({"key": "noise", "text": _moving(report, measured, moving) + cost})
        else:
            sides = " and ".join(f"{k.upper()}" for k in measured)
            counts = {k: side.get("runs") for k, side in measured.items()}
            over = (f"over {noise.get('repeats')} runs" if len(set(counts.values())) <= 1 else
                    "(" + ", ".join(f"{k.upper()} over {n} runs" for k, n in counts.items()) + ")")
            lines.append({"key": "repeatable", "text": f"Run-to-run noise measured: {sides} "
                          f"{'repeats itself' if len(measured) == 1 else 'each repeat themselves'} bit for bit "
                          f"{over}{cost}{_replays_say_otherwise(report, measured)}."})
    for u in unmeasured:
        lines.append({"key": "noise_not_measured",
                      "text": f"Run-to-run noise not measured on side {str(u.get('side')).upper()}: {u.get('why')}; "
                              "one pair of runs that agree says nothing of the next pair."})
    return lines


def _replays_say_otherwise(report: dict[str, Any], measured: dict[str, Any]) -> str:
    """Where a side's repeats agreed bit for bit but its replay of an origin, in one more process,
    differed from its own capture (run s on the H200: B's two runs picked the same cuDNN kernels,
    its replay another): the repeats are one sample, and the headline says what the replay saw."""
    seen: dict[str, tuple[float, str]] = {}
    for name, node in (report.get("nodes") or {}).items():
        iso = node.get("isolation") if isinstance(node, dict) else None
        size = iso.get("noise_max_abs") if isinstance(iso, dict) else None
        if not isinstance(size, (int, float)) or size <= 0:
            continue
        for key in iso.get("replay_moved") or ():
            side = measured.get(key) if isinstance(key, str) else None
            if isinstance(side, dict) and side.get("repeats_itself", side.get("max_abs") == 0):
                seen[key] = max(seen.get(key, (0.0, "")), (float(size), str(name)))
    said = [f"{key.upper()}'s replay of `{name}` in another process differed from {key.upper()}'s capture by up "
            f"to {fmt(size)}" for key, (size, name) in sorted(seen.items())]
    if not said:
        return ""
    further = {key: measured[key]["more_runs"] for key in seen if isinstance(measured[key].get("more_runs"), dict)}
    if further:  # the further runs that replay asked for repeated the whole model too (judging._repeats_that_missed)
        ran = " and ".join(f"{key.upper()} ran {m.get('added')} more times" for key, m in sorted(further.items()))
        runs = max(int(measured[key].get("runs") or 0) for key in further)
        return (f"; {' and '.join(said)}, so {ran}, which repeated it bit for bit too: alone in a fresh process the op "
                f"computed other numbers, while in the whole model it did not change over {runs} runs; comparing "
                "again with `--autotune off` (or `--determinism`) on both sides shows whether that is what differs "
                "between A and B")
    who = " and ".join(k.upper() for k in sorted(seen))
    return (f"; but {' and '.join(said)}: {who} {'does' if len(seen) == 1 else 'do'} not always repeat "
            f"{'itself' if len(seen) == 1 else 'themselves'} from one process to the next, and more runs "
            "(`--repeat K`) measure how far")


def _cost(noise: dict[str, Any]) -> str:
    processes, seconds = noise.get("processes"), noise.get("seconds")
    if not isinstance(processes, int) or not isinstance(seconds, (int, float)):
        return ""
    return f" (measured with {processes} more fresh process{'es' if processes != 1 else ''}, {seconds:.1f} s)"


def _moving(report: dict[str, Any], measured: dict[str, Any], moving: dict[str, Any]) -> str:
    """"Each side changes from run to run by up to X ...; A vs B within that"."""
    outputs = _outputs_of(report)
    parts = []
    for key, side in measured.items():
        moved = {k: v for k, v in (side.get("outputs_max_abs") or {}).items() if isinstance(v, (int, float)) and v > 0}
        if key not in moving:
            parts.append(f"{key.upper()} repeats itself bit for bit")
        elif moved:  # the largest move of a value output; class and count outputs are said apart below
            values = {k: v for k, v in moved.items() if "class" not in k.lower() and "num_" not in k.lower()} or moved
            worst = max(values, key=lambda k: values[k])
            parts.append(f"{key.upper()} by up to {fmt(moved[worst])} (on `{worst}`)")
        else:
            parts.append(f"{key.upper()}'s intermediates by up to {fmt(side.get('max_abs'))}, its outputs not at all")
    who = "Each side changes" if len(moving) == 2 else f"Side {next(iter(moving)).upper()} changes"
    text = f"{who} from run to run: " + "; ".join(parts) + _replays_say_otherwise(report, measured)
    for key, side in moving.items():
        more = side.get("more_runs")
        if isinstance(more, dict):  # the runs that showed it were asked for by a replay (judging._repeats_that_missed)
            text += f" ({key.upper()} ran {more.get('added')} more times because {more.get('because')})"
    for key, side in moving.items():
        for out, v in (side.get("outputs_max_abs") or {}).items():
            dtype = str((outputs.get(out) or {}).get("dtype") or "")
            classes = "class" in out.lower() and isinstance(v, (int, float)) and v >= 0.5  # float classes too (OD API)
            if isinstance(v, (int, float)) and v > 0 and (dtype.startswith(("int", "uint", "bool")) or classes):
                what = "a detection changed class" if classes else f"`{out}` changed"
                text += f"; {what} between two runs of {key.upper()} (`{out}` by up to {fmt(v)})"
    return text + "; " + _against_noise(report)


def _against_noise(report: dict[str, Any]) -> str:
    """A vs B, over every pair of runs, against what the sides do by themselves."""
    per = outputs_noise(report)
    if not per:
        return "A vs B not compared over the repeated runs."
    beyond = beyond_noise(report)
    pairs = max((n.get("pairs") or 0 for n in per.values()), default=0)
    if not beyond:
        largest = max(per, key=lambda k: per[k].get("cross_max_abs") or 0)
        size = per[largest].get("cross_max_abs") or 0
        return (f"A vs B within that (up to {fmt(size)} on `{largest}` over {pairs} pairs of runs)" if size
                else f"A vs B bit for bit in every one of {pairs} pairs of runs")
    worst = max(beyond, key=lambda k: beyond[k].get("cross_closest") or 0)
    chance = beyond[worst].get("chance_beyond_by_chance")
    odds = (f"; one computation shows such a gap by chance 1 time in {round(1 / chance):,} with these runs, "
            "more runs (`--repeat K`) make that rarer" if isinstance(chance, (int, float)) and chance > 0 else "")
    return (f"A vs B beyond that: at least {fmt(beyond[worst].get('cross_closest'))} on `{worst}` in every one of "
            f"{pairs} pairs of runs ({len(beyond)} output{'s' if len(beyond) != 1 else ''}){odds}")


def _outputs(report: dict[str, Any]) -> str:
    """What the outputs' verdict rests on. A detector's outputs matched as detections lead with what
    the matching measured (:func:`_detections`); their index-by-index largest difference, which
    NMS's ordering of rows by score can inflate to a box's size, is said after it, as such (it once
    led the headline: "0.359 on `detection_boxes`" beside matched boxes within 3.5e-05)."""
    outputs = {k: o for k, o in _outputs_of(report).items() if o.get("identical") is not None}
    if not outputs:
        return ""
    plain = any(o.get("compared_as") == "plain" for o in outputs.values())
    owned = detection_outputs(report)
    groups = [g for g in detection_groups(report) if g.get("compared")]
    if not owned or not groups:
        return _index_by_index(outputs, len(_outputs_of(report)), plain)
    rest = {k: o for k, o in outputs.items() if k not in owned}
    n_rest = len([k for k in _outputs_of(report) if k not in owned])
    parts = [_detections(group, plain) for group in groups]
    if rest:
        parts.append(_index_by_index(rest, n_rest, plain, other=True))
    parts.append(_rows_read_index_by_index(outputs, owned, groups))
    return " ".join(p for p in parts if p)


def _verdict_of(o: dict[str, Any]) -> str:
    return str(o.get("verdict") or ("identical" if o.get("identical") else "within_tolerance"
                                    if o.get("within_tolerance") else "diverged"))


def _index_by_index(outputs: dict[str, dict[str, Any]], n: int, plain: bool, other: bool = False) -> str:
    """The outputs compared index by index (``n`` of them in all; ``other``: beside detections)."""
    verdicts = {k: _verdict_of(o) for k, o in outputs.items()}
    sizes = {k: o.get("max_abs") for k, o in outputs.items() if isinstance(o.get("max_abs"), (int, float))}
    worst = max(sizes, key=lambda k: sizes[k], default=None)
    largest = f"largest difference {fmt(sizes[worst])} on `{worst}`" if worst is not None and sizes[worst] else ""
    beyond = [k for k, v in verdicts.items() if v == "diverged"]
    noun = ("other " if other else "") + ("output" if n == 1 else "outputs")
    what = noun + (" (plain runs, as production computes them)" if plain else "")
    if len(outputs) == n:
        every = "The" if n == 1 else f"The {n}" if other else f"All {n}"
    else:
        every = f"The {len(outputs)} compared of {n}"
    if beyond:
        worst_beyond = max(beyond, key=lambda k: sizes.get(k) or 0)
        runs = " (the plain runs, as production computes them)" if plain else ""
        said = f"{len(beyond)} of {n} {noun} {'differs' if n == 1 else 'differ'} beyond tolerance."
        lost = _nonfinite_words(outputs, beyond)
        if lost:
            return (f"{said} {lost}; where both sides are finite, the largest difference is "
                    f"{fmt(sizes.get(worst_beyond))} on `{worst_beyond}`{runs}.")
        return f"{said} The largest difference is {fmt(sizes.get(worst_beyond))} on `{worst_beyond}`{runs}."
    if all(v == "identical" for v in verdicts.values()):
        return f"{every} {what} bit-identical."
    if any(v == "within_noise" for v in verdicts.values()):
        return (f"{every} {what} {'agrees' if n == 1 else 'agree'} between A and B within what each side differs "
                f"from itself from run to run{f' ({largest})' if largest else ''}.")
    return f"{every} {what} within tolerance{f' ({largest})' if largest else ''}."


def _nonfinite_words(outputs: dict[str, dict[str, Any]], beyond: list[str]) -> str:
    """"In `probs`, 40 elements are NaN or ±inf on one side and not the same on the other": no
    difference measures such elements, so the largest difference over the rest can read 0 for an
    output one side lost altogether (an inference export that overflows). Empty when none are."""
    counts = {k: int(outputs[k].get("nan_mismatch") or 0) + int(outputs[k].get("inf_mismatch") or 0) for k in beyond}
    parts = [f"in `{k}`, {count(c, 'element')} {'is' if c == 1 else 'are'} NaN or ±inf on one side and not the same "
             "on the other" for k, c in counts.items() if c]
    text = "; ".join(parts)
    return text[:1].upper() + text[1:]


DETECTION_VERDICT_WORDS = {"identical": "are bit-identical", "within_tolerance": "agree within tolerance",
                           "diverged": "differ beyond tolerance", "within_noise": "agree within run-to-run noise"}


def _detections(group: dict[str, Any], plain: bool) -> str:
    """One group of detections, as the matching measured it: ``Detections (`detection_boxes`, …),
    matched by class and IoU, differ beyond tolerance: 80 of 80 matched, …; matched detections'
    scores within 0.000125, box coordinates within 3.46e-05 (80 beyond tolerance)``."""
    keys = group.get("keys") if isinstance(group.get("keys"), dict) else {}
    names = ", ".join(f"`{v}`" for v in keys.values())
    verdict = str(group.get("verdict"))
    said = DETECTION_VERDICT_WORDS.get(verdict, f"are {verdict_label(verdict)}")
    total = group.get("total") if isinstance(group.get("total"), dict) else {}
    how = f"matched by {'class and ' if 'classes' in keys else ''}IoU"
    runs = " in the plain runs" if plain else ""
    text = f"Detections ({names}), {how}, {said}{runs}"
    if verdict == "identical" or not total:
        return text + "."
    text += (f": {total.get('matched')} of {total.get('a')} matched (B has {total.get('b')}), "
             f"{total.get('appeared')} appeared, {total.get('disappeared')} disappeared, "
             f"{total.get('changed_class')} changed class")
    if total.get("matched"):
        beyond = total.get("matched_beyond_tolerance")
        text += (f"; matched detections' scores within {fmt(total.get('max_score_diff'))}, box coordinates within "
                 f"{fmt(total.get('max_box_diff'))}" + (f" ({beyond} beyond tolerance)" if beyond else ""))
    return text + "."


def _rows_read_index_by_index(outputs: dict[str, dict[str, Any]], owned: set[str],
                              groups: list[dict[str, Any]]) -> str:
    """The detections' index-by-index largest difference, said as such, where it exceeds what the
    matching measured (row k of each side need not be the same detection)."""
    sizes = {k: o["max_abs"] for k, o in outputs.items()
             if k in owned and isinstance(o.get("max_abs"), (int, float))}
    worst = max(sizes, key=lambda k: sizes[k], default=None)
    measured = [v for g in groups for v in ((g.get("total") or {}).get("max_score_diff"),
                                            (g.get("total") or {}).get("max_box_diff"),
                                            *((g.get("per_detection_max_abs") or {}).values()))
                if isinstance(v, (int, float))]
    if worst is None or not sizes[worst] or sizes[worst] <= max(measured, default=0.0):
        return ""
    return (f"Read index by index, which pairs row k of A with row k of B whether or not they are the same "
            f"detection, `{worst}` differs by up to {fmt(sizes[worst])}.")


def _inside(report: dict[str, Any]) -> str:
    inside = report.get("intermediates") if isinstance(report.get("intermediates"), dict) else None
    first = report.get("first_divergence") if isinstance(report.get("first_divergence"), dict) else None
    if (not inside or not inside.get("from")) and first and first.get("node"):
        return (f"Inside, the numbers differ (within tolerance) from `{first['node']}` ({first.get('op')}) on."
                if report.get("verdict_outputs") in ("identical", "within_tolerance") else "")
    if not inside or not inside.get("from"):
        return ""
    start = f"`{inside['from']}` ({inside.get('from_op')})"
    count = inside.get("ops_beyond_tolerance")
    lists = inside.get("detection_lists") if isinstance(inside.get("detection_lists"), dict) else None
    largest = f", up to {fmt(inside.get('max_abs'))}" if inside.get("max_abs") is not None or not lists else ""
    extent = f"{count} op{'s' if count != 1 else ''} beyond tolerance{largest}{_detection_lists(lists, count)}"
    heals = (f", and heal by `{inside['heals_at']}` ({inside.get('heals_at_op')})" if inside.get("heals_at")
             else "")
    if report.get("verdict_decided_by") == "outputs_and_intermediates":
        return f"Inside, the numbers differ from {start} on ({extent}){heals}; --intermediates-decide: they decide."
    if report.get("verdict_outputs") == "diverged":
        return f"Inside, the numbers differ beyond tolerance from {start} on ({extent})."
    return (f"Inside, the numbers differ beyond tolerance from {start} on ({extent}){heals}: the outputs decide "
            "the verdict (--intermediates-decide lets the intermediates decide too).")


def _detection_lists(lists: dict[str, Any] | None, count: Any) -> str:
    """The ops among those beyond tolerance that hold a detector's detection lists (row k the k-th best
    detection of its image), as they were measured: between matched detections, as the outputs;
    their index-by-index largest difference only after it, as such, where it is larger (the lists
    were reordered; equal, it would say nothing more). It once stood as the extent of
    the divergence: "23 ops beyond tolerance, up to 0.359" at an NMS stack whose matched boxes moved
    by 3.46e-05."""
    if not lists:
        return ""
    n = lists.get("count")
    held = "all of them hold" if n == count else f"{n} of them hold" if n != 1 else "1 of them holds"
    text = f"; {held} lists of detections"
    matched = lists.get("matched_max_abs")
    if isinstance(matched, (int, float)):
        said = [f"at `{lists['matched_max_abs_at']}`" if lists.get("matched_max_abs_at") else "",
                {True: "within tolerance", False: "beyond tolerance"}.get(lists.get("matched_within_tolerance"), "")]
        said_text = "; ".join(w for w in (", ".join(w for w in said if w), changes_text(lists.get("changes"))) if w)
        text += (f", which differ by up to {fmt(matched)} between matched detections"
                 + (f" ({said_text})" if said_text else ""))
    else:
        text += ", not measured between matched detections"
    index = lists.get("index_max_abs")
    reordered = not isinstance(matched, (int, float)) or (isinstance(index, (int, float)) and index > matched)
    if isinstance(index, (int, float)) and lists.get("index_max_abs_at") and reordered:  # else it says nothing more
        text += (f"; read index by index, which pairs row k of A with row k of B whether or not they are the "
                 f"same detection, `{lists['index_max_abs_at']}` differs by up to {fmt(lists['index_max_abs'])}")
    return text


# A command line longer than this is not split into words: shlex's tokenizer takes time that grows
# with the square of a word's length (a hand-made report.json with a 10 MB command held every
# renderer for hours), and a command a person ran and reads back is far shorter.
LONGEST_PARSED_COMMAND = 32 * 1024


@functools.lru_cache(maxsize=8)
def command_words(command: str) -> tuple[str, ...] | None:
    """A recorded command's words as a shell splits them; None when it does not parse or is too
    long to be shown word by word (it is then shown as recorded). Cached: every renderer asks."""
    if len(command) > LONGEST_PARSED_COMMAND:
        return None
    try:
        return tuple(shlex.split(command))
    except ValueError:
        return None


def _argv(report: dict[str, Any]) -> list[str]:
    """The recorded command's words; none when there is none or it does not parse."""
    return list(command_words(str(report.get("command") or "")) or ())


def _onednn(side: dict[str, Any]) -> tuple[str, str] | None:
    """A side's oneDNN setting as it ran (``on``/``off``) and what decided it; None where the report
    does not say (an older report, a side whose fingerprint lacks it)."""
    set_to = str((side.get("knobs") or {}).get("onednn") or "default")
    env = (side.get("environment") or {}).get("onednn") or {}
    if set_to in ("on", "off"):
        return set_to, "set"
    if not isinstance(env, dict) or not isinstance(env.get("enabled"), bool):
        return None
    state = "on" if env["enabled"] else "off"
    variable = env.get("TF_ENABLE_ONEDNN_OPTS")
    return state, (f"set by TF_ENABLE_ONEDNN_OPTS={variable} in the environment" if variable not in (None, "")
                   else "this CPU's default, TF_ENABLE_ONEDNN_OPTS unset")


def _from_capture(report: dict[str, Any], key: str, argv: list[str]) -> bool:
    """Whether side ``key`` was given as a capture directory: its settings were fixed when it was captured."""
    positional = [word for word in argv[2:] if not word.startswith("-")]
    given = positional[0 if key == "a" else 1] if len(positional) > 1 else ""
    capture = str(((report.get("sides") or {}).get(key) or {}).get("capture_dir") or "")
    return bool(given and capture) and os.path.normpath(given) == os.path.normpath(capture)


def _onednn_pins(report: dict[str, Any], argv: list[str]) -> list[str]:
    """The options that pin each side's oneDNN setting as it ran where the command left it to the
    CPU or the environment: oneDNN's default differs between CPUs, so without them the command
    computes other numbers on another machine."""
    sides = report.get("sides") or {}
    loose = {key: state for key in ("a", "b")
             if (state := _onednn(sides.get(key) or {})) and state[1] != "set" and not _from_capture(report, key, argv)}
    if not loose:
        return []
    per_side = len(loose) < 2 or len({state for state, _ in loose.values()}) > 1 or any(
        word.startswith(("--a-onednn", "--b-onednn")) for word in argv)
    if not per_side:
        return ["--onednn", next(iter(loose.values()))[0]]
    return [word for key, (state, _) in loose.items() for word in (f"--{key}-onednn", state)]


def reproduce_command(report: dict[str, Any]) -> str:
    """The recorded command as it reproduces the report: oneDNN pinned as it ran, and ``--force``
    (the report it printed is in the ``--out`` it names, which a second run otherwise refuses)."""
    argv = _argv(report)
    if len(argv) < 2 or argv[1] != "compare":
        return str(report.get("command") or "")
    extra = _onednn_pins(report, argv) + ([] if "--force" in argv else ["--force"])
    return " ".join(shlex.quote(word) for word in argv + extra)


def _inputs_file(argv: list[str]) -> str:
    for i, word in enumerate(argv):
        if word == "--inputs" and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith("--inputs="):
            return word.split("=", 1)[1]
    return ""


def reproduce_facts(report: dict[str, Any]) -> list[str]:
    """What decided the numbers, said under the command: each side's oneDNN setting and what set
    it, and where the inputs come from (a file the command needs, or the seed it generates from)."""
    sides = report.get("sides") or {}
    argv = _argv(report)
    facts = []
    states = {key: state for key in ("a", "b") if (state := _onednn(sides.get(key) or {}))}
    pins = " ".join(_onednn_pins(report, argv)) if argv[1:2] == ["compare"] else ""  # what reproduce_command adds
    pinned = f"; the command pins it with `{pins}`, as oneDNN's default depends on the CPU" if pins else ""
    said = {key: (state, "set by the command" if how == "set" else how) for key, (state, how) in states.items()}
    if len(said) == 2 and said["a"] == said["b"]:
        facts.append(f"oneDNN: {said['a'][0]} on both sides ({said['a'][1]}){pinned}.")
    elif said:
        facts.append("oneDNN: " + ", ".join(f"{state} on side {key.upper()} ({how})" for key, (state, how)
                                            in said.items()) + f"{pinned}.")
    examples = (sides.get("a") or {}).get("examples") or {}
    source, digest = str(examples.get("source") or ""), str(examples.get("digest") or "")
    how_many = f"{examples['count']} examples" if isinstance(examples.get("count"), int) else "the examples"
    given = _inputs_file(argv)
    if given or (source and not source.startswith("generated")):
        file_sha256 = examples.get("file_sha256")
        if isinstance(file_sha256, str) and file_sha256:  # the file's own, as sha256sum prints it
            fingerprint = f", sha256 {file_sha256[:12]}"
        else:  # a capture of before 2026-12-05 recorded only the digest of the values fed
            fingerprint = f", digest of their values {digest[:12]}" if digest else ""
        facts.append(f"Inputs: {how_many} from the file `{given or source}`{fingerprint}; the command needs that "
                     "file (attach it, or say where it comes from).")
    elif source:
        facts.append(f"Inputs: {how_many} {source}; the command generates the same ones.")
    return facts
