"""Every YTsaurus feature option pooltree still accepts without implementing it is justified in
``docs/unsupported-options.md`` (issue 30), and the count the page states is the real one."""

from __future__ import annotations

import re
from pathlib import Path

from pooltree.config.support import OPERATION_UNSUPPORTED, USER_JOB_UNSUPPORTED, feature_unsupported_options

DOC = Path(__file__).resolve().parents[2] / "docs" / "unsupported-options.md"


def test_the_doc_names_every_unsupported_feature_option_and_its_count() -> None:
    text = DOC.read_text()
    tables = text.split("## Cannot apply to pooltree", 1)[1]
    listed = set(re.findall(r"`([a-z_]+)`", tables))
    options = feature_unsupported_options()
    missing = sorted({name for names in options.values() for name in names} - listed)
    assert missing == []
    total = sum(len(names) for names in options.values())
    assert f"48 before issue 30, {total} after" in text
    assert f"({len(options['tree'])} tree, {len(options['pool'])} pool," in text


def test_the_doc_names_every_unsupported_job_and_operation_option() -> None:
    section = DOC.read_text().split("## Job and operation options outside the scheduling strategy", 1)[1]
    listed = set(re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.MULTILINE))
    assert listed == set(USER_JOB_UNSUPPORTED) | set(OPERATION_UNSUPPORTED)
