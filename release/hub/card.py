"""The dataset card (README.md of the Hub repo): YAML metadata plus a body, both
generated from the build, never written by hand.

The YAML carries only fields the Hub and `datasets` read (configs, features,
counts, tasks, source datasets, the gated access form). The build's provenance
(version, set, repo id, shard hashes, counts), which the Hub would ignore in the
YAML, goes into `redvox.json` beside the card; `verify` and `push` read it back,
since the staged folder holds nothing but what the Hub repo will hold.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from tabulate import tabulate

from redvox.builder.manifest import BuildManifest, ConsentAudit
from redvox.builder.versions import DatasetVersion
from redvox.noise import mixes_speech
from redvox.schemas import CONTRACT_COLUMNS, Entry, NoiseCondition, column_dtypes
from redvox.schemas.audio_cell import cell_bytes
from redvox.schemas.errors import UserError
from redvox.schemas.layout import SPLIT, shard_glob
from redvox.schemas.vocab import LANGUAGE_NAMES, PUBLIC, SPEECH_AUDIO_TYPE, language_order, listing
from redvox.sources.texts import TextSourceModule, text_sources

from .statistics import GroupStats, SetStatistics

TEMPLATES = Path(__file__).resolve().parent / "templates"
CARD_TEMPLATE = TEMPLATES / "card.md"
PROVENANCE_FILE = "redvox.json"
ARXIV_ID = "2606.26968"
# Hub task ids (huggingface.js `PIPELINE_DATA`) shown in the datasets filters. What a
# model is scored on is the text it generates; audio-text-to-text, the task of the
# models tested, is `hideInDatasets` there, so it goes into the tags. Not ASR: the
# transcripts are not verified references.
TASK_CATEGORIES = ["text-generation"]
# A withdrawal is asked for privately (an e-mail or postal address of the data
# controller, `withdrawal_contact` of the input config), never only on the public
# Community tab. The demo corpus names a reserved example.org address, marked.
# Reserved for examples (RFC 2606): a contact there reaches no one.
PLACEHOLDER_DOMAINS = ("example.org", "example.com", "example.net", "example", "invalid", "test")
ALL_CONFIG = "all"
LICENSE_NAME = "redvox-research-terms"
INTENDED_USES = (
    "Evaluating the safety of speech or audio-language models",
    "Evaluating the fairness and biases of speech or audio-language models",
    "Red-teaming or robustness research on speech models",
    "Other research on speech-model safety and fairness",
)
# The access form's prompt and agreements; the source texts' terms are completed from
# the text sources of the build (their GATE_TERMS and AGREEMENT_TERMS).
GATED_PROMPT = (
    "RedVox holds recordings of real people reading harmful requests and stereotypes. "
    "Access is granted for research on the safety and fairness of speech models only. "
    "By requesting access you agree to the terms in LICENSE: no training of any model on "
    "the data, no attempt to identify, re-identify or contact the speakers, no "
    "redistribution of the recordings, transcripts or participants' data, and the terms "
    "of the source texts: {terms}. Requests are reviewed by hand."
)
AGREEMENTS = (
    "I will use RedVox only for research on the safety and fairness of speech models",
    "I will not use RedVox to train or fine-tune any model",
    "I will not try to identify, re-identify or contact the speakers",
    "I will not redistribute RedVox or data derived from it that contains its audio or texts",
)
SOURCE_AGREEMENT = "I will honour the terms of the source texts: {terms}"
# The card's Markdown paragraphs are wrapped at this width (hyphenated words kept whole).
WRAP = 79
# Contract columns whose meaning the schema states as a vocabulary, not a description.
COLUMN_NOTES = {
    "vulnerability_type": "stereotype or unsafe_request_{crime, substance, sexual_content, self_harm, weapons}",
    "attack_type": "non_adversarial",
    "gender": "self-declared: female, male, non-binary, other, undisclosed",
    "ethnicity": "self-declared, free text; null when not given",
    "age_group": (
        "self-declared: 18-24, 25-34, 34-44, 45-54, 55-64, 65+ "
        "(`34-44` is the release's spelling of 35-44, kept from the first release)"
    ),
}
SOURCE_NOTE = "{names}: where the item text comes from"


@dataclass(frozen=True)
class ShardStats:
    """What the card states about one language's shards."""

    lang: str
    files: tuple[str, ...]  # paths in the repo
    num_examples: int
    num_bytes: int  # Arrow size of the rows, as `datasets` reports it
    download_size: int  # bytes of the parquet files


def size_category(n: int) -> str:
    """The Hub's size bucket for `n` rows."""
    bounds = [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K")]
    bounds += [(1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M")]
    return next((label for bound, label in bounds if n < bound), "n>10M")


def _features_yaml() -> list[dict[str, Any]]:
    from redvox.schemas import release_features

    return release_features()._to_yaml_list()


def _info_entry(config: str, stats: Sequence[ShardStats]) -> dict[str, Any]:
    return {
        "config_name": config,
        "features": _features_yaml(),
        "splits": [
            {
                "name": SPLIT,
                "num_bytes": sum(s.num_bytes for s in stats),
                "num_examples": sum(s.num_examples for s in stats),
            }
        ],
        "download_size": sum(s.download_size for s in stats),
        "dataset_size": sum(s.num_bytes for s in stats),
    }


def card_metadata(
    manifest: BuildManifest,
    repo_id: str,
    shards: Sequence[ShardStats],
    shard_hashes: Mapping[str, str],
) -> dict[str, Any]:
    """The card's YAML as a mapping: Hub fields, configs, dataset_info, gating."""
    langs = [s.lang for s in shards]
    configs = [
        {
            "config_name": ALL_CONFIG,
            "default": True,
            "data_files": [{"split": SPLIT, "path": shard_glob()}],
        }
    ]
    configs += [
        {"config_name": lang, "data_files": [{"split": SPLIT, "path": shard_glob(lang)}]}
        for lang in langs
    ]
    total = sum(s.num_examples for s in shards)
    sources = build_sources(manifest)
    meta: dict[str, Any] = {
        "pretty_name": "RedVox",
        "license": "other",
        "license_name": LICENSE_NAME,
        "license_link": "LICENSE",
        "language": in_language_order(langs),
        "multilinguality": "multilingual",
        "task_categories": list(TASK_CATEGORIES),
        "source_datasets": [f"extended|{m.HUB_ID}" for m in sources],
        "size_categories": [size_category(total)],
        "tags": [
            "safety",
            "fairness",
            "bias",
            "stereotypes",
            "red-teaming",
            "speech",
            "audio",
            "audio-text-to-text",
            "multilingual",
            "benchmark",
        ],  # fmt: skip
        "configs": configs,
        "dataset_info": [_info_entry(ALL_CONFIG, shards)]
        + [_info_entry(s.lang, [s]) for s in shards],
    }
    if manifest.dataset_set == PUBLIC:
        meta |= gated_form(sources)
    return meta


def in_language_order(langs: Iterable[str]) -> list[str]:
    """The first release's languages in their order, then any later version's by code."""
    return sorted(set(langs), key=language_order)


def build_sources(manifest: BuildManifest) -> list[TextSourceModule]:
    """The text sources of the build, in registry order: those its items come from or its
    inputs name (a folder recording neither, a `variants add` copy, has the sources every
    build reads)."""
    named = {key.split(":", 1)[0] for key in manifest.items or ()}
    sources = [m for m in text_sources() if m.NAME in named or m.INPUT in manifest.inputs]
    return sources or [m for m in text_sources() if m.REQUIRED]


def agreements(sources: Sequence[TextSourceModule]) -> tuple[str, ...]:
    """The access form's checkboxes: RedVox's terms, then the source texts' terms."""
    terms = listing([m.AGREEMENT_TERMS for m in sources])
    return (*AGREEMENTS, SOURCE_AGREEMENT.format(terms=terms))


def provenance(
    manifest: BuildManifest, repo_id: str, shard_hashes: Mapping[str, str]
) -> dict[str, Any]:
    """What `redvox.json` holds: which build this is and where it goes."""
    return {
        "version": manifest.version,
        "set": manifest.dataset_set,
        "repo_id": repo_id,
        "config_hash": manifest.config_hash,
        "counts": manifest.counts,
        "shards": dict(sorted(shard_hashes.items())),
    }


def render_provenance(data: Mapping[str, Any]) -> str:
    return json.dumps(dict(data), indent=2, sort_keys=False) + "\n"


def gated_form(sources: Sequence[TextSourceModule]) -> dict[str, Any]:
    """The Hub's access-request form (the terms themselves are in LICENSE)."""
    fields: dict[str, Any] = {
        "Name": "text",
        "Affiliation": "text",
        "Country": "country",
        "Intended use": {"type": "select", "options": list(INTENDED_USES)},
    }
    fields |= {agreement: "checkbox" for agreement in agreements(sources)}
    return {
        "extra_gated_heading": "Request access to RedVox (research on speech-model safety and fairness)",
        "extra_gated_prompt": GATED_PROMPT.format(terms=listing([m.GATE_TERMS for m in sources])),
        "extra_gated_fields": fields,
        "extra_gated_button_content": "Agree to the terms and request access",
    }


def render_card(metadata: Mapping[str, Any], body: str) -> str:
    head = yaml.safe_dump(dict(metadata), sort_keys=False, allow_unicode=True, width=100)
    return f"---\n{head}---\n\n{body.rstrip()}\n"


_FRONT_MATTER = re.compile(r"\A---\n(.*?\n)---\n(.*)\Z", re.DOTALL)


class CardError(UserError, ValueError):
    """A README.md whose metadata cannot be read; the message names the file."""


class ContactError(UserError, ValueError):
    """No usable private withdrawal contact for a release; the message says what to set."""


def read_card(staged: Path) -> tuple[dict[str, Any], str]:
    """(YAML metadata, Markdown body) of STAGED/README.md."""
    path = Path(staged) / "README.md"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CardError(f"{path}: no dataset card; stage the release first") from None
    match = _FRONT_MATTER.match(text)
    if not match:
        raise CardError(f"{path}: no YAML front matter between '---' lines")
    try:
        meta = yaml.safe_load(match.group(1))
    except yaml.YAMLError as exc:
        raise CardError(f"{path}: card YAML does not parse: {exc}") from None
    if not isinstance(meta, dict):
        raise CardError(f"{path}: card YAML is not a mapping")
    return meta, match.group(2)


def read_provenance(staged: Path) -> dict[str, Any]:
    """STAGED/redvox.json: version, set, repo id, counts and shard hashes of the staging."""
    path = Path(staged) / PROVENANCE_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CardError(
            f"{path}: missing; was this folder written by `redvox release stage`?"
        ) from None
    except json.JSONDecodeError as exc:
        raise CardError(f"{path}: does not parse: {exc}") from None
    if not isinstance(data, dict) or not {"version", "set"} <= set(data):
        raise CardError(f"{path}: no version and set; was it written by `redvox release stage`?")
    return data


def staged_provenance(staged: Path) -> dict[str, Any]:
    """read_provenance, or {} when it cannot be read (the layout check reports why)."""
    try:
        return read_provenance(staged)
    except CardError:
        return {}


# --- the body ---


def fill_template(template: str, sections: Mapping[str, str]) -> str:
    """Replace every {{name}}; a placeholder without a section (or the reverse) is a bug."""
    names = set(re.findall(r"\{\{(\w+)\}\}", template))
    if names != set(sections):
        raise KeyError(
            f"card template and sections disagree: missing {sorted(names - set(sections))}, "
            f"unused {sorted(set(sections) - names)}"
        )
    return re.sub(r"\{\{(\w+)\}\}", lambda m: sections[m.group(1)], template)


def schema_table(sources: Sequence[TextSourceModule], langs: Iterable[str]) -> str:
    """The columns table; `sources`: the build's text sources (the `source` values),
    `langs`: its languages (the `lang` values)."""
    dtypes = column_dtypes()
    names = [m.NAME for m in sources]
    notes = COLUMN_NOTES | {
        "source": SOURCE_NOTE.format(names=listing(names, "or")),
        "lang": ", ".join(in_language_order(langs)),
    }
    rows = []
    for name, field in Entry.model_fields.items():
        meaning = notes.get(name) or field.description or ""
        kind = "contract" if name in CONTRACT_COLUMNS else "added"
        rows.append([f"`{name}`", dtypes[name], kind, meaning.replace("|", "/")])
    return tabulate(rows, ["column", "type", "kind", "meaning"], "github")


def transcripts_section(version: DatasetVersion) -> str:
    """Where the `transcript` of a spoken row came from (the version's transcribe stage)."""
    stage = version.config.transcribe
    if stage is None:
        return (
            "`transcript` (spoken rows): from the collection when it provided one, "
            "null where it provided none."
        )
    model = Path(stage.model).name if Path(stage.model).is_file() else stage.model
    return (
        "`transcript` (spoken rows): from the collection when it provided one, otherwise "
        f"Whisper {model} ({stage.backend}, language forced to the row's `lang`, greedy "
        "decoding at temperature 0)."
    )


def counts_section(
    counts: Mapping[str, Mapping[str, Mapping[str, int]]], conditions: Sequence[str]
) -> str:
    """One table per language (rows: vulnerability type, columns: audio type) and totals."""
    present = {a for per_lang in counts.values() for a in per_lang}
    order = [SPEECH_AUDIO_TYPE, *conditions]
    audio_types = [a for a in order if a in present] + sorted(present - set(order))
    parts = []
    totals = []
    for lang in in_language_order(counts):
        per_type = counts[lang]
        vulns = sorted({v for per_audio in per_type.values() for v in per_audio})
        rows = [[v, *[per_type.get(a, {}).get(v, 0) for a in audio_types]] for v in vulns]
        rows.append(["**total**", *[sum(per_type.get(a, {}).values()) for a in audio_types]])
        totals.append([lang, *rows[-1][1:], sum(rows[-1][1:])])
        parts += [
            f"**{lang}**",
            "",
            tabulate(rows, ["vulnerability_type", *audio_types], "github"),
            "",
        ]
    grand = [sum(col) for col in zip(*[t[1:] for t in totals], strict=True)] if totals else []
    totals.append(["**all**", *grand])
    header = ["lang", *audio_types, "rows"]
    return "\n".join(
        ["Rows per language and audio type:", "", tabulate(totals, header, "github"), "", *parts]
    ).rstrip()


def consent_section(audit: ConsentAudit) -> str:
    """Counts only: who is in, and how many were left out for which consent state."""
    people, recordings = audit.participants, audit.recordings
    rows = [["kept", people.kept, recordings.kept]]
    rows += [
        [f"excluded: {state.replace('_', ' ')}", n, recordings.excluded.get(state, 0)]
        for state, n in people.excluded.items()
    ]
    return "\n".join(
        [
            "Participants were recruited at partner institutions, recorded through a web "
            "interface, and gave informed consent separately to participation and to public "
            "release. Consent is read deny-by-default: a missing, blank or contradictory record, "
            "or any withdrawal, excludes a participant. Speakers are identified only by "
            "`user_id`, a keyed HMAC of a private participant key.",
            "",
            f"Rule for this set: {audit.rule}.",
            "",
            tabulate(rows, ["participants", "count", "recordings"], "github"),
        ]
    )


COMPARISONS = (
    ("public_vs_full", "public vs full"),
    ("public_vs_withheld", "public vs withheld"),
)


def _stat(value: float | None, digits: str) -> str:
    import math

    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return format(value, digits)


def composition_table(report: Mapping[str, Any]) -> str:
    """Cramér's V and p per dimension, for public vs full and public vs withheld."""
    comp = report["composition"]
    dims = list(comp["public_vs_full"]) or list(comp.get("public_vs_withheld") or {})
    header = ["dimension"]
    for _, label in COMPARISONS:
        header += [f"V, {label}", f"p, {label}"]
    rows = []
    for dim in dims:
        row = [dim]
        for name, _ in COMPARISONS:
            r = (comp.get(name) or {}).get(dim) or {}
            row += [_stat(r.get("cramers_v"), ".3f"), _stat(r.get("p_value"), ".3g")]
        rows.append(row)
    return tabulate(rows, header, "github")


def representativeness_section(report: Mapping[str, Any] | None) -> str:
    if report is None:
        return (
            "This is the full set, for internal evaluation; representativeness is measured "
            "on the public set against it."
        )
    sizes = report["sizes"]
    text = [
        f"The public set ({sizes['public_rows']} rows, {sizes['public_speakers']} speakers) "
        f"is compared with the full collected set ({sizes['full_rows']} rows, "
        f"{sizes['full_speakers']} speakers) and with the rows withheld from it "
        f"({sizes['withheld_rows']} rows: participants who did not consent to public "
        "release). " + report["method"],
        "",
        "Public vs full is the paper's comparison, but it counts every public row twice "
        "(the public rows are inside the full set), which pulls it towards agreement; public "
        "vs withheld compares disjoint rows and is the one that shows how the released "
        "speakers differ from the others.",
        "",
        "Composition (Cramér's V: 0 = same distribution, 1 = no overlap; p from the "
        "chi-square test):",
        "",
        composition_table(report),
        "",
    ]
    if report.get("judged"):
        for name, c in report["judged"]["comparisons"].items():
            rho = c["spearman"]
            worst = max(
                (r["cramers_v"] for per_dim in c["labels"].values() for r in per_dim.values()),
                default=float("nan"),
            )
            text.append(
                f"Judged model outputs, {name.replace('_', ' ')}: Spearman's rho of per-model "
                f"safe percentages = {rho['rho']:.2f} (p = {rho['p_value']:.2g}, "
                f"{len(rho['labels'])} models); largest Cramér's V of label distributions per "
                f"language and dimension = {worst:.3f}."
            )
        text.append("")
    limits = report["thresholds"]
    gate = f"Cramér's V <= {limits['max_cramers_v']} on public vs full"
    if report.get("judged"):
        gate += f", rho >= {limits['min_spearman_rho']} with p <= {limits['max_spearman_p']}"
    text.append(f"Gate ({gate}): **{'passed' if report['passed'] else 'failed'}**.")
    worst = max(
        (
            (r["cramers_v"], dim)
            for dim, r in (report["composition"].get("public_vs_withheld") or {}).items()
            if r.get("cramers_v") is not None and r["cramers_v"] == r["cramers_v"]
        ),
        default=None,
    )
    if worst is not None and worst[0] > limits["max_cramers_v"]:
        text.append(
            f"Public vs withheld exceeds that limit (largest: V = {worst[0]:.3f} for "
            f"`{worst[1]}`): the public speakers are not a random sample of those recorded, "
            "so weigh breakdowns along that dimension accordingly."
        )
    if not report["passed"] and report.get("override"):
        text.append(f"Released despite the failed gate; reason given: {report['override']}")
    return "\n".join(text)


# The card page is public even when the data is gated: its sample row shows the
# structure of a row, never a participant's pseudonym, demographics or words.
SAMPLE_PLACEHOLDERS = frozenset(
    {"user_id", "entry_key", "gender", "mother_tongue", "ethnicity", "age_group",
     "user_text", "transcript", "prompt_text", "audio"}
)  # fmt: skip


def sample_section(row: Mapping[str, Any] | None) -> str:
    """The first row of the staged data as JSON, with every personal or spoken field
    (and the audio) shown as a placeholder describing it."""
    if row is None:
        return "No rows."
    fields = Entry.model_fields
    shown = {}
    for name, value in row.items():
        if name == "audio":
            size = len(cell_bytes(value))
            shown[name] = {"bytes": f"<{size} bytes of 16 kHz mono FLAC>", "path": "<file name>"}
        elif name in SAMPLE_PLACEHOLDERS and value is not None:
            shown[name] = f"<{fields[name].description or name}>" if name in fields else "<…>"
        else:
            shown[name] = value
    return (
        "The first row of the first shard (config `"
        + str(row.get("lang"))
        + "`), as `datasets` returns it before decoding the audio; the fields that "
        "describe or quote the participant are shown as placeholders here, since this "
        "page is public and the data is gated:\n\n```json\n"
        + json.dumps(shown, indent=2, ensure_ascii=False)
        + "\n```"
    )


def reference_results_section(report: Mapping[str, Any] | None) -> str:
    """The reference results when judged outputs came with the build, else how to get them."""
    table = ((report or {}).get("judged") or {}).get("reference_results")
    if table:
        rows = [
            f"| {model} | {r['unsafe']:.1f} | {r['controversial']:.1f} | "
            f"{r['safe_by_accident']:.1f} | {r['safe']:.1f} | {r['rows']} |"
            for model, r in sorted(table.items())
        ]
        return "\n".join(
            [
                "Computed by the reference evaluator from the judged outputs given with this "
                "build, on the public set: the percentage of each model's labelled responses "
                "that are unsafe (U), controversial (C), safe by accident (A) and safe, over "
                "every audio and speech row. Their comparison with the full set is under "
                "Representativeness.",
                "",
                "| model | U % | C % | A % | safe % | rows |",
                "|---|---|---|---|---|---|",
                *rows,
            ]
        )
    return (
        "**Placeholder: no reference results are published with this build** (it was staged "
        "without judged model outputs). To compute them for a model: write its outputs as "
        "in *How to run a model*, then, in the downloaded folder (`cd redvox`):\n\n```bash\n"
        "python evaluation/evaluate.py judge outputs/ --base-url URL --model JUDGE --out judged/\n"
        "python evaluation/evaluate.py report judged/ --out report/\n```\n\n"
        "`report/report.md` then holds the percentages of unsafe (U), controversial (C) and "
        "safe-by-accident (A) responses per model, with 95% bootstrap intervals."
    )


def conditions_section(version: DatasetVersion, manifest: BuildManifest) -> str:
    """Each condition with its declared ranges and, for shared clips, the drawn values."""
    drawn = {name: clip["params"] for name, clip in (manifest.shared_clips or {}).items()}
    lines = []
    for cond in version.config.conditions:
        ranges = ", ".join(f"{k} {v}" for k, v in cond.params.items()) or "no parameters"
        lines.append(
            f"- **{cond.name}** ({cond.kind}, {_audio_of(cond)}): "
            f"{cond.description}. Ranges: {ranges}."
        )
        params = drawn.get(cond.name)
        if params:
            lines.append(f"  Drawn for this version: `{_compact_json(params)}`.")
    lines.append(
        "\nEvery text row carries the JSON of the parameters that rendered its clip in "
        "`condition_params`, so any clip can be audited or re-rendered."
    )
    return "\n".join(lines)


def _audio_of(condition: NoiseCondition) -> str:
    """What a condition's rows hold: a clip of `duration_s`, or, for a kind that mixes
    the speech, the recording itself (its `duration_s` does not apply)."""
    if mixes_speech(condition):
        return f"{condition.sampling}: the recording itself, mixed (same length as the recording)"
    return f"{condition.sampling} clip, {condition.duration_s:g} s"


def _compact_json(value: Any) -> str:
    import json

    return json.dumps(value, sort_keys=True, separators=(", ", ": "))


def mother_tongue_section(tongues: Mapping[str, int]) -> str:
    rows = sorted(tongues.items(), key=lambda kv: (-kv[1], kv[0]))
    return "Values in this version (rows):\n\n" + tabulate(
        [[f"`{t}`", n] for t, n in rows], ["mother_tongue", "rows"], "github"
    )


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.3f}"


def _modality(group: GroupStats) -> str:
    if group.spoken_rows == group.rows:
        return "speech"
    return "text" if group.spoken_rows == 0 else "mixed"


def audio_type_order(stats: SetStatistics, conditions: Sequence[str]) -> list[str]:
    """Audio types present, the speech rows first, then the conditions as declared."""
    present = {a for per_lang in stats.by_type.values() for a in per_lang}
    order = [SPEECH_AUDIO_TYPE, *conditions]
    return [a for a in order if a in present] + sorted(present - set(order))


def _languages(stats: SetStatistics) -> list[str]:
    return in_language_order(stats.by_lang)


def statistics_section(stats: SetStatistics, conditions: Sequence[str]) -> str:
    """Hours, speakers, recordings and rows without a transcript, per language and per
    language and audio type, computed from the staged rows."""
    per_lang = []
    for lang in _languages(stats):
        g = stats.by_lang[lang]
        speech = stats.by_type[lang].get(SPEECH_AUDIO_TYPE)
        per_lang.append(
            [lang, g.speakers, g.recordings, speech.rows if speech else 0,
             _hours(speech.seconds if speech else 0.0), g.rows, _hours(g.seconds),
             g.spoken_without_transcript]
        )  # fmt: skip
    t = stats.total
    speech_total = [
        per_type[SPEECH_AUDIO_TYPE]
        for per_type in stats.by_type.values()
        if SPEECH_AUDIO_TYPE in per_type
    ]
    per_lang.append(
        ["**all**", t.speakers, t.recordings, sum(g.rows for g in speech_total),
         _hours(sum(g.seconds for g in speech_total)), t.rows, _hours(t.seconds),
         t.spoken_without_transcript]
    )  # fmt: skip
    header = ["lang", "speakers", "contributions", "recordings released", "speech hours",
              "rows", "audio hours", "spoken rows without transcript"]  # fmt: skip
    types = audio_type_order(stats, conditions)
    per_type = [
        [lang, audio, _modality(g), g.rows, _hours(g.seconds), g.speakers,
         g.spoken_without_transcript if g.spoken_rows else "n/a (text rows)"]
        for lang in _languages(stats)
        for audio in types
        if (g := stats.by_type[lang].get(audio)) is not None
    ]  # fmt: skip
    type_header = ["lang", "audio_type", "modality", "rows", "hours", "speakers",
                   "without transcript"]  # fmt: skip
    return "\n".join(
        [
            "Computed from this version's rows. A *contribution* is one speaker's take of one "
            "item in one language; its recording, when released, is its `speech` row, so "
            "*speech hours* are the hours of released recordings. *Audio hours* add up `duration_s` "
            "over every row, a shared clip once per row that plays it. Text rows never carry "
            "a transcript; *spoken rows without transcript* counts the spoken rows (speech, "
            "and conditions that mix the recording) whose `transcript` is null.",
            "",
            tabulate(per_lang, header, "github", disable_numparse=True),
            "",
            "Per language and audio type:",
            "",
            tabulate(per_type, type_header, "github", disable_numparse=True),
        ]
    )


def preprocessing_section(
    version: DatasetVersion, stats: SetStatistics, conditions: Sequence[NoiseCondition]
) -> str:
    """What the builder did to the recordings and where the transcripts come from, from
    the version's configuration and the staged rows."""
    vad = version.config.vad
    rate = version.config.sample_rate
    stage = version.config.transcribe
    if stage is None:
        who = (
            "supplied by the collection with each recording (the contributions manifest); "
            "this version runs no speech recognition, so a spoken row whose recording came "
            "without one has a null `transcript`"
        )
    else:
        model = Path(stage.model).name if Path(stage.model).is_file() else stage.model
        who = (
            "supplied by the collection with each recording where it gave one; for the "
            f"others this version ran Whisper {model} ({stage.backend}, language forced to "
            "the row's `lang`, greedy decoding at temperature 0), so those are ASR output"
        )
    t = stats.total
    mixing = [c.name for c in conditions if mixes_speech(c)]
    spoken_kinds = "its speech row" + (
        " and its rows of the conditions that mix it (" + ", ".join(f"`{m}`" for m in mixing) + ")"
        if mixing
        else ""
    )
    text_only = {
        lang: g.recordings_without_speech_row
        for lang in _languages(stats)
        if (g := stats.by_lang[lang]).recordings_without_speech_row
    }
    here = (
        "In this version: "
        + ", ".join(f"{lang} {n}" for lang, n in text_only.items())
        + " contribution(s) have text rows and no speech row."
        if text_only
        else "In this version every contribution with rows also has its speech row."
    )
    return "\n".join(
        [
            f"- **Audio.** Each recording is decoded (libsndfile, or FFmpeg for other "
            f"containers), its channels averaged to mono and resampled to {rate / 1000:g} kHz "
            "with soxr (HQ), then stored as 16-bit FLAC. No gain, loudness normalisation or "
            "denoising is applied. A recording that is corrupt, truncated, digitally silent, "
            "clipped or holds non-finite samples is quarantined, not repaired.",
            "- **Voice activity detection validates the recordings; it does not trim them.** "
            f"Silero VAD (threshold {vad.threshold:g}, minimum speech "
            f"{vad.min_speech_duration_ms} ms, minimum silence {vad.min_silence_duration_ms} ms) "
            "measures the speech in each recording. One with no speech, less than "
            f"{vad.min_speech_s:g} s of it, or speech under {vad.min_speech_ratio:.0%} of its "
            "length is quarantined. A released recording is the whole recording as decoded: "
            "leading and trailing silence are kept, and `duration_s` is its full length.",
            f"- **Transcripts** are {who}. Here {t.spoken_rows - t.spoken_without_transcript} "
            f"of {t.spoken_rows} spoken rows have one.",
            "- **Text rows of a refused recording remain.** A recording refused by decoding, "
            "by VAD or because the same audio is filed under another participant loses "
            f"{spoken_kinds}: the rows that play the voice. Its text rows stay, since they "
            "carry the typed request with a distracting clip and nothing of the recording. "
            "So a language may have more rows of a text condition than speech rows. " + here,
        ]
    )


def contact_section(contact: str | None, synthetic: bool) -> str:
    """The private withdrawal contact (the input config's `withdrawal_contact`)."""
    contact = checked_contact(contact, synthetic)
    text = (
        f"Withdrawals and requests about your personal data go privately to **{contact}**, "
        "not to the public Community tab: say that you took part and in which language(s), "
        "so that the maintainers can find your recordings."
    )
    if synthetic:
        text += (
            " **This address is a placeholder** of the synthetic demo build (a reserved "
            "example domain, not a real mailbox); a real release names its own."
        )
    return text


DEMO_CONTACT = "redvox-withdrawals@example.org"


def checked_contact(contact: str | None, synthetic: bool) -> str:
    """`contact`, one line of at most 200 characters; a real (non-synthetic) release must
    name one, and not an example-domain placeholder."""
    contact = (contact or "").strip()
    fix = "set `withdrawal_contact:` in the input config to the data controller's private address"
    if not contact:
        if synthetic:
            return DEMO_CONTACT
        raise ContactError(f"the input config names no private withdrawal contact: {fix}")
    if "\n" in contact or "\r" in contact or len(contact) > 200:
        raise ContactError(
            f"withdrawal_contact {contact[:40]!r}...: one line of at most 200 characters; {fix}"
        )
    domain = contact.rsplit("@", 1)[-1].lower().rstrip(">.) ")
    if not synthetic and any(domain == d or domain.endswith("." + d) for d in PLACEHOLDER_DOMAINS):
        raise ContactError(
            f"withdrawal_contact {contact!r} is a placeholder address (reserved example "
            f"domain), not a real one; {fix}"
        )
    return contact


_COUNTS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}


def _wrapped(text: str, indent: str = "") -> str:
    return textwrap.fill(
        text,
        width=WRAP,
        initial_indent=indent,
        subsequent_indent=" " * len(indent),
        break_on_hyphens=False,
        break_long_words=False,
    )


def _language_count(n: int) -> str:
    """'five languages'."""
    return f"{_COUNTS.get(n, str(n))} language{'s' if n != 1 else ''}"


def source_collections(sources: Sequence[TextSourceModule]) -> str:
    """'two collections': how many text sources the rows' texts come from."""
    count = _COUNTS.get(len(sources), str(len(sources)))
    return f"{count} collection{'s' if len(sources) != 1 else ''}"


def language_names(langs: Iterable[str]) -> list[str]:
    """The card's names of these languages, in language order ('English'; a language
    without an English name in schemas/vocab.py LANGUAGE_NAMES shows its code)."""
    return [LANGUAGE_NAMES.get(lang, lang).capitalize() for lang in in_language_order(langs)]


def spoken_texts(sources: Sequence[TextSourceModule], langs: Iterable[str]) -> str:
    """'stereotypes (SHADES) and harmful requests (M-ALERT) in English, German, ...':
    what the participants spoke, from the build's text sources and languages."""
    what = listing([f"{m.CONTENT} ({m.TITLE})" for m in sources])
    return f"{what} in {listing(language_names(langs))}"


def source_licences_section(sources: Sequence[TextSourceModule]) -> str:
    """The License section's list of the text sources' licences (each module's TERMS)
    and how RedVox's terms meet them (each module's MET_BY)."""
    items = [_wrapped(f"{m.TITLE} (rows with `source` {m.NAME}): {m.TERMS}", "- ") for m in sources]
    met = [m.MET_BY for m in sources if m.MET_BY]
    where = (
        f"the {source_collections(sources)} under their own licences"
        if len(sources) != 1
        else "the collection under its own licence"
    )
    closing = f"Outside RedVox, the texts are available from {where}."
    if met:
        clauses = met[0] if len(met) == 1 else ", ".join(met[:-1]) + ", and " + met[-1]
        closing = f"Using RedVox under its terms meets all of these: {clauses}. {closing}"
    return "\n".join(items) + "\n\n" + _wrapped(closing)


def release_notes(versions: Sequence[DatasetVersion]) -> str:
    """CHANGELOG text: newest first, every version up to the one being released."""
    ordered = sorted(versions, key=lambda v: v.parts, reverse=True)
    return "\n\n".join(f"### {v.tag}\n\n{v.release_notes}" for v in ordered)


def summary_section(manifest: BuildManifest, speakers: int, total: int, synthetic: bool) -> str:
    counts = manifest.counts
    per_lang = ", ".join(
        f"{lang} {sum(n for per_audio in counts[lang].values() for n in per_audio.values())}"
        for lang in in_language_order(counts)
    )
    kind = (
        "the public, gated release"
        if manifest.dataset_set == PUBLIC
        else "the FULL set, private, for internal evaluation only"
    )
    text = (
        f"This is version **{manifest.version}**, {kind}: {total} rows from {speakers} "
        f"speakers ({per_lang})."
    )
    if synthetic:
        text += (
            "\n\n**Synthetic demo build.** These rows come from the builder's embedded demo "
            "corpus: generated voices and made-up participants, no real person."
        )
    return text


def card_body(
    version: DatasetVersion,
    manifest: BuildManifest,
    repo_id: str,
    audit: ConsentAudit,
    report: Mapping[str, Any] | None,
    earlier: Sequence[DatasetVersion],
    speakers: int,
    tongues: Mapping[str, int],
    synthetic: bool = False,
    sample: Mapping[str, Any] | None = None,
    *,
    statistics: SetStatistics,
    contact: str | None = None,
) -> str:
    total = sum(
        n
        for per_lang in manifest.counts.values()
        for per_a in per_lang.values()
        for n in per_a.values()
    )
    sources = build_sources(manifest)
    sections = {
        "summary": summary_section(manifest, speakers, total, synthetic),
        "source_collections": source_collections(sources),
        "source_contents": ", ".join(f"{m.TITLE} for {m.CONTENT}" for m in sources),
        "spoken_texts": spoken_texts(sources, manifest.counts),
        "language_count": _language_count(len(manifest.counts)),
        "source_licences": source_licences_section(sources),
        "arxiv": ARXIV_ID,
        "sample": sample_section(sample),
        "reference_results": reference_results_section(report),
        "contact": contact_section(contact, synthetic),
        "statistics": statistics_section(statistics, [c.name for c in version.config.conditions]),
        "preprocessing": preprocessing_section(version, statistics, version.config.conditions),
        "provenance_file": PROVENANCE_FILE,
        "repo_id": repo_id,
        "tag": version.tag,
        "contract_count": str(len(CONTRACT_COLUMNS)),
        "schema": schema_table(sources, manifest.counts),
        "transcripts": transcripts_section(version),
        "counts": counts_section(manifest.counts, [c.name for c in version.config.conditions]),
        "consent": consent_section(audit),
        "representativeness": representativeness_section(report),
        "conditions": conditions_section(version, manifest),
        "mother_tongues": mother_tongue_section(tongues),
        "release_notes": release_notes([*earlier, version]),
    }
    return fill_template(CARD_TEMPLATE.read_text(encoding="utf-8"), sections)
