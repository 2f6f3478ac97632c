"""The --zip-pattern examples docs/instructors.md gives for Canvas and Moodle downloads collect the
students' zips under stable numeric ids (and refuse a name they do not match)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from course_lib.grading.autograder import submissions

DOCS = Path(__file__).resolve().parents[1] / "docs" / "instructors.md"
DOWNLOADS = {
    "Canvas": ["lovelaceada_48213_990412_02_collectives.zip", "babbagecharles_LATE_48214_990533_ring.zip",
               "smith-jonesmary_48215_990600_02_collectives-1.zip"],
    "Moodle": ["Ada Lovelace_48213_assignsubmission_file_02_collectives.zip",
               "Charles Babbage_48214_assignsubmission_file_my ring.zip",
               "Mary Smith-Jones_48215_assignsubmission_file_02_collectives.zip"],
}


def documented_pattern(platform: str) -> str:
    text = DOCS.read_text()
    section = text[text.index(f"- **{platform}**"):]
    return re.search(r"--zip-pattern '([^']+)'", section).group(1)


@pytest.mark.parametrize("platform", sorted(DOWNLOADS))
def test_documented_pattern_collects_a_platforms_download(platform, tmp_path):
    for name in DOWNLOADS[platform]:
        (tmp_path / name).write_bytes(b"")
    found = submissions.collect_zips(tmp_path, documented_pattern(platform), "02_collectives")
    assert sorted(found) == [(student, "02_collectives") for student in ("48213", "48214", "48215")]
    (tmp_path / "notes.zip").write_bytes(b"")
    with pytest.raises(ValueError, match="notes.zip does not match"):
        submissions.collect_zips(tmp_path, documented_pattern(platform), "02_collectives")
