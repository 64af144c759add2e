from engram.text import ChunkConfig, chunk_text, clean_text, normalize_phrase


def test_non_latin_scripts_survive_normalisation() -> None:
    assert normalize_phrase("José Martí") == "josé martí"
    assert normalize_phrase("東京") == "東京"
    assert normalize_phrase("Москва") == "москва"
    assert normalize_phrase("القاهرة") == "القاهرة"
    assert len({normalize_phrase(x) for x in ["José Martí", "東京", "Москва", "القاهرة"]}) == 4


def test_normalisation_folds_case_punctuation_and_width() -> None:
    assert normalize_phrase("  The  U.S.A. ") == "the u s a"
    assert normalize_phrase("ＡＢＣ") == "abc"  # full-width letters fold to ASCII
    assert normalize_phrase("Straße") == normalize_phrase("STRASSE")
    assert normalize_phrase("snake_case-name") == "snake case name"
    assert normalize_phrase("!!!") == ""


def test_clean_text_drops_control_characters_but_keeps_newlines() -> None:
    assert clean_text("a\u0007b\nc\td") == "ab\nc\td"


def test_short_text_stays_whole_and_long_text_is_windowed() -> None:
    assert chunk_text("  one two three  ") == ["one two three"]
    assert chunk_text("   ") == []
    words = [f"w{i}" for i in range(25)]
    chunks = chunk_text(" ".join(words), ChunkConfig(max_words=10, overlap=3))
    assert chunks[0].split() == words[:10]
    assert chunks[1].split() == words[7:17]
    assert chunks[-1].split()[-1] == "w24"
    covered = {w for c in chunks for w in c.split()}
    assert covered == set(words)
