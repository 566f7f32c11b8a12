"""Item selection: a seeded stratified draw that repeats, and pinned key lists."""

from collections import Counter

from redvox.schemas import LANGUAGES, VULNERABILITY_TYPES, ItemSelection, SourceItem
from redvox.sources.selection import select_items

MALERT_GROUPS = VULNERABILITY_TYPES[1:]


def item(source, item_id, vtype):
    text = {lang: f"{source} {item_id} {lang}" for lang in LANGUAGES}
    return SourceItem(
        source=source, item_id=item_id, vulnerability_type=vtype, text=text, source_category="x"
    )


def pool(shades=40, per_group=20):
    items = [item("shades", f"{n}.0", "stereotype") for n in range(shades)]
    for g, group in enumerate(MALERT_GROUPS):
        items += [item("m-alert", str(1000 * g + n), group) for n in range(per_group)]
    return items


def keys(result):
    return [i.key for i in result.records]


def test_draw_is_stratified_and_sorted():
    result = select_items(pool(), ItemSelection(seed=3, shades=10, per_group=4))
    assert result.problems == []
    counts = Counter(i.vulnerability_type for i in result.records)
    assert counts == {"stereotype": 10, **dict.fromkeys(MALERT_GROUPS, 4)}
    assert keys(result) == sorted(keys(result))
    assert len(set(keys(result))) == len(result.records)


def test_same_seed_same_items_whatever_the_input_order():
    selection = ItemSelection(seed=7, shades=10, per_group=4)
    items = pool()
    assert keys(select_items(items, selection)) == keys(select_items(items[::-1], selection))


def test_different_seeds_draw_different_items():
    drawn = {
        tuple(keys(select_items(pool(), ItemSelection(seed=s, shades=10, per_group=4))))
        for s in range(4)
    }
    assert len(drawn) == 4


def test_a_change_in_one_stratum_leaves_the_others_alone():
    selection = ItemSelection(seed=1, shades=10, per_group=4)
    before = select_items(pool(shades=40), selection)
    after = select_items(pool(shades=41), selection)
    malert = [k for k in keys(before) if k.startswith("m-alert")]
    assert malert == [k for k in keys(after) if k.startswith("m-alert")]


def changed(before, after):
    """(keys drawn only before, keys drawn only after)."""
    return set(keys(before)) - set(keys(after)), set(keys(after)) - set(keys(before))


SEEDS = (0, 1, 7, 42, 2**40 + 3)


def test_one_item_becoming_usable_changes_at_most_one_drawn_key():
    # 181 of 200 as in a real build: the numpy draw over the sorted pool changed dozens.
    fixed = item("shades", "77.0-a", "stereotype")  # sorts among the others, not last
    base = pool(shades=200, per_group=20)
    swaps = 0
    for seed in SEEDS:
        selection = ItemSelection(seed=seed, shades=181, per_group=10)
        before = select_items(base, selection)
        after = select_items([*base, fixed], selection)
        out, into = changed(before, after)
        assert len(keys(after)) == len(keys(before)) == 181 + 10 * len(MALERT_GROUPS)
        assert len(out) == len(into) <= 1 and into <= {fixed.key}, seed
        swaps += len(into)
    assert swaps > 0  # the new item does get drawn: one in, one out


def test_removing_one_item_changes_at_most_one_drawn_key():
    base = pool(shades=200, per_group=20)
    for seed in SEEDS:
        selection = ItemSelection(seed=seed, shades=181, per_group=10)
        before = select_items(base, selection)
        drawn = [k for k in keys(before) if k.startswith("shades")]
        for gone in (drawn[0], drawn[len(drawn) // 2], "shades:199.0"):
            after = select_items([i for i in base if i.key != gone], selection)
            out, into = changed(before, after)
            assert len(out) == len(into) <= 1, (seed, gone)
            assert out <= {gone} and gone not in keys(after)
        malert_gone = next(k for k in keys(before) if k.startswith("m-alert"))
        after = select_items([i for i in base if i.key != malert_gone], selection)
        out, into = changed(before, after)
        assert out == {malert_gone} and len(into) == 1, seed


def test_the_draw_is_the_keyed_hash_ranking():
    # Pins the algorithm: a change to it reshuffles every unpinned version's items.
    import hashlib

    selection = ItemSelection(seed=5, shades=3, per_group=1)
    items = pool(shades=12, per_group=4)
    expected = []
    for stratum in VULNERABILITY_TYPES:
        wanted = 3 if stratum == "stereotype" else 1
        stratum_keys = [i.key for i in items if i.vulnerability_type == stratum]
        stratum_keys.sort(key=lambda k: hashlib.sha256(f"5\x1f{stratum}\x1f{k}".encode()).digest())
        expected += stratum_keys[:wanted]
    assert keys(select_items(items, selection)) == sorted(expected)


def test_fewer_items_than_asked_takes_all_and_reports():
    result = select_items(pool(shades=5, per_group=3), ItemSelection(shades=181, per_group=70))
    assert len(result.records) == 5 + 3 * len(MALERT_GROUPS)
    messages = [str(p) for p in result.problems]
    assert len(messages) == 1 + len(MALERT_GROUPS)
    assert "items: shades: only 5 stereotype items are usable but 181 were asked" in messages[0]
    assert not result.fatal


def test_key_file_pins_items_and_reports_unknown_keys(tmp_path):
    path = tmp_path / "items.txt"
    path.write_text(
        "# items of v1\nshades:3.0\nm-alert:1002  # a comment\n\nshades:999.0\nshades:3.0\n",
        encoding="utf-8",
    )
    result = select_items(pool(), ItemSelection(item_keys_file=path))
    assert keys(result) == ["m-alert:1002", "shades:3.0"]
    assert [(p.row, "999.0" in p.message, "line 2" in p.message) for p in result.problems] == [
        (5, True, False),
        (6, False, True),
    ]
    assert str(result.problems[0]).startswith(f"{path}:5: no usable item shades:999.0")
    assert f"but the item key file {path} (items.item_keys_file) pins it" in str(result.problems[0])


def test_inline_keys_and_missing_key_file(tmp_path):
    result = select_items(pool(), ItemSelection(item_keys=("shades:1.0", "m-alert:4000")))
    assert keys(result) == ["m-alert:4000", "shades:1.0"]
    missing = select_items(pool(), ItemSelection(item_keys_file=tmp_path / "none.txt"))
    assert missing.fatal and missing.records == []
