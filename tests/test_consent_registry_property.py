"""Over random, corrupted consent registries written to a real CSV file and read with
the real readers: either the read is fatal (the build stops), or nobody with a
non-affirmative or unreadable consent row reaches the public set; and even when a
caller ignores the fatal problems, an unreadable row whose key can be made out still
excludes its participant."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from redvox.builder.consent import admitted_keys, consent_states
from redvox.sources.registry import read_consent, read_participants

REGISTERED = [f"demo-p{i:02d}" for i in range(1, 6)]
UNREGISTERED = "demo-p77"
CONSENT_HEADER = (
    "participant_key,participation_consent,public_release_consent,"
    "withdrawal_date,consent_form_version"
)
PARTICIPANTS = "participant_key,gender,age_group,mother_tongue,languages\n" + "".join(
    f"{key},female,25-34,en,en\n" for key in REGISTERED
)
YES = {"yes", "Yes", "YES"}
# Answers the README does not document, and how exports spell an empty cell: refused.
UNKNOWN_ANSWERS = ["Y", "1", "TRUE", "n", "0", "maybe"]
EMPTY_SPELLINGS = [
    "null", "None", "NaN", "-", "n/a", "NA", "#N/A", "<NA>", "NaT", "n.a.", "#NV", "undefined",
    "unknown", "(blank)", "\u2014", "?", "\u200b", "\u2060\ufeff", "\u00ad", "\u3164",
]  # fmt: skip
# Form versions: real ones, and placeholders that must not count as a version.
VERSIONS = ["v1.0", "v1,1", "1", "2024-03", ""]
VERSION_PLACEHOLDERS = ["null", "NA", "#N/A", "0", "\u2014", "---", "\u200b", "unknown"]
# A column the reader does not know, in the header of some registries; a row may hold a
# value in it (a withdrawal written there).
EXTRA_COLUMNS = ["withdrawn_on", "Withdrawal_Date", "withdrawal date", ""]

# How the key is written, and whether it then is the registered key exactly.
SPELLINGS = {
    "exact": (lambda k: k, True),
    "spaces": (lambda k: f"  {k} ", True),  # every cell is stripped
    "tab": (lambda k: f"\t{k}", True),
    "upper": (lambda k: k.upper(), False),  # a case variant: fatal, counts against k
    "title": (lambda k: k.title(), False),
    # Variants only folding tells apart: fatal, and they count against k too.
    "zero_width": (lambda k: k[:4] + "\u200b" + k[4:], False),
    "word_joiner": (lambda k: k + "\u2060", False),
    "inner_space": (lambda k: k[:5] + " " + k[5:], False),
    "no_break_space": (lambda k: k[:5] + "\u00a0" + k[5:], False),
    "cyrillic_er": (lambda k: k.replace("p", "\u0440"), False),
    "greek_omicron": (lambda k: k.replace("o", "\u03bf"), False),
    "fullwidth": (lambda k: "\uff44" + k[1:], False),
}
# Corruptions that make the line unreadable as a row (key cell left intact) ...
STRUCTURAL = {
    "extra_cell": lambda c: [*c, "withdrew by email"],
    "missing_cell": lambda c: c[:-1],
    "comma_in_version": lambda c: [*c[:-1], c[-1] + " see ticket, 42"],
    "stray_quote": lambda c: [c[0], c[1][:1] + '"' + c[1][1:], *c[2:]],
    "unclosed_quote": lambda c: [c[0], '"' + c[1], *c[2:]],
    "after_quote": lambda c: [c[0], f'"{c[1]}"x', *c[2:]],
}
# ... and one that also damages the key.
KEY_DAMAGE = "quote_in_key"


@dataclass(frozen=True)
class Row:
    key: str  # the registered (or unregistered) key this row is about
    spelling: str
    participation: str
    public: str
    withdrawal: str
    version: str
    quoted: tuple[bool, ...]
    corruption: str | None
    note: str = ""  # its cell in the extra column, when the registry has one

    def line(self, extra: bool = False) -> str:
        spell, _ = SPELLINGS[self.spelling]
        cells = [spell(self.key), self.participation, self.public, self.withdrawal, self.version]
        cells = [f'"{c}"' if q else c for c, q in zip(cells, self.quoted, strict=True)]
        if extra:
            cells.append(self.note)
        if self.corruption == KEY_DAMAGE:
            cells[0] = cells[0][:3] + '"' + cells[0][3:]
        elif self.corruption:
            cells = STRUCTURAL[self.corruption](cells)
        return ",".join(cells)

    @property
    def structural(self) -> bool:
        return self.corruption is not None

    @property
    def readable(self) -> bool:
        """Read exactly: no corruption, known answers, a real date, the exact key."""
        return (
            not self.structural
            and self.key in REGISTERED
            and SPELLINGS[self.spelling][1]
            and self.participation in YES | {"no", ""}
            and self.public in YES | {"no", ""}
            and self.withdrawal in ("", "2026-03-15")
            and self.version not in VERSION_PLACEHOLDERS
        )

    def affirmative(self, extra: bool = False) -> bool:
        return (
            self.readable
            and not (extra and self.note)
            and self.participation in YES
            and self.public in YES
            and not self.withdrawal
            and bool(self.version)
        )


rows = st.builds(
    Row,
    key=st.sampled_from([*REGISTERED, UNREGISTERED]),
    spelling=st.sampled_from(list(SPELLINGS)),
    participation=st.sampled_from([*YES, "no", "", *UNKNOWN_ANSWERS, *EMPTY_SPELLINGS]),
    public=st.sampled_from([*YES, "no", "", *UNKNOWN_ANSWERS, *EMPTY_SPELLINGS]),
    withdrawal=st.sampled_from(["", "", "2026-03-15", "15/03/2026", "20260315", *EMPTY_SPELLINGS]),
    version=st.sampled_from([*VERSIONS, *VERSION_PLACEHOLDERS]),
    quoted=st.tuples(*[st.booleans()] * 4, st.just(True)),  # "v1,1" needs its quotes
    corruption=st.one_of(st.none(), st.none(), st.sampled_from([*STRUCTURAL, KEY_DAMAGE])),
    note=st.sampled_from(["", "", "2026-03-15"]),
)
# Clear "yes" rows for some participants, plus a few random rows (often corrupted)
# that must take them out of the public set: a corruption that hits a participant
# with a clear "yes" is the case that matters.
affirmative = st.builds(
    Row,
    key=st.sampled_from(REGISTERED),
    spelling=st.sampled_from(["exact", "spaces", "tab"]),
    participation=st.sampled_from(sorted(YES)),
    public=st.sampled_from(sorted(YES)),
    withdrawal=st.just(""),
    version=st.sampled_from(["v1.0", "v1,1", "1", "2024-03"]),
    quoted=st.tuples(*[st.booleans()] * 4, st.just(True)),
    corruption=st.none(),
    note=st.sampled_from(["", "", "2026-03-15"]),
)
registries = st.tuples(
    st.lists(affirmative, max_size=6), st.lists(rows, max_size=4), st.randoms()
).map(lambda parts: parts[2].sample(parts[0] + parts[1], len(parts[0] + parts[1])))
registries = registries.filter(bool)  # an empty registry is fatal on its own


@settings(max_examples=250, deadline=None)
@given(
    registry=registries,
    bom=st.booleans(),
    crlf=st.booleans(),
    blank_lines=st.sets(st.integers(0, 10), max_size=2),
    trailing=st.sampled_from(["", "\n", "\n\n  \n"]),
    extra_column=st.one_of(st.none(), st.none(), st.none(), st.sampled_from(EXTRA_COLUMNS)),
)
def test_corrupted_registries_stop_the_build_or_admit_only_clear_consent(
    tmp_path_factory, registry, bom, crlf, blank_lines, trailing, extra_column
):
    folder = tmp_path_factory.mktemp("registry")
    extra = extra_column is not None
    lines = [CONSENT_HEADER + (f",{extra_column}" if extra else "")]
    for index, row in enumerate(registry):
        if index in blank_lines:
            lines.append("")
        lines.append(row.line(extra))
    text = "\n".join(lines) + "\n" + trailing
    if crlf:
        text = text.replace("\n", "\r\n")
    consent_path = folder / "consent.csv"
    consent_path.write_bytes(("\ufeff" if bom else "").encode() + text.encode("utf-8"))
    participants_path = folder / "participants.csv"
    participants_path.write_text(PARTICIPANTS, encoding="utf-8")

    participants = read_participants(participants_path)
    assert participants.problems == []
    registered = {p.participant_key for p in participants.records}
    consent = read_consent(consent_path, participant_keys=registered)
    by_key: dict[str, list] = {}
    for record in consent.records:
        by_key.setdefault(record.participant_key, []).append(record)
    public = admitted_keys(consent_states(registered, by_key), "public")

    # Fail closed, exactly: fatal if and only if some row cannot be read exactly, or the
    # header has a column the reader does not know.
    assert consent.fatal == (extra or not all(row.readable for row in registry)), consent.problems
    assert all(p.fatal for p in consent.problems)
    # Nothing lost: every data line is counted, and each one not read is a problem.
    assert consent.lines.lines == len(registry)
    assert consent.lines.records == sum(not row.structural for row in registry)
    problem_lines = {p.row for p in consent.problems}
    assert len(problem_lines) >= consent.lines.not_read

    # Defence in depth: even ignoring the fatal problems, a participant with any
    # non-affirmative or unreadable row whose key can be made out is not public.
    for key in REGISTERED:
        theirs = [r for r in registry if r.key == key and r.corruption != KEY_DAMAGE]
        if any(not r.affirmative(extra) for r in theirs):
            assert key not in public, (key, theirs)
    if not consent.fatal:
        clear = {
            key
            for key in REGISTERED
            if (theirs := [r for r in registry if r.key == key])
            and all(r.affirmative(extra) for r in theirs)
        }
        assert public == clear
